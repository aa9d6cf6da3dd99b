/* Tests of the float32 CPU reference: each operation against a double-precision
 * formula, and decode-step invariants on the tiny preset with synthetic weights. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gp_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_model.h"
#include "gp_reference.h"
#include "gp_stage.h"

/* ------------------------------------------------------------ helpers */

typedef struct rng { uint64_t s; } rng;

static uint64_t rng_next(rng *r) /* splitmix64 */
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_uniform(rng *r, float lo, float hi) /* [lo, hi) */
{
    return lo + (hi - lo) * (float)((rng_next(r) >> 40) * (1.0 / 16777216.0));
}


/* max |a - b| / max |b| over n values; prints the first few mismatches when
 * it exceeds tol. */
static double rel_err(const float *a, const float *b, int n, double tol, const char *what)
{
    double md = 0.0, mr = 0.0;
    for (int i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - (double)b[i]));
        mr = fmax(mr, fabs((double)b[i]));
    }
    double e = mr > 0.0 ? md / mr : md;
    if (!(e <= tol)) {
        int shown = 0;
        for (int i = 0; i < n && shown < 8; i++) {
            if (fabs((double)a[i] - (double)b[i]) > tol * mr) {
                fprintf(stderr, "  %s[%d]: got %.9g, want %.9g\n", what, i, (double)a[i],
                        (double)b[i]);
                shown++;
            }
        }
        fprintf(stderr, "%s: max|diff|/max|ref| = %.3g exceeds %.3g\n", what, e, tol);
    }
    return e;
}

/* ------------------------------------------------------------ operations */

/* Per element relative 1e-6: the float path rounds the mean to float, takes
 * sqrtf and a division, and two products: about 5 ulp (3e-7) at worst. */
static void test_rmsnorm_vs_double(void **state)
{
    const int sizes[] = {1, 7, 64, 4096, 8192};
    rng r = {1};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int n = sizes[si];
        float *x = malloc(n * sizeof *x), *out = malloc(n * sizeof *out);
        gp_bf16 *w = malloc(n * sizeof *w);
        float scale = si % 2 ? 30.0f : 0.01f; /* both large and small activations */
        for (int i = 0; i < n; i++) {
            x[i] = scale * rng_uniform(&r, -1.0f, 1.0f);
            w[i] = gp_f32_to_bf16(rng_uniform(&r, 0.5f, 1.5f));
        }
        const float eps = 1e-5f;
        gp_ref_rmsnorm(out, x, w, GP_DTYPE_BF16, n, eps);
        double ss = 0.0;
        for (int i = 0; i < n; i++)
            ss += (double)x[i] * x[i];
        double rr = 1.0 / sqrt(ss / n + (double)eps);
        double worst = 0.0;
        for (int i = 0; i < n; i++) {
            double ref = (double)gp_bf16_to_f32(w[i]) * x[i] * rr;
            double e = fabs(out[i] - ref) / fmax(fabs(ref), 1e-30);
            worst = fmax(worst, e);
        }
        if (worst > 1e-6)
            fail_msg("rmsnorm n=%d: worst relative error %.3g > 1e-6", n, worst);
        /* in place gives the same bits */
        float *y = malloc(n * sizeof *y);
        memcpy(y, x, n * sizeof *y);
        gp_ref_rmsnorm(y, y, w, GP_DTYPE_BF16, n, eps);
        assert_memory_equal(y, out, n * sizeof *y);
        free(x), free(out), free(w), free(y);
    }
}

/* Bound relative to sum |w_j x_j| (the condition of the sum), 1e-6: float
 * summation in 16 lanes of n/16 terms plus the fold stays well under it for
 * n <= 4096 (the measured worst is printed). */
static void test_matvec_vs_double(void **state)
{
    const int cols_list[] = {1, 15, 16, 17, 100, 1000, 4096};
    const int rows = 33;
    rng r = {2};
    double worst_all = 0.0;
    for (size_t ci = 0; ci < sizeof cols_list / sizeof cols_list[0]; ci++) {
        int cols = cols_list[ci];
        gp_bf16 *w = malloc((size_t)rows * cols * sizeof *w); /* [rows][cols] */
        float *x = malloc(cols * sizeof *x), *out = malloc(rows * sizeof *out);
        for (int i = 0; i < rows * cols; i++)
            w[i] = gp_f32_to_bf16(rng_uniform(&r, -1.0f, 1.0f));
        for (int j = 0; j < cols; j++)
            x[j] = rng_uniform(&r, -2.0f, 2.0f);
        gp_ref_matvec(out, w, GP_DTYPE_BF16, x, rows, cols);
        for (int i = 0; i < rows; i++) {
            double ref = 0.0, mag = 0.0;
            for (int j = 0; j < cols; j++) {
                double t = (double)gp_bf16_to_f32(w[(size_t)i * cols + j]) * x[j];
                ref += t;
                mag += fabs(t);
            }
            double e = fabs(out[i] - ref) / fmax(mag, 1e-30);
            worst_all = fmax(worst_all, e);
            if (e > 1e-6)
                fail_msg("matvec %dx%d row %d: got %.9g want %.9g (|err|/sum|wx| = %.3g > 1e-6)",
                         rows, cols, i, (double)out[i], ref, e);
        }
        free(w), free(x), free(out);
    }
    printf("matvec: worst |err|/sum|w x| = %.3g\n", worst_all);
}

/* The pairing convention itself: element i rotates with i + head_dim/2. */
static void test_rope_convention(void **state)
{
    float inv_freq[2] = {1.0f, 0.5f};
    float v[4] = {1.0f, 0.0f, 0.0f, 0.0f}; /* [1 head][4] */
    gp_ref_rope(v, 1, 4, 1, inv_freq);
    assert_true(fabsf(v[0] - cosf(1.0f)) < 1e-7f);
    assert_true(v[1] == 0.0f);
    assert_true(fabsf(v[2] - sinf(1.0f)) < 1e-7f);
    assert_true(v[3] == 0.0f);
    float u[4] = {0.0f, 0.0f, 0.0f, 1.0f};
    gp_ref_rope(u, 1, 4, 2, inv_freq); /* pair (1, 3) at angle 2 * 0.5 */
    assert_true(fabsf(u[1] + sinf(1.0f)) < 1e-7f);
    assert_true(fabsf(u[3] - cosf(1.0f)) < 1e-7f);
}

/* Against double cos/sin of the same float angle (the angle is rounded to
 * float by design, as HF does): 1e-6 of the vector's magnitude. */
static void test_rope_vs_double(void **state)
{
    const int dims[] = {16, 64, 128};
    const int positions[] = {0, 1, 17, 1000, 8191, 131071};
    const int n_heads = 3;
    rng r = {3};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        int hd = dims[di];
        gp_config cfg = {.head_dim = hd, .rope_theta = 500000.0f};
        float *inv = malloc(hd / 2 * sizeof *inv);
        gp_rope_inv_freq(&cfg, inv);
        for (size_t pi = 0; pi < sizeof positions / sizeof positions[0]; pi++) {
            int pos = positions[pi];
            float *v = malloc((size_t)n_heads * hd * sizeof *v), *orig = malloc((size_t)n_heads * hd * sizeof *orig);
            double mag = 0.0;
            for (int i = 0; i < n_heads * hd; i++) {
                orig[i] = v[i] = rng_uniform(&r, -3.0f, 3.0f);
                mag = fmax(mag, fabs(v[i]));
            }
            gp_ref_rope(v, n_heads, hd, pos, inv);
            if (pos == 0)
                assert_memory_equal(v, orig, (size_t)n_heads * hd * sizeof *v);
            for (int h = 0; h < n_heads; h++) {
                for (int i = 0; i < hd / 2; i++) {
                    double ang = (double)((float)pos * inv[i]);
                    double a = orig[h * hd + i], b = orig[h * hd + i + hd / 2];
                    double want0 = a * cos(ang) - b * sin(ang), want1 = b * cos(ang) + a * sin(ang);
                    double e = fmax(fabs(v[h * hd + i] - want0), fabs(v[h * hd + i + hd / 2] - want1));
                    if (e > 1e-6 * mag)
                        fail_msg("rope hd=%d pos=%d head %d pair %d: error %.3g > 1e-6 * %.3g", hd,
                                 pos, h, i, e, mag);
                }
            }
            free(v), free(orig);
        }
        free(inv);
    }
}

