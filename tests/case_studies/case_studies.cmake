# Tests of case_studies/ (CLI, writers, tuning profile): no GPU needed.
# ---- BEGIN core ----
# ---- END core ----
# ---- BEGIN tuning ----
# ---- END tuning ----
