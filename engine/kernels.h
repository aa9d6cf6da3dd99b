/* The engine folder's kernel interface: the GEMM context (every GEMM of the
 * engine goes through it), RMSNorm+residual, embedding, argmax, and (through
 * ffn_kernels.h) SwiGLU, each with its CPU reference. C-callable, no CUDA
 * types: streams are void* (cudaStream_t), 16-bit tensors void pointers
 * whose type a gp_dtype argument names: GP_DTYPE_BF16 or GP_DTYPE_F16 (the
 * engine dtype, docs/ARCHITECTURE.md), any other is GP_ERR_INVALID_ARG
 * naming it. Accumulation is float32 for both; bf16 results are the bits
 * the bf16-only kernels gave (same code, instantiated for bf16).
 *
 * Every device entry point is CUDA-graph capturable: no allocation, no
 * synchronisation, no pageable copies; it checks its arguments first and
 * returns GP_ERR_INVALID_ARG naming the bad values (nothing launched), or
 * GP_ERR_CUDA / GP_ERR_DEVICE_MEMORY with the failing call in gp_last_error().
 * A batch of B == 0 rows is a no-op returning GP_OK. */
#ifndef GP_ENGINE_KERNELS_H
#define GP_ENGINE_KERNELS_H

#include <stdint.h>

#include "ffn_kernels.h"
#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ GEMM */

/* One cuBLASLt handle, a device workspace and a cache of per-shape matmul
 * descriptors and algorithms, bound to one stream and one SM budget: the one
 * place that knows both. Not thread-safe; calls through one context must be
 * ordered (one stream at a time), since they share the workspace. */
typedef struct gp_gemm_ctx gp_gemm_ctx; /* opaque */

typedef enum gp_gemm_out {
    GP_GEMM_OUT_HALF = 0,    /* y = x . W^T, of the inputs' 16-bit dtype (activations) */
    GP_GEMM_OUT_F32 = 1,     /* y = x . W^T, fp32 (logits) */
    GP_GEMM_OUT_F32_ACC = 2, /* y += x . W^T into fp32 y (beta = 1): the O and down
                                projections adding into the fp32 residual stream */
    GP_GEMM_OUT_SWIGLU = 3,  /* y[M][N/2] of the 16-bit dtype: SwiGLU of columns j and N/2 + j of x . W^T
                                (the gate/up projection and gp_swiglu in one), each column rounded as
                                GP_GEMM_OUT_HALF would first: the same bits as the two calls. N even;
                                the skinny kernel's alone (gp_gemm_is_skinny), GP_ERR_UNSUPPORTED
                                elsewhere */
} gp_gemm_out;

#define GP_GEMM_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt workspace per context */
#define GP_GEMM_CACHE_SLOTS 128                    /* shapes kept; round-robin eviction */

/* Creates the handle and allocates the workspace on the current device (not
 * capturable: call it before capture). sm_count_target > 0 sets
 * CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET (the partition's SM count); 0 means the
 * whole device. stream may be NULL (legacy default stream). */
gp_status gp_gemm_ctx_create(void *stream, int sm_count_target, gp_gemm_ctx **out);
void gp_gemm_ctx_destroy(gp_gemm_ctx *ctx);
/* Rebind to another stream (the cache stays valid: it does not depend on it). */
gp_status gp_gemm_set_stream(gp_gemm_ctx *ctx, void *stream);
/* Change the SM budget (e.g. after a rebalance); empties the cache, because
 * the heuristic's choice depends on it. */
gp_status gp_gemm_set_sm_count_target(gp_gemm_ctx *ctx, int sm_count_target);
int gp_gemm_sm_count_target(const gp_gemm_ctx *ctx);
void *gp_gemm_stream(const gp_gemm_ctx *ctx); /* the bound stream (cudaStream_t) */
/* Shapes currently cached (for tests and statistics). */
int gp_gemm_cached_shapes(const gp_gemm_ctx *ctx);

