/* gp_bench_tp: decode steps (or, --prefill, prefills) under tensor
 * parallelism over --tp GPUs of this host (one process each, NCCL), each
 * rank on synthetic weights of its shard's shape, its sums over peer memory
 * (up to --peer-bytes) and through NCCL alone in the same run, beside the
 * one-GPU engine
 * on GPU 0 where the whole model fits (with its KV cache), whose rate per
 * GPU is also data parallelism's (one engine on each GPU); decode with CUDA
 * graphs; device events, medians; decode rows against the per-GPU memory
 * floor of the shard at the project's H100 bandwidth (docs/ARCHITECTURE.md
 * §5: rescale it on another GPU). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gp_comm.h"
#include "gp_engine.h"
#include "gp_model.h"
#include "gp_tools.h"
#include "gp_weights.h"

#include "bench_one_gpu.h"
#include "bench_workloads.h"

#define PROG "gp_bench_tp"
#define MAX_W 16

typedef struct opts {
    int tp, warmup, repeat, n_w;
    size_t peer_bytes; /* --peer-bytes: the ranks' sums of up to this many bytes over peer memory; 0: NCCL */
    bool prefill; /* --prefill: w[i] is B prompts of C tokens each, prefilled whole */
    bool sums_off;   /* --sums-off: timing only, the ranks' sums skipped: what they cost */
    gp_config cfg;
    workload w[MAX_W];
    char spec[128];
    FILE *csv; /* --csv: rank 0 writes the rows (the file opened before the ranks start); NULL: none */
} opts;

/* --sums-off: the sums and the gather left out (the results are wrong). */
static gp_status skip_f32(void *ctx, float *buf, size_t n, void *stream)
{
    (void)ctx, (void)buf, (void)n, (void)stream;
    return GP_OK;
}

/* Median ms of repeat prefills of B prompts of C tokens on e (its events). */
static gp_status time_prefills(gp_engine *e, const opts *o, const workload *w, float *ms)
{
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)w->B * (size_t)w->C);
    gp_prefill_seq *ps = malloc(sizeof *ps * (size_t)w->B);
    gp_status st = tok && ps ? GP_OK : GP_ERR_NO_MEMORY;
    if (st != GP_OK)
        gp_set_error("out of host memory for %d x %d prompt tokens", w->B, w->C);
    for (size_t i = 0; st == GP_OK && i < (size_t)w->B * (size_t)w->C; i++)
        tok[i] = (int32_t)((i * 2654435761u + 17) % (size_t)o->cfg.vocab);
    for (int s = 0; st == GP_OK && s < w->B; s++)
        ps[s] = (gp_prefill_seq){.seq = s, .n = w->C, .tokens = tok + (size_t)s * w->C};
    for (int i = -o->warmup; st == GP_OK && i < o->repeat; i++) {
        for (int s = 0; s < w->B; s++)
            gp_engine_reset_seq(e, s);
        st = gp_engine_prefill_batch(e, w->B, ps, NULL, NULL, NULL);
        if (st == GP_OK && i >= 0)
            ms[i] = gp_engine_last_prefill_ms(e);
    }
    free(tok);
    free(ps);
    return st;
}

/* Median ms of repeat decode steps of B sequences at C (prefills of B
 * prompts of C tokens with --prefill) on dw (tp ranks when c). */
static gp_status time_steps(gp_device_weights *dw, const opts *o, const workload *w, gp_comm *c, int rank,
                            float *med)
{
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = w->B;
    p.max_context = o->prefill ? w->C : w->C + o->warmup + o->repeat + 2;
    gp_engine *e = NULL;
    float *ms = calloc((size_t)o->repeat, sizeof(float));
    double wall = 0;
    gp_status st = ms ? gp_engine_create(dw, &p, &e) : GP_ERR_NO_MEMORY;
    if (st == GP_OK && c) {
        gp_engine_reduce_fn sum = o->sums_off ? skip_f32 : gp_comm_sum_f32;
        gp_engine_gather_fn gather = o->sums_off ? skip_f32 : gp_comm_gather_f32;
        st = gp_engine_set_tp(e, &(gp_engine_tp){.rank = rank, .tp = o->tp, .sum = sum, .gather = gather, .ctx = c});
    }
    if (st == GP_OK && !o->prefill)
        st = gp_engine_fill_context(e, w->B, w->C, 42);
    if (st == GP_OK && c)
        gp_group_step_begin(gp_comm_group(c), (uint64_t)w->B * 1000000u + (uint64_t)w->C);
    if (st == GP_OK)
        st = o->prefill ? time_prefills(e, o, w, ms) : gp_engine_time_steps(e, w->B, o->warmup, o->repeat, ms, &wall);
    if (st == GP_OK && c) {
        gp_group_step_end(gp_comm_group(c));
        st = gp_comm_check(c);
    }
    if (st == GP_OK)
        *med = gp_median_f(ms, o->repeat);
    gp_engine_destroy(e);
    free(ms);
    return st;
}

