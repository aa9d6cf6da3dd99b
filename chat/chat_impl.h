/* Layouts private to chat/: the template table entry, the growing text
 * buffer the renderers write into, and Python's notion of whitespace. */
#ifndef GP_CHAT_IMPL_H
#define GP_CHAT_IMPL_H

#include "gp_chat.h"

typedef enum chat_family {
    CHAT_LLAMA3, CHAT_LLAMA31, CHAT_CHATML, CHAT_MISTRAL, CHAT_MISTRAL_V3, CHAT_LLAMA2
} chat_family;

struct gp_chat_template {
    const char *name;
    chat_family family;
    const char *bos;            /* "" when the template adds none */
    const char *eot;
    const char *stops[4];       /* NULL-terminated */
    const char *default_system; /* ChatML: inserted when the first message is not a system one */
    const char *reply_lead;     /* between the generation prompt and the reply's text */
};

/* All templates, in the order gp_chat_template_names lists them. */
extern const struct gp_chat_template gp_chat_templates[];
extern const size_t gp_chat_n_templates;

typedef struct chat_buf {
    char *p;
    size_t len, cap;
    bool oom;
} chat_buf;

void chat_put(chat_buf *b, const char *s, size_t n);
void chat_puts(chat_buf *b, const char *s);
/* b's text as a malloc'd string (ownership moves to the caller), or
 * GP_ERR_NO_MEMORY when any append failed. */
gp_status chat_take(chat_buf *b, char **text, size_t *len);

/* [*s, *s + *n) without the leading and trailing characters Python's
 * str.strip() removes (str.isspace: ASCII whitespace, U+001C..U+001F, U+0085,
 * U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000):
 * what Jinja's trim filter and .strip() do in the templates. The text must
 * be valid UTF-8. */
void chat_py_strip(const char **s, size_t *n);

#endif
