/* The whole CUDA engine: against HF transformers' logits and greedy tokens on
 * the committed checkpoints, against the CPU reference on a mixed-length
 * batch, and graph replay against eager launch. Skips without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "hf_case.h"

#include "engine_tol.h"

static const hf_backend graph_be = {.label = "cuda engine, graphs", .kind = GP_BACKEND_CUDA, .use_graphs = true};
static const hf_backend eager_be = {.label = "cuda engine, eager", .kind = GP_BACKEND_CUDA};
static const hf_backend pipe_be = {.label = "cuda engine, pipelined", .kind = GP_BACKEND_CUDA, .use_graphs = true,
                                   .pipelined = true};

/* Each prompt is prefilled (tensor-core prefill attention) before the decode
 * steps: PREFILL_TOL against the reference, greedy flips reported. */
static void test_hf_tiny_graph(void **s) { hf_check("tiny", PREFILL_TOL, &graph_be, &hf_cpu_bf16_backend, false); }
static void test_hf_tiny_eager(void **s) { hf_check("tiny", PREFILL_TOL, &eager_be, &hf_cpu_bf16_backend, false); }
static void test_hf_gqa_graph(void **s)
{
    hf_check("small-gqa", PREFILL_TOL, &graph_be, &hf_cpu_bf16_backend, false);
}
static void test_hf_gqa_eager(void **s)
{
    hf_check("small-gqa", PREFILL_TOL, &eager_be, &hf_cpu_bf16_backend, false);
}
static void test_hf_gqa_pipelined(void **s)
{
    hf_check("small-gqa", PREFILL_TOL, &pipe_be, &hf_cpu_bf16_backend, false);
}
static void test_vs_hf_tiny(void **s) { hf_check("tiny", HF_BF16_DRIFT_TOL, &graph_be, NULL, false); }
static void test_vs_hf_gqa(void **s) { hf_check("small-gqa", HF_BF16_DRIFT_TOL, &graph_be, NULL, false); }

/* Synthetic tiny model, 5 sequences with prompt lengths around the block
 * size (block 3: lengths 1, 2, 3, 4, 7) fed token by token, then decoded
 * together for 8 steps: the engine's decode steps in graph mode against the
 * CPU reference, and graph against eager bitwise. */
