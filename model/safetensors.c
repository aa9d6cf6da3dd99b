/* Parser and validator for one safetensors file held in memory: an 8-byte
 * little-endian header length, a JSON header, then the packed tensor data. */
#include "gp_model.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Tensor data pointers (gp_st_tensor.data) point straight into the caller's
 * buffer at whatever offset the file chose, so they are often not aligned
 * for their element type: consumers must read elements with memcpy and never
 * cast data to a wider pointer type. */

struct gp_st_file {
    size_t n;
    gp_st_tensor *t; /* [n], sorted by name for gp_st_find */
};

#define GP_KNOWN_DTYPES "BF16, F16, F32, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2"

static int dtype_from_name(const char *s, gp_dtype *out)
{
    for (int i = 0; i < GP_DTYPE_COUNT; i++)
        if (strcmp(s, gp_dtype_name((gp_dtype)i)) == 0) {
            *out = (gp_dtype)i;
            return 1;
        }
    return 0;
}

void gp_st_free(gp_st_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        free(f->t[i].name);
    free(f->t);
    free(f);
}

size_t gp_st_count(const gp_st_file *f)
{
    return f ? f->n : 0;
}

const gp_st_tensor *gp_st_get(const gp_st_file *f, size_t i)
{
    return f && i < f->n ? &f->t[i] : NULL;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const gp_st_tensor *)a)->name, ((const gp_st_tensor *)b)->name);
}

const gp_st_tensor *gp_st_find(const gp_st_file *f, const char *name)
{
    if (!f || !name || f->n == 0)
        return NULL;
    gp_st_tensor key = {.name = (char *)name};
    return bsearch(&key, f->t, f->n, sizeof key, cmp_name);
}

/* jansson reports a duplicate key without naming it. Re-scan the header up
 * to the error position: the last complete string token is the key, and the
 * nesting depth says whether it is a tensor name or a field of an entry. */
static gp_status fail_duplicate(const char *hdr, size_t n, size_t pos, const char *label)
{
    size_t start = 0, end = 0;
    int depth = 0, key_depth = 0, in_str = 0;
    if (pos > n)
        pos = n;
    for (size_t i = 0; i < pos; i++) {
        char c = hdr[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"') {
                in_str = 0;
                end = i + 1;
                key_depth = depth;
            }
        } else if (c == '"') {
            in_str = 1;
            start = i;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    json_t *key = end > start ? json_loadb(hdr + start, end - start, JSON_DECODE_ANY, NULL) : NULL;
    const char *name = json_is_string(key) ? json_string_value(key) : "?";
    if (key_depth <= 1)
        gp_set_error("%s: duplicate tensor name '%s' in header", label, name);
    else
        gp_set_error("%s: header: duplicate key '%s' inside an entry or __metadata__", label, name);
    json_decref(key);
    return GP_ERR_FORMAT;
}

static gp_status check_metadata(const json_t *meta, const char *label)
{
    if (!json_is_object(meta))
        GP_FAIL(GP_ERR_FORMAT, "%s: '__metadata__' must be an object of strings", label);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)meta, k, v) {
        if (!json_is_string(v))
            GP_FAIL(GP_ERR_FORMAT, "%s: '__metadata__' entry '%s' is not a string", label, k);
    }
    return GP_OK;
}

/* Non-negative JSON integer, or -1 if the value is anything else. */
static json_int_t nonneg_int(const json_t *v)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    return x < 0 ? -1 : x;
}

