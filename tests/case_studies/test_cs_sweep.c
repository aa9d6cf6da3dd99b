/* The sweep of decode_pipeline_case_study without a GPU: a fake runner in
 * place of the CUDA one. Row order and speedups; SIGINT/SIGTERM raised during
 * a row stop the sweep after it, the reports (JSON, CSV) still parse and hold
 * exactly the finished rows, and the exit status is 130/143; a device fault
 * stops at once (the faulting row kept, no close) with exit 1; any other
 * failure is an error row and the sweep goes on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp_case_study.h"

static const gp_sm_info H100 = { 132, 8, 8, 15 };

/* ------------------------------------------------------------ the fake runner */

typedef struct fake {
    int opened, closed, calls, extras;
    int open_fail_wi;        /* -1: every open succeeds */
    gp_status open_status;
    int signal_at, sig;      /* raise sig during the signal_at-th row (1-based); 0: never */
    int fault_at;            /* the fault_at-th row hits GP_ERR_DEVICE_FAULT */
    int error_at;            /* the error_at-th row fails with an ordinary error */
} fake;

static gp_status f_open(void *ctx, int wi)
{
    fake *f = ctx;
    if (wi == f->open_fail_wi) {
        gp_set_error("engine for batch 1024 x context 400 needs 9.1 GiB; 2.0 GiB free");
        return f->open_status;
    }
    f->opened++;
    return GP_OK;
}

static void f_close(void *ctx, int wi)
{
    (void)wi;
    ((fake *)ctx)->closed++;
}

static gp_status f_run(void *ctx, int wi, int plan, int M, unsigned depth, gp_cs_row *r)
{
    (void)wi;
    (void)depth;
    fake *f = ctx;
    int k = ++f->calls;
    if (k == f->signal_at)
        raise(f->sig); /* the handler only sets the flag: this row still finishes */
    if (k == f->fault_at) {
        snprintf(r->error, sizeof r->error, "pipelined step: device fault (sticky CUDA error): an illegal memory "
                 "access was encountered");
        return GP_ERR_DEVICE_FAULT;
    }
    if (k == f->error_at) {
        snprintf(r->error, sizeof r->error, "pipelined step: CUDA error: cuBLAS failed");
        return GP_ERR_CUDA;
    }
    r->ok = true;
    r->n_samples = 1;
    r->samples_ms = malloc(sizeof(double));
    r->samples_ms[0] = r->ms_median = r->ms_min = r->ms_max = plan == 0 ? 10.0 : 8.0 + k * 0.01;
    r->tokens_per_s = r->B / (r->ms_median / 1e3);
    for (int m = 0; plan > 0 && m < M; m++)
        r->micro_rows[m] = r->B / M + (m < r->B % M);
    return GP_OK;
}

static gp_status f_extra(void *ctx, int wi, bool opened, gp_cs_row *r, bool *made)
{
    fake *f = ctx;
    f->extras++;
    *made = opened;
    if (!opened)
        return GP_OK;
    snprintf(r->tag, sizeof r->tag, "rule");
    snprintf(r->workload, sizeof r->workload, "wl%d", wi);
    return f_run(ctx, wi, 1, 2, 4, r);
}

/* ------------------------------------------------------------ set-up */

/* Options for two workloads (small, large), M 1,2, depth 4, splits seq,56,72:
 * 5 rows per workload, 10 in all. */
typedef struct sweep_case {
    gp_cs_options o;
    gp_split_plan plans[GP_CS_MAX_SPLITS + 1];
    int n_plans;
    gp_cs_sweep_params p;
    fake f;
    gp_cs_runner rn;
    gp_cs_row rows[32];
    gp_cs_sweep_result res;
} sweep_case;

static sweep_case *make_case(const char *json, const char *csv)
{
    sweep_case *c = calloc(1, sizeof *c);
    char *argv[16] = { "decode_pipeline_case_study", "--workload", "small,large", "--micro-batches", "1,2",
                       "--sm-splits", "56,72" };
    int argc = 7;
    if (json) {
        argv[argc++] = "--json";
        argv[argc++] = (char *)json;
    }
    if (csv) {
        argv[argc++] = "--csv";
        argv[argc++] = (char *)csv;
    }
    FILE *devnull = fopen("/dev/null", "w");
    assert_int_equal(gp_cs_parse_args(argc, argv, &c->o, devnull, devnull), 0);
    fclose(devnull);
    assert_int_equal(gp_cs_resolve_splits(&c->o, &H100, GP_SPLIT_SIDE_F, c->plans, GP_CS_MAX_SPLITS + 1,
                                          &c->n_plans), GP_OK);
    assert_int_equal(c->n_plans, 3);
    c->p = (gp_cs_sweep_params){ .o = &c->o, .plans = c->plans, .n_plans = c->n_plans };
    c->f.open_fail_wi = -1;
    c->rn = (gp_cs_runner){ .ctx = &c->f, .open = f_open, .close = f_close, .run = f_run };
    gp_cs_signal_clear();
    return c;
}

