#!/usr/bin/env bash
# Fuzzes the model-file parsers (safetensors, config.json, the shard index)
# and the HTTP API's request parser (api) with clang's libFuzzer under
# ASan+UBSan for a bounded time per target.
# Prints one line per target; on a crash, leak or timeout prints the input's
# path and a hex dump, keeps the scratch folder, and exits non-zero.
# Knobs: FUZZ_SECONDS (per target, default 20), FUZZ_TARGETS (default all),
# FUZZ_KEEP=1 keeps the scratch folder (binaries, grown corpus) on success.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

secs=${FUZZ_SECONDS:-20}
targets=${FUZZ_TARGETS:-"safetensors config index api"}
case $secs in '' | *[!0-9]*) echo "fuzz: FUZZ_SECONDS='$secs' must be a whole number of seconds" >&2; exit 2 ;; esac

sudo_cmd=""
[ "$(id -u)" = 0 ] || sudo_cmd="sudo"
apt_updated=0
apt_install() {
  echo "fuzz: installing $*"
  if [ $apt_updated = 0 ]; then
    $sudo_cmd apt-get update -qq </dev/null
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "$@" </dev/null
}

need=()
for pkg in clang pkg-config libjansson-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"

# libFuzzer's runtime ships apart from the compiler: libclang-rt-N-dev since
# LLVM 14 in Debian, inside libclang-common-N-dev before that.
major=$(clang -dumpversion | cut -d. -f1)
rt_pkg=""
for p in "libclang-rt-$major-dev" "libclang-common-$major-dev"; do
  # grep without -q reads all of dpkg's output: no SIGPIPE under pipefail.
  if dpkg -s "$p" >/dev/null 2>&1 && dpkg -L "$p" | grep 'libclang_rt\.fuzzer-' >/dev/null; then
    rt_pkg=$p
    break
  fi
done
if [ -z "$rt_pkg" ]; then
  [ $apt_updated = 1 ] || { $sudo_cmd apt-get update -qq </dev/null; apt_updated=1; }
  if apt-cache show "libclang-rt-$major-dev" >/dev/null 2>&1; then
    apt_install "libclang-rt-$major-dev"
  else
    apt_install "libclang-common-$major-dev"
  fi
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gp-fuzz.XXXXXX")
start=$(date +%s)

# ---- build: the parsers' sources only, no CUDA, no CMake
san="-fsanitize=address,undefined -fno-sanitize-recover=all"
cflags="-std=gnu11 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter $san
        -I$repo/common -I$repo/model -I$repo/tests/fuzz $(pkg-config --cflags jansson)"
# The request parser's headers reach the serving core's (types only).
for dir in chat http serve pipeline sched tools queues reference stage; do cflags="$cflags -I$repo/$dir"; done
libs="$(pkg-config --libs jansson) -lm -lpthread"
# checkpoint.c (the index parser) needs config, safetensors and host weights.
lib_srcs="common/status.c common/tensor.c common/read_file.c common/progress.c common/measure.c model/safetensors.c model/config.c model/arch.c model/checkpoint.c model/weights.c model/synth.c"
# The request parser: chat messages and jansson, no model code.
lib_srcs="$lib_srcs chat/messages.c http/api_request.c http/api_response.c http/api_utf8.c"
objs=()
for src in $lib_srcs; do
  obj="$work/$(basename "$src" .c).o"
  # shellcheck disable=SC2086
  clang $cflags -fsanitize=fuzzer-no-link -c "$repo/$src" -o "$obj"
  objs+=("$obj")
done
for t in $targets; do
  [ -f "tests/fuzz/fuzz_$t.c" ] || { echo "fuzz: unknown target '$t' (no tests/fuzz/fuzz_$t.c)" >&2; exit 2; }
  # shellcheck disable=SC2086
  clang $cflags -fsanitize=fuzzer -DGP_FUZZ_LIBFUZZER "tests/fuzz/fuzz_$t.c" "${objs[@]}" $libs -o "$work/fuzz_$t"
done
build_s=$(( $(date +%s) - start ))
echo "fuzz: built $(wc -w <<<"$targets") targets with clang $major in ${build_s} s (scratch: $work)"

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"

stat_of() { sed -n "s/^stat::$1: *//p" "$2" | tail -n 1; }
count_files() { find "$1" -type f | wc -l; }

failed=0
for t in $targets; do
  corpus="$work/corpus/$t"
  arts="$work/artifacts/$t"
  mkdir -p "$corpus" "$arts"
  cp tests/fuzz/corpus/"$t"/* "$corpus"/
  # Past crashes go first in every run: a fix must stay fixed under ASan too.
  if [ -d "tests/fuzz/regressions/$t" ]; then
    for f in tests/fuzz/regressions/"$t"/*; do
      [ -f "$f" ] && cp "$f" "$corpus/regression-$(basename "$f")"
    done
  fi
  seeds=$(count_files "$corpus")
  log="$work/$t.log"
  rc=0
  "$work/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -max_len=4096 -dict="tests/fuzz/dict/$t.dict" -print_final_stats=1 \
    -artifact_prefix="$arts/" "$corpus" >"$log" 2>&1 </dev/null || rc=$?
  runs=$(stat_of number_of_executed_units "$log")
  eps=$(stat_of average_exec_per_sec "$log")
  rss=$(stat_of peak_rss_mb "$log")
  found=$(find "$arts" -type f -print -quit)
  if [ "$rc" = 0 ] && [ -z "$found" ]; then
    echo "fuzz $t: ok: ${runs:-?} runs in ${secs} s (${eps:-?} exec/s), corpus $seeds -> $(count_files "$corpus") inputs, peak RSS ${rss:-?} MB"
    continue
  fi
  failed=1
  kind="no input saved"
  [ -z "$found" ] || kind=$(basename "$found" | cut -d- -f1) # crash, leak, timeout, oom
  echo "fuzz $t: FAILED ($kind, exit status $rc) after ${runs:-?} runs"
  if [ -n "$found" ]; then
    echo "fuzz $t: input: $found ($(stat -c %s "$found") bytes); first bytes:"
    od -A x -t x1z -v -N 256 "$found" | sed 's/^/    /'
    echo "fuzz $t: keep it as a regression: cp '$found' tests/fuzz/regressions/$t/<name>"
  fi
  # The report from its first line (sanitizer, failed check, timeout, OOM).
  first=$(grep -n -E 'ERROR: |runtime error:|fuzz check failed|ALARM: |out-of-memory|deadly signal' "$log" \
          | head -n 1 | cut -d: -f1 || true)
  if [ -n "$first" ]; then
    echo "fuzz $t: report (full log: $log):"
    sed -n "${first},$((first + 30))p" "$log" | sed 's/^/    /'
    grep '^SUMMARY' "$log" | sed 's/^/    /' || true
  else
    echo "fuzz $t: end of the log ($log):"
    grep -v '^#[0-9]' "$log" | tail -n 40 | sed 's/^/    /'
  fi
done

total_s=$(( $(date +%s) - start ))
if [ $failed != 0 ]; then
  echo "fuzz: FAILED after ${total_s} s; inputs and logs kept in $work"
  exit 1
fi
if [ "${FUZZ_KEEP:-0}" = 1 ]; then
  echo "fuzz: all targets ok in ${total_s} s; scratch kept in $work"
else
  rm -rf "$work"
  echo "fuzz: all targets ok in ${total_s} s"
fi
