/* The partition pool: every candidate A:F split is planned and built once at
 * create (green_pairs.c builds them), so that switching splits while running
 * is only an index. */
#include "green_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GP_GREEN_MAX_SPLITS 1024

gp_green_pool_params gp_green_pool_default_params(void)
{
    gp_green_pool_params p;
    memset(&p, 0, sizeof p);
    p.device = 0;
    p.splits = NULL;
    p.n_splits = 0;
    p.remainder_side = GP_SPLIT_SIDE_F;
    p.force_fallback = 0;
    return p;
}

void gp_green_pool_destroy(gp_green_pool *pool)
{
    if (!pool)
        return;
    gp_green_teardown td = { 0, "" };
    gp_green_pairs_release(pool, &td);
    /* Nothing to return it to; a line tells whoever reads the log. */
    if (td.failures)
        fprintf(stderr, "greenpipe: green pool teardown: %d call%s failed (ignored), first %s\n",
                td.failures, td.failures == 1 ? "" : "s", td.first);
    free(pool->slots);
    free(pool);
}

/* ----------------------------------------------------------------- create */

/* The SM description when the driver cannot give one. */
static gp_status guess_info(gp_green_pool *pool)
{
    gp_status st = GP_OK;
    int major = 0;
    GREEN_RT(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, pool->device), st,
             out);
    pool->info = gp_sm_info_guess(pool->device_sms, major);
out:
    return st;
}

/* Plans every candidate against pool->info into the slots. */
static gp_status plan_all(gp_green_pool *pool, const gp_green_pool_params *p)
{
    int n = p->n_splits;
    if (n == 0)
        GP_TRY(gp_split_enumerate(&pool->info, p->remainder_side, NULL, 0, &n));
    pool->slots = (gp_green_slot *)calloc((size_t)n, sizeof *pool->slots);
    if (!pool->slots)
        GP_FAIL(GP_ERR_NO_MEMORY, "green pool: no host memory for %d pairs", n);
    pool->n = n;
    if (p->n_splits == 0) {
        gp_split_plan *plans = (gp_split_plan *)calloc((size_t)n, sizeof *plans);
        if (!plans)
            GP_FAIL(GP_ERR_NO_MEMORY, "green pool: no host memory for %d plans", n);
        gp_status st = gp_split_enumerate(&pool->info, p->remainder_side, plans, n, &n);
        for (int i = 0; st == GP_OK && i < pool->n; i++) {
            pool->slots[i].pub.plan = plans[i];
            pool->slots[i].pub.requested.attn_sms = plans[i].attn_sms;
            pool->slots[i].pub.requested.ffn_sms = plans[i].ffn_sms;
        }
        free(plans);
        return st;
    }
    for (int i = 0; i < n; i++) {
        gp_green_slot *s = &pool->slots[i];
        s->pub.requested = p->splits[i];
        gp_status st = gp_split_plan_make(&pool->info, p->splits[i], p->remainder_side,
                                          &s->pub.plan);
        if (st != GP_OK) {
            char msg[768];
            snprintf(msg, sizeof msg, "%s", gp_last_error());
            GP_FAIL(st, "green pool, split %d of %d: %s (device %d: %d SMs, minimum partition "
                    "%d, alignment %d)", i + 1, n, msg, pool->device, pool->info.sm_count,
                    pool->info.min_partition, pool->info.alignment);
        }
    }
    return GP_OK;
}

static gp_status check_params(const gp_green_pool_params *p)
{
    if (!p)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_green_pool_create: params is NULL");
    if (p->device < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_green_pool_create: device %d: must be >= 0", p->device);
    if (p->n_splits < 0 || p->n_splits > GP_GREEN_MAX_SPLITS)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_green_pool_create: n_splits %d: allowed 0 (every valid "
                "split) .. %d", p->n_splits, GP_GREEN_MAX_SPLITS);
    if (p->n_splits > 0 && !p->splits)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_green_pool_create: splits is NULL with n_splits %d",
                p->n_splits);
    if (p->remainder_side != GP_SPLIT_SIDE_F && p->remainder_side != GP_SPLIT_SIDE_A)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_green_pool_create: remainder_side %d: allowed %d (F) or "
                "%d (A)", (int)p->remainder_side, (int)GP_SPLIT_SIDE_F, (int)GP_SPLIT_SIDE_A);
    return GP_OK;
}

