#!/usr/bin/env bash
# The Wan2.1 VAE decoder split for windows (tests/data/wan_vae_tiny at 9 frames of 32 x 320: 40
# latent columns): the head over whole frames, then the tails window by window, decodes the same
# frames, byte for byte in fp32, as the unsplit decoder in chunks, with 1, 2, 3 and 26 windows (the
# halo, 7 latent columns, is the tail's receptive field rounded up); the allocation falls with the
# windows; `ditc --vae-budget` takes the fewest windows whose predicted peak fits
# and says so, and refuses a budget nothing fits (the narrowest windows', the head's alone);
# `ditrun info` shows the windows; refusals by name (too many windows, a head in chunks of 2, a
# tail without windows or budget, a head beside a tail of another width or without one).
set -euo pipefail
BIN=$1/bin
# shellcheck source=tests/tools/goldens_lib.sh
. "$(dirname "$0")/../tools/goldens_lib.sh"
fail() { echo "FAIL: $*"; exit 1; }

d=tests/data/wan_vae_tiny
F=9 H=32 W=320
python3 - "$T/lat.safetensors" <<'PY'
import json, random, struct, sys
random.seed(2101)
shape = [1, 16, 3, 4, 40]
n = 16 * 3 * 4 * 40
data = struct.pack("<%df" % n, *[random.gauss(0, 1) for _ in range(n)])
h = json.dumps({"latents": {"dtype": "F32", "shape": shape, "data_offsets": [0, len(data)]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
c() { "$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" -o "$T/b" -q "$@" | tail -n1 | cut -d' ' -f3; }
mib() { sed -n 's/.* \([0-9.]*\) MiB allocated.*/\1/p' "$1"; }

first=$(c --vae-chunk 1 --vae-first)
rest=$(c --vae-chunk 1)
"$BIN/ditrun" decode "$rest" --first "$first" --latents "$T/lat.safetensors" --out "$T/whole.safetensors" 2>"$T/whole.err" >/dev/null ||
  { cat "$T/whole.err"; fail "the unsplit decode"; }
head=$(c --vae-chunk 1 --vae-part head)
"$BIN/ditrun" info "$head" | grep -q "^output     hidden  *f32\[1,1,4,40,8\]$" || { "$BIN/ditrun" info "$head"; fail "the head's output"; }
prev=$(mib "$T/whole.err")
for t in 1 2 3 26; do
  tf=$(c --vae-chunk 1 --vae-first --vae-part tail --vae-tiles $t)
  tr=$(c --vae-chunk 1 --vae-part tail --vae-tiles $t)
  "$BIN/ditrun" info "$tr" >"$T/info"
  win=$(( (40 + 14 * (t - 1) + t - 1) / t ))
  [ $t = 1 ] && win=40
  grep -q "^tile       $t windows\? $win wide over 40 columns, halo 7$" "$T/info" || { cat "$T/info"; fail "tile line at $t windows"; }
  grep -q "^schema     1.5$" "$T/info" || fail "a tail is schema 1.5"
  "$BIN/ditrun" decode "$tr" --first "$tf" --head "$head" --latents "$T/lat.safetensors" --out "$T/t$t.safetensors" 2>"$T/t.err" >/dev/null ||
    { cat "$T/t.err"; fail "the decode in $t windows"; }
  cmp -s "$T/whole.safetensors" "$T/t$t.safetensors" || fail "$t windows: the frames differ from the unsplit decode's"
  now=$(mib "$T/t.err")
  python3 -c "import sys; a, b = map(float, sys.argv[1:]); assert b < a, (a, b)" "$prev" "$now" || fail "$t windows hold $now MiB, not less than $prev"
  echo "$t window(s): the unsplit decode's frames, $now MiB allocated"
  prev=$now
done

# The budget: the fewest windows whose predicted peak fits; a budget just under that peak takes more.
pick() { "$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" --vae-chunk 1 --vae-part tail --vae-budget "$1" -o "$T/b" 2>&1 |
  sed -n 's/^ditc: --vae-budget .* GiB: \([0-9]*\) windows\?, a predicted peak of \([0-9.]*\) MiB$/\1 \2/p'; }
read -r n1 p1 < <(pick 0.005)
[ -n "$n1" ] || fail "--vae-budget 0.005 printed no choice"
python3 -c "import sys; assert float(sys.argv[1]) <= 0.005 * 1024" "$p1" || fail "the choice's peak $p1 MiB is over the budget"
read -r n2 p2 < <(pick "$(python3 -c "import sys; print((float(sys.argv[1]) - 0.05) / 1024)" "$p1")")
[ "$n2" -gt "$n1" ] || fail "a budget under $p1 MiB took $n2 windows, not more than $n1"
echo "budget: 5.12 MiB takes $n1 windows ($p1 MiB), just under that $n2 ($p2 MiB)"
expect_fail "--vae-budget 0.001: the VAE decode takes a predicted" "$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" \
  --vae-chunk 1 --vae-part tail --vae-budget 0.001 -o "$T/x"
expect_fail "the decoder's head (whole frames up to the latent-resolution blocks) alone takes a predicted" "$BIN/ditc" compile "$d/vae" \
  --frames "$F" --height "$H" --width "$W" --vae-chunk 1 --vae-part tail --vae-budget 0.0001 -o "$T/x"

# Refusals by name.
expect_fail "--vae-tiles 27: 40 latent columns (--width 320) make at most 26 exact windows" "$BIN/ditc" compile "$d/vae" --frames "$F" \
  --height "$H" --width "$W" --vae-chunk 1 --vae-part tail --vae-tiles 27 -o "$T/x"
expect_fail "--vae-part head: the head decodes one latent frame per forward, the first as the others: expected --vae-chunk 1 without --vae-first, found --vae-chunk 2" \
  "$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$W" --vae-chunk 2 --vae-part head -o "$T/x"
expect_fail "--vae-part tail: the windows come from --vae-tiles N or --vae-budget GIB; neither was given" "$BIN/ditc" compile "$d/vae" \
  --frames "$F" --height "$H" --width "$W" --vae-chunk 1 --vae-part tail -o "$T/x"
expect_fail "--vae-part head runs over whole frames: --vae-tiles and --vae-budget are the tail's" "$BIN/ditc" compile "$d/vae" \
  --frames "$F" --height "$H" --width "$W" --vae-chunk 1 --vae-part head --vae-tiles 2 -o "$T/x"
expect_fail "not a split decoder's tail" "$BIN/ditrun" decode "$rest" --first "$first" --head "$head" --latents "$T/lat.safetensors" \
  --out "$T/x.safetensors"
expect_fail "needs its tail's first chunk's decoder too" "$BIN/ditrun" decode "$tr" --head "$head" --latents "$T/lat.safetensors" \
  --out "$T/x.safetensors"
narrow=$("$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width 240 -o "$T/b" -q --vae-chunk 1 --vae-part head | tail -n1 | cut -d' ' -f3)
python3 -c "
import json, struct
h = json.dumps({'latents': {'dtype': 'F32', 'shape': [1, 16, 3, 4, 30], 'data_offsets': [0, 4 * 16 * 3 * 4 * 30]}}).encode()
h += b' ' * (-len(h) % 8)
open('$T/lat30.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + bytes(4 * 16 * 3 * 4 * 30))"
expect_fail "the tail's windows cover" "$BIN/ditrun" decode "$tr" --first "$tf" --head "$narrow" --latents "$T/lat30.safetensors" \
  --out "$T/x.safetensors"
[ ! -e "$T/x.safetensors" ] || fail "a refused decode left an output"
echo "vae_tiles: ok"
