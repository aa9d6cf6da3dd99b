/* Synthetic weights on the host: per-tensor sizes and scales, and a
 * multithreaded filler over the value function in synth_hash.h, in any of
 * the host weight dtypes. */
#include "gp_model.h"
#include "synth_hash.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *gp_tensor_kind_name(gp_tensor_kind kind)
{
    static const char *names[] = {"embed", "final_norm", "lm_head", "attn_norm", "wqkv", "wo",
                                  "ffn_norm", "w_gate_up", "w_down", "bqkv"};
    return (unsigned)kind < sizeof names / sizeof names[0] ? names[kind] : "tensor";
}

uint64_t gp_synth_numel(const gp_config *c, gp_tensor_kind kind)
{
    if (!c)
        return 0;
    uint64_t h = (uint64_t)c->hidden;
    switch (kind) {
    case GP_T_EMBED:
    case GP_T_LM_HEAD: return (uint64_t)gp_config_vocab_rows(c) * h;
    case GP_T_FINAL_NORM:
    case GP_T_ATTN_NORM:
    case GP_T_FFN_NORM: return h;
    case GP_T_WQKV: return (uint64_t)gp_config_qkv_rows(c) * h;
    case GP_T_WO: return h * (uint64_t)c->n_heads * (uint64_t)c->head_dim;
    case GP_T_W_GATE_UP: return 2 * (uint64_t)c->ffn * h;
    case GP_T_W_DOWN: return h * (uint64_t)c->ffn;
    case GP_T_BQKV: return (uint64_t)gp_config_qkv_rows(c);
    }
    return 0;
}

/* Linear weights are uniform in +-sqrt(3/fan_in), i.e. variance 1/fan_in, so
 * activations keep unit scale through every layer; embeddings are O(1) so
 * their RMSNorm is too; norms are 1 +- 0.1 so they are near identity but not
 * trivially so. */
float gp_synth_scale(const gp_config *c, gp_tensor_kind kind)
{
    if (!c)
        return 0.0f;
    double fan_in;
    switch (kind) {
    case GP_T_EMBED: return 1.0f;
    case GP_T_BQKV: return 0.5f; /* biases comparable to a projection's unit-scale output */
    case GP_T_FINAL_NORM:
    case GP_T_ATTN_NORM:
    case GP_T_FFN_NORM: return 0.1f;
    case GP_T_LM_HEAD:
    case GP_T_WQKV:
    case GP_T_W_GATE_UP: fan_in = (double)c->hidden; break;
    case GP_T_WO: fan_in = (double)c->n_heads * (double)c->head_dim; break;
    case GP_T_W_DOWN: fan_in = (double)c->ffn; break;
    default: return 0.0f;
    }
    return fan_in > 0.0 ? (float)sqrt(3.0 / fan_in) : 0.0f;
}

/* ---------------------------------------------------------------- filler */

typedef struct gp_synth_task {
    void *dst;          /* [n] of dtype */
    gp_dtype dtype;     /* F32, BF16 or F16 */
    uint64_t n;
    gp_tensor_kind kind;
    int layer;
    float scale;
    uint64_t first_chunk; /* index of this task's first chunk in the job */
} gp_synth_task;

typedef struct gp_synth_job {
    const gp_synth_task *tasks; /* [n_tasks], first_chunk ascending */
    size_t n_tasks;
    uint64_t n_chunks;
    uint64_t seed;
    atomic_uint_fast64_t next; /* next chunk to hand out */
    atomic_uint_fast64_t done_bytes; /* bytes of the chunks finished */
    gp_progress_run *progress; /* reported by the calling thread only; NULL: none */
} gp_synth_job;

/* Large enough to amortise the atomic, small enough to balance threads. */
#define GP_SYNTH_CHUNK ((uint64_t)1 << 20)

