#!/usr/bin/env bash
# Bad input to the command lines: each is refused with a precise message naming the file or
# field, a non-zero exit status, no crash (sanitizer builds fail on any report) and no
# partial output.
set -uo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
# expect_fail "message substring" command...
expect_fail() {
  local needle=$1; shift
  "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  if [ $rc -eq 0 ]; then echo "FAIL (exit 0): $*"; fails=$((fails+1)); return; fi
  if [ $rc -gt 2 ]; then echo "FAIL (exit $rc, crash?): $*"; cat "$T/err"; fails=$((fails+1)); return; fi
  if ! grep -qF -- "$needle" "$T/err"; then
    echo "FAIL (message lacks '$needle'): $*"; cat "$T/err"; fails=$((fails+1)); return
  fi
  echo "ok: refused: $(head -c 220 "$T/err" | head -n 1)"
}

M=tests/data/wan_tiny_a/model
line=$("$BIN/ditc" compile "$M" --frames 9 --height 32 --width 48 --text-len 7 -o "$T/b" -q | tail -n 1)
B=${line##* }
ID=$(basename "$B")
IN=tests/data/wan_tiny_a/forward_inputs.safetensors

# --- ditc: arguments and shapes
expect_fail "compile needs --frames" "$BIN/ditc" compile "$M" --height 32 --width 48
expect_fail "--frames 10" "$BIN/ditc" compile "$M" --frames 10 --height 32 --width 48 -o "$T/x"
expect_fail "--height 30" "$BIN/ditc" compile "$M" --frames 9 --height 30 --width 48 -o "$T/x"
expect_fail "rope_max_seq_len" "$BIN/ditc" compile "$M" --frames 9 --height 32 --width 4096 -o "$T/x"
expect_fail "--dtype fp8" "$BIN/ditc" compile "$M" --frames 9 --height 32 --width 48 --dtype fp8
expect_fail "unknown option --frobnicate" "$BIN/ditc" compile "$M" --frobnicate
expect_fail "--dump-after=nope: unknown pass" "$BIN/ditc" compile "$M" --frames 9 --height 32 --width 48 --dump-after=nope -o "$T/x"
expect_fail "nonexistent: not a model directory" "$BIN/ditc" compile "$T/nonexistent" --frames 9 --height 32 --width 48 -o "$T/x"

# --- ditc: bad configs and checkpoints
mkcfg() { rm -rf "$T/m"; cp -r "$M" "$T/m"; python3 - "$T/m/config.json" "$@" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p))
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    if v == "DELETE": c.pop(k, None)
    else: c[k] = json.loads(v)
