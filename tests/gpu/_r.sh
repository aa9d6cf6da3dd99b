#!/usr/bin/env bash
source "$(dirname "$0")/gpu_env.sh"
GP_SPARSE_LEVELS=0.5 GP_SPARSE_SAN=0 bash tests/gpu/sparse_run.sh
