/* Request send times of bench-serve: gamma-distributed gaps of mean
 * 1 / rate and shape burstiness (exponential, a Poisson process, at 1), as
 * vLLM draws them, from the seeded generator of the command-line tools. */
#include "gp_loadgen.h"

#include <math.h>

#include "gp_tools.h"

/* (0, 1]: log and pow need a nonzero argument. */
static double uniform_open0(gp_rng *r) { return 1.0 - gp_rng_uniform(r); }

static double normal(gp_rng *r)
{
    double u1 = uniform_open0(r), u2 = gp_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Marsaglia and Tsang's method for shape >= 1; below 1 the shape + 1 draw
 * times U^(1/shape), their boost. Scale 1. */
static double gamma_draw(gp_rng *r, double shape)
{
    if (shape < 1.0)
        return gamma_draw(r, shape + 1.0) * pow(uniform_open0(r), 1.0 / shape);
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = normal(r), v = 1.0 + c * x;
        if (v <= 0.0)
            continue;
        v = v * v * v;
        double u = uniform_open0(r);
        if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return d * v;
    }
}

gp_status gp_lg_arrivals(double rate, double burstiness, uint64_t seed, int n, double *t)
{
    if (!(rate > 0.0))
        GP_FAIL(GP_ERR_INVALID_ARG, "request rate %g; allowed: > 0 requests/s, or inf (all at once)", rate);
    if (!(burstiness > 0.0) || !isfinite(burstiness))
        GP_FAIL(GP_ERR_INVALID_ARG, "burstiness %g; allowed: a finite number > 0 (1: Poisson)", burstiness);
    if (n < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "%d requests; allowed: >= 0", n);
    gp_rng r;
    gp_rng_seed(&r, seed, 2);
    double theta = 1.0 / (rate * burstiness), at = 0.0;
    for (int i = 0; i < n; i++) {
        t[i] = at;
        if (isfinite(rate))
            at += gamma_draw(&r, burstiness) * theta;
    }
    return GP_OK;
}
