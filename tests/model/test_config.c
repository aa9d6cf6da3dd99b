/* Tests of model/config.c: presets, HF config.json parsing in both RoPE forms,
 * validation errors and RoPE inverse frequencies. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gp_model.h"

static gp_status parse(const char *json, gp_config *c)
{
    memset(c, 0xAB, sizeof *c);
    return gp_config_parse_json(json, strlen(json), "/some/dir/my-model/config.json", c);
}

static void assert_error_mentions(const char *a, const char *b)
{
    const char *e = gp_last_error();
    if (!strstr(e, a) || (b && !strstr(e, b)))
        fail_msg("message \"%s\" should mention \"%s\"%s%s", e, a, b ? " and " : "", b ? b : "");
}

/* ---------------------------------------------------------------- presets */

static void test_preset_tiny(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    assert_string_equal(c.name, "tiny");
    assert_int_equal(c.n_layers, 2);
    assert_int_equal(c.hidden, 64);
    assert_int_equal(c.n_heads, 4);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.ffn, 128);
    assert_int_equal(c.vocab, 256);
    assert_true(c.norm_eps == 1e-5f);
    assert_true(c.rope_theta == 10000.0f);
    assert_int_equal(c.rope_scaling.type, GP_ROPE_DEFAULT);
    assert_true(c.tied_embeddings);
    assert_int_equal(c.max_context, 256);
    assert_int_equal(gp_config_validate(&c), GP_OK);
    assert_int_equal(gp_config_qkv_rows(&c), (4 + 2 * 2) * 16);
}

static void test_preset_llama32_1b(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("llama3.2-1b", &c), GP_OK);
    assert_int_equal(c.n_layers, 16);
    assert_int_equal(c.hidden, 2048);
    assert_int_equal(c.n_heads, 32);
    assert_int_equal(c.n_kv_heads, 8);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.ffn, 8192);
    assert_int_equal(c.vocab, 128256);
    assert_true(c.norm_eps == 1e-5f);
    assert_true(c.rope_theta == 500000.0f);
    assert_int_equal(c.rope_scaling.type, GP_ROPE_LLAMA3);
    assert_true(c.rope_scaling.factor == 32.0f);
    assert_true(c.rope_scaling.low_freq_factor == 1.0f);
    assert_true(c.rope_scaling.high_freq_factor == 4.0f);
    assert_int_equal(c.rope_scaling.original_max_pos, 8192);
    assert_true(c.tied_embeddings);
    assert_int_equal(c.max_context, 131072);
    assert_int_equal(gp_config_validate(&c), GP_OK);
    /* Llama-3.2-1B's published parameter count */
    assert_true(gp_config_param_count(&c) == 1235814400ull);
}

static void test_preset_llama3_8b_default(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset(GP_DEFAULT_PRESET, &c), GP_OK);
    assert_string_equal(c.name, "llama3-8b");
    assert_int_equal(c.n_layers, 32);
    assert_int_equal(c.hidden, 4096);
    assert_int_equal(c.n_heads, 32);
    assert_int_equal(c.n_kv_heads, 8);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.ffn, 14336);
    assert_int_equal(c.vocab, 128256);
    assert_true(c.norm_eps == 1e-5f);
    assert_true(c.rope_theta == 500000.0f);
    assert_int_equal(c.rope_scaling.type, GP_ROPE_DEFAULT);
    assert_false(c.tied_embeddings);
    assert_int_equal(c.max_context, 8192);
    assert_int_equal(gp_config_validate(&c), GP_OK);
    assert_true(gp_config_param_count(&c) == 8030261248ull);
}

static void test_preset_llama3_70b(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("llama3-70b", &c), GP_OK);
    assert_int_equal(c.n_layers, 80);
    assert_int_equal(c.hidden, 8192);
    assert_int_equal(c.n_heads, 64);
    assert_int_equal(c.n_kv_heads, 8);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.ffn, 28672);
    assert_int_equal(c.vocab, 128256);
    assert_true(c.rope_theta == 500000.0f);
    assert_int_equal(c.rope_scaling.type, GP_ROPE_DEFAULT);
    assert_false(c.tied_embeddings);
    assert_int_equal(c.max_context, 8192);
    assert_int_equal(gp_config_validate(&c), GP_OK);
    assert_true(gp_config_param_count(&c) == 70553706496ull);
}

static void test_preset_unknown(void **state)
{
    (void)state;
    gp_config c;
    assert_string_equal(gp_config_preset_names(), "tiny, llama3.2-1b, llama3-8b, llama3.1-8b, llama3-70b");
    assert_int_equal(gp_config_preset("llama2-7b", &c), GP_ERR_NOT_FOUND);
    assert_error_mentions("llama2-7b", "tiny, llama3.2-1b, llama3-8b, llama3.1-8b, llama3-70b");
    assert_int_equal(gp_config_preset(NULL, &c), GP_ERR_INVALID_ARG);
}

/* ---------------------------------------------------------------- parsing */

/* Llama-3.1-8B's config.json, abridged to the keys that matter. */
static const char *llama31_classic =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
    " \"bos_token_id\": 128000, \"eos_token_id\": 128001, \"hidden_act\": \"silu\","
    " \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336,"
    " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
    " \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05,"
    " \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
    "   \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
    " \"rope_theta\": 500000.0, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.43.0.dev0\", \"use_cache\": true, \"vocab_size\": 128256}";

