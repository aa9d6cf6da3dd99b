/* greenpipe CPU reference: the float32 forward pass of the model on the host,
 * decode steps, prefills and stages, and the reference operations that are
 * the oracles of the GPU kernels. */
#ifndef GP_REFERENCE_H
#define GP_REFERENCE_H

#include <stdint.h>

#include "gp_common.h"
#include "gp_model.h"
#include "gp_stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------- CPU reference */

typedef struct gp_cpu_model gp_cpu_model; /* opaque */

/* Build a reference model over w (borrowed, must outlive it) with room for
 * max_seqs sequences of up to max_context tokens each. */
gp_status gp_cpu_model_create(const gp_host_weights *w, int max_seqs, int max_context,
                              int block_size, gp_cpu_model **out);
void gp_cpu_model_destroy(gp_cpu_model *m);
/* Host bytes of the KV cache gp_cpu_model_create allocates for these
 * arguments (float32 K and V of every layer); UINT64_MAX on overflow, 0 for
 * arguments it would refuse as out of range. */
uint64_t gp_cpu_model_kv_bytes(const gp_config *cfg, int max_seqs, int max_context, int block_size);
/* One decode step for B sequences: seq_ids[B] pick the sequences, tokens[B]
 * are their next input tokens; each sequence's position is its current cache
 * length. Appends K/V and writes logits[B][vocab]. Checked as a batch of B
 * decode parts by gp_batch_check before anything changes. */
gp_status gp_cpu_decode_step(gp_cpu_model *m, int B, const int *seq_ids, const int32_t *tokens,
                             float *logits);
/* One forward over a mixed batch (gp_stage.h's gp_batch: prefill parts
 * first, then decode parts; checked by gp_batch_check before anything
 * changes, so a refused batch leaves every sequence as it was). Every row's
 * K/V is appended at its sequence's length plus its index in its part; a
 * prefill row attends causally over its sequence's cache (the tokens it held
 * and this part's tokens up to its own), a decode row as a decode step. Rows
 * never mix, so a decode part's logits are bitwise gp_cpu_decode_step's and
 * a prefill part's bitwise gp_cpu_prefill_batch's, whatever else the batch
 * holds. logits [n_parts][vocab] (may be NULL): those after each part's last
 * row; next [n_parts] (may be NULL): their argmax. Sparsity masking (below)
 * applies to a batch of decode parts only: one with a prefill row stays
 * dense, as a prefill does. The per-row scratch grows to the batch's rows
 * (at most max_seqs x max_context). */
gp_status gp_cpu_run_batch(gp_cpu_model *m, const gp_batch *b, int32_t *next, float *logits);
/* Fill the caches of S sequences from their prompts (gp_prefill_seq:
 * distinct sequences, 1 <= S <= max_seqs; a sequence may already hold
 * tokens, its positions continue after them) as the exact reference: prompt
 * position by position, each position one forward over a one-token prefill
 * part of every prompt that has a token there, so every prompt's logits are
 * bitwise those of prefilling it alone. last_logits [S][vocab] (may be NULL): row s the logits
 * after seqs[s]'s last token; prompt_logits [sum of n][vocab] (may be NULL):
 * the logits at every prompt position, all of seqs[0]'s, then seqs[1]'s, ...
 * Everything (ids, lengths, tokens, room in max_context) is checked before
 * the cache changes: a refused call leaves every sequence as it was. */
gp_status gp_cpu_prefill_batch(gp_cpu_model *m, int S, const gp_prefill_seq *seqs, float *last_logits,
                               float *prompt_logits);
/* One prompt: gp_cpu_prefill_batch with S = 1; the logits after its last
 * token go to last_logits [vocab] (may be NULL). */
gp_status gp_cpu_prefill(gp_cpu_model *m, int seq, int n, const int32_t *prompt, float *last_logits);
void gp_cpu_reset_seq(gp_cpu_model *m, int seq);
/* KV blocks shared between sequences (prefix caching over the reference;
 * kvcache/gp_kvcache.h's gp_kv_block_retain, gp_kv_block_drop, gp_kv_attach
 * on the reference's paged cache): a handle is a pool block, kept while a
 * sequence or a retain holds it. The reference computes each position's K/V
 * alone, so an attached block holds bitwise what a prefill would write.
 * GP_ERR_STATE during a step. gp_cpu_kv_blocks: the pool's free and total
 * blocks. */
