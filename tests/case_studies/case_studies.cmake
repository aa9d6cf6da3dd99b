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
# The sweep with a fake runner: SIGINT/SIGTERM and device faults stop it with
# valid partial reports and exit 130/143/1; other failures are error rows.
gp_add_test(cs_sweep SOURCES case_studies/test_cs_sweep.c LIBS gp_case_study_core gp_dep_jansson)
# The device-memory check before allocating, and the uneven micro-batch note.
gp_add_test(cs_memory SOURCES case_studies/test_cs_memory.c LIBS gp_case_study_core)
# Each report's closing line per workload: the fastest row against seq.
gp_add_test(cs_winners SOURCES case_studies/test_cs_winners.c LIBS gp_case_study_core gp_dep_jansson)
# The report of every placement, one GPU and two (bench/placement_report.py), on made-up rows.
add_test(NAME placement_report
         COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/test_placement_report.py
                 ${CMAKE_SOURCE_DIR}/bench/placement_report.py)
# ---- END core ----
# ---- BEGIN program: the binary's refusals that need no GPU (docs/RELIABILITY.md)
function(gp_cs_cli_test name code regex)
  add_test(NAME cs_cli_${name}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/../tools/cli_expect.sh ${code} ${regex} --
                   $<TARGET_FILE:decode_pipeline_case_study> ${ARGN})
endfunction()
set(GP_CS_BAD_CKPT ${CMAKE_BINARY_DIR}/tests/bad_checkpoints) # made by bad_checkpoints_setup (tools.cmake)
gp_cs_cli_test(unknown_flag 2 "unknown or ambiguous option '--bogus'" --bogus)
gp_cs_cli_test(bad_dtype 2 "--dtype 'fp32': not a dtype. allowed: auto, bf16 or fp16" --dtype fp32)
gp_cs_cli_test(junk_number 2 "--steps '8x': trailing characters 'x' after the number" --steps 8x)
gp_cs_cli_test(micro_vs_batch 2 "--micro-batches '1,4': 4 micro-batches for workload 3:100, whose batch has 3 rows"
               --workload 3:100 --micro-batches 1,4)
gp_cs_cli_test(model_missing_dir 2 "--model '/nonexistent/ckpt': neither a preset nor a directory"
               --model /nonexistent/ckpt)
gp_cs_cli_test(model_no_config 2 "the directory has no readable config.json" --model ${GP_CS_BAD_CKPT}/no_config)
gp_cs_cli_test(model_bad_config 2 "bad_config/config.json: invalid JSON" --model ${GP_CS_BAD_CKPT}/bad_config)
gp_cs_cli_test(model_truncated 2 "truncated/model.safetensors: .*run past the end"
               --model ${GP_CS_BAD_CKPT}/truncated)
gp_cs_cli_test(model_no_weights 2 "no weights: looked for model.safetensors" --model ${GP_CS_BAD_CKPT}/no_weights)
gp_cs_cli_test(model_missing_tensor 2 "tensor 'model.layers.0.mlp.down_proj.weight' is missing"
               --model ${GP_CS_BAD_CKPT}/missing_tensor)
set_tests_properties(cs_cli_model_no_config cs_cli_model_bad_config cs_cli_model_truncated cs_cli_model_no_weights
                     cs_cli_model_missing_tensor PROPERTIES FIXTURES_REQUIRED bad_checkpoints)
gp_cs_cli_test(context_too_long 2 "--workload 8:250: context 250 plus 12 steps .* is 262 tokens, more than the 256 positions of model tiny. allowed: C up to 244"
               --model tiny --workload 8:250)
# --vram-budget: sizes as greenpipe generate's; a budget below what the split
# rows hold at once is refused from the config alone, before the GPU.
gp_cs_cli_test(vram_budget_junk 2 "--vram-budget '4 G': '4 G' is not a size. allowed: a size in bytes" --vram-budget "4 G")
gp_cs_cli_test(vram_budget_autotune 2 "--vram-budget: not with --autotune" --vram-budget 4G --autotune)
gp_cs_cli_test(vram_budget_too_small 2
               "--vram-budget 1024 bytes: .*below the minimum working set of [0-9]+ bytes .pinned: head .*allowed: at least [0-9]+ bytes .* for model tiny"
               --model tiny --workload 8:16 --vram-budget 1K)
# Without a GPU: one plain line and exit 1; with one, a one-row run.
gp_cs_cli_test(no_gpu "0|1" "^decode_pipeline_case_study: no CUDA GPU usable: |[|] seq [|]"
               --model tiny --workload 8:16 --sm-splits seq --steps 1 --repeat 1 --no-warmup)
