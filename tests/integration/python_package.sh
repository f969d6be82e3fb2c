#!/usr/bin/env bash
# The ditrun Python package: the wheel builds from this build (python/build_wheel.py, standard
# library only), installs into a fresh virtualenv (system site packages: numpy from Debian, no
# package index), and python/test_ditrun.py runs the tiny Wan golden forward through it with
# numpy and checks its errors. Skipped (exit 77) only where python3 is absent.
set -euo pipefail
B=$1
. tests/tools/asan_preload.sh
PRELOAD=$(asan_preload "$B")
PY=
for p in python3 /usr/bin/python3; do
  if command -v "$p" > /dev/null && "$p" -c "import numpy, venv, ensurepip" 2> /dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
  command -v python3 > /dev/null || { echo "SKIPPED: python3 is absent (scripts/setup.sh installs it)"; exit 77; }
  echo "no python3 with numpy, venv and ensurepip: run scripts/setup.sh (python3-numpy, python3-venv)"; exit 1
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
wheel=$("$PY" python/build_wheel.py --build-dir "$B" -o "$T/dist" | tail -n 1)
case "$wheel" in *-py3-none-linux_x86_64.whl) ;; *) echo "unexpected wheel name: $wheel"; exit 1 ;; esac
"$PY" -m venv --system-site-packages "$T/venv"
"$T/venv/bin/python" -m pip install -q --no-index --no-deps "$wheel"
# Nothing from the build tree: the installed package finds its library and tools itself.
env -u DITRUN_LIBRARY PATH=/usr/bin:/bin ${PRELOAD:+LD_PRELOAD=$PRELOAD ASAN_OPTIONS=detect_leaks=0} \
  $T/venv/bin/python -P python/test_ditrun.py tests/data/wan_tiny_a "$T"
# The PEP 517 path builds the same files (pip wheel with the system's pip, offline).
if "$PY" -m pip --version > /dev/null 2>&1; then
  DITRUN_BUILD_DIR=$(cd "$B" && pwd) "$PY" -m pip wheel -q --no-build-isolation --no-deps --no-index -w "$T/pep517" python/ > /dev/null
  list='import sys, zipfile; print("\n".join(sorted(zipfile.ZipFile(sys.argv[1]).namelist())))'
  cmp <("$PY" -c "$list" "$wheel") <("$PY" -c "$list" "$T"/pep517/*.whl) || { echo "pip wheel built other files"; exit 1; }
fi
echo "python_package: wheel built, installed into a fresh virtualenv, golden forward and errors as expected"
