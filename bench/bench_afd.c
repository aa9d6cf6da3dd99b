/* gp_bench_afd: decode steps with attention and FFN on two GPUs of this
 * process (the AFD executor: attention, KV cache, embedding and head on GPU
 * 0, every FFN stage on GPU 1, the residual rows crossing by peer copy,
 * M micro-batches ping-ponging), beside the one-GPU engine, whose rate per
 * GPU is data parallelism's. Synthetic bf16 weights: GPU 0 holds the
 * attention and head groups, GPU 1 the FFN groups (so the 70B FFN fits one
 * H200 and the attention GPU's memory goes to the KV cache); the one-GPU
 * rows hold the whole model on GPU 0 first, where it fits with its cache.
 * Device-event step times, medians; the bound of each row is the busier
 * GPU (its busy share of the step) or the crossing. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gp_engine.h"
#include "gp_model.h"
#include "gp_pipeline.h"
#include "gp_weights.h"

#include "bench_workloads.h"

#define PROG "gp_bench_afd"
#define MAX_W 16

typedef struct opts {
    int warmup, repeat, n_w, n_m, micro[GP_PIPE_MAX_MICRO];
    gp_config cfg;
    workload w[MAX_W];
} opts;

typedef struct afd_row {
    float ms, a_busy, f_busy; /* median step, and each GPU's busy share of that step (%) */
    double cross_mb;          /* MB crossing per step, both ways */
    bool ran;
    char why[160];            /* when it did not */
} afd_row;

static gp_engine_params params_for(int B, int C)
{
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = B;
    p.max_context = C;
    return p;
}

/* The one-GPU engine on GPU 0: median ms of repeat steps at B x C. */
static gp_status one_gpu(gp_device_weights *dw, const opts *o, const workload *w, float *ms)
{
    gp_engine_params p = params_for(w->B, w->C + o->warmup + o->repeat + 2);
    gp_engine *e = NULL;
    float *t = calloc((size_t)o->repeat, sizeof *t);
    gp_status st = t ? gp_engine_create(dw, &p, &e) : GP_ERR_NO_MEMORY;
    if (st == GP_OK)
        st = gp_engine_fill_context(e, w->B, w->C, 42);
    if (st == GP_OK)
        st = gp_engine_time_steps(e, w->B, o->warmup, o->repeat, t, NULL);
    if (st == GP_OK)
        *ms = gp_median_f(t, o->repeat);
    gp_engine_destroy(e);
    free(t);
    return st;
}

