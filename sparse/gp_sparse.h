/* Activation sparsity at small batch: projections whose small inputs are
 * dropped (|x| <= a calibrated threshold counts as zero), so only the
 * weights of the active inputs are read. Kernels are C-callable (streams
 * void*, 16-bit tensors void* of a gp_dtype) with their CPU references. */
#ifndef GP_SPARSE_H
#define GP_SPARSE_H

#include <stddef.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest batch the sparse kernel serves: above it the union of active
 * inputs over the rows approaches all of them and the dense GEMM is the
 * better read. */
#define GP_SPARSE_MAX_B 16

/* Where the result goes, as gp_gemm_out: the 16-bit dtype, fp32, or added
 * to an fp32 buffer (the residual). */
enum { GP_SPARSE_OUT_HALF = 0, GP_SPARSE_OUT_F32 = 1, GP_SPARSE_OUT_F32_ACC = 2 };

/* Masking, the one rule everything here follows: input x[b][k] takes part
 * iff |x[b][k]| > t (t >= 0, finite); otherwise it counts as exactly 0. An
 * input k is active when it takes part for some row b: its weights are read
 * once for the whole batch (the union). With t = 0 only exact zeros drop,
 * which the dense product multiplies into nothing anyway. */

/* y[b][n] = sum over k of mask(x[b][k]) * wt[k][n], b < B, n < N, k < K.
 * x: [B][K] of dt; wt: [K][N] of dt (the projection W[N][K] transposed, so
 * an input's weights are one contiguous row); y per out (16-bit [B][N],
 * fp32 [B][N], or fp32 [B][N] added to). fp32 accumulation; the sum runs
 * over splits of K in a fixed order (the same bits every run).
 * 1 <= B <= GP_SPARSE_MAX_B, N % 8 == 0, wt 16-byte aligned, K >= 1.
 * ws: fp32 workspace of gp_sparse_gemv_ws_bytes(B, N, K, sms) bytes; sms:
 * the SM budget the grid is sized to (0: the device's). active (may be
 * NULL): a device int that gains the number of active inputs (for the
 * measured sparsity; atomicAdd, so it costs one atomic per 32-input chunk).
 * Graph-capturable; no host synchronisation. */
gp_status gp_sparse_gemv(gp_dtype dt, int B, int N, int K, const void *x, const void *wt, float t, void *y,
                         int out, float *ws, size_t ws_bytes, int sms, int *active, void *stream);
size_t gp_sparse_gemv_ws_bytes(int B, int N, int K, int sms);

/* dst[c][r] = src[r][c] for 16-bit elements: src [R][C], dst [C][R], device. */
gp_status gp_sparse_transpose(const void *src, void *dst, int R, int C, void *stream);

/* CPU oracle of gp_sparse_gemv in double, unrounded: x [B][K] and wt [K][N]
 * host of dt, y [B][N] host float (the sum itself: the caller adds it to an
 * accumulator when checking GP_SPARSE_OUT_F32_ACC). Returns the number of
 * active inputs. */
int gp_sparse_gemv_ref(gp_dtype dt, int B, int N, int K, const void *x, const void *wt, float t, float *y);

/* ------------------------------------------------------------ thresholds */

/* The four projections whose inputs are thresholded, in a layer's order:
 * q/k/v (input: the attention RMSNorm's output), o (the attention output),
 * gate/up (the FFN RMSNorm's output), down (the SwiGLU output). */
typedef enum gp_sparse_proj {
    GP_SPARSE_QKV = 0,
    GP_SPARSE_O = 1,
    GP_SPARSE_GATE_UP = 2,
    GP_SPARSE_DOWN = 3,
    GP_SPARSE_PROJ_COUNT = 4
} gp_sparse_proj;
const char *gp_sparse_proj_name(gp_sparse_proj p); /* "qkv", "o", "gate_up", "down" */

/* A calibration (greenpipe calibrate, a --sparsity FILE.json): per layer and
 * projection the magnitude threshold, and per FFN neuron how often its down
 * input was active over the calibration tokens. Decode steps of at most
 * GP_SPARSE_MAX_B rows apply it (the engine and the CPU reference alike);
 * prefill stays dense. */
typedef struct gp_sparsity {
    char model[64];      /* the config name it was calibrated on */
    int n_layers, hidden, ffn, q_dim; /* the shape it fits (q_dim: n_heads x head_dim, o's input) */
    double target;       /* S: the share of each projection's inputs the thresholds drop */
    float *thresholds;   /* [n_layers][GP_SPARSE_PROJ_COUNT], each finite and >= 0 */
    float *freq;         /* [n_layers][ffn] in [0, 1], or NULL (not recorded) */
    long tokens;         /* calibration tokens */
    char source[256];    /* where they came from ("prompts FILE", "random ids, seed N") */
} gp_sparsity;

#ifdef __cplusplus
}
#endif
#endif
