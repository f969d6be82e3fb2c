#!/usr/bin/env bash
# The main job on the tiny pipeline, given a build: compile the tiny Wan2.1 pipeline directory
# (tests/data/wan_pipeline_tiny: random weights, a UMT5 text encoder with a real SentencePiece
# tokenizer file, the Wan VAE) with its text encoder and VAE decoder stages, verify the bundles,
# and turn a prompt into an MP4 and a PNG (10 steps with guidance from a seed).
# usage: examples/tiny_pipeline.sh BUILD_DIR OUT_DIR
set -euo pipefail
BIN=$1/bin
OUT=$2
PIPE=$(dirname "$0")/../tests/data/wan_pipeline_tiny
PROMPT="a red fox running through fresh snow at dawn"
mkdir -p "$OUT"
line=$("$BIN/ditc" compile "$PIPE" --frames 9 --height 64 --width 64 --text-len 16 -o "$OUT/bundles" | tail -n 1)
bundle=${line##* }
"$BIN/ditc" inspect "$bundle"
for b in "$OUT"/bundles/*; do "$BIN/ditrun" verify "$b"; done
gen=(generate "$bundle" --prompt "$PROMPT" --seed 42 --steps 10 --guidance 5 --shift 3)
"$BIN/ditrun" "${gen[@]}" --out "$OUT/fox.mp4" --out-latents "$OUT/latents.safetensors"
"$BIN/ditrun" "${gen[@]}" --out "$OUT/fox.png"
echo "pipeline:   $PIPE"
echo "bundle:     $bundle (stages: text encoder, VAE decoder in chunks beside it in $OUT/bundles)"
echo "video:      $OUT/fox.mp4 (9 frames, 64x64, 16 fps)"
echo "image:      $OUT/fox.png (frame 0)"
echo "latents:    $OUT/latents.safetensors (tensor 'latents', fp32 [1,16,3,8,8])"
