/* Tests of checkpoint directories and model sources: a tiny Llama written to
 * a temporary directory (single file or sharded with an index), loaded into
 * the engine layout, and one test per broken rule. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gp_model.h"
#include "st_builder.h"

/* The tiny shape: q rows = 4*16 = 64, kv rows = 2*16 = 32. */
enum { T_LAYERS = 2, T_HIDDEN = 64, T_HEADS = 4, T_KV = 2, T_HD = 16, T_FFN = 128, T_VOCAB = 97 };
enum { T_Q = T_HEADS * T_HD, T_KVR = T_KV * T_HD };

/* ------------------------------------------------------ checkpoint writer */

typedef struct tck_tensor {
    char name[96];
    int ndim;
    int64_t shape[2];
    const char *dtype;
    int shard;            /* file it is written to */
    bool in_file;         /* false: listed in the index only */
    const char *map_name; /* weight_map value; NULL: the shard's own name; "" : unlisted */
} tck_tensor;

typedef struct tck_ckpt {
    tck_tensor t[64];
    int n;
    bool tied;
} tck_ckpt;

static tck_tensor *tck_add(tck_ckpt *c, const char *name, int ndim, int64_t d0, int64_t d1,
                           const char *dtype, int shard)
{
    assert_true(c->n < 64);
    tck_tensor *t = &c->t[c->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->dtype = dtype;
    t->shard = shard;
    t->in_file = true;
    return t;
}

static tck_tensor *tck_get(tck_ckpt *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->t[i].name, name) == 0)
            return &c->t[i];
    fail_msg("test bug: no tensor %s", name);
    return NULL;
}

static void tck_remove(tck_ckpt *c, const char *name)
{
    tck_tensor *t = tck_get(c, name);
    *t = c->t[--c->n];
}

/* The full tensor set of the tiny model: dtype for all; layer 1 and the
 * final tensors go to shard 1 (used only when the checkpoint is sharded). */
static void tck_default(tck_ckpt *c, bool tied, const char *dtype)
{
    memset(c, 0, sizeof *c);
    c->tied = tied;
    tck_add(c, "model.embed_tokens.weight", 2, T_VOCAB, T_HIDDEN, dtype, 0);
    for (int l = 0; l < T_LAYERS; l++) {
        char n[96];
#define LAYER(suffix, nd, a, b)                                                                    \
    snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                        \
    tck_add(c, n, nd, a, b, dtype, l)
        LAYER("input_layernorm.weight", 1, T_HIDDEN, 0);
        LAYER("self_attn.q_proj.weight", 2, T_Q, T_HIDDEN);
        LAYER("self_attn.k_proj.weight", 2, T_KVR, T_HIDDEN);
        LAYER("self_attn.v_proj.weight", 2, T_KVR, T_HIDDEN);
        LAYER("self_attn.o_proj.weight", 2, T_HIDDEN, T_Q);
        LAYER("post_attention_layernorm.weight", 1, T_HIDDEN, 0);
        LAYER("mlp.gate_proj.weight", 2, T_FFN, T_HIDDEN);
        LAYER("mlp.up_proj.weight", 2, T_FFN, T_HIDDEN);
        LAYER("mlp.down_proj.weight", 2, T_HIDDEN, T_FFN);
#undef LAYER
    }
    tck_add(c, "model.norm.weight", 1, T_HIDDEN, 0, dtype, 1);
    if (!tied)
        tck_add(c, "lm_head.weight", 2, T_VOCAB, T_HIDDEN, dtype, 1);
}

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Element i of a tensor as stored, and the bf16 the engine must hold. The
 * first three elements are fixed values whose bf16 is known by hand. */
static float value_f32(const char *name, size_t i)
{
    static const float fixed[3] = {1.00390625f /* tie, rounds to even: 0x3f80 */,
                                   1.01171875f /* tie, rounds up: 0x3f82 */, -3.0f};
    if (i < 3)
        return fixed[i];
    return (float)((int)(mix(name_hash(name) + i) % 2000001) - 1000000) * 1e-6f;
}
static uint16_t value_f16(const char *name, size_t i)
{
    static const uint16_t fixed[3] = {0x3c00 /* 1.0 */, 0x0001 /* 2^-24 */, 0xc000 /* -2.0 */};
    if (i < 3)
        return fixed[i];
    return (uint16_t)(mix(name_hash(name) + i) & 0xbfff); /* exponent < 31: finite */
}
/* The value element i of name holds in a file of dtype: exactly what the
 * engine must load (every file dtype is exact in float32). */
static float expected_value(const char *name, size_t i, const char *dtype)
{
    if (strcmp(dtype, "F16") == 0)
        return gp_f16_to_f32(value_f16(name, i));
    if (strcmp(dtype, "BF16") == 0)
        return gp_bf16_to_f32(gp_f32_to_bf16(value_f32(name, i)));
    return value_f32(name, i);
}

/* Element i of a host weight tensor of dtype dt, as float. */
static float held_value(const void *p, gp_dtype dt, size_t i)
{
    if (dt == GP_DTYPE_F32)
        return ((const float *)p)[i];
    return gp_half_to_f32(((const uint16_t *)p)[i], dt);
}

static size_t numel(const tck_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

static void add_to_builder(st_builder *b, const tck_tensor *t)
{
    size_t n = numel(t), es = strcmp(t->dtype, "F32") == 0 || strcmp(t->dtype, "I32") == 0 ? 4 : 2;
    uint8_t *data = malloc(n * es);
    assert_non_null(data);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(t->dtype, "F32") == 0) {
            float f = value_f32(t->name, i);
            memcpy(data + 4 * i, &f, 4);
        } else if (strcmp(t->dtype, "I32") == 0) {
            int32_t v = (int32_t)i;
            memcpy(data + 4 * i, &v, 4);
        } else {
            uint16_t h = strcmp(t->dtype, "F16") == 0 ? value_f16(t->name, i)
                                                      : gp_f32_to_bf16(value_f32(t->name, i));
            memcpy(data + 2 * i, &h, 2);
        }
    }
    st_builder_add(b, t->name, t->dtype, t->ndim, t->shape, data, n * es);
    free(data);
}

static void join(char *out, size_t cap, const char *dir, const char *name)
{
    assert_true((size_t)snprintf(out, cap, "%s/%s", dir, name) < cap);
}

static void write_config(const char *dir, bool tied)
{
    char path[512], text[1024];
    join(path, sizeof path, dir, "config.json");
    snprintf(text, sizeof text,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\",\n"
             " \"hidden_act\": \"silu\", \"hidden_size\": %d, \"intermediate_size\": %d,\n"
             " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d,\n"
             " \"num_hidden_layers\": %d, \"vocab_size\": %d, \"rms_norm_eps\": 1e-05,\n"
             " \"rope_theta\": 10000.0, \"max_position_embeddings\": 256,\n"
             " \"tie_word_embeddings\": %s, \"attention_bias\": false, \"mlp_bias\": false,\n"
             " \"torch_dtype\": \"bfloat16\"}\n",
             T_HIDDEN, T_FFN, T_HEADS, T_KV, T_HD, T_LAYERS, T_VOCAB, tied ? "true" : "false");
    assert_int_equal(st_write_text(path, text), 0);
}

static void shard_name(char *out, size_t cap, int shard, int n_shards)
{
    snprintf(out, cap, "model-%05d-of-%05d.safetensors", shard + 1, n_shards);
}

