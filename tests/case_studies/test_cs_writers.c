/* The markdown, JSON and CSV writers on rows that include a failed
 * configuration and texts with commas, quotes, pipes and line breaks: the
 * table keeps its shape, JSON parses back with every field and sample, CSV
 * has the same column count on every record; an unwritable path is GP_ERR_IO
 * naming it; gp_cs_row_free releases everything; uneven micro-batches are
 * shown as split, and a partial (interrupted) row set still parses back;
 * weights beyond VRAM add the budget and per-row streaming to each format,
 * and nothing (CSV: empty cells) when the weights are resident. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>

#include "test_cs_fixtures.h"

static gp_cs_row rows[FX_ROWS];
static gp_cs_meta meta;

static int setup(void **state)
{
    (void)state;
    fx_rows(rows);
    fx_meta(&meta);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fx_free(rows);
    return 0;
}

/* Cells of a markdown table line: '|' not escaped by a backslash, minus one. */
static int md_cells(const char *line, size_t len)
{
    int bars = 0;
    for (size_t i = 0; i < len; i++)
        if (line[i] == '|' && (i == 0 || line[i - 1] != '\\'))
            bars++;
    return bars - 1;
}

static void test_markdown(void **state)
{
    (void)state;
    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    gp_cs_write_markdown(f, &meta, rows, FX_ROWS);
    fclose(f);
    /* every table line has the header's cell count, the error row included */
    int cells = -1, lines = 0;
    for (char *line = text; *line == '|';) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        int c = md_cells(line, (size_t)(nl - line));
        if (cells < 0)
            cells = c;
        if (c != cells)
            fail_msg("table line %d has %d cells, the header %d: %.*s", lines, c, cells, (int)(nl - line), line);
        lines++;
        line = nl + 1;
    }
    assert_int_equal(lines, FX_ROWS + 2);
    assert_int_equal(cells, 22);
    assert_non_null(strstr(text, "**error**: cuBLAS failed, \"CUBLAS_STATUS_EXECUTION_FAILED\" \\| on <A:8> & F second line"));
    assert_non_null(strstr(text, "| small | 8:1024 | 56:76 | 56:76 | 2 | 4 | A | ratio | 10.250 | 10.000 | 11.500 |"));
    assert_non_null(strstr(text, "| small | 8:1024 | seq | all (132) | - | - | - | - | 9.250 |"));
    assert_non_null(strstr(text, "| 72:rest | - |"));
    assert_non_null(strstr(text, "| 0.90x |")); /* 9.25 / 10.25 */
    /* the kernel each row's attention ran, one line per workload */
    assert_non_null(strstr(text, "Decode-attention kernel"));
    assert_non_null(strstr(text, "\n- small 8:1024: seq cudacore_pipe; 56:76 cudacore_pipe;"));
    assert_non_null(strstr(text, "GPU: NVIDIA H100 80GB HBM3"));
    assert_non_null(strstr(text, "132 SMs, driver 580.65.06, CUDA 13.0"));
    assert_non_null(strstr(text, "Model: llama3-8b; dtype fp16; commit 83aeda3; 2025-01-02T03:04:05Z"));
    assert_non_null(strstr(text, "Notes: notes with, commas"));
    assert_non_null(strstr(text, "2 decisions, 2 moves, A 56 -> 72 SMs"));
    /* resident weights: nothing about streaming */
    assert_null(strstr(text, "--vram-budget"));
    assert_null(strstr(text, "Weight streaming"));
    free(text);

    /* no rows: still a header and a word about it */
    f = open_memstream(&text, &len);
    gp_cs_write_markdown(f, NULL, NULL, 0);
    fclose(f);
    assert_non_null(strstr(text, "no configurations were run"));
    free(text);
}

