/* Loading HF reference data and comparing a backend with it (see hf_case.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hf_case.h"

void hf_case_free(hf_case *c)
{
    if (c->prompts)
        for (int s = 0; s < c->n_seqs; s++)
            free(c->prompts[s]);
    free(c->prompts), free(c->prompt_len), free(c->tokens), free(c->logits);
    memset(c, 0, sizeof *c);
}

json_t *hf_json_load(const char *path)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root)
        fail_msg("%s: line %d: %s", path, err.line, err.text);
    return root;
}

json_t *hf_json_array(const char *path, json_t *obj, const char *key, int n)
{
    json_t *a = json_object_get(obj, key);
    if (!json_is_array(a))
        fail_msg("%s: '%s' is missing or not an array", path, key);
    if (n >= 0 && (int)json_array_size(a) != n)
        fail_msg("%s: '%s' has %zu elements, expected %d", path, key, json_array_size(a), n);
    return a;
}

void hf_json_ints(const char *path, json_t *arr, int n, int limit, int32_t *dst, const char *what)
{
    if (!json_is_array(arr) || (int)json_array_size(arr) != n)
        fail_msg("%s: %s must be an array of %d integers", path, what, n);
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= limit)
            fail_msg("%s: %s[%d] is not an integer in [0, %d)", path, what, i, limit);
        dst[i] = (int32_t)json_integer_value(v);
    }
}

void hf_json_floats(const char *path, json_t *arr, int n, float *dst, const char *what)
{
    if (!json_is_array(arr) || (int)json_array_size(arr) != n)
        fail_msg("%s: %s has %zu values, expected %d (the model's vocab)", path, what,
                 json_is_array(arr) ? json_array_size(arr) : 0, n);
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_number(v))
            fail_msg("%s: %s[%d] is not a number", path, what, i);
        dst[i] = (float)json_number_value(v);
    }
}

/* Reads expected.json, checking every shape; fails the test with the reason. */
void hf_case_load(const char *path, int vocab, hf_case *c)
{
    json_t *root = hf_json_load(path);
    json_t *steps = json_object_get(root, "steps");
    if (!json_is_integer(steps))
        fail_msg("%s: needs an integer 'steps'", path);
    json_t *prompts = hf_json_array(path, root, "prompts", -1);
    memset(c, 0, sizeof *c);
    c->n_seqs = (int)json_array_size(prompts);
    c->steps = (int)json_integer_value(steps);
    c->vocab = vocab;
    if (c->n_seqs < 1 || c->steps < 1)
        fail_msg("%s: %d prompts and %d steps: both must be >= 1", path, c->n_seqs, c->steps);
    json_t *tokens = hf_json_array(path, root, "tokens", c->n_seqs);
    json_t *logits = hf_json_array(path, root, "logits", c->n_seqs);
    c->prompts = calloc(c->n_seqs, sizeof *c->prompts);
    c->prompt_len = calloc(c->n_seqs, sizeof *c->prompt_len);
    c->tokens = calloc((size_t)c->n_seqs * c->steps, sizeof *c->tokens);
    c->logits = calloc((size_t)c->n_seqs * c->steps * vocab, sizeof *c->logits);
    assert_true(c->prompts && c->prompt_len && c->tokens && c->logits);
    char what[64];
    for (int s = 0; s < c->n_seqs; s++) {
        json_t *p = json_array_get(prompts, s), *lg = json_array_get(logits, s);
        if (!json_is_array(p) || json_array_size(p) < 1 || !json_is_array(lg) ||
            (int)json_array_size(lg) != c->steps)
            fail_msg("%s: sequence %d: prompt must be non-empty, tokens and logits %d long", path,
                     s, c->steps);
        c->prompt_len[s] = (int)json_array_size(p);
        c->prompts[s] = calloc(c->prompt_len[s], sizeof **c->prompts);
        assert_non_null(c->prompts[s]);
        snprintf(what, sizeof what, "prompts[%d]", s);
        hf_json_ints(path, p, c->prompt_len[s], vocab, c->prompts[s], what);
        snprintf(what, sizeof what, "tokens[%d]", s);
        hf_json_ints(path, json_array_get(tokens, s), c->steps, vocab, c->tokens + (size_t)s * c->steps, what);
        for (int t = 0; t < c->steps; t++) {
            snprintf(what, sizeof what, "logits[%d][%d]", s, t);
            hf_json_floats(path, json_array_get(lg, t), vocab, c->logits + ((size_t)s * c->steps + t) * vocab,
                           what);
        }
    }
    json_decref(root);
}

