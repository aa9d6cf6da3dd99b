/* Offloaded KV cache (issue #18): each sequence's oldest blocks live in
 * pinned host memory; before a layer's attention the blocks of the step's
 * sequences are copied into the staging window of that layer's parity
 * (attention/'s gp_kv_device_create_offload), the next layer's copy in
 * flight while this one computes; K/V written into offloaded positions (a
 * prefill, a sequence still inside its host quota) go back to the host after
 * the layer's attention. Events only: the host never waits in a step. */
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_impl.h"

/* A run of host ids [first, first + n) to copy, relative to the first host id. */
typedef struct kvoff_range { int first, n; } kvoff_range;

struct gp_engine_kvoff {
    gp_kv_offload_plan plan;
    size_t block_elems;       /* one layer's K (or V) of one block */
    uint16_t *host;           /* pinned [n_layers][2][n_host][block_elems] */
    cudaStream_t h2d, d2h;
    cudaEvent_t copied[2];    /* staging parity q holds its layer's blocks */
    cudaEvent_t used[2];      /* staging parity q was read (and written back): it may be refilled */
    cudaEvent_t attn_done;
    /* the call being run: what its layers read and write */
    kvoff_range *rd, *wr;     /* [max_batch] each, merged */
    int n_rd, n_wr;
    int enqueued;             /* highest layer whose copy this call enqueued; -1: none */
    gp_kv_offload_stats st;
};

static int div_up(long long a, long long b) { return (int)((a + b - 1) / b); }

