/* Test helpers that build safetensors files in memory, either from a header
 * written out literally or from a list of tensors, and write files to disk. */
#ifndef ST_BUILDER_H
#define ST_BUILDER_H

#include <stddef.h>
#include <stdint.h>

/* 8-byte length of header, header text, then data_len bytes of data.
 * Returns a malloc'd buffer of exactly *len bytes (aborts on OOM). */
uint8_t *st_make(const char *header, const void *data, size_t data_len, size_t *len);
/* Like st_make but with an arbitrary header-length field. */
uint8_t *st_make_raw(uint64_t len_field, const char *header, const void *data, size_t data_len,
                     size_t *len);

/* Collects tensors and writes a well-formed file with them packed in order. */
typedef struct st_builder st_builder;
st_builder *st_builder_new(void);
/* shape has ndim entries; bytes of data are copied. */
void st_builder_add(st_builder *b, const char *name, const char *dtype, int ndim,
                    const int64_t *shape, const void *data, size_t bytes);
/* Serialise and free b; returns a malloc'd buffer of *len bytes. */
uint8_t *st_builder_finish(st_builder *b, size_t *len);

/* Write buf to path; 0 on success. */
int st_write_file(const char *path, const void *buf, size_t len);
int st_write_text(const char *path, const char *text);

#endif