/* n_shards 0: one model.safetensors; otherwise shards and an index. */
static void tck_write(const char *dir, const tck_ckpt *c, int n_shards)
{
    char path[512], name[64];
    write_config(dir, c->tied);
    for (int s = 0; s < (n_shards ? n_shards : 1); s++) {
        st_builder *b = st_builder_new();
        for (int i = 0; i < c->n; i++)
            if (c->t[i].in_file && (n_shards == 0 || c->t[i].shard == s))
                add_to_builder(b, &c->t[i]);
        size_t len;
        uint8_t *buf = st_builder_finish(b, &len);
        if (n_shards)
            shard_name(name, sizeof name, s, n_shards);
        join(path, sizeof path, dir, n_shards ? name : "model.safetensors");
        assert_int_equal(st_write_file(path, buf, len), 0);
        free(buf);
    }
    if (!n_shards)
        return;
    size_t cap = 256 + (size_t)c->n * 256, at = 0;
    char *idx = malloc(cap);
    assert_non_null(idx);
    at += (size_t)snprintf(idx + at, cap - at,
                           "{\"metadata\": {\"total_size\": 0},\n \"weight_map\": {");
    int listed = 0;
    for (int i = 0; i < c->n; i++) {
        const tck_tensor *t = &c->t[i];
        if (t->map_name && !t->map_name[0])
            continue;
        shard_name(name, sizeof name, t->shard, n_shards);
        at += (size_t)snprintf(idx + at, cap - at, "%s\n  \"%s\": \"%s\"", listed++ ? "," : "",
                               t->name, t->map_name ? t->map_name : name);
    }
    snprintf(idx + at, cap - at, "\n }\n}\n");
    join(path, sizeof path, dir, "model.safetensors.index.json");
    assert_int_equal(st_write_text(path, idx), 0);
    free(idx);
}

/* ------------------------------------------------------------ fixtures */

static int make_dir(void **state)
{
    const char *tmp = getenv("TMPDIR");
    char *dir = malloc(512);
    if (!dir)
        return -1;
    snprintf(dir, 512, "%s/gp_ck_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        free(dir);
        return -1;
    }
    *state = dir;
    return 0;
}

static int remove_dir(void **state)
{
    char *dir = *state, path[1024];
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
                unlink(path);
            }
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
    return 0;
}

/* ------------------------------------------------------------ checks */

static void expect_msg(gp_status got, gp_status want, ...)
{
    const char *msg = gp_last_error();
    if (got != want)
        print_error("status %d (%s), wanted %d; message: %s\n", got, gp_status_str(got), want, msg);
    assert_int_equal(got, want);
    va_list ap;
    va_start(ap, want);
    for (const char *frag; (frag = va_arg(ap, const char *));) {
        if (!strstr(msg, frag))
            print_error("message lacks '%s': %s\n", frag, msg);
        assert_non_null(strstr(msg, frag));
    }
    va_end(ap);
}
#define EXPECT_MSG(got, want, ...) expect_msg(got, want, __VA_ARGS__, NULL)

/* Open must succeed; check must fail as stated. */
#define EXPECT_CHECK_FAILS(dir, want, ...)                                                         \
    do {                                                                                           \
        gp_checkpoint *ck_;                                                                        \
        assert_int_equal(gp_checkpoint_open(dir, &ck_), GP_OK);                                    \
        EXPECT_MSG(gp_checkpoint_check(ck_), want, __VA_ARGS__);                                   \
        gp_host_weights w_;                                                                        \
        EXPECT_MSG(gp_checkpoint_load_host(ck_, &w_), want, __VA_ARGS__);                          \
        gp_checkpoint_close(ck_);                                                                  \
    } while (0)

#define EXPECT_OPEN_FAILS(dir, want, ...)                                                          \
    do {                                                                                           \
        gp_checkpoint *ck_ = (gp_checkpoint *)0x1;                                                 \
        EXPECT_MSG(gp_checkpoint_open(dir, &ck_), want, __VA_ARGS__);                              \
        assert_null(ck_);                                                                          \
    } while (0)

/* Where tensor t lives in the engine layout, or NULL if it is not loaded. */
static const void *engine_slot(const gp_host_weights *w, const char *name)
{
    const size_t es = gp_dtype_size(w->dtype);
    if (strcmp(name, "model.embed_tokens.weight") == 0)
        return w->embed;
    if (strcmp(name, "model.norm.weight") == 0)
        return w->final_norm;
    if (strcmp(name, "lm_head.weight") == 0)
        return w->cfg.tied_embeddings ? NULL : w->lm_head;
    int l, off = -1;
    char suffix[64];
    if (sscanf(name, "model.layers.%d.%n", &l, &off) != 1 || off < 0 || l < 0 || l >= T_LAYERS)
        return NULL;
    snprintf(suffix, sizeof suffix, "%s", name + off);
    const gp_layer_weights *L = &w->layers[l];
    if (!strcmp(suffix, "input_layernorm.weight")) return L->attn_norm;
    if (!strcmp(suffix, "self_attn.q_proj.weight")) return L->wqkv;
    if (!strcmp(suffix, "self_attn.k_proj.weight")) return (const char *)L->wqkv + T_Q * T_HIDDEN * es;
    if (!strcmp(suffix, "self_attn.v_proj.weight")) return (const char *)L->wqkv + (T_Q + T_KVR) * T_HIDDEN * es;
    if (!strcmp(suffix, "self_attn.o_proj.weight")) return L->wo;
    if (!strcmp(suffix, "post_attention_layernorm.weight")) return L->ffn_norm;
    if (!strcmp(suffix, "mlp.gate_proj.weight")) return L->w_gate_up;
    if (!strcmp(suffix, "mlp.up_proj.weight")) return (const char *)L->w_gate_up + T_FFN * T_HIDDEN * es;
    if (!strcmp(suffix, "mlp.down_proj.weight")) return L->w_down;
    return NULL;
}

/* Every loaded tensor holds the file's values exactly at its fused place,
 * in the dtype the file's used tensors share (F32 when they differ). */
static void verify_weights(const gp_host_weights *w, const tck_ckpt *c)
{
    int checked = 0;
    const char *common = NULL; /* the dtype of the used tensors, or "F32" when mixed */
    for (int i = 0; i < c->n; i++) {
        const tck_tensor *t = &c->t[i];
        if (!engine_slot(w, t->name))
            continue;
        common = !common || strcmp(common, t->dtype) == 0 ? t->dtype : "F32";
    }
    assert_non_null(common);
    assert_string_equal(gp_dtype_name(w->dtype), common);
    for (int i = 0; i < c->n; i++) {
        const tck_tensor *t = &c->t[i];
        const void *p = engine_slot(w, t->name);
        if (!p)
            continue;
        checked++;
        for (size_t k = 0; k < numel(t); k++) {
            float want = expected_value(t->name, k, t->dtype), got = held_value(p, w->dtype, k);
            if (memcmp(&got, &want, sizeof got) != 0)
                fail_msg("%s[%zu] (%s): engine holds %.9g, want %.9g", t->name, k, t->dtype,
                         (double)got, (double)want);
        }
    }
    assert_int_equal(checked, 3 + 9 * T_LAYERS - (c->tied ? 1 : 0));
}

static void load_and_verify(const char *dir, const tck_ckpt *c)
{
    gp_checkpoint *ck;
    assert_int_equal(gp_checkpoint_open(dir, &ck), GP_OK);
    assert_int_equal(gp_checkpoint_check(ck), GP_OK);
    gp_host_weights w;
    assert_int_equal(gp_checkpoint_load_host(ck, &w), GP_OK);
    gp_checkpoint_close(ck); /* the weights are copies: they outlive the mappings */
    verify_weights(&w, c);
    gp_host_weights_free(&w);
}

