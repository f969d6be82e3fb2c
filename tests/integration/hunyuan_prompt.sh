#!/usr/bin/env bash
# A tiny HunyuanVideo pipeline directory (tests/data/hunyuan_pipeline_tiny,
# make_goldens_hunyuan_pipeline.py) from a prompt to its final latents and its video: `ditc compile
# PIPELINE_DIR` compiles the transformer with its Llama text encoder (a Llama 3 byte-level BPE
# tokenizer; the pipeline's template, its first 95 tokens cropped after hidden_states[-3], every
# row kept and their mask handed to prompt_attention_mask: padding "masked"), its CLIP
# (pooled_prompt_embeds, at its tokenizer's 77) and its VAE decoder (AutoencoderKLHunyuanVideo: the
# golden's 17 frames are five latent frames, more than the four diffusers decodes whole, so two
# graphs decoding framewise, windows of five latent frames at 0 and of two at 3), and `ditrun
# generate --prompt --out-latents` (no --out: no decode) gives HunyuanVideoPipeline's latents within
# 1e-4 relative on the same initial latents; with --out an MP4 and, through --out-frames, the
# decoded frames (the windows blended as diffusers' default decode blends them), which after the
# video processor's postprocess are the pipeline's video within 1e-4 absolute and 80 dB PSNR (ours: latents
# within 5.5e-6, frames within 5e-6, 121 dB);
# ditrun decode on the pipeline's bundle and on the two window bundles gives generate's frames, the
# whole-video graph others. At 5 frames (two latent frames) the VAE is one graph over the whole
# video. --vae-chunk is refused naming the VAE; a bundle compiled without the VAE stage refuses
# --out naming the stage.
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
[ "$(ls "$T/b" | wc -l)" = 5 ] || { ls -la "$T/b"; fail "expected five bundles (transformer, Llama, CLIP, the VAE's window and last window)"; }
grep -q "^ditc: stage vae: 5 latent frames decode framewise, in windows of 5 every 3 (the last of 2)$" "$T/compile.err" ||
  { cat "$T/compile.err"; fail "no framewise note"; }
"$BIN/ditrun" info "$b" >"$T/info"
grep -q "^stage      text_encoder [0-9a-f]* (llama_text, LlamaModel) -> prompt_embeds from hidden_states_selected, padding masked, its mask prompt_attention_mask, a prompt template whose first 95 tokens go$" "$T/info" &&
  grep -q "^stage      text_encoder_2 [0-9a-f]* (clip_text, CLIPTextModel) -> pooled_prompt_embeds from pooler_output, padding attended$" "$T/info" ||
  { cat "$T/info"; fail "the text encoders' feeds"; }
grep -q "^schema     1.8$" "$T/info" &&
  grep -q "^stage      vae_decoder  *[0-9a-f]* (hunyuan_vae, AutoencoderKLHunyuanVideo), in windows every 3 latent frames$" "$T/info" &&
  grep -q "^stage      vae_decoder_last [0-9a-f]* (hunyuan_vae, AutoencoderKLHunyuanVideo)$" "$T/info" && ! grep -q "vae_decoder_first" "$T/info" ||
  { cat "$T/info"; fail "the VAE's window stages"; }
win=$T/b/$(awk '$1 == "stage" && $2 == "vae_decoder" {print $3}' "$T/info")
last=$T/b/$(awk '$1 == "stage" && $2 == "vae_decoder_last" {print $3}' "$T/info")
"$BIN/ditrun" info "$win" | grep -q "^input      latents  *f32\[1,4,5,$((H / 8)),$((W / 8))\]$" &&
  "$BIN/ditrun" info "$last" | grep -q "^input      latents  *f32\[1,4,2,$((H / 8)),$((W / 8))\]$" || fail "the window graphs take 5 and 2 latent frames"
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

# The same decode by ditrun decode, on the pipeline's bundle and on the window bundles; the
# whole-video graph decodes otherwise (the windows are in effect).
"$BIN/ditrun" decode "$b" --latents "$T/l.safetensors" --out "$T/wd.safetensors" 2>/dev/null >/dev/null
"$BIN/ditrun" decode "$win" --last "$last" --window-stride 3 --latents "$T/l.safetensors" --out "$T/ws.safetensors" 2>/dev/null >/dev/null
whole=$("$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" -o "$T/w" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" decode "$whole" --latents "$T/l.safetensors" --out "$T/wo.safetensors" 2>/dev/null >/dev/null
python3 - "$T/f.safetensors" "$T/wd.safetensors" "$T/ws.safetensors" "$T/wo.safetensors" "$F" "$H" "$W" <<'PY'
import json, struct, sys
def load(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
    v = h["frames"]; a, b = v["data_offsets"]
    return v["shape"], body[a:b]
(sg, g), (sd, d), (ss, s), (so, o) = map(load, sys.argv[1:5])
assert sg == [1, 3] + [int(x) for x in sys.argv[5:8]], sg
assert sd == sg and d == g, "ditrun decode on the pipeline's bundle decodes otherwise than generate"
assert ss == sg and s == g, "ditrun decode on the stage bundles decodes otherwise than generate"
assert so == sg and o != g, "the whole-video graph decodes as the windows do: the windows are not in effect"
print("generate's frames are the windows' decode, not the whole video's")
PY
expect_fail "a pipeline's bundle decodes with its own stages: give no --first, --head, --last or --window-stride" \
  "$BIN/ditrun" decode "$b" --window-stride 3 --latents "$T/l.safetensors" --out "$T/x.safetensors"

# Two latent frames (5 frames, diffusers' whole decode): one VAE graph over the whole video.
line=$("$BIN/ditc" compile "$d" --frames 5 --height "$H" --width "$W" --text-len "$L" -o "$T/f5" 2>"$T/compile.err" | tail -n1) ||
  { cat "$T/compile.err"; fail "compile at 5 frames"; }
"$BIN/ditrun" info "${line##* }" >"$T/info5"
grep -q "^stage      vae_decoder  *[0-9a-f]* (hunyuan_vae, AutoencoderKLHunyuanVideo)$" "$T/info5" && ! grep -q "vae_decoder_last" "$T/info5" &&
  [ "$(ls "$T/f5" | wc -l)" = 4 ] || { cat "$T/info5"; fail "one VAE decoder stage over the whole video at 5 frames"; }

# Without the VAE stage --out is refused.
line=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$W" --text-len "$L" --stages transformer,text_encoder,text_encoder_2 \
  -o "$T/nv" 2>"$T/compile.err" | tail -n1) || { cat "$T/compile.err"; fail "compile without the VAE"; }
b=${line##* }
if "$BIN/ditrun" generate "$b" --prompt "$PROMPT" --steps 1 --seed 1 --out "$T/r.mp4" 2>"$T/r.err"; then fail "--out without a VAE stage accepted"; fi
grep -q "has no vae_decoder stage" "$T/r.err" || { cat "$T/r.err"; fail "refusal message"; }
[ ! -e "$T/r.mp4" ] || fail "a refused generate wrote its output"
echo "hunyuan_prompt: ok"
