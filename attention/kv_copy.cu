/* K and V rows of consecutive positions between a sequence's paged blocks and
 * dense [n][n_kv_heads][head_dim] buffers: the scatter of a stored prefix's
 * reload and the gather that stores one. Bit copies, 16-byte vectors when the
 * rows allow. */
#include <limits.h>
#include <stdint.h>

#include "cuda_util.cuh"
#include "gp_attention.h"
#include "gp_kvcache.h"

/* grid (n, 2): x a position, y K (0) or V (1); each thread moves vectors of T. */
template <typename T>
__global__ void kv_copy_kernel(gp_kv_layout l, T *k_pool, T *v_pool, const int32_t *table, int pos0, T *k_buf,
                               T *v_buf, int row, int to_cache)
{
    const int t = blockIdx.x, p = pos0 + t;
    const int blk = table[p / l.block_size];
    if (blk < 0 || blk >= l.n_blocks)
        return; /* a bad table entry writes nothing rather than elsewhere */
    /* row: vectors of T per position; gp_kv_offset counts 16-bit elements */
    const size_t per = sizeof(T) / sizeof(uint16_t);
    T *pool = (blockIdx.y ? v_pool : k_pool) + gp_kv_offset(&l, blk, p % l.block_size, 0) / per;
    T *buf = (blockIdx.y ? v_buf : k_buf) + (size_t)t * (size_t)row;
    for (int i = threadIdx.x; i < row; i += blockDim.x) {
        if (to_cache)
            pool[i] = buf[i];
        else
            buf[i] = pool[i];
    }
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

extern "C" gp_status gp_kv_copy_tokens(const gp_kv_layout *l, void *k_pool, void *v_pool, const int32_t *table,
                                       int pos0, int n, void *k_buf, void *v_buf, gp_kv_copy_dir dir, void *stream)
{
    if (!l || !k_pool || !v_pool || !table || !k_buf || !v_buf)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_copy_tokens: NULL layout, pool, table or buffer");
    if (l->block_size < 1 || l->n_kv_heads < 1 || l->head_dim < 1 || l->n_blocks < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_copy_tokens: layout block_size %d, n_kv_heads %d, head_dim %d, "
                "n_blocks %d: each must be >= 1", l->block_size, l->n_kv_heads, l->head_dim, l->n_blocks);
    if (pos0 < 0 || n < 0 || (long long)pos0 + n > INT32_MAX)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_copy_tokens: positions %d + %d: allowed pos0 >= 0, n >= 0", pos0, n);
    if (dir != GP_KV_TO_CACHE && dir != GP_KV_FROM_CACHE)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_kv_copy_tokens: direction %d: allowed GP_KV_TO_CACHE (0) or "
                "GP_KV_FROM_CACHE (1)", (int)dir);
    if (n == 0)
        return GP_OK;
    const int elems = l->n_kv_heads * l->head_dim;
    cudaStream_t s = (cudaStream_t)stream;
    dim3 grid((unsigned)n, 2);
    if (elems % 8 == 0 && aligned16(k_pool) && aligned16(v_pool) && aligned16(k_buf) && aligned16(v_buf))
        kv_copy_kernel<uint4><<<grid, 128, 0, s>>>(*l, (uint4 *)k_pool, (uint4 *)v_pool, table, pos0,
                                                   (uint4 *)k_buf, (uint4 *)v_buf, elems / 8, dir == GP_KV_TO_CACHE);
    else
        kv_copy_kernel<uint16_t><<<grid, 128, 0, s>>>(*l, (uint16_t *)k_pool, (uint16_t *)v_pool, table, pos0,
                                                      (uint16_t *)k_buf, (uint16_t *)v_buf, elems,
                                                      dir == GP_KV_TO_CACHE);
    GP_CUDA_LAUNCH_CHECK("kv_copy_kernel");
    return GP_OK;
}
