/* greenpipe model: Llama-family config, weights (synthetic or HF safetensors),
 * paged KV cache layout and the float32 CPU reference forward pass. */
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

/* ---------------------------------------------------------- paged KV cache */

/* Storage per layer: K and V each [n_blocks][block_size][n_kv_heads][head_dim].
 * A sequence's position p lives in block table[p / block_size], slot
 * p % block_size. Block ids are shared by all layers. */
typedef struct gp_kv_layout {
    int n_layers;
    int n_kv_heads;
    int head_dim;
    int block_size;  /* tokens per block */
    int n_blocks;    /* blocks in the pool */
} gp_kv_layout;

/* Element offset of (block, slot, kv_head, 0) inside one layer's K or V. */
static inline GP_HD size_t gp_kv_offset(const gp_kv_layout *l, int block, int slot, int kv_head)
{
    return (((size_t)block * (size_t)l->block_size + (size_t)slot) * (size_t)l->n_kv_heads
            + (size_t)kv_head) * (size_t)l->head_dim;
}
/* Elements in one layer's K (or V) pool. */
uint64_t gp_kv_layer_elems(const gp_kv_layout *l);
/* Every count positive and a full block table addressable by int positions;
 * who names the caller in the message. */
gp_status gp_kv_layout_check(const gp_kv_layout *l, int max_seqs, int max_blocks_per_seq, const char *who);

/* Host-side bookkeeping: block pool and per-sequence block tables. */
typedef struct gp_kv_tables gp_kv_tables;
gp_status gp_kv_tables_create(const gp_kv_layout *l, int max_seqs, int max_blocks_per_seq,
                              gp_kv_tables **out);
void gp_kv_tables_destroy(gp_kv_tables *t);
/* Reserve room for n more tokens of seq (allocating blocks as needed);
 * GP_ERR_STATE with a message when the pool or the table is exhausted. */
gp_status gp_kv_reserve(gp_kv_tables *t, int seq, int n);
/* Advance the recorded length after the tokens were written. */
gp_status gp_kv_advance(gp_kv_tables *t, int seq, int n);
void gp_kv_release(gp_kv_tables *t, int seq);
/* Shorten seq to its first len tokens (0 <= len <= its length): the blocks
 * that still hold them stay, with their contents; the rest are freed. */
gp_status gp_kv_truncate(gp_kv_tables *t, int seq, int len);
/* Offloaded KV: from now on table entry i < per_seq of sequence
 * s is the fixed id first + s * per_seq + i (a block kept in host memory:
 * the sequence's oldest positions), never taken from the pool, which keeps
 * the ids below first for the rest. On fresh tables only (GP_ERR_STATE when
 * a sequence holds blocks); GP_ERR_INVALID_ARG unless first >= 0, 0 <=
 * per_seq <= max_blocks_per_seq and first + max_seqs x per_seq <= n_blocks. */
gp_status gp_kv_tables_set_host(gp_kv_tables *t, int first, int per_seq);
int gp_kv_len(const gp_kv_tables *t, int seq);
const int32_t *gp_kv_block_table(const gp_kv_tables *t, int seq); /* [max_blocks_per_seq] */
int gp_kv_max_blocks_per_seq(const gp_kv_tables *t);
int gp_kv_free_blocks(const gp_kv_tables *t);
const gp_kv_layout *gp_kv_tables_layout(const gp_kv_tables *t);

/* ---------------------------------------------------------- CPU reference */

typedef struct gp_cpu_model gp_cpu_model; /* opaque */

/* Build a reference model over w (borrowed, must outlive it) with room for
 * max_seqs sequences of up to max_context tokens each. */
gp_status gp_cpu_model_create(const gp_host_weights *w, int max_seqs, int max_context,
                              int block_size, gp_cpu_model **out);
void gp_cpu_model_destroy(gp_cpu_model *m);
/* Host bytes of the KV cache gp_cpu_model_create allocates for these
 * arguments (float32 K and V of every layer); UINT64_MAX on overflow, 0 for
 * arguments it would refuse as out of range. */
