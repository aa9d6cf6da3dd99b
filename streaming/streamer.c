/* The weight-streaming manager's life cycle: parameters, the budget check
 * against the minimum working set, pinned loads, queries and statistics. */
#include "streamer_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Guards the allocations sized by caller counts. */
#define GP_STREAM_MAX_GROUPS (1 << 20)
#define GP_STREAM_MAX_ORDER (1 << 24)

const char *gp_stream_kind_name(gp_stream_kind k)
{
    switch (k) {
    case GP_STREAM_ATTN: return "attn";
    case GP_STREAM_FFN: return "ffn";
    case GP_STREAM_HEAD: return "head";
    case GP_STREAM_OTHER: return "other";
    default: return "?";
    }
}

void gp_stream_group_name(const gp_stream_group *g, char *buf, size_t cap)
{
    if (g->layer >= 0)
        snprintf(buf, cap, "%s %d (%llu bytes)", gp_stream_kind_name(g->kind), g->layer,
                 (unsigned long long)g->bytes);
    else
        snprintf(buf, cap, "%s (%llu bytes)", gp_stream_kind_name(g->kind), (unsigned long long)g->bytes);
}

gp_streamer_params gp_streamer_default_params(void)
{
    gp_streamer_params p;
    memset(&p, 0, sizeof p);
    p.prefetch_depth = 1;
    p.chunk_bytes = 32ull << 20;
    p.min_window = 2;
    return p;
}

