/* greenpipe bench-serve: load an OpenAI-compatible server with streamed
 * completions as vLLM's `vllm bench serve` does, print its report and
 * optionally write it as JSON. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_loadgen.h"
#include "gp_tools.h"

#define PROG "greenpipe bench-serve"
#define DEFAULT_VOCAB 32000

static void usage(FILE *f)
{
    fprintf(f,
            "usage: greenpipe bench-serve [options]\n"
            "Sends streamed completions (\"stream\": true, \"ignore_eos\": true, \"temperature\": 0) to a\n"
            "running server and prints vLLM's serving report: TTFT, TPOT, ITL, end-to-end latency,\n"
            "throughput and goodput. Failed requests are counted with their reason, never timed.\n"
            "server:\n"
            "  --base-url URL             the server (default http://127.0.0.1:8000); GET /health must\n"
            "                             answer 200 before anything is sent\n"
            "  --endpoint PATH            the completions route (default /v1/completions)\n"
            "  --model ID                 the \"model\" of each request (default: the first id of\n"
            "                             GET /v1/models)\n"
            "  --api-key KEY              sent as \"Authorization: Bearer KEY\" (default: none)\n"
            "  --ready-timeout S          wait up to S seconds for /health to answer 200 (default 0:\n"
            "                             ask once)\n"
            "  --request-timeout S        one request's whole time at most (default 21600)\n"
            "dataset:\n"
            "  --dataset-name NAME        random (default), shared-prefix or jsonl\n"
            "  --num-prompts N            requests of random and jsonl (default 1000; jsonl: every line)\n"
            "  --seed N                   seed of the prompts and the arrivals (default 0)\n"
            "  --vocab N                  token ids of random prompts lie in [0, N) (default: the server's\n"
            "                             vocab_size in GET /v1/models, else 32000)\n"
            "  random: prompts of random token ids\n"
            "  --random-input-len N       prompt tokens (default 1024)\n"
            "  --random-output-len N      max_tokens (default 128)\n"
            "  --random-range-ratio R     lengths uniform in [len x (1 - R), len x (1 + R)], R in [0, 1)\n"
            "                             (default 0)\n"
            "  shared-prefix: groups of requests whose prompts share a random prefix, in shuffled order\n"
            "  --prefix-groups G          groups (default 32)\n"
            "  --requests-per-group N     requests of each group (default 16)\n"
            "  --prefix-len N             shared prefix tokens (default 2048)\n"
            "  --question-len N           each request's own tokens after the prefix (default 256)\n"
            "  --prefix-output-len N      max_tokens (default 128)\n"
            "  jsonl: a file of prompts\n"
            "  --dataset-path FILE        one {\"prompt\": \"text\" or [ids], \"max_tokens\": n} per line\n"
            "                             (implies --dataset-name jsonl)\n"
            "load:\n"
            "  --request-rate R           requests per second, arrivals a Poisson process (default inf:\n"
            "                             all at once)\n"
            "  --burstiness B             gaps gamma-distributed with shape B and mean 1/R; 1 is Poisson,\n"
            "                             below 1 burstier, above 1 more even (default 1)\n"
            "  --max-concurrency C        requests in flight at most; later arrivals wait (default: no\n"
            "                             limit)\n"
            "report:\n"
            "  --percentiles LIST         percentiles of each latency, comma-separated in (0, 100]\n"
            "                             (default 99)\n"
            "  --goodput SLO...           request goodput: requests meeting every SLO per second; SLOs\n"
            "                             ttft:MS, tpot:MS, e2el:MS, space- or comma-separated, in one\n"
            "                             argument or following it (--goodput ttft:500 tpot:50)\n"
            "  --result-json FILE         write the figures, per-request arrays (seconds) and the\n"
            "                             settings as JSON\n"
            "  --help                     this text\n"
            "TTFT: first token chunk - send; ITL: gaps between token chunks; TPOT: (E2EL - TTFT) /\n"
            "(output tokens - 1), output tokens from the stream's usage.completion_tokens; E2EL: last\n"
            "token chunk - send. Exit 0 when the run ends with a request served, 1 when none was or the\n"
            "server cannot be reached, 2 for bad usage.\n");
}

enum {
    O_BASE_URL = 1, O_ENDPOINT, O_MODEL, O_API_KEY, O_READY_TIMEOUT, O_REQUEST_TIMEOUT, O_DATASET_NAME,
    O_NUM_PROMPTS, O_SEED, O_VOCAB, O_IN_LEN, O_OUT_LEN, O_RANGE_RATIO, O_GROUPS, O_PER_GROUP, O_PREFIX_LEN,
    O_QUESTION_LEN, O_PREFIX_OUT_LEN, O_DATASET_PATH, O_RATE, O_BURSTINESS, O_MAX_CONCURRENCY, O_PERCENTILES,
    O_GOODPUT, O_RESULT_JSON, O_HELP, O_COUNT
};

static const struct option OPTS[] = {
    {"base-url", required_argument, NULL, O_BASE_URL},
    {"endpoint", required_argument, NULL, O_ENDPOINT},
    {"model", required_argument, NULL, O_MODEL},
    {"api-key", required_argument, NULL, O_API_KEY},
    {"ready-timeout", required_argument, NULL, O_READY_TIMEOUT},
    {"request-timeout", required_argument, NULL, O_REQUEST_TIMEOUT},
    {"dataset-name", required_argument, NULL, O_DATASET_NAME},
    {"num-prompts", required_argument, NULL, O_NUM_PROMPTS},
    {"seed", required_argument, NULL, O_SEED},
    {"vocab", required_argument, NULL, O_VOCAB},
    {"random-input-len", required_argument, NULL, O_IN_LEN},
    {"random-output-len", required_argument, NULL, O_OUT_LEN},
    {"random-range-ratio", required_argument, NULL, O_RANGE_RATIO},
    {"prefix-groups", required_argument, NULL, O_GROUPS},
    {"requests-per-group", required_argument, NULL, O_PER_GROUP},
    {"prefix-len", required_argument, NULL, O_PREFIX_LEN},
    {"question-len", required_argument, NULL, O_QUESTION_LEN},
    {"prefix-output-len", required_argument, NULL, O_PREFIX_OUT_LEN},
    {"dataset-path", required_argument, NULL, O_DATASET_PATH},
    {"request-rate", required_argument, NULL, O_RATE},
    {"burstiness", required_argument, NULL, O_BURSTINESS},
    {"max-concurrency", required_argument, NULL, O_MAX_CONCURRENCY},
    {"percentiles", required_argument, NULL, O_PERCENTILES},
    {"goodput", required_argument, NULL, O_GOODPUT},
    {"result-json", required_argument, NULL, O_RESULT_JSON},
    {"help", no_argument, NULL, O_HELP},
    {NULL, 0, NULL, 0},
};

typedef enum ds_kind { DS_RANDOM, DS_SHARED_PREFIX, DS_JSONL } ds_kind;
static const char *const DS_NAMES[] = {"random", "shared-prefix", "jsonl"};

typedef struct bench_opts {
    const char *val[O_COUNT]; /* each flag's text as given; NULL when absent */
    ds_kind ds;
    long num_prompts, vocab, in_len, out_len, groups, per_group, prefix_len, question_len, prefix_out_len,
        max_concurrency;
    uint64_t seed;
    double range_ratio, rate, burstiness, ready_timeout, request_timeout;
    double pcts[GP_LG_MAX_PCTS];
    int n_pcts;
    gp_lg_slo slo;
} bench_opts;

