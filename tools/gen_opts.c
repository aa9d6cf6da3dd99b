/* greenpipe generate's and greenpipe chat's flags: one parser for both,
 * every check that needs no model made before anything loads. */
#include "gen_opts_impl.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_chat.h"
#include "gp_comm.h"
#include "gp_engine.h"
#include "gp_kvstore.h"

static const char *g_prog = "greenpipe generate";

void gen_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", g_prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
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
            "  --chat               text prompts are user messages: each --prompt (or the --prompt-file)\n"
            "                       becomes a conversation of --system (if given) and that message,\n"
            "                       rendered by the model's chat template with the assistant's header\n"
            "                       after it (the template's BOS text, no other BOS); a sequence also\n"
            "                       stops at the template's end-of-turn token. Templates: %s\n"
            "  --system TEXT        with --chat: the system message of every conversation\n"
            "  --chat-template NAME with --chat: the template to use, any case (%s); default: the one\n"
            "                       tokenizer_config.json's chat_template is recognised as\n"
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
            "  --tp N               cuda: tensor parallel over GPUs 0..N-1 of this host, one process each\n"
            "                       (NCCL): each holds its share of the heads and FFN neurons, o and down\n"
            "                       summed over them; 1.." GP_TP_MAX_STR " dividing the model's heads, key/value heads and\n"
            "                       FFN neurons; each process reads only its share of the weights;\n"
            "                       default 1\n"
            "  --tp-peer-bytes N    with --tp: the ranks' sums of up to N bytes (B rows x hidden x 4) go\n"
            "                       over peer memory, one kernel, larger ones through NCCL; 0: NCCL\n"
            "                       alone; K/M/G suffixes; default 16M (where NCCL starts to win)\n"
            "  --threads N          cpu: threads of the reference's worker, which prefills and runs\n"
            "                       sequential steps (pipelined steps take --sm-split's), 1..%d; default\n"
            "                       the online CPUs up to %d (or GP_REF_THREADS); the status line says\n"
            "                       how many run\n"
            "  --dtype auto|bf16|fp16 (any case)\n"
            "                       cuda: the engine's 16-bit type (float32 accumulation); auto (default):\n"
            "                       the checkpoint's own, bf16 for an fp32 checkpoint and for presets.\n"
            "                       cpu: only auto, the checkpoint's own values held in float32\n"
            "  --engine seq|pipelined|afd\n"
            "                       seq (default): every stage in turn on the whole device; pipelined:\n"
            "                       attention and FFN stages on separate resources, micro-batches\n"
            "                       handed through per-layer rings (same tokens); afd (cuda): the\n"
            "                       attention stages and the KV cache on GPU 0, the FFN stages on GPU 1,\n"
            "                       the residual rows crossing by peer copy (GPU 0 holds the whole model:\n"
            "                       prompts are prefilled there; GPU 1 the FFN weights again)\n"
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
            "                       (cuda: a transposed copy of the projections on the device, beside\n"
            "                       resident weights or beside --vram-budget; cpu: the reference masks\n"
            "                       alike); prefill stays dense\n"
            "  --sparse-always      cuda, with --sparsity: every calibrated projection sparse on every decode\n"
            "                       step, the CPU reference's masks; default: a step runs a projection\n"
            "                       sparse only where the union of its batch's active inputs (measured by\n"
            "                       the last sparse step of that batch size) makes the sparse kernel the\n"
            "                       faster read, else the dense GEMM, unmasked\n"
            "  --cpu-ffn SIZE       cuda, --engine seq, with --sparsity: the CPU-assisted FFN: per layer the\n"
            "                       FFN neurons a SIZE-byte device cache holds (as --vram-budget: 512M,\n"
            "                       4G) run on the GPU, the others on CPU threads, in decode steps of at\n"
            "                       most 16 sequences (run eager); the cache follows the neurons most often\n"
            "                       active. On resident weights the dense ones stay on the device too\n"
            "                       (the cache is extra VRAM); with --vram-budget the cache is part of\n"
            "                       that budget (SIZE below it), the FFN weights stay in host memory\n"
            "                       (copied only for prefill) and only the attention projections get\n"
            "                       transposed copies (beside the budget).\n"
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
            "                       --vram-budget; with --kv-store-size a stored prefix reloads into it\n"
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
            gp_config_preset_names(), GP_DEFAULT_PRESET, gp_chat_template_names(), gp_chat_template_names(),
            GP_SAMPLE_MAX_TEMPERATURE, GP_REPEAT_MAX_PENALTY,
            GP_REPEAT_DEFAULT_LAST_N, GP_POOL_MAX_THREADS, GP_POOL_MAX_THREADS, GP_POOL_MAX_THREADS, GP_PIPE_MAX_MICRO,
            GP_ENGINE_MAX_PREFILL_CHUNK, GP_ENGINE_DEFAULT_PREFILL_CHUNK, GP_PREFIX_DEFAULT_BLOCK_TOKENS);
}

