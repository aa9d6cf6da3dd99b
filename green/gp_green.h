/* green/: SM partitions for the attention (A) and FFN (F) halves of a layer.
 * The planner (gp_split_*) is pure C and needs no GPU; the pool (gp_green_*)
 * builds CUDA green contexts with one stream each, or plain streams where
 * green contexts are unavailable. No CUDA types: streams are void*
 * (cudaStream_t, usable by the runtime and by cuBLASLt). */
#ifndef GP_GREEN_H
#define GP_GREEN_H

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- planning */

/* A device's SM resource as the driver reports it (CUdevSmResource), plus
 * how many groups its split actually makes, which can be fewer than
 * sm_count / granularity (the driver documentation cites cluster and
 * alignment requirements): the H100 SXM cuts 132 SMs into 15 groups of 8,
 * not 16, and leaves 12 remainder SMs (docs/ARCHITECTURE.md §6). */
typedef struct gp_sm_info {
    int sm_count;      /* SMs of the device (132 on the H100 SXM) */
    int min_partition; /* minSmPartitionSize: fewest SMs a partition may have */
    int alignment;     /* smCoscheduledAlignment: partition sizes are multiples of it */
    int groups;        /* groups of the granularity cuDevSmResourceSplitByCount makes
                          (gp_green_query asks it); 0: assume sm_count / granularity */
} gp_sm_info;

/* Which side's partition also holds the remainder SMs, those left over after
 * cutting the device into groups of the granularity (132 = 15 x 8 + 12 on the
 * H100), so that no SM sits idle. */
typedef enum gp_split_side {
    GP_SPLIT_SIDE_F = 0, /* default: the FFN side's GEMMs use the extra SMs best */
    GP_SPLIT_SIDE_A = 1,
} gp_split_side;

/* A requested split. ffn_sms == GP_SPLIT_REST is the shorthand "A only": F
 * gets every SM A does not take. */
#define GP_SPLIT_REST (-1)
typedef struct gp_split_req {
    int attn_sms;
    int ffn_sms; /* or GP_SPLIT_REST */
} gp_split_req;

/* A valid split. The device is cut by one split into n_groups groups of
 * granularity SMs plus remainder SMs; A takes groups [0, attn_groups), F
 * groups [attn_groups, n_groups), and remainder_side also takes the
 * remainder. So A and F never overlap and together hold every SM:
 * attn_sms + ffn_sms == sm_count. */
typedef struct gp_split_plan {
    int granularity; /* SMs per group: max(min_partition, alignment) rounded up to the alignment */
    int n_groups;    /* gp_sm_info.groups, or sm_count / granularity */
    int remainder;   /* sm_count - n_groups * granularity (may exceed the granularity) */
    gp_split_side remainder_side;
    int attn_groups, ffn_groups; /* each >= 1 */
    int attn_sms, ffn_sms;       /* groups * granularity, plus the remainder on its side */
} gp_split_plan;

/* The SM description of a device whose driver cannot give one (no green
 * contexts), from the driver documentation's per-architecture rules for
 * cuDevSmResourceSplitByCount: compute capability 9.0 and later at least 8
 * SMs in multiples of 8; 8.x at least 4 in multiples of 2; older at least 2
 * in multiples of 2. groups is 0 (sm_count / granularity is assumed). */
gp_sm_info gp_sm_info_guess(int sm_count, int cc_major);

/* The granularity of info, or 0 when info is not a valid SM description. */
int gp_split_granularity(const gp_sm_info *info);

/* Validates the request against info and fills plan. The rules: both counts
 * positive and at most the device; attn + ffn == sm_count (fewer would leave
 * SMs idle, more do not exist); the side without the remainder a positive
 * multiple of the granularity; the side with it at least one full group plus
 * the remainder (the remainder alone carries none of a group's co-scheduling
 * guarantees, so it is never a partition by itself: on the H100 with the
 * remainder on F, A is 8, 16, ..., 112 and F = 132 - A, i.e. 120:12 is
 * refused). A device with fewer than two groups has no valid split.
 * GP_ERR_INVALID_ARG with a message naming the bad value and the allowed
 * values, e.g. "attention SMs 50: not a multiple of the partition granularity
 * 8; allowed 8, 16, ..., 112 (F gets the 12 remainder SMs)". */
gp_status gp_split_plan_make(const gp_sm_info *info, gp_split_req req, gp_split_side side,
                             gp_split_plan *plan);

