#!/usr/bin/env bash
# make_tiny_wan's model variants: the default output is pinned byte for byte; each pipeline
# variant's folder has diffusers' own model_index.json and scheduler config (compared with the
# folders diffusers wrote in tests/data), ditc compiles it, ditrun forward runs it (both experts
# of the A14B variants), and the parallel topologies of the two-expert and TI2V variants equal
# one rank (max relative error <= 1e-5, as topologies.sh); bad options are refused, naming them.
set -euo pipefail
BIN=$1/bin
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
D=tests/data
mk() { "$BIN/make_tiny_wan" "$@" >/dev/null; }
bundle() { local line; line=$("$BIN/ditc" compile "$@" -o "$T/bundles" -q | tail -n 1); echo "${line##* }"; }
json() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print($2)" "$1"; }

# The default (t2v) output is unchanged: the bytes of the seed-0 tiny model as first released,
# and --variant t2v is the default.
mk --out "$T/t2v"
(cd "$T/t2v" && sha256sum -c --quiet) <<'SUMS'
d924d6f92bea4c7e9c86afc7688b0a950114f69289308c99653e20a2aee9207a  model/config.json
506e9e81a45c7b069343b60ce07a005deef18cdf8d9670e65e4a0fb3a218119d  model/diffusion_pytorch_model.safetensors
d82d93571870bc4d506f5a7571534bdc29c4d6502153f02e693e32a8b3964d23  embeds.safetensors
SUMS
mk --out "$T/t2v_explicit" --variant t2v
diff -r "$T/t2v" "$T/t2v_explicit"
[ ! -e "$T/t2v/model/model_index.json" ] || { echo "the t2v variant wrote a pipeline"; exit 1; }

"$BIN/make_tiny_wan" --help >"$T/help"
for v in t2v t2v-a14b ti2v i2v-a14b i2v-wan21 wan2.2-a14b wan2.2-ti2v-5b; do
  grep -q -- "$v" "$T/help" || { echo "--help does not document $v"; exit 1; }
done

# Bad options: refused before anything is written, naming the option and what fits.
refuse() { # expected message part, options...
  local want=$1; shift
  if "$BIN/make_tiny_wan" --out "$T/bad" "$@" >/dev/null 2>"$T/err"; then echo "accepted $*"; exit 1; fi
  grep -qF -- "$want" "$T/err" || { echo "refusal of $* does not say '$want':"; cat "$T/err"; exit 1; }
  [ ! -e "$T/bad" ] || { echo "$* wrote $T/bad"; exit 1; }
}
refuse "--variant t2v-14b: expected t2v, t2v-a14b, ti2v, i2v-a14b or i2v-wan21" --variant t2v-14b
refuse "--preset wan2.2-a14b is a model of --variant t2v-a14b, i2v-a14b, not t2v; presets of t2v: tiny, tiny-hd64, tiny-hd128, wan2.1-1.3b, wan2.1-14b" --preset wan2.2-a14b
refuse "--preset wan2.1-1.3b is a model of --variant t2v, not ti2v; presets of ti2v: tiny, tiny-hd64, tiny-hd128, wan2.2-ti2v-5b" --variant ti2v --preset wan2.1-1.3b
refuse "presets of i2v-wan21: tiny, tiny-hd64, tiny-hd128, wan2.1-14b" --variant i2v-wan21 --preset wan2.2-ti2v-5b
refuse "--text-len 16: --variant i2v-wan21 takes exactly 512 text tokens" --variant i2v-wan21 --text-len 16
refuse "--preset wan2.3: expected tiny, tiny-hd64, tiny-hd128, wan2.1-1.3b, wan2.1-14b, wan2.2-a14b or wan2.2-ti2v-5b" --preset wan2.3
refuse "--layers two: expected an integer" --variant ti2v --layers two
refuse "--variant needs a value" --variant

