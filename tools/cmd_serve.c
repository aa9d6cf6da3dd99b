/* greenpipe serve: an OpenAI-compatible HTTP server over one backend. The
 * server listens before the model loads (/health says 503 until it is
 * ready); requests run by continuous batching on the serving core. */
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen_chat_impl.h"
#include "gp_comm.h"
#include "tp_ranks_impl.h"
#include "gp_engine.h"
#include "gp_green.h"
#include "gp_http.h"
#include "gp_serve.h"
#include "gp_tools.h"

#define PROG "greenpipe serve"
/* Lane batches a --pd-trace holds (24 bytes each); later ones are counted as dropped. */
#define PD_TRACE_EVENTS (1 << 21)

typedef struct serve_opts {
    const char *model;
    uint64_t seed;
    bool seed_given;
    gp_backend_kind backend;
    gp_dtype dtype;
    bool dtype_given;
    long threads, prefill_chunk, block_size, max_batch, max_context, kv_blocks;
    uint64_t vram_budget, kv_vram_budget, kv_store_size;
    gp_split_req pd_split;
    bool pd_split_given, pd_idle_whole;
    bool pd_auto;                         /* --pd-split auto */
    long pd_splits[GP_PD_MAX_SPLITS];     /* --pd-splits: candidate decode SMs */
    int n_pd_splits;
    gp_pd_planner_params pd_planner;
    const char *pd_profile, *pd_profile_save, *pd_trace;
    const char *kv_store_dir;
    const char *chat_template;
    const char *served_name;
    gp_serve_params sp;
    bool budget_given;
    gp_http_params hp;
    uint64_t max_body;
    long tp;                /* --tp: GPUs, one process each; 1: one GPU */
    uint64_t tp_peer_bytes; /* --tp-peer-bytes */
    bool tp_peer_given;
} serve_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: greenpipe serve --model DIR|PRESET [options]\n"
            "An OpenAI-compatible HTTP server: POST /v1/completions (prompt as text or token ids),\n"
            "POST /v1/chat/completions (the model's chat template), both with \"stream\": true as\n"
            "server-sent events; GET /v1/models, GET /health (503 while loading, 200 when ready),\n"
            "GET /metrics (Prometheus text). Requests join and leave the running batch at every step\n"
            "(continuous batching); each step holds at most --max-num-batched-tokens tokens.\n"
            "Server:\n"
            "  --host ADDR          address to bind (IPv4 or IPv6); default 127.0.0.1 (this machine only)\n"
            "  --port N             TCP port, 0..65535; default 8000; 0 picks a free one (printed)\n"
            "  --api-key KEY        require \"Authorization: Bearer KEY\" on /v1/ routes; default none\n"
            "  --served-model-name NAME\n"
            "                       the model id requests name; default the checkpoint directory's name or\n"
            "                       the preset's\n"
            "  --max-waiting N      requests queued beside the running ones, 1..1000000; beyond, 429 with\n"
            "                       Retry-After; default 1024\n"
            "  --timeout S          seconds a connection may stay idle (a slow or half-sent request),\n"
            "                       1..3600; default 30\n"
            "  --max-body SIZE      request body bytes at most (413 beyond), as --vram-budget's sizes;\n"
            "                       default 4M\n"
            "  --max-connections N  open connections at most, 1..1000000; default 1024 (the open-file\n"
            "                       limit is raised to fit them, or the server refuses to start)\n"
            "Scheduling:\n"
            "  --max-batch N        sequences running at once (the backend's slots), 1..4096; default 16\n"
            "  --max-context N      tokens per sequence, prompt and answer, 2..the model's; default the\n"
            "                       model's max context\n"
            "  --max-num-batched-tokens N\n"
            "                       tokens of one step at most (decode rows and prefill chunks), >= 1;\n"
            "                       default 2048. cuda: the engine's step holds this many rows\n"
            "  --schedule chunked|prefill-first|pd-mux\n"
            "                       chunked (default): every running decode first, then prefill chunks up\n"
            "                       to the budget (Sarathi-Serve, vLLM v1); prefill-first: whole prompts\n"
            "                       while any wait, decodes otherwise (the older baseline); pd-mux: decode\n"
            "                       rows every step on one lane while a batch of prefill chunks up to the\n"
            "                       budget runs on another (cuda: --pd-split; cpu: the two in turn)\n"
            "  --pd-split D:P|auto  cuda, with pd-mux: the decode lane on D SMs and the prefill lane on P\n"
            "                       (green-context partitions; P may be left out for the rest), e.g. 32;\n"
            "                       auto: each time the prefill lane is free, a planner picks the pair whose\n"
            "                       decode partition is the fewest SMs that keep the decode step under\n"
            "                       --pd-tpot-ms beside the prefill, every SM to prefill while nothing\n"
            "                       decodes, or the chunks in the decode rows' batch (mixed) where that\n"
            "                       prefills faster; decode on every SM while the lane is idle\n"
            "  --pd-idle-whole      with --pd-split D:P: the decode rows run on every SM while the prefill\n"
            "                       lane is idle (the decode partition only beside a prefill batch)\n"
            "  --pd-splits D1,D2,.. with --pd-split auto: the candidate decode partitions' SMs (each pair's\n"
            "                       prefill partition the rest), at most %d; default 16,32,48,64\n"
            "  --pd-tpot-ms MS      with --pd-split auto: the decode step to stay under on average; default 40\n"
            "  --pd-tpot-window N   with --pd-split auto: the decode steps that average: a mixed batch may\n"
            "                       spend the slack the last N - 1 left under --pd-tpot-ms (a request's\n"
            "                       TPOT is the mean of its steps), 1..100000; 1: every step under it;\n"
            "                       default 32\n"
            "  --pd-hysteresis N    with --pd-split auto: launches in a row that must choose a smaller decode\n"
            "                       partition before it is taken (a larger one is taken at once), 1..1000;\n"
            "                       default 3\n"
            "  --pd-no-mixed        with --pd-split auto: never put prefill chunks in the decode batch\n"
            "  --pd-profile FILE    with --pd-split auto: the latency profile to fit (a --pd-profile-save\n"
            "                       file of the same GPU, model and splits) instead of measuring one at\n"
            "                       start-up (about a minute for llama3-8b at a 16k context)\n"
            "  --pd-profile-save FILE\n"
            "                       with --pd-split auto: write the profile measured at start-up\n"
            "  --pd-trace FILE      with --pd-split: write every lane batch at shutdown as a Chrome\n"
            "                       trace-event file (Perfetto opens it), one track per lane\n"
            "  --kv-blocks N        KV blocks admission counts against; default all the backend holds\n"
            "                       (--max-batch x --max-context / --block-size); fewer forces preemption\n"
            "  --no-prefix-cache    do not keep full KV blocks of finished and running requests for later\n"
            "                       requests with the same prefix (default: kept, LRU evicted)\n"
            "  --kv-store-size SIZE cuda: keep the blocks the prefix cache evicts in a pinned host store of\n"
            "                       SIZE bytes (LRU), so a later request reloads them layer by layer\n"
            "                       beside its batch instead of computing them; default off\n"
            "  --kv-store DIR       with --kv-store-size: also keep the stored blocks as files in DIR\n"
            "                       (reused by later runs of the same model, dtype and --block-size)\n"
            "Engine (as greenpipe generate's):\n"
            "  --backend cpu|cuda   default cpu (the float32 reference)\n"
            "  --dtype auto|bf16|fp16  cuda only; default auto\n"
            "  --threads N          cpu: reference threads, 1..%d\n"
            "  --prefill-chunk N    cuda: rows of the engine's step, 1..%d; default --max-num-batched-tokens\n"
            "  --vram-budget SIZE   cuda: weights streamed beyond VRAM within SIZE device bytes\n"
            "  --kv-vram-budget SIZE\n"
            "                       cuda: an offloaded KV cache of at most SIZE device bytes (with\n"
            "                       --no-prefix-cache: an offloaded block lives at its sequence's own place)\n"
            "  --block-size N       KV block size in tokens, 1..1024; default 16\n"
            "  --tp N               cuda: tensor parallel over GPUs 0..N-1 of this host, one process each\n"
            "                       (as greenpipe generate --tp): this process serves, the others repeat\n"
            "                       its every batch; 1..%d; default 1\n"
            "  --tp-peer-bytes SIZE with --tp: the ranks' sums of up to SIZE bytes over peer memory, larger\n"
            "                       ones through NCCL; 0: NCCL alone; default 16M\n"
            "  --chat-template NAME the chat template (%s); default: the one\n"
            "                       tokenizer_config.json names; without one, chat requests are refused\n"
            "  --seed S             seed of a preset's synthetic weights; default 0\n"
            "SIGINT or SIGTERM stops the server: running requests end as cancelled.\n",
            GP_PD_MAX_SPLITS, GP_POOL_MAX_THREADS, GP_ENGINE_MAX_PREFILL_CHUNK, GP_TP_MAX, gp_chat_template_names());
}

