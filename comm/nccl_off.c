/* The NCCL calls of a build that found no NCCL: each says so. */
#include "gp_comm.h"

#define OFF(fn)                                                                                                \
    GP_FAIL(GP_ERR_UNSUPPORTED, fn ": this build has no NCCL, so multi-GPU runs are off (configure found no "    \
            "nccl.h and libnccl: install a CUDA toolkit with NCCL or the nvidia-nccl-cu13 wheel and configure "     \
            "again)")

bool gp_comm_available(void) { return false; }

gp_status gp_comm_create(const gp_group_params *p, gp_comm **out)
{
    (void)p;
    if (out)
        *out = NULL;
    OFF("gp_comm_create");
}

gp_group *gp_comm_group(gp_comm *c)
{
    (void)c;
    return NULL;
}

gp_status gp_comm_all_reduce(gp_comm *c, void *buf, size_t count, gp_comm_dtype dt, void *stream)
{
    (void)c, (void)buf, (void)count, (void)dt, (void)stream;
    OFF("gp_comm_all_reduce");
}

gp_status gp_comm_sum_f32(void *comm, float *rows, size_t n, void *stream)
{
    (void)comm, (void)rows, (void)n, (void)stream;
    OFF("gp_comm_sum_f32");
}

gp_status gp_comm_gather_f32(void *comm, float *buf, size_t n, void *stream)
{
    (void)comm, (void)buf, (void)n, (void)stream;
    OFF("gp_comm_gather_f32");
}

gp_status gp_comm_peer_setup(gp_comm *c, size_t max_bytes)
{
    (void)c, (void)max_bytes;
    OFF("gp_comm_peer_setup");
}

gp_status gp_comm_set_peer_limit(gp_comm *c, size_t bytes)
{
    (void)c, (void)bytes;
    OFF("gp_comm_set_peer_limit");
}

gp_status gp_comm_send(gp_comm *c, const void *buf, size_t bytes, int peer, void *stream)
{
    (void)c, (void)buf, (void)bytes, (void)peer, (void)stream;
    OFF("gp_comm_send");
}

gp_status gp_comm_recv(gp_comm *c, void *buf, size_t bytes, int peer, void *stream)
{
    (void)c, (void)buf, (void)bytes, (void)peer, (void)stream;
    OFF("gp_comm_recv");
}

gp_status gp_comm_check(gp_comm *c)
{
    (void)c;
    OFF("gp_comm_check");
}

void gp_comm_destroy(gp_comm *c) { (void)c; }