gp_status gp_engine_kv_offload_plan(const gp_config *c, const gp_engine_params *p, gp_dtype dt,
                                    gp_kv_offload_plan *out)
{
    memset(out, 0, sizeof *out);
    const int S = p->max_batch, mb = div_up(p->max_context, p->block_size), L = c->n_layers;
    const uint64_t bpb = (uint64_t)p->block_size * (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim *
                         (uint64_t)gp_dtype_size(dt); /* one layer's K or V of one block */
    gp_kv_layout l = {.n_layers = L, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim,
                      .block_size = p->block_size, .n_blocks = S * mb};
    int a = 0;
    GP_TRY(gp_kv_device_offload_align(&l, dt, &a));
    out->align_blocks = a;
    out->full_bytes = (uint64_t)S * (uint64_t)mb * bpb * 2u * (uint64_t)L;
    out->budget = p->kv_vram_budget;
    /* device blocks per sequence d: S x d a multiple of a; the rest of each table on the host */
    int step = 1;
    while ((long long)S * step % a)
        step++;
    for (int d = mb / step * step; d >= 0; d -= step) {
        const int n_dev = S * d, n_host = S * (mb - d), pad = div_up(n_host, a) * a;
        const uint64_t dev = (uint64_t)n_dev * bpb * 2u * (uint64_t)L + 4u * (uint64_t)pad * bpb;
        if (d == mb || dev <= p->kv_vram_budget) {
            if (d == mb && out->full_bytes > p->kv_vram_budget)
                continue;
            out->device_blocks_per_seq = d;
            out->host_blocks_per_seq = mb - d;
            out->n_device = n_dev;
            out->n_host = n_host;
            out->n_blocks = n_dev + pad;
            out->device_bytes = d == mb ? out->full_bytes : dev;
            out->host_bytes = (uint64_t)n_host * bpb * 2u * (uint64_t)L;
            return GP_OK;
        }
    }
    const int pad = div_up((long long)S * mb, a) * a;
    GP_FAIL(GP_ERR_INVALID_ARG, "--kv-vram-budget %llu bytes: below the least an offloaded KV cache of batch %d x "
            "context %d needs, %llu bytes (every block on the host and the two staging buffers of one layer's K and "
            "V, %d blocks each); the whole cache on the device takes %llu",
            (unsigned long long)p->kv_vram_budget, S, p->max_context, (unsigned long long)(4u * (uint64_t)pad * bpb),
            pad, (unsigned long long)out->full_bytes);
}

void gp_engine_kvoff_free(gp_engine *e)
{
    gp_engine_kvoff *ko = e ? e->ko : NULL;
    if (!ko)
        return;
    if (ko->h2d)
        cudaStreamSynchronize(ko->h2d);
    if (ko->d2h)
        cudaStreamSynchronize(ko->d2h);
    gp_pinned_free(ko->host);
    for (int q = 0; q < 2; q++) {
        if (ko->copied[q])
            cudaEventDestroy(ko->copied[q]);
        if (ko->used[q])
            cudaEventDestroy(ko->used[q]);
    }
    if (ko->attn_done)
        cudaEventDestroy(ko->attn_done);
    if (ko->h2d)
        cudaStreamDestroy(ko->h2d);
    if (ko->d2h)
        cudaStreamDestroy(ko->d2h);
    free(ko->rd);
    free(ko->wr);
    free(ko);
    e->ko = NULL;
}

gp_status gp_engine_kvoff_create(gp_engine *e, const gp_kv_offload_plan *plan)
{
    gp_engine_kvoff *ko = calloc(1, sizeof *ko);
    if (!ko)
        GP_FAIL(GP_ERR_NO_MEMORY, "offloaded KV cache: out of host memory");
    e->ko = ko;
    ko->plan = *plan;
    ko->enqueued = -1;
    ko->block_elems = (size_t)e->p.block_size * (size_t)e->cfg.n_kv_heads * (size_t)e->cfg.head_dim;
    ko->rd = calloc((size_t)e->p.max_batch, sizeof *ko->rd);
    ko->wr = calloc((size_t)e->p.max_batch, sizeof *ko->wr);
    if (!ko->rd || !ko->wr)
        GP_FAIL(GP_ERR_NO_MEMORY, "offloaded KV cache: out of host memory");
    if (plan->n_host)
        GP_TRY(gp_pinned_alloc((void **)&ko->host, (size_t)plan->host_bytes, "the offloaded KV blocks"));
    GP_CUDA_TRY(cudaStreamCreateWithFlags(&ko->h2d, cudaStreamNonBlocking));
    GP_CUDA_TRY(cudaStreamCreateWithFlags(&ko->d2h, cudaStreamNonBlocking));
    for (int q = 0; q < 2; q++) {
        GP_CUDA_TRY(cudaEventCreateWithFlags(&ko->copied[q], cudaEventDisableTiming));
        GP_CUDA_TRY(cudaEventCreateWithFlags(&ko->used[q], cudaEventDisableTiming));
    }
    GP_CUDA_TRY(cudaEventCreateWithFlags(&ko->attn_done, cudaEventDisableTiming));
    return GP_OK;
}

/* Host run [first, first + n) of one layer part: its host memory and its staging window. */
static uint16_t *host_at(const gp_engine *e, int layer, int part, int first)
{
    const gp_engine_kvoff *ko = e->ko;
    return ko->host + (((size_t)layer * 2 + (size_t)part) * (size_t)ko->plan.n_host + (size_t)first) * ko->block_elems;
}

static uint16_t *window_at(const gp_engine *e, int layer, int part, int first)
{
    uint16_t *base = part ? gp_kv_device_v(e->kv, layer) : gp_kv_device_k(e->kv, layer);
    return base + ((size_t)e->ko->plan.n_device + (size_t)first) * e->ko->block_elems;
}

/* Appends [first, first + n) to a list, joined to the last run when adjacent. */
static void add_range(kvoff_range *r, int *n, int first, int cnt)
{
    if (cnt <= 0)
        return;
    if (*n && r[*n - 1].first + r[*n - 1].n == first)
        r[*n - 1].n += cnt;
    else
        r[(*n)++] = (kvoff_range){first, cnt};
}

void gp_engine_kvoff_plan_begin(gp_engine *e)
{
    e->ko->n_rd = e->ko->n_wr = 0;
    e->ko->enqueued = -1;
}

void gp_engine_kvoff_plan_seq(gp_engine *e, int seq, int read_end, int w0, int w1)
{
    gp_engine_kvoff *ko = e->ko;
    /* sequences in id order make adjacent runs meet */
    const int hs = ko->plan.host_blocks_per_seq, bs = e->p.block_size, base = seq * hs;
    const int rb = div_up(read_end, bs);
    add_range(ko->rd, &ko->n_rd, base, rb < hs ? rb : hs);
    if (w1 > w0 && w0 / bs < hs) {
        const int b0 = w0 / bs, b1 = div_up(w1, bs);
        add_range(ko->wr, &ko->n_wr, base + b0, (b1 < hs ? b1 : hs) - b0);
    }
}

/* Layer's offloaded blocks into its staging window, once its previous
 * reader (two layers back, or the last call's) is done with it. */
static gp_status enqueue_copy(gp_engine *e, int layer)
{
    gp_engine_kvoff *ko = e->ko;
    const int q = layer % 2;
    GP_CUDA_TRY(cudaStreamWaitEvent(ko->h2d, ko->used[q], 0));
    for (int part = 0; part < 2; part++)
        for (int i = 0; i < ko->n_rd; i++) {
            const size_t bytes = (size_t)ko->rd[i].n * ko->block_elems * sizeof(uint16_t);
            GP_CUDA_TRY(cudaMemcpyAsync(window_at(e, layer, part, ko->rd[i].first),
                                        host_at(e, layer, part, ko->rd[i].first), bytes, cudaMemcpyHostToDevice,
                                        ko->h2d));
            ko->st.bytes_in += bytes;
            ko->st.copies_in++;
        }
    GP_CUDA_TRY(cudaEventRecord(ko->copied[q], ko->h2d));
    ko->enqueued = layer;
    return GP_OK;
}

gp_status gp_engine_kvoff_before_attn(gp_engine *e, int layer, cudaStream_t s)
{
    gp_engine_kvoff *ko = e->ko;
    if (!ko)
        return GP_OK;
    if (layer > ko->enqueued)
        GP_TRY(enqueue_copy(e, layer));
    /* the current engine stream work also orders the copy after the previous step's readers */
    GP_CUDA_TRY(cudaStreamWaitEvent(s, ko->copied[layer % 2], 0));
    return GP_OK;
}

gp_status gp_engine_kvoff_after_attn(gp_engine *e, int layer, cudaStream_t s)
{
    gp_engine_kvoff *ko = e->ko;
    if (!ko)
        return GP_OK;
    const int q = layer % 2;
    if (ko->n_wr) {
        GP_CUDA_TRY(cudaEventRecord(ko->attn_done, s));
        GP_CUDA_TRY(cudaStreamWaitEvent(ko->d2h, ko->attn_done, 0));
        for (int part = 0; part < 2; part++)
            for (int i = 0; i < ko->n_wr; i++) {
                const size_t bytes = (size_t)ko->wr[i].n * ko->block_elems * sizeof(uint16_t);
                GP_CUDA_TRY(cudaMemcpyAsync(host_at(e, layer, part, ko->wr[i].first),
                                            window_at(e, layer, part, ko->wr[i].first), bytes,
                                            cudaMemcpyDeviceToHost, ko->d2h));
                ko->st.bytes_out += bytes;
                ko->st.copies_out++;
            }
        /* every later copy of this parity waits for it, and the d2h stream runs in order: no host copy
           is read before the write-backs before it landed */
        GP_CUDA_TRY(cudaEventRecord(ko->used[q], ko->d2h));
    } else
        GP_CUDA_TRY(cudaEventRecord(ko->used[q], s));
    if (layer + 1 < e->cfg.n_layers)
        GP_TRY(enqueue_copy(e, layer + 1));
    return GP_OK;
}

gp_status gp_engine_kv_offload_stats(gp_engine *e, gp_kv_offload_stats *out, bool reset)
{
    if (!e || !e->ko)
        GP_FAIL(GP_ERR_STATE, "offloaded KV statistics: the engine's KV cache is not offloaded (kv_vram_budget 0)");
    if (out)
        *out = e->ko->st;
    if (reset)
        memset(&e->ko->st, 0, sizeof e->ko->st);
    return GP_OK;
}

const gp_kv_offload_plan *gp_engine_kv_offload(const gp_engine *e)
{
    return e && e->ko ? &e->ko->plan : NULL;
}

/* Benchmark contexts: the device blocks were filled in place; each layer's
 * offloaded ones are filled through its window and copied down before the
 * next layer of its parity refills the window. */
gp_status gp_engine_kvoff_fill_host(gp_engine *e, int layer, cudaStream_t s)
{
    gp_engine_kvoff *ko = e->ko;
    if (!ko || !ko->plan.n_host)
        return GP_OK;
    for (int part = 0; part < 2; part++)
        GP_CUDA_TRY(cudaMemcpyAsync(host_at(e, layer, part, 0), window_at(e, layer, part, 0),
                                    (size_t)ko->plan.n_host * ko->block_elems * sizeof(uint16_t),
                                    cudaMemcpyDeviceToHost, s));
    return GP_OK;
}
