/* Tensor parallelism on the CPU reference, no GPU: a model cut into tp
 * shards (gp_host_weights_shard), each rank's reference on its own thread,
 * the ranks' embeddings and o and down outputs summed through the sum hook
 * in rank order and their parts of the head gathered, gives the whole
 * model's logits (within SUM_TOL: the partial sums
 * add in another order) and its greedy tokens, prefill and decode steps
 * alike, on the tiny preset (TP = 2, and with a vocabulary of 257 that does
 * not divide), small-gqa (TP = 2), qwen2-tiny (its q/k/v biases cut with
 * their rows) and long-gqa at TP = 2; the shapes and
 * slices of a shard; a shard read straight from the source equal to the cut
 * one; every refused --tp. */
#include "gp_test.h"

#include <pthread.h>

#include "gp_model.h"
#include "gp_reference.h"

#define PROMPTS 2
#define STEPS 4
#define CTX 64
/* max |TP - whole| / max |whole| over the logits (fp32, sums reordered) */
#define SUM_TOL 1e-4

typedef struct tp_sum {
    pthread_barrier_t bar;
    float *rows[GP_TP_MAX];
    int tp;
} tp_sum;

typedef struct rank_run {
    tp_sum *sum;
    int rank, V;
    const gp_host_weights *w;
    float *scratch;   /* the reduce's sum, [PROMPTS x hidden] */
    float *logits;    /* [PROMPTS (prefill) + STEPS x PROMPTS][V] */
    int32_t toks[STEPS * PROMPTS];
    gp_status st;
    char why[512];
} rank_run;

/* Every rank deposits its rows, each sums them in rank order (the same bits
 * on every rank), and writes the sum back once all have read. */
static gp_status reduce(void *ctx, float *rows, size_t n)
{
    rank_run *r = ctx;
    tp_sum *s = r->sum;
    s->rows[r->rank] = rows;
    pthread_barrier_wait(&s->bar);
    for (size_t i = 0; i < n; i++) {
        float a = 0.0f;
        for (int k = 0; k < s->tp; k++)
            a += s->rows[k][i];
        r->scratch[i] = a;
    }
    pthread_barrier_wait(&s->bar);
    memcpy(rows, r->scratch, sizeof(float) * n);
    return GP_OK;
}

/* Every rank's segment of n floats from the others' buffers, once all have
 * theirs in place. */
static gp_status gather(void *ctx, float *buf, size_t n)
{
    rank_run *r = ctx;
    tp_sum *s = r->sum;
    s->rows[r->rank] = buf;
    pthread_barrier_wait(&s->bar);
    for (int k = 0; k < s->tp; k++)
        if (k != r->rank)
            memcpy(buf + (size_t)k * n, s->rows[k] + (size_t)k * n, sizeof(float) * n);
    pthread_barrier_wait(&s->bar);
    return GP_OK;
}

/* Prefill PROMPTS prompts, then STEPS greedy steps; logits and tokens into r. */
static void *run(void *arg)
{
    rank_run *r = arg;
    gp_cpu_model *m = NULL;
    r->st = gp_cpu_model_create(r->w, PROMPTS, CTX, 16, &m);
    if (r->st == GP_OK)
        r->st = gp_cpu_model_set_threads(m, 1);
    if (r->st == GP_OK && r->sum)
        r->st = gp_cpu_model_set_tp(m, &(gp_cpu_tp){.rank = r->rank, .tp = r->sum->tp, .sum = reduce,
                                                    .gather = gather, .ctx = r});
    int32_t p[PROMPTS][7];
    gp_prefill_seq seqs[PROMPTS];
    for (int s = 0; s < PROMPTS; s++) {
        for (int i = 0; i < 7; i++)
            p[s][i] = (int32_t)((17 * i + 5 * s + 3) % r->V);
        seqs[s] = (gp_prefill_seq){s, 4 + 3 * s, p[s]};
    }
    if (r->st == GP_OK)
        r->st = gp_cpu_prefill_batch(m, PROMPTS, seqs, r->logits, NULL);
    int32_t next[PROMPTS];
    const int ids[PROMPTS] = {0, 1};
    for (int s = 0; s < PROMPTS; s++)
        next[s] = gp_argmax(r->logits + (size_t)s * r->V, r->V);
    for (int st = 0; st < STEPS && r->st == GP_OK; st++) {
        float *lg = r->logits + (size_t)(PROMPTS + st * PROMPTS) * r->V;
        r->st = gp_cpu_decode_step(m, PROMPTS, ids, next, lg);
        for (int s = 0; s < PROMPTS && r->st == GP_OK; s++)
            r->toks[st * PROMPTS + s] = next[s] = gp_argmax(lg + (size_t)s * r->V, r->V);
    }
    if (r->st != GP_OK)
        snprintf(r->why, sizeof r->why, "%s", gp_last_error());
    gp_cpu_model_destroy(m);
    return NULL;
}