static void test_json(void **state)
{
    (void)state;
    char path[256];
    fx_tmp(path, sizeof path, "report.json");
    assert_int_equal(gp_cs_write_json(path, &meta, rows, FX_ROWS), GP_OK);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fail_msg("%s does not parse: line %d: %s", path, jerr.line, jerr.text);
    json_t *m = json_object_get(root, "meta");
    assert_string_equal(json_string_value(json_object_get(m, "gpu")), meta.gpu);
    assert_string_equal(json_string_value(json_object_get(m, "dtype")), "fp16");
    assert_int_equal(json_integer_value(json_object_get(m, "sm_count")), 132);
    assert_string_equal(json_string_value(json_object_get(m, "notes")), meta.notes);
    json_t *arr = json_object_get(root, "rows");
    assert_int_equal(json_array_size(arr), FX_ROWS);

    /* the split row: every sample, the trace grid, the decisions */
    json_t *r = json_array_get(arr, 1);
    assert_string_equal(json_string_value(json_object_get(r, "workload")), "small");
    assert_true(json_is_false(json_object_get(r, "seq")));
    assert_true(json_is_true(json_object_get(r, "ok")));
    assert_true(json_is_null(json_object_get(r, "error")));
    json_t *split = json_object_get(r, "split");
    assert_int_equal(json_integer_value(json_object_get(split, "a_got")), 56);
    assert_int_equal(json_integer_value(json_object_get(split, "f_req")), 76);
    assert_true(json_is_true(json_object_get(split, "partitioned")));
    json_t *samples = json_object_get(r, "samples_ms");
    assert_int_equal(json_array_size(samples), 3);
    for (int i = 0; i < 3; i++)
        assert_float_equal(json_number_value(json_array_get(samples, i)), rows[1].samples_ms[i], 1e-9);
    assert_float_equal(json_number_value(json_object_get(r, "ms_median")), 10.25, 1e-9);
    assert_float_equal(json_number_value(json_object_get(r, "a2f_mb_per_token")), 0.0082, 1e-12);
    assert_string_equal(json_string_value(json_object_get(r, "rebalance")), "ratio");
    json_t *mr = json_object_get(r, "micro_rows");
    assert_int_equal(json_array_size(mr), 2);
    assert_int_equal(json_integer_value(json_array_get(mr, 0)), 4);
    assert_int_equal(json_integer_value(json_array_get(mr, 1)), 4);
    /* a complete run: stopped is null */
    assert_true(json_is_null(json_object_get(m, "stopped")));
    json_t *tr = json_object_get(r, "trace");
    assert_int_equal(json_integer_value(json_object_get(tr, "n_layers")), FX_LAYERS);
    json_t *grid = json_object_get(tr, "ffn_end_ms");
    assert_int_equal(json_array_size(grid), FX_LAYERS);
    assert_int_equal(json_array_size(json_array_get(grid, 2)), FX_M);
    assert_float_equal(json_number_value(json_array_get(json_array_get(grid, 2), 1)), rows[1].trace.ffn_end[5], 1e-6);
    json_t *dec = json_object_get(r, "decisions");
    assert_int_equal(json_array_size(dec), FX_DECISIONS);
    json_t *d1 = json_array_get(dec, 1);
    assert_int_equal(json_integer_value(json_object_get(d1, "to_a")), 72);
    assert_string_equal(json_string_value(json_object_get(d1, "reason")), rows[1].decisions[1].reason);
    assert_true(json_is_null(json_object_get(d1, "predicted_from_ms"))); /* NaN -> null */

    /* the failed row: the reason, empty samples, null figures, no trace */
    r = json_array_get(arr, 2);
    assert_true(json_is_false(json_object_get(r, "ok")));
    assert_string_equal(json_string_value(json_object_get(r, "error")), FX_ERROR);
    assert_int_equal(json_array_size(json_object_get(r, "samples_ms")), 0);
    assert_true(json_is_null(json_object_get(r, "ms_median")));
    assert_true(json_is_null(json_object_get(r, "tokens_per_s")));
    assert_true(json_is_null(json_object_get(r, "trace")));
    assert_true(json_is_null(json_object_get(json_object_get(r, "split"), "f_req"))); /* the shorthand */
    assert_int_equal(json_array_size(json_object_get(r, "decisions")), 0);

    /* resident weights: no streaming fields anywhere */
    assert_null(json_object_get(m, "weights"));
    for (size_t i = 0; i < json_array_size(arr); i++) {
        assert_null(json_object_get(json_array_get(arr, i), "streaming"));
        assert_null(json_object_get(json_array_get(arr, i), "weight_copies"));
    }

    /* the seq row */
    r = json_array_get(arr, 0);
    assert_true(json_is_true(json_object_get(r, "seq")));
    assert_float_equal(json_number_value(json_object_get(r, "speedup_vs_seq")), 1.0, 1e-12);
    assert_int_equal(json_array_size(json_object_get(r, "micro_rows")), 0); /* not a pipelined row */
    json_decref(root);
    remove(path);

    /* text that is not UTF-8 (a driver message, a path) is kept, marked */
    gp_cs_row bad_text = rows[2];
    snprintf(bad_text.error, sizeof bad_text.error, "driver said \xff\xfe here");
    assert_int_equal(gp_cs_write_json(path, &meta, &bad_text, 1), GP_OK);
    root = json_load_file(path, 0, &jerr);
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(root, "rows"), 0), "error")),
                        "driver said ?? here");
    json_decref(root);

    /* no rows and no metadata still make a document */
    assert_int_equal(gp_cs_write_json(path, NULL, NULL, 0), GP_OK);
    root = json_load_file(path, 0, &jerr);
    assert_non_null(root);
    assert_int_equal(json_array_size(json_object_get(root, "rows")), 0);
    json_decref(root);
    remove(path);
}

