/* Helpers of the whole-engine tests that need the engine library. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "engine_test_util.h"

void gt_load_model(const char *spec, gp_host_weights *hw, gp_device_weights **dw)
{
    memset(hw, 0, sizeof *hw);
    gp_model_source src;
    if (gp_model_source_resolve(spec, 0, &src) != GP_OK)
        fail_msg("gt_load_model %s: %s", spec, gp_last_error());
    gp_status st = GP_OK;
    if (src.synthetic) {
        st = gp_host_weights_alloc(&src.cfg, GP_DTYPE_BF16, hw);
        if (st == GP_OK)
            st = gp_synth_fill_host(hw, 3);
    } else {
        st = gp_model_source_load_host(&src, hw);
    }
    if (st == GP_OK)
        st = gp_device_weights_upload(hw, GP_DTYPE_BF16, dw);
    if (st != GP_OK)
        fail_msg("gt_load_model %s: %s", spec, gp_last_error());
}

gp_engine *gt_engine(gp_device_weights *dw, int max_batch, int max_context, bool graphs)
{
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = max_batch;
    p.max_context = max_context;
    p.use_graphs = graphs;
    p.sparse_always = true;
    gp_engine *e = NULL;
    if (gp_engine_create(dw, &p, &e) != GP_OK)
        fail_msg("gt_engine: %s", gp_last_error());
    return e;
}

void gt_calibrate(const gp_host_weights *hw, double target, gp_sparsity *sp)
{
    const int V = hw->cfg.vocab;
    int32_t ids[4 * 24];
    int lens[4] = {24, 24, 24, 24};
    for (int i = 0; i < 4 * 24; i++)
        ids[i] = (int32_t)((i * 7919 + 3) % V);
    gp_sparsity_calib_params cp = gp_sparsity_calib_default_params();
    cp.target = target;
    cp.n_seqs = 4;
    cp.lens = lens;
    cp.ids = ids;
    if (gp_sparsity_calibrate(hw, &cp, sp) != GP_OK)
        fail_msg("gt_calibrate: %s", gp_last_error());
}
