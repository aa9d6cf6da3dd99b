/* The sparsity calibration file: a round trip keeps every value, each
 * refusal of the loader names what is wrong, and a calibration is checked
 * against the model it is used with. */
#include "gp_test.h"

#include <jansson.h>
#include <math.h>

#include "gp_sparse.h"

static char g_dir[256];

static int setup(void **state)
{
    return gp_test_tmpdir_make(g_dir, sizeof g_dir, "gp_sparsity_file");
}

static int teardown(void **state)
{
    return gp_test_tmpdir_remove(g_dir);
}

/* A calibration of the tiny preset with distinct values everywhere;
 * with_extra: zeros and freq too. */
static void make_calibration(gp_sparsity *s, bool with_extra)
{
    gp_config cfg;
    GP_CHECK_OK(gp_config_preset("tiny", &cfg));
    GP_CHECK_OK(gp_sparsity_thresholds_zero(&cfg, s));
    s->target = 0.35;
    s->tokens = 512;
    snprintf(s->source, sizeof s->source, "random ids, seed 7");
    for (int i = 0; i < s->n_layers * GP_SPARSE_PROJ_COUNT; i++)
        s->thresholds[i] = 0.1f * (float)(i + 1) / 3.0f;
    s->thresholds[1] = 1e-30f; /* tiny and large values keep their bits too */
    s->thresholds[2] = 3.0e38f;
    if (with_extra) {
        snprintf(s->identity.fingerprint, sizeof s->identity.fingerprint, "0123456789abcdef");
        snprintf(s->identity.summary, sizeof s->identity.summary, "preset tiny, seed 7, bf16 synthetic weights");
        s->zeros = malloc((size_t)s->n_layers * GP_SPARSE_PROJ_COUNT * sizeof *s->zeros);
        s->freq = malloc((size_t)s->n_layers * s->ffn * sizeof *s->freq);
        for (int i = 0; i < s->n_layers * GP_SPARSE_PROJ_COUNT; i++)
            s->zeros[i] = 0.35f + 0.001f * (float)i;
        for (int i = 0; i < s->n_layers * s->ffn; i++)
            s->freq[i] = (float)i / (float)(s->n_layers * s->ffn);
        s->freq[0] = 0.0f;
        s->freq[1] = 1.0f;
    }
}

static void path_of(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", g_dir, name);
}

static void expect_same(const gp_sparsity *a, const gp_sparsity *b)
{
    assert_string_equal(a->model, b->model);
    assert_string_equal(a->source, b->source);
    assert_int_equal(a->n_layers, b->n_layers);
    assert_int_equal(a->hidden, b->hidden);
    assert_int_equal(a->ffn, b->ffn);
    assert_int_equal(a->q_dim, b->q_dim);
    assert_true(a->target == b->target);
    assert_int_equal(a->tokens, b->tokens);
    assert_string_equal(a->identity.fingerprint, b->identity.fingerprint);
    assert_string_equal(a->identity.summary, b->identity.summary);
    size_t nlp = (size_t)a->n_layers * GP_SPARSE_PROJ_COUNT;
    assert_memory_equal(a->thresholds, b->thresholds, nlp * sizeof(float));
    assert_true(!a->zeros == !b->zeros && !a->freq == !b->freq);
    if (a->zeros)
        assert_memory_equal(a->zeros, b->zeros, nlp * sizeof(float));
    if (a->freq)
        assert_memory_equal(a->freq, b->freq, (size_t)a->n_layers * a->ffn * sizeof(float));
}

static void test_round_trip(void **state)
{
    for (int extra = 0; extra < 2; extra++) {
        gp_sparsity s, back;
        make_calibration(&s, extra);
        char path[512];
        path_of(path, sizeof path, extra ? "full.json" : "bare.json");
        GP_CHECK_OK(gp_sparsity_save(&s, path));
        GP_CHECK_OK(gp_sparsity_load(path, &back));
        expect_same(&s, &back);
        gp_sparsity_free(&back);
        gp_sparsity_free(&s);
        assert_null(s.thresholds);
    }
    /* the dense-equivalent calibration too */
    gp_config cfg;
    gp_sparsity z, back;
    GP_CHECK_OK(gp_config_preset("llama3.2-1b", &cfg));
    GP_CHECK_OK(gp_sparsity_thresholds_zero(&cfg, &z));
    assert_int_equal(z.q_dim, cfg.n_heads * cfg.head_dim);
    for (int i = 0; i < z.n_layers * GP_SPARSE_PROJ_COUNT; i++)
        assert_true(z.thresholds[i] == 0.0f);
    char path[512];
    path_of(path, sizeof path, "zero.json");
    GP_CHECK_OK(gp_sparsity_save(&z, path));
    GP_CHECK_OK(gp_sparsity_load(path, &back));
    expect_same(&z, &back);
    GP_CHECK_OK(gp_sparsity_check(&back, &cfg));
    gp_sparsity_free(&back);
    gp_sparsity_free(&z);
}

