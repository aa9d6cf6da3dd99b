/* The stored-prefix cache in host memory: a hash table of blocks, LRU
 * eviction within a byte budget that passes over pinned blocks, matching of a
 * prompt's leading blocks, and the statistics. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvstore_impl.h"

static void *kvs_malloc(void *ctx, size_t n) { return malloc(n); }
static void kvs_mfree(void *ctx, void *p) { free(p); }

gp_kvstore_params gp_kvstore_default_params(void)
{
    gp_kvstore_params p;
    memset(&p, 0, sizeof p);
    p.warn_stderr = true;
    return p;
}

void kvs_warn(gp_kvstore *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->st.last_warning, sizeof s->st.last_warning, fmt, ap);
    va_end(ap);
    if (s->warn_stderr)
        fprintf(stderr, "greenpipe: warning: %s\n", s->st.last_warning);
}

static gp_status kvs_dir_ready(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT || mkdir(dir, 0755) != 0)
            GP_FAIL(GP_ERR_IO, "kv store: dir '%s': %s; allowed: a directory (created if absent, one level)", dir,
                    strerror(errno));
        return GP_OK;
    }
    if (!S_ISDIR(st.st_mode))
        GP_FAIL(GP_ERR_IO, "kv store: dir '%s' is not a directory; allowed: a directory (created if absent)", dir);
    return GP_OK;
}

gp_status gp_kvstore_create(const gp_kvstore_params *p, gp_kvstore **out)
{
    if (!p || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: %s is NULL", p ? "out" : "params");
    *out = NULL;
    uint64_t bb;
    GP_TRY(gp_kvstore_block_bytes(&p->id, &bb));
    if (p->capacity_bytes == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: capacity_bytes = 0; allowed: at least one block (%llu bytes)",
                (unsigned long long)bb);
    if (bb > p->capacity_bytes)
        GP_FAIL(GP_ERR_INVALID_ARG,
                "kv store: one block is %llu bytes, above capacity_bytes = %llu; allowed: a capacity of at least "
                "one block",
                (unsigned long long)bb, (unsigned long long)p->capacity_bytes);
    if (bb > SIZE_MAX)
        GP_FAIL(GP_ERR_OVERFLOW, "kv store: one block is %llu bytes, more than this host can address",
                (unsigned long long)bb);
    if (!p->alloc != !p->free)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: only %s of the allocator pair given; allowed: both or neither",
                p->alloc ? "alloc" : "free");
    if (p->dir && !p->dir[0])
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: dir is empty; allowed: a directory path, or NULL for memory only");
    if (p->dir)
        GP_TRY(kvs_dir_ready(p->dir));

    gp_kvstore *s = calloc(1, sizeof *s);
    if (!s)
        GP_FAIL(GP_ERR_NO_MEMORY, "kv store: out of host memory for the store");
    s->n_buckets = 64;
    s->buckets = calloc(s->n_buckets, sizeof *s->buckets);
    s->model = strdup(p->id.model);
    s->dir = p->dir ? strdup(p->dir) : NULL;
    if (!s->buckets || !s->model || (p->dir && !s->dir) || pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s->buckets);
        free(s->model);
        free(s->dir);
        free(s);
        GP_FAIL(GP_ERR_NO_MEMORY, "kv store: out of host memory for the store");
    }
    s->id = p->id;
    s->id.model = s->model;
    s->seed = gp_kvstore_seed(&s->id);
    s->block_bytes = bb;
    s->capacity = p->capacity_bytes;
    s->alloc = p->alloc ? p->alloc : kvs_malloc;
    s->free = p->alloc ? p->free : kvs_mfree;
    s->alloc_ctx = p->alloc_ctx;
    s->warn_stderr = p->warn_stderr;
    *out = s;
    return GP_OK;
}

static void entry_free(gp_kvstore *s, kvs_entry *e)
{
    s->free(s->alloc_ctx, e->payload);
    free(e);
}

void gp_kvstore_destroy(gp_kvstore *s)
{
    if (!s)
        return;
    for (kvs_entry *e = s->newest, *n; e; e = n) {
        n = e->older;
        entry_free(s, e);
    }
    pthread_mutex_destroy(&s->mu);
    free(s->buckets);
    free(s->model);
    free(s->dir);
    free(s);
}

/* Keys are FNV outputs whose low bits mix poorly: fold the high half in. */
static uint64_t bucket_of(const gp_kvstore *s, uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return key & (s->n_buckets - 1);
}

