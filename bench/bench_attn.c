/* Benchmark of the attention kernels at the Llama-3-8B shape: median time of
 * gp_decode_attn (and gp_rope_kv_append) over rotated layer caches, with the
 * achieved K+V read bandwidth. Usage (see usage() for every flag):
 *   gp_bench_attn [--sm N] [--cps N] [--splits N] [--repeats N] [--heads N]
 *                 [--kv N] [--green N] [--blocks random|contig] [--kernel NAME]
 *                 [--warps-cap N] [--no-kv-evict] [--dtype bf16|fp16] [--case B:C]...
 * (default: the four standard cases at 32 heads / 8 KV heads). --green N runs
 * on a green-context partition of N SMs (the attention side of an N:rest
 * split) and tells the split heuristic its SM count, as the engine does.
 * --kernel, --warps-cap and --no-kv-evict set the gp_decode_attn_params
 * fields kernel, stream_warps_cap and kv_evict_first. --dtype picks the
 * 16-bit type of q, the cache and the outputs (default bf16). */
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_attention.h"
#include "gp_green.h"
#include "gp_kvcache.h"
#include "gp_weights.h"

#define GP_BENCH_NAME "gp_bench_attn"
#include "bench_check.h"
#include "bench_tables.h"

static int N_HEADS = 32, N_KV = 8; /* --heads, --kv: e.g. 64/8 for Llama-3-70B */
static int CONTIG = 0;              /* --blocks contig: each row's blocks in order, rows one after another */
static gp_dtype DTYPE = GP_DTYPE_BF16; /* --dtype */
#define HEAD_DIM 128
#define BLOCK 16
#define MAX_CASES 16
/* Bytes of cache the rotation cycles through before reusing a layer: several
 * times the H100's 50 MB L2 so no repeat finds its K/V there. */
#define ROTATE_BYTES (256ull << 20)
#define MAX_ROTATE 16

/* n values of DTYPE at d: the synthetic generator's uniform values in
 * [-1, 1], rounded to DTYPE. */
static void fill_dev(void *d, uint64_t n, uint64_t seed, gp_tensor_kind kind, int layer, cudaStream_t st)
{
    GP(gp_synth_fill_device(d, DTYPE, n, seed, kind, layer, 1.0f, st));
}

static int parse_int(const char *s, const char *flag)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0 || v > 1 << 30) {
        fprintf(stderr, "gp_bench_attn: %s: '%s' is not a non-negative integer\n", flag, s);
        exit(2);
    }
    return (int)v;
}