static void chat_usage(FILE *f)
{
    fprintf(f,
            "usage: greenpipe chat --model DIR [--system TEXT] [--chat-template NAME] [--steps N]\n"
            "                      [--max-context N] [--verbose-prompt] [generate's sampling and engine options]\n"
            "A conversation: each line read from standard input is a user message (a line ending in '\\'\n"
            "goes on with the next line); the answer is streamed on stdout as it is generated, after the\n"
            "model's chat template (%s) rendered the turn. The KV cache is kept\n"
            "between turns: a turn prefills only its own tokens (the end of the previous answer, the new\n"
            "message and the assistant's header). When standard input is a terminal, '> ' prompts for a\n"
            "line. Ctrl-C stops the answer being generated (the conversation goes on); Ctrl-D (end of\n"
            "input), or Ctrl-C while waiting for a line, ends the conversation. An empty line is skipped.\n"
            "  --model DIR          a checkpoint directory with a tokenizer (tokenizer.json or\n"
            "                       tokenizer.model) and, unless --chat-template, tokenizer_config.json\n"
            "  --system TEXT        the system message of the conversation\n"
            "  --chat-template NAME the template, any case (%s); default: the one\n"
            "                       tokenizer_config.json's chat_template is recognised as\n"
            "  --steps N            most tokens of one answer, 1..100000; default: until the end-of-turn\n"
            "                       token, EOS or the context's end\n"
            "  --max-context N      tokens the conversation may hold, 1..the model's; default the model's\n"
            "                       max context. A turn that does not fit is refused, the conversation\n"
            "                       going on; an answer that reaches the end stops with reason 'length'\n"
            "  --verbose-prompt     each turn's prefilled and generated token ids on stderr\n"
            "  --stop TEXT          an answer also ends at TEXT (not printed); the next turn then\n"
            "                       prefills the whole conversation again, since the cache holds text\n"
            "                       past the stop\n"
            "The engine and sampling options are generate's (see greenpipe generate --help): --backend,\n"
            "--dtype, --threads, --engine, --sm-split, --micro-batches, --prefill-chunk, --vram-budget,\n"
            "--kv-vram-budget, --sparsity, --cpu-ffn, --cpu-ffn-threads, --block-size, --temperature,\n"
            "--top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, --seed. After each answer, one\n"
            "stderr line: tokens, stop reason, time to first token and decode tokens/s (host-timed)\n",
            gp_chat_template_names(), gp_chat_template_names());
}

/* The flags of a one-shot batch that a conversation has no use for, by
 * option letter (gen_parse_opts' table; --prompt repeats, so it is not
 * among the letters seen and is refused by its count). */
