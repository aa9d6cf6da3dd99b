/* decode_pipeline_case_study's command line without a GPU: defaults, lists,
 * the seq/sweep keywords, --help, and every kind of bad input (exit 2 with a
 * message naming the flag and the value, then the usage). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gp_case_study.h"

typedef struct result {
    int rc;
    char *out, *err;
    gp_cs_options o;
} result;

/* Parses args (NULL-terminated, program name added) with out and err caught. */
static result parse(const char *const *args)
{
    result r;
    memset(&r, 0, sizeof r);
    char *argv[64];
    int argc = 0;
    argv[argc++] = strdup("decode_pipeline_case_study");
    for (; args[argc - 1] && argc < 63; argc++)
        argv[argc] = strdup(args[argc - 1]);
    argv[argc] = NULL;
    size_t out_len, err_len;
    FILE *out = open_memstream(&r.out, &out_len), *err = open_memstream(&r.err, &err_len);
    assert_non_null(out);
    assert_non_null(err);
    r.rc = gp_cs_parse_args(argc, argv, &r.o, out, err);
    fclose(out);
    fclose(err);
    /* getopt permutes argv: free what was allocated, in any order */
    for (int i = 0; i < argc; i++)
        free(argv[i]);
    return r;
}

static void result_free(result *r)
{
    free(r->out);
    free(r->err);
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

static result ok(const char *const *args)
{
    result r = parse(args);
    if (r.rc != 0)
        fail_msg("expected 0, got %d; stderr:\n%s", r.rc, r.err);
    assert_string_equal(r.err, "");
    return r;
}

/* Must return 2 with a message holding needle1 and needle2 (the flag and
 * the bad value), followed by the usage. */
static void bad_case(const char *const *args, const char *needle1, const char *needle2, int line)
{
    result r = parse(args);
    if (r.rc != 2)
        fail_msg("line %d: expected exit 2, got %d (stderr: %s)", line, r.rc, r.err);
    const char *usage = strstr(r.err, "Usage:");
    if (!usage)
        fail_msg("line %d: no usage after the message: %s", line, r.err);
    /* the message itself comes before the usage */
    size_t msg_len = (size_t)(usage - r.err);
    char *msg = strndup(r.err, msg_len);
    if (needle1 && !strstr(msg, needle1))
        fail_msg("line %d: message lacks '%s': %s", line, needle1, msg);
    if (needle2 && !strstr(msg, needle2))
        fail_msg("line %d: message lacks '%s': %s", line, needle2, msg);
    assert_string_equal(r.out, "");
    free(msg);
    result_free(&r);
}
#define BAD(n1, n2, ...) bad_case(ARGS(__VA_ARGS__), n1, n2, __LINE__)

static void test_defaults(void **state)
{
    (void)state;
    gp_cs_options d;
    gp_cs_default_options(&d);
    assert_false(d.splits_given);
    assert_int_equal(d.n_splits, 0);
    assert_false(d.sweep);
    assert_false(d.workloads_given);
    assert_int_equal(d.n_workloads, 2);
    assert_string_equal(d.workloads[0].label, "small");
    assert_int_equal(d.gemm_tune, 0);
    assert_int_equal(d.attn_kernel, GP_ATTN_KERNEL_AUTO);
    assert_int_equal(d.attn_warps_cap, 0);
    assert_true(d.attn_kv_evict_first);
    assert_int_equal(d.fill_drain, GP_FILL_DRAIN_WHOLE);
    assert_int_equal(d.workloads[0].B, 8);
    assert_int_equal(d.workloads[0].C, 1024);
    assert_string_equal(d.workloads[1].label, "large");
    assert_int_equal(d.workloads[1].B, 1024);
    assert_int_equal(d.workloads[1].C, 384);
    assert_int_equal(d.n_micro, 2);
    assert_int_equal(d.micro[0], 1);
    assert_int_equal(d.micro[1], 2);
    assert_int_equal(d.n_depths, 1);
    assert_int_equal(d.depths[0], 4);
    assert_string_equal(d.model, "llama3-8b");
    assert_int_equal(d.steps, 8);
    assert_true(d.warmup);
    assert_int_equal(d.warmup_steps, 3);
    assert_int_equal(d.repeat, 5);
    assert_int_equal(d.rebalance, GP_REBALANCE_OFF);
    assert_string_equal(d.tuning, "");
    assert_false(d.autotune);
    assert_string_equal(d.tuning_out, "tuning.json");
    assert_true(d.seed == 0);
    assert_string_equal(d.json, "");
    assert_int_equal(d.progress, -1);
    assert_true(d.vram_budget == 0); /* weights resident */

    /* no arguments: the defaults, byte for byte */
    char *argv[] = { "decode_pipeline_case_study", NULL };
    gp_cs_options o;
    FILE *devnull = fopen("/dev/null", "w");
    assert_int_equal(gp_cs_parse_args(1, argv, &o, devnull, devnull), 0);
    fclose(devnull);
    assert_memory_equal(&o, &d, sizeof o);
}

static void test_help(void **state)
{
    (void)state;
    const char *const *cases[] = { ARGS("--help"), ARGS("-h"), ARGS("--steps", "3", "--help") };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        result r = parse(cases[i]);
        assert_int_equal(r.rc, 1);
        assert_non_null(strstr(r.out, "Usage: decode_pipeline_case_study"));
        assert_string_equal(r.err, "");
        result_free(&r);
    }
    /* the usage documents the default split set and the presets */
    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    gp_cs_usage(f);
    fclose(f);
    assert_non_null(strstr(text, "A = 40, 56, 72"));
    assert_non_null(strstr(text, "small (8:1024), large (1024:384)"));
    free(text);
}

