/* gp_bench_kvoff: decode with an offloaded KV cache beside the
 * resident engine, on synthetic weights and random contexts: per workload
 * B:C, the resident engine (CUDA graphs, then eager) and the engine whose
 * sequences keep about --share of their context in host memory, streamed a
 * layer ahead of its attention; device-event medians, tokens/s, the bytes
 * copied in per step and the link floor they set (bytes / 55 GB/s,
 * docs/ARCHITECTURE.md §6). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "gp_tools.h"
#include "gp_weights.h"

#define MAX_ROWS 16
#define LINK_GBPS 55.0 /* pinned host-to-device on the H100 machine (docs/ARCHITECTURE.md §6) */

static void usage(FILE *f)
{
    fprintf(f, "usage: gp_bench_kvoff [--model PRESET] [--workloads B:C[,B:C...]] [--share F] [--repeat N]\n"
               "                      [--warmup N] [--dtype bf16|fp16]\n"
               "  --model PRESET    model shape, synthetic weights (default llama3-8b; %s)\n"
               "  --workloads LIST  batch:context pairs (default 8:4096,64:4096)\n"
               "  --share F         share of each context to keep in host memory, 0 < F < 1 (default 0.5): the\n"
               "                    largest --kv-vram-budget whose split offloads at least F x C tokens per\n"
               "                    sequence; the split obtained is printed\n"
               "  --repeat N        timed steps per row, 1..1000 (default 5; the median is reported)\n"
               "  --warmup N        steps before them, 0..100 (default 2)\n"
               "  --dtype D         engine dtype: bf16 (default) or fp16\n",
            gp_config_preset_names());
}

typedef struct row { int B, C; } row;

/* The largest budget whose split keeps at least want tokens of each
 * sequence on the host. "Refused (below the least) or offloads enough"
 * holds from 0 up to that budget and fails above it: a binary search. */
static gp_status budget_for(const gp_config *c, gp_engine_params p, gp_dtype dt, int want, uint64_t *out,
                            gp_kv_offload_plan *plan)
{
    p.kv_vram_budget = ~0ull;
    GP_TRY(gp_engine_kv_offload_plan(c, &p, dt, plan));
    uint64_t lo = 0, hi = plan->full_bytes; /* the predicate holds at lo and fails at hi */
    while (lo + 1 < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        p.kv_vram_budget = mid;
        gp_kv_offload_plan q;
        if (gp_engine_kv_offload_plan(c, &p, dt, &q) != GP_OK || q.host_blocks_per_seq * p.block_size >= want)
            lo = mid;
        else
            hi = mid;
    }
    p.kv_vram_budget = *out = lo;
    gp_status st = gp_engine_kv_offload_plan(c, &p, dt, plan);
    if (st != GP_OK)
        GP_FAIL(GP_ERR_INVALID_ARG, "no --kv-vram-budget keeps %d tokens per sequence on the host: %s", want,
                gp_last_error());
    return GP_OK;
}

/* One engine: random context, warm-up and timed steps; prints its row. */
static int time_engine(gp_device_weights *dw, const gp_engine_params *p, row w, int warmup, int repeat,
                       const char *label)
{
    gp_engine *e = NULL;
    float *ms = calloc((size_t)repeat, sizeof(float));
    double wall = 0.0;
    gp_kv_offload_stats st = {0};
    gp_status s = ms ? gp_engine_create(dw, p, &e) : GP_ERR_NO_MEMORY;
    if (s == GP_OK)
        s = gp_engine_fill_context(e, w.B, w.C, 42);
    if (s == GP_OK && p->kv_vram_budget && (s = gp_engine_time_steps(e, w.B, warmup, 1, ms, NULL)) == GP_OK)
        s = gp_engine_kv_offload_stats(e, NULL, true); /* from here: the timed steps only */
    if (s == GP_OK)
        s = gp_engine_time_steps(e, w.B, p->kv_vram_budget ? 0 : warmup, repeat, ms, &wall);
    if (s == GP_OK && p->kv_vram_budget)
        s = gp_engine_kv_offload_stats(e, &st, false);
    int rc = 0;
    if (s != GP_OK) {
        printf("| %d | %d | %s | error: %s: %s |\n", w.B, w.C, label, gp_status_str(s), gp_last_error());
        rc = 1;
    } else {
        const float med = gp_median_f(ms, repeat);
        const double gb = st.bytes_in / (double)repeat / 1e9, floor_ms = gb / LINK_GBPS * 1e3;
        if (p->kv_vram_budget)
            printf("| %d | %d | %s | %.2f | %.2f | %.0f | %.2f | %.2f | %.0f%% |\n", w.B, w.C, label, med, wall,
                   w.B / (med / 1e3), gb, floor_ms, 100.0 * floor_ms / med);
        else
            printf("| %d | %d | %s | %.2f | %.2f | %.0f | - | - | - |\n", w.B, w.C, label, med, wall,
                   w.B / (med / 1e3));
    }
    fflush(stdout);
    gp_engine_destroy(e);
    free(ms);
    return rc;
}