/* Fill t (except data) from one header entry; data_size bounds the offsets. */
static gp_status parse_entry(const char *name, const json_t *e, uint64_t data_size,
                             const char *label, gp_st_tensor *t)
{
    if (!json_is_object(e))
        GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s': entry is not an object", label, name);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)e, k, v) {
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            GP_FAIL(GP_ERR_FORMAT,
                    "%s: tensor '%s': unexpected key '%s' (entries hold only dtype, shape, data_offsets)",
                    label, name, k);
    }
    const json_t *dt = json_object_get(e, "dtype");
    const json_t *sh = json_object_get(e, "shape");
    const json_t *off = json_object_get(e, "data_offsets");
    if (!dt)
        GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s': missing 'dtype'", label, name);
    if (!sh)
        GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s': missing 'shape'", label, name);
    if (!off)
        GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s': missing 'data_offsets'", label, name);

    if (!json_is_string(dt))
        GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s': 'dtype' is not a string", label, name);
    if (!dtype_from_name(json_string_value(dt), &t->dtype))
        GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s' (known: " GP_KNOWN_DTYPES ")",
                label, name, json_string_value(dt));

    if (!json_is_array(sh))
        GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s': 'shape' is not an array", label, name);
    size_t nd = json_array_size(sh);
    if (nd > GP_ST_MAX_DIMS)
        GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s': shape has %zu dims, at most %d are allowed",
                label, name, nd, GP_ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t bytes = gp_dtype_size(t->dtype);
    for (size_t i = 0; i < nd; i++) {
        json_int_t d = nonneg_int(json_array_get(sh, i));
        if (d < 0)
            GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s': shape entry %zu is not a non-negative integer",
                    label, name, i);
        t->shape[i] = d;
        if (!gp_mul_u64(bytes, (uint64_t)d, &bytes))
            GP_FAIL(GP_ERR_OVERFLOW, "%s: tensor '%s': byte size of the shape overflows 64 bits",
                    label, name);
    }

    if (!json_is_array(off) || json_array_size(off) != 2)
        GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s': 'data_offsets' must be an array of two integers",
                label, name);
    json_int_t b = nonneg_int(json_array_get(off, 0)), en = nonneg_int(json_array_get(off, 1));
    if (b < 0 || en < 0)
        GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s': data offsets must be non-negative integers",
                label, name);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)en;
    if (t->begin > t->end)
        GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s': data offsets [%llu, %llu) are reversed", label,
                name, (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > data_size)
        GP_FAIL(GP_ERR_FORMAT,
                "%s: tensor '%s': data offsets [%llu, %llu) run past the end of the data section (%llu bytes)",
                label, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                (unsigned long long)data_size);
    if (t->end - t->begin != bytes)
        GP_FAIL(GP_ERR_FORMAT,
                "%s: tensor '%s': wrong size for shape: data offsets [%llu, %llu) hold %llu bytes, "
                "the %s shape needs %llu",
                label, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                (unsigned long long)(t->end - t->begin), gp_dtype_name(t->dtype),
                (unsigned long long)bytes);
    return GP_OK;
}

