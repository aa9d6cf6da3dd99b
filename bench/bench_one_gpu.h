/* The one-GPU reference of the multi-GPU benchmarks (gp_bench_tp,
 * gp_bench_afd): the whole model on the current GPU, where it fits. */
#ifndef GP_BENCH_ONE_GPU_H
#define GP_BENCH_ONE_GPU_H

#include "gp_model.h"
#include "gp_weights.h"

/* The whole model's synthetic bf16 weights on the current GPU when they fit
 * beside 4 GiB (a KV cache and activations); else GP_OK with *out NULL: no
 * one-GPU row. */
gp_status gp_bench_whole_weights(const gp_config *cfg, gp_device_weights **out);

#endif
