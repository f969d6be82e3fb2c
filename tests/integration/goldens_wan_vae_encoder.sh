#!/usr/bin/env bash
# The Wan VAE encoder stage (ditc compile VAE --vae-part encoder: a video to the normalized latents
# that image-to-video pipelines condition on) against the pinned diffusers' fp32 CPU encode
# (tests/data/make_goldens_wan_vae_encoder.py: vae.encode frame 0 then 4 frames at a time with the
# causal cache, the posterior's mean, (mu - latents_mean) / latents_std), for the Wan2.1 VAE (the
# decoder golden's tests/data/wan_vae_tiny/vae) and a Wan2.2 one (residual down blocks with their
# averaging shortcut, patch size 2, 48 channels): 9 frames -> 3 latent frames and 1 frame -> 1, each
# at max relative error <= 1e-4 and cosine >= 0.99999; in chunks (--vae-chunk 1 and 2, the causal
# caches carried between forwards) the same, and the plan's predicted peak at 480 x 832 the same for
# 81 and 161 frames; the bundle's input and output; batch 2 (the
# video and its negation) encodes each item as batch 1 does; the encoder's identity apart from the
# decoder's; refusals by name (an in_channels that does not patchify, a missing encoder tensor, a
# chunk that does not divide the frames, the decoder tail's tiles); the bf16 sm_90 compile, whole
# and in chunks (no GPU needed).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"
fail() { echo "FAIL: $*"; exit 1; }

