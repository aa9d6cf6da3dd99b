/* Tests of model/arch.c: looking families up, tensor names both ways, and
 * the refusal of features the engine does not implement (a local entry with
 * biases stands for a family such as Qwen2). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "gp_model.h"

static void assert_error_mentions(const char *a, const char *b)
{
    const char *e = gp_last_error();
    if (!strstr(e, a) || (b && !strstr(e, b)))
        fail_msg("message \"%s\" should mention \"%s\"%s%s", e, a, b ? " and " : "", b ? b : "");
}

static void test_find(void **state)
{
    (void)state;
    const gp_arch *a = gp_arch_find("llama");
    assert_non_null(a);
    assert_string_equal(a->model_type, "llama");
    assert_ptr_equal(gp_arch_default(), a);
    assert_int_equal(a->bias, 0);
    assert_int_equal(a->norm, GP_NORM_PRE);
    assert_false(a->tie_default);
    assert_string_equal(a->tie_key, "tie_word_embeddings");
    assert_true(a->rope_types & (1u << GP_ROPE_DEFAULT));
    assert_true(a->rope_types & (1u << GP_ROPE_LLAMA3));
    assert_true(a->rope_theta_default == 10000.0f);
    assert_int_equal(gp_arch_check_supported(a, 0, "x"), GP_OK);

    const gp_arch *m = gp_arch_find("mistral"), *q = gp_arch_find("qwen2");
    assert_non_null(m);
    assert_non_null(q);
    assert_int_equal(m->bias, 0);
    assert_int_equal(q->bias, GP_AT_QKV_PROJS);
    assert_false(m->tie_default); /* MistralConfig and Qwen2Config: tie_word_embeddings=False */
    assert_false(q->tie_default);
    assert_true(m->rope_theta_default == 10000.0f && q->rope_theta_default == 10000.0f);
    assert_string_equal(m->sliding_window_key, "sliding_window");
    assert_null(m->use_sliding_window_key);
    assert_string_equal(q->use_sliding_window_key, "use_sliding_window");
    assert_string_equal(q->max_window_layers_key, "max_window_layers");
    assert_int_equal(gp_arch_check_supported(m, 0, "x"), GP_OK);
    assert_int_equal(gp_arch_check_supported(q, 0, "x"), GP_OK); /* q/k/v biases are implemented */
    assert_null(gp_arch_find("mixtral"));
    assert_null(gp_arch_find("Llama"));
    assert_null(gp_arch_find(""));
    assert_null(gp_arch_find(NULL));

    char names[64];
    assert_string_equal(gp_arch_names(names, sizeof names), "\"llama\", \"mistral\", \"qwen2\"");
    char tiny[4];
    gp_arch_names(tiny, sizeof tiny); /* truncates, stays terminated */
    assert_true(strlen(tiny) < sizeof tiny);
}

static void test_config_arch(void **state)
{
    (void)state;
    gp_config c;
    memset(&c, 0, sizeof c);
    assert_ptr_equal(gp_config_arch(&c), gp_arch_default());
    assert_ptr_equal(gp_config_arch(NULL), gp_arch_default());
    assert_int_equal(gp_config_preset("tiny", &c), GP_OK);
    assert_ptr_equal(c.arch, gp_arch_find("llama"));

    static const char json[] =
        "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 64,"
        " \"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 256,"
        " \"rms_norm_eps\": 1e-5, \"max_position_embeddings\": 256}";
    assert_int_equal(gp_config_parse_json(json, strlen(json), "cfg", &c), GP_OK);
    assert_ptr_equal(c.arch, gp_arch_find("llama"));
    assert_false(c.tied_embeddings); /* the entry's default */
    assert_true(c.rope_theta == 10000.0f);

    static const char other[] = "{\"model_type\": \"falcon\"}";
    assert_int_equal(gp_config_parse_json(other, strlen(other), "cfg", &c), GP_ERR_UNSUPPORTED);
    assert_error_mentions("\"falcon\"", "supported: \"llama\"");
}

