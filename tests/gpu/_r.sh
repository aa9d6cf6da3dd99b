#!/usr/bin/env bash
source "$(dirname "$0")/gpu_env.sh"
GP_KVOFF_SAN=0 bash tests/gpu/kvoff_run.sh
