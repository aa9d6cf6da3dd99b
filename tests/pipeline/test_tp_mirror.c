/* Tensor-parallel serving's leader and follower over the group's links, on
 * CPU executors in two processes (no GPU): the leader runs a script of
 * mixed batches, resets and the prefix cache's retained, dropped and
 * attached blocks through its mirrored session, one batch refused for its
 * input (the follower passes over it), then ends; the follower repeats every
 * operation. Afterwards both run the same probe batch on their own: its
 * logits are the same bits, so the follower's engine took exactly the
 * leader's steps. A follower that dies makes the leader's next operations
 * fail within seconds, naming it. */
#include "gp_test.h"

#include <unistd.h>

#include "gp_comm.h"
#include "gp_pipeline.h"
#include "gp_reference.h"

enum { SEQS = 4, CTX = 64, BLOCK = 4, PROBE = 3 };

static char g_spec[128], g_out[128];

typedef struct ctx {
    gp_host_weights w;
    gp_cpu_model *m;
    gp_cpu_exec *x;
} ctx;

static gp_status open_ctx(ctx *c)
{
    gp_config cfg;
    GP_TRY(gp_config_preset("tiny", &cfg));
    GP_TRY(gp_host_weights_alloc(&cfg, GP_DTYPE_F32, &c->w));
    GP_TRY(gp_synth_fill_host(&c->w, 9));
    GP_TRY(gp_cpu_model_create(&c->w, SEQS, CTX, BLOCK, &c->m));
    return gp_cpu_exec_create(c->m, 1, 1, &c->x);
}

static void close_ctx(ctx *c)
{
    gp_cpu_exec_destroy(c->x);
    gp_cpu_model_destroy(c->m);
    gp_host_weights_free(&c->w);
}

#define RUN(b, next)                                                                                             \
    s->run_batch(e.ctx, &(gp_batch){.n_parts = (int)(sizeof(b) / sizeof(b)[0]), .parts = (b)}, next, NULL, NULL)

/* The leader's script through its mirrored session. */
static gp_status script(gp_exec e)
{
    const gp_session_ops *s = e.session;
    const int32_t p0[9] = {5, 9, 2, 7, 7, 1, 3, 8, 4}, p1[3] = {11, 12, 13}, p2[6] = {1, 2, 3, 4, 5, 6};
    int32_t next[4];
    gp_batch_part b1[] = {{.seq = 0, .kind = GP_BATCH_PREFILL, .n = 9, .tokens = p0},
                          {.seq = 1, .kind = GP_BATCH_PREFILL, .n = 3, .tokens = p1}};
    GP_TRY(RUN(b1, next));
    int32_t t0 = next[0], t1 = next[1];
    gp_batch_part b2[] = {{.seq = 2, .kind = GP_BATCH_PREFILL, .n = 6, .tokens = p2},
                          {.seq = 0, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &t0},
                          {.seq = 1, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &t1}};
    GP_TRY(RUN(b2, next));
    /* seq 0's first two blocks kept past its reset, then sequence 3 starts with them */
    int h[2];
    GP_TRY(s->retain_block(e.ctx, 0, 0, &h[0]));
    GP_TRY(s->retain_block(e.ctx, 0, 1, &h[1]));
    s->reset_seq(e.ctx, 0);
    GP_TRY(s->attach_blocks(e.ctx, 3, h, 2));
    s->drop_block(e.ctx, h[0]);
    s->drop_block(e.ctx, h[1]);
    const int32_t tail = 4; /* token 8 of seq 0's prompt, after its 8 attached tokens */
    int32_t t2 = next[0];
    gp_batch_part b3[] = {{.seq = 3, .kind = GP_BATCH_PREFILL, .n = 1, .tokens = &tail},
                          {.seq = 2, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &t2}};
    GP_TRY(RUN(b3, next));
    /* refused for its input on every rank, before anything changes */
    gp_batch_part bad[] = {{.seq = 99, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &t2}};
    if (RUN(bad, next) != GP_ERR_INVALID_ARG)
        GP_FAIL(GP_ERR_STATE, "the batch of sequence 99 was not refused");
    return GP_OK;
}

/* The probe both ranks run alone: decode rows of sequences 1, 2, 3. */
static gp_status probe(gp_exec e, float *logits)
{
    const int32_t tok[PROBE] = {17, 18, 19};
    gp_batch_part b[PROBE];
    for (int i = 0; i < PROBE; i++)
        b[i] = (gp_batch_part){.seq = i + 1, .kind = GP_BATCH_DECODE, .n = 1, .tokens = &tok[i]};
    return e.session->run_batch(e.ctx, &(gp_batch){.n_parts = PROBE, .parts = b}, NULL, logits, NULL);
}

/* Rank rank of two joins the group at g_spec and opens its executor. */
static gp_status join(int rank, gp_group **g, ctx *c)
{
    gp_group_params p = gp_group_default_params();
    GP_TRY(gp_rdv_parse(g_spec, &p.addr));
    p.rank = rank;
    p.n_ranks = 2;
    p.join_timeout_s = 20;
    p.heartbeat_s = 0.2;
    p.exit_after_s = 0;
    char blob[8] = "mirror";
    memset(c, 0, sizeof *c);
    GP_TRY(gp_group_join(&p, blob, sizeof blob, g));
    return open_ctx(c);
}

