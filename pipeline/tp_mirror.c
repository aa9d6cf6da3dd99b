/* Tensor-parallel serving: rank 0 leads, the other ranks follow. Every
 * session operation that changes the engines' state (a mixed batch, a
 * sequence's reset, the prefix cache's retained, dropped and attached
 * blocks) goes from the leader to the followers over the group's links
 * (gp_group_send), in order, so each rank's engine takes the same steps and
 * meets the others in the same collectives. A batch is sent before the
 * leader runs it (its collectives wait for every rank); a retained block's
 * handle after, so followers check theirs against it. Followers never
 * sample: the leader's tokens come in the next batch. */
#include <stdlib.h>
#include <string.h>

#include "gp_comm.h"
#include "gp_pipeline.h"

enum { OP_RUN = 1, OP_RESET, OP_RETAIN, OP_DROP, OP_ATTACH, OP_END };

/* What crosses: this header, then n_words int32 words. */
typedef struct op_head {
    int32_t op, a, b, c;
    int32_t n_words;
} op_head;

struct gp_tp_lead {
    gp_exec inner;
    gp_group *g;
    gp_session_ops ops; /* the inner executor's, with the state-changing ones mirrored */
    uint64_t steps;
    int32_t *words;
    size_t cap;
};

static gp_status grow(int32_t **w, size_t *cap, size_t n)
{
    if (n <= *cap)
        return GP_OK;
    size_t c = *cap ? *cap : 256;
    while (c < n)
        c *= 2;
    int32_t *q = realloc(*w, c * sizeof *q);
    if (!q)
        GP_FAIL(GP_ERR_NO_MEMORY, "tensor-parallel mirror: out of host memory for %zu words", n);
    *w = q;
    *cap = c;
    return GP_OK;
}

static gp_status send_op(gp_tp_lead *l, int32_t op, int32_t a, int32_t b, int32_t c, const int32_t *words,
                         int32_t n)
{
    const op_head h = {.op = op, .a = a, .b = b, .c = c, .n_words = n};
    GP_TRY(gp_group_send(l->g, &h, sizeof h));
    return n > 0 ? gp_group_send(l->g, words, sizeof(int32_t) * (size_t)n) : GP_OK;
}

/* A batch as words: per part its sequence, kind and token count, then
 * every part's tokens in order. */
static gp_status pack(gp_tp_lead *l, const gp_batch *b, int32_t *n_words)
{
    size_t n = 3 * (size_t)b->n_parts;
    for (int i = 0; i < b->n_parts; i++)
        n += (size_t)(b->parts[i].n > 0 ? b->parts[i].n : 0);
    if (n > INT32_MAX)
        GP_FAIL(GP_ERR_OVERFLOW, "tensor-parallel mirror: a batch of %zu words", n);
    GP_TRY(grow(&l->words, &l->cap, n));
    int32_t *w = l->words, *t = w + 3 * (size_t)b->n_parts;
    for (int i = 0; i < b->n_parts; i++) {
        const gp_batch_part *p = &b->parts[i];
        w[3 * i] = p->seq, w[3 * i + 1] = (int32_t)p->kind, w[3 * i + 2] = p->n;
        if (p->n > 0 && p->tokens)
            memcpy(t, p->tokens, sizeof(int32_t) * (size_t)p->n);
        t += p->n > 0 ? p->n : 0;
    }
    *n_words = (int32_t)n;
    return GP_OK;
}

static gp_status lead_run_batch(void *ctx, const gp_batch *b, int32_t *next, float *logits, float *step_ms)
{
    gp_tp_lead *l = ctx;
    if (!b || b->n_parts < 0 || (b->n_parts && !b->parts))
        GP_FAIL(GP_ERR_INVALID_ARG, "run_batch: no batch");
    int32_t n = 0;
    GP_TRY(pack(l, b, &n));
    GP_TRY(send_op(l, OP_RUN, b->n_parts, 0, 0, l->words, n));
    gp_group_step_begin(l->g, ++l->steps);
    gp_status st = l->inner.session->run_batch(l->inner.ctx, b, next, logits, step_ms);
    gp_group_step_end(l->g);
    return st;
}

static void lead_reset_seq(void *ctx, int seq)
{
    gp_tp_lead *l = ctx;
    (void)send_op(l, OP_RESET, seq, 0, 0, NULL, 0); /* a failure fails the group: the next batch says so */
    l->inner.session->reset_seq(l->inner.ctx, seq);
}

static gp_status lead_retain(void *ctx, int seq, int index, int *handle)
{
    gp_tp_lead *l = ctx;
    GP_TRY(l->inner.session->retain_block(l->inner.ctx, seq, index, handle));
    return send_op(l, OP_RETAIN, seq, index, *handle, NULL, 0);
}

static void lead_drop(void *ctx, int handle)
{
    gp_tp_lead *l = ctx;
    (void)send_op(l, OP_DROP, handle, 0, 0, NULL, 0);
    l->inner.session->drop_block(l->inner.ctx, handle);
}

static gp_status lead_attach(void *ctx, int seq, const int *handles, int n)
{
    gp_tp_lead *l = ctx;
    if (n < 0 || (n && !handles))
        GP_FAIL(GP_ERR_INVALID_ARG, "attach_blocks: %d handles", n);
    GP_TRY(grow(&l->words, &l->cap, (size_t)n));
    for (int i = 0; i < n; i++)
        l->words[i] = handles[i];
    GP_TRY(send_op(l, OP_ATTACH, seq, n, 0, l->words, n));
    return l->inner.session->attach_blocks(l->inner.ctx, seq, handles, n);
}

static int lead_lane_times(void *ctx, gp_lane_busy *out, int cap)
{
    gp_tp_lead *l = ctx;
    return l->inner.session->lane_times(l->inner.ctx, out, cap);
}