static void test_lists(void **state)
{
    (void)state;
    result r = ok(ARGS("--sm-splits", "56:76,72,seq", "--workload", "small,64:2048,large", "--micro-batches",
                       "1,2,4", "--queue-depth", "4,8,4096"));
    assert_true(r.o.splits_given);
    assert_false(r.o.sweep);
    assert_int_equal(r.o.n_splits, 2);
    assert_int_equal(r.o.splits[0].attn_sms, 56);
    assert_int_equal(r.o.splits[0].ffn_sms, 76);
    assert_int_equal(r.o.splits[1].attn_sms, 72);
    assert_int_equal(r.o.splits[1].ffn_sms, GP_SPLIT_REST);
    assert_true(r.o.workloads_given);
    assert_int_equal(r.o.n_workloads, 3);
    assert_string_equal(r.o.workloads[1].label, "64:2048");
    assert_int_equal(r.o.workloads[1].B, 64);
    assert_int_equal(r.o.workloads[1].C, 2048);
    assert_string_equal(r.o.workloads[2].label, "large");
    assert_int_equal(r.o.n_placements, 1); /* default: qkvo-a */
    assert_int_equal(r.o.placements[0], GP_PLACE_QKVO_A);
    result q = ok(ARGS("--placement", "qkvo-f,qkvo-a"));
    assert_int_equal(q.o.n_placements, 2);
    assert_int_equal(q.o.placements[0], GP_PLACE_QKVO_F);
    assert_int_equal(q.o.placements[1], GP_PLACE_QKVO_A);
    result_free(&q);
    assert_int_equal(r.o.workloads[2].B, 1024);
    assert_int_equal(r.o.n_micro, 3);
    assert_int_equal(r.o.micro[2], 4);
    assert_int_equal(r.o.n_depths, 3);
    assert_int_equal(r.o.depths[1], 8);
    assert_int_equal(r.o.depths[2], 4096);
    result_free(&r);
}

static void test_keywords(void **state)
{
    (void)state;
    result r = ok(ARGS("--sm-splits", "seq"));
    assert_true(r.o.splits_given);
    assert_int_equal(r.o.n_splits, 0);
    assert_false(r.o.sweep);
    result_free(&r);

    r = ok(ARGS("--sm-splits", "sweep"));
    assert_true(r.o.sweep);
    assert_int_equal(r.o.n_splits, 0);
    result_free(&r);

    r = ok(ARGS("--sm-splits=seq,sweep"));
    assert_true(r.o.sweep);
    result_free(&r);

    /* --autotune sweeps unless the splits are named */
    r = ok(ARGS("--autotune", "--tuning-out", "p.json"));
    assert_true(r.o.autotune);
    assert_true(r.o.sweep);
    assert_string_equal(r.o.tuning_out, "p.json");
    result_free(&r);
    r = ok(ARGS("--autotune", "--sm-splits", "56"));
    assert_false(r.o.sweep);
    result_free(&r);
}

