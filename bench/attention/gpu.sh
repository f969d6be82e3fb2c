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
[ -n "${ATTN_NCU_ONLY:-}" ] || PYTHONUNBUFFERED=1 python3 bench/attention/run.py "$OUT/attention.json" "$@" 2>&1 | tee "$OUT/run.log"
# ATTN_NCU=SHAPE: Nsight Compute's view of our kernels at one shape (bf16, then the fp8 and int8
# forms): throughput of each pipe, issue activity and the warps' stall reasons per issued
# instruction, to see what bounds them (ATTN_NCU_ONLY=1: this alone, not run.py).
if [ -n "${ATTN_NCU:-}" ] && command -v ncu >/dev/null 2>&1; then
  timeout 240 ncu --clock-control none -k regex:dit_kernel --launch-count 3 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active" \
    build-attn/attn_bench --repo . --cache build-attn/cubin --iters 1 --warmup 0 --no-old --fp8 "$ATTN_NCU" > "$OUT/ncu.txt" 2>&1
  echo "ncu: rc $? ($OUT/ncu.txt)"
fi
