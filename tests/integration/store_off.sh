#!/usr/bin/env bash
# ditrun and the DIT_STORE option. With DIT_STORE=OFF, ditrun links neither libcurl nor
# libcrypto nor any store code, still runs a bundle directory, and refuses a store identity, a
# .ditb archive, a remote and a trusted key with a message saying this build has no store
# support (ditc keeps the store either way). With DIT_STORE=ON (the default) ditrun has it.
set -euo pipefail
BIN=$(cd "$1/bin" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
D=tests/data/wan_tiny_a
read -r F H W L < <(python3 -c "import json; m=json.load(open('$D/meta.json')); print(m['frames'], m['height'], m['width'], m['text_len'])")
STORE_OPT=$(sed -n 's/^DIT_STORE:BOOL=//p' "$1/CMakeCache.txt")

nm "$BIN/ditrun" > "$T/nm"
ldd "$BIN/ditrun" > "$T/ldd"
if [ "$STORE_OPT" = OFF ]; then
  ! grep -q "libcurl\|libcrypto\|libssl" "$T/ldd" || { cat "$T/ldd"; fail "ditrun links curl or OpenSSL without the store"; }
  ! grep -q " [TtDdBb] dit_\(remote\|store\|ditb\|sign\)_" "$T/nm" || fail "store code in a ditrun built without it"
else
  grep -q "libcurl" "$T/ldd" && grep -q "libcrypto" "$T/ldd" || fail "ditrun with the store lacks curl or libcrypto"
  grep -q " T dit_remote_pull$" "$T/nm" || fail "ditrun with the store lacks the remote"
  echo "store_off: DIT_STORE=ON build: ditrun has the store (nothing more to check here)"
  exit 0
fi

S=$T/store
ID=$("$BIN/ditc" compile "$D/model" --frames "$F" --height "$H" --width "$W" --text-len "$L" --store "$S" -o "$T/out" -q | tail -n 1 | cut -d' ' -f2)
"$BIN/ditrun" verify "$T/out/$ID" | grep -q "^ok: bundle $ID verified" || fail "a bundle directory without the store"
"$BIN/ditrun" forward "$T/out/$ID" --inputs "$D/forward_inputs.safetensors" --out "$T/fwd.safetensors" 2> /dev/null
"$BIN/ditc" pack "$ID" --store "$S" -o "$T/b.ditb" > /dev/null
"$BIN/ditc" keygen -o "$T/key" > /dev/null
refused() {
  local what=$1
  shift
  if "$BIN/ditrun" "$@" 2> "$T/e"; then fail "$what: ran without the store"; fi
  grep -q "UNIMPLEMENTED.*built without store support (-DDIT_STORE=OFF)" "$T/e" || { cat "$T/e"; fail "$what: message"; }
  echo "ok: $what refused: $(head -c 200 "$T/e")"
}
refused "an identity from a local store" verify --store "$S" "$ID"
refused "an identity from a remote" verify --store http://127.0.0.1:9/ "$ID"
refused "an identity without --store" verify "$ID"
refused "a .ditb archive" verify "$T/b.ditb"
refused "a trusted key" verify --trusted-key "$T/key.pub" "$T/out/$ID"
echo "store_off: ok"
