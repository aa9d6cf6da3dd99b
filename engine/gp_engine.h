/* greenpipe CUDA engine: device buffers for one decode step, the attention
 * and FFN stage entry points, and the sequential step (all SMs), eager or
 * replayed as a CUDA graph. C-callable; no CUDA types (streams are void*). */
#ifndef GP_ENGINE_H
#define GP_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "gp_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_engine gp_engine; /* opaque */

typedef struct gp_engine_params {
    int max_batch;     /* sequences per step */
    int max_context;   /* tokens per sequence, prompt included */
    int block_size;    /* KV cache block size in tokens */
    bool use_graphs;   /* replay each step shape as a CUDA graph (default on) */
    int gemm_tune;     /* 0 (default): cuBLASLt's heuristic picks each layer GEMM's
                          algorithm; N in 1..GP_GEMM_TUNE_MAX_CANDIDATES: the fastest of
                          its first N candidates, timed on the GEMM's own SM partition
                          before a step shape is first captured. Timing-based, so two
                          runs may pick differently (results differ in rounding only) */
} gp_engine_params;
gp_engine_params gp_engine_default_params(void);

/* Device bytes the engine needs for these params (KV pools + activations +
 * workspaces), so callers can check before creating. Weights not included. */
uint64_t gp_engine_device_bytes(const gp_config *cfg, const gp_engine_params *p);

/* dw is borrowed and must outlive the engine. Fails with GP_ERR_DEVICE_MEMORY
 * naming needed and free bytes when the device cannot hold it. */
gp_status gp_engine_create(gp_device_weights *dw, const gp_engine_params *p, gp_engine **out);
void gp_engine_destroy(gp_engine *e);
const gp_config *gp_engine_config(const gp_engine *e);

/* Prefill sequence seq with n prompt tokens (token by token through decode
 * steps); next (may be NULL) receives the greedy token after the prompt and
 * last_logits[vocab] (host, may be NULL) the logits it was chosen from. */
gp_status gp_engine_prefill(gp_engine *e, int seq, int n, const int32_t *prompt, int32_t *next,
                            float *last_logits);

/* One decode step over B sequences (seq_ids[B] distinct, tokens[B] their next
 * inputs). next[B] receives the greedy tokens; logits (host [B][vocab]) may
 * be NULL. Host waits only at the end of the step, for next[]. */
gp_status gp_engine_decode_step(gp_engine *e, int B, const int *seq_ids, const int32_t *tokens,
                                int32_t *next, float *logits);
void gp_engine_reset_seq(gp_engine *e, int seq);
/* Device time of the last gp_engine_decode_step (its events), or -1. */
float gp_engine_last_step_ms(const gp_engine *e);

/* Benchmark support: give sequences 0..B-1 a context of C tokens of random
 * K/V (no prefill) so a step's cost equals that of a real C-token context. */
gp_status gp_engine_fill_context(gp_engine *e, int B, int C, uint64_t seed);

/* Time n_steps decode steps of sequences 0..B-1 with device events (after
 * warmup steps), feeding each step's greedy tokens to the next; ms[n_steps]
 * receives each step's time. Contexts grow by one token per step. */
gp_status gp_engine_time_steps(gp_engine *e, int B, int warmup, int n_steps, float *ms);

/* Per-stage times of one step (eager launch, events between stages), for a
 * breakdown: ms per kernel class summed over layers. */
typedef struct gp_step_breakdown {
    float embed, attn_norm, qkv_gemm, rope_kv, attention, o_gemm, ffn_norm, gate_up_gemm, swiglu,
        down_gemm, head; /* ms */
} gp_step_breakdown;
gp_status gp_engine_breakdown(gp_engine *e, int B, gp_step_breakdown *out);

#ifdef __cplusplus
}
#endif
#endif
