#!/usr/bin/env bash
# HunyuanVideo (text to video) from a tiny diffusers pipeline against the pinned diffusers' fp32 CPU
# outputs (tests/data/make_goldens_hunyuan.py), max relative error <= 1e-4: forwards at batch 2 and
# 1 with padded text masks (valid prefixes 5 and 8, then 3) and with every token valid; 4-step
# generates as HunyuanVideoPipeline runs them (flow-match Euler, sigmas linspace(1, 0, n+1)[:-1]
# with the scheduler's shift 7, t itself as the timestep, guidance x1000 embedded), with a padded
# prompt, with true CFG against a padded negative prompt, and with every token valid. Then: every
# topology (tp, cp gather/ulysses/ring, both, cfg lanes) against one rank and the goldens; the
# manifest's generate section; padded text tokens change nothing; the pipeline's defaults (50
# steps); bf16 against fp32 where bf16 holds the guidance exactly; the sm_90 compile (no GPU
# needed); shapes and the image-to-video variant refused by name.
set -euo pipefail
BIN=$1/bin
# T, restage, expect_fail, bf16_rounds_as_diffusers
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

d=tests/data/hunyuan_video_tiny
[ -f "$d/meta.json" ] || { echo "$d is missing: run tests/data/make_goldens_hunyuan.py (torch + the pinned diffusers)"; exit 1; }
read -r H W F L B GB STEPS G CFG < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['height'], m['width'], m['frames'], m['text_len'], m['batch'], m['generate_batch'], m['steps'], m['guidance'], m['true_cfg'])")
c=(compile "$d" --frames "$F" --height "$H" --width "$W" --text-len "$L" -o "$T/b" -q)
b2=$("$BIN/ditc" "${c[@]}" --batch "$B" | tail -n1 | cut -d' ' -f3)
b1=$("$BIN/ditc" "${c[@]}" --batch 1 | tail -n1 | cut -d' ' -f3)
for run in "$b2:" "$b1:_b1" "$b2:_full"; do
  bundle=${run%%:*} suffix=${run#*:}
  "$BIN/ditrun" verify "$bundle" >/dev/null
  "$BIN/ditrun" forward "$bundle" --inputs "$d/forward_inputs$suffix.safetensors" --out "$T/f.safetensors" 2>/dev/null >/dev/null
  "$BIN/st_compare" "$T/f.safetensors" "$d/forward_output$suffix.safetensors" sample 1e-4
done
"$BIN/ditrun" info "$b2" | grep -q "^input      guidance  *f32\[2\]$" || { echo "no guidance [2] input"; exit 1; }
"$BIN/ditrun" info "$b2" | grep -q "^input      encoder_attention_mask  *f32\[2,$L\]$" || { echo "no encoder_attention_mask [2,$L] input"; exit 1; }
# Padded text tokens are never keys: other values there leave the output as it was, bit for bit.
python3 - "$d/forward_inputs.safetensors" "$T/padded.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = bytearray(f.read())
def floats(k):
    a, b = h[k]["data_offsets"]; return a, list(struct.unpack("<%df" % ((b - a) // 4), body[a:b]))
ma, mask = floats("encoder_attention_mask"); ea, emb = floats("encoder_hidden_states")
width = len(emb) // len(mask)
emb = [v if mask[i // width] else 1e3 * (i % 7 - 3) for i, v in enumerate(emb)]
body[ea:ea + 4 * len(emb)] = struct.pack("<%df" % len(emb), *emb)
open(sys.argv[2], "wb").write(struct.pack("<Q", n) + json.dumps(h, separators=(",", ":")).encode().ljust(n) + bytes(body))
PY
"$BIN/ditrun" forward "$b2" --inputs "$d/forward_inputs.safetensors" --out "$T/f.safetensors" 2>/dev/null >/dev/null
"$BIN/ditrun" forward "$b2" --inputs "$T/padded.safetensors" --out "$T/p.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/p.safetensors" "$T/f.safetensors" sample 0
# The same mask as a bool tensor (safetensors BOOL), as torch saves one: the same output, bit for bit.
as_bool "$d/forward_inputs.safetensors" "$T/bool.safetensors" encoder_attention_mask
"$BIN/ditrun" forward "$b2" --inputs "$T/bool.safetensors" --out "$T/bool_out.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/bool_out.safetensors" "$T/f.safetensors" sample 0

gen=$("$BIN/ditc" "${c[@]}" --batch "$GB" | tail -n1 | cut -d' ' -f3)
python3 - "$gen/manifest.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["generate"]
assert g["latents"] == "hidden_states" and g["timestep"] == {"input": "timestep", "divisor": 1, "dtype": "f32"}, g
assert g["guidance"] == {"input": "guidance", "scale": 1000, "default": 6}, g
assert g["steps"] == 50, g
assert [c["argument"] for c in g["conditions"]] == ["prompt_embeds", "prompt_attention_mask", "pooled_prompt_embeds"], g
assert g["true_cfg"] == "plain", g
s = g["schedule"]
assert s["sampler"] == "flow_match_euler" and s["sigmas"] == "one_to_zero" and s["shift"] == 7 and s["dynamic"] is None, s
PY
gi=$d/generate_inputs.safetensors
restage "$gi" "$T/init.safetensors" latents=init_latents
g=(generate "$gen" --prompt-embeds "$gi" --init-latents "$T/init.safetensors" --steps "$STEPS" --guidance "$G")
"$BIN/ditrun" "${g[@]}" --out "$T/g.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/g.safetensors" "$d/generate_output.safetensors" latents 1e-4
"$BIN/ditrun" "${g[@]}" --negative-embeds "$gi" --true-cfg "$CFG" --out "$T/g.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/g.safetensors" "$d/generate_cfg_output.safetensors" latents 1e-4
restage "$gi" "$T/full.safetensors" "prompt_attention_mask:$(python3 -c "print(','.join(['1'] * $L))")"
"$BIN/ditrun" generate "$gen" --prompt-embeds "$T/full.safetensors" --init-latents "$T/init.safetensors" --steps "$STEPS" \
  --guidance "$G" --out "$T/g.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/g.safetensors" "$d/generate_full_output.safetensors" latents 1e-4
# The pipeline's defaults: 50 steps at guidance 6.
"$BIN/ditrun" generate "$gen" --prompt-embeds "$gi" --init-latents "$T/init.safetensors" --out "$T/g50.safetensors" 2>"$T/log"
grep -q "step 50/50" "$T/log" || { cat "$T/log"; echo "default steps are not 50"; exit 1; }

# Every topology against one rank (<= 1e-5) and the goldens, the text masks padded: tensor
# parallelism (the single-stream output projection in two parts, the token refiner replicated),
# context parallelism over the 12 image tokens with the text whole on every rank (gather, Ulysses,
# ring), both, and cfg lanes; true CFG on cfg lanes in generate.
"$BIN/ditrun" forward "$b2" --inputs "$d/forward_inputs.safetensors" --out "$T/one.safetensors" 2>/dev/null >/dev/null
for top in "--tp 2" "--cp 2 --cp-mode gather" "--cp 2 --cp-mode ulysses" "--cp 2 --cp-mode ring" "--cp 4 --cp-mode ring" \
  "--tp 2 --cp 2 --cp-mode ring" "--tp 2 --cp 3 --cp-mode gather" "--cfg-parallel --cp 2 --cp-mode ulysses"; do
  # shellcheck disable=SC2086
  tb=$("$BIN/ditc" "${c[@]}" --batch "$B" $top | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" forward "$tb" --inputs "$d/forward_inputs.safetensors" --out "$T/top.safetensors" 2>/dev/null >/dev/null
  echo "[$top] $("$BIN/st_compare" "$T/top.safetensors" "$T/one.safetensors" sample 1e-5)"
  "$BIN/st_compare" "$T/top.safetensors" "$d/forward_output.safetensors" sample 1e-4 >/dev/null
done
lanes=$("$BIN/ditc" "${c[@]}" --batch "$GB" --cfg-parallel --cp 2 --cp-mode ring | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" generate "$lanes" --prompt-embeds "$gi" --negative-embeds "$gi" --true-cfg "$CFG" --init-latents "$T/init.safetensors" \
  --steps "$STEPS" --guidance "$G" --out "$T/g.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/g.safetensors" "$d/generate_cfg_output.safetensors" latents 1e-4

gx=(generate "$gen" --prompt-embeds "$gi" --seed 1 --steps 2 --out "$T/x.safetensors")
expect_fail "--shift: a HunyuanVideoTransformer3DModel bundle samples with its pipeline's scheduler config" "$BIN/ditrun" "${gx[@]}" --shift 3
expect_fail "--true-cfg 2: true CFG needs the negative prompt's embeddings (--negative-embeds)" "$BIN/ditrun" "${gx[@]}" --true-cfg 2
restage "$gi" "$T/nomask.safetensors" prompt_attention_mask=other
expect_fail "no tensor named 'prompt_attention_mask'" "$BIN/ditrun" generate "$gen" --prompt-embeds "$T/nomask.safetensors" --seed 1 \
  --steps 2 --out "$T/x.safetensors"
[ ! -e "$T/x.safetensors" ] || { echo "a refused generate left output"; exit 1; }
# Layouts the shape or the heads do not allow, and those not built, refused by name.
expect_fail "--cp 5: the shape has 12 image tokens, which do not split into 5 equal parts" "$BIN/ditc" "${c[@]}" --cp 5 --cp-mode ring
expect_fail "--cp 2 --cp-mode ulysses: 1 heads per tensor-parallel rank are not divisible by 2" "$BIN/ditc" "${c[@]}" --tp 2 --cp 2 \
  --cp-mode ulysses
expect_fail "--sp: HunyuanVideoTransformer3DModel does not run sequence parallelism" "$BIN/ditc" "${c[@]}" --tp 2 --sp
expect_fail "--cp 4: HunyuanVideoTransformer3DModel's joint attention runs gather, ulysses and ring" "$BIN/ditc" "${c[@]}" --cp 4 \
  --cp-mode usp --ulysses 2
expect_fail "--frames 6: HunyuanVideoTransformer3DModel needs frames = 4*k + 1 (e.g. 5)" "$BIN/ditc" compile "$d" --frames 6 \
  --height 48 --width 32 --text-len 8 -o "$T/b"
expect_fail "compile needs --frames: HunyuanVideoTransformer3DModel makes videos" "$BIN/ditc" compile "$d" --height 48 --width 32 \
  --text-len 8 -o "$T/b"
expect_fail "--height 40: must be a positive multiple of 16 (VAE 8 x patch 2)" "$BIN/ditc" compile "$d" --frames 5 --height 40 \
  --width 32 --text-len 8 -o "$T/b"
expect_fail "--width 24: must be a positive multiple of 16 (VAE 8 x patch 2)" "$BIN/ditc" compile "$d" --frames 5 --height 48 \
  --width 24 --text-len 8 -o "$T/b"
# The image-to-video variant is refused by name.
cp -r "$d" "$T/i2v"
python3 - "$T/i2v/transformer/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["image_condition_type"] = "latent_concat"; json.dump(c, open(sys.argv[1], "w"))
PY
expect_fail "field 'image_condition_type' = \"latent_concat\": the image-to-video HunyuanVideo models are not supported" \
  "$BIN/ditc" compile "$T/i2v" --frames 5 --height 48 --width 32 --text-len 8 -o "$T/b"
# A scheduler with dynamic shifting: the pipeline passes no mu.
python3 - "$T/i2v/transformer/config.json" "$T/i2v/scheduler/scheduler_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["image_condition_type"] = None; json.dump(c, open(sys.argv[1], "w"))
s = json.load(open(sys.argv[2])); s["use_dynamic_shifting"] = True; json.dump(s, open(sys.argv[2], "w"))
PY
expect_fail "field 'use_dynamic_shifting' = true: HunyuanVideoPipeline passes no mu" \
  "$BIN/ditc" compile "$T/i2v" --frames 5 --height 48 --width 32 --text-len 8 -o "$T/b"

# bf16 against fp32 where the rounding diffusers applies is the identity: the guidance (held in the
# model dtype) at values bf16 holds exactly (4000, 2000); the timestep stays fp32 in both.
restage "$d/forward_inputs.safetensors" "$T/exact.safetensors" guidance:4000,2000
b16=$("$BIN/ditc" "${c[@]}" --batch "$B" --dtype bf16 | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$b2" --inputs "$T/exact.safetensors" --out "$T/f32.safetensors" 2>/dev/null >/dev/null
"$BIN/ditrun" forward "$b16" --inputs "$T/exact.safetensors" --out "$T/b16.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/b16.safetensors" "$T/f32.safetensors" sample 2e-2 0.9999
g90=$("$BIN/ditc" "${c[@]}" --batch "$B" --dtype bf16 --target sm_90 | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$g90" >/dev/null
echo "goldens_hunyuan: ok"
