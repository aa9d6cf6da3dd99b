/* gp_bench_cpu_ffn: decode steps with the CPU-assisted FFN
 * beside the engines it stands between: per batch B at context C, the dense
 * engine, the all-GPU sparse engine (graphs, and eager as the CPU-assisted
 * steps run), and the sparse engine with the cold neurons on the CPU at the
 * hot capacity --cpu-ffn-budget gives. Synthetic weights (the preset's
 * shape, seed 0) on the host and the device; thresholds from --sparsity
 * FILE.json or a calibration on the CPU reference over random ids. Reports
 * ms/step (device events; the CPU share is inside them, as the GPU waits for
 * it), wall ms/step and tokens/s, the CPU's ms and bytes per step and the
 * hot hit rate. The device keeps the dense FFN weights too: the hot cache
 * is extra. With --vram-budget SIZE two rows more per batch, beyond VRAM at
 * that budget: the weights streamed (dense, eager), and the
 * CPU-assisted FFN on streamed weights whose FFN groups are on demand, its
 * hot cache the --cpu-ffn-budget part of SIZE and the weights the rest
 * (the attention projections' transposed copies beside it); with the bytes
 * each step copied. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gp_engine.h"
#include "gp_sparse.h"
#include "gp_streaming.h"
#include "gp_tools.h"
#include "gp_weights.h"

typedef enum { ROW_DENSE, ROW_SPARSE, ROW_SPARSE_EAGER, ROW_CPU_FFN, ROW_STREAMED, ROW_STREAMED_CPU_FFN } row_kind;
static const char *const row_name[] = {"dense", "sparse (GPU)", "sparse (GPU), eager", "sparse + cpu-ffn",
                                       "streamed weights (dense, eager)", "streamed weights + cpu-ffn"};

typedef struct bench_opts {
    int C, warmup, repeat, H, threads, reload_window;
    uint64_t vram_budget, cpu_ffn_budget;
    const gp_host_weights *hw;
    const gp_sparsity *sp;
} bench_opts;

static bool is_cpu_ffn(row_kind k)
{
    return k == ROW_CPU_FFN || k == ROW_STREAMED_CPU_FFN;
}

static int time_row_on(gp_device_weights *dw, const bench_opts *o, int B, row_kind k);

/* The streamed rows over their own weights: the --vram-budget SIZE, less
 * the hot cache for the CPU-assisted FFN. */
static int time_row(gp_device_weights *dw, const bench_opts *o, int B, row_kind k)
{
    if (k != ROW_STREAMED && k != ROW_STREAMED_CPU_FFN)
        return time_row_on(dw, o, B, k);
    gp_weights_stream_params wp = gp_weights_stream_default_params();
    wp.budget_bytes = o->vram_budget - (k == ROW_STREAMED_CPU_FFN ? o->cpu_ffn_budget : 0);
    wp.ffn_on_demand = k == ROW_STREAMED_CPU_FFN;
    gp_device_weights *sw = NULL;
    gp_status st = gp_device_weights_streamed(o->hw, GP_DTYPE_BF16, &wp, &sw);
    if (st != GP_OK) {
        printf("| %d | %d | %s | error: %s: %s |\n", B, o->C, row_name[k], gp_status_str(st), gp_last_error());
        return 1;
    }
    int rc = time_row_on(sw, o, B, k);
    gp_device_weights_destroy(sw);
    return rc;
}

