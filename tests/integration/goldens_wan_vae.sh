#!/usr/bin/env bash
# The Wan2.1 VAE decoder stage (family wan_vae) from a tiny AutoencoderKLWan's vae/ folder against
# the pinned diffusers' fp32 CPU decode (tests/data/make_goldens_wan_vae.py: WanPipeline's
# de-normalization, vae.decode frame by frame with the causal cache, the clamp): 3 latent frames
# -> 9 frames and 1 latent frame -> 1 frame, each at max relative error <= 1e-4 (max|d| / max|ref|)
# and PSNR >= 45 dB (peak-to-peak 2: the output's [-1, 1]); batch 2 (the golden latents and their
# negation) decodes each item as batch 1 does; the bundle's input and output; the decode in chunks
# (--vae-chunk 1 and 2: latent frame 0's graph, then the later chunks', causal caches carried
# between forwards as `ditrun generate` does, tests/tools/vae_chunks.py) equal to the golden and to
# the whole-video graph's output to fp32 rounding (`ditrun decode` too), and its plan's predicted peak at 81 and 161
# frames of 480 x 832 (printed) the same for both lengths, the whole video's growing with them;
# refusals by name (a std or a mean of the wrong length, an unknown field, frames that no latent
# count decodes to, a chunk that does not divide the frames); the
# bf16 sm_90 compile, the whole video's and the chunks' (no GPU needed).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

d=tests/data/wan_vae_tiny
read -r F H W < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'])")

psnr() { python3 tests/tools/psnr.py "$1" "$2" sample "$3"; }  # ours ref min

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

