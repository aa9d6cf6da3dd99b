/* The stored-prefix KV cache: the KV of whole blocks of past prompts, kept in
 * a host pool (LRU within a byte budget) and optionally in files, keyed by the
 * hash chain of their tokens, so a later prompt reuses its longest stored
 * prefix of whole blocks instead of recomputing it. Pure C, no GPU. */
#ifndef GP_KVSTORE_H
#define GP_KVSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What KV the store holds: two models, shapes, dtypes or block sizes never
 * share a key, since all of it goes into the seed of the key chain. */
typedef struct gp_kvstore_identity {
    const char *model; /* model name or checkpoint path; non-empty, copied at create */
    int n_layers;      /* 1.. */
    int n_kv_heads;    /* 1.. */
    int head_dim;      /* 1.. */
    int dtype_bytes;   /* bytes per KV element: 1, 2 or 4 */
    int block_size;    /* tokens per block, as the paged cache's gp_kv_layout: 1..65536 */
} gp_kvstore_identity;

/* GP_OK, or GP_ERR_INVALID_ARG naming the field, its value and what is allowed. */
gp_status gp_kvstore_identity_check(const gp_kvstore_identity *id);

/* ------------------------------------------------------------------ keys
 * key_i = H(key_{i-1}, tokens of block i), key_{-1} = the identity's seed.
 * H is 64-bit FNV-1a over little-endian bytes (the previous key's 8, then 4
 * per token), so key i covers tokens 0..(i+1)*block_size-1 and the model.
 * 64 bits: a collision only costs a miss (a stored block keeps its tokens and
 * every lookup compares them), and at 2^-64 per pair it is that rare too; the
 * key names a file in 16 hex digits. */

/* The chain's seed for id (also the identity hash in block files). */
uint64_t gp_kvstore_seed(const gp_kvstore_identity *id);

/* The key of the block of tokens[0..block_size) after the block keyed prev
 * (the seed for the first): one link of the chain, for a caller that keeps
 * its own chain (a scheduler's prefix cache keyed like the store). */
uint64_t gp_kvstore_next_key(uint64_t prev, const int32_t *tokens, int block_size);

/* keys[0..n_tokens / block_size): one key per whole block; a partial last
 * block has none. *n_keys (may be NULL) gets the count. GP_ERR_INVALID_ARG
 * for a bad identity, n_tokens < 0, or NULL tokens/keys with blocks to hash. */
gp_status gp_kvstore_chain(const gp_kvstore_identity *id, const int32_t *tokens, int n_tokens,
                           uint64_t *keys, int *n_keys);

/* ---------------------------------------------------------------- layout
 * A block's payload is K and V of every layer for block_size tokens,
 * layer-major: layer 0 K, layer 0 V, layer 1 K, ..., each
 * [block_size][n_kv_heads][head_dim] of dtype_bytes elements, the order of
 * one block of the paged cache (gp_kv_offset), so a layer-wise reload copies
 * one contiguous piece per (layer, K|V). */
typedef enum gp_kvstore_part { GP_KVSTORE_K = 0, GP_KVSTORE_V = 1 } gp_kvstore_part;

/* Bytes of one block's payload; GP_ERR_OVERFLOW if it does not fit 64 bits. */
gp_status gp_kvstore_block_bytes(const gp_kvstore_identity *id, uint64_t *bytes);
/* Where (layer, part) lies inside a payload. GP_ERR_INVALID_ARG naming a
 * layer outside 0..n_layers-1 or a part other than K/V. */
gp_status gp_kvstore_part_range(const gp_kvstore_identity *id, int layer, gp_kvstore_part part,
                                uint64_t *offset, uint64_t *bytes);

/* ----------------------------------------------------------------- store
 * Thread-safe: every call takes the store's one mutex, so the engine's
 * prefill thread and a copy-side thread may share a store. File reads and
 * writes run under it too (a load from disk holds up the other thread). */
typedef struct gp_kvstore gp_kvstore;

