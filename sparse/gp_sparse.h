/* Activation sparsity at small batch: projections whose small inputs are
 * dropped (|x| <= a calibrated threshold counts as zero), so only the
 * weights of the active inputs are read. Kernels are C-callable (streams
 * void*, 16-bit tensors void* of a gp_dtype) with their CPU references. */
#ifndef GP_SPARSE_H
#define GP_SPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
 * to an fp32 buffer (the residual); or, for the fused gate/up projection
 * (N = 2F: gate rows then up rows), its SwiGLU: 16-bit [B][F], element j
 * silu(g) u of g, u the sums of columns j and F + j each rounded to the
 * dtype, exactly what the 16-bit output followed by gp_swiglu gives, with
 * one kernel fewer. */
enum { GP_SPARSE_OUT_HALF = 0, GP_SPARSE_OUT_F32 = 1, GP_SPARSE_OUT_F32_ACC = 2, GP_SPARSE_OUT_SWIGLU = 3 };

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

/* The per-step choice between the sparse kernel and the dense GEMM (the
 * engine's, per projection and batch size): the union density of a batch's
 * active inputs decides which reads fewer bytes faster.
 * gp_sparse_crossover: the density below which the sparse kernel is
 * predicted faster than the dense GEMM, in [0, 1], from one projection's
 * timings at one batch size: dense_ms, and the sparse kernel at union
 * density 1 (full_ms) and at part_density in (0, 1) (part_ms), its time
 * taken as a line in the density. 1 where the sparse kernel is not slower
 * even at full density, or where a timing is unusable (not > 0, not finite:
 * the calibration's choice stands). */
float gp_sparse_crossover(float dense_ms, float full_ms, float part_ms, float part_density);
/* Run the sparse kernel this step? density: the union density the last step
 * that ran it measured at this batch size (< 0: none yet, which runs it);
 * below crossover it runs; else the dense GEMM runs, except every probe-th
 * step (dense_steps: the dense steps since that measurement), which runs the
 * sparse kernel to measure again. probe >= 1. */
bool gp_sparse_pick(float crossover, float density, int dense_steps, int probe);

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
    gp_model_identity identity; /* the weights it was calibrated on (gp_model_identity_of); fingerprint ""
                            when not recorded (files written before identities were), which
                            gp_sparsity_check_identity refuses */
} gp_sparsity;

/* The calibration file (greenpipe calibrate --out, a --sparsity FILE.json):
 *   {"format": "greenpipe-sparsity", "version": 1, "model": "tiny",
 *    "identity": {"fingerprint": "3f0c9a1b27d4e851", "summary": "preset tiny, seed 0, ..."},
 *    "shape": {"n_layers": 2, "hidden": 64, "ffn": 128, "q_dim": 64},
 *    "target": 0.5, "tokens": 512, "source": "random ids, seed 0",
 *    "layers": [{"qkv": 0.61, "o": 0.0213, "gate_up": 0.58, "down": 0.0047,
 *                "zeros": {"qkv": 0.5, "o": 0.5, "gate_up": 0.5, "down": 0.5},
 *                "freq": [ffn numbers]}, ...]}
 * one layer object per layer, in order; "zeros" and "freq" optional, in
 * every layer or in none. "identity" (the weights', gp_model_identity) is
 * optional to read, so files written before it load, but such a file is
 * refused by gp_sparsity_check_identity; the fingerprint is 16 lowercase
 * hex digits. Numbers are written with 9 significant digits,
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
/* Does s fit the shape of model cfg? GP_ERR_SHAPE naming the first field
 * that differs (n_layers, hidden, ffn, q_dim) with both values. The name is
 * not compared: it is a folder's, and says nothing of the weights. */
gp_status gp_sparsity_check(const gp_sparsity *s, const gp_config *cfg);
/* Was s calibrated on the weights id names? GP_ERR_INVALID_ARG when s
 * records no identity (a file that predates them: the message says so and
 * how to recalibrate) or another one (the message gives both identities,
 * summary and fingerprint). Check the shape first (gp_sparsity_check): its
 * message is the more precise one when the shape differs too. */