# In chunks: each chunk length that divides the 2 latent frames after the first.
"$BIN/ditrun" forward "$full" --inputs "$d/forward_inputs.safetensors" --out "$T/whole.safetensors" 2>/dev/null >/dev/null
for n in 1 2; do
  first=$("$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" --vae-chunk $n --vae-first -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
  rest=$("$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" --vae-chunk $n -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" info "$rest" >"$T/info"
  grep -q "^input      latents  *f32\[1,16,$n,$((H / 8)),$((W / 8))\]$" "$T/info" || { cat "$T/info"; exit 1; }
  grep -q "^output     sample  *f32\[1,3,$((4 * n)),$H,$W\]$" "$T/info" || { cat "$T/info"; exit 1; }
  python3 tests/tools/vae_chunks.py "$BIN/ditrun" "$first" "$rest" "$d/forward_inputs.safetensors" "$T/c$n.safetensors" "$T"
  "$BIN/st_compare" "$T/c$n.safetensors" "$d/forward_output.safetensors" sample 1e-4
  "$BIN/st_compare" "$T/c$n.safetensors" "$T/whole.safetensors" sample 1e-5
  # ditrun decode chains the same forwards in one process (generate's decoder): the same frames.
  "$BIN/ditrun" decode "$rest" --first "$first" --latents "$d/forward_inputs.safetensors" --out "$T/d$n.safetensors" 2>"$T/decode.err" >/dev/null ||
    { cat "$T/decode.err"; exit 1; }
  grep -q "^ditrun: vae decode [0-9.]* s (loading [0-9.]* s, [0-9.]* MiB allocated; forwards [0-9.]* s, caches [0-9.]* s, frames [0-9.]* s, [0-9.]* s of it beside the forwards)$" "$T/decode.err" || { cat "$T/decode.err"; exit 1; }
  python3 - "$T/d$n.safetensors" "$T/c$n.safetensors" <<'PY'
import json, struct, sys
def load(p, name):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
    v = h[name]; a, b = v["data_offsets"]
    return v["shape"], body[a:b]
(sa, a), (sb, b) = load(sys.argv[1], "frames"), load(sys.argv[2], "sample")
assert sa == sb and a == b, "ditrun decode's frames differ from the chained forwards'"
print("ditrun decode: the chained forwards' frames, %s" % sa)
PY
  # Latent frame 0's decoder runs in the later chunks' arena and cache buffers (caches updated in
  # place): the two decoders together hold no more than the later one's peak plus the first's own
  # inputs and outputs other than the caches.
  python3 - "$T/decode.err" "$first" "$rest" <<'PY'
import json, math, re, sys
alloc = float(re.search(r"([0-9.]+) MiB allocated", open(sys.argv[1]).read()).group(1)) * 2**20
def man(d): return json.load(open(d + "/manifest.json"))
fm, rm = man(sys.argv[2]), man(sys.argv[3])
size = lambda io: math.prod(io["shape"]) * {"f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4}[io["dtype"]]
own = sum(size(i) for i in fm["io"]["inputs"] if not i["name"].startswith("cache.")) + \
      sum(size(o) for o in fm["io"]["outputs"] if not o["name"].startswith("cache."))
limit = rm["memory"]["peak_bytes"] + fm["memory"]["weight_bytes"] + own
assert alloc <= limit, f"the decoders hold {alloc:.0f} bytes, more than {limit:.0f}: latent frame 0's decoder did not borrow"
assert rm["memory"]["peak_bytes"] < rm["memory"]["arena_bytes"] + rm["memory"]["weight_bytes"] + \
    sum(size(i) for i in rm["io"]["inputs"]) + sum(size(o) for o in rm["io"]["outputs"]), "in-place caches counted twice"
print(f"decode: {alloc / 2**20:.2f} MiB held, at most {limit / 2**20:.2f}")
PY
done
expect_fail "the VAE decoder stage takes 2 latent frames per forward, the latents have 3 (a stage of another shape)" "$BIN/ditrun" decode "$rest" \
  --latents "$d/forward_inputs.safetensors" --out "$T/x.safetensors"
# A stage manifest edited to take no frames a forward is refused, not divided by.
cp -r "$rest" "$T/zero" && python3 - "$T/zero/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
next(i for i in m["io"]["inputs"] if i["name"] == "latents")["shape"][2] = 0
json.dump(m, open(sys.argv[1], "w"))
PY
"$BIN/redigest" "$T/zero"
expect_fail "zero: a stage that takes 0 frames a forward and gives" "$BIN/ditrun" decode "$T/zero" --first "$first" --latents "$d/forward_inputs.safetensors" \
  --out "$T/x.safetensors"
# The plans' predicted peaks at 480 x 832: a chunk's does not grow with the video, the whole video's does.
vae_chunk_peaks "predicted peak" "$d/vae" "--vae-chunk 0" ""

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
mkdir -p "$T/bad"
cp "$d/vae/diffusion_pytorch_model.safetensors" "$T/bad/"
c=(compile "$T/bad" --frames "$F" --height "$H" --width "$W" -o "$T/b")
python3 -c "import json; c=json.load(open('$d/vae/config.json')); c['latents_std']=c['latents_std'][:15]; json.dump(c, open('$T/bad/config.json','w'))"
expect_fail "field 'latents_std' has 15 entries, expected z_dim = 16" "$BIN/ditc" "${c[@]}"
python3 -c "import json; c=json.load(open('$d/vae/config.json')); c['spatial_tiles']=2; json.dump(c, open('$T/bad/config.json','w'))"
expect_fail "spatial_tiles': not a AutoencoderKLWan option this build knows" "$BIN/ditc" "${c[@]}"
python3 -c "import json; c=json.load(open('$d/vae/config.json')); c['latents_mean']=c['latents_mean'][:4]; json.dump(c, open('$T/bad/config.json','w'))"
expect_fail "field 'latents_mean' has 4 entries, expected z_dim = 16" "$BIN/ditc" "${c[@]}"
expect_fail "--frames 8: AutoencoderKLWan decodes frames = 4*k + 1 (e.g. 5)" "$BIN/ditc" compile "$d/vae" --frames 8 --height "$H" \
  --width "$W" -o "$T/b"
expect_fail "--vae-chunk 3: the 2 latent frames after the first (--frames $F) do not split into chunks of that many" "$BIN/ditc" compile \
  "$d/vae" --frames "$F" --height "$H" --width "$W" --vae-chunk 3 -o "$T/b"
expect_fail "--vae-first needs --vae-chunk N with N >= 1" "$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" --vae-first \
  -o "$T/b"
expect_fail "--height 36: must be a positive multiple of 8 (the VAE's factor)" "$BIN/ditc" compile "$d/vae" --frames "$F" --height 36 \
  --width "$W" -o "$T/b"

# The GPU bundle: every kernel compiles under NVRTC for sm_90 (bf16: the attention kernel's type).
g90=$("$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$g90" >/dev/null
for chunk in "--vae-chunk 1 --vae-first" "--vae-chunk 2"; do
  # shellcheck disable=SC2086 # the flags split on purpose
  g90=$("$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" $chunk --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" verify "$g90" >/dev/null
done
echo "goldens_wan_vae: ok"
