/* The engine's GEMM: y = x . W^T (bf16 or fp16 in, fp32 accumulate) through the
 * skinny kernel for decode-sized M, else cuBLASLt, with a per-context stream,
 * SM budget, workspace and per-shape plan cache. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "gemm_skinny.cuh"
#include "gemm_impl.h"
#include "kernels.h"

/* Largest power of two (<= 256) dividing the address: cuBLASLt's heuristic
 * assumes 256-byte aligned buffers unless told otherwise, and an algorithm
 * picked for aligned pointers may be refused for a row-offset slice. */
unsigned gp_gemm_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    unsigned al = 256;
    while (al > 1 && (a & (al - 1)))
        al >>= 1;
    return al;
}

/* Host scalars: cuBLASLt reads them at the call, so capture records values. */
const float *gp_gemm_beta(gp_gemm_out t)
{
    static const float zero = 0.0f, one = 1.0f;
    return t == GP_GEMM_OUT_F32_ACC ? &one : &zero;
}

const char *gp_gemm_out_name(gp_gemm_out t)
{
    return t == GP_GEMM_OUT_HALF ? "half" : t == GP_GEMM_OUT_F32 ? "f32" : t == GP_GEMM_OUT_F32_ACC ? "f32_acc" : "swiglu";
}

void gp_gemm_entry_release(gp_gemm_entry *e)
{
    /* destroy calls only fail on NULL, which is skipped */
    if (e->lay_y)
        (void)cublasLtMatrixLayoutDestroy(e->lay_y);
    if (e->lay_x)
        (void)cublasLtMatrixLayoutDestroy(e->lay_x);
    if (e->lay_w)
        (void)cublasLtMatrixLayoutDestroy(e->lay_w);
    if (e->desc)
        (void)cublasLtMatmulDescDestroy(e->desc);
    memset(e, 0, sizeof *e);
}

static void gp_gemm_cache_clear(gp_gemm_ctx *ctx)
{
    for (int i = 0; i < GP_GEMM_CACHE_SLOTS; i++)
        if (ctx->cache[i].used)
            gp_gemm_entry_release(&ctx->cache[i]);
    ctx->n_cached = 0;
    ctx->victim = 0;
}

gp_status gp_gemm_ctx_create(void *stream, int sm_count_target, gp_gemm_ctx **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm_ctx_create: out is NULL");
    *out = NULL;
    if (sm_count_target < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm_ctx_create: sm_count_target = %d is negative",
                sm_count_target);
    int dev = 0, sms = 0;
    GP_CUDA_TRY(cudaGetDevice(&dev));
    GP_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (sm_count_target > sms)
        GP_FAIL(GP_ERR_INVALID_ARG,
                "gp_gemm_ctx_create: sm_count_target = %d exceeds the device's %d SMs",
                sm_count_target, sms);

    gp_gemm_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_gemm_ctx_create: out of host memory");
    gp_status st = GP_OK;
    ctx->stream = (cudaStream_t)stream;
    ctx->sm_target = sm_count_target;
    ctx->device_sms = sms;
    ctx->skinny_max_m = GP_GEMM_SKINNY_DEFAULT_MAX_M;
    /* the handle allocates on the device too: counted for GP_FAULT_DEVICE_ALLOC */
    cublasStatus_t cs = gp_fault_alloc_hit("cublasLtCreate", 0) ? CUBLAS_STATUS_ALLOC_FAILED
                                                                : cublasLtCreate(&ctx->lt);
    if (cs != CUBLAS_STATUS_SUCCESS) {
        ctx->lt = NULL;
        st = gp_check_cublas_fail(cs, "cublasLtCreate", __FILE__, __LINE__);
        goto fail;
    }
    if ((st = gp_device_alloc(&ctx->workspace, GP_GEMM_WORKSPACE_BYTES, "cuBLASLt workspace"))
        != GP_OK)
        goto fail;
    *out = ctx;
    return GP_OK;
fail:
    gp_gemm_ctx_destroy(ctx);
    return st;
}

