#!/usr/bin/env bash
# The remote store against real servers on 127.0.0.1 that this script starts and stops:
# nginx with WebDAV PUT (behind a bearer token) and a misbehaving server (tests/tools/
# fault_http.py). Push from store A, pull into an empty store B and run from it, matching
# diffusers' golden output; fetch only missing blobs; signatures (ditrun --trusted-key);
# a forged manifest; and corrupted, swapped, truncated, failing and stalling answers: each
# refused with a clear error, and nothing bad cached.
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
# A missing entry is a plain NOT_FOUND.
if "$BIN/ditc" cache pull 0123456789abcdef0123456789abcdef --store "$T/K5" "${R[@]}" 2> "$T/e"; then fail "pulled a missing entry"; fi
grep -q "NOT_FOUND.*HTTP 404" "$T/e" || { cat "$T/e"; fail "404 message"; }
echo "store_remote: ok"
