/* greenpipe generate: prefill all prompts (token ids, or text through the
 * checkpoint's tokenizer) in one batched call, then decode up to N tokens per
 * sequence, greedily or sampled (gen_loop.c), on the chosen backend, with the
 * sequential engine or the pipelined one (attention and FFN on separate
 * resources, micro-batches through the rings); text prompts stop at the
 * checkpoint's EOS ids or a stop string and print their text as it arrives;
 * Ctrl-C ends the run at a step boundary, printing what it has; optionally dumps the generated
 * tokens' and the prompt positions' logits as JSON. With stored prefixes
 * (--kv-store-size, cuda) the prompts are prefilled one at a time instead,
 * each reusing the whole blocks earlier prompts stored, then storing its own. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gp_engine.h"
#include "gen_loop_impl.h"
#include "gen_text_impl.h"
#include "gp_green.h"
#include "gp_kvstore.h"
#include "gp_model.h"
#include "gp_pipeline.h"
#include "gp_sparse.h"
#include "gp_tools.h"

typedef struct gen_opts {
    const char *model;
    const char *prompt_ids;
    const char **prompts;  /* --prompt, in order (argv's strings); [argc] */
    int n_prompts;
    const char *prompt_file; /* "-": standard input */
    bool allow_empty;      /* --allow-empty-prompt: a 0-byte text prompt is BOS alone */
    bool ignore_eos;
    gp_dtype dtype;        /* --dtype (cuda): GP_DTYPE_AUTO unless given */
    bool dtype_given;
    gp_sample_params sample; /* temperature 0: greedy */
    bool temperature_given;
    bool top_given;        /* --top-k, --top-p or --min-p: sampling, at temperature 1 unless given */
    gp_repeat_params repeat; /* --repeat-penalty, --repeat-last-n */
    bool repeat_given, last_n_given;
    const char **stops;    /* --stop, in order (argv's strings); [argc] */
    int n_stops;
    long threads;          /* --threads; 0: not given (the cpu backend's default) */
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
    uint64_t vram_budget;  /* --vram-budget bytes; 0: not given (weights resident on the device) */
    const char *sparsity;  /* --sparsity FILE.json; NULL: dense */
    const char *sparsity_stats; /* --sparsity-stats FILE.json; NULL: none written */
    uint64_t kv_store_size; /* --kv-store-size bytes; 0: not given (no stored prefixes) */
    uint64_t kv_vram_budget; /* --kv-vram-budget bytes; 0: not given (the whole KV cache on the device) */
    const char *kv_store_dir; /* --kv-store DIR; NULL: memory only */
    long kv_store_block;   /* --kv-store-block tokens; 0: not given (GP_PREFIX_DEFAULT_BLOCK_TOKENS) */
    uint64_t cpu_ffn;      /* --cpu-ffn bytes of hot cache; 0: not given (the whole FFN on the GPU) */
    long cpu_ffn_threads;  /* --cpu-ffn-threads; 0: the online CPUs up to 16 */
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
            "usage: greenpipe generate --model DIR|PRESET (--prompt TEXT... | --prompt-file FILE | --prompt-ids IDS)\n"
            "                          --steps N [options]\n"
            "  --model DIR|PRESET   checkpoint directory or preset (%s); default %s\n"
            "  --prompt TEXT        a text prompt, tokenized by the checkpoint's tokenizer.json (else\n"
            "                       tokenizer.model) with its BOS; repeatable, one sequence each. Prints\n"
            "                       the generated text (not the prompt) on stdout: one sequence is\n"
            "                       streamed as its tokens arrive, then a newline; several print one line\n"
            "                       \"[s] text\" each (s from 0) when that sequence finishes. A sequence\n"
            "                       stops at an EOS id (eos_token_id of generation_config.json, else of\n"
            "                       config.json; not printed), at a --stop string or after N tokens;\n"
            "                       finished sequences stay in the batch until all are done, their tokens\n"
            "                       discarded\n"
            "  --prompt-file FILE   one text prompt: the file's exact bytes (as --prompt); '-' reads standard\n"
            "                       input, and pipes and <(...) are read to their end\n"
            "  --allow-empty-prompt let a text prompt of 0 bytes through as BOS alone (refused otherwise:\n"
            "                       an empty pipe or file is more often a mistake than a wish)\n"
            "  --prompt-ids IDS     token ids, sequences separated by ';', e.g. \"5,17,42;11,400,2\"; prints\n"
            "                       each sequence's N generated ids on one line; no EOS stop\n"
            "  --steps N            tokens to generate per sequence, 1..100000\n"
            "  --ignore-eos         text prompts: generate N tokens, EOS or not\n"
            "  --temperature T      sample at temperature T, 0..%g; 0: greedy (argmax). Default 0, or 1\n"
            "                       when --top-k, --top-p or --min-p is given (they turn sampling on)\n"
            "  --top-k K            sampling: keep the K most likely tokens, 0..vocab; 0 (default): all\n"
            "  --top-p P            sampling: keep the smallest set of most likely tokens (after top-k)\n"
            "                       holding probability P, (0, 1]; 1 (default): all\n"
            "  --min-p P            sampling: keep (after top-k and top-p) the tokens whose probability is\n"
            "                       at least P times the most likely one's, [0, 1]; 0 (default): all\n"
            "  --repeat-penalty R   llama.cpp's: the logit of each distinct token among the last\n"
            "                       --repeat-last-n tokens of the sequence (prompt included) is divided by R\n"
            "                       when positive, multiplied by R otherwise, before sampling or the greedy\n"
            "                       choice (logits then come to the host every step); (0, %g]; 1 (default):\n"
            "                       off. --dump-logits keeps the model's logits, before the penalty\n"
            "  --repeat-last-n N    with --repeat-penalty: the tokens it looks back over; default %d; -1: the\n"
            "                       whole context; 0: off\n"
            "  --stop TEXT          text prompts: a sequence ends once its generated text contains TEXT,\n"
            "                       printed up to it (TEXT and what follows are not); repeatable, the first\n"
            "                       found ends it. Text that may begin TEXT is held back until settled\n"
            "  --backend cpu|cuda   cpu: the float32 reference (default); cuda: the GPU engine\n"
            "  --threads N          cpu: threads of the reference's worker, which prefills and runs\n"
            "                       sequential steps (pipelined steps take --sm-split's), 1..%d; default\n"
            "                       the online CPUs up to %d (or GP_REF_THREADS); the status line says\n"
            "                       how many run\n"
            "  --dtype auto|bf16|fp16 (any case)\n"
            "                       cuda: the engine's 16-bit type (float32 accumulation); auto (default):\n"
            "                       the checkpoint's own, bf16 for an fp32 checkpoint and for presets.\n"
            "                       cpu: only auto, the checkpoint's own values held in float32\n"
            "  --engine seq|pipelined\n"
            "                       seq (default): every stage in turn on the whole device; pipelined:\n"
            "                       attention and FFN stages on separate resources, micro-batches\n"
            "                       handed through per-layer rings (same tokens)\n"
            "  --sm-split A:F       pipelined: SMs of the attention and FFN partitions (cuda; 'A' alone\n"
            "                       gives F the rest; default 24), worker threads of each side (cpu;\n"
            "                       1..%d each; default 1:1)\n"
            "  --micro-batches M    pipelined: micro-batches per step, 1..%d and at most the number of\n"
            "                       sequences; default 2 (1 with one sequence)\n"
            "  --prefill-chunk N    cuda: most prompt tokens one prefill forward takes, 1..%d; default %d\n"
            "                       (all prompts are prefilled in one batched call)\n"
            "  --vram-budget SIZE   cuda: weights beyond VRAM: all of them in pinned host memory, at most\n"
            "                       SIZE bytes on the device, streamed layer by layer; steps run eager\n"
            "                       (no CUDA graphs); default: every weight resident on the device.\n"
            "                       SIZE here and below: bytes, or a unit in any case right after the\n"
            "                       digits: K, M, G, T or KiB, MiB, GiB, TiB binary (x 2^10, 2^20, 2^30,\n"
            "                       2^40), KB, MB, GB, TB decimal (x 10^3, 10^6, 10^9, 10^12): 512M, 4GiB,\n"
            "                       4GB; a size given with a unit is echoed in bytes on stderr\n"
            "  --sparsity FILE.json activation sparsity (a greenpipe calibrate file for this model): decode\n"
            "                       steps of at most 16 sequences drop each projection's inputs at or\n"
            "                       below the layer's threshold and read only the other inputs' weights\n"
            "                       (cuda: a transposed copy of the projections beside resident weights;\n"
            "                       with --vram-budget only through --cpu-ffn; cpu: the reference masks\n"
            "                       alike); prefill stays dense\n"
            "  --cpu-ffn SIZE       cuda, --engine seq, with --sparsity: the CPU-assisted FFN: per layer the\n"
            "                       FFN neurons a SIZE-byte device cache holds (as --vram-budget: 512M,\n"
            "                       4G) run on the GPU, the others on CPU threads, in decode steps of at\n"
            "                       most 16 sequences (run eager); the cache follows the neurons most often\n"
            "                       active. On resident weights the dense ones stay on the device too\n"
            "                       (the cache is extra VRAM); with --vram-budget the cache is part of\n"
            "                       that budget (SIZE below it), the FFN weights stay in host memory\n"
            "                       (copied only for prefill) and the attention projections run dense.\n"
            "                       One stderr line of its statistics at the end\n"
            "  --cpu-ffn-threads N  with --cpu-ffn: CPU threads, 1..16; default the online CPUs up to 16\n"
            "  --sparsity-stats FILE.json\n"
            "                       cuda, with --sparsity: write each layer's share of active inputs per\n"
            "                       projection and the projection bytes read per decode step\n"
            "  --kv-store-size SIZE cuda: stored prefixes: keep the KV of the prompts' whole blocks in a\n"
            "                       pinned host pool of SIZE bytes (as --vram-budget: 512M, 4G; rounded\n"
            "                       down to whole blocks, at least one), least recently used evicted. The\n"
            "                       prompts are then prefilled one at a time in order, each reloading the\n"
            "                       longest run of its leading whole blocks an earlier prompt (or, with\n"
            "                       --kv-store, an earlier run) stored and prefilling only the rest, then\n"
            "                       storing its own whole blocks; decoding is unchanged. One stderr line\n"
            "                       per prompt (tokens reused, reload and prefill times) and one of the\n"
            "                       store's statistics. Not with --dump-prompt-logits (reused positions\n"
            "                       are not recomputed)\n"
            "  --kv-store DIR       with --kv-store-size: also write each stored block to a checksummed\n"
            "                       file in DIR (made if absent), and look there for blocks not in the\n"
            "                       pool, so later runs reuse them; files are never deleted\n"
            "  --kv-store-block N   with --kv-store-size: tokens per stored block, 1..65536; default %d.\n"
            "                       Only whole blocks are reused, and the last prompt token is always\n"
            "                       prefilled, so a prompt reuses at most (its tokens - 1) rounded down to N\n"
            "  --kv-vram-budget SIZE\n"
            "                       cuda, --engine seq: an offloaded KV cache of at most SIZE device bytes\n"
            "                       (as --vram-budget: 512M, 4G): each sequence's newest blocks stay on the\n"
            "                       GPU, its oldest live in pinned host memory and are copied in a layer\n"
            "                       ahead of each attention, into two staging buffers the budget also holds;\n"
            "                       eager steps. The split obtained is on the status line. Not with\n"
            "                       --vram-budget or --kv-store-size\n"
            "  --dump-logits FILE   write {\"tokens\": [[ids]], \"logits\": [[[vocab floats]]]}: the logits each\n"
            "                       generated token was chosen from\n"
            "  --dump-prompt-logits FILE\n"
            "                       write {\"prompts\": [[ids]], \"logits\": [[[vocab floats]]]}: the logits at\n"
            "                       every prompt position (the last one chose the first generated token)\n"
            "  --seed S             seed of synthetic weights (presets) and of sampling (each sequence\n"
            "                       its own stream: the same seed repeats the same tokens on a backend);\n"
            "                       default 0; refused where it would seed nothing\n"
            "  --block-size N       KV cache block size in tokens, 1..1024; default 16\n"
            "At the end, on stderr: the prefill and decode times of the batch, then per sequence its\n"
            "tokens generated, why it stopped (EOS, length, stop string, interrupted), its time to first\n"
            "token (from the prefill call) and decode tokens/s, all host wall clock. Ctrl-C stops every\n"
            "sequence at the next step boundary, prints what each generated so far and the summary, and\n"
            "exits 130; a second Ctrl-C ends the program at once\n",
            gp_config_preset_names(), GP_DEFAULT_PRESET, GP_SAMPLE_MAX_TEMPERATURE, GP_REPEAT_MAX_PENALTY,
            GP_REPEAT_DEFAULT_LAST_N, GP_POOL_MAX_THREADS, GP_POOL_MAX_THREADS, GP_POOL_MAX_THREADS, GP_PIPE_MAX_MICRO,
            GP_ENGINE_MAX_PREFILL_CHUNK, GP_ENGINE_DEFAULT_PREFILL_CHUNK, GP_PREFIX_DEFAULT_BLOCK_TOKENS);
}

