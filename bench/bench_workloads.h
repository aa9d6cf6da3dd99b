/* Decode workloads of the benchmarks: B sequences at C tokens of context,
 * given as "B:C[,B:C...]". */
#ifndef GP_BENCH_WORKLOADS_H
#define GP_BENCH_WORKLOADS_H

typedef struct workload {
    int B, C;
} workload;

/* Parses s into at most max workloads; the count, or -1 after a message on
 * stderr that names prog, the value and what is allowed. */
int gp_bench_parse_workloads(const char *prog, const char *s, workload *w, int max);

#endif
