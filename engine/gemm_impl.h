/* Inside the engine's GEMM context (gemm.c, gemm_tune.c): the per-shape plan
 * cache and the helpers that build and fill it. Not a public header. */
#ifndef GP_ENGINE_GEMM_IMPL_H
#define GP_ENGINE_GEMM_IMPL_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "gemm_skinny.cuh"
#include "kernels.h"

#define GP_GEMM_HEURISTICS 8 /* candidates asked of the heuristic per new shape */

/* One cached shape: everything cublasLtMatmul needs except the pointers. */
typedef struct gp_gemm_entry {
    int used;
    gp_dtype dtype;                     /* of x, w (and y for GP_GEMM_OUT_HALF) */
    int M, N, K;
    gp_gemm_out out_type;
    unsigned align_w, align_x, align_y; /* pointer alignment classes (bytes, <= 256) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lay_w, lay_x, lay_y; /* A = W, B = x, C = D = y (see gp_gemm) */
    cublasLtMatmulAlgo_t algo;
    size_t algo_ws;                             /* workspace bytes the algo uses */
    int skinny;                                 /* 1: served by the skinny kernel (plan) */
    int tuned;                                  /* 1: algo is gp_gemm_tune's timed choice */
    gp_skinny_plan plan;
} gp_gemm_entry;

struct gp_gemm_ctx {
    cublasLtHandle_t lt;
    cudaStream_t stream;
    int sm_target;       /* 0: whole device */
    int device_sms;      /* multiProcessorCount of the device at create */
    void *workspace;     /* [GP_GEMM_WORKSPACE_BYTES] device bytes */
    int skinny_max_m;    /* largest M routed to the skinny kernel (0: none) */
    gp_gemm_entry cache[GP_GEMM_CACHE_SLOTS];
    int n_cached;
    int victim;          /* next slot to evict when full (round robin) */
};

unsigned gp_gemm_align(const void *p);
const float *gp_gemm_beta(gp_gemm_out t);
const char *gp_gemm_out_name(gp_gemm_out t);
void gp_gemm_entry_release(gp_gemm_entry *e);
gp_gemm_entry *gp_gemm_lookup(gp_gemm_ctx *ctx, gp_dtype dt, int M, int N, int K, gp_gemm_out ot,
                              unsigned aw, unsigned ax, unsigned ay);
gp_gemm_entry *gp_gemm_new_entry(gp_gemm_ctx *ctx, gp_dtype dt, int M, int N, int K, gp_gemm_out ot,
                                 unsigned aw, unsigned ax, unsigned ay);
gp_status gp_gemm_entry_build(gp_gemm_ctx *ctx, gp_gemm_entry *e);
gp_status gp_gemm_preference(const gp_gemm_entry *e, cublasLtMatmulPreference_t *out);

#endif
