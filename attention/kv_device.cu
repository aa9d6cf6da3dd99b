/* Device paged KV cache: per-layer K/V pools, the per-step block tables,
 * lengths and positions, and their upload through pinned staging buffers. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "gp_half.cuh"
#include "cuda_util.cuh"
#include "gp_attention.h"
#include "kv_vmm.h"
#include "gp_kvcache.h"

/* Two staging buffers: the host may fill one while the GPU still copies the
 * other; only a host three uploads ahead would have to wait. */
#define GP_KV_STAGING_SLOTS 2

struct gp_kv_device {
    gp_kv_layout layout;
    gp_dtype dtype;          /* of the pools: GP_DTYPE_BF16 or GP_DTYPE_F16 */
    int max_seqs;
    int max_blocks;          /* table row stride */
    uint64_t layer_elems;    /* elements in one layer's K (or V) pool */
    uint16_t *pools;         /* device [n_layers][2][layer_elems]: K then V of each layer */
    int32_t *d_tables;       /* device [max_seqs][max_blocks] */
    int32_t *d_lens_pos;     /* device [2][max_seqs]: lens, then positions */
    int32_t *staging[GP_KV_STAGING_SLOTS]; /* pinned, each [max_seqs*max_blocks + 2*max_seqs]:
                                              tables [B][n_cols] packed, then [2][max_seqs] */
    cudaEvent_t staged[GP_KV_STAGING_SLOTS]; /* recorded after the copy that read the slot */
    int slot_used[GP_KV_STAGING_SLOTS];
    int next_slot;
    gp_kv_vmm *vmm;          /* offloaded: the pools' mapping (pools is its base); NULL: one allocation */
    int n_device;            /* offloaded: ids [n_device, n_blocks) are windows onto the staging buffers */
    int64_t *seen;           /* host [seen_cap]: call stamp per seq id, for the distinctness check */
    int seen_cap;
    int64_t call_count;
};

/* Sizes of the parts; 0 return on overflow, a non-positive field or a
 * dtype that is not 16-bit. */
static int gp_kv_device_sizes(const gp_kv_layout *l, gp_dtype dtype, int max_seqs, int max_blocks,
                              uint64_t *pool_bytes, uint64_t *table_elems)
{
    if (!l || !gp_dtype_is_half(dtype) || l->n_layers <= 0 || max_seqs <= 0 || max_blocks <= 0)
        return 0;
    uint64_t elems = gp_kv_layer_elems(l), a, b;
    if (elems == 0 || !gp_mul_u64(elems, 2u * (uint64_t)gp_dtype_size(dtype), &a)
        || !gp_mul_u64(a, (uint64_t)l->n_layers, &b))
        return 0;
    *pool_bytes = b;
    return gp_mul_u64((uint64_t)max_seqs, (uint64_t)max_blocks, table_elems);
}

extern "C" uint64_t gp_kv_device_bytes(const gp_kv_layout *l, gp_dtype dtype, int max_seqs,
                                       int max_blocks_per_seq)
{
    uint64_t pool, tab, t, total;
    if (!gp_kv_device_sizes(l, dtype, max_seqs, max_blocks_per_seq, &pool, &tab))
        return 0;
    if (!gp_add_u64(tab, 2u * (uint64_t)max_seqs, &t) || !gp_mul_u64(t, sizeof(int32_t), &t)
        || !gp_add_u64(pool, t, &total))
        return 0;
    return total;
}

extern "C" gp_status gp_kv_device_offload_align(const gp_kv_layout *l, gp_dtype dtype, int *blocks)
{
    int device = 0;
    size_t g = 0;
    GP_CUDA_TRY(cudaGetDevice(&device));
    GP_TRY(gp_kv_vmm_granularity(device, &g));
    const size_t bb = (size_t)l->block_size * (size_t)l->n_kv_heads * (size_t)l->head_dim * gp_dtype_size(dtype);
    size_t a = g, b = bb; /* blocks = g / gcd(g, bb) */
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    *blocks = (int)(g / a);
    return GP_OK;
}