static gp_status gp_stream_check_params(const gp_streamer_params *p, const char *fn)
{
    if (!p)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: params is NULL", fn);
    if (!p->groups || p->n_groups < 1 || p->n_groups > GP_STREAM_MAX_GROUPS)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: %d groups (groups %s): 1 to %d are allowed", fn, p->n_groups,
                p->groups ? "set" : "NULL", GP_STREAM_MAX_GROUPS);
    if (!p->order || p->n_order < 1 || p->n_order > GP_STREAM_MAX_ORDER)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: an order of %d positions (order %s): 1 to %d are allowed", fn,
                p->n_order, p->order ? "set" : "NULL", GP_STREAM_MAX_ORDER);
    for (int i = 0; i < p->n_groups; i++) {
        const gp_stream_group *g = &p->groups[i];
        if ((int)g->kind < 0 || g->kind >= GP_STREAM_KIND_COUNT)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: group %d has kind %d: 0 (attn) to %d (other) are allowed", fn,
                    i, (int)g->kind, GP_STREAM_KIND_COUNT - 1);
        if (g->bytes == 0)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: group %d (%s %d) has 0 bytes", fn, i,
                    gp_stream_kind_name(g->kind), g->layer);
        if (g->pinned && g->on_demand)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: group %d (%s %d) is both pinned and on demand: a pinned group "
                    "is loaded at create and stays, an on-demand one is copied only when acquired", fn, i,
                    gp_stream_kind_name(g->kind), g->layer);
    }
    for (int i = 0; i < p->n_order; i++)
        if (p->order[i] < 0 || p->order[i] >= p->n_groups)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: order[%d] = %d is not a group index (0 to %d)", fn, i,
                    p->order[i], p->n_groups - 1);
    if (p->prefetch_depth < 0 || p->prefetch_depth > p->n_order)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: prefetch depth %d: 0 to the order's length %d is allowed", fn,
                p->prefetch_depth, p->n_order);
    if (p->chunk_bytes == 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: chunk_bytes is 0", fn);
    if (p->min_window < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: min_window %d: at least 1", fn, p->min_window);
    return GP_OK;
}

/* Sum of pinned bytes and the heaviest window; *at: the window's first
 * position. Distinct groups only: a group twice in a window needs one slot. */
static gp_status gp_stream_working_set(const gp_streamer_params *p, uint64_t *pinned, uint64_t *window,
                                       int *at)
{
    uint64_t pin = 0, best = 0;
    int best_at = 0, w = p->min_window < p->n_order ? p->min_window : p->n_order;
    for (int i = 0; i < p->n_groups; i++)
        if (p->groups[i].pinned && __builtin_add_overflow(pin, p->groups[i].bytes, &pin))
            GP_FAIL(GP_ERR_OVERFLOW, "gp_streamer: pinned group bytes overflow 64 bits");
    int *stamp = calloc((size_t)p->n_groups, sizeof *stamp);
    if (!stamp)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_streamer: out of memory for %d groups", p->n_groups);
    for (int i = 0; i < p->n_order; i++) {
        uint64_t sum = 0;
        for (int k = 0; k < w; k++) {
            int gi = p->order[(i + k) % p->n_order];
            if (p->groups[gi].pinned || stamp[gi] == i + 1)
                continue;
            stamp[gi] = i + 1;
            if (__builtin_add_overflow(sum, p->groups[gi].bytes, &sum)) {
                free(stamp);
                GP_FAIL(GP_ERR_OVERFLOW, "gp_streamer: group bytes overflow 64 bits");
            }
        }
        if (sum > best) {
            best = sum;
            best_at = i;
        }
    }
    free(stamp);
    *pinned = pin;
    *window = best;
    *at = best_at;
    return GP_OK;
}

gp_status gp_streamer_min_budget(const gp_streamer_params *p, uint64_t *bytes)
{
    if (!bytes)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_streamer_min_budget: bytes is NULL");
    gp_status st = gp_stream_check_params(p, "gp_streamer_min_budget");
    if (st != GP_OK)
        return st;
    uint64_t pin, win;
    int at;
    if ((st = gp_stream_working_set(p, &pin, &win, &at)) != GP_OK)
        return st;
    if (__builtin_add_overflow(pin, win, bytes))
        GP_FAIL(GP_ERR_OVERFLOW, "gp_streamer_min_budget: working set overflows 64 bits");
    return GP_OK;
}

/* Appends to a bounded message; a long list ends in "..." instead of
 * overflowing the error text. */
static void gp_stream_append(char *buf, size_t cap, const char *fmt, ...)
{
    size_t n = strlen(buf);
    if (n + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= cap - n)
        memcpy(buf + cap - 4, "...", 4);
}

/* The refusal says which groups the budget must hold and their bytes, so
 * the caller can size it or unpin something. */
static gp_status gp_stream_check_budget(const gp_streamer_params *p, const char *fn)
{
    uint64_t pin, win;
    int at;
    gp_status st = gp_stream_working_set(p, &pin, &win, &at);
    if (st != GP_OK)
        return st;
    if (p->budget_bytes >= pin && p->budget_bytes - pin >= win)
        return GP_OK;
    char msg[900] = "", name[96];
    int w = p->min_window < p->n_order ? p->min_window : p->n_order;
    gp_stream_append(msg, sizeof msg, "pinned:");
    int any = 0;
    for (int i = 0; i < p->n_groups; i++)
        if (p->groups[i].pinned) {
            gp_stream_group_name(&p->groups[i], name, sizeof name);
            gp_stream_append(msg, sizeof msg, "%s %s", any++ ? "," : "", name);
        }
    if (!any)
        gp_stream_append(msg, sizeof msg, " none");
    gp_stream_append(msg, sizeof msg, "; the %d positions from %d of the order:", w, at);
    for (int k = 0, first = 1; k < w; k++) {
        const gp_stream_group *g = &p->groups[p->order[(at + k) % p->n_order]];
        if (g->pinned)
            continue;
        gp_stream_group_name(g, name, sizeof name);
        gp_stream_append(msg, sizeof msg, "%s %s", first ? "" : ",", name);
        first = 0;
    }
    GP_FAIL(GP_ERR_INVALID_ARG,
            "%s: budget %llu bytes is below the minimum working set of %llu bytes (%s)", fn,
            (unsigned long long)p->budget_bytes, (unsigned long long)(pin + win), msg);
}

gp_status gp_streamer_check_budget(const gp_streamer_params *p)
{
    gp_status st = gp_stream_check_params(p, "gp_streamer_check_budget");
    return st == GP_OK ? gp_stream_check_budget(p, "gp_streamer_check_budget") : st;
}

static gp_status gp_stream_check_backend(const gp_stream_backend *b)
{
    const gp_stream_backend_ops *o = b->ops;
    if (!o || !o->slot_alloc || !o->slot_free || !o->marker_create || !o->marker_destroy || !o->copy_h2d ||
        !o->stream_wait || !o->marker_record || !o->marker_wait)
        GP_FAIL(GP_ERR_INVALID_ARG,
                "gp_streamer_create: backend ops %s: every op but marker_query and collect is required",
                o ? "incomplete" : "NULL");
    return GP_OK;
}

/* keep_resident: which unpinned groups stay for good. What is left of the
 * budget after the pinned groups and the streaming reserve is spread over
 * the order (a group is kept when the kept share of the bytes seen so far
 * stays within the overall share), so copies of streamed groups run while
 * stages compute on kept ones instead of all streaming back to back.
 * On-demand groups are never kept: they are left out of the shares, so the
 * spare bytes spread over the groups that can be kept, but they stream
 * through the reserve, so its size counts them. */
static void gp_stream_choose_kept(gp_streamer *s)
{
    const gp_streamer_params *p = &s->p;
    uint64_t pin = 0, largest = 0, largest_od = 0, total = 0, od_total = 0;
    for (int i = 0; i < p->n_groups; i++)
        if (s->g[i].desc.pinned)
            pin += s->g[i].desc.bytes;
    /* distinct unpinned groups in order of first use: their bytes and the largest */
    for (int i = 0; i < p->n_order; i++) {
        const gp_stream_group *g = &s->g[p->order[i]].desc;
        if (g->pinned || s->g[p->order[i]].kept == -1)
            continue;
        s->g[p->order[i]].kept = -1; /* seen; reset below */
        if (g->bytes > largest)
            largest = g->bytes;
        if (g->on_demand) {
            od_total += g->bytes;
            if (g->bytes > largest_od)
                largest_od = g->bytes;
        } else {
            total += g->bytes;
        }
    }
    uint64_t reserve = (uint64_t)(p->min_window + p->prefetch_depth) * largest;
    uint64_t spare = p->budget_bytes > pin + reserve ? p->budget_bytes - pin - reserve : 0;
    /* All the others fit: only on-demand groups stream then, never
     * prefetched, so min_window of them (or all, when fewer) are the whole
     * reserve needed. */
    uint64_t od_reserve = (uint64_t)p->min_window * largest_od;
    if (od_reserve > od_total)
        od_reserve = od_total;
    if (p->budget_bytes >= pin && p->budget_bytes - pin >= total &&
        p->budget_bytes - pin - total >= od_reserve)
        spare = total;
    uint64_t seen = 0, kept = 0;
    for (int i = 0; i < p->n_order; i++) {
        gp_stream_slot_state *g = &s->g[p->order[i]];
        if (g->kept != -1)
            continue;
        g->kept = 0;
        if (g->desc.on_demand)
            continue;
        seen += g->desc.bytes;
        /* kept + bytes <= spare * seen / total, in floating point: bytes reach 1e11 */
        if (kept + g->desc.bytes <= spare &&
            (double)(kept + g->desc.bytes) <= (double)spare * (double)seen / (double)total) {
            g->kept = 1;
            g->desc.pinned = 1;
            kept += g->desc.bytes;
            s->kept_groups++;
        }
    }
    s->kept_bytes = kept;
}

gp_status gp_streamer_create(const gp_streamer_params *p, gp_streamer **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_streamer_create: out is NULL");
    *out = NULL;
    gp_status st = gp_stream_check_params(p, "gp_streamer_create");
    if (st == GP_OK)
        st = gp_stream_check_backend(&p->backend);
    if (st == GP_OK)
        st = gp_stream_check_budget(p, "gp_streamer_create");
    if (st != GP_OK)
        return st;
    gp_streamer *s = calloc(1, sizeof *s);
    if (!s)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_streamer_create: out of memory");
    s->p = *p;
    s->cursor = -1;
    s->g = calloc((size_t)p->n_groups, sizeof *s->g);
    s->order = malloc((size_t)p->n_order * sizeof *s->order);
    if (!s->g || !s->order || pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s->g);
        free(s->order);
        free(s);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_streamer_create: out of memory for %d groups", p->n_groups);
    }
    memcpy(s->order, p->order, (size_t)p->n_order * sizeof *s->order);
    s->p.order = s->order;
    s->p.groups = NULL; /* the descriptions live in s->g */
    for (int i = 0; i < p->n_groups; i++)
        s->g[i].desc = p->groups[i];
    if (p->keep_resident)
        gp_stream_choose_kept(s);
    const gp_stream_backend_ops *o = p->backend.ops;
    for (int i = 0; i < p->n_groups && st == GP_OK; i++)
        st = o->marker_create(p->backend.be, &s->g[i].ready);
    /* Pinned groups first, so a budget that fits them is never short of
     * room for them later. */
    for (int i = 0; i < p->n_groups && st == GP_OK; i++)
        if (s->g[i].desc.pinned)
            st = gp_stream_load(s, i, 0);
    if (st != GP_OK) {
        gp_streamer_destroy(s); /* keeps the failing call's message */
        return st;
    }
    /* The pinned loads belong to no step: their copy time is dropped too. */
    double copy_s, waited[GP_STREAM_KIND_COUNT];
    if (o->collect)
        (void)o->collect(p->backend.be, &copy_s, waited);
    memset(&s->st, 0, sizeof s->st);
    s->st.device_bytes = s->st.peak_device_bytes = s->held;
    s->st.kept_groups = s->kept_groups;
    s->st.kept_bytes = s->kept_bytes;
    *out = s;
    return GP_OK;
}

