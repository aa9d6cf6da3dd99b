/* HF tokenizer.json: the BPE model (vocab, merges in either JSON form,
 * options), added tokens, and the normalizer / pre-tokenizer /
 * post-processor / decoder combinations of byte-level (Llama 3, Qwen2 with
 * its NFC normalizer, GPT-2) and SentencePiece-style (Llama 2, Mistral: the
 * Prepend/Replace normalizer or the Metaspace pre-tokenizer) tokenizers. Anything
 * else is refused by name rather than tokenized differently from HF. */
#include "tok_impl.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define SP_SPACE "\xe2\x96\x81" /* ▁ U+2581, SentencePiece's visible space */

typedef struct jctx {
    gp_tokenizer *t;
    const char *path;
    bool bytelevel_pre, has_split;
} jctx;

static const char *jtype(const json_t *o)
{
    const char *s = json_string_value(json_object_get(o, "type"));
    return s ? s : "(no type)";
}

static bool jtype_is(const json_t *o, const char *type)
{
    return json_is_object(o) && !strcmp(jtype(o), type);
}

static bool jbool(const json_t *o, const char *key, bool dflt)
{
    const json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* pattern {"String": s} (literal) equal to want */
static bool jstring_pattern(const json_t *o, const char *want)
{
    const char *s = json_string_value(json_object_get(json_object_get(o, "pattern"), "String"));
    return s && !strcmp(s, want);
}

/* Metaspace's prepend_scheme: the field, else the older add_prefix_space
 * (true: always), else HF's default, always. */
static gp_status ms_scheme(jctx *c, const json_t *p, const char *what, gp_ms_prepend *out)
{
    const char *rep = json_string_value(json_object_get(p, "replacement"));
    if (!rep || strcmp(rep, SP_SPACE))
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: %s Metaspace with replacement '%s' is not supported; supported: \""
                SP_SPACE "\" (U+2581)", c->path, what, rep ? rep : "(none)");
    const json_t *ps = json_object_get(p, "prepend_scheme");
    const char *scheme = json_string_value(ps);
    if (!ps || json_is_null(ps))
        *out = jbool(p, "add_prefix_space", true) ? GP_MS_ALWAYS : GP_MS_NEVER;
    else if (scheme && !strcmp(scheme, "first"))
        *out = GP_MS_FIRST;
    else if (scheme && !strcmp(scheme, "always"))
        *out = GP_MS_ALWAYS;
    else if (scheme && !strcmp(scheme, "never"))
        *out = GP_MS_NEVER;
    else
        GP_FAIL(GP_ERR_FORMAT, "%s: %s Metaspace prepend_scheme '%s' is unknown; allowed: first, always, never",
                c->path, what, scheme ? scheme : "(not a string)");
    return GP_OK;
}