/* Per element relative 1e-6 (expf, one add, a division, a product), plus an
 * absolute 1e-30 floor for the underflowing tail of silu at large -g. */
static void test_swiglu_vs_double(void **state)
{
    enum { N = 2000 };
    float gate[N], up[N], out[N];
    rng r = {4};
    for (int i = 0; i < N; i++) {
        gate[i] = rng_uniform(&r, -20.0f, 20.0f);
        up[i] = rng_uniform(&r, -3.0f, 3.0f);
    }
    gate[0] = -1000.0f, gate[1] = 1000.0f, gate[2] = 0.0f, gate[3] = -88.5f, gate[4] = 88.5f;
    gp_ref_swiglu(out, gate, up, N);
    for (int i = 0; i < N; i++) {
        double g = gate[i];
        double want = g / (1.0 + exp(-g)) * up[i];
        assert_true(isfinite(out[i]));
        if (fabs(out[i] - want) > 1e-6 * fabs(want) + 1e-30)
            fail_msg("swiglu gate %.9g up %.9g: got %.9g want %.9g", g, (double)up[i],
                     (double)out[i], want);
    }
}

static void test_argmax(void **state)
{
    float a[] = {1.0f, 3.0f, 3.0f, -2.0f};
    assert_int_equal(gp_argmax(a, 4), 1); /* first of a tie */
    float b[] = {NAN, -INFINITY, 2.0f, NAN, 2.0f};
    assert_int_equal(gp_argmax(b, 5), 2); /* NaNs skipped */
    float c[] = {NAN, NAN};
    assert_int_equal(gp_argmax(c, 2), 0);
    float d[] = {-INFINITY, -INFINITY};
    assert_int_equal(gp_argmax(d, 2), 0);
    assert_int_equal(gp_argmax(a, 0), -1);
    assert_int_equal(gp_argmax(NULL, 3), -1);
}

/* ------------------------------------------------------------ decode on "tiny" */

static gp_host_weights g_tiny; /* synthetic tiny weights shared by the decode tests */

static int setup_tiny(void **state)
{
    gp_config cfg;
    if (gp_config_preset("tiny", &cfg) != GP_OK || gp_host_weights_alloc(&cfg, GP_DTYPE_BF16, &g_tiny) != GP_OK ||
        gp_synth_fill_host(&g_tiny, 1234) != GP_OK) {
        fprintf(stderr, "setup: %s\n", gp_last_error());
        return -1;
    }
    return 0;
}

static int teardown_tiny(void **state)
{
    gp_host_weights_free(&g_tiny);
    return 0;
}

static const int32_t P0[] = {5, 17, 42, 7, 99, 3, 250, 0, 128};
static const int32_t P1[] = {11, 200, 2};
static const int32_t P2[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
#define NP(p) ((int)(sizeof(p) / sizeof((p)[0])))

static bool all_finite(const float *x, int n)
{
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

/* Greedy decode of nsteps after prefill for several sequences, each alone
 * (B=1); logits out [n_seqs][nsteps][vocab]. */
static void run_alone(const gp_host_weights *w, int block, const int32_t *const *prompts,
                      const int *lens, int n_seqs, int nsteps, float *logits)
{
    int V = w->cfg.vocab;
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(w, n_seqs, 64, block, &m));
    for (int s = 0; s < n_seqs; s++) {
        float *ls = logits + (size_t)s * nsteps * V;
        GP_CHECK_OK(gp_cpu_prefill(m, s, lens[s], prompts[s], ls));
        for (int t = 1; t < nsteps; t++) {
            int32_t tok = gp_argmax(ls + (size_t)(t - 1) * V, V);
            GP_CHECK_OK(gp_cpu_decode_step(m, 1, &s, &tok, ls + (size_t)t * V));
        }
    }
    gp_cpu_model_destroy(m);
}

static void expect_error(gp_status got, gp_status want, const char *needle);

/* A step run as stages over micro-batch row ranges, attention and FFN of
 * different ranges interleaved as the pipeline would (attention of range m+1
 * before the FFN of range m), on two workers, gives the whole step's logits
 * bit for bit; stage misuse is refused with a reason. */
static gp_status cpu_stage(gp_cpu_model *m, gp_cpu_worker *w, gp_stage_kind kind, int layer, int b0, int nb)
{
    gp_stage_io io = {.layer = layer, .b0 = b0, .nb = nb};
    GP_TRY(gp_cpu_resid_view(m, b0, nb, &io.resid));
    return gp_cpu_stage(m, w, kind, &io);
}

static gp_status cpu_step_end(gp_cpu_model *m, gp_cpu_worker *w, int B, float *logits)
{
    gp_tensor_view r;
    GP_TRY(gp_cpu_resid_view(m, 0, B, &r));
    return gp_cpu_step_end(m, w, &r, logits);
}

static void test_stages_match_step(void **state)
{
    const int S = 5, T = 4, V = g_tiny.cfg.vocab, L = g_tiny.cfg.n_layers;
    const int32_t *prompts[5] = {P0, P1, P2, P0, P1};
    gp_cpu_model *a, *b;
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, S, 64, 4, &a));
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, S, 64, 4, &b));
    gp_cpu_worker *wa, *wf;
    GP_CHECK_OK(gp_cpu_worker_create(b, 2, &wa));
    GP_CHECK_OK(gp_cpu_worker_create(b, 1, &wf));
    float *la = malloc((size_t)S * V * sizeof *la), *lb = malloc((size_t)S * V * sizeof *lb);
    int ids[5] = {0, 1, 2, 3, 4};
    int32_t tok[5];
    for (int s = 0; s < S; s++) {
        int n = s == 2 ? NP(P2) : s % 3 == 0 ? NP(P0) : NP(P1);
        GP_CHECK_OK(gp_cpu_prefill(a, s, n, prompts[s], la));
        GP_CHECK_OK(gp_cpu_prefill(b, s, n, prompts[s], lb));
        tok[s] = gp_argmax(la, V);
    }
    const int b0[3] = {0, 2, 3}, nb[3] = {2, 1, 2}; /* unequal micro-batches */
    for (int t = 0; t < T; t++) {
        GP_CHECK_OK(gp_cpu_decode_step(a, S, ids, tok, la));
        GP_CHECK_OK(gp_cpu_step_begin(b, S, ids, tok));
        for (int l = 0; l < L; l++) {
            GP_CHECK_OK(cpu_stage(b, wa, GP_STAGE_ATTN, l, b0[0], nb[0]));
            for (int m = 0; m < 3; m++) {
                if (m + 1 < 3)
                    GP_CHECK_OK(cpu_stage(b, wa, GP_STAGE_ATTN, l, b0[m + 1], nb[m + 1]));
                GP_CHECK_OK(cpu_stage(b, wf, GP_STAGE_FFN, l, b0[m], nb[m]));
            }
        }
        GP_CHECK_OK(cpu_step_end(b, wf, S, lb));
        assert_memory_equal(la, lb, (size_t)S * V * sizeof *la);
        for (int s = 0; s < S; s++)
            tok[s] = gp_argmax(la + (size_t)s * V, V);
    }
    expect_error(cpu_stage(b, wa, GP_STAGE_ATTN, 0, 0, 1), GP_ERR_STATE, "outside a step");
    GP_CHECK_OK(gp_cpu_step_begin(b, 2, ids, tok));
    expect_error(gp_cpu_step_begin(b, 2, ids, tok), GP_ERR_STATE, "in progress");
    expect_error(cpu_stage(b, wf, GP_STAGE_FFN, L, 0, 1), GP_ERR_INVALID_ARG, "layer");
    expect_error(cpu_stage(b, wf, GP_STAGE_FFN, 0, 1, 2), GP_ERR_INVALID_ARG, "rows [1, 3)");
    expect_error(cpu_stage(b, wf, GP_STAGE_HEAD, 0, 0, 1), GP_ERR_UNSUPPORTED, "not a CPU stage");
    gp_stage_io io = {.layer = 0, .b0 = 0, .nb = 1};
    GP_CHECK_OK(gp_cpu_resid_view(b, 0, 2, &io.resid));
    expect_error(gp_cpu_stage(b, wf, GP_STAGE_FFN, &io), GP_ERR_INVALID_ARG, "residual view is [2]");
    io.resid.rows = 1;
    io.resid.dtype = GP_DTYPE_BF16;
    expect_error(gp_cpu_stage(b, wf, GP_STAGE_FFN, &io), GP_ERR_INVALID_ARG, "BF16");
    gp_cpu_step_abort(b);
    gp_cpu_worker_destroy(wa);
    gp_cpu_worker_destroy(wf);
    gp_cpu_model_destroy(a);
    gp_cpu_model_destroy(b);
    free(la), free(lb);
}

