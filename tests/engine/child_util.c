/* Forked children with a deadline for the fault tests (see child_util.h). */
#define _GNU_SOURCE
#include "child_util.h"
#include "gp_common.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void gt_report_add(gt_report *r, const char *fmt, ...)
{
    size_t used = strlen(r->text);
    if (used + 1 >= sizeof r->text)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->text + used, sizeof r->text - used, fmt, ap);
    va_end(ap);
    used = strlen(r->text);
    if (used + 1 < sizeof r->text) {
        r->text[used] = '\n';
        r->text[used + 1] = '\0';
    }
}

static void child_main(int fd, gt_child_fn fn, void *arg, const char *const *env)
{
    unsetenv("GP_FAULT_DEVICE_ALLOC");
    unsetenv("GP_FAULT_TRAP");
    for (int i = 0; env && env[i]; i++) {
        char kv[256];
        snprintf(kv, sizeof kv, "%s", env[i]);
        char *eq = strchr(kv, '=');
        if (eq) {
            *eq = '\0';
            setenv(kv, eq + 1, 1);
        }
    }
    static gt_report rep; /* static: too big for some thread stacks, and fork keeps one thread */
    memset(&rep, 0, sizeof rep);
    rep.code = fn(arg, &rep);
    const char *p = (const char *)&rep;
    size_t left = sizeof rep;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        p += n;
        left -= (size_t)n;
    }
    close(fd);
    /* _exit: no atexit handlers or stdio flushes of the parent's copies, and
     * no CUDA teardown that a dead context could stall */
    _exit(0);
}

void gt_child_run(gt_child_fn fn, void *arg, const char *const *env, double limit_s, gt_child *out)
{
    memset(out, 0, sizeof *out);
    out->rep.code = -1;
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(out->rep.text, sizeof out->rep.text, "pipe: %s\n", strerror(errno));
        return;
    }
    fflush(stdout);
    fflush(stderr);
    double t0 = gp_now_s();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(out->rep.text, sizeof out->rep.text, "fork: %s\n", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return;
    }
    if (pid == 0) {
        close(fds[0]);
        child_main(fds[1], fn, arg, env);
    }
    close(fds[1]);
    char *dst = (char *)&out->rep;
    size_t got = 0;
    double deadline = t0 + limit_s;
    while (got < sizeof out->rep) {
        double left = deadline - gp_now_s();
        if (left <= 0) {
            out->timed_out = 1;
            break;
        }
        struct pollfd pf = {.fd = fds[0], .events = POLLIN};
        int pr = poll(&pf, 1, (int)(left * 1000.0) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue; /* the deadline check above ends it */
        ssize_t n = read(fds[0], dst + got, sizeof out->rep - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* the child ended without a (whole) report */
        got += (size_t)n;
    }
    close(fds[0]);
    out->got_report = got == sizeof out->rep;
    if (!out->got_report)
        out->rep.code = -1;
    /* The report came (or the pipe closed): the child should be exiting.
     * Past the deadline it is killed, so a teardown that hangs fails too. */
    int status = 0;
    pid_t w = 0;
    while (!out->timed_out) {
        w = waitpid(pid, &status, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            break;
        if (gp_now_s() > deadline) {
            out->timed_out = 1;
            break;
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (out->timed_out) {
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    out->seconds = gp_now_s() - t0;
    if (WIFSIGNALED(status)) {
        out->signaled = 1;
        out->sig = WTERMSIG(status);
    } else if (WIFEXITED(status)) {
        out->exit_code = WEXITSTATUS(status);
    }
}
