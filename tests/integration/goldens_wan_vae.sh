#!/usr/bin/env bash
# The Wan2.1 VAE decoder stage (family wan_vae) from a tiny AutoencoderKLWan's vae/ folder against
# the pinned diffusers' fp32 CPU decode (tests/data/make_goldens_wan_vae.py: WanPipeline's
# de-normalization, vae.decode frame by frame with the causal cache, the clamp): 3 latent frames
# -> 9 frames and 1 latent frame -> 1 frame, each at max relative error <= 1e-4 (max|d| / max|ref|)
# and PSNR >= 45 dB (peak-to-peak 2: the output's [-1, 1]); batch 2 (the golden latents and their
# negation) decodes each item as batch 1 does; the bundle's input and output; refusals by name (the Wan2.2 VAE's patch_size and
# is_residual, an unknown field, frames that no latent count decodes to, a mean of the wrong
# length); the bf16 sm_90 compile (no GPU needed).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

d=tests/data/wan_vae_tiny
read -r F H W < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'])")

# PSNR in dB of OURS against REF (tensor `sample`, f32), peak-to-peak 2; fails below MIN.
psnr() { # ours ref min
  python3 - "$@" <<'PY'
import json, math, struct, sys
def load(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
    v = h["sample"]; a, b = v["data_offsets"]
    assert v["dtype"] == "F32", v
    return v["shape"], struct.unpack("<%df" % ((b - a) // 4), body[a:b])
(sa, a), (sb, b) = load(sys.argv[1]), load(sys.argv[2])
assert sa == sb, (sa, sb)
mse = sum((x - y) ** 2 for x, y in zip(a, b)) / len(b)
db = math.inf if mse == 0 else 10 * math.log10(4.0 / mse)
print("psnr %.1f dB" % db)
sys.exit(0 if db >= float(sys.argv[3]) else 1)
PY
}

for case in "$F:" "1:_f1"; do
  frames=${case%%:*}
  sfx=${case#*:}
  b=$("$BIN/ditc" compile "$d/vae" --frames "$frames" --height "$H" --width "$W" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" verify "$b" >/dev/null
  "$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs$sfx.safetensors" --out "$T/f.safetensors" 2>/dev/null >/dev/null
  "$BIN/st_compare" "$T/f.safetensors" "$d/forward_output$sfx.safetensors" sample 1e-4
  psnr "$T/f.safetensors" "$d/forward_output$sfx.safetensors" 45
done
lf=$(( (F - 1) / 4 + 1 ))
"$BIN/ditrun" info "$b" >/dev/null
full=$("$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" info "$full" | grep -q "^input      latents  *f32\[1,16,$lf,$((H / 8)),$((W / 8))\]$" || { "$BIN/ditrun" info "$full"; exit 1; }
"$BIN/ditrun" info "$full" | grep -q "^output     sample  *f32\[1,3,$F,$H,$W\]$" || { "$BIN/ditrun" info "$full"; exit 1; }

# Batch 2: the golden latents twice (the second negated) decode to what batch 1 gives each.
python3 - "$d/forward_inputs.safetensors" "$T/b2.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
v = h["latents"]; a, b = v["data_offsets"]; x = struct.unpack("<%df" % ((b - a) // 4), body[a:b])
data = struct.pack("<%df" % (2 * len(x)), *x, *[-t for t in x])
hdr = {"latents": {"dtype": "F32", "shape": [2] + v["shape"][1:], "data_offsets": [0, len(data)]}}
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
python3 - "$d/forward_inputs.safetensors" "$T/neg.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
v = h["latents"]; a, b = v["data_offsets"]; x = struct.unpack("<%df" % ((b - a) // 4), body[a:b])
data = struct.pack("<%df" % len(x), *[-t for t in x])
hdr = {"latents": {"dtype": "F32", "shape": v["shape"], "data_offsets": [0, len(data)]}}
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
"$BIN/ditrun" forward "$full" --inputs "$T/neg.safetensors" --out "$T/neg_out.safetensors" 2>/dev/null >/dev/null
b2=$("$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" --batch 2 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$b2" --inputs "$T/b2.safetensors" --out "$T/f2.safetensors" 2>/dev/null >/dev/null
python3 - "$T/f2.safetensors" "$d/forward_output.safetensors" "$T/neg_out.safetensors" <<'PY'
import json, struct, sys
def load(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
    v = h["sample"]; a, b = v["data_offsets"]
    return v["shape"], struct.unpack("<%df" % ((b - a) // 4), body[a:b])
(s2, y2), (s1, y1), (_, yn) = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
assert s2 == [2] + s1[1:], (s2, s1)
n = len(y1)
err0 = max(abs(p - q) for p, q in zip(y2[:n], y1))
assert err0 <= 1e-4, "batch item 0 differs from the golden by %g" % err0
err1 = max(abs(p - q) for p, q in zip(y2[n:], yn))
assert err1 <= 1e-6, "batch item 1 differs from its batch-1 decode by %g" % err1
assert max(abs(p - q) for p, q in zip(yn, y1)) > 0.1, "the negated latents decode alike: the input is ignored"
print("batch 2: item 0 within %.1e of the golden, item 1 within %.1e of its batch-1 decode" % (err0, err1))
PY

# Refusals by name.
mkdir -p "$T/v22"
python3 - "$d/vae/config.json" "$T/v22/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
# The Wan2.2 VAE's distinguishing fields.
c.update(z_dim=48, is_residual=True, patch_size=2, scale_factor_spatial=16, base_dim=160, decoder_base_dim=256)
json.dump(c, open(sys.argv[2], "w"))
PY
cp "$d/vae/diffusion_pytorch_model.safetensors" "$T/v22/"
c=(compile "$T/v22" --frames "$F" --height "$H" --width "$W" -o "$T/b")
expect_fail "field 'patch_size' = 2: the patchified decoder (the Wan2.2 VAE) is not supported yet; expected null" "$BIN/ditc" "${c[@]}"
python3 -c "import json; c=json.load(open('$T/v22/config.json')); c['patch_size']=None; json.dump(c, open('$T/v22/config.json','w'))"
expect_fail "field 'is_residual' = true: residual up blocks (the Wan2.2 VAE) are not supported yet" "$BIN/ditc" "${c[@]}"
python3 -c "import json; c=json.load(open('$d/vae/config.json')); c['spatial_tiles']=2; json.dump(c, open('$T/v22/config.json','w'))"
expect_fail "spatial_tiles': not a AutoencoderKLWan option this build knows" "$BIN/ditc" "${c[@]}"
python3 -c "import json; c=json.load(open('$d/vae/config.json')); c['latents_mean']=c['latents_mean'][:4]; json.dump(c, open('$T/v22/config.json','w'))"
expect_fail "field 'latents_mean' has 4 entries, expected z_dim = 16" "$BIN/ditc" "${c[@]}"
expect_fail "--frames 8: AutoencoderKLWan decodes frames = 4*k + 1 (e.g. 5)" "$BIN/ditc" compile "$d/vae" --frames 8 --height "$H" \
  --width "$W" -o "$T/b"
expect_fail "--height 36: must be a positive multiple of 8 (the VAE's factor)" "$BIN/ditc" compile "$d/vae" --frames "$F" --height 36 \
  --width "$W" -o "$T/b"

# The GPU bundle: every kernel compiles under NVRTC for sm_90 (bf16: the attention kernel's type).
g90=$("$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$g90" >/dev/null
echo "goldens_wan_vae: ok"
