/* --autotune's output: the tuning profile, a JSON file holding every measured
 * row, the best configuration per workload and the fitted cold-start rule
 * with its own documentation, so a later run (--tuning) starts from it. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cs_impl.h"
#include "cs_tuning_impl.h"

/* The rule's documentation, written into the file beside its numbers. */
static const char RULE_DOC[] =
    "Cold-start rule, fitted to the best measured configuration of each workload (rows with the rebalancer off). "
    "Features of a workload (B sequences, C cached tokens each) on a model, from the performance model of docs/ARCHITECTURE.md "
    "§5 with bf16 weights, per layer: t_A = GEMM(QKV+O weights, B tokens) + KV pass (B*C tokens of K and V), "
    "t_F = GEMM(gate/up/down weights, B tokens), each costing max(bytes / bandwidth_bytes_per_s, flops / "
    "gemm_flops_per_s); attn_frac = t_A / (t_A + t_F); headroom = (layers * (t_A + t_F) + LM head) / floor of the "
    "step with M = 2 (weights read twice): the most a split could gain. "
    "Choice: seq unless split is true and headroom >= threshold (threshold: the measured winner's headroom that "
    "misclassifies the fewest workloads, the largest on a tie, midway to the nearest losing workload below it but not "
    "below 1 unless a winner is; never below the smallest winner, where no data say splits pay). Otherwise attention share = k0 + k1 * "
    "attn_frac (least squares over the winning workloads when two or more differ in attn_frac by >= 0.05, slope "
    "held to [0, 2]; else slope 1 through their mean), rounded to the nearest valid split of the device (remainder "
    "SMs on F); M and ring depth those of the winning workload nearest in (log2 B, log2 (1 + C)). A workload whose "
    "best row is seq (no split beat the sequential engine) is a losing point.";

/* Attention share of a row's split: obtained when partitioned. */
static double row_share(const gp_cs_row *r, int sm_count)
{
    const gp_split_info *s = &r->split;
    if (s->partitioned && s->a_got > 0 && s->f_got > 0)
        return (double)s->a_got / (s->a_got + s->f_got);
    int f = s->f_req > 0 ? s->f_req : sm_count - s->a_req;
    return s->a_req > 0 && f > 0 ? (double)s->a_req / (s->a_req + f) : 0;
}

static bool usable(const gp_cs_row *r)
{
    return r->ok && r->rebalance == GP_REBALANCE_OFF && isfinite(r->ms_median) && r->ms_median > 0;
}

/* One workload of the rows: its seq row and best split row (NULL: none). */
typedef struct wl {
    int B, C;
    const char *label;
    const gp_cs_row *seq, *split;
} wl;

static int collect(const gp_cs_row *rows, int n, wl **out)
{
    wl *w = calloc((size_t)(n > 0 ? n : 1), sizeof *w);
    if (!w)
        return -1;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const gp_cs_row *r = &rows[i];
        int j = 0;
        while (j < k && !(w[j].B == r->B && w[j].C == r->C))
            j++;
        if (j == k)
            w[k++] = (wl){.B = r->B, .C = r->C, .label = r->workload};
        if (!usable(r))
            continue;
        const gp_cs_row **slot = r->seq ? &w[j].seq : &w[j].split;
        if (!*slot || r->ms_median < (*slot)->ms_median)
            *slot = r;
    }
    *out = w;
    return k;
}

/* The best configuration of a workload: a split only when it beats seq. */
static const gp_cs_row *best_row(const wl *w)
{
    if (w->split && (!w->seq || w->split->ms_median < w->seq->ms_median))
        return w->split;
    return w->seq;
}