gp_status gp_cpu_kv_retain_block(gp_cpu_model *m, int seq, int index, int *handle);
gp_status gp_cpu_kv_drop_block(gp_cpu_model *m, int handle);
gp_status gp_cpu_kv_attach(gp_cpu_model *m, int seq, const int *handles, int n);
void gp_cpu_kv_blocks(gp_cpu_model *m, int *free_blocks, int *total);
/* A host tier's copies (a prefix cache's evicted blocks kept in a
 * gp_kvstore, dtype_bytes 4): one block's KV in the store's payload layout
 * (kvstore/gp_kvstore.h: per layer K then V, each [block_size][n_kv_heads]
 * [head_dim] float). read_block: retained block handle into payload;
 * append_blocks: sequence seq, holding a whole number of blocks, takes n
 * more filled from payloads[0..n) as computed tokens (nothing changed on
 * failure: GP_ERR_NO_MEMORY without n free blocks, GP_ERR_INVALID_ARG past
 * max_context). GP_ERR_STATE during a step. */
gp_status gp_cpu_kv_read_block(gp_cpu_model *m, int handle, void *payload);
gp_status gp_cpu_kv_append_blocks(gp_cpu_model *m, int seq, const void *const *payloads, int n);
const gp_config *gp_cpu_model_config(const gp_cpu_model *m);
int gp_cpu_model_max_seqs(const gp_cpu_model *m);
/* Round activations through dt exactly where the CUDA engine stores them in
 * its 16-bit compute dtype (normed inputs, QKV (the GEMM output; with a
 * bias v again after the bias is added, q and k after RoPE), RoPE'd q and k,
 * V, attention output,
 * gate/up, SwiGLU output, final norm); the residual stays fp32. GP_DTYPE_F32
 * (the default) rounds nothing: pure fp32, the HF oracle. BF16 or F16: the
 * engine's arithmetic of that dtype on the CPU, the tight oracle for the
 * whole GPU engine and the measure of its drift from HF. Other values are
 * ignored. */
void gp_cpu_model_set_act_dtype(gp_cpu_model *m, gp_dtype dt);
/* Tensor parallel: this model is rank `rank` of tp, its weights that rank's
 * shard (gp_tp_config, gp_host_weights_shard). sum(ctx, rows, n) gets the
 * fp32 rows of the step's embedding (each rank's holds its part of the
 * vocabulary's tokens, zero for the others) and the output of every layer's
 * o and down projection (n = rows x hidden floats) before it is added to
 * the residual, and must leave there the sum over the ranks (an
 * all-reduce). gather(ctx, buf, n) gets tp segments of n floats, this
 * rank's segment the logits of its part of the head ([rows][vocab rows]),
 * and must fill in the others' (an all-gather). A status other than GP_OK
 * fails the stage. tp 1 (the default): one rank, sum and gather unused.
 * GP_ERR_INVALID_ARG for rank outside 0..tp-1, tp > 1 without sum or
 * gather or with weights not cut into tp parts of the vocabulary. Not
 * during a step. */
typedef gp_status (*gp_cpu_reduce_fn)(void *ctx, float *rows, size_t n);
typedef gp_status (*gp_cpu_gather_fn)(void *ctx, float *buf, size_t n);
typedef struct gp_cpu_tp {
    int rank, tp;
    gp_cpu_reduce_fn sum;
    gp_cpu_gather_fn gather;
    void *ctx;
} gp_cpu_tp;
gp_status gp_cpu_model_set_tp(gp_cpu_model *m, const gp_cpu_tp *tp);
/* Threads of the model's own worker (the one gp_cpu_decode_step and the
 * prefills run on): 0 the default (online CPUs, at most 16, GP_REF_THREADS)
 * or 1..16. Results do not depend on it. Not during a step. */
gp_status gp_cpu_model_set_threads(gp_cpu_model *m, int n_threads);
/* The threads that worker obtained (a thread that cannot start makes it smaller). */
int gp_cpu_model_threads(const gp_cpu_model *m);

/* Activation sparsity (the thresholds come from sparse/'s
 * gp_sparsity). Four projections per layer have their inputs thresholded,
 * numbered as sparse/'s gp_sparse_proj (reference/ does not depend on sparse/,
 * so they are plain ints here): 0 q/k/v (input: the attention RMSNorm's
 * output, hidden wide), 1 o (the attention output, n_heads x head_dim),
 * 2 gate/up (the FFN RMSNorm's output, hidden), 3 down (the SwiGLU output,
 * ffn). */
#define GP_CPU_PROJ_COUNT 4
/* The largest decode batch that is masked: sparse/'s GP_SPARSE_MAX_B (the
 * sparse kernel's), which sparse/ asserts equal. */
#define GP_CPU_SPARSE_MAX_B 16
/* thresholds [n_layers][GP_CPU_PROJ_COUNT] (copied; each finite and >= 0,
 * the caller's duty: gp_sparsity_check), or NULL to turn masking off (the
 * default). When on, every decode step (gp_cpu_decode_step, and
 * gp_cpu_step_begin .. gp_cpu_step_end, and a batch of decode parts only)
 * whose batch has at most GP_CPU_SPARSE_MAX_B rows replaces each projection input x with 0 unless
 * |x| > t, the layer's threshold for that projection (sparse/gp_sparse.h's
 * rule; a NaN input counts as 0 too, as in the kernel), on the values the
 * matmul reads: after the activation rounding of
 * gp_cpu_model_set_act_dtype. The batch is the step's, not a stage's row
 * range, so any split into micro-batches masks alike. Prefill
 * (gp_cpu_prefill_batch, gp_cpu_prefill) stays dense. With every threshold
 * 0 the logits are bitwise those without masking (only exact zeros and
 * NaNs are replaced; see reference.c's gp_ref_mask). Not during a step. */
