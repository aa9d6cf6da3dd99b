/* A real sticky CUDA error (GP_FAULT_TRAP: a kernel that traps at the N-th
 * decode step), in a child per case: the step returns GP_ERR_DEVICE_FAULT
 * promptly, later steps, allocations and creates fail fast with it, cuBLASLt
 * failures on the dead context say so, and teardown does not hang. For the
 * sequential engine (graphs and eager) and the pipeline on a green pool.
 * Skips without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "child_util.h"
#include "gp_device.h"
#include "gp_engine.h"
#include "gp_green.h"
#include "gp_pipeline.h"
#include "kernels.h"
#include "gp_weights.h"

/* The whole child, CUDA start-up and teardown included. */
#define FAULT_CHILD_LIMIT_S 120.0
/* The trapped step: the trap itself takes microseconds; anything near this
 * is a wait that should not be there. */
#define TRAPPED_STEP_LIMIT_S 10.0
/* Calls after the fault must not touch the device at all. */
#define LATER_CALL_LIMIT_S 1.0
#define TEARDOWN_LIMIT_S 20.0

#define FB 4 /* batch */

/* Status and seconds of one call, with a report line. */
#define TIMED(r, label, call, st_out, dt_out)                                                    \
    do {                                                                                         \
        gp_clear_error();                                                                        \
        double t0_ = gp_now_s();                                                                 \
        (st_out) = (call);                                                                       \
        (dt_out) = gp_now_s() - t0_;                                                             \
        gt_report_add((r), "%s: %s after %.3f s: %s", (label), gp_status_str(st_out), (dt_out),  \
                      gp_last_error());                                                          \
    } while (0)

static int probe_gpu(void *arg, gt_report *r)
{
    if (gp_cuda_available() != GP_OK) {
        gt_report_add(r, "%s", gp_last_error());
        return 77;
    }
    return 0;
}

static void run_case(gt_child_fn fn, void *arg, const char *trap, const char *name)
{
    /* a hung wait becomes a GP_ERR_DEVICE_FAULT naming it within 5 s, which
     * the step-time checks then report, instead of a killed child */
    const char *env[] = {trap, "GP_DEVICE_WAIT_TIMEOUT_S=5", NULL};
    gt_child c;
    gt_child_run(fn, arg, env, FAULT_CHILD_LIMIT_S, &c);
    printf("%s (%s, %.2f s):\n%s", name, trap, c.seconds, c.rep.text);
    if (c.timed_out)
        fail_msg("%s: the child hung (killed after %.0f s)", name, FAULT_CHILD_LIMIT_S);
    if (c.signaled)
        fail_msg("%s: the child died of signal %d", name, c.sig);
    if (c.rep.code != 0)
        fail_msg("%s: verdict %d (see above)", name, c.rep.code);
}

/* After the fault: a new engine over the same weights must fail fast too. */
static int check_later_create(gt_report *r, gp_device_weights *dw)
{
    gp_status st;
    double dt;
    gp_engine_params ep = gp_engine_default_params();
    ep.max_batch = FB;
    ep.max_context = 32;
    gp_engine *e2 = NULL;
    TIMED(r, "engine create after the fault", gp_engine_create(dw, &ep, &e2), st, dt);
    gp_engine_destroy(e2);
    GT_CK(st == GP_ERR_DEVICE_FAULT && dt < LATER_CALL_LIMIT_S, "expected a fast %s",
          gp_status_str(GP_ERR_DEVICE_FAULT));
    return 0;
}

/* ------------------------------------------------ the sequential engine */

