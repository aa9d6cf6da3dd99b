/* The feature table walked: every rule refuses the smallest set that breaks
 * it, naming both features and its reason; every pair of features is either
 * allowed or refused with a reason; the combinations that must work are
 * allowed; the CUDA-graph decision. No GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "gp_engine.h"
#include "gp_test.h"

/* Turns feature k on in f (the backend bits pick the backend). */
static void add(gp_feature_set *f, gp_feature k)
{
    switch (k) {
    case GP_FEAT_CPU: f->cuda = false; break;
    case GP_FEAT_CUDA: f->cuda = true; break;
    case GP_FEAT_PIPELINED: f->pipelined = true; break;
    case GP_FEAT_PIPE_SHAPE: f->pipe_shape = true; break;
    case GP_FEAT_PREFILL_CHUNK: f->prefill_chunk = true; break;
    case GP_FEAT_STREAMED: f->vram_budget = 8ull << 30; break;
    case GP_FEAT_KV_OFFLOAD: f->kv_vram_budget = 1ull << 30; break;
    case GP_FEAT_KV_STORE: f->kv_store_bytes = 1ull << 30; break;
    case GP_FEAT_SPARSITY: f->sparsity = true; break;
    case GP_FEAT_SPARSITY_STATS: f->sparsity_stats = true; break;
    case GP_FEAT_SPARSE_ALWAYS: f->sparse_always = true; break;
    case GP_FEAT_CPU_FFN: f->cpu_ffn_budget = 1ull << 20; break;
    case GP_FEAT_CPU_FFN_THREADS: f->cpu_ffn_threads = true; break;
    case GP_FEAT_CPU_THREADS: f->cpu_threads = true; break;
    case GP_FEAT_PROMPT_LOGITS: f->prompt_logits = true; break;
    case GP_FEAT_PREFIX_CACHE: f->prefix_cache = true; break;
    case GP_FEAT_PD_LANES: f->pd_lanes = true; break;
    case GP_FEAT_TP: f->tp = true; break;
    case GP_FEAT_TP_PEER: f->tp_peer = true; break;
    case GP_FEAT_AFD: f->afd = true; break;
    default: fail_msg("feature %d has no field in this test", (int)k);
    }
}

/* a and b, on the backend either names (else the CUDA engine), with what
 * each of them needs, except `except` (the requirement under test). */
static gp_feature_set set_of(gp_feature a, gp_feature b, gp_feature except)
{
    const gp_feature_rule *r;
    const int n = gp_feature_rules(&r);
    gp_feature_set f = {.cuda = true};
    for (int pass = 0; pass < 3; pass++) /* requirements of requirements */
        for (int i = 0; i < n; i++) {
            uint32_t m = gp_features_mask(&f) | (1u << a) | (1u << b);
            if (r[i].needs && (m & (1u << r[i].a)) && r[i].b != except)
                add(&f, r[i].b);
        }
    add(&f, a);
    if ((int)b >= 0)
        add(&f, b);
    return f;
}

static void test_every_rule_refuses_with_its_reason(void **state)
{
    (void)state;
    const gp_feature_rule *r;
    const int n = gp_feature_rules(&r);
    assert_true(n > 0);
    for (int i = 0; i < n; i++) {
        assert_non_null(r[i].why);
        assert_true(strlen(r[i].why) > 20);
        assert_string_not_equal(gp_feature_name(r[i].a), "?");
        assert_string_not_equal(gp_feature_name(r[i].b), "?");
        gp_feature_set f = r[i].needs ? set_of(r[i].a, r[i].a, r[i].b) : set_of(r[i].a, r[i].b, GP_FEAT_COUNT);
        GP_CHECK_FAIL(gp_features_check(&f), GP_ERR_UNSUPPORTED, r[i].why);
        const char *msg = gp_last_error();
        assert_non_null(strstr(msg, gp_feature_name(r[i].a)));
        assert_non_null(strstr(msg, gp_feature_name(r[i].b)));
        printf("refused: %s\n", msg);
    }
}

/* Every pair (with what each needs): allowed, or refused naming a reason of
 * the table. */
