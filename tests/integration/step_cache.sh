#!/usr/bin/env bash
# generate --step-cache on the tiny Wan pipelines (Wan2.1 T2V, Wan2.2-A14B's two experts) and the
# tiny FLUX.1-dev pipeline (with true CFG):
#  - through the library (tests/tools/step_cache_check.c): the steps skipped are the rule's
#    (cadence, delta, easycache recomputed from the recorded predictions and replayed latents,
#    teacache and fbcache from the recorded probe changes; the reset at the expert switch), each skipped
#    prediction the extrapolation of the recorded ones (easycache, teacache, fbcache: the latents plus the last full
#    step's prediction - latents), the steps before the first skip the exact run's, and the sampler fed the
#    recorded predictions from the same noise gives the cached run's latents (<= 1e-4);
#  - through ditrun: the printed skipped steps and forwards saved follow the rule; cfg lanes
#    (--cfg-parallel) take the decisions of one rank and give its latents, in one process or one
#    per lane (easycache too; teacache and fbcache in one process, lane 0's probe deciding for both
#    lanes, on Wan and FLUX.1; one process per lane and sharded lanes are refused); delta:0, easycache:0, teacache:0 and fbcache:0 equal the exact run bit for bit, a huge T skips every other step after the
#    warmup; bad values are refused naming the flag, and the other commands refuse the options.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

