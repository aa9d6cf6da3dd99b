/* The one-shot all-reduce's setup over the group: each rank exports a
 * buffer (flags and two data slots) through CUDA IPC, the ranks swap the
 * handles with an NCCL all-gather and map each other's, and all agree on
 * whether every rank could before any of them takes the path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "comm_impl.h"

typedef struct peer_card {
    cudaIpcMemHandle_t h;
    char host[64];
    int ok; /* 1: this rank's buffer is ready to be mapped */
} peer_card;

/* An NCCL all-gather of each rank's n bytes at mine into all[n_ranks][n]
 * (host memory), through a device buffer, synchronously. */
static gp_status gather(gp_comm *c, const void *mine, void *all, size_t n, const char *what)
{
    const int R = gp_group_size(c->g), me = gp_group_rank(c->g);
    char *d = NULL;
    cudaError_t ce = cudaMalloc((void **)&d, n * (size_t)R);
    if (ce == cudaSuccess)
        ce = cudaMemcpy(d + (size_t)me * n, mine, n, cudaMemcpyHostToDevice);
    if (ce != cudaSuccess) {
        cudaFree(d);
        GP_FAIL(GP_ERR_CUDA, "%s: %s", what, cudaGetErrorString(ce));
    }
    gp_status st = gp_comm_nccl_check(c, ncclAllGather(d + (size_t)me * n, d, n, ncclUint8, c->nc, NULL), what);
    if (st == GP_OK && (ce = cudaStreamSynchronize(NULL)) == cudaSuccess)
        ce = cudaMemcpy(all, d, n * (size_t)R, cudaMemcpyDeviceToHost);
    cudaFree(d);
    if (st == GP_OK && ce != cudaSuccess)
        GP_FAIL(GP_ERR_CUDA, "%s: %s", what, cudaGetErrorString(ce));
    return st == GP_OK ? gp_comm_check(c) : st;
}

/* This rank's buffer, counters and abort flag; why gets the failure. */
static bool make_local(gp_comm_peer *p, size_t slot_bytes, peer_card *card, char *why, size_t n)
{
    const char *step = "cudaMalloc";
    cudaError_t ce = cudaMalloc(&p->region, GP_PEER_FLAG_BYTES + 2 * slot_bytes);
    if (ce == cudaSuccess && (step = "cudaMemset", ce = cudaMemset(p->region, 0, GP_PEER_FLAG_BYTES)) == cudaSuccess &&
        (step = "cudaMalloc", ce = cudaMalloc((void **)&p->args.counter, GP_PEER_BLOCKS * sizeof(unsigned))) ==
            cudaSuccess &&
        (step = "cudaMemset", ce = cudaMemset(p->args.counter, 0, GP_PEER_BLOCKS * sizeof(unsigned))) ==
            cudaSuccess &&
        (step = "cudaHostAlloc", ce = cudaHostAlloc((void **)&p->abort_host, sizeof(int), cudaHostAllocMapped)) ==
            cudaSuccess) {
        *p->abort_host = 0;
        void *dev = NULL;
        if ((step = "cudaHostGetDevicePointer", ce = cudaHostGetDevicePointer(&dev, (void *)p->abort_host, 0)) ==
                cudaSuccess &&
            (step = "cudaIpcGetMemHandle", ce = cudaIpcGetMemHandle(&card->h, p->region)) == cudaSuccess &&
            (step = "cudaDeviceSynchronize", ce = cudaDeviceSynchronize()) == cudaSuccess) {
            p->args.abort = dev;
            return true;
        }
    }
    snprintf(why, n, "%s: %s", step, cudaGetErrorString(ce));
    return false;
}