static void gp_synth_fill_range(void *dst, gp_dtype dt, uint64_t begin, uint64_t end, uint64_t seed,
                                gp_tensor_kind kind, int layer, float scale)
{
    if (dt == GP_DTYPE_BF16) {
        gp_bf16 *d = dst;
        for (uint64_t i = begin; i < end; i++)
            d[i] = gp_synth_bf16(seed, (int)kind, layer, i, scale);
    } else if (dt == GP_DTYPE_F16) {
        uint16_t *d = dst;
        for (uint64_t i = begin; i < end; i++)
            d[i] = gp_f32_to_f16(gp_synth_f32(seed, (int)kind, layer, i, scale));
    } else {
        float *d = dst;
        for (uint64_t i = begin; i < end; i++)
            d[i] = gp_synth_f32(seed, (int)kind, layer, i, scale);
    }
}

/* caller: the thread that called gp_synth_run, the one that reports
 * progress (a callback must not run on a thread the caller never made) */
static void gp_synth_work(gp_synth_job *job, bool caller)
{
    for (;;) {
        uint64_t c = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (c >= job->n_chunks)
            return;
        size_t lo = 0, hi = job->n_tasks; /* last task with first_chunk <= c */
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (job->tasks[mid].first_chunk <= c)
                lo = mid;
            else
                hi = mid;
        }
        const gp_synth_task *t = &job->tasks[lo];
        uint64_t begin = (c - t->first_chunk) * GP_SYNTH_CHUNK;
        uint64_t end = begin + GP_SYNTH_CHUNK < t->n ? begin + GP_SYNTH_CHUNK : t->n;
        gp_synth_fill_range(t->dst, t->dtype, begin, end, job->seed, t->kind, t->layer, t->scale);
        uint64_t bytes = (end - begin) * gp_dtype_size(t->dtype);
        uint64_t done = atomic_fetch_add_explicit(&job->done_bytes, bytes, memory_order_relaxed) + bytes;
        if (caller && job->progress)
            gp_progress_update(job->progress, done);
    }
}

static void *gp_synth_worker(void *arg)
{
    gp_synth_work(arg, false);
    return NULL;
}

/* Fills every task, splitting work over the online CPUs. Thread creation
 * failures only reduce parallelism: the calling thread always works too. */
