#!/usr/bin/env bash
# Image-to-video from a PNG with no Python: `ditc compile PIPELINE_DIR` adds the VAE encoder stage
# (Wan2.2 TI2V: over the image alone; Wan2.1-I2V: over the image and zero frames, in chunks) and
# Wan2.1-I2V's CLIP image encoder stage, whose bundle carries the pipeline's
# preprocessor_config.json; `ditrun generate --prompt --image PNG` gives WanImageToVideoPipeline's
# final latents within 1e-4 and its frames at >= 45 dB (make_goldens_wan_i2v.py), from a picture
# of another size and aspect than the video's (resized with PIL's LANCZOS, and for CLIP its
# BICUBIC and center crop, byte for byte). Refusals: --image beside --image-latents, a file that is
# not a PNG, a text-to-video bundle.
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"
fail() { echo "FAIL: $*"; exit 1; }

meta() { python3 -c "import json, sys; m=json.load(open(sys.argv[1])); print(*[m[k] for k in sys.argv[2:]])" "$@"; }

# check NAME DIR EXTRA_COMPILE_FLAGS...: compiles DIR, generates from its i2v_image.png, compares.
check() {
  local name=$1 d=$2
  shift 2
  local g=$d/i2v_golden.safetensors
  read -r F H W L STEPS G S < <(meta "$d/i2v_meta.json" frames height width text_len steps guidance shift)
  local prompt neg
  prompt=$(meta "$d/i2v_meta.json" prompt)
  neg=$(meta "$d/i2v_meta.json" negative_prompt)
  local line
  line=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$W" --text-len "$L" "$@" -o "$T/$name" 2>"$T/$name.err" | tail -n1) ||
    { cat "$T/$name.err"; fail "$name: compile"; }
  B=${line##* }
  "$BIN/ditrun" info "$B" >"$T/$name.info"
  gen=(--prompt "$prompt" --negative-prompt "$neg" --init-latents "$g" --steps "$STEPS" --guidance "$G" --shift "$S" --sampler unipc)
  "$BIN/ditrun" generate "$B" "${gen[@]}" --image "$d/i2v_image.png" --out "$T/$name.f.safetensors" --out-latents "$T/$name.l.safetensors" \
    2>"$T/$name.gen" >/dev/null || { cat "$T/$name.gen"; fail "$name: generate --image"; }
  grep -q "^ditrun: image encode [0-9.]* s" "$T/$name.gen" || { cat "$T/$name.gen"; fail "$name: no image encode line"; }
  "$BIN/st_compare" "$T/$name.l.safetensors" "$g" latents 1e-4
  python3 tests/tools/psnr.py "$T/$name.f.safetensors" "$g" frames 45
}

check ti2v tests/data/wan22_pipeline_tiny
grep -q "^stage      vae_encoder " "$T/ti2v.info" || { cat "$T/ti2v.info"; fail "ti2v: no vae_encoder stage"; }
! grep -q "^stage      vae_encoder_first \|^stage      image_encoder " "$T/ti2v.info" || fail "ti2v: encodes one frame, no chunks, no CLIP"
enc=$(awk '$1 == "stage" && $2 == "vae_encoder" {print $3}' "$T/ti2v.info")
"$BIN/ditrun" info "$T/ti2v/$enc" | grep -q "^input      video  *f32\[1,3,1,64,64\]$" || fail "ti2v: the encoder takes one 64 x 64 frame"
ti2v=$B

check wan21 tests/data/wan21_i2v_pipeline_tiny --image-len "$(meta tests/data/wan21_i2v_pipeline_tiny/i2v_meta.json image_len)"
for r in vae_encoder vae_encoder_first image_encoder; do
  grep -q "^stage      $r " "$T/wan21.info" || { cat "$T/wan21.info"; fail "wan21: no $r stage"; }
done
ie=$(awk '$1 == "stage" && $2 == "image_encoder" {print $3}' "$T/wan21.info")
"$BIN/ditrun" verify "$T/wan21/$ie" >/dev/null || fail "the image encoder's bundle does not verify"
"$BIN/ditrun" info "$T/wan21/$ie" >"$T/ie.info"
grep -q "image_processor" "$T/ie.info" || { cat "$T/ie.info"; fail "the image encoder's bundle does not list its preprocessor configuration"; }

# Refusals, each naming what is wrong, with nothing written.
g=tests/data/wan22_pipeline_tiny/i2v_golden.safetensors
if "$BIN/ditrun" generate "$ti2v" --prompt x --image tests/data/wan22_pipeline_tiny/i2v_image.png --image-latents "$g" --steps 1 --seed 1 \
  --out "$T/r1.safetensors" 2>"$T/r1.err"; then fail "--image with --image-latents accepted"; fi
grep -q "give the image, or what its stages make of it, not both" "$T/r1.err" || { cat "$T/r1.err"; fail "r1 message"; }
if "$BIN/ditrun" generate "$ti2v" --prompt x --image "$g" --steps 1 --seed 1 --out "$T/r2.safetensors" 2>"$T/r2.err"; then
  fail "a safetensors file read as a PNG"
fi
grep -q -- "--image: $g: not a PNG" "$T/r2.err" || { cat "$T/r2.err"; fail "r2 message does not name the file"; }
line=$("$BIN/ditc" compile tests/data/wan_pipeline_tiny --frames 5 --height 32 --width 32 --text-len 16 --stages transformer -o "$T/t2v" 2>/dev/null | tail -n1)
if "$BIN/ditrun" generate "${line##* }" --prompt-embeds tests/data/wan_pipeline_tiny/golden.safetensors --image tests/data/wan22_pipeline_tiny/i2v_image.png \
  --steps 1 --seed 1 --out "$T/r3.safetensors" 2>"$T/r3.err"; then fail "--image on a text-to-video bundle accepted"; fi
grep -q -- "--image: bundle [0-9a-f]* is text-to-video: its transformer (WanTransformer3DModel) takes no image condition" "$T/r3.err" ||
  { cat "$T/r3.err"; fail "r3 message"; }
[ ! -e "$T/r1.safetensors" ] && [ ! -e "$T/r2.safetensors" ] && [ ! -e "$T/r3.safetensors" ] || fail "a refused generate wrote its output"
echo "pipeline_image: ok"
