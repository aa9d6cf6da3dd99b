/* placeholder */
#include "gp_tools.h"
int gp_cmd_bench_serve(int argc, char **argv) { (void)argc; (void)argv; return 2; }
