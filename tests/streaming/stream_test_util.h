/* What the weight-streaming tests share: a model-shaped set of groups (attn
 * and ffn per layer, a pinned head) and the manager's params over the
 * simulated backend. */
#ifndef GP_STREAM_TEST_UTIL_H
#define GP_STREAM_TEST_UTIL_H

#include "gp_test.h"
#include "gp_streaming.h"
#include "sim_stream.h"

#define ST_MAX_GROUPS 64
#define ST_MAX_ORDER 256

typedef struct st_model {
    gp_stream_group groups[ST_MAX_GROUPS];
    int order[ST_MAX_ORDER];
    int n_groups, n_order;
    char host[ST_MAX_GROUPS]; /* group i's host bytes start at &host[i]: the sim only logs them */
} st_model;

/* Groups: attn l at 2l, ffn l at 2l + 1, the pinned head last; the order is
 * the engine's: attn 0, ffn 0, ..., head. */
static inline void st_model_make(st_model *m, int layers, uint64_t attn, uint64_t ffn, uint64_t head)
{
    memset(m, 0, sizeof *m);
    for (int l = 0; l < layers; l++) {
        m->groups[2 * l] = (gp_stream_group){GP_STREAM_ATTN, l, attn, &m->host[2 * l], 0, 0};
        m->groups[2 * l + 1] = (gp_stream_group){GP_STREAM_FFN, l, ffn, &m->host[2 * l + 1], 0, 0};
    }
    m->n_groups = 2 * layers + 1;
    m->groups[2 * layers] = (gp_stream_group){GP_STREAM_HEAD, -1, head, &m->host[2 * layers], 1, 0};
    for (int i = 0; i < m->n_groups; i++)
        m->order[i] = i;
    m->n_order = m->n_groups;
}

/* The group whose copy the sim logged as host. */
static inline int st_group_of(const st_model *m, const void *host)
{
    return (int)((const char *)host - m->host);
}

static inline gp_streamer_params st_params(const st_model *m, gp_sim_stream *x, uint64_t budget, int depth)
{
    gp_streamer_params p = gp_streamer_default_params();
    p.budget_bytes = budget;
    p.prefetch_depth = depth;
    p.groups = m->groups;
    p.n_groups = m->n_groups;
    p.order = m->order;
    p.n_order = m->n_order;
    p.backend = gp_sim_stream_backend(x);
    return p;
}

static inline gp_sim_stream *st_sim(uint64_t budget)
{
    gp_sim_stream_params sp = {55.0, 3e-6, budget};
    gp_sim_stream *x = NULL;
    GP_CHECK_OK(gp_sim_stream_create(&sp, &x));
    return x;
}

/* The manager's books and the sim's device agree and hold the budget. */
static inline void st_consistent(gp_streamer *s, gp_sim_stream *x)
{
    GP_CHECK_OK(gp_streamer_check(s));
    const gp_sim_stream_report *r = gp_sim_stream_report_get(x);
    assert_int_equal(r->device_bytes, gp_streamer_device_bytes(s));
    assert_int_equal(r->over_budget, 0);
    assert_int_equal(r->early_reuse, 0);
    assert_int_equal(r->read_before_ready, 0);
}

/* One stage: acquire, read for `seconds`, release, on stream. */
static inline void st_stage(gp_streamer *s, gp_sim_stream *x, int g, void *stream, double seconds)
{
    GP_CHECK_OK(gp_streamer_acquire(s, g, stream));
    gp_sim_stream_read(x, stream, gp_streamer_slot(s, g), seconds);
    GP_CHECK_OK(gp_streamer_release(s, g, stream));
}

#endif
