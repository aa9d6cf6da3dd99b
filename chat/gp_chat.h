/* Chat templates in C: render a conversation into a model's prompt text as
 * HF transformers' apply_chat_template does with the model's Jinja
 * chat_template, for the families greenpipe recognises (no Jinja engine).
 * Docs: docs/ARCHITECTURE.md §7. */
#ifndef GP_CHAT_H
#define GP_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gp_chat_role { GP_CHAT_SYSTEM = 0, GP_CHAT_USER, GP_CHAT_ASSISTANT } gp_chat_role;
const char *gp_chat_role_name(gp_chat_role r); /* "system", "user", "assistant" */

/* One message: content is len bytes of UTF-8 (not necessarily
 * NUL-terminated), borrowed from the caller. */
typedef struct gp_chat_msg {
    gp_chat_role role;
    const char *content;
    size_t len;
} gp_chat_msg;

/* A template is one of a fixed set, never freed. */
typedef struct gp_chat_template gp_chat_template;

/* "llama3, llama3.1, chatml, qwen2, qwen2.5, mistral, mistral-v3, llama2":
 * the names --chat-template takes, for messages. */
const char *gp_chat_template_names(void);
/* --chat-template NAME, any case; an unknown name is GP_ERR_INVALID_ARG
 * naming it and the supported names. */
gp_status gp_chat_template_by_name(const char *name, const gp_chat_template **out);
/* The family of a Jinja chat_template string (tokenizer_config.json): a
 * template that is none of the supported ones is GP_ERR_UNSUPPORTED naming
 * what was recognised in it and the supported names; never a guess. */
gp_status gp_chat_template_detect(const char *jinja, const gp_chat_template **out);
/* The chat_template of dir/tokenizer_config.json (a string, or a list of
 * {name, template} of which "default" is taken), else dir/chat_template.jinja,
 * detected as above. Neither present: GP_ERR_NOT_FOUND saying so and naming
 * --chat-template NAME and the supported names. */
gp_status gp_chat_template_load_dir(const char *dir, const gp_chat_template **out);

const char *gp_chat_template_name(const gp_chat_template *t); /* as by_name takes it */
/* The text the rendering begins with where the template adds BOS itself
 * ("<|begin_of_text|>", "<s>"), else "". The rendered text carries every
 * special token the model needs: tokenize it with special tokens parsed and
 * no BOS added (gp_tokenizer_encode(..., add_special=false, ...)). */
const char *gp_chat_template_bos_text(const gp_chat_template *t);
/* The token text that ends an assistant turn, which the model generates to
 * stop ("<|eot_id|>", "<|im_end|>", "</s>"). */
const char *gp_chat_template_eot_text(const gp_chat_template *t);
/* What the template puts between the generation prompt and the reply: " "
 * for the [INST] templates (mistral, mistral-v3, llama2), which the model's
 * first SentencePiece token carries ("\u2581Hi") and the detokenizer does
 * not print at the start; "" for the others. */
const char *gp_chat_template_reply_lead(const gp_chat_template *t);
/* Token texts generation stops at, besides the model's EOS ids (eot_text
 * first; e.g. "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"): map each with
 * gp_tokenizer_token_id and skip those absent (-1). NULL-terminated. */
const char *const *gp_chat_template_stop_texts(const gp_chat_template *t);

/* The prompt text of msgs[0..n) (n >= 1), with the assistant header at the
 * end when add_generation_prompt (templates without one, llama2 and the
 * mistral ones, end with [/INST] either way). A conversation the template
 * refuses (roles that do not alternate where the template requires it) is
 * GP_ERR_INVALID_ARG with the template's own message. *text malloc'd,
 * NUL-terminated, *len its length. */
gp_status gp_chat_render(const gp_chat_template *t, const gp_chat_msg *msgs, size_t n, bool add_generation_prompt,
                         char **text, size_t *len);
/* The text to prefill for a new user turn of a session that keeps its KV
 * cache: msgs[n-1] is the new user message, msgs[n-2] the assistant reply
 * just generated (its text as the detokenizer printed it), msgs[0..n-2) what
 * came before. The result D satisfies
 *   render(msgs, n, true) == render(msgs, n-2, true) + lead + reply + D
 * where lead is gp_chat_template_reply_lead(t), so D begins by closing the
 * reply (its end-of-turn text; llama2 puts a space before it). Where the
 * template does not render that way for this conversation (mistral-v3 moves
 * the system message into the last user turn; llama3 and llama2 strip a
 * reply with whitespace at its ends) it is GP_ERR_UNSUPPORTED saying so:
 * render the whole conversation and prefill it into a fresh sequence. */
gp_status gp_chat_render_delta(const gp_chat_template *t, const gp_chat_msg *msgs, size_t n, char **text,
                               size_t *len);

/* Messages from a JSON array of {"role": "system"|"user"|"assistant",
 * "content": string} (an OpenAI-style request body's "messages"). Anything
 * else is GP_ERR_INVALID_ARG naming the index, the value and what is
 * allowed. *msgs is malloc'd (free()); contents point into array's strings,
 * valid while array lives. An empty array is refused. */
struct json_t;
gp_status gp_chat_messages_from_json(const struct json_t *array, gp_chat_msg **msgs, size_t *n);

#ifdef __cplusplus
}
#endif

#endif
