/* gp_bench_cpu_attn: the CPU partial decode attention (attention/
 * gp_cpu_attn_partial) on the Llama-3-8B attention shape (32 query heads
 * over 8 KV heads, head_dim 128, bf16, blocks of 16) over each row's
 * offloaded positions, per batch: median ms per layer call, the rate of the
 * K and V bytes it reads, beside the host's read bandwidth measured in the
 * same program and the PCIe link (issue #18: stream the offloaded blocks to
 * the GPU, or attend to them where they are). Every call draws a fresh
 * random block table over a pool of at least 1 GiB, so no call finds its
 * blocks in the cache. No GPU; asserts nothing. Run with --help for the flags. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cpu.h"
#include "gp_kvcache.h"
#include "gp_tools.h"
#include "gp_attention.h"

#define NAME "gp_bench_cpu_attn"
#define MAX_BATCHES 16
#define MAX_B 1024
#define N_HEADS 32
#define N_KV 8
#define HEAD_DIM 128
#define BLOCK 16
#define LAYERS 32      /* Llama-3-8B: the projection of a decode step */
#define LINK_GBS 55.0  /* the PCIe link of the GPU machine (issue #18) */
#define MIN_POOL_BYTES (1ull << 30)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " NAME " [--threads N] [--repeat N] [--batch LIST] [--positions N] [--chunk N] [--plain]\n"
            "  The CPU partial decode attention on the llama3-8b attention shape (32 heads over 8 KV heads,\n"
            "  head_dim 128, bf16, blocks of 16) with random data.\n"
            "  --threads N     CPU threads of the attention and of the bandwidth read: 0 (default) the online\n"
            "                  CPUs up to 16, or 1..16\n"
            "  --repeat N      timed calls per batch, 1..10000 (default 20); the median is reported\n"
            "  --batch LIST    comma-separated batches, each 1..%d (default 8,64)\n"
            "  --positions N   offloaded positions per row, 1..131072 (default 2048)\n"
            "  --chunk N       positions of a work item (params chunk_positions), 16..4096 (default 256)\n"
            "  --plain         the plain C loops instead of AVX2 (same results)\n",
            MAX_B);
}

/* B x nb distinct blocks of the pool in random order: a partial
 * Fisher-Yates over ids, which stays a permutation from call to call. */
static void random_tables(int32_t *ids, int n_blocks, int32_t *tables, int n)
{
    for (int i = 0; i < n; i++) {
        const int j = i + (int)(gp_bench_rand_u64() % (uint64_t)(n_blocks - i));
        const int32_t t = ids[i];
        ids[i] = ids[j], ids[j] = t;
        tables[i] = ids[i];
    }
}

