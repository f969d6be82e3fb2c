#!/usr/bin/env bash
# The same compile inputs give byte-identical bundles wherever and whenever they are compiled
# (only diagnostics.json differs); the weights blob does not depend on the shape.
set -euo pipefail
BIN=$(cd "$1/bin" && pwd)
ROOT=$(pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
M=tests/data/wan_tiny_a/model
cp -r "$M" "$T/model_copy"
a=$("$BIN/ditc" compile "$M" --frames 9 --height 32 --width 48 --text-len 7 -o "$T/one" -q | tail -n 1)
# A second compile from another directory, through another path to an identical checkpoint.
b=$(cd "$T" && "$BIN/ditc" compile model_copy --frames 9 --height 32 --width 48 --text-len 7 -o "$T/two/nested" -q | tail -n 1)
ida=$(echo "$a" | cut -d' ' -f2); idb=$(echo "$b" | cut -d' ' -f2)
[ "$ida" = "$idb" ] || { echo "identity differs: $ida vs $idb"; exit 1; }
diff -r -x diagnostics.json "$T/one/$ida" "$T/two/nested/$idb"
cmp -s "$T/one/$ida/diagnostics.json" "$T/two/nested/$idb/diagnostics.json" && { echo "diagnostics should record the differing paths"; exit 1; }
# Compiling again into the same store finds the published bundle.
again=$("$BIN/ditc" compile "$M" --frames 9 --height 32 --width 48 --text-len 7 -o "$T/one" 2>&1 | grep -c "found identical")
[ "$again" = 1 ] || { echo "recompile did not find the identical bundle"; exit 1; }
# Another shape: another identity, the same weights blob.
c=$("$BIN/ditc" compile "$M" --frames 5 --height 32 --width 32 --text-len 3 -o "$T/one" -q | tail -n 1)
idc=$(echo "$c" | cut -d' ' -f2)
[ "$idc" != "$ida" ] || { echo "a different shape must change the identity"; exit 1; }
wa=$(ls "$T/one/$ida/blobs" | sort); wc_=$(ls "$T/one/$idc/blobs" | sort)
common=$(comm -12 <(echo "$wa") <(echo "$wc_") | wc -l)
[ "$common" = 1 ] || { echo "expected exactly the weights blob shared between shapes, found $common common blobs"; exit 1; }
# Another dtype: another weights blob.
d=$("$BIN/ditc" compile "$M" --frames 9 --height 32 --width 48 --text-len 7 --dtype bf16 -o "$T/one" -q | tail -n 1)
idd=$(echo "$d" | cut -d' ' -f2)
common=$(comm -12 <(echo "$wa") <(ls "$T/one/$idd/blobs" | sort) | wc -l)
[ "$common" = 0 ] || { echo "bf16 and fp32 bundles must not share blobs"; exit 1; }
# No temporary directories left behind.
left=$(find "$T/one" "$T/two" -maxdepth 2 -name '.tmp*' | wc -l)
[ "$left" = 0 ] || { echo "temporary directories left behind"; exit 1; }
cd "$ROOT"
echo "determinism: identical bundles, shape-independent weights blob"
