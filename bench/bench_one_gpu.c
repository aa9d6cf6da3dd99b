/* What the multi-GPU benchmarks share: the one-GPU reference's weights and
 * the rows of their --csv. */
#include <math.h>

#include <cuda_runtime_api.h>

#include "bench_one_gpu.h"

gp_status gp_bench_whole_weights(const gp_config *cfg, gp_device_weights **out)
{
    *out = NULL;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        GP_FAIL(GP_ERR_CUDA, "the one-GPU weights: %s", cudaGetErrorString(cudaGetLastError()));
    gp_step_cost wc;
    gp_step_floor(cfg, 1, 0, 1, &wc);
    if (wc.bytes + (4ull << 30) >= (double)free_b)
        return GP_OK;
    return gp_device_weights_synthetic(cfg, GP_DTYPE_BF16, 0, out);
}

static const char *COLUMNS = "model,device,phase,placement,gpus,B,C,M,ok,error,ms_median,tokens_per_s_per_gpu,"
                             "floor_ms,floor_bound,busy_gpu0,busy_gpu1,cross_mb\n";

gp_place_row gp_place_row_at(const char *placement, int gpus, int B, int C, int M)
{
    return (gp_place_row){.placement = placement, .gpus = gpus, .B = B, .C = C, .M = M, .busy0 = -1, .busy1 = -1,
                          .cross_mb = -1};
}

gp_place_row gp_place_one_gpu_row(const gp_config *cfg, bool prefill, int B, int C, double ms, bool fits)
{
    gp_place_row r = gp_place_row_at("one GPU", 1, B, C, 1);
    r.prefill = prefill, r.ms = ms, r.ok = ms > 0;
    r.error = fits ? gp_last_error() : "the whole model does not fit one GPU";
    if (!prefill)
        gp_place_floor(cfg, 1, &r);
    return r;
}

FILE *gp_place_csv_open(const char *prog, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "%s: --csv '%s': cannot open for writing\n", prog, path);
        return NULL;
    }
    fputs(COLUMNS, f);
    fflush(f);
    return f;
}

/* A figure, empty when absent or not finite. */
static void real(FILE *f, bool present, double v, const char *fmt)
{
    fputc(',', f);
    if (present && isfinite(v))
        fprintf(f, fmt, v);
}

void gp_place_csv_row(FILE *f, const gp_config *model, const gp_place_row *r)
{
    if (!f)
        return;
    struct cudaDeviceProp prop;
    const char *dev = cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.name : "unknown GPU";
    /* names hold no comma or quote: presets, device names, the fixed placements; the error is quoted */
    fprintf(f, "%s,%s,%s,%s,%d,%d,%d,%d,%d,\"", model->name, dev, r->prefill ? "prefill" : "decode", r->placement,
            r->gpus, r->B, r->C, r->M, r->ok ? 1 : 0);
    for (const char *s = r->ok || !r->error ? "" : r->error; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
    const double toks = r->prefill ? (double)r->B * r->C : r->B;
    real(f, r->ok, r->ms, "%.4f");
    real(f, r->ok && r->ms > 0, toks / (r->ms * 1e-3) / r->gpus, "%.1f");
    real(f, r->floor_ms > 0, r->floor_ms, "%.4f");
    fprintf(f, ",%s", r->floor_ms > 0 ? (r->floor_hbm ? "HBM" : "tensor cores") : "");
    real(f, r->ok && r->busy0 >= 0, r->busy0, "%.1f");
    real(f, r->ok && r->busy1 >= 0, r->busy1, "%.1f");
    real(f, r->ok && r->cross_mb >= 0, r->cross_mb, "%.3f");
    fputc('\n', f);
    fflush(f); /* a sweep that fails later keeps the rows it finished */
}

void gp_place_floor(const gp_config *cfg, int M, gp_place_row *r)
{
    gp_step_cost sc;
    gp_step_floor(cfg, r->B, r->C, M, &sc);
    r->floor_ms = sc.floor_ms;
    r->floor_hbm = sc.bytes / GP_HBM_BYTES_PER_S >= sc.flops / GP_GEMM_FLOPS_PER_S;
}
