/* Out of device memory at every allocation of a whole setup (device weights,
 * engine, a decode step, green pool, CUDA executor, a pipelined step): for
 * N = 1, 2, ... a child runs the setup with GP_FAULT_DEVICE_ALLOC=N and must
 * return GP_ERR_DEVICE_MEMORY naming the allocation and its bytes, leave no
 * buffer allocated and exit in time, until N passes the last allocation and
 * the setup succeeds. Then real exhaustion: a 1 PiB buffer, and an engine
 * whose KV cache cannot fit. Skips without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child_util.h"
#include "gp_device.h"
#include "gp_engine.h"
#include "gp_green.h"
#include "gp_pipeline.h"
#include "gp_weights.h"

/* A child gets this long, CUDA start-up and teardown included. */
#define OOM_CHILD_LIMIT_S 120.0
/* More allocations than this means the loop lost track (the tiny setup
 * makes about 50). */
#define OOM_MAX_N 1000

enum { V_FAULT_OK = 0, V_COMPLETED = 2, V_BAD = 1 /* GT_CK's verdict */, V_SKIP = 77 };

static int probe_gpu(void *arg, gt_report *r)
{
    if (gp_cuda_available() != GP_OK) {
        gt_report_add(r, "%s", gp_last_error());
        return V_SKIP;
    }
    return 0;
}

/* ------------------------------------------------- injected, every site */

#define SETUP_B 4

/* The setup; *stage names the step that failed. Everything made is
 * destroyed before returning, success or not. */
static gp_status run_setup(const char **stage)
{
    gp_status st = GP_OK;
    gp_device_weights *dw = NULL;
    gp_engine *e = NULL;
    gp_green_pool *pool = NULL;
    gp_cuda_exec *x = NULL;
    gp_pipeline *pl = NULL;
    gp_config cfg;
    int ids[SETUP_B];
    int32_t tok[SETUP_B], next[SETUP_B];
    for (int i = 0; i < SETUP_B; i++)
        ids[i] = i, tok[i] = 3 + 5 * i;

#define STAGE(name, call)                                                                        \
    do {                                                                                         \
        *stage = (name);                                                                         \
        if ((st = (call)) != GP_OK)                                                              \
            goto out;                                                                            \
    } while (0)
    STAGE("config", gp_config_preset("tiny", &cfg));
    STAGE("device weights", gp_device_weights_synthetic(&cfg, GP_DTYPE_BF16, 7, &dw));
    gp_engine_params ep = gp_engine_default_params();
    ep.max_batch = SETUP_B;
    ep.max_context = 64;
    ep.use_graphs = true;
    STAGE("engine", gp_engine_create(dw, &ep, &e));
    STAGE("decode step (graph)", gp_engine_decode_step(e, SETUP_B, ids, tok, next, NULL));
    gp_green_pool_params pp = gp_green_pool_default_params();
    gp_split_req req = {8, GP_SPLIT_REST};
    pp.splits = &req;
    pp.n_splits = 1;
    STAGE("green pool", gp_green_pool_create(&pp, &pool));
    STAGE("CUDA executor", gp_cuda_exec_create(e, pool, true, &x));
    gp_pipeline_params plp = gp_pipeline_default_params();
    plp.micro_batches = 2;
    STAGE("pipeline", gp_pipeline_create(gp_cuda_exec_get(x), cfg.n_layers, &plp, &pl));
    STAGE("pipelined step", gp_pipeline_step(pl, SETUP_B, ids, next, tok, NULL));
    *stage = "";
#undef STAGE
out:;
    /* Teardown must not replace the first failure's message. */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", gp_last_error());
    gp_pipeline_destroy(pl);
    gp_cuda_exec_destroy(x);
    gp_green_pool_destroy(pool);
    gp_engine_destroy(e);
    gp_device_weights_destroy(dw);
    gp_set_error("%s", msg);
    return st;
}

