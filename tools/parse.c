/* Strict parsing of numbers and prompt lists for the command line: nothing is
 * silently truncated or clamped. */
#include "gp_tools.h"

#include <ctype.h>
#include <getopt.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

gp_status gp_parse_long(const char *text, long min, long max, const char *flag, long *out)
{
    if (!text || !*text)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: empty value; expected an integer in [%ld, %ld]", flag, min, max);
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || isspace((unsigned char)text[0]))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: '%s' is not an integer; expected an integer in [%ld, %ld]",
                flag, text, min, max);
    if (errno == ERANGE || v < min || v > max)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: %s is out of range; allowed: [%ld, %ld]", flag, text, min, max);
    *out = v;
    return GP_OK;
}

int gp_arg_long(const char *prog, const char *text, long min, long max, const char *flag, long *out)
{
    if (gp_parse_long(text, min, max, flag, out) == GP_OK)
        return 0;
    fprintf(stderr, "%s: %s\n", prog, gp_last_error());
    return 2;
}

gp_status gp_parse_long_list(const char *text, long min, long max, const char *flag, long *out, int cap, int *n)
{
    *n = 0;
    if (!text || !*text)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: empty list; expected up to %d comma-separated integers in [%ld, %ld]", flag,
                cap, min, max);
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (*n == cap || len == 0 || len >= sizeof item)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: '%s': expected up to %d comma-separated integers in [%ld, %ld]", flag,
                    text, cap, min, max);
        memcpy(item, p, len);
        item[len] = '\0';
        GP_TRY(gp_parse_long(item, min, max, flag, &out[(*n)++]));
        if (!comma)
            return GP_OK;
        p = comma + 1;
    }
}

gp_status gp_parse_u64(const char *text, const char *flag, uint64_t *out)
{
    if (!text || !*text || !isdigit((unsigned char)text[0]))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: '%s' is not a non-negative integer", flag, text ? text : "");
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end != '\0')
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: '%s' is not a non-negative integer", flag, text);
    if (errno == ERANGE)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: %s is out of range; allowed: [0, %llu]", flag, text,
                (unsigned long long)UINT64_MAX);
    *out = (uint64_t)v;
    return GP_OK;
}

gp_status gp_parse_path(const char *text, const char *flag)
{
    if (!text || !*text || !strncmp(text, "--", 2))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s '%s': %s; allowed: a file path", flag, text ? text : "",
                text && *text ? "looks like a flag, not a file (a missing value?)" : "empty path");
    return GP_OK;
}

/* The suffixes a size takes, compared in any case: the IEC names and the
 * bare letters are binary, the SI names decimal, as their standards say. */
static const struct {
    const char *suffix;
    uint64_t unit;
} size_units[] = {
    {"K", 1ull << 10}, {"M", 1ull << 20}, {"G", 1ull << 30}, {"T", 1ull << 40},
    {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40},
    {"KB", 1000ull}, {"MB", 1000000ull}, {"GB", 1000000000ull}, {"TB", 1000000000000ull},
};

gp_status gp_parse_size(const char *text, const char *flag, uint64_t *out)
{
    static const char form[] = GP_SIZE_FORM;
    if (!text || !isdigit((unsigned char)text[0]))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: '%s' is not a size; %s", flag, text ? text : "", form);
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno == ERANGE)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: %s is out of range (more than 2^64 - 1 bytes)", flag, text);
    uint64_t unit = 1;
    if (*end) {
        unit = 0;
        for (size_t i = 0; i < sizeof size_units / sizeof size_units[0]; i++)
            if (!strcasecmp(end, size_units[i].suffix))
                unit = size_units[i].unit;
        if (!unit)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: '%s' is not a size; %s", flag, text, form);
    }
    if (v == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: '%s' is zero; %s", flag, text, form);
    if (v > UINT64_MAX / unit)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: %s is out of range (more than 2^64 - 1 bytes)", flag, text);
    *out = (uint64_t)v * unit;
    return GP_OK;
}