static void test_parse_classic(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(parse(llama31_classic, &c), GP_OK);
    assert_string_equal(c.name, "config.json");
    assert_int_equal(c.n_layers, 32);
    assert_int_equal(c.hidden, 4096);
    assert_int_equal(c.n_heads, 32);
    assert_int_equal(c.n_kv_heads, 8);
    assert_int_equal(c.head_dim, 128); /* hidden / heads */
    assert_int_equal(c.ffn, 14336);
    assert_int_equal(c.vocab, 128256);
    assert_true(c.norm_eps == 1e-5f);
    assert_true(c.rope_theta == 500000.0f);
    assert_int_equal(c.rope_scaling.type, GP_ROPE_LLAMA3);
    assert_true(c.rope_scaling.factor == 8.0f);
    assert_true(c.rope_scaling.low_freq_factor == 1.0f);
    assert_true(c.rope_scaling.high_freq_factor == 4.0f);
    assert_int_equal(c.rope_scaling.original_max_pos, 8192);
    assert_false(c.tied_embeddings);
    assert_int_equal(c.max_context, 131072);
}

static void test_parse_rope_parameters(void **state)
{
    (void)state;
    /* transformers v5 form: rope_theta inside rope_parameters, no top-level one. */
    const char *j =
        "{\"model_type\": \"llama\", \"hidden_size\": 2048, \"intermediate_size\": 8192,"
        " \"num_attention_heads\": 32, \"num_hidden_layers\": 16, \"num_key_value_heads\": 8,"
        " \"head_dim\": 64, \"rms_norm_eps\": 1e-05, \"vocab_size\": 128256,"
        " \"max_position_embeddings\": 131072, \"tie_word_embeddings\": true,"
        " \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0,"
        "   \"factor\": 32.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
        "   \"original_max_position_embeddings\": 8192}}";
    gp_config c, ref;
    assert_int_equal(parse(j, &c), GP_OK);
    assert_int_equal(gp_config_preset("llama3.2-1b", &ref), GP_OK);
    strcpy(ref.name, c.name);
    assert_int_equal(c.n_layers, ref.n_layers);
    assert_int_equal(c.head_dim, 64);
    assert_true(c.rope_theta == 500000.0f);
    assert_int_equal(c.rope_scaling.type, GP_ROPE_LLAMA3);
    assert_true(c.rope_scaling.factor == 32.0f);
    assert_true(c.rope_scaling.high_freq_factor == 4.0f);
    assert_int_equal(c.rope_scaling.original_max_pos, 8192);
    assert_true(c.tied_embeddings);
    assert_int_equal(gp_config_param_count(&c), gp_config_param_count(&ref));

    /* default rope type, theta only inside rope_parameters */
    const char *d =
        "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4,"
        " \"num_hidden_layers\": 2, \"rms_norm_eps\": 1e-06, \"vocab_size\": 256,"
        " \"max_position_embeddings\": 256,"
        " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1234.5}}";
    assert_int_equal(parse(d, &c), GP_OK);
    assert_true(c.rope_theta == 1234.5f);
    assert_int_equal(c.rope_scaling.type, GP_ROPE_DEFAULT);
}

static void test_parse_defaults(void **state)
{
    (void)state;
    const char *j =
        "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4,"
        " \"num_hidden_layers\": 2, \"rms_norm_eps\": 1e-06, \"vocab_size\": 256,"
        " \"max_position_embeddings\": 512, \"num_key_value_heads\": null,"
        " \"rope_scaling\": null}";
    gp_config c;
    assert_int_equal(parse(j, &c), GP_OK);
    assert_int_equal(c.n_kv_heads, 4);     /* = heads */
    assert_int_equal(c.head_dim, 16);      /* hidden / heads */
    assert_true(c.rope_theta == 10000.0f); /* HF default */
    assert_int_equal(c.rope_scaling.type, GP_ROPE_DEFAULT);
    assert_false(c.tied_embeddings);       /* HF LlamaConfig default */
    assert_true(c.norm_eps == 1e-6f);
    assert_int_equal(c.max_context, 512);

    /* old spelling "type" and "default" meaning none */
    const char *t =
        "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4,"
        " \"num_hidden_layers\": 2, \"rms_norm_eps\": 1e-06, \"vocab_size\": 256,"
        " \"max_position_embeddings\": 512, \"rope_scaling\": {\"type\": \"default\"}}";
    assert_int_equal(parse(t, &c), GP_OK);
    assert_int_equal(c.rope_scaling.type, GP_ROPE_DEFAULT);
}

#define BASE "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4," \
             " \"num_hidden_layers\": 2, \"rms_norm_eps\": 1e-06, \"vocab_size\": 256," \
             " \"max_position_embeddings\": 256"

static void test_parse_missing_key(void **state)
{
    (void)state;
    gp_config c;
    const char *j = "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4,"
                    " \"rms_norm_eps\": 1e-06, \"vocab_size\": 256, \"max_position_embeddings\": 8}";
    assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
    assert_error_mentions("num_hidden_layers", "missing");
    const char *r = "{" BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
                    " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0}}";
    assert_int_equal(parse(r, &c), GP_ERR_FORMAT);
    assert_error_mentions("rope_scaling.original_max_position_embeddings", NULL);
}

