/* Result rows: freeing them, the trace and copy buffers they own, and the small
 * texts (policy names, split labels) and file handling every writer shares. */
#include "cs_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* True when t's four arrays are one block starting at attn_begin, in the
 * order of the struct (what gp_cs_trace_alloc makes). Compared
 * as integers: pointer arithmetic across separate blocks is undefined. */
static bool trace_one_block(const gp_cs_trace *t)
{
    if (t->n_layers < 1 || t->M < 1 || !t->attn_begin)
        return false;
    uintptr_t base = (uintptr_t)t->attn_begin, step = (uintptr_t)t->n_layers * (uintptr_t)t->M * sizeof(float);
    return (uintptr_t)t->attn_end == base + step && (uintptr_t)t->ffn_begin == base + 2 * step &&
           (uintptr_t)t->ffn_end == base + 3 * step;
}

void gp_cs_row_free(gp_cs_row *r)
{
    if (!r)
        return;
    free(r->samples_ms);
    r->samples_ms = NULL;
    r->n_samples = 0;
    /* One block or four: both ways of filling a trace are released. */
    if (trace_one_block(&r->trace)) {
        free(r->trace.attn_begin);
    } else {
        free(r->trace.attn_begin);
        free(r->trace.attn_end);
        free(r->trace.ffn_begin);
        free(r->trace.ffn_end);
    }
    memset(&r->trace, 0, sizeof r->trace);
    free(r->decisions);
    r->decisions = NULL;
    r->n_decisions = 0;
    free(r->copies);
    r->copies = NULL;
    r->n_copies = 0;
}

gp_status gp_cs_trace_alloc(gp_cs_trace *t, int n_layers, int M)
{
    if (!t || n_layers < 1 || M < 1 || M > GP_PIPE_MAX_MICRO)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cs_trace_alloc: n_layers %d, M %d: need n_layers >= 1 and M 1..%d",
                n_layers, M, GP_PIPE_MAX_MICRO);
    size_t cells = (size_t)n_layers * (size_t)M;
    float *block = calloc(4 * cells, sizeof *block);
    if (!block)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_cs_trace_alloc: cannot allocate 4 x %zu floats", cells);
    t->n_layers = n_layers;
    t->M = M;
    t->step_ms = 0.0f;
    t->attn_begin = block;
    t->attn_end = block + cells;
    t->ffn_begin = block + 2 * cells;
    t->ffn_end = block + 3 * cells;
    return GP_OK;
}

int cs_rebalance_parse(const char *text, gp_rebalance_policy *out)
{
    static const gp_rebalance_policy all[] = { GP_REBALANCE_OFF, GP_REBALANCE_RATIO, GP_REBALANCE_MODEL };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (text && strcmp(text, gp_rebalance_policy_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    return -1;
}

void cs_req_text(const gp_split_req *r, char *buf, size_t len)
{
    if (r->ffn_sms == GP_SPLIT_REST)
        snprintf(buf, len, "%d", r->attn_sms);
    else
        snprintf(buf, len, "%d:%d", r->attn_sms, r->ffn_sms);
}

/* Non-SM units (the CPU executor's threads) are spelled out; SMs are implied. */
static const char *unit_suffix(const gp_cs_row *r)
{
    return r->split.unit && strcmp(r->split.unit, "SMs") != 0 ? r->split.unit : NULL;
}

void cs_row_req_text(const gp_cs_row *r, char *buf, size_t len)
{
    const char *u = unit_suffix(r);
    if (r->seq)
        snprintf(buf, len, "seq");
    else if (r->split.f_req < 0)
        snprintf(buf, len, "%d:rest%s%s", r->split.a_req, u ? " " : "", u ? u : "");
    else
        snprintf(buf, len, "%d:%d%s%s", r->split.a_req, r->split.f_req, u ? " " : "", u ? u : "");
}

void cs_row_got_text(const gp_cs_row *r, char *buf, size_t len)
{
    const char *u = unit_suffix(r);
    if (r->seq && r->split.a_got <= 0)
        snprintf(buf, len, "all");
    else if (r->seq)
        snprintf(buf, len, "all (%d)", r->split.a_got);
    else if (!r->ok && r->split.a_got <= 0 && r->split.f_got <= 0)
        snprintf(buf, len, "-"); /* failed before a pair existed */
    else
        snprintf(buf, len, "%d:%d%s%s%s", r->split.a_got, r->split.f_got, u ? " " : "", u ? u : "",
                 !r->seq && !r->split.partitioned ? " shared" : "");
}

int cs_row_attn_x(const gp_cs_row *r)
{
    /* An unpartitioned (fallback) pair reports the whole device on both
     * sides; the requested count is then the only meaningful position. */
    return r->split.partitioned && r->split.a_got > 0 ? r->split.a_got : r->split.a_req;
}

bool cs_row_has_trace(const gp_cs_row *r)
{
    const gp_cs_trace *t = &r->trace;
    return r->ok && t->n_layers > 0 && t->M > 0 && t->attn_begin && t->attn_end && t->ffn_begin && t->ffn_end;
}

FILE *cs_open_out(const char *path, const char *what)
{
    if (!path || !*path) {
        gp_set_error("%s: no output path given", what);
        return NULL;
    }
    FILE *f = fopen(path, "w");
    if (!f)
        gp_set_error("cannot write the %s to '%s': %s", what, path, strerror(errno));
    return f;
}

gp_status cs_close_out(FILE *f, const char *path, const char *what)
{
    int bad = ferror(f);
    int saved = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (bad)
        GP_FAIL(GP_ERR_IO, "cannot write the %s to '%s': %s", what, path, strerror(saved ? saved : EIO));
    return GP_OK;
}