gp_status gp_sparsity_check_identity(const gp_sparsity *s, const gp_model_identity *id);
/* The calibration at path, for the model src: gp_sparsity_load, then its
 * shape (gp_sparsity_check) and its weights (gp_model_identity_of,
 * gp_sparsity_check_identity) checked; on failure out holds nothing. The
 * one way a program takes a calibration for a model. */
gp_status gp_sparsity_load_for(const char *path, const gp_model_source *src, gp_sparsity *out);

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
    const gp_model_identity *identity; /* the weights' (gp_model_identity_of), recorded in the result;
                           NULL: none, and the result is refused wherever it is checked */
    gp_progress_cb progress; /* the tokens of both passes as they are prefilled; fn NULL: none */
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

/* ------------------------------------------------------------ hot set */

/* At small decode batch the FFN's neurons split in two: the "hot" ones
 * (neuron j: row j of gate and of up, column j of down) stay in a GPU cache
 * of a fixed number of slots per layer, the "cold" ones in host memory where
 * CPU threads compute their share (gp_cold_ffn_run). The tracker keeps a
 * decayed activation frequency per neuron, f_j <- d f_j + (1 - d) a_j per
 * decode step (a_j = 1 when neuron j's down input was active, |SwiGLU
 * output| > the layer's down threshold, for any row of the step), and every
 * reload_window steps plans the swaps that bring the most frequent cold
 * neurons into the cache. */

/* A hot set below this many neurons per layer is refused, and capacities
 * are multiples of it: 8 16-bit values are the GPU kernels' 16-byte vector,
 * so the hot down matrix [hidden][H] keeps every row 16-byte aligned. */
#define GP_HOTSET_ALIGN 8

typedef struct gp_hotset_params {
    double decay;      /* d in (0, 1); default 0.99 (a window of ~100 steps weighs most) */
    int reload_window; /* W >= 1: decode steps between reload plans; default 64 */
    double margin;     /* hysteresis in [0, 1]: an incoming neuron must beat the outgoing one's f by more
                          than this, so neurons near the boundary do not swap back and forth; default 0.05 */
    int max_swaps;     /* >= 0: swaps per layer and reload at most (bounds the copy bytes of one window);
                          0 (default): no cap */
    int hot_per_layer; /* H in 1..ffn: slots per layer (gp_hotset_capacity); no default (0 is refused) */
    gp_dtype dtype;    /* the 16-bit weight dtype the cache holds (BF16 default, or F16): sizes copies */
} gp_hotset_params;
gp_hotset_params gp_hotset_default_params(void);

/* Bytes one neuron occupies in the cache: its gate row, up row and down
 * column, 3 x hidden x the dtype's size. */
uint64_t gp_hotset_neuron_bytes(const gp_config *cfg, gp_dtype dt);
/* Hot slots per layer that budget_bytes of cache hold, uniform over the
 * layers: floor(budget / (n_layers x neuron bytes)) rounded down to a
 * multiple of GP_HOTSET_ALIGN. A budget below GP_HOTSET_ALIGN neurons in
 * every layer is GP_ERR_INVALID_ARG naming the budget and the bytes that
 * minimum needs; one at or above every neuron of every layer gives
 * *hot_per_layer = ffn and *all_hot = true (nothing is cold: no CPU share,
 * no reloads), which is not an error. dt BF16 or F16. */
gp_status gp_hotset_capacity(const gp_config *cfg, gp_dtype dt, uint64_t budget_bytes, int *hot_per_layer,
                             bool *all_hot);

/* The top H of freq[n] by frequency, higher first, ties to the lower index,
 * into out[H] (neuron indices in that order). 1 <= H <= n. A NaN counts as
 * lower than every number. */
gp_status gp_hotset_choose(const float *freq, int n, int H, int *out);

typedef struct gp_hotset gp_hotset; /* opaque: frequencies, slot tables, statistics */

/* A tracker for cfg's layers. calib (may be NULL): its freq, when recorded,
 * starts the frequencies (it must fit cfg: gp_sparsity_check); otherwise they
 * start at 0. The first hot set is gp_hotset_choose of them in every layer,
 * slot s holding the s-th smallest chosen index (ascending addresses for the
 * first fill). Bad params: GP_ERR_INVALID_ARG naming the field, its value and
 * what is allowed. */
