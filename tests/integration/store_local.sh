#!/usr/bin/env bash
# The local store through the command lines: 8 concurrent compiles of one identity leave one
# valid entry and no temporary file; a warm compile is a hit that hashes nothing (the memo)
# unless --rehash; misses are explained (compile --explain, cache why); ditrun runs an identity
# from the store and a .ditb archive, matching diffusers' golden output, and refuses a damaged
# archive or one past --max-bytes / --max-blobs, leaving nothing in its cache; verify, rm and
# gc keep the store consistent.
set -euo pipefail
BIN=$(cd "$1/bin" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
D=tests/data/wan_tiny_a
M=$D/model
S=$T/store
read -r F H W L < <(python3 -c "import json; m=json.load(open('$D/meta.json')); print(m['frames'], m['height'], m['width'], m['text_len'])")
SHAPE=(--frames "$F" --height "$H" --width "$W" --text-len "$L")
fail() { echo "FAIL: $*"; exit 1; }

# --- 8 processes compile the same identity into one empty store at once.
for i in 1 2 3 4 5 6 7 8; do
  "$BIN/ditc" compile "$M" "${SHAPE[@]}" --store "$S" -q > "$T/c$i.out" 2> "$T/c$i.err" &
done
wait
ids=$(for i in 1 2 3 4 5 6 7 8; do tail -n 1 "$T/c$i.out" | cut -d' ' -f2; done | sort -u)
[ "$(echo "$ids" | wc -l)" = 1 ] || fail "concurrent compiles disagree: $ids"
ID=$ids
[ "$(ls "$S/ac" | grep -c -E '^[0-9a-f]{32}$')" = 1 ] || fail "expected one entry: $(ls "$S/ac")"
[ -z "$(ls -A "$S/tmp")" ] || fail "temporaries left in $S/tmp: $(ls -A "$S/tmp")"
[ -z "$(find "$S" -name '.tmp*')" ] || fail "temporaries left: $(find "$S" -name '.tmp*')"
"$BIN/ditc" cache verify --store "$S" | grep -q '^ok: 2 blobs' || fail "verify after concurrent compiles"
"$BIN/ditc" cache ls --store "$S" | grep -q "^$ID .* unsigned wan2.1" || fail "ls"

# --- A warm compile is a hit that reads no weights; --rehash hashes them again.
"$BIN/ditc" compile "$M" "${SHAPE[@]}" --store "$S" > "$T/hit.out" 2> "$T/hit.err"
grep -q "found identical bundle" "$T/hit.err" || fail "warm compile was not a hit"
grep -q "memo: checkpoint files unchanged" "$T/hit.err" || fail "warm compile rehashed the weights"
"$BIN/ditc" compile "$M" "${SHAPE[@]}" --store "$S" --rehash 2> "$T/re.err" > /dev/null
grep -q "memo:" "$T/re.err" && fail "--rehash used the memo"
# A hit into another output directory materializes the bundle there from the store.
DITC_STORE="$S" "$BIN/ditc" compile "$M" "${SHAPE[@]}" -o "$T/elsewhere" 2> "$T/else.err" > /dev/null
grep -q "in store $S: nothing to compile" "$T/else.err" || fail "DITC_STORE hit into -o"
"$BIN/ditrun" verify "$T/elsewhere/$ID" > /dev/null

# --- Misses are explained.
F2=$((F + 4))
"$BIN/ditc" cache why "$M" --frames "$F2" --height "$H" --width "$W" --text-len "$L" --store "$S" > "$T/why.out"
grep -q "shape.frames: $F2 vs $F" "$T/why.out" || { cat "$T/why.out"; fail "cache why"; }
"$BIN/ditc" compile "$M" --frames "$F2" --height "$H" --width "$W" --text-len "$L" --store "$S" --explain -q 2> "$T/explain.err" > "$T/c2.out"
grep -q "shape.frames: $F2 vs $F" "$T/explain.err" || { cat "$T/explain.err"; fail "--explain"; }
ID2=$(tail -n 1 "$T/c2.out" | cut -d' ' -f2)
"$BIN/ditc" cache why "$M" --frames "$F2" --height "$H" --width "$W" --text-len "$L" --store "$S" | grep -q "^hit: identity $ID2" || fail "why after compile"
"$BIN/ditc" cache why "$M" "${SHAPE[@]}" --dtype bf16 --store "$S" | grep -q 'dtype: "bf16" vs "f32"' || fail "why dtype"

# --- Another shape of the same checkpoint takes its weights blob from the store (a link, not
# written again): the same bundle as one compiled without a store. With the blob gone from the
# store the compile writes it again.
F3=$((F + 8))
SHAPE3=(--frames "$F3" --height "$H" --width "$W" --text-len "$L")
"$BIN/ditc" compile "$M" "${SHAPE3[@]}" --store "$S" -o "$T/o3" > "$T/c3.out" 2> "$T/c3.err"
grep -q "linked from the store: not written again" "$T/c3.err" || { cat "$T/c3.err"; fail "weights blob not taken from the store"; }
B3=$(tail -n 1 "$T/c3.out" | cut -d' ' -f3)
B3F=$("$BIN/ditc" compile "$M" "${SHAPE3[@]}" -o "$T/fresh" -q | tail -n 1 | cut -d' ' -f3)
[ "$(basename "$B3")" = "$(basename "$B3F")" ] || fail "identity differs with the store's weights blob"
for f in "$B3F"/blobs/*; do cmp "$f" "$B3/blobs/$(basename "$f")" || fail "blob $(basename "$f") differs"; done
"$BIN/ditrun" verify "$B3" > /dev/null
cp -a "$S" "$T/s2"
WB=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(next(b['hash'] for b in m['blobs'] if b['role'] == 'weights'))" "$B3/manifest.json")
find "$T/s2/cas" -name "$WB*" -delete
"$BIN/ditc" compile "$M" --frames "$((F3 + 4))" --height "$H" --width "$W" --text-len "$L" --store "$T/s2" -o "$T/o4" > "$T/c4.out" 2> "$T/c4.err"
grep -q "linked from the store" "$T/c4.err" && fail "linked a blob the store no longer has"
"$BIN/ditrun" verify "$(tail -n 1 "$T/c4.out" | cut -d' ' -f3)" > /dev/null

# --- ditrun from the store, by identity, and from an archive.
"$BIN/ditrun" forward --store "$S" "$ID" --inputs "$D/forward_inputs.safetensors" --out "$T/fwd.safetensors" 2> /dev/null
"$BIN/st_compare" "$T/fwd.safetensors" "$D/forward_output.safetensors" sample 1e-4
"$BIN/ditc" pack "$ID" --store "$S" -o "$T/tiny.ditb" | grep -q "^packed $ID" || fail pack
"$BIN/ditrun" forward "$T/tiny.ditb" --inputs "$D/forward_inputs.safetensors" --out "$T/fwd2.safetensors" 2> /dev/null
cmp "$T/fwd.safetensors" "$T/fwd2.safetensors"
"$BIN/ditrun" verify "$T/tiny.ditb" | grep -q "^ok: bundle $ID verified" || fail "verify archive"
python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=1; open(sys.argv[2],'wb').write(b)" "$T/tiny.ditb" "$T/bad.ditb"
if "$BIN/ditrun" forward "$T/bad.ditb" --inputs "$D/forward_inputs.safetensors" --out "$T/bad.safetensors" 2> "$T/bad.err"; then fail "a damaged archive ran"; fi
grep -q "bad.ditb" "$T/bad.err" || { cat "$T/bad.err"; fail "damaged archive message"; }
[ ! -e "$T/bad.safetensors" ] || fail "a refused run wrote output"
# Past the import limits: refused with the limit and the claim, nothing left in the cache.
ASIZE=$(python3 -c "import json; m=json.load(open('$S/ac/$ID')); print(sum(b['size'] for b in m['blobs']))")
if "$BIN/ditrun" verify "$T/tiny.ditb" --cache "$T/q1" --max-bytes $((ASIZE - 1)) 2> "$T/q1.err"; then fail "an archive past --max-bytes ran"; fi
grep -q "RESOURCE_EXHAUSTED.*tiny.ditb.*claim $ASIZE bytes, more than the $((ASIZE - 1)) allowed (--max-bytes)" "$T/q1.err" ||
  { cat "$T/q1.err"; fail "--max-bytes message"; }
if "$BIN/ditrun" verify "$T/tiny.ditb" --cache "$T/q2" --max-blobs 1 2> "$T/q2.err"; then fail "an archive past --max-blobs ran"; fi
grep -q "lists 2 blobs, more than the 1 allowed (--max-blobs)" "$T/q2.err" || { cat "$T/q2.err"; fail "--max-blobs message"; }
for q in q1 q2; do
  [ -z "$(ls "$T/$q/ac")" ] && [ -z "$(find "$T/$q/cas" -type f)" ] && [ -z "$(ls "$T/$q/tmp")" ] || fail "$q: a refused archive left files"
done
"$BIN/ditrun" verify "$T/tiny.ditb" --cache "$T/q3" --max-bytes "$ASIZE" --max-blobs 2 > /dev/null || fail "an archive at its limits"
if "$BIN/ditrun" verify "$T/tiny.ditb" --max-bytes 12Q 2> /dev/null; then fail "a bad --max-bytes was accepted"; fi
"$BIN/ditrun" --help > "$T/help"
grep -q -- "--max-bytes SIZE" "$T/help" && grep -q "default 256G" "$T/help" || fail "--max-bytes not in ditrun --help"
head -c 1000 "$T/tiny.ditb" > "$T/short.ditb"
if "$BIN/ditrun" verify "$T/short.ditb" 2> "$T/short.err"; then fail "a truncated archive verified"; fi
grep -q "truncated" "$T/short.err" || { cat "$T/short.err"; fail "truncated archive message"; }

# --- A damaged blob: verify finds it and removes it; compiling again repairs the entry.
W_BLOB=$(python3 -c "import json; m=json.load(open('$S/ac/$ID')); print([b['hash'] for b in m['blobs'] if b['role']=='weights'][0])")
chmod u+w "$S/cas/${W_BLOB:0:2}/$W_BLOB"
python3 -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(100); c=f.read(1); f.seek(100); f.write(bytes([c[0]^1]))" "$S/cas/${W_BLOB:0:2}/$W_BLOB"
if "$BIN/ditc" cache verify --store "$S" > "$T/v.out" 2> "$T/v.err"; then fail "verify missed a damaged blob"; fi
grep -q "content hash mismatch" "$T/v.err" || { cat "$T/v.err"; fail "verify message"; }
"$BIN/ditc" compile "$M" "${SHAPE[@]}" --store "$S" -q > /dev/null
"$BIN/ditc" cache verify --store "$S" > /dev/null || fail "compile did not repair the entry"

# --- rm and gc.
"$BIN/ditc" cache rm "$ID2" --store "$S" | grep -q "removed 1 entry and 1 blob" || fail "rm"
if "$BIN/ditc" cache rm "$ID2" --store "$S" 2> /dev/null; then fail "rm of a missing entry succeeded"; fi
"$BIN/ditc" cache gc --store "$S" --max-age 1d | grep -q "removed 0 entries" || fail "gc --max-age 1d"
"$BIN/ditc" cache gc --store "$S" --max-size 1K | grep -q "0 entries, 0 blobs" || fail "gc --max-size"
if "$BIN/ditc" cache gc --store "$S" --max-size lots 2> /dev/null; then fail "bad size accepted"; fi
for age in nan inf -1d 1y; do
  if "$BIN/ditc" cache gc --store "$S" --max-age "$age" 2> "$T/age.err"; then fail "gc --max-age $age accepted"; fi
  grep -q "max-age $age: expected a duration" "$T/age.err" || { cat "$T/age.err"; fail "gc --max-age $age message"; }
done
if "$BIN/ditc" cache ls 2> "$T/nostore.err"; then fail "ls without a store"; fi
grep -q "DITC_STORE" "$T/nostore.err" || fail "no-store message"
# --- A two-expert bundle through the store and an archive: every blob of both experts travels,
# and the generate across the boundary matches diffusers' from either.
A=tests/data/wan22_a14b_tiny
AI=$("$BIN/ditc" compile "$A" --frames 9 --height 32 --width 48 --batch 1 --text-len 7 --store "$S" -q | tail -n 1 | cut -d' ' -f2)
G=(--prompt-embeds "$A/generate_inputs.safetensors" --negative-embeds "$A/generate_inputs.safetensors"
   --init-latents "$A/generate_inputs.safetensors" --steps 6 --guidance 4 --guidance-2 3 --shift 3)
"$BIN/ditrun" generate --store "$S" "$AI" "${G[@]}" --out "$T/a14b.safetensors" 2> /dev/null
"$BIN/st_compare" "$T/a14b.safetensors" "$A/generate_unipc.safetensors" latents 1e-4 > /dev/null || fail "two-expert generate from the store"
"$BIN/ditc" pack "$AI" --store "$S" -o "$T/a14b.ditb" | grep -q "^packed $AI: 4 blobs\|^packed $AI into .*: 4 blobs" || fail "pack of both experts"
"$BIN/ditrun" generate "$T/a14b.ditb" "${G[@]}" --out "$T/a14b2.safetensors" 2> /dev/null
cmp "$T/a14b.safetensors" "$T/a14b2.safetensors" || fail "two-expert generate from the archive"
echo "store_local: ok"
