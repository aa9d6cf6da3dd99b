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
#include "gp_build_info.h"
#include "gp_engine.h"
#include "gp_streaming.h"
#include "gp_weights.h"

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
    snprintf(m->commit, sizeof m->commit, "%s", gp_build_commit());
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

/* The model --model names, checked as far as it can be without a GPU:
 * config.json, the safetensors headers and every tensor the config needs.
 * A broken checkpoint is the user's to fix, reported even where no GPU is. */
static gp_status check_model(const gp_cs_options *o, gp_model_source *src)
{
    GP_TRY(gp_model_source_resolve(o->model, o->seed, src));
    if (src->synthetic)
        return GP_OK;
    gp_checkpoint *ck;
    GP_TRY(gp_checkpoint_open(src->path, &ck));
    gp_status st = gp_checkpoint_check(ck);
    gp_checkpoint_close(ck);
    return st;
}

/* Each workload's context plus the steps run on it must fit the model's
 * positions: a property of the command line and the model alone, so it is
 * refused before the GPU is looked at. (Presets only ever shrink later.) */
static gp_status check_contexts(const gp_cs_options *o, const gp_config *cfg)
{
    for (int wi = 0; wi < o->n_workloads; wi++) {
        const gp_cs_workload *w = &o->workloads[wi];
        int ctx = cs_engine_params(o, w).max_context;
        if (ctx > cfg->max_context)
            GP_FAIL(GP_ERR_INVALID_ARG, "--workload %s: context %d plus %d steps (warm-up, timed, one more) is %d "
                    "tokens, more than the %d positions of model %s; allowed: C up to %d with these --steps and "
                    "--warmup", w->label, w->C, ctx - w->C, ctx, cfg->max_context, cfg->name,
                    cfg->max_context - (ctx - w->C));
    }
    return GP_OK;
}

/* --vram-budget's streaming: the defaults, with the window of the split
 * rows (an attention group on A while F holds up to three), which the seq
 * row's window of one fits too. */
static gp_weights_stream_params stream_params(const gp_cs_options *o, const gp_config *cfg)
{
    gp_weights_stream_params sp = gp_weights_stream_default_params();
    sp.budget_bytes = o->vram_budget;
    sp.min_window = gp_weights_stream_window(cfg, 1);
    return sp;
}

/* A budget below what the split rows need at once is the command line's
 * mistake: refused from the config alone, before the GPU or any weight. */
static gp_status check_budget(const gp_cs_options *o, const gp_config *cfg)
{
    gp_weights_stream_params sp = stream_params(o, cfg);
    uint64_t least = 0;
    gp_status st = gp_weights_stream_check(cfg, &sp, &least);
    if (st != GP_OK && least > 0) {
        char msg[1400];
        snprintf(msg, sizeof msg, "%s", gp_last_error());
        GP_FAIL(st, "--vram-budget %llu bytes: %s; allowed: at least %llu bytes (%.2f GiB) for model %s, whose split "
                "rows hold the embedding/head group and %d consecutive layer groups at once", (unsigned long long)
                o->vram_budget, msg, (unsigned long long)least, least / 1073741824.0, cfg->name, sp.min_window);
    }
    return st;
}

/* Every workload's weights (or their --vram-budget) + KV cache + activations
 * against the GPU's free memory, before anything is allocated: a refusal
 * names the bytes needed and the bytes there are, instead of an allocation
 * failing half-way. */
