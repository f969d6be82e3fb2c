#!/usr/bin/env bash
# A whole tiny FLUX.1-dev pipeline directory (tests/data/flux_pipeline_tiny,
# make_goldens_flux_pipeline.py) from a prompt to a PNG: `ditc compile PIPELINE_DIR` compiles the
# transformer with its two text encoders and the VAE decoder as stages (four bundles: CLIP at its
# tokenizer's 77 tokens making pooled_prompt_embeds from pooler_output, T5 at --text-len making
# prompt_embeds from last_hidden_state, both "attended", and one whole-image AutoencoderKL
# decoder, no chunks), and `ditrun generate --prompt` runs both tokenizers and encoders as
# FluxPipeline does, the 3-step loop with the embedded guidance and the decoder: the final latents
# within 1e-4 relative and the decoded image >= 45 dB PSNR of diffusers' on the same initial
# latents; true CFG with a negative prompt as FluxPipeline's true_cfg_scale; the same run to a PNG;
# refusals by name (--prompt without the text stages, a missing tokenizer_2/, a negative prompt
# without true CFG, the video decoder's chunk and budget flags).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"
fail() { echo "FAIL: $*"; exit 1; }

d=tests/data/flux_pipeline_tiny
g=$d/golden.safetensors
read -r H W L STEPS G CFG < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['height'], m['width'], m['text_len'], m['steps'], m['guidance'], m['true_cfg'])")
PROMPT=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['prompt'])")
NEG=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['negative_prompt'])")
shape=(--height "$H" --width "$W" --text-len "$L")
loop=(--init-latents "$g" --steps "$STEPS" --guidance "$G")

