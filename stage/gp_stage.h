/* greenpipe stage vocabulary: the kinds of stage a step is made of, what
 * one stage call reads and writes, and the mixed batch of prefill-chunk and
 * decode rows with its one input check. */
#ifndef GP_STAGE_H
#define GP_STAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The stages of a decode step (docs/ARCHITECTURE.md section 2). A layer is
 * ATTN then FFN; with the QKV and O projections beside the FFN it is QKV(0)
 * once, then per layer ATTN_CORE and O_FFN_QKV. Same math either way. */
typedef enum gp_stage_kind {
    GP_STAGE_EMBED = 0,   /* tokens of rows [b0, b0+nb) -> resid (written) */
    GP_STAGE_ATTN,        /* resid -> resid: norm, QKV, RoPE + KV append, attention, O added in */
    GP_STAGE_FFN,         /* resid -> resid: norm, gate/up, SwiGLU, down added in */
    GP_STAGE_QKV,         /* resid -> y: norm and QKV projection of layer */
    GP_STAGE_ATTN_CORE,   /* x (QKV rows) -> y (attention output): RoPE + KV append, attention */
    GP_STAGE_O_FFN_QKV,   /* x (attention output), resid -> resid, y: O of layer added in, FFN of
                             layer, then norm and QKV of layer + 1 into y (y empty after the last) */
    GP_STAGE_HEAD,        /* resid -> the rows' greedy tokens and logits: final norm, LM head, argmax */
    GP_STAGE_COUNT
} gp_stage_kind;
const char *gp_stage_kind_name(gp_stage_kind k); /* "embed", "attn", ... */

/* What one stage call reads and writes. Rows [b0, b0+nb) of the step name
 * the sequences (their tokens, KV cache and per-row scratch); the views are
 * the stage's only activation inputs and outputs, each with nb rows. A view
 * a stage kind does not use must be empty. */
typedef struct gp_stage_io {
    int layer;            /* ignored by EMBED and HEAD */
    int b0, nb;           /* rows of the step */
    int max_len;          /* attention stages: the step's longest context, this token included */
    int attn_splits;      /* attention stages on the GPU: context splits, fixed per step so that a
                             captured graph stays valid; 0 lets the heuristic choose */
    gp_tensor_view x;     /* activation input rows (the engine dtype on the GPU, f32 on the CPU) */
    gp_tensor_view resid; /* f32 residual rows: read, and updated in place */
    gp_tensor_view y;     /* activation output rows */
    /* CUDA engine: the batch the rows belong to, as the lane that opened it
     * uploaded it (its prefill-chunk and decode rows, positions, table rows,
     * sequence descriptors); NULL: the batch open on the engine's default
     * lane. Executors that run no device batch leave it NULL. */
    const struct gp_stage_batch *batch;
} gp_stage_io;

/* One prompt of a batched prefill: n tokens appended to sequence seq, which
 * may already hold tokens (they are its context: positions continue after
 * them). */
typedef struct gp_prefill_seq {
    int seq;
    int n;                 /* >= 1 */
    const int32_t *tokens; /* [n] host */
} gp_prefill_seq;

/* ------------------------------------------------------------ mixed batches
 * One forward over the rows of many sequences: prefill-chunk rows (several
 * tokens of one sequence, attended causally over its cache) and decode rows
 * (one token of a sequence), the shape of vLLM's num_scheduled_tokens. The
 * batch's rows are its sequences' tokens in order: every prefill part first,
 * then every decode row, so the decode rows are one contiguous range
 * [n_prefill_rows, n_rows). Every GEMM runs over all rows; attention runs
 * per kind. Each part appends its tokens at its sequence's current length. */
typedef enum gp_batch_kind {
    GP_BATCH_PREFILL = 0, /* n >= 1 tokens of a prompt (a whole prompt or a chunk of one) */
    GP_BATCH_DECODE,      /* exactly one token, through the decode attention */
} gp_batch_kind;

typedef struct gp_batch_part {
    int seq;               /* sequence id */
    gp_batch_kind kind;
    int n;                 /* tokens fed: >= 1, and 1 for GP_BATCH_DECODE */
    const int32_t *tokens; /* [n] host */
} gp_batch_part;

typedef struct gp_batch {
    int n_parts;
    const gp_batch_part *parts; /* [n_parts]: the prefill parts, then the decode parts */
} gp_batch;

/* Where the prefill waiting goes, asked of a backend with two lanes
 * (prefill and decode on two SM partitions) each time its prefill lane is
 * free and prompt tokens wait: the backend's planner sees the decode rows
 * the step will run and the backlog, and answers with the kind of batch
 * and the most prefill tokens it may hold. */
typedef struct gp_pd_plan_in {
    int decode_rows;            /* decode rows of this step */
    long long decode_context;   /* their contexts summed (tokens each reads) */
    long long backlog_tokens;   /* prompt tokens still to compute, every running and waiting request's */
    int prefill_position;       /* where the next chunk starts: the tokens its sequence holds (the first
                                   request still prefilling; 0 for one not yet admitted) */
    int token_budget;           /* the scheduler's tokens per batch */
} gp_pd_plan_in;

typedef enum gp_pd_run {
    GP_PD_RUN_LANE = 0, /* a prefill batch on the prefill lane, beside the decode rows (on the split the
                           planner selected) */
    GP_PD_RUN_MIXED,    /* the prefill chunks ride in the decode rows' batch (chunked prefill's step) */
} gp_pd_run;

typedef struct gp_pd_plan {
    gp_pd_run run;
    int tokens; /* most prefill tokens of the batch: 1..token_budget */
} gp_pd_plan;

/* What a batch is checked against: the sequence ids, vocabulary and context
 * of the model state that runs it, and each sequence's current length. */
typedef struct gp_batch_limits {
    int max_seqs;        /* ids in [0, max_seqs); also the most parts of one batch */
    int max_rows;        /* tokens of one batch at most; 0: no limit */
    int vocab;
    int max_context;     /* tokens per sequence, these included */
    int (*seq_len)(const void *ctx, int seq); /* tokens sequence seq holds now */
    const void *ctx;
} gp_batch_limits;

/* The one input check of decode steps, prefills and mixed batches, before
 * any work: distinct ids in range, the prefill parts before the decode parts,
 * n >= 1 (1 for a decode part), tokens in the vocabulary, room in
 * max_context, rows within max_rows. who names the call in the message.
 * rows (may be NULL) receives the batch's rows, prefill_rows (may be NULL)
 * those of its prefill parts. */
gp_status gp_batch_check(const gp_batch *b, const gp_batch_limits *lim, const char *who, long long *rows,
                         long long *prefill_rows);

#ifdef __cplusplus
}
#endif
#endif
