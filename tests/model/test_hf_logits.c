/* The CPU reference against HF transformers: checkpoints and logits made by
 * tests/hf/make_reference.py, loaded through the real checkpoint path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <unistd.h>

#include "hf_case.h"

/* The reference in bf16-activation mode rounds where the CUDA engine does;
 * against HF's float32 it is held to HF_BF16_DRIFT_TOL (hf_case.h) with
 * near-tie greedy flips reported, not required. The GPU engine is held to
 * the bf16 mode tightly and to HF within that bound (tests/engine). */
static void test_hf_tiny(void **state) { hf_run_dataset("tiny", HF_F32_TOL, &hf_cpu_backend); }
static void test_hf_small_gqa(void **state) { hf_run_dataset("small-gqa", HF_F32_TOL, &hf_cpu_backend); }
static void test_bf16_tiny(void **state) { hf_check("tiny", HF_BF16_DRIFT_TOL, &hf_cpu_bf16_backend, NULL, false); }
static void test_bf16_small_gqa(void **state)
{
    hf_check("small-gqa", HF_BF16_DRIFT_TOL, &hf_cpu_bf16_backend, NULL, false);
}

/* long-gqa (head_dim 128, llama3 RoPE past its original 1024 positions)
 * comes with the prefill data of tests/hf/make_reference.py: required once
 * tiny's expected_prefill.json is there, skipped before. */
static void test_hf_long_gqa(void **state)
{
    if (access(GP_TEST_DATA_DIR "/tiny/expected_prefill.json", R_OK) != 0) {
        printf("long-gqa: skipped: the data predates it (no tiny/expected_prefill.json)\n");
        skip();
    }
    hf_run_dataset("long-gqa", HF_F32_TOL, &hf_cpu_backend);
}

int main(void)
{
    /* Without the reference data this test skips; once tiny is there,
     * anything missing is a failure. */
    const char *probe = GP_TEST_DATA_DIR "/tiny/expected.json";
    if (access(probe, R_OK) != 0) {
        printf("ref_hf_logits: SKIPPED: %s is absent; the HF reference data is made on a machine "
               "with torch and transformers by tests/hf/make_reference.py (see tests/hf/README.md)\n",
               probe);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_tiny),
        cmocka_unit_test(test_hf_small_gqa),
        cmocka_unit_test(test_hf_long_gqa),
        cmocka_unit_test(test_bf16_tiny),
        cmocka_unit_test(test_bf16_small_gqa),
    };
    return cmocka_run_group_tests_name("reference vs HF transformers", tests, NULL, NULL) ? 1 : 0;
}
