/* Stored prefixes on the engine: a prompt whose leading blocks
 * were stored gets, after the reload and the suffix prefill, the same logits
 * and decode steps bit for bit as the same prompt prefilled in two calls
 * (prefix, then the rest: the shapes the reuse runs), and within the engine
 * tolerance of one full prefill; with 2 and 3 staging buffers, with and
 * without the per-layer overlap, blocks that do not divide the cache's;
 * partial matches, the one-token rule, blocks in scattered pool slots, block files (reused by a second
 * engine, a truncated one a miss), eviction, a reload into an offloaded KV cache (host and device blocks),
 * refusals. Both engine dtypes.
 * Skips without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp_engine.h"
#include "gp_kvstore.h"
#include "gp_test.h"
#include "gp_weights.h"

#include "engine_tol.h"
#include "gpu_test_util.h"

enum { MAX_CTX = 512, BLOCK = 16, NSEQ = 4, LEN = 150 };
static gp_dtype g_dt = GP_DTYPE_BF16;

typedef struct fixture {
    gp_config cfg;
    gp_host_weights w;
    gp_device_weights *dw;
    int32_t a[LEN], b[LEN]; /* b shares a's first 40 tokens */
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    gt_config_hd128(&f->cfg); /* head_dim 128: the tensor-core prefill attention runs */
    gp_config *c = &f->cfg;
    /* eight layers: an offloaded cache's four staging windows (each one
     * layer's offloaded blocks) then fit below the whole cache */
    c->n_layers = 8;
    gt_weights_synth(c, 99, g_dt, &f->w, &f->dw);
    srand((unsigned)gt_seed("engine_prefix"));
    for (int i = 0; i < LEN; i++) {
        f->a[i] = rand() % c->vocab;
        f->b[i] = i < 40 ? f->a[i] : rand() % c->vocab;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    gp_device_weights_destroy(f->dw);
    gp_host_weights_free(&f->w);
    free(f);
    return 0;
}

static gp_engine *engine(fixture *f)
{
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = NSEQ;
    p.max_context = MAX_CTX;
    p.block_size = BLOCK;
    gp_engine *e;
    GP_CHECK_OK(gp_engine_create(f->dw, &p, &e));
    return e;
}

static gp_prefix_params params(int block_tokens, int n_buffers, bool overlap, uint64_t blocks, const char *dir)
{
    gp_prefix_params p = gp_prefix_default_params();
    p.model = "engine_prefix synthetic seed 99";
    p.block_tokens = block_tokens;
    p.n_buffers = n_buffers;
    p.overlap = overlap;
    p.store_bytes = blocks; /* in blocks here; scaled by the caller */
    p.dir = dir;
    return p;
}

static gp_engine *prefix_engine(fixture *f, int block_tokens, int n_buffers, bool overlap, int blocks,
                                const char *dir)
{
    gp_engine *e = engine(f);
    gp_prefix_params p = params(block_tokens, n_buffers, overlap, 0, dir);
    p.store_bytes = (uint64_t)blocks * gp_engine_prefix_block_bytes(e, block_tokens);
    GP_CHECK_OK(gp_engine_prefix_enable(e, &p));
    return e;
}

/* The reference of a reuse of P tokens: prefix, then the rest, in two
 * calls on an empty sequence; logits [V] and the next token. */
static void two_calls(gp_engine *e, int seq, const int32_t *t, int P, int n, float *logits, int32_t *next)
{
    gp_engine_reset_seq(e, seq);
    GP_CHECK_OK(gp_engine_prefill(e, seq, P, t, NULL, NULL));
    GP_CHECK_OK(gp_engine_prefill(e, seq, n - P, t + P, next, logits));
}

/* Three greedy decode steps of seq from next; logits [3][V]. */
static void decode3(gp_engine *e, int seq, int32_t next, float *logits)
{
    const int V = gp_engine_config(e)->vocab;
    for (int i = 0; i < 3; i++)
        GP_CHECK_OK(gp_engine_decode_step(e, 1, &seq, &next, &next, logits + (size_t)i * V));
}

