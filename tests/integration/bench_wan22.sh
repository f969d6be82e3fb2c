#!/usr/bin/env bash
# The Wan2.2 GPU benchmarks without a GPU: each script's --dry-run (shapes, token timesteps,
# default layer counts, the UniPC schedule and expert per step, the budget scaling, summaries),
# bench/report.py's wan22 passages from those results (and its refusal of dry-run results as
# figures), the zero-weight pipeline folders tests/gpu/prepare.sh compiles (at tiny widths here,
# through ditc when the build has it), and the GPU script's syntax. Takes the build directory as $1.
set -euo pipefail
BUILD=${1:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

python3 bench/wan22_forward.py --dry-run --out "$T/r" > "$T/fw.txt"
python3 bench/wan22_generate.py --dry-run --out "$T/r" > "$T/gen.txt"
grep -q "^a14b: default --layers" "$T/fw.txt"
grep -q "^ti2v-5b: default --layers 30," "$T/fw.txt"
grep -q "experts transformer transformer transformer_2 transformer_2 transformer_2 transformer_2" "$T/gen.txt"
for f in wan22_forward_a14b wan22_forward_ti2v-5b wan22_generate_a14b wan22_generate_ti2v; do
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); assert d['dry_run'] is True" "$T/r/$f.json"
done

# The passages render from those files, and only when asked to accept made-up times.
python3 bench/report.py --render wan22 --results "$T/r" --allow-dry-run | tr "\n" " " | tr -s " " > "$T/p1.txt"
python3 bench/report.py --render wan22_generate --results "$T/r" --allow-dry-run | tr "\n" " " | tr -s " " > "$T/p2.txt"
grep -q "1000.0 ms per forward against diffusers' 1300.0 ms eager (1.30x)" "$T/p1.txt"
grep -q "Wan2.2-TI2V-5B, all 30 blocks" "$T/p1.txt"
grep -q "2 steps on .transformer. and 4 on .transformer_2., as the pipeline chose" "$T/p2.txt"
grep -q "around the switch" "$T/p2.txt"
if python3 bench/report.py --render wan22 --results "$T/r" > "$T/p3.txt" 2>&1; then
  echo "report.py rendered dry-run results as figures"; exit 1
fi
grep -q "written by a --dry-run" "$T/p3.txt"
# A refusal is rendered as one, not as a failure or a figure.
python3 - "$T/r/wan22_generate_a14b.json" <<'PY'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
d["budget"] = {"budget_gib": 48.0, "budget_gib_compiled": 13.8,
               "refused": "ditc: error: UNIMPLEMENTED: weight offload of two-expert bundles is not supported yet"}
json.dump(d, open(p, "w"))
PY
python3 bench/report.py --render wan22_generate --results "$T/r" --allow-dry-run | tr '\n' ' ' | grep -q "ditc refused: ditc: error: UNIMPLEMENTED"

# The folders prepare.sh compiles for the kernel cache, at tiny widths: ditc takes both.
if [ -x "$BUILD/bin/ditc" ]; then
  export DITC_CACHE_DIR=$T/cache
  for v in a14b ti2v-5b; do
    python3 bench/wan22_forward.py --write-folder "$T/f_$v" --variant "$v" --layers 2 --shrink > /dev/null
    "$BUILD/bin/ditc" compile "$T/f_$v" --frames 9 --height 64 --width 96 --text-len 7 --dtype bf16 --target cpu -o "$T/b" -q > "$T/c_$v.txt"
    b=$(tail -n1 "$T/c_$v.txt" | cut -d' ' -f3)
    "$BUILD/bin/ditc" inspect "$b" > "$T/i_$v.txt"
  done
  grep -q "experts    2, switched below timestep 875" "$T/i_a14b.txt"
  grep -q "timestep *f32\[1,18\]" "$T/i_ti2v-5b.txt"
fi

bash -n tests/gpu/run.sh
bash -n tests/gpu/prepare.sh
echo "wan22 benchmarks: dry runs, report passages, prepare's folders and the GPU scripts' syntax check out"