static void test_proj_names(void **state)
{
    assert_string_equal(gp_sparse_proj_name(GP_SPARSE_QKV), "qkv");
    assert_string_equal(gp_sparse_proj_name(GP_SPARSE_O), "o");
    assert_string_equal(gp_sparse_proj_name(GP_SPARSE_GATE_UP), "gate_up");
    assert_string_equal(gp_sparse_proj_name(GP_SPARSE_DOWN), "down");
    assert_string_equal(gp_sparse_proj_name(GP_SPARSE_PROJ_COUNT), "?");
}

/* save refuses what load would refuse, naming it */
static void test_save_refuses(void **state)
{
    char path[512];
    path_of(path, sizeof path, "bad.json");
    gp_sparsity s;
    make_calibration(&s, true);
    s.thresholds[5] = -1.0f;
    GP_CHECK_FAIL(gp_sparsity_save(&s, path), GP_ERR_INVALID_ARG, "layer 1 threshold o = -1");
    s.thresholds[5] = NAN;
    GP_CHECK_FAIL(gp_sparsity_save(&s, path), GP_ERR_INVALID_ARG, "allowed finite and >= 0");
    s.thresholds[5] = 0.5f;
    s.target = 1.0;
    GP_CHECK_FAIL(gp_sparsity_save(&s, path), GP_ERR_INVALID_ARG, "target 1, allowed [0, 1)");
    s.target = 0.5;
    s.freq[130] = 1.5f;
    GP_CHECK_FAIL(gp_sparsity_save(&s, path), GP_ERR_INVALID_ARG, "layer 1 freq[2] = 1.5");
    s.freq[130] = 0.5f;
    s.zeros[0] = -0.1f;
    GP_CHECK_FAIL(gp_sparsity_save(&s, path), GP_ERR_INVALID_ARG, "layer 0 zeros qkv");
    s.zeros[0] = 0.1f;
    GP_CHECK_FAIL(gp_sparsity_save(&s, "/nonexistent-gp-dir/s.json"), GP_ERR_IO, "/nonexistent-gp-dir/s.json");
    gp_sparsity_free(&s);
}

/* ------------------------------------------------------------ loader refusals */

/* The document of a valid calibration with zeros and freq, to break. */
static json_t *good_doc(void)
{
    gp_sparsity s;
    make_calibration(&s, true);
    char path[512];
    path_of(path, sizeof path, "good.json");
    GP_CHECK_OK(gp_sparsity_save(&s, path));
    gp_sparsity_free(&s);
    json_error_t e;
    json_t *d = json_load_file(path, 0, &e);
    assert_non_null(d);
    return d;
}

static json_t *layer(json_t *d, int l)
{
    return json_array_get(json_object_get(d, "layers"), (size_t)l);
}

/* Writes d (taken) or raw text and expects the loader to refuse it with
 * GP_ERR_FORMAT and needle in the message, the output left empty. */
static void expect_refused(json_t *d, const char *raw, const char *needle)
{
    char path[512];
    path_of(path, sizeof path, "broken.json");
    if (d) {
        assert_int_equal(json_dump_file(d, path, 0), 0);
        json_decref(d);
    } else {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(raw, f);
        fclose(f);
    }
    gp_sparsity s;
    GP_CHECK_FAIL(gp_sparsity_load(path, &s), GP_ERR_FORMAT, needle);
    assert_null(s.thresholds);
    if (!strstr(gp_last_error(), path))
        fail_msg("message '%s' does not name the file", gp_last_error());
}

