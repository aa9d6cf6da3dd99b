/* Stored prefixes' state, private to engine/engine_prefix*.c: the pinned
 * pool (engine_prefix.c), the reload (engine_prefix_reload.c) and the store
 * of a sequence's blocks (engine_prefix_store.c). */
#ifndef GP_ENGINE_PREFIX_IMPL_H
#define GP_ENGINE_PREFIX_IMPL_H

#include "engine_impl.h"
#include "gp_kvstore.h"

/* Two gathers in flight while storing: one block is copied down while the
 * one before it is put. */
#define GP_PREFIX_STORE_SLOTS 2

/* A layer's trace events: its copies' start and end (copy stream), its
 * scatter's (write stream), and the suffix passing its wait for the layer. */
enum { GP_PREFIX_TR_LOAD0, GP_PREFIX_TR_LOAD1, GP_PREFIX_TR_WRITE0, GP_PREFIX_TR_WRITE1, GP_PREFIX_TR_SUFFIX, GP_PREFIX_TR_COUNT };

/* One sequence's part of a reload: n_tokens staged tokens written at
 * positions [pos0, pos0 + n_tokens) of seq through its device table. */
typedef struct gp_prefix_reload_seg {
    int seq, pos0, n_tokens;
    const int32_t *d_table;
} gp_prefix_reload_seg;

/* The host tier's state (engine_host_tier.c): the last lookup's pins, and
 * the loads waiting for the next batch, in staging order. */
typedef struct gp_prefix_tier {
    uint64_t *looked;          /* [max_prefix_blocks]: keys the last lookup pinned */
    int n_looked;
    uint64_t *keys;            /* [max_prefix_blocks]: the waiting loads' blocks, pinned */
    const void **payloads;     /* [max_prefix_blocks]: their host payloads */
    int n_blocks;
    gp_prefix_reload_seg *segs; /* [max_batch] */
    int n_segs;
    int32_t *d_tables, *h_tables; /* device and pinned [max_batch][max_blocks]: the segments' tables */
    bool hooked;               /* a provider on the KV memory's hooks */
    bool enqueued;             /* the loads are enqueued: their pins go once ev_done completes */
    bool active;               /* the current call's layers wait for the reload's */
} gp_prefix_tier;

typedef struct gp_engine_prefix {
    gp_prefix_params p;
    char model[512];          /* the identity's name: the caller's, the dtype added */
    gp_kvstore *store;
    uint64_t block_bytes;     /* payload of one stored block */
    int max_prefix_blocks;    /* the longest prefix a prompt of max_context can reuse */
    /* the pool: slots of block_bytes, handed out through the store's
     * allocator lowest first, so that a prompt's blocks, put in order, tend
     * to lie in consecutive slots: the reload copies such a run of blocks
     * with one strided copy per layer and part instead of one per block */
    uint8_t *pool;
    int n_slots, n_free;
    uint64_t *used;           /* [ceil(n_slots / 64)] bit per slot */
    /* reload */
    cudaStream_t copy, write; /* LOAD; PROCESS and WRITE */
    uint16_t *stage;          /* device [n_buffers][2][max_prefix_blocks * block_tokens][row] */
    size_t stage_half;        /* elements of one buffer's K (or V) */
    int32_t *d_table, *h_table; /* the sequence's block table: device and pinned [max_blocks] */
    cudaEvent_t ev_start, ev_done, *ev_layer; /* timing; ev_layer [n_layers] without */
    cudaEvent_t *tr;          /* [n_layers][GP_PREFIX_TR_COUNT] timing events of the last reload (gp_engine_prefix_trace) */
    bool traced;              /* the last prefill_prefix reloaded, so tr holds its times */
    gp_engine *e;             /* the engine whose KV memory the reload writes */
    int seq;                  /* the sequence being reloaded or stored */
    /* the reload in progress, a provider on the KV memory's hooks: armed
     * until the next call's begin_batch enqueues it; active through that
     * call, whose layers wait for the reload's (later calls follow in stream
     * order) */
    const void **payloads;    /* [max_prefix_blocks]: the matched blocks' host payloads */
    int n_matched;
    bool armed, active;
    /* store */
    uint16_t *d_payload[GP_PREFIX_STORE_SLOTS]; /* device, block_bytes each */
    void *h_payload[GP_PREFIX_STORE_SLOTS];     /* pinned, block_bytes each */
    cudaEvent_t ev_stored[GP_PREFIX_STORE_SLOTS];
    gp_prefix_tier tier;
} gp_engine_prefix;

/* The store's identity of e's KV for model (the name with the dtype added) in blocks of block_tokens. */
gp_kvstore_identity gp_engine_prefix_identity(const gp_engine *e, const char *model, int block_tokens);
/* Enqueue the lag-2 reload of payloads[0..n_blocks) into segs[0..n_segs)
 * (their tokens in the same order) on the copy and write streams, which
 * already wait for whatever must precede it; ev_layer[l] completes with
 * layer l written, ev_done with all of it. */
gp_status gp_engine_prefix_reload(gp_engine *e, const gp_prefix_reload_seg *segs, int n_segs,
                                  const void *const *payloads, int n_blocks);
/* The host tier's part of gp_engine_reset_seq and of freeing the prefixes. */
void gp_engine_host_forget_seq(gp_engine *e, int seq);
void gp_engine_host_free(gp_engine *e);
/* ms from a to b (both recorded, with timing), or -1. */
float gp_engine_prefix_elapsed(cudaEvent_t a, cudaEvent_t b);

#endif