static int bad(void)
{
    fprintf(stderr, PROG ": %s\n", gp_last_error());
    return 2;
}

static int get_long(const bench_opts *o, int id, long lo, long hi, long dflt, long *out)
{
    char flag[48];
    snprintf(flag, sizeof flag, "--%s", gp_opt_name(OPTS, id));
    *out = dflt;
    return o->val[id] ? gp_arg_long(PROG, o->val[id], lo, hi, flag, out) : 0;
}

/* A number within bounds, "[0, 1)" or "(0, inf)" (open or closed ends);
 * "inf" itself where hi is INFINITY and allow_inf. */
static int get_double(const bench_opts *o, int id, double lo, double hi, const char *bounds, bool allow_inf,
                      double dflt, double *out)
{
    *out = dflt;
    const char *t = o->val[id];
    if (!t)
        return 0;
    char flag[48];
    snprintf(flag, sizeof flag, "--%s", gp_opt_name(OPTS, id));
    if (allow_inf && !strcmp(t, "inf")) {
        *out = INFINITY;
        return 0;
    }
    if (gp_parse_double(t, flag, out) != GP_OK)
        return bad();
    bool lo_open = bounds[0] == '(', hi_open = bounds[strlen(bounds) - 1] == ')';
    if ((lo_open ? *out <= lo : *out < lo) || (hi_open ? *out >= hi : *out > hi)) {
        fprintf(stderr, PROG ": %s %s is out of range; allowed: %s%s\n", flag, t, bounds, allow_inf ? " or inf" : "");
        return 2;
    }
    return 0;
}