/* gp_parse_size, and where a unit was given the bytes it meant on stderr:
 * 4G and 4GB differ by 7%, and the user sees which one was read. */
static gp_status size_arg(const char *text, const char *flag, uint64_t *out)
{
    GP_TRY(gp_parse_size(text, flag, out));
    if (text[strspn(text, "0123456789")])
        fprintf(stderr, "greenpipe: %s %s = %" PRIu64 " bytes\n", flag, text, *out);
    return GP_OK;
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
        {"dtype", required_argument, NULL, 'D'},       {"vram-budget", required_argument, NULL, 'V'},
        {"prompt", required_argument, NULL, 'T'},      {"prompt-file", required_argument, NULL, 'F'},
        {"temperature", required_argument, NULL, 't'}, {"top-k", required_argument, NULL, 'K'},
        {"top-p", required_argument, NULL, 'R'},       {"ignore-eos", no_argument, NULL, 'E'},
        {"sparsity", required_argument, NULL, 'S'},    {"sparsity-stats", required_argument, NULL, 'Z'},
        {"kv-store-size", required_argument, NULL, 'Q'}, {"kv-store", required_argument, NULL, 'q'},
        {"kv-store-block", required_argument, NULL, 'B'}, {"kv-vram-budget", required_argument, NULL, 'O'},
        {"cpu-ffn", required_argument, NULL, 'C'},     {"cpu-ffn-threads", required_argument, NULL, 'H'},
        {"allow-empty-prompt", no_argument, NULL, 'A'},
        {"min-p", required_argument, NULL, 'a'},       {"repeat-penalty", required_argument, NULL, 'r'},
        {"repeat-last-n", required_argument, NULL, 'l'}, {"stop", required_argument, NULL, 'o'},
        {"threads", required_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},              {NULL, 0, NULL, 0},
    };
    *o = (gen_opts){.model = GP_DEFAULT_PRESET, .steps = -1, .backend = GP_BACKEND_CPU, .block_size = 16,
                    .sample = {.temperature = 0.0, .top_k = 0, .top_p = 1.0, .min_p = 0.0},
                    .repeat = gp_repeat_default_params()};
    o->prompts = calloc((size_t)argc + 1, sizeof *o->prompts);
    o->stops = calloc((size_t)argc + 1, sizeof *o->stops);
    if (!o->prompts || !o->stops) {
        fprintf(stderr, "greenpipe generate: out of memory for the prompts\n");
        return 1;
    }
    optind = 1;
    opterr = 0;
    int c;
    bool seen[128] = {false}; /* by option letter: a flag given twice is refused, not last-wins */
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        gp_status st = GP_OK;
        if (c > 0 && c < 128 && c != 'h' && c != ':' && c != '?' && c != 'T' && c != 'o') { /* --prompt, --stop repeat */
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
        case 'T': o->prompts[o->n_prompts++] = optarg; break;
        case 'F':
            if ((st = gp_parse_path(optarg, "--prompt-file")) == GP_OK)
                o->prompt_file = optarg;
            break;
        case 'E': o->ignore_eos = true; break;
        case 'A': o->allow_empty = true; break;
        case 't':
            if ((st = gp_parse_double(optarg, "--temperature", &o->sample.temperature)) == GP_OK)
                st = gp_sample_params_check(&o->sample, INT32_MAX);
            o->temperature_given = true;
            break;
        case 'a':
            if ((st = gp_parse_double(optarg, "--min-p", &o->sample.min_p)) == GP_OK)
                st = gp_sample_params_check(&o->sample, INT32_MAX);
            o->top_given = true;
            break;
        case 'r':
            if ((st = gp_parse_double(optarg, "--repeat-penalty", &o->repeat.penalty)) == GP_OK)
                st = gp_repeat_params_check(&o->repeat);
            o->repeat_given = true;
            break;
        case 'l': {
            long n = 0;
            /* the range and its meanings are gp_repeat_params_check's message */
            if ((st = gp_parse_long(optarg, INT32_MIN, INT32_MAX, "--repeat-last-n", &n)) == GP_OK) {
                o->repeat.last_n = (int)n;
                st = gp_repeat_params_check(&o->repeat);
            }
            o->last_n_given = true;
            break;
        }
        case 'o':
            if (!optarg[0]) {
                fprintf(stderr, "greenpipe generate: --stop '': an empty stop string would end every sequence "
                        "before its first token; allowed: a non-empty text\n");
                return 2;
            }
            o->stops[o->n_stops++] = optarg;
            break;
        case 'j': st = gp_parse_long(optarg, 1, GP_POOL_MAX_THREADS, "--threads", &o->threads); break;
        case 'K': {
            long k = 0;
            st = gp_parse_long(optarg, 0, INT32_MAX, "--top-k", &k); /* the vocabulary bound once it is known */
            o->sample.top_k = (int)k;
            o->top_given = true;
            break;
        }
        case 'R':
            if ((st = gp_parse_double(optarg, "--top-p", &o->sample.top_p)) == GP_OK)
                st = gp_sample_params_check(&o->sample, INT32_MAX);
            o->top_given = true;
            break;
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
            if ((st = gp_parse_path(optarg, c == 'd' ? "--dump-logits" : "--dump-prompt-logits")) == GP_OK)
                *(c == 'd' ? &o->dump_logits : &o->dump_prompt_logits) = optarg;
            break;
        case 'c':
            st = gp_parse_long(optarg, 1, GP_ENGINE_MAX_PREFILL_CHUNK, "--prefill-chunk", &o->prefill_chunk);
            break;
        case 's': st = gp_parse_u64(optarg, "--seed", &o->seed); o->seed_given = true; break;
        case 'V': st = size_arg(optarg, "--vram-budget", &o->vram_budget); break;
        case 'Q': st = size_arg(optarg, "--kv-store-size", &o->kv_store_size); break;
        case 'O': st = size_arg(optarg, "--kv-vram-budget", &o->kv_vram_budget); break;
        case 'C': st = size_arg(optarg, "--cpu-ffn", &o->cpu_ffn); break;
        case 'H': st = gp_parse_long(optarg, 1, 16, "--cpu-ffn-threads", &o->cpu_ffn_threads); break;
        case 'q':
            if ((st = gp_parse_path(optarg, "--kv-store")) == GP_OK)
                o->kv_store_dir = optarg;
            break;
        case 'B': /* the store's block range (gp_kvstore_identity.block_size) */
            st = gp_parse_long(optarg, 1, 65536, "--kv-store-block", &o->kv_store_block);
            break;
        case 'S':
            if ((st = gp_parse_path(optarg, "--sparsity")) == GP_OK)
                o->sparsity = optarg;
            break;
        case 'Z':
            if ((st = gp_parse_path(optarg, "--sparsity-stats")) == GP_OK)
                o->sparsity_stats = optarg;
            break;
        case 'D':
            if ((st = gp_dtype_parse(optarg, GP_DTYPE_ALLOW_AUTO, &o->dtype)) == GP_OK)
                o->dtype_given = true;
            break;
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
    int sources = (o->prompt_ids != NULL) + (o->n_prompts > 0) + (o->prompt_file != NULL);
    if (sources == 0 || o->steps < 0) {
        fprintf(stderr, "greenpipe generate: a prompt (--prompt, --prompt-file or --prompt-ids) and --steps are "
                "required\n");
        gen_usage(stderr);
        return 2;
    }
    if (sources > 1) {
        fprintf(stderr, "greenpipe generate: give exactly one of --prompt (repeatable), --prompt-file and "
                "--prompt-ids; got %s%s%s\n", o->n_prompts ? "--prompt " : "", o->prompt_file ? "--prompt-file " : "",
                o->prompt_ids ? "--prompt-ids" : "");
        return 2;
    }
    if (o->allow_empty && o->prompt_ids) {
        fprintf(stderr, "greenpipe generate: --allow-empty-prompt applies to --prompt and --prompt-file; "
                "--prompt-ids sequences are never empty\n");
        return 2;
    }
    if (o->ignore_eos && o->prompt_ids) {
        fprintf(stderr, "greenpipe generate: --ignore-eos applies to --prompt and --prompt-file; --prompt-ids "
                "always generates --steps tokens\n");
        return 2;
    }
    if (o->top_given && o->temperature_given && o->sample.temperature == 0.0) {
        fprintf(stderr, "greenpipe generate: --temperature 0 asks for greedy decoding and %s%s%sshape%s sampling; "
                "allowed: --temperature above 0, or leave it out (sampling at 1), or drop the sampling flags\n",
                seen['K'] ? "--top-k " : "", seen['R'] ? "--top-p " : "", seen['a'] ? "--min-p " : "",
                seen['K'] + seen['R'] + seen['a'] > 1 ? "" : "s");
        return 2;
    }
    if (o->top_given && !o->temperature_given)
        o->sample.temperature = 1.0; /* as llama-cli: its truncations sample; 1 leaves the model's distribution */
    if (o->last_n_given && !o->repeat_given) {
        fprintf(stderr, "greenpipe generate: --repeat-last-n %d is the window of --repeat-penalty; give "
                "--repeat-penalty R too (default 1: off)\n", o->repeat.last_n);
        return 2;
    }
    if (o->n_stops && o->prompt_ids) {
        fprintf(stderr, "greenpipe generate: --stop '%s' matches generated text, and --prompt-ids prints ids; "
                "allowed: --stop with --prompt or --prompt-file\n", o->stops[0]);
        return 2;
    }
    if (o->threads && o->backend != GP_BACKEND_CPU) {
        fprintf(stderr, "greenpipe generate: --threads %ld sets the cpu backend's worker threads; --backend cuda "
                "computes on the GPU (its CPU-assisted FFN takes --cpu-ffn-threads); allowed: leave it out, or "
                "use --backend cpu\n", o->threads);
        return 2;
    }
    /* auto is the default on both backends: on cpu it means the checkpoint's own values in float32 */
    if (o->dtype_given && o->dtype != GP_DTYPE_AUTO && o->backend != GP_BACKEND_CUDA) {
        fprintf(stderr, "greenpipe generate: --dtype %s applies to --backend cuda only (the cpu backend is the "
                "float32 reference, holding the checkpoint's values exactly); allowed on cpu: auto (the default), "
                "or use --backend cuda\n", gp_dtype_flag_name(o->dtype));
        return 2;
    }
    if (o->prefill_chunk && o->backend != GP_BACKEND_CUDA) {
        fprintf(stderr, "greenpipe generate: --prefill-chunk %ld applies to --backend cuda only (the cpu backend "
                "prefills position by position); allowed: leave it out, or use --backend cuda\n", o->prefill_chunk);
        return 2;
    }
    if (o->vram_budget && o->backend != GP_BACKEND_CUDA) {
        fprintf(stderr, "greenpipe generate: --vram-budget applies to --backend cuda only (the cpu backend holds "
                "the weights in host memory); allowed: leave it out, or use --backend cuda\n");
        return 2;
    }
    if (o->sparsity_stats && (!o->sparsity || o->backend != GP_BACKEND_CUDA)) {
        fprintf(stderr, "greenpipe generate: --sparsity-stats writes what the cuda backend counted under "
                "--sparsity; give --sparsity FILE.json and --backend cuda\n");
        return 2;
    }
    if (o->cpu_ffn && (!o->sparsity || o->backend != GP_BACKEND_CUDA || o->pipelined)) {
        fprintf(stderr, "greenpipe generate: --cpu-ffn splits the sparse FFN of the cuda engine's sequential steps "
                "between the GPU and the CPU; give --sparsity FILE.json, --backend cuda and --engine seq\n");
        return 2;
    }
    if (o->cpu_ffn && o->vram_budget && o->cpu_ffn >= o->vram_budget) {
        fprintf(stderr, "greenpipe generate: --cpu-ffn %llu bytes: the hot cache is part of --vram-budget (%llu "
                "bytes), which must leave room for the streamed weights; allowed: below the budget\n",
                (unsigned long long)o->cpu_ffn, (unsigned long long)o->vram_budget);
        return 2;
    }
    if (o->cpu_ffn_threads && !o->cpu_ffn) {
        fprintf(stderr, "greenpipe generate: --cpu-ffn-threads applies to --cpu-ffn; give --cpu-ffn SIZE too\n");
        return 2;
    }
    if (o->sparsity && o->vram_budget && !o->cpu_ffn) {
        fprintf(stderr, "greenpipe generate: --sparsity reads a transposed copy of resident weights; with "
                "--vram-budget it applies only through --cpu-ffn SIZE (give it, or drop --vram-budget)\n");
        return 2;
    }
    if (o->sparsity_stats && o->vram_budget) {
        fprintf(stderr, "greenpipe generate: --sparsity-stats counts the sparse GPU projections, which streamed "
                "weights (--vram-budget) do not run; the --cpu-ffn line reports the FFN's activity\n");
        return 2;
    }
    if (o->dump_logits && o->dump_prompt_logits && !strcmp(o->dump_logits, o->dump_prompt_logits)) {
        fprintf(stderr, "greenpipe generate: --dump-prompt-logits '%s' is also the --dump-logits file; allowed: "
                "another path\n", o->dump_prompt_logits);
        return 2;
    }
    if ((o->kv_store_dir || o->kv_store_block) && !o->kv_store_size) {
        if (o->kv_store_dir)
            fprintf(stderr, "greenpipe generate: --kv-store '%s' needs --kv-store-size SIZE (the store's host pool, "
                    "which turns stored prefixes on); allowed: both, or neither\n", o->kv_store_dir);
        else
            fprintf(stderr, "greenpipe generate: --kv-store-block %ld needs --kv-store-size SIZE (the store's host "
                    "pool, which turns stored prefixes on); allowed: both, or neither\n", o->kv_store_block);
        return 2;
    }
    if (o->kv_store_size && o->backend != GP_BACKEND_CUDA) {
        fprintf(stderr, "greenpipe generate: --kv-store-size applies to --backend cuda only (stored prefixes are "
                "reloaded into the CUDA engine's paged cache); allowed: leave it out, or use --backend cuda\n");
        return 2;
    }
    if (o->kv_store_size && o->dump_prompt_logits) {
        fprintf(stderr, "greenpipe generate: --dump-prompt-logits '%s' does not combine with --kv-store-size: "
                "prompt positions reloaded from the store are not recomputed and have no logits; allowed: one "
                "of the two\n", o->dump_prompt_logits);
        return 2;
    }
    if (o->kv_vram_budget && (o->backend != GP_BACKEND_CUDA || o->pipelined || o->vram_budget ||
                              o->kv_store_size)) {
        fprintf(stderr, "greenpipe generate: --kv-vram-budget offloads the CUDA engine's KV cache, for --backend "
                "cuda --engine seq without --vram-budget and --kv-store-size; got %s%s%s; allowed: leave it out, or "
                "drop the others\n", o->backend != GP_BACKEND_CUDA ? "--backend cpu " : "",
                o->pipelined ? "--engine pipelined " : "",
                o->vram_budget ? "--vram-budget " : o->kv_store_size ? "--kv-store-size" : "");
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
    if (o->backend == GP_BACKEND_CPU && o->split_given &&
        (o->split.attn_sms > GP_POOL_MAX_THREADS || o->split.ffn_sms > GP_POOL_MAX_THREADS)) {
        fprintf(stderr, "greenpipe generate: --sm-split %d:%d: the cpu backend runs 1..%d worker threads on each "
                "side; allowed: A:F with A and F in 1..%d\n", o->split.attn_sms, o->split.ffn_sms,
                GP_POOL_MAX_THREADS, GP_POOL_MAX_THREADS);
        return 2;
    }
    /* every output is tried now, not found unwritable after the run */
    const char *out_flag[] = {"--dump-logits", "--dump-prompt-logits", "--sparsity-stats"};
    const char *out_path[] = {o->dump_logits, o->dump_prompt_logits, o->sparsity_stats};
    for (int i = 0; i < 3; i++)
        if (out_path[i] && gp_check_out_file(out_path[i], out_flag[i]) != GP_OK) {
            fprintf(stderr, "greenpipe generate: %s\n", gp_last_error());
            return 2;
        }
    if (o->kv_store_dir && gp_check_out_dir(o->kv_store_dir, "--kv-store") != GP_OK) {
        fprintf(stderr, "greenpipe generate: %s\n", gp_last_error());
        return 2;
    }
    return -1; /* continue */
}

/* One dump file: {"<ids_key>": [[ids]...], "logits": [[[vocab floats]...]...]}
 * where sequence s has lens[s] ids from row offsets[s] on, and logits[s][i]
 * belongs to its i-th id (ids and logits rows indexed alike). flag names the
 * option in messages. */
static int write_dump(const char *path, const char *flag, const char *ids_key, int n_seqs, const int *lens,
                      const size_t *offsets, const int32_t *ids, const float *logits, int vocab)
{
    json_t *root = json_object(), *toks = json_array(), *lg = json_array();
    if (!root || !toks || !lg)
        goto oom;
    for (int s = 0; s < n_seqs; s++) {
        json_t *ts = json_array(), *ls = json_array();
        if (!ts || !ls || json_array_append_new(toks, ts) || json_array_append_new(lg, ls))
            goto oom;
        for (size_t t = 0, row = offsets[s]; t < (size_t)lens[s]; t++, row++) {
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
    errno = 0;
    if (json_dump_file(root, path, JSON_COMPACT | JSON_REAL_PRECISION(9)) != 0) {
        fprintf(stderr, "greenpipe generate: cannot write %s file '%s': %s\n", flag, path,
                errno ? strerror(errno) : "the JSON encoder failed");
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


/* --sparsity on the cuda backend: each projection's share of active inputs
 * over the decode steps (the union over the batch), mean over layers, on
 * stderr; with --sparsity-stats also per layer, into that JSON file. */
static int sparsity_summary(gp_backend *b, const gp_config *cfg, long steps, const char *path)
{
    const int L = cfg->n_layers, P = GP_SPARSE_PROJ_COUNT;
    long *a = calloc((size_t)L * P, sizeof(long));
    double *per = calloc((size_t)L * P, sizeof(double));
    gp_status st = a && per ? gp_backend_sparsity_stats(b, a, 0) : GP_ERR_NO_MEMORY;
    if (st != GP_OK) {
        free(a);
        free(per);
        return fail("sparsity statistics", st);
    }
    double mean[GP_SPARSE_PROJ_COUNT], bytes;
    gp_sparse_density(cfg, a, steps, per, mean, &bytes);
    fprintf(stderr, "greenpipe: active inputs per decode step (mean over layers):");
    for (int p = 0; p < P; p++)
        fprintf(stderr, " %s %.3f", gp_sparse_proj_name((gp_sparse_proj)p), mean[p]);
    fprintf(stderr, "; %.3f GB of projection weights read per step\n", bytes / 1e9);
    int rc = 0;
    if (path) {
        json_t *root = json_pack("{s:i, s:f, s:[]}", "decode_steps", (int)steps, "projection_weight_bytes_per_step",
                                 bytes, "layers");
        json_t *layers = root ? json_object_get(root, "layers") : NULL;
        for (int l = 0; layers && l < L; l++)
            if (json_array_append_new(layers, json_pack("{s:f, s:f, s:f, s:f}", "qkv", per[l * P], "o",
                                                        per[l * P + 1], "gate_up", per[l * P + 2], "down",
                                                        per[l * P + 3])) != 0)
                layers = NULL;
        errno = 0;
        if (!layers || json_dump_file(root, path, JSON_INDENT(1)) != 0) {
            fprintf(stderr, "greenpipe generate: --sparsity-stats %s: cannot write the file: %s\n", path,
                    !layers ? "out of memory" : errno ? strerror(errno) : "the JSON encoder failed");
            rc = 1;
        } else {
            fprintf(stderr, "greenpipe: sparsity per layer written to %s\n", path);
        }
        json_decref(root);
    }
    free(a);
    free(per);
    return rc;
}

/* Exit code of a bad-input failure that is the checkpoint's or the user's
 * (2), or of the machine's (1: a read error, out of memory). */
static int input_code(gp_status st)
{
    return st == GP_ERR_IO || st == GP_ERR_NO_MEMORY ? 1 : 2;
}

/* The cpu backend holds every weight in host memory, and a preset's are
 * synthesized for minutes before anything shows (the default llama3-8b: 16
 * GB): before loading, one line of what it needs against what the machine
 * has, and the time it will take; refused (2) when it cannot fit. Returns -1
 * to continue, else the exit code. */
static int cpu_memory_statement(const gen_opts *o, const gp_model_source *src, const gp_backend_params *bp)
{
    uint64_t weights, kv, avail;
    const char *how = "";
    gp_dtype dt;
    gp_status st;
    if ((st = gp_backend_host_need(src, bp, &weights, &kv)) != GP_OK ||
        (st = gp_model_source_host_dtype(src, &dt)) != GP_OK) {
        fprintf(stderr, "greenpipe generate: --model %s: %s\n", o->model, gp_last_error());
        return input_code(st);
    }
    char need_s[32], w_s[32], kv_s[32], avail_s[32], model[300];
    gp_format_bytes(weights + kv, need_s, sizeof need_s);
    gp_format_bytes(weights, w_s, sizeof w_s);
    gp_format_bytes(kv, kv_s, sizeof kv_s);
    snprintf(model, sizeof model, "--model %s%s", o->model,
             src->synthetic && !strcmp(o->model, GP_DEFAULT_PRESET) ? " (the default preset)" : "");
    if ((st = gp_host_mem_available(&avail, &how)) != GP_OK) {
        if (st == GP_ERR_INVALID_ARG) { /* a malformed test hook: a typo must not pass as a real run */
            fprintf(stderr, "greenpipe generate: %s\n", gp_last_error());
            return 2;
        }
        fprintf(stderr, "greenpipe: the cpu backend holds %s in host memory: %s (%s of %s weights, a %s float32 "
                "KV cache); %s\n", model, need_s, w_s, gp_dtype_flag_name(dt), kv_s, gp_last_error());
        return -1;
    }
    gp_format_bytes(avail, avail_s, sizeof avail_s);
    if (weights + kv > avail) {
        fprintf(stderr, "greenpipe generate: the cpu backend needs %s of host memory for %s (%s of %s weights, a "
                "%s float32 KV cache) and %s are available (%s); allowed: a smaller model (--model tiny, or "
                "--model DIR of a checkpoint that fits), or --backend cuda (the weights in GPU memory)\n", need_s,
                model, w_s, gp_dtype_flag_name(dt), kv_s, avail_s, how);
        return 2;
    }
    char when[4300];
    double rate = 0.0;
    const uint64_t sample = weights < ((uint64_t)32 << 20) ? weights : ((uint64_t)32 << 20);
    if (!src->synthetic)
        snprintf(when, sizeof when, "read from %s at the disk's speed", src->path);
    else if (gp_synth_host_rate(dt, sample, &rate) == GP_OK && rate > 0.0 && weights / rate >= 1.0)
        snprintf(when, sizeof when, "synthesized in about %.0f s (%.2f GB/s measured here)", weights / rate,
                 rate / 1e9);
    else
        snprintf(when, sizeof when, "synthesized in under a second");
    fprintf(stderr, "greenpipe: the cpu backend holds %s in host memory: %s (%s of %s weights, a %s float32 KV "
            "cache) of %s available (%s); the weights are %s, then every prompt position and decode step reads all "
            "%s of them\n", model, need_s, w_s, gp_dtype_flag_name(dt), kv_s, avail_s, how, when, w_s);
    return -1;
}

/* The prompts: --prompt-ids as given, text through the checkpoint's
 * tokenizer (*tok then holds it). Returns -1 to continue, else the exit code. */
static int load_prompts(const gen_opts *o, const gp_model_source *src, gp_tokenizer **tok, gp_prompts *p)
{
    gp_status st;
    if (o->prompt_ids) {
        if ((st = gp_parse_prompts(o->prompt_ids, p)) != GP_OK) {
            fprintf(stderr, "greenpipe generate: %s\n", gp_last_error());
            return 2;
        }
        return -1;
    }
    const char *flag = o->prompt_file ? "--prompt-file" : "--prompt";
    char *file = NULL;
    size_t file_len = 0;
    if (o->prompt_file) {
        /* the exact bytes: no trailing newline is dropped, as HF's tokenizer(open(f).read()) */
        if ((st = gp_read_input(o->prompt_file, (size_t)1 << 30, &file, &file_len)) != GP_OK) {
            fprintf(stderr, "greenpipe generate: --prompt-file: %s\n", gp_last_error());
            return input_code(st);
        }
    }
    /* an empty pipe or file would generate from BOS alone and exit 0:
     * a mistake far more often than a wish, so the wish must be said */
    for (int s = 0; !o->allow_empty && s < (o->prompt_file ? 1 : o->n_prompts); s++)
        if (o->prompt_file ? file_len == 0 : o->prompts[s][0] == '\0') {
            if (o->prompt_file)
                fprintf(stderr, "greenpipe generate: --prompt-file %s: the prompt is empty (0 bytes read from %s); "
                        "allowed: a non-empty prompt, or --allow-empty-prompt for BOS alone\n", o->prompt_file,
                        strcmp(o->prompt_file, "-") ? o->prompt_file : "standard input");
            else
                fprintf(stderr, "greenpipe generate: --prompt: prompt %d is empty (0 bytes); allowed: a non-empty "
                        "prompt, or --allow-empty-prompt for BOS alone\n", s);
            free(file);
            return 2;
        }
    if (src->synthetic) {
        fprintf(stderr, "greenpipe generate: %s: --model %s is a preset (synthetic weights) and has no tokenizer; "
                "text prompts need a checkpoint directory holding tokenizer.json or tokenizer.model; with a "
                "preset, give --prompt-ids\n", flag, o->model);
        free(file);
        return 2;
    }
    if ((st = gp_tokenizer_load_dir(src->path, tok)) != GP_OK) {
        fprintf(stderr, "greenpipe generate: %s needs the checkpoint's tokenizer: %s\n", flag, gp_last_error());
        free(file);
        return input_code(st);
    }
    int n = o->prompt_file ? 1 : o->n_prompts;
    size_t *lens = malloc((size_t)n * sizeof *lens);
    if (!lens) {
        free(file);
        fprintf(stderr, "greenpipe generate: out of memory for %d prompts\n", n);
        return 1;
    }
    const char *const *texts = o->prompt_file ? (const char *const *)&file : o->prompts;
    for (int s = 0; s < n; s++)
        lens[s] = o->prompt_file ? file_len : strlen(texts[s]);
    st = gp_gen_tokenize(*tok, texts, lens, n, flag, p);
    free(lens);
    free(file);
    if (st != GP_OK) {
        fprintf(stderr, "greenpipe generate: %s\n", gp_last_error());
        return input_code(st);
    }
    return -1;
}

/* --kv-store-size: what the prompts' prefills and stores did to the store.
 * The store's own hit and miss counters also count each store's check of
 * the blocks already held, so its counters are read (and reset) after every
 * call and the prefills' lookups kept apart. */
typedef struct kv_run {
    gp_kvstore_stats lookups; /* counters of the prefills' lookups */
    gp_kvstore_stats all;     /* counters of every call, lookups and stores */
    long prompt_tokens, reused_tokens;
    long blocks_stored, blocks_present, blocks_refused;
} kv_run;

static void kv_tally(gp_kvstore_stats *acc, const gp_kvstore_stats *k)
{
    acc->lookups += k->lookups;
    acc->hit_blocks += k->hit_blocks;
    acc->miss_blocks += k->miss_blocks;
    acc->collisions += k->collisions;
    acc->puts += k->puts;
    acc->put_refused += k->put_refused;
    acc->evictions += k->evictions;
    acc->disk_loads += k->disk_loads;
    acc->bytes_loaded += k->bytes_loaded;
    acc->files_written += k->files_written;
    acc->bytes_written += k->bytes_written;
    acc->write_errors += k->write_errors;
    for (int m = 0; m < GP_KVSTORE_MISS_COUNT; m++)
        acc->disk_misses[m] += k->disk_misses[m];
    if (k->last_warning[0])
        snprintf(acc->last_warning, sizeof acc->last_warning, "%s", k->last_warning);
}

/* The store's counters since the last read into kr->all, and with lookup
 * (read right after a prefill) into kr->lookups too. */
static gp_status kv_read(gp_backend *b, kv_run *kr, bool lookup)
{
    gp_kvstore_stats k;
    GP_TRY(gp_backend_kvstore_stats(b, &k, true));
    if (lookup)
        kv_tally(&kr->lookups, &k);
    kv_tally(&kr->all, &k);
    return GP_OK;
}

/* The stored-prefix prefill (a gp_gen_prefill_fn): the backend, the
 * vocabulary and the store's counters of the run. */
typedef struct stored_prefill {
    gp_backend *b;
    size_t V;
    kv_run *kr;
} stored_prefill;

/* st, its message (already set) prefixed with what was being done to
 * prompt s (s < 0: to the store). */
static gp_status annotate(gp_status st, const char *what, int s)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", gp_last_error());
    if (s < 0)
        gp_set_error("%s: %s", what, msg);
    else
        gp_set_error("%s prompt %d: %s", what, s, msg);
    return st;
}

/* Prompt s into sequence s, one at a time in order, each through the store
 * (reusing what earlier prompts stored), then its whole blocks stored; a
 * stderr line per prompt. next[s] and the logits row s as a batched prefill
 * gives them; no prompt logits (refused with the store). */
static gp_status prefill_stored(void *ctx, int S, const gp_prefill_seq *seqs, int32_t *next, float *step_logits,
                                float *prompt_logits)
{
    stored_prefill *sp = ctx;
    gp_backend *b = sp->b;
    kv_run *kr = sp->kr;
    size_t V = sp->V;
    (void)prompt_logits;
    gp_status st;
    if ((st = kv_read(b, kr, false)) != GP_OK) /* from zero: the counters of this run only */
        return annotate(st, "the prefix store's statistics", -1);
    memset(kr, 0, sizeof *kr);
    for (int s = 0; s < S; s++) {
        const int32_t *tk = seqs[s].tokens;
        int seq = seqs[s].seq, n = seqs[s].n;
        gp_prefix_stats ps;
        gp_prefix_store_stats ss;
        st = gp_backend_prefill_prefix(b, seq, n, tk, &next[s], step_logits ? step_logits + (size_t)s * V : NULL,
                                       &ps);
        if (st != GP_OK)
            return annotate(st, "through the prefix store,", s);
        if ((st = kv_read(b, kr, true)) != GP_OK)
            return annotate(st, "the prefix store's statistics", -1);
        st = gp_backend_prefix_store_seq(b, seq, n, tk, &ss);
        if (st != GP_OK)
            return annotate(st, "storing the blocks of", s);
        if ((st = kv_read(b, kr, false)) != GP_OK)
            return annotate(st, "the prefix store's statistics", -1);
        kr->prompt_tokens += ps.prompt_tokens;
        kr->reused_tokens += ps.matched_tokens;
        kr->blocks_stored += ss.blocks_stored;
        kr->blocks_present += ss.blocks_present;
        kr->blocks_refused += ss.blocks_refused;
        fprintf(stderr, "greenpipe: prompt %d: %d tokens, %d reused", s, ps.prompt_tokens, ps.matched_tokens);
        if (ps.matched_tokens)
            fprintf(stderr, " (reload %.3f ms, %.3f GB at %.1f GB/s)", ps.reload_ms, (double)ps.bytes_loaded / 1e9,
                    ps.reload_gbps);
        fprintf(stderr, "; prefill of %d token(s) %.3f ms; TTFT %.3f ms (device), %.3f ms (host); store: %d "
                "whole block(s), %d stored, %d already held", ps.prompt_tokens - ps.matched_tokens, ps.suffix_ms,
                ps.ttft_ms, ps.wall_ms, ss.blocks, ss.blocks_stored, ss.blocks_present);
        if (ss.blocks_refused)
            fprintf(stderr, ", %d refused (the pool is full of pinned blocks)", ss.blocks_refused);
        fprintf(stderr, ", %.3f ms\n", ss.ms);
    }
    return GP_OK;
}

/* The store's statistics over the run, one stderr line. */
static int kv_summary(gp_backend *b, const kv_run *kr)
{
    gp_kvstore_stats lv; /* levels: what the pool holds now */
    gp_status st = gp_backend_kvstore_stats(b, &lv, false);
    if (st != GP_OK)
        return fail("the prefix store's statistics", st);
    const gp_kvstore_stats *a = &kr->all;
    uint64_t bad = 0; /* files there but unusable: neither absent nor only short of room */
    for (int m = 0; m < GP_KVSTORE_MISS_COUNT; m++)
        if (m != GP_KVSTORE_MISS_ABSENT && m != GP_KVSTORE_MISS_NO_ROOM)
            bad += a->disk_misses[m];
    fprintf(stderr, "greenpipe: prefix store: %ld of %ld prompt tokens reused; prompt lookups: %llu block hit(s), "
            "%llu block miss(es); blocks: %ld stored, %ld already held, %ld refused, %llu evicted; pool: %.3f of "
            "%.3f GB held (%llu blocks); disk: %llu block(s) loaded, %llu file(s) written, %llu write error(s), "
            "%llu damaged or foreign file(s)", kr->reused_tokens, kr->prompt_tokens,
            (unsigned long long)kr->lookups.hit_blocks, (unsigned long long)kr->lookups.miss_blocks,
            kr->blocks_stored, kr->blocks_present, kr->blocks_refused, (unsigned long long)a->evictions,
            (double)lv.bytes_held / 1e9, (double)lv.capacity_bytes / 1e9, (unsigned long long)lv.blocks_held,
            (unsigned long long)a->disk_loads, (unsigned long long)a->files_written,
            (unsigned long long)a->write_errors, (unsigned long long)bad);
    for (int m = 0, first = 1; m < GP_KVSTORE_MISS_COUNT; m++)
        if (m != GP_KVSTORE_MISS_ABSENT && m != GP_KVSTORE_MISS_NO_ROOM && a->disk_misses[m]) {
            fprintf(stderr, "%s%s %llu", first ? " (" : ", ", gp_kvstore_miss_name((gp_kvstore_miss)m),
                    (unsigned long long)a->disk_misses[m]);
            first = 0;
        }
    if (bad)
        fprintf(stderr, ")");
    if (a->disk_misses[GP_KVSTORE_MISS_NO_ROOM])
        fprintf(stderr, ", %llu good file(s) not loaded for want of room",
                (unsigned long long)a->disk_misses[GP_KVSTORE_MISS_NO_ROOM]);
    if (a->collisions)
        fprintf(stderr, ", %llu key collision(s)", (unsigned long long)a->collisions);
    fprintf(stderr, "%s%s\n", a->last_warning[0] ? "; last warning: " : "", a->last_warning);
    return 0;
}


/* Set by the first Ctrl-C during generation; the handler is then reset to
 * the default (SA_RESETHAND), so a second one ends the program at once. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* What each sequence did: one stderr line each, host wall clock. */
static void seq_summary(int n_seqs, const gp_gen_result *res)
{
    for (int s = 0; s < n_seqs; s++) {
        const gp_gen_result *r = &res[s];
        char who[32] = "";
        if (n_seqs > 1)
            snprintf(who, sizeof who, "[%d] ", s);
        fprintf(stderr, "greenpipe: %s%d token(s) generated (stop reason: %s); time to first token %.3f s "
                "(prefill included)", who, r->n, gp_gen_stop_name(r->stop), r->ttft_s);
        if (r->n > 1)
            fprintf(stderr, "; decode %.2f tokens/s (%d token(s) after the first in %.3f s)",
                    r->decode_s > 0 ? (r->n - 1) / r->decode_s : 0.0, r->n - 1, r->decode_s);
        fprintf(stderr, "; host-timed\n");
    }
}

int gp_cmd_generate(int argc, char **argv)
{
    gen_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc >= 0) {
        free(o.prompts);
        free(o.stops);
        return rc;
    }
    gp_prompts p = {0};
    gp_tokenizer *tok = NULL;
    gp_model_source src;
    gp_status st;
    int exit_code = 2;
    if ((st = gp_model_source_resolve(o.model, o.seed, &src)) != GP_OK) {
        fprintf(stderr, "greenpipe generate: --model: %s\n", gp_last_error());
        goto early;
    }
    bool sampling = o.sample.temperature > 0.0;
    if (o.seed_given && !src.synthetic && !sampling) {
        /* a checkpoint's weights are read as they are and greedy decoding
         * draws nothing: a seed would be ignored */
        fprintf(stderr, "greenpipe generate: --seed %" PRIu64 ": --model %s is a checkpoint, not a preset, and "
                "decoding is greedy; --seed seeds synthetic weights (presets) and sampling (--temperature "
                "above 0)\n", o.seed, o.model);
        goto early;
    }
    const gp_config *cfg = &src.cfg;
    if (sampling && (st = gp_sample_params_check(&o.sample, cfg->vocab)) != GP_OK) {
        fprintf(stderr, "greenpipe generate: %s\n", gp_last_error());
        goto early;
    }
    if ((rc = load_prompts(&o, &src, &tok, &p)) >= 0) {
        exit_code = rc;
        goto early;
    }
    bool text = tok != NULL;
    gp_eos_ids eos = {0};
    if (text && !o.ignore_eos) {
        if ((st = gp_eos_load_dir(src.path, cfg->vocab, &eos)) != GP_OK) {
            fprintf(stderr, "greenpipe generate: the checkpoint's EOS ids: %s\n", gp_last_error());
            exit_code = input_code(st);
            goto early;
        }
        if (!eos.from)
            fprintf(stderr, "greenpipe: no eos_token_id in generation_config.json or config.json: each sequence "
                    "runs --steps tokens\n");
    }
    int max_len = 0;
    for (int s = 0; s < p.n_seqs; s++) {
        for (int i = 0; i < p.lens[s]; i++)
            if (p.ids[p.offsets[s] + i] >= cfg->vocab) {
                if (text)
                    fprintf(stderr, "greenpipe generate: the tokenizer gives token %d in sequence %d, outside the "
                            "model's vocabulary [0, %d]: tokenizer and model do not match\n",
                            p.ids[p.offsets[s] + i], s, cfg->vocab - 1);
                else
                    fprintf(stderr, "greenpipe generate: --prompt-ids: token %d in sequence %d is outside "
                            "the vocabulary; allowed: [0, %d]\n", p.ids[p.offsets[s] + i], s, cfg->vocab - 1);
                goto early;
            }
        if (p.lens[s] > max_len)
            max_len = p.lens[s];
    }
    /* the store's rules (engine_prefix): a prompt stores the whole blocks of
     * its tokens and reuses those of its first (tokens - 1), its last token
     * always prefilled; a block longer than every prompt does neither */
    long kv_block = o.kv_store_block ? o.kv_store_block : GP_PREFIX_DEFAULT_BLOCK_TOKENS;
    if (o.kv_store_size && max_len / kv_block < 1) {
        fprintf(stderr, "greenpipe generate: --kv-store-block %ld%s: the longest prompt has %d token(s), fewer than "
                "one block, so no prompt would store a block (a prompt stores its whole blocks) or reuse one (a "
                "prompt reuses whole blocks of its first tokens - 1); allowed: at most %d\n", kv_block,
                o.kv_store_block ? "" : " (the default)", max_len, max_len);
        goto early;
    }
    long context = (long)max_len + o.steps - 1; /* the last token is never fed back */
    if (context > cfg->max_context) {
        fprintf(stderr, "greenpipe generate: longest prompt (%d) + --steps (%ld) - 1 = %ld tokens exceeds "
                "the model's max context %d\n", max_len, o.steps, context, cfg->max_context);
        goto early;
    }
    char origin[4200];
    if (src.synthetic)
        snprintf(origin, sizeof origin, "synthetic weights, seed %" PRIu64, o.seed);
    else
        snprintf(origin, sizeof origin, "checkpoint %s", src.path);
    fprintf(stderr, "greenpipe: model %s (%s), %" PRIu64 " parameters; %d sequence(s), %ld step(s)\n",
            cfg->name, origin, gp_config_param_count(cfg), p.n_seqs, o.steps);
    if (sampling) {
        fprintf(stderr, "greenpipe: sampling at temperature %g%s, top-k %d, top-p %g", o.sample.temperature,
                o.temperature_given ? "" : " (the default when --top-k, --top-p or --min-p is given)",
                o.sample.top_k, o.sample.top_p);
        if (o.sample.min_p > 0.0)
            fprintf(stderr, ", min-p %g", o.sample.min_p);
        fprintf(stderr, ", seed %" PRIu64 "\n", o.seed);
    }
    if (gp_repeat_on(&o.repeat)) {
        fprintf(stderr, "greenpipe: repeat penalty %g over ", o.repeat.penalty);
        if (o.repeat.last_n < 0)
            fprintf(stderr, "the whole context");
        else
            fprintf(stderr, "the last %d token(s)", o.repeat.last_n);
        fprintf(stderr, ", prompt included, before %s\n", sampling ? "sampling" : "the greedy choice");
    }
    if (eos.n) {
        fprintf(stderr, "greenpipe: EOS id(s) from %s:", eos.from);
        for (int i = 0; i < eos.n; i++)
            fprintf(stderr, " %d", eos.ids[i]);
        fprintf(stderr, "\n");
    }

    int M = (int)(o.micro_batches ? o.micro_batches : (p.n_seqs > 1 ? 2 : 1));
    if (o.pipelined && M > p.n_seqs) {
        fprintf(stderr, "greenpipe generate: --micro-batches %d: each needs a sequence and there are %d; allowed "
                "1..%d\n", M, p.n_seqs, p.n_seqs);
        goto early;
    }
    exit_code = 1;
    gp_backend *b = NULL;
    gp_sparsity sparsity;
    memset(&sparsity, 0, sizeof sparsity);
    gp_pipeline *pl = NULL;
    gp_gen_out *out = NULL;
    size_t V = (size_t)cfg->vocab;
    int prompt_tokens = 0;
    for (int s = 0; s < p.n_seqs; s++)
        prompt_tokens += p.lens[s];
    float *logits = o.dump_logits ? malloc((size_t)p.n_seqs * (size_t)o.steps * V * sizeof(float)) : NULL;
    float *prompt_logits = o.dump_prompt_logits ? malloc((size_t)prompt_tokens * V * sizeof(float)) : NULL;
    int32_t *gen = malloc((size_t)p.n_seqs * (size_t)o.steps * sizeof(int32_t));
    int *gen_lens = malloc((size_t)p.n_seqs * sizeof(int));
    size_t *gen_rows = malloc((size_t)p.n_seqs * sizeof(size_t)), *prompt_rows = malloc((size_t)p.n_seqs * sizeof(size_t));
    gp_rng *rng = malloc((size_t)p.n_seqs * sizeof(gp_rng));
    gp_gen_seq *seqs = malloc((size_t)p.n_seqs * sizeof *seqs);
    gp_gen_result *res = malloc((size_t)p.n_seqs * sizeof *res);
    if ((o.dump_logits && !logits) || (o.dump_prompt_logits && !prompt_logits) || !gen || !gen_lens || !gen_rows ||
        !prompt_rows || !rng || !seqs || !res) {
        fprintf(stderr, "greenpipe generate: out of host memory for %d x %ld x %d logits (and %d x %d prompt "
                "logits with --dump-prompt-logits)\n", p.n_seqs, o.steps, cfg->vocab, prompt_tokens, cfg->vocab);
        goto out;
    }
    if (text && (st = gp_gen_out_create(tok, p.n_seqs, stdout, &out)) != GP_OK) {
        exit_code = fail("text output", st);
        goto out;
    }
    gp_backend_params bp = gp_backend_default_params(o.backend);
    bp.n_seqs = p.n_seqs;
    bp.max_context = (int)context;
    bp.block_size = (int)o.block_size;
    bp.pipelined = o.pipelined;
    bp.prefill_chunk = (int)o.prefill_chunk;
    bp.vram_budget = o.vram_budget;
    bp.kv_store_bytes = o.kv_store_size;
    bp.kv_vram_budget = o.kv_vram_budget;
    bp.kv_store_dir = o.kv_store_dir;
    bp.kv_store_block = (int)o.kv_store_block;
    bp.cpu_threads = (int)o.threads;
    if (o.dtype_given && o.backend == GP_BACKEND_CUDA) /* cpu: auto alone, its float32 default */
        bp.dtype = o.dtype;
    if (o.split_given) {
        bp.attn_units = o.split.attn_sms;
        bp.ffn_units = o.split.ffn_sms;
    }
    if (o.sparsity) {
        /* the weights' content decides, not the folder's name (gp_model_identity) */
        gp_model_identity id;
        if ((st = gp_sparsity_load(o.sparsity, &sparsity)) != GP_OK ||
            (st = gp_sparsity_check(&sparsity, cfg)) != GP_OK || (st = gp_model_identity_of(&src, &id)) != GP_OK ||
            (st = gp_sparsity_check_identity(&sparsity, &id)) != GP_OK) {
            fprintf(stderr, "greenpipe generate: --sparsity %s: %s\n", o.sparsity, gp_last_error());
            exit_code = input_code(st);
            goto out;
        }
        bp.sparse_thresholds = sparsity.thresholds;
        bp.cpu_ffn_budget = o.cpu_ffn;
        bp.cpu_ffn_calib = &sparsity;
        bp.cpu_ffn_threads = (int)o.cpu_ffn_threads;
    }
    /* a budget the weights cannot stream through is the user's to fix (2), found before loading */
    if ((st = gp_backend_check_budget(&bp, cfg)) != GP_OK) {
        fprintf(stderr, "greenpipe generate: --vram-budget: %s\n", gp_last_error());
        exit_code = 2;
        goto out;
    }
    if ((st = gp_backend_check_kv_store(&bp, cfg)) != GP_OK) {
        fprintf(stderr, "greenpipe generate: %s\n", gp_last_error());
        exit_code = 2;
        goto out;
    }
    if (o.backend == GP_BACKEND_CPU && (rc = cpu_memory_statement(&o, &src, &bp)) >= 0) {
        exit_code = rc;
        goto out;
    }
    gp_cli_progress progress;
    gp_cli_progress_init(&progress, stderr, "greenpipe");
    bp.progress = gp_cli_progress_cb(&progress);
    double t0 = gp_now_s();
    if ((st = gp_backend_open(&src, &bp, &b)) != GP_OK) {
        if (st == GP_ERR_NO_DEVICE) /* one line: what happened and what runs without a GPU */
            fprintf(stderr, "greenpipe generate: loading the model: %s: %s; --backend cpu runs the float32 CPU "
                    "reference instead\n", gp_status_str(st), gp_last_error());
        else
            fail("loading the model", st);
        exit_code = 1;
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
        seqs[s] = (gp_gen_seq){.seq = s, .tokens = p.ids + p.offsets[s], .n = p.lens[s], .rng = &rng[s]};
        gen_rows[s] = (size_t)s * (size_t)o.steps;
        prompt_rows[s] = (size_t)p.offsets[s];
        res[s] = (gp_gen_result){.tokens = gen + gen_rows[s], .logits = logits ? logits + gen_rows[s] * V : NULL};
        gp_rng_seed(&rng[s], o.seed, (uint64_t)s); /* a stream per sequence: its tokens do not depend on the batch */
    }
    gp_gen_params gpar = gp_gen_default_params();
    gpar.sample = o.sample;
    gpar.repeat = o.repeat;
    gpar.max_tokens = o.steps;
    gpar.eos = &eos;
    gpar.stop_strings = o.stops;
    gpar.n_stop_strings = o.n_stops;
    gpar.interrupt = &interrupted;
    kv_run kr;
    memset(&kr, 0, sizeof kr);
    stored_prefill sp = {.b = b, .V = V, .kr = &kr};
    if (o.kv_store_size) {
        gpar.prefill = prefill_stored;
        gpar.prefill_ctx = &sp;
    }
    /* Ctrl-C only around the loop: before it, loading is not interruptible
     * work worth a partial result, and after it the output is complete */
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    interrupted = 0;
    sigaction(SIGINT, &sa, &old_sa);
    gp_gen_stats gs;
    st = gp_gen_run(x, pl, cfg->vocab, &gpar, p.n_seqs, seqs, out, prompt_logits, res, &gs);
    sigaction(SIGINT, &old_sa, NULL);
    if (st != GP_OK) {
        exit_code = fail(gs.failed ? gs.failed : "generation", st);
        goto out;
    }
    for (int s = 0; s < p.n_seqs; s++)
        gen_lens[s] = res[s].n;
    if (!text)
        for (int s = 0; s < p.n_seqs; s++) {
            for (int t = 0; t < gen_lens[s]; t++)
                printf("%s%d", t ? " " : "", gen[gen_rows[s] + t]);
            printf("\n");
        }
    fflush(stdout);
    if (out && gp_gen_out_unknown(out))
        fprintf(stderr, "greenpipe: %ld generated token(s) lie outside the tokenizer's %d ids and printed "
                "nothing\n", gp_gen_out_unknown(out), gp_tokenizer_vocab_size(tok));
    fprintf(stderr, "greenpipe: prefill of %d prompt(s), %d tokens, %s: %.3f s, %.0f prompt tokens/s; "
            "%ld decode step(s) of batch %d in %.3f s (%.4f s/step); host-timed\n", p.n_seqs, prompt_tokens,
            o.kv_store_size ? "one at a time through the prefix store (its stores included)" : "in one call",
            gs.prefill_s, gs.prefill_s > 0 ? prompt_tokens / gs.prefill_s : 0.0, gs.steps, p.n_seqs, gs.decode_s,
            gs.steps > 0 ? gs.decode_s / (double)gs.steps : 0.0);
    seq_summary(p.n_seqs, res);
    long steps_run = gs.steps;
    if (o.kv_store_size && (rc = kv_summary(b, &kr)) != 0) {
        exit_code = rc;
        goto out;
    }
    if (o.sparsity && o.backend == GP_BACKEND_CUDA && !o.vram_budget &&
        (rc = sparsity_summary(b, cfg, steps_run, o.sparsity_stats)) != 0)
        goto out;
    if (o.cpu_ffn) {
        gp_cpu_ffn_stats cs;
        if ((st = gp_backend_cpu_ffn_stats(b, &cs, 0)) != GP_OK) {
            exit_code = fail("cpu-ffn statistics", st);
            goto out;
        }
        fprintf(stderr, "greenpipe: cpu-ffn: %d of %d neurons per layer hot (%.3f GB cache); %ld step(s) with a CPU "
                "share: hot hit rate %.3f, CPU %.3f ms/step reading %.2f MB/step, %ld reload(s) moving %ld "
                "neuron(s) (%.2f MB); the active-input line's gate_up and down count only steps it did not serve\n",
                cs.hot_per_layer, cfg->ffn, cs.hot_bytes / 1e9, cs.steps, cs.hit_rate,
                cs.cpu_ms_per_step, cs.cpu_bytes_per_step / 1e6, cs.reloads, cs.swaps, cs.swap_bytes / 1e6);
    }
    exit_code = 0;
    if (o.dump_logits) {
        int rc = write_dump(o.dump_logits, "--dump-logits", "tokens", p.n_seqs, gen_lens, gen_rows, gen, logits,
                            cfg->vocab);
        if (!rc)
            fprintf(stderr, "greenpipe: logits written to %s\n", o.dump_logits);
        exit_code |= rc;
    }
    if (o.dump_prompt_logits) {
        int rc = write_dump(o.dump_prompt_logits, "--dump-prompt-logits", "prompts", p.n_seqs, p.lens, prompt_rows,
                            p.ids, prompt_logits, cfg->vocab);
        if (!rc)
            fprintf(stderr, "greenpipe: prompt logits written to %s\n", o.dump_prompt_logits);
        exit_code |= rc;
    }
    if (gs.interrupted) {
        fprintf(stderr, "greenpipe: interrupted (Ctrl-C): stopped at a step boundary; the output above is what "
                "was generated\n");
        if (!exit_code)
            exit_code = 130; /* the shell's code for a SIGINT death, so scripts see the interruption */
    }
out:
    gp_pipeline_destroy(pl);
    gp_backend_close(b);
    gp_sparsity_free(&sparsity);
    gp_gen_out_free(out);
    free(logits);
    free(prompt_logits);
    free(gen);
    free(gen_lens);
    free(gen_rows);
    free(prompt_rows);
    free(rng);
    free(seqs);
    free(res);
early:
    gp_tokenizer_free(tok);
    gp_prompts_free(&p);
    free(o.prompts);
    free(o.stops);
    return exit_code;
}
