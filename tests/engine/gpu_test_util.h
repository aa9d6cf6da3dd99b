/* Shared helpers of the engine kernel tests: seeded random inputs, device
 * buffers with poisoned tails (guards), skip when no GPU, error checks. */
#ifndef GP_GPU_TEST_UTIL_H
#define GP_GPU_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gp_test.h"

#include <string.h>

#include <cuda_runtime_api.h>

#include "gp_common.h"
#include "gp_model.h"
#include "gp_weights.h"

/* Bytes of poison after each device buffer, checked after every run. */
#define GT_GUARD_BYTES 256

typedef struct gt_rng { uint64_t s; } gt_rng;
uint64_t gt_next(gt_rng *r);                       /* splitmix64 */
float gt_uniform(gt_rng *r, float lo, float hi);   /* [lo, hi) */
gp_bf16 gt_bf16(gt_rng *r, float lo, float hi);    /* uniform, rounded to bf16 */
uint16_t gt_half(gt_rng *r, float lo, float hi, gp_dtype dt); /* uniform, rounded to dt
                                                                 (BF16 or F16) */
int gt_below(gt_rng *r, int n);                    /* [0, n) */
/* The engine's two 16-bit dtypes, bf16 first: kernel tests run every GPU
 * case in each (0xFFFF, the poison, is NaN in both). */
extern const gp_dtype gt_dtypes[2];

/* The run's seed: $GP_TEST_SEED or the clock; printed once with name. */
uint64_t gt_seed(const char *name);

/* 1 (after printing why) when no GPU is usable: the caller returns 77. */
int gt_no_gpu(const char *name);

/* Device buffer of bytes plus a poisoned guard; gt_poison fills buffer and
 * guard with 0xFF (bf16 0xFFFF and float 0xFFFFFFFF are NaN, int32 is -1);
 * gt_guard_ok checks the guard is untouched. */
void *gt_dev_alloc(size_t bytes);
void gt_dev_free(void *p);
void gt_poison(void *p, size_t bytes);
void gt_guard_check(const void *p, size_t bytes, const char *what);
void gt_upload(void *dev, const void *host, size_t bytes);
void gt_download(void *host, const void *dev, size_t bytes);
void *gt_host_alloc(size_t bytes); /* fails the test when out of memory */

/* Per-element check |got - ref| <= rel * |ref| + abs_tol, NaN in got fails
 * unless ref is NaN too. Prints the first 8 failures as what[row][col]
 * (cols per row) and returns the count. */
size_t gt_check_close(const char *what, const float *got, const float *ref, size_t n, int cols,
                      double rel, double abs_tol);

/* A small model whose prefill runs the tensor-core attention (head_dim
 * 128): the tiny preset with hidden 256, 4 heads over 2 KV heads, FFN 384,
 * vocab 512, max context 4096, untied embeddings. */
void gt_config_hd128(gp_config *c);
/* The synthetic bf16 host weights of c with seed into *w and their device
 * copy in dt into *dw (bf16 values: exact in fp16 too); fails the test. */
void gt_weights_synth(const gp_config *c, uint64_t seed, gp_dtype dt, gp_host_weights *w, gp_device_weights **dw);
/* n token ids in [0, vocab) from rand() (the caller seeds it), malloc'd. */
int32_t *gt_rand_ids(int n, int vocab);

/* main of a whole-engine test: exit 77 (skipped, the reason printed) without
 * a GPU; else every test of tests[n] once per engine dtype, bf16 then fp16,
 * *dt set before each group (its fixture uploads the weights in it), groups
 * named "<name>, bf16" and "<name>, fp16". Returns main's exit status. */
int gt_engine_main(const char *name, const struct CMUnitTest *tests, size_t n, CMFixtureFunction setup,
                   CMFixtureFunction teardown, gp_dtype *dt);
#define GT_ENGINE_MAIN(name, tests, setup, teardown, dt)                                         \
    gt_engine_main(name, tests, sizeof(tests) / sizeof((tests)[0]), setup, teardown, dt)

#endif
