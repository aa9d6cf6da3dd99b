/* Output paths checked before the long work that ends in writing them: the
 * honest test is to open (or make) the very path, then undo what we made. */
#include "gp_tools.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

gp_status gp_check_out_file(const char *path, const char *flag)
{
    GP_TRY(gp_parse_path(path, flag));
    struct stat sb;
    /* a FIFO opened for writing waits for (or, non-blocking, wants) a reader
     * that only comes once we write: trust it as it is */
    if (stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode))
        return GP_OK;
    bool made = true;
    /* O_EXCL tells "we made it" apart from "it was there", which must keep
     * its bytes (no O_TRUNC) until the real write replaces them */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NONBLOCK, 0666);
    if (fd < 0 && errno == EEXIST) {
        made = false;
        fd = open(path, O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    }
    if (fd < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s '%s': cannot write: %s; allowed: a writable file, or a new file in a "
                "writable directory", flag, path, strerror(errno));
    close(fd);
    if (made && unlink(path) != 0)
        GP_FAIL(GP_ERR_IO, "%s '%s': cannot remove the empty file made to test it: %s", flag, path,
                strerror(errno));
    return GP_OK;
}

gp_status gp_check_out_dir(const char *path, const char *flag)
{
    GP_TRY(gp_parse_path(path, flag));
    struct stat sb;
    bool made = false;
    if (stat(path, &sb) != 0) {
        bool absent = errno == ENOENT;
        if (!absent || mkdir(path, 0755) != 0)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s '%s': cannot %s: %s; allowed: a writable directory, or one that can "
                    "be made (one level)", flag, path, absent ? "make the directory" : "use it", strerror(errno));
        made = true;
    } else if (!S_ISDIR(sb.st_mode)) {
        GP_FAIL(GP_ERR_INVALID_ARG, "%s '%s': %s", flag, path, "not a directory; allowed: a writable directory, or "
                "one that can be made (one level)");
    }
    char probe[PATH_MAX];
    if (snprintf(probe, sizeof probe, "%s/.gp-write-test-XXXXXX", path) >= (int)sizeof probe) {
        if (made)
            rmdir(path);
        GP_FAIL(GP_ERR_INVALID_ARG, "%s '%s': the path is too long", flag, path);
    }
    int fd = mkstemp(probe);
    int e = errno;
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    }
    if (made)
        rmdir(path);
    if (fd < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s '%s': cannot write files in it: %s; allowed: a writable directory, or "
                "one that can be made (one level)", flag, path, strerror(e));
    return GP_OK;
}
