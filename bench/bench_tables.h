/* Block tables for the attention benchmarks: the pool's blocks in order, or
 * a seeded random permutation of them, as a cache's rows scatter over the
 * pool after sequences grow interleaved. */
#ifndef GP_BENCH_TABLES_H
#define GP_BENCH_TABLES_H

#include <stdint.h>

/* t[0..n) = 0..n-1, shuffled (Fisher-Yates over a splitmix64 stream from
 * seed) unless contig. */
static inline void gp_bench_block_table(int32_t *t, int n, int contig, uint64_t seed)
{
    for (int i = 0; i < n; i++)
        t[i] = i;
    for (int i = n - 1; i > 0 && !contig; i--) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        int j = (int)(z % (uint64_t)(i + 1));
        int32_t s = t[i];
        t[i] = t[j];
        t[j] = s;
    }
}

#endif
