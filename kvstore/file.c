/* Block files of the stored-prefix cache: "<dir>/<key hex>.kvb", written to a
 * temp name and renamed, read back only when every check passes.
 *
 * Format (integers little-endian):
 *   0  magic "GPKVBLK\0"      8  u32 version (1)     12 u32 block_size
 *   16 u64 identity (seed)   24 u64 key             32 u64 payload bytes
 *   40 u64 payload checksum (kvs_checksum)
 *   48 i32 tokens[block_size], then the payload.
 * No fsync: a crash can leave a short or torn file, which the size and
 * checksum checks turn into a miss. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvstore_impl.h"

#define KVB_MAGIC "GPKVBLK"
#define KVB_VERSION 1u
#define KVB_HEADER 48

gp_status gp_kvstore_file_path(const char *dir, uint64_t key, char *buf, size_t cap)
{
    if (!dir || !buf)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: %s is NULL", dir ? "buf" : "dir");
    int n = snprintf(buf, cap, "%s/%016llx.kvb", dir, (unsigned long long)key);
    if (n < 0 || (size_t)n >= cap)
        GP_FAIL(GP_ERR_INVALID_ARG, "kv store: the file path under '%s' needs %d bytes, buffer has %zu", dir, n + 1,
                cap);
    return GP_OK;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

static bool write_all(int fd, const void *buf, uint64_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : (size_t)n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (uint64_t)w;
    }
    return true;
}

/* Bytes read before end of file or an error (errno set when < n and not EOF). */
static uint64_t read_all(int fd, void *buf, uint64_t n, bool *err)
{
    char *p = buf;
    uint64_t got = 0;
    *err = false;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got > (1u << 30) ? (1u << 30) : (size_t)(n - got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            *err = true;
        if (r <= 0)
            break;
        got += (uint64_t)r;
    }
    return got;
}

/* The header and tokens of a block: [KVB_HEADER + 4 * block_size]. */
static void encode_head(const gp_kvstore *s, uint64_t key, const int32_t *tokens, uint64_t sum, unsigned char *h)
{
    memset(h, 0, KVB_HEADER);
    memcpy(h, KVB_MAGIC, sizeof KVB_MAGIC);
    put_u32(h + 8, KVB_VERSION);
    put_u32(h + 12, (uint32_t)s->id.block_size);
    put_u64(h + 16, s->seed);
    put_u64(h + 24, key);
    put_u64(h + 32, s->block_bytes);
    put_u64(h + 40, sum);
    for (int i = 0; i < s->id.block_size; i++)
        put_u32(h + KVB_HEADER + 4 * i, (uint32_t)tokens[i]);
}

void kvs_file_write(gp_kvstore *s, uint64_t key, const int32_t *tokens, const void *payload)
{
    char path[4096], tmp[4200];
    size_t head = KVB_HEADER + 4 * (size_t)s->id.block_size;
    unsigned char *h = malloc(head);
    const char *why = NULL;
    int fd = -1;
    if (gp_kvstore_file_path(s->dir, key, path, sizeof path) != GP_OK) {
        why = "path too long";
        goto fail;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%llu", path, (long)getpid(), (unsigned long long)s->write_seq++);
    if (!h) {
        why = "out of host memory";
        goto fail;
    }
    encode_head(s, key, tokens, kvs_checksum(payload, s->block_bytes), h);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || !write_all(fd, h, head) || !write_all(fd, payload, s->block_bytes)) {
        why = strerror(errno);
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        why = strerror(errno);
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        why = strerror(errno);
        goto fail;
    }
    free(h);
    s->st.files_written++;
    s->st.bytes_written += head + s->block_bytes;
    return;
fail:
    if (fd >= 0)
        close(fd);
    if (why && strcmp(why, "path too long") != 0)
        unlink(tmp);
    free(h);
    s->st.write_errors++;
    kvs_warn(s, "kv store: cannot write %s: %s; the block is kept in memory only", path, why);
}

