/* GET /metrics: the serving core's statistics in Prometheus' text format
 * (version 0.0.4), names and labels as vLLM's with the prefix "greenpipe:"
 * so that dashboards made for vLLM need only the prefix changed. */
#include "api_impl.h"
#include "gp_http.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct metrics_out {
    FILE *f;
    const char *label; /* model_name="..." escaped */
} metrics_out;

static void head(metrics_out *m, const char *name, const char *type, const char *help)
{
    fprintf(m->f, "# HELP greenpipe:%s %s\n# TYPE greenpipe:%s %s\n", name, help, name, type);
}

static void num(FILE *f, double x)
{
    if (isnan(x))
        fputs("NaN", f);
    else if (isinf(x))
        fputs(x > 0 ? "+Inf" : "-Inf", f);
    else
        fprintf(f, "%.15g", x);
}

static void gauge(metrics_out *m, const char *name, const char *help, double x)
{
    head(m, name, "gauge", help);
    fprintf(m->f, "greenpipe:%s{%s} ", name, m->label);
    num(m->f, x);
    fputc('\n', m->f);
}

static void counter(metrics_out *m, const char *name, const char *help, long long x)
{
    head(m, name, "counter", help);
    fprintf(m->f, "greenpipe:%s{%s} %lld\n", name, m->label, x);
}

static void counter_s(metrics_out *m, const char *name, const char *help, double x)
{
    head(m, name, "counter", help);
    fprintf(m->f, "greenpipe:%s{%s} ", name, m->label);
    num(m->f, x);
    fputc('\n', m->f);
}

/* Buckets up to the first bound that is not above the one before (the
 * first above 0): the core may fill fewer than GP_SERVE_HIST_BUCKETS. */
static void histogram(metrics_out *m, const char *name, const char *help, const gp_serve_hist *h)
{
    head(m, name, "histogram", help);
    for (int i = 0; i < GP_SERVE_HIST_BUCKETS && h->le[i] > (i ? h->le[i - 1] : 0.0); i++) {
        fprintf(m->f, "greenpipe:%s_bucket{%s,le=\"", name, m->label);
        num(m->f, h->le[i]);
        fprintf(m->f, "\"} %lld\n", h->bucket[i]);
    }
    fprintf(m->f, "greenpipe:%s_bucket{%s,le=\"+Inf\"} %lld\n", name, m->label, h->count);
    fprintf(m->f, "greenpipe:%s_sum{%s} ", name, m->label);
    num(m->f, h->sum);
    fprintf(m->f, "\ngreenpipe:%s_count{%s} %lld\n", name, m->label, h->count);
}

/* One counter per lane account (the labels lane and partition are the
 * executor's own words: no escaping needed); nothing without lanes. */
static void lane_counters(metrics_out *m, const gp_serve_stats *st)
{
    static const char *const names[3] = {"lane_busy_seconds_total", "lane_batches_total",
                                         "lane_selected_seconds_total"};
    static const char *const helps[3] = {
        "Device seconds of each lane's batches, by what it ran and on which SMs (decode SMs:prefill SMs, or all).",
        "Batches each lane ran.", "Wall seconds a partition pair was the selected one (all: 0)."};
    if (st->n_lanes == 0)
        return;
    for (int k = 0; k < 3; k++) {
        head(m, names[k], "counter", helps[k]);
        for (int i = 0; i < st->n_lanes; i++) {
            const gp_lane_busy *l = &st->lanes[i];
            fprintf(m->f, "greenpipe:%s{%s,lane=\"%s\",partition=\"%s\"} ", names[k], m->label, l->lane,
                    l->partition);
            num(m->f, k == 0 ? l->busy_s : k == 1 ? (double)l->batches : l->selected_s);
            fputc('\n', m->f);
        }
    }
}

/* model_name="..." with the label value escaped as the format requires
 * (backslash, double quote, newline) and made valid UTF-8. */
