#!/usr/bin/env bash
# HunyuanVideo's VAE decoder stage (family hunyuan_vae) from a tiny AutoencoderKLHunyuanVideo's vae/
# folder against the pinned diffusers' fp32 CPU decode (tests/data/make_goldens_hunyuan_vae.py:
# HunyuanVideoPipeline's latents / scaling_factor, then vae.decode without tiling or framewise
# decoding): a 9-frame 32x48 video (three latent frames: the causal convolutions' replicated first
# frames, the frame-causal mid-block attention, upsamplers in space alone and in time and space) and
# one latent frame, each at max relative error <= 1e-4 and PSNR >= 45 dB; the bundle's input (the
# transformer's latents) and output; the attention's causal block of one frame's pixels; a
# checkpoint with the encoder's tensors decodes alike; refusals by name (config fields the decoder
# does not build, an unknown field, a missing tensor, frame counts and sizes, chunk and split
# flags); the pipeline's default framewise decode of a 25-frame video (seven latent frames: windows
# of five every three, blended) by ditrun decode against diffusers' at the same bounds, its
# predicted peak a window's, below the whole video's; the bf16 sm_90 compile (no GPU needed).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

d=tests/data/hunyuan_vae_tiny
compile() { "$BIN/ditc" compile "$@" -o "$T/b" -q | tail -n1 | cut -d' ' -f3; }

for c in "none 9 3" "_f1 1 1"; do
  read -r sfx F f <<<"$c"
  [ "$sfx" = none ] && sfx=
  b=$(compile "$d/vae" --frames "$F" --height 32 --width 48)
  "$BIN/ditrun" verify "$b" >/dev/null
  "$BIN/ditrun" info "$b" >"$T/info"
  grep -q "^model      AutoencoderKLHunyuanVideo (hunyuan_vae, family hunyuan_vae)$" "$T/info" || { cat "$T/info"; exit 1; }
  grep -q "^input      latents  *f32\[1,4,$f,4,6\]$" "$T/info" || { cat "$T/info"; exit 1; }
  grep -q "^output     sample  *f32\[1,3,$F,32,48\]$" "$T/info" || { cat "$T/info"; exit 1; }
  "$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs$sfx.safetensors" --out "$T/f.safetensors" 2>/dev/null >/dev/null
  "$BIN/st_compare" "$T/f.safetensors" "$d/forward_output$sfx.safetensors" sample 1e-4
  python3 tests/tools/psnr.py "$T/f.safetensors" "$d/forward_output$sfx.safetensors" sample 45
done

# The pipeline's default decode of more than four latent frames, framewise: a 25-frame video's
# seven latent frames in windows of five at 0 and 3 (the one frame at 6 gives nothing), each through
# its own graph (the window's 17 frames, the last window's 4 latent frames' 13), blended over four
# frames by ditrun decode as generate decodes, against diffusers' framewise decode.
d25=(--height 16 --width 16)
win=$(compile "$d/vae" --frames 17 "${d25[@]}")
last=$(compile "$d/vae" --frames 13 "${d25[@]}")
whole=$(compile "$d/vae" --frames 25 "${d25[@]}")
as_sample() { # decode's tensor 'frames' renamed 'sample' (same length: the header keeps its size)
  python3 - "$1" "$2" <<'PY'
import struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
open(sys.argv[2], "wb").write(raw[:8] + raw[8:8 + n].replace(b'"frames"', b'"sample"') + raw[8 + n:])
PY
}
"$BIN/ditrun" decode "$win" --last "$last" --window-stride 3 --latents "$d/forward_inputs_f25.safetensors" --out "$T/w25.safetensors" \
  2>"$T/decode.err" >/dev/null || { cat "$T/decode.err"; exit 1; }
