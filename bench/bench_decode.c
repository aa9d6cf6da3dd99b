/* gp_bench_decode: times the sequential CUDA engine on decode workloads
 * (B sequences with C tokens already cached) with device events and host
 * wall time, and reports each against the floor of docs/ARCHITECTURE.md §5
 * and a per-kernel breakdown. --vram-budget streams the weights (the
 * resident row beside each), --sparsity FILE.json runs a calibration's
 * sparse projections (the dense row beside each, then the same with every
 * projection sparse on every step). With --attn it instead
 * times RoPE+KV append and decode attention alone, replayed from CUDA graphs
 * as in the engine (no host launch cost), per split count. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gp_attention.h"
#include "gp_engine.h"
#include "kernels.h" /* GP_GEMM_SKINNY_MAX_M */
#include "gp_kvcache.h"
#include "gp_sparse.h"
#include "gp_stage.h"
#include "gp_streaming.h"
#include "gp_tools.h"
#include "gp_weights.h"

#include "bench_workloads.h"

#define ATTN_CK(call)                                                                         \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "gp_bench_decode: %s: %s\n", #call, cudaGetErrorString(e_));     \
            goto out;                                                                        \
        }                                                                                    \
    } while (0)
#define ATTN_GP(call)                                                                        \
    do {                                                                                     \
        gp_status s_ = (call);                                                               \
        if (s_ != GP_OK) {                                                                   \
            fprintf(stderr, "gp_bench_decode: %s: %s: %s\n", #call, gp_status_str(s_),       \
                    gp_last_error());                                                        \
            goto out;                                                                        \
        }                                                                                    \
    } while (0)
#define ATTN_ROT_MAX 16

/* Median ms per layer of a graph of n_rot launches of what (0: RoPE+KV, 1:
 * attention) replayed reps times. */
static int attn_graph_ms(int what, gp_kv_view *views, int n_rot, int B, int n_heads, int max_len,
                         const uint16_t *qkv, const float *inv_freq, uint16_t *q, uint16_t *o,
                         void *ws, size_t ws_bytes, const gp_decode_attn_params *ap, int reps,
                         cudaStream_t st, float *ms_out)
{
    int rc = 1;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms[64];
    if (reps > 64)
        reps = 64;
    ATTN_CK(cudaEventCreate(&e0));
    ATTN_CK(cudaEventCreate(&e1));
    ATTN_CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int r = 0; r < n_rot; r++) {
        gp_status s = what == 0 ? gp_rope_kv_append(&views[r], B, n_heads, qkv, NULL, inv_freq, q, st)
                                : gp_decode_attn(&views[r], B, n_heads, max_len, q, o, ws, ws_bytes,
                                                 ap, st);
        if (s != GP_OK) {
            fprintf(stderr, "gp_bench_decode: --attn capture: %s\n", gp_last_error());
            cudaStreamEndCapture(st, &g);
            goto out;
        }
    }
    ATTN_CK(cudaStreamEndCapture(st, &g));
    ATTN_CK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; i++)
        ATTN_CK(cudaGraphLaunch(ge, st));
    for (int i = 0; i < reps; i++) {
        ATTN_CK(cudaEventRecord(e0, st));
        ATTN_CK(cudaGraphLaunch(ge, st));
        ATTN_CK(cudaEventRecord(e1, st));
        ATTN_CK(cudaEventSynchronize(e1));
        ATTN_CK(cudaEventElapsedTime(&ms[i], e0, e1));
        ms[i] /= (float)n_rot;
    }
    *ms_out = gp_median_f(ms, reps);
    rc = 0;
out:
    if (ge)
        cudaGraphExecDestroy(ge);
    if (g)
        cudaGraphDestroy(g);
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    return rc;
}

/* The attention stage's kernels at one workload, the engine's way: every
 * sequence holds C tokens plus this step's (len C+1), blocks laid out per
 * sequence as the engine allocates them, layers rotated beyond the L2. */
