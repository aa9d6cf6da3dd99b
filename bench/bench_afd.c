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
#include "gp_tools.h"
#include "gp_weights.h"

#include "bench_one_gpu.h"
#include "bench_workloads.h"

#define PROG "gp_bench_afd"
#define MAX_W 16

typedef struct opts {
    int warmup, repeat, n_w, n_m, micro[GP_PIPE_MAX_MICRO];
    gp_config cfg;
    workload w[MAX_W];
    FILE *csv; /* --csv; NULL: none */
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

/* ------------------------------------------------------------ PP = 2 */

/* Pipeline parallelism by layers over the same two GPUs: layers [0, L/2)
 * (and the embedding) on GPU 0, [L/2, L) (and the head) on GPU 1, each an
 * engine over its part of the weights; M micro-batches: GPU 0 runs its
 * layers for micro-batch m (one graph), the rows cross by peer copy, GPU 1
 * runs its layers for m while GPU 0 goes on with m + 1. Both engines keep
 * the sequences (each a KV cache of every layer, half of it unused: memory,
 * not time). */
typedef struct pp_side {
    gp_engine *e;
    cudaStream_t s;
    cudaGraphExec_t g[GP_PIPE_MAX_MICRO];
    int splits[GP_PIPE_MAX_MICRO];
    int l0, l1;
} pp_side;

static gp_status pp_capture(pp_side *p, const gp_step_plan *pn, int m, int max_len)
{
    gp_lane *lane = gp_engine_lane(p->e);
    gp_stage_io io = {.b0 = pn->b0[m], .nb = pn->nb[m], .max_len = max_len, .attn_splits = p->splits[m]};
    GP_TRY(gp_engine_act_view(p->e, GP_ACT_RESID, pn->b0[m], pn->nb[m], &io.resid));
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(p->s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        GP_FAIL(GP_ERR_CUDA, "PP: cudaStreamBeginCapture");
    gp_status st = GP_OK;
    for (io.layer = p->l0; io.layer < p->l1 && st == GP_OK; io.layer++)
        if ((st = gp_stage_run(lane, GP_STAGE_ATTN, &io)) == GP_OK)
            st = gp_stage_run(lane, GP_STAGE_FFN, &io);
    cudaError_t ce = cudaStreamEndCapture(p->s, &graph);
    if (st == GP_OK && ce == cudaSuccess && cudaGraphInstantiate(&p->g[m], graph, 0) != cudaSuccess)
        ce = cudaGetLastError();
    if (graph)
        cudaGraphDestroy(graph);
    if (st == GP_OK && ce != cudaSuccess)
        GP_FAIL(GP_ERR_CUDA, "PP: capturing layers [%d, %d): %s", p->l0, p->l1, cudaGetErrorString(ce));
    return st;
}

/* One PP step; *ms the device time from GPU 1's sight of the step's start
 * to its head's end. */
static gp_status pp_step(pp_side *sd, const gp_step_plan *pn, const int *ids, const int32_t *tok, int32_t *next,
                         cudaEvent_t *ev, float *ms)
{
    int ml[2];
    for (int d = 0; d < 2; d++) {
        cudaSetDevice(d);
        GP_TRY(gp_engine_step_prepare(sd[d].e, pn->B, ids, tok, sd[d].s, &ml[d]));
        for (int m = 0; m < pn->M; m++) {
            int sp = 0;
            GP_TRY(gp_lane_attn_splits(gp_engine_lane(sd[d].e), pn->nb[m], ml[d], &sp));
            if (!sd[d].g[m] || sp != sd[d].splits[m]) {
                if (sd[d].g[m])
                    cudaGraphExecDestroy(sd[d].g[m]);
                sd[d].g[m] = NULL;
                sd[d].splits[m] = sp;
                GP_TRY(pp_capture(&sd[d], pn, m, ml[d]));
            }
        }
    }
    /* ev: [0] start on GPU 0, [1] its sight on GPU 1, [2] end on GPU 1, [3 + m] GPU 0 done with m */
    cudaSetDevice(0);
    cudaEventRecord(ev[0], sd[0].s);
    gp_stage_io io = {.b0 = 0, .nb = pn->B};
    GP_TRY(gp_engine_act_view(sd[0].e, GP_ACT_RESID, 0, pn->B, &io.resid));
    GP_TRY(gp_stage_run(gp_engine_lane(sd[0].e), GP_STAGE_EMBED, &io));
    cudaSetDevice(1);
    cudaStreamWaitEvent(sd[1].s, ev[0], 0);
    cudaEventRecord(ev[1], sd[1].s);
    for (int m = 0; m < pn->M; m++) {
        gp_tensor_view r0, r1;
        GP_TRY(gp_engine_act_view(sd[0].e, GP_ACT_RESID, pn->b0[m], pn->nb[m], &r0));
        GP_TRY(gp_engine_act_view(sd[1].e, GP_ACT_RESID, pn->b0[m], pn->nb[m], &r1));
        cudaSetDevice(0);
        cudaGraphLaunch(sd[0].g[m], sd[0].s);
        cudaEventRecord(ev[3 + m], sd[0].s);
        cudaSetDevice(1);
        cudaStreamWaitEvent(sd[1].s, ev[3 + m], 0);
        cudaMemcpyPeerAsync(r1.data, 1, r0.data, 0, sizeof(float) * (size_t)r0.rows * (size_t)r0.cols, sd[1].s);
        cudaGraphLaunch(sd[1].g[m], sd[1].s);
    }
    GP_TRY(gp_engine_act_view(sd[1].e, GP_ACT_RESID, 0, pn->B, &io.resid));
    GP_TRY(gp_stage_run(gp_engine_lane(sd[1].e), GP_STAGE_HEAD, &io));
    cudaEventRecord(ev[2], sd[1].s);
    cudaError_t ce = cudaGetLastError();
    if (ce != cudaSuccess)
        GP_FAIL(GP_ERR_CUDA, "PP step: %s", cudaGetErrorString(ce));
    GP_TRY(gp_engine_step_finish(sd[1].e, pn->B, ids, next, NULL, sd[1].s));
    if ((ce = cudaEventElapsedTime(ms, ev[1], ev[2])) != cudaSuccess)
        GP_FAIL(GP_ERR_CUDA, "PP step time: %s", cudaGetErrorString(ce));
    cudaSetDevice(0);
    int32_t *unused = malloc(sizeof(int32_t) * (size_t)pn->B); /* GPU 0 ran no head: its lengths advance alone */
    gp_status st = unused ? gp_engine_step_finish(sd[0].e, pn->B, ids, unused, NULL, sd[0].s) : GP_ERR_NO_MEMORY;
    free(unused);
    return st;
}

/* PP steps at B x C for every M of o, into rows (busy shares left 0). */
static gp_status pp_rows(gp_device_weights *const *dw, const opts *o, const workload *w, afd_row *rows)
{
    const int grow = o->n_m * (o->warmup + o->repeat) + 2, L = o->cfg.n_layers;
    gp_engine_params pe = params_for(w->B, w->C + grow);
    pp_side sd[2];
    memset(sd, 0, sizeof sd);
    cudaEvent_t ev[3 + GP_PIPE_MAX_MICRO] = {0};
    int *ids = calloc((size_t)w->B, sizeof *ids);
    int32_t *tok = calloc((size_t)w->B, sizeof *tok), *next = calloc((size_t)w->B, sizeof *next);
    float *t = calloc((size_t)o->repeat, sizeof *t);
    gp_status st = ids && tok && next && t ? GP_OK : GP_ERR_NO_MEMORY;
    if (st != GP_OK)
        gp_set_error("out of host memory");
    for (int i = 0; i < w->B && st == GP_OK; i++)
        ids[i] = i, tok[i] = (int32_t)((i * 7919 + 13) % o->cfg.vocab);
    for (int d = 0; d < 2 && st == GP_OK; d++) {
        cudaSetDevice(d);
        sd[d].l0 = d ? L / 2 : 0;
        sd[d].l1 = d ? L : L / 2;
        if ((st = gp_engine_create(dw[d], &pe, &sd[d].e)) == GP_OK &&
            (st = gp_engine_fill_context(sd[d].e, w->B, w->C, 42)) == GP_OK)
            sd[d].s = (cudaStream_t)gp_lane_stream(gp_engine_lane(sd[d].e));
    }
    for (int i = 0; i < 3 + GP_PIPE_MAX_MICRO && st == GP_OK; i++) {
        cudaSetDevice(i == 0 || i >= 3 ? 0 : 1);
        if (cudaEventCreate(&ev[i]) != cudaSuccess)
            st = GP_ERR_CUDA, gp_set_error("PP: cudaEventCreate");
    }
    for (int mi = 0; mi < o->n_m && st == GP_OK; mi++) {
        gp_pipeline_params pp = gp_pipeline_default_params();
        pp.micro_batches = o->micro[mi];
        gp_step_plan pn;
        if (o->micro[mi] > w->B) {
            snprintf(rows[mi].why, sizeof rows[mi].why, "M = %d > B", o->micro[mi]);
            continue;
        }
        st = gp_pipeline_plan(&pp, L, w->B, &pn);
        for (int d = 0; d < 2; d++)
            for (int m = 0; m < GP_PIPE_MAX_MICRO; m++)
                if (sd[d].g[m]) {
                    cudaSetDevice(d);
                    cudaGraphExecDestroy(sd[d].g[m]);
                    sd[d].g[m] = NULL;
                }
        for (int i = -o->warmup; i < o->repeat && st == GP_OK; i++) {
            float ms = 0;
            st = pp_step(sd, &pn, ids, tok, next, ev, &ms);
            memcpy(tok, next, sizeof(int32_t) * (size_t)w->B);
            if (st == GP_OK && i >= 0)
                t[i] = ms;
        }
        if (st == GP_OK) {
            rows[mi].ms = gp_median_f(t, o->repeat);
            rows[mi].ran = true;
            /* the rows cross once, GPU 0 to GPU 1, each micro-batch's in its turn */
            rows[mi].cross_mb = 4.0 * w->B * o->cfg.hidden / 1e6;
        }
    }
    for (int d = 1; d >= 0; d--) {
        cudaSetDevice(d);
        for (int m = 0; m < GP_PIPE_MAX_MICRO; m++)
            if (sd[d].g[m])
                cudaGraphExecDestroy(sd[d].g[m]);
        gp_engine_destroy(sd[d].e);
    }
    for (int i = 0; i < 3 + GP_PIPE_MAX_MICRO; i++)
        if (ev[i]) {
            cudaSetDevice(i == 0 || i >= 3 ? 0 : 1);
            cudaEventDestroy(ev[i]);
        }
    cudaSetDevice(0);
    free(ids), free(tok), free(next), free(t);
    return st;
}

static int table(const opts *op, const float *one, bool pp, gp_device_weights *w0, gp_device_weights *w1);

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " [--model PRESET] [--workloads B:C,...] [--micro M,...] [--warmup N] [--repeat N]\n"
               "       [--csv FILE]\n"
               "Decode steps with attention (and the KV cache) on GPU 0 and the FFN on GPU 1 of this host,\n"
               "beside the one-GPU engine (data parallelism's rate per GPU); synthetic bf16 weights.\n"
               "  --model PRESET   default llama3-8b\n"
               "  --workloads L    default 64:1024,256:1024,64:4096,256:4096,1024:384\n"
               "  --micro L        micro-batches per step, each 1..%d; default 1,2\n"
               "  --warmup N       default 3;  --repeat N  timed steps, default 10\n"
               "  --csv FILE       also write the rows (one GPU, AFD, PP) to FILE, in gp_bench_tp's columns, for\n"
               "                   bench/placement_report.py\n",
            GP_PIPE_MAX_MICRO);
}