uint64_t gp_cpu_model_kv_bytes(const gp_config *cfg, int max_seqs, int max_context, int block_size);
/* One decode step for B sequences: seq_ids[B] pick the sequences, tokens[B]
 * are their next input tokens; each sequence's position is its current cache
 * length. Appends K/V and writes logits[B][vocab]. */
gp_status gp_cpu_decode_step(gp_cpu_model *m, int B, const int *seq_ids, const int32_t *tokens,
                             float *logits);
/* Fill the caches of S sequences from their prompts (gp_prefill_seq:
 * distinct sequences, 1 <= S <= max_seqs; a sequence may already hold
 * tokens, its positions continue after them) as the exact reference: prompt
 * position by position, each step one batched decode step over every prompt
 * that has a token there, so every prompt's logits are bitwise those of
 * prefilling it alone. last_logits [S][vocab] (may be NULL): row s the logits
 * after seqs[s]'s last token; prompt_logits [sum of n][vocab] (may be NULL):
 * the logits at every prompt position, all of seqs[0]'s, then seqs[1]'s, ...
 * Everything (ids, lengths, tokens, room in max_context) is checked before
 * the cache changes: a refused call leaves every sequence as it was. */
gp_status gp_cpu_prefill_batch(gp_cpu_model *m, int S, const gp_prefill_seq *seqs, float *last_logits,
                               float *prompt_logits);
/* One prompt: gp_cpu_prefill_batch with S = 1; the logits after its last
 * token go to last_logits [vocab] (may be NULL). */
gp_status gp_cpu_prefill(gp_cpu_model *m, int seq, int n, const int32_t *prompt, float *last_logits);
void gp_cpu_reset_seq(gp_cpu_model *m, int seq);
const gp_config *gp_cpu_model_config(const gp_cpu_model *m);
int gp_cpu_model_max_seqs(const gp_cpu_model *m);
/* Round activations through dt exactly where the CUDA engine stores them in
 * its 16-bit compute dtype (normed inputs, QKV (the GEMM output; with a
 * bias v again after the bias is added, q and k after RoPE), RoPE'd q and k,
 * V, attention output,
 * gate/up, SwiGLU output, final norm); the residual stays fp32. GP_DTYPE_F32
 * (the default) rounds nothing: pure fp32, the HF oracle. BF16 or F16: the
 * engine's arithmetic of that dtype on the CPU, the tight oracle for the
 * whole GPU engine and the measure of its drift from HF. Other values are
 * ignored. */
void gp_cpu_model_set_act_dtype(gp_cpu_model *m, gp_dtype dt);
/* Threads of the model's own worker (the one gp_cpu_decode_step and the
 * prefills run on): 0 the default (online CPUs, at most 16, GP_REF_THREADS)
 * or 1..16. Results do not depend on it. Not during a step. */
gp_status gp_cpu_model_set_threads(gp_cpu_model *m, int n_threads);
/* The threads that worker obtained (a thread that cannot start makes it smaller). */
int gp_cpu_model_threads(const gp_cpu_model *m);

/* Activation sparsity (issue #19; the thresholds come from sparse/'s
 * gp_sparsity). Four projections per layer have their inputs thresholded,
 * numbered as sparse/'s gp_sparse_proj (model/ does not depend on sparse/,
 * so they are plain ints here): 0 q/k/v (input: the attention RMSNorm's
 * output, hidden wide), 1 o (the attention output, n_heads x head_dim),
 * 2 gate/up (the FFN RMSNorm's output, hidden), 3 down (the SwiGLU output,
 * ffn). */
#define GP_CPU_PROJ_COUNT 4
/* The largest decode batch that is masked: sparse/'s GP_SPARSE_MAX_B (the
 * sparse kernel's), which sparse/ asserts equal. */
