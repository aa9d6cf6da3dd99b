/* The NFC normalizer (HF normalizers.NFC, Qwen2's): utf8proc does the
 * Unicode work; this file only keeps it off the ASCII that dominates real
 * text. ASCII characters are starters that are never the second character
 * of a canonical composition, so NFC(x + y) = NFC(x) + NFC(y) whenever y
 * starts with ASCII: the text is cut before every ASCII character, ASCII
 * runs are copied, and only each non-ASCII run (with the ASCII character
 * before it, which may compose with a following combining mark) goes
 * through utf8proc. */
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static gp_status put(char **buf, size_t *cap, size_t *o, const char *s, size_t n)
{
    if (n == 0) /* nothing to copy, and *buf may still be NULL */
        return GP_OK;
    if (*o + n > *cap) {
        size_t c = *cap < 256 ? 256 : *cap;
        while (c < *o + n)
            c += c / 2;
        char *b = realloc(*buf, c);
        if (!b)
            GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate %zu bytes to normalize the text", c);
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *o, s, n);
    *o += n;
    return GP_OK;
}

gp_status gp_nfc(const char *s, size_t n, char **buf, size_t *cap, size_t *out_len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0;
    *out_len = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && u[j] < 0x80)
            j++;
        if (j == n) {
            GP_TRY(put(buf, cap, &o, s + i, n - i));
            break;
        }
        size_t seg = j > i ? j - 1 : j; /* the ASCII character a combining mark may compose with */
        GP_TRY(put(buf, cap, &o, s + i, seg - i));
        size_t k = j;
        while (k < n && u[k] >= 0x80)
            k++;
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t m = utf8proc_map(u + seg, (utf8proc_ssize_t)(k - seg), &dst,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m < 0)
            GP_FAIL(m == UTF8PROC_ERROR_NOMEM ? GP_ERR_NO_MEMORY : GP_ERR_INVALID_ARG,
                    "tokenizer: NFC normalization of the %zu bytes at offset %zu failed: %s", k - seg, seg,
                    utf8proc_errmsg(m));
        gp_status st = put(buf, cap, &o, (const char *)dst, (size_t)m);
        free(dst);
        GP_TRY(st);
        i = k;
    }
    *out_len = o;
    return GP_OK;
}
