/* gp_bench_sparse: the sparse-input GEMV (sparse/) against the dense GEMM
 * (gp_gemm: the skinny kernel at these batches) on the Llama-3-8B
 * projections, per batch and sparsity: median of device-event timed calls
 * on rotated weight copies (beyond L2), the measured active fraction (the
 * union over the batch rows of independent uniform inputs: 1 - s^B), and
 * the read floor of the active weights at 3.1 TB/s (docs/ARCHITECTURE.md §5).
 * Usage: gp_bench_sparse [--dtype bf16|fp16] [--reps N] [--batches 1,8,16]
 *                        [--sparsity 0,0.25,0.4,0.5] */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_model.h"
#include "gp_sparse.h"
#include "gp_tools.h"
#include "kernels.h"
#include "gp_weights.h"

#define GP_BENCH_NAME "gp_bench_sparse"
#include "bench_check.h"

#define COPIES 4 /* weight copies rotated per call: >= 4 x 33 MB, beyond the 50 MB L2 */
#define MAX_REPS 1000
#define HBM_READ_TBPS 3.1

typedef struct shape { const char *name; int N, K, out; } shape;
static const shape shapes[] = {
    {"qkv", 6144, 4096, GP_SPARSE_OUT_HALF},
    {"o", 4096, 4096, GP_SPARSE_OUT_F32_ACC},
    {"gate_up", 28672, 4096, GP_SPARSE_OUT_HALF},
    {"down", 4096, 14336, GP_SPARSE_OUT_F32_ACC},
};

static int parse_list(const char *s, double *v, int max, const char *flag)
{
    int n = 0;
    char *end;
    while (*s && n < max) {
        v[n++] = strtod(s, &end);
        if (end == s || (*end && *end != ',')) {
            fprintf(stderr, "gp_bench_sparse: %s '%s': expected numbers separated by commas\n", flag, s);
            exit(2);
        }
        s = *end ? end + 1 : end;
    }
    return n;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: gp_bench_sparse [--dtype bf16|fp16] [--reps N] [--batches 1,8,16] [--sparsity 0,0.25,0.4,0.5]\n");
}

