/* Decode and the streaming detokenizer: one state machine serves both, so
 * the pieces a stream prints always add up to the full decode. Held back
 * between pushes: the bytes of an unfinished UTF-8 character (byte-level,
 * tiktoken), a run of SentencePiece byte-fallback tokens (HF turns the whole
 * run into U+FFFDs when it is not valid UTF-8, so none of it is decided
 * until the run ends), and whether the SentencePiece leading space was
 * stripped yet (the Metaspace decoder: whether the first token went out). */
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>

struct gp_detok {
    const gp_tokenizer *t;
    bool skip_special;
    bool lead_done;  /* the decoder's Strip(" ", 1, 0) has seen the first character */
    char *pend;      /* [pend_cap] undecided bytes */
    size_t n_pend, pend_cap;
};

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static gp_status sbuf_put(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate %zu bytes of decoded text", cap);
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return GP_OK;
}

static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */

static gp_status pend_put(gp_detok *d, const char *s, size_t n)
{
    if (n == 0)
        return GP_OK;
    if (d->n_pend + n > d->pend_cap) {
        size_t cap = d->pend_cap ? d->pend_cap : 16;
        while (cap < d->n_pend + n)
            cap *= 2;
        char *p = realloc(d->pend, cap);
        if (!p)
            GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate %zu bytes for the detokenizer", cap);
        d->pend = p;
        d->pend_cap = cap;
    }
    memcpy(d->pend + d->n_pend, s, n);
    d->n_pend += n;
    return GP_OK;
}

/* SentencePiece text goes out through the leading-space rule. */
static gp_status sp_out(gp_detok *d, sbuf *b, const char *s, size_t n)
{
    if (n && d->t->strip_lead_space && !d->lead_done) {
        d->lead_done = true;
        if (s[0] == ' ') {
            s++;
            n--;
        }
    }
    return sbuf_put(b, s, n);
}

/* Byte-level and tiktoken: the decided prefix of the pending bytes goes out,
 * invalid sequences as U+FFFD; at the end (final) a cut-short character is
 * one U+FFFD as well. */
static gp_status utf8_out(gp_detok *d, sbuf *b, bool final)
{
    const unsigned char *u = (const unsigned char *)d->pend;
    size_t i = 0, n = d->n_pend;
    while (i < n) {
        int k = gp_utf8_next(u + i, n - i);
        if (k > 0) {
            GP_TRY(sbuf_put(b, d->pend + i, (size_t)k));
            i += (size_t)k;
        } else if (k < 0) {
            GP_TRY(sbuf_put(b, replacement, 3));
            i += (size_t)-k;
        } else if (final) {
            GP_TRY(sbuf_put(b, replacement, 3));
            i = n;
        } else {
            break;
        }
    }
    if (i && i < n)
        memmove(d->pend, d->pend + i, n - i);
    d->n_pend = n - i;
    return GP_OK;
}

/* HF's ByteFallback: a run of <0xNN> tokens is its bytes when they are valid
 * UTF-8, else one U+FFFD per token. */
static gp_status sp_bytes_out(gp_detok *d, sbuf *b)
{
    if (!d->n_pend)
        return GP_OK;
    gp_status st = GP_OK;
    if (gp_utf8_check(d->pend, d->n_pend) == GP_OK) {
        st = sp_out(d, b, d->pend, d->n_pend);
    } else {
        gp_clear_error(); /* invalid bytes are expected here, not an error */
        for (size_t i = 0; i < d->n_pend && st == GP_OK; i++)
            st = sp_out(d, b, replacement, 3);
    }
    d->n_pend = 0;
    return st;
}