/* ------------------------------------------------------------ CSV */

/* RFC 4180 reader: the field count of each record, and the text of field
 * `want` of record `want_rec` copied to out. Returns the record count. */
static int csv_read(const char *s, int *fields, int cap, int want_rec, int want, char *out, size_t out_len)
{
    int rec = 0, field = 0;
    size_t o = 0;
    bool quoted = false, at_start = true;
    for (;; s++) {
        char c = *s;
        if (quoted) {
            if (c == '\0')
                fail_msg("CSV: unterminated quote in record %d", rec);
            if (c == '"' && s[1] == '"') {
                s++;
            } else if (c == '"') {
                quoted = false;
                if (s[1] != ',' && s[1] != '\n' && s[1] != '\0')
                    fail_msg("CSV: text after a closing quote in record %d", rec);
                continue;
            }
        } else if (c == '"') {
            if (!at_start)
                fail_msg("CSV: quote inside an unquoted field of record %d", rec);
            quoted = true;
            at_start = false;
            continue;
        } else if (c == ',' || c == '\n' || c == '\0') {
            if (c == '\0' && field == 0 && at_start)
                return rec; /* end after the last line break */
            if (rec == want_rec && field == want && o < out_len)
                out[o] = '\0';
            field++;
            at_start = true;
            if (c != ',') {
                assert_true(rec < cap);
                fields[rec++] = field;
                field = 0;
                if (c == '\0')
                    return rec;
            }
            continue;
        }
        at_start = false;
        if (rec == want_rec && field == want && o + 1 < out_len)
            out[o++] = c;
    }
}

static void test_csv(void **state)
{
    (void)state;
    char path[256];
    fx_tmp(path, sizeof path, "report.csv");
    assert_int_equal(gp_cs_write_csv(path, &meta, rows, FX_ROWS), GP_OK);
    char *text = fx_slurp(path);
    assert_non_null(text);
    int fields[16];
    char err_field[600] = "";
    /* header: column 15 is "error"; record 3 is the failed row */
    int n = csv_read(text, fields, 16, 3, 15, err_field, sizeof err_field);
    assert_int_equal(n, FX_ROWS + 1);
    for (int i = 1; i < n; i++)
        if (fields[i] != fields[0])
            fail_msg("CSV record %d has %d fields, the header %d", i, fields[i], fields[0]);
    assert_int_equal(fields[0], 63);
    assert_string_equal(err_field, FX_ERROR); /* comma, quotes and the line break survive */
    assert_true(strncmp(text, "workload,B,C,seq,", 17) == 0);
    assert_non_null(strstr(text, "\n\"large, \"\"custom\"\"\",1024,384,"));
    assert_non_null(strstr(text, "10.25;10;11.5,4;4,")); /* samples, then rows per micro-batch */
    char label[64] = "";
    csv_read(text, fields, 16, 5, 0, label, sizeof label);
    assert_string_equal(label, "large, \"custom\"");
    free(text);
    remove(path);
}