void gp_gemm_ctx_destroy(gp_gemm_ctx *ctx)
{
    if (!ctx)
        return;
    gp_gemm_cache_clear(ctx);
    /* teardown: errors cannot be acted on; the workspace may still be in use
     * by queued work, which cudaFree waits for */
    gp_device_free(ctx->workspace);
    if (ctx->lt)
        (void)cublasLtDestroy(ctx->lt);
    free(ctx);
}

gp_status gp_gemm_set_stream(gp_gemm_ctx *ctx, void *stream)
{
    if (!ctx)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm_set_stream: ctx is NULL");
    ctx->stream = (cudaStream_t)stream;
    return GP_OK;
}

gp_status gp_gemm_set_sm_count_target(gp_gemm_ctx *ctx, int sm_count_target)
{
    if (!ctx)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm_set_sm_count_target: ctx is NULL");
    if (sm_count_target < 0 || sm_count_target > ctx->device_sms)
        GP_FAIL(GP_ERR_INVALID_ARG,
                "gp_gemm_set_sm_count_target: sm_count_target = %d is outside 0..%d",
                sm_count_target, ctx->device_sms);
    if (sm_count_target != ctx->sm_target) {
        gp_gemm_cache_clear(ctx);
        ctx->sm_target = sm_count_target;
    }
    return GP_OK;
}

int gp_gemm_sm_count_target(const gp_gemm_ctx *ctx)
{
    return ctx ? ctx->sm_target : 0;
}

void *gp_gemm_stream(const gp_gemm_ctx *ctx)
{
    return ctx ? (void *)ctx->stream : NULL;
}

_Static_assert(GP_SKINNY_OUT_SWIGLU == (int)GP_GEMM_OUT_SWIGLU, "the skinny kernel's out types are gp_gemm_out's");

gp_status gp_gemm_set_skinny_max_m(gp_gemm_ctx *ctx, int max_m)
{
    if (!ctx)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm_set_skinny_max_m: ctx is NULL");
    if (max_m < 0 || max_m > GP_GEMM_SKINNY_MAX_M)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm_set_skinny_max_m: max_m = %d is outside 0..%d", max_m,
                GP_GEMM_SKINNY_MAX_M);
    if (max_m != ctx->skinny_max_m) {
        gp_gemm_cache_clear(ctx); /* cached shapes may now belong to the other path */
        ctx->skinny_max_m = max_m;
    }
    return GP_OK;
}

int gp_gemm_is_skinny(const gp_gemm_ctx *ctx, int M, int N, int K, const void *x,
                      const void *w)
{
    if (!ctx || M < 1 || M > ctx->skinny_max_m)
        return 0;
    gp_skinny_plan p;
    int sms = ctx->sm_target > 0 ? ctx->sm_target : ctx->device_sms;
    return gp_skinny_plan_make(M, N, K, x, w, sms, 0, &p);
}

int gp_gemm_cached_shapes(const gp_gemm_ctx *ctx)
{
    return ctx ? ctx->n_cached : 0;
}

gp_gemm_entry *gp_gemm_lookup(gp_gemm_ctx *ctx, gp_dtype dt, int M, int N, int K, gp_gemm_out ot,
                              unsigned aw, unsigned ax, unsigned ay)
{
    for (int i = 0; i < GP_GEMM_CACHE_SLOTS; i++) {
        gp_gemm_entry *e = &ctx->cache[i];
        if (e->used && e->dtype == dt && e->M == M && e->N == N && e->K == K && e->out_type == ot
            && e->align_w == aw && e->align_x == ax && e->align_y == ay)
            return e;
    }
    return NULL;
}

/* A free slot for a new shape, or one evicted round robin (safe even for
 * shapes inside captured graphs: launches copy their parameters), with the
 * shape filled in; the caller builds it and marks it used. */
