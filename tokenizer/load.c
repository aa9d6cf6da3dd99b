/* Loading: tells a tokenizer.json, a tiktoken ranks file and a SentencePiece
 * protobuf apart, hands each to its reader; the lookups every form shares. */
#include "tok_impl.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Llama 3's tokenizer.json is ~9 MB and the largest HF ones ~35 MB: the cap
 * only stops a wrong path (a weights file) from being read whole. */
#define GP_TOKENIZER_FILE_CAP ((size_t)512 << 20)

gp_status gp_tok_alloc(gp_tokenizer **out, gp_tok_kind kind)
{
    gp_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate the tokenizer");
    t->kind = kind;
    t->unk_id = -1;
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    *out = t;
    return GP_OK;
}

gp_status gp_tok_set_ids(gp_tokenizer *t, int32_t n_ids)
{
    t->toks = calloc((size_t)n_ids, sizeof *t->toks);
    if (!t->toks)
        GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate %d tokens", (int)n_ids);
    for (int32_t i = 0; i < n_ids; i++)
        t->toks[i].byte = -1;
    t->n_ids = n_ids;
    return GP_OK;
}

void gp_tokenizer_free(gp_tokenizer *t)
{
    if (!t)
        return;
    gp_strtab_free(&t->by_str);
    gp_strtab_free(&t->by_bytes);
    gp_pairtab_free(&t->merges);
    pcre2_code_free(t->re);
    free(t->toks);
    free(t->added);
    free(t->prefix);
    free(t->suffix);
    gp_arena_free(&t->arena);
    free(t);
}

/* The first line of a tiktoken ranks file: base64, one space, a rank. */
static bool looks_tiktoken(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '+' || s[i] == '/' || s[i] == '='))
        i++;
    if (i == 0 || i >= n || s[i] != ' ')
        return false;
    size_t d = ++i;
    while (i < n && isdigit((unsigned char)s[i]))
        i++;
    return i > d && (i == n || s[i] == '\n' || s[i] == '\r');
}

gp_status gp_tokenizer_load(const char *path, gp_tokenizer **out)
{
    if (!path || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_tokenizer_load: path or out is NULL");
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    GP_TRY(gp_read_file(path, GP_TOKENIZER_FILE_CAP, &text, &len));
    size_t i = 0;
    while (i < len && isspace((unsigned char)text[i]))
        i++;
    gp_tokenizer *t = NULL;
    gp_status st;
    if (i < len && text[i] == '{') {
        st = gp_tok_alloc(&t, GP_TOK_BYTELEVEL); /* the reader sets the kind */
        if (st == GP_OK)
            st = gp_tok_load_json(t, path, text, len);
    } else if (looks_tiktoken(text, len)) {
        st = gp_tok_alloc(&t, GP_TOK_TIKTOKEN);
        if (st == GP_OK)
            st = gp_tok_load_tiktoken(t, path, text, len);
    } else if (len > 0 && (text[0] == 0x0a || memchr(text, '\0', len < 256 ? len : 256))) {
        /* a SentencePiece ModelProto opens with field 1 (pieces), tag 0x0a */
        gp_set_error("%s: a SentencePiece protobuf model (binary), which greenpipe does not read; supported: "
                     "a HF tokenizer.json, or a tiktoken-format tokenizer.model (Llama 3: lines of "
                     "'base64-token rank')", path);
        st = GP_ERR_UNSUPPORTED;
    } else {
        gp_set_error("%s: neither a HF tokenizer.json (JSON object) nor a tiktoken-format tokenizer.model "
                     "(lines of 'base64-token rank')", path);
        st = GP_ERR_FORMAT;
    }
    free(text);
    if (st != GP_OK) {
        gp_tokenizer_free(t);
        return st;
    }
    *out = t;
    return GP_OK;
}

gp_status gp_tokenizer_load_dir(const char *dir, gp_tokenizer **out)
{
    if (!dir || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_tokenizer_load_dir: dir or out is NULL");
    *out = NULL;
    static const char *const names[] = {"tokenizer.json", "tokenizer.model"};
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(dir) + strlen(names[k]) + 2;
        char *p = malloc(n);
        if (!p)
            GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate a path");
        snprintf(p, n, "%s/%s", dir, names[k]);
        int fd;
        uint64_t size;
        bool regular;
        gp_status st = gp_file_open(p, &fd, &size, &regular);
        if (st == GP_OK) {
            close(fd); /* only whether it exists: the reader opens it again */
            st = gp_tokenizer_load(p, out);
            free(p);
            /* a tiktoken ranks file has no BOS of its own: the checkpoint's config names it */
            if (st == GP_OK && k == 1 && (*out)->kind == GP_TOK_TIKTOKEN &&
                (st = gp_tok_tiktoken_bos(*out, dir)) != GP_OK) {
                gp_tokenizer_free(*out);
                *out = NULL;
            }
            return st;
        }
        free(p);
        if (st != GP_ERR_NOT_FOUND)
            return st;
    }
    GP_FAIL(GP_ERR_NOT_FOUND, "%s: no tokenizer: looked for %s/tokenizer.json and %s/tokenizer.model", dir, dir, dir);
}

int32_t gp_tokenizer_vocab_size(const gp_tokenizer *t)
{
    return t ? t->n_ids : 0;
}

int32_t gp_tokenizer_bos_id(const gp_tokenizer *t)
{
    return t && t->n_prefix ? t->prefix[0] : -1;
}

int32_t gp_tokenizer_token_id(const gp_tokenizer *t, const char *token)
{
    if (!t || !token)
        return -1;
    size_t n = strlen(token);
    int32_t id = gp_strtab_get(&t->by_str, token, n);
    if (id < 0 && t->kind == GP_TOK_TIKTOKEN)
        id = gp_strtab_get(&t->by_bytes, token, n);
    return id;
}
