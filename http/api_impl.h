/* Shared inside http/ (and by its white-box tests): text made safe for JSON
 * and Prometheus, which both require UTF-8. */
#ifndef GP_HTTP_API_IMPL_H
#define GP_HTTP_API_IMPL_H

#include <stddef.h>

/* s[len] with every invalid UTF-8 sequence replaced by U+FFFD, one per
 * maximal subpart as WHATWG and Python's errors="replace" do; malloc'd,
 * NUL-terminated (s may hold NUL bytes, which stay), *out_len its length.
 * NULL only when out of memory. */
char *gp_api_utf8_fix(const char *s, size_t len, size_t *out_len);

#endif