/* The column of the header named name, -1 when none. */
static int csv_col(const char *text, const char *name)
{
    int fields[16];
    for (int k = 0; k < 128; k++) {
        char cell[64] = "";
        csv_read(text, fields, 16, 0, k, cell, sizeof cell);
        if (!strcmp(cell, name))
            return k;
    }
    return -1;
}

static void csv_cell(const char *text, int rec, const char *name, char *out, size_t len)
{
    int fields[16], k = csv_col(text, name);
    if (k < 0)
        fail_msg("CSV has no column %s", name);
    out[0] = '\0';
    csv_read(text, fields, 16, rec, k, out, len);
}

/* Weights beyond VRAM in the three formats: the budget and kept groups of
 * the run, each ok row's per-step streaming, the traced step's copies in
 * JSON; none of it on the failed row, and (test_markdown, test_json,
 * test_csv_resident) none of it when the weights are resident. */
static void test_streaming(void **state)
{
    (void)state;
    gp_cs_row srows[FX_ROWS];
    gp_cs_meta sm;
    fx_rows(srows);
    fx_meta(&sm);
    fx_stream(srows, &sm);

    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    gp_cs_write_markdown(f, &sm, srows, FX_ROWS);
    fclose(f);
    if (!strstr(text, "\nWeights streamed (--vram-budget): at most 8.00 GiB (8589934592 bytes) of the 14.96 GiB of "
                      "weights on the GPU at once; 20 of 64 layer groups (5.00 GiB) kept there for good, the others "
                      "copied from pinned host memory as the steps reach them, prefetching 2 ahead; every row ran "
                      "eager (no CUDA graphs), seq included.\n"))
        fail_msg("no budget line:\n%s", text);
    assert_non_null(strstr(text, "| workload | B:C | split asked | M | GB streamed | copy GB/s | copy ms | attn wait ms "
                                 "| FFN wait ms | hits | misses | prefetches | evictions | peak GB |"));
    assert_non_null(strstr(text, "\n| small | 8:1024 | seq | - | 7.500 | 51.2 | 146.500 | 12.250 | 30.500 | 20.0 | 4.5 "
                                 "| 39.5 | 44.0 | 8.59 |\n"));
    assert_non_null(strstr(text, "\n| small | 8:1024 | 56:76 | 2 | 8.500 | 51.2 | 147.500 |"));
    assert_null(strstr(text, "| small | 8:1024 | 72:rest | 2 | ")); /* the failed row has no figures */
    /* the streaming table comes before the run's metadata and the winners */
    assert_true(strstr(text, "Weight streaming per step") < strstr(text, "GPU: NVIDIA"));
    free(text);

    char path[256];
    fx_tmp(path, sizeof path, "stream.json");
    assert_int_equal(gp_cs_write_json(path, &sm, srows, FX_ROWS), GP_OK);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fail_msg("%s does not parse: line %d: %s", path, jerr.line, jerr.text);
    json_t *w = json_object_get(json_object_get(root, "meta"), "weights");
    assert_true(json_is_true(json_object_get(w, "streamed")));
    assert_true(json_integer_value(json_object_get(w, "vram_budget_bytes")) == (json_int_t)FX_BUDGET);
    assert_true(json_integer_value(json_object_get(w, "weight_bytes")) == 16060522496ll);
    assert_int_equal(json_integer_value(json_object_get(w, "layer_groups")), 64);
    assert_int_equal(json_integer_value(json_object_get(w, "kept_groups")), 20);
    assert_true(json_integer_value(json_object_get(w, "kept_bytes")) == (json_int_t)(5ll << 30));
    assert_int_equal(json_integer_value(json_object_get(w, "prefetch_depth")), 2);
    assert_true(json_is_false(json_object_get(w, "graphs")));
    json_t *arr = json_object_get(root, "rows");
    json_t *st = json_object_get(json_array_get(arr, 1), "streaming");
    assert_int_equal(json_integer_value(json_object_get(st, "steps")), 40);
    assert_float_equal(json_number_value(json_object_get(st, "gb_per_step")), 8.5, 1e-12);
    assert_float_equal(json_number_value(json_object_get(st, "copy_gbps")), 51.25, 1e-12);
    assert_float_equal(json_number_value(json_object_get(st, "copy_ms_per_step")), 147.5, 1e-12);
    json_t *wait = json_object_get(st, "wait_ms_per_step");
    assert_float_equal(json_number_value(json_object_get(wait, "attn")), 12.25, 1e-12);
    assert_float_equal(json_number_value(json_object_get(wait, "ffn")), 30.5, 1e-12);
    assert_float_equal(json_number_value(json_object_get(st, "hits_per_step")), 20.0, 1e-12);
    assert_float_equal(json_number_value(json_object_get(st, "misses_per_step")), 4.5, 1e-12);
    assert_float_equal(json_number_value(json_object_get(st, "prefetches_per_step")), 39.5, 1e-12);
    assert_float_equal(json_number_value(json_object_get(st, "evictions_per_step")), 44.0, 1e-12);
    assert_true(json_integer_value(json_object_get(st, "peak_device_bytes")) == (json_int_t)(FX_BUDGET - 4096));
    json_t *wc = json_object_get(json_array_get(arr, 1), "weight_copies");
    assert_float_equal(json_number_value(json_object_get(wc, "step_ms")), srows[1].trace.step_ms, 1e-6);
    json_t *cps = json_object_get(wc, "copies");
    assert_int_equal(json_array_size(cps), 4);
    assert_string_equal(json_string_value(json_object_get(json_array_get(cps, 0), "group")), "ffn 2");
    assert_float_equal(json_number_value(json_object_get(json_array_get(cps, 0), "begin_ms")), -0.5, 1e-6);
    assert_int_equal(json_array_size(json_object_get(json_object_get(json_array_get(arr, 0), "weight_copies"),
                                                     "copies")), 3);
    /* the failed row: neither */
    assert_null(json_object_get(json_array_get(arr, 2), "streaming"));
    assert_null(json_object_get(json_array_get(arr, 2), "weight_copies"));
    json_decref(root);
    remove(path);

    fx_tmp(path, sizeof path, "stream.csv");
    assert_int_equal(gp_cs_write_csv(path, &sm, srows, FX_ROWS), GP_OK);
    text = fx_slurp(path);
    assert_non_null(text);
    int fields[16];
    assert_int_equal(csv_read(text, fields, 16, 0, 0, NULL, 0), FX_ROWS + 1);
    for (int i = 1; i <= FX_ROWS; i++)
        assert_int_equal(fields[i], fields[0]);
    char cell[64];
    const struct { int rec; const char *col, *want; } want[] = {
        { 2, "weights_streamed", "1" }, { 2, "vram_budget_bytes", "8589934592" }, { 2, "kept_groups", "20" },
        { 2, "kept_bytes", "5368709120" }, { 2, "stream_steps", "40" }, { 2, "gb_streamed_per_step", "8.5" },
        { 2, "copy_gbps", "51.25" }, { 2, "copy_ms_per_step", "147.5" }, { 2, "wait_attn_ms_per_step", "12.25" },
        { 2, "wait_ffn_ms_per_step", "30.5" }, { 2, "hits_per_step", "20" }, { 2, "misses_per_step", "4.5" },
        { 2, "prefetches_per_step", "39.5" }, { 2, "evictions_per_step", "44" },
        { 2, "peak_weight_bytes", "8589930496" }, { 1, "gb_streamed_per_step", "7.5" },
        /* the failed row: the run's budget, no figures */
        { 3, "weights_streamed", "1" }, { 3, "vram_budget_bytes", "8589934592" }, { 3, "stream_steps", "" },
        { 3, "copy_gbps", "" }, { 3, "peak_weight_bytes", "" },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        csv_cell(text, want[i].rec, want[i].col, cell, sizeof cell);
        if (strcmp(cell, want[i].want))
            fail_msg("CSV record %d, %s: '%s', expected '%s'", want[i].rec, want[i].col, cell, want[i].want);
    }
    free(text);
    remove(path);

    /* a row that copied nothing (every group kept) has no rate, not 0 GB/s */
    srows[0].stream.copy_gbps = 0.0;
    srows[0].stream.gb_per_step = 0.0;
    f = open_memstream(&text, &len);
    gp_cs_write_markdown(f, &sm, srows, 1);
    fclose(f);
    assert_non_null(strstr(text, "| small | 8:1024 | seq | - | 0.000 | - | "));
    free(text);
    fx_free(srows);
}

