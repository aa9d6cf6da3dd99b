/* A layer's cold neurons laid out by input for the cold-neuron CPU FFN, so
 * a step reads only the gate and up weights of its active inputs, with the
 * same bits as gp_cold_ffn_run_ex over the pack. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sparse_impl.h"

struct gp_cold_set {
    gp_dtype dt;
    int hidden, n;
    int ld;          /* a gate/up row's length: n padded to whole 64-byte lines, so each row starts on one */
    int *neurons;    /* [n] */
    int *pos;        /* [pos_cap] neuron -> position, -1 absent; grown as neurons come in */
    int pos_cap;
    uint16_t *gu;    /* [hidden][2][ld]: input k's gate row then its up row */
    uint16_t *down;  /* [n][hidden] */
    uint64_t bytes;
};

void gp_cold_set_destroy(gp_cold_set *cs)
{
    if (!cs)
        return;
    free(cs->neurons);
    free(cs->pos);
    free(cs->gu);
    free(cs->down);
    free(cs);
}

/* Room in pos for neuron j. */
static gp_status gp_cold_set_pos_room(gp_cold_set *cs, int j)
{
    if (j < cs->pos_cap)
        return GP_OK;
    const int cap = j + 1 > 2 * cs->pos_cap ? j + 1 : 2 * cs->pos_cap;
    int *np = realloc(cs->pos, (size_t)cap * sizeof *np);
    if (!np)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_cold_set: out of memory for a map of %d neurons", cap);
    for (int i = cs->pos_cap; i < cap; i++)
        np[i] = -1;
    cs->pos = np, cs->pos_cap = cap;
    return GP_OK;
}

/* Positions [i0, i1) take the pack's neurons js[0 .. i1 - i0): gate/up
 * columns and down rows. The transpose goes in tiles of GP_SET_TILE
 * neurons by inputs so the reads (a neuron's rows) and the strided writes
 * (an input's row) both stay in cache; one neuron alone (a replace) is a
 * strided column. */
#define GP_SET_TILE 64
static void gp_cold_set_put(gp_cold_set *cs, const gp_cold_pack *pk, int i0, int i1, const int *js)
{
    const int H = cs->hidden;
    const size_t ld = (size_t)cs->ld;
    for (int a0 = i0; a0 < i1; a0 += GP_SET_TILE) {
        const int a1 = i1 - a0 < GP_SET_TILE ? i1 : a0 + GP_SET_TILE;
        const uint16_t *w[GP_SET_TILE];
        for (int i = a0; i < a1; i++) {
            const int j = js[i - i0];
            w[i - a0] = gp_cold_pack_neuron(pk, j);
            memcpy(cs->down + (size_t)i * H, w[i - a0] + 2 * (size_t)H, (size_t)H * sizeof *cs->down);
            cs->neurons[i] = j;
            cs->pos[j] = i;
        }
        for (int k0 = 0; k0 < H; k0 += GP_SET_TILE) {
            const int k1 = H - k0 < GP_SET_TILE ? H : k0 + GP_SET_TILE;
            for (int k = k0; k < k1; k++) {
                uint16_t *g = cs->gu + (size_t)k * 2 * ld, *u = g + ld;
                for (int i = a0; i < a1; i++) {
                    g[i] = w[i - a0][k];
                    u[i] = w[i - a0][H + k];
                }
            }
        }
    }
}

