/* Calibration of activation sparsity on the CPU reference: per layer and
 * projection, the magnitude threshold below which a share S of the inputs
 * fall, from log-spaced histograms, then the shares it drops and the FFN
 * neurons' activity measured on the same tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_reference.h"
#include "gp_stage.h"
#include "sparse_impl.h"

#define GP_CALIB_MAX_BATCH 256

/* ------------------------------------------------------------ histogram */

/* Precision: bin j spans a factor 10^(1/512) = 1.0045. The threshold lies in
 * the bin that holds the exact S-quantile q of |x|, so t/q is within that
 * factor (for q in [1e-10, 1e6); below, t is at most the second edge,
 * above, at most 1e6), and the share it drops differs from S by at most the
 * share of inputs in that bin, plus the rare value that log10's rounding
 * puts in the neighbouring bin. Activations rounded to bf16 (2^-8 apart,
 * relatively) or fp16 (2^-11) are coarser than or about as coarse as a bin,
 * so a bin holds at most a value or two and the error is their share: the
 * ties at the quantile, which no threshold could split anyway. */

int gp_sparse_hist_bin(float a)
{
    double pos = (log10((double)a) - GP_SPARSE_HIST_LO_LOG10) * GP_SPARSE_HIST_PER_DECADE;
    if (!(pos >= 0.0))
        return 0;
    if (pos >= GP_SPARSE_HIST_BINS)
        return GP_SPARSE_HIST_BINS - 1;
    return (int)pos;
}

double gp_sparse_hist_edge(int j)
{
    return pow(10.0, GP_SPARSE_HIST_LO_LOG10 + (double)j / GP_SPARSE_HIST_PER_DECADE);
}

void gp_sparse_hist_add(gp_sparse_hist *h, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!isfinite(a)) {
            h->nonfinite++;
            continue;
        }
        h->n++;
        if (a == 0.0f)
            h->zero++;
        else
            h->bins[gp_sparse_hist_bin(a)]++;
    }
}

float gp_sparse_hist_threshold(const gp_sparse_hist *h, double S)
{
    double k = S * (double)h->n; /* values to drop */
    if (h->n == 0 || k <= (double)h->zero)
        return 0.0f;
    double cum = (double)h->zero;
    for (int j = 0; j < GP_SPARSE_HIST_BINS; j++) {
        double c = (double)h->bins[j];
        if (c > 0.0 && cum + c >= k) {
            /* log-linear inside the bin: magnitudes spread about evenly in
             * log over a 0.45% bin */
            double f = (k - cum) / c;
            return (float)pow(10.0, GP_SPARSE_HIST_LO_LOG10 + ((double)j + f) / GP_SPARSE_HIST_PER_DECADE);
        }
        cum += c;
    }
    return (float)gp_sparse_hist_edge(GP_SPARSE_HIST_BINS); /* S < 1 never gets here */
}

/* ------------------------------------------------------------ calibration */

gp_sparsity_calib_params gp_sparsity_calib_default_params(void)
{
    return (gp_sparsity_calib_params){.target = 0.5, .act_dtype = GP_DTYPE_BF16, .batch = 8};
}

/* What the capture hook gathers. The prefills call it from the calling
 * thread only, so it needs no lock. */
typedef struct gp_calib {
    int n_layers, ffn;
    int pass;                /* 1: histograms; 2: measure with the thresholds */
    gp_sparse_hist *hist;    /* [n_layers][4] */
    const float *t;          /* [n_layers][4] pass 2's thresholds */
    uint64_t *dropped;       /* [n_layers][4] inputs with |x| <= t */
    uint64_t *seen;          /* [n_layers][4] inputs */
    uint64_t *active;        /* [n_layers][ffn] tokens whose down input i has |x| > t */
    gp_progress_run progress; /* tokens of both passes */
    uint64_t tokens_done;    /* counted at the last layer's down projection: a token is then through */
} gp_calib;

