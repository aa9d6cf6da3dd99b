/* Private to sparse/'s C library (and its tests): the magnitude histogram a
 * calibration sets its thresholds from, and the parts of the cold-neuron
 * CPU FFN that the pack (cold_ffn.c) and the set (cold_set.c) share. */
#ifndef GP_SPARSE_IMPL_H
#define GP_SPARSE_IMPL_H

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_sparse.h"

/* Log-spaced bins of |x| over [LO, HI): bin j holds [LO 10^(j/D), LO
 * 10^((j+1)/D)) with D = BINS / log10(HI/LO) = 512 bins a decade, each
 * 0.45% wide; values below LO count in bin 0, at or above HI in the last
 * bin, exact zeros apart. 64 KiB a histogram. */
#define GP_SPARSE_HIST_BINS 8192
#define GP_SPARSE_HIST_LO_LOG10 (-10)
#define GP_SPARSE_HIST_HI_LOG10 6
#define GP_SPARSE_HIST_PER_DECADE (GP_SPARSE_HIST_BINS / (GP_SPARSE_HIST_HI_LOG10 - GP_SPARSE_HIST_LO_LOG10))

typedef struct gp_sparse_hist {
    uint64_t zero;                      /* exact zeros (+0 and -0) */
    uint64_t bins[GP_SPARSE_HIST_BINS]; /* nonzero finite values by magnitude */
    uint64_t n;                         /* finite values counted: zero + the bins */
    uint64_t nonfinite;                 /* NaN and inf, not counted in n */
} gp_sparse_hist;

/* The bin of a finite magnitude a > 0. */
int gp_sparse_hist_bin(float a);
/* Lower edge of bin j (0..BINS; BINS gives the top edge). */
double gp_sparse_hist_edge(int j);
void gp_sparse_hist_add(gp_sparse_hist *h, const float *x, size_t n);
/* The threshold t that drops a share S in [0, 1) of the counted values
 * (|x| <= t): 0 when the zeros alone reach it, else interpolated
 * log-linearly inside the bin where the cumulative count passes S n.
 * 0 for an empty histogram. */
float gp_sparse_hist_threshold(const gp_sparse_hist *h, double S);

/* ------------------------------------------------------------ cold-neuron FFN
 * Both layouts must give the same bits, so what decides a bit lives here
 * once: the widening, the lane fold, the SwiGLU's rounding points, the down
 * sums and their chunking and reduction. */

#define GP_COLD_MAX_CHUNKS 256
/* Down columns are added GP_COLD_GROUP neurons at a time, one GP_COLD_KB-wide
 * block of the partial y at a time, so that block stays in registers across
 * the group instead of being loaded and stored once per neuron. */
#define GP_COLD_GROUP 16
#define GP_COLD_KB 64

struct gp_cold_ffn {
    gp_cold_ffn_params p;
    gp_pool *pool;
    float *partial;      /* [chunks][B][hidden]: each chunk's sum */
    size_t partial_cap;  /* floats */
    float *xf;           /* [B][hidden] masked x in fp32 */
    size_t xf_cap;
    /* cold sets only (cold_set.c) */
    int *kact;           /* [hidden] the active inputs, ascending */
    size_t kact_cap;
    float *act;          /* [n][B] masked SwiGLU outputs by position */
    size_t act_cap;
    float *lanes;        /* per thread: the gate/up lane accumulators of its column range */
    size_t lanes_cap;
};

typedef struct gp_cold_job gp_cold_job;
/* Sums neurons [i0, i1) of the list into part [B][H] (zeroed first) and
 * returns how many were active. */
typedef int (*gp_cold_chunk_fn)(const gp_cold_job *jb, int i0, int i1, float *part);
struct gp_cold_job {
    gp_cold_chunk_fn chunk;
    const gp_cold_pack *pk;    /* pack runs */
    const gp_cold_set *cs;     /* set runs */
    const float *act;          /* set runs: [n][B] SwiGLU outputs already masked */
    int B, H, f16, chunks;
    int threads;         /* the pool's, for the reduction's slices */
    gp_dtype dt;
    const float *xf;     /* [B][H] masked */
    float t_down;
    const int *neurons;
    int n;
    float *partial;      /* [chunks][B][H] */
    float *y;            /* [B][H] */
    uint8_t *active_out; /* [n] or NULL: listed neuron i's down input active in some row */
    atomic_int next;     /* next chunk to claim */
    int active[GP_COLD_MAX_CHUNKS];
};

/* B and the thresholds, refused with fn's name in the message. */
gp_status gp_cold_ffn_check(const char *fn, int B, float t_gate_up, float t_down);
/* Scratch for B rows of H inputs, and c->xf = x (of dt) masked by
 * t_gate_up. */
