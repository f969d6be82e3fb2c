#!/usr/bin/env bash
# Attention-state reuse (--reuse ditango) on the CPU backend, ranks as threads (and, cp 4, as
# processes of a launch), tiny Wan model:
#  - R = 1 (recompute everything): bit-identical to plain ring attention with groups of 1 (the
#    same K/V reach each rank in the same order and merge in the same order), cp 2 and 4, with and
#    without --cfg-parallel; groups of 2 merge the partitions in another order (a group's two states
#    before the next group's), so there the forward equals the same bundle run without the planner
#    byte for byte, and plain ring within fp32 rounding;
#  - R = 0.5: about half of the remote states recomputed, the same report byte for byte twice and
#    with collectives overlapped, the final latents close to the exact run's (bound below), the
#    diagnostic errors measured;
#  - usp (Ulysses 2, the groups over the ring members): the same checks at cp 4 and 8, groups of 1
#    and 2, a cache cap, processes (4 and 8);
#  - the memory plan holds the caches (per layer and remote group, o and lse, one copy per branch)
#    at the bottom of the arena, apart from every other value;
#  - bad flags refused with the reason.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
d=tests/data/wan_tiny_b
read -r F H W B L < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'])")
compile() { "$BIN/ditc" compile "$d/model" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" -o "$T/b" -q "$@" | tail -n1 | cut -d' ' -f3; }
gen=(--prompt-embeds "$d/generate_inputs.safetensors" --negative-embeds "$d/generate_inputs.safetensors"
     --init-latents "$d/generate_inputs.safetensors" --guidance 5 --shift 3)
run() { # bundle, out name, generate flags...
  local b=$1 o=$2; shift 2
  "$BIN/ditrun" generate "$b" "${gen[@]}" "$@" --out "$T/$o.st" 2>"$T/$o.log" || { cat "$T/$o.log"; exit 1; }
}

for top in "--cp 2" "--cp 4" "--cp 2 --cfg-parallel" "--cp 4 --cfg-parallel"; do
  # shellcheck disable=SC2086
  plain=$(compile $top --cp-mode ring)
  # shellcheck disable=SC2086
  reuse=$(compile $top --cp-mode ring --reuse ditango)
  "$BIN/ditrun" forward "$plain" --inputs "$d/forward_inputs.safetensors" --out "$T/fp.st" 2>/dev/null
  "$BIN/ditrun" forward "$reuse" --inputs "$d/forward_inputs.safetensors" --out "$T/fr.st" 2>/dev/null
  cmp "$T/fp.st" "$T/fr.st" || { echo "forward $top: reuse bundle differs from plain ring"; exit 1; }
  run "$plain" gp --steps 4
  run "$reuse" gr --steps 4 --reuse-ratio 1
  cmp "$T/gp.st" "$T/gr.st" || { echo "generate $top --reuse-ratio 1 differs from plain ring"; exit 1; }
  cp=$(echo "$top" | sed 's/--cp \([0-9]*\).*/\1/') n=$((3 * (cp - 1) * 2)) # layers x remote groups x steps after warm-up
  grep -q "computed $n of $n remote attention states" "$T/gr.log" || { cat "$T/gr.log"; echo "R = 1 did not compute every remote state"; exit 1; }
  echo "== $top: R = 1 bit-identical to ring"
done

# Groups of 2 (cp 4: the local pair and one remote pair).
plain=$(compile --cp 4 --cp-mode ring)
g2=$(compile --cp 4 --cp-mode ring --reuse ditango --reuse-group 2)
run "$plain" gp --steps 4
run "$g2" g2a --steps 4 --reuse-ratio 1
run "$g2" g2b --steps 4
cmp "$T/g2a.st" "$T/g2b.st" || { echo "--reuse-group 2, R = 1: differs from the same bundle without the planner"; exit 1; }
"$BIN/st_compare" "$T/g2a.st" "$T/gp.st" latents 1e-5
g2c=$(compile --cp 4 --cp-mode ring --reuse ditango --reuse-group 2 --cfg-parallel)
run "$g2c" g2c --steps 4 --reuse-ratio 1
"$BIN/st_compare" "$T/g2c.st" "$T/gp.st" latents 1e-5

# R = 0.5 on cp 4, groups of 1, 20 steps (local anchors off: eps alone decides), against exact.
reuse=$(compile --cp 4 --cp-mode ring --reuse ditango)
run "$plain" exact --steps 20
run "$reuse" h1 --steps 20 --reuse-ratio 0.5 --reuse-eps-local 100 --reuse-report "$T/h1.json"
run "$reuse" h2 --steps 20 --reuse-ratio 0.5 --reuse-eps-local 100 --reuse-report "$T/h2.json"
cmp "$T/h1.json" "$T/h2.json" || { echo "R = 0.5: the reports of two runs differ"; exit 1; }
cmp "$T/h1.st" "$T/h2.st" || { echo "R = 0.5: the latents of two runs differ"; exit 1; }
# The K/V shifts and the planner's exchanges overlapped with compute on a queue of their own
# (each queued copy delayed, so a missing wait would show): the same decisions and bytes.
DIT_CPU_COPY_DELAY_US=200 run "$reuse" h3 --steps 20 --reuse-ratio 0.5 --reuse-eps-local 100 --reuse-report "$T/h3.json" --overlap-collectives
cmp "$T/h1.json" "$T/h3.json" || { echo "R = 0.5: --overlap-collectives changed the report"; exit 1; }
cmp "$T/h1.st" "$T/h3.st" || { echo "R = 0.5: --overlap-collectives changed the latents"; exit 1; }
# The tiny model's random weights move its states far more per step than a trained one (relative
# errors of a reused state 0.2-0.5 here); the bound is what 20 steps at R = 0.5 measure (0.9977)
# with a margin, far below R = 1's exact equality and above a run that reuses almost everything.
cos=$("$BIN/st_compare" "$T/h1.st" "$T/exact.st" latents 1 | sed 's/.*cosine=\([0-9.]*\).*/\1/')
python3 - "$T/h1.json" "$cos" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); cos = float(sys.argv[2])
ratio = r["computed"] / r["decided"]
print(f"R = 0.5: computed {r['computed']} of {r['decided']} ({ratio:.2f}), final-latent cosine {cos:.6f}")
assert 0.35 <= ratio <= 0.65, ratio
assert cos >= 0.995, cos
steps = r["steps"]
assert len(steps) == 20 and all(len(s["layers"]) == 3 and len(s["layers"][0]["groups"]) == 3 for s in steps)
assert all(l["anchor"] for s in steps[:2] for l in s["layers"]), "warm-up steps are anchors"
dec = [g["decision"] for s in steps for l in s["layers"] for g in l["groups"]]
assert dec.count("reuse") > 0 and dec.count("compute") > 0
assert all(g["ase"] is not None for s in steps[2:] for l in s["layers"] for g in l["groups"])
EOF
# One process per rank (collectives over loopback TCP): every rank's statistics are gathered and
# summed in rank order, as the one-process run sums its threads', so every process takes the
# one-process run's decisions: R = 1 equals plain ring, R = 0.5 the one-process latents and report.
launch() { # out name, generate flags...
  local o=$1; shift
  timeout 120 "$BIN/ditrun" launch -n 4 -- generate "$reuse" "${gen[@]}" "$@" --out "$T/$o.st" >/dev/null 2>"$T/$o.log" ||
    { cat "$T/$o.log"; echo "launch -n 4 $*: failed"; exit 1; }
}
launch p1 --steps 4 --reuse-ratio 1
cmp "$T/p1.st" "$T/gp.st" || { echo "4 processes, R = 1: differs from plain ring"; exit 1; }
launch p2 --steps 20 --reuse-ratio 0.5 --reuse-eps-local 100 --reuse-report "$T/p2.json"
cmp "$T/p2.st" "$T/h1.st" || { echo "4 processes, R = 0.5: the latents differ from the one-process run"; exit 1; }
cmp "$T/p2.json" "$T/h1.json" || { echo "4 processes, R = 0.5: the report differs from the one-process run"; exit 1; }
echo "== 4 processes: R = 1 bit-identical to ring, R = 0.5 latents and report identical to one process"
run "$reuse" diag --steps 20 --reuse-ratio 0.5 --reuse-eps-local 100 --reuse-diagnostic --reuse-report "$T/diag.json"
cmp "$T/h1.st" "$T/diag.st" || { echo "--reuse-diagnostic changed the result"; exit 1; }
python3 - "$T/diag.json" "$T/h1.json" <<'EOF'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
n = 0
for sa, sb in zip(a["steps"], b["steps"]):
    for la, lb in zip(sa["layers"], sb["layers"]):
        for ga, gb in zip(la["groups"], lb["groups"]):
            assert ga["decision"] == gb["decision"], "diagnostic mode changed a decision"
            if ga["decision"] == "reuse":
                assert ga["error"] is not None and 0 < ga["error"] < 2, ga
                n += 1
            else:
                assert ga["error"] is None
