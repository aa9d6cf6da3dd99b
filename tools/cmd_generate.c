/* greenpipe generate: prefill prompts, then greedy-decode N tokens per
 * sequence on the chosen backend, with the sequential engine or the
 * pipelined one (attention and FFN on separate resources, micro-batches
 * through the rings), optionally dumping the logits as JSON. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gp_green.h"
#include "gp_model.h"
#include "gp_pipeline.h"
#include "gp_tools.h"

typedef struct gen_opts {
    const char *model;
    const char *prompt_ids;
    long steps;
    gp_backend_kind backend;
    const char *dump_logits;
    uint64_t seed;
    bool seed_given;
    long block_size;
    bool pipelined;        /* --engine pipelined */
    gp_split_req split;    /* --sm-split */
    bool split_given;      /* false: the backend's default split */
    long micro_batches;    /* --micro-batches */
    bool pipe_flag_given;  /* --sm-split or --micro-batches */
} gen_opts;

static const char *flag_name(const struct option *opts, int val)
{
    for (; opts->name; opts++)
        if (opts->val == val)
            return opts->name;
    return "?";
}

static void gen_usage(FILE *f)
{
    fprintf(f,
            "usage: greenpipe generate --model DIR|PRESET --prompt-ids IDS --steps N [options]\n"
            "  --model DIR|PRESET   checkpoint directory or preset (%s); default %s\n"
            "  --prompt-ids IDS     token ids, sequences separated by ';', e.g. \"5,17,42;11,400,2\"\n"
            "  --steps N            tokens to generate per sequence, 1..100000\n"
            "  --backend cpu|cuda   cpu: the float32 reference (default); cuda: the GPU engine\n"
            "  --engine seq|pipelined\n"
            "                       seq (default): every stage in turn on the whole device; pipelined:\n"
            "                       attention and FFN stages on separate resources, micro-batches\n"
            "                       handed through per-layer rings (same tokens)\n"
            "  --sm-split A:F       pipelined: SMs of the attention and FFN partitions (cuda; 'A' alone\n"
            "                       gives F the rest; default 24), worker threads of each side (cpu;\n"
            "                       default 1:1)\n"
            "  --micro-batches M    pipelined: micro-batches per step, 1..%d and at most the number of\n"
            "                       sequences; default 2 (1 with one sequence)\n"
            "  --dump-logits FILE   write {\"tokens\": [[ids]], \"logits\": [[[vocab floats]]]}\n"
            "  --seed S             seed of synthetic weights (presets only); default 0\n"
            "  --block-size N       KV cache block size in tokens, 1..1024; default 16\n",
            gp_config_preset_names(), GP_DEFAULT_PRESET, GP_PIPE_MAX_MICRO);
}

