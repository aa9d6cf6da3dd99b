# Tests of streaming/: the manager over the simulated copy engine (no GPU).
gp_add_test(streaming_params SOURCES streaming/test_streamer_params.c support/sim_stream.c LIBS gp_streaming)
gp_add_test(streaming_residency SOURCES streaming/test_streamer_residency.c support/sim_stream.c
            LIBS gp_streaming)
gp_add_test(streaming_property SOURCES streaming/test_streamer_property.c support/sim_stream.c
            LIBS gp_streaming)

# The manager on the CUDA backend (GPU): every read checked against its
# group's pattern, budget and statistics; skipped (77) without a GPU.
gp_add_test(streaming_cuda SOURCES streaming/test_stream_cuda.c LIBS gp_streaming_cuda GPU)