static void test_parse_wrong_type(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(parse("{" BASE ", \"num_key_value_heads\": \"2\"}", &c), GP_ERR_FORMAT);
    assert_error_mentions("num_key_value_heads", "integer");
    assert_int_equal(parse("{" BASE ", \"head_dim\": 16.5}", &c), GP_ERR_FORMAT);
    assert_error_mentions("head_dim", "integer");
    assert_int_equal(parse("{" BASE ", \"rope_theta\": \"big\"}", &c), GP_ERR_FORMAT);
    assert_error_mentions("rope_theta", "number");
    assert_int_equal(parse("{" BASE ", \"tie_word_embeddings\": 1}", &c), GP_ERR_FORMAT);
    assert_error_mentions("tie_word_embeddings", "true or false");
    assert_int_equal(parse("{" BASE ", \"rope_scaling\": 8}", &c), GP_ERR_FORMAT);
    assert_error_mentions("rope_scaling", "object");
    assert_int_equal(parse("{" BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\","
                           " \"factor\": \"8\", \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
                           " \"original_max_position_embeddings\": 8192}}", &c), GP_ERR_FORMAT);
    assert_error_mentions("rope_scaling.factor", "number");
    assert_int_equal(parse("{" BASE ", \"num_hidden_layers\": 99999999999}", &c), GP_ERR_FORMAT);
    assert_error_mentions("num_hidden_layers", "range");
    assert_int_equal(parse("[1, 2]", &c), GP_ERR_FORMAT);
    assert_int_equal(parse("{\"hidden_size\": 64,", &c), GP_ERR_FORMAT);
    assert_error_mentions("invalid JSON", "line");
}

static void test_parse_unsupported(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(parse("{" BASE ", \"model_type\": \"mixtral\"}", &c), GP_ERR_UNSUPPORTED);
    assert_error_mentions("mixtral", "\"llama\", \"mistral\", \"qwen2\"");
    assert_int_equal(parse("{" BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
                           &c), GP_ERR_UNSUPPORTED);
    assert_error_mentions("yarn", NULL);
    assert_int_equal(parse("{" BASE ", \"rope_parameters\": {\"rope_type\": \"linear\","
                           " \"rope_theta\": 10000.0, \"factor\": 2.0}}", &c), GP_ERR_UNSUPPORTED);
    assert_error_mentions("linear", NULL);
    assert_int_equal(parse("{" BASE ", \"attention_bias\": true}", &c), GP_ERR_UNSUPPORTED);
    assert_error_mentions("attention_bias", "not on o_proj"); /* q/k/v alone would be implemented */
    assert_int_equal(parse("{" BASE ", \"mlp_bias\": true}", &c), GP_ERR_UNSUPPORTED);
    assert_error_mentions("mlp_bias", NULL);
    assert_int_equal(parse("{" BASE ", \"hidden_act\": \"gelu\"}", &c), GP_ERR_UNSUPPORTED);
    assert_error_mentions("gelu", "silu");
    assert_int_equal(parse("{" BASE ", \"model_type\": 3}", &c), GP_ERR_FORMAT);
}

/* Mistral: Llama's keys; a sliding window is accepted only where it never
 * bites (null, absent, or >= max_position_embeddings = 256 in BASE). */
static void test_parse_mistral(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(parse("{" BASE ", \"model_type\": \"mistral\", \"sliding_window\": null}", &c), GP_OK);
    assert_string_equal(c.arch->model_type, "mistral");
    assert_false(c.qkv_bias);
    assert_false(c.tied_embeddings);
    assert_true(c.rope_theta == 10000.0f);
    assert_int_equal(parse("{" BASE ", \"model_type\": \"mistral\"}", &c), GP_OK);
    assert_int_equal(parse("{" BASE ", \"model_type\": \"mistral\", \"sliding_window\": 256}", &c), GP_OK);
    assert_int_equal(parse("{" BASE ", \"model_type\": \"mistral\", \"sliding_window\": 4096}", &c), GP_OK);
    assert_int_equal(parse("{" BASE ", \"model_type\": \"mistral\", \"sliding_window\": 128}", &c),
                     GP_ERR_UNSUPPORTED);
    assert_error_mentions("sliding_window = 128", ">= max_position_embeddings = 256");
    assert_error_mentions("sliding-window attention", NULL);
    assert_int_equal(parse("{" BASE ", \"model_type\": \"mistral\", \"sliding_window\": \"x\"}", &c),
                     GP_ERR_FORMAT);
    /* Mistral has no attention_bias key: it is not read */
    assert_int_equal(parse("{" BASE ", \"model_type\": \"mistral\", \"attention_bias\": true}", &c), GP_OK);
    assert_false(c.qkv_bias);
}

/* Qwen2: q/k/v biases always; sliding_window applies only with
 * use_sliding_window true, and then from layer max_window_layers on. */
static void test_parse_qwen2(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(parse("{" BASE ", \"model_type\": \"qwen2\", \"rope_theta\": 1000000.0,"
                           " \"tie_word_embeddings\": true, \"use_sliding_window\": false,"
                           " \"sliding_window\": 32, \"max_window_layers\": 1}", &c), GP_OK);
    assert_string_equal(c.arch->model_type, "qwen2");
    assert_true(c.qkv_bias);
    assert_true(c.tied_embeddings);
    assert_true(c.rope_theta == 1e6f);
    assert_int_equal(gp_config_param_count(&c), 256u * 64 + 2 * (2 * 64 + 192 * 64 + 64 * 64 + 3 * 128 * 64 + 192) + 64);
    assert_int_equal(parse("{" BASE ", \"model_type\": \"qwen2\"}", &c), GP_OK);
    assert_false(c.tied_embeddings); /* Qwen2Config's default */
    assert_true(c.rope_theta == 10000.0f);
    /* use_sliding_window true: refused unless the window or the layers make it moot */
    assert_int_equal(parse("{" BASE ", \"model_type\": \"qwen2\", \"use_sliding_window\": true,"
                           " \"sliding_window\": 300, \"max_window_layers\": 0}", &c), GP_OK);
    assert_int_equal(parse("{" BASE ", \"model_type\": \"qwen2\", \"use_sliding_window\": true,"
                           " \"sliding_window\": 32, \"max_window_layers\": 2}", &c), GP_OK);
    assert_int_equal(parse("{" BASE ", \"model_type\": \"qwen2\", \"use_sliding_window\": true,"
                           " \"sliding_window\": 32, \"max_window_layers\": 1}", &c), GP_ERR_UNSUPPORTED);
    assert_error_mentions("sliding_window = 32", "max_window_layers = 1");
    assert_error_mentions("layers 1..1", "use_sliding_window false");
    assert_int_equal(parse("{" BASE ", \"model_type\": \"qwen2\", \"use_sliding_window\": true,"
                           " \"sliding_window\": 32}", &c), GP_ERR_UNSUPPORTED);
    assert_error_mentions("sliding_window = 32", "use_sliding_window false");
    assert_int_equal(parse("{" BASE ", \"model_type\": \"qwen2\", \"use_sliding_window\": 1}", &c),
                     GP_ERR_FORMAT);
}

