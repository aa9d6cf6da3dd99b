/* One process per rank on this host: forked before any CUDA call (a forked
 * CUDA context is unusable), each running the rank's function and exiting
 * with its result; the caller waits for all. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gp_comm.h"

gp_status gp_ranks_run(int n, int (*fn)(int rank, void *arg), void *arg, int *codes)
{
    if (n < 1 || n > GP_COMM_MAX_RANKS || !fn || !codes)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_ranks_run: %d ranks (allowed 1..%d), fn %s, codes %s", n,
                GP_COMM_MAX_RANKS, fn ? "set" : "NULL", codes ? "set" : "NULL");
    pid_t pid[GP_COMM_MAX_RANKS];
    int started = 0;
    for (int r = 0; r < n; r++) {
        fflush(NULL);
        pid[r] = fork();
        if (pid[r] == 0) {
            int rc = fn(r, arg);
            fflush(NULL);
            _exit(rc & 0xff);
        }
        if (pid[r] < 0)
            break;
        started++;
    }
    for (int r = 0; r < started; r++) {
        int st = 0;
        codes[r] = waitpid(pid[r], &st, 0) == pid[r]
                       ? (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0))
                       : -1;
    }
    if (started < n)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_ranks_run: could start %d of %d rank processes", started, n);
    return GP_OK;
}
