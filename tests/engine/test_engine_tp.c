/* The CUDA engine under tensor parallelism, two processes on two GPUs: each
 * rank uploads its shard (gp_host_weights_shard), its engine sums o's and
 * down's outputs (gp_engine_set_tp) through NCCL and, again, over peer
 * memory (gp_comm_peer_setup), and rank 0 runs the whole
 * model on its GPU beside: a batched prefill and greedy decode steps, eager
 * and from CUDA graphs, give the whole engine's tokens and logits within
 * TP_TOL (bf16 activations: the partial sums round differently), and the
 * two ranks' logits are the same bits. Models: the tiny preset, small-gqa
 * and qwen2-tiny (q/k/v biases). Skips without NCCL or two GPUs. */
#include "gp_test.h"

#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gp_comm.h"
#include "gp_engine.h"
#include "gp_model.h"
#include "gp_weights.h"

#define B 3
#define CTX 64
#define STEPS 6
/* max |TP - whole| / max |whole| over the logits */
#define TP_TOL 3e-2

static const char *const g_models[] = {"tiny", GP_TEST_DATA_DIR "/small-gqa", GP_TEST_DATA_DIR "/qwen2-tiny"};
static char g_spec[128];

typedef struct run_out {
    float *logits; /* [B (prefill) + STEPS x B][V] */
    int32_t toks[STEPS * B];
} run_out;

static int rank_fail(int rank, const char *what)
{
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, gp_last_error());
    return 1;
}

/* Prefill B prompts, then STEPS greedy steps. */
static gp_status run(gp_engine *e, int V, run_out *o)
{
    int32_t p[B][9], next[B];
    gp_prefill_seq seqs[B];
    for (int s = 0; s < B; s++) {
        for (int i = 0; i < 9; i++)
            p[s][i] = (int32_t)((13 * i + 7 * s + 1) % V);
        seqs[s] = (gp_prefill_seq){s, 3 + 2 * s, p[s]};
    }
    memset(o->logits, 0xff, sizeof(float) * (size_t)(B + STEPS * B) * V); /* poisoned */
    GP_TRY(gp_engine_prefill_batch(e, B, seqs, next, o->logits, NULL));
    const int ids[B] = {0, 1, 2};
    for (int st = 0; st < STEPS; st++) {
        GP_TRY(gp_engine_decode_step(e, B, ids, next, next, o->logits + (size_t)(B + st * B) * V));
        memcpy(o->toks + st * B, next, sizeof next);
    }
    return GP_OK;
}

