/* gp_bench_prefill: times the engine's batched, chunked prefill (B prompts of
 * T tokens, synthetic weights) with device events, reports model TFLOP/s
 * counted as the PyTorch prefill peer counts them (model_flops) against
 * 800 TFLOP/s (docs/ARCHITECTURE.md §6), and where the time goes. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "gp_stage.h"
#include "gp_weights.h"
#include "kernels.h" /* GP_GEMM_TUNE_MAX_CANDIDATES */

#define MAX_ROWS 32
#define GEMM_PEAK 800e12 /* FLOP/s: the §6 GEMM rate every report measures against */

#include "bench_workloads.h"

typedef struct row { int B, T; } row;

static void usage(FILE *f)
{
    fprintf(f, "usage: gp_bench_prefill [--preset NAME] [--workloads B:T[,B:T...]] [--chunk N[,N...]]\n"
               "                        [--repeats R] [--breakdown] [--gemm-tune N] [--seed S] [--dtype bf16|fp16]\n"
               "                        [--prefill-attn K[,K...]]\n"
               "  --preset NAME      model shape, synthetic weights (default llama3-8b; %s)\n"
               "  --workloads LIST   prompts x tokens per prompt (default 1:512,1:2048,1:8192,8:2048)\n"
               "  --chunk LIST       prefill chunk sizes to time (default: the engine's, %d)\n"
               "  --repeats R        timed prefills per row, after one warm-up (default 5; the median is reported)\n"
               "  --breakdown        one more prefill per row with events between kernels: ms per kernel class\n"
               "  --gemm-tune N      time N of cuBLASLt's candidates per chunk-shape GEMM and keep the fastest\n"
               "                     (engine params gemm_tune; default 0: the heuristic's pick)\n"
               "  --seed S           weight seed (default 1)\n"
               "  --dtype D          engine dtype of the synthetic weights: bf16 (default) or fp16\n"
               "  --prefill-attn L   prefill attention kernels to time, each row once per kernel (%s;\n"
               "                     engine params prefill_attn_kernel; default auto)\n"
               "A T above the preset's max context raises the synthetic model's max context to T (the shape is\n"
               "what is timed; the peer runs such contexts too).\n",
            gp_config_preset_names(), GP_ENGINE_DEFAULT_PREFILL_CHUNK, GP_PREFILL_ATTN_KERNEL_NAMES);
}

static int parse_list(const char *s, int *v, int max, const char *what)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > GP_ENGINE_MAX_PREFILL_CHUNK || n == max) {
            fprintf(stderr, "gp_bench_prefill: %s '%s': expected N[,N...] with 1 <= N <= %d (at most %d)\n", what, s,
                    GP_ENGINE_MAX_PREFILL_CHUNK, max);
            return -1;
        }
        v[n++] = (int)x;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            fprintf(stderr, "gp_bench_prefill: %s '%s': unexpected '%c'\n", what, s, *end);
            return -1;
        }
    }
    return n;
}

static int parse_rows(const char *s, row *r, int max)
{
    workload w[MAX_ROWS];
    int n = gp_bench_parse_pairs("gp_bench_prefill", s, "B:T", 4096, 1, 1 << 20, w, max < MAX_ROWS ? max : MAX_ROWS);
    for (int i = 0; i < n; i++)
        r[i] = (row){w[i].B, w[i].C};
    return n;
}

/* FLOPs as the PyTorch peer counts them: the layers' matrices for every
 * token, the LM head for each prompt's last token, causal attention as half
 * of 4 T^2 per head and layer. */
static double attention_flops(const gp_config *c, int B, int T)
{
    return 2.0 * B * c->n_layers * c->n_heads * (double)c->head_dim * T * T;
}

