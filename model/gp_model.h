/* greenpipe model: what a Llama-family model is and where its weights come
 * from: config and presets, architectures, host weights (synthetic or HF
 * safetensors), the model source and identity, and the cost of a step. */
#ifndef GP_MODEL_H
#define GP_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- config */

typedef enum gp_rope_type { GP_ROPE_DEFAULT = 0, GP_ROPE_LLAMA3 = 1 } gp_rope_type;

typedef struct gp_rope_scaling {
    gp_rope_type type;
    float factor;            /* llama3: 8 for Llama-3.1 */
    float low_freq_factor;   /* llama3: 1 */
    float high_freq_factor;  /* llama3: 4 */
    int original_max_pos;    /* llama3: 8192 */
} gp_rope_scaling;

typedef struct gp_arch gp_arch; /* the model family: see "architectures" below */

typedef struct gp_config {
    char name[64];      /* preset name or checkpoint directory basename */
    const gp_arch *arch; /* family (config.json model_type); NULL reads as llama */
    int n_layers;
    int hidden;         /* model width */
    int n_heads;        /* query heads */
    int n_kv_heads;     /* key/value heads (GQA: divides n_heads) */
    int head_dim;
    int ffn;            /* intermediate size of the SwiGLU FFN */
    int vocab;
    float norm_eps;     /* RMSNorm epsilon */
    float rope_theta;
    gp_rope_scaling rope_scaling;
    bool tied_embeddings; /* lm_head shares embed_tokens */
    int max_context;    /* max_position_embeddings */
    bool qkv_bias;      /* q, k and v projections have a bias (qwen2; llama's attention_bias,
                           which also biases o_proj, is refused) */
    int vocab_parts;    /* 0 or 1: the embedding and head hold every token; n > 1: they are cut
                           by vocabulary into n parts of gp_config_vocab_rows rows and these
                           weights hold one of them (a tensor parallel rank's, gp_tp_config) */
} gp_config;

/* Presets: "tiny", "llama3.2-1b", "llama3-8b" (the default), "llama3-70b". */
#define GP_DEFAULT_PRESET "llama3-8b"
gp_status gp_config_preset(const char *name, gp_config *out);
/* Comma-separated preset names, for messages. */
const char *gp_config_preset_names(void);
/* Parse an HF config.json held in memory (classic rope_theta/rope_scaling or
 * the newer rope_parameters form). label names the source in messages. */
