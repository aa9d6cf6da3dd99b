/* gp_bench_corun: what co-running costs each side of a split, with stand-ins
 * whose appetite is known. On each A:F green-context split it times the F
 * side's GEMMs of one micro-batch (cuBLASLt's heuristic pick, and the fastest
 * candidate timed on the partition) and a pure HBM reader on A (the K/V
 * stream of decode attention without the arithmetic), each alone and both at
 * once, and reports each side's slowdown and the bytes/s both move together.
 * Benchmark only: medians of device-event timings, nothing asserted. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "gp_green.h"
#include "gp_model.h"
#include "kernels.h"
#include "gp_weights.h"

#define MAX_SPLITS 16
#define MAX_REPS 200
#define BULK_STAGES 6
#define BULK_CHUNK (32u << 10)

/* ------------------------------------------------------------ readers */

/* Every thread streams 16-byte loads, 4 in flight, past L1; one pass over
 * the buffer, or passes until *stop when loop (co-running). */
__global__ void __launch_bounds__(256) ld_reader(const uint4 *__restrict__ buf, size_t n16,
                                                 const volatile int *stop, int loop,
                                                 unsigned long long *bytes, unsigned *sink)
{
    const size_t nth = (size_t)gridDim.x * blockDim.x;
    unsigned acc = 0;
    unsigned long long done = 0;
    do {
        size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
        for (; i + 3 * nth < n16; i += 4 * nth) {
            uint4 a = __ldcs(buf + i), b = __ldcs(buf + i + nth), c = __ldcs(buf + i + 2 * nth),
                  d = __ldcs(buf + i + 3 * nth);
            acc ^= a.x ^ b.y ^ c.z ^ d.w;
            done += 64;
        }
    } while (loop && !*stop);
    atomicAdd(bytes, done);
    if (acc == 0x9e3779b9u) /* keeps the loads; practically never true */
        *sink = acc;
}

__device__ __forceinline__ unsigned smem_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void bulk_issue(unsigned dst, const char *src, unsigned bar)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                 "r"(BULK_CHUNK) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(dst), "l"(src), "r"(BULK_CHUNK), "r"(bar) : "memory");
}

__device__ __forceinline__ void bulk_wait(unsigned bar, unsigned parity)
{
    unsigned ok = 0;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
    } while (!ok);
}

/* The tensor memory accelerator's bulk copies (cp.async.bulk) into
 * BULK_STAGES x 32 KiB of shared memory, one issuing thread per CTA and one
 * CTA per SM: the most bytes one SM can have in flight. */