static void test_load_refusals(void **state)
{
    json_t *d;
    expect_refused(NULL, "{\"format\": ", "invalid JSON");
    expect_refused(NULL, "not json", "invalid JSON");
    expect_refused(NULL, "[1, 2]", "the top level must be a JSON object");
    expect_refused(NULL, "{\"format\": \"greenpipe-sparsity\", \"format\": \"x\"}", "duplicate");
    d = good_doc(), json_object_set_new(d, "format", json_string("gguf"));
    expect_refused(d, NULL, "\"format\" is 'gguf'; expected \"greenpipe-sparsity\"");
    d = good_doc(), json_object_del(d, "format");
    expect_refused(d, NULL, "\"format\" is missing");
    d = good_doc(), json_object_set_new(d, "identity", json_string("tiny"));
    expect_refused(d, NULL, "key \"identity\" must be an object");
    d = good_doc(), json_object_del(json_object_get(d, "identity"), "summary");
    expect_refused(d, NULL, "identity: key \"summary\" is missing");
    d = good_doc(), json_object_set_new(json_object_get(d, "identity"), "fingerprint", json_string("0123456789ABCDEF"));
    expect_refused(d, NULL, "\"fingerprint\" '0123456789ABCDEF' is not a fingerprint");
    d = good_doc(), json_object_set_new(d, "version", json_integer(2));
    expect_refused(d, NULL, "version 2; this greenpipe reads version 1");
    d = good_doc(), json_object_set_new(d, "version", json_string("1"));
    expect_refused(d, NULL, "key \"version\" must be an integer");
    d = good_doc(), json_object_del(d, "model");
    expect_refused(d, NULL, "key \"model\" is missing (a string)");
    d = good_doc(), json_object_set_new(d, "model", json_integer(3));
    expect_refused(d, NULL, "key \"model\" must be a string");
    d = good_doc(), json_object_del(d, "shape");
    expect_refused(d, NULL, "key \"shape\" must be an object");
    d = good_doc(), json_object_set_new(json_object_get(d, "shape"), "hidden", json_integer(0));
    expect_refused(d, NULL, "shape: key \"hidden\" = 0, allowed 1..");
    d = good_doc(), json_object_del(json_object_get(d, "shape"), "q_dim");
    expect_refused(d, NULL, "shape: key \"q_dim\" is missing");
    d = good_doc(), json_object_set_new(d, "target", json_real(1.0));
    expect_refused(d, NULL, "\"target\" = 1; allowed [0, 1)");
    d = good_doc(), json_object_set_new(d, "target", json_real(-0.25));
    expect_refused(d, NULL, "\"target\" = -0.25; allowed [0, 1)");
    d = good_doc(), json_object_set_new(d, "target", json_string("0.5"));
    expect_refused(d, NULL, "key \"target\" must be a number");
    d = good_doc(), json_object_set_new(d, "tokens", json_integer(-1));
    expect_refused(d, NULL, "key \"tokens\" = -1, allowed 0..");
    d = good_doc(), json_object_set_new(d, "tokens", json_real(1.5));
    expect_refused(d, NULL, "key \"tokens\" must be an integer");
    d = good_doc(), json_object_del(d, "layers");
    expect_refused(d, NULL, "key \"layers\" must be an array of n_layers = 2 objects (missing)");
    d = good_doc(), json_array_remove(json_object_get(d, "layers"), 1);
    expect_refused(d, NULL, "\"layers\" holds 1 layers, shape.n_layers is 2");
    d = good_doc(), json_array_set_new(json_object_get(d, "layers"), 0, json_integer(1));
    expect_refused(d, NULL, "layers[0] must be an object");
    d = good_doc(), json_object_del(layer(d, 1), "down");
    expect_refused(d, NULL, "layer 1 key \"down\" is missing (a number)");
    d = good_doc(), json_object_set_new(layer(d, 0), "o", json_string("small"));
    expect_refused(d, NULL, "layer 0 key \"o\" must be a number");
    d = good_doc(), json_object_set_new(layer(d, 0), "qkv", json_real(-0.5));
    expect_refused(d, NULL, "layer 0 threshold \"qkv\" = -0.5; allowed a finite float >= 0");
    d = good_doc(), json_object_set_new(layer(d, 1), "gate_up", json_real(1e39));
    expect_refused(d, NULL, "layer 1 threshold \"gate_up\" = 1e+39; allowed a finite float >= 0");
    expect_refused(NULL, "{\"format\": \"greenpipe-sparsity\", \"version\": 1, \"target\": NaN}", "invalid JSON");
    d = good_doc(), json_object_set_new(layer(d, 1), "freq", json_pack("[f, f, f]", 0.1, 0.2, 0.3));
    expect_refused(d, NULL, "layer 1 \"freq\" must be an array of ffn = 128 shares; it has 3");
    d = good_doc(), json_object_set_new(layer(d, 0), "freq", json_real(0.5));
    expect_refused(d, NULL, "layer 0 \"freq\" must be an array of ffn = 128 shares");
    d = good_doc(), json_array_set_new(json_object_get(layer(d, 1), "freq"), 2, json_real(1.5));
    expect_refused(d, NULL, "layer 1 freq[2] is outside [0, 1]");
    d = good_doc(), json_array_set_new(json_object_get(layer(d, 1), "freq"), 5, json_real(-0.01));
    expect_refused(d, NULL, "layer 1 freq[5] is outside [0, 1]");
    d = good_doc(), json_array_set_new(json_object_get(layer(d, 0), "freq"), 7, json_string("x"));
    expect_refused(d, NULL, "layer 0 freq[7] is not a number");
    d = good_doc(), json_object_del(layer(d, 0), "freq");
    expect_refused(d, NULL, "layer 1 has \"freq\" and layer 0 does not");
    d = good_doc(), json_object_del(layer(d, 1), "zeros");
    expect_refused(d, NULL, "layer 1 lacks \"zeros\" and layer 0 has it");
    d = good_doc(), json_object_set_new(json_object_get(layer(d, 0), "zeros"), "gate_up", json_real(2.0));
    expect_refused(d, NULL, "layer 0 key \"zeros.gate_up\" = 2 is not a share; allowed [0, 1]");
    d = good_doc(), json_object_del(json_object_get(layer(d, 1), "zeros"), "o");
    expect_refused(d, NULL, "layer 1 key \"zeros.o\" is missing");

    gp_sparsity s;
    GP_CHECK_FAIL(gp_sparsity_load("/nonexistent-gp-dir/s.json", &s), GP_ERR_NOT_FOUND, "/nonexistent-gp-dir/s.json");
}