static int rank_main(int rank, void *arg)
{
    (void)arg;
    gp_group *g = NULL;
    ctx c;
    if (join(rank, &g, &c) != GP_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, gp_last_error());
        return 1;
    }
    gp_exec inner = gp_cpu_exec_get(c.x);
    gp_status st;
    long long ops = 0;
    if (rank == 0) {
        gp_tp_lead *l = NULL;
        if ((st = gp_tp_lead_create(inner, g, &l)) == GP_OK && (st = script(gp_tp_lead_get(l))) == GP_OK)
            st = gp_tp_lead_end(l);
        gp_tp_lead_destroy(l);
    } else {
        st = gp_tp_follow(inner, g, &ops);
        printf("rank 1 repeated %lld operations\n", ops);
        if (st == GP_OK && ops != 10) { /* 4 batches (one refused), 2 retains, a reset, an attach, 2 drops */
            st = GP_ERR_STATE;
            gp_set_error("%lld operations repeated, 10 expected", ops);
        }
    }
    const int V = c.w.cfg.vocab;
    float *logits = malloc(sizeof(float) * PROBE * (size_t)V);
    if (st == GP_OK)
        st = logits ? probe(inner, logits) : GP_ERR_NO_MEMORY;
    char path[160];
    snprintf(path, sizeof path, "%s.%d", g_out, rank);
    FILE *f = st == GP_OK ? fopen(path, "wb") : NULL;
    if (f) {
        fwrite(logits, sizeof(float), PROBE * (size_t)V, f);
        fclose(f);
    }
    if (st != GP_OK)
        fprintf(stderr, "rank %d: %s\n", rank, gp_last_error());
    free(logits);
    close_ctx(&c);
    gp_group_leave(g);
    return st == GP_OK && f ? 0 : 1;
}

static void test_follower_repeats_the_leader(void **state)
{
    (void)state;
    snprintf(g_spec, sizeof g_spec, "file:/tmp/gp_tp_mirror.%d", (int)getpid());
    snprintf(g_out, sizeof g_out, "/tmp/gp_tp_mirror_out.%d", (int)getpid());
    int codes[2];
    GP_CHECK_OK(gp_ranks_run(2, rank_main, NULL, codes));
    unlink(g_spec + 5);
    assert_int_equal(codes[0], 0);
    assert_int_equal(codes[1], 0);
    long n[2] = {0, 0};
    char *d[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) {
        char path[160];
        snprintf(path, sizeof path, "%s.%d", g_out, r);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        n[r] = ftell(f);
        rewind(f);
        d[r] = malloc((size_t)n[r]);
        assert_int_equal(fread(d[r], 1, (size_t)n[r], f), (size_t)n[r]);
        fclose(f);
        unlink(path);
    }
    assert_true(n[0] > 0 && n[0] == n[1]);
    assert_memory_equal(d[0], d[1], (size_t)n[0]);
    free(d[0]);
    free(d[1]);
}

/* Rank 1 follows one operation, then its process ends without leaving. */
static int dying_rank(int rank, void *arg)
{
    (void)arg;
    gp_group *g = NULL;
    ctx c;
    if (join(rank, &g, &c) != GP_OK)
        return 1;
    gp_exec inner = gp_cpu_exec_get(c.x);
    if (rank == 1) {
        int32_t h[5];
        if (gp_group_recv(g, h, sizeof h) != GP_OK)
            return 1;
        _exit(0); /* no leave: the leader must notice */
    }
    gp_tp_lead *l = NULL;
    if (gp_tp_lead_create(inner, g, &l) != GP_OK)
        return 1;
    gp_exec e = gp_tp_lead_get(l);
    const int32_t tok = 5;
    gp_batch_part b[] = {{.seq = 0, .kind = GP_BATCH_PREFILL, .n = 1, .tokens = &tok}};
    gp_status st = GP_OK;
    const uint64_t t0 = gp_now_ns();
    for (int i = 0; i < 200 && st == GP_OK; i++) { /* decode rows of sequence 0 until the group fails */
        b[0].kind = i ? GP_BATCH_DECODE : GP_BATCH_PREFILL;
        st = e.session->run_batch(e.ctx, &(gp_batch){.n_parts = 1, .parts = b}, NULL, NULL, NULL);
        usleep(20000);
    }
    const double s = (gp_now_ns() - t0) / 1e9;
    printf("the leader after rank 1 died: %s after %.2f s: %s\n", gp_status_str(st), s, gp_last_error());
    const int rc = st == GP_ERR_STATE && strstr(gp_last_error(), "rank 1") && s < 4 ? 0 : 1;
    gp_tp_lead_destroy(l);
    close_ctx(&c);
    gp_group_leave(g);
    return rc;
}

static void test_follower_dies(void **state)
{
    (void)state;
    snprintf(g_spec, sizeof g_spec, "file:/tmp/gp_tp_mirror_dying.%d", (int)getpid());
    int codes[2];
    GP_CHECK_OK(gp_ranks_run(2, dying_rank, NULL, codes));
    unlink(g_spec + 5);
    assert_int_equal(codes[1], 0);
    assert_int_equal(codes[0], 0);
}

static void test_bad_args(void **state)
{
    (void)state;
    gp_tp_lead *l = NULL;
    GP_CHECK_FAIL(gp_tp_lead_create((gp_exec){0}, NULL, &l), GP_ERR_INVALID_ARG, "run_batch and reset_seq");
    GP_CHECK_FAIL(gp_tp_follow((gp_exec){0}, NULL, NULL), GP_ERR_INVALID_ARG, "rank other than 0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_follower_repeats_the_leader),
        cmocka_unit_test(test_follower_dies),
    };
    return cmocka_run_group_tests_name("tensor-parallel serving's leader and follower", tests, NULL, NULL);
}
