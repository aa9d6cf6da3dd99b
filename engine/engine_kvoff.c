/* Offloaded KV memory: each sequence's oldest blocks live in pinned host
 * memory; before a layer's attention the blocks of the call's sequences are
 * copied into the staging window of that layer's parity (attention/'s
 * gp_kv_device_create_offload), the next layer's copy in flight while this
 * one computes; K/V written into offloaded positions (a prefill, a sequence
 * still inside its host quota) go back to the host after the layer's
 * attention. Events only: the host never waits in a call. */
#include <stdlib.h>
#include <string.h>

#include "cuda_util.cuh"
#include "engine_impl.h"

/* A run of host ids [first, first + n) to copy, relative to the first host id. */
typedef struct kvoff_range { int first, n; } kvoff_range;

typedef struct kv_offload {
    gp_kv_memory m;           /* first: the memory's ops are handed &m */
    gp_kv_offload_plan plan;
    int n_layers, block_size;
    size_t row_elems;         /* one token's K (or V) of one layer */
    size_t block_elems;       /* one layer's K (or V) of one block */
    uint16_t *host;           /* pinned [n_layers][2][n_host][block_elems] */
    cudaStream_t h2d, d2h;
    cudaEvent_t copied[2];    /* staging parity q holds its layer's blocks */
    cudaEvent_t used[2];      /* staging parity q was read (and written back): it may be refilled */
    cudaEvent_t attn_done;
    cudaEvent_t in_flight[2]; /* the h2d and d2h streams' work so far, for a copy of tokens to follow */
    /* [n_layers]: host blocks of the layer written by a copy of tokens
     * (a reload), which the layer's next copy into its window waits for */
    cudaEvent_t *written;
    bool *pending;
    /* the call being run: what its layers read and write */
    kvoff_range *rd, *wr;     /* [max_batch] each, merged */
    int n_rd, n_wr;
    int enqueued;             /* highest layer whose copy this call enqueued; -1: none */
    int attended;             /* highest layer whose attention this call finished; -1: none */
    gp_kv_offload_stats st;
} kv_offload;

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

static void off_destroy(gp_kv_memory *m)
{
    kv_offload *o = (kv_offload *)m;
    if (o->h2d)
        cudaStreamSynchronize(o->h2d);
    if (o->d2h)
        cudaStreamSynchronize(o->d2h);
    gp_pinned_free(o->host);
    cudaEvent_t evs[] = {o->copied[0], o->copied[1], o->used[0], o->used[1], o->attn_done, o->in_flight[0],
                         o->in_flight[1]};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i])
            cudaEventDestroy(evs[i]);
    for (int l = 0; o->written && l < o->n_layers; l++)
        if (o->written[l])
            cudaEventDestroy(o->written[l]);
    if (o->h2d)
        cudaStreamDestroy(o->h2d);
    if (o->d2h)
        cudaStreamDestroy(o->d2h);
    free(o->written);
    free(o->pending);
    free(o->rd);
    free(o->wr);
    gp_kv_memory_fini(m);
    free(o);
}

/* Host run [first, first + n) of one layer part: its host memory and its staging window. */
static uint16_t *host_at(const kv_offload *o, int layer, int part, int first)
{
    return o->host + (((size_t)layer * 2 + (size_t)part) * (size_t)o->plan.n_host + (size_t)first) * o->block_elems;
}

