/* Block files: a round trip through a fresh store on the same dir, and every
 * damaged or foreign file a miss with a warning naming it and the reason. */
#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvs_test_util.h"

typedef struct { char dir[256]; int32_t t[12]; uint64_t keys[3]; } fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/gp_kvstore_test.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    for (int i = 0; i < 12; i++)
        f->t[i] = 500 + 3 * i;
    gp_kvstore *s = kvs_test_store(8, f->dir);
    kvs_test_put_prompt(s, f->t, 12, f->keys);
    assert_int_equal(KVS_STAT(s, files_written), 3);
    gp_kvstore_destroy(s);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    DIR *d = opendir(f->dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", f->dir, e->d_name);
        if (e->d_name[0] != '.' && unlink(p) != 0)
            rmdir(p);
    }
    if (d)
        closedir(d);
    rmdir(f->dir);
    free(f);
    return 0;
}

static void path_of(const fx *f, int b, char *buf)
{
    GP_CHECK_OK(gp_kvstore_file_path(f->dir, f->keys[b], buf, 512));
}

/* Rewrites block b's file through edit(bytes, &len). */
static void edit_file(const fx *f, int b, void (*edit)(unsigned char *, long *))
{
    char p[512];
    path_of(f, b, p);
    FILE *fp = fopen(p, "rb");
    assert_non_null(fp);
    unsigned char buf[4096];
    long n = (long)fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    edit(buf, &n);
    fp = fopen(p, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
}

/* Matches all three blocks on a fresh store: returns how many matched. */
static int fresh_match(const fx *f, gp_kvstore_stats *st)
{
    gp_kvstore *s = kvs_test_store(8, f->dir);
    int m = -1;
    GP_CHECK_OK(gp_kvstore_match(s, f->keys, f->t, 3, &m));
    for (int b = 0; b < m; b++) {
        const void *pl;
        unsigned char want[KVS_BLOCK];
        kvs_test_payload(f->keys[b], want);
        GP_CHECK_OK(gp_kvstore_get(s, f->keys[b], &pl));
        assert_memory_equal(pl, want, KVS_BLOCK);
    }
    GP_CHECK_OK(gp_kvstore_release(s, f->keys, m));
    gp_kvstore_get_stats(s, st, false);
    gp_kvstore_destroy(s);
    return m;
}

static void test_round_trip(void **state)
{
    fx *f = *state;
    char p[512];
    path_of(f, 2, p);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_size, 48 + 4 * KVS_BS + KVS_BLOCK);
    gp_kvstore_stats st;
    assert_int_equal(fresh_match(f, &st), 3);
    assert_int_equal(st.disk_loads, 3);
    assert_int_equal(st.bytes_loaded, 3 * KVS_BLOCK);
    assert_string_equal(st.last_warning, "");

    /* A prompt longer than what is stored: the block past it is an absent
     * file, a plain miss without a warning. */
    int32_t t[16];
    uint64_t k[4];
    memcpy(t, f->t, sizeof f->t);
    for (int i = 12; i < 16; i++)
        t[i] = i;
    gp_kvstore_identity id = kvs_test_id();
    GP_CHECK_OK(gp_kvstore_chain(&id, t, 16, k, NULL));
    gp_kvstore *s = kvs_test_store(8, f->dir);
    int m;
    GP_CHECK_OK(gp_kvstore_match(s, k, t, 4, &m));
    assert_int_equal(m, 3);
    gp_kvstore_get_stats(s, &st, false);
    assert_int_equal(st.disk_misses[GP_KVSTORE_MISS_ABSENT], 1);
    assert_string_equal(st.last_warning, "");
    GP_CHECK_OK(gp_kvstore_release(s, k, m));
    gp_kvstore_destroy(s);
}

/* Block 1's file damaged: blocks 0 match, 1 is a miss of reason r with a
 * warning naming the file, and nothing crashes. */
static void expect_miss(const fx *f, gp_kvstore_miss r, const char *why)
{
    gp_kvstore_stats st;
    assert_int_equal(fresh_match(f, &st), 1);
    assert_int_equal(st.disk_misses[r], 1);
    assert_int_equal(st.disk_loads, 1);
    char p[512];
    path_of(f, 1, p);
    if (!strstr(st.last_warning, p) || !strstr(st.last_warning, why) ||
        !strstr(st.last_warning, gp_kvstore_miss_name(r)))
        fail_msg("warning '%s' lacks the file, '%s' or '%s'", st.last_warning, why, gp_kvstore_miss_name(r));
}

static void cut_half(unsigned char *b, long *n) { *n /= 2; }
static void cut_header(unsigned char *b, long *n) { *n = 20; }
static void cut_all(unsigned char *b, long *n) { *n = 0; }
static void flip_payload(unsigned char *b, long *n) { b[*n - 7] ^= 0x10; }
static void bad_magic(unsigned char *b, long *n) { b[0] = 'X'; }
static void bad_version(unsigned char *b, long *n) { b[8] = 9; }
static void extra_byte(unsigned char *b, long *n) { b[(*n)++] = 0; }

static void test_truncated(void **state)
{
    edit_file(*state, 1, cut_half);
    expect_miss(*state, GP_KVSTORE_MISS_TRUNCATED, "truncated");
}

static void test_truncated_header(void **state)
{
    edit_file(*state, 1, cut_header);
    expect_miss(*state, GP_KVSTORE_MISS_TRUNCATED, "the header alone is 48");
}

