/* The memory store: matches of leading whole blocks, collisions as misses,
 * LRU eviction that spares pinned blocks, release, the allocator hook, puts
 * filled in place, statistics and refused parameters. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "kvs_test_util.h"

static void prompt(int32_t *t, int n, int32_t base)
{
    for (int i = 0; i < n; i++)
        t[i] = base + i;
}

/* Whether key is held (with these tokens), through a match and release. */
static bool held(gp_kvstore *s, uint64_t key, const int32_t *tokens)
{
    int m = -1;
    GP_CHECK_OK(gp_kvstore_match(s, &key, tokens, 1, &m));
    if (m)
        GP_CHECK_OK(gp_kvstore_release(s, &key, 1));
    return m == 1;
}

static void test_match_blocks(void **state)
{
    gp_kvstore *s = kvs_test_store(16, NULL);
    gp_kvstore_identity id = kvs_test_id();
    int32_t t[20];
    uint64_t keys[5];
    prompt(t, 20, 100);
    kvs_test_put_prompt(s, t, 13, keys); /* 3 whole blocks stored, 1 token left over */

    int m = -1;
    GP_CHECK_OK(gp_kvstore_chain(&id, t, 20, keys, NULL));
    GP_CHECK_OK(gp_kvstore_match(s, keys, t, 5, &m));
    assert_int_equal(m, 3);
    for (int b = 0; b < 3; b++) {
        const void *pl = NULL;
        unsigned char want[KVS_BLOCK];
        kvs_test_payload(keys[b], want);
        GP_CHECK_OK(gp_kvstore_get(s, keys[b], &pl));
        assert_memory_equal(pl, want, KVS_BLOCK);
    }
    gp_kvstore_stats st;
    gp_kvstore_get_stats(s, &st, false);
    assert_int_equal(st.blocks_pinned, 3);
    GP_CHECK_OK(gp_kvstore_release(s, keys, 3));
    const void *pl;
    GP_CHECK_FAIL(gp_kvstore_get(s, keys[0], &pl), GP_ERR_STATE, "not pinned");
    GP_CHECK_FAIL(gp_kvstore_get(s, keys[4], &pl), GP_ERR_STATE, "not held");
    GP_CHECK_FAIL(gp_kvstore_release(s, keys, 1), GP_ERR_STATE, "is not pinned");

    /* A prompt that leaves the stored one in block 1 reuses block 0 only. */
    t[6] = -5;
    GP_CHECK_OK(gp_kvstore_chain(&id, t, 20, keys, NULL));
    GP_CHECK_OK(gp_kvstore_match(s, keys, t, 5, &m));
    assert_int_equal(m, 1);
    GP_CHECK_OK(gp_kvstore_release(s, keys, m));
    GP_CHECK_OK(gp_kvstore_match(s, keys, t, 0, &m));
    assert_int_equal(m, 0);

    gp_kvstore_get_stats(s, &st, true);
    assert_int_equal(st.lookups, 3);
    assert_int_equal(st.hit_blocks, 4);
    assert_int_equal(st.miss_blocks, 2 + 4);
    assert_int_equal(st.puts, 3);
    assert_int_equal(st.blocks_held, 3);
    assert_int_equal(st.bytes_held, 3 * KVS_BLOCK);
    assert_int_equal(st.blocks_pinned, 0);
    gp_kvstore_get_stats(s, &st, false);
    assert_int_equal(st.lookups, 0);
    assert_int_equal(st.blocks_held, 3); /* a level survives the reset */
    gp_kvstore_destroy(s);
}

/* Two blocks under one key (as a 64-bit collision would give): the token
 * comparison turns the lookup into a miss, never the other block's KV. */
static void test_collision(void **state)
{
    gp_kvstore *s = kvs_test_store(4, NULL);
    int32_t a[KVS_BS], b[KVS_BS];
    prompt(a, KVS_BS, 1);
    prompt(b, KVS_BS, 2);
    unsigned char pl[KVS_BLOCK];
    kvs_test_payload(42, pl);
    GP_CHECK_OK(gp_kvstore_put(s, 42, a, pl));
    int m = -1;
    uint64_t k = 42;
    GP_CHECK_OK(gp_kvstore_match(s, &k, b, 1, &m));
    assert_int_equal(m, 0);
    GP_CHECK_OK(gp_kvstore_put(s, 42, b, pl)); /* the stored block stays */
    assert_int_equal(KVS_STAT(s, collisions), 2);
    assert_false(held(s, 42, b));
    assert_true(held(s, 42, a));
    gp_kvstore_destroy(s);
}

