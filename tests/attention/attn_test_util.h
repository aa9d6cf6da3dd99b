/* Shared helpers of the attention tests: per-run seeds, random data, the GPU
 * check, and comparison of bf16 device results with float references. */
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
void at_fill_bf16(gp_bf16 *x, size_t n, uint64_t *s, float range); /* uniform [-range, range] */
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
void at_dev_poison(void *p, size_t bytes);       /* 0xFF bytes: bf16 0xFFFF = NaN */
void at_dev_sync(void);                          /* device sync + check for async errors */
void at_check(gp_status st, const char *what);   /* fails with gp_last_error() */

/* Compares got (bf16, rows x row_len) with want (float). An element passes
 * when it is not NaN (NaN = poison never overwritten) and
 *   |got - want| <= elem_rel * |want| + row_abs * max|want of its row|;
 * a row passes when max|got - want| / max|want| <= row_rel (rows whose
 * reference is all zeros must match exactly). Prints the worst row-relative
 * error and the first mismatches; returns the number of failures. */
size_t at_compare(const char *what, const gp_bf16 *got, const float *want, size_t rows,
                  size_t row_len, double elem_rel, double row_abs, double row_rel);

#endif
