/* Inside the NCCL communicator: its state, shared by the collectives
 * (nccl.c) and the one-shot all-reduce over peer memory (peer.c). */
#ifndef GP_COMM_IMPL_H
#define GP_COMM_IMPL_H

#include <pthread.h>

#include <nccl.h>

#include "gp_comm.h"
#include "peer_sum.h"

typedef struct gp_comm_peer {
    gp_peer_sum_args args;    /* what the kernel is given: the mapped buffers, this rank's counters */
    void *region;             /* this rank's flags and two data slots (cudaMalloc, exported) */
    volatile int *abort_host; /* pinned, mapped: raised when the group fails */
    size_t max_bytes, limit;
} gp_comm_peer;

struct gp_comm {
    gp_group *g;
    ncclComm_t nc;
    pthread_mutex_t mu; /* nc's life against the group thread's abort */
    bool ready, aborted;
    gp_comm_peer *peer; /* NULL until gp_comm_peer_setup */
};

/* The group's failure, else NCCL's own error r, as a status naming what. */
gp_status gp_comm_fail(gp_comm *c, ncclResult_t r, const char *what);
/* r and NCCL's asynchronous error checked. */
gp_status gp_comm_nccl_check(gp_comm *c, ncclResult_t r, const char *what);
/* Raises the peer kernel's abort flag (from the group's thread). */
void gp_comm_peer_abort(gp_comm *c);
void gp_comm_peer_free(gp_comm *c);
gp_status gp_comm_peer_sum(gp_comm *c, float *rows, size_t n, void *stream);

#endif
