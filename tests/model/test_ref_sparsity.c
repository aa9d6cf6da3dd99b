/* Activation sparsity in the CPU reference: masked decode steps against a
 * dense model whose weight columns of the masked inputs are zeroed, the
 * all-zero thresholds against no masking bit for bit, prefill left dense,
 * the batch limit, the stage API and the capture hook; on the tiny preset
 * and on the tiny checkpoint. */
#include "gp_test.h"

#include "gp_model.h"
#include "gp_reference.h"
#include "gp_stage.h"

#define NPROJ GP_CPU_PROJ_COUNT

/* One weight set per group: the tiny preset (synthetic) or tests/data/tiny. */
typedef struct fixture {
    gp_host_weights w;
    const char *what;
} fixture;

static int setup_preset(void **state)
{
    static fixture f = {.what = "tiny preset"};
    gp_config cfg;
    if (gp_config_preset("tiny", &cfg) != GP_OK || gp_host_weights_alloc(&cfg, GP_DTYPE_BF16, &f.w) != GP_OK ||
        gp_synth_fill_host(&f.w, 1234) != GP_OK) {
        fprintf(stderr, "setup: %s\n", gp_last_error());
        return -1;
    }
    *state = &f;
    return 0;
}

static int setup_checkpoint(void **state)
{
    static fixture f = {.what = "tests/data/tiny"};
    gp_model_source src;
    if (gp_model_source_resolve(GP_TEST_DATA_DIR "/tiny", 0, &src) != GP_OK ||
        gp_model_source_load_host(&src, &f.w) != GP_OK) {
        fprintf(stderr, "setup: %s\n", gp_last_error());
        return -1;
    }
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    gp_host_weights_free(&f->w);
    return 0;
}

