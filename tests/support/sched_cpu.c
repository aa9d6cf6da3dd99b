/* The scheduler's backend ops over the CPU reference (gp_cpu_run_batch and
 * gp_cpu_reset_seq), and its shared KV blocks for prefix caching. */
#include "sched_cpu.h"

static gp_status cpu_run_batch(void *ctx, const gp_batch *b, int32_t *next, float *logits)
{
    return gp_cpu_run_batch(ctx, b, next, logits);
}

static void cpu_reset_seq(void *ctx, int seq)
{
    gp_cpu_reset_seq(ctx, seq);
}

gp_status gp_sched_cpu_tiny_weights(gp_host_weights *w)
{
    gp_config cfg;
    GP_TRY(gp_config_preset("tiny", &cfg));
    GP_TRY(gp_host_weights_alloc(&cfg, GP_DTYPE_BF16, w));
    gp_status st = gp_synth_fill_host(w, 1234);
    if (st != GP_OK)
        gp_host_weights_free(w);
    return st;
}

gp_sched_ops gp_sched_cpu_ops(gp_cpu_model *m)
{
    return (gp_sched_ops){.run_batch = cpu_run_batch, .reset_seq = cpu_reset_seq, .sample = NULL, .ctx = m};
}

static gp_status cpu_retain(void *ctx, int seq, int index, int *handle)
{
    return gp_cpu_kv_retain_block(ctx, seq, index, handle);
}

static void cpu_drop(void *ctx, int handle)
{
    (void)gp_cpu_kv_drop_block(ctx, handle); /* the scheduler drops only what it retained */
}

static gp_status cpu_attach(void *ctx, int seq, const int *handles, int n)
{
    return gp_cpu_kv_attach(ctx, seq, handles, n);
}

gp_sched_ops gp_sched_cpu_share_ops(gp_cpu_model *m)
{
    gp_sched_ops o = gp_sched_cpu_ops(m);
    o.retain_block = cpu_retain;
    o.drop_block = cpu_drop;
    o.attach_blocks = cpu_attach;
    return o;
}