/* Resident weights in CSV: the streaming columns are there (one shape for
 * every file), 0 and empty. */
static void test_csv_resident(void **state)
{
    (void)state;
    char path[256];
    fx_tmp(path, sizeof path, "resident.csv");
    assert_int_equal(gp_cs_write_csv(path, &meta, rows, FX_ROWS), GP_OK);
    char *text = fx_slurp(path), cell[64];
    assert_non_null(text);
    csv_cell(text, 1, "weights_streamed", cell, sizeof cell);
    assert_string_equal(cell, "0");
    static const char *empty[] = { "vram_budget_bytes", "kept_groups", "kept_bytes", "stream_steps",
                                   "gb_streamed_per_step", "copy_gbps", "wait_attn_ms_per_step", "peak_weight_bytes" };
    for (int rec = 1; rec <= FX_ROWS; rec++)
        for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
            csv_cell(text, rec, empty[i], cell, sizeof cell);
            if (cell[0])
                fail_msg("resident record %d: %s is '%s', expected empty", rec, empty[i], cell);
        }
    free(text);
    remove(path);
}

/* An uneven micro-batch split is shown as made, in every format; and a run
 * stopped early (SIGINT) still writes documents that parse, holding exactly
 * the rows that finished and saying that it stopped. */
static void test_uneven_and_partial(void **state)
{
    (void)state;
    gp_cs_row part[3];
    memcpy(part, rows, sizeof part); /* shares the fixture's buffers: not freed here */
    part[2] = rows[1];
    part[2].M = 3;
    part[2].micro_rows[0] = 3;
    part[2].micro_rows[1] = 3;
    part[2].micro_rows[2] = 2;
    gp_cs_meta pm = meta;
    snprintf(pm.stopped, sizeof pm.stopped, "SIGINT");

    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    gp_cs_write_markdown(f, &pm, part, 3);
    fclose(f);
    assert_non_null(strstr(text, "| 56:76 | 3 (3+3+2 rows) | 4 | A | ratio |"));
    assert_non_null(strstr(text, "| 56:76 | 2 | 4 | A | ratio |")); /* even: M alone */
    free(text);

    char path[256];
    fx_tmp(path, sizeof path, "partial.json");
    assert_int_equal(gp_cs_write_json(path, &pm, part, 3), GP_OK);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fail_msg("%s does not parse: line %d: %s", path, jerr.line, jerr.text);
    assert_string_equal(json_string_value(json_object_get(json_object_get(root, "meta"), "stopped")), "SIGINT");
    json_t *arr = json_object_get(root, "rows");
    assert_int_equal(json_array_size(arr), 3);
    json_t *mr = json_object_get(json_array_get(arr, 2), "micro_rows");
    assert_int_equal(json_array_size(mr), 3);
    assert_int_equal(json_integer_value(json_array_get(mr, 2)), 2);
    json_decref(root);
    remove(path);

    fx_tmp(path, sizeof path, "partial.csv");
    assert_int_equal(gp_cs_write_csv(path, &pm, part, 3), GP_OK);
    text = fx_slurp(path);
    assert_non_null(text);
    int fields[8];
    char cell[64] = "";
    /* record 3 (the uneven row), column 34: micro_rows */
    int n = csv_read(text, fields, 8, 3, 34, cell, sizeof cell);
    assert_int_equal(n, 4);
    for (int i = 1; i < n; i++)
        assert_int_equal(fields[i], fields[0]);
    assert_string_equal(cell, "3;3;2");
    free(text);
    remove(path);
}

