/* Tests of the paged KV cache bookkeeping (kvcache/kv_cache.c): reserve,
 * advance, release, truncate, exhaustion, block boundaries and blocks shared
 * by reference counts. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "gp_kvcache.h"

#define BS 16

static gp_kv_layout layout(int n_blocks)
{
    return (gp_kv_layout){ .n_layers = 2, .n_kv_heads = 2, .head_dim = 8, .block_size = BS,
                           .n_blocks = n_blocks };
}

static int blocks_in_use(const gp_kv_tables *t, int seq)
{
    const int32_t *tab = gp_kv_block_table(t, seq);
    int n = 0;
    while (n < gp_kv_max_blocks_per_seq(t) && tab[n] >= 0)
        n++;
    for (int i = n; i < gp_kv_max_blocks_per_seq(t); i++)
        assert_int_equal(tab[i], -1); /* used entries are a prefix */
    return n;
}

static void test_layout(void **state)
{
    (void)state;
    gp_kv_layout l = layout(10);
    assert_true(gp_kv_layer_elems(&l) == 10ull * BS * 2 * 8);
    assert_true(gp_kv_offset(&l, 3, 5, 1) == ((3ull * BS + 5) * 2 + 1) * 8);
    l.n_blocks = 0;
    assert_true(gp_kv_layer_elems(&l) == 0);
    assert_true(gp_kv_layer_elems(NULL) == 0);
}

static void test_create_args(void **state)
{
    (void)state;
    gp_kv_tables *t = (gp_kv_tables *)1;
    gp_kv_layout l = layout(8);
    assert_int_equal(gp_kv_tables_create(&l, 0, 4, &t), GP_ERR_INVALID_ARG);
    assert_null(t);
    assert_non_null(strstr(gp_last_error(), "max_seqs = 0"));
    assert_int_equal(gp_kv_tables_create(&l, 2, -1, &t), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "max_blocks_per_seq = -1"));
    l.block_size = 0;
    assert_int_equal(gp_kv_tables_create(&l, 2, 4, &t), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "block_size = 0"));
    l = layout(8);
    l.block_size = 1 << 20;
    assert_int_equal(gp_kv_tables_create(&l, 2, 1 << 12, &t), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_kv_tables_create(NULL, 2, 4, &t), GP_ERR_INVALID_ARG);
    gp_kv_tables_destroy(NULL);
}

static void test_reserve_advance_release(void **state)
{
    (void)state;
    gp_kv_layout l = layout(8);
    gp_kv_tables *t;
    assert_int_equal(gp_kv_tables_create(&l, 3, 4, &t), GP_OK);
    assert_int_equal(gp_kv_free_blocks(t), 8);
    assert_int_equal(gp_kv_max_blocks_per_seq(t), 4);
    assert_int_equal(gp_kv_tables_layout(t)->block_size, BS);
    for (int s = 0; s < 3; s++) {
        assert_int_equal(gp_kv_len(t, s), 0);
        assert_int_equal(blocks_in_use(t, s), 0);
    }

    assert_int_equal(gp_kv_reserve(t, 0, 20), GP_OK); /* 2 blocks */
    assert_int_equal(gp_kv_len(t, 0), 0);
    assert_int_equal(gp_kv_free_blocks(t), 6);
    const int32_t *tab0 = gp_kv_block_table(t, 0);
    assert_int_equal(tab0[0], 0);
    assert_int_equal(tab0[1], 1);
    assert_int_equal(tab0[2], -1);
    assert_int_equal(gp_kv_advance(t, 0, 20), GP_OK);
    assert_int_equal(gp_kv_len(t, 0), 20);

    assert_int_equal(gp_kv_reserve(t, 1, 1), GP_OK);
    assert_int_equal(gp_kv_block_table(t, 1)[0], 2);
    assert_int_equal(gp_kv_advance(t, 1, 1), GP_OK);

    /* decode steps for seq 0 stay in block 1 until position 32 */
    for (int i = 0; i < 12; i++) {
        assert_int_equal(gp_kv_reserve(t, 0, 1), GP_OK);
        assert_int_equal(gp_kv_advance(t, 0, 1), GP_OK);
    }
    assert_int_equal(gp_kv_len(t, 0), 32);
    assert_int_equal(blocks_in_use(t, 0), 2);
    assert_int_equal(gp_kv_reserve(t, 0, 1), GP_OK);
    assert_int_equal(blocks_in_use(t, 0), 3);
    assert_int_equal(tab0[2], 3);

    /* advance past the reservation is refused */
    assert_int_equal(gp_kv_advance(t, 0, 2), GP_ERR_STATE);
    assert_non_null(strstr(gp_last_error(), "seq 0"));
    assert_int_equal(gp_kv_len(t, 0), 32);
    assert_int_equal(gp_kv_advance(t, 0, 1), GP_OK);
    assert_int_equal(gp_kv_advance(t, 0, 1), GP_ERR_STATE);

    gp_kv_release(t, 0);
    assert_int_equal(gp_kv_len(t, 0), 0);
    assert_int_equal(blocks_in_use(t, 0), 0);
    assert_int_equal(gp_kv_free_blocks(t), 7);
    /* released blocks are reused */
    assert_int_equal(gp_kv_reserve(t, 2, 3 * BS), GP_OK);
    assert_int_equal(gp_kv_free_blocks(t), 4);
    const int32_t *tab2 = gp_kv_block_table(t, 2);
    for (int i = 0; i < 3; i++)
        assert_true(tab2[i] >= 0 && tab2[i] < 8 && tab2[i] != 2);

    /* bad arguments */
    assert_int_equal(gp_kv_reserve(t, 3, 1), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "seq = 3"));
    assert_int_equal(gp_kv_reserve(t, -1, 1), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_kv_reserve(t, 1, -5), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_kv_advance(t, 1, -1), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_kv_len(t, 7), -1);
    assert_null(gp_kv_block_table(t, 7));
    gp_kv_release(t, 9); /* ignored */
    assert_int_equal(gp_kv_reserve(t, 1, 0), GP_OK);
    gp_kv_tables_destroy(t);
}