static void test_empty(void **state)
{
    edit_file(*state, 1, cut_all);
    expect_miss(*state, GP_KVSTORE_MISS_TRUNCATED, "truncated: 0 bytes");
}

static void test_flipped_byte(void **state)
{
    edit_file(*state, 1, flip_payload);
    expect_miss(*state, GP_KVSTORE_MISS_CHECKSUM, "payload checksum");
}

static void test_extra_byte(void **state)
{
    edit_file(*state, 1, extra_byte);
    expect_miss(*state, GP_KVSTORE_MISS_CHECKSUM, "more than the");
}

static void test_bad_magic(void **state)
{
    edit_file(*state, 1, bad_magic);
    expect_miss(*state, GP_KVSTORE_MISS_MAGIC, "not a greenpipe KV block file");
}

static void test_bad_version(void **state)
{
    edit_file(*state, 1, bad_version);
    expect_miss(*state, GP_KVSTORE_MISS_VERSION, "format version 9");
}

/* A file another model wrote under block 1's name. */
static void test_other_identity(void **state)
{
    fx *f = *state;
    gp_kvstore_params p = gp_kvstore_default_params();
    p.id = kvs_test_id();
    p.id.model = "another-model";
    p.capacity_bytes = KVS_BLOCK;
    p.dir = f->dir;
    p.warn_stderr = false;
    gp_kvstore *o;
    GP_CHECK_OK(gp_kvstore_create(&p, &o));
    unsigned char pl[KVS_BLOCK];
    kvs_test_payload(f->keys[1], pl);
    GP_CHECK_OK(gp_kvstore_put(o, f->keys[1], f->t + KVS_BS, pl));
    gp_kvstore_destroy(o);
    expect_miss(f, GP_KVSTORE_MISS_IDENTITY, "another identity");
}

/* Block 2's file copied to block 1's name. */
static void test_wrong_key(void **state)
{
    fx *f = *state;
    char p1[512], p2[512];
    path_of(f, 1, p1);
    path_of(f, 2, p2);
    assert_int_equal(rename(p2, p1), 0);
    expect_miss(f, GP_KVSTORE_MISS_KEY, "holds key");
}

/* Other tokens under block 1's key, as a key collision would leave. */
static void test_other_tokens(void **state)
{
    fx *f = *state;
    gp_kvstore *s = kvs_test_store(8, f->dir);
    int32_t other[KVS_BS] = {1, 2, 3, 4};
    unsigned char pl[KVS_BLOCK];
    kvs_test_payload(f->keys[1], pl);
    GP_CHECK_OK(gp_kvstore_put(s, f->keys[1], other, pl));
    gp_kvstore_destroy(s);
    expect_miss(f, GP_KVSTORE_MISS_TOKENS, "other tokens under this key");
}

static void test_not_a_file(void **state)
{
    fx *f = *state;
    char p[512];
    path_of(f, 1, p);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkdir(p, 0755), 0);
    expect_miss(f, GP_KVSTORE_MISS_IO, "not a regular file");
}

/* The damaged file is left alone until a put of its key replaces it. */
static void test_put_replaces_damaged(void **state)
{
    fx *f = *state;
    edit_file(f, 1, flip_payload);
    gp_kvstore *s = kvs_test_store(8, f->dir);
    kvs_test_put_prompt(s, f->t, 12, f->keys); /* block 1 is not in memory: its file is written anew */
    gp_kvstore_destroy(s);
    gp_kvstore_stats st;
    assert_int_equal(fresh_match(f, &st), 3);
    assert_int_equal(st.disk_misses[GP_KVSTORE_MISS_CHECKSUM], 0);
}

/* One block of memory, pinned by the first load: the second block's file is
 * good but there is no room, a miss of its own reason. */
static void test_no_room(void **state)
{
    fx *f = *state;
    gp_kvstore *s = kvs_test_store(1, f->dir);
    int m;
    GP_CHECK_OK(gp_kvstore_match(s, f->keys, f->t, 3, &m));
    assert_int_equal(m, 1);
    assert_int_equal(KVS_STAT(s, disk_misses[GP_KVSTORE_MISS_NO_ROOM]), 1);
    GP_CHECK_OK(gp_kvstore_release(s, f->keys, 1));
    gp_kvstore_destroy(s);
}

/* A dir that vanished: the put still holds the block in memory. */
static void test_write_failure(void **state)
{
    fx *f = *state;
    char sub[300];
    snprintf(sub, sizeof sub, "%s/sub", f->dir);
    gp_kvstore *s = kvs_test_store(8, sub);
    assert_int_equal(rmdir(sub), 0);
    unsigned char pl[KVS_BLOCK];
    kvs_test_payload(f->keys[0], pl);
    GP_CHECK_OK(gp_kvstore_put(s, f->keys[0], f->t, pl));
    gp_kvstore_stats st;
    gp_kvstore_get_stats(s, &st, false);
    assert_int_equal(st.write_errors, 1);
    assert_int_equal(st.blocks_held, 1);
    assert_non_null(strstr(st.last_warning, "cannot write"));
    gp_kvstore_destroy(s);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_round_trip),    T(test_truncated),      T(test_truncated_header), T(test_empty),
        T(test_flipped_byte),  T(test_extra_byte),     T(test_bad_magic),        T(test_bad_version),
        T(test_other_identity), T(test_wrong_key),     T(test_other_tokens),     T(test_not_a_file),
        T(test_put_replaces_damaged), T(test_no_room), T(test_write_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
