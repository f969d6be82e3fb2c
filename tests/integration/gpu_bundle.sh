#!/usr/bin/env bash
# GPU bundles compile without a GPU: kernels from NVRTC and the MLIR path, the same bytes from a
# cold and a warm kernel cache, a plan that the CPU reference still runs (the bf16 goldens
# match), and a ditrun on a machine without a driver that says so instead of running.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
d=tests/data/wan_tiny_b
args=(compile "$d/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --dtype bf16 --target sm_90)
a=$(DITC_CACHE_DIR=$T/cache1 "$BIN/ditc" "${args[@]}" -o "$T/one" -q | tail -n 1)
b=$(DITC_CACHE_DIR=$T/cache2 "$BIN/ditc" "${args[@]}" -o "$T/two" -q | tail -n 1)
c=$(DITC_CACHE_DIR=$T/cache1 "$BIN/ditc" "${args[@]}" -o "$T/three" -q | tail -n 1)
ida=${a#bundle }; ida=${ida%% *}
[ "$ida" = "$(echo "$b" | cut -d' ' -f2)" ] && [ "$ida" = "$(echo "$c" | cut -d' ' -f2)" ] || { echo "identities differ"; exit 1; }
diff -r -x diagnostics.json "$T/one/$ida" "$T/two/$ida"
diff -r -x diagnostics.json "$T/one/$ida" "$T/three/$ida"
B=$T/one/$ida
"$BIN/ditrun" verify "$B"
python3 - "$B" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/manifest.json"))
assert m["target"]["arch"] == "sm_90", m["target"]
assert m["target"]["min_driver"] > 0
kernels = [b for b in m["blobs"] if b["role"] == "kernels"]
assert len(kernels) >= 10, len(kernels)
cg = m["summary"]["codegen"]
assert cg["mlir_kernel_steps"] > 0 and cg["nvrtc_kernel_steps"] > 0, cg
tc = m["inputs"]["toolchain"]
assert "nvrtc" in tc and "nvjitlink" in tc and "mlir" in tc, tc
plan = [b["hash"] for b in m["blobs"] if b["role"] == "plan"][0]
steps = json.load(open(sys.argv[1] + "/blobs/" + plan))["steps"]
src = {s["kernel"]["source"] for s in steps if "kernel" in s}
assert src == {"mlir", "nvrtc"}, src
print("gpu bundle: %d kernel modules, %d MLIR and %d NVRTC kernel steps" % (len(kernels), cg["mlir_kernel_steps"], cg["nvrtc_kernel_steps"]))
PY
"$BIN/ditrun" forward "$B" --backend cpu --inputs "$d/forward_inputs.safetensors" --out "$T/f.safetensors" 2>/dev/null
"$BIN/st_compare" "$T/f.safetensors" "$d/forward_output.safetensors" sample 2e-2 0.9999
if ! ls /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 >/dev/null 2>&1; then
  if "$BIN/ditrun" forward "$B" --inputs "$d/forward_inputs.safetensors" --out "$T/g.safetensors" 2>"$T/err"; then
    echo "ditrun ran a GPU bundle without a driver"; exit 1
  fi
  grep -q "CUDA backend unavailable" "$T/err" || { cat "$T/err"; exit 1; }
  [ ! -e "$T/g.safetensors" ] || { echo "partial output"; exit 1; }
  echo "no driver here: refused with: $(head -c 160 "$T/err")"
fi

# Parallel topologies compile for GPUs too: every step is a generated kernel, a cuBLASLt
# product or a collective; the CPU reference runs the same plans to the bf16 goldens.
for top in "--tp 2 --sp --cp 2 --cp-mode ring" "--cp 4 --cp-mode usp --ulysses 2" "--tp 2 --cp 2 --cp-mode ulysses --cfg-parallel"; do
  # shellcheck disable=SC2086
  line=$(DITC_CACHE_DIR=$T/cache1 "$BIN/ditc" "${args[@]}" $top -o "$T/top" -q | tail -n 1)
  P=${line##* }
  python3 - "$P" "$top" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/manifest.json"))
lib = {"linear", "allreduce", "allgather", "alltoall", "ring_shift", "reduce_scatter"}
seen = set()
for h in {b["hash"] for b in m["blobs"] if b["role"] == "plan"}:
    for s in json.load(open(sys.argv[1] + "/blobs/" + h))["steps"]:
        seen.add(s["op"])
        assert "kernel" in s or s["op"] in lib, (sys.argv[2], s["op"])
want = {"rowsumsq", "rmsnorm_slice", "slice_tokens", "attn_merge"} if "ring" in sys.argv[2] else {"slice_tokens"}
assert want <= seen, (sys.argv[2], want - seen)
print("gpu topology %s: world %d, %d kernel modules" % (sys.argv[2], m["topology"]["world"], sum(b["role"] == "kernels" for b in m["blobs"])))
PY
  "$BIN/ditrun" forward "$P" --backend cpu --inputs "$d/forward_inputs.safetensors" --out "$T/ft.safetensors" 2>/dev/null
  "$BIN/st_compare" "$T/ft.safetensors" "$d/forward_output.safetensors" sample 2e-2 0.9999
  if ! ls /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 >/dev/null 2>&1; then
    if "$BIN/ditrun" forward "$P" --inputs "$d/forward_inputs.safetensors" --out "$T/gt.safetensors" 2>"$T/err"; then
      echo "ditrun ran a GPU bundle without a driver"; exit 1
    fi
    grep -q "CUDA backend unavailable" "$T/err" || { cat "$T/err"; exit 1; }
    [ ! -e "$T/gt.safetensors" ] || { echo "partial output"; exit 1; }
  fi
done

# The Hopper attention kernel at head dims 64 and 128: sm_90a cubins without PTX, Q, K and V
# read through tensor maps the plan describes (the runtime encodes them at load); short keys
# (cross-attention) on a persistent grid at head dim 128. The CPU reference runs the same plan.
for p in tiny-hd64 tiny-hd128; do
  "$BIN/make_tiny_wan" --preset "$p" --dtype bf16 --text-len 7 --out "$T/$p" >/dev/null
  hargs=(compile "$T/$p/model" --frames 13 --height 256 --width 320 --text-len 7 --dtype bf16 -o "$T/h" -q)
  G=$(DITC_CACHE_DIR=$T/cache1 "$BIN/ditc" "${hargs[@]}" --target sm_90 | tail -n 1 | cut -d' ' -f3)
  C=$("$BIN/ditc" "${hargs[@]}" | tail -n 1 | cut -d' ' -f3)
  "$BIN/ditrun" verify "$G" >/dev/null
  python3 - "$G" "$p" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/manifest.json"))
hd = 64 if sys.argv[2] == "tiny-hd64" else 128
kernels = {b["hash"] for b in m["blobs"] if b["role"] == "kernels"}
plan = [b["hash"] for b in m["blobs"] if b["role"] == "plan"][0]
att = [s for s in json.load(open(sys.argv[1] + "/blobs/" + plan))["steps"] if s["op"] == "attention"]
assert len(att) == 2, len(att)  # self- and cross-attention of the one block
for s in att:
    k = s["kernel"]
    assert k["ptx"] == "" and k["cubin"] in kernels, k
    n_out = len(s["out"])
    assert [t["arg"] for t in k["tmaps"]] == [n_out, n_out + 1, n_out + 2], k["tmaps"]
    assert all(t["swizzle"] == 128 and t["box"][0] == 64 for t in k["tmaps"]), k["tmaps"]
    assert k["block"][0] == (384 if hd == 128 else 512), k
# Self-attention over 1280 tokens: 20 work tiles (head dim 128: 10 m-blocks of 128 queries x 2
# heads; 7 key tiles of 192) in 3 key parts, or 14 (head dim 64: 7 m-blocks of 192; 10 key tiles
# of 128) in 4, on a 1-D grid, all a last partial wave; cross-attention: the persistent grid of
# its 20 tiles at head dim 128, one key tile and no split at head dim 64.
grids = [s["kernel"]["grid"] for s in att]
assert grids == ([[60, 1, 1], [20, 1, 1]] if hd == 128 else [[56, 1, 1], [7, 2, 1]]), grids
print("hopper attention, head dim %d: %s" % (hd, ", ".join("grid %s smem %d" % (s["kernel"]["grid"], s["kernel"]["smem"]) for s in att)))
PY
  gen=(--prompt-embeds "$T/$p/embeds.safetensors" --negative-embeds "$T/$p/embeds.safetensors" --seed 3 --steps 2)
  "$BIN/ditrun" generate "$G" --backend cpu "${gen[@]}" --out "$T/hg.safetensors" 2>/dev/null
  "$BIN/ditrun" generate "$C" "${gen[@]}" --out "$T/hc.safetensors" 2>/dev/null
  cmp "$T/hg.safetensors" "$T/hc.safetensors"
done
