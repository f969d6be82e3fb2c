#!/usr/bin/env bash
# `ditrun frames` writes a decoded tensor as an MP4 and a PNG (their contents are checked by
# unit.test_media; here the command: tensor choice, file names, refusals that leave nothing), and
# `ditrun generate --preview DIR --preview-every K` on the tiny Wan bundle writes DIR/step_NNN.png
# every K steps and after the last, at the latents' size times 8, without changing the latents;
# the step lines carry the elapsed time and the ETA.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "media: $*"; exit 1; }

# [2, 3, 9, 48, 64] frames in [-1, 1] and a [1, 4, 48, 64] tensor beside them.
python3 - "$T/in.safetensors" <<'PY'
import json, math, struct, sys
def tensor(shape, f):
    n = 1
    for d in shape: n *= d
    return shape, struct.pack("<%df" % n, *[f(i) for i in range(n)])
ts = {"frames": tensor([2, 3, 9, 48, 64], lambda i: math.sin(i * 0.01)), "four": tensor([1, 4, 48, 64], lambda i: 0.0)}
header, data, off = {}, b"", 0
for name, (shape, raw) in ts.items():
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(raw)]}
    data, off = data + raw, off + len(raw)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PY

mkdir "$T/out"
"$BIN/ditrun" frames "$T/in.safetensors" --tensor frames --out "$T/out/clip.mp4" --fps 16 > "$T/log"
[ "$(cat "$T/log")" = "wrote $T/out/clip.mp4
wrote $T/out/clip_1.mp4" ] || { cat "$T/log"; fail "frames --out clip.mp4: expected clip.mp4 and clip_1.mp4 reported"; }
"$BIN/ditrun" frames "$T/in.safetensors" --tensor frames --out "$T/out/clip.png" > /dev/null
# An MP4 starts with its ftyp box; a PNG with its signature and IHDR (64 x 48).
python3 - "$T/out" <<'PY'
import struct, sys
d = sys.argv[1]
for f in ("clip.mp4", "clip_1.mp4"):
    b = open("%s/%s" % (d, f), "rb").read(12)
    assert b[4:8] == b"ftyp", (f, b)
for f in ("clip.png", "clip_1.png"):
    b = open("%s/%s" % (d, f), "rb").read(24)
    assert b[:8] == b"\x89PNG\r\n\x1a\n" and b[12:16] == b"IHDR", (f, b)
    assert struct.unpack(">II", b[16:24]) == (64, 48), (f, struct.unpack(">II", b[16:24]))
PY
[ "$(ls "$T/out" | tr '\n' ' ')" = "clip.mp4 clip.png clip_1.mp4 clip_1.png " ] || { ls -la "$T/out"; fail "unexpected files"; }

# Refusals name the file and the reason, and leave nothing.
expect_refusal() { # WANT ARGS...
  local want=$1
  shift
  if "$BIN/ditrun" frames "$@" > /dev/null 2> "$T/err"; then fail "frames $* succeeded"; fi
  grep -qF -- "$want" "$T/err" || { cat "$T/err"; fail "frames $*: expected '$want'"; }
}
mkdir "$T/bad"
expect_refusal "$T/in.safetensors: 2 tensors (four, frames): name the frames with --tensor" "$T/in.safetensors" --out "$T/bad/x.mp4"
expect_refusal "$T/in.safetensors: no tensor named 'latents' (--tensor)" "$T/in.safetensors" --tensor latents --out "$T/bad/x.mp4"
expect_refusal "--out $T/bad/x.gif: expected a .mp4 or .png file name" "$T/in.safetensors" --tensor frames --out "$T/bad/x.gif"
expect_refusal "$T/bad/x.png: frames [1, 4, 48, 64]: expected 3 channels (RGB) in dimension 1, found 4" "$T/in.safetensors" --tensor four --out "$T/bad/x.png"
expect_refusal "$T/bad/no/x.mp4: cannot create a file beside it: No such file or directory" "$T/in.safetensors" --tensor frames --out "$T/bad/no/x.mp4"
expect_refusal "--fps 0: expected a rate in 0.1..1000" "$T/in.safetensors" --tensor frames --out "$T/bad/x.mp4" --fps 0
expect_refusal "--crf 0: expected 1..51" "$T/in.safetensors" --tensor frames --out "$T/bad/x.mp4" --crf 0
expect_refusal "frames needs --out FILE.mp4 or FILE.png" "$T/in.safetensors"
# FFmpeg is loaded when an MP4 is written: a host whose libavformat does not load gets a refusal
# naming it, and PNGs all the same.
mkdir "$T/noav"
major=$(pkg-config --modversion libavformat | cut -d. -f1)
: > "$T/noav/libavformat.so.$major"
LD_LIBRARY_PATH=$T/noav expect_refusal "$T/bad/x.mp4: MP4 output needs FFmpeg's libavformat.so.$major (Debian package libavformat$major)" \
  "$T/in.safetensors" --tensor frames --out "$T/bad/x.mp4"
LD_LIBRARY_PATH=$T/noav "$BIN/ditrun" frames "$T/in.safetensors" --tensor frames --out "$T/noav/x.png" > /dev/null
[ -s "$T/noav/x.png" ] && [ -s "$T/noav/x_1.png" ] || fail "no PNG written without FFmpeg"
[ -z "$(ls -A "$T/bad")" ] || { ls -la "$T/bad"; fail "a refusal left files"; }

# Previews on the tiny Wan bundle: 9 frames of 32 x 48 are [1, 16, 3, 4, 6] latents, shown as three
# latent frames side by side, 8 times larger: 144 x 32.
d=tests/data/wan_tiny_a
line=$("$BIN/ditc" compile "$d/model" --frames 9 --height 32 --width 48 --batch 1 --text-len 7 -o "$T/bundles" -q | tail -n 1)
bundle=${line##* }
gi=$d/generate_inputs.safetensors
run() { "$BIN/ditrun" generate "$bundle" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps 4 "$@"; }
run --out "$T/plain.safetensors" 2> /dev/null > /dev/null
run --preview "$T/prev" --preview-every 3 --out "$T/prev.safetensors" 2> "$T/gen" > /dev/null || { cat "$T/gen"; fail "generate --preview failed"; }
cmp "$T/plain.safetensors" "$T/prev.safetensors" || fail "--preview changed the latents"
[ "$(ls "$T/prev" | tr '\n' ' ')" = "step_003.png step_004.png " ] || { ls -la "$T/prev"; fail "--preview-every 3 of 4 steps: expected step_003.png and step_004.png"; }
python3 - "$T/prev/step_003.png" "$T/prev/step_004.png" <<'PY'
import struct, sys
heads = [open(p, "rb").read() for p in sys.argv[1:]]
for b in heads:
    assert b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", b[16:24]) == (144, 32), struct.unpack(">II", b[16:24])
assert heads[0] != heads[1], "the latents moved between steps 3 and 4, the previews did not"
PY
grep -q "^ditrun: note: --preview: the bundle has no VAE decoder stage to fit a latent-to-RGB map on" "$T/gen" || { cat "$T/gen"; fail "no note of the fallback map"; }
[ "$(grep -cE '^ditrun: step [0-9]+/4  t=[0-9.]+  [0-9.]+s  \[elapsed [0-9.]+s, ETA [0-9.]+s\]$' "$T/gen")" = 4 ] ||
  { cat "$T/gen"; fail "expected 4 step lines with the elapsed time and the ETA"; }
grep -qE '^ditrun: step 4/4 .*ETA 0\.00s\]$' "$T/gen" || { cat "$T/gen"; fail "the last step's ETA is not 0"; }
run --preview "$T/prev2" --preview-every 0 --out "$T/x.safetensors" 2> "$T/err" && fail "--preview-every 0 accepted"
grep -q -- "--preview-every: expected 1..10000" "$T/err" || { cat "$T/err"; fail "--preview-every 0: wrong message"; }
echo "media: frames to MP4 and PNG, refusals, previews and the progress line ok"
