#!/usr/bin/env bash
# The offload plan in the bundle: ditc --offload writes per-block F*, T_comp, T_pref, resident
# chunks into each rank's plan (its typed offload section) and the predicted step time and peak
# there and into the manifest's summary, ditc inspect shows them, the options and the profile
# are part of the identity, and bad requests (and bad profiles) are refused.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
M=tests/data/wan_tiny_b/model
c=(compile "$M" --frames 5 --height 48 --width 32 --text-len 5 --batch 2 -o "$T/b" -q)
plain=$("$BIN/ditc" "${c[@]}" | cut -d' ' -f2)
cat > "$T/slow.json" <<'JSON'
{"name": "slow-link", "p_peak_tflops": 0.001, "bw_h2d_gbs": 0.01, "eta_comp": 0.5, "eta_pref": 0.5}
JSON
a=$("$BIN/ditc" "${c[@]}" --offload chunked --chunk-mb 0.01 --residency 0.4 --profile "$T/slow.json" | cut -d' ' -f2)
b=$("$BIN/ditc" "${c[@]}" --offload chunked --chunk-mb 0.01 --residency 0.6 --profile "$T/slow.json" | cut -d' ' -f2)
[ "$plain" != "$a" ] && [ "$a" != "$b" ] || { echo "offload options must change the identity"; exit 1; }
"$BIN/ditc" inspect "$T/b/$a" > "$T/inspect"
grep -q "^offload    chunked, chunks of 0.01 MiB: predicted step" "$T/inspect"
grep -q "^profile    slow-link: 0.001 TFLOP/s x 0.5, host-to-device 0.01 GB/s x 0.5" "$T/inspect"
[ "$(grep -cE '^ +[0-9]+ ' "$T/inspect")" = 3 ] || { cat "$T/inspect"; echo "expected 3 block rows"; exit 1; }
python3 - "$T/b/$a" "$T/b/$b" <<'PY'
import json, sys
def offload(d):  # the summary's digest, with the blocks of rank 0's typed plan section
    m = json.load(open(d + "/manifest.json"))
    return dict(m["summary"]["offload"], blocks=json.load(open(d + "/blobs/" + m["ranks"][0]["plan"]))["offload"]["blocks"])
a, b = (offload(d) for d in sys.argv[1:3])
assert a["profile"]["name"] == "slow-link" and a["profile"]["bw_h2d_gbs"] == 0.01, a["profile"]
for blk in a["blocks"]:
    assert 0.4 <= blk["resident"] < 0.6 and blk["chunks"] > 1, blk
    assert blk["range"][1] > blk["range"][0]
# More resident: more memory, no more time.
assert b["predicted_peak_bytes"] > a["predicted_peak_bytes"] and b["predicted_step_ms"] <= a["predicted_step_ms"]
print("offload plans:", a["predicted_step_ms"], "ms /", a["predicted_peak_bytes"], "B vs", b["predicted_step_ms"], "ms /", b["predicted_peak_bytes"], "B")
PY
fail() { if "$BIN/ditc" "${c[@]}" "$@" 2>"$T/err"; then echo "accepted: $*"; exit 1; fi; grep -qF -- "$MSG" "$T/err" || { cat "$T/err"; exit 1; }; }
MSG="need --offload layerwise|chunked" fail --residency 0.5
MSG="--offload sideways" fail --offload sideways
MSG="at most one of" fail --offload chunked --residency 0.5 --memory-budget 1
MSG="even with every block streamed" fail --offload chunked --memory-budget 0.000001
MSG="not a preset" fail --offload chunked --profile "$T/missing.json"
echo "offload plan: ok"
# The profile's values are part of the identity, rounded to 3 significant digits: a profile
# that differs only beyond them shares the bundle, another preset does not.
printf '{"name": "host-a", "p_peak_tflops": 0.0010004, "bw_h2d_gbs": 0.0100049, "eta_comp": 0.5, "eta_pref": 0.5}\n' > "$T/slow2.json"
a2=$("$BIN/ditc" "${c[@]}" --offload chunked --chunk-mb 0.01 --residency 0.4 --profile "$T/slow2.json" | cut -d' ' -f2)
h1=$("$BIN/ditc" "${c[@]}" --offload chunked --chunk-mb 0.01 --residency 0.4 --profile h100-pcie | cut -d' ' -f2)
[ "$a" = "$a2" ] || { echo "profiles equal to 3 digits must share the identity"; exit 1; }
[ "$a" != "$h1" ] || { echo "another profile must change the identity"; exit 1; }
echo "profile in the identity: equal to 3 digits shares $a, h100-pcie gives $h1"
# A calibrated profile counts the runtime's own device memory (overhead_mib): the predicted peak
# grows by exactly that, the identity changes, and a bad value is refused naming the field.
printf '{"name": "slow-link", "p_peak_tflops": 0.001, "bw_h2d_gbs": 0.01, "eta_comp": 0.5, "eta_pref": 0.5, "overhead_mib": 100}\n' > "$T/ov.json"
ao=$("$BIN/ditc" "${c[@]}" --offload chunked --chunk-mb 0.01 --residency 0.4 --profile "$T/ov.json" | cut -d' ' -f2)
[ "$ao" != "$a" ] || { echo "the overhead must change the identity"; exit 1; }
python3 - "$T/b/$a/manifest.json" "$T/b/$ao/manifest.json" <<'PY'
import json, sys
a, o = (json.load(open(p))["summary"]["offload"] for p in sys.argv[1:3])
assert o["overhead_bytes"] == 100 * 2**20 and a["overhead_bytes"] == 0, (a["overhead_bytes"], o["overhead_bytes"])
for k in ("predicted_peak_bytes", "resident_peak_bytes"):
    assert o[k] - a[k] == 100 * 2**20, (k, a[k], o[k])
