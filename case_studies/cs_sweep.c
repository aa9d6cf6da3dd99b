/* The order of a run's configurations, when the run stops early (a signal, a
 * device fault) and how it ends: reports with the rows that finished and the
 * exit status. No GPU here: the program passes its CUDA runner, tests a fake. */
#include "cs_impl.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static bool plan_has_rows(const gp_cs_sweep_params *p, int i)
{
    return p->plans[i].attn_sms > 0 && !(p->no_rows && p->no_rows[i]);
}

int gp_cs_sweep_count(const gp_cs_sweep_params *p)
{
    if (!p || !p->o || (!p->plans && p->n_plans > 0))
        return 0;
    int splits = 0;
    for (int i = 0; i < p->n_plans; i++)
        splits += plan_has_rows(p, i);
    int per = 1 + splits * p->o->n_micro * p->o->n_depths * p->o->n_placements + (p->extra ? 1 : 0);
    return p->o->n_workloads * per;
}

static void add_note(gp_cs_meta *m, const char *text)
{
    size_t len = strlen(m->notes);
    snprintf(m->notes + len, sizeof m->notes - len, "%s%s", len ? " " : "", text);
}

static const char *signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

/* Why the next row must not start: a signal, else none. */
static bool stop_for_signal(gp_cs_sweep_result *res)
{
    int sig = gp_cs_signal_pending();
    if (!sig)
        return false;
    res->stop = GP_CS_STOP_SIGNAL;
    res->signal = sig;
    return true;
}

/* After a row: a device fault ends the run (nothing more can be asked of the
 * context); every other failure is the row's own. */
static bool stop_for_fault(gp_cs_sweep_result *res, gp_status st, const gp_cs_row *r)
{
    if (st != GP_ERR_DEVICE_FAULT)
        return false;
    res->stop = GP_CS_STOP_DEVICE_FAULT;
    snprintf(res->why, sizeof res->why, "%s", r->error[0] ? r->error : gp_status_str(st));
    return true;
}

/* The row about to run on p->progress: "[k/n] what: done of n rows (..),
 * rate, elapsed, ~left" (gp_progress_format of the rows finished), redrawn
 * in place on a terminal, one line per row otherwise (a log keeps them). */
static void row_progress(const gp_cs_sweep_params *p, bool tty, const char *what, int finished, int planned,
                         double t0)
{
    gp_progress ev = {.event = GP_PROGRESS_UPDATE, .what = what, .unit = "rows", .done = (uint64_t)finished,
                      .total = (uint64_t)planned, .elapsed_s = gp_now_s() - t0};
    char line[512];
    gp_progress_format(&ev, line, sizeof line);
    fprintf(p->progress, tty ? "\r%s\033[K" : "%s\n", line);
    fflush(p->progress);
}

static void speedups(gp_cs_row *rows, int first, int end)
{
    double seq_ms = end > first && rows[first].seq && rows[first].ok ? rows[first].ms_median : 0;
    for (int i = first; i < end; i++)
        rows[i].speedup_vs_seq = rows[i].ok && seq_ms > 0 ? seq_ms / rows[i].ms_median : 0;
}