typedef struct gp_kvstore_params {
    gp_kvstore_identity id;
    /* Host bytes for payloads (tokens and bookkeeping come on top, about
     * 4 * block_size + 64 bytes a block). Default 0, which create refuses:
     * the budget is the caller's (--kv-store-size). At least one block. */
    uint64_t capacity_bytes;
    /* Directory of block files, created (one level) if absent; NULL (the
     * default): memory only. Files are never evicted: disk use is unbounded. */
    const char *dir;
    /* Payload memory, one call per block (the engine gives pinned memory);
     * both NULL (the default): malloc/free. Give both or neither. */
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p);
    void *alloc_ctx;
    /* Print each disk-miss and write-failure warning on stderr (default
     * true); the last one is in the statistics either way. */
    bool warn_stderr;
} gp_kvstore_params;

gp_kvstore_params gp_kvstore_default_params(void);

/* GP_ERR_INVALID_ARG naming the bad field (identity, zero capacity, a block
 * larger than the capacity with both sizes, half an allocator pair);
 * GP_ERR_IO naming a dir that is not a directory or cannot be made. */
gp_status gp_kvstore_create(const gp_kvstore_params *p, gp_kvstore **out);
/* Frees every block; pins still held are dropped. NULL is a no-op. */
void gp_kvstore_destroy(gp_kvstore *s);

/* Copies payload (gp_kvstore_block_bytes) and tokens[block_size] in under
 * key, evicting least-recently-used unpinned blocks to stay in capacity; with
 * a dir also writes the block's file (a failure to write is a warning and a
 * count, not an error: the block is still held in memory).
 * An existing key is only touched (LRU), not copied; if its stored tokens
 * differ (a hash collision) the stored block stays and `collisions` counts.
 * GP_SOFT_FULL (with a message naming the bytes pinned and the capacity)
 * when only pinned blocks could make room: the block is not held in memory
 * (its file is still written), `put_refused` counts; the caller goes on. */
gp_status gp_kvstore_put(gp_kvstore *s, uint64_t key, const int32_t *tokens, const void *payload);
/* gp_kvstore_put with the payload written in place, saving a copy:
 * fill(ctx, dst) writes the block's payload bytes into the store's memory
 * (a device-to-host copy waited for), under the store's mutex; it is not
 * called for a key already held. A failing fill stores nothing and its
 * status is returned; a put refused for room writes no file (nothing was
 * filled). */
gp_status gp_kvstore_put_with(gp_kvstore *s, uint64_t key, const int32_t *tokens,
                              gp_status (*fill)(void *ctx, void *dst), void *ctx);

/* *matched = how many leading blocks of keys[0..n_blocks) are held, each
 * key's stored tokens compared with tokens[i * block_size ..] (the prompt's
 * tokens, at least n_blocks * block_size); the first absent or mismatched
 * block ends the match. A block not in memory is looked up in the dir and
 * loaded if its file is good (else a miss with a warning, the file left
 * alone: a later put of that key replaces it). Matched blocks are touched
 * and pinned (a count per block) until gp_kvstore_release. */
gp_status gp_kvstore_match(gp_kvstore *s, const uint64_t *keys, const int32_t *tokens, int n_blocks,
                           int *matched);
/* Unpins keys[0..n), as matched. GP_ERR_STATE naming a key that is not
 * pinned (the rest are still released). */
gp_status gp_kvstore_release(gp_kvstore *s, const uint64_t *keys, int n);
/* The payload of a pinned block, valid until its release. GP_ERR_STATE
 * naming a key that is absent or not pinned. */
gp_status gp_kvstore_get(gp_kvstore *s, uint64_t key, const void **payload);

