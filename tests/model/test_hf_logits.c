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

/* max|ours - hf| / max|hf| per logits vector. Both sides compute in float32
 * from the same bf16-exact weights; they differ only in summation order
 * (~1e-6). A wrong convention (interleaved RoPE, unscaled llama3 frequencies,
 * the bf16 inv_freq pitfall of docs/ARCHITECTURE.md §8 at ~2e-3) lands far above. */
#define HF_TOL 1e-4

/* The reference in bf16-activation mode rounds where the CUDA engine does;
 * against HF's float32 this is the drift bf16 storage alone causes in these
 * models (weights Normal(0, 0.2): activations are large and attention sharp,
 * so rounding is amplified layer by layer; measured 2.8e-2 on tiny, 3.4e-2 on
 * small-gqa). Greedy choices whose HF margin is smaller than that drift may
 * flip; they are reported, not required, here. The GPU engine is held to the
 * bf16 mode tightly and to HF within this bound (tests/engine). */
#define BF16_DRIFT_TOL 6e-2

static void test_hf_tiny(void **state) { hf_run_dataset("tiny", HF_TOL, &hf_cpu_backend); }
static void test_hf_small_gqa(void **state) { hf_run_dataset("small-gqa", HF_TOL, &hf_cpu_backend); }
static void test_bf16_tiny(void **state) { hf_check("tiny", BF16_DRIFT_TOL, &hf_cpu_bf16_backend, NULL, false); }
static void test_bf16_small_gqa(void **state)
{
    hf_check("small-gqa", BF16_DRIFT_TOL, &hf_cpu_bf16_backend, NULL, false);
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
        cmocka_unit_test(test_bf16_tiny),
        cmocka_unit_test(test_bf16_small_gqa),
    };
    return cmocka_run_group_tests_name("reference vs HF transformers", tests, NULL, NULL) ? 1 : 0;
}
