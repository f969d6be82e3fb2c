#!/usr/bin/env bash
# FLUX.1's VAE decoder stage (family kl_vae) from a tiny AutoencoderKL's vae/ folder against the
# pinned diffusers' fp32 CPU decode (tests/data/make_goldens_flux_vae.py: FluxPipeline's unpacking
# and de-normalization of the transformer's packed latents, then vae.decode): two 64x64 images
# (batch 2) and one 128x96, each at max relative error <= 1e-4 and PSNR >= 45 dB (the sample lies in
# about [-1, 1]); the bundle's input (packed latents) and output; a checkpoint with the encoder's and
# quant_conv's tensors (a whole vae/ folder) decodes alike; bf16 on the CPU near the golden; refusals
# by name (config fields the decoder does not build, an unknown field, a checkpoint that lacks a
# tensor, sizes that do not pack, frames, the video decoder's chunk and split flags); the bf16
# sm_90 compile (no GPU needed).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

d=tests/data/flux_vae_tiny
compile() { "$BIN/ditc" compile "$@" -o "$T/b" -q | tail -n1 | cut -d' ' -f3; }

image_vae_cases "$d" "AutoencoderKL (kl_vae, family kl_vae)"
cp "$T/f.safetensors" "$T/last.safetensors" # the 128x96 case's sample

# A whole vae/ folder: the encoder's and quant_conv's tensors besides the decoder's are not read.
full=$T/full
rm -rf "$full" && mkdir "$full"
python3 -c "import json; c=json.load(open('$d/vae/config.json')); c['use_quant_conv']=True; json.dump(c, open('$full/config.json','w'))"
python3 - "$d/vae/diffusion_pytorch_model.safetensors" "$full/diffusion_pytorch_model.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
hdr, data = {}, b""
extra = {"encoder.conv_in.weight": [8, 3, 3, 3], "quant_conv.weight": [32, 32, 1, 1], "quant_conv.bias": [32]}
items = [(k, v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items() if k != "__metadata__"]
for k, shape in extra.items():
    count = 1
    for s in shape: count *= s
    items.append((k, "F32", shape, struct.pack("<%df" % count, *[0.5] * count)))
for k, dt, shape, raw in items:
    hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}; data += raw
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
b=$(compile "$full" --height 128 --width 96)
"$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs_128x96.safetensors" --out "$T/w.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/w.safetensors" "$T/last.safetensors" sample 0
# Latents without an item are refused by name (a division by the batch before), nothing written.
python3 -c "import json, struct; h = json.dumps({'latents': {'dtype': 'F32', 'shape': [0, 16, 192], 'data_offsets': [0, 0]}}).encode()
h += b' ' * (-len(h) % 8); open('$T/z.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h)"
expect_fail "--latents $T/z.safetensors: latents of rank 3 with 0 in dim 0: nothing to decode" "$BIN/ditrun" decode "$b" --latents "$T/z.safetensors" \
  --out "$T/z_out.safetensors"
[ ! -e "$T/z_out.safetensors" ] || { echo "FAIL: a refused decode wrote $T/z_out.safetensors"; exit 1; }

# bf16 on the CPU: every activation rounded to bf16, near the fp32 golden.
b=$(compile "$d/vae" --height 64 --width 64 --batch 2 --dtype bf16)
"$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$T/h.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/h.safetensors" "$d/forward_output.safetensors" sample 5e-2 0.999

# Refusals by name.
c=(compile "$T/bad" --height 64 --width 64 -o "$T/b")
edit_config "$d/vae" "$T/bad" use_post_quant_conv=true
expect_fail "field 'use_post_quant_conv' = true: a convolution before the decoder is not supported yet" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" mid_block_add_attention=false
expect_fail "field 'mid_block_add_attention' = false" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" 'act_fn="gelu"'
expect_fail "field 'act_fn' = \"gelu\": only \"silu\" is supported" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" 'up_block_types=["UpDecoderBlock2D","UpDecoderBlock2D","UpDecoderBlock2D","AttnUpDecoderBlock2D"]'
expect_fail "field 'up_block_types': expected 4 \"UpDecoderBlock2D\"" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" norm_num_groups=3
expect_fail "field 'norm_num_groups' = 3 does not divide block_out_channels[0] = 8" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" 'latents_mean=[0.1,0.2]'
expect_fail "field 'latents_mean' is set" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" 'block_out_channels=[8,16,16]'
expect_fail "block_out_channels" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" spatial_tiles=2
expect_fail "spatial_tiles': not a AutoencoderKL option this build knows" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad"
restage "$d/vae/diffusion_pytorch_model.safetensors" "$T/bad/diffusion_pytorch_model.safetensors" -decoder.up_blocks.2.resnets.0.conv_shortcut.bias
expect_fail "decoder.up_blocks.2.resnets.0.conv_shortcut.bias" "$BIN/ditc" "${c[@]}"
v=(compile "$d/vae" --width 64 -o "$T/b")
expect_fail "--height 72: must be a positive multiple of 16 (VAE 8 x 2x2 packing)" "$BIN/ditc" "${v[@]}" --height 72
expect_fail "--frames 5: AutoencoderKL makes images" "$BIN/ditc" "${v[@]}" --height 64 --frames 5
expect_fail "--vae-chunk 1: AutoencoderKL decodes an image, it has no frames to decode in chunks" "$BIN/ditc" "${v[@]}" --height 64 --vae-chunk 1
expect_fail "--vae-part: AutoencoderKL decodes the whole image in one graph" "$BIN/ditc" "${v[@]}" --height 64 --vae-part head
expect_fail "--vae-tiles: AutoencoderKL decodes the whole image in one graph" "$BIN/ditc" "${v[@]}" --height 64 --vae-tiles 2

# The GPU bundle: every kernel (groupnorm's among them) compiles under NVRTC for sm_90.
g90=$("$BIN/ditc" compile "$d/vae" --height 128 --width 96 --batch 2 --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$g90" >/dev/null
echo "goldens_flux_vae: ok"
