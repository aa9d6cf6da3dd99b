/* Weights beyond VRAM: the sequential engine over streamed
 * weights (gp_device_weights_streamed) at a budget that forces evictions
 * every step, and at one that holds everything, against the same engine over
 * resident weights uploaded from the same host weights. Same kernels, same
 * bytes, so prefill logits (every prompt position) and several decode steps'
 * logits must be bitwise identical. Models: the tiny preset (synthetic),
 * small-gqa (GQA, sharded checkpoint) and qwen2-tiny (q/k/v biases, read
 * by RoPE + KV append from the attn group). gp_device_weights_streamed_load
 * (the pinned copy filled from the source, no host copy of the model) gives
 * bitwise the logits of the resident weights of the same source: the tiny
 * preset in bf16 and fp16, checkpoints in fp32, fp16 and bf16 converted to
 * fp16, sharded, with biases. Argument checks run without a GPU; the rest
 * exits 77 without one. */
#include "gp_test.h"

#include "gp_device.h"
#include "gp_engine.h"
#include "gp_green.h"
#include "gp_model.h"
#include "gp_pipeline.h"
#include "gp_stage.h"
#include "gp_streaming.h"
#include "gp_weights.h"

#define MAX_B 3
#define CTX 64
#define DECODE_STEPS 5

static void load_host(const char *spec, gp_host_weights *hw)
{
    memset(hw, 0, sizeof *hw);
    gp_model_source src;
    GP_CHECK_OK(gp_model_source_resolve(spec, 0, &src));
    if (src.synthetic) { /* BF16 on the host, as the engine's dtype */
        GP_CHECK_OK(gp_host_weights_alloc(&src.cfg, GP_DTYPE_BF16, hw));
        GP_CHECK_OK(gp_synth_fill_host(hw, 7));
    } else {
        GP_CHECK_OK(gp_model_source_load_host(&src, hw));
    }
}

static gp_engine *make_engine(gp_device_weights *dw)
{
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = MAX_B;
    p.max_context = CTX;
    p.use_graphs = false;
    p.prefill_chunk = 16; /* the 3 prompts below take two chunks */
    gp_engine *e = NULL;
    GP_CHECK_OK(gp_engine_create(dw, &p, &e));
    return e;
}

/* Prefill three prompts and decode DECODE_STEPS steps on both engines;
 * every logit the same bits. */
static void run_same(gp_engine *ref, gp_engine *str, int vocab, const char *what)
{
    int32_t p0[11], p1[5], p2[3];
    for (int i = 0; i < 11; i++)
        p0[i] = (int32_t)((7 * i + 3) % vocab);
    for (int i = 0; i < 5; i++)
        p1[i] = (int32_t)((13 * i + 1) % vocab);
    for (int i = 0; i < 3; i++)
        p2[i] = (int32_t)((5 * i + 11) % vocab);
    const gp_prefill_seq seqs[MAX_B] = {{0, 11, p0}, {1, 5, p1}, {2, 3, p2}};
    const size_t n_pos = 11 + 5 + 3, V = (size_t)vocab;
    float *la = malloc(sizeof(float) * n_pos * V), *lb = malloc(sizeof(float) * n_pos * V);
    assert_non_null(la);
    assert_non_null(lb);
    int32_t na[MAX_B], nb[MAX_B];
    GP_CHECK_OK(gp_engine_prefill_batch(ref, MAX_B, seqs, na, NULL, la));
    GP_CHECK_OK(gp_engine_prefill_batch(str, MAX_B, seqs, nb, NULL, lb));
    if (memcmp(la, lb, sizeof(float) * n_pos * V) != 0) {
        size_t i = 0;
        while (la[i] == lb[i] && i < n_pos * V)
            i++;
        fail_msg("%s: prefill logits differ first at position %zu, token %zu: %.9g resident, %.9g streamed", what,
                 i / V, i % V, la[i], lb[i]);
    }
    assert_memory_equal(na, nb, sizeof na);
    const int ids[MAX_B] = {0, 1, 2};
    for (int s = 0; s < DECODE_STEPS; s++) {
        int B = s == 2 ? 2 : MAX_B; /* a smaller batch in between: another GEMM shape */
        GP_CHECK_OK(gp_engine_decode_step(ref, B, ids, na, na, la));
        GP_CHECK_OK(gp_engine_decode_step(str, B, ids, nb, nb, lb));
        if (memcmp(la, lb, sizeof(float) * (size_t)B * V) != 0)
            fail_msg("%s: decode step %d (batch %d): logits differ between resident and streamed weights", what, s,
                     B);
        assert_memory_equal(na, nb, sizeof(int32_t) * (size_t)B);
    }
    free(la);
    free(lb);
}

