/* The scheduler's backend ops over the CPU reference: a mixed batch per
 * step on a gp_cpu_model, so the scheduler runs in CI without a GPU, with or
 * without the reference's shared blocks for prefix caching. */
#ifndef GP_SCHED_CPU_H
#define GP_SCHED_CPU_H

#include "gp_reference.h"
#include "gp_sched.h"

/* The weights the scheduler's and the serving core's tests run: the tiny
 * preset's, synthetic bf16 from seed 1234. GP_OK, or the failure's status
 * with its message. Free with gp_host_weights_free. */
gp_status gp_sched_cpu_tiny_weights(gp_host_weights *w);

/* ops for model m (borrowed); greedy sampling; no prefix caching. */
gp_sched_ops gp_sched_cpu_ops(gp_cpu_model *m);

/* gp_sched_cpu_ops' with the three prefix-caching ops: the reference's
 * shared blocks (gp_cpu_kv_retain_block, gp_cpu_kv_drop_block,
 * gp_cpu_kv_attach). The scheduler's block size must be the model's. */
gp_sched_ops gp_sched_cpu_share_ops(gp_cpu_model *m);

/* A host tier over the reference for the scheduler's host ops: a
 * gp_kvstore (malloc'd payloads) of capacity_blocks blocks of the model's
 * block size, offloads read from the reference's blocks
 * (gp_cpu_kv_read_block), loads appended at once (gp_cpu_kv_append_blocks).
 * Its ops are gp_sched_cpu_share_ops' and the three host ops (ctx: the
 * tier); the scheduler's chain_seed must be gp_sched_cpu_tier_seed. Fault
 * injection for tests: fail_lookup / fail_load / fail_offload make the
 * next that many calls of each fail (GP_ERR_IO). */
typedef struct gp_sched_cpu_tier gp_sched_cpu_tier;
gp_status gp_sched_cpu_tier_create(gp_cpu_model *m, int capacity_blocks, gp_sched_cpu_tier **out);
void gp_sched_cpu_tier_destroy(gp_sched_cpu_tier *t);
uint64_t gp_sched_cpu_tier_seed(const gp_sched_cpu_tier *t);
gp_sched_ops gp_sched_cpu_tier_ops(gp_sched_cpu_tier *t);
struct gp_kvstore *gp_sched_cpu_tier_store(gp_sched_cpu_tier *t);
void gp_sched_cpu_tier_fail(gp_sched_cpu_tier *t, int fail_lookup, int fail_load, int fail_offload);

/* Two lanes over the reference, for GP_SCHED_PD_MUX: gp_sched_cpu_ops' (or,
 * with share, gp_sched_cpu_share_ops') and a prefill lane whose launched
 * batch completes after a seeded random 0..max_lag polls without wait (a
 * waiting poll completes it at once); it runs on the reference when it
 * completes, so decode batches launched meanwhile run before it, as on two
 * lanes of a GPU. ctx: the double. */
typedef struct gp_sched_cpu_pd gp_sched_cpu_pd;
gp_status gp_sched_cpu_pd_create(gp_cpu_model *m, bool share, uint64_t seed, int max_lag, gp_sched_cpu_pd **out);
void gp_sched_cpu_pd_destroy(gp_sched_cpu_pd *p);
gp_sched_ops gp_sched_cpu_pd_ops(gp_sched_cpu_pd *p);
/* Batches launched, and polls that found one still running. */
void gp_sched_cpu_pd_counts(const gp_sched_cpu_pd *p, int *launched, int *pending_polls);
/* Fault injection: the next n prefill batches fail (GP_ERR_IO) when they
 * complete, their sequences as they were. */
void gp_sched_cpu_pd_fail(gp_sched_cpu_pd *p, int n);
/* The parts of the launched batch that awaits its completing poll (0:
 * none), their sequences into seqs [max_seqs] (may be NULL): until it
 * completes the reference's pool lacks the blocks the scheduler counts for
 * it. A run_batch on one of its sequences fails (GP_ERR_STATE), and so does
 * every call after a reset_seq of one. */
int gp_sched_cpu_pd_in_flight(const gp_sched_cpu_pd *p, int *seqs);
/* A planner (ops.pd_plan, from the next gp_sched_cpu_pd_ops): each plan
 * the lane or a mixed batch at random, of 1..budget tokens, checking it is
 * asked only while the lane is free; the first fail_plans plans fail
 * (GP_ERR_IO). plans: plans asked, mixed: those answered mixed. */
void gp_sched_cpu_pd_planner(gp_sched_cpu_pd *p, bool on, int fail_plans);
void gp_sched_cpu_pd_plans(const gp_sched_cpu_pd *p, int *plans, int *mixed);

#endif