static void test_batch_vs_cpu(void **state)
{
    gp_config cfg;
    GP_CHECK_OK(gp_config_preset("tiny", &cfg));
    gp_host_weights w;
    GP_CHECK_OK(gp_host_weights_alloc(&cfg, GP_DTYPE_BF16, &w));
    GP_CHECK_OK(gp_synth_fill_host(&w, 1234));
    enum { NS = 5, STEPS = 8, CTX = 16 };
    const int plen[NS] = {1, 2, 3, 4, 7};
    int32_t prompt[NS][7];
    srand(99);
    for (int s = 0; s < NS; s++)
        for (int i = 0; i < plen[s]; i++)
            prompt[s][i] = rand() % cfg.vocab;
    const int V = cfg.vocab;
    float *ref = malloc(sizeof(float) * NS * V), *got = malloc(sizeof(float) * NS * V);
    float *eager = malloc(sizeof(float) * NS * V);
    gp_cpu_model *cpu;
    GP_CHECK_OK(gp_cpu_model_create(&w, NS, CTX, 3, &cpu));
    gp_cpu_model_set_act_dtype(cpu, GP_DTYPE_BF16); /* the engine's rounding points */
    gp_backend_params bp = gp_backend_default_params(GP_BACKEND_CUDA);
    bp.n_seqs = NS;
    bp.max_context = CTX;
    bp.block_size = 3;
    gp_backend *gb, *eb;
    GP_CHECK_OK(gp_backend_open_weights(&w, &bp, &gb));
    bp.use_graphs = false;
    GP_CHECK_OK(gp_backend_open_weights(&w, &bp, &eb));
    gp_exec g = gp_backend_exec(gb), e = gp_backend_exec(eb);
    int ids[NS];
    int32_t feed[NS], next[NS], next_e[NS];
    double worst = 0;
    for (int s = 0; s < NS; s++) {
        ids[s] = s;
        GP_CHECK_OK(gp_cpu_prefill(cpu, s, plen[s], prompt[s], ref + s * V));
        /* the prompt through decode steps, so every logit here is a decode
         * step's (ENGINE_TOL); test_prefill.c checks the batched prefill */
        int32_t tg, te;
        for (int i = 0; i < plen[s]; i++) {
            GP_CHECK_OK(g.ops->sequential_step(g.ctx, 1, &s, &prompt[s][i], &tg, got + s * V, NULL));
            GP_CHECK_OK(e.ops->sequential_step(e.ctx, 1, &s, &prompt[s][i], &te, eager + s * V, NULL));
        }
        worst = fmax(worst, gp_test_rel_err(got + s * V, ref + s * V, V));
        assert_memory_equal(got + s * V, eager + s * V, sizeof(float) * V);
        feed[s] = gp_argmax(ref + s * V, V);
    }
    for (int t = 0; t < STEPS; t++) {
        GP_CHECK_OK(gp_cpu_decode_step(cpu, NS, ids, feed, ref));
        GP_CHECK_OK(g.ops->sequential_step(g.ctx, NS, ids, feed, next, got, NULL));
        GP_CHECK_OK(e.ops->sequential_step(e.ctx, NS, ids, feed, next_e, eager, NULL));
        assert_memory_equal(got, eager, sizeof(float) * NS * V);
        assert_memory_equal(next, next_e, sizeof next);
        for (int s = 0; s < NS; s++) {
            double err = gp_test_rel_err(got + s * V, ref + s * V, V);
            if (!(err <= ENGINE_TOL))
                fail_msg("step %d seq %d: engine vs CPU reference %.3g > %.0e", t, s, err, ENGINE_TOL);
            worst = fmax(worst, err);
            /* the engine's own argmax must be the argmax of its logits */
            assert_int_equal(next[s], gp_argmax(got + s * V, V));
            feed[s] = gp_argmax(ref + s * V, V); /* follow the reference: no cascade */
        }
    }
    printf("engine vs CPU reference (bf16 activations), tiny synthetic, 5 sequences x %d steps: worst %.3g (tol %.0e); "
           "graph == eager bitwise\n", STEPS, worst, ENGINE_TOL);
    gp_backend_close(gb);
    gp_backend_close(eb);
    gp_cpu_model_destroy(cpu);
    gp_host_weights_free(&w);
    free(ref), free(got), free(eager);
}

/* Bad input is refused before any state changes. */
static void test_errors(void **state)
{
    gp_config cfg;
    GP_CHECK_OK(gp_config_preset("tiny", &cfg));
    gp_device_weights *dw;
    GP_CHECK_OK(gp_device_weights_synthetic(&cfg, 1, &dw));
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = 2;
    p.max_context = 4;
    gp_engine *e;
    GP_CHECK_OK(gp_engine_create(dw, &p, &e));
    int ids[2] = {0, 0};
    int32_t tok[2] = {1, 2}, next[2];
    assert_int_equal(gp_engine_decode_step(e, 2, ids, tok, next, NULL), GP_ERR_INVALID_ARG);
    ids[1] = 1;
    tok[1] = cfg.vocab;
    assert_int_equal(gp_engine_decode_step(e, 2, ids, tok, next, NULL), GP_ERR_INVALID_ARG);
    assert_non_null(strstr(gp_last_error(), "token 256"));
    tok[1] = 3;
    for (int i = 0; i < 4; i++)
        GP_CHECK_OK(gp_engine_decode_step(e, 2, ids, tok, next, NULL));
    assert_int_equal(gp_engine_decode_step(e, 2, ids, tok, next, NULL), GP_ERR_STATE);
    assert_non_null(strstr(gp_last_error(), "is full"));
    gp_engine_destroy(e);
    p.max_context = 100000;
    assert_int_equal(gp_engine_create(dw, &p, &e), GP_ERR_INVALID_ARG);
    gp_device_weights_destroy(dw);
}

int main(void)
{
    if (gp_cuda_available() != GP_OK) {
        printf("engine_model: SKIPPED: %s\n", gp_last_error());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_tiny_graph), cmocka_unit_test(test_hf_tiny_eager),
        cmocka_unit_test(test_hf_gqa_graph),  cmocka_unit_test(test_hf_gqa_eager),
        cmocka_unit_test(test_hf_gqa_pipelined),
        cmocka_unit_test(test_vs_hf_tiny),    cmocka_unit_test(test_vs_hf_gqa),
        cmocka_unit_test(test_batch_vs_cpu),  cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("CUDA engine", tests, NULL, NULL) ? 1 : 0;
}
