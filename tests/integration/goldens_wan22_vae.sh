#!/usr/bin/env bash
# The Wan2.2 VAE decoder stage (family wan_vae, variant wan2.2-vae: is_residual, patch_size 2, 16
# pixels per latent pixel) from a tiny AutoencoderKLWan's vae/ folder against the pinned diffusers'
# fp32 CPU decode (tests/data/make_goldens_wan22_vae.py: WanPipeline's de-normalization, vae.decode
# frame by frame with the causal cache, the DupUp3D shortcuts with their first-chunk rule, the
# unpatchify, the clamp): 3 latent frames -> 9 frames and 1 latent frame -> 1 frame by the
# whole-video graph, and the 9 frames in chunks (--vae-chunk 1 and 2, caches carried between
# forwards, tests/tools/vae_chunks.py), each at max relative error <= 1e-4 and PSNR >= 45 dB, the
# chunks equal to the whole graph's output; the split decoder (the head over whole frames up to the
# mid block, the tail's windows with their halo of 13 latent columns) byte-identical to the unsplit
# decode in chunks at 40 latent columns in 1, 2, 3 and 14 windows (the most that fit); refusals by
# name; the bf16 sm_90 compile of the whole video, a chunk, the head and a tail (no GPU needed).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"
fail() { echo "FAIL: $*"; exit 1; }

d=tests/data/wan22_vae_tiny
read -r F H W < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'])")
c() { "$BIN/ditc" compile "$d/vae" -o "$T/b" -q "$@" | tail -n1 | cut -d' ' -f3; }
psnr() { python3 tests/tools/psnr.py "$1" "$2" sample "$3"; }  # ours ref min

