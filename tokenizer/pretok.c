/* Pre-tokenizer pieces the loaders share: the split patterns, their PCRE2
 * compilation (UTF + Unicode properties, JIT when the build has it) and
 * byte-level BPE's byte <-> character alphabet. */
#include "tok_impl.h"

#include <string.h>

const char gp_tok_llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const char gp_tok_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

gp_status gp_tok_compile_regex(gp_tokenizer *t, const char *pat, size_t len, const char *what)
{
    int err = 0;
    PCRE2_SIZE off = 0;
    t->re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: pattern '%.*s' does not compile with PCRE2 at offset %zu: %s", what,
                (int)len, pat, (size_t)off, (const char *)msg);
    }
    /* The interpreter is a fallback where JIT is unavailable (some
     * architectures, SELinux execmem policies): same matches, slower. */
    t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    return GP_OK;
}

/* GPT-2's alphabet: printable Latin-1 bytes stand for themselves, the other
 * 68 bytes (controls, space, DEL, NBSP, soft hyphen) for U+0100 onwards in
 * byte order, so every token is printable text. */
uint32_t gp_bytelevel_cp(int b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
        return (uint32_t)b;
    if (b <= 32)
        return 256u + (uint32_t)b;
    if (b <= 160)
        return 256u + 33u + (uint32_t)(b - 127);
    return 256u + 67u; /* 173 */
}

static int bytelevel_byte(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp < 256 || cp >= 256 + 68)
        return -1;
    uint32_t k = cp - 256;
    if (k < 33)
        return (int)k;
    if (k < 67)
        return (int)(127 + k - 33);
    return 173;
}

long gp_bytelevel_decode(const char *s, size_t n, char *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        int k = gp_utf8_next(u + i, n - i);
        if (k <= 0 || k > 2) /* the alphabet is U+0021..U+0143: one or two bytes */
            return -1;
        uint32_t cp = k == 1 ? u[i] : ((uint32_t)(u[i] & 0x1f) << 6) | (u[i + 1] & 0x3f);
        int b = bytelevel_byte(cp);
        if (b < 0)
            return -1;
        out[o++] = (char)b;
        i += (size_t)k;
    }
    return (long)o;
}
