/* The supported chat templates: names, BOS and end-of-turn texts, the stop
 * texts, and lookup by --chat-template NAME. */
#include "chat_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <strings.h>

#define L3_STOPS {"<|eot_id|>", "<|end_of_text|>", NULL}
/* Llama 3.1's generation config also stops at <|eom_id|> (end of a tool
 * message). */
#define L31_STOPS {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", NULL}
/* Qwen2's generation config stops at both. */
#define CHATML_STOPS {"<|im_end|>", "<|endoftext|>", NULL}
#define SP_STOPS {"</s>", NULL}

const struct gp_chat_template gp_chat_templates[] = {
    {"llama3", CHAT_LLAMA3, "<|begin_of_text|>", "<|eot_id|>", L3_STOPS, NULL, ""},
    {"llama3.1", CHAT_LLAMA31, "<|begin_of_text|>", "<|eot_id|>", L31_STOPS, NULL, ""},
    {"chatml", CHAT_CHATML, "", "<|im_end|>", CHATML_STOPS, NULL, ""},
    {"qwen2", CHAT_CHATML, "", "<|im_end|>", CHATML_STOPS, "You are a helpful assistant.", ""},
    {"qwen2.5", CHAT_CHATML, "", "<|im_end|>", CHATML_STOPS,
     "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", ""},
    {"mistral", CHAT_MISTRAL, "<s>", "</s>", SP_STOPS, NULL, " "},
    {"mistral-v3", CHAT_MISTRAL_V3, "<s>", "</s>", SP_STOPS, NULL, " "},
    {"llama2", CHAT_LLAMA2, "<s>", "</s>", SP_STOPS, NULL, " "},
};
const size_t gp_chat_n_templates = sizeof gp_chat_templates / sizeof gp_chat_templates[0];

/* The names, joined from the table once: the table is their one home. */
static char names[256];

static void join_names(void)
{
    size_t at = 0;
    for (size_t i = 0; i < gp_chat_n_templates && at < sizeof names; i++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", gp_chat_templates[i].name);
}

const char *gp_chat_template_names(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, join_names);
    return names;
}

gp_status gp_chat_template_by_name(const char *name, const gp_chat_template **out)
{
    if (!name || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_chat_template_by_name: name and out must not be NULL");
    for (size_t i = 0; i < gp_chat_n_templates; i++)
        if (strcasecmp(name, gp_chat_templates[i].name) == 0) {
            *out = &gp_chat_templates[i];
            return GP_OK;
        }
    GP_FAIL(GP_ERR_INVALID_ARG, "--chat-template '%s' is not a template greenpipe has. supported: %s", name,
            gp_chat_template_names());
}

const char *gp_chat_template_name(const gp_chat_template *t)
{
    return t->name;
}

const char *gp_chat_template_bos_text(const gp_chat_template *t)
{
    return t->bos;
}

const char *gp_chat_template_eot_text(const gp_chat_template *t)
{
    return t->eot;
}

const char *const *gp_chat_template_stop_texts(const gp_chat_template *t)
{
    return t->stops;
}

const char *gp_chat_template_reply_lead(const gp_chat_template *t)
{
    return t->reply_lead;
}
