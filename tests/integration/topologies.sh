#!/usr/bin/env bash
# Parallel topologies on the CPU backend (every rank a thread of one process, in-process
# collectives) against the single-rank run: forward and a 4-step UniPC generate with CFG,
# max relative error <= 1e-5 in fp32; impossible splits refused at compile time.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
run_case() { # config, extra compile flags...
  local name=$1 d=tests/data/$1; shift
  read -r F H W B L STEPS G S < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'], m['steps'], m['guidance'], m['shift'])")
  local c=(compile "$d/model" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" -o "$T/b" -q)
  local one; one=$("$BIN/ditc" "${c[@]}" | tail -n1 | cut -d' ' -f3)
  local par; par=$("$BIN/ditc" "${c[@]}" "$@" | tail -n1 | cut -d' ' -f3)
  local gi="$d/generate_inputs.safetensors" gen=(--prompt-embeds "$d/generate_inputs.safetensors" --negative-embeds "$d/generate_inputs.safetensors" --init-latents "$d/generate_inputs.safetensors" --steps "$STEPS" --guidance "$G" --shift "$S")
  for b in one par; do
    "$BIN/ditrun" forward "${!b}" --inputs "$d/forward_inputs.safetensors" --out "$T/f_$b.safetensors" 2>/dev/null
    "$BIN/ditrun" generate "${!b}" "${gen[@]}" --out "$T/g_$b.safetensors" 2>/dev/null
  done
  echo "== $name $*"
  "$BIN/st_compare" "$T/f_par.safetensors" "$T/f_one.safetensors" sample 1e-5
  "$BIN/st_compare" "$T/g_par.safetensors" "$T/g_one.safetensors" latents 1e-5
  "$BIN/st_compare" "$T/f_par.safetensors" "$d/forward_output.safetensors" sample 1e-4
  local tp=1 cfg=1 cp=1 mode=none
  [[ " $* " == *" --tp "* ]] && tp=$(echo "$@" | sed 's/.*--tp \([0-9]*\).*/\1/')
  [[ " $* " == *" --cp "* ]] && cp=$(echo "$@" | sed 's/.*--cp \([0-9]*\).*/\1/') && mode=$(echo "$@" | sed 's/.*--cp-mode \([a-z]*\).*/\1/')
  [[ " $* " == *" --cfg-parallel "* ]] && cfg=2
  "$BIN/ditc" inspect "$par" | grep -q "world $((tp * cp * cfg)) = tp $tp x cp $cp ($mode) x cfg $cfg" || { echo "topology not in the manifest"; exit 1; }
}
run_case wan_tiny_a --tp 2
run_case wan_tiny_b --tp 2
run_case wan_tiny_b --tp 4
run_case wan_tiny_a --cfg-parallel
run_case wan_tiny_b --cfg-parallel --tp 2
run_case wan_tiny_a --cp 2 --cp-mode gather
run_case wan_tiny_a --cp 3 --cp-mode gather
run_case wan_tiny_b --cp 4 --cp-mode gather
run_case wan_tiny_a --cp 2 --cp-mode ulysses
run_case wan_tiny_b --cp 2 --cp-mode ulysses
run_case wan_tiny_b --cp 4 --cp-mode ulysses
run_case wan_tiny_b --cp 2 --cp-mode ulysses --tp 2
run_case wan_tiny_b --cp 2 --cp-mode gather --tp 2 --cfg-parallel
run_case wan_tiny_a --cp 3 --cp-mode ring
run_case wan_tiny_b --cp 2 --cp-mode ring
run_case wan_tiny_b --cp 4 --cp-mode ring
run_case wan_tiny_b --cp 2 --cp-mode ring --tp 2 --cfg-parallel
run_case wan_tiny_b --cp 4 --cp-mode usp --ulysses 2
run_case wan_tiny_b --cp 4 --cp-mode usp --ulysses 2 --cfg-parallel --ranks-per-node 4
run_case wan_tiny_a --tp 2 --sp
run_case wan_tiny_b --tp 2 --sp --cp 2 --cp-mode ring
run_case wan_tiny_b --tp 4 --sp --cfg-parallel
# Splits the model does not allow are refused at compile time, naming the field.
for bad in "wan_tiny_a --tp 4:num_attention_heads = 2 is not divisible by 4" \
           "wan_tiny_b --tp 3:num_attention_heads = 4 is not divisible by 3" \
           "wan_tiny_a --cp 4:18 tokens, which do not split into 4 equal parts" \
           "wan_tiny_a --cp 2 --cp-mode ulysses --tp 2:1 heads per tensor-parallel rank are not divisible by 2" \
           "wan_tiny_b --cp 4 --cp-mode usp --ulysses 4:U must be >= 2 and divide cp into a ring of >= 2" \
           "wan_tiny_b --tp 2 --cp 2 --ranks-per-node 3:the world of 4 ranks does not fill whole nodes" \
           "wan_tiny_b --tp 4 --ranks-per-node 2:a tensor-parallel group of 4 would straddle nodes" \
           "wan_tiny_a --sp:--sp: needs --tp >= 2"; do
  args=${bad%%:*}; msg=${bad#*:}
  set -- $args
  name=$1; shift
  if "$BIN/ditc" compile "tests/data/$name/model" --frames 9 --height 32 --width 48 "$@" -o "$T/x" 2>"$T/err"; then echo "accepted $args"; exit 1; fi
  grep -qF -- "$msg" "$T/err" || { cat "$T/err"; exit 1; }
  echo "refused: $(cat "$T/err")"
done
# Collectives staged through host copies (the path GPU ranks that share a GPU take), and
# collectives overlapped with compute on a queue of their own (each queued copy and call
# delayed, so a missing wait or a reused buffer would show): the same bytes as in place, for
# forward and generate.
# With one batch row (wan_tiny_a) Ulysses' exchanges receive into and send from the tensors
# themselves; with two (wan_tiny_b) through scratch buffers.
for case in "wan_tiny_b:--tp 2 --sp --cp 2 --cp-mode ring" "wan_tiny_b:--cp 4 --cp-mode usp --ulysses 2 --cfg-parallel" \
            "wan_tiny_b:--tp 2 --cp 2 --cp-mode ulysses" "wan_tiny_a:--cp 2 --cp-mode ulysses" "wan_tiny_b:--cp 2 --cp-mode gather"; do
  d=tests/data/${case%%:*} top=${case#*:}
  read -r F H W B L < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'])")
  # shellcheck disable=SC2086
  P=$("$BIN/ditc" compile "$d/model" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" $top -o "$T/s" -q | tail -n1 | cut -d' ' -f3)
  gen=(--prompt-embeds "$d/generate_inputs.safetensors" --negative-embeds "$d/generate_inputs.safetensors" --init-latents "$d/generate_inputs.safetensors" --steps 3)
  for mode in plain staged overlap; do
    flag=(--no-overlap-collectives); [ $mode = staged ] && flag=(--stage-collectives)
    delay=0; [ $mode = overlap ] && flag=(--overlap-collectives) && delay=300
    DIT_CPU_COPY_DELAY_US=$delay "$BIN/ditrun" forward "$P" "${flag[@]}" --inputs "$d/forward_inputs.safetensors" --out "$T/f_$mode.safetensors" 2>/dev/null
    DIT_CPU_COPY_DELAY_US=$delay "$BIN/ditrun" generate "$P" "${flag[@]}" "${gen[@]}" --out "$T/g_$mode.safetensors" 2>/dev/null
  done
  for mode in staged overlap; do
    cmp "$T/f_plain.safetensors" "$T/f_$mode.safetensors" || { echo "$mode collectives, $top: forward differs"; exit 1; }
    cmp "$T/g_plain.safetensors" "$T/g_$mode.safetensors" || { echo "$mode collectives, $top: generate differs"; exit 1; }
  done
  echo "staged and overlapped collectives, $top: identical forward and generate"
done
# ditrun bench times multi-rank bundles too: the step-synchronized split shows the collectives.
"$BIN/ditrun" bench "$P" --inputs "$d/forward_inputs.safetensors" --steps 2 2>/dev/null >"$T/bench"
awk '/^split_ms/ { for (i = 1; i < NF; i++) if ($i == "collectives") c = $(i + 1) } END { exit !(c > 0) }' "$T/bench" &&
  grep -q "^by_op_ms.* allgather=" "$T/bench" || { cat "$T/bench"; echo "no collectives in the multi-rank split"; exit 1; }
echo "multi-rank bench: $(grep ^split_ms "$T/bench")"
# The same split with the steps back to back, each timed by the events marked around it: the
# collectives still show, and -v's groups add up to the split's total.
"$BIN/ditrun" bench "$P" --inputs "$d/forward_inputs.safetensors" --steps 2 --split-in-flight -v 2>/dev/null >"$T/bench_if"
python3 - "$T/bench_if" <<'PY' || { cat "$T/bench_if"; echo "in-flight split inconsistent"; exit 1; }
import sys
lines = open(sys.argv[1]).read().splitlines()
v = next(x for x in lines if x.startswith("split_ms")).split()
assert "(in-flight" in v, v
split = {v[i]: float(v[i + 1]) for i in range(1, 9, 2)}
total = float(v[-1].rstrip(")"))
groups = [float(x.split()[2]) for x in lines if x.startswith("steps ")]
assert split["collectives"] > 0 and total > 0, v
assert abs(sum(split.values()) - total) < 0.01 and abs(sum(groups) - total) < 0.001 * len(groups) + 0.01, (split, total, sum(groups))
PY
echo "multi-rank bench, in flight: $(grep ^split_ms "$T/bench_if")"
# A rank that fails mid-forward stops the others (threads of one process) with its own error,
# with collectives in order or overlapped; nothing is written.
for ovl in "" "--overlap-collectives"; do
  rm -f "$T/ff.safetensors"
  # shellcheck disable=SC2086
  if DIT_FAIL_STEP=1:25 timeout 60 "$BIN/ditrun" forward "$P" $ovl --inputs "$d/forward_inputs.safetensors" --out "$T/ff.safetensors" 2>"$T/err"; then
    echo "a failing rank went unnoticed"; exit 1
  fi
  grep -q "rank 1.*injected failure (DIT_FAIL_STEP=1:25)" "$T/err" || { cat "$T/err"; exit 1; }
  [ ! -e "$T/ff.safetensors" ] || { echo "partial output"; exit 1; }
  echo "failing rank (${ovl:-in order}): $(head -c 200 "$T/err")"
done
# Overlap needs collectives that can queue: staged ones cannot.
if "$BIN/ditrun" forward "$P" --overlap-collectives --stage-collectives --inputs "$d/forward_inputs.safetensors" --out "$T/x.safetensors" 2>"$T/err"; then
  echo "overlap with staged collectives accepted"; exit 1
fi
grep -q "overlap-collectives: the cpu backend's collectives here are staged through host memory" "$T/err" || { cat "$T/err"; exit 1; }
[ ! -e "$T/x.safetensors" ] || { echo "partial output"; exit 1; }
