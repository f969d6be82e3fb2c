#!/usr/bin/env bash
# README.md's figures against bench/results: the generated passages must be what
# bench/report.py renders from the committed results, a changed number on either side must be
# caught, and the benchmark scripts' pure-python parts (ceilings, ratios) must run. Takes the
# build directory as $1 and does not need it.
set -euo pipefail
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

python3 bench/report.py --check

# A copy of README.md, results and the golden script, each mutated once: --check must fail.
cp -r bench/results "$T/results"
mkdir -p "$T/tests/integration"
cp tests/integration/goldens.sh "$T/tests/integration/"
cp README.md "$T/README.md"
run() { python3 bench/report.py --check --readme "$T/README.md" --results "$T/results" --tests "$T/tests" > "$T/out" 2>&1; }
run || { cat "$T/out"; echo "the copies should pass before any change"; exit 1; }

expect_fail() {  # $1: what changed
  if run; then echo "--check passed although $1"; exit 1; fi
  grep -q . "$T/out" || { echo "--check failed silently after: $1"; exit 1; }
}

# A results number: the 14B chunked step time.
sed -i 's/"ms": 10735.32,/"ms": 10835.32,/' "$T/results/offload/wan14b_720p.json"
expect_fail "a step time in wan14b_720p.json changed"
grep -q '^+.*10835.3 against' "$T/out" || { cat "$T/out"; echo "the diff should show the new figure"; exit 1; }
cp bench/results/offload/wan14b_720p.json "$T/results/offload/"

# A figure in a generated passage of README.md.
# (the forward's time as the README states it now, whatever run it comes from)
fig=$(grep -o '[0-9]*\.[0-9] ms per forward' "$T/README.md" | head -n1)
[ -n "$fig" ] || { echo "no forward time in README.md"; exit 1; }
sed -i "s/${fig% ms per forward} ms per forward/1${fig% ms per forward} ms per forward/" "$T/README.md"
expect_fail "a README figure changed"
cp README.md "$T/README.md"

# A figure typed into README.md outside the generated passages.
printf '\nThe forward takes 12.5 ms.\n' >> "$T/README.md"
expect_fail "a figure was typed outside a passage"
grep -q "12.5 ms' is a figure outside" "$T/out" || { cat "$T/out"; exit 1; }
cp README.md "$T/README.md"

# The tolerance the golden test enforces is what the README states.
sed -i 's/sample 1e-4/sample 1e-6/' "$T/tests/integration/goldens.sh"
expect_fail "the golden tolerance changed"
cp tests/integration/goldens.sh "$T/tests/integration/"

# A profile that does not reproduce the recorded predictions is refused.
sed -i 's/"p_peak_tflops": 555.297/"p_peak_tflops": 563.045/' "$T/results/offload/wan14b_720p_profile.json"
expect_fail "the 14B profile was swapped"
grep -q "not those of the profile" "$T/out" || { cat "$T/out"; exit 1; }
cp bench/results/offload/wan14b_720p_profile.json "$T/results/offload/"

run || { cat "$T/out"; echo "restored copies should pass again"; exit 1; }

# A frame-count offload sweep (HunyuanVideo's, here made from FLUX's batch sweep by renaming its
# axis) is rendered in frames, and the README that lacks it no longer passes.
H="$T/results/offload/hunyuan_frames.json"
[ -e "$H" ] && mv "$H" "$T/hunyuan_frames.measured.json"
python3 - "$T/results/offload" <<'EOF'
import json, sys
o = json.load(open(sys.argv[1] + "/flux_batches.json"))
o["frames"] = o.pop("batches")
for p in o["points"]:
    p["frames"] = p.pop("batch")
json.dump(o, open(sys.argv[1] + "/hunyuan_frames.json", "w"))
EOF
python3 bench/report.py --render mmdit --results "$T/results" > "$T/mmdit" 2>&1 || { cat "$T/mmdit"; exit 1; }
tr '\n' ' ' < "$T/mmdit" | tr -s ' ' | grep -q "HunyuanVideo 1280x720 offload .* from 8 frames (predicted by F_block >= F\*: 8 frames); above it 8 frames 0.995x" ||
  { cat "$T/mmdit"; echo "the frame sweep's passage"; exit 1; }
expect_fail "a HunyuanVideo offload sweep was put in place of the measured one"
rm "$H"
[ -e "$T/hunyuan_frames.measured.json" ] && mv "$T/hunyuan_frames.measured.json" "$H"

# --write regenerates a passage that was emptied.
python3 - "$T/README.md" <<'EOF'
import re, sys
p = sys.argv[1]
t = open(p).read()
open(p, "w").write(re.sub(r"(<!-- report:status -->\n).*?(<!-- /report:status -->)", r"\1\2", t, flags=re.S))
EOF
expect_fail "a passage was emptied"
python3 bench/report.py --write --readme "$T/README.md" --results "$T/results" --tests "$T/tests"
cmp README.md "$T/README.md"

# The benchmarks' pure-python parts: ceilings against our times, without a GPU or torch.
python3 bench/wan_forward.py --dry-run --out "$T/fw" > "$T/fw.txt"
python3 - "$T/fw/forward_results.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["ceilings"]
for k in ("gemm_square", "gemm_model_shapes", "copy_d2d", "attention_cudnn"):
    assert k in c, k
assert abs(r["vs_ceiling"]["gemm"] - c["gemm_model_shapes"]["ms"] / r["split_ms"]["gemm"]) < 1e-9
assert 0 < r["vs_ceiling"]["attention"] and 0 < r["vs_ceiling"]["other_bandwidth"]
EOF
grep -q "of the bf16 GEMM ceiling measured in this run" "$T/fw.txt"
# A torch contender's kernels by class, by name.
python3 bench/ceilings.py --self-test
echo "readme figures: README.md matches bench/results; changes on either side are caught"
