#!/usr/bin/env bash
# A whole tiny Qwen-Image pipeline directory (tests/data/qwen_pipeline_tiny,
# make_goldens_qwen_pipeline.py) from a prompt to a PNG: `ditc compile PIPELINE_DIR` compiles the
# transformer with its Qwen2.5-VL text encoder (its tokenizer a Qwen2 byte-level BPE; run at
# --text-len plus the template's 34 dropped tokens) and its AutoencoderKLQwenImage decoder (one
# graph over the image), and `ditrun generate --prompt --negative-prompt --true-cfg` puts each
# prompt into QwenImagePipeline's template, drops the template's first 34 rows, zeroes the rows
# past the prompt and hands their mask to prompt_embeds_mask, then runs the loop with the
# norm-rescaled true CFG and the decoder: the final latents within 1e-4 relative and the image
# >= 45 dB PSNR of diffusers' on the same initial latents; the same run to a PNG; a refusal by name.
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"
fail() { echo "FAIL: $*"; exit 1; }

d=tests/data/qwen_pipeline_tiny
g=$d/golden.safetensors
read -r H W L STEPS CFG < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['height'], m['width'], m['text_len'], m['steps'], m['true_cfg'])")
PROMPT=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['prompt'])")
NEG=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['negative_prompt'])")

line=$("$BIN/ditc" compile "$d" --height "$H" --width "$W" --text-len "$L" -o "$T/b" 2>"$T/compile.err" | tail -n1) ||
  { cat "$T/compile.err"; fail "compile"; }
b=${line##* }
[ "$(ls "$T/b" | wc -l)" = 3 ] || { ls -la "$T/b"; fail "expected three bundles (transformer, text encoder, VAE decoder)"; }
"$BIN/ditrun" info "$b" >"$T/info"
grep -q "^schema     1.7$" "$T/info" || { cat "$T/info"; fail "expected schema 1.7 with the stage's template"; }
grep -q "^stage      text_encoder [0-9a-f]* (qwen2_5_vl_text, Qwen2_5_VLForConditionalGeneration) -> prompt_embeds from hidden_states_selected, padding zeroed, its mask prompt_embeds_mask, a prompt template whose first 34 tokens go$" "$T/info" ||
  { cat "$T/info"; fail "the text encoder's feed"; }
te=$(awk '$1 == "stage" && $2 == "text_encoder" {print $3}' "$T/info")
"$BIN/ditrun" info "$T/b/$te" >"$T/te_info"
grep -q "^input      input_ids  *i32\[1,$((L + 34))\]$" "$T/te_info" && grep -q "^blob       tokenizer .* vocab.json$" "$T/te_info" ||
  { cat "$T/te_info"; fail "the text encoder runs at --text-len + 34 with its tokenizer's files"; }
gen=(--prompt "$PROMPT" --negative-prompt "$NEG" --true-cfg "$CFG" --steps "$STEPS" --init-latents "$g")
"$BIN/ditrun" generate "$b" "${gen[@]}" --out "$T/f.safetensors" --out-latents "$T/l.safetensors" 2>"$T/gen.err" >/dev/null ||
  { cat "$T/gen.err"; fail "generate --prompt"; }
grep -q "tokens -> prompt_embeds and its mask prompt_embeds_mask$" "$T/gen.err" || { cat "$T/gen.err"; fail "no mask made"; }
"$BIN/st_compare" "$T/l.safetensors" "$g" latents 1e-4
python3 tests/tools/psnr.py "$T/f.safetensors" "$g" frames 45
"$BIN/ditrun" generate "$b" "${gen[@]}" --out "$T/i.png" 2>"$T/gen.err" >/dev/null || { cat "$T/gen.err"; fail "generate --out PNG"; }
head -c 8 "$T/i.png" | od -An -tx1 | grep -q "89 50 4e 47" || fail "no PNG written"
# A negative prompt without true CFG is refused (QwenImagePipeline ignores it at true_cfg_scale 1).
if "$BIN/ditrun" generate "$b" --prompt "$PROMPT" --negative-prompt "$NEG" --steps 1 --seed 1 --out "$T/r.png" 2>"$T/r.err"; then
  fail "a negative prompt without --true-cfg accepted"
fi
grep -q -- "--negative-prompt: QwenImageTransformer2DModel runs no negative branch at --true-cfg 1" "$T/r.err" || { cat "$T/r.err"; fail "refusal message"; }
if "$BIN/ditrun" generate "$b" --prompt "$PROMPT" --image tests/data/wan22_pipeline_tiny/i2v_image.png --steps 1 --seed 1 --out "$T/r.png" \
  2>"$T/r.err"; then fail "--image on an image model accepted"; fi
grep -q -- "--image: only Wan bundles take it" "$T/r.err" || { cat "$T/r.err"; fail "--image refusal message"; }
[ ! -e "$T/r.png" ] || fail "a refused generate wrote its output"
echo "qwen_prompt: ok"