gp_status gp_cold_set_create(const gp_cold_pack *pk, const int *neurons, int n, gp_cold_set **out)
{
    if (!pk || !out || (n > 0 && !neurons))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_set_create: pk, out (and neurons when n > 0) must not be NULL");
    const int count = gp_cold_pack_count(pk);
    if (n < 0 || n > count)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_set_create: n %d neurons (allowed 0..%d, the pack's count)", n, count);
    const int H = gp_cold_pack_hidden(pk);
    int top = -1;
    for (int i = 0; i < n; i++) {
        if (!gp_cold_pack_neuron(pk, neurons[i]))
            GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_set_create: neurons[%d] = %d is not in the pack (%d neurons packed)",
                    i, neurons[i], count);
        top = neurons[i] > top ? neurons[i] : top;
    }
    gp_cold_set *cs = calloc(1, sizeof *cs);
    if (!cs)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_cold_set_create: out of memory");
    cs->dt = gp_cold_pack_dtype(pk), cs->hidden = H, cs->n = n;
    cs->ld = (n + 31) & ~31;
    const size_t gu_bytes = (size_t)H * 2 * cs->ld * sizeof(uint16_t), down_bytes = (size_t)n * H * sizeof(uint16_t);
    cs->bytes = (uint64_t)gu_bytes + (uint64_t)down_bytes;
    cs->neurons = malloc((size_t)(n > 0 ? n : 1) * sizeof *cs->neurons);
    /* 64-byte aligned and a whole number of lines, as aligned_alloc requires; the padding columns stay 0 */
    cs->gu = aligned_alloc(64, gu_bytes > 0 ? gu_bytes : 64);
    cs->down = aligned_alloc(64, down_bytes > 0 ? (down_bytes + 63) & ~(size_t)63 : 64);
    if (!cs->neurons || !cs->gu || !cs->down || gp_cold_set_pos_room(cs, top > 0 ? top : 0) != GP_OK) {
        gp_cold_set_destroy(cs);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_cold_set_create: out of memory for %d neurons (%llu bytes)", n,
                (unsigned long long)(gu_bytes + down_bytes));
    }
    memset(cs->gu, 0, gu_bytes);
    for (int i = 0; i < n; i++) {
        if (cs->pos[neurons[i]] >= 0) {
            const int first = cs->pos[neurons[i]];
            gp_cold_set_destroy(cs);
            GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_set_create: neurons[%d] = %d repeats neurons[%d] (allowed: distinct)",
                    i, neurons[i], first);
        }
        cs->pos[neurons[i]] = i;
    }
    gp_cold_set_put(cs, pk, 0, n, neurons);
    *out = cs;
    return GP_OK;
}

int gp_cold_set_count(const gp_cold_set *cs)
{
    return cs ? cs->n : 0;
}

const int *gp_cold_set_neurons(const gp_cold_set *cs)
{
    return cs ? cs->neurons : NULL;
}

uint64_t gp_cold_set_bytes(const gp_cold_set *cs)
{
    return cs ? cs->bytes : 0;
}

gp_status gp_cold_set_replace(gp_cold_set *cs, const gp_cold_pack *pk, int out, int in)
{
    if (!cs || !pk)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_set_replace: cs and pk must not be NULL");
    if (gp_cold_pack_hidden(pk) != cs->hidden || gp_cold_pack_dtype(pk) != cs->dt)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_set_replace: pack of hidden %d, %s (allowed: the set's, hidden %d, %s)",
                gp_cold_pack_hidden(pk), gp_dtype_name(gp_cold_pack_dtype(pk)), cs->hidden, gp_dtype_name(cs->dt));
    if (out < 0 || out >= cs->pos_cap || cs->pos[out] < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_set_replace: out %d is not in the set (allowed: a neuron of its %d)", out,
                cs->n);
    if (!gp_cold_pack_neuron(pk, in))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_set_replace: in %d is not in the pack (%d neurons packed)", in,
                gp_cold_pack_count(pk));
    if (in < cs->pos_cap && cs->pos[in] >= 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_set_replace: in %d is already in the set (position %d; allowed: a "
                "neuron outside it)", in, cs->pos[in]);
    GP_TRY(gp_cold_set_pos_room(cs, in));
    const int i = cs->pos[out];
    cs->pos[out] = -1;
    gp_cold_set_put(cs, pk, i, i + 1, &in);
    return GP_OK;
}

/* ---------------------------------------------------------------- the run */

/* The gate and up sums are formed column range by column range: a task
 * takes positions [p0, p0 + w), reads for each active input k the w-long
 * segments of its gate and up rows, and adds them into lane accumulators
 * kept per (lane, gate/up, row, position), lane = k mod 16 over whole
 * 16-blocks and a 17th for the tail, so each position's sums are the
 * reference's lanes, in increasing k, folded as it folds them.
 * GP_SET_ACC_BYTES bounds a task's accumulators so they stay in L2; the
 * width is never what decides a bit. */
