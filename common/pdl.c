/* The process-wide switch for programmatic dependent launch (PDL) of the
 * engine's kernels. Off unless $GP_PDL=1: see gp_common.h for why. */
#include <stdatomic.h>
#include <stdlib.h>

#include "gp_common.h"

static atomic_int g_pdl = -1; /* -1: not read from the environment yet */

bool gp_pdl_enabled(void)
{
    int on = atomic_load_explicit(&g_pdl, memory_order_relaxed);
    if (on < 0) {
        const char *e = getenv("GP_PDL");
        int want = e && e[0] == '1';
        atomic_compare_exchange_strong(&g_pdl, &on, want); /* a concurrent set wins */
        on = atomic_load_explicit(&g_pdl, memory_order_relaxed);
    }
    return on != 0;
}
