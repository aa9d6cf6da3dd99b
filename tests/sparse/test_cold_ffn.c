/* The cold-neuron CPU FFN: the pack's layout, results independent of the
 * thread count (bitwise), the hot part plus the cold part against the CPU
 * reference's masked FFN (bf16 and fp16) with each listed neuron's active
 * flag (gp_cold_ffn_run_ex) the reference's, all neurons cold with zero
 * thresholds against its dense FFN, the bytes it reports, and refusals. */
#include "gp_test.h"

#include "gp_reference.h"
#include "gp_sparse.h"
#include "gp_stage.h"

#define NPROJ GP_SPARSE_PROJ_COUNT

static uint64_t g_rng = 11;

static double uniform(void) { return gp_test_uniform(&g_rng); }

static void weights(gp_dtype dt, int hidden, int ffn, gp_host_weights *w)
{
    gp_config c;
    GP_CHECK_OK(gp_config_preset("tiny", &c));
    if (hidden) {
        c.hidden = hidden, c.ffn = ffn;
        c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = hidden / 4;
    }
    GP_CHECK_OK(gp_host_weights_alloc(&c, dt, w));
    GP_CHECK_OK(gp_synth_fill_host(w, 99));
}

static float wval(const gp_host_weights *w, const void *t, size_t i)
{
    return w->dtype == GP_DTYPE_F32 ? ((const float *)t)[i] : gp_half_to_f32(((const uint16_t *)t)[i], w->dtype);
}

static void test_pack(void **state)
{
    gp_host_weights w;
    weights(GP_DTYPE_BF16, 0, 0, &w);
    const int H = w.cfg.hidden, F = w.cfg.ffn;
    const int list[3] = {5, 127, 0};
    gp_cold_pack *pk;
    GP_CHECK_OK(gp_cold_pack_create(&w, 1, GP_DTYPE_BF16, list, 3, &pk));
    assert_int_equal(gp_cold_pack_count(pk), 3);
    assert_int_equal(gp_cold_pack_bytes(pk), 3u * 3 * H * 2);
    assert_int_equal(gp_cold_pack_hidden(pk), H);
    assert_int_equal(gp_cold_pack_dtype(pk), GP_DTYPE_BF16);
    assert_null(gp_cold_pack_neuron(pk, 6));
    assert_null(gp_cold_pack_neuron(pk, -1));
    const gp_layer_weights *lw = &w.layers[1];
    for (int i = 0; i < 3; i++) {
        const int j = list[i];
        const uint16_t *p = gp_cold_pack_neuron(pk, j);
        assert_non_null(p);
        for (int k = 0; k < H; k++) {
            assert_true(gp_bf16_to_f32(p[k]) == wval(&w, lw->w_gate_up, (size_t)j * H + k));
            assert_true(gp_bf16_to_f32(p[H + k]) == wval(&w, lw->w_gate_up, ((size_t)F + j) * H + k));
            assert_true(gp_bf16_to_f32(p[2 * H + k]) == wval(&w, lw->w_down, (size_t)k * F + j));
        }
    }
    gp_cold_pack_destroy(pk);
    const int dup[2] = {3, 3}, bad[1] = {128};
    GP_CHECK_FAIL(gp_cold_pack_create(&w, 0, GP_DTYPE_BF16, dup, 2, &pk), GP_ERR_INVALID_ARG, "list[1] = 3");
    GP_CHECK_FAIL(gp_cold_pack_create(&w, 0, GP_DTYPE_BF16, bad, 1, &pk), GP_ERR_INVALID_ARG, "list[0] = 128");
    GP_CHECK_FAIL(gp_cold_pack_create(&w, 2, GP_DTYPE_BF16, NULL, 0, &pk), GP_ERR_INVALID_ARG, "layer 2");
    GP_CHECK_FAIL(gp_cold_pack_create(&w, 0, GP_DTYPE_F32, NULL, 0, &pk), GP_ERR_INVALID_ARG, "F32");
    gp_host_weights_free(&w);

    /* fp32 host weights are rounded to the pack's dtype */
    weights(GP_DTYPE_F32, 0, 0, &w);
    GP_CHECK_OK(gp_cold_pack_create(&w, 0, GP_DTYPE_F16, NULL, 0, &pk));
    assert_int_equal(gp_cold_pack_count(pk), F);
    const uint16_t *p = gp_cold_pack_neuron(pk, 7);
    for (int k = 0; k < H; k++)
        assert_int_equal(p[2 * H + k], gp_f32_to_f16(((const float *)w.layers[0].w_down)[(size_t)k * F + 7]));
    gp_cold_pack_destroy(pk);
    gp_host_weights_free(&w);
}

