/* Benchmark of the prefill attention kernels alone at the Llama-3-8B shape:
 * one causal prompt of T tokens (batch 1, 32 query heads over 8 KV heads,
 * head_dim 128, a paged cache of 16-token blocks), in one call or in the
 * engine's chunks, per kernel; median ms over repeats with device events and
 * TFLOP/s counted as FlashAttention's benchmark and the PyTorch SDPA peer
 * count causal attention (half of 4 T^2 head_dim per head). Usage: see usage(). */
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_attention.h"
#include "gp_tools.h"
#include "gp_weights.h"

#define GP_BENCH_NAME "gp_bench_prefill_attn"
#include "bench_check.h"
#include "bench_tables.h"

#define HEAD_DIM 128
#define BLOCK 16
#define MAX_TOKENS 16
#define MAX_KERNELS 4

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gp_bench_prefill_attn [options]\n"
            "  --tokens LIST     prompt lengths T, comma-separated (default 8192,16384,32768; at most %d)\n"
            "  --chunk N         queries per call, the engine's chunked prefill: each call attends to\n"
            "                    its chunk and every earlier token (default 0: the whole prompt in one call)\n"
            "  --kernels LIST    prefill attention kernels, comma-separated (%s; default mma,hopper)\n"
            "  --heads N, --kv N query and KV heads (default 32, 8)\n"
            "  --blocks MODE     random (default: the blocks scattered over the pool) or contig\n"
            "  --repeats N       timed repeats of the whole prompt, the median is printed (default 10)\n"
            "  --dtype T         bf16 (default) or fp16\n"
            "  --help            this text\n",
            MAX_TOKENS, GP_PREFILL_ATTN_KERNEL_NAMES);
}

/* gp_arg_long into an int: 0, or 2 after the message. */
static int arg_int(const char *text, long min, long max, const char *flag, int *out)
{
    long v;
    if (gp_arg_long("gp_bench_prefill_attn", text, min, max, flag, &v))
        return 2;
    *out = (int)v;
    return 0;
}

typedef struct opts {
    int n_heads, n_kv, chunk, repeats, contig;
    gp_dtype dtype;
} opts;

/* One row: prompt length T on kernel kern. Prints the row and, when
 * chunked, each call's TFLOP/s over the pairs it computes. */