void gp_streamer_destroy(gp_streamer *s)
{
    if (!s)
        return;
    const gp_stream_backend_ops *o = s->p.backend.ops;
    void *be = s->p.backend.be;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", gp_last_error()); /* a failed create's reason survives */
    for (int i = 0; i < s->p.n_groups; i++) {
        gp_stream_slot_state *g = &s->g[i];
        if (g->in_use > 0) {
            char name[96];
            gp_stream_group_name(&g->desc, name, sizeof name);
            fprintf(stderr, "greenpipe: gp_streamer_destroy: group %s still has %d marks\n", name, g->in_use);
        }
        void *wait[GP_STREAM_MAX_READERS + 1];
        int n = 0;
        for (int r = 0; r < GP_STREAM_MAX_READERS; r++)
            if (g->readers[r].stream && g->slot)
                wait[n++] = g->readers[r].marker;
        if (g->slot) {
            wait[n++] = g->ready;
            /* A host wait here, not only the ordered free: the backend may
             * tear down its copy stream right after. */
            for (int k = 0; k < n; k++)
                (void)o->marker_wait(be, wait[k]);
            o->slot_free(be, g->slot, wait, n);
        }
        for (int r = 0; r < GP_STREAM_MAX_READERS; r++)
            if (g->readers[r].marker)
                o->marker_destroy(be, g->readers[r].marker);
        if (g->ready)
            o->marker_destroy(be, g->ready);
    }
    pthread_mutex_destroy(&s->lock);
    free(s->g);
    free(s->order);
    free(s);
    gp_set_error("%s", msg);
}