#define GP_CPU_SPARSE_MAX_B 16
/* thresholds [n_layers][GP_CPU_PROJ_COUNT] (copied; each finite and >= 0,
 * the caller's duty: gp_sparsity_check), or NULL to turn masking off (the
 * default). When on, every decode step (gp_cpu_decode_step, and
 * gp_cpu_step_begin .. gp_cpu_step_end) whose batch has at most
 * GP_CPU_SPARSE_MAX_B rows replaces each projection input x with 0 unless
 * |x| > t, the layer's threshold for that projection (sparse/gp_sparse.h's
 * rule; a NaN input counts as 0 too, as in the kernel), on the values the
 * matmul reads: after the activation rounding of
 * gp_cpu_model_set_act_dtype. The batch is the step's, not a stage's row
 * range, so any split into micro-batches masks alike. Prefill
 * (gp_cpu_prefill_batch, gp_cpu_prefill) stays dense. With every threshold
 * 0 the logits are bitwise those without masking (only exact zeros and
 * NaNs are replaced; see reference.c's gp_ref_mask). Not during a step. */
void gp_cpu_model_set_sparsity(gp_cpu_model *m, const float *thresholds);
/* A projection's input rows as the matmul is about to read them: after the
 * activation rounding, before masking. x is [rows][width] contiguous, valid
 * during the call only; proj as above; rows the stage's batch rows (one
 * prefill position's prompts in a prefill). */
typedef void (*gp_cpu_capture_fn)(void *ctx, int layer, int proj, int rows, int width, const float *x);
/* Call fn(ctx, ...) for every projection input of every step, prefill and
 * decode alike; NULL fn turns it off. Thread-safety: fn runs on the thread
 * that runs the stage, before the matmul is handed to the worker's pool
 * (never on a pool thread), once per matmul. gp_cpu_decode_step and the
 * prefills call it from their caller's thread, layer by layer in order;
 * stages over disjoint rows that run at the same time (the pipelined CPU
 * executor) call it from their threads at the same time, so fn must then be
 * thread-safe. Not during a step. */
void gp_cpu_model_set_capture(gp_cpu_model *m, gp_cpu_capture_fn fn, void *ctx);

/* A step as stages, for the pipeline's CPU executor: gp_cpu_step_begin
 * (validate, reserve KV, embed into the model's residual rows,
 * gp_cpu_resid_view), then per layer gp_cpu_stage(GP_STAGE_ATTN) and
 * gp_cpu_stage(GP_STAGE_FFN) over batch-row ranges (micro-batches), then
 * gp_cpu_step_end (final norm and LM head of the residual rows it is handed
 * into logits [B][vocab] unless NULL, KV lengths advanced). A stage reads and
 * updates exactly the residual view in its gp_stage_io (host f32 [nb][hidden],
 * any row stride), so an executor may hand it rows that live elsewhere; its
 * other buffers are per-row scratch and the KV cache. Results are bitwise
 * those of gp_cpu_decode_step for any split into row ranges. Stages over
 * disjoint rows may run at the same time on different threads, each with its
 * own worker; for one row range the order attention(L) -> FFN(L) ->
 * attention(L+1) is the caller's duty. gp_cpu_step_abort drops a failed step
 * (reserved KV stays with its sequence). */
typedef struct gp_cpu_worker gp_cpu_worker; /* opaque: a thread pool and scratch */
/* n_threads 0: the default (online CPUs, at most 16, GP_REF_THREADS). */
gp_status gp_cpu_worker_create(const gp_cpu_model *m, int n_threads, gp_cpu_worker **out);
void gp_cpu_worker_destroy(gp_cpu_worker *wk);
gp_status gp_cpu_step_begin(gp_cpu_model *m, int B, const int *seq_ids, const int32_t *tokens);
/* The model's own residual rows [b0, b0+nb) (where gp_cpu_step_begin embeds). */
gp_status gp_cpu_resid_view(const gp_cpu_model *m, int b0, int nb, gp_tensor_view *out);
/* kind GP_STAGE_ATTN or GP_STAGE_FFN; io->x and io->y empty. */
gp_status gp_cpu_stage(gp_cpu_model *m, gp_cpu_worker *wk, gp_stage_kind kind, const gp_stage_io *io);
/* resid: the step's B residual rows, in batch order. */
gp_status gp_cpu_step_end(gp_cpu_model *m, gp_cpu_worker *wk, const gp_tensor_view *resid, float *logits);
void gp_cpu_step_abort(gp_cpu_model *m);
/* Index of the largest value (first one on ties). */
int32_t gp_argmax(const float *x, int n);

