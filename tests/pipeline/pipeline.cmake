# The scheduler end to end on the CPU executor (no GPU): pipelined == sequential.
gp_add_test(pipeline_cpu SOURCES pipeline/test_pipeline_cpu.c LIBS gp_pipeline)
