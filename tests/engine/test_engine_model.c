/* The whole CUDA engine in both dtypes (bf16, fp16): against HF
 * transformers' logits and greedy tokens on the committed checkpoints (fp16
 * on the fp16 one: identical tokens, HF_F16_TOL), against the CPU reference
 * rounding at the engine's points in the engine's dtype (a mixed-length
 * batch; qwen2's biases and tied embeddings; mistral), and graph replay
 * against eager launch. Skips without a GPU; a checkpoint directory that is
 * not there skips its test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "hf_case.h"
#include "gp_reference.h"
#include "gp_weights.h"

#include "engine_tol.h"

static const hf_backend graph_be = {.label = "cuda engine, graphs", .kind = GP_BACKEND_CUDA, .use_graphs = true};
static const hf_backend eager_be = {.label = "cuda engine, eager", .kind = GP_BACKEND_CUDA};
static const hf_backend pipe_be = {.label = "cuda engine, pipelined", .kind = GP_BACKEND_CUDA, .use_graphs = true,
                                   .pipelined = true};
/* --dtype auto: a 16-bit checkpoint in its own dtype, an fp32 one in bf16 */
static const hf_backend auto_be = {.label = "cuda engine, auto dtype", .kind = GP_BACKEND_CUDA, .use_graphs = true};
static const hf_backend f16_graph_be = {.label = "cuda engine fp16, graphs", .kind = GP_BACKEND_CUDA,
                                        .use_graphs = true, .dtype = GP_DTYPE_F16};
static const hf_backend f16_eager_be = {.label = "cuda engine fp16, eager", .kind = GP_BACKEND_CUDA,
                                        .dtype = GP_DTYPE_F16};
static const hf_backend f16_pipe_be = {.label = "cuda engine fp16, pipelined", .kind = GP_BACKEND_CUDA,
                                       .use_graphs = true, .pipelined = true, .dtype = GP_DTYPE_F16};
static const hf_backend cpu_f16_be = {.label = "cpu reference, fp16 activations", .kind = GP_BACKEND_CPU,
                                      .dtype = GP_DTYPE_F16};

/* 1 when tests/data/<name> holds the HF data; else skips the calling test
 * (the checkpoints of other branches may not be here yet). */
static int have_data(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/expected.json", GP_TEST_DATA_DIR, name);
    if (access(path, R_OK) == 0)
        return 1;
    printf("%s: not here (%s), skipped\n", name, path);
    skip();
    return 0;
}

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

/* fp16: the fp16 checkpoint in its own dtype against HF,
 * identical tokens and HF_F16_TOL, prefill and decode, graphs, eager and
 * pipelined; auto picks fp16 for it. */
static void test_vs_hf_tiny_fp16_graph(void **s)
{
    if (have_data("tiny-fp16"))
        hf_check("tiny-fp16", HF_F16_TOL, &f16_graph_be, NULL, true);
}
static void test_vs_hf_tiny_fp16_eager(void **s)
{
    if (have_data("tiny-fp16"))
        hf_check("tiny-fp16", HF_F16_TOL, &f16_eager_be, NULL, true);
}
static void test_vs_hf_tiny_fp16_pipelined(void **s)
{
    if (have_data("tiny-fp16"))
        hf_check("tiny-fp16", HF_F16_TOL, &f16_pipe_be, NULL, true);
}
static void test_vs_hf_tiny_fp16_auto(void **s)
{
    if (have_data("tiny-fp16"))
        hf_check("tiny-fp16", HF_F16_TOL, &auto_be, NULL, true);
}
/* The fp16 engine against the CPU reference rounding where it does, in fp16
 * (the engine's own arithmetic): the prefill bound, as for bf16. */