static char *model_label(const char *model)
{
    size_t n;
    char *fixed = gp_api_utf8_fix(model ? model : "", model ? strlen(model) : 0, &n);
    if (!fixed)
        return NULL;
    char *out = malloc(2 * n + sizeof "model_name=\"\"");
    if (out) {
        char *o = out + sprintf(out, "model_name=\"");
        for (size_t i = 0; i < n; i++) {
            if (fixed[i] == '\\' || fixed[i] == '"' || fixed[i] == '\n')
                *o++ = '\\';
            *o++ = fixed[i] == '\n' ? 'n' : fixed[i];
        }
        strcpy(o, "\"");
    }
    free(fixed);
    return out;
}

char *gp_api_metrics_text(const gp_serve_stats *st, const char *model)
{
    /* vLLM's finished_reason values; the core's cancelled is vLLM's abort. */
    static const char *const reasons[] = {
        [GP_SERVE_STOP] = "stop", [GP_SERVE_LENGTH] = "length", [GP_SERVE_CANCELLED] = "abort",
        [GP_SERVE_ERROR] = "error"};
    char *text = NULL;
    size_t size = 0;
    char *label = model_label(model);
    FILE *f = label ? open_memstream(&text, &size) : NULL;
    if (!f) {
        free(label);
        return NULL;
    }
    metrics_out m = {f, label};
    gauge(&m, "num_requests_running", "Requests in the running batch.", st->running);
    gauge(&m, "num_requests_waiting", "Requests waiting to be scheduled.", st->waiting);
    gauge(&m, "kv_cache_usage_perc", "KV-cache usage: the fraction of KV blocks in use (1 = 100%).",
          st->kv_blocks_total > 0 ? (double)st->kv_blocks_used / st->kv_blocks_total : 0.0);
    gauge(&m, "kv_cache_blocks_used", "KV blocks in use.", st->kv_blocks_used);
    gauge(&m, "kv_cache_blocks_total", "KV blocks the scheduler admits against.", st->kv_blocks_total);
    gauge(&m, "kv_cache_blocks_cached", "KV blocks held by the prefix cache alone.", st->kv_blocks_cached);
    counter(&m, "prompt_tokens_total", "Prompt tokens processed.", st->prompt_tokens);
    counter(&m, "generation_tokens_total", "Tokens generated.", st->generation_tokens);
    counter(&m, "num_preemptions_total", "Requests preempted for want of KV blocks.", st->preemptions);
    counter(&m, "prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            st->prefix_query_tokens);
    counter(&m, "prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", st->prefix_hit_tokens);
    counter(&m, "prefix_cache_host_hits_total", "Prompt tokens beyond the device hits loaded from the host store.",
            st->prefix_host_hit_tokens);
    counter(&m, "kv_host_offloaded_blocks_total", "Evicted prefix-cache blocks kept in the host store.",
            st->host_offloaded_blocks);
    counter(&m, "kv_host_offload_failures_total", "Evicted prefix-cache blocks the host store could not keep.",
            st->host_offload_failures);
    head(&m, "request_success_total", "counter", "Requests finished, by finish reason.");
    for (int r = GP_SERVE_STOP; r <= GP_SERVE_ERROR; r++)
        fprintf(f, "greenpipe:request_success_total{%s,finished_reason=\"%s\"} %lld\n", label, reasons[r],
                st->requests_finished[r]);
    counter(&m, "engine_steps_total", "Engine steps run.", st->steps);
    counter_s(&m, "engine_step_seconds_total", "Seconds the engine spent in steps.", st->step_seconds);
    counter_s(&m, "engine_host_seconds_total", "Seconds of scheduling and delivery around the steps.",
              st->host_seconds);
    double up = st->uptime_seconds;
    gauge(&m, "avg_prompt_throughput_toks_per_s", "Prompt tokens per second since the start.",
          up > 0 ? st->prompt_tokens / up : 0.0);
    gauge(&m, "avg_generation_throughput_toks_per_s", "Generated tokens per second since the start.",
          up > 0 ? st->generation_tokens / up : 0.0);
    histogram(&m, "time_to_first_token_seconds", "Time to first token in seconds.", &st->ttft);
    histogram(&m, "time_per_output_token_seconds", "Time per output token after the first, in seconds.",
              &st->tpot);
    histogram(&m, "e2e_request_latency_seconds", "End-to-end request latency in seconds.", &st->e2e);
    lane_counters(&m, st);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    free(label);
    if (!ok) {
        free(text);
        return NULL;
    }
    return text;
}
