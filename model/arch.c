/* The architecture table: one entry per model family (HF model_type) with
 * its config keys, checkpoint tensor names and features. Everything the
 * engine knows about how a family spells its checkpoints lives here. */
#include "gp_model.h"

#include <stdio.h>
#include <string.h>

/* The numeric keys of HF's LlamaConfig; Mistral and Qwen2 configs use the
 * same names. Required keys are those every released checkpoint sets. */
static const gp_arch_key gp_llama_keys[] = {
    {GP_CF_N_LAYERS, "num_hidden_layers", true},
    {GP_CF_HIDDEN, "hidden_size", true},
    {GP_CF_N_HEADS, "num_attention_heads", true},
    {GP_CF_N_KV_HEADS, "num_key_value_heads", false},
    {GP_CF_HEAD_DIM, "head_dim", false},
    {GP_CF_FFN, "intermediate_size", true},
    {GP_CF_VOCAB, "vocab_size", true},
    {GP_CF_NORM_EPS, "rms_norm_eps", true},
    {GP_CF_MAX_CONTEXT, "max_position_embeddings", true},
    {GP_CF_ROPE_THETA, "rope_theta", false},
};

/* Llama's checkpoint names; Mistral and Qwen2 save the same modules. */
#define GP_LLAMA_MODULES                                                                           \
    {                                                                                              \
        [GP_AT_EMBED] = "model.embed_tokens",                                                      \
        [GP_AT_FINAL_NORM] = "model.norm",                                                         \
        [GP_AT_LM_HEAD] = "lm_head",                                                               \
        [GP_AT_ATTN_NORM] = "input_layernorm",                                                     \
        [GP_AT_Q] = "self_attn.q_proj",                                                            \
        [GP_AT_K] = "self_attn.k_proj",                                                            \
        [GP_AT_V] = "self_attn.v_proj",                                                            \
        [GP_AT_O] = "self_attn.o_proj",                                                            \
        [GP_AT_FFN_NORM] = "post_attention_layernorm",                                             \
        [GP_AT_GATE] = "mlp.gate_proj",                                                            \
        [GP_AT_UP] = "mlp.up_proj",                                                                \
        [GP_AT_DOWN] = "mlp.down_proj",                                                            \
    }

static const gp_arch gp_archs[] = {
    {
        .model_type = "llama",
        .keys = gp_llama_keys,
        .n_keys = sizeof gp_llama_keys / sizeof gp_llama_keys[0],
        .hidden_act = "silu",
        .tie_key = "tie_word_embeddings",
        .tie_default = false, /* LlamaConfig's default */
        .rope_theta_default = 10000.0f,
        .rope_types = (1u << GP_ROPE_DEFAULT) | (1u << GP_ROPE_LLAMA3),
        .bias = 0,
        .bias_keys = {{"attention_bias", GP_AT_ATTN_PROJS}, {"mlp_bias", GP_AT_MLP_PROJS}},
        .norm = GP_NORM_PRE,
        .layer_prefix = "model.layers.",
        .module = GP_LLAMA_MODULES,
        .ignored_suffix = "rotary_emb.inv_freq",
    },
    {
        /* Llama's architecture; attention may be restricted to a sliding
         * window, which the engine does not implement: accepted only when it
         * never bites (null, or at least max_position_embeddings). */
        .model_type = "mistral",
        .keys = gp_llama_keys,
        .n_keys = sizeof gp_llama_keys / sizeof gp_llama_keys[0],
        .hidden_act = "silu",
        .tie_key = "tie_word_embeddings",
        .tie_default = false, /* MistralConfig's default */
        .rope_theta_default = 10000.0f, /* MistralConfig's default */
        .rope_types = (1u << GP_ROPE_DEFAULT) | (1u << GP_ROPE_LLAMA3),
        .bias = 0,
        .bias_keys = {{NULL, 0}},
        .norm = GP_NORM_PRE,
        .sliding_window_key = "sliding_window",
        .layer_prefix = "model.layers.",
        .module = GP_LLAMA_MODULES,
        .ignored_suffix = "rotary_emb.inv_freq",
    },
    {
        /* Llama's architecture with a bias on q, k and v (not o). Sliding
         * windows only when use_sliding_window is true, and then on the
         * layers from max_window_layers on. */
        .model_type = "qwen2",
        .keys = gp_llama_keys,
        .n_keys = sizeof gp_llama_keys / sizeof gp_llama_keys[0],
        .hidden_act = "silu",
        .tie_key = "tie_word_embeddings",
        .tie_default = false, /* Qwen2Config's default */
        .rope_theta_default = 10000.0f, /* Qwen2Config's default (released models set 1e6) */
        .rope_types = (1u << GP_ROPE_DEFAULT) | (1u << GP_ROPE_LLAMA3),
        .bias = GP_AT_BIT(GP_AT_Q) | GP_AT_BIT(GP_AT_K) | GP_AT_BIT(GP_AT_V),
        .bias_keys = {{NULL, 0}},
        .norm = GP_NORM_PRE,
        .sliding_window_key = "sliding_window",
        .use_sliding_window_key = "use_sliding_window",
        .max_window_layers_key = "max_window_layers",
        .layer_prefix = "model.layers.",
        .module = GP_LLAMA_MODULES,
        .ignored_suffix = "rotary_emb.inv_freq",
    },
};
#define GP_N_ARCHS (sizeof gp_archs / sizeof gp_archs[0])

