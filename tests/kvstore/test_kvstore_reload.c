/* The lag-2 reload schedule on the simulated backend: its orderings over
 * layer counts, buffers and stage times, the overlap it reaches, a failing op
 * at each layer, and the refusals of bad params. */
#include "gp_test.h"
#include "gp_kvstore.h"
#include "sim_reload.h"

typedef struct rl_case {
    int n_layers, n_buffers;
    double dur[GP_KV_RELOAD_STAGE_COUNT];
    int jitter, write_on_compute;
} rl_case;

typedef struct rl_result {
    gp_status status;
    gp_kv_reload_stats st;
    double makespan, done_t;
    char msg[512];
} rl_result;

/* Runs c on a fresh simulation with a done marker; the simulation is left
 * for the caller's checks (destroy it after). */
static gp_sim_reload *rl_run(const rl_case *c, const gp_kv_reload_ops *ops, gp_sim_reload_call fail,
                             int nth, rl_result *out)
{
    gp_sim_reload_params sp = {c->n_layers, c->n_buffers, {c->dur[0], c->dur[1], c->dur[2]}, c->jitter,
                               c->write_on_compute};
    gp_sim_reload *x = NULL;
    GP_CHECK_OK(gp_sim_reload_create(&sp, &x));
    void *done = NULL;
    GP_CHECK_OK(gp_sim_reload_ops()->marker_create(x, &done));
    if (nth > 0)
        gp_sim_reload_fail(x, fail, nth);
    gp_kv_reload_params p = gp_kv_reload_default_params();
    p.n_layers = c->n_layers;
    p.n_buffers = c->n_buffers;
    p.ops = ops ? ops : gp_sim_reload_ops();
    p.be = x;
    p.done = done;
    gp_clear_error();
    out->status = gp_kv_reload_run(&p, &out->st);
    snprintf(out->msg, sizeof out->msg, "%s", gp_last_error());
    out->makespan = gp_sim_reload_makespan(x);
    out->done_t = gp_sim_reload_marker_time(done);
    gp_sim_reload_ops()->marker_destroy(x, done);
    assert_int_equal(gp_sim_reload_live_markers(x), 0);
    return x;
}

static void rl_expect_clean(gp_sim_reload *x, int complete, const char *label)
{
    char why[256];
    int bad = gp_sim_reload_check(x, complete, why, sizeof why);
    if (bad)
        fail_msg("%s: %d broken rules, first: %s", label, bad, why);
}

/* Every layer count, buffer count, stage balance and stream mapping: the
 * orderings hold, every op ran once, done completes with the last op. */
static void test_orderings(void **state)
{
    (void)state;
    static const int layers[] = {1, 2, 3, 32};
    static const double durs[][3] = {{1, 1, 1}, {4, 1, 1}, {1, 4, 1}, {1, 1, 4}, {1, 0.1, 0.2}};
    for (size_t li = 0; li < sizeof layers / sizeof *layers; li++)
        for (int nb = 2; nb <= 3; nb++)
            for (size_t di = 0; di < sizeof durs / sizeof *durs; di++)
                for (int mode = 0; mode < 4; mode++) {
                    rl_case c = {layers[li], nb, {durs[di][0], durs[di][1], durs[di][2]}, mode & 1, mode >> 1};
                    char label[128];
                    snprintf(label, sizeof label, "%d layers, %d buffers, stage times %g/%g/%g, jitter %d, "
                             "write on compute %d", c.n_layers, nb, c.dur[0], c.dur[1], c.dur[2], c.jitter,
                             c.write_on_compute);
                    rl_result r;
                    gp_sim_reload *x = rl_run(&c, NULL, GP_SIM_RL_LOAD, 0, &r);
                    if (r.status != GP_OK)
                        fail_msg("%s: %s: %s", label, gp_status_str(r.status), r.msg);
                    rl_expect_clean(x, 1, label);
                    int n = c.n_layers, used = nb < n ? nb : n;
                    assert_int_equal(r.st.loads, n);
                    assert_int_equal(r.st.processes, n);
                    assert_int_equal(r.st.writes, n);
                    assert_int_equal(r.st.layers_written, n);
                    assert_int_equal(r.st.ready_calls, n);
                    assert_int_equal(r.st.markers, 3 * used);
                    assert_int_equal(r.st.records, 3 * n + 1);
                    assert_int_equal(r.st.waits, 2 * n + (n > nb ? n - nb : 0));
                    assert_int_equal(gp_sim_reload_calls(x, GP_SIM_RL_WAIT), r.st.waits);
                    assert_true(r.done_t == r.makespan);
                    gp_sim_reload_destroy(x);
                }
}

