/* How CUDA failures become statuses, without a GPU: sticky codes and
 * GP_ERR_DEVICE_FAULT (runtime, cuBLASLt, driver), the refusal after one,
 * out-of-memory messages, the GP_FAULT_DEVICE_ALLOC hook of every allocation
 * helper and the parsing of the fault and wait variables. Each case runs in a
 * forked child, because the sticky flag and the fault variables are
 * process-wide and read once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "child_util.h"
#include "cuda_check.h"
#include "gp_device.h"

/* A failed driver call as the green pool reports one (green/green_driver.c). */
#define driver_fail(code, what, file, line) \
    gp_device_fail(GP_DEVICE_API_DRIVER, (int)(code), 0, (what), "driver error", #code, (file), (line))

static void run_case(gt_child_fn fn, const char *const *env, const char *name)
{
    gt_child c;
    gt_child_run(fn, NULL, env, 60.0, &c);
    if (c.rep.text[0])
        printf("%s:\n%s", name, c.rep.text);
    if (c.timed_out)
        fail_msg("%s: the child did not finish within 60 s", name);
    if (c.signaled)
        fail_msg("%s: the child died of signal %d", name, c.sig);
    if (c.rep.code != 0)
        fail_msg("%s: verdict %d (see above)", name, c.rep.code);
}

/* ------------------------------------------------------------ cases */

static int case_sticky_codes(void *arg, gt_report *r)
{
    static const int sticky[] = {226, 700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 810, 911};
    for (size_t i = 0; i < sizeof sticky / sizeof sticky[0]; i++)
        GT_CK(gp_cuda_code_is_sticky(sticky[i]), "code %d", sticky[i]);
    static const int plain[] = {0, 1, 2, 100, 201, 209, 214, 701, 709, 720, 801, 999};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        GT_CK(!gp_cuda_code_is_sticky(plain[i]), "code %d", plain[i]);
    GT_CK(gp_cuda_code_is_sticky(cudaErrorIllegalAddress) && gp_cuda_code_is_sticky(CUDA_ERROR_LAUNCH_FAILED)
              && gp_cuda_code_is_sticky(cudaErrorAssert) && gp_cuda_code_is_sticky(CUDA_ERROR_ASSERT),
          "runtime and driver names");
    return 0;
}

/* Before any sticky error: the ordinary mappings, and out-of-memory messages
 * that carry the device's free memory (or why it is unknown). */
static int case_plain_errors(void *arg, gt_report *r)
{
    gp_status s = gp_cuda_fail(cudaErrorMemoryAllocation, "cudaMalloc(x)", "f.c", 1);
    GT_CK(s == GP_ERR_DEVICE_MEMORY, "status %s", gp_status_str(s));
    GT_CK(strstr(gp_last_error(), "free"), "message '%s' lacks the free memory", gp_last_error());
    gt_report_add(r, "out of memory: %s", gp_last_error());
    s = gp_cuda_fail(cudaErrorInvalidValue, "cudaMemcpy(x)", "f.c", 2);
    GT_CK(s == GP_ERR_CUDA, "status %s", gp_status_str(s));
    s = gp_check_cublas_fail(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtCreate", "f.c", 3);
    GT_CK(s == GP_ERR_DEVICE_MEMORY && strstr(gp_last_error(), "free"), "%s: %s", gp_status_str(s),
          gp_last_error());
    /* no context here, so nothing sticky to find behind EXECUTION_FAILED */
    s = gp_check_cublas_fail(CUBLAS_STATUS_EXECUTION_FAILED, "cublasLtMatmul", "f.c", 4);
    GT_CK(s == GP_ERR_CUDA || s == GP_ERR_DEVICE_FAULT, "status %s", gp_status_str(s));
    GT_CK(s == GP_ERR_DEVICE_FAULT || !gp_device_faulted(), "flag set without a fault");
    s = driver_fail(CUDA_ERROR_OUT_OF_MEMORY, "cuGreenCtxCreate (A of split 8:124)", "f.c", 5);
    GT_CK(s == GP_ERR_DEVICE_MEMORY && strstr(gp_last_error(), "free"), "%s: %s", gp_status_str(s),
          gp_last_error());
    s = driver_fail(CUDA_ERROR_NOT_SUPPORTED, "cuGreenCtxCreate", "f.c", 6);
    GT_CK(s == GP_ERR_UNSUPPORTED, "status %s", gp_status_str(s));
    s = gp_cuda_fail(cudaErrorMemoryAllocation, "cudaStreamCreateWithFlags", "f.c", 7);
    GT_CK(s == GP_ERR_DEVICE_MEMORY, "status %s", gp_status_str(s));
    GT_CK(!gp_device_faulted(), "no sticky error was reported, yet the flag is set");
    GT_CK(gp_device_step_gate(NULL) == GP_OK, "the gate refused without a fault: %s", gp_last_error());
    return 0;
}

/* A sticky runtime error: GP_ERR_DEVICE_FAULT with the advice, and from then
 * on every failure (any API) and the step gate say the context is dead. */
static int case_sticky_runtime(void *arg, gt_report *r)
{
    gp_status s = gp_cuda_fail(cudaErrorIllegalAddress, "cudaEventSynchronize(done)", "f.c", 1);
    GT_CK(s == GP_ERR_DEVICE_FAULT, "status %s", gp_status_str(s));
    GT_CK(strstr(gp_last_error(), "unusable") && strstr(gp_last_error(), "must exit"), "message '%s'",
          gp_last_error());
    gt_report_add(r, "sticky: %s", gp_last_error());
    GT_CK(gp_device_faulted(), "flag not set");
    GT_CK(strstr(gp_device_fault_message(), "cudaEventSynchronize(done)"), "first message '%s'",
          gp_device_fault_message());
    /* a second sticky error keeps the first message */
    (void)gp_cuda_fail(cudaErrorLaunchFailure, "second", "f.c", 2);
    GT_CK(!strstr(gp_device_fault_message(), "second"), "first message replaced: '%s'",
          gp_device_fault_message());
    s = gp_cuda_fail(cudaErrorInvalidValue, "cudaMemcpyAsync(x)", "f.c", 3);
    GT_CK(s == GP_ERR_DEVICE_FAULT && strstr(gp_last_error(), "earlier sticky"), "%s: %s",
          gp_status_str(s), gp_last_error());
    s = gp_cuda_fail(cudaErrorMemoryAllocation, "cudaMalloc(x)", "f.c", 4);
    GT_CK(s == GP_ERR_DEVICE_FAULT, "out of memory after a fault: %s", gp_status_str(s));
    s = gp_check_cublas_fail(CUBLAS_STATUS_EXECUTION_FAILED, "cublasLtMatmul", "f.c", 5);
    GT_CK(s == GP_ERR_DEVICE_FAULT, "cuBLASLt after a fault: %s", gp_status_str(s));
    s = driver_fail(CUDA_ERROR_NOT_SUPPORTED, "cuGreenCtxCreate", "f.c", 6);
    GT_CK(s == GP_ERR_DEVICE_FAULT, "driver NOT_SUPPORTED after a fault: %s (must not fall back)",
          gp_status_str(s));
    s = gp_device_step_gate(NULL);
    GT_CK(s == GP_ERR_DEVICE_FAULT && strstr(gp_last_error(), "refused"), "gate: %s: %s", gp_status_str(s),
          gp_last_error());
    void *p = (void *)1;
    s = gp_device_alloc(&p, 4096, "after the fault");
    GT_CK(s == GP_ERR_DEVICE_FAULT && strstr(gp_last_error(), "refused"), "allocation after a fault: %s: %s",
          gp_status_str(s), gp_last_error());
    GT_CK(p == NULL, "pointer not cleared");
    return 0;
}

static int case_sticky_driver(void *arg, gt_report *r)
{
    gp_status s = driver_fail(CUDA_ERROR_ILLEGAL_ADDRESS, "cuStreamSynchronize", "f.c", 1);
    GT_CK(s == GP_ERR_DEVICE_FAULT && strstr(gp_last_error(), "unusable"), "%s: %s", gp_status_str(s),
          gp_last_error());
    GT_CK(gp_device_faulted(), "flag not set by the driver path");
    return 0;
}

/* GP_FAULT_DEVICE_ALLOC=3: the third counted allocation fails like an out of
 * memory, names itself and its bytes, and nothing is left allocated. */
static int case_inject_alloc(void *arg, gt_report *r)
{
    GT_CK(!gp_fault_alloc_hit("first", 10), "allocation 1 failed");
    GT_CK(!gp_fault_alloc_hit("second", 20), "allocation 2 failed");
    void *p = (void *)1;
    gp_status s = gp_device_alloc(&p, 4096, "test buffer [1024] fp32");
    GT_CK(s == GP_ERR_DEVICE_MEMORY, "status %s: %s", gp_status_str(s), gp_last_error());
    GT_CK(p == NULL, "pointer not cleared");
    const char *m = gp_last_error();
    GT_CK(strstr(m, "test buffer [1024] fp32") && strstr(m, "4096 bytes") && strstr(m, "GP_FAULT_DEVICE_ALLOC=3"),
          "message '%s'", m);
    gt_report_add(r, "injected: %s", m);
    const char *what = NULL;
    size_t bytes = 0;
    long n = 0;
    GT_CK(gp_fault_alloc_injected(&what, &bytes, &n) && n == 3 && bytes == 4096
              && !strcmp(what, "test buffer [1024] fp32"),
          "record: n %ld bytes %zu what %s", n, bytes, what ? what : "(null)");
    GT_CK(gp_fault_alloc_count() == 3, "count %ld", gp_fault_alloc_count());
    GT_CK(!gp_fault_alloc_hit("fourth", 1), "allocation 4 failed too");
    GT_CK(gp_device_alloc_live() == 0, "live buffers %ld", gp_device_alloc_live());
    GT_CK(!gp_device_faulted(), "an out-of-memory set the sticky flag");
    return 0;
}

/* Each resource helper honours the hook (N = 1) with its own message. */
static int inject_first(gt_report *r, int kind)
{
    gp_status s = GP_OK;
    const char *what = "";
    void *p = (void *)1;
    cudaStream_t st = (cudaStream_t)1;
    cudaEvent_t ev = (cudaEvent_t)1;
    cudaGraphExec_t ge = (cudaGraphExec_t)1;
    switch (kind) {
    case 0: s = gp_pinned_alloc(&p, 64, what = "pinned staging"); break;
    case 1: s = gp_device_stream_create(&st, what = "engine stream"); break;
    case 2: s = gp_device_event_create(&ev, cudaEventDisableTiming, what = "engine event"); break;
    case 3: s = gp_device_graph_instantiate(&ge, NULL, what = "decode-step graph"); break;
    }
    GT_CK(s == GP_ERR_DEVICE_MEMORY, "kind %d: %s: %s", kind, gp_status_str(s), gp_last_error());
    GT_CK(strstr(gp_last_error(), what) && strstr(gp_last_error(), "GP_FAULT_DEVICE_ALLOC=1"), "kind %d: '%s'",
          kind, gp_last_error());
    GT_CK(kind != 0 || (p == NULL && strstr(gp_last_error(), "64 bytes")), "pinned: %p '%s'", p, gp_last_error());
    GT_CK(kind != 1 || st == NULL, "stream not cleared");
    GT_CK(kind != 2 || ev == NULL, "event not cleared");
    GT_CK(kind != 3 || ge == NULL, "graph not cleared");
    gt_report_add(r, "kind %d: %s", kind, gp_last_error());
    return 0;
}
static int case_inject_pinned(void *arg, gt_report *r) { return inject_first(r, 0); }
static int case_inject_stream(void *arg, gt_report *r) { return inject_first(r, 1); }
static int case_inject_event(void *arg, gt_report *r) { return inject_first(r, 2); }
static int case_inject_graph(void *arg, gt_report *r) { return inject_first(r, 3); }

/* A bad value is an error, never ignored: the allocation helpers refuse
 * naming the variable, and every allocation that asks the hook fails. */
static int case_inject_bad_value(void *arg, gt_report *r)
{
    GT_CK(gp_fault_env_status() == GP_ERR_INVALID_ARG, "GP_FAULT_DEVICE_ALLOC=abc accepted");
    GT_CK(strstr(gp_last_error(), "GP_FAULT_DEVICE_ALLOC") && strstr(gp_last_error(), "'abc'"),
          "message '%s'", gp_last_error());
    GT_CK(gp_fault_env_error() != NULL, "no message for the bad variable");
    for (int i = 0; i < 3; i++)
        GT_CK(gp_fault_alloc_hit("x", 1), "allocation %d not failed with GP_FAULT_DEVICE_ALLOC=abc", i + 1);
    void *p = NULL;
    GT_CK(gp_device_alloc(&p, 64, "test buffer") == GP_ERR_INVALID_ARG && p == NULL,
          "gp_device_alloc with GP_FAULT_DEVICE_ALLOC=abc: '%s'", gp_last_error());
    GT_CK(strstr(gp_last_error(), "GP_FAULT_DEVICE_ALLOC"), "message '%s'", gp_last_error());
    GT_CK(!gp_fault_trap_due(), "a step trapped with bad fault variables");
    return 0;
}

static int case_trap_bad_value(void *arg, gt_report *r)
{
    GT_CK(gp_fault_env_status() == GP_ERR_INVALID_ARG, "GP_FAULT_TRAP=-3 accepted");
    GT_CK(strstr(gp_last_error(), "GP_FAULT_TRAP") && strstr(gp_last_error(), "'-3'"),
          "message '%s'", gp_last_error());
    GT_CK(gp_device_step_gate(NULL) == GP_ERR_INVALID_ARG, "the step gate accepted GP_FAULT_TRAP=-3");
    return 0;
}

static int case_trap_count(void *arg, gt_report *r)
{
    GT_CK(!gp_fault_trap_due(), "step 1");
    GT_CK(gp_fault_trap_due(), "step 2 did not trap with GP_FAULT_TRAP=2");
    GT_CK(!gp_fault_trap_due(), "step 3");
    return 0;
}

static int case_wait_limit(void *arg, gt_report *r)
{
    double s = 0.0;
    GT_CK(gp_device_wait_limit_s(&s) == GP_OK && s == 2.0, "limit %g with GP_DEVICE_WAIT_TIMEOUT_S=2", s);
    return 0;
}

/* A bad value is an error of every wait, never replaced by the default. */
static int case_wait_limit_bad(void *arg, gt_report *r)
{
    double s = -1.0;
    GT_CK(gp_device_wait_limit_s(&s) == GP_ERR_INVALID_ARG && s == -1.0, "a bad value was accepted");
    GT_CK(strstr(gp_last_error(), "GP_DEVICE_WAIT_TIMEOUT_S") && strstr(gp_last_error(), "'soon'"),
          "message '%s'", gp_last_error());
    GT_CK(gp_device_event_wait(NULL, "test") == GP_ERR_INVALID_ARG, "a wait ignored the bad value");
    return 0;
}

static void test_sticky_codes(void **s) { run_case(case_sticky_codes, NULL, "sticky codes"); }
static void test_plain_errors(void **s) { run_case(case_plain_errors, NULL, "plain errors"); }
static void test_sticky_runtime(void **s) { run_case(case_sticky_runtime, NULL, "sticky runtime error"); }
static void test_sticky_driver(void **s) { run_case(case_sticky_driver, NULL, "sticky driver error"); }
static void test_inject_alloc(void **s)
{
    const char *env[] = {"GP_FAULT_DEVICE_ALLOC=3", NULL};
    run_case(case_inject_alloc, env, "GP_FAULT_DEVICE_ALLOC=3");
}
static void test_inject_kinds(void **s)
{
    const char *env[] = {"GP_FAULT_DEVICE_ALLOC=1", NULL};
    run_case(case_inject_pinned, env, "pinned");
    run_case(case_inject_stream, env, "stream");
    run_case(case_inject_event, env, "event");
    run_case(case_inject_graph, env, "graph");
}
static void test_inject_bad_value(void **s)
{
    const char *env[] = {"GP_FAULT_DEVICE_ALLOC=abc", NULL};
    run_case(case_inject_bad_value, env, "GP_FAULT_DEVICE_ALLOC=abc");
    const char *trap[] = {"GP_FAULT_TRAP=-3", NULL};
    run_case(case_trap_bad_value, trap, "GP_FAULT_TRAP=-3");
}
static void test_wait_limit(void **s)
{
    const char *env[] = {"GP_DEVICE_WAIT_TIMEOUT_S=2", NULL};
    run_case(case_wait_limit, env, "GP_DEVICE_WAIT_TIMEOUT_S=2");
    const char *bad[] = {"GP_DEVICE_WAIT_TIMEOUT_S=soon", NULL};
    run_case(case_wait_limit_bad, bad, "GP_DEVICE_WAIT_TIMEOUT_S=soon");
}

static void test_trap_count(void **s)
{
    const char *env[] = {"GP_FAULT_TRAP=2", NULL};
    run_case(case_trap_count, env, "GP_FAULT_TRAP=2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sticky_codes),     cmocka_unit_test(test_plain_errors),
        cmocka_unit_test(test_sticky_runtime),   cmocka_unit_test(test_sticky_driver),
        cmocka_unit_test(test_inject_alloc),     cmocka_unit_test(test_inject_kinds),
        cmocka_unit_test(test_inject_bad_value), cmocka_unit_test(test_trap_count),
        cmocka_unit_test(test_wait_limit),
    };
    return cmocka_run_group_tests_name("CUDA failure mapping and fault hooks", tests, NULL, NULL) ? 1 : 0;
}
