/* Where a model's weights come from: a checkpoint directory or a preset name
 * with synthetic weights, chosen from one command-line spec. */
#include "gp_model.h"

#include <string.h>
#include <sys/stat.h>

gp_status gp_model_source_resolve(const char *spec, uint64_t seed, gp_model_source *out)
{
    if (!spec || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_model_source_resolve: spec and out must not be NULL");
    memset(out, 0, sizeof *out);
    struct stat sb;
    /* A directory wins over a preset of the same name: it is the more
     * specific thing the user can have meant. */
    if (stat(spec, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        size_t n = strlen(spec);
        if (n >= sizeof out->path)
            GP_FAIL(GP_ERR_INVALID_ARG, "'%.64s...': checkpoint path longer than %zu bytes", spec,
                    sizeof out->path - 1);
        gp_checkpoint *ck;
        GP_TRY(gp_checkpoint_open(spec, &ck));
        out->cfg = *gp_checkpoint_config(ck);
        gp_checkpoint_close(ck);
        memcpy(out->path, spec, n + 1);
        out->synthetic = false;
        return GP_OK;
    }
    if (gp_config_preset(spec, &out->cfg) == GP_OK) {
        out->synthetic = true;
        out->seed = seed;
        return GP_OK;
    }
    GP_FAIL(GP_ERR_NOT_FOUND, "'%s' is neither a checkpoint directory nor a preset (presets: %s)",
            spec, gp_config_preset_names());
}

gp_status gp_model_source_load_host(const gp_model_source *src, gp_host_weights *w)
{
    return gp_model_source_load_host_ex(src, w, NULL);
}

/* Presets are synthesized in bf16: the values the device generator writes,
 * so the CPU reference and the engine run the same weights. */
#define GP_PRESET_HOST_DTYPE GP_DTYPE_BF16

gp_status gp_model_source_host_dtype(const gp_model_source *src, gp_dtype *out)
{
    if (!src || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_model_source_host_dtype: src and out must not be NULL");
    if (src->synthetic) {
        *out = GP_PRESET_HOST_DTYPE;
        return GP_OK;
    }
    gp_checkpoint *ck;
    GP_TRY(gp_checkpoint_open(src->path, &ck));
    *out = gp_checkpoint_dtype(ck);
    gp_checkpoint_close(ck);
    return GP_OK;
}

gp_status gp_model_source_load_host_ex(const gp_model_source *src, gp_host_weights *w,
                                       const gp_progress_cb *progress)
{
    if (!src || !w)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_model_source_load_host: src and w must not be NULL");
    if (src->synthetic) {
        GP_TRY(gp_host_weights_alloc(&src->cfg, GP_PRESET_HOST_DTYPE, w));
        gp_status s = gp_synth_fill_host_ex(w, src->seed, progress);
        if (s != GP_OK)
            gp_host_weights_free(w);
        return s;
    }
    gp_checkpoint *ck;
    GP_TRY(gp_checkpoint_open(src->path, &ck));
    gp_status s = gp_checkpoint_load_host_ex(ck, w, progress);
    gp_checkpoint_close(ck);
    return s;
}
