/* The host memory a new allocation can take: one answer for every refusal
 * that weighs weights against the machine (gp_common.h). */
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

#include "gp_common.h"

gp_status gp_host_mem_available(uint64_t *bytes, const char **how)
{
    if (!bytes)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_host_mem_available: bytes must not be NULL");
    long fake;
    GP_TRY(gp_env_int("GP_FAULT_MEM_AVAILABLE", 0, LONG_MAX, 0, &fake));
    if (fake > 0) {
        *bytes = (uint64_t)fake;
        if (how)
            *how = "GP_FAULT_MEM_AVAILABLE (a test's stand-in for MemAvailable)";
        return GP_OK;
    }
    /* MemAvailable counts the page cache the kernel would drop: what an
     * allocation gets without swapping, unlike MemFree */
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kib = 0;
        int found = 0;
        while (!found && fgets(line, sizeof line, f))
            found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
        fclose(f);
        if (found) {
            *bytes = (uint64_t)kib * 1024u;
            if (how)
                *how = "MemAvailable in /proc/meminfo";
            return GP_OK;
        }
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) {
        *bytes = (uint64_t)pages * (uint64_t)page;
        if (how)
            *how = "free pages (sysconf), no MemAvailable";
        return GP_OK;
    }
    GP_FAIL(GP_ERR_UNSUPPORTED, "available host memory unknown: no MemAvailable in /proc/meminfo and no free "
            "page count from sysconf");
}
