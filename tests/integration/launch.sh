#!/usr/bin/env bash
# `ditrun launch` on loopback: three ranks meet and print rank 0's payload with their stderr
# prefixed; one failing rank (reporting it, or simply exiting) makes the launch exit non-zero
# within seconds, naming that rank, with no rank left running; bad usage is refused; bundles run
# one rank per process. Only the job's own ranks get in: stray connections (silent, garbage,
# no MAC, another secret, a replayed nonce, the other channel) are refused and logged while the
# job gives the same output; a rank with another secret fails the job naming the secret; ranks
# started by hand need a secret (an owner-only file, or a value). Two-expert bundles run one
# process per rank too.
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

# A port P for --port (the rendezvous takes P + 1) that is free now, below the kernel's
# ephemeral range where other tests' outgoing connections take theirs; the launch binds P + 1
# before it starts any rank.
secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
pick_port() {
  python3 -c '
import random, socket
for _ in range(100):
    p = random.randrange(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p + 1))
        print(p)
        break
    except OSError:
        pass
    finally:
        s.close()'
}

# --- strays at the rendezvous (ranks 1 and 2 start late, so the strays come first)
port=$(pick_port)
DIT_JOB_SECRET=$secret timeout 60 "$BIN/ditrun" launch --port "$port" -n 3 -- rendezvous-selftest --late-ms 1000 --timeout-ms 8000 \
  --tag "$TAG" >"$T/out" 2>"$T/err" &
lp=$!
sleep 0.2 # the launch binds its port at once
python3 tests/tools/stray_peer.py $((port + 1)) "$secret" --seconds 8 >"$T/stray" 2>&1 || fail "a stray got a proof: $(cat "$T/stray")"
wait $lp || { fail "launch with strays exited $?"; cat "$T/err"; }
grep -q ": 6 strays, 6 connected, 6 refused, 0 proofs" "$T/stray" || { fail "strays: $(cat "$T/stray")"; }
[ "$(grep -c "^\[rank 0\] ditrun: rendezvous, rank 0: refused a connection from 127.0.0.1:" "$T/err")" = 7 ] || { fail "rank 0 did not log 7 refusals"; cat "$T/err"; }
grep -q "refused a connection from 127.0.0.1:[0-9]*: not a ditrun rendezvous frame" "$T/err" &&
  [ "$(grep -c "does not prove the job secret" "$T/err")" = 4 ] || fail "refusals do not say why"
for r in 0 1 2; do grep -q "^rank $r of 3: payload selftest-" "$T/out" || fail "rank $r did not meet with strays about"; done
echo "ok: strays at the rendezvous refused, the ranks met: $(cat "$T/stray")"

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
# The failed rank slow to end after telling the others (a GPU rank tearing down): they end
# first, and the launch still names it rather than stopping it.
timeout 30 "$BIN/ditrun" launch -n 3 -- rendezvous-selftest --fail-rank 1 --fail-how report --exit-after-ms 700 --hold-ms 20000 \
  --timeout-ms 5000 --tag "$TAG" >"$T/out" 2>"$T/err"
rc=$?
[ $rc = 1 ] || { fail "slow failed rank: exit $rc (expected 1)"; cat "$T/err"; }
if grep -q "ditrun launch: rank [02] (pid [0-9]*) exited with status 86; stopping the other ranks (the failed one first given time to end)" "$T/err" &&
  grep -q "ditrun launch: error: rank 1 of 3 failed: exited with status 3" "$T/err"; then
  echo "ok: a failed rank slow to end is named: $(grep 'launch: error' "$T/err")"
else
  fail "slow failed rank not named"; cat "$T/err"
fi

# --- the secret: one rank with another fails the job naming it; none is refused at start
port=$(pick_port)
for r in 0 1; do
  s=$secret; [ $r = 1 ] && s=${secret}x
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DIT_JOB_SECRET=$s \
    timeout 30 "$BIN/ditrun" rendezvous-selftest --timeout-ms 3000 --tag "$TAG" >/dev/null 2>"$T/err$r" &
  pids[r]=$!
done
t0=$(now_ms); wait "${pids[1]}"; rc1=$?; dt=$(( $(now_ms) - t0 )); wait "${pids[0]}"; rc0=$?
[ $rc1 -ne 0 ] && [ $dt -lt 2500 ] && grep -q "refused this rank's proof of the job secret: the ranks do not share one secret; set the same DIT_JOB_SECRET or DIT_JOB_SECRET_FILE on every rank" "$T/err1" ||
  { fail "rank 1 with another secret (rc $rc1, $dt ms)"; cat "$T/err1"; }
[ $rc0 -ne 0 ] && grep -q "refused for a wrong proof of the job secret" "$T/err0" || { fail "rank 0 facing another secret (rc $rc0)"; cat "$T/err0"; }
echo "ok: a rank with another secret: $(grep error "$T/err1")"
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 "$BIN/ditrun" rendezvous-selftest 2>"$T/err"
[ $? -ne 0 ] && grep -q "without a job secret: set DIT_JOB_SECRET (a value) or DIT_JOB_SECRET_FILE" "$T/err" || { fail "no secret accepted"; cat "$T/err"; }
# An owner-only file serves every rank; one that others may read is refused, also through the launch.
printf '%s' "$secret" >"$T/secret"; chmod 644 "$T/secret"
DIT_JOB_SECRET_FILE=$T/secret timeout 30 "$BIN/ditrun" launch -n 2 -- rendezvous-selftest --timeout-ms 5000 >"$T/out" 2>"$T/err"
[ $? -ne 0 ] && grep -q "permissions 0644 are too open" "$T/err" || { fail "a secret file readable by others accepted"; cat "$T/err"; }
chmod 600 "$T/secret"
DIT_JOB_SECRET_FILE=$T/secret timeout 30 "$BIN/ditrun" launch -n 2 -- rendezvous-selftest --timeout-ms 5000 >"$T/out" 2>"$T/err" ||
  { fail "an owner-only secret file refused"; cat "$T/err"; }
