#!/usr/bin/env bash
# bf16 storage (fp32 accumulation, norms, modulation and time embedding, as diffusers keeps
# them) against diffusers' fp32 goldens. Tolerances for bf16 rounding through 2-3 blocks:
# forward max relative error <= 2e-2 and cosine >= 0.9999; a 4-step UniPC generate with CFG
# <= 6e-2 and cosine >= 0.999 (measured: 4.5e-3 / 8.0e-3 forward, 1.6e-2 / 2.8e-2 generate).
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for d in tests/data/wan_tiny_*/; do
  d=${d%/}
  read -r F H W B L STEPS G S < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'], m['steps'], m['guidance'], m['shift'])")
  line=$("$BIN/ditc" compile "$d/model" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" --dtype bf16 -o "$T/b" -q | tail -n 1)
  bundle=${line##* }
  "$BIN/ditrun" forward "$bundle" --inputs "$d/forward_inputs.safetensors" --out "$T/f.safetensors" 2>/dev/null
  "$BIN/st_compare" "$T/f.safetensors" "$d/forward_output.safetensors" sample 2e-2 0.9999
  gi="$d/generate_inputs.safetensors"
  "$BIN/ditrun" generate "$bundle" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" \
    --steps "$STEPS" --guidance "$G" --shift "$S" --out "$T/g.safetensors" 2>/dev/null
  "$BIN/st_compare" "$T/g.safetensors" "$d/generate_unipc.safetensors" latents 6e-2 0.999
done
