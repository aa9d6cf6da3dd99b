/* End-of-sequence ids of a checkpoint for greenpipe generate, read from
 * generation_config.json and config.json as transformers' generate does. */
#include "gp_tools.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GP_EOS_FILE_MAX_BYTES (16u << 20) /* both files are a few KB */

static gp_status add_id(json_t *v, const char *label, int vocab, gp_eos_ids *out)
{
    if (!json_is_integer(v))
        GP_FAIL(GP_ERR_FORMAT, "%s: eos_token_id: expected an integer token id or a list of them", label);
    json_int_t id = json_integer_value(v);
    if (id < 0 || id >= vocab)
        GP_FAIL(GP_ERR_FORMAT, "%s: eos_token_id %lld is outside the vocabulary; allowed: [0, %d]", label,
                (long long)id, vocab - 1);
    if (gp_eos_has(out, (int32_t)id))
        return GP_OK;
    if (out->n == GP_EOS_MAX)
        GP_FAIL(GP_ERR_FORMAT, "%s: eos_token_id: more than %d ids", label, GP_EOS_MAX);
    out->ids[out->n++] = (int32_t)id;
    return GP_OK;
}

gp_status gp_eos_parse_json(const char *text, size_t len, const char *label, int vocab, gp_eos_ids *out,
                            bool *found)
{
    memset(out, 0, sizeof *out);
    *found = false;
    if (memchr(text, '\0', len)) /* jansson would stop there without a word */
        GP_FAIL(GP_ERR_FORMAT, "%s: invalid JSON: a NUL byte", label);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (!root)
        GP_FAIL(GP_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", label, jerr.line, jerr.column,
                jerr.text);
    gp_status st = GP_OK;
    json_t *v = json_is_object(root) ? json_object_get(root, "eos_token_id") : NULL;
    if (!json_is_object(root)) {
        gp_set_error("%s: expected a JSON object", label);
        st = GP_ERR_FORMAT;
    } else if (v && json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if ((st = add_id(e, label, vocab, out)) != GP_OK)
                break;
        }
        *found = st == GP_OK; /* an empty list names no EOS: generation runs --steps */
    } else if (v && !json_is_null(v)) {
        st = add_id(v, label, vocab, out);
        *found = st == GP_OK;
    }
    json_decref(root);
    return st;
}

static gp_status load_one(const char *dir, const char *name, int vocab, bool required, gp_eos_ids *out,
                          bool *found)
{
    size_t plen = strlen(dir) + strlen(name) + 2;
    char *path = malloc(plen);
    if (!path)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for a path");
    snprintf(path, plen, "%s/%s", dir, name);
    char *buf = NULL;
    size_t n = 0;
    gp_status st = gp_read_file(path, GP_EOS_FILE_MAX_BYTES, &buf, &n);
    if (st == GP_ERR_NOT_FOUND && !required) {
        memset(out, 0, sizeof *out);
        *found = false;
        st = GP_OK;
    } else if (st == GP_OK) {
        st = gp_eos_parse_json(buf, n, path, vocab, out, found);
    }
    free(buf);
    free(path);
    return st;
}

gp_status gp_eos_load_dir(const char *dir, int vocab, gp_eos_ids *out)
{
    bool found = false;
    GP_TRY(load_one(dir, "generation_config.json", vocab, false, out, &found));
    if (found) {
        out->from = "generation_config.json";
        return GP_OK;
    }
    GP_TRY(load_one(dir, "config.json", vocab, true, out, &found));
    out->from = found ? "config.json" : NULL;
    return GP_OK;
}

bool gp_eos_has(const gp_eos_ids *e, int32_t id)
{
    for (int i = 0; i < e->n; i++)
        if (e->ids[i] == id)
            return true;
    return false;
}
