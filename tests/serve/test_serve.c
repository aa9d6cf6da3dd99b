/* The serving core on the CPU executor (tiny preset, synthetic weights):
 * requests submitted from several threads at once, of different lengths,
 * greedy or sampled from their own seeds, each get through their callback
 * exactly the tokens of running them alone; cancellation stops the
 * callbacks at once and frees the KV blocks; a full queue and bad requests
 * are refused before anything is queued. */
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "gp_test.h"

#include "gp_model.h"
#include "gp_pipeline.h"
#include "gp_reference.h"
#include "gp_serve.h"
#include "gp_tools.h"
#include "sched_cpu.h"

#define N_REQ 24
#define N_THREADS 4
#define MAX_SEQS 4
#define MAX_CTX 64
#define BLOCK 4
#define MAX_GEN 12

static gp_host_weights g_w;
static gp_sampler g_sampler;

typedef struct req {
    int32_t prompt[MAX_CTX];
    int n_prompt, max_tokens;
    gp_sample_params sp;
    uint64_t seed;
    int32_t want[MAX_GEN];
    int n_want;
    /* from the callback */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t got[MAX_GEN + 1];
    int n_got, events;
    gp_serve_finish finish;
    gp_serve_usage usage;
    int after_final; /* events after the final one: must stay 0 */
    uint64_t id;
} req;

