/* The bounded host wait on a device event (gp_device_event_wait): the one
 * place a host thread waits for the GPU inside a step, so that a device that
 * never finishes becomes an error instead of a hang. */
#define _GNU_SOURCE
#include "gp_device.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#define GP_DEVICE_WAIT_DEFAULT_S 300

static pthread_once_t gp_wait_once = PTHREAD_ONCE_INIT;
static double gp_wait_limit = GP_DEVICE_WAIT_DEFAULT_S;
static gp_status gp_wait_env_st = GP_OK;
static char gp_wait_env_err[256]; /* the refusal's message when gp_wait_env_st fails */

static void read_limit(void)
{
    long s;
    gp_wait_env_st = gp_env_int("GP_DEVICE_WAIT_TIMEOUT_S", 0, GP_DEVICE_WAIT_MAX_S,
                                GP_DEVICE_WAIT_DEFAULT_S, &s);
    if (gp_wait_env_st == GP_OK)
        gp_wait_limit = (double)s;
    else
        snprintf(gp_wait_env_err, sizeof gp_wait_env_err, "%s", gp_last_error());
}

gp_status gp_device_wait_limit_s(double *seconds)
{
    pthread_once(&gp_wait_once, read_limit);
    if (gp_wait_env_st != GP_OK)
        GP_FAIL(gp_wait_env_st, "%s", gp_wait_env_err);
    *seconds = gp_wait_limit;
    return GP_OK;
}

gp_status gp_device_event_wait(cudaEvent_t ev, const char *what)
{
    char call[160];
    double limit = 0.0;
    GP_TRY(gp_device_wait_limit_s(&limit));
    if (limit <= 0.0) {
        cudaError_t e = cudaEventSynchronize(ev);
        if (e == cudaSuccess)
            return GP_OK;
        snprintf(call, sizeof call, "cudaEventSynchronize (%s)", what);
        return gp_cuda_fail(e, call, __FILE__, __LINE__);
    }
    /* Spins on the query as cudaEventSynchronize spins by default (same CPU
     * use and wake-up latency), yielding now and then, and reads the clock
     * only every few hundred queries. */
    double t0 = gp_now_s();
    for (unsigned i = 1;; i++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess)
            break;
        if (e != cudaErrorNotReady) {
            snprintf(call, sizeof call, "cudaEventQuery (%s)", what);
            return gp_cuda_fail(e, call, __FILE__, __LINE__);
        }
        if (i % 256 == 0) {
            double waited = gp_now_s() - t0;
            if (waited > limit) {
                gp_set_error("waited %.1f s for %s: the device neither finished nor reported an "
                             "error, so it is hung (a kernel that never ends, or work waiting on a "
                             "partition that faulted); the CUDA context is unusable and the process "
                             "must exit (limit: GP_DEVICE_WAIT_TIMEOUT_S=%g, 0 waits without limit)",
                             waited, what, limit);
                /* later steps would queue behind the hung work: refuse them */
                gp_device_fault_note(gp_last_error());
                return GP_ERR_DEVICE_FAULT;
            }
            sched_yield();
        }
    }
    /* "not ready" is not an error, but never leave it for a later launch
     * check (cudaGetLastError) to find */
    if (cudaPeekAtLastError() == cudaErrorNotReady)
        (void)cudaGetLastError();
    return GP_OK;
}
