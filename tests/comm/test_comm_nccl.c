/* NCCL over the group, two processes on two GPUs of this host (fork before
 * any CUDA call): all-reduce sums exactly in fp32 and bf16 at 1 to 16M
 * elements, poisoned results before each, send/recv, the latency of small
 * all-reduces (median of device events, printed), and the fault: rank 1
 * exits without leaving while rank 0 waits in an all-reduce, which must
 * return (the group aborts the communicator) or end the process by the
 * group's exit, naming rank 1, within a bounded time. The one-shot
 * all-reduce over peer memory: the same sums as its CPU reference, bit for
 * bit, at 1 to 4M floats, aligned and not, eager and replayed from a CUDA
 * graph, calls of alternating sizes in a row, its latency beside NCCL's,
 * and the same fault with rank 0 waiting in its kernel (a second pair of
 * processes). Skips (77) without NCCL in the build or two GPUs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gp_comm.h"
#include "peer_sum.h"

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "rank %d: %s: %s\n", rank, #x, cudaGetErrorString(e_));               \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)
#define GK(x)                                                                                      \
    do {                                                                                           \
        if ((x) != GP_OK) {                                                                        \
            fprintf(stderr, "rank %d: %s: %s\n", rank, #x, gp_last_error());                       \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

static uint16_t bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16); /* exact for the small integers used */
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Rank r's input value i of a call (distinct per rank, call and element,
 * not integers: the sum's rounding is checked bit for bit). */
static float peer_in(int r, int call, size_t i)
{
    return (float)((i * 2654435761u + (unsigned)call * 97u + (unsigned)r * 31u) % 10007u) / 1024.0f - 4.5f;
}

/* The one-shot all-reduce against its reference: calls of each count in a
 * row (sizes alternating, so slots and counters turn over), then the same
 * captured in a CUDA graph and replayed. */
static int check_peer(int rank, gp_comm *c, cudaStream_t s)
{
    const size_t counts[] = {1, 3, 1000, 4096, 4096 * 64 + 3, (size_t)1 << 22, 4096 * 8};
    const size_t most = (size_t)1 << 22;
    float *d = NULL, *h = malloc(sizeof(float) * (most + 1)), *want = malloc(sizeof(float) * (most + 1));
    float *in[2] = {malloc(sizeof(float) * (most + 1)), malloc(sizeof(float) * (most + 1))};
    CK(cudaMalloc((void **)&d, sizeof(float) * (most + 1)));
    int call = 0;
    for (int pass = 0; pass < 3; pass++) /* eager, eager again, a graph replayed */
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++, call++) {
            const size_t n = counts[ci];
            const size_t off = ci % 2; /* every other call at a pointer not 16-byte aligned */
            for (int r = 0; r < 2; r++)
                for (size_t i = 0; i < n; i++)
                    in[r][i] = peer_in(r, call, i);
            gp_peer_sum_ref((const float *const *)in, 2, n, want);
            CK(cudaMemcpy(d + off, in[rank], sizeof(float) * n, cudaMemcpyHostToDevice));
            if (pass < 2) {
                GK(gp_comm_sum_f32(c, d + off, n, s));
            } else {
                cudaGraph_t g;
                cudaGraphExec_t ge;
                CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
                GK(gp_comm_sum_f32(c, d + off, n, s));
                CK(cudaStreamEndCapture(s, &g));
                CK(cudaGraphInstantiate(&ge, g, 0));
                for (int rep = 0; rep < 3; rep++) { /* inputs again before each replay */
                    CK(cudaMemcpyAsync(d + off, in[rank], sizeof(float) * n, cudaMemcpyHostToDevice, s));
                    CK(cudaGraphLaunch(ge, s));
                }
                CK(cudaGraphExecDestroy(ge));
                CK(cudaGraphDestroy(g));
            }
            CK(cudaStreamSynchronize(s));
            GK(gp_comm_check(c));
            memset(h, 0xff, sizeof(float) * n); /* poisoned */
            CK(cudaMemcpy(h, d + off, sizeof(float) * n, cudaMemcpyDeviceToHost));
            if (memcmp(h, want, sizeof(float) * n) != 0) {
                size_t i = 0;
                while (memcmp(&h[i], &want[i], sizeof(float)) == 0)
                    i++;
                fprintf(stderr, "rank %d: peer sum of %zu (pass %d): element %zu is %.9g, want %.9g\n", rank, n, pass,
                        i, h[i], want[i]);
                return 1;
            }
        }
    if (rank == 0)
        printf("peer sums: %d calls of 1 to %zu floats, eager and from a graph, equal to the reference\n", call, most);
    CK(cudaFree(d));
    free(h);
    free(want);
    free(in[0]);
    free(in[1]);
    return 0;
}