static void free_case(sweep_case *c)
{
    for (int i = 0; i < c->res.n_rows; i++)
        gp_cs_row_free(&c->rows[i]);
    free(c);
    gp_cs_signal_clear();
}

static void run_case(sweep_case *c)
{
    assert_int_equal(gp_cs_sweep_run(&c->p, &c->rn, c->rows, 32, &c->res), GP_OK);
}

/* Runs gp_cs_finish with stdout and stderr caught. */
static int finish(sweep_case *c, gp_cs_meta *m, char **out, char **err)
{
    size_t lo, le;
    FILE *fo = open_memstream(out, &lo), *fe = open_memstream(err, &le);
    int rc = gp_cs_finish(&c->o, m, c->rows, &c->res, 0, fo, fe);
    fclose(fo);
    fclose(fe);
    return rc;
}

static void tmp_path(char *buf, size_t len, const char *name)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, len, "%s/gp_cs_sweep_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(), name);
}

/* The JSON report parses and has n rows; meta.stopped is stopped (NULL: null). */
static void check_json(const char *path, int n, const char *stopped)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fail_msg("%s does not parse: line %d: %s", path, jerr.line, jerr.text);
    assert_int_equal(json_array_size(json_object_get(root, "rows")), n);
    json_t *st = json_object_get(json_object_get(root, "meta"), "stopped");
    if (stopped)
        assert_string_equal(json_string_value(st), stopped);
    else
        assert_true(json_is_null(st));
    json_decref(root);
}

/* The CSV report: a header and n records, every one with the header's field
 * count (commas and line breaks inside quotes do not count). */
static void check_csv(const char *path, int n)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int rec = 0, fields = 1, header = -1, c;
    bool quoted = false;
    while ((c = fgetc(f)) != EOF) {
        if (c == '"')
            quoted = !quoted; /* a doubled quote toggles twice */
        else if (!quoted && c == ',')
            fields++;
        else if (!quoted && c == '\n') {
            if (header < 0)
                header = fields;
            else if (fields != header)
                fail_msg("%s: record %d has %d fields, the header %d", path, rec, fields, header);
            rec++;
            fields = 1;
        }
    }
    fclose(f);
    assert_false(quoted);
    assert_int_equal(rec, n + 1);
}

/* ------------------------------------------------------------ tests */

