/* gp_backend's parameters: what each backend kind accepts, refused with a
 * message before anything is loaded (no GPU needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "gp_engine.h"
#include "gp_pipeline.h"
#include "gp_test.h"

static gp_model_source g_src;

static int setup(void **state)
{
    return gp_model_source_resolve("tiny", 3, &g_src) == GP_OK ? 0 : -1;
}

/* prefill_chunk is the CUDA engine's: the CPU backend takes only 0, and a
 * value outside 0..GP_ENGINE_MAX_PREFILL_CHUNK is refused for either kind
 * before any device is looked for. */
static void test_prefill_chunk(void **state)
{
    gp_backend *b = (gp_backend *)&g_src; /* not NULL: a refusal must clear it */
    gp_backend_params p = gp_backend_default_params(GP_BACKEND_CPU);
    assert_int_equal(p.prefill_chunk, 0);
    p.prefill_chunk = 64;
    GP_CHECK_FAIL(gp_backend_open(&g_src, &p, &b), GP_ERR_INVALID_ARG,
                  "cpu backend: prefill_chunk 64 applies to the cuda backend only");
    assert_null(b);
    printf("cpu backend, prefill_chunk 64: %s\n", gp_last_error());
    p.prefill_chunk = -1;
    GP_CHECK_FAIL(gp_backend_open(&g_src, &p, &b), GP_ERR_INVALID_ARG,
                  "prefill_chunk -1: allowed 0 (the engine's default) or 1..");
    gp_backend_params c = gp_backend_default_params(GP_BACKEND_CUDA);
    assert_int_equal(c.prefill_chunk, 0);
    c.prefill_chunk = GP_ENGINE_MAX_PREFILL_CHUNK + 1;
    char want[96];
    snprintf(want, sizeof want, "prefill_chunk %d: allowed 0 (the engine's default) or 1..%d",
             GP_ENGINE_MAX_PREFILL_CHUNK + 1, GP_ENGINE_MAX_PREFILL_CHUNK);
    GP_CHECK_FAIL(gp_backend_open(&g_src, &c, &b), GP_ERR_INVALID_ARG, want);

    /* 0 opens the CPU backend, whose prefill op then serves a batch */
    p.prefill_chunk = 0;
    p.n_seqs = 2;
    p.max_context = 16;
    GP_CHECK_OK(gp_backend_open(&g_src, &p, &b));
    gp_exec x = gp_backend_exec(b);
    const int32_t a[3] = {1, 2, 3}, z[1] = {9};
    gp_prefill_seq seqs[2] = {{.seq = 1, .n = 3, .tokens = a}, {.seq = 0, .n = 1, .tokens = z}};
    int32_t next[2];
    GP_CHECK_OK(x.ops->prefill(x.ctx, 2, seqs, next, NULL, NULL));
    gp_backend_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_chunk),
    };
    return cmocka_run_group_tests_name("backend params", tests, setup, NULL) ? 1 : 0;
}