static double model_flops(const gp_config *c, int B, int T)
{
    double layer = (double)gp_config_qkv_rows(c) * c->hidden + (double)c->hidden * c->n_heads * c->head_dim +
                   3.0 * c->ffn * c->hidden;
    return 2.0 * B * T * layer * c->n_layers + 2.0 * B * c->hidden * c->vocab + attention_flops(c, B, T);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define CK(call)                                                                                        \
    do {                                                                                               \
        gp_status s_ = (call);                                                                         \
        if (s_ != GP_OK) {                                                                             \
            fprintf(stderr, "gp_bench_prefill: %s: %s: %s\n", #call, gp_status_str(s_), gp_last_error()); \
            goto out;                                                                                  \
        }                                                                                              \
    } while (0)

/* One row at one chunk size: warm-up, repeats, optional breakdown. */
static int run_row(gp_device_weights *dw, const gp_config *c, row r, int chunk, gp_prefill_attn_kernel attn,
                   int repeats, int breakdown, int gemm_tune)
{
    int rc = 1;
    gp_engine *e = NULL;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)r.B * (size_t)r.T);
    gp_prefill_seq *ps = malloc(sizeof *ps * (size_t)r.B);
    float *ms = malloc(sizeof(float) * (size_t)repeats);
    if (!tok || !ps || !ms) {
        fprintf(stderr, "gp_bench_prefill: out of host memory for %d x %d tokens\n", r.B, r.T);
        goto out;
    }
    for (size_t i = 0; i < (size_t)r.B * r.T; i++)
        tok[i] = (int32_t)((i * 2654435761u + 17) % (size_t)c->vocab);
    for (int s = 0; s < r.B; s++)
        ps[s] = (gp_prefill_seq){.seq = s, .n = r.T, .tokens = tok + (size_t)s * r.T};
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = r.B;
    p.max_context = r.T;
    p.prefill_chunk = chunk;
    p.gemm_tune = gemm_tune;
    p.prefill_attn_kernel = attn;
    CK(gp_engine_create(dw, &p, &e));
    for (int i = -1; i < repeats; i++) { /* i = -1: warm-up (cuBLASLt plans, first-touch) */
        for (int s = 0; s < r.B; s++)
            gp_engine_reset_seq(e, s);
        CK(gp_engine_prefill_batch(e, r.B, ps, NULL, NULL, NULL));
        if (i >= 0)
            ms[i] = gp_engine_last_prefill_ms(e);
    }
    qsort(ms, (size_t)repeats, sizeof *ms, cmp_float);
    float med = repeats % 2 ? ms[repeats / 2] : 0.5f * (ms[repeats / 2 - 1] + ms[repeats / 2]);
    double tf = model_flops(c, r.B, r.T) / (med * 1e-3);
    printf("| %d | %d | %d | %s | %.2f | %.2f | %.2f | %.0f | %.0f | %.1f%% |\n", r.B, r.T, chunk,
           gp_prefill_attn_kernel_name(attn), med, ms[0],
           ms[repeats - 1], r.B * (double)r.T / (med * 1e-3), tf / 1e12, 100.0 * tf / GEMM_PEAK);
    fflush(stdout);
    if (breakdown) {
        for (int s = 0; s < r.B; s++)
            gp_engine_reset_seq(e, s);
        gp_prefill_breakdown bd;
        CK(gp_engine_prefill_breakdown(e, r.B, ps, &bd));
        float gemm = bd.qkv_gemm + bd.o_gemm + bd.gate_up_gemm + bd.down_gemm;
        printf("|   | breakdown | ms | | total %.2f: GEMMs %.2f (QKV %.2f, O %.2f, gate/up %.2f, down %.2f), attention "
               "%.2f (%.0f TFLOP/s), RoPE+KV %.2f, norms %.2f, SwiGLU %.2f, embed+uploads %.2f, head %.2f | | | | | |\n",
               bd.total, gemm, bd.qkv_gemm, bd.o_gemm, bd.gate_up_gemm, bd.down_gemm, bd.attention,
               attention_flops(c, r.B, r.T) / (bd.attention * 1e-3) / 1e12, bd.rope_kv, bd.norms, bd.swiglu,
               bd.embed, bd.head);
        fflush(stdout);
    }
    rc = 0;
out:
    gp_engine_destroy(e);
    free(tok);
    free(ps);
    free(ms);
    return rc;
}

