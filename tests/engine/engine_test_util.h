/* Helpers of the whole-engine tests that need the engine library (the
 * kernel tests' helpers, which do not, are gpu_test_util.h). */
#ifndef GP_ENGINE_TEST_UTIL_H
#define GP_ENGINE_TEST_UTIL_H

#include <stdbool.h>

#include "gp_engine.h"
#include "gp_sparse.h"
#include "gp_weights.h"

/* A model for the whole-engine tests: spec a preset (synthetic bf16 host
 * weights, seed 3) or a checkpoint directory, its host weights into *hw
 * (free with gp_host_weights_free) and a bf16 device copy into *dw. */
void gt_load_model(const char *spec, gp_host_weights *hw, gp_device_weights **dw);
/* An engine over dw for max_batch sequences of max_context tokens, with
 * CUDA graphs or eager; fails the test if it cannot be made. With sparsity
 * it masks on every step (sparse_always), as the CPU reference and the
 * tests that compare sparse engines with one another expect; the per-step
 * choice has its own test (engine_sparse). */
gp_engine *gt_engine(gp_device_weights *dw, int max_batch, int max_context, bool graphs);

/* The sparsity tests' calibration of hw at target S on the CPU reference:
 * 4 sequences of 24 fixed ids (spread over the vocabulary); fails the test. */
void gt_calibrate(const gp_host_weights *hw, double target, gp_sparsity *sp);

#endif