/* The stages read and update exactly the residual rows they are handed:
 * with each step's rows copied to a strided buffer elsewhere (and the
 * model's own rows poisoned), the logits are those of the model's own
 * rows bit for bit. */
static void test_stages_follow_views(void **state)
{
    const int S = 3, T = 3, V = g_tiny.cfg.vocab, L = g_tiny.cfg.n_layers, H = g_tiny.cfg.hidden;
    const int stride = H + 5;
    gp_cpu_model *a, *b;
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, S, 64, 4, &a));
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, S, 64, 4, &b));
    gp_cpu_worker *w;
    GP_CHECK_OK(gp_cpu_worker_create(b, 1, &w));
    float *la = malloc((size_t)S * V * sizeof *la), *lb = malloc((size_t)S * V * sizeof *lb);
    float *far = malloc((size_t)S * stride * sizeof *far);
    int ids[3] = {0, 1, 2};
    int32_t tok[3] = {1, 7, 11};
    for (int t = 0; t < T; t++) {
        GP_CHECK_OK(gp_cpu_decode_step(a, S, ids, tok, la));
        GP_CHECK_OK(gp_cpu_step_begin(b, S, ids, tok));
        gp_tensor_view own, moved = {far, S, H, stride, GP_DTYPE_F32, GP_DEVICE_HOST};
        GP_CHECK_OK(gp_cpu_resid_view(b, 0, S, &own));
        for (int r = 0; r < S; r++) {
            memcpy(far + (size_t)r * stride, (float *)own.data + (size_t)r * H, sizeof(float) * H);
            for (int i = 0; i < H; i++)
                ((float *)own.data)[(size_t)r * H + i] = NAN;
        }
        for (int l = 0; l < L; l++) {
            gp_stage_io io = {.layer = l, .b0 = 0, .nb = S, .resid = moved};
            GP_CHECK_OK(gp_cpu_stage(b, w, GP_STAGE_ATTN, &io));
            GP_CHECK_OK(gp_cpu_stage(b, w, GP_STAGE_FFN, &io));
        }
        GP_CHECK_OK(gp_cpu_step_end(b, w, &moved, lb));
        assert_memory_equal(la, lb, (size_t)S * V * sizeof *la);
        for (int s = 0; s < S; s++)
            tok[s] = gp_argmax(la + (size_t)s * V, V);
    }
    gp_cpu_worker_destroy(w);
    gp_cpu_model_destroy(a);
    gp_cpu_model_destroy(b);
    free(la), free(lb), free(far);
}

/* Decoding sequences together must give each one's logits bit for bit as
 * decoding it alone: rows of a batch never mix. The batch order is permuted. */
static void test_batch_invariance(void **state)
{
    const int32_t *prompts[3] = {P0, P1, P2};
    int lens[3] = {NP(P0), NP(P1), NP(P2)};
    const int S = 3, T = 10, V = g_tiny.cfg.vocab;
    float *alone = malloc((size_t)S * T * V * sizeof *alone);
    float *together = malloc((size_t)S * T * V * sizeof *together);
    run_alone(&g_tiny, 4, prompts, lens, S, T, alone);

    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, S, 64, 4, &m));
    for (int s = 0; s < S; s++)
        GP_CHECK_OK(gp_cpu_prefill(m, s, lens[s], prompts[s], together + (size_t)s * T * V));
    const int order[3] = {2, 0, 1};
    float *step = malloc((size_t)S * V * sizeof *step); /* [S][V] in batch order */
    for (int t = 1; t < T; t++) {
        int32_t toks[3];
        for (int b = 0; b < S; b++)
            toks[b] = gp_argmax(together + ((size_t)order[b] * T + t - 1) * V, V);
        GP_CHECK_OK(gp_cpu_decode_step(m, S, order, toks, step));
        for (int b = 0; b < S; b++)
            memcpy(together + ((size_t)order[b] * T + t) * V, step + (size_t)b * V, V * sizeof *step);
    }
    gp_cpu_model_destroy(m);
    for (int s = 0; s < S; s++)
        for (int t = 0; t < T; t++)
            if (memcmp(alone + ((size_t)s * T + t) * V, together + ((size_t)s * T + t) * V,
                       V * sizeof(float)) != 0)
                fail_msg("batch invariance: sequence %d step %d differs between B=1 and B=3", s, t);
    free(alone), free(together), free(step);
}

/* prefill(P) == prefill(P[:n-1]) then decode(P[n-1]) == n single decode
 * steps, bit for bit; and a reset sequence replays identically. */
static void test_prefill_decode_consistency(void **state)
{
    const int V = g_tiny.cfg.vocab, n = NP(P2);
    float *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b), *c = malloc(V * sizeof *c);
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, 3, 64, 5, &m));
    GP_CHECK_OK(gp_cpu_prefill(m, 0, n, P2, a));
    GP_CHECK_OK(gp_cpu_prefill(m, 1, n - 1, P2, NULL));
    int s1 = 1;
    GP_CHECK_OK(gp_cpu_decode_step(m, 1, &s1, &P2[n - 1], b));
    int s2 = 2;
    for (int i = 0; i < n; i++)
        GP_CHECK_OK(gp_cpu_decode_step(m, 1, &s2, &P2[i], c));
    assert_memory_equal(a, b, V * sizeof *a);
    assert_memory_equal(a, c, V * sizeof *a);

    gp_cpu_reset_seq(m, 0);
    memset(b, 0, V * sizeof *b);
    GP_CHECK_OK(gp_cpu_prefill(m, 0, n, P2, b));
    assert_memory_equal(a, b, V * sizeof *a);
    gp_cpu_model_destroy(m);
    free(a), free(b), free(c);
}

/* The prompts of the batched prefill tests: varied lengths (1 up to 17, so
 * steps of the batch shrink as prompts end), not in sequence-id order, one
 * into a sequence that already holds P1. */
