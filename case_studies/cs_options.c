/* decode_pipeline_case_study's command line: the getopt_long parser.
 * Everything checkable without a GPU is checked here; every refusal names
 * the flag, the value and what is allowed, then prints the usage (exit 2). */
#include "cs_impl.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gp_engine.h" /* header only, nothing of the engine is linked */
#include "kernels.h"   /* GP_GEMM_TUNE_MAX_CANDIDATES: header only */
#include "gp_model.h"
#include "gp_queues.h"
#include "gp_tools.h" /* gp_parse_size: --vram-budget takes the sizes greenpipe generate does */

/* Bounds of the numeric flags. B and C are far beyond any GPU's memory at
 * the top; the runner refuses what the model or the device cannot hold. */
#define STEPS_MAX 100000
#define REPEAT_MAX 1000
#define WARMUP_MAX 1000
#define WL_B_MAX 65536
#define WL_C_MAX 1048576

/* ------------------------------------------------------------ the parser */

enum {
    OPT_SPLITS = 256, OPT_WORKLOAD, OPT_MICRO, OPT_DEPTH, OPT_MODEL, OPT_STEPS, OPT_WARMUP, OPT_NO_WARMUP,
    OPT_REPEAT, OPT_REBALANCE, OPT_TUNING, OPT_AUTOTUNE, OPT_TUNING_OUT, OPT_SEED, OPT_JSON, OPT_CSV,
    OPT_TRACE, OPT_SVG, OPT_PROGRESS, OPT_NO_PROGRESS, OPT_STATS, OPT_PLACEMENT, OPT_GEMM_TUNE, OPT_FILL_DRAIN, OPT_CONTEXT, OPT_ATTN_KERNEL, OPT_ATTN_WARPS_CAP, OPT_ATTN_KV_EVICT, OPT_PROFILE, OPT_DTYPE, OPT_VRAM_BUDGET, OPT_END
};

