/* Step backends with their model: the float32 CPU reference under the CPU
 * executor, or the CUDA engine under the CUDA executor over one
 * green-context pair (made only when pipelined steps are asked for). One
 * interface (gp_exec) for greenpipe generate and the tests, sequential or
 * pipelined. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gp_comm.h"
#include "gp_engine.h"
#include "gp_green.h"
#include "gp_kvstore.h"
#include "gp_pipeline.h"
#include "gp_reference.h"
#include "gp_sparse.h"
#include "gp_weights.h"

struct gp_backend {
    gp_backend_params p;
    gp_config cfg;
    char describe[768];
    char kv_model[PATH_MAX + 64];    /* the stored prefixes' name of the weights (gp_prefix_params.model) */
    gp_dtype dtype;                  /* what it runs in (gp_backend_dtype) */
    gp_host_weights own_w;           /* loaded here (CPU from a source); arena NULL otherwise */
    /* cpu */
    gp_cpu_model *cpu;
    gp_cpu_exec *cpu_exec;
    /* cuda */
    gp_device_weights *dw;
    gp_assembly as;                  /* the engine and its executor */
    gp_engine *engine;               /* as.engine */
    gp_green_pool *pool;
    gp_cuda_exec *cuda_exec;         /* as.exec */
    gp_pd_exec *pd_exec;             /* with pd_lanes: the session the backend serves */
    gp_pd_model *pd_model;           /* with n_pd_splits: its planner's */
    gp_comm *comm;                   /* tensor parallel (p.tp > 1): the ranks' NCCL communicator */
    gp_afd_pair *afd;                /* p.afd: the FFN side on GPU 1 and the executor of the pair */
    double pd_profile_s;             /* the time its profile took to measure or load */
};

const char *gp_backend_kind_name(gp_backend_kind k)
{
    return k == GP_BACKEND_CUDA ? "cuda" : k == GP_BACKEND_CPU ? "cpu" : "unknown";
}

gp_status gp_backend_kind_parse(const char *s, gp_backend_kind *out)
{
    if (s && !strcmp(s, "cpu"))
        *out = GP_BACKEND_CPU;
    else if (s && !strcmp(s, "cuda"))
        *out = GP_BACKEND_CUDA;
    else
        GP_FAIL(GP_ERR_INVALID_ARG, "backend '%s': allowed cpu, cuda", s ? s : "(null)");
    return GP_OK;
}

gp_backend_params gp_backend_default_params(gp_backend_kind kind)
{
    bool cuda = kind == GP_BACKEND_CUDA;
    return (gp_backend_params){.kind = kind, .n_seqs = 1, .max_context = 1024, .block_size = 16,
                               .attn_units = cuda ? 24 : 1, .ffn_units = cuda ? GP_SPLIT_REST : 1,
                               .pipelined = false, .use_graphs = true, .dtype = cuda ? GP_DTYPE_AUTO : GP_DTYPE_F32,
                               .prefill_chunk = 0, .tp = 1,
                               .tp_peer_bytes = GP_COMM_PEER_BYTES_DEFAULT};
}

/* The stored-prefix settings among themselves: a dir or a block size mean
 * nothing without the store's pool (which backend holds a store is the
 * feature table's). */
/* The adaptive split's params, before anything loads. */
static gp_status check_pd_flags(const gp_backend_params *p)
{
    if (p->n_pd_splits < 0 || p->n_pd_splits > GP_PD_MAX_SPLITS)
        GP_FAIL(GP_ERR_INVALID_ARG, "backend: %d candidate splits (--pd-splits); allowed 1..%d", p->n_pd_splits,
                GP_PD_MAX_SPLITS);
    if (p->n_pd_splits > 0 && !p->pd_lanes)
        GP_FAIL(GP_ERR_INVALID_ARG, "backend: candidate splits without pd_lanes: the adaptive split chooses among "
                "the prefill and decode lanes' pairs");
    if ((p->pd_profile_path || p->pd_profile_save) && p->n_pd_splits == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "backend: a pd profile (--pd-profile, --pd-profile-save) is the adaptive "
                "split's (--pd-split auto)");
    if (p->pd_profile_path && p->pd_profile_save)
        GP_FAIL(GP_ERR_INVALID_ARG, "backend: --pd-profile loads a profile and --pd-profile-save writes a measured "
                "one; give one of them");
    for (int i = 0; i < p->n_pd_splits; i++)
        for (int j = 0; j < i; j++)
            if (p->pd_decode_sms[i] == p->pd_decode_sms[j])
                GP_FAIL(GP_ERR_INVALID_ARG, "backend: decode SMs %d twice in the candidate splits (--pd-splits)",
                        p->pd_decode_sms[i]);
    if (p->n_pd_splits > 0 && (p->pd_planner.tpot_ms <= 0 || p->pd_planner.hysteresis < 1 ||
                               p->pd_planner.window < 1 || p->pd_planner.window > 100000))
        GP_FAIL(GP_ERR_INVALID_ARG, "backend: TPOT target %g ms (> 0), window %d (1..100000) and hysteresis %d "
                "(>= 1) of the adaptive split", p->pd_planner.tpot_ms, p->pd_planner.window,
                p->pd_planner.hysteresis);
    return GP_OK;
}

