/* The NCCL communicator over a group (built where configure found NCCL):
 * rank 0's unique id travels as the group's blob, and the group's failure
 * aborts the communicator so that a collective blocked on a lost rank
 * returns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "comm_impl.h"

_Static_assert(sizeof(ncclUniqueId) <= GP_COMM_BLOB_MAX, "NCCL's unique id must fit the group's blob");

bool gp_comm_available(void) { return true; }

static void abort_comm(void *ctx, const char *why)
{
    (void)why;
    gp_comm *c = ctx;
    pthread_mutex_lock(&c->mu);
    if (c->ready && !c->aborted) {
        c->aborted = true;
        gp_comm_peer_abort(c);
        (void)ncclCommAbort(c->nc);
    }
    pthread_mutex_unlock(&c->mu);
}

/* The group's failure, else NCCL's own error, as a status with its message. */
gp_status gp_comm_fail(gp_comm *c, ncclResult_t r, const char *what)
{
    char why[512];
    if (gp_group_failed(c->g, why, sizeof why))
        GP_FAIL(GP_ERR_STATE, "%s: the group failed: %s", what, why);
    GP_FAIL(GP_ERR_CUDA, "%s: NCCL error %d: %s (rank %d of %d)", what, (int)r, ncclGetErrorString(r),
            gp_group_rank(c->g), gp_group_size(c->g));
}

gp_status gp_comm_nccl_check(gp_comm *c, ncclResult_t r, const char *what)
{
    if (r == ncclSuccess) {
        ncclResult_t a = ncclSuccess;
        if (ncclCommGetAsyncError(c->nc, &a) == ncclSuccess && (a == ncclSuccess || a == ncclInProgress))
            return GP_OK;
        r = a;
    }
    return gp_comm_fail(c, r, what);
}

gp_status gp_comm_create(const gp_group_params *p, gp_comm **out)
{
    if (!p || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_comm_create: params or out is NULL");
    *out = NULL;
    gp_comm *c = calloc(1, sizeof *c);
    if (!c)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_comm_create: out of memory");
    pthread_mutex_init(&c->mu, NULL);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r = p->rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    gp_status st = GP_OK;
    if (r != ncclSuccess) {
        gp_set_error("gp_comm_create: ncclGetUniqueId: %s", ncclGetErrorString(r));
        st = GP_ERR_CUDA;
    }
    gp_group_params gp = *p;
    gp.on_fail = abort_comm;
    gp.on_fail_ctx = c;
    if (st == GP_OK)
        st = gp_group_join(&gp, &id, sizeof id, &c->g);
    if (st == GP_OK) {
        r = ncclCommInitRank(&c->nc, p->n_ranks, id, p->rank);
        if (r != ncclSuccess)
            st = gp_comm_fail(c, r, "gp_comm_create: ncclCommInitRank");
    }
    if (st != GP_OK) {
        gp_group_leave(c->g);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return st;
    }
    pthread_mutex_lock(&c->mu);
    c->ready = true;
    const bool failed = gp_group_failed(c->g, NULL, 0);
    pthread_mutex_unlock(&c->mu);
    if (failed) /* it failed while NCCL initialised: no abort reached this communicator */
        abort_comm(c, NULL);
    *out = c;
    return GP_OK;
}

gp_group *gp_comm_group(gp_comm *c) { return c ? c->g : NULL; }

gp_status gp_comm_check(gp_comm *c)
{
    if (!c)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_comm_check: comm is NULL");
    if (c->aborted)
        return gp_comm_fail(c, ncclInternalError, "gp_comm_check");
    return gp_comm_nccl_check(c, ncclSuccess, "gp_comm_check");
}

static ncclDataType_t nccl_type(gp_comm_dtype dt)
{
    return dt == GP_COMM_BF16 ? ncclBfloat16 : dt == GP_COMM_F16 ? ncclFloat16 : ncclFloat32;
}

gp_status gp_comm_all_reduce(gp_comm *c, void *buf, size_t count, gp_comm_dtype dt, void *stream)
{
    if (!c || !buf || dt < GP_COMM_F32 || dt > GP_COMM_F16)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_comm_all_reduce: comm %p, buf %p, dtype %d (allowed 0..2)", (void *)c, buf,
                (int)dt);
    if (c->aborted)
        return gp_comm_fail(c, ncclInternalError, "gp_comm_all_reduce");
    return gp_comm_nccl_check(c, ncclAllReduce(buf, buf, count, nccl_type(dt), ncclSum, c->nc, (cudaStream_t)stream),
                 "gp_comm_all_reduce");
}

