/* The prefill + decode loop shared by greenpipe's generating commands:
 * sampling, the repeat penalty, stop conditions and text output per step. */
#include "gen_loop_impl.h"

#include <stdlib.h>
#include <string.h>

const char *gp_gen_stop_name(gp_gen_stop r)
{
    switch (r) {
    case GP_GEN_STOP_EOS: return "EOS";
    case GP_GEN_STOP_TOKEN: return "stop token";
    case GP_GEN_STOP_LENGTH: return "length";
    case GP_GEN_STOP_STRING: return "stop string";
    case GP_GEN_STOP_INTERRUPTED: return "interrupted";
    default: return "running";
    }
}

double gp_gen_decode_rate(const gp_gen_result *r)
{
    return r->n > 1 && r->decode_s > 0 ? (r->n - 1) / r->decode_s : 0.0;
}

gp_gen_params gp_gen_default_params(void)
{
    return (gp_gen_params){.sample = {.temperature = 0.0, .top_k = 0, .top_p = 1.0, .min_p = 0.0},
                           .repeat = gp_repeat_default_params(), .max_tokens = 1};
}

/* Scratch of one run. */
typedef struct loop {
    const gp_gen_params *p;
    int S;
    size_t V;
    bool host_choice;  /* tokens chosen on the host from the logits */
    bool penalise;
    gp_sampler smp;
    float *logits;     /* [S][V] the step's logits, or NULL */
    float *row;        /* [V] a penalised copy */
    int32_t *next, *feed;
    int *seq_ids;
    int32_t **ctx;     /* [S] history + prompt + generated, for the penalty's window */
    long *ctx_n;
    double t0;         /* the prefill call: each sequence's first token is at t0 + its ttft_s */
} loop;

static void loop_free(loop *l)
{
    gp_sampler_free(&l->smp);
    free(l->logits);
    free(l->row);
    free(l->next);
    free(l->feed);
    free(l->seq_ids);
    for (int s = 0; l->ctx && s < l->S; s++)
        free(l->ctx[s]);
    free(l->ctx);
    free(l->ctx_n);
}

static gp_status loop_init(loop *l, const gp_gen_params *p, int vocab, int S, const gp_gen_seq *seqs,
                           const gp_gen_result *res)
{
    memset(l, 0, sizeof *l);
    l->p = p;
    l->S = S;
    l->V = (size_t)vocab;
    l->penalise = gp_repeat_on(&p->repeat);
    l->host_choice = p->sample.temperature > 0.0 || l->penalise;
    bool want_logits = l->host_choice || (S > 0 && res[0].logits);
    if (want_logits && !(l->logits = malloc((size_t)S * l->V * sizeof *l->logits)))
        GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory for %d x %d logits", S, vocab);
    l->next = malloc((size_t)S * sizeof *l->next);
    l->feed = malloc((size_t)S * sizeof *l->feed);
    l->seq_ids = malloc((size_t)S * sizeof *l->seq_ids);
    if (!l->next || !l->feed || !l->seq_ids)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory for the state of %d sequences", S);
    if (l->host_choice)
        GP_TRY(gp_sampler_init(&l->smp, vocab));
    if (l->penalise) {
        l->row = malloc(l->V * sizeof *l->row);
        l->ctx = calloc((size_t)S, sizeof *l->ctx);
        l->ctx_n = calloc((size_t)S, sizeof *l->ctx_n);
        if (!l->row || !l->ctx || !l->ctx_n)
            GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory for the repeat penalty of %d sequences", S);
        for (int s = 0; s < S; s++) {
            long cap = seqs[s].n_history + seqs[s].n + p->max_tokens;
            if (!(l->ctx[s] = malloc((size_t)cap * sizeof **l->ctx)))
                GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory for %ld context tokens of sequence %d", cap, s);
            if (seqs[s].n_history)
                memcpy(l->ctx[s], seqs[s].history, (size_t)seqs[s].n_history * sizeof **l->ctx);
            memcpy(l->ctx[s] + seqs[s].n_history, seqs[s].tokens, (size_t)seqs[s].n * sizeof **l->ctx);
            l->ctx_n[s] = seqs[s].n_history + seqs[s].n;
        }
    }
    return GP_OK;
}

/* Sequence s's token of the step: the backend's greedy one unless chosen on
 * the host (after the repeat penalty, on a copy: the dump keeps the model's
 * logits). */
static int32_t choose(loop *l, int s, gp_rng *rng)
{
    if (!l->host_choice)
        return l->next[s];
    const float *row = l->logits + (size_t)s * l->V;
    if (l->penalise) {
        memcpy(l->row, row, l->V * sizeof *l->row);
        gp_repeat_penalize(&l->smp, &l->p->repeat, l->row, l->ctx[s], l->ctx_n[s]);
        row = l->row;
    }
    return gp_sample(&l->smp, &l->p->sample, row, rng);
}

static gp_gen_stop stop_of(const gp_gen_params *p, int32_t tk)
{
    if (p->eos && gp_eos_has(p->eos, tk))
        return GP_GEN_STOP_EOS;
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] == tk)
            return GP_GEN_STOP_TOKEN;
    return GP_GEN_RUNNING;
}

