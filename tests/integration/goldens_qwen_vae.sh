#!/usr/bin/env bash
# Qwen-Image's VAE decoder stage (AutoencoderKLQwenImage, family wan_vae, variant qwen-image-vae) from
# a tiny vae/ folder against the pinned diffusers' fp32 CPU decode (tests/data/make_goldens_qwen_vae.py:
# QwenImagePipeline's unpacking and de-normalization of the transformer's packed latents, then
# vae.decode's frame 0): two 32x48 images (batch 2) and one 64x32, each at max relative error <= 1e-4
# and PSNR >= 45 dB; the bundle's input (packed latents) and output (the image); ditrun decode over a
# batch; a QwenImagePipeline folder's vae_decoder stage (one graph); bf16 on the CPU near the golden; refusals by name (AutoencoderKLWan's fields, which this class lacks, and the other way
# round, the statistics' length, a checkpoint that lacks a tensor, sizes that do not pack, frames, the
# video decoder's chunk, split and encoder flags, another variant); the bf16 sm_90 compile (no GPU
# needed).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

d=tests/data/qwen_vae_tiny
compile() { "$BIN/ditc" compile "$@" -o "$T/b" -q | tail -n1 | cut -d' ' -f3; }

image_vae_cases "$d" "AutoencoderKLQwenImage (qwen-image-vae, family wan_vae)"

# Qwen-Image's published vae/config.json has no input_channels (the class default, 3): the same decode.
edit_config "$d/vae" "$T/plain" -input_channels
b=$(compile "$T/plain" --height 32 --width 48 --batch 2)
"$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$T/p.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/p.safetensors" "$d/forward_output.safetensors" sample 1e-4

# ditrun decode (generate's decoder): the batch-1 stage over each item of the batch-2 latents.
b=$(compile "$d/vae" --height 32 --width 48)
"$BIN/ditrun" decode "$b" --latents "$d/forward_inputs.safetensors" --out "$T/d.safetensors" 2>/dev/null >/dev/null
python3 - "$T/d.safetensors" "$T/dd.safetensors" <<'PY'
import sys
raw = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(raw.replace(b'"frames"', b'"sample"', 1))
PY
"$BIN/st_compare" "$T/dd.safetensors" "$d/forward_output.safetensors" sample 1e-4

# In a QwenImagePipeline folder the VAE is the pipeline's image decoder: one vae_decoder graph over
# the whole image, no first chunk's.
p=$T/pipe
cp -r tests/data/qwen_tiny "$p" && cp -r "$d/vae" "$p/vae"
python3 -c "
import json; f='$p/model_index.json'; c=json.load(open(f)); c['vae']=['diffusers','AutoencoderKLQwenImage']; json.dump(c, open(f,'w'))"
b=$(compile "$p" --height 32 --width 48 --text-len 8 --stages transformer,vae)
"$BIN/ditrun" info "$b" >"$T/info"
grep -q "^stage      vae_decoder  [0-9a-f]* (wan_vae, AutoencoderKLQwenImage)$" "$T/info" || { cat "$T/info"; exit 1; }
if grep -q "vae_decoder_first" "$T/info"; then cat "$T/info"; echo "FAIL: an image decoder has no first chunk"; exit 1; fi
expect_fail "--vae-tiles 2: QwenImageTransformer2DModel's pipeline decodes whole images in one graph" "$BIN/ditc" compile "$p" \
  --height 32 --width 48 --text-len 8 --vae-tiles 2 -o "$T/b"

# bf16 on the CPU: every activation rounded to bf16 through some forty layers, near the fp32 golden
# (about 2% relative L2).
b=$(compile "$d/vae" --height 32 --width 48 --batch 2 --dtype bf16)
"$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$T/h.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/h.safetensors" "$d/forward_output.safetensors" sample 0.2 0.999

# Refusals by name.
c=(compile "$T/bad" --height 32 --width 48 -o "$T/b")
edit_config "$d/vae" "$T/bad" is_residual=true
expect_fail "is_residual': not a AutoencoderKLQwenImage option this build knows" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" out_channels=3
expect_fail "out_channels': not a AutoencoderKLQwenImage option this build knows" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" '_class_name="AutoencoderKLWan"'
expect_fail "input_channels': not a AutoencoderKLWan option this build knows" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" 'latents_std=[1,1,1]'
expect_fail "field 'latents_std' has 3 entries, expected z_dim = 16" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" input_channels=4
expect_fail "decoder.conv_out.bias': shape [3], expected [4]" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad"
restage "$d/vae/diffusion_pytorch_model.safetensors" "$T/bad/diffusion_pytorch_model.safetensors" -post_quant_conv.bias
expect_fail "post_quant_conv.bias" "$BIN/ditc" "${c[@]}"
v=(compile "$d/vae" --width 48 -o "$T/b")
expect_fail "--height 40: must be a positive multiple of 16 (VAE 8 x 2x2 packing)" "$BIN/ditc" "${v[@]}" --height 40
expect_fail "--frames 5: AutoencoderKLQwenImage makes images" "$BIN/ditc" "${v[@]}" --height 32 --frames 5
expect_fail "--vae-chunk 1: AutoencoderKLQwenImage decodes an image, it has no frames to decode in chunks" "$BIN/ditc" "${v[@]}" \
  --height 32 --vae-chunk 1
expect_fail "--vae-part: AutoencoderKLQwenImage decodes the whole image in one graph" "$BIN/ditc" "${v[@]}" --height 32 --vae-part head
expect_fail "--vae-part: AutoencoderKLQwenImage decodes the whole image in one graph" "$BIN/ditc" "${v[@]}" --height 32 --vae-part encoder
expect_fail "--vae-tiles: AutoencoderKLQwenImage decodes the whole image in one graph" "$BIN/ditc" "${v[@]}" --height 32 --vae-tiles 2
expect_fail "--variant wan2.1-vae: AutoencoderKLQwenImage compiles as qwen-image-vae" "$BIN/ditc" "${v[@]}" --height 32 \
  --variant wan2.1-vae

# The GPU bundle: every kernel compiles under NVRTC for sm_90.
g90=$("$BIN/ditc" compile "$d/vae" --height 64 --width 32 --batch 2 --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$g90" >/dev/null
echo "goldens_qwen_vae: ok"
