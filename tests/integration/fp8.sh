#!/usr/bin/env bash
# --quant fp8 on the tiny Wan models: the blocks' attention and FFN linears (and nothing else)
# become linear_fp8, the manifest and identity say so, forward and generate run, and the forward
# output stays close to the bf16 bundle's. E4M3 keeps 3 mantissa bits (relative rounding up to
# 2^-4 per operand, ~2.5% rms once the errors of a dot product average); measured against the
# bf16 bundle after 2 blocks: max relative error 2.6e-2 and 4.4e-2, cosine 0.99965 and 0.99923
# (wan_tiny_a, wan_tiny_b; codes from x * (448 / amax)). Bounds:
# max relative error <= 6e-2 (below one operand's worst rounding) and cosine >= 0.999 (1 - cos is
# about rel_l2^2 / 2: rel_l2 up to ~4.5%). A value other than none|fp8 is refused.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for d in tests/data/wan_tiny_a tests/data/wan_tiny_b; do
  read -r F H W B L < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'])")
  args=("$d/model" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" --dtype bf16 -o "$T/b" -q)
  line=$("$BIN/ditc" compile "${args[@]}" | tail -n 1)
  exact=${line##* }
  line=$("$BIN/ditc" compile "${args[@]}" --quant fp8 | tail -n 1)
  fp8=${line##* }
  [ "$fp8" != "$exact" ] || { echo "--quant fp8 did not change the identity"; exit 1; }
  python3 - "$fp8/manifest.json" "$exact/manifest.json" <<'PY'
import json, sys
m, e = (json.load(open(p)) for p in sys.argv[1:3])
assert m["inputs"]["options"]["quant"] == "fp8", m["inputs"]["options"]
assert "quant" not in e["inputs"]["options"] and "quant" not in e["summary"], "the exact bundle mentions quant"
q = m["summary"]["quant"]
assert q["mode"] == "fp8", q
layers = m["inputs"]["model"]["config"]["num_layers"]
want = [f"blocks.{i}.{o}" for i in range(layers)
        for o in ("attn1.q", "attn1.k", "attn1.v", "attn1.out", "attn2.q", "attn2.k", "attn2.v", "attn2.out", "ffn.up", "ffn.down")]
assert sorted(q["ops"]) == sorted(want), (q["ops"], want)
w8 = [t for w in m["weights"] for t in w["tensors"] if t["dtype"] == "f8e4m3"]
scales = [t for w in m["weights"] for t in w["tensors"] if t["name"].endswith(".fp8_scale")]
assert len(w8) == len(want) == len(scales), (len(w8), len(want), len(scales))
assert all(t["name"].startswith("blocks.") for t in w8), [t["name"] for t in w8]
PY
  "$BIN/ditrun" forward "$exact" --inputs "$d/forward_inputs.safetensors" --out "$T/e.safetensors" 2>/dev/null
  "$BIN/ditrun" forward "$fp8" --inputs "$d/forward_inputs.safetensors" --out "$T/f.safetensors" 2>/dev/null
  "$BIN/st_compare" "$T/f.safetensors" "$T/e.safetensors" sample 6e-2 0.999
  gi="$d/generate_inputs.safetensors"
  "$BIN/ditrun" generate "$fp8" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps 2 --out "$T/g.safetensors" 2>/dev/null
  python3 -c "import json,struct,sys; f=open('$T/g.safetensors','rb'); n=struct.unpack('<Q', f.read(8))[0]; h=json.loads(f.read(n)); assert 'latents' in h, h"
done
# For sm_90 every linear_fp8 step is cuBLASLt's at run time (no kernel) over rows quantized once
# for all the linears that read them: by the norm that makes them where there is one (each
# block's two adalns and its cross-attention layernorm, with their folded residuals: codes, sum,
# row scales out), else by an attn_quant with heads 1 and rows 1 just after their producer (each
# block's attention outputs and GELU'd FFN rows, and once, before the blocks, the text that every
# block's cross-attention K and V read). The CPU backend runs that plan to the CPU bundle's output.
line=$("$BIN/ditc" compile "${args[@]}" --quant fp8 --target sm_90 | tail -n 1)
g8=${line##* }
python3 - "$g8" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/manifest.json"))
plan = [b["hash"] for b in m["blobs"] if b["role"] == "plan"][0]
steps = json.load(open(sys.argv[1] + "/blobs/" + plan))["steps"]
lin = [s for s in steps if s["op"] == "linear_fp8"]
assert len(lin) == len(m["summary"]["quant"]["ops"]) and not any("kernel" in s for s in lin), lin[:1]
maker = {o: s for s in steps for o in s["out"]}
rows = {s["in"][0] for s in lin}
norms = [maker[v] for v in rows if maker[v]["op"] in ("layernorm", "adaln")]
quants = [maker[v] for v in rows if maker[v]["op"] == "attn_quant"]
layers = m["inputs"]["model"]["config"]["num_layers"]
assert len(norms) == 3 * layers and len(quants) == 3 * layers + 1 and len(rows) == len(norms) + len(quants), (len(norms), len(quants), len(rows))
assert all(s["ints"]["quant"] == 1 and "kernel" in s and len(s["out"]) in (2, 3) for s in norms), norms[:1]
assert all(s["ints"]["heads"] == 1 and s["ints"]["rows"] == 1 and s["kernel"]["source"] == "nvrtc" for s in quants), quants[:1]
assert sorted(s["block"] for s in quants) == [-1] + sorted(b for b in range(layers) for _ in range(3)), [s["block"] for s in quants]
PY
"$BIN/ditrun" forward "$g8" --backend cpu --inputs "$d/forward_inputs.safetensors" --out "$T/g.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/g.safetensors" "$T/f.safetensors" sample 1e-6 0.999999
# A product over at most 256 token rows with more than 4096 inputs stays bf16 (cuBLASLt has no
# row- and column-scaled fp8 kernel for it on Hopper): Wan2.2-TI2V-5B's widths, one block, one
# frame of 64x64 (4 tokens): the FFN's down projection (K 14336) is kept, its up projection
# (K 3072) and the attentions' (K 3072, the text's 4096) are quantized.
"$BIN/make_tiny_wan" --variant ti2v --preset wan2.2-ti2v-5b --layers 1 --dtype bf16 --out "$T/ti5" >/dev/null
line=$("$BIN/ditc" compile "$T/ti5/model" --frames 1 --height 64 --width 64 --text-len 16 --dtype bf16 --quant fp8 -o "$T/b" -q | tail -n 1)
python3 - "${line##* }/manifest.json" <<'PY'
import json, sys
q = json.load(open(sys.argv[1]))["summary"]["quant"]
want = [f"blocks.0.{o}" for o in ("attn1.q", "attn1.k", "attn1.v", "attn1.out", "attn2.q", "attn2.k", "attn2.v", "attn2.out", "ffn.up")]
assert sorted(q["ops"]) == sorted(want), q["ops"]
assert "at most 256 token rows with more than 4096 inputs" in q["kept"], q["kept"]
PY
rm -rf "$T/ti5"
# The MMDiT blocks (FLUX.1-dev's tiny model: one double and two single blocks): a single block's Q, K,
# V and MLP projection read one set of e4m3 rows, made by its adaln; the forward stays within the
# bounds above of the bf16 bundle's (measured 2.8e-2 and cosine 0.99954).
fl=(tests/data/flux_dev_tiny --height 64 --width 64 --text-len 8 --dtype bf16 -o "$T/b" -q)
fe=$("$BIN/ditc" compile "${fl[@]}" | tail -n 1 | cut -d' ' -f3)
f8=$("$BIN/ditc" compile "${fl[@]}" --quant fp8 | tail -n 1 | cut -d' ' -f3)
python3 - "$f8" <<'PY'
import json, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
plan = json.load(open(d + "/blobs/" + [b["hash"] for b in m["blobs"] if b["role"] == "plan"][0]))
names, steps = [v.get("name") for v in plan["values"]], plan["steps"]
maker = {o: s for s in steps for o in s["out"]}
for b in (0, 1):
    want = {f"single_transformer_blocks.{b}.{o}" for o in ("attn.q", "attn.k", "attn.v", "act_mlp")}
    rows = {s["in"][0] for s in steps if s["op"] == "linear_fp8" and names[s["out"][0]] in want}
    assert len(rows) == 1 and maker[rows.pop()]["op"] == "adaln", (b, rows)
PY
"$BIN/forward_inputs" "$fe" "$T/fin.safetensors" --seed 3 >/dev/null
"$BIN/ditrun" forward "$fe" --inputs "$T/fin.safetensors" --out "$T/fe.safetensors" 2>/dev/null
"$BIN/ditrun" forward "$f8" --inputs "$T/fin.safetensors" --out "$T/f8.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/f8.safetensors" "$T/fe.safetensors" sample 6e-2 0.999
if "$BIN/ditc" compile "${args[@]}" --quant int3 2>"$T/err"; then echo "--quant int3 was accepted"; exit 1; fi
grep -q -- "--quant int3: expected none or fp8" "$T/err" || { cat "$T/err"; exit 1; }

# --attn-quant fp8 on the tiny Wan model at head dim 128 (17 frames at 128x128: 320 tokens, three
# key tiles, the last partial): its self-attention becomes attn_quant (q, k), attn_vmax,
# attn_quant_vt and attention_fp8; the cross-attention (7 text keys) stays. Forward against the
# bf16 bundle of the same pattern: measured max relative error 7.9e-3 and cosine 0.99998
# (attention alone, dense or sta:1,8,8), 3.9e-2 and 0.99954 with --quant fp8 too. Bounds: 3e-2 and
# 0.9995 for the attention alone (P, Q, K and V each rounded to 3 mantissa bits in one op of the
# block), fp8.sh's 6e-2 and 0.999 above with the linears.
"$BIN/make_tiny_wan" --preset tiny-hd128 --dtype bf16 --text-len 7 --out "$T/hd128" >/dev/null
a=("$T/hd128/model" --frames 17 --height 128 --width 128 --text-len 7 --dtype bf16 -o "$T/b" -q)
bundle() { "$BIN/ditc" compile "${a[@]}" "$@" | tail -n 1 | cut -d' ' -f3; }
plain=$(bundle)
[ "$(bundle --attn-quant none)" = "$plain" ] || { echo "--attn-quant none changed the identity"; exit 1; }
"$BIN/forward_inputs" "$plain" "$T/in.safetensors" --seed 3 --set timestep=500
run() { "$BIN/ditrun" forward "$1" --inputs "$T/in.safetensors" --out "$2" 2>/dev/null; }
run "$plain" "$T/plain.safetensors"
sta=$(bundle --sparse-attn sta:1,8,8)
run "$sta" "$T/sta.safetensors"
# --attn-quant int8fp8 (int8 Q and K, exact integer Q K^T, e4m3 P V): measured 7.4e-3 and 0.99999
# here; int8 (P V in bf16, v unquantized): 7.4e-3 and 0.99999, and with sta:1,8,8 4.4e-3 and
# 0.99999 (the bf16 outputs' own rounding is most of it at this size); the same bounds.
for mode in "fp8attn|--attn-quant fp8|plain|3e-2 0.9995" "fp8all|--quant fp8 --attn-quant fp8|plain|6e-2 0.999" \
            "fp8attn+sta|--attn-quant fp8 --sparse-attn sta:1,8,8|sta|3e-2 0.9995" "int8fp8attn|--attn-quant int8fp8|plain|3e-2 0.9995" \
            "int8attn|--attn-quant int8|plain|3e-2 0.9995" "int8attn+sta|--attn-quant int8 --sparse-attn sta:1,8,8|sta|3e-2 0.9995"; do
  IFS='|' read -r name flags ref bounds <<<"$mode"
  # shellcheck disable=SC2086
  b=$(bundle $flags)
  [ "$b" != "$plain" ] && [ "$b" != "$sta" ] || { echo "$name: the identity did not change"; exit 1; }
  python3 - "$b" "$name" <<'PY'
import json, sys
d, name = sys.argv[1:3]
m = json.load(open(d + "/manifest.json"))
mode = name.split("attn")[0].split("all")[0]  # fp8, int8fp8 or int8
assert m["inputs"]["options"]["attn_quant"] == mode, m["inputs"]["options"]
q = m["summary"]["attn_quant"]
assert q["mode"] == mode and q["q"].startswith("e4m3" if mode == "fp8" else "int8") and q["attentions"] == 1 and q["kept"] == 1 and q["ops"] == ["blocks.0.attn1.sdpa"], q
assert ("quant" in m["summary"]) == (name == "fp8all"), m["summary"].keys()
plan = [b["hash"] for b in m["blobs"] if b["role"] == "plan"][0]
steps = json.load(open(d + "/blobs/" + plan))["steps"]
ops = [s["op"] for s in steps]
fp8 = [s for s in steps if s["op"] == "attention_fp8"]
pv8 = mode != "int8"  # int8: P V in bf16 over v itself, no V quantizers
# the attention's Q and K quantizers (fp8all adds the fp8 linears' row quantizers: heads 1, rows 1)
attn_q = [s for s in steps if s["op"] == "attn_quant" and s["ints"]["heads"] != 1]
assert len(attn_q) == 2 and ops.count("attn_vmax") == pv8 and ops.count("attn_quant_vt") == pv8 and len(fp8) == 1 \
    and ops.count("attention") == 1, ops
if pv8:
    # 2 heads of 4 channel groups would take 66 splits for 528 blocks; 320 keys cap them at 320 / 128.
    vmax, vt = [[s for s in steps if s["op"] == k][0] for k in ("attn_vmax", "attn_quant_vt")]
    assert vmax["ints"] == {"heads": 2, "splits": 2} and vt["in"] == vmax["in"] + vmax["out"], (vmax, vt)
assert len(fp8[0]["in"]) == (5 if pv8 else 4) + (2 if name.endswith("sta") else 1), fp8
codes = {v["name"]: v["dtype"] for v in json.load(open(d + "/blobs/" + plan))["values"] if v.get("name")}
assert codes["blocks.0.attn1.sdpa.q8"] == codes["blocks.0.attn1.sdpa.k8"] == ("f8e4m3" if mode == "fp8" else "i8"), codes
PY
  run "$b" "$T/$name.safetensors"
  # shellcheck disable=SC2086
  "$BIN/st_compare" "$T/$name.safetensors" "$T/$ref.safetensors" sample $bounds
done
"$BIN/ditrun" compare "$b" --inputs "$T/in.safetensors" >"$T/cmp.txt" 2>&1 || { cat "$T/cmp.txt"; exit 1; }
grep -q "^attention_fp8 " "$T/cmp.txt" || { cat "$T/cmp.txt"; exit 1; }
refuse() {
  local want=$1
  shift
  if "$BIN/ditc" compile "$@" 2>"$T/err" >/dev/null; then echo "accepted: $*"; exit 1; fi
  grep -qF -- "$want" "$T/err" || { cat "$T/err"; exit 1; }
}
refuse "--attn-quant fp8 with --target sm_80: fp8 attention is written for sm_90" "${a[@]}" --attn-quant fp8 --target sm_80
refuse "--attn-quant int4: expected none, fp8, int8 or int8fp8" "${a[@]}" --attn-quant int4
refuse "--quant int8: expected none or fp8" "${a[@]}" --quant int8
refuse "--attn-quant fp8 with --tp 2: tensor-parallel shards are not quantized yet" "${a[@]}" --attn-quant fp8 --tp 2
refuse "--attn-quant fp8: none of the graph's" "${args[@]}" --attn-quant fp8
# For sm_90 the Hopper kernel's fp8 and int8 forms compile (NVRTC; run on a GPU by tests/gpu/run.sh).
for mode in fp8 int8 int8fp8; do
  s90=$("$BIN/ditc" compile "${a[@]}" --attn-quant $mode --target sm_90 | tail -n 1 | cut -d' ' -f3)
  python3 - "$s90" <<'PY'
import json, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
plan = [b["hash"] for b in m["blobs"] if b["role"] == "plan"][0]
fp8 = [s for s in json.load(open(d + "/blobs/" + plan))["steps"] if s["op"] == "attention_fp8"]
assert len(fp8) == 1 and fp8[0].get("kernel"), fp8
PY
done
# Head dim 64 (tiny-hd64: two heads of 64), the same rewrite: the forward within the attention-alone
# bounds against its bf16 bundle, and for sm_90 the kernel's form of 64-byte Q and K rows compiles.
"$BIN/make_tiny_wan" --preset tiny-hd64 --dtype bf16 --text-len 7 --out "$T/hd64" >/dev/null
a64=("$T/hd64/model" --frames 17 --height 128 --width 128 --text-len 7 --dtype bf16 -o "$T/b" -q)
p64=$("$BIN/ditc" compile "${a64[@]}" | tail -n 1 | cut -d' ' -f3)
f64=$("$BIN/ditc" compile "${a64[@]}" --attn-quant fp8 | tail -n 1 | cut -d' ' -f3)
"$BIN/forward_inputs" "$p64" "$T/in64.safetensors" --seed 3 --set timestep=500 >/dev/null
for b in "$p64" "$f64"; do "$BIN/ditrun" forward "$b" --inputs "$T/in64.safetensors" --out "$T/${b##*/}.safetensors" 2>/dev/null; done
"$BIN/st_compare" "$T/${f64##*/}.safetensors" "$T/${p64##*/}.safetensors" sample 3e-2 0.9995
s64=$("$BIN/ditc" compile "${a64[@]}" --attn-quant fp8 --target sm_90 | tail -n 1 | cut -d' ' -f3)
python3 - "$s64" <<'PY'
import json, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
assert m["summary"]["attn_quant"]["ops"] == ["blocks.0.attn1.sdpa"], m["summary"]["attn_quant"]
plan = [b["hash"] for b in m["blobs"] if b["role"] == "plan"][0]
fp8 = [s for s in json.load(open(d + "/blobs/" + plan))["steps"] if s["op"] == "attention_fp8"]
assert len(fp8) == 1 and fp8[0].get("kernel"), fp8
PY
echo "fp8: ok"
