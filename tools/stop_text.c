/* Stop strings cut from text that arrives in pieces: the text up to the
 * first occurrence of any of them is let through, a tail that could still
 * be the start of one is held until more text settles it. */
#include <stdlib.h>
#include <string.h>

#include "gp_tools.h"

struct gp_stop_text {
    char **stops; /* [n] copies */
    size_t *lens;
    int n;
    char *pend;   /* text held back, then the piece appended */
    size_t plen, pcap;
    bool stopped;
};

void gp_stop_text_free(gp_stop_text *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n; i++)
        free(t->stops[i]);
    free(t->stops);
    free(t->lens);
    free(t->pend);
    free(t);
}

gp_status gp_stop_text_create(const char *const *stops, int n, gp_stop_text **out)
{
    for (int i = 0; i < n; i++)
        if (!stops[i] || !stops[i][0])
            GP_FAIL(GP_ERR_INVALID_ARG, "stop string %d is empty; allowed: a non-empty text", i);
    gp_stop_text *t = calloc(1, sizeof *t);
    if (!t || (n && (!(t->stops = calloc((size_t)n, sizeof *t->stops)) || !(t->lens = calloc((size_t)n, sizeof *t->lens))))) {
        gp_stop_text_free(t);
        GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for %d stop strings", n);
    }
    for (int i = 0; i < n; i++, t->n++) {
        t->lens[i] = strlen(stops[i]);
        if (!(t->stops[i] = malloc(t->lens[i] + 1))) {
            gp_stop_text_free(t);
            GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for stop string %d", i);
        }
        memcpy(t->stops[i], stops[i], t->lens[i] + 1);
    }
    *out = t;
    return GP_OK;
}

bool gp_stop_text_stopped(const gp_stop_text *t)
{
    return t->stopped;
}

/* Room for need bytes in the held text. */
static gp_status hold_room(gp_stop_text *t, size_t need)
{
    char *p = gp_grow(t->pend, &t->pcap, need);
    if (!p)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for %zu bytes of text held at a stop string", need);
    t->pend = p;
    return GP_OK;
}

/* First occurrence of needle[m] in hay[n], or -1. */
static long find(const char *hay, size_t n, const char *needle, size_t m)
{
    for (size_t i = 0; m <= n && i <= n - m; i++)
        if (!memcmp(hay + i, needle, m))
            return (long)i;
    return -1;
}

gp_status gp_stop_text_feed(gp_stop_text *t, const char *piece, size_t n, bool final, const char **text,
                            size_t *len)
{
    *text = "";
    *len = 0;
    if (t->stopped)
        return GP_OK;
    /* the held tail and the piece: the previous call's output is no longer
     * needed, and the piece is the caller's (copied, so what is let through
     * stays valid after the caller frees it) */
    GP_TRY(hold_room(t, t->plen + n + 1));
    if (n)
        memcpy(t->pend + t->plen, piece, n);
    size_t all = t->plen + n;
    if (!t->n) { /* nothing to look for: the piece as it is */
        t->plen = 0;
        *text = t->pend;
        *len = all;
        return GP_OK;
    }
    long first = -1;
    for (int i = 0; i < t->n; i++) {
        long at = find(t->pend, all, t->stops[i], t->lens[i]);
        if (at >= 0 && (first < 0 || at < first))
            first = at;
    }
    if (first >= 0) {
        t->stopped = true;
        t->plen = 0;
        *text = t->pend;
        *len = (size_t)first;
        return GP_OK;
    }
    size_t hold = 0;
    for (int i = 0; !final && i < t->n; i++) {
        size_t m = t->lens[i];
        for (size_t k = m - 1 < all ? m - 1 : all; k > hold; k--)
            if (!memcmp(t->pend + all - k, t->stops[i], k)) {
                hold = k;
                break;
            }
    }
    /* the text let through goes out of a copy past the held tail, so the
     * tail can move to the front of pend for the next call */
    size_t emit = all - hold;
    GP_TRY(hold_room(t, all + emit + 1));
    memcpy(t->pend + all, t->pend, emit);
    memmove(t->pend, t->pend + emit, hold);
    t->plen = hold;
    /* the copy sits at pend + all, after the tail moved to the front (hold <= all) */
    *text = t->pend + all;
    *len = emit;
    return GP_OK;
}
