/* Shared helpers of the attention tests: per-run seeds, random data, the GPU
 * check, the 16-bit dtype a test runs in, and comparison of 16-bit device
 * results with float references. */
#ifndef GP_ATTN_TEST_UTIL_H
#define GP_ATTN_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "gp_attention.h"

/* Fresh seed per run (GP_TEST_SEED overrides), printed so a failure repeats. */
uint64_t at_seed(const char *test);
uint64_t at_next(uint64_t *s);
int at_int(uint64_t *s, int n);                  /* uniform in [0, n) */
float at_uniform(uint64_t *s, float lo, float hi);
/* The 16-bit dtype (GP_DTYPE_BF16 or GP_DTYPE_F16) of the running test's
 * data: at_fill16, at_f32 and at_compare use it. BF16 until set. The GPU
 * tests run once per dtype: AT_GPU_TEST(f) registers f twice, its setup
 * setting the dtype (names "f (bf16)" and "f (fp16)"). */
gp_dtype at_dtype(void);
void at_set_dtype(gp_dtype dt);
int at_setup_bf16(void **state);
int at_setup_f16(void **state);
#define AT_GPU_TEST(f)                                                                            \
    { #f " (bf16)", f, at_setup_bf16, NULL, NULL }, { #f " (fp16)", f, at_setup_f16, NULL, NULL }
/* A seed mixed with the dtype, so the two dtypes' runs draw different data. */
uint64_t at_dtype_seed(uint64_t seed);
float at_f32(uint16_t x);                        /* x of at_dtype() as float */
uint16_t at_half(float f);                       /* f rounded to at_dtype() */
void at_fill16(uint16_t *x, size_t n, uint64_t *s, float range); /* uniform [-range, range], at_dtype() */
void at_shuffle(int32_t *x, int n, uint64_t *s);
void *at_malloc(size_t bytes);                   /* fails the test when out of memory */

/* The decode-attention params of the GPU checks: the defaults with what the
 * command line sets (CTest variants compare the kernels and their settings):
 *   --kernel NAME    params kernel (gp_attn_kernel_name)
 *   --warps-cap N    params stream_warps_cap
 *   --no-kv-evict    params kv_evict_first = 0
 * at_attn_args exits 2 on anything else or a value gp_decode_attn refuses. */
void at_attn_args(const char *test, int argc, char **argv);
gp_decode_attn_params at_attn_params(void);

/* 1 when a GPU is usable; otherwise prints why and returns 0. */
int at_gpu_usable(void);

/* Device helpers that fail the running test on a CUDA error. */
void *at_dev_alloc(size_t bytes);
void at_dev_free(void *p);
void at_to_dev(void *dst, const void *src, size_t bytes);
void at_to_host(void *dst, const void *src, size_t bytes);
void at_dev_poison(void *p, size_t bytes);       /* 0xFF bytes: 0xFFFF = NaN in bf16 and fp16 */
void at_dev_sync(void);                          /* device sync + check for async errors */
void at_check(gp_status st, const char *what);   /* fails with gp_last_error() */

/* Compares got (at_dtype(), rows x row_len) with want (float). An element passes
 * when it is not NaN (NaN = poison never overwritten) and
 *   |got - want| <= elem_rel * |want| + row_abs * max|want of its row|;
 * a row passes when max|got - want| / max|want| <= row_rel (rows whose
 * reference is all zeros must match exactly). Prints the worst row-relative
 * error and the first mismatches; returns the number of failures. */
size_t at_compare(const char *what, const uint16_t *got, const float *want, size_t rows,
                  size_t row_len, double elem_rel, double row_abs, double row_rel);

#endif