#define PB_S 5
static const gp_prefill_seq PB_SEQS[PB_S] = {
    {.seq = 3, .n = NP(P2), .tokens = P2}, {.seq = 0, .n = 1, .tokens = P1},
    {.seq = 4, .n = NP(P0), .tokens = P0}, {.seq = 1, .n = NP(P1), .tokens = P1},
    {.seq = 5, .n = 4, .tokens = P2 + 3},
};
#define PB_HELD 4 /* the sequence that already holds P1 */

static gp_cpu_model *pb_model(void)
{
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, 6, 64, 4, &m));
    GP_CHECK_OK(gp_cpu_prefill(m, PB_HELD, NP(P1), P1, NULL));
    return m;
}

static size_t pb_tokens(void)
{
    size_t n = 0;
    for (int s = 0; s < PB_S; s++)
        n += (size_t)PB_SEQS[s].n;
    return n;
}

/* One decode step of every prompted sequence after the prefill, so the
 * caches themselves are compared: logits [PB_S][V]. */
static void pb_decode(gp_cpu_model *m, float *logits)
{
    int ids[PB_S];
    int32_t toks[PB_S];
    for (int s = 0; s < PB_S; s++)
        ids[s] = PB_SEQS[s].seq, toks[s] = (int32_t)(7 * s + 1);
    GP_CHECK_OK(gp_cpu_decode_step(m, PB_S, ids, toks, logits));
}

/* A batched prefill equals prefilling each prompt alone with gp_cpu_prefill,
 * bit for bit: the last logits against whole-prompt prefills, the prompt
 * logits against token-by-token ones, and the caches they leave (a decode
 * step after). The last prompt-logits row of each prompt is its last-logits
 * row; asking for fewer logits changes none of them. */
static void test_prefill_batch_matches_alone(void **state)
{
    const int V = g_tiny.cfg.vocab;
    const size_t T = pb_tokens();
    float *last = malloc((size_t)PB_S * V * sizeof *last), *all = malloc(T * V * sizeof *all);
    float *ref_last = malloc((size_t)PB_S * V * sizeof *ref_last), *ref_all = malloc(T * V * sizeof *ref_all);
    float *dec = malloc((size_t)PB_S * V * sizeof *dec), *ref_dec = malloc((size_t)PB_S * V * sizeof *ref_dec);
    float *other = malloc(T * V * sizeof *other);
    assert_true(last && all && ref_last && ref_all && dec && ref_dec && other);

    gp_cpu_model *m = pb_model(), *whole = pb_model(), *tbt = pb_model();
    GP_CHECK_OK(gp_cpu_prefill_batch(m, PB_S, PB_SEQS, last, all));
    size_t row = 0;
    for (int s = 0; s < PB_S; s++) {
        const gp_prefill_seq *p = &PB_SEQS[s];
        GP_CHECK_OK(gp_cpu_prefill(whole, p->seq, p->n, p->tokens, ref_last + (size_t)s * V));
        for (int i = 0; i < p->n; i++, row++)
            GP_CHECK_OK(gp_cpu_prefill(tbt, p->seq, 1, p->tokens + i, ref_all + row * V));
        if (memcmp(all + (row - 1) * V, last + (size_t)s * V, V * sizeof *last) != 0)
            fail_msg("prompt %d (sequence %d): its last prompt-logits row differs from its last logits", s, p->seq);
    }
    assert_memory_equal(last, ref_last, (size_t)PB_S * V * sizeof *last);
    for (size_t r = 0; r < T; r++)
        if (memcmp(all + r * V, ref_all + r * V, V * sizeof *all) != 0)
            fail_msg("prompt-logits row %zu differs from the token-by-token prefill", r);
    pb_decode(m, dec);
    pb_decode(whole, ref_dec);
    assert_memory_equal(dec, ref_dec, (size_t)PB_S * V * sizeof *dec);
    pb_decode(tbt, ref_dec);
    assert_memory_equal(dec, ref_dec, (size_t)PB_S * V * sizeof *dec);
    gp_cpu_model_destroy(m), gp_cpu_model_destroy(whole), gp_cpu_model_destroy(tbt);

    /* only prompt logits, only last logits, none: the same logits and caches */
    for (int k = 0; k < 3; k++) {
        m = pb_model();
        GP_CHECK_OK(gp_cpu_prefill_batch(m, PB_S, PB_SEQS, k == 1 ? other : NULL, k == 0 ? other : NULL));
        if (k == 0)
            assert_memory_equal(other, all, T * V * sizeof *all);
        if (k == 1)
            assert_memory_equal(other, last, (size_t)PB_S * V * sizeof *last);
        pb_decode(m, ref_dec);
        assert_memory_equal(dec, ref_dec, (size_t)PB_S * V * sizeof *dec);
        gp_cpu_model_destroy(m);
    }
    free(last), free(all), free(ref_last), free(ref_all), free(dec), free(ref_dec), free(other);
}

/* Every bad batched prefill is refused with a message naming the value and
 * what is allowed, before the cache changes: the bad prompt comes after good
 * ones, and afterwards the model continues exactly as one that never saw the
 * refused calls. */
static void test_prefill_batch_bad_args(void **state)
{
    const int V = g_tiny.cfg.vocab;
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, 3, 16, 4, &m));
    GP_CHECK_OK(gp_cpu_prefill(m, 0, NP(P1), P1, NULL)); /* sequence 0 holds 3 tokens */
    float *l = malloc((size_t)3 * V * sizeof *l);
    const int32_t bad_tok[2] = {1, 300};
    gp_prefill_seq q[4] = {{.seq = 1, .n = 2, .tokens = P0}, {.seq = 2, .n = 3, .tokens = P2}};

    GP_CHECK_FAIL(gp_cpu_prefill_batch(NULL, 1, q, l, NULL), GP_ERR_INVALID_ARG, "model is NULL");
    GP_CHECK_FAIL(gp_cpu_prefill_batch(m, 0, q, l, NULL), GP_ERR_INVALID_ARG, "0 sequences, allowed 1..3");
    GP_CHECK_FAIL(gp_cpu_prefill_batch(m, 4, q, l, NULL), GP_ERR_INVALID_ARG, "4 sequences, allowed 1..3");
    GP_CHECK_FAIL(gp_cpu_prefill_batch(m, 2, NULL, l, NULL), GP_ERR_INVALID_ARG, "the parts must not be NULL");
    q[1].seq = 3;
    GP_CHECK_FAIL(gp_cpu_prefill_batch(m, 2, q, l, NULL), GP_ERR_INVALID_ARG, "sequence id 3: allowed [0, 2]");
    q[1].seq = 1;
    GP_CHECK_FAIL(gp_cpu_prefill_batch(m, 2, q, l, NULL), GP_ERR_INVALID_ARG, "sequence id 1 appears twice");
    q[1] = (gp_prefill_seq){.seq = 2, .n = 0, .tokens = P2};
    GP_CHECK_FAIL(gp_cpu_prefill_batch(m, 2, q, l, NULL), GP_ERR_INVALID_ARG,
                  "prefill part of sequence 2 has 0 tokens, allowed at least 1");
    q[1] = (gp_prefill_seq){.seq = 2, .n = 3, .tokens = NULL};
    GP_CHECK_FAIL(gp_cpu_prefill_batch(m, 2, q, l, NULL), GP_ERR_INVALID_ARG, "tokens, which are NULL");
    q[1] = (gp_prefill_seq){.seq = 2, .n = 2, .tokens = bad_tok};
    GP_CHECK_FAIL(gp_cpu_prefill_batch(m, 2, q, l, NULL), GP_ERR_INVALID_ARG,
                  "token 300 at position 1 of sequence 2's prefill part: allowed [0, 255]");
    /* 3 held + 14 > 16, after a prompt that fits */
    q[1] = (gp_prefill_seq){.seq = 0, .n = 14, .tokens = P2};
    GP_CHECK_FAIL(gp_cpu_prefill_batch(m, 2, q, l, NULL), GP_ERR_STATE,
                  "14 tokens do not fit sequence 0: it holds 3 tokens and the max context is 16");
    /* a prompt that fits exactly is fine afterwards */
    q[0] = (gp_prefill_seq){.seq = 0, .n = 13, .tokens = P2};
    q[1] = (gp_prefill_seq){.seq = 1, .n = NP(P0), .tokens = P0};
    q[2] = (gp_prefill_seq){.seq = 2, .n = 1, .tokens = P1};
    GP_CHECK_OK(gp_cpu_prefill_batch(m, 3, q, l, NULL));

    gp_cpu_model *f;
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, 3, 16, 4, &f));
    GP_CHECK_OK(gp_cpu_prefill(f, 0, NP(P1), P1, NULL));
    float *g = malloc((size_t)3 * V * sizeof *g);
    GP_CHECK_OK(gp_cpu_prefill_batch(f, 3, q, g, NULL));
    assert_memory_equal(l, g, (size_t)3 * V * sizeof *l);
    gp_cpu_model_destroy(f);
    gp_cpu_model_destroy(m);
    free(l), free(g);
}

