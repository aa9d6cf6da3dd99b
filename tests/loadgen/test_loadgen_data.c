/* bench-serve's inputs: the random and shared-prefix datasets (lengths in
 * range, ids in the vocabulary, prefixes identical within a group and
 * apart between groups, seeded), JSONL files and their refusals by line,
 * and the event-stream parser fed split at every byte boundary. */
#include <unistd.h>

#include "gp_loadgen.h"
#include "gp_test.h"

static void test_random_dataset(void **state)
{
    (void)state;
    gp_lg_random_params p = {.num_prompts = 2000, .input_len = 100, .output_len = 20, .range_ratio = 0.25,
                             .vocab = 50, .seed = 3};
    gp_lg_dataset *d, *e;
    GP_CHECK_OK(gp_lg_dataset_random(&p, &d));
    GP_CHECK_OK(gp_lg_dataset_random(&p, &e));
    assert_int_equal(gp_lg_dataset_size(d), 2000);
    int in_min = 1 << 30, in_max = 0, out_min = 1 << 30, out_max = 0, id_max = 0;
    for (int i = 0; i < 2000; i++) {
        gp_lg_prompt q = gp_lg_dataset_get(d, i), r = gp_lg_dataset_get(e, i);
        assert_null(q.text);
        assert_int_equal(q.group, -1);
        in_min = q.n_ids < in_min ? q.n_ids : in_min;
        in_max = q.n_ids > in_max ? q.n_ids : in_max;
        out_min = q.max_tokens < out_min ? q.max_tokens : out_min;
        out_max = q.max_tokens > out_max ? q.max_tokens : out_max;
        for (int k = 0; k < q.n_ids; k++) {
            assert_true(q.ids[k] >= 0 && q.ids[k] < 50);
            id_max = q.ids[k] > id_max ? q.ids[k] : id_max;
        }
        /* the same seed, the same prompts */
        assert_int_equal(q.n_ids, r.n_ids);
        assert_int_equal(q.max_tokens, r.max_tokens);
        assert_memory_equal(q.ids, r.ids, (size_t)q.n_ids * sizeof *q.ids);
    }
    /* [floor(100 x 0.75), floor(100 x 1.25)] and [15, 25], both ends drawn */
    assert_int_equal(in_min, 75);
    assert_int_equal(in_max, 125);
    assert_int_equal(out_min, 15);
    assert_int_equal(out_max, 25);
    assert_int_equal(id_max, 49);
    gp_lg_dataset_destroy(d);
    gp_lg_dataset_destroy(e);

    p.range_ratio = 0;
    p.num_prompts = 10;
    GP_CHECK_OK(gp_lg_dataset_random(&p, &d));
    for (int i = 0; i < 10; i++)
        assert_true(gp_lg_dataset_get(d, i).n_ids == 100 && gp_lg_dataset_get(d, i).max_tokens == 20);
    gp_lg_dataset_destroy(d);
    p.range_ratio = 1.0;
    GP_CHECK_FAIL(gp_lg_dataset_random(&p, &d), GP_ERR_INVALID_ARG,
                  "--random-range-ratio 1 is out of range; allowed: [0, 1)");
    p.range_ratio = 0;
    p.vocab = 0;
    GP_CHECK_FAIL(gp_lg_dataset_random(&p, &d), GP_ERR_INVALID_ARG, "--vocab 0 is out of range");
}

