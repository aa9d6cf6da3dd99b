/* greenpipe calibrate: activation sparsity's per-layer, per-projection
 * thresholds for a model, set on the CPU reference from calibration tokens
 * (text prompts through the checkpoint's tokenizer, or random ids) and
 * written as a --sparsity FILE.json; prints what they drop. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp_model.h"
#include "gp_sparse.h"
#include "gp_tokenizer.h"
#include "gp_tools.h"

#define CAL_DEFAULT_TOKENS 512
#define CAL_MAX_TOKENS (1L << 24)
#define CAL_DEFAULT_SEQ_LEN 128
/* A prompts file is text; the cap only stops a wrong path. */
#define CAL_PROMPTS_CAP ((size_t)1 << 30)

enum { O_MODEL = 1, O_SPARSITY, O_PROMPTS, O_TOKENS, O_SEQ_LEN, O_SEED, O_THREADS, O_DTYPE, O_OUT, O_HELP };

typedef struct cal_opts {
    const char *val[O_HELP]; /* each flag's text, by O_*; NULL when not given */
    double target;
    long tokens, seq_len, threads;
    uint64_t seed;
    gp_dtype dtype; /* GP_DTYPE_AUTO unless given */
} cal_opts;

static void cal_usage(FILE *f)
{
    fprintf(f,
            "usage: greenpipe calibrate --model DIR|PRESET --sparsity S --out FILE.json [options]\n"
            "  --model DIR|PRESET   checkpoint directory or preset (%s; synthetic weights)\n"
            "  --sparsity S         the share of each layer-projection's inputs to drop, 0 <= S < 1:\n"
            "                       each threshold is the S-quantile of its inputs' magnitudes\n"
            "  --out FILE.json      where the calibration goes (greenpipe generate --sparsity FILE.json)\n"
            "  --prompts FILE       text, one prompt per line (empty lines skipped), tokenized by the\n"
            "                       checkpoint's tokenizer.json (else tokenizer.model) with its BOS, each\n"
            "                       cut at the model's max context; '-' reads standard input; default:\n"
            "                       random ids\n"
            "  --tokens N           calibration tokens in all, 1..%ld; default %d (the prompts' first N,\n"
            "                       the last prompt cut; fewer when the file holds fewer)\n"
            "  --seq-len N          random ids: tokens per sequence, 1..the model's max context;\n"
            "                       default %d (the last sequence takes the rest)\n"
            "  --seed S             seed of the random ids and of a preset's weights; default 0\n"
            "  --threads N          CPU reference threads, 0..16; default 0: the online CPUs (at most 16)\n"
            "  --dtype auto|bf16|fp16|fp32\n"
            "                       the activations' rounding, as the engine of that dtype stores them;\n"
            "                       auto (default): the engine's (--dtype auto of greenpipe generate)\n"
            "Runs the CPU reference over the tokens twice (thresholds, then what they drop and each\n"
            "FFN neuron's frequency) and prints per projection the mean threshold over the layers and\n"
            "the share of the calibration inputs it drops.\n",
            gp_config_preset_names(), CAL_MAX_TOKENS, CAL_DEFAULT_TOKENS, CAL_DEFAULT_SEQ_LEN);
}