static void test_lru_order(void **state)
{
    gp_kvstore *s = kvs_test_store(3, NULL);
    int32_t t[5][KVS_BS];
    unsigned char pl[KVS_BLOCK];
    for (int i = 0; i < 5; i++) {
        prompt(t[i], KVS_BS, 10 * i);
        kvs_test_payload((uint64_t)i, pl);
        if (i == 3)
            GP_CHECK_OK(gp_kvstore_put(s, 0, t[0], pl)); /* refreshes 0: 1 is now the oldest */
        GP_CHECK_OK(gp_kvstore_put(s, (uint64_t)i, t[i], pl));
    }
    assert_int_equal(KVS_STAT(s, evictions), 2);
    assert_int_equal(KVS_STAT(s, bytes_held), 3 * KVS_BLOCK);
    assert_false(held(s, 1, t[1]));
    assert_false(held(s, 2, t[2]));
    assert_true(held(s, 0, t[0]));
    assert_true(held(s, 3, t[3]));
    assert_true(held(s, 4, t[4]));
    gp_kvstore_destroy(s);
}

static void test_pinned_never_evicted(void **state)
{
    gp_kvstore *s = kvs_test_store(2, NULL);
    int32_t t[3][KVS_BS];
    unsigned char pl[KVS_BLOCK];
    for (int i = 0; i < 3; i++)
        prompt(t[i], KVS_BS, 10 * i);
    kvs_test_payload(0, pl);
    GP_CHECK_OK(gp_kvstore_put(s, 0, t[0], pl));
    GP_CHECK_OK(gp_kvstore_put(s, 1, t[1], pl));
    uint64_t k0 = 0, k1 = 1;
    int m;
    GP_CHECK_OK(gp_kvstore_match(s, &k0, t[0], 1, &m));
    GP_CHECK_OK(gp_kvstore_match(s, &k1, t[1], 1, &m));
    GP_CHECK_OK(gp_kvstore_match(s, &k1, t[1], 1, &m)); /* two readers of block 1 */
    GP_CHECK_FAIL(gp_kvstore_put(s, 2, t[2], pl), GP_SOFT_FULL, "512 of the 512 bytes of capacity are pinned");
    assert_int_equal(KVS_STAT(s, put_refused), 1);
    assert_int_equal(KVS_STAT(s, evictions), 0);

    GP_CHECK_OK(gp_kvstore_release(s, &k0, 1));
    GP_CHECK_OK(gp_kvstore_release(s, &k1, 1));
    GP_CHECK_OK(gp_kvstore_put(s, 2, t[2], pl)); /* evicts 0, the unpinned one, though 1 is older */
    const void *p;
    GP_CHECK_OK(gp_kvstore_get(s, 1, &p));
    GP_CHECK_OK(gp_kvstore_release(s, &k1, 1));
    GP_CHECK_FAIL(gp_kvstore_release(s, &k1, 1), GP_ERR_STATE, "key 0000000000000001 (index 0) is not pinned");
    assert_false(held(s, 0, t[0]));
    assert_true(held(s, 2, t[2]));
    gp_kvstore_destroy(s);
}

typedef struct { int allocs, frees; } counting;
static void *count_alloc(void *ctx, size_t n) { ((counting *)ctx)->allocs++; return malloc(n); }
static void count_free(void *ctx, void *p) { ((counting *)ctx)->frees++; free(p); }

static void test_allocator_hook(void **state)
{
    counting c = {0, 0};
    gp_kvstore_params p = gp_kvstore_default_params();
    p.id = kvs_test_id();
    p.capacity_bytes = 2 * KVS_BLOCK;
    p.alloc = count_alloc;
    p.free = count_free;
    p.alloc_ctx = &c;
    gp_kvstore *s;
    GP_CHECK_OK(gp_kvstore_create(&p, &s));
    int32_t t[12];
    uint64_t keys[3];
    prompt(t, 12, 0);
    kvs_test_put_prompt(s, t, 12, keys);
    assert_int_equal(c.allocs, 3);
    assert_int_equal(c.frees, 1); /* the evicted block */
    gp_kvstore_destroy(s);
    assert_int_equal(c.frees, 3);
}