static int time_row_on(gp_device_weights *dw, const bench_opts *o, int B, row_kind k)
{
    const bool streamed = k == ROW_STREAMED || k == ROW_STREAMED_CPU_FFN;
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = B;
    p.max_context = o->C + o->warmup + o->repeat + 3; /* the cpu-ffn row takes one step more */
    p.use_graphs = k != ROW_SPARSE_EAGER && !streamed;
    gp_engine *e = NULL;
    float *ms = calloc((size_t)o->repeat, sizeof(float));
    double wall = 0.0;
    gp_cpu_ffn_stats cs;
    memset(&cs, 0, sizeof cs);
    gp_status st = ms ? gp_engine_create(dw, &p, &e) : GP_ERR_NO_MEMORY;
    if (st == GP_OK)
        st = gp_engine_fill_context(e, B, o->C, 42);
    if (st == GP_OK && k != ROW_DENSE && k != ROW_STREAMED)
        st = gp_engine_set_sparsity(e, o->sp->thresholds);
    if (st == GP_OK && is_cpu_ffn(k)) {
        gp_cpu_ffn_params cp = gp_cpu_ffn_default_params();
        cp.hot_per_layer = o->H;
        cp.n_threads = o->threads;
        if (o->reload_window > 0)
            cp.reload_window = o->reload_window;
        st = gp_engine_set_cpu_ffn(e, o->hw, o->sp, &cp);
    }
    /* the warm-up is not counted */
    if (st == GP_OK && (is_cpu_ffn(k) || streamed))
        st = gp_engine_time_steps(e, B, o->warmup, 1, ms, &wall);
    if (st == GP_OK && is_cpu_ffn(k))
        st = gp_engine_cpu_ffn_stats(e, &cs, 1);
    gp_streamer_stats ss;
    memset(&ss, 0, sizeof ss);
    if (st == GP_OK && streamed)
        st = gp_device_weights_stream_stats(dw, &ss, 1);
    if (st == GP_OK)
        st = gp_engine_time_steps(e, B, is_cpu_ffn(k) || streamed ? 0 : o->warmup, o->repeat, ms, &wall);
    if (st == GP_OK && is_cpu_ffn(k))
        st = gp_engine_cpu_ffn_stats(e, &cs, 0);
    if (st == GP_OK && streamed)
        st = gp_device_weights_stream_stats(dw, &ss, 0);
    char name[160];
    if (streamed)
        snprintf(name, sizeof name, "%s, %.2f GiB budget%s: %.3f GB copied/step", row_name[k],
                 o->vram_budget / 1073741824.0, k == ROW_STREAMED_CPU_FFN ? " (hot cache within it)" : "",
                 ss.bytes_streamed / 1e9 / o->repeat);
    else
        snprintf(name, sizeof name, "%s", row_name[k]);
    if (st != GP_OK) {
        printf("| %d | %d | %s | error: %s: %s |\n", B, o->C, row_name[k], gp_status_str(st), gp_last_error());
    } else if (is_cpu_ffn(k)) {
        printf("| %d | %d | %s, H = %d | %.3f | %.3f | %.0f | %.3f | %.1f | %.3f | %ld / %ld |\n", B, o->C, name,
               o->H, gp_median_f(ms, o->repeat), wall, B / (wall / 1e3), cs.cpu_ms_per_step,
               cs.cpu_bytes_per_step / 1e6, cs.hit_rate, cs.reloads, cs.swaps);
    } else {
        printf("| %d | %d | %s | %.3f | %.3f | %.0f | - | - | - | - |\n", B, o->C, name,
               gp_median_f(ms, o->repeat), wall, B / (wall / 1e3));
    }
    free(ms);
    gp_engine_destroy(e);
    return st == GP_OK ? 0 : 1;
}

