#!/bin/sh
# Builds build-attn/attn_bench and compiles every kernel that run.py needs into build-attn/cubin
# (NVRTC + nvJitLink; no GPU needed). Usage: bench/attention/build.sh
set -e
cd "$(dirname "$0")/../.."
CUDA=${CUDA_HOME:-/usr/local/cuda}
mkdir -p build-attn
cmake -DDEF=compiler/kernels/dit_abi.def -DOUT=build-attn/dit_abi.h -P cmake/kernel_abi.cmake
${CC:-cc} -O2 -std=c11 -Wall -Wno-unused-function -o build-attn/attn_bench bench/attention/attn_bench.c compiler/att90_tiles.c \
  -I. -Ibuild-attn -I"$CUDA/include" -L"$CUDA/lib64" -lnvrtc -lnvJitLink -ldl -lm -Wl,-rpath,"$CUDA/lib64"
python3 bench/attention/run.py --compile-only