static gp_status check_memory(const cs_env *env, int n_pairs)
{
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        GP_FAIL(GP_ERR_CUDA, "cudaMemGetInfo failed: %s", cudaGetErrorString(e));
    }
    if (env->o->vram_budget > free_b)
        GP_FAIL(GP_ERR_DEVICE_MEMORY, "--vram-budget %llu bytes (%.2f GiB) is more than the GPU has free: %zu bytes "
                "(%.2f GiB) of %zu (%.2f GiB); allowed: a budget within the free memory that leaves room for each "
                "workload's KV cache and activations", (unsigned long long)env->o->vram_budget,
                env->o->vram_budget / 1073741824.0, free_b, free_b / 1073741824.0, total_b,
                total_b / 1073741824.0);
    for (int wi = 0; wi < env->o->n_workloads; wi++) {
        const gp_cs_workload *w = &env->o->workloads[wi];
        gp_cs_memory need;
        GP_TRY(cs_workload_memory(&env->cfg, env->o, w, n_pairs, &need));
        char what[160];
        snprintf(what, sizeof what, "--workload %s (B %d, C %d) on model %s", w->label, w->B, w->C, env->cfg.name);
        gp_status st = gp_cs_memory_check(what, &need, free_b, total_b);
        if (st != GP_OK) {
            char msg[900];
            snprintf(msg, sizeof msg, "%s", gp_last_error());
            GP_FAIL(st, "%s; allowed: a workload that fits, e.g. a smaller B or C", msg);
        }
    }
    return GP_OK;
}

