#!/usr/bin/env bash
# Qwen-Image from a tiny diffusers QwenImagePipeline against the pinned diffusers' fp32 CPU outputs
# (tests/data/make_goldens_qwen.py), max relative error <= 1e-4: forwards at batch 2 and 1 at 48x80
# px (a 3x5 packed token grid: odd sizes exercise the rotary centring) with the text masks'
# padding excluded from attention (valid prefixes 5 and 8 of 8, and 6), and without a mask;
# 4-step generates as QwenImagePipeline runs them (flow-match Euler with dynamic shifting and
# shift_terminal, t/1000, no guidance input), with and without true CFG (norm rescaled), with and
# without masks. Then: every topology (tp, cp gather/ulysses/ring, both, cfg lanes) against one
# rank and the goldens; the manifest's generate section; shapes and flags refused by name; bf16
# against fp32 at timesteps bf16 holds exactly (and not at one it rounds, as diffusers'
# `timestep.to(dtype)` does); the sm_90 compile (no GPU needed).
set -euo pipefail
BIN=$1/bin
# T, restage, expect_fail, bf16_rounds_as_diffusers
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"

d=tests/data/qwen_tiny
read -r H W L B GB STEPS CFG < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['height'], m['width'], m['text_len'], m['batch'], m['generate_batch'], m['steps'], m['true_cfg'])")
c=(compile "$d" --height "$H" --width "$W" --text-len "$L" -o "$T/b" -q)
fwd() { # bundle inputs expected
  "$BIN/ditrun" forward "$1" --inputs "$2" --out "$T/f.safetensors" 2>/dev/null >/dev/null
  "$BIN/st_compare" "$T/f.safetensors" "$3" sample 1e-4
}