for d in tests/data/wan_vae_enc_tiny tests/data/wan22_vae_enc_tiny; do
  read -r F H W V Z < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['vae'], m['latent'][0])")
  # The golden encodes these weights: a regenerated VAE folder needs new encoder goldens.
  python3 -c "import hashlib, json, sys; m=json.load(open('$d/meta.json')); h=hashlib.sha256(open('$V/diffusion_pytorch_model.safetensors','rb').read()).hexdigest(); sys.exit(h != m['vae_weights_sha256'])" ||
    fail "$V's weights are not those $d/meta.json encoded with"
  c() { "$BIN/ditc" compile "$V" --vae-part encoder -o "$T/b" -q "$@" | tail -n1 | cut -d' ' -f3; }
  for case in "$F:" "1:_f1"; do
    frames=${case%%:*}
    sfx=${case#*:}
    b=$(c --frames "$frames" --height "$H" --width "$W")
    "$BIN/ditrun" verify "$b" >/dev/null
    lf=$(( (frames - 1) / 4 + 1 ))
    s=$(( H / $(python3 -c "import json; print(json.load(open('$V/config.json')).get('scale_factor_spatial') or 8)") ))
    "$BIN/ditrun" info "$b" >"$T/info"
    grep -q "^input      video  *f32\[1,3,$frames,$H,$W\]$" "$T/info" || { cat "$T/info"; fail "$d: the video input"; }
    grep -q "^output     latents  *f32\[1,$Z,$lf,$s,$(( W * s / H ))\]$" "$T/info" || { cat "$T/info"; fail "$d: the latents output"; }
    "$BIN/ditrun" forward "$b" --inputs "$d/encoder_inputs$sfx.safetensors" --out "$T/e$sfx.safetensors" 2>/dev/null >/dev/null
    "$BIN/st_compare" "$T/e$sfx.safetensors" "$d/encoder_output$sfx.safetensors" latents 1e-4 0.99999
  done

  # In chunks as diffusers encodes (frame 0, then 4 frames a latent frame; --vae-chunk 1 and 2), the
  # causal caches carried between forwards: the golden, and the whole video's graph to fp32 rounding.
  whole=$(c --frames "$F" --height "$H" --width "$W")
  "$BIN/ditrun" forward "$whole" --inputs "$d/encoder_inputs.safetensors" --out "$T/whole.safetensors" 2>/dev/null >/dev/null
  for n in 1 2; do
    first=$(c --frames "$F" --height "$H" --width "$W" --vae-chunk $n --vae-first)
    rest=$(c --frames "$F" --height "$H" --width "$W" --vae-chunk $n)
    "$BIN/ditrun" info "$rest" >"$T/info"
    grep -q "^input      video  *f32\[1,3,$((4 * n)),$H,$W\]$" "$T/info" || { cat "$T/info"; fail "$d: the chunk's video"; }
    grep -q "^input      cache.encoder.conv_in  *f32\[1,2,$((3 * H * W))\]$" "$T/info" || { cat "$T/info"; fail "$d: conv_in's cache"; }
    python3 tests/tools/vae_chunks.py "$BIN/ditrun" "$first" "$rest" "$d/encoder_inputs.safetensors" "$T/c$n.safetensors" "$T" video latents
    "$BIN/st_compare" "$T/c$n.safetensors" "$d/encoder_output.safetensors" latents 1e-4 0.99999
    "$BIN/st_compare" "$T/c$n.safetensors" "$T/whole.safetensors" latents 1e-6
  done

  # The decoder of the same shape is another bundle.
  dec=$("$BIN/ditc" compile "$V" --frames "$F" --height "$H" --width "$W" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
  [ "$dec" != "$b" ] || fail "$d: the encoder and the decoder share a bundle identity"

  # Batch 2: the golden video and its negation; item 0 the golden's encode, item 1 its own batch-1 encode.
  python3 - "$d/encoder_inputs.safetensors" "$T/b2.safetensors" "$T/neg.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
v = h["video"]; a, b = v["data_offsets"]; x = struct.unpack("<%df" % ((b - a) // 4), body[a:b])
neg = struct.pack("<%df" % len(x), *[-t for t in x])
for path, shape, data in ((sys.argv[2], [2] + v["shape"][1:], body[a:b] + neg), (sys.argv[3], v["shape"], neg)):
    j = json.dumps({"video": {"dtype": "F32", "shape": shape, "data_offsets": [0, len(data)]}}).encode(); j += b" " * (-len(j) % 8)
    open(path, "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
  full=$(c --frames "$F" --height "$H" --width "$W")
  "$BIN/ditrun" forward "$full" --inputs "$T/neg.safetensors" --out "$T/neg_out.safetensors" 2>/dev/null >/dev/null
  b2=$(c --frames "$F" --height "$H" --width "$W" --batch 2)
  "$BIN/ditrun" forward "$b2" --inputs "$T/b2.safetensors" --out "$T/e2.safetensors" 2>/dev/null >/dev/null
  python3 - "$T/e2.safetensors" "$T/e.safetensors" "$T/neg_out.safetensors" <<'PY'
import json, struct, sys
def load(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
    v = h["latents"]; a, b = v["data_offsets"]
    return v["shape"], struct.unpack("<%df" % ((b - a) // 4), body[a:b])
(s2, y2), (s1, y1), (_, yn) = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
assert s2 == [2] + s1[1:], (s2, s1)
n = len(y1)
assert y2[:n] == y1 and y2[n:] == yn, "batch 2 does not encode each item as batch 1 does"
assert max(abs(p - q) for p, q in zip(yn, y1)) > 0.1, "the negated video encodes alike: the input is ignored"
print("batch 2: each item its batch-1 encode, bit for bit")
PY

  # The GPU bundle: every kernel (the strided convolutions' too) compiles under NVRTC for sm_90.
  for chunk in "" "--vae-chunk 1 --vae-first" "--vae-chunk 2"; do
    # shellcheck disable=SC2086 # the flags split on purpose
    g90=$(c --frames "$F" --height "$H" --width "$W" $chunk --dtype bf16 --target sm_90)
    "$BIN/ditrun" verify "$g90" >/dev/null
  done
done

# Refusals by name.
d=tests/data/wan22_vae_enc_tiny
mkdir -p "$T/bad"
cp "$d/vae/diffusion_pytorch_model.safetensors" "$T/bad/"
python3 -c "import json; c=json.load(open('$d/vae/config.json')); c['in_channels']=13; json.dump(c, open('$T/bad/config.json','w'))"
expect_fail "field 'in_channels' = 13 does not patchify with patch_size 2: expected a multiple of 4" "$BIN/ditc" compile "$T/bad" \
  --vae-part encoder --frames 9 --height 32 --width 32 -o "$T/b"
cp "$d/vae/config.json" "$T/bad/"
restage "$d/vae/diffusion_pytorch_model.safetensors" "$T/bad/diffusion_pytorch_model.safetensors" -quant_conv.bias
expect_fail "checkpoint has no tensor 'quant_conv.bias', which this config requires" "$BIN/ditc" compile "$T/bad" --vae-part encoder --frames 9 --height 32 --width 32 -o "$T/b"
expect_fail "--vae-chunk 3: the 2 latent frames after the first (--frames 9) do not split into chunks of that many" "$BIN/ditc" compile \
  "$d/vae" --vae-part encoder --frames 9 --height 32 --width 32 --vae-chunk 3 -o "$T/b"
expect_fail "--vae-part encoder runs over whole frames: --vae-tiles and --vae-budget are the decoder tail's" "$BIN/ditc" compile "$d/vae" \
  --vae-part encoder --frames 9 --height 32 --width 32 --vae-tiles 2 -o "$T/b"
expect_fail "--frames 8: AutoencoderKLWan encodes frames = 4*k + 1 (e.g. 5)" "$BIN/ditc" compile "$d/vae" --vae-part encoder --frames 8 \
  --height 32 --width 32 -o "$T/b"
expect_fail "--vae-part middle: expected head, tail or encoder" "$BIN/ditc" compile "$d/vae" --vae-part middle --frames 9 -o "$T/b"

# The plans' predicted peaks at 480 x 832 (Wan2.1): a chunk's does not grow with the video, the whole video's does.
vae_chunk_peaks "encoder's predicted peak" tests/data/wan_vae_tiny/vae "" "--vae-part encoder"
echo "goldens_wan_vae_encoder: ok"
