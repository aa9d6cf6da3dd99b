/* Which supported template a model's Jinja chat_template is, from the
 * markers each family's template has, and reading it from a model folder. */
#include "chat_impl.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const gp_chat_template *named(const char *name)
{
    const gp_chat_template *t = NULL;
    gp_chat_template_by_name(name, &t);
    return t;
}

static bool has(const char *s, const char *marker)
{
    return strstr(s, marker) != NULL;
}

/* A quoted Jinja string holding a ChatML system turn with fixed text. The
 * templates write the newline as the escape \n; the multi-line ones may hold
 * it raw. */
static bool has_system_turn(const char *s, const char *text)
{
    char a[256], b[256];
    snprintf(a, sizeof a, "<|im_start|>system\\n%s<|im_end|>", text);
    snprintf(b, sizeof b, "<|im_start|>system\n%s<|im_end|>", text);
    return has(s, a) || has(s, b);
}

/* Any other text right after "<|im_start|>system\n" in a string literal: a
 * default system message greenpipe would not reproduce. */
static bool has_other_default_system(const char *s)
{
    const char *forms[] = {"<|im_start|>system\\n", "<|im_start|>system\n"};
    for (int f = 0; f < 2; f++) {
        size_t k = strlen(forms[f]);
        for (const char *p = strstr(s, forms[f]); p; p = strstr(p + 1, forms[f])) {
            char c = p[k];
            if (c != '\'' && c != '"' && c != '\0')
                return true;
        }
    }
    return false;
}

static gp_status refuse(const char *what)
{
    GP_FAIL(GP_ERR_UNSUPPORTED,
            "the model's chat template is not one greenpipe renders: %s. supported: %s; if the model was trained "
            "on one of them, choose it with --chat-template NAME",
            what, gp_chat_template_names());
}

static gp_status found(const char *name, const gp_chat_template **out)
{
    *out = named(name);
    return GP_OK;
}

gp_status gp_chat_template_detect(const char *j, const gp_chat_template **out)
{
    if (!j || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_chat_template_detect: template text and out must not be NULL");
    if (has(j, "<|start_header_id|>")) {
        if (has(j, "Cutting Knowledge Date")) {
            if (has(j, "strftime_now"))
                return refuse("Llama 3.1 markers with the date taken from the clock (strftime_now, as Llama 3.2 "
                              "has it), so the prompt would change with the day; llama3.1 renders the fixed "
                              "date 26 Jul 2024");
            return found("llama3.1", out);
        }
        if (has(j, "<|eot_id|>") && has(j, "'<|start_header_id|>' + message['role'] + '<|end_header_id|>"))
            return found("llama3", out);
        return refuse("Llama 3 markers (<|start_header_id|>) in a layout greenpipe does not know");
    }
    if (has(j, "<|im_start|>")) {
        if (has(j, "<think>") || has(j, "enable_thinking"))
            return refuse("ChatML markers (<|im_start|>) with reasoning turns (<think>)");
        if (has(j, "bos_token"))
            return refuse("ChatML markers (<|im_start|>) after bos_token");
        if (has_system_turn(j, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."))
            return found("qwen2.5", out);
        if (has_system_turn(j, "You are a helpful assistant."))
            return found("qwen2", out);
        if (has_other_default_system(j))
            return refuse("ChatML markers (<|im_start|>) with a default system message greenpipe does not know");
        return found("chatml", out);
    }
    if (has(j, "<<SYS>>")) {
        if (has(j, "[INST]") && has(j, "content.strip()") && has(j, "bos_token + '[INST] '"))
            return found("llama2", out);
        return refuse("Llama 2 markers (<<SYS>>, [INST]) in a layout greenpipe does not know");
    }
    if (has(j, "[INST]")) {
        if (has(j, "\"[INST] \" + system_message") && has(j, "loop.last and system_message is defined"))
            return found("mistral-v3", out);
        if (has(j, "' [INST] ' + system_message"))
            return found("mistral", out);
        if (has(j, "'[INST] ' + message['content'] + ' [/INST]'"))
            return refuse("the 2023 Mistral [INST] template (no system message; \"[INST] \" without the space "
                          "before it that the current Mistral v0.1 / v0.2 template, --chat-template mistral, "
                          "has)");
        return refuse("Mistral markers ([INST]) in a layout greenpipe does not know");
    }
    if (has(j, "<start_of_turn>"))
        return refuse("Gemma markers (<start_of_turn>)");
    return refuse("none of the markers of the supported families (<|start_header_id|>, <|im_start|>, [INST], "
                  "<<SYS>>)");
}

static gp_status no_template(const char *dir, const char *why)
{
    GP_FAIL(GP_ERR_NOT_FOUND, "no chat template in %s: %s. choose one with --chat-template NAME (supported: %s)",
            dir, why, gp_chat_template_names());
}

/* "chat_template": a string, or [{"name", "template"}...] of which
 * "default" is the one apply_chat_template uses. */
static gp_status from_config(const char *path, const gp_chat_template **out, bool *absent)
{
    char *data = NULL;
    size_t len = 0;
    *absent = false;
    gp_status s = gp_read_file(path, (size_t)64 << 20, &data, &len);
    if (s == GP_ERR_NOT_FOUND) {
        *absent = true;
        return s;
    }
    GP_TRY(s);
    json_error_t e;
    json_t *root = json_loadb(data, len, 0, &e);
    free(data);
    if (!root)
        GP_FAIL(GP_ERR_FORMAT, "%s: not JSON (line %d: %s)", path, e.line, e.text);
    json_t *ct = json_is_object(root) ? json_object_get(root, "chat_template") : NULL;
    const char *text = NULL;
    if (json_is_string(ct)) {
        text = json_string_value(ct);
    } else if (json_is_array(ct)) {
        size_t i;
        json_t *v;
        json_array_foreach(ct, i, v) {
            const char *nm = json_string_value(json_object_get(v, "name"));
            if (nm && strcmp(nm, "default") == 0)
                text = json_string_value(json_object_get(v, "template"));
        }
        if (!text) {
            json_decref(root);
            GP_FAIL(GP_ERR_FORMAT, "%s: chat_template is a list without a template named 'default'. choose one "
                    "with --chat-template NAME (supported: %s)", path, gp_chat_template_names());
        }
    } else if (ct && !json_is_null(ct)) {
        json_decref(root);
        GP_FAIL(GP_ERR_FORMAT, "%s: chat_template is neither a string nor a list of {name, template}", path);
    }
    if (!text) {
        json_decref(root);
        *absent = true;
        return GP_ERR_NOT_FOUND;
    }
    s = gp_chat_template_detect(text, out);
    json_decref(root);
    return s;
}

gp_status gp_chat_template_load_dir(const char *dir, const gp_chat_template **out)
{
    if (!dir || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_chat_template_load_dir: dir and out must not be NULL");
    char cfg[4096], jinja[4096];
    if ((size_t)snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir) >= sizeof cfg ||
        (size_t)snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir) >= sizeof jinja)
        GP_FAIL(GP_ERR_INVALID_ARG, "model folder path is too long (%zu bytes)", strlen(dir));
    bool absent;
    gp_status s = from_config(cfg, out, &absent);
    if (!absent)
        return s;
    /* newer transformers save the template beside the config */
    char *text = NULL;
    size_t len = 0;
    s = gp_read_file(jinja, (size_t)16 << 20, &text, &len);
    if (s == GP_ERR_NOT_FOUND)
        return no_template(dir, "neither tokenizer_config.json with a chat_template nor chat_template.jinja");
    GP_TRY(s);
    s = gp_chat_template_detect(text, out);
    free(text);
    return s;
}
