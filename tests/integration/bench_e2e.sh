#!/usr/bin/env bash
# The prompt-to-MP4 GPU benchmark without a GPU: bench/e2e_wan.py --dry-run writes its tables with
# placeholder rows (the standard library alone) and the command lines it runs; its ditrun half on
# the tiny pipeline (tests/data/wan_pipeline_tiny, CPU, fp32, no peer): the one generate writes the
# MP4 and the float frames, which match diffusers' WanPipeline's (the golden), its stages parsed
# from ditrun's stderr; the README passage renders from the dry run's results only when asked to;
# the GPU script's syntax. $1: the build.
set -euo pipefail
BUILD=${1:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 bench/e2e_wan.py --dry-run --out "$T/r" > "$T/out.txt" || { cat "$T/out.txt"; exit 1; }
grep -q "^| ditrun generate (cold process) | 100.00 | 5.00 | 2.00 | 75.00 | 15.00 | 3.00 | 1.50x | 1.70x | 40.00 | 0.999900 |$" "$T/r/e2e_wan.md"
grep -q "^| diffusers WanPipeline (cold process) | 170.00 | 20.00 | - | 148.00 | - | 2.00 | 0.88x | 1.00x | - | - |$" "$T/r/e2e_wan.md"
grep -q "^| diffusers WanPipeline + torch.compile | failed: out of memory |" "$T/r/e2e_wan.md"
grep -q "^generate: .* --init-latents X.safetensors .* --out ours.mp4 --out-frames ours_frames.safetensors$" "$T/out.txt"
grep -q "^compile: ditc compile PIPE --frames 81 --height 480 --width 832 --text-len 512 --dtype bf16 --target sm_90$" "$T/out.txt"
python3 - "$T/r/e2e_wan.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["dry_run"] is True and d["latents"] == [1, 16, 21, 60, 104] and d["steps"] == 50, d
assert [r["contender"] for r in d["rows"]] == ["ditrun generate (cold process)", "diffusers WanPipeline",
                                               "diffusers WanPipeline (cold process)", "diffusers WanPipeline + torch.compile"], d["rows"]
PY
python3 bench/report.py --render stages --results "$T/r" --allow-dry-run > "$T/passage.md"
grep -q "one cold .ditrun generate. 100.00 s (load 5.00 s" "$T/passage.md" || { cat "$T/passage.md"; exit 1; }
tr '\n' ' ' < "$T/passage.md" | sed 's/  */ /g' | grep -q "diffusers as a script runs it (a fresh process: import, from_pretrained, the call, export) 170.00 s (1.70x)" ||
  { cat "$T/passage.md"; exit 1; }
if python3 bench/report.py --render stages --results "$T/r" > /dev/null 2>&1; then echo "a dry run's results rendered as measured"; exit 1; fi

# The ditrun half for real on the tiny pipeline, its golden's noise, prompt and loop.
d=tests/data/wan_pipeline_tiny
read -r F H W L STEPS < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['text_len'], m['steps'])")
PROMPT=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['prompt'])")
NEG=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['negative_prompt'])")
python3 -c "import json; m=json.load(open('$d/meta.json')); assert (m['guidance'], m['shift']) == (5.0, 3.0), m"
python3 bench/e2e_wan.py --ditc "$BUILD/bin/ditc" --ditrun "$BUILD/bin/ditrun" --work "$T/w" --out "$T/o" --pipeline "$d" \
  --init-latents "$d/golden.safetensors" --frames "$F" --height "$H" --width "$W" --text-len "$L" --steps "$STEPS" \
  --target cpu --dtype fp32 --skip-peer --keep --prompt "$PROMPT" --negative-prompt "$NEG" > "$T/tiny.txt" ||
  { cat "$T/tiny.txt"; exit 1; }
"$BUILD/bin/st_compare" "$T/w/ours_frames.safetensors" "$d/golden.safetensors" frames 1e-3
head -c 8 "$T/w/ours.mp4" | tail -c 4 | grep -q ftyp
python3 - "$T/o/e2e_wan.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
o = {r["contender"]: r for r in d["rows"]}
r = o["ditrun generate (cold process)"]
assert not r.get("failed") and r["total_s"] > 0 and r["mp4_bytes"] > 0, r
assert set(r["stages"]) == {"load", "text_encoder", "denoise", "vae_decode", "encode"}, r["stages"]
assert r["process_wall_s"] >= r["total_s"] >= sum(r["stages"].values()) - 0.05, r
assert o["diffusers WanPipeline"]["skipped"] == "--skip-peer", o
assert (d["layers"], d["te_layers"]) == (2, 2) and d["dry_run"] is False, d
PY
bash -n tests/gpu/run.sh
bash -n tests/gpu/prepare.sh
echo "bench_e2e: ok"
