/* The benchmarks' "B:C[,B:C...]" workload lists. */
#include <stdio.h>

#include "bench_workloads.h"

int gp_bench_parse_pairs(const char *prog, const char *s, const char *form, int b_max, int c_min, int c_max,
                         workload *w, int max)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        int B, C, used;
        if (n == max || sscanf(p, "%d:%d%n", &B, &C, &used) != 2 || B < 1 || B > b_max || C < c_min || C > c_max) {
            fprintf(stderr, "%s: --workloads '%s': expected %s[,%s...] with 1 <= B <= %d, %d <= %c <= %d (at most %d)\n",
                    prog, s, form, form, b_max, c_min, form[2], c_max, max);
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

int gp_bench_parse_workloads(const char *prog, const char *s, workload *w, int max)
{
    return gp_bench_parse_pairs(prog, s, "B:C", 65536, 0, 1 << 24, w, max); /* the engine's most rows; any context */
}
