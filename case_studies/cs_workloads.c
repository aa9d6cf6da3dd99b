/* The small/large workload presets and their scaling to GPUs smaller than the
 * H100 they were chosen on (docs/ARCHITECTURE.md §5-6). */
#include "cs_impl.h"

#include <stdarg.h>
#include <string.h>

#include "gp_model.h"

/* The H100 the presets are defined on: 132 SMs, 80 GB (79.2 GiB usable). A
 * device counts as smaller below 78 GiB, so an H100 reporting a little less
 * than its total (or an H200) keeps the presets as they are. */
#define H100_SMS 132
#define H100_GIB_MIN 78.0
/* Share of device memory the weights and KV cache may take; the rest is
 * left to activations, cuBLAS workspaces, graphs and fragmentation. */
#define MEM_USABLE 0.90
/* Tokens beyond C each sequence needs room for (warm-up and timed steps). */
#define KV_HEADROOM_TOKENS 64
/* B stays a multiple of this so every M in 1..4 splits it evenly. */
#define B_QUANTUM 8

static const struct { const char *name; int B, C; } PRESETS[] = {
    /* small: a latency-bound batch; attention reads a long context */
    { "small", 8, 1024 },
    /* large: GEMMs compute-bound per micro-batch (B/M >= 300 tokens at M 2)
     * while the KV bytes take about as long as the GEMMs: the point where
     * overlap can pay on the H100 (docs/ARCHITECTURE.md §5) */
    { "large", 1024, 384 },
};

int cs_workload_preset(const char *name, int *B, int *C)
{
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (name && strcmp(name, PRESETS[i].name) == 0) {
            *B = PRESETS[i].B;
            *C = PRESETS[i].C;
            return 0;
        }
    return -1;
}

/* The model whose weights share the memory: the named preset or checkpoint,
 * else the default preset (scaling must not fail on an unreadable model; the
 * runner reports that). */
static void model_config(const char *model, gp_config *cfg)
{
    if (model && *model && gp_config_preset(model, cfg) == GP_OK)
        return;
    if (model && *model && gp_config_load_dir(model, cfg) == GP_OK)
        return;
    gp_config_preset(GP_DEFAULT_PRESET, cfg);
    gp_clear_error();
}

static void appendf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strnlen(buf, len);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

void gp_cs_scale_workloads(gp_cs_options *o, int sm_count, double device_gib, char *note, size_t note_len)
{
    if (note && note_len)
        note[0] = '\0';
    if (!o || sm_count < 1 || !(device_gib > 0.0))
        return;
    bool fewer_sms = sm_count < H100_SMS, less_mem = device_gib < H100_GIB_MIN;
    if (!fewer_sms && !less_mem)
        return;

    gp_config cfg;
    model_config(o->model, &cfg);
    double weights_gib = (double)gp_config_param_count(&cfg) * sizeof(gp_bf16) / (1024.0 * 1024.0 * 1024.0);
    /* K and V, bf16, every layer */
    double kv_bytes_per_token = 2.0 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * sizeof(gp_bf16);
    double kv_gib = MEM_USABLE * device_gib - weights_gib;
    double fit_tokens = kv_gib > 0 ? kv_gib * 1024.0 * 1024.0 * 1024.0 / kv_bytes_per_token : 0.0;

    char changes[384] = "";
    int n_user = 0;
    bool no_room = false;
    for (int i = 0; i < o->n_workloads; i++) {
        gp_cs_workload *w = &o->workloads[i];
        int B0, C0;
        if (cs_workload_preset(w->label, &B0, &C0) != 0) {
            n_user++; /* B:C from the command line: run exactly as given */
            continue;
        }
        int B = w->B, C = w->C;
        const char *why = NULL;
        /* Fewer SMs: shrink the batch with the compute so the step keeps its
         * balance of GEMM time against KV time; the small preset's B = 8 is
         * already minimal and stays (its character is latency). */
        if (fewer_sms && B > B_QUANTUM) {
            int b = (int)((double)B * sm_count / H100_SMS) / B_QUANTUM * B_QUANTUM;
            if (b < B_QUANTUM)
                b = B_QUANTUM;
            if (b < B) {
                B = b;
                why = "fewer SMs";
            }
        }
        /* Less memory: the KV cache must fit beside the weights. C carries the
         * attention-to-GEMM ratio, so B shrinks first; C only once B is minimal.
         * Where not even B_QUANTUM sequences of one token fit, nothing is
         * changed: the run fails and its error rows say why. */
        double need = (double)B * (C + KV_HEADROOM_TOKENS);
        if (need > fit_tokens && fit_tokens >= B_QUANTUM * (1.0 + KV_HEADROOM_TOKENS)) {
            int b = (int)(fit_tokens / (C + KV_HEADROOM_TOKENS)) / B_QUANTUM * B_QUANTUM;
            if (b >= B_QUANTUM) {
                B = b < B ? b : B;
            } else {
                B = B < B_QUANTUM ? B : B_QUANTUM;
                C = (int)(fit_tokens / B) - KV_HEADROOM_TOKENS;
            }
            why = "memory for the KV cache";
        } else if (need > fit_tokens) {
            no_room = true;
        }
        if (B != w->B || C != w->C)
            appendf(changes, sizeof changes, "%s%s %d:%d -> %d:%d (%s)", changes[0] ? "; " : "", w->label, w->B,
                    w->C, B, C, why);
        w->B = B;
        w->C = C;
    }
    if (!note || !note_len)
        return;
    if (no_room)
        appendf(changes, sizeof changes, "%sthe %s weights (%.1f GiB) leave no room for a KV cache, presets "
                "left as defined", changes[0] ? "; " : "", cfg.name, weights_gib);
    if (!changes[0])
        return; /* the presets fit as defined */
    snprintf(note, note_len,
             "workload presets scaled from the H100's (%d SMs, 79 GiB) to this GPU's %d SMs and %.1f GiB "
             "(%s weights %.1f GiB): %s",
             H100_SMS, sm_count, device_gib, cfg.name, weights_gib, changes);
    if (n_user)
        appendf(note, note_len, "; B:C workloads from the command line run as given");
}
