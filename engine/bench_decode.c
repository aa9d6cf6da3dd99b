/* gp_bench_decode: times the sequential CUDA engine on decode workloads
 * (B sequences with C tokens already cached) with device events, and reports
 * each against the floor of DESIGN.md §5 and a per-kernel breakdown. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gp_engine.h"

#define HBM_BYTES_PER_S 3.1e12 /* DESIGN.md §4, read-only streaming on the H100 */
#define GEMM_FLOPS_PER_S 800e12 /* DESIGN.md §4, bf16 GEMM on random data */

typedef struct workload { int B, C; } workload;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Bytes and flops of one decode step at context C (perf model, §5): every
 * weight but the embedding table is read once (B embedding rows), K/V of C
 * tokens read and one token's written. */
static void step_cost(const gp_config *c, int B, int C, double *bytes, double *flops)
{
    double params = (double)gp_config_param_count(c);
    double embed = (double)c->vocab * c->hidden;
    double read_params = c->tied_embeddings ? params : params - embed; /* tied: the LM head reads it */
    double kv_tok = 2.0 * c->n_layers * c->n_kv_heads * c->head_dim * 2.0; /* K+V bf16 per token */
    *bytes = read_params * 2.0 + (double)B * embed / c->vocab * 2.0 + (double)B * C * kv_tok + (double)B * kv_tok;
    *flops = 2.0 * read_params * B + 4.0 * B * (double)C * c->n_heads * c->head_dim * c->n_layers;
}

static int parse_workloads(const char *s, workload *w, int max)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        int B, C, used;
        if (n == max || sscanf(p, "%d:%d%n", &B, &C, &used) != 2 || B < 1 || C < 0) {
            fprintf(stderr, "gp_bench_decode: --workloads '%s': expected B:C[,B:C...] with B >= 1, C >= 0 "
                    "(at most %d)\n", s, max);
            return -1;
        }
        w[n++] = (workload){B, C};
        p += used;
        if (*p == ',')
            p++;
        else if (*p) {
            fprintf(stderr, "gp_bench_decode: --workloads '%s': unexpected '%c'\n", s, *p);
            return -1;
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *model = GP_DEFAULT_PRESET, *wl = "8:1024,64:2048,256:1024,1024:384";
    int repeat = 20, warmup = 3, graphs = 1;
    static const struct option opts[] = {{"model", required_argument, NULL, 'm'},
                                         {"workloads", required_argument, NULL, 'w'},
                                         {"repeat", required_argument, NULL, 'r'},
                                         {"warmup", required_argument, NULL, 'u'},
                                         {"eager", no_argument, NULL, 'e'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'w': wl = optarg; break;
        case 'r': repeat = atoi(optarg); break;
        case 'u': warmup = atoi(optarg); break;
        case 'e': graphs = 0; break;
        default:
            fprintf(stderr, "usage: gp_bench_decode [--model PRESET] [--workloads B:C,...] [--repeat N] "
                            "[--warmup N] [--eager]\n");
            return 2;
        }
    }
    if (repeat < 1 || repeat > 10000 || warmup < 0 || warmup > 1000) {
        fprintf(stderr, "gp_bench_decode: --repeat %d (allowed 1..10000), --warmup %d (0..1000)\n", repeat, warmup);
        return 2;
    }
    workload w[32];
    int n_w = parse_workloads(wl, w, 32);
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
    struct cudaDeviceProp prop;
    int drv = 0;
    cudaGetDeviceProperties(&prop, 0);
    cudaDriverGetVersion(&drv);
    printf("# gp_bench_decode: %s (synthetic weights), %s, %d SMs, driver %d.%d, %s, %d warm-up + %d timed "
           "steps per workload\n", cfg.name, prop.name, prop.multiProcessorCount, drv / 1000, (drv % 1000) / 10,
           graphs ? "CUDA graphs" : "eager", warmup, repeat);
    gp_device_weights *dw;
    gp_status st = gp_device_weights_synthetic(&cfg, 0, &dw);
    if (st != GP_OK) {
        fprintf(stderr, "gp_bench_decode: weights: %s\n", gp_last_error());
        return 1;
    }
    printf("\n| B | C | ms/step median | min | max | tokens/s | GB/step | TFLOP/step | floor ms | share of floor |\n"
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    char breakdowns[32][512];
    int failed = 0;
    for (int i = 0; i < n_w; i++) {
        gp_engine_params p = gp_engine_default_params();
        p.max_batch = w[i].B;
        p.max_context = w[i].C + warmup + repeat + 2;
        p.use_graphs = graphs;
        gp_engine *e = NULL;
        float *ms = calloc((size_t)repeat, sizeof(float));
        gp_step_breakdown bd;
        st = gp_engine_create(dw, &p, &e);
        if (st == GP_OK)
            st = gp_engine_fill_context(e, w[i].B, w[i].C, 42);
        if (st == GP_OK)
            st = gp_engine_time_steps(e, w[i].B, warmup, repeat, ms);
        if (st == GP_OK)
            st = gp_engine_breakdown(e, w[i].B, &bd);
        if (st != GP_OK) {
            printf("| %d | %d | error: %s: %s |\n", w[i].B, w[i].C, gp_status_str(st), gp_last_error());
            snprintf(breakdowns[i], sizeof breakdowns[i], "B=%d C=%d: failed", w[i].B, w[i].C);
            failed = 1;
        } else {
            qsort(ms, (size_t)repeat, sizeof(float), cmp_float);
            float med = ms[repeat / 2];
            double bytes, flops;
            /* the timed steps run at contexts C+warmup .. C+warmup+repeat-1 */
            step_cost(&cfg, w[i].B, w[i].C + warmup + repeat / 2, &bytes, &flops);
            double floor_ms = 1e3 * (bytes / HBM_BYTES_PER_S > flops / GEMM_FLOPS_PER_S ? bytes / HBM_BYTES_PER_S
                                                                                       : flops / GEMM_FLOPS_PER_S);
            printf("| %d | %d | %.3f | %.3f | %.3f | %.0f | %.2f | %.2f | %.2f | %.1f%% |\n", w[i].B, w[i].C, med,
                   ms[0], ms[repeat - 1], w[i].B / (med / 1e3), bytes / 1e9, flops / 1e12, floor_ms,
                   100.0 * floor_ms / med);
            snprintf(breakdowns[i], sizeof breakdowns[i],
                     "| %d:%d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |",
                     w[i].B, w[i].C, bd.embed, bd.attn_norm, bd.qkv_gemm, bd.rope_kv, bd.attention, bd.o_gemm,
                     bd.ffn_norm, bd.gate_up_gemm, bd.swiglu, bd.down_gemm, bd.head);
        }
        free(ms);
        gp_engine_destroy(e);
        fflush(stdout);
    }
    printf("\nPer-kernel breakdown (ms per step summed over layers, one eager step with an event after each "
           "kernel):\n\n| B:C | embed | attn norm | QKV GEMM | RoPE+KV | attention | O GEMM | FFN norm | gate/up "
           "GEMM | SwiGLU | down GEMM | head |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n_w; i++)
        printf("%s\n", breakdowns[i]);
    gp_device_weights_destroy(dw);
    return failed;
}
