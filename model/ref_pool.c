/* The reference's thread pool: a fixed slice of the items per thread, so
 * which thread computes an item never changes the result. */
#include "ref_impl.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct gp_ref_worker {
    gp_ref_pool *pool;
    int index; /* 1..n_threads-1; slice 0 belongs to the caller */
} gp_ref_worker;

struct gp_ref_pool {
    int n_threads;             /* workers + the calling thread */
    pthread_t *threads;        /* [n_threads - 1] */
    gp_ref_worker *workers;    /* [n_threads - 1] */
    pthread_mutex_t mu;
    pthread_cond_t wake;       /* workers wait for a new generation */
    pthread_cond_t done;       /* the caller waits for pending == 0 */
    unsigned long generation;  /* bumped once per parallel region */
    int pending;               /* workers still inside the current region */
    bool quit;
    gp_ref_task fn;
    void *ctx;
    int n_items;
    bool mu_ok;
};

/* Thread t always gets the same contiguous slice, so which thread computes an
 * item is fixed; and each item is computed by exactly one thread with the
 * same code, so results are identical for every thread count. */
static void gp_ref_slice(int n_items, int n_threads, int t, int *begin, int *end)
{
    *begin = (int)((long long)n_items * t / n_threads);
    *end = (int)((long long)n_items * (t + 1) / n_threads);
}

static void *gp_ref_worker_main(void *arg)
{
    gp_ref_worker *wk = arg;
    gp_ref_pool *p = wk->pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->generation == seen && !p->quit)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit)
            break;
        seen = p->generation;
        gp_ref_task fn = p->fn;
        void *ctx = p->ctx;
        int n = p->n_items;
        pthread_mutex_unlock(&p->mu);
        int b, e;
        gp_ref_slice(n, p->n_threads, wk->index, &b, &e);
        if (b < e)
            fn(ctx, b, e, wk->index);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void gp_ref_pool_destroy(gp_ref_pool *p)
{
    if (!p)
        return;
    if (p->mu_ok) {
        pthread_mutex_lock(&p->mu);
        p->quit = true;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_threads - 1; i++)
            pthread_join(p->threads[i], NULL);
        pthread_cond_destroy(&p->done);
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->mu);
    }
    free(p->threads);
    free(p->workers);
    free(p);
}

/* Threads: n_threads if > 0; else GP_REF_THREADS (1..16) if set, else the
 * online CPUs, capped at 16. A thread that cannot be started only makes the
 * pool smaller. */
gp_status gp_ref_pool_create(int n_threads, gp_ref_pool **out)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads > 0) {
        if (n_threads > GP_REF_MAX_THREADS)
            GP_FAIL(GP_ERR_INVALID_ARG, "reference threads %d: allowed 1..%d", n_threads, GP_REF_MAX_THREADS);
        n = n_threads;
    } else {
        long online = n < 1 ? 1 : (n > GP_REF_MAX_THREADS ? GP_REF_MAX_THREADS : n);
        GP_TRY(gp_env_int("GP_REF_THREADS", 1, GP_REF_MAX_THREADS, online, &n));
    }
    if (n < 1)
        n = 1;
    if (n > GP_REF_MAX_THREADS)
        n = GP_REF_MAX_THREADS;

    gp_ref_pool *p = calloc(1, sizeof *p);
    if (!p)
        GP_FAIL(GP_ERR_NO_MEMORY, "reference thread pool: out of memory");
    p->threads = calloc((size_t)n, sizeof *p->threads);
    p->workers = calloc((size_t)n, sizeof *p->workers);
    if (!p->threads || !p->workers) {
        gp_ref_pool_destroy(p);
        GP_FAIL(GP_ERR_NO_MEMORY, "reference thread pool: out of memory");
    }
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        gp_ref_pool_destroy(p);
        GP_FAIL(GP_ERR_NO_MEMORY, "reference thread pool: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&p->wake, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        gp_ref_pool_destroy(p);
        GP_FAIL(GP_ERR_NO_MEMORY, "reference thread pool: pthread_cond_init failed");
    }
    if (pthread_cond_init(&p->done, NULL) != 0) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->mu);
        gp_ref_pool_destroy(p);
        GP_FAIL(GP_ERR_NO_MEMORY, "reference thread pool: pthread_cond_init failed");
    }
    p->mu_ok = true;
    p->n_threads = 1;
    for (int i = 1; i < n; i++) {
        p->workers[i - 1] = (gp_ref_worker){.pool = p, .index = i};
        /* n_threads is read by workers only after a region starts, by which
         * time it is final. */
        if (pthread_create(&p->threads[i - 1], NULL, gp_ref_worker_main, &p->workers[i - 1]) != 0)
            break;
        p->n_threads = i + 1;
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
    if (p->n_threads == 1 || n_items < p->n_threads || work < GP_REF_PAR_MIN_WORK) {
        fn(ctx, 0, n_items, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n_items;
    p->pending = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    int b, e;
    gp_ref_slice(n_items, p->n_threads, 0, &b, &e);
    if (b < e)
        fn(ctx, b, e, 0);

    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int gp_ref_pool_threads(const gp_ref_pool *p)
{
    return p->n_threads;
}
