#!/usr/bin/env bash
# Image-to-video generate against diffusers' WanImageToVideoPipeline (fp32, CPU, max relative
# error <= 1e-4 on the final latents): Wan2.1-I2V (latents ++ first-frame mask ++ image
# latents, image embeddings as encoder_hidden_states_image), Wan2.2-I2V-A14B (the same on two
# experts, each step's expert as the pipeline's), Wan2.2-TI2V (per-token timesteps; WanPipeline's
# text-to-video too); and every refusal of conditioning inputs that do not fit the bundle: a
# precise message, a non-zero exit, no output written.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# A safetensors file of one f32 (or i64) tensor filled with 0.5: path name dtype dims...
st() {
  python3 - "$@" <<'PY'
import json, struct, sys
path, name, dt = sys.argv[1:4]
dims = [int(x) for x in sys.argv[4:]]
n = 1
for d in dims: n *= d
size = 4 if dt == "F32" else 8
hdr = json.dumps({name: {"dtype": dt, "shape": dims, "data_offsets": [0, size * n]}}).encode()
hdr += b" " * (-len(hdr) % 8)
body = struct.pack("<%df" % n, *([0.5] * n)) if dt == "F32" else struct.pack("<%dq" % n, *([1] * n))
open(path, "wb").write(struct.pack("<Q", len(hdr)) + hdr + body)
PY
}
# refuse "expected message part" generate-args...: fails, says it, writes nothing.
refuse() {
  local want=$1; shift
  rm -f "$T/bad.safetensors"
  if "$BIN/ditrun" generate "$@" --out "$T/bad.safetensors" 2>"$T/err" >/dev/null; then echo "generate accepted $*"; exit 1; fi
  grep -qF -- "$want" "$T/err" || { echo "refusal of $* does not say '$want':"; cat "$T/err"; exit 1; }
  [ ! -e "$T/bad.safetensors" ] || { echo "a refused generate wrote its output ($*)"; exit 1; }
}
meta() { python3 -c "import json, sys; m=json.load(open('$1/meta.json')); print(*[m[k] for k in sys.argv[1:]])" "${@:2}"; }

# ---- Wan2.1-I2V: 36 = 16 + 4 + 16 channels, 5 image tokens, 512 text tokens.
d=tests/data/wan21_i2v_tiny
read -r F H W L N GB STEPS G S < <(meta "$d" frames height width text_len image_tokens generate_batch steps guidance shift)
c21=(compile "$d/model" --frames "$F" --height "$H" --width "$W" --text-len "$L" --image-len "$N" -o "$T/b" -q)
b21=$("$BIN/ditc" "${c21[@]}" --batch "$GB" | tail -n1 | cut -d' ' -f3)
gi="$d/generate_inputs.safetensors"
run21=(--prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps "$STEPS" --guidance "$G" --shift "$S" --sampler unipc)
"$BIN/ditrun" generate "$b21" "${run21[@]}" --image-latents "$gi" --image-embeds "$gi" --out "$T/g21.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/g21.safetensors" "$d/generate_unipc.safetensors" latents 1e-4
# The conditioning is used: other image latents or embeddings change the result.
st "$T/il.safetensors" image_latents F32 1 16 3 4 6
st "$T/ie.safetensors" image_embeds F32 1 "$N" 20
python3 -c "import json,struct; f=open('$gi','rb'); n=struct.unpack('<Q',f.read(8))[0]; h=json.loads(f.read(n)); print(h['image_embeds']['shape'], h['image_latents']['shape'])" > "$T/shapes"
grep -qF "[1, $N, 20] [1, 16, 3, 4, 6]" "$T/shapes" || { echo "unexpected golden input shapes: $(cat "$T/shapes")"; exit 1; }
for other in "--image-latents $T/il.safetensors --image-embeds $gi" "--image-latents $gi --image-embeds $T/ie.safetensors"; do
  # shellcheck disable=SC2086
  "$BIN/ditrun" generate "$b21" "${run21[@]}" $other --out "$T/o.safetensors" 2>/dev/null
  if "$BIN/st_compare" "$T/o.safetensors" "$d/generate_unipc.safetensors" latents 1e-4 >/dev/null 2>&1; then
    echo "generate ignores its conditioning ($other)"; exit 1
  fi
done
# A batch-2 bundle takes the batch-1 image inputs for both items: with each item's text and
# noise those of the golden, both items' latents are the golden's.
python3 - "$gi" "$d/generate_unipc.safetensors" "$T/in2.safetensors" "$T/want2.safetensors" <<'PY'
import json, struct, sys
def read(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); base = 8 + n
    out = {}
    for k, e in h.items():
        if k == "__metadata__": continue
        a, b = e["data_offsets"]; f.seek(base + a); out[k] = (e["dtype"], e["shape"], f.read(b - a))
    return out
