#!/usr/bin/env bash
# Wan2.2-A14B's two experts in one bundle against diffusers' fp32 outputs: each expert's
# forward (ditrun forward --expert), and WanPipeline's 6-step UniPC generate with CFG
# (guidance on transformer while t >= the boundary, guidance_2 on transformer_2 after): final
# latents within 1e-4 and the expert of every step equal to the recorded one.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
d=tests/data/wan22_a14b_tiny
read -r F H W B L STEPS G G2 S BT < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'], m['steps'], m['guidance'], m['guidance_2'], m['shift'], m['boundary_timestep'])")
compile() { local line; line=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$W" --text-len "$L" -o "$T/bundles" -q "$@" | tail -n 1); echo "${line##* }"; }

# Forward: each expert on the same inputs; the bundle names both and the boundary.
bundle=$(compile --batch "$B")
"$BIN/ditrun" verify "$bundle"
"$BIN/ditrun" info "$bundle" > "$T/info"
grep -q "^schema     1.1$" "$T/info" || { echo "expected schema 1.1 for two experts"; cat "$T/info"; exit 1; }
grep -q "^experts    2, switched below timestep $BT" "$T/info" || grep -q "^experts    2, switched below timestep ${BT%.0}$" "$T/info" || { echo "info lacks the experts"; cat "$T/info"; exit 1; }
for e in transformer transformer_2; do
  grep -q "^expert     $e " "$T/info" || { echo "info lacks expert $e"; exit 1; }
  "$BIN/ditrun" forward "$bundle" --expert "$e" --inputs "$d/forward_inputs.safetensors" --out "$T/fwd_$e.safetensors" 2>/dev/null
  "$BIN/st_compare" "$T/fwd_$e.safetensors" "$d/forward_output_$e.safetensors" sample 1e-4
done
# The default is transformer; the two experts really differ.
"$BIN/ditrun" forward "$bundle" --inputs "$d/forward_inputs.safetensors" --out "$T/fwd_default.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/fwd_default.safetensors" "$d/forward_output_transformer.safetensors" sample 1e-4
if "$BIN/st_compare" "$T/fwd_default.safetensors" "$d/forward_output_transformer_2.safetensors" sample 1e-4 >/dev/null 2>&1; then
  echo "transformer's forward matches transformer_2's reference: the experts are not distinguished"; exit 1
fi

# Generate: the pipeline's loop with both experts and both guidance scales.
GB=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['generate_batch'])")
gbundle=$(compile --batch "$GB")
gi="$d/generate_inputs.safetensors"
"$BIN/ditrun" generate "$gbundle" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps "$STEPS" \
  --guidance "$G" --guidance-2 "$G2" --shift "$S" --sampler unipc --out "$T/gen.safetensors" 2>"$T/gen.err"
"$BIN/st_compare" "$T/gen.safetensors" "$d/generate_unipc.safetensors" latents 1e-4
# One runtime holds both experts: the bundle is verified once, every blob hashed exactly once.
nblobs=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['blobs']))" "$gbundle/manifest.json")
grep -q "^ditrun: verified $nblobs blob hashes (.*) of the bundle's $nblobs blobs$" "$T/gen.err" ||
  { echo "a two-expert generate should hash each of the $nblobs blobs once:"; grep "verified" "$T/gen.err"; exit 1; }
