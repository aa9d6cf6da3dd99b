/* The ranks of a multi-GPU run, one process per GPU: the rendezvous that
 * makes them one group (rank 0 hands a blob, NCCL's unique id, to the others
 * through a file or a TCP address, so the same code spans hosts), the links
 * that stay open after it so that a rank that dies or stops making progress
 * makes every other one stop, naming it, within a bounded time; and the NCCL
 * communicator over the group where the build found NCCL. */
#ifndef GP_COMM_H
#define GP_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GP_COMM_MAX_RANKS 64
#define GP_COMM_BLOB_MAX 256 /* NCCL's unique id is 128 bytes */

/* ------------------------------------------------------------ rendezvous */

/* Where the ranks meet:
 *   "tcp:HOST:PORT"  rank 0 listens on HOST:PORT (a name or an IPv4
 *                    address; PORT 1..65535), the others connect to it;
 *   "file:PATH"      rank 0 listens on 127.0.0.1, an ephemeral port, and
 *                    writes "greenpipe-rendezvous PORT NONCE" to PATH (a new
 *                    file moved into place, so a reader never sees half of
 *                    it); the others read it. PATH is rank 0's to replace:
 *                    one path per run, on a file system every rank sees. */
typedef enum gp_rdv_kind { GP_RDV_TCP = 0, GP_RDV_FILE = 1 } gp_rdv_kind;
typedef struct gp_rdv_addr {
    gp_rdv_kind kind;
    char host[256]; /* tcp */
    int port;       /* tcp */
    char path[1024]; /* file */
} gp_rdv_addr;
/* GP_ERR_INVALID_ARG naming the spec and what is allowed. */
gp_status gp_rdv_parse(const char *spec, gp_rdv_addr *out);

/* ------------------------------------------------------------ the group */

typedef struct gp_group_params {
    gp_rdv_addr addr;
    int rank, n_ranks;          /* 0 <= rank < n_ranks <= GP_COMM_MAX_RANKS */
    double join_timeout_s;      /* every rank must have joined within this; default 120 */
    double heartbeat_s;         /* each link carries a heartbeat this often; a link silent for
                                   3 heartbeats + 1 s is a lost rank; default 1 */
    double step_timeout_s;      /* a rank inside a step (gp_group_step_begin) longer than this is
                                   stuck, and the group fails; default 300, 0: no limit */
    double exit_after_s;        /* after a failure, a process that has not left the group within
                                   this prints why on stderr and exits with status 3 (a rank
                                   blocked in a kernel or a collective returns no other way);
                                   default 30, 0: never (tests) */
    /* Called once, from the group's thread, when the group fails (why: the
     * message): e.g. aborts the NCCL communicator so that blocked calls
     * return. May be NULL. */
    void (*on_fail)(void *ctx, const char *why);
    void *on_fail_ctx;
} gp_group_params;
gp_group_params gp_group_default_params(void);

typedef struct gp_group gp_group; /* opaque */

/* Join: rank 0 gives blob (n bytes, 1..GP_COMM_BLOB_MAX), the others get
 * it into blob (the same n). Returns when every rank has joined; then a
 * thread watches the links. GP_ERR_INVALID_ARG for bad params,
 * GP_ERR_IO naming the address when it cannot listen, connect or read,
 * GP_ERR_STATE when the join times out (naming the ranks missing), a rank
 * of another group size or a rank twice. */
gp_status gp_group_join(const gp_group_params *p, void *blob, size_t n, gp_group **out);
int gp_group_rank(const gp_group *g);
int gp_group_size(const gp_group *g);
/* Around each step: begin(step) marks the rank busy with that step, end
 * marks it done (the step's collectives returned). The heartbeats carry
 * both, and rank 0 fails the group when a rank stays busy beyond
 * step_timeout_s. */
void gp_group_step_begin(gp_group *g, uint64_t step);
void gp_group_step_end(gp_group *g);
/* Data from rank 0 to every other rank over the group's links, in order
 * (the same bytes to each; the CPU side of a run, e.g. the serving
 * leader's operations that the other ranks repeat). gp_group_send: rank 0
 * only, n bytes to every rank still in the group. gp_group_recv: the other
 * ranks, waiting (no limit: the group's watch ends the wait) until n bytes
 * of what rank 0 sent have come, in the order sent. GP_ERR_STATE when the
 * group failed (its message), or rank 0 left before the bytes came;
 * GP_ERR_INVALID_ARG from the wrong rank. */
gp_status gp_group_send(gp_group *g, const void *data, size_t n);
gp_status gp_group_recv(gp_group *g, void *data, size_t n);
/* True once the group has failed; why (may be NULL) gets the message. */
bool gp_group_failed(gp_group *g, char *why, size_t n);
/* Leave in order: the others are told this rank is done, which is not a
 * failure. Then frees g. NULL is fine. */
void gp_group_leave(gp_group *g);

