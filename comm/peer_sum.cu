/* The one-shot all-reduce over peer memory: every block copies its chunk of
 * the rows into this rank's slot, tells each rank it has (a flag with its
 * call count, written into that rank's memory), waits for every rank's flag
 * in its own memory, then sums the chunk of each rank's slot in rank order.
 * Two slots, alternating by call: a rank writes a slot again only two calls
 * later, after every rank has started the call between, which they do only
 * once their reads of that slot are done (stream order). Flags and counters
 * are per block, so no block waits for another of its own grid; every call
 * runs all GP_PEER_BLOCKS blocks, so the counters agree and a call's blocks
 * share one slot whatever the sizes of the calls before. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "gp_launch.cuh"
#include "peer_sum.h"

#define THREADS 512

static __device__ __forceinline__ void store_release_sys(unsigned *p, unsigned v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ unsigned load_acquire_sys(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__global__ void __launch_bounds__(THREADS) peer_sum_kernel(gp_peer_sum_args a, float *rows, size_t n, bool vec)
{
    gp_pdl_wait(); /* launched early beside the kernel that writes rows */
    __shared__ unsigned e_s;
    const int b = blockIdx.x;
    if (threadIdx.x == 0)
        e_s = a.counter[b] + 1;
    __syncthreads();
    const unsigned e = e_s;
    const size_t slot = (e & 1u) * a.slot_floats;
    const size_t per = ((n + gridDim.x - 1) / gridDim.x + 3) & ~(size_t)3;
    const size_t lo = min(n, (size_t)b * per), hi = min(n, lo + per);
    const size_t vhi = vec ? lo + ((hi - lo) & ~(size_t)3) : lo;
    float *mine = a.data[a.rank] + slot;
    for (size_t i = lo + 4 * threadIdx.x; i < vhi; i += 4 * THREADS)
        *(float4 *)(mine + i) = *(const float4 *)(rows + i);
    for (size_t i = vhi + threadIdx.x; i < hi; i += THREADS)
        mine[i] = rows[i];
    __syncthreads();
    if (threadIdx.x < a.n_ranks) {
        const int r = threadIdx.x;
        /* the release is cumulative: the block's copies, ordered before it by the barrier, are seen first */
        store_release_sys(a.flags[r] + a.rank * GP_PEER_BLOCKS + b, e);
        const unsigned *f = a.flags[a.rank] + r * GP_PEER_BLOCKS + b;
        for (unsigned k = 1; (int)(load_acquire_sys(f) - e) < 0; k++)
            if ((k & 1023u) == 0 && *a.abort)
                break; /* the group failed: the sums are not whole, gp_comm_check says so */
    }
    __syncthreads();
    for (size_t i = lo + 4 * threadIdx.x; i < vhi; i += 4 * THREADS) {
        float4 s = __ldcg((const float4 *)(a.data[0] + slot + i));
        for (int r = 1; r < a.n_ranks; r++) {
            const float4 v = __ldcg((const float4 *)(a.data[r] + slot + i));
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        *(float4 *)(rows + i) = s;
    }
    for (size_t i = vhi + threadIdx.x; i < hi; i += THREADS) { /* L2, never a stale L1 line of a slot */
        float s = __ldcg(a.data[0] + slot + i);
        for (int r = 1; r < a.n_ranks; r++)
            s += __ldcg(a.data[r] + slot + i);
        rows[i] = s;
    }
    if (threadIdx.x == 0)
        a.counter[b] = e;
}

extern "C" int gp_peer_sum_launch(const gp_peer_sum_args *a, float *rows, size_t n, void *stream)
{
    if (n == 0)
        return (int)cudaSuccess;
    const bool vec = ((uintptr_t)rows & 15) == 0 && (a->slot_floats & 3) == 0;
    gp_launch l;
    gp_launch_setup(&l, dim3(GP_PEER_BLOCKS), dim3(THREADS), 0, (cudaStream_t)stream);
    return (int)cudaLaunchKernelEx(&l.cfg, peer_sum_kernel, *a, rows, n, vec);
}
