/* Shared by the tests that compare an engine with HF transformers: loads the
 * data made by tests/hf/make_reference.py and runs one backend (the CPU
 * reference, the CUDA engine) over it with a stated tolerance. */
#ifndef GP_TEST_HF_CASE_H
#define GP_TEST_HF_CASE_H

#include <stdbool.h>
#include <stdint.h>

#include "gp_pipeline.h"
#include "gp_test.h"

typedef struct hf_case {
    int n_seqs, steps, vocab;
    int32_t **prompts;  /* [n_seqs][prompt_len[s]] */
    int *prompt_len;    /* [n_seqs] */
    int32_t *tokens;    /* [n_seqs][steps] HF's greedy tokens */
    float *logits;      /* [n_seqs][steps][vocab]: logits[s][t] chose tokens[s][t] */
} hf_case;

void hf_case_load(const char *path, int vocab, hf_case *c);
void hf_case_free(hf_case *c);

/* A model under test: a step backend (gp_backend, block size 4) over the
 * checkpoint's host weights, stepped sequentially or through the pipeline. */
typedef struct hf_backend {
    const char *label;
    gp_backend_kind kind;
    bool bf16_activations; /* CPU: the engine's bf16 rounding points */
    bool use_graphs;       /* CUDA */
    bool pipelined;        /* decode steps through a gp_pipeline of 2 micro-batches */
} hf_backend;

/* Loads tests/data/<name> through the real checkpoint path, prefills each
 * prompt, decodes feeding HF's tokens, and fails the test when any logits
 * vector is off by more than tol (max|diff|/max|hf|) or any greedy token
 * differs from HF's; prints the worst error. */
void hf_run_dataset(const char *name, double tol, const hf_backend *be);

/* The general form: be against ref's logits and greedy tokens (ref NULL: HF's),
 * both run over the same prompts and fed HF's tokens. exact_tokens false only
 * reports greedy mismatches (with the reference's own top-2 margin). */
void hf_check(const char *name, double tol, const hf_backend *be, const hf_backend *ref,
              bool exact_tokens);

/* The CPU reference, pure float32 and in bf16-activation mode. */
extern const hf_backend hf_cpu_backend, hf_cpu_bf16_backend;

#endif
