/* Benchmark of weight streaming on the CUDA backend: N groups of S MiB in
 * pinned memory streamed through a budget in execution order for K steps,
 * per step the bytes copied, copy-engine seconds and GB/s, then the median,
 * and a plain cudaMemcpyAsync loop of the same bytes (the link's own speed).
 * Usage: gp_bench_stream [--groups N] [--group-mib S] [--budget-mib B]
 *   [--depth D] [--steps K] [--chunk-mib C] [--no-reader]
 * Defaults: 32 groups of 218 MiB (about Llama-3-8B's layer halves in bf16),
 * budget 8 groups, depth 2, 5 steps, 32 MiB chunks (docs/ARCHITECTURE.md §6). */
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_device.h"
#include "gp_streaming.h"

#define GP_BENCH_NAME "gp_bench_stream"
#include "bench_check.h"

#define MIB (1ull << 20)

static void usage(FILE *f)
{
    fprintf(f, "usage: gp_bench_stream [--groups N] [--group-mib S] [--budget-mib B] [--depth D]\n"
               "                       [--steps K] [--chunk-mib C] [--no-reader]\n"
               "  --groups N      groups in the order (default 32)\n"
               "  --group-mib S   MiB per group (default 218)\n"
               "  --budget-mib B  device budget in MiB (default 8 groups; at least 2 groups)\n"
               "  --depth D       prefetch depth, 0 to N (default 2)\n"
               "  --steps K       steps timed (default 5)\n"
               "  --chunk-mib C   largest single copy in MiB (default 32)\n"
               "  --no-reader     no reader copy on the compute stream\n");
}

