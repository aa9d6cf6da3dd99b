/* Invalid UTF-8 replaced by U+FFFD: generated text is whatever bytes the
 * tokenizer's pieces make (a byte-fallback token can end inside a character,
 * a model can emit a lone continuation byte), and jansson refuses to build a
 * string from invalid UTF-8. */
#include "api_impl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid sequence at s[0..n), or of its maximal invalid subpart
 * (>= 1) with *ok false: the longest prefix that some valid sequence starts
 * with (Unicode 15, §3.9, "U+FFFD substitution of maximal subparts"). */
static size_t seq_len(const unsigned char *s, size_t n, int *ok)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    *ok = 0;
    if (c < 0x80) {
        *ok = 1;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* beyond U+10FFFF */
    } else {
        return 1; /* a continuation byte, C0, C1, F5..FF */
    }
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= n)
            return i;
        unsigned char b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
            return i;
    }
    *ok = 1;
    return need;
}

char *gp_api_utf8_fix(const char *s, size_t len, size_t *out_len)
{
    const unsigned char *u = (const unsigned char *)s;
    /* Each invalid byte becomes at most 3 bytes. */
    if (len > (SIZE_MAX - 1) / 3)
        return NULL;
    char *out = malloc(len * 3 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        int ok;
        size_t k = seq_len(u + i, len - i, &ok);
        if (ok) {
            memcpy(out + o, u + i, k);
            o += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
        }
        i += k;
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}
