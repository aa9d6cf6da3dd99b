/* Packing a layer's FFN neurons for the cold-neuron CPU FFN: each neuron's
 * gate row, up row and down column side by side, so computing it is one
 * contiguous read and the down column is not a strided gather per call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_sparse.h"

struct gp_cold_pack {
    gp_dtype dt;
    int hidden, ffn, n;
    int *pos;       /* [ffn] neuron -> its place in the pack, -1 absent */
    uint16_t *data; /* [n][3][hidden] */
    uint64_t bytes;
};

/* Element i of a host tensor of dtype wdt (F32, BF16 or F16), exactly. */
static float gp_pack_elem(const void *w, gp_dtype wdt, size_t i)
{
    if (wdt == GP_DTYPE_F32)
        return ((const float *)w)[i];
    return gp_half_to_f32(((const uint16_t *)w)[i], wdt);
}

void gp_cold_pack_destroy(gp_cold_pack *pk)
{
    if (!pk)
        return;
    free(pk->pos);
    free(pk->data);
    free(pk);
}

gp_status gp_cold_pack_create(const gp_host_weights *w, int layer, gp_dtype dt, const int *list, int n,
                              gp_cold_pack **out)
{
    if (!w || !out || !w->layers)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_pack_create: w (with layers) and out must not be NULL");
    const gp_config *c = &w->cfg;
    if (layer < 0 || layer >= c->n_layers)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_pack_create: layer %d (allowed 0..%d)", layer, c->n_layers - 1);
    GP_TRY(gp_dtype_check_half(dt, "cold-neuron pack"));
    if (w->dtype != GP_DTYPE_F32 && !gp_dtype_is_half(w->dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_pack_create: host weights of dtype %s (allowed F32, BF16, F16)",
                gp_dtype_name(w->dtype));
    const int H = c->hidden, F = c->ffn;
    if (!list)
        n = F;
    if (n < 1 || n > F)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_pack_create: %d neurons (allowed 1..ffn = %d)", n, F);
    const gp_layer_weights *lw = &w->layers[layer];
    if (!lw->w_gate_up || !lw->w_down)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_pack_create: layer %d has no gate/up or down weights", layer);

    gp_cold_pack *pk = calloc(1, sizeof *pk);
    if (!pk)
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_cold_pack_create: out of memory");
    pk->dt = dt, pk->hidden = H, pk->ffn = F, pk->n = n;
    pk->bytes = (uint64_t)n * 3u * (uint64_t)H * 2u;
    pk->pos = malloc((size_t)F * sizeof *pk->pos);
    /* 64-byte aligned (a cache line) and a whole number of lines, as aligned_alloc requires */
    pk->data = aligned_alloc(64, (size_t)((pk->bytes + 63u) & ~(uint64_t)63u));
    float *tmp = malloc((size_t)3 * H * sizeof *tmp);
    if (!pk->pos || !pk->data || !tmp) {
        const uint64_t bytes = pk->bytes;
        free(tmp);
        gp_cold_pack_destroy(pk);
        GP_FAIL(GP_ERR_NO_MEMORY, "gp_cold_pack_create: out of memory for %d neurons (%llu bytes)", n,
                (unsigned long long)bytes);
    }
    for (int j = 0; j < F; j++)
        pk->pos[j] = -1;
    for (int i = 0; i < n; i++) {
        const int j = list ? list[i] : i;
        if (j < 0 || j >= F || pk->pos[j] >= 0) {
            free(tmp);
            gp_cold_pack_destroy(pk);
            GP_FAIL(GP_ERR_INVALID_ARG, "gp_cold_pack_create: list[%d] = %d (allowed: distinct neurons in 0..%d)",
                    i, j, F - 1);
        }
        pk->pos[j] = i;
    }
    const gp_dtype wdt = w->dtype;
    for (int i = 0; i < n; i++) {
        const int j = list ? list[i] : i;
        for (int k = 0; k < H; k++) {
            tmp[k] = gp_pack_elem(lw->w_gate_up, wdt, (size_t)j * H + k);
            tmp[H + k] = gp_pack_elem(lw->w_gate_up, wdt, ((size_t)F + j) * H + k);
            tmp[2 * H + k] = gp_pack_elem(lw->w_down, wdt, (size_t)k * F + j);
        }
        char what[64];
        snprintf(what, sizeof what, "layer %d FFN neuron %d", layer, j);
        gp_status st = gp_weights_convert(pk->data + (size_t)i * 3 * H, dt, tmp, GP_DTYPE_F32, 3u * (uint64_t)H, what);
        if (st != GP_OK) {
            free(tmp);
            gp_cold_pack_destroy(pk);
            return st;
        }
    }
    free(tmp);
    *out = pk;
    return GP_OK;
}

int gp_cold_pack_count(const gp_cold_pack *pk)
{
    return pk ? pk->n : 0;
}

uint64_t gp_cold_pack_bytes(const gp_cold_pack *pk)
{
    return pk ? pk->bytes : 0;
}

const void *gp_cold_pack_neuron(const gp_cold_pack *pk, int j)
{
    if (!pk || j < 0 || j >= pk->ffn || pk->pos[j] < 0)
        return NULL;
    return pk->data + (size_t)pk->pos[j] * 3 * pk->hidden;
}

int gp_cold_pack_hidden(const gp_cold_pack *pk)
{
    return pk->hidden;
}

gp_dtype gp_cold_pack_dtype(const gp_cold_pack *pk)
{
    return pk->dt;
}

void *gp_cold_pack_data(gp_cold_pack *pk)
{
    return pk ? pk->data : NULL;
}
