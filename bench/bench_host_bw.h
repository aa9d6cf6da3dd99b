/* The host's read bandwidth as the CPU benchmarks measure it beside their
 * own rates: T threads streaming through a large buffer. */
#ifndef GP_BENCH_HOST_BW_H
#define GP_BENCH_HOST_BW_H

/* Bytes of the buffer: far beyond any last-level cache. */
#define GP_BENCH_BW_BYTES (1ull << 30)

/* GB/s of T threads (1..16) each summing its slice of a GP_BENCH_BW_BYTES
 * buffer: median of 5 passes after one that is not counted (page faults are
 * paid at fill). NAN when the buffer cannot be allocated. */
double gp_bench_host_read_gbs(int T);

#endif
