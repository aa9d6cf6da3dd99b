# Tests of green/ (split planning on the CPU; partitions on the GPU).
