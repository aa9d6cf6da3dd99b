/* gp_bench_prefix: time to first token with a stored prefix
 * against prefilling the whole prompt, on synthetic weights: per prefix
 * length P, one engine; the full prefill of P + suffix tokens, the store of
 * P's blocks, then prefills that reload P (layer-wise, lag 2) and prefill
 * only the suffix; device-event medians, the reload's rate against the
 * link's 55 GB/s (docs/ARCHITECTURE.md §6), and the suffix alone after its prefix (the
 * floor the overlap of reload and suffix can approach). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "gp_kvstore.h"
#include "gp_tools.h"
#include "gp_weights.h"

#define NAME "gp_bench_prefix"
#define MAX_ROWS 16
#define LINK_GBPS 55.0 /* pinned host-to-device on the H100 machine (docs/ARCHITECTURE.md §6) */

static void usage(FILE *f)
{
    fprintf(f, "usage: gp_bench_prefix [--preset NAME] [--prefix P[,P...]] [--suffix N] [--repeats R] [--block N]\n"
               "                       [--buffers N] [--no-overlap] [--seed S] [--dtype bf16|fp16] [--trace FILE]\n"
               "  --preset NAME   model shape, synthetic weights (default llama3-8b; %s)\n"
               "  --prefix LIST   stored prefix lengths in tokens, each a multiple of --block (default 4096,8192,32768)\n"
               "  --suffix N      tokens after the prefix, 1..65536 (default 256)\n"
               "  --repeats R     timed prefills of each kind per row, after one warm-up (default 5; medians)\n"
               "  --block N       tokens per stored block (default %d)\n"
               "  --buffers N     reload staging buffers, 2..%d (default 2)\n"
               "  --no-overlap    the suffix waits for the whole reload (default: its layer l for layer l only)\n"
               "  --seed S        weight seed (default 1)\n"
               "  --dtype D       engine dtype: bf16 (default) or fp16\n"
               "  --trace FILE    Chrome trace JSON (Perfetto, chrome://tracing) of each row's last reuse: per\n"
               "                  layer its copy, its scatter into the cache and the suffix prefill's share;\n"
               "                  rewritten after every row\n"
               "The store holds exactly the prefix's blocks (pinned); the engine's max context is P + N.\n",
            gp_config_preset_names(), GP_PREFIX_DEFAULT_BLOCK_TOKENS, GP_KV_RELOAD_MAX_BUFFERS);
}

#define CK(call)                                                                                        \
    do {                                                                                               \
        gp_status s_ = (call);                                                                         \
        if (s_ != GP_OK) {                                                                             \
            fprintf(stderr, "gp_bench_prefix: %s: %s: %s\n", #call, gp_status_str(s_), gp_last_error()); \
            goto out;                                                                                  \
        }                                                                                              \
    } while (0)

typedef struct opts {
    int suffix, repeats, block, buffers;
    bool overlap;
    unsigned long seed;
    const char *preset;
    const char *trace; /* --trace FILE or NULL */
} opts;

/* One complete ("X") slice; times in ms, the format's in microseconds. */
static void slice(json_t *ev, int pid, int tid, const char *name, float t0, float t1)
{
    json_array_append_new(ev, json_pack("{s:s, s:s, s:i, s:i, s:f, s:f}", "name", name, "ph", "X", "pid", pid, "tid",
                                        tid, "ts", 1e3 * t0, "dur", 1e3 * (t1 > t0 ? t1 - t0 : 0.0f)));
}

static void name_event(json_t *ev, const char *what, int pid, int tid, const char *name)
{
    json_array_append_new(ev, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", what, "ph", "M", "pid", pid, "tid",
                                        tid, "args", "name", name));
}