static void run_case(int B, int C, const gp_decode_attn_params *p, int repeats, cudaStream_t st)
{
    const int cols = (C + BLOCK - 1) / BLOCK;
    const int n_blocks = B * cols;
    gp_kv_layout lay = { .n_layers = 1, .n_kv_heads = N_KV, .head_dim = HEAD_DIM,
                         .block_size = BLOCK, .n_blocks = n_blocks };
    const uint64_t layer_elems = gp_kv_layer_elems(&lay);
    const uint64_t layer_bytes = 2 * layer_elems * gp_dtype_size(DTYPE); /* K + V */
    int n_rot = (int)((ROTATE_BYTES + layer_bytes - 1) / layer_bytes);
    if (n_rot < 2)
        n_rot = 2;
    if (n_rot > MAX_ROTATE)
        n_rot = MAX_ROTATE;
    size_t free_b, total_b;
    CK(cudaMemGetInfo(&free_b, &total_b));
    while (n_rot > 1 && (uint64_t)n_rot * layer_bytes + (512ull << 20) > free_b)
        n_rot--;

    uint16_t *kv; /* 16-bit elements of DTYPE */
    CK(cudaMalloc((void **)&kv, (size_t)(n_rot * layer_bytes))); /* [n_rot][2][layer_elems] */
    fill_dev(kv, (uint64_t)n_rot * 2 * layer_elems, 1234, GP_T_WQKV, 0, st);

    /* Block tables: a random permutation, so rows scatter over the pool as
     * they do after sequences grow interleaved (--blocks random, the
     * default), or the identity (--blocks contig), to tell what the scatter
     * costs. */
    int32_t *perm = malloc((size_t)n_blocks * sizeof *perm);
    int32_t *lens = malloc((size_t)B * sizeof *lens);
    if (!perm || !lens) {
        fprintf(stderr, "gp_bench_attn: out of host memory\n");
        exit(1);
    }
    gp_bench_block_table(perm, n_blocks, CONTIG, 42);
    for (int b = 0; b < B; b++)
        lens[b] = C;
    int32_t *d_tables, *d_lens, *d_pos;
    CK(cudaMalloc((void **)&d_tables, (size_t)n_blocks * sizeof(int32_t))); /* [B][cols] */
    CK(cudaMalloc((void **)&d_lens, (size_t)B * sizeof(int32_t)));          /* [B] */
    CK(cudaMalloc((void **)&d_pos, (size_t)B * sizeof(int32_t)));           /* [B] */
    CK(cudaMemcpy(d_tables, perm, (size_t)n_blocks * sizeof(int32_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_lens, lens, (size_t)B * sizeof(int32_t), cudaMemcpyHostToDevice));
    for (int b = 0; b < B; b++)
        lens[b] = C - 1;
    CK(cudaMemcpy(d_pos, lens, (size_t)B * sizeof(int32_t), cudaMemcpyHostToDevice));

    const size_t q_elems = (size_t)B * N_HEADS * HEAD_DIM;
    const size_t qkv_elems = (size_t)B * (N_HEADS + 2 * N_KV) * HEAD_DIM;
    uint16_t *q, *out, *qkv;
    float *inv_freq;
    CK(cudaMalloc((void **)&q, q_elems * gp_dtype_size(DTYPE)));     /* [B][N_HEADS][128] */
    CK(cudaMalloc((void **)&out, q_elems * gp_dtype_size(DTYPE)));   /* [B][N_HEADS][128] */
    CK(cudaMalloc((void **)&qkv, qkv_elems * gp_dtype_size(DTYPE))); /* [B][(N_HEADS + 2 N_KV) 128] */
    CK(cudaMalloc((void **)&inv_freq, HEAD_DIM / 2 * sizeof(float)));
    fill_dev(q, q_elems, 99, GP_T_WQKV, 1, st);
    fill_dev(qkv, qkv_elems, 98, GP_T_WQKV, 2, st);
    gp_config cfg;
    GP(gp_config_preset("llama3-8b", &cfg));
    float h_inv[HEAD_DIM / 2];
    gp_rope_inv_freq(&cfg, h_inv);
    CK(cudaMemcpy(inv_freq, h_inv, sizeof h_inv, cudaMemcpyHostToDevice));

    int splits;
    GP(gp_decode_attn_splits(B, N_HEADS, N_KV, HEAD_DIM, C, p, &splits));
    size_t ws_bytes = gp_decode_attn_workspace_bytes(B, N_HEADS, HEAD_DIM, splits);
    void *ws = NULL;
    if (ws_bytes)
        CK(cudaMalloc(&ws, ws_bytes));

    gp_kv_view views[MAX_ROTATE];
    for (int r = 0; r < n_rot; r++) {
        gp_kv_view v = { .dtype = DTYPE, .k = kv + (size_t)(2 * r) * layer_elems,
                         .v = kv + (size_t)(2 * r + 1) * layer_elems,
                         .block_tables = d_tables, .lens = d_lens, .positions = d_pos,
                         .n_rows = B, .n_blocks = n_blocks, .block_size = BLOCK,
                         .n_kv_heads = N_KV, .head_dim = HEAD_DIM, .max_blocks = cols };
        views[r] = v;
    }

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *ms_attn = malloc((size_t)repeats * sizeof(float));
    float *ms_rope = malloc((size_t)repeats * sizeof(float));
    if (!ms_attn || !ms_rope) {
        fprintf(stderr, "gp_bench_attn: out of host memory\n");
        exit(1);
    }
    for (int w = 0; w < 3; w++)
        for (int r = 0; r < n_rot; r++)
            GP(gp_decode_attn(&views[r], B, N_HEADS, C, q, out, ws, ws_bytes, p, st));
    for (int i = 0; i < repeats; i++) {
        CK(cudaEventRecord(e0, st));
        for (int r = 0; r < n_rot; r++)
            GP(gp_decode_attn(&views[r], B, N_HEADS, C, q, out, ws, ws_bytes, p, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms_attn[i], e0, e1));
        ms_attn[i] /= (float)n_rot;
    }
    for (int w = 0; w < 3; w++)
        for (int r = 0; r < n_rot; r++)
            GP(gp_rope_kv_append(&views[r], B, N_HEADS, qkv, NULL, inv_freq, q, st));
    for (int i = 0; i < repeats; i++) {
        CK(cudaEventRecord(e0, st));
        for (int r = 0; r < n_rot; r++)
            GP(gp_rope_kv_append(&views[r], B, N_HEADS, qkv, NULL, inv_freq, q, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms_rope[i], e0, e1));
        ms_rope[i] /= (float)n_rot;
    }
    CK(cudaGetLastError());

    const double bytes = (double)B * C * N_KV * HEAD_DIM * gp_dtype_size(DTYPE) * 2; /* K + V read */
    float t = gp_median_f(ms_attn, repeats), tr = gp_median_f(ms_rope, repeats);
    printf("decode_attn %s B=%-5d C=%-5d splits=%-3d %8.4f ms  %7.1f GB/s  (K+V %.1f MB, floor "
           "%.4f ms at 3.1 TB/s; %d layers rotated)\n", gp_dtype_flag_name(DTYPE),
           B, C, splits, t, bytes / (t * 1e-3) / 1e9, bytes / 1e6, bytes / 3.1e12 * 1e3, n_rot);
    printf("rope_kv     %s B=%-5d            %8.4f ms\n", gp_dtype_flag_name(DTYPE), B, tr);
    fflush(stdout);

    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(kv));
    CK(cudaFree(d_tables));
    CK(cudaFree(d_lens));
    CK(cudaFree(d_pos));
    CK(cudaFree(q));
    CK(cudaFree(out));
    CK(cudaFree(qkv));
    CK(cudaFree(inv_freq));
    if (ws)
        CK(cudaFree(ws));
    free(perm);
    free(lens);
    free(ms_attn);
    free(ms_rope);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gp_bench_attn [options]\n"
            "  --case B:C          batch B at context C (repeatable, at most %d; default\n"
            "                      1024:384 256:1024 64:2048 8:1024)\n"
            "  --heads N, --kv N   query and KV heads (default 32, 8)\n"
            "  --blocks MODE       random (default) or contig block tables\n"
            "  --repeats N         timed repeats, the median is printed (default 20)\n"
            "  --green N           run on a green-context partition of N SMs\n"
            "  --sm N              SMs the split heuristic assumes (params sm_count)\n"
            "  --cps N             CTAs per SM it assumes (params ctas_per_sm_hint)\n"
            "  --splits N          force N context splits (params force_splits)\n"
            "  --kernel NAME       auto (default), cudacore, cudacore_pipe, mma or stream\n"
            "                      (params kernel)\n"
            "  --warps-cap N       streaming kernel: at most N warps per SM, even, 0 = no cap\n"
            "                      (params stream_warps_cap)\n"
            "  --no-kv-evict       streaming kernel: K/V copies without L2 evict_first\n"
            "                      (params kv_evict_first = 0)\n"
            "  --dtype T           bf16 (default) or fp16: q, K/V cache and outputs\n"
            "  --help              this text\n",
            MAX_CASES);
}

