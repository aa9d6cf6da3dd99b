# Tests of case_studies/ (CLI, writers, tuning profile): no GPU needed.
# ---- BEGIN core ----
# The command line (every bad input is exit 2 naming flag and value).
gp_add_test(cs_cli SOURCES case_studies/test_cs_cli.c LIBS gp_case_study_core)
# Splits against the H100's partition rules; presets scaled to smaller GPUs.
gp_add_test(cs_splits SOURCES case_studies/test_cs_splits.c LIBS gp_case_study_core)
# Markdown, JSON and CSV reports, unwritable paths, row memory.
gp_add_test(cs_writers SOURCES case_studies/test_cs_writers.c LIBS gp_case_study_core gp_dep_jansson)
# Chrome trace (slices, flows, instants) and the SVG chart (well-formed XML).
gp_add_test(cs_trace_svg SOURCES case_studies/test_cs_trace_svg.c LIBS gp_case_study_core gp_dep_jansson)
# ---- END core ----
# ---- BEGIN tuning ----
# The tuning profile: round trip, best per workload, the rule against the
# data, seq-wins, and errors naming the file and field.
gp_add_test(cs_tuning SOURCES case_studies/test_cs_tuning.c LIBS gp_cs_tuning gp_dep_jansson)
# ---- END tuning ----