/* Truncation keeps the blocks that hold the kept tokens (same ids, so their
 * K/V stays valid) and frees the rest; growing again takes fresh blocks. */
static void test_truncate(void **state)
{
    (void)state;
    gp_kv_layout l = layout(8);
    gp_kv_tables *t;
    assert_int_equal(gp_kv_tables_create(&l, 2, 4, &t), GP_OK);
    assert_int_equal(gp_kv_reserve(t, 0, 3 * BS + 2), GP_OK);
    assert_int_equal(gp_kv_advance(t, 0, 3 * BS + 2), GP_OK);
    int32_t before[4];
    memcpy(before, gp_kv_block_table(t, 0), sizeof before);
    assert_int_equal(gp_kv_truncate(t, 0, 3 * BS + 3), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "length 51"));
    assert_int_equal(gp_kv_truncate(t, 0, BS + 1), GP_OK);
    assert_int_equal(gp_kv_len(t, 0), BS + 1);
    assert_int_equal(blocks_in_use(t, 0), 2);
    assert_memory_equal(gp_kv_block_table(t, 0), before, 2 * sizeof(int32_t));
    assert_int_equal(gp_kv_free_blocks(t), 6);
    assert_int_equal(gp_kv_advance(t, 0, 1), GP_ERR_STATE); /* nothing reserved past the new length */
    assert_int_equal(gp_kv_reserve(t, 0, BS), GP_OK);
    assert_int_equal(blocks_in_use(t, 0), 3);
    assert_int_equal(gp_kv_truncate(t, 0, 0), GP_OK);
    assert_int_equal(blocks_in_use(t, 0), 0);
    assert_int_equal(gp_kv_free_blocks(t), 8);
    gp_kv_tables_destroy(t);
}