typedef struct fill_ctx {
    uint64_t key;
    int calls;
    gp_status rc;
} fill_ctx;

static gp_status fill(void *ctx, void *dst)
{
    fill_ctx *f = ctx;
    f->calls++;
    if (f->rc != GP_OK)
        GP_FAIL(f->rc, "the test's fill fails");
    kvs_test_payload(f->key, dst);
    return GP_OK;
}

/* put_with: filled in place as put would copy; not called for a held key
 * nor without room; a failing fill stores nothing; with a dir the file
 * holds the filled payload. */
static void test_put_with(void **state)
{
    (void)state;
    char dir[] = "/tmp/gp_kvs_put_with_XXXXXX";
    assert_non_null(mkdtemp(dir));
    gp_kvstore *s = kvs_test_store(2, dir);
    int32_t t[3 * KVS_BS];
    prompt(t, 3 * KVS_BS, 7);
    fill_ctx f = {.key = 11};
    GP_CHECK_OK(gp_kvstore_put_with(s, 11, t, fill, &f));
    assert_int_equal(f.calls, 1);
    GP_CHECK_OK(gp_kvstore_put_with(s, 11, t, fill, &f)); /* held: only touched */
    assert_int_equal(f.calls, 1);
    int m = 0;
    uint64_t k = 11;
    GP_CHECK_OK(gp_kvstore_match(s, &k, t, 1, &m));
    const void *pl = NULL;
    unsigned char want[KVS_BLOCK];
    kvs_test_payload(11, want);
    GP_CHECK_OK(gp_kvstore_get(s, 11, &pl));
    assert_memory_equal(pl, want, KVS_BLOCK);
    f = (fill_ctx){.key = 12, .rc = GP_ERR_IO};
    GP_CHECK_FAIL(gp_kvstore_put_with(s, 12, t + KVS_BS, fill, &f), GP_ERR_IO, "the test's fill fails");
    assert_false(held(s, 12, t + KVS_BS));
    f = (fill_ctx){.key = 12};
    GP_CHECK_OK(gp_kvstore_put_with(s, 12, t + KVS_BS, fill, &f));
    uint64_t k2 = 12;
    GP_CHECK_OK(gp_kvstore_match(s, &k2, t + KVS_BS, 1, &m));
    f = (fill_ctx){.key = 13};
    assert_int_equal(gp_kvstore_put_with(s, 13, t + 2 * KVS_BS, fill, &f), GP_SOFT_FULL); /* both pinned */
    assert_int_equal(f.calls, 0);
    GP_CHECK_OK(gp_kvstore_release(s, &k, 1));
    GP_CHECK_OK(gp_kvstore_release(s, &k2, 1));
    gp_kvstore_destroy(s);
    /* a second store over the dir finds the filled block in its file */
    s = kvs_test_store(2, dir);
    k = 11;
    GP_CHECK_OK(gp_kvstore_match(s, &k, t, 1, &m));
    assert_int_equal(m, 1);
    GP_CHECK_OK(gp_kvstore_get(s, 11, &pl));
    assert_memory_equal(pl, want, KVS_BLOCK);
    GP_CHECK_OK(gp_kvstore_release(s, &k, 1));
    GP_CHECK_FAIL(gp_kvstore_put_with(s, 14, t, NULL, NULL), GP_ERR_INVALID_ARG, "fill is NULL");
    gp_kvstore_destroy(s);
    char path[256];
    for (uint64_t key = 11; key <= 13; key++) {
        gp_kvstore_file_path(dir, key, path, sizeof path);
        unlink(path);
    }
    rmdir(dir);
}