static gp_status kv_device_create(const gp_kv_layout *l, gp_dtype dtype, int max_seqs, int max_blocks_per_seq,
                                  int n_device, gp_kv_device **out);

extern "C" gp_status gp_kv_device_create(const gp_kv_layout *l, gp_dtype dtype, int max_seqs,
                                         int max_blocks_per_seq, gp_kv_device **out)
{
    return kv_device_create(l, dtype, max_seqs, max_blocks_per_seq, -1, out);
}

extern "C" gp_status gp_kv_device_create_offload(const gp_kv_layout *l, gp_dtype dtype, int max_seqs,
                                                 int max_blocks_per_seq, int n_device, gp_kv_device **out)
{
    if (!l || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_device_create_offload: layout and out must not be NULL");
    *out = NULL;
    GP_TRY(gp_dtype_check_half(dtype, "gp_kv_device_create_offload"));
    GP_TRY(gp_kv_layout_check(l, max_seqs, max_blocks_per_seq, "gp_kv_device_create_offload"));
    int align = 0;
    GP_TRY(gp_kv_device_offload_align(l, dtype, &align));
    if (n_device < 0 || n_device > l->n_blocks || n_device % align || (l->n_blocks - n_device) % align)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_device_create_offload: %d device blocks of %d: allowed 0..%d, and it "
                "and the offloaded blocks each a multiple of %d (the device's mapping granularity in blocks)",
                n_device, l->n_blocks, l->n_blocks, align);
    return kv_device_create(l, dtype, max_seqs, max_blocks_per_seq, n_device, out);
}