/* One child: the setup under GP_FAULT_DEVICE_ALLOC=N (set by the parent). */
static int oom_child(void *arg, gt_report *r)
{
    const char *stage = "";
    gp_clear_error();
    gp_status st = run_setup(&stage);
    const char *what = NULL;
    size_t bytes = 0;
    long n = 0;
    bool injected = gp_fault_alloc_injected(&what, &bytes, &n);
    long live = gp_device_alloc_live(), count = gp_fault_alloc_count();
    const char *msg = gp_last_error();
    if (!injected) {
        GT_CK(st == GP_OK, "the setup failed at %s without an injected fault: %s: %s", stage,
              gp_status_str(st), msg);
        GT_CK(live == 0, "%ld buffers still allocated after a clean teardown", live);
        gt_report_add(r, "completed: %ld allocations counted, none failed", count);
        return V_COMPLETED;
    }
    gt_report_add(r, "allocation #%ld (%s, %zu bytes) -> %s at %s: %s", n, what, bytes,
                  gp_status_str(st), stage, msg);
    GT_CK(st != GP_OK, "allocation #%ld (%s) failed, yet the setup succeeded: the failure was swallowed",
          n, what);
    GT_CK(st == GP_ERR_DEVICE_MEMORY, "expected %s", gp_status_str(GP_ERR_DEVICE_MEMORY));
    GT_CK(strstr(msg, what), "the message does not name the allocation '%s'", what);
    char b[48];
    snprintf(b, sizeof b, "%zu bytes", bytes);
    GT_CK(bytes == 0 || strstr(msg, b), "the message lacks the requested '%s'", b);
    GT_CK(strstr(msg, "free of") || strstr(msg, "free device memory unknown"),
          "the message lacks the device's free/total memory");
    GT_CK(strstr(msg, "GP_FAULT_DEVICE_ALLOC"), "the message does not say the failure was injected");
    GT_CK(live == 0, "%ld buffers still allocated after the failed setup was torn down", live);
    GT_CK(!gp_device_faulted(), "an out-of-memory set the sticky-fault flag");
    return V_FAULT_OK;
}

static void test_injected_oom_every_site(void **s)
{
    int faults = 0;
    double worst = 0;
    for (long n = 1;; n++) {
        if (n > OOM_MAX_N)
            fail_msg("the setup still fails at GP_FAULT_DEVICE_ALLOC=%ld: more allocations than "
                     "expected", n);
        char env0[64];
        snprintf(env0, sizeof env0, "GP_FAULT_DEVICE_ALLOC=%ld", n);
        const char *env[] = {env0, NULL};
        gt_child c;
        gt_child_run(oom_child, NULL, env, OOM_CHILD_LIMIT_S, &c);
        printf("N=%ld (%.2f s): %s", n, c.seconds, c.rep.text[0] ? c.rep.text : "(no report)\n");
        if (c.timed_out)
            fail_msg("GP_FAULT_DEVICE_ALLOC=%ld: the child hung (killed after %.0f s)", n,
                     OOM_CHILD_LIMIT_S);
        if (c.signaled)
            fail_msg("GP_FAULT_DEVICE_ALLOC=%ld: the child died of signal %d", n, c.sig);
        if (!c.got_report)
            fail_msg("GP_FAULT_DEVICE_ALLOC=%ld: the child exited (%d) without a report", n,
                     c.exit_code);
        if (c.seconds > worst)
            worst = c.seconds;
        if (c.rep.code == V_COMPLETED)
            break;
        if (c.rep.code != V_FAULT_OK)
            fail_msg("GP_FAULT_DEVICE_ALLOC=%ld: verdict %d (see above)", n, c.rep.code);
        faults++;
    }
    printf("engine_oom: %d injected out-of-memory failures, each a clean GP_ERR_DEVICE_MEMORY; "
           "slowest child %.2f s\n", faults, worst);
    assert_true(faults >= 20); /* weights, KV, engine buffers, GEMM contexts, ... */
}

/* ------------------------------------------------------- real exhaustion */

