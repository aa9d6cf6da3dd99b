/* Whole-file reads with a size cap, for the text files the project parses
 * (config.json, safetensors indexes, tuning profiles, prompts), from regular
 * files, pipes and standard input alike. */
#include "gp_common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

gp_status gp_file_open(const char *path, int *fd, uint64_t *size, bool *regular)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            GP_FAIL(GP_ERR_NOT_FOUND, "%s: not found (%s)", path, strerror(e));
        GP_FAIL(GP_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(*fd, &sb) != 0) {
        int e = errno;
        close(*fd);
        *fd = -1;
        GP_FAIL(GP_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    *size = (uint64_t)sb.st_size;
    *regular = S_ISREG(sb.st_mode);
    return GP_OK;
}

/* A pipe, a FIFO, a terminal or /proc: st_size says nothing of what there
 * is to read, so read until end of file, growing the buffer, and refuse
 * once more than cap bytes arrived. */
static gp_status read_stream(const char *path, int fd, size_t cap, char **out, size_t *len)
{
    size_t n = 0, size = 0;
    char *buf = NULL;
    for (;;) {
        if (n == size) {
            size_t want = size ? 2 * size : 4096;
            if (want > cap + 1)
                want = cap + 1; /* one byte past the cap tells "more than cap" apart */
            if (want <= n) {
                free(buf);
                GP_FAIL(GP_ERR_FORMAT, "%s: more than the %zu-byte cap for this input", path, cap);
            }
            char *b = realloc(buf, want + 1);
            if (!b) {
                free(buf);
                GP_FAIL(GP_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes", path, want + 1);
            }
            buf = b;
            size = want;
        }
        ssize_t r = read(fd, buf + n, size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            GP_FAIL(GP_ERR_IO, "%s: read error after %zu bytes: %s", path, n, strerror(e));
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > cap) {
            free(buf);
            GP_FAIL(GP_ERR_FORMAT, "%s: more than the %zu-byte cap for this input", path, cap);
        }
    }
    if (!buf && !(buf = malloc(1)))
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: cannot allocate 1 byte", path);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return GP_OK;
}

gp_status gp_read_file(const char *path, size_t cap, char **out, size_t *len)
{
    if (!path || !out || !len)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_read_file: path, out or len is NULL");
    *out = NULL;
    *len = 0;
    int fd;
    uint64_t size;
    bool regular;
    GP_TRY(gp_file_open(path, &fd, &size, &regular));
    if (!regular) {
        gp_status st = read_stream(path, fd, cap, out, len);
        close(fd);
        return st;
    }
    if (size > cap) {
        close(fd);
        GP_FAIL(GP_ERR_FORMAT, "%s: %llu bytes, more than the %zu-byte cap for this file", path,
                (unsigned long long)size, cap);
    }
    size_t n = (size_t)size, got = 0;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes", path, n + 1);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) { /* 0: the file shrank under us */
            int e = r < 0 ? errno : EIO;
            close(fd);
            free(buf);
            GP_FAIL(GP_ERR_IO, "%s: read error after %zu of %zu bytes: %s", path, got, n,
                    strerror(e));
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return GP_OK;
}

gp_status gp_read_input(const char *path, size_t cap, char **out, size_t *len)
{
    if (path && !strcmp(path, "-")) {
        if (!out || !len)
            GP_FAIL(GP_ERR_INVALID_ARG, "gp_read_input: out or len is NULL");
        *out = NULL;
        *len = 0;
        return read_stream("standard input (-)", STDIN_FILENO, cap, out, len);
    }
    return gp_read_file(path, cap, out, len);
}