gp_gemm_entry *gp_gemm_new_entry(gp_gemm_ctx *ctx, gp_dtype dt, int M, int N, int K, gp_gemm_out ot,
                                 unsigned aw, unsigned ax, unsigned ay)
{
    int slot = -1;
    for (int i = 0; i < GP_GEMM_CACHE_SLOTS && slot < 0; i++)
        if (!ctx->cache[i].used)
            slot = i;
    if (slot < 0) {
        slot = ctx->victim;
        ctx->victim = (ctx->victim + 1) % GP_GEMM_CACHE_SLOTS;
        gp_gemm_entry_release(&ctx->cache[slot]);
        ctx->n_cached--;
    }
    gp_gemm_entry *e = &ctx->cache[slot];
    e->dtype = dt;
    e->M = M, e->N = N, e->K = K, e->out_type = ot;
    e->align_w = aw, e->align_x = ax, e->align_y = ay;
    return e;
}

/* Descriptors of a new shape. Row-major y[M][N] = x[M][K] . W[N][K]^T is, in
 * cuBLAS's column-major terms, y^T (N x M, ld N) = op(A) . B with A = W seen
 * as K x N (ld K) and transa = T, B = x seen as K x M (ld K), transb = N. */
gp_status gp_gemm_entry_build(gp_gemm_ctx *ctx, gp_gemm_entry *e)
{
    gp_status st = GP_OK;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cudaDataType_t htype = e->dtype == GP_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
    cudaDataType_t ytype = e->out_type == GP_GEMM_OUT_HALF ? htype : CUDA_R_32F;
    GP_CHECK_CUBLAS_GOTO(cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), st,
                         fail);
    GP_CHECK_CUBLAS_GOTO(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                        sizeof ta), st, fail);
    GP_CHECK_CUBLAS_GOTO(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                        sizeof tb), st, fail);
    if (ctx->sm_target > 0) {
        int32_t t = ctx->sm_target;
        GP_CHECK_CUBLAS_GOTO(cublasLtMatmulDescSetAttribute(
                                 e->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &t, sizeof t),
                             st, fail);
    }
    GP_CHECK_CUBLAS_GOTO(cublasLtMatrixLayoutCreate(&e->lay_w, htype, (uint64_t)e->K,
                                                    (uint64_t)e->N, (int64_t)e->K), st, fail);
    GP_CHECK_CUBLAS_GOTO(cublasLtMatrixLayoutCreate(&e->lay_x, htype, (uint64_t)e->K,
                                                    (uint64_t)e->M, (int64_t)e->K), st, fail);
    GP_CHECK_CUBLAS_GOTO(cublasLtMatrixLayoutCreate(&e->lay_y, ytype, (uint64_t)e->N,
                                                    (uint64_t)e->M, (int64_t)e->N), st, fail);
    return GP_OK;
fail:
    gp_gemm_entry_release(e);
    return st;
}

/* The heuristic's constraints for e: the workspace we have and the
 * pointers' alignment. */
