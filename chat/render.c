/* The renderers: each family's template written out in C, byte for byte what
 * apply_chat_template gives (tests/chat/expected.json), and the delta of a
 * new user turn for sessions that keep their KV cache. */
#include "chat_impl.h"

#include <stdlib.h>
#include <string.h>

/* The templates' own refusals (their raise_exception texts), so a caller
 * sees what HF would have said. */
#define ALTERNATE_AFTER_SYSTEM \
    "After the optional system message, conversation roles must alternate user/assistant/user/assistant/..."
#define ONLY_USER_ASSISTANT \
    "Only user and assistant roles are supported, with the exception of an initial optional system message!"
#define ALTERNATE "Conversation roles must alternate user/assistant/user/assistant/..."

static gp_status refuse(const gp_chat_template *t, size_t i, const gp_chat_msg *m, const char *why)
{
    GP_FAIL(GP_ERR_INVALID_ARG, "chat template %s: %s (message %zu is %s)", t->name, why, i,
            gp_chat_role_name(m->role));
}

/* Bytes of valid UTF-8, as the Python strings the templates see. */
static gp_status check_utf8(const gp_chat_msg *m, size_t i)
{
    const unsigned char *s = (const unsigned char *)m->content;
    size_t n = m->len, at = 0;
    if (!s && n)
        GP_FAIL(GP_ERR_INVALID_ARG, "chat message %zu: content is NULL with length %zu", i, n);
    while (at < n) {
        unsigned char c = s[at];
        size_t k = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3
                 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
        bool ok = k > 0 && at + k <= n;
        for (size_t j = 1; ok && j < k; j++)
            ok = (s[at + j] & 0xc0) == 0x80;
        if (ok && k == 3) { /* no overlongs, no surrogates */
            uint32_t cp = ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[at + 1] & 0x3f) << 6);
            ok = cp >= 0x800 && !(cp >= 0xd800 && cp <= 0xdfff);
        }
        if (ok && k == 4) {
            uint32_t cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[at + 1] & 0x3f) << 12);
            ok = cp >= 0x10000 && cp <= 0x10ffff;
        }
        if (!ok)
            GP_FAIL(GP_ERR_INVALID_ARG, "chat message %zu: content is not valid UTF-8 (byte 0x%02X at offset %zu)",
                    i, c, at);
        at += k;
    }
    return GP_OK;
}

static void put_msg(chat_buf *b, const gp_chat_msg *m)
{
    chat_put(b, m->content, m->len);
}

static void put_stripped(chat_buf *b, const char *s, size_t n)
{
    chat_py_strip(&s, &n);
    chat_put(b, s, n);
}

/* '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content|trim + '<|eot_id|>' */
static void llama3_msg(chat_buf *b, const gp_chat_msg *m)
{
    chat_puts(b, "<|start_header_id|>");
    chat_puts(b, gp_chat_role_name(m->role));
    chat_puts(b, "<|end_header_id|>\n\n");
    put_stripped(b, m->content, m->len);
    chat_puts(b, "<|eot_id|>");
}

