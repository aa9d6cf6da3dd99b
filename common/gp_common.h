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

/* The integer value of environment variable name (common/env.c, the one
 * reader of the library's process-wide variables): dflt when it is unset or
 * empty, else its value, which must be a whole decimal integer in [lo, hi];
 * anything else is GP_ERR_INVALID_ARG naming the variable, its value and the
 * range (*out untouched). */
gp_status gp_env_int(const char *name, long lo, long hi, long dflt, long *out);

/* IEEE half (fp16) to float: exact. */
float gp_f16_to_f32(uint16_t h);
/* Float to IEEE half, round to nearest even; beyond 65504 gives +-inf, NaN
 * stays a quiet NaN. The host side of the CUDA engine's fp16 path (the
 * device rounds with __float2half_rn, the same rule). */
uint16_t gp_f32_to_f16(float f);

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

/* ------------------------------------------------------------ progress */

/* Progress of long work (loading or synthesizing weights, calibrating),
 * reported by the library through a callback in its params struct, never
 * printed there; the command line shows it (tools/progress.c). A run is one
 * GP_PROGRESS_START, updates at most every GP_PROGRESS_INTERVAL_S, then one
 * GP_PROGRESS_END (done < total: it stopped early, e.g. on an error). */
typedef enum gp_progress_event { GP_PROGRESS_START = 0, GP_PROGRESS_UPDATE, GP_PROGRESS_END } gp_progress_event;
typedef struct gp_progress {
    gp_progress_event event;
    const char *what;    /* "synthesizing weights", "calibrating (2 passes)" */
    const char *unit;    /* "B": bytes (shown in GB, rates in GB/s); else a count's noun: "tokens" */
    uint64_t done, total;
    double elapsed_s;    /* since the start */
} gp_progress;
typedef void (*gp_progress_fn)(void *ctx, const gp_progress *p);
/* A params struct's progress field: fn NULL (the zero value) reports nothing.
 * fn runs on the thread that called the library function. */
typedef struct gp_progress_cb {
    gp_progress_fn fn;
    void *ctx;
} gp_progress_cb;
/* Updates closer together than this are dropped: a terminal line redrawn
 * ten times a second reads as live, and costs nothing. */
#define GP_PROGRESS_INTERVAL_S 0.1
/* The reporting side of one run (common/progress.c). cb may be NULL. */
typedef struct gp_progress_run {
    gp_progress_cb cb;
    gp_progress ev;
    double t0, last;
} gp_progress_run;
void gp_progress_begin(gp_progress_run *r, const gp_progress_cb *cb, const char *what, const char *unit,
                       uint64_t total);
void gp_progress_update(gp_progress_run *r, uint64_t done); /* throttled */
void gp_progress_end(gp_progress_run *r, uint64_t done);
/* One line of text for p, without a newline: the start ("what: 16.06 GB"),
 * an update ("what: 3.21 of 16.06 GB (20%), 1.07 GB/s, 3.0 s, ~12 s left"),
 * the end ("what: 16.06 GB in 15.0 s, 1.07 GB/s"; "stopped at ..." when
 * done < total). Returns buf. */
const char *gp_progress_format(const gp_progress *p, char *buf, size_t cap);
/* bytes as "16.06 GB", "182.94 kB" (decimal units, the one that keeps a few
 * digits), into buf; returns buf. */
const char *gp_format_bytes(uint64_t bytes, char *buf, size_t cap);

/* Host memory a new allocation can take without swapping, in bytes:
 * MemAvailable of /proc/meminfo, else the free pages (sysconf). The test
 * hook GP_FAULT_MEM_AVAILABLE (bytes, common/env.c's list) replaces it, so
 * a refusal can be tested on any machine. *how (may be NULL) names where the
 * figure came from. GP_ERR_UNSUPPORTED when nothing tells;
 * GP_ERR_INVALID_ARG for a malformed hook value. */
gp_status gp_host_mem_available(uint64_t *bytes, const char **how);

/* ---------------------------------------------------------------- hashing */

/* 64-bit FNV-1a, for keys and fingerprints that files keep: every byte
 * reaches the result and it needs no table. Integers go in as their
 * little-endian bytes, so a hash is the same on every host. */