/* The TP row of workload w timed at ms (its per-GPU floor the shard's, for decode). */
static gp_place_row tp_row(const opts *o, const gp_config *shard, const workload *w, float ms)
{
    gp_place_row r = gp_place_row_at("TP", o->tp, w->B, w->C, 1);
    r.prefill = o->prefill, r.ok = true, r.ms = ms;
    if (!o->prefill)
        gp_place_floor(shard, 1, &r);
    return r;
}

static int rank_main(int rank, void *arg)
{
    const opts *o = arg;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < o->tp) {
        fprintf(stderr, PROG ": --tp %d needs %d GPUs; this host has %d\n", o->tp, o->tp, n_dev);
        return 2;
    }
    if (cudaSetDevice(rank) != cudaSuccess)
        return 1;
    gp_group_params gp = gp_group_default_params();
    gp_comm *c = NULL;
    gp_config shard;
    gp_device_weights *dw = NULL;
    gp_status st = gp_rdv_parse(o->spec, &gp.addr);
    gp.rank = rank;
    gp.n_ranks = o->tp;
    if (st == GP_OK)
        st = gp_comm_create(&gp, &c);
    if (st == GP_OK)
        st = gp_tp_config(&o->cfg, o->tp, &shard);
    if (st == GP_OK)
        st = gp_device_weights_synthetic(&shard, GP_DTYPE_BF16, 0, &dw);
    if (st != GP_OK) {
        fprintf(stderr, PROG ": rank %d: %s\n", rank, gp_last_error());
        gp_comm_destroy(c);
        return 1;
    }
    /* the peer path where every rank can map the others' memory; else NCCL alone, said once */
    bool peer = o->peer_bytes > 0;
    if (peer && (st = gp_comm_peer_setup(c, o->peer_bytes)) != GP_OK) {
        fprintf(stderr, PROG ": rank %d: %s\n", rank, gp_last_error());
        if (st != GP_ERR_UNSUPPORTED) {
            gp_device_weights_destroy(dw);
            gp_comm_destroy(c);
            return 1;
        }
        peer = false;
    }
    float tp_ms[MAX_W], nccl_ms[MAX_W];
    int failed = 0, n_done = 0; /* workloads TP finished */
    char why[200] = "";
    for (int i = 0; i < o->n_w; i++, n_done++) {
        nccl_ms[i] = 0;
        st = time_steps(dw, o, &o->w[i], c, rank, &tp_ms[i]);
        if (st == GP_OK && peer && (st = gp_comm_set_peer_limit(c, 0)) == GP_OK &&
            (st = time_steps(dw, o, &o->w[i], c, rank, &nccl_ms[i])) == GP_OK)
            st = gp_comm_set_peer_limit(c, o->peer_bytes);
        if (st != GP_OK) {
            snprintf(why, sizeof why, "%s", gp_last_error());
            fprintf(stderr, PROG ": rank %d, B = %d, C = %d: %s\n", rank, o->w[i].B, o->w[i].C, why);
            failed = 1;
            break;
        }
    }
    gp_device_weights_destroy(dw);
    gp_comm_destroy(c);
    if (rank != 0)
        return failed;
    if (failed && o->csv) /* the rows before it stand; the failed one says why */
        for (int i = 0; i <= n_done && i < o->n_w; i++) {
            gp_place_row r = tp_row(o, &shard, &o->w[i], tp_ms[i]);
            r.ok = i < n_done, r.error = why;
            gp_place_csv_row(o->csv, &o->cfg, &r);
        }
    if (failed)
        return failed;
    /* rank 0: the one-GPU engine, where the whole model fits */
    gp_device_weights *whole = NULL;
    if (gp_bench_whole_weights(&o->cfg, &whole) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 1;
    }
    char sums[64];
    if (peer)
        snprintf(sums, sizeof sums, "sums over peer memory up to %zu bytes", o->peer_bytes);
    else
        snprintf(sums, sizeof sums, "NCCL sums");
    if (o->prefill)
        printf("\n| B | T | TP = %d ms/prefill (%s) | NCCL sums alone | one GPU ms/prefill | TP / one GPU | tokens/s per "
               "GPU, TP | tokens/s per GPU, one engine each (DP) |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n",
               o->tp, sums);
    else
        printf("\n| B | C | TP = %d ms/step (%s) | NCCL sums alone | per-GPU floor ms | share of floor | one GPU ms/step "
               "| one-GPU floor ms | TP / one GPU | tokens/s per GPU, TP | tokens/s per GPU, one engine each (DP) |\n"
               "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", o->tp, sums);
    for (int i = 0; i < o->n_w; i++) {
        const workload *w = &o->w[i];
        gp_step_cost sc, oc; /* the shard's floor (its config from the start) and the whole model's */
        const double C = w->C + o->warmup + o->repeat / 2;
        gp_step_floor(&shard, w->B, C, 1, &sc);
        gp_step_floor(&o->cfg, w->B, C, 1, &oc);
        float one = 0;
        gp_status os = whole ? time_steps(whole, o, w, NULL, 0, &one) : GP_OK;
        if (os == GP_ERR_DEVICE_MEMORY) /* the KV cache beside the whole model's weights: no one-GPU row */
            fprintf(stderr, PROG ": one GPU, B = %d, C = %d: %s\n", w->B, w->C, gp_last_error());
        else if (os != GP_OK) {
            fprintf(stderr, PROG ": one GPU, B = %d, C = %d: %s\n", w->B, w->C, gp_last_error());
            failed = 1;
        }
        /* tokens a step makes (prefill: prompt tokens), per GPU: TP's over tp GPUs; DP runs a whole engine on
           each GPU, so its rate per GPU is the one-GPU engine's */
        const double toks = o->prefill ? (double)w->B * w->C : w->B;
        const double tp_rate = toks / (tp_ms[i] * 1e-3) / o->tp, dp_rate = one > 0 ? toks / (one * 1e-3) : 0;
        char one_s[48] = "(does not fit one GPU)", ratio[16] = "-", dp_s[24] = "-", nccl_s[24] = "-";
        if (nccl_ms[i] > 0)
            snprintf(nccl_s, sizeof nccl_s, "%.3f", nccl_ms[i]);
        if (one > 0) {
            snprintf(one_s, sizeof one_s, "%.3f", one);
            snprintf(ratio, sizeof ratio, "%.3f", tp_ms[i] / one);
            snprintf(dp_s, sizeof dp_s, "%.0f", dp_rate);
        }
        const gp_place_row tr = tp_row(o, &shard, w, tp_ms[i]);
        const gp_place_row orow = gp_place_one_gpu_row(&o->cfg, o->prefill, w->B, w->C, one, whole != NULL);
        gp_place_csv_row(o->csv, &o->cfg, &tr);
        gp_place_csv_row(o->csv, &o->cfg, &orow);
        if (o->prefill)
            printf("| %d | %d | %.3f | %s | %s | %s | %.0f | %s |\n", w->B, w->C, tp_ms[i], nccl_s, one_s, ratio, tp_rate,
                   dp_s);
        else
            printf("| %d | %d | %.3f | %s | %.3f | %.1f%% | %s | %.3f | %s | %.0f | %s |\n", w->B, w->C, tp_ms[i],
                   nccl_s, sc.floor_ms, 100.0 * sc.floor_ms / tp_ms[i], one_s, oc.floor_ms, ratio, tp_rate, dp_s);
        fflush(stdout);
    }
    gp_device_weights_destroy(whole);
    return failed;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " --tp N [--model PRESET] [--workloads B:C,...] [--prefill] [--warmup N] [--repeat N]\n"
               "Decode steps (or prefills) under tensor parallelism over N GPUs of this host (one process\n"
               "each, NCCL; synthetic bf16 weights of each rank's shard), beside the one-GPU engine on GPU 0\n"
               "where the model fits.\n"
               "  --tp N           GPUs, 2..%d, dividing the model's heads, KV heads and FFN neurons\n"
               "  --model PRESET   default llama3-8b\n"
               "  --workloads L    default 1:1024,64:1024,256:1024 (B sequences at C tokens of context)\n"
               "  --prefill        time prefills instead: L is B prompts of T tokens each (default 1:2048,1:8192)\n"
               "  --peer-bytes N   the ranks' sums of up to N bytes over peer memory (each row also timed with\n"
               "                   NCCL sums alone); 0: NCCL alone; default %zu\n"
               "  --sums-off       timing only: the ranks' sums and gathers skipped (wrong results), to show\n"
               "                   what they cost\n"
               "  --csv FILE       also write the rows (TP and one GPU) to FILE, in gp_bench_afd's columns, for\n"
               "                   bench/placement_report.py\n"
               "  --warmup N       default 3;  --repeat N  timed steps, default 20\n",
            GP_TP_MAX, GP_COMM_PEER_BYTES_DEFAULT);
}

