/* The process-wide switch for programmatic dependent launch (PDL) of the
 * engine's kernels: $GP_PDL=0 turns it off for A/B runs; the pipeline turns
 * it off while it launches stages across two streams. */
#include <stdatomic.h>
#include <stdlib.h>

#include "gp_common.h"

static atomic_int g_pdl = -1; /* -1: not read from the environment yet */

bool gp_pdl_enabled(void)
{
    int on = atomic_load_explicit(&g_pdl, memory_order_relaxed);
    if (on < 0) {
        const char *e = getenv("GP_PDL");
        int want = !(e && e[0] == '0');
        atomic_compare_exchange_strong(&g_pdl, &on, want); /* a concurrent set wins */
        on = atomic_load_explicit(&g_pdl, memory_order_relaxed);
    }
    return on != 0;
}

bool gp_pdl_set_enabled(bool on)
{
    bool was = gp_pdl_enabled();
    atomic_store_explicit(&g_pdl, on ? 1 : 0, memory_order_relaxed);
    return was;
}