static gp_status render_llama3(const gp_chat_template *t, const gp_chat_msg *msgs, size_t n, bool agp, chat_buf *b)
{
    chat_puts(b, t->bos);
    size_t i = 0;
    if (t->family == CHAT_LLAMA31) {
        /* the system block is always there, dated as the template's default */
        chat_puts(b, "<|start_header_id|>system<|end_header_id|>\n\n"
                     "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
        if (msgs[0].role == GP_CHAT_SYSTEM) {
            put_stripped(b, msgs[0].content, msgs[0].len);
            i = 1;
        }
        chat_puts(b, "<|eot_id|>");
    }
    for (; i < n; i++)
        llama3_msg(b, &msgs[i]);
    if (agp)
        chat_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return GP_OK;
}

static gp_status render_chatml(const gp_chat_template *t, const gp_chat_msg *msgs, size_t n, bool agp, chat_buf *b)
{
    if (t->default_system && msgs[0].role != GP_CHAT_SYSTEM) {
        chat_puts(b, "<|im_start|>system\n");
        chat_puts(b, t->default_system);
        chat_puts(b, "<|im_end|>\n");
    }
    for (size_t i = 0; i < n; i++) {
        chat_puts(b, "<|im_start|>");
        chat_puts(b, gp_chat_role_name(msgs[i].role));
        chat_puts(b, "\n");
        put_msg(b, &msgs[i]);
        chat_puts(b, "<|im_end|>\n");
    }
    if (agp)
        chat_puts(b, "<|im_start|>assistant\n");
    return GP_OK;
}

/* Mistral v0.1 / v0.2 (2024): the system message before the first user
 * message, " [INST] " with spaces on both sides, no generation prompt. */
static gp_status render_mistral(const gp_chat_template *t, const gp_chat_msg *msgs, size_t n, chat_buf *b)
{
    const gp_chat_msg *sys = msgs[0].role == GP_CHAT_SYSTEM ? &msgs[0] : NULL;
    const gp_chat_msg *loop = sys ? msgs + 1 : msgs;
    size_t nl = sys ? n - 1 : n, base = sys ? 1 : 0;
    chat_puts(b, t->bos);
    for (size_t i = 0; i < nl; i++) {
        const gp_chat_msg *m = &loop[i];
        if ((m->role == GP_CHAT_USER) != (i % 2 == 0))
            return refuse(t, base + i, m, ALTERNATE_AFTER_SYSTEM);
        if (m->role == GP_CHAT_USER) {
            chat_puts(b, " [INST] ");
            if (i == 0 && sys) {
                put_msg(b, sys);
                chat_puts(b, "\n\n");
            }
            put_msg(b, m);
            chat_puts(b, " [/INST]");
        } else if (m->role == GP_CHAT_ASSISTANT) {
            chat_puts(b, " ");
            put_msg(b, m);
            chat_puts(b, t->eot);
        } else {
            return refuse(t, base + i, m, ONLY_USER_ASSISTANT);
        }
    }
    return GP_OK;
}

/* Mistral v0.3: alternation checked before anything is written, the system
 * message inside the last message when that is a user one (and dropped
 * otherwise), "[INST] x[/INST]", the reply trimmed. */
static gp_status render_mistral_v3(const gp_chat_template *t, const gp_chat_msg *msgs, size_t n, chat_buf *b)
{
    const gp_chat_msg *sys = msgs[0].role == GP_CHAT_SYSTEM ? &msgs[0] : NULL;
    const gp_chat_msg *loop = sys ? msgs + 1 : msgs;
    size_t nl = sys ? n - 1 : n, base = sys ? 1 : 0;
    for (size_t i = 0; i < nl; i++)
        if ((loop[i].role == GP_CHAT_USER) != (i % 2 == 0))
            return refuse(t, base + i, &loop[i], ALTERNATE_AFTER_SYSTEM);
    chat_puts(b, t->bos);
    for (size_t i = 0; i < nl; i++) {
        const gp_chat_msg *m = &loop[i];
        if (m->role == GP_CHAT_USER) {
            chat_puts(b, "[INST] ");
            if (i + 1 == nl && sys) {
                put_msg(b, sys);
                chat_puts(b, "\n\n");
            }
            put_msg(b, m);
            chat_puts(b, "[/INST]");
        } else if (m->role == GP_CHAT_ASSISTANT) {
            chat_puts(b, " ");
            put_stripped(b, m->content, m->len);
            chat_puts(b, t->eot);
        } else {
            return refuse(t, base + i, m, ONLY_USER_ASSISTANT);
        }
    }
    return GP_OK;
}

/* Llama 2 chat: <<SYS>> inside the first user message, every user message
 * with its own BOS, both sides stripped; a message of another role at an odd
 * place is skipped, as the template does. */
static gp_status render_llama2(const gp_chat_template *t, const gp_chat_msg *msgs, size_t n, chat_buf *b)
{
    const gp_chat_msg *sys = msgs[0].role == GP_CHAT_SYSTEM ? &msgs[0] : NULL;
    const gp_chat_msg *loop = sys ? msgs + 1 : msgs;
    size_t nl = sys ? n - 1 : n, base = sys ? 1 : 0;
    chat_buf c = {0};
    gp_status s = GP_OK;
    for (size_t i = 0; i < nl && s == GP_OK; i++) {
        const gp_chat_msg *m = &loop[i];
        if ((m->role == GP_CHAT_USER) != (i % 2 == 0)) {
            s = refuse(t, base + i, m, ALTERNATE);
            break;
        }
        if (m->role != GP_CHAT_USER && m->role != GP_CHAT_ASSISTANT)
            continue;
        /* the content is stripped after <<SYS>> is put in front of it */
        c.len = 0;
        if (i == 0 && sys) {
            chat_puts(&c, "<<SYS>>\n");
            put_msg(&c, sys);
            chat_puts(&c, "\n<</SYS>>\n\n");
        }
        put_msg(&c, m);
        if (c.oom)
            break;
        if (m->role == GP_CHAT_USER) {
            chat_puts(b, t->bos);
            chat_puts(b, "[INST] ");
            put_stripped(b, c.p ? c.p : "", c.len);
            chat_puts(b, " [/INST]");
        } else {
            chat_puts(b, " ");
            put_stripped(b, c.p ? c.p : "", c.len);
            chat_puts(b, " ");
            chat_puts(b, t->eot);
        }
    }
    if (c.oom)
        b->oom = true;
    free(c.p);
    return s;
}

gp_status gp_chat_render(const gp_chat_template *t, const gp_chat_msg *msgs, size_t n, bool add_generation_prompt,
                         char **text, size_t *len)
{
    if (!t || !text || !len || (n && !msgs))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_chat_render: template, messages, text and len must not be NULL");
    if (n == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "chat template %s: the conversation has no messages. allowed: at least one",
                t->name);
    for (size_t i = 0; i < n; i++) {
        if ((unsigned)msgs[i].role > GP_CHAT_ASSISTANT)
            GP_FAIL(GP_ERR_INVALID_ARG, "chat message %zu: role %d is not one of system (0), user (1), assistant (2)",
                    i, (int)msgs[i].role);
        GP_TRY(check_utf8(&msgs[i], i));
    }
    chat_buf b = {0};
    gp_status s = GP_OK;
    switch (t->family) {
    case CHAT_LLAMA3:
    case CHAT_LLAMA31: s = render_llama3(t, msgs, n, add_generation_prompt, &b); break;
    case CHAT_CHATML: s = render_chatml(t, msgs, n, add_generation_prompt, &b); break;
    case CHAT_MISTRAL: s = render_mistral(t, msgs, n, &b); break;
    case CHAT_MISTRAL_V3: s = render_mistral_v3(t, msgs, n, &b); break;
    case CHAT_LLAMA2: s = render_llama2(t, msgs, n, &b); break;
    }
    if (s != GP_OK) {
        free(b.p);
        return s;
    }
    return chat_take(&b, text, len);
}

gp_status gp_chat_render_delta(const gp_chat_template *t, const gp_chat_msg *msgs, size_t n, char **text,
                               size_t *len)
{
    if (!t || !msgs || !text || !len)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_chat_render_delta: template, messages, text and len must not be NULL");
    if (n < 3 || msgs[n - 1].role != GP_CHAT_USER || msgs[n - 2].role != GP_CHAT_ASSISTANT)
        GP_FAIL(GP_ERR_INVALID_ARG,
                "gp_chat_render_delta: the conversation (%zu messages) must end with an assistant reply and a new "
                "user message after at least one earlier message", n);
    char *prev = NULL, *full = NULL;
    size_t np = 0, nf = 0;
    gp_status s = gp_chat_render(t, msgs, n - 2, true, &prev, &np);
    if (s == GP_OK)
        s = gp_chat_render(t, msgs, n, true, &full, &nf);
    if (s != GP_OK) {
        free(prev);
        return s;
    }
    /* The property the caller relies on, checked rather than assumed: the
     * cache holds the previous prompt and the reply's tokens. */
    const gp_chat_msg *reply = &msgs[n - 2];
    size_t nl = strlen(t->reply_lead), keep = np + nl + reply->len;
    bool ok = nf >= keep && memcmp(full, prev, np) == 0 && memcmp(full + np, t->reply_lead, nl) == 0 &&
              memcmp(full + np + nl, reply->content, reply->len) == 0;
    free(prev);
    if (!ok) {
        free(full);
        GP_FAIL(GP_ERR_UNSUPPORTED,
                "chat template %s does not render this conversation as the previous prompt plus the reply plus "
                "the new turn (it moves or reshapes earlier turns, or strips the reply): render the whole "
                "conversation and prefill it into a fresh sequence", t->name);
    }
    memmove(full, full + keep, nf - keep + 1);
    *text = full;
    *len = nf - keep;
    return GP_OK;
}