static void test_tiny_fp16_vs_cpu(void **s)
{
    if (have_data("tiny-fp16"))
        hf_check("tiny-fp16", PREFILL_TOL, &f16_graph_be, &cpu_f16_be, false);
}
/* An fp32 checkpoint: auto runs it in bf16 (the bf16 drift bound). */
static void test_vs_hf_tiny_fp32_auto(void **s)
{
    if (have_data("tiny-fp32"))
        hf_check("tiny-fp32", HF_BF16_DRIFT_TOL, &auto_be, NULL, false);
}
/* Qwen2: q/k/v biases fused into RoPE + KV append, tied (qwen2-tiny, bf16)
 * and untied (qwen2-untied, fp32 weights and biases) embeddings; mistral.
 * Against HF in the auto dtype (bf16 for all three), and in fp16 against the
 * CPU reference in fp16. */
static void test_vs_hf_qwen2(void **s)
{
    if (have_data("qwen2-tiny"))
        hf_check("qwen2-tiny", HF_BF16_DRIFT_TOL, &auto_be, NULL, false);
}
static void test_qwen2_fp16_vs_cpu(void **s)
{
    if (have_data("qwen2-tiny"))
        hf_check("qwen2-tiny", PREFILL_TOL, &f16_graph_be, &cpu_f16_be, false);
}
static void test_qwen2_bf16_vs_cpu(void **s)
{
    if (have_data("qwen2-tiny"))
        hf_check("qwen2-tiny", PREFILL_TOL, &graph_be, &hf_cpu_bf16_backend, false);
}
static void test_vs_hf_qwen2_untied(void **s)
{
    if (have_data("qwen2-untied"))
        hf_check("qwen2-untied", HF_BF16_DRIFT_TOL, &auto_be, NULL, false);
}
static void test_qwen2_untied_fp16_vs_cpu(void **s)
{
    if (have_data("qwen2-untied"))
        hf_check("qwen2-untied", PREFILL_TOL, &f16_eager_be, &cpu_f16_be, false);
}
static void test_vs_hf_mistral(void **s)
{
    if (have_data("mistral-tiny"))
        hf_check("mistral-tiny", HF_BF16_DRIFT_TOL, &auto_be, NULL, false);
}
static void test_mistral_fp16_vs_cpu(void **s)
{
    if (have_data("mistral-tiny"))
        hf_check("mistral-tiny", PREFILL_TOL, &f16_pipe_be, &cpu_f16_be, false);
}

/* Synthetic tiny model, 5 sequences with prompt lengths around the block
 * size (block 3: lengths 1, 2, 3, 4, 7) fed token by token, then decoded
 * together for 8 steps: the engine's decode steps in graph mode against the
 * CPU reference, and graph against eager bitwise. */