gp_status gp_cs_sweep_run(const gp_cs_sweep_params *p, const gp_cs_runner *rn, gp_cs_row *rows, int cap,
                          gp_cs_sweep_result *res)
{
    if (!p || !p->o || !rn || !rn->open || !rn->close || !rn->run || !res || (!p->plans && p->n_plans > 0) ||
        (p->extra && !rn->extra))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cs_sweep_run: params, options, a runner with open, close and run "
                "(and extra when params.extra), and res are required");
    memset(res, 0, sizeof *res);
    res->planned = gp_cs_sweep_count(p);
    if (!rows || cap < res->planned)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cs_sweep_run: room for %d rows, the sweep makes %d", rows ? cap : 0,
                res->planned);
    const gp_cs_options *o = p->o;
    int n = 0;
    const bool tty = p->progress && isatty(fileno(p->progress));
    const double t0 = gp_now_s();
    for (int wi = 0; wi < o->n_workloads && res->stop == GP_CS_STOP_NONE; wi++) {
        const gp_cs_workload *w = &o->workloads[wi];
        if (stop_for_signal(res))
            break;
        gp_status ost = rn->open(rn->ctx, wi);
        char open_why[512] = "";
        if (ost != GP_OK)
            snprintf(open_why, sizeof open_why, "workload %s: %s", w->label, gp_last_error());
        int first = n;
        /* plan 0 is seq: one row, no M, depth or placement; then every
         * split's rows, one per (M, depth, placement) in that order */
        for (int pi = 0; pi < p->n_plans && res->stop == GP_CS_STOP_NONE; pi++) {
            bool seq = pi == 0;
            if (!seq && !plan_has_rows(p, pi))
                continue;
            const int nd = o->n_depths, nq = o->n_placements;
            const int configs = seq ? 1 : o->n_micro * nd * nq;
            for (int k = 0; k < configs && res->stop == GP_CS_STOP_NONE; k++) {
                const int mi = k / (nd * nq), di = k / nq % nd, qi = k % nq;
                if (stop_for_signal(res))
                    break;
                gp_cs_row *r = &rows[n++];
                snprintf(r->workload, sizeof r->workload, "%s", w->label);
                r->B = w->B;
                r->C = w->C;
                r->seq = seq;
                if (!seq) {
                    r->split = (gp_split_info){ .a_req = p->plans[pi].attn_sms, .f_req = p->plans[pi].ffn_sms,
                                                .unit = "SMs" };
                    r->M = o->micro[mi];
                    r->depth = o->depths[di];
                    r->placement = o->placements[qi];
                }
                if (p->progress) {
                    char what[256];
                    if (seq)
                        snprintf(what, sizeof what, "[%d/%d] %s seq", n, res->planned, w->label);
                    else
                        snprintf(what, sizeof what, "[%d/%d] %s %d:%d %s M=%d depth %u", n, res->planned, w->label,
                                 r->split.a_req, r->split.f_req, gp_placement_name(r->placement), r->M, r->depth);
                    row_progress(p, tty, what, n - 1, res->planned, t0);
                }
                gp_status st;
                if (ost != GP_OK) {
                    r->ok = false;
                    snprintf(r->error, sizeof r->error, "%s", open_why);
                    st = ost;
                } else if (!seq && p->why && p->why[pi][0]) {
                    r->ok = false;
                    snprintf(r->error, sizeof r->error, "split %d:%d: %s", p->plans[pi].attn_sms,
                             p->plans[pi].ffn_sms, p->why[pi]);
                    st = GP_ERR_UNSUPPORTED;
                } else {
                    st = rn->run(rn->ctx, wi, pi, seq ? 1 : o->micro[mi], seq ? 0 : o->depths[di], r);
                }
                if (stop_for_fault(res, st, r))
                    break;
            }
        }
        if (p->extra && res->stop == GP_CS_STOP_NONE && !stop_for_signal(res)) {
            bool made = false;
            gp_status st = rn->extra(rn->ctx, wi, ost == GP_OK, &rows[n], &made);
            if (made) {
                n++;
                stop_for_fault(res, st, &rows[n - 1]);
            }
        }
        /* After a fault the context is unusable: nothing more is asked of it. */
        if (ost == GP_OK && res->stop != GP_CS_STOP_DEVICE_FAULT)
            rn->close(rn->ctx, wi);
        speedups(rows, first, n);
    }
    /* A signal during the last row: every row finished, but the user asked
     * to stop and the exit status says so. */
    if (res->stop == GP_CS_STOP_NONE)
        stop_for_signal(res);
    if (p->progress) {
        gp_progress ev = {.event = GP_PROGRESS_END, .what = "case study", .unit = "rows", .done = (uint64_t)n,
                          .total = (uint64_t)res->planned, .elapsed_s = gp_now_s() - t0};
        char line[512];
        fprintf(p->progress, "%s%s\n", tty ? "\r\033[K" : "", gp_progress_format(&ev, line, sizeof line));
        fflush(p->progress);
    }
    res->n_rows = n;
    return GP_OK;
}

int gp_cs_finish(const gp_cs_options *o, gp_cs_meta *m, const gp_cs_row *rows, const gp_cs_sweep_result *res,
                 int extra_failures, FILE *out, FILE *err)
{
    static const gp_cs_sweep_result done;
    res = res ? res : &done;
    err = err ? err : stderr;
    int n = rows ? res->n_rows : 0;
    char text[800] = "";
    if (res->stop == GP_CS_STOP_SIGNAL && n < res->planned)
        snprintf(text, sizeof text, "Interrupted by %s: %d of %d configurations finished; the rest were not run.",
                 signal_name(res->signal), n, res->planned);
    else if (res->stop == GP_CS_STOP_SIGNAL)
        snprintf(text, sizeof text, "Interrupted by %s during the last configuration: all %d finished.",
                 signal_name(res->signal), n);
    else if (res->stop == GP_CS_STOP_DEVICE_FAULT)
        snprintf(text, sizeof text, "Stopped by a device fault (the GPU context is unusable) after %d of %d "
                 "configurations; the rest were not run.", n, res->planned);
    if (m && text[0]) {
        snprintf(m->stopped, sizeof m->stopped, "%s",
                 res->stop == GP_CS_STOP_SIGNAL ? signal_name(res->signal) : "device fault");
        add_note(m, text);
    }
    if (out)
        gp_cs_write_markdown(out, m, rows, n);
    int failed = extra_failures;
    for (int i = 0; i < n; i++)
        failed += !rows[i].ok;
    struct {
        const char *path;
        gp_status (*fn)(const char *, const gp_cs_meta *, const gp_cs_row *, int);
    } outs[] = { { o->json, gp_cs_write_json }, { o->csv, gp_cs_write_csv }, { o->trace, gp_cs_write_trace },
                 { o->svg, gp_cs_write_svg } };
    int written = 0;
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
        if (!outs[i].path[0])
            continue;
        if (outs[i].fn(outs[i].path, m, rows, n) != GP_OK) {
            fprintf(err, CS_PROG ": %s\n", gp_last_error());
            failed++;
        } else {
            written++;
        }
    }
    if (out)
        fflush(out);
    if (res->stop == GP_CS_STOP_SIGNAL) {
        fprintf(err, CS_PROG ": %s%s\n", text,
                written ? " The reports were written with the finished rows." : "");
        return 128 + res->signal;
    }
    if (res->stop == GP_CS_STOP_DEVICE_FAULT) {
        fprintf(err, CS_PROG ": device fault: %s\n" CS_PROG ": %s%s\n", res->why, text,
                written ? " The reports were written with the finished rows." : "");
        return 1;
    }
    if (failed)
        fprintf(err, CS_PROG ": %d of %d configurations or outputs failed (see the error rows)\n", failed, n);
    return failed ? 1 : 0;
}