static int rank_main(int rank, void *arg)
{
    (void)arg;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 2)
        return 77;
    if (cudaSetDevice(rank) != cudaSuccess)
        return 1;
    gp_group_params gp = gp_group_default_params();
    if (gp_rdv_parse(g_spec, &gp.addr) != GP_OK)
        return rank_fail(rank, "rendezvous");
    gp.rank = rank;
    gp.n_ranks = 2;
    gp.join_timeout_s = 60;
    gp.exit_after_s = 60;
    gp_comm *c = NULL;
    if (gp_comm_create(&gp, &c) != GP_OK)
        return rank_fail(rank, "gp_comm_create");
    if (gp_comm_peer_setup(c, GP_COMM_PEER_BYTES_DEFAULT) != GP_OK)
        return rank_fail(rank, "gp_comm_peer_setup");
    int rc = 0;
    for (size_t mi = 0; mi < sizeof g_models / sizeof g_models[0] && !rc; mi++) {
        gp_model_source src;
        gp_host_weights w, s;
        if (gp_model_source_resolve(g_models[mi], 3, &src) != GP_OK || gp_model_source_load_host(&src, &w) != GP_OK)
            return rank_fail(rank, g_models[mi]);
        if (gp_host_weights_shard(&w, 2, rank, &s) != GP_OK)
            return rank_fail(rank, "shard");
        const int V = w.cfg.vocab;
        const size_t nl = (size_t)(B + STEPS * B) * V;
        run_out tp = {.logits = malloc(sizeof(float) * nl)}, whole = {.logits = malloc(sizeof(float) * nl)};
        float *other = malloc(sizeof(float) * nl);
        gp_device_weights *dws = NULL, *dww = NULL;
        if (gp_device_weights_upload(&s, GP_DTYPE_BF16, &dws) != GP_OK)
            return rank_fail(rank, "upload the shard");
        for (int mode = 0; mode < 4 && !rc; mode++) { /* eager and graphs, NCCL sums and peer memory's */
            const int graphs = mode & 1;
            const bool peer = mode >> 1;
            if (gp_comm_set_peer_limit(c, peer ? GP_COMM_PEER_BYTES_DEFAULT : 0) != GP_OK)
                return rank_fail(rank, "gp_comm_set_peer_limit");
            const gp_engine_tp tps = {.rank = rank, .tp = 2, .sum = gp_comm_sum_f32, .gather = gp_comm_gather_f32,
                                      .ctx = c};
            gp_engine_params p = gp_engine_default_params();
            p.max_batch = B;
            p.max_context = CTX;
            p.use_graphs = graphs;
            gp_engine *e = NULL;
            if (gp_engine_create(dws, &p, &e) != GP_OK || gp_engine_set_tp(e, &tps) != GP_OK ||
                run(e, V, &tp) != GP_OK)
                return rank_fail(rank, "the tensor-parallel engine");
            gp_engine_destroy(e);
            /* the ranks' logits must be the same bits: rank 1 sends its, rank 0 compares */
            void *d = NULL;
            if (cudaMalloc(&d, sizeof(float) * nl) != cudaSuccess)
                return 1;
            if (rank == 1) {
                cudaMemcpy(d, tp.logits, sizeof(float) * nl, cudaMemcpyHostToDevice);
                if (gp_comm_send(c, d, sizeof(float) * nl, 0, NULL) != GP_OK)
                    return rank_fail(rank, "send");
            } else if (gp_comm_recv(c, d, sizeof(float) * nl, 1, NULL) != GP_OK) {
                return rank_fail(rank, "recv");
            }
            if (cudaDeviceSynchronize() != cudaSuccess || gp_comm_check(c) != GP_OK)
                return rank_fail(rank, "the ranks' exchange");
            if (rank == 0) {
                cudaMemcpy(other, d, sizeof(float) * nl, cudaMemcpyDeviceToHost);
                if (!dww && gp_device_weights_upload(&w, GP_DTYPE_BF16, &dww) != GP_OK)
                    return rank_fail(rank, "upload the whole model");
                if (gp_engine_create(dww, &p, &e) != GP_OK || run(e, V, &whole) != GP_OK)
                    return rank_fail(rank, "the whole engine");
                gp_engine_destroy(e);
                const double err = gp_test_rel_err(tp.logits, whole.logits, (int)nl);
                const bool same_bits = !memcmp(other, tp.logits, sizeof(float) * nl);
                const bool same_toks = !memcmp(tp.toks, whole.toks, sizeof tp.toks);
                printf("%s, TP = 2, %s, %s sums: logits %.2e from the whole engine's, tokens %s, ranks %s\n",
                       g_models[mi], graphs ? "graphs" : "eager", peer ? "peer-memory" : "NCCL", err, same_toks ? "equal" : "DIFFER",
                       same_bits ? "the same bits" : "DIFFER");
                if (err > TP_TOL || !same_toks || !same_bits)
                    rc = 1;
            }
            cudaFree(d);
        }
        gp_device_weights_destroy(dws);
        gp_device_weights_destroy(dww);
        free(tp.logits);
        free(whole.logits);
        free(other);
        gp_host_weights_free(&s);
        gp_host_weights_free(&w);
    }
    fflush(stdout);
    gp_comm_destroy(c);
    return rc;
}

int main(void)
{
    if (!gp_comm_available()) {
        printf("engine_tp: SKIPPED: this build has no NCCL\n");
        return 77;
    }
    snprintf(g_spec, sizeof g_spec, "file:/tmp/gp_engine_tp.%d", (int)getpid());
    int codes[2];
    if (gp_ranks_run(2, rank_main, NULL, codes) != GP_OK) {
        printf("engine_tp: %s\n", gp_last_error());
        return 1;
    }
    unlink(g_spec + 5);
    if (codes[0] == 77 || codes[1] == 77) {
        printf("engine_tp: SKIPPED: fewer than 2 GPUs\n");
        return 77;
    }
    printf("engine_tp: ranks exited with %d and %d: %s\n", codes[0], codes[1],
           codes[0] || codes[1] ? "FAILED" : "PASSED");
    return codes[0] || codes[1];
}