static uint16_t *window_at(const kv_offload *o, int layer, int part, int first)
{
    uint16_t *base = part ? gp_kv_device_v(o->m.kv, layer) : gp_kv_device_k(o->m.kv, layer);
    return base + ((size_t)o->plan.n_device + (size_t)first) * o->block_elems;
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

/* The call's host runs: what each sequence reads and writes below its host quota. */
static gp_status off_begin(void *self, const gp_kv_plan *plan, cudaStream_t s)
{
    (void)s;
    kv_offload *o = self;
    o->n_rd = o->n_wr = 0;
    o->enqueued = o->attended = -1;
    /* sequences in id order make adjacent runs meet */
    const int hs = o->plan.host_blocks_per_seq, bs = o->block_size;
    for (int i = 0; i < plan->n; i++) {
        const gp_kv_span *sp = &plan->spans[i];
        const int base = sp->seq * hs, rb = div_up(sp->read_end, bs);
        add_range(o->rd, &o->n_rd, base, rb < hs ? rb : hs);
        if (sp->w1 > sp->w0 && sp->w0 / bs < hs) {
            const int b0 = sp->w0 / bs, b1 = div_up(sp->w1, bs);
            add_range(o->wr, &o->n_wr, base + b0, (b1 < hs ? b1 : hs) - b0);
        }
    }
    return GP_OK;
}

/* Layer's offloaded blocks into its staging window, once its previous
 * reader (two layers back, or the last call's) is done with it and a
 * reload's writes into its host blocks have landed. */
static gp_status enqueue_copy(kv_offload *o, int layer)
{
    const int q = layer % 2;
    GP_CUDA_TRY(cudaStreamWaitEvent(o->h2d, o->used[q], 0));
    if (o->pending[layer]) {
        GP_CUDA_TRY(cudaStreamWaitEvent(o->h2d, o->written[layer], 0));
        o->pending[layer] = false;
    }
    for (int part = 0; part < 2; part++)
        for (int i = 0; i < o->n_rd; i++) {
            const size_t bytes = (size_t)o->rd[i].n * o->block_elems * sizeof(uint16_t);
            GP_CUDA_TRY(cudaMemcpyAsync(window_at(o, layer, part, o->rd[i].first),
                                        host_at(o, layer, part, o->rd[i].first), bytes, cudaMemcpyHostToDevice,
                                        o->h2d));
            o->st.bytes_in += bytes;
            o->st.copies_in++;
        }
    GP_CUDA_TRY(cudaEventRecord(o->copied[q], o->h2d));
    o->enqueued = layer;
    return GP_OK;
}

static gp_status off_before_attn(void *self, int layer, cudaStream_t s)
{
    kv_offload *o = self;
    if (layer <= o->attended)
        GP_FAIL(GP_ERR_UNSUPPORTED, "offloaded KV cache: layer %d's attention a second time in one call (after layer "
                "%d's); each layer's blocks are copied once for the whole call, so micro-batches (the pipelined "
                "engine) are not supported", layer, o->attended);
    if (layer > o->enqueued)
        GP_TRY(enqueue_copy(o, layer));
    /* the current engine stream work also orders the copy after the previous step's readers */
    GP_CUDA_TRY(cudaStreamWaitEvent(s, o->copied[layer % 2], 0));
    return GP_OK;
}

static gp_status off_after_attn(void *self, int layer, cudaStream_t s)
{
    kv_offload *o = self;
    const int q = layer % 2;
    o->attended = layer;
    if (o->n_wr) {
        GP_CUDA_TRY(cudaEventRecord(o->attn_done, s));
        GP_CUDA_TRY(cudaStreamWaitEvent(o->d2h, o->attn_done, 0));
        for (int part = 0; part < 2; part++)
            for (int i = 0; i < o->n_wr; i++) {
                const size_t bytes = (size_t)o->wr[i].n * o->block_elems * sizeof(uint16_t);
                GP_CUDA_TRY(cudaMemcpyAsync(host_at(o, layer, part, o->wr[i].first),
                                            window_at(o, layer, part, o->wr[i].first), bytes,
                                            cudaMemcpyDeviceToHost, o->d2h));
                o->st.bytes_out += bytes;
                o->st.copies_out++;
            }
        /* every later copy of this parity waits for it, and the d2h stream runs in order: no host copy
           is read before the write-backs before it landed */
        GP_CUDA_TRY(cudaEventRecord(o->used[q], o->d2h));
    } else
        GP_CUDA_TRY(cudaEventRecord(o->used[q], s));
    if (layer + 1 < o->n_layers)
        GP_TRY(enqueue_copy(o, layer + 1));
    return GP_OK;
}

/* Positions below the host quota move between the buffers and the
 * sequence's host blocks (consecutive in host memory: table entry i of
 * sequence s is host block s x quota + i), the rest through the device
 * blocks of its table. */
static gp_status off_copy(gp_kv_memory *m, int layer, int seq, const int32_t *table, int pos0, int n, void *k,
                          void *v, gp_kv_copy_dir dir, cudaStream_t s)
{
    kv_offload *o = (kv_offload *)m;
    const int host_end = o->plan.host_blocks_per_seq * o->block_size;
    const int h = pos0 >= host_end ? 0 : pos0 + n <= host_end ? n : host_end - pos0;
    /* write-backs and window fills still in flight on these host blocks come first */
    for (int i = 0; i < 2; i++) {
        GP_CUDA_TRY(cudaEventRecord(o->in_flight[i], i ? o->d2h : o->h2d));
        GP_CUDA_TRY(cudaStreamWaitEvent(s, o->in_flight[i], 0));
    }
    uint16_t *buf[2] = {k, v};
    if (h > 0) {
        const size_t bytes = (size_t)h * o->row_elems * sizeof(uint16_t);
        for (int part = 0; part < 2; part++) {
            uint16_t *hp = host_at(o, layer, part, seq * o->plan.host_blocks_per_seq) + (size_t)pos0 * o->row_elems;
            GP_CUDA_TRY(cudaMemcpyAsync(dir == GP_KV_TO_CACHE ? hp : buf[part], dir == GP_KV_TO_CACHE ? buf[part] : hp,
                                        bytes, cudaMemcpyDefault, s));
        }
        if (dir == GP_KV_TO_CACHE) {
            GP_CUDA_TRY(cudaEventRecord(o->written[layer], s));
            o->pending[layer] = true;
        }
    }
    if (n > h)
        GP_TRY(gp_kv_copy_tokens(gp_kv_device_layout(m->kv), gp_kv_device_k(m->kv, layer),
                                 gp_kv_device_v(m->kv, layer), table, pos0 + h, n - h,
                                 buf[0] + (size_t)h * o->row_elems, buf[1] + (size_t)h * o->row_elems, dir, s));
    return GP_OK;
}

/* Benchmark contexts: the device blocks were filled in place; each layer's
 * offloaded ones are filled through its window and copied down before the
 * next layer of its parity refills the window. */
static gp_status off_filled(gp_kv_memory *m, int layer, cudaStream_t s)
{
    kv_offload *o = (kv_offload *)m;
    if (!o->plan.n_host)
        return GP_OK;
    for (int part = 0; part < 2; part++)
        GP_CUDA_TRY(cudaMemcpyAsync(host_at(o, layer, part, 0), window_at(o, layer, part, 0),
                                    (size_t)o->plan.n_host * o->block_elems * sizeof(uint16_t),
                                    cudaMemcpyDeviceToHost, s));
    return GP_OK;
}

static const gp_kv_memory_ops offload_ops = {
    .hooks = {.begin_batch = off_begin, .before_attn = off_before_attn, .after_attn = off_after_attn},
    .copy_tokens = off_copy,
    .filled_in_place = off_filled,
    .destroy = off_destroy};

static gp_status off_alloc(kv_offload *o, int max_batch)
{
    o->rd = calloc((size_t)max_batch, sizeof *o->rd);
    o->wr = calloc((size_t)max_batch, sizeof *o->wr);
    o->written = calloc((size_t)o->n_layers, sizeof *o->written);
    o->pending = calloc((size_t)o->n_layers, sizeof *o->pending);
    if (!o->rd || !o->wr || !o->written || !o->pending)
        GP_FAIL(GP_ERR_NO_MEMORY, "offloaded KV cache: out of host memory");
    if (o->plan.n_host)
        GP_TRY(gp_pinned_alloc((void **)&o->host, (size_t)o->plan.host_bytes, "the offloaded KV blocks"));
    GP_CUDA_TRY(cudaStreamCreateWithFlags(&o->h2d, cudaStreamNonBlocking));
    GP_CUDA_TRY(cudaStreamCreateWithFlags(&o->d2h, cudaStreamNonBlocking));
    cudaEvent_t *evs[] = {&o->copied[0], &o->copied[1], &o->used[0], &o->used[1], &o->attn_done, &o->in_flight[0],
                          &o->in_flight[1]};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        GP_CUDA_TRY(cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming));
    for (int l = 0; l < o->n_layers; l++)
        GP_CUDA_TRY(cudaEventCreateWithFlags(&o->written[l], cudaEventDisableTiming));
    return GP_OK;
}

