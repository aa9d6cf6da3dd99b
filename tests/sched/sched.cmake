# The request scheduler on the CPU reference: continuous batching under both
# policies, preemption, cancellation, seeded sampling (tools' sampler) and bad
# inputs, against each request run alone; and automatic prefix caching
# (white-box: its invariants after every step), with a host tier behind it;
# prefill and decode on two lanes through a prefill lane that completes late.
gp_add_test(sched_cpu SOURCES sched/test_sched.c support/sched_cpu.c LIBS gp_sched gp_reference gp_kvstore gp_tools)
gp_add_test(sched_prefix SOURCES sched/test_prefix.c support/sched_cpu.c support/sched_reqs.c
            LIBS gp_sched gp_reference gp_kvstore gp_kvcache)
gp_add_test(sched_host_tier SOURCES sched/test_host_tier.c support/sched_cpu.c support/sched_reqs.c
            LIBS gp_sched gp_reference gp_kvstore gp_kvcache)
gp_add_test(sched_pd SOURCES sched/test_pd.c support/sched_cpu.c support/sched_reqs.c
            LIBS gp_sched gp_reference gp_kvstore gp_kvcache)
