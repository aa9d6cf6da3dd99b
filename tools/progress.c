/* Progress of the library's long work on stderr: a line redrawn in place
 * on a terminal, one line at the start and one at the end of each phase
 * otherwise (a log or a pipe gets no carriage returns). */
#include <stdio.h>
#include <unistd.h>

#include "gp_tools.h"

void gp_cli_progress_init(gp_cli_progress *p, FILE *f, const char *prog)
{
    p->f = f;
    p->tty = f && isatty(fileno(f));
    p->prog = prog;
}

static void cli_progress_fn(void *ctx, const gp_progress *ev)
{
    gp_cli_progress *p = ctx;
    if (!p || !p->f || !ev)
        return;
    char line[512];
    gp_progress_format(ev, line, sizeof line);
    if (p->tty) {
        /* \033[K clears what a longer earlier line left */
        fprintf(p->f, "\r%s: %s\033[K%s", p->prog, line, ev->event == GP_PROGRESS_END ? "\n" : "");
    } else if (ev->event != GP_PROGRESS_UPDATE) {
        fprintf(p->f, "%s: %s\n", p->prog, line);
    }
    fflush(p->f);
}

gp_progress_cb gp_cli_progress_cb(gp_cli_progress *p)
{
    return (gp_progress_cb){.fn = cli_progress_fn, .ctx = p};
}
