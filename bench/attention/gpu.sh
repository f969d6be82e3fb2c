#!/bin/sh
# Runs the attention benchmark on a GPU machine with the prebuilt build-attn/ (see build.sh).
# Usage: bench/attention/gpu.sh RESULTS_DIR [run.py options]
set -u
cd "$(dirname "$0")/../.."
OUT=${1:?usage: gpu.sh RESULTS_DIR}
shift
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
if ! build-attn/attn_bench --compile-only >/dev/null 2>&1; then
  echo "prebuilt attn_bench does not run here; rebuilding" >&2
  sh bench/attention/build.sh || exit 1
fi
PYTHONUNBUFFERED=1 python3 bench/attention/run.py "$OUT/attention.json" "$@" 2>&1 | tee "$OUT/run.log"