static const struct option LONG_OPTS[] = {
    { "sm-splits", required_argument, NULL, OPT_SPLITS },
    { "workload", required_argument, NULL, OPT_WORKLOAD },
    { "micro-batches", required_argument, NULL, OPT_MICRO },
    { "queue-depth", required_argument, NULL, OPT_DEPTH },
    { "model", required_argument, NULL, OPT_MODEL },
    { "steps", required_argument, NULL, OPT_STEPS },
    { "warmup", optional_argument, NULL, OPT_WARMUP },
    { "no-warmup", no_argument, NULL, OPT_NO_WARMUP },
    { "repeat", required_argument, NULL, OPT_REPEAT },
    { "rebalance", required_argument, NULL, OPT_REBALANCE },
    { "tuning", required_argument, NULL, OPT_TUNING },
    { "autotune", no_argument, NULL, OPT_AUTOTUNE },
    { "tuning-out", required_argument, NULL, OPT_TUNING_OUT },
    { "seed", required_argument, NULL, OPT_SEED },
    { "json", required_argument, NULL, OPT_JSON },
    { "csv", required_argument, NULL, OPT_CSV },
    { "trace", required_argument, NULL, OPT_TRACE },
    { "svg", required_argument, NULL, OPT_SVG },
    { "progress", no_argument, NULL, OPT_PROGRESS },
    { "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
    { "stats", no_argument, NULL, OPT_STATS },
    { "placement", required_argument, NULL, OPT_PLACEMENT },
    { "gemm-tune", required_argument, NULL, OPT_GEMM_TUNE },
    { "fill-drain", required_argument, NULL, OPT_FILL_DRAIN },
    { "context", required_argument, NULL, OPT_CONTEXT },
    { "attn-kernel", required_argument, NULL, OPT_ATTN_KERNEL },
    { "attn-warps-cap", required_argument, NULL, OPT_ATTN_WARPS_CAP },
    { "attn-kv-evict", required_argument, NULL, OPT_ATTN_KV_EVICT },
    { "dtype", required_argument, NULL, OPT_DTYPE },
    { "profile", required_argument, NULL, OPT_PROFILE },
    { "vram-budget", required_argument, NULL, OPT_VRAM_BUDGET },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
};

/* What each flag accepts, for messages. */
static const char *allowed(int opt)
{
    switch (opt) {
    case OPT_SPLITS: return "a comma-separated list of distinct A:F (A + F = the GPU's SMs), A (F gets the "
                            "rest), seq, sweep; e.g. 56:76,72 or sweep";
    case OPT_WORKLOAD: return "a comma-separated list of distinct small, large or B:C (B 1..65536, C 1..1048576), "
                              "e.g. large,64:2048";
    case OPT_MICRO: return "a comma-separated list of distinct integers 1..4, e.g. 1,2,4";
    case OPT_PLACEMENT: return "qkvo-a, qkvo-f or both, comma-separated (each once)";
    case OPT_DEPTH: return "a comma-separated list of at most 8 distinct powers of two 2..4096, e.g. 4,8";
    case OPT_MODEL: return "a preset (tiny, llama3.2-1b, llama3-8b, llama3.1-8b, llama3-70b) or a checkpoint directory "
                           "holding config.json";
    case OPT_STEPS: return "an integer 1..100000";
    case OPT_WARMUP: return "--warmup or --warmup=N with N an integer 1..1000";
    case OPT_REPEAT: return "an integer 1..1000";
    case OPT_REBALANCE: return "off, ratio or model";
    case OPT_TUNING: return "a readable tuning profile (written by --autotune)";
    case OPT_PROFILE: return "a readable profile (e.g. case_studies/profiles/h100-sxm.json), or none";
    case OPT_SEED: return "an integer 0..18446744073709551615";
    case OPT_GEMM_TUNE: return "an integer 0.." CS_STR(GP_GEMM_TUNE_MAX_CANDIDATES) " (0: cuBLASLt's heuristic pick)";
    case OPT_FILL_DRAIN: return "whole or partition";
    case OPT_CONTEXT: return "random or prefill";
    case OPT_ATTN_KERNEL: return "auto, cudacore, cudacore_pipe, mma or stream";
    case OPT_ATTN_WARPS_CAP: return "0 (no cap) or an even integer 2.." CS_STR(GP_ATTN_STREAM_WARPS_CAP_MAX);
    case OPT_ATTN_KV_EVICT: return "on or off";
    case OPT_DTYPE: return "auto, bf16 or fp16";
    case OPT_VRAM_BUDGET: return "a size in bytes > 0: " GP_SIZE_UNITS ", from the model's least streaming budget "
                                 "up to the GPU's free memory";
    case OPT_TUNING_OUT:
    case OPT_JSON:
    case OPT_CSV:
    case OPT_TRACE:
    case OPT_SVG: return "a path we can write: a writable file, or a new file in a writable directory";
    default: return "no value";
    }
}

static const char *flag_name(int opt)
{
    for (const struct option *lo = LONG_OPTS; lo->name; lo++)
        if (lo->val == opt)
            return lo->name;
    return "?";
}

/* Parser state: where messages go and which flags were seen. */
typedef struct parse_ctx {
    FILE *err;
    bool seen[OPT_END - OPT_SPLITS];
} parse_ctx;

/* "CS_PROG: --flag 'value': problem; allowed: ...", then the usage; returns 2. */
static int bad(parse_ctx *c, int opt, const char *value, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int bad(parse_ctx *c, int opt, const char *value, const char *fmt, ...)
{
    char why[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (value)
        fprintf(c->err, "%s: --%s '%s': %s; allowed: %s\n\n", CS_PROG, flag_name(opt), value, why, allowed(opt));
    else
        fprintf(c->err, "%s: --%s: %s; allowed: %s\n\n", CS_PROG, flag_name(opt), why, allowed(opt));
    gp_cs_usage(c->err);
    return 2;
}

static int parse_int_flag(parse_ctx *c, int opt, const char *v, int lo, int hi, int *out)
{
    uint64_t x;
    char why[160];
    if (cs_parse_u64(v, (uint64_t)hi, &x, why, sizeof why) != 0)
        return bad(c, opt, v, "%s", why);
    if ((int64_t)x < lo)
        return bad(c, opt, v, "%llu is below %d", (unsigned long long)x, lo);
    *out = (int)x;
    return 0;
}

/* --sm-splits: seq and sweep keywords, A:F and A entries. */
static int parse_splits(parse_ctx *c, const char *v, gp_cs_options *o)
{
    char *copy, *items[GP_CS_MAX_SPLITS + 2], why[256];
    int n, rc = 0;
    /* +2: seq and sweep may sit beside GP_CS_MAX_SPLITS explicit splits */
    if (cs_split_list(v, &copy, items, GP_CS_MAX_SPLITS + 2, &n, why, sizeof why) != 0)
        return bad(c, OPT_SPLITS, v, "%s", why);
    bool seq = false;
    o->n_splits = 0;
    o->sweep = false;
    for (int i = 0; i < n && !rc; i++) {
        const char *it = items[i];
        if (strcmp(it, "seq") == 0 || strcmp(it, "sweep") == 0) {
            bool *flag = it[1] == 'e' ? &seq : &o->sweep;
            if (*flag)
                rc = bad(c, OPT_SPLITS, v, "%s appears twice", it);
            *flag = true;
            continue;
        }
        /* Each number checked strictly first: gp_split_parse alone would take
         * "-56" or " 56" and leave the refusal to the device check. */
        const char *colon = strchr(it, ':');
        char a_text[32], f_text[32] = "";
        size_t a_len = colon ? (size_t)(colon - it) : strlen(it);
        if (a_len >= sizeof a_text || (colon && strlen(colon + 1) >= sizeof f_text)) {
            rc = bad(c, OPT_SPLITS, v, "entry '%s' is not A:F or A", it);
            break;
        }
        memcpy(a_text, it, a_len);
        a_text[a_len] = '\0';
        if (colon)
            snprintf(f_text, sizeof f_text, "%s", colon + 1);
        uint64_t a, f = 0;
        if (cs_parse_u64(a_text, INT32_MAX, &a, why, sizeof why) != 0) {
            rc = bad(c, OPT_SPLITS, v, "entry '%s': attention SMs '%s': %s (expected A:F or A, seq, sweep)", it,
                     a_text, why);
            break;
        }
        if (colon && cs_parse_u64(f_text, INT32_MAX, &f, why, sizeof why) != 0) {
            rc = bad(c, OPT_SPLITS, v, "entry '%s': FFN SMs '%s': %s", it, f_text, why);
            break;
        }
        if (a == 0 || (colon && f == 0)) {
            rc = bad(c, OPT_SPLITS, v, "entry '%s': %s SMs must be at least 1", it, a == 0 ? "attention" : "FFN");
            break;
        }
        if (o->n_splits == GP_CS_MAX_SPLITS) {
            rc = bad(c, OPT_SPLITS, v, "more than %d splits", GP_CS_MAX_SPLITS);
            break;
        }
        gp_split_req r;
        if (gp_split_parse(it, &r) != GP_OK) {
            rc = bad(c, OPT_SPLITS, v, "%s", gp_last_error());
            break;
        }
        for (int k = 0; k < o->n_splits; k++)
            if (o->splits[k].attn_sms == r.attn_sms && o->splits[k].ffn_sms == r.ffn_sms) {
                rc = bad(c, OPT_SPLITS, v, "%s appears twice", it);
                break;
            }
        if (!rc)
            o->splits[o->n_splits++] = r;
    }
    free(copy);
    /* "seq" alone is a valid request: only the reference row. */
    o->splits_given = true;
    return rc;
}

static int parse_workloads(parse_ctx *c, const char *v, gp_cs_options *o)
{
    char *copy, *items[GP_CS_MAX_WORKLOADS], why[256];
    int n, rc = 0;
    if (cs_split_list(v, &copy, items, GP_CS_MAX_WORKLOADS, &n, why, sizeof why) != 0)
        return bad(c, OPT_WORKLOAD, v, "%s", why);
    o->n_workloads = 0;
    for (int i = 0; i < n && !rc; i++) {
        const char *it = items[i];
        gp_cs_workload w;
        memset(&w, 0, sizeof w);
        if (cs_workload_preset(it, &w.B, &w.C) == 0) {
            snprintf(w.label, sizeof w.label, "%s", it);
        } else {
            const char *colon = strchr(it, ':');
            char b_text[32];
            size_t b_len = colon ? (size_t)(colon - it) : 0;
            uint64_t b, cc;
            if (!colon || b_len >= sizeof b_text) {
                rc = bad(c, OPT_WORKLOAD, v, "entry '%s' is not small, large or B:C", it);
                break;
            }
            memcpy(b_text, it, b_len);
            b_text[b_len] = '\0';
            if (cs_parse_u64(b_text, WL_B_MAX, &b, why, sizeof why) != 0) {
                rc = bad(c, OPT_WORKLOAD, v, "entry '%s': B '%s': %s", it, b_text, why);
                break;
            }
            if (cs_parse_u64(colon + 1, WL_C_MAX, &cc, why, sizeof why) != 0) {
                rc = bad(c, OPT_WORKLOAD, v, "entry '%s': C '%s': %s", it, colon + 1, why);
                break;
            }
            if (b == 0 || cc == 0) {
                rc = bad(c, OPT_WORKLOAD, v, "entry '%s': %s must be at least 1", it, b == 0 ? "B" : "C");
                break;
            }
            w.B = (int)b;
            w.C = (int)cc;
            snprintf(w.label, sizeof w.label, "%d:%d", w.B, w.C);
        }
        for (int k = 0; k < o->n_workloads && !rc; k++)
            if (o->workloads[k].B == w.B && o->workloads[k].C == w.C)
                rc = strcmp(o->workloads[k].label, w.label) == 0
                         ? bad(c, OPT_WORKLOAD, v, "%s appears twice", it)
                         : bad(c, OPT_WORKLOAD, v, "%s and %s are the same workload (B %d, C %d)",
                               o->workloads[k].label, it, w.B, w.C);
        if (!rc)
            o->workloads[o->n_workloads++] = w;
    }
    free(copy);
    o->workloads_given = true;
    return rc;
}

/* A list of distinct unsigned values in [lo, hi]; pow2: powers of two only. */
static int parse_uint_list(parse_ctx *c, int opt, const char *v, unsigned lo, unsigned hi, bool pow2,
                           unsigned *out, int cap, int *n_out)
{
    /* Split with room beyond cap so that a repeated or out-of-range entry is
     * reported as such before the count is. */
    enum { ROOM = 32 };
    char *copy, *items[ROOM], why[256];
    unsigned vals[ROOM];
    int n, rc = 0;
    *n_out = 0;
    if (cs_split_list(v, &copy, items, ROOM, &n, why, sizeof why) != 0)
        return bad(c, opt, v, "%s", why);
    for (int i = 0; i < n && !rc; i++) {
        uint64_t x;
        if (cs_parse_u64(items[i], UINT32_MAX, &x, why, sizeof why) != 0)
            rc = bad(c, opt, v, "entry '%s': %s", items[i], why);
        else if (x < lo || x > hi)
            rc = bad(c, opt, v, "%llu is out of range", (unsigned long long)x);
        else if (pow2 && (x & (x - 1)))
            rc = bad(c, opt, v, "%llu is not a power of two", (unsigned long long)x);
        for (int k = 0; k < i && !rc; k++)
            if (vals[k] == x)
                rc = bad(c, opt, v, "%llu appears twice", (unsigned long long)x);
        if (!rc)
            vals[i] = (unsigned)x;
    }
    free(copy);
    if (!rc && n > cap)
        rc = bad(c, opt, v, "%d entries, more than %d", n, cap);
    if (rc)
        return rc;
    memcpy(out, vals, (size_t)n * sizeof *out);
    *n_out = n;
    return 0;
}

/* A file flag's value: not empty, fits, and not the next flag taken as a
 * value by mistake ("--json --csv x.csv"). */
static int parse_path(parse_ctx *c, int opt, const char *v, char *dst)
{
    if (!*v)
        return bad(c, opt, v, "empty path");
    if (strncmp(v, "--", 2) == 0)
        return bad(c, opt, v, "looks like a flag, not a file (a missing value?)");
    if (strlen(v) >= GP_CS_PATH)
        return bad(c, opt, v, "longer than %d characters", GP_CS_PATH - 1);
    snprintf(dst, GP_CS_PATH, "%s", v);
    return 0;
}

static int parse_model(parse_ctx *c, const char *v, gp_cs_options *o)
{
    int rc = parse_path(c, OPT_MODEL, v, o->model);
    if (rc)
        return rc;
    gp_config cfg;
    if (gp_config_preset(v, &cfg) == GP_OK)
        return 0;
    gp_clear_error();
    struct stat st;
    if (stat(v, &st) != 0 || !S_ISDIR(st.st_mode))
        return bad(c, OPT_MODEL, v, "neither a preset nor a directory");
    char cfg_path[GP_CS_PATH + 16];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", v);
    if (access(cfg_path, R_OK) != 0)
        return bad(c, OPT_MODEL, v, "the directory has no readable config.json");
    return 0;
}

/* --placement: distinct qkvo-a / qkvo-f entries. */
static int parse_placements(parse_ctx *c, const char *v, gp_cs_options *o)
{
    char buf[64];
    size_t len = strlen(v);
    if (len == 0 || len >= sizeof buf || v[0] == ',' || v[len - 1] == ',' || strstr(v, ",,"))
        return bad(c, OPT_PLACEMENT, v, "an empty or overlong entry");
    snprintf(buf, sizeof buf, "%s", v);
    o->n_placements = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        gp_placement p;
        if (gp_placement_parse(t, &p) != GP_OK)
            return bad(c, OPT_PLACEMENT, v, "'%s' is not a placement", t);
        for (int i = 0; i < o->n_placements; i++)
            if (o->placements[i] == p)
                return bad(c, OPT_PLACEMENT, v, "'%s' is listed twice", t);
        o->placements[o->n_placements++] = p;
    }
    return 0;
}

/* One option's value into o; 0, or 2 after printing why. */
static int apply(parse_ctx *c, int opt, const char *v, gp_cs_options *o)
{
    int x;
    switch (opt) {
    case OPT_SPLITS: return parse_splits(c, v, o);
    case OPT_WORKLOAD: return parse_workloads(c, v, o);
    case OPT_MICRO: {
        unsigned m[GP_PIPE_MAX_MICRO];
        int rc = parse_uint_list(c, opt, v, 1, GP_PIPE_MAX_MICRO, false, m, GP_PIPE_MAX_MICRO, &o->n_micro);
        for (int i = 0; i < o->n_micro; i++)
            o->micro[i] = (int)m[i];
        return rc;
    }
    case OPT_DEPTH:
        return parse_uint_list(c, opt, v, GP_RING_MIN_DEPTH, GP_RING_MAX_DEPTH, true, o->depths, GP_CS_MAX_DEPTHS,
                               &o->n_depths);
    case OPT_MODEL: return parse_model(c, v, o);
    case OPT_STEPS: return parse_int_flag(c, opt, v, 1, STEPS_MAX, &o->steps);
    case OPT_WARMUP:
        o->warmup = true;
        return v ? parse_int_flag(c, opt, v, 1, WARMUP_MAX, &o->warmup_steps) : 0;
    case OPT_NO_WARMUP: o->warmup = false; return 0;
    case OPT_REPEAT: return parse_int_flag(c, opt, v, 1, REPEAT_MAX, &o->repeat);
    case OPT_REBALANCE:
        return cs_rebalance_parse(v, &o->rebalance) == 0 ? 0 : bad(c, opt, v, "unknown policy");
    case OPT_TUNING:
        if ((x = parse_path(c, opt, v, o->tuning)) != 0)
            return x;
        return access(v, R_OK) == 0 ? 0 : bad(c, opt, v, "cannot be read");
    case OPT_AUTOTUNE: o->autotune = true; return 0;
    case OPT_PROFILE:
        if (strcmp(v, "none") == 0) {
            o->profile_off = true;
            return 0;
        }
        if ((x = parse_path(c, opt, v, o->profile)) != 0)
            return x;
        return access(v, R_OK) == 0 ? 0 : bad(c, opt, v, "cannot be read");
    case OPT_TUNING_OUT: return parse_path(c, opt, v, o->tuning_out);
    case OPT_SEED: {
        uint64_t s;
        char why[160];
        if (cs_parse_u64(v, UINT64_MAX, &s, why, sizeof why) != 0)
            return bad(c, opt, v, "%s", why);
        o->seed = s;
        return 0;
    }
    case OPT_JSON: return parse_path(c, opt, v, o->json);
    case OPT_CSV: return parse_path(c, opt, v, o->csv);
    case OPT_TRACE: return parse_path(c, opt, v, o->trace);
    case OPT_SVG: return parse_path(c, opt, v, o->svg);
    case OPT_PROGRESS: o->progress = 1; return 0;
    case OPT_NO_PROGRESS: o->progress = 0; return 0;
    case OPT_STATS: o->stats = true; return 0;
    case OPT_PLACEMENT: return parse_placements(c, v, o);
    case OPT_GEMM_TUNE:
        o->gemm_tune_given = true;
        return parse_int_flag(c, opt, v, 0, GP_GEMM_TUNE_MAX_CANDIDATES, &o->gemm_tune);
    case OPT_FILL_DRAIN:
        if (gp_fill_drain_parse(v, &o->fill_drain) != GP_OK)
            return bad(c, opt, v, "not a fill-drain mode");
        return 0;
    case OPT_CONTEXT:
        if (strcmp(v, "random") && strcmp(v, "prefill"))
            return bad(c, opt, v, "not a context mode");
        o->context_prefill = !strcmp(v, "prefill");
        return 0;
    case OPT_ATTN_KERNEL:
        if (gp_attn_kernel_parse(v, &o->attn_kernel) != GP_OK)
            return bad(c, opt, v, "not a decode-attention kernel");
        return 0;
    case OPT_ATTN_WARPS_CAP:
    {
        if (parse_int_flag(c, opt, v, 0, GP_ATTN_STREAM_WARPS_CAP_MAX, &o->attn_warps_cap))
            return 2;
        gp_decode_attn_params ap = gp_decode_attn_default_params();
        ap.stream_warps_cap = o->attn_warps_cap;
        if (gp_decode_attn_params_check(&ap) != GP_OK)
            return bad(c, opt, v, "%s", gp_last_error());
        return 0;
    }
    case OPT_ATTN_KV_EVICT:
        if (strcmp(v, "on") && strcmp(v, "off"))
            return bad(c, opt, v, "not on or off");
        o->attn_kv_evict_first = !strcmp(v, "on");
        return 0;
    case OPT_DTYPE:
        if (gp_dtype_parse(v, GP_DTYPE_ALLOW_AUTO, &o->dtype) != GP_OK)
            return bad(c, opt, v, "not a dtype");
        return 0;
    case OPT_VRAM_BUDGET:
        if (gp_parse_size(v, "--vram-budget", &o->vram_budget) != GP_OK) {
            /* its message without the flag (ours names it) and the form (allowed says it) */
            char why[512];
            const char *m = gp_last_error(), *pre = "--vram-budget: ";
            snprintf(why, sizeof why, "%s", strncmp(m, pre, strlen(pre)) ? m : m + strlen(pre));
            char *form = strstr(why, "; expected");
            if (form)
                *form = '\0';
            o->vram_budget = 0;
            return bad(c, opt, v, "%s", why);
        }
        return 0;
    }
    return 0;
}

/* Checks across flags, once all are in. */
static int cross_checks(parse_ctx *c, gp_cs_options *o)
{
    if (c->seen[OPT_TUNING_OUT - OPT_SPLITS] && !o->autotune)
        return bad(c, OPT_TUNING_OUT, o->tuning_out, "only used with --autotune, which was not given");
    /* Two reports into one file would overwrite each other. */
    struct { int opt; const char *path; } out[] = {
        { OPT_JSON, o->json }, { OPT_CSV, o->csv }, { OPT_TRACE, o->trace }, { OPT_SVG, o->svg },
        { OPT_TUNING_OUT, o->autotune ? o->tuning_out : "" },
    };
    int n = (int)(sizeof out / sizeof out[0]);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < i; k++)
            if (out[i].path[0] && strcmp(out[i].path, out[k].path) == 0)
                return bad(c, out[i].opt, out[i].path, "also the --%s file; give each report its own file",
                           flag_name(out[k].opt));
    /* each report tried now, not found unwritable after the measurements */
    for (int i = 0; i < n; i++) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", flag_name(out[i].opt));
        if (out[i].path[0] && gp_check_out_file(out[i].path, flag) != GP_OK) {
            /* the reason alone: bad() names the flag, the path and what is allowed */
            char why[512];
            const char *m = gp_last_error(), *from = strstr(m, "cannot write");
            snprintf(why, sizeof why, "%s", from ? from : m);
            char *cut = strstr(why, "; allowed");
            if (cut)
                *cut = '\0';
            return bad(c, out[i].opt, out[i].path, "%s", why);
        }
    }
    /* Every micro-batch needs a row: refused here rather than as error rows
     * after the weights are loaded. (M not dividing B is allowed; the
     * report shows the sizes the pipeline makes.) */
    for (int wi = 0; wi < o->n_workloads; wi++)
        for (int mi = 0; mi < o->n_micro; mi++)
            if (o->workloads[wi].B < o->micro[mi]) {
                char list[64] = "";
                for (int k = 0, used = 0; k < o->n_micro; k++)
                    used += snprintf(list + used, sizeof list - (size_t)used, "%s%d", k ? "," : "", o->micro[k]);
                return bad(c, OPT_MICRO, list, "%d micro-batches for workload %s, whose batch has %d row%s%s: "
                           "every micro-batch needs a row, so M may be at most B", o->micro[mi],
                           o->workloads[wi].label, o->workloads[wi].B, o->workloads[wi].B == 1 ? "" : "s",
                           c->seen[OPT_MICRO - OPT_SPLITS] ? "" : " (the default --micro-batches)");
            }
    /* One extra row per workload: --tuning's or the profile's, not both; and
     * --autotune's sweep is what makes a profile, not what follows one. */
    if (o->profile[0] && o->tuning[0])
        return bad(c, OPT_PROFILE, o->profile, "--tuning %s also adds a profile's row; give one of the two",
                   o->tuning);
    if (o->profile[0] && o->autotune)
        return bad(c, OPT_PROFILE, o->profile, "not with --autotune, whose sweep measures every split itself");
    /* A profile does not record the weights' residency: one measured on
     * streamed weights would mislead every run that follows it. */
    if (o->vram_budget && o->autotune)
        return bad(c, OPT_VRAM_BUDGET, NULL, "not with --autotune: its profile would hold rows measured on "
                   "streamed weights (eager, bound by the host link) for runs on resident weights to follow");
    /* --autotune measures every split unless told which. */
    if (o->autotune && !o->splits_given)
        o->sweep = true;
    return 0;
}