gp_status gp_kv_memory_create_offload(gp_kv_device *kv, const gp_kv_offload_plan *plan, int max_batch,
                                      int n_layers, int block_size, gp_kv_memory **out)
{
    *out = NULL;
    kv_offload *o = calloc(1, sizeof *o);
    if (!o)
        GP_FAIL(GP_ERR_NO_MEMORY, "offloaded KV cache: out of host memory");
    const gp_kv_layout *l = gp_kv_device_layout(kv);
    o->plan = *plan;
    o->n_layers = n_layers;
    o->block_size = block_size;
    o->row_elems = (size_t)l->n_kv_heads * (size_t)l->head_dim;
    o->block_elems = (size_t)block_size * o->row_elems;
    o->enqueued = o->attended = -1;
    gp_status st = gp_kv_memory_init(&o->m, &offload_ops, kv, max_batch);
    if (st == GP_OK)
        st = off_alloc(o, max_batch);
    if (st != GP_OK) {
        off_destroy(&o->m);
        return st;
    }
    o->m.offload = &o->plan;
    o->m.offload_stats = &o->st;
    *out = &o->m;
    return GP_OK;
}

gp_status gp_engine_kv_offload_stats(gp_engine *e, gp_kv_offload_stats *out, bool reset)
{
    gp_kv_offload_stats *st = e && e->km ? e->km->offload_stats : NULL;
    if (!st)
        GP_FAIL(GP_ERR_STATE, "offloaded KV statistics: the engine's KV cache is not offloaded (kv_vram_budget 0)");
    if (out)
        *out = *st;
    if (reset)
        memset(st, 0, sizeof *st);
    return GP_OK;
}

const gp_kv_offload_plan *gp_engine_kv_offload(const gp_engine *e)
{
    return e && e->km ? e->km->offload : NULL;
}