int main(int argc, char **argv)
{
    const char *model = "llama3-8b", *wl = "8:4096,64:4096";
    double share = 0.5;
    int repeat = 5, warmup = 2;
    gp_dtype dtype = GP_DTYPE_BF16;
    static const struct option lo[] = {{"model", required_argument, 0, 'm'}, {"workloads", required_argument, 0, 'w'},
                                       {"share", required_argument, 0, 's'}, {"repeat", required_argument, 0, 'r'},
                                       {"warmup", required_argument, 0, 'u'}, {"dtype", required_argument, 0, 'd'},
                                       {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    int c;
    long v;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'w': wl = optarg; break;
        case 's':
            if (gp_parse_double(optarg, "--share", &share) != GP_OK || !(share > 0.0 && share < 1.0)) {
                fprintf(stderr, "gp_bench_kvoff: --share '%s': allowed a number in (0, 1)\n", optarg);
                return 2;
            }
            break;
        case 'r':
            if (gp_parse_long(optarg, 1, 1000, "--repeat", &v) != GP_OK) {
                fprintf(stderr, "gp_bench_kvoff: %s\n", gp_last_error());
                return 2;
            }
            repeat = (int)v;
            break;
        case 'u':
            if (gp_parse_long(optarg, 0, 100, "--warmup", &v) != GP_OK) {
                fprintf(stderr, "gp_bench_kvoff: %s\n", gp_last_error());
                return 2;
            }
            warmup = (int)v;
            break;
        case 'd':
            if (gp_dtype_parse(optarg, 0, &dtype) != GP_OK) {
                fprintf(stderr, "gp_bench_kvoff: --dtype: %s\n", gp_last_error());
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gp_bench_kvoff: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    row rows[MAX_ROWS];
    int n = 0;
    for (const char *p = wl; *p;) {
        int B, C, used;
        if (n == MAX_ROWS || sscanf(p, "%d:%d%n", &B, &C, &used) != 2 || B < 1 || B > 4096 || C < 1 || C > 1 << 20 ||
            (p[used] && p[used] != ',')) {
            fprintf(stderr, "gp_bench_kvoff: --workloads '%s': expected B:C[,B:C...], 1 <= B <= 4096, 1 <= C <= %d, "
                    "at most %d\n", wl, 1 << 20, MAX_ROWS);
            return 2;
        }
        rows[n++] = (row){B, C};
        p += used + (p[used] == ',');
    }
    gp_config cfg;
    if (gp_config_preset(model, &cfg) != GP_OK) {
        fprintf(stderr, "gp_bench_kvoff: --model '%s': %s\n", model, gp_last_error());
        return 2;
    }
    for (int i = 0; i < n; i++)
        if (rows[i].C + warmup + repeat + 2 > cfg.max_context)
            cfg.max_context = rows[i].C + warmup + repeat + 2; /* the shape is what is timed */
    gp_device_weights *dw = NULL;
    if (gp_device_weights_synthetic(&cfg, dtype, 0, &dw) != GP_OK) {
        fprintf(stderr, "gp_bench_kvoff: weights: %s\n", gp_last_error());
        return 1;
    }
    printf("# gp_bench_kvoff: %s shape, synthetic %s weights, random contexts, %d warm-up + %d timed steps; "
           "ms: device events from the first kernel to the last (median); wall: host, per step\n\n",
           cfg.name, gp_dtype_flag_name(dtype), warmup, repeat);
    printf("| B | C | engine | ms/step | wall ms/step | tokens/s | GB in/step | link floor ms | floor / step |\n"
           "|---:|---:|---|---:|---:|---:|---:|---:|---|\n");
    int failed = 0;
    for (int i = 0; i < n; i++) {
        gp_engine_params p = gp_engine_default_params();
        p.max_batch = rows[i].B;
        p.max_context = rows[i].C + warmup + repeat + 2;
        failed |= time_engine(dw, &p, rows[i], warmup, repeat, "resident, graphs");
        p.use_graphs = false;
        failed |= time_engine(dw, &p, rows[i], warmup, repeat, "resident, eager");
        gp_kv_offload_plan plan;
        uint64_t budget = 0;
        if (budget_for(&cfg, p, dtype, (int)(share * rows[i].C), &budget, &plan) != GP_OK) {
            printf("| %d | %d | offloaded | error: %s |\n", rows[i].B, rows[i].C, gp_last_error());
            failed = 1;
            continue;
        }
        p.kv_vram_budget = budget;
        char label[200];
        snprintf(label, sizeof label, "offloaded: %d of %d tokens/seq on the host, KV device %.2f GB of %.2f, "
                 "host %.2f GB", plan.host_blocks_per_seq * p.block_size, rows[i].C, plan.device_bytes / 1e9,
                 plan.full_bytes / 1e9, plan.host_bytes / 1e9);
        failed |= time_engine(dw, &p, rows[i], warmup, repeat, label);
    }
    gp_device_weights_destroy(dw);
    return failed;
}
