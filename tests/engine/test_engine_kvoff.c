/* Offloaded KV cache (kv_vram_budget): an engine whose sequences'
 * oldest blocks live in host memory gives the resident engine's logits bit
 * for bit, through a batched prefill in several chunks (prompts inside their
 * host quota, across it and beyond it: write-backs and reads) and decode
 * steps after it (new tokens in host blocks for the short prompts, in device
 * blocks for the others), with a sequence reset and prefilled again; the
 * plan's split and refusals. Both engine dtypes. Skips without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "gp_stage.h"
#include "gp_test.h"
#include "gp_weights.h"

#include "gpu_test_util.h"

enum { NS = 4, MAX_CTX = 2048, BLOCK = 16, STEPS = 6 };
static const int k_lens[NS] = {100, 1100, 1500, 1990};
static gp_dtype g_dt = GP_DTYPE_BF16;

typedef struct fixture {
    gp_config cfg;
    gp_host_weights w;
    gp_device_weights *dw;
    int32_t *prompts[NS];
} fixture;

/* Eight layers at head_dim 128: the staging windows (4 of one layer's
 * offloaded blocks) are then a quarter of the 2 x 8 layer parts the device
 * keeps fewer of. */
static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    gt_config_hd128(&f->cfg);
    gp_config *c = &f->cfg;
    c->n_layers = 8;
    gt_weights_synth(c, 77, g_dt, &f->w, &f->dw);
    srand((unsigned)gt_seed("engine_kvoff"));
    for (int s = 0; s < NS; s++)
        f->prompts[s] = gt_rand_ids(k_lens[s], c->vocab);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    for (int s = 0; s < NS; s++)
        free(f->prompts[s]);
    gp_device_weights_destroy(f->dw);
    gp_host_weights_free(&f->w);
    free(f);
    return 0;
}

static gp_engine_params params(uint64_t budget)
{
    gp_engine_params p = gp_engine_default_params();
    p.max_batch = NS;
    p.max_context = MAX_CTX;
    p.block_size = BLOCK;
    p.prefill_chunk = 700; /* chunks that hold several prompts and cut through the host quota */
    p.use_graphs = false;
    p.kv_vram_budget = budget;
    return p;
}

/* Prefill all, STEPS greedy steps, then sequence 0 reset and prefilled
 * again with sequence 2's prompt and one more step of all; every logit. */
static void run(fixture *f, gp_engine *e, float *out)
{
    const int V = f->cfg.vocab;
    gp_prefill_seq ps[NS];
    int ids[NS];
    int32_t next[NS];
    for (int s = 0; s < NS; s++) {
        ps[s] = (gp_prefill_seq){.seq = s, .n = k_lens[s], .tokens = f->prompts[s]};
        ids[s] = s;
    }
    GP_CHECK_OK(gp_engine_prefill_batch(e, NS, ps, next, out, NULL));
    out += (size_t)NS * V;
    for (int t = 0; t < STEPS; t++, out += (size_t)NS * V)
        GP_CHECK_OK(gp_engine_decode_step(e, NS, ids, next, next, out));
    gp_engine_reset_seq(e, 0);
    GP_CHECK_OK(gp_engine_prefill(e, 0, k_lens[2], f->prompts[2], &next[0], out));
    out += V;
    GP_CHECK_OK(gp_engine_decode_step(e, NS, ids, next, next, out));
}

static void test_bitwise(void **state)
{
    fixture *f = *state;
    const int V = f->cfg.vocab;
    const size_t n = ((size_t)(STEPS + 2) * NS + 1) * (size_t)V;
    float *ref = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    gp_engine *e;
    gp_engine_params p = params(0);
    GP_CHECK_OK(gp_engine_create(f->dw, &p, &e));
    run(f, e, ref);
    gp_engine_destroy(e);
    gp_kv_offload_plan plan;
    gp_engine_params q = params(~0ull);
    GP_CHECK_OK(gp_engine_kv_offload_plan(&f->cfg, &q, g_dt, &plan));
    assert_int_equal(plan.host_blocks_per_seq, 0); /* the whole cache fits: nothing offloaded */
    const uint64_t full_bytes = plan.full_bytes;
    /* half the cache: every block on the host (the windows take a quarter); three quarters: half of them */
    for (int k = 0; k < 2; k++) {
        p = params(k ? full_bytes * 3 / 4 : full_bytes / 2);
        GP_CHECK_OK(gp_engine_kv_offload_plan(&f->cfg, &p, g_dt, &plan));
        assert_true(plan.host_blocks_per_seq > 0 && plan.device_bytes <= p.kv_vram_budget);
        assert_int_equal(plan.host_blocks_per_seq + plan.device_blocks_per_seq, MAX_CTX / BLOCK);
        GP_CHECK_OK(gp_engine_create(f->dw, &p, &e));
        assert_non_null(gp_engine_kv_offload(e));
        memset(got, 0xff, sizeof(float) * n);
        run(f, e, got);
        gp_kv_offload_stats st;
        GP_CHECK_OK(gp_engine_kv_offload_stats(e, &st, true));
        print_message("  budget %.1f of %.1f MiB: %d host + %d device blocks per sequence; %.1f MB in, %.1f MB "
                      "written back\n", p.kv_vram_budget / 1048576.0, full_bytes / 1048576.0,
                      plan.host_blocks_per_seq, plan.device_blocks_per_seq, st.bytes_in / 1e6, st.bytes_out / 1e6);
        assert_true(st.bytes_in > 0 && st.bytes_out > 0);
        assert_memory_equal(got, ref, sizeof(float) * n);
        gp_engine_destroy(e);
    }
    free(ref);
    free(got);
}

static void test_refusals(void **state)
{
    fixture *f = *state;
    gp_kv_offload_plan plan;
    gp_engine_params p = params(1);
    GP_CHECK_FAIL(gp_engine_kv_offload_plan(&f->cfg, &p, g_dt, &plan), GP_ERR_INVALID_ARG,
                  "--kv-vram-budget 1 bytes: below the least");
    gp_engine *e = NULL;
    GP_CHECK_FAIL(gp_engine_create(f->dw, &p, &e), GP_ERR_INVALID_ARG, "below the least");
    assert_null(e);
    p = params(1 << 24);
    p.use_graphs = true;
    GP_CHECK_FAIL(gp_engine_create(f->dw, &p, &e), GP_ERR_INVALID_ARG, "set use_graphs = false");
    p.use_graphs = false;
    GP_CHECK_OK(gp_engine_create(f->dw, &p, &e));
    gp_engine_destroy(e);
    p = params(0);
    GP_CHECK_OK(gp_engine_create(f->dw, &p, &e));
    GP_CHECK_FAIL(gp_engine_kv_offload_stats(e, NULL, false), GP_ERR_STATE, "not offloaded");
    assert_null(gp_engine_kv_offload(e));
    gp_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bitwise),
        cmocka_unit_test(test_refusals),
    };
    return GT_ENGINE_MAIN("engine_kvoff", tests, setup, teardown, &g_dt);
}