/* Sequential steps' streaming params (window 1). */
static gp_weights_stream_params seq_params(uint64_t budget, int depth, int keep)
{
    gp_weights_stream_params sp = gp_weights_stream_default_params();
    sp.budget_bytes = budget;
    sp.prefetch_depth = depth;
    sp.min_window = gp_weights_stream_window(NULL, 0);
    sp.keep_resident = keep;
    return sp;
}

/* A pointer to seq_params' value, for calls. */
#define SEQ(budget, depth, keep) ((gp_weights_stream_params[]){seq_params(budget, depth, keep)})

/* The least budget gp_device_weights_streamed accepts (bisection: it checks
 * the budget against the minimum working set before touching the device's
 * slots), so that run streams with the most evictions. */
static uint64_t min_budget(const gp_host_weights *hw)
{
    uint64_t lo = 1, hi = hw->arena_bytes * 4 + (1u << 20); /* lo fails, hi succeeds */
    gp_device_weights *dw = NULL;
    GP_CHECK_FAIL(gp_device_weights_streamed(hw, GP_DTYPE_BF16, SEQ(lo, 1, 1), &dw), GP_ERR_INVALID_ARG,
                  "below the minimum working set");
    GP_CHECK_OK(gp_device_weights_streamed(hw, GP_DTYPE_BF16, SEQ(hi, 1, 1), &dw));
    gp_device_weights_destroy(dw);
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        gp_status st = gp_device_weights_streamed(hw, GP_DTYPE_BF16, SEQ(mid, 1, 1), &dw);
        if (st == GP_OK) {
            gp_device_weights_destroy(dw);
            hi = mid;
        } else {
            assert_int_equal(st, GP_ERR_INVALID_ARG);
            lo = mid;
        }
    }
    return hi;
}