static void test_check(void **state)
{
    gp_config cfg;
    GP_CHECK_OK(gp_config_preset("tiny", &cfg));
    gp_sparsity s;
    make_calibration(&s, false);
    GP_CHECK_OK(gp_sparsity_check(&s, &cfg));
    /* the name is a folder's: another one of the same shape passes the
     * shape check, and the identity decides */
    gp_config other = cfg;
    snprintf(other.name, sizeof other.name, "tiny-copy");
    GP_CHECK_OK(gp_sparsity_check(&s, &other));
    other = cfg;
    other.n_layers = 3;
    GP_CHECK_FAIL(gp_sparsity_check(&s, &other), GP_ERR_SHAPE, "has n_layers 2, model 'tiny' has 3");
    other = cfg;
    other.ffn = 256;
    GP_CHECK_FAIL(gp_sparsity_check(&s, &other), GP_ERR_SHAPE, "has ffn 128, model 'tiny' has 256");
    other = cfg;
    other.head_dim = 32;
    GP_CHECK_FAIL(gp_sparsity_check(&s, &other), GP_ERR_SHAPE, "has q_dim (n_heads x head_dim) 64, model 'tiny' has 128");
    gp_sparsity_free(&s);
}

/* A calibration is accepted on the weights it records and refused, naming
 * both identities, on others; one that records none is refused as older. */
