/* greenpipe's serving load generator (greenpipe bench-serve), after vLLM's
 * benchmark_serving: datasets of prompts, Poisson or gamma arrivals,
 * streaming clients on libcurl's multi interface, and the latency
 * statistics and report vLLM prints. */
#ifndef GP_LOADGEN_H
#define GP_LOADGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ statistics */

/* numpy's percentile with its default (linear) interpolation: p in [0, 100]
 * over sorted[0..n), n >= 1. */
double gp_lg_percentile(const double *sorted, size_t n, double p);

#define GP_LG_MAX_PCTS 16
/* Mean, median, standard deviation (numpy's, ddof 0) and the requested
 * percentiles of a set of values; all 0 for an empty set, as vLLM's
 * np.mean(x or 0). */
typedef struct gp_lg_dist {
    double mean, median, std;
    double pct[GP_LG_MAX_PCTS]; /* [n_pcts] in the order asked */
} gp_lg_dist;
/* v[0..n) is left untouched. GP_ERR_NO_MEMORY only. */
gp_status gp_lg_dist_compute(const double *v, size_t n, const double *pcts, int n_pcts, gp_lg_dist *out);

/* --percentiles "50,90,99": each in (0, 100], at most GP_LG_MAX_PCTS. */
gp_status gp_lg_pcts_parse(const char *text, double *pcts, int *n_pcts);

/* Service-level objectives of goodput, in milliseconds (vLLM's --goodput
 * ttft:MS tpot:MS e2el:MS); a request is good when it meets every one given. */
typedef struct gp_lg_slo {
    bool has_ttft, has_tpot, has_e2el;
    double ttft_ms, tpot_ms, e2el_ms;
} gp_lg_slo;
/* One item "ttft:500" added to *slo: the metric ttft, tpot or e2el, a
 * finite number of milliseconds > 0, each metric once. */
gp_status gp_lg_slo_add(gp_lg_slo *slo, const char *item);
bool gp_lg_slo_any(const gp_lg_slo *slo);

/* One request's outcome. Times in seconds. */
#define GP_LG_ERROR_LEN 256
typedef struct gp_lg_outcome {
    bool ok;
    char error[GP_LG_ERROR_LEN]; /* why it failed: "HTTP 500: ...", "connection: ...", "no data: [DONE]" */
    int prompt_tokens;           /* usage.prompt_tokens, else the prompt's id count (0 for unknown text) */
    int output_tokens;           /* usage.completion_tokens of the stream, else its token chunks */
    double sent;                 /* when it was sent, since the benchmark began */
    double ttft;                 /* first token chunk - sent */
    double e2el;                 /* last token chunk - sent */
    double *itl;                 /* [n_itl] gaps between token chunks (malloc'd) */
    int n_itl;
} gp_lg_outcome;
void gp_lg_outcomes_free(gp_lg_outcome *o, int n);

/* vLLM's calculate_metrics over successful requests; times in ms. */
typedef struct gp_lg_metrics {
    int completed, failed;
    long long total_input, total_output;
    double duration_s;
    double request_throughput, request_goodput, output_throughput, total_token_throughput;
    int n_pcts;
    double pcts[GP_LG_MAX_PCTS];
    gp_lg_dist ttft, tpot, itl, e2el; /* ms; tpot over requests of more than one output token */
    bool has_goodput;
    int good;                         /* requests meeting every SLO */
} gp_lg_metrics;
/* TPOT of a request = (e2el - ttft) / (output tokens - 1); for goodput a
 * request of one token has TPOT 0, as vLLM's. duration_s > 0. */
gp_status gp_lg_metrics_compute(const gp_lg_outcome *o, int n, double duration_s, const gp_lg_slo *slo,
                                const double *pcts, int n_pcts, gp_lg_metrics *out);

/* ------------------------------------------------------------ arrivals */

/* Send times t[0..n) in seconds from the start, t[0] = 0: gaps drawn from
 * a gamma distribution of shape burstiness and mean 1 / rate (burstiness 1
 * is a Poisson process; below 1 burstier, above 1 more even), as vLLM's.
 * rate INFINITY: every t is 0. Seeded: the same seed gives the same times. */
gp_status gp_lg_arrivals(double rate, double burstiness, uint64_t seed, int n, double *t);

/* ------------------------------------------------------------ datasets */

typedef struct gp_lg_dataset gp_lg_dataset; /* opaque */

/* Bounds of every dataset: prompts, and tokens of a prompt or an answer. */
#define GP_LG_MAX_PROMPTS (1 << 20)
#define GP_LG_MAX_LEN (1 << 24)

/* One prompt: ids (n_ids > 0) or text (NULL when ids). */
typedef struct gp_lg_prompt {
    const int32_t *ids;
    int n_ids;
    const char *text;
    int max_tokens;
    int group; /* shared-prefix: its group; -1 otherwise */
} gp_lg_prompt;

/* random: lengths uniform over the integers in [floor(len x (1 - r)),
 * floor(len x (1 + r))] (at least 1), ids uniform in [0, vocab). */
typedef struct gp_lg_random_params {
    int num_prompts, input_len, output_len;
    double range_ratio; /* [0, 1) */
    int vocab;
    uint64_t seed;
} gp_lg_random_params;
gp_status gp_lg_dataset_random(const gp_lg_random_params *p, gp_lg_dataset **out);

/* shared-prefix (SGLang's generated-shared-prefix): groups x per_group
 * requests; each group's prompts start with the same prefix_len random ids,
 * then question_len ids of their own; all in a seeded shuffled order. */
