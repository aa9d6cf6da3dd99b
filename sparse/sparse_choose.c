/* The per-step choice between a projection's sparse kernel and its dense
 * GEMM: the crossover density from the two kernels' timings, and the rule
 * that applies it to the union density the last sparse step measured. */
#include <math.h>

#include "gp_sparse.h"

float gp_sparse_crossover(float dense_ms, float full_ms, float part_ms, float part_density)
{
    if (!(dense_ms > 0) || !(full_ms > 0) || !(part_ms > 0) || !(part_density > 0 && part_density < 1) ||
        !isfinite(dense_ms) || !isfinite(full_ms) || !isfinite(part_ms))
        return 1.0f; /* no usable timing: keep the sparse kernel, the calibration's own choice */
    if (full_ms <= dense_ms)
        return 1.0f; /* sparse wins even with every input active */
    /* the sparse kernel's time as a line in the density: a fixed part (launch,
       mask evaluation, the split sum) and the weight rows it streams */
    const float slope = (full_ms - part_ms) / (1.0f - part_density);
    if (!(slope > 0))
        return 0.0f; /* no gain from fewer inputs, and slower than dense at full density */
    const float fixed = full_ms - slope;
    const float d = (dense_ms - fixed) / slope;
    return d < 0 ? 0.0f : d > 1 ? 1.0f : d;
}

bool gp_sparse_pick(float crossover, float density, int dense_steps, int probe)
{
    if (density < 0)
        return true; /* not measured yet at this batch size: the sparse kernel measures it */
    if (density < crossover)
        return true;
    return dense_steps >= probe; /* a re-measurement, the batch having changed since */
}
