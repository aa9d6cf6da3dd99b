/* The Chrome trace and the SVG chart: the trace is JSON with a process per
 * traced row, named partition threads, one non-negative "X" slice per stage,
 * each flow start matched by one finish with its id inside the right slices,
 * decisions as instants, weight-group copies on a copy thread when the
 * weights are streamed; the SVG is well-formed XML (checked by a small
 * parser here, as CI has no xmllint) with a line per (workload, M), the seq
 * levels dashed, and every text escaped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
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

/* ------------------------------------------------------------ trace */

static const char *str(json_t *ev, const char *key)
{
    const char *s = json_string_value(json_object_get(ev, key));
    return s ? s : "";
}

/* The X slice on (pid, tid) enclosing ts, or NULL. */
static json_t *enclosing(json_t *events, json_int_t pid, json_int_t tid, double ts)
{
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
    {
        if (strcmp(str(ev, "ph"), "X") || json_integer_value(json_object_get(ev, "pid")) != pid ||
            json_integer_value(json_object_get(ev, "tid")) != tid)
            continue;
        double t0 = json_number_value(json_object_get(ev, "ts")), d = json_number_value(json_object_get(ev, "dur"));
        if (ts >= t0 && ts <= t0 + d)
            return ev;
    }
    return NULL;
}

static json_int_t thread_of(json_t *events, json_int_t pid, const char *name);

static void test_trace(void **state)
{
    (void)state;
    char path[256];
    fx_tmp(path, sizeof path, "trace.json");
    assert_int_equal(gp_cs_write_trace(path, &meta, rows, FX_ROWS), GP_OK);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fail_msg("trace does not parse: line %d: %s", jerr.line, jerr.text);
    json_t *events = json_object_get(root, "traceEvents");
    assert_true(json_is_array(events));
    assert_string_equal(json_string_value(json_object_get(json_object_get(root, "otherData"), "gpu")), meta.gpu);

    int n_x = 0, n_s = 0, n_f = 0, n_i = 0, n_be = 0, attn_name = 0, ffn_name = 0, procs = 0;
    bool seen_slice_name = false;
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
    {
        const char *ph = str(ev, "ph");
        assert_true(json_is_integer(json_object_get(ev, "pid")));
        if (!strcmp(ph, "X")) {
            n_x++;
            assert_true(json_is_number(json_object_get(ev, "ts")));
            double dur = json_number_value(json_object_get(ev, "dur"));
            if (!(dur >= 0))
                fail_msg("slice %s has dur %g", str(ev, "name"), dur);
            /* only the row with a trace (row 1, pid 2) has slices */
            assert_int_equal(json_integer_value(json_object_get(ev, "pid")), 2);
            seen_slice_name |= !strcmp(str(ev, "name"), "attn L2 m1");
        } else if (!strcmp(ph, "s") || !strcmp(ph, "f")) {
            bool start = ph[0] == 's';
            n_s += start;
            n_f += !start;
            json_int_t id = json_integer_value(json_object_get(ev, "id"));
            /* one partner with the same id and the other phase */
            int partners = 0;
            size_t k;
            json_t *other;
            json_array_foreach(events, k, other)
            {
                if (k != i && json_integer_value(json_object_get(other, "id")) == id &&
                    !strcmp(str(other, "ph"), start ? "f" : "s"))
                    partners++;
            }
            if (partners != 1)
                fail_msg("flow %s id %lld has %d partners", ph, (long long)id, partners);
            assert_string_equal(str(ev, "bp"), "e");
            /* bound to the slice around it: attention for starts, FFN for finishes */
            json_t *sl = enclosing(events, json_integer_value(json_object_get(ev, "pid")),
                                   json_integer_value(json_object_get(ev, "tid")),
                                   json_number_value(json_object_get(ev, "ts")));
            if (!sl)
                fail_msg("flow %s id %lld is outside every slice", ph, (long long)id);
            assert_true(strncmp(str(sl, "name"), start ? "attn " : "ffn ", start ? 5 : 4) == 0);
        } else if (!strcmp(ph, "i")) {
            n_i++;
            assert_non_null(strstr(str(ev, "name"), "rebalance"));
            assert_string_equal(str(ev, "s"), "t");
        } else if (!strcmp(ph, "M")) {
            const char *name = json_string_value(json_object_get(json_object_get(ev, "args"), "name"));
            if (!strcmp(str(ev, "name"), "thread_name")) {
                attn_name += name && !strcmp(name, "attention (A)");
                ffn_name += name && !strcmp(name, "FFN (F)");
            }
            procs += !strcmp(str(ev, "name"), "process_name");
        } else if (!strcmp(ph, "B") || !strcmp(ph, "E")) {
            n_be += ph[0] == 'B' ? 1 : -1;
        } else {
            fail_msg("unexpected phase '%s'", ph);
        }
    }
    assert_int_equal(n_x, 2 * FX_LAYERS * FX_M);
    assert_int_equal(n_s, FX_LAYERS * FX_M);
    assert_int_equal(n_f, n_s);
    assert_int_equal(n_i, FX_DECISIONS);
    assert_int_equal(n_be, 0); /* balanced: no open begin/end pairs */
    assert_int_equal(attn_name, 1);
    assert_int_equal(ffn_name, 1);
    assert_int_equal(procs, 1); /* seq and failed rows have no trace */
    assert_true(thread_of(events, 2, "copy") < 0); /* resident weights: no copy track */
    assert_true(seen_slice_name);
    json_decref(root);

    /* only failed rows: an empty but valid trace */
    assert_int_equal(gp_cs_write_trace(path, NULL, &rows[2], 1), GP_OK);
    root = json_load_file(path, 0, &jerr);
    assert_non_null(root);
    assert_int_equal(json_array_size(json_object_get(root, "traceEvents")), 0);
    json_decref(root);
    remove(path);
}

