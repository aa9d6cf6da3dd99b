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
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#include <jansson.h>

#include "gp_comm.h"
#include "gp_engine.h"
#include "gen_chat_impl.h"
#include "gen_loop_impl.h"
#include "gen_opts_impl.h"
#include "gen_text_impl.h"
#include "tp_ranks_impl.h"
#include "gp_kvstore.h"
#include "gp_model.h"
#include "gp_pipeline.h"
#include "gp_sparse.h"
#include "gp_stage.h"
#include "gp_tools.h"


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
        gen_err("cannot write %s file '%s': %s\n", flag, path,
                errno ? strerror(errno) : "the JSON encoder failed");
        json_decref(root);
        return 1;
    }
    json_decref(root);
    return 0;
oom:
    gen_err("out of memory building the %s dump\n", flag);
    json_decref(root);
    return 1;
}

static int fail(const char *what, gp_status st)
{
    gen_err("%s: %s: %s\n", what, gp_status_str(st), gp_last_error());
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
            gen_err("--sparsity-stats %s: cannot write the file: %s\n", path,
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
    if ((st = gp_backend_host_need(src, bp, &weights, &kv, &dt)) != GP_OK) {
        gen_err("--model %s: %s\n", o->model, gp_last_error());
        return gp_input_exit_code(st);
    }
    char need_s[32], w_s[32], kv_s[32], avail_s[32], model[300];
    gp_format_bytes(weights + kv, need_s, sizeof need_s);
    gp_format_bytes(weights, w_s, sizeof w_s);
    gp_format_bytes(kv, kv_s, sizeof kv_s);
    snprintf(model, sizeof model, "--model %s%s", o->model,
             src->synthetic && !strcmp(o->model, GP_DEFAULT_PRESET) ? " (the default preset)" : "");
    if ((st = gp_host_mem_available(&avail, &how)) != GP_OK) {
        if (st == GP_ERR_INVALID_ARG) { /* a malformed test hook: a typo must not pass as a real run */
            gen_err("%s\n", gp_last_error());
            return 2;
        }
        fprintf(stderr, "greenpipe: the cpu backend holds %s in host memory: %s (%s of %s weights, a %s float32 "
                "KV cache); %s\n", model, need_s, w_s, gp_dtype_flag_name(dt), kv_s, gp_last_error());
        return -1;
    }
    gp_format_bytes(avail, avail_s, sizeof avail_s);
    if (weights + kv > avail) {
        gen_err("the cpu backend needs %s of host memory for %s (%s of %s weights, a "
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

/* What text needs of the checkpoint: its tokenizer and, with --chat (or
 * chat), its template and end-of-turn ids. what names the need in
 * messages (a flag, or "a conversation"). Returns -1 to continue, else the
 * exit code. */
static int load_text(const gen_opts *o, const gp_model_source *src, const char *what, gp_tokenizer **tok,
                     gen_chat *chat)
{
    gp_status st;
    if (src->synthetic) {
        if (o->mode == GEN_MODE_CHAT)
            gen_err("--model %s is a preset (synthetic weights) and has no tokenizer or chat template; a "
                    "conversation needs a checkpoint directory holding tokenizer.json or tokenizer.model\n",
                    o->model);
        else
            gen_err("%s: --model %s is a preset (synthetic weights) and has no tokenizer; text prompts need a "
                    "checkpoint directory holding tokenizer.json or tokenizer.model; with a preset, give "
                    "--prompt-ids\n", what, o->model);
        return 2;
    }
    if ((st = gp_tokenizer_load_dir(src->path, tok)) != GP_OK) {
        gen_err("%s needs the checkpoint's tokenizer: %s\n", what, gp_last_error());
        return gp_input_exit_code(st);
    }
    if (o->chat && (st = gen_chat_setup(*tok, src->path, o->chat_template, chat)) != GP_OK) {
        gen_err("%s%s\n", o->mode == GEN_MODE_CHAT ? "" : "--chat: ", gp_last_error());
        return gp_input_exit_code(st);
    }
    return -1;
}

/* The prompts: --prompt-ids as given, text through the checkpoint's
 * tokenizer (*tok then holds it). Returns -1 to continue, else the exit code. */
static int load_prompts(const gen_opts *o, const gp_model_source *src, gp_tokenizer **tok, gen_chat *chat,
                        gp_prompts *p)
{
    gp_status st;
    if (o->prompt_ids) {
        if ((st = gp_parse_prompts(o->prompt_ids, p)) != GP_OK) {
            gen_err("%s\n", gp_last_error());
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
            gen_err("--prompt-file: %s\n", gp_last_error());
            return gp_input_exit_code(st);
        }
    }
    /* an empty pipe or file would generate from BOS alone and exit 0:
     * a mistake far more often than a wish, so the wish must be said */
    for (int s = 0; !o->allow_empty && s < (o->prompt_file ? 1 : o->n_prompts); s++)
        if (o->prompt_file ? file_len == 0 : o->prompts[s][0] == '\0') {
            if (o->prompt_file)
                gen_err("--prompt-file %s: the prompt is empty (0 bytes read from %s); "
                        "allowed: a non-empty prompt, or --allow-empty-prompt for BOS alone\n", o->prompt_file,
                        strcmp(o->prompt_file, "-") ? o->prompt_file : "standard input");
            else
                gen_err("--prompt: prompt %d is empty (0 bytes); allowed: a non-empty "
                        "prompt, or --allow-empty-prompt for BOS alone\n", s);
            free(file);
            return 2;
        }
    int rc = load_text(o, src, flag, tok, chat);
    if (rc >= 0) {
        free(file);
        return rc;
    }
    int n = o->prompt_file ? 1 : o->n_prompts;
    size_t *lens = malloc((size_t)n * sizeof *lens);
    if (!lens) {
        free(file);
        gen_err("out of memory for %d prompts\n", n);
        return 1;
    }
    const char *const *texts = o->prompt_file ? (const char *const *)&file : o->prompts;
    for (int s = 0; s < n; s++)
        lens[s] = o->prompt_file ? file_len : strlen(texts[s]);
    char **rendered = NULL;
    size_t *rlens = NULL;
    if (o->chat) {
        /* the template writes the BOS text itself: no other BOS is added */
        if ((st = gen_chat_render_each(chat, o->system, texts, lens, n, &rendered, &rlens)) != GP_OK) {
            gen_err("--chat: %s\n", gp_last_error());
            free(lens);
            free(file);
            return gp_input_exit_code(st);
        }
        texts = (const char *const *)rendered;
    }
    st = gp_gen_tokenize(*tok, texts, o->chat ? rlens : lens, n, !o->chat, flag, p);
    gen_chat_free_texts(rendered, rlens, rendered ? n : 0);
    free(lens);
    free(file);
    if (st != GP_OK) {
        gen_err("%s\n", gp_last_error());
        return gp_input_exit_code(st);
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


/* Set by Ctrl-C during generation: the loop stops at the next step
 * boundary. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* on_sigint as SIGINT's handler with flags, the old one into *old. */
static void catch_sigint(int flags, struct sigaction *old)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = flags;
    interrupted = 0;
    sigaction(SIGINT, &sa, old);
}

/* What generate and chat run the loop with: o's sampling, repeat penalty
 * and stop strings, the EOS ids, with --chat the template's end-of-turn
 * ids, and the Ctrl-C flag. max_tokens is the caller's. */
static gp_gen_params gen_params(const gen_opts *o, const gp_eos_ids *eos, const gen_chat *chat)
{
    gp_gen_params g = gp_gen_default_params();
    g.sample = o->sample;
    g.repeat = o->repeat;
    g.eos = eos;
    if (o->chat) {
        g.stop_ids = chat->stop_ids;
        g.n_stop_ids = chat->n_stop_ids;
    }
    g.stop_strings = o->stops;
    g.n_stop_strings = o->n_stops;
    g.interrupt = &interrupted;
    return g;
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
                    gp_gen_decode_rate(r), r->n - 1, r->decode_s);
        fprintf(stderr, "; host-timed\n");
    }
}

/* greenpipe chat once the backend is ready: sequence 0, turn by turn. */
static int converse(const gen_opts *o, gp_exec x, gp_pipeline *pl, const gp_config *cfg, const gp_tokenizer *tok,
                    const gen_chat *chat, const gp_eos_ids *eos, long context, gp_rng *rng)
{
    gen_chat_env env = {.x = x, .pl = pl, .cfg = cfg, .tok = tok, .chat = chat, .gen = gen_params(o, eos, chat),
                        .rng = o->sample.temperature > 0.0 ? rng : NULL, .system = o->system,
                        .max_context = context, .verbose_prompt = o->verbose_prompt};
    gp_rng_seed(rng, o->seed, 0);
    env.gen.max_tokens = o->steps > 0 ? o->steps : 0;
    /* without SA_RESTART a Ctrl-C while waiting for a line ends the read,
     * and so the conversation; during an answer it only sets the flag */
    struct sigaction old_sa;
    catch_sigint(0, &old_sa);
    int rc = gen_chat_converse(&env, stdin, stdout);
    sigaction(SIGINT, &old_sa, NULL);
    return rc;
}

static int gen_main(int argc, char **argv, gen_mode mode)
{
    gen_opts o;
    int rc = gen_parse_opts(argc, argv, mode, &o);
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
        gen_err("--model: %s\n", gp_last_error());
        goto early;
    }
    bool sampling = o.sample.temperature > 0.0;
    if (o.seed_given && !src.synthetic && !sampling) {
        /* a checkpoint's weights are read as they are and greedy decoding
         * draws nothing: a seed would be ignored */
        gen_err("--seed %" PRIu64 ": --model %s is a checkpoint, not a preset, and "
                "decoding is greedy; --seed seeds synthetic weights (presets) and sampling (--temperature "
                "above 0)\n", o.seed, o.model);
        goto early;
    }
    const gp_config *cfg = &src.cfg;
    if (sampling && (st = gp_sample_params_check(&o.sample, cfg->vocab)) != GP_OK) {
        gen_err("%s\n", gp_last_error());
        goto early;
    }
    gen_chat chat = {0};
    bool conversation = o.mode == GEN_MODE_CHAT;
    if (conversation && o.max_context > cfg->max_context) {
        gen_err("--max-context %ld is beyond the model's max context %d; allowed: 1..%d\n", o.max_context,
                cfg->max_context, cfg->max_context);
        goto early;
    }
    rc = conversation ? load_text(&o, &src, "a conversation", &tok, &chat) : load_prompts(&o, &src, &tok, &chat, &p);
    if (rc >= 0) {
        exit_code = rc;
        goto early;
    }
    bool text = tok != NULL;
    gp_eos_ids eos = {0};
    if (text && !o.ignore_eos) {
        if ((st = gp_eos_load_dir(src.path, cfg->vocab, &eos)) != GP_OK) {
            gen_err("the checkpoint's EOS ids: %s\n", gp_last_error());
            exit_code = gp_input_exit_code(st);
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
                    gen_err("the tokenizer gives token %d in sequence %d, outside the "
                            "model's vocabulary [0, %d]: tokenizer and model do not match\n",
                            p.ids[p.offsets[s] + i], s, cfg->vocab - 1);
                else
                    gen_err("--prompt-ids: token %d in sequence %d is outside "
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
        gen_err("--kv-store-block %ld%s: the longest prompt has %d token(s), fewer than "
                "one block, so no prompt would store a block (a prompt stores its whole blocks) or reuse one (a "
                "prompt reuses whole blocks of its first tokens - 1); allowed: at most %d\n", kv_block,
                o.kv_store_block ? "" : " (the default)", max_len, max_len);
        goto early;
    }
    long context = conversation ? (o.max_context ? o.max_context : cfg->max_context)
                                : (long)max_len + o.steps - 1; /* the last token is never fed back */
    if (!conversation && context > cfg->max_context) {
        gen_err("longest prompt (%d) + --steps (%ld) - 1 = %ld tokens exceeds "
                "the model's max context %d\n", max_len, o.steps, context, cfg->max_context);
        goto early;
    }
    char origin[4200];
    if (src.synthetic)
        snprintf(origin, sizeof origin, "synthetic weights, seed %" PRIu64, o.seed);
    else
        snprintf(origin, sizeof origin, "checkpoint %s", src.path);
    if (conversation)
        fprintf(stderr, "greenpipe: model %s (%s), %" PRIu64 " parameters; a conversation of at most %ld tokens\n",
                cfg->name, origin, gp_config_param_count(cfg), context);
    else
        fprintf(stderr, "greenpipe: model %s (%s), %" PRIu64 " parameters; %d sequence(s), %ld step(s)\n",
                cfg->name, origin, gp_config_param_count(cfg), p.n_seqs, o.steps);
    if (o.chat) {
        fprintf(stderr, "greenpipe: chat template %s; answers end at end-of-turn id(s)",
                gp_chat_template_name(chat.tpl));
        for (int i = 0; i < chat.n_stop_ids; i++)
            fprintf(stderr, " %d", chat.stop_ids[i]);
        if (!chat.n_stop_ids)
            fprintf(stderr, " (none: the tokenizer has no single token for %s)",
                    gp_chat_template_eot_text(chat.tpl));
        fprintf(stderr, "%s\n", eos.n ? " and the EOS id(s) below" : "");
    }
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

    /* the conversation runs sequence 0 and sizes its answers per turn */
    int S = conversation ? 1 : p.n_seqs;
    long steps = conversation ? 1 : o.steps;
    int M = (int)(o.micro_batches ? o.micro_batches : (S > 1 ? 2 : 1));
    if (o.pipelined && M > S) {
        gen_err("--micro-batches %d: each needs a sequence and there are %d; allowed "
                "1..%d\n", M, S, S);
        goto early;
    }
    /* --tp: one process per GPU from here on; rank 0 writes the output */
    gp_tp_ranks tpr;
    const int tp_code = gp_tp_ranks_start(cfg, (int)o.tp, "greenpipe generate", &tpr);
    if (tp_code != 0) {
        exit_code = tp_code;
        goto early;
    }
    const int tp_rank = tpr.rank;
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
    float *logits = o.dump_logits ? malloc((size_t)S * (size_t)steps * V * sizeof(float)) : NULL;
    float *prompt_logits = o.dump_prompt_logits ? malloc((size_t)prompt_tokens * V * sizeof(float)) : NULL;
    int32_t *gen = malloc((size_t)S * (size_t)steps * sizeof(int32_t));
    int *gen_lens = malloc((size_t)S * sizeof(int));
    size_t *gen_rows = malloc((size_t)S * sizeof(size_t)), *prompt_rows = malloc((size_t)S * sizeof(size_t));
    gp_rng *rng = malloc((size_t)S * sizeof(gp_rng));
    gp_gen_seq *seqs = malloc((size_t)S * sizeof *seqs);
    gp_gen_result *res = malloc((size_t)S * sizeof *res);
    if ((o.dump_logits && !logits) || (o.dump_prompt_logits && !prompt_logits) || !gen || !gen_lens || !gen_rows ||
        !prompt_rows || !rng || !seqs || !res) {
        gen_err("out of host memory for %d x %ld x %d logits (and %d x %d prompt "
                "logits with --dump-prompt-logits)\n", S, steps, cfg->vocab, prompt_tokens, cfg->vocab);
        goto out;
    }
    if (text && !conversation && (st = gp_gen_out_create(tok, S, stdout, &out)) != GP_OK) {
        exit_code = fail("text output", st);
        goto out;
    }
    gp_backend_params bp = gp_backend_default_params(o.backend);
    bp.n_seqs = S;
    bp.max_context = (int)context;
    bp.block_size = (int)o.block_size;
    bp.pipelined = o.pipelined;
    bp.afd = o.afd;
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
        if ((st = gp_sparsity_load_for(o.sparsity, &src, &sparsity)) != GP_OK) {
            gen_err("--sparsity %s: %s\n", o.sparsity, gp_last_error());
            exit_code = gp_input_exit_code(st);
            goto out;
        }
        bp.sparse_thresholds = sparsity.thresholds;
        bp.sparse_always = o.sparse_always;
        bp.cpu_ffn_budget = o.cpu_ffn;
        bp.cpu_ffn_calib = &sparsity;
        bp.cpu_ffn_threads = (int)o.cpu_ffn_threads;
    }
    /* a budget the weights cannot stream through is the user's to fix (2), found before loading */
    if ((st = gp_backend_check_budget(&bp, cfg)) != GP_OK) {
        gen_err("--vram-budget: %s\n", gp_last_error());
        exit_code = 2;
        goto out;
    }
    if ((st = gp_backend_check_kv_store(&bp, cfg)) != GP_OK) {
        gen_err("%s\n", gp_last_error());
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
    bp.tp = (int)o.tp;
    bp.tp_rank = tp_rank;
    bp.tp_rendezvous = tpr.spec;
    bp.tp_peer_bytes = (size_t)o.tp_peer_bytes;
    if (tp_rank > 0) /* rank 0 reports the loading */
        memset(&bp.progress, 0, sizeof bp.progress);
    double t0 = gp_now_s();
    if ((st = gp_backend_open(&src, &bp, &b)) != GP_OK) {
        if (st == GP_ERR_NO_DEVICE) /* one line: what happened and what runs without a GPU */
            gen_err("loading the model: %s: %s; --backend cpu runs the float32 CPU "
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
    fprintf(stderr, "greenpipe: backend %s; engine %s", gp_backend_describe(b),
            o.afd ? "afd" : o.pipelined ? "pipelined" : "seq");
    if (o.pipelined)
        fprintf(stderr, ", %d micro-batch(es)", M);
    fprintf(stderr, "; ready in %.2f s\n", t1 - t0);
    if (conversation) {
        exit_code = converse(&o, x, pl, cfg, tok, &chat, &eos, context, rng);
        goto out;
    }
    for (int s = 0; s < p.n_seqs; s++) {
        seqs[s] = (gp_gen_seq){.seq = s, .tokens = p.ids + p.offsets[s], .n = p.lens[s], .rng = &rng[s]};
        gen_rows[s] = (size_t)s * (size_t)o.steps;
        prompt_rows[s] = (size_t)p.offsets[s];
        res[s] = (gp_gen_result){.tokens = gen + gen_rows[s], .logits = logits ? logits + gen_rows[s] * V : NULL};
        gp_rng_seed(&rng[s], o.seed, (uint64_t)s); /* a stream per sequence: its tokens do not depend on the batch */
    }
    gp_gen_params gpar = gen_params(&o, &eos, &chat);
    gpar.max_tokens = o.steps;
    kv_run kr;
    memset(&kr, 0, sizeof kr);
    stored_prefill sp = {.b = b, .V = V, .kr = &kr};
    if (o.kv_store_size) {
        gpar.prefill = prefill_stored;
        gpar.prefill_ctx = &sp;
    }
    /* Ctrl-C only around the loop: before it, loading is not interruptible
     * work worth a partial result, and after it the output is complete; the
     * handler then goes back to the default (SA_RESETHAND), so a second
     * Ctrl-C ends the program at once */
    struct sigaction old_sa;
    catch_sigint(SA_RESETHAND | SA_RESTART, &old_sa);
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
    if (o.sparsity && o.backend == GP_BACKEND_CUDA &&
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
    if (tp_rank > 0) {
        fflush(NULL);
        _exit(exit_code & 0xff);
    }
    exit_code = gp_tp_ranks_finish(&tpr, "greenpipe generate", exit_code);
early:
    gp_tokenizer_free(tok);
    gp_prompts_free(&p);
    free(o.prompts);
    free(o.stops);
    return exit_code;
}

int gp_cmd_generate(int argc, char **argv)
{
    return gen_main(argc, argv, GEN_MODE_GENERATE);
}

int gp_cmd_chat(int argc, char **argv)
{
    return gen_main(argc, argv, GEN_MODE_CHAT);
}