print(f"diagnostic: {n} reused states measured")
assert n > 0
EOF

# A state-cache cap (--reuse-cache-mb) that one state per remote group passes but two adjacent
# groups per state meet: cp 4, groups of 1 (3 remote groups per layer) becomes 2 cached states per
# layer (distances 1+2 merged by LSE, 3 alone); the cache region shrinks to 2/3. R = 1 merges the
# two groups' states before the running one (other roundings than ring's sequential merges): equal
# to the same bundle without the planner byte for byte, to plain ring within fp32 rounding.
full=$(python3 -c "import json; print(json.load(open('$T/b/$(basename "$reuse")/manifest.json'))['topology']['reuse']['cache_bytes'])")
cap=$(python3 -c "print('%.9f' % (($full * 2 // 3 + 64) / 1048576))")
k2=$(compile --cp 4 --cp-mode ring --reuse ditango --reuse-cache-mb "$cap")
python3 - "$T/b/$(basename "$k2")" "$full" <<'EOF'
import json, os, sys
ru = json.load(open(os.path.join(sys.argv[1], "manifest.json")))["topology"]["reuse"]
assert ru["merge"] == 2 and ru["layers"] == 3, ru
assert ru["cache_bytes"] * 3 == int(sys.argv[2]) * 2, (ru, sys.argv[2])
print(f"--reuse-cache-mb: merge {ru['merge']}, cache {ru['cache_bytes']} of {sys.argv[2]} bytes")
EOF
run "$k2" k2a --steps 4 --reuse-ratio 1
run "$k2" k2b --steps 4
cmp "$T/k2a.st" "$T/k2b.st" || { echo "--reuse-cache-mb, R = 1: differs from the same bundle without the planner"; exit 1; }
"$BIN/st_compare" "$T/k2a.st" "$T/gp.st" latents 1e-5
grep -q "computed 12 of 12 remote attention states" "$T/k2a.log" || { cat "$T/k2a.log"; echo "merged, R = 1: not every state computed"; exit 1; }
run "$k2" k2h --steps 20 --reuse-ratio 0.5 --reuse-eps-local 100 --reuse-report "$T/k2h.json"
cos=$("$BIN/st_compare" "$T/k2h.st" "$T/exact.st" latents 1 | sed 's/.*cosine=\([0-9.]*\).*/\1/')
python3 - "$T/k2h.json" "$cos" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); cos = float(sys.argv[2])
print(f"merged, R = 0.5: computed {r['computed']} of {r['decided']}, final-latent cosine {cos:.6f}")
assert r["groups"] == 2 and all(len(l["groups"]) == 2 for s in r["steps"] for l in s["layers"])
assert 0.3 <= r["computed"] / r["decided"] <= 0.7 and cos >= 0.995, (r["computed"], r["decided"], cos)
EOF
if compile --cp 4 --cp-mode ring --reuse ditango --reuse-cache-mb 0.001 2>"$T/err" >/dev/null; then echo "accepted a cap below one state per layer"; exit 1; fi
grep -qE -- "--reuse-cache-mb 0.001: the state cache needs at least [0-9]+ bytes .*one merged state per layer, 3 layers x [0-9]+ bytes x 2 copies\), the cap is 1048 bytes; with one state per remote group \(3\) it would need $full bytes" "$T/err" ||
  { cat "$T/err"; exit 1; }