/* Each SLO of text, split at spaces and commas. */
static int add_slos(gp_lg_slo *slo, const char *text)
{
    char *copy = strdup(text), *save = NULL;
    if (!copy) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    int rc = 0, n = 0;
    for (char *t = strtok_r(copy, " ,", &save); t && !rc; t = strtok_r(NULL, " ,", &save), n++)
        if (gp_lg_slo_add(slo, t) != GP_OK)
            rc = bad();
    free(copy);
    if (!rc && n == 0) {
        fprintf(stderr, PROG ": --goodput '%s': no SLO given; allowed: ttft:MS, tpot:MS, e2el:MS\n", text);
        rc = 2;
    }
    return rc;
}

/* Flags that shape only one dataset are refused with another: a value that
 * would be ignored is a mistake the user should hear about. */
static int check_dataset_flags(const bench_opts *o)
{
    static const struct {
        int id;
        int ds_mask; /* bit per ds_kind the flag applies to */
    } only[] = {
        {O_IN_LEN, 1 << DS_RANDOM},
        {O_OUT_LEN, 1 << DS_RANDOM},
        {O_RANGE_RATIO, 1 << DS_RANDOM},
        {O_GROUPS, 1 << DS_SHARED_PREFIX},
        {O_PER_GROUP, 1 << DS_SHARED_PREFIX},
        {O_PREFIX_LEN, 1 << DS_SHARED_PREFIX},
        {O_QUESTION_LEN, 1 << DS_SHARED_PREFIX},
        {O_PREFIX_OUT_LEN, 1 << DS_SHARED_PREFIX},
        {O_DATASET_PATH, 1 << DS_JSONL},
        {O_VOCAB, (1 << DS_RANDOM) | (1 << DS_SHARED_PREFIX)},
        {O_NUM_PROMPTS, (1 << DS_RANDOM) | (1 << DS_JSONL)},
    };
    for (size_t i = 0; i < sizeof only / sizeof only[0]; i++) {
        if (!o->val[only[i].id] || (only[i].ds_mask & (1 << o->ds)))
            continue;
        char allowed[64] = "";
        for (int k = 0; k < 3; k++)
            if (only[i].ds_mask & (1 << k))
                snprintf(allowed + strlen(allowed), sizeof allowed - strlen(allowed), "%s%s", allowed[0] ? ", " : "",
                         DS_NAMES[k]);
        fprintf(stderr, PROG ": --%s applies to --dataset-name %s, not %s%s\n", gp_opt_name(OPTS, only[i].id), allowed,
                DS_NAMES[o->ds],
                only[i].id == O_NUM_PROMPTS ? " (its count is --prefix-groups x --requests-per-group)" : "");
        return 2;
    }
    if (o->ds == DS_JSONL && !o->val[O_DATASET_PATH]) {
        fprintf(stderr, PROG ": --dataset-name jsonl reads --dataset-path FILE; none given\n");
        return 2;
    }
    return 0;
}