int main(int argc, char **argv)
{
    gp_dtype dt = GP_DTYPE_BF16;
    int reps = 50;
    double bv[16] = {1, 8, 16}, sv[16] = {0, 0.25, 0.4, 0.5};
    int nb = 3, ns = 4;
    static const struct option opts[] = {{"dtype", required_argument, NULL, 'd'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"batches", required_argument, NULL, 'b'},
                                         {"sparsity", required_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        long v;
        switch (c) {
        case 'd':
            if (gp_dtype_parse(optarg, 0, &dt) != GP_OK) {
                fprintf(stderr, "gp_bench_sparse: --dtype: %s\n", gp_last_error());
                return 2;
            }
            break;
        case 'r':
            if (gp_parse_long(optarg, 1, MAX_REPS, "--reps", &v) != GP_OK) {
                fprintf(stderr, "gp_bench_sparse: %s\n", gp_last_error());
                return 2;
            }
            reps = (int)v;
            break;
        case 'b': nb = parse_list(optarg, bv, 16, "--batches"); break;
        case 's': ns = parse_list(optarg, sv, 16, "--sparsity"); break;
        case 'h': usage(stdout); return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    for (int i = 0; i < nb; i++)
        if (bv[i] < 1 || bv[i] > GP_SPARSE_MAX_B || bv[i] != floor(bv[i])) {
            fprintf(stderr, "gp_bench_sparse: --batches %g: allowed whole numbers 1..%d\n", bv[i], GP_SPARSE_MAX_B);
            return 2;
        }
    for (int i = 0; i < ns; i++)
        if (!(sv[i] >= 0.0 && sv[i] < 1.0)) {
            fprintf(stderr, "gp_bench_sparse: --sparsity %g: allowed [0, 1)\n", sv[i]);
            return 2;
        }
    if (gp_cuda_available() != GP_OK) {
        fprintf(stderr, "gp_bench_sparse: %s\n", gp_last_error());
        return 1;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# gp_bench_sparse: %s, %d SMs, %s, median of %d calls on %d rotated weight copies; inputs uniform in "
           "(-1, 1) with threshold s (each row drops a fraction s; the batch reads the union)\n\n",
           prop.name, prop.multiProcessorCount, gp_dtype_flag_name(dt), reps, COPIES);
    printf("| proj | N x K | B | s | active | dense us | sparse us | speedup | sparse GB/s of active weights | "
           "floor us (active) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    gp_gemm_ctx *gemm = NULL;
    GP(gp_gemm_ctx_create(st, 0, &gemm));
    cudaEvent_t ev[2 * MAX_REPS];
    for (int i = 0; i < 2 * reps; i++)
        CK(cudaEventCreate(&ev[i]));
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *sh = &shapes[si];
        const size_t wbytes = (size_t)sh->N * sh->K * 2;
        void *w[COPIES], *wt[COPIES];
        for (int i = 0; i < COPIES; i++) {
            CK(cudaMalloc(&w[i], wbytes));
            CK(cudaMalloc(&wt[i], wbytes));
            GP(gp_synth_fill_device(w[i], dt, (uint64_t)sh->N * sh->K, 7 + i, GP_T_W_DOWN, 0, 0.02f, st));
            GP(gp_sparse_transpose(w[i], wt[i], sh->N, sh->K, st));
        }
        uint16_t *xh = malloc((size_t)GP_SPARSE_MAX_B * sh->K * 2);
        void *x, *y;
        float *ws;
        int *act;
        size_t ws_bytes = gp_sparse_gemv_ws_bytes(GP_SPARSE_MAX_B, sh->N, sh->K, 0);
        CK(cudaMalloc(&x, (size_t)GP_SPARSE_MAX_B * sh->K * 2));
        CK(cudaMalloc(&y, (size_t)GP_SPARSE_MAX_B * sh->N * 4));
        CK(cudaMalloc((void **)&ws, ws_bytes));
        CK(cudaMalloc((void **)&act, sizeof(int)));
        CK(cudaMemset(y, 0, (size_t)GP_SPARSE_MAX_B * sh->N * 4));
        uint64_t rng = 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < (size_t)GP_SPARSE_MAX_B * sh->K; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            xh[i] = gp_f32_to_half((float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0), dt);
        }
        CK(cudaMemcpy(x, xh, (size_t)GP_SPARSE_MAX_B * sh->K * 2, cudaMemcpyHostToDevice));
        for (int bi = 0; bi < nb; bi++) {
            const int B = (int)bv[bi];
            float ms[MAX_REPS], dense_ms;
            const gp_gemm_out dout = sh->out == GP_SPARSE_OUT_HALF ? GP_GEMM_OUT_HALF : GP_GEMM_OUT_F32_ACC;
            for (int r = 0; r < 3; r++)
                GP(gp_gemm(gemm, dt, B, sh->N, sh->K, x, w[r % COPIES], y, dout));
            for (int r = 0; r < reps; r++) {
                CK(cudaEventRecord(ev[2 * r], st));
                GP(gp_gemm(gemm, dt, B, sh->N, sh->K, x, w[r % COPIES], y, dout));
                CK(cudaEventRecord(ev[2 * r + 1], st));
            }
            CK(cudaStreamSynchronize(st));
            for (int r = 0; r < reps; r++)
                CK(cudaEventElapsedTime(&ms[r], ev[2 * r], ev[2 * r + 1]));
            dense_ms = gp_median_f(ms, reps);
            for (int s = 0; s < ns; s++) {
                const float t = (float)sv[s];
                for (int r = 0; r < 3; r++)
                    GP(gp_sparse_gemv(dt, B, sh->N, sh->K, x, wt[r % COPIES], t, y, sh->out, ws, ws_bytes, 0,
                                         NULL, st));
                CK(cudaMemsetAsync(act, 0, sizeof(int), st));
                GP(gp_sparse_gemv(dt, B, sh->N, sh->K, x, wt[0], t, y, sh->out, ws, ws_bytes, 0, act, st));
                for (int r = 0; r < reps; r++) {
                    CK(cudaEventRecord(ev[2 * r], st));
                    GP(gp_sparse_gemv(dt, B, sh->N, sh->K, x, wt[r % COPIES], t, y, sh->out, ws, ws_bytes, 0,
                                         NULL, st));
                    CK(cudaEventRecord(ev[2 * r + 1], st));
                }
                CK(cudaStreamSynchronize(st));
                int active = 0;
                CK(cudaMemcpy(&active, act, sizeof(int), cudaMemcpyDeviceToHost));
                for (int r = 0; r < reps; r++)
                    CK(cudaEventElapsedTime(&ms[r], ev[2 * r], ev[2 * r + 1]));
                const float med = gp_median_f(ms, reps);
                const double frac = (double)active / sh->K, abytes = frac * (double)wbytes;
                printf("| %s | %d x %d | %d | %.2f | %.3f | %.1f | %.1f | %.2f | %.0f | %.1f |\n", sh->name, sh->N, sh->K,
                       B, sv[s], frac, dense_ms * 1e3, med * 1e3, dense_ms / med, abytes / (med * 1e-3) / 1e9,
                       abytes / (HBM_READ_TBPS * 1e12) * 1e6);
                fflush(stdout);
            }
        }
        for (int i = 0; i < COPIES; i++) {
            cudaFree(w[i]);
            cudaFree(wt[i]);
        }
        cudaFree(x), cudaFree(y), cudaFree(ws), cudaFree(act);
        free(xh);
    }
    gp_gemm_ctx_destroy(gemm);
    cudaStreamDestroy(st);
    return 0;
}
