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
/* The same with bounds: 1 <= B <= b_max, c_min <= C <= c_max; form names
 * the pair in messages ("B:C", "B:T"). */
int gp_bench_parse_pairs(const char *prog, const char *s, const char *form, int b_max, int c_min, int c_max,
                         workload *w, int max);

#endif
