/* The greenpipe command: dispatches to inspect, generate, devices, tokenize and
 * calibrate. */
#include <stdio.h>
#include <string.h>

#include "gp_tools.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: greenpipe COMMAND [options]\n"
            "commands:\n"
            "  inspect DIR        validate a checkpoint; print its config and tensor table\n"
            "  generate [opts]    prefill prompts, then greedy-decode (see greenpipe generate --help)\n"
            "  devices            list CUDA devices, or say why none is usable\n"
            "  tokenize [opts]    text to token ids, or ids to text (see greenpipe tokenize --help)\n"
            "  calibrate [opts]   activation-sparsity thresholds of a model on the CPU reference\n"
            "                     (see greenpipe calibrate --help)\n");
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
    if (!strcmp(cmd, "devices"))
        return gp_cmd_devices(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize"))
        return gp_cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "calibrate"))
        return gp_cmd_calibrate(argc - 1, argv + 1);
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "greenpipe: unknown command '%s'; allowed: inspect, generate, devices, tokenize, calibrate\n", cmd);
    usage(stderr);
    return 2;
}