echo "ok: job secrets from a file (owner-only) and refused without one"

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
# A two-expert (Wan2.2-A14B) bundle one process per rank: both experts load in every process and
# the generate switches at the boundary in all of them together; bytes equal to the one-process
# run, the per-step experts those of one rank, and the latents the one-rank bundle's (1e-4).
d22=tests/data/wan22_a14b_tiny
read -r F H W L STEPS G G2 S GB < <(python3 -c "import json; m=json.load(open('$d22/meta.json')); print(m['frames'], m['height'], m['width'], m['text_len'], m['steps'], m['guidance'], m['guidance_2'], m['shift'], m['generate_batch'])")
c22=(compile "$d22" --frames "$F" --height "$H" --width "$W" --batch "$GB" --text-len "$L" -o "$T/b22" -q)
gi="$d22/generate_inputs.safetensors"
gen22=(--prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps "$STEPS" --guidance "$G" --guidance-2 "$G2" --shift "$S" --sampler unipc)
one22=$("$BIN/ditc" "${c22[@]}" | tail -n1 | cut -d' ' -f3)
"$BIN/ditrun" generate "$one22" "${gen22[@]}" --out "$T/a1.safetensors" >/dev/null 2>"$T/a1.err" || { fail "A14B one rank"; cat "$T/a1.err"; }
for top22 in "--tp 2" "--cp 2 --cp-mode gather" "--cp 2 --cp-mode ring"; do
  # shellcheck disable=SC2086
  b22=$("$BIN/ditc" "${c22[@]}" $top22 | tail -n1 | cut -d' ' -f3)
  "$BIN/ditrun" generate "$b22" "${gen22[@]}" --out "$T/g1.safetensors" >/dev/null 2>&1
  rm -f "$T/gn.safetensors"
  timeout 120 "$BIN/ditrun" launch -n 2 -- generate "$b22" "${gen22[@]}" --out "$T/gn.safetensors" >"$T/out" 2>"$T/err" ||
    { fail "A14B launch -n 2 $top22"; cat "$T/err"; continue; }
  cmp -s "$T/g1.safetensors" "$T/gn.safetensors" || fail "A14B launch -n 2 $top22: latents differ from the one-process run"
  "$BIN/st_compare" "$T/gn.safetensors" "$T/a1.safetensors" latents 1e-4 >/dev/null || fail "A14B launch -n 2 $top22: latents differ from one rank's"
  for r in 0 1; do
    diff <(grep -o 'expert transformer[_2]*' "$T/a1.err") <(grep "^\[rank $r\] ditrun: step" "$T/err" | grep -o 'expert transformer[_2]*') >/dev/null ||
      fail "A14B launch -n 2 $top22: rank $r's experts per step differ from one rank's"
  done
  grep -q "expert transformer_2" "$T/err" || fail "A14B launch -n 2 $top22: no step ran transformer_2"
  [ "$(grep -c '^wrote' "$T/out")" = 1 ] || fail "A14B launch -n 2 $top22: expected one writer"
  echo "ok: A14B launch -n 2 $top22: two-expert generate identical to one process and to one rank"
done
# Strays at the rendezvous and at rank 0's mesh listener while a job runs (ranks started as
# torchrun would, rank 0 first, the others once the strays are queued): none is let in, each
# is refused and logged, and the output is the one-process run's.
rm -f "$T/fs.safetensors" "$T/ready"
port=$(pick_port)
start_rank() {
  RANK=$1 WORLD_SIZE=$w LOCAL_RANK=$1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DIT_JOB_SECRET=$secret \
    timeout 60 "$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$T/fs.safetensors" >/dev/null 2>"$T/err$1" &
  pids[$1]=$!
}
start_rank 0
# Ready once the strays of both of rank 0's listeners (rendezvous and mesh) are queued.
python3 tests/tools/stray_peer.py $((port + 1)) "$secret" --scan "${pids[0]}" --ready "$T/ready" --ready-after 2 --seconds 30 \
  >"$T/stray" 2>"$T/stray_err" &
sp=$!
for _ in $(seq 400); do [ -e "$T/ready" ] && break; sleep 0.05; done
for ((r = 1; r < w; r++)); do start_rank $r; done
ok=1
for ((r = 0; r < w; r++)); do wait "${pids[r]}" || { ok=0; fail "rank $r of the forward with strays exited $?"; cat "$T/err$r"; }; done
wait $sp || fail "a stray got a proof: $(cat "$T/stray" "$T/stray_err")"
cmp -s "$T/f1.safetensors" "$T/fs.safetensors" || fail "forward with strays: output differs"
grep -q "^$((port + 1)): 6 strays, 6 connected, 6 refused, 0 proofs" "$T/stray" &&
  [ "$(grep -c "^[0-9]*: 6 strays, 6 connected, 6 refused, 0 proofs" "$T/stray")" -ge 2 ] ||
  { fail "strays at the forward's rendezvous and mesh: $(cat "$T/stray" "$T/stray_err")"; cat "$T/err0"; }
[ "$(grep -c "ditrun: rendezvous, rank 0: refused a connection" "$T/err0")" = 7 ] &&
  [ "$(grep -c "ditrun: tcp collectives, rank 0: refused a connection" "$T/err0")" = 7 ] || { fail "rank 0 did not log each stray"; cat "$T/err0"; }
echo "ok: forward of $w ranks with strays at the rendezvous and the mesh: identical output; $(tr '\n' ';' <"$T/stray")"
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
