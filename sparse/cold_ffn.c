/* The cold-neuron FFN on the CPU: one layer's share of the FFN for the
 * neurons not in the GPU's hot cache, over packed 16-bit weights, spread
 * over a persistent thread pool with results that do not depend on it. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sparse_impl.h"

#define GP_COLD_MAX_CHUNKS 256

struct gp_cold_ffn {
    gp_cold_ffn_params p;
    gp_pool *pool;
    float *partial;      /* [chunks][B][hidden]: each chunk's sum */
    size_t partial_cap;  /* floats */
    float *xf;           /* [B][hidden] masked x in fp32 */
    size_t xf_cap;
};

gp_cold_ffn_params gp_cold_ffn_default_params(void)
{
    gp_cold_ffn_params p = {.n_threads = 0, .chunks = 48};
    return p;
}

gp_status gp_cold_ffn_create(const gp_cold_ffn_params *p, gp_cold_ffn **out)
{
    if (!p || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_ffn_create: p and out must not be NULL");
    if (p->n_threads < 0 || p->n_threads > GP_POOL_MAX_THREADS)
        GP_FAIL(GP_ERR_INVALID_ARG, "cold FFN params: n_threads %d (allowed 0 for the online CPUs up to %d, or "
                "1..%d)", p->n_threads, GP_POOL_MAX_THREADS, GP_POOL_MAX_THREADS);
    if (p->chunks < 1 || p->chunks > GP_COLD_MAX_CHUNKS)
        GP_FAIL(GP_ERR_INVALID_ARG, "cold FFN params: chunks %d (allowed 1..%d)", p->chunks, GP_COLD_MAX_CHUNKS);
    const int T = gp_pool_threads_for(p->n_threads);
    gp_cold_ffn *c = calloc(1, sizeof *c);
    if (!c)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_cold_ffn_create: out of memory");
    c->p = *p;
    gp_status st = gp_pool_create(T, &c->pool);
    if (st != GP_OK) {
        free(c);
        return st;
    }
    *out = c;
    return GP_OK;
}

void gp_cold_ffn_destroy(gp_cold_ffn *c)
{
    if (!c)
        return;
    gp_pool_destroy(c->pool);
    free(c->partial);
    free(c->xf);
    free(c);
}

int gp_cold_ffn_threads(const gp_cold_ffn *c)
{
    return gp_pool_threads(c->pool);
}

/* Exact widening as the CPU reference's (reference/ref_ops.c): bf16 is a shift;
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

typedef struct gp_cold_job {
    const gp_cold_pack *pk;
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
} gp_cold_job;

/* out[b] = w . x[b0 + b] for b < RB (a compile-time 1, 2 or 4 at every
 * call, so the RB x 16 partial sums stay in registers), each summed exactly
 * as the reference's gp_ref_dot: 16 lanes over whole 16-element blocks, the
 * tail in order, the lanes folded pairwise 16 -> 4, then (0+2)+(1+3), then
 * the tail. Same bits, so the masks decided on them agree with the
 * reference's everywhere. */
static inline __attribute__((always_inline)) void gp_cold_dot_rows(const uint16_t *w, int f16, const float *xf,
                                                                   int H, int RB, float *out)
{
    float acc[4][16] = {{0}};
    int j = 0;
    for (; j + 16 <= H; j += 16) {
        float fw[16];
        for (int k = 0; k < 16; k++)
            fw[k] = gp_cold_widen(w, (size_t)(j + k), f16);
        for (int b = 0; b < RB; b++)
            for (int k = 0; k < 16; k++)
                acc[b][k] += fw[k] * xf[(size_t)b * H + j + k];
    }
    for (int b = 0; b < RB; b++) {
        float t = 0.0f;
        for (int k = j; k < H; k++)
            t += gp_cold_widen(w, (size_t)k, f16) * xf[(size_t)b * H + k];
        float *a = acc[b];
        for (int k = 0; k < 8; k++)
            a[k] += a[k + 8];
        for (int k = 0; k < 4; k++)
            a[k] += a[k + 4];
        out[b] = ((a[0] + a[2]) + (a[1] + a[3])) + t;
    }
}

static inline __attribute__((always_inline)) void gp_cold_dots(const uint16_t *w, int f16, const float *xf, int B,
                                                               int H, float *out)
{
    int b = 0;
    for (; b + 4 <= B; b += 4)
        gp_cold_dot_rows(w, f16, xf + (size_t)b * H, H, 4, out + b);
    if (B - b >= 2) {
        gp_cold_dot_rows(w, f16, xf + (size_t)b * H, H, 2, out + b);
        b += 2;
    }
    if (b < B)
        gp_cold_dot_rows(w, f16, xf + (size_t)b * H, H, 1, out + b);
}

/* Neurons are taken GP_COLD_GROUP at a time: their SwiGLU outputs first,
 * then the active ones' down columns added to the partial y one
 * GP_COLD_KB-wide block of it at a time, so that block stays in registers
 * across the group instead of being loaded and stored once per neuron.
 * Each element is still the neurons' sum in list order. */
#define GP_COLD_GROUP 16
#define GP_COLD_KB 64

/* Neurons [i0, i1) of the list into part [B][H]; returns the active ones.
 * f16 is a constant at both call sites, so the widening has no branch and
 * the loops vectorise. */
static inline __attribute__((always_inline)) int gp_cold_chunk(const gp_cold_job *jb, int i0, int i1, float *part,
                                                               const int f16)
{
    const int B = jb->B, H = jb->H;
    int active = 0;
    memset(part, 0, (size_t)B * H * sizeof *part);
    for (int i = i0; i < i1; i += GP_COLD_GROUP) {
        const int ig = i1 - i < GP_COLD_GROUP ? i1 - i : GP_COLD_GROUP;
        float a[GP_COLD_GROUP][GP_SPARSE_MAX_B];
        const uint16_t *wd[GP_COLD_GROUP];
        int na = 0;
        for (int n = 0; n < ig; n++) {
            const uint16_t *w = gp_cold_pack_neuron(jb->pk, jb->neurons[i + n]);
            float g[GP_SPARSE_MAX_B], u[GP_SPARSE_MAX_B];
            gp_cold_dots(w, f16, jb->xf, B, H, g);
            gp_cold_dots(w + H, f16, jb->xf, B, H, u);
            int any = 0;
            for (int b = 0; b < B; b++) {
                /* the reference's rounding points: gate/up stored, then the SwiGLU output */
                const float gr = gp_round_to(g[b], jb->dt), ur = gp_round_to(u[b], jb->dt);
                const float v = gp_round_to((gr / (1.0f + expf(-gr))) * ur, jb->dt);
                a[na][b] = fabsf(v) > jb->t_down ? v : 0.0f;
                any |= a[na][b] != 0.0f;
            }
            if (jb->active_out)
                jb->active_out[i + n] = (uint8_t)any;
            if (any)
                wd[na++] = w + 2 * (size_t)H;
        }
        active += na;
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
    return active;
}

/* Built for AVX2 beside the baseline on x86-64 (chosen at load time): the
 * same operations in the same order, no FMA, so the same bits either way.
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
GP_COLD_CLONES static int gp_cold_chunk_bf16(const gp_cold_job *jb, int i0,
                                                                                 int i1, float *part)
{
    return gp_cold_chunk(jb, i0, i1, part, 0);
}

GP_COLD_CLONES static int gp_cold_chunk_f16(const gp_cold_job *jb, int i0,
                                                                                int i1, float *part)
{
    return gp_cold_chunk(jb, i0, i1, part, 1);
}

static void gp_cold_chunk_bounds(const gp_cold_job *jb, int c, int *i0, int *i1)
{
    *i0 = (int)((long long)jb->n * c / jb->chunks);
    *i1 = (int)((long long)jb->n * (c + 1) / jb->chunks);
}

static void gp_cold_compute_task(void *ctx, int thread)
{
    gp_cold_job *jb = ctx;
    for (;;) {
        const int c = atomic_fetch_add_explicit(&jb->next, 1, memory_order_relaxed);
        if (c >= jb->chunks)
            break;
        int i0, i1;
        gp_cold_chunk_bounds(jb, c, &i0, &i1);
        if (i0 < i1)
            jb->active[c] = (jb->f16 ? gp_cold_chunk_f16 : gp_cold_chunk_bf16)(jb, i0, i1,
                                                                               jb->partial + (size_t)c * jb->B * jb->H);
    }
}

/* y = the non-empty chunks' partials added in chunk order, element by
 * element, over a fixed slice of y per thread. */
static void gp_cold_reduce_task(void *ctx, int thread)
{
    gp_cold_job *jb = ctx;
    const size_t total = (size_t)jb->B * jb->H;
    const int T = jb->threads;
    const size_t e0 = total * (size_t)thread / (size_t)T, e1 = total * (size_t)(thread + 1) / (size_t)T;
    for (size_t e = e0; e < e1; e++)
        jb->y[e] = 0.0f;
    for (int c = 0; c < jb->chunks; c++) {
        int i0, i1;
        gp_cold_chunk_bounds(jb, c, &i0, &i1);
        if (i0 >= i1)
            continue;
        const float *p = jb->partial + (size_t)c * total;
        for (size_t e = e0; e < e1; e++)
            jb->y[e] += p[e];
    }
}

gp_status gp_cold_ffn_run(gp_cold_ffn *c, const gp_cold_pack *pk, int B, const void *x, float t_gate_up,
                          float t_down, const int *neurons, int n, float *y, gp_cold_ffn_stats *stats)
{
    return gp_cold_ffn_run_ex(c, pk, B, x, t_gate_up, t_down, neurons, n, y, NULL, stats);
}

gp_status gp_cold_ffn_run_ex(gp_cold_ffn *c, const gp_cold_pack *pk, int B, const void *x, float t_gate_up,
                             float t_down, const int *neurons, int n, float *y, uint8_t *active_out,
                             gp_cold_ffn_stats *stats)
{
    if (!c || !pk || !x || !y || (n > 0 && !neurons))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_ffn_run: c, pk, x, y (and neurons when n > 0) must not be NULL");
    if (B < 1 || B > GP_SPARSE_MAX_B)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_ffn_run: B %d (allowed 1..%d)", B, GP_SPARSE_MAX_B);
    if (!(t_gate_up >= 0.0f) || isinf(t_gate_up) || !(t_down >= 0.0f) || isinf(t_down))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_ffn_run: thresholds gate_up %g, down %g (allowed: finite, >= 0)",
                (double)t_gate_up, (double)t_down);
    if (n < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_ffn_run: n %d neurons (allowed >= 0)", n);
    for (int i = 0; i < n; i++)
        if (!gp_cold_pack_neuron(pk, neurons[i]))
            GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_ffn_run: neurons[%d] = %d is not in the pack (%d neurons packed)",
                    i, neurons[i], gp_cold_pack_count(pk));
    const int H = gp_cold_pack_hidden(pk);
    const gp_dtype dt = gp_cold_pack_dtype(pk);
    const int chunks = c->p.chunks;
    const size_t need = (size_t)chunks * B * H, xneed = (size_t)B * H;
    if (need > c->partial_cap) {
        float *np = malloc(need * sizeof *np);
        if (!np)
            GP_FAIL(GP_ERR_NO_MEMORY, "gp_cold_ffn_run: out of memory for %zu partial sums", need);
        free(c->partial);
        c->partial = np, c->partial_cap = need;
    }
    if (xneed > c->xf_cap) {
        float *nx = malloc(xneed * sizeof *nx);
        if (!nx)
            GP_FAIL(GP_ERR_NO_MEMORY, "gp_cold_ffn_run: out of memory for %zu inputs", xneed);
        free(c->xf);
        c->xf = nx, c->xf_cap = xneed;
    }
    const uint16_t *xh = x;
    for (size_t e = 0; e < xneed; e++) {
        const float v = gp_half_to_f32(xh[e], dt);
        c->xf[e] = fabsf(v) > t_gate_up ? v : 0.0f;
    }

    gp_cold_job *jb = calloc(1, sizeof *jb);
    if (!jb)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_cold_ffn_run: out of memory");
    *jb = (gp_cold_job){.pk = pk, .B = B, .H = H, .f16 = dt == GP_DTYPE_F16, .chunks = chunks, .dt = dt,
                        .xf = c->xf, .t_down = t_down, .neurons = neurons, .n = n, .partial = c->partial, .y = y,
                        .active_out = active_out, .threads = gp_pool_threads(c->pool)};
    atomic_init(&jb->next, 0);
    if (n > 0)
        gp_pool_run(c->pool, gp_cold_compute_task, jb);
    gp_pool_run(c->pool, gp_cold_reduce_task, jb);

    if (stats) {
        int active = 0;
        for (int k = 0; k < chunks; k++)
            active += jb->active[k];
        const uint64_t row = (uint64_t)H * 2u;
        stats->active = active;
        stats->weight_bytes = (uint64_t)n * 2u * row + (uint64_t)active * row;
        stats->bytes = stats->weight_bytes + (uint64_t)B * row;
    }
    free(jb);
    return GP_OK;
}