gp_status gp_hotset_create(const gp_config *cfg, const gp_hotset_params *p, const gp_sparsity *calib,
                           gp_hotset **out);
void gp_hotset_destroy(gp_hotset *h);
int gp_hotset_capacity_of(const gp_hotset *h); /* H */
/* Layer's slot table [H]: slot -> neuron. Valid until the next commit. */
const int *gp_hotset_slots(const gp_hotset *h, int layer);
/* The slot holding neuron j of layer, or -1 when j is cold. */
int gp_hotset_slot_of(const gp_hotset *h, int layer, int j);
/* Layer's frequencies [ffn]. */
const float *gp_hotset_freq(const gp_hotset *h, int layer);
/* Layer's cold neurons, ascending, into out (room for ffn - H); *n their
 * count: the list gp_cold_ffn_run takes. */
gp_status gp_hotset_cold_list(const gp_hotset *h, int layer, int *out, int *n);

/* One decode step's activity of one layer: active[ffn] nonzero for a neuron
 * whose down input was active in some row. Each layer once per step
 * (GP_ERR_STATE naming the layer otherwise); the decay applies here. */
gp_status gp_hotset_observe(gp_hotset *h, int layer, const uint8_t *active);
/* The same from the step's SwiGLU output rows act [B][ffn] (fp32) and the
 * layer's down threshold t (>= 0): active = the union of |act| > t. */
gp_status gp_hotset_observe_rows(gp_hotset *h, int layer, int B, const float *act, float t);
/* Ends a step: every layer must have been observed (GP_ERR_STATE naming
 * the first that was not). *reload_due (may be NULL) is 1 every
 * reload_window steps, when the caller makes and commits a plan. */
gp_status gp_hotset_end_step(gp_hotset *h, int *reload_due);

/* One swap: the neuron in slot leaves (out) and in takes the slot. */
typedef struct gp_hotset_swap {
    int slot, out, in;
} gp_hotset_swap;
/* A reload plan over all layers: layer l's swaps are swaps[l x cap ..
 * l x cap + n_swaps[l]). Allocated by gp_hotset_plan_alloc for a tracker. */
typedef struct gp_hotset_plan {
    int n_layers, cap;      /* cap: the most swaps one layer can have (max_swaps, or min(H, ffn - H)) */
    int *n_swaps;           /* [n_layers] */
    gp_hotset_swap *swaps;  /* [n_layers][cap] */
    long total;             /* swaps over the layers */
    uint64_t bytes;         /* bytes to copy host -> cache: total x gp_hotset_neuron_bytes */
} gp_hotset_plan;
gp_status gp_hotset_plan_alloc(const gp_hotset *h, gp_hotset_plan *plan);
void gp_hotset_plan_free(gp_hotset_plan *plan);
/* The swaps that move each layer's hot set toward the top H by frequency:
 * the coldest hot neuron (lowest f, ties: higher index first) pairs with
 * the hottest cold one (highest f, ties: lower index first), then the next
 * pair, while f_in > f_out + margin and fewer than max_swaps (when set).
 * Neurons that stay keep their slots: an incoming one takes its outgoing
 * partner's slot. With margin 0 and no cap the committed set is the top H
 * up to equal frequencies (equal never swaps). Changes nothing in h. */
gp_status gp_hotset_plan_make(const gp_hotset *h, gp_hotset_plan *plan);
/* Applies plan (made for h's current slots; a swap whose slot does not
 * hold its out neuron, or whose in neuron is already hot, is GP_ERR_STATE
 * and nothing changes) and counts it as one reload. */
gp_status gp_hotset_plan_commit(gp_hotset *h, const gp_hotset_plan *plan);

typedef struct gp_hotset_stats {
    long steps;              /* decode steps ended */
    long active, hits;       /* active neurons observed over steps and layers, and those that were hot */
    double hit_rate;         /* hits / active (0 when none were active) */
    long reloads, swaps;     /* plans committed, swaps in them */
    uint64_t bytes;          /* bytes those swaps copy */
} gp_hotset_stats;
/* Statistics since creation or the last reset. */
void gp_hotset_get_stats(gp_hotset *h, gp_hotset_stats *out, int reset);

/* ------------------------------------------------------------ cold-neuron FFN */