/* Two independent greedy runs of 60 tokens agree exactly; logits are finite
 * and not degenerate (synthetic weights give a spread of several units). */
static void test_greedy_determinism(void **state)
{
    const int V = g_tiny.cfg.vocab, T = 60;
    int32_t toks[2][60];
    float *l = malloc(V * sizeof *l), *first = malloc((size_t)T * V * sizeof *first);
    for (int run = 0; run < 2; run++) {
        gp_cpu_model *m;
        GP_CHECK_OK(gp_cpu_model_create(&g_tiny, 1, 128, 16, &m));
        int s = 0;
        GP_CHECK_OK(gp_cpu_prefill(m, 0, NP(P0), P0, l));
        for (int t = 0; t < T; t++) {
            if (!all_finite(l, V))
                fail_msg("non-finite logits at step %d", t);
            if (run == 0) {
                memcpy(first + (size_t)t * V, l, V * sizeof *l);
                float lo = l[0], hi = l[0];
                for (int i = 1; i < V; i++)
                    lo = fminf(lo, l[i]), hi = fmaxf(hi, l[i]);
                if (!(hi - lo > 0.5f))
                    fail_msg("degenerate logits at step %d: range %g", t, (double)(hi - lo));
            } else {
                assert_memory_equal(first + (size_t)t * V, l, V * sizeof *l);
            }
            toks[run][t] = gp_argmax(l, V);
            if (t + 1 < T)
                GP_CHECK_OK(gp_cpu_decode_step(m, 1, &s, &toks[run][t], l));
        }
        gp_cpu_model_destroy(m);
    }
    assert_memory_equal(toks[0], toks[1], sizeof toks[0]);
    free(l), free(first);
}

/* The block size only changes where K/V live, not what is computed: 1e-5
 * relative (in practice the results are bitwise equal; the tolerance leaves
 * room for a future blocked attention). */
static void test_paged_independence(void **state)
{
    const int32_t *prompts[3] = {P0, P1, P2};
    int lens[3] = {NP(P0), NP(P1), NP(P2)};
    const int S = 3, T = 12, V = g_tiny.cfg.vocab;
    const int blocks[] = {16, 1, 3, 64};
    float *ref = malloc((size_t)S * T * V * sizeof *ref), *got = malloc((size_t)S * T * V * sizeof *got);
    run_alone(&g_tiny, blocks[0], prompts, lens, S, T, ref);
    for (size_t i = 1; i < sizeof blocks / sizeof blocks[0]; i++) {
        run_alone(&g_tiny, blocks[i], prompts, lens, S, T, got);
        char what[64];
        snprintf(what, sizeof what, "block_size %d vs 16", blocks[i]);
        double e = rel_err(got, ref, S * T * V, 1e-5, what);
        assert_true(e <= 1e-5);
    }
    free(ref), free(got);
}

/* Context full is GP_ERR_STATE with a message, and leaves the sequence usable
 * after a reset; a prompt that does not fit changes nothing. */
static void test_context_full(void **state)
{
    const int V = g_tiny.cfg.vocab;
    float *l = malloc(V * sizeof *l), *l2 = malloc(V * sizeof *l2);
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, 2, 8, 3, &m)); /* 8 tokens in blocks of 3 */
    GP_CHECK_OK(gp_cpu_prefill(m, 0, 8, P0, l));
    int s = 0;
    int32_t tok = 1;
    gp_clear_error();
    assert_int_equal(gp_cpu_decode_step(m, 1, &s, &tok, l2), GP_ERR_STATE);
    printf("context full: %s\n", gp_last_error());
    assert_non_null(strstr(gp_last_error(), "do not fit sequence 0: it holds 8 tokens"));
    assert_int_equal(gp_cpu_decode_step(m, 1, &s, &tok, l2), GP_ERR_STATE);

    /* a batch where one row is full fails as a whole and advances no row */
    GP_CHECK_OK(gp_cpu_prefill(m, 1, 3, P1, NULL));
    int both[2] = {1, 0};
    int32_t toks[2] = {4, 4};
    float *lb = malloc(2 * V * sizeof *lb);
    assert_int_equal(gp_cpu_decode_step(m, 2, both, toks, lb), GP_ERR_STATE);
    gp_cpu_reset_seq(m, 1);

    /* too long a prompt on a fresh sequence: refused, nothing written */
    gp_cpu_reset_seq(m, 0);
    assert_int_equal(gp_cpu_prefill(m, 0, 9, P0, l2), GP_ERR_STATE);
    printf("prompt too long: %s\n", gp_last_error());
    GP_CHECK_OK(gp_cpu_prefill(m, 0, 8, P0, l2));
    assert_memory_equal(l, l2, V * sizeof *l);
    gp_cpu_model_destroy(m);
    free(l), free(l2), free(lb);
}

static void expect_error(gp_status got, gp_status want, const char *needle)
{
    if (got != want)
        fail_msg("expected %s, got %s (%s)", gp_status_str(want), gp_status_str(got), gp_last_error());
    if (!strstr(gp_last_error(), needle))
        fail_msg("error message '%s' does not mention '%s'", gp_last_error(), needle);
}

/* Bad arguments are refused with a message naming the value; a refused step
 * changes no sequence. */