gp_status gp_gemm_preference(const gp_gemm_entry *e, cublasLtMatmulPreference_t *out)
{
    gp_status st = GP_OK;
    cublasLtMatmulPreference_t pref = NULL;
    uint64_t ws = GP_GEMM_WORKSPACE_BYTES;
    uint32_t aw = e->align_w, ax = e->align_x, ay = e->align_y;
    GP_CHECK_CUBLAS_GOTO(cublasLtMatmulPreferenceCreate(&pref), st, fail);
    GP_CHECK_CUBLAS_GOTO(cublasLtMatmulPreferenceSetAttribute(
                             pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                         st, fail);
    GP_CHECK_CUBLAS_GOTO(cublasLtMatmulPreferenceSetAttribute(
                             pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aw, sizeof aw),
                         st, fail);
    GP_CHECK_CUBLAS_GOTO(cublasLtMatmulPreferenceSetAttribute(
                             pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ax, sizeof ax),
                         st, fail);
    GP_CHECK_CUBLAS_GOTO(cublasLtMatmulPreferenceSetAttribute(
                             pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ay, sizeof ay),
                         st, fail);
    GP_CHECK_CUBLAS_GOTO(cublasLtMatmulPreferenceSetAttribute(
                             pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ay, sizeof ay),
                         st, fail);
    *out = pref;
    return GP_OK;
fail:
    if (pref)
        (void)cublasLtMatmulPreferenceDestroy(pref);
    return st;
}

/* Asks the heuristic for candidates under the pointers' alignment and runs
 * them in its order until one launches: that call computes y and the algo is
 * kept. A candidate can be refused at launch (e.g. cluster kernels on a
 * partition that cannot host them), hence more than one. Host-side queries
 * only, so legal inside stream capture. */
static gp_status gp_gemm_pick_and_run(gp_gemm_ctx *ctx, gp_gemm_entry *e, const void *x,
                                      const void *w, void *y)
{
    static const float one = 1.0f;
    const float *beta = gp_gemm_beta(e->out_type);
    gp_status st = GP_OK;
    cublasLtMatmulPreference_t pref = NULL;
    uint64_t ws = GP_GEMM_WORKSPACE_BYTES;
    uint32_t aw = e->align_w, ax = e->align_x, ay = e->align_y;
    if ((st = gp_gemm_preference(e, &pref)) != GP_OK)
        goto done;

    cublasLtMatmulHeuristicResult_t res[GP_GEMM_HEURISTICS];
    int n_res = 0;
    memset(res, 0, sizeof res);
    GP_CHECK_CUBLAS_GOTO(cublasLtMatmulAlgoGetHeuristic(ctx->lt, e->desc, e->lay_w, e->lay_x,
                                                        e->lay_y, e->lay_y, pref,
                                                        GP_GEMM_HEURISTICS, res, &n_res),
                         st, done);
    cublasStatus_t last = CUBLAS_STATUS_NOT_SUPPORTED;
    int tried = 0;
    for (int i = 0; i < n_res; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > ws)
            continue;
        tried++;
        last = cublasLtMatmul(ctx->lt, e->desc, &one, w, e->lay_w, x, e->lay_x, beta, y,
                              e->lay_y, y, e->lay_y, &res[i].algo, ctx->workspace,
                              res[i].workspaceSize, ctx->stream);
        if (last == CUBLAS_STATUS_SUCCESS) {
            e->algo = res[i].algo;
            e->algo_ws = res[i].workspaceSize;
            goto done;
        }
        /* a dead context refuses every candidate: say so rather than "no
         * algorithm ran" (no probing call: refusals are normal here) */
        if (gp_cublas_failure_sticky_code(last, 0, NULL)) {
            st = gp_check_cublas_fail(last, "cublasLtMatmul", __FILE__, __LINE__);
            goto done;
        }
        /* a refused launch may leave a runtime error that would be blamed on
         * the next candidate or the next kernel */
        (void)cudaGetLastError();
    }
    /* every candidate failed: now a probe may touch the context */
    if (gp_cublas_failure_sticky_code(last, 1, ctx->stream)) {
        st = gp_check_cublas_fail_on(last, "cublasLtMatmul (every candidate)", __FILE__, __LINE__,
                                     ctx->stream);
        goto done;
    }
    st = last == CUBLAS_STATUS_NOT_SUPPORTED ? GP_ERR_UNSUPPORTED : GP_ERR_CUDA;
    gp_set_error("gp_gemm: no cuBLASLt algorithm ran for %s M=%d N=%d K=%d out=%s "
                 "(sm_count_target %d, alignment w/x/y %u/%u/%u bytes): heuristic returned %d, "
                 "%d tried, last status %s",
                 gp_dtype_flag_name(e->dtype), e->M, e->N, e->K, gp_gemm_out_name(e->out_type),
                 ctx->sm_target, aw, ax, ay, n_res, tried, cublasLtGetStatusName(last));
done:
    if (pref)
        (void)cublasLtMatmulPreferenceDestroy(pref);
    return st;
}