static void random_x(gp_dtype dt, int n, uint16_t *x)
{
    for (int i = 0; i < n; i++)
        x[i] = gp_f32_to_half((float)(2.0 * uniform() - 1.0), dt);
}

/* 1 and 4 threads, and several chunk counts for one thread count: the
 * thread count never changes a bit. hidden 72 has a tail after 16-blocks. */
static void test_threads(void **state)
{
    gp_host_weights w;
    weights(GP_DTYPE_BF16, 72, 200, &w);
    const int H = 72, F = 200;
    gp_cold_pack *pk;
    GP_CHECK_OK(gp_cold_pack_create(&w, 0, GP_DTYPE_BF16, NULL, 0, &pk));
    int *list = malloc(F * sizeof *list), n = 0;
    for (int j = 0; j < F; j++)
        if (uniform() < 0.6)
            list[n++] = j;
    uint16_t x[GP_SPARSE_MAX_B * 72];
    float *y1 = malloc(sizeof(float) * GP_SPARSE_MAX_B * H), *y4 = malloc(sizeof(float) * GP_SPARSE_MAX_B * H);
    const int Bs[4] = {1, 3, 8, 16};
    for (int chunks = 1; chunks <= 300; chunks = chunks * 7 + 1) {
        if (chunks > 256)
            chunks = 256;
        gp_cold_ffn_params p = gp_cold_ffn_default_params();
        p.chunks = chunks, p.n_threads = 1;
        gp_cold_ffn *c1, *c4;
        GP_CHECK_OK(gp_cold_ffn_create(&p, &c1));
        p.n_threads = 4;
        GP_CHECK_OK(gp_cold_ffn_create(&p, &c4));
        assert_int_equal(gp_cold_ffn_threads(c1), 1);
        assert_int_equal(gp_cold_ffn_threads(c4), 4);
        for (int bi = 0; bi < 4; bi++) {
            const int B = Bs[bi];
            random_x(GP_DTYPE_BF16, B * H, x);
            gp_cold_ffn_stats s1, s4;
            GP_CHECK_OK(gp_cold_ffn_run(c1, pk, B, x, 0.3f, 0.004f, list, n, y1, &s1));
            GP_CHECK_OK(gp_cold_ffn_run(c4, pk, B, x, 0.3f, 0.004f, list, n, y4, &s4));
            assert_memory_equal(y1, y4, sizeof(float) * B * H);
            assert_int_equal(s1.active, s4.active);
            assert_true(s1.active > 0 && s1.active <= n);
        }
        gp_cold_ffn_destroy(c1);
        gp_cold_ffn_destroy(c4);
        if (chunks == 256)
            break;
    }
    free(list), free(y1), free(y4);
    gp_cold_pack_destroy(pk);
    gp_host_weights_free(&w);
}

/* ---------------------------------------------------------------- reference */

typedef struct capture {
    int layer;
    float *x;   /* [B][hidden]: the gate/up input of layer, before masking */
    float *act; /* [B][ffn]: the down input */
} capture;

static void on_capture(void *ctx, int layer, int proj, int rows, int width, const float *x)
{
    capture *c = ctx;
    if (layer != c->layer)
        return;
    if (proj == GP_SPARSE_GATE_UP)
        memcpy(c->x, x, sizeof(float) * rows * width);
    if (proj == GP_SPARSE_DOWN)
        memcpy(c->act, x, sizeof(float) * rows * width);
}

/* The reference's FFN output of layer for B rows (decode step at position
 * 0 of seqs 0..B-1): the residual after the FFN stage minus before it. Its
 * gate/up input and down input land in cap. */
