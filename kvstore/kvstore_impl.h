/* The store's private layout, shared by its files and its white-box tests. */
#ifndef GP_KVSTORE_IMPL_H
#define GP_KVSTORE_IMPL_H

#include <pthread.h>

#include "gp_kvstore.h"

/* One block in memory: in the hash chain of its bucket and in the LRU list. */
typedef struct kvs_entry {
    uint64_t key;
    struct kvs_entry *hnext;
    struct kvs_entry *newer, *older; /* LRU list, newest at the store's head */
    int pins;
    void *payload;      /* [block_bytes], from the allocator */
    int32_t tokens[];   /* [block_size] */
} kvs_entry;

struct gp_kvstore {
    gp_kvstore_identity id; /* id.model points at model */
    char *model;
    char *dir;              /* NULL: memory only */
    uint64_t seed, block_bytes, capacity;
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p);
    void *alloc_ctx;
    bool warn_stderr;
    pthread_mutex_t mu;
    kvs_entry **buckets;    /* [n_buckets], a power of two */
    uint64_t n_buckets;
    kvs_entry *newest, *oldest;
    uint64_t write_seq;     /* makes temp file names unique within the process */
    gp_kvstore_stats st;
};

uint64_t kvs_checksum(const void *data, uint64_t n);

/* Block files (file.c); called with the mutex held. */
void kvs_file_write(gp_kvstore *s, uint64_t key, const int32_t *tokens, const void *payload);
/* GP_KVSTORE_MISS_ABSENT (plain miss), another reason (warned and counted
 * by the caller), or GP_KVSTORE_MISS_COUNT when payload[block_bytes] now
 * holds the block. */
gp_kvstore_miss kvs_file_read(gp_kvstore *s, uint64_t key, const int32_t *tokens, void *payload, char *why,
                              size_t why_cap);

void kvs_warn(gp_kvstore *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
