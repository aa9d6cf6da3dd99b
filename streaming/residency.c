/* The weight-streaming manager's residency: ensure, LRU eviction that hands
 * memory on only after the last readers' markers, marks, and prefetch. */
#include "streamer_impl.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#define GP_STREAM_OPS(s) ((s)->p.backend.ops)
#define GP_STREAM_BE(s) ((s)->p.backend.be)

static int gp_stream_bad_group(gp_streamer *s, int gi, const char *fn)
{
    if (!s) {
        gp_set_error("%s: s is NULL", fn);
        return 1;
    }
    if (gi < 0 || gi >= s->p.n_groups) {
        gp_set_error("%s: group %d out of range (0 to %d)", fn, gi, s->p.n_groups - 1);
        return 1;
    }
    return 0;
}

/* In the prefetch window: the group at the position of the last advance and
 * the D streamed groups after it (pinned ones never move and on-demand ones
 * are never prefetched, so they do not count). A prefetch evicting one of
 * these would only copy it back sooner. */
static int gp_stream_soon(const gp_streamer *s, int gi)
{
    if (s->cursor < 0)
        return 0;
    if (s->order[s->cursor] == gi)
        return 1;
    for (int k = 1, found = 0; k <= s->p.n_order && found < s->p.prefetch_depth; k++) {
        int o = s->order[(s->cursor + k) % s->p.n_order];
        if (s->g[o].desc.pinned || s->g[o].desc.on_demand)
            continue;
        if (o == gi)
            return 1;
        found++;
    }
    return 0;
}

/* Least recently used group that may go: resident, unpinned, unmarked.
 * Marked groups are never candidates, which is the whole safety of the
 * in-use count: a stage between acquire and release keeps its memory. */
static int gp_stream_victim(const gp_streamer *s, int except, int allow_soon)
{
    int best = -1;
    for (int i = 0; i < s->p.n_groups; i++) {
        const gp_stream_slot_state *g = &s->g[i];
        if (i == except || !g->slot || g->desc.pinned || g->in_use > 0)
            continue;
        if (!allow_soon && gp_stream_soon(s, i))
            continue;
        if (best < 0 || g->last_use < s->g[best].last_use)
            best = i;
    }
    return best;
}

/* Detaches v's slot and lists the markers its next user must wait for: the
 * last reader on each stream since v was loaded. */
static void *gp_stream_detach(gp_streamer *s, int v, void **wait, int *n_wait)
{
    gp_stream_slot_state *g = &s->g[v];
    int n = 0;
    for (int r = 0; r < GP_STREAM_MAX_READERS; r++) {
        if (g->readers[r].stream)
            wait[n++] = g->readers[r].marker;
        g->readers[r].stream = NULL; /* the marker object stays for the next load */
    }
    *n_wait = n;
    void *slot = g->slot;
    g->slot = NULL;
    s->held -= g->desc.bytes;
    s->st.evictions++;
    return slot;
}

static void gp_stream_no_room(gp_streamer *s, int gi)
{
    char name[96], held[600] = "";
    size_t len = 0;
    uint64_t pinned = 0;
    for (int i = 0; i < s->p.n_groups; i++) {
        const gp_stream_slot_state *g = &s->g[i];
        if (g->desc.pinned)
            pinned += g->desc.bytes;
        else if (g->slot && g->in_use > 0 && len + 100 < sizeof held) {
            gp_stream_group_name(&g->desc, name, sizeof name);
            len += (size_t)snprintf(held + len, sizeof held - len, "%s%s", len ? ", " : "", name);
        }
    }
    gp_stream_group_name(&s->g[gi].desc, name, sizeof name);
    gp_set_error("gp_streamer_ensure: no room for %s in the budget of %llu bytes: %llu held, %llu of them "
                 "pinned, the rest in use by stages (%s); release groups before acquiring more",
                 name, (unsigned long long)s->p.budget_bytes, (unsigned long long)s->held,
                 (unsigned long long)pinned, len ? held : "none");
}

