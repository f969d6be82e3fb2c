#!/usr/bin/env bash
# `ditrun launch` on loopback: three ranks meet and print rank 0's payload with their stderr
# prefixed; one failing rank (reporting it, or simply exiting) makes the launch exit non-zero
# within seconds, naming that rank, with no rank left running; bad usage is refused; bundles run
# one rank per process.
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

# One process per rank on the CPU backend (collectives over loopback TCP): forward and generate
# give the bytes of the one-process run; rank 0 alone writes. A bundle for another world size is
# refused before any allocation; GPU ranks without NCCL or without a GPU are refused too.
d=tests/data/wan_tiny_b
c=(compile "$d/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 -o "$T/b" -q)
gen=(--prompt-embeds "$d/generate_inputs.safetensors" --negative-embeds "$d/generate_inputs.safetensors" --init-latents "$d/generate_inputs.safetensors" --steps 3)
for top in "--tp 2" "--tp 2 --sp --cp 2 --cp-mode ring" "--cp 4 --cp-mode usp --ulysses 2 --cfg-parallel" "--cfg-parallel --tp 2"; do
  # shellcheck disable=SC2086
  b=$("$BIN/ditc" "${c[@]}" $top | tail -n1 | cut -d' ' -f3)
  w=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['topology']['world'])" "$b/manifest.json")
  "$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$T/f1.safetensors" >/dev/null 2>&1
  "$BIN/ditrun" generate "$b" "${gen[@]}" --out "$T/g1.safetensors" >/dev/null 2>&1
  rm -f "$T/fn.safetensors" "$T/gn.safetensors"
  timeout 60 "$BIN/ditrun" launch -n "$w" -- forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$T/fn.safetensors" >"$T/out" 2>"$T/err" &&
    timeout 60 "$BIN/ditrun" launch -n "$w" -- generate "$b" "${gen[@]}" --out "$T/gn.safetensors" >>"$T/out" 2>>"$T/err" ||
    { fail "launch -n $w $top"; cat "$T/err"; continue; }
  cmp -s "$T/f1.safetensors" "$T/fn.safetensors" && cmp -s "$T/g1.safetensors" "$T/gn.safetensors" || fail "launch -n $w $top: outputs differ"
  [ "$(grep -c '^wrote' "$T/out")" = 2 ] || fail "launch -n $w $top: expected one writer per run"
  echo "ok: launch -n $w $top: forward and generate identical to one process"
done
# Overlapped collectives between processes (TCP calls on each process's collective queue, its
# copies and calls delayed): the same bytes.
rm -f "$T/fo.safetensors"
DIT_CPU_COPY_DELAY_US=300 timeout 60 "$BIN/ditrun" launch -n "$w" -- forward "$b" --overlap-collectives --inputs "$d/forward_inputs.safetensors" \
  --out "$T/fo.safetensors" >"$T/out" 2>"$T/err" || { fail "launch -n $w --overlap-collectives"; cat "$T/err"; }
cmp -s "$T/f1.safetensors" "$T/fo.safetensors" || fail "launch -n $w --overlap-collectives: output differs"
echo "ok: launch -n $w with overlapped collectives: identical forward"
# A rank that fails mid-forward (DIT_FAIL_STEP) stops every other rank with an error, never a
# hang, whether its collectives run in order or overlapped; nothing is written.
for ovl in "" "--overlap-collectives"; do
  rm -f "$T/ff.safetensors"
  t0=$(now_ms)
  # shellcheck disable=SC2086
  DIT_FAIL_STEP=1:30 DIT_CPU_COPY_DELAY_US=300 timeout 60 "$BIN/ditrun" launch -n "$w" -- forward "$b" $ovl \
    --inputs "$d/forward_inputs.safetensors" --out "$T/ff.safetensors" >"$T/out" 2>"$T/err"
  rc=$? dt=$(( $(now_ms) - t0 ))
  # Rank 1 names its failure, or the first survivor to stop names it for rank 1 (the launcher
  # may stop rank 1 before its own line is out).
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "injected failure (DIT_FAIL_STEP=1:30)" "$T/err" && [ ! -e "$T/ff.safetensors" ] &&
    [ $dt -lt 20000 ] || { fail "launch -n $w, rank 1 failing at step 30 ${ovl:-in order} (rc $rc, $dt ms)"; cat "$T/err"; }
  echo "ok: rank 1 failing at step 30 (${ovl:-in order}) stopped the launch in $dt ms"
done
# Without our launcher (torchrun's variables set by hand, nobody kills the survivors), the
# other rank stops by itself with an error naming the failure.
b2=$("$BIN/ditc" "${c[@]}" --tp 2 | tail -n1 | cut -d' ' -f3)
for how in fail die; do
  tests/tools/failing_rank.sh "$BIN/ditrun" "$b2" "$d/forward_inputs.safetensors" "$T" 60 $how || fail "torchrun-style ranks, rank 1: $how"
done
one=$("$BIN/ditc" "${c[@]}" | tail -n1 | cut -d' ' -f3)
gpu=$("$BIN/ditc" "${c[@]}" --tp 2 --dtype bf16 --target sm_90 | tail -n1 | cut -d' ' -f3)
# GPU ranks need NCCL (named by DIT_NCCL_LIBRARY here, absent) and then a GPU (none here).
for case in "$one||the bundle needs 1 rank, this launch has 2 \\(WORLD_SIZE from torchrun\\)" \
            "$gpu|/nonexistent/libnccl.so.2|one GPU process per rank needs NCCL" \
            "$gpu||(CUDA backend unavailable|one GPU process per rank needs NCCL)"; do
  IFS='|' read -r b lib msg <<<"$case"
  rm -f "$T/o.safetensors"
  DIT_NCCL_LIBRARY=$lib timeout 30 "$BIN/ditrun" launch -n 2 -- forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$T/o.safetensors" >"$T/out" 2>"$T/err"
  rc=$?
  # The first rank to fail stops the other, which may not have printed yet.
  [ $rc -ne 0 ] && grep -qE -- "$msg" "$T/err" && [ ! -e "$T/o.safetensors" ] || { fail "launched forward (rc $rc): $msg"; cat "$T/err"; }
done

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "launch: all ok"
