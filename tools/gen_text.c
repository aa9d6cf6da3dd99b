/* Tokenized prompts and streamed text output for greenpipe generate, cut
 * at stop strings. */
#include "gen_text_impl.h"

#include <stdlib.h>
#include <string.h>

gp_status gp_gen_tokenize(const gp_tokenizer *t, const char *const *texts, const size_t *lens, int n, bool add_special,
                          const char *flag, gp_prompts *out)
{
    memset(out, 0, sizeof *out);
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    size_t *counts = calloc((size_t)n, sizeof *counts);
    out->lens = calloc((size_t)n, sizeof *out->lens);
    out->offsets = calloc((size_t)n, sizeof *out->offsets);
    gp_status st = GP_OK;
    if (!ids || !counts || !out->lens || !out->offsets) {
        gp_set_error("%s: out of memory for %d prompts", flag, n);
        st = GP_ERR_NO_MEMORY;
        goto done;
    }
    size_t total = 0;
    for (int s = 0; s < n; s++) {
        if ((st = gp_tokenizer_encode(t, texts[s], lens[s], add_special, &ids[s], &counts[s])) != GP_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", gp_last_error());
            gp_set_error("%s (sequence %d): %s", flag, s, msg);
            goto done;
        }
        if (counts[s] == 0) {
            gp_set_error("%s (sequence %d) is empty: it encodes to no tokens and the tokenizer adds no BOS; "
                         "allowed: a non-empty text", flag, s);
            st = GP_ERR_INVALID_ARG;
            goto done;
        }
        if (counts[s] > (size_t)INT32_MAX - total) {
            gp_set_error("%s: the prompts encode to more than %d tokens", flag, INT32_MAX);
            st = GP_ERR_INVALID_ARG;
            goto done;
        }
        total += counts[s];
    }
    if (!(out->ids = malloc((total ? total : 1) * sizeof *out->ids))) {
        gp_set_error("%s: out of memory for %zu prompt tokens", flag, total);
        st = GP_ERR_NO_MEMORY;
        goto done;
    }
    size_t at = 0;
    for (int s = 0; s < n; s++) {
        out->offsets[s] = (int)at;
        out->lens[s] = (int)counts[s];
        memcpy(out->ids + at, ids[s], counts[s] * sizeof *out->ids);
        at += counts[s];
    }
    out->n_seqs = n;
done:
    for (int s = 0; ids && s < n; s++)
        free(ids[s]);
    free(ids);
    free(counts);
    if (st != GP_OK)
        gp_prompts_free(out);
    return st;
}

struct gp_gen_out {
    const gp_tokenizer *tok;
    int n_seqs;
    FILE *f;
    gp_detok **detok; /* [n_seqs]; NULL once the sequence is finished */
    char **text;      /* [n_seqs] held text (several sequences) */
    size_t *len, *cap;
    long unknown;
    gp_stop_text **stop; /* [n_seqs] each sequence's text through the stop strings */
};

void gp_gen_out_free(gp_gen_out *o)
{
    if (!o)
        return;
    for (int s = 0; s < o->n_seqs; s++) {
        if (o->detok)
            gp_detok_free(o->detok[s]);
        if (o->text)
            free(o->text[s]);
        if (o->stop)
            gp_stop_text_free(o->stop[s]);
    }
    free(o->stop);
    free(o->detok);
    free(o->text);
    free(o->len);
    free(o->cap);
    free(o);
}