/* Store a's first `stored` tokens from seq 0, then reuse them in seq 2
 * against the two-call reference in seq 1 and a full prefill in seq 3. */
static void reuse_case(fixture *f, int bt, int n_buffers, bool overlap, int stored)
{
    const int V = f->cfg.vocab;
    gp_engine *e = prefix_engine(f, bt, n_buffers, overlap, 16, NULL);
    GP_CHECK_OK(gp_engine_prefill(e, 0, stored, f->a, NULL, NULL));
    gp_prefix_store_stats ss;
    GP_CHECK_OK(gp_engine_prefix_store_seq(e, 0, stored, f->a, &ss));
    const int nb = stored / bt, P = nb * bt;
    assert_int_equal(ss.blocks, nb);
    assert_int_equal(ss.blocks_stored, nb);
    assert_int_equal(ss.blocks_present, 0);
    GP_CHECK_OK(gp_engine_prefix_store_seq(e, 0, stored, f->a, &ss)); /* again: all present, nothing copied */
    assert_int_equal(ss.blocks_present, nb);
    assert_int_equal(ss.blocks_stored, 0);
    assert_int_equal(ss.bytes_stored, 0);

    float *ref = malloc(sizeof(float) * 4 * V), *got = malloc(sizeof(float) * 4 * V), *full = malloc(sizeof(float) * V);
    int32_t nref = -1, ngot = -2, nfull = -3;
    two_calls(e, 1, f->a, P, LEN, ref, &nref);
    gp_prefix_stats st;
    GP_CHECK_OK(gp_engine_prefill_prefix(e, 2, LEN, f->a, &ngot, got, &st));
    assert_int_equal(st.prompt_tokens, LEN);
    assert_int_equal(st.matched_tokens, P);
    const uint64_t per_token = 2ull * f->cfg.n_layers * f->cfg.n_kv_heads * f->cfg.head_dim * 2;
    assert_int_equal(st.bytes_loaded, (uint64_t)P * per_token);
    assert_true(st.reload_ms > 0.0f && st.suffix_ms > 0.0f && st.ttft_ms >= st.suffix_ms);
    assert_memory_equal(got, ref, sizeof(float) * V);
    assert_int_equal(ngot, nref);
    /* the trace's order: each layer's scatter after its copy, the suffix's layer after its scatter (with
       overlap; events resolve to about a microsecond) */
    gp_prefix_trace_layer tr[8];
    float first = 0.0f;
    assert_true(f->cfg.n_layers <= 8);
    GP_CHECK_OK(gp_engine_prefix_trace(e, tr, &first));
    for (int l = 0; l < f->cfg.n_layers; l++) {
        assert_true(tr[l].load_end >= tr[l].load_begin && tr[l].write_begin >= tr[l].load_end - 1e-3f);
        assert_true(tr[l].write_end >= tr[l].write_begin);
        if (overlap)
            assert_true(tr[l].suffix_attn >= tr[l].write_end - 1e-3f);
    }
    assert_true(first >= tr[f->cfg.n_layers - 1].suffix_attn);
    decode3(e, 1, nref, ref + V);
    decode3(e, 2, ngot, got + V);
    assert_memory_equal(got + V, ref + V, sizeof(float) * 3 * V);
    GP_CHECK_OK(gp_engine_prefill(e, 3, LEN, f->a, &nfull, full));
    double err = gp_test_rel_err(got, full, V);
    print_message("  block %d, %d buffers, overlap %d: reused %d of %d tokens, %.3g off one full prefill\n", bt,
                  n_buffers, overlap, P, LEN, err);
    assert_true(err <= PREFILL_TOL);
    free(ref);
    free(got);
    free(full);
    gp_engine_destroy(e);
}

static void test_reuse(void **state)
{
    fixture *f = *state;
    reuse_case(f, 32, 2, true, 96);
    reuse_case(f, 32, 3, false, 100); /* a partial last block is not stored */
    reuse_case(f, 24, 2, true, 96);   /* stored blocks across cache blocks */
    reuse_case(f, 16, 4, true, 149);  /* the longest reuse: all but the last token */
}

