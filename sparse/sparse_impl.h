/* Private to sparse/'s C library (and its tests): the magnitude histogram a
 * calibration sets its thresholds from. */
#ifndef GP_SPARSE_IMPL_H
#define GP_SPARSE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "gp_sparse.h"

/* Log-spaced bins of |x| over [LO, HI): bin j holds [LO 10^(j/D), LO
 * 10^((j+1)/D)) with D = BINS / log10(HI/LO) = 512 bins a decade, each
 * 0.45% wide; values below LO count in bin 0, at or above HI in the last
 * bin, exact zeros apart. 64 KiB a histogram. */
#define GP_SPARSE_HIST_BINS 8192
#define GP_SPARSE_HIST_LO_LOG10 (-10)
#define GP_SPARSE_HIST_HI_LOG10 6
#define GP_SPARSE_HIST_PER_DECADE (GP_SPARSE_HIST_BINS / (GP_SPARSE_HIST_HI_LOG10 - GP_SPARSE_HIST_LO_LOG10))

typedef struct gp_sparse_hist {
    uint64_t zero;                      /* exact zeros (+0 and -0) */
    uint64_t bins[GP_SPARSE_HIST_BINS]; /* nonzero finite values by magnitude */
    uint64_t n;                         /* finite values counted: zero + the bins */
    uint64_t nonfinite;                 /* NaN and inf, not counted in n */
} gp_sparse_hist;

/* The bin of a finite magnitude a > 0. */
int gp_sparse_hist_bin(float a);
/* Lower edge of bin j (0..BINS; BINS gives the top edge). */
double gp_sparse_hist_edge(int j);
void gp_sparse_hist_add(gp_sparse_hist *h, const float *x, size_t n);
/* The threshold t that drops a share S in [0, 1) of the counted values
 * (|x| <= t): 0 when the zeros alone reach it, else interpolated
 * log-linearly inside the bin where the cumulative count passes S n.
 * 0 for an empty histogram. */
float gp_sparse_hist_threshold(const gp_sparse_hist *h, double S);


#endif
