#!/usr/bin/env bash
# Builds build-gpu here for a GPU machine that has the CUDA toolkit and driver but none of our
# other dependencies: no MLIR (not needed by the CUDA codegen), cJSON/xxHash/zstd shipped in
# bin/ beside the binaries (they find them through their $ORIGIN run path).
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DDIT_MLIR=OFF >/dev/null
cmake --build build-gpu -j"$(nproc)" --target ditc ditrun make_tiny_wan st_compare >/dev/null
for lib in libcjson.so.1 libxxhash.so.0 libzstd.so.1; do
  cp -L "/usr/lib/x86_64-linux-gnu/$lib" build-gpu/bin/
done
du -sh build-gpu/bin
