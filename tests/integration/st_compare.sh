#!/usr/bin/env bash
# st_compare judges with base/parity's definitions: two zero tensors agree (cosine 1), a zero
# reference against anything else is an infinite relative error, a NaN or an unmatched infinity
# fails whatever the limits, the same infinity on both sides agrees, and a negated tensor fails
# a minimum cosine.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 - "$T" <<'PY'
import json, struct, sys
def write(path, values):
    data = struct.pack("<%df" % len(values), *values)
    head = json.dumps({"t": {"dtype": "F32", "shape": [len(values)], "data_offsets": [0, len(data)]}}).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + data)
inf, nan = float("inf"), float("nan")
cases = {"zero": [0, 0, 0, 0], "tiny": [0, 1e-30, 0, 0], "x": [1, -2, 3, 4], "neg": [-1, 2, -3, -4],
         "nan": [1, nan, 3, 4], "inf": [1, inf, 3, 4], "inf2": [1, inf, 3, 4.0001]}
for k, v in cases.items():
    write("%s/%s.safetensors" % (sys.argv[1], k), v)
PY
ok() { "$BIN/st_compare" "$T/$1.safetensors" "$T/$2.safetensors" t "${@:3}" > "$T/out" || { cat "$T/out"; echo "expected $1 vs $2 to pass"; exit 1; }; }
fail() { if "$BIN/st_compare" "$T/$1.safetensors" "$T/$2.safetensors" t "${@:3}" > "$T/out"; then cat "$T/out"; echo "expected $1 vs $2 to fail"; exit 1; fi; }
ok zero zero 0 0.999
grep -q "max_rel_err=0.000e+00 rel_l2=0.000e+00 cosine=1.000000000" "$T/out"
fail tiny zero 1e30
grep -q "max_rel_err=inf" "$T/out"
ok zero x 1 -1
grep -q "max_rel_err=1.000e+00 rel_l2=1.000e+00 cosine=0.000000000" "$T/out"
ok x x 0 1
fail neg x 10 0
grep -q "cosine=-1.000000000" "$T/out"
fail nan x 1e30
grep -q "nonfinite_mismatches=1" "$T/out"
fail nan nan 1e30
ok inf inf 0 1
fail inf x 1e30
ok inf2 inf 1e-4 0.999
echo "st_compare: edge cases judged as base/parity defines them"
