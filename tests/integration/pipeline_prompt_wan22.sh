#!/usr/bin/env bash
# A whole tiny Wan2.2 TI2V-5B-layout pipeline (tests/data/wan22_pipeline_tiny,
# make_goldens_wan_pipeline.py wan22: 48 latent channels, the Wan2.2 VAE with its 16x spatial
# factor, per-token timesteps) from a prompt to frames: `ditc compile PIPELINE_DIR` makes the
# transformer and its UMT5 and Wan2.2 VAE decoder stages (and the VAE encoder of image-to-video,
# pipeline_image.sh's), and `ditrun generate --prompt` gives the
# final latents within 1e-4 and the frames within PSNR 45 dB of diffusers' WanPipeline on the same
# initial latents; the decoder split for windows (--vae-tiles 1) decodes the same frames, byte
# for byte; an MP4 of them is written; --preview's map, fitted on the VAE stage, follows the decode.
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"
fail() { echo "FAIL: $*"; exit 1; }

d=tests/data/wan22_pipeline_tiny
g=$d/golden.safetensors
read -r F H W L STEPS G S < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['text_len'], m['steps'], m['guidance'], m['shift'])")
PROMPT=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['prompt'])")
NEG=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['negative_prompt'])")
shape=(--frames "$F" --height "$H" --width "$W" --text-len "$L")
gen=(--prompt "$PROMPT" --negative-prompt "$NEG" --init-latents "$g" --steps "$STEPS" --guidance "$G" --shift "$S" --sampler unipc)

line=$("$BIN/ditc" compile "$d" "${shape[@]}" -o "$T/b" 2>/dev/null | tail -n1)
b=${line##* }
[ "$(ls "$T/b" | wc -l)" = 5 ] || { ls -la "$T/b"; fail "expected five bundles (transformer, text encoder, VAE decoder's two, VAE encoder)"; }
"$BIN/ditrun" info "$b" >"$T/info"
vae=$(awk '$1 == "stage" && $2 == "vae_decoder" {print $3}' "$T/info")
[ -n "$vae" ] || { cat "$T/info"; fail "no VAE stage"; }
"$BIN/ditrun" info "$T/b/$vae" >"$T/vinfo"
grep -q "^model      AutoencoderKLWan (wan2.2-vae, family wan_vae)$" "$T/vinfo" || { cat "$T/vinfo"; fail "not the Wan2.2 VAE"; }
grep -q "^input      latents  *f32\[1,48,1,$((H / 16)),$((W / 16))\]$" "$T/vinfo" || { cat "$T/vinfo"; fail "the VAE stage's latents"; }
"$BIN/ditrun" generate "$b" "${gen[@]}" --out "$T/f.safetensors" --out-latents "$T/l.safetensors" 2>"$T/gen.err" >/dev/null ||
  { cat "$T/gen.err"; fail "generate --prompt"; }
"$BIN/st_compare" "$T/l.safetensors" "$g" latents 1e-4
"$BIN/st_compare" "$T/f.safetensors" "$g" frames 1e-3
python3 tests/tools/psnr.py "$T/f.safetensors" "$g" frames 45
# Split for windows: the same frames.
line=$("$BIN/ditc" compile "$d" "${shape[@]}" --vae-tiles 1 -o "$T/s" 2>/dev/null | tail -n1)
"$BIN/ditrun" generate "${line##* }" "${gen[@]}" --out "$T/fs.safetensors" 2>"$T/gen.err" >/dev/null || { cat "$T/gen.err"; fail "split"; }
cmp -s "$T/fs.safetensors" "$T/f.safetensors" || fail "the split decoder's frames differ"
# --preview: a latent-to-RGB map fitted on the VAE decoder stage; the last preview follows the
# decoded frame (48 channels to RGB, 4 x 4 latents of 16 x 16 pixels).
"$BIN/ditrun" generate "$b" "${gen[@]}" --out "$T/fp.safetensors" --preview "$T/p" 2>"$T/gen.err" >/dev/null || { cat "$T/gen.err"; fail "--preview"; }
grep -q "^ditrun: preview map fitted on the VAE decoder stage in [0-9.]* s (48 channels to RGB)$" "$T/gen.err" || { cat "$T/gen.err"; fail "no fitted map"; }
[ "$(ls "$T/p")" = "$(printf 'step_001.png\nstep_002.png\nstep_003.png')" ] || { ls "$T/p"; fail "previews"; }
python3 tests/tools/preview_corr.py "$T/p/step_003.png" "$T/fp.safetensors" 16 0.3
# An MP4 where FFmpeg's libraries are (CI installs them).
"$BIN/ditrun" generate "$b" "${gen[@]}" --out "$T/v.mp4" 2>"$T/gen.err" >/dev/null || { cat "$T/gen.err"; fail "generate --out MP4"; }
head -c 8 "$T/v.mp4" | tail -c 4 | grep -q ftyp || fail "no MP4 written"
echo "pipeline_prompt_wan22: ok"
