/* Encode: the text is split on added tokens first (as HF's AddedVocabulary
 * does), each stretch between them is normalized (NFC, the SentencePiece
 * form), pre-tokenized (the split pattern, Metaspace) and BPE'd; the
 * post-processor's ids go around the whole. */
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct enc_ctx {
    const gp_tokenizer *t;
    gp_bpe_scratch *bpe;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
    gp_ids *out;
    char *buf; /* [buf_cap] a normalized or space-prefixed stretch */
    size_t buf_cap;
    char *nbuf; /* [nbuf_cap] the NFC of a stretch between added tokens */
    size_t nbuf_cap;
} enc_ctx;

static gp_status buf_reserve(enc_ctx *c, size_t n)
{
    if (n <= c->buf_cap)
        return GP_OK;
    size_t cap = n < 256 ? 256 : n + n / 2;
    char *b = realloc(c->buf, cap);
    if (!b)
        GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate %zu bytes to normalize the text", cap);
    c->buf = b;
    c->buf_cap = cap;
    return GP_OK;
}

/* Matches and the stretches between them are pieces (HF Split with
 * behavior Isolated; tiktoken's findall, whose patterns leave no gaps). */
static gp_status split_pieces(enc_ctx *c, const char *s, size_t n)
{
    const gp_tokenizer *t = c->t;
    if (!t->re)
        return gp_bpe_piece(t, c->bpe, s, n, c->out);
    size_t off = 0, gap = 0;
    while (off < n) {
        int rc = pcre2_match(t->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, c->md, c->mc);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            GP_FAIL(GP_ERR_UNSUPPORTED, "tokenizer: the split pattern failed at byte %zu of a %zu-byte stretch: %s",
                    off, n, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* an empty match splits nothing: look again one character on */
            int k = gp_utf8_next((const unsigned char *)s + ms, n - ms);
            off = ms + (k > 0 ? (size_t)k : 1);
            continue;
        }
        if (ms > gap)
            GP_TRY(gp_bpe_piece(t, c->bpe, s + gap, ms - gap, c->out));
        GP_TRY(gp_bpe_piece(t, c->bpe, s + ms, me - ms, c->out));
        off = gap = me;
    }
    if (gap < n)
        GP_TRY(gp_bpe_piece(t, c->bpe, s + gap, n - gap, c->out));
    return GP_OK;
}

#define SP_SPACE "\xe2\x96\x81"

/* Metaspace: spaces become ▁, ▁ is prepended unless the stretch starts with
 * one (prepend_scheme always; first: only the stretch at offset 0 of the
 * user's text); split: a piece starts at each ▁ (HF's MergedWithNext). */
static gp_status metaspace_stretch(enc_ctx *c, const char *s, size_t n, bool at_start)
{
    const gp_tokenizer *t = c->t;
    if (n > (SIZE_MAX - 3) / 3)
        GP_FAIL(GP_ERR_OVERFLOW, "tokenizer: a %zu-byte text is too long to pre-tokenize", n);
    GP_TRY(buf_reserve(c, 3 * n + 3));
    size_t o = 0;
    bool lead = s[0] == ' ' || (n >= 3 && !memcmp(s, SP_SPACE, 3));
    if (!lead && (t->ms_prepend == GP_MS_ALWAYS || (t->ms_prepend == GP_MS_FIRST && at_start))) {
        memcpy(c->buf, SP_SPACE, 3);
        o = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(c->buf + o, SP_SPACE, 3);
            o += 3;
        } else {
            c->buf[o++] = s[i];
        }
    }
    if (!t->ms_split)
        return gp_bpe_piece(t, c->bpe, c->buf, o, c->out);
    size_t piece = 0;
    for (size_t i = 1; i + 3 <= o; i++) {
        if (!memcmp(c->buf + i, SP_SPACE, 3)) {
            GP_TRY(gp_bpe_piece(t, c->bpe, c->buf + piece, i - piece, c->out));
            piece = i;
            i += 2;
        }
    }
    return gp_bpe_piece(t, c->bpe, c->buf + piece, o - piece, c->out);
}

/* One normalized stretch of text between added tokens; at_start: it begins
 * at offset 0 of the user's text (Metaspace's prepend_scheme first). */
static gp_status encode_stretch(enc_ctx *c, const char *s, size_t n, bool at_start)
{
    const gp_tokenizer *t = c->t;
    if (n == 0)
        return GP_OK;
    if (t->kind == GP_TOK_SP && t->metaspace)
        return metaspace_stretch(c, s, n, at_start);
    if (t->kind == GP_TOK_SP) {
        /* Prepend("▁") then Replace(" ", "▁"): at most 3 bytes per byte, plus the prefix */
        size_t cap;
        if (n > (SIZE_MAX - 3) / 3)
            GP_FAIL(GP_ERR_OVERFLOW, "tokenizer: a %zu-byte text is too long to normalize", n);
        cap = 3 * n + 3;
        GP_TRY(buf_reserve(c, cap));
        size_t o = 0;
        if (t->sp_prepend) {
            memcpy(c->buf, SP_SPACE, 3);
            o = 3;
        }
        for (size_t i = 0; i < n; i++) {
            if (s[i] == ' ' && t->sp_replace) {
                memcpy(c->buf + o, SP_SPACE, 3);
                o += 3;
            } else {
                c->buf[o++] = s[i];
            }
        }
        return gp_bpe_piece(t, c->bpe, c->buf, o, c->out);
    }
    if (t->add_prefix_space && s[0] != ' ') {
        GP_TRY(buf_reserve(c, n + 1));
        c->buf[0] = ' ';
        memcpy(c->buf + 1, s, n);
        return split_pieces(c, c->buf, n + 1);
    }
    return split_pieces(c, s, n);
}