static int parse_numbers(bench_opts *o)
{
    int rc = 0;
    rc = rc ? rc : get_long(o, O_NUM_PROMPTS, 1, GP_LG_MAX_PROMPTS, o->ds == DS_JSONL ? 0 : 1000, &o->num_prompts);
    rc = rc ? rc : get_long(o, O_VOCAB, 1, INT32_MAX, 0, &o->vocab);
    rc = rc ? rc : get_long(o, O_IN_LEN, 1, GP_LG_MAX_LEN, 1024, &o->in_len);
    rc = rc ? rc : get_long(o, O_OUT_LEN, 1, GP_LG_MAX_LEN, 128, &o->out_len);
    rc = rc ? rc : get_long(o, O_GROUPS, 1, GP_LG_MAX_PROMPTS, 32, &o->groups);
    rc = rc ? rc : get_long(o, O_PER_GROUP, 1, GP_LG_MAX_PROMPTS, 16, &o->per_group);
    rc = rc ? rc : get_long(o, O_PREFIX_LEN, 1, GP_LG_MAX_LEN, 2048, &o->prefix_len);
    rc = rc ? rc : get_long(o, O_QUESTION_LEN, 1, GP_LG_MAX_LEN, 256, &o->question_len);
    rc = rc ? rc : get_long(o, O_PREFIX_OUT_LEN, 1, GP_LG_MAX_LEN, 128, &o->prefix_out_len);
    rc = rc ? rc : get_long(o, O_MAX_CONCURRENCY, 1, GP_LG_MAX_PROMPTS, 0, &o->max_concurrency);
    rc = rc ? rc : get_double(o, O_RANGE_RATIO, 0.0, 1.0, "[0, 1)", false, 0.0, &o->range_ratio);
    rc = rc ? rc : get_double(o, O_RATE, 0.0, INFINITY, "(0, inf)", true, INFINITY, &o->rate);
    rc = rc ? rc : get_double(o, O_BURSTINESS, 0.0, 1e6, "(0, 1e6]", false, 1.0, &o->burstiness);
    rc = rc ? rc : get_double(o, O_READY_TIMEOUT, 0.0, 86400.0, "[0, 86400]", false, 0.0, &o->ready_timeout);
    rc = rc ? rc : get_double(o, O_REQUEST_TIMEOUT, 0.0, 1e6, "(0, 1e6]", false, 21600.0,
                              &o->request_timeout);
    if (!rc && o->val[O_SEED] && gp_parse_u64(o->val[O_SEED], "--seed", &o->seed) != GP_OK)
        rc = bad();
    o->n_pcts = 1;
    o->pcts[0] = 99.0;
    if (!rc && o->val[O_PERCENTILES] && gp_lg_pcts_parse(o->val[O_PERCENTILES], o->pcts, &o->n_pcts) != GP_OK)
        rc = bad();
    if (!rc && o->val[O_GOODPUT])
        rc = add_slos(&o->slo, o->val[O_GOODPUT]);
    if (!rc && o->val[O_RESULT_JSON] && gp_check_out_file(o->val[O_RESULT_JSON], "--result-json") != GP_OK)
        rc = bad();
    if (!rc && o->val[O_ENDPOINT] && o->val[O_ENDPOINT][0] != '/') {
        fprintf(stderr, PROG ": --endpoint '%s' must be a path starting with '/': /v1/completions\n",
                o->val[O_ENDPOINT]);
        rc = 2;
    }
    return rc;
}