static int parse_opts(int argc, char **argv, gen_opts *o)
{
    static const struct option longopts[] = {
        {"model", required_argument, NULL, 'm'},       {"prompt-ids", required_argument, NULL, 'p'},
        {"steps", required_argument, NULL, 'n'},       {"backend", required_argument, NULL, 'b'},
        {"dump-logits", required_argument, NULL, 'd'}, {"seed", required_argument, NULL, 's'},
        {"block-size", required_argument, NULL, 'k'},  {"engine", required_argument, NULL, 'e'},
        {"sm-split", required_argument, NULL, 'x'},    {"micro-batches", required_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},              {NULL, 0, NULL, 0},
    };
    *o = (gen_opts){.model = GP_DEFAULT_PRESET, .steps = -1, .backend = GP_BACKEND_CPU, .block_size = 16};
    optind = 1;
    opterr = 0;
    int c;
    bool seen[128] = {false}; /* by option letter: a flag given twice is refused, not last-wins */
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        gp_status st = GP_OK;
        if (c > 0 && c < 128 && c != 'h' && c != ':' && c != '?') {
            if (seen[c]) {
                fprintf(stderr, "greenpipe generate: --%s given more than once; each option may be given once\n",
                        flag_name(longopts, c));
                gen_usage(stderr);
                return 2;
            }
            seen[c] = true;
        }
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt_ids = optarg; break;
        case 'n': st = gp_parse_long(optarg, 1, 100000, "--steps", &o->steps); break;
        case 'b':
            if (gp_backend_kind_parse(optarg, &o->backend) != GP_OK) {
                fprintf(stderr, "greenpipe generate: --backend '%s' is not available; allowed: cpu, cuda\n", optarg);
                return 2;
            }
            break;
        case 'e':
            if (strcmp(optarg, "seq") && strcmp(optarg, "pipelined")) {
                fprintf(stderr, "greenpipe generate: --engine '%s': allowed seq, pipelined\n", optarg);
                return 2;
            }
            o->pipelined = !strcmp(optarg, "pipelined");
            break;
        case 'x':
            st = gp_split_parse(optarg, &o->split);
            o->split_given = o->pipe_flag_given = true;
            break;
        case 'M':
            st = gp_parse_long(optarg, 1, GP_PIPE_MAX_MICRO, "--micro-batches", &o->micro_batches);
            o->pipe_flag_given = true;
            break;
        case 'd':
            /* Checked now, not after the whole generation: an empty name, or
             * the next flag taken as the file ("--dump-logits --steps 3"). */
            if (!*optarg || !strncmp(optarg, "--", 2)) {
                fprintf(stderr, "greenpipe generate: --dump-logits '%s': %s; allowed: a file path\n", optarg,
                        *optarg ? "looks like a flag, not a file (a missing value?)" : "empty path");
                return 2;
            }
            o->dump_logits = optarg;
            break;
        case 's': st = gp_parse_u64(optarg, "--seed", &o->seed); o->seed_given = true; break;
        case 'k': st = gp_parse_long(optarg, 1, 1024, "--block-size", &o->block_size); break;
        case 'h': gen_usage(stdout); return 0;
        case ':':
            fprintf(stderr, "greenpipe generate: %s needs a value\n", argv[optind - 1]);
            gen_usage(stderr);
            return 2;
        default:
            fprintf(stderr, "greenpipe generate: unknown option '%s'\n", argv[optind - 1]);
            gen_usage(stderr);
            return 2;
        }
        if (st != GP_OK) {
            fprintf(stderr, "greenpipe generate: %s\n", gp_last_error());
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "greenpipe generate: unexpected argument '%s'\n", argv[optind]);
        gen_usage(stderr);
        return 2;
    }
    if (!o->prompt_ids || o->steps < 0) {
        fprintf(stderr, "greenpipe generate: --prompt-ids and --steps are required\n");
        gen_usage(stderr);
        return 2;
    }
    if (o->pipe_flag_given && !o->pipelined) {
        fprintf(stderr, "greenpipe generate: --sm-split and --micro-batches apply to --engine pipelined only\n");
        return 2;
    }
    if (o->split_given && (o->split.attn_sms < 1 || o->split.ffn_sms == 0)) {
        fprintf(stderr, "greenpipe generate: --sm-split %d:%d: each side needs at least one %s\n", o->split.attn_sms,
                o->split.ffn_sms, o->backend == GP_BACKEND_CPU ? "thread" : "SM");
        return 2;
    }
    if (o->backend == GP_BACKEND_CPU && o->split_given && o->split.ffn_sms == GP_SPLIT_REST) {
        fprintf(stderr, "greenpipe generate: --sm-split %d: the cpu backend counts threads; give both sides, "
                "e.g. %d:1\n", o->split.attn_sms, o->split.attn_sms);
        return 2;
    }
    return -1; /* continue */
}

/* logits[s][t] of the dump: t-th generated token of sequence s. */
static int write_dump(const char *path, const gp_prompts *p, long steps, const int32_t *gen,
                      const float *logits, int vocab)
{
    json_t *root = json_object(), *toks = json_array(), *lg = json_array();
    if (!root || !toks || !lg)
        goto oom;
    for (int s = 0; s < p->n_seqs; s++) {
        json_t *ts = json_array(), *ls = json_array();
        if (!ts || !ls || json_array_append_new(toks, ts) || json_array_append_new(lg, ls))
            goto oom;
        for (long t = 0; t < steps; t++) {
            json_t *row = json_array();
            if (json_array_append_new(ts, json_integer(gen[(size_t)s * steps + t])) || !row ||
                json_array_append_new(ls, row))
                goto oom;
            const float *l = logits + ((size_t)s * steps + t) * (size_t)vocab;
            for (int v = 0; v < vocab; v++)
                if (json_array_append_new(row, json_real(l[v])))
                    goto oom;
        }
    }
    json_object_set_new(root, "tokens", toks);
    json_object_set_new(root, "logits", lg);
    /* 9 significant digits round-trip a float32 exactly. */
    if (json_dump_file(root, path, JSON_COMPACT | JSON_REAL_PRECISION(9)) != 0) {
        fprintf(stderr, "greenpipe generate: cannot write --dump-logits file '%s'\n", path);
        json_decref(root);
        return 1;
    }
    json_decref(root);
    return 0;
oom:
    fprintf(stderr, "greenpipe generate: out of memory building the logits dump\n");
    json_decref(root);
    return 1;
}

