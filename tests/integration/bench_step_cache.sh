#!/usr/bin/env bash
# The step-cache GPU benchmark without a GPU: bench/step_cache.py --dry-run checks its log parsing,
# latents reader, metrics (cosine, relative L2, PSNR) and tables without torch, then sweeps every
# policy through the real ditrun on the tiny Wan bundle (CPU): the exact row first, each row's
# skipped steps and forwards as ditrun reported them, the results JSON and markdown written; and
# the GPU script's syntax. Takes the build directory as $1.
set -euo pipefail
BUILD=${1:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

args=()
if [ -x "$BUILD/bin/ditc" ] && [ -x "$BUILD/bin/ditrun" ]; then
  w21=tests/data/wan_tiny_b
  b=$("$BUILD/bin/ditc" compile "$w21/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 -o "$T/b" -q | tail -n 1 | awk '{print $NF}')
  args=(--ditrun "$BUILD/bin/ditrun" --bundle "$b" --inputs "$w21/generate_inputs.safetensors" --steps 12)
fi
python3 bench/step_cache.py --dry-run --out "$T/r" "${args[@]}" > "$T/out.txt" || { cat "$T/out.txt"; exit 1; }
grep -q "| ditrun | easycache:0.06 | 25.00 | 35.00 | 2.40x | 29 | 42 | 0.991779 | 1.325e-01 | 26.02 |" "$T/out.txt"
grep -q "| cache-dit | absent | failed: cache-dit is not installed" "$T/out.txt"
grep -q "^random weights: " "$T/r/step_cache.md"
python3 - "$T/r/step_cache.json" "${#args[@]}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["dry_run"] is True
if int(sys.argv[2]):
    rows = d["tiny"]["rows"]
    assert [r["policy"] for r in rows][0] == "off" and len(rows) >= 8, rows
    assert all(not r.get("failed") for r in rows), rows
    exact = rows[0]
    assert exact["skipped_count"] == 0 and exact["forwards"] == 24 and exact["quality"]["cosine"] > 0.999999, exact
    c2 = next(r for r in rows if r["policy"] == "cadence:2")
    # cadence:2 over 12 steps, W 2, C 1: steps 3 5 7 9 skipped, two forwards each (CFG, one lane).
    assert c2["skipped"] == [3, 5, 7, 9] and c2["forwards"] == 16, c2
    assert c2["quality"]["cosine"] < 1 and c2["quality"]["psnr_db"] < 1e9, c2
    cal = [r for r in rows if r["policy"] == "calibrate-cache"]
    assert len(cal) == 1 and cal[0]["profile"]["gate"], cal  # auto's profile, made before auto ran
    auto = next(r for r in rows if r["policy"] == "auto")
    assert auto.get("resolved", "").split(":")[0] in ("teacache", "delta", "cadence"), auto
    for r in rows:
        assert r["policy"] == "calibrate-cache" or r["forwards"] == 24 - 2 * r["skipped_count"], r
print("bench_step_cache: rows check out")
PY
bash -n tests/gpu/run.sh
echo "bench_step_cache: ok"