void gp_cpu_model_set_sparsity(gp_cpu_model *m, const float *thresholds);
/* A projection's input rows as the matmul is about to read them: after the
 * activation rounding, before masking. x is [rows][width] contiguous, valid
 * during the call only; proj as above; rows the stage's batch rows (one
 * prefill position's prompts in a prefill). */
typedef void (*gp_cpu_capture_fn)(void *ctx, int layer, int proj, int rows, int width, const float *x);
/* Call fn(ctx, ...) for every projection input of every step, prefill and
 * decode alike; NULL fn turns it off. Thread-safety: fn runs on the thread
 * that runs the stage, before the matmul is handed to the worker's pool
 * (never on a pool thread), once per matmul. gp_cpu_decode_step and the
 * prefills call it from their caller's thread, layer by layer in order;
 * stages over disjoint rows that run at the same time (the pipelined CPU
 * executor) call it from their threads at the same time, so fn must then be
 * thread-safe. Not during a step. */
void gp_cpu_model_set_capture(gp_cpu_model *m, gp_cpu_capture_fn fn, void *ctx);

/* A step as stages, for the pipeline's CPU executor: gp_cpu_step_begin
 * (a decode step) or gp_cpu_step_begin_batch (a mixed batch) (validate,
 * reserve KV, embed into the model's residual rows, gp_cpu_resid_view), then
 * per layer gp_cpu_stage(GP_STAGE_ATTN) and gp_cpu_stage(GP_STAGE_FFN) over
 * batch-row ranges (micro-batches), then gp_cpu_step_end (final norm and LM
 * head of each part's last residual row it is handed into logits
 * [n_parts][vocab] unless NULL, KV lengths advanced). A prefill part split
 * over micro-batches is causal as long as attention(L) of its earlier rows
 * runs before that of its later ones. A stage reads and
 * updates exactly the residual view in its gp_stage_io (host f32 [nb][hidden],
 * any row stride), so an executor may hand it rows that live elsewhere; its
 * other buffers are per-row scratch and the KV cache. Results are bitwise
 * those of gp_cpu_decode_step for any split into row ranges. Stages over
 * disjoint rows may run at the same time on different threads, each with its
 * own worker; for one row range the order attention(L) -> FFN(L) ->
 * attention(L+1) is the caller's duty. gp_cpu_step_abort drops a failed step
 * (reserved KV stays with its sequence). */
typedef struct gp_cpu_worker gp_cpu_worker; /* opaque: a thread pool and scratch */
/* n_threads 0: the default (online CPUs, at most 16, GP_REF_THREADS). */
gp_status gp_cpu_worker_create(const gp_cpu_model *m, int n_threads, gp_cpu_worker **out);
void gp_cpu_worker_destroy(gp_cpu_worker *wk);
gp_status gp_cpu_step_begin(gp_cpu_model *m, int B, const int *seq_ids, const int32_t *tokens);
gp_status gp_cpu_step_begin_batch(gp_cpu_model *m, const gp_batch *b);
/* The model's own residual rows [b0, b0+nb) (where gp_cpu_step_begin embeds). */
gp_status gp_cpu_resid_view(const gp_cpu_model *m, int b0, int nb, gp_tensor_view *out);
/* kind GP_STAGE_ATTN or GP_STAGE_FFN; io->x and io->y empty. */
gp_status gp_cpu_stage(gp_cpu_model *m, gp_cpu_worker *wk, gp_stage_kind kind, const gp_stage_io *io);
/* resid: the step's residual rows, in batch order. */
gp_status gp_cpu_step_end(gp_cpu_model *m, gp_cpu_worker *wk, const gp_tensor_view *resid, float *logits);
void gp_cpu_step_abort(gp_cpu_model *m);
/* Index of the largest value (first one on ties). */
int32_t gp_argmax(const float *x, int n);

/* Reference operations, also the oracles for the GPU kernels: weights of
 * dtype wdt (F32, BF16 or F16), widened exactly. */
void gp_ref_rmsnorm(float *out, const float *x, const void *w, gp_dtype wdt, int n, float eps);
void gp_ref_matvec(float *out, const void *w, gp_dtype wdt, const float *x, int rows, int cols);
void gp_ref_rope(float *vec, int n_heads, int head_dim, int pos, const float *inv_freq);
void gp_ref_swiglu(float *out, const float *gate, const float *up, int n);

#ifdef __cplusplus
}
#endif
#endif