static int chat_refusals(const gen_opts *o, const bool *seen)
{
    static const struct {
        char c;
        const char *flag, *why;
    } no[] = {
        {'F', "--prompt-file", "messages are read from standard input, a line each"},
        {'p', "--prompt-ids", "messages are text, read from standard input"},
        {'A', "--allow-empty-prompt", "an empty line is skipped, not sent"},
        {'G', "--chat", "greenpipe chat always applies the chat template"},
        {'E', "--ignore-eos", "an answer ends at its end-of-turn token, so the next turn can follow"},
        {'d', "--dump-logits", "it writes one batch's logits; use greenpipe generate --chat"},
        {'P', "--dump-prompt-logits", "it writes one batch's logits; use greenpipe generate --chat"},
        {'Z', "--sparsity-stats", "it writes one batch's statistics; use greenpipe generate"},
        {'Q', "--kv-store-size", "stored prefixes serve the prompts of one batch; the conversation keeps its "
                                 "own cache between turns"},
        {'q', "--kv-store", "stored prefixes serve the prompts of one batch"},
        {'B', "--kv-store-block", "stored prefixes serve the prompts of one batch"},
        {'I', "--tp-peer-bytes", "it sizes the sums of --tp's ranks; use greenpipe generate"},
        {'N', "--tp", "the ranks are processes of their own, and the conversation reads its turns from standard "
                      "input in one; use greenpipe generate"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (seen[(unsigned char)no[i].c]) {
            gen_err("%s does not apply to a conversation: %s\n", no[i].flag, no[i].why);
            return 2;
        }
    if (o->n_prompts) {
        gen_err("--prompt does not apply to a conversation: messages are read from standard input, a line each\n");
        return 2;
    }
    return -1;
}

/* generate's chat flags: --chat renders text prompts, the rest need it;
 * --max-context and --verbose-prompt belong to the conversation. */
static int generate_chat_refusals(const gen_opts *o, const bool *seen)
{
    if (!o->chat && (o->system || o->chat_template)) {
        gen_err("%s applies to --chat; give --chat too (or use greenpipe chat)\n",
                o->system ? "--system" : "--chat-template");
        return 2;
    }
    if (o->chat && o->prompt_ids) {
        gen_err("--chat renders text messages through the chat template, and --prompt-ids gives token ids; "
                "allowed: --chat with --prompt or --prompt-file\n");
        return 2;
    }
    if (seen['X'] || seen['v']) {
        gen_err("%s applies to greenpipe chat; generate's context is the prompt plus --steps\n",
                seen['X'] ? "--max-context" : "--verbose-prompt");
        return 2;
    }
    return -1;
}

/* What the options ask of the engine, as the feature table reads them. */
static gp_feature_set gen_features(const gen_opts *o)
{
    return (gp_feature_set){.cuda = o->backend == GP_BACKEND_CUDA,
                            .pipelined = o->pipelined,
                            .afd = o->afd,
                            .pipe_shape = o->pipe_flag_given,
                            .graphs = true,
                            .prefill_chunk = o->prefill_chunk != 0,
                            .vram_budget = o->vram_budget,
                            .kv_vram_budget = o->kv_vram_budget,
                            .kv_store_bytes = o->kv_store_size,
                            .sparsity = o->sparsity != NULL,
                            .sparsity_stats = o->sparsity_stats != NULL,
                            .sparse_always = o->sparse_always,
                            .cpu_ffn_budget = o->cpu_ffn,
                            .cpu_ffn_threads = o->cpu_ffn_threads != 0,
                            .cpu_threads = o->threads != 0,
                            .tp = o->tp > 1,
                            .tp_peer = o->tp_peer_given,
                            .prompt_logits = o->dump_prompt_logits != NULL};
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

int gen_parse_opts(int argc, char **argv, gen_mode mode, gen_opts *o)
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
        {"sparse-always", no_argument, NULL, 'W'},
        {"kv-store-size", required_argument, NULL, 'Q'}, {"kv-store", required_argument, NULL, 'q'},
        {"kv-store-block", required_argument, NULL, 'B'}, {"kv-vram-budget", required_argument, NULL, 'O'},
        {"cpu-ffn", required_argument, NULL, 'C'},     {"cpu-ffn-threads", required_argument, NULL, 'H'},
        {"allow-empty-prompt", no_argument, NULL, 'A'},
        {"min-p", required_argument, NULL, 'a'},       {"repeat-penalty", required_argument, NULL, 'r'},
        {"repeat-last-n", required_argument, NULL, 'l'}, {"stop", required_argument, NULL, 'o'},
        {"threads", required_argument, NULL, 'j'},     {"tp", required_argument, NULL, 'N'},
        {"tp-peer-bytes", required_argument, NULL, 'I'},
        {"chat", no_argument, NULL, 'G'},              {"system", required_argument, NULL, 'Y'},
        {"chat-template", required_argument, NULL, 'U'}, {"max-context", required_argument, NULL, 'X'},
        {"verbose-prompt", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},              {NULL, 0, NULL, 0},
    };
    *o = (gen_opts){.model = GP_DEFAULT_PRESET, .steps = -1, .backend = GP_BACKEND_CPU, .block_size = 16, .tp = 1,
                    .tp_peer_bytes = GP_COMM_PEER_BYTES_DEFAULT,
                    .sample = {.temperature = 0.0, .top_k = 0, .top_p = 1.0, .min_p = 0.0},
                    .repeat = gp_repeat_default_params(), .mode = mode, .chat = mode == GEN_MODE_CHAT};
    g_prog = mode == GEN_MODE_CHAT ? "greenpipe chat" : "greenpipe generate";
    void (*usage)(FILE *) = mode == GEN_MODE_CHAT ? chat_usage : gen_usage;
    o->prompts = calloc((size_t)argc + 1, sizeof *o->prompts);
    o->stops = calloc((size_t)argc + 1, sizeof *o->stops);
    if (!o->prompts || !o->stops) {
        gen_err("out of memory for the prompts\n");
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
                gen_err("--%s given more than once; each option may be given once\n",
                        gp_opt_name(longopts, c));
                usage(stderr);
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
        case 'W': o->sparse_always = true; break;
        case 'A': o->allow_empty = true; break;
        case 'G': o->chat = true; break;
        case 'Y': o->system = optarg; break;
        case 'U': o->chat_template = optarg; break;
        case 'X': st = gp_parse_long(optarg, 1, INT32_MAX, "--max-context", &o->max_context); break;
        case 'v': o->verbose_prompt = true; break;
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
                gen_err("--stop '': an empty stop string would end every sequence "
                        "before its first token; allowed: a non-empty text\n");
                return 2;
            }
            o->stops[o->n_stops++] = optarg;
            break;
        case 'j': st = gp_parse_long(optarg, 1, GP_POOL_MAX_THREADS, "--threads", &o->threads); break;
        case 'N': st = gp_parse_long(optarg, 1, GP_TP_MAX, "--tp", &o->tp); break;
        case 'I':
            st = size_arg(optarg, "--tp-peer-bytes", &o->tp_peer_bytes);
            o->tp_peer_given = true;
            break;
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
                gen_err("--backend '%s' is not available; allowed: cpu, cuda\n", optarg);
                return 2;
            }
            break;
        case 'e':
            if (strcmp(optarg, "seq") && strcmp(optarg, "pipelined") && strcmp(optarg, "afd")) {
                gen_err("--engine '%s': allowed seq, pipelined, afd\n", optarg);
                return 2;
            }
            o->afd = !strcmp(optarg, "afd");
            o->pipelined = o->afd || !strcmp(optarg, "pipelined"); /* AFD's steps are pipelined over two GPUs */
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
        case 'h': usage(stdout); return 0;
        case ':':
            gen_err("%s needs a value\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        default:
            gen_err("unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
        if (st != GP_OK) {
            gen_err("%s\n", gp_last_error());
            return 2;
        }
    }
    if (optind < argc) {
        gen_err("unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (mode == GEN_MODE_CHAT) {
        int rc = chat_refusals(o, seen);
        if (rc >= 0)
            return rc;
    } else {
        int rc = generate_chat_refusals(o, seen);
        if (rc >= 0)
            return rc;
    }
    int sources = (o->prompt_ids != NULL) + (o->n_prompts > 0) + (o->prompt_file != NULL);
    if (mode == GEN_MODE_GENERATE && (sources == 0 || o->steps < 0)) {
        gen_err("a prompt (--prompt, --prompt-file or --prompt-ids) and --steps are "
                "required\n");
        gen_usage(stderr);
        return 2;
    }
    if (sources > 1) {
        gen_err("give exactly one of --prompt (repeatable), --prompt-file and "
                "--prompt-ids; got %s%s%s\n", o->n_prompts ? "--prompt " : "", o->prompt_file ? "--prompt-file " : "",
                o->prompt_ids ? "--prompt-ids" : "");
        return 2;
    }
    if (o->allow_empty && o->prompt_ids) {
        gen_err("--allow-empty-prompt applies to --prompt and --prompt-file; "
                "--prompt-ids sequences are never empty\n");
        return 2;
    }
    if (o->ignore_eos && o->prompt_ids) {
        gen_err("--ignore-eos applies to --prompt and --prompt-file; --prompt-ids "
                "always generates --steps tokens\n");
        return 2;
    }
    if (o->top_given && o->temperature_given && o->sample.temperature == 0.0) {
        gen_err("--temperature 0 asks for greedy decoding and %s%s%sshape%s sampling; "
                "allowed: --temperature above 0, or leave it out (sampling at 1), or drop the sampling flags\n",
                seen['K'] ? "--top-k " : "", seen['R'] ? "--top-p " : "", seen['a'] ? "--min-p " : "",
                seen['K'] + seen['R'] + seen['a'] > 1 ? "" : "s");
        return 2;
    }
    if (o->top_given && !o->temperature_given)
        o->sample.temperature = 1.0; /* as llama-cli: its truncations sample; 1 leaves the model's distribution */
    if (o->last_n_given && !o->repeat_given) {
        gen_err("--repeat-last-n %d is the window of --repeat-penalty; give "
                "--repeat-penalty R too (default 1: off)\n", o->repeat.last_n);
        return 2;
    }
    if (o->n_stops && o->prompt_ids) {
        gen_err("--stop '%s' matches generated text, and --prompt-ids prints ids; "
                "allowed: --stop with --prompt or --prompt-file\n", o->stops[0]);
        return 2;
    }
    /* auto is the default on both backends: on cpu it means the checkpoint's own values in float32 */
    if (o->dtype_given && o->dtype != GP_DTYPE_AUTO && o->backend != GP_BACKEND_CUDA) {
        gen_err("--dtype %s applies to --backend cuda only (the cpu backend is the "
                "float32 reference, holding the checkpoint's values exactly); allowed on cpu: auto (the default), "
                "or use --backend cuda\n", gp_dtype_flag_name(o->dtype));
        return 2;
    }
    gp_feature_set f = gen_features(o);
    if (gp_features_check(&f) != GP_OK) {
        gen_err("%s\n", gp_last_error());
        return 2;
    }
    if (o->dump_logits && o->dump_prompt_logits && !strcmp(o->dump_logits, o->dump_prompt_logits)) {
        gen_err("--dump-prompt-logits '%s' is also the --dump-logits file; allowed: "
                "another path\n", o->dump_prompt_logits);
        return 2;
    }
    if ((o->kv_store_dir || o->kv_store_block) && !o->kv_store_size) {
        if (o->kv_store_dir)
            gen_err("--kv-store '%s' needs --kv-store-size SIZE (the store's host pool, "
                    "which turns stored prefixes on); allowed: both, or neither\n", o->kv_store_dir);
        else
            gen_err("--kv-store-block %ld needs --kv-store-size SIZE (the store's host "
                    "pool, which turns stored prefixes on); allowed: both, or neither\n", o->kv_store_block);
        return 2;
    }
    if (o->afd && o->split_given) {
        gen_err("--sm-split with --engine afd: each side runs on a whole GPU (attention on GPU 0, the FFN on "
                "GPU 1); allowed: --micro-batches\n");
        return 2;
    }
    if (o->split_given && (o->split.attn_sms < 1 || o->split.ffn_sms == 0)) {
        gen_err("--sm-split %d:%d: each side needs at least one %s\n", o->split.attn_sms,
                o->split.ffn_sms, o->backend == GP_BACKEND_CPU ? "thread" : "SM");
        return 2;
    }
    if (o->backend == GP_BACKEND_CPU && o->split_given && o->split.ffn_sms == GP_SPLIT_REST) {
        gen_err("--sm-split %d: the cpu backend counts threads; give both sides, "
                "e.g. %d:1\n", o->split.attn_sms, o->split.attn_sms);
        return 2;
    }
    if (o->backend == GP_BACKEND_CPU && o->split_given &&
        (o->split.attn_sms > GP_POOL_MAX_THREADS || o->split.ffn_sms > GP_POOL_MAX_THREADS)) {
        gen_err("--sm-split %d:%d: the cpu backend runs 1..%d worker threads on each "
                "side; allowed: A:F with A and F in 1..%d\n", o->split.attn_sms, o->split.ffn_sms,
                GP_POOL_MAX_THREADS, GP_POOL_MAX_THREADS);
        return 2;
    }
    /* every output is tried now, not found unwritable after the run */
    const char *out_flag[] = {"--dump-logits", "--dump-prompt-logits", "--sparsity-stats"};
    const char *out_path[] = {o->dump_logits, o->dump_prompt_logits, o->sparsity_stats};
    for (int i = 0; i < 3; i++)
        if (out_path[i] && gp_check_out_file(out_path[i], out_flag[i]) != GP_OK) {
            gen_err("%s\n", gp_last_error());
            return 2;
        }
    if (o->kv_store_dir && gp_check_out_dir(o->kv_store_dir, "--kv-store") != GP_OK) {
        gen_err("%s\n", gp_last_error());
        return 2;
    }
    return -1; /* continue */
}
