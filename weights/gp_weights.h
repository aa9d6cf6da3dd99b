/* greenpipe device weights: the model's weights on the GPU, resident or
 * streamed beyond VRAM, held as groups a stage acquires and releases, and
 * the synthetic generator on the device. */
#ifndef GP_WEIGHTS_H
#define GP_WEIGHTS_H

#include <stdint.h>

#include "gp_common.h"
#include "gp_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------- device weights */

/* Device weights are held as groups, one "attn" and one "ffn" per layer
 * (plus a "head" group: embed, final norm, lm_head). Each group has a ready
 * event and an in-use count: a stage calls gp_weight_group_acquire (marks it
 * in use, makes its stream wait on the ready event, never a synchronize, and
 * grants the group's tensors), computes on what it was granted, and calls
 * gp_weight_group_release on every exit path. Resident weights are ready at
 * load. Streams are cudaStream_t passed as void*. */
typedef struct gp_device_weights gp_device_weights; /* opaque */
typedef enum gp_group_kind { GP_GROUP_ATTN = 0, GP_GROUP_FFN = 1, GP_GROUP_HEAD = 2 } gp_group_kind;
typedef struct gp_weight_group gp_weight_group;     /* opaque */
/* What an acquire grants: the group's tensors, device pointers valid until
 * its release; each holder has its own, so two lanes (or two devices) hold
 * views of their own. An attn group fills layer's attn_norm, wqkv, bqkv
 * (NULL without q/k/v biases) and wo; an ffn group ffn_norm, w_gate_up and
 * w_down; the head group embed, final_norm and lm_head (== embed when
 * tied). Every other field is NULL. */
typedef struct gp_group_tensors {
    gp_layer_weights layer;
    void *embed, *final_norm, *lm_head;
} gp_group_tensors;

/* GP_ERR_NO_DEVICE with one readable line when there is no GPU/driver. */
gp_status gp_cuda_available(void);
/* Generate synthetic weights in place on the current device in dtype
 * (GP_DTYPE_BF16 or GP_DTYPE_F16; others GP_ERR_INVALID_ARG): the same
 * values as gp_synth_fill_host of that dtype (the generator's float rounded
 * to nearest even). */
gp_status gp_device_weights_synthetic(const gp_config *cfg, gp_dtype dtype, uint64_t seed,
                                      gp_device_weights **out);
/* A part of the weights: the groups of the kinds in groups (bits 1 <<
 * gp_group_kind; GP_GROUPS_ALL: every kind), the layer groups of layers
 * [layer_begin, layer_end) only (layer_end 0: every layer). */
#define GP_GROUPS_ALL 7u
typedef struct gp_weights_part {
    unsigned groups;
    int layer_begin, layer_end;
} gp_weights_part;
/* The same for a part, the same values the whole would hold: e.g. the FFN
 * side of attention and FFN on two GPUs holds the FFN groups alone, a stage
 * of pipeline parallelism its layers. Acquiring a group not held is
 * GP_ERR_STATE naming it. */
gp_status gp_device_weights_synthetic_part(const gp_config *cfg, gp_dtype dtype, uint64_t seed,
                                           const gp_weights_part *part, gp_device_weights **out);
/* The same part of host weights w uploaded (as gp_device_weights_upload). */
gp_status gp_device_weights_upload_part(const gp_host_weights *w, gp_dtype dtype, const gp_weights_part *part,
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
 * device's free memory GP_ERR_DEVICE_MEMORY. A layer group's tensors are
 * what its acquire grants, valid until the release (the view's layer
 * pointers are NULL: a streamed group has no address of its own), and the
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
 * view->dtype the device dtype): the config, dtype and bytes, and the
 * tensors of groups that never move (resident weights, the streamed head);
 * kernels read what gp_weight_group_acquire grants. */
const gp_host_weights *gp_device_weights_view(const gp_device_weights *dw);
gp_weight_group *gp_device_weights_group(gp_device_weights *dw, gp_group_kind kind, int layer);
/* Marks g in use, makes stream wait until its tensors are there and writes
 * them into *out (may be NULL: readiness only). */
gp_status gp_weight_group_acquire(gp_weight_group *g, void *stream, gp_group_tensors *out);
/* Release, recording the group's last reader on stream (the stream the
 * stage's work on it was enqueued on): required for streamed groups, whose
 * slot is reused after that point; resident groups ignore stream. */
gp_status gp_weight_group_release_on(gp_weight_group *g, void *stream);
/* Resident groups only (a streamed group needs the stream: release_on). */
void gp_weight_group_release(gp_weight_group *g);
int gp_weight_group_in_use(const gp_weight_group *g);
/* Fill n values of tensor kind (layer) in dtype (BF16 or F16) on the
 * device: the generator kernel itself, exposed for tests; each value is the
 * generator's float rounded to nearest even, as gp_synth_fill_tensor_host.
 * dst is a device pointer. */
gp_status gp_synth_fill_device(void *dst, gp_dtype dtype, uint64_t n, uint64_t seed, gp_tensor_kind kind,
                               int layer, float scale, void *stream);

#ifdef __cplusplus
}
#endif
#endif