static void ref_ffn(gp_cpu_model *m, gp_cpu_worker *wk, int layer, int B, capture *cap, float *out, float *resid)
{
    const gp_config *c = gp_cpu_model_config(m);
    int ids[GP_SPARSE_MAX_B];
    int32_t tok[GP_SPARSE_MAX_B];
    for (int b = 0; b < B; b++)
        ids[b] = b, tok[b] = (int32_t)(17 + 29 * b) % c->vocab, gp_cpu_reset_seq(m, b);
    GP_CHECK_OK(gp_cpu_step_begin(m, B, ids, tok));
    gp_stage_io io = {.b0 = 0, .nb = B};
    GP_CHECK_OK(gp_cpu_resid_view(m, 0, B, &io.resid));
    for (int l = 0; l <= layer; l++) {
        io.layer = l;
        GP_CHECK_OK(gp_cpu_stage(m, wk, GP_STAGE_ATTN, &io));
        if (l == layer)
            for (int b = 0; b < B; b++)
                memcpy(resid + (size_t)b * c->hidden, (float *)io.resid.data + (size_t)b * io.resid.row_stride,
                       sizeof(float) * c->hidden);
        cap->layer = layer;
        GP_CHECK_OK(gp_cpu_stage(m, wk, GP_STAGE_FFN, &io));
    }
    for (int b = 0; b < B; b++)
        for (int i = 0; i < c->hidden; i++) {
            const size_t e = (size_t)b * c->hidden + i;
            out[e] = ((float *)io.resid.data)[(size_t)b * io.resid.row_stride + i] - resid[e];
        }
    gp_cpu_step_abort(m);
}

/* Median |v| of n values, the threshold that masks about half. */
static float median_abs(const float *v, int n)
{
    float *a = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++)
        a[i] = fabsf(v[i]);
    float t = gp_median_f(a, n);
    free(a);
    return t;
}

/* For each dtype and B in {1, 5, 16}, layer 1 of the tiny preset:
 *  - masked: thresholds at the median magnitudes of gate/up's and down's
 *    inputs; the hot part (a random ~40% of neurons) and the cold part (the
 *    rest), each a gp_cold_ffn_run over its list of one full pack, summed,
 *    against the reference's FFN stage with those thresholds;
 *  - dense: all thresholds 0, one call over every neuron, against the
 *    reference's FFN stage without masking.
 * The gate/up sums are formed in the reference's order, so every mask
 * agrees (the active count matches the reference's down inputs); what
 * differs is the order of the down sum and the residual's rounding. Bound
 * per element: 2 F 2^-24 sum_j |a_j down_ij| (fp32 sums of F terms in two
 * orders) + 2 ulp of the residual (the reference's output is read back as
 * a difference of two residuals). */