def write(p, ts):
    hdr, off, body = {}, 0, b""
    for k, (dt, shape, data) in ts.items():
        hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}; off += len(data); body += data
    h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
    open(p, "wb").write(struct.pack("<Q", len(h)) + h + body)
def twice(t): return (t[0], [2] + t[1][1:], t[2] + t[2])
i, g = read(sys.argv[1]), read(sys.argv[2])
write(sys.argv[3], {k: twice(i[k]) for k in ("prompt_embeds", "negative_prompt_embeds", "init_latents")})
write(sys.argv[4], {"latents": twice(g["latents"])})
PY
b21b=$("$BIN/ditc" "${c21[@]}" --batch 2 | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" generate "$b21b" --prompt-embeds "$T/in2.safetensors" --negative-embeds "$T/in2.safetensors" --init-latents "$T/in2.safetensors" \
  --steps "$STEPS" --guidance "$G" --shift "$S" --image-latents "$gi" --image-embeds "$gi" --out "$T/g2.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/g2.safetensors" "$T/want2.safetensors" latents 1e-4
# Parallel topologies feed every rank and lane the same conditioning.
for top in "--cfg-parallel" "--tp 2" "--cp 2 --cp-mode gather"; do
  # shellcheck disable=SC2086
  bp=$("$BIN/ditc" "${c21[@]}" --batch "$GB" $top | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" generate "$bp" "${run21[@]}" --image-latents "$gi" --image-embeds "$gi" --out "$T/gp.safetensors" 2>/dev/null
  echo "== $top"
  "$BIN/st_compare" "$T/gp.safetensors" "$d/generate_unipc.safetensors" latents 1e-4
done

# ---- Wan2.2-I2V-A14B: the same concatenation on two experts, switched at the boundary.
d=tests/data/wan22_i2v_a14b_tiny
read -r F H W L GB STEPS G G2 S < <(meta "$d" frames height width text_len generate_batch steps guidance guidance_2 shift)
ba=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$W" --text-len "$L" --batch "$GB" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
ga="$d/generate_inputs.safetensors"
runa=(--prompt-embeds "$ga" --negative-embeds "$ga" --init-latents "$ga" --steps "$STEPS" --guidance "$G" --guidance-2 "$G2" --shift "$S" --sampler unipc)
"$BIN/ditrun" generate "$ba" "${runa[@]}" --image-latents "$ga" --out "$T/ga.safetensors" 2>"$T/ga.err"
"$BIN/st_compare" "$T/ga.safetensors" "$d/generate_unipc.safetensors" latents 1e-4
python3 - "$d/generate_unipc.safetensors" "$T/ga.err" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
a, b = h["expert"]["data_offsets"]; f.seek(8 + n + a)
want = ["transformer_2" if x else "transformer" for x in struct.unpack("<%dq" % ((b - a) // 8), f.read(b - a))]
got = [l.split()[l.split().index("expert") + 1] for l in open(sys.argv[2]) if l.startswith("ditrun: step ")]
if got != want: sys.exit("per-step experts %s, diffusers used %s" % (got, want))
PY
refuse "generate needs --image-latents with a tensor 'image_latents' [1, 16, 3, 4, 6]" "$ba" "${runa[@]}"
refuse "the bundle has no 'encoder_hidden_states_image' input" "$ba" "${runa[@]}" --image-latents "$ga" --image-embeds "$gi"

# ---- Wan2.2-TI2V-5B: per-token timesteps; text-to-video all t, image-to-video the first
# frame held to the image latents with its tokens at 0.
d=tests/data/wan22_ti2v_tiny
read -r F H W L GB STEPS G S < <(meta "$d" frames height width text_len generate_batch steps guidance shift)
ct=(compile "$d" --frames "$F" --height "$H" --width "$W" --text-len "$L" -o "$T/b" -q)
bt5=$("$BIN/ditc" "${ct[@]}" --batch "$GB" | tail -n1 | cut -d' ' -f3)
g5="$d/generate_inputs.safetensors"
run5=(--prompt-embeds "$g5" --negative-embeds "$g5" --init-latents "$g5" --steps "$STEPS" --guidance "$G" --shift "$S" --sampler unipc)
"$BIN/ditrun" generate "$bt5" "${run5[@]}" --out "$T/t2v.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/t2v.safetensors" "$d/generate_t2v_unipc.safetensors" latents 1e-4
for top in "" "--cfg-parallel"; do
  # shellcheck disable=SC2086
  bp=$("$BIN/ditc" "${ct[@]}" --batch "$GB" $top | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" generate "$bp" "${run5[@]}" --image-latents "$d/generate_i2v_inputs.safetensors" --out "$T/i2v.safetensors" 2>/dev/null
  echo "== image-to-video $top"
  "$BIN/st_compare" "$T/i2v.safetensors" "$d/generate_i2v_unipc.safetensors" latents 1e-4
done
# Without the held first frame and its zero timesteps the result is the text-to-video one.
if "$BIN/st_compare" "$T/i2v.safetensors" "$d/generate_t2v_unipc.safetensors" latents 1e-4 >/dev/null 2>&1; then
  echo "TI2V image-to-video equals text-to-video"; exit 1
fi
st "$T/il3.safetensors" image_latents F32 1 48 3 4 6
refuse "tensor 'image_latents' has shape [1, 48, 3, 4, 6], expected [1, 48, 1, 4, 6] (one latent frame" \
  "$bt5" "${run5[@]}" --image-latents "$T/il3.safetensors"
st "$T/il16.safetensors" image_latents F32 1 16 1 4 6
refuse "tensor 'image_latents' has shape [1, 16, 1, 4, 6], expected [1, 48, 1, 4, 6]" "$bt5" "${run5[@]}" --image-latents "$T/il16.safetensors"
refuse "the bundle has no 'encoder_hidden_states_image' input" "$bt5" "${run5[@]}" --image-embeds "$gi"

# ---- Refusals.
refuse "generate needs --image-latents with a tensor 'image_latents' [1, 16, 3, 4, 6]" "$b21" "${run21[@]}" --image-embeds "$gi"
refuse "generate needs --image-embeds with a tensor 'image_embeds' of that shape" "$b21" "${run21[@]}" --image-latents "$gi"
refuse "--image-latents: " "$b21" "${run21[@]}" --image-latents "$T/missing.safetensors" --image-embeds "$gi"
refuse "--image-latents $T/ie.safetensors: no tensor named 'image_latents'" "$b21" "${run21[@]}" --image-latents "$T/ie.safetensors" --image-embeds "$gi"
st "$T/il_shape.safetensors" image_latents F32 1 16 2 4 6
refuse "--image-latents $T/il_shape.safetensors: tensor 'image_latents' has shape [1, 16, 2, 4, 6], expected [1, 16, 3, 4, 6]" \
  "$b21" "${run21[@]}" --image-latents "$T/il_shape.safetensors" --image-embeds "$gi"
st "$T/il_i64.safetensors" image_latents I64 1 16 3 4 6
refuse "tensor 'image_latents' has dtype i64, expected a float dtype" "$b21" "${run21[@]}" --image-latents "$T/il_i64.safetensors" --image-embeds "$gi"
st "$T/ie7.safetensors" image_embeds F32 1 7 20
refuse "--image-embeds $T/ie7.safetensors: tensor 'image_embeds' has 7 image tokens (shape [1, 7, 20]), but the bundle was compiled for $N" \
  "$b21" "${run21[@]}" --image-latents "$gi" --image-embeds "$T/ie7.safetensors"
st "$T/ie_dim.safetensors" image_embeds F32 1 "$N" 19
refuse "tensor 'image_embeds' has shape [1, $N, 19], expected [1, $N, 20]" "$b21" "${run21[@]}" --image-latents "$gi" --image-embeds "$T/ie_dim.safetensors"
# A text-to-video bundle takes neither.
ta=tests/data/wan_tiny_a
bt=$("$BIN/ditc" compile "$ta/model" --frames 9 --height 32 --width 48 --batch 1 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
tgi="$ta/generate_inputs.safetensors"
refuse "--image-latents $gi: the bundle is text-to-video" "$bt" --prompt-embeds "$tgi" --seed 1 --steps 1 --guidance 1 --image-latents "$gi"
refuse "--image-embeds $gi: the bundle has no 'encoder_hidden_states_image' input" "$bt" --prompt-embeds "$tgi" --seed 1 --steps 1 --guidance 1 --image-embeds "$gi"
"$BIN/ditrun" generate --help > "$T/help"
for opt in "--image-latents I.safetensors" "--image-embeds E.safetensors"; do
  grep -qF -- "$opt" "$T/help" || { echo "ditrun generate --help does not document $opt"; exit 1; }
done
echo "generate_i2v: image-to-video generates match diffusers; bad conditioning inputs are refused"
