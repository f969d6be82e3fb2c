#!/usr/bin/env bash
# `ditrun launch` on loopback: three ranks meet and print rank 0's payload with their stderr
# prefixed; one failing rank (reporting it, or simply exiting) makes the launch exit non-zero
# within seconds, naming that rank, with no rank left running; bad usage is refused.
set -uo pipefail
BIN=$1/bin
T=$(mktemp -d)
TAG="launch-test-$$-$RANDOM"
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }

now_ms() { date +%s%3N; }

# --- all ranks meet
timeout 30 "$BIN/ditrun" launch -n 3 -- rendezvous-selftest --timeout-ms 5000 --tag "$TAG" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] || { fail "launch -n 3 exited $rc"; cat "$T/err"; }
for r in 0 1 2; do
  grep -q "^rank $r of 3: payload selftest-" "$T/out" || fail "rank $r did not print its payload"
  grep -q "^\[rank $r\] rendezvous-selftest: rank $r met 3 ranks" "$T/err" || fail "rank $r's stderr is not prefixed"
done
[ "$(sed -n 's/.*payload //p' "$T/out" | sort -u | wc -l)" = 1 ] || fail "the ranks got different payloads"
echo "ok: 3 ranks met"; cat "$T/out"

# --- one rank fails: quickly, by name, nobody left behind
for how in report exit; do
  t0=$(now_ms)
  timeout 30 "$BIN/ditrun" launch -n 3 -- rendezvous-selftest --fail-rank 1 --fail-how $how --hold-ms 20000 \
    --timeout-ms 5000 --tag "$TAG" >"$T/out" 2>"$T/err"
  rc=$?
  dt=$(( $(now_ms) - t0 ))
  [ $rc -ne 0 ] && [ $rc -le 2 ] || { fail "fail-how $how: exit $rc (expected 1)"; cat "$T/err"; }
  [ $dt -lt 8000 ] || fail "fail-how $how: took $dt ms"
  grep -q "ditrun launch: error: rank 1 of 3 failed: exited with status 3" "$T/err" || { fail "fail-how $how: rank 1 not named"; cat "$T/err"; }
  if pgrep -f -- "--tag $TAG" >/dev/null; then fail "fail-how $how: ranks left running"; pgrep -af -- "--tag $TAG"; fi
  echo "ok: rank 1 failing ($how) stopped the launch in $dt ms: $(grep 'launch: error' "$T/err")"
done

# --- usage
"$BIN/ditrun" launch -- rendezvous-selftest 2>"$T/err"; [ $? -eq 2 ] && grep -q "missing -n" "$T/err" || fail "missing -n accepted"
"$BIN/ditrun" launch -n 0 -- x 2>"$T/err"; [ $? -eq 2 ] || fail "-n 0 accepted"
"$BIN/ditrun" launch -n 2 2>"$T/err"; [ $? -eq 2 ] && grep -q "missing the command" "$T/err" || fail "missing command accepted"
"$BIN/ditrun" launch -n 2 --port 99999 -- x 2>"$T/err"; [ $? -eq 2 ] || fail "--port 99999 accepted"
# A command that fails in every rank reports the first one.
timeout 30 "$BIN/ditrun" launch -n 2 -- no-such-command >"$T/out" 2>"$T/err"
[ $? -eq 1 ] && grep -q "\[rank .\] .*unknown command 'no-such-command'" "$T/err" || { fail "failing command"; cat "$T/err"; }

# A launched forward whose bundle was compiled for another world size is refused before any
# allocation; one for this world size is refused too (one process per rank needs
# NCCL, not in this build) with the way to run it. No output either way.
d=tests/data/wan_tiny_b
c=(compile "$d/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 -o "$T/b" -q)
one=$("$BIN/ditc" "${c[@]}" | tail -n1 | cut -d' ' -f3)
two=$("$BIN/ditc" "${c[@]}" --tp 2 | tail -n1 | cut -d' ' -f3)
for case in "$one|the bundle needs 1 rank, this launch has 2 (WORLD_SIZE from torchrun)" \
            "$two|one process per rank needs NCCL collectives, not in this build; run one ditrun without a launcher"; do
  b=${case%%|*}; msg=${case#*|}
  timeout 30 "$BIN/ditrun" launch -n 2 -- forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$T/o.safetensors" >"$T/out" 2>"$T/err"
  rc=$?
  # The first rank to fail stops the other, which may not have printed yet.
  [ $rc -ne 0 ] && grep -qF -- "$msg" "$T/err" && [ ! -e "$T/o.safetensors" ] || { fail "launched forward (rc $rc)"; cat "$T/err"; }
done

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "launch: all ok"
