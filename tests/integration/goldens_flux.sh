#!/usr/bin/env bash
# FLUX.1 (dev: guidance embedding; schnell: none) from tiny diffusers pipelines against the pinned
# diffusers' fp32 CPU outputs (tests/data/make_goldens_flux.py), max relative error <= 1e-4:
# forwards at batch 2 and 1 (packed latents in and out, img_ids/txt_ids in the input file
# ignored: the rotary table follows from the shape), 4-step generates as FluxPipeline runs them
# (flow-match Euler with the scheduler config's dynamic shifting, t/1000, the raw guidance), with
# and without true CFG. Then: the manifest's generate section; the guidance flags' one meaning
# (--guidance ignored with a note by schnell); the schedule only from the pipeline (--shift and
# --sampler refused; a bare transformer folder compiles and runs forward, but generate asks for
# the pipeline); bf16 (t and guidance rounded as diffusers' `.to(bf16) * 1000`) against fp32 at
# values bf16 holds exactly; the sm_90 compile (no GPU needed); shapes refused by name.
set -euo pipefail
BIN=$1/bin
# T, restage, expect_fail, bf16_rounds_as_diffusers
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

for v in dev schnell; do
  d=tests/data/flux_${v}_tiny
  read -r H W L B GB STEPS G CFG < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['height'], m['width'], m['text_len'], m['batch'], m['generate_batch'], m['steps'], m['guidance'], m['true_cfg'])")
  c=(compile "$d" --height "$H" --width "$W" --text-len "$L" -o "$T/b" -q)
  for bb in "$B" 1; do
    suffix=""; [ "$bb" = "$B" ] || suffix=_b1
    one=$("$BIN/ditc" "${c[@]}" --batch "$bb" | tail -n1 | cut -d' ' -f3)
    "$BIN/ditrun" verify "$one" >/dev/null
    "$BIN/ditrun" forward "$one" --inputs "$d/forward_inputs$suffix.safetensors" --out "$T/f.safetensors" 2>/dev/null >/dev/null
    "$BIN/st_compare" "$T/f.safetensors" "$d/forward_output$suffix.safetensors" sample 1e-4
  done
  "$BIN/ditrun" info "$one" | grep -q "^input      guidance" && [ "$v" = schnell ] && { echo "schnell has a guidance input"; exit 1; }
  [ "$v" = dev ] && { "$BIN/ditrun" info "$one" | grep -q "^input      guidance  *f32\[1\]$" || { echo "dev lacks guidance [1]"; exit 1; }; }
  gen=$("$BIN/ditc" "${c[@]}" --batch "$GB" | tail -n1 | cut -d' ' -f3)
  python3 - "$gen/manifest.json" "$v" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["generate"]
assert g["latents"] == "hidden_states" and g["timestep"] == {"input": "timestep", "divisor": 1000}, g
assert [c["argument"] for c in g["conditions"]] == ["prompt_embeds", "pooled_prompt_embeds"], g
assert ("guidance" in g) == (sys.argv[2] == "dev"), g
s = g["schedule"]
assert s["sampler"] == "flow_match_euler" and s["sigmas"] == "one_to_1/n", s
assert (s["dynamic"] is not None) == (sys.argv[2] == "dev"), s
PY
  gi=$d/generate_inputs.safetensors
  restage "$gi" "$T/init.safetensors" latents=init_latents
  "$BIN/ditrun" generate "$gen" --prompt-embeds "$gi" --init-latents "$T/init.safetensors" --steps "$STEPS" --guidance "$G" \
    --out "$T/g.safetensors" 2>"$T/log"
  "$BIN/st_compare" "$T/g.safetensors" "$d/generate_output.safetensors" latents 1e-4
  if [ "$v" = schnell ]; then
    grep -q "note: --guidance $G ignored: FluxTransformer2DModel has no guidance embedding" "$T/log" || { cat "$T/log"; exit 1; }
  else
    # dev's default guidance is the pipeline's 3.5 and its default steps 28: the same run without the flags.
    "$BIN/ditrun" generate "$gen" --prompt-embeds "$gi" --init-latents "$T/init.safetensors" --out "$T/g28.safetensors" 2>"$T/log"
    grep -q "step 28/28" "$T/log" || { cat "$T/log"; echo "default steps are not 28"; exit 1; }
  fi
  "$BIN/ditrun" generate "$gen" --prompt-embeds "$gi" --negative-embeds "$gi" --true-cfg "$CFG" --init-latents "$T/init.safetensors" \
    --steps "$STEPS" --guidance "$G" --out "$T/g.safetensors" 2>/dev/null
  "$BIN/st_compare" "$T/g.safetensors" "$d/generate_cfg_output.safetensors" latents 1e-4
done

