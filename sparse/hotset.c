/* The hot-set tracker: decayed per-neuron activation frequencies, the
 * cache capacity a byte budget gives, and the reload plans that keep each
 * layer's GPU-cached neurons the most frequently active ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gp_sparse.h"

struct gp_hotset {
    gp_config cfg;
    gp_hotset_params p;
    int L, F, H;
    float *freq;          /* [L][F] */
    int *slots;           /* [L][H] slot -> neuron */
    int *slot_of;         /* [L][F] neuron -> slot, -1 cold */
    uint8_t *observed;    /* [L] this step */
    uint64_t neuron_bytes;
    gp_hotset_stats st;
};

gp_hotset_params gp_hotset_default_params(void)
{
    gp_hotset_params p = {
        .decay = 0.99, .reload_window = 64, .margin = 0.05, .max_swaps = 0, .hot_per_layer = 0,
        .dtype = GP_DTYPE_BF16,
    };
    return p;
}

uint64_t gp_hotset_neuron_bytes(const gp_config *cfg, gp_dtype dt)
{
    return 3u * (uint64_t)cfg->hidden * gp_dtype_size(dt);
}

gp_status gp_hotset_capacity(const gp_config *cfg, gp_dtype dt, uint64_t budget_bytes, int *hot_per_layer,
                             bool *all_hot)
{
    if (!cfg || !hot_per_layer || !all_hot)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_capacity: cfg, hot_per_layer and all_hot must not be NULL");
    GP_TRY(gp_dtype_check_half(dt, "hot-set capacity"));
    if (cfg->n_layers < 1 || cfg->hidden < 1 || cfg->ffn < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "hot-set capacity: config %s has n_layers %d, hidden %d, ffn %d (each must be "
                ">= 1)", cfg->name, cfg->n_layers, cfg->hidden, cfg->ffn);
    const uint64_t per_layer_neuron = gp_hotset_neuron_bytes(cfg, dt) * (uint64_t)cfg->n_layers;
    const uint64_t all = per_layer_neuron * (uint64_t)cfg->ffn;
    *all_hot = false;
    if (budget_bytes >= all) {
        *hot_per_layer = cfg->ffn;
        *all_hot = true;
        return GP_OK;
    }
    const int min_h = cfg->ffn < GP_HOTSET_ALIGN ? cfg->ffn : GP_HOTSET_ALIGN;
    const uint64_t min_bytes = per_layer_neuron * (uint64_t)min_h;
    if (budget_bytes < min_bytes)
        GP_FAIL(GP_ERR_INVALID_ARG, "hot-set budget %llu bytes: the least hot set, %d neurons in each of %d "
                "layers at %llu bytes a neuron (gate row, up row, down column of %d %s values each), needs %llu "
                "bytes; give at least that, or run the FFN without a GPU hot set",
                (unsigned long long)budget_bytes, min_h, cfg->n_layers,
                (unsigned long long)gp_hotset_neuron_bytes(cfg, dt), cfg->hidden, gp_dtype_flag_name(dt),
                (unsigned long long)min_bytes);
    uint64_t h = budget_bytes / per_layer_neuron; /* < ffn: budget < all */
    h -= h % GP_HOTSET_ALIGN;
    *hot_per_layer = (int)h;
    return GP_OK;
}

/* Higher frequency first, then lower index; NaN below every number. */
static int gp_hot_before(const float *f, int a, int b)
{
    float x = f[a], y = f[b];
    int xn = isnan(x), yn = isnan(y);
    if (xn != yn)
        return yn;
    if (!xn && x != y)
        return x > y;
    return a < b;
}

/* Sorts idx[n] hottest first. A heap sort (the coldest at the root, moved
 * to the end) rather than qsort, whose comparator could reach the
 * frequencies only through global state. The order is total (ties by
 * index), so an unstable sort gives one answer. */