compile() { "$BIN/ditc" compile "$@" -o "$T/b" -q | tail -n 1 | awk '{print $NF}'; }
w21=tests/data/wan_tiny_b
a14=tests/data/wan22_a14b_tiny
flux=tests/data/flux_dev_tiny
wan=$(compile "$w21/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5)
wan_l=$(compile "$w21/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --cfg-parallel)
a=$(compile "$a14" --frames 9 --height 32 --width 48 --batch 1 --text-len 7)
a_l=$(compile "$a14" --frames 9 --height 32 --width 48 --batch 1 --text-len 7 --cfg-parallel)
fx=$(compile "$flux" --height 64 --width 64 --text-len 8)
fx_l=$(compile "$flux" --height 64 --width 64 --text-len 8 --cfg-parallel)

# The probe's change on the CPU backend against the host's computation from the values read back.
"$BIN/probe_check" "$wan" "$w21/forward_inputs.safetensors" cpu || { echo "FAIL: probe_check on Wan"; exit 1; }
"$BIN/probe_check" "$fx" "$flux/forward_inputs_b1.safetensors" cpu || { echo "FAIL: probe_check on FLUX"; exit 1; }
wan_bf=$(compile "$w21/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --dtype bf16)
"$BIN/probe_check" "$wan_bf" "$w21/forward_inputs.safetensors" cpu || { echo "FAIL: probe_check on Wan in bf16"; exit 1; }

# Refusals, naming the flag, what it expects and what it found.
expect_fail() { # message, command...
  local msg=$1; shift
  if "$@" >"$T/out" 2>&1; then echo "FAIL (accepted): $*"; exit 1; fi
  grep -qF -- "$msg" "$T/out" || { echo "FAIL (message lacks '$msg'): $*"; cat "$T/out"; exit 1; }
}

# ---- the library against the rule ----
check() { "$BIN/step_cache_check" "$@" || { echo "FAIL: step_cache_check $*"; exit 1; }; }
check "$wan" "$w21/generate_inputs.safetensors" cadence:2 10 guidance=5 shift=3
check "$wan" "$w21/generate_inputs.safetensors" cadence:3 11 guidance=5 shift=3 sampler=euler
check "$wan" "$w21/generate_inputs.safetensors" cadence:2 9 guidance=5 shift=3 warmup=0 cooldown=0
check "$wan" "$w21/generate_inputs.safetensors" delta:1e30 10 guidance=5 shift=3
check "$wan_l" "$w21/generate_inputs.safetensors" cadence:2 10 guidance=5 shift=3
# 12 steps: transformer for steps 0-3, transformer_2 from step 4 on (the cache starts over there).
check "$a" "$a14/generate_inputs.safetensors" cadence:2 12 guidance=4 guidance_2=3 shift=3 | tee "$T/a14"
grep -q "skipped 3 7 9 (6 forwards saved)" "$T/a14" || { echo "A14B: expected steps 3 7 9 skipped (4 and 5 run after the switch)"; exit 1; }
check "$a" "$a14/generate_inputs.safetensors" delta:1e30 12 guidance=4 guidance_2=3 shift=3
check "$fx" "$flux/generate_inputs.safetensors" cadence:2 10 guidance=3.5 true_cfg=2
check "$fx" "$flux/generate_inputs.safetensors" cadence:3 10 guidance=3.5
check "$fx" "$flux/generate_inputs.safetensors" delta:0.5 10 guidance=3.5 true_cfg=2 | tee "$T/fd"
grep -q "skipped 2 5 7 " "$T/fd" || { echo "delta:0.5 on FLUX: expected a full step after a skip's full step (2 5 7)"; exit 1; }
check "$fx_l" "$flux/generate_inputs.safetensors" cadence:2 10 guidance=3.5 true_cfg=2
# easycache: the thresholds are where these tiny random models' estimates let some steps skip.
check "$wan" "$w21/generate_inputs.safetensors" easycache:1 10 guidance=5 shift=3 | tee "$T/e"
grep -q "skipped 4 5 7 8 (8 forwards saved)" "$T/e" || { echo "easycache:1 on Wan: expected 4 5 7 8 skipped"; exit 1; }
check "$wan" "$w21/generate_inputs.safetensors" easycache:2 10 guidance=5 shift=3 sampler=euler
check "$wan_l" "$w21/generate_inputs.safetensors" easycache:1 10 guidance=5 shift=3
check "$a" "$a14/generate_inputs.safetensors" easycache:1 12 guidance=4 guidance_2=3 shift=3 | tee "$T/e"
grep -q "skipped 2 3 6 7 9 10 " "$T/e" || { echo "A14B easycache:1: expected 2 3 6 7 9 10 skipped (4 and 5 run after the switch)"; exit 1; }
check "$fx" "$flux/generate_inputs.safetensors" easycache:0.5 10 guidance=3.5 true_cfg=2
check "$fx" "$flux/generate_inputs.safetensors" easycache:1 10 guidance=3.5 sampler=euler
# teacache: decisions from the probes the run reported and the family's polynomial; with guidance
# both branches follow the conditional probe (each skipped guided step saves 2 forwards).
check "$wan" "$w21/generate_inputs.safetensors" teacache:0.05 10 guidance=5 shift=3 | tee "$T/t"
grep -q "skipped 3 4 5 6 8 (10 forwards saved)" "$T/t" || { echo "teacache:0.05 on Wan: expected 3 4 5 6 8 skipped"; exit 1; }
check "$a" "$a14/generate_inputs.safetensors" teacache:0.1 12 guidance=4 guidance_2=3 shift=3
check "$fx" "$flux/generate_inputs.safetensors" teacache:1 10 guidance=3.5 true_cfg=2 | tee "$T/t"
grep -q "skipped 2 4 7 (6 forwards saved)" "$T/t" || { echo "teacache:1 on FLUX: expected 2 4 7 skipped"; exit 1; }
check "$fx" "$flux/generate_inputs.safetensors" teacache:0.5 10 guidance=3.5 sampler=euler
# fbcache: decisions from the residual changes the run reported (each against the last full step's;
# skips may follow one another); the thresholds are where these tiny random models let some skip.
check "$wan" "$w21/generate_inputs.safetensors" fbcache:0.5 10 guidance=5 shift=3 | tee "$T/fb"
grep -q "skipped 3 4 7 (6 forwards saved)" "$T/fb" || { echo "fbcache:0.5 on Wan: expected 3 4 7 skipped"; exit 1; }
check "$a" "$a14/generate_inputs.safetensors" fbcache:0.5 12 guidance=4 guidance_2=3 shift=3
check "$fx" "$flux/generate_inputs.safetensors" fbcache:1 10 guidance=3.5 true_cfg=2 | tee "$T/fb"
grep -q "skipped 2 3 5 6 7 (10 forwards saved)" "$T/fb" || { echo "fbcache:1 on FLUX: expected 2 3 5 6 7 skipped"; exit 1; }
check "$fx" "$flux/generate_inputs.safetensors" fbcache:1 10 guidance=3.5 sampler=euler
# The hidden-level reuse (the block stack's residual, the head run on it): decisions and replay on
# Wan (both branches keep their own residual), across A14B's expert switch, on FLUX.1 (the head's
# slice of the image tokens is the end), HunyuanVideo and Qwen-Image; each run must report it.
check "$wan" "$w21/generate_inputs.safetensors" fbcache:0.5 10 guidance=5 shift=3 reuse=hidden
check "$wan" "$w21/generate_inputs.safetensors" teacache:0.05 10 guidance=5 shift=3 reuse=hidden
check "$a" "$a14/generate_inputs.safetensors" fbcache:0.5 12 guidance=4 guidance_2=3 shift=3 reuse=hidden
check "$fx" "$flux/generate_inputs.safetensors" fbcache:1 10 guidance=3.5 true_cfg=2 reuse=hidden | tee "$T/fb"
grep -q "skipped 2 3 5 6 7 (10 forwards saved) as the rule; cached predictions from the head on the kept residual" "$T/fb" \
  || { echo "fbcache:1 on FLUX with the hidden-level reuse: expected 2 3 5 6 7 skipped"; exit 1; }
# On cfg lanes (one process): lane 0's probe decides for both lanes, each keeps its residual.
check "$wan_l" "$w21/generate_inputs.safetensors" teacache:0.05 10 guidance=5 shift=3 reuse=hidden
check "$wan_l" "$w21/generate_inputs.safetensors" fbcache:0.5 10 guidance=5 shift=3
check "$fx_l" "$flux/generate_inputs.safetensors" fbcache:1 10 guidance=3.5 true_cfg=2 reuse=hidden
hy=tests/data/hunyuan_video_tiny
qw=tests/data/qwen_tiny
check "$(compile "$hy" --frames 5 --height 48 --width 32 --text-len 8)" "$hy/generate_inputs.safetensors" fbcache:0.5 10 guidance=6 reuse=hidden
check "$(compile "$qw" --height 48 --width 80 --text-len 8)" "$qw/generate_inputs.safetensors" fbcache:2 10 guidance=6 reuse=hidden

# ---- ditrun generate ----
# The summary line's steps and forwards against the rule; the step lines agree with it.
rule() { # log steps W C N forwards_per_skip [expert switch step]
  python3 - "$@" <<'PY'
import re, sys
log, steps, w, c, n, per = sys.argv[1], *map(int, sys.argv[2:7])
switch = int(sys.argv[7]) if len(sys.argv) > 7 else -1
skip, since = [], 0
for i in range(steps):
    if i == switch: since = 0
    full = i < w or i >= steps - c or (i - w) % n == 0 or since < 2
    since += full
    if not full: skip.append(i)
text = open(log).read()
m = re.search(r"^ditrun: step cache cadence:%d: skipped (\d+) of %d steps(?: \(([\d ]+)\))?, (\d+) forwards? saved$" % (n, steps), text, re.M)
if not m: sys.exit("no step cache line in:\n" + text)
got = [int(x) for x in (m.group(2) or "").split()]
lines = [int(x) - 1 for x in re.findall(r"^ditrun: step (\d+)/\d+ .* skipped \(step cache", text, re.M)]
if got != skip or int(m.group(1)) != len(skip) or lines != skip or int(m.group(3)) != per * len(skip):
    sys.exit("skipped %s (step lines %s), %s forwards saved; the rule: %s, %d" % (got, lines, m.group(3), skip, per * len(skip)))
print("skipped %s, %d forwards saved: the rule's" % (skip, per * len(skip)))
PY
}
wg=(--prompt-embeds "$w21/generate_inputs.safetensors" --negative-embeds "$w21/generate_inputs.safetensors" --init-latents
    "$w21/generate_inputs.safetensors" --guidance 5 --shift 3)
"$BIN/ditrun" generate "$wan" "${wg[@]}" --steps 14 --step-cache cadence:3 --cache-warmup 1 --cache-cooldown 2 --out "$T/w1.safetensors" 2>"$T/log" >/dev/null
rule "$T/log" 14 1 2 3 2
"$BIN/ditrun" generate "$wan_l" "${wg[@]}" --steps 14 --step-cache cadence:3 --cache-warmup 1 --cache-cooldown 2 --out "$T/wl.safetensors" 2>"$T/log" >/dev/null
rule "$T/log" 14 1 2 3 1
"$BIN/st_compare" "$T/wl.safetensors" "$T/w1.safetensors" latents 1e-5
# One process per lane: every process takes the same delta decisions (r of identical predictions)
# and the bytes are the one-process run's.
"$BIN/ditrun" generate "$wan_l" "${wg[@]}" --steps 10 --step-cache delta:0.5 --out "$T/d1.safetensors" 2>"$T/log" >/dev/null
grep -q "^ditrun: step cache delta:0.5: skipped 1 of 10 steps (4), 1 forward saved$" "$T/log" || { cat "$T/log"; exit 1; }
timeout 60 "$BIN/ditrun" launch -n 2 -- generate "$wan_l" "${wg[@]}" --steps 10 --step-cache delta:0.5 --out "$T/dn.safetensors" \
  2>"$T/log" >/dev/null || { cat "$T/log"; exit 1; }
[ "$(grep -c "^\[rank [01]\] ditrun: step cache delta:0.5: skipped 1 of 10 steps (4), 1 forward saved$" "$T/log")" = 2 ] ||
  { cat "$T/log"; echo "the processes' decisions differ"; exit 1; }
cmp "$T/d1.safetensors" "$T/dn.safetensors" || { echo "launch -n 2 with delta:0.5: latents differ from one process"; exit 1; }
# easycache: one rank, cfg lanes in one process and one process per lane take the same decisions
# (from the same guided predictions and latents) and give the same latents.
"$BIN/ditrun" generate "$wan" "${wg[@]}" --steps 10 --step-cache easycache:1 --out "$T/e1.safetensors" 2>"$T/log" >/dev/null
grep -q "^ditrun: step cache easycache:1: skipped 4 of 10 steps (4 5 7 8), 8 forwards saved$" "$T/log" || { cat "$T/log"; exit 1; }
"$BIN/ditrun" generate "$wan_l" "${wg[@]}" --steps 10 --step-cache easycache:1 --out "$T/el.safetensors" 2>"$T/log" >/dev/null
grep -q "^ditrun: step cache easycache:1: skipped 4 of 10 steps (4 5 7 8), 4 forwards saved$" "$T/log" || { cat "$T/log"; exit 1; }
"$BIN/st_compare" "$T/el.safetensors" "$T/e1.safetensors" latents 1e-5
timeout 60 "$BIN/ditrun" launch -n 2 -- generate "$wan_l" "${wg[@]}" --steps 10 --step-cache easycache:1 --out "$T/en.safetensors" \
  2>"$T/log" >/dev/null || { cat "$T/log"; exit 1; }
[ "$(grep -c "^\[rank [01]\] ditrun: step cache easycache:1: skipped 4 of 10 steps (4 5 7 8), 4 forwards saved$" "$T/log")" = 2 ] ||
  { cat "$T/log"; echo "the processes' easycache decisions differ"; exit 1; }
cmp "$T/el.safetensors" "$T/en.safetensors" || { echo "launch -n 2 with easycache:1: latents differ from one process"; exit 1; }
# teacache and fbcache on cfg lanes: both lanes run the plan's segments in step, lane 0's probe
# decides, each lane keeps its residual; the skipped steps and the latents are the one rank's.
same_as_one_rank() { # one-rank bundle, lanes bundle, expected skipped steps, args...
  local one=$1 lanes=$2 skipped=$3; shift 3
  "$BIN/ditrun" generate "$one" "$@" --out "$T/c1.safetensors" 2>"$T/log1" >/dev/null || { cat "$T/log1"; exit 1; }
  "$BIN/ditrun" generate "$lanes" "$@" --out "$T/cl.safetensors" 2>"$T/log" >/dev/null || { cat "$T/log"; exit 1; }
  for f in "$T/log1" "$T/log"; do
    grep -q "^ditrun: step cache .*: skipped [0-9]* of [0-9]* steps ($skipped), " "$f" || { cat "$f"; echo "expected steps $skipped skipped"; exit 1; }
  done
  grep -q "on the block stack's kept residual$" "$T/log" || { cat "$T/log"; echo "cfg lanes: expected the hidden-level reuse"; exit 1; }
  "$BIN/st_compare" "$T/cl.safetensors" "$T/c1.safetensors" latents 1e-5
}
same_as_one_rank "$wan" "$wan_l" "3 4 5 8" "${wg[@]}" --steps 10 --step-cache teacache:0.05
same_as_one_rank "$wan" "$wan_l" "3 4 7" "${wg[@]}" --steps 10 --step-cache fbcache:0.5
# Each process refuses for its own lane; which one's message comes first is the scheduler's.
expect_fail "--step-cache teacache: the probe is read between plan steps: step-by-step runs take both cfg lanes in one process; this one runs lane " \
  timeout 60 "$BIN/ditrun" launch -n 2 -- generate "$wan_l" "${wg[@]}" --steps 6 --step-cache teacache:0.1 --out "$T/bad.safetensors"
wan_cp=$(compile "$w21/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --cfg-parallel --cp 2)
expect_fail "--step-cache fbcache: the probe is read between plan steps: step-by-step runs take one rank, or one rank per cfg lane; this bundle has 4 ranks (cfg 2, cp 2, tp 1)" \
  "$BIN/ditrun" generate "$wan_cp" "${wg[@]}" --steps 6 --step-cache fbcache:0.1 --out "$T/bad.safetensors"
[ ! -e "$T/bad.safetensors" ] || { echo "a refused cached generate on lanes left output"; exit 1; }
ag=(--prompt-embeds "$a14/generate_inputs.safetensors" --negative-embeds "$a14/generate_inputs.safetensors" --init-latents
    "$a14/generate_inputs.safetensors" --guidance 4 --guidance-2 3 --shift 3 --steps 12 --step-cache cadence:2)
"$BIN/ditrun" generate "$a" "${ag[@]}" --out "$T/a1.safetensors" 2>"$T/log" >/dev/null
grep -q "step 5/12  t=857  expert transformer_2  [0-9]" "$T/log" || { cat "$T/log"; echo "expected the switch at step 5 to run"; exit 1; }
rule "$T/log" 12 2 1 2 2 4
"$BIN/ditrun" generate "$a_l" "${ag[@]}" --out "$T/al.safetensors" 2>"$T/log" >/dev/null
rule "$T/log" 12 2 1 2 1 4
"$BIN/st_compare" "$T/al.safetensors" "$T/a1.safetensors" latents 1e-5
python3 - "$flux/generate_inputs.safetensors" "$T/fi.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
e = h["latents"]; a, b = e["data_offsets"]
j = json.dumps({"init_latents": {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [0, b - a]}}).encode()
j += b" " * (-len(j) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(j)) + j + body[a:b])
PY
fg=(--prompt-embeds "$flux/generate_inputs.safetensors" --negative-embeds "$flux/generate_inputs.safetensors" --true-cfg 2
    --init-latents "$T/fi.safetensors" --guidance 3.5 --steps 10)
"$BIN/ditrun" generate "$fx" "${fg[@]}" --step-cache cadence:2 --out "$T/f1.safetensors" 2>"$T/log" >/dev/null
rule "$T/log" 10 2 1 2 2
"$BIN/ditrun" generate "$fx_l" "${fg[@]}" --step-cache cadence:2 --out "$T/fl.safetensors" 2>"$T/log" >/dev/null
rule "$T/log" 10 2 1 2 1
"$BIN/st_compare" "$T/fl.safetensors" "$T/f1.safetensors" latents 1e-5
same_as_one_rank "$fx" "$fx_l" "2 4 7" "${fg[@]}" --step-cache teacache:1
same_as_one_rank "$fx" "$fx_l" "2 3 5 6 7" "${fg[@]}" --step-cache fbcache:1
# The cache changed the result (it is lossy): cadence:2 is not the exact run.
"$BIN/ditrun" generate "$fx" "${fg[@]}" --out "$T/fx.safetensors" 2>/dev/null >/dev/null
if cmp -s "$T/f1.safetensors" "$T/fx.safetensors"; then echo "cadence:2 gave the exact latents"; exit 1; fi

# delta:0 is the exact run, bit for bit; a huge T skips every other step from the warmup on.
for b in "$wan" "$fx"; do
  if [ "$b" = "$wan" ]; then args=("${wg[@]}" --steps 10); else args=("${fg[@]}"); fi
  "$BIN/ditrun" generate "$b" "${args[@]}" --out "$T/x.safetensors" 2>/dev/null >/dev/null
  "$BIN/ditrun" generate "$b" "${args[@]}" --step-cache delta:0 --out "$T/d0.safetensors" 2>"$T/log" >/dev/null
  cmp "$T/d0.safetensors" "$T/x.safetensors" || { echo "delta:0 differs from the exact run"; exit 1; }
  grep -q "^ditrun: step cache delta:0: skipped 0 of 10 steps, 0 forwards saved$" "$T/log" || { cat "$T/log"; exit 1; }
  "$BIN/ditrun" generate "$b" "${args[@]}" --step-cache easycache:0 --out "$T/e0.safetensors" 2>"$T/log" >/dev/null
  cmp "$T/e0.safetensors" "$T/x.safetensors" || { echo "easycache:0 differs from the exact run"; exit 1; }
  grep -q "^ditrun: step cache easycache:0: skipped 0 of 10 steps, 0 forwards saved$" "$T/log" || { cat "$T/log"; exit 1; }
  "$BIN/ditrun" generate "$b" "${args[@]}" --step-cache teacache:0 --out "$T/t0.safetensors" 2>"$T/log" >/dev/null
  cmp "$T/t0.safetensors" "$T/x.safetensors" || { echo "teacache:0 differs from the exact run"; exit 1; }
  grep -q "^ditrun: step cache teacache:0: skipped 0 of 10 steps, 0 forwards saved$" "$T/log" || { cat "$T/log"; exit 1; }
  "$BIN/ditrun" generate "$b" "${args[@]}" --step-cache fbcache:0 --out "$T/b0.safetensors" 2>"$T/log" >/dev/null
  cmp "$T/b0.safetensors" "$T/x.safetensors" || { echo "fbcache:0 differs from the exact run"; exit 1; }
  grep -q "^ditrun: step cache fbcache:0: skipped 0 of 10 steps, 0 forwards saved$" "$T/log" || { cat "$T/log"; exit 1; }
  "$BIN/ditrun" generate "$b" "${args[@]}" --step-cache delta:1e30 --cache-warmup 3 --out "$T/dh.safetensors" 2>"$T/log" >/dev/null
  grep -q "^ditrun: step cache delta:1e+30: skipped 3 of 10 steps (3 5 7), 6 forwards saved$" "$T/log" || { cat "$T/log"; exit 1; }
done

# The hidden-level reuse on the tiny Wan bundle moves the result less than the output-level one at
# the same threshold (0.5: 5 and 6 steps skipped of 12), and the run says which it took.
wg12=("${wg[@]}" --steps 12)
"$BIN/ditrun" generate "$wan" "${wg12[@]}" --out "$T/x12.safetensors" 2>/dev/null >/dev/null
"$BIN/ditrun" generate "$wan" "${wg12[@]}" --step-cache fbcache:0.5 --out "$T/fh.safetensors" 2>"$T/log" >/dev/null
grep -q "forwards saved; skipped steps ran block 0 and the output head on the block stack's kept residual$" "$T/log" || { cat "$T/log"; exit 1; }
"$BIN/ditrun" generate "$wan" "${wg12[@]}" --step-cache fbcache:0.5 --cache-reuse output --out "$T/fo.safetensors" 2>"$T/log" >/dev/null
grep -q "forwards saved$" "$T/log" || { cat "$T/log"; exit 1; }
hid=$("$BIN/st_compare" "$T/fh.safetensors" "$T/x12.safetensors" latents 1 0 | grep -o "cosine=[0-9.]*" | cut -d= -f2)
out=$("$BIN/st_compare" "$T/fo.safetensors" "$T/x12.safetensors" latents 1 0 | grep -o "cosine=[0-9.]*" | cut -d= -f2)
python3 -c "import sys; h, o = map(float, sys.argv[1:]); sys.exit(not (0.99 < h and o < h))" "$hid" "$out" \
  || { echo "hidden-level reuse cosine $hid, output-level $out: expected the hidden one above 0.99 and above the output one"; exit 1; }

# Refusals (expect_fail above).
g=("$BIN/ditrun" generate "$wan" "${wg[@]}" --steps 6 --out "$T/bad.safetensors")
expect_fail "--step-cache: cadence:1: N is a step count: expected an integer >= 2 (1 would skip nothing), found 1" "${g[@]}" --step-cache cadence:1
expect_fail "--step-cache: delta:-1: T is a relative L1 distance: expected a finite number >= 0, found -1" "${g[@]}" --step-cache delta:-1
expect_fail "--step-cache: easycache:nan: T is a relative L1 change accumulated between full steps: expected a finite number >= 0, found nan" \
  "${g[@]}" --step-cache easycache:nan
expect_fail "expected off, cadence:N (N an integer >= 2), delta:T, easycache:T, teacache:T or fbcache:T (T a number >= 0), found 'every:2'" \
  "${g[@]}" --step-cache every:2
expect_fail "--cache-reuse inside: expected hidden or output" "${g[@]}" --step-cache fbcache:0.1 --cache-reuse inside
expect_fail "--cache-reuse output: teacache and fbcache choose where a skipped step reuses; cadence:2 reuses at the output" \
  "${g[@]}" --step-cache cadence:2 --cache-reuse output
expect_fail "--step-cache needs a value" "${g[@]}" --step-cache
expect_fail "--cache-warmup -1: expected a non-negative integer" "${g[@]}" --step-cache cadence:2 --cache-warmup -1
expect_fail "--cache-cooldown 1.5: expected a non-negative integer" "${g[@]}" --step-cache cadence:2 --cache-cooldown 1.5
expect_fail "--cache-warmup 7: expected at most the 6 steps" "${g[@]}" --step-cache cadence:2 --cache-warmup 7
[ ! -e "$T/bad.safetensors" ] || { echo "a refused generate left output"; exit 1; }
"${g[@]}" --cache-warmup 3 2>"$T/log" >/dev/null
grep -qF "note: --cache-warmup ignored: the step cache is off" "$T/log" || { cat "$T/log"; exit 1; }
if grep -q "skipped" "$T/log"; then echo "the cache is off, yet a skipped line"; exit 1; fi
for opt in --step-cache --cache-warmup --cache-cooldown; do
  expect_fail "$opt is an option of generate; forward does not take it" "$BIN/ditrun" forward "$wan" --inputs \
    "$w21/forward_inputs.safetensors" --out "$T/f.safetensors" "$opt" 2
done
echo "step_cache: ok"