/* Reference operations, also the oracles for the GPU kernels: weights of
 * dtype wdt (F32, BF16 or F16), widened exactly. */
void gp_ref_rmsnorm(float *out, const float *x, const void *w, gp_dtype wdt, int n, float eps);
void gp_ref_matvec(float *out, const void *w, gp_dtype wdt, const float *x, int rows, int cols);
void gp_ref_rope(float *vec, int n_heads, int head_dim, int pos, const float *inv_freq);
void gp_ref_swiglu(float *out, const float *gate, const float *up, int n);

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

/* ---------------------------------------------------------- device weights */

/* Device weights are held as groups, one "attn" and one "ffn" per layer
 * (plus a "head" group: embed, final norm, lm_head). Each group has a ready
 * event and an in-use count: a stage calls gp_weight_group_acquire (marks it
 * in use and makes its stream wait on the ready event, never a synchronize),
 * computes, and calls gp_weight_group_release on every exit path. Resident
 * weights are ready at load. Streams are cudaStream_t passed as void*. */
typedef struct gp_device_weights gp_device_weights; /* opaque */
typedef enum gp_group_kind { GP_GROUP_ATTN = 0, GP_GROUP_FFN = 1, GP_GROUP_HEAD = 2 } gp_group_kind;
typedef struct gp_weight_group gp_weight_group;     /* opaque */

/* GP_ERR_NO_DEVICE with one readable line when there is no GPU/driver. */
gp_status gp_cuda_available(void);
/* Generate synthetic weights in place on the current device in dtype
 * (GP_DTYPE_BF16 or GP_DTYPE_F16; others GP_ERR_INVALID_ARG): the same
 * values as gp_synth_fill_host of that dtype (the generator's float rounded
 * to nearest even). */
gp_status gp_device_weights_synthetic(const gp_config *cfg, gp_dtype dtype, uint64_t seed,
                                      gp_device_weights **out);
/* Upload host weights (e.g. from a checkpoint) of w->dtype (F32, BF16 or
 * F16) as device weights of dtype (BF16 or F16): copied when the dtypes are
 * equal, else converted on the host in bounded pinned chunks (round to
 * nearest even; no second host copy). A value that fp16 cannot hold (it
 * would round to inf) is GP_ERR_UNSUPPORTED naming the tensor and the value
 * and suggesting --dtype bf16. The q/k/v biases (bqkv) go up when the config
 * has them; tied embeddings keep one device copy (view lm_head == embed). */
gp_status gp_device_weights_upload(const gp_host_weights *w, gp_dtype dtype, gp_device_weights **out);
/* The 16-bit device dtype of dw (its view's dtype); GP_DTYPE_COUNT for NULL. */
gp_dtype gp_device_weights_dtype(const gp_device_weights *dw);
/* The weights src names on the device in dtype: BF16, F16 or GP_DTYPE_AUTO
 * (a checkpoint in its own 16-bit dtype, an fp32 one in bf16, synthetic
 * presets in bf16: gp_dtype_resolve_auto). Synthetic weights are generated
 * in place; a checkpoint is read into host memory, uploaded and freed. */
