/* greenpipe common definitions: status codes, thread-local error text, bf16
 * conversion and the host/device qualifier shared by C and CUDA sources. */
#ifndef GP_COMMON_H
#define GP_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define GP_HD __host__ __device__
#else
#define GP_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* 0 ok, negative errors, positive soft outcomes. */
typedef enum gp_status {
    GP_OK = 0,
    GP_ERR_INVALID_ARG = -1,  /* a value the caller gave is outside what is allowed */
    GP_ERR_NO_MEMORY = -2,    /* host allocation failed */
    GP_ERR_IO = -3,           /* file could not be opened, read or mapped */
    GP_ERR_FORMAT = -4,       /* a file breaks its format's rules */
    GP_ERR_UNSUPPORTED = -5,  /* valid, but not something greenpipe handles */
    GP_ERR_NOT_FOUND = -6,    /* a named thing (tensor, preset, file) is absent */
    GP_ERR_SHAPE = -7,        /* shapes disagree with the model config */
    GP_ERR_OVERFLOW = -8,     /* size arithmetic would overflow */
    GP_ERR_NO_DEVICE = -9,    /* no usable GPU or driver */
    GP_ERR_CUDA = -10,        /* a CUDA runtime/driver/library call failed */
    GP_ERR_DEVICE_MEMORY = -11, /* device allocation failed */
    GP_ERR_STATE = -12,       /* call made in the wrong state (e.g. cache full) */
    GP_ERR_DEVICE_FAULT = -13, /* sticky CUDA error: the context is unusable, exit */
    GP_SOFT_FULL = 1,         /* ring full: try again */
    GP_SOFT_EMPTY = 2,        /* ring empty: try again */
} gp_status;

const char *gp_status_str(gp_status s);

/* Error detail for the last failing call on this thread. Library functions
 * that return an error status set it; callers print it. */
void gp_set_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
const char *gp_last_error(void);
void gp_clear_error(void);

/* Fail with status s and a formatted message. */
#define GP_FAIL(s, ...) do { gp_set_error(__VA_ARGS__); return (s); } while (0)
#define GP_TRY(expr) do { gp_status gp_try_s_ = (expr); if (gp_try_s_ != GP_OK) return gp_try_s_; } while (0)

/* Overflow-checked size arithmetic; return 0 on overflow. */
static inline int gp_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline int gp_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* bf16 is stored as the upper 16 bits of an IEEE float32. */
typedef uint16_t gp_bf16;

static inline GP_HD float gp_bf16_to_f32(gp_bf16 h)
{
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}

/* Round to nearest even; NaN stays a quiet NaN. Integer-only so host and
 * device produce identical bits. */
static inline GP_HD gp_bf16 gp_f32_to_bf16(float f)
{
    union { uint32_t u; float f; } v;
    v.f = f;
    if ((v.u & 0x7f800000u) == 0x7f800000u && (v.u & 0x007fffffu))
        return (gp_bf16)((v.u >> 16) | 0x0040u);
    uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
    return (gp_bf16)((v.u + rounding) >> 16);
}

/* Programmatic dependent launch (PDL) for the engine's kernels, read at each
 * launch (and baked into graphs captured meanwhile). OFF by default; $GP_PDL=1
 * turns it on, for investigation only. Measured on the H100 (driver 580,
 * 2026-11-22): with PDL on and the skinny GEMM, the sequential engine's logits
 * at batch 9 were 0.85 off the CPU reference (tiny and llama3.2-1b shapes;
 * tests/pipeline/test_pipeline_cuda.c catches it), while end to end PDL saved
 * nothing measurable (B=8/C=1024: 6.729 ms with, 6.738 ms without). The
 * faulty dependency was not isolated. */
bool gp_pdl_enabled(void);

/* IEEE half to float, for fp16 checkpoints. */
float gp_f16_to_f32(uint16_t h);

/* ------------------------------------------------------------ measuring */

/* CLOCK_MONOTONIC: host-side waits and CPU stage times, never wall time. */
uint64_t gp_now_ns(void);
double gp_now_s(void);

/* qsort comparators, ascending; NaN compares equal to everything. */
int gp_cmp_float(const void *a, const void *b);
int gp_cmp_double(const void *a, const void *b);

/* The median of v[0..n) (mean of the middle two when n is even), sorting v
 * in place so that v[0] and v[n-1] are then the minimum and the maximum.
 * n must be at least 1. Every reported timing is a median over repeats: one
 * slow launch must not move it. */
float gp_median_f(float *v, int n);
double gp_median_d(double *v, int n);

/* ---------------------------------------------------------------- files */

/* Reads the whole file at path into a new buffer with a NUL after its len
 * bytes (so text can be parsed in place); *out is freed by the caller. Files
 * longer than cap bytes are refused before anything is read, because a
 * config or an index that size is not one and must not exhaust memory.
 * GP_ERR_NOT_FOUND: no such file; GP_ERR_FORMAT: over the cap; GP_ERR_IO:
 * cannot open or read; GP_ERR_NO_MEMORY. Messages name the path. */
gp_status gp_read_file(const char *path, size_t cap, char **out, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