static void test_reference(void **state)
{
    const gp_dtype dts[2] = {GP_DTYPE_BF16, GP_DTYPE_F16};
    double worst = 0.0;
    for (int di = 0; di < 2; di++) {
        const gp_dtype dt = dts[di];
        gp_host_weights w;
        weights(dt, 0, 0, &w);
        const gp_config *c = &w.cfg;
        const int H = c->hidden, F = c->ffn, L = c->n_layers, layer = 1, MB = GP_SPARSE_MAX_B;
        gp_cpu_model *m;
        GP_CHECK_OK(gp_cpu_model_create(&w, MB, 16, 16, &m));
        gp_cpu_model_set_act_dtype(m, dt);
        gp_cpu_worker *wk;
        GP_CHECK_OK(gp_cpu_worker_create(m, 2, &wk));
        capture cap = {.x = malloc(sizeof(float) * MB * H), .act = malloc(sizeof(float) * MB * F)};
        gp_cpu_model_set_capture(m, on_capture, &cap);
        float *ref = malloc(sizeof(float) * MB * H), *resid = malloc(sizeof(float) * MB * H);
        float *yh = malloc(sizeof(float) * MB * H), *yc = malloc(sizeof(float) * MB * H);
        uint16_t *x = malloc(sizeof(uint16_t) * MB * H);
        gp_cold_pack *pk;
        GP_CHECK_OK(gp_cold_pack_create(&w, layer, dt, NULL, 0, &pk));
        gp_cold_ffn_params p = gp_cold_ffn_default_params();
        p.n_threads = 3;
        gp_cold_ffn *cf;
        GP_CHECK_OK(gp_cold_ffn_create(&p, &cf));
        int *hot = malloc(sizeof(int) * F), *cold = malloc(sizeof(int) * F), *all = malloc(sizeof(int) * F);
        uint8_t *fh = malloc((size_t)F), *fc = malloc((size_t)F);
        int nh = 0, nc = 0;
        for (int j = 0; j < F; j++) {
            all[j] = j;
            if (uniform() < 0.4)
                hot[nh++] = j;
            else
                cold[nc++] = j;
        }
        const int Bs[3] = {1, 5, 16};
        for (int bi = 0; bi < 3; bi++) {
            const int B = Bs[bi];
            for (int masked = 0; masked < 2; masked++) {
                float *t = calloc((size_t)L * NPROJ, sizeof *t);
                if (masked) {
                    /* thresholds from a dense pass's inputs */
                    gp_cpu_model_set_sparsity(m, NULL);
                    ref_ffn(m, wk, layer, B, &cap, ref, resid);
                    t[layer * NPROJ + GP_SPARSE_GATE_UP] = median_abs(cap.x, B * H);
                    t[layer * NPROJ + GP_SPARSE_DOWN] = median_abs(cap.act, B * F);
                    gp_cpu_model_set_sparsity(m, t);
                } else {
                    gp_cpu_model_set_sparsity(m, NULL);
                }
                const float tg = t[layer * NPROJ + GP_SPARSE_GATE_UP], td = t[layer * NPROJ + GP_SPARSE_DOWN];
                ref_ffn(m, wk, layer, B, &cap, ref, resid);
                for (int e = 0; e < B * H; e++) /* the reference rounded x to dt: exact */
                    x[e] = gp_f32_to_half(cap.x[e], dt);
                gp_cold_ffn_stats sh, sc;
                if (masked) {
                    memset(fh, 0xee, (size_t)F), memset(fc, 0xee, (size_t)F); /* poisoned: each flag written */
                    GP_CHECK_OK(gp_cold_ffn_run_ex(cf, pk, B, x, tg, td, hot, nh, yh, fh, &sh));
                    GP_CHECK_OK(gp_cold_ffn_run_ex(cf, pk, B, x, tg, td, cold, nc, yc, fc, &sc));
                    /* each listed neuron's flag is the reference's: active in some row */
                    int flagged = 0;
                    for (int part = 0; part < 2; part++)
                        for (int i = 0; i < (part ? nc : nh); i++) {
                            const int j = part ? cold[i] : hot[i];
                            const uint8_t f = part ? fc[i] : fh[i];
                            int any = 0;
                            for (int b = 0; b < B; b++)
                                any |= fabsf(cap.act[(size_t)b * F + j]) > td;
                            if (f != any)
                                fail_msg("%s B %d: neuron %d active flag %d, reference %d", gp_dtype_name(dt), B,
                                         j, f, any);
                            flagged += f;
                        }
                    assert_int_equal(flagged, sh.active + sc.active);
                } else {
                    memset(yh, 0, sizeof(float) * B * H);
                    memset(&sh, 0, sizeof sh);
                    GP_CHECK_OK(gp_cold_ffn_run(cf, pk, B, x, 0.0f, 0.0f, all, F, yc, &sc));
                }
                /* the masks agree with the reference's: the same neurons are active */
                int ref_active = 0;
                for (int j = 0; j < F; j++) {
                    int any = 0;
                    for (int b = 0; b < B; b++)
                        any |= fabsf(cap.act[(size_t)b * F + j]) > td;
                    ref_active += any;
                }
                assert_int_equal(sh.active + sc.active, ref_active);
                for (int b = 0; b < B; b++)
                    for (int i = 0; i < H; i++) {
                        double s = 0.0; /* sum_j |a_j down_ij| over the reference's active inputs */
                        for (int j = 0; j < F; j++) {
                            const float a = cap.act[(size_t)b * F + j];
                            if (fabsf(a) > td)
                                s += fabs((double)a * wval(&w, w.layers[layer].w_down, (size_t)i * F + j));
                        }
                        const size_t e = (size_t)b * H + i;
                        const double r = fabs(resid[e]) + fabs(resid[e] + ref[e]);
                        const double bound = 2.0 * F * ldexp(s, -24) + 2.0 * ldexp(r, -23);
                        const double err = fabs((double)yh[e] + yc[e] - ref[e]);
                        if (err > bound)
                            fail_msg("%s B %d %s: y[%d][%d] %.9g + %.9g, reference %.9g, error %.3g > bound %.3g",
                                     gp_dtype_name(dt), B, masked ? "masked" : "dense", b, i, yh[e], yc[e],
                                     ref[e], err, bound);
                        worst = fmax(worst, err / bound);
                    }
                free(t);
            }
        }
        gp_cold_ffn_destroy(cf);
        gp_cold_pack_destroy(pk);
        gp_cpu_worker_destroy(wk);
        gp_cpu_model_destroy(m);
        gp_host_weights_free(&w);
        free(cap.x), free(cap.act), free(ref), free(resid), free(yh), free(yc), free(x);
        free(hot), free(cold), free(all), free(fh), free(fc);
    }
    print_message("reference: worst error / bound %.3f\n", worst);
}

