/* The BOS of a tiktoken tokenizer.model: the ranks file holds no special
 * tokens, so the checkpoint's config says it, as HF's Llama 3 tokenizer adds
 * bos_token_id before every encoded text unless add_bos_token is false. */
#include "tok_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* dir/name as JSON, or NULL with *found false when the file is absent. */
static gp_status read_json(const char *dir, const char *name, json_t **out, bool *found)
{
    *out = NULL;
    *found = false;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s/%s: path too long", dir, name);
    char *text = NULL;
    size_t len = 0;
    gp_status st = gp_read_file(path, (size_t)16 << 20, &text, &len);
    if (st == GP_ERR_NOT_FOUND) {
        gp_clear_error();
        return GP_OK;
    }
    GP_TRY(st);
    json_error_t e;
    *out = json_loadb(text, len, 0, &e);
    free(text);
    if (!*out || !json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        GP_FAIL(GP_ERR_FORMAT, "%s: not a JSON object (%s, line %d)", path, e.text, e.line);
    }
    *found = true;
    return GP_OK;
}

gp_status gp_tok_tiktoken_bos(gp_tokenizer *t, const char *dir)
{
    json_t *tc = NULL, *cfg = NULL;
    bool found;
    GP_TRY(read_json(dir, "tokenizer_config.json", &tc, &found));
    json_t *add = tc ? json_object_get(tc, "add_bos_token") : NULL;
    gp_status st = GP_OK;
    if (add && !json_is_boolean(add)) {
        gp_set_error("%s/tokenizer_config.json: add_bos_token is not true or false", dir);
        st = GP_ERR_FORMAT;
    }
    bool want = !add || json_is_true(add); /* HF's Llama tokenizers default to adding it */
    json_decref(tc);
    if (st != GP_OK || !want)
        return st;
    GP_TRY(read_json(dir, "config.json", &cfg, &found));
    json_t *bos = cfg ? json_object_get(cfg, "bos_token_id") : NULL;
    json_t *vocab = cfg ? json_object_get(cfg, "vocab_size") : NULL;
    if (!bos || json_is_null(bos)) { /* no BOS known: the text alone, as HF would */
        json_decref(cfg);
        return GP_OK;
    }
    json_int_t id = json_is_integer(bos) ? json_integer_value(bos) : -1;
    json_int_t limit = json_is_integer(vocab) ? json_integer_value(vocab) : INT32_MAX;
    json_decref(cfg);
    if (id < 0 || id >= limit)
        GP_FAIL(GP_ERR_FORMAT, "%s/config.json: bos_token_id is not a token id in [0, %lld) (the vocabulary "
                "of the tiktoken tokenizer.model's checkpoint)", dir, (long long)limit);
    int32_t *p = malloc(sizeof *p);
    if (!p)
        GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate the BOS");
    p[0] = (int32_t)id;
    free(t->prefix);
    t->prefix = p;
    t->n_prefix = 1;
    return GP_OK;
}
