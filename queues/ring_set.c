/* A fixed set of per-layer rings sharing one set of parameters. */
#include "gp_queues.h"

#include <stdlib.h>

/* More rings than any model has layers; guards the allocation size. */
#define GP_RING_SET_MAX 65536

struct gp_ring_set {
    int n;
    gp_ring *rings[]; /* [n] */
};

gp_status gp_ring_set_create(int n_rings, const gp_ring_params *p, gp_ring_set **out)
{
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_ring_set_create: out is NULL");
    *out = NULL;
    if (n_rings < 1 || n_rings > GP_RING_SET_MAX)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_ring_set_create: %d rings is not allowed: 1 to %d", n_rings,
                GP_RING_SET_MAX);
    gp_ring_set *s = calloc(1, sizeof *s + (size_t)n_rings * sizeof s->rings[0]);
    if (!s)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_ring_set_create: out of memory for %d rings", n_rings);
    s->n = n_rings;
    for (int i = 0; i < n_rings; i++) {
        gp_status st = gp_ring_create(p, &s->rings[i]);
        if (st != GP_OK) {
            gp_ring_set_destroy(s); /* keeps the ring's error text */
            return st;
        }
    }
    *out = s;
    return GP_OK;
}

void gp_ring_set_destroy(gp_ring_set *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        gp_ring_destroy(s->rings[i]);
    free(s);
}

gp_ring *gp_ring_set_get(gp_ring_set *s, int i)
{
    if (!s || i < 0 || i >= s->n) {
        gp_set_error("gp_ring_set_get: ring %d out of range (the set has %d)", i, s ? s->n : 0);
        return NULL;
    }
    return s->rings[i];
}

int gp_ring_set_count(const gp_ring_set *s) { return s ? s->n : 0; }

void gp_ring_set_close(gp_ring_set *s)
{
    for (int i = 0; s && i < s->n; i++)
        gp_ring_close(s->rings[i]);
}

void gp_ring_set_reopen(gp_ring_set *s)
{
    for (int i = 0; s && i < s->n; i++)
        gp_ring_reopen(s->rings[i]);
}