/* Row pid's last reuse into events, then the whole file rewritten. */
static int trace_row(gp_engine *e, const opts *o, json_t *ev, int pid, int P)
{
    const int L = gp_engine_config(e)->n_layers;
    gp_prefix_trace_layer *t = calloc((size_t)L, sizeof *t);
    float first = 0.0f;
    if (!t || gp_engine_prefix_trace(e, t, &first) != GP_OK) {
        fprintf(stderr, "gp_bench_prefix: --trace: %s\n", t ? gp_last_error() : "out of host memory");
        free(t);
        return 1;
    }
    char name[96];
    snprintf(name, sizeof name, "prefix %d + suffix %d tokens", P, o->suffix);
    name_event(ev, "process_name", pid, 0, name);
    name_event(ev, "thread_name", pid, 1, "copy stream: load (host to device)");
    name_event(ev, "thread_name", pid, 2, "write stream: scatter into the cache");
    name_event(ev, "thread_name", pid, 3, "engine stream: suffix prefill");
    for (int l = 0; l < L; l++) {
        char n[32];
        snprintf(n, sizeof n, "layer %d", l);
        slice(ev, pid, 1, n, t[l].load_begin, t[l].load_end);
        slice(ev, pid, 2, n, t[l].write_begin, t[l].write_end);
        slice(ev, pid, 3, n, t[l].suffix_attn, l + 1 < L ? t[l + 1].suffix_attn : first);
    }
    free(t);
    json_t *root = json_pack("{s:O, s:s}", "traceEvents", ev, "displayTimeUnit", "ms");
    int rc = !root || json_dump_file(root, o->trace, JSON_INDENT(1)) != 0;
    if (rc)
        fprintf(stderr, "gp_bench_prefix: --trace: cannot write '%s'\n", o->trace);
    json_decref(root);
    return rc;
}

/* Samples of one row: [kind][repeat]. */
enum { S_FULL, S_RELOAD, S_GBPS, S_SUFFIX, S_TTFT, S_WALL, S_ALONE, S_FULL_WALL, S_COUNT };

