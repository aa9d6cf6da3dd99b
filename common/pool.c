/* A persistent thread pool for CPU work done per layer of a step (the cold
 * FFN neurons, the CPU attention): workers sleep on a condition variable
 * between calls, so a call pays a wake-up, not a thread start. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include <unistd.h>

#include "gp_common.h"

typedef struct gp_pool_worker {
    gp_pool *pool;
    int index; /* 1..n_threads-1; 0 is the caller */
} gp_pool_worker;

struct gp_pool {
    int n_threads;
    pthread_t threads[GP_POOL_MAX_THREADS];
    gp_pool_worker workers[GP_POOL_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    unsigned long generation; /* bumped once per run */
    int pending;              /* workers still inside the current run */
    bool quit;
    gp_pool_task fn;
    void *ctx;
};

static void *gp_pool_worker_main(void *arg)
{
    gp_pool_worker *wk = arg;
    gp_pool *p = wk->pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->generation == seen && !p->quit)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit)
            break;
        seen = p->generation;
        gp_pool_task fn = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->mu);
        fn(ctx, wk->index);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

gp_status gp_pool_create(int n_threads, gp_pool **out)
{
    if (n_threads < 1 || n_threads > GP_POOL_MAX_THREADS)
        GP_FAIL(GP_ERR_INVALID_ARG, "thread pool of %d threads (allowed 1..%d)", n_threads, GP_POOL_MAX_THREADS);
    gp_pool *p = calloc(1, sizeof *p);
    if (!p)
        GP_FAIL(GP_ERR_NO_MEMORY, "thread pool: out of memory");
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        GP_FAIL(GP_ERR_NO_MEMORY, "thread pool: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&p->wake, NULL) != 0 || pthread_cond_init(&p->done, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p); /* a condition variable that did initialise holds no resource on Linux */
        GP_FAIL(GP_ERR_NO_MEMORY, "thread pool: pthread_cond_init failed");
    }
    p->n_threads = 1;
    for (int i = 1; i < n_threads; i++) {
        p->workers[i] = (gp_pool_worker){.pool = p, .index = i};
        if (pthread_create(&p->threads[i], NULL, gp_pool_worker_main, &p->workers[i]) != 0)
            break;
        p->n_threads = i + 1;
    }
    *out = p;
    return GP_OK;
}

void gp_pool_destroy(gp_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int gp_pool_threads(const gp_pool *p)
{
    return p->n_threads;
}

void gp_pool_run(gp_pool *p, gp_pool_task fn, void *ctx)
{
    if (p->n_threads == 1) {
        fn(ctx, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->pending = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int gp_pool_threads_for(int n_threads)
{
    if (n_threads > 0)
        return n_threads;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online < 1 ? 1 : online > GP_POOL_MAX_THREADS ? GP_POOL_MAX_THREADS : (int)online;
}