/* The flags into o; 0, the usage exit 2, or -1 after --help. */
static int parse_args(int argc, char **argv, bench_opts *o)
{
    memset(o, 0, sizeof *o);
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":h", OPTS, NULL)) != -1) {
        if (c == O_HELP || c == 'h') {
            usage(stdout);
            return -1;
        }
        if (c == ':') {
            fprintf(stderr, PROG ": %s needs a value\n", argv[optind - 1]);
            return 2;
        }
        if (c == '?') {
            fprintf(stderr, PROG ": unknown option '%s'; see greenpipe bench-serve --help\n", argv[optind - 1]);
            return 2;
        }
        if (o->val[c] && c != O_GOODPUT) {
            fprintf(stderr, PROG ": --%s given more than once\n", gp_opt_name(OPTS, c));
            return 2;
        }
        if (c == O_GOODPUT && o->val[c]) {
            if (add_slos(&o->slo, optarg))
                return 2;
            continue;
        }
        o->val[c] = optarg;
    }
    /* vLLM's form: --goodput ttft:500 tpot:50 leaves the later SLOs as operands. */
    for (int i = optind; i < argc; i++) {
        if (!o->val[O_GOODPUT] || !strchr(argv[i], ':')) {
            fprintf(stderr, PROG ": unexpected argument '%s'; see greenpipe bench-serve --help\n", argv[i]);
            return 2;
        }
        if (add_slos(&o->slo, argv[i]))
            return 2;
    }
    o->ds = o->val[O_DATASET_PATH] ? DS_JSONL : DS_RANDOM;
    if (o->val[O_DATASET_NAME]) {
        int k = 0;
        while (k < 3 && strcmp(o->val[O_DATASET_NAME], DS_NAMES[k]))
            k++;
        if (k == 3) {
            fprintf(stderr, PROG ": --dataset-name '%s' is not a dataset; allowed: random, shared-prefix, jsonl\n",
                    o->val[O_DATASET_NAME]);
            return 2;
        }
        o->ds = (ds_kind)k;
    }
    int rc = check_dataset_flags(o);
    return rc ? rc : parse_numbers(o);
}

static gp_status make_dataset(const bench_opts *o, int vocab, gp_lg_dataset **d)
{
    if (o->ds == DS_RANDOM) {
        gp_lg_random_params p = {(int)o->num_prompts, (int)o->in_len, (int)o->out_len, o->range_ratio, vocab, o->seed};
        return gp_lg_dataset_random(&p, d);
    }
    if (o->ds == DS_SHARED_PREFIX) {
        gp_lg_shared_prefix_params p = {(int)o->groups,       (int)o->per_group,      (int)o->prefix_len,
                                        (int)o->question_len, (int)o->prefix_out_len, vocab,
                                        o->seed};
        return gp_lg_dataset_shared_prefix(&p, d);
    }
    return gp_lg_dataset_jsonl(o->val[O_DATASET_PATH], (int)o->num_prompts, d);
}

/* Requests the server would refuse for their length, refused here first. */
static int check_lengths(const gp_lg_dataset *d, int max_model_len)
{
    for (int i = 0; max_model_len > 0 && i < gp_lg_dataset_size(d); i++) {
        gp_lg_prompt q = gp_lg_dataset_get(d, i);
        if (q.text || (long)q.n_ids + q.max_tokens <= max_model_len)
            continue;
        fprintf(stderr,
                PROG ": request %d: %d prompt tokens + max_tokens %d exceed the server's max_model_len %d; allowed: "
                     "prompt + output lengths of at most %d\n",
                i, q.n_ids, q.max_tokens, max_model_len, max_model_len);
        return 2;
    }
    return 0;
}

static char *join_args(int argc, char **argv)
{
    size_t n = 1;
    for (int i = 0; i < argc; i++)
        n += strlen(argv[i]) + 1;
    char *s = malloc(n), *at = s;
    for (int i = 0; s && i < argc; i++)
        at += sprintf(at, i ? " %s" : "%s", argv[i]);
    return s;
}

static int report(const bench_opts *o, const gp_lg_run_info *info, const gp_lg_outcome *out, int n, double dur)
{
    gp_lg_metrics m;
    if (gp_lg_metrics_compute(out, n, dur, &o->slo, o->pcts, o->n_pcts, &m) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 1;
    }
    gp_lg_report_print(stdout, info, &m);
    fflush(stdout);
    if (o->val[O_RESULT_JSON] && gp_lg_report_json(o->val[O_RESULT_JSON], info, &m, out, n) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 1;
    }
    /* The first failure's reason; every one is in --result-json's "errors". */
    for (int i = 0; i < n; i++)
        if (!out[i].ok) {
            fprintf(stderr, PROG ": %d of %d requests failed; the first, request %d: %s\n", m.failed, n, i,
                    out[i].error);
            break;
        }
    if (m.completed == 0) {
        fprintf(stderr, PROG ": no request was served\n");
        return 1;
    }
    return 0;
}