static int parse_opts(int argc, char **argv, cal_opts *o)
{
    static const struct option opts[] = {
        {"model", required_argument, NULL, O_MODEL},     {"sparsity", required_argument, NULL, O_SPARSITY},
        {"prompts", required_argument, NULL, O_PROMPTS}, {"tokens", required_argument, NULL, O_TOKENS},
        {"seq-len", required_argument, NULL, O_SEQ_LEN}, {"seed", required_argument, NULL, O_SEED},
        {"threads", required_argument, NULL, O_THREADS}, {"dtype", required_argument, NULL, O_DTYPE},
        {"out", required_argument, NULL, O_OUT},         {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    *o = (cal_opts){.tokens = CAL_DEFAULT_TOKENS, .seq_len = CAL_DEFAULT_SEQ_LEN, .dtype = GP_DTYPE_AUTO};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == O_HELP || c == 'h') {
            cal_usage(stdout);
            return 0;
        }
        if (c == ':') {
            fprintf(stderr, "greenpipe calibrate: %s needs a value\n", argv[optind - 1]);
            return 2;
        }
        if (c == '?') {
            fprintf(stderr, "greenpipe calibrate: unknown option '%s'\n", argv[optind - 1]);
            cal_usage(stderr);
            return 2;
        }
        if (o->val[c]) {
            fprintf(stderr, "greenpipe calibrate: --%s given more than once; each option may be given once\n",
                    opts[c - 1].name);
            return 2;
        }
        o->val[c] = optarg;
        gp_status st = GP_OK;
        switch (c) {
        case O_SPARSITY:
            if ((st = gp_parse_double(optarg, "--sparsity", &o->target)) == GP_OK &&
                !(o->target >= 0.0 && o->target < 1.0)) {
                fprintf(stderr, "greenpipe calibrate: --sparsity %s is out of range; allowed [0, 1) (the share of "
                        "each projection's inputs to drop)\n", optarg);
                return 2;
            }
            break;
        case O_TOKENS: st = gp_parse_long(optarg, 1, CAL_MAX_TOKENS, "--tokens", &o->tokens); break;
        case O_SEQ_LEN: st = gp_parse_long(optarg, 1, INT32_MAX, "--seq-len", &o->seq_len); break;
        case O_SEED: st = gp_parse_u64(optarg, "--seed", &o->seed); break;
        case O_THREADS: st = gp_parse_long(optarg, 0, 16, "--threads", &o->threads); break;
        case O_DTYPE: st = gp_dtype_parse(optarg, GP_DTYPE_ALLOW_F32 | GP_DTYPE_ALLOW_AUTO, &o->dtype); break;
        case O_OUT:
        case O_PROMPTS:
            st = gp_parse_path(optarg, c == O_OUT ? "--out" : "--prompts");
            break;
        default: break;
        }
        if (st != GP_OK) {
            fprintf(stderr, "greenpipe calibrate: %s\n", gp_last_error());
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "greenpipe calibrate: unexpected argument '%s'\n", argv[optind]);
        cal_usage(stderr);
        return 2;
    }
    if (!o->val[O_MODEL] || !o->val[O_SPARSITY] || !o->val[O_OUT]) {
        fprintf(stderr, "greenpipe calibrate: --model, --sparsity and --out are required; missing:%s%s%s\n",
                o->val[O_MODEL] ? "" : " --model", o->val[O_SPARSITY] ? "" : " --sparsity",
                o->val[O_OUT] ? "" : " --out");
        cal_usage(stderr);
        return 2;
    }
    if (o->val[O_SEQ_LEN] && o->val[O_PROMPTS]) {
        fprintf(stderr, "greenpipe calibrate: --seq-len applies to random ids; with --prompts each prompt is a "
                "sequence; allowed: one of them\n");
        return 2;
    }
    /* refused now, not after a calibration that can take minutes */
    if (gp_check_out_file(o->val[O_OUT], "--out") != GP_OK) {
        fprintf(stderr, "greenpipe calibrate: %s\n", gp_last_error());
        return 2;
    }
    return -1; /* continue */
}

/* The calibration tokens: sequences one after another in ids, lens[n]. */
typedef struct cal_seqs {
    int n, cap;
    int *lens;
    int32_t *ids;
    long total, ids_cap;
} cal_seqs;

static void cal_seqs_free(cal_seqs *s)
{
    free(s->lens);
    free(s->ids);
    memset(s, 0, sizeof *s);
}

static gp_status cal_seqs_add(cal_seqs *s, const int32_t *ids, int n)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        int *l = realloc(s->lens, (size_t)cap * sizeof *l);
        if (!l)
            GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for %d calibration sequences", cap);
        s->lens = l;
        s->cap = cap;
    }
    if (s->total + n > s->ids_cap) {
        long cap = 2 * (s->total + n);
        int32_t *p = realloc(s->ids, (size_t)cap * sizeof *p);
        if (!p)
            GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for %ld calibration tokens", cap);
        s->ids = p;
        s->ids_cap = cap;
    }
    if (ids)
        memcpy(s->ids + s->total, ids, (size_t)n * sizeof *ids);
    s->lens[s->n++] = n;
    s->total += n;
    return GP_OK;
}

/* Random ids in [0, vocab): sequences of seq_len, the last taking the rest. */
static gp_status random_seqs(const cal_opts *o, const gp_config *cfg, cal_seqs *s)
{
    gp_rng r;
    gp_rng_seed(&r, o->seed, 0);
    for (long left = o->tokens; left > 0;) {
        int n = (int)(left < o->seq_len ? left : o->seq_len);
        GP_TRY(cal_seqs_add(s, NULL, n));
        int32_t *ids = s->ids + s->total - n;
        for (int i = 0; i < n; i++)
            ids[i] = (int32_t)(gp_rng_uniform(&r) * cfg->vocab);
        left -= n;
    }
    return GP_OK;
}

/* The prompts file, line by line through the checkpoint's tokenizer, until
 * --tokens; *lines receives the lines used. Returns -1 to continue, else
 * the exit code. */