/* Llama's attention_bias biases q, k, v and o: o_proj is named as the part
 * not implemented; mlp_bias likewise. */
static void test_parse_llama_bias(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(parse("{" BASE ", \"attention_bias\": true}", &c), GP_ERR_UNSUPPORTED);
    assert_error_mentions("attention_bias = true", "o_proj");
    assert_int_equal(parse("{" BASE ", \"mlp_bias\": true}", &c), GP_ERR_UNSUPPORTED);
    assert_error_mentions("mlp_bias = true", "gate_proj, up_proj, down_proj");
    assert_int_equal(parse("{" BASE ", \"attention_bias\": false, \"mlp_bias\": false}", &c), GP_OK);
    assert_false(c.qkv_bias);
}

static void test_parse_invalid_values(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(parse("{" BASE ", \"num_key_value_heads\": 3}", &c), GP_ERR_INVALID_ARG);
    assert_error_mentions("n_heads = 4", "n_kv_heads = 3");
    const char *z = "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4,"
                    " \"num_hidden_layers\": 0, \"rms_norm_eps\": 1e-06, \"vocab_size\": 256,"
                    " \"max_position_embeddings\": 256}";
    assert_int_equal(parse(z, &c), GP_ERR_INVALID_ARG);
    assert_error_mentions("num_hidden_layers", "= 0");
    assert_int_equal(parse("{" BASE ", \"head_dim\": 15}", &c), GP_ERR_INVALID_ARG);
    assert_error_mentions("head_dim = 15", "even");
    assert_int_equal(parse("{" BASE ", \"rope_theta\": -1}", &c), GP_ERR_INVALID_ARG);
    assert_error_mentions("rope_theta", "-1");
    assert_int_equal(parse("{" BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\","
                           " \"factor\": 8, \"low_freq_factor\": 4, \"high_freq_factor\": 1,"
                           " \"original_max_position_embeddings\": 8192}}", &c),
                     GP_ERR_INVALID_ARG);
    assert_error_mentions("high_freq_factor", "low_freq_factor");
    assert_int_equal(parse("{" BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\","
                           " \"factor\": 0.5, \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
                           " \"original_max_position_embeddings\": 8192}}", &c),
                     GP_ERR_INVALID_ARG);
    assert_error_mentions("factor = 0.5", NULL);

    gp_config t;
    assert_int_equal(gp_config_preset("tiny", &t), GP_OK);
    t.norm_eps = 0.0f;
    assert_int_equal(gp_config_validate(&t), GP_ERR_INVALID_ARG);
    assert_error_mentions("norm_eps", NULL);
    assert_int_equal(gp_config_validate(NULL), GP_ERR_INVALID_ARG);
}

/* ------------------------------------------------------- hostile input */

/* Hostile config.json: every one ends in an error status with a message that
 * names the key (or the JSON position); none reaches undefined arithmetic. */

static gp_status parse_n(const char *text, size_t len, gp_config *c)
{
    memset(c, 0xAB, sizeof *c);
    gp_clear_error();
    return gp_config_parse_json(text, len, "/some/dir/my-model/config.json", c);
}

static void test_hostile_ints(void **state)
{
    (void)state;
    gp_config c;
    static const struct { const char *key, *field; } ints[] = {
        { "num_hidden_layers", "n_layers" }, { "hidden_size", "hidden" },
        { "num_attention_heads", "n_heads" }, { "num_key_value_heads", "n_kv_heads" },
        { "head_dim", "head_dim" }, { "intermediate_size", "ffn" },
        { "vocab_size", "vocab" }, { "max_position_embeddings", "max_context" },
    };
    char j[512];
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        /* Later keys win in jansson as in Python's json, so the value
         * appended after BASE is the one read. */
        snprintf(j, sizeof j, "{" BASE ", \"%s\": -5}", ints[i].key);
        assert_int_equal(parse(j, &c), GP_ERR_INVALID_ARG);
        assert_error_mentions(ints[i].field, "= -5 must be positive");
        snprintf(j, sizeof j, "{" BASE ", \"%s\": -2147483648}", ints[i].key);
        assert_int_equal(parse(j, &c), GP_ERR_INVALID_ARG);
        assert_error_mentions(ints[i].field, "-2147483648");
        snprintf(j, sizeof j, "{" BASE ", \"%s\": 2147483648}", ints[i].key);
        assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
        assert_error_mentions(ints[i].key, "2147483648 is outside the int range");
        snprintf(j, sizeof j, "{" BASE ", \"%s\": -9223372036854775808}", ints[i].key);
        assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
        assert_error_mentions(ints[i].key, "outside the int range");
        /* Beyond int64: jansson refuses the number itself. */
        snprintf(j, sizeof j, "{" BASE ", \"%s\": 9223372036854775808}", ints[i].key);
        assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
        assert_error_mentions("invalid JSON", "too big");
        snprintf(j, sizeof j, "{" BASE ", \"%s\": 2.0}", ints[i].key);
        assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
        assert_error_mentions(ints[i].key, "must be an integer");
        snprintf(j, sizeof j, "{" BASE ", \"%s\": true}", ints[i].key);
        assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
        assert_error_mentions(ints[i].key, "must be an integer");
        snprintf(j, sizeof j, "{" BASE ", \"%s\": [64]}", ints[i].key);
        assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
        assert_error_mentions(ints[i].key, "must be an integer");
        snprintf(j, sizeof j, "{" BASE ", \"%s\": {}}", ints[i].key);
        assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
        assert_error_mentions(ints[i].key, "must be an integer");
    }
}

