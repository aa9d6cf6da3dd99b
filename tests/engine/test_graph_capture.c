/* The engine kernels under CUDA-graph capture: a mini decode step (embed ->
 * RMSNorm -> GEMM -> SwiGLU -> GEMM adding into the fp32 residual -> GEMM
 * (fp32 logits) -> argmax) captured on a
 * stream whose GEMM shapes are new to the context (so the algorithm is picked
 * during capture), replayed, and compared bit for bit with an eager run; in
 * both engine dtypes (bf16, fp16). */
#include "gpu_test_util.h"

#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"
#include "gp_test_cuda.h"

static uint64_t g_seed;
static gp_dtype g_dt = GP_DTYPE_BF16; /* the pass being run (main runs each of gt_dtypes) */

typedef struct step {
    int B, H, F, V;
    int32_t *tok;     /* [B] device */
    uint16_t *embed;   /* [V][H] */
    uint16_t *norm_w;  /* [H] */
    uint16_t *w_gu;    /* [2F][H] */
    uint16_t *w_down;  /* [H][F] */
    uint16_t *w_head;  /* [V][F] */
    float *resid;     /* [B][H] */
    uint16_t *h;       /* [B][H] */
    uint16_t *gu;      /* [B][2F] */
    uint16_t *act;     /* [B][F] */
    float *logits;    /* [B][V] */
    int32_t *next;    /* [B] */
} step;

static gp_status step_enqueue(step *s, gp_gemm_ctx *ctx, cudaStream_t st)
{
    GP_TRY(gp_embed(g_dt, s->tok, s->embed, s->resid, s->B, s->H, s->V, 0, s->V, st));
    GP_TRY(gp_rmsnorm_residual(g_dt, s->resid, NULL, s->norm_w, s->h, s->B, s->H, 1e-5f, st));
    GP_TRY(gp_gemm(ctx, g_dt, s->B, 2 * s->F, s->H, s->h, s->w_gu, s->gu, GP_GEMM_OUT_HALF));
    GP_TRY(gp_swiglu(g_dt, s->gu, s->act, s->B, s->F, st));
    GP_TRY(gp_gemm(ctx, g_dt, s->B, s->H, s->F, s->act, s->w_down, s->resid, GP_GEMM_OUT_F32_ACC));
    GP_TRY(gp_gemm(ctx, g_dt, s->B, s->V, s->F, s->act, s->w_head, s->logits, GP_GEMM_OUT_F32));
    GP_TRY(gp_argmax_rows(s->logits, s->next, s->B, s->V, st));
    return GP_OK;
}

static void fill_half(uint16_t *dev, size_t n, float lo, float hi, gt_rng *rng)
{
    uint16_t *h = gt_host_alloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++)
        h[i] = gt_half(rng, lo, hi, g_dt);
    gt_upload(dev, h, n * sizeof(uint16_t));
    free(h);
}

typedef struct outputs { float *resid, *logits; uint16_t *h, *act; int32_t *next; } outputs;

static void outputs_get(const step *s, outputs *o)
{
    size_t BH = (size_t)s->B * s->H, BF = (size_t)s->B * s->F, BV = (size_t)s->B * s->V;
    o->resid = gt_host_alloc(BH * sizeof(float)), o->h = gt_host_alloc(BH * sizeof(uint16_t));
    o->act = gt_host_alloc(BF * sizeof(uint16_t)), o->logits = gt_host_alloc(BV * sizeof(float));
    o->next = gt_host_alloc((size_t)s->B * sizeof(int32_t));
    gt_download(o->resid, s->resid, BH * sizeof(float));
    gt_download(o->h, s->h, BH * sizeof(uint16_t));
    gt_download(o->act, s->act, BF * sizeof(uint16_t));
    gt_download(o->logits, s->logits, BV * sizeof(float));
    gt_download(o->next, s->next, (size_t)s->B * sizeof(int32_t));
}

static void outputs_free(outputs *o)
{
    free(o->resid), free(o->h), free(o->act), free(o->logits), free(o->next);
}

