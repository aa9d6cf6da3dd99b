/* An incremental text/event-stream parser: bytes arrive split anywhere, a
 * line is assembled across pieces and each event's data handed on at the
 * blank line that ends it. */
#include "gp_loadgen.h"

#include <stdlib.h>
#include <string.h>

struct gp_lg_sse {
    gp_lg_sse_fn fn;
    void *ctx;
    size_t max_event;
    char *line; /* [line_cap] the line being read */
    size_t line_len, line_cap;
    char *data; /* [data_cap] the event's data so far */
    size_t data_len, data_cap;
    bool has_data;
    bool after_cr; /* the last byte ended a line with CR: an LF next belongs to it */
};

gp_status gp_lg_sse_create(gp_lg_sse_fn fn, void *ctx, size_t max_event, gp_lg_sse **out)
{
    if (!fn || max_event == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "an event stream parser needs a callback and max_event > 0");
    gp_lg_sse *s = calloc(1, sizeof *s);
    if (!s)
        GP_FAIL(GP_ERR_NO_MEMORY, "event stream parser: out of memory");
    s->fn = fn;
    s->ctx = ctx;
    s->max_event = max_event;
    *out = s;
    return GP_OK;
}

void gp_lg_sse_destroy(gp_lg_sse *s)
{
    if (!s)
        return;
    free(s->line);
    free(s->data);
    free(s);
}

/* need bytes in *buf, of which extra (a terminating NUL) are beyond max's count. */
static gp_status grow(char **buf, size_t *cap, size_t need, size_t max, size_t extra)
{
    if (need <= *cap)
        return GP_OK;
    if (need > max + extra)
        GP_FAIL(GP_ERR_FORMAT, "an event of the stream exceeds %zu bytes", max);
    max += extra;
    size_t nc = *cap ? *cap : 256;
    while (nc < need)
        nc *= 2;
    if (nc > max)
        nc = max;
    char *nb = realloc(*buf, nc);
    if (!nb)
        GP_FAIL(GP_ERR_NO_MEMORY, "event stream parser: out of memory for %zu bytes", nc);
    *buf = nb;
    *cap = nc;
    return GP_OK;
}

/* One whole line (without its end). */
static gp_status take_line(gp_lg_sse *s)
{
    const char *l = s->line;
    size_t n = s->line_len;
    s->line_len = 0;
    if (n == 0) {
        if (s->has_data)
            s->fn(s->ctx, s->data, s->data_len);
        s->data_len = 0;
        s->has_data = false;
        return GP_OK;
    }
    const char *colon = memchr(l, ':', n);
    size_t name_len = colon ? (size_t)(colon - l) : n;
    if (name_len != 4 || memcmp(l, "data", 4))
        return GP_OK; /* a comment (":..."), or a field other than data */
    const char *v = colon ? colon + 1 : l + n;
    size_t vn = colon ? n - 5 : 0;
    if (vn && *v == ' ') {
        v++;
        vn--;
    }
    size_t need = s->data_len + (s->has_data ? 1 : 0) + vn + 1;
    GP_TRY(grow(&s->data, &s->data_cap, need, s->max_event, 1));
    if (s->has_data)
        s->data[s->data_len++] = '\n';
    memcpy(s->data + s->data_len, v, vn);
    s->data_len += vn;
    s->data[s->data_len] = '\0';
    s->has_data = true;
    return GP_OK;
}

gp_status gp_lg_sse_feed(gp_lg_sse *s, const char *buf, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (s->after_cr) {
            s->after_cr = false;
            if (c == '\n')
                continue;
        }
        if (c == '\r' || c == '\n') {
            s->after_cr = c == '\r';
            GP_TRY(take_line(s));
            continue;
        }
        /* Copy the run up to the next line end at once. */
        size_t j = i;
        while (j < len && buf[j] != '\r' && buf[j] != '\n')
            j++;
        GP_TRY(grow(&s->line, &s->line_cap, s->line_len + (j - i), s->max_event, 0));
        memcpy(s->line + s->line_len, buf + i, j - i);
        s->line_len += j - i;
        i = j - 1;
    }
    return GP_OK;
}