/* One reuse on an engine whose KV cache is offloaded at budget: a prompt
 * of hq + 150 tokens (hq: the host quota) whose stored prefix ends 64
 * tokens past the quota, so the reload writes host blocks and, when the
 * quota leaves device blocks, device blocks; bitwise against the two-call
 * reference on the same engine and on a resident one, and three decode
 * steps after it. */
static void offloaded_case(fixture *f, uint64_t budget, const gp_kv_offload_plan *plan)
{
    const int V = f->cfg.vocab, ctx = 2048, bt = 32;
    const int hq = plan->host_blocks_per_seq * BLOCK, n = hq + 150 < ctx - 3 ? hq + 150 : ctx - 4; /* room for the three steps after */
    const int P = (hq + 64 < n ? hq + 64 : n - 1) / bt * bt;
    int32_t *t = gt_rand_ids(n, V);
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = NSEQ;
    p.max_context = ctx;
    p.block_size = BLOCK;
    p.use_graphs = false;
    gp_engine *res, *e;
    GP_CHECK_OK(gp_engine_create(f->dw, &p, &res));
    p.kv_vram_budget = budget;
    GP_CHECK_OK(gp_engine_create(f->dw, &p, &e));
    assert_int_equal(gp_engine_kv_offload(e)->host_blocks_per_seq, plan->host_blocks_per_seq);
    gp_prefix_params pp = params(bt, 2, true, 0, NULL);
    pp.store_bytes = (uint64_t)(P / bt) * gp_engine_prefix_block_bytes(e, bt);
    GP_CHECK_OK(gp_engine_prefix_enable(e, &pp));
    GP_CHECK_OK(gp_engine_prefill(e, 0, P, t, NULL, NULL));
    gp_prefix_store_stats ss;
    GP_CHECK_OK(gp_engine_prefix_store_seq(e, 0, P, t, &ss));
    assert_int_equal(ss.blocks_stored, P / bt);

    float *ref = malloc(sizeof(float) * 4 * V), *res_ref = malloc(sizeof(float) * 4 * V),
          *got = malloc(sizeof(float) * 4 * V);
    int32_t nref = -1, nres = -2, ngot = -3;
    two_calls(e, 1, t, P, n, ref, &nref);
    two_calls(res, 1, t, P, n, res_ref, &nres);
    gp_prefix_stats st;
    GP_CHECK_OK(gp_engine_prefill_prefix(e, 2, n, t, &ngot, got, &st));
    assert_int_equal(st.matched_tokens, P);
    assert_memory_equal(got, ref, sizeof(float) * V);
    assert_memory_equal(got, res_ref, sizeof(float) * V);
    assert_int_equal(ngot, nref);
    assert_int_equal(ngot, nres);
    decode3(e, 1, nref, ref + V);
    decode3(res, 1, nres, res_ref + V);
    decode3(e, 2, ngot, got + V);
    assert_memory_equal(got + V, ref + V, sizeof(float) * 3 * V);
    assert_memory_equal(got + V, res_ref + V, sizeof(float) * 3 * V);
    print_message("  offloaded KV, host quota %d tokens: reused %d of %d tokens bitwise\n", hq, P, n);
    free(ref);
    free(res_ref);
    free(got);
    free(t);
    gp_engine_destroy(e);
    gp_engine_destroy(res);
}

/* A stored prefix reloaded into an offloaded cache: at every split the
 * budgets k/16 of the whole cache give (every block on the host, or the
 * oldest half). */
