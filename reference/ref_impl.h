/* Private to the float32 CPU reference (ref_*.c, reference.c): its
 * thread pool and the dot products shared by the operations and the model. */
#ifndef GP_REF_IMPL_H
#define GP_REF_IMPL_H

#include <stdbool.h>

#include "gp_kvcache.h"
#include "gp_reference.h"
#include "gp_stage.h"

/* Matvec rows and attention heads are spread over a small thread pool
 * (online CPUs, at most 16; GP_REF_THREADS=N overrides). Results are bitwise
 * the same for any thread count and any batch composition. */

/* Below this many multiply-adds a parallel region costs more than it saves;
 * the result does not depend on it (see gp_ref_pool_run). */
#define GP_REF_PAR_MIN_WORK 65536
#define GP_REF_MAX_THREADS 16

/* A task processes items [begin, end) on thread `thread` (0 = the caller). */
typedef void (*gp_ref_task)(void *ctx, int begin, int end, int thread);
typedef struct gp_ref_pool gp_ref_pool;

/* n_threads > 0 asks for exactly that many (1..16); 0 for the default. */
gp_status gp_ref_pool_create(int n_threads, gp_ref_pool **out);
void gp_ref_pool_destroy(gp_ref_pool *p);
int gp_ref_pool_threads(const gp_ref_pool *p);
/* Run fn over n_items; in parallel only when work (multiply-adds, roughly)
 * makes it worth waking the workers. One caller at a time per pool. */
void gp_ref_pool_run(gp_ref_pool *p, gp_ref_task fn, void *ctx, int n_items, double work);

/* Fixed summation order: every caller gets the same bits for the same row.
 * Weights of dtype wdt (F32, BF16 or F16), widened exactly; the per-dtype
 * forms are what the dispatchers call. */
float gp_ref_dot(const void *w, gp_dtype wdt, const float *x, int n);
void gp_ref_dot2(const void *w, gp_dtype wdt, const float *x0, const float *x1, int n, float *o0, float *o1);
float gp_ref_dot_bf16(const gp_bf16 *w, const float *x, int n);
void gp_ref_dot2_bf16(const gp_bf16 *w, const float *x0, const float *x1, int n, float *o0, float *o1);
float gp_ref_dot_f16(const uint16_t *w, const float *x, int n);
void gp_ref_dot2_f16(const uint16_t *w, const float *x0, const float *x1, int n, float *o0, float *o1);
float gp_ref_dot_f32(const float *w, const float *x, int n);
void gp_ref_dot2_f32(const float *w, const float *x0, const float *x1, int n, float *o0, float *o1);
/* Element i of a weight tensor of dtype wdt, as float (exact). */
float gp_ref_weight(const void *w, gp_dtype wdt, size_t i);

/* A model's KV cache, for the copies in and out of it (ref_kv.c). */
typedef struct gp_ref_kv {
    gp_kv_tables *kv;
    float *k, *v;       /* [n_layers][layer_elems] */
    size_t layer_elems; /* of one layer's K (or V) pool */
    int max_seqs, max_context;
    bool stepping;      /* a step is in progress: its sequences' lengths are about to move */
} gp_ref_kv;
gp_ref_kv gp_ref_kv_of(gp_cpu_model *m);

#endif
