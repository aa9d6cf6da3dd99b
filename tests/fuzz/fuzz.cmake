# Fuzz targets (tests/fuzz/fuzz_*.c) replayed over their seed corpus and every
# saved crash, in the ordinary build: a parser fix stays fixed. The fuzzing
# itself (clang + libFuzzer) is .ci/fuzz.sh.
#
# Without a sanitizer most of what the fuzzer finds (overflows, reads past a
# buffer, leaks) would replay silently, so where the compiler can, the replay
# builds its own copy of the parsers under ASan+UBSan; the source list is the
# one .ci/fuzz.sh compiles.
include(CheckCSourceCompiles)
set(GP_FUZZ_SAN -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=address,undefined")
set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=address,undefined)
check_c_source_compiles("int main(void) { return 0; }" GP_FUZZ_HAVE_SANITIZERS)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)

if(GP_FUZZ_HAVE_SANITIZERS)
  add_library(gp_fuzz_parsers STATIC
    ${PROJECT_SOURCE_DIR}/common/status.c
    ${PROJECT_SOURCE_DIR}/common/tensor.c
    ${PROJECT_SOURCE_DIR}/common/read_file.c
    ${PROJECT_SOURCE_DIR}/common/progress.c
    ${PROJECT_SOURCE_DIR}/common/measure.c
    ${PROJECT_SOURCE_DIR}/model/safetensors.c
    ${PROJECT_SOURCE_DIR}/model/config.c
    ${PROJECT_SOURCE_DIR}/model/arch.c
    ${PROJECT_SOURCE_DIR}/model/checkpoint.c
    ${PROJECT_SOURCE_DIR}/model/weights.c
    ${PROJECT_SOURCE_DIR}/model/synth.c)
  target_include_directories(gp_fuzz_parsers PUBLIC ${PROJECT_SOURCE_DIR}/common ${PROJECT_SOURCE_DIR}/model)
  target_compile_options(gp_fuzz_parsers PUBLIC ${GP_FUZZ_SAN})
  target_link_options(gp_fuzz_parsers PUBLIC -fsanitize=address,undefined)
  target_link_libraries(gp_fuzz_parsers PUBLIC gp_dep_jansson m Threads::Threads)
  set(gp_fuzz_lib gp_fuzz_parsers)
else()
  message(STATUS "greenpipe: fuzz replay without sanitizers (the compiler cannot link -fsanitize=address,undefined)")
  set(gp_fuzz_lib gp_model)
endif()

# The OpenAI request parser: chat messages and jansson, no model code.
set(GP_FUZZ_API_SRCS common/status.c chat/messages.c http/api_request.c http/api_response.c http/api_utf8.c)
if(GP_FUZZ_HAVE_SANITIZERS)
  list(TRANSFORM GP_FUZZ_API_SRCS PREPEND ${PROJECT_SOURCE_DIR}/)
  add_library(gp_fuzz_api STATIC ${GP_FUZZ_API_SRCS})
  foreach(dir common model chat http serve pipeline sched tools queues reference stage)
    target_include_directories(gp_fuzz_api PUBLIC ${PROJECT_SOURCE_DIR}/${dir})
  endforeach()
  target_compile_options(gp_fuzz_api PUBLIC ${GP_FUZZ_SAN})
  target_link_options(gp_fuzz_api PUBLIC -fsanitize=address,undefined)
  target_link_libraries(gp_fuzz_api PUBLIC gp_dep_jansson)
  set(gp_fuzz_api_lib gp_fuzz_api)
else()
  set(gp_fuzz_api_lib gp_http_api gp_model)
endif()

function(gp_fuzz_replay target)
  add_executable(fuzz_replay_${target} fuzz/fuzz_replay.c fuzz/fuzz_${target}.c)
  target_link_libraries(fuzz_replay_${target} PRIVATE ${ARGN})
  add_test(NAME fuzz_replay_${target} COMMAND fuzz_replay_${target}
           ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${target}
           ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/regressions/${target})
  set_tests_properties(fuzz_replay_${target} PROPERTIES TIMEOUT 300
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1")
endfunction()
foreach(target safetensors config index)
  gp_fuzz_replay(${target} ${gp_fuzz_lib})
endforeach()
gp_fuzz_replay(api ${gp_fuzz_api_lib} gp_dep_jansson)