/* Median and min microseconds of 50 sums of n floats after 10 (device events). */
static void time_sums(int rank, gp_comm *c, cudaStream_t s, float *d, size_t n, float *med, float *mn)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[50];
    for (int it = 0; it < 60; it++) {
        CK(cudaEventRecord(e0, s));
        GK(gp_comm_sum_f32(c, d, n, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        if (it >= 10)
            CK(cudaEventElapsedTime(&t[it - 10], e0, e1));
    }
    qsort(t, 50, sizeof t[0], cmp_f);
    *med = 1e3f * (t[24] + t[25]) / 2;
    *mn = 1e3f * t[0];
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
}

/* fp32 sums of B x 4096 over peer memory and through NCCL, alternately. */
static void peer_latency(int rank, gp_comm *c, cudaStream_t s)
{
    const int rows[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
    float *d = NULL;
    CK(cudaMalloc((void **)&d, sizeof(float) * 4096 * 2048));
    CK(cudaMemset(d, 0, sizeof(float) * 4096 * 2048));
    if (rank == 0)
        printf("\n| fp32 sum of B x 4096 | KB | peer median us | peer min us | NCCL median us | NCCL min us |\n"
               "|---:|---:|---:|---:|---:|---:|\n");
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
        const size_t n = (size_t)4096 * rows[ri];
        float pm, pn, nm, nn;
        GK(gp_comm_set_peer_limit(c, n * sizeof(float)));
        time_sums(rank, c, s, d, n, &pm, &pn);
        GK(gp_comm_set_peer_limit(c, 0));
        time_sums(rank, c, s, d, n, &nm, &nn);
        if (rank == 0)
            printf("| %d | %zu | %.1f | %.1f | %.1f | %.1f |\n", rows[ri], n * 4 / 1024, pm, pn, nm, nn);
    }
    fflush(stdout);
    CK(cudaFree(d));
}

/* The second pair: rank 0 waits in the peer kernel for a rank 1 that
 * exits; the group's failure must end the wait and name rank 1. */
static int peer_fault(int rank, gp_comm *c, cudaStream_t s)
{
    float *d = NULL;
    CK(cudaMalloc((void **)&d, sizeof(float) * 4096));
    CK(cudaMemset(d, 0, sizeof(float) * 4096));
    GK(gp_comm_sum_f32(c, d, 4096, s));
    CK(cudaStreamSynchronize(s));
    if (rank == 1) {
        usleep(1000000);
        _exit(0);
    }
    const uint64_t t0 = gp_now_ns();
    gp_status st = gp_comm_sum_f32(c, d, 4096, s);
    cudaError_t ce = cudaStreamSynchronize(s);
    const double waited = (gp_now_ns() - t0) / 1e9;
    gp_status chk = gp_comm_check(c);
    printf("rank 0: the peer sum without rank 1 returned %s, its stream %s, after %.2f s; gp_comm_check: %s: %s\n",
           gp_status_str(st), cudaGetErrorString(ce), waited, gp_status_str(chk), gp_last_error());
    fflush(stdout);
    return chk != GP_ERR_STATE || !strstr(gp_last_error(), "rank 1") || waited > 10;
}

static int run_rank(int rank, const char *spec, bool fault_in_peer)
{
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 2) {
        fprintf(stderr, "rank %d: %d GPU(s): this test needs 2\n", rank, n_dev);
        return 77;
    }
    CK(cudaSetDevice(rank));
    gp_group_params p = gp_group_default_params();
    GK(gp_rdv_parse(spec, &p.addr));
    p.rank = rank;
    p.n_ranks = 2;
    p.join_timeout_s = 60;
    p.heartbeat_s = 0.5;
    p.step_timeout_s = 20;
    p.exit_after_s = 20;
    gp_comm *c = NULL;
    GK(gp_comm_create(&p, &c));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    const gp_status ps = gp_comm_peer_setup(c, sizeof(float) << 23);
    if (ps != GP_OK) {
        fprintf(stderr, "rank %d: gp_comm_peer_setup: %s\n", rank, gp_last_error());
        return 1;
    }
    if (fault_in_peer)
        return peer_fault(rank, c, s);
    if (check_peer(rank, c, s))
        return 1;
    peer_latency(rank, c, s);
    const size_t counts[] = {1, 1000, 4096 * 8, (size_t)1 << 20, (size_t)1 << 24};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        const size_t n = counts[ci];
        float *h = malloc(sizeof(float) * n);
        uint16_t *hb = malloc(sizeof(uint16_t) * n);
        void *d = NULL;
        CK(cudaMalloc(&d, sizeof(float) * n));
        for (int dt = 0; dt < 2; dt++) {
            for (size_t i = 0; i < n; i++) {
                const float v = (float)(rank + 1) + (float)(i % 7);
                h[i] = v;
                hb[i] = bf16(v);
            }
            CK(cudaMemcpy(d, dt ? (void *)hb : (void *)h, (dt ? 2 : 4) * n, cudaMemcpyHostToDevice));
            GK(gp_comm_all_reduce(c, d, n, dt ? GP_COMM_BF16 : GP_COMM_F32, s));
            CK(cudaStreamSynchronize(s));
            memset(h, 0xff, sizeof(float) * n); /* poisoned */
            memset(hb, 0xff, sizeof(uint16_t) * n);
            CK(cudaMemcpy(dt ? (void *)hb : (void *)h, d, (dt ? 2 : 4) * n, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < n; i++) {
                const float want = 3.0f + 2.0f * (float)(i % 7), got = dt ? from_bf16(hb[i]) : h[i];
                if (got != want) {
                    fprintf(stderr, "rank %d: all-reduce %s of %zu: element %zu is %g, want %g\n", rank,
                            dt ? "bf16" : "f32", n, i, got, want);
                    return 1;
                }
            }
        }
        free(h);
        free(hb);
        CK(cudaFree(d));
    }
    /* send/recv: rank 0 sends 1 MB, rank 1 receives it */
    const size_t nb = 1 << 20;
    unsigned char *hm = malloc(nb);
    void *dm = NULL;
    CK(cudaMalloc(&dm, nb));
    for (size_t i = 0; i < nb; i++)
        hm[i] = (unsigned char)(i * 13 + 5);
    if (rank == 0) {
        CK(cudaMemcpy(dm, hm, nb, cudaMemcpyHostToDevice));
        GK(gp_comm_send(c, dm, nb, 1, s));
    } else {
        CK(cudaMemset(dm, 0, nb));
        GK(gp_comm_recv(c, dm, nb, 0, s));
    }
    CK(cudaStreamSynchronize(s));
    if (rank == 1) {
        unsigned char *got = malloc(nb);
        CK(cudaMemcpy(got, dm, nb, cudaMemcpyDeviceToHost));
        if (memcmp(got, hm, nb) != 0) {
            fprintf(stderr, "rank 1: the received bytes differ\n");
            return 1;
        }
        free(got);
    }
    /* latency: bf16 all-reduces of a decode step's hidden rows (4096 x B) */
    const int rows[] = {1, 8, 64, 256};
    void *dl = NULL;
    CK(cudaMalloc(&dl, 4096 * 256 * 2));
    CK(cudaMemset(dl, 0, 4096 * 256 * 2));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
        float t[50];
        for (int it = 0; it < 60; it++) {
            CK(cudaEventRecord(e0, s));
            GK(gp_comm_all_reduce(c, dl, (size_t)4096 * rows[ri], GP_COMM_BF16, s));
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            if (it >= 10)
                CK(cudaEventElapsedTime(&t[it - 10], e0, e1));
        }
        qsort(t, 50, sizeof t[0], cmp_f);
        if (rank == 0)
            printf("all-reduce bf16 of %d x 4096 (%d KB): median %.1f us, min %.1f us\n", rows[ri],
                   rows[ri] * 8, 1e3 * (t[24] + t[25]) / 2, 1e3 * t[0]);
    }
    fflush(stdout);
    /* the fault: rank 1 leaves no word and exits; rank 0's next all-reduce waits for it */
    GK(gp_comm_all_reduce(c, dl, 4096, GP_COMM_BF16, s));
    CK(cudaStreamSynchronize(s));
    if (rank == 1) { /* after rank 0 is inside the next all-reduce */
        usleep(1000000);
        _exit(0);
    }
    const uint64_t t0 = gp_now_ns();
    gp_group_step_begin(gp_comm_group(c), 1);
    gp_status st = gp_comm_all_reduce(c, dl, 4096, GP_COMM_BF16, s);
    cudaError_t ce = cudaStreamSynchronize(s);
    const double waited = (gp_now_ns() - t0) / 1e9;
    gp_status chk = gp_comm_check(c);
    printf("rank 0: the all-reduce without rank 1 returned %s, its stream %s, after %.2f s; gp_comm_check: %s: "
           "%s\n", gp_status_str(st), cudaGetErrorString(ce), waited, gp_status_str(chk), gp_last_error());
    fflush(stdout);
    if (chk != GP_ERR_STATE || !strstr(gp_last_error(), "rank 1") || waited > 10)
        return 1;
    return 0; /* the communicator was aborted; the process ends without destroying it */
}

