# The scheduler end to end on the CPU executor (no GPU): pipelined == sequential.
gp_add_test(pipeline_cpu SOURCES pipeline/test_pipeline_cpu.c LIBS gp_pipeline)
# The pipeline on the GPU against the sequential engine (skips without a GPU).
gp_add_test(pipeline_cuda SOURCES pipeline/test_pipeline_cuda.c LIBS gp_pipeline_cuda GPU)