static gp_status pre_one(jctx *c, const json_t *p)
{
    gp_tokenizer *t = c->t;
    if (t->metaspace)
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: pre_tokenizer '%s' after Metaspace is not supported; supported: Metaspace "
                "alone", c->path, jtype(p));
    if (jtype_is(p, "ByteLevel")) {
        if (c->bytelevel_pre)
            GP_FAIL(GP_ERR_UNSUPPORTED, "%s: pre_tokenizer has ByteLevel twice", c->path);
        c->bytelevel_pre = true;
        t->add_prefix_space = jbool(p, "add_prefix_space", true);
        if (jbool(p, "use_regex", true)) {
            if (c->has_split)
                GP_FAIL(GP_ERR_UNSUPPORTED, "%s: pre_tokenizer Split followed by ByteLevel(use_regex true) is not "
                        "supported; supported: Sequence[Split, ByteLevel(use_regex false)] or ByteLevel alone", c->path);
            return gp_tok_compile_regex(t, gp_tok_gpt2_pattern, strlen(gp_tok_gpt2_pattern), c->path);
        }
        return GP_OK;
    }
    if (jtype_is(p, "Split")) {
        const char *re = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
        const char *beh = json_string_value(json_object_get(p, "behavior"));
        if (!re || !beh || strcmp(beh, "Isolated") || jbool(p, "invert", false) || c->has_split || c->bytelevel_pre)
            GP_FAIL(GP_ERR_UNSUPPORTED, "%s: pre_tokenizer Split must have a Regex pattern, behavior Isolated and "
                    "invert false, and come once before ByteLevel (got behavior %s)", c->path, beh ? beh : "none");
        c->has_split = true;
        return gp_tok_compile_regex(t, re, strlen(re), c->path);
    }
    if (jtype_is(p, "Metaspace")) {
        if (c->bytelevel_pre || c->has_split)
            GP_FAIL(GP_ERR_UNSUPPORTED, "%s: pre_tokenizer Metaspace after '%s' is not supported; supported: "
                    "Metaspace alone", c->path, c->bytelevel_pre ? "ByteLevel" : "Split");
        t->metaspace = true;
        t->ms_split = jbool(p, "split", true);
        return ms_scheme(c, p, "pre_tokenizer", &t->ms_prepend);
    }
    GP_FAIL(GP_ERR_UNSUPPORTED, "%s: pre_tokenizer '%s' is not supported; supported: ByteLevel, "
            "Sequence[Split(Regex, Isolated), ByteLevel(use_regex false)], Metaspace(\"" SP_SPACE "\"), or null "
            "with the SentencePiece normalizer Sequence[Prepend(\"" SP_SPACE "\"), Replace(\" \", \"" SP_SPACE
            "\")]", c->path, jtype(p));
}

/* One normalizer step: NFC, or the SentencePiece Prepend / Replace. */
static gp_status norm_step(jctx *c, const json_t *s, bool in_seq)
{
    gp_tokenizer *t = c->t;
    const char *pre_s = json_string_value(json_object_get(s, "prepend"));
    const char *content = json_string_value(json_object_get(s, "content"));
    if (jtype_is(s, "NFC"))
        t->nfc = true;
    else if (in_seq && jtype_is(s, "Prepend") && pre_s && !strcmp(pre_s, SP_SPACE))
        t->sp_prepend = true;
    else if (in_seq && jtype_is(s, "Replace") && jstring_pattern(s, " ") && content && !strcmp(content, SP_SPACE))
        t->sp_replace = true;
    else
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: normalizer %s'%s' is not supported; supported: NFC, and with pre_tokenizer "
                "null the SentencePiece Sequence[Prepend(\"" SP_SPACE "\"), Replace(\" \", \"" SP_SPACE "\")] "
                "(NFC may join either)", c->path, in_seq ? "step " : "", jtype(s));
    return GP_OK;
}

static gp_status read_pre_and_norm(jctx *c, const json_t *root)
{
    gp_tokenizer *t = c->t;
    const json_t *pre = json_object_get(root, "pre_tokenizer"), *norm = json_object_get(root, "normalizer");
    if (pre && !json_is_null(pre)) {
        if (jtype_is(pre, "Sequence")) {
            size_t i;
            const json_t *p;
            json_array_foreach(json_object_get(pre, "pretokenizers"), i, p)
                GP_TRY(pre_one(c, p));
        } else {
            GP_TRY(pre_one(c, pre));
        }
        if (!c->bytelevel_pre && !t->metaspace)
            GP_FAIL(GP_ERR_UNSUPPORTED, "%s: a Split pre_tokenizer without ByteLevel is not supported", c->path);
    }
    /* NFC commutes with Prepend("▁") and Replace(" ", "▁") (neither a space
     * nor ▁ composes with anything), so its place in a Sequence is free */
    if (jtype_is(norm, "Sequence")) {
        size_t i;
        const json_t *s;
        json_array_foreach(json_object_get(norm, "normalizers"), i, s)
            GP_TRY(norm_step(c, s, true));
    } else if (norm && !json_is_null(norm)) {
        GP_TRY(norm_step(c, norm, false));
    }
    bool sp_norm = t->sp_prepend || t->sp_replace;
    if (c->bytelevel_pre || t->metaspace) {
        t->kind = c->bytelevel_pre ? GP_TOK_BYTELEVEL : GP_TOK_SP;
        if (sp_norm)
            GP_FAIL(GP_ERR_UNSUPPORTED, "%s: normalizer step '%s' with a %s pre_tokenizer is not supported; "
                    "supported: null, NFC", c->path, t->sp_prepend ? "Prepend" : "Replace",
                    c->bytelevel_pre ? "ByteLevel" : "Metaspace");
        return GP_OK;
    }
    t->kind = GP_TOK_SP;
    if (!t->sp_prepend || !t->sp_replace)
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: normalizer '%s' with pre_tokenizer null is not supported; supported: "
                "Sequence[Prepend(\"" SP_SPACE "\"), Replace(\" \", \"" SP_SPACE "\")] (SentencePiece-style BPE, "
                "NFC may join it), or a ByteLevel or Metaspace pre_tokenizer", c->path,
                norm && !json_is_null(norm) ? jtype(norm) : "null");
    return GP_OK;
}