int main(int argc, char **argv)
{
    long threads = 0, repeat = 20, positions = 2048, chunk = 256;
    int plain = 0;
    long batches[MAX_BATCHES] = {8, 64};
    int n_batches = 2;
    static const struct option opts[] = {
        {"threads", required_argument, NULL, 't'},   {"repeat", required_argument, NULL, 'r'},
        {"batch", required_argument, NULL, 'b'},     {"positions", required_argument, NULL, 'p'},
        {"chunk", required_argument, NULL, 'c'},     {"plain", no_argument, NULL, 'P'},
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
    };
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 't':
            if (gp_arg_long(NAME, optarg, 0, GP_POOL_MAX_THREADS, "--threads", &threads))
                return 2;
            break;
        case 'r':
            if (gp_arg_long(NAME, optarg, 1, 10000, "--repeat", &repeat))
                return 2;
            break;
        case 'p':
            if (gp_arg_long(NAME, optarg, 1, 131072, "--positions", &positions))
                return 2;
            break;
        case 'c':
            if (gp_arg_long(NAME, optarg, 16, 4096, "--chunk", &chunk))
                return 2;
            break;
        case 'b':
            if (gp_parse_long_list(optarg, 1, MAX_B, "--batch", batches, MAX_BATCHES, &n_batches) != GP_OK) {
                fprintf(stderr, NAME ": %s\n", gp_last_error());
                return 2;
            }
            break;
        case 'P': plain = 1; break;
        case 'h': usage(stdout); return 0;
        default: return gp_bench_bad_flag(NAME, argv, usage);
        }
    }
    if (gp_bench_extra_args(NAME, argc, argv, usage))
        return 2;

    int max_B = 0;
    for (int i = 0; i < n_batches; i++)
        max_B = batches[i] > max_B ? (int)batches[i] : max_B;
    const int nb = (int)((positions + BLOCK - 1) / BLOCK); /* blocks of a row */
    const size_t block_elems = (size_t)BLOCK * N_KV * HEAD_DIM;
    const uint64_t min_blocks = MIN_POOL_BYTES / (2 * block_elems * sizeof(uint16_t));
    const uint64_t need = (uint64_t)max_B * (uint64_t)nb;
    if (need > INT32_MAX / 2) {
        fprintf(stderr, NAME ": %d rows x %d blocks do not fit a pool of int block ids\n", max_B, nb);
        return 2;
    }
    const int n_blocks = (int)(need > min_blocks ? need : min_blocks);
    const gp_kv_layout l = {.n_layers = 1, .n_kv_heads = N_KV, .head_dim = HEAD_DIM, .block_size = BLOCK,
                            .n_blocks = n_blocks};
    const size_t pool = (size_t)n_blocks * block_elems;
    uint16_t *k = malloc(pool * sizeof *k), *v = malloc(pool * sizeof *v);
    int32_t *ids = malloc(sizeof(int32_t) * n_blocks), *tables = malloc(sizeof(int32_t) * need);
    int32_t *lens = malloc(sizeof(int32_t) * max_B);
    float *q = malloc(sizeof(float) * max_B * N_HEADS * HEAD_DIM), *o = malloc(sizeof(float) * max_B * N_HEADS * HEAD_DIM);
    float *lse = malloc(sizeof(float) * max_B * N_HEADS);
    double *ms = malloc(sizeof(double) * repeat);
    if (!k || !v || !ids || !tables || !lens || !q || !o || !lse || !ms) {
        fprintf(stderr, NAME ": out of memory (two pools of %.2f GB)\n", (double)pool * 2 / 1e9);
        return 1;
    }
    for (size_t i = 0; i < pool; i++) /* keys and values of unit scale, like RoPE'd activations */
        k[i] = gp_f32_to_bf16(gp_bench_uniform_pm(1.0f)), v[i] = gp_f32_to_bf16(gp_bench_uniform_pm(1.0f));
    for (int i = 0; i < n_blocks; i++)
        ids[i] = i;
    for (size_t i = 0; i < (size_t)max_B * N_HEADS * HEAD_DIM; i++)
        q[i] = gp_bf16_to_f32(gp_f32_to_bf16(gp_bench_uniform_pm(1.0f)));
    for (int b = 0; b < max_B; b++)
        lens[b] = (int32_t)positions;

    gp_cpu_attn_params p = gp_cpu_attn_default_params();
    p.n_threads = (int)threads, p.chunk_positions = (int)chunk, p.simd = !plain;
    gp_cpu_attn *a;
    if (gp_cpu_attn_create(&p, &a) != GP_OK) {
        fprintf(stderr, NAME ": %s\n", gp_last_error());
        return 1;
    }
    const int T = gp_cpu_attn_threads(a);
    const double host_gbs = gp_bench_host_read_gbs(T);
    printf("%s: llama3-8b attention (%d heads over %d KV heads, head_dim %d), bf16, blocks of %d, %ld offloaded "
           "positions a row, pool %.2f GB (K+V), %d threads, %s loops, chunk %ld, %ld repeats\n", NAME, N_HEADS, N_KV,
           HEAD_DIM, BLOCK, positions, (double)pool * 4 / 1e9, T, gp_cpu_attn_uses_simd(a) ? "AVX2" : "plain", chunk,
           repeat);
    printf("host read bandwidth (%d threads, %.0f MiB streamed): %.1f GB/s\n", T,
           (double)GP_BENCH_BW_BYTES / (1 << 20), host_gbs);
    printf("%4s %9s %9s %10s %8s %8s %12s %12s %8s\n", "B", "ms", "min ms", "K+V MB", "GB/s", "of host",
           "step ms cpu", "step ms link", "cpu/link");
    for (int bi = 0; bi < n_batches; bi++) {
        const int B = (int)batches[bi];
        const double bytes = (double)B * positions * N_KV * HEAD_DIM * 2.0 * 2.0;
        for (int r = -1; r < repeat; r++) { /* r = -1: warm-up, scratch grown */
            random_tables(ids, n_blocks, tables, B * nb);
            const double t0 = gp_now_s();
            if (gp_cpu_attn_partial(a, &l, GP_DTYPE_BF16, k, v, tables, nb, lens, B, N_HEADS, q, o, lse) != GP_OK) {
                fprintf(stderr, NAME ": %s\n", gp_last_error());
                return 1;
            }
            if (r >= 0)
                ms[r] = (gp_now_s() - t0) * 1e3;
        }
        const double med = gp_median_d(ms, (int)repeat), mn = ms[0];
        const double gbs = bytes / (med * 1e-3) / 1e9, link_ms = bytes / (LINK_GBS * 1e9) * 1e3;
        printf("%4d %9.3f %9.3f %10.1f %8.2f %7.0f%% %12.2f %12.2f %8.2f\n", B, med, mn, bytes / 1e6, gbs,
               100.0 * gbs / host_gbs, LAYERS * med, LAYERS * link_ms, med / link_ms);
    }
    printf("ms: one layer's call (median over calls, each on a fresh random block table); GB/s: K+V bytes "
           "(B x positions x %d KV heads x %d x 2 bytes x 2) over the median; step ms: %d layers, on the CPU "
           "(cpu) or copied over the link at %.0f GB/s (link); cpu/link > 1: the link is faster.\n", N_KV, HEAD_DIM,
           LAYERS, LINK_GBS);
    gp_cpu_attn_destroy(a);
    free(k), free(v), free(ids), free(tables), free(lens), free(q), free(o), free(lse), free(ms);
    return 0;
}