/* The skinny kernel (engine/gemm_skinny.cu) serves 1 <= M <= max_m when K %
 * 8 == 0 and x, w are 16-byte aligned; cuBLASLt serves everything else.
 * Default GP_GEMM_SKINNY_DEFAULT_MAX_M (where it measured faster on the H100,
 * docs/PERFORMANCE.md); 0 routes every call to cuBLASLt (benchmarks, tests).
 * max_m outside 0..GP_GEMM_SKINNY_MAX_M is GP_ERR_INVALID_ARG. Changing it
 * empties the cache. */
#define GP_GEMM_SKINNY_MAX_M 16
/* 16, not 8, though steps of 9-16 rows measured 0.6-2.1% faster on cuBLASLt
 * (docs/PERFORMANCE.md): the skinny kernel gives a row the same bits at
 * every M, so a preempted request recomputed in one batch repeats its
 * tokens exactly */
#define GP_GEMM_SKINNY_DEFAULT_MAX_M 16
gp_status gp_gemm_set_skinny_max_m(gp_gemm_ctx *ctx, int max_m);
/* 1 when a call of this shape and these pointers would take the skinny path. */
int gp_gemm_is_skinny(const gp_gemm_ctx *ctx, int M, int N, int K, const void *x,
                      const void *w);

/* y[M][N] = x[M][K] . w[N][K]^T (or y += ... for GP_GEMM_OUT_F32_ACC, which
 * reads y, so it must hold finite values), x and w of dt (GP_DTYPE_BF16 or
 * GP_DTYPE_F16; cuBLASLt types CUDA_R_16BF / CUDA_R_16F), fp32 accumulation
 * (CUBLAS_COMPUTE_32F) and scale, y of dt or fp32 by out_type. All row-major
 * device pointers (w is an HF Linear weight [out][in]); y must not overlap x
 * or w. M >= 0 (0: no-op), N, K >= 1. The first call of a (dt, M, N, K,
 * out_type, pointer alignment) plans the skinny kernel (small M, see above)
 * or asks cuBLASLt's heuristic (host-only, legal during graph capture) and
 * keeps the first algorithm that runs; later calls reuse the choice. Either
 * way the result is deterministic (same bits for the same inputs). */
gp_status gp_gemm(gp_gemm_ctx *ctx, gp_dtype dt, int M, int N, int K, const void *x, const void *w,
                  void *y, gp_gemm_out out_type);
/* Timed choice among cuBLASLt's candidates, for a context whose SM budget is
 * a partition: the heuristic ranks algorithms for the whole device, and on a
 * partition (SM count target) its first pick can be a wave-quantized tiling.
 * Times up to max_candidates (1..GP_GEMM_TUNE_MAX_CANDIDATES) of the
 * heuristic's candidates for this shape on the context's stream, each a
 * warm-up call and reps (1..100) timed calls, and caches the one with the
 * smallest median, so later gp_gemm calls of the shape (and graphs
 * captured after this) use it; a (dtype, shape) is tuned once per context (until
 * gp_gemm_set_sm_count_target empties the cache). Not capturable (it synchronises the stream;
 * GP_ERR_INVALID_ARG while the stream captures). y is only a target: for
 * GP_GEMM_OUT_F32_ACC it accumulates every timed call, so pass scratch of
 * the same alignment as the real output. Shapes the skinny kernel serves are
 * left alone (report: candidates 0). rep may be NULL. */
#define GP_GEMM_TUNE_MAX_CANDIDATES 32
typedef struct gp_gemm_tune_report {
    int candidates; /* candidates timed (launch refusals not counted); 0 when the
                       shape was tuned before on this context (kept) or is skinny */
    int chosen;     /* heuristic rank of the kept one (0: the heuristic's own pick) */
    float first_ms; /* median ms of the heuristic's first candidate that ran */
    float best_ms;  /* median ms of the kept one */
} gp_gemm_tune_report;
gp_status gp_gemm_tune(gp_gemm_ctx *ctx, gp_dtype dt, int M, int N, int K, const void *x,
                       const void *w, void *y, gp_gemm_out out_type, int max_candidates, int reps,
                       gp_gemm_tune_report *rep);

