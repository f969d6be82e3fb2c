#!/usr/bin/env bash
# The Wan2.1 VAE decode GPU benchmark without a GPU: bench/vae_decode.py --dry-run checks its weight
# shapes against diffusers' tiny AutoencoderKLWan (tests/data/wan_vae_tiny), the parameter count,
# the latent shapes, the zero-weight folder writer and the table (a failed side as a row saying
# why); the folder it writes at the published widths compiles with the real ditc (CPU, one frame
# of 16x16 pixels); the GPU scripts' syntax. $1: the build.
set -euo pipefail
BUILD=${1:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 bench/vae_decode.py --dry-run --out "$T/r" > "$T/out.txt" || { cat "$T/out.txt"; exit 1; }
grep -q "^Wan2.1 VAE decoder: 73.3M parameters" "$T/out.txt"
grep -q "^| ditrun (compiled stage) | 12000.0 | 40.00 | 2.50x | 48.50 | 0.999950 |$" "$T/r/vae_decode_480p.md"
grep -q "^| ditrun (compiled stage) | failed: out of memory: 150.00 GiB needed |" "$T/r/vae_decode_720p.md"
grep -q "81 frames at 1280x720 (latents 1x16x21x90x160)" "$T/r/vae_decode_720p.md"
python3 - "$T/r" <<'PY'
import json, os, sys
for res, lat in (("480p", [1, 16, 21, 60, 104]), ("720p", [1, 16, 21, 90, 160])):
    d = json.load(open(os.path.join(sys.argv[1], f"vae_decode_{res}.json")))
    assert d["dry_run"] is True and d["res"] == res and d["latents"] == lat, d
PY
# An unknown resolution is refused by name.
if python3 bench/vae_decode.py --dry-run --out "$T/r" --res 1080p 2> "$T/err.txt"; then echo "--res 1080p accepted"; exit 1; fi
grep -q "res 1080p: --vae wan2.1 takes 480p, 720p" "$T/err.txt"
if python3 bench/vae_decode.py --dry-run --out "$T/r" --vae flux --budget 1 2> "$T/err.txt"; then echo "--budget with the FLUX.1 VAE accepted"; exit 1; fi
grep -q "budget: --vae flux decodes an image in one graph (no windows)" "$T/err.txt"
# The zero-weight folder (what tests/gpu/prepare.sh compiles for sm_90) is a vae/ folder ditc takes.
python3 bench/vae_decode.py --write-folder "$T/f" | grep -q "^wrote $T/f/vae: 146[0-9]* bytes of zero weights$"
"$BUILD/bin/ditc" compile "$T/f/vae" --frames 1 --height 16 --width 16 -o "$T/b" -q > "$T/compile.txt"
b=$(tail -n1 "$T/compile.txt" | cut -d' ' -f3)
"$BUILD/bin/ditrun" info "$b" | grep -q "^output     sample  *f32\[1,3,1,16,16\]$" || { "$BUILD/bin/ditrun" info "$b"; exit 1; }
bash -n tests/gpu/run.sh
bash -n tests/gpu/prepare.sh