gp_status gp_cold_ffn_prepare(gp_cold_ffn *c, const char *fn, int B, const void *x, gp_dtype dt, int H,
                              float t_gate_up);
/* The list's chunks (c->p.chunks of jb->n, jb->chunk each) summed on the
 * pool, then y = their partials added in chunk order; returns the active
 * neurons. jb's pool fields (partial, chunks, threads, next) are set here. */
int gp_cold_ffn_sum(gp_cold_ffn *c, gp_cold_job *jb);

/* Exact widening as the CPU reference's (model/ref_ops.c): bf16 is a shift;
 * fp16's magnitude bits placed in a float and scaled by 2^112, inf/NaN
 * patched, branch-free so the loops vectorise. */
static inline float gp_cold_widen(const uint16_t *w, size_t i, int f16)
{
    if (!f16)
        return gp_bf16_to_f32(w[i]);
    uint32_t h = w[i];
    union { uint32_t u; float f; } v, big, r;
    v.u = (h & 0x7fffu) << 13;
    big.u = (uint32_t)(127 + 112) << 23;
    r.f = v.f * big.f;
    if ((h & 0x7c00u) == 0x7c00u)
        r.u = 0x7f800000u | ((h & 0x3ffu) << 13);
    r.u |= (h & 0x8000u) << 16;
    return r.f;
}

/* The end of the reference's gp_ref_dot: the 16 lanes (lane L summed k = L
 * mod 16 over whole 16-blocks, in increasing k) folded pairwise 16 -> 4,
 * then (0+2)+(1+3), then the tail (the k past the last whole block, in
 * order). a is clobbered. */
static inline __attribute__((always_inline)) float gp_cold_fold(float *a, float tail)
{
    for (int k = 0; k < 8; k++)
        a[k] += a[k + 8];
    for (int k = 0; k < 4; k++)
        a[k] += a[k + 4];
    return ((a[0] + a[2]) + (a[1] + a[3])) + tail;
}

/* The down input from the gate and up sums, where the CPU reference rounds:
 * gate/up stored in dt, then the SwiGLU output in dt, then masked by
 * t_down. */
static inline float gp_cold_act(float g, float u, gp_dtype dt, float t_down)
{
    const float gr = gp_round_to(g, dt), ur = gp_round_to(u, dt);
    const float v = gp_round_to((gr / (1.0f + expf(-gr))) * ur, dt);
    return fabsf(v) > t_down ? v : 0.0f;
}

/* part[b][:] += a[n][b] x down column wd[n] for the na active neurons of a
 * group, in their order, each element a sum in that order (a zero a[n][b]
 * adds nothing to row b). */
static inline __attribute__((always_inline)) void gp_cold_down_group(float *part, int B, int H,
                                                                     float (*a)[GP_SPARSE_MAX_B],
                                                                     const uint16_t *const *wd, int na,
                                                                     const int f16)
{
    for (int k0 = 0; k0 < H && na; k0 += GP_COLD_KB) {
        const int kn = H - k0 < GP_COLD_KB ? H - k0 : GP_COLD_KB;
        float fd[GP_COLD_GROUP][GP_COLD_KB];
        for (int n = 0; n < na; n++)
            for (int k = 0; k < kn; k++)
                fd[n][k] = gp_cold_widen(wd[n], (size_t)(k0 + k), f16);
        for (int b = 0; b < B; b++) {
            float acc[GP_COLD_KB];
            float *y = part + (size_t)b * H + k0;
            for (int k = 0; k < kn; k++)
                acc[k] = y[k];
            for (int n = 0; n < na; n++) {
                const float ab = a[n][b];
                if (ab == 0.0f)
                    continue;
                for (int k = 0; k < kn; k++)
                    acc[k] += ab * fd[n][k];
            }
            for (int k = 0; k < kn; k++)
                y[k] = acc[k];
        }
    }
}

/* Built for AVX2 beside the baseline on x86-64 (chosen at load time): the
 * same operations in the same order, no FMA (AVX2 alone has none, and the
 * files are built with -ffp-contract=off), so the same bits either way.
 * Not under ThreadSanitizer: its runtime is not up yet when the loader
 * runs the clones' resolver, and the process dies before main. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GP_COLD_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define GP_COLD_TSAN 1
#endif
#if defined(__x86_64__) && (defined(__clang__) ? __clang_major__ >= 14 : defined(__GNUC__)) && !defined(GP_COLD_TSAN)
#define GP_COLD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GP_COLD_CLONES
#endif

#endif