static void gp_synth_run(gp_synth_task *tasks, size_t n_tasks, uint64_t seed, gp_progress_run *progress)
{
    gp_synth_job job = { .tasks = tasks, .n_tasks = n_tasks, .seed = seed, .progress = progress };
    for (size_t i = 0; i < n_tasks; i++) {
        tasks[i].first_chunk = job.n_chunks;
        job.n_chunks += (tasks[i].n + GP_SYNTH_CHUNK - 1) / GP_SYNTH_CHUNK;
    }
    atomic_init(&job.next, 0);
    atomic_init(&job.done_bytes, 0);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t nthreads = ncpu > 1 ? (uint64_t)ncpu : 1;
    if (nthreads > 64)
        nthreads = 64;
    if (nthreads > job.n_chunks)
        nthreads = job.n_chunks ? job.n_chunks : 1;
    pthread_t tid[64];
    uint64_t started = 0;
    for (uint64_t i = 1; i < nthreads; i++) {
        if (pthread_create(&tid[started], NULL, gp_synth_worker, &job) != 0)
            break;
        started++;
    }
    gp_synth_work(&job, true);
    for (uint64_t i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
}

void gp_synth_fill_tensor_host(void *dst, gp_dtype dtype, uint64_t n, uint64_t seed,
                               gp_tensor_kind kind, int layer, float scale)
{
    if (!dst || n == 0 || (dtype != GP_DTYPE_F32 && !gp_dtype_is_half(dtype)))
        return;
    gp_synth_task t = { .dst = dst, .dtype = dtype, .n = n, .kind = kind, .layer = layer,
                        .scale = scale };
    gp_synth_run(&t, 1, seed, NULL);
}

gp_status gp_synth_fill_host(gp_host_weights *w, uint64_t seed)
{
    return gp_synth_fill_host_ex(w, seed, NULL);
}

gp_status gp_synth_fill_host_ex(gp_host_weights *w, uint64_t seed, const gp_progress_cb *progress)
{
    if (!w || !w->arena || !w->embed || !w->final_norm || !w->lm_head || !w->layers)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_synth_fill_host: weights are not allocated "
                "(use gp_host_weights_alloc first)");
    const gp_config *c = &w->cfg;
    GP_TRY(gp_config_validate(c));
    if (w->dtype != GP_DTYPE_F32 && !gp_dtype_is_half(w->dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_synth_fill_host: weights dtype %s; allowed F32, BF16 or F16",
                gp_dtype_name(w->dtype));
    for (int l = 0; c->qkv_bias && l < c->n_layers; l++)
        if (!w->layers[l].bqkv)
            GP_FAIL(GP_ERR_INVALID_ARG, "gp_synth_fill_host: config %s has q/k/v biases but layer %d "
                    "has no bqkv (use gp_host_weights_alloc)", c->name, l);
    size_t n_tasks = 3 + 7 * (size_t)c->n_layers;
    gp_synth_task *tasks = calloc(n_tasks, sizeof *tasks);
    if (!tasks)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_synth_fill_host: cannot allocate %zu bytes",
                n_tasks * sizeof *tasks);
    size_t k = 0;
#define GP_ADD_TASK(ptr, kd, ly)                                                                  \
    do {                                                                                          \
        tasks[k++] = (gp_synth_task){ .dst = (ptr), .dtype = w->dtype, .n = gp_synth_numel(c, (kd)), \
                                      .kind = (kd), .layer = (ly), .scale = gp_synth_scale(c, (kd)) }; \
    } while (0)
    GP_ADD_TASK(w->embed, GP_T_EMBED, 0);
    GP_ADD_TASK(w->final_norm, GP_T_FINAL_NORM, 0);
    if (!c->tied_embeddings) /* tied: lm_head is embed, already filled */
        GP_ADD_TASK(w->lm_head, GP_T_LM_HEAD, 0);
    for (int l = 0; l < c->n_layers; l++) {
        gp_layer_weights *L = &w->layers[l];
        GP_ADD_TASK(L->attn_norm, GP_T_ATTN_NORM, l);
        GP_ADD_TASK(L->wqkv, GP_T_WQKV, l);
        GP_ADD_TASK(L->wo, GP_T_WO, l);
        GP_ADD_TASK(L->ffn_norm, GP_T_FFN_NORM, l);
        GP_ADD_TASK(L->w_gate_up, GP_T_W_GATE_UP, l);
        GP_ADD_TASK(L->w_down, GP_T_W_DOWN, l);
        if (c->qkv_bias)
            GP_ADD_TASK(L->bqkv, GP_T_BQKV, l);
    }
#undef GP_ADD_TASK
    uint64_t total = 0;
    for (size_t i = 0; i < k; i++)
        total += tasks[i].n * gp_dtype_size(w->dtype);
    gp_progress_run pr;
    gp_progress_begin(&pr, progress, "synthesizing weights", "B", total);
    gp_synth_run(tasks, k, seed, &pr);
    gp_progress_end(&pr, total);
    free(tasks);
    return GP_OK;
}

gp_status gp_synth_host_rate(gp_dtype dtype, uint64_t sample_bytes, double *bytes_per_s)
{
    if (!bytes_per_s || (dtype != GP_DTYPE_F32 && !gp_dtype_is_half(dtype)))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_synth_host_rate: dtype %s; allowed F32, BF16 or F16 and an output",
                gp_dtype_name(dtype));
    const size_t es = gp_dtype_size(dtype);
    uint64_t n = sample_bytes / es;
    if (n < GP_SYNTH_CHUNK)
        n = GP_SYNTH_CHUNK; /* one chunk at least: below it the threads' start dominates */
    void *buf = malloc((size_t)(n * es));
    if (!buf)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_synth_host_rate: cannot allocate %llu bytes", (unsigned long long)(n * es));
    double t0 = gp_now_s();
    gp_synth_fill_tensor_host(buf, dtype, n, 0, GP_T_W_GATE_UP, 0, 0.01f);
    double dt = gp_now_s() - t0;
    free(buf);
    *bytes_per_s = dt > 0.0 ? (double)(n * es) / dt : 0.0;
    return GP_OK;
}
