/* Helpers of the CPU benchmarks (gp_bench_cold_ffn):
 * the host's read bandwidth they measure beside their own rates (T threads
 * streaming through a large buffer) and the random numbers of their data. */
#ifndef GP_BENCH_CPU_H
#define GP_BENCH_CPU_H

#include <stdint.h>
#include <stdio.h>

/* Bytes of the buffer: far beyond any last-level cache. */
#define GP_BENCH_BW_BYTES (1ull << 30)

/* GB/s of T threads (1..16) each summing its slice of a GP_BENCH_BW_BYTES
 * buffer: median of 5 passes after one that is not counted (page faults are
 * paid at fill). NAN when the buffer cannot be allocated. */
double gp_bench_host_read_gbs(int T);

/* getopt_long's refusal of argv[optind - 1] (a flag lacking its value, or
 * one the program does not have) said as "prog: ...", then usage; returns
 * the usage exit code, 2. */
int gp_bench_bad_flag(const char *prog, char **argv, void (*usage)(FILE *));
/* After the flags: 0 when nothing is left, else "prog: unexpected argument"
 * and usage, and 2. */
int gp_bench_extra_args(const char *prog, int argc, char **argv, void (*usage)(FILE *));

/* One process-wide xorshift64* stream (a fixed seed: the same data every
 * run), and uniform floats in [-s, s) from it. */
uint64_t gp_bench_rand_u64(void);
float gp_bench_uniform_pm(float s);

#endif
