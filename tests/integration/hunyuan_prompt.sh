#!/usr/bin/env bash
# A tiny HunyuanVideo pipeline directory (tests/data/hunyuan_pipeline_tiny,
# make_goldens_hunyuan_pipeline.py) from a prompt to its final latents and its video: `ditc compile
# PIPELINE_DIR` compiles the transformer with its Llama text encoder (a Llama 3 byte-level BPE
# tokenizer; the pipeline's template, its first 95 tokens cropped after hidden_states[-3], every
# row kept and their mask handed to prompt_attention_mask: padding "masked"), its CLIP
# (pooled_prompt_embeds, at its tokenizer's 77) and its VAE decoder (AutoencoderKLHunyuanVideo, one
# graph over the whole video), and `ditrun generate --prompt --out-latents` (no --out: no decode)
# gives HunyuanVideoPipeline's latents within 1e-4 relative on the same initial latents; with --out
# an MP4 and, through --out-frames, the decoded frames, which after the video processor's
# postprocess are the pipeline's video within 1e-4 absolute and 80 dB PSNR (the latents agree to
# about 4e-6 and the tiny decoder's gain is modest: the frames differ by about 4e-6; the bound is
# 25x that and 40x below one 8-bit level of the written video). --vae-chunk is refused naming the
# VAE; a bundle compiled without the VAE stage refuses --out naming the stage.
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"
fail() { echo "FAIL: $*"; exit 1; }

d=tests/data/hunyuan_pipeline_tiny
g=$d/golden.safetensors
read -r F H W L STEPS G < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['text_len'], m['steps'], m['guidance'])")
PROMPT=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['prompt'])")

line=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$W" --text-len "$L" -o "$T/b" 2>"$T/compile.err" | tail -n1) ||
  { cat "$T/compile.err"; fail "compile"; }
b=${line##* }
[ "$(ls "$T/b" | wc -l)" = 4 ] || { ls -la "$T/b"; fail "expected four bundles (transformer, Llama, CLIP, VAE)"; }
"$BIN/ditrun" info "$b" >"$T/info"
grep -q "^stage      text_encoder [0-9a-f]* (llama_text, LlamaModel) -> prompt_embeds from hidden_states_selected, padding masked, its mask prompt_attention_mask, a prompt template whose first 95 tokens go$" "$T/info" &&
  grep -q "^stage      text_encoder_2 [0-9a-f]* (clip_text, CLIPTextModel) -> pooled_prompt_embeds from pooler_output, padding attended$" "$T/info" ||
  { cat "$T/info"; fail "the text encoders' feeds"; }
grep -q "^stage      vae_decoder  *[0-9a-f]* (hunyuan_vae, AutoencoderKLHunyuanVideo)$" "$T/info" && ! grep -q "vae_decoder_first" "$T/info" ||
  { cat "$T/info"; fail "one VAE decoder stage over the whole video"; }
te=$(awk '$1 == "stage" && $2 == "text_encoder" {print $3}' "$T/info")
"$BIN/ditrun" info "$T/b/$te" >"$T/te_info"
grep -q "^input      input_ids  *i32\[1,$((L + 95))\]$" "$T/te_info" && grep -q "^blob       tokenizer .* tokenizer.json$" "$T/te_info" ||
  { cat "$T/te_info"; fail "the Llama runs at --text-len + 95 with its tokenizer.json"; }
"$BIN/ditrun" generate "$b" --prompt "$PROMPT" --steps "$STEPS" --guidance "$G" --init-latents "$g" --out-latents "$T/l.safetensors" \
  2>"$T/gen.err" >/dev/null || { cat "$T/gen.err"; fail "generate --prompt --out-latents"; }
grep -q "tokens -> prompt_embeds and its mask prompt_attention_mask$" "$T/gen.err" || { cat "$T/gen.err"; fail "no mask made"; }
"$BIN/st_compare" "$T/l.safetensors" "$g" latents 1e-4

# The prompt to a video: the frames as the pipeline's.
"$BIN/ditrun" generate "$b" --prompt "$PROMPT" --steps "$STEPS" --guidance "$G" --init-latents "$g" --out "$T/v.mp4" \
  --out-frames "$T/f.safetensors" 2>"$T/gen.err" >/dev/null || { cat "$T/gen.err"; fail "generate --prompt --out"; }
[ -s "$T/v.mp4" ] || fail "no video written"
python3 tests/tools/video_frames.py "$T/f.safetensors" "$g" frames 1e-4 80
expect_fail "--vae-chunk: AutoencoderKLHunyuanVideo decodes the whole video in one graph" "$BIN/ditc" compile "$d" --frames "$F" \
  --height "$H" --width "$W" --text-len "$L" --vae-chunk 1 -o "$T/b"

# Without the VAE stage --out is refused.
line=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$W" --text-len "$L" --stages transformer,text_encoder,text_encoder_2 \
  -o "$T/nv" 2>"$T/compile.err" | tail -n1) || { cat "$T/compile.err"; fail "compile without the VAE"; }
b=${line##* }
if "$BIN/ditrun" generate "$b" --prompt "$PROMPT" --steps 1 --seed 1 --out "$T/r.mp4" 2>"$T/r.err"; then fail "--out without a VAE stage accepted"; fi
grep -q "has no vae_decoder stage" "$T/r.err" || { cat "$T/r.err"; fail "refusal message"; }
[ ! -e "$T/r.mp4" ] || fail "a refused generate wrote its output"
echo "hunyuan_prompt: ok"
