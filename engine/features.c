/* The feature table: which features of a run combine, each refusal with the
 * physical reason, and whether its steps can be captured as CUDA graphs. */
#include <stdio.h>

#include "gp_engine.h"

#define BIT(k) (1u << (k))

static const char *const names[GP_FEAT_COUNT] = {
    [GP_FEAT_CPU] = "the cpu backend (--backend cpu)",
    [GP_FEAT_CUDA] = "the cuda backend (--backend cuda)",
    [GP_FEAT_PIPELINED] = "pipelined steps (--engine pipelined)",
    [GP_FEAT_PIPE_SHAPE] = "an SM split or micro-batches (--sm-split, --micro-batches)",
    [GP_FEAT_PREFILL_CHUNK] = "a prefill chunk (prefill_chunk, --prefill-chunk)",
    [GP_FEAT_STREAMED] = "streamed weights (vram_budget, --vram-budget)",
    [GP_FEAT_KV_OFFLOAD] = "an offloaded KV cache (kv_vram_budget, --kv-vram-budget)",
    [GP_FEAT_KV_STORE] = "stored prefixes (kv_store_bytes, --kv-store-size)",
    [GP_FEAT_SPARSITY] = "sparse projections (sparse_thresholds, --sparsity)",
    [GP_FEAT_SPARSITY_STATS] = "sparsity statistics (--sparsity-stats)",
    [GP_FEAT_SPARSE_ALWAYS] = "sparse projections on every step (sparse_always, --sparse-always)",
    [GP_FEAT_CPU_FFN] = "the CPU-assisted FFN (cpu_ffn_budget, --cpu-ffn)",
    [GP_FEAT_CPU_FFN_THREADS] = "the CPU-assisted FFN's threads (cpu_ffn_threads, --cpu-ffn-threads)",
    [GP_FEAT_CPU_THREADS] = "the reference's worker threads (cpu_threads, --threads)",
    [GP_FEAT_PROMPT_LOGITS] = "prompt logits (--dump-prompt-logits)",
    [GP_FEAT_PREFIX_CACHE] = "the prefix cache (serve's default; --no-prefix-cache turns it off)",
    [GP_FEAT_PD_LANES] = "prefill and decode lanes (--pd-split)",
    [GP_FEAT_TP] = "tensor parallel (--tp)",
    [GP_FEAT_TP_PEER] = "the ranks' sums over peer memory (tp_peer_bytes, --tp-peer-bytes)",
    [GP_FEAT_AFD] = "attention and FFN on two GPUs (afd, --engine afd)",
};

