#!/usr/bin/env bash
# valgrind_run.sh BUILD_DIR TEST...: runs each integration test (tests/integration/TEST.sh) with
# ditc and ditrun under valgrind's memcheck, through a build directory of wrappers beside BUILD_DIR
# (every other entry linked). AddressSanitizer cannot see into uninstrumented libraries (FFmpeg,
# libspng, SentencePiece, libmicrohttpd), which read and write our buffers; memcheck can. A test
# fails as it would, and any memcheck report fails the run.
set -euo pipefail
build=$(cd "$1" && pwd)
shift
wrap=$(mktemp -d)
logs=$wrap/logs
trap 'rm -rf "$wrap"' EXIT
mkdir -p "$wrap/bin" "$logs"
for e in "$build"/*; do [ "$(basename "$e")" = bin ] || ln -s "$e" "$wrap/$(basename "$e")"; done
for e in "$build"/bin/*; do
  n=$(basename "$e")
  if [ "$n" = ditc ] || [ "$n" = ditrun ]; then
    printf '#!/bin/sh\nexec valgrind -q --error-exitcode=99 --log-file=%s/%%p.log %s "$@"\n' "$logs" "$e" > "$wrap/bin/$n"
    chmod +x "$wrap/bin/$n"
  else
    ln -s "$e" "$wrap/bin/$n"
  fi
done
rc=0
for t in "$@"; do
  start=$(date +%s)
  if bash "tests/integration/$t.sh" "$wrap" > "$wrap/$t.out" 2>&1; then
    echo "valgrind: $t passed ($(( $(date +%s) - start )) s)"
  else
    cat "$wrap/$t.out"
    echo "valgrind: $t FAILED"
    rc=1
  fi
done
for f in "$logs"/*.log; do
  [ -s "$f" ] || continue
  cat "$f"
  rc=1
done
[ $rc = 0 ] || echo "valgrind: memcheck reported the above, or a test failed"
exit $rc