/* ------------------------------------------------------------ happy paths */

static void test_single_file_bf16(void **state)
{
    const char *dir = *state;
    tck_ckpt c;
    tck_default(&c, false, "BF16");
    tck_write(dir, &c, 0);

    gp_checkpoint *ck;
    assert_int_equal(gp_checkpoint_open(dir, &ck), GP_OK);
    const gp_config *cfg = gp_checkpoint_config(ck);
    assert_int_equal(cfg->n_layers, T_LAYERS);
    assert_int_equal(cfg->hidden, T_HIDDEN);
    assert_int_equal(cfg->n_kv_heads, T_KV);
    assert_int_equal(cfg->vocab, T_VOCAB);
    assert_false(cfg->tied_embeddings);
    assert_int_equal(gp_checkpoint_tensor_count(ck), 3 + 9 * T_LAYERS);
    for (size_t i = 0; i < gp_checkpoint_tensor_count(ck); i++) {
        const char *file = NULL;
        const gp_st_tensor *t = gp_checkpoint_tensor(ck, i, &file);
        assert_non_null(t);
        assert_non_null(strstr(file, "/model.safetensors"));
        if (i)
            assert_true(strcmp(gp_checkpoint_tensor(ck, i - 1, NULL)->name, t->name) < 0);
    }
    assert_null(gp_checkpoint_tensor(ck, 1000, NULL));
    assert_int_equal(gp_checkpoint_check(ck), GP_OK);
    gp_checkpoint_close(ck);
    load_and_verify(dir, &c);
}

static void test_sharded_f32_f16(void **state)
{
    const char *dir = *state;
    tck_ckpt c;
    tck_default(&c, false, "F32");
    for (int i = 0; i < c.n; i++)
        if (c.t[i].shard == 1)
            c.t[i].dtype = "F16";
    tck_get(&c, "model.layers.1.mlp.up_proj.weight")->dtype = "BF16"; /* dtypes may mix */
    /* HF may save rotary caches: accepted and ignored. */
    tck_add(&c, "model.layers.0.self_attn.rotary_emb.inv_freq", 1, T_HD / 2, 0, "F32", 0);
    tck_write(dir, &c, 2);

    gp_checkpoint *ck;
    assert_int_equal(gp_checkpoint_open(dir, &ck), GP_OK);
    assert_int_equal(gp_checkpoint_tensor_count(ck), 3 + 9 * T_LAYERS + 1);
    for (size_t i = 0; i < gp_checkpoint_tensor_count(ck); i++) {
        const char *file = NULL;
        const gp_st_tensor *t = gp_checkpoint_tensor(ck, i, &file);
        if (i)
            assert_true(strcmp(gp_checkpoint_tensor(ck, i - 1, NULL)->name, t->name) < 0);
        const tck_tensor *want = tck_get(&c, t->name);
        char shard[64];
        shard_name(shard, sizeof shard, want->shard, 2);
        assert_non_null(strstr(file, shard));
        assert_string_equal(gp_dtype_name(t->dtype), want->dtype);
    }
    gp_checkpoint_close(ck);
    load_and_verify(dir, &c);

    /* Hand-checked values: mixed dtypes load as F32, which holds each file
     * value exactly (F32 values bf16 would round, F16 subnormals). */
    gp_host_weights w;
    gp_model_source src;
    assert_int_equal(gp_model_source_resolve(dir, 0, &src), GP_OK);
    assert_int_equal(gp_model_source_load_host(&src, &w), GP_OK);
    assert_int_equal(w.dtype, GP_DTYPE_F32);
    const float *e = w.embed, *fn = w.final_norm;
    assert_true(e[0] == 1.00390625f);   /* F32, a bf16 tie */
    assert_true(e[1] == 1.01171875f);   /* F32, a bf16 tie */
    assert_true(e[2] == -3.0f);         /* F32 */
    assert_true(fn[0] == 1.0f);         /* F16 1.0 */
    assert_true(fn[1] == 0x1p-24f);     /* F16 2^-24, the smallest subnormal */
    assert_true(fn[2] == -2.0f);        /* F16 -2.0 */
    gp_host_weights_free(&w);
}

static void test_tied_embeddings(void **state)
{
    const char *dir = *state;
    tck_ckpt c;
    tck_default(&c, true, "BF16");
    tck_write(dir, &c, 0);
    load_and_verify(dir, &c);
    gp_model_source src;
    gp_host_weights w;
    assert_int_equal(gp_model_source_resolve(dir, 0, &src), GP_OK);
    assert_true(src.cfg.tied_embeddings);
    assert_int_equal(gp_model_source_load_host(&src, &w), GP_OK);
    assert_ptr_equal(w.lm_head, w.embed);
    gp_host_weights_free(&w);

    /* Tied, yet the file also holds an lm_head (of a different dtype even):
     * it is ignored and embed_tokens serves both. */
    tck_add(&c, "lm_head.weight", 2, T_VOCAB, T_HIDDEN, "F32", 0);
    tck_write(dir, &c, 0);
    assert_int_equal(gp_model_source_load_host(&src, &w), GP_OK);
    assert_ptr_equal(w.lm_head, w.embed);
    assert_int_equal(w.dtype, GP_DTYPE_BF16); /* the ignored F32 lm_head does not make it mixed */
    assert_int_equal(((const gp_bf16 *)w.embed)[3],
                     gp_f32_to_bf16(expected_value("model.embed_tokens.weight", 3, "BF16")));
    gp_host_weights_free(&w);
}

/* ------------------------------------------------------------ config mismatches */

static void test_missing_tensor(void **state)
{
    tck_ckpt c;
    tck_default(&c, false, "BF16");
    tck_remove(&c, "model.layers.1.mlp.down_proj.weight");
    tck_write(*state, &c, 0);
    EXPECT_CHECK_FAILS(*state, GP_ERR_NOT_FOUND, "'model.layers.1.mlp.down_proj.weight'", "missing");
}

/* The checker asks the architecture table for names: each tensor the llama
 * entry names, left out, is reported missing under that name; the bias of
 * each projection is refused under its name. */
static void test_checker_uses_table_names(void **state)
{
    const gp_arch *a = gp_arch_find("llama");
    assert_non_null(a);
    tck_ckpt c;
    tck_default(&c, false, "BF16");
    tck_write(*state, &c, 0);
    gp_checkpoint *ck;
    assert_int_equal(gp_checkpoint_open(*state, &ck), GP_OK);
    assert_ptr_equal(gp_checkpoint_config(ck)->arch, a);
    gp_checkpoint_close(ck);
    char name[128], quoted[132];
    for (int t = 0; t < GP_AT_COUNT; t++)
        for (int l = 0; l < (t >= GP_AT_FIRST_LAYER ? T_LAYERS : 1); l++) {
            int layer = t >= GP_AT_FIRST_LAYER ? l : -1;
            assert_true(gp_arch_tensor_name(a, (gp_arch_tensor)t, layer, false, name, sizeof name));
            snprintf(quoted, sizeof quoted, "'%s'", name);
            tck_default(&c, false, "BF16");
            tck_remove(&c, name);
            tck_write(*state, &c, 0);
            EXPECT_CHECK_FAILS(*state, GP_ERR_NOT_FOUND, quoted, "missing");
        }
    static const gp_arch_tensor projs[] = {GP_AT_Q, GP_AT_K, GP_AT_V, GP_AT_O,
                                           GP_AT_GATE, GP_AT_UP, GP_AT_DOWN};
    for (size_t i = 0; i < sizeof projs / sizeof projs[0]; i++) {
        assert_true(gp_arch_tensor_name(a, projs[i], 1, true, name, sizeof name));
        snprintf(quoted, sizeof quoted, "'%s'", name);
        tck_default(&c, false, "BF16");
        tck_add(&c, name, 1, T_HIDDEN, 0, "BF16", 0);
        tck_write(*state, &c, 0);
        EXPECT_CHECK_FAILS(*state, GP_ERR_UNSUPPORTED, quoted, "bias tensors are not supported");
    }
}