/* A layer's FFN neurons packed for the CPU: neuron list[i] at element
 * i x 3 x hidden, its gate row, up row and down column (down^T's row) one
 * after another in the dtype dt (BF16 or F16), so a neuron is one
 * contiguous read. */
typedef struct gp_cold_pack gp_cold_pack; /* opaque */
/* Packs layer of w (any host dtype; F32 is rounded to dt, and an fp16
 * overflow is GP_ERR_UNSUPPORTED as gp_weights_convert) for neurons
 * list[n] (distinct, in [0, ffn)), or every neuron in order when list is
 * NULL: packing all of them serves any cold set without repacking. */
gp_status gp_cold_pack_create(const gp_host_weights *w, int layer, gp_dtype dt, const int *list, int n,
                              gp_cold_pack **out);
void gp_cold_pack_destroy(gp_cold_pack *pk);
int gp_cold_pack_count(const gp_cold_pack *pk);
uint64_t gp_cold_pack_bytes(const gp_cold_pack *pk);
int gp_cold_pack_hidden(const gp_cold_pack *pk);
gp_dtype gp_cold_pack_dtype(const gp_cold_pack *pk);
/* The pack's whole buffer (gp_cold_pack_bytes long), for a caller that pins
 * it so copies out of it can run asynchronously. */
void *gp_cold_pack_data(gp_cold_pack *pk);
/* Neuron j's packed 3 x hidden values, or NULL when it is not in the pack. */
const void *gp_cold_pack_neuron(const gp_cold_pack *pk, int j);

typedef struct gp_cold_ffn_params {
    int n_threads; /* 0 (default): the online CPUs, at most 16; or 1..16 */
    int chunks;    /* the neuron list is cut into this many pieces, each summed into its own partial y,
                      the partials then added in order: results depend on it, never on n_threads;
                      1..256, default 48 (divisible by 1, 2, 3, 4, 6, 8, 12 and 16 threads) */
} gp_cold_ffn_params;
gp_cold_ffn_params gp_cold_ffn_default_params(void);

typedef struct gp_cold_ffn gp_cold_ffn; /* opaque: a persistent thread pool and scratch */
gp_status gp_cold_ffn_create(const gp_cold_ffn_params *p, gp_cold_ffn **out);
void gp_cold_ffn_destroy(gp_cold_ffn *c);
int gp_cold_ffn_threads(const gp_cold_ffn *c);

typedef struct gp_cold_ffn_stats {
    int active;          /* neurons of the list active (down input past t_down) in some row */
    uint64_t weight_bytes; /* 16-bit weights read: gate and up rows of every listed neuron, the down
                              column of the active ones */
    uint64_t bytes;      /* weight_bytes plus x read once */
} gp_cold_ffn_stats;

/* One layer's FFN over the neurons[n] (each in pk) for B rows
 * (1..GP_SPARSE_MAX_B): y[b][:] = sum over the listed j of mask(a_bj) x
 * down[:, j] in fp32, where x [B][hidden] is the FFN RMSNorm output in
 * pk's dtype, g_bj = mask(x_b) . gate_j and u_bj = mask(x_b) . up_j
 * (masked by t_gate_up, summed in fp32 in the CPU reference's order, so
 * each is the reference's value bit for bit), each rounded to the dtype,
 * a_bj = silu(g) u rounded to the dtype, then masked by t_down: where the
 * CPU reference in that activation dtype rounds and masks. y is written
 * (not added to); n = 0 gives zeros. stats may be NULL. One call at a time
 * per c. */
gp_status gp_cold_ffn_run(gp_cold_ffn *c, const gp_cold_pack *pk, int B, const void *x, float t_gate_up,
                          float t_down, const int *neurons, int n, float *y, gp_cold_ffn_stats *stats);
/* gp_cold_ffn_run that also reports which listed neurons were active:
 * active_out[i] (room for n; may be NULL) is 1 when neurons[i]'s masked
 * SwiGLU output is nonzero in some row, else 0: the cold half of a step's
 * activity for gp_hotset_observe. */
gp_status gp_cold_ffn_run_ex(gp_cold_ffn *c, const gp_cold_pack *pk, int B, const void *x, float t_gate_up,
                             float t_down, const int *neurons, int n, float *y, uint8_t *active_out,
                             gp_cold_ffn_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
