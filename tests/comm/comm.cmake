# Multi-GPU communication (comm/): the group of ranks, one process each on
# this host (rendezvous, blob, steps, every failure named), no GPU.
gp_add_test(comm_group SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_group.c LIBS gp_comm)
# NCCL over the group: two processes on two GPUs (sums, send/recv, the
# latency of small all-reduces, a rank lost mid-collective); skips without
# NCCL or two GPUs.
gp_add_test(comm_nccl SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_comm_nccl.c LIBS gp_comm CUDA::cudart GPU)