/* The report's account of streamed weights: the budget, what it keeps. */
static gp_status stream_meta(gp_cs_meta *m, gp_device_weights *dw, const gp_config *cfg)
{
    gp_streamer_stats ss;
    GP_TRY(gp_device_weights_stream_stats(dw, &ss, 0));
    m->vram_budget = gp_device_weights_budget(dw);
    m->weight_bytes = gp_device_weights_view(dw)->arena_bytes;
    m->layer_groups = 2 * cfg->n_layers;
    m->kept_groups = ss.kept_groups;
    m->kept_bytes = ss.kept_bytes;
    m->prefetch_depth = gp_device_weights_stream_params(dw).prefetch_depth;
    return GP_OK;
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

/* With --tuning: the profile's configuration for w (gp_cs_tuning_choose: the
 * best measured for a workload the profile holds, else the rule's), run as an
 * extra row tagged "tuned" or "rule" when it is not seq, and a note naming
 * the rule's choice beside the best measured. */
static gp_status run_rule_row(cs_env *env, const gp_cs_tuning *t, const gp_cs_workload *w, cs_workload_run *wr,
                              gp_cs_row *r, bool *made, gp_cs_meta *meta)
{
    gp_cs_choice rule, best;
    bool found = false;
    char text[256];
    *made = false;
    if (gp_cs_tuning_pick(t, &env->cfg, &env->info, w->B, w->C, &rule, &best, &found) != GP_OK) {
        snprintf(text, sizeof text, "Tuning rule for %s failed: %s.", w->label, gp_last_error());
        add_note(meta, text);
        return GP_OK;
    }
    char best_txt[96] = "no measurement of this workload in the profile";
    if (found && best.seq)
        snprintf(best_txt, sizeof best_txt, "best measured: seq (%.3f ms)", best.ms);
    else if (found)
        snprintf(best_txt, sizeof best_txt, "best measured: A=%d M=%d depth %u %s (%.3f ms)", best.attn_sms,
                 best.M, best.depth, gp_placement_name(best.placement), best.ms);
    const gp_cs_choice *use = found ? &best : &rule; /* gp_cs_tuning_choose */
    const char *row = found ? "tuned" : "rule";
    if (rule.seq)
        snprintf(text, sizeof text, "Tuning rule for %s: seq; %s%s.", w->label, best_txt,
                 found && !best.seq ? " (row tagged tuned)" : "");
    else
        snprintf(text, sizeof text, "Tuning rule for %s: A=%d M=%d depth %u %s; %s (%s).", w->label,
                 rule.attn_sms, rule.M, rule.depth, gp_placement_name(rule.placement), best_txt,
                 use->seq ? "followed: the seq row" : found ? "followed: row tagged tuned" : "followed: row tagged rule");
    add_note(meta, text);
    int pair = use->seq ? -1 : gp_green_pool_find(env->pool, use->attn_sms);
    if (use->seq || !wr)
        return GP_OK;
    *made = true;
    snprintf(r->workload, sizeof r->workload, "%s", w->label);
    snprintf(r->tag, sizeof r->tag, "%s", row);
    r->B = w->B;
    r->C = w->C;
    r->placement = use->placement;
    if (pair < 0) {
        r->ok = false;
        r->M = use->M;
        snprintf(r->error, sizeof r->error, "the %s split A=%d is not in this run's pool", row, use->attn_sms);
        return GP_ERR_NOT_FOUND;
    }
    return cs_run_pipelined(wr, pair, use->M, use->depth ? use->depth : 4, r);
}

/* The profile's row of a workload (gp_cs_profile_choose made the choice and
 * its note before the run), when the choice is a split. */
static gp_status run_profile_row(cs_env *env, const gp_cs_profile_choice *pc, const gp_cs_workload *w,
                                 cs_workload_run *wr, gp_cs_row *r, bool *made)
{
    *made = false;
    if (!pc->row || !wr)
        return GP_OK;
    *made = true;
    snprintf(r->workload, sizeof r->workload, "%s", w->label);
    snprintf(r->tag, sizeof r->tag, "%s", pc->tag);
    r->B = w->B;
    r->C = w->C;
    r->placement = pc->choice.placement;
    int pair = gp_green_pool_find(env->pool, pc->choice.attn_sms);
    if (pair < 0) {
        r->ok = false;
        r->M = pc->choice.M;
        snprintf(r->error, sizeof r->error, "the profile's split A=%d is not in this run's pool",
                 pc->choice.attn_sms);
        return GP_ERR_NOT_FOUND;
    }
    return cs_run_pipelined(wr, pair, pc->choice.M, pc->choice.depth, r);
}

/* The profile a run follows (gp_cs_profile_path), loaded, with its choice
 * per workload, its notes, the splits its rows need (added to plans as
 * rows-less plans) and the GEMM tuning they were measured with. A missing
 * shipped profile is a note; a broken one, or an unreadable --profile, is
 * a bad command line (exit 2). */
static int load_profile(gp_cs_options *o, cs_env *env, const struct cudaDeviceProp *prop, gp_cs_meta *meta,
                        gp_split_plan *plans, int *n_plans, bool *rows_less, gp_cs_tuning **out,
                        gp_cs_profile_choice *pc)
{
    *out = NULL;
    const char *path = gp_cs_profile_path(o);
    char note[900];
    if (!path)
        return 0;
    gp_status st = gp_cs_tuning_read(path, out);
    if (st == GP_ERR_IO && !o->profile[0]) {
        snprintf(note, sizeof note, "No best-known rows: the shipped profile cannot be read (%s).", gp_last_error());
        add_note(meta, note);
        return 0;
    }
    if (st != GP_OK) {
        fprintf(stderr, PROG ": %s %s: %s%s\n", o->profile[0] ? "--profile" : "the shipped profile", path,
                gp_last_error(), o->profile[0] ? "" : " (--profile none runs without it)");
        return 2;
    }
    gp_cs_device dev = {.sm_count = env->sm_count, .cc_major = prop->major, .cc_minor = prop->minor};
    snprintf(dev.name, sizeof dev.name, "%.127s", prop->name);
    char why[256];
    const gp_cs_tuning *t = *out;
    if (gp_cs_tuning_device_matches(t, &dev, why, sizeof why))
        snprintf(note, sizeof note, "Profile %s (%s) was measured on this GPU%s%s; its rows are tagged best-known.",
                 gp_cs_tuning_name(t), path, gp_cs_tuning_source(t)[0] ? ": " : "", gp_cs_tuning_source(t));
    else
        snprintf(note, sizeof note, "Profile %s (%s) does not apply to this GPU (%s); rows tagged cold-start rule "
                 "follow its rule.", gp_cs_tuning_name(t), path, why);
    add_note(meta, note);
    for (int wi = 0; wi < o->n_workloads; wi++) {
        gp_cs_workload *w = &o->workloads[wi];
        if (gp_cs_profile_choose(t, &dev, &env->cfg, &env->info, w, &pc[wi]) != GP_OK) {
            snprintf(note, sizeof note, "Profile %s for %s: no choice (%s).", gp_cs_tuning_name(t), w->label,
                     gp_last_error());
            add_note(meta, note);
            continue;
        }
        add_note(meta, pc[wi].note);
        if (!pc[wi].row)
            continue;
        int tune = pc[wi].choice.gemm_tune;
        if (tune > 0 && !o->gemm_tune_given) {
            w->gemm_tune = tune;
            snprintf(note, sizeof note, "GEMM algorithms of workload %s: the fastest of cuBLASLt's first %d "
                     "candidates, as the profile's row was measured, seq included.", w->label, tune);
            add_note(meta, note);
        } else if (tune != o->gemm_tune) {
            snprintf(note, sizeof note, "The profile's row for %s was measured with --gemm-tune %d; this run "
                     "uses %d.", w->label, tune, o->gemm_tune);
            add_note(meta, note);
        }
        bool have = false;
        for (int i = 0; i < *n_plans; i++)
            have = have || plans[i].attn_sms == pc[wi].choice.attn_sms;
        gp_split_plan pl;
        if (!have && *n_plans <= GP_CS_MAX_SPLITS &&
            gp_split_plan_make(&env->info, (gp_split_req){pc[wi].choice.attn_sms, GP_SPLIT_REST}, GP_SPLIT_SIDE_F,
                               &pl) == GP_OK)
            rows_less[*n_plans] = true, plans[(*n_plans)++] = pl;
    }
    return 0;
}

/* The CUDA side of the sweep (gp_cs_runner): one workload open at a time. */
typedef struct cs_main_runner {
    cs_env *env;
    const gp_split_plan *plans;
    const gp_cs_tuning *tuning;
    const gp_cs_profile_choice *profile; /* [n_workloads], with a profile */
    gp_cs_meta *meta;
    cs_workload_run wr;
} cs_main_runner;

static gp_status rn_open(void *ctx, int wi)
{
    cs_main_runner *c = ctx;
    return cs_workload_open(c->env, &c->env->o->workloads[wi], &c->wr);
}

static void rn_close(void *ctx, int wi)
{
    cs_workload_close(&((cs_main_runner *)ctx)->wr);
}

static gp_status rn_run(void *ctx, int wi, int plan, int M, unsigned depth, gp_cs_row *r)
{
    cs_main_runner *c = ctx;
    if (plan == 0)
        return cs_run_seq(&c->wr, r);
    return cs_run_pipelined(&c->wr, gp_green_pool_find(c->env->pool, c->plans[plan].attn_sms), M, depth, r);
}

static gp_status rn_extra(void *ctx, int wi, bool opened, gp_cs_row *r, bool *made)
{
    cs_main_runner *c = ctx;
    if (c->profile)
        return run_profile_row(c->env, &c->profile[wi], &c->env->o->workloads[wi], opened ? &c->wr : NULL, r,
                               made);
    return run_rule_row(c->env, c->tuning, &c->env->o->workloads[wi], opened ? &c->wr : NULL, r, made, c->meta);
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
    gp_model_source src;
    gp_status st = check_model(&o, &src);
    if (st != GP_OK) {
        fprintf(stderr, PROG ": --model %s: %s\n", o.model, gp_last_error());
        return 2;
    }
    if (check_contexts(&o, &src.cfg) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 2;
    }
    if (o.vram_budget && check_budget(&o, &src.cfg) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 2;
    }
    if (gp_cuda_available() != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 1;
    }
    cs_env env = {.o = &o, .cfg = src.cfg};
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    env.sm_count = prop.multiProcessorCount;
    gp_cs_meta meta;
    fill_meta(&meta, &env.cfg, src.synthetic ? "synthetic weights" : o.model, env.sm_count);
    if (gp_green_query(0, &env.info) != GP_OK) {
        env.info = gp_sm_info_guess(env.sm_count, prop.major);
        add_note(&meta, "Green contexts unavailable: splits use plain streams (rows marked unpartitioned).");
    }
    char note[256] = "";
    gp_cs_scale_workloads(&o, env.sm_count, prop.totalGlobalMem / 1073741824.0, note, sizeof note);
    if (note[0])
        add_note(&meta, note);
    gp_cs_micro_note(&o, note, sizeof note);
    if (note[0])
        add_note(&meta, note);
    snprintf(note, sizeof note, "Fill and drain (the first attention stage, the last FFN stage, the LM head) "
             "run on %s (--fill-drain %s).", o.fill_drain == GP_FILL_DRAIN_WHOLE ? "the whole GPU" :
             "the attention and FFN partitions", gp_fill_drain_name(o.fill_drain));
    add_note(&meta, note);
    if (o.context_prefill)
        add_note(&meta, "Contexts: a batched prefill of C random tokens per sequence, once per workload "
                 "(--context prefill); each repeat decodes again from it.");
    if (o.gemm_tune > 0) {
        snprintf(note, sizeof note, "GEMM algorithms: the fastest of cuBLASLt's first %d candidates, "
                 "timed on each row's own partitions (--gemm-tune), seq included.", o.gemm_tune);
        add_note(&meta, note);
    }

    gp_split_plan plans[GP_CS_MAX_SPLITS + 1];
    int n_plans = 0;
    if ((st = gp_cs_resolve_splits(&o, &env.info, GP_SPLIT_SIDE_F, plans, GP_CS_MAX_SPLITS + 1, &n_plans)) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error()); /* it names --sm-splits and the split */
        return 2;
    }
    gp_cs_tuning *tuning = NULL;
    if (o.tuning[0] && (st = gp_cs_tuning_read(o.tuning, &tuning)) != GP_OK) {
        fprintf(stderr, PROG ": --tuning %s: %s\n", o.tuning, gp_last_error());
        return 2;
    }
    /* the profile's splits join the pool so their rows can run (only those rows) */
    static bool rule_only[GP_CS_MAX_SPLITS + 1];
    for (int wi = 0; tuning && wi < o.n_workloads; wi++) {
        gp_cs_choice use;
        bool measured;
        gp_split_plan pl;
        if (gp_cs_tuning_choose(tuning, &env.cfg, &env.info, o.workloads[wi].B, o.workloads[wi].C, &use,
                                &measured) != GP_OK || use.seq)
            continue;
        bool have = false;
        for (int i = 0; i < n_plans; i++)
            have = have || plans[i].attn_sms == use.attn_sms;
        if (!have && n_plans <= GP_CS_MAX_SPLITS &&
            gp_split_plan_make(&env.info, (gp_split_req){use.attn_sms, GP_SPLIT_REST}, GP_SPLIT_SIDE_F, &pl) == GP_OK)
            rule_only[n_plans] = true, plans[n_plans++] = pl;
    }
    gp_cs_tuning *profile = NULL;
    static gp_cs_profile_choice pchoice[GP_CS_MAX_WORKLOADS];
    if (load_profile(&o, &env, &prop, &meta, plans, &n_plans, rule_only, &profile, pchoice) != 0) {
        gp_cs_tuning_free(tuning);
        return 2;
    }
    int n_pairs = 0;
    for (int i = 0; i < n_plans; i++)
        n_pairs += plans[i].attn_sms > 0;
    if ((st = check_memory(&env, n_pairs)) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        gp_cs_tuning_free(tuning);
        gp_cs_tuning_free(profile);
        return st == GP_ERR_DEVICE_MEMORY || st == GP_ERR_INVALID_ARG ? 2 : 1;
    }
    if (o.vram_budget) {
        gp_weights_stream_params wsp = stream_params(&o, &env.cfg);
        st = gp_device_weights_streamed_load(&src, o.dtype, &wsp, &env.dw);
    } else {
        st = gp_device_weights_load(&src, o.dtype, &env.dw);
    }
    if (st == GP_OK && o.vram_budget && (st = stream_meta(&meta, env.dw, &env.cfg)) != GP_OK)
        gp_device_weights_destroy(env.dw);
    if (st != GP_OK) {
        fprintf(stderr, PROG ": --model %s%s: %s\n", o.model, o.vram_budget ? " with --vram-budget" : "",
                gp_last_error());
        gp_cs_tuning_free(tuning);
        gp_cs_tuning_free(profile);
        /* a budget the GPU cannot hold after all (its free memory shrank) is the command line's, as above */
        return st == GP_ERR_NOT_FOUND || st == GP_ERR_INVALID_ARG ||
                       (o.vram_budget && st == GP_ERR_DEVICE_MEMORY) ? 2 : 1;
    }
    snprintf(meta.dtype, sizeof meta.dtype, "%s", gp_dtype_flag_name(gp_device_weights_dtype(env.dw)));
    static char why[GP_CS_MAX_SPLITS + 1][256];
    if ((st = make_pool(&env.info, plans, n_plans, why, &env.pool)) != GP_OK) {
        fprintf(stderr, PROG ": building the SM partitions: %s\n", gp_last_error());
        gp_device_weights_destroy(env.dw);
        return 1;
    }
    if (!gp_green_pool_partitioned(env.pool))
        add_note(&meta, "Splits ran unpartitioned (plain streams sharing all SMs).");

    gp_cs_sweep_params sp = {.o = &o, .plans = plans, .n_plans = n_plans, .no_rows = rule_only,
                             .why = (const char(*)[256])why, .extra = tuning || profile,
                             .progress = o.progress > 0 || (o.progress < 0 && isatty(2)) ? stderr : NULL};
    int cap = gp_cs_sweep_count(&sp);
    gp_cs_row *rows = calloc((size_t)(cap > 0 ? cap : 1), sizeof *rows);
    if (!rows) {
        fprintf(stderr, PROG ": out of host memory\n");
        return 1;
    }
    /* From here a SIGINT or SIGTERM ends the sweep after the row in progress
     * and the reports are still written; before, it ends the program as
     * usual (nothing measured yet). */
    if (gp_cs_signals_install() != GP_OK)
        fprintf(stderr, PROG ": %s; an interrupt will end the run without reports\n", gp_last_error());
    cs_main_runner mr = {.env = &env, .plans = plans, .tuning = tuning, .profile = profile ? pchoice : NULL,
                         .meta = &meta};
    gp_cs_runner rn = {.ctx = &mr, .open = rn_open, .close = rn_close, .run = rn_run,
                       .extra = tuning || profile ? rn_extra : NULL};
    gp_cs_sweep_result res;
    if ((st = gp_cs_sweep_run(&sp, &rn, rows, cap, &res)) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 1;
    }
    int failed = 0;
    if (o.autotune && (res.n_rows < res.planned || res.stop == GP_CS_STOP_DEVICE_FAULT)) {
        /* a rule fitted on part of a sweep would mislead every later run */
        fprintf(stderr, PROG ": --autotune: the sweep did not finish; %s was not written\n", o.tuning_out);
    } else if (o.autotune && gp_cs_tuning_write(o.tuning_out, &meta, &env.cfg, rows, res.n_rows) != GP_OK) {
        fprintf(stderr, PROG ": --tuning-out: %s\n", gp_last_error());
        failed++;
    }
    int rc = gp_cs_finish(&o, &meta, rows, &res, failed, stdout, stderr);
    for (int i = 0; i < res.n_rows; i++)
        gp_cs_row_free(&rows[i]);
    free(rows);
    gp_cs_tuning_free(tuning);
    gp_cs_tuning_free(profile);
    /* After a device fault the context is unusable: the GPU's resources go
     * with the process rather than through calls that would only fail. */
    if (res.stop != GP_CS_STOP_DEVICE_FAULT) {
        gp_green_pool_destroy(env.pool);
        gp_device_weights_destroy(env.dw);
    }
    return rc;
}