const gp_arch *gp_arch_find(const char *model_type)
{
    if (!model_type)
        return NULL;
    for (size_t i = 0; i < GP_N_ARCHS; i++)
        if (strcmp(model_type, gp_archs[i].model_type) == 0)
            return &gp_archs[i];
    return NULL;
}

const gp_arch *gp_arch_default(void)
{
    return &gp_archs[0];
}

const gp_arch *gp_config_arch(const gp_config *cfg)
{
    return cfg && cfg->arch ? cfg->arch : gp_arch_default();
}

const char *gp_arch_names(char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return "";
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < GP_N_ARCHS && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s\"%s\"", i ? ", " : "", gp_archs[i].model_type);
    return buf;
}

/* Short names of the projections for messages: the module's last part. */
static const char *gp_module_leaf(const gp_arch *a, gp_arch_tensor t)
{
    const char *m = a->module[t], *dot = strrchr(m, '.');
    return dot ? dot + 1 : m;
}

/* "q_proj, k_proj" for the projections in set, into buf. */
static const char *gp_proj_list(const gp_arch *a, unsigned set, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int t = 0; t < GP_AT_COUNT && at < cap; t++)
        if (set & GP_AT_BIT(t))
            at += (size_t)snprintf(buf + at, cap - at, "%s%s", at ? ", " : "",
                                   a->module[t] ? gp_module_leaf(a, (gp_arch_tensor)t) : "?");
    return buf;
}

gp_status gp_arch_check_supported(const gp_arch *a, unsigned bias, const char *label)
{
    if (!a)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_arch_check_supported: arch is NULL");
    if (!label)
        label = a->model_type;
    bias |= a->bias;
    unsigned missing = bias & ~GP_AT_QKV_PROJS; /* biases the engine does not implement */
    if ((bias & GP_AT_QKV_PROJS) && (bias & GP_AT_QKV_PROJS) != GP_AT_QKV_PROJS)
        missing |= bias & GP_AT_QKV_PROJS; /* q/k/v biases come as the three or none */
    if (missing) {
        char list[160], all[160];
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: model_type \"%s\" has a bias on %s; the engine implements "
                "projection biases on q_proj, k_proj and v_proj together only, not on %s", label,
                a->model_type, gp_proj_list(a, bias, all, sizeof all),
                gp_proj_list(a, missing, list, sizeof list));
    }
    if (a->norm != GP_NORM_PRE)
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: model_type \"%s\": norm placement %d is not supported "
                "(only pre-norm)", label, a->model_type, (int)a->norm);
    return GP_OK;
}

bool gp_arch_tensor_name(const gp_arch *a, gp_arch_tensor t, int layer, bool bias, char *buf,
                         size_t cap)
{
    if (!a || !buf || cap == 0 || (unsigned)t >= GP_AT_COUNT || !a->module[t])
        return false;
    const char *kind = bias ? "bias" : "weight";
    int n = t >= GP_AT_FIRST_LAYER
                ? snprintf(buf, cap, "%s%d.%s.%s", a->layer_prefix, layer, a->module[t], kind)
                : snprintf(buf, cap, "%s.%s", a->module[t], kind);
    return n >= 0 && (size_t)n < cap;
}

/* If name is "<module>.weight" or "<module>.bias", sets *bias and returns 1. */
static int gp_match_module(const char *name, const char *module, bool *bias)
{
    size_t m = strlen(module);
    if (strncmp(name, module, m) != 0 || name[m] != '.')
        return 0;
    if (strcmp(name + m + 1, "weight") == 0)
        return *bias = false, 1;
    if (strcmp(name + m + 1, "bias") == 0)
        return *bias = true, 1;
    return 0;
}

bool gp_arch_tensor_parse(const gp_arch *a, const char *name, int n_layers, gp_arch_tensor *t,
                          int *layer, bool *bias)
{
    if (!a || !name || !t || !layer || !bias)
        return false;
    for (int k = 0; k < GP_AT_FIRST_LAYER; k++)
        if (a->module[k] && gp_match_module(name, a->module[k], bias)) {
            *t = (gp_arch_tensor)k;
            *layer = -1;
            return true;
        }
    size_t plen = strlen(a->layer_prefix);
    if (strncmp(name, a->layer_prefix, plen) != 0)
        return false;
    const char *p = name + plen;
    /* decimal layer index without leading zeros, below n_layers */
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '.'))
        return false;
    long l = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        l = l * 10 + (*p - '0');
        if (l >= n_layers)
            return false;
    }
    if (*p++ != '.')
        return false;
    for (int k = GP_AT_FIRST_LAYER; k < GP_AT_COUNT; k++)
        if (a->module[k] && gp_match_module(p, a->module[k], bias)) {
            *t = (gp_arch_tensor)k;
            *layer = (int)l;
            return true;
        }
    return false;
}