static int attn_bench(const gp_config *c, gp_dtype dt, int B, int C, int reps, cudaStream_t st)
{
    const int bs = 16, len = C + 1, cols = (len + bs - 1) / bs;
    const int hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    const uint64_t layer_bytes = 2ull * B * cols * bs * nkv * hd * sizeof(uint16_t);
    int n_rot = (int)((512ull << 20) / layer_bytes) + 1;
    if (n_rot < 2)
        n_rot = 2;
    if (n_rot > ATTN_ROT_MAX)
        n_rot = ATTN_ROT_MAX;
    size_t free_b = 0, total_b = 0;
    int rc = 1;
    gp_kv_device *kv = NULL;
    int32_t *tables = NULL, *lens = NULL;
    uint16_t *q = NULL, *o = NULL, *qkv = NULL;
    float *inv_freq = NULL;
    void *ws = NULL;
    ATTN_CK(cudaMemGetInfo(&free_b, &total_b));
    while (n_rot > 2 && (uint64_t)n_rot * layer_bytes + (2ull << 30) > free_b)
        n_rot--;
    gp_kv_layout lay = { .n_layers = n_rot, .n_kv_heads = nkv, .head_dim = hd, .block_size = bs,
                         .n_blocks = B * cols };
    ATTN_GP(gp_kv_device_create(&lay, dt, B, cols, &kv));
    for (int l = 0; l < n_rot; l++) {
        uint64_t n = gp_kv_layer_elems(&lay);
        ATTN_GP(gp_synth_fill_device(gp_kv_device_k(kv, l), dt, n, 7, GP_T_WQKV, l, 1.0f, st));
        ATTN_GP(gp_synth_fill_device(gp_kv_device_v(kv, l), dt, n, 7, GP_T_WO, l, 1.0f, st));
    }
    tables = malloc((size_t)B * cols * sizeof *tables);
    lens = malloc((size_t)B * sizeof *lens);
    if (!tables || !lens)
        goto out;
    for (int b = 0; b < B; b++) {
        lens[b] = len;
        for (int j = 0; j < cols; j++)
            tables[(size_t)b * cols + j] = b * cols + j;
    }
    ATTN_GP(gp_kv_device_upload(kv, B, tables, cols, lens, st));
    const size_t qn = (size_t)B * nh * hd, qkvn = (size_t)B * (nh + 2 * nkv) * hd;
    ATTN_CK(cudaMalloc((void **)&q, qn * sizeof(uint16_t)));
    ATTN_CK(cudaMalloc((void **)&o, qn * sizeof(uint16_t)));
    ATTN_CK(cudaMalloc((void **)&qkv, qkvn * sizeof(uint16_t)));
    ATTN_CK(cudaMalloc((void **)&inv_freq, (size_t)hd / 2 * sizeof(float)));
    ATTN_GP(gp_synth_fill_device(q, dt, qn, 9, GP_T_WQKV, 0, 1.0f, st));
    ATTN_GP(gp_synth_fill_device(qkv, dt, qkvn, 9, GP_T_WQKV, 1, 1.0f, st));
    {
        float h_inv[512];
        gp_rope_inv_freq(c, h_inv);
        ATTN_CK(cudaMemcpy(inv_freq, h_inv, (size_t)hd / 2 * sizeof(float), cudaMemcpyHostToDevice));
    }
    gp_kv_view views[ATTN_ROT_MAX];
    for (int l = 0; l < n_rot; l++)
        ATTN_GP(gp_kv_device_view(kv, l, &views[l]));
    int auto_splits = 1;
    gp_decode_attn_params ap = gp_decode_attn_default_params();
    ATTN_GP(gp_decode_attn_splits(B, nh, nkv, hd, len, &ap, &auto_splits));
    static const int cand[] = { 1, 2, 4, 8, 12, 16, 24, 32 };
    size_t ws_bytes = gp_decode_attn_workspace_bytes(B, nh, hd, 32);
    ATTN_CK(cudaMalloc(&ws, ws_bytes));
    float ms_rope = 0;
    if (attn_graph_ms(0, views, n_rot, B, nh, len, qkv, inv_freq, q, o, ws, ws_bytes, &ap, reps, st,
                      &ms_rope))
        goto out;
    const double kv_bytes = (double)B * len * nkv * hd * 2.0 * sizeof(uint16_t);
    printf("| %d | %d | rope+kv | - | %.2f | - |\n", B, C, ms_rope * 1e3);
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        if (cand[i] > 1 && (int64_t)cand[i] * B * nkv > 4 * 132 * 4)
            continue; /* beyond a few waves: no candidate */
        ap.force_splits = cand[i];
        float ms = 0;
        if (attn_graph_ms(1, views, n_rot, B, nh, len, qkv, inv_freq, q, o, ws, ws_bytes, &ap, reps,
                          st, &ms))
            goto out;
        printf("| %d | %d | attention | %d%s | %.2f | %.0f |\n", B, C, cand[i],
               cand[i] == auto_splits ? " (auto)" : "", ms * 1e3, kv_bytes / (ms * 1e-3) / 1e9);
        fflush(stdout);
    }
    rc = 0;