static void test_scalars(void **state)
{
    (void)state;
    result r = ok(ARGS("--steps", "100000", "--repeat=7", "--warmup=5", "--rebalance", "model", "--seed",
                       "18446744073709551615", "--no-progress", "--model", "tiny", "--json", "r.json", "--csv",
                       "r.csv", "--trace", "t.json", "--svg", "c.svg"));
    assert_int_equal(r.o.steps, 100000);
    assert_int_equal(r.o.repeat, 7);
    assert_true(r.o.warmup);
    assert_int_equal(r.o.warmup_steps, 5);
    assert_int_equal(r.o.rebalance, GP_REBALANCE_MODEL);
    assert_true(r.o.seed == UINT64_MAX);
    assert_int_equal(r.o.progress, 0);
    assert_string_equal(r.o.model, "tiny");
    assert_string_equal(r.o.json, "r.json");
    assert_string_equal(r.o.csv, "r.csv");
    assert_string_equal(r.o.trace, "t.json");
    assert_string_equal(r.o.svg, "c.svg");
    result_free(&r);

    r = ok(ARGS("--no-warmup", "--progress", "--rebalance", "ratio", "--stats", "--gemm-tune", "32",
                "--fill-drain", "partition", "--attn-kernel", "mma", "--attn-warps-cap", "8", "--attn-kv-evict", "off",
                "--context", "prefill"));
    assert_true(r.o.context_prefill);
    assert_int_equal(r.o.gemm_tune, 32);
    assert_int_equal(r.o.attn_kernel, GP_ATTN_KERNEL_MMA);
    assert_int_equal(r.o.attn_warps_cap, 8);
    assert_false(r.o.attn_kv_evict_first);
    assert_int_equal(r.o.fill_drain, GP_FILL_DRAIN_PARTITION);
    assert_false(r.o.warmup);
    assert_int_equal(r.o.progress, 1);
    assert_true(r.o.stats);
    assert_int_equal(r.o.rebalance, GP_REBALANCE_RATIO);
    result_free(&r);

    /* a checkpoint directory is any directory holding config.json */
    char dir[] = "/tmp/gp_cs_ckptXXXXXX";
    assert_non_null(mkdtemp(dir));
    char cfg[64];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    FILE *f = fopen(cfg, "w");
    fputs("{}", f);
    fclose(f);
    r = ok(ARGS("--model", dir));
    assert_string_equal(r.o.model, dir);
    result_free(&r);
    BAD("--model", "/nonexistent/checkpoint", "--model", "/nonexistent/checkpoint");
    unlink(cfg);
    BAD("--model", "config.json", "--model", dir);
    rmdir(dir);

    /* --tuning must be readable */
    BAD("--tuning", "/nonexistent/profile.json", "--tuning", "/nonexistent/profile.json");
}

/* --vram-budget: greenpipe generate's sizes (gp_parse_size); every refusal
 * exit 2 naming the flag and the value, then the usage. */