static int parse_micro(const char *s, opts *o)
{
    long m[GP_PIPE_MAX_MICRO];
    if (gp_parse_long_list(s, 1, GP_PIPE_MAX_MICRO, "--micro", m, GP_PIPE_MAX_MICRO, &o->n_m) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return -1;
    }
    for (int i = 0; i < o->n_m; i++)
        o->micro[i] = (int)m[i];
    return 0;
}

int main(int argc, char **argv)
{
    static opts o;
    o.warmup = 3;
    o.repeat = 10;
    const char *model = "llama3-8b", *wl = "64:1024,256:1024,64:4096,256:4096,1024:384", *micro = "1,2";
    const char *csv = NULL;
    static const struct option lo[] = {
        {"model", required_argument, NULL, 'm'},  {"workloads", required_argument, NULL, 'w'},
        {"micro", required_argument, NULL, 'M'},  {"warmup", required_argument, NULL, 'u'},
        {"repeat", required_argument, NULL, 'r'}, {"help", no_argument, NULL, 'h'},
        {"csv", required_argument, NULL, 'c'},    {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        long v = 0;
        if ((ch == 'u' || ch == 'r') &&
            gp_arg_long(PROG, optarg, ch == 'u' ? 0 : 1, 100000, ch == 'u' ? "--warmup" : "--repeat", &v))
            return 2;
        switch (ch) {
        case 'm': model = optarg; break;
        case 'w': wl = optarg; break;
        case 'M': micro = optarg; break;
        case 'u': o.warmup = (int)v; break;
        case 'r': o.repeat = (int)v; break;
        case 'c': csv = optarg; break;
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
    if (csv && !(o.csv = gp_place_csv_open(PROG, csv)))
        return 2;
    printf("# " PROG " --model %s --workloads %s --micro %s --warmup %d --repeat %d: synthetic bf16 weights, "
           "per-stage CUDA graphs, medians of device-event step times\n", model, wl, micro, o.warmup, o.repeat);
    fflush(stdout);
    /* the one-GPU rows first, with the whole model on GPU 0 where it fits */
    float one[MAX_W] = {0};
    int rc = 0;
    gp_device_weights *whole = NULL;
    if (cudaSetDevice(0) != cudaSuccess) {
        fprintf(stderr, PROG ": GPU 0: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    if (gp_bench_whole_weights(&o.cfg, &whole) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 1;
    }
    for (int i = 0; i < o.n_w; i++) {
        if (whole && one_gpu(whole, &o, &o.w[i], &one[i]) != GP_OK) {
            fprintf(stderr, PROG ": one GPU, B = %d, C = %d: %s\n", o.w[i].B, o.w[i].C, gp_last_error());
            one[i] = 0;
        }
        const gp_place_row r = gp_place_one_gpu_row(&o.cfg, false, o.w[i].B, o.w[i].C, one[i], whole != NULL);
        gp_place_csv_row(o.csv, &o.cfg, &r);
    }
    gp_device_weights_destroy(whole);
    /* the AFD rows: each GPU its groups */
    gp_device_weights *da = NULL, *df = NULL;
    const gp_weights_part pa = {.groups = (1u << GP_GROUP_ATTN) | (1u << GP_GROUP_HEAD)};
    const gp_weights_part pf = {.groups = 1u << GP_GROUP_FFN};
    gp_status st = gp_device_weights_synthetic_part(&o.cfg, GP_DTYPE_BF16, 0, &pa, &da);
    if (st == GP_OK && cudaSetDevice(1) == cudaSuccess)
        st = gp_device_weights_synthetic_part(&o.cfg, GP_DTYPE_BF16, 0, &pf, &df);
    cudaSetDevice(0);
    if (st != GP_OK) {
        fprintf(stderr, PROG ": the AFD weights: %s\n", gp_last_error());
        return 1;
    }
    printf("\n| B | C | M | AFD ms/step | GPU 0 (attention) busy | GPU 1 (FFN) busy | MB crossing per step | one GPU "
           "ms/step | tokens/s per GPU, AFD | tokens/s per GPU, one engine each (DP) | AFD / DP |\n"
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    rc |= table(&o, one, false, da, df);
    gp_device_weights_destroy(da);
    cudaSetDevice(1);
    gp_device_weights_destroy(df);
    /* PP = 2: each GPU its half of the layers (and the embedding, the head) */
    gp_device_weights *dp[2] = {NULL, NULL};
    for (int d = 0; d < 2 && st == GP_OK; d++) {
        const gp_weights_part part = {.groups = GP_GROUPS_ALL, .layer_begin = d ? o.cfg.n_layers / 2 : 0,
                                      .layer_end = d ? 0 : o.cfg.n_layers / 2};
        cudaSetDevice(d);
        st = gp_device_weights_synthetic_part(&o.cfg, GP_DTYPE_BF16, 0, &part, &dp[d]);
    }
    if (st != GP_OK) {
        fprintf(stderr, PROG ": the PP weights: %s\n", gp_last_error());
        return 1;
    }
    printf("\n| B | C | M | PP = 2 ms/step | | | MB crossing per step | one GPU ms/step | tokens/s per GPU, PP "
           "| tokens/s per GPU, one engine each (DP) | PP / DP |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    rc |= table(&o, one, true, dp[0], dp[1]);
    for (int d = 1; d >= 0; d--) {
        cudaSetDevice(d);
        gp_device_weights_destroy(dp[d]);
    }
    if (o.csv)
        fclose(o.csv);
    return rc;
}

/* The rows of one table: AFD (pp false) over weights w0 (attention, GPU 0)
 * and w1 (FFN, GPU 1), or PP over each GPU's half; 1 when a row failed
 * other than for want of memory. */
static int table(const opts *op, const float *one, bool pp, gp_device_weights *w0, gp_device_weights *w1)
{
    const opts o = *op;
    int rc = 0;
    gp_device_weights *const dw[2] = {w0, w1};
    for (int i = 0; i < o.n_w; i++) {
        const workload *w = &o.w[i];
        afd_row rows[GP_PIPE_MAX_MICRO];
        memset(rows, 0, sizeof rows);
        const gp_status ast = pp ? pp_rows(dw, &o, w, rows) : afd_rows(w0, w1, &o, w, rows);
        if (ast != GP_OK) { /* out of device memory: the row says it did not fit, the sweep goes on */
            fprintf(stderr, PROG ": %s, B = %d, C = %d: %s\n", pp ? "PP" : "AFD", w->B, w->C, gp_last_error());
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
            gp_place_row cr = gp_place_row_at(pp ? "PP" : "AFD", 2, w->B, w->C, o.micro[mi]);
            cr.ok = r->ran, cr.error = r->why[0] ? r->why : "failed", cr.ms = r->ms, cr.cross_mb = r->cross_mb;
            if (!pp)
                cr.busy0 = r->a_busy, cr.busy1 = r->f_busy;
            gp_place_csv_row(o.csv, &o.cfg, &cr);
            if (!r->ran) {
                printf("| %d | %d | %d | (%s) | | | | %s | - | %s | - |\n", w->B, w->C, o.micro[mi],
                       r->why[0] ? r->why : "failed", one_s, dp_s);
                continue;
            }
            const double afd = w->B / (r->ms * 1e-3) / 2;
            if (dp > 0)
                snprintf(ratio, sizeof ratio, "%.2f", afd / dp);
            char busy[48] = " | ";
            if (!pp)
                snprintf(busy, sizeof busy, "%.0f%% | %.0f%%", r->a_busy, r->f_busy);
            printf("| %d | %d | %d | %.3f | %s | %.1f | %s | %.0f | %s | %s |\n", w->B, w->C, o.micro[mi], r->ms, busy,
                   r->cross_mb, one_s, afd, dp_s, ratio);
        }
        fflush(stdout);
    }
    return rc;
}
