/* gp_gemm_tune: keep the fastest of cuBLASLt's candidates for a shape, timed
 * on the context's own stream (so on its partition), instead of the
 * heuristic's first pick. */
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "gemm_impl.h"

/* Median ms of reps back-to-back calls of algo (after one untimed call), or
 * a negative value when cuBLASLt refuses to launch it. */
static gp_status time_algo(gp_gemm_ctx *ctx, const gp_gemm_entry *e,
                           const cublasLtMatmulHeuristicResult_t *r, const void *x, const void *w,
                           void *y, int reps, cudaEvent_t *ev, float *ms_out)
{
    static const float one = 1.0f;
    float ms[100];
    *ms_out = -1.0f;
    for (int i = -1; i < reps; i++) {
        if (i >= 0)
            GP_CUDA_TRY(cudaEventRecord(ev[i], ctx->stream));
        cublasStatus_t cs = cublasLtMatmul(ctx->lt, e->desc, &one, w, e->lay_w, x, e->lay_x,
                                           gp_gemm_beta(e->out_type), y, e->lay_y, y, e->lay_y,
                                           &r->algo, ctx->workspace, r->workspaceSize,
                                           ctx->stream);
        if (cs != CUBLAS_STATUS_SUCCESS) {
            if (gp_cublas_failure_sticky_code(cs, 1, ctx->stream))
                return gp_check_cublas_fail_on(cs, "cublasLtMatmul (tuning)", __FILE__, __LINE__,
                                               ctx->stream);
            (void)cudaGetLastError(); /* a refused candidate: not the next call's fault */
            return GP_OK;
        }
    }
    GP_CUDA_TRY(cudaEventRecord(ev[reps], ctx->stream));
    GP_CUDA_TRY(cudaEventSynchronize(ev[reps]));
    for (int i = 0; i < reps; i++)
        GP_CUDA_TRY(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
    *ms_out = gp_median_f(ms, reps);
    return GP_OK;
}

static gp_status tune_entry(gp_gemm_ctx *ctx, gp_gemm_entry *e, const void *x, const void *w,
                            void *y, int max_candidates, int reps, cudaEvent_t *ev,
                            gp_gemm_tune_report *rep)
{
    gp_status st = GP_OK;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res[GP_GEMM_TUNE_MAX_CANDIDATES];
    int n_res = 0;
    memset(res, 0, sizeof res);
    GP_TRY(gp_gemm_preference(e, &pref));
    GP_CHECK_CUBLAS_GOTO(cublasLtMatmulAlgoGetHeuristic(ctx->lt, e->desc, e->lay_w, e->lay_x,
                                                        e->lay_y, e->lay_y, pref, max_candidates,
                                                        res, &n_res),
                         st, done);
    int best = -1;
    for (int i = 0; i < n_res; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > GP_GEMM_WORKSPACE_BYTES)
            continue;
        float ms;
        if ((st = time_algo(ctx, e, &res[i], x, w, y, reps, ev, &ms)) != GP_OK)
            goto done;
        if (ms < 0.0f)
            continue;
        if (rep->candidates++ == 0)
            rep->first_ms = ms;
        if (best < 0 || ms < rep->best_ms) {
            best = i;
            rep->best_ms = ms;
        }
    }
    if (best < 0) {
        st = GP_ERR_UNSUPPORTED;
        gp_set_error("gp_gemm_tune: none of the %d cuBLASLt candidates ran for %s M=%d N=%d K=%d "
                     "out=%s (sm_count_target %d)", n_res, gp_dtype_flag_name(e->dtype), e->M, e->N, e->K,
                     gp_gemm_out_name(e->out_type), ctx->sm_target);
        goto done;
    }
    rep->chosen = best;
    e->tuned = 1;
    e->algo = res[best].algo;
    e->algo_ws = res[best].workspaceSize;
done:
    (void)cublasLtMatmulPreferenceDestroy(pref);
    return st;
}

gp_status gp_gemm_tune(gp_gemm_ctx *ctx, gp_dtype dt, int M, int N, int K, const void *x,
                       const void *w, void *y, gp_gemm_out out_type, int max_candidates, int reps,
                       gp_gemm_tune_report *rep)
{
    gp_gemm_tune_report local;
    if (!rep)
        rep = &local;
    memset(rep, 0, sizeof *rep);
    if (!ctx || !x || !w || !y)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm_tune: NULL argument (ctx %p, x %p, w %p, y %p)",
                (void *)ctx, x, w, y);
    GP_TRY(gp_dtype_check_half(dt, "gp_gemm_tune"));
    if (M < 1 || N < 1 || K < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm_tune: M = %d, N = %d, K = %d (need each >= 1)", M,
                N, K);
    if (out_type != GP_GEMM_OUT_HALF && out_type != GP_GEMM_OUT_F32
        && out_type != GP_GEMM_OUT_F32_ACC)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm_tune: out_type = %d: allowed GP_GEMM_OUT_HALF, _F32 or _F32_ACC "
                "(cuBLASLt's; GP_GEMM_OUT_SWIGLU is the skinny kernel's alone)", (int)out_type);
    if (max_candidates < 1 || max_candidates > GP_GEMM_TUNE_MAX_CANDIDATES || reps < 1
        || reps > 100)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm_tune: max_candidates = %d (allowed 1..%d), reps = %d "
                "(allowed 1..100)", max_candidates, GP_GEMM_TUNE_MAX_CANDIDATES, reps);
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    GP_CUDA_TRY(cudaStreamIsCapturing(ctx->stream, &cap));
    if (cap != cudaStreamCaptureStatusNone)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm_tune: the context's stream is capturing a graph; "
                "tune before capture");
    if (gp_gemm_is_skinny(ctx, M, N, K, x, w))
        return GP_OK;

    unsigned aw = gp_gemm_align(w), ax = gp_gemm_align(x), ay = gp_gemm_align(y);
    gp_gemm_entry *e = gp_gemm_lookup(ctx, dt, M, N, K, out_type, aw, ax, ay);
    if (e && e->tuned)
        return GP_OK;
    int fresh = !e;
    if (fresh) {
        e = gp_gemm_new_entry(ctx, dt, M, N, K, out_type, aw, ax, ay);
        GP_TRY(gp_gemm_entry_build(ctx, e));
    }
    cudaEvent_t ev[101];
    int n_ev = 0;
    gp_status st = GP_OK;
    for (; n_ev <= reps; n_ev++)
        GP_CUDA_GOTO(cudaEventCreate(&ev[n_ev]), st, events);
    st = tune_entry(ctx, e, x, w, y, max_candidates, reps, ev, rep);
events:
    for (int i = 0; i < n_ev; i++)
        (void)cudaEventDestroy(ev[i]);
    if (fresh && st != GP_OK) {
        gp_gemm_entry_release(e);
        return st;
    }
    if (fresh) {
        e->used = 1;
        ctx->n_cached++;
    }
    return st;
}