static gp_status check_kv_store_flags(const gp_backend_params *p)
{
    const char *given = p->kv_store_bytes ? "--kv-store-size" : p->kv_store_dir ? "--kv-store"
                        : p->kv_store_block ? "--kv-store-block" : NULL;
    if (!given)
        return GP_OK;
    if (!p->kv_store_bytes)
        GP_FAIL(GP_ERR_INVALID_ARG, "backend: %s without a store: give kv_store_bytes (--kv-store-size), which "
                "turns stored prefixes on", given);
    if (p->kv_store_block < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "backend: kv_store_block (--kv-store-block) %d: allowed 0 (the default, %d "
                "tokens) or a block size in tokens", p->kv_store_block, GP_PREFIX_DEFAULT_BLOCK_TOKENS);
    return GP_OK;
}

static int kv_block_tokens(const gp_backend_params *p)
{
    return p->kv_store_block ? p->kv_store_block : GP_PREFIX_DEFAULT_BLOCK_TOKENS;
}

gp_status gp_backend_check_kv_store(const gp_backend_params *p, const gp_config *cfg)
{
    if (!p || !cfg)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_backend_check_kv_store: p and cfg must not be NULL");
    GP_TRY(check_kv_store_flags(p));
    if (!p->kv_store_bytes)
        return GP_OK;
    const int bt = kv_block_tokens(p);
    /* the store's own rules on the block (its range, its bytes), for the KV
     * the engine will hold: every engine dtype is 16-bit */
    gp_kvstore_identity id = {.model = cfg->name, .n_layers = cfg->n_layers, .n_kv_heads = cfg->n_kv_heads,
                              .head_dim = cfg->head_dim, .dtype_bytes = (int)gp_dtype_size(GP_DTYPE_BF16),
                              .block_size = bt};
    uint64_t bb = 0;
    gp_status st = gp_kvstore_block_bytes(&id, &bb);
    if (st != GP_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", gp_last_error());
        GP_FAIL(st, "--kv-store-block %d: %s", bt, why);
    }
    if (p->kv_store_bytes < bb)
        GP_FAIL(GP_ERR_INVALID_ARG, "--kv-store-size %llu bytes: less than one stored block of %d tokens of %s "
                "(%llu bytes: %d tokens x %d layers x K and V x %d KV heads x %d dims x 2 bytes); allowed: at least "
                "%llu bytes", (unsigned long long)p->kv_store_bytes, bt, cfg->name, (unsigned long long)bb, bt,
                cfg->n_layers, cfg->n_kv_heads, cfg->head_dim, (unsigned long long)bb);
    if ((p->max_context - 1) / bt < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "--kv-store-block %d: no prompt can reuse a whole block: sequences hold at most "
                "%d tokens (max_context) and a prompt's last token is always prefilled; allowed: at most %d", bt,
                p->max_context, p->max_context - 1);
    return GP_OK;
}