gp_status gp_stream_load(gp_streamer *s, int gi, int prefetch)
{
    gp_stream_slot_state *g = &s->g[gi];
    const gp_stream_backend_ops *o = GP_STREAM_OPS(s);
    void *be = GP_STREAM_BE(s);
    uint64_t need = g->desc.bytes;
    void *slot = NULL, *wait[GP_STREAM_MAX_READERS];
    int n_wait = 0;
    /* Room first, so a load that cannot succeed evicts nothing. held <=
     * budget always, so the subtraction cannot wrap. */
    uint64_t room = s->p.budget_bytes - s->held;
    for (int i = 0; i < s->p.n_groups && room < need; i++) {
        const gp_stream_slot_state *c = &s->g[i];
        if (i != gi && c->slot && !c->desc.pinned && c->in_use == 0 && !(prefetch && gp_stream_soon(s, i)))
            room += c->desc.bytes;
    }
    if (room < need) {
        if (prefetch)
            return GP_SOFT_FULL;
        gp_stream_no_room(s, gi);
        return GP_ERR_DEVICE_MEMORY;
    }
    while (need > s->p.budget_bytes - s->held) {
        int v = gp_stream_victim(s, gi, 0);
        if (v < 0 && !prefetch)
            v = gp_stream_victim(s, gi, 1);
        assert(v >= 0); /* the room was counted above */
        void *vw[GP_STREAM_MAX_READERS];
        int vn;
        void *vs = gp_stream_detach(s, v, vw, &vn);
        if (s->g[v].desc.bytes == need) {
            /* Same size: the slot passes on as is and the copy waits on the
             * GPU for its readers, so no host wait and no allocator call. */
            slot = vs;
            memcpy(wait, vw, (size_t)vn * sizeof *vw);
            n_wait = vn;
            break;
        }
        o->slot_free(be, vs, vw, vn);
    }
    gp_status st = GP_OK;
    if (!slot && (st = o->slot_alloc(be, need, &slot)) != GP_OK)
        return st;
    if (o->copy_label)
        o->copy_label(be, g->desc.kind, g->desc.layer);
    st = o->copy_h2d(be, slot, g->desc.host, need, s->p.chunk_bytes, wait, n_wait, g->ready);
    if (st != GP_OK) {
        /* The slot's contents are unknown now: give it back (after its former
         * readers) instead of keeping a half-copied group. */
        o->slot_free(be, slot, wait, n_wait);
        return st;
    }
    g->slot = slot;
    s->held += need;
    if (s->held > s->st.peak_device_bytes)
        s->st.peak_device_bytes = s->held;
    g->last_use = ++s->tick;
    s->st.loads++;
    s->st.bytes_streamed += need;
    return GP_OK;
}

static gp_status gp_stream_ensure_locked(gp_streamer *s, int gi)
{
    if (s->g[gi].slot) {
        s->st.hits++;
        return GP_OK;
    }
    s->st.misses++;
    return gp_stream_load(s, gi, 0);
}

static gp_status gp_stream_wait_locked(gp_streamer *s, int gi, void *stream)
{
    gp_stream_slot_state *g = &s->g[gi];
    if (!g->slot) {
        char name[96];
        gp_stream_group_name(&g->desc, name, sizeof name);
        GP_FAIL(GP_ERR_STATE, "gp_streamer_wait_ready: group %d (%s) is not resident: ensure it first", gi,
                name);
    }
    return GP_STREAM_OPS(s)->stream_wait(GP_STREAM_BE(s), stream, g->ready, g->desc.kind);
}

static gp_status gp_stream_unmark_locked(gp_streamer *s, int gi, void *stream)
{
    gp_stream_slot_state *g = &s->g[gi];
    char name[96];
    if (g->in_use <= 0) {
        gp_stream_group_name(&g->desc, name, sizeof name);
        GP_FAIL(GP_ERR_STATE, "gp_streamer_unmark: group %d (%s) released more often than marked", gi, name);
    }
    /* The count drops even when recording fails below: a lost mark would pin
     * the group for good. */
    g->in_use--;
    if (!stream)
        return GP_OK;
    const gp_stream_backend_ops *o = GP_STREAM_OPS(s);
    void *be = GP_STREAM_BE(s);
    gp_stream_reader *rd = NULL, *free_rd = NULL;
    for (int r = 0; r < GP_STREAM_MAX_READERS && !rd; r++) {
        if (g->readers[r].stream == stream)
            rd = &g->readers[r];
        else if (!g->readers[r].stream && !free_rd)
            free_rd = &g->readers[r];
    }
    gp_status st = GP_OK;
    if (!rd && free_rd) {
        rd = free_rd;
        if (!rd->marker && (st = o->marker_create(be, &rd->marker)) != GP_OK)
            return st;
        rd->stream = stream;
    } else if (!rd) {
        /* More reader streams than entries: this stream takes over entry 0
         * after a GPU-side wait on it, so its marker covers both readers. */
        rd = &g->readers[0];
        if ((st = o->stream_wait(be, stream, rd->marker, g->desc.kind)) != GP_OK)
            return st;
        rd->stream = stream;
    }
    return o->marker_record(be, stream, rd->marker);
}

