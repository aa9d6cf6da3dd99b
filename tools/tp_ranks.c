/* The processes of a tensor-parallel run (greenpipe generate --tp, serve
 * --tp): counted, forked, silenced but for rank 0, and waited for. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "gp_comm.h"
#include "tp_ranks_impl.h"

/* The GPUs of this host, counted in a child process: the ranks fork after,
 * and a process that made a CUDA call cannot fork one that works. -1 when
 * the probe could not run. */
static int probe_gpus(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? (n > 250 ? 250 : n) : 0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* Where rank r of the run at rendezvous spec ("file:PATH") writes its messages. */
static void log_path(const char *spec, int r, char *out, size_t n)
{
    snprintf(out, n, "%s.rank%d.log", spec + 5, r);
}

int gp_tp_ranks_start(const gp_config *cfg, int tp, const char *prog, gp_tp_ranks *out)
{
    memset(out, 0, sizeof *out);
    out->tp = tp;
    if (tp <= 1)
        return 0;
    if (gp_tp_check(cfg, tp) != GP_OK) {
        fprintf(stderr, "%s: %s\n", prog, gp_last_error());
        return 2;
    }
    const int gpus = probe_gpus();
    if (gpus < tp) {
        fprintf(stderr, "%s: --tp %d needs %d GPUs; this host has %d%s\n", prog, tp, tp, gpus < 0 ? 0 : gpus,
                gpus < 0 ? " (the probe could not run)" : "");
        return 2;
    }
    snprintf(out->spec, sizeof out->spec, "file:/tmp/greenpipe-tp.%d", (int)getpid());
    if (gp_ranks_fork(tp, &out->rank, out->pids) != GP_OK) {
        fprintf(stderr, "%s: tensor parallel ranks: %s\n", prog, gp_last_error());
        return 1;
    }
    /* the other ranks' output is rank 0's; their messages go to a log rank 0 shows if they fail */
    char log[128];
    log_path(out->spec, out->rank, log, sizeof log);
    if (out->rank > 0 && (!freopen("/dev/null", "w", stdout) || !freopen(log, "w", stderr)))
        _exit(1);
    return 0;
}

void gp_tp_ranks_abort(gp_tp_ranks *r)
{
    if (r->tp <= 1 || r->rank != 0)
        return;
    for (int k = 1; k < r->tp; k++)
        kill(r->pids[k], SIGKILL);
    int codes[GP_TP_MAX];
    gp_ranks_wait(r->tp, r->pids, codes);
    for (int k = 1; k < r->tp; k++) {
        char log[128];
        log_path(r->spec, k, log, sizeof log);
        unlink(log);
    }
    unlink(r->spec + 5);
    r->tp = 1; /* nothing left to finish */
}

int gp_tp_ranks_finish(gp_tp_ranks *r, const char *prog, int code)
{
    if (r->tp <= 1 || r->rank != 0)
        return code;
    int codes[GP_TP_MAX];
    gp_ranks_wait(r->tp, r->pids, codes);
    for (int k = 1; k < r->tp; k++) {
        char log[128];
        log_path(r->spec, k, log, sizeof log);
        if (codes[k]) {
            fprintf(stderr, "%s: tensor parallel rank %d (GPU %d) exited with status %d; its messages:\n", prog, k, k,
                    codes[k]);
            FILE *f = fopen(log, "r");
            char line[1024];
            while (f && fgets(line, sizeof line, f))
                fprintf(stderr, "  rank %d: %s", k, line);
            if (f)
                fclose(f);
            code = code ? code : 1;
        }
        unlink(log);
    }
    unlink(r->spec + 5);
    return code;
}
