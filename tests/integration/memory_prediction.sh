#!/usr/bin/env bash
# The predicted peak counts every allocation the runtime makes: for each topology and offload
# mode, what ditrun allocates (arena, io, collective buffers, weights or their resident part and
# staging slots) is what the bundle predicted for that rank, to the byte. On the CPU backend the
# weights of a bundle that streams none are mapped, not allocated: then the difference is
# exactly the weight blob.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
d=tests/data/wan_tiny_b
c=(compile "$d/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 -o "$T/b" -q)
n=0
for x in "" "--tp 2 --sp" "--cp 2 --cp-mode ring" "--cp 2 --cp-mode ulysses" "--cfg-parallel --tp 2" \
         "--offload layerwise" "--offload chunked --chunk-mb 0.01" "--offload chunked --chunk-mb 0.004 --residency 0.3" \
         "--offload chunked --chunk-mb 0.01 --residency 1" "--tp 2 --sp --cp 2 --cp-mode ring --offload chunked --chunk-mb 0.01"; do
  # shellcheck disable=SC2086
  b=$("$BIN/ditc" "${c[@]}" $x | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$T/o.safetensors" >/dev/null 2>"$T/log"
  line=$(grep "^ditrun: memory:" "$T/log") || { cat "$T/log"; echo "no memory line ($x)"; exit 1; }
  gap=$(sed -n 's/.*; \([0-9]*\) bytes within the prediction).*/\1/p' <<<"$line")
  [ -n "$gap" ] || { echo "$x: $line"; exit 1; }
  want=0
  case "$x" in
    *offload*) ;;
    *) # the mapped weight blob of the rank reported (each rank's shard: the manifest's weights entry sizes)
       want=$(python3 - "$b/manifest.json" "$line" <<'PY'
import json, re, sys
m = json.load(open(sys.argv[1]))
rank = int(re.search(r"\(rank (\d+);", sys.argv[2]).group(1))
blob = next(r["weights"] for r in m["ranks"] if r["rank"] == rank)
print(next(b["size"] for b in m["blobs"] if b["hash"] == blob))
PY
) ;;
  esac
  [ "$gap" = "$want" ] || { echo "${x:-one rank}: allocated and predicted differ by $gap bytes, expected $want: $line"; exit 1; }
  echo "${x:-one rank}: ${line#ditrun: memory: }"
  n=$((n + 1))
done
echo "$n configurations: allocations match the prediction"