gp_status gp_parse_double(const char *text, const char *flag, double *out)
{
    if (!text || !*text || isspace((unsigned char)text[0]))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: '%s' is not a number", flag, text ? text : "");
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    /* strtod also reads "inf", "nan" and hex floats: refused as values no
     * range takes, and "0x1p-2" as a form nobody means on a command line */
    if (end == text || *end != '\0' || !isfinite(v) || strpbrk(text, "xX"))
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: '%s' is not a finite decimal number", flag, text);
    if (errno == ERANGE)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: %s is out of range", flag, text);
    *out = v;
    return GP_OK;
}

void gp_prompts_free(gp_prompts *p)
{
    free(p->lens);
    free(p->offsets);
    free(p->ids);
    memset(p, 0, sizeof *p);
}

/* One id: digits with optional surrounding spaces. */
static gp_status parse_id(const char *s, size_t n, int seq, int32_t *out)
{
    while (n && isspace((unsigned char)*s)) { s++; n--; }
    while (n && isspace((unsigned char)s[n - 1])) n--;
    if (n == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "--prompt-ids: sequence %d has an empty token id "
                "(expected ids like \"5,17,42;11,400,2\")", seq);
    if (n > 10)
        GP_FAIL(GP_ERR_INVALID_ARG, "--prompt-ids: token id '%.*s' in sequence %d is too large; "
                "allowed: [0, %d]", (int)n, s, seq, INT32_MAX);
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            GP_FAIL(GP_ERR_INVALID_ARG, "--prompt-ids: '%.*s' in sequence %d is not a "
                    "non-negative integer token id", (int)n, s, seq);
        v = v * 10 + (s[i] - '0');
    }
    if (v > INT32_MAX)
        GP_FAIL(GP_ERR_INVALID_ARG, "--prompt-ids: token id %lld in sequence %d is too large; "
                "allowed: [0, %d]", (long long)v, seq, INT32_MAX);
    *out = (int32_t)v;
    return GP_OK;
}

gp_status gp_parse_prompts(const char *text, gp_prompts *out)
{
    memset(out, 0, sizeof *out);
    if (!text || !*text)
        GP_FAIL(GP_ERR_INVALID_ARG, "--prompt-ids: empty; expected ids like \"5,17,42;11,400,2\"");
    size_t len = strlen(text);
    int n_seqs = 1, n_ids = 1;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ';') { n_seqs++; n_ids++; }
        else if (text[i] == ',') n_ids++;
    }
    out->lens = calloc((size_t)n_seqs, sizeof *out->lens);
    out->offsets = calloc((size_t)n_seqs, sizeof *out->offsets);
    out->ids = calloc((size_t)n_ids, sizeof *out->ids);
    if (!out->lens || !out->offsets || !out->ids) {
        gp_prompts_free(out);
        GP_FAIL(GP_ERR_NO_MEMORY, "--prompt-ids: out of memory for %d ids", n_ids);
    }
    int seq = 0, total = 0;
    const char *tok = text;
    for (size_t i = 0; i <= len; i++) {
        char c = text[i];
        if (c != ',' && c != ';' && c != '\0')
            continue;
        const char *s = tok;
        size_t n = (size_t)(&text[i] - tok);
        size_t blank = 0;
        while (blank < n && isspace((unsigned char)s[blank])) blank++;
        if (blank == n && c != ',' && out->lens[seq] == 0) {
            gp_prompts_free(out);
            GP_FAIL(GP_ERR_INVALID_ARG, "--prompt-ids: sequence %d is empty "
                    "(expected ids like \"5,17,42;11,400,2\")", seq);
        }
        gp_status st = parse_id(s, n, seq, &out->ids[total]);
        if (st != GP_OK) {
            gp_prompts_free(out);
            return st;
        }
        out->lens[seq]++;
        total++;
        tok = &text[i + 1];
        if (c == ';') {
            seq++;
            out->offsets[seq] = total;
        }
    }
    out->n_seqs = n_seqs;
    return GP_OK;
}

int gp_input_exit_code(gp_status st)
{
    return st == GP_ERR_IO || st == GP_ERR_NO_MEMORY ? 1 : 2;
}

const char *gp_opt_name(const struct option *opts, int val)
{
    for (; opts->name; opts++)
        if (opts->val == val)
            return opts->name;
    return "?";
}