#define GP_SET_LANES 17
#define GP_SET_ACC_BYTES (256 * 1024)
#define GP_SET_WMIN 32
#define GP_SET_WMAX 512

typedef struct gp_set_job {
    const gp_cold_set *cs;
    const float *xf;     /* [B][H] masked */
    const int *kact;     /* the active inputs by lane: lane L's (k = L mod 16 in whole blocks; 16: the tail) */
    int lane_at[GP_SET_LANES + 1]; /* at kact[lane_at[L]], ascending */
    int nk, B, H, H16, width, tasks;
    gp_dtype dt;
    float t_down;
    float *act;          /* [n][B] */
    uint8_t *active_out; /* [n] or NULL */
    float *lanes;        /* [threads][lane_floats] */
    size_t lane_floats;
    atomic_int next;
} gp_set_job;

/* acc[i] += w_t[i] x_t for t < m in that order, i < w (a multiple of
 * 16), the weights widened in the loop (B = 1: each is used once): m of a
 * lane's inputs (increasing k) added in one pass over the accumulators, the
 * same operations in the same order as one pass per input, with 1/m of the
 * loads and stores. m is a constant at every call, and the 16-wide blocks
 * have a constant count, so the compiler vectorises them at -O2 as it does
 * cold_ffn.c's. */
static inline __attribute__((always_inline)) void gp_set_axpy(float *acc, const uint16_t *const *wh, const float *xv,
                                                              int w, const int m, const int f16)
{
    for (int i0 = 0; i0 < w; i0 += 16) {
        float a[16];
        for (int l = 0; l < 16; l++)
            a[l] = acc[i0 + l];
        for (int t = 0; t < m; t++)
            for (int l = 0; l < 16; l++)
                a[l] += gp_cold_widen(wh[t], (size_t)(i0 + l), f16) * xv[t];
        for (int l = 0; l < 16; l++)
            acc[i0 + l] = a[l];
    }
}

/* acc[r][i] += fw_t[i] x[r][ks[t]] for t < m in that order, rows r < RB
 * (a constant 1, 2 or 4), i < w (a multiple of 16): each widened weight
 * vector serves RB rows, whose 16-wide blocks stay in registers across the
 * m inputs. A row's masked x adds +-0: nothing (see gp_set_columns). */
static inline __attribute__((always_inline)) void gp_set_rows(float *acc, int W, const float *fw, const float *xf,
                                                              int H, const int *ks, int w, const int m, const int RB)
{
    float xv[4][4];
    for (int r = 0; r < RB; r++)
        for (int t = 0; t < m; t++)
            xv[r][t] = xf[(size_t)r * H + ks[t]];
    for (int i0 = 0; i0 < w; i0 += 16) {
        float a[4][16];
        for (int r = 0; r < RB; r++)
            for (int l = 0; l < 16; l++)
                a[r][l] = acc[(size_t)r * W + i0 + l];
        for (int t = 0; t < m; t++)
            for (int r = 0; r < RB; r++)
                for (int l = 0; l < 16; l++)
                    a[r][l] += fw[(size_t)t * GP_SET_WMAX + i0 + l] * xv[r][t];
        for (int r = 0; r < RB; r++)
            for (int l = 0; l < 16; l++)
                acc[(size_t)r * W + i0 + l] = a[r][l];
    }
}

#define GP_SET_KG 4 /* a lane's inputs per pass */

/* One pass of m (<= GP_SET_KG) inputs ks of one lane over positions
 * [p0, p0 + w): their gate and up row segments into that lane's
 * accumulators of every row. */