gp_status gp_streamer_ensure(gp_streamer *s, int group)
{
    if (gp_stream_bad_group(s, group, "gp_streamer_ensure"))
        return GP_ERR_INVALID_ARG;
    pthread_mutex_lock(&s->lock);
    gp_status st = gp_stream_ensure_locked(s, group);
    pthread_mutex_unlock(&s->lock);
    return st;
}

gp_status gp_streamer_wait_ready(gp_streamer *s, int group, void *stream)
{
    if (gp_stream_bad_group(s, group, "gp_streamer_wait_ready"))
        return GP_ERR_INVALID_ARG;
    pthread_mutex_lock(&s->lock);
    gp_status st = gp_stream_wait_locked(s, group, stream);
    pthread_mutex_unlock(&s->lock);
    return st;
}

gp_status gp_streamer_mark_in_use(gp_streamer *s, int group)
{
    if (gp_stream_bad_group(s, group, "gp_streamer_mark_in_use"))
        return GP_ERR_INVALID_ARG;
    pthread_mutex_lock(&s->lock);
    s->g[group].in_use++;
    s->g[group].last_use = ++s->tick;
    pthread_mutex_unlock(&s->lock);
    return GP_OK;
}

gp_status gp_streamer_unmark(gp_streamer *s, int group, void *stream)
{
    if (gp_stream_bad_group(s, group, "gp_streamer_unmark"))
        return GP_ERR_INVALID_ARG;
    pthread_mutex_lock(&s->lock);
    gp_status st = gp_stream_unmark_locked(s, group, stream);
    pthread_mutex_unlock(&s->lock);
    return st;
}

gp_status gp_streamer_acquire(gp_streamer *s, int group, void *stream)
{
    if (gp_stream_bad_group(s, group, "gp_streamer_acquire"))
        return GP_ERR_INVALID_ARG;
    pthread_mutex_lock(&s->lock);
    /* Marked before ensure, so the load's own evictions cannot pick it. */
    s->g[group].in_use++;
    s->g[group].last_use = ++s->tick;
    gp_status st = gp_stream_ensure_locked(s, group);
    if (st == GP_OK)
        st = gp_stream_wait_locked(s, group, stream);
    if (st != GP_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", gp_last_error());
        (void)gp_stream_unmark_locked(s, group, NULL); /* nothing was enqueued: no reader */
        gp_set_error("%s", why);
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}

gp_status gp_streamer_release(gp_streamer *s, int group, void *stream)
{
    if (gp_stream_bad_group(s, group, "gp_streamer_release"))
        return GP_ERR_INVALID_ARG;
    if (!stream)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_streamer_release: stream is NULL (the stage's reads need a marker)");
    return gp_streamer_unmark(s, group, stream);
}

gp_status gp_streamer_advance(gp_streamer *s, int pos)
{
    if (!s)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_streamer_advance: s is NULL");
    if (pos < 0 || pos >= s->p.n_order)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_streamer_advance: position %d out of range (0 to %d)", pos,
                s->p.n_order - 1);
    gp_status st = GP_OK;
    pthread_mutex_lock(&s->lock);
    s->cursor = pos;
    /* D streamed groups ahead, however many pinned ones lie between: the copy
     * engine keeps working while stages run on resident groups. On-demand
     * groups are left to their acquire: the steps that skip them would
     * otherwise pay for copies nobody reads. */
    for (int k = 1, found = 0; k <= s->p.n_order && found < s->p.prefetch_depth && st == GP_OK; k++) {
        int gi = s->order[(pos + k) % s->p.n_order];
        if (s->g[gi].desc.pinned || s->g[gi].desc.on_demand)
            continue;
        found++;
        if (s->g[gi].slot)
            continue;
        st = gp_stream_load(s, gi, 1);
        if (st == GP_OK)
            s->st.prefetches++;
        else if (st == GP_SOFT_FULL)
            s->st.prefetch_skipped++;
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}
