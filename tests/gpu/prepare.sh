#!/usr/bin/env bash
# Builds build-gpu here for a GPU machine that has the CUDA toolkit and driver but none of our
# other dependencies: no MLIR (its kernels come from .kcache, filled here by build/bin/ditc when
# WAN13 names a Wan2.1-1.3B model directory), cJSON/xxHash/zstd shipped in bin/ beside the
# binaries (they find them through their $ORIGIN run path).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/gpu/topologies.sh  # the topologies and tiny pipelines the checks compile
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DDIT_MLIR=OFF >/dev/null
cmake --build build-gpu -j"$(nproc)" --target ditc ditrun ditrun_shared make_tiny_wan st_compare probe_check step_cache_check forward_inputs >/dev/null
# The commit the binaries are built from, for the results' run records (the tree copied to the
# GPU host may carry a stale .git); "+" marks uncommitted changes.
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!tests/data' 2>/dev/null || echo +)" > build-gpu/bin/commit
# libditrun beside them: the benchmarks profile its forward in their own process (bench/ceilings.py
# ours_kernel_split, through python/ditrun).
cp -L build-gpu/lib/libditrun.so.1 build-gpu/bin/
for lib in libcjson.so.1 libxxhash.so.0 libzstd.so.1 libmicrohttpd.so.12 libsentencepiece.so.0 libutf8proc.so.2 libspng.so.0; do
  cp -L "/usr/lib/x86_64-linux-gnu/$lib" build-gpu/bin/
