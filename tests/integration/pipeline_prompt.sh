#!/usr/bin/env bash
# A whole tiny Wan2.1 pipeline directory (tests/data/wan_pipeline_tiny, make_goldens_wan_pipeline.py)
# from a prompt to a file: `ditc compile PIPELINE_DIR` compiles the transformer with its text
# encoder and VAE decoder stages (four bundles: the decoder in chunks of one latent frame, latent
# frame 0's graph and the later chunks'; the transformer's manifest naming the other three),
# and `ditrun generate --prompt` runs tokenizer, text encoder, the 3-step UniPC loop with CFG and
# the decoder: the frames within 1e-3 max relative error and PSNR >= 45 dB of diffusers' WanPipeline
# on the same initial latents; the same run to an MP4 (5 frames of 32 x 32; with --out-frames its float
# frames from the same decode) and a PNG; refusals by
# name (--prompt on a bundle without stages, --stages naming a stage the folder lacks, a --vae-chunk
# that does not divide the latent frames); --vae-chunk 0 (the whole video in one graph, three
# bundles) decodes the same frames to fp32 rounding, at 9 frames too with chunks of 1 and 2; `ditrun
# verify` catches a modified tokenizer file in the text encoder's bundle; the store serves the
# stages as it serves the bundle; the decoder split for windows (--vae-tiles) decodes the same
# frames, --vae-budget leaves it whole when it fits.
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"
fail() { echo "FAIL: $*"; exit 1; }

d=tests/data/wan_pipeline_tiny
g=$d/golden.safetensors
read -r F H W L STEPS G S < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['text_len'], m['steps'], m['guidance'], m['shift'])")
PROMPT=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['prompt'])")
NEG=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['negative_prompt'])")
shape=(--frames "$F" --height "$H" --width "$W" --text-len "$L")
loop=(--init-latents "$g" --steps "$STEPS" --guidance "$G" --shift "$S" --sampler unipc)

psnr() { python3 tests/tools/psnr.py "$1" "$2" frames "$3"; }  # ours ref min

