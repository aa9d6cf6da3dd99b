/* Llama 3's original tokenizer.model: tiktoken's ranks file, one
 * "base64(token bytes) rank" per line; the rank is the token id and the
 * merge priority. No special tokens (Meta's code adds them outside the file). */
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 with padding; out holds n bytes. Returns the length, -1 if malformed. */
static long b64_decode(const char *s, size_t n, unsigned char *out)
{
    if (n % 4)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad || (v[k] = b64_value(c)) < 0) {
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (unsigned char)(w >> 16);
        if (pad < 2) out[o++] = (unsigned char)(w >> 8);
        if (pad < 1) out[o++] = (unsigned char)w;
    }
    return (long)o;
}

gp_status gp_tok_load_tiktoken(gp_tokenizer *t, const char *path, const char *text, size_t len)
{
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    lines++;
    int32_t *rank_of = malloc(lines * sizeof *rank_of); /* [lines] */
    const char **bytes_of = malloc(lines * sizeof *bytes_of);
    uint32_t *len_of = malloc(lines * sizeof *len_of);
    gp_status st = GP_OK;
    if (!rank_of || !bytes_of || !len_of) {
        gp_set_error("%s: cannot allocate for %zu lines", path, lines);
        st = GP_ERR_NO_MEMORY;
    }
    size_t n = 0, line = 0;
    int64_t max_rank = -1;
    for (size_t i = 0; st == GP_OK && i < len; line++) {
        const char *l = text + i, *nl = memchr(l, '\n', len - i);
        size_t ll = nl ? (size_t)(nl - l) : len - i;
        i += ll + 1;
        if (ll && l[ll - 1] == '\r')
            ll--;
        if (ll == 0)
            continue; /* the final newline, blank lines */
        const char *sp = memchr(l, ' ', ll);
        if (!sp || sp == l || sp + 1 == l + ll) {
            gp_set_error("%s: line %zu is not 'base64-token rank'", path, line + 1);
            st = GP_ERR_FORMAT;
            break;
        }
        size_t bl = (size_t)(sp - l);
        int64_t r = 0;
        for (const char *c = sp + 1; c < l + ll; c++) {
            if (*c < '0' || *c > '9' || r > INT32_MAX / 10) {
                gp_set_error("%s: line %zu: rank '%.*s' is not an integer in [0, %d]", path, line + 1,
                             (int)(l + ll - sp - 1), sp + 1, INT32_MAX / 10);
                st = GP_ERR_FORMAT;
                break;
            }
            r = r * 10 + (*c - '0');
        }
        if (st != GP_OK)
            break;
        unsigned char *b = (unsigned char *)gp_arena_alloc(&t->arena, bl);
        long got = b ? b64_decode(l, bl, b) : -2;
        if (got == -2) {
            gp_set_error("%s: out of memory at line %zu", path, line + 1);
            st = GP_ERR_NO_MEMORY;
        } else if (got <= 0) {
            gp_set_error("%s: line %zu: '%.*s' is not a base64 token", path, line + 1, (int)bl, l);
            st = GP_ERR_FORMAT;
        } else {
            rank_of[n] = (int32_t)r;
            bytes_of[n] = (const char *)b;
            len_of[n] = (uint32_t)got;
            n++;
            if (r > max_rank)
                max_rank = r;
        }
    }
    if (st == GP_OK && n == 0) {
        gp_set_error("%s: no tokens", path);
        st = GP_ERR_FORMAT;
    }
    if (st == GP_OK)
        st = gp_tok_set_ids(t, (int32_t)(max_rank + 1));
    if (st == GP_OK)
        st = gp_strtab_init(&t->by_bytes, n);
    for (size_t k = 0; st == GP_OK && k < n; k++) {
        gp_token *tk = &t->toks[rank_of[k]];
        bool dup = false;
        if (tk->str) {
            gp_set_error("%s: rank %d appears twice", path, (int)rank_of[k]);
            st = GP_ERR_FORMAT;
            break;
        }
        st = gp_strtab_put(&t->by_bytes, bytes_of[k], len_of[k], rank_of[k], &dup);
        if (st == GP_OK && dup) {
            gp_set_error("%s: the token of rank %d appears twice", path, (int)rank_of[k]);
            st = GP_ERR_FORMAT;
        }
        tk->str = tk->dec = bytes_of[k];
        tk->len = tk->dec_len = len_of[k];
        if (len_of[k] == 1)
            t->byte_id[(unsigned char)bytes_of[k][0]] = rank_of[k];
    }
    for (int b = 0; st == GP_OK && b < 256; b++)
        if (t->byte_id[b] < 0) {
            /* BPE starts from single bytes: without one, text holding it has no encoding */
            gp_set_error("%s: no token for the single byte 0x%02X; a tiktoken ranks file ranks all 256", path, b);
            st = GP_ERR_FORMAT;
        }
    free(rank_of);
    free(bytes_of);
    free(len_of);
    GP_TRY(st);
    return gp_tok_compile_regex(t, gp_tok_llama3_pattern, strlen(gp_tok_llama3_pattern), path);
}