/* The thread of pid named name (a thread_name event), -1 when none. */
static json_int_t thread_of(json_t *events, json_int_t pid, const char *name)
{
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
    {
        const char *n = json_string_value(json_object_get(json_object_get(ev, "args"), "name"));
        if (!strcmp(str(ev, "ph"), "M") && !strcmp(str(ev, "name"), "thread_name") &&
            json_integer_value(json_object_get(ev, "pid")) == pid && n && !strcmp(n, name))
            return json_integer_value(json_object_get(ev, "tid"));
    }
    return -1;
}

/* Streamed weights: a "copy" thread per row with copies, third after A and
 * F, one slice per copy named by its group, on the stages' clock (a copy
 * begun in the step before drawn from 0, its real begin in args); the seq
 * row gets its step's extent beside its copies; resident rows (test_trace)
 * have no copy thread. */
static void test_trace_copies(void **state)
{
    (void)state;
    gp_cs_row srows[FX_ROWS];
    gp_cs_meta sm;
    fx_rows(srows);
    fx_meta(&sm);
    fx_stream(srows, &sm);
    char path[256];
    fx_tmp(path, sizeof path, "trace_copies.json");
    assert_int_equal(gp_cs_write_trace(path, &sm, srows, FX_ROWS), GP_OK);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fail_msg("trace does not parse: line %d: %s", jerr.line, jerr.text);
    json_t *events = json_object_get(root, "traceEvents");
    /* pid 1: the seq row, pid 2: the split row; both copy threads named "copy" */
    json_int_t seq_copy = thread_of(events, 1, "copy"), split_copy = thread_of(events, 2, "copy");
    assert_true(seq_copy > 0 && split_copy > 0);
    assert_true(thread_of(events, 2, "attention (A)") > 0);
    json_int_t seq_step = thread_of(events, 1, "sequential step (all SMs)");
    assert_true(seq_step > 0);
    assert_true(thread_of(events, 4, "copy") < 0); /* the large seq row copied nothing here */
    int n_copy[3] = { 0 }, sorted_third = 0, step_slices = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
    {
        json_int_t pid = json_integer_value(json_object_get(ev, "pid")), tid = json_integer_value(json_object_get(ev, "tid"));
        if (!strcmp(str(ev, "ph"), "M") && !strcmp(str(ev, "name"), "thread_sort_index") &&
            tid == (pid == 1 ? seq_copy : split_copy))
            sorted_third += json_integer_value(json_object_get(json_object_get(ev, "args"), "sort_index")) == 3;
        if (strcmp(str(ev, "ph"), "X"))
            continue;
        if (pid == 1 && tid == seq_step) {
            step_slices++;
            assert_float_equal(json_number_value(json_object_get(ev, "ts")), 0.0, 1e-9);
            assert_float_equal(json_number_value(json_object_get(ev, "dur")), 9000.0, 1e-6);
        }
        if (tid != (pid == 1 ? seq_copy : split_copy) || pid > 2)
            continue;
        assert_string_equal(str(ev, "cat"), "copy");
        const gp_cs_row *r = &srows[pid - 1];
        const gp_cs_copy *c = &r->copies[n_copy[pid]++];
        json_t *args = json_object_get(ev, "args");
        assert_string_equal(str(ev, "name"), c->group);
        assert_string_equal(json_string_value(json_object_get(args, "group")), c->group);
        assert_true(json_integer_value(json_object_get(args, "bytes")) == (json_int_t)c->bytes);
        assert_float_equal(json_number_value(json_object_get(args, "begin_ms")), c->begin_ms, 1e-6);
        double ts = json_number_value(json_object_get(ev, "ts")), dur = json_number_value(json_object_get(ev, "dur"));
        double want0 = c->begin_ms > 0 ? 1e3 * c->begin_ms : 0.0;
        if (fabs(ts - want0) > 1e-3 || fabs(ts + dur - 1e3 * c->end_ms) > 1e-3)
            fail_msg("copy %s of row %lld: ts %g dur %g, expected %g to %g us", c->group, (long long)pid, ts, dur,
                     want0, 1e3 * c->end_ms);
        assert_true(json_number_value(json_object_get(args, "gbps")) > 0.0);
    }
    assert_int_equal(n_copy[1], srows[0].n_copies);
    assert_int_equal(n_copy[2], srows[1].n_copies);
    assert_int_equal(sorted_third, 2);
    assert_int_equal(step_slices, 1);
    json_decref(root);
    remove(path);
    fx_free(srows);
}

