#!/usr/bin/env bash
# cmake/GpBuildInfo.cmake: the report's commit is the project's own or
# "unknown": sources unpacked inside another repository must not take its
# commit, .gp-commit wins over git, and a checkout of its own names HEAD.
# Usage: build_commit_test.sh CMAKE SCRIPT
set -euo pipefail
cmake_bin=$1
script=$2
command -v git >/dev/null 2>&1 || { echo "no git: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
commit_of() { # SRC -> the commit the generated file names
  rm -f "$tmp/out.c"
  "$cmake_bin" -DSRC="$1" -DOUT="$tmp/out.c" -P "$script"
  sed -n 's/.*return "\(.*\)";/\1/p' "$tmp/out.c"
}
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1

# an enclosing repository with a commit, the sources a plain folder in it
mkdir -p "$tmp/outer/vendor/greenpipe"
git -C "$tmp/outer" init -q
git -C "$tmp/outer" commit -q --allow-empty -m outer
got=$(commit_of "$tmp/outer/vendor/greenpipe")
[ "$got" = unknown ] || fail "sources inside another repository: got '$got', want unknown"

# the same through a symlink to the folder: still not the checkout's top
ln -s "$tmp/outer/vendor/greenpipe" "$tmp/link"
got=$(commit_of "$tmp/link")
[ "$got" = unknown ] || fail "symlinked sources inside another repository: got '$got', want unknown"

# .gp-commit wins, and only commit-name characters reach the C string
printf 'abc123"; evil\n' > "$tmp/outer/vendor/greenpipe/.gp-commit"
got=$(commit_of "$tmp/outer/vendor/greenpipe")
[ "$got" = abc123evil ] || fail ".gp-commit: got '$got', want abc123evil"

# a checkout of its own, reached through a symlink: its HEAD
mkdir "$tmp/own"
git -C "$tmp/own" init -q
git -C "$tmp/own" commit -q --allow-empty -m own
want=$(git -C "$tmp/own" rev-parse --short=12 HEAD)
ln -s "$tmp/own" "$tmp/own-link"
got=$(commit_of "$tmp/own-link")
[ "$got" = "$want" ] || fail "own checkout: got '$got', want $want"

# no git at all: unknown
mkdir "$tmp/plain"
got=$(commit_of "$tmp/plain")
[ "$got" = unknown ] || fail "plain folder: got '$got', want unknown"
echo "build commit: all cases pass"
