#!/usr/bin/env bash
# The expert swap of a two-expert (Wan2.2-A14B) bundle under a memory budget, on the CPU backend
# (host-to-"device" copies through the same code paths as a GPU's): a budgeted generate is
# bit-identical to the resident one; what ditrun allocated at most at once is the plan's
# predicted pipeline peak to the byte, within the budget; the switch loads nothing the forwards
# before it did not (transformer_2's resident set comes in between transformer's blocks); ditc
# inspect prints the swap; fewer budget than the pipeline needs is refused naming both; tp2
# splits it per rank, and one process per rank gives the same bytes.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
d=tests/data/wan22_a14b_tiny
read -r F H W L STEPS G G2 S GB < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['text_len'], m['steps'], m['guidance'], m['guidance_2'], m['shift'], m['generate_batch'])")
c=(compile "$d" --frames "$F" --height "$H" --width "$W" --batch "$GB" --text-len "$L" -o "$T/b" -q)
gi="$d/generate_inputs.safetensors"
gen=(--prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps "$STEPS" --guidance "$G" --guidance-2 "$G2" --shift "$S" --sampler unipc)
bundle() { local line; line=$("$BIN/ditc" "${c[@]}" "$@" | tail -n 1); echo "${line##* }"; }

resident=$(bundle)
"$BIN/ditrun" generate "$resident" "${gen[@]}" --out "$T/r.safetensors" >/dev/null 2>"$T/r.err" || { cat "$T/r.err"; exit 1; }
"$BIN/st_compare" "$T/r.safetensors" "$d/generate_unipc.safetensors" latents 1e-4 >/dev/null

# The resident pipeline's peak with every block streamed; budgets between it and all resident.
check() { # $1: label, $2: bundle, $3: budget in bytes (0: none)
  local b=$2
  "$BIN/ditc" inspect "$b" > "$T/inspect"
  grep -q "^swap       .* MiB to move (.* chunks of .* MiB) into the device over the last .* forwards before the boundary, .* chunks after each block; predicted stall .* ms, predicted peak .* MiB$" "$T/inspect" ||
    { echo "$1: inspect lacks the swap"; cat "$T/inspect"; exit 1; }
  grep -q "^expert     transformer_2:$" "$T/inspect" || { echo "$1: inspect lacks transformer_2's schedule"; exit 1; }
  "$BIN/ditrun" generate "$b" "${gen[@]}" --out "$T/o.safetensors" >/dev/null 2>"$T/o.err" || { cat "$T/o.err"; exit 1; }
  cmp -s "$T/r.safetensors" "$T/o.safetensors" || { echo "$1: the budgeted generate differs from the resident one"; exit 1; }
  python3 - "$1" "$b/manifest.json" "$T/o.err" "$3" <<'PY'
import json, re, sys
label, man, err, budget = sys.argv[1], json.load(open(sys.argv[2])), open(sys.argv[3]).read(), int(sys.argv[4])
swap = man["summary"]["offload"]["swap"]
mem = re.findall(r"^ditrun: memory: .*\(rank \d+; (\d+) bytes (within the prediction|OVER the prediction)\)$", err, re.M)
# the load's line, then the one after the generate: at most at once, against the pipeline's peak
if len(mem) != 2 or mem[1] != ("0", "within the prediction"):
    sys.exit("%s: expected the allocations after the swap to equal the predicted pipeline peak: %s" % (label, mem))
if budget and swap["predicted_peak_bytes"] > budget:
    sys.exit("%s: predicted peak %d over the budget %d" % (label, swap["predicted_peak_bytes"], budget))
m = re.search(r"^ditrun: expert swap: .* (\d+) chunks loaded over (\d+) forwards before the switch, (\d+) at the switch", err, re.M)
if not m or int(m.group(3)) != 0 or int(m.group(1)) != swap["chunks"] or int(m.group(2)) < 1:
    sys.exit("%s: the switch should find transformer_2's %d chunks loaded: %s" % (label, swap["chunks"], m and m.group(0)))
steps = [l for l in err.splitlines() if l.startswith("ditrun: step ")]
sw = [l for l in steps if "(expert switch " in l]
if len(sw) != 1 or "expert transformer_2" not in sw[0]:
    sys.exit("%s: expected one step line with the switch, on transformer_2's first step: %s" % (label, sw))
print("%s: bit-identical; peak %d bytes = predicted, %d chunks over %s forwards; %s" % (label, swap["predicted_peak_bytes"], swap["chunks"],
      m.group(2), sw[0].split("(")[1].rstrip(")")))
PY
}

