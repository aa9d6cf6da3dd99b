/* Paged KV cache bookkeeping on the host: a pool of block ids shared by all
 * layers, per sequence a block table and a length, and a reference count per
 * pool block so full blocks can be shared between sequences and kept past
 * their sequence (prefix caching). */
#include "gp_kvcache.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct gp_kv_tables {
    gp_kv_layout layout;
    int max_seqs;
    int max_blocks_per_seq;
    int32_t *free_ids;  /* [n_blocks]: stack of free block ids, top at n_free-1 */
    int n_free;
    int *ref;           /* [n_blocks]: table entries plus retains holding each pool block; 0: free */
    int32_t *tables;    /* [max_seqs][max_blocks_per_seq]: block ids, -1 unused */
    int *n_seq_blocks;  /* [max_seqs]: leading entries of the table in use */
    int *len;           /* [max_seqs]: tokens written (advanced) */
    int *reserved;      /* [max_seqs]: positions with room promised, >= len */
    int host_first;     /* gp_kv_tables_set_host: entry i < host_per_seq of sequence s is id */
    int host_per_seq;   /*   host_first + s * host_per_seq + i, outside the pool; 0: none */
};

uint64_t gp_kv_layer_elems(const gp_kv_layout *l)
{
    if (!l || l->n_blocks <= 0 || l->block_size <= 0 || l->n_kv_heads <= 0 || l->head_dim <= 0)
        return 0;
    uint64_t a, b, c;
    if (!gp_mul_u64((uint64_t)l->n_blocks, (uint64_t)l->block_size, &a)
        || !gp_mul_u64(a, (uint64_t)l->n_kv_heads, &b)
        || !gp_mul_u64(b, (uint64_t)l->head_dim, &c))
        return 0;
    return c;
}

gp_status gp_kv_layout_check(const gp_kv_layout *l, int max_seqs, int max_blocks_per_seq, const char *who)
{
    const struct { const char *name; int v; } pos[] = {
        { "layout.n_layers", l->n_layers },   { "layout.n_kv_heads", l->n_kv_heads },
        { "layout.head_dim", l->head_dim },   { "layout.block_size", l->block_size },
        { "layout.n_blocks", l->n_blocks },   { "max_seqs", max_seqs },
        { "max_blocks_per_seq", max_blocks_per_seq },
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: %s = %d must be positive", who, pos[i].name, pos[i].v);
    /* Positions are int everywhere, so a full table must be addressable. */
    if ((int64_t)max_blocks_per_seq * l->block_size > INT_MAX)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: max_blocks_per_seq = %d times block_size = %d exceeds %d positions", who,
                max_blocks_per_seq, l->block_size, INT_MAX);
    return GP_OK;
}

gp_status gp_kv_tables_create(const gp_kv_layout *l, int max_seqs, int max_blocks_per_seq,
                              gp_kv_tables **out)
{
    if (!l || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_tables_create: layout and out must not be NULL");
    *out = NULL;
    GP_TRY(gp_kv_layout_check(l, max_seqs, max_blocks_per_seq, "gp_kv_tables_create"));
    if (gp_kv_layer_elems(l) == 0)
        GP_FAIL(GP_ERR_OVERFLOW, "gp_kv_tables_create: n_blocks = %d * block_size = %d * "
                "n_kv_heads = %d * head_dim = %d overflows 64 bits", l->n_blocks, l->block_size,
                l->n_kv_heads, l->head_dim);
    uint64_t n_entries;
    if (!gp_mul_u64((uint64_t)max_seqs, (uint64_t)max_blocks_per_seq, &n_entries)
        || n_entries > SIZE_MAX / sizeof(int32_t))
        GP_FAIL(GP_ERR_OVERFLOW, "gp_kv_tables_create: max_seqs = %d * max_blocks_per_seq = %d "
                "table entries overflow", max_seqs, max_blocks_per_seq);

    gp_kv_tables *t = calloc(1, sizeof *t);
    if (t) {
        t->free_ids = malloc((size_t)l->n_blocks * sizeof *t->free_ids);
        t->tables = malloc((size_t)n_entries * sizeof *t->tables);
        t->n_seq_blocks = calloc((size_t)max_seqs, sizeof *t->n_seq_blocks);
        t->len = calloc((size_t)max_seqs, sizeof *t->len);
        t->reserved = calloc((size_t)max_seqs, sizeof *t->reserved);
        t->ref = calloc((size_t)l->n_blocks, sizeof *t->ref);
    }
    if (!t || !t->free_ids || !t->tables || !t->n_seq_blocks || !t->len || !t->reserved || !t->ref) {
        gp_kv_tables_destroy(t);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_kv_tables_create: cannot allocate tables for %d blocks "
                "and %d x %d entries", l->n_blocks, max_seqs, max_blocks_per_seq);
    }
    t->layout = *l;
    t->max_seqs = max_seqs;
    t->max_blocks_per_seq = max_blocks_per_seq;
    /* Descending so blocks are handed out 0, 1, 2, ...: easier to read in traces. */
    for (int i = 0; i < l->n_blocks; i++)
        t->free_ids[i] = l->n_blocks - 1 - i;
    t->n_free = l->n_blocks;
    for (uint64_t i = 0; i < n_entries; i++)
        t->tables[i] = -1;
    *out = t;
    return GP_OK;
}

