#!/usr/bin/env bash
# Wan2.1 image-to-video (image tokens through the cross-attention's added K/V): the tiny I2V
# model's CPU forward against diffusers' fp32 output (max relative error <= 1e-4), every
# Wan2.1 topology against the single-rank run (<= 1e-5, as topologies.sh), topologies the
# shape cannot split refused at compile time, the bf16 sm_90 compile (no GPU needed), and
# the refusals the image split implies.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
d=tests/data/wan21_i2v_tiny
read -r F H W B L N < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'], m['image_tokens'])")
c=(compile "$d/model" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" --image-len "$N" -o "$T/b" -q)
one=$("$BIN/ditc" "${c[@]}" | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$one"
"$BIN/ditrun" forward "$one" --inputs "$d/forward_inputs.safetensors" --out "$T/f_one.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/f_one.safetensors" "$d/forward_output.safetensors" sample 1e-4

# The image tokens are a shape: they enter the identity, and another count is another graph.
other=$("$BIN/ditc" "${c[@]}" --image-len 7 | tail -n1 | cut -d' ' -f3)
[ "$other" != "$one" ] || { echo "--image-len does not reach the identity"; exit 1; }
if "$BIN/ditrun" forward "$other" --inputs "$d/forward_inputs.safetensors" --out "$T/x.safetensors" 2>"$T/err"; then
  echo "a bundle for 7 image tokens ran on 5"; exit 1
fi
grep -q "encoder_hidden_states_image" "$T/err" || { cat "$T/err"; exit 1; }
default=$("$BIN/ditc" compile "$d/model" --frames "$F" --height "$H" --width "$W" --batch "$B" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
explicit=$("$BIN/ditc" compile "$d/model" --frames "$F" --height "$H" --width "$W" --batch "$B" --image-len 257 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
[ "$default" = "$explicit" ] || { echo "the default image length is not 257"; exit 1; }

for top in "--tp 2" "--cfg-parallel" "--cfg-parallel --tp 2" "--cp 2 --cp-mode gather" "--cp 3 --cp-mode gather" \
           "--cp 2 --cp-mode ulysses" "--cp 2 --cp-mode ring" "--cp 3 --cp-mode ring" "--cp 2 --cp-mode ring --tp 2 --cfg-parallel" \
           "--cp 2 --cp-mode gather --tp 2 --cfg-parallel" "--tp 2 --sp" "--tp 2 --sp --cp 3 --cp-mode ring"; do
  # shellcheck disable=SC2086
  par=$("$BIN/ditc" "${c[@]}" $top | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" forward "$par" --inputs "$d/forward_inputs.safetensors" --out "$T/f_par.safetensors" 2>/dev/null
  echo "== $top"
  "$BIN/st_compare" "$T/f_par.safetensors" "$T/f_one.safetensors" sample 1e-5
done

refuse() { # expected message part, compile flags...
  local want=$1; shift
  if "$BIN/ditc" "${c[@]}" "$@" 2>"$T/err" >/dev/null; then echo "accepted $*"; exit 1; fi
  grep -q -- "$want" "$T/err" || { echo "refusal of $* does not say '$want':"; cat "$T/err"; exit 1; }
}
# 2 heads and 18 tokens: no 4-way head or token split exists.
refuse "not divisible by 4" --tp 4
refuse "do not split into 4" --cp 4 --cp-mode ring
refuse "not divisible by 2" --cp 2 --cp-mode ulysses --tp 2
refuse "exactly 512 text tokens" --text-len 256
refuse "expected a positive count" --image-len 0
if "$BIN/ditc" compile tests/data/wan_tiny_a/model --frames 9 --height 32 --width 48 --image-len 5 -o "$T/x" 2>"$T/err" >/dev/null; then
  echo "a text-only model took --image-len"; exit 1
fi
grep -q "takes no image tokens" "$T/err" || { cat "$T/err"; exit 1; }

# generate refuses the image-to-video bundle without its image inputs (generate_i2v.sh runs
# it with them), naming what it needs, and writes nothing.
python3 - "$T/p.safetensors" "$B" "$L" <<'PY'
import json, struct, sys
b, l = int(sys.argv[2]), int(sys.argv[3])
n = b * l * 16
hdr = json.dumps({"prompt_embeds": {"dtype": "F32", "shape": [b, l, 16], "data_offsets": [0, 4 * n]}}).encode()
hdr += b" " * (-len(hdr) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hdr)) + hdr + struct.pack("<%df" % n, *([0.25] * n)))
PY
if "$BIN/ditrun" generate "$one" --prompt-embeds "$T/p.safetensors" --seed 1 --steps 2 --guidance 1 --out "$T/g.safetensors" 2>"$T/err"; then
  echo "generate ran an image-to-video bundle"; exit 1
fi
grep -q 'generate needs --image-latents' "$T/err" && [ ! -e "$T/g.safetensors" ] || { cat "$T/err"; exit 1; }

# Hopper in bf16 compiles without a GPU: the exact-GELU kernel and the image branch included.
G=$("$BIN/ditc" "${c[@]}" --dtype bf16 --target sm_90 | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$G" >/dev/null
"$BIN/ditc" inspect "$G" >/dev/null
echo "goldens_i2v: the Wan2.1 I2V forward matches diffusers; every topology matches one rank"