static gp_status kv_device_create(const gp_kv_layout *l, gp_dtype dtype, int max_seqs, int max_blocks_per_seq,
                                  int n_device, gp_kv_device **out)
{
    if (!l || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_device_create: layout and out must not be NULL");
    *out = NULL;
    GP_TRY(gp_dtype_check_half(dtype, "gp_kv_device_create"));
    GP_TRY(gp_kv_layout_check(l, max_seqs, max_blocks_per_seq, "gp_kv_device_create"));
    uint64_t pool_bytes, table_elems;
    uint64_t total = gp_kv_device_bytes(l, dtype, max_seqs, max_blocks_per_seq);
    if (!gp_kv_device_sizes(l, dtype, max_seqs, max_blocks_per_seq, &pool_bytes, &table_elems)
        || total == 0 || table_elems + 2u * (uint64_t)max_seqs > SIZE_MAX / sizeof(int32_t))
        GP_FAIL(GP_ERR_OVERFLOW, "gp_kv_device_create: %d layers x %d blocks x %d tokens x %d "
                "KV heads x %d dims (and %d x %d table entries) overflow", l->n_layers,
                l->n_blocks, l->block_size, l->n_kv_heads, l->head_dim, max_seqs,
                max_blocks_per_seq);

    const uint64_t part_bytes = pool_bytes / (2u * (uint64_t)l->n_layers);
    if (n_device >= 0) { /* own blocks per part, and four staging windows */
        const uint64_t own = part_bytes / (uint64_t)l->n_blocks * (uint64_t)n_device;
        total = total - pool_bytes + own * 2u * (uint64_t)l->n_layers + 4u * (part_bytes - own);
        pool_bytes = own * 2u * (uint64_t)l->n_layers + 4u * (part_bytes - own);
    }
    size_t free_b = 0, total_b = 0;
    GP_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    if (total > (uint64_t)free_b)
        GP_FAIL(GP_ERR_DEVICE_MEMORY, "gp_kv_device_create: needs %llu bytes (K/V pools %llu for "
                "%d layers, tables %llu) but the device has %llu free of %llu",
                (unsigned long long)total, (unsigned long long)pool_bytes, l->n_layers,
                (unsigned long long)(total - pool_bytes), (unsigned long long)free_b,
                (unsigned long long)total_b);

    gp_kv_device *kv = (gp_kv_device *)calloc(1, sizeof *kv);
    if (!kv)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_kv_device_create: out of host memory");
    kv->layout = *l;
    kv->dtype = dtype;
    kv->max_seqs = max_seqs;
    kv->max_blocks = max_blocks_per_seq;
    kv->layer_elems = gp_kv_layer_elems(l);
    gp_status st = GP_OK;
    size_t stage_bytes = ((size_t)table_elems + 2u * (size_t)max_seqs) * sizeof(int32_t);

    kv->n_device = n_device;
    if (n_device >= 0) {
        int device = 0;
        GP_CUDA_GOTO(cudaGetDevice(&device), st, fail);
        const size_t own = (size_t)(part_bytes / (uint64_t)l->n_blocks) * (size_t)n_device;
        if ((st = gp_kv_vmm_create(device, 2 * l->n_layers, own, (size_t)part_bytes - own, &kv->vmm,
                                   (void **)&kv->pools)) != GP_OK)
            goto fail;
    } else if ((st = gp_device_alloc((void **)&kv->pools, (size_t)pool_bytes, "KV cache K/V pools")) != GP_OK)
        goto fail;
    if ((st = gp_device_alloc((void **)&kv->d_tables, (size_t)table_elems * sizeof(int32_t),
                                 "KV cache block tables [max_seqs][max_blocks]")) != GP_OK
        || (st = gp_device_alloc((void **)&kv->d_lens_pos, 2u * (size_t)max_seqs * sizeof(int32_t),
                                 "KV cache lengths and positions [2][max_seqs]")) != GP_OK)
        goto fail;
    /* Zeroed pools make a never-written slot read as 0 rather than garbage;
     * -1 table entries make a stray read fault instead of reading a block. */
    GP_CUDA_GOTO(cudaMemset(kv->pools, 0, (size_t)(part_bytes * 2u * (uint64_t)l->n_layers)), st, fail);
    GP_CUDA_GOTO(cudaMemset(kv->d_tables, 0xff, (size_t)table_elems * sizeof(int32_t)), st,
                      fail);
    GP_CUDA_GOTO(cudaMemset(kv->d_lens_pos, 0, 2u * (size_t)max_seqs * sizeof(int32_t)), st,
                      fail);
    for (int i = 0; i < GP_KV_STAGING_SLOTS; i++) {
        if ((st = gp_pinned_alloc((void **)&kv->staging[i], stage_bytes,
                                  "KV cache table staging (pinned host)")) != GP_OK
            || (st = gp_device_event_create(&kv->staged[i], cudaEventDisableTiming,
                                            "KV cache staging event")) != GP_OK)
            goto fail;
    }
    GP_CUDA_GOTO(cudaDeviceSynchronize(), st, fail); /* the memsets, before first use */
    *out = kv;
    return GP_OK;
fail:
    gp_kv_device_destroy(kv);
    return st;
}

extern "C" void gp_kv_device_destroy(gp_kv_device *kv)
{
    if (!kv)
        return;
    /* In-flight copies may still read staging and kernels the pools. */
    (void)cudaDeviceSynchronize();
    for (int i = 0; i < GP_KV_STAGING_SLOTS; i++) {
        if (kv->staged[i])
            (void)cudaEventDestroy(kv->staged[i]);
        gp_pinned_free(kv->staging[i]);
    }
    if (kv->vmm)
        gp_kv_vmm_destroy(kv->vmm);
    else
        gp_device_free(kv->pools);
    gp_device_free(kv->d_tables);
    gp_device_free(kv->d_lens_pos);
    (void)cudaGetLastError();
    free(kv->seen);
    free(kv);
}

/* Takes the next staging slot, waiting until the copy that last read it is
 * done (normally already). */
static gp_status gp_kv_take_slot(gp_kv_device *kv, const char *fn, cudaStream_t stream,
                                 int32_t **slot_out, int *slot_index)
{
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    GP_CUDA_TRY(cudaStreamIsCapturing(stream, &cap));
    if (cap != cudaStreamCaptureStatusNone)
        GP_FAIL(GP_ERR_STATE, "%s: the stream is capturing a graph; upload the step tables "
                "before launching the graph instead (the copy reads a reused host buffer)", fn);
    int i = kv->next_slot;
    if (kv->slot_used[i])
        GP_TRY(gp_device_event_wait(kv->staged[i], "the previous copy from the KV staging slot"));
    *slot_out = kv->staging[i];
    *slot_index = i;
    return GP_OK;
}

/* Enqueues the copies of a filled slot: tables [B][n_cols] packed at the
 * slot start, lens/positions [2][max_seqs] after the table area. */
static gp_status gp_kv_enqueue(gp_kv_device *kv, int slot, int B, int n_cols, cudaStream_t stream)
{
    int32_t *s = kv->staging[slot];
    int32_t *lp = s + (size_t)kv->max_seqs * (size_t)kv->max_blocks;
    GP_CUDA_TRY(cudaMemcpy2DAsync(kv->d_tables, (size_t)kv->max_blocks * sizeof(int32_t), s,
                                       (size_t)n_cols * sizeof(int32_t),
                                       (size_t)n_cols * sizeof(int32_t), (size_t)B,
                                       cudaMemcpyHostToDevice, stream));
    GP_CUDA_TRY(cudaMemcpy2DAsync(kv->d_lens_pos, (size_t)kv->max_seqs * sizeof(int32_t), lp,
                                       (size_t)kv->max_seqs * sizeof(int32_t),
                                       (size_t)B * sizeof(int32_t), 2, cudaMemcpyHostToDevice,
                                       stream));
    GP_CUDA_TRY(cudaEventRecord(kv->staged[slot], stream));
    kv->slot_used[slot] = 1;
    kv->next_slot = (slot + 1) % GP_KV_STAGING_SLOTS;
    return GP_OK;
}

static gp_status gp_kv_check_B(const gp_kv_device *kv, const char *fn, int B)
{
    if (!kv)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: kv is NULL", fn);
    if (B < 1 || B > kv->max_seqs)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: B = %d is outside [1, %d] (max_seqs)", fn, B,
                kv->max_seqs);
    return GP_OK;
}