# Compile: four bundles, the transformer's naming the others by role.
line=$("$BIN/ditc" compile "$d" "${shape[@]}" -o "$T/b" 2>"$T/compile.err" | tail -n1)
b=${line##* }
[ "$(ls "$T/b" | wc -l)" = 4 ] || { ls -la "$T/b"; fail "expected four bundles (transformer, text encoder, VAE decoder's two)"; }
for x in "$T"/b/*; do "$BIN/ditrun" verify "$x" >/dev/null; done
"$BIN/ditrun" info "$b" >"$T/info"
te=$(awk '$1 == "stage" && $2 == "text_encoder" {print $3}' "$T/info")
vae=$(awk '$1 == "stage" && $2 == "vae_decoder" {print $3}' "$T/info")
vae0=$(awk '$1 == "stage" && $2 == "vae_decoder_first" {print $3}' "$T/info")
[ -n "$te" ] && [ -d "$T/b/$te" ] && [ -n "$vae" ] && [ -d "$T/b/$vae" ] && [ -n "$vae0" ] && [ -d "$T/b/$vae0" ] ||
  { cat "$T/info"; fail "info lacks the stages"; }
grep -q "^schema     1.4$" "$T/info" || { cat "$T/info"; fail "expected schema 1.4 with stages"; }
grep -q "(umt5, UMT5EncoderModel)" "$T/info" && grep -q "(wan_vae, AutoencoderKLWan)" "$T/info" || { cat "$T/info"; fail "stage families"; }
"$BIN/ditrun" info "$T/b/$te" >"$T/te_info"
grep -q "^input      input_ids  *i32\[1,$L\]$" "$T/te_info" || { cat "$T/te_info"; fail "the text encoder stage is not batch 1 at $L tokens"; }
grep -q "^blob       tokenizer .* spiece.model$" "$T/te_info" && grep -q "^blob       tokenizer .* tokenizer_config.json$" "$T/te_info" ||
  { cat "$T/te_info"; fail "the text encoder's bundle lacks the tokenizer files"; }
"$BIN/ditrun" info "$T/b/$vae0" | grep -q "^output     sample  *f32\[1,3,1,$H,$W\]$" || fail "the first chunk's VAE stage's shape"
"$BIN/ditrun" info "$T/b/$vae" >"$T/vae_info"
grep -q "^input      latents  *f32\[1,16,1,$((H / 8)),$((W / 8))\]$" "$T/vae_info" || { cat "$T/vae_info"; fail "the VAE stage's latents"; }
grep -q "^output     sample  *f32\[1,3,4,$H,$W\]$" "$T/vae_info" || { cat "$T/vae_info"; fail "the VAE stage's shape"; }

# The prompt to frames against WanPipeline's, the latents too.
"$BIN/ditrun" generate "$b" --prompt "$PROMPT" --negative-prompt "$NEG" "${loop[@]}" --out "$T/f.safetensors" \
  --out-latents "$T/l.safetensors" 2>"$T/gen.err" >/dev/null || { cat "$T/gen.err"; fail "generate --prompt"; }
grep -q "^ditrun: text encoder [0-9.]* s (16 and 7 tokens of 16)$" "$T/gen.err" || { cat "$T/gen.err"; fail "no text encoder line"; }
grep -q "^ditrun: vae decode [0-9.]* s (loading [0-9.]* s, [0-9.]* MiB allocated; forwards [0-9.]* s, caches [0-9.]* s, frames [0-9.]* s, [0-9.]* s of it beside the forwards)$" "$T/gen.err" || { cat "$T/gen.err"; fail "no vae decode line"; }
"$BIN/st_compare" "$T/l.safetensors" "$g" latents 1e-4
"$BIN/st_compare" "$T/f.safetensors" "$g" frames 1e-3
psnr "$T/f.safetensors" "$g" 45
# The whole video in one graph: three bundles, the same frames.
line=$("$BIN/ditc" compile "$d" "${shape[@]}" --vae-chunk 0 -o "$T/w" 2>/dev/null | tail -n1)
[ "$(ls "$T/w" | wc -l)" = 3 ] || { ls -la "$T/w"; fail "--vae-chunk 0: expected three bundles"; }
"$BIN/ditrun" info "${line##* }" | grep -q "vae_decoder_first" && fail "--vae-chunk 0 has a first chunk's stage"
"$BIN/ditrun" generate "${line##* }" --prompt "$PROMPT" --negative-prompt "$NEG" "${loop[@]}" --out "$T/fw.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/fw.safetensors" "$T/f.safetensors" frames 1e-5
# 9 frames (3 latent frames: two forwards after latent frame 0, the caches carried between them;
# or one of two latent frames) decode as the whole-video graph does.
shape9=(--frames 9 --height "$H" --width "$W" --text-len "$L")
gen9=(--prompt "$PROMPT" --seed 7 --steps 2 --guidance "$G" --shift "$S")
for chunk in 0 1 2; do
  line=$("$BIN/ditc" compile "$d" "${shape9[@]}" --vae-chunk $chunk -o "$T/c$chunk" 2>/dev/null | tail -n1)
  "$BIN/ditrun" generate "${line##* }" "${gen9[@]}" --out "$T/f9_$chunk.safetensors" 2>/dev/null >/dev/null
done
"$BIN/st_compare" "$T/f9_1.safetensors" "$T/f9_0.safetensors" frames 1e-5
"$BIN/st_compare" "$T/f9_2.safetensors" "$T/f9_0.safetensors" frames 1e-5
expect_fail "--vae-chunk 2: the 1 latent frames after the first (--frames $F) do not split into chunks of that many" "$BIN/ditc" compile \
  "$d" "${shape[@]}" --vae-chunk 2 -o "$T/x"
# --preview: the latent-to-RGB map fitted on the VAE decoder stage; the last preview follows the
# decoded frame 0.
"$BIN/ditrun" generate "$b" --prompt "$PROMPT" --negative-prompt "$NEG" "${loop[@]}" --out "$T/fp.safetensors" --preview "$T/p" \
  2>"$T/gen.err" >/dev/null || { cat "$T/gen.err"; fail "--preview"; }
grep -q "^ditrun: preview map fitted on the VAE decoder stage in [0-9.]* s (16 channels to RGB)$" "$T/gen.err" || { cat "$T/gen.err"; fail "no fitted map"; }
python3 tests/tools/preview_corr.py "$T/p/step_00$STEPS.png" "$T/fp.safetensors" 8 0.3
# The decoder split for windows (--vae-tiles 1: the head, then the tail over one window): five
# bundles, schema 1.5, the same frames byte for byte; --vae-budget keeps it whole when it fits.
line=$("$BIN/ditc" compile "$d" "${shape[@]}" --vae-tiles 1 -o "$T/s" 2>/dev/null | tail -n1)
[ "$(ls "$T/s" | wc -l)" = 5 ] || { ls -la "$T/s"; fail "--vae-tiles 1: expected five bundles"; }
"$BIN/ditrun" info "${line##* }" >"$T/sinfo"
grep -q "^stage      vae_decoder_head " "$T/sinfo" && grep -q "^schema     1.5$" "$T/sinfo" || { cat "$T/sinfo"; fail "no head stage"; }
"$BIN/ditrun" generate "${line##* }" --prompt "$PROMPT" --negative-prompt "$NEG" "${loop[@]}" --out "$T/fs.safetensors" 2>/dev/null >/dev/null
cmp -s "$T/fs.safetensors" "$T/f.safetensors" || fail "the split decoder's frames differ from the whole decoder's"
"$BIN/ditc" compile "$d" "${shape[@]}" --vae-budget 1 -o "$T/s1" 2>"$T/s1.err" >/dev/null
grep -q "^ditc: --vae-budget 1 GiB: the VAE decode unsplit, 1 window, a predicted peak of [0-9.]* MiB$" "$T/s1.err" || { cat "$T/s1.err"; fail "budget"; }
[ "$(ls "$T/s1" | wc -l)" = 4 ] || fail "--vae-budget 1: the decoder split though it fits"
expect_fail "--vae-chunk 0 with --vae-tiles: a decoder in windows runs in chunks" "$BIN/ditc" compile "$d" "${shape[@]}" --vae-chunk 0 \
  --vae-tiles 2 -o "$T/x"
# The negative prompt matters: the default "" gives other frames.
"$BIN/ditrun" generate "$b" --prompt "$PROMPT" "${loop[@]}" --out "$T/f0.safetensors" 2>/dev/null >/dev/null
if "$BIN/st_compare" "$T/f0.safetensors" "$g" frames 1e-3 >/dev/null 2>&1; then fail "the negative prompt is ignored"; fi

# The same run to an MP4 (ftyp; the track's 5 samples of 32 x 32) and a PNG (IHDR 32 x 32).
# The MP4's run also writes its float frames (--out-frames, from the one decode): the frames of the
# safetensors run above.
"$BIN/ditrun" generate "$b" --prompt "$PROMPT" --negative-prompt "$NEG" "${loop[@]}" --out "$T/v.mp4" --fps 16 \
  --out-frames "$T/vf.safetensors" 2>"$T/v.err" >/dev/null || { cat "$T/v.err"; fail "generate --out-frames"; }
grep -q "^ditrun: encode $T/v.mp4 [0-9.]* s$" "$T/v.err" && grep -q "^ditrun: out-frames [0-9.]* s$" "$T/v.err" ||
  { cat "$T/v.err"; fail "no encode or out-frames line"; }
"$BIN/st_compare" "$T/vf.safetensors" "$T/f.safetensors" frames 1e-6
"$BIN/ditrun" generate "$b" --prompt "$PROMPT" --negative-prompt "$NEG" "${loop[@]}" --out "$T/v.png" 2>/dev/null >/dev/null
python3 - "$T/v.mp4" "$T/v.png" "$F" "$W" "$H" <<'PY'
import struct, sys
mp4, png, F, W, H = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
b = open(mp4, "rb").read()
assert b[4:8] == b"ftyp", b[:12]
def box(name):
    i = b.find(name)
    assert i > 0, name
    return i + 4
i = box(b"stsz")  # version/flags, sample_size, sample_count
count = struct.unpack(">I", b[i + 8:i + 12])[0]
i = box(b"tkhd")
v = b[i]
off = i + 4 + (32 if v == 1 else 20) + 8 + 8 + 36  # times, track, duration; reserved; layer..volume; matrix
w, h = (x >> 16 for x in struct.unpack(">II", b[off:off + 8]))
assert (count, w, h) == (F, W, H), ("mp4", count, w, h)
p = open(png, "rb").read(24)
assert p[:8] == b"\x89PNG\r\n\x1a\n" and p[12:16] == b"IHDR", p
assert struct.unpack(">II", p[16:24]) == (W, H), struct.unpack(">II", p[16:24])
print("mp4: %d frames of %dx%d; png %dx%d" % (count, w, h, W, H))
PY

# Refusals: --prompt on a bundle without stages (named, with the flag that adds them); --stages
# naming a stage the folder lacks or does not know; --out by extension.
bare=$("$BIN/ditc" compile "$d" "${shape[@]}" --stages transformer -o "$T/bare" -q | tail -n1 | cut -d' ' -f3)
grep -q '"stages"' "$bare/manifest.json" && fail "--stages transformer wrote a stages section"
grep -q '"minor": 4' "$bare/manifest.json" && fail "a bundle without stages is schema 1.4"
expect_fail "--prompt: bundle $(basename "$bare") has no text_encoder stage" "$BIN/ditrun" generate "$bare" --prompt "$PROMPT" "${loop[@]}" --out "$T/x.mp4"
expect_fail "--stages transformer,text_encoder,vae" "$BIN/ditrun" generate "$bare" --prompt "$PROMPT" "${loop[@]}" --out "$T/x.mp4"
mkdir "$T/novae"
for x in model_index.json scheduler transformer text_encoder tokenizer; do ln -s "$PWD/$d/$x" "$T/novae/$x"; done
expect_fail "--stages transformer,vae: the pipeline directory $T/novae has no vae/ folder" "$BIN/ditc" compile "$T/novae" "${shape[@]}" \
  --stages transformer,vae -o "$T/x"
expect_fail "--stages transformer,unet: unknown stage 'unet'" "$BIN/ditc" compile "$d" "${shape[@]}" --stages transformer,unet -o "$T/x"
expect_fail "--stages vae: the bundle is the transformer's" "$BIN/ditc" compile "$d" "${shape[@]}" --stages vae -o "$T/x"
expect_fail "--stages transformer,text_encoder: tests/data/wan_tiny_a/model is not a pipeline directory" "$BIN/ditc" compile tests/data/wan_tiny_a/model \
  --frames 9 --height 32 --width 48 --stages transformer,text_encoder -o "$T/x"
expect_fail "--out $T/x.gif: with --prompt, the decoded frames as FILE.mp4" "$BIN/ditrun" generate "$b" --prompt "$PROMPT" "${loop[@]}" --out "$T/x.gif"
expect_fail "--out-frames $T/x.png: the frames tensor goes to FILE.safetensors" "$BIN/ditrun" generate "$b" --prompt "$PROMPT" "${loop[@]}" \
  --out "$T/x.mp4" --out-frames "$T/x.png"
expect_fail "--out-frames needs --prompt TEXT" "$BIN/ditrun" generate "$b" --prompt-embeds "$g" "${loop[@]}" --out "$T/x.safetensors" \
  --out-frames "$T/y.safetensors"
expect_fail "--out $T/x.mp4: a video or image comes from the VAE stage" "$BIN/ditrun" generate "$b" --prompt-embeds "$g" "${loop[@]}" --out "$T/x.mp4"
# Without a pipeline's folder (just the transformer) there are no stages, and nothing is said.
"$BIN/ditc" compile "$d/transformer" "${shape[@]}" -o "$T/plain" -q | tail -n1 | cut -d' ' -f3 >"$T/plain.id"
[ "$(ls "$T/plain" | wc -l)" = 1 ] || fail "a transformer folder compiled stages"

# A modified tokenizer file: verify names the blob; generate refuses to read it.
cp -r "$T/b" "$T/mod"
tok=$(python3 -c "import json,sys; print([x['hash'] for x in json.load(open(sys.argv[1]))['blobs'] if x.get('name') == 'tokenizer_config.json'][0])" "$T/mod/$te/manifest.json")
python3 - "$T/mod/$te/blobs/$tok" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-2] ^= 0x20
open(p, "wb").write(bytes(b))
PY
expect_fail "blobs/$tok (role tokenizer): content hash mismatch" "$BIN/ditrun" verify "$T/mod/$te"
expect_fail "content hash mismatch" "$BIN/ditrun" generate "$T/mod/$(basename "$b")" --prompt "$PROMPT" "${loop[@]}" --out "$T/x.png"
# A damaged weights shard (hashed at load beside its use, not at open) is refused before any step.
rm -rf "$T/mod" && cp -r "$T/b" "$T/mod"
wts=$(python3 -c "import json,sys; print([x['hash'] for x in json.load(open(sys.argv[1]))['blobs'] if x['role'] == 'weights'][0])" "$T/mod/$(basename "$b")/manifest.json")
python3 - "$T/mod/$(basename "$b")/blobs/$wts" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x01
open(p, "wb").write(bytes(b))
PY
expect_fail "blobs/$wts (role weights): content hash mismatch" "$BIN/ditrun" generate "$T/mod/$(basename "$b")" --prompt "$PROMPT" \
  "${loop[@]}" --out "$T/x.png"
[ ! -e "$T/x.png" ] || fail "a refused generate left an output"

# The store: the stages are entered with the bundle and found there by identity.
"$BIN/ditc" compile "$d" "${shape[@]}" --store "$T/store" -q >/dev/null
"$BIN/ditrun" generate "$(basename "$b")" --store "$T/store" --prompt "$PROMPT" --negative-prompt "$NEG" "${loop[@]}" \
  --out "$T/s.safetensors" 2>"$T/store.err" >/dev/null || { cat "$T/store.err"; fail "generate from the store"; }
"$BIN/st_compare" "$T/s.safetensors" "$g" frames 1e-3
echo "pipeline_prompt: ok"
