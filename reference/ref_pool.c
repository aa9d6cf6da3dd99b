/* The reference's thread pool: common/'s gp_pool with a fixed slice of the
 * items per thread, so which thread computes an item never changes the
 * result, and GP_REF_THREADS for the default size. */
#include "ref_impl.h"

#include <stdlib.h>

struct gp_ref_pool {
    gp_pool *pool;
    /* the region being run */
    gp_ref_task fn;
    void *ctx;
    int n_items;
};

/* Thread t always gets the same contiguous slice, so which thread computes an
 * item is fixed; and each item is computed by exactly one thread with the
 * same code, so results are identical for every thread count. */
static void gp_ref_slice_task(void *arg, int t)
{
    gp_ref_pool *p = arg;
    const int n = gp_pool_threads(p->pool);
    const int b = (int)((long long)p->n_items * t / n), e = (int)((long long)p->n_items * (t + 1) / n);
    if (b < e)
        p->fn(p->ctx, b, e, t);
}

void gp_ref_pool_destroy(gp_ref_pool *p)
{
    if (!p)
        return;
    gp_pool_destroy(p->pool);
    free(p);
}

/* Threads: n_threads if > 0; else GP_REF_THREADS (1..16) if set, else the
 * online CPUs, capped at 16. A thread that cannot be started only makes the
 * pool smaller. */
gp_status gp_ref_pool_create(int n_threads, gp_ref_pool **out)
{
    long n = n_threads;
    if (n_threads > GP_REF_MAX_THREADS)
        GP_FAIL(GP_ERR_INVALID_ARG, "reference threads %d: allowed 1..%d", n_threads, GP_REF_MAX_THREADS);
    if (n_threads <= 0)
        GP_TRY(gp_env_int("GP_REF_THREADS", 1, GP_REF_MAX_THREADS, gp_pool_threads_for(0), &n));
    gp_ref_pool *p = calloc(1, sizeof *p);
    if (!p)
        GP_FAIL(GP_ERR_NO_MEMORY, "reference thread pool: out of memory");
    gp_status st = gp_pool_create((int)n, &p->pool);
    if (st != GP_OK) {
        free(p);
        return st;
    }
    *out = p;
    return GP_OK;
}

/* Run fn over n_items; in parallel only when work (multiply-adds, roughly)
 * makes it worth waking the workers. */
void gp_ref_pool_run(gp_ref_pool *p, gp_ref_task fn, void *ctx, int n_items, double work)
{
    if (n_items <= 0)
        return;
    const int n = gp_pool_threads(p->pool);
    if (n == 1 || n_items < n || work < GP_REF_PAR_MIN_WORK) {
        fn(ctx, 0, n_items, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n_items;
    gp_pool_run(p->pool, gp_ref_slice_task, p);
}

int gp_ref_pool_threads(const gp_ref_pool *p)
{
    return gp_pool_threads(p->pool);
}