static void test_missing_lm_head_untied(void **state)
{
    tck_ckpt c;
    tck_default(&c, false, "BF16");
    tck_remove(&c, "lm_head.weight");
    tck_write(*state, &c, 0);
    EXPECT_CHECK_FAILS(*state, GP_ERR_NOT_FOUND, "'lm_head.weight'", "missing");
}

static void test_wrong_shape(void **state)
{
    tck_ckpt c;
    tck_default(&c, false, "BF16");
    tck_get(&c, "model.layers.0.self_attn.k_proj.weight")->shape[0] = T_Q; /* MHA-sized k */
    tck_write(*state, &c, 0);
    EXPECT_CHECK_FAILS(*state, GP_ERR_SHAPE, "model.safetensors",
                       "'model.layers.0.self_attn.k_proj.weight'", "shape [64, 64]",
                       "expects [32, 64]");

    tck_default(&c, false, "BF16");
    tck_tensor *t = tck_get(&c, "model.layers.1.mlp.down_proj.weight"); /* transposed */
    t->shape[0] = T_FFN;
    t->shape[1] = T_HIDDEN;
    tck_write(*state, &c, 0);
    EXPECT_CHECK_FAILS(*state, GP_ERR_SHAPE, "'model.layers.1.mlp.down_proj.weight'",
                       "[128, 64]", "[64, 128]");

    tck_default(&c, false, "BF16");
    t = tck_get(&c, "model.norm.weight"); /* 2-D where 1-D is wanted */
    t->ndim = 2;
    t->shape[1] = 1;
    tck_write(*state, &c, 0);
    EXPECT_CHECK_FAILS(*state, GP_ERR_SHAPE, "'model.norm.weight'", "[64, 1]", "expects [64]");
}

static void test_extra_tensor(void **state)
{
    tck_ckpt c;
    tck_default(&c, false, "BF16");
    tck_add(&c, "model.layers.2.input_layernorm.weight", 1, T_HIDDEN, 0, "BF16", 0);
    tck_write(*state, &c, 0);
    EXPECT_CHECK_FAILS(*state, GP_ERR_FORMAT, "unexpected tensor",
                       "'model.layers.2.input_layernorm.weight'", "2-layer");

    tck_default(&c, false, "BF16");
    tck_add(&c, "model.layers.01.input_layernorm.weight", 1, T_HIDDEN, 0, "BF16", 0);
    tck_write(*state, &c, 0);
    EXPECT_CHECK_FAILS(*state, GP_ERR_FORMAT, "unexpected tensor",
                       "'model.layers.01.input_layernorm.weight'");

    tck_default(&c, false, "BF16");
    tck_add(&c, "model.layers.0.self_attn.q_proj.bias", 1, T_Q, 0, "BF16", 0);
    tck_write(*state, &c, 0);
    EXPECT_CHECK_FAILS(*state, GP_ERR_UNSUPPORTED, "'model.layers.0.self_attn.q_proj.bias'",
                       "bias tensors are not supported");
}

static void test_unsupported_dtype(void **state)
{
    tck_ckpt c;
    tck_default(&c, false, "BF16");
    tck_get(&c, "model.layers.0.self_attn.q_proj.weight")->dtype = "I32";
    tck_write(*state, &c, 0);
    EXPECT_CHECK_FAILS(*state, GP_ERR_UNSUPPORTED, "'model.layers.0.self_attn.q_proj.weight'",
                       "dtype I32", "F32, F16 or BF16");
}

/* ------------------------------------------------------------ index and files */

static void test_index_missing_shard(void **state)
{
    tck_ckpt c;
    tck_default(&c, false, "BF16");
    tck_tensor *t = tck_get(&c, "model.norm.weight");
    t->in_file = false;
    t->map_name = "model-00003-of-00002.safetensors";
    tck_write(*state, &c, 2);
    EXPECT_OPEN_FAILS(*state, GP_ERR_NOT_FOUND, "model-00003-of-00002.safetensors", "not found");
}

static void test_tensor_in_two_shards(void **state)
{
    tck_ckpt c;
    tck_default(&c, false, "BF16");
    tck_add(&c, "model.norm.weight", 1, T_HIDDEN, 0, "BF16", 0)->map_name = ""; /* copy in shard 0 */
    tck_write(*state, &c, 2);
    EXPECT_OPEN_FAILS(*state, GP_ERR_FORMAT, "'model.norm.weight'", "two shards",
                      "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors");
}

static void test_index_disagrees_with_shards(void **state)
{
    tck_ckpt c;
    tck_default(&c, false, "BF16");
    tck_get(&c, "model.layers.0.mlp.up_proj.weight")->map_name = ""; /* unlisted */
    tck_write(*state, &c, 2);
    EXPECT_OPEN_FAILS(*state, GP_ERR_FORMAT, "'model.layers.0.mlp.up_proj.weight'",
                      "weight_map does not list it");

    tck_default(&c, false, "BF16");
    tck_get(&c, "model.layers.1.mlp.up_proj.weight")->in_file = false; /* listed, absent */
    tck_write(*state, &c, 2);
    EXPECT_OPEN_FAILS(*state, GP_ERR_FORMAT, "'model.layers.1.mlp.up_proj.weight'",
                      "model-00002-of-00002.safetensors", "no such tensor");

    tck_default(&c, false, "BF16");
    tck_get(&c, "model.norm.weight")->map_name = "model-00001-of-00002.safetensors"; /* wrong */
    tck_write(*state, &c, 2);
    EXPECT_OPEN_FAILS(*state, GP_ERR_FORMAT, "'model.norm.weight'", "puts tensor");
}

static void test_bad_shard_names(void **state)
{
    static const char *const bad[] = {"../model.safetensors", "sub/x.safetensors", "/etc/passwd",
                                      "a..b.safetensors"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tck_ckpt c;
        tck_default(&c, false, "BF16");
        tck_get(&c, "model.norm.weight")->map_name = bad[i];
        tck_write(*state, &c, 2);
        EXPECT_OPEN_FAILS(*state, GP_ERR_FORMAT, "'model.norm.weight'", bad[i], "no '/' or '..'");
    }
}

static void test_bad_index_json(void **state)
{
    char path[512];
    write_config(*state, false);
    join(path, sizeof path, *state, "model.safetensors.index.json");
    assert_int_equal(st_write_text(path, "{\"weight_map\": "), 0);
    EXPECT_OPEN_FAILS(*state, GP_ERR_FORMAT, "model.safetensors.index.json", "not valid JSON");
    assert_int_equal(st_write_text(path, "{\"metadata\": {}}"), 0);
    EXPECT_OPEN_FAILS(*state, GP_ERR_FORMAT, "model.safetensors.index.json", "weight_map");
    assert_int_equal(st_write_text(path, "{\"weight_map\": {\"a\": 1}}"), 0);
    EXPECT_OPEN_FAILS(*state, GP_ERR_FORMAT, "'a'", "not a file name");
}

/* ------------------------------------------------------ index in memory */