static void test_offloaded(void **state)
{
    fixture *f = *state;
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = NSEQ;
    p.max_context = 2048;
    p.block_size = BLOCK;
    p.kv_vram_budget = ~0ull;
    gp_kv_offload_plan plan;
    GP_CHECK_OK(gp_engine_kv_offload_plan(&f->cfg, &p, g_dt, &plan));
    const uint64_t full = plan.full_bytes;
    int seen = -1, runs = 0;
    for (int k = 15; k >= 1; k--) {
        p.kv_vram_budget = full * (uint64_t)k / 16;
        if (gp_engine_kv_offload_plan(&f->cfg, &p, g_dt, &plan) != GP_OK)
            break; /* below the least */
        if (plan.host_blocks_per_seq == 0 || plan.host_blocks_per_seq == seen)
            continue;
        seen = plan.host_blocks_per_seq;
        offloaded_case(f, p.kv_vram_budget, &plan);
        runs++;
    }
    assert_true(runs > 0);
}

/* b shares 40 tokens with a: one 32-token block; a prompt of exactly the
 * stored tokens leaves its last block to prefill; a short prompt is a
 * plain prefill. */
static void test_partial(void **state)
{
    fixture *f = *state;
    const int V = f->cfg.vocab;
    gp_engine *e = prefix_engine(f, 32, 2, true, 16, NULL);
    GP_CHECK_OK(gp_engine_prefill(e, 0, 96, f->a, NULL, NULL));
    GP_CHECK_OK(gp_engine_prefix_store_seq(e, 0, 96, f->a, NULL));
    float *ref = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V);
    int32_t nr, ng;
    gp_prefix_stats st;
    two_calls(e, 1, f->b, 32, LEN, ref, &nr);
    GP_CHECK_OK(gp_engine_prefill_prefix(e, 2, LEN, f->b, &ng, got, &st));
    assert_int_equal(st.matched_tokens, 32);
    assert_memory_equal(got, ref, sizeof(float) * V);
    gp_engine_reset_seq(e, 2);
    two_calls(e, 1, f->a, 64, 96, ref, &nr);
    GP_CHECK_OK(gp_engine_prefill_prefix(e, 2, 96, f->a, &ng, got, &st));
    assert_int_equal(st.matched_tokens, 64);
    assert_memory_equal(got, ref, sizeof(float) * V);
    gp_engine_reset_seq(e, 1);
    gp_engine_reset_seq(e, 2);
    GP_CHECK_OK(gp_engine_prefill(e, 1, 20, f->a, &nr, ref));
    GP_CHECK_OK(gp_engine_prefill_prefix(e, 2, 20, f->a, &ng, got, &st));
    assert_int_equal(st.matched_tokens, 0);
    assert_int_equal(st.bytes_loaded, 0);
    assert_memory_equal(got, ref, sizeof(float) * V);
    gp_kvstore_stats ks;
    gp_kvstore_get_stats(gp_engine_prefix_store(e), &ks, false);
    assert_int_equal(ks.hit_blocks, 1 + 2);
    free(ref);
    free(got);
    gp_engine_destroy(e);
}

/* A prefix whose blocks lie in slots 0, 3, 4 of the pool (its first block
 * stored alone, then b's two own blocks): the reload's copies of runs of
 * consecutive slots and of single blocks, still bitwise. */
static void test_fragmented(void **state)
{
    fixture *f = *state;
    const int V = f->cfg.vocab;
    gp_engine *e = prefix_engine(f, 32, 2, true, 16, NULL);
    gp_prefix_store_stats ss;
    GP_CHECK_OK(gp_engine_prefill(e, 0, 96, f->a, NULL, NULL));
    GP_CHECK_OK(gp_engine_prefix_store_seq(e, 0, 32, f->a, &ss));
    assert_int_equal(ss.blocks_stored, 1);
    GP_CHECK_OK(gp_engine_prefill(e, 1, 96, f->b, NULL, NULL));
    GP_CHECK_OK(gp_engine_prefix_store_seq(e, 1, 96, f->b, &ss));
    assert_int_equal(ss.blocks_present, 1); /* b's first block is a's */
    assert_int_equal(ss.blocks_stored, 2);
    GP_CHECK_OK(gp_engine_prefix_store_seq(e, 0, 96, f->a, &ss));
    assert_int_equal(ss.blocks_stored, 2);
    float *ref = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V);
    int32_t nr, ng;
    gp_prefix_stats st;
    two_calls(e, 1, f->a, 96, LEN, ref, &nr);
    GP_CHECK_OK(gp_engine_prefill_prefix(e, 2, LEN, f->a, &ng, got, &st));
    assert_int_equal(st.matched_tokens, 96);
    assert_memory_equal(got, ref, sizeof(float) * V);
    assert_int_equal(ng, nr);
    free(ref);
    free(got);
    gp_engine_destroy(e);
}