static json_t *best_json(cs_jb *b, const wl *w, int sm_count)
{
    json_t *o = json_object();
    const gp_cs_row *r = best_row(w);
    cs_put_str(b, o, "workload", w->label);
    cs_put_int(b, o, "B", w->B);
    cs_put_int(b, o, "C", w->C);
    cs_put_bool(b, o, "ok", r != NULL);
    if (!r) {
        cs_put_str(b, o, "error", "no configuration of this workload ran");
        return o;
    }
    cs_put_bool(b, o, "seq", r->seq);
    cs_put_int(b, o, "attn_sms", r->seq ? 0 : r->split.a_req);
    cs_put_int(b, o, "ffn_sms", r->seq ? 0 : r->split.f_req);
    cs_put_int(b, o, "attn_got", r->seq ? 0 : r->split.a_got);
    cs_put_int(b, o, "ffn_got", r->seq ? 0 : r->split.f_got);
    cs_put_real(b, o, "attn_share", r->seq ? 0 : row_share(r, sm_count));
    cs_put_int(b, o, "M", r->seq ? 1 : r->M);
    cs_put_int(b, o, "depth", r->depth);
    cs_put_str(b, o, "placement", gp_placement_name(r->placement));
    cs_put_int(b, o, "gemm_tune", r->gemm_tune);
    cs_put_real(b, o, "ms", r->ms_median);
    cs_put_real(b, o, "tokens_per_s", r->tokens_per_s);
    cs_put_real(b, o, "seq_ms", w->seq ? w->seq->ms_median : NAN);
    cs_put_real(b, o, "speedup_vs_seq", w->seq ? w->seq->ms_median / r->ms_median : NAN);
    return o;
}

static json_t *rule_json(cs_jb *b, const cs_rule *ru)
{
    json_t *o = json_object();
    cs_put_str(b, o, "doc", RULE_DOC);
    cs_put_bool(b, o, "split", ru->split);
    cs_put(b, o, "threshold", ru->split ? json_real(ru->threshold) : json_null());
    json_t *sh = json_object();
    cs_put_real(b, sh, "k0", ru->k0);
    cs_put_real(b, sh, "k1", ru->k1);
    cs_put(b, o, "share", sh);
    cs_put_real(b, o, "bandwidth_bytes_per_s", GP_HBM_BYTES_PER_S);
    cs_put_real(b, o, "gemm_flops_per_s", GP_GEMM_FLOPS_PER_S);
    cs_put_int(b, o, "training_errors", ru->training_errors);
    json_t *pts = json_array();
    for (int i = 0; i < ru->n_points; i++) {
        const cs_point *p = &ru->points[i];
        json_t *q = json_object();
        cs_put_str(b, q, "workload", p->workload);
        cs_put_int(b, q, "B", p->B);
        cs_put_int(b, q, "C", p->C);
        cs_put_bool(b, q, "has_seq", p->has_seq);
        cs_put_bool(b, q, "won", p->won);
        cs_put_real(b, q, "headroom", p->headroom);
        cs_put_real(b, q, "attn_frac", p->attn_frac);
        cs_put_real(b, q, "best_share", p->won ? p->best_share : NAN);
        cs_put_int(b, q, "best_attn_sms", p->best_attn_sms);
        cs_put_int(b, q, "M", p->M);
        cs_put_int(b, q, "depth", p->depth);
        cs_put_str(b, q, "placement", gp_placement_name(p->placement));
        cs_put_int(b, q, "gemm_tune", p->gemm_tune);
        cs_put_real(b, q, "speedup", p->speedup > 0 ? p->speedup : NAN);
        cs_append(b, pts, q);
    }
    cs_put(b, o, "points", pts);
    return o;
}

static json_t *model_json(cs_jb *b, const gp_config *c)
{
    json_t *o = json_object();
    cs_put_str(b, o, "name", c->name);
    cs_put_int(b, o, "n_layers", c->n_layers);
    cs_put_int(b, o, "hidden", c->hidden);
    cs_put_int(b, o, "n_heads", c->n_heads);
    cs_put_int(b, o, "n_kv_heads", c->n_kv_heads);
    cs_put_int(b, o, "head_dim", c->head_dim);
    cs_put_int(b, o, "ffn", c->ffn);
    cs_put_int(b, o, "vocab", c->vocab);
    return o;
}