static void on_event(void *user, const gp_serve_event *ev)
{
    req *q = user;
    pthread_mutex_lock(&q->mu);
    if (q->finish != GP_SERVE_RUNNING)
        q->after_final++;
    for (int i = 0; i < ev->n_tokens && q->n_got <= MAX_GEN; i++)
        q->got[q->n_got++] = ev->tokens[i];
    q->events++;
    q->usage = ev->usage;
    if (ev->finish != GP_SERVE_RUNNING) {
        q->finish = ev->finish;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
}

static void wait_done(req *q)
{
    pthread_mutex_lock(&q->mu);
    while (q->finish == GP_SERVE_RUNNING)
        pthread_cond_wait(&q->cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

/* Alone on a fresh model: prefill, then one decode step per token. */
static void run_alone(req *q)
{
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_w, 1, MAX_CTX, BLOCK, &m));
    const int V = g_w.cfg.vocab, seq = 0;
    float *lg = malloc(sizeof(float) * (size_t)V);
    gp_rng rng;
    gp_rng_seed(&rng, q->seed, 0);
    GP_CHECK_OK(gp_cpu_prefill(m, seq, q->n_prompt, q->prompt, lg));
    for (q->n_want = 0; q->n_want < q->max_tokens;) {
        int32_t t = gp_sample(&g_sampler, &q->sp, lg, &rng);
        q->want[q->n_want++] = t;
        if (q->n_want < q->max_tokens)
            GP_CHECK_OK(gp_cpu_decode_step(m, 1, &seq, &t, lg));
    }
    free(lg);
    gp_cpu_model_destroy(m);
}

typedef struct fixture {
    gp_cpu_model *m;
    gp_cpu_exec *x;
    gp_serve *s;
} fixture;

static void open_core(fixture *f, const gp_serve_params *p)
{
    GP_CHECK_OK(gp_cpu_model_create(&g_w, MAX_SEQS, MAX_CTX, BLOCK, &f->m));
    GP_CHECK_OK(gp_cpu_exec_create(f->m, 1, 1, &f->x));
    gp_serve_env env = {.exec = gp_cpu_exec_get(f->x), .cfg = &g_w.cfg, .max_seqs = MAX_SEQS,
                        .max_context = MAX_CTX, .block_size = BLOCK};
    GP_CHECK_OK(gp_serve_create(&env, p, &f->s));
}

static void close_core(fixture *f)
{
    gp_serve_destroy(f->s);
    gp_cpu_exec_destroy(f->x);
    gp_cpu_model_destroy(f->m);
}

static gp_serve_request request_of(req *q)
{
    return (gp_serve_request){.prompt = q->prompt, .n_prompt = q->n_prompt, .max_tokens = q->max_tokens,
                              .sample = q->sp, .seed = q->seed, .cb = on_event, .user = q};
}

typedef struct submitter {
    gp_serve *s;
    req *reqs;
    int first, n, stride;
} submitter;

static void *submit_some(void *arg)
{
    submitter *sb = arg;
    for (int i = sb->first; i < sb->n; i += sb->stride) {
        gp_serve_request r = request_of(&sb->reqs[i]);
        if (gp_serve_submit(sb->s, &r, &sb->reqs[i].id) != GP_OK) {
            fprintf(stderr, "submit %d: %s\n", i, gp_last_error());
            abort();
        }
    }
    return NULL;
}

static void make_reqs(req *q, int n, uint64_t *rng)
{
    for (int i = 0; i < n; i++) {
        memset(&q[i], 0, sizeof q[i]);
        pthread_mutex_init(&q[i].mu, NULL);
        pthread_cond_init(&q[i].cv, NULL);
        q[i].n_prompt = 1 + (int)(gp_test_uniform(rng) * 30);
        q[i].max_tokens = 1 + (int)(gp_test_uniform(rng) * MAX_GEN) % MAX_GEN;
        for (int k = 0; k < q[i].n_prompt; k++)
            q[i].prompt[k] = (int32_t)(gp_test_uniform(rng) * g_w.cfg.vocab) % g_w.cfg.vocab;
        q[i].seed = 100 + (uint64_t)i;
        q[i].sp = (gp_sample_params){.temperature = 0, .top_p = 1};
        if (i % 3 == 1)
            q[i].sp = (gp_sample_params){.temperature = 0.8, .top_k = 20, .top_p = 0.9};
        run_alone(&q[i]);
    }
}

static void check_concurrent(gp_sched_policy policy, int budget, int kv_blocks)
{
    static req q[N_REQ];
    uint64_t rng = 11 + (uint64_t)policy * 7 + (uint64_t)kv_blocks;
    make_reqs(q, N_REQ, &rng);
    gp_serve_params p = gp_serve_default_params();
    p.policy = policy;
    p.token_budget = budget;
    p.kv_blocks = kv_blocks;
    fixture f;
    open_core(&f, &p);
    pthread_t th[N_THREADS];
    submitter sb[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        sb[t] = (submitter){.s = f.s, .reqs = q, .first = t, .n = N_REQ, .stride = N_THREADS};
        pthread_create(&th[t], NULL, submit_some, &sb[t]);
    }
    for (int t = 0; t < N_THREADS; t++)
        pthread_join(th[t], NULL);
    for (int i = 0; i < N_REQ; i++) {
        wait_done(&q[i]);
        assert_int_equal(q[i].finish, GP_SERVE_LENGTH);
        assert_int_equal(q[i].n_got, q[i].n_want);
        assert_memory_equal(q[i].got, q[i].want, sizeof(int32_t) * (size_t)q[i].n_want);
        assert_int_equal(q[i].usage.prompt_tokens, q[i].n_prompt);
        assert_int_equal(q[i].usage.completion_tokens, q[i].n_want);
    }
    gp_serve_stats st;
    gp_serve_get_stats(f.s, &st);
    assert_int_equal(st.requests_finished[GP_SERVE_LENGTH], N_REQ);
    assert_int_equal(st.ttft.count, N_REQ);
    assert_int_equal(st.running + st.waiting, 0);
    fprintf(stderr, "%s budget %d blocks %d: %lld steps, %lld preemptions, host %.1f ms of %.1f ms in steps\n",
            policy == GP_SCHED_CHUNKED ? "chunked" : "prefill-first", budget, kv_blocks, st.steps, st.preemptions,
            st.host_seconds * 1e3, st.step_seconds * 1e3);
    close_core(&f);
    for (int i = 0; i < N_REQ; i++)
        if (q[i].after_final)
            fail_msg("request %d got %d events after its final one", i, q[i].after_final);
}

static void test_concurrent_chunked(void **state)
{
    (void)state;
    check_concurrent(GP_SCHED_CHUNKED, 8, 0);
}

static void test_concurrent_prefill_first(void **state)
{
    (void)state;
    check_concurrent(GP_SCHED_PREFILL_FIRST, 32, 0);
}

/* Fewer blocks than the slots could hold: preemption by recompute changes
 * no token. */
static void test_concurrent_preempting(void **state)
{
    (void)state;
    check_concurrent(GP_SCHED_CHUNKED, 8, 14);
}

/* A long request cancelled while it runs: its callback's last event is the
 * cancellation, none comes after it, and its blocks are free once the
 * others finish. */
static void test_cancel(void **state)
{
    (void)state;
    static req q[3];
    uint64_t rng = 5;
    make_reqs(q, 3, &rng);
    q[0].max_tokens = MAX_CTX - q[0].n_prompt;
    fixture f;
    gp_serve_params p = gp_serve_default_params();
    p.token_budget = 8;
    open_core(&f, &p);
    for (int i = 0; i < 3; i++) {
        gp_serve_request r = request_of(&q[i]);
        GP_CHECK_OK(gp_serve_submit(f.s, &r, &q[i].id));
    }
    for (;;) { /* until it generated something */
        pthread_mutex_lock(&q[0].mu);
        int n = q[0].n_got;
        pthread_mutex_unlock(&q[0].mu);
        if (n > 0)
            break;
        sched_yield();
    }
    gp_serve_cancel(f.s, q[0].id);
    pthread_mutex_lock(&q[0].mu);
    assert_int_equal(q[0].finish, GP_SERVE_CANCELLED);
    int events = q[0].events;
    pthread_mutex_unlock(&q[0].mu);
    gp_serve_cancel(f.s, q[0].id); /* twice: ignored */
    for (int i = 1; i < 3; i++) {
        wait_done(&q[i]);
        assert_memory_equal(q[i].got, q[i].want, sizeof(int32_t) * (size_t)q[i].n_want);
    }
    gp_serve_stats st;
    for (int tries = 0; tries < 1000; tries++) { /* the engine thread frees it at its next turn */
        gp_serve_get_stats(f.s, &st);
        if (st.running + st.waiting == 0 && st.kv_blocks_used == st.kv_blocks_cached)
            break;
        usleep(1000);
    }
    assert_int_equal(st.running + st.waiting, 0);
    assert_int_equal(st.kv_blocks_used, st.kv_blocks_cached);
    assert_int_equal(st.requests_finished[GP_SERVE_CANCELLED], 1);
    pthread_mutex_lock(&q[0].mu);
    assert_int_equal(q[0].events, events);
    pthread_mutex_unlock(&q[0].mu);
    close_core(&f);
}

/* A request that can never fit, bad sampling values and a full queue are
 * refused at submit, naming the value. */
static void test_refusals(void **state)
{
    (void)state;
    static req q[4];
    uint64_t rng = 9;
    make_reqs(q, 4, &rng);
    fixture f;
    gp_serve_params p = gp_serve_default_params();
    p.max_waiting = 1;
    p.token_budget = 8;
    open_core(&f, &p);
    uint64_t id;
    gp_serve_request r = request_of(&q[0]);
    r.max_tokens = MAX_CTX;
    GP_CHECK_FAIL(gp_serve_submit(f.s, &r, &id), GP_ERR_INVALID_ARG, "exceeds the context of 64");
    r = request_of(&q[0]);
    r.sample.temperature = -1;
    GP_CHECK_FAIL(gp_serve_submit(f.s, &r, &id), GP_ERR_INVALID_ARG, "-1");
    r = request_of(&q[0]);
    r.prompt = (int32_t[]){(int32_t)g_w.cfg.vocab};
    r.n_prompt = 1;
    GP_CHECK_FAIL(gp_serve_submit(f.s, &r, &id), GP_ERR_INVALID_ARG, "prompt[0]");
    r = request_of(&q[0]);
    r.n_stops = 1;
    r.stops = (const char *const[]){"x"};
    GP_CHECK_FAIL(gp_serve_submit(f.s, &r, &id), GP_ERR_INVALID_ARG, "tokenizer");
    r = request_of(&q[0]);
    r.chat = true;
    GP_CHECK_FAIL(gp_serve_submit(f.s, &r, &id), GP_ERR_INVALID_ARG, "chat template");
    /* queue full: submit all four at once; at least one of the later ones
     * finds one waiting (the engine thread takes at most MAX_SEQS) */
    int full = 0;
    for (int i = 0; i < 4; i++) {
        r = request_of(&q[i]);
        gp_status st = gp_serve_submit(f.s, &r, &q[i].id);
        if (st == GP_SOFT_FULL) {
            full++;
            q[i].finish = GP_SERVE_CANCELLED;
            assert_non_null(strstr(gp_last_error(), "--max-waiting 1"));
        } else {
            GP_CHECK_OK(st);
        }
    }
    for (int i = 0; i < 4; i++)
        wait_done(&q[i]);
    fprintf(stderr, "queue full %d of 4 times\n", full);
    gp_serve_params bad = gp_serve_default_params();
    bad.token_budget = 0;
    gp_serve *s;
    gp_serve_env env = {.exec = gp_cpu_exec_get(f.x), .cfg = &g_w.cfg, .max_seqs = MAX_SEQS,
                        .max_context = MAX_CTX, .block_size = BLOCK, .max_rows = 16};
    GP_CHECK_FAIL(gp_serve_create(&env, &bad, &s), GP_ERR_INVALID_ARG, "token budget 0");
    bad.token_budget = 17;
    GP_CHECK_FAIL(gp_serve_create(&env, &bad, &s), GP_ERR_INVALID_ARG, "allowed 1..16");
    bad = gp_serve_default_params();
    bad.token_budget = 8;
    bad.kv_blocks = 1000;
    GP_CHECK_FAIL(gp_serve_create(&env, &bad, &s), GP_ERR_INVALID_ARG, "KV blocks 1000");
    close_core(&f);
}

static int setup(void **state)
{
    (void)state;
    if (gp_sched_cpu_tiny_weights(&g_w) != GP_OK || gp_sampler_init(&g_sampler, g_w.cfg.vocab) != GP_OK) {
        fprintf(stderr, "setup: %s\n", gp_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    gp_host_weights_free(&g_w);
    gp_sampler_free(&g_sampler);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_chunked),
        cmocka_unit_test(test_concurrent_prefill_first),
        cmocka_unit_test(test_concurrent_preempting),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