/* AFD steps at B x C for every M of o, into rows[n_m]. */
static gp_status afd_rows(gp_device_weights *da, gp_device_weights *df, const opts *o, const workload *w,
                          afd_row *rows)
{
    const int grow = o->n_m * (o->warmup + o->repeat) + 2;
    gp_engine_params pa = params_for(w->B, w->C + grow), pf = params_for(w->B, 16);
    gp_engine *ea = NULL, *ef = NULL;
    gp_afd_exec *x = NULL;
    int *ids = calloc((size_t)w->B, sizeof *ids);
    int32_t *tok = calloc((size_t)w->B, sizeof *tok), *next = calloc((size_t)w->B, sizeof *next);
    float *t = calloc((size_t)o->repeat, sizeof *t), *ab = calloc((size_t)o->repeat, sizeof *ab);
    float *fb = calloc((size_t)o->repeat, sizeof *fb);
    gp_status st = ids && tok && next && t && ab && fb ? GP_OK : GP_ERR_NO_MEMORY;
    if (st != GP_OK)
        gp_set_error("out of host memory");
    for (int i = 0; i < w->B && st == GP_OK; i++)
        ids[i] = i, tok[i] = (int32_t)((i * 7919 + 13) % o->cfg.vocab);
    if (st == GP_OK && cudaSetDevice(1) == cudaSuccess)
        st = gp_engine_create(df, &pf, &ef);
    if (st == GP_OK && cudaSetDevice(0) == cudaSuccess && (st = gp_engine_create(da, &pa, &ea)) == GP_OK)
        st = gp_engine_fill_context(ea, w->B, w->C, 42);
    if (st == GP_OK)
        st = gp_afd_exec_create(ea, 0, ef, 1, true, &x);
    for (int mi = 0; mi < o->n_m && st == GP_OK; mi++) {
        afd_row *r = &rows[mi];
        const int M = o->micro[mi];
        if (M > w->B) {
            snprintf(r->why, sizeof r->why, "M = %d > B", M);
            continue;
        }
        gp_pipeline_params pp = gp_pipeline_default_params();
        pp.micro_batches = M;
        gp_pipeline *pl = NULL;
        st = gp_pipeline_create(gp_afd_exec_get(x), o->cfg.n_layers, &pp, &pl);
        for (int i = -o->warmup; i < o->repeat && st == GP_OK; i++) {
            st = gp_pipeline_step(pl, w->B, ids, tok, next, NULL);
            memcpy(tok, next, sizeof(int32_t) * (size_t)w->B);
            const gp_step_stats *s = st == GP_OK ? gp_pipeline_last_stats(pl) : NULL;
            if (s && i >= 0) {
                t[i] = s->step_ms;
                ab[i] = 100.0f * (float)(1.0 - s->attn_idle_ms / s->step_ms);
                fb[i] = 100.0f * (float)(1.0 - s->ffn_idle_ms / s->step_ms);
                double b = 0;
                for (int l = 0; l < s->n_layers; l++)
                    b += s->a2f_bytes[l];
                r->cross_mb = 2 * b / 1e6; /* the same rows go back */
            }
        }
        gp_pipeline_destroy(pl);
        if (st == GP_OK) {
            r->ms = gp_median_f(t, o->repeat);
            r->a_busy = gp_median_f(ab, o->repeat);
            r->f_busy = gp_median_f(fb, o->repeat);
            r->ran = true;
        }
    }
    gp_afd_exec_destroy(x);
    gp_engine_destroy(ea);
    cudaSetDevice(1);
    gp_engine_destroy(ef);
    cudaSetDevice(0);
    free(ids), free(tok), free(next), free(t), free(ab), free(fb);
    return st;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " [--model PRESET] [--workloads B:C,...] [--micro M,...] [--warmup N] [--repeat N]\n"
               "Decode steps with attention (and the KV cache) on GPU 0 and the FFN on GPU 1 of this host,\n"
               "beside the one-GPU engine (data parallelism's rate per GPU); synthetic bf16 weights.\n"
               "  --model PRESET   default llama3-8b\n"
               "  --workloads L    default 64:1024,256:1024,64:4096,256:4096,1024:384\n"
               "  --micro L        micro-batches per step, each 1..%d; default 1,2\n"
               "  --warmup N       default 3;  --repeat N  timed steps, default 10\n",
            GP_PIPE_MAX_MICRO);
}

