# Sourced by the tests/integration/goldens_*.sh scripts (after they set T, their scratch folder).

# A safetensors file of src's tensors, renamed (old=new), dropped (-name) and/or with f32 values
# replaced (name:v,v,..).
restage() { # src out [old=new | -name | name:v1,v2...]...
  python3 - "$@" <<'PY'
import json, struct, sys
src, out, edits = sys.argv[1], sys.argv[2], sys.argv[3:]
f = open(src, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
ren = dict(e.split("=") for e in edits if "=" in e)
drop = {e[1:] for e in edits if e.startswith("-")}
vals = {e.split(":")[0]: [float(x) for x in e.split(":")[1].split(",")] for e in edits if ":" in e}
hdr, data = {}, b""
for k, v in h.items():
    if k == "__metadata__" or k in drop: continue
    a, b = v["data_offsets"]
    raw = struct.pack("<%df" % len(vals[k]), *vals[k]) if k in vals else body[a:b]
    name = ren.get(k, k)
    hdr[name] = {"dtype": "F32" if k in vals else v["dtype"], "shape": v["shape"], "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(out, "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
}

# The command must fail with a message that contains msg.
expect_fail() { # message, command...
  local msg=$1; shift
  if "$@" >"$T/out" 2>&1; then echo "FAIL (accepted): $*"; exit 1; fi
  grep -qF -- "$msg" "$T/out" || { echo "FAIL (message lacks '$msg'): $*"; cat "$T/out"; exit 1; }
}
