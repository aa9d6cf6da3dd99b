#!/usr/bin/env bash
source "$(dirname "$0")/gpu_env.sh"
bash tests/gpu/prefix_run.sh