static int engine_child(void *arg, gt_report *r)
{
    bool graphs = *(const bool *)arg;
    gp_config cfg;
    GT_CK(gp_config_preset("tiny", &cfg) == GP_OK, "%s", gp_last_error());
    gp_device_weights *dw = NULL;
    GT_CK(gp_device_weights_synthetic(&cfg, GP_DTYPE_BF16, 3, &dw) == GP_OK, "%s", gp_last_error());
    gp_engine_params ep = gp_engine_default_params();
    ep.max_batch = FB;
    ep.max_context = 32;
    ep.use_graphs = graphs;
    gp_engine *e = NULL;
    GT_CK(gp_engine_create(dw, &ep, &e) == GP_OK, "%s", gp_last_error());
    int ids[FB];
    int32_t tok[FB], next[FB];
    for (int i = 0; i < FB; i++)
        ids[i] = i, tok[i] = 1 + i;
    gp_status st;
    double dt;
    TIMED(r, "step 1", gp_engine_decode_step(e, FB, ids, tok, next, NULL), st, dt);
    GT_CK(st == GP_OK, "the step before the trap failed");
    GT_CK(!gp_device_faulted(), "faulted before the trap");

    TIMED(r, "step 2 (trap)", gp_engine_decode_step(e, FB, ids, next, tok, NULL), st, dt);
    GT_CK(st == GP_ERR_DEVICE_FAULT, "expected %s", gp_status_str(GP_ERR_DEVICE_FAULT));
    GT_CK(dt < TRAPPED_STEP_LIMIT_S, "the trapped step took %.1f s", dt);
    GT_CK(strstr(gp_last_error(), "unusable"), "the message does not say the context is unusable");
    GT_CK(gp_device_faulted(), "the sticky flag is not set");

    for (int k = 3; k <= 4; k++) {
        char label[32];
        snprintf(label, sizeof label, "step %d", k);
        TIMED(r, label, gp_engine_decode_step(e, FB, ids, tok, next, NULL), st, dt);
        GT_CK(st == GP_ERR_DEVICE_FAULT && strstr(gp_last_error(), "refused"), "expected a refusal");
        GT_CK(dt < LATER_CALL_LIMIT_S, "a later step took %.3f s", dt);
    }
    int32_t pre[2] = {1, 2}, out = 0;
    TIMED(r, "prefill", gp_engine_prefill(e, 0, 2, pre, &out, NULL), st, dt);
    GT_CK(st == GP_ERR_DEVICE_FAULT && dt < LATER_CALL_LIMIT_S, "expected a fast fault");
    void *p = NULL;
    TIMED(r, "gp_device_alloc", gp_device_alloc(&p, 4096, "buffer after the fault"), st, dt);
    GT_CK(st == GP_ERR_DEVICE_FAULT && !p && dt < LATER_CALL_LIMIT_S, "expected a fast refusal");
    if (check_later_create(r, dw))
        return 1;

    double t0 = gp_now_s();
    gp_engine_destroy(e);
    gp_device_weights_destroy(dw);
    dt = gp_now_s() - t0;
    gt_report_add(r, "teardown after the fault: %.3f s", dt);
    GT_CK(dt < TEARDOWN_LIMIT_S, "teardown took %.1f s", dt);
    return 0;
}

static void test_trap_engine_graphs(void **s)
{
    static const bool graphs = true;
    run_case(engine_child, (void *)&graphs, "GP_FAULT_TRAP=2", "engine, graphs");
}

static void test_trap_engine_eager(void **s)
{
    static const bool graphs = false;
    run_case(engine_child, (void *)&graphs, "GP_FAULT_TRAP=2", "engine, eager");
}

/* --------------------------------------------------------- cuBLASLt first */

/* The fault is noticed first by cuBLASLt (no runtime call in between): its
 * failure must still come back as GP_ERR_DEVICE_FAULT, since it launches
 * through its own runtime and we only see CUBLAS_STATUS_EXECUTION_FAILED. */