/* Sequence s stops for reason r at time now; its text is finished. */
static gp_status finish(loop *l, gp_gen_out *out, int s, gp_gen_result *r, gp_gen_stop why, double now)
{
    r->stop = why;
    r->decode_s = r->n ? now - (l->t0 + r->ttft_s) : 0.0;
    return out ? gp_gen_out_finish(out, s) : GP_OK;
}

gp_status gp_gen_run(gp_exec x, gp_pipeline *pl, int vocab, const gp_gen_params *p, int S, const gp_gen_seq *seqs,
                     gp_gen_out *out, float *prompt_logits, gp_gen_result *res, gp_gen_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    for (int s = 0; s < S; s++) {
        res[s].n = 0;
        res[s].stop = GP_GEN_RUNNING;
        res[s].ttft_s = res[s].decode_s = 0.0;
    }
    if (S < 1 || p->max_tokens < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gen_run: %d sequences, max_tokens %ld; each needs >= 1", S, p->max_tokens);
    if (p->n_stop_strings && !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gen_run: stop strings need the text output");
    for (int s = 0; s < S; s++)
        if (p->sample.temperature > 0.0 && !seqs[s].rng)
            GP_FAIL(GP_ERR_INVALID_ARG, "gp_gen_run: sequence %d has no sampling stream", s);
    gp_status st;
    if (out && (st = gp_gen_out_set_stops(out, p->stop_strings, p->n_stop_strings)) != GP_OK) {
        stats->failed = "stop strings";
        return st;
    }
    loop l;
    if ((st = loop_init(&l, p, vocab, S, seqs, res)) != GP_OK) {
        stats->failed = "sampler";
        loop_free(&l);
        return st;
    }
    gp_prefill_seq *pf = malloc((size_t)S * sizeof *pf);
    if (!pf) {
        loop_free(&l);
        stats->failed = "prefill";
        GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory for %d prefill entries", S);
    }
    for (int s = 0; s < S; s++) {
        pf[s] = (gp_prefill_seq){.seq = seqs[s].seq, .n = seqs[s].n, .tokens = seqs[s].tokens};
        l.seq_ids[s] = seqs[s].seq;
    }
    double t0 = l.t0 = gp_now_s();
    /* every prompt in one call: the backend batches them (the CUDA engine
     * in chunks of its prefill chunk) */
    st = p->prefill ? p->prefill(p->prefill_ctx, S, pf, l.next, l.logits, prompt_logits)
                    : x.session->prefill(x.ctx, S, pf, l.next, l.logits, prompt_logits);
    free(pf);
    double t1 = gp_now_s();
    stats->prefill_s = t1 - t0;
    if (st != GP_OK) {
        stats->failed = "prefill";
        goto done;
    }
    int active = S;
    for (long t = 0; t < p->max_tokens && active > 0; t++) {
        if (p->interrupt && *p->interrupt) {
            /* a step boundary: what each sequence has is whole */
            double now = gp_now_s();
            stats->interrupted = true;
            for (int s = 0; s < S; s++)
                if (res[s].stop == GP_GEN_RUNNING && (st = finish(&l, out, s, &res[s], GP_GEN_STOP_INTERRUPTED,
                                                                 now)) != GP_OK) {
                    stats->failed = "detokenizing";
                    goto done;
                }
            break;
        }
        if (t > 0) {
            st = pl ? gp_pipeline_step(pl, S, l.seq_ids, l.feed, l.next, l.logits)
                    : x.session->sequential_step(x.ctx, S, l.seq_ids, l.feed, l.next, l.logits, NULL);
            if (st != GP_OK) {
                stats->failed = "decode step";
                goto done;
            }
            stats->steps++;
        }
        for (int s = 0; s < S; s++) {
            gp_gen_result *r = &res[s];
            if (r->stop != GP_GEN_RUNNING) {
                l.feed[s] = l.next[s]; /* riding along */
                continue;
            }
            int32_t tk = choose(&l, s, seqs[s].rng);
            double now = gp_now_s();
            l.feed[s] = tk;
            r->tokens[r->n++] = tk;
            if (r->logits)
                memcpy(r->logits + (size_t)t * l.V, l.logits + (size_t)s * l.V, l.V * sizeof(float));
            if (l.penalise)
                l.ctx[s][l.ctx_n[s]++] = tk;
            if (t == 0)
                r->ttft_s = now - t0;
            gp_gen_stop why = stop_of(p, tk);
            if (out && !why) {
                if ((st = gp_gen_out_push(out, s, tk)) != GP_OK) {
                    stats->failed = "detokenizing";
                    goto done;
                }
                if (gp_gen_out_stopped(out, s))
                    why = GP_GEN_STOP_STRING;
            }
            if (!why && t == p->max_tokens - 1)
                why = GP_GEN_STOP_LENGTH;
            if (why) {
                active--;
                if ((st = finish(&l, out, s, r, why, now)) != GP_OK) {
                    stats->failed = "detokenizing";
                    goto done;
                }
            }
        }
    }
    st = GP_OK;
done:
    stats->decode_s = gp_now_s() - t1;
    loop_free(&l);
    return st;
}