as_sample "$T/w25.safetensors" "$T/s25.safetensors"
"$BIN/st_compare" "$T/s25.safetensors" "$d/forward_output_f25.safetensors" sample 1e-4
python3 tests/tools/psnr.py "$T/s25.safetensors" "$d/forward_output_f25.safetensors" sample 45
# The whole-video graph of the same latents is not the pipeline's decode (GroupNorm spans the frames it sees).
"$BIN/ditrun" forward "$whole" --inputs "$d/forward_inputs_f25.safetensors" --out "$T/o25.safetensors" 2>/dev/null >/dev/null
if "$BIN/st_compare" "$T/o25.safetensors" "$d/forward_output_f25.safetensors" sample 1e-2 >/dev/null 2>&1; then
  echo "FAIL: the whole-video decode matches the framewise golden: the golden does not test the windows"; exit 1
fi
# The decode's predicted peak is a window's (the last window runs in its arena), not the whole
# video's: at 25 frames and at the published 129 (33 latent frames; the same window graph).
peak() { "$BIN/ditrun" info "$1" | sed -n 's/^memory .*predicted peak \([0-9.]*\) MiB$/\1/p'; }
pw=$(peak "$win") pl=$(peak "$last") po=$(peak "$whole") p129=$(peak "$(compile "$d/vae" --frames 129 "${d25[@]}")")
python3 -c "import sys; w, l, o, o129 = map(float, sys.argv[1:]); assert l <= w < o * 0.85 and w < o129 / 4, (w, l, o, o129)
print('predicted peak: window %.2f MiB, last %.2f; whole video %.2f (25 frames), %.2f (129)' % (w, l, o, o129))" "$pw" "$pl" "$po" "$p129"
# Refusals by name: a video ending in a shorter window without its graph, a last window's graph of
# another length, windows with a first chunk's graph, too few latent frames for a window.
expect_fail "latents of 7 frames end in a window of 4 latent frames, and no last window's decoder (vae_decoder_last) was given" \
  "$BIN/ditrun" decode "$win" --window-stride 3 --latents "$d/forward_inputs_f25.safetensors" --out "$T/x.safetensors"
expect_fail "the last window's decoder takes 5 latent frames to 17, the latents' last window has 4" \
  "$BIN/ditrun" decode "$win" --last "$win" --window-stride 3 --latents "$d/forward_inputs_f25.safetensors" --out "$T/x.safetensors"
expect_fail "a framewise decode (windows every 3 latent frames) takes video latents [B, C, f, h, w] and no first chunk's or head's decoder" \
  "$BIN/ditrun" decode "$win" --first "$last" --window-stride 3 --latents "$d/forward_inputs_f25.safetensors" --out "$T/x.safetensors"
expect_fail "a last window's decoder without a window stride" \
  "$BIN/ditrun" decode "$win" --last "$last" --latents "$d/forward_inputs_f25.safetensors" --out "$T/x.safetensors"
expect_fail "--window-stride 0: expected a count of latent frames >= 1" \
  "$BIN/ditrun" decode "$win" --window-stride 0 --latents "$d/forward_inputs_f25.safetensors" --out "$T/x.safetensors"
b3=$(compile "$d/vae" --frames 13 --height 32 --width 48)
expect_fail "latents of 3 frames: the framewise decoder's windows take 4" \
  "$BIN/ditrun" decode "$b3" --window-stride 2 --latents "$d/forward_inputs.safetensors" --out "$T/x.safetensors"

# The mid block's attention over the three latent frames is frame-causal: one frame's 24 pixels a block.
"$BIN/ditc" compile "$d/vae" --frames 9 --height 32 --width 48 -o "$T/ir" --dump-ir >"$T/graph" 2>&1
grep -q "= attention(.*causal_block=24} : f32\[1,72,12\]" "$T/graph" || { grep attention "$T/graph"; echo "no frame-causal attention"; exit 1; }