/* Bytes, empty lists, refusals. */
static void test_stats_and_args(void **state)
{
    gp_host_weights w;
    weights(GP_DTYPE_BF16, 0, 0, &w);
    const int H = w.cfg.hidden, F = w.cfg.ffn;
    gp_cold_pack *pk, *part;
    GP_CHECK_OK(gp_cold_pack_create(&w, 0, GP_DTYPE_BF16, NULL, 0, &pk));
    const int some[2] = {1, 2};
    GP_CHECK_OK(gp_cold_pack_create(&w, 0, GP_DTYPE_BF16, some, 2, &part));
    gp_cold_ffn_params p = gp_cold_ffn_default_params();
    assert_int_equal(p.n_threads, 0);
    assert_int_equal(p.chunks, 48);
    gp_cold_ffn *c;
    GP_CHECK_OK(gp_cold_ffn_create(&p, &c));
    assert_true(gp_cold_ffn_threads(c) >= 1 && gp_cold_ffn_threads(c) <= 16);
    uint16_t x[2 * 64];
    random_x(GP_DTYPE_BF16, 2 * H, x);
    float y[2 * 64];
    int list[128];
    for (int j = 0; j < F; j++)
        list[j] = j;
    gp_cold_ffn_stats s;
    GP_CHECK_OK(gp_cold_ffn_run(c, pk, 2, x, 0.0f, 0.0f, list, F, y, &s));
    assert_int_equal(s.active, F); /* random weights: no SwiGLU output is exactly 0 */
    assert_int_equal(s.weight_bytes, (uint64_t)F * 3 * H * 2);
    assert_int_equal(s.bytes, s.weight_bytes + 2u * H * 2);
    GP_CHECK_OK(gp_cold_ffn_run(c, pk, 2, x, 0.0f, 1e30f, list, F, y, &s)); /* nothing passes */
    assert_int_equal(s.active, 0);
    assert_int_equal(s.weight_bytes, (uint64_t)F * 2 * H * 2);
    for (int e = 0; e < 2 * H; e++)
        assert_true(y[e] == 0.0f);
    for (int e = 0; e < 2 * H; e++)
        y[e] = 1.0f;
    GP_CHECK_OK(gp_cold_ffn_run(c, pk, 2, x, 0.0f, 0.0f, NULL, 0, y, NULL)); /* empty list: zeros */
    for (int e = 0; e < 2 * H; e++)
        assert_true(y[e] == 0.0f);
    GP_CHECK_FAIL(gp_cold_ffn_run(c, pk, 0, x, 0.0f, 0.0f, list, F, y, NULL), GP_ERR_INVALID_ARG, "B 0");
    GP_CHECK_FAIL(gp_cold_ffn_run(c, pk, 17, x, 0.0f, 0.0f, list, F, y, NULL), GP_ERR_INVALID_ARG, "B 17");
    GP_CHECK_FAIL(gp_cold_ffn_run(c, pk, 1, x, -1.0f, 0.0f, list, F, y, NULL), GP_ERR_INVALID_ARG, "gate_up -1");
    GP_CHECK_FAIL(gp_cold_ffn_run(c, pk, 1, x, 0.0f, NAN, list, F, y, NULL), GP_ERR_INVALID_ARG, "down nan");
    GP_CHECK_FAIL(gp_cold_ffn_run(c, part, 1, x, 0.0f, 0.0f, list, 3, y, NULL), GP_ERR_INVALID_ARG,
                  "neurons[0] = 0 is not in the pack");
    GP_CHECK_FAIL(gp_cold_ffn_run(c, pk, 1, x, 0.0f, 0.0f, NULL, 3, y, NULL), GP_ERR_INVALID_ARG, "neurons");
    gp_cold_ffn *bad;
    p.n_threads = 17;
    GP_CHECK_FAIL(gp_cold_ffn_create(&p, &bad), GP_ERR_INVALID_ARG, "n_threads 17");
    p.n_threads = 1, p.chunks = 0;
    GP_CHECK_FAIL(gp_cold_ffn_create(&p, &bad), GP_ERR_INVALID_ARG, "chunks 0 (allowed 1..256)");
    gp_cold_ffn_destroy(c);
    gp_cold_pack_destroy(pk);
    gp_cold_pack_destroy(part);
    gp_host_weights_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_stats_and_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
