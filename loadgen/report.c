/* bench-serve's report: vLLM's "Serving Benchmark Result" lines, character
 * for character, and its result JSON (jansson) with the run's settings. */
#include "gp_loadgen.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

/* Python's "{s:{c}^{n}}".format: the odd padding byte goes right. */
static void header(FILE *f, const char *s, char c)
{
    int pad = 50 - (int)strlen(s), left = pad / 2;
    for (int i = 0; i < left; i++)
        fputc(c, f);
    fputs(s, f);
    for (int i = 0; i < pad - left; i++)
        fputc(c, f);
    fputc('\n', f);
}

/* "{:<40} {:<10.2f}" and "{:<40} {:<10}" */
static void line_f(FILE *f, const char *label, double v) { fprintf(f, "%-40s %-10.2f\n", label, v); }
static void line_i(FILE *f, const char *label, long long v) { fprintf(f, "%-40s %-10lld\n", label, v); }

/* vLLM's p_word: 99 -> "99", 99.9 -> "99.9" */
static void pct_word(char *buf, size_t n, double p)
{
    if (p == floor(p))
        snprintf(buf, n, "%d", (int)p);
    else
        snprintf(buf, n, "%g", p);
}

typedef struct metric_desc {
    const char *key, *name, *title;
} metric_desc;
static const metric_desc METRICS[4] = {
    {"ttft", "TTFT", "Time to First Token"},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)"},
    {"itl", "ITL", "Inter-token Latency"},
    {"e2el", "E2EL", "End-to-end Latency"},
};
static const gp_lg_dist *dist_of(const gp_lg_metrics *m, int i)
{
    const gp_lg_dist *d[4] = {&m->ttft, &m->tpot, &m->itl, &m->e2el};
    return d[i];
}

void gp_lg_report_print(FILE *f, const gp_lg_run_info *info, const gp_lg_metrics *m)
{
    header(f, " Serving Benchmark Result ", '=');
    line_i(f, "Successful requests:", m->completed);
    line_i(f, "Failed requests:", m->failed);
    if (info->max_concurrency > 0)
        line_i(f, "Maximum request concurrency:", info->max_concurrency);
    if (isfinite(info->request_rate))
        line_f(f, "Request rate configured (RPS):", info->request_rate);
    line_f(f, "Benchmark duration (s):", m->duration_s);
    line_i(f, "Total input tokens:", m->total_input);
    line_i(f, "Total generated tokens:", m->total_output);
    line_f(f, "Request throughput (req/s):", m->request_throughput);
    if (m->has_goodput)
        line_f(f, "Request goodput (req/s):", m->request_goodput);
    line_f(f, "Output token throughput (tok/s):", m->output_throughput);
    line_f(f, "Total Token throughput (tok/s):", m->total_token_throughput);
    for (int k = 0; k < 4; k++) {
        const gp_lg_dist *d = dist_of(m, k);
        char label[64], w[32];
        header(f, METRICS[k].title, '-');
        snprintf(label, sizeof label, "Mean %s (ms):", METRICS[k].name);
        line_f(f, label, d->mean);
        snprintf(label, sizeof label, "Median %s (ms):", METRICS[k].name);
        line_f(f, label, d->median);
        for (int i = 0; i < m->n_pcts; i++) {
            pct_word(w, sizeof w, m->pcts[i]);
            snprintf(label, sizeof label, "P%s %s (ms):", w, METRICS[k].name);
            line_f(f, label, d->pct[i]);
        }
    }
    header(f, "", '=');
}

/* JSON has no infinity: vLLM writes the rate "inf". */
static json_t *rate_json(double r) { return isfinite(r) ? json_real(r) : json_string("inf"); }

static int set(json_t *o, const char *k, json_t *v) { return json_object_set_new(o, k, v); }

static int put_arrays(json_t *j, const gp_lg_outcome *o, int n)
{
    json_t *in = json_array(), *out = json_array(), *ttft = json_array(), *e2el = json_array(), *itls = json_array(),
           *sent = json_array(), *errs = json_array();
    int bad = set(j, "input_lens", in) | set(j, "output_lens", out) | set(j, "ttfts", ttft) | set(j, "e2els", e2el) |
              set(j, "itls", itls) | set(j, "send_times", sent) | set(j, "errors", errs);
    for (int i = 0; !bad && i < n; i++) {
        json_t *itl = json_array();
        for (int k = 0; o[i].ok && k < o[i].n_itl; k++)
            bad |= json_array_append_new(itl, json_real(o[i].itl[k]));
        bad |= json_array_append_new(in, json_integer(o[i].prompt_tokens)) |
               json_array_append_new(out, json_integer(o[i].ok ? o[i].output_tokens : 0)) |
               json_array_append_new(ttft, json_real(o[i].ok ? o[i].ttft : 0.0)) |
               json_array_append_new(e2el, json_real(o[i].ok ? o[i].e2el : 0.0)) | json_array_append_new(itls, itl) |
               json_array_append_new(sent, json_real(o[i].sent)) |
               json_array_append_new(errs, json_string(o[i].ok ? "" : o[i].error));
    }
    return bad;
}

