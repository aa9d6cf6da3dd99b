/* The scheduler's backend ops over the CPU reference: a mixed batch per
 * step on a gp_cpu_model, so the scheduler runs in CI without a GPU. */
#ifndef GP_SCHED_CPU_H
#define GP_SCHED_CPU_H

#include "gp_reference.h"
#include "gp_sched.h"

/* ops for model m (borrowed); greedy sampling. */
gp_sched_ops gp_sched_cpu_ops(gp_cpu_model *m);

#endif
