/* Buffers grown by doubling: the one growth rule of the text, id and sample
 * buffers that appends fill. */
#include <stdlib.h>

#include "gp_common.h"

void *gp_grow(void *buf, size_t *cap, size_t need)
{
    if (buf && need <= *cap)
        return buf;
    size_t n = *cap ? *cap : 256;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n * 2;
    void *b = realloc(buf, n);
    if (b)
        *cap = n;
    return b;
}