done
# The Python package's wheel from this build (tests/gpu/run.sh PIPELINE=...: installed there with
# the peers' wheels).
rm -rf build-gpu/wheel && python3 python/build_wheel.py --build-dir build-gpu -o build-gpu/wheel >/dev/null
# MLIR-path kernels for the shapes tests/gpu/run.sh compiles, made here where MLIR is.
if [ -x build/bin/ditc ] && [ -n "${WAN13:-}" ]; then
  export DITC_CACHE_DIR=$PWD/.kcache
  rm -rf .kcache  # every key names the compiler's sources: entries of other sources never hit
  k=$(mktemp -d)
  for d in tests/data/wan_tiny_*/; do
    read -r F H W B L < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'])")
    build/bin/ditc compile "$d/model" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
  done
  d=tests/data/wan21_i2v_tiny
  read -r F H W B L N < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'], m['image_tokens'])")
  build/bin/ditc compile "$d/model" --frames "$F" --height "$H" --width "$W" --batch "$B" --text-len "$L" --image-len "$N" --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
  # Pipeline folder $1 compiled at its meta.json shape for its forward and generate batches.
  both_batches() {
    local F H W B L GB
    read -r F H W B L GB < <(python3 -c "import json; m=json.load(open('$1/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'], m['generate_batch'])")
    for b in "$B" "$GB"; do
      build/bin/ditc compile "$1" --frames "$F" --height "$H" --width "$W" --batch "$b" --text-len "$L" --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
    done
  }
  both_batches tests/data/wan22_a14b_tiny
  build/bin/ditc compile tests/data/wan22_a14b_tiny --frames 9 --height 64 --width 96 --batch 1 --text-len 7 --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
  # Section 1g: TI2V, Wan2.1-I2V's generate batch, I2V-A14B.
  both_batches tests/data/wan22_ti2v_tiny
  both_batches tests/data/wan22_i2v_a14b_tiny
  d=tests/data/wan21_i2v_tiny
  read -r F H W L N GB < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['text_len'], m['image_tokens'], m['generate_batch'])")
  build/bin/ditc compile "$d/model" --frames "$F" --height "$H" --width "$W" --batch "$GB" --text-len "$L" --image-len "$N" --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
  d=tests/data/wan_tiny_b
  for top in "${TINY_TOPOLOGIES[@]}"; do
    # shellcheck disable=SC2086
    build/bin/ditc compile "$d/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --dtype bf16 --target sm_90 $top -o "$k" -q >/dev/null
  done
  build/bin/make_tiny_wan --preset tiny --layers 4 --dtype bf16 --text-len 7 --out "$k/m4" >/dev/null
  build/bin/ditc compile "$k/m4/model" --frames 9 --height 32 --width 48 --text-len 7 --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
  # tests/gpu/run.sh 1f's fp8 attention bundles, at head dims 128 and 64.
  for hd in 128 64; do
    build/bin/make_tiny_wan --preset tiny-hd$hd --dtype bf16 --text-len 7 --out "$k/fa$hd" >/dev/null
    for fhw in "13 256 320" "29 256 384"; do
      read -r f h w <<< "$fhw"
      for m in "" "--attn-quant fp8" "--quant fp8 --attn-quant fp8" "--attn-quant int8" "--quant fp8 --attn-quant int8" "--attn-quant int8fp8"; do
        # shellcheck disable=SC2086
        build/bin/ditc compile "$k/fa$hd/model" --frames "$f" --height "$h" --width "$w" --text-len 7 --dtype bf16 --target sm_90 $m -o "$k" -q >/dev/null
      done
    done
  done
  # ... and its key-bound check's: HunyuanVideo, 1+1 blocks at the published widths (zero weights here: the kernels follow
  # the shapes; run.sh makes random ones).
  python3 bench/hunyuan_forward.py --write-folder "$k/hy" --layers 1,1 >/dev/null
  for m in fp8 int8 int8fp8; do
    build/bin/ditc compile "$k/hy" --frames 1 --height 64 --width 64 --text-len 16 --dtype bf16 --target sm_90 --attn-quant $m -o "$k" -q >/dev/null
  done
  rm -rf "$k/hy"
  for p in tiny-hd64 tiny-hd128; do
    build/bin/make_tiny_wan --preset "$p" --dtype bf16 --text-len 7 --out "$k/$p" >/dev/null
    build/bin/ditc compile "$k/$p/model" --frames 13 --height 256 --width 320 --text-len 7 --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
    build/bin/ditc compile "$k/$p/model" --frames 5 --height 112 --width 144 --text-len 7 --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
    build/bin/ditc compile "$k/$p/model" --frames 29 --height 256 --width 384 --text-len 7 --dtype bf16 --target sm_90 -o "$k" -q >/dev/null  # 1d2's radial case
  done
  build/bin/ditc compile "$WAN13" --frames 5 --height 112 --width 144 --text-len 77 --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
  for top in "" "${PARALLEL_TOPOLOGIES[@]}"; do
    # shellcheck disable=SC2086
    build/bin/ditc compile "$WAN13" --frames 81 --height 480 --width 832 --text-len 512 --dtype bf16 --target sm_90 $top -o "$k" -q >/dev/null
  done
  # The offload sweeps' shapes (bench/offload/sweep.py through tests/gpu/run.sh OFFLOAD=1):
  # models with fewer blocks have exactly the full models' kernels.
  build/bin/make_tiny_wan --preset wan2.1-1.3b --layers 2 --dtype bf16 --text-len 512 --out "$k/w13" >/dev/null
  for f in 1 5 9 17 33 49 81; do
    build/bin/ditc compile "$k/w13/model" --frames "$f" --height 480 --width 832 --text-len 512 --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
    build/bin/ditc compile "$k/w13/model" --frames "$f" --height 480 --width 832 --text-len 512 --dtype bf16 --target sm_90 --cp 2 --cp-mode ulysses -o "$k" -q >/dev/null
  done
  # bench/lossy.py's modes (tests/gpu/run.sh LOSSY=480p,720p) at both sizes; its exact 720p bundle too.
  for hw in "480 832" "720 1280"; do
    read -r h w <<< "$hw"
    for m in "" "--quant fp8" "--sparse-attn sta:18,24,24" "--sparse-attn radial" "--quant fp8 --sparse-attn sta:18,24,24" "--attn-quant fp8" \
             "--quant fp8 --attn-quant fp8" "--quant fp8 --attn-quant fp8 --sparse-attn sta:18,24,24" "--attn-quant int8" \
             "--quant fp8 --attn-quant int8" "--quant fp8 --attn-quant int8 --sparse-attn sta:18,24,24" "--quant fp8 --attn-quant int8 --sparse-attn radial"; do
      # shellcheck disable=SC2086
      build/bin/ditc compile "$k/w13/model" --frames 81 --height "$h" --width "$w" --text-len 512 --dtype bf16 --target sm_90 $m -o "$k" -q >/dev/null
    done
  done
  # tests/gpu/pipeline_parity.py's Wan2.1-1.3B pipeline (its blocks' kernels).
  build/bin/ditc compile "$k/w13/model" --frames 17 --height 256 --width 256 --text-len 32 --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
  build/bin/make_tiny_wan --preset wan2.1-14b --layers 1 --dtype bf16 --text-len 512 --out "$k/w14" >/dev/null
  for f in 1 81; do
    build/bin/ditc compile "$k/w14/model" --frames "$f" --height 720 --width 1280 --text-len 512 --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
  done
  # Wan2.2 at the published sizes (tests/gpu/run.sh WAN22=..., WAN22_GENERATE=...): one block
  # per expert at the real widths, written by the benchmark's own folder writer (zero weights:
  # kernels depend on shapes only); A14B's two experts in one pipeline, TI2V's per-token timesteps.
  for v in a14b ti2v-5b; do
    python3 bench/wan22_forward.py --write-folder "$k/w22_$v" --variant "$v" --layers 1 >/dev/null
    read -r F H W L < <(python3 -c "import sys; sys.path.insert(0, 'bench'); import wan22_forward as w; v = w.VARIANTS['$v']; print(v['frames'], v['height'], v['width'], v['text_len'])")
    build/bin/ditc compile "$k/w22_$v" --frames "$F" --height "$H" --width "$W" --text-len "$L" --dtype bf16 --target sm_90 -o "$k" -q >/dev/null
  done
  rm -rf "$k"
  echo "MLIR kernels cached: $(ls .kcache/kernels/*.launch | wc -l)"