static void batch_vs_cpu(gp_dtype dt)
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
    gp_cpu_model_set_act_dtype(cpu, dt); /* the engine's rounding points, in its dtype */
    gp_backend_params bp = gp_backend_default_params(GP_BACKEND_CUDA);
    bp.dtype = dt; /* bf16 weights: exact in either */
    bp.n_seqs = NS;
    bp.max_context = CTX;
    bp.block_size = 3;
    gp_backend *gb, *eb;
    GP_CHECK_OK(gp_backend_open_weights(&w, &bp, &gb));
    bp.use_graphs = false;
    GP_CHECK_OK(gp_backend_open_weights(&w, &bp, &eb));
    assert_int_equal(gp_backend_dtype(gb), dt);
    assert_non_null(strstr(gp_backend_describe(gb), gp_dtype_flag_name(dt)));
    const double tol = dt == GP_DTYPE_F16 ? ENGINE_TOL_F16 : ENGINE_TOL;
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
            GP_CHECK_OK(g.session->sequential_step(g.ctx, 1, &s, &prompt[s][i], &tg, got + s * V, NULL));
            GP_CHECK_OK(e.session->sequential_step(e.ctx, 1, &s, &prompt[s][i], &te, eager + s * V, NULL));
        }
        worst = fmax(worst, gp_test_rel_err(got + s * V, ref + s * V, V));
        assert_memory_equal(got + s * V, eager + s * V, sizeof(float) * V);
        feed[s] = gp_argmax(ref + s * V, V);
    }
    for (int t = 0; t < STEPS; t++) {
        GP_CHECK_OK(gp_cpu_decode_step(cpu, NS, ids, feed, ref));
        GP_CHECK_OK(g.session->sequential_step(g.ctx, NS, ids, feed, next, got, NULL));
        GP_CHECK_OK(e.session->sequential_step(e.ctx, NS, ids, feed, next_e, eager, NULL));
        assert_memory_equal(got, eager, sizeof(float) * NS * V);
        assert_memory_equal(next, next_e, sizeof next);
        for (int s = 0; s < NS; s++) {
            double err = gp_test_rel_err(got + s * V, ref + s * V, V);
            if (!(err <= tol))
                fail_msg("%s step %d seq %d: engine vs CPU reference %.3g > %.0e", gp_dtype_flag_name(dt), t, s,
                         err, tol);
            worst = fmax(worst, err);
            /* the engine's own argmax must be the argmax of its logits */
            assert_int_equal(next[s], gp_argmax(got + s * V, V));
            feed[s] = gp_argmax(ref + s * V, V); /* follow the reference: no cascade */
        }
    }
    printf("%s engine vs CPU reference (%s activations), tiny synthetic, 5 sequences x %d steps: worst %.3g "
           "(tol %.0e); graph == eager bitwise\n", gp_dtype_flag_name(dt), gp_dtype_flag_name(dt), STEPS, worst, tol);
    gp_backend_close(gb);
    gp_backend_close(eb);
    gp_cpu_model_destroy(cpu);
    gp_host_weights_free(&w);
    free(ref), free(got), free(eager);
}

static void test_batch_vs_cpu(void **state) { batch_vs_cpu(GP_DTYPE_BF16); }
static void test_batch_vs_cpu_fp16(void **state) { batch_vs_cpu(GP_DTYPE_F16); }

/* Bad input is refused before any state changes. */
static void test_errors(void **state)
{
    gp_config cfg;
    GP_CHECK_OK(gp_config_preset("tiny", &cfg));
    gp_device_weights *dw;
    gp_device_weights *bad = NULL;
    assert_int_equal(gp_device_weights_synthetic(&cfg, GP_DTYPE_F32, 1, &bad), GP_ERR_INVALID_ARG);
    assert_null(bad);
    assert_non_null(strstr(gp_last_error(), "F32"));
    GP_CHECK_OK(gp_device_weights_synthetic(&cfg, GP_DTYPE_BF16, 1, &dw));
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
    assert_non_null(strstr(gp_last_error(), "do not fit sequence"));
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
        cmocka_unit_test(test_batch_vs_cpu),  cmocka_unit_test(test_batch_vs_cpu_fp16),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_vs_hf_tiny_fp16_graph), cmocka_unit_test(test_vs_hf_tiny_fp16_eager),
        cmocka_unit_test(test_vs_hf_tiny_fp16_pipelined), cmocka_unit_test(test_vs_hf_tiny_fp16_auto),
        cmocka_unit_test(test_tiny_fp16_vs_cpu), cmocka_unit_test(test_vs_hf_tiny_fp32_auto),
        cmocka_unit_test(test_vs_hf_qwen2), cmocka_unit_test(test_qwen2_fp16_vs_cpu),
        cmocka_unit_test(test_qwen2_bf16_vs_cpu), cmocka_unit_test(test_vs_hf_qwen2_untied),
        cmocka_unit_test(test_qwen2_untied_fp16_vs_cpu), cmocka_unit_test(test_vs_hf_mistral),
        cmocka_unit_test(test_mistral_fp16_vs_cpu),
    };
    return cmocka_run_group_tests_name("CUDA engine", tests, NULL, NULL) ? 1 : 0;
}