static int parse_micro(const char *s, opts *o)
{
    o->n_m = 0;
    const char *p = s;
    while (*p && o->n_m < GP_PIPE_MAX_MICRO) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > GP_PIPE_MAX_MICRO || (*end && *end != ','))
            break;
        o->micro[o->n_m++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (*p || o->n_m == 0) {
        fprintf(stderr, PROG ": --micro '%s': allowed up to %d values 1..%d separated by commas\n", s,
                GP_PIPE_MAX_MICRO, GP_PIPE_MAX_MICRO);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static opts o;
    o.warmup = 3;
    o.repeat = 10;
    const char *model = "llama3-8b", *wl = "64:1024,256:1024,64:4096,256:4096,1024:384", *micro = "1,2";
    static const struct option lo[] = {{"model", required_argument, NULL, 'm'}, {"workloads", required_argument, NULL, 'w'},
                                       {"micro", required_argument, NULL, 'M'}, {"warmup", required_argument, NULL, 'u'},
                                       {"repeat", required_argument, NULL, 'r'}, {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        char *end = NULL;
        long v = 0;
        if (ch == 'u' || ch == 'r') {
            v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < (ch == 'u' ? 0 : 1) || v > 100000) {
                fprintf(stderr, PROG ": %s '%s': allowed a whole number %s\n", argv[optind - 1], optarg,
                        ch == 'u' ? "0..100000" : "1..100000");
                return 2;
            }
        }
        switch (ch) {
        case 'm': model = optarg; break;
        case 'w': wl = optarg; break;
        case 'M': micro = optarg; break;
        case 'u': o.warmup = (int)v; break;
        case 'r': o.repeat = (int)v; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (gp_config_preset(model, &o.cfg) != GP_OK) {
        fprintf(stderr, PROG ": --model '%s': %s\n", model, gp_last_error());
        return 2;
    }
    if (parse_micro(micro, &o) || (o.n_w = gp_bench_parse_workloads(PROG, wl, o.w, MAX_W)) < 1)
        return 2;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 2) {
        fprintf(stderr, PROG ": attention and FFN on two GPUs need 2; this host has %d\n", n_dev < 0 ? 0 : n_dev);
        return 2;
    }
    printf("# " PROG " --model %s --workloads %s --micro %s --warmup %d --repeat %d: synthetic bf16 weights, "
           "per-stage CUDA graphs, medians of device-event step times\n", model, wl, micro, o.warmup, o.repeat);
    fflush(stdout);
    /* the one-GPU rows first, with the whole model on GPU 0 where it fits beside 4 GiB */
    float one[MAX_W] = {0};
    int rc = 0;
    gp_device_weights *whole = NULL;
    size_t free_b = 0, total_b = 0;
    gp_step_cost wc;
    gp_step_floor(&o.cfg, 1, 0, 1, &wc);
    if (cudaSetDevice(0) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        fprintf(stderr, PROG ": GPU 0: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    if (wc.bytes + (4ull << 30) < (double)free_b && gp_device_weights_synthetic(&o.cfg, GP_DTYPE_BF16, 0, &whole) !=
                                                        GP_OK) {
        fprintf(stderr, PROG ": the one-GPU weights: %s\n", gp_last_error());
        return 1;
    }
    for (int i = 0; i < o.n_w && whole; i++)
        if (one_gpu(whole, &o, &o.w[i], &one[i]) != GP_OK) {
            fprintf(stderr, PROG ": one GPU, B = %d, C = %d: %s\n", o.w[i].B, o.w[i].C, gp_last_error());
            one[i] = 0;
        }
    gp_device_weights_destroy(whole);
    /* the AFD rows: each GPU its groups */
    gp_device_weights *da = NULL, *df = NULL;
    gp_status st = gp_device_weights_synthetic_part(&o.cfg, GP_DTYPE_BF16, 0,
                                                    (1u << GP_GROUP_ATTN) | (1u << GP_GROUP_HEAD), &da);
    if (st == GP_OK && cudaSetDevice(1) == cudaSuccess)
        st = gp_device_weights_synthetic_part(&o.cfg, GP_DTYPE_BF16, 0, 1u << GP_GROUP_FFN, &df);
    cudaSetDevice(0);
    if (st != GP_OK) {
        fprintf(stderr, PROG ": the AFD weights: %s\n", gp_last_error());
        return 1;
    }
    printf("\n| B | C | M | AFD ms/step | GPU 0 (attention) busy | GPU 1 (FFN) busy | MB crossing per step | one GPU "
           "ms/step | tokens/s per GPU, AFD | tokens/s per GPU, one engine each (DP) | AFD / DP |\n"
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < o.n_w; i++) {
        const workload *w = &o.w[i];
        afd_row rows[GP_PIPE_MAX_MICRO];
        memset(rows, 0, sizeof rows);
        const gp_status ast = afd_rows(da, df, &o, w, rows);
        if (ast != GP_OK) { /* out of device memory: the row says it did not fit, the sweep goes on */
            fprintf(stderr, PROG ": AFD, B = %d, C = %d: %s\n", w->B, w->C, gp_last_error());
            if (ast != GP_ERR_DEVICE_MEMORY)
                rc = 1;
            for (int mi = 0; mi < o.n_m; mi++)
                if (!rows[mi].ran && !rows[mi].why[0])
                    snprintf(rows[mi].why, sizeof rows[mi].why, "%s",
                             ast == GP_ERR_DEVICE_MEMORY ? "does not fit" : "failed");
        }
        const double dp = one[i] > 0 ? w->B / (one[i] * 1e-3) : 0;
        for (int mi = 0; mi < o.n_m; mi++) {
            const afd_row *r = &rows[mi];
            char one_s[32] = "(does not fit)", dp_s[24] = "-", ratio[16] = "-";
            if (one[i] > 0) {
                snprintf(one_s, sizeof one_s, "%.3f", one[i]);
                snprintf(dp_s, sizeof dp_s, "%.0f", dp);
            }
            if (!r->ran) {
                printf("| %d | %d | %d | (%s) | | | | %s | - | %s | - |\n", w->B, w->C, o.micro[mi],
                       r->why[0] ? r->why : "failed", one_s, dp_s);
                continue;
            }
            const double afd = w->B / (r->ms * 1e-3) / 2;
            if (dp > 0)
                snprintf(ratio, sizeof ratio, "%.2f", afd / dp);
            printf("| %d | %d | %d | %.3f | %.0f%% | %.0f%% | %.1f | %s | %.0f | %s | %s |\n", w->B, w->C, o.micro[mi],
                   r->ms, r->a_busy, r->f_busy, r->cross_mb, one_s, afd, dp_s, ratio);
        }
        fflush(stdout);
    }
    gp_device_weights_destroy(da);
    cudaSetDevice(1);
    gp_device_weights_destroy(df);
    return rc;
}
