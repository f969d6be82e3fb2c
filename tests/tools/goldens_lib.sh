# Sourced by the tests/integration/goldens_*.sh scripts: T, a scratch folder removed at exit, and
# the helpers below.
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

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

# src's tensors with `name` stored as a bool tensor (safetensors BOOL: one byte, nonzero = 1).
as_bool() { # src out name
  python3 - "$@" <<'PY'
import json, struct, sys
src, out, name = sys.argv[1:4]
f = open(src, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); body = f.read()
fmt = {"F32": "f", "I64": "q", "I32": "i", "BF16": "H", "F16": "H"}
hdr, data = {}, b""
for k, v in h.items():
    if k == "__metadata__": continue
    a, b = v["data_offsets"]
    raw = body[a:b]
    if k == name:
        size = struct.calcsize(fmt[v["dtype"]])
        raw = bytes(1 if any(raw[i:i + size]) and raw[i:i + size] != b"\x00\x00\x00\x80" else 0 for i in range(0, len(raw), size))
    hdr[k] = {"dtype": "BOOL" if k == name else v["dtype"], "shape": v["shape"], "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
open(out, "wb").write(struct.pack("<Q", len(j)) + j + data)
PY
}

# dst: a copy of the folder src with its config.json edited: fields set to JSON values, or removed.
edit_config() { # src dst [field=json-value | -field]...
  local src=$1 dst=$2
  shift 2
  rm -rf "$dst" && cp -r "$src" "$dst"
  python3 - "$dst/config.json" "$@" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p))
for e in sys.argv[2:]:
    if e.startswith("-"): c.pop(e[1:]); continue
    k, v = e.split("=", 1); c[k] = json.loads(v)
json.dump(c, open(p, "w"), indent=2)
PY
}

# The command must fail with a message that contains msg.
expect_fail() { # message, command...
  local msg=$1; shift
  if "$@" >"$T/out" 2>&1; then echo "FAIL (accepted): $*"; exit 1; fi
  grep -qF -- "$msg" "$T/out" || { echo "FAIL (message lacks '$msg'): $*"; cat "$T/out"; exit 1; }
}

# bf16 against fp32 on inputs whose values bf16 holds exactly (the rounding diffusers applies is then
# the identity), then the bf16 graph on the golden's inputs, where it rounds as diffusers does: that
# must not match the fp32 golden.
bf16_rounds_as_diffusers() { # f32-bundle bf16-bundle exact-inputs golden-inputs golden-output what-rounds
  "$BIN/ditrun" forward "$1" --inputs "$3" --out "$T/f32.safetensors" 2>/dev/null >/dev/null
  "$BIN/ditrun" forward "$2" --inputs "$3" --out "$T/b16.safetensors" 2>/dev/null >/dev/null
  "$BIN/st_compare" "$T/b16.safetensors" "$T/f32.safetensors" sample 2e-2 0.9999
  "$BIN/ditrun" forward "$2" --inputs "$4" --out "$T/b16g.safetensors" 2>/dev/null >/dev/null
  if "$BIN/st_compare" "$T/b16g.safetensors" "$5" sample 2e-2 0.9999 >/dev/null; then
    echo "bf16 at $6 matches fp32: the timestep is not rounded as diffusers rounds it"; exit 1
  fi
}

# A Wan VAE's plans' predicted peaks at 480 x 832, 81 and 161 frames, whole (with whole-flags) and in
# chunks of one latent frame (frame 0's graph and the later chunks'; flags go to every compile): a
# chunk's peak does not grow with the video, the whole video's does. Prints them after `what`.
vae_chunk_peaks() { # what vae-folder whole-flags flags (both flag strings split into words, may be empty)
  local what=$1 vae=$2 whole=$3 flags=$4
  vae_peak() { # frames flags...
    local fr=$1
    shift
    local b
    # shellcheck disable=SC2086
    b=$("$BIN/ditc" compile "$vae" $flags --frames "$fr" --height 480 --width 832 "$@" -o "$T/m" -q | tail -n1 | cut -d' ' -f3)
    "$BIN/ditc" inspect "$b" | sed -n 's/^memory .*predicted peak \([0-9.]*\) MiB$/\1/p'
  }
  # shellcheck disable=SC2086
  python3 - "$what" "$(vae_peak 81 $whole)" "$(vae_peak 81 --vae-chunk 1 --vae-first)" "$(vae_peak 81 --vae-chunk 1)" \
    "$(vae_peak 161 $whole)" "$(vae_peak 161 --vae-chunk 1 --vae-first)" "$(vae_peak 161 --vae-chunk 1)" <<'PY'
import sys
what = sys.argv[1]
w81, f81, r81, w161, f161, r161 = map(float, sys.argv[2:])
c81, c161 = max(f81, r81), max(f161, r161)
print("%s at 480x832: 81 frames whole %.1f MiB, in chunks %.1f MiB (%.1fx less); 161 frames whole %.1f MiB, in chunks %.1f MiB"
      % (what, w81, c81, w81 / c81, w161, c161))
assert c81 == c161, "a chunk's peak grows with the video"
assert w161 > 1.8 * w81, "the whole video's peak does not grow with it"
assert w81 > 3 * c81, "the chunks save less than expected"
PY
}

# An image VAE decoder's golden cases ($1/meta.json's cases: suffix, batch, height, width): each
# compiled from $1/vae with `compile` (the caller's), verified, its info's model line $2, packed
# latents in and the image out, its forward within 1e-4 and at >= 45 dB PSNR of the golden. The
# last case's sample stays at $T/f.safetensors.
image_vae_cases() { # dir model_line
  local d=$1 model=$2 sfx B H W b
  while read -r sfx B H W; do
    [ "$sfx" = none ] && sfx=
    b=$(compile "$d/vae" --height "$H" --width "$W" --batch "$B")
    "$BIN/ditrun" verify "$b" >/dev/null
    "$BIN/ditrun" info "$b" >"$T/info"
    grep -q "^model      $model$" "$T/info" || { cat "$T/info"; exit 1; }
    grep -q "^input      latents  *f32\[$B,$(( (H / 16) * (W / 16) )),64\]$" "$T/info" || { cat "$T/info"; exit 1; }
    grep -q "^output     sample  *f32\[$B,3,$H,$W\]$" "$T/info" || { cat "$T/info"; exit 1; }
    "$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs$sfx.safetensors" --out "$T/f.safetensors" 2>/dev/null >/dev/null
    "$BIN/st_compare" "$T/f.safetensors" "$d/forward_output$sfx.safetensors" sample 1e-4
    python3 tests/tools/psnr.py "$T/f.safetensors" "$d/forward_output$sfx.safetensors" sample 45
  done < <(python3 -c "
import json
for c in json.load(open('$d/meta.json'))['cases']: print(c['suffix'] or 'none', c['batch'], c['height'], c['width'])")
}
