#!/usr/bin/env bash
# ditrun serve on loopback with the tiny Wan model: tests/tools/serve_client.py runs
# SERVE_REQUESTS (default 1000) requests with mixed deadlines and cancels, checks every accepted
# job ends with a reason and every result is byte-identical to ditrun generate --out, 401, 413,
# 429, 504, the event stream, latent previews (events, /preview: generate --preview's PNG), a
# worker killed with SIGKILL and a hanging one (test hooks of the worker, runtime/serve/worker.c).
set -euo pipefail
BIN=$(cd "$1/bin" && pwd)
. tests/tools/serve_lib.sh
d=tests/data/wan_tiny_b
gi=$d/generate_inputs.safetensors
line=$("$BIN/ditc" compile $d/model --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --store "$T/store" -q | tail -n 1)
id=$(echo "$line" | cut -d' ' -f2); dir=$(echo "$line" | cut -d' ' -f3)
refs=()
for s in 1 2 3; do
  "$BIN/ditrun" generate "$dir" --prompt-embeds $gi --negative-embeds $gi --seed $s --steps 3 --out "$T/ref$s.safetensors" 2>/dev/null
  refs+=("$T/ref$s.safetensors")
done
# The slow seed's job with previews: generate --preview's last PNG and its result.
"$BIN/ditrun" generate "$dir" --prompt-embeds $gi --negative-embeds $gi --seed 998 --steps 3 --out "$T/ref998.safetensors" \
  --preview "$T/preview998" 2>/dev/null
echo "s3cret-$RANDOM" > "$T/token"
# Served by identity from the store (--store): no path reaches the server.
DITRUN_SERVE_TEST_STEP_MS=10 DITRUN_SERVE_TEST_HANG_SEED=999 DITRUN_SERVE_TEST_SLOW_SEED=998 "$BIN/ditrun" serve "$id" --store "$T/store" --listen 127.0.0.1:0 \
  --token-file "$T/token" --max-queued 16 --max-body-mb 1 --grace-s 1 --keep-results 4096 2> "$T/serve.log" &
PID=$!
port=$(server_port "$T/serve.log")
python3 tests/tools/serve_client.py --port "$port" --token-file "$T/token" --inputs $gi --refs "${refs[@]}" \
  --count "${SERVE_REQUESTS:-1000}" --max-queued 16 --max-body $((1 << 20)) --hang-seed 999 --slow-seed 998 \
  --preview-ref "$T/ref998.safetensors" "$T/preview998/step_003.png" || { tail -n 30 "$T/serve.log"; exit 1; }
kill "$PID"; wait "$PID" || true; PID=
grep -q "signal 15: stopping" "$T/serve.log" || { echo "serve did not stop on SIGTERM"; exit 1; }
# Retention: a server keeping one result drops the older of two.
"$BIN/ditrun" serve "$id" --store "$T/store" --listen 127.0.0.1:0 --token-file "$T/token" --keep-results 1 2> "$T/serve2.log" &
PID=$!
port=$(server_port "$T/serve2.log")
python3 tests/tools/serve_client.py --port "$port" --token-file "$T/token" --inputs $gi --refs "${refs[@]}" --max-queued 16 \
  --max-body $((1 << 20)) --hang-seed 999 --slow-seed 998 --retention || { tail -n 30 "$T/serve2.log"; exit 1; }
kill "$PID"; wait "$PID" || true; PID=
echo "serve: load, admission, deadlines, cancels, recovery and retention checked"
