/* Prefill and decode on two lanes at once (GP_SCHED_PD_MUX): each step the
 * decode rows run on run_batch's lane while one batch of prefill chunks runs
 * on the prefill lane, launched when the lane is free and committed at the
 * first step that finds it done; an adaptive backend's planner may put the
 * chunks into the decode rows' batch instead. */
#include <limits.h>

#include "sched_impl.h"

/* The lane's batch ended with st: kept for the next step to commit. */
static void found_done(gp_sched *s, gp_status st)
{
    s->pf_inflight = false;
    s->pf_done = true;
    s->pf_status = st;
}

void gp_sched_pd_wait(gp_sched *s)
{
    if (!s->pf_inflight)
        return;
    bool done = false;
    gp_status st = s->ops.prefill_poll(s->ops.ctx, true, &done);
    if (st == GP_OK && !done) {
        gp_set_error("the prefill lane's poll with wait returned before its batch completed");
        st = GP_ERR_STATE;
    }
    found_done(s, st);
}

void gp_sched_pd_forget(gp_sched *s, const rq *r)
{
    for (int i = 0; i < s->pf.n; i++)
        if (s->pf.rq[i] == r) {
            s->pf.rq[i]->pending = 0;
            s->pf.rq[i] = NULL; /* its blocks go with its slot */
        }
}

/* A completed prefill batch: its parts commit (their requests may sample
 * their first token), or on failure give their blocks back. */
static gp_status settle(gp_sched *s)
{
    if (!s->pf_done)
        return GP_OK;
    s->pf_done = false;
    if (s->pf_status == GP_OK)
        gp_sched_commit(s, &s->pf);
    else
        gp_sched_unplan(s, &s->pf);
    return s->pf_status;
}

/* Prompt tokens still to compute: running requests' (not on the lane)
 * and waiting ones' (a prefix-cache hit may shorten the latter). */
static long long backlog(const gp_sched *s)
{
    long long n = 0;
    for (const rq *r = s->running.head; r; r = r->next)
        if (gp_sched_prefilling(r) && !r->pending)
            n += r->prefill_end - r->computed;
    for (const rq *r = s->waiting.head; r; r = r->next)
        n += r->n_all;
    return n;
}

/* The planner's choice for the prefill waiting (without a planner: the
 * lane, the whole budget). GP_PD_RUN_MIXED plans the chunks into the decode
 * rows' batch here. */
static gp_status ask(gp_sched *s, gp_pd_plan *plan)
{
    *plan = (gp_pd_plan){.run = GP_PD_RUN_LANE, .tokens = s->cfg.token_budget};
    long long waiting = s->ops.pd_plan ? backlog(s) : 0;
    if (waiting == 0)
        return GP_OK;
    gp_pd_plan_in in = {.decode_rows = s->b.n, .backlog_tokens = waiting, .token_budget = s->cfg.token_budget};
    for (int i = 0; i < s->b.n; i++)
        in.decode_context += s->b.rq[i]->computed + 1;
    for (const rq *r = s->running.head; r; r = r->next)
        if (gp_sched_prefilling(r) && !r->pending) { /* the chunk planned first */
            in.prefill_position = r->computed;
            break;
        }
    GP_TRY(s->ops.pd_plan(s->ops.ctx, &in, plan));
    if ((plan->run != GP_PD_RUN_LANE && plan->run != GP_PD_RUN_MIXED) || plan->tokens < 1 ||
        plan->tokens > s->cfg.token_budget)
        GP_FAIL(GP_ERR_STATE, "the prefill planner answered run %d with %d tokens; allowed lane (%d) or mixed (%d), "
                "1..%d tokens (the budget)", (int)plan->run, plan->tokens, GP_PD_RUN_LANE, GP_PD_RUN_MIXED,
                s->cfg.token_budget);
    if (plan->run == GP_PD_RUN_MIXED) { /* the batch's rows, decode rows and chunks, stay within the budget */
        s->budget_left = plan->tokens < s->cfg.token_budget - s->b.n ? plan->tokens : s->cfg.token_budget - s->b.n;
        int before = s->b.n;
        gp_sched_plan_prefills(s, &s->b, 0);
        s->stats.mixed_steps += s->b.n > before;
    }
    return GP_OK;
}

/* Chunks up to the planned tokens onto the free prefill lane. */
static gp_status launch(gp_sched *s, int tokens)
{
    s->pf.n = 0;
    s->budget_left = tokens;
    gp_sched_plan_prefills(s, &s->pf, 0);
    if (s->pf.n == 0)
        return GP_OK;
    for (int i = 0; i < s->pf.n; i++)
        s->pf.rq[i]->pending = s->pf.parts[i].n;
    s->pf_batch = (gp_batch){.n_parts = s->pf.n, .parts = s->pf.parts};
    gp_status st = s->ops.prefill_launch(s->ops.ctx, &s->pf_batch, s->pf.next,
                                         gp_sched_wants_logits(&s->pf) ? s->pf.logits : NULL);
    if (st != GP_OK) {
        gp_sched_unplan(s, &s->pf);
        return st;
    }
    s->pf_inflight = true;
    s->stats.prefill_batches++;
    return GP_OK;
}

/* The free lane's turn: the planner's choice, then the lane's batch. */
static gp_status feed(gp_sched *s)
{
    if (s->pf_inflight)
        return GP_OK;
    gp_pd_plan plan;
    gp_status st = ask(s, &plan);
    if (st != GP_OK) {
        gp_sched_unplan(s, &s->b);
        s->b.n = 0;
        return st;
    }
    return plan.run == GP_PD_RUN_LANE ? launch(s, plan.tokens) : GP_OK;
}

static bool decodes_ready(const gp_sched *s)
{
    for (const rq *r = s->running.head; r; r = r->next)
        if (!gp_sched_prefilling(r))
            return true;
    return false;
}

static void plan_decodes(gp_sched *s)
{
    s->b.n = 0;
    s->budget_left = INT_MAX; /* decode rows run on their own lane, beside the prefill budget */
    gp_sched_plan_decodes(s, &s->b);
}

gp_status gp_sched_step_pd(gp_sched *s)
{
    if (s->pf_inflight) { /* blocks only when no decode row could run meanwhile */
        bool done = false;
        gp_status st = s->ops.prefill_poll(s->ops.ctx, !decodes_ready(s), &done);
        if (done || st != GP_OK)
            found_done(s, st);
    }
    gp_status pst = settle(s);
    /* the decode rows take their blocks before the prefill chunks, as in
     * chunked prefill, and run after the launch so that both lanes work */
    plan_decodes(s);
    gp_status lst = feed(s);
    /* Every request alone fits the blocks (gp_sched_submit): a step that
     * found room for nothing gives the oldest room by preempting the newest. */
    while (lst == GP_OK && s->b.n == 0 && !s->pf_inflight && s->running.n > 0) {
        gp_sched_preempt_newest(s);
        plan_decodes(s);
        lst = feed(s);
    }
    if (s->b.n > 0) {
        bool beside = s->pf_inflight;
        GP_TRY(gp_sched_run(s, &s->b));
        s->stats.overlapped_steps += beside;
    }
    return pst != GP_OK ? pst : lst;
}