double hf_compare(const char *name, const char *ref_label, int s, int t, const float *ours,
                      const float *ref, int V, double tol)
{
    double e = gp_test_rel_err(ours, ref, V), mr = 0.0;
    for (int i = 0; i < V; i++)
        mr = fmax(mr, fabs((double)ref[i]));
    if (!(e <= tol)) {
        fprintf(stderr, "%s seq %d step %d: max|diff|/max|%s| = %.3g > %.0e; first mismatches:\n",
                name, s, t, ref_label, e, tol);
        for (int i = 0, shown = 0; i < V && shown < 8; i++)
            if (!(fabs((double)ours[i] - ref[i]) <= tol * mr)) {
                fprintf(stderr, "  logit %d: ours %.9g %s %.9g\n", i, (double)ours[i], ref_label,
                        (double)ref[i]);
                shown++;
            }
    }
    return e;
}

double hf_greedy_margin(const float *x, int V)
{
    double a = -INFINITY, b = -INFINITY, mr = 0.0;
    for (int i = 0; i < V; i++) {
        double v = x[i];
        mr = fmax(mr, fabs(v));
        if (v > a)
            b = a, a = v;
        else if (v > b)
            b = v;
    }
    return mr > 0.0 ? (a - b) / mr : 0.0;
}

static void check_argmax(const char *name, const char *ref_label, int s, int t, const float *ours,
                         const float *ref, int V, int32_t ref_tok, int *mismatches)
{
    int32_t a = gp_argmax(ours, V);
    if (a != ref_tok) {
        if (*mismatches < 8)
            fprintf(stderr, "%s seq %d step %d: greedy token %d (logit %.9g) but %s chose %d "
                    "(our logit %.9g, its %.9g; its own top-2 margin %.3g of max|logit|)\n", name, s,
                    t, a, (double)ours[a], ref_label, ref_tok, (double)ours[ref_tok],
                    (double)ref[ref_tok], hf_greedy_margin(ref, V));
        (*mismatches)++;
    }
}

void hf_backend_open(const hf_backend *be, const gp_host_weights *w, int n_seqs, int ctx, int block_size,
                     gp_backend **out)
{
    gp_backend_params p = gp_backend_default_params(be->kind);
    p.n_seqs = n_seqs;
    p.max_context = ctx;
    p.block_size = block_size;
    if (be->kind == GP_BACKEND_CUDA)
        p.dtype = be->dtype == GP_DTYPE_F32 ? GP_DTYPE_AUTO : be->dtype;
    else
        p.dtype = be->dtype;
    p.use_graphs = be->use_graphs;
    p.pipelined = be->pipelined;
    p.prefill_chunk = be->prefill_chunk;
    GP_CHECK_OK(gp_backend_open_weights(w, &p, out));
}

/* Runs be over the case (each prompt prefilled, then all sequences decoded as
 * one batch feeding HF's tokens, so one early disagreement does not cascade)
 * and returns its logits [n_seqs][steps][V]. */
static float *run_backend(const hf_backend *be, const gp_host_weights *w, const hf_case *c, int ctx)
{
    const int V = w->cfg.vocab;
    gp_backend *b;
    hf_backend_open(be, w, c->n_seqs, ctx, 4, &b); /* several blocks per sequence */
    gp_exec x = gp_backend_exec(b);
    gp_pipeline *pl = NULL;
    if (be->pipelined)
        GP_CHECK_OK(gp_pipeline_create(x, w->cfg.n_layers, NULL, &pl));
    float *all = malloc((size_t)c->n_seqs * c->steps * V * sizeof *all); /* [n_seqs][steps][V] */
    float *step = malloc((size_t)c->n_seqs * V * sizeof *step);          /* [n_seqs][V] */
    int *ids = malloc(c->n_seqs * sizeof *ids);
    int32_t *feed = malloc(c->n_seqs * sizeof *feed), *next = malloc(c->n_seqs * sizeof *next);
    assert_true(all && step && ids && feed && next);
    for (int s = 0; s < c->n_seqs; s++) {
        ids[s] = s;
        gp_prefill_seq ps = {s, c->prompt_len[s], c->prompts[s]};
        GP_CHECK_OK(x.session->prefill(x.ctx, 1, &ps, NULL, all + (size_t)s * c->steps * V, NULL));
    }
    for (int t = 1; t < c->steps; t++) {
        for (int s = 0; s < c->n_seqs; s++)
            feed[s] = c->tokens[(size_t)s * c->steps + t - 1];
        if (pl)
            GP_CHECK_OK(gp_pipeline_step(pl, c->n_seqs, ids, feed, next, step));
        else
            GP_CHECK_OK(x.session->sequential_step(x.ctx, c->n_seqs, ids, feed, next, step, NULL));
        for (int s = 0; s < c->n_seqs; s++)
            memcpy(all + ((size_t)s * c->steps + t) * V, step + (size_t)s * V, sizeof(float) * V);
    }
    gp_pipeline_destroy(pl);
    gp_backend_close(b);
    free(step), free(ids), free(feed), free(next);
    return all;
}

