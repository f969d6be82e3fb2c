#!/usr/bin/env bash
# The decoder-only language models that encode prompts (compiler/frontends/decoder_lm.c): Qwen-Image's
# Qwen2_5_VLForConditionalGeneration and HunyuanVideo's LlamaModel, each a pipeline's text_encoder/
# folder, against transformers' fp32 CPU outputs (tests/data/make_goldens_declm.py), max relative
# error <= 1e-4 over every row: the hidden state each pipeline takes (hidden_states[-1] and [-3]) of
# two right-padded items; the padded rows are compared too (transformers' rows there are defined: the
# valid keys before them, positions 0..L-1). Then: the other checkpoint names and the older
# Qwen2.5-VL config layout (the language model's fields at the top level, rope_scaling and rope_theta)
# give the same output; config fields the model does not run, a model too shallow for the pipeline's
# hidden state, pixel flags and a missing tensor are refused by name; a mask that is not a prefix is
# refused when set; bf16 runs near fp32; the sm_90 compile (no GPU needed).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

# golden forward: compile folder (extra flags after it), forward the golden's inputs, compare.
golden_forward() { # golden-dir folder [flags...]
  local d=$1 te=$2
  shift 2
  local L B b
  read -r L B < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['text_len'], m['batch'])")
  b=$("$BIN/ditc" compile "$te" --text-len "$L" --batch "$B" "$@" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$T/f.safetensors" 2>/dev/null >/dev/null
  "$BIN/st_compare" "$T/f.safetensors" "$d/forward_output.safetensors" hidden_states_selected 1e-4
}