/* A token's string, its decoded bytes and its BPE key. */
static gp_status set_token(jctx *c, int32_t id, const char *s, size_t n, bool bpe_key)
{
    gp_tokenizer *t = c->t;
    gp_token *k = &t->toks[id];
    char *str = gp_arena_dup(&t->arena, s, n);
    char *dec = gp_arena_alloc(&t->arena, n + 1);
    if (!str || !dec)
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory for token %d", c->path, (int)id);
    long dn;
    if (t->kind == GP_TOK_BYTELEVEL) {
        /* HF's ByteLevel decoder: a token wholly in the byte alphabet is its
         * bytes; any other (added tokens, mostly) is its own UTF-8 */
        dn = gp_bytelevel_decode(s, n, dec);
        if (dn < 0) {
            memcpy(dec, s, n);
            dn = (long)n;
        }
    } else {
        dn = 0;
        for (size_t i = 0; i < n;) {
            if (n - i >= 3 && !memcmp(s + i, SP_SPACE, 3)) {
                dec[dn++] = ' ';
                i += 3;
            } else {
                dec[dn++] = s[i++];
            }
        }
    }
    k->str = str;
    k->len = (uint32_t)n;
    k->dec = dec;
    k->dec_len = (uint32_t)dn;
    bool dup;
    GP_TRY(gp_strtab_put(&t->by_str, str, n, id, &dup));
    if (!bpe_key)
        return GP_OK;
    if (t->kind == GP_TOK_BYTELEVEL) {
        GP_TRY(gp_strtab_put(&t->by_bytes, dec, (size_t)dn, id, &dup));
        if (dn == 1 && t->byte_id[(unsigned char)dec[0]] < 0)
            t->byte_id[(unsigned char)dec[0]] = id;
    } else {
        GP_TRY(gp_strtab_put(&t->by_bytes, str, n, id, &dup));
    }
    return GP_OK;
}

static int cmp_added_len(const void *a, const void *b)
{
    const gp_added *x = a, *y = b;
    return x->len != y->len ? (x->len < y->len ? 1 : -1) : (x->id > y->id) - (x->id < y->id);
}

