/* Keys of the stored-prefix cache (the FNV-1a hash chain from the identity's
 * seed), the payload layout of a block, and the payload checksum. */
#include <string.h>

#include "kvstore_impl.h"

gp_status gp_kvstore_identity_check(const gp_kvstore_identity *id)
{
    if (!id)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: identity is NULL; allowed: a model name and its KV shape");
    if (!id->model || !id->model[0])
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: identity.model is %s; allowed: a non-empty model name",
                id->model ? "empty" : "NULL");
    const struct { const char *name; int v, hi; } f[] = {
        {"n_layers", id->n_layers, 1 << 16},     {"n_kv_heads", id->n_kv_heads, 1 << 16},
        {"head_dim", id->head_dim, 1 << 16},     {"block_size", id->block_size, 1 << 16},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < 1 || f[i].v > f[i].hi)
            GP_FAIL(GP_ERR_INVALID_ARG, "kv store: identity.%s = %d; allowed: 1..%d", f[i].name, f[i].v, f[i].hi);
    if (id->dtype_bytes != 1 && id->dtype_bytes != 2 && id->dtype_bytes != 4)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: identity.dtype_bytes = %d; allowed: 1, 2 or 4", id->dtype_bytes);
    return GP_OK;
}

uint64_t gp_kvstore_seed(const gp_kvstore_identity *id)
{
    static const char tag[] = "greenpipe kv block v1";
    uint64_t h = gp_fnv1a(GP_FNV1A_OFFSET, tag, sizeof tag - 1);
    size_t n = id->model ? strlen(id->model) : 0;
    /* The length first: "ab"+1 and "a"+... can never hash the same bytes. */
    h = gp_fnv1a_u64(h, n);
    h = gp_fnv1a(h, id->model, n);
    h = gp_fnv1a_u32(h, (uint32_t)id->n_layers);
    h = gp_fnv1a_u32(h, (uint32_t)id->n_kv_heads);
    h = gp_fnv1a_u32(h, (uint32_t)id->head_dim);
    h = gp_fnv1a_u32(h, (uint32_t)id->dtype_bytes);
    return gp_fnv1a_u32(h, (uint32_t)id->block_size);
}

uint64_t gp_kvstore_next_key(uint64_t prev, const int32_t *tokens, int block_size)
{
    uint64_t h = gp_fnv1a_u64(GP_FNV1A_OFFSET, prev);
    for (int i = 0; i < block_size; i++)
        h = gp_fnv1a_u32(h, (uint32_t)tokens[i]);
    return h;
}

gp_status gp_kvstore_chain(const gp_kvstore_identity *id, const int32_t *tokens, int n_tokens,
                           uint64_t *keys, int *n_keys)
{
    GP_TRY(gp_kvstore_identity_check(id));
    if (n_tokens < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: n_tokens = %d; allowed: 0 or more", n_tokens);
    int nb = n_tokens / id->block_size;
    if (nb > 0 && (!tokens || !keys))
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: %s is NULL with %d whole blocks to hash", tokens ? "keys" : "tokens",
                nb);
    uint64_t prev = gp_kvstore_seed(id);
    for (int b = 0; b < nb; b++)
        keys[b] = prev = gp_kvstore_next_key(prev, tokens + (size_t)b * id->block_size, id->block_size);
    if (n_keys)
        *n_keys = nb;
    return GP_OK;
}

gp_status gp_kvstore_block_bytes(const gp_kvstore_identity *id, uint64_t *bytes)
{
    GP_TRY(gp_kvstore_identity_check(id));
    uint64_t b = 2;
    const uint64_t f[] = {(uint64_t)id->n_layers, (uint64_t)id->block_size, (uint64_t)id->n_kv_heads,
                          (uint64_t)id->head_dim, (uint64_t)id->dtype_bytes};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!gp_mul_u64(b, f[i], &b))
            GP_FAIL(GP_ERR_OVERFLOW, "kv store: block bytes overflow 64 bits for model '%s'", id->model);
    *bytes = b;
    return GP_OK;
}

gp_status gp_kvstore_part_range(const gp_kvstore_identity *id, int layer, gp_kvstore_part part,
                                uint64_t *offset, uint64_t *bytes)
{
    uint64_t block;
    GP_TRY(gp_kvstore_block_bytes(id, &block));
    if (layer < 0 || layer >= id->n_layers)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: layer %d; allowed: 0..%d", layer, id->n_layers - 1);
    if (part != GP_KVSTORE_K && part != GP_KVSTORE_V)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: part %d; allowed: GP_KVSTORE_K (0) or GP_KVSTORE_V (1)", (int)part);
    uint64_t piece = block / 2 / (uint64_t)id->n_layers;
    *offset = ((uint64_t)layer * 2 + (uint64_t)part) * piece;
    *bytes = piece;
    return GP_OK;
}

/* Byte-wise FNV-1a runs near 1 GB/s, below a disk's read rate, so the
 * payload goes through FNV-1a in four interleaved lanes of 64-bit
 * little-endian words, the lanes and the tail then folded by byte-wise
 * FNV-1a. Not a cryptographic check: it catches torn writes and bit rot. */
uint64_t kvs_checksum(const void *data, uint64_t n)
{
    const unsigned char *p = data;
    uint64_t lane[4] = {GP_FNV1A_OFFSET, GP_FNV1A_OFFSET ^ 1, GP_FNV1A_OFFSET ^ 2, GP_FNV1A_OFFSET ^ 3};
    uint64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; l++) {
            uint64_t w = 0;
            for (int k = 7; k >= 0; k--)
                w = (w << 8) | p[i + 8 * (uint64_t)l + (uint64_t)k];
            lane[l] = (lane[l] ^ w) * GP_FNV1A_PRIME;
        }
    uint64_t h = gp_fnv1a_u64(GP_FNV1A_OFFSET, n);
    for (int l = 0; l < 4; l++)
        h = gp_fnv1a_u64(h, lane[l]);
    return gp_fnv1a(h, p + i, (size_t)(n - i));
}

const char *gp_kvstore_miss_name(gp_kvstore_miss m)
{
    static const char *const names[GP_KVSTORE_MISS_COUNT] = {
        "absent", "io", "truncated", "magic", "version", "identity", "key", "tokens", "checksum", "no room",
    };
    return (unsigned)m < GP_KVSTORE_MISS_COUNT ? names[m] : "unknown";
}