static void poison_outputs(const step *s)
{
    size_t BH = (size_t)s->B * s->H, BF = (size_t)s->B * s->F, BV = (size_t)s->B * s->V;
    gt_poison(s->resid, BH * sizeof(float)), gt_poison(s->h, BH * sizeof(uint16_t));
    gt_poison(s->gu, 2 * BF * sizeof(uint16_t)), gt_poison(s->act, BF * sizeof(uint16_t));
    gt_poison(s->logits, BV * sizeof(float)), gt_poison(s->next, (size_t)s->B * sizeof(int32_t));
}

static int all_poisoned(const void *p, size_t bytes)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < bytes; i++)
        if (c[i] != 0xFF)
            return 0;
    return 1;
}

static void run(int B, int H, int F, int V, enum cudaStreamCaptureMode mode, const char *mode_name)
{
    gt_rng rng = { g_seed ^ (uint64_t)mode };
    step s = { .B = B, .H = H, .F = F, .V = V };
    s.tok = gt_dev_alloc((size_t)B * sizeof(int32_t));
    s.embed = gt_dev_alloc((size_t)V * H * sizeof(uint16_t));
    s.norm_w = gt_dev_alloc((size_t)H * sizeof(uint16_t));
    s.w_gu = gt_dev_alloc((size_t)2 * F * H * sizeof(uint16_t));
    s.w_down = gt_dev_alloc((size_t)H * F * sizeof(uint16_t));
    s.w_head = gt_dev_alloc((size_t)V * F * sizeof(uint16_t));
    s.resid = gt_dev_alloc((size_t)B * H * sizeof(float));
    s.h = gt_dev_alloc((size_t)B * H * sizeof(uint16_t));
    s.gu = gt_dev_alloc((size_t)B * 2 * F * sizeof(uint16_t));
    s.act = gt_dev_alloc((size_t)B * F * sizeof(uint16_t));
    s.logits = gt_dev_alloc((size_t)B * V * sizeof(float));
    s.next = gt_dev_alloc((size_t)B * sizeof(int32_t));
    int32_t *tok = gt_host_alloc((size_t)B * sizeof(int32_t));
    for (int b = 0; b < B; b++)
        tok[b] = gt_below(&rng, V);
    gt_upload(s.tok, tok, (size_t)B * sizeof(int32_t));
    fill_half(s.embed, (size_t)V * H, -1.0f, 1.0f, &rng);
    fill_half(s.norm_w, (size_t)H, 0.5f, 1.5f, &rng);
    fill_half(s.w_gu, (size_t)2 * F * H, -0.05f, 0.05f, &rng);
    fill_half(s.w_down, (size_t)H * F, -0.05f, 0.05f, &rng);
    fill_half(s.w_head, (size_t)V * F, -0.05f, 0.05f, &rng);

    cudaStream_t st;
    GP_CHECK_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    gp_gemm_ctx *ctx = NULL;
    GP_CHECK_OK(gp_gemm_ctx_create(st, 0, &ctx));
    poison_outputs(&s);

    /* capture with shapes the context has never seen */
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    GP_CHECK_CUDA(cudaStreamBeginCapture(st, mode));
    gp_status enq = step_enqueue(&s, ctx, st);
    cudaError_t end = cudaStreamEndCapture(st, &graph);
    if (enq != GP_OK)
        fail_msg("%s capture: enqueue failed: %s: %s", mode_name, gp_status_str(enq), gp_last_error());
    if (end != cudaSuccess)
        fail_msg("%s capture: cudaStreamEndCapture: %s (%s)", mode_name, cudaGetErrorString(end),
                 cudaGetErrorName(end));
    assert_int_equal(gp_gemm_cached_shapes(ctx), 3);
    /* capturing must not have run anything */
    float *probe = gt_host_alloc((size_t)B * V * sizeof(float));
    gt_download(probe, s.logits, (size_t)B * V * sizeof(float));
    if (!all_poisoned(probe, (size_t)B * V * sizeof(float)))
        fail_msg("%s capture: logits were written while capturing", mode_name);
    free(probe);
    GP_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    GP_CHECK_CUDA(cudaGraphLaunch(exec, st));
    GP_CHECK_CUDA(cudaStreamSynchronize(st));
    outputs g1, g2, e;
    outputs_get(&s, &g1);
    poison_outputs(&s);
    GP_CHECK_CUDA(cudaGraphLaunch(exec, st)); /* replay is repeatable */
    GP_CHECK_CUDA(cudaStreamSynchronize(st));
    outputs_get(&s, &g2);
    poison_outputs(&s);
    GP_CHECK_OK(step_enqueue(&s, ctx, st)); /* eager, served by the algorithms picked in capture */
    GP_CHECK_CUDA(cudaStreamSynchronize(st));
    outputs_get(&s, &e);
    assert_int_equal(gp_gemm_cached_shapes(ctx), 3);

    size_t BH = (size_t)B * H, BF = (size_t)B * F, BV = (size_t)B * V;
    const struct { const char *name; const void *a, *b, *c; size_t bytes; } cmp[] = {
        { "resid", g1.resid, g2.resid, e.resid, BH * sizeof(float) },
        { "h", g1.h, g2.h, e.h, BH * sizeof(uint16_t) },
        { "act", g1.act, g2.act, e.act, BF * sizeof(uint16_t) },
        { "logits", g1.logits, g2.logits, e.logits, BV * sizeof(float) },
        { "next", g1.next, g2.next, e.next, (size_t)B * sizeof(int32_t) },
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
        int same12 = memcmp(cmp[i].a, cmp[i].b, cmp[i].bytes) == 0;
        int same1e = memcmp(cmp[i].a, cmp[i].c, cmp[i].bytes) == 0;
        if (!same12 || !same1e) {
            printf("  %s B=%d: %s differs (replay vs replay: %s, replay vs eager: %s)\n",
                   mode_name, B, cmp[i].name, same12 ? "same" : "DIFFERENT",
                   same1e ? "same" : "DIFFERENT");
            bad++;
        }
    }
    for (int b = 0; b < B; b++)
        if (e.next[b] < 0 || e.next[b] >= V)
            fail_msg("%s: next[%d] = %d outside the vocabulary", mode_name, b, e.next[b]);
    if (bad)
        fail_msg("%s capture: %d outputs differ (seed %llu)", mode_name, bad,
                 (unsigned long long)g_seed);
    printf("  %s %s capture B=%d H=%d F=%d V=%d: graph == eager, bit for bit\n", gp_dtype_flag_name(g_dt),
           mode_name, B, H, F, V);

    outputs_free(&g1), outputs_free(&g2), outputs_free(&e);
    GP_CHECK_CUDA(cudaGraphExecDestroy(exec));
    GP_CHECK_CUDA(cudaGraphDestroy(graph));
    gp_gemm_ctx_destroy(ctx);
    GP_CHECK_CUDA(cudaStreamDestroy(st));
    void *bufs[] = { s.tok, s.embed, s.norm_w, s.w_gu, s.w_down, s.w_head, s.resid, s.h, s.gu, s.act,
                     s.logits, s.next };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        gt_dev_free(bufs[i]);
    free(tok);
}

static void test_capture_thread_local(void **state)
{
    (void)state;
    run(8, 512, 1024, 5000, cudaStreamCaptureModeThreadLocal, "thread-local");
}

/* Global mode forbids unsafe calls (e.g. cudaMalloc) from any thread during
 * capture: the strictest check that first-use algorithm picking is legal. */
static void test_capture_global(void **state)
{
    (void)state;
    run(64, 4096, 1536, 32000, cudaStreamCaptureModeGlobal, "global");
    run(3, 96, 40, 1001, cudaStreamCaptureModeGlobal, "global-odd");
}

int main(void)
{
    if (gt_no_gpu("engine_graph_capture"))
        return 77;
    g_seed = gt_seed("engine_graph_capture");
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_capture_thread_local),
        cmocka_unit_test(test_capture_global),
    };
    int failed = 0;
    for (int d = 0; d < 2; d++) {
        g_dt = gt_dtypes[d];
        char name[80];
        snprintf(name, sizeof name, "engine kernels under graph capture, %s", gp_dtype_flag_name(g_dt));
        failed |= cmocka_run_group_tests_name(name, gpu, NULL, NULL) != 0;
    }
    return failed;
}
