/* Role names and messages from JSON (a chat request's "messages"). */
#include "chat_impl.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

const char *gp_chat_role_name(gp_chat_role r)
{
    switch (r) {
    case GP_CHAT_SYSTEM: return "system";
    case GP_CHAT_USER: return "user";
    case GP_CHAT_ASSISTANT: return "assistant";
    }
    return "unknown";
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "unknown";
}

gp_status gp_chat_messages_from_json(const struct json_t *array, gp_chat_msg **msgs, size_t *n)
{
    const json_t *a = (const json_t *)array;
    if (!msgs || !n)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_chat_messages_from_json: msgs and n must not be NULL");
    if (!a || !json_is_array(a))
        GP_FAIL(GP_ERR_INVALID_ARG, "messages: %s, not an array of {role, content}", a ? json_kind(a) : "missing");
    size_t count = json_array_size(a);
    if (count == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "messages: the array is empty. allowed: at least one message");
    gp_chat_msg *m = calloc(count, sizeof *m);
    if (!m)
        GP_FAIL(GP_ERR_NO_MEMORY, "messages: out of memory for %zu messages", count);
    for (size_t i = 0; i < count; i++) {
        const json_t *o = json_array_get(a, i);
        const char *bad = NULL;
        if (!json_is_object(o)) {
            gp_set_error("messages[%zu]: %s, not an object {role, content}", i, json_kind(o));
            bad = "";
        } else {
            const json_t *role = json_object_get(o, "role"), *content = json_object_get(o, "content");
            const char *r = json_string_value(role);
            if (!r) {
                gp_set_error("messages[%zu].role: %s. allowed: \"system\", \"user\", \"assistant\"", i,
                             role ? json_kind(role) : "missing");
                bad = "";
            } else if (strcmp(r, "system") == 0) {
                m[i].role = GP_CHAT_SYSTEM;
            } else if (strcmp(r, "user") == 0) {
                m[i].role = GP_CHAT_USER;
            } else if (strcmp(r, "assistant") == 0) {
                m[i].role = GP_CHAT_ASSISTANT;
            } else {
                gp_set_error("messages[%zu].role: '%s' is not supported. allowed: \"system\", \"user\", "
                             "\"assistant\"", i, r);
                bad = "";
            }
            if (!bad && !json_is_string(content)) {
                gp_set_error("messages[%zu].content: %s. allowed: a string (content parts, images and tool "
                             "calls are not supported)", i, content ? json_kind(content) : "missing");
                bad = "";
            }
            if (!bad) {
                m[i].content = json_string_value(content);
                m[i].len = json_string_length(content);
            }
        }
        if (bad) {
            free(m);
            return GP_ERR_INVALID_ARG;
        }
    }
    *msgs = m;
    *n = count;
    return GP_OK;
}
