/* The one input check of mixed batches: each refusal names the bad value and
 * what is allowed, and a good batch reports its rows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gp_stage.h"

static int lens[4] = {0, 5, 10, 2};

static int seq_len(const void *ctx, int seq)
{
    (void)ctx;
    return lens[seq];
}

static const gp_batch_limits LIM = {.max_seqs = 4, .max_rows = 16, .vocab = 100, .max_context = 12,
                                    .seq_len = seq_len};

static void expect_refusal(const gp_batch *b, gp_status want, const char *needle)
{
    assert_int_equal(gp_batch_check(b, &LIM, "test", NULL, NULL), want);
    if (!strstr(gp_last_error(), needle))
        fail_msg("message '%s' lacks '%s'", gp_last_error(), needle);
}

static void test_good(void **state)
{
    (void)state;
    int32_t t3[3] = {1, 2, 3}, t1[1] = {7}, t1b[1] = {8};
    gp_batch_part parts[3] = {{.seq = 0, .kind = GP_BATCH_PREFILL, .n = 3, .tokens = t3},
                              {.seq = 1, .kind = GP_BATCH_DECODE, .n = 1, .tokens = t1},
                              {.seq = 3, .kind = GP_BATCH_DECODE, .n = 1, .tokens = t1b}};
    gp_batch b = {.n_parts = 3, .parts = parts};
    long long rows = 0, pre = 0;
    assert_int_equal(gp_batch_check(&b, &LIM, "test", &rows, &pre), GP_OK);
    assert_int_equal(rows, 5);
    assert_int_equal(pre, 3);
}

static void test_refusals(void **state)
{
    (void)state;
    int32_t t3[3] = {1, 2, 3}, bad[1] = {100}, t1[1] = {4};
    gp_batch_part p[2] = {{.seq = 1, .kind = GP_BATCH_DECODE, .n = 1, .tokens = t1},
                          {.seq = 0, .kind = GP_BATCH_PREFILL, .n = 3, .tokens = t3}};
    gp_batch b = {.n_parts = 2, .parts = p};
    expect_refusal(&b, GP_ERR_INVALID_ARG, "prefill part of sequence 0 follows a decode part");
    p[0] = (gp_batch_part){.seq = 0, .kind = GP_BATCH_PREFILL, .n = 3, .tokens = t3};
    expect_refusal(&b, GP_ERR_INVALID_ARG, "sequence id 0 appears twice");
    p[1] = (gp_batch_part){.seq = 4, .kind = GP_BATCH_DECODE, .n = 1, .tokens = t1};
    expect_refusal(&b, GP_ERR_INVALID_ARG, "sequence id 4: allowed [0, 3]");
    p[1] = (gp_batch_part){.seq = 1, .kind = GP_BATCH_DECODE, .n = 3, .tokens = t3};
    expect_refusal(&b, GP_ERR_INVALID_ARG, "decode part of sequence 1 has 3 tokens, allowed 1");
    p[1] = (gp_batch_part){.seq = 1, .kind = GP_BATCH_DECODE, .n = 1, .tokens = bad};
    expect_refusal(&b, GP_ERR_INVALID_ARG, "token 100 at position 0 of sequence 1's decode part: allowed [0, 99]");
    p[1] = (gp_batch_part){.seq = 2, .kind = GP_BATCH_PREFILL, .n = 3, .tokens = t3};
    expect_refusal(&b, GP_ERR_STATE, "3 tokens do not fit sequence 2: it holds 10 tokens and the max context is 12");
    p[1] = (gp_batch_part){.seq = 1, .kind = GP_BATCH_DECODE, .n = 1, .tokens = NULL};
    expect_refusal(&b, GP_ERR_INVALID_ARG, "(and tokens, which are NULL)");
    b.n_parts = 0;
    expect_refusal(&b, GP_ERR_INVALID_ARG, "0 sequences, allowed 1..4");
    int32_t many[12] = {0};
    gp_batch_part big[2] = {{.seq = 0, .kind = GP_BATCH_PREFILL, .n = 12, .tokens = many},
                            {.seq = 3, .kind = GP_BATCH_PREFILL, .n = 10, .tokens = many}};
    gp_batch bb = {.n_parts = 2, .parts = big};
    expect_refusal(&bb, GP_ERR_INVALID_ARG, "22 tokens in one batch, allowed at most 16");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