static gp_status read_vocab(jctx *c, const json_t *model, const json_t *added)
{
    gp_tokenizer *t = c->t;
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab) || json_object_size(vocab) == 0)
        GP_FAIL(GP_ERR_FORMAT, "%s: model.vocab must be a non-empty object of token -> id", c->path);
    int64_t max_id = -1;
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)vocab, key, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= INT32_MAX)
            GP_FAIL(GP_ERR_FORMAT, "%s: model.vocab: token '%s' has id %s; ids are integers in [0, %d)", c->path,
                    key, json_is_integer(v) ? "out of range" : "not an integer", INT32_MAX);
        if (id > max_id)
            max_id = id;
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (!json_is_string(json_object_get(v, "content")) || !json_is_integer(json_object_get(v, "id")) ||
            id < 0 || id >= INT32_MAX)
            GP_FAIL(GP_ERR_FORMAT, "%s: added_tokens[%zu] needs a string content and an id in [0, %d)", c->path, i,
                    INT32_MAX);
        if (id > max_id)
            max_id = id;
    }
    GP_TRY(gp_tok_set_ids(t, (int32_t)(max_id + 1)));
    GP_TRY(gp_strtab_init(&t->by_str, (size_t)max_id + 1));
    GP_TRY(gp_strtab_init(&t->by_bytes, (size_t)max_id + 1));
    json_object_foreach((json_t *)vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        if (t->toks[id].str)
            GP_FAIL(GP_ERR_FORMAT, "%s: model.vocab: id %d is given to '%s' and '%s'", c->path, (int)id,
                    t->toks[id].str, key);
        GP_TRY(set_token(c, id, key, strlen(key), true));
    }
    t->n_added = (int)json_array_size(added);
    if (t->n_added) {
        t->added = calloc((size_t)t->n_added, sizeof *t->added);
        if (!t->added)
            GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory for %d added tokens", c->path, t->n_added);
    }
    json_array_foreach(added, i, v) {
        const char *content = json_string_value(json_object_get(v, "content"));
        int32_t id = (int32_t)json_integer_value(json_object_get(v, "id"));
        size_t n = json_string_length(json_object_get(v, "content"));
        if (n == 0)
            GP_FAIL(GP_ERR_FORMAT, "%s: added_tokens[%zu] (id %d) has empty content", c->path, i, (int)id);
        bool special = jbool(v, "special", false), normalized = jbool(v, "normalized", !special);
        if (normalized && (t->sp_prepend || t->sp_replace))
            GP_FAIL(GP_ERR_UNSUPPORTED, "%s: added token '%s' is matched after normalization (normalized true), "
                    "which greenpipe does not support with the SentencePiece Prepend/Replace normalizer; "
                    "supported: normalized false", c->path, content);
        if (!t->toks[id].str)
            GP_TRY(set_token(c, id, content, n, false));
        else if (t->toks[id].len != n || memcmp(t->toks[id].str, content, n))
            GP_FAIL(GP_ERR_FORMAT, "%s: added token '%s' has id %d, the vocabulary's '%s'", c->path, content,
                    (int)id, t->toks[id].str);
        t->toks[id].added = true;
        t->toks[id].special = special;
        t->added[i] = (gp_added){.content = t->toks[id].str, .len = (uint32_t)n, .id = id,
                                 .lstrip = jbool(v, "lstrip", false), .rstrip = jbool(v, "rstrip", false),
                                 .single_word = jbool(v, "single_word", false), .special = special,
                                 .normalized = normalized};
        if (normalized)
            t->n_added_normalized++;
        if (normalized && t->nfc) { /* HF matches the normalized content in the normalized text */
            char *nb = NULL;
            size_t ncap = 0, nn = 0;
            gp_status st = gp_nfc(content, n, &nb, &ncap, &nn);
            const char *nc = st == GP_OK ? gp_arena_dup(&t->arena, nb, nn) : NULL;
            free(nb);
            GP_TRY(st);
            if (!nc)
                GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory for added token %d", c->path, (int)id);
            t->added[i].content = nc;
            t->added[i].len = (uint32_t)nn;
        }
    }
    if (t->n_added) /* longest first: the first match at a position is HF's leftmost-longest */
        qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_added_len);
    return GP_OK;
}

static gp_status merge_token(jctx *c, size_t i, const char *s, size_t n, int32_t *id)
{
    *id = gp_strtab_get(&c->t->by_str, s, n);
    if (*id < 0)
        GP_FAIL(GP_ERR_FORMAT, "%s: model.merges[%zu]: '%.*s' is not in the vocabulary", c->path, i, (int)n, s);
    return GP_OK;
}