static int run_row(gp_device_weights *dw, const gp_config *c, int P, const opts *o, json_t *trace, int pid)
{
    int rc = 1;
    gp_engine *e = NULL;
    const int n = P + o->suffix, V = c->vocab;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    double *smp = malloc(sizeof(double) * S_COUNT * (size_t)o->repeats);
    float *lf = malloc(sizeof(float) * (size_t)V), *lr = malloc(sizeof(float) * (size_t)V);
    if (!tok || !smp || !lf || !lr) {
        fprintf(stderr, "gp_bench_prefix: out of host memory for %d tokens\n", n);
        goto out;
    }
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)(((size_t)i * 2654435761u + 17) % (size_t)V);
    gp_engine_params ep = gp_engine_default_params();
    ep.max_batch = 1;
    ep.max_context = n;
    CK(gp_engine_create(dw, &ep, &e));
    char model[128];
    snprintf(model, sizeof model, "%s synthetic seed %lu", o->preset, o->seed);
    gp_prefix_params pp = gp_prefix_default_params();
    pp.model = model;
    pp.block_tokens = o->block;
    pp.n_buffers = o->buffers;
    pp.overlap = o->overlap;
    pp.store_bytes = (uint64_t)(P / o->block) * gp_engine_prefix_block_bytes(e, o->block);
    CK(gp_engine_prefix_enable(e, &pp));
    int32_t nf = -1, nr = -2;
    for (int i = -1; i < o->repeats; i++) { /* i = -1: warm-up */
        gp_engine_reset_seq(e, 0);
        double t0 = gp_now_s();
        CK(gp_engine_prefill(e, 0, n, tok, &nf, lf));
        if (i >= 0) {
            smp[S_FULL * o->repeats + i] = gp_engine_last_prefill_ms(e);
            smp[S_FULL_WALL * o->repeats + i] = (gp_now_s() - t0) * 1e3;
        }
    }
    gp_prefix_store_stats ss;
    CK(gp_engine_prefix_store_seq(e, 0, P, tok, &ss));
    for (int i = -1; i < o->repeats; i++) { /* the suffix alone, its prefix already in the cache */
        CK(gp_engine_truncate_seq(e, 0, P));
        CK(gp_engine_prefill(e, 0, o->suffix, tok + P, NULL, NULL));
        if (i >= 0)
            smp[S_ALONE * o->repeats + i] = gp_engine_last_prefill_ms(e);
    }
    gp_prefix_stats st = {0};
    for (int i = -1; i < o->repeats; i++) {
        gp_engine_reset_seq(e, 0);
        CK(gp_engine_prefill_prefix(e, 0, n, tok, &nr, lr, &st));
        if (st.matched_tokens != P) {
            fprintf(stderr, "gp_bench_prefix: prefix %d: the store matched %d tokens, not %d\n", P,
                    st.matched_tokens, P);
            goto out;
        }
        if (i >= 0) {
            double *r = smp + i;
            r[S_RELOAD * o->repeats] = st.reload_ms;
            r[S_GBPS * o->repeats] = st.reload_gbps;
            r[S_SUFFIX * o->repeats] = st.suffix_ms;
            r[S_TTFT * o->repeats] = st.ttft_ms;
            r[S_WALL * o->repeats] = st.wall_ms;
        }
    }
    double m[S_COUNT];
    for (int k = 0; k < S_COUNT; k++)
        m[k] = gp_median_d(smp + (size_t)k * o->repeats, o->repeats);
    double diff = 0.0, ref = 0.0; /* the two paths' logits: other chunk shapes, so rounding differs */
    for (int v = 0; v < V; v++) {
        double d = lf[v] - lr[v], a = lf[v] < 0 ? -lf[v] : lf[v];
        diff = (d < 0 ? -d : d) > diff ? (d < 0 ? -d : d) : diff;
        ref = a > ref ? a : ref;
    }
    printf("| %d | %d | %.2f | %.2f | %.2f | %.1f | %.0f%% | %.2f | %.2f | %.2f | %.1fx | %.2f | %.1fx | %.0f ms, "
           "%.1f GB/s | %s, %.1e |\n",
           P, o->suffix, m[S_FULL], m[S_RELOAD], (double)st.bytes_loaded / 1e9, m[S_GBPS],
           100.0 * m[S_GBPS] / LINK_GBPS, m[S_ALONE], m[S_SUFFIX], m[S_TTFT], m[S_FULL] / m[S_TTFT], m[S_WALL],
           m[S_FULL_WALL] / m[S_WALL], ss.ms, ss.ms > 0 ? (double)ss.bytes_stored / (ss.ms * 1e6) : 0.0,
           nf == nr ? "same" : "differs", ref > 0 ? diff / ref : diff);
    fflush(stdout);
    rc = trace ? trace_row(e, o, trace, pid, P) : 0;
out:
    gp_engine_destroy(e);
    free(tok);
    free(smp);
    free(lf);
    free(lr);
    return rc;
}