int main(int argc, char **argv)
{
    gp_decode_attn_params p = gp_decode_attn_default_params();
    int repeats = 20, n_cases = 0, green = 0;
    int cases[MAX_CASES][2];
    enum { O_SM = 256, O_CPS, O_SPLITS, O_HEADS, O_KV, O_BLOCKS, O_GREEN, O_REPEATS, O_CASE,
           O_KERNEL, O_WARPS_CAP, O_NO_KV_EVICT, O_DTYPE, O_HELP };
    static const struct option opts[] = {
        { "sm", required_argument, NULL, O_SM },
        { "cps", required_argument, NULL, O_CPS },
        { "splits", required_argument, NULL, O_SPLITS },
        { "heads", required_argument, NULL, O_HEADS },
        { "kv", required_argument, NULL, O_KV },
        { "blocks", required_argument, NULL, O_BLOCKS },
        { "green", required_argument, NULL, O_GREEN },
        { "repeats", required_argument, NULL, O_REPEATS },
        { "case", required_argument, NULL, O_CASE },
        { "kernel", required_argument, NULL, O_KERNEL },
        { "warps-cap", required_argument, NULL, O_WARPS_CAP },
        { "no-kv-evict", no_argument, NULL, O_NO_KV_EVICT },
        { "dtype", required_argument, NULL, O_DTYPE },
        { "help", no_argument, NULL, O_HELP },
        { NULL, 0, NULL, 0 },
    };
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        const char *v = optarg;
        switch (o) {
        case O_SM: p.sm_count = parse_int(v, "--sm"); break;
        case O_CPS: p.ctas_per_sm_hint = parse_int(v, "--cps"); break;
        case O_SPLITS: p.force_splits = parse_int(v, "--splits"); break;
        case O_HEADS: N_HEADS = parse_int(v, "--heads"); break;
        case O_KV: N_KV = parse_int(v, "--kv"); break;
        case O_GREEN: green = parse_int(v, "--green"); break;
        case O_REPEATS: repeats = parse_int(v, "--repeats"); break;
        case O_WARPS_CAP: p.stream_warps_cap = parse_int(v, "--warps-cap"); break;
        case O_NO_KV_EVICT: p.kv_evict_first = 0; break;
        case O_DTYPE:
            if (gp_dtype_parse(v, 0, &DTYPE) != GP_OK) {
                fprintf(stderr, "gp_bench_attn: --dtype: %s\n", gp_last_error());
                return 2;
            }
            break;
        case O_BLOCKS:
            if (strcmp(v, "random") && strcmp(v, "contig")) {
                fprintf(stderr, "gp_bench_attn: --blocks '%s': allowed random, contig\n", v);
                return 2;
            }
            CONTIG = !strcmp(v, "contig");
            break;
        case O_KERNEL:
            if (gp_attn_kernel_parse(v, &p.kernel) != GP_OK) {
                fprintf(stderr, "gp_bench_attn: --kernel: %s\n", gp_last_error());
                return 2;
            }
            break;
        case O_CASE: {
            int B, C;
            char tail;
            if (n_cases == MAX_CASES || sscanf(v, "%d:%d%c", &B, &C, &tail) != 2 || B < 1 || C < 1) {
                fprintf(stderr, "gp_bench_attn: --case '%s' is not B:C (at most %d cases)\n", v,
                        MAX_CASES);
                return 2;
            }
            cases[n_cases][0] = B;
            cases[n_cases][1] = C;
            n_cases++;
            break;
        }
        case O_HELP:
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2; /* getopt_long named the bad option */
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gp_bench_attn: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (repeats < 1)
        repeats = 1;
    if (N_KV < 1 || N_HEADS < N_KV || N_HEADS % N_KV) {
        fprintf(stderr, "gp_bench_attn: --heads %d must be a positive multiple of --kv %d\n",
                N_HEADS, N_KV);
        return 2;
    }
    if (gp_decode_attn_params_check(&p) != GP_OK) { /* before any device work */
        fprintf(stderr, "gp_bench_attn: %s\n", gp_last_error());
        return 2;
    }
    if (n_cases == 0) {
        static const int def[4][2] = { { 1024, 384 }, { 256, 1024 }, { 64, 2048 }, { 8, 1024 } };
        memcpy(cases, def, sizeof def);
        n_cases = 4;
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        fprintf(stderr, "gp_bench_attn: no CUDA GPU usable\n");
        return 1;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; shape: %d heads, %d KV heads, head_dim %d, block %d, blocks %s; "
           "median of %d; kernel %s, stream warps cap %d, K/V evict_first %d; dtype %s\n", prop.name,
           prop.multiProcessorCount, N_HEADS, N_KV, HEAD_DIM, BLOCK, CONTIG ? "contig" : "random",
           repeats, gp_attn_kernel_name(p.kernel), p.stream_warps_cap, p.kv_evict_first,
           gp_dtype_flag_name(DTYPE));
    cudaStream_t st = NULL;
    gp_green_pool *pool = NULL;
    if (green > 0) {
        gp_split_req req = { .attn_sms = green, .ffn_sms = GP_SPLIT_REST };
        gp_green_pool_params pp = gp_green_pool_default_params();
        pp.splits = &req;
        pp.n_splits = 1;
        GP(gp_green_pool_create(&pp, &pool));
        const gp_green_pair *pair = gp_green_pool_pair(pool, 0);
        if (!pair->partitioned) {
            fprintf(stderr, "gp_bench_attn: --green %d: no green-context partition here (%s)\n", green,
                    gp_green_pool_fallback_reason(pool));
            gp_green_pool_destroy(pool);
            return 1;
        }
        st = (cudaStream_t)pair->attn_stream;
        if (p.sm_count == 0)
            p.sm_count = pair->attn_sms;
        printf("partition: %d SMs obtained for --green %d (the split heuristic assumes %d)\n",
               pair->attn_sms, green, p.sm_count);
    } else {
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    }
    for (int c = 0; c < n_cases; c++)
        run_case(cases[c][0], cases[c][1], &p, repeats, st);
    if (pool)
        gp_green_pool_destroy(pool);
    else
        CK(cudaStreamDestroy(st));
    return 0;
}
