/* gp_lane_tune_gemms: the opt-in timed choice of cuBLASLt algorithms for a
 * step shape's layer GEMMs, on the GEMM context (and so the SM partition)
 * that will run them. Why: on a partition the heuristic's first pick was up
 * to 1.9x slower than the fastest candidate (docs/PERFORMANCE.md). */
#include <stddef.h>

#include "cuda_util.cuh"
#include "engine_impl.h"

#define TUNE_REPS 5

typedef struct tune_shape {
    int N, K;
    gp_gemm_out out;
    size_t w_off; /* offsetof the weight in gp_layer_weights: read from what the acquire grants, as a
                     streamed group's address is known only then */
    gp_group_kind group;
} tune_shape;

static gp_status tune_all(gp_engine *e, gp_gemm_ctx *ctx, int rows, const tune_shape *s, int n,
                          const void *x, void *y, cudaStream_t stream)
{
    for (int i = 0; i < n; i++) {
        gp_weight_group *g = gp_device_weights_group(e->dw, s[i].group, 0);
        if (!g)
            return GP_ERR_INVALID_ARG;
        gp_group_tensors t;
        GP_TRY(gp_weight_group_acquire(g, stream, &t)); /* the weights may still be uploading */
        const void *w = *(void *const *)((const char *)&t.layer + s[i].w_off);
        gp_status st = gp_gemm_tune(ctx, e->dtype, rows, s[i].N, s[i].K, x, w, y, s[i].out,
                                    e->p.gemm_tune, TUNE_REPS, NULL);
        gp_status rs = gp_weight_group_release_on(g, stream);
        if (st == GP_OK)
            st = rs;
        GP_TRY(st);
    }
    return GP_OK;
}

gp_status gp_lane_tune_gemms(gp_lane *lane, int rows)
{
    if (!lane)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_lane_tune_gemms: lane is NULL");
    gp_engine *e = lane->e;
    gp_gemm_ctx *ctx = lane->gemm;
    if (e->p.gemm_tune == 0 || rows < 1)
        return GP_OK;
    const gp_config *c = &e->cfg;
    const int qkv = gp_config_qkv_rows(c), qd = c->n_heads * c->head_dim;
    const tune_shape s[] = {
        { qkv, c->hidden, GP_GEMM_OUT_HALF, offsetof(gp_layer_weights, wqkv), GP_GROUP_ATTN },
        { c->hidden, qd, GP_GEMM_OUT_F32_ACC, offsetof(gp_layer_weights, wo), GP_GROUP_ATTN },
        { 2 * c->ffn, c->hidden, GP_GEMM_OUT_HALF, offsetof(gp_layer_weights, w_gate_up), GP_GROUP_FFN },
        { c->hidden, c->ffn, GP_GEMM_OUT_F32_ACC, offsetof(gp_layer_weights, w_down), GP_GROUP_FFN },
    };
    const int n = (int)(sizeof s / sizeof s[0]);
    size_t max_k = 0, max_n = 0;
    for (int i = 0; i < n; i++) {
        max_k = (size_t)s[i].K > max_k ? (size_t)s[i].K : max_k;
        max_n = (size_t)s[i].N > max_n ? (size_t)s[i].N : max_n;
    }
    /* the lane's scratch, not its activations: O and down accumulate into
     * their output at every timed call. Grown once to the largest rows seen;
     * a shape already tuned on ctx costs a cache lookup only. */
    cudaStream_t stream = (cudaStream_t)gp_gemm_stream(ctx);
    if ((size_t)rows > lane->tune_rows) {
        gp_status st;
        gp_device_free(lane->tune_x);
        gp_device_free(lane->tune_y);
        lane->tune_x = NULL, lane->tune_y = NULL, lane->tune_rows = 0;
        const size_t xn = (size_t)rows * max_k;
        if ((st = gp_device_alloc((void **)&lane->tune_x, xn * sizeof(uint16_t), "GEMM tuning input"))
                != GP_OK
            || (st = gp_device_alloc((void **)&lane->tune_y, (size_t)rows * max_n * sizeof(float),
                                     "GEMM tuning output")) != GP_OK)
            return st;
        /* random inputs: tensor-core power, and so clocks, depend on the data;
         * filled before any other context's stream reads them */
        GP_TRY(gp_synth_fill_device(lane->tune_x, e->dtype, xn, 0x7475u, GP_T_EMBED, 0, 1.0f, stream));
        GP_CUDA_TRY(cudaStreamSynchronize(stream));
        lane->tune_rows = (size_t)rows;
    }
    return tune_all(e, ctx, rows, s, n, lane->tune_x, lane->tune_y, stream);
}