#define IX_LABEL "dir/model.safetensors.index.json"

static gp_status ix_parse_n(const char *text, size_t len, gp_st_index **ix)
{
    *ix = (gp_st_index *)0x1;
    gp_clear_error();
    return gp_st_index_parse(text, len, IX_LABEL, ix);
}

static gp_status ix_parse(const char *text, gp_st_index **ix)
{
    return ix_parse_n(text, strlen(text), ix);
}

/* The parse must fail with want; the message names the file and each fragment. */
#define EXPECT_IX_FAILS(text, want, ...)                                                           \
    do {                                                                                           \
        gp_st_index *ix_;                                                                          \
        EXPECT_MSG(ix_parse(text, &ix_), want, IX_LABEL, __VA_ARGS__);                             \
        assert_null(ix_);                                                                          \
    } while (0)

static void test_index_parse(void **state)
{
    const char *j = "{\"metadata\": {\"total_size\": 40},\n \"weight_map\": {\n"
                    "  \"b.weight\": \"model-00002-of-00002.safetensors\",\n"
                    "  \"a.weight\": \"model-00001-of-00002.safetensors\",\n"
                    "  \"c.weight\": \"model-00002-of-00002.safetensors\"}}";
    gp_st_index *ix;
    assert_int_equal(ix_parse(j, &ix), GP_OK);
    assert_int_equal(gp_st_index_tensor_count(ix), 3);
    assert_int_equal(gp_st_index_shard_count(ix), 2);
    assert_string_equal(gp_st_index_shard(ix, 0), "model-00001-of-00002.safetensors");
    assert_string_equal(gp_st_index_shard(ix, 1), "model-00002-of-00002.safetensors");
    assert_null(gp_st_index_shard(ix, 2));
    const char *shard = NULL;
    assert_string_equal(gp_st_index_tensor(ix, 0, &shard), "a.weight");
    assert_string_equal(shard, "model-00001-of-00002.safetensors");
    assert_string_equal(gp_st_index_tensor(ix, 2, NULL), "c.weight");
    assert_null(gp_st_index_tensor(ix, 3, &shard));
    assert_string_equal(gp_st_index_lookup(ix, "b.weight"), "model-00002-of-00002.safetensors");
    assert_null(gp_st_index_lookup(ix, "d.weight"));
    assert_null(gp_st_index_lookup(ix, NULL));
    gp_st_index_free(ix);
    /* metadata is optional and may be null. */
    assert_int_equal(ix_parse("{\"metadata\": null, \"weight_map\": {\"\": \"x\"}}", &ix), GP_OK);
    assert_string_equal(gp_st_index_lookup(ix, ""), "x");
    gp_st_index_free(ix);
    gp_st_index_free(NULL);
    assert_int_equal(gp_st_index_tensor_count(NULL), 0);
    assert_int_equal(gp_st_index_shard_count(NULL), 0);
    assert_null(gp_st_index_lookup(NULL, "a"));
    /* The shipped sharded test model's index. */
    char path[512];
    snprintf(path, sizeof path, "%s/small-gqa/model.safetensors.index.json", GP_TEST_DATA_DIR);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(n > 0 && n < sizeof buf);
    assert_int_equal(ix_parse_n(buf, n, &ix), GP_OK);
    assert_int_equal(gp_st_index_shard_count(ix), 3);
    assert_string_equal(gp_st_index_lookup(ix, "lm_head.weight"), "model-00003-of-00003.safetensors");
    gp_st_index_free(ix);
}

static void test_index_hostile(void **state)
{
    gp_st_index *ix;
    EXPECT_IX_FAILS("", GP_ERR_FORMAT, "not valid JSON");
    EXPECT_IX_FAILS("{\"weight_map\": {\"a\": \"x\"}", GP_ERR_FORMAT, "not valid JSON", "line 1");
    EXPECT_IX_FAILS("[{\"weight_map\": {}}]", GP_ERR_FORMAT, "top level", "object");
    EXPECT_IX_FAILS("\"weight_map\"", GP_ERR_FORMAT, "not valid JSON");
    EXPECT_IX_FAILS("{}", GP_ERR_FORMAT, "missing 'weight_map'");
    EXPECT_IX_FAILS("{\"weight_map\": null}", GP_ERR_FORMAT, "missing 'weight_map'");
    EXPECT_IX_FAILS("{\"weight_map\": [\"a\", \"x\"]}", GP_ERR_FORMAT, "missing 'weight_map'");
    EXPECT_IX_FAILS("{\"weight_map\": {}}", GP_ERR_FORMAT, "'weight_map' is empty");
    EXPECT_IX_FAILS("{\"metadata\": 3, \"weight_map\": {\"a\": \"x\"}}", GP_ERR_FORMAT,
                    "'metadata' must be an object");
    EXPECT_IX_FAILS("{\"weight_map\": {\"a\": null}}", GP_ERR_FORMAT, "'a'", "not a file name");
    EXPECT_IX_FAILS("{\"weight_map\": {\"a\": [\"x\"]}}", GP_ERR_FORMAT, "'a'", "not a file name");
    static const char *const bad[] = { "", "..", "../x", "a/b", "/etc/passwd", "a..b", "./x" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char j[128];
        snprintf(j, sizeof j, "{\"weight_map\": {\"t\": \"ok.safetensors\", \"a\": \"%s\"}}", bad[i]);
        EXPECT_IX_FAILS(j, GP_ERR_FORMAT, "'a'", "no '/' or '..'");
    }
    /* Escapes cannot smuggle a separator or a NUL past the check. */
    EXPECT_IX_FAILS("{\"weight_map\": {\"a\": \"..\\u002fx\"}}", GP_ERR_FORMAT, "no '/' or '..'");
    EXPECT_IX_FAILS("{\"weight_map\": {\"a\": \"x\\u0000/../y\"}}", GP_ERR_FORMAT, "not valid JSON");
    /* Duplicate tensor names. */
    EXPECT_IX_FAILS("{\"weight_map\": {\"a\": \"x\", \"a\": \"y\"}}", GP_ERR_FORMAT,
                    "not valid JSON", "duplicate");
    /* A NUL byte after a number, which jansson alone would skip. */
    const char nul[] = "{\"metadata\": {\"total_size\": 4\0}, \"weight_map\": {\"a\": \"x\"}}";
    EXPECT_MSG(ix_parse_n(nul, sizeof nul - 1, &ix), GP_ERR_FORMAT, "NUL byte at offset 29");
    assert_null(ix);
    /* Cut short by the length, and deep nesting. */
    const char *ok = "{\"weight_map\": {\"a\": \"x\"}}";
    assert_int_equal(ix_parse_n(ok, strlen(ok) - 1, &ix), GP_ERR_FORMAT);
    assert_null(ix);
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 64);
    assert_non_null(deep);
    int at = sprintf(deep, "{\"metadata\": ");
    memset(deep + at, '[', depth);
    memset(deep + at + depth, ']', depth);
    strcpy(deep + at + 2 * depth, ", \"weight_map\": {\"a\": \"x\"}}");
    EXPECT_IX_FAILS(deep, GP_ERR_FORMAT, "not valid JSON", "depth");
    free(deep);
    /* Arguments. */
    EXPECT_MSG(gp_st_index_parse(NULL, 5, "L", &ix), GP_ERR_INVALID_ARG, "NULL");
    EXPECT_MSG(gp_st_index_parse(ok, strlen(ok), "L", NULL), GP_ERR_INVALID_ARG, "output");
    EXPECT_MSG(gp_st_index_parse(NULL, 0, NULL, &ix), GP_ERR_FORMAT,
               "model.safetensors.index.json", "not valid JSON");
}