/* Two processes, one per GPU; fault_in_peer: the second scenario. 0, 1
 * (a rank failed) or 77 (fewer than 2 GPUs). */
static int run_pair(bool fault_in_peer)
{
    char spec[128];
    snprintf(spec, sizeof spec, "file:/tmp/gp_comm_nccl.%d.%d", (int)getpid(), (int)fault_in_peer);
    unlink(spec + 5);
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        fflush(stdout);
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(run_rank(r, spec, fault_in_peer));
    }
    int rc = 0;
    for (int r = 0; r < 2; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        printf("rank %d exited with %d%s\n", r, code, code == 3 ? " (the group's exit after the failure)" : "");
        if (code == 77)
            rc = 77;
        else if (code != 0 && !(r == 0 && code == 3) && rc != 77)
            rc = 1;
    }
    unlink(spec + 5);
    return rc;
}

int main(void)
{
    if (!gp_comm_available()) {
        printf("comm_nccl: SKIPPED: %s\n", "this build has no NCCL");
        return 77;
    }
    int rc = run_pair(false);
    if (rc == 77) {
        printf("comm_nccl: SKIPPED: fewer than 2 GPUs\n");
        return 77;
    }
    if (run_pair(true) != 0)
        rc = 1;
    printf("comm_nccl: %s\n", rc ? "FAILED" : "PASSED");
    return rc;
}