static void run_row(const opts *o, int T, gp_prefill_attn_kernel kern, cudaStream_t st)
{
    const int chunk = o->chunk > 0 && o->chunk < T ? o->chunk : T;
    const int n_chunks = (T + chunk - 1) / chunk;
    const int cols = (T + BLOCK - 1) / BLOCK;
    const size_t esz = gp_dtype_size(o->dtype);
    const size_t pool_elems = (size_t)cols * BLOCK * o->n_kv * HEAD_DIM;
    const size_t q_elems = (size_t)T * o->n_heads * HEAD_DIM;

    void *k, *v, *q, *out;
    int32_t *d_table;
    gp_prefill_seq_desc *d_seqs;
    CK(cudaMalloc(&k, pool_elems * esz));
    CK(cudaMalloc(&v, pool_elems * esz));
    CK(cudaMalloc(&q, q_elems * esz));
    CK(cudaMalloc(&out, q_elems * esz));
    CK(cudaMalloc((void **)&d_table, (size_t)cols * sizeof(int32_t)));
    CK(cudaMalloc((void **)&d_seqs, (size_t)n_chunks * sizeof(gp_prefill_seq_desc)));
    GP(gp_synth_fill_device(k, o->dtype, pool_elems, 11, GP_T_WQKV, 0, 1.0f, st));
    GP(gp_synth_fill_device(v, o->dtype, pool_elems, 12, GP_T_WQKV, 1, 1.0f, st));
    GP(gp_synth_fill_device(q, o->dtype, q_elems, 13, GP_T_WQKV, 2, 1.0f, st));

    int32_t *table = malloc((size_t)cols * sizeof *table);
    gp_prefill_seq_desc *seqs = malloc((size_t)n_chunks * sizeof *seqs);
    float *ms = malloc((size_t)o->repeats * n_chunks * sizeof *ms), *tmp = malloc((size_t)o->repeats * sizeof *tmp);
    cudaEvent_t *ev = malloc((size_t)(n_chunks + 1) * sizeof *ev);
    if (!table || !seqs || !ms || !tmp || !ev) {
        fprintf(stderr, "gp_bench_prefill_attn: out of host memory\n");
        exit(1);
    }
    gp_bench_block_table(table, cols, o->contig, 42);
    for (int c = 0; c < n_chunks; c++) {
        int q0 = c * chunk;
        seqs[c] = (gp_prefill_seq_desc){.q_start = q0, .q_len = T - q0 < chunk ? T - q0 : chunk, .pos0 = q0,
                                        .table_row = 0};
    }
    CK(cudaMemcpy(d_table, table, (size_t)cols * sizeof(int32_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_seqs, seqs, (size_t)n_chunks * sizeof *seqs, cudaMemcpyHostToDevice));
    for (int i = 0; i <= n_chunks; i++)
        CK(cudaEventCreate(&ev[i]));

    gp_kv_view kv = {.dtype = o->dtype, .k = k, .v = v, .block_tables = d_table, .n_rows = 1,
                     .n_blocks = cols, .block_size = BLOCK, .n_kv_heads = o->n_kv, .head_dim = HEAD_DIM,
                     .max_blocks = cols};
    for (int rep = -2; rep < o->repeats; rep++) { /* two untimed passes first */
        CK(cudaEventRecord(ev[0], st));
        for (int c = 0; c < n_chunks; c++) {
            GP(gp_prefill_attn(&kv, o->n_heads, q, out, T, &d_seqs[c], 1, seqs[c].q_len, kern, st));
            CK(cudaEventRecord(ev[c + 1], st));
        }
        CK(cudaEventSynchronize(ev[n_chunks]));
        CK(cudaGetLastError());
        for (int c = 0; rep >= 0 && c < n_chunks; c++)
            CK(cudaEventElapsedTime(&ms[(size_t)c * o->repeats + rep], ev[c], ev[c + 1]));
    }

    /* Causal FLOPs of the queries q0 .. q0+n-1 over keys 0 .. their own
     * position: 4 head_dim per (query, key) pair and head. */
    double total_ms = 0;
    char detail[1024] = "";
    size_t used = 0;
    for (int c = 0; c < n_chunks; c++) {
        double q0 = seqs[c].q_start, n = seqs[c].q_len;
        double pairs = n * q0 + n * (n + 1) / 2;
        double flop = 4.0 * HEAD_DIM * o->n_heads * pairs;
        memcpy(tmp, &ms[(size_t)c * o->repeats], (size_t)o->repeats * sizeof *tmp);
        double m = gp_median_f(tmp, o->repeats);
        total_ms += m;
        if (n_chunks > 1 && used < sizeof detail - 32)
            used += (size_t)snprintf(detail + used, sizeof detail - used, "%s%.0f", c ? ", " : "",
                                     flop / (m * 1e-3) / 1e12);
    }
    double causal_flop = 4.0 * T * (double)T * HEAD_DIM * o->n_heads / 2; /* the peer's count */
    printf("| %d | %d | %s | %.3f | %.0f | %s |\n", T, chunk, gp_prefill_attn_kernel_name(kern), total_ms,
           causal_flop / (total_ms * 1e-3) / 1e12, n_chunks > 1 ? detail : "-");
    fflush(stdout);

    for (int i = 0; i <= n_chunks; i++)
        CK(cudaEventDestroy(ev[i]));
    CK(cudaFree(k));
    CK(cudaFree(v));
    CK(cudaFree(q));
    CK(cudaFree(out));
    CK(cudaFree(d_table));
    CK(cudaFree(d_seqs));
    free(table);
    free(seqs);
    free(ms);
    free(tmp);
    free(ev);
}

int main(int argc, char **argv)
{
    opts o = {.n_heads = 32, .n_kv = 8, .chunk = 0, .repeats = 10, .contig = 0, .dtype = GP_DTYPE_BF16};
    int tokens[MAX_TOKENS] = {8192, 16384, 32768}, n_tokens = 3;
    gp_prefill_attn_kernel kernels[MAX_KERNELS] = {GP_PREFILL_ATTN_MMA, GP_PREFILL_ATTN_HOPPER};
    int n_kernels = 2;
    enum { O_TOKENS = 256, O_CHUNK, O_KERNELS, O_HEADS, O_KV, O_BLOCKS, O_REPEATS, O_DTYPE, O_HELP };
    static const struct option lopts[] = {
        {"tokens", required_argument, NULL, O_TOKENS}, {"chunk", required_argument, NULL, O_CHUNK},
        {"kernels", required_argument, NULL, O_KERNELS}, {"heads", required_argument, NULL, O_HEADS},
        {"kv", required_argument, NULL, O_KV},           {"blocks", required_argument, NULL, O_BLOCKS},
        {"repeats", required_argument, NULL, O_REPEATS}, {"dtype", required_argument, NULL, O_DTYPE},
        {"help", no_argument, NULL, O_HELP},             {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
        const char *v = optarg;
        switch (c) {
        case O_TOKENS: {
            long t[MAX_TOKENS];
            if (gp_parse_long_list(v, 1, 1 << 20, "--tokens", t, MAX_TOKENS, &n_tokens) != GP_OK) {
                fprintf(stderr, "gp_bench_prefill_attn: %s\n", gp_last_error());
                return 2;
            }
            for (int i = 0; i < n_tokens; i++)
                tokens[i] = (int)t[i];
            break;
        }
        case O_KERNELS:
            if (gp_prefill_attn_kernel_parse_list(v, kernels, MAX_KERNELS, &n_kernels) != GP_OK) {
                fprintf(stderr, "gp_bench_prefill_attn: --kernels: %s\n", gp_last_error());
                return 2;
            }
            break;
        case O_CHUNK: if (arg_int(v, 0, 1 << 20, "--chunk", &o.chunk)) return 2; break;
        case O_HEADS: if (arg_int(v, 1, 65535, "--heads", &o.n_heads)) return 2; break;
        case O_KV: if (arg_int(v, 1, 65535, "--kv", &o.n_kv)) return 2; break;
        case O_REPEATS: if (arg_int(v, 1, 100000, "--repeats", &o.repeats)) return 2; break;
        case O_BLOCKS:
            if (strcmp(v, "random") && strcmp(v, "contig")) {
                fprintf(stderr, "gp_bench_prefill_attn: --blocks '%s': allowed random, contig\n", v);
                return 2;
            }
            o.contig = !strcmp(v, "contig");
            break;
        case O_DTYPE:
            if (gp_dtype_parse(v, 0, &o.dtype) != GP_OK) {
                fprintf(stderr, "gp_bench_prefill_attn: --dtype: %s\n", gp_last_error());
                return 2;
            }
            break;
        case O_HELP:
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gp_bench_prefill_attn: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (o.n_heads % o.n_kv) {
        fprintf(stderr, "gp_bench_prefill_attn: --heads %d must be a multiple of --kv %d\n", o.n_heads, o.n_kv);
        return 2;
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        fprintf(stderr, "gp_bench_prefill_attn: no CUDA GPU usable\n");
        return 1;
    }
    for (int i = 0; i < n_kernels; i++) /* before any row runs */
        if (gp_prefill_attn_kernel_check(kernels[i], HEAD_DIM, "gp_bench_prefill_attn --kernels") != GP_OK) {
            fprintf(stderr, "%s\n", gp_last_error());
            return 2;
        }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; %d heads, %d KV heads, head_dim %d, %d-token blocks (%s), %s, median of %d\n\n",
           prop.name, prop.multiProcessorCount, o.n_heads, o.n_kv, HEAD_DIM, BLOCK, o.contig ? "contig" : "random",
           gp_dtype_flag_name(o.dtype), o.repeats);
    printf("| T | queries per call | kernel | ms | TFLOP/s | each call's TFLOP/s |\n|---:|---:|---|---:|---:|---|\n");
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int t = 0; t < n_tokens; t++)
        for (int i = 0; i < n_kernels; i++)
            run_row(&o, tokens[t], kernels[i], st);
    CK(cudaStreamDestroy(st));
    return 0;
}