static void test_unwritable(void **state)
{
    (void)state;
    const char *bad = "/nonexistent-gp-dir/out.file";
    gp_status (*writers[])(const char *, const gp_cs_meta *, const gp_cs_row *, int) = {
        gp_cs_write_json, gp_cs_write_csv, gp_cs_write_trace, gp_cs_write_svg,
    };
    for (size_t i = 0; i < sizeof writers / sizeof writers[0]; i++) {
        gp_clear_error();
        assert_int_equal(writers[i](bad, &meta, rows, FX_ROWS), GP_ERR_IO);
        if (!strstr(gp_last_error(), bad))
            fail_msg("writer %zu: message does not name the path: %s", i, gp_last_error());
    }
    /* a full disk is caught at the close */
    gp_clear_error();
    gp_status st = gp_cs_write_csv("/dev/full", &meta, rows, FX_ROWS);
    if (st != GP_ERR_IO)
        fail_msg("/dev/full: %s", gp_status_str(st));
    assert_non_null(strstr(gp_last_error(), "/dev/full"));
}

static void test_row_free(void **state)
{
    (void)state;
    gp_cs_row r;
    memset(&r, 0, sizeof r);
    assert_int_equal(gp_cs_trace_alloc(&r.trace, 32, 4), GP_OK);
    assert_int_equal(r.trace.n_layers, 32);
    assert_true(r.trace.ffn_end[32 * 4 - 1] == 0.0f);
    r.samples_ms = malloc(5 * sizeof(double));
    r.n_samples = 5;
    r.decisions = calloc(2, sizeof *r.decisions);
    r.n_decisions = 2;
    r.copies = calloc(3, sizeof *r.copies);
    r.n_copies = 3;
    gp_cs_row_free(&r);
    assert_null(r.samples_ms);
    assert_null(r.trace.attn_begin);
    assert_null(r.decisions);
    assert_null(r.copies);
    assert_int_equal(r.n_samples + r.n_decisions + r.trace.n_layers + r.n_copies, 0);
    gp_cs_row_free(&r); /* twice is harmless */
    /* a trace whose arrays were allocated one by one is released too (the
     * sanitizer build would report a bad free or a leak) */
    r.trace.n_layers = 2;
    r.trace.M = 2;
    r.trace.attn_begin = malloc(4 * sizeof(float));
    r.trace.attn_end = malloc(4 * sizeof(float));
    r.trace.ffn_begin = malloc(4 * sizeof(float));
    r.trace.ffn_end = malloc(4 * sizeof(float));
    gp_cs_row_free(&r);
    assert_null(r.trace.ffn_end);
    gp_cs_row_free(NULL);
    assert_int_equal(gp_cs_trace_alloc(&r.trace, 0, 2), GP_ERR_INVALID_ARG);
    assert_int_equal(gp_cs_trace_alloc(&r.trace, 2, 5), GP_ERR_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_markdown),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_csv),
        cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_csv_resident),
        cmocka_unit_test(test_uneven_and_partial),
        cmocka_unit_test(test_unwritable),
        cmocka_unit_test(test_row_free),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
