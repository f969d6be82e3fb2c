#!/usr/bin/env bash
# The CLIP text encoder of FLUX.1 (transformers' CLIPTextModel, a pipeline's text_encoder/ folder)
# against transformers' fp32 CPU outputs (tests/data/make_goldens_clip.py), max relative error
# <= 1e-4: two prompts tokenized and padded to 77 as FluxPipeline does; last_hidden_state and
# pooler_output (the end-of-text row, the pipeline's CLIP embedding). Then: the pipelines'
# checkpoint names (text_model.*, with the position_ids buffer older checkpoints hold) give the
# same outputs; an eos_token_id other than 2 pools the first position of that id (0 when absent);
# config fields the model does not run, a text length past the position table, pixel flags and a
# checkpoint that lacks a tensor are refused by name; bf16 runs near fp32; the sm_90 compile (no
# GPU needed).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

d=tests/data/clip_tiny
te=$d/text_encoder
read -r L B < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['text_len'], m['batch'])")
one=$("$BIN/ditc" compile "$te" --text-len "$L" --batch "$B" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$one" >/dev/null
"$BIN/ditrun" info "$one" >"$T/info"
grep -q "^model      CLIPTextModel (clip_text, family clip_text)$" "$T/info" || { cat "$T/info"; echo "not the clip_text family"; exit 1; }
grep -q "^input      input_ids  *i32\[$B,$L\]$" "$T/info" || { cat "$T/info"; echo "input_ids is not i32 [$B,$L]"; exit 1; }
grep -q "^output     pooler_output  *f32\[$B,32\]$" "$T/info" || { cat "$T/info"; echo "pooler_output is not f32 [$B,32]"; exit 1; }
"$BIN/ditrun" forward "$one" --inputs "$d/forward_inputs.safetensors" --out "$T/f.safetensors" 2>/dev/null >/dev/null
for o in last_hidden_state pooler_output; do "$BIN/st_compare" "$T/f.safetensors" "$d/forward_output.safetensors" $o 1e-4; done

bad=$T/bad
# The pipelines' names: every tensor under text_model., plus the position_ids buffer.
rm -rf "$bad" && mkdir "$bad" && cp "$te/config.json" "$bad/"
python3 - "$te/model.safetensors" "$bad/model.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
hdr, data = {}, b""
items = [(k, v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items() if k != "__metadata__"]
items.append(("embeddings.position_ids", "I64", [1, 77], struct.pack("<77q", *range(77))))
for k, dt, shape, raw in items:
    hdr["text_model." + k] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}; data += raw
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
pre=$("$BIN/ditc" compile "$bad" --text-len "$L" --batch "$B" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$pre" --inputs "$d/forward_inputs.safetensors" --out "$T/p.safetensors" 2>/dev/null >/dev/null
for o in last_hidden_state pooler_output; do "$BIN/st_compare" "$T/p.safetensors" "$d/forward_output.safetensors" $o 1e-4; done


# eos_token_id other than 2: the first position of that id. The id at item 0's position 3 is
# absent from item 1 (checked), which pools its position 0; the expected rows are transformers'
# last_hidden_state at those positions.
read -r eos < <(python3 - "$d/forward_inputs.safetensors" "$d/forward_output.safetensors" "$T/eos.safetensors" <<'PY'
import json, struct, sys
def load(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; return json.loads(f.read(n)), f.read()
h, body = load(sys.argv[1])
a, b = h["input_ids"]["data_offsets"]; B, L = h["input_ids"]["shape"]
ids = struct.unpack("<%dq" % (B * L), body[a:b])
eos = ids[3]
first = [next((t for t in range(L) if ids[i * L + t] == eos), 0) for i in range(B)]
assert first[0] == 3 and first[1] == 0 and ids[L] != eos, (eos, first)
o, ob = load(sys.argv[2])
a, b = o["last_hidden_state"]["data_offsets"]; _, _, D = o["last_hidden_state"]["shape"]
x = ob[a:b]
raw = b"".join(x[(i * L + first[i]) * D * 4:(i * L + first[i] + 1) * D * 4] for i in range(B))
j = json.dumps({"pooler_output": {"dtype": "F32", "shape": [B, D], "data_offsets": [0, len(raw)]}}).encode()
j += b" " * (-len(j) % 8)
open(sys.argv[3], "wb").write(struct.pack("<Q", len(j)) + j + raw)
print(eos)
PY
)
edit_config "$te" "$bad" "eos_token_id=$eos"
e=$("$BIN/ditc" compile "$bad" --text-len "$L" --batch "$B" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$e" --inputs "$d/forward_inputs.safetensors" --out "$T/e.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/e.safetensors" "$T/eos.safetensors" pooler_output 1e-4

# Refusals by name: config fields the model does not run, shapes it has no positions or pixels
# for, a missing tensor.
edit_config "$te" "$bad" 'hidden_act="relu"'
expect_fail "field 'hidden_act' = \"relu\": only \"quick_gelu\" and \"gelu\" are supported" "$BIN/ditc" compile "$bad" --text-len 77 -o "$T/b"
edit_config "$te" "$bad" 'model_type="clip_vision_model"'
expect_fail "field 'model_type' = \"clip_vision_model\": only \"clip_text_model\" is supported" "$BIN/ditc" compile "$bad" --text-len 77 -o "$T/b"
edit_config "$te" "$bad" 'num_attention_heads=5'
expect_fail "field 'hidden_size' = 32 is not a multiple of num_attention_heads = 5" "$BIN/ditc" compile "$bad" --text-len 77 -o "$T/b"
expect_fail "--text-len 78: CLIPTextModel has 77 position embeddings (max_position_embeddings)" "$BIN/ditc" compile "$te" --text-len 78 -o "$T/b"
expect_fail "--height 64: CLIPTextModel is a text encoder: its shape is --batch and --text-len alone" "$BIN/ditc" compile "$te" \
  --text-len 77 --height 64 -o "$T/b"
rm -rf "$bad" && mkdir "$bad" && cp "$te/config.json" "$bad/"
restage "$te/model.safetensors" "$bad/model.safetensors" -final_layer_norm.bias
expect_fail "checkpoint has no tensor 'final_layer_norm.bias'" "$BIN/ditc" compile "$bad" --text-len 77 -o "$T/b"

# bf16 stays near fp32; the same folder compiles for sm_90.
b16=$("$BIN/ditc" compile "$te" --text-len "$L" --batch "$B" --dtype bf16 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$b16" --inputs "$d/forward_inputs.safetensors" --out "$T/h.safetensors" 2>/dev/null >/dev/null
for o in last_hidden_state pooler_output; do "$BIN/st_compare" "$T/h.safetensors" "$d/forward_output.safetensors" $o 6e-2; done
g90=$("$BIN/ditc" compile "$te" --text-len "$L" --batch "$B" --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$g90" >/dev/null
"$BIN/ditrun" info "$g90" | grep -q "^target     sm_90" || { "$BIN/ditrun" info "$g90"; echo "not an sm_90 bundle"; exit 1; }
echo "goldens_clip: ok"
