/* greenpipe KV cache, host side: the paged layout of K and V, the block
 * tables that map each sequence's positions to blocks, and blocks shared
 * between sequences by reference counts. */
#ifndef GP_KVCACHE_H
#define GP_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

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
/* Empty seq: each of its blocks loses the reference its table entry holds
 * (a block goes back to the pool when none is left). */
void gp_kv_release(gp_kv_tables *t, int seq);
/* Shorten seq to its first len tokens (0 <= len <= its length): the blocks
 * that still hold them stay, with their contents; the others lose the
 * sequence's reference, as in gp_kv_release. GP_ERR_STATE when len ends
 * inside a block others share (the sequence would write over their
 * tokens). */
gp_status gp_kv_truncate(gp_kv_tables *t, int seq, int len);
/* Shared blocks (prefix caching). Every pool block counts its holders: the
 * table entries that name it and the retains; it is free at 0. Sharing is
 * sound for full blocks only, whose K/V no sequence writes again: a
 * sequence appends past its length, and gp_kv_truncate refuses to cut into
 * a shared block.
 * gp_kv_block_retain: *block = full block index of seq (its tokens
 * [index x block_size, (index + 1) x block_size) written), one more reference.
 * gp_kv_block_drop: one reference less. gp_kv_attach: empty seq starts with
 * blocks[0..n) (each held) as its first n table entries, one more reference
 * each, its length n x block_size. An offloaded cache (gp_kv_tables_set_host)
 * shares nothing: GP_ERR_UNSUPPORTED. */
gp_status gp_kv_block_retain(gp_kv_tables *t, int seq, int index, int *block);
gp_status gp_kv_block_drop(gp_kv_tables *t, int block);
gp_status gp_kv_attach(gp_kv_tables *t, int seq, const int *blocks, int n);
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
int gp_kv_free_blocks(const gp_kv_tables *t); /* pool blocks no one holds */
const gp_kv_layout *gp_kv_tables_layout(const gp_kv_tables *t);

#ifdef __cplusplus
}
#endif
#endif