static void check_source(const gp_model_source *src, const char *spec, int tp)
{
    gp_host_weights w;
    GP_CHECK_OK(gp_model_source_load_host(src, &w));
    const int V = w.cfg.vocab, H = w.cfg.hidden;
    const size_t nl = (size_t)(PROMPTS + STEPS * PROMPTS) * V;
    rank_run whole = {.rank = 0, .V = V, .w = &w, .logits = malloc(sizeof(float) * nl)};
    assert_non_null(whole.logits);
    run(&whole);
    if (whole.st != GP_OK)
        fail_msg("%s whole: %s", spec, whole.why);

    gp_host_weights shard[GP_TP_MAX];
    rank_run rr[GP_TP_MAX];
    pthread_t th[GP_TP_MAX];
    tp_sum sum = {.tp = tp};
    pthread_barrier_init(&sum.bar, NULL, (unsigned)tp);
    for (int r = 0; r < tp; r++) {
        GP_CHECK_OK(gp_host_weights_shard(&w, tp, r, &shard[r]));
        rr[r] = (rank_run){.sum = &sum, .rank = r, .V = V, .w = &shard[r],
                           .scratch = malloc(sizeof(float) * PROMPTS * CTX * H),
                           .logits = malloc(sizeof(float) * nl)};
        memset(rr[r].logits, 0xff, sizeof(float) * nl); /* poisoned */
        assert_int_equal(pthread_create(&th[r], NULL, run, &rr[r]), 0);
    }
    for (int r = 0; r < tp; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < tp; r++)
        if (rr[r].st != GP_OK)
            fail_msg("%s rank %d of %d: %s", spec, r, tp, rr[r].why);
    double d = gp_test_rel_err(rr[0].logits, whole.logits, (int)nl);
    printf("%s, TP = %d: logits %.2e from the whole model's, tokens %s\n", spec, tp, d,
           memcmp(rr[0].toks, whole.toks, sizeof whole.toks) ? "DIFFER" : "equal");
    assert_true(d <= SUM_TOL);
    assert_memory_equal(rr[0].toks, whole.toks, sizeof whole.toks);
    for (int r = 1; r < tp; r++) /* every rank ends with the same bits */
        assert_memory_equal(rr[r].logits, rr[0].logits, sizeof(float) * nl);
    for (int r = 0; r < tp; r++) {
        free(rr[r].scratch);
        free(rr[r].logits);
        gp_host_weights_free(&shard[r]);
    }
    pthread_barrier_destroy(&sum.bar);
    free(whole.logits);
    gp_host_weights_free(&w);
}

static void check(const char *spec, int tp)
{
    gp_model_source src;
    GP_CHECK_OK(gp_model_source_resolve(spec, 3, &src));
    check_source(&src, spec, tp);
}

static void test_tiny(void **state)
{
    (void)state;
    check("tiny", 2);
}

/* A vocabulary that does not divide: rank 1's part of the embedding and
 * head ends in a padding row. */
static void test_odd_vocab(void **state)
{
    (void)state;
    gp_model_source src;
    GP_CHECK_OK(gp_model_source_resolve("tiny", 3, &src));
    src.cfg.vocab = 257;
    check_source(&src, "tiny, vocabulary 257", 2);
}

static void test_small_gqa(void **state)
{
    (void)state;
    check(GP_TEST_DATA_DIR "/small-gqa", 2);
}

static void test_qwen2_bias(void **state)
{
    (void)state;
    check(GP_TEST_DATA_DIR "/qwen2-tiny", 2);
}

static void test_long_gqa(void **state)
{
    (void)state;
    check(GP_TEST_DATA_DIR "/long-gqa", 2);
}