static void test_hostile_int_products(void **state)
{
    (void)state;
    gp_config c;
    /* (INT_MAX + 2 INT_MAX) * (INT_MAX - 1) overflowed int64 in validation
     * (tests/fuzz/regressions/config/qkv_rows_int64_overflow.json). */
    assert_int_equal(parse("{" BASE ", \"num_attention_heads\": 2147483647,"
                           " \"num_key_value_heads\": 2147483647, \"head_dim\": 2147483646}", &c),
                     GP_ERR_INVALID_ARG);
    assert_error_mentions("(n_heads + 2 n_kv_heads) * head_dim = 13835058035954810886", "exceeds");
    assert_int_equal(parse("{" BASE ", \"num_attention_heads\": 65536, \"num_key_value_heads\": 1,"
                           " \"head_dim\": 65536}", &c), GP_ERR_INVALID_ARG);
    assert_error_mentions("head_dim = 4295098368", "2147483647");
    assert_int_equal(parse("{" BASE ", \"intermediate_size\": 2147483647}", &c), GP_ERR_INVALID_ARG);
    assert_error_mentions("2 * ffn = 4294967294", NULL);
    /* head_dim defaults to hidden / heads: too many heads makes it 0. */
    assert_int_equal(parse("{" BASE ", \"num_attention_heads\": 128, \"num_key_value_heads\": 1}", &c),
                     GP_ERR_INVALID_ARG);
    assert_error_mentions("head_dim = 0", "positive");
}

static void test_hostile_floats(void **state)
{
    (void)state;
    gp_config c;
    static const char *const keys[] = { "rms_norm_eps", "rope_theta" };
    char j[512];
    for (size_t i = 0; i < 2; i++) {
        snprintf(j, sizeof j, "{" BASE ", \"%s\": 1e300}", keys[i]);
        assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
        assert_error_mentions(keys[i], "1e+300 is outside the float range");
        snprintf(j, sizeof j, "{" BASE ", \"%s\": -3.5e38}", keys[i]);
        assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
        assert_error_mentions(keys[i], "outside the float range");
        snprintf(j, sizeof j, "{" BASE ", \"%s\": 1e-300}", keys[i]);
        assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
        assert_error_mentions(keys[i], "1e-300 is too small for a float");
        /* Overflowing double, NaN and infinities are not JSON at all. */
        snprintf(j, sizeof j, "{" BASE ", \"%s\": 1e400}", keys[i]);
        assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
        assert_error_mentions("invalid JSON", "overflow");
        static const char *const not_json[] = { "NaN", "nan", "Infinity", "-Infinity", "inf" };
        for (size_t k = 0; k < 5; k++) {
            snprintf(j, sizeof j, "{" BASE ", \"%s\": %s}", keys[i], not_json[k]);
            assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
            assert_error_mentions("invalid JSON", "line 1");
        }
        snprintf(j, sizeof j, "{" BASE ", \"%s\": \"1e-5\"}", keys[i]);
        assert_int_equal(parse(j, &c), GP_ERR_FORMAT);
        assert_error_mentions(keys[i], "must be a number");
        snprintf(j, sizeof j, "{" BASE ", \"%s\": 0}", keys[i]);
        assert_int_equal(parse(j, &c), GP_ERR_INVALID_ARG);
        assert_error_mentions(i ? "rope_theta = 0" : "norm_eps (rms_norm_eps) = 0", NULL);
        snprintf(j, sizeof j, "{" BASE ", \"%s\": -1e-5}", keys[i]);
        assert_int_equal(parse(j, &c), GP_ERR_INVALID_ARG);
        assert_error_mentions("-1e-05", NULL);
    }
    /* A tiny theta made the RoPE frequencies inf
     * (tests/fuzz/regressions/config/rope_theta_denormal_inf_freq.json). */
    assert_int_equal(parse("{" BASE ", \"rope_theta\": 1e-45}", &c), GP_ERR_INVALID_ARG);
    assert_error_mentions("rope_theta = 1.4013e-45", "at least 1");
    assert_int_equal(parse("{" BASE ", \"rope_theta\": 0.5}", &c), GP_ERR_INVALID_ARG);
    assert_error_mentions("rope_theta = 0.5", "at least 1");
    assert_int_equal(parse("{" BASE ", \"rope_theta\": 1}", &c), GP_OK);
    assert_int_equal(parse("{" BASE ", \"rope_theta\": 3.4e38, \"rms_norm_eps\": 1e-44}", &c), GP_OK);

    /* llama3 scaling values. */
    const char *r = "{" BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %s,"
                    " \"low_freq_factor\": %s, \"high_freq_factor\": %s,"
                    " \"original_max_position_embeddings\": %s}}";
    static const struct { const char *f, *lo, *hi, *orig; gp_status want; const char *a, *b; } rs[] = {
        { "1e39", "1", "4", "8192", GP_ERR_FORMAT, "rope_scaling.factor", "float range" },
        { "8", "-1", "4", "8192", GP_ERR_INVALID_ARG, "low_freq_factor = -1", "> 0" },
        { "8", "0", "4", "8192", GP_ERR_INVALID_ARG, "low_freq_factor = 0", "> 0" },
        { "8", "1", "1", "8192", GP_ERR_INVALID_ARG, "high_freq_factor = 1", "greater" },
        { "8", "1", "4", "0", GP_ERR_INVALID_ARG, "original_max_position_embeddings = 0", NULL },
        { "8", "1", "4", "-8192", GP_ERR_INVALID_ARG, "original_max_position_embeddings = -8192", NULL },
        { "8", "1", "4", "8192.5", GP_ERR_FORMAT, "original_max_position_embeddings", "integer" },
        { "8", "1", "4", "4294967296", GP_ERR_FORMAT, "original_max_position_embeddings", "int range" },
        { "-8", "1", "4", "8192", GP_ERR_INVALID_ARG, "factor = -8", ">= 1" },
        { "null", "1", "4", "8192", GP_ERR_FORMAT, "rope_scaling.factor", "missing" },
    };
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) {
        snprintf(j, sizeof j, r, rs[i].f, rs[i].lo, rs[i].hi, rs[i].orig);
        assert_int_equal(parse(j, &c), rs[i].want);
        assert_error_mentions(rs[i].a, rs[i].b);
    }
}