void gp_kv_tables_destroy(gp_kv_tables *t)
{
    if (!t)
        return;
    free(t->free_ids);
    free(t->tables);
    free(t->n_seq_blocks);
    free(t->len);
    free(t->reserved);
    free(t->ref);
    free(t);
}

static gp_status gp_kv_check_seq(const gp_kv_tables *t, const char *fn, int seq)
{
    if (!t)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: tables are NULL", fn);
    if (seq < 0 || seq >= t->max_seqs)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: seq = %d is outside [0, %d)", fn, seq, t->max_seqs);
    return GP_OK;
}

gp_status gp_kv_reserve(gp_kv_tables *t, int seq, int n)
{
    GP_TRY(gp_kv_check_seq(t, "gp_kv_reserve", seq));
    if (n < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_reserve: seq %d: n = %d must be >= 0", seq, n);
    int bs = t->layout.block_size;
    int64_t end = (int64_t)t->len[seq] + n; /* one past the last position asked for */
    int64_t cap = (int64_t)t->max_blocks_per_seq * bs;
    if (end > cap)
        GP_FAIL(GP_ERR_STATE, "gp_kv_reserve: seq %d at length %d: %d more tokens would reach "
                "%lld, beyond its table of %d blocks x %d tokens = %lld", seq, t->len[seq], n,
                (long long)end, t->max_blocks_per_seq, bs, (long long)cap);
    int need = (int)((end + bs - 1) / bs) - t->n_seq_blocks[seq], from_pool = need;
    if (t->host_per_seq > 0 && t->n_seq_blocks[seq] < t->host_per_seq) { /* fixed host ids first */
        int host = t->host_per_seq - t->n_seq_blocks[seq];
        from_pool -= host < need ? host : need;
    }
    if (from_pool > t->n_free)
        GP_FAIL(GP_ERR_STATE, "gp_kv_reserve: seq %d at length %d: %d more tokens need %d more "
                "blocks but the pool has %d free blocks (of %d)", seq, t->len[seq], n, from_pool,
                t->n_free, t->host_per_seq > 0 ? t->host_first : t->layout.n_blocks);
    int32_t *table = t->tables + (size_t)seq * (size_t)t->max_blocks_per_seq;
    for (int i = 0; i < need; i++) {
        int at = t->n_seq_blocks[seq]++;
        if (at < t->host_per_seq) {
            table[at] = t->host_first + seq * t->host_per_seq + at;
        } else {
            table[at] = t->free_ids[--t->n_free];
            t->ref[table[at]] = 1;
        }
    }
    if (end > t->reserved[seq])
        t->reserved[seq] = (int)end;
    return GP_OK;
}

gp_status gp_kv_advance(gp_kv_tables *t, int seq, int n)
{
    GP_TRY(gp_kv_check_seq(t, "gp_kv_advance", seq));
    if (n < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_advance: seq %d: n = %d must be >= 0", seq, n);
    if ((int64_t)t->len[seq] + n > t->reserved[seq])
        GP_FAIL(GP_ERR_STATE, "gp_kv_advance: seq %d at length %d: advancing by %d passes the "
                "%d positions reserved (call gp_kv_reserve first)", seq, t->len[seq], n,
                t->reserved[seq]);
    t->len[seq] += n;
    return GP_OK;
}

/* A pool block loses one holder; the last one gives it back to the pool. */
static void gp_kv_unref(gp_kv_tables *t, int32_t block)
{
    if (--t->ref[block] == 0)
        t->free_ids[t->n_free++] = block;
}

void gp_kv_release(gp_kv_tables *t, int seq)
{
    if (!t || seq < 0 || seq >= t->max_seqs)
        return;
    int32_t *table = t->tables + (size_t)seq * (size_t)t->max_blocks_per_seq;
    /* Reverse order so a reserve right after gets the same ids back. */
    for (int i = t->n_seq_blocks[seq] - 1; i >= 0; i--) {
        if (i >= t->host_per_seq)
            gp_kv_unref(t, table[i]);
        table[i] = -1;
    }
    t->n_seq_blocks[seq] = 0;
    t->len[seq] = 0;
    t->reserved[seq] = 0;
}

gp_status gp_kv_truncate(gp_kv_tables *t, int seq, int len)
{
    GP_TRY(gp_kv_check_seq(t, "gp_kv_truncate", seq));
    if (len < 0 || len > t->len[seq])
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_truncate: seq %d: length %d, allowed [0, %d] (its length)", seq, len,
                t->len[seq]);
    int bs = t->layout.block_size, keep = (len + bs - 1) / bs;
    int32_t *table = t->tables + (size_t)seq * (size_t)t->max_blocks_per_seq;
    if (len % bs && keep > t->host_per_seq && t->ref[table[keep - 1]] > 1)
        GP_FAIL(GP_ERR_STATE, "gp_kv_truncate: seq %d: length %d ends inside block %d, which %d holders share; the "
                "sequence would write its next tokens over theirs (truncate to a multiple of %d there)", seq, len,
                table[keep - 1], t->ref[table[keep - 1]], bs);
    for (int i = t->n_seq_blocks[seq] - 1; i >= keep; i--) {
        if (i >= t->host_per_seq)
            gp_kv_unref(t, table[i]);
        table[i] = -1;
    }
    t->n_seq_blocks[seq] = keep;
    t->len[seq] = len;
    t->reserved[seq] = len;
    return GP_OK;
}

/* Host ids are not shared: an offloaded block is staged, layer by layer,
 * into a device window at its own sequence's place (first + seq x per_seq +
 * entry), so another sequence's table cannot name it. */
static gp_status gp_kv_refuse_host(const gp_kv_tables *t, const char *fn, int seq)
{
    GP_FAIL(GP_ERR_UNSUPPORTED, "%s: seq %d: the cache is offloaded (the first %d blocks of each sequence are "
            "host blocks, staged into a device window at their own sequence's place), so its blocks cannot be "
            "shared between sequences", fn, seq, t->host_per_seq);
}

gp_status gp_kv_block_retain(gp_kv_tables *t, int seq, int index, int *block)
{
    GP_TRY(gp_kv_check_seq(t, "gp_kv_block_retain", seq));
    if (!block)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_block_retain: block must be non-NULL");
    int bs = t->layout.block_size;
    if (index < 0 || (int64_t)(index + 1) * bs > t->len[seq])
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_block_retain: seq %d of length %d: block %d, allowed [0, %d) (its "
                "full blocks of %d tokens)", seq, t->len[seq], index, t->len[seq] / bs, bs);
    if (t->host_per_seq > 0)
        return gp_kv_refuse_host(t, "gp_kv_block_retain", seq);
    int32_t id = t->tables[(size_t)seq * (size_t)t->max_blocks_per_seq + (size_t)index];
    t->ref[id]++;
    *block = id;
    return GP_OK;
}

static gp_status gp_kv_check_held(const gp_kv_tables *t, const char *fn, int block)
{
    if (block < 0 || block >= t->layout.n_blocks || t->ref[block] == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: block %d is not a held block of the pool (ids [0, %d) with a reference)",
                fn, block, t->layout.n_blocks);
    return GP_OK;
}

gp_status gp_kv_block_drop(gp_kv_tables *t, int block)
{
    if (!t)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_block_drop: tables are NULL");
    GP_TRY(gp_kv_check_held(t, "gp_kv_block_drop", block));
    gp_kv_unref(t, block);
    return GP_OK;
}

gp_status gp_kv_attach(gp_kv_tables *t, int seq, const int *blocks, int n)
{
    GP_TRY(gp_kv_check_seq(t, "gp_kv_attach", seq));
    if (t->n_seq_blocks[seq] || t->len[seq])
        GP_FAIL(GP_ERR_STATE, "gp_kv_attach: seq %d holds %d tokens in %d blocks; attach to an empty sequence",
                seq, t->len[seq], t->n_seq_blocks[seq]);
    if (n < 0 || n > t->max_blocks_per_seq || (n > 0 && !blocks))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_attach: seq %d: %d blocks%s, allowed 0..%d blocks, non-NULL", seq, n,
                blocks ? "" : " (NULL)", t->max_blocks_per_seq);
    if (n > 0 && t->host_per_seq > 0)
        return gp_kv_refuse_host(t, "gp_kv_attach", seq);
    for (int i = 0; i < n; i++)
        GP_TRY(gp_kv_check_held(t, "gp_kv_attach", blocks[i]));
    int32_t *table = t->tables + (size_t)seq * (size_t)t->max_blocks_per_seq;
    for (int i = 0; i < n; i++) {
        table[i] = blocks[i];
        t->ref[blocks[i]]++;
    }
    t->n_seq_blocks[seq] = n;
    t->len[seq] = t->reserved[seq] = n * t->layout.block_size;
    return GP_OK;
}

