/* Weights beyond VRAM (issue #17): the sequential engine over streamed
 * weights (gp_device_weights_streamed) at a budget that forces evictions
 * every step, and at one that holds everything, against the same engine over
 * resident weights uploaded from the same host weights. Same kernels, same
 * bytes, so prefill logits (every prompt position) and several decode steps'
 * logits must be bitwise identical. Models: the tiny preset (synthetic),
 * small-gqa (GQA, sharded checkpoint) and qwen2-tiny (q/k/v biases, read
 * by RoPE + KV append from the attn group). Argument checks run without a
 * GPU; the rest exits 77 without one. */
#include "gp_test.h"

#include "gp_engine.h"
#include "gp_model.h"
#include "gp_pipeline.h"
#include "gp_streaming.h"

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
        {total - total / 4, 2, 1}, {total, 2, 0}, {total, 2, 1},
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
        if (runs[r].keep && runs[r].budget == total - total / 4)
            assert_true(ss.kept_groups > 0);
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
    bp.pipelined = true;
    GP_CHECK_FAIL(gp_backend_open_weights(&hw, &bp, &b), GP_ERR_INVALID_ARG, "pipelined");
    gp_host_weights_free(&hw);
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
    if (gp_model_source_resolve("tiny", 0, &src) != GP_OK || gp_backend_open(&src, &bp, &b) != GP_ERR_INVALID_ARG ||
        !strstr(gp_last_error(), "cuda backend only")) {
        fprintf(stderr, "engine_streamed: a VRAM budget on the cpu backend was not refused: %s\n", gp_last_error());
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