static void test_hostile_structure(void **state)
{
    (void)state;
    gp_config c;
    /* Not an object at the top level. */
    assert_int_equal(parse("[]", &c), GP_ERR_FORMAT);
    assert_error_mentions("top level", "object");
    assert_int_equal(parse("\"config\"", &c), GP_ERR_FORMAT);
    assert_error_mentions("invalid JSON", NULL);
    assert_int_equal(parse("42", &c), GP_ERR_FORMAT);
    assert_error_mentions("invalid JSON", NULL);
    assert_int_equal(parse("null", &c), GP_ERR_FORMAT);
    assert_error_mentions("invalid JSON", NULL);
    assert_int_equal(parse("", &c), GP_ERR_FORMAT);
    assert_error_mentions("invalid JSON", NULL);
    assert_int_equal(parse("{}", &c), GP_ERR_FORMAT);
    assert_error_mentions("missing required key", "num_hidden_layers");
    /* The length bounds the text: a NUL inside, or a cut, is invalid. */
    /* jansson alone would skip this NUL (it follows a number). */
    char nul[600];
    int nn = snprintf(nul, sizeof nul, "{" BASE ", \"head_dim\": 16_}");
    nul[nn - 2] = '\0';
    assert_int_equal(parse_n(nul, (size_t)nn, &c), GP_ERR_FORMAT);
    assert_error_mentions("invalid JSON", "NUL byte at offset");
    char full[600];
    snprintf(full, sizeof full, "{" BASE "}");
    assert_int_equal(parse_n(full, strlen(full) - 1, &c), GP_ERR_FORMAT);
    assert_error_mentions("invalid JSON", NULL);
    assert_int_equal(parse_n(full, strlen(full), &c), GP_OK);
    assert_int_equal(gp_config_parse_json(NULL, 0, "x", &c), GP_ERR_INVALID_ARG);
    assert_error_mentions("NULL", NULL);
    /* Nested objects where values belong. */
    assert_int_equal(parse("{" BASE ", \"rope_scaling\": [\"llama3\"]}", &c), GP_ERR_FORMAT);
    assert_error_mentions("rope_scaling", "object or null");
    assert_int_equal(parse("{" BASE ", \"rope_parameters\": {\"rope_type\": 3}}", &c), GP_ERR_FORMAT);
    assert_error_mentions("rope_parameters.rope_type", "string");
    assert_int_equal(parse("{" BASE ", \"rope_parameters\": {}}", &c), GP_ERR_FORMAT);
    assert_error_mentions("rope_parameters", "rope_type");
    assert_int_equal(parse("{" BASE ", \"model_type\": [\"llama\"]}", &c), GP_ERR_FORMAT);
    assert_error_mentions("model_type", "string");
    assert_int_equal(parse("{" BASE ", \"hidden_act\": null, \"mlp_bias\": \"false\"}", &c),
                     GP_ERR_FORMAT);
    assert_error_mentions("mlp_bias", "true or false");
    /* Required key given as null counts as absent, as in HF. */
    assert_int_equal(parse("{" BASE ", \"vocab_size\": null}", &c), GP_ERR_FORMAT);
    assert_error_mentions("missing required key", "vocab_size");

    /* Nesting past jansson's depth limit (2048) is refused by the parser;
     * within it, an unknown key is ignored like any other. */
    size_t depth = 100000, n = 2 * depth + 600;
    char *deep = malloc(n);
    assert_non_null(deep);
    size_t at = (size_t)snprintf(deep, n, "{" BASE ", \"x\": ");
    memset(deep + at, '[', depth);
    memset(deep + at + depth, ']', depth);
    snprintf(deep + at + 2 * depth, n - at - 2 * depth, "}");
    assert_int_equal(parse(deep, &c), GP_ERR_FORMAT);
    assert_error_mentions("invalid JSON", "depth");
    depth = 1000;
    memset(deep + at, '[', depth);
    memset(deep + at + depth, ']', depth);
    snprintf(deep + at + 2 * depth, n - at - 2 * depth, "}");
    assert_int_equal(parse(deep, &c), GP_OK);
    free(deep);
}

