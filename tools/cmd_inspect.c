/* greenpipe inspect DIR: validate a checkpoint the way the loader will, and
 * print its config and tensor table; a preset's name gets its config. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "gp_model.h"
#include "gp_tools.h"

static void print_config(const gp_config *c)
{
    printf("config: %s (model_type %s)\n", c->name, gp_config_arch(c)->model_type);
    printf("  layers %d, hidden %d, heads %d, kv heads %d, head dim %d, ffn %d, vocab %d\n",
           c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn, c->vocab);
    printf("  rms eps %g, rope theta %g, rope scaling ", c->norm_eps, c->rope_theta);
    if (c->rope_scaling.type == GP_ROPE_LLAMA3)
        printf("llama3 (factor %g, low %g, high %g, original max %d)\n", c->rope_scaling.factor,
               c->rope_scaling.low_freq_factor, c->rope_scaling.high_freq_factor,
               c->rope_scaling.original_max_pos);
    else
        printf("none\n");
    printf("  embeddings %s, max context %d, parameters %" PRIu64 "\n",
           c->tied_embeddings ? "tied" : "untied", c->max_context, gp_config_param_count(c));
}

int gp_cmd_inspect(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
            printf("usage: greenpipe inspect DIR  (a checkpoint directory; a preset's name prints its config)\n");
            return 0;
        }
        fprintf(stderr, "usage: greenpipe inspect DIR  (DIR holds config.json and "
                        "model.safetensors or model-*.safetensors with model.safetensors.index.json)\n");
        return 2;
    }
    /* "inspect tiny" once said "tiny/config.json: not found": a preset has
     * no files to validate, so say what it is and show its config */
    struct stat sb;
    gp_config preset;
    if (stat(argv[1], &sb) != 0 && gp_config_preset(argv[1], &preset) == GP_OK) {
        printf("'%s' is a preset (synthetic weights made at load, no checkpoint files to validate), not a "
               "checkpoint directory; presets: %s\n", argv[1], gp_config_preset_names());
        print_config(&preset);
        return 0;
    }
    gp_clear_error();
    gp_checkpoint *ck = NULL;
    gp_status st = gp_checkpoint_open(argv[1], &ck);
    if (st != GP_OK) {
        fprintf(stderr, "greenpipe inspect: %s: %s\n", gp_status_str(st), gp_last_error());
        return 1;
    }
    print_config(gp_checkpoint_config(ck));
    size_t n = gp_checkpoint_tensor_count(ck);
    uint64_t total = 0;
    printf("\n%-56s %-5s %-18s %12s  %s\n", "tensor", "dtype", "shape", "bytes", "file");
    for (size_t i = 0; i < n; i++) {
        const char *file = NULL;
        const gp_st_tensor *t = gp_checkpoint_tensor(ck, i, &file);
        char shape[64] = "[";
        for (int d = 0; d < t->ndim; d++) {
            size_t l = strlen(shape);
            snprintf(shape + l, sizeof shape - l, "%s%" PRId64, d ? ", " : "", t->shape[d]);
        }
        strncat(shape, "]", sizeof shape - strlen(shape) - 1);
        const char *base = strrchr(file, '/');
        printf("%-56s %-5s %-18s %12" PRIu64 "  %s\n", t->name, gp_dtype_name(t->dtype), shape,
               t->end - t->begin, base ? base + 1 : file);
        total += t->end - t->begin;
    }
    printf("%zu tensors, %" PRIu64 " bytes\n", n, total);
    st = gp_checkpoint_check(ck);
    gp_checkpoint_close(ck);
    if (st != GP_OK) {
        fprintf(stderr, "greenpipe inspect: not loadable: %s: %s\n", gp_status_str(st), gp_last_error());
        return 1;
    }
    printf("loadable: yes\n");
    return 0;
}