static const int32_t P0[] = {5, 17, 42, 7, 99, 3, 250, 0, 128};
static const int32_t P1[] = {11, 200, 2};
static const int32_t P2[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
#define NP(p) ((int)(sizeof(p) / sizeof((p)[0])))

/* ------------------------------------------------------------ capture */

/* Keeps the rows of the last call per (layer, projection) and counts every
 * row and call seen. */
typedef struct recorder {
    int n_layers;
    float *rows[64][NPROJ];   /* [rows][width] of the last call */
    int n_rows[64][NPROJ], width[64][NPROJ];
    long total_rows[64][NPROJ];
    long calls;
} recorder;

static void rec_capture(void *ctx, int layer, int proj, int rows, int width, const float *x)
{
    recorder *r = ctx;
    assert_true(layer >= 0 && layer < r->n_layers && proj >= 0 && proj < NPROJ);
    float *p = realloc(r->rows[layer][proj], (size_t)rows * width * sizeof *p);
    assert_non_null(p);
    memcpy(p, x, (size_t)rows * width * sizeof *p);
    r->rows[layer][proj] = p;
    r->n_rows[layer][proj] = rows;
    r->width[layer][proj] = width;
    r->total_rows[layer][proj] += rows;
    r->calls++;
}

static void rec_free(recorder *r)
{
    for (int l = 0; l < 64; l++)
        for (int p = 0; p < NPROJ; p++)
            free(r->rows[l][p]);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Per (layer, projection) the median |x| of the recorded rows: thresholds
 * that mask about half of what was seen. */
static void rec_medians(const recorder *r, float *t)
{
    for (int l = 0; l < r->n_layers; l++)
        for (int p = 0; p < NPROJ; p++) {
            int n = r->n_rows[l][p] * r->width[l][p];
            float *a = malloc((size_t)n * sizeof *a);
            for (int i = 0; i < n; i++)
                a[i] = fabsf(r->rows[l][p][i]);
            qsort(a, (size_t)n, sizeof *a, cmp_float);
            t[l * NPROJ + p] = a[n / 2];
            free(a);
        }
}

/* Thresholds from one dense decode step after prefilling P0. */
static void median_thresholds(const gp_host_weights *w, gp_dtype act, float *t)
{
    gp_cpu_model *m;
    recorder r = {.n_layers = w->cfg.n_layers};
    float *lg = malloc((size_t)w->cfg.vocab * sizeof *lg);
    GP_CHECK_OK(gp_cpu_model_create(w, 1, 64, 4, &m));
    gp_cpu_model_set_act_dtype(m, act);
    GP_CHECK_OK(gp_cpu_prefill(m, 0, NP(P0), P0, lg));
    gp_cpu_model_set_capture(m, rec_capture, &r);
    int seq = 0;
    int32_t tok = 77;
    GP_CHECK_OK(gp_cpu_decode_step(m, 1, &seq, &tok, lg));
    rec_medians(&r, t);
    rec_free(&r);
    free(lg);
    gp_cpu_model_destroy(m);
}

/* ------------------------------------------------------------ tests */

/* Prefill three prompts in one call, then T decode steps of all three;
 * logits of every step into out [T][3][vocab] and the prefill's last
 * logits into pre [3][vocab]. thresholds NULL: dense. */
static void run_three(const gp_host_weights *w, gp_dtype act, const float *thresholds, int T, float *pre,
                      float *out)
{
    const int V = w->cfg.vocab;
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(w, 3, 64, 4, &m));
    gp_cpu_model_set_act_dtype(m, act);
    gp_cpu_model_set_sparsity(m, thresholds);
    gp_prefill_seq seqs[3] = {{0, NP(P0), P0}, {1, NP(P1), P1}, {2, NP(P2), P2}};
    GP_CHECK_OK(gp_cpu_prefill_batch(m, 3, seqs, pre, NULL));
    int ids[3] = {0, 1, 2};
    int32_t tok[3];
    for (int s = 0; s < 3; s++)
        tok[s] = gp_argmax(pre + (size_t)s * V, V);
    for (int t = 0; t < T; t++) {
        float *lg = out + (size_t)t * 3 * V;
        GP_CHECK_OK(gp_cpu_decode_step(m, 3, ids, tok, lg));
        for (int s = 0; s < 3; s++)
            tok[s] = gp_argmax(lg + (size_t)s * V, V);
    }
    gp_cpu_model_destroy(m);
}

/* Thresholds all 0 drop only exact zeros, which add nothing to the sums:
 * every logit is the dense one bit for bit, in both activation modes. */
static void test_zero_thresholds_bitwise(void **state)
{
    const fixture *f = *state;
    const gp_host_weights *w = &f->w;
    const int V = w->cfg.vocab, T = 5;
    float *zeros = calloc((size_t)w->cfg.n_layers * NPROJ, sizeof *zeros);
    size_t n = (size_t)T * 3 * V;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    float *pa = malloc((size_t)3 * V * sizeof *pa), *pb = malloc((size_t)3 * V * sizeof *pb);
    const gp_dtype acts[2] = {GP_DTYPE_F32, GP_DTYPE_BF16};
    for (int i = 0; i < 2; i++) {
        run_three(w, acts[i], NULL, T, pa, a);
        run_three(w, acts[i], zeros, T, pb, b);
        assert_memory_equal(pa, pb, (size_t)3 * V * sizeof *pa);
        assert_memory_equal(a, b, n * sizeof *a);
    }
    free(zeros), free(a), free(b), free(pa), free(pb);
}

/* Element (r, c) of a [rows][cols] weight of dtype dt set to +0. */
static void zero_weight(void *wt, gp_dtype dt, int cols, int r, int c)
{
    size_t es = gp_dtype_size(dt);
    memset((char *)wt + ((size_t)r * (size_t)cols + (size_t)c) * es, 0, es);
}

/* A masked decode step of one sequence equals a dense step whose weights
 * have the masked inputs' columns zeroed (x_j -> 0 and w_:j -> 0 give the
 * same +-0 products): the weights are zeroed after the dense model's
 * prefill, the columns picked from the inputs the masked model's capture
 * saw (before masking), which must match the dense model's own. Both
 * activation modes; about half of every projection's inputs masked. */
static void test_masked_equals_zeroed_columns(void **state)
{
    const fixture *f = *state;
    const gp_host_weights *w = &f->w;
    const gp_config *c = &w->cfg;
    const int V = c->vocab, L = c->n_layers, H = c->hidden, F = c->ffn, Q = c->n_heads * c->head_dim;
    const int qkv_rows = gp_config_qkv_rows(c);
    const gp_dtype acts[2] = {GP_DTYPE_BF16, GP_DTYPE_F32};
    float *t = malloc((size_t)L * NPROJ * sizeof *t);
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    float *ld = malloc((size_t)V * sizeof *ld);
    for (int ai = 0; ai < 2; ai++) {
        median_thresholds(w, acts[ai], t);
        int seq = 0;
        int32_t tok = 77;
        /* masked */
        recorder ra = {.n_layers = L};
        gp_cpu_model *a;
        GP_CHECK_OK(gp_cpu_model_create(w, 1, 64, 4, &a));
        gp_cpu_model_set_act_dtype(a, acts[ai]);
        gp_cpu_model_set_sparsity(a, t);
        GP_CHECK_OK(gp_cpu_prefill(a, 0, NP(P2), P2, la));
        gp_cpu_model_set_capture(a, rec_capture, &ra);
        GP_CHECK_OK(gp_cpu_decode_step(a, 1, &seq, &tok, la));
        /* dense on a copy of the weights, columns zeroed after the prefill */
        gp_host_weights wb;
        GP_CHECK_OK(gp_host_weights_alloc(c, w->dtype, &wb));
        memcpy(wb.arena, w->arena, w->arena_bytes);
        recorder rb = {.n_layers = L};
        gp_cpu_model *b;
        GP_CHECK_OK(gp_cpu_model_create(&wb, 1, 64, 4, &b));
        gp_cpu_model_set_act_dtype(b, acts[ai]);
        GP_CHECK_OK(gp_cpu_prefill(b, 0, NP(P2), P2, lb));
        GP_CHECK_OK(gp_cpu_decode_step(b, 1, &seq, &tok, ld)); /* the dense step, before zeroing */
        gp_cpu_reset_seq(b, 0);
        GP_CHECK_OK(gp_cpu_prefill(b, 0, NP(P2), P2, lb));
        for (int l = 0; l < L; l++) {
            gp_layer_weights *lw = &wb.layers[l];
            struct { int proj, width, rows; void *wt; } pr[NPROJ] = {
                {0, H, qkv_rows, lw->wqkv}, {1, Q, H, lw->wo}, {2, H, 2 * F, lw->w_gate_up}, {3, F, H, lw->w_down}};
            for (int p = 0; p < NPROJ; p++) {
                assert_int_equal(ra.n_rows[l][p], 1);
                assert_int_equal(ra.width[l][p], pr[p].width);
                int masked = 0;
                for (int j = 0; j < pr[p].width; j++) {
                    if (fabsf(ra.rows[l][p][j]) > t[l * NPROJ + p])
                        continue;
                    masked++;
                    for (int r = 0; r < pr[p].rows; r++)
                        zero_weight(pr[p].wt, wb.dtype, pr[p].width, r, j);
                }
                if (masked < pr[p].width / 4 || masked == pr[p].width)
                    fail_msg("%s layer %d proj %d: %d of %d inputs masked; the test wants about half", f->what, l,
                             p, masked, pr[p].width);
            }
        }
        gp_cpu_model_set_capture(b, rec_capture, &rb);
        GP_CHECK_OK(gp_cpu_decode_step(b, 1, &seq, &tok, lb));
        for (int l = 0; l < L; l++)
            for (int p = 0; p < NPROJ; p++)
                assert_memory_equal(ra.rows[l][p], rb.rows[l][p], (size_t)ra.width[l][p] * sizeof(float));
        assert_memory_equal(la, lb, (size_t)V * sizeof *la);
        /* and the masking did something */
        assert_true(memcmp(la, ld, (size_t)V * sizeof *la) != 0);
        gp_cpu_model_destroy(a);
        gp_cpu_model_destroy(b);
        gp_host_weights_free(&wb);
        rec_free(&ra);
        rec_free(&rb);
    }
    free(t), free(la), free(lb), free(ld);
}

/* Prefill stays dense with sparsity on: every prompt position's logits are
 * the dense ones bit for bit (the decode after it is not). */
static void test_prefill_dense(void **state)
{
    const fixture *f = *state;
    const gp_host_weights *w = &f->w;
    const int V = w->cfg.vocab, L = w->cfg.n_layers;
    const int total = NP(P0) + NP(P1) + NP(P2);
    float *t = malloc((size_t)L * NPROJ * sizeof *t);
    median_thresholds(w, GP_DTYPE_BF16, t);
    float *pa = malloc((size_t)total * V * sizeof *pa), *pb = malloc((size_t)total * V * sizeof *pb);
    gp_prefill_seq seqs[3] = {{0, NP(P0), P0}, {1, NP(P1), P1}, {2, NP(P2), P2}};
    gp_cpu_model *a, *b;
    GP_CHECK_OK(gp_cpu_model_create(w, 3, 64, 4, &a));
    GP_CHECK_OK(gp_cpu_model_create(w, 3, 64, 4, &b));
    gp_cpu_model_set_act_dtype(a, GP_DTYPE_BF16);
    gp_cpu_model_set_act_dtype(b, GP_DTYPE_BF16);
    gp_cpu_model_set_sparsity(b, t);
    GP_CHECK_OK(gp_cpu_prefill_batch(a, 3, seqs, NULL, pa));
    GP_CHECK_OK(gp_cpu_prefill_batch(b, 3, seqs, NULL, pb));
    assert_memory_equal(pa, pb, (size_t)total * V * sizeof *pa);
    int ids[3] = {0, 1, 2};
    int32_t tok[3] = {1, 2, 3};
    GP_CHECK_OK(gp_cpu_decode_step(a, 3, ids, tok, pa));
    GP_CHECK_OK(gp_cpu_decode_step(b, 3, ids, tok, pb));
    assert_true(memcmp(pa, pb, (size_t)3 * V * sizeof *pa) != 0);
    gp_cpu_model_destroy(a);
    gp_cpu_model_destroy(b);
    free(t), free(pa), free(pb);
}

/* Decode batches up to GP_CPU_SPARSE_MAX_B rows are masked, each row as if
 * decoded alone (masks are per element); a larger batch stays dense. */
static void test_batch_limit(void **state)
{
    const fixture *f = *state;
    const gp_host_weights *w = &f->w;
    const int V = w->cfg.vocab, L = w->cfg.n_layers, N = GP_CPU_SPARSE_MAX_B + 1;
    float *t = malloc((size_t)L * NPROJ * sizeof *t);
    median_thresholds(w, GP_DTYPE_BF16, t);
    float *dense = malloc((size_t)N * V * sizeof *dense), *sparse = malloc((size_t)N * V * sizeof *sparse);
    float *alone = malloc((size_t)V * sizeof *alone);
    int ids[GP_CPU_SPARSE_MAX_B + 1];
    int32_t tok[GP_CPU_SPARSE_MAX_B + 1];
    for (int s = 0; s < N; s++)
        ids[s] = s, tok[s] = (int32_t)(3 * s + 1);
    for (int B = N - 1; B <= N; B++) {
        gp_cpu_model *d, *m, *one;
        GP_CHECK_OK(gp_cpu_model_create(w, N, 64, 4, &d));
        GP_CHECK_OK(gp_cpu_model_create(w, N, 64, 4, &m));
        GP_CHECK_OK(gp_cpu_model_create(w, 1, 64, 4, &one));
        gp_cpu_model_set_sparsity(m, t);
        gp_cpu_model_set_sparsity(one, t);
        for (int s = 0; s < B; s++) {
            int32_t p[2] = {(int32_t)s, (int32_t)(200 - s)};
            GP_CHECK_OK(gp_cpu_prefill(d, s, 2, p, NULL));
            GP_CHECK_OK(gp_cpu_prefill(m, s, 2, p, NULL));
        }
        GP_CHECK_OK(gp_cpu_decode_step(d, B, ids, tok, dense));
        GP_CHECK_OK(gp_cpu_decode_step(m, B, ids, tok, sparse));
        if (B > GP_CPU_SPARSE_MAX_B) {
            assert_memory_equal(dense, sparse, (size_t)B * V * sizeof *dense);
        } else {
            assert_true(memcmp(dense, sparse, (size_t)B * V * sizeof *dense) != 0);
            for (int s = 0; s < B; s += 5) {
                int32_t p[2] = {(int32_t)s, (int32_t)(200 - s)};
                int zero = 0;
                gp_cpu_reset_seq(one, 0);
                GP_CHECK_OK(gp_cpu_prefill(one, 0, 2, p, NULL));
                GP_CHECK_OK(gp_cpu_decode_step(one, 1, &zero, &tok[s], alone));
                assert_memory_equal(alone, sparse + (size_t)s * V, (size_t)V * sizeof *alone);
            }
        }
        gp_cpu_model_destroy(d);
        gp_cpu_model_destroy(m);
        gp_cpu_model_destroy(one);
    }
    free(t), free(dense), free(sparse), free(alone);
}

static gp_status cpu_stage(gp_cpu_model *m, gp_cpu_worker *w, gp_stage_kind kind, int layer, int b0, int nb)
{
    gp_stage_io io = {.layer = layer, .b0 = b0, .nb = nb};
    GP_TRY(gp_cpu_resid_view(m, b0, nb, &io.resid));
    return gp_cpu_stage(m, w, kind, &io);
}

/* The stage API over micro-batches masks as the whole step does (the
 * step's batch decides, not a stage's rows), and the capture hook sees
 * each stage's rows. */
static void test_stages_sparse(void **state)
{
    const fixture *f = *state;
    const gp_host_weights *w = &f->w;
    const int V = w->cfg.vocab, L = w->cfg.n_layers, S = 5, T = 3;
    float *t = malloc((size_t)L * NPROJ * sizeof *t);
    median_thresholds(w, GP_DTYPE_BF16, t);
    gp_cpu_model *a, *b;
    GP_CHECK_OK(gp_cpu_model_create(w, S, 64, 4, &a));
    GP_CHECK_OK(gp_cpu_model_create(w, S, 64, 4, &b));
    gp_cpu_model_set_sparsity(a, t);
    gp_cpu_model_set_sparsity(b, t);
    gp_cpu_worker *wa, *wf;
    GP_CHECK_OK(gp_cpu_worker_create(b, 2, &wa));
    GP_CHECK_OK(gp_cpu_worker_create(b, 1, &wf));
    float *la = malloc((size_t)S * V * sizeof *la), *lb = malloc((size_t)S * V * sizeof *lb);
    int ids[5] = {0, 1, 2, 3, 4};
    int32_t tok[5] = {9, 8, 7, 6, 5};
    for (int s = 0; s < S; s++) {
        GP_CHECK_OK(gp_cpu_prefill(a, s, NP(P1), P1, NULL));
        GP_CHECK_OK(gp_cpu_prefill(b, s, NP(P1), P1, NULL));
    }
    recorder r = {.n_layers = L};
    gp_cpu_model_set_capture(b, rec_capture, &r);
    const int b0[2] = {0, 3}, nb[2] = {3, 2};
    for (int step = 0; step < T; step++) {
        GP_CHECK_OK(gp_cpu_decode_step(a, S, ids, tok, la));
        GP_CHECK_OK(gp_cpu_step_begin(b, S, ids, tok));
        for (int l = 0; l < L; l++)
            for (int m = 0; m < 2; m++) {
                GP_CHECK_OK(cpu_stage(b, wa, GP_STAGE_ATTN, l, b0[m], nb[m]));
                GP_CHECK_OK(cpu_stage(b, wf, GP_STAGE_FFN, l, b0[m], nb[m]));
            }
        gp_tensor_view rv;
        GP_CHECK_OK(gp_cpu_resid_view(b, 0, S, &rv));
        GP_CHECK_OK(gp_cpu_step_end(b, wf, &rv, lb));
        assert_memory_equal(la, lb, (size_t)S * V * sizeof *la);
        for (int s = 0; s < S; s++)
            tok[s] = gp_argmax(la + (size_t)s * V, V);
    }
    assert_int_equal(r.calls, (long)T * L * NPROJ * 2);
    for (int l = 0; l < L; l++)
        for (int p = 0; p < NPROJ; p++)
            assert_int_equal(r.total_rows[l][p], (long)T * S);
    rec_free(&r);
    gp_cpu_worker_destroy(wa);
    gp_cpu_worker_destroy(wf);
    gp_cpu_model_destroy(a);
    gp_cpu_model_destroy(b);
    free(t), free(la), free(lb);
}

/* The hook sees every prompt token's inputs in prefill and every decode
 * row's, at the projections' widths, before masking: with thresholds that
 * mask everything, the RMSNorm outputs it sees (q/k/v's and gate/up's
 * inputs) are still not zero (down's are, its gate/up having read only
 * zeros). Turning it off stops the calls. */
static void test_capture(void **state)
{
    const fixture *f = *state;
    const gp_host_weights *w = &f->w;
    const gp_config *c = &w->cfg;
    const int L = c->n_layers;
    const int widths[NPROJ] = {c->hidden, c->n_heads * c->head_dim, c->hidden, c->ffn};
    float *huge = malloc((size_t)L * NPROJ * sizeof *huge);
    for (int i = 0; i < L * NPROJ; i++)
        huge[i] = 1e30f;
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(w, 3, 64, 4, &m));
    gp_cpu_model_set_sparsity(m, huge);
    recorder r = {.n_layers = L};
    gp_cpu_model_set_capture(m, rec_capture, &r);
    gp_prefill_seq seqs[3] = {{0, NP(P0), P0}, {1, NP(P1), P1}, {2, NP(P2), P2}};
    GP_CHECK_OK(gp_cpu_prefill_batch(m, 3, seqs, NULL, NULL));
    const long prompt_tokens = NP(P0) + NP(P1) + NP(P2);
    for (int l = 0; l < L; l++)
        for (int p = 0; p < NPROJ; p++) {
            assert_int_equal(r.total_rows[l][p], prompt_tokens);
            assert_int_equal(r.width[l][p], widths[p]);
        }
    assert_int_equal(r.calls, (long)NP(P2) * L * NPROJ); /* one call per prefill position */
    int ids[3] = {0, 1, 2};
    int32_t tok[3] = {4, 5, 6};
    float *lg = malloc((size_t)3 * c->vocab * sizeof *lg);
    GP_CHECK_OK(gp_cpu_decode_step(m, 3, ids, tok, lg));
    for (int l = 0; l < L; l++)
        for (int p = 0; p < NPROJ; p++) {
            assert_int_equal(r.total_rows[l][p], prompt_tokens + 3);
            assert_int_equal(r.n_rows[l][p], 3);
            int nonzero = 0;
            for (int i = 0; i < 3 * widths[p]; i++)
                nonzero += r.rows[l][p][i] != 0.0f;
            if (p == 0 || p == 2)
                assert_true(nonzero > widths[p]);
        }
    long calls = r.calls;
    gp_cpu_model_set_capture(m, NULL, &r);
    GP_CHECK_OK(gp_cpu_decode_step(m, 3, ids, tok, lg));
    assert_int_equal(r.calls, calls);
    rec_free(&r);
    free(huge), free(lg);
    gp_cpu_model_destroy(m);
}