gp_status gp_gemm(gp_gemm_ctx *ctx, gp_dtype dt, int M, int N, int K, const void *x, const void *w,
                  void *y, gp_gemm_out out_type)
{
    static const float one = 1.0f;
    if (!ctx)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm: ctx is NULL");
    GP_TRY(gp_dtype_check_half(dt, "gp_gemm"));
    if (M < 0 || N < 1 || K < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm: M = %d, N = %d, K = %d (need M >= 0, N >= 1, "
                "K >= 1)", M, N, K);
    if (out_type != GP_GEMM_OUT_HALF && out_type != GP_GEMM_OUT_F32
        && out_type != GP_GEMM_OUT_F32_ACC && out_type != GP_GEMM_OUT_SWIGLU)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm: out_type = %d is not a gp_gemm_out",
                (int)out_type);
    if (out_type == GP_GEMM_OUT_SWIGLU && N % 2)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm: N = %d with GP_GEMM_OUT_SWIGLU: needs gate and up halves (N even)", N);
    if (M == 0)
        return GP_OK;
    if (!x || !w || !y)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_gemm: NULL pointer (x %p, w %p, y %p) for M=%d N=%d "
                "K=%d", x, w, y, M, N, K);

    unsigned aw = gp_gemm_align(w), ax = gp_gemm_align(x), ay = gp_gemm_align(y);
    gp_gemm_entry *e = gp_gemm_lookup(ctx, dt, M, N, K, out_type, aw, ax, ay);
    if (e && e->skinny) {
        GP_CUDA_TRY(gp_skinny_launch(&e->plan, dt, M, N, K, x, w, y, (int)out_type,
                                       ctx->stream));
        return GP_OK;
    }
    if (e) {
        cublasStatus_t cs = cublasLtMatmul(ctx->lt, e->desc, &one, w, e->lay_w, x, e->lay_x,
                                           gp_gemm_beta(out_type), y, e->lay_y, y, e->lay_y,
                                           &e->algo, ctx->workspace, e->algo_ws, ctx->stream);
        if (cs != CUBLAS_STATUS_SUCCESS) /* with the stream: its state tells a dead context */
            return gp_check_cublas_fail_on(cs, "cublasLtMatmul", __FILE__, __LINE__, ctx->stream);
        return GP_OK;
    }

    e = gp_gemm_new_entry(ctx, dt, M, N, K, out_type, aw, ax, ay);
    /* Decode-sized M: the skinny kernel, where it measured faster than
     * cuBLASLt (docs/PERFORMANCE.md). Shapes it cannot serve (K % 8,
     * unaligned rows) stay with cuBLASLt. */
    int sms = ctx->sm_target > 0 ? ctx->sm_target : ctx->device_sms;
    if (M <= ctx->skinny_max_m
        && gp_skinny_plan_make(M, N, K, x, w, sms, 0, &e->plan)) {
        cudaError_t ce = gp_skinny_launch(&e->plan, dt, M, N, K, x, w, y, (int)out_type,
                                          ctx->stream);
        if (ce != cudaSuccess) {
            gp_gemm_entry_release(e);
            return gp_cuda_fail(ce, "gp_skinny_launch", __FILE__, __LINE__);
        }
        e->skinny = 1;
        e->used = 1;
        ctx->n_cached++;
        return GP_OK;
    }
    if (out_type == GP_GEMM_OUT_SWIGLU) { /* cuBLASLt has no such epilogue: the caller runs gp_swiglu after */
        gp_gemm_entry_release(e);
        GP_FAIL(GP_ERR_UNSUPPORTED, "gp_gemm: GP_GEMM_OUT_SWIGLU at M = %d, N = %d, K = %d: only the skinny kernel "
                "has it (M <= %d, K %% 8 == 0, 16-byte aligned x and w)", M, N, K, ctx->skinny_max_m);
    }
    GP_TRY(gp_gemm_entry_build(ctx, e));
    gp_status st = gp_gemm_pick_and_run(ctx, e, x, w, y);
    if (st != GP_OK) {
        gp_gemm_entry_release(e);
        return st;
    }
    e->used = 1;
    ctx->n_cached++;
    return GP_OK;
}
