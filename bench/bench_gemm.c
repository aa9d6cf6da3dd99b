/* Times the Llama-3-8B GEMMs through gp_gemm (whole device and with an
 * SM-count target), cuBLASLt against the skinny kernel where M allows: median
 * of timed reps, weight bytes/s and FLOP/s, in the engine dtype --dtype
 * (bf16, the default, or fp16).
 * Usage: gp_bench_gemm [--dtype bf16|fp16] [--skinny] [SM_TARGET (default 76)] [REPS (default 20)] */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "gemm_skinny.cuh"
#include "gp_model.h"
#include "kernels.h"
#include "gp_weights.h"

#define BENCH_COPIES 4   /* weight copies rotated per rep: >= 4 x 32 MiB, beyond the 50 MB L2 */
#define BENCH_WARMUP 3
#define BENCH_MAX_REPS 1000

typedef struct bench_gemm { const char *name; int N, K; gp_gemm_out out; } bench_gemm;

static const bench_gemm gemms[] = {
    { "qkv", 6144, 4096, GP_GEMM_OUT_HALF },
    { "o", 4096, 4096, GP_GEMM_OUT_F32_ACC },    /* adds into the fp32 residual, as the engine */
    { "gate_up", 28672, 4096, GP_GEMM_OUT_HALF },
    { "down", 4096, 14336, GP_GEMM_OUT_F32_ACC }, /* likewise */
    { "lm_head", 128256, 4096, GP_GEMM_OUT_F32 },
    /* a tensor-parallel rank's (TP = 2) */
    { "qkv/2", 3072, 4096, GP_GEMM_OUT_HALF },
    { "o/2", 4096, 2048, GP_GEMM_OUT_F32 },
    { "gu/2", 14336, 4096, GP_GEMM_OUT_HALF },
    { "down/2", 4096, 7168, GP_GEMM_OUT_F32 },
    { "qkv70/2", 5120, 8192, GP_GEMM_OUT_HALF }, /* llama3-70b's rank */
    { "down70/2", 8192, 14336, GP_GEMM_OUT_F32 },
};
static const int Ms_all[] = { 1, 8, 16, 64, 256, 1024 };
static const int Ms_skinny_only[] = { 1, 8, 16 };
#define MAX_M 1024

static gp_dtype g_dt = GP_DTYPE_BF16; /* --dtype: inputs, weights and 16-bit outputs */

/* Median ms of reps timed calls, each on the next weight copy. */
static gp_status time_gemm(gp_gemm_ctx *ctx, cudaStream_t st, const bench_gemm *g, int M,
                           const uint16_t *x, uint16_t *const *w, void *y, int reps,
                           cudaEvent_t *ev, float *median_ms)
{
    float ms[BENCH_MAX_REPS];
    for (int i = 0; i < BENCH_WARMUP; i++)
        GP_TRY(gp_gemm(ctx, g_dt, M, g->N, g->K, x, w[i % BENCH_COPIES], y, g->out));
    for (int r = 0; r < reps; r++) {
        GP_CUDA_TRY(cudaEventRecord(ev[2 * r], st));
        GP_TRY(gp_gemm(ctx, g_dt, M, g->N, g->K, x, w[r % BENCH_COPIES], y, g->out));
        GP_CUDA_TRY(cudaEventRecord(ev[2 * r + 1], st));
    }
    GP_CUDA_TRY(cudaStreamSynchronize(st));
    for (int r = 0; r < reps; r++)
        GP_CUDA_TRY(cudaEventElapsedTime(&ms[r], ev[2 * r], ev[2 * r + 1]));
    *median_ms = gp_median_f(ms, reps);
    return GP_OK;
}

/* Median ms of the skinny kernel with a forced plan (16 or 32 rows per CTA),
 * launched directly. */