static void check_model(const char *spec)
{
    gp_host_weights hw;
    load_host(spec, &hw);
    const int vocab = hw.cfg.vocab;
    gp_device_weights *res = NULL;
    GP_CHECK_OK(gp_device_weights_upload(&hw, GP_DTYPE_BF16, &res));
    const uint64_t total = gp_device_weights_view(res)->arena_bytes;
    const uint64_t least = min_budget(&hw);
    assert_true(least < total); /* the least budget streams: the whole model does not fit */
    uint64_t checked = 0; /* the check before any weight is read names the same least budget */
    GP_CHECK_OK(gp_weights_stream_check(&hw.cfg, SEQ(least, 1, 1), &checked));
    assert_true(checked == least);
    printf("%s: %llu weight bytes on the device when resident; least budget %llu\n", spec,
           (unsigned long long)total, (unsigned long long)least);
    /* keep 0: LRU over every layer group; keep 1 keeps what the reserve leaves */
    const struct { uint64_t budget; int depth, keep; } runs[] = {
        {least, 0, 1}, {least, 2, 0}, {least + least / 2, 1, 0}, {least + least / 2, 1, 1},
        {total - 1, 2, 1}, {total, 2, 0}, {total, 2, 1},
    };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        char what[160];
        snprintf(what, sizeof what, "%s, budget %llu, prefetch %d, keep %d", spec,
                 (unsigned long long)runs[r].budget, runs[r].depth, runs[r].keep);
        gp_device_weights *dw = NULL;
        gp_weights_stream_params sp = seq_params(runs[r].budget, runs[r].depth, runs[r].keep);
        GP_CHECK_OK(gp_device_weights_streamed(&hw, GP_DTYPE_BF16, &sp, &dw));
        assert_true(gp_device_weights_is_streamed(dw));
        assert_false(gp_device_weights_is_streamed(res));
        assert_true(gp_device_weights_budget(dw) == runs[r].budget);
        /* graphs would bake one step's addresses: refused, not silently run */
        gp_engine_params gp = gp_engine_default_params();
        gp.max_batch = MAX_B;
        gp.max_context = CTX;
        gp.use_graphs = true;
        gp_engine *bad = NULL;
        GP_CHECK_FAIL(gp_engine_create(dw, &gp, &bad), GP_ERR_INVALID_ARG, "use_graphs");
        gp_engine *ref = make_engine(res), *str = make_engine(dw);
        gp_streamer_stats ss;
        GP_CHECK_OK(gp_device_weights_stream_stats(dw, &ss, 1));
        run_same(ref, str, vocab, what);
        GP_CHECK_OK(gp_device_weights_stream_stats(dw, &ss, 0));
        printf("%s: %llu loads, %.3f MB streamed, %llu hits, %llu misses, %llu prefetches, %llu evictions, "
               "peak %llu bytes, %d groups kept\n", what, (unsigned long long)ss.loads, ss.bytes_streamed / 1e6,
               (unsigned long long)ss.hits, (unsigned long long)ss.misses, (unsigned long long)ss.prefetches,
               (unsigned long long)ss.evictions, (unsigned long long)ss.peak_device_bytes, ss.kept_groups);
        assert_true(ss.peak_device_bytes <= runs[r].budget);
        if (runs[r].budget == least)
            assert_true(ss.evictions > 0); /* the point of the small budget */
        if (runs[r].budget >= total)
            assert_true(ss.evictions == 0);
        if (runs[r].budget >= total && runs[r].keep)
            assert_true(ss.bytes_streamed == 0); /* everything kept at create */

        gp_engine_destroy(str);
        gp_engine_destroy(ref);
        gp_device_weights_destroy(dw);
    }
    GP_CHECK_FAIL(gp_device_weights_stream_stats(res, &(gp_streamer_stats){0}, 0), GP_ERR_STATE, "resident");
    gp_device_weights_destroy(res);
    gp_host_weights_free(&hw);
}

static void test_tiny(void **state)
{
    (void)state;
    check_model("tiny");
}

static void test_small_gqa(void **state)
{
    (void)state;
    check_model(GP_TEST_DATA_DIR "/small-gqa");
}

static void test_qwen2_bias(void **state)
{
    (void)state;
    check_model(GP_TEST_DATA_DIR "/qwen2-tiny");
}

/* gp_device_weights_streamed_load fills the pinned copy straight from the
 * source (a preset by the device generator through a staging buffer, a
 * checkpoint from its mapping, converted per tensor): bitwise the logits of
 * the resident weights gp_device_weights_load makes of the same source, at
 * the least budget (evictions every step) and at the whole model. A refusal
 * after the staging buffer was taken (a budget below the minimum working
 * set) leaves no buffer behind. */
