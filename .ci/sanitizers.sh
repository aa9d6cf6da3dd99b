#!/usr/bin/env bash
# CI: AddressSanitizer + UndefinedBehaviorSanitizer build of every test that
# needs no GPU, in its own build dir, run under CTest; any report fails the run.
# ThreadSanitizer is covered by the *_tsan tests of the normal build (.ci/run).
# Env: GP_SANITIZE_BUILD_DIR (default build-sanitize), GP_SANITIZE (default
# address;undefined), GP_JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

build=${GP_SANITIZE_BUILD_DIR:-build-sanitize}
sanitize=${GP_SANITIZE:-address;undefined}
jobs=${GP_JOBS:-$(nproc)}
start=$SECONDS

# -O1 -g without NDEBUG: ASan's recommended level for whole stacks, and the
# library's asserts (broken invariants) armed. CUDA sources keep their flags.
cmake -S . -B "$build" -DGP_SANITIZE="$sanitize" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g"
build=$(cd "$build" && pwd)

# gp_cpu_tests: the test executables that need no GPU. Tests registered with
# add_test may also run other programs of the tree (the cli_* tests run
# greenpipe): add every file of the build dir that a non-GPU test's command
# names (CTest prints a missing executable's path too) and that a target of
# that name makes; other such paths are data that fixtures make at test time.
known=$(cmake --build "$build" --target help | sed -nE 's/^\.\.\. ([^ ]+).*/\1/p; s/^([^ :]+): phony$/\1/p')
mapfile -t targets < <(
  ctest --test-dir "$build" -N -V -LE gpu 2>&1 |
    grep -E '^(Could not find executable |[0-9]+: Test command: )' |
    grep -oE "$build/[^ \"';]+" | sort -u |
    while read -r f; do
      ! grep -qx -- "$(basename "$f")" <<<"$known" || basename "$f"
    done | sort -u)
echo "sanitizers: building gp_cpu_tests and what non-GPU tests run: ${targets[*]}"
cmake --build "$build" -j"$jobs" --target gp_cpu_tests "${targets[@]}"
if ctest --test-dir "$build" -N -LE gpu 2>&1 | grep 'Could not find executable'; then
  echo "sanitizers: the non-GPU tests above have no executable after the build" >&2
  exit 1
fi
built=$SECONDS

# A report fails its test through exit code 86, distinct from every code the
# tests expect (cli_expect.sh compares it). In case a test runs a program and
# ignores its status, reports are also found afterwards: ASan's and LSan's in
# log files, UBSan's (which gcc's runtime prints to stderr even with log_path
# when ASan is loaded) in the outputs CTest keeps in LastTest.log.
# allocator_may_return_null=1: the library returns GP_ERR_NO_MEMORY when an
# allocation fails, and tests ask for impossible sizes to check that; ASan
# would abort on them instead. protect_shadow_gap=0: the CUDA driver maps
# memory where ASan's gap would be (harmless without a GPU, needed with one).
# fast_unwind_on_malloc=0: whole allocation stacks through libc (a leak from
# open_memstream otherwise shows only libc's two frames).
logs=$build/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"
export ASAN_OPTIONS="halt_on_error=1:exitcode=86:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:strict_string_checks=1:allocator_may_return_null=1:protect_shadow_gap=0:fast_unwind_on_malloc=0:log_path=$logs/asan"
export UBSAN_OPTIONS="halt_on_error=1:exitcode=86:print_stacktrace=1:log_path=$logs/ubsan"
export LSAN_OPTIONS="exitcode=86"

rc=0
ctest --test-dir "$build" -LE gpu -j"$jobs" --output-on-failure || rc=$?

# UBSan's "file:line:col: runtime error:", ASan's and LSan's "ERROR:" lines.
# Log files without one hold warnings only (ASan's "failed to allocate" of an
# impossible size that allocator_may_return_null lets fail): shown, not fatal.
marks='(:[0-9]+:[0-9]+|<unknown>): runtime error: |ERROR: (Address|Leak|UndefinedBehavior)Sanitizer'
shopt -s nullglob
for f in "$logs"/*; do
  if grep -Eq "$marks" "$f"; then
    echo "==== sanitizer report $f"
    rc=1
  else
    echo "==== sanitizer warnings (not a failure) $f"
  fi
  cat "$f"
done
if grep -En "$marks" "$build/Testing/Temporary/LastTest.log"; then
  echo "==== sanitizer output in the tests' logs ($build/Testing/Temporary/LastTest.log), lines above" >&2
  rc=1
fi
echo "sanitizers: $sanitize: build $((built - start)) s, tests $((SECONDS - built)) s, exit $rc"
exit $rc