/* The overlap: with three buffers and a write stream of its own, equal
 * stages finish in (n + 2) stage times, the pipeline's fill and drain; two
 * buffers hold each load back until the write two layers back ended, so
 * equal stages take about 1.5 n, yet still far below the serial 3 n, and a
 * load-bound reload with two buffers is the loads plus one process and
 * write. */
static void test_makespan(void **state)
{
    (void)state;
    const int n = 32;
    rl_result r;
    rl_case c3 = {n, 3, {1, 1, 1}, 0, 0};
    gp_sim_reload_destroy(rl_run(&c3, NULL, GP_SIM_RL_LOAD, 0, &r));
    assert_int_equal(r.status, GP_OK);
    assert_true(fabs(r.makespan - (n + 2)) < 1e-9);

    rl_case c2 = {n, 2, {1, 1, 1}, 0, 0};
    gp_sim_reload_destroy(rl_run(&c2, NULL, GP_SIM_RL_LOAD, 0, &r));
    assert_int_equal(r.status, GP_OK);
    if (r.makespan > 1.5 * n + 3 || r.makespan > 0.6 * 3 * n)
        fail_msg("2 buffers, equal stages: makespan %g, expected about 1.5 x %d", r.makespan, n);

    rl_case load = {n, 2, {4, 1, 1}, 0, 0};
    gp_sim_reload_destroy(rl_run(&load, NULL, GP_SIM_RL_LOAD, 0, &r));
    assert_int_equal(r.status, GP_OK);
    assert_true(fabs(r.makespan - (4.0 * n + 2)) < 1e-9);

    /* Process and write sharing the compute stream: that stream is the bound. */
    rl_case shared = {n, 3, {1, 1, 1}, 0, 1};
    gp_sim_reload_destroy(rl_run(&shared, NULL, GP_SIM_RL_LOAD, 0, &r));
    assert_int_equal(r.status, GP_OK);
    if (r.makespan < 2.0 * n || r.makespan > 2.0 * n + 2)
        fail_msg("write on compute: makespan %g, expected about 2 x %d", r.makespan, n);
}

/* The (stage, layer) of every op of a complete run, in enqueue order. */
static int rl_reference(const rl_case *c, gp_sim_reload_rec *out)
{
    rl_result r;
    gp_sim_reload *x = rl_run(c, NULL, GP_SIM_RL_LOAD, 0, &r);
    assert_int_equal(r.status, GP_OK);
    int n = 0;
    const gp_sim_reload_rec *log = gp_sim_reload_log(x, &n);
    memcpy(out, log, (size_t)n * sizeof *log);
    gp_sim_reload_destroy(x);
    return n;
}

/* A failure of any call at any point: the op's status comes back with a
 * message naming the op and layer, the ops enqueued are exactly those the
 * complete schedule enqueues before the failing one (so nothing that
 * depends on it), the counts say so, and no marker is left. */
static void test_failures(void **state)
{
    (void)state;
    static const char *const names[] = {"load", "process", "write", "record", "wait", "marker_create",
                                        "layer_ready"};
    for (int nb = 2; nb <= 3; nb++) {
        rl_case c = {7, nb, {2, 1, 1.5}, 0, 0};
        gp_sim_reload_rec ref[64];
        int n_ref = rl_reference(&c, ref);
        for (int call = 0; call < GP_SIM_RL_CALL_COUNT; call++) {
            /* Every call of the complete run (records include done's). */
            int nl = c.n_layers;
            int max_nth = call == GP_SIM_RL_MARKER_CREATE ? 3 * nb
                          : call == GP_SIM_RL_RECORD      ? 3 * nl + 1
                          : call == GP_SIM_RL_WAIT        ? 2 * nl + nl - nb
                                                          : nl;
            for (int k = 1; k <= max_nth; k++) {
                rl_result r;
                gp_sim_reload *x = rl_run(&c, NULL, (gp_sim_reload_call)call, k, &r);
                char label[96];
                snprintf(label, sizeof label, "%d buffers, %s call %d failing", nb, names[call], k);
                if (r.status != GP_ERR_CUDA)
                    fail_msg("%s: %s (%s)", label, gp_status_str(r.status), r.msg);
                if (!strstr(r.msg, "sim: injected failure"))
                    fail_msg("%s: message lacks the op's own: %s", label, r.msg);
                rl_expect_clean(x, 0, label);
                if (call < 3 || call == GP_SIM_RL_LAYER_READY) {
                    char want[64];
                    snprintf(want, sizeof want, "%s of layer %d (buffer %d) failed", names[call], k - 1,
                             (k - 1) % nb);
                    if (!strstr(r.msg, want))
                        fail_msg("%s: message lacks '%s': %s", label, want, r.msg);
                }
                int n = 0;
                const gp_sim_reload_rec *log = gp_sim_reload_log(x, &n);
                assert_true(n <= n_ref);
                for (int i = 0; i < n; i++)
                    if (log[i].stage != ref[i].stage || log[i].layer != ref[i].layer)
                        fail_msg("%s: op %d is %s of layer %d, the schedule's is %s of layer %d", label, i,
                                 gp_kv_reload_stage_name(log[i].stage), log[i].layer,
                                 gp_kv_reload_stage_name(ref[i].stage), ref[i].layer);
                if (call < 3) { /* the failing op is the schedule's next, and is not in the log */
                    assert_true(n < n_ref);
                    assert_int_equal(ref[n].stage, call);
                    assert_int_equal(ref[n].layer, k - 1);
                }
                int cnt[3] = {0, 0, 0};
                for (int i = 0; i < n; i++)
                    cnt[log[i].stage]++;
                assert_int_equal(r.st.loads, cnt[0]);
                assert_int_equal(r.st.processes, cnt[1]);
                assert_int_equal(r.st.writes, cnt[2]);
                assert_int_equal(r.st.layers_written, cnt[2]);
                assert_true(r.done_t < 0); /* done is never recorded after a failure */
                gp_sim_reload_destroy(x);
            }
        }
    }
}