static bool is_ascii_space(unsigned char ch)
{
    return ch == ' ' || (ch >= '\t' && ch <= '\r');
}

/* HF's single_word: no word character (alphanumeric or '_'; any non-ASCII
 * byte is counted as one) right before or after the token. */
static bool is_word_byte(unsigned char ch)
{
    return ch >= 0x80 || ch == '_' || (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z');
}

/* The leftmost added token of one pass (normalized: HF's second pass, in
 * the normalized text) at or after pos, longest at its position: *at and
 * *end bound the token with the whitespace lstrip/rstrip absorb. */
static const gp_added *next_added(const gp_tokenizer *t, const bool *first, bool normalized, const char *s, size_t n,
                                  size_t pos, size_t floor, size_t *at, size_t *end)
{
    for (size_t i = pos; i < n; i++) {
        if (!first[(unsigned char)s[i]])
            continue;
        for (int k = 0; k < t->n_added; k++) {
            const gp_added *a = &t->added[k];
            if (a->normalized != normalized || a->len > n - i || memcmp(s + i, a->content, a->len))
                continue;
            size_t st = i, e = i + a->len;
            if (a->single_word && ((st > 0 && is_word_byte((unsigned char)s[st - 1])) ||
                                   (e < n && is_word_byte((unsigned char)s[e])))) {
                i = e - 1; /* HF's matches do not overlap: the next one starts after this */
                break;
            }
            if (a->lstrip)
                while (st > floor && is_ascii_space((unsigned char)s[st - 1]))
                    st--;
            if (a->rstrip)
                while (e < n && is_ascii_space((unsigned char)s[e]))
                    e++;
            *at = st;
            *end = e;
            return a;
        }
    }
    return NULL;
}

/* HF's AddedVocabulary in two passes: the tokens with normalized false are
 * found in the user's text; each stretch between them is normalized (NFC),
 * the tokens with normalized true are found in that, and what is left is
 * pre-tokenized and BPE'd. Invalid UTF-8 was refused before, with offsets
 * in the user's text. */
static gp_status split_added(enc_ctx *c, const bool *first, bool normalized, const char *s, size_t n, bool at_start)
{
    const gp_tokenizer *t = c->t;
    bool any = false;
    for (int k = 0; k < t->n_added; k++)
        any = any || t->added[k].normalized == normalized;
    size_t pos = 0;
    while (pos < n) {
        size_t at = n, end = n;
        const gp_added *a = any ? next_added(t, first, normalized, s, n, pos, pos, &at, &end) : NULL;
        size_t gap = (a ? at : n) - pos;
        if (gap && !normalized) {
            const char *g = s + pos;
            size_t gn = gap;
            if (t->nfc) {
                GP_TRY(gp_nfc(g, gn, &c->nbuf, &c->nbuf_cap, &gn));
                g = c->nbuf; /* the second pass below does not normalize again, so nbuf is not reused under it */
            }
            GP_TRY(split_added(c, first, true, g, gn, at_start && pos == 0));
        } else if (gap) {
            GP_TRY(encode_stretch(c, s + pos, gap, at_start && pos == 0));
        }
        if (!a)
            break;
        GP_TRY(gp_ids_push(c->out, a->id));
        pos = end;
    }
    return GP_OK;
}

static gp_status encode_all(enc_ctx *c, const char *text, size_t len, bool add_special)
{
    const gp_tokenizer *t = c->t;
    if (add_special)
        for (int i = 0; i < t->n_prefix; i++)
            GP_TRY(gp_ids_push(c->out, t->prefix[i]));
    bool first[256] = {false};
    for (int k = 0; k < t->n_added; k++)
        first[(unsigned char)t->added[k].content[0]] = true;
    GP_TRY(split_added(c, first, false, text, len, true));
    if (add_special)
        for (int i = 0; i < t->n_suffix; i++)
            GP_TRY(gp_ids_push(c->out, t->suffix[i]));
    return GP_OK;
}

gp_status gp_tokenizer_encode(const gp_tokenizer *t, const char *text, size_t len, bool add_special,
                              int32_t **ids, size_t *n)
{
    if (!t || !ids || !n || (!text && len))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_tokenizer_encode: tokenizer, ids or n is NULL, or text is NULL with %zu bytes",
                len);
    *ids = NULL;
    *n = 0;
    GP_TRY(gp_utf8_check(text, len));
    gp_ids out = {0};
    enc_ctx c = {.t = t, .out = &out};
    gp_status st = gp_bpe_scratch_create(&c.bpe);
    if (st == GP_OK && t->re) {
        /* per call, not per tokenizer: encode may run on several threads at once */
        c.md = pcre2_match_data_create_from_pattern(t->re, NULL);
        c.mc = pcre2_match_context_create(NULL);
        c.js = t->jit ? pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL) : NULL;
        if (!c.md || !c.mc || (t->jit && !c.js)) {
            gp_set_error("tokenizer: cannot allocate the pattern's match data");
            st = GP_ERR_NO_MEMORY;
        } else if (c.js) {
            pcre2_jit_stack_assign(c.mc, NULL, c.js);
        }
    }
    if (st == GP_OK)
        st = encode_all(&c, text, len, add_special);
    pcre2_jit_stack_free(c.js);
    pcre2_match_context_free(c.mc);
    pcre2_match_data_free(c.md);
    gp_bpe_scratch_free(c.bpe);
    free(c.buf);
    free(c.nbuf);
    if (st != GP_OK) {
        free(out.v);
        return st;
    }
    if (!out.v) { /* empty text: still a valid, freeable pointer */
        out.v = malloc(sizeof *out.v);
        if (!out.v)
            GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate the id list");
    }
    *ids = out.v;
    *n = out.n;
    return GP_OK;
}
