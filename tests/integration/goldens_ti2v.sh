#!/usr/bin/env bash
# Wan2.2 TI2V's per-token timesteps (expand_timesteps): the tiny pipeline's CPU forward with a
# [B, tokens] timestep (item 0's first frame at 0) against diffusers' fp32 output (max relative
# error <= 1e-4); a [B] timestep equal to the [B, tokens] forward of the same values, byte for
# byte; the per-token effect real (item 0's first frame differs from an all-t run, item 1 does
# not); other timestep shapes refused naming the accepted ones; bf16 within bf16.sh's
# tolerances; every topology equal to one rank (<= 1e-5, as topologies.sh); the text-to-video
# generate (the pipeline's timestep broadcast over the tokens) against diffusers; the bf16
# sm_90 compile (no GPU needed); the time embedder and the modulation rows made once a latent
# frame, a timestep varying within a frame refused; and the bare transformer folder keeps its [B]
# timestep.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
d=tests/data/wan22_ti2v_tiny
read -r F H W B L N T0 T1 STEPS G S GB < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'], m['tokens'], *m['timestep'], m['steps'], m['guidance'], m['shift'], m['generate_batch'])")
c=(compile "$d" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" -o "$T/b" -q)
one=$("$BIN/ditc" "${c[@]}" | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" verify "$one" >/dev/null
"$BIN/ditrun" info "$one" | grep -q "^input      timestep               f32\[$B,$N\]$" || { "$BIN/ditrun" info "$one"; echo "timestep is not [$B,$N]"; exit 1; }
"$BIN/ditrun" forward "$one" --inputs "$d/forward_inputs.safetensors" --out "$T/f_one.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/f_one.safetensors" "$d/forward_output.safetensors" sample 1e-4

# The committed inputs with another timestep tensor: values, then shape.
retime() { # out, shape (json), values...
  python3 - "$d/forward_inputs.safetensors" "$@" <<'PY'
import json, struct, sys
src, out, shape, vals = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), [float(v) for v in sys.argv[4:]]
f = open(src, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
hdr, data = {}, b""
for k, v in h.items():
    if k == "__metadata__": continue
    a, b = v["data_offsets"]
    raw = struct.pack("<%df" % len(vals), *vals) if k == "timestep" else body[a:b]
    hdr[k] = {"dtype": "F32" if k == "timestep" else v["dtype"], "shape": shape if k == "timestep" else v["shape"],
              "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(out, "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
}
all_t=()
for _ in $(seq "$N"); do all_t+=("$T0"); done
for _ in $(seq "$N"); do all_t+=("$T1"); done
retime "$T/in_b.safetensors" "[$B]" "$T0" "$T1"
retime "$T/in_bt.safetensors" "[$B,$N]" "${all_t[@]}"
"$BIN/ditrun" forward "$one" --inputs "$T/in_b.safetensors" --out "$T/f_b.safetensors" 2>/dev/null
"$BIN/ditrun" forward "$one" --inputs "$T/in_bt.safetensors" --out "$T/f_bt.safetensors" 2>/dev/null
cmp "$T/f_b.safetensors" "$T/f_bt.safetensors" || { echo "a [B] timestep differs from the same values per token"; exit 1; }

# Per token for real: against the all-t run, item 0 (first frame at 0) changes in its first
# latent frame; item 1 (all at t in both) does not.
python3 - "$T/f_one.safetensors" "$T/f_bt.safetensors" <<'PY'
import json, struct, sys
def load(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); e = h["sample"]
    a, b = e["data_offsets"]; f.seek(8 + n + a)
    return e["shape"], struct.unpack("<%df" % ((b - a) // 4), f.read(b - a))
shape, x = load(sys.argv[1]); _, y = load(sys.argv[2])
B, C, Fr, H, W = shape
def idx(b, c, f, h, w): return (((b * C + c) * Fr + f) * H + h) * W + w
scale = max(abs(v) for v in y)
def diff(b, f): return max(abs(x[idx(b, c, f, h, w)] - y[idx(b, c, f, h, w)]) for c in range(C) for h in range(H) for w in range(W)) / scale
d0, d1 = diff(0, 0), max(diff(1, f) for f in range(Fr))
print("per-token effect: item 0 frame 0 differs by %.3e, item 1 by %.3e (relative to max|sample|)" % (d0, d1))
if not d0 > 1e-2: sys.exit("item 0's first frame at timestep 0 did not change the output")
if not d1 <= 1e-6: sys.exit("item 1 changed though its timesteps did not")
PY

# Any other timestep shape is refused, naming both accepted ones; nothing is written.
retime "$T/in_3.safetensors" "[3]" 1 2 3
retime "$T/in_17.safetensors" "[$B,$((N - 1))]" $(seq $((B * (N - 1))))
for bad in 3 17; do
  if "$BIN/ditrun" forward "$one" --inputs "$T/in_$bad.safetensors" --out "$T/x.safetensors" 2>"$T/err"; then
    echo "a timestep of the wrong shape ran"; exit 1
  fi
  grep -qF "the bundle expects [$B,$N] (one timestep per token) or [$B] (one per batch item" "$T/err" || { cat "$T/err"; exit 1; }
  [ ! -e "$T/x.safetensors" ] || { echo "partial output"; exit 1; }
done

# bf16 within bf16.sh's forward tolerance.
b16=$("$BIN/ditc" "${c[@]}" --dtype bf16 | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$b16" --inputs "$d/forward_inputs.safetensors" --out "$T/f_bf16.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/f_bf16.safetensors" "$d/forward_output.safetensors" sample 2e-2 0.9999

# Every topology slices the per-token modulation like the tokens (2 heads, 18 tokens).
for top in "--tp 2" "--cfg-parallel" "--cfg-parallel --tp 2" "--cp 2 --cp-mode gather" "--cp 3 --cp-mode gather" \
           "--cp 2 --cp-mode ulysses" "--cp 2 --cp-mode ring" "--cp 3 --cp-mode ring" "--cp 6 --cp-mode usp --ulysses 2" \
           "--cp 2 --cp-mode ring --tp 2 --cfg-parallel" "--cp 2 --cp-mode gather --tp 2 --cfg-parallel" \
           "--cp 2 --cp-mode ulysses --cfg-parallel" "--tp 2 --sp" "--tp 2 --sp --cp 3 --cp-mode ring" "--tp 2 --sp --cfg-parallel"; do
  # shellcheck disable=SC2086
  par=$("$BIN/ditc" "${c[@]}" $top | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" forward "$par" --inputs "$d/forward_inputs.safetensors" --out "$T/f_par.safetensors" 2>/dev/null
  echo "== $top"
  "$BIN/st_compare" "$T/f_par.safetensors" "$T/f_one.safetensors" sample 1e-5
done
# With collectives staged and overlapped (delayed queue) too: the same bytes.
P=$("$BIN/ditc" "${c[@]}" --tp 2 --sp --cp 3 --cp-mode ring | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" forward "$P" --no-overlap-collectives --inputs "$d/forward_inputs.safetensors" --out "$T/f_plain.safetensors" 2>/dev/null
"$BIN/ditrun" forward "$P" --stage-collectives --inputs "$d/forward_inputs.safetensors" --out "$T/f_staged.safetensors" 2>/dev/null
DIT_CPU_COPY_DELAY_US=300 "$BIN/ditrun" forward "$P" --overlap-collectives --inputs "$d/forward_inputs.safetensors" --out "$T/f_ovl.safetensors" 2>/dev/null
cmp "$T/f_plain.safetensors" "$T/f_staged.safetensors" && cmp "$T/f_plain.safetensors" "$T/f_ovl.safetensors" || { echo "staged or overlapped collectives differ"; exit 1; }

# Text-to-video: generate hands the transformer one timestep per item, which the bundle
# repeats over the tokens as the pipeline's expand_timesteps does.
gb=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$W" --batch "$GB" --text-len "$L" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
gi="$d/generate_inputs.safetensors"
"$BIN/ditrun" generate "$gb" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps "$STEPS" --guidance "$G" \
  --shift "$S" --sampler unipc --out "$T/g.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/g.safetensors" "$d/generate_t2v_unipc.safetensors" latents 1e-4

# Hopper in bf16 compiles without a GPU, alone and sharded.
for top in "" "--cp 2 --cp-mode ring --tp 2" "--tp 2 --sp"; do
  # shellcheck disable=SC2086
  G90=$("$BIN/ditc" "${c[@]}" --dtype bf16 --target sm_90 $top | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" verify "$G90" >/dev/null
done

# One timestep a latent frame: a token_rows step reads the timestep input's first token of every
# frame, the time embedder runs on those rows (no cast: a direct bf16 store), each block's table is
# stored once a frame and every step that reads one reads its frame's row (token_group = the
# frame's tokens), and a timestep that
# varies within a frame is refused on the host, naming the item and the token.
frame_rows() { # bundle, batch
  python3 - "$1" "$2" "$N" <<'PY'
import json, sys
b, batch, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m = json.load(open(b + "/manifest.json"))
plan = json.load(open(b + "/blobs/" + [x["hash"] for x in m["blobs"] if x["role"] == "plan"][0]))
vals = plan["values"]
name = lambda s: vals[s["out"][0]]["name"]
by = {name(s): s for s in plan["steps"]}
tr = by["timestep.frames"]
assert tr["op"] == "token_rows" and vals[tr["in"][0]]["name"] == "timestep", tr
group = tr["ints"]["group"]
frames = tokens // group
assert frames * group == tokens and vals[tr["out"][0]]["shape"] == [batch, frames], tr
assert vals[by["time.linear_1"]["in"][0]]["shape"][1] == frames, by["time.linear_1"]
assert not [s for s in plan["steps"] if s["op"] == "cast"], "a cast in the per-frame embedder"
# The stored per-frame tables [B, frames, n, D] and every step that reads one.
tables = {i for i, v in enumerate(vals) if len(v["shape"]) == 4 and v["shape"][:2] == [batch, frames]}
assert tables and all(by[vals[i]["name"]]["op"] == "mod_table" for i in tables), sorted(tables)[:3]
tok = [s for s in plan["steps"] if s["op"] != "mod_table" and tables & set(s["in"])]
assert tok and all(s["op"] in ("adaln", "gated_add", "layernorm") for s in tok), [s["op"] for s in tok]
assert all(s["ints"]["token_group"] == group and s["ints"]["token_offset"] == 0 for s in tok), tok[:2]
print(group)
PY
}
FR=$(frame_rows "$one" "$B")
frame_rows "$("$BIN/ditc" "${c[@]}" --dtype bf16 --target sm_90 | tail -n1 | cut -d' ' -f3)" "$B" >/dev/null
odd=("${all_t[@]}")
odd[$((FR + 1))]=$T1  # item 0, the second token of its second frame
retime "$T/in_odd.safetensors" "[$B,$N]" "${odd[@]}"
if "$BIN/ditrun" forward "$one" --inputs "$T/in_odd.safetensors" --out "$T/f_odd.safetensors" 2> "$T/odd.err"; then
  echo "a timestep varying within a latent frame was accepted"; exit 1
fi
grep -q "input 'timestep': batch item 0, token $((FR + 1)) differs from token $FR, the first of its run of $FR" "$T/odd.err" \
  || { cat "$T/odd.err"; exit 1; }
[ ! -e "$T/f_odd.safetensors" ] || { echo "a refused forward left an output"; exit 1; }

w21=$("$BIN/ditc" compile tests/data/wan_tiny_b/model --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --dtype bf16 \
  --target sm_90 -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
python3 - "$w21" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/manifest.json"))
plan = json.load(open(sys.argv[1] + "/blobs/" + [x["hash"] for x in m["blobs"] if x["role"] == "plan"][0]))
assert not [s for s in plan["steps"] if s["op"] == "cast"], "a per-batch bundle with a cast"
assert [s for s in plan["steps"] if plan["values"][s["out"][0]]["name"] == "temb"][0]["op"] == "linear"
PY

# The transformer folder alone has no pipeline to say expand_timesteps: timestep stays [B].
bare=$("$BIN/ditc" compile "$d/transformer" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" -o "$T/b" -q | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" info "$bare" | grep -q "^input      timestep               f32\[$B\]$" || { "$BIN/ditrun" info "$bare"; exit 1; }
echo "goldens_ti2v: per-token timesteps match diffusers; [B] equals the same values per token; every topology matches one rank"