static void test_bad_args(void **state)
{
    const int V = g_tiny.cfg.vocab;
    gp_cpu_model *m = NULL;
    expect_error(gp_cpu_model_create(&g_tiny, 2, 257, 4, &m), GP_ERR_INVALID_ARG, "257");
    expect_error(gp_cpu_model_create(&g_tiny, 0, 16, 4, &m), GP_ERR_INVALID_ARG, "max_seqs 0");
    expect_error(gp_cpu_model_create(&g_tiny, 2, 16, 0, &m), GP_ERR_INVALID_ARG, "block_size 0");
    expect_error(gp_cpu_model_create(NULL, 2, 16, 4, &m), GP_ERR_INVALID_ARG, "NULL");
    assert_null(m);

    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, 2, 16, 4, &m));
    float *l = malloc(2 * V * sizeof *l), *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b);
    GP_CHECK_OK(gp_cpu_prefill(m, 0, 3, P1, a));
    int ids[2] = {0, 1};
    int32_t toks[2] = {7, 256};
    expect_error(gp_cpu_decode_step(m, 2, ids, toks, l), GP_ERR_INVALID_ARG, "token 256");
    toks[1] = -3;
    expect_error(gp_cpu_decode_step(m, 2, ids, toks, l), GP_ERR_INVALID_ARG, "token -3");
    toks[1] = 7;
    ids[1] = 2;
    expect_error(gp_cpu_decode_step(m, 2, ids, toks, l), GP_ERR_INVALID_ARG, "sequence id 2");
    ids[1] = 0;
    expect_error(gp_cpu_decode_step(m, 2, ids, toks, l), GP_ERR_INVALID_ARG, "twice");
    expect_error(gp_cpu_decode_step(m, 3, ids, toks, l), GP_ERR_INVALID_ARG, "3 sequences, allowed 1..2");
    expect_error(gp_cpu_decode_step(m, 1, ids, toks, NULL), GP_ERR_INVALID_ARG, "NULL");
    expect_error(gp_cpu_prefill(m, 1, 0, P1, NULL), GP_ERR_INVALID_ARG, "has 0 tokens, allowed at least 1");
    int32_t badp[2] = {1, 300};
    expect_error(gp_cpu_prefill(m, 1, 2, badp, NULL), GP_ERR_INVALID_ARG, "token 300");
    expect_error(gp_cpu_prefill(m, -1, 2, P1, NULL), GP_ERR_INVALID_ARG, "sequence id -1");

    /* none of the refused calls moved sequence 0 or 1: continuing gives the
     * same logits as a fresh model */
    int s0 = 0;
    int32_t t7 = 7;
    GP_CHECK_OK(gp_cpu_decode_step(m, 1, &s0, &t7, a));
    gp_cpu_model *f;
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, 1, 16, 4, &f));
    GP_CHECK_OK(gp_cpu_prefill(f, 0, 3, P1, NULL));
    GP_CHECK_OK(gp_cpu_decode_step(f, 1, &s0, &t7, b));
    assert_memory_equal(a, b, V * sizeof *a);
    GP_CHECK_OK(gp_cpu_prefill(m, 1, 3, P1, NULL)); /* sequence 1 was still empty */
    gp_cpu_model_destroy(f);
    gp_cpu_model_destroy(m);
    gp_cpu_reset_seq(NULL, 0); /* harmless */
    gp_cpu_model_destroy(NULL);
    free(l), free(a), free(b);
}

/* A model big enough that matvecs and attention run on the thread pool
 * (a 150-token prompt makes attention worth splitting): results are
 * bit-identical for 1, 3 and 16 threads. */
static void test_thread_invariance(void **state)
{
    gp_config cfg;
    GP_CHECK_OK(gp_config_preset("tiny", &cfg));
    snprintf(cfg.name, sizeof cfg.name, "threads-test");
    cfg.hidden = 256, cfg.n_heads = 8, cfg.n_kv_heads = 2, cfg.head_dim = 32;
    cfg.ffn = 512, cfg.vocab = 1024, cfg.tied_embeddings = false;
    gp_host_weights w;
    GP_CHECK_OK(gp_host_weights_alloc(&cfg, GP_DTYPE_BF16, &w));
    GP_CHECK_OK(gp_synth_fill_host(&w, 99));
    const int V = cfg.vocab, T = 6;
    const char *threads[] = {"1", "3", "16"};
    float *ref = malloc((size_t)2 * T * V * sizeof *ref), *got = malloc((size_t)2 * T * V * sizeof *got);
    char *saved = getenv("GP_REF_THREADS") ? strdup(getenv("GP_REF_THREADS")) : NULL;
    int32_t longp[150]; /* [150] */
    for (int i = 0; i < 150; i++)
        longp[i] = (int32_t)((i * 37 + 11) % V);
    for (int k = 0; k < 3; k++) {
        setenv("GP_REF_THREADS", threads[k], 1);
        float *out = k == 0 ? ref : got;
        gp_cpu_model *m;
        GP_CHECK_OK(gp_cpu_model_create(&w, 2, 256, 7, &m));
        GP_CHECK_OK(gp_cpu_prefill(m, 0, 150, longp, out));
        GP_CHECK_OK(gp_cpu_prefill(m, 1, NP(P0), P0, out + (size_t)T * V));
        int ids[2] = {0, 1};
        float *step = malloc(2 * V * sizeof *step);
        for (int t = 1; t < T; t++) {
            int32_t toks[2] = {gp_argmax(out + (size_t)(t - 1) * V, V),
                               gp_argmax(out + ((size_t)T + t - 1) * V, V)};
            GP_CHECK_OK(gp_cpu_decode_step(m, 2, ids, toks, step));
            memcpy(out + (size_t)t * V, step, V * sizeof *step);
            memcpy(out + ((size_t)T + t) * V, step + V, V * sizeof *step);
        }
        free(step);
        gp_cpu_model_destroy(m);
        if (k > 0 && memcmp(ref, got, (size_t)2 * T * V * sizeof *ref) != 0)
            fail_msg("logits with GP_REF_THREADS=%s differ from 1 thread", threads[k]);
    }
    setenv("GP_REF_THREADS", "0", 1);
    gp_cpu_model *m = NULL;
    expect_error(gp_cpu_model_create(&w, 1, 16, 4, &m), GP_ERR_INVALID_ARG, "GP_REF_THREADS");
    if (saved)
        setenv("GP_REF_THREADS", saved, 1);
    else
        unsetenv("GP_REF_THREADS");
    free(saved);
    gp_host_weights_free(&w);
    free(ref), free(got);
}

/* ------------------------------------------------------------ independent double forward */

/* Element i of a weight tensor of dtype dt, and the address of element i. */
static gp_dtype g_dt = GP_DTYPE_BF16; /* dtype of the weights double_forward reads */
static double wv(const void *w, size_t i)
{
    if (g_dt == GP_DTYPE_F32)
        return ((const float *)w)[i];
    return (double)gp_half_to_f32(((const uint16_t *)w)[i], g_dt);
}
static const void *wat(const void *w, size_t i) { return (const char *)w + i * gp_dtype_size(g_dt); }

static void d_rmsnorm(double *out, const double *x, const void *w, int n, double eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = wv(w, (size_t)i) * x[i] * r;
}

static void d_matvec(double *out, const void *w, const double *x, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        double s = 0.0;
        for (int c = 0; c < cols; c++)
            s += wv(w, (size_t)r * cols + c) * x[c];
        out[r] = s;
    }
}

/* Straight from the HF modeling code, in double, contiguous KV, no paging:
 * logits of every position of one token sequence, out [n][vocab]. */
