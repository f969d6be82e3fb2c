#!/usr/bin/env bash
# ditrun calibrate-cache and generate --step-cache auto on the tiny Wan2.1 T2V and FLUX.1-dev
# pipelines:
#  - calibrate-cache runs exact generates (teacache:0, which skips nothing) for K seeds, writes the
#    profile (the runs' probe and output changes, the fit, the gate's policy) and prints the gate's
#    choice, which is the profile's;
#  - generate --step-cache auto --cache-profile prints the profile's policy and runs it (the
#    summary line names it), and step_cache_check, given the profile, finds the run follows the
#    step-cache rule with the profile's polynomial;
#  - refusals: auto without a profile, another bundle's profile (both identities named), other
#    steps, --cache-profile without auto, the warmup overridden, a damaged profile (the field named),
#    too few steps to fit (and then no profile file, not even a partial one), a multi-rank bundle;
#    other sampling settings than the calibration's are noted.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

compile() { "$BIN/ditc" compile "$@" -o "$T/b" -q | tail -n 1 | awk '{print $NF}'; }
w21=tests/data/wan_tiny_b
flux=tests/data/flux_dev_tiny
wan=$(compile "$w21/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5)
wan_other=$(compile "$w21/model" --frames 5 --height 32 --width 32 --batch 2 --text-len 5)
fx=$(compile "$flux" --height 64 --width 64 --text-len 8)
wg=(--prompt-embeds "$w21/generate_inputs.safetensors" --negative-embeds "$w21/generate_inputs.safetensors" --guidance 5 --shift 3)
fg=(--prompt-embeds "$flux/generate_inputs.safetensors" --negative-embeds "$flux/generate_inputs.safetensors" --true-cfg 2 --guidance 3.5)

# The profile's policy as generate describes it (C's %g), and its gate statistics.
policy() {
  python3 - "$1" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
g = p["gate"]
print("%s:%s" % (g["mode"], g["cadence"] if g["mode"] == "cadence" else "%g" % g["threshold"]))
PY
}

# calibrate-cache, then generate auto with the profile, then step_cache_check with it.
calibrate_and_run() { # name bundle steps runs inputs generate-args...
  local name=$1 b=$2 steps=$3 runs=$4 inputs=$5; shift 5
  "$BIN/ditrun" calibrate-cache "$b" "$@" --seed 5 --runs "$runs" --steps "$steps" --profile-out "$T/$name.json" \
    >"$T/out" 2>"$T/log" || { cat "$T/log"; exit 1; }
  local pol
  pol=$(policy "$T/$name.json")
  for r in $(seq 1 "$runs"); do
    grep -q "^ditrun: calibration run $r of $runs (seed $((4 + r)))$" "$T/log" || { cat "$T/log"; echo "$name: no progress line for run $r"; exit 1; }
  done
  grep -q "^  gate: $pol (W 2, C 1): " "$T/out" || { cat "$T/out"; echo "$name: the printed gate is not the profile's $pol"; exit 1; }
  python3 - "$T/$name.json" "$steps" "$runs" <<'PY'
import json, math, sys
p = json.load(open(sys.argv[1])); steps, runs = int(sys.argv[2]), int(sys.argv[3])
assert p["steps"] == steps and len(p["runs"]) == runs, "steps or runs"
for k, r in enumerate(p["runs"]):
    assert r["seed"] == 5 + k, r["seed"]
    for key in ("probe_change", "output_change"):
        v = r[key]
        assert len(v) == steps and v[0] is None and all(x is not None and x >= 0 for x in v[1:]), (key, v)
f, g = p["fit"], p["gate"]
assert f["points"] == runs * (steps - 1), f["points"]
pear, lag = f["pearson"], f["lag1_autocorrelation"]
want = "teacache" if pear is not None and pear >= 0.8 else "delta" if lag is not None and lag >= 0.7 else "cadence"
assert g["mode"] == want, (g["mode"], want, pear, lag)
print("profile: %s, pearson %s, lag-1 %s, %s of %d steps in full" % (g["mode"], pear, lag, g["forwards"], steps))
PY
  "$BIN/ditrun" generate "$b" "$@" --seed 5 --steps "$steps" --step-cache auto --cache-profile "$T/$name.json" \
    --out "$T/$name.safetensors" 2>"$T/log" >/dev/null || { cat "$T/log"; exit 1; }
  grep -q "^ditrun: step cache auto: $pol (W 2, C 1) from $T/$name.json: pearson " "$T/log" || { cat "$T/log"; echo "$name: no auto line"; exit 1; }
  grep -q "^ditrun: step cache $pol: skipped " "$T/log" || { cat "$T/log"; echo "$name: the run's policy is not $pol"; exit 1; }
  if grep -q "note: --cache-profile" "$T/log"; then cat "$T/log"; echo "$name: a note on the calibration's settings, yet they are the run's"; exit 1; fi
  "$BIN/step_cache_check" "$b" "$inputs" auto "$steps" profile="$T/$name.json" "${check_keys[@]}" ||
    { echo "FAIL: step_cache_check on $name's auto run"; exit 1; }
}
check_keys=(guidance=5 shift=3)
calibrate_and_run wan "$wan" 12 2 "$w21/generate_inputs.safetensors" "${wg[@]}"
check_keys=(guidance=3.5 true_cfg=2)
calibrate_and_run flux "$fx" 10 1 "$flux/generate_inputs.safetensors" "${fg[@]}"
grep -q '"sampler": "flow-match"' "$T/flux.json" || { echo "FLUX's profile: expected the flow-match schedule"; exit 1; }

# Refusals, naming what was expected and what was found.
expect_fail() { # message, command...
  local msg=$1; shift
  if "$@" >"$T/out" 2>&1; then echo "FAIL (accepted): $*"; exit 1; fi
  grep -qF -- "$msg" "$T/out" || { echo "FAIL (message lacks '$msg'): $*"; cat "$T/out"; exit 1; }
}
mkdir "$T/p"
g=("$BIN/ditrun" generate "$wan" "${wg[@]}" --seed 5 --steps 12 --out "$T/bad.safetensors")
expect_fail "--step-cache auto: the policy comes from a cache profile: add --cache-profile P.json" "${g[@]}" --step-cache auto
expect_fail "made for bundle $(basename "$wan"), this bundle is $(basename "$wan_other")" \
  "$BIN/ditrun" generate "$wan_other" "${wg[@]}" --seed 5 --steps 12 --step-cache auto --cache-profile "$T/wan.json" --out "$T/bad.safetensors"
expect_fail "calibrated for 12 steps, this run has 10" "$BIN/ditrun" generate "$wan" "${wg[@]}" --seed 5 --steps 10 --step-cache auto \
  --cache-profile "$T/wan.json" --out "$T/bad.safetensors"
expect_fail "--cache-profile $T/wan.json: read by --step-cache auto only, found --step-cache cadence:2" "${g[@]}" --step-cache cadence:2 \
  --cache-profile "$T/wan.json"
expect_fail "--cache-warmup with --step-cache auto: the profile's threshold was chosen for its own warmup and cooldown" "${g[@]}" \
  --step-cache auto --cache-profile "$T/wan.json" --cache-warmup 1
# Other sampling settings are noted (the policy was chosen on the calibration's).
"${g[@]}" --step-cache auto --cache-profile "$T/wan.json" --guidance 4 --out "$T/note.safetensors" 2>"$T/log" >/dev/null
grep -qF "note: --cache-profile $T/wan.json was calibrated with unipc, guidance 5, shift 3; this run differs (sampler unipc, guidance 4, shift 3)" \
  "$T/log" || { cat "$T/log"; exit 1; }
wan_l=$(compile "$w21/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --cfg-parallel)
expect_fail "calibrate-cache: the probe is read between plan steps of one rank; this bundle has 2 ranks" \
  "$BIN/ditrun" calibrate-cache "$wan_l" "${wg[@]}" --seed 5 --profile-out "$T/p/x.json"
sed 's/"points": [0-9]*/"points": 3/' "$T/wan.json" >"$T/damaged.json"
expect_fail "--cache-profile: $T/damaged.json: field 'fit.points': expected 22 (the steps of the runs with both changes), found 3" "${g[@]}" \
  --step-cache auto --cache-profile "$T/damaged.json"
[ ! -e "$T/bad.safetensors" ] || { echo "a refused generate left output"; exit 1; }
expect_fail "calibrate-cache: 3 steps with both a probe change and an output change over 1 run" \
  "$BIN/ditrun" calibrate-cache "$wan" "${wg[@]}" --seed 5 --steps 4 --profile-out "$T/p/short.json"
[ -z "$(ls -A "$T/p")" ] || { ls "$T/p"; echo "a failed calibration left a file"; exit 1; }
expect_fail "--step-cache: calibrate-cache runs exact generates" "$BIN/ditrun" calibrate-cache "$wan" "${wg[@]}" --seed 5 \
  --step-cache teacache:0.1 --profile-out "$T/p/x.json"
expect_fail "--runs > 1 needs --seed S" "$BIN/ditrun" calibrate-cache "$wan" "${wg[@]}" --init-latents "$w21/generate_inputs.safetensors" \
  --runs 2 --profile-out "$T/p/x.json"
expect_fail "--target-speedup: expected a number in (1, 1000000]" "$BIN/ditrun" calibrate-cache "$wan" "${wg[@]}" --seed 5 \
  --target-speedup 1 --profile-out "$T/p/x.json"
expect_fail "--cache-profile is an option of generate; forward does not take it" "$BIN/ditrun" forward "$wan" --inputs \
  "$w21/forward_inputs.safetensors" --out "$T/f.safetensors" --cache-profile "$T/wan.json"
echo "step_cache_auto: ok"
