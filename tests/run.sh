#!/usr/bin/env bash
# One command on a fresh machine: install what the build needs, then build and run every test
# twice: an optimized build, and one under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
for variant in release asan; do
  dir=build-test-$variant
  flags=(-DCMAKE_BUILD_TYPE=Release)
  [ "$variant" = asan ] && flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDIT_SANITIZE=ON)
  echo "== $variant build" >&2
  cmake -S . -B "$dir" "${flags[@]}" >/dev/null
  cmake --build "$dir" -j"$jobs" >/dev/null
  echo "== $variant tests" >&2
  ctest --test-dir "$dir" --output-on-failure -j"$jobs"
done