static int cmp_begin(const void *a, const void *b)
{
    const gp_st_tensor *x = *(const gp_st_tensor *const *)a, *y = *(const gp_st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The tensors must cover [0, data_size) exactly: no gap, no overlap, no
 * trailing bytes (as the reference implementation requires). A zero-sized
 * tensor takes no room but must still sit where the previous one ends. */
static gp_status check_tiling(gp_st_file *f, uint64_t data_size, const char *label)
{
    gp_st_tensor **by = malloc((f->n ? f->n : 1) * sizeof *by);
    if (!by)
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory sorting %zu tensors", label, f->n);
    for (size_t i = 0; i < f->n; i++)
        by[i] = &f->t[i];
    qsort(by, f->n, sizeof *by, cmp_begin);
    uint64_t cursor = 0;
    const gp_st_tensor *prev = NULL; /* the tensor that ends at cursor */
    gp_status s = GP_OK;
    for (size_t i = 0; i < f->n && s == GP_OK; i++) {
        const gp_st_tensor *t = by[i];
        if (t->begin < cursor) {
            gp_set_error("%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", label,
                         prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end,
                         t->name, (unsigned long long)t->begin, (unsigned long long)t->end);
            s = GP_ERR_FORMAT;
        } else if (t->begin > cursor) {
            if (prev)
                gp_set_error("%s: gap of bytes [%llu, %llu) between tensor '%s' and tensor '%s'",
                             label, (unsigned long long)cursor, (unsigned long long)t->begin,
                             prev->name, t->name);
            else
                gp_set_error("%s: gap of bytes [0, %llu) before tensor '%s'", label,
                             (unsigned long long)t->begin, t->name);
            s = GP_ERR_FORMAT;
        } else if (t->end > cursor || !prev) {
            cursor = t->end;
            prev = t;
        }
    }
    if (s == GP_OK && cursor != data_size) {
        if (prev)
            gp_set_error("%s: trailing bytes [%llu, %llu) after tensor '%s' belong to no tensor",
                         label, (unsigned long long)cursor, (unsigned long long)data_size, prev->name);
        else
            gp_set_error("%s: data section has %llu bytes but the header lists no tensor", label,
                         (unsigned long long)data_size);
        s = GP_ERR_FORMAT;
    }
    free(by);
    return s;
}

/* Parse the header object into f (tensors unsorted, data pointers unset). */
static gp_status parse_header(const json_t *root, uint64_t data_size, const char *label,
                              gp_st_file *f)
{
    size_t cap = json_object_size(root);
    f->t = calloc(cap ? cap : 1, sizeof *f->t);
    if (!f->t)
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory for %zu tensor entries", label, cap);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)root, k, v) {
        if (strcmp(k, "__metadata__") == 0) {
            GP_TRY(check_metadata(v, label));
            continue;
        }
        gp_st_tensor *t = &f->t[f->n];
        t->name = strdup(k);
        if (!t->name)
            GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory copying tensor name '%s'", label, k);
        f->n++;
        GP_TRY(parse_entry(k, v, data_size, label, t));
    }
    return GP_OK;
}

gp_status gp_st_parse(const uint8_t *buf, size_t len, const char *label, gp_st_file **out)
{
    if (!label)
        label = "<safetensors>";
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: gp_st_parse needs an output pointer", label);
    *out = NULL;
    if (!buf && len)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: NULL buffer of %zu bytes", label, len);
    if (len < 8)
        GP_FAIL(GP_ERR_FORMAT, "%s: file is %zu bytes, shorter than the 8-byte header length",
                label, len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | buf[i];
    if (n > GP_ST_MAX_HEADER)
        GP_FAIL(GP_ERR_FORMAT, "%s: header length %llu exceeds the %u-byte cap", label,
                (unsigned long long)n, GP_ST_MAX_HEADER);
    if (n > len - 8)
        GP_FAIL(GP_ERR_FORMAT, "%s: truncated header: header length is %llu but only %zu bytes follow",
                label, (unsigned long long)n, len - 8);
    const char *hdr = (const char *)buf + 8;
    const uint8_t *data = buf + 8 + n;
    uint64_t data_size = len - 8 - n;

    /* JSON text holds no NUL byte, but jansson 2.14 skips one that follows
     * a number ("[0,4\0]" parses), so look for it before jansson does. */
    const char *nul = memchr(hdr, '\0', (size_t)n);
    if (nul)
        GP_FAIL(GP_ERR_FORMAT, "%s: header is not valid JSON: NUL byte at byte %zu of the header",
                label, (size_t)(nul - hdr));
    json_error_t jerr;
    json_t *root = json_loadb(hdr, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_duplicate_key)
            return fail_duplicate(hdr, (size_t)n, (size_t)jerr.position, label);
        GP_FAIL(GP_ERR_FORMAT, "%s: header is not valid JSON: %s (byte %d of the header)", label,
                jerr.text, jerr.position);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        GP_FAIL(GP_ERR_FORMAT, "%s: header is a JSON array; it must be an object mapping tensor names to entries", label);
    }
    gp_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        json_decref(root);
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory", label);
    }
    gp_status s = parse_header(root, data_size, label, f);
    json_decref(root);
    if (s == GP_OK)
        s = check_tiling(f, data_size, label);
    if (s != GP_OK) {
        gp_st_free(f);
        return s;
    }
    for (size_t i = 0; i < f->n; i++)
        f->t[i].data = data + f->t[i].begin;
    qsort(f->t, f->n, sizeof *f->t, cmp_name);
    *out = f;
    return GP_OK;
}
