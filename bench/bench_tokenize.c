/* gp_bench_tokenize: encode a ~1 MB text (the tokenizer test corpus
 * repeated) with each tokenizer given, N times on one thread; prints the
 * median, min and max ms and MB/s. Asserts nothing.
 * Usage: gp_bench_tokenize [--repeats N] [--mb M] [--text FILE] [TOKENIZER...]
 * (a tokenizer.json, a tiktoken tokenizer.model, or a directory holding one;
 * none: every committed test tokenizer, the Qwen2-style NFC and the Metaspace
 * ones included). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gp_tokenizer.h"

#ifndef GP_BENCH_CORPUS
#define GP_BENCH_CORPUS "tests/tokenizer/corpus.txt"
#endif
#ifndef GP_BENCH_TOKDIR
#define GP_BENCH_TOKDIR "tests/data/tokenizer"
#endif

static const char *const default_toks[] = {
    GP_BENCH_TOKDIR "/bl_llama3",  GP_BENCH_TOKDIR "/bl_gpt2",    GP_BENCH_TOKDIR "/sp_llama2",
    GP_BENCH_TOKDIR "/bl_qwen2",   GP_BENCH_TOKDIR "/sp_mistral", GP_BENCH_TOKDIR "/sp_ms_split",
    GP_BENCH_TOKDIR "/tiktoken",
};

/* a positive integer, or nonzero */
static int parse_positive(const char *s, long *out)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 1 || v > 100000)
        return 1;
    *out = v;
    return 0;
}

static int usage(FILE *f)
{
    fprintf(f, "usage: gp_bench_tokenize [--repeats N] [--mb M] [--text FILE] [TOKENIZER...]\n");
    return f == stdout ? 0 : 2;
}

int main(int argc, char **argv)
{
    long repeats = 11, mb = 1;
    const char *src = GP_BENCH_CORPUS;
    int first = 1;
    if (argc > 1 && !strcmp(argv[1], "-h"))
        return usage(stdout);
    for (; first < argc && !strncmp(argv[first], "--", 2); first += 2) {
        if (!strcmp(argv[first], "--help"))
            return usage(stdout);
        if (first + 1 >= argc)
            return usage(stderr);
        if (!strcmp(argv[first], "--repeats")) {
            if (parse_positive(argv[first + 1], &repeats))
                return usage(stderr);
        } else if (!strcmp(argv[first], "--mb")) {
            if (parse_positive(argv[first + 1], &mb))
                return usage(stderr);
        } else if (!strcmp(argv[first], "--text")) {
            src = argv[first + 1];
        } else {
            return usage(stderr);
        }
    }
    const char *const *toks = (const char *const *)argv + first;
    int n_toks = argc - first;
    if (n_toks == 0) {
        toks = default_toks;
        n_toks = (int)(sizeof default_toks / sizeof *default_toks);
    }
    char *unit = NULL;
    size_t unit_len = 0;
    if (gp_read_file(src, (size_t)64 << 20, &unit, &unit_len) != GP_OK || unit_len == 0) {
        fprintf(stderr, "gp_bench_tokenize: %s\n", gp_last_error());
        return 1;
    }
    size_t want = (size_t)mb << 20, len = 0;
    char *text = malloc(want + unit_len);
    if (!text)
        return 1;
    while (len < want) { /* whole copies, so no character is cut */
        memcpy(text + len, unit, unit_len);
        len += unit_len;
    }
    printf("text: %s repeated, %zu bytes; %ld repeats per tokenizer, one thread\n", src, len, repeats);
    printf("%-48s %10s %10s %10s %10s %10s\n", "tokenizer", "tokens", "median ms", "min ms", "max ms", "MB/s");
    double *ms = malloc((size_t)repeats * sizeof *ms);
    for (int a = 0; a < n_toks; a++) {
        gp_tokenizer *t = NULL;
        struct stat sb;
        gp_status st = stat(toks[a], &sb) == 0 && S_ISDIR(sb.st_mode) ? gp_tokenizer_load_dir(toks[a], &t)
                                                                        : gp_tokenizer_load(toks[a], &t);
        if (st != GP_OK) {
            fprintf(stderr, "gp_bench_tokenize: %s\n", gp_last_error());
            return 1;
        }
        size_t n = 0;
        for (long r = 0; r < repeats; r++) {
            int32_t *ids = NULL;
            double t0 = gp_now_s();
            st = gp_tokenizer_encode(t, text, len, false, &ids, &n);
            ms[r] = (gp_now_s() - t0) * 1e3;
            free(ids);
            if (st != GP_OK) {
                fprintf(stderr, "gp_bench_tokenize: %s\n", gp_last_error());
                return 1;
            }
        }
        double med = gp_median_d(ms, (int)repeats);
        printf("%-48s %10zu %10.1f %10.1f %10.1f %10.1f\n", toks[a], n, med, ms[0], ms[repeats - 1],
               (double)len / (1 << 20) / (med / 1e3));
        gp_tokenizer_free(t);
    }
    free(ms);
    free(text);
    free(unit);
    return 0;
}