static void check_streamed_load(const char *spec, gp_dtype dtype)
{
    gp_model_source src;
    GP_CHECK_OK(gp_model_source_resolve(spec, 7, &src));
    gp_device_weights *res = NULL;
    GP_CHECK_OK(gp_device_weights_load(&src, dtype, &res));
    const uint64_t total = gp_device_weights_view(res)->arena_bytes;
    gp_host_weights hw; /* for the least budget, which depends on the shapes only */
    load_host(spec, &hw);
    const uint64_t least = min_budget(&hw);
    gp_host_weights_free(&hw);
    const long live = gp_device_alloc_live();
    gp_device_weights *dw = NULL;
    GP_CHECK_FAIL(gp_device_weights_streamed_load(&src, dtype, SEQ(least - 1, 1, 1), &dw), GP_ERR_INVALID_ARG,
                  "below the minimum working set");
    assert_null(dw);
    assert_int_equal(gp_device_alloc_live(), live);
    const struct { uint64_t budget; int depth, keep; } runs[] = { {least, 0, 1}, {least, 2, 0}, {total, 2, 1} };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        char what[256];
        snprintf(what, sizeof what, "%s loaded streamed (%s), budget %llu, prefetch %d, keep %d", spec,
                 gp_dtype_name(gp_device_weights_dtype(res)), (unsigned long long)runs[r].budget, runs[r].depth,
                 runs[r].keep);
        gp_weights_stream_params sp = seq_params(runs[r].budget, runs[r].depth, runs[r].keep);
        GP_CHECK_OK(gp_device_weights_streamed_load(&src, dtype, &sp, &dw));
        assert_true(gp_device_weights_is_streamed(dw));
        assert_int_equal(gp_device_weights_dtype(dw), gp_device_weights_dtype(res));
        gp_engine *ref = make_engine(res), *str = make_engine(dw);
        gp_streamer_stats ss;
        GP_CHECK_OK(gp_device_weights_stream_stats(dw, &ss, 1));
        run_same(ref, str, src.cfg.vocab, what);
        GP_CHECK_OK(gp_device_weights_stream_stats(dw, &ss, 0));
        assert_true(ss.peak_device_bytes <= runs[r].budget);
        if (runs[r].budget == least)
            assert_true(ss.evictions > 0);
        gp_engine_destroy(str);
        gp_engine_destroy(ref);
        gp_device_weights_destroy(dw);
    }
    gp_device_weights_destroy(res);
}

static void test_streamed_load_synthetic(void **state)
{
    (void)state;
    check_streamed_load("tiny", GP_DTYPE_AUTO); /* bf16 */
    check_streamed_load("tiny", GP_DTYPE_F16);
}

static void test_streamed_load_checkpoint(void **state)
{
    (void)state;
    check_streamed_load(GP_TEST_DATA_DIR "/tiny-fp32", GP_DTYPE_AUTO);  /* converted to bf16 per tensor */
    check_streamed_load(GP_TEST_DATA_DIR "/tiny-fp16", GP_DTYPE_AUTO);  /* fp16 as stored */
    check_streamed_load(GP_TEST_DATA_DIR "/tiny", GP_DTYPE_F16);        /* bf16 converted to fp16 */
    check_streamed_load(GP_TEST_DATA_DIR "/small-gqa", GP_DTYPE_AUTO);  /* sharded */
    check_streamed_load(GP_TEST_DATA_DIR "/qwen2-tiny", GP_DTYPE_AUTO); /* q/k/v biases */
}

/* A budget above the device's free memory, and the backend's refusals and
 * status line. */
static void test_budget_and_backend(void **state)
{
    (void)state;
    gp_host_weights hw;
    load_host("tiny", &hw);
    gp_device_weights *dw = NULL;
    GP_CHECK_FAIL(gp_device_weights_streamed(&hw, GP_DTYPE_BF16, SEQ((uint64_t)1 << 60, 1, 1), &dw), GP_ERR_DEVICE_MEMORY,
                  "more than the device has free");
    gp_backend_params bp = gp_backend_default_params(GP_BACKEND_CUDA);
    bp.max_context = hw.cfg.max_context; /* tiny holds 256 positions, under the default */
    bp.vram_budget = (uint64_t)64 << 20;
    gp_backend *b = NULL;
    GP_CHECK_OK(gp_backend_open_weights(&hw, &bp, &b));
    if (!strstr(gp_backend_describe(b), "eager (streamed weights)"))
        fail_msg("describe '%s' does not say the steps run eager over streamed weights", gp_backend_describe(b));
    gp_backend_close(b);
    bp.pipelined = true; /* the A/F split over streamed weights */
    GP_CHECK_OK(gp_backend_open_weights(&hw, &bp, &b));
    if (!strstr(gp_backend_describe(b), "pipelined"))
        fail_msg("describe '%s' does not name the pipelined steps", gp_backend_describe(b));
    gp_backend_close(b);
    gp_host_weights_free(&hw);
}

