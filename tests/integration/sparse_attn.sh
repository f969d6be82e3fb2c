#!/usr/bin/env bash
# Compiled sparse attention on the tiny Wan model (CPU): a window covering the token grid is
# dense attention bit for bit, as are sparse layers all kept dense; a real sta window and radial
# change the forward and generate, pass `ditrun compare`, and are recorded in the manifest and
# the identity; bad specs and unsupported combinations are refused naming the value.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
M=tests/data/wan_tiny_a/model
P=tests/data/wan_tiny_a/generate_inputs.safetensors
# 17 frames at 128x128: 5 x 8 x 8 patched tokens, three tiles of 128 tokens (two frames each).
compile() { "$BIN/ditc" compile "$M" --frames 17 --height 128 --width 128 --text-len 7 -o "$T/b" -q "$@" | tail -n 1 | awk '{print $3}'; }
dense=$(compile)
"$BIN/forward_inputs" "$dense" "$T/in.safetensors" --seed 3 --set timestep=500
run() { # bundle name: forward and a 3-step CFG generate from one seed
  "$BIN/ditrun" forward "$1" --inputs "$T/in.safetensors" --out "$T/f_$2.safetensors" > /dev/null 2>&1
  "$BIN/ditrun" generate "$1" --prompt-embeds "$P" --negative-embeds "$P" --seed 7 --steps 3 --guidance 5 --shift 3 \
    --out "$T/g_$2.safetensors" > /dev/null 2>&1
}
run "$dense" dense

for spec in sta:5,8,8 sta:9,100,8; do
  b=$(compile --sparse-attn "$spec")
  run "$b" cover
  cmp "$T/f_dense.safetensors" "$T/f_cover.safetensors" || { echo "$spec covers the grid but is not the dense forward"; exit 1; }
  cmp "$T/g_dense.safetensors" "$T/g_cover.safetensors" || { echo "$spec covers the grid but is not the dense generate"; exit 1; }
  python3 -c "import json,sys; sys.exit(json.load(open('$b/manifest.json'))['inputs']['options']['sparse_attn']['pattern'] != 'sta')" ||
    { echo "$spec: no sparse_attn pattern in the manifest"; exit 1; }
done
# Every block kept dense by --sparse-dense-layers is the dense model too.
b=$(compile --sparse-attn sta:1,8,8 --sparse-dense-layers 2)
run "$b" layers
cmp "$T/f_dense.safetensors" "$T/f_layers.safetensors" || { echo "--sparse-dense-layers 2 of 2 is not the dense forward"; exit 1; }

differs() { if cmp -s "$T/$1" "$T/$2"; then echo "$1 equals $2: the sparse pattern had no effect"; exit 1; fi; }
sta=$(compile --sparse-attn sta:1,8,8)
[ "$sta" != "$dense" ] || { echo "the sparse bundle has the dense bundle's identity"; exit 1; }
python3 -c "import json,sys; o=json.load(open('$sta/manifest.json'))['inputs']['options']['sparse_attn']; sys.exit(o['window']!=[1,8,8] or o['tile']!=128)" ||
  { echo "the manifest does not record sta:1,8,8"; exit 1; }
run "$sta" sta
differs f_sta.safetensors f_dense.safetensors
differs g_sta.safetensors g_dense.safetensors
"$BIN/ditrun" compare "$sta" --inputs "$T/in.safetensors" --max-rel 1e-5 > "$T/cmp" 2>&1 || { cat "$T/cmp"; exit 1; }
one=$(compile --sparse-attn sta:1,8,8 --sparse-dense-layers 1)
run "$one" one
differs f_one.safetensors f_dense.safetensors
differs f_one.safetensors f_sta.safetensors

# Radial is sparse at tile granularity once a frame spans many tiles: 8 x 16 x 24 tokens.
rad=$("$BIN/ditc" compile "$M" --frames 29 --height 256 --width 384 --text-len 7 -o "$T/b" -q --sparse-attn radial | tail -n 1 | awk '{print $3}')
rdense=$("$BIN/ditc" compile "$M" --frames 29 --height 256 --width 384 --text-len 7 -o "$T/b" -q | tail -n 1 | awk '{print $3}')
"$BIN/forward_inputs" "$rad" "$T/rin.safetensors" --seed 4 --set timestep=300
"$BIN/ditrun" forward "$rad" --inputs "$T/rin.safetensors" --out "$T/f_rad.safetensors" > /dev/null 2>&1
"$BIN/ditrun" forward "$rdense" --inputs "$T/rin.safetensors" --out "$T/f_rdense.safetensors" > /dev/null 2>&1
differs f_rad.safetensors f_rdense.safetensors
"$BIN/st_compare" "$T/f_rad.safetensors" "$T/f_rdense.safetensors" sample 1 0.9 > /dev/null
"$BIN/ditrun" compare "$rad" --inputs "$T/rin.safetensors" --max-rel 1e-5 > "$T/cmp" 2>&1 || { cat "$T/cmp"; exit 1; }

refuse() { # expected message, then the compile flags
  local want=$1
  shift
  if "$BIN/ditc" compile "$M" --frames 17 --height 128 --width 128 --text-len 7 -o "$T/b" -q "$@" 2> "$T/err"; then
    echo "accepted: $*"; exit 1
  fi
  grep -qF -- "$want" "$T/err" || { echo "for $*: expected '$want', got:"; cat "$T/err"; exit 1; }
}
refuse "--sparse-attn sta:0,1,1: window extent T (frames) = 0, expected 1..1000000 tokens" --sparse-attn sta:0,1,1
refuse "--sparse-attn sta:1,a,1: window extent H (rows) is not an integer" --sparse-attn sta:1,a,1
refuse "--sparse-attn sta:1,2: window extent H (rows) is not an integer" --sparse-attn sta:1,2
refuse "--sparse-attn dilated: unknown pattern (known: sta:T,H,W, radial)" --sparse-attn dilated
refuse "--sparse-dense-steps 2: a bundle holds one plan" --sparse-attn radial --sparse-dense-steps 2
refuse "--sparse-dense-layers needs --sparse-attn" --sparse-dense-layers 1
refuse "--sparse-attn sta with --cp 2" --sparse-attn sta:1,8,8 --cp 2
if "$BIN/ditc" compile tests/data/flux_dev_tiny --height 64 --width 64 -o "$T/b" -q --sparse-attn radial 2> "$T/err"; then
  echo "accepted sparse attention on FLUX.1"; exit 1
fi
grep -qF -- "--sparse-attn radial: family flux" "$T/err" || { cat "$T/err"; exit 1; }
echo "sparse attention: dense-covering windows exact, sta and radial sparse and checked, bad specs refused"