json.dump(c, open(p, "w"))
PY
}
mkcfg image_dim=1280;                expect_fail "field 'image_dim'" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg added_kv_proj_dim=64;          expect_fail "field 'added_kv_proj_dim'" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg 'qk_norm="rms_norm"';          expect_fail "field 'qk_norm'" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg 'wibble=3';                    expect_fail "field 'wibble'" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg 'num_layers="two"';            expect_fail "field 'num_layers'" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg 'num_layers=3';                expect_fail "no tensor 'blocks.2." "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg 'ffn_dim=65';                  expect_fail "expected [65] from config.json" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg 'num_layers=1';                expect_fail "unexpected tensor 'blocks.1." "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg '_class_name="SD3Transformer2DModel"'; expect_fail "field '_class_name'" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg; printf '{"_class_name": "WanTransformer3DModel", ' > "$T/m/config.json"
expect_fail "not valid JSON" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg num_attention_heads=0;         expect_fail "config.json: field 'num_attention_heads': expected an integer in [1, 1024], found 0" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg 'patch_size=[1,2]';            expect_fail "config.json: field 'patch_size': expected 3 integers" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg; sed -i 's/"num_layers": 2/"num_layers": 2, "num_layers": 3/' "$T/m/config.json"
expect_fail "config.json: field '(top level)': duplicate key \"num_layers\"" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
# A sharded checkpoint whose index points outside its directory.
mkcfg; mv "$T/m/diffusion_pytorch_model.safetensors" "$T/outside.safetensors"
python3 - "$T/outside.safetensors" "$T/m/diffusion_pytorch_model.safetensors.index.json" <<'PY'
import json, struct, sys
h = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", h[:8])[0]
names = [k for k in json.loads(h[8:8 + n]) if k != "__metadata__"]
json.dump({"weight_map": {k: "../outside.safetensors" for k in names}}, open(sys.argv[2], "w"))
PY
expect_fail "is not a plain file name beside the index" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
# Pipeline directories: model_index.json with transformer/ and scheduler/.
mkpipe() { rm -rf "$T/p"; mkdir -p "$T/p/scheduler"; cp -r "$M" "$T/p/transformer"; printf '%s' "$1" > "$T/p/model_index.json"; }
mkpipe '{"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"], "transformer_2": ["diffusers", "WanTransformer3DModel"], "boundary_ratio": 0.875}'
expect_fail "names a second transformer (WanTransformer3DModel), but" "$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 -o "$T/x"
# Wan2.2 and image-to-video pipelines: read and validated, refused by the compile until the
# graph and runtime run them.
A14B='{"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"], "transformer_2": ["diffusers", "WanTransformer3DModel"], "boundary_ratio": 0.875}'
mkpipe "$A14B"; cp -r "$M" "$T/p/transformer_2"
expect_fail "--memory-budget 1e-06 GiB: the two-expert pipeline needs" "$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 --offload layerwise --memory-budget 0.000001 -o "$T/x"
python3 - "$T/p/transformer_2/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["num_layers"] = 1; json.dump(c, open(p, "w"))
PY
expect_fail "transformer_2/config.json: field 'num_layers' = 1, but" "$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 -o "$T/x"
mkpipe "${A14B/, \"boundary_ratio\": 0.875/}"; cp -r "$M" "$T/p/transformer_2"
expect_fail "model_index.json: field 'boundary_ratio': missing: a pipeline with transformer_2" "$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 -o "$T/x"
mkpipe "${A14B/0.875/1.5}"; cp -r "$M" "$T/p/transformer_2"
expect_fail "field 'boundary_ratio': expected a number in (0, 1], found 1.5" "$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 -o "$T/x"
mkpipe '{"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"], "transformer_2": [null, null], "boundary_ratio": 0.5}'
expect_fail "field 'boundary_ratio': found 0.5, but the pipeline has no transformer_2" "$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 -o "$T/x"
TI2V='{"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"], "transformer_2": [null, null], "boundary_ratio": null, "expand_timesteps": true}'
mkpipe "$TI2V"
# Per-token timesteps compile (tests/integration/goldens_ti2v.sh checks what they compute).
"$BIN/ditc" compile "$T/p" --frames 9 --height 64 --width 96 -o "$T/ok" -q >/dev/null 2>"$T/err" || { echo "FAIL: expand_timesteps refused"; cat "$T/err"; fails=$((fails+1)); }
mkpipe '{"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"]}'; mkdir -p "$T/p/vae"
printf '{"_class_name": "AutoencoderKLWan", "z_dim": 16}' > "$T/p/vae/config.json"
expect_fail "vae/config.json: field 'z_dim' = 16, but" "$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 -o "$T/x"
printf '{"_class_name": "AutoencoderKLWan", "z_dim": 4, "scale_factor_spatial": 0}' > "$T/p/vae/config.json"
expect_fail "vae/config.json: field 'scale_factor_spatial': expected an integer in [1, 64], found 0" "$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 -o "$T/x"
printf '{"_class_name": "AutoencoderKLWan", "z_dim": 4}' > "$T/p/vae/config.json"
expect_fail "--variant wan2.2-ti2v: its VAE compresses 16x spatially" "$BIN/ditc" compile "$T/p" --variant wan2.2-ti2v --frames 9 --height 64 --width 96 -o "$T/x"
# Image-to-video transformers: the tiny checkpoint with its patch embedding widened to
# in_channels and the image-conditioning tensors of image_dim / added_kv_proj_dim.
mki2v() { # in_channels image_dim added_kv_proj_dim
  python3 - "$T/p/transformer" "$@" <<'PY'
import json, struct, sys
d, cin, img, kv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
raw = open(d + "/diffusion_pytorch_model.safetensors", "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); data = raw[8 + n:]
t = {k: (v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in hdr.items() if k != "__metadata__"}
def zeros(*shape):
    c = 1
    for s in shape: c *= s
    return (list(shape), bytes(4 * c))
t["patch_embedding.weight"] = zeros(32, cin, 1, 2, 2)
if img:
    for k, s in [("norm1.weight", [img]), ("norm1.bias", [img]), ("ff.net.0.proj.weight", [img, img]), ("ff.net.0.proj.bias", [img]),
                 ("ff.net.2.weight", [32, img]), ("ff.net.2.bias", [32]), ("norm2.weight", [32]), ("norm2.bias", [32])]:
        t["condition_embedder.image_embedder." + k] = zeros(*s)
if kv:
    for b in range(2):
        for k, s in [("add_k_proj.weight", [32, kv]), ("add_k_proj.bias", [32]), ("add_v_proj.weight", [32, kv]),
                     ("add_v_proj.bias", [32]), ("norm_added_k.weight", [32])]:
            t["blocks.%d.attn2.%s" % (b, k)] = zeros(*s)
h, blob = {}, b""
for k in sorted(t):
    h[k] = {"dtype": "F32", "shape": t[k][0], "data_offsets": [len(blob), len(blob) + len(t[k][1])]}; blob += t[k][1]
hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
open(d + "/diffusion_pytorch_model.safetensors", "wb").write(struct.pack("<Q", len(hb)) + hb + blob)
c = json.load(open(d + "/config.json")); c["in_channels"] = cin; c["out_channels"] = 4
c["image_dim"] = img or None; c["added_kv_proj_dim"] = kv or None; json.dump(c, open(d + "/config.json", "w"))
PY
}
I2V='{"_class_name": "WanImageToVideoPipeline", "transformer": ["diffusers", "WanTransformer3DModel"], "transformer_2": [null, null], "boundary_ratio": null}'
mkpipe "$I2V"; mki2v 4 8 8
expect_fail "transformer/config.json: field 'added_kv_proj_dim' = 8, expected 32 (num_attention_heads x attention_head_dim)" "$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 -o "$T/x"
mkpipe "$I2V"; mki2v 12 0 0
# Condition channels concatenated to the latents (Wan2.2-I2V-A14B's form) and the pipeline
# class compile (tests/integration/goldens_i2v_a14b.sh checks what they compute).
"$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 -o "$T/ok" -q >/dev/null 2>"$T/err" || { echo "FAIL: in_channels 12, out 4 refused"; cat "$T/err"; fails=$((fails+1)); }
mkpipe "$I2V"
"$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 -o "$T/ok" -q >/dev/null 2>"$T/err" || { echo "FAIL: WanImageToVideoPipeline refused"; cat "$T/err"; fails=$((fails+1)); }
mkpipe '{"_class_name": "WanPipeline", "transformer": "WanTransformer3DModel"}'
expect_fail "model_index.json: field 'transformer': expected an array, found a string" "$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 -o "$T/x"
mkpipe '{"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"]}'
printf '{"_class_name": "UniPCMultistepScheduler", "prediction_type": "flow"}' > "$T/p/scheduler/scheduler_config.json"
expect_fail "scheduler_config.json: field 'prediction_type': expected one of" "$BIN/ditc" compile "$T/p" --frames 9 --height 32 --width 48 -o "$T/x"
mkcfg; head -c 100 "$M/diffusion_pytorch_model.safetensors" > "$T/m/diffusion_pytorch_model.safetensors"
expect_fail "diffusion_pytorch_model.safetensors" "$BIN/ditc" compile "$T/m" --frames 9 --height 32 --width 48 -o "$T/x"
[ -z "$(ls -A "$T/x" 2>/dev/null | grep -v '^\.' )" ] || { echo "FAIL: a refused compile left a bundle behind"; fails=$((fails+1)); }

# --- ditrun: inputs
expect_fail "missing --out" "$BIN/ditrun" forward "$B" --inputs "$IN"
expect_fail "--image-latents is an option of generate; forward does not take it" "$BIN/ditrun" forward "$B" --inputs "$IN" --image-latents "$IN" --out "$T/o.safetensors"
expect_fail "--seed is an option of generate; bench does not take it" "$BIN/ditrun" bench "$B" --inputs "$IN" --seed 3
expect_fail "--split-in-flight is an option of bench; forward does not take it" "$BIN/ditrun" forward "$B" --inputs "$IN" --out "$T/x.safetensors" --split-in-flight
expect_fail "--split-in-flight times the split that --no-split leaves out" "$BIN/ditrun" bench "$B" --inputs "$IN" --no-split --split-in-flight
expect_fail "--inputs is an option of forward" "$BIN/ditrun" generate "$B" --inputs "$IN" --out "$T/o.safetensors"
expect_fail "input 'hidden_states': shape [2,6,2,6,4], the bundle expects [1,4,3,4,6]" \
  "$BIN/ditrun" forward "$B" --inputs tests/data/wan_tiny_b/forward_inputs.safetensors --out "$T/o.safetensors"
expect_fail "no tensor named 'prompt_embeds'" "$BIN/ditrun" generate "$B" --prompt-embeds "$IN" --seed 1 --steps 2 --out "$T/o.safetensors"
expect_fail "needs exactly one of --init-latents and --seed" "$BIN/ditrun" generate "$B" --prompt-embeds "$IN" --out "$T/o.safetensors"
expect_fail "--sampler ddim" "$BIN/ditrun" generate "$B" --prompt-embeds tests/data/wan_tiny_a/generate_inputs.safetensors --seed 1 --sampler ddim --out "$T/o.safetensors"
expect_fail "negative prompt embeddings" "$BIN/ditrun" generate "$B" --prompt-embeds tests/data/wan_tiny_a/generate_inputs.safetensors --seed 1 --steps 2 --guidance 5 --out "$T/o.safetensors"
for v in nan inf -inf; do
  expect_fail "--guidance $v: expected a finite number" "$BIN/ditrun" generate "$B" --prompt-embeds tests/data/wan_tiny_a/generate_inputs.safetensors --seed 1 --guidance $v --out "$T/o.safetensors"
done
[ ! -e "$T/o.safetensors" ] || { echo "FAIL: a refused run wrote output"; fails=$((fails+1)); }

# --- ditrun: damaged bundles (each on a fresh copy)
fresh() { rm -rf "$T/c"; mkdir -p "$T/c"; cp -r "$B" "$T/c/$ID"; C="$T/c/$ID"; }
for blob in "$B"/blobs/*; do
  h=$(basename "$blob")
  for pos in first middle last; do
    fresh
    size=$(stat -c %s "$C/blobs/$h")
    case $pos in first) off=0;; middle) off=$((size / 2));; last) off=$((size - 1));; esac
    python3 -c "import sys; p=sys.argv[1]; o=int(sys.argv[2]); b=bytearray(open(p,'rb').read()); b[o]^=0x40; open(p,'wb').write(b)" "$C/blobs/$h" "$off"
    expect_fail "blobs/$h" "$BIN/ditrun" verify "$C"
    expect_fail "blobs/$h" "$BIN/ditrun" forward "$C" --inputs "$IN" --out "$T/o.safetensors"
  done
done
fresh; rm "$C"/blobs/$(ls "$C/blobs" | head -n 1); expect_fail "NOT_FOUND" "$BIN/ditrun" verify "$C"
fresh; sed -i 's/"major": 1/"major": 2/; s/"major":1/"major":2/' "$C/manifest.json"; expect_fail "newer" "$BIN/ditrun" verify "$C"
fresh; sed -i 's/"text_len": 7/"text_len": 8/; s/"text_len":7/"text_len":8/' "$C/manifest.json"; expect_fail "identity" "$BIN/ditrun" forward "$C" --inputs "$IN" --out "$T/o.safetensors"
fresh; mv "$C" "$T/c/0123456789abcdef0123456789abcdef"; expect_fail "0123456789abcdef0123456789abcdef" "$BIN/ditrun" verify "$T/c/0123456789abcdef0123456789abcdef"
fresh; : > "$C/manifest.json"; expect_fail "manifest.json" "$BIN/ditrun" info "$C"
expect_fail "cannot open" "$BIN/ditrun" verify "$T/does-not-exist"
[ ! -e "$T/o.safetensors" ] || { echo "FAIL: a refused run wrote output"; fails=$((fails+1)); }

echo "bad_input: $fails failures"
[ "$fails" -eq 0 ]
