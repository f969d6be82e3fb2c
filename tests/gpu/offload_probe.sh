#!/usr/bin/env bash
# Real-size weights through the offload path, every step timed and bounded: page-locking the
# Wan2.1-1.3B weight blob (registered in place, then as a page-locked copy), the calibration,
# then a short sweep (17 and 81 frames x {none, layerwise, chunked}) with the pinning that worked.
# With CONTENTION=1 instead: Ulysses-2 with NCCL_P2P_DISABLE=1, layerwise against chunked, on
# the calibration in bench/results/profile_h200.json.
# usage: tests/gpu/offload_probe.sh RESULTS_DIR [BUILD_DIR]
set -uo pipefail
OUT=${1:?results dir}
BIN=${2:-build-gpu}/bin
export LD_LIBRARY_PATH="$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
W=$(mktemp -d)
export DITC_CACHE_DIR=$W/cache
mkdir -p "$DITC_CACHE_DIR/kernels" "$OUT"
cp .kcache/kernels/* "$DITC_CACHE_DIR/kernels/"
"$BIN/make_tiny_wan" --preset wan2.1-1.3b --dtype bf16 --out "$W/m" --text-len 512 >/dev/null
python3 - "$W/in.safetensors" <<'PY'
import sys, numpy as np
from safetensors.numpy import save_file
g = np.random.default_rng(17)
save_file({"hidden_states": g.standard_normal((1, 16, 5, 60, 104), dtype=np.float32), "timestep": np.array([500]),
           "encoder_hidden_states": g.standard_normal((1, 512, 4096), dtype=np.float32)}, sys.argv[1])
PY
if [ -n "${SWEEP:-}" ]; then  # the one-GPU sweep on the carried calibration, no pinning probe
  timeout "${SWEEP_TIMEOUT:-110}" python3 bench/offload/sweep.py --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" --clean --model "$W/m/model" \
    --out "$W/s" --frames "${PROBE_FRAMES:-1,5,9}" --iters 3 --profile bench/results/profile_h200.json --no-residency --no-chunks 2>&1 |
    tee "$OUT/bench_offload_sweep.txt"
  rm -rf "$W"
  exit 0
fi
if [ -n "${CONTENTION:-}" ]; then
  NCCL_P2P_DISABLE=1 timeout 200 python3 bench/offload/sweep.py --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" --clean --model "$W/m/model" \
    --out "$W/c" --frames "${PROBE_FRAMES:-17,81}" --iters 3 --profile bench/results/profile_h200.json --extra "--cp 2 --cp-mode ulysses" \
    --devices 2 --modes layerwise,chunked --no-residency --no-chunks 2>&1 | tee "$OUT/bench_offload_contention.txt"
  rm -rf "$W"
  exit 0
fi
b=$("$BIN/ditc" compile "$W/m/model" --frames 17 --height 480 --width 832 --text-len 512 --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
pin=
for how in register copy; do
  t0=$(date +%s%N)
  DIT_CUDA_PIN=$how timeout 60 "$BIN/ditrun" calibrate "$b" --inputs "$W/in.safetensors" --profile-out "$W/p_$how.json" --steps 3
  rc=$?
  echo "pinning by $how: rc $rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  [ $rc = 0 ] && [ -z "$pin" ] && pin=$how
done
[ -n "$pin" ] || exit 1
cp "$W/p_$pin.json" "$OUT/profile.json"
DIT_CUDA_PIN=$pin timeout 240 python3 bench/offload/sweep.py --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" --clean --model "$W/m/model" --out "$W/o" \
  --frames "${PROBE_FRAMES:-17,81}" --iters 3 --profile "$W/p_$pin.json" --no-residency --no-chunks 2>&1 | tee "$OUT/bench_offload_probe.txt"
rm -rf "$W"
