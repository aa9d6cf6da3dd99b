/* The scheduler's backend ops over the CPU reference: a mixed batch per
 * step on a gp_cpu_model, so the scheduler runs in CI without a GPU, with or
 * without the reference's shared blocks for prefix caching. */
#ifndef GP_SCHED_CPU_H
#define GP_SCHED_CPU_H

#include "gp_reference.h"
#include "gp_sched.h"

/* The weights the scheduler's and the serving core's tests run: the tiny
 * preset's, synthetic bf16 from seed 1234. GP_OK, or the failure's status
 * with its message. Free with gp_host_weights_free. */
gp_status gp_sched_cpu_tiny_weights(gp_host_weights *w);

/* ops for model m (borrowed); greedy sampling; no prefix caching. */
gp_sched_ops gp_sched_cpu_ops(gp_cpu_model *m);

/* gp_sched_cpu_ops' with the three prefix-caching ops: the reference's
 * shared blocks (gp_cpu_kv_retain_block, gp_cpu_kv_drop_block,
 * gp_cpu_kv_attach). The scheduler's block size must be the model's. */
gp_sched_ops gp_sched_cpu_share_ops(gp_cpu_model *m);

#endif