gp_status gp_comm_peer_setup(gp_comm *c, size_t max_bytes)
{
    if (!c || max_bytes == 0 || max_bytes > ((size_t)1 << 34))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_comm_peer_setup: comm %p, max_bytes %zu: allowed a communicator and "
                "1 byte to 16 GiB", (void *)c, max_bytes);
    if (c->peer)
        GP_FAIL(GP_ERR_STATE, "gp_comm_peer_setup: this communicator's peer buffers are set up already");
    const int R = gp_group_size(c->g), me = gp_group_rank(c->g);
    if (R > GP_PEER_MAX_RANKS)
        GP_FAIL(GP_ERR_UNSUPPORTED, "gp_comm_peer_setup: %d ranks: the one-shot all-reduce spans at most %d", R,
                GP_PEER_MAX_RANKS);
    gp_comm_peer *p = calloc(1, sizeof *p);
    peer_card *cards = calloc((size_t)R, sizeof *cards);
    int *all_mapped = calloc((size_t)R, sizeof(int));
    if (!p || !cards || !all_mapped) { /* before the collectives: this rank fails alone, and its exit fails the group */
        free(p);
        free(cards);
        free(all_mapped);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_comm_peer_setup: out of host memory");
    }
    const size_t slot_bytes = (max_bytes + 15) & ~(size_t)15;
    p->max_bytes = slot_bytes;
    p->limit = slot_bytes;
    p->args.slot_floats = slot_bytes / sizeof(float);
    p->args.rank = me;
    p->args.n_ranks = R;
    char why[256] = "";
    peer_card mine;
    memset(&mine, 0, sizeof mine);
    mine.ok = make_local(p, slot_bytes, &mine, why, sizeof why);
    if (gethostname(mine.host, sizeof mine.host - 1) != 0)
        snprintf(mine.host, sizeof mine.host, "?");
    gp_status st = gather(c, &mine, cards, sizeof mine, "gp_comm_peer_setup: swapping buffer handles");
    /* every rank maps every other's; then all say whether they could */
    int mapped = mine.ok;
    for (int r = 0; st == GP_OK && mapped && r < R; r++) {
        if (r == me) {
            p->args.flags[r] = p->region;
            continue;
        }
        if (!cards[r].ok) {
            snprintf(why, sizeof why, "rank %d could not export its buffer", r);
            mapped = 0;
        } else if (strcmp(cards[r].host, mine.host) != 0) {
            snprintf(why, sizeof why, "rank %d is on host %s, this one on %s: peer memory spans one host", r,
                     cards[r].host, mine.host);
            mapped = 0;
        } else {
            void *q = NULL;
            cudaError_t ce = cudaIpcOpenMemHandle(&q, cards[r].h, cudaIpcMemLazyEnablePeerAccess);
            if (ce != cudaSuccess) {
                snprintf(why, sizeof why, "cannot map rank %d's memory: cudaIpcOpenMemHandle: %s", r,
                         cudaGetErrorString(ce));
                (void)cudaGetLastError();
                mapped = 0;
            } else {
                p->args.flags[r] = q;
            }
        }
    }
    for (int r = 0; r < R; r++)
        if (p->args.flags[r])
            p->args.data[r] = (float *)((char *)p->args.flags[r] + GP_PEER_FLAG_BYTES);
    if (st == GP_OK)
        st = gather(c, &mapped, all_mapped, sizeof mapped, "gp_comm_peer_setup: agreeing");
    int bad = -1;
    for (int r = 0; st == GP_OK && r < R; r++)
        if (!all_mapped[r] && bad < 0)
            bad = r;
    free(all_mapped);
    free(cards);
    pthread_mutex_lock(&c->mu);
    c->peer = p;
    pthread_mutex_unlock(&c->mu);
    if (st == GP_OK && bad < 0)
        return GP_OK;
    gp_comm_peer_free(c);
    if (st != GP_OK)
        return st;
    if (bad == me)
        GP_FAIL(GP_ERR_UNSUPPORTED, "the one-shot all-reduce over peer memory is off: rank %d: %s", me, why);
    GP_FAIL(GP_ERR_UNSUPPORTED, "the one-shot all-reduce over peer memory is off: rank %d could not map the "
            "others' memory (its own message says why)", bad);
}

gp_status gp_comm_set_peer_limit(gp_comm *c, size_t bytes)
{
    if (!c || !c->peer)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_comm_set_peer_limit: %s", !c ? "comm is NULL" : "no peer buffers: call "
                "gp_comm_peer_setup first");
    if (bytes > c->peer->max_bytes)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_comm_set_peer_limit: %zu bytes: allowed 0..%zu (the buffers' size)", bytes,
                c->peer->max_bytes);
    c->peer->limit = bytes;
    return GP_OK;
}

void gp_comm_peer_abort(gp_comm *c)
{
    if (c->peer && c->peer->abort_host)
        *c->peer->abort_host = 1;
}

gp_status gp_comm_peer_sum(gp_comm *c, float *rows, size_t n, void *stream)
{
    const int ce = gp_peer_sum_launch(&c->peer->args, rows, n, stream);
    if (ce != (int)cudaSuccess)
        GP_FAIL(GP_ERR_CUDA, "the one-shot all-reduce of %zu floats: %s", n, cudaGetErrorString((cudaError_t)ce));
    return GP_OK;
}

void gp_comm_peer_free(gp_comm *c)
{
    pthread_mutex_lock(&c->mu);
    gp_comm_peer *p = c->peer;
    c->peer = NULL;
    pthread_mutex_unlock(&c->mu);
    if (!p)
        return;
    for (int r = 0; r < p->args.n_ranks; r++)
        if (r != p->args.rank && p->args.flags[r])
            (void)cudaIpcCloseMemHandle(p->args.flags[r]);
    cudaFree(p->region);
    cudaFree(p->args.counter);
    if (p->abort_host)
        cudaFreeHost((void *)p->abort_host);
    free(p);
}