gp_status gp_comm_sum_f32(void *comm, float *rows, size_t n, void *stream)
{
    gp_comm *c = comm;
    if (c && rows && c->peer && n * sizeof(float) <= c->peer->limit) {
        if (c->aborted)
            return gp_comm_fail(c, ncclInternalError, "gp_comm_sum_f32");
        return gp_comm_peer_sum(c, rows, n, stream);
    }
    return gp_comm_all_reduce(c, rows, n, GP_COMM_F32, stream);
}

gp_status gp_comm_gather_f32(void *comm, float *buf, size_t n, void *stream)
{
    gp_comm *c = comm;
    if (!c || !buf)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_comm_gather_f32: comm %p, buf %p", (void *)c, (void *)buf);
    if (c->aborted)
        return gp_comm_fail(c, ncclInternalError, "gp_comm_gather_f32");
    return gp_comm_nccl_check(c, ncclAllGather(buf + (size_t)gp_group_rank(c->g) * n, buf, n, ncclFloat32, c->nc,
                                               (cudaStream_t)stream),
                              "gp_comm_gather_f32");
}

gp_status gp_comm_send(gp_comm *c, const void *buf, size_t bytes, int peer, void *stream)
{
    if (!c || !buf || peer < 0 || peer >= gp_group_size(c->g) || peer == gp_group_rank(c->g))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_comm_send: comm %p, buf %p, peer %d (allowed another rank)", (void *)c,
                (const void *)buf, peer);
    if (c->aborted)
        return gp_comm_fail(c, ncclInternalError, "gp_comm_send");
    return gp_comm_nccl_check(c, ncclSend(buf, bytes, ncclUint8, peer, c->nc, (cudaStream_t)stream), "gp_comm_send");
}

gp_status gp_comm_recv(gp_comm *c, void *buf, size_t bytes, int peer, void *stream)
{
    if (!c || !buf || peer < 0 || peer >= gp_group_size(c->g) || peer == gp_group_rank(c->g))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_comm_recv: comm %p, buf %p, peer %d (allowed another rank)", (void *)c, buf,
                peer);
    if (c->aborted)
        return gp_comm_fail(c, ncclInternalError, "gp_comm_recv");
    return gp_comm_nccl_check(c, ncclRecv(buf, bytes, ncclUint8, peer, c->nc, (cudaStream_t)stream), "gp_comm_recv");
}

void gp_comm_destroy(gp_comm *c)
{
    if (!c)
        return;
    if (c->peer && !c->aborted) { /* no rank frees its buffer while another may still read it */
        int one = 1, *d = NULL;
        if (cudaMalloc((void **)&d, sizeof one) == cudaSuccess &&
            cudaMemcpy(d, &one, sizeof one, cudaMemcpyHostToDevice) == cudaSuccess &&
            ncclAllReduce(d, d, 1, ncclInt32, ncclSum, c->nc, NULL) == ncclSuccess)
            (void)cudaStreamSynchronize(NULL);
        cudaFree(d);
    }
    gp_comm_peer_free(c);
    pthread_mutex_lock(&c->mu);
    if (!c->aborted) {
        c->aborted = true; /* the group's thread must not abort what is being destroyed */
        (void)ncclCommDestroy(c->nc);
    }
    pthread_mutex_unlock(&c->mu);
    gp_group_leave(c->g);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
