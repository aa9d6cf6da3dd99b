/* The scheduler's backend ops over the CPU reference (gp_cpu_run_batch and
 * gp_cpu_reset_seq). */
#include "sched_cpu.h"

static gp_status cpu_run_batch(void *ctx, const gp_batch *b, float *logits)
{
    return gp_cpu_run_batch(ctx, b, NULL, logits);
}

static void cpu_reset_seq(void *ctx, int seq)
{
    gp_cpu_reset_seq(ctx, seq);
}

gp_sched_ops gp_sched_cpu_ops(gp_cpu_model *m)
{
    return (gp_sched_ops){.run_batch = cpu_run_batch, .reset_seq = cpu_reset_seq, .sample = NULL, .ctx = m};
}
