#!/usr/bin/env bash
# One command on a fresh machine: install what the build needs, build, and run the main job
# on the embedded tiny model (examples/tiny_pipeline.sh). Output goes to ./out/tiny.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
examples/tiny_pipeline.sh build out/tiny
