# CPU reference: operations against double formulas and decode invariants
# (no data needed), and agreement with HF transformers on the checkpoints in
# tests/data made by tests/hf/make_reference.py (skips until they exist).
gp_add_test(ref_ops SOURCES model/test_reference.c LIBS gp_model)
gp_add_test(ref_hf_logits SOURCES model/test_hf_logits.c model/hf_case.c LIBS gp_pipeline_cuda gp_dep_jansson)
