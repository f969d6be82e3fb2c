#!/usr/bin/env bash
# Wan2.2-I2V-A14B's forward: a WanImageToVideoPipeline whose two experts take 36 latent
# channels (16 noisy + 4 mask + 16 condition) and return 16, with no image embedder. Each
# expert's CPU forward against diffusers' fp32 output (max relative error <= 1e-4), bf16
# within bf16.sh's forward tolerance, topologies equal to one rank (<= 1e-5, as
# topologies.sh), the bf16 sm_90 compile (no GPU needed), and generate still refusing a bundle
# whose condition channels it cannot supply.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
d=tests/data/wan22_i2v_a14b_tiny
read -r F H W B L < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'])")
c=(compile "$d" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" -o "$T/b" -q)
one=$("$BIN/ditc" "${c[@]}" | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$one" >/dev/null
"$BIN/ditrun" info "$one" >"$T/info"
grep -q "^input      hidden_states          f32\[$B,36," "$T/info" && grep -q "^output     sample                 f32\[$B,16," "$T/info" &&
  grep -q "^experts    2" "$T/info" || { cat "$T/info"; echo "expected 36 channels in, 16 out, two experts"; exit 1; }
for e in transformer transformer_2; do
  "$BIN/ditrun" forward "$one" --expert "$e" --inputs "$d/forward_inputs.safetensors" --out "$T/f_$e.safetensors" 2>/dev/null
  "$BIN/st_compare" "$T/f_$e.safetensors" "$d/forward_output_$e.safetensors" sample 1e-4
done
# The experts are told apart.
if "$BIN/st_compare" "$T/f_transformer.safetensors" "$d/forward_output_transformer_2.safetensors" sample 1e-4 >/dev/null 2>&1; then
  echo "transformer's forward matches transformer_2's reference"; exit 1
fi

b16=$("$BIN/ditc" "${c[@]}" --dtype bf16 | tail -n1 | cut -d' ' -f3)
for e in transformer transformer_2; do
  "$BIN/ditrun" forward "$b16" --expert "$e" --inputs "$d/forward_inputs.safetensors" --out "$T/b_$e.safetensors" 2>/dev/null
  "$BIN/st_compare" "$T/b_$e.safetensors" "$d/forward_output_$e.safetensors" sample 2e-2 0.9999
done

for top in "--tp 2" "--cfg-parallel" "--cp 2 --cp-mode gather" "--cp 2 --cp-mode ulysses" "--cp 3 --cp-mode ring" "--tp 2 --sp"; do
  # shellcheck disable=SC2086
  par=$("$BIN/ditc" "${c[@]}" $top | tail -n1 | cut -d' ' -f3)
  for e in transformer transformer_2; do
    "$BIN/ditrun" forward "$par" --expert "$e" --inputs "$d/forward_inputs.safetensors" --out "$T/p.safetensors" 2>/dev/null
    echo "== $top $e"
    "$BIN/st_compare" "$T/p.safetensors" "$T/f_$e.safetensors" sample 1e-5
  done
done

G90=$("$BIN/ditc" "${c[@]}" --dtype bf16 --target sm_90 | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$G90" >/dev/null

# generate supplies noisy latents only: without the mask and condition channels it refuses and
# writes nothing.
gi=$T/p.safetensors
python3 - "$gi" "$L" <<'PY'
import json, struct, sys
l = int(sys.argv[2]); n = l * 24
hdr = json.dumps({"prompt_embeds": {"dtype": "F32", "shape": [1, l, 24], "data_offsets": [0, 4 * n]}}).encode()
hdr += b" " * (-len(hdr) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hdr)) + hdr + struct.pack("<%df" % n, *([0.25] * n)))
PY
gb=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$W" --batch 1 --text-len "$L" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
if "$BIN/ditrun" generate "$gb" --prompt-embeds "$gi" --seed 1 --steps 2 --guidance 1 --out "$T/g.safetensors" 2>"$T/err"; then
  echo "generate ran a 36-channel bundle without its condition"; exit 1
fi
[ ! -e "$T/g.safetensors" ] || { echo "partial output"; exit 1; }
echo "generate refused: $(tail -n 1 "$T/err")"
echo "goldens_i2v_a14b: both experts' 36-channel forwards match diffusers; every topology matches one rank"