static kvs_entry *find(const gp_kvstore *s, uint64_t key)
{
    for (kvs_entry *e = s->buckets[bucket_of(s, key)]; e; e = e->hnext)
        if (e->key == key)
            return e;
    return NULL;
}

static void lru_unlink(gp_kvstore *s, kvs_entry *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        s->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        s->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(gp_kvstore *s, kvs_entry *e)
{
    e->older = s->newest;
    e->newer = NULL;
    if (s->newest)
        s->newest->newer = e;
    s->newest = e;
    if (!s->oldest)
        s->oldest = e;
}

static void touch(gp_kvstore *s, kvs_entry *e)
{
    lru_unlink(s, e);
    lru_push(s, e);
}

/* A failed grow keeps the old table: chains just get longer. */
static void maybe_grow(gp_kvstore *s)
{
    if (s->st.blocks_held < s->n_buckets)
        return;
    uint64_t nb = s->n_buckets * 2;
    kvs_entry **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    kvs_entry **old = s->buckets;
    uint64_t on = s->n_buckets;
    s->buckets = b;
    s->n_buckets = nb;
    for (uint64_t i = 0; i < on; i++)
        for (kvs_entry *e = old[i], *n; e; e = n) {
            n = e->hnext;
            uint64_t k = bucket_of(s, e->key);
            e->hnext = b[k];
            b[k] = e;
        }
    free(old);
}

static void insert(gp_kvstore *s, kvs_entry *e)
{
    uint64_t k = bucket_of(s, e->key);
    e->hnext = s->buckets[k];
    s->buckets[k] = e;
    lru_push(s, e);
    s->st.blocks_held++;
    s->st.bytes_held += s->block_bytes;
    maybe_grow(s);
}

static void evict(gp_kvstore *s, kvs_entry *e)
{
    kvs_entry **pp = &s->buckets[bucket_of(s, e->key)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(s, e);
    s->st.blocks_held--;
    s->st.bytes_held -= s->block_bytes;
    s->st.evictions++;
    entry_free(s, e);
}

/* Evicts the oldest unpinned blocks until one more block fits; false when
 * only pinned blocks are left to evict. */
static bool make_room(gp_kvstore *s)
{
    while (s->st.bytes_held + s->block_bytes > s->capacity) {
        kvs_entry *v = s->oldest;
        while (v && v->pins > 0)
            v = v->newer;
        if (!v)
            return false;
        evict(s, v);
    }
    return true;
}

/* An entry with its payload buffer; NULL when out of memory. */
static kvs_entry *entry_new(gp_kvstore *s, uint64_t key, const int32_t *tokens)
{
    kvs_entry *e = calloc(1, sizeof *e + sizeof(int32_t) * (size_t)s->id.block_size);
    if (!e)
        return NULL;
    e->payload = s->alloc(s->alloc_ctx, (size_t)s->block_bytes);
    if (!e->payload) {
        free(e);
        return NULL;
    }
    e->key = key;
    memcpy(e->tokens, tokens, sizeof(int32_t) * (size_t)s->id.block_size);
    return e;
}

static bool same_tokens(const gp_kvstore *s, const kvs_entry *e, const int32_t *tokens)
{
    return memcmp(e->tokens, tokens, sizeof(int32_t) * (size_t)s->id.block_size) == 0;
}

/* A put of payload, or of what fill writes in place. */
static gp_status put(gp_kvstore *s, uint64_t key, const int32_t *tokens, const void *payload,
                     gp_status (*fill)(void *ctx, void *dst), void *ctx)
{
    gp_status rc = GP_OK;
    pthread_mutex_lock(&s->mu);
    s->st.puts++;
    kvs_entry *e = find(s, key);
    if (e) {
        if (same_tokens(s, e, tokens))
            touch(s, e);
        else
            s->st.collisions++;
        goto out;
    }
    if (s->dir && payload)
        kvs_file_write(s, key, tokens, payload);
    if (!make_room(s)) {
        s->st.put_refused++;
        gp_set_error("kv store put: no room for a block of %llu bytes: %llu of the %llu bytes of capacity are "
                     "pinned (matched and not released)",
                     (unsigned long long)s->block_bytes, (unsigned long long)(s->st.blocks_pinned * s->block_bytes),
                     (unsigned long long)s->capacity);
        rc = GP_SOFT_FULL;
        goto out;
    }
    e = entry_new(s, key, tokens);
    if (!e) {
        gp_set_error("kv store put: out of host memory for a block of %llu bytes", (unsigned long long)s->block_bytes);
        rc = GP_ERR_NO_MEMORY;
        goto out;
    }
    if (payload) {
        memcpy(e->payload, payload, (size_t)s->block_bytes);
    } else if ((rc = fill(ctx, e->payload)) != GP_OK) {
        entry_free(s, e);
        goto out;
    } else if (s->dir) {
        kvs_file_write(s, key, tokens, e->payload);
    }
    insert(s, e);
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

gp_status gp_kvstore_put(gp_kvstore *s, uint64_t key, const int32_t *tokens, const void *payload)
{
    if (!s || !tokens || !payload)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store put: %s is NULL", !s ? "store" : !tokens ? "tokens" : "payload");
    return put(s, key, tokens, payload, NULL, NULL);
}

gp_status gp_kvstore_put_with(gp_kvstore *s, uint64_t key, const int32_t *tokens,
                              gp_status (*fill)(void *ctx, void *dst), void *ctx)
{
    if (!s || !tokens || !fill)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store put: %s is NULL", !s ? "store" : !tokens ? "tokens" : "fill");
    return put(s, key, tokens, NULL, fill, ctx);
}

/* The block of key from its file into memory, or NULL (a miss, counted and,
 * but for an absent file, warned). */
static kvs_entry *load(gp_kvstore *s, uint64_t key, const int32_t *tokens)
{
    char why[256] = "";
    char path[4096];
    kvs_entry *e = NULL;
    gp_kvstore_miss r;
    struct stat st;
    gp_kvstore_file_path(s->dir, key, path, sizeof path);
    /* A plain miss must not evict anything to make room. */
    if (stat(path, &st) != 0 && errno == ENOENT) {
        s->st.disk_misses[GP_KVSTORE_MISS_ABSENT]++;
        return NULL;
    }
    if (!make_room(s)) {
        r = GP_KVSTORE_MISS_NO_ROOM;
        snprintf(why, sizeof why, "memory is full of pinned blocks (%llu bytes of capacity)",
                 (unsigned long long)s->capacity);
    } else if (!(e = entry_new(s, key, tokens))) {
        r = GP_KVSTORE_MISS_NO_ROOM;
        snprintf(why, sizeof why, "out of host memory for a block of %llu bytes", (unsigned long long)s->block_bytes);
    } else {
        r = kvs_file_read(s, key, tokens, e->payload, why, sizeof why);
    }
    if (r == GP_KVSTORE_MISS_COUNT) {
        insert(s, e);
        s->st.disk_loads++;
        s->st.bytes_loaded += s->block_bytes;
        return e;
    }
    if (e)
        entry_free(s, e);
    s->st.disk_misses[r]++;
    if (r == GP_KVSTORE_MISS_TOKENS)
        s->st.collisions++;
    if (r != GP_KVSTORE_MISS_ABSENT)
        kvs_warn(s, "kv store: %s: %s (%s); treated as a miss, file left alone", path, why, gp_kvstore_miss_name(r));
    return NULL;
}

gp_status gp_kvstore_match(gp_kvstore *s, const uint64_t *keys, const int32_t *tokens, int n_blocks,
                           int *matched)
{
    if (!s || !matched)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store match: %s is NULL", s ? "matched" : "store");
    if (n_blocks < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store match: n_blocks = %d; allowed: 0 or more", n_blocks);
    if (n_blocks > 0 && (!keys || !tokens))
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store match: %s is NULL with %d blocks", keys ? "tokens" : "keys", n_blocks);
    int m = 0;
    pthread_mutex_lock(&s->mu);
    s->st.lookups++;
    for (; m < n_blocks; m++) {
        const int32_t *t = tokens + (size_t)m * (size_t)s->id.block_size;
        kvs_entry *e = find(s, keys[m]);
        if (e && !same_tokens(s, e, t)) {
            s->st.collisions++;
            break;
        }
        /* Blocks matched so far are pinned, so a load's eviction spares them. */
        if (!e && !(s->dir && (e = load(s, keys[m], t))))
            break;
        touch(s, e);
        if (e->pins++ == 0)
            s->st.blocks_pinned++;
    }
    s->st.hit_blocks += (uint64_t)m;
    s->st.miss_blocks += (uint64_t)(n_blocks - m);
    pthread_mutex_unlock(&s->mu);
    *matched = m;
    return GP_OK;
}

gp_status gp_kvstore_release(gp_kvstore *s, const uint64_t *keys, int n)
{
    if (!s || (n > 0 && !keys) || n < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store release: %s", !s ? "store is NULL" : n < 0 ? "n < 0" : "keys is NULL");
    int bad = -1;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++) {
        kvs_entry *e = find(s, keys[i]);
        if (!e || e->pins == 0) {
            if (bad < 0)
                bad = i;
            continue;
        }
        if (--e->pins == 0)
            s->st.blocks_pinned--;
    }
    pthread_mutex_unlock(&s->mu);
    if (bad >= 0)
        GP_FAIL(GP_ERR_STATE, "kv store release: key %016llx (index %d) is not pinned; allowed: keys matched and "
                "not yet released", (unsigned long long)keys[bad], bad);
    return GP_OK;
}

gp_status gp_kvstore_get(gp_kvstore *s, uint64_t key, const void **payload)
{
    if (!s || !payload)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store get: %s is NULL", s ? "payload" : "store");
    pthread_mutex_lock(&s->mu);
    kvs_entry *e = find(s, key);
    bool ok = e && e->pins > 0;
    *payload = ok ? e->payload : NULL;
    pthread_mutex_unlock(&s->mu);
    if (!ok)
        GP_FAIL(GP_ERR_STATE, "kv store get: key %016llx is %s; allowed: a block pinned by gp_kvstore_match",
                (unsigned long long)key, e ? "not pinned" : "not held");
    return GP_OK;
}

void gp_kvstore_get_stats(gp_kvstore *s, gp_kvstore_stats *out, bool reset)
{
    if (!s) {
        if (out)
            memset(out, 0, sizeof *out);
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->st.capacity_bytes = s->capacity;
    if (out)
        *out = s->st;
    if (reset) {
        gp_kvstore_stats keep = s->st;
        memset(&s->st, 0, sizeof s->st);
        s->st.blocks_held = keep.blocks_held;
        s->st.bytes_held = keep.bytes_held;
        s->st.blocks_pinned = keep.blocks_pinned;
        s->st.capacity_bytes = keep.capacity_bytes;
    }
    pthread_mutex_unlock(&s->mu);
}