static void gp_calib_capture(void *ctx, int layer, int proj, int rows, int width, const float *x)
{
    gp_calib *c = ctx;
    size_t lp = (size_t)layer * GP_SPARSE_PROJ_COUNT + (size_t)proj, n = (size_t)rows * (size_t)width;
    if (layer == c->n_layers - 1 && proj == GP_SPARSE_DOWN) {
        c->tokens_done += (uint64_t)rows;
        gp_progress_update(&c->progress, c->tokens_done);
    }
    if (c->pass == 1) {
        gp_sparse_hist_add(&c->hist[lp], x, n);
        return;
    }
    const float t = c->t[lp];
    uint64_t dropped = 0;
    for (size_t i = 0; i < n; i++)
        dropped += !(fabsf(x[i]) > t); /* the masking rule of gp_sparse.h */
    c->dropped[lp] += dropped;
    c->seen[lp] += n;
    if (proj == GP_SPARSE_DOWN) {
        uint64_t *act = c->active + (size_t)layer * (size_t)c->ffn;
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < width; i++)
                act[i] += fabsf(x[(size_t)r * (size_t)width + (size_t)i]) > t;
    }
}

static gp_status gp_calib_check(const gp_host_weights *w, const gp_sparsity_calib_params *p, long *tokens,
                                int *longest)
{
    if (!w || !p)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparsity_calibrate: weights and params are required");
    const gp_config *c = &w->cfg;
    if (!(p->target >= 0.0 && p->target < 1.0))
        GP_FAIL(GP_ERR_INVALID_ARG, "sparsity target S = %g: allowed [0, 1)", p->target);
    if (p->n_seqs < 1 || !p->lens || !p->ids)
        GP_FAIL(GP_ERR_INVALID_ARG, "calibration: %d sequences%s; allowed at least 1, with their lengths and ids",
                p->n_seqs, p->n_seqs >= 1 ? " without lengths or ids" : "");
    if (p->act_dtype != GP_DTYPE_F32 && !gp_dtype_is_half(p->act_dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "calibration: activation dtype %s; allowed F32, BF16 or F16",
                gp_dtype_name(p->act_dtype));
    if (p->batch < 1 || p->batch > GP_CALIB_MAX_BATCH)
        GP_FAIL(GP_ERR_INVALID_ARG, "calibration: batch %d; allowed 1..%d", p->batch, GP_CALIB_MAX_BATCH);
    *tokens = 0;
    *longest = 0;
    for (int s = 0; s < p->n_seqs; s++) {
        int n = p->lens[s];
        if (n < 1 || n > c->max_context)
            GP_FAIL(GP_ERR_INVALID_ARG, "calibration sequence %d has %d tokens; allowed 1..%d (the model's "
                    "max_context)", s, n, c->max_context);
        for (int i = 0; i < n; i++) {
            int32_t id = p->ids[*tokens + i];
            if (id < 0 || id >= c->vocab)
                GP_FAIL(GP_ERR_INVALID_ARG, "calibration sequence %d: token %d is %d, outside the vocabulary; "
                        "allowed 0..%d", s, i, (int)id, c->vocab - 1);
        }
        *tokens += n;
        if (n > *longest)
            *longest = n;
    }
    return GP_OK;
}

/* Prefills every sequence, batch at a time, with the hook in c. */
static gp_status gp_calib_pass(gp_cpu_model *m, const gp_sparsity_calib_params *p, gp_prefill_seq *seqs, int batch)
{
    long at = 0;
    for (int s0 = 0; s0 < p->n_seqs; s0 += batch) {
        int g = p->n_seqs - s0 < batch ? p->n_seqs - s0 : batch;
        for (int i = 0; i < g; i++) {
            seqs[i] = (gp_prefill_seq){.seq = i, .n = p->lens[s0 + i], .tokens = p->ids + at};
            at += p->lens[s0 + i];
        }
        gp_status st = gp_cpu_prefill_batch(m, g, seqs, NULL, NULL);
        for (int i = 0; i < g; i++)
            gp_cpu_reset_seq(m, i);
        GP_TRY(st);
    }
    return GP_OK;
}

/* The second pass's cost buys the exact shares and frequencies: one pass
 * could only give them from per-neuron histograms (n_layers x ffn x 8193
 * counters, 15 GB for an 8B model). */
gp_status gp_sparsity_calibrate(const gp_host_weights *w, const gp_sparsity_calib_params *p, gp_sparsity *out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sparsity_calibrate: out is required");
    long tokens;
    int longest;
    GP_TRY(gp_calib_check(w, p, &tokens, &longest));
    const gp_config *cfg = &w->cfg;
    const int L = cfg->n_layers, batch = p->n_seqs < p->batch ? p->n_seqs : p->batch;
    const size_t nlp = (size_t)L * GP_SPARSE_PROJ_COUNT;

    gp_sparsity s;
    GP_TRY(gp_sparsity_thresholds_zero(cfg, &s));
    s.target = p->target;
    s.tokens = tokens;
    snprintf(s.source, sizeof s.source, "%s", p->source ? p->source : "");
    if (p->identity)
        s.identity = *p->identity;
    gp_calib c = {.n_layers = L, .ffn = cfg->ffn, .pass = 1, .t = s.thresholds};
    c.hist = calloc(nlp, sizeof *c.hist);
    c.dropped = calloc(nlp, sizeof *c.dropped);
    c.seen = calloc(nlp, sizeof *c.seen);
    c.active = calloc((size_t)L * (size_t)cfg->ffn, sizeof *c.active);
    s.zeros = malloc(nlp * sizeof *s.zeros);
    s.freq = malloc((size_t)L * (size_t)cfg->ffn * sizeof *s.freq);
    gp_prefill_seq *seqs = malloc((size_t)batch * sizeof *seqs);
    gp_cpu_model *m = NULL;
    gp_status st = GP_OK;
    if (!c.hist || !c.dropped || !c.seen || !c.active || !s.zeros || !s.freq || !seqs) {
        gp_set_error("calibration of %d layers: out of memory for its histograms (%zu bytes)", L,
                     nlp * sizeof *c.hist);
        st = GP_ERR_NO_MEMORY;
        goto done;
    }
    if ((st = gp_cpu_model_create(w, batch, longest, 16, &m)) != GP_OK ||
        (st = gp_cpu_model_set_threads(m, p->n_threads)) != GP_OK)
        goto done;
    gp_cpu_model_set_act_dtype(m, p->act_dtype);
    gp_cpu_model_set_capture(m, gp_calib_capture, &c);

    gp_progress_begin(&c.progress, &p->progress, "calibrating (2 passes over the tokens)", "tokens",
                      2 * (uint64_t)tokens);
    if ((st = gp_calib_pass(m, p, seqs, batch)) != GP_OK)
        goto done;
    for (size_t lp = 0; lp < nlp; lp++) {
        const gp_sparse_hist *h = &c.hist[lp];
        if (h->nonfinite) {
            gp_set_error("calibration: layer %zu %s: %llu of its %llu inputs are not finite (NaN or inf); the "
                         "model's activations overflow, so no threshold can be set", lp / GP_SPARSE_PROJ_COUNT,
                         gp_sparse_proj_name((gp_sparse_proj)(lp % GP_SPARSE_PROJ_COUNT)),
                         (unsigned long long)h->nonfinite, (unsigned long long)(h->n + h->nonfinite));
            st = GP_ERR_UNSUPPORTED;
            goto done;
        }
        s.thresholds[lp] = gp_sparse_hist_threshold(h, p->target);
    }

    c.pass = 2;
    if ((st = gp_calib_pass(m, p, seqs, batch)) != GP_OK)
        goto done;
    for (size_t lp = 0; lp < nlp; lp++)
        s.zeros[lp] = c.seen[lp] ? (float)((double)c.dropped[lp] / (double)c.seen[lp]) : 0.0f;
    for (size_t i = 0; i < (size_t)L * (size_t)cfg->ffn; i++)
        s.freq[i] = (float)((double)c.active[i] / (double)tokens);

done:
    gp_progress_end(&c.progress, c.tokens_done);
    gp_cpu_model_destroy(m);
    free(c.hist), free(c.dropped), free(c.seen), free(c.active), free(seqs);
    if (st != GP_OK) {
        gp_sparsity_free(&s);
        return st;
    }
    *out = s;
    return GP_OK;
}