echo "refused: $(cat "$T/err")"

# USP (--cp-mode usp --ulysses 2): after the all-to-all each rank holds half the heads of its
# Ulysses pair's tokens, and the reuse groups partition the ring members (the cp / 2 ranks sharing a
# Ulysses index, 2 apart) as ring mode partitions the ranks; the all-to-alls stay around the ring.
# cp 4 has 2 ring members (groups of 1), cp 8 four (groups of 1 and 2; 16 tokens: --height 64, its
# inputs the tiny inputs with each latent frame's rows repeated to 8).
python3 - "$d" "$T/in64.safetensors" <<'EOF'
import json, struct, sys
def read(path):
    b = open(path, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
t = {**read(sys.argv[1] + "/forward_inputs.safetensors"), **read(sys.argv[1] + "/generate_inputs.safetensors")}
for k in ("hidden_states", "init_latents"):  # f32 [B, C, f, 6, w] -> [B, C, f, 8, w], row r from r % 6
    dt, (B, C, f, h, w), raw = t[k]
    rw = w * 4
    t[k] = (dt, [B, C, f, 8, w], b"".join(raw[(i * h + r % h) * rw:(i * h + r % h + 1) * rw] for i in range(B * C * f) for r in range(8)))
head, off, data = {}, 0, b""
for k, (dt, shape, raw) in t.items():
    head[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
    off, data = off + len(raw), data + raw
hb = json.dumps(head).encode()
hb += b" " * (-len(hb) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + data)
EOF
usp_case() { # cp, height, forward inputs, generate inputs, extra flags...: R = 1 (groups of 1) bit-identical to usp
  local cp=$1 h=$2 in=$3 gin=$4; shift 4
  local pu ru
  pu=$(compile --cp "$cp" --cp-mode usp --ulysses 2 --height "$h" "$@")
  ru=$(compile --cp "$cp" --cp-mode usp --ulysses 2 --height "$h" --reuse ditango "$@")
  "$BIN/ditrun" forward "$pu" --inputs "$in" --out "$T/fp.st" 2>/dev/null
  "$BIN/ditrun" forward "$ru" --inputs "$in" --out "$T/fr.st" 2>/dev/null
  cmp "$T/fp.st" "$T/fr.st" || { echo "usp forward --cp $cp $*: reuse bundle differs from plain usp"; exit 1; }
  local gi=(--prompt-embeds "$gin" --negative-embeds "$gin" --init-latents "$gin" --guidance 5 --shift 3)
  "$BIN/ditrun" generate "$pu" "${gi[@]}" --steps 4 --out "$T/up.st" 2>/dev/null
  "$BIN/ditrun" generate "$ru" "${gi[@]}" --steps 4 --reuse-ratio 1 --out "$T/ur.st" 2>"$T/ur.log"
  cmp "$T/up.st" "$T/ur.st" || { echo "usp generate --cp $cp $* --reuse-ratio 1 differs from plain usp"; exit 1; }
  local n=$((3 * (cp / 2 - 1) * 2)) # layers x remote groups x steps after warm-up
  grep -q "computed $n of $n remote attention states" "$T/ur.log" || { cat "$T/ur.log"; echo "usp R = 1 did not compute every remote state"; exit 1; }
  echo "== usp --cp $cp --ulysses 2${*:+ $*}: R = 1 bit-identical to usp"
}
usp_case 4 "$H" "$d/forward_inputs.safetensors" "$d/generate_inputs.safetensors"
usp_case 4 "$H" "$d/forward_inputs.safetensors" "$d/generate_inputs.safetensors" --cfg-parallel
usp_case 8 64 "$T/in64.safetensors" "$T/in64.safetensors"
usp_case 8 64 "$T/in64.safetensors" "$T/in64.safetensors" --cfg-parallel
# cp 8 in groups of 2 ring members (the local pair and one remote pair, each pair's ring over ranks 2
# apart): another merge order, so the same bundle without the planner byte for byte, usp within fp32
# rounding (with and without --cfg-parallel); likewise under a 2/3 cache cap, where the 3 remote
# groups of 1 become 2 cached states per layer.
gen8=(--prompt-embeds "$T/in64.safetensors" --negative-embeds "$T/in64.safetensors" --init-latents "$T/in64.safetensors"
      --guidance 5 --shift 3)
up8=$(compile --cp 8 --cp-mode usp --ulysses 2 --height 64)
ug2=$(compile --cp 8 --cp-mode usp --ulysses 2 --height 64 --reuse ditango --reuse-group 2)
ug2c=$(compile --cp 8 --cp-mode usp --ulysses 2 --height 64 --reuse ditango --reuse-group 2 --cfg-parallel)
u8=$(compile --cp 8 --cp-mode usp --ulysses 2 --height 64 --reuse ditango)
ufull=$(python3 -c "import json; print(json.load(open('$T/b/$(basename "$u8")/manifest.json'))['topology']['reuse']['cache_bytes'])")
uk2=$(compile --cp 8 --cp-mode usp --ulysses 2 --height 64 --reuse ditango --reuse-cache-mb "$(python3 -c "print('%.9f' % (($ufull * 2 // 3 + 64) / 1048576))")")
python3 -c "import json; ru = json.load(open('$T/b/$(basename "$uk2")/manifest.json'))['topology']['reuse']; assert ru['merge'] == 2 and ru['ulysses'] == 2 and ru['cache_bytes'] * 3 == $ufull * 2, ru"
"$BIN/ditrun" generate "$up8" "${gen8[@]}" --steps 4 --out "$T/up8.st" 2>/dev/null
for c in "ug2 $ug2" "ug2c $ug2c" "uk2 $uk2"; do
  read -r b bundle <<<"$c"
  "$BIN/ditrun" generate "$bundle" "${gen8[@]}" --steps 4 --reuse-ratio 1 --out "$T/${b}a.st" 2>"$T/${b}a.log"
  "$BIN/ditrun" generate "$bundle" "${gen8[@]}" --steps 4 --out "$T/${b}b.st" 2>/dev/null
  cmp "$T/${b}a.st" "$T/${b}b.st" || { echo "usp ($b), R = 1: differs from the same bundle without the planner"; exit 1; }
  "$BIN/st_compare" "$T/${b}a.st" "$T/up8.st" latents 1e-5
done
grep -q "computed 12 of 12 remote attention states" "$T/uk2a.log" || { cat "$T/uk2a.log"; echo "usp merged, R = 1: not every state computed"; exit 1; }
# R = 0.5, 20 steps, cp 4 (one remote ring member per layer) and cp 8 in groups of 2: each twice
# (reports and latents identical) and as one process per rank (identical to the one-process run),
# the final latents against exact usp.
up4=$(compile --cp 4 --cp-mode usp --ulysses 2)
u4=$(compile --cp 4 --cp-mode usp --ulysses 2 --reuse ditango)
"$BIN/ditrun" generate "$up4" "${gen[@]}" --steps 20 --out "$T/ux4.st" 2>/dev/null
"$BIN/ditrun" generate "$up8" "${gen8[@]}" --steps 20 --out "$T/ux8.st" 2>/dev/null
usp_half() { # name, bundle, cp (= processes), generate inputs...
  local b=$1 bundle=$2 n=$3 cos; shift 3
  local half=("$@" --steps 20 --reuse-ratio 0.5 --reuse-eps-local 100)
  for o in h1 h2; do
    "$BIN/ditrun" generate "$bundle" "${half[@]}" --reuse-report "$T/$b.$o.json" --out "$T/$b.$o.st" 2>"$T/$o.log" ||
      { cat "$T/$o.log"; exit 1; }
  done
  cmp "$T/$b.h1.json" "$T/$b.h2.json" || { echo "usp --cp $n, R = 0.5: the reports of two runs differ"; exit 1; }
  cmp "$T/$b.h1.st" "$T/$b.h2.st" || { echo "usp --cp $n, R = 0.5: the latents of two runs differ"; exit 1; }
  timeout 120 "$BIN/ditrun" launch -n "$n" -- generate "$bundle" "${half[@]}" --reuse-report "$T/$b.p.json" --out "$T/$b.p.st" \
    >/dev/null 2>"$T/p.log" || { cat "$T/p.log"; echo "usp launch -n $n: failed"; exit 1; }
  cmp "$T/$b.p.st" "$T/$b.h1.st" || { echo "usp, $n processes, R = 0.5: the latents differ from the one-process run"; exit 1; }
  cmp "$T/$b.p.json" "$T/$b.h1.json" || { echo "usp, $n processes, R = 0.5: the report differs from the one-process run"; exit 1; }
  cos=$("$BIN/st_compare" "$T/$b.h1.st" "$T/ux$n.st" latents 1 | sed 's/.*cosine=\([0-9.]*\).*/\1/')
  python3 - "$T/$b.h1.json" "$cos" "$n" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); cos = float(sys.argv[2])
ratio = r["computed"] / r["decided"]
print(f"usp --cp {sys.argv[3]}, R = 0.5: computed {r['computed']} of {r['decided']} ({ratio:.2f}), final-latent cosine {cos:.6f}")
assert r["groups"] == 1 and len(r["steps"]) == 20, r["groups"]
dec = [g["decision"] for s in r["steps"] for l in s["layers"] for g in l["groups"]]
assert dec.count("reuse") > 0 and dec.count("compute") > 0
assert 0.35 <= ratio <= 0.65, ratio
assert cos >= 0.995, cos
EOF
}
usp_half u4 "$u4" 4 "${gen[@]}"
usp_half ug2 "$ug2" 8 "${gen8[@]}"
echo "== usp: R = 0.5 reproducible, one process per rank identical to one process"
"$BIN/ditc" inspect "$ug2c" | grep -qF "reuse      ditango: 2 groups of 2 ring members (x ulysses 2), a state cache per layer (3) and remote group, 1 copy" ||
  { "$BIN/ditc" inspect "$ug2c"; echo "inspect does not show the usp reuse groups"; exit 1; }

# The memory plan: the caches at the bottom of the arena, copies x (o + lse) per slot (layers x
# remote groups), apart from every other arena value; the manifest's peak counts the arena and its
# reuse section the caches. A cached state is the ring member's: under usp heads / U heads (of the
# tiny model's 4, 12 wide) of U ranks' tokens.
python3 - "$T/b/$(basename "$reuse")" "$T/b/$(basename "$g2c")" "$T/b/$(basename "$k2")" "$T/b/$(basename "$u4")" \
  "$T/b/$(basename "$ug2c")" "$T/b/$(basename "$uk2")" <<'EOF'
import json, os, sys
for bdir in sys.argv[1:]:
    m = json.load(open(os.path.join(bdir, "manifest.json")))
    ru = m["topology"]["reuse"]
    u, cp = ru.get("ulysses", 1), m["topology"]["cp"]
    assert (u > 1) == (m["topology"]["cp_mode"] == "usp"), ru
    slots = ru["layers"] * ((cp // u // ru["group"] - 2) // ru["merge"] + 1)
    _, f, h, w = m["shape"]["latent"]
    tokens, heads = f * (h // 2) * (w // 2) * u // cp, 4 // u
    for rank in m["ranks"]:
        p = json.load(open(os.path.join(bdir, "blobs", rank["plan"])))
        vals = p["values"]
        caches = [o for s in p["steps"] if s["op"] == "state_cache" for o in s["out"]]
        assert len(caches) == 2 * slots, (len(caches), slots)
        for o, lse in zip(caches[::2], caches[1::2]):
            assert vals[o]["shape"][1:] == [tokens, heads * 12] and vals[lse]["shape"][1:] == [heads, tokens], (vals[o], vals[lse])
        def size(v):
            n = 4 if v["dtype"] == "f32" else 2
            for d in v["shape"]: n *= d
            return n
        region = max((vals[i]["offset"] + size(vals[i]) + 255) // 256 * 256 for i in caches)
        expect = sum((size(vals[i]) + 255) // 256 * 256 for i in caches)
        assert region == expect, (region, expect)
        low = ru["copies"] * region
        others = [v for i, v in enumerate(vals) if v["storage"] == "arena" and i not in caches]
        assert all(v["offset"] >= low for v in others), "an arena value inside the cache region"
        assert p["arena_bytes"] >= low
    assert ru["cache_bytes"] == low, (ru, low)
    assert m["memory"]["arena_bytes"] >= low and m["memory"]["peak_bytes"] >= m["memory"]["arena_bytes"] + m["memory"]["weight_bytes"]
    print(f"{os.path.basename(bdir)}: {slots} slots, {ru['copies']} copies, cache {low} of the arena's {p['arena_bytes']} bytes")
EOF

"$BIN/ditc" inspect "$g2c" | grep -qF "reuse      ditango: 2 groups of 2 ranks, a state cache per layer (3) and remote group, 1 copy" ||
  { "$BIN/ditc" inspect "$g2c"; echo "inspect does not show the reuse groups"; exit 1; }

# For sm_90 the reuse bundle compiles (NVRTC): its state_cache steps carry no kernel (the CUDA
# backend copies or skips them; tests/gpu/run.sh section ditango runs it on the GPU).
g90=$(compile --cp 2 --cp-mode ring --reuse ditango --target sm_90 --dtype bf16)
python3 - "$g90" <<'PY'
import json, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
plan = [b["hash"] for b in m["blobs"] if b["role"] == "plan"][0]
steps = json.load(open(d + "/blobs/" + plan))["steps"]
sc = [s for s in steps if s["op"] == "state_cache"]
assert sc and all("kernel" not in s for s in sc), sc[:2]
assert any("kernel" in s for s in steps), "no step has a kernel"
PY

# Bad flags, refused with the reason.
for bad in "--cp 4 --cp-mode gather --reuse ditango:--reuse ditango: needs --cp N (N >= 2) --cp-mode ring or usp, found --cp 4 --cp-mode gather" \
           "--cp 4 --cp-mode ulysses --reuse ditango:needs --cp N (N >= 2) --cp-mode ring or usp, found --cp 4 --cp-mode ulysses" \
           "--cp 4 --cp-mode usp --ulysses 2 --reuse ditango --reuse-group 2:--reuse-group 2: the ring members per reuse group: expected a divisor of the 2 ring members (--cp 4 / --ulysses 2) that leaves >= 2 groups" \
           "--cp 8 --cp-mode usp --ulysses 2 --height 64 --reuse ditango --reuse-group 3:expected a divisor of the 4 ring members (--cp 8 / --ulysses 2)" \
           "--cp 8 --cp-mode usp --ulysses 2 --height 64 --reuse ditango --reuse-group 2 --ranks-per-node 2:--ranks-per-node 2: a reuse group of 2 (x ulysses 2 x tp 1) would straddle nodes" \
           "--cp 4 --cp-mode usp --ulysses 4 --reuse ditango:U must be >= 2 and divide cp into a ring of >= 2" \
           "--cp 4 --cp-mode ring --reuse ditango --reuse-group 3:--reuse-group 3: the ranks per reuse group: expected a divisor of --cp 4 that leaves >= 2 groups" \
           "--cp 4 --cp-mode ring --reuse ditango --reuse-group 4:expected a divisor of --cp 4 that leaves >= 2 groups" \
           "--cp 4 --cp-mode ring --reuse-group 2:--reuse-group needs --reuse ditango" \
           "--cp 4 --cp-mode ring --reuse-cache-mb 1:--reuse-cache-mb needs --reuse ditango" \
           "--cp 4 --cp-mode ring --reuse other:--reuse other: expected ditango"; do
  args=${bad%%:*}; msg=${bad#*:}
  # shellcheck disable=SC2086
  if compile $args 2>"$T/err" >/dev/null; then echo "accepted $args"; exit 1; fi
  grep -qF -- "$msg" "$T/err" || { cat "$T/err"; exit 1; }
  echo "refused: $(cat "$T/err")"
done
for bad in "$plain|--reuse-ratio 0.5|the bundle was compiled without --reuse ditango" \
           "$reuse|--reuse-ratio 1.5|--reuse-ratio: the share of remote attention recomputed: expected a number in [0, 1], found 1.5" \
           "$reuse|--reuse-eps-local 0|--reuse-eps-local: the local drift that forces an anchor: expected a finite number > 0, found 0" \
           "$reuse|--reuse-warmup 0|--reuse-warmup: full steps first: expected >= 1" \
           "$reuse|--reuse-ratio 0.5 --step-cache cadence:2|not combined yet"; do
  IFS='|' read -r b args msg <<<"$bad"
  # shellcheck disable=SC2086
  if "$BIN/ditrun" generate "$b" "${gen[@]}" --steps 4 $args --out "$T/x.st" 2>"$T/err"; then echo "accepted $args"; exit 1; fi
  grep -qF -- "$msg" "$T/err" || { cat "$T/err"; exit 1; }
  echo "refused: $(tail -n1 "$T/err")"
done
if "$BIN/ditrun" forward "$reuse" --inputs "$d/forward_inputs.safetensors" --reuse-ratio 0.5 --out "$T/x.st" 2>"$T/err"; then exit 1; fi
grep -qF -- "--reuse-ratio is an option of generate" "$T/err" || { cat "$T/err"; exit 1; }
echo "ditango: ok"