static void test_duplicate_keys_last_wins(void **state)
{
    (void)state;
    gp_config c;
    /* HF reads config.json with Python's json module, where the last of
     * duplicate keys wins; jansson does the same, and so does greenpipe. */
    assert_int_equal(parse("{" BASE ", \"num_hidden_layers\": 7}", &c), GP_OK);
    assert_int_equal(c.n_layers, 7);
    assert_int_equal(parse("{" BASE ", \"num_hidden_layers\": 0}", &c), GP_ERR_INVALID_ARG);
}

static void test_validate_nan(void **state)
{
    (void)state;
    /* JSON cannot carry NaN; a config built in code can. */
    gp_config t;
    assert_int_equal(gp_config_preset("llama3.2-1b", &t), GP_OK);
    t.norm_eps = NAN;
    assert_int_equal(gp_config_validate(&t), GP_ERR_INVALID_ARG);
    assert_error_mentions("norm_eps", "nan");
    assert_int_equal(gp_config_preset("llama3.2-1b", &t), GP_OK);
    t.rope_theta = NAN;
    assert_int_equal(gp_config_validate(&t), GP_ERR_INVALID_ARG);
    assert_error_mentions("rope_theta", "nan");
    assert_int_equal(gp_config_preset("llama3.2-1b", &t), GP_OK);
    t.rope_theta = INFINITY;
    assert_int_equal(gp_config_validate(&t), GP_ERR_INVALID_ARG);
    assert_error_mentions("rope_theta", "inf");
    static const size_t offs[] = { offsetof(gp_config, rope_scaling.factor),
                                   offsetof(gp_config, rope_scaling.low_freq_factor),
                                   offsetof(gp_config, rope_scaling.high_freq_factor) };
    static const char *const names[] = { "factor", "low_freq_factor", "high_freq_factor" };
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(gp_config_preset("llama3.2-1b", &t), GP_OK);
        float nan = NAN;
        memcpy((char *)&t + offs[i], &nan, sizeof nan);
        assert_int_equal(gp_config_validate(&t), GP_ERR_INVALID_ARG);
        assert_error_mentions(names[i], "nan");
    }
    assert_int_equal(gp_config_preset("tiny", &t), GP_OK);
    t.rope_scaling.type = (gp_rope_type)7;
    assert_int_equal(gp_config_validate(&t), GP_ERR_INVALID_ARG);
    assert_error_mentions("rope_scaling.type = 7", NULL);
}

static void test_load_dir(void **state)
{
    (void)state;
    char dir[] = "/tmp/gp_test_cfgXXXXXX";
    assert_non_null(mkdtemp(dir));
    gp_config c;
    assert_int_equal(gp_config_load_dir(dir, &c), GP_ERR_NOT_FOUND);
    assert_error_mentions(dir, "config.json");

    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(llama31_classic, f);
    fclose(f);
    assert_int_equal(gp_config_load_dir(dir, &c), GP_OK);
    assert_string_equal(c.name, strrchr(dir, '/') + 1);
    assert_int_equal(c.n_layers, 32);
    assert_int_equal(c.rope_scaling.type, GP_ROPE_LLAMA3);

    char slash[300];
    snprintf(slash, sizeof slash, "%s/", dir); /* trailing slash keeps the basename */
    assert_int_equal(gp_config_load_dir(slash, &c), GP_OK);
    assert_string_equal(c.name, strrchr(dir, '/') + 1);

    unlink(path);
    rmdir(dir);
}

/* ---------------------------------------------------------------- RoPE */

static void assert_rel(double got, double want, double tol, int i)
{
    if (fabs(got - want) > tol * fabs(want))
        fail_msg("inv_freq[%d] = %.9g, want %.9g (rel tol %g)", i, got, want, tol);
}

static void test_inv_freq_default(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    float f[8];
    gp_rope_inv_freq(&c, f);
    /* 10000^(-2i/16) = 10^(-i/2) */
    assert_rel(f[0], 1.0, 1e-7, 0);
    assert_rel(f[1], 0.31622776601683794, 1e-7, 1);
    assert_rel(f[4], 0.01, 1e-7, 4);
    assert_rel(f[7], 0.00031622776601683794, 1e-7, 7);
}

static void test_inv_freq_llama3(void **state)
{
    (void)state;
    gp_config c;
    assert_int_equal(gp_config_preset("llama3.2-1b", &c), GP_OK);
    float f[32];
    gp_rope_inv_freq(&c, f);
    /* base = 500000^(-i/32); wavelength 2*pi/base. With original 8192, low 1,
     * high 4: wavelengths under 2048 keep base, over 8192 get base/32, and in
     * between smooth = (8192/wavelen - 1)/3 mixes the two. */
    assert_rel(f[0], 1.0, 1e-7, 0);                        /* wavelen 6.28: kept */
    assert_rel(f[1], 0.6636012376960885, 1e-7, 1);         /* kept */
    assert_rel(f[14], 0.003211445994752591, 1e-6, 14);     /* wavelen 1956: kept */
    /* i = 15: base 0.0021311195369, wavelen 2948.30, smooth 0.592847;
     * (1 - s) * base / 32 + s * base */
    assert_rel(f[15], 0.001290547928209264, 1e-6, 15);
    assert_rel(f[16], 0.00042955679655936815, 1e-6, 16);   /* wavelen 4442.9: smooth */
    assert_rel(f[17], 9.70828780262767e-05, 1e-6, 17);     /* wavelen 6695.1: smooth */
    assert_rel(f[18], 0.000622772421914596 / 32, 1e-6, 18); /* wavelen 10089: /32 */
    assert_rel(f[31], 3.013858152139171e-06 / 32, 1e-6, 31);

    /* Llama-3.1's factor 8 at head_dim 128 */
    float g[64];
    c.head_dim = 128;
    c.rope_scaling.factor = 8.0f;
    gp_rope_inv_freq(&c, g);
    assert_rel(g[20], 0.016560440080994446, 1e-6, 20);
    assert_rel(g[31], 0.0008567514129196321, 1e-6, 31);
    assert_rel(g[34], 0.0001785078127679964, 1e-6, 34);
    assert_rel(g[63], 3.068925988914511e-07, 1e-6, 63);
}