static gp_status detok_push(gp_detok *d, int32_t id, sbuf *b)
{
    const gp_tokenizer *t = d->t;
    if (id < 0 || id >= t->n_ids)
        GP_FAIL(GP_ERR_INVALID_ARG, "token id %d is outside the vocabulary; allowed: [0, %d]", (int)id,
                (int)t->n_ids - 1);
    const gp_token *k = &t->toks[id];
    if (!k->str || (d->skip_special && k->special))
        return GP_OK; /* HF skips ids it has no token for */
    if (t->kind != GP_TOK_SP) {
        GP_TRY(pend_put(d, k->dec, k->dec_len));
        return utf8_out(d, b, false);
    }
    if (t->ms_decoder) {
        /* HF's Metaspace decoder: the first token decoded loses every ▁ (not
         * only a leading one), the others show ▁ as a space */
        bool first = !d->lead_done;
        d->lead_done = true;
        if (!first || !t->ms_dec_first)
            return sbuf_put(b, k->dec, k->dec_len);
        for (uint32_t i = 0; i < k->len;) {
            if (k->len - i >= 3 && !memcmp(k->str + i, "\xe2\x96\x81", 3)) {
                i += 3;
                continue;
            }
            uint32_t j = i + 1;
            while (j < k->len && !(k->len - j >= 3 && !memcmp(k->str + j, "\xe2\x96\x81", 3)))
                j++;
            GP_TRY(sbuf_put(b, k->str + i, j - i));
            i = j;
        }
        return sbuf_put(b, "", 0);
    }
    if (k->byte >= 0) {
        char c = (char)k->byte;
        return pend_put(d, &c, 1);
    }
    GP_TRY(sp_bytes_out(d, b));
    return sp_out(d, b, k->dec, k->dec_len);
}

static gp_status detok_flush(gp_detok *d, sbuf *b)
{
    if (d->t->kind != GP_TOK_SP)
        return utf8_out(d, b, true);
    return sp_bytes_out(d, b);
}

gp_status gp_detok_create(const gp_tokenizer *t, bool skip_special, gp_detok **out)
{
    if (!t || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_detok_create: tokenizer or out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out)
        GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate a detokenizer");
    (*out)->t = t;
    (*out)->skip_special = skip_special;
    return GP_OK;
}

void gp_detok_free(gp_detok *d)
{
    if (!d)
        return;
    free(d->pend);
    free(d);
}

/* The piece as a malloc'd NUL-terminated string, empty included. */
static gp_status hand_out(sbuf *b, gp_status st, char **text, size_t *len)
{
    if (st == GP_OK && !b->p)
        st = sbuf_put(b, "", 0);
    if (st != GP_OK) {
        free(b->p);
        return st;
    }
    *text = b->p;
    *len = b->n;
    return GP_OK;
}

gp_status gp_detok_push(gp_detok *d, int32_t id, char **text, size_t *len)
{
    if (!d || !text || !len)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_detok_push: detokenizer, text or len is NULL");
    *text = NULL;
    *len = 0;
    sbuf b = {0};
    return hand_out(&b, detok_push(d, id, &b), text, len);
}

gp_status gp_detok_flush(gp_detok *d, char **text, size_t *len)
{
    if (!d || !text || !len)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_detok_flush: detokenizer, text or len is NULL");
    *text = NULL;
    *len = 0;
    sbuf b = {0};
    return hand_out(&b, detok_flush(d, &b), text, len);
}

gp_status gp_tokenizer_decode(const gp_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                              char **text, size_t *len)
{
    if (!t || !text || !len || (!ids && n))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_tokenizer_decode: tokenizer, text or len is NULL, or ids is NULL with %zu ids",
                n);
    *text = NULL;
    *len = 0;
    /* ids are checked up front so a bad one fails the call before any work */
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n_ids)
            GP_FAIL(GP_ERR_INVALID_ARG, "token id %d (position %zu) is outside the vocabulary; allowed: [0, %d]",
                    (int)ids[i], i, (int)t->n_ids - 1);
    gp_detok d = {.t = t, .skip_special = skip_special};
    sbuf b = {0};
    gp_status st = GP_OK;
    for (size_t i = 0; i < n && st == GP_OK; i++)
        st = detok_push(&d, ids[i], &b);
    if (st == GP_OK)
        st = detok_flush(&d, &b);
    free(d.pend);
    return hand_out(&b, st, text, len);
}