[ "$(grep -c '^ditrun: loaded and verified' "$T/gen.err")" = 1 ] || { echo "the bundle was loaded more than once"; exit 1; }
python3 - "$d/generate_unipc.safetensors" "$T/gen.err" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb")
n = struct.unpack("<Q", f.read(8))[0]
h = json.loads(f.read(n))
base = 8 + n
def i64(name):
    e = h[name]; a, b = e["data_offsets"]; f.seek(base + a)
    return list(struct.unpack("<%dq" % ((b - a) // 8), f.read(b - a)))
want = ["transformer_2" if x else "transformer" for x in i64("expert")]
ts = i64("timesteps")
got, got_t = [], []
for line in open(sys.argv[2]):
    if line.startswith("ditrun: step ") and " expert " in line:
        parts = line.split()
        got_t.append(float(parts[3][2:])); got.append(parts[parts.index("expert") + 1])
if got != want or [int(t) for t in got_t] != ts:
    sys.exit("per-step experts %s at %s, diffusers used %s at %s" % (got, got_t, want, ts))
print("generate: experts per step %s match diffusers" % got)
PY
# Without --guidance-2 transformer_2 uses --guidance, as the pipeline does: the result differs.
"$BIN/ditrun" generate "$gbundle" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps "$STEPS" \
  --guidance "$G" --shift "$S" --sampler unipc --out "$T/gen_g.safetensors" 2>/dev/null
if "$BIN/st_compare" "$T/gen_g.safetensors" "$d/generate_unipc.safetensors" latents 1e-4 >/dev/null 2>&1; then
  echo "--guidance-2 made no difference"; exit 1
fi

# One transformer alone is still a schema 1.0 bundle without experts; --expert transformer_2 is refused there.
line=$("$BIN/ditc" compile "$d/transformer" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" -o "$T/one" -q | tail -n 1)
one=${line##* }
grep -q '"minor": 0' "$one/manifest.json" && ! grep -q '"experts"' "$one/manifest.json" || { echo "a one-transformer bundle changed form"; exit 1; }
if "$BIN/ditrun" forward "$one" --expert transformer_2 --inputs "$d/forward_inputs.safetensors" --out "$T/x.safetensors" 2>"$T/err"; then
  echo "--expert transformer_2 ran on a one-transformer bundle"; exit 1
fi
grep -qF -- "--expert transformer_2: the bundle has one transformer" "$T/err" || { cat "$T/err"; exit 1; }
"$BIN/st_compare" "$T/fwd_default.safetensors" "$d/forward_output_transformer.safetensors" sample 1e-4 >/dev/null

# bf16 and the parallel topologies compile and run: each expert is an ordinary plan.
for opts in "--dtype bf16" "--tp 2" "--cp 2 --cp-mode gather" "--cfg-parallel"; do
  b2=$(compile --batch "$GB" $opts)
  "$BIN/ditrun" verify "$b2" >/dev/null
  "$BIN/ditrun" generate "$b2" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps "$STEPS" \
    --guidance "$G" --guidance-2 "$G2" --shift "$S" --sampler unipc --out "$T/gen_p.safetensors" 2>/dev/null
  tol="1e-4"; [ "$opts" = "--dtype bf16" ] && tol="6e-2 0.999" # bf16's tolerance in bf16.sh
  "$BIN/st_compare" "$T/gen_p.safetensors" "$d/generate_unipc.safetensors" latents $tol || { echo "generate with $opts"; exit 1; }
done
# A forward prepares only the expert it runs: its prediction is one expert's, below the
# bundle's (both experts, as generate loads them), and --expert names the one loaded.
"$BIN/ditrun" forward "$bundle" --expert transformer_2 --inputs "$d/forward_inputs.safetensors" --out "$T/one.safetensors" 2>"$T/one.err"
grep -qF "(expert transformer_2)" "$T/one.err" || { cat "$T/one.err"; echo "forward did not load transformer_2 alone"; exit 1; }
python3 - "$(grep "^ditrun: memory:" "$T/one.err" | head -n 1 | awk '{print $6}')" "$bundle/manifest.json" <<'PY'
import json, sys
one, both = float(sys.argv[1]), json.load(open(sys.argv[2]))["memory"]["peak_bytes"] / 2**20
if not 0 < one < both:
    sys.exit("one expert predicts %g MiB, the bundle (both) %g" % (one, both))
PY
echo "goldens_a14b: both experts' forwards and the two-expert generate match diffusers"