static void test_vram_budget(void **state)
{
    (void)state;
    const struct { const char *text; uint64_t bytes; } good[] = {
        { "4G", 4ull << 30 }, { "512M", 512ull << 20 }, { "16g", 16ull << 30 }, { "3k", 3ull << 10 },
        { "1073741824", 1073741824ull }, { "2T", 2ull << 40 }, { "1", 1 }, { "4GiB", 4ull << 30 },
        { "4GB", 4000000000ull }, { "1mb", 1000000ull },
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        result r = ok(ARGS("--vram-budget", good[i].text, "--model", "tiny"));
        if (r.o.vram_budget != good[i].bytes)
            fail_msg("--vram-budget %s: %llu bytes, expected %llu", good[i].text,
                     (unsigned long long)r.o.vram_budget, (unsigned long long)good[i].bytes);
        result_free(&r);
    }
    result r = ok(ARGS("--vram-budget=8G", "--sm-splits", "seq,56", "--trace", "t.json"));
    assert_true(r.o.vram_budget == 8ull << 30);
    result_free(&r);

    /* the whole line for one: flag, value, why, what is allowed */
    r = parse(ARGS("--vram-budget", "4Q"));
    assert_int_equal(r.rc, 2);
    const char *want = "decode_pipeline_case_study: --vram-budget '4Q': '4Q' is not a size; allowed: a size in "
                       "bytes > 0: digits, optionally followed by K, M, G, T or KiB, MiB, GiB, TiB (binary: x 2^10, "
                       "2^20, 2^30, 2^40) or KB, MB, GB, TB (decimal: x 10^3, 10^6, 10^9, 10^12), any case, no space: "
                       "512M, 4GiB, 4GB, from the model's least streaming budget up to the GPU's free memory\n";
    if (strncmp(r.err, want, strlen(want)) != 0)
        fail_msg("expected:\n%s\ngot:\n%s", want, r.err);
    assert_true(r.o.vram_budget == 0);
    result_free(&r);

    BAD("--vram-budget '0'", "'0' is zero", "--vram-budget", "0");
    BAD("--vram-budget '1.5G'", "'1.5G' is not a size", "--vram-budget", "1.5G");
    BAD("--vram-budget '-4G'", "'-4G' is not a size", "--vram-budget", "-4G");
    BAD("--vram-budget 'G'", "'G' is not a size", "--vram-budget", "G");
    BAD("--vram-budget ''", "is not a size", "--vram-budget", "");
    BAD("--vram-budget ' 4G'", "is not a size", "--vram-budget", " 4G");
    BAD("--vram-budget '4G '", "is not a size", "--vram-budget", "4G ");
    BAD("--vram-budget '16777216T'", "out of range (more than 2^64 - 1 bytes)", "--vram-budget", "16777216T");
    BAD("--vram-budget '99999999999999999999'", "out of range", "--vram-budget", "99999999999999999999");
    BAD("--vram-budget: missing value", "allowed: a size in bytes", "--vram-budget");
    BAD("--vram-budget '8G'", "given more than once", "--vram-budget", "4G", "--vram-budget", "8G");
    /* a profile records no residency: one measured on streamed weights would mislead */
    BAD("--vram-budget: not with --autotune", "streamed weights", "--vram-budget", "4G", "--autotune");
    BAD("--vram-budget: not with --autotune", NULL, "--autotune", "--vram-budget", "4G", "--sm-splits", "56");
}

static void test_not_numbers(void **state)
{
    (void)state;
    BAD("--steps", "'abc'", "--steps", "abc");
    BAD("--repeat", "'x'", "--repeat", "x");
    BAD("--seed", "'foo'", "--seed", "foo");
    BAD("--micro-batches", "'a'", "--micro-batches", "a");
    BAD("--queue-depth", "four", "--queue-depth", "four");
    BAD("--workload", "x:8", "--workload", "x:8");
    BAD("--workload", "medium", "--workload", "medium");
    BAD("--sm-splits", "abc", "--sm-splits", "abc");
    BAD("--steps", "' 8'", "--steps", " 8");
    BAD("--steps", "+8", "--steps", "+8");
    BAD("--rebalance", "fast", "--rebalance", "fast");
    BAD("--gemm-tune", "0..32", "--gemm-tune", "33");
    BAD("--gemm-tune", "'-1'", "--gemm-tune", "-1");
    BAD("--gemm-tune", "'all'", "--gemm-tune", "all");
    BAD("--fill-drain", "whole or partition", "--fill-drain", "both");
    BAD("--context", "random or prefill", "--context", "real");
    BAD("--fill-drain", "''", "--fill-drain", "");
    BAD("--attn-kernel", "auto, cudacore, cudacore_pipe, mma or stream", "--attn-kernel", "flash");
    BAD("--attn-warps-cap", "even", "--attn-warps-cap", "3");
    BAD("--attn-warps-cap", "'65'", "--attn-warps-cap", "65");
    BAD("--attn-kv-evict", "on or off", "--attn-kv-evict", "yes");
}

static void test_negative_and_zero(void **state)
{
    (void)state;
    BAD("--steps", "-3", "--steps", "-3");
    BAD("--seed", "-1", "--seed", "-1");
    BAD("--sm-splits", "-56:76", "--sm-splits", "-56:76");
    BAD("--sm-splits", "56:-1", "--sm-splits", "56:-1");
    BAD("--workload", "-8:100", "--workload", "-8:100");
    BAD("--steps", "'0'", "--steps", "0");
    BAD("--repeat", "'0'", "--repeat", "0");
    BAD("--micro-batches", "'0'", "--micro-batches", "0");
    BAD("--queue-depth", "'0'", "--queue-depth", "0");
    BAD("--sm-splits", "0:132", "--sm-splits", "0:132");
    BAD("--sm-splits '0'", "attention SMs must be at least 1", "--sm-splits", "0");
    BAD("--sm-splits '132:0'", "FFN SMs must be at least 1", "--sm-splits", "132:0");
    BAD("--sm-splits", "56:0", "--sm-splits", "56:0");
    BAD("--workload", "0:100", "--workload", "0:100");
    BAD("--workload", "8:0", "--workload", "8:0");
    BAD("--warmup", "'0'", "--warmup=0");
}