gp_status gp_tp_lead_create(gp_exec inner, gp_group *g, gp_tp_lead **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_tp_lead_create: out is NULL");
    *out = NULL;
    const gp_session_ops *s = inner.session;
    if (!s || !s->run_batch || !s->reset_seq || !g || gp_group_rank(g) != 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_tp_lead_create: an executor with run_batch and reset_seq, and the group "
                "as its rank 0 (this is rank %d)", gp_group_rank(g));
    gp_tp_lead *l = calloc(1, sizeof *l);
    if (!l)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_tp_lead_create: out of memory");
    l->inner = inner;
    l->g = g;
    const bool blocks = s->retain_block && s->drop_block && s->attach_blocks;
    l->ops = (gp_session_ops){.name = s->name, .run_batch = lead_run_batch, .reset_seq = lead_reset_seq,
                              .retain_block = blocks ? lead_retain : NULL, .drop_block = blocks ? lead_drop : NULL,
                              .attach_blocks = blocks ? lead_attach : NULL,
                              .lane_times = s->lane_times ? lead_lane_times : NULL};
    *out = l;
    return GP_OK;
}

gp_exec gp_tp_lead_get(gp_tp_lead *l)
{
    return (gp_exec){.step = NULL, .session = l ? &l->ops : NULL, .ctx = l};
}

gp_status gp_tp_lead_end(gp_tp_lead *l)
{
    return l ? send_op(l, OP_END, 0, 0, 0, NULL, 0) : GP_OK;
}

void gp_tp_lead_destroy(gp_tp_lead *l)
{
    if (!l)
        return;
    free(l->words);
    free(l);
}

/* ------------------------------------------------------------ follower */

/* A refusal of the batch's input (made before anything changes) is the
 * leader's too, from the same check on the same state: the follower goes on. */
static bool fatal(gp_status st)
{
    return st != GP_OK && st != GP_ERR_INVALID_ARG;
}

gp_status gp_tp_follow(gp_exec inner, gp_group *g, long long *ops_done)
{
    const gp_session_ops *s = inner.session;
    if (!s || !s->run_batch || !s->reset_seq || !g || gp_group_rank(g) == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_tp_follow: an executor with run_batch and reset_seq, and the group as a "
                "rank other than 0");
    int32_t *w = NULL;
    size_t cap = 0, pcap = 0;
    gp_batch_part *parts = NULL;
    uint64_t steps = 0;
    long long done = 0;
    gp_status st = GP_OK;
    for (;;) {
        op_head h;
        if ((st = gp_group_recv(g, &h, sizeof h)) != GP_OK)
            break;
        if (h.n_words < 0 || (st = grow(&w, &cap, (size_t)h.n_words)) != GP_OK ||
            (h.n_words && (st = gp_group_recv(g, w, sizeof(int32_t) * (size_t)h.n_words)) != GP_OK))
            break;
        if (h.op == OP_END)
            break;
        if (h.op == OP_RUN) {
            const int np = h.a;
            if (np < 0 || (size_t)3 * (size_t)np > (size_t)h.n_words) {
                st = GP_ERR_FORMAT;
                gp_set_error("gp_tp_follow: a batch of %d parts in %d words", np, h.n_words);
                break;
            }
            if ((size_t)np > pcap) {
                gp_batch_part *q = realloc(parts, sizeof *q * (size_t)np);
                if (!q) {
                    st = GP_ERR_NO_MEMORY;
                    gp_set_error("gp_tp_follow: out of host memory for %d parts", np);
                    break;
                }
                parts = q;
                pcap = (size_t)np;
            }
            size_t t = 3 * (size_t)np;
            for (int i = 0; i < np; i++) {
                const int n = w[3 * i + 2];
                parts[i] = (gp_batch_part){.seq = w[3 * i], .kind = (gp_batch_kind)w[3 * i + 1], .n = n,
                                           .tokens = w + t};
                t += n > 0 ? (size_t)n : 0;
            }
            if (t != (size_t)h.n_words) {
                st = GP_ERR_FORMAT;
                gp_set_error("gp_tp_follow: a batch's tokens take %zu words of %d", t, h.n_words);
                break;
            }
            const gp_batch b = {.n_parts = np, .parts = parts};
            gp_group_step_begin(g, ++steps);
            st = s->run_batch(inner.ctx, &b, NULL, NULL, NULL);
            gp_group_step_end(g);
        } else if (h.op == OP_RESET) {
            s->reset_seq(inner.ctx, h.a);
            st = GP_OK;
        } else if (h.op == OP_RETAIN && s->retain_block) {
            int handle = -1;
            if ((st = s->retain_block(inner.ctx, h.a, h.b, &handle)) == GP_OK && handle != h.c) {
                st = GP_ERR_STATE;
                gp_set_error("gp_tp_follow: sequence %d's block %d was retained as handle %d here, %d on rank 0: "
                             "the ranks' KV blocks diverged", h.a, h.b, handle, h.c);
            }
        } else if (h.op == OP_DROP && s->drop_block) {
            s->drop_block(inner.ctx, h.a);
            st = GP_OK;
        } else if (h.op == OP_ATTACH && s->attach_blocks && h.b == h.n_words) {
            st = s->attach_blocks(inner.ctx, h.a, w, h.b);
        } else {
            st = GP_ERR_FORMAT;
            gp_set_error("gp_tp_follow: operation %d (%d words) that this executor cannot repeat", h.op, h.n_words);
        }
        if (fatal(st))
            break;
        st = GP_OK;
        done++;
    }
    free(w);
    free(parts);
    if (ops_done)
        *ops_done = done;
    return st;
}
