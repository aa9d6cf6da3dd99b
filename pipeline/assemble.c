/* One engine assembly for every program: the feature table asked, the CUDA
 * graph decision made once, the engine created over device weights with its
 * sparsity, CPU-assisted FFN and stored prefixes, and the CUDA executor over
 * it (and over a borrowed green-context pool for pipelined steps). */
#include <stdio.h>
#include <string.h>

#include "gp_engine.h"
#include "gp_pipeline.h"
#include "gp_sparse.h"

/* The CPU-assisted FFN over host weights at the budget's hot capacity. */
static gp_status add_cpu_ffn(gp_engine *e, const gp_assembly_params *p)
{
    int H = 0;
    bool all_hot = false;
    GP_TRY(gp_hotset_capacity(&gp_device_weights_view(gp_engine_weights(e))->cfg, gp_engine_dtype(e),
                              p->features->cpu_ffn_budget, &H, &all_hot));
    gp_cpu_ffn_params cp = gp_cpu_ffn_default_params();
    cp.hot_per_layer = H;
    cp.n_threads = p->cpu_ffn_threads;
    return gp_engine_set_cpu_ffn(e, p->cpu_ffn_weights, p->cpu_ffn_calib, &cp);
}

static gp_status add_prefixes(gp_engine *e, const gp_prefix_params *pp)
{
    gp_status st = gp_engine_prefix_enable(e, pp);
    if (st != GP_OK) { /* the identity's name is the caller's: say which weights it named */
        char why[512];
        snprintf(why, sizeof why, "%s", gp_last_error());
        GP_FAIL(st, "stored prefixes of '%.200s': %s", pp->model ? pp->model : "(null)", why);
    }
    return GP_OK;
}

static gp_status check(const gp_device_weights *dw, const gp_assembly_params *p)
{
    if (!p || !p->features || !p->engine)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_assemble_engine: params, features and engine params are required");
    const gp_feature_set *f = p->features;
    if (!f->cuda)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_assemble_engine: the features ask for the cpu backend; this assembles the "
                "CUDA engine");
    GP_TRY(gp_features_check(f));
    if (!dw)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_assemble_engine: the device weights are NULL");
    if ((f->vram_budget != 0) != gp_device_weights_is_streamed(dw))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_assemble_engine: the features say the weights are %s, the device weights "
                "are %s", f->vram_budget ? "streamed" : "resident",
                gp_device_weights_is_streamed(dw) ? "streamed" : "resident");
    if (f->sparsity != (p->sparse_thresholds != NULL))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_assemble_engine: sparsity %s in the features, thresholds %s",
                f->sparsity ? "on" : "off", p->sparse_thresholds ? "given" : "NULL");
    if ((f->cpu_ffn_budget != 0) != (p->cpu_ffn_weights != NULL))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_assemble_engine: the CPU-assisted FFN is %s in the features, its host "
                "weights %s", f->cpu_ffn_budget ? "on" : "off", p->cpu_ffn_weights ? "given" : "NULL");
    if ((f->kv_store_bytes != 0) != (p->prefix != NULL))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_assemble_engine: stored prefixes are %s in the features, their params %s",
                f->kv_store_bytes ? "on" : "off", p->prefix ? "given" : "NULL");
    if (p->pool && !f->pipelined)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_assemble_engine: a partition pool without pipelined steps in the features");
    return GP_OK;
}

gp_status gp_assemble_engine(gp_device_weights *dw, const gp_assembly_params *p, gp_assembly *out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_assemble_engine: out is NULL");
    memset(out, 0, sizeof *out);
    GP_TRY(check(dw, p));
    const gp_feature_set *f = p->features;
    gp_engine_params ep = *p->engine;
    out->graphs = gp_features_graphs(f, &out->eager_why);
    ep.use_graphs = out->graphs;
    ep.kv_vram_budget = f->kv_vram_budget;
    gp_status st = gp_engine_create(dw, &ep, &out->engine);
    if (st == GP_OK && f->sparsity)
        st = gp_engine_set_sparsity(out->engine, p->sparse_thresholds);
    if (st == GP_OK && f->cpu_ffn_budget)
        st = add_cpu_ffn(out->engine, p);
    if (st == GP_OK && f->kv_store_bytes)
        st = add_prefixes(out->engine, p->prefix);
    if (st == GP_OK)
        st = gp_cuda_exec_create(out->engine, p->pool, out->graphs, &out->exec);
    if (st != GP_OK)
        gp_assembly_close(out);
    return st;
}

void gp_assembly_close(gp_assembly *a)
{
    if (!a)
        return;
    gp_cuda_exec_destroy(a->exec);
    gp_engine_destroy(a->engine);
    memset(a, 0, sizeof *a);
}
