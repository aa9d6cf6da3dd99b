/* Strict number and comma-list parsing for the case study's flags: every
 * refusal says what is wrong so the option parser can name flag and value. */
#include "cs_impl.h"

#include <stdlib.h>
#include <string.h>

int cs_parse_u64(const char *text, uint64_t max, uint64_t *out, char *why, size_t why_len)
{
    if (!text || !*text) {
        snprintf(why, why_len, "empty value");
        return -1;
    }
    const char *p = text;
    /* strtoull would accept "-3" (wrapping it), leading space and "+": all
     * are mistakes on a command line, so digits are checked by hand. */
    if (*p == '-') {
        snprintf(why, why_len, "negative");
        return -1;
    }
    if (*p < '0' || *p > '9') {
        snprintf(why, why_len, "not a number");
        return -1;
    }
    uint64_t v = 0;
    bool too_large = false;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            too_large = true; /* keep scanning: trailing garbage is reported first */
        else
            v = v * 10 + d;
    }
    if (*p) {
        snprintf(why, why_len, "trailing characters '%s' after the number", p);
        return -1;
    }
    if (too_large || v > max) {
        snprintf(why, why_len, "too large");
        return -1;
    }
    *out = v;
    return 0;
}

int cs_split_list(const char *value, char **copy, char **items, int cap, int *n, char *why, size_t why_len)
{
    *copy = NULL;
    *n = 0;
    if (!value || !*value) {
        snprintf(why, why_len, "empty list");
        return -1;
    }
    char *s = strdup(value);
    if (!s) {
        snprintf(why, why_len, "out of memory");
        return -1;
    }
    int count = 0;
    for (char *item = s;;) {
        char *comma = strchr(item, ',');
        if (comma)
            *comma = '\0';
        if (!*item) {
            snprintf(why, why_len, "item %d is empty", count + 1);
            free(s);
            return -1;
        }
        if (count == cap) {
            snprintf(why, why_len, "more than %d items", cap);
            free(s);
            return -1;
        }
        items[count++] = item;
        if (!comma)
            break;
        item = comma + 1;
    }
    *copy = s;
    *n = count;
    return 0;
}