/* The model's own worker can be resized; the logits do not change, and an
 * out-of-range count is refused by value. */
static void test_set_threads(void **state)
{
    const fixture *f = *state;
    const gp_host_weights *w = &f->w;
    const int V = w->cfg.vocab;
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    gp_cpu_model *m;
    GP_CHECK_OK(gp_cpu_model_create(w, 1, 64, 4, &m));
    GP_CHECK_OK(gp_cpu_prefill(m, 0, NP(P0), P0, a));
    GP_CHECK_OK(gp_cpu_model_set_threads(m, 3));
    gp_cpu_reset_seq(m, 0);
    GP_CHECK_OK(gp_cpu_prefill(m, 0, NP(P0), P0, b));
    assert_memory_equal(a, b, (size_t)V * sizeof *a);
    GP_CHECK_FAIL(gp_cpu_model_set_threads(m, 17), GP_ERR_INVALID_ARG, "threads 17");
    gp_cpu_model_destroy(m);
    free(a), free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_thresholds_bitwise), cmocka_unit_test(test_masked_equals_zeroed_columns),
        cmocka_unit_test(test_prefill_dense),           cmocka_unit_test(test_batch_limit),
        cmocka_unit_test(test_stages_sparse),           cmocka_unit_test(test_capture),
        cmocka_unit_test(test_set_threads),
    };
    int fails = cmocka_run_group_tests_name("reference sparsity (tiny preset)", tests, setup_preset, teardown);
    fails += cmocka_run_group_tests_name("reference sparsity (tests/data/tiny)", tests, setup_checkpoint, teardown);
    return fails ? 1 : 0;
}
