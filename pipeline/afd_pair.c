/* The FFN side of attention and FFN on two GPUs, opened from a model
 * source beside an attention engine that holds the whole model: the FFN
 * groups alone on the second GPU (a preset's generated in place, a
 * checkpoint's read and uploaded), an engine over them with rows for the
 * attention engine's batches and no KV cache to speak of, and the AFD
 * executor pairing the two. */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "gp_engine.h"
#include "gp_pipeline.h"
#include "gp_weights.h"

struct gp_afd_pair {
    int dev_f;
    gp_device_weights *dw;
    gp_engine *ef;
    gp_afd_exec *x;
};

static gp_status load_ffn(const gp_model_source *src, gp_dtype dt, gp_device_weights **out)
{
    const gp_weights_part ffn = {.groups = 1u << GP_GROUP_FFN};
    if (src->synthetic)
        return gp_device_weights_synthetic_part(&src->cfg, dt, src->seed, &ffn, out);
    gp_host_weights w;
    GP_TRY(gp_model_source_load_host(src, &w));
    gp_status st = gp_device_weights_upload_part(&w, dt, &ffn, out);
    gp_host_weights_free(&w);
    return st;
}

gp_status gp_afd_pair_open(const gp_model_source *src, gp_engine *ea, int dev_a, int dev_f, bool use_graphs,
                           gp_afd_pair **out)
{
    if (!src || !ea || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_afd_pair_open: src, ea and out must not be NULL");
    *out = NULL;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= (dev_a > dev_f ? dev_a : dev_f)) {
        (void)cudaGetLastError();
        GP_FAIL(GP_ERR_NO_DEVICE, "attention and FFN on two GPUs (devices %d and %d) need %d GPUs; this host has %d",
                dev_a, dev_f, (dev_a > dev_f ? dev_a : dev_f) + 1, n);
    }
    gp_afd_pair *p = calloc(1, sizeof *p);
    if (!p)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_afd_pair_open: out of memory");
    p->dev_f = dev_f;
    gp_engine_params ep = gp_engine_default_params();
    ep.max_batch = gp_engine_max_batch(ea);
    ep.max_context = 16; /* FFN stages read no KV cache: the least the engine takes */
    ep.use_graphs = false; /* its own steps never run: the executor captures its stages */
    gp_status st = cudaSetDevice(dev_f) == cudaSuccess ? GP_OK : GP_ERR_NO_DEVICE;
    if (st != GP_OK)
        gp_set_error("gp_afd_pair_open: CUDA device %d: %s", dev_f, cudaGetErrorString(cudaGetLastError()));
    if (st == GP_OK && (st = load_ffn(src, gp_engine_dtype(ea), &p->dw)) == GP_OK)
        st = gp_engine_create(p->dw, &ep, &p->ef);
    if (st == GP_OK)
        st = gp_afd_exec_create(ea, dev_a, p->ef, dev_f, use_graphs, &p->x); /* leaves dev_a current */
    if (st != GP_OK) {
        gp_afd_pair_close(p);
        (void)cudaSetDevice(dev_a);
        return st;
    }
    *out = p;
    return GP_OK;
}

gp_exec gp_afd_pair_exec(gp_afd_pair *p)
{
    return gp_afd_exec_get(p->x);
}

double gp_afd_pair_ffn_gb(const gp_afd_pair *p)
{
    return p && p->dw ? (double)gp_device_weights_view(p->dw)->arena_bytes / 1e9 : 0;
}

void gp_afd_pair_close(gp_afd_pair *p)
{
    if (!p)
        return;
    int dev = 0;
    (void)cudaGetDevice(&dev);
    gp_afd_exec_destroy(p->x);
    (void)cudaSetDevice(p->dev_f);
    gp_engine_destroy(p->ef);
    gp_device_weights_destroy(p->dw);
    (void)cudaSetDevice(dev);
    free(p);
}
