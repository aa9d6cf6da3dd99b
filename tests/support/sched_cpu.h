/* The scheduler's backend ops over the CPU reference: a mixed batch per
 * step on a gp_cpu_model, so the scheduler runs in CI without a GPU; with a
 * pool of retained blocks for prefix caching. */
#ifndef GP_SCHED_CPU_H
#define GP_SCHED_CPU_H

#include "gp_reference.h"
#include "gp_sched.h"

/* ops for model m (borrowed); greedy sampling; no prefix caching. */
gp_sched_ops gp_sched_cpu_ops(gp_cpu_model *m);

/* Retained blocks of model m (borrowed) for a scheduler of blocks of
 * block_size tokens: each handle names a copy of one block's K/V of every
 * layer, out of its sequence (gp_cpu_kv_read) and into the sequences it is
 * attached to (gp_cpu_kv_write). The reference computes each position's K/V
 * alone, so a copied block is bitwise the one a prefill would write. */
typedef struct gp_sched_cpu_cache gp_sched_cpu_cache;
gp_status gp_sched_cpu_cache_create(gp_cpu_model *m, int block_size, gp_sched_cpu_cache **out);
void gp_sched_cpu_cache_destroy(gp_sched_cpu_cache *c);
/* gp_sched_cpu_ops' with the three prefix-caching ops; ctx c. */
gp_sched_ops gp_sched_cpu_cache_ops(gp_sched_cpu_cache *c);
/* Copies held (retained, not yet dropped). */
int gp_sched_cpu_cache_held(const gp_sched_cpu_cache *c);

#endif