static inline __attribute__((always_inline)) void gp_set_pass(const gp_set_job *jb, const int *ks, int p0, int w,
                                                              float *ag, float *au, const int m, const int f16)
{
    const int B = jb->B, H = jb->H, W = jb->width;
    const size_t ld = (size_t)jb->cs->ld;
    const uint16_t *wg[GP_SET_KG], *wu[GP_SET_KG];
    for (int t = 0; t < m; t++) {
        wg[t] = jb->cs->gu + (size_t)ks[t] * 2 * ld + (size_t)p0;
        wu[t] = wg[t] + ld;
    }
    if (B == 1) {
        float xv[GP_SET_KG];
        for (int t = 0; t < m; t++)
            xv[t] = jb->xf[ks[t]];
        gp_set_axpy(ag, wg, xv, w, m, f16);
        gp_set_axpy(au, wu, xv, w, m, f16);
        return;
    }
    /* widened once for all the rows */
    float fg[GP_SET_KG][GP_SET_WMAX], fu[GP_SET_KG][GP_SET_WMAX];
    for (int t = 0; t < m; t++)
        for (int i0 = 0; i0 < w; i0 += 16) {
            for (int l = 0; l < 16; l++)
                fg[t][i0 + l] = gp_cold_widen(wg[t], (size_t)(i0 + l), f16);
            for (int l = 0; l < 16; l++)
                fu[t][i0 + l] = gp_cold_widen(wu[t], (size_t)(i0 + l), f16);
        }
    int b = 0;
    for (; b + 4 <= B; b += 4) {
        gp_set_rows(ag + (size_t)b * W, W, fg[0], jb->xf + (size_t)b * H, H, ks, w, m, 4);
        gp_set_rows(au + (size_t)b * W, W, fu[0], jb->xf + (size_t)b * H, H, ks, w, m, 4);
    }
    if (B - b >= 2) {
        gp_set_rows(ag + (size_t)b * W, W, fg[0], jb->xf + (size_t)b * H, H, ks, w, m, 2);
        gp_set_rows(au + (size_t)b * W, W, fu[0], jb->xf + (size_t)b * H, H, ks, w, m, 2);
        b += 2;
    }
    if (b < B) {
        gp_set_rows(ag + (size_t)b * W, W, fg[0], jb->xf + (size_t)b * H, H, ks, w, m, 1);
        gp_set_rows(au + (size_t)b * W, W, fu[0], jb->xf + (size_t)b * H, H, ks, w, m, 1);
    }
}

/* The rows of the pass after this one (kact is in pass order), asked for
 * ahead: a pass's segments are short and rows far apart, too little for the
 * hardware prefetcher to find before the pass needs them. */
static inline __attribute__((always_inline)) void gp_set_prefetch(const gp_set_job *jb, int at, int p0, int w)
{
    const size_t ld = (size_t)jb->cs->ld;
    for (int t = at; t < at + GP_SET_KG && t < jb->nk; t++) {
        const uint16_t *g = jb->cs->gu + (size_t)jb->kact[t] * 2 * ld + (size_t)p0;
        for (int i = 0; i < w; i += 32) { /* a 64-byte line of 16-bit weights */
            __builtin_prefetch(g + i);
            __builtin_prefetch(g + ld + i);
        }
    }
}