/* Files: a second engine over the same directory reuses them; a truncated
 * one is a miss with a warning, the blocks before it still reused. Eviction:
 * a pool of 2 blocks holds the last two of three. */
static void test_files_and_eviction(void **state)
{
    fixture *f = *state;
    const int V = f->cfg.vocab;
    char dir[] = "/tmp/gp_prefix_XXXXXX";
    assert_non_null(mkdtemp(dir));
    gp_engine *e = prefix_engine(f, 32, 2, true, 16, dir);
    GP_CHECK_OK(gp_engine_prefill(e, 0, 96, f->a, NULL, NULL));
    GP_CHECK_OK(gp_engine_prefix_store_seq(e, 0, 96, f->a, NULL));
    gp_kvstore_stats ks;
    gp_kvstore_get_stats(gp_engine_prefix_store(e), &ks, false);
    assert_int_equal(ks.files_written, 3);
    float *ref = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V);
    int32_t nr, ng;
    two_calls(e, 1, f->a, 96, LEN, ref, &nr);
    gp_engine_destroy(e);

    e = prefix_engine(f, 32, 2, true, 16, dir);
    gp_prefix_stats st;
    GP_CHECK_OK(gp_engine_prefill_prefix(e, 2, LEN, f->a, &ng, got, &st));
    assert_int_equal(st.matched_tokens, 96);
    assert_memory_equal(got, ref, sizeof(float) * V);
    gp_kvstore_get_stats(gp_engine_prefix_store(e), &ks, false);
    assert_int_equal(ks.disk_loads, 3);
    gp_engine_destroy(e);

    /* the second block's file cut short */
    uint64_t keys[3];
    gp_kvstore_identity id = {.n_layers = f->cfg.n_layers, .n_kv_heads = f->cfg.n_kv_heads,
                              .head_dim = f->cfg.head_dim, .dtype_bytes = 2, .block_size = 32};
    char model[256];
    snprintf(model, sizeof model, "engine_prefix synthetic seed 99 (%s)", gp_dtype_name(g_dt));
    id.model = model;
    GP_CHECK_OK(gp_kvstore_chain(&id, f->a, 96, keys, NULL));
    char path[512];
    GP_CHECK_OK(gp_kvstore_file_path(dir, keys[1], path, sizeof path));
    assert_int_equal(truncate(path, 100), 0);
    e = prefix_engine(f, 32, 2, true, 16, dir);
    gp_kvstore_get_stats(gp_engine_prefix_store(e), NULL, true);
    GP_CHECK_OK(gp_engine_prefill_prefix(e, 2, LEN, f->a, &ng, got, &st));
    assert_int_equal(st.matched_tokens, 32);
    two_calls(e, 1, f->a, 32, LEN, ref, &nr);
    assert_memory_equal(got, ref, sizeof(float) * V);
    gp_kvstore_get_stats(gp_engine_prefix_store(e), &ks, false);
    assert_int_equal(ks.disk_misses[GP_KVSTORE_MISS_TRUNCATED], 1);
    gp_engine_destroy(e);
    for (int i = 0; i < 3; i++) {
        GP_CHECK_OK(gp_kvstore_file_path(dir, keys[i], path, sizeof path));
        unlink(path);
    }
    rmdir(dir);

    e = prefix_engine(f, 32, 2, true, 2, NULL);
    GP_CHECK_OK(gp_engine_prefill(e, 0, 96, f->a, NULL, NULL));
    gp_prefix_store_stats ss;
    GP_CHECK_OK(gp_engine_prefix_store_seq(e, 0, 96, f->a, &ss));
    assert_int_equal(ss.blocks_stored, 3);
    gp_kvstore_get_stats(gp_engine_prefix_store(e), &ks, false);
    assert_int_equal(ks.evictions, 1);
    assert_int_equal(ks.blocks_held, 2);
    GP_CHECK_OK(gp_engine_prefill_prefix(e, 2, LEN, f->a, &ng, got, &st));
    assert_int_equal(st.matched_tokens, 0); /* block 0 went first */
    free(ref);
    free(got);
    gp_engine_destroy(e);
}

