#!/usr/bin/env bash
# Compiles every tiny Wan golden model and checks ditrun forward and a 4-step generate (UniPC
# and Euler, with CFG) against diffusers' own fp32 outputs: max relative error <= 1e-4.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
n=0
for d in tests/data/wan_tiny_*/; do
  d=${d%/}
  read -r F H W B L STEPS G S < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'], m['steps'], m['guidance'], m['shift'])")
  line=$("$BIN/ditc" compile "$d/model" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" -o "$T/bundles" -q | tail -n 1)
  bundle=${line##* }
  "$BIN/ditrun" verify "$bundle"
  "$BIN/ditrun" forward "$bundle" --inputs "$d/forward_inputs.safetensors" --out "$T/forward.safetensors" 2>/dev/null
  "$BIN/st_compare" "$T/forward.safetensors" "$d/forward_output.safetensors" sample 1e-4
  for smp in unipc euler; do
    gi="$d/generate_inputs.safetensors"
    "$BIN/ditrun" generate "$bundle" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" \
      --steps "$STEPS" --guidance "$G" --shift "$S" --sampler "$smp" --out "$T/gen_$smp.safetensors" 2>/dev/null
    "$BIN/st_compare" "$T/gen_$smp.safetensors" "$d/generate_$smp.safetensors" latents 1e-4
  done
  n=$((n + 1))
done
[ "$n" -ge 2 ] || { echo "expected at least two golden configs, found $n"; exit 1; }
echo "goldens: $n configs match diffusers"