for case in "$F:" "1:_f1"; do
  frames=${case%%:*}
  sfx=${case#*:}
  b=$(c --frames "$frames" --height "$H" --width "$W")
  "$BIN/ditrun" verify "$b" >/dev/null
  "$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs$sfx.safetensors" --out "$T/f$sfx.safetensors" 2>/dev/null >/dev/null
  "$BIN/st_compare" "$T/f$sfx.safetensors" "$d/forward_output$sfx.safetensors" sample 1e-4
  psnr "$T/f$sfx.safetensors" "$d/forward_output$sfx.safetensors" 45
done
full=$(c --frames "$F" --height "$H" --width "$W")
"$BIN/ditrun" info "$full" >"$T/info"
grep -q "^model      AutoencoderKLWan (wan2.2-vae, family wan_vae)$" "$T/info" || { cat "$T/info"; fail "the variant"; }
grep -q "^input      latents  *f32\[1,48,3,$((H / 16)),$((W / 16))\]$" "$T/info" || { cat "$T/info"; fail "the latents"; }
grep -q "^output     sample  *f32\[1,3,$F,$H,$W\]$" "$T/info" || { cat "$T/info"; fail "the sample"; }

# Batch 2: the golden latents twice decode to the golden twice.
python3 - "$d/forward_inputs.safetensors" "$T/b2.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
v = h["latents"]; a, b = v["data_offsets"]; data = body[a:b] * 2
hdr = {"latents": {"dtype": "F32", "shape": [2] + v["shape"][1:], "data_offsets": [0, len(data)]}}
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
b2=$(c --frames "$F" --height "$H" --width "$W" --batch 2)
"$BIN/ditrun" forward "$b2" --inputs "$T/b2.safetensors" --out "$T/f2.safetensors" 2>/dev/null >/dev/null
python3 - "$T/f2.safetensors" "$T/f.safetensors" <<'PY'
import json, struct, sys
def load(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
    v = h["sample"]; a, b = v["data_offsets"]
    return v["shape"], body[a:b]
(s2, y2), (s1, y1) = load(sys.argv[1]), load(sys.argv[2])
assert s2 == [2] + s1[1:] and y2 == y1 * 2, "batch 2 does not decode each item as batch 1 does"
print("batch 2: each item the batch-1 decode, bit for bit")
PY

# In chunks: latent frame 0's graph (the shortcuts keep one of its duplicated frames), then chunks of 1 and 2.
for n in 1 2; do
  first=$(c --frames "$F" --height "$H" --width "$W" --vae-chunk $n --vae-first)
  rest=$(c --frames "$F" --height "$H" --width "$W" --vae-chunk $n)
  "$BIN/ditrun" info "$rest" >"$T/info"
  grep -q "^output     sample  *f32\[1,3,$((4 * n)),$H,$W\]$" "$T/info" || { cat "$T/info"; fail "chunk output"; }
  python3 tests/tools/vae_chunks.py "$BIN/ditrun" "$first" "$rest" "$d/forward_inputs.safetensors" "$T/c$n.safetensors" "$T"
  "$BIN/st_compare" "$T/c$n.safetensors" "$d/forward_output.safetensors" sample 1e-4
  psnr "$T/c$n.safetensors" "$d/forward_output.safetensors" 45
  "$BIN/st_compare" "$T/c$n.safetensors" "$T/f.safetensors" sample 1e-5
done

# The split decoder at 9 frames of 32 x 640 (40 latent columns): byte for byte the unsplit decode in chunks.
python3 - "$T/lat.safetensors" <<'PY'
import json, random, struct, sys
random.seed(2202)
shape = [1, 48, 3, 2, 40]
n = 48 * 3 * 2 * 40
data = struct.pack("<%df" % n, *[random.gauss(0, 1) for _ in range(n)])
h = json.dumps({"latents": {"dtype": "F32", "shape": shape, "data_offsets": [0, len(data)]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
wide=(--frames 9 --height 32 --width 640 --vae-chunk 1)
first=$(c "${wide[@]}" --vae-first)
rest=$(c "${wide[@]}")
"$BIN/ditrun" decode "$rest" --first "$first" --latents "$T/lat.safetensors" --out "$T/whole.safetensors" 2>"$T/err" >/dev/null ||
  { cat "$T/err"; fail "the unsplit decode"; }
head=$(c "${wide[@]}" --vae-part head)
# The head ends after the mid block: up block 0's shortcut reads that block's input.
"$BIN/ditrun" info "$head" >"$T/info"
grep -q "^output     hidden  *f32\[1,1,2,40,8\]$" "$T/info" || { cat "$T/info"; fail "the head's output"; }
for t in 1 2 3 14; do
  tf=$(c "${wide[@]}" --vae-first --vae-part tail --vae-tiles $t)
  tr=$(c "${wide[@]}" --vae-part tail --vae-tiles $t)
  win=$(( (40 + 26 * (t - 1) + t - 1) / t ))
  "$BIN/ditrun" info "$tr" >"$T/info"
  grep -q "^tile       $t windows\? $win wide over 40 columns, halo 13$" "$T/info" || { cat "$T/info"; fail "tile line"; }
  "$BIN/ditrun" decode "$tr" --first "$tf" --head "$head" --latents "$T/lat.safetensors" --out "$T/t$t.safetensors" 2>"$T/err" >/dev/null ||
    { cat "$T/err"; fail "the decode in $t windows"; }
  cmp -s "$T/whole.safetensors" "$T/t$t.safetensors" || fail "$t windows: the frames differ from the unsplit decode's"
  echo "$t window(s) of $win latent columns: the unsplit decode's frames"
done
# A budget picks the windows: all of the video's width under a loose one, the narrowest under a tight one.
for pick in "0.01:1 window," "0.004:14 windows,"; do
  "$BIN/ditc" compile "$d/vae" "${wide[@]}" --vae-part tail --vae-budget "${pick%%:*}" -o "$T/x" >"$T/out" 2>&1
  grep -qF "GiB: ${pick#*:} a predicted peak" "$T/out" || { cat "$T/out"; fail "--vae-budget ${pick%%:*} did not take ${pick#*:}"; }
done
expect_fail "--vae-tiles 15: 40 latent columns (--width 640) make at most 14 exact windows (each needs more than twice the halo of 13" \
  "$BIN/ditc" compile "$d/vae" "${wide[@]}" --vae-part tail --vae-tiles 15 -o "$T/x"

# Refusals by name.
bad() { edit_config "$d/vae" "$T/bad" "$@"; }
cb=(compile "$T/bad" --frames "$F" --height "$H" --width "$W" -o "$T/x")
bad out_channels=10
expect_fail "field 'out_channels' = 10 does not unpatchify with patch_size 2: expected a multiple of 4" "$BIN/ditc" "${cb[@]}"
bad 'dim_mult=[1,3,2,2]'
expect_fail "field 'dim_mult': residual up block 2 goes from width 8 to 12; its shortcut needs the input width a multiple of the output's" \
  "$BIN/ditc" "${cb[@]}"
bad scale_factor_spatial=8
expect_fail "field 'scale_factor_spatial' = 8, but the decoder upsamples by 16" "$BIN/ditc" "${cb[@]}"
bad 'latents_std=[1.0,2.0]'
expect_fail "field 'latents_std' has 2 entries, expected z_dim = 48" "$BIN/ditc" "${cb[@]}"
expect_fail "--variant wan2.1-vae: this AutoencoderKLWan (is_residual true) compiles as wan2.2-vae" "$BIN/ditc" compile "$d/vae" \
  --frames "$F" --height "$H" --width "$W" --variant wan2.1-vae -o "$T/x"
expect_fail "--height 40: must be a positive multiple of 16 (the VAE's factor)" "$BIN/ditc" compile "$d/vae" --frames "$F" --height 40 \
  --width "$W" -o "$T/x"

# The GPU bundles: every kernel compiles under NVRTC for sm_90 (bf16: the attention kernel's type).
for flags in "--width $W" "--width $W --vae-chunk 1 --vae-first" "--width $W --vae-chunk 2" "--width 640 --vae-chunk 1 --vae-part head" \
  "--width 640 --vae-chunk 1 --vae-part tail --vae-tiles 2"; do
  # shellcheck disable=SC2086 # the flags split on purpose
  g=$("$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" $flags --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" verify "$g" >/dev/null
done
echo "goldens_wan22_vae: ok"
