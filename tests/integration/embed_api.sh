#!/usr/bin/env bash
# libditrun.so and its embedding API: only ditrun_* symbols exported under the API major's
# SONAME; examples/embed (built against the shared library) runs the tiny Wan golden forward
# and matches diffusers' output like the command line does (max relative error <= 1e-4); its
# errors carry the runtime's messages; the installed CMake package and pkg-config file build it
# again outside the tree.
set -euo pipefail
B=$1
. tests/tools/asan_preload.sh
PRELOAD=$(asan_preload "$B")
BIN=$B/bin
LIB=$B/lib/libditrun.so
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
D=tests/data/wan_tiny_a

major=$(sed -n 's/^#define DITRUN_API_VERSION_MAJOR \([0-9]*\)$/\1/p' runtime/ditrun_api.h)
soname=$(readelf -d "$LIB" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libditrun.so.$major" ] || { echo "SONAME '$soname', expected libditrun.so.$major"; exit 1; }
other=$(nm -D --defined-only "$LIB" | awk '$2 != "A" && $3 !~ /^ditrun_/ {print $3}')
[ -z "$other" ] || { echo "libditrun.so exports symbols outside the API: $other"; exit 1; }
nm -D --defined-only "$LIB" | grep -q " T ditrun_forward@@DITRUN_$major$" || { echo "ditrun_forward is not exported"; exit 1; }

read -r F H W BT L < <(python3 -c "import json; m=json.load(open('$D/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'])")
line=$("$BIN/ditc" compile "$D/model" --frames "$F" --height "$H" --width "$W" --batch "$BT" --text-len "$L" -o "$T/bundles" -q | tail -n 1)
bundle=${line##* }

# The golden's tensors as raw f32 files (the example's input format), and back.
python3 - "$D" "$T" <<'PY'
import json, struct, sys
d, t = sys.argv[1], sys.argv[2]
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    for name, h in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        body = raw[8 + n + a:8 + n + b]
        fmt = {"F32": "f", "I64": "q"}[h["dtype"]]
        yield name, struct.unpack("<%d%s" % (len(body) // struct.calcsize(fmt), fmt), body)
for name, vals in tensors(d + "/forward_inputs.safetensors"):
    open("%s/%s.f32" % (t, name), "wb").write(struct.pack("<%df" % len(vals), *vals))
for name, vals in tensors(d + "/forward_output.safetensors"):
    open("%s/want_%s.f32" % (t, name), "wb").write(struct.pack("<%df" % len(vals), *vals))
PY
ins=()
for n in hidden_states timestep encoder_hidden_states; do ins+=("$n=$T/$n.f32"); done
"$BIN/embed" "$bundle" "${ins[@]}" "sample=$T/sample.f32" > "$T/embed.log"
grep -q "^input hidden_states rank 5" "$T/embed.log" || { echo "embed did not report the signature:"; cat "$T/embed.log"; exit 1; }
python3 - "$T" <<'PY'
import struct, sys
t = sys.argv[1]
got, want = (open(t + f, "rb").read() for f in ("/sample.f32", "/want_sample.f32"))
assert len(got) == len(want) and len(got) > 0, (len(got), len(want))
g = struct.unpack("<%df" % (len(got) // 4), got)
w = struct.unpack("<%df" % (len(want) // 4), want)
scale = max(abs(x) for x in w)
err = max(abs(a - b) for a, b in zip(g, w)) / scale
assert err <= 1e-4, "embed's forward differs from diffusers: max relative error %g" % err
print("embed forward matches diffusers: max relative error %.3g" % err)
PY

# A short input file and an unknown name are refused; the runtime's own message comes through.
head -c 100 "$T/hidden_states.f32" > "$T/short.f32"
if "$BIN/embed" "$bundle" "hidden_states=$T/short.f32" "sample=$T/x.f32" > /dev/null 2> "$T/err.log"; then echo "a short input was accepted"; exit 1; fi
grep -q "shorter than" "$T/err.log" || { cat "$T/err.log"; exit 1; }
if "$BIN/embed" "$bundle" "hidden_states=$T/hidden_states.f32" "sample=$T/x.f32" > /dev/null 2> "$T/err.log"; then
  echo "a forward with unbound inputs ran"; exit 1
fi
grep -q "FAILED_PRECONDITION: input '[a-z_]*': not bound" "$T/err.log" || { cat "$T/err.log"; exit 1; }
if "$BIN/embed" "$T/nonexistent" "sample=$T/x.f32" 2> "$T/err.log"; then echo "a missing bundle was accepted"; exit 1; fi
grep -q "^embed: [A-Z_]*: .*nonexistent" "$T/err.log" || { echo "expected the runtime's error naming the path:"; cat "$T/err.log"; exit 1; }

# Installed: the CMake package and the pkg-config file build the example outside the tree.
cmake --install "$B" --prefix "$T/inst" > /dev/null
mkdir -p "$T/proj"
cp examples/embed.c "$T/proj/"
cat > "$T/proj/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(embed_outside C)
find_package(ditrun 1 REQUIRED)
add_executable(embed embed.c)
target_link_libraries(embed PRIVATE ditrun::ditrun)
CM
cmake -S "$T/proj" -B "$T/proj/build" -DCMAKE_PREFIX_PATH="$T/inst" > "$T/cmake.log" 2>&1 || { cat "$T/cmake.log"; exit 1; }
cmake --build "$T/proj/build" > "$T/cmake.log" 2>&1 || { cat "$T/cmake.log"; exit 1; }
libdir=$(dirname "$(find "$T/inst" -name libditrun.so.$major | head -n 1)")
env LD_LIBRARY_PATH=$libdir ${PRELOAD:+LD_PRELOAD=$PRELOAD} "$T/proj/build/embed" "$bundle" "${ins[@]}" "sample=$T/sample2.f32" > /dev/null
cmp "$T/sample.f32" "$T/sample2.f32"
if command -v pkg-config > /dev/null; then
  # shellcheck disable=SC2046
  cc -o "$T/embed_pc" examples/embed.c $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs ditrun)
  env LD_LIBRARY_PATH=$libdir ${PRELOAD:+LD_PRELOAD=$PRELOAD} "$T/embed_pc" "$bundle" "${ins[@]}" "sample=$T/sample3.f32" > /dev/null
  cmp "$T/sample.f32" "$T/sample3.f32"
fi
echo "embed_api: libditrun.so exports the API alone; the example matches diffusers in the tree and installed"
