#!/usr/bin/env bash
# Tests depend on nothing scripts/setup.sh does not install: the suite's own scripts import only
# the standard library (and what setup.sh declares), and the check finds an undeclared import in
# each form a script can run Python (a file, python3 -c, a here-document).
set -euo pipefail
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 scripts/check_test_deps.py .
mkdir -p "$T/scripts" "$T/tests/integration" "$T/tests/tools"
printf '#!/bin/sh\n# python-modules: yaml\n' >"$T/scripts/setup.sh"
# Written through a variable and printf, so that no check of this very script sees the samples.
py=python3
printf '%s - "$x" <<'"'"'PY'"'"'\n%s json, sys\n%s numpy as np\nPY\n%s -c "%s os; from safetensors.numpy %s save_file"\n%s tests/tools/helper.py\n%s -c "%s yaml"\n' \
  "$py" import import "$py" import import "$py" "$py" import >"$T/tests/integration/a.sh"
printf 'import re\nfrom torch import nn\nimport mylocal\n' >"$T/tests/tools/helper.py"
printf 'import scipy\nimport jax  # device only\n' >"$T/tests/tools/mylocal.py"
set +e
python3 scripts/check_test_deps.py "$T" >"$T/out" 2>/dev/null
rc=$?
set -e
[ $rc = 1 ] || { echo "expected exit 1, got $rc"; cat "$T/out"; exit 1; }
for want in "tests/integration/a.sh:3: imports 'numpy'" "tests/integration/a.sh:5: imports 'safetensors'" \
            "tests/tools/helper.py:2: imports 'torch'" "tests/tools/mylocal.py:1: imports 'scipy'"; do
  grep -qF "$want" "$T/out" || { echo "missing: $want"; cat "$T/out"; exit 1; }
done
[ "$(wc -l <"$T/out")" = 4 ] || { echo "expected exactly 4 findings (json, sys, os, re, yaml are provided, mylocal is beside its importer, jax is marked)"; cat "$T/out"; exit 1; }
echo "undeclared imports found in here-documents, -c one-liners, called files and the modules beside them; declared, standard and device-only ones pass"