static void test_check_identity(void **state)
{
    (void)state;
    gp_model_source src, other;
    GP_CHECK_OK(gp_model_source_resolve("tiny", 0, &src));
    GP_CHECK_OK(gp_model_source_resolve("tiny", 1, &other));
    gp_model_identity id, id2, again;
    GP_CHECK_OK(gp_model_identity_of(&src, &id));
    GP_CHECK_OK(gp_model_identity_of(&src, &again));
    GP_CHECK_OK(gp_model_identity_of(&other, &id2));
    assert_string_equal(id.fingerprint, again.fingerprint);
    assert_string_not_equal(id.fingerprint, id2.fingerprint);
    assert_int_equal(strlen(id.fingerprint), 16);
    assert_non_null(strstr(id.summary, "preset tiny, seed 0"));

    gp_sparsity s;
    make_calibration(&s, false);
    GP_CHECK_FAIL(gp_sparsity_check_identity(&s, &id), GP_ERR_INVALID_ARG,
                  "records no identity of its weights: it predates calibrations identified by the weights' content");
    assert_non_null(strstr(gp_last_error(), "greenpipe calibrate --model DIR|PRESET --sparsity 0.35 --out"));
    s.identity = id;
    GP_CHECK_OK(gp_sparsity_check_identity(&s, &id));
    GP_CHECK_FAIL(gp_sparsity_check_identity(&s, &id2), GP_ERR_INVALID_ARG, "made on other weights");
    assert_non_null(strstr(gp_last_error(), id.fingerprint));
    assert_non_null(strstr(gp_last_error(), id2.fingerprint));
    assert_non_null(strstr(gp_last_error(), "seed 1"));
    /* written and read back, it still decides */
    char path[512];
    path_of(path, sizeof path, "ident.json");
    GP_CHECK_OK(gp_sparsity_save(&s, path));
    gp_sparsity back;
    GP_CHECK_OK(gp_sparsity_load(path, &back));
    GP_CHECK_OK(gp_sparsity_check_identity(&back, &id));
    gp_sparsity_free(&back);
    /* a malformed fingerprint is not saved */
    snprintf(s.identity.fingerprint, sizeof s.identity.fingerprint, "XYZ");
    GP_CHECK_FAIL(gp_sparsity_save(&s, path), GP_ERR_INVALID_ARG, "is not 16 lowercase hex digits");
    gp_sparsity_free(&s);
}

/* The projections' shapes, and densities and bytes from active counts. */
static void test_density(void **state)
{
    (void)state;
    gp_config cfg;
    GP_CHECK_OK(gp_config_preset("llama3-8b", &cfg));
    int N, K;
    gp_sparse_proj_shape(&cfg, GP_SPARSE_QKV, &N, &K);
    assert_int_equal(N, 6144), assert_int_equal(K, 4096);
    gp_sparse_proj_shape(&cfg, GP_SPARSE_O, &N, &K);
    assert_int_equal(N, 4096), assert_int_equal(K, 4096);
    gp_sparse_proj_shape(&cfg, GP_SPARSE_GATE_UP, &N, &K);
    assert_int_equal(N, 28672), assert_int_equal(K, 4096);
    gp_sparse_proj_shape(&cfg, GP_SPARSE_DOWN, &N, &K);
    assert_int_equal(N, 4096), assert_int_equal(K, 14336);
    const int L = cfg.n_layers, P = GP_SPARSE_PROJ_COUNT;
    long *a = calloc((size_t)L * P, sizeof(long));
    double *per = calloc((size_t)L * P, sizeof(double)), mean[GP_SPARSE_PROJ_COUNT], bytes = -1.0;
    assert_non_null(a), assert_non_null(per);
    /* 10 calls: every input of layer 0's down active, half of every other projection's */
    for (int l = 0; l < L; l++)
        for (int p = 0; p < P; p++) {
            gp_sparse_proj_shape(&cfg, (gp_sparse_proj)p, &N, &K);
            a[l * P + p] = 10L * (l == 0 && p == GP_SPARSE_DOWN ? K : K / 2);
        }
    gp_sparse_density(&cfg, a, 10, per, mean, &bytes);
    assert_true(fabs(per[GP_SPARSE_DOWN] - 1.0) < 1e-12);
    assert_true(fabs(per[P + GP_SPARSE_DOWN] - 0.5) < 1e-12);
    assert_true(fabs(mean[GP_SPARSE_QKV] - 0.5) < 1e-12);
    assert_true(fabs(mean[GP_SPARSE_DOWN] - (0.5 + 0.5 / L)) < 1e-12);
    /* half of every layer's projection weights, plus the other half of layer 0's down */
    const double layer = (6144.0 * 4096 + 4096.0 * 4096 + 28672.0 * 4096 + 4096.0 * 14336) * 2.0;
    assert_true(fabs(bytes - (0.5 * layer * L + 0.5 * 4096.0 * 14336 * 2.0)) < 1.0);
    gp_sparse_density(&cfg, a, 0, per, mean, &bytes); /* no calls: nothing read */
    assert_true(bytes == 0.0 && mean[0] == 0.0 && per[0] == 0.0);
    free(a), free(per);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),  cmocka_unit_test(test_proj_names),
        cmocka_unit_test(test_save_refuses), cmocka_unit_test(test_load_refusals),
        cmocka_unit_test(test_check),       cmocka_unit_test(test_check_identity),
        cmocka_unit_test(test_density),
    };
    return cmocka_run_group_tests_name("sparsity file", tests, setup, teardown);
}