#define GP_FNV1A_OFFSET 0xcbf29ce484222325ull
#define GP_FNV1A_PRIME 0x100000001b3ull
static inline uint64_t gp_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= GP_FNV1A_PRIME;
    }
    return h;
}
static inline uint64_t gp_fnv1a_u32(uint64_t h, uint32_t v)
{
    const unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                                (unsigned char)(v >> 24)};
    return gp_fnv1a(h, b, sizeof b);
}
static inline uint64_t gp_fnv1a_u64(uint64_t h, uint64_t v)
{
    return gp_fnv1a_u32(gp_fnv1a_u32(h, (uint32_t)v), (uint32_t)(v >> 32));
}

/* ---------------------------------------------------------------- files */

/* A buffer of *cap bytes with room for need (>= 1) bytes: buf itself when
 * it has it, else reallocated to the first doubling of *cap (at least 256
 * bytes) that holds need, so appends stay linear, and *cap updated. NULL
 * when out of memory, buf and *cap then left as they were. */
void *gp_grow(void *buf, size_t *cap, size_t need);

/* Reads the whole file at path into a new buffer with a NUL after its len
 * bytes (so text can be parsed in place); *out is freed by the caller. Files
 * longer than cap bytes are refused before anything is read, because a
 * config or an index that size is not one and must not exhaust memory. A
 * file that is not regular (a pipe, /dev/stdin, <(...), /proc) has no size
 * to trust: it is read to its end, and refused once past cap.
 * GP_ERR_NOT_FOUND: no such file; GP_ERR_FORMAT: over the cap; GP_ERR_IO:
 * cannot open or read; GP_ERR_NO_MEMORY. Messages name the path. */
gp_status gp_read_file(const char *path, size_t cap, char **out, size_t *len);
/* gp_read_file for a text input the user names on the command line, where
 * "-" means standard input (read to its end; messages name it "standard
 * input (-)"). */
gp_status gp_read_input(const char *path, size_t cap, char **out, size_t *len);
/* Opens path read-only (close-on-exec) into *fd with its size and whether it
 * is a regular file; GP_ERR_NOT_FOUND or GP_ERR_IO naming the path, fd
 * closed, otherwise. */
gp_status gp_file_open(const char *path, int *fd, uint64_t *size, bool *regular);

/* ------------------------------------------------------------ tensors */

/* Element types: of checkpoint tensors (all of them known to the safetensors
 * format; only F32, F16 and BF16 load as weights) and of activation views. */
typedef enum gp_dtype {
    GP_DTYPE_F32 = 0, GP_DTYPE_F16, GP_DTYPE_BF16,
    GP_DTYPE_F64, GP_DTYPE_I64, GP_DTYPE_I32, GP_DTYPE_I16, GP_DTYPE_I8,
    GP_DTYPE_U8, GP_DTYPE_BOOL, GP_DTYPE_F8_E4M3, GP_DTYPE_F8_E5M2,
    GP_DTYPE_COUNT
} gp_dtype;
const char *gp_dtype_name(gp_dtype d); /* safetensors spelling ("BF16"); "unknown" out of range */
size_t gp_dtype_size(gp_dtype d);      /* bytes per element; 0 out of range */
/* The 16-bit float types the CUDA engine computes in (weights, activations,
 * KV cache; accumulation is always float32): BF16 and F16. */
static inline bool gp_dtype_is_half(gp_dtype d)
{
    return d == GP_DTYPE_BF16 || d == GP_DTYPE_F16;
}
/* GP_OK when dt is BF16 or F16; else GP_ERR_INVALID_ARG naming who, the
 * dtype and the allowed ones. */
gp_status gp_dtype_check_half(gp_dtype dt, const char *who);
/* "bf16" / "fp16" / "fp32": how flags and reports spell the compute dtype. */
const char *gp_dtype_flag_name(gp_dtype d);
/* --dtype auto: not a type, the request to take the weights' own 16-bit
 * dtype (gp_dtype_resolve_auto). */
#define GP_DTYPE_AUTO GP_DTYPE_COUNT
/* What gp_dtype_parse accepts beside "bf16" and "fp16". */
#define GP_DTYPE_ALLOW_F32 1u  /* "fp32" */
#define GP_DTYPE_ALLOW_AUTO 2u /* "auto": GP_DTYPE_AUTO */
/* Parse a --dtype value, in any case ("BF16", "bf16"); the message names
 * the text and the allowed set. */
