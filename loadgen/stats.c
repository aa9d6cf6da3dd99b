/* The statistics of bench-serve as vLLM computes them: numpy's mean,
 * median, standard deviation and linearly interpolated percentiles; TPOT,
 * throughputs and goodput under service-level objectives. */
#include "gp_loadgen.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

double gp_lg_percentile(const double *sorted, size_t n, double p)
{
    double rank = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(rank);
    if (lo >= n - 1)
        return sorted[n - 1];
    double frac = rank - (double)lo;
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}

gp_status gp_lg_dist_compute(const double *v, size_t n, const double *pcts, int n_pcts, gp_lg_dist *out)
{
    memset(out, 0, sizeof *out);
    if (n == 0)
        return GP_OK;
    double *s = malloc(n * sizeof *s);
    if (!s)
        GP_FAIL(GP_ERR_NO_MEMORY, "statistics of %zu values: out of memory", n);
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, gp_cmp_double);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += s[i];
    out->mean = sum / (double)n;
    double ss = 0.0;
    for (size_t i = 0; i < n; i++)
        ss += (s[i] - out->mean) * (s[i] - out->mean);
    out->std = sqrt(ss / (double)n);
    out->median = gp_lg_percentile(s, n, 50.0);
    for (int i = 0; i < n_pcts; i++)
        out->pct[i] = gp_lg_percentile(s, n, pcts[i]);
    free(s);
    return GP_OK;
}

gp_status gp_lg_pcts_parse(const char *text, double *pcts, int *n_pcts)
{
    char *copy = strdup(text);
    if (!copy)
        GP_FAIL(GP_ERR_NO_MEMORY, "--percentiles: out of memory");
    int n = 0;
    gp_status st = GP_OK;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        errno = 0;
        double p = strtod(tok, &end);
        if (end == tok || *end || errno || !(p > 0.0 && p <= 100.0)) {
            gp_set_error("--percentiles: '%s' is not a percentile; allowed: numbers in (0, 100], "
                         "comma-separated: 50,90,99",
                         tok);
            st = GP_ERR_INVALID_ARG;
            break;
        }
        if (n == GP_LG_MAX_PCTS) {
            gp_set_error("--percentiles '%s': more than %d percentiles", text, GP_LG_MAX_PCTS);
            st = GP_ERR_INVALID_ARG;
            break;
        }
        pcts[n++] = p;
    }
    free(copy);
    if (st == GP_OK && n == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "--percentiles '%s': no percentile given; allowed: numbers in (0, 100], "
                                    "comma-separated: 50,90,99", text);
    *n_pcts = n;
    return st;
}

gp_status gp_lg_slo_add(gp_lg_slo *slo, const char *item)
{
    static const char allowed[] = "allowed: ttft:MS, tpot:MS or e2el:MS, each once, MS a number of "
                                  "milliseconds > 0";
    const char *colon = strchr(item, ':');
    if (!colon)
        GP_FAIL(GP_ERR_INVALID_ARG, "--goodput '%s' is not METRIC:MS; %s", item, allowed);
    size_t klen = (size_t)(colon - item);
    bool *has;
    double *ms;
    if (klen == 4 && !strncmp(item, "ttft", 4)) {
        has = &slo->has_ttft;
        ms = &slo->ttft_ms;
    } else if (klen == 4 && !strncmp(item, "tpot", 4)) {
        has = &slo->has_tpot;
        ms = &slo->tpot_ms;
    } else if (klen == 4 && !strncmp(item, "e2el", 4)) {
        has = &slo->has_e2el;
        ms = &slo->e2el_ms;
    } else {
        GP_FAIL(GP_ERR_INVALID_ARG, "--goodput '%s': unknown metric '%.*s'; %s", item, (int)klen, item, allowed);
    }
    char *end;
    errno = 0;
    double v = strtod(colon + 1, &end);
    if (end == colon + 1 || *end || errno || !isfinite(v) || v <= 0.0)
        GP_FAIL(GP_ERR_INVALID_ARG, "--goodput '%s': '%s' is not a number of milliseconds > 0; %s", item,
                colon + 1, allowed);
    if (*has)
        GP_FAIL(GP_ERR_INVALID_ARG, "--goodput '%s': %.*s given twice; %s", item, (int)klen, item, allowed);
    *has = true;
    *ms = v;
    return GP_OK;
}

