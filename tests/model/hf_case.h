/* Shared by the tests that compare an engine with HF transformers: loads the
 * data made by tests/hf/make_reference.py and runs one backend (the CPU
 * reference, the CUDA engine) over it with a stated tolerance. */
#ifndef GP_TEST_HF_CASE_H
#define GP_TEST_HF_CASE_H

#include <stdbool.h>
#include <stdint.h>

#include "gp_model.h"
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

/* A model under test: open it over host weights for n_seqs sequences of up
 * to ctx tokens, prefill one sequence (last logits [vocab]), decode a batch
 * (logits [n][vocab]), close. */
typedef struct hf_backend {
    const char *label;
    void *arg;
    gp_status (*open)(void *arg, const gp_host_weights *w, int n_seqs, int ctx, void **model);
    gp_status (*prefill)(void *model, int seq, int n, const int32_t *prompt, float *logits);
    gp_status (*step)(void *model, int n, const int *ids, const int32_t *feed, float *logits);
    void (*close)(void *model);
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

/* The CPU reference as a backend (block size 4); arg non-NULL turns on its
 * bf16-activation mode (gp_cpu_model_set_bf16_activations). */
extern const hf_backend hf_cpu_backend, hf_cpu_bf16_backend;

#endif
