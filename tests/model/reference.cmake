# CPU reference: operations against double formulas and decode invariants
# (no data needed), and agreement with HF transformers on the checkpoints in
# tests/data made by tests/hf/make_reference.py (skips until they exist).
gp_add_test(ref_ops SOURCES model/test_reference.c LIBS gp_reference)
gp_add_test(ref_hf_logits SOURCES model/test_hf_logits.c model/hf_case.c LIBS gp_pipeline_cuda gp_dep_jansson)
# One batched prefill of the prompts of each expected_prefill.json against
# HF's logits at the kept positions: the CPU reference here; the same binary
# runs the CUDA engine (GPU, skipped without one) with the engine's default
# prefill chunk and with chunks of 16 tokens (prompts spanning chunks, chunks
# shared by prompts).
gp_add_test(ref_hf_prefill SOURCES model/test_hf_prefill.c model/hf_case.c LIBS gp_pipeline_cuda gp_dep_jansson)
add_test(NAME engine_hf_prefill COMMAND ref_hf_prefill cuda)
add_test(NAME engine_hf_prefill_chunk16 COMMAND ref_hf_prefill cuda 16)
# The fp16 engine on every checkpoint (the default runs auto: fp16 for the
# fp16 checkpoint, bf16 for the others).
add_test(NAME engine_hf_prefill_fp16 COMMAND ref_hf_prefill cuda 0 fp16)
set_tests_properties(engine_hf_prefill engine_hf_prefill_chunk16 engine_hf_prefill_fp16 PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600
                     LABELS gpu)
# Activation sparsity in the reference (masked decode steps, the capture hook)
# on the tiny preset and the tiny checkpoint.
gp_add_test(ref_sparsity SOURCES model/test_ref_sparsity.c LIBS gp_reference)
# Tensor parallelism on the CPU reference: shards on threads, summed through
# the reduce hook, against the whole model (no GPU).
gp_add_test(ref_tp SOURCES model/test_tp_ref.c LIBS gp_reference gp_model)
