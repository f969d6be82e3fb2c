#!/usr/bin/env bash
# One command on a fresh machine: install what the build needs, then build and run every test
# twice: an optimized build, and one under AddressSanitizer + UndefinedBehaviorSanitizer; then
# three of them under valgrind's memcheck (the uninstrumented libraries' side) and the tests that
# run threads over shared data (label "threads") under ThreadSanitizer. First,
# a runtime built without the store (-DDIT_STORE=OFF) shows it links neither libcurl nor OpenSSL
# and refuses what needs the store.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
echo "== runtime without the store" >&2
cmake -S . -B build-test-nostore -DCMAKE_BUILD_TYPE=Release -DDIT_STORE=OFF -DDIT_MLIR=OFF -DDIT_CUDA=OFF >/dev/null
cmake --build build-test-nostore -j"$jobs" --target ditc ditrun >/dev/null
bash tests/integration/store_off.sh build-test-nostore
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
# memcheck on the optimized build where AddressSanitizer is blind: the tests whose ditrun hands our
# buffers to uninstrumented libraries (FFmpeg, libspng, SentencePiece).
echo "== valgrind (third-party libraries on our buffers)" >&2
tests/tools/valgrind_run.sh build-test-release tiny_pipeline media pipeline_image
# ThreadSanitizer: every report fails the run, whatever the test made of its process's exit.
dir=build-test-tsan
echo "== tsan build" >&2
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDIT_TSAN=ON >/dev/null
cmake --build "$dir" -j"$jobs" >/dev/null
echo "== tsan tests (label threads)" >&2
rm -rf "$dir/tsan-reports" && mkdir -p "$dir/tsan-reports"
TSAN_OPTIONS="log_path=$PWD/$dir/tsan-reports/report second_deadlock_stack=1" ctest --test-dir "$dir" --output-on-failure -j"$jobs" -L threads
if compgen -G "$dir/tsan-reports/report*" >/dev/null; then
  cat "$dir"/tsan-reports/report* >&2
  echo "ThreadSanitizer reported the above" >&2
  exit 1
fi
