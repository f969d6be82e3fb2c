# Sourced by the serve tests (after BIN is set): a scratch folder $T removed at exit with the
# server stopped, the check that this ditrun has the HTTP library, and the server's port.
T=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
if "$BIN/ditrun" serve x 2>&1 | grep -q "built without the HTTP library"; then
  echo "$(basename "$0"): this build has no libmicrohttpd (scripts/setup.sh installs it)"; exit 1
fi
# The port a server started with --listen 127.0.0.1:0 printed to LOG (it waits up to 10 s).
server_port() {
  for _ in $(seq 100); do grep -q "listening on" "$1" && break; sleep 0.1; done
  grep -o "listening on http://127.0.0.1:[0-9]*" "$1" | grep -o "[0-9]*$" || { cat "$1" >&2; return 1; }
}