static int prompt_seqs(const cal_opts *o, const gp_model_source *src, cal_seqs *s, int *lines)
{
    const char *path = o->val[O_PROMPTS];
    if (src->synthetic) {
        fprintf(stderr, "greenpipe calibrate: --prompts: --model %s is a preset (synthetic weights) and has no "
                "tokenizer; text prompts need a checkpoint directory holding tokenizer.json or tokenizer.model; "
                "with a preset, leave --prompts out (random ids)\n", o->val[O_MODEL]);
        return 2;
    }
    char *text = NULL;
    size_t len = 0;
    gp_status st = gp_read_input(path, CAL_PROMPTS_CAP, &text, &len);
    if (st != GP_OK) {
        fprintf(stderr, "greenpipe calibrate: --prompts: %s\n", gp_last_error());
        return gp_input_exit_code(st);
    }
    gp_tokenizer *tok = NULL;
    if ((st = gp_tokenizer_load_dir(src->path, &tok)) != GP_OK) {
        fprintf(stderr, "greenpipe calibrate: --prompts needs the checkpoint's tokenizer: %s\n", gp_last_error());
        free(text);
        return gp_input_exit_code(st);
    }
    const int vocab = src->cfg.vocab, max_ctx = src->cfg.max_context;
    int rc = -1, line = 0;
    *lines = 0;
    for (size_t at = 0; at < len && s->total < o->tokens && rc < 0;) {
        const char *b = text + at, *nl = memchr(b, '\n', len - at);
        size_t n = nl ? (size_t)(nl - b) : len - at;
        at += n + 1;
        line++;
        if (n && b[n - 1] == '\r') /* CRLF files */
            n--;
        if (!n)
            continue;
        int32_t *ids = NULL;
        size_t cnt = 0;
        if ((st = gp_tokenizer_encode(tok, b, n, true, &ids, &cnt)) != GP_OK) {
            fprintf(stderr, "greenpipe calibrate: --prompts %s line %d: %s\n", path, line, gp_last_error());
            rc = gp_input_exit_code(st);
            break;
        }
        for (size_t i = 0; i < cnt && rc < 0; i++)
            if (ids[i] >= vocab) {
                fprintf(stderr, "greenpipe calibrate: the tokenizer gives token %d on --prompts line %d, outside "
                        "the model's vocabulary [0, %d]: tokenizer and model do not match\n", ids[i], line,
                        vocab - 1);
                rc = 2;
            }
        long take = (long)cnt;
        if (take > max_ctx)
            take = max_ctx;
        if (take > o->tokens - s->total)
            take = o->tokens - s->total;
        if (rc < 0 && take > 0) {
            if ((st = cal_seqs_add(s, ids, (int)take)) != GP_OK) {
                fprintf(stderr, "greenpipe calibrate: %s\n", gp_last_error());
                rc = 1;
            }
            ++*lines;
        }
        free(ids);
    }
    free(text);
    gp_tokenizer_free(tok);
    if (rc < 0 && s->total == 0) {
        fprintf(stderr, "greenpipe calibrate: --prompts %s holds no prompt (every line is empty); allowed: a text "
                "file with one prompt per line\n", path);
        rc = 2;
    }
    return rc;
}

static void print_summary(const gp_sparsity *s, double secs, gp_dtype act)
{
    printf("calibrated %s on %ld tokens (%s), S = %g, %s activations, in %.2f s\n", s->model, s->tokens, s->source,
           s->target, gp_dtype_flag_name(act), secs);
    printf("%-10s %16s %28s\n", "projection", "mean threshold", "dropped: mean (min..max)");
    for (int p = 0; p < GP_SPARSE_PROJ_COUNT; p++) {
        double tsum = 0.0, zsum = 0.0, zmin = 1.0, zmax = 0.0;
        for (int l = 0; l < s->n_layers; l++) {
            double z = s->zeros[l * GP_SPARSE_PROJ_COUNT + p];
            tsum += s->thresholds[l * GP_SPARSE_PROJ_COUNT + p];
            zsum += z;
            zmin = z < zmin ? z : zmin;
            zmax = z > zmax ? z : zmax;
        }
        printf("%-10s %16.6g %12.4f (%.4f..%.4f)\n", gp_sparse_proj_name((gp_sparse_proj)p), tsum / s->n_layers,
               zsum / s->n_layers, zmin, zmax);
    }
}

