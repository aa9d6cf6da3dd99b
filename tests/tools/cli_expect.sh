#!/usr/bin/env bash
# Runs a command and checks its exit code and that its output matches a
# pattern: cli_expect.sh CODES REGEX -- command args...  (CODES: e.g. 2 or "0|1")
set -u
want_code=$1; pattern=$2; shift 3
out=$("$@" 2>&1); code=$?
if ! [[ "$code" =~ ^($want_code)$ ]]; then
  printf 'exit code %s, wanted %s, for: %s\n--- output:\n%s\n' "$code" "$want_code" "$*" "$out"
  exit 1
fi
if ! grep -Eq -- "$pattern" <<<"$out"; then
  printf 'output does not match /%s/ for: %s\n--- output:\n%s\n' "$pattern" "$*" "$out"
  exit 1
fi
exit 0