static void test_tensor_names(void **state)
{
    (void)state;
    const gp_arch *a = gp_arch_find("llama");
    static const struct { gp_arch_tensor t; int layer; const char *name; } want[] = {
        {GP_AT_EMBED, -1, "model.embed_tokens.weight"},
        {GP_AT_FINAL_NORM, -1, "model.norm.weight"},
        {GP_AT_LM_HEAD, -1, "lm_head.weight"},
        {GP_AT_ATTN_NORM, 0, "model.layers.0.input_layernorm.weight"},
        {GP_AT_Q, 3, "model.layers.3.self_attn.q_proj.weight"},
        {GP_AT_K, 3, "model.layers.3.self_attn.k_proj.weight"},
        {GP_AT_V, 3, "model.layers.3.self_attn.v_proj.weight"},
        {GP_AT_O, 3, "model.layers.3.self_attn.o_proj.weight"},
        {GP_AT_FFN_NORM, 10, "model.layers.10.post_attention_layernorm.weight"},
        {GP_AT_GATE, 10, "model.layers.10.mlp.gate_proj.weight"},
        {GP_AT_UP, 10, "model.layers.10.mlp.up_proj.weight"},
        {GP_AT_DOWN, 10, "model.layers.10.mlp.down_proj.weight"},
    };
    char buf[128];
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_true(gp_arch_tensor_name(a, want[i].t, want[i].layer, false, buf, sizeof buf));
        assert_string_equal(buf, want[i].name);
        gp_arch_tensor t;
        int layer;
        bool bias = true;
        assert_true(gp_arch_tensor_parse(a, want[i].name, 11, &t, &layer, &bias));
        assert_int_equal(t, want[i].t);
        assert_int_equal(layer, want[i].layer);
        assert_false(bias);
    }
    assert_true(gp_arch_tensor_name(a, GP_AT_Q, 1, true, buf, sizeof buf));
    assert_string_equal(buf, "model.layers.1.self_attn.q_proj.bias");
    assert_false(gp_arch_tensor_name(a, GP_AT_Q, 1, false, buf, 10)); /* does not fit */
    assert_false(gp_arch_tensor_name(a, GP_AT_COUNT, 0, false, buf, sizeof buf));

    gp_arch_tensor t;
    int layer;
    bool bias;
    assert_true(gp_arch_tensor_parse(a, "model.layers.1.self_attn.q_proj.bias", 2, &t, &layer, &bias));
    assert_true(bias);
    assert_int_equal(t, GP_AT_Q);
    static const char *const not_ours[] = {
        "model.layers.2.input_layernorm.weight", /* layer out of range */
        "model.layers.01.input_layernorm.weight", /* leading zero */
        "model.layers.-1.input_layernorm.weight",
        "model.layers.0.self_attn.rotary_emb.inv_freq",
        "model.layers.0.self_attn.q_proj",
        "model.layers.0.self_attn.q_proj.weightx",
        "model.norm.weight.extra",
        "model.embed_tokens",
        "transformer.wte.weight",
        "",
    };
    for (size_t i = 0; i < sizeof not_ours / sizeof not_ours[0]; i++)
        if (gp_arch_tensor_parse(a, not_ours[i], 2, &t, &layer, &bias))
            fail_msg("'%s' should not parse as a llama tensor", not_ours[i]);
}

/* q/k/v biases (all three) are implemented; any other projection bias, or
 * only some of q/k/v, is refused with a message that names the family and
 * the projections. */
static void test_bias_refused(void **state)
{
    (void)state;
    gp_arch biased = *gp_arch_find("llama");
    biased.model_type = "biased-llama";
    biased.bias = GP_AT_QKV_PROJS;
    assert_int_equal(gp_arch_check_supported(&biased, 0, "dir/config.json"), GP_OK);
    biased.bias = GP_AT_ATTN_PROJS; /* llama's attention_bias: o_proj too */
    assert_int_equal(gp_arch_check_supported(&biased, 0, "dir/config.json"), GP_ERR_UNSUPPORTED);
    assert_error_mentions("dir/config.json", "\"biased-llama\"");
    assert_error_mentions("not on o_proj", "bias");
    biased.bias = GP_AT_BIT(GP_AT_Q);
    assert_int_equal(gp_arch_check_supported(&biased, 0, "x"), GP_ERR_UNSUPPORTED);
    assert_error_mentions("not on q_proj", NULL);

    /* Biases a config key adds are refused the same way. */
    const gp_arch *llama = gp_arch_find("llama");
    assert_int_equal(gp_arch_check_supported(llama, GP_AT_MLP_PROJS, NULL), GP_ERR_UNSUPPORTED);
    assert_error_mentions("gate_proj, up_proj, down_proj", "\"llama\"");

    gp_arch post = *llama;
    post.norm = (gp_norm_placement)1;
    assert_int_equal(gp_arch_check_supported(&post, 0, "x"), GP_ERR_UNSUPPORTED);
    assert_error_mentions("norm placement", "pre-norm");
    assert_int_equal(gp_arch_check_supported(NULL, 0, "x"), GP_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_config_arch),
        cmocka_unit_test(test_tensor_names),
        cmocka_unit_test(test_bias_refused),
    };
    return cmocka_run_group_tests_name("cfg_arch", tests, NULL, NULL);
}