static inline __attribute__((always_inline)) void gp_set_columns(const gp_set_job *jb, int p0, int w, float *acc,
                                                                 const int f16)
{
    const int B = jb->B, W = jb->width;
    const size_t plane = (size_t)B * W; /* one (lane, gate/up)'s B x W */
    memset(acc, 0, (size_t)GP_SET_LANES * 2 * plane * sizeof *acc);
    /* A row whose x_k is masked adds w * 0 = +-0, which leaves every
     * accumulator as it was: they start at +0 and a round-to-nearest sum is
     * -0 only when both terms are, so none is ever -0 and +-0 added changes
     * nothing. (Were one -0, only an all-zero sum's sign could differ, and
     * the down mask zeroes that product anyway.) So the inputs masked in
     * every row are skipped, and at B > 1 a pass adds a row's masked
     * inputs' zeros rather than branch. inf/NaN weights are out of scope.
     * Each lane still adds its inputs in increasing k. */
    /* whole 16-blocks: the columns past n are the rows' zero padding (ld is
     * n rounded up to 32) and the accumulators' spare width (W is a multiple
     * of 16), computed and never read */
    const int w16 = (w + 15) & ~15;
    for (int lane = 0; lane < GP_SET_LANES; lane++) {
        const int *ks = jb->kact + jb->lane_at[lane];
        const int nl = jb->lane_at[lane + 1] - jb->lane_at[lane];
        float *ag = acc + (size_t)lane * 2 * plane, *au = ag + plane;
        int q = 0;
        for (; q + GP_SET_KG <= nl; q += GP_SET_KG) {
            gp_set_prefetch(jb, jb->lane_at[lane] + q + GP_SET_KG, p0, w16);
            gp_set_pass(jb, ks + q, p0, w16, ag, au, GP_SET_KG, f16);
        }
        gp_set_prefetch(jb, jb->lane_at[lane + 1], p0, w16);
        switch (nl - q) {
        case 3: gp_set_pass(jb, ks + q, p0, w16, ag, au, 3, f16); break;
        case 2: gp_set_pass(jb, ks + q, p0, w16, ag, au, 2, f16); break;
        case 1: gp_set_pass(jb, ks + q, p0, w16, ag, au, 1, f16); break;
        default: break;
        }
    }
    for (int i = 0; i < w; i++) {
        int any = 0;
        for (int b = 0; b < B; b++) {
            float lg[16], lu[16];
            for (int l = 0; l < 16; l++) {
                lg[l] = acc[(size_t)l * 2 * plane + (size_t)b * W + i];
                lu[l] = acc[((size_t)l * 2 + 1) * plane + (size_t)b * W + i];
            }
            const float g = gp_cold_fold(lg, acc[(size_t)16 * 2 * plane + (size_t)b * W + i]);
            const float u = gp_cold_fold(lu, acc[((size_t)16 * 2 + 1) * plane + (size_t)b * W + i]);
            const float a = gp_cold_act(g, u, jb->dt, jb->t_down);
            jb->act[(size_t)(p0 + i) * B + b] = a;
            any |= a != 0.0f;
        }
        if (jb->active_out)
            jb->active_out[p0 + i] = (uint8_t)any;
    }
}

GP_COLD_CLONES static void gp_set_columns_bf16(const gp_set_job *jb, int p0, int w, float *acc)
{
    gp_set_columns(jb, p0, w, acc, 0);
}

GP_COLD_CLONES static void gp_set_columns_f16(const gp_set_job *jb, int p0, int w, float *acc)
{
    gp_set_columns(jb, p0, w, acc, 1);
}

static void gp_set_gate_up_task(void *ctx, int thread)
{
    gp_set_job *jb = ctx;
    float *acc = jb->lanes + (size_t)thread * jb->lane_floats;
    const int n = jb->cs->n;
    for (;;) {
        const int t = atomic_fetch_add_explicit(&jb->next, 1, memory_order_relaxed);
        if (t >= jb->tasks)
            break;
        const int p0 = t * jb->width, w = n - p0 < jb->width ? n - p0 : jb->width;
        (jb->dt == GP_DTYPE_F16 ? gp_set_columns_f16 : gp_set_columns_bf16)(jb, p0, w, acc);
    }
}

/* The down part of a chunk of positions: the SwiGLU outputs are already
 * in jb->act, so only the groups' active down columns remain, added as the
 * pack's chunks add them. */
static inline __attribute__((always_inline)) int gp_set_chunk(const gp_cold_job *jb, int i0, int i1, float *part,
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
            const float *an = jb->act + (size_t)(i + n) * B;
            int any = 0;
            for (int b = 0; b < B; b++) {
                a[na][b] = an[b];
                any |= an[b] != 0.0f;
            }
            if (any)
                wd[na++] = jb->cs->down + (size_t)(i + n) * H;
        }
        active += na;
        gp_cold_down_group(part, B, H, a, wd, na, f16);
    }
    return active;
}

GP_COLD_CLONES static int gp_set_chunk_bf16(const gp_cold_job *jb, int i0, int i1, float *part)
{
    return gp_set_chunk(jb, i0, i1, part, 0);
}

GP_COLD_CLONES static int gp_set_chunk_f16(const gp_cold_job *jb, int i0, int i1, float *part)
{
    return gp_set_chunk(jb, i0, i1, part, 1);
}

/* Grows *p to n elements of size sz. */
static gp_status gp_set_scratch(void **p, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return GP_OK;
    void *np = malloc(n * sz);
    if (!np)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_cold_ffn_run_set: out of memory for %zu bytes of scratch", n * sz);
    free(*p);
    *p = np, *cap = n;
    return GP_OK;
}

