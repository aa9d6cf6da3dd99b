/* Replays saved inputs through one fuzz target without libFuzzer, so the
 * ordinary build checks every corpus file and every past crash under CTest.
 * Usage: fuzz_replay DIR_OR_FILE... (directories are walked recursively). */
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_target.h"

static size_t n_inputs;

/* Each input gets a buffer of exactly its size, as under libFuzzer, so a
 * sanitizer build sees any read past the end. */
static int replay_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)ftw;
    if (type == FTW_DNR || type == FTW_NS) {
        fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
        return 1;
    }
    if (type != FTW_F || !S_ISREG(sb->st_mode))
        return 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_replay: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    size_t n = (size_t)sb->st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        fprintf(stderr, "fuzz_replay: cannot read %zu bytes of %s\n", n, path);
        free(buf);
        fclose(f);
        return 1;
    }
    fclose(f);
    /* Named before the run so a crash's last line says which input it was. */
    fprintf(stderr, "fuzz_replay: %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    n_inputs++;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        size_t before = n_inputs;
        errno = 0;
        if (nftw(argv[i], replay_one, 16, FTW_PHYS) != 0) {
            fprintf(stderr, "fuzz_replay: %s: %s\n", argv[i],
                    errno ? strerror(errno) : "stopped on an unreadable input");
            return 1;
        }
        printf("fuzz_replay: %zu inputs from %s\n", n_inputs - before, argv[i]);
    }
    /* A corpus that went missing must not pass as "nothing crashed". */
    if (n_inputs == 0) {
        fprintf(stderr, "fuzz_replay: no inputs found\n");
        return 1;
    }
    printf("fuzz_replay: %zu inputs, no failure\n", n_inputs);
    return 0;
}