static void test_out_of_range(void **state)
{
    (void)state;
    BAD("--micro-batches", "5", "--micro-batches", "1,5");
    BAD("--queue-depth", "6", "--queue-depth", "6");
    BAD("--queue-depth", "8192", "--queue-depth", "8192");
    BAD("--queue-depth", "'1'", "--queue-depth", "1");
    BAD("--steps", "100001", "--steps", "100001");
    BAD("--repeat", "1001", "--repeat", "1001");
    BAD("--workload", "70000:10", "--workload", "70000:10");
    BAD("--warmup", "1001", "--warmup=1001");
    BAD("--queue-depth", "2,4,8,16,32,64,128,256,512", "--queue-depth", "2,4,8,16,32,64,128,256,512");
}

static void test_duplicates(void **state)
{
    (void)state;
    BAD("--sm-splits", "56:76,56:76", "--sm-splits", "56:76,56:76");
    BAD("--sm-splits", "seq,seq", "--sm-splits", "seq,seq");
    BAD("--sm-splits", "sweep,sweep", "--sm-splits", "sweep,sweep");
    BAD("--micro-batches", "2,2", "--micro-batches", "2,2");
    BAD("--queue-depth", "4,8,4", "--queue-depth", "4,8,4");
    BAD("--placement", "'qkvo-a' is listed twice", "--placement", "qkvo-a,qkvo-a");
    BAD("--placement", "'qkvo-b' is not a placement", "--placement", "qkvo-b");
    BAD("--placement", "an empty", "--placement", "qkvo-a,");
    BAD("--placement", "an empty", "--placement", "");
    BAD("--workload", "small,small", "--workload", "small,small");
    BAD("--workload", "small,8:1024", "--workload", "small,8:1024");
    BAD("--workload", "64:64,64:64", "--workload", "64:64,64:64");
    /* a flag given twice, or with its --no- form */
    BAD("--steps", "4", "--steps", "3", "--steps", "4");
    BAD("--no-warmup", "more than once", "--warmup", "--no-warmup");
    /* two reports into one file */
    BAD("--csv", "out.txt", "--json", "out.txt", "--csv", "out.txt");
    /* a report that cannot be written: refused before any measurement */
    BAD("--json", "cannot write: No such file or directory", "--json", "/nonexistent-gp-dir/r.json");
    BAD("--svg", "cannot write: Is a directory", "--svg", ".");
}

static void test_empty_items(void **state)
{
    (void)state;
    BAD("--micro-batches", "1,,2", "--micro-batches", "1,,2");
    BAD("--sm-splits", "56:76,", "--sm-splits", "56:76,");
    BAD("--workload", ",small", "--workload", ",small");
    BAD("--queue-depth", "item 2 is empty", "--queue-depth", "4,");
    BAD("--steps", "''", "--steps", "");
    BAD("--sm-splits", "empty list", "--sm-splits", "");
    BAD("--json", "empty path", "--json", "");
}

static void test_trailing_garbage_and_overflow(void **state)
{
    (void)state;
    BAD("--steps", "8x", "--steps", "8x");
    BAD("--micro-batches", "2x", "--micro-batches", "1,2x");
    BAD("--sm-splits", "56:76x", "--sm-splits", "56:76x");
    BAD("--sm-splits", "56:76:1", "--sm-splits", "56:76:1");
    BAD("--seed", "12abc", "--seed", "12abc");
    BAD("--workload", "8:1024k", "--workload", "8:1024k");
    BAD("--steps", "99999999999", "--steps", "99999999999");
    BAD("--seed", "99999999999999999999999", "--seed", "99999999999999999999999");
    BAD("--sm-splits", "99999999999", "--sm-splits", "99999999999");
    BAD("--workload", "8:99999999999", "--workload", "8:99999999999");
    BAD("--micro-batches", "99999999999", "--micro-batches", "99999999999");
}