static int fail(const char *what, gp_status st)
{
    fprintf(stderr, "greenpipe generate: %s: %s: %s\n", what, gp_status_str(st), gp_last_error());
    return 1;
}

int gp_cmd_generate(int argc, char **argv)
{
    gen_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc >= 0)
        return rc;
    gp_prompts p;
    gp_status st = gp_parse_prompts(o.prompt_ids, &p);
    if (st != GP_OK) {
        fprintf(stderr, "greenpipe generate: %s\n", gp_last_error());
        return 2;
    }
    gp_model_source src;
    if ((st = gp_model_source_resolve(o.model, o.seed, &src)) != GP_OK) {
        gp_prompts_free(&p);
        fprintf(stderr, "greenpipe generate: --model: %s\n", gp_last_error());
        return 2;
    }
    if (o.seed_given && !src.synthetic) {
        /* a checkpoint's weights are read as they are: a seed would be ignored */
        fprintf(stderr, "greenpipe generate: --seed %" PRIu64 ": --model %s is a checkpoint, not a preset; "
                "--seed applies to presets (synthetic weights) only\n", o.seed, o.model);
        gp_prompts_free(&p);
        return 2;
    }
    const gp_config *cfg = &src.cfg;
    int max_len = 0;
    for (int s = 0; s < p.n_seqs; s++) {
        for (int i = 0; i < p.lens[s]; i++)
            if (p.ids[p.offsets[s] + i] >= cfg->vocab) {
                fprintf(stderr, "greenpipe generate: --prompt-ids: token %d in sequence %d is outside "
                        "the vocabulary; allowed: [0, %d]\n", p.ids[p.offsets[s] + i], s, cfg->vocab - 1);
                gp_prompts_free(&p);
                return 2;
            }
        if (p.lens[s] > max_len)
            max_len = p.lens[s];
    }
    long context = (long)max_len + o.steps - 1; /* the last token is never fed back */
    if (context > cfg->max_context) {
        fprintf(stderr, "greenpipe generate: longest prompt (%d) + --steps (%ld) - 1 = %ld tokens exceeds "
                "the model's max context %d\n", max_len, o.steps, context, cfg->max_context);
        gp_prompts_free(&p);
        return 2;
    }
    char origin[4200];
    if (src.synthetic)
        snprintf(origin, sizeof origin, "synthetic weights, seed %" PRIu64, o.seed);
    else
        snprintf(origin, sizeof origin, "checkpoint %s", src.path);
    fprintf(stderr, "greenpipe: model %s (%s), %" PRIu64 " parameters; %d sequence(s), %ld step(s)\n",
            cfg->name, origin, gp_config_param_count(cfg), p.n_seqs, o.steps);

    int M = (int)(o.micro_batches ? o.micro_batches : (p.n_seqs > 1 ? 2 : 1));
    if (o.pipelined && M > p.n_seqs) {
        fprintf(stderr, "greenpipe generate: --micro-batches %d: each needs a sequence and there are %d; allowed "
                "1..%d\n", M, p.n_seqs, p.n_seqs);
        gp_prompts_free(&p);
        return 2;
    }
    int exit_code = 1;
    gp_backend *b = NULL;
    gp_pipeline *pl = NULL;
    size_t V = (size_t)cfg->vocab;
    /* logits are kept only for --dump-logits */
    float *logits = o.dump_logits ? malloc((size_t)p.n_seqs * (size_t)o.steps * V * sizeof(float)) : NULL;
    float *step_logits = o.dump_logits ? malloc((size_t)p.n_seqs * V * sizeof(float)) : NULL;
    int32_t *gen = malloc((size_t)p.n_seqs * (size_t)o.steps * sizeof(int32_t));
    int *seq_ids = malloc((size_t)p.n_seqs * sizeof(int));
    int32_t *feed = malloc((size_t)p.n_seqs * sizeof(int32_t)), *next = malloc((size_t)p.n_seqs * sizeof(int32_t));
    if ((o.dump_logits && (!logits || !step_logits)) || !gen || !seq_ids || !feed || !next) {
        fprintf(stderr, "greenpipe generate: out of host memory for %d x %ld x %d logits\n", p.n_seqs,
                o.steps, cfg->vocab);
        goto out;
    }
    double t0 = gp_now_s();
    gp_backend_params bp = gp_backend_default_params(o.backend);
    bp.n_seqs = p.n_seqs;
    bp.max_context = (int)context;
    bp.block_size = (int)o.block_size;
    bp.pipelined = o.pipelined;
    if (o.split_given) {
        bp.attn_units = o.split.attn_sms;
        bp.ffn_units = o.split.ffn_sms;
    }
    if ((st = gp_backend_open(&src, &bp, &b)) != GP_OK) {
        exit_code = fail("loading the model", st);
        goto out;
    }
    gp_exec x = gp_backend_exec(b);
    if (o.pipelined) {
        gp_pipeline_params pp = gp_pipeline_default_params();
        pp.micro_batches = M;
        if ((st = gp_pipeline_create(x, cfg->n_layers, &pp, &pl)) != GP_OK) {
            exit_code = fail("starting the pipeline", st);
            goto out;
        }
    }
    double t1 = gp_now_s();
    fprintf(stderr, "greenpipe: backend %s; engine %s", gp_backend_describe(b), o.pipelined ? "pipelined" : "seq");
    if (o.pipelined)
        fprintf(stderr, ", %d micro-batch(es)", M);
    fprintf(stderr, "; ready in %.2f s\n", t1 - t0);
    for (int s = 0; s < p.n_seqs; s++) {
        float *l0 = logits ? logits + (size_t)s * (size_t)o.steps * V : NULL;
        gp_prefill_seq ps = {s, p.lens[s], p.ids + p.offsets[s]};
        st = x.ops->prefill(x.ctx, 1, &ps, &gen[(size_t)s * o.steps], l0, NULL);
        if (st != GP_OK) {
            exit_code = fail("prefill", st);
            goto out;
        }
        seq_ids[s] = s;
    }
    double t2 = gp_now_s();
    for (long t = 1; t < o.steps; t++) {
        for (int s = 0; s < p.n_seqs; s++)
            feed[s] = gen[(size_t)s * o.steps + t - 1];
        st = pl ? gp_pipeline_step(pl, p.n_seqs, seq_ids, feed, next, step_logits)
                : x.ops->sequential_step(x.ctx, p.n_seqs, seq_ids, feed, next, step_logits, NULL);
        if (st != GP_OK) {
            exit_code = fail("decode step", st);
            goto out;
        }
        for (int s = 0; s < p.n_seqs; s++) {
            gen[(size_t)s * o.steps + t] = next[s];
            if (logits)
                memcpy(logits + ((size_t)s * o.steps + t) * V, step_logits + (size_t)s * V, V * sizeof(float));
        }
    }
    double t3 = gp_now_s();
    for (int s = 0; s < p.n_seqs; s++) {
        for (long t = 0; t < o.steps; t++)
            printf("%s%d", t ? " " : "", gen[(size_t)s * o.steps + t]);
        printf("\n");
    }
    int prompt_tokens = 0;
    for (int s = 0; s < p.n_seqs; s++)
        prompt_tokens += p.lens[s];
    fprintf(stderr, "greenpipe: prefill %d tokens in %.3f s; %ld decode step(s) of batch %d in %.3f s "
            "(%.4f s/step, host-timed)\n", prompt_tokens, t2 - t1, o.steps - 1, p.n_seqs, t3 - t2,
            o.steps > 1 ? (t3 - t2) / (double)(o.steps - 1) : 0.0);
    exit_code = 0;
    if (o.dump_logits) {
        exit_code = write_dump(o.dump_logits, &p, o.steps, gen, logits, cfg->vocab);
        if (!exit_code)
            fprintf(stderr, "greenpipe: logits written to %s\n", o.dump_logits);
    }
out:
    gp_pipeline_destroy(pl);
    gp_backend_close(b);
    free(logits);
    free(step_logits);
    free(gen);
    free(seq_ids);
    free(feed);
    free(next);
    gp_prompts_free(&p);
    return exit_code;
}