static gp_status time_skinny(int r, int sms, cudaStream_t st, const bench_gemm *g, int M,
                             const uint16_t *x, uint16_t *const *w, void *y, int reps,
                             cudaEvent_t *ev, float *median_ms)
{
    float ms[BENCH_MAX_REPS];
    gp_skinny_plan p;
    if (!gp_skinny_plan_make(M, g->N, g->K, x, w[0], sms, r, &p))
        GP_FAIL(GP_ERR_UNSUPPORTED, "no skinny plan for M=%d N=%d K=%d", M, g->N, g->K);
    for (int i = 0; i < BENCH_WARMUP; i++)
        GP_CUDA_TRY(gp_skinny_launch(&p, g_dt, M, g->N, g->K, x, w[i % BENCH_COPIES], y, (int)g->out,
                                       st));
    for (int rep = 0; rep < reps; rep++) {
        GP_CUDA_TRY(cudaEventRecord(ev[2 * rep], st));
        GP_CUDA_TRY(gp_skinny_launch(&p, g_dt, M, g->N, g->K, x, w[rep % BENCH_COPIES], y,
                                       (int)g->out, st));
        GP_CUDA_TRY(cudaEventRecord(ev[2 * rep + 1], st));
    }
    GP_CUDA_TRY(cudaStreamSynchronize(st));
    for (int rep = 0; rep < reps; rep++)
        GP_CUDA_TRY(cudaEventElapsedTime(&ms[rep], ev[2 * rep], ev[2 * rep + 1]));
    *median_ms = gp_median_f(ms, reps);
    return GP_OK;
}

