/* The helpers of the CPU benchmarks (bench_cpu.h): the host read bandwidth, their random data. */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_cpu.h"
#include "gp_common.h"

typedef struct bw_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_arg;

static void *bw_read(void *v)
{
    bw_arg *a = v;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= a->n; i += 4)
        s0 += a->p[i], s1 += a->p[i + 1], s2 += a->p[i + 2], s3 += a->p[i + 3];
    for (; i < a->n; i++)
        s0 += a->p[i];
    a->sum = s0 + s1 + s2 + s3;
    return NULL;
}

double gp_bench_host_read_gbs(int T)
{
    uint64_t *buf = malloc(GP_BENCH_BW_BYTES);
    if (!buf)
        return NAN;
    const size_t n = GP_BENCH_BW_BYTES / sizeof *buf;
    for (size_t i = 0; i < n; i++)
        buf[i] = i;
    double gbs[5];
    uint64_t sink = 0;
    for (int pass = -1; pass < 5; pass++) {
        pthread_t th[16];
        bw_arg a[16];
        const double t0 = gp_now_s();
        for (int t = 0; t < T; t++) {
            a[t] = (bw_arg){.p = buf + n * t / T, .n = n * (t + 1) / T - n * t / T};
            if (t > 0)
                pthread_create(&th[t], NULL, bw_read, &a[t]);
        }
        bw_read(&a[0]);
        for (int t = 1; t < T; t++)
            pthread_join(th[t], NULL);
        const double dt = gp_now_s() - t0;
        for (int t = 0; t < T; t++)
            sink += a[t].sum;
        if (pass >= 0)
            gbs[pass] = (double)GP_BENCH_BW_BYTES / dt / 1e9;
    }
    free(buf);
    if (sink == 42) /* keeps the sums alive */
        printf(" ");
    return gp_median_d(gbs, 5);
}


static uint64_t g_rng = 0x243f6a8885a308d3ull;

uint64_t gp_bench_rand_u64(void)
{
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return g_rng * 0x2545f4914f6cdd1dull;
}

float gp_bench_uniform_pm(float s)
{
    return s * (float)((double)(gp_bench_rand_u64() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

int gp_bench_bad_flag(const char *prog, char **argv, void (*usage)(FILE *))
{
    if (optopt)
        fprintf(stderr, "%s: %s needs a value or is not a flag of this program\n", prog, argv[optind - 1]);
    else
        fprintf(stderr, "%s: unknown flag %s\n", prog, argv[optind - 1]);
    usage(stderr);
    return 2;
}

int gp_bench_extra_args(const char *prog, int argc, char **argv, void (*usage)(FILE *))
{
    if (optind >= argc)
        return 0;
    fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
    usage(stderr);
    return 2;
}
