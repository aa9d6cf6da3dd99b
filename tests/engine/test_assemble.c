/* The one engine assembly (gp_assemble_engine): its argument checks and the
 * feature table's refusals before any device is touched; then, with a GPU,
 * the CUDA-graph decision it makes (graphs on resident weights, eager on
 * streamed ones, saying why), features that disagree with the weights, and
 * sparse projections on streamed weights assembled and stepped. Skips the
 * GPU part without one. */
#include "gp_test.h"

#include <string.h>

#include "gp_engine.h"
#include "gp_model.h"
#include "gp_pipeline.h"
#include "gp_sparse.h"

static void test_host_checks(void **state)
{
    (void)state;
    gp_assembly a;
    gp_engine_params ep = gp_engine_default_params();
    gp_feature_set f = {.cuda = true, .kv_vram_budget = 1 << 30, .vram_budget = 1 << 30};
    gp_assembly_params p = {.features = &f, .engine = &ep};
    GP_CHECK_FAIL(gp_assemble_engine(NULL, &p, &a), GP_ERR_UNSUPPORTED, "both cross the one host-to-device link");
    assert_null(a.engine);
    f = (gp_feature_set){.cuda = false};
    GP_CHECK_FAIL(gp_assemble_engine(NULL, &p, &a), GP_ERR_INVALID_ARG, "assembles the CUDA engine");
    f.cuda = true;
    GP_CHECK_FAIL(gp_assemble_engine(NULL, &p, &a), GP_ERR_INVALID_ARG, "the device weights are NULL");
    p.features = NULL;
    GP_CHECK_FAIL(gp_assemble_engine(NULL, &p, &a), GP_ERR_INVALID_ARG, "are required");
    GP_CHECK_FAIL(gp_assemble_engine(NULL, NULL, &a), GP_ERR_INVALID_ARG, "are required");
    GP_CHECK_FAIL(gp_assemble_engine(NULL, &p, NULL), GP_ERR_INVALID_ARG, "out is NULL");
    gp_assembly_close(NULL);
    gp_assembly_close(&a); /* a closed one */
}

static void test_device(void **state)
{
    (void)state;
    gp_model_source src;
    GP_CHECK_OK(gp_model_source_resolve("tiny", 0, &src));
    gp_device_weights *res = NULL, *str = NULL;
    GP_CHECK_OK(gp_device_weights_load(&src, GP_DTYPE_BF16, &res));
    gp_weights_stream_params sp = gp_weights_stream_default_params();
    sp.budget_bytes = 64u << 20;
    sp.min_window = 1;
    GP_CHECK_OK(gp_device_weights_streamed_load(&src, GP_DTYPE_BF16, &sp, &str));
    gp_engine_params ep = gp_engine_default_params();
    ep.max_batch = 2;
    ep.max_context = 32;
    gp_feature_set f = {.cuda = true, .graphs = true};
    gp_assembly_params p = {.features = &f, .engine = &ep};
    gp_assembly a;
    GP_CHECK_OK(gp_assemble_engine(res, &p, &a));
    assert_true(a.graphs);
    assert_non_null(a.engine);
    assert_non_null(a.exec);
    gp_assembly_close(&a);
    assert_null(a.engine);
    /* the features say resident, the weights are streamed */
    GP_CHECK_FAIL(gp_assemble_engine(str, &p, &a), GP_ERR_INVALID_ARG, "the device weights are streamed");
    /* streamed: eager, saying why; sparse projections on them step */
    const int n = src.cfg.n_layers * GP_SPARSE_PROJ_COUNT;
    float *t = malloc(sizeof(float) * (size_t)n);
    assert_non_null(t);
    for (int i = 0; i < n; i++)
        t[i] = 0.5f;
    f.vram_budget = sp.budget_bytes;
    f.sparsity = true;
    GP_CHECK_FAIL(gp_assemble_engine(str, &p, &a), GP_ERR_INVALID_ARG, "thresholds NULL");
    p.sparse_thresholds = t;
    GP_CHECK_OK(gp_assemble_engine(str, &p, &a));
    assert_false(a.graphs);
    assert_non_null(strstr(a.eager_why, "streamed weights move between steps"));
    assert_true(gp_engine_sparse_on(a.engine));
    const int32_t prompt[3] = {1, 2, 3};
    gp_prefill_seq ps = {.seq = 0, .n = 3, .tokens = prompt};
    int32_t next = -1;
    GP_CHECK_OK(gp_engine_prefill_batch(a.engine, 1, &ps, &next, NULL, NULL));
    const int ids[1] = {0};
    int32_t tok = next, out = -1;
    GP_CHECK_OK(gp_engine_decode_step(a.engine, 1, ids, &tok, &out, NULL));
    assert_true(out >= 0 && out < src.cfg.vocab);
    long active[64 * GP_SPARSE_PROJ_COUNT];
    assert_true(src.cfg.n_layers <= 64);
    GP_CHECK_OK(gp_engine_sparsity_stats(a.engine, active, 0));
    long sum = 0;
    for (int i = 0; i < n; i++)
        sum += active[i];
    assert_true(sum > 0); /* the sparse kernels ran on streamed weights */
    gp_assembly_close(&a);
    free(t);
    gp_device_weights_destroy(str);
    gp_device_weights_destroy(res);
}

int main(void)
{
    const struct CMUnitTest host[] = {cmocka_unit_test(test_host_checks)};
    const struct CMUnitTest device[] = {cmocka_unit_test(test_device)};
    int rc = cmocka_run_group_tests(host, NULL, NULL);
    if (rc != 0)
        return rc;
    if (gp_cuda_available() != GP_OK) {
        printf("engine_assemble: the device part SKIPPED: %s\n", gp_last_error());
        return 77;
    }
    return cmocka_run_group_tests(device, NULL, NULL);
}