void hf_load_checkpoint(const char *name, gp_host_weights *w, char *dir, size_t dir_cap)
{
    snprintf(dir, dir_cap, "%s/%s", GP_TEST_DATA_DIR, name);
    gp_model_source src;
    GP_CHECK_OK(gp_model_source_resolve(dir, 0, &src));
    if (src.synthetic)
        fail_msg("%s resolved to a preset, not a checkpoint", dir);
    GP_CHECK_OK(gp_model_source_load_host(&src, w));
}

void hf_open(const char *name, const char *file, char *path, size_t path_cap, gp_host_weights *w, char *dir,
             size_t dir_cap)
{
    snprintf(path, path_cap, "%s/%s/%s", GP_TEST_DATA_DIR, name, file);
    if (access(path, R_OK) != 0)
        fail_msg("%s is missing: the HF reference data must hold every model of tests/hf/make_reference.py "
                 "(see tests/hf/README.md)", path);
    hf_load_checkpoint(name, w, dir, dir_cap);
}

void hf_check(const char *name, double tol, const hf_backend *be, const hf_backend *ref,
              bool exact_tokens)
{
    char dir[4096], path[4200];
    gp_host_weights w;
    hf_open(name, "expected.json", path, sizeof path, &w, dir, sizeof dir);
    const int V = w.cfg.vocab;

    hf_case c;
    hf_case_load(path, V, &c);
    int ctx = 0;
    for (int s = 0; s < c.n_seqs; s++)
        if (c.prompt_len[s] + c.steps - 1 > ctx)
            ctx = c.prompt_len[s] + c.steps - 1; /* the last token is never fed back */
    if (ctx > w.cfg.max_context)
        fail_msg("%s: prompts plus steps need %d positions, the model has %d", name, ctx,
                 w.cfg.max_context);

    float *ours = run_backend(be, &w, &c, ctx);
    float *theirs = ref ? run_backend(ref, &w, &c, ctx) : c.logits; /* [n_seqs][steps][V] */
    const char *ref_label = ref ? ref->label : "hf";
    double worst = 0.0;
    int bad = 0, mismatches = 0;
    for (int s = 0; s < c.n_seqs; s++)
        for (int t = 0; t < c.steps; t++) {
            size_t off = ((size_t)s * c.steps + t) * V;
            double e = hf_compare(name, ref_label, s, t, ours + off, theirs + off, V, tol);
            worst = fmax(worst, e);
            bad += !(e <= tol);
            int32_t tok = ref ? gp_argmax(theirs + off, V) : c.tokens[(size_t)s * c.steps + t];
            check_argmax(name, ref_label, s, t, ours + off, theirs + off, V, tok, &mismatches);
        }
    printf("%s (%s vs %s): %d sequences x %d steps, vocab %d: worst max|diff|/max|ref| = %.3g "
           "(tolerance %.0e), %d greedy mismatches%s\n", name, be->label, ref_label, c.n_seqs, c.steps, V,
           worst, tol, mismatches, exact_tokens ? "" : " (reported, not required)");
    gp_host_weights_free(&w);
    free(ours);
    if (ref)
        free(theirs);
    hf_case_free(&c);
    if (bad || (exact_tokens && mismatches))
        fail_msg("%s: %d logits vectors beyond %.0e, %d greedy tokens differ from %s", name, bad, tol,
                 mismatches, ref_label);
}

void hf_run_dataset(const char *name, double tol, const hf_backend *be)
{
    hf_check(name, tol, be, NULL, true);
}

const hf_backend hf_cpu_backend = {.label = "cpu reference", .kind = GP_BACKEND_CPU};
const hf_backend hf_cpu_bf16_backend = {.label = "cpu reference, bf16 activations", .kind = GP_BACKEND_CPU,
                                        .dtype = GP_DTYPE_BF16};