/* HF's own values (transformers 5.24, torch 2.15: the rotary inv_freq buffer
 * of the checkpoints tests/hf/make_reference.py makes), bit for bit: tiny
 * (default RoPE, theta 1e4, head_dim 16) and long-gqa (llama3 factor 8, low
 * 1, high 4, original 1024, theta 5e5, head_dim 128: all three regimes). The
 * correctly rounded formula misses 13 of long-gqa's 64 by 1-2 ulp. */
static void test_inv_freq_hf_bits(void **state)
{
    (void)state;
    static const float tiny_hf[8] = {
        0x1p+0f, 0x1.43d136p-2f, 0x1.99999ap-4f, 0x1.030dc6p-5f, 0x1.47ae14p-7f, 0x1.9e7c7p-9f,
        0x1.0624dep-10f, 0x1.4b96cp-12f};
    static const float long_hf[64] = {
        0x1p+0f, 0x1.a11582p-1f, 0x1.53c38cp-1f, 0x1.14c708p-1f, 0x1.c2ef78p-2f, 0x1.6f56fap-2f,
        0x1.2b3dc6p-2f, 0x1.e788c2p-3f, 0x1.8d276p-3f, 0x1.43874p-3f, 0x1.078d4p-3f, 0x1.ad6338p-4f,
        0x1.5dc95ap-4f, 0x1.1cf13p-4f, 0x1.d03ccep-5f, 0x1.7a2d08p-5f, 0x1.34119p-5f, 0x1.f5ea7ep-6f,
        0x1.98de92p-6f, 0x1.0a5864p-6f, 0x1.50ba4ep-7f, 0x1.a396e6p-8f, 0x1.00301p-8f, 0x1.2fc23p-9f,
        0x1.58150cp-10f, 0x1.8554ecp-11f, 0x1.3d2804p-11f, 0x1.025c6ap-11f, 0x1.a4ee4p-12f, 0x1.56e5b8p-12f,
        0x1.175482p-12f, 0x1.c7182p-13f, 0x1.72ba42p-13f, 0x1.2e0046p-13f, 0x1.ec07d4p-14f, 0x1.90d10cp-14f,
        0x1.46831ap-14f, 0x1.09fb7ep-14f, 0x1.b15902p-15f, 0x1.610332p-15f, 0x1.1f91fp-15f, 0x1.d484dep-16f,
        0x1.7da9e8p-16f, 0x1.36e8eap-16f, 0x1.fa8b86p-17f, 0x1.9ca3eap-17f, 0x1.5024d6p-17f, 0x1.11d41ep-17f,
        0x1.be2188p-18f, 0x1.6b6d0ep-18f, 0x1.280d96p-18f, 0x1.e257p-19f, 0x1.88ec2p-19f, 0x1.4014d2p-19f,
        0x1.04be68p-19f, 0x1.a8d01p-20f, 0x1.5a0f4ep-20f, 0x1.19e8p-20f, 0x1.cb4a9ap-21f, 0x1.76258ep-21f,
        0x1.30c94ep-21f, 0x1.f09184p-22f, 0x1.94836p-22f, 0x1.4985fep-22f};
    gp_config c;
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    float f[64];
    gp_rope_inv_freq(&c, f);
    for (int i = 0; i < 8; i++)
        if (f[i] != tiny_hf[i])
            fail_msg("tiny inv_freq[%d] = %a, HF has %a", i, (double)f[i], (double)tiny_hf[i]);
    c.head_dim = 128;
    c.rope_theta = 500000.0f;
    c.rope_scaling = (gp_rope_scaling){.type = GP_ROPE_LLAMA3, .factor = 8.0f, .low_freq_factor = 1.0f,
                                       .high_freq_factor = 4.0f, .original_max_pos = 1024};
    gp_rope_inv_freq(&c, f);
    for (int i = 0; i < 64; i++)
        if (f[i] != long_hf[i])
            fail_msg("long-gqa inv_freq[%d] = %a, HF has %a", i, (double)f[i], (double)long_hf[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preset_tiny),
        cmocka_unit_test(test_preset_llama32_1b),
        cmocka_unit_test(test_preset_llama3_8b_default),
        cmocka_unit_test(test_preset_llama3_70b),
        cmocka_unit_test(test_preset_unknown),
        cmocka_unit_test(test_parse_classic),
        cmocka_unit_test(test_parse_rope_parameters),
        cmocka_unit_test(test_parse_defaults),
        cmocka_unit_test(test_parse_missing_key),
        cmocka_unit_test(test_parse_wrong_type),
        cmocka_unit_test(test_parse_unsupported),
        cmocka_unit_test(test_parse_mistral),
        cmocka_unit_test(test_parse_qwen2),
        cmocka_unit_test(test_parse_llama_bias),
        cmocka_unit_test(test_parse_invalid_values),
        cmocka_unit_test(test_hostile_ints),
        cmocka_unit_test(test_hostile_int_products),
        cmocka_unit_test(test_hostile_floats),
        cmocka_unit_test(test_hostile_structure),
        cmocka_unit_test(test_duplicate_keys_last_wins),
        cmocka_unit_test(test_validate_nan),
        cmocka_unit_test(test_load_dir),
        cmocka_unit_test(test_inv_freq_default),
        cmocka_unit_test(test_inv_freq_llama3),
        cmocka_unit_test(test_inv_freq_hf_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