gp_status gp_config_parse_json(const char *text, size_t len, const char *label, gp_config *out);
/* Read DIR/config.json. */
gp_status gp_config_load_dir(const char *dir, gp_config *out);
/* Checks every field is in range and consistent (heads divisible, etc.). */
gp_status gp_config_validate(const gp_config *cfg);
/* Total parameter count (embeddings + layers + norm + lm_head if untied). */
uint64_t gp_config_param_count(const gp_config *cfg);
/* Rows of the fused QKV projection: (n_heads + 2 n_kv_heads) * head_dim. */
static inline int gp_config_qkv_rows(const gp_config *c)
{
    return (c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
}
/* The rows of each part of a vocabulary of V cut into parts: ceil(V /
 * parts) (part r holds tokens [r rows, r rows + rows), the last part's
 * tail rows are padding). */
static inline int gp_vocab_part_rows(int V, int parts)
{
    return (V + parts - 1) / parts;
}
/* The tokens part r of a vocabulary of V cut into parts holds: the rows of
 * the others, fewer (maybe 0) for the last. */
static inline int gp_vocab_part_tokens(int V, int parts, int r)
{
    const long long s = gp_vocab_part_rows(V, parts), lo = r * s;
    return lo >= V ? 0 : V - lo < s ? (int)(V - lo) : (int)s;
}
/* The parts the embedding and head are cut into (1: whole), and the rows
 * of each these weights hold: vocab, or gp_vocab_part_rows when they are
 * cut by vocabulary (the last part's tail rows zero). */
static inline int gp_config_vocab_parts(const gp_config *c)
{
    return c->vocab_parts > 1 ? c->vocab_parts : 1;
}
static inline int gp_config_vocab_rows(const gp_config *c)
{
    return gp_vocab_part_rows(c->vocab, gp_config_vocab_parts(c));
}
/* Inverse frequencies for RoPE after scaling: out[head_dim/2]. */
void gp_rope_inv_freq(const gp_config *cfg, float *out);

/* ---------------------------------------------------------- architectures */

/* One model family, named by config.json's model_type: what its config keys
 * and checkpoint tensors are called and which features it uses. A family
 * whose features the engine implements is one entry in model/arch.c. */

/* Where RMSNorm sits in a block: today only pre-norm, x + f(norm(x)). */
typedef enum gp_norm_placement { GP_NORM_PRE = 0 } gp_norm_placement;

/* The weights of a model as a checkpoint holds them (before the engine fuses
 * q/k/v and gate/up). Model tensors first, then the per-layer ones. */
typedef enum gp_arch_tensor {
    GP_AT_EMBED = 0, GP_AT_FINAL_NORM, GP_AT_LM_HEAD,
    GP_AT_ATTN_NORM, GP_AT_Q, GP_AT_K, GP_AT_V, GP_AT_O,
    GP_AT_FFN_NORM, GP_AT_GATE, GP_AT_UP, GP_AT_DOWN,
    GP_AT_COUNT
} gp_arch_tensor;
#define GP_AT_FIRST_LAYER GP_AT_ATTN_NORM
/* Set of tensors (projections, for biases): bit (1u << t). */
#define GP_AT_BIT(t) (1u << (unsigned)(t))
#define GP_AT_ATTN_PROJS (GP_AT_BIT(GP_AT_Q) | GP_AT_BIT(GP_AT_K) | GP_AT_BIT(GP_AT_V) | GP_AT_BIT(GP_AT_O))
#define GP_AT_QKV_PROJS (GP_AT_BIT(GP_AT_Q) | GP_AT_BIT(GP_AT_K) | GP_AT_BIT(GP_AT_V))
#define GP_AT_MLP_PROJS (GP_AT_BIT(GP_AT_GATE) | GP_AT_BIT(GP_AT_UP) | GP_AT_BIT(GP_AT_DOWN))

/* gp_config fields read from numeric config.json keys. */
typedef enum gp_config_field {
    GP_CF_N_LAYERS = 0, GP_CF_HIDDEN, GP_CF_N_HEADS, GP_CF_N_KV_HEADS, GP_CF_HEAD_DIM, GP_CF_FFN,
    GP_CF_VOCAB, GP_CF_NORM_EPS, GP_CF_MAX_CONTEXT, GP_CF_ROPE_THETA,
} gp_config_field;

/* A numeric config key. Optional keys left out take the HF default:
 * n_kv_heads = n_heads, head_dim = hidden / n_heads, rope_theta from the
 * entry. */
typedef struct gp_arch_key {
    gp_config_field field;
    const char *key;
    bool required;
} gp_arch_key;

/* A boolean config key that, when true, gives the projections in projs a bias. */
typedef struct gp_arch_bias_key {
    const char *key;
    unsigned projs; /* GP_AT_BIT set */
} gp_arch_bias_key;

#define GP_ARCH_MAX_BIAS_KEYS 2

struct gp_arch {
    const char *model_type;      /* HF config.json model_type */
    /* config.json */
    const gp_arch_key *keys;     /* numeric keys, in the order they are read */
    size_t n_keys;
    const char *hidden_act;      /* the one activation accepted (absent: accepted) */
    const char *tie_key;         /* boolean key for tied embeddings */
    bool tie_default;            /* its value when absent */
    float rope_theta_default;    /* when the theta key is absent */
    unsigned rope_types;         /* accepted rope types: bit (1u << gp_rope_type) */
    unsigned bias;               /* projections that always have a bias: GP_AT_BIT set */
    gp_arch_bias_key bias_keys[GP_ARCH_MAX_BIAS_KEYS]; /* unused slots: key NULL */
    gp_norm_placement norm;
    /* Sliding-window attention, which the engine does not implement: config
     * keys (NULL when the family has none). sliding_window_key: the window
     * (null or absent: none); use_sliding_window_key: a boolean that must be
     * true for the window to apply; max_window_layers_key: layers below it
     * use full attention. A window that would bite is refused. */
    const char *sliding_window_key;
    const char *use_sliding_window_key;
    const char *max_window_layers_key;
    /* checkpoint tensors: a model tensor is "<module>.weight"; a layer tensor
     * is "<layer_prefix><index>.<module>.weight"; a bias ends in ".bias". */
    const char *layer_prefix;
    const char *module[GP_AT_COUNT];
    const char *ignored_suffix;  /* tensors HF may save that the engine recomputes */
};

/* The entry for model_type, or NULL when the engine knows no such family. */
const gp_arch *gp_arch_find(const char *model_type);
/* The family of presets and of configs whose arch is NULL: llama. */
const gp_arch *gp_arch_default(void);
/* cfg->arch, or gp_arch_default() when it is NULL. */
const gp_arch *gp_config_arch(const gp_config *cfg);
/* Supported model types for messages: "\"llama\", \"mistral\", \"qwen2\"", into buf. */
const char *gp_arch_names(char *buf, size_t cap);
/* Refuse features of arch the engine does not implement yet: a bias on a
 * projection other than q/k/v, or on only some of q/k/v (arch->bias plus
 * the extra projections in bias), or a norm placement other than pre-norm.
 * label names the source in messages. */
gp_status gp_arch_check_supported(const gp_arch *arch, unsigned bias, const char *label);
/* Checkpoint name of tensor t (layer is used by per-layer tensors), ".bias"
 * instead of ".weight" when bias. False when it does not fit in cap. */
bool gp_arch_tensor_name(const gp_arch *arch, gp_arch_tensor t, int layer, bool bias, char *buf,
                         size_t cap);
/* The inverse, for a model of n_layers: true when name is the weight or bias
 * of a tensor of arch (layer indices in decimal without leading zeros, below
 * n_layers); *layer is -1 for model tensors. */
bool gp_arch_tensor_parse(const gp_arch *arch, const char *name, int n_layers, gp_arch_tensor *t,
                          int *layer, bool *bias);

/* ---------------------------------------------------------------- weights */

/* Engine layout, row-major [out][in] as in HF Linear. Every tensor holds
 * elements of the weights' dtype (gp_host_weights.dtype). */
typedef struct gp_layer_weights {
    void *attn_norm;  /* [hidden] */
    void *wqkv;       /* [qkv_rows][hidden]: q rows, then k rows, then v rows */
    void *bqkv;       /* [qkv_rows] q, k, v biases; NULL when !cfg.qkv_bias */
    void *wo;         /* [hidden][n_heads*head_dim] */
    void *ffn_norm;   /* [hidden] */
    void *w_gate_up;  /* [2*ffn][hidden]: gate rows, then up rows */
    void *w_down;     /* [hidden][ffn] */
} gp_layer_weights;

typedef struct gp_host_weights {
    gp_config cfg;
    gp_dtype dtype;   /* element type of every tensor: GP_DTYPE_F32, BF16 or F16 on the host;
                         BF16 or F16 in a device view */
    void *embed;      /* [vocab][hidden] */
    void *final_norm; /* [hidden] */
    void *lm_head;    /* [vocab][hidden]; == embed when tied */
    gp_layer_weights *layers; /* [n_layers] */
    void *arena;      /* one allocation holding all of the above */
    size_t arena_bytes;
} gp_host_weights;

/* Tensor ids of the synthetic generator; each tensor draws from its own
 * stream so values do not depend on the order of generation. */
typedef enum gp_tensor_kind {
    GP_T_EMBED = 0, GP_T_FINAL_NORM, GP_T_LM_HEAD,
    GP_T_ATTN_NORM, GP_T_WQKV, GP_T_WO, GP_T_FFN_NORM, GP_T_W_GATE_UP, GP_T_W_DOWN,
    GP_T_BQKV, /* [qkv_rows] q/k/v bias, only when cfg.qkv_bias */
} gp_tensor_kind;
/* "embed", "wqkv", ...: the name of kind in messages ("tensor" when out of range). */
const char *gp_tensor_kind_name(gp_tensor_kind kind);

/* Allocate (uninitialised) host weights for cfg in one arena, elements of
 * dtype (GP_DTYPE_F32, BF16 or F16; anything else is GP_ERR_INVALID_ARG);
 * the layers' bqkv only when cfg->qkv_bias. */
gp_status gp_host_weights_alloc(const gp_config *cfg, gp_dtype dtype, gp_host_weights *w);
/* The per-layer tensor kinds of cfg's host weights, in gp_layer_weights'
 * order (attn_norm, wqkv, wo, ffn_norm, w_gate_up, w_down, then bqkv only
 * when cfg->qkv_bias): *kinds, and their count as the result. */
int gp_host_layer_kinds(const gp_config *cfg, const gp_tensor_kind **kinds);
void gp_host_weights_free(gp_host_weights *w);
/* Bytes of every tensor of cfg's host weights in dtype (a tied lm_head
 * once, q/k/v biases when the config has them), without the arena's
 * alignment: what loading them writes. */
uint64_t gp_host_weights_bytes(const gp_config *cfg, gp_dtype dtype);
/* Fill host weights with the synthetic values for seed (multithreaded), in
 * w->dtype: each value is the generator's float rounded to the dtype (F32:
 * unrounded). BF16 values are those the device generator writes. */
gp_status gp_synth_fill_host(gp_host_weights *w, uint64_t seed);
/* The same, reporting the bytes written through progress (may be NULL). */
gp_status gp_synth_fill_host_ex(gp_host_weights *w, uint64_t seed, const gp_progress_cb *progress);
/* The rate gp_synth_fill_host writes weights of dtype on this machine, in
 * bytes per second, measured by filling a scratch buffer of sample_bytes
 * (at least one work chunk, 1 Mi elements): for an estimate of a preset's
 * load time before it starts. */
gp_status gp_synth_host_rate(gp_dtype dtype, uint64_t sample_bytes, double *bytes_per_s);
/* Element count of one tensor kind, and its uniform half-range. */
uint64_t gp_synth_numel(const gp_config *cfg, gp_tensor_kind kind);
float gp_synth_scale(const gp_config *cfg, gp_tensor_kind kind);
/* The conversion of weights into a device dtype, on the host (no GPU
 * needed; the upload's and gp_checkpoint_fill_tensor's): n elements of src
 * (dtype from: F32, BF16 or F16; need not be aligned) into dst (dtype to:
 * BF16 or F16), round to nearest even (a copy when from == to). A finite value
 * that becomes inf in fp16 (|x| >= 65520; up to that it rounds to 65504) is
 * GP_ERR_UNSUPPORTED naming what (the tensor), the element and its value and
 * suggesting --dtype bf16; dst is then partly written. */
gp_status gp_weights_convert(void *dst, gp_dtype to, const void *src, gp_dtype from, uint64_t n,
                             const char *what);
/* The synthetic generator for one tensor of dtype (F32, BF16 or F16): each
 * value the generator's float rounded to dtype (F32: unrounded). */
void gp_synth_fill_tensor_host(void *dst, gp_dtype dtype, uint64_t n, uint64_t seed,
                               gp_tensor_kind kind, int layer, float scale);

/* ---------------------------------------------------------- safetensors */

/* Tensor dtypes (gp_dtype) are declared in gp_common.h. */

#define GP_ST_MAX_DIMS 8
#define GP_ST_MAX_HEADER (100u * 1024u * 1024u) /* safetensors' own 100 MB cap */

typedef struct gp_st_tensor {
    char *name;
    gp_dtype dtype;
    int ndim;
    int64_t shape[GP_ST_MAX_DIMS];
    uint64_t begin, end;     /* byte offsets relative to the data section */
    const uint8_t *data;     /* points into the parsed buffer; may be unaligned */
} gp_st_tensor;

typedef struct gp_st_file gp_st_file; /* opaque: one parsed safetensors file */

/* Parse a whole safetensors file held in buf (not copied: buf must outlive
 * the result). label (a path) is used in messages. Validates everything the
 * format requires. Safe on arbitrary bytes. */
gp_status gp_st_parse(const uint8_t *buf, size_t len, const char *label, gp_st_file **out);
void gp_st_free(gp_st_file *f);
size_t gp_st_count(const gp_st_file *f);
const gp_st_tensor *gp_st_get(const gp_st_file *f, size_t i);
const gp_st_tensor *gp_st_find(const gp_st_file *f, const char *name);

/* model.safetensors.index.json held in memory: a JSON object whose
 * 'weight_map' maps every tensor name to a plain shard file name (no '/' or
 * '..'). label (a path) is used in messages. Safe on arbitrary bytes. */
typedef struct gp_st_index gp_st_index; /* opaque */
gp_status gp_st_index_parse(const char *text, size_t len, const char *label, gp_st_index **out);
void gp_st_index_free(gp_st_index *ix);
/* Distinct shard file names, sorted. */
size_t gp_st_index_shard_count(const gp_st_index *ix);
const char *gp_st_index_shard(const gp_st_index *ix, size_t i);
/* i-th weight_map entry, sorted by tensor name; shard receives its file. */
size_t gp_st_index_tensor_count(const gp_st_index *ix);
const char *gp_st_index_tensor(const gp_st_index *ix, size_t i, const char **shard);
/* Shard file weight_map names for tensor, or NULL when it is not listed. */
const char *gp_st_index_lookup(const gp_st_index *ix, const char *tensor);

/* A checkpoint directory: config.json plus model.safetensors, or shards
 * listed by model.safetensors.index.json. Files are memory-mapped. */
typedef struct gp_checkpoint gp_checkpoint;
gp_status gp_checkpoint_open(const char *dir, gp_checkpoint **out);
void gp_checkpoint_close(gp_checkpoint *ck);
const gp_config *gp_checkpoint_config(const gp_checkpoint *ck);
size_t gp_checkpoint_tensor_count(const gp_checkpoint *ck);
/* i-th tensor over all shards, sorted by name; file receives its shard path. */
const gp_st_tensor *gp_checkpoint_tensor(const gp_checkpoint *ck, size_t i, const char **file);
/* Check that every tensor the config needs is present with the right shape
 * and a loadable dtype; unexpected extra tensors are errors too, except
 * rotary caches HF may save. */
gp_status gp_checkpoint_check(const gp_checkpoint *ck);
/* The dtype a checkpoint's weights are held in exactly: its tensors' dtype
 * when all are one of F32/BF16/F16, else F32 (which holds all three exactly). */
gp_dtype gp_checkpoint_dtype(const gp_checkpoint *ck);
/* Allocate w in gp_checkpoint_dtype(ck) and fill it in the engine layout
 * (q/k/v and gate/up fused, q/k/v biases when the config has them), every
 * value bit-exact: nothing is rounded. */
gp_status gp_checkpoint_load_host(const gp_checkpoint *ck, gp_host_weights *w);
/* The same, reporting the bytes read through progress (may be NULL). */
gp_status gp_checkpoint_load_host_ex(const gp_checkpoint *ck, gp_host_weights *w, const gp_progress_cb *progress);
/* One tensor of the engine layout read from ck into dst (gp_synth_numel
 * elements of dtype; layer for the per-layer kinds, ignored for embed,
 * final_norm and lm_head), as gp_checkpoint_load_host places it: wqkv is the
 * q, k and v rows, w_gate_up gate then up, bqkv the q, k, v biases (only
 * when the config has them), a tied lm_head the embedding. F32 holds every
 * value exactly; BF16 or F16 converts each checkpoint tensor with
 * gp_weights_convert (a copy when it is stored in dtype; a value fp16
 * cannot hold is GP_ERR_UNSUPPORTED naming label and the checkpoint
 * tensor). Weights beyond VRAM fill their pinned copy with it, tensor by
 * tensor, with no host copy of the whole model. The tensors read are
 * checked (present, shape, dtype); call gp_checkpoint_check first to refuse
 * a checkpoint with tensors the model does not use. label (may be NULL)
 * names the tensor in messages. */
gp_status gp_checkpoint_fill_tensor(const gp_checkpoint *ck, gp_tensor_kind kind, int layer, void *dst,
                                    gp_dtype dtype, const char *label);

/* ---------------------------------------------------------- model source */

/* "PRESET" (synthetic weights) or a checkpoint directory. */
typedef struct gp_model_source {
    bool synthetic;
    uint64_t seed;         /* synthetic only */
    char path[4096];       /* checkpoint directory */
    gp_config cfg;
} gp_model_source;
/* Resolve spec: an existing directory is a checkpoint, otherwise a preset
 * name; anything else is an error naming both possibilities. */
gp_status gp_model_source_resolve(const char *spec, uint64_t seed, gp_model_source *out);
/* Fill host weights from the source: a checkpoint in its own dtype
 * (gp_checkpoint_load_host), a preset with BF16 synthetic weights. */
gp_status gp_model_source_load_host(const gp_model_source *src, gp_host_weights *w);
/* The same, reporting the bytes loaded or synthesized through progress (may
 * be NULL). */
gp_status gp_model_source_load_host_ex(const gp_model_source *src, gp_host_weights *w,
                                       const gp_progress_cb *progress);
/* The dtype gp_model_source_load_host gives src's weights: BF16 for a
 * preset, the checkpoint's own (gp_checkpoint_dtype) for a directory. */
gp_status gp_model_source_host_dtype(const gp_model_source *src, gp_dtype *out);
/* Tensor parallel rank rank of tp's shard of src's weights (gp_tp_config,
 * gp_host_weights_shard), read straight from the source one whole tensor at
 * a time: host memory for the shard and the largest cut tensor, not the
 * whole model; bitwise gp_host_weights_shard of gp_model_source_load_host's
 * weights. progress (may be NULL) counts the shard's bytes. */
gp_status gp_model_source_load_host_shard(const gp_model_source *src, int tp, int rank, gp_host_weights *out,
                                          const gp_progress_cb *progress);

/* ---------------------------------------------------------- tensor parallel */

/* Tensor parallelism over tp GPUs (Megatron's split): rank r holds query
 * heads [r n_heads/tp, (r+1) n_heads/tp), the key/value heads and FFN
 * neurons likewise; q/k/v and gate/up are split by output rows (column
 * parallel), o and down by input columns (row parallel), so each rank's o
 * and down give partial sums that an all-reduce adds before the residual;
 * the embedding and the head are cut by vocabulary (gp_config.vocab_parts:
 * a rank embeds the tokens of its part, zero for the others, and an
 * all-reduce completes the rows; its head gives its part's logits and an
 * all-gather puts them together); the norms are whole on every rank. */
#define GP_TP_MAX 8
#define GP_TP_MAX_STR "8" /* GP_TP_MAX in the help texts */
/* GP_ERR_INVALID_ARG naming tp and, when it does not divide them, the
 * model's heads, key/value heads or FFN neurons. */
gp_status gp_tp_check(const gp_config *cfg, int tp);
/* A rank's shape: cfg with n_heads, n_kv_heads and ffn divided by tp and
 * vocab_parts = tp (the same hidden, head_dim, vocab); checked by
 * gp_tp_check. */
gp_status gp_tp_config(const gp_config *cfg, int tp, gp_config *out);
/* Rank rank's host weights cut from w (copies, in w's dtype; out has the
 * rank's config, named "NAME tpT.R"). Free with gp_host_weights_free. */
gp_status gp_host_weights_shard(const gp_host_weights *w, int tp, int rank, gp_host_weights *out);
/* The logits of a head cut by vocabulary into tp parts, in vocabulary
 * order: parts holds tp segments of B x ceil(V / tp) floats, segment r
 * [B][gp_vocab_part_tokens(V, tp, r)]; logits [B][V]. */
void gp_vocab_in_order(const float *parts, float *logits, int B, int V, int tp);

/* ---------------------------------------------------------- identity */

/* Which weights a model is, by content (model/identity.c): a byte-identical
 * copy of a checkpoint in another folder has the same identity, other
 * weights in a folder of the same name another. A checkpoint's fingerprint
 * hashes its config (every field but the name), its tensor table (names,
 * dtypes, shapes, sorted by name over the shards) and of each tensor its
 * bytes whole up to 64 KiB, else 16 slices of 4 KiB spread evenly from its
 * first byte to its last: a change in every sampled weight tensor is found,
 * one confined between the samples of a large tensor is not (the price of
 * reading 19 MB of an 8B checkpoint instead of 16 GB). A preset's hashes its
 * config, name, seed and weight dtype: its synthetic weights are a function
 * of them. */
typedef struct gp_model_identity {
    char fingerprint[17]; /* 16 hex digits */
    char summary[320];    /* what a person compares: "checkpoint (llama: 2 layers, ...), 20 tensors" */
} gp_model_identity;
gp_status gp_model_identity_of(const gp_model_source *src, gp_model_identity *out);
gp_status gp_checkpoint_identity(const gp_checkpoint *ck, gp_model_identity *out);
/* "llama: 2 layers, hidden 64, 4 heads (2 kv) x 16, ffn 128, vocab 256,
 * context 256" into buf. */
void gp_config_summary(const gp_config *cfg, char *buf, size_t cap);

/* ---------------------------------------------------------- performance model */

/* Read-only streaming and bf16 GEMM rate measured on the H100
 * (docs/ARCHITECTURE.md §6). */
#define GP_HBM_BYTES_PER_S 3.1e12
#define GP_GEMM_FLOPS_PER_S 800e12
/* One decode step of B sequences at context C (tokens already cached) with M
 * micro-batches (each reads the weights again), docs/ARCHITECTURE.md §5: bytes =
 * weights x M + B embedding rows + KV read + KV written; flops = 2 x params x
 * B + 4 x B x C x heads x head_dim x layers; floor = the larger of bytes at
 * GP_HBM_BYTES_PER_S and flops at GP_GEMM_FLOPS_PER_S. */
typedef struct gp_step_cost {
    double bytes, flops, floor_ms;
} gp_step_cost;
void gp_step_floor(const gp_config *cfg, int B, double C, int M, gp_step_cost *out);

#ifdef __cplusplus
}
#endif
#endif
