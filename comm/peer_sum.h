/* The one-shot all-reduce kernel over peer memory (peer_sum.cu), and its
 * CPU reference: what every rank computes from the ranks' rows. */
#ifndef GP_PEER_SUM_H
#define GP_PEER_SUM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GP_PEER_MAX_RANKS 8
#define GP_PEER_BLOCKS 64 /* every call's grid: see peer_sum.cu */
/* Bytes of the flags at the start of each rank's region: [rank][block]. */
#define GP_PEER_FLAG_BYTES (GP_PEER_MAX_RANKS * GP_PEER_BLOCKS * sizeof(unsigned))

typedef struct gp_peer_sum_args {
    float *data[GP_PEER_MAX_RANKS];     /* each rank's two slots of slot_floats, mapped here */
    unsigned *flags[GP_PEER_MAX_RANKS]; /* each rank's flags [rank][block], mapped here */
    unsigned *counter;                  /* this rank's calls so far, per block (device) */
    const volatile int *abort;          /* nonzero: the group failed, stop waiting (mapped host) */
    size_t slot_floats;
    int rank, n_ranks;
} gp_peer_sum_args;

/* rows[0..n) := the sum over ranks r = 0..n_ranks-1, in that order, of each
 * rank's rows, on stream (cudaStream_t). n * 4 <= slot_floats * 4. Returns
 * the launch's cudaError_t as an int. */
int gp_peer_sum_launch(const gp_peer_sum_args *a, float *rows, size_t n, void *stream);
/* The reference: out[i] = the sum of ranks[r][i] for r in order. */
void gp_peer_sum_ref(const float *const *ranks, int n_ranks, size_t n, float *out);

#ifdef __cplusplus
}
#endif

#endif