static gp_status write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        GP_FAIL(GP_ERR_IO, "tuning profile %s: cannot open for writing: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n && fputc('\n', f) != EOF;
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok)
        GP_FAIL(GP_ERR_IO, "tuning profile %s: write failed: %s", path, strerror(e));
    return GP_OK;
}

gp_status gp_cs_tuning_write(const char *path, const gp_cs_meta *m, const gp_config *cfg, const gp_cs_row *rows,
                             int n)
{
    if (!path || !path[0])
        GP_FAIL(GP_ERR_INVALID_ARG, "tuning profile: no output path");
    if (!m || !cfg)
        GP_FAIL(GP_ERR_INVALID_ARG, "tuning profile %s: %s is NULL", path, m ? "the model config" : "the metadata");
    if (n < 0 || (n > 0 && !rows))
        GP_FAIL(GP_ERR_INVALID_ARG, "tuning profile %s: %d rows (array %s)", path, n, rows ? "set" : "NULL");
    if (cfg->n_layers < 1 || cfg->hidden < 1 || cfg->n_heads < 1 || cfg->head_dim < 1 || cfg->ffn < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "tuning profile %s: model config %s has %d layers, hidden %d, %d heads of %d, "
                "FFN %d: every one must be positive", path, cfg->name, cfg->n_layers, cfg->hidden, cfg->n_heads,
                cfg->head_dim, cfg->ffn);
    wl *w = NULL;
    int nw = collect(rows, n, &w);
    cs_point *pts = calloc((size_t)(nw > 0 ? nw : 1), sizeof *pts);
    if (nw < 0 || !pts) {
        free(w);
        free(pts);
        GP_FAIL(GP_ERR_NO_MEMORY, "tuning profile %s: out of memory", path);
    }
    int np = 0;
    for (int i = 0; i < nw; i++) {
        const gp_cs_row *best = best_row(&w[i]);
        if (!best)
            continue; /* nothing ran: not a point */
        cs_point *p = &pts[np++];
        cs_features f;
        cs_tuning_features(cfg, w[i].B, w[i].C, &f);
        snprintf(p->workload, sizeof p->workload, "%s", w[i].label ? w[i].label : "");
        p->B = w[i].B;
        p->C = w[i].C;
        p->has_seq = w[i].seq != NULL;
        p->won = p->has_seq && !best->seq;
        p->headroom = f.headroom;
        p->attn_frac = f.attn_frac;
        p->best_share = best->seq ? 0 : row_share(best, m->sm_count);
        p->best_attn_sms = best->seq ? 0 : best->split.a_req;
        p->M = best->seq ? 1 : best->M;
        p->depth = best->depth;
        p->placement = best->placement;
        p->gemm_tune = best->gemm_tune;
        p->speedup = w[i].seq ? w[i].seq->ms_median / best->ms_median : 0;
    }
    cs_rule rule;
    cs_rule_fit(pts, np, &rule);

    cs_jb b = {false};
    json_t *root = json_object();
    cs_put_str(&b, root, "format", CS_TUNING_FORMAT);
    cs_put_int(&b, root, "version", CS_TUNING_VERSION);
    cs_put(&b, root, "meta", gp_cs_meta_json(m));
    cs_put(&b, root, "model", model_json(&b, cfg));
    json_t *ra = json_array();
    for (int i = 0; i < n; i++)
        cs_append(&b, ra, gp_cs_row_json(&rows[i])); /* the report's row record */
    cs_put(&b, root, "rows", ra);
    json_t *ba = json_array();
    for (int i = 0; i < nw; i++)
        cs_append(&b, ba, best_json(&b, &w[i], m->sm_count));
    cs_put(&b, root, "best", ba);
    cs_put(&b, root, "rule", rule_json(&b, &rule));
    free(w);
    free(pts);
    char *text = b.failed ? NULL : json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (!text)
        GP_FAIL(GP_ERR_NO_MEMORY, "tuning profile %s: out of memory building the JSON", path);
    gp_status st = write_text(path, text);
    free(text);
    return st;
}
