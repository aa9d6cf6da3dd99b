/* Requests for the scheduler's tests on the CPU reference, their tokens run
 * alone, and the checks of a scheduled run against those. */
#include "sched_reqs.h"

#include "gp_test.h"

#include "gp_model.h"
#include "sched_cpu.h"
#include "sched_impl.h"

int gp_sreq_env_load(gp_sreq_env *e)
{
    if (gp_sched_cpu_tiny_weights(&e->w) != GP_OK) {
        fprintf(stderr, "setup: %s\n", gp_last_error());
        return -1;
    }
    return 0;
}

void gp_sreq_env_free(gp_sreq_env *e)
{
    gp_host_weights_free(&e->w);
}

int gp_sreq_rnd(gp_sreq_env *e, int n)
{
    return (int)(gp_test_uniform(&e->rng) * n) % n;
}

void gp_sreq_set(gp_sreq *q, uint64_t id, int n_prompt, int max_tokens)
{
    q->r = (gp_sched_request){.id = id, .prompt = q->prompt, .n_prompt = n_prompt, .max_tokens = max_tokens};
}

void gp_sreq_random(gp_sreq_env *e, gp_sreq *q, uint64_t id, int n_prompt, int max_tokens)
{
    memset(q, 0, sizeof(*q));
    for (int k = 0; k < n_prompt; k++)
        q->prompt[k] = gp_sreq_rnd(e, e->w.cfg.vocab);
    gp_sreq_set(q, id, n_prompt, max_tokens);
}

void gp_sreq_again(gp_sreq *q, const gp_sreq *of, uint64_t id)
{
    *q = *of;
    q->r.id = id;
    q->r.prompt = q->prompt;
}

void gp_sreq_run_alone(const gp_sreq_env *e, gp_sreq *q)
{
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&e->w, 1, GP_SREQ_MAX_CTX, e->block, &m));
    float *lg = malloc(sizeof(float) * (size_t)e->w.cfg.vocab);
    int seq = 0;
    GP_CHECK_OK(gp_cpu_prefill(m, seq, q->r.n_prompt, q->prompt, lg));
    for (q->n_want = 0;;) {
        int32_t t = gp_argmax(lg, e->w.cfg.vocab);
        q->want[q->n_want++] = t;
        if (q->n_want == q->r.max_tokens)
            break;
        GP_CHECK_OK(gp_cpu_decode_step(m, 1, &seq, &t, lg));
    }
    free(lg);
    gp_cpu_model_destroy(m);
}

void gp_sreq_make_groups(gp_sreq_env *e, gp_sreq *q, int n, int groups, int prefix_len, int spread)
{
    int32_t prefix[8][GP_SREQ_MAX_CTX];
    for (int g = 0; g < groups; g++)
        for (int k = 0; k < prefix_len; k++)
            prefix[g][k] = gp_sreq_rnd(e, e->w.cfg.vocab);
    for (int i = 0; i < n; i++) {
        memset(&q[i], 0, sizeof(q[i]));
        int suffix = 1 + gp_sreq_rnd(e, 8);
        memcpy(q[i].prompt, prefix[i % groups], sizeof(int32_t) * (size_t)prefix_len);
        for (int k = 0; k < suffix; k++)
            q[i].prompt[prefix_len + k] = gp_sreq_rnd(e, e->w.cfg.vocab);
        gp_sreq_set(&q[i], 1000 + (uint64_t)i, prefix_len + suffix, 1 + gp_sreq_rnd(e, e->max_gen));
        q[i].arrival = e->even_arrivals ? i * spread / n : gp_sreq_rnd(e, spread);
        gp_sreq_run_alone(e, &q[i]);
    }
}

int gp_sreq_reset(gp_sreq *q, int n)
{
    int last = 0;
    for (int i = 0; i < n; i++) {
        q[i].n_got = q[i].cancelled = 0;
        last = q[i].arrival > last ? q[i].arrival : last;
    }
    return last;
}

void gp_sreq_submit_arrivals(gp_sched *s, gp_sreq *q, int n, int step)
{
    for (int i = 0; i < n; i++)
        if (q[i].arrival == step)
            GP_CHECK_OK(gp_sched_submit(s, &q[i].r));
}

void gp_sreq_collect(gp_sched *s, gp_sreq *q, int n, int n_ev)
{
    int m;
    const gp_sched_event *ev = gp_sched_events(s, &m);
    assert_int_equal(m, n_ev);
    for (int e = 0; e < m; e++)
        for (int i = 0; i < n; i++)
            if (q[i].r.id == ev[e].id) {
                assert_true(q[i].n_got < GP_SREQ_MAX_GEN);
                q[i].got[q[i].n_got++] = ev[e].token;
            }
}

gp_sched_result gp_sreq_serve_one(gp_sched *s, gp_sreq *q, void (*check)(const void *ctx), const void *ctx)
{
    q->n_got = 0;
    GP_CHECK_OK(gp_sched_submit(s, &q->r));
    gp_sched_result res;
    do {
        int n_ev;
        GP_CHECK_OK(gp_sched_step(s, &n_ev));
        gp_sreq_collect(s, q, 1, n_ev);
        check(ctx);
        GP_CHECK_OK(gp_sched_result_of(s, q->r.id, &res));
    } while (res.finish == GP_SCHED_RUNNING);
    assert_int_equal(res.n_tokens, q->n_want);
    assert_memory_equal(res.tokens, q->want, sizeof(int32_t) * (size_t)q->n_want);
    assert_memory_equal(q->got, q->want, sizeof(int32_t) * (size_t)q->n_want);
    return res;
}

void gp_sreq_check_result(const gp_sreq *q, const gp_sched_result *res, int block_size)
{
    int want_n = q->cancelled ? res->n_tokens : q->n_want;
    assert_int_equal(res->finish, q->cancelled ? GP_SCHED_CANCELLED : GP_SCHED_LENGTH);
    assert_true(res->n_tokens == want_n && want_n <= q->n_want);
    assert_memory_equal(res->tokens, q->want, sizeof(int32_t) * (size_t)want_n);
    assert_int_equal(q->n_got, want_n);
    assert_memory_equal(q->got, q->want, sizeof(int32_t) * (size_t)want_n);
    assert_true(res->cached_tokens % block_size == 0 && res->cached_tokens < q->r.n_prompt);
}

void gp_sreq_check_pool(const gp_sched *s, gp_cpu_model *m)
{
    GP_CHECK_OK(gp_sched_check(s));
    gp_sched_stats st;
    gp_sched_get_stats(s, &st);
    int pool_free, pool_total;
    gp_cpu_kv_blocks(m, &pool_free, &pool_total);
    assert_int_equal(pool_total - pool_free, st.total_blocks - st.free_blocks);
}

void gp_sreq_check_emptied(gp_sched *s)
{
    gp_sched_stats st;
    gp_sched_evict_cached(s);
    gp_sched_get_stats(s, &st);
    assert_int_equal(st.running + st.waiting, 0);
    assert_int_equal(st.free_blocks, st.total_blocks);
    assert_int_equal(st.cached_blocks, 0);
}