/* Pipelined steps (the A/F split, both placements, M = 2) over streamed
 * weights: the same logits, bit for bit, as over resident weights, with the
 * A and F threads acquiring groups at once. */
static void run_pipelined(gp_device_weights *dw, gp_green_pool *pool, gp_placement place, int vocab, float *logits)
{
    gp_engine *e = make_engine(dw);
    gp_cuda_exec *x = NULL;
    GP_CHECK_OK(gp_cuda_exec_create(e, pool, false, &x));
    GP_CHECK_OK(gp_cuda_exec_set_placement(x, place));
    gp_exec ex = gp_cuda_exec_get(x);
    int32_t p0[7], p1[4], p2[9];
    for (int i = 0; i < 9; i++) {
        p2[i] = (int32_t)((11 * i + 2) % vocab);
        if (i < 7)
            p0[i] = (int32_t)((3 * i + 5) % vocab);
        if (i < 4)
            p1[i] = (int32_t)((17 * i + 1) % vocab);
    }
    const gp_prefill_seq seqs[MAX_B] = {{0, 7, p0}, {1, 4, p1}, {2, 9, p2}};
    int32_t next[MAX_B];
    GP_CHECK_OK(ex.session->prefill(ex.ctx, MAX_B, seqs, next, NULL, NULL));
    gp_pipeline *pl = NULL;
    GP_CHECK_OK(gp_pipeline_create(ex, gp_engine_config(e)->n_layers, NULL, &pl));
    const int ids[MAX_B] = {0, 1, 2};
    for (int s = 0; s < DECODE_STEPS; s++)
        GP_CHECK_OK(gp_pipeline_step(pl, MAX_B, ids, next, next, logits + (size_t)s * MAX_B * vocab));
    gp_pipeline_destroy(pl);
    gp_cuda_exec_destroy(x);
    gp_engine_destroy(e);
}

