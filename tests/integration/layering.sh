#!/usr/bin/env bash
# The layout's dependency rule, checked on the sources and the built binaries:
# - each folder includes only the folders below it (README "Layout"): base/ nothing of ours;
#   ir/, artifacts/ and text/ base/; passes/ ir/; store/ artifacts/; the compiler everything but
#   the runtime; the runtime neither the IR, the passes nor the compiler;
# - the code generators' headers (MLIR, LLVM, NVRTC, nvJitLink) appear only in compiler/;
# - ditrun and libditrun need none of MLIR, LLVM, NVRTC, nvJitLink, CUDA, cuBLASLt or NCCL as a
#   shared library: a serving host loads what its bundle uses with dlopen.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }

declare -A allowed=(
  [base]="base"
  [ir]="ir base"
  [artifacts]="artifacts base"
  [text]="text base"
  [passes]="passes ir base"
  [store]="store artifacts base"
  [compiler]="compiler passes ir store artifacts text base"
  [runtime]="runtime store artifacts text base"
)
bad=0
checked=0
for folder in "${!allowed[@]}"; do
  while IFS= read -r hit; do
    file=${hit%%:*}
    dep=$(sed -n 's/.*#include "\([a-z_]*\)\/.*/\1/p' <<<"${hit#*:}")
    checked=$((checked + 1))
    case " ${allowed[$folder]} " in
      *" $dep "*) ;;
      *) echo "$file includes $dep/: $folder/ may include only ${allowed[$folder]}"; bad=1 ;;
    esac
  done < <(grep -rHoE '#include "[a-z_]+/[^"]+"' "$folder" --include='*.c' --include='*.h' --include='*.cc' \
             --include='*.cu' --include='*.cuh' --include='*.def' || true)
done
[ "$bad" = 0 ] || fail "the dependency rule is broken (above)"
[ "$checked" -gt 100 ] || fail "only $checked includes found: the check reads the wrong tree"

gen=$(grep -rlE '#include <(mlir-c|llvm-c)/|#include <(nvrtc|nvJitLink)\.h>' \
        base ir passes artifacts store runtime text --include='*.c' --include='*.h' --include='*.cc' || true)
[ -z "$gen" ] || fail "code-generator headers outside compiler/: $gen"

for f in "$BUILD/bin/ditrun" "$BUILD/lib/libditrun.so"; do
  [ -e "$f" ] || fail "$f was not built"
  needed=$(readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')
  [ -n "$needed" ] || fail "readelf lists no shared libraries of $f"
  hit=$(grep -E '^lib(MLIR|LLVM|nvrtc|nvJitLink|cuda|cudart|cublas|cublasLt|nccl)[.-]' <<<"$needed" || true)
  [ -z "$hit" ] || fail "$(basename "$f") needs $(echo $hit): the runtime loads these with dlopen"
done
echo "layering: $checked includes in ${#allowed[@]} folders follow the dependency rule; ditrun and libditrun need no code generator or GPU library"