/* Checked in this order; the first that applies is the refusal. */
static const gp_feature_rule rules[] = {
    {GP_FEAT_CPU, GP_FEAT_PREFILL_CHUNK, false,
     "the CPU reference prefills position by position; a chunk sizes the CUDA engine's prefill forwards"},
    {GP_FEAT_CPU, GP_FEAT_STREAMED, false,
     "the CPU reference holds every weight in host memory; a VRAM budget bounds what the CUDA engine keeps on "
     "the GPU"},
    {GP_FEAT_CPU, GP_FEAT_KV_OFFLOAD, false,
     "the CPU reference's KV cache is in host memory already; offloading moves the CUDA engine's device blocks "
     "to the host"},
    {GP_FEAT_CPU, GP_FEAT_KV_STORE, false, "stored prefixes are reloaded into the CUDA engine's paged device cache"},
    {GP_FEAT_CPU, GP_FEAT_CPU_FFN, false,
     "it splits the CUDA engine's FFN between the GPU and CPU threads; the CPU reference runs the whole FFN on "
     "the CPU"},
    {GP_FEAT_CPU, GP_FEAT_SPARSITY_STATS, false,
     "the active inputs are counted by the CUDA engine's sparse kernels; the CPU reference masks without "
     "counting"},
    {GP_FEAT_CPU, GP_FEAT_SPARSE_ALWAYS, false,
     "the CPU reference masks every step already; the choice between the sparse kernel and the dense GEMM "
     "per step is the CUDA engine's"},
    {GP_FEAT_CUDA, GP_FEAT_CPU_THREADS, false,
     "they size the CPU reference's worker; the CUDA engine computes on the GPU (the CPU-assisted FFN takes "
     "--cpu-ffn-threads)"},
    {GP_FEAT_PIPE_SHAPE, GP_FEAT_PIPELINED, true,
     "an SM split and micro-batches shape pipelined steps; a sequential step runs whole on every SM"},
    {GP_FEAT_CPU_FFN, GP_FEAT_SPARSITY, true,
     "its hot and cold neurons are the calibration's; without thresholds every neuron is active and none can "
     "be left to the CPU"},
    {GP_FEAT_CPU_FFN_THREADS, GP_FEAT_CPU_FFN, true, "they compute the CPU-assisted FFN's cold neurons"},
    {GP_FEAT_TP_PEER, GP_FEAT_TP, true, "it sizes the sums of the tensor-parallel ranks' partial outputs"},
    {GP_FEAT_AFD, GP_FEAT_CPU, false,
     "the two sides are CUDA engines on two GPUs; the CPU reference runs in one process's memory"},
    {GP_FEAT_AFD, GP_FEAT_TP, false,
     "tensor parallel cuts every layer over the GPUs; attention and FFN on two GPUs gives each GPU whole layers' "
     "halves, one process for both"},
    {GP_FEAT_AFD, GP_FEAT_STREAMED, false,
     "the FFN GPU holds its weights resident; streaming them would put the link between every layer's halves"},
    {GP_FEAT_AFD, GP_FEAT_KV_STORE, false,
     "stored prefixes reload into one engine's prefill; the two sides' steps are the pipeline's"},
    {GP_FEAT_AFD, GP_FEAT_SPARSITY, false,
     "the sparse projections' per-step choice is one engine's; the FFN GPU's engine runs its stages dense"},
    {GP_FEAT_AFD, GP_FEAT_PD_LANES, false,
     "the lanes are SM partitions of one GPU; attention and FFN on two GPUs are whole GPUs"},
    {GP_FEAT_SPARSITY_STATS, GP_FEAT_SPARSITY, true, "they count the inputs the sparse projections read"},
    {GP_FEAT_SPARSE_ALWAYS, GP_FEAT_SPARSITY, true, "it keeps a calibration's masks on every step"},
    {GP_FEAT_CPU_FFN, GP_FEAT_PIPELINED, false,
     "every layer's FFN waits for the CPU threads' cold neurons; in a pipeline that wait would hold the FFN "
     "partition and, through the ring, the attention partition behind it"},
    {GP_FEAT_KV_OFFLOAD, GP_FEAT_PIPELINED, false,
     "the offloaded blocks are copied in ahead of each layer's attention and written back after it, in the "
     "order of one stream; the attention partition of a pipeline runs several micro-batches of a layer "
     "before the next layer's copies could be ordered behind them"},
    {GP_FEAT_KV_OFFLOAD, GP_FEAT_STREAMED, false,
     "both cross the one host-to-device link every step, each planned as if it had the link alone: the weight "
     "prefetch window and the KV copies would delay each other by their sum"},
    {GP_FEAT_PROMPT_LOGITS, GP_FEAT_KV_STORE, false,
     "prompt positions reloaded from the store are not recomputed and have no logits"},
    {GP_FEAT_PD_LANES, GP_FEAT_CPU, false,
     "the lanes are two SM partitions of the GPU; on the CPU reference --schedule pd-mux runs its two lanes in "
     "turn"},
    {GP_FEAT_PD_LANES, GP_FEAT_PIPELINED, false,
     "both cut the GPU into two partitions, one for attention and FFN of a step, the other for prefill and "
     "decode batches; one split at a time"},
    {GP_FEAT_PD_LANES, GP_FEAT_KV_OFFLOAD, false,
     "the offloaded cache copies each layer's blocks into one staging window per call, which the two lanes' "
     "calls would share"},
    {GP_FEAT_PD_LANES, GP_FEAT_KV_STORE, false,
     "the host store reloads through per-layer hooks of the default lane's calls; the two lanes run theirs "
     "without hooks"},
    {GP_FEAT_PD_LANES, GP_FEAT_STREAMED, false,
     "both lanes read every layer's weights at once; a streaming window sized for one step's groups would "
     "have to hold both lanes'"},
    {GP_FEAT_PD_LANES, GP_FEAT_CPU_FFN, false,
     "the CPU-assisted FFN keeps one step's host staging and activity, which the two lanes would share"},
    {GP_FEAT_PD_LANES, GP_FEAT_SPARSITY, false,
     "the sparse projections' split workspaces are the model state's, one per side, which the two lanes "
     "would share"},
    {GP_FEAT_TP, GP_FEAT_CPU, false,
     "tensor parallel cuts the CUDA engine's weights over GPUs; the CPU reference runs the whole model in one "
     "process"},
    {GP_FEAT_TP, GP_FEAT_PIPELINED, false,
     "both cut the step, tensor parallel over GPUs and the pipeline over one GPU's SM partitions; one cut at a time"},
    {GP_FEAT_TP, GP_FEAT_PD_LANES, false,
     "the lanes are SM partitions of one GPU; tensor parallel steps run on every rank's whole GPU"},
    {GP_FEAT_TP, GP_FEAT_STREAMED, false,
     "each rank's shard is kept whole on its GPU; streaming shards from host memory is not built"},
    {GP_FEAT_TP, GP_FEAT_KV_OFFLOAD, false,
     "each rank's KV cache holds its own heads; offloading them is not built"},
    {GP_FEAT_TP, GP_FEAT_KV_STORE, false,
     "stored prefixes hold the whole model's KV blocks; a rank holds only its heads' part of each"},
    {GP_FEAT_TP, GP_FEAT_SPARSITY, false,
     "a calibration's thresholds and transposed copies are the whole model's projections; a rank holds slices "
     "of them"},
    {GP_FEAT_PREFIX_CACHE, GP_FEAT_KV_OFFLOAD, false,
     "an offloaded sequence's oldest blocks live in host memory at that sequence's own place and are copied "
     "into its part of a staging window each layer; a block shared by several sequences would have to be "
     "in each one's place at once"},
};

