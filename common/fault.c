/* The sticky-error flag and the fault-injection counters (gp_fault.h). */
#include "gp_fault.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- sticky state */

static atomic_int gp_fault_state; /* 0 none, 1 being written, 2 message ready */
static char gp_fault_text[1024];

void gp_device_fault_note(const char *message)
{
    int expect = 0;
    /* First writer wins; others (threads failing on the same dead context at
     * the same time) only see the flag, so the text is written once. */
    if (atomic_compare_exchange_strong(&gp_fault_state, &expect, 1)) {
        snprintf(gp_fault_text, sizeof gp_fault_text, "%s", message ? message : "");
        atomic_store(&gp_fault_state, 2);
    }
}

bool gp_device_faulted(void)
{
    return atomic_load_explicit(&gp_fault_state, memory_order_acquire) != 0;
}

const char *gp_device_fault_message(void)
{
    /* acquire pairs with the release of the store of 2: the text is complete */
    return atomic_load_explicit(&gp_fault_state, memory_order_acquire) == 2 ? gp_fault_text : "";
}

/* ------------------------------------------------------ fault injection */

static pthread_once_t gp_fault_once = PTHREAD_ONCE_INIT;
static long gp_fault_alloc_at;  /* GP_FAULT_DEVICE_ALLOC, 0: off */
static long gp_fault_trap_at;   /* GP_FAULT_TRAP, 0: off */
static atomic_long gp_fault_allocs;
static atomic_long gp_fault_steps;
static atomic_int gp_fault_injected_set;
static char gp_fault_injected_what[160];
static size_t gp_fault_injected_bytes;

static gp_status gp_fault_env_st = GP_OK;
static char gp_fault_env_err[256]; /* the refusal's message when gp_fault_env_st fails */

/* A bad value is kept as an error that gp_fault_env_status returns: a typo
 * must not silently turn a fault test into a normal run. */
static void read_env(void)
{
    gp_status st = gp_env_int("GP_FAULT_DEVICE_ALLOC", 0, LONG_MAX, 0, &gp_fault_alloc_at);
    if (st == GP_OK)
        st = gp_env_int("GP_FAULT_TRAP", 0, LONG_MAX, 0, &gp_fault_trap_at);
    if (st != GP_OK) {
        snprintf(gp_fault_env_err, sizeof gp_fault_env_err, "%s", gp_last_error());
        gp_fault_alloc_at = gp_fault_trap_at = 0;
        gp_fault_env_st = st;
    }
}

gp_status gp_fault_env_status(void)
{
    pthread_once(&gp_fault_once, read_env);
    if (gp_fault_env_st != GP_OK)
        GP_FAIL(gp_fault_env_st, "%s", gp_fault_env_err);
    return GP_OK;
}

const char *gp_fault_env_error(void)
{
    pthread_once(&gp_fault_once, read_env);
    return gp_fault_env_st != GP_OK ? gp_fault_env_err : NULL;
}

bool gp_fault_alloc_hit(const char *what, size_t bytes)
{
    pthread_once(&gp_fault_once, read_env);
    long n = atomic_fetch_add(&gp_fault_allocs, 1) + 1;
    if (gp_fault_env_st != GP_OK)
        return true; /* the message names the bad variable (gp_device_mem_text) */
    if (gp_fault_alloc_at == 0 || n != gp_fault_alloc_at)
        return false;
    snprintf(gp_fault_injected_what, sizeof gp_fault_injected_what, "%s", what ? what : "?");
    gp_fault_injected_bytes = bytes;
    atomic_store(&gp_fault_injected_set, 1); /* publishes what and bytes */
    return true;
}

long gp_fault_alloc_count(void)
{
    return atomic_load(&gp_fault_allocs);
}

bool gp_fault_alloc_injected(const char **what, size_t *bytes, long *n)
{
    if (!atomic_load(&gp_fault_injected_set))
        return false;
    if (what)
        *what = gp_fault_injected_what;
    if (bytes)
        *bytes = gp_fault_injected_bytes;
    if (n)
        *n = gp_fault_alloc_at;
    return true;
}

bool gp_fault_trap_due(void)
{
    pthread_once(&gp_fault_once, read_env);
    if (gp_fault_trap_at == 0)
        return false;
    return atomic_fetch_add(&gp_fault_steps, 1) + 1 == gp_fault_trap_at;
}