/* Why a block's file was not used. */
typedef enum gp_kvstore_miss {
    GP_KVSTORE_MISS_ABSENT = 0,    /* no file: a plain miss, no warning */
    GP_KVSTORE_MISS_IO,            /* open or read failed */
    GP_KVSTORE_MISS_TRUNCATED,     /* shorter than its header says */
    GP_KVSTORE_MISS_MAGIC,         /* not a block file */
    GP_KVSTORE_MISS_VERSION,       /* another format version */
    GP_KVSTORE_MISS_IDENTITY,      /* another model, shape, dtype or block size */
    GP_KVSTORE_MISS_KEY,           /* the header names another key */
    GP_KVSTORE_MISS_TOKENS,        /* other tokens under this key (a collision) */
    GP_KVSTORE_MISS_CHECKSUM,      /* payload checksum mismatch, or extra bytes */
    GP_KVSTORE_MISS_NO_ROOM,       /* good, but memory is full of pinned blocks */
    GP_KVSTORE_MISS_COUNT
} gp_kvstore_miss;

const char *gp_kvstore_miss_name(gp_kvstore_miss m);

typedef struct gp_kvstore_stats {
    uint64_t lookups;       /* match calls */
    uint64_t hit_blocks;    /* blocks matched */
    uint64_t miss_blocks;   /* blocks asked for and not matched (n_blocks - matched) */
    uint64_t collisions;    /* a key held with other tokens (put or match) */
    uint64_t puts;          /* put calls */
    uint64_t put_refused;   /* puts not held: no room beside pinned blocks */
    uint64_t evictions;     /* blocks evicted from memory */
    uint64_t disk_loads;    /* blocks loaded from files */
    uint64_t bytes_loaded;  /* payload bytes loaded from files */
    uint64_t files_written;
    uint64_t bytes_written; /* file bytes written */
    uint64_t write_errors;  /* files that could not be written */
    uint64_t disk_misses[GP_KVSTORE_MISS_COUNT]; /* by reason */
    /* Levels, not counters (a reset leaves them): */
    uint64_t blocks_held, bytes_held; /* payload bytes in memory */
    uint64_t blocks_pinned;
    uint64_t capacity_bytes;
    char last_warning[512]; /* "" when none since the last reset */
} gp_kvstore_stats;

/* Copies the statistics into *out (may be NULL with reset), then zeroes the
 * counters and the warning if reset. A NULL store gives all zeros. */
void gp_kvstore_get_stats(gp_kvstore *s, gp_kvstore_stats *out, bool reset);

/* The file of key under dir: "<dir>/<key as 16 lowercase hex>.kvb". */
gp_status gp_kvstore_file_path(const char *dir, uint64_t key, char *buf, size_t cap);

/* ---------------------------------------------------------------- reload
 * The lag-2 layer-wise reload of a matched prefix into the paged cache
 * (docs/PERFORMANCE.md, "KV cache beyond VRAM"): iteration i = 0 .. n_layers + 1 enqueues write(i - 2),
 * process(i - 1), load(i) (those in 0..n_layers-1), so while layer i is
 * copied from host memory, layer i - 1 is processed and layer i - 2 is
 * scattered into the cache, each layer in staging buffer layer % n_buffers.
 * Pure C over a backend of function pointers; every dependency is a marker
 * (an event) waited on by a stream on the device, never by the host:
 *   process(l) waits for load(l), write(l) for process(l), and load(l) into
 *   buffer b for the write of the layer before it in b, so a buffer is
 *   refilled only after its previous layer was written out.
 * A buffer is busy from its load to the end of its write, three stages: with
 * 2 buffers a load waits for the write two layers back, which costs nothing
 * when the load dominates (host-to-device copies against device-side work,
 * the usual case) but serialises them when the stages take equal time; 3
 * buffers overlap all three stages fully, (n_layers + 2) x the longest stage. */

typedef enum gp_kv_reload_stage {
    GP_KV_RELOAD_LOAD = 0,    /* host-to-device copies: a copy stream */
    GP_KV_RELOAD_PROCESS = 1, /* work on the staged layer: the compute stream */
    GP_KV_RELOAD_WRITE = 2,   /* the scatter into the paged cache: compute or a second copy stream */
    GP_KV_RELOAD_STAGE_COUNT = 3
} gp_kv_reload_stage;

/* "load", "process", "write"; "?" for anything else. */
const char *gp_kv_reload_stage_name(gp_kv_reload_stage s);