gp_status gp_kv_tables_set_host(gp_kv_tables *t, int first, int per_seq)
{
    if (!t)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_tables_set_host: tables are NULL");
    for (int s = 0; s < t->max_seqs; s++)
        if (t->n_seq_blocks[s])
            GP_FAIL(GP_ERR_STATE, "gp_kv_tables_set_host: sequence %d holds blocks; call it on fresh tables", s);
    for (int b = 0; b < t->layout.n_blocks; b++)
        if (t->ref[b])
            GP_FAIL(GP_ERR_STATE, "gp_kv_tables_set_host: block %d is retained; call it on fresh tables", b);
    if (first < 0 || per_seq < 0 || per_seq > t->max_blocks_per_seq ||
        (int64_t)first + (int64_t)t->max_seqs * per_seq > t->layout.n_blocks)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_tables_set_host: first id %d, %d host blocks per sequence: allowed "
                "first >= 0, 0 <= per_seq <= %d and first + %d x per_seq <= %d blocks", first, per_seq,
                t->max_blocks_per_seq, t->max_seqs, t->layout.n_blocks);
    t->host_first = first;
    t->host_per_seq = per_seq;
    t->n_free = 0; /* the pool keeps the ids below first, handed out 0, 1, 2, ... */
    for (int i = first - 1; i >= 0; i--)
        t->free_ids[t->n_free++] = i;
    return GP_OK;
}

int gp_kv_len(const gp_kv_tables *t, int seq)
{
    if (!t || seq < 0 || seq >= t->max_seqs)
        return -1;
    return t->len[seq];
}

const int32_t *gp_kv_block_table(const gp_kv_tables *t, int seq)
{
    if (!t || seq < 0 || seq >= t->max_seqs)
        return NULL;
    return t->tables + (size_t)seq * (size_t)t->max_blocks_per_seq;
}

int gp_kv_max_blocks_per_seq(const gp_kv_tables *t)
{
    return t ? t->max_blocks_per_seq : 0;
}

int gp_kv_free_blocks(const gp_kv_tables *t)
{
    return t ? t->n_free : 0;
}

const gp_kv_layout *gp_kv_tables_layout(const gp_kv_tables *t)
{
    return t ? &t->layout : NULL;
}
