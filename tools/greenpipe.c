/* The greenpipe command: dispatches to inspect, generate, chat, serve,
 * bench-serve, devices, tokenize and calibrate; says its version. */
#include <stdio.h>
#include <string.h>

#include "gp_build_info.h"
#include "gp_tools.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: greenpipe COMMAND [options]\n"
            "commands:\n"
            "  inspect DIR        validate a checkpoint; print its config and tensor table\n"
            "  generate [opts]    prefill prompts, then greedy-decode (see greenpipe generate --help)\n"
            "  chat [opts]        a conversation through the model's chat template, a message per line of\n"
            "                     standard input (see greenpipe chat --help)\n"
            "  serve [opts]       an OpenAI-compatible HTTP server with continuous batching\n"
            "                     (see greenpipe serve --help)\n"
            "  bench-serve [opts] load a server with requests; TTFT, TPOT, ITL, throughput, goodput\n"
            "                     (see greenpipe bench-serve --help)\n"
            "  devices            list CUDA devices, or say why none is usable\n"
            "  tokenize [opts]    text to token ids, or ids to text (see greenpipe tokenize --help)\n"
            "  calibrate [opts]   activation-sparsity thresholds of a model on the CPU reference\n"
            "                     (see greenpipe calibrate --help)\n"
            "  version            the version and the commit it was built from (also --version)\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "inspect"))
        return gp_cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "generate"))
        return gp_cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat"))
        return gp_cmd_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve"))
        return gp_cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench-serve"))
        return gp_cmd_bench_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "devices"))
        return gp_cmd_devices(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize"))
        return gp_cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "calibrate"))
        return gp_cmd_calibrate(argc - 1, argv + 1);
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        if (argc > 2) {
            fprintf(stderr, "greenpipe %s: takes no arguments, got '%s'\n", cmd, argv[2]);
            return 2;
        }
        printf("greenpipe %s (commit %s)\n", gp_build_version(), gp_build_commit());
        return 0;
    }
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "greenpipe: unknown command '%s'; allowed: inspect, generate, chat, serve, bench-serve, devices, tokenize, calibrate, version\n", cmd);
    usage(stderr);
    return 2;
}