# The folders: diffusers' model_index.json and scheduler config for the variant, transformer
# configs with diffusers' fields, the variant's channels; the experts differ only in weights.
for v in t2v-a14b ti2v i2v-a14b i2v-wan21; do mk --out "$T/$v" --variant "$v" --seed 5; done
for pair in t2v-a14b:wan22_a14b_tiny ti2v:wan22_ti2v_tiny i2v-a14b:wan22_i2v_a14b_tiny; do
  v=${pair%%:*} ref=$D/${pair#*:}
  cmp "$T/$v/model/model_index.json" "$ref/model_index.json"
  cmp "$T/$v/model/scheduler/scheduler_config.json" "$ref/scheduler/scheduler_config.json"
  [ "$(json "$T/$v/model/transformer/config.json" 'sorted(d)')" = "$(json "$ref/transformer/config.json" 'sorted(d)')" ] ||
    { echo "$v: transformer config fields differ from diffusers'"; exit 1; }
done
[ "$(json "$T/ti2v/model/vae/config.json" '[d[k] for k in ("_class_name", "scale_factor_spatial", "scale_factor_temporal", "z_dim")]')" = \
  "$(json "$D/wan22_ti2v_tiny/vae/config.json" '[d[k] for k in ("_class_name", "scale_factor_spatial", "scale_factor_temporal", "z_dim")]')" ] ||
  { echo "ti2v: vae/config.json differs from diffusers' in what the frontend reads"; exit 1; }
for want in "t2v-a14b:[16, 16, None, None]" "ti2v:[48, 48, None, None]" "i2v-a14b:[36, 16, None, None]" "i2v-wan21:[36, 16, 40, 48]"; do
  v=${want%%:*}
  got=$(json "$T/$v/model/transformer/config.json" '[d["in_channels"], d["out_channels"], d["image_dim"], d["added_kv_proj_dim"]]')
  [ "$got" = "${want#*:}" ] || { echo "$v: channels and image fields $got, expected ${want#*:}"; exit 1; }
done
[ "$(json "$T/i2v-wan21/model/model_index.json" '[d["_class_name"], d["boundary_ratio"], d["transformer_2"], d["image_encoder"]]')" = \
  "['WanImageToVideoPipeline', None, [None, None], [None, None]]" ] || { echo "i2v-wan21: model_index.json"; exit 1; }
[ "$(json "$T/i2v-wan21/model/scheduler/scheduler_config.json" 'd["flow_shift"]')" = 3.0 ] || { echo "i2v-wan21: flow_shift"; exit 1; }
for v in t2v-a14b i2v-a14b; do
  cmp "$T/$v/model/transformer/config.json" "$T/$v/model/transformer_2/config.json"
  if cmp -s "$T/$v/model/transformer/diffusion_pytorch_model.safetensors" "$T/$v/model/transformer_2/diffusion_pytorch_model.safetensors"; then
    echo "$v: the two experts have the same weights"; exit 1
  fi
done
shape=$(python3 -c "import json, struct, sys; f = open(sys.argv[1], 'rb'); n = struct.unpack('<Q', f.read(8))[0]; print(json.loads(f.read(n))['prompt_embeds']['shape'])" "$T/i2v-wan21/embeds.safetensors")
[ "$shape" = "[1, 512, 32]" ] || { echo "i2v-wan21: prompt_embeds $shape, expected [1, 512, 32]"; exit 1; }

# Compile each folder and run its forward; the A14B variants run both experts.
# shape per variant: frames height width text-len [extra]
declare -A SHAPE=([t2v-a14b]="9 32 48 16" [ti2v]="9 64 96 16" [i2v-a14b]="9 32 48 16" [i2v-wan21]="9 32 48 512 --image-len 5")
declare -A ONE
for v in t2v-a14b ti2v i2v-a14b i2v-wan21; do
  read -r F H W L X <<<"${SHAPE[$v]}"
  # shellcheck disable=SC2086
  b=$(bundle "$T/$v/model" --frames "$F" --height "$H" --width "$W" --text-len "$L" --batch 2 $X)
  ONE[$v]=$b
  "$BIN/ditrun" verify "$b" >/dev/null
  # TI2V reads one timestep a latent frame (6 tokens at 9x64x96: 3 frames of 2x3 patches).
  "$BIN/forward_inputs" "$b" "$T/in_$v.safetensors" --seed 3 --runs timestep=6
  experts=(transformer); [ "$v" = t2v-a14b ] || [ "$v" = i2v-a14b ] && experts=(transformer transformer_2)
  for e in "${experts[@]}"; do
    "$BIN/ditrun" forward "$b" --expert "$e" --inputs "$T/in_$v.safetensors" --out "$T/f_${v}_$e.safetensors" >/dev/null 2>&1
  done
  if [ ${#experts[@]} = 2 ]; then
    if "$BIN/st_compare" "$T/f_${v}_transformer.safetensors" "$T/f_${v}_transformer_2.safetensors" sample 1e-2 >/dev/null 2>&1; then
      echo "$v: the experts' forwards agree: transformer_2 is not its own model"; exit 1
    fi
  fi
  echo "$v: compiled and ran (${experts[*]})"
done
"$BIN/ditrun" info "${ONE[t2v-a14b]}" | grep -q "^experts    2, switched below timestep 875$" || { echo "t2v-a14b: boundary"; exit 1; }
"$BIN/ditrun" info "${ONE[i2v-a14b]}" | grep -q "^experts    2, switched below timestep 900$" || { echo "i2v-a14b: boundary"; exit 1; }
"$BIN/ditrun" info "${ONE[ti2v]}" | grep -q "^input      timestep  *f32\[2,18\]$" || { echo "ti2v: not a timestep per token"; exit 1; }

# Topologies against one rank: each expert of the two-expert variant, and TI2V's per-token
# timesteps sliced with the tokens.
for v in t2v-a14b ti2v; do
  read -r F H W L X <<<"${SHAPE[$v]}"
  experts=(transformer); [ "$v" = t2v-a14b ] && experts=(transformer transformer_2)
  for top in "--tp 2" "--cp 2 --cp-mode gather" "--cp 2 --cp-mode ulysses" "--cp 2 --cp-mode ring" "--cp 3 --cp-mode ring" \
             "--cfg-parallel" "--cp 2 --cp-mode ring --tp 2 --cfg-parallel" "--tp 2 --sp"; do
    # shellcheck disable=SC2086
    par=$(bundle "$T/$v/model" --frames "$F" --height "$H" --width "$W" --text-len "$L" --batch 2 $top)
    for e in "${experts[@]}"; do
      "$BIN/ditrun" forward "$par" --expert "$e" --inputs "$T/in_$v.safetensors" --out "$T/f_par.safetensors" >/dev/null 2>&1
      "$BIN/st_compare" "$T/f_par.safetensors" "$T/f_${v}_$e.safetensors" sample 1e-5 >"$T/cmp" || { cat "$T/cmp"; echo "$v $top ($e)"; exit 1; }
    done
    echo "$v $top: equal to one rank (${experts[*]})"
  done
done

# The two-expert generate from make_tiny_wan's embeddings crosses the boundary, and its
# parallel bundles give the single rank's latents.
gen=(--prompt-embeds "$T/t2v-a14b/embeds.safetensors" --negative-embeds "$T/t2v-a14b/embeds.safetensors" --seed 11 --steps 4
     --guidance 4 --guidance-2 3 --shift 3 --sampler unipc)
g1=$(bundle "$T/t2v-a14b/model" --frames 9 --height 32 --width 48 --text-len 16)
"$BIN/ditrun" generate "$g1" "${gen[@]}" --out "$T/g_one.safetensors" >/dev/null 2>"$T/gen.err"
grep -q "expert transformer " "$T/gen.err" && grep -q "expert transformer_2 " "$T/gen.err" || { cat "$T/gen.err"; echo "generate did not use both experts"; exit 1; }
for top in "--tp 2" "--cfg-parallel" "--cp 2 --cp-mode ring"; do
  # shellcheck disable=SC2086
  gp=$(bundle "$T/t2v-a14b/model" --frames 9 --height 32 --width 48 --text-len 16 $top)
  "$BIN/ditrun" generate "$gp" "${gen[@]}" --out "$T/g_par.safetensors" >/dev/null 2>&1
  "$BIN/st_compare" "$T/g_par.safetensors" "$T/g_one.safetensors" latents 1e-5 >/dev/null || { echo "t2v-a14b generate $top"; exit 1; }
  echo "t2v-a14b generate $top: equal to one rank"
done
# TI2V's text-to-video generate (a timestep per token every step) likewise.
gen=(--prompt-embeds "$T/ti2v/embeds.safetensors" --negative-embeds "$T/ti2v/embeds.safetensors" --seed 11 --steps 3
     --guidance 5 --shift 5 --sampler unipc)
g1=$(bundle "$T/ti2v/model" --frames 9 --height 64 --width 96 --text-len 16)
"$BIN/ditrun" generate "$g1" "${gen[@]}" --out "$T/g_one.safetensors" >/dev/null 2>&1
for top in "--cfg-parallel" "--cp 2 --cp-mode ring"; do
  # shellcheck disable=SC2086
  gp=$(bundle "$T/ti2v/model" --frames 9 --height 64 --width 96 --text-len 16 $top)
  "$BIN/ditrun" generate "$gp" "${gen[@]}" --out "$T/g_par.safetensors" >/dev/null 2>&1
  "$BIN/st_compare" "$T/g_par.safetensors" "$T/g_one.safetensors" latents 1e-5 >/dev/null || { echo "ti2v generate $top"; exit 1; }
  echo "ti2v generate $top: equal to one rank"
done
# Two experts with equal weights (one checkpoint used for both) share one weights blob and
# layout in the manifest, and each runs.
cp -r "$T/t2v-a14b/model" "$T/same"
cp "$T/same/transformer/"* "$T/same/transformer_2/"
bs=$(bundle "$T/same" --frames 9 --height 32 --width 48 --text-len 16)
n=$(python3 -c "import json, sys; m=json.load(open(sys.argv[1])); print(len(m['weights']), sum(b['role'] == 'weights' for b in m['blobs']))" "$bs/manifest.json")
[ "$n" = "1 1" ] || { echo "equal experts: $n weights layouts and blobs, expected one of each"; exit 1; }
"$BIN/forward_inputs" "$bs" "$T/same_in.safetensors"
for e in transformer transformer_2; do
  "$BIN/ditrun" forward "$bs" --expert "$e" --inputs "$T/same_in.safetensors" --out "$T/same_$e.safetensors" 2>/dev/null
done
cmp "$T/same_transformer.safetensors" "$T/same_transformer_2.safetensors"
echo "equal experts: one weights blob, both run"
echo "tiny_variants: every variant's folder compiles and runs; topologies equal one rank"
