/* SIGINT/SIGTERM for the case study: the handler only records the signal, so
 * the sweep can finish the row in progress and write the rows it has. */
#include "cs_impl.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

/* Written by the handler, read by the sweep between rows. */
static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
    g_signal = sig;
}

gp_status gp_cs_signals_install(void)
{
    static const int sigs[] = { SIGINT, SIGTERM };
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* SA_RESTART: a read or write interrupted in another thread (the
     * pipeline's, the driver's) goes on instead of failing with EINTR. */
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (sigaction(sigs[i], &sa, NULL) != 0)
            GP_FAIL(GP_ERR_STATE, "cannot install the %s handler: %s", strsignal(sigs[i]), strerror(errno));
    return GP_OK;
}

int gp_cs_signal_pending(void)
{
    return (int)g_signal;
}

void gp_cs_signal_clear(void)
{
    g_signal = 0;
}
