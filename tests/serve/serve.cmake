# The serving core on the CPU reference (no GPU).
# Requests from several threads, greedy and sampled, under both policies and
# preemption, each against the request run alone; cancellation; refusals.
gp_add_test(serve_core SOURCES serve/test_serve.c LIBS gp_serve gp_pipeline gp_reference gp_tools)