gp_status gp_gen_out_create(const gp_tokenizer *t, int n_seqs, FILE *f, gp_gen_out **out)
{
    gp_gen_out *o = calloc(1, sizeof *o);
    if (!o)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for the text output");
    o->tok = t;
    o->n_seqs = n_seqs;
    o->f = f;
    o->detok = calloc((size_t)n_seqs, sizeof *o->detok);
    o->text = calloc((size_t)n_seqs, sizeof *o->text);
    o->len = calloc((size_t)n_seqs, sizeof *o->len);
    o->cap = calloc((size_t)n_seqs, sizeof *o->cap);
    o->stop = calloc((size_t)n_seqs, sizeof *o->stop);
    if (!o->detok || !o->text || !o->len || !o->cap || !o->stop) {
        gp_gen_out_free(o);
        GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for the text output of %d sequences", n_seqs);
    }
    for (int s = 0; s < n_seqs; s++) {
        gp_status st = gp_detok_create(t, true, &o->detok[s]); /* BOS and other specials print nothing */
        if (st == GP_OK)
            st = gp_stop_text_create(NULL, 0, &o->stop[s]);
        if (st != GP_OK) {
            gp_gen_out_free(o);
            return st;
        }
    }
    *out = o;
    return GP_OK;
}

/* One decoded piece of sequence s: written now when it is the only
 * sequence, else kept for its line. */
static gp_status emit(gp_gen_out *o, int s, const char *piece, size_t n)
{
    if (!n)
        return GP_OK;
    if (o->n_seqs == 1) {
        fwrite(piece, 1, n, o->f);
        fflush(o->f); /* streaming: the reader sees each token as it arrives */
        return GP_OK;
    }
    char *p = gp_grow(o->text[s], &o->cap[s], o->len[s] + n + 1);
    if (!p)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for %zu bytes of sequence %d's text", o->len[s] + n + 1, s);
    o->text[s] = p;
    memcpy(o->text[s] + o->len[s], piece, n);
    o->len[s] += n;
    return GP_OK;
}

gp_status gp_gen_out_set_stops(gp_gen_out *o, const char *const *stops, int n)
{
    for (int s = 0; s < o->n_seqs; s++) {
        gp_stop_text *t;
        GP_TRY(gp_stop_text_create(stops, n, &t));
        gp_stop_text_free(o->stop[s]);
        o->stop[s] = t;
    }
    return GP_OK;
}

bool gp_gen_out_stopped(const gp_gen_out *o, int s)
{
    return gp_stop_text_stopped(o->stop[s]);
}

/* Decoded text of sequence s through the stop strings. */
static gp_status feed(gp_gen_out *o, int s, const char *piece, size_t n, bool final)
{
    const char *text;
    size_t len;
    GP_TRY(gp_stop_text_feed(o->stop[s], piece, n, final, &text, &len));
    return emit(o, s, text, len);
}

gp_status gp_gen_out_push(gp_gen_out *o, int s, int32_t id)
{
    if (!o->detok[s])
        GP_FAIL(GP_ERR_STATE, "sequence %d's text is already finished", s);
    if (id < 0 || id >= gp_tokenizer_vocab_size(o->tok)) {
        o->unknown++;
        return GP_OK;
    }
    char *piece = NULL;
    size_t n = 0;
    GP_TRY(gp_detok_push(o->detok[s], id, &piece, &n));
    gp_status st = feed(o, s, piece, n, false);
    free(piece);
    return st;
}

gp_status gp_gen_out_finish(gp_gen_out *o, int s)
{
    if (!o->detok[s])
        return GP_OK;
    char *piece = NULL;
    size_t n = 0;
    GP_TRY(gp_detok_flush(o->detok[s], &piece, &n));
    gp_status st = feed(o, s, piece, n, true);
    free(piece);
    gp_detok_free(o->detok[s]);
    o->detok[s] = NULL;
    if (st != GP_OK)
        return st;
    if (o->n_seqs > 1) {
        fprintf(o->f, "[%d] ", s);
        fwrite(o->text[s] ? o->text[s] : "", 1, o->len[s], o->f);
        free(o->text[s]);
        o->text[s] = NULL;
    }
    fputc('\n', o->f);
    fflush(o->f);
    return GP_OK;
}

long gp_gen_out_unknown(const gp_gen_out *o)
{
    return o->unknown;
}
