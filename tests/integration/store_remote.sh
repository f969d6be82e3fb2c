#!/usr/bin/env bash
# The remote store against real servers on 127.0.0.1 that this script starts and stops:
# nginx with WebDAV PUT (behind a bearer token) and a misbehaving server (tests/tools/
# fault_http.py). Push from store A, pull into an empty store B and run from it, matching
# diffusers' golden output; fetch only missing blobs; signatures (ditrun --trusted-key);
# a forged manifest; and corrupted, swapped, truncated, failing and stalling answers: each
# refused with a clear error, and nothing bad cached. Limits (--max-bytes, --max-blobs) stop a
# pull before anything is fetched, also when the manifest lies about sizes; a bearer token is
# never sent over plain http to a host that is not loopback, nor along a redirect.
set -euo pipefail
BIN=$(cd "$1/bin" && pwd)
T=$(mktemp -d)
NGINX_PID=
FAULT_PID=
cleanup() {
  [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2> /dev/null && wait "$NGINX_PID" 2> /dev/null || true
  [ -n "$FAULT_PID" ] && kill "$FAULT_PID" 2> /dev/null && wait "$FAULT_PID" 2> /dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || fail "nginx not found: install the Debian package 'nginx' (scripts/setup.sh does)"

D=tests/data/wan_tiny_a
M=$D/model
read -r F H W L < <(python3 -c "import json; m=json.load(open('$D/meta.json')); print(m['frames'], m['height'], m['width'], m['text_len'])")

# --- nginx: WebDAV PUT under a bearer token, on a free loopback port.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$T/www" "$T/nginx"
echo "s3cret-token" > "$T/token"
USER_LINE=""
[ "$(id -u)" = 0 ] && USER_LINE="user root root;"
cat > "$T/nginx/nginx.conf" <<EOF
$USER_LINE
daemon off;
worker_processes 1;
pid $T/nginx/nginx.pid;
error_log $T/nginx/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path $T/nginx/body;
  proxy_temp_path $T/nginx/proxy;
  fastcgi_temp_path $T/nginx/fastcgi;
  uwsgi_temp_path $T/nginx/uwsgi;
  scgi_temp_path $T/nginx/scgi;
  server {
    listen 127.0.0.1:$PORT;
    root $T/www;
    client_max_body_size 0;
    location / {
      if (\$http_authorization != "Bearer s3cret-token") { return 401; }
      dav_methods PUT;
      create_full_put_path on;
      dav_access user:rw group:r all:r;
    }
  }
}
EOF
"$NGINX" -c "$T/nginx/nginx.conf" -e "$T/nginx/error.log" &
NGINX_PID=$!
URL=http://127.0.0.1:$PORT
for _ in $(seq 50); do
  curl -s -o /dev/null "$URL/" && break
  sleep 0.1
done
curl -s -o /dev/null "$URL/" || fail "nginx did not start: $(cat "$T/nginx/error.log")"
R=(--remote "$URL" --token-file "$T/token" --timeout 5 --retries 1)

# --- Store A: two shapes sharing the weights blob; a signing key.
A=$T/A
ID=$("$BIN/ditc" compile "$M" --frames "$F" --height "$H" --width "$W" --text-len "$L" --store "$A" -q | cut -d' ' -f2)
ID2=$("$BIN/ditc" compile "$M" --frames $((F + 4)) --height "$H" --width "$W" --text-len "$L" --store "$A" -q | cut -d' ' -f2)
"$BIN/ditc" keygen -o "$T/key" > /dev/null
"$BIN/ditc" keygen -o "$T/other" > /dev/null

# Without the token the server refuses, and the message says why.
if "$BIN/ditc" cache push "$ID" --store "$A" --remote "$URL" --retries 0 2> "$T/e"; then fail "push without a token succeeded"; fi
grep -q "HTTP 401: access refused" "$T/e" || { cat "$T/e"; fail "401 message"; }

"$BIN/ditc" cache push "$ID" --store "$A" "${R[@]}" --sign-key "$T/key" -q > "$T/push1"
grep -q "2 blobs transferred" "$T/push1" || { cat "$T/push1"; fail "first push"; }
[ -f "$T/www/ac/$ID" ] && [ -f "$T/www/ac/$ID.sig" ] && [ "$(ls "$T/www/cas" | wc -l)" = 2 ] || fail "remote layout"
"$BIN/ditc" cache push "$ID2" --store "$A" "${R[@]}" -q > "$T/push2"
grep -q "1 blob transferred .* 1 already there" "$T/push2" || { cat "$T/push2"; fail "second push should send only the plan"; }
# Blobs travel compressed: the remote's copy is a zstd frame smaller than the blob.
WB=$(python3 -c "import json; m=json.load(open('$A/ac/$ID')); print([b['hash'] for b in m['blobs'] if b['role']=='weights'][0])")
[ "$(stat -c %s "$T/www/cas/$WB")" -lt "$(stat -c %s "$A/cas/${WB:0:2}/$WB")" ] || fail "blob not compressed in transit"
[ "$(head -c 4 "$T/www/cas/$WB" | od -An -tx1 | tr -d ' ')" = 28b52ffd ] || fail "remote blob is not a zstd frame"

# --- Pull into an empty store B with the trusted key, and run from B.
B=$T/B
"$BIN/ditc" cache pull "$ID" --store "$B" "${R[@]}" --trusted-key "$T/key.pub" -q > "$T/pull1"
grep -q "2 blobs transferred" "$T/pull1" || { cat "$T/pull1"; fail "pull into B"; }
"$BIN/ditc" cache verify --store "$B" -q > /dev/null
"$BIN/ditrun" forward --store "$B" --trusted-key "$T/key.pub" "$ID" --inputs "$D/forward_inputs.safetensors" --out "$T/fwd.safetensors" 2> /dev/null
"$BIN/st_compare" "$T/fwd.safetensors" "$D/forward_output.safetensors" sample 1e-4
# Only the missing blob is fetched for the second shape.
"$BIN/ditc" cache pull "$ID2" --store "$B" "${R[@]}" -q > "$T/pull2"
grep -q "1 blob transferred .* 1 already there" "$T/pull2" || { cat "$T/pull2"; fail "pull should fetch only the plan"; }

# --- ditrun straight from the remote into its own cache; a second run fetches nothing.
DITC_REMOTE_TOKEN=s3cret-token "$BIN/ditrun" forward --store "$URL" --cache "$T/C" "$ID" --trusted-key "$T/key.pub" \
  --inputs "$D/forward_inputs.safetensors" --out "$T/fwd2.safetensors" 2> "$T/run1.err"
grep -q "2 blobs fetched" "$T/run1.err" || { cat "$T/run1.err"; fail "ditrun --store URL"; }
cmp "$T/fwd.safetensors" "$T/fwd2.safetensors"
"$BIN/ditrun" forward --store "$URL" --token-file "$T/token" --cache "$T/C" "$ID" --inputs "$D/forward_inputs.safetensors" \
  --out "$T/fwd3.safetensors" 2> "$T/run2.err"
grep -q "0 blobs fetched" "$T/run2.err" || { cat "$T/run2.err"; fail "second run fetched again"; }

# --- Trust: another key, an unsigned entry, a forged manifest.
if "$BIN/ditrun" forward --store "$URL" --token-file "$T/token" --cache "$T/K1" --trusted-key "$T/other.pub" "$ID" \
  --inputs "$D/forward_inputs.safetensors" --out "$T/x.safetensors" 2> "$T/e"; then fail "ran with the wrong key"; fi
grep -q "not by the trusted key" "$T/e" || { cat "$T/e"; fail "wrong-key message"; }
if "$BIN/ditc" cache pull "$ID2" --store "$T/K2" "${R[@]}" --trusted-key "$T/key.pub" 2> "$T/e"; then fail "pulled an unsigned entry"; fi
grep -q "unsigned" "$T/e" || { cat "$T/e"; fail "unsigned message"; }
[ -z "$(ls "$T/K2/cas" 2> /dev/null)" ] || fail "blobs fetched before the signature was checked"
cp "$T/www/ac/$ID" "$T/ac.orig"
python3 - "$T/www/ac/$ID" "$WB" <<'PY'
import json, sys
p, h = sys.argv[1], sys.argv[2]
t = open(p).read()
m = json.loads(t)
old = [b["sha256"] for b in m["blobs"] if b["hash"] == h][0]
open(p, "w").write(t.replace(old, "0" * 64))
PY
if "$BIN/ditc" cache pull "$ID" --store "$T/K3" "${R[@]}" --trusted-key "$T/key.pub" 2> "$T/e"; then fail "pulled a forged manifest"; fi
grep -q "signature does not match" "$T/e" || { cat "$T/e"; fail "forged signed manifest message"; }
if "$BIN/ditc" cache pull "$ID" --store "$T/K4" "${R[@]}" 2> "$T/e"; then fail "pulled a blob against a forged SHA-256"; fi
grep -q "SHA-256 mismatch" "$T/e" || { cat "$T/e"; fail "forged SHA-256 message"; }
[ -z "$(ls "$T/K4/ac")" ] && [ -z "$(find "$T/K4/cas" -name "$WB")" ] && [ -z "$(ls "$T/K4/tmp")" ] || fail "a forged download was cached"
cp "$T/ac.orig" "$T/www/ac/$ID"

# --- A misbehaving server: each failure is named, retried a bounded number of times, and
# leaves nothing in the store.
fault() {
  local mode=$1 needle=$2
  rm -f "$T/fport"
  timeout 150 python3 tests/tools/fault_http.py "$T/www" "$mode" "$T/fport" 30 &
  FAULT_PID=$!
  for _ in $(seq 100); do [ -s "$T/fport" ] && break; sleep 0.05; done
  [ -s "$T/fport" ] || fail "fault server ($mode) did not start"
  local st=$T/F_$mode start=$SECONDS
  if "$BIN/ditc" cache pull "$ID" --store "$st" --remote "http://127.0.0.1:$(cat "$T/fport")" --timeout 2 --retries 1 -q 2> "$T/e"; then
    fail "pull from a '$mode' server succeeded"
  fi
  kill "$FAULT_PID" 2> /dev/null; wait "$FAULT_PID" 2> /dev/null || true
  FAULT_PID=
  grep -q -- "$needle" "$T/e" || { cat "$T/e"; fail "'$mode': message lacks '$needle'"; }
  [ -z "$(ls "$st/ac")" ] || fail "'$mode': an entry was cached"
  [ -z "$(ls "$st/tmp")" ] || fail "'$mode': temporaries left"
  "$BIN/ditc" cache verify --store "$st" -q > /dev/null || fail "'$mode': a damaged blob was cached"
  [ $((SECONDS - start)) -lt 60 ] || fail "'$mode': took $((SECONDS - start)) s"
  echo "ok: $mode refused: $(grep -m1 error "$T/e" | cut -c1-200)"
}
fault corrupt "DATA_LOSS"
fault swap "DATA_LOSS"
fault truncate "truncated"
fault error "HTTP 500"
fault slow "timed out"
# --- Limits: refused with the limit and the manifest's claim before any blob is fetched, and
# nothing is left in the store. Exactly the entry's size passes.
SIZE=$(python3 -c "import json; m=json.load(open('$A/ac/$ID')); print(sum(b['size'] for b in m['blobs']))")
empty_store() { [ -z "$(ls "$1/ac")" ] && [ -z "$(find "$1/cas" -type f)" ] && [ -z "$(ls "$1/tmp")" ]; }
limit_refused() {
  local st=$1 needle=$2
  shift 2
  if "$BIN/ditc" cache pull "$ID" --store "$st" "${R[@]}" "$@" 2> "$T/e"; then fail "a pull past a limit ($*) succeeded"; fi
  grep -q "RESOURCE_EXHAUSTED" "$T/e" && grep -q -- "$needle" "$T/e" || { cat "$T/e"; fail "limit ($*): message lacks '$needle'"; }
  empty_store "$st" || fail "limit ($*): files were left in the store"
  echo "ok: limit $* refused: $(grep -m1 error "$T/e" | cut -c1-220)"
}
limit_refused "$T/L1" "claim $SIZE bytes, more than the $((SIZE - 1)) allowed (--max-bytes); nothing transferred" --max-bytes $((SIZE - 1))
limit_refused "$T/L2" "lists 2 blobs, more than the 1 allowed (--max-blobs)" --max-blobs 1
limit_refused "$T/L3" "more than the 1024 allowed (--max-bytes)" --max-bytes 1K
"$BIN/ditc" cache pull "$ID" --store "$T/L4" "${R[@]}" --max-bytes "$SIZE" --max-blobs 2 -q > /dev/null || fail "a pull at its limits"
if "$BIN/ditc" cache pull "$ID" --store "$T/L5" "${R[@]}" --max-bytes 0 2> /dev/null; then fail "--max-bytes 0 accepted"; fi
"$BIN/ditc" --help > "$T/help"
grep -q -- "--max-bytes SIZE" "$T/help" && grep -q "default 256G" "$T/help" || fail "--max-bytes not in ditc --help"
# A manifest that lies about sizes. Claiming more than the limit allows is refused before any
# fetch though the real bytes would fit; claiming less stops the blob at the claimed size.
# Either way no entry, no temporary and no unverified blob is left.
PB=$(python3 -c "import json; m=json.load(open('$A/ac/$ID')); print([b['hash'] for b in m['blobs'] if b['role']=='plan'][0])")
lie() {
  python3 - "$T/ac.orig" "$T/www/ac/$ID" "$PB" "$1" <<'PY'
import json, sys
src, dst, h, delta = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
m = json.load(open(src))
for b in m["blobs"]:
    if b["hash"] == h:
        b["size"] = delta if delta > 1000000 else b["size"] + delta
open(dst, "w").write(json.dumps(m, indent=2) + "\n")
PY
}
lie 1099511627776
limit_refused "$T/L6" "bytes, more than the 274877906944 allowed (--max-bytes); nothing transferred"
lie 4096
limit_refused "$T/L7" "claim $((SIZE + 4096)) bytes, more than the $((SIZE + 100)) allowed" --max-bytes $((SIZE + 100))
lie -5
if "$BIN/ditc" cache pull "$ID" --store "$T/L8" "${R[@]}" 2> "$T/e"; then fail "pulled a blob larger than its manifest says"; fi
grep -q "more bytes than the .* the manifest lists for blob $PB" "$T/e" || { cat "$T/e"; fail "understated size message"; }
[ -z "$(ls "$T/L8/ac")" ] && [ -z "$(ls "$T/L8/tmp")" ] && [ -z "$(find "$T/L8/cas" -name "$PB")" ] || fail "an understated blob was cached"
"$BIN/ditc" cache verify --store "$T/L8" -q > /dev/null || fail "understated size: a damaged blob was cached"
cp "$T/ac.orig" "$T/www/ac/$ID"

# --- Tokens. Over plain http to a host that is not loopback the token is refused before any
# connection is tried (192.0.2.1 is TEST-NET, never answered): at once, naming the URL and
# the flag. With --insecure-token the same pull does try to connect, and fails doing so.
t0=$SECONDS
if "$BIN/ditc" cache pull "$ID" --store "$T/N1" --remote http://192.0.2.1:9/ --token-file "$T/token" --timeout 20 --retries 0 \
  2> "$T/e"; then fail "a token went over http to a host that is not loopback"; fi
grep -q "FAILED_PRECONDITION.*remote http://192.0.2.1:9/: refusing to send the bearer token over plain http:// to a host that is not loopback.*--insecure-token" "$T/e" ||
  { cat "$T/e"; fail "token refusal message (ditc)"; }
grep -q "curl\|192.0.2.1:9/ac" "$T/e" && { cat "$T/e"; fail "a connection was tried before the refusal"; }
if DITC_REMOTE_TOKEN=s3cret-token "$BIN/ditrun" verify --store http://192.0.2.1:9/ --cache "$T/N2" --timeout 20 --retries 0 "$ID" \
  2> "$T/e"; then fail "ditrun sent a token over http to a host that is not loopback"; fi
grep -q "refusing to send the bearer token.*--insecure-token" "$T/e" || { cat "$T/e"; fail "token refusal message (ditrun)"; }
[ $((SECONDS - t0)) -lt 10 ] || fail "the token refusals took $((SECONDS - t0)) s: a connection was tried"
if "$BIN/ditc" cache pull "$ID" --store "$T/N3" --remote http://192.0.2.1:9/ --token-file "$T/token" --insecure-token --timeout 1 \
  --retries 0 2> "$T/e"; then fail "pulled from TEST-NET"; fi
grep -q "UNAVAILABLE\|DEADLINE_EXCEEDED" "$T/e" && ! grep -q "refusing to send" "$T/e" || { cat "$T/e"; fail "--insecure-token"; }
# Loopback by name keeps the token (nginx answers 401 without it).
"$BIN/ditc" cache pull "$ID" --store "$T/N4" --remote "http://localhost:$PORT" --token-file "$T/token" -q > /dev/null ||
  fail "token to http://localhost refused"
# A redirect is an error, never followed: the token does not travel to the other host name.
rm -f "$T/fport" "$T/fport.log"
timeout 150 python3 tests/tools/fault_http.py "$T/www" redirect "$T/fport" &
FAULT_PID=$!
for _ in $(seq 100); do [ -s "$T/fport" ] && break; sleep 0.05; done
[ -s "$T/fport" ] || fail "fault server (redirect) did not start"
if "$BIN/ditc" cache pull "$ID" --store "$T/N5" --remote "http://127.0.0.1:$(cat "$T/fport")" --token-file "$T/token" --timeout 2 \
  --retries 0 2> "$T/e"; then fail "pulled through a redirect"; fi
kill "$FAULT_PID" 2> /dev/null; wait "$FAULT_PID" 2> /dev/null || true
FAULT_PID=
grep -q "HTTP 302" "$T/e" || { cat "$T/e"; fail "redirect message"; }
grep -q "^GET /ac/$ID auth=yes" "$T/fport.log" || { cat "$T/fport.log"; fail "the first request did not carry the token"; }
grep -q "/moved/" "$T/fport.log" && { cat "$T/fport.log"; fail "a redirect was followed"; }
empty_store "$T/N5" || fail "redirect: files were left in the store"

# A missing entry is a plain NOT_FOUND.
if "$BIN/ditc" cache pull 0123456789abcdef0123456789abcdef --store "$T/K5" "${R[@]}" 2> "$T/e"; then fail "pulled a missing entry"; fi
grep -q "NOT_FOUND.*HTTP 404" "$T/e" || { cat "$T/e"; fail "404 message"; }
echo "store_remote: ok"