static int gp_stream_bad(gp_streamer *s, int group) { return !s || group < 0 || group >= s->p.n_groups; }

int gp_streamer_in_use(gp_streamer *s, int group)
{
    if (gp_stream_bad(s, group))
        return 0;
    pthread_mutex_lock(&s->lock);
    int n = s->g[group].in_use;
    pthread_mutex_unlock(&s->lock);
    return n;
}

int gp_streamer_resident(gp_streamer *s, int group) { return gp_streamer_slot(s, group) != NULL; }

void *gp_streamer_slot(gp_streamer *s, int group)
{
    if (gp_stream_bad(s, group))
        return NULL;
    pthread_mutex_lock(&s->lock);
    void *slot = s->g[group].slot;
    pthread_mutex_unlock(&s->lock);
    return slot;
}

uint64_t gp_streamer_device_bytes(gp_streamer *s)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->lock);
    uint64_t b = s->held;
    pthread_mutex_unlock(&s->lock);
    return b;
}

gp_status gp_streamer_check(gp_streamer *s)
{
    if (!s)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_streamer_check: s is NULL");
    gp_status st = GP_OK;
    uint64_t sum = 0;
    char name[96];
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->p.n_groups && st == GP_OK; i++) {
        const gp_stream_slot_state *g = &s->g[i];
        gp_stream_group_name(&g->desc, name, sizeof name);
        if (g->slot)
            sum += g->desc.bytes;
        if (g->in_use < 0) {
            gp_set_error("gp_streamer_check: group %d (%s) has %d marks", i, name, g->in_use);
            st = GP_ERR_STATE;
        } else if (g->in_use > 0 && !g->slot) {
            gp_set_error("gp_streamer_check: group %d (%s) is in use (%d marks) but not resident", i, name,
                         g->in_use);
            st = GP_ERR_STATE;
        } else if (g->desc.pinned && !g->slot) {
            gp_set_error("gp_streamer_check: pinned group %d (%s) is not resident", i, name);
            st = GP_ERR_STATE;
        }
    }
    if (st == GP_OK && sum != s->held) {
        gp_set_error("gp_streamer_check: resident groups hold %llu bytes, the count says %llu",
                     (unsigned long long)sum, (unsigned long long)s->held);
        st = GP_ERR_STATE;
    }
    if (st == GP_OK && s->held > s->p.budget_bytes) {
        gp_set_error("gp_streamer_check: %llu bytes held, over the budget of %llu",
                     (unsigned long long)s->held, (unsigned long long)s->p.budget_bytes);
        st = GP_ERR_STATE;
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}