static int cublas_child(void *arg, gt_report *r)
{
    enum { M = 64, N = 128, K = 256 };
    cudaStream_t s = NULL;
    GT_CK(gp_device_stream_create(&s, "test stream") == GP_OK, "%s", gp_last_error());
    gp_gemm_ctx *g = NULL;
    GT_CK(gp_gemm_ctx_create(s, 0, &g) == GP_OK, "%s", gp_last_error());
    GT_CK(gp_gemm_set_skinny_max_m(g, 0) == GP_OK, "%s", gp_last_error()); /* cuBLASLt only */
    void *x = NULL, *w = NULL, *y = NULL;
    GT_CK(gp_device_alloc(&x, (size_t)M * K * 2, "x") == GP_OK && gp_device_alloc(&w, (size_t)N * K * 2, "w") == GP_OK
              && gp_device_alloc(&y, (size_t)M * N * 2, "y") == GP_OK,
          "%s", gp_last_error());
    GT_CK(cudaMemsetAsync(x, 0, (size_t)M * K * 2, s) == cudaSuccess
              && cudaMemsetAsync(w, 0, (size_t)N * K * 2, s) == cudaSuccess,
          "memset");
    gp_status st;
    double dt;
    TIMED(r, "GEMM before the trap", gp_gemm(g, GP_DTYPE_BF16, M, N, K, x, w, y, GP_GEMM_OUT_HALF), st, dt);
    GT_CK(st == GP_OK && cudaStreamSynchronize(s) == cudaSuccess, "the GEMM before the trap failed");

    /* GP_FAULT_TRAP=1: this gate launches the trapping kernel */
    GT_CK(gp_device_step_gate(s) == GP_OK, "%s", gp_last_error());
    struct timespec ts = {0, 200 * 1000 * 1000}; /* let the trap land */
    nanosleep(&ts, NULL);

    TIMED(r, "GEMM on the dead context", gp_gemm(g, GP_DTYPE_BF16, M, N, K, x, w, y, GP_GEMM_OUT_HALF), st, dt);
    GT_CK(st == GP_ERR_DEVICE_FAULT || st == GP_OK, "expected %s (or a launch that cuBLASLt reported as done)",
          gp_status_str(GP_ERR_DEVICE_FAULT));
    if (st == GP_OK)
        gt_report_add(r, "note: cublasLtMatmul returned success on the dead context; the fault "
                         "shows at the next runtime call");
    GT_CK(dt < LATER_CALL_LIMIT_S, "the GEMM took %.3f s", dt);
    cudaError_t ce = cudaStreamSynchronize(s);
    st = gp_cuda_fail(ce == cudaSuccess ? cudaErrorUnknown : ce, "cudaStreamSynchronize", __FILE__, __LINE__);
    gt_report_add(r, "synchronize: %s: %s", gp_status_str(st), gp_last_error());
    GT_CK(ce != cudaSuccess && st == GP_ERR_DEVICE_FAULT, "the stream synchronised without error after a trap");
    GT_CK(gp_device_faulted(), "the sticky flag is not set");

    TIMED(r, "GEMM after the fault was seen", gp_gemm(g, GP_DTYPE_BF16, M, N, K, x, w, y, GP_GEMM_OUT_HALF), st, dt);
    GT_CK(st == GP_ERR_DEVICE_FAULT || st == GP_OK, "unexpected status");
    double t0 = gp_now_s();
    gp_device_free(x);
    gp_device_free(w);
    gp_device_free(y);
    gp_gemm_ctx_destroy(g);
    (void)cudaStreamDestroy(s);
    dt = gp_now_s() - t0;
    gt_report_add(r, "teardown after the fault: %.3f s", dt);
    GT_CK(dt < TEARDOWN_LIMIT_S, "teardown took %.1f s", dt);
    return 0;
}

static void test_trap_cublas(void **s)
{
    run_case(cublas_child, NULL, "GP_FAULT_TRAP=1", "cuBLASLt on a dead context");
}

/* ------------------------------------------------------------ the pipeline */

