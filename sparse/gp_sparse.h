/* Activation sparsity at small batch: projections whose small inputs are
 * dropped (|x| <= a calibrated threshold counts as zero), so only the
 * weights of the active inputs are read. Kernels are C-callable (streams
 * void*, 16-bit tensors void* of a gp_dtype) with their CPU references. */
#ifndef GP_SPARSE_H
#define GP_SPARSE_H

#include <stddef.h>

#include "gp_common.h"
#include "gp_model.h"

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
    float *zeros;        /* [n_layers][GP_SPARSE_PROJ_COUNT] in [0, 1]: the share of each projection's
                            calibration inputs the thresholds drop, measured; or NULL (not recorded) */
} gp_sparsity;

/* The calibration file (greenpipe calibrate --out, a --sparsity FILE.json):
 *   {"format": "greenpipe-sparsity", "version": 1, "model": "tiny",
 *    "shape": {"n_layers": 2, "hidden": 64, "ffn": 128, "q_dim": 64},
 *    "target": 0.5, "tokens": 512, "source": "random ids, seed 0",
 *    "layers": [{"qkv": 0.61, "o": 0.0213, "gate_up": 0.58, "down": 0.0047,
 *                "zeros": {"qkv": 0.5, "o": 0.5, "gate_up": 0.5, "down": 0.5},
 *                "freq": [ffn numbers]}, ...]}
 * one layer object per layer, in order; "zeros" and "freq" optional, in
 * every layer or in none. Numbers are written with 9 significant digits,
 * which give every float back exactly (and the target when it was given
 * with at most 9). */
#define GP_SPARSITY_FORMAT "greenpipe-sparsity"
#define GP_SPARSITY_VERSION 1
/* Reads and validates path into *out (free with gp_sparsity_free). Refused
 * with GP_ERR_FORMAT naming the path, the key (and layer) and what is
 * allowed: not JSON, another format or version, a missing or mistyped
 * field, a threshold negative or beyond float, a target outside [0, 1), a
 * share outside [0, 1], a freq array not ffn long, layers not n_layers
 * long. GP_ERR_NOT_FOUND / GP_ERR_IO when it cannot be read. */
gp_status gp_sparsity_load(const char *path, gp_sparsity *out);
/* Writes s (valid: as gp_sparsity_load would accept it, else
 * GP_ERR_INVALID_ARG) to path; GP_ERR_IO naming path when it cannot. */
gp_status gp_sparsity_save(const gp_sparsity *s, const char *path);
void gp_sparsity_free(gp_sparsity *s);
/* Does s fit the model cfg? GP_ERR_SHAPE naming the first field that
 * differs (model name, n_layers, hidden, ffn, q_dim) with both values. */
gp_status gp_sparsity_check(const gp_sparsity *s, const gp_config *cfg);

/* Projection p of cfg as W [N][K] (K its input width): qkv (q/k/v rows x
 * hidden), o (hidden x n_heads * head_dim), gate_up (2 ffn x hidden), down
 * (hidden x ffn). */
void gp_sparse_proj_shape(const gp_config *cfg, gp_sparse_proj p, int *N, int *K);
/* From active-input counts [n_layers][4] summed over `calls` calls of each
 * projection (gp_engine_sparsity_stats): per layer and projection the share
 * of inputs active (per, [n_layers][4], may be NULL), its mean over the
 * layers (mean[4]), and the bytes of 16-bit projection weights a call reads
 * (the active rows of all four projections of every layer). calls 0: all 0. */
void gp_sparse_density(const gp_config *cfg, const long *active, long calls, double *per,
                       double mean[GP_SPARSE_PROJ_COUNT], double *weight_bytes);
/* A calibration of cfg with every threshold 0 (target 0, no tokens, no
 * frequencies): masks nothing the dense product counts, so results are the
 * dense ones; for tests. */
gp_status gp_sparsity_thresholds_zero(const gp_config *cfg, gp_sparsity *out);

/* ------------------------------------------------------------ calibration */

/* How gp_sparsity_calibrate runs. */
typedef struct gp_sparsity_calib_params {
    double target;      /* S in [0, 1): the share of each layer-projection's inputs to drop; default 0.5 */
    int n_seqs;         /* calibration sequences, >= 1 (no default) */
    const int *lens;    /* [n_seqs] their lengths, each 1..the model's max_context */
    const int32_t *ids; /* the sequences one after another, sum of lens ids in [0, vocab) */
    int n_threads;      /* CPU reference threads: 0 (default) the online CPUs up to 16, or 1..16 */
    gp_dtype act_dtype; /* the reference's activation rounding (gp_cpu_model_set_act_dtype): BF16
                           (default: what the bf16 engine reads), F16 or F32 */
    int batch;          /* sequences prefilled together, 1..256; default 8: more rows share each
                           weight read, and the KV cache holds batch x the longest sequence */
    const char *source; /* recorded as the calibration's source; NULL: "" */
} gp_sparsity_calib_params;
gp_sparsity_calib_params gp_sparsity_calib_default_params(void);

/* Calibrates w on the CPU reference: prefills every sequence (each token's
 * inputs seen, dense) and sets each layer-projection's threshold to the
 * S-quantile of its inputs' magnitudes, from a histogram (calibrate.c: the
 * precision), then prefills them again to measure, with the thresholds
 * known, each projection's share of dropped inputs (out->zeros) and each
 * FFN neuron's share of tokens whose down input is active (out->freq).
 * Two forward passes over the tokens; memory: the model's host weights,
 * the reference's KV cache of batch x the longest sequence, and 64 KiB of
 * histogram per layer-projection. *out is filled (free with
 * gp_sparsity_free) only on success. Bad params are GP_ERR_INVALID_ARG
 * naming the field and value; activations that are not finite
 * GP_ERR_UNSUPPORTED naming the layer and projection. */
gp_status gp_sparsity_calibrate(const gp_host_weights *w, const gp_sparsity_calib_params *p, gp_sparsity *out);

#ifdef __cplusplus
}
#endif
#endif