static void test_shared_prefix(void **state)
{
    (void)state;
    enum { G = 5, R = 4, P = 32, Q = 8 };
    gp_lg_shared_prefix_params p = {.groups = G, .per_group = R, .prefix_len = P, .question_len = Q, .output_len = 6,
                                    .vocab = 1000, .seed = 11};
    gp_lg_dataset *d;
    GP_CHECK_OK(gp_lg_dataset_shared_prefix(&p, &d));
    assert_int_equal(gp_lg_dataset_size(d), G * R);
    const int32_t *prefix[G] = {NULL};
    int per[G] = {0}, in_order = 1;
    for (int i = 0; i < G * R; i++) {
        gp_lg_prompt q = gp_lg_dataset_get(d, i);
        assert_true(q.group >= 0 && q.group < G);
        assert_int_equal(q.n_ids, P + Q);
        assert_int_equal(q.max_tokens, 6);
        if (!prefix[q.group])
            prefix[q.group] = q.ids;
        else
            assert_memory_equal(prefix[q.group], q.ids, P * sizeof *q.ids);
        per[q.group]++;
        in_order &= i == 0 || gp_lg_dataset_get(d, i - 1).group <= q.group;
    }
    for (int g = 0; g < G; g++) {
        assert_int_equal(per[g], R);
        for (int h = 0; h < g; h++)
            assert_true(memcmp(prefix[g], prefix[h], P * sizeof *prefix[g]) != 0);
    }
    assert_false(in_order); /* shuffled: the groups interleave */
    gp_lg_dataset_destroy(d);
    p.prefix_len = 0;
    GP_CHECK_FAIL(gp_lg_dataset_shared_prefix(&p, &d), GP_ERR_INVALID_ARG, "--prefix-len 0 is out of range");
}

static char *write_tmp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/gp_lg_jsonl_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_true(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void test_jsonl(void **state)
{
    (void)state;
    char *path = write_tmp("{\"prompt\": \"hello there\", \"max_tokens\": 5}\n"
                           "\n"
                           "{\"prompt\": [1, 2, 3], \"max_tokens\": 7, \"note\": \"ignored\"}\r\n"
                           "{\"prompt\": [9], \"max_tokens\": 1}");
    gp_lg_dataset *d;
    GP_CHECK_OK(gp_lg_dataset_jsonl(path, 0, &d));
    assert_int_equal(gp_lg_dataset_size(d), 3);
    gp_lg_prompt a = gp_lg_dataset_get(d, 0), b = gp_lg_dataset_get(d, 1), c = gp_lg_dataset_get(d, 2);
    assert_string_equal(a.text, "hello there");
    assert_int_equal(a.max_tokens, 5);
    assert_null(b.text);
    assert_int_equal(b.n_ids, 3);
    assert_true(b.ids[0] == 1 && b.ids[2] == 3 && b.max_tokens == 7);
    assert_true(c.n_ids == 1 && c.ids[0] == 9);
    gp_lg_dataset_destroy(d);
    GP_CHECK_OK(gp_lg_dataset_jsonl(path, 2, &d));
    assert_int_equal(gp_lg_dataset_size(d), 2);
    gp_lg_dataset_destroy(d);
    GP_CHECK_FAIL(gp_lg_dataset_jsonl(path, 4, &d), GP_ERR_INVALID_ARG, "holds 3 prompts, fewer than --num-prompts 4");
    unlink(path);

    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"{\"prompt\": \"a\", \"max_tokens\": 1}\n{\"prompt\": \"b\", \"max_tokens\": 1}\n{\"prompt\": \"c\"}\n",
         ":3: no \"max_tokens\""},
        {"{\"prompt\": [1, -2], \"max_tokens\": 1}\n", ":1: \"prompt\"[1] is not a token id"},
        {"\n{\"prompt\": \"a\", \"max_tokens\": 0}\n", ":2: \"max_tokens\" must be an integer in [1,"},
        {"{\"prompt\": \"a\", \"max_tokens\": 1\n", ":1: not JSON"},
        {"[1, 2]\n", ":1: a JSON array, not an object"},
        {"{\"prompt\": 5, \"max_tokens\": 1}\n", ":1: \"prompt\" must be a non-empty string or array"},
        {"\n\n", "no prompts in the file"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path = write_tmp(bad[i].text);
        gp_status st = gp_lg_dataset_jsonl(path, 0, &d);
        assert_int_equal(st, GP_ERR_FORMAT);
        if (!strstr(gp_last_error(), bad[i].needle) || !strstr(gp_last_error(), path))
            fail_msg("case %zu: '%s' lacks '%s' or the path", i, gp_last_error(), bad[i].needle);
        unlink(path);
    }
    GP_CHECK_FAIL(gp_lg_dataset_jsonl("/nonexistent/x.jsonl", 0, &d), GP_ERR_IO, "/nonexistent/x.jsonl");
}