assert o["predicted_step_ms"] == a["predicted_step_ms"]
PY
printf '{"name": "x", "p_peak_tflops": 1, "bw_h2d_gbs": 1, "eta_comp": 0.5, "eta_pref": 0.5, "overhead_mib": -1}\n' > "$T/bad.json"
MSG="bad.json: field 'overhead_mib': expected a number in [0, 1000000000], found -1" fail --offload chunked --profile "$T/bad.json"
echo "profile overhead: counted in the predicted peaks"
# A calibrated cost per plan step lengthens every block's T_comp by its steps' share (and the
# no-offload prediction by all of them); collectives are modeled only where the profile rates
# them (coll_gbs); both change the identity; bad values are refused naming the field.
printf '{"name": "steps", "p_peak_tflops": 0.001, "bw_h2d_gbs": 0.01, "eta_comp": 0.5, "eta_pref": 0.5, "step_overhead_us": 250}\n' > "$T/st.json"
as=$("$BIN/ditc" "${c[@]}" --offload chunked --chunk-mb 0.01 --residency 0.4 --profile "$T/st.json" | cut -d' ' -f2)
[ "$as" != "$a" ] || { echo "the step overhead must change the identity"; exit 1; }
python3 - "$T/b/$a" "$T/b/$as" <<'PY'
import json, sys
def offload(d):  # the summary's digest, with the blocks of rank 0's typed plan section
    m = json.load(open(d + "/manifest.json"))
    return dict(m["summary"]["offload"], blocks=json.load(open(d + "/blobs/" + m["ranks"][0]["plan"]))["offload"]["blocks"])
a, s = (offload(d) for d in sys.argv[1:3])
assert s["profile"]["step_overhead_us"] == 250 and a["profile"]["step_overhead_us"] == 0
# T_comp grows by the block's plan steps x 0.25 ms: a whole number of steps, within one of every
# other block's (a block whose last residual add the next block's first norm makes has one less)
d = [bs["t_comp_ms"] - ba["t_comp_ms"] for ba, bs in zip(a["blocks"], s["blocks"])]
ks = [x / 0.25 for x in d]
k = ks[0]
assert all(x >= 10 and abs(x - round(x)) < 1e-6 for x in ks) and max(ks) - min(ks) <= 1 + 1e-6, d
assert all(b["t_coll_ms"] == 0 and b["yield_steps"] == [] for b in s["blocks"])  # no collectives in a one-rank plan
print("step overhead: %d steps a block, +%.2f ms each" % (round(k), d[0]))
PY
printf '{"name": "x", "p_peak_tflops": 1, "bw_h2d_gbs": 1, "eta_comp": 0.5, "eta_pref": 0.5, "coll_gbs": "fast"}\n' > "$T/bad.json"
MSG="bad.json: field 'coll_gbs': expected a number" fail --offload chunked --profile "$T/bad.json"
printf '{"name": "x", "p_peak_tflops": 1, "bw_h2d_gbs": 1, "eta_comp": 0.5, "eta_pref": 0.5, "eta_prf": 0.5}\n' > "$T/bad.json"
MSG="bad.json: field '(top level)': unknown member \"eta_prf\"" fail --offload chunked --profile "$T/bad.json"
printf '{"name": "x", "p_peak_tflops": 1, "bw_h2d_gbs": 1, "eta_comp": 1.5, "eta_pref": 0.5}\n' > "$T/bad.json"
MSG="bad.json: field 'eta_comp': expected a number in [0, 1], found 1.5" fail --offload chunked --profile "$T/bad.json"
echo "profiles: unknown fields and values out of range refused"
