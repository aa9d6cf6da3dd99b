/* gp_bench_cold_ffn: the cold-neuron CPU FFN (sparse/gp_cold_ffn_run) on
 * the Llama-3-8B FFN shape (hidden 4096, ffn 14336) with random bf16
 * weights, per batch: median ms per call over repeats (layers taken in
 * turn, so each call reads weights the last one did not), the weight bytes
 * a call reads and their rate, beside the host's read bandwidth measured in
 * the same program by a multi-threaded streaming read of a 1 GiB buffer.
 * Thresholds: the median |x| for gate/up and, per batch, the median |SwiGLU
 * output| of a sample of neurons for down, so about half of each row's down
 * inputs are dropped (the union over B rows is more: printed). No GPU;
 * asserts nothing. Run with --help for the flags. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cpu.h"
#include "gp_tools.h"
#include "gp_model.h"
#include "gp_sparse.h"

#define NAME "gp_bench_cold_ffn"
#define MAX_BATCHES 16
#define SAMPLE_NEURONS 256

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " NAME " [--threads N] [--repeat N] [--batch LIST] [--cold-share F] [--layers N]\n"
            "  The cold-neuron CPU FFN on the llama3-8b FFN shape with random bf16 weights.\n"
            "  --threads N     CPU threads of the FFN and of the bandwidth read: 0 (default) the online\n"
            "                  CPUs up to 16, or 1..16\n"
            "  --repeat N      timed calls per batch, 1..10000 (default 20); the median is reported\n"
            "  --batch LIST    comma-separated batches, each 1..%d (default 1,8)\n"
            "  --cold-share F  share of each layer's neurons that are cold (on the CPU), 0 < F <= 1\n"
            "                  (default 0.5); the cold set is a random one\n"
            "  --layers N      layers of weights, 1..64 (default 2; each is ~0.35 GB of FFN weights plus\n"
            "                  its cold pack); calls take them in turn\n",
            GP_SPARSE_MAX_B);
}

static void fill_bf16(uint16_t *p, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        p[i] = gp_f32_to_bf16(gp_bench_uniform_pm(s));
}

/* ---------------------------------------------------------------- thresholds */

/* Median |SwiGLU output| over SAMPLE_NEURONS neurons of layer 0 and the B
 * rows of x (already masked at tg), rounded as the FFN rounds. */
static float down_threshold(const gp_host_weights *w, const uint16_t *x, int B, float tg)
{
    const int H = w->cfg.hidden, F = w->cfg.ffn;
    const uint16_t *gu = w->layers[0].w_gate_up;
    float *a = malloc(sizeof(float) * SAMPLE_NEURONS * B);
    for (int s = 0; s < SAMPLE_NEURONS; s++) {
        const int j = (int)(gp_bench_rand_u64() % (uint64_t)F);
        for (int b = 0; b < B; b++) {
            float g = 0.0f, u = 0.0f;
            for (int k = 0; k < H; k++) {
                float xv = gp_bf16_to_f32(x[(size_t)b * H + k]);
                xv = fabsf(xv) > tg ? xv : 0.0f;
                g += gp_bf16_to_f32(gu[(size_t)j * H + k]) * xv;
                u += gp_bf16_to_f32(gu[((size_t)F + j) * H + k]) * xv;
            }
            g = gp_round_to(g, GP_DTYPE_BF16), u = gp_round_to(u, GP_DTYPE_BF16);
            a[s * B + b] = fabsf(gp_round_to(g / (1.0f + expf(-g)) * u, GP_DTYPE_BF16));
        }
    }
    const float t = gp_median_f(a, SAMPLE_NEURONS * B);
    free(a);
    return t;
}

