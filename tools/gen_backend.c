/* Backends of greenpipe generate: the CPU reference computes logits and takes
 * their argmax; the CUDA engine returns its own greedy tokens and copies the
 * logits back only when asked. */
#include "gen_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"

struct gen_backend {
    int cuda;
    int vocab;
    char describe[160];
    /* cpu */
    gp_host_weights w;
    gp_cpu_model *cpu;
    float *scratch; /* [n_seqs][vocab] */
    /* cuda */
    gp_device_weights *dw;
    gp_engine *engine;
};

static gp_status open_cpu(gen_backend *b, const gp_model_source *src, int n_seqs, int ctx, int block)
{
    GP_TRY(gp_model_source_load_host(src, &b->w));
    b->scratch = malloc(sizeof(float) * (size_t)n_seqs * (size_t)b->vocab);
    if (!b->scratch)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory for %d x %d logits", n_seqs, b->vocab);
    snprintf(b->describe, sizeof b->describe, "cpu (float32 reference), %.2f GB of bf16 weights in host memory",
             (double)b->w.arena_bytes / 1e9);
    return gp_cpu_model_create(&b->w, n_seqs, ctx, block, &b->cpu);
}

static gp_status open_cuda(gen_backend *b, const gp_model_source *src, int n_seqs, int ctx, int block)
{
    GP_TRY(gp_cuda_available());
    if (src->synthetic) {
        GP_TRY(gp_device_weights_synthetic(&src->cfg, src->seed, &b->dw)); /* generated in place */
    } else {
        GP_TRY(gp_model_source_load_host(src, &b->w));
        gp_status st = gp_device_weights_upload(&b->w, &b->dw);
        gp_host_weights_free(&b->w);
        GP_TRY(st);
    }
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = n_seqs;
    p.max_context = ctx;
    p.block_size = block;
    snprintf(b->describe, sizeof b->describe, "cuda (bf16 engine, CUDA graphs), %.2f GB of weights on the GPU",
             (double)gp_device_weights_view(b->dw)->arena_bytes / 1e9);
    return gp_engine_create(b->dw, &p, &b->engine);
}

gp_status gen_backend_open(const char *name, const gp_model_source *src, int n_seqs, int ctx,
                           int block_size, gen_backend **out)
{
    *out = NULL;
    gen_backend *b = calloc(1, sizeof *b);
    if (!b)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory");
    b->vocab = src->cfg.vocab;
    b->cuda = !strcmp(name, "cuda");
    gp_status st = b->cuda ? open_cuda(b, src, n_seqs, ctx, block_size) : open_cpu(b, src, n_seqs, ctx, block_size);
    if (st != GP_OK) {
        gen_backend_close(b);
        return st;
    }
    *out = b;
    return GP_OK;
}

const char *gen_backend_describe(const gen_backend *b)
{
    return b->describe;
}

gp_status gen_backend_prefill(gen_backend *b, int seq, int n, const int32_t *prompt, int32_t *next,
                              float *logits)
{
    if (b->cuda)
        return gp_engine_prefill(b->engine, seq, n, prompt, next, logits);
    GP_TRY(gp_cpu_prefill(b->cpu, seq, n, prompt, b->scratch));
    *next = gp_argmax(b->scratch, b->vocab);
    if (logits)
        memcpy(logits, b->scratch, sizeof(float) * (size_t)b->vocab);
    return GP_OK;
}

gp_status gen_backend_step(gen_backend *b, int n, const int *ids, const int32_t *feed, int32_t *next,
                           float *logits)
{
    if (b->cuda)
        return gp_engine_decode_step(b->engine, n, ids, feed, next, logits);
    GP_TRY(gp_cpu_decode_step(b->cpu, n, ids, feed, b->scratch));
    for (int s = 0; s < n; s++)
        next[s] = gp_argmax(b->scratch + (size_t)s * b->vocab, b->vocab);
    if (logits)
        memcpy(logits, b->scratch, sizeof(float) * (size_t)n * (size_t)b->vocab);
    return GP_OK;
}

void gen_backend_close(gen_backend *b)
{
    if (!b)
        return;
    gp_engine_destroy(b->engine);
    gp_device_weights_destroy(b->dw);
    gp_cpu_model_destroy(b->cpu);
    gp_host_weights_free(&b->w);
    free(b->scratch);
    free(b);
}
