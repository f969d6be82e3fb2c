#!/usr/bin/env bash
# Multi-rank bundles served: a cfg-parallel and a cp 2 (ulysses) tiny Wan bundle, side by side in
# one server, each held by the one worker with all its ranks (threads of the worker, as generate
# runs them). bench/serve_overhead.py sends requests to each (routed by identity) and checks every
# result byte-identical to `ditrun generate --out` of the same bundle; its timing report (the
# job's "timing": queued, loop start, first step, end, the worker's loop) must parse and print.
set -euo pipefail
BIN=$(cd "$1/bin" && pwd)
. tests/tools/serve_lib.sh
d=tests/data/wan_tiny_b
c=(compile $d/model --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --store "$T/store" -q)
cfg=$("$BIN/ditc" "${c[@]}" --cfg-parallel | tail -n 1)
cp2=$("$BIN/ditc" "${c[@]}" --cp 2 --cp-mode ulysses | tail -n 1)
echo "tok-$RANDOM" > "$T/token"
"$BIN/ditrun" serve "$(echo "$cfg" | cut -d' ' -f2)" "$(echo "$cp2" | cut -d' ' -f2)" --store "$T/store" --listen 127.0.0.1:0 \
  --token-file "$T/token" --threads 2 --devices 1 2> "$T/serve.log" &
PID=$!
port=$(server_port "$T/serve.log")
[ "$(grep -c "(2 ranks, collectives: in-process)" "$T/serve.log")" = 2 ] || { echo "the worker did not load both bundles with 2 ranks"; cat "$T/serve.log"; exit 1; }
for line in "$cfg" "$cp2"; do
  id=$(echo "$line" | cut -d' ' -f2); dir=$(echo "$line" | cut -d' ' -f3)
  python3 bench/serve_overhead.py --port "$port" --token-file "$T/token" --ditrun "$BIN/ditrun" --bundle "$dir" --identity "$id" \
    --inputs $d/generate_inputs.safetensors --steps 3 --seed 7 -n 2 --cli-runs 1 -- --threads 2 | tee "$T/bench.txt" || { tail -n 20 "$T/serve.log"; exit 1; }
  grep -q "overhead over the CLI loop: -\?[0-9.]*%" "$T/bench.txt" && grep -q "request to first step: [0-9.]* ms" "$T/bench.txt" \
    || { echo "serve_overhead.py did not print both figures"; exit 1; }
done
kill "$PID"; wait "$PID" || true; PID=
echo "serve_ranks: cfg-parallel and cp 2 bundles served, results byte-identical to generate"