gp_kvstore_miss kvs_file_read(gp_kvstore *s, uint64_t key, const int32_t *tokens, void *payload, char *why,
                              size_t why_cap)
{
    char path[4096];
    size_t head = KVB_HEADER + 4 * (size_t)s->id.block_size;
    unsigned char *h = NULL;
    gp_kvstore_miss r = GP_KVSTORE_MISS_COUNT;
    bool err;
    if (gp_kvstore_file_path(s->dir, key, path, sizeof path) != GP_OK) {
        snprintf(why, why_cap, "path too long");
        return GP_KVSTORE_MISS_IO;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_cap, "cannot open: %s", strerror(errno));
        return errno == ENOENT ? GP_KVSTORE_MISS_ABSENT : GP_KVSTORE_MISS_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, why_cap, "not a regular file");
        r = GP_KVSTORE_MISS_IO;
        goto out;
    }
    if (!(h = malloc(head))) {
        snprintf(why, why_cap, "out of host memory");
        r = GP_KVSTORE_MISS_IO;
        goto out;
    }
    uint64_t got = read_all(fd, h, KVB_HEADER, &err);
    if (err) {
        snprintf(why, why_cap, "read failed: %s", strerror(errno));
        r = GP_KVSTORE_MISS_IO;
    } else if (got >= sizeof KVB_MAGIC && memcmp(h, KVB_MAGIC, sizeof KVB_MAGIC) != 0) {
        snprintf(why, why_cap, "bad magic: not a greenpipe KV block file");
        r = GP_KVSTORE_MISS_MAGIC;
    } else if (got < KVB_HEADER) {
        snprintf(why, why_cap, "truncated: %llu bytes, the header alone is %d", (unsigned long long)got, KVB_HEADER);
        r = GP_KVSTORE_MISS_TRUNCATED;
    } else if (get_u32(h + 8) != KVB_VERSION) {
        snprintf(why, why_cap, "format version %u; this build reads %u", get_u32(h + 8), KVB_VERSION);
        r = GP_KVSTORE_MISS_VERSION;
    } else if (get_u64(h + 16) != s->seed || get_u32(h + 12) != (uint32_t)s->id.block_size ||
               get_u64(h + 32) != s->block_bytes) {
        snprintf(why, why_cap,
                 "another identity %016llx (block size %u, %llu payload bytes); this store is %016llx (model '%s', "
                 "block size %d, %llu bytes)",
                 (unsigned long long)get_u64(h + 16), get_u32(h + 12), (unsigned long long)get_u64(h + 32),
                 (unsigned long long)s->seed, s->id.model, s->id.block_size, (unsigned long long)s->block_bytes);
        r = GP_KVSTORE_MISS_IDENTITY;
    } else if (get_u64(h + 24) != key) {
        snprintf(why, why_cap, "holds key %016llx", (unsigned long long)get_u64(h + 24));
        r = GP_KVSTORE_MISS_KEY;
    } else if ((uint64_t)st.st_size < head + s->block_bytes) {
        snprintf(why, why_cap, "truncated: %llu bytes of %llu", (unsigned long long)st.st_size,
                 (unsigned long long)(head + s->block_bytes));
        r = GP_KVSTORE_MISS_TRUNCATED;
    } else if ((uint64_t)st.st_size > head + s->block_bytes) {
        snprintf(why, why_cap, "%llu bytes, more than the %llu of a block", (unsigned long long)st.st_size,
                 (unsigned long long)(head + s->block_bytes));
        r = GP_KVSTORE_MISS_CHECKSUM;
    }
    if (r != GP_KVSTORE_MISS_COUNT)
        goto out;
    /* The size was checked, so a short read here is a file cut under us. */
    bool whole = read_all(fd, h + KVB_HEADER, head - KVB_HEADER, &err) == head - KVB_HEADER && !err;
    for (int i = 0; whole && i < s->id.block_size; i++)
        if ((int32_t)get_u32(h + KVB_HEADER + 4 * i) != tokens[i]) {
            snprintf(why, why_cap, "other tokens under this key (token %d is %d, the prompt's %d)", i,
                     (int32_t)get_u32(h + KVB_HEADER + 4 * i), tokens[i]);
            r = GP_KVSTORE_MISS_TOKENS;
            goto out;
        }
    if (whole)
        whole = read_all(fd, payload, s->block_bytes, &err) == s->block_bytes && !err;
    if (err) {
        snprintf(why, why_cap, "read failed: %s", strerror(errno));
        r = GP_KVSTORE_MISS_IO;
    } else if (!whole) {
        snprintf(why, why_cap, "truncated while reading");
        r = GP_KVSTORE_MISS_TRUNCATED;
    } else if (kvs_checksum(payload, s->block_bytes) != get_u64(h + 40)) {
        snprintf(why, why_cap, "payload checksum %016llx, header says %016llx",
                 (unsigned long long)kvs_checksum(payload, s->block_bytes), (unsigned long long)get_u64(h + 40));
        r = GP_KVSTORE_MISS_CHECKSUM;
    }
out:
    free(h);
    close(fd);
    return r;
}