static void check_pipelined(const char *spec)
{
    gp_host_weights hw;
    load_host(spec, &hw);
    const int V = hw.cfg.vocab;
    gp_green_pool_params pp = gp_green_pool_default_params();
    gp_split_req req = {8, GP_SPLIT_REST};
    pp.splits = &req;
    pp.n_splits = 1;
    gp_green_pool *pool = NULL;
    GP_CHECK_OK(gp_green_pool_create(&pp, &pool));
    gp_device_weights *res = NULL;
    GP_CHECK_OK(gp_device_weights_upload(&hw, GP_DTYPE_BF16, &res));
    const uint64_t total = gp_device_weights_view(res)->arena_bytes;
    const size_t n = (size_t)DECODE_STEPS * MAX_B * V;
    float *ref = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    assert_non_null(ref);
    assert_non_null(got);
    /* the window of pipelined steps: smaller budgets are refused */
    gp_weights_stream_params sp = gp_weights_stream_default_params();
    sp.min_window = gp_weights_stream_window(&hw.cfg, 1);
    uint64_t lo = 1, hi = total;
    gp_device_weights *dw = NULL;
    while (hi - lo > 1) {
        sp.budget_bytes = lo + (hi - lo) / 2;
        if (gp_device_weights_streamed(&hw, GP_DTYPE_BF16, &sp, &dw) == GP_OK) {
            gp_device_weights_destroy(dw);
            hi = sp.budget_bytes;
        } else {
            lo = sp.budget_bytes;
        }
    }
    for (int place = 0; place < 2; place++) {
        run_pipelined(res, pool, (gp_placement)place, V, ref);
        const struct { uint64_t budget; int keep; } runs[] = {{hi, 1}, {hi + hi / 2, 0}, {hi + hi / 2, 1}};
        for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
            sp.budget_bytes = runs[r].budget;
            sp.keep_resident = runs[r].keep;
            GP_CHECK_OK(gp_device_weights_streamed(&hw, GP_DTYPE_BF16, &sp, &dw));
            memset(got, 0xff, sizeof(float) * n); /* poisoned: NaN */
            run_pipelined(dw, pool, (gp_placement)place, V, got);
            gp_streamer_stats ss;
            GP_CHECK_OK(gp_device_weights_stream_stats(dw, &ss, 0));
            printf("%s pipelined %s, budget %llu (least %llu), keep %d: %.3f MB streamed, %llu evictions, peak %llu, "
                   "%d kept\n", spec, gp_placement_name((gp_placement)place), (unsigned long long)runs[r].budget,
                   (unsigned long long)hi, runs[r].keep, ss.bytes_streamed / 1e6, (unsigned long long)ss.evictions,
                   (unsigned long long)ss.peak_device_bytes, ss.kept_groups);
            assert_true(ss.peak_device_bytes <= runs[r].budget);
            if (memcmp(ref, got, sizeof(float) * n) != 0)
                fail_msg("%s pipelined %s, budget %llu, keep %d: logits differ from resident weights", spec,
                         gp_placement_name((gp_placement)place), (unsigned long long)runs[r].budget, runs[r].keep);
            gp_device_weights_destroy(dw);
        }
    }
    /* weights made for sequential steps (window 1) are refused by the pipelined executor */
    sp.min_window = 1;
    sp.budget_bytes = total;
    GP_CHECK_OK(gp_device_weights_streamed(&hw, GP_DTYPE_BF16, &sp, &dw));
    gp_engine *e = make_engine(dw);
    gp_cuda_exec *x = NULL;
    GP_CHECK_FAIL(gp_cuda_exec_create(e, pool, false, &x), GP_ERR_INVALID_ARG, "pipelined steps hold up to");
    gp_engine_destroy(e);
    gp_device_weights_destroy(dw);
    free(ref);
    free(got);
    gp_device_weights_destroy(res);
    gp_green_pool_destroy(pool);
    gp_host_weights_free(&hw);
}

static void test_pipelined(void **state)
{
    (void)state;
    check_pipelined("tiny");
    check_pipelined(GP_TEST_DATA_DIR "/qwen2-tiny");
}

/* gp_weights_stream_check: the budget refused before any weight is read or
 * any GPU looked at, with create's message; the least budget grows with the
 * window a step holds. */
static void test_stream_check(void **state)
{
    (void)state;
    gp_config cfg;
    GP_CHECK_OK(gp_config_preset("tiny", &cfg));
    uint64_t least = 0, least_pipe = 0;
    GP_CHECK_FAIL(gp_weights_stream_check(&cfg, SEQ(1, 1, 1), &least), GP_ERR_INVALID_ARG,
                  "through a VRAM budget of 1 bytes");
    const char *msg = gp_last_error();
    if (!strstr(msg, "below the minimum working set") || !strstr(msg, "pinned: head (") || !strstr(msg, "ffn 0 ("))
        fail_msg("the refusal does not name the groups: %s", msg);
    assert_true(least > 1);
    GP_CHECK_OK(gp_weights_stream_check(&cfg, SEQ(least, 1, 1), NULL));
    GP_CHECK_FAIL(gp_weights_stream_check(&cfg, SEQ(least - 1, 1, 1), NULL), GP_ERR_INVALID_ARG, "below");
    gp_weights_stream_params sp = seq_params(least, 2, 1);
    sp.min_window = gp_weights_stream_window(&cfg, 1);
    GP_CHECK_FAIL(gp_weights_stream_check(&cfg, &sp, &least_pipe), GP_ERR_INVALID_ARG, "below");
    assert_true(least_pipe > least); /* attn l, ffn l and attn l + 1 at once */
    sp.budget_bytes = least_pipe;
    GP_CHECK_OK(gp_weights_stream_check(&cfg, &sp, NULL));
    /* on-demand ffn groups still need their room when acquired: the same least budget */
    uint64_t least_od = 0;
    sp.ffn_on_demand = 1;
    GP_CHECK_OK(gp_weights_stream_check(&cfg, &sp, &least_od));
    assert_int_equal(least_od, least_pipe);
    sp.ffn_on_demand = 2;
    GP_CHECK_FAIL(gp_weights_stream_check(&cfg, &sp, NULL), GP_ERR_INVALID_ARG, "ffn_on_demand 2 (0 or 1)");
    sp.ffn_on_demand = 0;
    sp.min_window = 0;
    GP_CHECK_FAIL(gp_weights_stream_check(&cfg, &sp, NULL), GP_ERR_INVALID_ARG, "window 0 (>= 1)");
    GP_CHECK_FAIL(gp_weights_stream_check(&cfg, NULL, NULL), GP_ERR_INVALID_ARG, "params NULL");
    GP_CHECK_FAIL(gp_weights_stream_check(NULL, &sp, NULL), GP_ERR_INVALID_ARG, "cfg is NULL");
}