static int pipeline_child(void *arg, gt_report *r)
{
    gp_config cfg;
    GT_CK(gp_config_preset("tiny", &cfg) == GP_OK, "%s", gp_last_error());
    gp_device_weights *dw = NULL;
    GT_CK(gp_device_weights_synthetic(&cfg, GP_DTYPE_BF16, 3, &dw) == GP_OK, "%s", gp_last_error());
    gp_engine_params ep = gp_engine_default_params();
    ep.max_batch = FB;
    ep.max_context = 32;
    gp_engine *e = NULL;
    GT_CK(gp_engine_create(dw, &ep, &e) == GP_OK, "%s", gp_last_error());
    gp_green_pool_params pp = gp_green_pool_default_params();
    gp_split_req req = {8, GP_SPLIT_REST};
    pp.splits = &req;
    pp.n_splits = 1;
    gp_green_pool *pool = NULL;
    GT_CK(gp_green_pool_create(&pp, &pool) == GP_OK, "%s", gp_last_error());
    gt_report_add(r, "pool: %s", gp_green_pool_partitioned(pool) ? "green contexts" : "unpartitioned fallback");
    gp_cuda_exec *x = NULL;
    GT_CK(gp_cuda_exec_create(e, pool, true, &x) == GP_OK, "%s", gp_last_error());
    gp_pipeline_params plp = gp_pipeline_default_params();
    plp.micro_batches = 2;
    gp_pipeline *pl = NULL;
    GT_CK(gp_pipeline_create(gp_cuda_exec_get(x), cfg.n_layers, &plp, &pl) == GP_OK, "%s", gp_last_error());

    int ids[FB];
    int32_t tok[FB], next[FB];
    for (int i = 0; i < FB; i++)
        ids[i] = i, tok[i] = 1 + i;
    gp_status st;
    double dt;
    TIMED(r, "pipelined step 1", gp_pipeline_step(pl, FB, ids, tok, next, NULL), st, dt);
    GT_CK(st == GP_OK, "the step before the trap failed");
    /* The stage threads issue stages on the dead context and must stop; the
     * caller must not wait for them forever. */
    TIMED(r, "pipelined step 2 (trap)", gp_pipeline_step(pl, FB, ids, next, tok, NULL), st, dt);
    GT_CK(st == GP_ERR_DEVICE_FAULT, "expected %s (GP_ERR_CUDA here: a failure in pipeline/cuda_exec.c "
          "not mapped through gp_cuda_fail)", gp_status_str(GP_ERR_DEVICE_FAULT));
    GT_CK(dt < TRAPPED_STEP_LIMIT_S, "the trapped step took %.1f s", dt);
    TIMED(r, "pipelined step 3", gp_pipeline_step(pl, FB, ids, tok, next, NULL), st, dt);
    GT_CK(st == GP_ERR_DEVICE_FAULT && dt < LATER_CALL_LIMIT_S, "expected a fast fault");
    TIMED(r, "sequential step on the same engine", gp_engine_decode_step(e, FB, ids, tok, next, NULL), st, dt);
    GT_CK(st == GP_ERR_DEVICE_FAULT && dt < LATER_CALL_LIMIT_S, "expected a fast fault");
    gp_green_pool *pool2 = NULL;
    TIMED(r, "green pool create after the fault", gp_green_pool_create(&pp, &pool2), st, dt);
    gp_green_pool_destroy(pool2);
    GT_CK(st == GP_ERR_DEVICE_FAULT && dt < LATER_CALL_LIMIT_S, "expected a fast fault, not a fallback");
    if (check_later_create(r, dw))
        return 1;

    double t0 = gp_now_s();
    gp_pipeline_destroy(pl);
    gp_cuda_exec_destroy(x);
    gp_green_pool_destroy(pool);
    gp_engine_destroy(e);
    gp_device_weights_destroy(dw);
    dt = gp_now_s() - t0;
    gt_report_add(r, "teardown after the fault: %.3f s", dt);
    GT_CK(dt < TEARDOWN_LIMIT_S, "teardown took %.1f s", dt);
    return 0;
}

static void test_trap_pipeline(void **s)
{
    run_case(pipeline_child, NULL, "GP_FAULT_TRAP=2", "pipeline");
}

int main(void)
{
    /* probe in a child: this process must never hold a CUDA context */
    gt_child c;
    gt_child_run(probe_gpu, NULL, NULL, FAULT_CHILD_LIMIT_S, &c);
    if (c.rep.code == 77) {
        printf("engine_device_fault: SKIPPED (GPU part): %s", c.rep.text);
        return 77;
    }
    if (c.rep.code != 0) {
        printf("engine_device_fault: the GPU probe child failed (timed out %d, signal %d): %s\n",
               c.timed_out, c.sig, c.rep.text);
        return 1;
    }
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_trap_engine_graphs),
        cmocka_unit_test(test_trap_engine_eager),
        cmocka_unit_test(test_trap_cublas),
        cmocka_unit_test(test_trap_pipeline),
    };
    return cmocka_run_group_tests_name("sticky CUDA errors: prompt GP_ERR_DEVICE_FAULT, no hang", gpu, NULL,
                                       NULL) ? 1 : 0;
}