/* ------------------------------------------------------------ XML check */

/* A small well-formedness check: prolog, comments, elements with quoted
 * attributes, entities, one root, every opened tag closed in order. Returns
 * NULL when fine, else a description of the first problem. */
static const char *xml_check(const char *s, int *elements)
{
    static char why[160];
    const char *stack[256];
    size_t stack_len[256];
    int depth = 0, roots = 0;
    *elements = 0;
    if (strncmp(s, "<?xml", 5) == 0) {
        s = strstr(s, "?>");
        if (!s)
            return "unterminated prolog";
        s += 2;
    }
    while (*s) {
        if (*s == '&') {
            const char *ents[] = { "&amp;", "&lt;", "&gt;", "&quot;", "&apos;" };
            size_t k = 0;
            for (; k < 5 && strncmp(s, ents[k], strlen(ents[k])); k++)
                ;
            if (k == 5)
                return "bare & in text";
            s += strlen(ents[k]);
            continue;
        }
        if (*s == '>')
            return "bare > in text is legal but suspicious here";
        if (*s != '<') {
            if (depth == 0 && !isspace((unsigned char)*s))
                return "text outside the root element";
            s++;
            continue;
        }
        if (strncmp(s, "<!--", 4) == 0) {
            s = strstr(s, "-->");
            if (!s)
                return "unterminated comment";
            s += 3;
            continue;
        }
        bool closing = s[1] == '/';
        const char *name = s + (closing ? 2 : 1), *p = name;
        while (isalnum((unsigned char)*p) || *p == '-' || *p == ':' || *p == '_')
            p++;
        size_t name_len = (size_t)(p - name);
        if (!name_len)
            return "tag without a name";
        if (closing) {
            if (*p != '>')
                return "junk in a closing tag";
            if (depth == 0 || stack_len[depth - 1] != name_len || strncmp(stack[depth - 1], name, name_len)) {
                snprintf(why, sizeof why, "closing </%.*s> does not match <%.*s>", (int)name_len, name,
                         depth ? (int)stack_len[depth - 1] : 0, depth ? stack[depth - 1] : "");
                return why;
            }
            depth--;
            s = p + 1;
            continue;
        }
        /* attributes: name="value" with no '<' and only known entities */
        for (;;) {
            while (isspace((unsigned char)*p))
                p++;
            if (*p == '>' || (p[0] == '/' && p[1] == '>'))
                break;
            const char *an = p;
            while (isalnum((unsigned char)*p) || *p == '-' || *p == ':' || *p == '_')
                p++;
            if (p == an || *p != '=' || (p[1] != '"' && p[1] != '\''))
                return "malformed attribute";
            char q = p[1];
            p += 2;
            for (; *p && *p != q; p++) {
                if (*p == '<')
                    return "< inside an attribute";
                if (*p == '&' && strncmp(p, "&amp;", 5) && strncmp(p, "&lt;", 4) && strncmp(p, "&gt;", 4) &&
                    strncmp(p, "&quot;", 6) && strncmp(p, "&apos;", 6))
                    return "bare & in an attribute";
            }
            if (!*p)
                return "unterminated attribute";
            p++;
        }
        (*elements)++;
        if (depth == 0 && ++roots > 1)
            return "more than one root element";
        if (*p == '/') {
            s = p + 2;
            continue;
        }
        if (depth == 256)
            return "too deep";
        stack[depth] = name;
        stack_len[depth] = name_len;
        depth++;
        s = p + 1;
    }
    if (depth)
        return "unclosed element at the end";
    if (roots != 1)
        return "no root element";
    return NULL;
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (; (s = strstr(s, needle)); s += strlen(needle))
        n++;
    return n;
}