static int put_metrics(json_t *j, const gp_lg_metrics *m)
{
    int bad = 0;
    for (int k = 0; k < 4; k++) {
        const gp_lg_dist *d = dist_of(m, k);
        char key[64], w[32];
        snprintf(key, sizeof key, "mean_%s_ms", METRICS[k].key);
        bad |= set(j, key, json_real(d->mean));
        snprintf(key, sizeof key, "median_%s_ms", METRICS[k].key);
        bad |= set(j, key, json_real(d->median));
        snprintf(key, sizeof key, "std_%s_ms", METRICS[k].key);
        bad |= set(j, key, json_real(d->std));
        for (int i = 0; i < m->n_pcts; i++) {
            pct_word(w, sizeof w, m->pcts[i]);
            snprintf(key, sizeof key, "p%s_%s_ms", w, METRICS[k].key);
            bad |= set(j, key, json_real(d->pct[i]));
        }
    }
    return bad;
}

static json_t *slo_json(const gp_lg_slo *s)
{
    if (!gp_lg_slo_any(s))
        return json_null();
    json_t *o = json_object();
    if (s->has_ttft)
        set(o, "ttft", json_real(s->ttft_ms));
    if (s->has_tpot)
        set(o, "tpot", json_real(s->tpot_ms));
    if (s->has_e2el)
        set(o, "e2el", json_real(s->e2el_ms));
    return o;
}

gp_status gp_lg_report_json(const char *path, const gp_lg_run_info *info, const gp_lg_metrics *m,
                            const gp_lg_outcome *o, int n)
{
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    json_t *j = json_object(), *pcts = json_array();
    for (int i = 0; i < m->n_pcts; i++)
        json_array_append_new(pcts, json_real(m->pcts[i]));
    int bad = !j || set(j, "date", json_string(date)) | set(j, "backend", json_string("openai")) |
                        set(j, "base_url", json_string(info->base_url)) |
                        set(j, "endpoint", json_string(info->endpoint)) | set(j, "model_id", json_string(info->model)) |
                        set(j, "dataset", json_string(info->dataset)) | set(j, "num_prompts", json_integer(n)) |
                        set(j, "request_rate", rate_json(info->request_rate)) |
                        set(j, "burstiness", json_real(info->burstiness)) |
                        set(j, "max_concurrency",
                            info->max_concurrency > 0 ? json_integer(info->max_concurrency) : json_null()) |
                        set(j, "seed", json_integer((json_int_t)info->seed)) | set(j, "goodput", slo_json(&info->slo)) |
                        set(j, "percentiles", pcts) | set(j, "args", json_string(info->args ? info->args : "")) |
                        set(j, "duration", json_real(m->duration_s)) | set(j, "completed", json_integer(m->completed)) |
                        set(j, "failed", json_integer(m->failed)) |
                        set(j, "total_input_tokens", json_integer(m->total_input)) |
                        set(j, "total_output_tokens", json_integer(m->total_output)) |
                        set(j, "request_throughput", json_real(m->request_throughput)) |
                        set(j, "request_goodput", m->has_goodput ? json_real(m->request_goodput) : json_null()) |
                        set(j, "good_requests", m->has_goodput ? json_integer(m->good) : json_null()) |
                        set(j, "output_throughput", json_real(m->output_throughput)) |
                        set(j, "total_token_throughput", json_real(m->total_token_throughput));
    bad = bad || put_metrics(j, m) || put_arrays(j, o, n);
    if (bad) {
        json_decref(j);
        GP_FAIL(GP_ERR_NO_MEMORY, "--result-json %s: out of memory building the JSON", path);
    }
    int rc = json_dump_file(j, path, JSON_INDENT(2));
    json_decref(j);
    if (rc)
        GP_FAIL(GP_ERR_IO, "--result-json %s: cannot write the file", path);
    return GP_OK;
}