static void test_index_too_large(void **state)
{
    /* A sparse 65 MiB index costs no disk and is refused before reading. */
    char path[512];
    write_config(*state, false);
    join(path, sizeof path, *state, "model.safetensors.index.json");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), (off_t)65 << 20), 0);
    fclose(f);
    EXPECT_OPEN_FAILS(*state, GP_ERR_FORMAT, "model.safetensors.index.json", "68157440 bytes",
                      "cap");
}

static void test_missing_config(void **state)
{
    tck_ckpt c;
    char path[512];
    tck_default(&c, false, "BF16");
    tck_write(*state, &c, 0);
    join(path, sizeof path, *state, "config.json");
    assert_int_equal(unlink(path), 0);
    EXPECT_OPEN_FAILS(*state, GP_ERR_NOT_FOUND, "config.json");
    EXPECT_OPEN_FAILS("/nonexistent/gp/checkpoint", GP_ERR_NOT_FOUND, "/nonexistent/gp/checkpoint");
}

static void test_no_weight_files(void **state)
{
    write_config(*state, false);
    EXPECT_OPEN_FAILS(*state, GP_ERR_NOT_FOUND, "model.safetensors",
                      "model.safetensors.index.json");
}

static void test_corrupt_weight_file(void **state)
{
    char path[512];
    write_config(*state, false);
    join(path, sizeof path, *state, "model.safetensors");
    assert_int_equal(st_write_file(path, "", 0), 0); /* empty: cannot even be mapped */
    EXPECT_OPEN_FAILS(*state, GP_ERR_FORMAT, path, "shorter than");
    assert_int_equal(st_write_file(path, "\x50\0\0\0\0\0\0\0[1,2]", 13), 0);
    EXPECT_OPEN_FAILS(*state, GP_ERR_FORMAT, path, "truncated header");
}

/* ------------------------------------------------------------ model source */

static void test_source_resolve(void **state)
{
    gp_model_source src;
    assert_int_equal(gp_model_source_resolve("tiny", 1234, &src), GP_OK);
    assert_true(src.synthetic);
    assert_int_equal(src.seed, 1234);
    assert_int_equal(src.cfg.hidden, 64);
    gp_host_weights w;
    assert_int_equal(gp_model_source_load_host(&src, &w), GP_OK);
    assert_non_null(w.arena);
    assert_int_equal(w.cfg.n_layers, src.cfg.n_layers);
    gp_host_weights_free(&w);

    EXPECT_MSG(gp_model_source_resolve("no-such-model", 0, &src), GP_ERR_NOT_FOUND,
               "'no-such-model' is neither a checkpoint directory nor a preset", "presets: ",
               "tiny", "llama3-8b");

    tck_ckpt c;
    tck_default(&c, false, "BF16");
    tck_write(*state, &c, 0);
    assert_int_equal(gp_model_source_resolve(*state, 0, &src), GP_OK);
    assert_false(src.synthetic);
    assert_string_equal(src.path, (const char *)*state);
    assert_int_equal(src.cfg.ffn, T_FFN);
    assert_int_equal(gp_model_source_load_host(&src, &w), GP_OK);
    verify_weights(&w, &c);
    gp_host_weights_free(&w);

    /* A directory that is not a checkpoint reports why. */
    char path[512];
    join(path, sizeof path, *state, "config.json");
    unlink(path);
    EXPECT_MSG(gp_model_source_resolve(*state, 0, &src), GP_ERR_NOT_FOUND, "config.json");
}

/* A Qwen2 checkpoint: the same tensors plus q/k/v biases, loaded exactly
 * (F16 here) into bqkv; a missing bias, a bias on o_proj and a bias of the
 * wrong shape are refused; biases of another dtype make the load F32. */
static void write_qwen2_config(const char *dir)
{
    char path[512], text[1024];
    join(path, sizeof path, dir, "config.json");
    snprintf(text, sizeof text,
             "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\",\n"
             " \"hidden_act\": \"silu\", \"hidden_size\": %d, \"intermediate_size\": %d,\n"
             " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d,\n"
             " \"num_hidden_layers\": %d, \"vocab_size\": %d, \"rms_norm_eps\": 1e-06,\n"
             " \"rope_theta\": 1000000.0, \"max_position_embeddings\": 256,\n"
             " \"tie_word_embeddings\": false, \"use_sliding_window\": false, \"sliding_window\": 64,\n"
             " \"max_window_layers\": 1}\n",
             T_HIDDEN, T_FFN, T_HEADS, T_KV, T_HD, T_LAYERS, T_VOCAB);
    assert_int_equal(st_write_text(path, text), 0);
}

static void qwen2_default(tck_ckpt *c, const char *dtype, const char *bias_dtype)
{
    tck_default(c, false, dtype);
    char name[96];
    for (int l = 0; l < T_LAYERS; l++) {
        snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj.bias", l);
        tck_add(c, name, 1, T_Q, 0, bias_dtype, 0);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.k_proj.bias", l);
        tck_add(c, name, 1, T_KVR, 0, bias_dtype, 0);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.v_proj.bias", l);
        tck_add(c, name, 1, T_KVR, 0, bias_dtype, 0);
    }
}

static void test_qwen2_biases(void **state)
{
    const char *dir = *state;
    tck_ckpt c;
    qwen2_default(&c, "F16", "F16");
    tck_write(dir, &c, 0);
    write_qwen2_config(dir);
    gp_checkpoint *ck;
    assert_int_equal(gp_checkpoint_open(dir, &ck), GP_OK);
    assert_true(gp_checkpoint_config(ck)->qkv_bias);
    assert_int_equal(gp_checkpoint_dtype(ck), GP_DTYPE_F16);
    gp_host_weights w;
    assert_int_equal(gp_checkpoint_load_host(ck, &w), GP_OK);
    gp_checkpoint_close(ck);
    assert_int_equal(w.dtype, GP_DTYPE_F16);
    verify_weights(&w, &c);
    for (int l = 0; l < T_LAYERS; l++) {
        static const char *const proj[3] = {"q", "k", "v"};
        const int rows[3] = {T_Q, T_KVR, T_KVR};
        size_t at = 0;
        for (int p = 0; p < 3; p++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.self_attn.%s_proj.bias", l, proj[p]);
            for (int i = 0; i < rows[p]; i++, at++) {
                float want = expected_value(name, (size_t)i, "F16"), got = held_value(w.layers[l].bqkv, w.dtype, at);
                if (!(got == want))
                    fail_msg("%s[%d]: bqkv holds %.9g, want %.9g", name, i, (double)got, (double)want);
            }
        }
    }
    gp_host_weights_free(&w);

    /* biases in F32, the rest F16: mixed, so F32 holds both exactly */
    qwen2_default(&c, "F16", "F32");
    tck_write(dir, &c, 0);
    write_qwen2_config(dir);
    assert_int_equal(gp_checkpoint_open(dir, &ck), GP_OK);
    assert_int_equal(gp_checkpoint_dtype(ck), GP_DTYPE_F32);
    assert_int_equal(gp_checkpoint_load_host(ck, &w), GP_OK);
    gp_checkpoint_close(ck);
    assert_int_equal(w.dtype, GP_DTYPE_F32);
    assert_true(((const float *)w.layers[1].bqkv)[T_Q] ==
                expected_value("model.layers.1.self_attn.k_proj.bias", 0, "F32"));
    gp_host_weights_free(&w);

    qwen2_default(&c, "BF16", "BF16");
    tck_remove(&c, "model.layers.1.self_attn.k_proj.bias");
    tck_write(dir, &c, 0);
    write_qwen2_config(dir);
    EXPECT_CHECK_FAILS(dir, GP_ERR_NOT_FOUND, "'model.layers.1.self_attn.k_proj.bias'", "missing");

    qwen2_default(&c, "BF16", "BF16");
    tck_add(&c, "model.layers.0.self_attn.o_proj.bias", 1, T_HIDDEN, 0, "BF16", 0);
    tck_write(dir, &c, 0);
    write_qwen2_config(dir);
    EXPECT_CHECK_FAILS(dir, GP_ERR_UNSUPPORTED, "o_proj.bias", "q/k/v projection biases only");

    qwen2_default(&c, "BF16", "BF16");
    tck_get(&c, "model.layers.0.self_attn.v_proj.bias")->shape[0] = T_Q;
    tck_write(dir, &c, 0);
    write_qwen2_config(dir);
    EXPECT_CHECK_FAILS(dir, GP_ERR_SHAPE, "v_proj.bias", "expects");
}