bool gp_lg_slo_any(const gp_lg_slo *slo) { return slo->has_ttft || slo->has_tpot || slo->has_e2el; }

static double tpot_of(const gp_lg_outcome *o)
{
    return o->output_tokens > 1 ? (o->e2el - o->ttft) / (double)(o->output_tokens - 1) : 0.0;
}

static bool is_good(const gp_lg_outcome *o, const gp_lg_slo *slo)
{
    if (slo->has_ttft && o->ttft * 1e3 > slo->ttft_ms)
        return false;
    if (slo->has_tpot && tpot_of(o) * 1e3 > slo->tpot_ms)
        return false;
    if (slo->has_e2el && o->e2el * 1e3 > slo->e2el_ms)
        return false;
    return true;
}

gp_status gp_lg_metrics_compute(const gp_lg_outcome *o, int n, double duration_s, const gp_lg_slo *slo,
                                const double *pcts, int n_pcts, gp_lg_metrics *out)
{
    if (!(duration_s > 0.0))
        GP_FAIL(GP_ERR_INVALID_ARG, "benchmark duration %g s; allowed: > 0", duration_s);
    if (n_pcts < 0 || n_pcts > GP_LG_MAX_PCTS)
        GP_FAIL(GP_ERR_INVALID_ARG, "%d percentiles; allowed: 0 to %d", n_pcts, GP_LG_MAX_PCTS);
    memset(out, 0, sizeof *out);
    out->duration_s = duration_s;
    out->n_pcts = n_pcts;
    memcpy(out->pcts, pcts, (size_t)n_pcts * sizeof *pcts);
    out->has_goodput = slo && gp_lg_slo_any(slo);
    size_t n_itl = 0;
    for (int i = 0; i < n; i++)
        if (o[i].ok)
            n_itl += (size_t)o[i].n_itl;
    size_t cap = (size_t)(n > 0 ? n : 1);
    double *ttft = malloc(cap * sizeof *ttft), *tpot = malloc(cap * sizeof *tpot), *e2el = malloc(cap * sizeof *e2el);
    double *itl = malloc((n_itl ? n_itl : 1) * sizeof *itl);
    gp_status st = GP_OK;
    if (!ttft || !tpot || !e2el || !itl) {
        gp_set_error("statistics of %d requests: out of memory", n);
        st = GP_ERR_NO_MEMORY;
        goto done;
    }
    size_t k = 0, n_tpot = 0;
    n_itl = 0;
    for (int i = 0; i < n; i++) {
        if (!o[i].ok) {
            out->failed++;
            continue;
        }
        out->total_input += o[i].prompt_tokens;
        out->total_output += o[i].output_tokens;
        ttft[k] = o[i].ttft * 1e3;
        e2el[k] = o[i].e2el * 1e3;
        k++;
        if (o[i].output_tokens > 1)
            tpot[n_tpot++] = tpot_of(&o[i]) * 1e3;
        for (int j = 0; j < o[i].n_itl; j++)
            itl[n_itl++] = o[i].itl[j] * 1e3;
        if (out->has_goodput && is_good(&o[i], slo))
            out->good++;
    }
    out->completed = (int)k;
    out->request_throughput = (double)k / duration_s;
    out->request_goodput = (double)out->good / duration_s;
    out->output_throughput = (double)out->total_output / duration_s;
    out->total_token_throughput = (double)(out->total_input + out->total_output) / duration_s;
    st = gp_lg_dist_compute(ttft, k, pcts, n_pcts, &out->ttft);
    if (st == GP_OK)
        st = gp_lg_dist_compute(tpot, n_tpot, pcts, n_pcts, &out->tpot);
    if (st == GP_OK)
        st = gp_lg_dist_compute(itl, n_itl, pcts, n_pcts, &out->itl);
    if (st == GP_OK)
        st = gp_lg_dist_compute(e2el, k, pcts, n_pcts, &out->e2el);
done:
    free(ttft);
    free(tpot);
    free(e2el);
    free(itl);
    return st;
}

void gp_lg_outcomes_free(gp_lg_outcome *o, int n)
{
    if (!o)
        return;
    for (int i = 0; i < n; i++)
        free(o[i].itl);
    free(o);
}