gp_status gp_device_weights_load(const gp_model_source *src, gp_dtype dtype, gp_device_weights **out);
void gp_device_weights_destroy(gp_device_weights *dw);
/* How weights beyond VRAM stream (gp_device_weights_streamed). */
typedef struct gp_weights_stream_params {
    uint64_t budget_bytes; /* > 0: device bytes the weights may hold at once (--vram-budget) */
    int prefetch_depth;    /* D >= 0 (default 2): streamed groups copied ahead of the one acquired */
    int min_window;        /* >= 1 (default 3): layer groups one step holds at once, which the budget
                              must fit: gp_weights_stream_window */
    int keep_resident;     /* 1 (default): the budget beyond the head and a streaming reserve of
                              (min_window + D) times the largest group keeps layer groups resident for
                              good, spread over the order, and only the others stream; 0: every layer
                              group streams, least recently used evicted (gp_streamer_params) */
    int ffn_on_demand;     /* 0 (default) or 1: the FFN groups are on demand (gp_stream_group.on_demand):
                              copied only when acquired, never kept nor prefetched; for the CPU-assisted
                              FFN, whose decode steps do not read them */
} gp_weights_stream_params;
/* budget_bytes 0 (to be set), D 2, window 3, keep_resident 1, ffn_on_demand 0. */
gp_weights_stream_params gp_weights_stream_default_params(void);
/* The layer groups a step holds at once: 1 for sequential steps (attn l,
 * then ffn l); pipelined ones hold an attention group on the A side while
 * the F side holds up to attn l, ffn l and attn l + 1 (the o-ffn-qkv
 * placement): 3, and 4 when RoPE + KV append on the A side reads the q/k/v
 * bias too. */
int gp_weights_stream_window(const gp_config *cfg, int pipelined);
/* What can be checked of sp for cfg before any weight is read: the params,
 * the budget against the least it can stream in (the head group plus the
 * heaviest sp->min_window consecutive layer groups; GP_ERR_INVALID_ARG
 * naming those groups and their bytes) and, when a GPU is there, against its
 * free memory (GP_ERR_DEVICE_MEMORY). *min_bytes (may be NULL) receives that
 * least budget, also when the budget is refused. The streamed creates make
 * it first; callers refuse a budget with it before loading anything. */
gp_status gp_weights_stream_check(const gp_config *cfg, const gp_weights_stream_params *sp, uint64_t *min_bytes);
/* Weights beyond VRAM: host weights w (F32, BF16 or F16) converted to dtype
 * (BF16 or F16) into one pinned host copy laid out as the device groups
 * (cudaHostAlloc of every weight byte; failing that, GP_ERR_NO_MEMORY naming
 * the bytes needed and the host memory available, MemAvailable), and at
 * most sp->budget_bytes of them on the device at once: the head group
 * (embedding, final norm, lm_head) pinned there, the attn and ffn groups
 * kept or streamed by a gp_streamer over the CUDA backend in the order
 * attn 0, ffn 0, attn 1, ..., prefetching
 * sp->prefetch_depth streamed groups ahead of each acquire (with
 * sp->ffn_on_demand the ffn groups are neither kept nor prefetched: copied
 * only by their acquire, and the attn groups prefetched past them). A
 * budget below the head plus the heaviest sp->min_window consecutive layer
 * groups is GP_ERR_INVALID_ARG naming the groups and bytes; one above the
 * device's free memory GP_ERR_DEVICE_MEMORY. The view's layer pointers are valid only
 * between gp_weight_group_acquire and release of their group, and the
 * groups cannot be captured into CUDA graphs (the engine refuses
 * use_graphs). Acquires may come from two threads (the A and F sides). */
gp_status gp_device_weights_streamed(const gp_host_weights *w, gp_dtype dtype, const gp_weights_stream_params *sp,
                                     gp_device_weights **out);
/* gp_device_weights_streamed of the weights src names, with no host copy
 * of the model beside the pinned one: filled tensor by tensor, synthetic
 * weights by the device generator (the values gp_device_weights_synthetic
 * writes) through a device staging buffer of the largest tensor, freed
 * before the streamer takes any of the budget; a checkpoint read from its
 * mapping (gp_checkpoint_check, then gp_checkpoint_fill_tensor: converted
 * per tensor, fp16 overflow refused naming the tensor). dtype BF16, F16 or
 * GP_DTYPE_AUTO, resolved as gp_device_weights_load resolves it. */