static gp_status read_merges(jctx *c, const json_t *model)
{
    gp_tokenizer *t = c->t;
    const json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges))
        GP_FAIL(GP_ERR_FORMAT, "%s: model.merges must be a list of \"a b\" strings or [\"a\", \"b\"] pairs",
                c->path);
    size_t n = json_array_size(merges), i;
    if (n >= INT32_MAX)
        GP_FAIL(GP_ERR_FORMAT, "%s: model.merges has %zu entries, more than ranks can number", c->path, n);
    GP_TRY(gp_pairtab_init(&t->merges, n));
    size_t cap = 256;
    char *buf = malloc(cap);
    if (!buf)
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory reading merges", c->path);
    const json_t *m;
    gp_status st = GP_OK;
    json_array_foreach(merges, i, m) {
        const char *a, *b;
        size_t na, nb;
        if (json_is_string(m)) { /* "a b": the older form; tokens hold no spaces there */
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == a || !sp[1]) {
                gp_set_error("%s: model.merges[%zu] \"%s\" is not two tokens separated by one space", c->path, i, a);
                st = GP_ERR_FORMAT;
                break;
            }
            na = (size_t)(sp - a);
            b = sp + 1;
            nb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            na = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            nb = json_string_length(json_array_get(m, 1));
        } else {
            gp_set_error("%s: model.merges[%zu] is neither a \"a b\" string nor a [\"a\", \"b\"] pair", c->path, i);
            st = GP_ERR_FORMAT;
            break;
        }
        int32_t ia, ib, im;
        if ((st = merge_token(c, i, a, na, &ia)) != GP_OK || (st = merge_token(c, i, b, nb, &ib)) != GP_OK)
            break;
        if (na + nb + 1 > cap) {
            cap = 2 * (na + nb + 1);
            char *nbuf = realloc(buf, cap);
            if (!nbuf) {
                gp_set_error("%s: out of memory reading merges", c->path);
                st = GP_ERR_NO_MEMORY;
                break;
            }
            buf = nbuf;
        }
        memcpy(buf, a, na);
        memcpy(buf + na, b, nb);
        im = gp_strtab_get(&t->by_str, buf, na + nb);
        if (im < 0) {
            gp_set_error("%s: model.merges[%zu]: the merged token '%.*s' is not in the vocabulary", c->path, i,
                         (int)(na + nb), buf);
            st = GP_ERR_FORMAT;
            break;
        }
        if ((st = gp_pairtab_put(&t->merges, ia, ib, (int32_t)i, im)) != GP_OK)
            break;
    }
    free(buf);
    return st;
}

static gp_status read_model(jctx *c, const json_t *root)
{
    gp_tokenizer *t = c->t;
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        GP_FAIL(GP_ERR_FORMAT, "%s: no \"model\" object", c->path);
    const char *type = json_string_value(json_object_get(model, "type"));
    if (type ? strcmp(type, "BPE") != 0 : !json_object_get(model, "merges"))
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: model type '%s' is not supported; supported: BPE (byte-level as in "
                "Llama 3 / Qwen2 / GPT-2, or SentencePiece-style with byte_fallback as in Llama 2 / Mistral)",
                c->path, type ? type : "(none)");
    const json_t *drop = json_object_get(model, "dropout");
    if (drop && !json_is_null(drop) && json_number_value(drop) != 0.0)
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: BPE dropout %g is not supported (encoding would be random); supported: null",
                c->path, json_number_value(drop));
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const char *s = json_string_value(json_object_get(model, affixes[k]));
        if (s && *s)
            GP_FAIL(GP_ERR_UNSUPPORTED, "%s: BPE %s '%s' is not supported; supported: null", c->path, affixes[k], s);
    }
    t->ignore_merges = jbool(model, "ignore_merges", false);
    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->fuse_unk = jbool(model, "fuse_unk", false);
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added) && !json_is_null(added))
        GP_FAIL(GP_ERR_FORMAT, "%s: added_tokens must be a list", c->path);
    GP_TRY(read_vocab(c, model, added));
    GP_TRY(read_merges(c, model));
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    if (unk && (t->unk_id = gp_strtab_get(&t->by_str, unk, strlen(unk))) < 0)
        GP_FAIL(GP_ERR_FORMAT, "%s: model.unk_token '%s' is not in the vocabulary", c->path, unk);
    if (t->kind == GP_TOK_SP && t->byte_fallback)
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_id[b] = gp_strtab_get(&t->by_str, name, 6);
        }
    return GP_OK;
}