gp_status gp_streamer_stats_get(gp_streamer *s, gp_streamer_stats *out, int reset)
{
    if (!s || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_streamer_stats_get: %s is NULL", s ? "out" : "s");
    gp_status st = GP_OK;
    pthread_mutex_lock(&s->lock);
    const gp_stream_backend_ops *o = s->p.backend.ops;
    if (o->collect) {
        double copy_s = 0.0, waited[GP_STREAM_KIND_COUNT] = {0};
        st = o->collect(s->p.backend.be, &copy_s, waited);
        if (st == GP_OK) {
            s->st.copy_s += copy_s;
            for (int k = 0; k < GP_STREAM_KIND_COUNT; k++)
                s->st.waited_s[k] += waited[k];
        }
    }
    s->st.device_bytes = s->held;
    s->st.gbps = s->st.copy_s > 0.0 ? (double)s->st.bytes_streamed / s->st.copy_s / 1e9 : 0.0;
    *out = s->st;
    if (reset) {
        memset(&s->st, 0, sizeof s->st);
        s->st.device_bytes = s->st.peak_device_bytes = s->held;
        s->st.kept_groups = s->kept_groups;
        s->st.kept_bytes = s->kept_bytes;
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}

gp_status gp_streamer_copy_log(gp_streamer *s, void *ref, gp_stream_copy *out, int cap, int *n)
{
    if (n)
        *n = 0;
    if (!s || !ref || !out || cap < 1 || !n)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_streamer_copy_log: streamer %p, ref %p, out %p, n %p, cap %d: none may "
                "be NULL, cap at least 1", (void *)s, ref, (void *)out, (void *)n, cap);
    const gp_stream_backend_ops *o = s->p.backend.ops;
    if (!o->copy_log)
        GP_FAIL(GP_ERR_UNSUPPORTED, "gp_streamer_copy_log: the streaming backend keeps no copy log");
    /* The lock keeps copies (prefetches from an acquire) out while the log is read. */
    pthread_mutex_lock(&s->lock);
    gp_status st = o->copy_log(s->p.backend.be, ref, out, cap, n);
    pthread_mutex_unlock(&s->lock);
    return st;
}