typedef struct gp_lg_shared_prefix_params {
    int groups, per_group, prefix_len, question_len, output_len;
    int vocab;
    uint64_t seed;
} gp_lg_shared_prefix_params;
gp_status gp_lg_dataset_shared_prefix(const gp_lg_shared_prefix_params *p, gp_lg_dataset **out);

/* A JSONL file, one {"prompt": "text" or [ids], "max_tokens": n} a line
 * (blank lines skipped; other fields ignored); limit > 0 takes the first
 * limit prompts (fewer in the file is an error), 0 all. A bad line is
 * GP_ERR_FORMAT naming the file, the line number and what is wrong. */
gp_status gp_lg_dataset_jsonl(const char *path, int limit, gp_lg_dataset **out);

int gp_lg_dataset_size(const gp_lg_dataset *d);
gp_lg_prompt gp_lg_dataset_get(const gp_lg_dataset *d, int i);
void gp_lg_dataset_destroy(gp_lg_dataset *d);

/* ------------------------------------------------------------ server-sent events */

/* An incremental parser of a text/event-stream: bytes go in as they arrive,
 * split anywhere; each complete event's data (its "data:" lines joined by
 * '\n', one leading space of each dropped) goes to fn. Comments, other
 * fields and events without data are skipped; LF, CRLF and CR end lines. */
typedef struct gp_lg_sse gp_lg_sse; /* opaque */
typedef void (*gp_lg_sse_fn)(void *ctx, const char *data, size_t len);
/* max_event: bytes of one event at most (a runaway stream is an error). */
gp_status gp_lg_sse_create(gp_lg_sse_fn fn, void *ctx, size_t max_event, gp_lg_sse **out);
/* GP_ERR_FORMAT when an event grows past max_event; GP_ERR_NO_MEMORY. */
gp_status gp_lg_sse_feed(gp_lg_sse *s, const char *buf, size_t len);
void gp_lg_sse_destroy(gp_lg_sse *s);

/* ------------------------------------------------------------ the server */

/* The HTTP client library's process-wide setup, once before any other
 * network call of this header (its first call is not thread-safe), and its
 * teardown after the last. */
gp_status gp_lg_init(void);
void gp_lg_cleanup(void);

/* What bench-serve learns before it sends anything: GET /health must
 * answer 200 (waiting up to ready_timeout_s while it answers 503 or cannot
 * be reached), then GET /v1/models' first entry. */
typedef struct gp_lg_server_info {
    char model[256];   /* data[0].id */
    int max_model_len; /* data[0].max_model_len; 0 when not given */
    int vocab;         /* data[0].vocab_size; 0 when not given */
} gp_lg_server_info;
/* GP_ERR_IO naming the URL and what went wrong (no connection, a status
 * other than 200, a body that is not a model list). */
gp_status gp_lg_server_probe(const char *base_url, const char *api_key, double ready_timeout_s,
                             gp_lg_server_info *out);

/* ------------------------------------------------------------ the run */

typedef struct gp_lg_params {
    const char *base_url;     /* default "http://127.0.0.1:8000" */
    const char *endpoint;     /* default "/v1/completions" */
    const char *model;        /* required: the "model" of every request */
    const char *api_key;      /* NULL: none; else "Authorization: Bearer KEY" */
    double request_rate;      /* requests/s; default INFINITY (all at once) */
    double burstiness;        /* default 1 (Poisson) */
    int max_concurrency;      /* requests in flight at most; 0 (default): no limit */
    uint64_t seed;            /* arrivals' seed; default 0 */
    double request_timeout_s; /* one request's whole time at most; default 21600 (vLLM's 6 h) */
    size_t max_event;         /* one SSE event's bytes at most; default 1 MiB */
    gp_progress_cb progress;  /* "sending requests": requests finished of all */
} gp_lg_params;
gp_lg_params gp_lg_default_params(void);

/* Send every prompt of d as a streamed completion ("stream": true,
 * "ignore_eos": true, "temperature": 0, "max_tokens" the prompt's), from
 * this thread over one curl multi handle; time each chunk on
 * CLOCK_MONOTONIC. *out[gp_lg_dataset_size(d)] (free with
 * gp_lg_outcomes_free), *duration_s from the first send to the last end.
 * A request's failure is its outcome's, not the call's. Each request in
 * flight holds a connection: the open-file limit is raised to fit them,
 * GP_ERR_INVALID_ARG naming the largest max_concurrency that fits when its
 * hard limit is too low. */
gp_status gp_lg_run(const gp_lg_params *p, const gp_lg_dataset *d, gp_lg_outcome **out, double *duration_s);

/* ------------------------------------------------------------ report */

/* What the run was, echoed in the report and the JSON. */
typedef struct gp_lg_run_info {
    const char *base_url, *endpoint, *model, *dataset;
    int num_prompts;
    double request_rate, burstiness;
    int max_concurrency; /* 0: none */
    uint64_t seed;
    gp_lg_slo slo;
    const char *args;    /* the command line as given, for the JSON */
} gp_lg_run_info;

/* The lines of vLLM's "Serving Benchmark Result", in its format. */
void gp_lg_report_print(FILE *f, const gp_lg_run_info *info, const gp_lg_metrics *m);
/* The same figures, the per-request arrays (input_lens, output_lens,
 * ttfts, e2els, itls in seconds, errors) and the run's settings as JSON;
 * GP_ERR_IO naming path. */
gp_status gp_lg_report_json(const char *path, const gp_lg_run_info *info, const gp_lg_metrics *m,
                            const gp_lg_outcome *o, int n);

#ifdef __cplusplus
}
#endif
#endif