# A whole vae/ folder: the encoder's and quant_conv's tensors besides the decoder's are not read.
full=$T/full
rm -rf "$full" && mkdir "$full"
cp "$d/vae/config.json" "$full/"
restage "$d/vae/diffusion_pytorch_model.safetensors" "$full/diffusion_pytorch_model.safetensors"
python3 - "$full/diffusion_pytorch_model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
extra = {"encoder.conv_in.conv.weight": [8, 3, 3, 3, 3], "quant_conv.weight": [8, 8, 1, 1, 1], "quant_conv.bias": [8]}
for k, shape in extra.items():
    count = 1
    for s in shape: count *= s
    raw = struct.pack("<%df" % count, *[0.5] * count)
    h[k] = {"dtype": "F32", "shape": shape, "data_offsets": [len(body), len(body) + len(raw)]}; body += raw
j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
open(p, "wb").write(struct.pack("<Q", len(j)) + j + body)
PY
b=$(compile "$full" --frames 9 --height 32 --width 48)
"$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$T/w.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/w.safetensors" "$d/forward_output.safetensors" sample 1e-4

# bf16 on the CPU: every activation rounded to bf16, near the fp32 golden.
b=$(compile "$d/vae" --frames 9 --height 32 --width 48 --dtype bf16)
"$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$T/h.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/h.safetensors" "$d/forward_output.safetensors" sample 5e-2 0.999

# Refusals by name.
c=(compile "$T/bad" --frames 9 --height 32 --width 48 -o "$T/b")
edit_config "$d/vae" "$T/bad" temporal_compression_ratio=8
expect_fail "field 'temporal_compression_ratio' = 8: HunyuanVideoDecoder3D builds 4 alone" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" spatial_compression_ratio=6
expect_fail "field 'spatial_compression_ratio' = 6: expected a power of 2 up to 16" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" mid_block_add_attention=false
expect_fail "field 'mid_block_add_attention' = false" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" 'act_fn="gelu"'
expect_fail "field 'act_fn' = \"gelu\": only \"silu\" is supported (HunyuanVideo's VAE)" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" 'up_block_types=["HunyuanVideoUpBlock3D","HunyuanVideoUpBlock3D","HunyuanVideoUpBlock3D","UpDecoderBlock2D"]'
expect_fail "field 'up_block_types': expected 4 \"HunyuanVideoUpBlock3D\"" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" norm_num_groups=3
expect_fail "field 'norm_num_groups' = 3 does not divide block_out_channels[0] = 8" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" 'block_out_channels=[8,8,12]'
expect_fail "block_out_channels" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad" shift_factor=0.1
expect_fail "shift_factor': not a AutoencoderKLHunyuanVideo option this build knows" "$BIN/ditc" "${c[@]}"
edit_config "$d/vae" "$T/bad"
restage "$d/vae/diffusion_pytorch_model.safetensors" "$T/bad/diffusion_pytorch_model.safetensors" -post_quant_conv.bias
expect_fail "post_quant_conv.bias" "$BIN/ditc" "${c[@]}"
v=(compile "$d/vae" --height 32 --width 48 -o "$T/b")
expect_fail "--frames 8: AutoencoderKLHunyuanVideo decodes frames = 4*k + 1 (e.g. 5)" "$BIN/ditc" "${v[@]}" --frames 8
expect_fail "--height 36: must be a positive multiple of 8" "$BIN/ditc" compile "$d/vae" --frames 9 --height 36 --width 48 -o "$T/b"
expect_fail "--vae-chunk: AutoencoderKLHunyuanVideo decodes the whole video in one graph" "$BIN/ditc" "${v[@]}" --frames 9 --vae-chunk 1
expect_fail "--vae-tiles: AutoencoderKLHunyuanVideo decodes the whole video in one graph" "$BIN/ditc" "${v[@]}" --frames 9 --vae-tiles 2

# The GPU bundle: every kernel (the frame-causal attention's on the portable kernel) compiles under NVRTC for sm_90.
g90=$("$BIN/ditc" compile "$d/vae" --frames 9 --height 32 --width 48 --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$g90" >/dev/null
echo "goldens_hunyuan_vae: ok"