gp_status gp_green_pool_create(const gp_green_pool_params *params, gp_green_pool **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_green_pool_create: out is NULL");
    *out = NULL;
    GP_TRY(check_params(params));
    GP_TRY(gp_green_check_device(params->device));

    gp_status st = GP_OK;
    gp_green_teardown td = { 0, "" };
    gp_green_pool *pool = (gp_green_pool *)calloc(1, sizeof *pool);
    if (!pool)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_green_pool_create: no host memory");
    pool->device = params->device;
    pool->side = params->remainder_side;
    /* cuGreenCtxCreate retains the primary context; having it active first
     * avoids initialising it once per green context. */
    GREEN_RT(cudaSetDevice(params->device), st, fail);
    GREEN_RT(cudaFree(0), st, fail);
    GREEN_RT(cudaDeviceGetAttribute(&pool->device_sms, cudaDevAttrMultiProcessorCount,
                                    params->device), st, fail);

    CUdevice dev = 0;
    CUdevResource all;
    memset(&all, 0, sizeof all);
    int have_res = 0;
    st = gp_green_driver_load(&pool->drv, pool->reason, sizeof pool->reason);
    if (st == GP_OK) {
        pool->have_driver = 1;
        st = gp_green_device_resource(&pool->drv, params->device, &dev, &all);
        if (st == GP_OK)
            st = gp_green_sm_info(&pool->drv, &all, &pool->info);
        if (st == GP_OK)
            have_res = 1;
        else if (st == GP_ERR_UNSUPPORTED)
            snprintf(pool->reason, sizeof pool->reason, "%s", gp_last_error());
        else
            goto fail;
    } else if (st != GP_ERR_UNSUPPORTED) {
        goto fail;
    }
    if (!have_res && (st = guess_info(pool)) != GP_OK)
        goto fail;
    if ((st = plan_all(pool, params)) != GP_OK)
        goto fail;

    if (params->force_fallback)
        snprintf(pool->reason, sizeof pool->reason, "forced by the pool parameter force_fallback");
    else if (have_res) {
        int unsup = 0;
        st = gp_green_pairs_build(pool, dev, &all, &unsup);
        if (st == GP_OK) {
            pool->partitioned = 1;
        } else if (unsup) {
            /* Green contexts are unavailable here after all (e.g. MIG): the
             * pairs built so far go, and every pair is rebuilt plain. */
            snprintf(pool->reason, sizeof pool->reason, "%s", gp_last_error());
            gp_green_pairs_release(pool, &td);
            for (int i = 0; i < pool->n; i++)
                pool->slots[i].pub.attn_sms = pool->slots[i].pub.ffn_sms = 0;
        } else {
            goto fail;
        }
    }
    if (!pool->partitioned) {
        if ((st = gp_green_pairs_build_plain(pool)) != GP_OK)
            goto fail;
        fprintf(stderr, "greenpipe: green contexts unavailable (%s); A and F run unpartitioned "
                "as plain streams on all %d SMs\n", pool->reason, pool->device_sms);
    }
    *out = pool;
    return GP_OK;

fail:
    gp_green_pairs_release(pool, &td); /* the caller sees the first error, not teardown's */
    free(pool->slots);
    free(pool);
    return st;
}

/* -------------------------------------------------------------- accessors */

int gp_green_pool_size(const gp_green_pool *pool)
{
    return pool ? pool->n : 0;
}

const gp_green_pair *gp_green_pool_pair(const gp_green_pool *pool, int i)
{
    if (!pool) {
        gp_set_error("gp_green_pool_pair: pool is NULL");
        return NULL;
    }
    if (i < 0 || i >= pool->n) {
        gp_set_error("gp_green_pool_pair: index %d: allowed 0 .. %d", i, pool->n - 1);
        return NULL;
    }
    return &pool->slots[i].pub;
}

int gp_green_pool_find(const gp_green_pool *pool, int attn_sms)
{
    for (int i = 0; pool && i < pool->n; i++)
        if (pool->slots[i].pub.plan.attn_sms == attn_sms)
            return i;
    return -1;
}

int gp_green_pool_partitioned(const gp_green_pool *pool)
{
    return pool ? pool->partitioned : 0;
}

const char *gp_green_pool_fallback_reason(const gp_green_pool *pool)
{
    return pool && !pool->partitioned ? pool->reason : "";
}

gp_sm_info gp_green_pool_sm_info(const gp_green_pool *pool)
{
    gp_sm_info z = { 0, 0, 0, 0 };
    return pool ? pool->info : z;
}