int gp_cmd_calibrate(int argc, char **argv)
{
    cal_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc >= 0)
        return rc;
    gp_model_source src;
    gp_status st;
    if ((st = gp_model_source_resolve(o.val[O_MODEL], o.seed, &src)) != GP_OK) {
        fprintf(stderr, "greenpipe calibrate: --model: %s\n", gp_last_error());
        return 2;
    }
    const gp_config *cfg = &src.cfg;
    if (o.val[O_SEED] && !src.synthetic && o.val[O_PROMPTS]) {
        fprintf(stderr, "greenpipe calibrate: --seed %" PRIu64 ": --model %s is a checkpoint and --prompts gives "
                "the tokens; --seed seeds random ids (no --prompts) and a preset's weights\n", o.seed,
                o.val[O_MODEL]);
        return 2;
    }
    if (!o.val[O_PROMPTS] && o.seq_len > cfg->max_context) {
        fprintf(stderr, "greenpipe calibrate: --seq-len %ld is beyond the model's max context %d; allowed "
                "1..%d\n", o.seq_len, cfg->max_context, cfg->max_context);
        return 2;
    }
    cal_seqs seqs = {0};
    char source[256];
    if (o.val[O_PROMPTS]) {
        int lines = 0;
        if ((rc = prompt_seqs(&o, &src, &seqs, &lines)) >= 0) {
            cal_seqs_free(&seqs);
            return rc;
        }
        snprintf(source, sizeof source, "prompts %s, %d line(s)", o.val[O_PROMPTS], lines);
        if (seqs.total < o.tokens)
            fprintf(stderr, "greenpipe calibrate: --prompts %s holds %ld tokens, fewer than --tokens %ld: "
                    "calibrating on %ld\n", o.val[O_PROMPTS], seqs.total, o.tokens, seqs.total);
    } else {
        if ((st = random_seqs(&o, cfg, &seqs)) != GP_OK) {
            fprintf(stderr, "greenpipe calibrate: %s\n", gp_last_error());
            cal_seqs_free(&seqs);
            return 1;
        }
        snprintf(source, sizeof source, "random ids, seed %" PRIu64 ", sequences of %ld", o.seed, o.seq_len);
    }

    /* before the load: a checkpoint that cannot be read is refused at once */
    gp_model_identity id;
    if ((st = gp_model_identity_of(&src, &id)) != GP_OK) {
        fprintf(stderr, "greenpipe calibrate: --model %s: %s\n", o.val[O_MODEL], gp_last_error());
        cal_seqs_free(&seqs);
        return gp_input_exit_code(st);
    }
    gp_cli_progress progress;
    gp_cli_progress_init(&progress, stderr, "greenpipe");
    const gp_progress_cb pcb = gp_cli_progress_cb(&progress);
    gp_host_weights w;
    if ((st = gp_model_source_load_host_ex(&src, &w, &pcb)) != GP_OK) {
        fprintf(stderr, "greenpipe calibrate: loading the model: %s: %s\n", gp_status_str(st), gp_last_error());
        cal_seqs_free(&seqs);
        return 1;
    }
    gp_dtype act = o.dtype;
    if (act == GP_DTYPE_AUTO && (st = gp_dtype_resolve_auto(w.dtype, &act)) != GP_OK) {
        fprintf(stderr, "greenpipe calibrate: --dtype auto: %s\n", gp_last_error());
        gp_host_weights_free(&w);
        cal_seqs_free(&seqs);
        return 1;
    }
    gp_sparsity_calib_params p = gp_sparsity_calib_default_params();
    p.target = o.target;
    p.n_seqs = seqs.n;
    p.lens = seqs.lens;
    p.ids = seqs.ids;
    p.n_threads = (int)o.threads;
    p.act_dtype = act;
    p.source = source;
    p.identity = &id;
    p.progress = pcb;
    fprintf(stderr, "greenpipe: calibrating %s (%s weights) on %ld tokens in %d sequence(s), S = %g\n", cfg->name,
            gp_dtype_flag_name(w.dtype), seqs.total, seqs.n, o.target);
    double t0 = gp_now_s();
    gp_sparsity s;
    st = gp_sparsity_calibrate(&w, &p, &s);
    double secs = gp_now_s() - t0;
    gp_host_weights_free(&w);
    cal_seqs_free(&seqs);
    if (st != GP_OK) {
        fprintf(stderr, "greenpipe calibrate: %s: %s\n", gp_status_str(st), gp_last_error());
        return 1;
    }
    if ((st = gp_sparsity_save(&s, o.val[O_OUT])) != GP_OK) {
        fprintf(stderr, "greenpipe calibrate: %s\n", gp_last_error());
        gp_sparsity_free(&s);
        return 1;
    }
    print_summary(&s, secs, act);
    printf("wrote %s (for the weights of fingerprint %s: %s)\n", o.val[O_OUT], s.identity.fingerprint,
           s.identity.summary);
    gp_sparsity_free(&s);
    return 0;
}
