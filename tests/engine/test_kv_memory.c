/* The KV memory's hook list (engine/kv_memory.h), without a GPU: a resident
 * memory has no hook to run; providers run in attach order before the
 * memory's own hook at every point, detach by identity, a full list is
 * refused; the plan a call builds reaches begin_batch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "gp_test.h"
#include "kv_memory.h"

/* Every hook appends "<id><point><layer>" to the log, e.g. "Pb" or "Mx3". */
typedef struct logger {
    char id;
    char *log;
    int seen_spans;
} logger;

static void put(logger *l, char point, int layer)
{
    size_t n = strlen(l->log);
    l->log[n++] = l->id;
    l->log[n++] = point;
    if (layer >= 0)
        l->log[n++] = (char)('0' + layer);
    l->log[n] = '\0';
}

static gp_status lg_begin(void *self, const gp_kv_plan *plan, cudaStream_t s)
{
    (void)s;
    logger *l = self;
    l->seen_spans = plan->n;
    put(l, 'b', -1);
    return GP_OK;
}
static gp_status lg_before(void *self, int layer, cudaStream_t s) { (void)s; put(self, 'x', layer); return GP_OK; }
static gp_status lg_after(void *self, int layer, cudaStream_t s) { (void)s; put(self, 'y', layer); return GP_OK; }
static gp_status lg_end(void *self, cudaStream_t s) { (void)s; put(self, 'e', -1); return GP_OK; }
static const gp_kv_hook_ops lg_ops = {lg_begin, lg_before, lg_after, lg_end};

/* A memory with hooks of its own: its self is the memory, so it logs
 * through the logger that follows it. */
typedef struct own_memory {
    gp_kv_memory m;
    logger l;
} own_memory;

static gp_status own_begin(void *self, const gp_kv_plan *p, cudaStream_t s) { return lg_begin(&((own_memory *)self)->l, p, s); }
static gp_status own_before(void *self, int layer, cudaStream_t s) { return lg_before(&((own_memory *)self)->l, layer, s); }
static gp_status own_after(void *self, int layer, cudaStream_t s) { return lg_after(&((own_memory *)self)->l, layer, s); }
static gp_status own_end(void *self, cudaStream_t s) { return lg_end(&((own_memory *)self)->l, s); }
static void own_destroy(gp_kv_memory *m) { gp_kv_memory_fini(m); }
static const gp_kv_memory_ops own_ops = {.hooks = {own_begin, own_before, own_after, own_end},
                                         .destroy = own_destroy};

static void test_resident_has_no_hooks(void **state)
{
    (void)state;
    gp_kv_memory *m = NULL;
    GP_CHECK_OK(gp_kv_memory_create_resident(NULL, 4, &m));
    assert_int_equal(m->n_hooks, 0);
    assert_null(m->offload);
    assert_null(m->offload_stats);
    GP_CHECK_OK(gp_kv_begin_batch(m, NULL));
    GP_CHECK_OK(gp_kv_before_attn(m, 0, NULL));
    GP_CHECK_OK(gp_kv_filled_in_place(m, 0, NULL)); /* resident: nothing of its own to update */
    char log[64] = "";
    logger p = {'P', log, 0};
    GP_CHECK_OK(gp_kv_memory_attach(m, &lg_ops, &p));
    gp_kv_plan_reset(m);
    gp_kv_plan_add(m, 2, 10, 9, 10);
    gp_kv_plan_add(m, 0, 5, 0, 5);
    assert_int_equal(m->plan.spans[1].seq, 0);
    assert_int_equal(m->plan.spans[1].w1, 5);
    GP_CHECK_OK(gp_kv_begin_batch(m, NULL));
    assert_int_equal(p.seen_spans, 2);
    gp_kv_memory_detach(m, &p);
    assert_int_equal(m->n_hooks, 0);
    gp_kv_memory_detach(m, &p); /* absent: nothing */
    gp_kv_memory_destroy(m);
}

static void test_order_and_capacity(void **state)
{
    (void)state;
    char log[256] = "";
    own_memory om = {.l = {'M', log, 0}};
    GP_CHECK_OK(gp_kv_memory_init(&om.m, &own_ops, NULL, 2));
    assert_int_equal(om.m.n_hooks, 1);
    logger a = {'A', log, 0}, b = {'B', log, 0}, c = {'C', log, 0}, d = {'D', log, 0};
    GP_CHECK_OK(gp_kv_memory_attach(&om.m, &lg_ops, &a));
    GP_CHECK_OK(gp_kv_memory_attach(&om.m, &lg_ops, &b));
    GP_CHECK_OK(gp_kv_begin_batch(&om.m, NULL));
    GP_CHECK_OK(gp_kv_before_attn(&om.m, 1, NULL));
    GP_CHECK_OK(gp_kv_after_attn(&om.m, 1, NULL));
    GP_CHECK_OK(gp_kv_end_batch(&om.m, NULL));
    assert_string_equal(log, "AbBbMbAx1Bx1Mx1Ay1By1My1AeBeMe");
    GP_CHECK_OK(gp_kv_memory_attach(&om.m, &lg_ops, &c));
    GP_CHECK_FAIL(gp_kv_memory_attach(&om.m, &lg_ops, &d), GP_ERR_STATE, "allowed at most 3");
    gp_kv_memory_detach(&om.m, &a);
    log[0] = '\0';
    GP_CHECK_OK(gp_kv_before_attn(&om.m, 0, NULL));
    assert_string_equal(log, "Bx0Cx0Mx0");
    gp_kv_memory_destroy(&om.m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resident_has_no_hooks),
        cmocka_unit_test(test_order_and_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
