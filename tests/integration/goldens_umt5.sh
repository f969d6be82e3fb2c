#!/usr/bin/env bash
# The UMT5 text encoder (transformers' UMT5EncoderModel, a pipeline's text_encoder/ folder) against
# transformers' fp32 CPU outputs (tests/data/make_goldens_umt5.py), max relative error <= 1e-4:
# batch 2 at 16 tokens with right padding of two lengths, and batch 1 at Wan's 512 tokens (every
# relative-position bucket). Then: Wan's post-processing (rows past each prompt's length zeroed,
# WanPipeline._get_t5_prompt_embeds) applied to our output equals the pipeline's; the bundle's
# i32 inputs take torch's int64 files; a mask that is not a prefix, config fields the encoder
# does not run, pixel flags and a checkpoint that lacks a tensor are refused by name; bf16 runs
# near fp32; the sm_90 compile (no GPU needed).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

d=tests/data/umt5_tiny
te=$d/text_encoder
read -r L B LL < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['text_len'], m['batch'], m['long_len'])")
one=$("$BIN/ditc" compile "$te" --text-len "$L" --batch "$B" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$one" >/dev/null
"$BIN/ditrun" info "$one" >"$T/info"
grep -q "^input      input_ids  *i32\[$B,$L\]$" "$T/info" || { cat "$T/info"; echo "input_ids is not i32 [$B,$L]"; exit 1; }
grep -q "^input      attention_mask  *i32\[$B,$L\]$" "$T/info" || { cat "$T/info"; echo "attention_mask is not i32 [$B,$L]"; exit 1; }
"$BIN/ditrun" forward "$one" --inputs "$d/forward_inputs.safetensors" --out "$T/f.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/f.safetensors" "$d/forward_output.safetensors" last_hidden_state 1e-4
long=$("$BIN/ditc" compile "$te" --text-len "$LL" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$long" --inputs "$d/forward_inputs_l512.safetensors" --out "$T/l.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/l.safetensors" "$d/forward_output_l512.safetensors" last_hidden_state 1e-4

# Wan's post-processing on our output: each prompt's rows past its mask length set to zero.
python3 - "$T/f.safetensors" "$d/forward_inputs.safetensors" "$T/wan.safetensors" <<'PY'
import json, struct, sys
def load(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); return h, f.read()
h, body = load(sys.argv[1])
m, mbody = load(sys.argv[2])
o = h["last_hidden_state"]; a, b = o["data_offsets"]; B, L, D = o["shape"]
x = list(struct.unpack("<%df" % (B * L * D), body[a:b]))
mk = m["attention_mask"]; ma, mb = mk["data_offsets"]
mask = struct.unpack("<%dq" % (B * L), mbody[ma:mb])
for i in range(B):
    n = sum(1 for t in range(L) if mask[i * L + t] > 0)
    for t in range(n, L):
        x[(i * L + t) * D:(i * L + t + 1) * D] = [0.0] * D
raw = struct.pack("<%df" % len(x), *x)
j = json.dumps({"wan_prompt_embeds": {"dtype": "F32", "shape": [B, L, D], "data_offsets": [0, len(raw)]}}).encode()
j += b" " * (-len(j) % 8)
open(sys.argv[3], "wb").write(struct.pack("<Q", len(j)) + j + raw)
PY
"$BIN/st_compare" "$T/wan.safetensors" "$d/forward_output.safetensors" wan_prompt_embeds 1e-4

# A mask with a hole is not right padding: refused when set.
python3 - "$d/forward_inputs.safetensors" "$T/hole.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = bytearray(f.read())
a, _ = h["attention_mask"]["data_offsets"]
struct.pack_into("<q", body, a + 8 * 2, 0)  # item 0, token 2 masked, later tokens valid
j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + bytes(body))
PY
expect_fail "a mask must be a valid prefix then padding" "$BIN/ditrun" forward "$one" --inputs "$T/hole.safetensors" --out "$T/x.safetensors"

# Refusals by name: config fields the encoder does not run, pixel flags, a missing tensor.
bad=$T/bad
edit_config "$te" "$bad" 'feed_forward_proj="relu"'
expect_fail "field 'feed_forward_proj' = \"relu\": only \"gated-gelu\" is supported" "$BIN/ditc" compile "$bad" --text-len 16 -o "$T/b"
edit_config "$te" "$bad" 'is_decoder=true'
expect_fail "field 'is_decoder' = true: only the encoder (bidirectional attention) is supported" "$BIN/ditc" compile "$bad" --text-len 16 -o "$T/b"
edit_config "$te" "$bad" 'num_heads=8' 'd_kv=4'
expect_fail "SelfAttention.relative_attention_bias.weight': shape [32,4], expected [32,8] from config.json" "$BIN/ditc" compile "$bad" \
  --text-len 16 -o "$T/b"
expect_fail "--height 64: UMT5EncoderModel is a text encoder: its shape is --batch and --text-len alone" "$BIN/ditc" compile "$te" \
  --text-len 16 --height 64 -o "$T/b"
python3 - "$te/model.safetensors" "$T/nofinal.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
hdr, data = {}, b""
for k, v in h.items():
    if k == "__metadata__" or k == "encoder.final_layer_norm.weight": continue
    a, b = v["data_offsets"]; raw = body[a:b]
    hdr[k] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [len(data), len(data) + len(raw)]}; data += raw
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
rm -rf "$bad" && mkdir "$bad" && cp "$te/config.json" "$bad/" && mv "$T/nofinal.safetensors" "$bad/model.safetensors"
expect_fail "checkpoint has no tensor 'encoder.final_layer_norm.weight'" "$BIN/ditc" compile "$bad" --text-len 16 -o "$T/b"

# bf16 as transformers runs it (wo fp32, the residual fp32 from the first feed-forward on) stays
# near the fp32 output; the same folder compiles for sm_90.
b16=$("$BIN/ditc" compile "$te" --text-len "$L" --batch "$B" --dtype bf16 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$b16" --inputs "$d/forward_inputs.safetensors" --out "$T/h.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/h.safetensors" "$d/forward_output.safetensors" last_hidden_state 6e-2
g90=$("$BIN/ditc" compile "$te" --text-len "$LL" --batch 2 --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$g90" >/dev/null
echo "goldens_umt5: ok"