gp_status gp_dtype_parse(const char *text, unsigned allow, gp_dtype *out);
/* --dtype auto: the 16-bit compute dtype for weights of checkpoint_dtype:
 * F16 -> F16, BF16 -> BF16, F32 -> BF16 (fp16's range could not hold every
 * fp32 weight); anything else is GP_ERR_INVALID_ARG naming it. */
gp_status gp_dtype_resolve_auto(gp_dtype checkpoint_dtype, gp_dtype *out);
/* A 16-bit value of dtype dt (BF16 or F16) as float: exact. */
static inline float gp_half_to_f32(uint16_t v, gp_dtype dt)
{
    return dt == GP_DTYPE_F16 ? gp_f16_to_f32(v) : gp_bf16_to_f32(v);
}
/* Float to 16-bit dtype dt (BF16 or F16), round to nearest even. */
static inline uint16_t gp_f32_to_half(float f, gp_dtype dt)
{
    return dt == GP_DTYPE_F16 ? gp_f32_to_f16(f) : gp_f32_to_bf16(f);
}
/* f rounded through dt: identity for F32, else to the nearest value of the
 * 16-bit type. How the CPU reference mimics the engine's stores. */
static inline float gp_round_to(float f, gp_dtype dt)
{
    return dt == GP_DTYPE_F32 ? f : gp_half_to_f32(gp_f32_to_half(f, dt), dt);
}

/* Where a view's memory lives: a CUDA device ordinal, or the host. */
#define GP_DEVICE_HOST (-1)

/* A 2-D view of activation rows that a stage reads or writes: row r starts
 * at data + r * row_stride elements. The view does not own its memory.
 * rows == 0 is the empty view ("nothing here"). Docs: docs/ARCHITECTURE.md
 * section 2. */
typedef struct gp_tensor_view {
    void *data;          /* first element of row 0 (device or host address, see device) */
    int32_t rows, cols;  /* shape [rows][cols] */
    int64_t row_stride;  /* elements from one row to the next, >= cols */
    gp_dtype dtype;
    int32_t device;      /* CUDA device ordinal, or GP_DEVICE_HOST */
} gp_tensor_view;

/* A contiguous view (row_stride == cols). */
static inline gp_tensor_view gp_view_make(void *data, int rows, int cols, gp_dtype dt, int device)
{
    gp_tensor_view v = {data, rows, cols, cols, dt, device};
    return v;
}
/* Rows [r0, r0 + n) of v (no checks; the caller keeps them inside v). */
static inline gp_tensor_view gp_view_rows(gp_tensor_view v, int r0, int n)
{
    if (v.data)
        v.data = (char *)v.data + (size_t)r0 * (size_t)v.row_stride * gp_dtype_size(v.dtype);
    v.rows = n;
    return v;
}
/* Bytes of the elements the view covers (rows x cols, not the stride's gaps). */
uint64_t gp_view_bytes(const gp_tensor_view *v);
/* Same memory, shape, stride, dtype and device. */
bool gp_view_same(const gp_tensor_view *a, const gp_tensor_view *b);
/* GP_OK when v has n rows of cols elements of dtype dt on device, row_stride
 * >= cols, non-NULL data (n > 0), and contiguous rows when contiguous is set;
 * else GP_ERR_INVALID_ARG naming who, what and the mismatch. */
gp_status gp_view_check(const gp_tensor_view *v, const char *who, const char *what, int n, int cols, gp_dtype dt,
                        int device, bool contiguous);

/* ------------------------------------------------------------ thread pool
 * Persistent workers for CPU work done once per layer (pool.c): every
 * thread, the caller as thread 0, runs fn(ctx, thread) once per
 * gp_pool_run; the task spreads its own work. One caller at a time. */
#define GP_POOL_MAX_THREADS 16
typedef struct gp_pool gp_pool;
typedef void (*gp_pool_task)(void *ctx, int thread);
/* n_threads 1..GP_POOL_MAX_THREADS (GP_ERR_INVALID_ARG otherwise); a thread
 * that cannot be started only makes the pool smaller. */
gp_status gp_pool_create(int n_threads, gp_pool **out);
void gp_pool_destroy(gp_pool *p); /* NULL is fine */
int gp_pool_threads(const gp_pool *p);
/* Returns once every thread has finished fn. */
void gp_pool_run(gp_pool *p, gp_pool_task fn, void *ctx);
/* n_threads if > 0, else the online CPUs capped at GP_POOL_MAX_THREADS. */
int gp_pool_threads_for(int n_threads);

#ifdef __cplusplus
}
#endif
#endif