/* A number as Python prints a float, as vLLM's lines show them: "1.0", "0.5", "inf". */
static const char *py_float(char *buf, size_t n, double v)
{
    snprintf(buf, n, "%.17g", v);
    if (!isfinite(v))
        return buf;
    /* the shortest text that reads back as v, as Python's repr; positional
     * where Python writes it so */
    bool positional = fabs(v) >= 1e-4 && fabs(v) < 1e16;
    for (int prec = positional ? 0 : 1; prec <= 17; prec++) {
        snprintf(buf, n, positional ? "%.*f" : "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    if (!strpbrk(buf, ".e"))
        snprintf(buf + strlen(buf), n - strlen(buf), ".0");
    return buf;
}

/* args: the command line as given, for the JSON. */
static int bench(const bench_opts *o, char *args)
{
    const char *base = o->val[O_BASE_URL] ? o->val[O_BASE_URL] : "http://127.0.0.1:8000";
    gp_lg_server_info si;
    if (gp_lg_server_probe(base, o->val[O_API_KEY], o->ready_timeout, &si) != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return 1;
    }
    int vocab = o->vocab ? (int)o->vocab : si.vocab ? si.vocab : DEFAULT_VOCAB;
    if (o->ds != DS_JSONL && !o->vocab && !si.vocab)
        fprintf(stderr, PROG ": the server names no vocab_size and --vocab is not given: token ids in [0, %d)\n",
                DEFAULT_VOCAB);
    gp_lg_dataset *d;
    gp_status st = make_dataset(o, vocab, &d);
    if (st != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        return gp_input_exit_code(st);
    }
    int rc = check_lengths(d, si.max_model_len);
    gp_lg_params p = gp_lg_default_params();
    p.base_url = base;
    if (o->val[O_ENDPOINT])
        p.endpoint = o->val[O_ENDPOINT];
    p.model = o->val[O_MODEL] ? o->val[O_MODEL] : si.model;
    p.api_key = o->val[O_API_KEY];
    p.request_rate = o->rate;
    p.burstiness = o->burstiness;
    p.max_concurrency = (int)o->max_concurrency;
    p.seed = o->seed;
    p.request_timeout_s = o->request_timeout;
    gp_cli_progress cp;
    gp_cli_progress_init(&cp, stderr, PROG);
    p.progress = gp_cli_progress_cb(&cp);
    gp_lg_run_info info = {p.base_url, p.endpoint, p.model, DS_NAMES[o->ds], gp_lg_dataset_size(d), p.request_rate,
                           p.burstiness, p.max_concurrency, p.seed, o->slo, args};
    if (!rc) {
        char rate[32], burst[32];
        printf("Traffic request rate: %s\n", py_float(rate, sizeof rate, p.request_rate));
        printf("Burstiness factor: %s (%s)\n", py_float(burst, sizeof burst, p.burstiness),
               p.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
        if (p.max_concurrency)
            printf("Maximum request concurrency: %d\n", p.max_concurrency);
        else
            printf("Maximum request concurrency: None\n");
        fflush(stdout);
        gp_lg_outcome *out = NULL;
        double dur = 0.0;
        gp_status st = gp_lg_run(&p, d, &out, &dur);
        if (st != GP_OK) {
            fprintf(stderr, PROG ": %s\n", gp_last_error());
            rc = st == GP_ERR_INVALID_ARG ? 2 : 1;
        } else {
            rc = report(o, &info, out, gp_lg_dataset_size(d), dur);
        }
        gp_lg_outcomes_free(out, gp_lg_dataset_size(d));
    }
    gp_lg_dataset_destroy(d);
    return rc;
}

int gp_cmd_bench_serve(int argc, char **argv)
{
    bench_opts o;
    char *args = join_args(argc, argv); /* before getopt_long reorders argv */
    if (!args) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        free(args);
        return rc < 0 ? 0 : rc;
    }
    if (gp_lg_init() != GP_OK) {
        fprintf(stderr, PROG ": %s\n", gp_last_error());
        free(args);
        return 1;
    }
    rc = bench(&o, args);
    gp_lg_cleanup();
    free(args);
    return rc;
}
