/* greenpipe generate: prefill all prompts in one batched call, then
 * greedy-decode N tokens per sequence on the chosen backend, with the
 * sequential engine or the pipelined one (attention and FFN on separate
 * resources, micro-batches through the rings), optionally dumping the
 * generated tokens' and the prompt positions' logits as JSON. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gp_engine.h"
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
    const char *dump_prompt_logits;
    uint64_t seed;
    bool seed_given;
    long block_size;
    bool pipelined;        /* --engine pipelined */
    gp_split_req split;    /* --sm-split */
    bool split_given;      /* false: the backend's default split */
    long micro_batches;    /* --micro-batches */
    bool pipe_flag_given;  /* --sm-split or --micro-batches */
    long prefill_chunk;    /* --prefill-chunk; 0: not given (the engine's default) */
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
            "  --prefill-chunk N    cuda: most prompt tokens one prefill forward takes, 1..%d; default %d\n"
            "                       (all prompts are prefilled in one batched call)\n"
            "  --dump-logits FILE   write {\"tokens\": [[ids]], \"logits\": [[[vocab floats]]]}: the logits each\n"
            "                       generated token was chosen from\n"
            "  --dump-prompt-logits FILE\n"
            "                       write {\"prompts\": [[ids]], \"logits\": [[[vocab floats]]]}: the logits at\n"
            "                       every prompt position (the last one chose the first generated token)\n"
            "  --seed S             seed of synthetic weights (presets only); default 0\n"
            "  --block-size N       KV cache block size in tokens, 1..1024; default 16\n",
            gp_config_preset_names(), GP_DEFAULT_PRESET, GP_PIPE_MAX_MICRO, GP_ENGINE_MAX_PREFILL_CHUNK,
            GP_ENGINE_DEFAULT_PREFILL_CHUNK);
}

