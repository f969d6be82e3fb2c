#!/usr/bin/env bash
# The CUDA graph option on the CPU backend, which has no graphs: the default (a graph where one
# applies) runs the forward step by step without a word and gives the bytes --no-cuda-graph
# gives; --cuda-graph is refused naming why (the backend; a multi-rank bundle's ranks first), with
# no output; serve takes both flags; --help names them. (tests/gpu/run.sh compares the graph's
# bytes on a GPU.)
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
d=tests/data/wan_tiny_a
IN=$d/forward_inputs.safetensors
c=(compile "$d/model" --frames 9 --height 32 --width 48 --text-len 7 -o "$T/b" -q)
one=$("$BIN/ditc" "${c[@]}" | tail -n1 | cut -d' ' -f3)
two=$("$BIN/ditc" "${c[@]}" --tp 2 | tail -n1 | cut -d' ' -f3)

# expect_refused "message" OUT command...: fails, says so, writes nothing.
expect_refused() {
  local needle=$1 out=$2; shift 2
  if "$@" 2>"$T/err"; then echo "FAIL: ran: $*"; exit 1; fi
  grep -qF -- "$needle" "$T/err" || { cat "$T/err"; echo "FAIL: the message lacks '$needle'"; exit 1; }
  [ ! -e "$out" ] || { echo "FAIL: partial output $out"; exit 1; }
  echo "ok: refused: $(head -n 1 "$T/err")"
}

for b in one two; do
  "$BIN/ditrun" forward "${!b}" --inputs "$IN" --out "$T/auto_$b.safetensors" 2>"$T/err" || { cat "$T/err"; exit 1; }
  ! grep -qi "graph" "$T/err" || { cat "$T/err"; echo "FAIL: the default said something about graphs"; exit 1; }
  "$BIN/ditrun" forward "${!b}" --no-cuda-graph --inputs "$IN" --out "$T/off_$b.safetensors" 2>/dev/null
  cmp "$T/auto_$b.safetensors" "$T/off_$b.safetensors"
done
"$BIN/st_compare" "$T/auto_one.safetensors" "$d/forward_output.safetensors" sample 1e-4

expect_refused "--cuda-graph: the cpu backend has no graphs" "$T/g1.safetensors" \
  "$BIN/ditrun" forward "$one" --cuda-graph --inputs "$IN" --out "$T/g1.safetensors"
expect_refused "--cuda-graph: graphs of multi-rank runs are not built (collectives run between steps)" "$T/g2.safetensors" \
  "$BIN/ditrun" forward "$two" --cuda-graph --inputs "$IN" --out "$T/g2.safetensors"
# The last flag wins, as for the other on/off pairs.
"$BIN/ditrun" forward "$one" --cuda-graph --no-cuda-graph --inputs "$IN" --out "$T/last.safetensors" 2>/dev/null
cmp "$T/auto_one.safetensors" "$T/last.safetensors"

# serve hands both flags to its worker as load options: the refusal is the option after them.
if "$BIN/ditrun" serve "$one" --no-cuda-graph --cuda-graph --frobnicate 2>"$T/err"; then echo "FAIL: serve ran"; exit 1; fi
grep -q "unknown option --frobnicate\|built without the HTTP library" "$T/err" || { cat "$T/err"; echo "FAIL: serve refused the graph flags"; exit 1; }

"$BIN/ditrun" --help > "$T/help" 2>&1 || true
grep -q -- "--cuda-graph  " "$T/help" && grep -q -- "--no-cuda-graph  " "$T/help" && grep -q "The default (also for" "$T/help" ||
  { cat "$T/help"; echo "FAIL: --help lacks the graph flags"; exit 1; }
echo "cuda_graph_option: default and --no-cuda-graph alike on the CPU, --cuda-graph refused by name"