int gp_feature_rules(const gp_feature_rule **out)
{
    if (out)
        *out = rules;
    return (int)(sizeof rules / sizeof rules[0]);
}

const char *gp_feature_name(gp_feature f)
{
    return (int)f >= 0 && f < GP_FEAT_COUNT ? names[f] : "?";
}

uint32_t gp_features_mask(const gp_feature_set *f)
{
    uint32_t m = BIT(f->cuda ? GP_FEAT_CUDA : GP_FEAT_CPU);
    const bool on[GP_FEAT_COUNT] = {
        [GP_FEAT_PIPELINED] = f->pipelined,
        [GP_FEAT_PIPE_SHAPE] = f->pipe_shape,
        [GP_FEAT_PREFILL_CHUNK] = f->prefill_chunk,
        [GP_FEAT_STREAMED] = f->vram_budget != 0,
        [GP_FEAT_KV_OFFLOAD] = f->kv_vram_budget != 0,
        [GP_FEAT_KV_STORE] = f->kv_store_bytes != 0,
        [GP_FEAT_SPARSITY] = f->sparsity,
        [GP_FEAT_SPARSITY_STATS] = f->sparsity_stats,
        [GP_FEAT_SPARSE_ALWAYS] = f->sparse_always,
        [GP_FEAT_CPU_FFN] = f->cpu_ffn_budget != 0,
        [GP_FEAT_CPU_FFN_THREADS] = f->cpu_ffn_threads,
        [GP_FEAT_CPU_THREADS] = f->cpu_threads,
        [GP_FEAT_PROMPT_LOGITS] = f->prompt_logits,
        [GP_FEAT_TP] = f->tp,
        [GP_FEAT_TP_PEER] = f->tp_peer,
        [GP_FEAT_AFD] = f->afd,
        [GP_FEAT_PREFIX_CACHE] = f->prefix_cache,
        [GP_FEAT_PD_LANES] = f->pd_lanes,
    };
    for (int k = 0; k < GP_FEAT_COUNT; k++)
        m |= on[k] ? BIT(k) : 0;
    return m;
}

gp_status gp_features_check(const gp_feature_set *f)
{
    if (!f)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_features_check: the feature set is NULL");
    const uint32_t m = gp_features_mask(f);
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        const gp_feature_rule *r = &rules[i];
        const bool a = m & BIT(r->a), b = m & BIT(r->b);
        if (r->needs && a && !b)
            GP_FAIL(GP_ERR_UNSUPPORTED, "%s without %s: %s", names[r->a], names[r->b], r->why);
        if (!r->needs && a && b)
            GP_FAIL(GP_ERR_UNSUPPORTED, "%s with %s: %s", names[r->a], names[r->b], r->why);
    }
    if (f->cpu_ffn_budget && f->vram_budget && f->cpu_ffn_budget >= f->vram_budget)
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s of %llu bytes within %s of %llu bytes: the hot cache is part of the VRAM "
                "budget and would leave nothing for the streamed weights; allowed: a cache below the budget",
                names[GP_FEAT_CPU_FFN], (unsigned long long)f->cpu_ffn_budget, names[GP_FEAT_STREAMED],
                (unsigned long long)f->vram_budget);
    return GP_OK;
}

bool gp_features_graphs(const gp_feature_set *f, const char **why)
{
    const char *w = NULL;
    if (!f || !f->graphs || !f->cuda)
        w = "";
    else if (f->vram_budget)
        w = "a CUDA graph bakes in one step's weight addresses, and streamed weights move between steps";
    else if (f->kv_vram_budget)
        w = "a CUDA graph bakes in one step's copies, and an offloaded KV cache's copies change with every "
            "step's contexts";
    if (why)
        *why = w ? w : "";
    return w == NULL;
}