#ifndef GP_CS_DEFAULT_PROFILE
#define GP_CS_DEFAULT_PROFILE "case_studies/profiles/h100-sxm.json"
#endif

const char *gp_cs_profile_path(const gp_cs_options *o)
{
    if (!o || o->profile_off)
        return NULL;
    if (o->profile[0])
        return o->profile;
    /* A run that names its own configurations gets exactly those rows. */
    if (o->splits_given || o->tuning[0] || o->autotune)
        return NULL;
    return GP_CS_DEFAULT_PROFILE;
}

/* Unknown flags, missing values and values given to flags that take none. */
static int getopt_problem(parse_ctx *c, int ret, int optopt_v, const char *arg)
{
    if (ret == ':')
        return bad(c, optopt_v, NULL, "missing value");
    if (optopt_v >= OPT_SPLITS && optopt_v < OPT_END)
        return bad(c, optopt_v, NULL, "takes no value, got '%s'", arg);
    if (optopt_v == 'h' && strncmp(arg, "--", 2) == 0) {
        fprintf(c->err, "%s: --help takes no value, got '%s'\n\n", CS_PROG, arg);
    } else if (optopt_v && optopt_v != '?') {
        fprintf(c->err, "%s: unknown option '-%c'; see the options below\n\n", CS_PROG, optopt_v);
    } else {
        fprintf(c->err, "%s: unknown or ambiguous option '%s'; see the options below\n\n", CS_PROG, arg);
    }
    gp_cs_usage(c->err);
    return 2;
}

