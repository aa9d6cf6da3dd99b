# Tests of model config, the architecture table, synthetic weights and host weights.
gp_add_test(cfg_config SOURCES model/test_config.c LIBS gp_model)
gp_add_test(cfg_arch SOURCES model/test_arch.c LIBS gp_model)
gp_add_test(synth_host SOURCES model/test_synth.c LIBS gp_model)
gp_add_test(synth_gpu SOURCES model/test_synth_gpu.c LIBS gp_weights GPU)