static gp_status template_ids(jctx *c, const json_t *tp)
{
    gp_tokenizer *t = c->t;
    const json_t *single = json_object_get(tp, "single"), *specials = json_object_get(tp, "special_tokens");
    if (!json_is_array(single))
        GP_FAIL(GP_ERR_FORMAT, "%s: post_processor TemplateProcessing has no 'single' list", c->path);
    size_t n_ids = 0, i;
    const json_t *it;
    json_array_foreach(single, i, it) {
        const json_t *sp = json_object_get(it, "SpecialToken");
        if (sp)
            n_ids += json_array_size(json_object_get(json_object_get(specials,
                                     json_string_value(json_object_get(sp, "id")) ?: ""), "ids"));
    }
    t->prefix = calloc(n_ids + 1, sizeof *t->prefix);
    t->suffix = calloc(n_ids + 1, sizeof *t->suffix);
    if (!t->prefix || !t->suffix)
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory", c->path);
    bool seen_a = false;
    json_array_foreach(single, i, it) {
        const json_t *sp = json_object_get(it, "SpecialToken"), *seq = json_object_get(it, "Sequence");
        if (seq) {
            const char *sid = json_string_value(json_object_get(seq, "id"));
            if (seen_a || !sid || strcmp(sid, "A"))
                GP_FAIL(GP_ERR_UNSUPPORTED, "%s: post_processor TemplateProcessing single[%zu]: only one "
                        "Sequence A is supported", c->path, i);
            seen_a = true;
            continue;
        }
        const char *name = json_string_value(json_object_get(sp, "id"));
        const json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (!name || !json_is_array(ids))
            GP_FAIL(GP_ERR_FORMAT, "%s: post_processor TemplateProcessing single[%zu]: special token '%s' has no "
                    "ids in special_tokens", c->path, i, name ? name : "(none)");
        size_t k;
        const json_t *idv;
        json_array_foreach(ids, k, idv) {
            json_int_t id = json_integer_value(idv);
            if (!json_is_integer(idv) || id < 0 || id >= t->n_ids)
                GP_FAIL(GP_ERR_FORMAT, "%s: post_processor special token '%s': id outside [0, %d)", c->path, name,
                        (int)t->n_ids);
            if (seen_a)
                t->suffix[t->n_suffix++] = (int32_t)id;
            else
                t->prefix[t->n_prefix++] = (int32_t)id;
        }
    }
    return GP_OK;
}

static gp_status read_post(jctx *c, const json_t *root)
{
    const json_t *pp = json_object_get(root, "post_processor");
    if (!pp || json_is_null(pp) || jtype_is(pp, "ByteLevel"))
        return GP_OK; /* ByteLevel only trims offsets, which greenpipe does not report */
    if (jtype_is(pp, "TemplateProcessing"))
        return template_ids(c, pp);
    if (jtype_is(pp, "Sequence")) {
        size_t i;
        const json_t *p;
        bool done = false;
        json_array_foreach(json_object_get(pp, "processors"), i, p) {
            if (jtype_is(p, "ByteLevel"))
                continue;
            if (!jtype_is(p, "TemplateProcessing") || done)
                GP_FAIL(GP_ERR_UNSUPPORTED, "%s: post_processor Sequence step '%s' is not supported; supported: "
                        "ByteLevel and one TemplateProcessing", c->path, jtype(p));
            GP_TRY(template_ids(c, p));
            done = true;
        }
        return GP_OK;
    }
    GP_FAIL(GP_ERR_UNSUPPORTED, "%s: post_processor '%s' is not supported; supported: TemplateProcessing, "
            "ByteLevel, Sequence of those, or null", c->path, jtype(pp));
}