static gp_status check_params(const gp_backend_params *p)
{
    if (p->kind != GP_BACKEND_CPU && p->kind != GP_BACKEND_CUDA)
        GP_FAIL(GP_ERR_INVALID_ARG, "backend kind %d: allowed %d (cpu), %d (cuda)", (int)p->kind, GP_BACKEND_CPU,
                GP_BACKEND_CUDA);
    if (p->n_seqs < 1 || p->max_context < 1 || p->block_size < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "backend: %d sequences of %d tokens in blocks of %d: each must be >= 1",
                p->n_seqs, p->max_context, p->block_size);
    if (p->prefill_chunk < 0 || p->prefill_chunk > GP_ENGINE_MAX_PREFILL_CHUNK)
        GP_FAIL(GP_ERR_INVALID_ARG, "backend: prefill_chunk %d: allowed 0 (the engine's default) or 1..%d",
                p->prefill_chunk, GP_ENGINE_MAX_PREFILL_CHUNK);
    if (p->kind == GP_BACKEND_CUDA && p->dtype != GP_DTYPE_AUTO && !gp_dtype_is_half(p->dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "cuda backend: dtype %s; allowed bf16, fp16 or auto", gp_dtype_name(p->dtype));
    if (p->kind == GP_BACKEND_CPU && p->dtype != GP_DTYPE_F32 && !gp_dtype_is_half(p->dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "cpu backend: activation dtype %s; allowed fp32 (no rounding), bf16, fp16",
                gp_dtype_name(p->dtype));
    if (p->cpu_threads < 0 || p->cpu_threads > GP_POOL_MAX_THREADS)
        GP_FAIL(GP_ERR_INVALID_ARG, "cpu backend: cpu_threads %d; allowed 0 (the default) or 1..%d", p->cpu_threads,
                GP_POOL_MAX_THREADS);
    if (p->kind == GP_BACKEND_CPU && (p->attn_units < 1 || p->ffn_units < 1))
        GP_FAIL(GP_ERR_INVALID_ARG, "cpu backend: %d attention and %d FFN threads; each side needs at least 1",
                p->attn_units, p->ffn_units);
    GP_TRY(check_kv_store_flags(p));
    if (p->pd_idle_whole && !p->pd_lanes)
        GP_FAIL(GP_ERR_INVALID_ARG, "backend: pd_idle_whole (--pd-idle-whole) without pd_lanes (--pd-split): it "
                "says where the decode lane's rows run while the prefill lane is idle");
    GP_TRY(check_pd_flags(p));
    gp_feature_set f;
    gp_backend_features(p, &f);
    return gp_features_check(&f);
}

void gp_backend_features(const gp_backend_params *p, gp_feature_set *out)
{
    *out = (gp_feature_set){.cuda = p->kind == GP_BACKEND_CUDA,
                            .pipelined = p->pipelined || p->afd,
                            .afd = p->afd,
                            .graphs = p->use_graphs,
                            .prefill_chunk = p->prefill_chunk != 0,
                            .vram_budget = p->vram_budget,
                            .kv_vram_budget = p->kv_vram_budget,
                            .kv_store_bytes = p->kv_store_bytes,
                            .pd_lanes = p->pd_lanes,
                            .sparsity = p->sparse_thresholds != NULL,
                            .sparse_always = p->sparse_always,
                            .tp = p->tp > 1,
                            .cpu_ffn_budget = p->cpu_ffn_budget,
                            .cpu_ffn_threads = p->cpu_ffn_threads != 0,
                            .cpu_threads = p->cpu_threads != 0};
}

static gp_status open_cpu(gp_backend *b, const gp_host_weights *w)
{
    const gp_backend_params *p = &b->p;
    GP_TRY(gp_cpu_model_create(w, p->n_seqs, p->max_context, p->block_size, &b->cpu));
    b->dtype = p->dtype;
    gp_cpu_model_set_act_dtype(b->cpu, b->dtype);
    gp_cpu_model_set_sparsity(b->cpu, p->sparse_thresholds);
    if (p->cpu_threads)
        GP_TRY(gp_cpu_model_set_threads(b->cpu, p->cpu_threads));
    GP_TRY(gp_cpu_exec_create(b->cpu, p->attn_units, p->ffn_units, &b->cpu_exec));
    char acts[32] = "";
    if (b->dtype != GP_DTYPE_F32)
        snprintf(acts, sizeof acts, ", %s activations", gp_dtype_flag_name(b->dtype));
    /* the threads obtained, not those asked for: a pool thread that fails
     * to start only shrinks the pool */
    int used = snprintf(b->describe, sizeof b->describe, "cpu (float32 reference%s), %.2f GB of %s weights in host "
                        "memory, held exactly; %d worker thread(s)", acts, (double)w->arena_bytes / 1e9,
                        gp_dtype_flag_name(w->dtype), gp_cpu_model_threads(b->cpu));
    if (p->sparse_thresholds)
        used += snprintf(b->describe + used, sizeof b->describe - (size_t)used, "; sparse decode projections "
                         "(up to %d rows)", GP_SPARSE_MAX_B);
    if (p->pipelined)
        snprintf(b->describe + used, sizeof b->describe - (size_t)used, "; pipelined steps on %d + %d threads",
                 p->attn_units, p->ffn_units);
    return GP_OK;
}

/* The prefill and decode lanes on every pair of the pool and, for the
 * adaptive split, the planner over a profile loaded or measured now. */
static gp_status open_pd(gp_backend *b, int prefill_rows)
{
    const gp_backend_params *p = &b->p;
    const gp_green_pair *pairs[GP_PD_MAX_SPLITS];
    int n = gp_green_pool_size(b->pool);
    for (int i = 0; i < n; i++)
        pairs[i] = gp_green_pool_pair(b->pool, i);
    gp_pd_exec_params xp = {.prefill_rows = prefill_rows, .idle_whole = p->pd_idle_whole};
    GP_TRY(gp_pd_exec_create(b->engine, pairs, n, &xp, &b->pd_exec));
    if (p->n_pd_splits == 0)
        return GP_OK;
    gp_pd_profile prof;
    uint64_t t0 = gp_now_ns();
    if (p->pd_profile_path) {
        GP_TRY(gp_pd_profile_load(p->pd_profile_path, &prof));
    } else {
        gp_pd_profile_params pp = gp_pd_profile_default_params(prefill_rows, p->n_seqs, p->max_context);
        GP_TRY(gp_pd_exec_profile(b->pd_exec, &pp, &prof));
    }
    b->pd_profile_s = (gp_now_ns() - t0) / 1e9;
    gp_status st = p->pd_profile_save ? gp_pd_profile_save(&prof, p->pd_profile_save) : GP_OK;
    if (st == GP_OK)
        st = gp_pd_model_fit(&prof, &b->pd_model);
    gp_pd_profile_free(&prof);
    GP_TRY(st);
    gp_pd_planner_params pl = p->pd_planner;
    pl.lane_tokens = prefill_rows;
    return gp_pd_exec_set_planner(b->pd_exec, b->pd_model, &pl);
}

/* Whether the engine's steps run on green-context partition pairs: pipelined
 * steps (not AFD's, whose sides are whole GPUs) and the lanes. */
static bool uses_pairs(const gp_backend_params *p)
{
    return (p->pipelined && !p->afd) || p->pd_lanes;
}

/* The engine and its executor over dw (already on the device), with
 * pipelined steps over a pool of the one requested pair: gp_assemble_engine,
 * which decides about CUDA graphs. */
static gp_status open_cuda(gp_backend *b, const gp_host_weights *w)
{
    const gp_backend_params *p = &b->p;
    gp_engine_params ep = gp_engine_default_params();
    ep.max_batch = p->n_seqs;
    ep.max_context = p->max_context;
    ep.block_size = p->block_size;
    ep.sparse_always = p->sparse_always;
    if (p->prefill_chunk)
        ep.prefill_chunk = p->prefill_chunk;
    const bool streamed = gp_device_weights_is_streamed(b->dw);
    if (uses_pairs(p)) {
        gp_green_pool_params gpp = gp_green_pool_default_params();
        gp_split_req req[GP_PD_MAX_SPLITS] = {{.attn_sms = p->attn_units, .ffn_sms = p->ffn_units}};
        for (int i = 0; i < p->n_pd_splits; i++)
            req[i] = (gp_split_req){.attn_sms = p->pd_decode_sms[i], .ffn_sms = GP_SPLIT_REST};
        gpp.splits = req;
        gpp.n_splits = p->n_pd_splits > 0 ? p->n_pd_splits : 1;
        GP_TRY(gp_green_pool_create(&gpp, &b->pool));
    }
    gp_feature_set f;
    gp_backend_features(p, &f);
    gp_prefix_params pp = gp_prefix_default_params();
    pp.model = b->kv_model;
    pp.store_bytes = p->kv_store_bytes;
    pp.dir = p->kv_store_dir;
    pp.block_tokens = kv_block_tokens(p);
    gp_assembly_params ap = {.features = &f, .engine = &ep, .sparse_thresholds = p->sparse_thresholds,
                             .cpu_ffn_weights = p->cpu_ffn_budget ? w : NULL, .cpu_ffn_calib = p->cpu_ffn_calib,
                             .cpu_ffn_threads = p->cpu_ffn_threads, .prefix = p->kv_store_bytes ? &pp : NULL,
                             .pool = p->pipelined ? b->pool : NULL};
    GP_TRY(gp_assemble_engine(b->dw, &ap, &b->as));
    b->engine = b->as.engine;
    b->cuda_exec = b->as.exec;
    if (p->pd_lanes)
        GP_TRY(open_pd(b, ep.prefill_chunk));
    const bool graphs = b->as.graphs;
    b->dtype = gp_engine_dtype(b->engine);
    int used;
    if (streamed)
        used = snprintf(b->describe, sizeof b->describe, "cuda (%s engine, eager (streamed weights)), %.2f GB of "
                        "weights in pinned host memory, at most %.2f GB of them on the GPU (VRAM budget)",
                        gp_dtype_flag_name(b->dtype), (double)gp_device_weights_view(b->dw)->arena_bytes / 1e9,
                        (double)gp_device_weights_budget(b->dw) / 1e9);
    else
        used = snprintf(b->describe, sizeof b->describe, "cuda (%s engine%s), %.2f GB of weights on the GPU",
                        gp_dtype_flag_name(b->dtype), graphs ? ", CUDA graphs" : "",
                        (double)gp_device_weights_view(b->dw)->arena_bytes / 1e9);
    if (p->sparse_thresholds)
        used += snprintf(b->describe + used, sizeof b->describe - (size_t)used, "; sparse decode projections "
                         "(up to %d rows)", GP_SPARSE_MAX_B);
    gp_cpu_ffn_stats cs;
    if (p->cpu_ffn_budget && gp_engine_cpu_ffn_stats(b->engine, &cs, 0) == GP_OK)
        used += snprintf(b->describe + used, sizeof b->describe - (size_t)used, "; CPU-assisted FFN: %d of %d "
                         "neurons per layer hot (a %.3f GB cache %s), the rest on CPU threads (eager steps)%s",
                         cs.hot_per_layer, b->cfg.ffn, cs.hot_bytes / 1e9,
                         streamed ? "within the VRAM budget; the FFN weights stream only for prefill"
                                  : "beside the dense weights",
                         streamed ? "; the attention projections' transposed copies beside the budget" : "");
    if (b->pd_model) {
        gp_exec x = gp_backend_exec(b);
        char list[GP_PD_MAX_SPLITS * 12] = "";
        for (int i = 0, n = 0; i < x.session->n_splits(x.ctx); i++) {
            gp_split_info si;
            x.session->split_info(x.ctx, i, &si);
            n += snprintf(list + n, sizeof list - (size_t)n, "%s%d:%d", i ? ", " : "", si.a_got, si.f_got);
        }
        used += snprintf(b->describe + used, sizeof b->describe - (size_t)used, "; decode and prefill lanes, the "
                         "split chosen per prefill launch (TPOT target %g ms) among %s, every SM%s; profile %s in "
                         "%.1f s", p->pd_planner.tpot_ms, list, p->pd_planner.mixed ? " and mixed batches" : "",
                         p->pd_profile_path ? "loaded" : "measured", b->pd_profile_s);
    } else if (uses_pairs(p)) { /* AFD says where its sides run after (open_afd) */
        gp_split_info si;
        gp_exec x = gp_backend_exec(b);
        x.session->split_info(x.ctx, -1, &si);
        used += snprintf(b->describe + used, sizeof b->describe - (size_t)used, "; %s on %d + %d SMs%s%s",
                         p->pipelined ? "pipelined steps" : "decode and prefill lanes", si.a_got, si.f_got,
                         si.partitioned ? "" : " (no green contexts: plain streams sharing every SM)",
                         p->pd_idle_whole ? ", decode on every SM while the prefill lane is idle" : "");
    }
    const gp_kv_offload_plan *ko = gp_engine_kv_offload(b->engine);
    if (ko && used < (int)sizeof b->describe)
        used += snprintf(b->describe + used, sizeof b->describe - (size_t)used, "; offloaded KV cache, eager: %d "
                         "of %d blocks per sequence in pinned host memory (%.2f GB), %.2f GB on the GPU (of %.2f GB "
                         "asked; the whole cache %.2f GB)", ko->host_blocks_per_seq,
                         ko->host_blocks_per_seq + ko->device_blocks_per_seq, ko->host_bytes / 1e9,
                         ko->device_bytes / 1e9, ko->budget / 1e9, ko->full_bytes / 1e9);
    else if (p->kv_vram_budget && used < (int)sizeof b->describe)
        used += snprintf(b->describe + used, sizeof b->describe - (size_t)used, "; --kv-vram-budget %.2f GB holds "
                         "the whole KV cache: nothing offloaded (eager steps)", p->kv_vram_budget / 1e9);
    if (p->kv_store_bytes && used < (int)sizeof b->describe) {
        /* the pool as allocated: whole blocks of what was asked */
        gp_kvstore_stats ks;
        gp_kvstore_get_stats(gp_engine_prefix_store(b->engine), &ks, false);
        const int bt = kv_block_tokens(p);
        const uint64_t bb = gp_engine_prefix_block_bytes(b->engine, bt);
        snprintf(b->describe + used, sizeof b->describe - (size_t)used, "; stored prefixes: blocks of %d tokens "
                 "(%.2f MB each), a pinned pool of %llu blocks = %.3f GB (of %.3f GB asked), %s%s", bt,
                 (double)bb / 1e6, (unsigned long long)(bb ? ks.capacity_bytes / bb : 0),
                 (double)ks.capacity_bytes / 1e9, (double)p->kv_store_bytes / 1e9,
                 p->kv_store_dir ? "block files in " : "memory only", p->kv_store_dir ? p->kv_store_dir : "");
    }
    return GP_OK;
}

static gp_status open_common(const gp_backend_params *p, gp_backend **out)
{
    *out = NULL;
    GP_TRY(check_params(p));
    if (p->kind == GP_BACKEND_CUDA)
        GP_TRY(gp_cuda_available());
    gp_backend *b = calloc(1, sizeof *b);
    if (!b)
        GP_FAIL(GP_ERR_NO_MEMORY, "backend: out of host memory");
    b->p = *p;
    *out = b;
    return GP_OK;
}

static gp_status finish(gp_backend *b, gp_status st, gp_backend **out)
{
    *out = st == GP_OK ? b : NULL;
    if (st != GP_OK)
        gp_backend_close(b);
    return st;
}

/* --vram-budget's streaming: the defaults, with the window of the steps
 * the backend runs. */
static gp_weights_stream_params stream_params(const gp_backend_params *p, const gp_config *cfg)
{
    gp_weights_stream_params sp = gp_weights_stream_default_params();
    /* the CPU-assisted FFN's hot cache is the budget's other part, and the
     * steps it serves read no FFN group */
    sp.budget_bytes = p->vram_budget - (p->cpu_ffn_budget < p->vram_budget ? p->cpu_ffn_budget : 0);
    sp.min_window = gp_weights_stream_window(cfg, p->pipelined);
    sp.ffn_on_demand = p->cpu_ffn_budget != 0;
    return sp;
}

gp_status gp_backend_check_budget(const gp_backend_params *p, const gp_config *cfg)
{
    if (!p || !cfg)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_backend_check_budget: p and cfg must not be NULL");
    if (!p->vram_budget || p->kind != GP_BACKEND_CUDA)
        return GP_OK;
    gp_weights_stream_params sp = stream_params(p, cfg);
    return gp_weights_stream_check(cfg, &sp, NULL);
}

gp_status gp_backend_open_weights(const gp_host_weights *w, const gp_backend_params *p, gp_backend **out)
{
    gp_backend *b;
    *out = NULL;
    if (p && p->kv_store_bytes && p->kind == GP_BACKEND_CUDA)
        GP_FAIL(GP_ERR_UNSUPPORTED, "backend over host weights: stored prefixes (--kv-store-size) name the weights "
                "by their checkpoint or preset and seed, which host weights do not carry; allowed: "
                "gp_backend_open from a gp_model_source");
    GP_TRY(open_common(p, &b));
    b->cfg = w->cfg;
    gp_status st;
    if (p->kind == GP_BACKEND_CPU)
        st = open_cpu(b, w);
    else {
        gp_dtype dt = p->dtype;
        gp_weights_stream_params sp = stream_params(p, &w->cfg);
        if ((dt != GP_DTYPE_AUTO || (st = gp_dtype_resolve_auto(w->dtype, &dt)) == GP_OK) &&
            (st = p->vram_budget ? gp_device_weights_streamed(w, dt, &sp, &b->dw)
                                 : gp_device_weights_upload(w, dt, &b->dw)) == GP_OK)
            st = open_cuda(b, w);
    }
    return finish(b, st, out);
}

/* Streamed weights of src: the pinned copy filled straight from the
 * checkpoint or the device generator, with no pageable host copy of the
 * model beside it. */
static gp_status load_streamed(const gp_model_source *src, const gp_backend_params *p, gp_device_weights **dw)
{
    gp_weights_stream_params sp = stream_params(p, &src->cfg);
    return gp_device_weights_streamed_load(src, p->dtype, &sp, dw);
}

/* The weights' name in the store's identity: the checkpoint's real path (so
 * two spellings of one directory share blocks), or the preset and its seed.
 * The engine adds the shape, dtype and block size. */
static void kv_model_name(const gp_model_source *src, char *buf, size_t cap)
{
    if (src->synthetic) {
        snprintf(buf, cap, "preset %s, synthetic weights seed %llu", src->cfg.name, (unsigned long long)src->seed);
        return;
    }
    char real[PATH_MAX];
    snprintf(buf, cap, "checkpoint %s", realpath(src->path, real) ? real : src->path);
}

/* Tensor parallel: this rank's device, the group (first, so that a rank
 * that fails later, loading, is seen by the others at once), and its shard
 * of the weights on the device. */
static gp_status open_tp(gp_backend *b, const gp_model_source *src)
{
    const gp_backend_params *p = &b->p;
    GP_TRY(gp_tp_check(&src->cfg, p->tp));
    if (p->tp_rank < 0 || p->tp_rank >= p->tp || !p->tp_rendezvous)
        GP_FAIL(GP_ERR_INVALID_ARG, "tensor parallel: rank %d of %d (allowed 0..%d) with a rendezvous (%s)",
                p->tp_rank, p->tp, p->tp - 1, p->tp_rendezvous ? p->tp_rendezvous : "none given");
    cudaError_t ce = cudaSetDevice(p->tp_rank);
    if (ce != cudaSuccess)
        GP_FAIL(GP_ERR_NO_DEVICE, "tensor parallel rank %d: CUDA device %d: %s (--tp %d needs %d GPUs)", p->tp_rank,
                p->tp_rank, cudaGetErrorString(ce), p->tp, p->tp);
    gp_group_params gp = gp_group_default_params();
    GP_TRY(gp_rdv_parse(p->tp_rendezvous, &gp.addr));
    gp.rank = p->tp_rank;
    gp.n_ranks = p->tp;
    GP_TRY(gp_comm_create(&gp, &b->comm));
    gp_host_weights s;
    GP_TRY(gp_model_source_load_host_shard(src, p->tp, p->tp_rank, &s, &p->progress));
    gp_dtype dt = p->dtype;
    gp_status st = dt == GP_DTYPE_AUTO ? gp_dtype_resolve_auto(s.dtype, &dt) : GP_OK;
    if (st == GP_OK)
        st = gp_device_weights_upload(&s, dt, &b->dw);
    gp_host_weights_free(&s);
    return st;
}

/* Attention and FFN on GPUs 0 and 1: the FFN side beside the engine, and
 * what the pair holds on the status line. */
static gp_status open_afd(gp_backend *b, const gp_model_source *src)
{
    GP_TRY(gp_afd_pair_open(src, b->engine, 0, 1, b->as.graphs, &b->afd));
    const size_t used = strlen(b->describe);
    snprintf(b->describe + used, sizeof b->describe - used, "; attention and FFN on two GPUs: the KV cache on GPU "
             "0 (prefill and sequential steps there), %.2f GB of FFN weights on GPU 1, the residual rows crossing "
             "by peer copy", gp_afd_pair_ffn_gb(b->afd));
    return GP_OK;
}

/* The ranks' sums: over peer memory up to tp_peer_bytes where every rank
 * can map the others' memory, else NCCL alone; the description says which. */
static gp_status tp_reduce_setup(gp_backend *b)
{
    const gp_backend_params *p = &b->p;
    char how[320];
    gp_status st = p->tp_peer_bytes ? gp_comm_peer_setup(b->comm, p->tp_peer_bytes) : GP_ERR_UNSUPPORTED;
    if (st == GP_OK)
        snprintf(how, sizeof how, "sums of up to %zu bytes over peer memory, NCCL beyond", p->tp_peer_bytes);
    else if (st == GP_ERR_UNSUPPORTED)
        snprintf(how, sizeof how, "NCCL sums (%s)", p->tp_peer_bytes ? gp_last_error() : "--tp-peer-bytes 0");
    else
        return st;
    const size_t used = strlen(b->describe);
    snprintf(b->describe + used, sizeof b->describe - used, "; tensor parallel rank %d of %d (GPU %d), %s",
             p->tp_rank, p->tp, p->tp_rank, how);
    return GP_OK;
}

gp_status gp_backend_open(const gp_model_source *src, const gp_backend_params *p, gp_backend **out)
{
    gp_backend *b;
    *out = NULL;
    GP_TRY(open_common(p, &b));
    b->cfg = src->cfg;
    kv_model_name(src, b->kv_model, sizeof b->kv_model);
    gp_status st;
    if (p->kind == GP_BACKEND_CPU) {
        if ((st = gp_model_source_load_host_ex(src, &b->own_w, &p->progress)) == GP_OK)
            st = open_cpu(b, &b->own_w);
        return finish(b, st, out);
    }
    if (p->tp > 1)
        st = open_tp(b, src);
    else if (p->vram_budget)
        st = load_streamed(src, p, &b->dw);
    else
        st = gp_device_weights_load(src, p->dtype, &b->dw);
    /* the CPU-assisted FFN packs the host weights once; they are not kept */
    gp_host_weights hw;
    memset(&hw, 0, sizeof hw);
    if (st == GP_OK && p->cpu_ffn_budget)
        st = gp_model_source_load_host_ex(src, &hw, &p->progress);
    if (st == GP_OK)
        st = open_cuda(b, p->cpu_ffn_budget ? &hw : NULL);
    if (st == GP_OK && b->comm)
        st = gp_engine_set_tp(b->engine, &(gp_engine_tp){.rank = p->tp_rank, .tp = p->tp, .sum = gp_comm_sum_f32,
                                                         .gather = gp_comm_gather_f32, .ctx = b->comm});
    if (st == GP_OK && b->comm)
        st = tp_reduce_setup(b);
    if (st == GP_OK && p->afd)
        st = open_afd(b, src);
    if (hw.arena)
        gp_host_weights_free(&hw);
    return finish(b, st, out);
}

gp_status gp_backend_host_need(const gp_model_source *src, const gp_backend_params *p, uint64_t *weights,
                               uint64_t *kv, gp_dtype *dtype)
{
    if (!src || !p || !weights || !kv || !dtype)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_backend_host_need: src, p, weights, kv and dtype must not be NULL");
    GP_TRY(gp_model_source_host_dtype(src, dtype));
    *weights = gp_host_weights_bytes(&src->cfg, *dtype);
    *kv = gp_cpu_model_kv_bytes(&src->cfg, p->n_seqs, p->max_context, p->block_size);
    return GP_OK;
}

void gp_backend_close(gp_backend *b)
{
    if (!b)
        return;
    gp_afd_pair_close(b->afd); /* its executor before the engine it pairs */
    gp_pd_exec_destroy(b->pd_exec); /* its lanes before their engine */
    gp_pd_model_destroy(b->pd_model);
    gp_assembly_close(&b->as);
    gp_green_pool_destroy(b->pool);
    gp_device_weights_destroy(b->dw);
    gp_comm_destroy(b->comm); /* after the engine: no collective of its steps is left */
    gp_cpu_exec_destroy(b->cpu_exec);
    gp_cpu_model_destroy(b->cpu);
    if (b->own_w.arena)
        gp_host_weights_free(&b->own_w);
    free(b);
}

gp_pd_exec *gp_backend_pd_exec(gp_backend *b)
{
    return b ? b->pd_exec : NULL;
}

const gp_pd_model *gp_backend_pd_model(const gp_backend *b)
{
    return b ? b->pd_model : NULL;
}

gp_group *gp_backend_group(const gp_backend *b)
{
    return b && b->comm ? gp_comm_group(b->comm) : NULL;
}

gp_exec gp_backend_exec(gp_backend *b)
{
    return b->afd         ? gp_afd_pair_exec(b->afd)
           : b->pd_exec   ? gp_pd_exec_get(b->pd_exec)
           : b->cuda_exec ? gp_cuda_exec_get(b->cuda_exec)
                          : gp_cpu_exec_get(b->cpu_exec);
}

const gp_config *gp_backend_config(const gp_backend *b)
{
    return &b->cfg;
}

gp_status gp_backend_sparsity_stats(gp_backend *b, long *active, int reset)
{
    if (!b || !b->engine)
        GP_FAIL(GP_ERR_STATE, "gp_backend_sparsity_stats: the cuda backend counts active inputs; this is %s",
                b ? "the cpu backend" : "no backend");
    return gp_engine_sparsity_stats(b->engine, active, reset);
}

gp_status gp_backend_cpu_ffn_stats(gp_backend *b, gp_cpu_ffn_stats *out, int reset)
{
    if (!b || !b->engine)
        GP_FAIL(GP_ERR_STATE, "gp_backend_cpu_ffn_stats: the CPU-assisted FFN is the cuda backend's; this is %s",
                b ? "the cpu backend" : "no backend");
    return gp_engine_cpu_ffn_stats(b->engine, out, reset);
}

const char *gp_backend_describe(const gp_backend *b)
{
    return b->describe;
}

gp_dtype gp_backend_dtype(const gp_backend *b)
{
    return b->dtype;
}

/* The engine of a cuda backend, or GP_ERR_STATE naming what asked. */
static gp_status cuda_engine(gp_backend *b, const char *what, gp_engine **e)
{
    if (!b || !b->engine)
        GP_FAIL(GP_ERR_STATE, "%s: stored prefixes are the cuda backend's; this is %s", what,
                b ? "the cpu backend" : "no backend");
    *e = b->engine;
    return GP_OK;
}

gp_status gp_backend_prefill_prefix(gp_backend *b, int seq, int n, const int32_t *tokens, int32_t *next,
                                    float *last_logits, gp_prefix_stats *st)
{
    gp_engine *e;
    GP_TRY(cuda_engine(b, "gp_backend_prefill_prefix", &e));
    return gp_engine_prefill_prefix(e, seq, n, tokens, next, last_logits, st);
}

gp_status gp_backend_prefix_store_seq(gp_backend *b, int seq, int n, const int32_t *tokens,
                                      gp_prefix_store_stats *st)
{
    gp_engine *e;
    GP_TRY(cuda_engine(b, "gp_backend_prefix_store_seq", &e));
    return gp_engine_prefix_store_seq(e, seq, n, tokens, st);
}

gp_status gp_backend_kvstore_stats(gp_backend *b, gp_kvstore_stats *out, bool reset)
{
    gp_engine *e;
    GP_TRY(cuda_engine(b, "gp_backend_kvstore_stats", &e));
    gp_kvstore *s = gp_engine_prefix_store(e);
    if (!s)
        GP_FAIL(GP_ERR_STATE, "gp_backend_kvstore_stats: stored prefixes are off (kv_store_bytes 0)");
    gp_kvstore_get_stats(s, out, reset);
    return GP_OK;
}