for name in qwen25vl_text_tiny:Qwen2_5_VLForConditionalGeneration:qwen2_5_vl_text:3 llama_text_tiny:LlamaModel:llama_text:2; do
  IFS=: read -r dir cls fam layers <<<"$name"
  d=tests/data/$dir
  te=$d/text_encoder
  read -r L B < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['text_len'], m['batch'])")
  one=$("$BIN/ditc" compile "$te" --text-len "$L" --batch "$B" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" verify "$one" >/dev/null
  "$BIN/ditrun" info "$one" >"$T/info"
  grep -q "^model      $cls ($fam, family $fam)$" "$T/info" || { cat "$T/info"; echo "not the $fam family"; exit 1; }
  for i in input_ids attention_mask; do
    grep -q "^input      $i  *i32\[$B,$L\]$" "$T/info" || { cat "$T/info"; echo "$i is not i32 [$B,$L]"; exit 1; }
  done
  grep -q "^output     hidden_states_selected  *f32\[$B,$L,48\]$" "$T/info" || { cat "$T/info"; echo "no hidden_states_selected"; exit 1; }
  # Only the layers the selected hidden state needs are built.
  "$BIN/ditc" compile "$te" --text-len "$L" --batch "$B" -o "$T/ir" -q --dump-ir >"$T/ir.txt"
  n=$(grep -o "// layer[0-9]*\.sdpa " "$T/ir.txt" | sort -u | wc -l)
  [ "$n" = "$layers" ] || { echo "$fam: $n attention layers built, expected $layers"; exit 1; }
  golden_forward "$d" "$te"

  # A mask that is not a valid prefix then padding is refused when set.
  python3 - "$d/forward_inputs.safetensors" "$T/holes.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = bytearray(f.read())
a, _ = h["attention_mask"]["data_offsets"]
body[a:a + 8] = struct.pack("<q", 0)  # item 0's first token masked, the rest valid
h.pop("__metadata__", None)
j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + body)
PY
  expect_fail "input 'attention_mask': batch item 0 has a nonzero at position 1 after a zero at 0" "$BIN/ditrun" forward "$one" \
    --inputs "$T/holes.safetensors" --out "$T/x.safetensors"

  # bf16 stays near fp32; the same folder compiles for sm_90.
  b16=$("$BIN/ditc" compile "$te" --text-len "$L" --batch "$B" --dtype bf16 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" forward "$b16" --inputs "$d/forward_inputs.safetensors" --out "$T/h.safetensors" 2>/dev/null >/dev/null
  "$BIN/st_compare" "$T/h.safetensors" "$d/forward_output.safetensors" hidden_states_selected 6e-2
  g90=$("$BIN/ditc" compile "$te" --text-len "$L" --batch "$B" --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" verify "$g90" >/dev/null
  "$BIN/ditrun" info "$g90" | grep -q "^target     sm_90" || { "$BIN/ditrun" info "$g90"; echo "not an sm_90 bundle"; exit 1; }
done

q=tests/data/qwen25vl_text_tiny
l=tests/data/llama_text_tiny
bad=$T/bad

# Qwen2.5-VL's other checkpoint names: the language model under model.language_model. and the vision
# tower under model.visual.; Llama's under model. with an older checkpoint's rotary buffer.
rm -rf "$bad" && mkdir "$bad" && cp "$q/text_encoder/config.json" "$bad/"
python3 - "$q/text_encoder/model.safetensors" "$bad/model.safetensors" model. model.language_model. visual. model.visual. <<'PY'
import json, struct, sys
src, out, *pairs = sys.argv[1:]
f = open(src, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
hdr, data = {}, b""
for k, v in h.items():
    if k == "__metadata__": continue
    a, b = v["data_offsets"]
    for old, new in zip(pairs[0::2], pairs[1::2]):
        if k.startswith(old): k = new + k[len(old):]; break
    hdr[k] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [len(data), len(data) + b - a]}; data += body[a:b]
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(out, "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
golden_forward "$q" "$bad"
rm -rf "$bad" && mkdir "$bad" && cp "$l/text_encoder/config.json" "$bad/"
python3 - "$l/text_encoder/model.safetensors" "$bad/model.safetensors" <<'PY'
import json, struct, sys
src, out = sys.argv[1:]
f = open(src, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
items = [("model." + k, v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items() if k != "__metadata__"]
items.append(("model.rotary_emb.inv_freq", "F32", [6], struct.pack("<6f", *[5e5 ** (-2 * j / 12) for j in range(6)])))
hdr, data = {}, b""
for k, dt, shape, raw in items:
    hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}; data += raw
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(out, "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
golden_forward "$l" "$bad"

# The older Qwen2.5-VL config layout (transformers 4's, the published Qwen-Image's): the language
# model's fields at the top level beside text_config's copy, rope_scaling with type "mrope" and
# rope_theta at the top; and the top level alone (no text_config).
cp -r "$q/text_encoder" "$bad.old" && rm -rf "$bad" && mv "$bad.old" "$bad"
python3 - "$bad/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); t = c["text_config"]
rp = t.pop("rope_parameters")
t["rope_scaling"] = {"type": "mrope", "mrope_section": rp["mrope_section"]}
t["rope_theta"] = rp["rope_theta"]
c.update({k: v for k, v in t.items() if k != "model_type"})
json.dump(c, open(p, "w"), indent=2)
PY
golden_forward "$q" "$bad"
python3 - "$bad/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c.pop("text_config"); json.dump(c, open(p, "w"), indent=2)
PY
golden_forward "$q" "$bad"

# Refusals by name: config fields the model does not run, a model too shallow for the pipeline's
# hidden state, pixel flags, a missing tensor.
edit_config "$l/text_encoder" "$bad" 'hidden_act="gelu"'
expect_fail "field 'hidden_act' = \"gelu\": only \"silu\" (the SwiGLU MLP) is supported" "$BIN/ditc" compile "$bad" --text-len 12 -o "$T/b"
edit_config "$l/text_encoder" "$bad" 'rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}'
expect_fail "rotary type \"llama3\": only LlamaModel's unscaled rotary embedding (\"default\") is supported" "$BIN/ditc" compile "$bad" \
  --text-len 12 -o "$T/b"
edit_config "$l/text_encoder" "$bad" 'num_key_value_heads=3'
expect_fail "field 'num_attention_heads' = 4 is not a multiple of num_key_value_heads = 3" "$BIN/ditc" compile "$bad" --text-len 12 -o "$T/b"
edit_config "$l/text_encoder" "$bad" 'num_hidden_layers=1'
expect_fail "field 'num_hidden_layers' = 1: HunyuanVideoPipeline takes hidden_states[-3], which needs at least 2 layers" "$BIN/ditc" \
  compile "$bad" --text-len 12 -o "$T/b"
edit_config "$l/text_encoder" "$bad" 'mlp_bias=true'
expect_fail "field 'mlp_bias' = true: only the MLP without biases is supported" "$BIN/ditc" compile "$bad" --text-len 12 -o "$T/b"
edit_config "$q/text_encoder" "$bad" 'text_config={"model_type": "qwen2_5_vl_text", "use_sliding_window": true}'
expect_fail "field 'use_sliding_window' = true: only full causal attention is supported" "$BIN/ditc" compile "$bad" --text-len 12 -o "$T/b"
edit_config "$q/text_encoder" "$bad" 'text_config={"model_type": "qwen2_vl_text"}'
expect_fail "field 'model_type' = \"qwen2_vl_text\": only \"qwen2_5_vl_text\" is supported" "$BIN/ditc" compile "$bad" --text-len 12 -o "$T/b"
expect_fail "--height 64: LlamaModel is a text encoder: its shape is --batch and --text-len alone" "$BIN/ditc" compile "$l/text_encoder" \
  --text-len 12 --height 64 -o "$T/b"
rm -rf "$bad" && mkdir "$bad" && cp "$q/text_encoder/config.json" "$bad/"
restage "$q/text_encoder/model.safetensors" "$bad/model.safetensors" -model.layers.2.self_attn.k_proj.bias
expect_fail "checkpoint has no tensor 'model.layers.2.self_attn.k_proj.bias'" "$BIN/ditc" compile "$bad" --text-len 12 -o "$T/b"
echo "goldens_declm: ok"
