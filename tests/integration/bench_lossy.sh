#!/usr/bin/env bash
# The lossy-mode GPU benchmark without a GPU: bench/lossy.py --dry-run checks its mode flags, bench
# parsing, budget and table without torch, then compiles the tiny Wan model in every mode with the
# real ditc (17 frames at 128x128: three tiles of 128 tokens, so sta:1,8,8 is sparse) and runs the
# ditrun half on the CPU: each mode's forward against the exact one and a 3-step CFG generate from
# one seed; then the tiny FLUX.1-dev pipeline's modes as the MMDiT benchmarks' --lossy runs them;
# the README passage renders from those results; the GPU script's syntax. $1: the build.
set -euo pipefail
BUILD=${1:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# The tiny Wan model at head dim 128, so that the FP8 attention modes have an attention to take.
"$BUILD/bin/make_tiny_wan" --preset tiny-hd128 --dtype bf16 --text-len 7 --out "$T/m" >/dev/null
args=(--ditc "$BUILD/bin/ditc" --ditrun "$BUILD/bin/ditrun" --model "$T/m/model" --inputs "$T/m/embeds.safetensors" --sta 1,8,8 --steps 3)
python3 bench/lossy.py --dry-run --out "$T/r" "${args[@]}" > "$T/out.txt" || { cat "$T/out.txt"; exit 1; }
grep -q "| ditrun | fp8+sta | - | 250.0 | 100.0 | 1.60x | 2.00x | 0.991779 | 1.325e-01 | 25.00 | 0.991779 | 26.02 |" "$T/out.txt"
grep -q "| sageattention | attention | absent | failed: sageattention is not installed" "$T/out.txt"
grep -q "| ditrun | radial | - | skipped: not run: the call's 1 s budget was spent" "$T/out.txt"
python3 - "$T/r/lossy_dry.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["dry_run"] is True and d["tiny"] is True
rows = {r["mode"]: r for r in d["part"]["rows"]}
assert list(rows) == ["exact", "fp8", "sta", "radial", "fp8+sta", "fp8attn", "fp8all", "fp8all+sta", "int8attn", "int8all", "int8all+sta",
                      "int8all+radial", "int8fp8attn", "int8fp8all", "int8fp8all+sta"], list(rows)
assert all(not r.get("failed") for r in rows.values()), rows
assert rows["fp8"]["flags"] == ["--quant", "fp8"] and rows["fp8+sta"]["flags"] == ["--quant", "fp8", "--sparse-attn", "sta:1,8,8"]
assert rows["fp8attn"]["flags"] == ["--attn-quant", "fp8"] and rows["fp8all+sta"]["flags"] == ["--quant", "fp8", "--attn-quant", "fp8",
                                                                                          "--sparse-attn", "sta:1,8,8"]
assert rows["fp8attn"]["by_op_ms"].get("attention_fp8", 0) > 0 and rows["fp8attn"]["by_op_ms"].get("attn_quant", 0) > 0, rows["fp8attn"]
e = rows["exact"]
assert e["forward"]["cosine"] > 0.999999 and e["generate"]["quality"]["psnr_db"] == float("inf"), e
for m in list(rows)[1:]:  # lossy: moved from the exact result, but not far (fp8.sh's bound for the forward)
    f, g = rows[m]["forward"], rows[m]["generate"]["quality"]
    assert 0.98 < f["cosine"] < 0.999999 and f["rel_l2"] > 0, (m, f)
    assert 0.95 < g["cosine"] < 0.999999 and g["psnr_db"] < 1e9, (m, g)
    assert rows[m]["forward_ms"] > 0 and rows[m]["attention_ms"] > 0 and rows[m]["generate"]["loop_s"] > 0, rows[m]
assert rows["fp8"]["forward"]["cosine"] >= 0.999, rows["fp8"]
assert rows["fp8attn"]["forward"]["cosine"] >= 0.9995 and rows["fp8all"]["forward"]["cosine"] >= 0.999, rows  # fp8.sh's bounds
assert rows["int8attn"]["forward"]["cosine"] >= 0.9995 and rows["int8all"]["forward"]["cosine"] >= 0.999, rows
assert rows["int8fp8attn"]["flags"] == ["--attn-quant", "int8fp8"] and rows["int8fp8attn"]["forward"]["cosine"] >= 0.9995, rows
assert rows["int8all+radial"]["flags"] == ["--quant", "fp8", "--attn-quant", "int8", "--sparse-attn", "radial"], rows["int8all+radial"]
print("bench_lossy: rows check out")
PY
# Another family's modes (the MMDiT benchmarks' --lossy): the tiny FLUX.1-dev pipeline on the CPU,
# FP8 GEMMs measured against its exact bundle, FP8 attention refused (head dim 16) with the reason.
python3 - "$T/r/lossy_flux_dry.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = {r["mode"]: r for r in d["part"]["rows"]}
assert list(rows) == ["exact", "fp8", "fp8attn"] and d["complete"] is True, list(rows)
assert rows["exact"]["forward"]["cosine"] > 0.999999 and rows["exact"]["forward_ms"] > 0, rows["exact"]
f = rows["fp8"]["forward"]
assert 0.99 < f["cosine"] < 0.999999 and rows["fp8"]["flags"] == ["--quant", "fp8"] and rows["fp8"]["speedup"] > 0, rows["fp8"]
assert "head dim 64 or 128" in rows["fp8attn"]["failed"] and "forward" not in rows["fp8attn"], rows["fp8attn"]
print("bench_lossy: another family's rows check out")
PY
# The README passage from the same results (a dry run's: --allow-dry-run), named as a 480p run.
cp "$T/r/lossy_dry.json" "$T/r/lossy_480p.json"
cp "$T/r/lossy_flux_dry.json" "$T/r/lossy_flux.json"
python3 bench/report.py --render lossy --results "$T/r" --allow-dry-run > "$T/passage.md"
grep -q "^| ditrun | sta | " "$T/passage.md" || { cat "$T/passage.md"; exit 1; }
tr '\n' ' ' < "$T/passage.md" | tr -s ' ' > "$T/passage1.txt"
grep -q "tiny FLUX.1-dev, 64x64 (CPU) on CPU" "$T/passage1.txt" && grep -q "^| ditrun | fp8 | " "$T/passage.md" &&
  grep -q -- "- ditrun fp8attn: .*head dim 64 or 128, no score bias" "$T/passage1.txt" &&
  ! grep -q "its 50-step generate did not run.*tiny FLUX" "$T/passage1.txt" || { cat "$T/passage.md"; echo "the FLUX modes' passage"; exit 1; }
if python3 bench/report.py --render lossy --results "$T/r" > /dev/null 2>&1; then echo "a dry run's results rendered as measured"; exit 1; fi
bash -n tests/gpu/run.sh
echo "bench_lossy: ok"