gp_status gp_device_weights_streamed_load(const gp_model_source *src, gp_dtype dtype,
                                          const gp_weights_stream_params *sp, gp_device_weights **out);
int gp_device_weights_is_streamed(const gp_device_weights *dw);
/* The VRAM budget of streamed weights; 0 when resident. */
uint64_t gp_device_weights_budget(const gp_device_weights *dw);
/* The parameters streamed weights were created with; budget 0 when resident. */
gp_weights_stream_params gp_device_weights_stream_params(const gp_device_weights *dw);
/* Budget bytes the streamer has not allocated yet (it allocates slots as
 * groups are first copied): what others must leave free on the device. */
uint64_t gp_device_weights_budget_unheld(const gp_device_weights *dw);
struct gp_streamer_stats; /* streaming/gp_streaming.h */
/* Streaming statistics since the last reset (between steps only);
 * GP_ERR_STATE for resident weights. */
gp_status gp_device_weights_stream_stats(gp_device_weights *dw, struct gp_streamer_stats *out, int reset);
struct gp_stream_copy; /* streaming/gp_streaming.h */
/* The group copies since the last gp_device_weights_stream_stats, with their
 * times relative to ref_event (a cudaEvent_t with timing, as void*, recorded
 * on this device after that statistics call, e.g. a step's start event):
 * gp_streamer_copy_log. Between steps only; GP_ERR_STATE for resident weights. */
gp_status gp_device_weights_stream_copy_log(gp_device_weights *dw, void *ref_event, struct gp_stream_copy *out,
                                            int cap, int *n);
/* Device-pointer view in the engine layout (pointers are device addresses,
 * view->dtype the device dtype). */
const gp_host_weights *gp_device_weights_view(const gp_device_weights *dw);
gp_weight_group *gp_device_weights_group(gp_device_weights *dw, gp_group_kind kind, int layer);
gp_status gp_weight_group_acquire(gp_weight_group *g, void *stream);
/* Release, recording the group's last reader on stream (the stream the
 * stage's work on it was enqueued on): required for streamed groups, whose
 * slot is reused after that point; resident groups ignore stream. */
gp_status gp_weight_group_release_on(gp_weight_group *g, void *stream);
/* Resident groups only (a streamed group needs the stream: release_on). */
void gp_weight_group_release(gp_weight_group *g);
int gp_weight_group_in_use(const gp_weight_group *g);
/* The conversion of weights into a device dtype, on the host (no GPU
 * needed; the upload's and gp_checkpoint_fill_tensor's): n elements of src
 * (dtype from: F32, BF16 or F16; need not be aligned) into dst (dtype to:
 * BF16 or F16), round to nearest even (a copy when from == to). A finite value
 * that becomes inf in fp16 (|x| >= 65520; up to that it rounds to 65504) is
 * GP_ERR_UNSUPPORTED naming what (the tensor), the element and its value and
 * suggesting --dtype bf16; dst is then partly written. */
gp_status gp_weights_convert(void *dst, gp_dtype to, const void *src, gp_dtype from, uint64_t n,
                             const char *what);
/* Fill n values of tensor kind (layer) in dtype (BF16 or F16) on the
 * device: the generator kernel itself, exposed for tests; each value is the
 * generator's float rounded to nearest even, as gp_synth_fill_tensor_host.
 * dst is a device pointer. */
gp_status gp_synth_fill_device(void *dst, gp_dtype dtype, uint64_t n, uint64_t seed, gp_tensor_kind kind,
                               int layer, float scale, void *stream);
/* The same generator on the host, for one tensor of dtype (F32, BF16 or
 * F16): each value the generator's float rounded to dtype (F32: unrounded). */
void gp_synth_fill_tensor_host(void *dst, gp_dtype dtype, uint64_t n, uint64_t seed,
                               gp_tensor_kind kind, int layer, float scale);

#ifdef __cplusplus
}
#endif
#endif
