/* decode_pipeline_case_study: runs decode workloads with the sequential engine
 * and with attention and FFN on disjoint SM partitions over the requested
 * splits, micro-batches and queue depths, and reports every row against the
 * sequential row and the floor of the performance model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "cs_run.h"
#include "gp_engine.h"

#ifndef GP_GIT_COMMIT
#define GP_GIT_COMMIT "unknown"
#endif

#define PROG "decode_pipeline_case_study"

/* The kernel driver's release (580.159.04), which cudaDriverGetVersion does
 * not give (it reports the CUDA version the driver supports). */
static bool driver_release(char *out, size_t n)
{
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    char line[512];
    bool ok = false;
    if (f && fgets(line, sizeof line, f)) {
        /* the first word made of digits and dots, with a dot: 580.159.04 */
        for (char *tok = strtok(line, " \t\n"); tok && !ok; tok = strtok(NULL, " \t\n")) {
            size_t len = strlen(tok);
            ok = len < n && tok[0] >= '0' && tok[0] <= '9' && strspn(tok, "0123456789.") == len && strchr(tok, '.');
            if (ok)
                memcpy(out, tok, len + 1);
        }
    }
    if (f)
        fclose(f);
    return ok;
}

static void fill_meta(gp_cs_meta *m, const gp_config *cfg, const char *model, int sm_count)
{
    memset(m, 0, sizeof *m);
    struct cudaDeviceProp prop;
    int drv = 0, rt = 0;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(m->gpu, sizeof m->gpu, "%.127s", prop.name);
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    m->sm_count = sm_count;
    char rel[24];
    if (driver_release(rel, sizeof rel))
        snprintf(m->driver, sizeof m->driver, "%s (CUDA %d.%d)", rel, drv / 1000, (drv % 1000) / 10);
    else
        snprintf(m->driver, sizeof m->driver, "CUDA %d.%d", drv / 1000, (drv % 1000) / 10);
    snprintf(m->cuda, sizeof m->cuda, "%d.%d", rt / 1000, (rt % 1000) / 10);
    snprintf(m->commit, sizeof m->commit, "%s", GP_GIT_COMMIT);
    /* a long checkpoint path keeps its end, the part that names it */
    size_t len = strlen(model);
    snprintf(m->model, sizeof m->model, "%.60s (%s%.60s)", cfg->name, len > 60 ? "..." : "",
             len > 60 ? model + len - 60 : model);
    time_t now = time(NULL);
    strftime(m->timestamp, sizeof m->timestamp, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
}

static void add_note(gp_cs_meta *m, const char *text)
{
    size_t len = strlen(m->notes);
    snprintf(m->notes + len, sizeof m->notes - len, "%s%s", len ? " " : "", text);
}

static gp_status load_weights(const gp_cs_options *o, gp_config *cfg, gp_device_weights **dw, bool *synthetic)
{
    gp_model_source src;
    GP_TRY(gp_model_source_resolve(o->model, o->seed, &src));
    *cfg = src.cfg;
    *synthetic = src.synthetic;
    if (src.synthetic)
        return gp_device_weights_synthetic(cfg, o->seed, dw);
    gp_host_weights w;
    GP_TRY(gp_model_source_load_host(&src, &w));
    gp_status st = gp_device_weights_upload(&w, dw);
    gp_host_weights_free(&w);
    return st;
}

/* One pool for the whole run. A split the driver refuses only fails its own
 * rows (why[i]): the pool is rebuilt from the splits that work on their own.
 * With only seq requested, the smallest split carries the executor. */
static gp_status make_pool(const gp_sm_info *info, const gp_split_plan *plans, int n, char (*why)[256],
                           gp_green_pool **pool)
{
    gp_split_req *reqs = calloc((size_t)n + 1, sizeof *reqs);
    int n_req = 0;
    if (!reqs)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of host memory");
    for (int i = 0; i < n; i++)
        if (plans[i].attn_sms > 0)
            reqs[n_req++] = (gp_split_req){plans[i].attn_sms, plans[i].ffn_sms};
    gp_split_plan first;
    int n_valid = 0;
    if (n_req == 0 && gp_split_enumerate(info, GP_SPLIT_SIDE_F, &first, 1, &n_valid) == GP_OK && n_valid > 0)
        reqs[n_req++] = (gp_split_req){first.attn_sms, first.ffn_sms};
    gp_green_pool_params pp = gp_green_pool_default_params();
    pp.splits = reqs;
    pp.n_splits = n_req;
    gp_status st = gp_green_pool_create(&pp, pool);
    if (st != GP_OK) {
        int good = 0;
        for (int i = 0; i < n; i++) {
            if (plans[i].attn_sms == 0)
                continue;
            gp_green_pool *one;
            gp_split_req req = {plans[i].attn_sms, plans[i].ffn_sms};
            pp.splits = &req;
            pp.n_splits = 1;
            if (gp_green_pool_create(&pp, &one) == GP_OK) {
                gp_green_pool_destroy(one);
                reqs[good++] = req;
            } else {
                snprintf(why[i], sizeof why[i], "%s", gp_last_error());
            }
        }
        pp.splits = reqs;
        pp.n_splits = good;
        if (good)
            st = gp_green_pool_create(&pp, pool);
    }
    free(reqs);
    return st;
}

/* With --tuning: the rule's configuration for w, run as an extra row tagged
 * "rule" when it is not seq, and a note naming it beside the best measured. */
static void run_rule_row(cs_env *env, const gp_cs_tuning *t, const gp_cs_workload *w, cs_workload_run *wr,
                         gp_cs_row *rows, int *n_rows, gp_cs_meta *meta)
{
    gp_cs_choice rule, best;
    bool found = false;
    char text[256];
    if (gp_cs_tuning_pick(t, &env->cfg, &env->info, w->B, w->C, &rule, &best, &found) != GP_OK) {
        snprintf(text, sizeof text, "Tuning rule for %s failed: %s.", w->label, gp_last_error());
        add_note(meta, text);
        return;
    }
    char best_txt[96] = "no measurement of this workload in the profile";
    if (found && best.seq)
        snprintf(best_txt, sizeof best_txt, "best measured: seq (%.3f ms)", best.ms);
    else if (found)
        snprintf(best_txt, sizeof best_txt, "best measured: A=%d M=%d depth %u (%.3f ms)", best.attn_sms, best.M,
                 best.depth, best.ms);
    if (rule.seq)
        snprintf(text, sizeof text, "Tuning rule for %s: seq; %s.", w->label, best_txt);
    else
        snprintf(text, sizeof text, "Tuning rule for %s: A=%d M=%d depth %u (row tagged rule); %s.", w->label,
                 rule.attn_sms, rule.M, rule.depth, best_txt);
    add_note(meta, text);
    int pair = rule.seq ? -1 : gp_green_pool_find(env->pool, rule.attn_sms);
    if (rule.seq || !wr)
        return;
    gp_cs_row *r = &rows[(*n_rows)++];
    snprintf(r->workload, sizeof r->workload, "%s", w->label);
    snprintf(r->tag, sizeof r->tag, "rule");
    r->B = w->B;
    r->C = w->C;
    if (pair < 0) {
        r->ok = false;
        r->M = rule.M;
        snprintf(r->error, sizeof r->error, "the rule's split A=%d is not in this run's pool", rule.attn_sms);
        return;
    }
    cs_run_pipelined(wr, pair, rule.M, rule.depth ? rule.depth : 4, r);
}

int main(int argc, char **argv)
{
    static gp_cs_options o;
    gp_cs_default_options(&o);
    int prc = gp_cs_parse_args(argc, argv, &o, stdout, stderr);
    if (prc == 1)
        return 0;
    if (prc != 0)
        return 2;
    if (gp_cuda_available() != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 1;
    }
    cs_env env = {.o = &o};
    bool synthetic = true;
    gp_status st = load_weights(&o, &env.cfg, &env.dw, &synthetic);
    if (st != GP_OK) {
        fprintf(stderr, PROG ": --model %s: %s\n", o.model, gp_last_error());
        return st == GP_ERR_NOT_FOUND || st == GP_ERR_INVALID_ARG ? 2 : 1;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    env.sm_count = prop.multiProcessorCount;
    gp_cs_meta meta;
    fill_meta(&meta, &env.cfg, synthetic ? "synthetic weights" : o.model, env.sm_count);
    if (gp_green_query(0, &env.info) != GP_OK) {
        int g = prop.major >= 9 ? 8 : prop.major == 8 ? 4 : 2;
        env.info = (gp_sm_info){.sm_count = env.sm_count, .min_partition = g, .alignment = g > 2 ? g / 2 * 2 : 2};
        add_note(&meta, "Green contexts unavailable: splits use plain streams (rows marked unpartitioned).");
    }
    char note[256] = "";
    gp_cs_scale_workloads(&o, env.sm_count, prop.totalGlobalMem / 1073741824.0, note, sizeof note);
    if (note[0])
        add_note(&meta, note);

    gp_split_plan plans[GP_CS_MAX_SPLITS + 1];
    int n_plans = 0;
    if ((st = gp_cs_resolve_splits(&o, &env.info, GP_SPLIT_SIDE_F, plans, GP_CS_MAX_SPLITS + 1, &n_plans)) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error()); /* it names --sm-splits and the split */
        gp_device_weights_destroy(env.dw);
        return 2;
    }
    gp_cs_tuning *tuning = NULL;
    if (o.tuning[0] && (st = gp_cs_tuning_read(o.tuning, &tuning)) != GP_OK) {
        fprintf(stderr, PROG ": --tuning %s: %s\n", o.tuning, gp_last_error());
        gp_device_weights_destroy(env.dw);
        return 2;
    }
    /* the rule's splits join the pool so their rows can run (only those rows) */
    static bool rule_only[GP_CS_MAX_SPLITS + 1];
    for (int wi = 0; tuning && wi < o.n_workloads; wi++) {
        gp_cs_choice rule, best;
        bool found;
        gp_split_plan pl;
        if (gp_cs_tuning_pick(tuning, &env.cfg, &env.info, o.workloads[wi].B, o.workloads[wi].C, &rule, &best,
                              &found) != GP_OK || rule.seq)
            continue;
        bool have = false;
        for (int i = 0; i < n_plans; i++)
            have = have || plans[i].attn_sms == rule.attn_sms;
        if (!have && n_plans <= GP_CS_MAX_SPLITS &&
            gp_split_plan_make(&env.info, (gp_split_req){rule.attn_sms, GP_SPLIT_REST}, GP_SPLIT_SIDE_F, &pl) == GP_OK)
            rule_only[n_plans] = true, plans[n_plans++] = pl;
    }
    static char why[GP_CS_MAX_SPLITS + 1][256];
    if ((st = make_pool(&env.info, plans, n_plans, why, &env.pool)) != GP_OK) {
        fprintf(stderr, PROG ": building the SM partitions: %s\n", gp_last_error());
        gp_device_weights_destroy(env.dw);
        return 1;
    }
    if (!gp_green_pool_partitioned(env.pool))
        add_note(&meta, "Splits ran unpartitioned (plain streams sharing all SMs).");

    int n_split_plans = 0;
    for (int i = 0; i < n_plans; i++)
        n_split_plans += plans[i].attn_sms > 0 && !rule_only[i];
    int per_workload = 1 + n_split_plans * o.n_micro * o.n_depths + (tuning ? 1 : 0);
    gp_cs_row *rows = calloc((size_t)(o.n_workloads * per_workload), sizeof *rows);
    if (!rows) {
        fprintf(stderr, PROG ": out of host memory\n");
        return 1;
    }
    int n_rows = 0, total = o.n_workloads * per_workload;
    bool progress = o.progress > 0 || (o.progress < 0 && isatty(2));
    for (int wi = 0; wi < o.n_workloads; wi++) {
        const gp_cs_workload *w = &o.workloads[wi];
        cs_workload_run wr;
        gp_status ost = cs_workload_open(&env, w, &wr);
        int first = n_rows;
        for (int pi = -1; pi < n_plans; pi++) {
            if (pi >= 0 && (plans[pi].attn_sms == 0 || rule_only[pi]))
                continue; /* seq is run first, once; rule-only splits get the rule's row */
            for (int mi = 0; mi < (pi < 0 ? 1 : o.n_micro); mi++)
                for (int di = 0; di < (pi < 0 ? 1 : o.n_depths); di++) {
                    gp_cs_row *r = &rows[n_rows++];
                    snprintf(r->workload, sizeof r->workload, "%s", w->label);
                    r->B = w->B;
                    r->C = w->C;
                    if (pi >= 0) {
                        r->split = (gp_split_info){.a_req = plans[pi].attn_sms, .f_req = plans[pi].ffn_sms,
                                                   .unit = "SMs"};
                        r->M = o.micro[mi];
                        r->depth = o.depths[di];
                    } else {
                        r->seq = true;
                    }
                    if (progress)
                        fprintf(stderr, "\r[%d/%d] %s %s M=%d depth %u          ", n_rows, total, w->label,
                                pi < 0 ? "seq" : "split", r->M, r->depth);
                    if (ost != GP_OK) {
                        r->ok = false;
                        snprintf(r->error, sizeof r->error, "workload %s: %s", w->label, gp_last_error());
                    } else if (pi < 0) {
                        cs_run_seq(&wr, r);
                    } else if (why[pi][0]) {
                        r->ok = false;
                        snprintf(r->error, sizeof r->error, "split %d:%d: %s", plans[pi].attn_sms, plans[pi].ffn_sms,
                                 why[pi]);
                    } else {
                        int pair = gp_green_pool_find(env.pool, plans[pi].attn_sms);
                        cs_run_pipelined(&wr, pair, o.micro[mi], o.depths[di], r);
                    }
                }
        }
        if (tuning)
            run_rule_row(&env, tuning, w, ost == GP_OK ? &wr : NULL, rows, &n_rows, &meta);
        if (ost == GP_OK)
            cs_workload_close(&wr);
        double seq_ms = rows[first].ok ? rows[first].ms_median : 0;
        for (int i = first; i < n_rows; i++)
            rows[i].speedup_vs_seq = rows[i].ok && seq_ms > 0 ? seq_ms / rows[i].ms_median : 0;
    }
    if (progress)
        fprintf(stderr, "\r%-70s\r", "");

    gp_cs_write_markdown(stdout, &meta, rows, n_rows);
    int failed = 0;
    for (int i = 0; i < n_rows; i++)
        failed += !rows[i].ok;
    struct {
        const char *path;
        gp_status (*fn)(const char *, const gp_cs_meta *, const gp_cs_row *, int);
    } outs[] = {{o.json, gp_cs_write_json}, {o.csv, gp_cs_write_csv}, {o.trace, gp_cs_write_trace},
                {o.svg, gp_cs_write_svg}};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        if (outs[i].path[0] && outs[i].fn(outs[i].path, &meta, rows, n_rows) != GP_OK) {
            fprintf(stderr, PROG ": %s\n", gp_last_error());
            failed++;
        }
    if (o.autotune && gp_cs_tuning_write(o.tuning_out, &meta, &env.cfg, rows, n_rows) != GP_OK) {
        fprintf(stderr, PROG ": --tuning-out: %s\n", gp_last_error());
        failed++;
    }
    if (failed)
        fprintf(stderr, PROG ": %d of %d configurations or outputs failed (see the error rows)\n", failed, n_rows);
    for (int i = 0; i < n_rows; i++)
        gp_cs_row_free(&rows[i]);
    free(rows);
    gp_cs_tuning_free(tuning);
    gp_green_pool_destroy(env.pool);
    gp_device_weights_destroy(env.dw);
    return failed ? 1 : 0;
}