/* CPU oracle in double: y[M][N] (host) = x[M][K] . w[N][K]^T, x and w host
 * arrays of dt (BF16 or F16). */
void gp_gemm_ref(gp_dtype dt, int M, int N, int K, const void *x, const void *w, double *y);

/* --------------------------------------------------------------- RMSNorm */

/* The RMSNorm fused with the residual add (FFN stage, next layer's attention
 * stage, final norm): per row b,
 *   resid[b] += float(delta[b])            (fp32 add; skipped when delta is NULL)
 *   out[b][i] = T(w[i] * (resid[b][i] * 1/sqrt(mean(resid[b]^2) + eps)))
 * normalised and weighted in fp32 with a single rounding to T = dt.
 * resid: [B][H] fp32 device, in/out; delta: [B][H] dt device or NULL;
 * w: [H] dt; out: [B][H] dt (must not alias resid or delta).
 * B >= 0, H >= 1, eps finite and >= 0. */
gp_status gp_rmsnorm_residual(gp_dtype dt, float *resid, const void *delta, const void *w, void *out,
                              int B, int H, float eps, void *stream);

/* CPU oracle: resid updated with the same fp32 add as the device; out [B][H]
 * host float, unrounded, normalised in double. delta, w: host arrays of dt. */
void gp_rmsnorm_residual_ref(gp_dtype dt, float *resid, const void *delta, const void *w, float *out,
                             int B, int H, float eps);

/* ------------------------------------------------------------- embedding */

/* resid[b][:] = float(table[tokens[b] - lo][:]) (exact) for the ids the
 * table holds, [lo, lo + rows); 0 for the other ids of [0, V) (a table cut
 * by vocabulary: the sum over the parts is the row). lo 0, rows V: the
 * whole table.
 * tokens: [B] int32 device; table: [rows][H] dt device; resid: [B][H] fp32.
 * A device kernel cannot report a bad token id, so the HOST validates tokens
 * (0 <= id < V) before the step; a row whose id is out of range is filled
 * with NaN (never read out of bounds) so the mistake shows in the logits. */
gp_status gp_embed(gp_dtype dt, const int32_t *tokens, const void *table, float *resid, int B, int H,
                   int V, int lo, int rows, void *stream);

/* CPU oracle, same semantics (NaN rows for out-of-range ids). Host arrays. */
void gp_embed_ref(gp_dtype dt, const int32_t *tokens, const void *table, float *resid, int B, int H,
                  int V, int lo, int rows);

/* ---------------------------------------------------------------- argmax */

/* out[b] = index of the largest logits[b][:], as gp_argmax (reference/reference.c);
 * the logits are fp32 in either engine dtype (the LM head's fp32 output):
 * the FIRST index on ties (+0 and -0 are equal), NaN never wins (NaNs are
 * skipped), a row of only NaNs gives 0. Deterministic.
 * logits: [B][V] fp32 device; out: [B] int32 device. 1 <= V <= GP_ARGMAX_MAX_V. */
#define GP_ARGMAX_MAX_V (INT32_MAX - (1 << 16))
gp_status gp_argmax_rows(const float *logits, int32_t *out, int B, int V, void *stream);

/* CPU oracle: gp_argmax per row. Host arrays. */
void gp_argmax_rows_ref(const float *logits, int32_t *out, int B, int V);

/* ---------------------------------------------------------------- vocab gather */

/* The LM head split by vocabulary over tp ranks, put back in order: rank
 * r's logits of vocabulary rows [r s, r s + n_r) (s = ceil(V / tp), n_r =
 * min(s, V - r s)) are the B x n_r floats at parts + r B s, row by row;
 * logits[b][v] = that rank's value. parts: [tp][B][s] fp32 device; logits:
 * [B][V] fp32 device. 1 <= tp <= 8, (tp - 1) s < V. */
gp_status gp_vocab_gather(const float *parts, float *logits, int B, int V, int tp, void *stream);
/* CPU oracle. Host arrays. */
void gp_vocab_gather_ref(const float *parts, float *logits, int B, int V, int tp);

#ifdef __cplusplus
}
#endif
#endif