int main(int argc, char **argv)
{
    static opts o;
    o.warmup = 3;
    o.repeat = 20;
    o.peer_bytes = GP_COMM_PEER_BYTES_DEFAULT;
    const char *model = "llama3-8b", *wl = "1:1024,64:1024,256:1024", *csv = NULL;
    bool wl_given = false;
    static const struct option lo[] = {{"tp", required_argument, NULL, 't'},      {"model", required_argument, NULL, 'm'},
                                       {"workloads", required_argument, NULL, 'w'}, {"warmup", required_argument, NULL, 'u'},
                                       {"repeat", required_argument, NULL, 'r'},  {"help", no_argument, NULL, 'h'},
                                       {"prefill", no_argument, NULL, 'p'}, {"peer-bytes", required_argument, NULL, 'b'},
                                       {"sums-off", no_argument, NULL, 'S'}, {"csv", required_argument, NULL, 'c'},
                                       {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        long v = 0;
        if ((ch == 't' || ch == 'u' || ch == 'r') &&
            gp_arg_long(PROG, optarg, ch == 'u' ? 0 : 1, 100000,
                        ch == 't' ? "--tp" : ch == 'u' ? "--warmup" : "--repeat", &v))
            return 2;
        switch (ch) {
        case 't': o.tp = (int)v; break;
        case 'u': o.warmup = (int)v; break;
        case 'r': o.repeat = (int)v; break;
        case 'm': model = optarg; break;
        case 'w': wl = optarg; wl_given = true; break;
        case 'p': o.prefill = true; break;
        case 'S': o.sums_off = true; break;
        case 'c': csv = optarg; break;
        case 'b': {
            uint64_t b = 0;
            if (gp_parse_size(optarg, "--peer-bytes", &b) != GP_OK || b > ((uint64_t)1 << 34)) {
                fprintf(stderr, PROG ": --peer-bytes '%s': allowed 0..16G bytes (K/M/G suffixes)\n", optarg);
                return 2;
            }
            o.peer_bytes = (size_t)b;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (gp_config_preset(model, &o.cfg) != GP_OK) {
        fprintf(stderr, PROG ": --model '%s': %s\n", model, gp_last_error());
        return 2;
    }
    if (o.tp < 2) {
        fprintf(stderr, PROG ": --tp is required: 2..%d GPUs\n", GP_TP_MAX);
        return 2;
    }
    if (gp_tp_check(&o.cfg, o.tp) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 2;
    }
    if (o.prefill && !wl_given)
        wl = "1:2048,1:8192";
    if ((o.n_w = o.prefill ? gp_bench_parse_pairs(PROG, wl, "B:T", 4096, 1, 1 << 20, o.w, MAX_W)
                           : gp_bench_parse_workloads(PROG, wl, o.w, MAX_W)) < 1)
        return 2;
    if (!gp_comm_available()) {
        gp_comm *c = NULL;
        gp_group_params gp = gp_group_default_params();
        (void)gp_comm_create(&gp, &c);
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 2;
    }
    if (csv && !(o.csv = gp_place_csv_open(PROG, csv)))
        return 2;
    snprintf(o.spec, sizeof o.spec, "file:/tmp/gp_bench_tp.%d", (int)getpid());
    printf("# " PROG " --tp %d --model %s%s --workloads %s --warmup %d --repeat %d --peer-bytes %zu%s: synthetic "
           "bf16 shards, %s\n", o.tp, model, o.prefill ? " --prefill" : "", wl, o.warmup, o.repeat, o.peer_bytes,
           o.sums_off ? " --sums-off" : "",
           o.prefill ? "medians of device-event prefill times" : "CUDA graphs, medians of device-event step times");
    fflush(stdout);
    int codes[GP_TP_MAX];
    if (gp_ranks_run(o.tp, rank_main, &o, codes) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 1;
    }
    unlink(o.spec + 5);
    if (o.csv)
        fclose(o.csv);
    int rc = 0;
    for (int r = 0; r < o.tp; r++)
        if (codes[r]) {
            fprintf(stderr, PROG ": rank %d exited with %d\n", r, codes[r]);
            rc = codes[r] == 2 ? 2 : 1;
        }
    return rc;
}