peak_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['summary']['offload']['swap']['predicted_peak_bytes'])" "$1/manifest.json"; }
b=$(bundle --offload chunked --chunk-mb 0.01 --residency 0)
check "every block streamed" "$b" 0
floor=$(peak_of "$b")
b=$(bundle --offload chunked --chunk-mb 0.01 --residency 1)
check "every block resident" "$b" 0
all=$(peak_of "$b")
for frac in 0.3 0.7 1.1; do
  budget=$(python3 -c "print(int($floor + ($all - $floor) * $frac))")
  gib=$(python3 -c "print('%.9f' % ($budget / 2**30))")
  b=$(bundle --offload chunked --chunk-mb 0.01 --memory-budget "$gib")
  check "budget $budget bytes" "$b" "$budget"
done
budget=$(python3 -c "print(int($floor + ($all - $floor) * 0.5))")
b=$(bundle --offload layerwise --memory-budget "$(python3 -c "print('%.9f' % ($budget / 2**30))")")
check "layerwise, budget $budget bytes" "$b" "$budget"

# Less than the pipeline needs with every block streamed: refused, naming both numbers.
if "$BIN/ditc" "${c[@]}" --offload chunked --chunk-mb 0.01 --memory-budget 0.0001 2>"$T/err"; then echo "a budget below the pipeline's floor compiled"; exit 1; fi
grep -q "memory-budget 0.0001 GiB: the two-expert pipeline needs .* GiB with every block streamed" "$T/err" || { cat "$T/err"; exit 1; }

# Tensor-parallel ranks each swap their own shard, in threads and one process per rank.
b=$(bundle --tp 2 --offload chunked --chunk-mb 0.01 --memory-budget "$(python3 -c "print('%.9f' % (($floor + $all) / 2 / 2**30))")")
"$BIN/ditrun" generate "$b" "${gen[@]}" --out "$T/t1.safetensors" >/dev/null 2>"$T/t.err" || { cat "$T/t.err"; exit 1; }
"$BIN/ditrun" generate "$(bundle --tp 2)" "${gen[@]}" --out "$T/t0.safetensors" >/dev/null 2>&1
cmp -s "$T/t0.safetensors" "$T/t1.safetensors" || { echo "tp2: the budgeted generate differs from the resident one"; exit 1; }
grep -q "^ditrun: memory: .*; 0 bytes within the prediction)$" "$T/t.err" || { echo "tp2: allocations differ from the prediction"; cat "$T/t.err"; exit 1; }
timeout 120 "$BIN/ditrun" launch -n 2 -- generate "$b" "${gen[@]}" --out "$T/tn.safetensors" >/dev/null 2>"$T/tn.err" || { cat "$T/tn.err"; exit 1; }
cmp -s "$T/t1.safetensors" "$T/tn.safetensors" || { echo "tp2: one process per rank differs"; exit 1; }
echo "tp2 (threads and launch -n 2): bit-identical to resident, allocations equal to the prediction"

# forward --expert of a budgeted bundle: selecting transformer_2 loads it at once (transformer's
# weights leave the device first); each expert's forward still matches diffusers'.
B=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['batch'])")
line=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" -o "$T/b" -q --offload chunked --chunk-mb 0.01 \
  --memory-budget 0.001 | tail -n 1)
for e in transformer transformer_2; do
  "$BIN/ditrun" forward "${line##* }" --expert "$e" --inputs "$d/forward_inputs.safetensors" --out "$T/f_$e.safetensors" >/dev/null 2>"$T/f.err" ||
    { cat "$T/f.err"; exit 1; }
  "$BIN/st_compare" "$T/f_$e.safetensors" "$d/forward_output_$e.safetensors" sample 1e-4 >/dev/null
  grep -q "^ditrun: memory: .* within the prediction)$" "$T/f.err" || { echo "forward --expert $e: over the prediction"; cat "$T/f.err"; exit 1; }
done
echo "forward --expert of a budgeted bundle: both experts match diffusers"
echo "expert_swap: budgeted two-expert generates are bit-identical to resident ones, within the predicted peak"