int main(int argc, char **argv)
{
    long threads = 0, repeat = 20, layers = 2;
    double share = 0.5;
    long batches[MAX_BATCHES] = {1, 8};
    int n_batches = 2;
    static const struct option opts[] = {
        {"threads", required_argument, NULL, 't'}, {"repeat", required_argument, NULL, 'r'},
        {"batch", required_argument, NULL, 'b'},   {"cold-share", required_argument, NULL, 'c'},
        {"layers", required_argument, NULL, 'l'},  {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 't':
            if (gp_arg_long(NAME, optarg, 0, 16, "--threads", &threads))
                return 2;
            break;
        case 'r':
            if (gp_arg_long(NAME, optarg, 1, 10000, "--repeat", &repeat))
                return 2;
            break;
        case 'l':
            if (gp_arg_long(NAME, optarg, 1, 64, "--layers", &layers))
                return 2;
            break;
        case 'b':
            if (gp_parse_long_list(optarg, 1, GP_SPARSE_MAX_B, "--batch", batches, MAX_BATCHES, &n_batches) != GP_OK) {
                fprintf(stderr, NAME ": %s\n", gp_last_error());
                return 2;
            }
            break;
        case 'c':
            if (gp_parse_double(optarg, "--cold-share", &share) != GP_OK || !(share > 0.0 && share <= 1.0)) {
                fprintf(stderr, NAME ": --cold-share '%s': expected a number with 0 < F <= 1\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: return gp_bench_bad_flag(NAME, argv, usage);
        }
    }
    if (gp_bench_extra_args(NAME, argc, argv, usage))
        return 2;

    gp_config cfg;
    if (gp_config_preset("llama3-8b", &cfg) != GP_OK) {
        fprintf(stderr, NAME ": %s\n", gp_last_error());
        return 1;
    }
    cfg.n_layers = (int)layers;
    const int H = cfg.hidden, F = cfg.ffn, L = (int)layers;
    gp_host_weights w;
    /* the whole model's arena is reserved but only the FFN tensors are touched */
    if (gp_host_weights_alloc(&cfg, GP_DTYPE_BF16, &w) != GP_OK) {
        fprintf(stderr, NAME ": %s\n", gp_last_error());
        return 1;
    }
    const float sg = gp_synth_scale(&cfg, GP_T_W_GATE_UP), sd = gp_synth_scale(&cfg, GP_T_W_DOWN);
    for (int l = 0; l < L; l++) {
        fill_bf16(w.layers[l].w_gate_up, (size_t)2 * F * H, sg);
        fill_bf16(w.layers[l].w_down, (size_t)H * F, sd);
    }
    /* a random cold set of the share, ascending */
    int *cold = malloc(sizeof(int) * F), n_cold = 0;
    const int want = (int)lround(share * F);
    for (int j = 0; j < F; j++) /* selection sampling: exactly `want` of F */
        if ((double)(gp_bench_rand_u64() >> 11) * (1.0 / 9007199254740992.0) * (F - j) < want - n_cold)
            cold[n_cold++] = j;
    gp_cold_pack **pk = calloc((size_t)L, sizeof *pk);
    for (int l = 0; l < L; l++)
        if (gp_cold_pack_create(&w, l, GP_DTYPE_BF16, cold, n_cold, &pk[l]) != GP_OK) {
            fprintf(stderr, NAME ": %s\n", gp_last_error());
            return 1;
        }
    gp_cold_ffn_params p = gp_cold_ffn_default_params();
    p.n_threads = (int)threads;
    gp_cold_ffn *c;
    if (gp_cold_ffn_create(&p, &c) != GP_OK) {
        fprintf(stderr, NAME ": %s\n", gp_last_error());
        return 1;
    }
    const int T = gp_cold_ffn_threads(c);
    const double host_gbs = gp_bench_host_read_gbs(T);
    printf("%s: llama3-8b FFN (hidden %d, ffn %d), bf16, %d layers, %d cold neurons a layer (%.0f%%), "
           "%d threads, %ld repeats, chunks %d\n", NAME, H, F, L, n_cold, 100.0 * n_cold / F, T, repeat, p.chunks);
    printf("host read bandwidth (%d threads, 1 GiB streamed): %.1f GB/s\n", T, host_gbs);
    printf("%3s %9s %9s %9s %9s %9s %10s %8s\n", "B", "t_gu", "t_down", "active", "ms", "min ms", "weight MB",
           "GB/s");

    uint16_t *x = malloc(sizeof(uint16_t) * GP_SPARSE_MAX_B * H);
    float *y = malloc(sizeof(float) * GP_SPARSE_MAX_B * H);
    double *ms = malloc(sizeof(double) * repeat), *gb = malloc(sizeof(double) * repeat);
    for (int bi = 0; bi < n_batches; bi++) {
        const int B = (int)batches[bi];
        /* an RMSNorm output: unit RMS, here uniform with that RMS */
        for (int e = 0; e < B * H; e++)
            x[e] = gp_f32_to_bf16(gp_bench_uniform_pm(1.7320508f));
        float *mag = malloc(sizeof(float) * B * H);
        for (int e = 0; e < B * H; e++)
            mag[e] = fabsf(gp_bf16_to_f32(x[e]));
        const float tg = gp_median_f(mag, B * H);
        free(mag);
        const float td = down_threshold(&w, x, B, tg);
        gp_cold_ffn_stats st = {0};
        long active = 0;
        if (gp_cold_ffn_run(c, pk[0], B, x, tg, td, cold, n_cold, y, &st) != GP_OK) { /* warm-up */
            fprintf(stderr, NAME ": %s\n", gp_last_error());
            return 1;
        }
        for (int r = 0; r < repeat; r++) {
            const int l = (r + 1) % L;
            const double t0 = gp_now_s();
            if (gp_cold_ffn_run(c, pk[l], B, x, tg, td, cold, n_cold, y, &st) != GP_OK) {
                fprintf(stderr, NAME ": %s\n", gp_last_error());
                return 1;
            }
            const double dt = gp_now_s() - t0;
            ms[r] = dt * 1e3;
            gb[r] = (double)st.weight_bytes / dt / 1e9;
            active += st.active;
        }
        const double med = gp_median_d(ms, (int)repeat), mn = ms[0];
        const double med_gb = gp_median_d(gb, (int)repeat);
        printf("%3d %9.4f %9.5f %8.1f%% %9.3f %9.3f %10.1f %8.2f\n", B, tg, td,
               100.0 * (double)active / ((double)repeat * n_cold), med, mn, (double)st.weight_bytes / 1e6, med_gb);
    }
    printf("GB/s: weight bytes of a call (gate and up rows of every cold neuron, down columns of the active ones) "
           "over its time, median over calls; compare with the host read bandwidth above.\n");
    for (int l = 0; l < L; l++)
        gp_cold_pack_destroy(pk[l]);
    gp_cold_ffn_destroy(c);
    gp_host_weights_free(&w);
    free(pk), free(cold), free(x), free(y), free(ms), free(gb);
    return 0;
}