out:
    gp_kv_device_destroy(kv);
    free(tables);
    free(lens);
    cudaFree(q);
    cudaFree(o);
    cudaFree(qkv);
    cudaFree(inv_freq);
    cudaFree(ws);
    return rc;
}

/* The host-to-device link the streamed rows are held against: pinned
 * copies on the H100 machine (docs/ARCHITECTURE.md §6, gp_bench_stream). */
#define GP_BENCH_LINK_GBPS 55.0

typedef struct bench_row {
    int ok;
    double wall_ms;
    double density[GP_SPARSE_PROJ_COUNT]; /* sparse rows: the union's share of active inputs, mean over layers */
    double sparse_share[GP_SPARSE_PROJ_COUNT]; /* sparse rows: the share of steps that ran the sparse kernel */
    gp_streamer_stats ss; /* streamed weights: warm-up and timed steps */
    char breakdown[512];
} bench_row;

/* The mean over layers of each projection's active share over `steps`
 * steps (the union over the batch rows), from the engine's counters. */
static gp_status sparse_density(gp_engine *e, const gp_config *cfg, int steps, double *density, double *share)
{
    long *a = calloc((size_t)cfg->n_layers * GP_SPARSE_PROJ_COUNT, sizeof(long));
    if (!a)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory");
    long ns[GP_SPARSE_PROJ_COUNT], nd[GP_SPARSE_PROJ_COUNT];
    gp_status st = gp_engine_sparse_steps(e, ns, nd);
    for (int p = 0; st == GP_OK && p < GP_SPARSE_PROJ_COUNT; p++)
        share[p] = ns[p] + nd[p] > 0 ? (double)ns[p] / (double)(ns[p] + nd[p]) : 0.0;
    if (st == GP_OK)
        st = gp_engine_sparsity_stats(e, a, 1);
    if (st == GP_OK)
        gp_sparse_density(cfg, a, steps, NULL, density, NULL);
    free(a);
    return st;
}

/* One workload on dw: prints its table row, fills r; returns 1 on failure
 * (the row says why). */
/* The context as a real prefill of C random ids per sequence, so the
 * attention output (the O projection's input, which sparse rows threshold)
 * has the magnitudes of the model's own K/V at that length; the random K/V
 * of gp_engine_fill_context would average to far smaller values. */
static gp_status prefill_context(gp_engine *e, const gp_config *cfg, int B, int C)
{
    if (C == 0)
        return GP_OK;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)B * (size_t)C);
    gp_prefill_seq *seqs = malloc(sizeof *seqs * (size_t)B);
    if (!ids || !seqs) {
        free(ids);
        free(seqs);
        GP_FAIL(GP_ERR_NO_MEMORY, "prefill context: out of host memory");
    }
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < (size_t)B * C; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)cfg->vocab);
    }
    for (int b = 0; b < B; b++)
        seqs[b] = (gp_prefill_seq){b, C, ids + (size_t)b * C};
    gp_status st = gp_engine_prefill_batch(e, B, seqs, NULL, NULL, NULL);
    free(ids);
    free(seqs);
    return st;
}

/* --skinny-max-m, --ab-split-swiglu: the next row's gemm_skinny_max_m (-1: the engine's default) and
   split_swiglu */
static int g_skinny_max_m = -1;
static bool g_split_swiglu;
static int g_gemm_tune; /* --gemm-tune: every row's engine params gemm_tune */