/* Every valid split, A ascending: n_groups - 1 of them. Writes at most cap
 * plans to out (out may be NULL with cap 0 to count) and the total to *n. */
gp_status gp_split_enumerate(const gp_sm_info *info, gp_split_side side, gp_split_plan *out,
                             int cap, int *n);

/* Parses "A:F" or "A" (the shorthand) into req; values are checked later by
 * gp_split_plan_make, except that an F written out must be >= 0 (so "56:-1"
 * cannot pose as the shorthand). */
gp_status gp_split_parse(const char *text, gp_split_req *req);

/* ----------------------------------------------------------------- pool */

/* Reads the SM resource of a CUDA device through the driver, with the group
 * count of a split by the granularity (a query: nothing is created).
 * GP_ERR_NO_DEVICE: no usable GPU; GP_ERR_UNSUPPORTED: the driver cannot
 * describe SM resources (entry point missing, CUDA_ERROR_NOT_SUPPORTED), with
 * the reason in gp_last_error(). */
gp_status gp_green_query(int device, gp_sm_info *info);

typedef struct gp_green_pool gp_green_pool; /* opaque */

typedef struct gp_green_pool_params {
    int device;                   /* CUDA device ordinal (0) */
    const gp_split_req *splits;   /* candidate splits, copied at create; */
    int n_splits;                 /*   NULL/0: every valid split (gp_split_enumerate) */
    gp_split_side remainder_side; /* GP_SPLIT_SIDE_F */
    int force_fallback;           /* nonzero: plain streams even where green contexts work */
} gp_green_pool_params;

gp_green_pool_params gp_green_pool_default_params(void);

/* One candidate split, ready to run: both streams exist from create to
 * destroy. In a partitioned pair each stream belongs to its own green context
 * and runs on exactly the SMs counted in attn_sms / ffn_sms, which are what
 * the driver reports for the context (cuGreenCtxGetDevResource). In an
 * unpartitioned pair (fallback) both are plain non-blocking streams on the
 * whole GPU and both obtained counts are the device's SM count. */
typedef struct gp_green_pair {
    void *attn_stream;            /* cudaStream_t of partition A */
    void *ffn_stream;             /* cudaStream_t of partition F */
    gp_split_req requested;       /* as given (ffn_sms may be GP_SPLIT_REST) */
    gp_split_plan plan;           /* what the planner assigned to each side */
    int attn_sms, ffn_sms;        /* obtained: give these to cuBLASLt as the SM target */
    int partitioned;              /* 0: fallback, streams share the whole GPU */
} gp_green_pair;

/* Plans every candidate (an invalid one fails the whole create with
 * GP_ERR_INVALID_ARG naming it), cuts the device once, and builds every pair.
 * Where green contexts are unavailable (old driver, CUDA_ERROR_NOT_SUPPORTED,
 * e.g. MIG) or force_fallback is set, it builds unpartitioned pairs instead
 * and prints one line on stderr with the reason. Makes the device current on
 * the calling thread. GP_ERR_NO_DEVICE without a usable GPU. */
gp_status gp_green_pool_create(const gp_green_pool_params *params, gp_green_pool **out);

/* Destroys the streams (after letting their work finish), then the green
 * contexts; failures there are ignored. NULL is a no-op. */
void gp_green_pool_destroy(gp_green_pool *pool);

int gp_green_pool_size(const gp_green_pool *pool);
/* Pair i, 0 <= i < size, or NULL (with a message) for a bad index. The
 * pointer stays valid until destroy. */
const gp_green_pair *gp_green_pool_pair(const gp_green_pool *pool, int i);
/* Index of the pair whose plan gives A attn_sms SMs, or -1. */
int gp_green_pool_find(const gp_green_pool *pool, int attn_sms);
/* 1 when the pairs are green-context partitions, 0 in the fallback. */
int gp_green_pool_partitioned(const gp_green_pool *pool);
/* Why the pool fell back ("" when partitioned). */
const char *gp_green_pool_fallback_reason(const gp_green_pool *pool);
/* The SM description the splits were planned against. In a fallback where
 * the driver could not describe it: multiProcessorCount with the driver
 * documentation's minimum and alignment for the compute capability (9.0+:
 * 8 and 8; 8.x: 4 and 2; older: 2 and 2) and groups 0, so splits stay
 * portable. */
gp_sm_info gp_green_pool_sm_info(const gp_green_pool *pool);

#ifdef __cplusplus
}
#endif
#endif