int main(void)
{
    const struct CMUnitTest host_tests[] = {
        cmocka_unit_test(test_stream_check),
    };
    if (cmocka_run_group_tests_name("engine_streamed (host)", host_tests, NULL, NULL))
        return 1;
    /* host-side argument checks first: they need no GPU */
    gp_device_weights *dw = NULL;
    if (gp_device_weights_streamed(NULL, GP_DTYPE_BF16, SEQ(1, 1, 1), &dw) != GP_ERR_INVALID_ARG) {
        fprintf(stderr, "engine_streamed: NULL host weights accepted\n");
        return 1;
    }
    gp_backend_params bp = gp_backend_default_params(GP_BACKEND_CPU);
    bp.vram_budget = 1 << 20;
    gp_model_source src;
    gp_backend *b = NULL;
    if (gp_model_source_resolve("tiny", 0, &src) != GP_OK || gp_backend_open(&src, &bp, &b) != GP_ERR_UNSUPPORTED ||
        !strstr(gp_last_error(), "the cpu backend (--backend cpu) with streamed weights")) {
        fprintf(stderr, "engine_streamed: a VRAM budget on the cpu backend was not refused: %s\n", gp_last_error());
        return 1;
    }
    /* streamed_load's argument checks come before the GPU's */
    static const char *const specs[] = {"tiny", GP_TEST_DATA_DIR "/tiny-fp32"};
    for (int i = 0; i < 2; i++) {
        if (gp_model_source_resolve(specs[i], 0, &src) != GP_OK ||
            gp_device_weights_streamed_load(&src, GP_DTYPE_BF16, NULL, &dw) != GP_ERR_INVALID_ARG ||
            !strstr(gp_last_error(), "params NULL") ||
            gp_device_weights_streamed_load(&src, GP_DTYPE_F32, SEQ(1, 1, 1), &dw) != GP_ERR_INVALID_ARG ||
            !strstr(gp_last_error(), "dtype F32") || dw) {
            fprintf(stderr, "engine_streamed: streamed_load of %s: a NULL params or an F32 dtype not refused: %s\n",
                    specs[i], gp_last_error());
            return 1;
        }
    }
    if (gp_device_weights_streamed_load(NULL, GP_DTYPE_BF16, SEQ(1, 1, 1), &dw) != GP_ERR_INVALID_ARG) {
        fprintf(stderr, "engine_streamed: streamed_load of a NULL source accepted\n");
        return 1;
    }
    if (gp_cuda_available() != GP_OK) {
        printf("engine_streamed: SKIPPED: %s\n", gp_last_error());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_small_gqa),
        cmocka_unit_test(test_qwen2_bias),
        cmocka_unit_test(test_budget_and_backend),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_streamed_load_synthetic),
        cmocka_unit_test(test_streamed_load_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