/* One process per rank on this host. Call these before any CUDA call: a
 * forked CUDA context is unusable.
 * gp_ranks_fork: forks n - 1 processes; *rank is 0 in the caller, 1..n-1 in
 *   each of them, which go on from the call; pids[0..n) the processes' ids
 *   (the caller's first). GP_ERR_NO_MEMORY when one could not start (those
 *   started are ended and waited for).
 * gp_ranks_wait: rank 0 waits for ranks 1..n-1; codes[r] their exit
 *   statuses (128 + the signal when one ended it), codes[0] 0.
 * gp_ranks_run: fn(rank, arg) on every rank, rank 0 being the caller,
 *   which waits; codes[r] each one's result & 0xff. */
gp_status gp_ranks_fork(int n, int *rank, int *pids);
void gp_ranks_wait(int n, const int *pids, int *codes);
gp_status gp_ranks_run(int n, int (*fn)(int rank, void *arg), void *arg, int *codes);

/* ------------------------------------------------------------ NCCL */

/* Whether this build has NCCL (found at configure time). Without it every
 * gp_comm call below is GP_ERR_UNSUPPORTED saying so. */
bool gp_comm_available(void);

typedef struct gp_comm gp_comm; /* opaque */
typedef enum gp_comm_dtype { GP_COMM_F32 = 0, GP_COMM_BF16 = 1, GP_COMM_F16 = 2 } gp_comm_dtype;

/* An NCCL communicator on the calling thread's current CUDA device over the
 * group at spec (gp_rdv_parse), rank of n_ranks: rank 0 makes the unique id
 * and the group carries it. The group's failure aborts the communicator,
 * so a collective blocked on a lost rank returns. */
gp_status gp_comm_create(const gp_group_params *p, gp_comm **out);
gp_group *gp_comm_group(gp_comm *c);
/* In place, sum over the ranks, on stream (cudaStream_t); NCCL's return
 * code and async error checked. An aborted collective lets its stream go
 * on without a CUDA error: after synchronizing, gp_comm_check says whether
 * the results are whole. */
gp_status gp_comm_all_reduce(gp_comm *c, void *buf, size_t count, gp_comm_dtype dt, void *stream);
/* The sum of n fp32 values over the ranks, in place, with comm (a gp_comm *)
 * first: the shape of the engine's tensor-parallel reduce
 * (gp_engine_set_tp). Over peer memory up to gp_comm_set_peer_limit's
 * bytes, else gp_comm_all_reduce. */
gp_status gp_comm_sum_f32(void *comm, float *rows, size_t n, void *stream);
/* In place, every rank's n fp32 values: rank r's are buf[r n, (r+1) n) on
 * entry, and on return buf holds all n_ranks segments (NCCL's all-gather),
 * with comm (a gp_comm *) first: the engine's gather of a head split by
 * vocabulary (gp_engine_set_tp). */
gp_status gp_comm_gather_f32(void *comm, float *buf, size_t n, void *stream);

/* The one-shot all-reduce over peer memory, for the small fp32 sums of a
 * decode step where NCCL's latency (~15 us on NVLink) outweighs the bytes:
 * each rank copies its rows into a buffer the others map (CUDA IPC), raises
 * a flag in each of theirs, waits for theirs, and sums every rank's copy in
 * rank order (so all ranks get the same bits). Collective: every rank calls
 * it with the same max_bytes (> 0), which sizes the buffer. After it,
 * gp_comm_sum_f32 takes this path for sums of up to max_bytes and NCCL for
 * larger ones; like NCCL's, the calls must come in the same order on every
 * rank, and on one stream at a time. GP_ERR_UNSUPPORTED naming why when some
 * rank cannot map the others' memory (another host, no peer access): every
 * rank then keeps NCCL alone. A lost rank makes the waiting kernel return
 * (the group's failure raises a flag it reads); gp_comm_check says so. */
gp_status gp_comm_peer_setup(gp_comm *c, size_t max_bytes);
/* The programs' default max_bytes: where the one-shot sum stops beating
 * NCCL's on NVLink (measured between 16 and 32 MiB: docs/PERFORMANCE.md),
 * a decode step's hidden rows up to B = 1024 at hidden 4096 in fp32. */
#define GP_COMM_PEER_BYTES_DEFAULT ((size_t)16 << 20)
/* The sums gp_comm_sum_f32 sends over peer memory: up to this many bytes
 * (0: none; at most gp_comm_peer_setup's max_bytes), the same on every rank. */
gp_status gp_comm_set_peer_limit(gp_comm *c, size_t bytes);
gp_status gp_comm_send(gp_comm *c, const void *buf, size_t bytes, int peer, void *stream);
gp_status gp_comm_recv(gp_comm *c, void *buf, size_t bytes, int peer, void *stream);
/* GP_OK while the group holds and NCCL reports no asynchronous error; else
 * GP_ERR_STATE with the group's failure (which rank, why) or GP_ERR_CUDA
 * with NCCL's error. */
gp_status gp_comm_check(gp_comm *c);
/* Destroys the communicator and leaves the group in order. NULL is fine. */
void gp_comm_destroy(gp_comm *c);

#ifdef __cplusplus
}
#endif

#endif
