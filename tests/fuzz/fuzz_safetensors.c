/* libFuzzer target for gp_st_parse: any bytes as a whole safetensors file.
 * A file that parses must describe tensors that lie inside the buffer, tile
 * the data section and match their shapes. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"

/* Reading the tensor bytes into a volatile keeps the compiler from dropping
 * the reads that let the sanitizer check every data pointer. */
static volatile unsigned fuzz_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gp_st_file *f = (gp_st_file *)&f; /* poisoned: must come back NULL on failure */
    gp_clear_error();
    gp_status s = gp_st_parse(data, size, "fuzz.safetensors", &f);
    if (s != GP_OK) {
        fuzz_check_failure(s, "gp_st_parse");
        FUZZ_REQUIRE(f == NULL, "gp_st_parse failed but left *out set");
        return 0;
    }
    FUZZ_REQUIRE(f != NULL, "gp_st_parse returned OK and no file");
    FUZZ_REQUIRE(size >= 8, "a %zu-byte file parsed", size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | data[i];
    FUZZ_REQUIRE(hlen <= size - 8, "header length %llu past the end", (unsigned long long)hlen);
    FUZZ_REQUIRE(memchr(data + 8, '\0', (size_t)hlen) == NULL, "accepted a header with a NUL byte");
    const uint8_t *sec = data + 8 + hlen, *end = data + size;
    uint64_t total = 0;
    unsigned sum = 0;
    for (size_t i = 0; i < gp_st_count(f); i++) {
        const gp_st_tensor *t = gp_st_get(f, i);
        FUZZ_REQUIRE(t && t->name, "tensor %zu missing", i);
        FUZZ_REQUIRE(t->begin <= t->end && t->data == sec + t->begin && t->data <= end &&
                         t->end - t->begin <= (uint64_t)(end - t->data),
                     "tensor '%s' [%llu, %llu) lies outside the buffer", t->name,
                     (unsigned long long)t->begin, (unsigned long long)t->end);
        FUZZ_REQUIRE(t->ndim >= 0 && t->ndim <= GP_ST_MAX_DIMS, "tensor '%s' has %d dims",
                     t->name, t->ndim);
        uint64_t bytes = gp_dtype_size(t->dtype);
        FUZZ_REQUIRE(bytes > 0, "tensor '%s' has dtype %d", t->name, (int)t->dtype);
        for (int d = 0; d < t->ndim; d++) {
            FUZZ_REQUIRE(t->shape[d] >= 0, "tensor '%s' dim %d is %lld", t->name, d,
                         (long long)t->shape[d]);
            FUZZ_REQUIRE(gp_mul_u64(bytes, (uint64_t)t->shape[d], &bytes),
                         "tensor '%s' size overflows", t->name);
        }
        FUZZ_REQUIRE(bytes == t->end - t->begin, "tensor '%s' holds %llu bytes, shape needs %llu",
                     t->name, (unsigned long long)(t->end - t->begin), (unsigned long long)bytes);
        FUZZ_REQUIRE(gp_st_find(f, t->name) == t, "gp_st_find('%s') misses it", t->name);
        if (i > 0)
            FUZZ_REQUIRE(strcmp(gp_st_get(f, i - 1)->name, t->name) < 0, "names not sorted");
        for (uint64_t b = 0; b < bytes; b++)
            sum += t->data[b];
        total += bytes;
    }
    FUZZ_REQUIRE(total == (uint64_t)(end - sec), "tensors cover %llu of %llu data bytes",
                 (unsigned long long)total, (unsigned long long)(end - sec));
    FUZZ_REQUIRE(gp_st_get(f, gp_st_count(f)) == NULL, "gp_st_get past the end");
    fuzz_sink = sum;
    gp_st_free(f);
    return 0;
}

#ifdef GP_FUZZ_LIBFUZZER
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

/* Nearly every mutation of a whole file breaks its 8-byte header length, and
 * the parser then stops at "truncated header" before the JSON. So most of
 * the time mutate the header text alone and rewrite the length to match;
 * sometimes also resize the data section, which the tensors must tile. */
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    uint64_t n = 0;
    for (int i = 7; size >= 8 && i >= 0; i--)
        n = (n << 8) | data[i];
    if (size < 8 || n == 0 || n > size - 8 || seed % 4 == 0)
        return LLVMFuzzerMutate(data, size, max_size);
    size_t dlen = size - 8 - (size_t)n;
    if (seed % 8 == 1) { /* new data length in [0, 2 dlen + 16], zero-filled */
        size_t want = (seed >> 3) % (2 * dlen + 17);
        if (want > max_size - 8 - (size_t)n)
            want = max_size - 8 - (size_t)n;
        if (want > dlen)
            memset(data + size, 0, want - dlen);
        dlen = want;
    }
    uint8_t *tail = malloc(dlen ? dlen : 1);
    if (!tail)
        return LLVMFuzzerMutate(data, size, max_size);
    memcpy(tail, data + 8 + n, dlen);
    size_t hn = LLVMFuzzerMutate(data + 8, (size_t)n, max_size - 8 - dlen);
    memcpy(data + 8 + hn, tail, dlen);
    free(tail);
    for (int i = 0; i < 8; i++)
        data[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    return 8 + hn + dlen;
}
#endif