extern "C" gp_status gp_kv_device_sync_tables(gp_kv_device *kv, const gp_kv_tables *t, int B,
                                              const int *seq_ids, void *stream)
{
    static const char fn[] = "gp_kv_device_sync_tables";
    GP_TRY(gp_kv_check_B(kv, fn, B));
    if (!t || !seq_ids)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: tables and seq_ids must not be NULL", fn);
    const gp_kv_layout *hl = gp_kv_tables_layout(t), *dl = &kv->layout;
    if (hl->n_layers != dl->n_layers || hl->n_kv_heads != dl->n_kv_heads
        || hl->head_dim != dl->head_dim || hl->block_size != dl->block_size
        || hl->n_blocks != dl->n_blocks)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: host tables layout (%d layers, %d KV heads, head_dim %d, "
                "block_size %d, %d blocks) differs from the device cache (%d, %d, %d, %d, %d)", fn,
                hl->n_layers, hl->n_kv_heads, hl->head_dim, hl->block_size, hl->n_blocks,
                dl->n_layers, dl->n_kv_heads, dl->head_dim, dl->block_size, dl->n_blocks);
    const int bs = dl->block_size;
    const int host_cols = gp_kv_max_blocks_per_seq(t);

    /* Validate everything before touching a staging slot. */
    int max_seq = -1, n_cols = 0;
    for (int b = 0; b < B; b++) {
        int seq = seq_ids[b], len = gp_kv_len(t, seq);
        if (len < 0)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: seq_ids[%d] = %d is not a sequence of the host tables",
                    fn, b, seq);
        int blk_idx = len / bs; /* block of the token decoded this step */
        if (blk_idx >= host_cols || blk_idx >= kv->max_blocks)
            GP_FAIL(GP_ERR_STATE, "%s: seq %d at length %d: position %d needs table column %d, "
                    "beyond %d columns", fn, seq, len, len,
                    blk_idx, host_cols < kv->max_blocks ? host_cols : kv->max_blocks);
        int32_t blk = gp_kv_block_table(t, seq)[blk_idx];
        if (blk < 0 || blk >= dl->n_blocks)
            GP_FAIL(GP_ERR_STATE, "%s: seq %d at length %d: no block reserved for position %d "
                    "(table entry %d = %d; call gp_kv_reserve(seq, 1) first)", fn, seq, len, len,
                    blk_idx, (int)blk);
        if (blk_idx + 1 > n_cols)
            n_cols = blk_idx + 1;
        if (seq > max_seq)
            max_seq = seq;
    }
    if (max_seq >= kv->seen_cap) {
        int cap = max_seq + 1 > 2 * kv->seen_cap ? max_seq + 1 : 2 * kv->seen_cap;
        int64_t *s = (int64_t *)realloc(kv->seen, (size_t)cap * sizeof *s);
        if (!s)
            GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of host memory", fn);
        memset(s + kv->seen_cap, 0, (size_t)(cap - kv->seen_cap) * sizeof *s);
        kv->seen = s;
        kv->seen_cap = cap;
    }
    int64_t stamp = ++kv->call_count;
    for (int b = 0; b < B; b++) {
        if (kv->seen[seq_ids[b]] == stamp)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: seq %d appears twice in seq_ids (row %d)", fn,
                    seq_ids[b], b);
        kv->seen[seq_ids[b]] = stamp;
    }

    cudaStream_t st = (cudaStream_t)stream;
    int32_t *s;
    int slot;
    GP_TRY(gp_kv_take_slot(kv, fn, st, &s, &slot));
    int32_t *lens = s + (size_t)kv->max_seqs * (size_t)kv->max_blocks, *posv = lens + kv->max_seqs;
    for (int b = 0; b < B; b++) {
        int len = gp_kv_len(t, seq_ids[b]);
        memcpy(s + (size_t)b * (size_t)n_cols, gp_kv_block_table(t, seq_ids[b]),
               (size_t)n_cols * sizeof(int32_t));
        lens[b] = len + 1;
        posv[b] = len;
    }
    return gp_kv_enqueue(kv, slot, B, n_cols, st);
}