static void double_forward(const gp_host_weights *w, const int32_t *toks, int n, double *out)
{
    const gp_config *c = &w->cfg;
    int H = c->hidden, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads, F = c->ffn;
    int qd = nh * hd, kvd = nkv * hd;
    g_dt = w->dtype;
    float *inv = malloc(hd / 2 * sizeof *inv);
    gp_rope_inv_freq(c, inv);
    double *K = calloc((size_t)c->n_layers * n * kvd, sizeof *K); /* [layer][pos][kvd] */
    double *Vc = calloc((size_t)c->n_layers * n * kvd, sizeof *Vc);
    double *x = malloc(H * sizeof *x), *h = malloc(H * sizeof *h), *o = malloc(H * sizeof *o);
    double *q = malloc(qd * sizeof *q), *k = malloc(kvd * sizeof *k), *v = malloc(kvd * sizeof *v);
    double *att = malloc(qd * sizeof *att), *sc = malloc(n * sizeof *sc);
    double *g = malloc(2 * F * sizeof *g), *a = malloc(F * sizeof *a);
    for (int p = 0; p < n; p++) {
        for (int i = 0; i < H; i++)
            x[i] = wv(w->embed, (size_t)toks[p] * H + i);
        for (int l = 0; l < c->n_layers; l++) {
            const gp_layer_weights *L = &w->layers[l];
            d_rmsnorm(h, x, L->attn_norm, H, c->norm_eps);
            d_matvec(q, L->wqkv, h, qd, H);
            d_matvec(k, wat(L->wqkv, (size_t)qd * H), h, kvd, H);
            d_matvec(v, wat(L->wqkv, (size_t)(qd + kvd) * H), h, kvd, H);
            for (int i = 0; c->qkv_bias && i < qd + 2 * kvd; i++) { /* HF: bias before RoPE */
                double *dst = i < qd ? q + i : i < qd + kvd ? k + (i - qd) : v + (i - qd - kvd);
                *dst += wv(L->bqkv, (size_t)i);
            }
            for (int i = 0; i < hd / 2; i++) {
                double ang = (double)((float)p * inv[i]);
                double cs = cos(ang), sn = sin(ang);
                for (int hh = 0; hh < nh + nkv; hh++) {
                    double *vec = hh < nh ? q + hh * hd : k + (hh - nh) * hd;
                    double x1 = vec[i], x2 = vec[i + hd / 2];
                    vec[i] = x1 * cs - x2 * sn;
                    vec[i + hd / 2] = x2 * cs + x1 * sn;
                }
            }
            memcpy(K + ((size_t)l * n + p) * kvd, k, kvd * sizeof *k);
            memcpy(Vc + ((size_t)l * n + p) * kvd, v, kvd * sizeof *v);
            for (int hh = 0; hh < nh; hh++) {
                int kh = hh / (nh / nkv);
                double mx = -INFINITY, sum = 0.0;
                for (int t = 0; t <= p; t++) {
                    const double *kt = K + ((size_t)l * n + t) * kvd + kh * hd;
                    double s = 0.0;
                    for (int d = 0; d < hd; d++)
                        s += q[hh * hd + d] * kt[d];
                    sc[t] = s / sqrt((double)hd);
                    mx = fmax(mx, sc[t]);
                }
                for (int t = 0; t <= p; t++)
                    sum += (sc[t] = exp(sc[t] - mx));
                for (int d = 0; d < hd; d++) {
                    double acc = 0.0;
                    for (int t = 0; t <= p; t++)
                        acc += sc[t] / sum * Vc[((size_t)l * n + t) * kvd + kh * hd + d];
                    att[hh * hd + d] = acc;
                }
            }
            d_matvec(o, L->wo, att, H, qd);
            for (int i = 0; i < H; i++)
                x[i] += o[i];
            d_rmsnorm(h, x, L->ffn_norm, H, c->norm_eps);
            d_matvec(g, L->w_gate_up, h, 2 * F, H);
            for (int i = 0; i < F; i++)
                a[i] = g[i] / (1.0 + exp(-g[i])) * g[F + i];
            d_matvec(o, L->w_down, a, H, F);
            for (int i = 0; i < H; i++)
                x[i] += o[i];
        }
        d_rmsnorm(h, x, w->final_norm, H, c->norm_eps);
        d_matvec(out + (size_t)p * c->vocab, w->lm_head, h, c->vocab, H);
    }
    free(inv), free(K), free(Vc), free(x), free(h), free(o), free(q), free(k), free(v);
    free(att), free(sc), free(g), free(a);
}

/* The paged float32 forward against the double one at every position of a
 * 17-token prompt: max|diff|/max|ref| <= 1e-5 (float32 rounding through two
 * layers is ~1e-6; a wrong convention is >= 1e-2). */
static void test_vs_double_forward(void **state)
{
    const int V = g_tiny.cfg.vocab, n = NP(P2);
    double *want = malloc((size_t)n * V * sizeof *want);
    double_forward(&g_tiny, P2, n, want);
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, 1, 32, 3, &m));
    float *got = malloc(V * sizeof *got), *wf = malloc(V * sizeof *wf);
    int s = 0;
    double worst = 0.0;
    for (int p = 0; p < n; p++) {
        GP_CHECK_OK(gp_cpu_decode_step(m, 1, &s, &P2[p], got));
        for (int i = 0; i < V; i++)
            wf[i] = (float)want[(size_t)p * V + i];
        char what[48];
        snprintf(what, sizeof what, "position %d", p);
        double e = rel_err(got, wf, V, 1e-5, what);
        worst = fmax(worst, e);
        assert_true(e <= 1e-5);
        assert_int_equal(gp_argmax(got, V), gp_argmax(wf, V));
    }
    printf("float32 reference vs double forward: worst max|diff|/max|ref| = %.3g\n", worst);
    gp_cpu_model_destroy(m);
    free(want), free(got), free(wf);
}

/* The F16 widening of the dot products is exact: every one of the 65536
 * halves (subnormals, infinities, NaNs) reads as gp_f16_to_f32 gives it,
 * through matvec (a 1 x 1 "matrix" with x = 1). */
static void test_f16_weights_exact(void **state)
{
    for (uint32_t v = 0; v < 65536; v++) {
        uint16_t h = (uint16_t)v;
        float want = gp_f16_to_f32(h), one = 1.0f, got;
        gp_ref_matvec(&got, &h, GP_DTYPE_F16, &one, 1, 1);
        /* equal as values (the sum starts at +0, so -0 reads as +0) */
        if (!(got == want) && !(isnan(got) && isnan(want)))
            fail_msg("f16 0x%04x: matvec reads %.9g, want %.9g", v, (double)got, (double)want);
    }
    /* rows of 16+ take the vector path: the same values as the scalar tail */
    uint16_t w[37];
    float x[37], got;
    for (int i = 0; i < 37; i++)
        w[i] = (uint16_t)(i * 1733u + 1u), x[i] = (float)(i % 5) - 2.0f;
    gp_ref_matvec(&got, w, GP_DTYPE_F16, x, 1, 37);
    double d = 0.0, mag = 0.0;
    for (int i = 0; i < 37; i++) {
        d += (double)gp_f16_to_f32(w[i]) * x[i];
        mag += fabs((double)gp_f16_to_f32(w[i]) * x[i]);
    }
    assert_true(fabs((double)got - d) <= 1e-6 * mag);
}

/* The reference reads weights of any dtype exactly: the tiny weights
 * widened to F32 give bitwise the same logits as the BF16 originals (same
 * values, same summation order); in F16 (its own rounding of the generator's
 * floats) the logits are close to the BF16 ones and the whole path runs. */
