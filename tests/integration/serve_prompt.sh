#!/usr/bin/env bash
# ditrun serve with text prompts on the tiny Wan pipeline (tests/data/wan_pipeline_tiny): three
# bundles served side by side (text encoder and VAE stages; the text encoder alone; none), and
# tests/tools/serve_prompt_client.py checks a prompt job's latents, frames, PNG and MP4 results
# byte-identical to `ditrun generate --prompt ... --out` with the same seed and steps, their
# Content-Type, the binary form, and the refusals by field (a missing stage named with the compile
# that adds it).
set -euo pipefail
BIN=$(cd "$1/bin" && pwd)
. tests/tools/serve_lib.sh
d=tests/data/wan_pipeline_tiny
read -r F H W L < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['text_len'])")
PROMPT=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['prompt'])")
NEG=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['negative_prompt'])")
shape=(--frames "$F" --height "$H" --width "$W" --text-len "$L")
ids=() dirs=()
for stages in transformer,text_encoder,vae transformer,text_encoder transformer; do
  line=$("$BIN/ditc" compile "$d" "${shape[@]}" --stages $stages -o "$T/$stages" -q | tail -n1)
  ids+=("$(echo "$line" | cut -d' ' -f2)") dirs+=("$(echo "$line" | cut -d' ' -f3)")
done
job=(--prompt "$PROMPT" --negative-prompt "$NEG" --seed 11 --steps 2)
"$BIN/ditrun" generate "${dirs[0]}" "${job[@]}" --out "$T/ref_frames.safetensors" --out-latents "$T/ref_latents.safetensors" >/dev/null 2>&1
"$BIN/ditrun" generate "${dirs[0]}" "${job[@]}" --out "$T/ref.png" >/dev/null 2>&1
"$BIN/ditrun" generate "${dirs[0]}" "${job[@]}" --out "$T/ref.mp4" >/dev/null 2>&1
mkdir "$T/tmp"
TMPDIR=$T/tmp "$BIN/ditrun" serve "${dirs[@]}" --listen 127.0.0.1:0 2> "$T/serve.log" &
PID=$!
port=$(server_port "$T/serve.log")
python3 tests/tools/serve_prompt_client.py --port "$port" --bundles "${ids[@]}" --prompt "$PROMPT" --negative-prompt "$NEG" \
  --seed 11 --steps 2 --refs "$T/ref_latents.safetensors" "$T/ref_frames.safetensors" "$T/ref.png" "$T/ref.mp4" ||
  { tail -n 30 "$T/serve.log"; exit 1; }
# Each job's decoded file lived in a private folder, removed after it was read.
[ -z "$(ls -A "$T/tmp")" ] || { ls -lR "$T/tmp"; echo "serve_prompt: a job's files were left"; exit 1; }
kill "$PID"; wait "$PID" || true; PID=
echo "serve_prompt: prompt jobs' outputs and refusals checked"
