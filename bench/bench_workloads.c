/* The benchmarks' "B:C[,B:C...]" workload lists. */
#include <stdio.h>

#include "bench_workloads.h"

int gp_bench_parse_workloads(const char *prog, const char *s, workload *w, int max)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        int B, C, used;
        if (n == max || sscanf(p, "%d:%d%n", &B, &C, &used) != 2 || B < 1 || C < 0) {
            fprintf(stderr, "%s: --workloads '%s': expected B:C[,B:C...] with B >= 1, C >= 0 (at most %d)\n", prog, s,
                    max);
            return -1;
        }
        w[n++] = (workload){B, C};
        p += used;
        if (*p == ',')
            p++;
        else if (*p) {
            fprintf(stderr, "%s: --workloads '%s': unexpected '%c'\n", prog, s, *p);
            return -1;
        }
    }
    return n;
}