int gp_cs_parse_args(int argc, char **argv, gp_cs_options *o, FILE *out, FILE *err)
{
    gp_cs_default_options(o);
    parse_ctx c;
    memset(&c, 0, sizeof c);
    c.err = err ? err : stderr;
    out = out ? out : stdout;

    /* optind 0 makes glibc reinitialise fully, so the parser may run more
     * than once per process (the tests do); ':' first reports a missing
     * value as ':' rather than printing its own message. */
    optind = 0;
    opterr = 0;
    for (; argc > 0 && argv;) {
        int ret = getopt_long(argc, argv, ":h", LONG_OPTS, NULL);
        if (ret == -1)
            break;
        if (ret == 'h') {
            gp_cs_usage(out);
            return 1;
        }
        if (ret == '?' || ret == ':')
            return getopt_problem(&c, ret, optopt, argv[optind - 1 < argc ? optind - 1 : argc - 1]);
        /* The two spellings of a switch share one slot: "--warmup --no-warmup"
         * is as contradictory as giving --steps twice. */
        int slot = ret == OPT_NO_WARMUP ? OPT_WARMUP : ret == OPT_NO_PROGRESS ? OPT_PROGRESS : ret;
        if (c.seen[slot - OPT_SPLITS])
            return bad(&c, ret, optarg, "given more than once (or with its --no- form)");
        c.seen[slot - OPT_SPLITS] = true;
        int rc = apply(&c, ret, optarg, o);
        if (rc)
            return rc;
    }
    if (optind < argc) {
        /* "--warmup 5": an optional value must be attached with '=' */
        bool number = argv[optind][0] >= '0' && argv[optind][0] <= '9';
        fprintf(c.err, "%s: unexpected argument '%s': this program takes only options%s\n\n", CS_PROG, argv[optind],
                number ? " (an optional value is attached with '=', e.g. --warmup=5)" : "");
        gp_cs_usage(c.err);
        return 2;
    }
    return cross_checks(&c, o);
}
