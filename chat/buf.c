/* The renderers' growing text buffer and Python's str.strip() on UTF-8. */
#include "chat_impl.h"

#include <stdlib.h>
#include <string.h>

void chat_put(chat_buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    char *p = gp_grow(b->p, &b->cap, b->len + n + 1);
    if (!p) {
        b->oom = true;
        return;
    }
    b->p = p;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void chat_puts(chat_buf *b, const char *s)
{
    chat_put(b, s, strlen(s));
}

gp_status chat_take(chat_buf *b, char **text, size_t *len)
{
    if (!b->oom && !b->p)
        chat_put(b, "", 0);
    if (b->oom) {
        free(b->p);
        *b = (chat_buf){0};
        GP_FAIL(GP_ERR_NO_MEMORY, "chat template: out of memory rendering the prompt");
    }
    *text = b->p;
    *len = b->len;
    *b = (chat_buf){0};
    return GP_OK;
}

static bool py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

/* Code point starting at p (valid UTF-8 assumed), its length in *k. */
static uint32_t cp_at(const unsigned char *p, size_t *k)
{
    if (p[0] < 0x80) { *k = 1; return p[0]; }
    if (p[0] < 0xe0) { *k = 2; return ((uint32_t)(p[0] & 0x1f) << 6) | (p[1] & 0x3f); }
    if (p[0] < 0xf0) { *k = 3; return ((uint32_t)(p[0] & 0x0f) << 12) | ((uint32_t)(p[1] & 0x3f) << 6) | (p[2] & 0x3f); }
    *k = 4;
    return ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3f) << 12) | ((uint32_t)(p[2] & 0x3f) << 6) |
           (p[3] & 0x3f);
}

void chat_py_strip(const char **s, size_t *n)
{
    const unsigned char *p = (const unsigned char *)*s, *end = p + *n;
    size_t k;
    while (p < end && py_space(cp_at(p, &k)))
        p += k;
    while (end > p) {
        const unsigned char *q = end - 1;
        while (q > p && (*q & 0xc0) == 0x80) /* back to the lead byte */
            q--;
        if (!py_space(cp_at(q, &k)))
            break;
        end = q;
    }
    *s = (const char *)p;
    *n = (size_t)(end - p);
}
