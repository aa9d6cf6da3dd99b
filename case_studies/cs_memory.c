/* What the case study checks before it allocates: whether a workload's
 * weights (or their --vram-budget), KV cache and activations fit the GPU's
 * free memory, and how the pipeline splits a batch that M does not divide.
 * Pure C, tested in CI. */
#include "cs_impl.h"

#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

gp_status gp_cs_memory_check(const char *what, const gp_cs_memory *need, uint64_t device_free,
                             uint64_t device_total)
{
    if (!need)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cs_memory_check: need is NULL");
    what = what && *what ? what : "the run";
    uint64_t sum;
    if (!gp_add_u64(need->weights, need->kv_cache, &sum) || !gp_add_u64(sum, need->activations, &sum) ||
        !gp_add_u64(sum, need->pairs, &sum))
        GP_FAIL(GP_ERR_OVERFLOW, "%s: device bytes needed overflow 64 bits (weights %llu, KV cache %llu, "
                "activations %llu, pairs %llu)", what, (unsigned long long)need->weights,
                (unsigned long long)need->kv_cache, (unsigned long long)need->activations,
                (unsigned long long)need->pairs);
    if (sum <= device_free)
        return GP_OK;
    /* Bytes exactly, GiB to read: a reader compares the two numbers, a
     * script the first. Streamed weights hold their budget, not their size. */
    GP_FAIL(GP_ERR_DEVICE_MEMORY,
            "%s needs %llu bytes of device memory (%.2f GiB: weights%s %.2f + KV cache %.2f + activations and "
            "workspaces %.2f + partition pairs' GEMM workspaces %.2f) but the GPU has %llu bytes (%.2f GiB) "
            "free of %llu (%.2f GiB)",
            what, (unsigned long long)sum, sum / GIB, need->weights_streamed ? " (the --vram-budget)" : "",
            need->weights / GIB, need->kv_cache / GIB, need->activations / GIB, need->pairs / GIB,
            (unsigned long long)device_free, device_free / GIB, (unsigned long long)device_total,
            device_total / GIB);
}

void gp_cs_micro_note(const gp_cs_options *o, char *note, size_t len)
{
    if (!note || !len)
        return;
    note[0] = '\0';
    if (!o)
        return;
    size_t used = 0;
    bool full = false;
    for (int wi = 0; wi < o->n_workloads && !full; wi++)
        for (int mi = 0; mi < o->n_micro && !full; mi++) {
            const gp_cs_workload *w = &o->workloads[wi];
            gp_pipeline_params p = gp_pipeline_default_params();
            p.micro_batches = o->micro[mi];
            gp_step_plan plan;
            /* The runner's own parameters (an even split), planned by the
             * pipeline's own function: the note says what it will do. */
            if (w->B % p.micro_batches == 0 || gp_pipeline_plan(&p, 1, w->B, &plan) != GP_OK)
                continue;
            char sizes[64] = "";
            for (int m = 0, off = 0; m < plan.M; m++)
                off += snprintf(sizes + off, sizeof sizes - (size_t)off, "%s%d", m ? "+" : "", plan.nb[m]);
            int k = snprintf(note + used, len - used, "%s%s: B %d with M %d: micro-batches of %s rows",
                             used ? "; " : "", w->label, w->B, plan.M, sizes);
            if (k < 0 || (size_t)k >= len - used) {
                note[used] = '\0'; /* a cut sentence would misreport; drop it */
                full = true;
                continue;
            }
            used += (size_t)k;
        }
    gp_clear_error();
    if (used && used + 40 < len)
        snprintf(note + used, len - used, " (M does not divide B: the first B mod M get one row more).");
}