static int time_row(gp_device_weights *dw, const gp_config *cfg, const workload *w, int warmup, int repeat,
                    int graphs, const float *thresholds, bool sparse_always, int real_context, const char *label,
                    bench_row *r)
{
    memset(r, 0, sizeof *r);
    const bool streamed = gp_device_weights_is_streamed(dw);
    gp_engine_params p = gp_engine_default_params();
    p.sparse_always = sparse_always;
    p.max_batch = w->B;
    p.max_context = w->C + warmup + repeat + 2;
    p.use_graphs = graphs;
    if (g_skinny_max_m >= 0)
        p.gemm_skinny_max_m = g_skinny_max_m;
    p.split_swiglu = g_split_swiglu;
    p.gemm_tune = g_gemm_tune;
    gp_engine *e = NULL;
    float *ms = calloc((size_t)repeat, sizeof(float));
    gp_step_breakdown bd;
    gp_status st = ms ? gp_engine_create(dw, &p, &e) : GP_ERR_NO_MEMORY;
    if (st == GP_OK)
        st = real_context ? prefill_context(e, cfg, w->B, w->C) : gp_engine_fill_context(e, w->B, w->C, 42);
    if (st == GP_OK && thresholds)
        st = gp_engine_set_sparsity(e, thresholds);
    if (st == GP_OK && streamed) /* from here: the warm-up and timed steps only */
        st = gp_device_weights_stream_stats(dw, &r->ss, 1);
    if (st == GP_OK)
        st = gp_engine_time_steps(e, w->B, warmup, repeat, ms, &r->wall_ms);
    if (st == GP_OK && streamed)
        st = gp_device_weights_stream_stats(dw, &r->ss, 1);
    if (st == GP_OK && thresholds && w->B <= GP_SPARSE_MAX_B)
        st = sparse_density(e, cfg, warmup + repeat, r->density, r->sparse_share);
    if (st == GP_OK)
        st = gp_engine_breakdown(e, w->B, &bd);
    if (st != GP_OK) {
        printf("| %d | %d | %s | error: %s: %s |\n", w->B, w->C, label, gp_status_str(st), gp_last_error());
        snprintf(r->breakdown, sizeof r->breakdown, "B=%d C=%d: failed", w->B, w->C);
    } else {
        r->ok = 1;
        float med = gp_median_f(ms, repeat);
        /* the timed steps run at contexts C+warmup .. C+warmup+repeat-1 */
        gp_step_cost cost;
        gp_step_floor(cfg, w->B, w->C + warmup + repeat / 2, 1, &cost);
        printf("| %d | %d | %s | %.3f | %.3f | %.3f | %.3f | %.0f | %.2f | %.2f | %.2f | %.1f%% |\n", w->B, w->C,
               label, med, ms[0], ms[repeat - 1], r->wall_ms, w->B / (r->wall_ms / 1e3), cost.bytes / 1e9,
               cost.flops / 1e12, cost.floor_ms, 100.0 * cost.floor_ms / med);
        snprintf(r->breakdown, sizeof r->breakdown,
                 "| %d:%d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |", w->B, w->C,
                 bd.embed, bd.attn_norm, bd.qkv_gemm, bd.rope_kv, bd.attention, bd.o_gemm, bd.ffn_norm,
                 bd.gate_up_gemm, bd.swiglu, bd.down_gemm, bd.head);
    }
    free(ms);
    gp_engine_destroy(e);
    return r->ok ? 0 : 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: gp_bench_decode [--model PRESET] [--workloads B:C,...] [--repeat N] [--warmup N] [--eager] "
            "[--attn] [--dtype bf16|fp16] [--layers N] [--sparsity FILE.json] [--vram-budget SIZE [--prefetch D] "
            "[--lru] [--no-resident]] [--skinny-max-m LIST] [--ab-split-swiglu] [--gemm-tune N]\n  SIZE: " GP_SIZE_UNITS "\n"
            "  --skinny-max-m LIST  before each workload's row, one row per value (0..%d, commas): the same\n"
            "                       engine with GEMMs of at most that many rows on the skinny kernel and the\n"
            "                       others on cuBLASLt (gemm_skinny_max_m), for the A/B of that routing\n"
            "  --ab-split-swiglu    before each workload's row, the same engine with the SwiGLU as a kernel of\n"
            "                       its own (split_swiglu), for the A/B of its fusion into the gate/up GEMM\n"
            "  --gemm-tune N        every row's cuBLASLt GEMMs the fastest of the first N candidates (0..%d),\n"
            "                       timed before each step shape is captured (gemm_tune; default 0: the\n"
            "                       heuristic's pick; the skinny kernel's shapes are not tuned)\n",
            GP_GEMM_SKINNY_MAX_M, GP_GEMM_TUNE_MAX_CANDIDATES);
}