static int bad(const char *fmt, const char *a)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return 2;
}

static int parse(int argc, char **argv, serve_opts *o)
{
    static const struct option longopts[] = {
        {"model", required_argument, NULL, 'm'},       {"host", required_argument, NULL, 'H'},
        {"port", required_argument, NULL, 'p'},        {"api-key", required_argument, NULL, 'k'},
        {"served-model-name", required_argument, NULL, 'N'}, {"max-waiting", required_argument, NULL, 'w'},
        {"timeout", required_argument, NULL, 'T'},     {"max-body", required_argument, NULL, 'y'},
        {"max-batch", required_argument, NULL, 'b'},   {"max-context", required_argument, NULL, 'X'},
        {"max-num-batched-tokens", required_argument, NULL, 't'}, {"schedule", required_argument, NULL, 'S'},
        {"kv-blocks", required_argument, NULL, 'K'},   {"no-prefix-cache", no_argument, NULL, 'n'},
        {"backend", required_argument, NULL, 'B'},     {"dtype", required_argument, NULL, 'D'},
        {"threads", required_argument, NULL, 'j'},     {"prefill-chunk", required_argument, NULL, 'c'},
        {"vram-budget", required_argument, NULL, 'V'}, {"kv-vram-budget", required_argument, NULL, 'O'},
        {"block-size", required_argument, NULL, 'z'},  {"chat-template", required_argument, NULL, 'U'},
        {"seed", required_argument, NULL, 's'},       {"max-connections", required_argument, NULL, 'C'},
        {"kv-store-size", required_argument, NULL, 'Z'}, {"kv-store", required_argument, NULL, 'Y'},
        {"pd-split", required_argument, NULL, 'P'},   {"pd-idle-whole", no_argument, NULL, 'W'},
        {"pd-splits", required_argument, NULL, 'L'},  {"pd-tpot-ms", required_argument, NULL, 'q'},
        {"pd-hysteresis", required_argument, NULL, 'e'}, {"pd-no-mixed", no_argument, NULL, 'x'},
        {"pd-profile", required_argument, NULL, 'F'}, {"pd-profile-save", required_argument, NULL, 'G'},
        {"pd-trace", required_argument, NULL, 'R'},   {"pd-tpot-window", required_argument, NULL, 'i'},
        {"tp", required_argument, NULL, 'E'},         {"tp-peer-bytes", required_argument, NULL, 'I'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (serve_opts){.tp = 1, .tp_peer_bytes = GP_COMM_PEER_BYTES_DEFAULT, .model = GP_DEFAULT_PRESET,
                      .backend = GP_BACKEND_CPU, .block_size = 16, .max_batch = 16,
                      .sp = gp_serve_default_params(), .hp = gp_http_default_params(),
                      .pd_splits = {16, 32, 48, 64}, .n_pd_splits = 4, .pd_planner = gp_pd_planner_default_params()};
    o->max_body = o->hp.max_body;
    optind = 1;
    opterr = 0;
    bool seen[128] = {false};
    int c;
    long v;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        gp_status st = GP_OK;
        if (c > 0 && c < 128 && c != 'h' && c != ':' && c != '?') {
            if (seen[c])
                return bad("--%s given more than once; each option may be given once", gp_opt_name(longopts, c));
            seen[c] = true;
        }
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'H': o->hp.host = optarg; break;
        case 'p':
            if ((st = gp_parse_long(optarg, 0, 65535, "--port", &v)) == GP_OK)
                o->hp.port = (int)v;
            break;
        case 'k':
            if (!optarg[0])
                return bad("--api-key '%s': an empty key would let every request in; allowed: a non-empty text",
                           optarg);
            o->hp.api_key = optarg;
            break;
        case 'N':
            if (!optarg[0])
                return bad("--served-model-name '%s': allowed a non-empty name", optarg);
            o->served_name = optarg;
            break;
        case 'w':
            if ((st = gp_parse_long(optarg, 1, 1000000, "--max-waiting", &v)) == GP_OK)
                o->sp.max_waiting = (int)v;
            break;
        case 'T':
            if ((st = gp_parse_long(optarg, 1, 3600, "--timeout", &v)) == GP_OK)
                o->hp.timeout_s = (int)v;
            break;
        case 'y': st = gp_parse_size(optarg, "--max-body", &o->max_body); break;
        case 'C':
            if ((st = gp_parse_long(optarg, 1, 1000000, "--max-connections", &v)) == GP_OK)
                o->hp.max_connections = (int)v;
            break;
        case 'b': st = gp_parse_long(optarg, 1, 4096, "--max-batch", &o->max_batch); break;
        case 'X': st = gp_parse_long(optarg, 2, INT32_MAX, "--max-context", &o->max_context); break;
        case 't':
            if ((st = gp_parse_long(optarg, 1, GP_ENGINE_MAX_PREFILL_CHUNK, "--max-num-batched-tokens", &v)) == GP_OK)
                o->sp.token_budget = (int)v;
            o->budget_given = true;
            break;
        case 'S':
            if (!strcmp(optarg, "chunked"))
                o->sp.policy = GP_SCHED_CHUNKED;
            else if (!strcmp(optarg, "prefill-first"))
                o->sp.policy = GP_SCHED_PREFILL_FIRST;
            else if (!strcmp(optarg, "pd-mux"))
                o->sp.policy = GP_SCHED_PD_MUX;
            else
                return bad("--schedule '%s': allowed chunked, prefill-first, pd-mux", optarg);
            break;
        case 'K': st = gp_parse_long(optarg, 1, INT32_MAX, "--kv-blocks", &o->kv_blocks); break;
        case 'n': o->sp.prefix_cache = false; break;
        case 'B':
            if (gp_backend_kind_parse(optarg, &o->backend) != GP_OK)
                return bad("--backend '%s' is not available; allowed: cpu, cuda", optarg);
            break;
        case 'D':
            if ((st = gp_dtype_parse(optarg, GP_DTYPE_ALLOW_AUTO, &o->dtype)) == GP_OK)
                o->dtype_given = true;
            break;
        case 'j': st = gp_parse_long(optarg, 1, GP_POOL_MAX_THREADS, "--threads", &o->threads); break;
        case 'c': st = gp_parse_long(optarg, 1, GP_ENGINE_MAX_PREFILL_CHUNK, "--prefill-chunk", &o->prefill_chunk); break;
        case 'V': st = gp_parse_size(optarg, "--vram-budget", &o->vram_budget); break;
        case 'O': st = gp_parse_size(optarg, "--kv-vram-budget", &o->kv_vram_budget); break;
        case 'Z': st = gp_parse_size(optarg, "--kv-store-size", &o->kv_store_size); break;
        case 'Y': o->kv_store_dir = optarg; break;
        case 'W': o->pd_idle_whole = true; break;
        case 'P':
            o->pd_auto = !strcmp(optarg, "auto");
            if (o->pd_auto || (st = gp_split_parse(optarg, &o->pd_split)) == GP_OK)
                o->pd_split_given = true;
            break;
        case 'L':
            st = gp_parse_long_list(optarg, 1, 4096, "--pd-splits", o->pd_splits, GP_PD_MAX_SPLITS, &o->n_pd_splits);
            break;
        case 'q': {
            double ms = 0;
            if ((st = gp_parse_double(optarg, "--pd-tpot-ms", &ms)) == GP_OK && (ms <= 0 || ms > 60000))
                return bad("--pd-tpot-ms %s: allowed a number of milliseconds in (0, 60000]", optarg);
            o->pd_planner.tpot_ms = (float)ms;
            break;
        }
        case 'e':
            if ((st = gp_parse_long(optarg, 1, 1000, "--pd-hysteresis", &v)) == GP_OK)
                o->pd_planner.hysteresis = (int)v;
            break;
        case 'x': o->pd_planner.mixed = false; break;
        case 'i':
            if ((st = gp_parse_long(optarg, 1, 100000, "--pd-tpot-window", &v)) == GP_OK)
                o->pd_planner.window = (int)v;
            break;
        case 'F': st = gp_parse_path(optarg, "--pd-profile"); o->pd_profile = optarg; break;
        case 'G': st = gp_check_out_file(optarg, "--pd-profile-save"); o->pd_profile_save = optarg; break;
        case 'R': st = gp_check_out_file(optarg, "--pd-trace"); o->pd_trace = optarg; break;
        case 'z': st = gp_parse_long(optarg, 1, 1024, "--block-size", &o->block_size); break;
        case 'U': o->chat_template = optarg; break;
        case 's': st = gp_parse_u64(optarg, "--seed", &o->seed); o->seed_given = true; break;
        case 'E': st = gp_parse_long(optarg, 1, GP_TP_MAX, "--tp", &o->tp); break;
        case 'I':
            st = gp_parse_size(optarg, "--tp-peer-bytes", &o->tp_peer_bytes);
            o->tp_peer_given = true;
            break;
        case 'h': usage(stdout); return 0;
        case ':':
            fprintf(stderr, PROG ": %s needs a value\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        default:
            fprintf(stderr, PROG ": unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
        if (st != GP_OK) {
            fprintf(stderr, PROG ": %s\n", gp_last_error());
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (o->max_body > (uint64_t)1 << 30) {
        fprintf(stderr, PROG ": --max-body %" PRIu64 " bytes: allowed at most 1G (a body is held in memory whole)\n",
                o->max_body);
        return 2;
    }
    o->hp.max_body = (size_t)o->max_body;
    if (o->backend != GP_BACKEND_CUDA) {
        const char *cuda_only = o->dtype_given && o->dtype != GP_DTYPE_AUTO ? "--dtype"
                                : o->prefill_chunk                     ? "--prefill-chunk"
                                : o->vram_budget                       ? "--vram-budget"
                                : o->kv_vram_budget                    ? "--kv-vram-budget"
                                                                       : NULL;
        if (cuda_only)
            return bad("%s applies to --backend cuda only", cuda_only);
    } else if (o->threads) {
        return bad("%s applies to --backend cpu only (the cuda engine runs on the GPU)", "--threads");
    }
    if (o->prefill_chunk && o->budget_given && o->sp.token_budget > o->prefill_chunk &&
        o->sp.token_budget > o->max_batch) {
        fprintf(stderr, PROG ": --max-num-batched-tokens %d exceeds the rows of the engine's step, max(--max-batch "
                "%ld, --prefill-chunk %ld); allowed: at most that, or leave --prefill-chunk out (it follows the "
                "budget)\n", o->sp.token_budget, o->max_batch, o->prefill_chunk);
        return 2;
    }
    if (o->kv_store_dir && !o->kv_store_size)
        return bad("--kv-store %s without --kv-store-size: the files back a host store, which the size turns on",
                   o->kv_store_dir);
    if (o->kv_store_size && !o->sp.prefix_cache)
        return bad("%s with --no-prefix-cache: the host store keeps the blocks the prefix cache evicts",
                   "--kv-store-size");
    o->sp.host_tier = o->kv_store_size != 0;
    if (o->pd_idle_whole && !o->pd_split_given)
        return bad("%s: it places the decode rows of --pd-split's lanes; give --pd-split D:P", "--pd-idle-whole");
    if (o->pd_idle_whole && o->pd_auto)
        return bad("%s with --pd-split auto: the adaptive split already decodes on every SM while the prefill "
                   "lane is idle", "--pd-idle-whole");
    static const char auto_only[] = "LqexFGi";
    for (const char *k = auto_only; *k; k++)
        if (seen[(int)*k] && !o->pd_auto)
            return bad("--%s tunes the adaptive split; give --pd-split auto", gp_opt_name(longopts, *k));
    if (o->pd_profile && o->pd_profile_save)
        return bad("%s: --pd-profile loads a profile, --pd-profile-save writes a measured one; give one",
                   "--pd-profile-save");
    if (o->pd_trace && !o->pd_split_given)
        return bad("%s traces the prefill and decode lanes; give --pd-split", "--pd-trace");
    if (o->pd_split_given && o->sp.policy != GP_SCHED_PD_MUX)
        return bad("%s: the two lanes run the pd-mux schedule's batches; give --schedule pd-mux", "--pd-split");
    if (o->sp.policy == GP_SCHED_PD_MUX && o->backend == GP_BACKEND_CUDA && !o->pd_split_given)
        return bad("%s on cuda needs --pd-split D:P (the decode lane's and the prefill lane's SMs) or auto",
                   "--schedule pd-mux");
    gp_feature_set f = {.cuda = o->backend == GP_BACKEND_CUDA, .graphs = true,
                        .prefill_chunk = o->prefill_chunk != 0, .vram_budget = o->vram_budget,
                        .kv_vram_budget = o->kv_vram_budget, .kv_store_bytes = o->kv_store_size,
                        .prefix_cache = o->sp.prefix_cache, .pd_lanes = o->pd_split_given, .tp = o->tp > 1,
                        .tp_peer = o->tp_peer_given};
    if (gp_features_check(&f) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 2;
    }
    return -1;
}

static volatile sig_atomic_t g_stop;
static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* The model's text side: tokenizer, EOS ids, chat template (optional unless
 * named). Presets have none: token ids only. Returns -1 to go on, else the
 * exit code. */
static int load_text(const serve_opts *o, const gp_model_source *src, gp_tokenizer **tok, gp_eos_ids *eos,
                     gen_chat *chat, bool *has_chat)
{
    gp_status st;
    *has_chat = false;
    if (src->synthetic) {
        if (o->chat_template)
            return bad("--chat-template: --model %s is a preset (synthetic weights) without a tokenizer", o->model);
        fprintf(stderr, PROG ": --model %s is a preset without a tokenizer: prompts must be token ids, and "
                "chat requests are refused\n", o->model);
        return -1;
    }
    if ((st = gp_tokenizer_load_dir(src->path, tok)) != GP_OK) {
        fprintf(stderr, PROG ": serving needs the checkpoint's tokenizer: %s\n", gp_last_error());
        return gp_input_exit_code(st);
    }
    if ((st = gp_eos_load_dir(src->path, src->cfg.vocab, eos)) != GP_OK) {
        fprintf(stderr, PROG ": the checkpoint's EOS ids: %s\n", gp_last_error());
        return gp_input_exit_code(st);
    }
    if ((st = gen_chat_setup(*tok, src->path, o->chat_template, chat)) != GP_OK) {
        if (o->chat_template) {
            fprintf(stderr, PROG ": --chat-template: %s\n", gp_last_error());
            return 2;
        }
        fprintf(stderr, PROG ": no chat template (%s): chat requests are refused\n", gp_last_error());
        return -1;
    }
    *has_chat = true;
    return -1;
}

/* The backend's parameters from the options; -1 to go on, else the exit
 * code after a message. */
static int backend_params(const serve_opts *o, const gp_config *cfg, int context, gp_backend_params *out)
{
    gp_backend_params bp = gp_backend_default_params(o->backend);
    bp.n_seqs = (int)o->max_batch;
    bp.max_context = context;
    bp.block_size = (int)o->block_size;
    bp.cpu_threads = (int)o->threads;
    bp.vram_budget = o->vram_budget;
    bp.kv_vram_budget = o->kv_vram_budget;
    /* cuda: the engine's step rows hold the budget */
    bp.prefill_chunk =
        o->backend == GP_BACKEND_CUDA ? (int)(o->prefill_chunk ? o->prefill_chunk : o->sp.token_budget) : 0;
    if (o->dtype_given && o->backend == GP_BACKEND_CUDA)
        bp.dtype = o->dtype;
    if (o->pd_split_given) {
        bp.pd_lanes = true;
        bp.pd_idle_whole = o->pd_idle_whole;
        bp.attn_units = o->pd_split.attn_sms;
        bp.ffn_units = o->pd_split.ffn_sms;
    }
    if (o->pd_auto) {
        bp.n_pd_splits = o->n_pd_splits;
        for (int i = 0; i < o->n_pd_splits; i++)
            bp.pd_decode_sms[i] = (int)o->pd_splits[i];
        bp.pd_profile_path = o->pd_profile;
        bp.pd_profile_save = o->pd_profile_save;
        bp.pd_planner = o->pd_planner;
    }
    bp.kv_store_bytes = o->kv_store_size; /* the store's blocks are the cache's: a block moves whole */
    bp.kv_store_dir = o->kv_store_dir;
    bp.kv_store_block = o->kv_store_size ? bp.block_size : 0;
    bp.tp = (int)o->tp;
    bp.tp_peer_bytes = (size_t)o->tp_peer_bytes;
    if (gp_backend_check_budget(&bp, cfg) != GP_OK || gp_backend_check_kv_store(&bp, cfg) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 2;
    }
    *out = bp;
    return -1;
}

/* A tensor-parallel rank other than 0: its shard loaded, every operation
 * rank 0 sends repeated until rank 0 ends the run. Rank 0 takes the
 * signals and ends this one, so they are ignored here. Exits. */
static void follow(const gp_model_source *src, const gp_backend_params *bp)
{
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    gp_backend *b = NULL;
    long long ops = 0;
    gp_status st = gp_backend_open(src, bp, &b);
    if (st == GP_OK)
        st = gp_tp_follow(gp_backend_exec(b), gp_backend_group(b), &ops);
    if (st != GP_OK)
        fprintf(stderr, PROG ": rank %d after %lld operations: %s: %s\n", bp->tp_rank, ops, gp_status_str(st),
                gp_last_error());
    gp_backend_close(b);
    fflush(NULL);
    _exit(st == GP_OK ? 0 : 1);
}

int gp_cmd_serve(int argc, char **argv)
{
    serve_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    gp_model_source src;
    gp_status st;
    if ((st = gp_model_source_resolve(o.model, o.seed, &src)) != GP_OK)
        return bad("--model: %s", gp_last_error());
    if (o.seed_given && !src.synthetic)
        return bad("--seed: --model %s is a checkpoint; --seed seeds a preset's synthetic weights (a request "
                   "seeds its own sampling)", o.model);
    const gp_config *cfg = &src.cfg;
    if (o.max_context > cfg->max_context) {
        fprintf(stderr, PROG ": --max-context %ld is beyond the model's max context %d; allowed: 2..%d\n",
                o.max_context, cfg->max_context, cfg->max_context);
        return 2;
    }
    int context = o.max_context ? (int)o.max_context : cfg->max_context;
    long long all_blocks = gp_serve_kv_blocks((int)o.max_batch, context, (int)o.block_size);
    if (o.kv_blocks > all_blocks) {
        fprintf(stderr, PROG ": --kv-blocks %ld exceeds the %lld blocks --max-batch %ld x --max-context %d holds "
                "in blocks of %ld; allowed 1..%lld\n", o.kv_blocks, all_blocks, o.max_batch, context, o.block_size,
                all_blocks);
        return 2;
    }
    o.sp.kv_blocks = (int)o.kv_blocks;
    char name[256];
    if (o.served_name)
        snprintf(name, sizeof name, "%s", o.served_name);
    else {
        char path[4096];
        snprintf(path, sizeof path, "%s", src.synthetic ? o.model : src.path);
        snprintf(name, sizeof name, "%s", basename(path));
    }
    o.sp.model_name = name;

    gp_backend_params bp;
    if ((rc = backend_params(&o, cfg, context, &bp)) >= 0)
        return rc;
    /* the model's text side before the ranks fork: a rank 0 that fails here leaves no rank waiting */
    gp_tokenizer *tok = NULL;
    gp_eos_ids eos = {0};
    gen_chat chat = {0};
    bool has_chat = false;
    if ((rc = load_text(&o, &src, &tok, &eos, &chat, &has_chat)) >= 0) {
        gp_tokenizer_free(tok);
        return rc;
    }
    /* --tp: one process per GPU from here on; this one serves, the others follow */
    gp_tp_ranks tpr;
    if ((rc = gp_tp_ranks_start(cfg, (int)o.tp, PROG, &tpr)) != 0) {
        gp_tokenizer_free(tok);
        return rc;
    }
    bp.tp_rank = tpr.rank;
    bp.tp_rendezvous = tpr.spec;
    if (tpr.rank > 0)
        follow(&src, &bp); /* does not return */

    /* listening first: a load balancer sees 503 while the model loads */
    gp_http *http = NULL;
    if ((st = gp_http_start(&o.hp, &http)) != GP_OK) {
        fprintf(stderr, PROG ": cannot listen on %s:%d: %s\n", o.hp.host, o.hp.port, gp_last_error());
        gp_tp_ranks_abort(&tpr);
        gp_tokenizer_free(tok);
        return 1;
    }
    fprintf(stderr, PROG ": listening on http://%s%s%s:%d (loading the model)\n", strchr(o.hp.host, ':') ? "[" : "",
            o.hp.host, strchr(o.hp.host, ':') ? "]" : "", gp_http_port(http));
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int exit_code = 1;
    gp_backend *b = NULL;
    gp_serve *core = NULL;
    gp_tp_lead *lead = NULL;
    double t0 = gp_now_s();
    if ((st = gp_backend_open(&src, &bp, &b)) != GP_OK) {
        fprintf(stderr, PROG ": loading the model: %s: %s\n", gp_status_str(st), gp_last_error());
        goto out;
    }
    if (o.tp > 1 && (st = gp_tp_lead_create(gp_backend_exec(b), gp_backend_group(b), &lead)) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        goto out;
    }
    if (o.pd_trace && (st = gp_pd_exec_trace_start(gp_backend_pd_exec(b), PD_TRACE_EVENTS)) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        goto out;
    }
    int max_rows = o.backend == GP_BACKEND_CUDA ? (bp.prefill_chunk > bp.n_seqs ? bp.prefill_chunk : bp.n_seqs) : 0;
    gp_serve_env env = {.exec = lead ? gp_tp_lead_get(lead) : gp_backend_exec(b), .cfg = gp_backend_config(b),
                        .max_seqs = bp.n_seqs, .max_context = context, .block_size = bp.block_size,
                        .max_rows = max_rows, .tok = tok,
                        .chat = has_chat ? chat.tpl : NULL, .chat_stop_ids = chat.stop_ids,
                        .n_chat_stop_ids = chat.n_stop_ids, .eos = tok ? &eos : NULL};
    if ((st = gp_serve_create(&env, &o.sp, &core)) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        exit_code = st == GP_ERR_INVALID_ARG ? 2 : 1;
        goto out;
    }
    gp_http_set_core(http, core);
    gp_serve_stats ss;
    gp_serve_get_stats(core, &ss);
    fprintf(stderr, PROG ": ready in %.2f s: model '%s', backend %s; %ld sequences of %d tokens, %d KV blocks of "
            "%ld, %d tokens per step (%s), prefix cache %s%s\n", gp_now_s() - t0, name, gp_backend_describe(b),
            o.max_batch, context, ss.kv_blocks_total, o.block_size, o.sp.token_budget,
            o.sp.policy == GP_SCHED_CHUNKED ? "chunked" : o.sp.policy == GP_SCHED_PD_MUX ? "pd-mux" : "prefill-first",
            gp_serve_prefix_cache_on(core)
                ? "on" : o.sp.prefix_cache ? "off (the backend shares no KV blocks)" : "off",
            o.sp.host_tier ? ", the host store behind it" : "");
    gp_group *group = gp_backend_group(b);
    char why[512];
    while (!g_stop) {
        if (group && gp_group_failed(group, why, sizeof why)) { /* every batch would fail from here */
            fprintf(stderr, PROG ": stopping: the tensor-parallel group failed: %s\n", why);
            break;
        }
        usleep(100000);
    }
    gp_serve_get_stats(core, &ss);
    fprintf(stderr, PROG ": stopping after %lld requests (%lld stop, %lld length, %lld cancelled, %lld failed), %lld "
            "prompt and %lld generated tokens, %lld preemptions, %lld of %lld prompt tokens from the prefix cache "
            "(%lld of them loaded from the host store; %lld blocks offloaded into it, %lld lost)\n",
            ss.requests_finished[GP_SERVE_STOP] + ss.requests_finished[GP_SERVE_LENGTH] +
                ss.requests_finished[GP_SERVE_CANCELLED] + ss.requests_finished[GP_SERVE_ERROR],
            ss.requests_finished[GP_SERVE_STOP], ss.requests_finished[GP_SERVE_LENGTH],
            ss.requests_finished[GP_SERVE_CANCELLED], ss.requests_finished[GP_SERVE_ERROR], ss.prompt_tokens,
            ss.generation_tokens, ss.preemptions, ss.prefix_hit_tokens + ss.prefix_host_hit_tokens,
            ss.prefix_query_tokens, ss.prefix_host_hit_tokens, ss.host_offloaded_blocks, ss.host_offload_failures);
    if (o.sp.policy == GP_SCHED_PD_MUX)
        fprintf(stderr, PROG ": pd-mux: %lld prefill-lane batches; %lld of %lld decode steps ran beside one; %lld "
                "steps ran prefill chunks with their decode rows (mixed)\n", ss.prefill_batches, ss.overlapped_steps,
                ss.steps, ss.mixed_steps);
    for (int i = 0; i < ss.n_lanes; i++) {
        const gp_lane_busy *l = &ss.lanes[i];
        if (l->batches == 0 && l->selected_s == 0)
            continue;
        fprintf(stderr, PROG ": lane %s on %s: busy %.2f s (%.1f%% of %.1f s up", l->lane, l->partition, l->busy_s,
                100.0 * l->busy_s / (ss.uptime_seconds > 0 ? ss.uptime_seconds : 1), ss.uptime_seconds);
        if (strcmp(l->partition, "all"))
            fprintf(stderr, ", %.1f s selected", l->selected_s);
        fprintf(stderr, "), %lld batches, %lld rows\n", l->batches, l->rows);
    }
    if (ss.steps > 0)
        fprintf(stderr, PROG ": %lld steps: %.3f ms in the backend and %.3f ms of scheduling and delivery a step "
                "(%.2f%%); %lld decode-only steps: %.1f rows at a mean context of %.0f tokens, %.3f ms a step, %.0f "
                "tokens/s\n", ss.steps, ss.step_seconds * 1e3 / ss.steps, ss.host_seconds * 1e3 / ss.steps,
                100.0 * ss.host_seconds / (ss.step_seconds > 0 ? ss.step_seconds : 1), ss.decode_steps,
                ss.decode_steps ? (double)ss.decode_rows / ss.decode_steps : 0.0,
                ss.decode_rows ? (double)ss.decode_context / ss.decode_rows : 0.0,
                ss.decode_steps ? ss.decode_seconds * 1e3 / ss.decode_steps : 0.0,
                ss.decode_seconds > 0 ? ss.decode_rows / ss.decode_seconds : 0.0);
    exit_code = group && gp_group_failed(group, NULL, 0) ? 1 : 0;
out:
    gp_http_stop(http);
    gp_serve_destroy(core);
    if (lead && gp_tp_lead_end(lead) != GP_OK) /* the followers return; after the core: nothing runs */
        fprintf(stderr, PROG ": ending the other ranks: %s\n", gp_last_error());
    gp_tp_lead_destroy(lead);
    if (exit_code == 0 && o.pd_trace) { /* the lanes are idle once the core has stopped */
        if (gp_pd_exec_write_trace(gp_backend_pd_exec(b), o.pd_trace) == GP_OK) {
            fprintf(stderr, PROG ": the lanes' trace is in %s\n", o.pd_trace);
        } else {
            fprintf(stderr, PROG ": %s\n", gp_last_error());
            exit_code = 1;
        }
    }
    gp_backend_close(b);
    gp_tokenizer_free(tok);
    if (!b)
        gp_tp_ranks_abort(&tpr); /* rank 0 never reached the group: the others still wait for it */
    return gp_tp_ranks_finish(&tpr, PROG, exit_code);
}