static void test_every_pair_is_decided(void **state)
{
    (void)state;
    const gp_feature_rule *r;
    const int n = gp_feature_rules(&r);
    int allowed = 0, refused = 0;
    for (int a = 0; a < GP_FEAT_COUNT; a++)
        for (int b = a + 1; b < GP_FEAT_COUNT; b++) {
            if (a == GP_FEAT_CPU && b == GP_FEAT_CUDA)
                continue; /* one backend */
            gp_feature_set f = set_of((gp_feature)a, (gp_feature)b, GP_FEAT_COUNT);
            gp_status st = gp_features_check(&f);
            if (st == GP_OK) {
                allowed++;
                continue;
            }
            assert_int_equal(st, GP_ERR_UNSUPPORTED);
            bool found = false;
            for (int i = 0; i < n && !found; i++)
                found = strstr(gp_last_error(), r[i].why) != NULL;
            if (!found)
                fail_msg("%s and %s: refused without a reason of the table: %s", gp_feature_name((gp_feature)a),
                         gp_feature_name((gp_feature)b), gp_last_error());
            refused++;
        }
    printf("%d pairs allowed, %d refused\n", allowed, refused);
    assert_true(allowed > 0 && refused > 0);
}

/* What must work: stored prefixes with an offloaded KV cache, sparse
 * projections on streamed weights (with their statistics, and beside the
 * CPU-assisted FFN within the budget). */
static void test_required_combinations(void **state)
{
    (void)state;
    gp_feature_set f = {.cuda = true, .kv_store_bytes = 1ull << 30, .kv_vram_budget = 1ull << 30};
    GP_CHECK_OK(gp_features_check(&f));
    f = (gp_feature_set){.cuda = true, .sparsity = true, .vram_budget = 8ull << 30};
    GP_CHECK_OK(gp_features_check(&f));
    f.sparsity_stats = true;
    GP_CHECK_OK(gp_features_check(&f));
    f.cpu_ffn_budget = 1ull << 30;
    GP_CHECK_OK(gp_features_check(&f));
    f = (gp_feature_set){.cuda = true, .pipelined = true, .pipe_shape = true, .sparsity = true,
                         .vram_budget = 8ull << 30, .kv_store_bytes = 1ull << 30};
    GP_CHECK_OK(gp_features_check(&f));
    f = (gp_feature_set){.cuda = false, .pipelined = true, .pipe_shape = true, .sparsity = true,
                         .cpu_threads = true, .prompt_logits = true};
    GP_CHECK_OK(gp_features_check(&f));
}

/* The CPU-assisted FFN's cache against the VRAM budget, with the bytes. */
static void test_cpu_ffn_within_budget(void **state)
{
    (void)state;
    gp_feature_set f = {.cuda = true, .sparsity = true, .cpu_ffn_budget = 1 << 20, .vram_budget = 1 << 20};
    GP_CHECK_FAIL(gp_features_check(&f), GP_ERR_UNSUPPORTED, "of 1048576 bytes within streamed weights");
    f.vram_budget = (1 << 20) + 1;
    GP_CHECK_OK(gp_features_check(&f));
    GP_CHECK_FAIL(gp_features_check(NULL), GP_ERR_INVALID_ARG, "NULL");
}

static void test_graphs(void **state)
{
    (void)state;
    const char *why = NULL;
    gp_feature_set f = {.cuda = true, .graphs = true};
    assert_true(gp_features_graphs(&f, &why));
    assert_string_equal(why, "");
    f.sparsity = true;
    f.kv_store_bytes = f.cpu_ffn_budget = 1;
    assert_true(gp_features_graphs(&f, NULL));
    f.vram_budget = 1;
    assert_false(gp_features_graphs(&f, &why));
    assert_non_null(strstr(why, "streamed weights move between steps"));
    f.vram_budget = 0;
    f.kv_vram_budget = 1;
    assert_false(gp_features_graphs(&f, &why));
    assert_non_null(strstr(why, "offloaded KV"));
    f = (gp_feature_set){.cuda = true, .graphs = false};
    assert_false(gp_features_graphs(&f, &why));
    assert_string_equal(why, "");
    f = (gp_feature_set){.cuda = false, .graphs = true};
    assert_false(gp_features_graphs(&f, &why));
    assert_false(gp_features_graphs(NULL, &why));
    assert_string_equal(gp_feature_name(GP_FEAT_COUNT), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_rule_refuses_with_its_reason),
        cmocka_unit_test(test_every_pair_is_decided),
        cmocka_unit_test(test_required_combinations),
        cmocka_unit_test(test_cpu_ffn_within_budget),
        cmocka_unit_test(test_graphs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