# Compile: four bundles, the transformer's naming the others by role and the argument each makes.
line=$("$BIN/ditc" compile "$d" "${shape[@]}" -o "$T/b" 2>"$T/compile.err" | tail -n1)
b=${line##* }
[ "$(ls "$T/b" | wc -l)" = 4 ] || { ls -la "$T/b"; fail "expected four bundles (transformer, CLIP, T5, VAE decoder)"; }
for x in "$T"/b/*; do "$BIN/ditrun" verify "$x" >/dev/null; done
"$BIN/ditrun" info "$b" >"$T/info"
stage() { awk -v r="$1" '$1 == "stage" && $2 == r {print $3}' "$T/info"; }
te=$(stage text_encoder) te2=$(stage text_encoder_2) vae=$(stage vae_decoder)
[ -n "$te" ] && [ -d "$T/b/$te" ] && [ -n "$te2" ] && [ -d "$T/b/$te2" ] && [ -n "$vae" ] && [ -d "$T/b/$vae" ] ||
  { cat "$T/info"; fail "info lacks the stages"; }
grep -q "^schema     1.6$" "$T/info" || { cat "$T/info"; fail "expected schema 1.6 with the stages' arguments"; }
grep -q "^stage      text_encoder $te (clip_text, CLIPTextModel) -> pooled_prompt_embeds from pooler_output, padding attended$" "$T/info" &&
  grep -q "^stage      text_encoder_2 $te2 (t5, T5EncoderModel) -> prompt_embeds from last_hidden_state, padding attended$" "$T/info" &&
  grep -q "^stage      vae_decoder  $vae (kl_vae, AutoencoderKL)$" "$T/info" || { cat "$T/info"; fail "the stages' families and arguments"; }
grep -q "vae_decoder_first\|vae_decoder_head" "$T/info" && fail "an image decoder has no first chunk's or head's stage"
"$BIN/ditrun" info "$T/b/$te" >"$T/te_info"
grep -q "^input      input_ids  *i32\[1,77\]$" "$T/te_info" && grep -q "^output     pooler_output  *f32\[1,24\]$" "$T/te_info" ||
  { cat "$T/te_info"; fail "CLIP is not batch 1 at its tokenizer's 77 tokens"; }
grep -q "^blob       tokenizer .* vocab.json$" "$T/te_info" && grep -q "^blob       tokenizer .* merges.txt$" "$T/te_info" ||
  { cat "$T/te_info"; fail "CLIP's bundle lacks its tokenizer files"; }
"$BIN/ditrun" info "$T/b/$te2" >"$T/te2_info"
grep -q "^input      input_ids  *i32\[1,$L\]$" "$T/te2_info" && grep -q "^blob       tokenizer .* spiece.model$" "$T/te2_info" ||
  { cat "$T/te2_info"; fail "T5 is not batch 1 at $L tokens with tokenizer_2's files"; }
"$BIN/ditrun" info "$T/b/$vae" >"$T/vae_info"
grep -q "^input      latents  *f32\[1,$((H * W / 256)),16\]$" "$T/vae_info" && grep -q "^output     sample  *f32\[1,3,$H,$W\]$" "$T/vae_info" ||
  { cat "$T/vae_info"; fail "the VAE stage is not the whole image from packed latents"; }

# The prompt to the image against FluxPipeline's: the final latents and the float image.
"$BIN/ditrun" generate "$b" --prompt "$PROMPT" "${loop[@]}" --out "$T/f.safetensors" --out-latents "$T/l.safetensors" \
  2>"$T/gen.err" >/dev/null || { cat "$T/gen.err"; fail "generate --prompt"; }
grep -q "^ditrun: text_encoder (CLIPTextModel) [0-9.]* s: [0-9]* tokens -> pooled_prompt_embeds$" "$T/gen.err" &&
  grep -q "^ditrun: text_encoder_2 (T5EncoderModel) [0-9.]* s: [0-9]* tokens -> prompt_embeds$" "$T/gen.err" ||
  { cat "$T/gen.err"; fail "no text encoder lines"; }
"$BIN/st_compare" "$T/l.safetensors" "$g" latents 1e-4
python3 tests/tools/psnr.py "$T/f.safetensors" "$g" frames 45 || fail "the image's PSNR is under 45 dB"
"$BIN/st_compare" "$T/f.safetensors" "$g" frames 1e-3
# The prompt matters.
"$BIN/ditrun" generate "$b" --prompt "a blue bird" "${loop[@]}" --out "$T/o.safetensors" --out-latents "$T/lo.safetensors" 2>/dev/null >/dev/null
if "$BIN/st_compare" "$T/lo.safetensors" "$g" latents 1e-2 >/dev/null 2>&1; then fail "the prompt is ignored"; fi
# The image decoder alone (ditrun decode) on the golden's latents.
"$BIN/ditrun" decode "$T/b/$vae" --latents "$g" --out "$T/d.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/d.safetensors" "$g" frames 1e-3

# True CFG: the negative prompt through both encoders, as FluxPipeline's true_cfg_scale.
restage "$g" "$T/cfg.safetensors" -latents latents_true_cfg=latents
"$BIN/ditrun" generate "$b" --prompt "$PROMPT" --negative-prompt "$NEG" --true-cfg "$CFG" "${loop[@]}" --out "$T/c.safetensors" \
  --out-latents "$T/lc.safetensors" 2>"$T/cfg.err" >/dev/null || { cat "$T/cfg.err"; fail "generate --true-cfg"; }
grep -q "tokens -> negative_pooled_prompt_embeds$" "$T/cfg.err" || { cat "$T/cfg.err"; fail "the negative prompt was not encoded"; }
"$BIN/st_compare" "$T/lc.safetensors" "$T/cfg.safetensors" latents 1e-4

# The same run to a PNG (signature, IHDR 64 x 64 RGB), its float image from the one decode.
"$BIN/ditrun" generate "$b" --prompt "$PROMPT" "${loop[@]}" --out "$T/i.png" --out-frames "$T/if.safetensors" 2>"$T/png.err" >/dev/null ||
  { cat "$T/png.err"; fail "generate --out PNG"; }
"$BIN/st_compare" "$T/if.safetensors" "$T/f.safetensors" frames 1e-6
python3 - "$T/i.png" "$W" "$H" <<'PY'
import struct, sys
b, W, H = open(sys.argv[1], "rb").read(), int(sys.argv[2]), int(sys.argv[3])
assert b[:8] == b"\x89PNG\r\n\x1a\n", b[:8]
assert b[12:16] == b"IHDR", b[12:16]
w, h, depth, color = struct.unpack(">IIBB", b[16:26])
assert (w, h, depth, color) == (W, H, 8, 2), (w, h, depth, color)
assert len(b) > 100, len(b)
PY

# Refusals.
bare=$("$BIN/ditc" compile "$d" "${shape[@]}" --stages transformer,vae -o "$T/bare" -q | tail -n1 | cut -d' ' -f3)
expect_fail "--prompt: bundle $(basename "$bare") has no text encoder stage making the generate argument 'prompt_embeds'" \
  "$BIN/ditrun" generate "$bare" --prompt "$PROMPT" "${loop[@]}" --out "$T/x.png"
one=$("$BIN/ditc" compile "$d" "${shape[@]}" --stages transformer,text_encoder -o "$T/one" -q | tail -n1 | cut -d' ' -f3)
expect_fail "has no text encoder stage making the generate argument 'prompt_embeds'" \
  "$BIN/ditrun" generate "$one" --prompt "$PROMPT" "${loop[@]}" --out "$T/x.safetensors"
novae=$("$BIN/ditc" compile "$d" "${shape[@]}" --stages transformer,text_encoder,text_encoder_2 -o "$T/novae" -q | tail -n1 | cut -d' ' -f3)
expect_fail "--prompt: bundle $(basename "$novae") has no vae_decoder stage" "$BIN/ditrun" generate "$novae" --prompt "$PROMPT" "${loop[@]}" \
  --out "$T/x.png"
mkdir "$T/notok2"
cp -r "$d"/* "$T/notok2/"
rm -r "$T/notok2/tokenizer_2"
expect_fail "stage text_encoder_2: $T/notok2/tokenizer_2: missing" "$BIN/ditc" compile "$T/notok2" "${shape[@]}" -o "$T/x"
expect_fail "--negative-prompt: FluxTransformer2DModel runs no negative branch at --true-cfg 1 (guidance-distilled" \
  "$BIN/ditrun" generate "$b" --prompt "$PROMPT" --negative-prompt "$NEG" "${loop[@]}" --out "$T/x.png"
expect_fail "--true-cfg 2: true CFG needs the negative prompt (--negative-prompt TEXT)" \
  "$BIN/ditrun" generate "$b" --prompt "$PROMPT" --true-cfg 2 "${loop[@]}" --out "$T/x.png"
expect_fail "--vae-chunk 2: AutoencoderKL decodes an image, it has no frames to decode in chunks" "$BIN/ditc" compile "$d" "${shape[@]}" \
  --vae-chunk 2 -o "$T/x"
expect_fail "--vae-budget 1: FluxTransformer2DModel's pipeline decodes whole images in one graph" "$BIN/ditc" compile "$d" "${shape[@]}" \
  --vae-budget 1 -o "$T/x"
expect_fail "--vae-tiles 2: FluxTransformer2DModel's pipeline decodes whole images in one graph (no windows)" "$BIN/ditc" compile "$d" "${shape[@]}" --vae-tiles 2 -o "$T/x"
echo "flux_prompt: ok"