static void test_full_sweep(void **state)
{
    (void)state;
    sweep_case *c = make_case(NULL, NULL);
    assert_int_equal(gp_cs_sweep_count(&c->p), 10);
    run_case(c);
    assert_int_equal(c->res.n_rows, 10);
    assert_int_equal(c->res.planned, 10);
    assert_int_equal(c->res.stop, GP_CS_STOP_NONE);
    assert_int_equal(c->f.opened, 2);
    assert_int_equal(c->f.closed, 2);
    /* report order: seq, then split x M x depth, per workload */
    const struct { const char *wl; bool seq; int a, M; } want[] = {
        { "small", true, 0, 0 }, { "small", false, 56, 1 }, { "small", false, 56, 2 }, { "small", false, 72, 1 },
        { "small", false, 72, 2 }, { "large", true, 0, 0 }, { "large", false, 56, 1 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const gp_cs_row *r = &c->rows[i];
        assert_string_equal(r->workload, want[i].wl);
        assert_int_equal(r->seq, want[i].seq);
        assert_int_equal(r->split.a_req, want[i].a);
        assert_int_equal(r->M, want[i].M);
        assert_true(r->ok);
    }
    assert_int_equal(c->rows[2].micro_rows[0], 4); /* small: B 8, M 2 */
    assert_float_equal(c->rows[0].speedup_vs_seq, 1.0, 1e-12);
    assert_float_equal(c->rows[1].speedup_vs_seq, 10.0 / c->rows[1].ms_median, 1e-12);
    char *out, *err;
    gp_cs_meta m;
    memset(&m, 0, sizeof m);
    assert_int_equal(finish(c, &m, &out, &err), 0);
    assert_string_equal(err, "");
    assert_string_equal(m.stopped, "");
    assert_non_null(strstr(out, "| large | 1024:384 | 72:60 |"));
    free(out);
    free(err);
    free_case(c);
}

/* SIGINT (or SIGTERM) raised while a row runs: that row finishes, no other
 * starts, the open workload is closed, the reports hold the finished rows. */
static void interrupted(int sig, int at, int want_rows, int want_closed, int want_rc)
{
    char json[256], csv[256];
    tmp_path(json, sizeof json, "int.json");
    tmp_path(csv, sizeof csv, "int.csv");
    sweep_case *c = make_case(json, csv);
    assert_int_equal(gp_cs_signals_install(), GP_OK);
    c->f.signal_at = at;
    c->f.sig = sig;
    run_case(c);
    assert_int_equal(c->res.stop, GP_CS_STOP_SIGNAL);
    assert_int_equal(c->res.signal, sig);
    assert_int_equal(c->res.n_rows, want_rows);
    assert_int_equal(c->f.calls, want_rows);
    assert_int_equal(c->f.closed, want_closed);
    assert_int_equal(c->f.opened, want_closed);
    for (int i = 0; i < want_rows; i++)
        assert_true(c->rows[i].ok);
    char *out, *err;
    gp_cs_meta m;
    memset(&m, 0, sizeof m);
    assert_int_equal(finish(c, &m, &out, &err), want_rc);
    char says[160];
    if (want_rows < 10)
        snprintf(says, sizeof says, "Interrupted by %s: %d of 10 configurations finished; the rest were not run.",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", want_rows);
    else
        snprintf(says, sizeof says, "Interrupted by %s during the last configuration: all 10 finished.",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
    if (!strstr(err, says) || !strstr(err, "The reports were written with the finished rows."))
        fail_msg("stderr lacks '%s': %s", says, err);
    assert_non_null(strstr(m.notes, says)); /* the reports say it too */
    check_json(json, want_rows, sig == SIGINT ? "SIGINT" : "SIGTERM");
    check_csv(csv, want_rows);
    free(out);
    free(err);
    free_case(c);
    remove(json);
    remove(csv);
}

static void test_sigint(void **state)
{
    (void)state;
    interrupted(SIGINT, 3, 3, 1, 130);  /* in small's third row */
    interrupted(SIGTERM, 6, 6, 2, 143); /* in large's seq row: large is closed too */
    interrupted(SIGINT, 10, 10, 2, 130); /* during the last row: every row, still reported as interrupted */
}

static void test_signal_before_start(void **state)
{
    (void)state;
    char json[256], csv[256];
    tmp_path(json, sizeof json, "none.json");
    tmp_path(csv, sizeof csv, "none.csv");
    sweep_case *c = make_case(json, csv);
    assert_int_equal(gp_cs_signals_install(), GP_OK);
    raise(SIGINT);
    assert_int_equal(gp_cs_signal_pending(), SIGINT);
    run_case(c);
    assert_int_equal(c->res.n_rows, 0);
    assert_int_equal(c->f.opened, 0);
    char *out, *err;
    assert_int_equal(finish(c, NULL, &out, &err), 130);
    assert_non_null(strstr(out, "no configurations were run"));
    check_json(json, 0, NULL); /* no metadata given: still a document */
    check_csv(csv, 0);
    free(out);
    free(err);
    free_case(c);
    remove(json);
    remove(csv);
}

static void test_device_fault(void **state)
{
    (void)state;
    char json[256], csv[256];
    tmp_path(json, sizeof json, "fault.json");
    tmp_path(csv, sizeof csv, "fault.csv");
    sweep_case *c = make_case(json, csv);
    c->f.fault_at = 4;
    run_case(c);
    assert_int_equal(c->res.stop, GP_CS_STOP_DEVICE_FAULT);
    assert_int_equal(c->res.n_rows, 4); /* the faulting row is kept, as an error row */
    assert_int_equal(c->f.calls, 4);
    assert_int_equal(c->f.closed, 0); /* nothing more is asked of an unusable context */
    assert_false(c->rows[3].ok);
    assert_non_null(strstr(c->res.why, "illegal memory access"));
    char *out, *err;
    gp_cs_meta m;
    memset(&m, 0, sizeof m);
    assert_int_equal(finish(c, &m, &out, &err), 1);
    assert_non_null(strstr(err, "device fault: pipelined step: device fault (sticky CUDA error)"));
    assert_non_null(strstr(err, "after 4 of 10 configurations; the rest were not run."));
    assert_string_equal(m.stopped, "device fault");
    check_json(json, 4, "device fault");
    check_csv(csv, 4);
    free(out);
    free(err);
    free_case(c);
    remove(json);
    remove(csv);
}

/* Any other failure is the row's own: an error row, and the sweep goes on. */
static void test_errors_go_on(void **state)
{
    (void)state;
    sweep_case *c = make_case(NULL, NULL);
    c->f.error_at = 2;
    run_case(c);
    assert_int_equal(c->res.stop, GP_CS_STOP_NONE);
    assert_int_equal(c->res.n_rows, 10);
    assert_false(c->rows[1].ok);
    assert_non_null(strstr(c->rows[1].error, "cuBLAS failed"));
    assert_true(c->rows[2].ok);
    char *out, *err;
    assert_int_equal(finish(c, NULL, &out, &err), 1);
    assert_non_null(strstr(err, "1 of 10 configurations or outputs failed"));
    free(out);
    free(err);
    free_case(c);

    /* a workload that cannot open: its rows say why, the next one runs */
    c = make_case(NULL, NULL);
    c->f.open_fail_wi = 0;
    c->f.open_status = GP_ERR_DEVICE_MEMORY;
    run_case(c);
    assert_int_equal(c->res.n_rows, 10);
    for (int i = 0; i < 5; i++) {
        assert_false(c->rows[i].ok);
        assert_non_null(strstr(c->rows[i].error, "workload small: engine for batch 1024"));
    }
    assert_true(c->rows[5].ok);
    assert_int_equal(c->f.calls, 5);
    assert_int_equal(c->f.closed, 1);
    free_case(c);

    /* ... unless the failure is a device fault: one row, then stop */
    c = make_case(NULL, NULL);
    c->f.open_fail_wi = 0;
    c->f.open_status = GP_ERR_DEVICE_FAULT;
    run_case(c);
    assert_int_equal(c->res.stop, GP_CS_STOP_DEVICE_FAULT);
    assert_int_equal(c->res.n_rows, 1);
    assert_int_equal(c->f.calls, 0);
    free_case(c);
}

/* Splits the driver refused fail their own rows without the runner; the
 * extra (rule) row follows each workload's rows. */
static void test_refused_splits_and_extra(void **state)
{
    (void)state;
    sweep_case *c = make_case(NULL, NULL);
    static char why[3][256];
    memset(why, 0, sizeof why);
    snprintf(why[1], sizeof why[1], "cuGreenCtxCreate failed");
    c->p.why = (const char(*)[256])why;
    c->p.extra = true;
    c->rn.extra = f_extra;
    assert_int_equal(gp_cs_sweep_count(&c->p), 12);
    run_case(c);
    assert_int_equal(c->res.n_rows, 12);
    assert_int_equal(c->f.calls, 8);   /* 2 x (seq + two 72 rows + rule row) */
    assert_int_equal(c->f.extras, 2);
    assert_false(c->rows[1].ok);
    assert_string_equal(c->rows[1].error, "split 56:76: cuGreenCtxCreate failed");
    assert_string_equal(c->rows[5].tag, "rule");
    assert_true(c->rows[5].speedup_vs_seq > 0);
    free_case(c);

    /* rows the plans say have none of their own are not run */
    c = make_case(NULL, NULL);
    static const bool no_rows[3] = { false, false, true };
    c->p.no_rows = no_rows;
    assert_int_equal(gp_cs_sweep_count(&c->p), 6);
    run_case(c);
    assert_int_equal(c->res.n_rows, 6);
    free_case(c);
}

/* Progress to a file (not a terminal): a line per row with the rows done,
 * the time so far and, once a row has finished, the estimate of the rest;
 * then one line of the whole sweep. */
static void test_progress_lines(void **state)
{
    (void)state;
    sweep_case *c = make_case(NULL, NULL);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    c->p.progress = f;
    run_case(c);
    fclose(f);
    assert_int_equal(c->res.n_rows, 10);
    assert_null(strchr(text, '\r'));
    int lines = 0;
    for (const char *q = text; (q = strchr(q, '\n')); q++)
        lines++;
    assert_int_equal(lines, 11);
    if (!strstr(text, "[1/10] small seq: 0 of 10 rows (0%)"))
        fail_msg("no first row line in:\n%s", text);
    if (!strstr(text, "[2/10] small 56:76 ") || !strstr(text, "1 of 10 rows (10%)") || !strstr(text, " left\n"))
        fail_msg("no second row line with an estimate in:\n%s", text);
    if (!strstr(text, "case study: 10 rows in "))
        fail_msg("no closing line in:\n%s", text);
    free(text);
    free_case(c);
}

static void test_bad_params(void **state)
{
    (void)state;
    sweep_case *c = make_case(NULL, NULL);
    gp_clear_error();
    assert_int_equal(gp_cs_sweep_run(&c->p, &c->rn, c->rows, 9, &c->res), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "room for 9 rows, the sweep makes 10"));
    c->rn.run = NULL;
    assert_int_equal(gp_cs_sweep_run(&c->p, &c->rn, c->rows, 32, &c->res), GP_ERR_INVALID_ARG);
    free_case(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_sweep),
        cmocka_unit_test(test_sigint),
        cmocka_unit_test(test_signal_before_start),
        cmocka_unit_test(test_device_fault),
        cmocka_unit_test(test_errors_go_on),
        cmocka_unit_test(test_refused_splits_and_extra),
        cmocka_unit_test(test_progress_lines),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