int main(int argc, char **argv)
{
    const char *model = GP_DEFAULT_PRESET, *wl = "8:1024,64:2048,256:1024,1024:384";
    int repeat = 20, warmup = 3, graphs = 1, attn = 0, prefetch = 2, keep = 1, resident_row = 1, layers = 0;
    long smm[8];           /* --skinny-max-m */
    int n_smm = 0;
    int ab_split_swiglu = 0;
    const char *spf = NULL; /* --sparsity FILE.json */
    gp_sparsity sp_thr;
    memset(&sp_thr, 0, sizeof sp_thr);
    uint64_t budget = 0; /* --vram-budget: 0 resident weights, else streamed within this many device bytes */
    gp_dtype dtype = GP_DTYPE_BF16; /* --dtype: the engine dtype of the synthetic weights */
    static const struct option opts[] = {{"model", required_argument, NULL, 'm'},
                                         {"workloads", required_argument, NULL, 'w'},
                                         {"repeat", required_argument, NULL, 'r'},
                                         {"warmup", required_argument, NULL, 'u'},
                                         {"eager", no_argument, NULL, 'e'},
                                         {"attn", no_argument, NULL, 'a'},
                                         {"dtype", required_argument, NULL, 'd'},
                                         {"vram-budget", required_argument, NULL, 'V'},
                                         {"prefetch", required_argument, NULL, 'p'},
                                         {"lru", no_argument, NULL, 'l'},
                                         {"layers", required_argument, NULL, 'L'},
                                         {"sparsity", required_argument, NULL, 'S'},
                                         {"no-resident", no_argument, NULL, 'n'},
                                         {"skinny-max-m", required_argument, NULL, 'K'},
                                         {"ab-split-swiglu", no_argument, NULL, 'G'},
                                         {"gemm-tune", required_argument, NULL, 'T'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'w': wl = optarg; break;
        case 'r': repeat = atoi(optarg); break;
        case 'u': warmup = atoi(optarg); break;
        case 'e': graphs = 0; break;
        case 'a': attn = 1; break;
        case 'l': keep = 0; break;
        case 'S': spf = optarg; break;
        case 'L': {
            long v = 0;
            if (gp_parse_long(optarg, 1, 1 << 16, "--layers", &v) != GP_OK) {
                fprintf(stderr, "gp_bench_decode: %s\n", gp_last_error());
                return 2;
            }
            layers = (int)v;
            break;
        }
        case 'n': resident_row = 0; break;
        case 'G': ab_split_swiglu = 1; break;
        case 'K':
            if (gp_parse_long_list(optarg, 0, GP_GEMM_SKINNY_MAX_M, "--skinny-max-m", smm, 8, &n_smm) != GP_OK) {
                fprintf(stderr, "gp_bench_decode: %s\n", gp_last_error());
                return 2;
            }
            break;
        case 'T': {
            long v = 0;
            if (gp_parse_long(optarg, 0, GP_GEMM_TUNE_MAX_CANDIDATES, "--gemm-tune", &v) != GP_OK) {
                fprintf(stderr, "gp_bench_decode: %s\n", gp_last_error());
                return 2;
            }
            g_gemm_tune = (int)v;
            break;
        }
        case 'V':
            if (gp_parse_size(optarg, "--vram-budget", &budget) != GP_OK) {
                fprintf(stderr, "gp_bench_decode: %s\n", gp_last_error());
                return 2;
            }
            break;
        case 'p': {
            long v = 0;
            if (gp_parse_long(optarg, 0, 64, "--prefetch", &v) != GP_OK) {
                fprintf(stderr, "gp_bench_decode: %s\n", gp_last_error());
                return 2;
            }
            prefetch = (int)v;
            break;
        }
        case 'd':
            if (gp_dtype_parse(optarg, 0, &dtype) != GP_OK) {
                fprintf(stderr, "gp_bench_decode: --dtype: %s\n", gp_last_error());
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (repeat < 1 || repeat > 10000 || warmup < 0 || warmup > 1000) {
        fprintf(stderr, "gp_bench_decode: --repeat %d (allowed 1..10000), --warmup %d (0..1000)\n", repeat, warmup);
        return 2;
    }
    if (budget && attn) {
        fprintf(stderr, "gp_bench_decode: --vram-budget streams the engine's weights; --attn times attention "
                "alone (no weights): give one or the other\n");
        return 2;
    }
    if (!budget && (!keep || !resident_row || prefetch != 2)) {
        fprintf(stderr, "gp_bench_decode: --prefetch, --lru and --no-resident apply to streamed weights: give "
                "--vram-budget SIZE too\n");
        return 2;
    }
    /* streamed weights move between steps: CUDA graphs (which bake addresses) are off, and the header says so */
    const int graphs_asked = graphs;
    if (budget)
        graphs = 0;
    workload w[32];
    int n_w = gp_bench_parse_workloads("gp_bench_decode", wl, w, 32);
    if (n_w < 1)
        return 2;
    if (gp_cuda_available() != GP_OK) {
        fprintf(stderr, "gp_bench_decode: %s\n", gp_last_error());
        return 1;
    }
    gp_config cfg;
    if (gp_config_preset(model, &cfg) != GP_OK) {
        fprintf(stderr, "gp_bench_decode: --model: %s\n", gp_last_error());
        return 2;
    }
    if (layers) {
        /* a preset's layer shape with fewer layers: a model too big for this host measured per layer */
        if (layers > cfg.n_layers) {
            fprintf(stderr, "gp_bench_decode: --layers %d: allowed 1..%d (%s has %d)\n", layers, cfg.n_layers,
                    cfg.name, cfg.n_layers);
            return 2;
        }
        cfg.n_layers = layers;
    }
    if (spf && (budget || attn)) {
        fprintf(stderr, "gp_bench_decode: --sparsity runs the resident engine's decode steps; it does not combine "
                "with --vram-budget or --attn\n");
        return 2;
    }
    /* the preset's synthetic weights, seed 0: a calibration of other weights is refused */
    gp_model_source id_src = {.synthetic = true, .seed = 0, .cfg = cfg};
    if (spf && gp_sparsity_load_for(spf, &id_src, &sp_thr) != GP_OK) {
        fprintf(stderr, "gp_bench_decode: --sparsity %s: %s\n", spf, gp_last_error());
        gp_sparsity_free(&sp_thr);
        return 2;
    }
    if (budget) { /* before anything is loaded: a budget that cannot work is the user's to fix */
        gp_weights_stream_params sp = gp_weights_stream_default_params();
        sp.budget_bytes = budget;
        sp.prefetch_depth = prefetch;
        sp.min_window = gp_weights_stream_window(&cfg, 0);
        if (gp_weights_stream_check(&cfg, &sp, NULL) != GP_OK) {
            fprintf(stderr, "gp_bench_decode: --vram-budget: %s\n", gp_last_error());
            return 2;
        }
    }
    if (attn) {
        cudaStream_t st;
        if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
            return 1;
        printf("# gp_bench_decode --attn: %s shape, %s, graphs of rotated layers, median of %d\n\n"
               "| B | C | kernel | splits | us/layer | K+V GB/s |\n|---:|---:|---|---:|---:|---:|\n",
               cfg.name, gp_dtype_flag_name(dtype), repeat);
        int bad = 0;
        for (int i = 0; i < n_w; i++)
            bad |= attn_bench(&cfg, dtype, w[i].B, w[i].C, repeat, st);
        cudaStreamDestroy(st);
        return bad;
    }
    struct cudaDeviceProp prop;
    int drv = 0;
    cudaGetDeviceProperties(&prop, 0);
    cudaDriverGetVersion(&drv);
    char mode[256];
    if (budget)
        snprintf(mode, sizeof mode, "eager (streamed weights%s), weights in pinned host memory, VRAM budget %.2f GiB "
                 "(%" PRIu64 " bytes), prefetch %d, %s", graphs_asked ? "; CUDA graphs off" : "",
                 budget / 1073741824.0, budget, prefetch, keep ? "groups kept resident beyond the streaming reserve"
                 : "every layer group streamed, LRU (--lru)");
    else
        snprintf(mode, sizeof mode, "%s", graphs ? "CUDA graphs" : "eager");
    printf("# gp_bench_decode: %s%s (synthetic %s weights, %.2f GB), %s, %d SMs, driver %d.%d, %s, %d warm-up + %d "
           "timed steps per workload, GEMM tuning %d\n", cfg.name, layers ? " shape, --layers" : "",
           gp_dtype_flag_name(dtype), gp_config_param_count(&cfg) * 2e-9, prop.name, prop.multiProcessorCount,
           drv / 1000, (drv % 1000) / 10, mode, warmup, repeat, g_gemm_tune);
    if (layers)
        printf("# only the first %d layers: every per-layer figure is the full model's; steps, GB and floors are "
               "of %d layers\n", layers, layers);
    gp_device_weights *dw = NULL;
    gp_status st;
    if (budget) {
        /* the preset's synthetic weights, seed 0 as the resident path's, generated into the pinned copy */
        gp_model_source src;
        memset(&src, 0, sizeof src);
        src.synthetic = true;
        src.cfg = cfg;
        gp_weights_stream_params sp = gp_weights_stream_default_params();
        sp.budget_bytes = budget;
        sp.prefetch_depth = prefetch;
        sp.min_window = gp_weights_stream_window(&cfg, 0);
        sp.keep_resident = keep;
        st = gp_device_weights_streamed_load(&src, dtype, &sp, &dw);
    } else {
        st = gp_device_weights_synthetic(&cfg, dtype, 0, &dw);
    }
    if (st != GP_OK) {
        fprintf(stderr, "gp_bench_decode: weights: %s\n", gp_last_error());
        return 1;
    }
    /* the resident engine's row beside each streamed one, when both fit */
    gp_device_weights *dw_res = NULL;
    if (budget && resident_row) {
        size_t free_b = 0, total_b = 0;
        uint64_t res_bytes = gp_config_param_count(&cfg) * 2u;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && res_bytes + (4ull << 30) < free_b) {
            if ((st = gp_device_weights_synthetic(&cfg, dtype, 0, &dw_res)) != GP_OK) {
                fprintf(stderr, "gp_bench_decode: resident weights: %s\n", gp_last_error());
                gp_device_weights_destroy(dw);
                return 1;
            }
        } else {
            printf("\nNo resident row: %.2f GB of weights and 4 GiB of headroom do not fit in the %.2f GB the "
                   "device has free\n", res_bytes / 1e9, free_b / 1e9);
        }
    }
    printf("\n| B | C | weights | ms/step median | min | max | wall ms/step | tokens/s (wall) | GB/step | "
           "TFLOP/step | floor ms | share of floor |\n"
           "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    char breakdowns[32][512], streamed[32][400];
    char label[96] = "resident";
    if (budget)
        snprintf(label, sizeof label, "streamed, budget %.2f GiB", budget / 1073741824.0);
    if (spf)
        snprintf(label, sizeof label, "sparse, S = %.2f", sp_thr.target);
    char label_always[128];
    snprintf(label_always, sizeof label_always, "%s, every step", label);
    char sparse_lines[32][2][256];
    memset(sparse_lines, 0, sizeof sparse_lines);
    int failed = 0;
    for (int i = 0; i < n_w; i++) {
        bench_row r;
        if (dw_res && time_row(dw_res, &cfg, &w[i], warmup, repeat, graphs_asked, NULL, false, 0, "resident", &r) != 0)
            failed = 1;
        if (spf && time_row(dw, &cfg, &w[i], warmup, repeat, graphs, NULL, false, 1, "dense", &r) != 0)
            failed = 1;
        if (ab_split_swiglu) {
            char apart[160];
            snprintf(apart, sizeof apart, "%s, SwiGLU apart", label);
            g_split_swiglu = true;
            failed |= time_row(dw, &cfg, &w[i], warmup, repeat, graphs, spf ? sp_thr.thresholds : NULL, false,
                               spf != NULL, apart, &r);
            g_split_swiglu = false;
        }
        for (int k = 0; k < n_smm; k++) {
            char routed[160];
            snprintf(routed, sizeof routed, "%s, skinny M <= %ld", label, smm[k]);
            g_skinny_max_m = (int)smm[k];
            failed |= time_row(dw, &cfg, &w[i], warmup, repeat, graphs, spf ? sp_thr.thresholds : NULL, false,
                               spf != NULL, routed, &r);
            g_skinny_max_m = -1;
        }
        /* with a calibration: the per-step choice, then every projection sparse on every step */
        for (int a = 0; a < (spf ? 2 : 1); a++) {
            failed |= time_row(dw, &cfg, &w[i], warmup, repeat, graphs, spf ? sp_thr.thresholds : NULL, a == 1,
                               spf != NULL, a ? label_always : label, &r);
            if (spf && r.ok)
                snprintf(sparse_lines[i][a], sizeof sparse_lines[i][a],
                         "| %d | %d | %s | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f | %.2f | %.2f |", w[i].B, w[i].C,
                         a ? "every step" : "chosen", r.density[0], r.density[1], r.density[2], r.density[3],
                         r.sparse_share[0], r.sparse_share[1], r.sparse_share[2], r.sparse_share[3]);
            if (a == 0) /* the breakdown of the default engine's row */
                snprintf(breakdowns[i], sizeof breakdowns[i], "%s", r.breakdown);
        }
        streamed[i][0] = '\0';
        if (r.ok && budget) {
            const gp_streamer_stats *ss = &r.ss;
            const double n = warmup + repeat, gb = ss->bytes_streamed / n / 1e9;
            const double link_ms = gb / GP_BENCH_LINK_GBPS * 1e3;
            snprintf(streamed[i], sizeof streamed[i],
                     "| %d | %d | %.3f | %.1f | %.2f | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f "
                     "| %.2f |", w[i].B, w[i].C, gb, ss->gbps, link_ms, r.wall_ms, link_ms > 0 ? r.wall_ms / link_ms : 0,
                     ss->waited_s[GP_STREAM_ATTN] / n * 1e3, ss->waited_s[GP_STREAM_FFN] / n * 1e3, ss->hits / n,
                     ss->misses / n, ss->prefetches / n, ss->evictions / n, ss->prefetch_skipped / n,
                     ss->peak_device_bytes / 1e9);
        }
        fflush(stdout);
    }
    printf("\nPer-kernel breakdown (ms per step summed over layers, one eager step with an event after each "
           "kernel):\n\n| B:C | embed | attn norm | QKV GEMM | RoPE+KV | attention | O GEMM | FFN norm | gate/up "
           "GEMM | SwiGLU | down GEMM | head |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n_w; i++)
        printf("%s\n", breakdowns[i]);
    if (budget) {
        gp_streamer_stats ks;
        if (gp_device_weights_stream_stats(dw, &ks, 0) == GP_OK)
            printf("\nWeight streaming: %d layer groups (%.2f GB) kept resident%s, the head pinned, the rest "
                   "streamed through the budget\n", ks.kept_groups, ks.kept_bytes / 1e9,
                   keep ? "" : " (--lru: none)");
        printf("\nWeight streaming per step (mean over the %d warm-up + %d timed steps; copy GB/s over the copy "
               "engine's busy time; link floor: GB streamed / %.0f GB/s; waits: compute stalled on copies):\n\n"
               "| B | C | GB streamed/step | copy GB/s | link floor ms | wall ms/step | wall / link floor | "
               "attn wait ms | ffn wait ms | hits | misses | prefetches | evictions | prefetch skipped | "
               "peak device GB |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
               warmup, repeat, GP_BENCH_LINK_GBPS);
        for (int i = 0; i < n_w; i++)
            printf("%s\n", streamed[i][0] ? streamed[i] : "| (failed) |");
    }
    if (spf) {
        printf("\nActivation sparsity (%s: calibrated for S = %.2f on %ld tokens, %s; the dense and sparse rows' "
               "contexts are prefills of C random ids): the share of each "
               "projection's inputs read in a step (the union over the batch rows; all of them in a step that "
               "chose the dense GEMM), mean over layers and the %d warm-up + %d timed steps, and the share of "
               "steps that ran each projection's sparse kernel (chosen: per step, from the union the last sparse "
               "step measured against the crossover timed at that batch size); batches above %d run dense:\n\n"
               "| B | C | kernels | qkv | o | gate_up | down | qkv sparse | o sparse | gate_up sparse | down sparse |\n"
               "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", spf, sp_thr.target, sp_thr.tokens,
               sp_thr.source, warmup, repeat, GP_SPARSE_MAX_B);
        for (int i = 0; i < n_w; i++)
            for (int a = 0; a < 2; a++)
                printf("%s\n", sparse_lines[i][a][0] ? sparse_lines[i][a] : "| (dense or failed) |");
        gp_sparsity_free(&sp_thr);
    }
    gp_device_weights_destroy(dw_res);
    gp_device_weights_destroy(dw);
    return failed;
}