static gp_status read_decoder(jctx *c, const json_t *root)
{
    gp_tokenizer *t = c->t;
    const json_t *d = json_object_get(root, "decoder");
    if (t->kind == GP_TOK_BYTELEVEL) {
        if (!jtype_is(d, "ByteLevel"))
            GP_FAIL(GP_ERR_UNSUPPORTED, "%s: decoder '%s' with a byte-level tokenizer is not supported; supported: "
                    "ByteLevel", c->path, d && !json_is_null(d) ? jtype(d) : "null");
        return GP_OK;
    }
    if (jtype_is(d, "Metaspace")) { /* newer Llama / Mistral files; byte tokens are not turned back into bytes */
        gp_ms_prepend scheme;
        GP_TRY(ms_scheme(c, d, "decoder", &scheme));
        t->ms_decoder = true;
        t->ms_dec_first = scheme != GP_MS_NEVER;
        return GP_OK;
    }
    /* The SentencePiece chain, in this order: Strip acts on the fused text,
     * so only the first space of the whole output goes. */
    const json_t *steps = jtype_is(d, "Sequence") ? json_object_get(d, "decoders") : NULL;
    const json_t *s0 = json_array_get(steps, 0), *s1 = json_array_get(steps, 1), *s2 = json_array_get(steps, 2),
                 *s3 = json_array_get(steps, 3);
    const char *rc = json_string_value(json_object_get(s0, "content"));
    const char *sc = json_string_value(json_object_get(s3, "content"));
    if (json_array_size(steps) != 4 || !jtype_is(s0, "Replace") || !jstring_pattern(s0, SP_SPACE) || !rc ||
        strcmp(rc, " ") || !jtype_is(s1, "ByteFallback") || !jtype_is(s2, "Fuse") || !jtype_is(s3, "Strip") || !sc ||
        strcmp(sc, " ") || json_integer_value(json_object_get(s3, "start")) != 1 ||
        json_integer_value(json_object_get(s3, "stop")) != 0)
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: decoder '%s' is not supported with a SentencePiece-style tokenizer; "
                "supported: Sequence[Replace(\"" SP_SPACE "\", \" \"), ByteFallback, Fuse, Strip(\" \", 1, 0)] or "
                "Metaspace(\"" SP_SPACE "\")",
                c->path, d && !json_is_null(d) ? jtype(d) : "null");
    t->strip_lead_space = true;
    for (int32_t id = 0; id < t->n_ids; id++) {
        gp_token *k = &t->toks[id];
        unsigned v;
        char tail;
        if (k->str && k->len == 6 && !memcmp(k->str, "<0x", 3) && sscanf(k->str + 3, "%2X%c", &v, &tail) == 2 &&
            tail == '>')
            k->byte = (int16_t)v;
    }
    return GP_OK;
}

gp_status gp_tok_load_json(gp_tokenizer *t, const char *path, const char *text, size_t len)
{
    json_error_t e;
    json_t *root = json_loadb(text, len, 0, &e);
    if (!root)
        GP_FAIL(GP_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", path, e.line, e.column, e.text);
    jctx c = {.t = t, .path = path};
    gp_status st = json_is_object(root) ? GP_OK : GP_ERR_FORMAT;
    if (st != GP_OK)
        gp_set_error("%s: not a JSON object", path);
    if (st == GP_OK)
        st = read_pre_and_norm(&c, root);
    if (st == GP_OK)
        st = read_model(&c, root);
    if (st == GP_OK)
        st = read_post(&c, root);
    if (st == GP_OK)
        st = read_decoder(&c, root);
    json_decref(root);
    return st;
}
