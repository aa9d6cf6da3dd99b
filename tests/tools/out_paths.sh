#!/usr/bin/env bash
# Output paths are tried before the model loads: out_paths.sh GREENPIPE CASE_STUDY.
# Root ignores permission bits, so the read-only directory cases run the
# programs as nobody (setpriv) from a copy in a directory nobody can read.
set -u
g=$1; cs=$2
exp=$(dirname "$0")/cli_expect.sh
t=$(mktemp -d); trap 'chmod -R u+w "$t"; rm -rf "$t"' EXIT
chmod 755 "$t"
fails=0
check() { bash "$exp" "$@" || fails=$((fails + 1)); }

mkdir "$t/ro" && chmod 555 "$t/ro"
if [ "$(id -u)" = 0 ]; then
  command -v setpriv >/dev/null || { echo "setpriv (util-linux) is needed to drop root's privileges"; exit 1; }
  mkdir "$t/bin" && cp "$g" "$cs" "$t/bin/" && chmod -R 755 "$t/bin"
  as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  # a sanitizer build's logs go where nobody may write; a report still
  # fails the check through the exit code
  mkdir -m 1777 "$t/logs"
  [ -z "${ASAN_OPTIONS:-}" ] || export ASAN_OPTIONS="$ASAN_OPTIONS:log_path=$t/logs/asan"
  [ -z "${UBSAN_OPTIONS:-}" ] || export UBSAN_OPTIONS="$UBSAN_OPTIONS:log_path=$t/logs/ubsan"
  g_ro="$t/bin/$(basename "$g")"; cs_ro="$t/bin/$(basename "$cs")"
else
  as=(); g_ro=$g; cs_ro=$cs
fi
gen=(generate --model tiny --prompt-ids 1 --steps 1)
kv=(--backend cuda --kv-store-size 1M)

# a read-only directory: every output flag, exit 2 with the system's reason
for f in --dump-logits --dump-prompt-logits; do
  check 2 "greenpipe generate: $f '$t/ro/x.json': cannot write: Permission denied" -- \
    "${as[@]}" "$g_ro" "${gen[@]}" $f "$t/ro/x.json"
done
check 2 "--sparsity-stats '$t/ro/s.json': cannot write: Permission denied" -- \
  "${as[@]}" "$g_ro" "${gen[@]}" --backend cuda --sparsity cal.json --sparsity-stats "$t/ro/s.json"
check 2 "--kv-store '$t/ro': cannot write files in it: Permission denied" -- \
  "${as[@]}" "$g_ro" "${gen[@]}" "${kv[@]}" --kv-store "$t/ro"
check 2 "--kv-store '$t/ro/new': cannot make the directory: Permission denied" -- \
  "${as[@]}" "$g_ro" "${gen[@]}" "${kv[@]}" --kv-store "$t/ro/new"
check 2 "greenpipe calibrate: --out '$t/ro/c.json': cannot write: Permission denied" -- \
  "${as[@]}" "$g_ro" calibrate --model tiny --sparsity 0.5 --out "$t/ro/c.json"
for f in --json --csv --trace --svg; do
  check 2 "$f '$t/ro/r': cannot write: Permission denied" -- "${as[@]}" "$cs_ro" $f "$t/ro/r"
done

# /proc takes no new files, even from root
check 2 "--dump-logits '/proc/self/gp.json': cannot write: " -- "$g" "${gen[@]}" --dump-logits /proc/self/gp.json
# a file given as --kv-store DIR, a directory given as a file
touch "$t/file"
check 2 "--kv-store '$t/file': not a directory" -- "$g" "${gen[@]}" "${kv[@]}" --kv-store "$t/file"
check 2 "--dump-logits '$t': cannot write: Is a directory" -- "$g" "${gen[@]}" --dump-logits "$t"

# the check leaves what it found: an existing file keeps its bytes, a new
# one is removed again (the run below stops at the vocabulary check)
echo keep > "$t/old.json"
check 2 "outside the vocabulary" -- "$g" generate --model tiny --prompt-ids 256 --steps 1 \
  --dump-logits "$t/old.json" --dump-prompt-logits "$t/new.json"
[ "$(cat "$t/old.json")" = keep ] || { echo "--dump-logits: the existing file was changed"; fails=$((fails + 1)); }
[ ! -e "$t/new.json" ] || { echo "--dump-prompt-logits: the test file was left behind"; fails=$((fails + 1)); }
check 2 "outside the vocabulary" -- "$g" generate --model tiny --prompt-ids 256 --steps 1 "${kv[@]}" --kv-store "$t/made"
[ ! -e "$t/made" ] || { echo "--kv-store: the test directory was left behind"; fails=$((fails + 1)); }

# a write that fails after the run names the reason, exit 1
check 1 "cannot write --dump-logits file '/dev/full': No space left on device" -- \
  "$g" "${gen[@]}" --dump-logits /dev/full
check 1 "cannot write the sparsity calibration to '/dev/full': No space left on device" -- \
  "$g" calibrate --model tiny --sparsity 0.5 --tokens 8 --out /dev/full
exit $((fails > 0))