static void test_xml_checker(void **state)
{
    (void)state;
    int n;
    assert_null(xml_check("<?xml version=\"1.0\"?>\n<a x=\"1\"><b/><c>t &amp; u</c></a>\n", &n));
    assert_int_equal(n, 3);
    assert_non_null(xml_check("<a><b></a>", &n));
    assert_non_null(xml_check("<a>x & y</a>", &n));
    assert_non_null(xml_check("<a x=1/>", &n));
    assert_non_null(xml_check("<a/><b/>", &n));
    assert_non_null(xml_check("<a t=\"<\"/>", &n));
}

static void test_svg(void **state)
{
    (void)state;
    char path[256];
    fx_tmp(path, sizeof path, "chart.svg");
    assert_int_equal(gp_cs_write_svg(path, &meta, rows, FX_ROWS), GP_OK);
    char *svg = fx_slurp(path);
    assert_non_null(svg);
    int elements;
    const char *why = xml_check(svg, &elements);
    if (why)
        fail_msg("SVG not well-formed: %s", why);
    assert_true(elements > 20);
    assert_non_null(strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    /* a line per (workload, M) that ran: small M=2 and large M=1 */
    assert_int_equal(count(svg, "<polyline"), 2);
    /* each workload's seq level dashed, in the plot and the legend */
    assert_int_equal(count(svg, "class=\"seq\""), 2);
    assert_non_null(strstr(svg, "stroke-dasharray=\"8 5\""));
    /* axes, ticks, labels, legend */
    assert_non_null(strstr(svg, "attention SMs"));
    assert_non_null(strstr(svg, "tokens/s"));
    assert_non_null(strstr(svg, ">128</text>"));
    assert_non_null(strstr(svg, "class=\"legend\""));
    assert_non_null(strstr(svg, "small 8:1024, M=2"));
    /* texts escaped */
    assert_non_null(strstr(svg, "&quot;test&quot; &lt;rig&gt; &amp; co"));
    assert_non_null(strstr(svg, "large, &quot;custom&quot;"));
    /* the failed row is counted, not drawn */
    assert_non_null(strstr(svg, "1 configuration failed"));
    /* tokens/s differ ~30x between the workloads: log scale */
    assert_non_null(strstr(svg, "(log scale)"));
    free(svg);

    /* nothing to draw, or only failures: still a valid document */
    const gp_cs_row *sets[] = { NULL, &rows[2] };
    for (int k = 0; k < 2; k++) {
        assert_int_equal(gp_cs_write_svg(path, k ? &meta : NULL, sets[k], k), GP_OK);
        svg = fx_slurp(path);
        why = xml_check(svg, &elements);
        if (why)
            fail_msg("empty SVG %d not well-formed: %s", k, why);
        assert_non_null(strstr(svg, "no successful configuration"));
        free(svg);
    }
    /* one workload only: a linear axis from 0 */
    assert_int_equal(gp_cs_write_svg(path, &meta, rows, 3), GP_OK);
    svg = fx_slurp(path);
    assert_null(xml_check(svg, &elements));
    assert_null(strstr(svg, "(log scale)"));
    assert_int_equal(count(svg, "<polyline"), 1);
    free(svg);
    remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace),
        cmocka_unit_test(test_trace_copies),
        cmocka_unit_test(test_xml_checker),
        cmocka_unit_test(test_svg),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