/* A shard's shape and slices, element by element, on tiny (bf16). */
static void test_slices(void **state)
{
    (void)state;
    gp_model_source src;
    gp_host_weights w, s;
    GP_CHECK_OK(gp_model_source_resolve("tiny", 3, &src));
    GP_CHECK_OK(gp_model_source_load_host(&src, &w));
    const gp_config *c = &w.cfg;
    GP_CHECK_OK(gp_host_weights_shard(&w, 2, 1, &s));
    assert_int_equal(s.cfg.n_heads, c->n_heads / 2);
    assert_int_equal(s.cfg.n_kv_heads, c->n_kv_heads / 2);
    assert_int_equal(s.cfg.ffn, c->ffn / 2);
    assert_int_equal(s.cfg.hidden, c->hidden);
    assert_string_equal(s.cfg.name, "tiny tp2.1");
    const uint16_t *a = w.layers[1].wqkv, *b = s.layers[1].wqkv;
    const int H = c->hidden, hd = c->head_dim, qd = c->n_heads * hd, kd = c->n_kv_heads * hd;
    /* rank 1's first q row is the whole model's row qd/2; its first k row, qd + kd/2 */
    assert_memory_equal(b, a + (size_t)(qd / 2) * H, sizeof(uint16_t) * H);
    assert_memory_equal(b + (size_t)(qd / 2) * H, a + (size_t)(qd + kd / 2) * H, sizeof(uint16_t) * H);
    /* o: row 3 of rank 1 is row 3's columns qd/2 .. qd-1 */
    const uint16_t *wo = w.layers[1].wo, *so = s.layers[1].wo;
    assert_memory_equal(so + 3 * (size_t)(qd / 2), wo + 3 * (size_t)qd + qd / 2, sizeof(uint16_t) * (qd / 2));
    /* down: row 5 of rank 1 is row 5's columns F/2 .. F-1 */
    const int F = c->ffn;
    const uint16_t *wd = w.layers[0].w_down, *sd = s.layers[0].w_down;
    assert_memory_equal(sd + 5 * (size_t)(F / 2), wd + 5 * (size_t)F + F / 2, sizeof(uint16_t) * (F / 2));
    /* up: rank 1's first up row is the whole model's row F + F/2 */
    const uint16_t *gu = w.layers[0].w_gate_up, *sg = s.layers[0].w_gate_up;
    assert_memory_equal(sg + (size_t)(F / 2) * H, gu + (size_t)(F + F / 2) * H, sizeof(uint16_t) * H);
    assert_true(s.lm_head == s.embed); /* tied stays tied */
    /* the embedding by tokens: rank 1 holds [V/2, V) (tiny's 256 tokens, even) */
    const int V = c->vocab;
    assert_int_equal(s.cfg.vocab, V);
    assert_int_equal(s.cfg.vocab_parts, 2);
    assert_int_equal(gp_config_vocab_rows(&s.cfg), V / 2);
    assert_memory_equal(s.embed, (const uint16_t *)w.embed + (size_t)(V / 2) * H, sizeof(uint16_t) * (V / 2) * H);
    gp_host_weights_free(&s);
    gp_host_weights_free(&w);
}

/* Every tensor of a equals b's, bit for bit. */
static void same_tensors(const gp_host_weights *a, const gp_host_weights *b)
{
    const gp_config *c = &a->cfg;
    const size_t es = gp_dtype_size(a->dtype);
    assert_memory_equal(a->embed, b->embed, gp_synth_numel(c, GP_T_EMBED) * es);
    assert_memory_equal(a->final_norm, b->final_norm, gp_synth_numel(c, GP_T_FINAL_NORM) * es);
    assert_memory_equal(a->lm_head, b->lm_head, gp_synth_numel(c, GP_T_LM_HEAD) * es);
    for (int l = 0; l < c->n_layers; l++) {
        const gp_layer_weights *x = &a->layers[l], *y = &b->layers[l];
        assert_memory_equal(x->attn_norm, y->attn_norm, gp_synth_numel(c, GP_T_ATTN_NORM) * es);
        assert_memory_equal(x->wqkv, y->wqkv, gp_synth_numel(c, GP_T_WQKV) * es);
        assert_memory_equal(x->wo, y->wo, gp_synth_numel(c, GP_T_WO) * es);
        assert_memory_equal(x->ffn_norm, y->ffn_norm, gp_synth_numel(c, GP_T_FFN_NORM) * es);
        assert_memory_equal(x->w_gate_up, y->w_gate_up, gp_synth_numel(c, GP_T_W_GATE_UP) * es);
        assert_memory_equal(x->w_down, y->w_down, gp_synth_numel(c, GP_T_W_DOWN) * es);
        if (c->qkv_bias)
            assert_memory_equal(x->bqkv, y->bqkv, gp_synth_numel(c, GP_T_BQKV) * es);
    }
}

