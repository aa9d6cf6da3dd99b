/* The one parser of the environment variables the library reads. Only
 * process-wide settings live in the environment; everything a caller tunes
 * is a field of a params struct. The variables, and the file that reads
 * each:
 *   GP_REF_THREADS            1..16 threads of the CPU reference (reference/ref_pool.c,
 *                             at each pool creation)
 *   GP_DEVICE_WAIT_TIMEOUT_S  seconds a host wait on the device may take, 0 =
 *                             no limit (common/device_wait.c, once per process)
 *   GP_PDL                    0 or 1: programmatic dependent launch of the decode
 *                             kernels (common/device_pdl.c, once per process)
 *   GP_FAULT_DEVICE_ALLOC     test hook: the N-th device allocation fails
 *                             (common/fault.c, once per process)
 *   GP_FAULT_TRAP             test hook: the N-th decode step traps
 *                             (common/fault.c, once per process)
 *   GP_FAULT_MEM_AVAILABLE    test hook: the host memory available, in bytes, in
 *                             place of MemAvailable (common/host_mem.c, at each call)
 * A malformed or out-of-range value is an error of the call that reads it,
 * never silently replaced by the default. */
#include <errno.h>
#include <stdlib.h>

#include "gp_common.h"

gp_status gp_env_int(const char *name, long lo, long hi, long dflt, long *out)
{
    if (!name || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_env_int: name and out must not be NULL");
    if (lo > hi || dflt < lo || dflt > hi)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_env_int: %s: default %ld outside the range %ld..%ld", name,
                dflt, lo, hi);
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = dflt;
        return GP_OK;
    }
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end)
        GP_FAIL(GP_ERR_INVALID_ARG, "environment variable %s = '%s' is not an integer: allowed "
                "%ld..%ld (unset: %ld)", name, v, lo, hi, dflt);
    if (n < lo || n > hi)
        GP_FAIL(GP_ERR_INVALID_ARG, "environment variable %s = '%s' is outside the allowed range "
                "%ld..%ld (unset: %ld)", name, v, lo, hi, dflt);
    *out = n;
    return GP_OK;
}