static void test_exhaustion_unchanged(void **state)
{
    (void)state;
    gp_kv_layout l = layout(4);
    gp_kv_tables *t;
    assert_int_equal(gp_kv_tables_create(&l, 2, 8, &t), GP_OK);
    assert_int_equal(gp_kv_reserve(t, 0, 3 * BS - 1), GP_OK);
    assert_int_equal(gp_kv_advance(t, 0, 3 * BS - 1), GP_OK);
    assert_int_equal(gp_kv_reserve(t, 1, 5), GP_OK);
    int32_t before[8];
    memcpy(before, gp_kv_block_table(t, 1), sizeof before);
    assert_int_equal(gp_kv_free_blocks(t), 0);

    /* seq 1 needs a second block: none left */
    assert_int_equal(gp_kv_reserve(t, 1, BS + 1), GP_ERR_STATE);
    const char *e = gp_last_error();
    assert_non_null(strstr(e, "seq 1"));
    assert_non_null(strstr(e, "17 more tokens"));
    assert_non_null(strstr(e, "0 free blocks"));
    assert_int_equal(gp_kv_free_blocks(t), 0);
    assert_memory_equal(before, gp_kv_block_table(t, 1), sizeof before);
    assert_int_equal(gp_kv_len(t, 1), 0);
    /* and the earlier reservation still stands */
    assert_int_equal(gp_kv_advance(t, 1, 5), GP_OK);
    assert_int_equal(gp_kv_advance(t, 1, 1), GP_ERR_STATE);
    /* seq 0 still fits in its last block */
    assert_int_equal(gp_kv_reserve(t, 0, 1), GP_OK);
    assert_int_equal(gp_kv_reserve(t, 0, 2), GP_ERR_STATE);

    /* freeing seq 0 makes room for seq 1 */
    gp_kv_release(t, 0);
    assert_int_equal(gp_kv_free_blocks(t), 3);
    assert_int_equal(gp_kv_reserve(t, 1, 3 * BS - 5), GP_OK);
    assert_int_equal(gp_kv_free_blocks(t), 1);
    gp_kv_tables_destroy(t);

    /* the per-sequence table limit, with blocks to spare in the pool */
    l = layout(100);
    assert_int_equal(gp_kv_tables_create(&l, 1, 2, &t), GP_OK);
    assert_int_equal(gp_kv_reserve(t, 0, 2 * BS + 1), GP_ERR_STATE);
    assert_non_null(strstr(gp_last_error(), "2 blocks"));
    assert_int_equal(gp_kv_free_blocks(t), 100);
    assert_int_equal(blocks_in_use(t, 0), 0);
    assert_int_equal(gp_kv_reserve(t, 0, 2 * BS), GP_OK);
    assert_int_equal(gp_kv_advance(t, 0, 2 * BS), GP_OK);
    assert_int_equal(gp_kv_reserve(t, 0, 1), GP_ERR_STATE);
    assert_int_equal(gp_kv_free_blocks(t), 98);
    gp_kv_tables_destroy(t);
}

static void test_block_boundaries(void **state)
{
    (void)state;
    const int lens[] = { 1, BS - 1, BS, BS + 1 };
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        int L = lens[k];
        gp_kv_layout l = layout(8);
        gp_kv_tables *t;
        assert_int_equal(gp_kv_tables_create(&l, 1, 4, &t), GP_OK);
        assert_int_equal(gp_kv_reserve(t, 0, L), GP_OK);
        int want = (L + BS - 1) / BS;
        assert_int_equal(blocks_in_use(t, 0), want);
        assert_int_equal(gp_kv_advance(t, 0, L), GP_OK);
        assert_int_equal(gp_kv_len(t, 0), L);
        /* the next token opens a block only when L fills its blocks exactly */
        assert_int_equal(gp_kv_reserve(t, 0, 1), GP_OK);
        assert_int_equal(blocks_in_use(t, 0), want + (L % BS == 0));
        assert_int_equal(gp_kv_free_blocks(t), 8 - (want + (L % BS == 0)));
        /* position L lives in table[L / BS], slot L % BS */
        assert_true(gp_kv_block_table(t, 0)[L / BS] >= 0);
        gp_kv_release(t, 0);
        assert_int_equal(gp_kv_free_blocks(t), 8);
        gp_kv_tables_destroy(t);
    }
}

/* Offloaded KV: each sequence's first per_seq entries are its fixed host
 * ids, the rest come from the pool of the ids below them; releasing and
 * truncating give back pool ids only; refusals. */