static long parse_long(const char *s, const char *flag, long lo, long hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "gp_bench_stream: %s: '%s' is not an integer in %ld..%ld\n", flag, s, lo, hi);
        usage(stderr);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    long n_groups = 32, group_mib = 218, budget_mib = -1, depth = 2, steps = 5, chunk_mib = 32;
    int reader = 1;
    static const struct option opts[] = {
        {"groups", required_argument, 0, 'g'}, {"group-mib", required_argument, 0, 's'},
        {"budget-mib", required_argument, 0, 'b'}, {"depth", required_argument, 0, 'd'},
        {"steps", required_argument, 0, 'k'}, {"chunk-mib", required_argument, 0, 'c'},
        {"no-reader", no_argument, 0, 'r'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'g': n_groups = parse_long(optarg, "--groups", 1, 4096); break;
        case 's': group_mib = parse_long(optarg, "--group-mib", 1, 1 << 20); break;
        case 'b': budget_mib = parse_long(optarg, "--budget-mib", 1, 1l << 30); break;
        case 'd': depth = parse_long(optarg, "--depth", 0, 4096); break;
        case 'k': steps = parse_long(optarg, "--steps", 1, 100000); break;
        case 'c': chunk_mib = parse_long(optarg, "--chunk-mib", 1, 1 << 20); break;
        case 'r': reader = 0; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gp_bench_stream: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (depth > n_groups) {
        fprintf(stderr, "gp_bench_stream: --depth %ld exceeds --groups %ld\n", depth, n_groups);
        return 2;
    }
    if (budget_mib < 0)
        budget_mib = (n_groups < 8 ? n_groups : 8) * group_mib;
    if (budget_mib < 2 * group_mib && n_groups >= 2) {
        fprintf(stderr, "gp_bench_stream: --budget-mib %ld is below two groups (%ld MiB), the minimum "
                "working set\n", budget_mib, 2 * group_mib);
        return 2;
    }
    const uint64_t gbytes = (uint64_t)group_mib * MIB;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        fprintf(stderr, "gp_bench_stream: no CUDA GPU usable\n");
        return 1;
    }

    /* Distinct host buffers: one pinned buffer per group as the engine
     * would hold them (the total must fit in host memory). */
    void **host = calloc((size_t)n_groups, sizeof *host);
    gp_stream_group *groups = calloc((size_t)n_groups, sizeof *groups);
    int *order = calloc((size_t)n_groups, sizeof *order);
    if (!host || !groups || !order) {
        fprintf(stderr, "gp_bench_stream: out of host memory\n");
        return 1;
    }
    for (long i = 0; i < n_groups; i++) {
        GP(gp_pinned_alloc(&host[i], gbytes, "bench group"));
        memset(host[i], (int)(i & 0xff), gbytes);
        groups[i] = (gp_stream_group){i % 2 ? GP_STREAM_FFN : GP_STREAM_ATTN, (int)(i / 2), gbytes, host[i], 0, 0};
        order[i] = (int)i;
    }
    gp_stream_backend be;
    GP(gp_stream_cuda_backend_create(0, &be));
    gp_streamer_params p = gp_streamer_default_params();
    p.groups = groups;
    p.n_groups = (int)n_groups;
    p.order = order;
    p.n_order = (int)n_groups;
    p.prefetch_depth = (int)depth;
    p.chunk_bytes = (uint64_t)chunk_mib * MIB;
    p.budget_bytes = (uint64_t)budget_mib * MIB;
    p.backend = be;
    gp_streamer *s = NULL;
    GP(gp_streamer_create(&p, &s));
    cudaStream_t cs;
    CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    /* The reader: a 4 KiB device-to-device copy out of each slot, enough to
     * order the release after a real read without taking the link. */
    void *sink = NULL;
    CK(cudaMalloc(&sink, 4096));
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));

    printf("gp_bench_stream: %ld groups of %ld MiB, budget %ld MiB, depth %ld, chunk %ld MiB, %s\n",
           n_groups, group_mib, budget_mib, depth, chunk_mib, reader ? "4 KiB reader" : "no reader");
    printf("%-6s %10s %8s %10s %9s %9s %8s\n", "step", "MiB", "loads", "copy ms", "copy GB/s", "wall ms",
           "wall GB/s");
    double *gb = calloc((size_t)steps, sizeof *gb), *wgb = calloc((size_t)steps, sizeof *wgb);
    if (!gb || !wgb)
        return 1;
    gp_streamer_stats ss;
    for (long k = -1; k < steps; k++) { /* step -1 warms the pool and the link */
        GP(gp_streamer_stats_get(s, &ss, 1));
        CK(cudaEventRecord(t0, cs));
        for (int pos = 0; pos < (int)n_groups; pos++) {
            gp_status a = gp_streamer_advance(s, pos);
            if (a != GP_OK && a != GP_SOFT_FULL)
                GP(a);
            GP(gp_streamer_acquire(s, order[pos], cs));
            if (reader)
                CK(cudaMemcpyAsync(sink, gp_streamer_slot(s, order[pos]), 4096, cudaMemcpyDeviceToDevice, cs));
            GP(gp_streamer_release(s, order[pos], cs));
        }
        CK(cudaEventRecord(t1, cs));
        GP(gp_device_event_wait(t1, "bench step"));
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        GP(gp_streamer_stats_get(s, &ss, 1));
        if (k < 0)
            continue;
        gb[k] = ss.gbps;
        wgb[k] = ms > 0.0f ? (double)ss.bytes_streamed / (ms * 1e-3) / 1e9 : 0.0;
        printf("%-6ld %10.0f %8llu %10.2f %9.2f %9.2f %8.2f\n", k, (double)ss.bytes_streamed / (double)MIB,
               (unsigned long long)ss.loads, ss.copy_s * 1e3, ss.gbps, (double)ms, wgb[k]);
    }
    uint64_t used_high = 0, reserved_high = 0;
    GP(gp_stream_cuda_backend_mem(&be, &used_high, &reserved_high));
    printf("median: copy %.2f GB/s, wall %.2f GB/s; pool used high %.0f MiB, reserved high %.0f MiB\n",
           gp_median_d(gb, (int)steps), gp_median_d(wgb, (int)steps), (double)used_high / (double)MIB,
           (double)reserved_high / (double)MIB);
    gp_streamer_destroy(s);
    gp_stream_cuda_backend_destroy(&be);

    /* The link alone: the same groups copied in the same chunks into one
     * device buffer, no manager, no waits. */
    uint64_t bytes_step = ss.bytes_streamed;
    void *dev = NULL;
    CK(cudaMalloc(&dev, gbytes));
    double *plain = calloc((size_t)steps, sizeof *plain);
    if (!plain)
        return 1;
    uint64_t chunk = (uint64_t)chunk_mib * MIB;
    for (long k = -1; k < steps; k++) {
        CK(cudaEventRecord(t0, cs));
        uint64_t done = 0;
        for (long i = 0; done < bytes_step || (bytes_step == 0 && i < n_groups); i++) {
            const char *h = host[i % n_groups];
            for (uint64_t off = 0; off < gbytes; off += chunk)
                CK(cudaMemcpyAsync((char *)dev + off, h + off, gbytes - off < chunk ? gbytes - off : chunk,
                                   cudaMemcpyHostToDevice, cs));
            done += gbytes;
        }
        CK(cudaEventRecord(t1, cs));
        GP(gp_device_event_wait(t1, "bench plain copies"));
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        if (k >= 0)
            plain[k] = ms > 0.0f ? (double)done / (ms * 1e-3) / 1e9 : 0.0;
    }
    printf("plain cudaMemcpyAsync, %ld MiB chunks, same bytes per step: median %.2f GB/s\n", chunk_mib,
           gp_median_d(plain, (int)steps));

    CK(cudaFree(dev));
    CK(cudaFree(sink));
    CK(cudaEventDestroy(t0));
    CK(cudaEventDestroy(t1));
    CK(cudaStreamDestroy(cs));
    for (long i = 0; i < n_groups; i++)
        gp_pinned_free(host[i]);
    free(host);
    free(groups);
    free(order);
    free(gb);
    free(wgb);
    free(plain);
    return 0;
}
