/* UTF-8 checks: encode refuses invalid input with its offset; decode and the
 * streaming detokenizer replace invalid bytes the way HF and tiktoken show
 * them, so the same rule serves both. */
#include "tok_impl.h"

int gp_utf8_next(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF; /* the second byte's range narrows for overlongs and surrogates */
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
        need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3)
        need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else
        return -1;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n)
            return 0;
        unsigned b = s[i];
        if (b < lo || b > hi)
            return -i;
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

gp_status gp_utf8_check(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { /* ASCII runs dominate real text */
            i++;
            continue;
        }
        int k = gp_utf8_next(u + i, n - i);
        if (k <= 0)
            GP_FAIL(GP_ERR_INVALID_ARG, "text is not valid UTF-8: byte 0x%02X at offset %zu %s", u[i], i,
                    k == 0 ? "starts a character the text cuts short" : "is not part of a valid character");
        i += (size_t)k;
    }
    return GP_OK;
}