/* ------------------------------------------------------------ one tensor at a time */

/* Where engine tensor kind (layer) lives in host weights. */
static const void *host_slot(const gp_host_weights *w, gp_tensor_kind k, int l)
{
    switch (k) {
    case GP_T_EMBED: return w->embed;
    case GP_T_FINAL_NORM: return w->final_norm;
    case GP_T_LM_HEAD: return w->lm_head;
    case GP_T_ATTN_NORM: return w->layers[l].attn_norm;
    case GP_T_WQKV: return w->layers[l].wqkv;
    case GP_T_WO: return w->layers[l].wo;
    case GP_T_FFN_NORM: return w->layers[l].ffn_norm;
    case GP_T_W_GATE_UP: return w->layers[l].w_gate_up;
    case GP_T_W_DOWN: return w->layers[l].w_down;
    case GP_T_BQKV: return w->layers[l].bqkv;
    }
    return NULL;
}

/* Every tensor gp_checkpoint_fill_tensor makes of the checkpoint in dir,
 * in F32, BF16 and F16, is what gp_checkpoint_load_host holds at its place:
 * widened to F32 exactly, or converted by gp_weights_convert (where that
 * refuses a value fp16 cannot hold, the fill refuses it with the same
 * status); not one byte past the tensor is written. */
static void fill_matches_load(const char *dir)
{
    gp_checkpoint *ck;
    assert_int_equal(gp_checkpoint_open(dir, &ck), GP_OK);
    gp_host_weights w;
    assert_int_equal(gp_checkpoint_load_host(ck, &w), GP_OK);
    const gp_config *c = &w.cfg;
    static const gp_dtype dts[3] = {GP_DTYPE_F32, GP_DTYPE_BF16, GP_DTYPE_F16};
    int compared = 0;
    for (int l = -1; l < c->n_layers; l++) {
        /* layer -1: the model tensors (lm_head too when tied: the embedding) */
        for (int k = l < 0 ? GP_T_EMBED : GP_T_ATTN_NORM; k <= (l < 0 ? GP_T_LM_HEAD : GP_T_BQKV); k++) {
            const gp_tensor_kind kind = (gp_tensor_kind)k;
            if (kind == GP_T_BQKV && !c->qkv_bias)
                continue;
            const size_t n = (size_t)gp_synth_numel(c, kind);
            const void *held = host_slot(&w, kind, l < 0 ? 0 : l);
            uint8_t *got = malloc(n * 4 + 16), *want = malloc(n * 4);
            assert_non_null(got);
            assert_non_null(want);
            for (int d = 0; d < 3; d++) {
                const gp_dtype dt = dts[d];
                const size_t bytes = n * gp_dtype_size(dt);
                gp_status ws = GP_OK;
                if (dt != GP_DTYPE_F32)
                    ws = gp_weights_convert(want, dt, held, w.dtype, n, "x");
                else
                    for (size_t i = 0; i < n; i++) {
                        float f = held_value(held, w.dtype, i);
                        memcpy(want + 4 * i, &f, 4);
                    }
                memset(got, 0xa5, n * 4 + 16);
                gp_status fs = gp_checkpoint_fill_tensor(ck, kind, l < 0 ? 7 : l, got, dt, NULL);
                if (fs != ws)
                    fail_msg("%s: %s of layer %d into %s: status %d (%s), the conversion of the loaded "
                             "weights gives %d", dir, gp_tensor_kind_name(kind), l, gp_dtype_name(dt), fs,
                             gp_last_error(), ws);
                if (fs != GP_OK)
                    continue;
                if (memcmp(got, want, bytes) != 0) {
                    size_t i = 0;
                    while (got[i] == want[i])
                        i++;
                    fail_msg("%s: %s of layer %d into %s: byte %zu differs from the loaded weights", dir,
                             gp_tensor_kind_name(kind), l, gp_dtype_name(dt), i);
                }
                for (size_t i = bytes; i < n * 4 + 16; i++)
                    if (got[i] != 0xa5)
                        fail_msg("%s: %s of layer %d into %s wrote byte %zu, past its %zu bytes", dir,
                                 gp_tensor_kind_name(kind), l, gp_dtype_name(dt), i, bytes);
                compared++;
            }
            free(got);
            free(want);
        }
    }
    /* embed, final_norm, lm_head, then 6 tensors a layer (7 with biases), in 3 dtypes */
    if (compared != 3 * (3 + c->n_layers * (c->qkv_bias ? 7 : 6)))
        fail_msg("%s: %d tensor fills compared", dir, compared);
    gp_host_weights_free(&w);
    gp_checkpoint_close(ck);
}

/* The committed checkpoints: bf16, fp16 and fp32, tied and untied, q/k/v
 * biases (qwen2), mistral, sharded (small-gqa). */
static void test_fill_committed(void **state)
{
    (void)state;
    static const char *const dirs[] = {"tiny", "tiny-fp16", "tiny-fp32", "qwen2-tiny", "qwen2-untied",
                                       "mistral-tiny", "small-gqa", "long-gqa"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/%s", GP_TEST_DATA_DIR, dirs[i]);
        fill_matches_load(dir);
    }
}

/* Written checkpoints: mixed dtypes across shards with a rotary cache, a
 * tied one that also holds an lm_head of another dtype, q/k/v biases of the
 * weights' dtype and of another. */
static void test_fill_written(void **state)
{
    const char *dir = *state;
    tck_ckpt c;
    tck_default(&c, false, "F32");
    for (int i = 0; i < c.n; i++)
        if (c.t[i].shard == 1)
            c.t[i].dtype = "F16";
    tck_get(&c, "model.layers.1.mlp.up_proj.weight")->dtype = "BF16";
    tck_add(&c, "model.layers.0.self_attn.rotary_emb.inv_freq", 1, T_HD / 2, 0, "F32", 0);
    tck_write(dir, &c, 2);
    fill_matches_load(dir);
    remove_dir(state);
    assert_int_equal(make_dir(state), 0);
    dir = *state;

    tck_default(&c, true, "BF16");
    tck_add(&c, "lm_head.weight", 2, T_VOCAB, T_HIDDEN, "F32", 0);
    tck_write(dir, &c, 0);
    fill_matches_load(dir);

    qwen2_default(&c, "F16", "F16");
    tck_write(dir, &c, 0);
    write_qwen2_config(dir);
    fill_matches_load(dir);
    qwen2_default(&c, "BF16", "F32");
    tck_write(dir, &c, 0);
    write_qwen2_config(dir);
    fill_matches_load(dir);
}

