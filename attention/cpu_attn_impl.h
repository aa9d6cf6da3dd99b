/* Internals of the CPU partial decode attention shared by its files: the
 * per-item loops (the thread pool is common/'s gp_pool). */
#ifndef GP_CPU_ATTN_IMPL_H
#define GP_CPU_ATTN_IMPL_H

#include <stdint.h>

#include "gp_attention.h"

/* ------------------------------------------------------------ one work item */

/* One row's KV head over positions [t0, t1) for its G query heads. */
typedef struct gp_cpu_attn_item_args {
    gp_dtype dtype;
    const uint16_t *k_pool, *v_pool;
    const int32_t *table;  /* the row's block table */
    int t0, t1;
    int block_size, kv_stride; /* kv_stride = n_kv_heads * head_dim: elements from slot to slot */
    int kv_head, head_dim, G;
    const float *q;        /* [G][head_dim]: the group's query heads */
    float scale;
    float *scores;         /* scratch [G][t1 - t0] */
    float *m, *l;          /* out [G]: max score, sum of exp(score - m) */
    float *acc;            /* out [G][head_dim]: sum of exp(score - m) v, unnormalised */
} gp_cpu_attn_item_args;

/* Plain C loops, and the AVX2 + F16C ones (same additions in the same
 * order, no FMA: bitwise the same results). */
void gp_cpu_attn_item_plain(const gp_cpu_attn_item_args *a);
void gp_cpu_attn_item_avx2(const gp_cpu_attn_item_args *a);
/* 1 when this build and CPU can run gp_cpu_attn_item_avx2. */
int gp_cpu_attn_have_avx2(void);

#endif