static int real_oom_child(void *arg, gt_report *r)
{
    /* A raw buffer larger than any device: the real cudaMalloc failure. */
    const size_t huge = (size_t)1 << 50;
    void *p = (void *)1;
    gp_status st = gp_device_alloc(&p, huge, "test buffer of 1 PiB");
    gt_report_add(r, "1 PiB: %s: %s", gp_status_str(st), gp_last_error());
    GT_CK(st == GP_ERR_DEVICE_MEMORY && p == NULL, "status %s", gp_status_str(st));
    GT_CK(strstr(gp_last_error(), "1125899906842624 bytes") && strstr(gp_last_error(), "free of"),
          "message lacks the sizes");
    /* the failure was not sticky: the device still works */
    GT_CK(gp_device_alloc(&p, 1 << 20, "1 MiB after the failure") == GP_OK && p, "%s", gp_last_error());
    gp_device_free(p);
    GT_CK(!gp_device_faulted(), "out of memory set the sticky flag");

    /* An engine whose KV cache cannot fit: tiny model, context raised to
     * 16M tokens, 64 sequences: 256 GiB of K/V. */
    gp_config cfg;
    GT_CK(gp_config_preset("tiny", &cfg) == GP_OK, "%s", gp_last_error());
    cfg.max_context = 1 << 24;
    gp_device_weights *dw = NULL;
    GT_CK(gp_device_weights_synthetic(&cfg, GP_DTYPE_BF16, 1, &dw) == GP_OK, "%s", gp_last_error());
    gp_engine_params ep = gp_engine_default_params();
    ep.max_batch = 64;
    ep.max_context = 1 << 24;
    uint64_t need = gp_engine_device_bytes(&cfg, &ep);
    gp_engine *e = NULL;
    double t0 = gp_now_s();
    st = gp_engine_create(dw, &ep, &e);
    double dt = gp_now_s() - t0;
    gt_report_add(r, "engine 64 x 16M: %s after %.3f s: %s", gp_status_str(st), dt, gp_last_error());
    char b[48];
    snprintf(b, sizeof b, "%llu bytes", (unsigned long long)need);
    bool ok = st == GP_ERR_DEVICE_MEMORY && !e && strstr(gp_last_error(), b) && strstr(gp_last_error(), "free of");
    gp_engine_destroy(e);
    gp_device_weights_destroy(dw);
    GT_CK(ok, "expected %s naming %s and the free memory", gp_status_str(GP_ERR_DEVICE_MEMORY), b);
    GT_CK(need > ((uint64_t)200 << 30), "need %llu bytes: the case is too small to fail", (unsigned long long)need);
    GT_CK(gp_device_alloc_live() == 0, "%ld buffers left", gp_device_alloc_live());
    return 0;
}

static void test_real_oom(void **s)
{
    gt_child c;
    gt_child_run(real_oom_child, NULL, NULL, OOM_CHILD_LIMIT_S, &c);
    printf("%s", c.rep.text);
    if (c.timed_out)
        fail_msg("the child hung (killed after %.0f s)", OOM_CHILD_LIMIT_S);
    if (c.signaled)
        fail_msg("the child died of signal %d", c.sig);
    if (c.rep.code != 0)
        fail_msg("verdict %d (see above)", c.rep.code);
}

int main(void)
{
    /* The GPU probe runs in a child too: this process must stay without a
     * CUDA context for the forks that follow. */
    gt_child c;
    gt_child_run(probe_gpu, NULL, NULL, OOM_CHILD_LIMIT_S, &c);
    if (c.rep.code == V_SKIP) {
        printf("engine_oom: SKIPPED (GPU part): %s", c.rep.text);
        return 77;
    }
    if (c.rep.code != 0) {
        printf("engine_oom: the GPU probe child failed (timed out %d, signal %d): %s\n", c.timed_out,
               c.sig, c.rep.text);
        return 1;
    }
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_injected_oom_every_site),
        cmocka_unit_test(test_real_oom),
    };
    return cmocka_run_group_tests_name("out of device memory at every allocation", gpu, NULL, NULL) ? 1 : 0;
}