int main(int argc, char **argv)
{
    const char *preset = "llama3-8b", *wl = "1:512,1:2048,1:8192,8:2048";
    int chunks[16] = {GP_ENGINE_DEFAULT_PREFILL_CHUNK}, n_chunks = 1, repeats = 5, breakdown = 0, gemm_tune = 0;
    unsigned long seed = 1;
    gp_dtype dtype = GP_DTYPE_BF16;
    gp_prefill_attn_kernel attns[8] = {GP_PREFILL_ATTN_AUTO};
    int n_attns = 1;
    static const struct option opts[] = {{"preset", required_argument, 0, 'p'}, {"workloads", required_argument, 0, 'w'},
                                         {"chunk", required_argument, 0, 'c'},  {"repeats", required_argument, 0, 'r'},
                                         {"breakdown", no_argument, 0, 'b'},    {"seed", required_argument, 0, 's'},
                                         {"gemm-tune", required_argument, 0, 'g'},
                                         {"dtype", required_argument, 0, 'd'},
                                         {"prefill-attn", required_argument, 0, 'a'},
                                         {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end;
        switch (o) {
        case 'p': preset = optarg; break;
        case 'w': wl = optarg; break;
        case 'c':
            if ((n_chunks = parse_list(optarg, chunks, 16, "--chunk")) < 1)
                return 2;
            break;
        case 'r':
            repeats = (int)strtol(optarg, &end, 10);
            if (*end || repeats < 1 || repeats > 1000) {
                fprintf(stderr, "gp_bench_prefill: --repeats '%s': allowed 1..1000\n", optarg);
                return 2;
            }
            break;
        case 'b': breakdown = 1; break;
        case 'g':
            gemm_tune = (int)strtol(optarg, &end, 10);
            if (*end || !*optarg || gemm_tune < 0 || gemm_tune > GP_GEMM_TUNE_MAX_CANDIDATES) {
                fprintf(stderr, "gp_bench_prefill: --gemm-tune '%s': allowed 0..%d\n", optarg, GP_GEMM_TUNE_MAX_CANDIDATES);
                return 2;
            }
            break;
        case 's':
            seed = strtoul(optarg, &end, 10);
            if (*end || !*optarg) {
                fprintf(stderr, "gp_bench_prefill: --seed '%s': expected a non-negative integer\n", optarg);
                return 2;
            }
            break;
        case 'd':
            if (gp_dtype_parse(optarg, 0, &dtype) != GP_OK) {
                fprintf(stderr, "gp_bench_prefill: --dtype: %s\n", gp_last_error());
                return 2;
            }
            break;
        case 'a':
            if (gp_prefill_attn_kernel_parse_list(optarg, attns, 8, &n_attns) != GP_OK) {
                fprintf(stderr, "gp_bench_prefill: --prefill-attn: %s\n", gp_last_error());
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gp_bench_prefill: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    row rows[MAX_ROWS];
    int n_rows = parse_rows(wl, rows, MAX_ROWS);
    if (n_rows < 1)
        return 2;
    gp_config cfg;
    if (gp_config_preset(preset, &cfg) != GP_OK) {
        fprintf(stderr, "gp_bench_prefill: --preset '%s': %s\n", preset, gp_last_error());
        return 2;
    }
    for (int i = 0; i < n_rows; i++)
        if (rows[i].T > cfg.max_context)
            cfg.max_context = rows[i].T;
    gp_device_weights *dw = NULL;
    gp_status st = gp_device_weights_synthetic(&cfg, dtype, seed, &dw);
    if (st != GP_OK) {
        fprintf(stderr, "gp_bench_prefill: synthetic %s weights: %s: %s\n", preset, gp_status_str(st), gp_last_error());
        return 1;
    }
    printf("gp_bench_prefill: %s shape, synthetic %s weights (seed %lu), median of %d prefills (device events), "
           "model FLOPs as torch_prefill_peer.py counts them, GEMM tuning %d\n\n", preset, gp_dtype_flag_name(dtype),
           seed, repeats, gemm_tune);
    printf("| B | T | chunk | attention kernel | median ms | min | max | tokens/s | TFLOP/s | of 800 |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    int rc = 0;
    for (int i = 0; i < n_rows; i++)
        for (int j = 0; j < n_chunks; j++)
            for (int k = 0; k < n_attns; k++)
                if (run_row(dw, &cfg, rows[i], chunks[j], attns[k], repeats, breakdown, gemm_tune))
                    rc = 1; /* later rows still run: every finished row is printed */
    gp_device_weights_destroy(dw);
    return rc;
}
