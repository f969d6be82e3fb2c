#!/usr/bin/env bash
# The CLIP image encoder of Wan2.1's image-to-video pipelines (transformers' CLIPVisionModel, a
# pipeline's image_encoder/ folder) against transformers' fp32 CPU outputs
# (tests/data/make_goldens_clip_vision.py), max relative error <= 1e-4: hidden_states[-2] of two
# normalized images, what WanImageToVideoPipeline.encode_image returns; the same with quick_gelu.
# Then: the pipelines' checkpoint names (vision_model.*, with the position_ids buffer) and
# CLIPVisionModelWithProjection's checkpoint (its visual_projection unread) give the same output;
# --height/--width equal to image_size are accepted; config fields the model does not run, other
# image sizes, frames and a checkpoint that lacks a tensor are refused by name; bf16 runs near fp32;
# the sm_90 compile (no GPU needed).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

d=tests/data/clip_vision_tiny
ie=$d/image_encoder
read -r B S N D < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['batch'], m['image_size'], m['tokens'], m['hidden'])")
one=$("$BIN/ditc" compile "$ie" --batch "$B" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$one" >/dev/null
"$BIN/ditrun" info "$one" >"$T/info"
grep -q "^model      CLIPVisionModel (clip_vision, family clip_vision)$" "$T/info" || { cat "$T/info"; echo "not the clip_vision family"; exit 1; }
grep -q "^input      pixel_values  *f32\[$B,3,$S,$S\]$" "$T/info" || { cat "$T/info"; echo "pixel_values is not f32 [$B,3,$S,$S]"; exit 1; }
grep -q "^output     hidden_states_penultimate  *f32\[$B,$N,$D\]$" "$T/info" || { cat "$T/info"; echo "no output f32 [$B,$N,$D]"; exit 1; }
check() { # bundle golden-output
  rm -f "$T/f.safetensors"
  "$BIN/ditrun" forward "$1" --inputs "$d/forward_inputs.safetensors" --out "$T/f.safetensors" 2>/dev/null >/dev/null
  "$BIN/st_compare" "$T/f.safetensors" "$2" hidden_states_penultimate "${3:-1e-4}"
}
check "$one" "$d/forward_output.safetensors"
# The image size given explicitly is the same bundle.
same=$("$BIN/ditc" compile "$ie" --batch "$B" --height "$S" --width "$S" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
check "$same" "$d/forward_output.safetensors"

bad=$T/bad
# quick_gelu, CLIPVisionConfig's default activation (the golden's model has gelu, as Wan2.1's).
edit_config "$ie" "$bad" 'hidden_act="quick_gelu"'
q=$("$BIN/ditc" compile "$bad" --batch "$B" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
check "$q" "$d/forward_output_quick_gelu.safetensors"
if "$BIN/st_compare" "$T/f.safetensors" "$d/forward_output.safetensors" hidden_states_penultimate 1e-4 >/dev/null; then
  echo "quick_gelu gives gelu's output"; exit 1
fi

# The pipelines' names (every tensor under vision_model., plus the position_ids buffer), then
# CLIPVisionModelWithProjection's checkpoint (its config names that class).
prefixed() { # out extra-name extra-dtype extra-shape(comma-separated) extra-bytes-python-expression
  python3 - "$ie/model.safetensors" "$@" <<'PY'
import json, struct, sys
src, out, name, dt, shape, expr = sys.argv[1:7]
f = open(src, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
hdr, data = {}, b""
items = [("vision_model." + k, v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items() if k != "__metadata__"]
items.append((name, dt, [int(x) for x in shape.split(",")], eval(expr)))
for k, dt, shape, raw in items:
    hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}; data += raw
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(out, "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
}
rm -rf "$bad" && mkdir "$bad" && cp "$ie/config.json" "$bad/"
prefixed "$bad/model.safetensors" vision_model.embeddings.position_ids I64 "1,$N" "struct.pack('<${N}q', *range($N))"
pre=$("$BIN/ditc" compile "$bad" --batch "$B" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
check "$pre" "$d/forward_output.safetensors"
edit_config "$ie" "$bad" 'architectures=["CLIPVisionModelWithProjection"]'
prefixed "$bad/model.safetensors" visual_projection.weight F32 "16,$D" "struct.pack('<$((16 * D))f', *([0.5] * $((16 * D))))"
wp=$("$BIN/ditc" compile "$bad" --batch "$B" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" info "$wp" | grep -q "^model      CLIPVisionModelWithProjection (clip_vision, family clip_vision)$" || {
  "$BIN/ditrun" info "$wp"; echo "CLIPVisionModelWithProjection is not read as clip_vision"; exit 1; }
check "$wp" "$d/forward_output.safetensors"

# Refusals by name: config fields the model does not run, shapes it has no positions for, a missing
# tensor (the last layer's and post_layernorm's are unread but part of the checkpoint).
edit_config "$ie" "$bad" 'hidden_act="relu"'
expect_fail "field 'hidden_act' = \"relu\": only \"quick_gelu\" and \"gelu\" are supported" "$BIN/ditc" compile "$bad" -o "$T/b"
edit_config "$ie" "$bad" 'model_type="clip_text_model"'
expect_fail "field 'model_type' = \"clip_text_model\": only \"clip_vision_model\" is supported" "$BIN/ditc" compile "$bad" -o "$T/b"
edit_config "$ie" "$bad" 'image_size=30'
expect_fail "field 'image_size' = 30 is not a multiple of patch_size = 7" "$BIN/ditc" compile "$bad" -o "$T/b"
edit_config "$ie" "$bad" 'num_attention_heads=5'
expect_fail "field 'hidden_size' = 32 is not a multiple of num_attention_heads = 5" "$BIN/ditc" compile "$bad" -o "$T/b"
edit_config "$ie" "$bad" 'vision_feature_layer=-2'
expect_fail "vision_feature_layer" "$BIN/ditc" compile "$bad" -o "$T/b"
# A 56-pixel image needs 65 position embeddings (transformers interpolates the table only when
# asked; the pipeline never asks).
edit_config "$ie" "$bad" 'image_size=56'
expect_fail "tensor 'embeddings.position_embedding.weight': shape [$N,$D], expected [65,$D]" "$BIN/ditc" compile "$bad" -o "$T/b"
expect_fail "--height 56: CLIPVisionModel encodes $S x $S images (config image_size): leave --height out or give $S" "$BIN/ditc" compile \
  "$ie" --height 56 -o "$T/b"
expect_fail "--width 32: CLIPVisionModel encodes $S x $S images" "$BIN/ditc" compile "$ie" --height "$S" --width 32 -o "$T/b"
expect_fail "--frames 1: CLIPVisionModel encodes images: leave --frames out" "$BIN/ditc" compile "$ie" --frames 1 -o "$T/b"
rm -rf "$bad" && mkdir "$bad" && cp "$ie/config.json" "$bad/"
restage "$ie/model.safetensors" "$bad/model.safetensors" -post_layernorm.bias
expect_fail "checkpoint has no tensor 'post_layernorm.bias'" "$BIN/ditc" compile "$bad" -o "$T/b"

# bf16 stays near fp32; the same folder compiles for sm_90.
b16=$("$BIN/ditc" compile "$ie" --batch "$B" --dtype bf16 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
check "$b16" "$d/forward_output.safetensors" 6e-2
g90=$("$BIN/ditc" compile "$ie" --batch "$B" --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$g90" >/dev/null
"$BIN/ditrun" info "$g90" | grep -q "^target     sm_90" || { "$BIN/ditrun" info "$g90"; echo "not an sm_90 bundle"; exit 1; }
echo "goldens_clip_vision: ok"