extern "C" gp_status gp_kv_device_upload(gp_kv_device *kv, int B, const int32_t *tables,
                                         int table_stride, const int32_t *lens, void *stream)
{
    static const char fn[] = "gp_kv_device_upload";
    GP_TRY(gp_kv_check_B(kv, fn, B));
    if (!tables || !lens)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: tables and lens must not be NULL", fn);
    const int bs = kv->layout.block_size;
    const int cap = kv->max_blocks * bs;
    int n_cols = 0;
    for (int b = 0; b < B; b++) {
        if (lens[b] < 1 || lens[b] > cap)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: lens[%d] = %d is outside [1, %d] (max_blocks %d x "
                    "block_size %d)", fn, b, (int)lens[b], cap, kv->max_blocks, bs);
        int cols = (lens[b] + bs - 1) / bs;
        if (cols > table_stride)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: lens[%d] = %d needs %d table columns but "
                    "table_stride = %d", fn, b, (int)lens[b], cols, table_stride);
        for (int c = 0; c < cols; c++) {
            int32_t blk = tables[(size_t)b * (size_t)table_stride + (size_t)c];
            if (blk < 0 || blk >= kv->layout.n_blocks)
                GP_FAIL(GP_ERR_INVALID_ARG, "%s: tables[%d][%d] = %d is outside [0, %d)", fn, b, c,
                        (int)blk, kv->layout.n_blocks);
        }
        if (cols > n_cols)
            n_cols = cols;
    }
    cudaStream_t st = (cudaStream_t)stream;
    int32_t *s;
    int slot;
    GP_TRY(gp_kv_take_slot(kv, fn, st, &s, &slot));
    int32_t *lv = s + (size_t)kv->max_seqs * (size_t)kv->max_blocks, *posv = lv + kv->max_seqs;
    for (int b = 0; b < B; b++) {
        memcpy(s + (size_t)b * (size_t)n_cols, tables + (size_t)b * (size_t)table_stride,
               (size_t)n_cols * sizeof(int32_t));
        lv[b] = lens[b];
        posv[b] = lens[b] - 1;
    }
    return gp_kv_enqueue(kv, slot, B, n_cols, st);
}

extern "C" const gp_kv_layout *gp_kv_device_layout(const gp_kv_device *kv)
{
    return kv ? &kv->layout : NULL;
}