static void test_unknown_missing_positional(void **state)
{
    (void)state;
    BAD("unknown", "--bogus", "--bogus");
    BAD("unknown", "--bogus=3", "--steps", "3", "--bogus=3");
    BAD("unknown", "-x", "-x");
    BAD("--autotune", "takes no value", "--autotune=3");
    BAD("--steps", "missing value", "--steps");
    BAD("--json", "missing value", "--csv", "a.csv", "--json");
    BAD("--json", "--csv", "--json", "--csv", "a.csv"); /* the next flag taken as the file */
    BAD("unexpected argument", "'foo'", "foo");
    BAD("unexpected argument", "'bar'", "--steps", "3", "bar");
    BAD("--tuning-out", "--autotune", "--tuning-out", "x.json");
    BAD("unexpected argument '5'", "--warmup=5", "--warmup", "5"); /* optional values attach with '=' */
}

/* Every micro-batch needs a row: M above some workload's B is refused before
 * any work (the default M list included); M not dividing B is allowed (the
 * report shows the sizes, test_cs_memory and test_cs_writers). */
static void test_micro_vs_batch(void **state)
{
    (void)state;
    BAD("--micro-batches '1,4'", "4 micro-batches for workload 3:100, whose batch has 3 rows", "--workload",
        "3:100", "--micro-batches", "1,4");
    BAD("--micro-batches '1,2'", "workload 1:64, whose batch has 1 row (the default --micro-batches)",
        "--workload", "small,1:64");
    result r = ok(ARGS("--workload", "3:100,large", "--micro-batches", "1,2,3"));
    assert_int_equal(r.o.n_micro, 3);
    result_free(&r);
    r = ok(ARGS("--workload", "1:64", "--micro-batches", "1"));
    result_free(&r);
}

static void test_reparse(void **state)
{
    (void)state;
    /* getopt's state is reset on every call: a failure leaves none behind */
    for (int i = 0; i < 3; i++) {
        BAD("--steps", "8x", "--steps", "8x");
        result r = ok(ARGS("--steps", "4", "--micro-batches", "2"));
        assert_int_equal(r.o.steps, 4);
        assert_int_equal(r.o.n_micro, 1);
        result_free(&r);
    }
}

/* --profile: the shipped profile by default, none, a file, and the runs
 * that name their own configurations (no profile unless --profile FILE). */
static void test_profile(void **state)
{
    (void)state;
    result r = ok(ARGS("--steps", "4"));
    const char *def = gp_cs_profile_path(&r.o);
    assert_non_null(def);
    assert_non_null(strstr(def, "profiles/h100-sxm.json"));
    assert_int_equal(access(def, R_OK), 0); /* the default names the file shipped in the sources */
    assert_false(r.o.gemm_tune_given);
    result_free(&r);
    r = ok(ARGS("--workload", "large"));
    assert_non_null(gp_cs_profile_path(&r.o));
    result_free(&r);
    r = ok(ARGS("--profile", "none"));
    assert_true(r.o.profile_off);
    assert_null(gp_cs_profile_path(&r.o));
    result_free(&r);
    r = ok(ARGS("--sm-splits", "56"));
    assert_null(gp_cs_profile_path(&r.o));
    result_free(&r);
    r = ok(ARGS("--sm-splits", "56", "--profile", def));
    assert_string_equal(gp_cs_profile_path(&r.o), def);
    result_free(&r);
    r = ok(ARGS("--autotune"));
    assert_null(gp_cs_profile_path(&r.o));
    result_free(&r);
    r = ok(ARGS("--tuning", def));
    assert_null(gp_cs_profile_path(&r.o));
    result_free(&r);
    r = ok(ARGS("--gemm-tune", "0"));
    assert_true(r.o.gemm_tune_given);
    result_free(&r);
    BAD("--profile", "/nonexistent/p.json", "--profile", "/nonexistent/p.json");
    BAD("--profile", "empty path", "--profile", "");
    BAD("--profile", "--tuning", "--profile", def, "--tuning", def);
    BAD("--profile", "--autotune", "--autotune", "--profile", def);
    BAD("--profile", "more than once", "--profile", "none", "--profile", def);
    gp_cs_options d;
    gp_cs_default_options(&d);
    assert_false(d.profile_off);
    assert_string_equal(d.profile, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_lists),
        cmocka_unit_test(test_keywords),
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_vram_budget),
        cmocka_unit_test(test_not_numbers),
        cmocka_unit_test(test_negative_and_zero),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_empty_items),
        cmocka_unit_test(test_trailing_garbage_and_overflow),
        cmocka_unit_test(test_unknown_missing_positional),
        cmocka_unit_test(test_micro_vs_batch),
        cmocka_unit_test(test_reparse),
        cmocka_unit_test(test_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
