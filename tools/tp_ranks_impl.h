/* The processes of a tensor-parallel run of greenpipe generate or serve:
 * the GPUs counted before any CUDA call, one process per rank forked, the
 * other ranks' output silenced and their messages kept in a log that rank
 * 0 shows when one fails. */
#ifndef GP_TP_RANKS_IMPL_H
#define GP_TP_RANKS_IMPL_H

#include "gp_model.h"

typedef struct gp_tp_ranks {
    int tp, rank; /* rank: this process's, 0 in the caller */
    int pids[GP_TP_MAX];
    char spec[96]; /* the rendezvous: "file:/tmp/greenpipe-tp.PID" */
} gp_tp_ranks;

/* tp GPUs for cfg: its shares checked (gp_tp_check), the GPUs counted in a
 * child process, the ranks forked; a rank other than 0 goes on from here
 * with stdout on /dev/null and stderr in its log. prog names the program in
 * messages. 0 to go on (in every rank), else the exit code (2: bad --tp or
 * too few GPUs, 1: the fork failed) after a message on stderr. */
int gp_tp_ranks_start(const gp_config *cfg, int tp, const char *prog, gp_tp_ranks *out);
/* Rank 0: waits for the other ranks and prints the log of each that failed,
 * its lines prefixed with its rank; removes the logs and the rendezvous
 * file. Returns code, or 1 when code is 0 and a rank failed. */
int gp_tp_ranks_finish(gp_tp_ranks *r, const char *prog, int code);
/* Rank 0, failing before the ranks could meet: ends the other ranks
 * (SIGKILL: they wait in the rendezvous, or ignore the signals rank 0 takes)
 * and removes their logs and the rendezvous file. */
void gp_tp_ranks_abort(gp_tp_ranks *r);

#endif