int main(int argc, char **argv)
{
    opts o = {.suffix = 256, .repeats = 5, .block = GP_PREFIX_DEFAULT_BLOCK_TOKENS, .buffers = 2, .overlap = true,
              .seed = 1, .preset = "llama3-8b"};
    const char *prefixes = "4096,8192,32768";
    gp_dtype dtype = GP_DTYPE_BF16;
    static const struct option lo[] = {{"preset", required_argument, 0, 'p'}, {"prefix", required_argument, 0, 'P'},
                                       {"suffix", required_argument, 0, 'n'}, {"repeats", required_argument, 0, 'r'},
                                       {"block", required_argument, 0, 'b'},  {"buffers", required_argument, 0, 'B'},
                                       {"no-overlap", no_argument, 0, 'O'},   {"seed", required_argument, 0, 's'},
                                       {"dtype", required_argument, 0, 'd'},  {"help", no_argument, 0, 'h'},
                                       {"trace", required_argument, 0, 't'},  {0, 0, 0, 0}};
    int c;
    long v;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'p': o.preset = optarg; break;
        case 'P': prefixes = optarg; break;
        case 'n': if (gp_arg_long(NAME, optarg, 1, 65536, "--suffix", &v)) return 2; o.suffix = (int)v; break;
        case 'r': if (gp_arg_long(NAME, optarg, 1, 1000, "--repeats", &v)) return 2; o.repeats = (int)v; break;
        case 'b': if (gp_arg_long(NAME, optarg, 1, 65536, "--block", &v)) return 2; o.block = (int)v; break;
        case 'B':
            if (gp_arg_long(NAME, optarg, 2, GP_KV_RELOAD_MAX_BUFFERS, "--buffers", &v))
                return 2;
            o.buffers = (int)v;
            break;
        case 'O': o.overlap = false; break;
        case 's':
            o.seed = strtoul(optarg, &end, 10);
            if (*end || !*optarg) {
                fprintf(stderr, "gp_bench_prefix: --seed '%s': expected a non-negative integer\n", optarg);
                return 2;
            }
            break;
        case 'd':
            if (gp_dtype_parse(optarg, 0, &dtype) != GP_OK) {
                fprintf(stderr, "gp_bench_prefix: --dtype: %s\n", gp_last_error());
                return 2;
            }
            break;
        case 't': o.trace = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gp_bench_prefix: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    long Pl[MAX_ROWS];
    int P[MAX_ROWS], n_rows = 0;
    if (gp_parse_long_list(prefixes, o.block, 1 << 20, "--prefix", Pl, MAX_ROWS, &n_rows) != GP_OK) {
        fprintf(stderr, NAME ": %s\n", gp_last_error());
        return 2;
    }
    for (int i = 0; i < n_rows; i++) {
        if (Pl[i] % o.block) {
            fprintf(stderr, NAME ": --prefix %ld: not a multiple of --block %d (only whole blocks are stored)\n",
                    Pl[i], o.block);
            return 2;
        }
        P[i] = (int)Pl[i];
    }
    gp_config cfg;
    if (gp_config_preset(o.preset, &cfg) != GP_OK) {
        fprintf(stderr, "gp_bench_prefix: --preset '%s': %s\n", o.preset, gp_last_error());
        return 2;
    }
    for (int i = 0; i < n_rows; i++)
        if (P[i] + o.suffix > cfg.max_context)
            cfg.max_context = P[i] + o.suffix; /* the shape is what is timed */
    gp_device_weights *dw = NULL;
    gp_status st = gp_device_weights_synthetic(&cfg, dtype, o.seed, &dw);
    if (st != GP_OK) {
        fprintf(stderr, "gp_bench_prefix: synthetic %s weights: %s: %s\n", o.preset, gp_status_str(st),
                gp_last_error());
        return 1;
    }
    printf("gp_bench_prefix: %s shape, synthetic %s weights (seed %lu), stored blocks of %d tokens, %d staging "
           "buffers, overlap %s; medians of %d (device events unless host); TTFT: reload start to first token\n\n",
           o.preset, gp_dtype_flag_name(dtype), o.seed, o.block, o.buffers, o.overlap ? "on" : "off", o.repeats);
    printf("| prefix | suffix | full prefill ms | reload ms | GB | reload GB/s | of 55 | suffix alone ms | suffix in "
           "reuse ms | TTFT ms | speedup | TTFT host ms | host speedup | store | first token, logits diff |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    int rc = 0;
    json_t *trace = o.trace ? json_array() : NULL;
    for (int i = 0; i < n_rows; i++)
        if (run_row(dw, &cfg, P[i], &o, trace, i + 1))
            rc = 1; /* later rows still run: every finished row is printed */
    json_decref(trace);
    gp_device_weights_destroy(dw);
    return rc;
}