/* Thresholds at S on the CPU reference over random ids (seed 0). */
static gp_status calibrate(const gp_host_weights *hw, double target, int seqs, int len, gp_sparsity *out)
{
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)seqs * len);
    int *lens = malloc(sizeof(int) * (size_t)seqs);
    if (!ids || !lens) {
        free(ids), free(lens);
        GP_FAIL(GP_ERR_NO_MEMORY, "calibration: out of host memory");
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < (size_t)seqs * len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)hw->cfg.vocab);
    }
    for (int s = 0; s < seqs; s++)
        lens[s] = len;
    gp_sparsity_calib_params cp = gp_sparsity_calib_default_params();
    cp.target = target;
    cp.n_seqs = seqs;
    cp.lens = lens;
    cp.ids = ids;
    cp.source = "random ids, seed 0 (gp_bench_cpu_ffn)";
    gp_status st = gp_sparsity_calibrate(hw, &cp, out);
    free(ids), free(lens);
    return st;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: gp_bench_cpu_ffn --cpu-ffn-budget SIZE [--vram-budget SIZE] [--model PRESET] [--layers N] "
            "[--sparsity FILE.json | --target S] [--batches B,...] [--context C] [--threads N] [--reload-window W] "
            "[--warmup N] [--repeat N]\n  SIZE: " GP_SIZE_UNITS "\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* each row as it finishes, also when a later one is cut off */
    const char *prog = "gp_bench_cpu_ffn", *model = GP_DEFAULT_PRESET, *spf = NULL, *batches = "1,8";
    long C = 1024, warmup = 5, repeat = 30, threads = 0, layers = 0, calib_seqs = 4, calib_len = 32, window = 0;
    double target = 0.5;
    uint64_t budget = 0, vram = 0;
    static const struct option opts[] = {{"model", required_argument, NULL, 'm'},
                                         {"layers", required_argument, NULL, 'L'},
                                         {"sparsity", required_argument, NULL, 'S'},
                                         {"target", required_argument, NULL, 't'},
                                         {"cpu-ffn-budget", required_argument, NULL, 'b'},
                                         {"vram-budget", required_argument, NULL, 'V'},
                                         {"batches", required_argument, NULL, 'B'},
                                         {"context", required_argument, NULL, 'C'},
                                         {"threads", required_argument, NULL, 'T'},
                                         {"reload-window", required_argument, NULL, 'W'},
                                         {"warmup", required_argument, NULL, 'u'},
                                         {"repeat", required_argument, NULL, 'r'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c, bad = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return 0;
        case 'm': model = optarg; break;
        case 'L': bad |= gp_arg_long(prog, optarg, 1, 1024, "--layers", &layers); break;
        case 'S': spf = optarg; break;
        case 't':
            if (gp_parse_double(optarg, "--target", &target) != GP_OK || target < 0.0 || target >= 1.0) {
                fprintf(stderr, "%s: --target %s: allowed a number in [0, 1)\n", prog, optarg);
                bad = 2;
            }
            break;
        case 'b':
            if (gp_parse_size(optarg, "--cpu-ffn-budget", &budget) != GP_OK) {
                fprintf(stderr, "%s: %s\n", prog, gp_last_error());
                bad = 2;
            }
            break;
        case 'V':
            if (gp_parse_size(optarg, "--vram-budget", &vram) != GP_OK) {
                fprintf(stderr, "%s: %s\n", prog, gp_last_error());
                bad = 2;
            }
            break;
        case 'B': batches = optarg; break;
        case 'C': bad |= gp_arg_long(prog, optarg, 0, 1 << 20, "--context", &C); break;
        case 'T': bad |= gp_arg_long(prog, optarg, 0, 16, "--threads", &threads); break;
        case 'W': bad |= gp_arg_long(prog, optarg, 1, 1 << 20, "--reload-window", &window); break;
        case 'u': bad |= gp_arg_long(prog, optarg, 0, 1000, "--warmup", &warmup); break;
        case 'r': bad |= gp_arg_long(prog, optarg, 1, 10000, "--repeat", &repeat); break;
        default: bad = 2;
        }
    }
    long bl[16];
    int nb = 0;
    if (!bad && gp_parse_long_list(batches, 1, GP_SPARSE_MAX_B, "--batches", bl, 16, &nb) != GP_OK) {
        fprintf(stderr, "%s: %s\n", prog, gp_last_error());
        bad = 2;
    }
    if (!bad && vram && budget >= vram) {
        fprintf(stderr, "%s: --cpu-ffn-budget %llu bytes: the hot cache is part of --vram-budget (%llu bytes) on "
                "streamed weights; allowed: below it\n", prog, (unsigned long long)budget, (unsigned long long)vram);
        bad = 2;
    }
    if (bad || !budget) {
        usage(stderr);
        return 2;
    }
    if (gp_cuda_available() != GP_OK) {
        fprintf(stderr, "%s: %s\n", prog, gp_last_error());
        return 1;
    }
    gp_config cfg;
    if (gp_config_preset(model, &cfg) != GP_OK) {
        fprintf(stderr, "%s: --model: %s\n", prog, gp_last_error());
        return 2;
    }
    if (layers) {
        if (layers > cfg.n_layers) {
            fprintf(stderr, "%s: --layers %ld: allowed 1..%d\n", prog, layers, cfg.n_layers);
            return 2;
        }
        cfg.n_layers = (int)layers;
    }
    if (vram) { /* both streamed rows' budgets, before anything is loaded */
        gp_weights_stream_params wp = gp_weights_stream_default_params();
        uint64_t least = 0;
        wp.ffn_on_demand = 1;
        wp.budget_bytes = vram - budget;
        if (gp_weights_stream_check(&cfg, &wp, &least) != GP_OK) {
            fprintf(stderr, "%s: --vram-budget less --cpu-ffn-budget: %s\n", prog, gp_last_error());
            return 2;
        }
    }
    int H = 0;
    bool all_hot = false;
    if (gp_hotset_capacity(&cfg, GP_DTYPE_BF16, budget, &H, &all_hot) != GP_OK) {
        fprintf(stderr, "%s: --cpu-ffn-budget: %s\n", prog, gp_last_error());
        return 2;
    }
    gp_host_weights hw;
    memset(&hw, 0, sizeof hw);
    gp_sparsity sp;
    memset(&sp, 0, sizeof sp);
    gp_device_weights *dw = NULL;
    gp_status st = gp_host_weights_alloc(&cfg, GP_DTYPE_BF16, &hw);
    if (st == GP_OK)
        st = gp_synth_fill_host(&hw, 0);
    if (st == GP_OK)
        st = gp_device_weights_upload(&hw, GP_DTYPE_BF16, &dw);
    if (st == GP_OK && spf) {
        /* the preset's synthetic weights, seed 0: a calibration of other weights is refused */
        gp_model_source src = {.synthetic = true, .seed = 0, .cfg = cfg};
        st = gp_sparsity_load_for(spf, &src, &sp);
    } else if (st == GP_OK) {
        double t0 = gp_now_s();
        st = calibrate(&hw, target, (int)calib_seqs, (int)calib_len, &sp);
        if (st == GP_OK)
            printf("# calibrated S = %.2f on %ld random tokens on the CPU reference in %.1f s\n", target,
                   calib_seqs * calib_len, gp_now_s() - t0);
    }
    if (st != GP_OK) {
        fprintf(stderr, "%s: setup: %s\n", prog, gp_last_error());
        gp_device_weights_destroy(dw);
        gp_sparsity_free(&sp);
        gp_host_weights_free(&hw);
        return 1;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    const uint64_t nbytes = gp_hotset_neuron_bytes(&cfg, GP_DTYPE_BF16);
    printf("# %s: %s%s, synthetic bf16 weights, %s, %d SMs; cpu-ffn budget %.3f GiB: H = %d of %d neurons per "
           "layer%s (hot cache %.3f GiB: extra beside resident weights, within the VRAM budget on streamed ones); "
           "%d warm-up + %d timed steps\n",
           prog, cfg.name, layers ? " (--layers)" : "", prop.name, prop.multiProcessorCount, budget / 1073741824.0,
           H, cfg.ffn, all_hot ? ", all hot" : "", (double)nbytes * H * cfg.n_layers / 1073741824.0, (int)warmup,
           (int)repeat);
    if (vram)
        printf("# --vram-budget %.3f GiB: streamed weights alone at that budget; with the cpu-ffn, %.3f GiB for the "
               "weights (FFN groups on demand) and the hot cache\n", vram / 1073741824.0,
               (vram - budget) / 1073741824.0);
    printf("\n| B | C | engine | ms/step median | wall ms/step | tokens/s (wall) | CPU ms/step | CPU MB/step | hot hit "
           "rate | reloads / swaps |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---|\n");
    bench_opts o = {.C = (int)C, .warmup = (int)warmup, .repeat = (int)repeat, .H = H, .threads = (int)threads,
                    .reload_window = (int)window, .vram_budget = vram, .cpu_ffn_budget = budget, .hw = &hw,
                    .sp = &sp};
    int failed = 0;
    for (int i = 0; i < nb; i++)
        for (int k = ROW_DENSE; k <= (vram ? ROW_STREAMED_CPU_FFN : ROW_CPU_FFN); k++)
            failed |= time_row(dw, &o, (int)bl[i], (row_kind)k);
    gp_device_weights_destroy(dw);
    gp_sparsity_free(&sp);
    gp_host_weights_free(&hw);
    return failed;
}