# Every topology against one rank (<= 1e-5) and the goldens: tensor parallelism (the single-stream
# output projection in two parts), context parallelism over the image tokens with the text whole on
# every rank (gather, Ulysses, ring), both, and cfg lanes; true CFG on cfg lanes in generate.
d=tests/data/flux_dev_tiny
one=$("$BIN/ditc" compile "$d" --height 64 --width 64 --batch 2 --text-len 8 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$one" --inputs "$d/forward_inputs.safetensors" --out "$T/one.safetensors" 2>/dev/null >/dev/null
for top in "--tp 2" "--cp 2 --cp-mode gather" "--cp 2 --cp-mode ulysses" "--cp 2 --cp-mode ring" "--cp 4 --cp-mode ring" \
  "--tp 2 --cp 2 --cp-mode ring" "--cfg-parallel --cp 2 --cp-mode ulysses"; do
  # shellcheck disable=SC2086
  tb=$("$BIN/ditc" compile "$d" --height 64 --width 64 --batch 2 --text-len 8 $top -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" forward "$tb" --inputs "$d/forward_inputs.safetensors" --out "$T/top.safetensors" 2>/dev/null >/dev/null
  echo "[$top] $("$BIN/st_compare" "$T/top.safetensors" "$T/one.safetensors" sample 1e-5)"
  "$BIN/st_compare" "$T/top.safetensors" "$d/forward_output.safetensors" sample 1e-4 >/dev/null
done
restage "$d/generate_inputs.safetensors" "$T/init.safetensors" latents=init_latents
lanes=$("$BIN/ditc" compile "$d" --height 64 --width 64 --text-len 8 --cfg-parallel -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" generate "$lanes" --prompt-embeds "$d/generate_inputs.safetensors" --negative-embeds "$d/generate_inputs.safetensors" \
  --true-cfg 2 --init-latents "$T/init.safetensors" --steps 4 --guidance 3.5 --out "$T/g.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/g.safetensors" "$d/generate_cfg_output.safetensors" latents 1e-4

gi=$d/generate_inputs.safetensors
gen=$("$BIN/ditc" compile "$d" --height 64 --width 64 --text-len 8 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
g=(generate "$gen" --prompt-embeds "$gi" --seed 1 --steps 2 --out "$T/x.safetensors")
expect_fail "--shift: a FluxTransformer2DModel bundle samples with its pipeline's scheduler config" "$BIN/ditrun" "${g[@]}" --shift 3
expect_fail "--sampler: a FluxTransformer2DModel bundle" "$BIN/ditrun" "${g[@]}" --sampler euler
expect_fail "--true-cfg 2: true CFG needs the negative prompt's embeddings (--negative-embeds)" "$BIN/ditrun" "${g[@]}" --true-cfg 2
expect_fail "--guidance-2 3: the bundle has one transformer" "$BIN/ditrun" "${g[@]}" --guidance-2 3
restage "$gi" "$T/nopooled.safetensors" pooled_prompt_embeds=other
expect_fail "no tensor named 'pooled_prompt_embeds'" "$BIN/ditrun" generate "$gen" --prompt-embeds "$T/nopooled.safetensors" --seed 1 \
  --steps 2 --out "$T/x.safetensors"
[ ! -e "$T/x.safetensors" ] || { echo "a refused generate left output"; exit 1; }
expect_fail "--cp 2: FluxTransformer2DModel's joint attention runs gather, ulysses and ring" "$BIN/ditc" compile "$d" --height 64 \
  --width 64 --text-len 8 --cp 2 --cp-mode usp --ulysses 2 -o "$T/b"
expect_fail "--frames 5: FluxTransformer2DModel makes images: leave --frames out" "$BIN/ditc" compile "$d" --frames 5 --height 64 \
  --width 64 --text-len 8 -o "$T/b"
expect_fail "--height 72: must be a positive multiple of 16 (VAE 8 x 2x2 packing)" "$BIN/ditc" compile "$d" --height 72 --width 64 \
  --text-len 8 -o "$T/b"
# A bare transformer folder: forward as the pipeline's, generate refused (no schedule).
bare=$("$BIN/ditc" compile "$d/transformer" --height 64 --width 64 --batch 2 --text-len 8 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$bare" --inputs "$d/forward_inputs.safetensors" --out "$T/f.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/f.safetensors" "$d/forward_output.safetensors" sample 1e-4
expect_fail "compile the pipeline directory (model_index.json)" "$BIN/ditrun" generate "$bare" --prompt-embeds "$gi" --seed 1 --steps 2 \
  --out "$T/x.safetensors"

# bf16 against fp32 where bf16 holds t/1000 * 1000 and the guidance * 1000 exactly (t 0.5 and 0.25,
# guidance 4 and 2): the rounding diffusers applies is then the identity.
restage "$d/forward_inputs.safetensors" "$T/exact.safetensors" timestep:0.5,0.25 guidance:4,2
f32=$("$BIN/ditc" compile "$d" --height 64 --width 64 --batch 2 --text-len 8 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
b16=$("$BIN/ditc" compile "$d" --height 64 --width 64 --batch 2 --text-len 8 --dtype bf16 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
# ... and at the golden's t = 0.8125 the bf16 graph embeds bf16(812.5) = 812, as diffusers does: not the fp32 result.
bf16_rounds_as_diffusers "$f32" "$b16" "$T/exact.safetensors" "$d/forward_inputs.safetensors" "$d/forward_output.safetensors" \
  "t = 0.8125"
g90=$("$BIN/ditc" compile "$d" --height 64 --width 64 --batch 2 --text-len 8 --dtype bf16 --target sm_90 -o "$T/g" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$g90" >/dev/null
echo "goldens_flux: ok"
