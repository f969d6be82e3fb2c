#!/usr/bin/env bash
# Two ranks of BUNDLE started as torchrun would start them (their variables set by hand, no
# launcher to stop the survivor), rank 1 failing at step 30 of its forward (DIT_FAIL_STEP), or
# with HOW=die its process exiting there on the spot: both must exit with an error within
# TIMEOUT seconds (rank 1 naming the injected failure), nothing written. Prints one line; exit
# status 0 when all of that holds.
# usage: tests/tools/failing_rank.sh DITRUN BUNDLE INPUTS WORKDIR [TIMEOUT] [fail|die]
set -u
BIN=$1 B=$2 IN=$3 W=$4 TMO=${5:-60} HOW=${6:-fail}
spec=1:30; [ "$HOW" = die ] && spec=1:30:die
# Any job of more than one rank started by hand needs a secret shared by its ranks.
secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
for attempt in 1 2 3; do
  # Below the kernel's ephemeral range (32768 and up), where outgoing connections take their
  # ports; rank 0 binds MASTER_PORT + 1 only after loading the bundle, so another test may
  # still hold it: then the pair runs again on another port.
  port=$(( 20000 + RANDOM % 12000 ))
  rm -f "$W/fs.safetensors"
  pids=()
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DIT_JOB_SECRET=$secret DIT_FAIL_STEP=$spec \
      timeout "$TMO" "$BIN" forward "$B" --inputs "$IN" --out "$W/fs.safetensors" >/dev/null 2>"$W/err$r" &
    pids[r]=$!
  done
  wait "${pids[0]}"; rc0=$?
  wait "${pids[1]}"; rc1=$?
  grep -q "Address already in use" "$W/err0" || break
done
if [ $rc0 -ne 0 ] && [ $rc0 -ne 124 ] && [ $rc1 -ne 0 ] && [ $rc1 -ne 124 ] && [ ! -e "$W/fs.safetensors" ] &&
   { [ "$HOW" = die ] || grep -q "injected failure" "$W/err1"; }; then
  echo "ok: rank 1 failing ($HOW), rank 0 stopped by itself: $(grep error "$W/err0" | head -c 400)"
  exit 0
fi
echo "FAIL: rank 1 failing ($HOW) at step 30 (exit statuses $rc0 and $rc1; 124 = timed out)"
cat "$W/err0" "$W/err1"
exit 1