static void test_host_blocks(void **state)
{
    (void)state;
    gp_kv_layout l = {.n_layers = 1, .n_kv_heads = 1, .head_dim = 4, .block_size = 4, .n_blocks = 16};
    gp_kv_tables *t = NULL;
    assert_int_equal(gp_kv_tables_create(&l, 3, 5, &t), GP_OK);
    assert_int_equal(gp_kv_tables_set_host(t, 10, 3), GP_ERR_INVALID_ARG); /* 10 + 3 x 3 > 16 */
    assert_int_equal(gp_kv_tables_set_host(t, 6, 6), GP_ERR_INVALID_ARG); /* more than 5 per sequence */
    assert_int_equal(gp_kv_tables_set_host(t, 7, 3), GP_OK);
    assert_int_equal(gp_kv_free_blocks(t), 7);
    assert_int_equal(gp_kv_reserve(t, 1, 18), GP_OK); /* 5 blocks: host 10, 11, 12, then pool 0, 1 */
    const int32_t *tb = gp_kv_block_table(t, 1);
    const int32_t want[5] = {10, 11, 12, 0, 1};
    assert_memory_equal(tb, want, sizeof want);
    assert_int_equal(gp_kv_free_blocks(t), 5);
    assert_int_equal(gp_kv_reserve(t, 0, 5), GP_OK); /* 2 blocks, both host: 7, 8 */
    assert_int_equal(gp_kv_block_table(t, 0)[1], 8);
    assert_int_equal(gp_kv_free_blocks(t), 5);
    assert_int_equal(gp_kv_advance(t, 1, 18), GP_OK);
    assert_int_equal(gp_kv_truncate(t, 1, 13), GP_OK); /* keeps 4 blocks: pool id 1 back */
    assert_int_equal(gp_kv_free_blocks(t), 6);
    gp_kv_release(t, 1);
    assert_int_equal(gp_kv_free_blocks(t), 7);
    assert_int_equal(gp_kv_reserve(t, 2, 20), GP_OK); /* 13, 14, 15, then pool 0, 1 again */
    assert_int_equal(gp_kv_block_table(t, 2)[0], 13);
    assert_int_equal(gp_kv_block_table(t, 2)[3], 0);
    assert_int_equal(gp_kv_tables_set_host(t, 7, 3), GP_ERR_STATE); /* not fresh */
    gp_kv_tables_destroy(t);
}

/* A retained full block outlives its sequence, attaches to others, and goes
 * back to the pool with its last holder; the free count stays exact. */
static void test_shared_blocks(void **state)
{
    (void)state;
    gp_kv_layout l = layout(8);
    gp_kv_tables *t;
    assert_int_equal(gp_kv_tables_create(&l, 3, 4, &t), GP_OK);
    assert_int_equal(gp_kv_reserve(t, 0, 2 * BS + 3), GP_OK); /* blocks 0, 1, 2 */
    assert_int_equal(gp_kv_advance(t, 0, 2 * BS + 3), GP_OK);
    int b0, b1, b;
    assert_int_equal(gp_kv_block_retain(t, 0, 2, &b), GP_ERR_INVALID_ARG); /* partly written */
    assert_non_null(strstr(gp_last_error(), "block 2, allowed [0, 2)"));
    assert_int_equal(gp_kv_block_retain(t, 0, -1, &b), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_kv_block_retain(t, 0, 0, NULL), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_kv_block_retain(t, 0, 0, &b0), GP_OK);
    assert_int_equal(gp_kv_block_retain(t, 0, 1, &b1), GP_OK);
    assert_int_equal(b0, 0);
    assert_int_equal(b1, 1);
    gp_kv_release(t, 0); /* the retained two stay held */
    assert_int_equal(gp_kv_free_blocks(t), 6);

    int both[2] = {b0, b1};
    assert_int_equal(gp_kv_attach(t, 1, both, 2), GP_OK);
    assert_int_equal(gp_kv_attach(t, 2, both, 1), GP_OK);
    assert_int_equal(gp_kv_len(t, 1), 2 * BS);
    assert_int_equal(gp_kv_len(t, 2), BS);
    assert_memory_equal(gp_kv_block_table(t, 1), both, sizeof both);
    assert_int_equal(gp_kv_free_blocks(t), 6);
    assert_int_equal(gp_kv_attach(t, 1, both, 1), GP_ERR_STATE); /* not empty */
    assert_non_null(strstr(gp_last_error(), "seq 1 holds 32 tokens"));
    int bad[1] = {5}; /* free, not held */
    assert_int_equal(gp_kv_attach(t, 0, bad, 1), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "block 5"));
    assert_int_equal(gp_kv_attach(t, 0, both, 5), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_kv_len(t, 0), 0);

    /* seq 1 grows past the shared blocks into a block of its own */
    assert_int_equal(gp_kv_reserve(t, 1, 1), GP_OK);
    assert_int_equal(gp_kv_advance(t, 1, 1), GP_OK);
    assert_int_equal(gp_kv_free_blocks(t), 5);
    /* cutting into a shared block is refused; to its end, it stays for the others */
    assert_int_equal(gp_kv_truncate(t, 1, BS + 3), GP_ERR_STATE);
    assert_non_null(strstr(gp_last_error(), "inside block 1, which 2 holders share"));
    assert_int_equal(gp_kv_len(t, 1), 2 * BS + 1);
    assert_int_equal(gp_kv_truncate(t, 1, BS), GP_OK);
    assert_int_equal(gp_kv_free_blocks(t), 6);
    gp_kv_release(t, 1);
    gp_kv_release(t, 2);
    assert_int_equal(gp_kv_free_blocks(t), 6); /* the retains still hold both */
    assert_int_equal(gp_kv_block_drop(t, b1), GP_OK);
    assert_int_equal(gp_kv_free_blocks(t), 7);
    assert_int_equal(gp_kv_block_drop(t, b1), GP_ERR_INVALID_ARG); /* dropped twice */
    assert_int_equal(gp_kv_block_drop(t, 8), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_kv_block_drop(t, b0), GP_OK);
    assert_int_equal(gp_kv_free_blocks(t), 8);
    /* every id is back once: a full reservation takes all 8 distinct ones */
    assert_int_equal(gp_kv_reserve(t, 0, 4 * BS), GP_OK);
    assert_int_equal(gp_kv_reserve(t, 1, 4 * BS), GP_OK);
    assert_int_equal(gp_kv_free_blocks(t), 0);
    int seen = 0;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 4; i++)
            seen |= 1 << gp_kv_block_table(t, s)[i];
    assert_int_equal(seen, 0xff);
    gp_kv_tables_destroy(t);
}