static void gp_hot_sort(const float *f, int *idx, int n)
{
    if (n < 2)
        return;
    for (int start = n / 2 - 1, end = n;;) {
        /* sift down idx[start] in a heap whose root is the coldest */
        int root = start;
        for (;;) {
            int child = 2 * root + 1;
            if (child >= end)
                break;
            if (child + 1 < end && gp_hot_before(f, idx[child], idx[child + 1]))
                child++;
            if (!gp_hot_before(f, idx[root], idx[child]))
                break;
            int t = idx[root];
            idx[root] = idx[child];
            idx[child] = t;
            root = child;
        }
        if (start > 0) {
            start--;
        } else if (end > 1) {
            end--;
            int t = idx[0];
            idx[0] = idx[end];
            idx[end] = t;
        } else {
            break;
        }
    }
}

gp_status gp_hotset_choose(const float *freq, int n, int H, int *out)
{
    if (!freq || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_choose: freq and out must not be NULL");
    if (n < 1 || H < 1 || H > n)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_choose: H %d of n %d neurons (allowed 1 <= H <= n)", H, n);
    int *idx = malloc((size_t)n * sizeof *idx);
    if (!idx)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_hotset_choose: out of memory for %d indices", n);
    for (int i = 0; i < n; i++)
        idx[i] = i;
    gp_hot_sort(freq, idx, n);
    memcpy(out, idx, (size_t)H * sizeof *out);
    free(idx);
    return GP_OK;
}

static gp_status gp_hotset_check_params(const gp_config *cfg, const gp_hotset_params *p)
{
    if (!(p->decay > 0.0 && p->decay < 1.0))
        GP_FAIL(GP_ERR_INVALID_ARG, "hot-set params: decay %g (allowed: 0 < decay < 1)", p->decay);
    if (p->reload_window < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "hot-set params: reload_window %d (allowed: >= 1 steps)", p->reload_window);
    if (!(p->margin >= 0.0 && p->margin <= 1.0))
        GP_FAIL(GP_ERR_INVALID_ARG, "hot-set params: margin %g (allowed: 0 <= margin <= 1, frequencies lie in "
                "[0, 1])", p->margin);
    if (p->max_swaps < 0)
        GP_FAIL(GP_ERR_INVALID_ARG, "hot-set params: max_swaps %d (allowed: 0 for no cap, or >= 1)", p->max_swaps);
    if (p->hot_per_layer < 1 || p->hot_per_layer > cfg->ffn)
        GP_FAIL(GP_ERR_INVALID_ARG, "hot-set params: hot_per_layer %d (allowed: 1..ffn = %d; gp_hotset_capacity "
                "derives it from a byte budget)", p->hot_per_layer, cfg->ffn);
    if (!gp_dtype_is_half(p->dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "hot-set params: dtype %s (allowed: BF16 or F16)", gp_dtype_name(p->dtype));
    return GP_OK;
}

void gp_hotset_destroy(gp_hotset *h)
{
    if (!h)
        return;
    free(h->freq);
    free(h->slots);
    free(h->slot_of);
    free(h->observed);
    free(h);
}

gp_status gp_hotset_create(const gp_config *cfg, const gp_hotset_params *p, const gp_sparsity *calib,
                           gp_hotset **out)
{
    if (!cfg || !p || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_create: cfg, p and out must not be NULL");
    if (cfg->n_layers < 1 || cfg->ffn < 1 || cfg->hidden < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_create: config %s has n_layers %d, hidden %d, ffn %d (each must be "
                ">= 1)", cfg->name, cfg->n_layers, cfg->hidden, cfg->ffn);
    GP_TRY(gp_hotset_check_params(cfg, p));
    if (calib)
        GP_TRY(gp_sparsity_check(calib, cfg));
    const int L = cfg->n_layers, F = cfg->ffn, H = p->hot_per_layer;
    gp_hotset *h = calloc(1, sizeof *h);
    if (!h)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_hotset_create: out of memory");
    h->cfg = *cfg;
    h->p = *p;
    h->L = L, h->F = F, h->H = H;
    h->neuron_bytes = gp_hotset_neuron_bytes(cfg, p->dtype);
    h->freq = calloc((size_t)L * F, sizeof *h->freq);
    h->slots = malloc((size_t)L * H * sizeof *h->slots);
    h->slot_of = malloc((size_t)L * F * sizeof *h->slot_of);
    h->observed = calloc((size_t)L, 1);
    if (!h->freq || !h->slots || !h->slot_of || !h->observed) {
        gp_hotset_destroy(h);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_hotset_create: out of memory for %d layers of %d neurons", L, F);
    }
    if (calib && calib->freq)
        memcpy(h->freq, calib->freq, (size_t)L * F * sizeof *h->freq);
    for (int l = 0; l < L; l++) {
        int *sl = h->slots + (size_t)l * H, *so = h->slot_of + (size_t)l * F;
        gp_status st = gp_hotset_choose(h->freq + (size_t)l * F, F, H, sl);
        if (st != GP_OK) {
            gp_hotset_destroy(h);
            return st;
        }
        for (int j = 0; j < F; j++)
            so[j] = -1;
        for (int s = 0; s < H; s++)
            so[sl[s]] = 0;
        for (int j = 0, s = 0; j < F; j++) /* ascending neuron order in the slots */
            if (so[j] == 0)
                sl[s] = j, so[j] = s++;
    }
    *out = h;
    return GP_OK;
}

int gp_hotset_capacity_of(const gp_hotset *h)
{
    return h->H;
}

static int gp_hotset_layer_ok(const gp_hotset *h, int layer)
{
    return h && layer >= 0 && layer < h->L;
}

const int *gp_hotset_slots(const gp_hotset *h, int layer)
{
    return gp_hotset_layer_ok(h, layer) ? h->slots + (size_t)layer * h->H : NULL;
}

int gp_hotset_slot_of(const gp_hotset *h, int layer, int j)
{
    if (!gp_hotset_layer_ok(h, layer) || j < 0 || j >= h->F)
        return -1;
    return h->slot_of[(size_t)layer * h->F + j];
}

const float *gp_hotset_freq(const gp_hotset *h, int layer)
{
    return gp_hotset_layer_ok(h, layer) ? h->freq + (size_t)layer * h->F : NULL;
}

gp_status gp_hotset_cold_list(const gp_hotset *h, int layer, int *out, int *n)
{
    if (!h || !out || !n)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_cold_list: h, out and n must not be NULL");
    if (!gp_hotset_layer_ok(h, layer))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_cold_list: layer %d (allowed 0..%d)", layer, h->L - 1);
    const int *so = h->slot_of + (size_t)layer * h->F;
    int c = 0;
    for (int j = 0; j < h->F; j++)
        if (so[j] < 0)
            out[c++] = j;
    *n = c;
    return GP_OK;
}

gp_status gp_hotset_observe(gp_hotset *h, int layer, const uint8_t *active)
{
    if (!h || !active)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_observe: h and active must not be NULL");
    if (!gp_hotset_layer_ok(h, layer))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_observe: layer %d (allowed 0..%d)", layer, h->L - 1);
    if (h->observed[layer])
        GP_FAIL(GP_ERR_STATE, "gp_hotset_observe: layer %d was already observed in this step (once per layer, "
                "then gp_hotset_end_step)", layer);
    h->observed[layer] = 1;
    const float d = (float)h->p.decay, e = (float)(1.0 - h->p.decay);
    float *f = h->freq + (size_t)layer * h->F;
    const int *so = h->slot_of + (size_t)layer * h->F;
    long act = 0, hit = 0;
    for (int j = 0; j < h->F; j++) {
        const int a = active[j] != 0;
        f[j] = d * f[j] + (a ? e : 0.0f);
        act += a;
        hit += a && so[j] >= 0;
    }
    h->st.active += act;
    h->st.hits += hit;
    return GP_OK;
}

gp_status gp_hotset_observe_rows(gp_hotset *h, int layer, int B, const float *act, float t)
{
    if (!h || !act)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_observe_rows: h and act must not be NULL");
    if (B < 1 || B > GP_SPARSE_MAX_B)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_observe_rows: B %d (allowed 1..%d)", B, GP_SPARSE_MAX_B);
    if (!(t >= 0.0f) || isinf(t))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_observe_rows: threshold %g (allowed: finite, >= 0)", (double)t);
    uint8_t *a = calloc((size_t)h->F, 1);
    if (!a)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_hotset_observe_rows: out of memory");
    for (int b = 0; b < B; b++)
        for (int j = 0; j < h->F; j++)
            a[j] |= fabsf(act[(size_t)b * h->F + j]) > t;
    gp_status st = gp_hotset_observe(h, layer, a);
    free(a);
    return st;
}

gp_status gp_hotset_end_step(gp_hotset *h, int *reload_due)
{
    if (!h)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_end_step: h is NULL");
    for (int l = 0; l < h->L; l++)
        if (!h->observed[l])
            GP_FAIL(GP_ERR_STATE, "gp_hotset_end_step: layer %d was not observed in this step (every layer once "
                    "per decode step)", l);
    memset(h->observed, 0, (size_t)h->L);
    h->st.steps++;
    if (reload_due)
        *reload_due = h->st.steps % h->p.reload_window == 0;
    return GP_OK;
}

static int gp_hotset_plan_cap(const gp_hotset *h)
{
    int cap = h->H < h->F - h->H ? h->H : h->F - h->H;
    if (h->p.max_swaps > 0 && h->p.max_swaps < cap)
        cap = h->p.max_swaps;
    return cap;
}

gp_status gp_hotset_plan_alloc(const gp_hotset *h, gp_hotset_plan *plan)
{
    if (!h || !plan)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_plan_alloc: h and plan must not be NULL");
    memset(plan, 0, sizeof *plan);
    plan->n_layers = h->L;
    plan->cap = gp_hotset_plan_cap(h);
    plan->n_swaps = calloc((size_t)h->L, sizeof *plan->n_swaps);
    plan->swaps = malloc(((size_t)h->L * plan->cap + 1) * sizeof *plan->swaps);
    if (!plan->n_swaps || !plan->swaps) {
        gp_hotset_plan_free(plan);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_hotset_plan_alloc: out of memory for %d layers x %d swaps", h->L,
                gp_hotset_plan_cap(h));
    }
    return GP_OK;
}

void gp_hotset_plan_free(gp_hotset_plan *plan)
{
    if (!plan)
        return;
    free(plan->n_swaps);
    free(plan->swaps);
    memset(plan, 0, sizeof *plan);
}

gp_status gp_hotset_plan_make(const gp_hotset *h, gp_hotset_plan *plan)
{
    if (!h || !plan || !plan->n_swaps || !plan->swaps)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_plan_make: h and an allocated plan (gp_hotset_plan_alloc) needed");
    if (plan->n_layers != h->L || plan->cap != gp_hotset_plan_cap(h))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_plan_make: the plan was allocated for %d layers x %d swaps, this "
                "tracker needs %d x %d", plan->n_layers, plan->cap, h->L, gp_hotset_plan_cap(h));
    const int F = h->F, H = h->H;
    plan->total = 0;
    plan->bytes = 0;
    int *hot = malloc(((size_t)H + 1) * sizeof *hot), *cold = malloc(((size_t)(F - H) + 1) * sizeof *cold);
    if (!hot || !cold) {
        free(hot);
        free(cold);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_hotset_plan_make: out of memory");
    }
    for (int l = 0; l < h->L; l++) {
        const float *f = h->freq + (size_t)l * F;
        const int *so = h->slot_of + (size_t)l * F;
        int nh = 0, nc = 0;
        for (int j = 0; j < F; j++) {
            if (so[j] >= 0)
                hot[nh++] = j;
            else
                cold[nc++] = j;
        }
        gp_hot_sort(f, hot, nh);  /* hottest first: the coldest hot neuron is last */
        gp_hot_sort(f, cold, nc); /* hottest cold neuron first */
        gp_hotset_swap *sw = plan->swaps + (size_t)l * plan->cap;
        int n = 0;
        for (; n < plan->cap && n < nh && n < nc; n++) {
            const int in = cold[n], out = hot[nh - 1 - n];
            /* NaN never beats anything: a NaN frequency stays where it is */
            if (!((double)f[in] > (double)f[out] + h->p.margin))
                break;
            sw[n] = (gp_hotset_swap){.slot = so[out], .out = out, .in = in};
        }
        plan->n_swaps[l] = n;
        plan->total += n;
    }
    plan->bytes = (uint64_t)plan->total * h->neuron_bytes;
    free(hot);
    free(cold);
    return GP_OK;
}

gp_status gp_hotset_plan_commit(gp_hotset *h, const gp_hotset_plan *plan)
{
    if (!h || !plan || !plan->n_swaps || !plan->swaps)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_plan_commit: h and a made plan needed");
    if (plan->n_layers != h->L || plan->cap != gp_hotset_plan_cap(h))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_hotset_plan_commit: the plan was allocated for %d layers x %d swaps, this "
                "tracker needs %d x %d", plan->n_layers, plan->cap, h->L, gp_hotset_plan_cap(h));
    /* check every swap against the current tables before changing any */
    for (int l = 0; l < h->L; l++) {
        const int *sl = h->slots + (size_t)l * h->H, *so = h->slot_of + (size_t)l * h->F;
        const gp_hotset_swap *sw = plan->swaps + (size_t)l * plan->cap;
        if (plan->n_swaps[l] < 0 || plan->n_swaps[l] > plan->cap)
            GP_FAIL(GP_ERR_STATE, "gp_hotset_plan_commit: layer %d has %d swaps (allowed 0..%d)", l,
                    plan->n_swaps[l], plan->cap);
        for (int i = 0; i < plan->n_swaps[l]; i++) {
            const gp_hotset_swap s = sw[i];
            if (s.slot < 0 || s.slot >= h->H || s.in < 0 || s.in >= h->F || sl[s.slot] != s.out)
                GP_FAIL(GP_ERR_STATE, "gp_hotset_plan_commit: layer %d swap %d (slot %d, out %d, in %d) does not "
                        "match the current hot set (was the plan made for it?)", l, i, s.slot, s.out, s.in);
            if (so[s.in] >= 0)
                GP_FAIL(GP_ERR_STATE, "gp_hotset_plan_commit: layer %d swap %d brings in neuron %d, which is "
                        "already hot (slot %d)", l, i, s.in, so[s.in]);
            for (int k = 0; k < i; k++)
                if (sw[k].slot == s.slot || sw[k].in == s.in)
                    GP_FAIL(GP_ERR_STATE, "gp_hotset_plan_commit: layer %d swaps %d and %d share a slot or an "
                            "incoming neuron", l, k, i);
        }
    }
    for (int l = 0; l < h->L; l++) {
        int *sl = h->slots + (size_t)l * h->H, *so = h->slot_of + (size_t)l * h->F;
        const gp_hotset_swap *sw = plan->swaps + (size_t)l * plan->cap;
        for (int i = 0; i < plan->n_swaps[l]; i++) {
            so[sw[i].out] = -1;
            so[sw[i].in] = sw[i].slot;
            sl[sw[i].slot] = sw[i].in;
        }
    }
    h->st.reloads++;
    h->st.swaps += plan->total;
    h->st.bytes += (uint64_t)plan->total * h->neuron_bytes;
    return GP_OK;
}

void gp_hotset_get_stats(gp_hotset *h, gp_hotset_stats *out, int reset)
{
    if (!h || !out)
        return;
    *out = h->st;
    out->hit_rate = h->st.active > 0 ? (double)h->st.hits / (double)h->st.active : 0.0;
    if (reset)
        memset(&h->st, 0, sizeof h->st);
}