/* ------------------------------------------------------------ event stream */

typedef struct events {
    char got[16][128];
    int n;
} events;

static void on_event(void *ctx, const char *data, size_t len)
{
    events *e = ctx;
    assert_true(e->n < 16 && len < 128);
    memcpy(e->got[e->n], data, len);
    e->got[e->n][len] = '\0';
    e->n++;
}

/* Events as an OpenAI server sends them, with what the format also allows:
 * a comment, another field, CRLF and CR line ends, a data field of two
 * lines, "data:" without its space, an event without data. */
static const char STREAM[] = ": keep-alive\n\n"
                             "data: {\"choices\": [{\"text\": \"a\"}]}\n\n"
                             "event: message\r\ndata: {\"x\": 1}\r\n\r\n"
                             "data:two\ndata: lines\n\n"
                             "id: 7\n\n"
                             "data: cr\r\rdata: [DONE]\n\n"
                             "data: not ended";
static const char *const WANT[] = {"{\"choices\": [{\"text\": \"a\"}]}", "{\"x\": 1}", "two\nlines", "cr", "[DONE]"};

static void check_events(const events *e)
{
    assert_int_equal(e->n, 5);
    for (int i = 0; i < 5; i++)
        assert_string_equal(e->got[i], WANT[i]);
}

static void test_sse_splits(void **state)
{
    (void)state;
    size_t n = sizeof STREAM - 1;
    for (size_t cut = 0; cut <= n; cut++) {
        events e = {.n = 0};
        gp_lg_sse *s;
        GP_CHECK_OK(gp_lg_sse_create(on_event, &e, 1024, &s));
        GP_CHECK_OK(gp_lg_sse_feed(s, STREAM, cut));
        GP_CHECK_OK(gp_lg_sse_feed(s, STREAM + cut, n - cut));
        check_events(&e);
        gp_lg_sse_destroy(s);
    }
    events e = {.n = 0};
    gp_lg_sse *s;
    GP_CHECK_OK(gp_lg_sse_create(on_event, &e, 1024, &s));
    for (size_t i = 0; i < n; i++)
        GP_CHECK_OK(gp_lg_sse_feed(s, STREAM + i, 1));
    check_events(&e);
    gp_lg_sse_destroy(s);
}

static void test_sse_limit(void **state)
{
    (void)state;
    events e = {.n = 0};
    gp_lg_sse *s;
    GP_CHECK_OK(gp_lg_sse_create(on_event, &e, 16, &s));
    GP_CHECK_OK(gp_lg_sse_feed(s, "data: 0123456789\n\n", 18));
    assert_int_equal(e.n, 1);
    GP_CHECK_FAIL(gp_lg_sse_feed(s, "data: 0123456789abcdef\n\n", 24), GP_ERR_FORMAT, "exceeds 16 bytes");
    gp_lg_sse_destroy(s);
    /* many lines of one event count together */
    GP_CHECK_OK(gp_lg_sse_create(on_event, &e, 16, &s));
    GP_CHECK_FAIL(gp_lg_sse_feed(s, "data: 01234567\ndata: 01234567\n", 30), GP_ERR_FORMAT, "exceeds 16 bytes");
    gp_lg_sse_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_dataset), cmocka_unit_test(test_shared_prefix), cmocka_unit_test(test_jsonl),
        cmocka_unit_test(test_sse_splits),     cmocka_unit_test(test_sse_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