gp_status gp_cold_ffn_run_set(gp_cold_ffn *c, const gp_cold_set *cs, int B, const void *x, float t_gate_up,
                              float t_down, float *y, uint8_t *active_out, gp_cold_ffn_stats *stats)
{
    static const char fn[] = "gp_cold_ffn_run_set";
    if (!c || !cs || !x || !y)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_ffn_run_set: c, cs, x and y must not be NULL");
    GP_TRY(gp_cold_ffn_check(fn, B, t_gate_up, t_down));
    const int H = cs->hidden, n = cs->n;
    const gp_dtype dt = cs->dt;
    GP_TRY(gp_cold_ffn_prepare(c, fn, B, x, dt, H, t_gate_up));
    const int T = gp_pool_threads(c->pool);
    /* widest range whose accumulators fit, at least 4 ranges a thread when there are columns for them */
    int width = GP_SET_ACC_BYTES / (GP_SET_LANES * 2 * B * (int)sizeof(float));
    width = width > GP_SET_WMAX ? GP_SET_WMAX : width & ~15;
    while (width > GP_SET_WMIN && (n + width - 1) / width < 4 * T)
        width -= 16;
    width = width < GP_SET_WMIN ? GP_SET_WMIN : width;
    const size_t lane_floats = (size_t)GP_SET_LANES * 2 * B * width;
    GP_TRY(gp_set_scratch((void **)&c->kact, &c->kact_cap, (size_t)H, sizeof *c->kact));
    GP_TRY(gp_set_scratch((void **)&c->act, &c->act_cap, (size_t)(n > 0 ? n : 1) * B, sizeof *c->act));
    GP_TRY(gp_set_scratch((void **)&c->lanes, &c->lanes_cap, lane_floats * T, sizeof *c->lanes));

    /* the union over the rows decides which inputs' rows are read */
    int nk = 0, lane_at[GP_SET_LANES + 1];
    const int H16 = H & ~15;
    for (int lane = 0; lane < GP_SET_LANES; lane++) {
        lane_at[lane] = nk;
        for (int k = lane < 16 ? lane : H16; k < (lane < 16 ? H16 : H); k += lane < 16 ? 16 : 1) {
            int on = 0;
            for (int b = 0; b < B; b++)
                on |= c->xf[(size_t)b * H + k] != 0.0f;
            if (on)
                c->kact[nk++] = k;
        }
    }
    lane_at[GP_SET_LANES] = nk;
    if (n > 0) {
        gp_set_job *sj = calloc(1, sizeof *sj);
        if (!sj)
            GP_FAIL(GP_ERR_NO_MEMORY, "gp_cold_ffn_run_set: out of memory");
        *sj = (gp_set_job){.cs = cs, .xf = c->xf, .kact = c->kact, .nk = nk, .B = B, .H = H, .H16 = H16,
                           .width = width, .tasks = (n + width - 1) / width, .dt = dt, .t_down = t_down,
                           .act = c->act, .active_out = active_out, .lanes = c->lanes, .lane_floats = lane_floats};
        memcpy(sj->lane_at, lane_at, sizeof lane_at);
        atomic_init(&sj->next, 0);
        gp_pool_run(c->pool, gp_set_gate_up_task, sj);
        free(sj);
    }

    gp_cold_job *jb = calloc(1, sizeof *jb);
    if (!jb)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_cold_ffn_run_set: out of memory");
    *jb = (gp_cold_job){.chunk = dt == GP_DTYPE_F16 ? gp_set_chunk_f16 : gp_set_chunk_bf16, .cs = cs, .act = c->act,
                        .B = B, .H = H, .f16 = dt == GP_DTYPE_F16, .dt = dt, .xf = c->xf, .t_down = t_down,
                        .neurons = cs->neurons, .n = n, .y = y};
    const int active = gp_cold_ffn_sum(c, jb);
    free(jb);

    if (stats) {
        const uint64_t row = (uint64_t)H * 2u;
        stats->active = active;
        stats->weight_bytes = (uint64_t)nk * 2u * (uint64_t)n * 2u + (uint64_t)active * row;
        stats->bytes = stats->weight_bytes + (uint64_t)B * row;
    }
    return GP_OK;
}