fi
# The MMDiT families' and the Wan2.1 VAE's shapes (tests/gpu/run.sh FLUX=1, HUNYUAN=1, QWEN=1, FLUX_OFFLOAD=1, VAE=...): the
# tiny pipelines, and one or two blocks at the published widths (the VAE decoder whole) written by each benchmark's own
# folder writer. Added to the cache (MMDIT=1), after the Wan shapes when WAN13 is also set.
if [ -x build/bin/ditc ] && [ -n "${MMDIT:-}" ]; then
  export DITC_CACHE_DIR=$PWD/.kcache
  [ -n "${WAN13:-}" ] || rm -rf .kcache
  k=$(mktemp -d)
  c() { build/bin/ditc compile "$@" --dtype bf16 --target sm_90 -o "$k" -q >/dev/null; }
  # tests/gpu/run.sh 8, 8c, 8d: the tiny MMDiTs at each batch they are checked at.
  for entry in "${TINY_MMDIT[@]}"; do
    read -r _ d flags <<< "$entry"
    # shellcheck disable=SC2086
    for b in "${TINY_MMDIT_BATCHES[@]}"; do c "$d" $flags --batch "$b"; done
  done
  # The pipeline stages' tiny goldens (tests/gpu/run.sh 1s).
  c tests/data/umt5_tiny/text_encoder --text-len 16 --batch 2
  c tests/data/wan_vae_tiny/vae --frames 9 --height 32 --width 48
  c tests/data/wan22_vae_tiny/vae --frames 9 --height 32 --width 48
  c tests/data/flux_vae_tiny/vae --height 64 --width 64 --batch 2
  c tests/data/wan_vae_tiny/vae --vae-part encoder --frames 9 --height 32 --width 48
  c tests/data/wan22_vae_enc_tiny/vae --vae-part encoder --frames 9 --height 32 --width 32
  c tests/data/flux_pipeline_tiny --height 64 --width 64 --text-len 16  # its stages too
  c tests/data/clip_vision_tiny/image_encoder --batch "$(python3 -c "import json; print(json.load(open('tests/data/clip_vision_tiny/meta.json'))['batch'])")"
  # Image-to-video from a PNG: the Wan2.2 TI2V and Wan2.1-I2V pipelines with their encoder stages.
  c tests/data/wan22_pipeline_tiny --frames 5 --height 64 --width 64 --text-len 16
  c tests/data/wan21_i2v_pipeline_tiny --frames 5 --height 32 --width 32 --text-len 512 --image-len 5
  c tests/data/qwen_pipeline_tiny --height 64 --width 48 --text-len 96  # Qwen-Image from a prompt, its stages too
  python3 bench/umt5_encode.py --write-folder "$k/umt5" --layers 2  # UMT5-XXL (block 1 on: an fp32 residual stream)'s blocks (tests/gpu/run.sh TEXT_ENCODER=1)
  c "$k/umt5" --text-len 512
  rm -rf "$k/umt5"
  python3 bench/flux_forward.py --write-folder "$k/flux" --layers 1,1 >/dev/null
  for b in 1 2 4 8 12 16; do c "$k/flux" --height 1024 --width 1024 --batch "$b" --text-len 512; done
  c "$k/flux" --height 256 --width 256 --batch 1 --text-len 32  # tests/gpu/pipeline_parity.py's FluxPipeline
  # The forward benchmarks' --lossy fp8,fp8attn,fp8all (run.sh FLUX_LOSSY, HUNYUAN_LOSSY, QWEN_LOSSY) at each family's shape.
  # shellcheck disable=SC2086
  lossy() { for m in "--quant fp8" "--attn-quant fp8" "--quant fp8 --attn-quant fp8"; do c "$@" $m; done; }
  lossy "$k/flux" --height 1024 --width 1024 --batch 1 --text-len 512
  python3 bench/hunyuan_forward.py --write-folder "$k/hy" --layers 1,1 >/dev/null
  # run.sh 8c's forward (129) and generate (33) frames; 8f's offload sweep over frame counts (offload adds no kernels).
  for f in 129 33 1 9 17 65; do c "$k/hy" --frames "$f" --height 720 --width 1280 --text-len 256; done
  lossy "$k/hy" --frames 129 --height 720 --width 1280 --text-len 256
  python3 bench/qwen_forward.py --write-folder "$k/qw" --layers 1 >/dev/null
  c "$k/qw" --height 1328 --width 1328 --text-len 512
  lossy "$k/qw" --height 1328 --width 1328 --text-len 512
  # The Wan2.1 VAE decoder at the published widths (tests/gpu/run.sh VAE=...), 81 frames at both sizes. With the
  # UMT5 blocks above and WAN13's 480x832 transformer, these are every kernel of tests/gpu/run.sh E2E=1's pipeline
  # (bench/e2e_wan.py: its stages compile at batch 1, the text encoder at 512 tokens, the decoder in chunks of 1).
  python3 bench/vae_decode.py --write-folder "$k/vae" >/dev/null
  for hw in "480 832" "720 1280"; do
    read -r h w <<< "$hw"
    c "$k/vae/vae" --frames 81 --height "$h" --width "$w"
    c "$k/vae/vae" --frames 81 --height "$h" --width "$w" --vae-chunk 1  # the chunked decode (bench/vae_decode.py's default)
    c "$k/vae/vae" --frames 81 --height "$h" --width "$w" --vae-chunk 1 --vae-first
    # Split for windows (bench/vae_decode.py --budget-share: the tiles a third of diffusers' peak takes, 2 to 5).
    c "$k/vae/vae" --frames 81 --height "$h" --width "$w" --vae-chunk 1 --vae-part head
    for t in 2 3 4 5; do
      c "$k/vae/vae" --frames 81 --height "$h" --width "$w" --vae-chunk 1 --vae-part tail --vae-tiles $t
      c "$k/vae/vae" --frames 81 --height "$h" --width "$w" --vae-chunk 1 --vae-part tail --vae-tiles $t --vae-first
    done
  done
  # The Wan2.2 VAE at 704x1280, 121 frames, and FLUX.1's at 1024x1024 (bench/vae_decode.py --vae wan2.2|flux): their
  # folders from diffusers' classes, so only where torch and diffusers import (VAE_TORCH_PATH: their PYTHONPATH).
  if [ -n "${VAE_TORCH_PATH:-}" ]; then
    PYTHONPATH=$VAE_TORCH_PATH python3 bench/vae_decode.py --vae wan2.2 --write-folder "$k/vae22" >/dev/null
    c "$k/vae22/vae" --frames 121 --height 704 --width 1280 --vae-chunk 1
    c "$k/vae22/vae" --frames 121 --height 704 --width 1280 --vae-chunk 1 --vae-first
    rm -rf "$k/vae22"
    PYTHONPATH=$VAE_TORCH_PATH python3 bench/vae_decode.py --vae flux --write-folder "$k/vaef" >/dev/null
    c "$k/vaef/vae" --height 1024 --width 1024
    rm -rf "$k/vaef"
  fi
  for chunk in "" "--vae-chunk 1" "--vae-chunk 1 --vae-first"; do  # run.sh 4e: every op against the CPU reference
    # shellcheck disable=SC2086
    c "$k/vae/vae" --frames 5 --height 64 --width 64 $chunk
  done
  rm -rf "$k"
  echo "MLIR kernels cached: $(ls .kcache/kernels/*.launch | wc -l)"
fi
# The GPU host's compiler (no MLIR) finds every MLIR kernel of the tiny checks in a copy of the
# cache, as run.sh seeds it: a shape left out above fails here, not in a GPU call.
if [ -d .kcache/kernels ] && [ -n "${MMDIT:-}" ]; then
  v=$(mktemp -d)
  cp -r .kcache "$v/cache"
  for entry in "${TINY_MMDIT[@]}"; do
    read -r _ d flags <<< "$entry"
    for b in "${TINY_MMDIT_BATCHES[@]}"; do
      # shellcheck disable=SC2086
      DITC_CACHE_DIR="$v/cache" build-gpu/bin/ditc compile "$d" $flags --batch "$b" --dtype bf16 --target sm_90 -o "$v/b" -q >/dev/null ||
        { echo "prepare: build-gpu/bin/ditc cannot compile $d $flags --batch $b from the codegen cache (above)" >&2; rm -rf "$v"; exit 1; }
    done
  done
  rm -rf "$v"
fi
du -sh build-gpu/bin
