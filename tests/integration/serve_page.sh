#!/usr/bin/env bash
# The status page (`/`) rendered in headless Chromium (Debian chromium-headless-shell, from
# scripts/setup.sh): with one job running and one queued, the DOM Chromium dumps after running the
# page's script must hold what it filled in from /status (the token from the page's fragment): the
# queue counts, the running job's step and its progress element, the worker's pid, and the running
# job's latest preview (an image the page fetched from /v1/jobs/ID/preview and decoded). Without a
# Chromium binary the test says so and skips (exit 77), never passes.
set -euo pipefail
BIN=$(cd "$1/bin" && pwd)
CHROME=$(command -v chromium-headless-shell || command -v chromium || true)
[ -n "$CHROME" ] || { echo "SKIP: no chromium-headless-shell or chromium (scripts/setup.sh installs chromium-headless-shell)"; exit 77; }
. tests/tools/serve_lib.sh
d=tests/data/wan_tiny_b
id=$("$BIN/ditc" compile $d/model --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --store "$T/store" -q | tail -n 1 | cut -d' ' -f2)
tok="page-$RANDOM$RANDOM"
echo "$tok" > "$T/token"
# 200 ms a step (the test hook of runtime/serve/worker.c): the 40-step job runs while the page loads.
DITRUN_SERVE_TEST_STEP_MS=200 "$BIN/ditrun" serve "$id" --store "$T/store" --listen 127.0.0.1:0 --token-file "$T/token" 2> "$T/serve.log" &
PID=$!
port=$(server_port "$T/serve.log")
api() { # method path [body]
  python3 - "$port" "$tok" "$@" <<'PY'
import http.client, sys
port, tok, method, path = sys.argv[1:5]
c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
c.request(method, path, body=sys.argv[5] if len(sys.argv) > 5 else None, headers={"Authorization": "Bearer " + tok})
print(c.getresponse().read().decode())
PY
}
body=$(python3 -c "import base64, json; print(json.dumps({'steps': 40, 'seed': 1, 'preview_every': 2, 'inputs': base64.b64encode(open('$d/generate_inputs.safetensors', 'rb').read()).decode()}))")
for k in 1 2; do
  r=$(api POST /v1/videos "$body")
  [[ $r == *'"id":"job-'$k'"'* ]] || { echo "POST job-$k: $r"; exit 1; }
done
for _ in $(seq 100); do
  r=$(api GET /v1/jobs/job-1)
  [[ $r =~ \"state\":\"running\".*\"step\":[1-9] ]] && break
  sleep 0.1
done
wpid=$(api GET /status | python3 -c "import json, sys; print(json.load(sys.stdin)['worker']['pid'])")
t0=$(date +%s%N)
timeout 60 "$CHROME" --headless --disable-gpu --no-sandbox --virtual-time-budget=3000 --dump-dom "http://127.0.0.1:$port/#token=$tok" \
  > "$T/dom.html" 2> "$T/chrome.log" || { echo "chromium failed:"; tail -n 20 "$T/chrome.log"; exit 1; }
echo "serve_page: chromium rendered the page in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
fail=0
expect() { grep -q "$1" "$T/dom.html" || { echo "FAIL: the rendered DOM lacks $2 ($1)"; fail=1; }; }
expect '<p id="ready">readiness: ready</p>' "the readiness from /status"
expect '<td id="n_queued">1</td>' "the queued count"
expect '<td id="n_running">1</td>' "the running count"
expect '<td id="n_succeeded">0</td>' "the succeeded count"
expect '<p id="job">job-1: step [0-9]* of 40</p>' "the running job and its step"
expect '<progress id="progress" max="40" value="[1-9][0-9]*">' "the progress element filled in"
expect "<p id=\"worker\">pid $wpid, heartbeat [0-9.]* s ago, started 1 times</p>" "the worker's pid $wpid"
expect '<p id="err"></p>' "no error on the page"
# The running job's latest preview (preview_every 2): an <img> whose blob: source is the PNG from
# /v1/jobs/job-1/preview, decoded to the latents' size times 8 (2 latent frames of 6 x 4 side by side).
img=$(grep -o '<img id="preview"[^>]*>' "$T/dom.html" || true)
[ -n "$img" ] || { echo "FAIL: the rendered DOM lacks the preview's <img id=\"preview\">"; fail=1; }
for want in 'src="blob:' 'alt="job-1 after step [0-9]*"' 'data-step="[1-9][0-9]*"' 'data-width="64"' 'data-height="48"'; do
  [[ $img =~ $want ]] || { echo "FAIL: the preview image lacks $want: $img"; fail=1; }
done
[ $fail = 0 ] || { sed -n '/<body>/,/<script>/p' "$T/dom.html"; exit 1; }
api DELETE /v1/jobs/job-2 > /dev/null
api DELETE /v1/jobs/job-1 > /dev/null
kill "$PID"; wait "$PID" || true; PID=
echo "serve_page: the page in headless Chromium shows the queue, the running job's progress and preview and the worker's pid"