/* The whole benchmark; errors return at once (the process exits anyway). */
static gp_status bench_run(int sm_target, int reps, bool skinny_only)
{
    const int *Ms = skinny_only ? Ms_skinny_only : Ms_all;
    const size_t n_ms = skinny_only ? sizeof Ms_skinny_only / sizeof Ms_skinny_only[0]
                                    : sizeof Ms_all / sizeof Ms_all[0];
    int dev = 0;
    struct cudaDeviceProp prop;
    GP_CUDA_TRY(cudaGetDevice(&dev));
    GP_CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
    int sms = prop.multiProcessorCount;
    if (sm_target > sms)
        sm_target = sms;
    printf("gp_bench_gemm: %s, %d SMs, L2 %.0f MB; %d weight copies rotated, %d warm-up, "
           "median of %d reps; random %s data (--dtype). 'target N' only sets cuBLASLt's SM-count "
           "target: the kernels still run on the whole device (a partition needs a green "
           "context)\n",
           prop.name, sms, prop.l2CacheSize / 1e6, BENCH_COPIES, BENCH_WARMUP, reps,
           gp_dtype_flag_name(g_dt));

    cudaStream_t st;
    GP_CUDA_TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    static cudaEvent_t ev[2 * BENCH_MAX_REPS];
    for (int i = 0; i < 2 * reps; i++)
        GP_CUDA_TRY(cudaEventCreate(&ev[i]));
    /* [skinny][part]: cuBLASLt only / skinny kernel up to its largest M,
     * whole device / SM-count target */
    gp_gemm_ctx *ctx[2][2] = { { NULL, NULL }, { NULL, NULL } };
    for (int k = 0; k < 2; k++)
        for (int part = 0; part < 2; part++) {
            GP_TRY(gp_gemm_ctx_create(st, part ? sm_target : 0, &ctx[k][part]));
            GP_TRY(gp_gemm_set_skinny_max_m(ctx[k][part], k ? GP_GEMM_SKINNY_MAX_M : 0));
        }

    /* activations: the largest x ([MAX_M][max K]); one copy (activations are
     * L2-hot in the engine as well) */
    const size_t max_k = 14336;
    uint16_t *x = NULL;
    GP_CUDA_TRY(cudaMalloc((void **)&x, (size_t)MAX_M * max_k * sizeof(uint16_t)));
    GP_TRY(gp_synth_fill_device(x, g_dt, (uint64_t)MAX_M * max_k, 1, GP_T_EMBED, 0, 1.0f, st));

    printf("%-8s %-7s %5s %6s %6s %-10s %-7s %9s %7s %8s\n", "gemm", "out", "M", "N", "K", "sms",
           "kernel", "ms", "TB/s", "TFLOP/s");
    for (size_t gi = 0; gi < sizeof gemms / sizeof gemms[0]; gi++) {
        const bench_gemm *g = &gemms[gi];
        size_t wn = (size_t)g->N * (size_t)g->K, wbytes = wn * sizeof(uint16_t);
        size_t ybytes = (size_t)MAX_M * g->N * (g->out == GP_GEMM_OUT_HALF ? 2 : 4);
        uint16_t *w[BENCH_COPIES] = { 0 };
        void *y = NULL;
        for (int c = 0; c < BENCH_COPIES; c++) {
            GP_CUDA_TRY(cudaMalloc((void **)&w[c], wbytes));
            /* uniform in +-0.02, different per copy: never zeros or constants */
            GP_TRY(gp_synth_fill_device(w[c], g_dt, wn, 100 + (uint64_t)gi, GP_T_WQKV, c, 0.02f, st));
        }
        GP_CUDA_TRY(cudaMalloc(&y, ybytes));
        GP_CUDA_TRY(cudaMemsetAsync(y, 0, ybytes, st)); /* the accumulating GEMMs read y */
        for (size_t mi = 0; mi < n_ms; mi++) {
            int M = Ms[mi];
            for (int k = 0; k < 2; k++)
                for (int part = 0; part < (skinny_only ? 1 : 2); part++) {
                    gp_gemm_ctx *c = ctx[k][part];
                    if (k && !gp_gemm_is_skinny(c, M, g->N, g->K, x, w[0]))
                        continue; /* the skinny context would run cuBLASLt: already timed */
                    float ms = 0.0f;
                    GP_TRY(time_gemm(c, st, g, M, x, w, y, reps, ev, &ms));
                    double flops = 2.0 * M * (double)g->N * g->K;
                    char label[24];
                    snprintf(label, sizeof label, part ? "target %d" : "all %d",
                             part ? sm_target : sms);
                    printf("%-8s %-7s %5d %6d %6d %-10s %-7s %9.4f %7.3f %8.1f\n", g->name,
                           g->out == GP_GEMM_OUT_HALF ? gp_dtype_flag_name(g_dt)
                           : g->out == GP_GEMM_OUT_F32 ? "f32" : "f32+=",
                           M, g->N, g->K, label, k ? "skinny" : "cublas", ms,
                           wbytes / (ms * 1e-3) / 1e12, flops / (ms * 1e-3) / 1e12);
                    fflush(stdout);
                }
            /* the skinny kernel's two row-block sizes, whole device */
            for (int r = 1; r <= 2 && M <= GP_GEMM_SKINNY_MAX_M; r++) {
                float ms = 0.0f;
                GP_TRY(time_skinny(r, sms, st, g, M, x, w, y, reps, ev, &ms));
                printf("%-8s %-7s %5d %6d %6d %-10s %-7s %9.4f %7.3f %8.1f\n", g->name,
                       g->out == GP_GEMM_OUT_HALF ? gp_dtype_flag_name(g_dt)
                       : g->out == GP_GEMM_OUT_F32 ? "f32" : "f32+=",
                       M, g->N, g->K, "all", r == 1 ? "rows16" : "rows32", ms,
                       wbytes / (ms * 1e-3) / 1e12,
                       2.0 * M * (double)g->N * g->K / (ms * 1e-3) / 1e12);
                fflush(stdout);
            }
        }
        for (int c = 0; c < BENCH_COPIES; c++)
            GP_CUDA_TRY(cudaFree(w[c]));
        GP_CUDA_TRY(cudaFree(y));
    }
    GP_CUDA_TRY(cudaFree(x));
    for (int k = 0; k < 2; k++)
        for (int part = 0; part < 2; part++)
            gp_gemm_ctx_destroy(ctx[k][part]);
    for (int i = 0; i < 2 * reps; i++)
        GP_CUDA_TRY(cudaEventDestroy(ev[i]));
    GP_CUDA_TRY(cudaStreamDestroy(st));
    return GP_OK;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: gp_bench_gemm [--dtype bf16|fp16] [--skinny] [SM_TARGET >= 0 (76)] [REPS 1..%d (20)]\n"
               "  --skinny  only the decode batches (M = 1, 8, 16), on the whole device: cuBLASLt against the\n"
               "            skinny kernel's 16- and 32-row blocks\n",
            BENCH_MAX_REPS);
}

int main(int argc, char **argv)
{
    const char *pos[3] = { NULL, NULL, NULL };
    int npos = 0;
    bool skinny_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--skinny") == 0) {
            skinny_only = true;
        } else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            if (gp_dtype_parse(argv[++i], 0, &g_dt) != GP_OK) {
                fprintf(stderr, "gp_bench_gemm: --dtype: %s\n", gp_last_error());
                return 2;
            }
        } else if (npos < 3) {
            pos[npos++] = argv[i];
        } else {
            npos = 3;
        }
    }
    int sm_target = npos > 0 ? atoi(pos[0]) : 76;
    int reps = npos > 1 ? atoi(pos[1]) : 20;
    if (npos > 2 || sm_target < 0 || reps < 1 || reps > BENCH_MAX_REPS) {
        usage(stderr);
        return 2;
    }
    if (gp_cuda_available() != GP_OK) {
        printf("gp_bench_gemm: %s\n", gp_last_error());
        return 77;
    }
    gp_status s = bench_run(sm_target, reps, skinny_only);
    if (s != GP_OK) {
        fprintf(stderr, "gp_bench_gemm: %s: %s\n", gp_status_str(s), gp_last_error());
        return 1;
    }
    return 0;
}
