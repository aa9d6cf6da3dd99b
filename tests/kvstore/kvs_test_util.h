/* What the kvstore tests share: a small identity, payloads derived from a
 * block's tokens, and prompts whose keys the tests compute. */
#ifndef KVS_TEST_UTIL_H
#define KVS_TEST_UTIL_H

#include "gp_test.h"
#include "gp_kvstore.h"

/* 2 layers, 2 KV heads of 4, 2-byte elements, 4 tokens a block: 256 bytes. */
static inline gp_kvstore_identity kvs_test_id(void)
{
    gp_kvstore_identity id = {"tiny-test", 2, 2, 4, 2, 4};
    return id;
}

enum { KVS_BS = 4, KVS_BLOCK = 256 };

/* A payload that tells blocks apart: bytes from the key. */
static inline void kvs_test_payload(uint64_t key, unsigned char *p)
{
    for (int i = 0; i < KVS_BLOCK; i++)
        p[i] = (unsigned char)(key >> (8 * (i % 8))) ^ (unsigned char)i;
}

static inline gp_kvstore *kvs_test_store(uint64_t capacity_blocks, const char *dir)
{
    gp_kvstore_params p = gp_kvstore_default_params();
    p.id = kvs_test_id();
    p.capacity_bytes = capacity_blocks * KVS_BLOCK;
    p.dir = dir;
    p.warn_stderr = false;
    gp_kvstore *s = NULL;
    GP_CHECK_OK(gp_kvstore_create(&p, &s));
    return s;
}

/* Puts every whole block of tokens[0..n) with its chain key; keys[n / KVS_BS]. */
static inline void kvs_test_put_prompt(gp_kvstore *s, const int32_t *tokens, int n, uint64_t *keys)
{
    gp_kvstore_identity id = kvs_test_id();
    int nk = 0;
    GP_CHECK_OK(gp_kvstore_chain(&id, tokens, n, keys, &nk));
    unsigned char pl[KVS_BLOCK];
    for (int b = 0; b < nk; b++) {
        kvs_test_payload(keys[b], pl);
        GP_CHECK_OK(gp_kvstore_put(s, keys[b], tokens + b * KVS_BS, pl));
    }
}

static inline uint64_t kvs_test_stat(gp_kvstore *s, size_t offset)
{
    gp_kvstore_stats st;
    gp_kvstore_get_stats(s, &st, false);
    return *(const uint64_t *)((const char *)&st + offset);
}
#define KVS_STAT(s, field) kvs_test_stat((s), offsetof(gp_kvstore_stats, field))

#endif