/* An offloaded cache's blocks are staged per sequence: sharing is refused,
 * with the reason, and nothing changes. */
static void test_host_refuses_sharing(void **state)
{
    (void)state;
    gp_kv_layout l = {.n_layers = 1, .n_kv_heads = 1, .head_dim = 4, .block_size = 4, .n_blocks = 16};
    gp_kv_tables *t = NULL;
    assert_int_equal(gp_kv_tables_create(&l, 2, 5, &t), GP_OK);
    assert_int_equal(gp_kv_tables_set_host(t, 10, 3), GP_OK);
    assert_int_equal(gp_kv_reserve(t, 0, 20), GP_OK);
    assert_int_equal(gp_kv_advance(t, 0, 20), GP_OK);
    int b = -1;
    assert_int_equal(gp_kv_block_retain(t, 0, 3, &b), GP_ERR_UNSUPPORTED);
    assert_non_null(strstr(gp_last_error(), "offloaded"));
    assert_int_equal(b, -1);
    int blocks[1] = {0};
    assert_int_equal(gp_kv_attach(t, 1, blocks, 1), GP_ERR_UNSUPPORTED);
    assert_int_equal(gp_kv_len(t, 1), 0);
    assert_int_equal(gp_kv_attach(t, 1, NULL, 0), GP_OK);
    gp_kv_tables_destroy(t);

    /* retained blocks make tables not fresh */
    assert_int_equal(gp_kv_tables_create(&l, 2, 5, &t), GP_OK);
    assert_int_equal(gp_kv_reserve(t, 0, 4), GP_OK);
    assert_int_equal(gp_kv_advance(t, 0, 4), GP_OK);
    assert_int_equal(gp_kv_block_retain(t, 0, 0, &b), GP_OK);
    gp_kv_release(t, 0);
    assert_int_equal(gp_kv_tables_set_host(t, 10, 2), GP_ERR_STATE);
    assert_non_null(strstr(gp_last_error(), "retained"));
    assert_int_equal(gp_kv_block_drop(t, b), GP_OK);
    assert_int_equal(gp_kv_tables_set_host(t, 10, 2), GP_OK);
    gp_kv_tables_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_create_args),
        cmocka_unit_test(test_reserve_advance_release),
        cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_exhaustion_unchanged),
        cmocka_unit_test(test_block_boundaries),
        cmocka_unit_test(test_host_blocks),
        cmocka_unit_test(test_shared_blocks),
        cmocka_unit_test(test_host_refuses_sharing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
