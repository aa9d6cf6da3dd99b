/* Builds safetensors files for the tests; see st_builder.h. */
#include "st_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "st_builder: out of memory\n");
        abort();
    }
    return p;
}

uint8_t *st_make_raw(uint64_t len_field, const char *header, const void *data, size_t data_len,
                     size_t *len)
{
    size_t hl = strlen(header);
    *len = 8 + hl + data_len;
    uint8_t *buf = xmalloc(*len);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(len_field >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (data_len)
        memcpy(buf + 8 + hl, data, data_len);
    return buf;
}

uint8_t *st_make(const char *header, const void *data, size_t data_len, size_t *len)
{
    return st_make_raw(strlen(header), header, data, data_len, len);
}

typedef struct st_item {
    char *name;
    char dtype[16];
    int ndim;
    int64_t shape[8];
    uint8_t *data;
    size_t bytes;
} st_item;

struct st_builder {
    st_item *items;
    size_t n, cap;
};

st_builder *st_builder_new(void)
{
    st_builder *b = xmalloc(sizeof *b);
    memset(b, 0, sizeof *b);
    return b;
}

void st_builder_add(st_builder *b, const char *name, const char *dtype, int ndim,
                    const int64_t *shape, const void *data, size_t bytes)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        st_item *n = realloc(b->items, b->cap * sizeof *n);
        if (!n)
            abort();
        b->items = n;
    }
    st_item *it = &b->items[b->n++];
    it->name = xmalloc(strlen(name) + 1);
    strcpy(it->name, name);
    snprintf(it->dtype, sizeof it->dtype, "%s", dtype);
    it->ndim = ndim;
    memcpy(it->shape, shape, (size_t)ndim * sizeof *shape);
    it->data = xmalloc(bytes);
    memcpy(it->data, data, bytes);
    it->bytes = bytes;
}

uint8_t *st_builder_finish(st_builder *b, size_t *len)
{
    size_t cap = 256 + b->n * 256, at = 0, total = 0;
    char *h = xmalloc(cap);
    at += (size_t)snprintf(h + at, cap - at, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < b->n; i++) {
        st_item *it = &b->items[i];
        if (cap - at < strlen(it->name) + 512) {
            cap = 2 * cap + strlen(it->name);
            h = realloc(h, cap);
            if (!h)
                abort();
        }
        at += (size_t)snprintf(h + at, cap - at, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", it->name,
                               it->dtype);
        for (int d = 0; d < it->ndim; d++)
            at += (size_t)snprintf(h + at, cap - at, "%s%lld", d ? "," : "",
                                   (long long)it->shape[d]);
        at += (size_t)snprintf(h + at, cap - at, "],\"data_offsets\":[%zu,%zu]}", total,
                               total + it->bytes);
        total += it->bytes;
    }
    snprintf(h + at, cap - at, "}");
    uint8_t *data = xmalloc(total);
    size_t off = 0;
    for (size_t i = 0; i < b->n; i++) {
        memcpy(data + off, b->items[i].data, b->items[i].bytes);
        off += b->items[i].bytes;
        free(b->items[i].data);
        free(b->items[i].name);
    }
    uint8_t *buf = st_make(h, data, total, len);
    free(data);
    free(h);
    free(b->items);
    free(b);
    return buf;
}

int st_write_file(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = len ? fwrite(buf, 1, len, f) : 0;
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

int st_write_text(const char *path, const char *text)
{
    return st_write_file(path, text, strlen(text));
}