one=$("$BIN/ditc" "${c[@]}" --batch "$B" | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$one" >/dev/null
"$BIN/ditrun" info "$one" | grep -q "^input      guidance" && { echo "Qwen-Image has no guidance input"; exit 1; }
fwd "$one" "$d/forward_inputs.safetensors" "$d/forward_output.safetensors"
# The mask as a bool tensor (safetensors BOOL), as torch saves one: read as the integers 0 and 1.
as_bool "$d/forward_inputs.safetensors" "$T/bool.safetensors" encoder_hidden_states_mask
fwd "$one" "$T/bool.safetensors" "$d/forward_output.safetensors"
one1=$("$BIN/ditc" "${c[@]}" --batch 1 | tail -n1 | cut -d' ' -f3)
fwd "$one1" "$d/forward_inputs_b1.safetensors" "$d/forward_output_b1.safetensors"
# Without a mask every text token is valid: a mask of ones.
ones() { python3 -c "print(','.join(['1'] * $1))"; }
restage "$d/forward_inputs.safetensors" "$T/nomask.safetensors" "encoder_hidden_states_mask:$(ones $((2 * L)))"
fwd "$one" "$T/nomask.safetensors" "$d/forward_output_nomask.safetensors"
# A mask that is not a prefix is refused by name where it is set.
restage "$d/forward_inputs.safetensors" "$T/holes.safetensors" "encoder_hidden_states_mask:1,1,0,1,1,0,0,0,$(ones "$L")"
expect_fail "encoder_hidden_states_mask" "$BIN/ditrun" forward "$one" --inputs "$T/holes.safetensors" --out "$T/x.safetensors"

gen=$("$BIN/ditc" "${c[@]}" --batch "$GB" | tail -n1 | cut -d' ' -f3)
python3 - "$gen/manifest.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["generate"]
assert g["latents"] == "hidden_states" and g["timestep"] == {"input": "timestep", "divisor": 1000}, g
assert "guidance" not in g and g["true_cfg"] == "norm" and g["steps"] == 50, g
assert [(c["argument"], c["input"]) for c in g["conditions"]] == [("prompt_embeds", "encoder_hidden_states"),
    ("prompt_embeds_mask", "encoder_hidden_states_mask")], g
s = g["schedule"]
assert s["sampler"] == "flow_match_euler" and s["sigmas"] == "one_to_1/n" and s["shift_terminal"] == 0.02, s
assert s["dynamic"]["image_seq_len"] == 15 and s["dynamic"]["max_image_seq_len"] == 8192, s
PY
gi=$d/generate_inputs.safetensors
restage "$gi" "$T/init.safetensors" latents=init_latents
restage "$gi" "$T/gi_nomask.safetensors" "prompt_embeds_mask:$(ones "$L")" "negative_prompt_embeds_mask:$(ones "$L")"
g=(generate "$gen" --init-latents "$T/init.safetensors" --steps "$STEPS")
"$BIN/ditrun" "${g[@]}" --prompt-embeds "$gi" --out "$T/g.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/g.safetensors" "$d/generate_output.safetensors" latents 1e-4
"$BIN/ditrun" "${g[@]}" --prompt-embeds "$gi" --negative-embeds "$gi" --true-cfg "$CFG" --out "$T/g.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/g.safetensors" "$d/generate_cfg_output.safetensors" latents 1e-4
"$BIN/ditrun" "${g[@]}" --prompt-embeds "$T/gi_nomask.safetensors" --out "$T/g.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/g.safetensors" "$d/generate_nomask_output.safetensors" latents 1e-4
"$BIN/ditrun" "${g[@]}" --prompt-embeds "$T/gi_nomask.safetensors" --negative-embeds "$T/gi_nomask.safetensors" --true-cfg "$CFG" \
  --out "$T/g.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/g.safetensors" "$d/generate_nomask_cfg_output.safetensors" latents 1e-4

# Every topology against one rank (<= 1e-5) and the goldens, the text masks padded: tensor
# parallelism, context parallelism over the image tokens with the text whole on every rank (15
# tokens: gather and ring over 3 or 5 ranks), both, and cfg lanes; true CFG on cfg lanes in generate.
"$BIN/ditrun" forward "$one" --inputs "$d/forward_inputs.safetensors" --out "$T/one.safetensors" 2>/dev/null >/dev/null
for top in "--tp 2" "--cp 3 --cp-mode gather" "--cp 3 --cp-mode ring" "--cp 5 --cp-mode ring" "--tp 2 --cp 3 --cp-mode ring" \
  "--cfg-parallel --tp 2 --cp 3 --cp-mode gather"; do
  # shellcheck disable=SC2086
  tb=$("$BIN/ditc" "${c[@]}" --batch "$B" $top | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" forward "$tb" --inputs "$d/forward_inputs.safetensors" --out "$T/top.safetensors" 2>/dev/null >/dev/null
  echo "[$top] $("$BIN/st_compare" "$T/top.safetensors" "$T/one.safetensors" sample 1e-5)"
  "$BIN/st_compare" "$T/top.safetensors" "$d/forward_output.safetensors" sample 1e-4 >/dev/null
done
lanes=$("$BIN/ditc" "${c[@]}" --batch "$GB" --cfg-parallel --cp 3 --cp-mode ring | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" generate "$lanes" --init-latents "$T/init.safetensors" --steps "$STEPS" --prompt-embeds "$gi" --negative-embeds "$gi" \
  --true-cfg "$CFG" --out "$T/g.safetensors" 2>/dev/null >/dev/null
"$BIN/st_compare" "$T/g.safetensors" "$d/generate_cfg_output.safetensors" latents 1e-4
# Ulysses needs heads / tp divisible by cp, and the 2 heads do not split 15 tokens' 3 or 5 ranks: at
# 64x80 px (4x5 tokens), against one rank on inputs of that shape (padded masks, valid 5 and 8).
python3 - "$T/u.safetensors" <<'PY'
import json, math, random, struct, sys
r = random.Random(7)
t = {"hidden_states": ("f", [2, 20, 16], None), "encoder_hidden_states": ("f", [2, 8, 32], None),
     "timestep": ("f", [2], [812.5, 347.25]), "encoder_hidden_states_mask": ("q", [2, 8], [1] * 5 + [0] * 3 + [1] * 8)}
hdr, data = {}, b""
for k, (fmt, shape, v) in t.items():
    v = v or [r.uniform(-2, 2) for _ in range(math.prod(shape))]
    raw = struct.pack("<%d%s" % (len(v), fmt), *v)
    hdr[k] = {"dtype": "F32" if fmt == "f" else "I64", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
u=(compile "$d" --height 64 --width 80 --text-len "$L" --batch 2 -o "$T/b" -q)
one_u=$("$BIN/ditc" "${u[@]}" | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$one_u" --inputs "$T/u.safetensors" --out "$T/one.safetensors" 2>/dev/null >/dev/null
for top in "--cp 2 --cp-mode ulysses" "--cfg-parallel --cp 2 --cp-mode ulysses"; do
  # shellcheck disable=SC2086
  tb=$("$BIN/ditc" "${u[@]}" $top | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" forward "$tb" --inputs "$T/u.safetensors" --out "$T/top.safetensors" 2>/dev/null >/dev/null
  echo "[$top, 64x80] $("$BIN/st_compare" "$T/top.safetensors" "$T/one.safetensors" sample 1e-5)"
done
# Layouts the shape or the heads do not allow, and those not built, refused by name.
expect_fail "--cp 2: the shape has 15 image tokens, which do not split into 2 equal parts" "$BIN/ditc" "${c[@]}" --cp 2 --cp-mode ring
expect_fail "--cp 3 --cp-mode ulysses: 2 heads per tensor-parallel rank are not divisible by 3" "$BIN/ditc" "${c[@]}" --cp 3 \
  --cp-mode ulysses
expect_fail "--tp 4: config.json num_attention_heads = 2 is not divisible by 4" "$BIN/ditc" "${c[@]}" --tp 4
expect_fail "--sp: QwenImageTransformer2DModel does not run sequence parallelism" "$BIN/ditc" "${c[@]}" --tp 2 --sp
expect_fail "--cp 6: QwenImageTransformer2DModel's joint attention runs gather, ulysses and ring" "$BIN/ditc" "${c[@]}" --cp 6 \
  --cp-mode usp --ulysses 2

# Refusals by name.
gr=(generate "$gen" --prompt-embeds "$T/gi_nomask.safetensors" --seed 1 --steps 2 --out "$T/x.safetensors")
expect_fail "--shift: a QwenImageTransformer2DModel bundle samples with its pipeline's scheduler config" "$BIN/ditrun" "${gr[@]}" --shift 3
expect_fail "--true-cfg 2: true CFG needs the negative prompt's embeddings (--negative-embeds)" "$BIN/ditrun" "${gr[@]}" --true-cfg 2
restage "$gi" "$T/nomaskarg.safetensors" -prompt_embeds_mask
expect_fail "no tensor named 'prompt_embeds_mask'" "$BIN/ditrun" generate "$gen" \
  --prompt-embeds "$T/nomaskarg.safetensors" --seed 1 --steps 2 --out "$T/y.safetensors"
"$BIN/ditrun" "${gr[@]}" --guidance 3 2>"$T/log" >/dev/null
grep -q "note: --guidance 3 ignored: QwenImageTransformer2DModel has no guidance embedding" "$T/log" || { cat "$T/log"; exit 1; }
[ -e "$T/x.safetensors" ] || { echo "generate wrote nothing"; exit 1; }
expect_fail "--frames 5: QwenImageTransformer2DModel makes images: leave --frames out" "$BIN/ditc" compile "$d" --frames 5 \
  --height "$H" --width "$W" --text-len 8 -o "$T/b"
expect_fail "--width 72: must be a positive multiple of 16 (VAE 8 x 2x2 packing)" "$BIN/ditc" compile "$d" --height "$H" --width 72 \
  --text-len 8 -o "$T/b"
expect_fail "--text-len 4095: text positions start at 2 (after the 3x5 image's half size) and the rotary table ends at 4096: at most 4094" \
  "$BIN/ditc" compile "$d" --height "$H" --width "$W" --text-len 4095 -o "$T/b"
# A bare transformer folder: forward as the pipeline's, generate refused (no schedule).
bare=$("$BIN/ditc" compile "$d/transformer" --height "$H" --width "$W" --batch 2 --text-len 8 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
fwd "$bare" "$d/forward_inputs.safetensors" "$d/forward_output.safetensors"
expect_fail "compile the pipeline directory (model_index.json)" "$BIN/ditrun" generate "$bare" --prompt-embeds "$gi" --seed 1 --steps 2 \
  --out "$T/x.safetensors"

# bf16 against fp32 where bf16 holds t exactly (0.5 and 0.25): `timestep.to(bf16)` is then the identity.
restage "$T/nomask.safetensors" "$T/exact.safetensors" timestep:0.5,0.25
b16=$("$BIN/ditc" "${c[@]}" --batch "$B" --dtype bf16 | tail -n1 | cut -d' ' -f3)
# ... and at the golden's t = 0.34725 the bf16 graph embeds bf16(0.34725) = 0.34765625, as diffusers does.
bf16_rounds_as_diffusers "$one" "$b16" "$T/exact.safetensors" "$T/nomask.safetensors" "$d/forward_output_nomask.safetensors" \
  "t = 0.34725"
g90=$("$BIN/ditc" "${c[@]}" --batch "$B" --dtype bf16 --target sm_90 -o "$T/g" | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$g90" >/dev/null
echo "goldens_qwen: ok"