static int parse_opts(int argc, char **argv, gen_opts *o)
{
    static const struct option longopts[] = {
        {"model", required_argument, NULL, 'm'},       {"prompt-ids", required_argument, NULL, 'p'},
        {"steps", required_argument, NULL, 'n'},       {"backend", required_argument, NULL, 'b'},
        {"dump-logits", required_argument, NULL, 'd'}, {"seed", required_argument, NULL, 's'},
        {"block-size", required_argument, NULL, 'k'},  {"engine", required_argument, NULL, 'e'},
        {"sm-split", required_argument, NULL, 'x'},    {"micro-batches", required_argument, NULL, 'M'},
        {"prefill-chunk", required_argument, NULL, 'c'}, {"dump-prompt-logits", required_argument, NULL, 'P'},
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
        case 'P':
            /* Checked now, not after the whole generation: an empty name, or
             * the next flag taken as the file ("--dump-logits --steps 3"). */
            if (!*optarg || !strncmp(optarg, "--", 2)) {
                fprintf(stderr, "greenpipe generate: --%s '%s': %s; allowed: a file path\n", flag_name(longopts, c),
                        optarg, *optarg ? "looks like a flag, not a file (a missing value?)" : "empty path");
                return 2;
            }
            *(c == 'd' ? &o->dump_logits : &o->dump_prompt_logits) = optarg;
            break;
        case 'c':
            st = gp_parse_long(optarg, 1, GP_ENGINE_MAX_PREFILL_CHUNK, "--prefill-chunk", &o->prefill_chunk);
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
    if (o->prefill_chunk && o->backend != GP_BACKEND_CUDA) {
        fprintf(stderr, "greenpipe generate: --prefill-chunk %ld applies to --backend cuda only (the cpu backend "
                "prefills position by position); allowed: leave it out, or use --backend cuda\n", o->prefill_chunk);
        return 2;
    }
    if (o->dump_logits && o->dump_prompt_logits && !strcmp(o->dump_logits, o->dump_prompt_logits)) {
        fprintf(stderr, "greenpipe generate: --dump-prompt-logits '%s' is also the --dump-logits file; allowed: "
                "another path\n", o->dump_prompt_logits);
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

/* One dump file: {"<ids_key>": [[ids]...], "logits": [[[vocab floats]...]...]}
 * where sequence s has lens[s] ids, and logits[s][i] belongs to its i-th id;
 * ids and logits are packed sequence after sequence. flag names the option
 * in messages. */
static int write_dump(const char *path, const char *flag, const char *ids_key, int n_seqs, const int *lens,
                      const int32_t *ids, const float *logits, int vocab)
{
    json_t *root = json_object(), *toks = json_array(), *lg = json_array();
    if (!root || !toks || !lg)
        goto oom;
    size_t row = 0;
    for (int s = 0; s < n_seqs; s++) {
        json_t *ts = json_array(), *ls = json_array();
        if (!ts || !ls || json_array_append_new(toks, ts) || json_array_append_new(lg, ls))
            goto oom;
        for (int t = 0; t < lens[s]; t++, row++) {
            json_t *r = json_array();
            if (json_array_append_new(ts, json_integer(ids[row])) || !r || json_array_append_new(ls, r))
                goto oom;
            const float *l = logits + row * (size_t)vocab;
            for (int v = 0; v < vocab; v++)
                if (json_array_append_new(r, json_real(l[v])))
                    goto oom;
        }
    }
    json_object_set_new(root, ids_key, toks);
    json_object_set_new(root, "logits", lg);
    /* 9 significant digits round-trip a float32 exactly. */
    if (json_dump_file(root, path, JSON_COMPACT | JSON_REAL_PRECISION(9)) != 0) {
        fprintf(stderr, "greenpipe generate: cannot write %s file '%s'\n", flag, path);
        json_decref(root);
        return 1;
    }
    json_decref(root);
    return 0;
oom:
    fprintf(stderr, "greenpipe generate: out of memory building the %s dump\n", flag);
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
    int prompt_tokens = 0;
    for (int s = 0; s < p.n_seqs; s++)
        prompt_tokens += p.lens[s];
    /* logits are kept only for the dumps */
    float *logits = o.dump_logits ? malloc((size_t)p.n_seqs * (size_t)o.steps * V * sizeof(float)) : NULL;
    float *step_logits = o.dump_logits ? malloc((size_t)p.n_seqs * V * sizeof(float)) : NULL;
    float *prompt_logits = o.dump_prompt_logits ? malloc((size_t)prompt_tokens * V * sizeof(float)) : NULL;
    int32_t *gen = malloc((size_t)p.n_seqs * (size_t)o.steps * sizeof(int32_t));
    int *seq_ids = malloc((size_t)p.n_seqs * sizeof(int)), *gen_lens = malloc((size_t)p.n_seqs * sizeof(int));
    int32_t *feed = malloc((size_t)p.n_seqs * sizeof(int32_t)), *next = malloc((size_t)p.n_seqs * sizeof(int32_t));
    gp_prefill_seq *seqs = malloc((size_t)p.n_seqs * sizeof *seqs);
    if ((o.dump_logits && (!logits || !step_logits)) || (o.dump_prompt_logits && !prompt_logits) || !gen ||
        !seq_ids || !gen_lens || !feed || !next || !seqs) {
        fprintf(stderr, "greenpipe generate: out of host memory for %d x %ld x %d logits (and %d x %d prompt "
                "logits with --dump-prompt-logits)\n", p.n_seqs, o.steps, cfg->vocab, prompt_tokens, cfg->vocab);
        goto out;
    }
    double t0 = gp_now_s();
    gp_backend_params bp = gp_backend_default_params(o.backend);
    bp.n_seqs = p.n_seqs;
    bp.max_context = (int)context;
    bp.block_size = (int)o.block_size;
    bp.pipelined = o.pipelined;
    bp.prefill_chunk = (int)o.prefill_chunk;
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
        seqs[s] = (gp_prefill_seq){.seq = s, .n = p.lens[s], .tokens = p.ids + p.offsets[s]};
        seq_ids[s] = s;
        gen_lens[s] = (int)o.steps;
    }
    /* every prompt in one call: the backend batches them (the CUDA engine in
     * chunks of --prefill-chunk tokens) */
    st = x.ops->prefill(x.ctx, p.n_seqs, seqs, next, step_logits, prompt_logits);
    if (st != GP_OK) {
        exit_code = fail("prefill", st);
        goto out;
    }
    double t2 = gp_now_s();
    for (int s = 0; s < p.n_seqs; s++) {
        gen[(size_t)s * o.steps] = next[s];
        if (logits)
            memcpy(logits + (size_t)s * o.steps * V, step_logits + (size_t)s * V, V * sizeof(float));
    }
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
    fprintf(stderr, "greenpipe: prefill of %d prompt(s), %d tokens, in one call: %.3f s, %.0f prompt tokens/s; "
            "%ld decode step(s) of batch %d in %.3f s (%.4f s/step); host-timed\n", p.n_seqs, prompt_tokens,
            t2 - t1, t2 > t1 ? prompt_tokens / (t2 - t1) : 0.0, o.steps - 1, p.n_seqs, t3 - t2,
            o.steps > 1 ? (t3 - t2) / (double)(o.steps - 1) : 0.0);
    exit_code = 0;
    if (o.dump_logits) {
        int rc = write_dump(o.dump_logits, "--dump-logits", "tokens", p.n_seqs, gen_lens, gen, logits, cfg->vocab);
        if (!rc)
            fprintf(stderr, "greenpipe: logits written to %s\n", o.dump_logits);
        exit_code |= rc;
    }
    if (o.dump_prompt_logits) {
        int rc = write_dump(o.dump_prompt_logits, "--dump-prompt-logits", "prompts", p.n_seqs, p.lens, p.ids,
                            prompt_logits, cfg->vocab);
        if (!rc)
            fprintf(stderr, "greenpipe: prompt logits written to %s\n", o.dump_prompt_logits);
        exit_code |= rc;
    }
out:
    gp_pipeline_destroy(pl);
    gp_backend_close(b);
    free(logits);
    free(step_logits);
    free(prompt_logits);
    free(gen);
    free(seq_ids);
    free(gen_lens);
    free(seqs);
    free(feed);
    free(next);
    gp_prompts_free(&p);
    return exit_code;
}