/* Overwrite element i of tensor name in dir/model.safetensors with v (F32). */
static void poke_f32(const char *dir, const char *name, size_t i, float v)
{
    char path[512];
    join(path, sizeof path, dir, "model.safetensors");
    char *buf;
    size_t len;
    assert_int_equal(gp_read_file(path, (size_t)1 << 30, &buf, &len), GP_OK);
    gp_st_file *f;
    assert_int_equal(gp_st_parse((const uint8_t *)buf, len, path, &f), GP_OK);
    const gp_st_tensor *t = gp_st_find(f, name);
    assert_non_null(t);
    assert_int_equal(t->dtype, GP_DTYPE_F32);
    long at = (long)((const char *)t->data - buf) + (long)(4 * i);
    gp_st_free(f);
    free(buf);
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, at, SEEK_SET), 0);
    assert_int_equal(fwrite(&v, 4, 1, fp), 1);
    assert_int_equal(fclose(fp), 0);
}

static void test_fill_errors(void **state)
{
    const char *dir = *state;
    tck_ckpt c;
    tck_default(&c, false, "F32");
    tck_write(dir, &c, 0);
    poke_f32(dir, "model.layers.1.self_attn.k_proj.weight", 5, 70000.0f);
    gp_checkpoint *ck;
    assert_int_equal(gp_checkpoint_open(dir, &ck), GP_OK);
    /* room for the largest engine tensor, in F32 */
    float *buf = malloc((size_t)(T_VOCAB > 2 * T_FFN ? T_VOCAB : 2 * T_FFN) * T_HIDDEN * sizeof *buf);
    assert_non_null(buf);

    EXPECT_MSG(gp_checkpoint_fill_tensor(NULL, GP_T_EMBED, 0, buf, GP_DTYPE_F32, NULL), GP_ERR_INVALID_ARG,
               "must not be NULL");
    EXPECT_MSG(gp_checkpoint_fill_tensor(ck, GP_T_EMBED, 0, NULL, GP_DTYPE_F32, NULL), GP_ERR_INVALID_ARG,
               "must not be NULL");
    EXPECT_MSG(gp_checkpoint_fill_tensor(ck, (gp_tensor_kind)99, 0, buf, GP_DTYPE_F32, NULL), GP_ERR_INVALID_ARG,
               "tensor kind 99");
    EXPECT_MSG(gp_checkpoint_fill_tensor(ck, GP_T_WQKV, -1, buf, GP_DTYPE_F32, NULL), GP_ERR_INVALID_ARG,
               "wqkv of layer -1", "layers 0 to 1");
    EXPECT_MSG(gp_checkpoint_fill_tensor(ck, GP_T_W_DOWN, T_LAYERS, buf, GP_DTYPE_F32, NULL), GP_ERR_INVALID_ARG,
               "w_down of layer 2", "layers 0 to 1");
    EXPECT_MSG(gp_checkpoint_fill_tensor(ck, GP_T_BQKV, 0, buf, GP_DTYPE_F32, NULL), GP_ERR_INVALID_ARG,
               "no q/k/v biases");
    EXPECT_MSG(gp_checkpoint_fill_tensor(ck, GP_T_WO, 0, buf, GP_DTYPE_I8, NULL), GP_ERR_INVALID_ARG,
               "dtype I8", "allowed F32, BF16 or F16");
    EXPECT_MSG(gp_checkpoint_fill_tensor(ck, GP_T_WO, 0, buf, GP_DTYPE_AUTO, NULL), GP_ERR_INVALID_ARG,
               "allowed F32, BF16 or F16");
    /* the model tensors take any layer: it is not theirs */
    assert_int_equal(gp_checkpoint_fill_tensor(ck, GP_T_FINAL_NORM, -5, buf, GP_DTYPE_F32, NULL), GP_OK);

    /* 70000 becomes inf in fp16: refused, naming the label, the checkpoint
     * tensor and the element; bf16 and f32 hold it */
    EXPECT_MSG(gp_checkpoint_fill_tensor(ck, GP_T_WQKV, 1, buf, GP_DTYPE_F16, "layer 1 wqkv"), GP_ERR_UNSUPPORTED,
               "layer 1 wqkv", "'model.layers.1.self_attn.k_proj.weight'", "element 5", "70000", "--dtype bf16");
    assert_int_equal(gp_checkpoint_fill_tensor(ck, GP_T_WQKV, 0, buf, GP_DTYPE_F16, "layer 0 wqkv"), GP_OK);
    assert_int_equal(gp_checkpoint_fill_tensor(ck, GP_T_WQKV, 1, buf, GP_DTYPE_BF16, NULL), GP_OK);
    assert_int_equal(((const uint16_t *)buf)[T_Q * T_HIDDEN + 5], gp_f32_to_bf16(70000.0f));
    assert_int_equal(gp_checkpoint_fill_tensor(ck, GP_T_WQKV, 1, buf, GP_DTYPE_F32, NULL), GP_OK);
    assert_true(buf[T_Q * T_HIDDEN + 5] == 70000.0f);
    gp_checkpoint_close(ck);

    /* a tensor missing or of the wrong shape: refused when a fill reads it,
     * and only then */
    tck_default(&c, false, "BF16");
    tck_remove(&c, "model.layers.1.mlp.up_proj.weight");
    tck_get(&c, "model.layers.0.self_attn.k_proj.weight")->shape[0] = T_Q;
    tck_write(dir, &c, 0);
    assert_int_equal(gp_checkpoint_open(dir, &ck), GP_OK);
    EXPECT_MSG(gp_checkpoint_fill_tensor(ck, GP_T_W_GATE_UP, 1, buf, GP_DTYPE_BF16, NULL), GP_ERR_NOT_FOUND,
               "'model.layers.1.mlp.up_proj.weight'", "missing");
    assert_int_equal(gp_checkpoint_fill_tensor(ck, GP_T_W_GATE_UP, 0, buf, GP_DTYPE_BF16, NULL), GP_OK);
    EXPECT_MSG(gp_checkpoint_fill_tensor(ck, GP_T_WQKV, 0, buf, GP_DTYPE_BF16, NULL), GP_ERR_SHAPE,
               "k_proj.weight", "expects");
    assert_int_equal(gp_checkpoint_fill_tensor(ck, GP_T_WQKV, 1, buf, GP_DTYPE_BF16, NULL), GP_OK);
    gp_checkpoint_close(ck);
    free(buf);
}

#define T(f) cmocka_unit_test_setup_teardown(f, make_dir, remove_dir)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_qwen2_biases),
        T(test_single_file_bf16),
        T(test_sharded_f32_f16),
        T(test_tied_embeddings),
        T(test_missing_tensor),
        T(test_checker_uses_table_names),
        T(test_missing_lm_head_untied),
        T(test_wrong_shape),
        T(test_extra_tensor),
        T(test_unsupported_dtype),
        T(test_index_missing_shard),
        T(test_tensor_in_two_shards),
        T(test_index_disagrees_with_shards),
        T(test_bad_shard_names),
        T(test_bad_index_json),
        T(test_index_parse),
        T(test_index_hostile),
        T(test_index_too_large),
        T(test_missing_config),
        T(test_no_weight_files),
        T(test_corrupt_weight_file),
        T(test_source_resolve),
        T(test_fill_committed),
        T(test_fill_written),
        T(test_fill_errors),
    };
    return cmocka_run_group_tests_name("ck_checkpoint", tests, NULL, NULL);
}