/* The shard read straight from the source equals the one cut from the whole
 * weights, bit for bit: presets (synthetic) and checkpoints of each dtype,
 * q/k/v biases, tied and untied heads. */
static void test_load_shard(void **state)
{
    (void)state;
    const char *specs[] = {"tiny", GP_TEST_DATA_DIR "/small-gqa", GP_TEST_DATA_DIR "/qwen2-tiny",
                           GP_TEST_DATA_DIR "/tiny-fp16", GP_TEST_DATA_DIR "/tiny-fp32",
                           GP_TEST_DATA_DIR "/qwen2-untied"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        gp_model_source src;
        gp_host_weights w, a, b;
        GP_CHECK_OK(gp_model_source_resolve(specs[i], 5, &src));
        GP_CHECK_OK(gp_model_source_load_host(&src, &w));
        for (int r = 0; r < 2; r++) {
            GP_CHECK_OK(gp_host_weights_shard(&w, 2, r, &a));
            memset(&b, 0, sizeof b);
            GP_CHECK_OK(gp_model_source_load_host_shard(&src, 2, r, &b, NULL));
            assert_int_equal(a.dtype, b.dtype);
            same_tensors(&a, &b);
            assert_string_equal(a.cfg.name, b.cfg.name);
            gp_host_weights_free(&a);
            gp_host_weights_free(&b);
        }
        printf("%s: the shards read from the source are the cut ones, bit for bit (%s)\n", specs[i],
               gp_dtype_name(w.dtype));
        gp_host_weights_free(&w);
    }
    gp_model_source src;
    gp_host_weights b;
    GP_CHECK_OK(gp_model_source_resolve("tiny", 5, &src));
    GP_CHECK_FAIL(gp_model_source_load_host_shard(&src, 3, 0, &b, NULL), GP_ERR_INVALID_ARG, "--tp 3: model tiny");
}

static void test_refusals(void **state)
{
    (void)state;
    gp_config c, out;
    GP_CHECK_OK(gp_config_preset("tiny", &c));
    GP_CHECK_FAIL(gp_tp_check(&c, 0), GP_ERR_INVALID_ARG, "--tp 0: allowed 1..8");
    GP_CHECK_FAIL(gp_tp_check(&c, 9), GP_ERR_INVALID_ARG, "--tp 9: allowed 1..8");
    GP_CHECK_FAIL(gp_tp_check(&c, 3), GP_ERR_INVALID_ARG,
                  "--tp 3: model tiny has 4 query heads (num_attention_heads), not a multiple of 3");
    GP_CHECK_FAIL(gp_tp_check(&c, 4), GP_ERR_INVALID_ARG, "2 key/value heads (num_key_value_heads)");
    GP_CHECK_OK(gp_config_preset("llama3-70b", &c));
    GP_CHECK_OK(gp_tp_config(&c, 8, &out));
    assert_int_equal(out.n_kv_heads, 1);
    GP_CHECK_OK(gp_config_preset("llama3-8b", &c));
    c.ffn = 14337;
    GP_CHECK_FAIL(gp_tp_check(&c, 2), GP_ERR_INVALID_ARG, "14337 FFN neurons (intermediate_size)");
    gp_host_weights w, s;
    memset(&w, 0, sizeof w);
    GP_CHECK_OK(gp_config_preset("tiny", &w.cfg));
    GP_CHECK_FAIL(gp_host_weights_shard(&w, 2, 2, &s), GP_ERR_INVALID_ARG, "rank 2 of --tp 2: allowed 0..1");
    /* a shard is not cut again, and every rank must hold some tokens */
    GP_CHECK_OK(gp_config_preset("tiny", &c));
    GP_CHECK_OK(gp_tp_config(&c, 2, &out));
    GP_CHECK_FAIL(gp_tp_check(&out, 2), GP_ERR_INVALID_ARG, "already one of 2 parts");
    c.vocab = 5; /* parts of 2: the fourth rank would hold none */
    c.n_heads = c.n_kv_heads = 4, c.ffn = 128;
    GP_CHECK_FAIL(gp_tp_check(&c, 4), GP_ERR_INVALID_ARG, "vocabulary of 5 tokens cut in parts of 2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slices),     cmocka_unit_test(test_load_shard), cmocka_unit_test(test_refusals), cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_odd_vocab),
        cmocka_unit_test(test_small_gqa),  cmocka_unit_test(test_qwen2_bias), cmocka_unit_test(test_long_gqa),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
