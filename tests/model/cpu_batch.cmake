# Mixed batches on the CPU reference (prefill chunks beside decode rows)
# against separate prefill and decode calls, bitwise.
gp_add_test(ref_cpu_batch SOURCES model/test_cpu_batch.c LIBS gp_reference)