/* Without layer_ready the schedule is the same, and nothing is announced. */
static void test_no_layer_ready(void **state)
{
    (void)state;
    gp_kv_reload_ops ops = *gp_sim_reload_ops();
    ops.layer_ready = NULL;
    rl_case c = {5, 2, {1, 2, 1}, 1, 0};
    rl_result r;
    gp_sim_reload *x = rl_run(&c, &ops, GP_SIM_RL_LOAD, 0, &r);
    assert_int_equal(r.status, GP_OK);
    rl_expect_clean(x, 0, "no layer_ready");
    assert_int_equal(r.st.writes, 5);
    assert_int_equal(r.st.ready_calls, 0);
    assert_int_equal(gp_sim_reload_calls(x, GP_SIM_RL_LAYER_READY), 0);
    gp_sim_reload_destroy(x);
}

static void test_bad_params(void **state)
{
    (void)state;
    gp_kv_reload_stats st;
    memset(&st, 0xff, sizeof st);
    GP_CHECK_FAIL(gp_kv_reload_run(NULL, &st), GP_ERR_INVALID_ARG, "params is NULL");
    assert_int_equal(st.loads, 0);

    gp_kv_reload_params p = gp_kv_reload_default_params();
    assert_int_equal(p.n_buffers, 2);
    p.ops = gp_sim_reload_ops();
    p.n_layers = 0;
    GP_CHECK_FAIL(gp_kv_reload_run(&p, NULL), GP_ERR_INVALID_ARG, "n_layers 0, need at least 1");
    p.n_layers = 4;
    p.n_buffers = 1;
    GP_CHECK_FAIL(gp_kv_reload_run(&p, NULL), GP_ERR_INVALID_ARG, "n_buffers 1, allowed 2..16");
    p.n_buffers = GP_KV_RELOAD_MAX_BUFFERS + 1;
    GP_CHECK_FAIL(gp_kv_reload_run(&p, NULL), GP_ERR_INVALID_ARG, "n_buffers 17, allowed 2..16");
    p.n_buffers = 2;
    p.ops = NULL;
    GP_CHECK_FAIL(gp_kv_reload_run(&p, NULL), GP_ERR_INVALID_ARG, "ops is NULL");

    static const char *const names[] = {"load", "process", "write", "record", "wait", "marker_create",
                                        "marker_destroy"};
    for (int i = 0; i < 7; i++) {
        gp_kv_reload_ops ops = *gp_sim_reload_ops();
        switch (i) {
        case 0: ops.load = NULL; break;
        case 1: ops.process = NULL; break;
        case 2: ops.write = NULL; break;
        case 3: ops.record = NULL; break;
        case 4: ops.wait = NULL; break;
        case 5: ops.marker_create = NULL; break;
        default: ops.marker_destroy = NULL; break;
        }
        p.ops = &ops;
        char want[64];
        snprintf(want, sizeof want, "op %s is NULL", names[i]);
        GP_CHECK_FAIL(gp_kv_reload_run(&p, NULL), GP_ERR_INVALID_ARG, want);
    }
    assert_string_equal(gp_kv_reload_stage_name(GP_KV_RELOAD_WRITE), "write");
    assert_string_equal(gp_kv_reload_stage_name((gp_kv_reload_stage)7), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orderings),    cmocka_unit_test(test_makespan),
        cmocka_unit_test(test_failures),     cmocka_unit_test(test_no_layer_ready),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
