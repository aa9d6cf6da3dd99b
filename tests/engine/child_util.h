/* Runs a piece of a test in a forked child with a time limit: fault tests
 * need a fresh process each (a sticky error or an injected failure cannot be
 * undone, and the fault variables are read once), and a hang must become a
 * test failure instead of a stuck CTest. The parent must not have used CUDA:
 * a CUDA context does not survive fork. */
#ifndef GP_TEST_CHILD_UTIL_H
#define GP_TEST_CHILD_UTIL_H

#include <stddef.h>

/* What the child sends back: its verdict and the lines it wrote. */
typedef struct gt_report {
    int code;        /* 0 pass; 77 skip (no GPU); others are the test's own */
    char text[6144]; /* for the parent to print */
} gt_report;

typedef struct gt_child {
    int timed_out;   /* killed (SIGKILL) after the time limit */
    int signaled;    /* ended by a signal (signal number in sig), not by exit */
    int sig;
    int exit_code;   /* when it exited */
    int got_report;  /* the report arrived complete */
    double seconds;  /* wall time from fork to reap */
    gt_report rep;
} gt_child;

typedef int (*gt_child_fn)(void *arg, gt_report *r);

/* Forks; the child unsets GP_FAULT_DEVICE_ALLOC and GP_FAULT_TRAP, sets each
 * "NAME=VALUE" of env (NULL-terminated, may be NULL), runs fn, sends the
 * report and _exits. The parent waits at most limit_s seconds. */
void gt_child_run(gt_child_fn fn, void *arg, const char *const *env, double limit_s, gt_child *out);

/* Appends a formatted line to r->text (truncated when full). */
void gt_report_add(gt_report *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* In a child function (its report is r): a failed check adds the condition
 * and the formatted message to the report and returns verdict 1. */
#define GT_CK(cond, ...)                                                                         \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            gt_report_add(r, "%s:%d: check failed: %s", __FILE__, __LINE__, #cond);              \
            gt_report_add(r, __VA_ARGS__);                                                       \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

#endif