static void test_errors(void **state)
{
    fixture *f = *state;
    gp_engine *e = engine(f);
    GP_CHECK_FAIL(gp_engine_prefix_store_seq(e, 0, 0, f->a, NULL), GP_ERR_STATE, "stored prefixes are off");
    gp_prefix_params p = params(32, 2, true, 0, NULL);
    p.store_bytes = gp_engine_prefix_block_bytes(e, 32) - 1;
    GP_CHECK_FAIL(gp_engine_prefix_enable(e, &p), GP_ERR_INVALID_ARG, "less than one stored block");
    p.store_bytes *= 4;
    p.block_tokens = 0;
    GP_CHECK_FAIL(gp_engine_prefix_enable(e, &p), GP_ERR_INVALID_ARG, "--kv-store-block 0");
    p.block_tokens = MAX_CTX;
    GP_CHECK_FAIL(gp_engine_prefix_enable(e, &p), GP_ERR_INVALID_ARG, "allowed at most 511");
    p.block_tokens = 32;
    p.n_buffers = 1;
    GP_CHECK_FAIL(gp_engine_prefix_enable(e, &p), GP_ERR_INVALID_ARG, "1 staging buffers");
    p.n_buffers = 2;
    p.model = "";
    GP_CHECK_FAIL(gp_engine_prefix_enable(e, &p), GP_ERR_INVALID_ARG, "model name is empty");
    p.model = "x";
    assert_null(gp_engine_prefix_store(e));
    GP_CHECK_OK(gp_engine_prefix_enable(e, &p));
    gp_prefix_trace_layer tr[8];
    float first;
    GP_CHECK_FAIL(gp_engine_prefix_trace(e, tr, &first), GP_ERR_STATE, "no prefill with a reload");
    GP_CHECK_FAIL(gp_engine_prefix_enable(e, &p), GP_ERR_STATE, "already on");
    GP_CHECK_OK(gp_engine_prefill(e, 0, 10, f->a, NULL, NULL));
    GP_CHECK_FAIL(gp_engine_prefill_prefix(e, 0, 10, f->a, NULL, NULL, NULL), GP_ERR_STATE, "holds 10 tokens");
    GP_CHECK_FAIL(gp_engine_prefix_store_seq(e, 0, 11, f->a, NULL), GP_ERR_STATE, "which holds 10");
    int32_t bad[3] = {1, 512, 2};
    GP_CHECK_FAIL(gp_engine_prefill_prefix(e, 1, 3, bad, NULL, NULL, NULL), GP_ERR_INVALID_ARG, "token 512");
    GP_CHECK_FAIL(gp_engine_prefill_prefix(e, NSEQ, 3, f->a, NULL, NULL, NULL), GP_ERR_INVALID_ARG,
                  "sequence id 4");
    GP_CHECK_FAIL(gp_engine_prefill_prefix(e, 1, MAX_CTX + 1, f->a, NULL, NULL, NULL), GP_ERR_STATE,
                  "max context is 512");
    gp_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse),
        cmocka_unit_test(test_partial),
        cmocka_unit_test(test_fragmented),
        cmocka_unit_test(test_files_and_eviction),
        cmocka_unit_test(test_offloaded),
        cmocka_unit_test(test_errors),
    };
    return GT_ENGINE_MAIN("engine_prefix", tests, setup, teardown, &g_dt);
}