__global__ void __launch_bounds__(32) bulk_reader(const char *__restrict__ buf, size_t n_chunks,
                                                  const volatile int *stop, int loop,
                                                  unsigned long long *bytes, unsigned *sink)
{
    extern __shared__ __align__(128) unsigned char stage[];
    __shared__ __align__(8) unsigned long long bar[BULK_STAGES];
    if (threadIdx.x != 0)
        return;
    for (int s = 0; s < BULK_STAGES; s++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    unsigned acc = 0, phase = 0;
    unsigned long long done = 0;
    const unsigned base = smem_addr(stage);
    do {
        size_t next = blockIdx.x;
        for (int s = 0; s < BULK_STAGES && next < n_chunks; s++, next += gridDim.x)
            bulk_issue(base + s * BULK_CHUNK, buf + next * BULK_CHUNK, smem_addr(&bar[s]));
        int s = 0;
        for (size_t k = blockIdx.x; k < n_chunks; k += gridDim.x) {
            bulk_wait(smem_addr(&bar[s]), (phase >> s) & 1u);
            phase ^= 1u << s;
            acc ^= *(volatile unsigned *)(stage + s * BULK_CHUNK);
            done += BULK_CHUNK;
            if (next < n_chunks) {
                /* our read of the stage (generic proxy) before the next copy into it */
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                bulk_issue(base + s * BULK_CHUNK, buf + next * BULK_CHUNK, smem_addr(&bar[s]));
                next += gridDim.x;
            }
            s = (s + 1) % BULK_STAGES;
        }
    } while (loop && !*stop);
    atomicAdd(bytes, done);
    if (acc == 0x9e3779b9u)
        *sink = acc;
}

typedef struct reader_cfg {
    const char *name;
    int bulk;        /* 0: ld_reader, 1: bulk_reader */
    int ctas_per_sm; /* ld_reader: 256-thread CTAs per SM */
} reader_cfg;

static const reader_cfg readers[] = {
    { "ld x1", 0, 1 }, { "ld x2", 0, 2 }, { "ld x3", 0, 3 }, { "ld x4", 0, 4 },
    { "ld x6", 0, 6 }, { "ld x8", 0, 8 }, { "bulk", 1, 1 },
};

typedef struct bench {
    char *buf;      /* the reader's bytes (K/V stand-in), beyond L2 */
    size_t bytes;
    int *stop;      /* device flag: co-running reader stops at the next pass */
    unsigned long long *count;
    unsigned *sink;
} bench;

static gp_status launch_reader(const bench *b, const reader_cfg *r, int sms, int loop,
                               cudaStream_t s)
{
    if (r->bulk) {
        bulk_reader<<<sms, 32, BULK_STAGES * BULK_CHUNK, s>>>(b->buf, b->bytes / BULK_CHUNK,
                                                               b->stop, loop, b->count, b->sink);
        GP_CUDA_LAUNCH_CHECK("bulk_reader");
    } else {
        ld_reader<<<sms * r->ctas_per_sm, 256, 0, s>>>((const uint4 *)b->buf, b->bytes / 16,
                                                       b->stop, loop, b->count, b->sink);
        GP_CUDA_LAUNCH_CHECK("ld_reader");
    }
    return GP_OK;
}

/* ------------------------------------------------------- the F side */

typedef struct shape {
    const char *name;
    int N, K;
    gp_gemm_out out;
} shape;

/* One micro-batch of a Llama-3-8B layer: QKV and O (in the F set only under
 * placement qkvo-f), gate+up, down. */
static const shape shapes[] = {
    { "qkv", 6144, 4096, GP_GEMM_OUT_HALF },
    { "o", 4096, 4096, GP_GEMM_OUT_F32_ACC },
    { "gate_up", 28672, 4096, GP_GEMM_OUT_HALF },
    { "down", 4096, 14336, GP_GEMM_OUT_F32_ACC },
};
#define N_SHAPES 4

static gp_dtype g_dt = GP_DTYPE_BF16; /* --dtype: the F side's weights and activations */

typedef struct fside {
    int first;          /* 0: QKV, O and the FFN (qkvo-f); 2: the FFN only (qkvo-a) */
    int rows;
    uint16_t *w[N_SHAPES]; /* of g_dt */
    uint16_t *x;           /* [rows][14336] of g_dt */
    void *y;            /* [rows][28672] fp32: fits every output */
} fside;

static gp_status run_f(const fside *f, gp_gemm_ctx *g)
{
    for (int i = f->first; i < N_SHAPES; i++)
        GP_TRY(gp_gemm(g, g_dt, f->rows, shapes[i].N, shapes[i].K, f->x, f->w[i], f->y,
                            shapes[i].out));
    return GP_OK;
}

/* Median ms of reps passes of the F set (events around each). */
static gp_status time_f(const fside *f, gp_gemm_ctx *g, cudaStream_t s, int reps, cudaEvent_t *ev,
                        float *ms)
{
    float t[MAX_REPS];
    GP_TRY(run_f(f, g));
    for (int r = 0; r < reps; r++) {
        GP_CUDA_TRY(cudaEventRecord(ev[r], s));
        GP_TRY(run_f(f, g));
    }
    GP_CUDA_TRY(cudaEventRecord(ev[reps], s));
    GP_CUDA_TRY(cudaEventSynchronize(ev[reps]));
    for (int r = 0; r < reps; r++)
        GP_CUDA_TRY(cudaEventElapsedTime(&t[r], ev[r], ev[r + 1]));
    *ms = gp_median_f(t, reps);
    return GP_OK;
}

/* Median GB/s of reps single passes of the reader alone on its partition. */
static gp_status time_reader(const bench *b, const reader_cfg *r, int sms, cudaStream_t s,
                             int reps, cudaEvent_t *ev, float *gbs)
{
    float t[MAX_REPS];
    GP_TRY(launch_reader(b, r, sms, 0, s));
    for (int i = 0; i < reps; i++) {
        GP_CUDA_TRY(cudaEventRecord(ev[i], s));
        GP_TRY(launch_reader(b, r, sms, 0, s));
    }
    GP_CUDA_TRY(cudaEventRecord(ev[reps], s));
    GP_CUDA_TRY(cudaEventSynchronize(ev[reps]));
    for (int i = 0; i < reps; i++) {
        GP_CUDA_TRY(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
        t[i] = (float)((double)(b->bytes / (r->bulk ? BULK_CHUNK : 64)) * (r->bulk ? BULK_CHUNK : 64)
                       / (t[i] * 1e6));
    }
    *gbs = gp_median_f(t, reps);
    return GP_OK;
}

/* The reader loops on A while F runs reps passes; then F raises the stop
 * flag. F's median pass and the reader's bytes over its own time. */
static gp_status corun(const bench *b, const reader_cfg *r, const gp_green_pair *p,
                       const fside *f, gp_gemm_ctx *g, int reps, cudaEvent_t *ev,
                       cudaEvent_t *ra, float *f_ms, float *r_gbs)
{
    cudaStream_t as = (cudaStream_t)p->attn_stream, fs = (cudaStream_t)p->ffn_stream;
    GP_CUDA_TRY(cudaMemsetAsync(b->stop, 0, sizeof(int), as));
    GP_CUDA_TRY(cudaMemsetAsync(b->count, 0, sizeof(unsigned long long), as));
    GP_CUDA_TRY(cudaStreamSynchronize(as));
    GP_CUDA_TRY(cudaEventRecord(ra[0], as));
    GP_TRY(launch_reader(b, r, p->attn_sms, 1, as));
    GP_CUDA_TRY(cudaEventRecord(ra[1], as));
    GP_TRY(time_f(f, g, fs, reps, ev, f_ms));
    GP_CUDA_TRY(cudaMemsetAsync(b->stop, 1, sizeof(int), fs));
    GP_CUDA_TRY(cudaStreamSynchronize(fs));
    GP_CUDA_TRY(cudaStreamSynchronize(as));
    unsigned long long moved = 0;
    float ms = 0;
    GP_CUDA_TRY(cudaMemcpy(&moved, b->count, sizeof moved, cudaMemcpyDeviceToHost));
    GP_CUDA_TRY(cudaEventElapsedTime(&ms, ra[0], ra[1]));
    *r_gbs = (float)(moved / (ms * 1e6));
    return GP_OK;
}

/* ------------------------------------------------------------- driver */

typedef struct opts {
    int splits[MAX_SPLITS], n_splits;
    int rows, reps, tune, first;
    size_t buf_mb;
} opts;

static void usage(FILE *o)
{
    fprintf(o,
            "Usage: gp_bench_corun [--splits A,A,...] [--rows N] [--reps N] [--tune N] "
            "[--set ffn|all] [--buffer-mb N] [--dtype bf16|fp16]\n"
            "  --splits     attention SMs of each A:F split (F: the rest). Default: 24,32,48.\n"
            "  --rows       rows of the F side's GEMMs (one micro-batch), 1..4096. Default: 512.\n"
            "  --reps       timed passes per figure, 3..%d. Default: 20.\n"
            "  --tune N     also time the fastest of N cuBLASLt candidates on F, 1..%d;\n"
            "               0: the heuristic's pick only. Default: 16.\n"
            "  --set        F's GEMMs: ffn (gate+up, down: placement qkvo-a) or all (QKV, O\n"
            "               too: qkvo-f). Default: ffn.\n"
            "  --buffer-mb  the reader's buffer, 256..16384 MiB. Default: 2048.\n"
            "  --dtype      the GEMMs' 16-bit dtype, bf16 or fp16. Default: bf16.\n",
            MAX_REPS, GP_GEMM_TUNE_MAX_CANDIDATES);
}

static int parse(int argc, char **argv, opts *o)
{
    static const struct option lo[] = { { "splits", required_argument, NULL, 's' },
                                         { "rows", required_argument, NULL, 'r' },
                                         { "reps", required_argument, NULL, 'n' },
                                         { "tune", required_argument, NULL, 't' },
                                         { "set", required_argument, NULL, 'f' },
                                         { "buffer-mb", required_argument, NULL, 'b' },
                                         { "dtype", required_argument, NULL, 'd' },
                                         { "help", no_argument, NULL, 'h' },
                                         { NULL, 0, NULL, 0 } };
    *o = (opts){ .splits = { 24, 32, 48 }, .n_splits = 3, .rows = 512, .reps = 20, .tune = 16,
                 .first = 2, .buf_mb = 2048 };
    int c, li = 0;
    char *end;
    while ((c = getopt_long(argc, argv, "h", lo, &li)) != -1) {
        long v = 0;
        if (c != 's' && c != 'f' && c != 'd' && c != 'h' && c != '?') {
            v = strtol(optarg, &end, 10);
            if (*end || end == optarg) {
                fprintf(stderr, "gp_bench_corun: --%s '%s' is not an integer\n", lo[li].name,
                        optarg);
                return 2;
            }
        }
        switch (c) {
        case 's': {
            o->n_splits = 0;
            for (char *t = strtok(optarg, ","); t; t = strtok(NULL, ",")) {
                long a = strtol(t, &end, 10);
                if (*end || end == t || a < 1 || o->n_splits == MAX_SPLITS) {
                    fprintf(stderr, "gp_bench_corun: --splits entry '%s': want an SM count >= 1, "
                            "at most %d entries\n", t, MAX_SPLITS);
                    return 2;
                }
                o->splits[o->n_splits++] = (int)a;
            }
            break;
        }
        case 'r': o->rows = (int)v; if (v < 1 || v > 4096) goto range; break;
        case 'n': o->reps = (int)v; if (v < 3 || v > MAX_REPS) goto range; break;
        case 't': o->tune = (int)v; if (v < 0 || v > GP_GEMM_TUNE_MAX_CANDIDATES) goto range; break;
        case 'b': o->buf_mb = (size_t)v; if (v < 256 || v > 16384) goto range; break;
        case 'f':
            if (!strcmp(optarg, "ffn"))
                o->first = 2;
            else if (!strcmp(optarg, "all"))
                o->first = 0;
            else {
                fprintf(stderr, "gp_bench_corun: --set '%s': allowed ffn, all\n", optarg);
                return 2;
            }
            break;
        case 'd':
            if (gp_dtype_parse(optarg, 0, &g_dt) != GP_OK) {
                fprintf(stderr, "gp_bench_corun: --dtype: %s\n", gp_last_error());
                return 2;
            }
            break;
        case 'h': usage(stdout); return 1; /* main: 1 is "done", exit 0 */
        default: usage(stderr); return 2;
        }
        continue;
    range:
        fprintf(stderr, "gp_bench_corun: --%s %ld is out of range (see --help)\n", lo[li].name, v);
        return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "gp_bench_corun: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

static gp_status setup(const opts *o, bench *b, fside *f, cudaStream_t s)
{
    b->bytes = o->buf_mb << 20;
    GP_CUDA_TRY(cudaMalloc((void **)&b->buf, b->bytes));
    GP_CUDA_TRY(cudaMemsetAsync(b->buf, 0x3c, b->bytes, s));
    GP_CUDA_TRY(cudaMalloc((void **)&b->stop, sizeof(int)));
    GP_CUDA_TRY(cudaMalloc((void **)&b->count, sizeof(unsigned long long)));
    GP_CUDA_TRY(cudaMalloc((void **)&b->sink, sizeof(unsigned)));
    f->first = o->first;
    f->rows = o->rows;
    for (int i = 0; i < N_SHAPES; i++) {
        size_t n = (size_t)shapes[i].N * shapes[i].K;
        GP_CUDA_TRY(cudaMalloc((void **)&f->w[i], n * sizeof(uint16_t)));
        /* random, never zeros: tensor-core power depends on the data */
        GP_TRY(gp_synth_fill_device(f->w[i], g_dt, n, 200 + (uint64_t)i, GP_T_WQKV, 0, 0.02f, s));
    }
    size_t xn = (size_t)o->rows * 14336;
    GP_CUDA_TRY(cudaMalloc((void **)&f->x, xn * sizeof(uint16_t)));
    GP_TRY(gp_synth_fill_device(f->x, g_dt, xn, 7, GP_T_EMBED, 0, 1.0f, s));
    GP_CUDA_TRY(cudaMalloc(&f->y, (size_t)o->rows * 28672 * sizeof(float)));
    GP_CUDA_TRY(cudaMemsetAsync(f->y, 0, (size_t)o->rows * 28672 * sizeof(float), s));
    GP_CUDA_TRY(cudaStreamSynchronize(s));
    GP_CUDA_TRY(cudaFuncSetAttribute(bulk_reader, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)(BULK_STAGES * BULK_CHUNK)));
    return GP_OK;
}

static gp_status tune_f(const fside *f, gp_gemm_ctx *g, int n, void *scratch)
{
    for (int i = f->first; i < N_SHAPES; i++) {
        gp_gemm_tune_report rep;
        GP_TRY(gp_gemm_tune(g, g_dt, f->rows, shapes[i].N, shapes[i].K, f->x, f->w[i], scratch,
                            shapes[i].out, n, 5, &rep));
        printf("  tune %-7s M=%d: %d candidates, heuristic %.3f ms, kept #%d %.3f ms\n",
               shapes[i].name, f->rows, rep.candidates, rep.first_ms, rep.chosen, rep.best_ms);
    }
    return GP_OK;
}

static gp_status run_split_on(const opts *o, const bench *b, const fside *f,
                              const gp_green_pair *p, gp_gemm_ctx *g, float whole_ms,
                              cudaEvent_t *ev, cudaEvent_t *ra, void *scratch)
{
    cudaStream_t as = (cudaStream_t)p->attn_stream, fs = (cudaStream_t)p->ffn_stream;
    float heur = 0, tuned = 0;
    GP_TRY(time_f(f, g, fs, o->reps, ev, &heur));
    tuned = heur;
    if (o->tune) {
        GP_TRY(tune_f(f, g, o->tune, scratch));
        GP_TRY(time_f(f, g, fs, o->reps, ev, &tuned));
    }
    /* against linear scaling from the whole GPU: 1.0 means nothing lost to the partition */
    printf("\n%d:%d (obtained), F alone: heuristic %.3f ms, tuned %.3f ms; whole GPU %.3f ms; "
           "per-SM efficiency %.2f / %.2f\n", p->attn_sms, p->ffn_sms, heur, tuned, whole_ms,
           whole_ms * 132.0 / p->ffn_sms / heur, whole_ms * 132.0 / p->ffn_sms / tuned);
    printf("| A:F | reader | alone GB/s | per SM | F co-run ms | F slowdown | reader co-run GB/s "
           "| reader slowdown | F bytes GB/s | both GB/s |\n|---|---|---:|---:|---:|---:|---:|"
           "---:|---:|---:|\n");
    double f_bytes = 0;
    for (int i = f->first; i < N_SHAPES; i++)
        f_bytes += 2.0 * shapes[i].N * shapes[i].K;
    for (size_t r = 0; r < sizeof readers / sizeof readers[0]; r++) {
        float alone = 0, fco = 0, rco = 0;
        GP_TRY(time_reader(b, &readers[r], p->attn_sms, as, o->reps, ev, &alone));
        GP_TRY(corun(b, &readers[r], p, f, g, o->reps, ev, ra, &fco, &rco));
        double fgbs = f_bytes / (fco * 1e6);
        printf("| %d:%d | %s | %.0f | %.1f | %.3f | %+.0f%% | %.0f | %+.0f%% | %.0f | %.0f |\n",
               p->attn_sms, p->ffn_sms, readers[r].name, alone, alone / p->attn_sms, fco,
               100.0 * (fco / tuned - 1.0), rco, 100.0 * (alone / rco - 1.0), fgbs, rco + fgbs);
        fflush(stdout);
    }
    return GP_OK;
}

static gp_status run_split(const opts *o, const bench *b, const fside *f, const gp_green_pair *p,
                           float whole_ms, cudaEvent_t *ev, cudaEvent_t *ra, void *scratch)
{
    gp_gemm_ctx *g = NULL;
    GP_TRY(gp_gemm_ctx_create(p->ffn_stream, p->ffn_sms, &g));
    gp_status st = run_split_on(o, b, f, p, g, whole_ms, ev, ra, scratch);
    gp_gemm_ctx_destroy(g);
    return st;
}

static gp_status bench_main(const opts *o)
{
    cudaStream_t s;
    GP_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    bench b = { 0 };
    fside f = { 0 };
    GP_TRY(setup(o, &b, &f, s));
    void *scratch = NULL;
    GP_CUDA_TRY(cudaMalloc(&scratch, (size_t)o->rows * 28672 * sizeof(float)));
    cudaEvent_t ev[MAX_REPS + 1], ra[2];
    for (int i = 0; i <= o->reps; i++)
        GP_CUDA_TRY(cudaEventCreate(&ev[i]));
    GP_CUDA_TRY(cudaEventCreate(&ra[0]));
    GP_CUDA_TRY(cudaEventCreate(&ra[1]));

    gp_gemm_ctx *whole = NULL;
    float whole_ms = 0;
    GP_TRY(gp_gemm_ctx_create(s, 0, &whole));
    GP_TRY(time_f(&f, whole, s, o->reps, ev, &whole_ms));
    struct cudaDeviceProp prop;
    GP_CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
    printf("# gp_bench_corun: %s, %d SMs; F: %s %s GEMMs of %d rows; reader buffer %zu MiB; median of "
           "%d\nwhole GPU, F alone: %.3f ms\n", prop.name, prop.multiProcessorCount,
           gp_dtype_flag_name(g_dt), f.first ? "gate_up+down" : "qkv+o+gate_up+down", o->rows, o->buf_mb, o->reps, whole_ms);
    gp_gemm_ctx_destroy(whole);

    gp_split_req req[MAX_SPLITS];
    for (int i = 0; i < o->n_splits; i++)
        req[i] = (gp_split_req){ o->splits[i], GP_SPLIT_REST };
    gp_green_pool_params pp = gp_green_pool_default_params();
    pp.splits = req;
    pp.n_splits = o->n_splits;
    gp_green_pool *pool = NULL;
    GP_TRY(gp_green_pool_create(&pp, &pool));
    gp_status st = GP_OK;
    if (!gp_green_pool_partitioned(pool)) {
        st = GP_ERR_UNSUPPORTED;
        gp_set_error("no green-context partitions here (%s): the co-running reader would share "
                     "SMs with the GEMMs", gp_green_pool_fallback_reason(pool));
    }
    for (int i = 0; st == GP_OK && i < gp_green_pool_size(pool); i++)
        st = run_split(o, &b, &f, gp_green_pool_pair(pool, i), whole_ms, ev, ra, scratch);
    gp_green_pool_destroy(pool);
    return st;
}

int main(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : 2;
    gp_status st = bench_main(&o);
    if (st != GP_OK) {
        fprintf(stderr, "gp_bench_corun: %s\n", gp_last_error());
        return st == GP_ERR_NO_DEVICE ? 77 : 1;
    }
    return 0;
}