static void test_params_refused(void **state)
{
    gp_kvstore_params p = gp_kvstore_default_params();
    gp_kvstore *s = (gp_kvstore *)&p;
    p.id = kvs_test_id();
    GP_CHECK_FAIL(gp_kvstore_create(&p, &s), GP_ERR_INVALID_ARG,
                  "capacity_bytes = 0; allowed: at least one block (256 bytes)");
    assert_null(s);
    p.capacity_bytes = 100;
    GP_CHECK_FAIL(gp_kvstore_create(&p, &s), GP_ERR_INVALID_ARG, "one block is 256 bytes, above capacity_bytes = 100");
    p.capacity_bytes = 1000;
    p.alloc = count_alloc;
    GP_CHECK_FAIL(gp_kvstore_create(&p, &s), GP_ERR_INVALID_ARG, "only alloc of the allocator pair");
    p.alloc = NULL;
    p.id.n_layers = 0;
    GP_CHECK_FAIL(gp_kvstore_create(&p, &s), GP_ERR_INVALID_ARG, "identity.n_layers = 0; allowed: 1..65536");
    p.id = kvs_test_id();
    p.id.model = NULL;
    GP_CHECK_FAIL(gp_kvstore_create(&p, &s), GP_ERR_INVALID_ARG, "identity.model is NULL");
    p.id = kvs_test_id();
    p.dir = "";
    GP_CHECK_FAIL(gp_kvstore_create(&p, &s), GP_ERR_INVALID_ARG, "dir is empty");
    p.dir = "/dev/null";
    GP_CHECK_FAIL(gp_kvstore_create(&p, &s), GP_ERR_IO, "'/dev/null' is not a directory");
    p.dir = "/nonexistent-gp/a/b";
    GP_CHECK_FAIL(gp_kvstore_create(&p, &s), GP_ERR_IO, "dir '/nonexistent-gp/a/b'");
    GP_CHECK_FAIL(gp_kvstore_create(NULL, &s), GP_ERR_INVALID_ARG, "params is NULL");

    p.dir = NULL;
    GP_CHECK_OK(gp_kvstore_create(&p, &s));
    int32_t t[4] = {0};
    uint64_t k = 0;
    int m;
    GP_CHECK_FAIL(gp_kvstore_put(s, 0, NULL, t), GP_ERR_INVALID_ARG, "tokens is NULL");
    GP_CHECK_FAIL(gp_kvstore_match(s, &k, t, -1, &m), GP_ERR_INVALID_ARG, "n_blocks = -1");
    GP_CHECK_FAIL(gp_kvstore_match(s, NULL, t, 1, &m), GP_ERR_INVALID_ARG, "keys is NULL with 1 blocks");
    gp_kvstore_destroy(s);
    gp_kvstore_destroy(NULL);
}

/* Two threads on one store (prefill puts, a reader matches and reads): the
 * mutex keeps every read payload the one of its key. */
typedef struct { gp_kvstore *s; int base; int bad; } worker;

static void *work(void *arg)
{
    worker *w = arg;
    int32_t t[KVS_BS];
    unsigned char pl[KVS_BLOCK];
    for (int i = 0; i < 2000; i++) {
        uint64_t k = (uint64_t)(w->base + i % 50);
        prompt(t, KVS_BS, (int32_t)k);
        kvs_test_payload(k, pl);
        if (gp_kvstore_put(w->s, k, t, pl) < 0)
            w->bad++;
        int m = 0;
        if (gp_kvstore_match(w->s, &k, t, 1, &m) != GP_OK)
            w->bad++;
        if (m) {
            const void *p;
            if (gp_kvstore_get(w->s, k, &p) != GP_OK || memcmp(p, pl, KVS_BLOCK) != 0)
                w->bad++;
            gp_kvstore_release(w->s, &k, 1);
        }
    }
    return NULL;
}

static void test_two_threads(void **state)
{
    gp_kvstore *s = kvs_test_store(16, NULL);
    worker w[2] = {{s, 0, 0}, {s, 30, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(w[0].bad + w[1].bad, 0);
    assert_true(KVS_STAT(s, bytes_held) <= 16 * KVS_BLOCK);
    assert_int_equal(KVS_STAT(s, blocks_pinned), 0);
    gp_kvstore_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_blocks),      cmocka_unit_test(test_collision),
        cmocka_unit_test(test_lru_order),         cmocka_unit_test(test_pinned_never_evicted),
        cmocka_unit_test(test_allocator_hook),    cmocka_unit_test(test_params_refused),
        cmocka_unit_test(test_two_threads),       cmocka_unit_test(test_put_with),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
