/* One process per rank on this host, forked before any CUDA call (a forked
 * CUDA context is unusable): the caller goes on as rank 0, and waits for
 * the others' exits. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gp_comm.h"

gp_status gp_ranks_fork(int n, int *rank, int *pids)
{
    if (n < 1 || n > GP_COMM_MAX_RANKS || !rank || !pids)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_ranks_fork: %d ranks (allowed 1..%d), rank %s, pids %s", n,
                GP_COMM_MAX_RANKS, rank ? "set" : "NULL", pids ? "set" : "NULL");
    *rank = 0;
    pids[0] = (int)getpid();
    for (int r = 1; r < n; r++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            *rank = r;
            return GP_OK;
        }
        if (pid < 0) {
            for (int q = 1; q < r; q++) /* those started end: the group they wait for will not form */
                kill(pids[q], SIGTERM);
            int codes[GP_COMM_MAX_RANKS];
            gp_ranks_wait(r, pids, codes);
            GP_FAIL(GP_ERR_NO_MEMORY, "gp_ranks_fork: could start %d of %d rank processes", r, n);
        }
        pids[r] = (int)pid;
    }
    return GP_OK;
}

void gp_ranks_wait(int n, const int *pids, int *codes)
{
    codes[0] = 0;
    for (int r = 1; r < n; r++) {
        int st = 0;
        codes[r] = waitpid((pid_t)pids[r], &st, 0) == (pid_t)pids[r]
                       ? (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0))
                       : -1;
    }
}

gp_status gp_ranks_run(int n, int (*fn)(int rank, void *arg), void *arg, int *codes)
{
    if (!fn || !codes)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_ranks_run: fn %s, codes %s", fn ? "set" : "NULL", codes ? "set" : "NULL");
    int rank = 0, pids[GP_COMM_MAX_RANKS];
    GP_TRY(gp_ranks_fork(n, &rank, pids));
    int rc = fn(rank, arg);
    if (rank != 0) {
        fflush(NULL);
        _exit(rc & 0xff);
    }
    gp_ranks_wait(n, pids, codes);
    codes[0] = rc & 0xff;
    return GP_OK;
}