/* The device side. The backend maps each stage to one stream, on which that
 * stage's ops run in the order enqueued; two stages may share a stream.
 * Every op only enqueues and returns GP_OK or an error with a message
 * (gp_set_error). A wait takes the marker's state when it is enqueued (as
 * cudaStreamWaitEvent), so the driver records a marker again once every wait
 * on its previous recording is enqueued, and destroys markers whose work may
 * still be in flight (cudaEventDestroy allows it). */
typedef struct gp_kv_reload_ops {
    /* Copy layer's K and V of every matched block from host memory into
     * staging buffer buf (0..n_buffers-1) on the LOAD stream. */
    gp_status (*load)(void *be, int layer, int buf);
    /* Whatever runs over buf on the PROCESS stream (a conversion, a check). */
    gp_status (*process)(void *be, int layer, int buf);
    /* Scatter buf into layer's blocks of the paged cache on the WRITE stream. */
    gp_status (*write)(void *be, int layer, int buf);
    /* Record marker on stage's stream (cudaEventRecord). */
    gp_status (*record)(void *be, gp_kv_reload_stage stage, void *marker);
    /* Make stage's stream wait for marker on the device (cudaStreamWaitEvent). */
    gp_status (*wait)(void *be, gp_kv_reload_stage stage, void *marker);
    gp_status (*marker_create)(void *be, void **marker);
    void (*marker_destroy)(void *be, void *marker);
    /* Optional (NULL: not called). Called once per layer, in layer order,
     * right after write(layer) and the recording of written, a marker that
     * completes when the layer is in the cache: the suffix prefill's
     * stream waits on it here (it is recorded again for a later layer after
     * the call returns), so its attention at layer 0 starts while later
     * layers still copy. An error stops the schedule like an op's. */
    gp_status (*layer_ready)(void *be, int layer, void *written);
} gp_kv_reload_ops;

typedef struct gp_kv_reload_params {
    int n_layers;  /* 1..: the layers to reload, 0..n_layers-1 */
    int n_buffers; /* 2..GP_KV_RELOAD_MAX_BUFFERS staging buffers; default 2 */
    const gp_kv_reload_ops *ops; /* required, every op set but layer_ready */
    void *be;                    /* the backend's state, passed to every op */
    /* Optional (NULL: none): a marker of the backend's, recorded on the WRITE
     * stream after the last write. Every op of a stage runs in order on its
     * stream and each write waits for its layer's load and process, so when
     * it completes every load has read its host memory (the store's pins may
     * be released) and every layer is in the cache. */
    void *done;
} gp_kv_reload_params;

#define GP_KV_RELOAD_MAX_BUFFERS 16

/* n_buffers 2, everything else 0 / NULL. */
gp_kv_reload_params gp_kv_reload_default_params(void);

/* What a run enqueued (also on an error: what was enqueued before it). */
typedef struct gp_kv_reload_stats {
    int loads, processes, writes; /* ops enqueued, each at most n_layers */
    int records, waits;           /* marker records and stream waits enqueued */
    int ready_calls;              /* layer_ready calls that returned GP_OK */
    int layers_written;           /* layers 0..layers_written-1 have their write enqueued */
    int markers;                  /* markers created (all destroyed before the return) */
} gp_kv_reload_stats;

/* Enqueues the whole schedule and returns without waiting for any of it:
 * the caller learns completion from done (or from layer_ready's markers).
 * stats (may be NULL) gets the counts. GP_ERR_INVALID_ARG naming a bad
 * field, before any op is called. The first op that fails stops the
 * schedule: nothing that depends on it is enqueued, the markers are
 * destroyed, and its status is returned with a message naming the op, the
 * layer and buffer and the counts enqueued, then the op's own message. Work
 * enqueued before the failure may still run: the caller synchronises the
 * streams before reusing the buffers or releasing the blocks' pins. */
gp_status gp_kv_reload_run(const gp_kv_reload_params *p, gp_kv_reload_stats *stats);

#ifdef __cplusplus
}
#endif

#endif
