#!/usr/bin/env bash
# The main job on the tiny model, given a build: make a random tiny Wan model, compile it into
# a bundle, verify the bundle, and run a 10-step generate with guidance from a seed.
# usage: examples/tiny_pipeline.sh BUILD_DIR OUT_DIR
set -euo pipefail
BIN=$1/bin
OUT=$2
mkdir -p "$OUT"
"$BIN/make_tiny_wan" --out "$OUT" --seed 7 --text-len 16
line=$("$BIN/ditc" compile "$OUT/model" --frames 9 --height 64 --width 64 --text-len 16 -o "$OUT/bundles" | tail -n 1)
bundle=${line##* }
"$BIN/ditc" inspect "$bundle"
"$BIN/ditrun" verify "$bundle"
"$BIN/ditrun" generate "$bundle" --prompt-embeds "$OUT/embeds.safetensors" --negative-embeds "$OUT/embeds.safetensors" \
  --seed 42 --steps 10 --guidance 5 --shift 3 --out "$OUT/latents.safetensors"
echo "tiny model: $OUT/model"
echo "bundle:     $bundle"
echo "latents:    $OUT/latents.safetensors (tensor 'latents', fp32 [1,4,3,8,8])"
