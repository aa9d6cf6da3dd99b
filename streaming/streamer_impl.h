/* The weight-streaming manager's layout, shared by its sources and its
 * white-box tests only (docs/ARCHITECTURE.md §8). */
#ifndef GP_STREAMER_IMPL_H
#define GP_STREAMER_IMPL_H

#include <pthread.h>

#include "gp_streaming.h"

/* Distinct compute streams whose last read of one group is tracked by its
 * own marker. Two are needed (the A and F partitions); a fifth stream folds
 * into the oldest entry by a GPU-side wait, so more is only a speed matter. */
#define GP_STREAM_MAX_READERS 4

typedef struct gp_stream_reader {
    void *stream; /* NULL: entry unused */
    void *marker; /* recorded on stream at the last release there; created on first use */
} gp_stream_reader;

typedef struct gp_stream_slot_state {
    gp_stream_group desc;
    void *slot;          /* device memory; NULL when absent */
    void *ready;         /* recorded by the copy into slot */
    int in_use;          /* marks not yet released */
    int kept;            /* made pinned by keep_resident (desc.pinned is set too) */
    uint64_t last_use;   /* tick of the last mark or load: the LRU key */
    gp_stream_reader readers[GP_STREAM_MAX_READERS]; /* last readers since the load */
} gp_stream_slot_state;

struct gp_streamer {
    pthread_mutex_t lock; /* the A and F threads acquire and release concurrently */
    gp_streamer_params p; /* groups and order point at the copies below */
    gp_stream_slot_state *g; /* [n_groups] */
    int *order;              /* [n_order] */
    uint64_t held;           /* bytes of the slots held */
    uint64_t tick;
    int cursor;              /* position given to the last advance; -1 before */
    gp_streamer_stats st;
    int kept_groups;
    uint64_t kept_bytes;
};

/* Names a group in messages: "attn 3 (123 bytes)". */
void gp_stream_group_name(const gp_stream_group *g, char *buf, size_t cap);

/* Issues group gi's copy into a slot, evicting as needed; the lock held.
 * prefetch: never evict a group of the prefetch window, and GP_SOFT_FULL
 * instead of an error without room. */
gp_status gp_stream_load(gp_streamer *s, int gi, int prefetch);

#endif