static void test_weight_dtypes_same_logits(void **state)
{
    const gp_config *c = &g_tiny.cfg;
    gp_host_weights w32, w16;
    GP_CHECK_OK(gp_host_weights_alloc(c, GP_DTYPE_F32, &w32));
    GP_CHECK_OK(gp_host_weights_alloc(c, GP_DTYPE_F16, &w16));
    GP_CHECK_OK(gp_synth_fill_host(&w16, 1234));
    /* same layout and element order: widen element by element over each tensor */
    const void *src[] = {g_tiny.embed, g_tiny.final_norm};
    void *dst[] = {w32.embed, w32.final_norm};
    uint64_t cnt[] = {gp_synth_numel(c, GP_T_EMBED), gp_synth_numel(c, GP_T_FINAL_NORM)};
    for (int t = 0; t < 2; t++)
        for (uint64_t i = 0; i < cnt[t]; i++)
            ((float *)dst[t])[i] = gp_bf16_to_f32(((const gp_bf16 *)src[t])[i]);
    static const gp_tensor_kind kinds[] = {GP_T_ATTN_NORM, GP_T_WQKV, GP_T_WO, GP_T_FFN_NORM, GP_T_W_GATE_UP,
                                           GP_T_W_DOWN};
    for (int l = 0; l < c->n_layers; l++) {
        const gp_layer_weights *S = &g_tiny.layers[l];
        gp_layer_weights *D = &w32.layers[l];
        const void *sp[] = {S->attn_norm, S->wqkv, S->wo, S->ffn_norm, S->w_gate_up, S->w_down};
        void *dp[] = {D->attn_norm, D->wqkv, D->wo, D->ffn_norm, D->w_gate_up, D->w_down};
        for (int k = 0; k < 6; k++)
            for (uint64_t i = 0; i < gp_synth_numel(c, kinds[k]); i++)
                ((float *)dp[k])[i] = gp_bf16_to_f32(((const gp_bf16 *)sp[k])[i]);
    }
    const int V = c->vocab, n = NP(P0);
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b), *h = malloc((size_t)V * sizeof *h);
    gp_cpu_model *ma, *mb, *mh;
    GP_CHECK_OK(gp_cpu_model_create(&g_tiny, 1, 32, 4, &ma));
    GP_CHECK_OK(gp_cpu_model_create(&w32, 1, 32, 4, &mb));
    GP_CHECK_OK(gp_cpu_model_create(&w16, 1, 32, 4, &mh));
    GP_CHECK_OK(gp_cpu_prefill(ma, 0, n, P0, a));
    GP_CHECK_OK(gp_cpu_prefill(mb, 0, n, P0, b));
    GP_CHECK_OK(gp_cpu_prefill(mh, 0, n, P0, h));
    assert_memory_equal(a, b, (size_t)V * sizeof *a);
    double e = rel_err(h, a, V, 5e-2, "f16 vs bf16 weights");
    assert_true(e > 0.0 && e <= 5e-2); /* different roundings of the same floats */
    printf("f16 vs bf16 synthetic weights: max|diff|/max|ref| = %.3g\n", e);
    gp_cpu_model_destroy(ma), gp_cpu_model_destroy(mb), gp_cpu_model_destroy(mh);
    free(a), free(b), free(h);
    gp_host_weights_free(&w32), gp_host_weights_free(&w16);
}

/* The activation dtype modes: F16 rounds (so differs from F32 and from BF16),
 * each mode is deterministic, and an unknown dtype leaves the mode as it was. */
static void test_act_dtype_modes(void **state)
{
    const int V = g_tiny.cfg.vocab, n = NP(P0);
    float *out[4];
    const gp_dtype modes[4] = {GP_DTYPE_F32, GP_DTYPE_BF16, GP_DTYPE_F16, GP_DTYPE_F16};
    for (int k = 0; k < 4; k++) {
        out[k] = malloc((size_t)V * sizeof *out[k]);
        gp_cpu_model *m;
        GP_CHECK_OK(gp_cpu_model_create(&g_tiny, 1, 32, 4, &m));
        gp_cpu_model_set_act_dtype(m, modes[k]);
        if (k == 3)
            gp_cpu_model_set_act_dtype(m, GP_DTYPE_I8); /* ignored: stays F16 */
        GP_CHECK_OK(gp_cpu_prefill(m, 0, n, P0, out[k]));
        gp_cpu_model_destroy(m);
    }
    assert_memory_not_equal(out[0], out[1], (size_t)V * sizeof(float));
    assert_memory_not_equal(out[0], out[2], (size_t)V * sizeof(float));
    assert_memory_not_equal(out[1], out[2], (size_t)V * sizeof(float));
    assert_memory_equal(out[2], out[3], (size_t)V * sizeof(float));
    /* fp16 keeps 3 more mantissa bits than bf16: closer to the fp32 oracle */
    double e16 = rel_err(out[2], out[0], V, 1.0, "f16 acts"), e_bf = rel_err(out[1], out[0], V, 1.0, "bf16 acts");
    printf("activation rounding vs fp32 on tiny: bf16 %.3g, fp16 %.3g\n", e_bf, e16);
    assert_true(e16 < e_bf);
    for (int k = 0; k < 4; k++)
        free(out[k]);
}

/* q/k/v biases: a tiny config with qkv_bias and synthetic biases against the
 * double forward (which adds them before RoPE, as HF), in F32 weights. */
static void test_qkv_bias_vs_double(void **state)
{
    gp_config cfg = g_tiny.cfg;
    cfg.qkv_bias = true;
    gp_host_weights w;
    GP_CHECK_OK(gp_host_weights_alloc(&cfg, GP_DTYPE_F32, &w));
    GP_CHECK_OK(gp_synth_fill_host(&w, 77));
    const int V = cfg.vocab, n = NP(P2);
    double *want = malloc((size_t)n * V * sizeof *want);
    double_forward(&w, P2, n, want);
    gp_config nob = cfg;
    nob.qkv_bias = false; /* the same weights without the bias: far off, so the bias matters */
    gp_host_weights wn = w;
    wn.cfg = nob;
    gp_cpu_model *m, *mn;
    GP_CHECK_OK(gp_cpu_model_create(&w, 1, 32, 3, &m));
    GP_CHECK_OK(gp_cpu_model_create(&wn, 1, 32, 3, &mn));
    float *got = malloc(V * sizeof *got), *gn = malloc(V * sizeof *gn), *wf = malloc(V * sizeof *wf);
    int s = 0;
    double worst = 0.0, nobias = 0.0;
    for (int p = 0; p < n; p++) {
        GP_CHECK_OK(gp_cpu_decode_step(m, 1, &s, &P2[p], got));
        GP_CHECK_OK(gp_cpu_decode_step(mn, 1, &s, &P2[p], gn));
        for (int i = 0; i < V; i++)
            wf[i] = (float)want[(size_t)p * V + i];
        worst = fmax(worst, rel_err(got, wf, V, 1e-5, "qkv bias"));
        nobias = fmax(nobias, rel_err(gn, wf, V, 1e9, "no bias"));
    }
    printf("q/k/v bias: float32 reference vs double forward %.3g (without the bias: %.3g)\n", worst, nobias);
    assert_true(worst <= 1e-5);
    assert_true(nobias > 1e-3);
    gp_cpu_model_destroy(m), gp_cpu_model_destroy(mn);
    free(want), free(got), free(gn), free(wf);
    g_dt = GP_DTYPE_BF16;
    gp_host_weights_free(&w);
}

int main(void)
{
    const struct CMUnitTest ops[] = {
        cmocka_unit_test(test_f16_weights_exact),
        cmocka_unit_test(test_rmsnorm_vs_double),
        cmocka_unit_test(test_matvec_vs_double),
        cmocka_unit_test(test_rope_convention),
        cmocka_unit_test(test_rope_vs_double),
        cmocka_unit_test(test_swiglu_vs_double),
        cmocka_unit_test(test_argmax),
    };
    const struct CMUnitTest decode[] = {
        cmocka_unit_test(test_vs_double_forward),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_prefill_decode_consistency),
        cmocka_unit_test(test_prefill_batch_matches_alone),
        cmocka_unit_test(test_prefill_batch_bad_args),
        cmocka_unit_test(test_greedy_determinism),
        cmocka_unit_test(test_paged_independence),
        cmocka_unit_test(test_context_full),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_thread_invariance),
        cmocka_unit_test(test_stages_match_step),
        cmocka_unit_test(test_stages_follow_views),
        cmocka_unit_test(test_weight_dtypes_same_logits),
        cmocka_unit_test(test_act_dtype_modes),
        cmocka_unit_test(test_qkv_bias_vs_double),
    };
    int fails = cmocka_run_group_tests_name("reference ops", ops, NULL, NULL);
    fails += cmocka_run_group_tests_name("reference decode (tiny)", decode, setup_tiny, teardown_tiny);
    return fails ? 1 : 0;
}
