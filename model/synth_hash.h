/* The synthetic weight generator's value function, shared by the host filler
 * (synth.c) and the device kernel (synth.cu) so both produce identical bits. */
#ifndef GP_SYNTH_HASH_H
#define GP_SYNTH_HASH_H

#include <stdint.h>

#include "gp_model.h"

/* splitmix64's finaliser: a bijection on 64 bits with full avalanche. */
static inline GP_HD uint64_t gp_synth_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The generator's float value of element idx of tensor (kind, layer) for
 * seed, before any rounding to a storage dtype. Global tensors use layer 0.
 * Each (seed, kind, layer) picks a splitmix64 stream whose idx-th output is
 * the element, so values do not depend on generation order or on how the
 * work is split. The stream key is loop-invariant: compilers hoist it.
 *
 * Bit-identity between host and device rests on every float operation being
 * exact or a single correctly rounded IEEE operation: u is an integer below
 * 2^24 times a power of two (exact); v = u * scale is one rounded multiply;
 * norms add 1 to that rounded v. The multiply and the add must not fuse into
 * an FMA (which rounds once instead of twice), so the device uses the _rn
 * intrinsics, which nvcc never contracts, and the host stores v through a
 * volatile, which no compiler contracts across. */
static inline GP_HD float gp_synth_f32(uint64_t seed, int kind, int layer, uint64_t idx, float scale)
{
    uint64_t key = gp_synth_mix64(seed ^ gp_synth_mix64(((uint64_t)(uint32_t)kind << 32)
                                                        | (uint64_t)(uint32_t)layer));
    uint64_t r = gp_synth_mix64(key + (idx + 1) * 0x9e3779b97f4a7c15ull);
    int32_t bits = (int32_t)(r >> 40); /* top 24 bits */
    const float two_m23 = 1.0f / (float)(1 << 23);
    int norm = kind == GP_T_ATTN_NORM || kind == GP_T_FFN_NORM || kind == GP_T_FINAL_NORM;
#ifdef __CUDA_ARCH__
    float u = __fmul_rn((float)(bits - (1 << 23)), two_m23); /* in [-1, 1), exact */
    float v = __fmul_rn(u, scale);
    return norm ? __fadd_rn(1.0f, v) : v;
#else
    float u = (float)(bits - (1 << 23)) * two_m23; /* in [-1, 1), exact */
    if (!norm)
        return u * scale; /* no add follows: nothing to fuse */
    volatile float v = u * scale;
    return 1.0f + v;
#endif
}

/* The bf16 value: gp_synth_f32 rounded to nearest even (the device kernel's
 * output and the host's BF16 weights). */
static inline GP_HD gp_bf16 gp_synth_bf16(uint64_t seed, int kind, int layer, uint64_t idx,
                                          float scale)
{
    return gp_f32_to_bf16(gp_synth_f32(seed, kind, layer, idx, scale));
}

#endif