gp_cs_cli_test(no_gpu_streamed "0|1" "^decode_pipeline_case_study: no CUDA GPU usable: |Weights streamed .--vram-budget."
               --model tiny --workload 8:16 --sm-splits seq --steps 1 --repeat 1 --no-warmup --vram-budget 1M)
# The report's commit (cmake/GpBuildInfo.cmake): the project's own or unknown.
add_test(NAME cs_build_commit COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/build_commit_test.sh ${CMAKE_COMMAND}
                                      ${PROJECT_SOURCE_DIR}/cmake/GpBuildInfo.cmake)
set_tests_properties(cs_build_commit PROPERTIES SKIP_RETURN_CODE 77)
# ---- END program ----
# ---- BEGIN tuning ----
# The tuning profile: round trip, best per workload, the rule against the
# data, seq-wins, and errors naming the file and field.
gp_add_test(cs_tuning SOURCES case_studies/test_cs_tuning.c LIBS gp_cs_tuning gp_dep_jansson)
# The shipped profile (case_studies/profiles/): parsing, the device it
# applies to, its best-known choice there and its cold-start rule elsewhere,
# and broken profiles refused naming the file and the field.
gp_add_test(cs_profile SOURCES case_studies/test_cs_profile.c LIBS gp_cs_tuning gp_dep_jansson)
target_compile_definitions(cs_profile PRIVATE
                           GP_CS_SHIPPED_PROFILE="${PROJECT_SOURCE_DIR}/case_studies/profiles/h100-sxm.json")
# ---- END tuning ----
# ---- BEGIN pd ----
# The prefill/decode case study's report: a synthetic profile where no split
# pays and one where a split does, the JSON, and the committed H100 profile.
gp_add_test(cs_pd_report SOURCES case_studies/test_cs_pd_report.c LIBS gp_cs_pd gp_dep_jansson)
target_compile_definitions(cs_pd_report PRIVATE
                           GP_PD_H100_PROFILE="${PROJECT_SOURCE_DIR}/docs/pd_profile_h100_llama3.1-8b.json")
# The program: the committed profile's verdict, a missing profile, --profile
# with measuring flags, and without a GPU one plain line.
function(gp_pd_cli_test name code regex)
  add_test(NAME pd_case_study_${name}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/../tools/cli_expect.sh ${code} ${regex} --
                   $<TARGET_FILE:pd_case_study> ${ARGN})
endfunction()
set(GP_PD_H100 ${PROJECT_SOURCE_DIR}/docs/pd_profile_h100_llama3.1-8b.json)
# The committed profile's count: the 16:116 pair loses to the mixed batch, the
# 64:68 pair wins it (docs/PERFORMANCE.md, the adaptive split).
gp_pd_cli_test(h100 0 "16 rows x 2053: split 64:68 pays 1[.]2[0-9]x over the mixed batch" --profile ${GP_PD_H100})
gp_pd_cli_test(h100_narrow 0 "[|] 16 rows x 2053 [|] 16:116 [|] 73[.][0-9] [|] .* [|] 0[.]9[0-9]x [|]" --profile ${GP_PD_H100})
gp_pd_cli_test(h100_overall 0 "^Overall: a split pays at 9 of the 9 decode points" --profile ${GP_PD_H100})
gp_pd_cli_test(missing_profile "1|2" "/nonexistent/pd_profile[.]json" --profile /nonexistent/pd_profile.json)
gp_pd_cli_test(profile_and_model 2 "--profile loads a profile. --model is for measuring one"
               --profile ${GP_PD_H100} --model tiny)
gp_pd_cli_test(profile_and_splits 2 "--profile loads a profile. --splits is for measuring one"
               --profile ${GP_PD_H100} --splits 16,32)
gp_pd_cli_test(nothing 2 "give --profile FILE .no GPU. or --model" --markdown /dev/null)
gp_pd_cli_test(bad_batch 2 "--max-batch" --model tiny --max-batch 1)
gp_pd_cli_test(bad_splits 2 "--splits" --model tiny --splits 16,x)
gp_pd_cli_test(bad_dtype 2 "--dtype 'fp32': not a dtype. allowed: auto, bf16 or fp16" --model tiny --dtype fp32)
gp_pd_cli_test(unwritable_json 2 "--json" --profile ${GP_PD_H100} --json /nonexistent/dir/r.json)
gp_pd_cli_test(context_beyond 2 "--max-context 16896 is beyond the model's max context 256" --model tiny)
gp_pd_cli_test(no_gpu "0|1" "^pd_case_study: no CUDA GPU usable: |no split pays|pays .*x over the mixed batch"
               --model tiny --max-batch 4 --max-context 256 --prefill-chunk 64)
# ---- END pd ----