extern "C" int gp_kv_device_max_seqs(const gp_kv_device *kv)
{
    return kv ? kv->max_seqs : 0;
}

extern "C" int gp_kv_device_max_blocks_per_seq(const gp_kv_device *kv)
{
    return kv ? kv->max_blocks : 0;
}

extern "C" gp_dtype gp_kv_device_dtype(const gp_kv_device *kv)
{
    return kv ? kv->dtype : GP_DTYPE_BF16;
}

extern "C" void *gp_kv_device_k(const gp_kv_device *kv, int layer)
{
    if (!kv || layer < 0 || layer >= kv->layout.n_layers)
        return NULL;
    return kv->pools + (size_t)(2 * layer) * (size_t)kv->layer_elems;
}

extern "C" void *gp_kv_device_v(const gp_kv_device *kv, int layer)
{
    if (!kv || layer < 0 || layer >= kv->layout.n_layers)
        return NULL;
    return kv->pools + (size_t)(2 * layer + 1) * (size_t)kv->layer_elems;
}

extern "C" gp_status gp_kv_device_copy_block_out(const gp_kv_device *kv, int block, void *payload, void *stream)
{
    if (!kv || !payload || block < 0 || block >= kv->layout.n_blocks)
        GP_FAIL(GP_ERR_INVALID_ARG, "copying a KV block out: block %d%s; allowed [0, %d) and a payload", block,
                payload ? "" : " without a payload", kv ? kv->layout.n_blocks : 0);
    const size_t piece = gp_kv_offset(&kv->layout, 1, 0, 0) * sizeof(uint16_t); /* one layer's K of a block */
    GP_CUDA_TRY(cudaMemcpy2DAsync(payload, piece, kv->pools + gp_kv_offset(&kv->layout, block, 0, 0),
                                  kv->layer_elems * sizeof(uint16_t), piece, 2 * (size_t)kv->layout.n_layers,
                                  cudaMemcpyDeviceToHost, (cudaStream_t)stream));
    return GP_OK;
}

extern "C" int32_t *gp_kv_device_block_tables(const gp_kv_device *kv)
{
    return kv ? kv->d_tables : NULL;
}

extern "C" int32_t *gp_kv_device_lens(const gp_kv_device *kv)
{
    return kv ? kv->d_lens_pos : NULL;
}

extern "C" int32_t *gp_kv_device_positions(const gp_kv_device *kv)
{
    return kv ? kv->d_lens_pos + kv->max_seqs : NULL;
}

extern "C" gp_status gp_kv_device_view(const gp_kv_device *kv, int layer, gp_kv_view *out)
{
    if (!kv || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_device_view: kv and out must not be NULL");
    if (layer < 0 || layer >= kv->layout.n_layers)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_device_view: layer = %d is outside [0, %d)", layer,
                kv->layout.n_layers);
    out->dtype = kv->dtype;
    out->k = gp_kv_device_k(kv, layer);
    out->v = gp_kv_device_v(kv, layer);
    out->block_tables = kv->d_tables;
    out->lens = gp_kv_device_lens(kv);
    out->positions = gp_kv_device_positions(kv);
    out->n_rows = kv->max_seqs;
    out->n_blocks = kv->layout.n_blocks;
    out->block_size = kv->layout.block_size;
    out->n_kv_heads = kv->layout.n_kv_heads;
    out->head_dim = kv->layout.head_dim;
    out->max_blocks = kv->max_blocks;
    out->row_table = NULL;
    return GP_OK;
}

extern "C" gp_status gp_kv_view_rows(const gp_kv_view *in, int first, int count, gp_kv_view *out)
{
    if (!in || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_view_rows: in and out must not be NULL");
    if (first < 0 || count < 1 || (int64_t)first + count > in->n_rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_view_rows: rows [%d, %d + %d) are outside the view's "
                "%d rows", first, first, count, in->n_rows);
    gp_kv_view v = *in;
    v.block_tables = in->block_tables + (size_t)first * (size_t)in->max_blocks;
    v.lens = in->lens + first;
    v.positions = in->positions + first;
    v.n_rows = count;
    *out = v;
    return GP_OK;
}
