/* Options of greenpipe generate and greenpipe chat, which share every
 * engine and sampling flag: one parser, one usage text per command, and the
 * message prefix of the command that runs. Private to the greenpipe program. */
#ifndef GP_GEN_OPTS_IMPL_H
#define GP_GEN_OPTS_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "gp_green.h"
#include "gp_model.h"
#include "gp_pipeline.h"
#include "gp_tools.h"

typedef enum gen_mode {
    GEN_MODE_GENERATE, /* greenpipe generate: prompts given, one batch */
    GEN_MODE_CHAT,     /* greenpipe chat: messages read from standard input, turn by turn */
} gen_mode;

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
    long tp;               /* --tp: GPUs of tensor parallelism, 1 (default) .. GP_TP_MAX */
    uint64_t tp_peer_bytes; /* --tp-peer-bytes; default GP_COMM_PEER_BYTES_DEFAULT */
    bool tp_peer_given;
    long steps;
    gp_backend_kind backend;
    const char *dump_logits;
    const char *dump_prompt_logits;
    uint64_t seed;
    bool seed_given;
    long block_size;
    bool pipelined;        /* --engine pipelined */
    bool afd;              /* --engine afd (pipelined is set too) */
    gp_split_req split;    /* --sm-split */
    bool split_given;      /* false: the backend's default split */
    long micro_batches;    /* --micro-batches */
    bool pipe_flag_given;  /* --sm-split or --micro-batches */
    long prefill_chunk;    /* --prefill-chunk; 0: not given (the engine's default) */
    uint64_t vram_budget;  /* --vram-budget bytes; 0: not given (weights resident on the device) */
    const char *sparsity;  /* --sparsity FILE.json; NULL: dense */
    const char *sparsity_stats; /* --sparsity-stats FILE.json; NULL: none written */
    bool sparse_always;    /* --sparse-always: every calibrated projection sparse on every step */
    uint64_t kv_store_size; /* --kv-store-size bytes; 0: not given (no stored prefixes) */
    uint64_t kv_vram_budget; /* --kv-vram-budget bytes; 0: not given (the whole KV cache on the device) */
    const char *kv_store_dir; /* --kv-store DIR; NULL: memory only */
    long kv_store_block;   /* --kv-store-block tokens; 0: not given (GP_PREFIX_DEFAULT_BLOCK_TOKENS) */
    uint64_t cpu_ffn;      /* --cpu-ffn bytes of hot cache; 0: not given (the whole FFN on the GPU) */
    long cpu_ffn_threads;  /* --cpu-ffn-threads; 0: the online CPUs up to 16 */
    gen_mode mode;
    bool chat;             /* generate --chat, or the chat command: text through the chat template */
    const char *system;    /* --system TEXT: the conversation's system message; NULL: none */
    const char *chat_template; /* --chat-template NAME; NULL: detected from tokenizer_config.json */
    long max_context;      /* chat --max-context; 0: not given (the model's) */
    bool verbose_prompt;   /* chat --verbose-prompt: each turn's prefilled and generated ids on stderr */
} gen_opts;

/* Parse argv (argv[0] is the command's name) for mode into o: every check
 * that needs no model. Returns -1 to go on, else the exit code (0 after
 * --help). The caller frees o->prompts and o->stops either way. */
int gen_parse_opts(int argc, char **argv, gen_mode mode, gen_opts *o);

/* "greenpipe generate: " or "greenpipe chat: " (the command parsed last),
 * then the message, on stderr. */
void gen_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
