#!/usr/bin/env bash
# GPU checks and timings in one run, on a machine with an NVIDIA GPU, given a build made with
# -DDIT_MLIR=OFF whose bin/ holds the shared libraries it needs (tests/gpu/prepare.sh):
#   1. the tiny diffusers goldens through GPU bundles (forward and 4-step UniPC with CFG), the
#      --quant fp8 bundles step by step against the CPU reference and against the bf16 bundles, and
#      through multi-rank GPU bundles (ranks as threads of one process, and one process per rank
#      with NCCL); the Hopper attention kernel op by op against the CPU reference, and its and the
#      portable kernel's sparse (tile schedule) forms against the CPU backend; the step cache's
#      probe kernel against the host's computation (tests/tools/probe_check.c); attention-state reuse
#      (--reuse ditango: R = 1 bit-identical to the bundle without reuse, R = 0.5 near the CPU backend's run),
#   2. every op of the Wan2.1-1.3B config on the GPU against the CPU reference, step by step,
#      at an odd token count, also with each linear group as one strided-batched GEMM
#      (DIT_CUDA_LINEAR_GROUPS=batched, as in 1d; 1d also with the GEMMs timed on random activations),
#   3. Wan2.1-1.3B at 480x832, 81 frames: parity against diffusers and the forward benchmark
#      against diffusers eager and torch.compile, GEMMs against cuBLAS (bench/wan_forward.py),
#   4. with GENERATE=1, a 50-step generate with CFG against diffusers' loop (bench/wan_generate.py),
#   4b. with STEP_CACHE=wan|flux|hunyuan|qwen (comma-separated; 1: all; wan needs the bundle of 3 or 3'), the step-cache sweep: every policy
#      against the exact run and cache-dit on diffusers as the peer (bench/step_cache.py: step_cache.json,
#      step_cache.md, step_cache_*.png; STEP_CACHE_FLUX_LAYERS D,S for fewer FLUX blocks; STEP_CACHE_POLICIES,
#      STEP_CACHE_BUDGET and STEP_CACHE_PEERS pass --policies, --budget and --peers; with NO_FORWARD=1 the
#      Wan bundle is compiled without 3's benchmark),
#   4c. with LOSSY=480p|720p (comma-separated; 1: both), the lossy modes of Wan2.1-1.3B at 81 frames (bench/lossy.py:
#      exact, fp8, sta, radial, fp8+sta; forward and 50-step generate against exact; torch.compile, sageattention 1.0.6
#      and torchao FP8 on diffusers as peers; lossy_<res>.json/.md/.png; LOSSY_BUDGET seconds a call, default 540;
#      LOSSY_FLAGS passes options such as --sta T,H,W or --no-generate, LOSSY_FLAGS_480p / LOSSY_FLAGS_720p one resolution's),
#   4d. with VAE=480p|720p|704p|1024px (comma-separated; 1: 480p and 720p), the Wan2.1 VAE decode at 81 frames (704p:
#      the Wan2.2 VAE's at 121 frames of 704x1280; 1024px: FLUX.1's of one 1024x1024 image) (bench/vae_decode.py: the
#      compiled vae/ stage against diffusers' AutoencoderKLWan.decode in bf16, random weights at the published config:
#      time, peak memory, PSNR and cosine; vae_decode_<res>.json/.md; VAE_TIMEOUT seconds a resolution, default 600;
#      VAE_FLAGS passes options such as --budget-share 0.33: also the decoder split into windows under that share of
#      diffusers' peak),
#   4e. with E2E=1, Wan2.1-1.3B from a prompt to an MP4 at 480x832, 81 frames, 50 steps with CFG (bench/e2e_wan.py:
#      `ditc compile` of a pipeline folder with its stages, then one cold `ditrun generate --prompt` against WanPipeline
#      on the same components and noise plus export_to_video; per-stage times, PSNR and cosine of the float frames;
#      e2e_wan.json/.md; E2E_TIMEOUT seconds, default 560; E2E_FLAGS passes options such as --layers N,
#      --te-layers N, --steps N, --skip-peer or --peer-compile; its kernels: prepare.sh with WAN13 and MMDIT=1),
#   5. with OFFLOAD=1, the offload sweep (bench/offload/sweep.py) after a calibration; with
#      CONTENTION=1 on two GPUs the contention case (Ulysses-2, NCCL_P2P_DISABLE=1) and the
#      host-paced variant; with OFFLOAD_14B=1 Wan2.1-14B at 720p,
#   6. with PARALLEL=1 on two GPUs or more (run after 3), the parallel topologies at 480p 81 frames
#      against one GPU (bench/parallel/wan_parallel.py; PARALLEL_FLAGS passes options to it,
#      default --in-order: each topology also with its collectives in plan order; ditrun
#      overlaps NCCL collectives with compute by default).
#   7. with WAN22=a14b|ti2v|all, Wan2.2 forwards at the published sizes against diffusers eager
#      and torch.compile (bench/wan22_forward.py: A14B's two experts with WAN22_LAYERS blocks at
#      the real widths, WAN22_EXPERT=transformer|transformer_2 for one of them, TI2V-5B whole); with WAN22_GENERATE=a14b|ti2v|1 (1: both) the Wan2.2
#      generates against diffusers' pipelines (bench/wan22_generate.py; A14B also under
#      --memory-budget WAN22_BUDGET_GIB, default 48); with WAN22_SWAP=1 A14B whole (random weights
#      by make_tiny_wan) both experts resident and under that budget (7c). Each is bounded by timeout and writes
#      wan22_*.json into RESULTS_DIR; run them alone with SKIP_CHECKS=1 NO_OPCHECK=1 NO_FORWARD=1.
#   8. with FLUX=1, the tiny FLUX.1 pipelines' GPU bundles op by op against the CPU reference and
#      their forward goldens and generates; then FLUX.1-dev at 1024x1024 (bench/flux_forward.py:
#      batches FLUX_BATCHES, default 1,4; FLUX_LAYERS D,S for fewer blocks) against diffusers eager
#      and torch.compile, and a 4-step generate against FluxPipeline (flux_forward.json); FLUX_LOSSY=fp8,fp8attn,...
#      (likewise HUNYUAN_LOSSY, QWEN_LOSSY in 8c, 8d) adds bench/lossy.py's modes against the exact bundle (lossy_flux.json).
#   8e. with FLUX_OFFLOAD=1, FLUX.1-dev (zero weights, FLUX_OFFLOAD_LAYERS blocks at the published widths) over
#      batch sizes 1..16 without offload and chunked (bench/offload/sweep.py --batches: offload_flux.json).
#      NO_BENCH=1 keeps only the tiny pipelines' checks of 8, 8c and 8d.
#   8f. with HUNYUAN_OFFLOAD=1, HunyuanVideo (zero weights, HUNYUAN_OFFLOAD_LAYERS D,S blocks at the published widths,
#      default 2,4) at 1280x720 over frame counts HUNYUAN_OFFLOAD_FRAMES (default 1,9,17,33,65,129) without offload
#      and chunked (bench/offload/sweep.py --frames: offload_hunyuan.json).
#   8c. with HUNYUAN=1, the tiny HunyuanVideo pipeline (padded text masks) op by op on the GPU, then 1280x720, 129 frames
#      (bench/hunyuan_forward.py: HUNYUAN_LAYERS D,S blocks) and a 4-step generate at 33 frames (hunyuan_forward.json).
#   8d. with QWEN=1, the tiny Qwen-Image pipeline op by op on the GPU, then 1328x1328 (bench/qwen_forward.py: QWEN_LAYERS
#      blocks) and a 4-step generate with true CFG 4 against QwenImagePipeline (qwen_forward.json).
#   9. with PIPELINE=1 (or bench, or 1,bench; bench-only), the Python package in WanPipeline and FluxPipeline
#      (tests/gpu/pipeline_parity.py; bench: the 50-step Wan2.1-1.3B pipeline against stock and torch.compile),
#   10. with SERVE=1 (and the bundle of 3 or 3'), `ditrun serve` against the command line's generate loop
#      (bench/serve_overhead.py --enforce: overhead <= 1% of a 50-step job, request to first step <= 50 ms).
#   11. with TEXT_ENCODER=1, Wan's UMT5-XXL text encoder stage against transformers (bench/umt5_encode.py;
#      UMT5_LAYERS blocks, default all 24),
#   12. with ATTN=1 (or fp8: also the fp8 form and sageattn), the attention kernels at the DiT shapes against torch SDPA
#      (bench/attention/gpu.sh into RESULTS_DIR/attention; ATTN_FLAGS passes run.py options such as --no-variants),
#   13. with GEMM_FP8=1, cuBLASLt's fp8 matmul forms (per-tensor, outer-vector; fast accumulation or not) against bf16 at
#      Wan2.1-1.3B's linear shapes (bench/gemm_fp8.py: gemm_fp8.json),
#      CHECKS=a,b,... runs only those sections of 1 (keys: tiny fp8 fp8attn probe ditango 1b 1c 1e wan22 1g 1d 1d2 stages).
#      NO_FORWARD=1 skips 3 (and 4, which needs its bundle); NO_13B=1 skips 2 and 3 (no 1.3B model);
#      NO_OPCHECK=1 skips the op-by-op comparison of 2 (the model is still made); SKIP_CHECKS=1
#      skips 1 (but 1a, the probe check) and that comparison, for runs that only time (OFFLOAD_CHECKS=1 keeps 1c).
# usage: tests/gpu/run.sh RESULTS_DIR [BUILD_DIR] [--quick]
set -uo pipefail
OUT=${1:?results dir}
BUILD=${2:-build-gpu}
QUICK=${3:-}
BIN=$BUILD/bin
# The benchmarks record this commit (tests/gpu/prepare.sh wrote it beside the binaries).
[ -z "${DIT_COMMIT:-}" ] && [ -s "$BIN/commit" ] && export DIT_COMMIT=$(cat "$BIN/commit")
export LD_LIBRARY_PATH="$BIN:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
# NCCL from the system, else from the Python wheel that torch uses.
if ! ldconfig -p | grep -q libnccl.so.2 && [ ! -e /usr/local/cuda/lib/libnccl.so.2 ]; then
  nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
  [ -n "$nccl" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccl"
fi
export NCCL_NVLS_ENABLE=0
export PYTHONPATH="$PWD/.ref/src:${PYTHONPATH:-}"
# libditrun for the benchmarks' in-process profile of ditrun's kernels (python/ditrun where no
# wheel is installed; an installed wheel uses its own copy).
[ -e "$BIN/libditrun.so.1" ] && DITRUN_LIBRARY="$(cd "$BIN" && pwd)/libditrun.so.1" && export DITRUN_LIBRARY
W0=$(mktemp -d); export DITC_CACHE_DIR=$W0/cache
# This host has no MLIR: its MLIR-path kernels come from a codegen cache made where MLIR is
# (.kcache, carried with the call: tests/gpu/prepare.sh fills it for the shapes used here).
seed_mlir_cache() {
  mkdir -p "$1/kernels"
  for l in .kcache/kernels/*.launch; do [ -e "$l" ] && cp "${l%.launch}".* "$1/kernels/"; done
  return 0
}
seed_mlir_cache "$DITC_CACHE_DIR"
mkdir -p "$OUT"
W=$(mktemp -d)
fails=0
step() { echo; echo "=== $*"; }
# With CHECKS=a,b,... only those sections of 1 run (keys: tiny fp8 fp8attn probe ditango 1b 1c 1e wan22 1g 1d 1d2 stages).
sec() { [ -z "${CHECKS:-}" ] || [[ ",$CHECKS," == *",$1,"* ]]; }
check() { if "$@"; then echo "PASS: $*" | cut -c1-160; else echo "FAIL: $*" | cut -c1-160; fails=$((fails+1)); fi; }
# What the runtime allocates on the device is within the bundle's predicted peak (ditrun's load line).
mem_within() { "$@" >/dev/null 2>"$W/memlog"; local rc=$?; grep "^ditrun: memory:" "$W/memlog"; [ $rc = 0 ] && grep -q "within the prediction" "$W/memlog"; }
# Each expert's GPU forward of two-expert bundle $2 against diffusers' outputs in folder $1.
expert_forwards() {
  for e in transformer transformer_2; do
    check mem_within "$BIN/ditrun" forward "$2" --expert "$e" --inputs "$1/forward_inputs.safetensors" --out "$W/fa.safetensors"
    check "$BIN/st_compare" "$W/fa.safetensors" "$1/forward_output_$e.safetensors" sample 2e-2 0.9999
  done
}

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$BIN/ditc" --version && "$BIN/ditrun" --help >/dev/null || { echo "binaries do not start"; exit 1; }

. tests/gpu/topologies.sh
ngpu=$(nvidia-smi -L | wc -l)
if [ -z "${SKIP_CHECKS:-}" ]; then
if sec tiny; then
step "1. tiny goldens on the GPU (bf16 tolerances as tests/integration/bf16.sh)"
for d in tests/data/wan_tiny_*/; do
  d=${d%/}
  read -r F H Wd B L STEPS G S < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'], m['steps'], m['guidance'], m['shift'])")
  bundle=$("$BIN/ditc" compile "$d/model" --frames "$F" --height "$H" --width "$Wd" --batch "$B" --text-len "$L" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
  check "$BIN/ditrun" forward "$bundle" --inputs "$d/forward_inputs.safetensors" --out "$W/f.safetensors"
  check "$BIN/st_compare" "$W/f.safetensors" "$d/forward_output.safetensors" sample 2e-2 0.9999
  gi="$d/generate_inputs.safetensors"
  check "$BIN/ditrun" generate "$bundle" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps "$STEPS" --guidance "$G" --shift "$S" --out "$W/g.safetensors"
  check "$BIN/st_compare" "$W/g.safetensors" "$d/generate_unipc.safetensors" latents 6e-2 0.999
  check "$BIN/ditrun" compare "$bundle" --inputs "$d/forward_inputs.safetensors" --max-rel 2e-2
  check mem_within "$BIN/ditrun" forward "$bundle" --inputs "$d/forward_inputs.safetensors" --out "$W/f.safetensors"
done
fi
if sec fp8; then
step "1f. fp8 GEMMs (--quant fp8): every step against the CPU reference's same quantization, the forward against the bf16 bundle's (tests/integration/fp8.sh's bounds)"
for d in tests/data/wan_tiny_*/; do
  d=${d%/}
  read -r F H Wd B L < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'])")
  fargs=(compile "$d/model" --frames "$F" --height "$H" --width "$Wd" --batch "$B" --text-len "$L" --dtype bf16 --target sm_90 -o "$W/b" -q)
  exact=$("$BIN/ditc" "${fargs[@]}" | tail -n1 | cut -d' ' -f3)
  fp8=$("$BIN/ditc" "${fargs[@]}" --quant fp8 | tail -n1 | cut -d' ' -f3)
  check "$BIN/ditrun" compare "$fp8" --inputs "$d/forward_inputs.safetensors" --max-rel 2e-2
  check mem_within "$BIN/ditrun" forward "$fp8" --inputs "$d/forward_inputs.safetensors" --out "$W/f8.safetensors"
  check "$BIN/ditrun" forward "$exact" --inputs "$d/forward_inputs.safetensors" --out "$W/fe.safetensors"
  check "$BIN/st_compare" "$W/f8.safetensors" "$W/fe.safetensors" sample 6e-2 0.999
done
fi
if sec fp8attn; then
step "1f. 8-bit attention (--attn-quant fp8, int8 and int8fp8, alone and with --quant fp8): the Hopper kernel's fp8 (also over a sparse tile schedule), int8-QK with bf16 P V and int8-QK with fp8 P V forms and their quantizers step by step against the CPU reference, the forward against the bf16 bundle's"
for hd in 128 64; do  # the kernel's Q and K rows of 128 and of 64 bytes
"$BIN/make_tiny_wan" --preset tiny-hd$hd --dtype bf16 --text-len 7 --out "$W/hd$hd" >/dev/null
for fhw in "13 256 320" "29 256 384"; do  # 1280 and 3072 tokens: several key tiles, a partial last one at 3072
  read -r F H Wd <<< "$fhw"
  fargs=(compile "$W/hd$hd/model" --frames "$F" --height "$H" --width "$Wd" --text-len 7 --dtype bf16 --target sm_90 -o "$W/b" -q)
  exact=$("$BIN/ditc" "${fargs[@]}" | tail -n1 | cut -d' ' -f3)
  "$BIN/forward_inputs" "$exact" "$W/in_hd$hd.safetensors" --seed 3 --set timestep=500 >/dev/null
  check "$BIN/ditrun" forward "$exact" --inputs "$W/in_hd$hd.safetensors" --out "$W/fe.safetensors"
  ms=("--attn-quant fp8" "--quant fp8 --attn-quant fp8" "--attn-quant int8" "--quant fp8 --attn-quant int8" "--attn-quant int8fp8")
  # the fp8 form over a tile schedule too (128-key tiles; head dim 128)
  [ "$hd" = 128 ] && ms+=("--attn-quant fp8 --sparse-attn sta:1,8,10")
  for m in "${ms[@]}"; do
    # shellcheck disable=SC2086
    b=$("$BIN/ditc" "${fargs[@]}" $m | tail -n1 | cut -d' ' -f3)
    # attention_fp8 against the CPU's: the approximate exp2 moves a few P across an e4m3 rounding
    # boundary (measured 4.6e-2 at most, cosine 0.99992, at 3072 tokens).
    check "$BIN/ditrun" compare "$b" --inputs "$W/in_hd$hd.safetensors" --max-rel 6e-2
    [[ "$m" == *sparse* ]] && continue  # sparse: not the dense forward
    check "$BIN/ditrun" forward "$b" --inputs "$W/in_hd$hd.safetensors" --out "$W/f8.safetensors"
    check "$BIN/st_compare" "$W/f8.safetensors" "$W/fe.safetensors" sample 6e-2 0.999
  done
done
done
step "1f. 8-bit attention over a text mask's key bound: HunyuanVideo, 1+1 blocks at the published widths (random weights; head dim 128), one frame of 64x64, 16 text tokens of which 10 valid, every op on the GPU against the CPU reference"
if python3 bench/hunyuan_forward.py --write-random "$W/hy128" --layers 1,1; then
  for m in fp8 int8 int8fp8; do
    b=$("$BIN/ditc" compile "$W/hy128" --frames 1 --height 64 --width 64 --text-len 16 --dtype bf16 --target sm_90 --attn-quant $m -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
    check "$BIN/ditrun" compare "$b" --inputs "$W/hy128/inputs.safetensors" --max-rel 6e-2
  done
else
  check false "HunyuanVideo's random-weight folder"
fi
rm -rf "$W/hy128"

fi
fi
if sec probe; then
step "1a. the step cache's probe kernel on the GPU against the host's computation (the tiny Wan bundle in bf16; fp32 and f16 are checked on the CPU by test_probe and step_cache.sh)"
d=tests/data/wan_tiny_b
bundle=$("$BIN/ditc" compile "$d/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
check "$BIN/probe_check" "$bundle" "$d/forward_inputs.safetensors" cuda
# The hidden-level reuse (the block stack's residual kept and applied by the same kernel): a cached
# run on the GPU stays near the GPU's exact run (the CPU's tiny-model check is step_cache.sh's).
gi=$d/generate_inputs.safetensors
ga=(--prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps 12 --guidance 5 --shift 3)
"$BIN/ditrun" generate "$bundle" "${ga[@]}" --out "$W/gx.safetensors" 2>/dev/null
"$BIN/ditrun" generate "$bundle" "${ga[@]}" --step-cache fbcache:0.5 --out "$W/gh.safetensors" 2>"$W/ghlog"
grep "^ditrun: step cache" "$W/ghlog"
check grep -q "kept residual$" "$W/ghlog"
check "$BIN/st_compare" "$W/gh.safetensors" "$W/gx.safetensors" latents 1 0.99

fi
if [ -z "${SKIP_CHECKS:-}" ] && sec ditango; then
step "1r. attention-state reuse (--reuse ditango) on the GPU, tiny Wan model (tests/integration/ditango.sh's flags): R = 1 bit-identical to the same bundle without reuse options; R = 0.5 (also diagnostic) against the CPU backend's run of the same bundle"
d=tests/data/wan_tiny_b
gi=$d/generate_inputs.safetensors
ga=(--prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --guidance 5 --shift 3)
for top in "--cp 2 --cp-mode ring" "--cp 4 --cp-mode usp --ulysses 2"; do
  echo "-- $top --reuse ditango"
  # shellcheck disable=SC2086
  rb=$("$BIN/ditc" compile "$d/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --dtype bf16 --target sm_90 $top --reuse ditango -o "$W/b" -q 2>"$W/rclog" | tail -n1 | cut -d' ' -f3)
  [ -d "$rb" ] || { cat "$W/rclog"; echo "FAIL: compile $top --reuse ditango"; fails=$((fails+1)); continue; }
  world=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['topology']['world'])" "$rb/manifest.json")
  dev=1; [ "$ngpu" -ge "$world" ] && dev=$world  # ranks share the one GPU unless each has its own
  rm -f "$W/rx.safetensors" "$W/r1.safetensors" "$W/rh.safetensors" "$W/rc.safetensors" "$W/rd.safetensors"
  check "$BIN/ditrun" generate "$rb" --devices "$dev" "${ga[@]}" --steps 4 --out "$W/rx.safetensors"
  check "$BIN/ditrun" generate "$rb" --devices "$dev" "${ga[@]}" --steps 4 --reuse-ratio 1 --out "$W/r1.safetensors"
  check cmp "$W/rx.safetensors" "$W/r1.safetensors"
  rh=(--steps 20 --reuse-ratio 0.5 --reuse-eps-local 100)
  check "$BIN/ditrun" generate "$rb" --devices "$dev" "${ga[@]}" "${rh[@]}" --reuse-report "$W/rh.json" --out "$W/rh.safetensors" 2>"$W/rhlog"
  grep "^ditrun: reuse\|^ditrun: memory" "$W/rhlog"
  # The anchor copies are named in the memory line and held within the prediction.
  check bash -c "grep '^ditrun: memory:' '$W/rhlog' | tail -n 1 | grep -q 'reuse anchor copies.*within the prediction'"
  check "$BIN/ditrun" generate "$rb" --backend cpu "${ga[@]}" "${rh[@]}" --reuse-report "$W/rc.json" --out "$W/rc.safetensors"
  # The decisions may differ where a statistic lands at a threshold (bf16 kernels on the GPU, the
  # device's summation order): the latents agree to cosine 0.999 and both reports are printed.
  check "$BIN/st_compare" "$W/rh.safetensors" "$W/rc.safetensors" latents 1 0.999
  check "$BIN/ditrun" generate "$rb" --devices "$dev" "${ga[@]}" "${rh[@]}" --reuse-diagnostic --reuse-report "$W/rd.json" --out "$W/rd.safetensors"
  check python3 - "$W/rh.json" "$W/rc.json" "$W/rd.json" <<'PY'
import json, sys
def load(p):
    r = json.load(open(p))
    assert r["format"] == "ditango-report" and len(r["steps"]) == 20, p
    dec = [g["decision"] for s in r["steps"] for l in s["layers"] for g in l["groups"]]
    return r, dec
(g, gd), (c, cd), (d, dd) = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
same = sum(a == b for a, b in zip(gd, cd))
print(f"gpu: computed {g['computed']} of {g['decided']} ({gd.count('reuse')} reused); cpu: computed {c['computed']} of {c['decided']} "
      f"({cd.count('reuse')} reused); {same} of {len(gd)} decisions alike")
assert 0.35 <= g["computed"] / g["decided"] <= 0.65 and gd.count("reuse") > 0, (g["computed"], g["decided"])
errs = [x["error"] for s in d["steps"] for l in s["layers"] for x in l["groups"] if x["decision"] == "reuse"]
print(f"diagnostic: {len(errs)} reused states measured on the GPU, relative errors {min(errs):.3g} .. {max(errs):.3g}")
assert errs and all(e is not None and 0 < e < 2 for e in errs)
PY
done

fi
if [ -z "${SKIP_CHECKS:-}" ]; then
if sec 1b; then
step "1b. parallel topologies on the GPU: ranks as threads of one process (NCCL when each has a GPU, else staged through host memory), and one process per rank (NCCL)"
d=tests/data/wan_tiny_b
for top in "${TINY_TOPOLOGIES[@]}"; do
  # shellcheck disable=SC2086
  bundle=$("$BIN/ditc" compile "$d/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --dtype bf16 --target sm_90 $top -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
  echo "-- $top"
  [ -d "$bundle" ] || { echo "FAIL: compile $top"; fails=$((fails+1)); continue; }
  rm -f "$W/ft.safetensors"
  check "$BIN/ditrun" forward "$bundle" --devices "$ngpu" --inputs "$d/forward_inputs.safetensors" --out "$W/ft.safetensors"
  check "$BIN/st_compare" "$W/ft.safetensors" "$d/forward_output.safetensors" sample 2e-2 0.9999
  check mem_within "$BIN/ditrun" forward "$bundle" --devices "$ngpu" --inputs "$d/forward_inputs.safetensors" --out "$W/ft.safetensors"
  world=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['topology']['world'])" "$bundle/manifest.json")
  if [ "$world" -le "$ngpu" ]; then  # one process per rank, each on a GPU of its own (NCCL)
    rm -f "$W/fp.safetensors"
    check "$BIN/ditrun" launch -n "$world" -- forward "$bundle" --inputs "$d/forward_inputs.safetensors" --out "$W/fp.safetensors"
    check "$BIN/st_compare" "$W/fp.safetensors" "$d/forward_output.safetensors" sample 2e-2 0.9999
    rm -f "$W/fo.safetensors"  # collectives in plan order on the compute stream: the same bytes as overlapped
    check "$BIN/ditrun" launch -n "$world" -- forward "$bundle" --no-overlap-collectives --inputs "$d/forward_inputs.safetensors" --out "$W/fo.safetensors"
    check cmp "$W/fp.safetensors" "$W/fo.safetensors"
  fi
done

fi
if [ "$ngpu" -ge 2 ]; then
  echo "-- a rank failing mid-forward under NCCL (DIT_FAIL_STEP): the other stops with an error, no hang"
  b2=$("$BIN/ditc" compile "$d/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --dtype bf16 --target sm_90 --tp 2 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
  for how in fail die; do
    tests/tools/failing_rank.sh "$BIN/ditrun" "$b2" "$d/forward_inputs.safetensors" "$W" 120 $how || fails=$((fails+1))
  done
fi

fi
if [ -z "${SKIP_CHECKS:-}" ] || [ -n "${OFFLOAD_CHECKS:-}" ]; then
if sec 1c; then
step "1c. offload on the GPU: weights streamed into slots on the copy stream give the resident bytes; the resident forward's default CUDA graph gives those of --no-cuda-graph and --cuda-graph"
d=tests/data/wan_tiny_b
c=(compile "$d/model" --frames 5 --height 48 --width 32 --batch 2 --text-len 5 --dtype bf16 --target sm_90 -o "$W/b" -q)
none=$("$BIN/ditc" "${c[@]}" | tail -n1 | cut -d' ' -f3)
check "$BIN/ditrun" forward "$none" --inputs "$d/forward_inputs.safetensors" --out "$W/o_none.safetensors"
# The resident bundle's default forward replays a CUDA graph: the bytes of step by step
# (--no-cuda-graph) and of the forced graph.
rm -f "$W/o_nograph.safetensors" "$W/o_graph.safetensors"
check "$BIN/ditrun" forward "$none" --no-cuda-graph --inputs "$d/forward_inputs.safetensors" --out "$W/o_nograph.safetensors"
check cmp "$W/o_none.safetensors" "$W/o_nograph.safetensors"
check "$BIN/ditrun" forward "$none" --cuda-graph --inputs "$d/forward_inputs.safetensors" --out "$W/o_graph.safetensors"
check cmp "$W/o_none.safetensors" "$W/o_graph.safetensors"
for mode in "layerwise" "chunked --chunk-mb 0.01" "chunked --chunk-mb 0.004 --residency 0.5"; do
  # shellcheck disable=SC2086
  b=$("$BIN/ditc" "${c[@]}" --offload $mode | tail -n1 | cut -d' ' -f3)
  rm -f "$W/o_off.safetensors" "$W/o_offng.safetensors"
  check "$BIN/ditrun" forward "$b" --inputs "$d/forward_inputs.safetensors" --out "$W/o_off.safetensors"
  check cmp "$W/o_none.safetensors" "$W/o_off.safetensors"
  check "$BIN/ditrun" bench "$b" --inputs "$d/forward_inputs.safetensors" --steps 3 --cuda-graph
  # The default (auto: no graph with offload streaming) against --no-cuda-graph: the same bytes.
  check "$BIN/ditrun" forward "$b" --no-cuda-graph --inputs "$d/forward_inputs.safetensors" --out "$W/o_offng.safetensors"
  check cmp "$W/o_off.safetensors" "$W/o_offng.safetensors"
done

# Four blocks: a forward ends by loading the next forward's block 0 (generate's later forwards
# start from it); bit-identical to resident, and with that turned off.
"$BIN/make_tiny_wan" --preset tiny --layers 4 --dtype bf16 --text-len 7 --out "$W/m4" >/dev/null
c4=(compile "$W/m4/model" --frames 9 --height 32 --width 48 --text-len 7 --dtype bf16 --target sm_90 -o "$W/b" -q)
g4=(--prompt-embeds "$W/m4/embeds.safetensors" --negative-embeds "$W/m4/embeds.safetensors" --seed 3 --steps 4)
n4=$("$BIN/ditc" "${c4[@]}" | tail -n1 | cut -d' ' -f3)
check "$BIN/ditrun" generate "$n4" "${g4[@]}" --out "$W/g4_none.safetensors"
for mode in "layerwise" "chunked --chunk-mb 0.004"; do
  # shellcheck disable=SC2086
  b=$("$BIN/ditc" "${c4[@]}" --offload $mode | tail -n1 | cut -d' ' -f3)
  for across in 1 0; do
    check env DIT_OFFLOAD_ACROSS=$across "$BIN/ditrun" generate "$b" "${g4[@]}" --out "$W/g4_off.safetensors"
    check cmp "$W/g4_none.safetensors" "$W/g4_off.safetensors"
  done
done

# Ulysses-2 with chunks paced into the windows between collectives (a profile slow enough that
# windows hold chunks), one process per GPU, collectives overlapped, paced by streams and by
# the host: bit-identical to the resident bundle.
# With "tight" the windows hold fewer chunks than a block: the rest goes out at the block's start.
echo '{"name": "slow", "p_peak_tflops": 3e-7, "bw_h2d_gbs": 1e-4, "eta_comp": 1, "eta_pref": 1}' >"$W/slow.json"
echo '{"name": "tight", "p_peak_tflops": 1e-6, "bw_h2d_gbs": 1e-4, "eta_comp": 1, "eta_pref": 1}' >"$W/tight.json"
cu=("${c[@]}" --cp 2 --cp-mode ulysses)
nu=$("$BIN/ditc" "${cu[@]}" | tail -n1 | cut -d' ' -f3)
check "$BIN/ditrun" forward "$nu" --devices "$ngpu" --inputs "$d/forward_inputs.safetensors" --out "$W/u_none.safetensors"
for pf in slow tight; do
  bu=$("$BIN/ditc" "${cu[@]}" --offload chunked --chunk-mb 0.01 --profile "$W/$pf.json" | tail -n1 | cut -d' ' -f3)
  "$BIN/ditc" inspect "$bu" | tail -n 3
  for pace in stream host; do
    rm -f "$W/u_off.safetensors"
    check "$BIN/ditrun" forward "$bu" --devices "$ngpu" --offload-pace $pace --inputs "$d/forward_inputs.safetensors" --out "$W/u_off.safetensors"
    check cmp "$W/u_none.safetensors" "$W/u_off.safetensors"
  done
done
fi
fi
if [ -z "${SKIP_CHECKS:-}" ]; then

if sec 1e; then
step "1e. Wan2.1 image-to-video (tiny): the GPU forward against diffusers' fp32 output, every op against the CPU"
d=tests/data/wan21_i2v_tiny
read -r F H Wd B L N < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'], m['image_tokens'])")
ib=$("$BIN/ditc" compile "$d/model" --frames "$F" --height "$H" --width "$Wd" --batch "$B" --text-len "$L" --image-len "$N" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
check mem_within "$BIN/ditrun" forward "$ib" --inputs "$d/forward_inputs.safetensors" --out "$W/fi.safetensors"
check "$BIN/st_compare" "$W/fi.safetensors" "$d/forward_output.safetensors" sample 2e-2 0.9999
check "$BIN/ditrun" compare "$ib" --inputs "$d/forward_inputs.safetensors" --max-rel 2e-2
"$BIN/ditrun" compare "$ib" --inputs "$d/forward_inputs.safetensors" | grep -E "^(gelu|attention|linear) "

fi
if sec wan22; then
step "1f. Wan2.2-A14B (tiny, two experts in one bundle): each expert's GPU forward and the 6-step generate across the boundary against diffusers' fp32 outputs; the same generate with the expert swap under a memory budget, bit-identical"
d=tests/data/wan22_a14b_tiny
read -r F H Wd B L STEPS G G2 S GB < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['batch'], m['text_len'], m['steps'], m['guidance'], m['guidance_2'], m['shift'], m['generate_batch'])")
ab=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$Wd" --batch "$B" --text-len "$L" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
expert_forwards "$d" "$ab"
ag=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$Wd" --batch "$GB" --text-len "$L" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
gi="$d/generate_inputs.safetensors"
check "$BIN/ditrun" generate "$ag" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps "$STEPS" --guidance "$G" --guidance-2 "$G2" --shift "$S" --sampler unipc --out "$W/ga.safetensors"
check "$BIN/st_compare" "$W/ga.safetensors" "$d/generate_unipc.safetensors" latents 6e-2 0.999
# The expert swap under a memory budget halfway between every block streamed and every block
# resident: transformer_2's resident set loads between transformer's blocks on the copy stream,
# transformer's weights leave at the switch; bit-identical to the resident generate, and the
# most the device held at once within the pipeline's predicted peak (ditrun's last memory line).
swc=(compile "$d" --frames "$F" --height "$H" --width "$Wd" --batch "$GB" --text-len "$L" --dtype bf16 --target sm_90 -o "$W/b" -q --offload chunked --chunk-mb 0.01)
swpeak() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['summary']['offload']['swap']['predicted_peak_bytes'])" "$1/manifest.json"; }
sw0=$(swpeak "$("$BIN/ditc" "${swc[@]}" --residency 0 | tail -n1 | cut -d' ' -f3)")
sw1=$(swpeak "$("$BIN/ditc" "${swc[@]}" --residency 1 | tail -n1 | cut -d' ' -f3)")
asw=$("$BIN/ditc" "${swc[@]}" --memory-budget "$(python3 -c "print('%.9f' % (($sw0 + $sw1) / 2 / 2**30))")" | tail -n1 | cut -d' ' -f3)
"$BIN/ditc" inspect "$asw" | grep "^swap "
"$BIN/ditrun" generate "$asw" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps "$STEPS" --guidance "$G" --guidance-2 "$G2" --shift "$S" --sampler unipc --out "$W/gas.safetensors" 2>"$W/swlog"
rc=$?; grep -E "^ditrun: (memory|expert swap):|expert switch" "$W/swlog"
check test "$rc" = 0
check cmp "$W/ga.safetensors" "$W/gas.safetensors"
check bash -c "grep '^ditrun: memory:' '$W/swlog' | tail -n 1 | grep -q 'within the prediction'"
# Again with 72 tokens, where the GEMMs go through cuBLASLt: transformer_2 is prepared while its
# weights wait in host memory, and its GEMMs follow their operands to the device at the switch.
swc72=(compile "$d" --frames "$F" --height 64 --width 96 --batch "$GB" --text-len "$L" --dtype bf16 --target sm_90 -o "$W/b" -q)
r72=$("$BIN/ditc" "${swc72[@]}" | tail -n1 | cut -d' ' -f3)
s72=$("$BIN/ditc" "${swc72[@]}" --offload chunked --chunk-mb 0.01 --residency 0.5 | tail -n1 | cut -d' ' -f3)
g72=(--prompt-embeds "$gi" --negative-embeds "$gi" --seed 3 --steps "$STEPS" --guidance "$G" --guidance-2 "$G2" --shift "$S" --sampler unipc)
check "$BIN/ditrun" generate "$r72" "${g72[@]}" --out "$W/g72.safetensors"
check "$BIN/ditrun" generate "$s72" "${g72[@]}" --out "$W/g72s.safetensors"
check cmp "$W/g72.safetensors" "$W/g72s.safetensors"

fi
if sec 1g; then
step "1g. Wan2.2-TI2V (tiny, per-token timesteps), Wan2.2-I2V-A14B and the image-to-video generates: GPU bf16 against diffusers' fp32 outputs"
meta() { python3 -c "import json, sys; m=json.load(open('$1/meta.json')); print(*[m[k] for k in sys.argv[1:]])" "${@:2}"; }
d=tests/data/wan22_ti2v_tiny
read -r F H Wd B L GB STEPS G S < <(meta "$d" frames height width batch text_len generate_batch steps guidance shift)
tb=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$Wd" --batch "$B" --text-len "$L" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
check mem_within "$BIN/ditrun" forward "$tb" --inputs "$d/forward_inputs.safetensors" --out "$W/ft.safetensors"
check "$BIN/st_compare" "$W/ft.safetensors" "$d/forward_output.safetensors" sample 2e-2 0.9999
check "$BIN/ditrun" compare "$tb" --inputs "$d/forward_inputs.safetensors" --max-rel 2e-2
"$BIN/ditrun" compare "$tb" --inputs "$d/forward_inputs.safetensors" | grep -E "^(timestep_embed|cast|adaln|gated_add) " | head -8
tg=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$Wd" --batch "$GB" --text-len "$L" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
gi="$d/generate_inputs.safetensors"
run5=(--prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --steps "$STEPS" --guidance "$G" --shift "$S" --sampler unipc)
check "$BIN/ditrun" generate "$tg" "${run5[@]}" --out "$W/gt.safetensors"
check "$BIN/st_compare" "$W/gt.safetensors" "$d/generate_t2v_unipc.safetensors" latents 6e-2 0.999
check "$BIN/ditrun" generate "$tg" "${run5[@]}" --image-latents "$d/generate_i2v_inputs.safetensors" --out "$W/gti.safetensors"
check "$BIN/st_compare" "$W/gti.safetensors" "$d/generate_i2v_unipc.safetensors" latents 6e-2 0.999
d=tests/data/wan21_i2v_tiny
read -r F H Wd L N GB STEPS G S < <(meta "$d" frames height width text_len image_tokens generate_batch steps guidance shift)
ig=$("$BIN/ditc" compile "$d/model" --frames "$F" --height "$H" --width "$Wd" --batch "$GB" --text-len "$L" --image-len "$N" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
gi="$d/generate_inputs.safetensors"
check "$BIN/ditrun" generate "$ig" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --image-latents "$gi" --image-embeds "$gi" --steps "$STEPS" --guidance "$G" --shift "$S" --sampler unipc --out "$W/gi.safetensors"
check "$BIN/st_compare" "$W/gi.safetensors" "$d/generate_unipc.safetensors" latents 6e-2 0.999
d=tests/data/wan22_i2v_a14b_tiny
read -r F H Wd B L GB STEPS G G2 S < <(meta "$d" frames height width batch text_len generate_batch steps guidance guidance_2 shift)
ab=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$Wd" --batch "$B" --text-len "$L" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
expert_forwards "$d" "$ab"
ag=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$Wd" --batch "$GB" --text-len "$L" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
gi="$d/generate_inputs.safetensors"
check "$BIN/ditrun" generate "$ag" --prompt-embeds "$gi" --negative-embeds "$gi" --init-latents "$gi" --image-latents "$gi" --steps "$STEPS" --guidance "$G" --guidance-2 "$G2" --shift "$S" --sampler unipc --out "$W/gai.safetensors"
check "$BIN/st_compare" "$W/gai.safetensors" "$d/generate_unipc.safetensors" latents 6e-2 0.999

fi
if sec 1d; then
step "1d. the Hopper attention kernel at head dims 64 and 128: every op on the GPU against the CPU reference, 1280 and 126 tokens; repeated forwards bit-identical"
for p in tiny-hd64 tiny-hd128; do
  "$BIN/make_tiny_wan" --preset "$p" --dtype bf16 --text-len 7 --out "$W/$p" >/dev/null
  for shape in "13 256 320" "5 112 144"; do
    read -r F H Wd <<<"$shape"
    hb=$("$BIN/ditc" compile "$W/$p/model" --frames "$F" --height "$H" --width "$Wd" --text-len 7 --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
    python3 - "$W/hin.safetensors" "$F" "$H" "$Wd" <<'PY'
import sys, torch
from safetensors.torch import save_file
f, h, w = (int(sys.argv[2]) - 1) // 4 + 1, int(sys.argv[3]) // 8, int(sys.argv[4]) // 8
g = torch.Generator().manual_seed(2)
save_file({"hidden_states": torch.randn(1, 4, f, h, w, generator=g), "timestep": torch.tensor([500]),
           "encoder_hidden_states": torch.randn(1, 7, 32, generator=g)}, sys.argv[1])
PY
    echo "-- $p, $F frames ${H}x$Wd"
    check "$BIN/ditrun" compare "$hb" --inputs "$W/hin.safetensors" --max-rel 3e-2
    "$BIN/ditrun" compare "$hb" --inputs "$W/hin.safetensors" | grep -E "^attention"
    # Each linear group (q, k, v; the cross-attention's k, v) as one strided-batched cuBLASLt GEMM.
    check env DIT_CUDA_LINEAR_GROUPS=batched "$BIN/ditrun" compare "$hb" --inputs "$W/hin.safetensors" --max-rel 3e-2
    # GEMMs timed at load on random activations (the fill writes only arena memory, which every
    # forward overwrites before it reads), after warm launches.
    check env DIT_CUDA_GEMM_TUNE_DATA=random DIT_CUDA_GEMM_TUNE_MS=5 "$BIN/ditrun" compare "$hb" --inputs "$W/hin.safetensors" --max-rel 3e-2
    # Three times, the same bits: at 1280 tokens the self-attention's tiles are a last partial wave
    # whose key parts merge in a fixed order, whichever finishes last (cuBLASLt's first heuristic
    # algorithms: GEMMs chosen by timing may differ from one process to the next).
    for i in 1 2 3; do DIT_CUDA_GEMM=heuristic "$BIN/ditrun" forward "$hb" --inputs "$W/hin.safetensors" --out "$W/hf$i.safetensors" 2>/dev/null; done
    check cmp "$W/hf1.safetensors" "$W/hf2.safetensors"
    check cmp "$W/hf1.safetensors" "$W/hf3.safetensors"
  done
done

fi
if sec 1d2; then
step "1d2. sparse attention (--sparse-attn): the tiled portable (head dim 64) and Hopper (128) kernels against the CPU backend, 1280 and 3072 tokens"
for p in tiny-hd64 tiny-hd128; do
  [ -d "$W/$p/model" ] || "$BIN/make_tiny_wan" --preset "$p" --dtype bf16 --text-len 7 --out "$W/$p" >/dev/null  # 1d's models
  # Radial is sparse at tile granularity once a frame spans many tiles: 8 frames of 16x24 tokens.
  for case in "sta:1,8,10 13 256 320" "radial 29 256 384"; do
    read -r spec F H Wd <<<"$case"
    sb=$("$BIN/ditc" compile "$W/$p/model" --frames "$F" --height "$H" --width "$Wd" --text-len 7 --dtype bf16 --target sm_90 --sparse-attn "$spec" -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
    rm -f "$W/sin.safetensors" "$W/sg.safetensors" "$W/sc.safetensors"  # a failed compile leaves nothing to compare
    "$BIN/forward_inputs" "$sb" "$W/sin.safetensors" --seed 5 --set timestep=500
    echo "-- $p, $spec"
    check "$BIN/ditrun" compare "$sb" --inputs "$W/sin.safetensors" --max-rel 3e-2
    check "$BIN/ditrun" forward "$sb" --inputs "$W/sin.safetensors" --out "$W/sg.safetensors"
    check "$BIN/ditrun" forward "$sb" --backend cpu --inputs "$W/sin.safetensors" --out "$W/sc.safetensors"
    check "$BIN/st_compare" "$W/sg.safetensors" "$W/sc.safetensors" sample 3e-2 0.999
  done
done
fi
fi

if [ -z "${SKIP_CHECKS:-}" ] && sec stages; then
step "1s. pipeline stages (tiny): the UMT5 encoder, Wan2.1-I2V's CLIP image encoder, the Wan2.1 and Wan2.2 VAE decoders and encoders and FLUX.1's VAE decoder in bf16 on the GPU, every op against the CPU reference, the output against transformers'/diffusers' fp32; FLUX.1 from a prompt; Wan2.2 TI2V and Wan2.1-I2V from a prompt and a PNG; Qwen-Image from a prompt"
d=tests/data/umt5_tiny
read -r L B < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['text_len'], m['batch'])")
te=$("$BIN/ditc" compile "$d/text_encoder" --text-len "$L" --batch "$B" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
rm -f "$W/te.safetensors"
check "$BIN/ditrun" compare "$te" --inputs "$d/forward_inputs.safetensors" --max-rel 3e-2
check "$BIN/ditrun" forward "$te" --inputs "$d/forward_inputs.safetensors" --out "$W/te.safetensors"
check "$BIN/st_compare" "$W/te.safetensors" "$d/forward_output.safetensors" last_hidden_state 1 0.999
# The CLIP image encoder of Wan2.1-I2V (patchify, class token, unmasked attention): hidden_states[-2].
d=tests/data/clip_vision_tiny
B=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['batch'])")
ie=$("$BIN/ditc" compile "$d/image_encoder" --batch "$B" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
rm -f "$W/ie.safetensors"
check "$BIN/ditrun" compare "$ie" --inputs "$d/forward_inputs.safetensors" --max-rel 3e-2
check "$BIN/ditrun" forward "$ie" --inputs "$d/forward_inputs.safetensors" --out "$W/ie.safetensors"
check "$BIN/st_compare" "$W/ie.safetensors" "$d/forward_output.safetensors" hidden_states_penultimate 1 0.999
d=tests/data/wan_vae_tiny
read -r F H Wd < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'])")
vb=$("$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$Wd" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
rm -f "$W/vae.safetensors"
check "$BIN/ditrun" compare "$vb" --inputs "$d/forward_inputs.safetensors" --max-rel 3e-2
check "$BIN/ditrun" forward "$vb" --inputs "$d/forward_inputs.safetensors" --out "$W/vae.safetensors"
check "$BIN/st_compare" "$W/vae.safetensors" "$d/forward_output.safetensors" sample 1 0.999
# The Wan2.2 VAE decoder (residual up blocks, patch size 2) and FLUX.1's 2-D VAE (group norms) alike.
d=tests/data/wan22_vae_tiny
read -r F H Wd < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'])")
vb=$("$BIN/ditc" compile "$d/vae" --frames "$F" --height "$H" --width "$Wd" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
rm -f "$W/vae22.safetensors"
check "$BIN/ditrun" compare "$vb" --inputs "$d/forward_inputs.safetensors" --max-rel 3e-2
check "$BIN/ditrun" forward "$vb" --inputs "$d/forward_inputs.safetensors" --out "$W/vae22.safetensors"
check "$BIN/st_compare" "$W/vae22.safetensors" "$d/forward_output.safetensors" sample 1 0.999
d=tests/data/flux_vae_tiny
vb=$("$BIN/ditc" compile "$d/vae" --height 64 --width 64 --batch 2 --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
rm -f "$W/klvae.safetensors"
check "$BIN/ditrun" compare "$vb" --inputs "$d/forward_inputs.safetensors" --max-rel 3e-2
check "$BIN/ditrun" forward "$vb" --inputs "$d/forward_inputs.safetensors" --out "$W/klvae.safetensors"
check "$BIN/st_compare" "$W/klvae.safetensors" "$d/forward_output.safetensors" sample 1 0.999
# The Wan2.1 and Wan2.2 VAE encoders (strided convolutions) alike.
for d in tests/data/wan_vae_enc_tiny tests/data/wan22_vae_enc_tiny; do
  read -r F H Wd V < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['frames'], m['height'], m['width'], m['vae'])")
  eb=$("$BIN/ditc" compile "$V" --vae-part encoder --frames "$F" --height "$H" --width "$Wd" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
  rm -f "$W/enc.safetensors"
  check "$BIN/ditrun" compare "$eb" --inputs "$d/encoder_inputs.safetensors" --max-rel 3e-2
  check "$BIN/ditrun" forward "$eb" --inputs "$d/encoder_inputs.safetensors" --out "$W/enc.safetensors"
  check "$BIN/st_compare" "$W/enc.safetensors" "$d/encoder_output.safetensors" latents 1 0.999
done
# FLUX.1 from a prompt to an image on the GPU (its CLIP, T5 and VAE stages beside the transformer):
# the final latents against the same bf16 pipeline on the CPU reference, and against FluxPipeline's
# fp32 (bf16 through two text encoders and three steps of these tiny models: cosine 0.987 on the CPU too).
d=tests/data/flux_pipeline_tiny
read -r H Wd L STEPS G < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['height'], m['width'], m['text_len'], m['steps'], m['guidance'])")
PROMPT=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['prompt'])")
for tgt in sm_90 cpu; do
  line=$("$BIN/ditc" compile "$d" --height "$H" --width "$Wd" --text-len "$L" --dtype bf16 --target $tgt -o "$W/fp_$tgt" 2>/dev/null | tail -n1)
  rm -f "$W/flux_lat_$tgt.safetensors"
  check "$BIN/ditrun" generate "${line##* }" --prompt "$PROMPT" --init-latents "$d/golden.safetensors" --steps "$STEPS" --guidance "$G" \
    --out "$W/flux_img_$tgt.safetensors" --out-latents "$W/flux_lat_$tgt.safetensors"
done
check "$BIN/st_compare" "$W/flux_lat_sm_90.safetensors" "$W/flux_lat_cpu.safetensors" latents 1 0.999
check "$BIN/st_compare" "$W/flux_lat_sm_90.safetensors" "$d/golden.safetensors" latents 1 0.98
# Image-to-video from a PNG on the GPU (the VAE encoder stage, and Wan2.1-I2V's CLIP image encoder,
# beside the transformer): the final latents against the same bf16 pipeline on the CPU reference
# and, loosely, against WanImageToVideoPipeline's fp32.
for d in tests/data/wan22_pipeline_tiny tests/data/wan21_i2v_pipeline_tiny; do
  read -r F H Wd L STEPS G S N < <(python3 -c "import json; m=json.load(open('$d/i2v_meta.json')); print(m['frames'], m['height'], m['width'], m['text_len'], m['steps'], m['guidance'], m['shift'], m['image_len'] or 0)")
  PROMPT=$(python3 -c "import json; print(json.load(open('$d/i2v_meta.json'))['prompt'])")
  NEG=$(python3 -c "import json; print(json.load(open('$d/i2v_meta.json'))['negative_prompt'])")
  n=$(basename "$d")
  for tgt in sm_90 cpu; do
    # shellcheck disable=SC2046
    line=$("$BIN/ditc" compile "$d" --frames "$F" --height "$H" --width "$Wd" --text-len "$L" $( [ "$N" != 0 ] && echo --image-len "$N" ) \
      --dtype bf16 --target $tgt -o "$W/i2v_$tgt" 2>/dev/null | tail -n1)
    rm -f "$W/${n}_lat_$tgt.safetensors"
    check "$BIN/ditrun" generate "${line##* }" --prompt "$PROMPT" --negative-prompt "$NEG" --image "$d/i2v_image.png" \
      --init-latents "$d/i2v_golden.safetensors" --steps "$STEPS" --guidance "$G" --shift "$S" --sampler unipc \
      --out "$W/${n}_frames_$tgt.safetensors" --out-latents "$W/${n}_lat_$tgt.safetensors"
  done
  check "$BIN/st_compare" "$W/${n}_lat_sm_90.safetensors" "$W/${n}_lat_cpu.safetensors" latents 1 0.999
  check "$BIN/st_compare" "$W/${n}_lat_sm_90.safetensors" "$d/i2v_golden.safetensors" latents 1 0.98
done
# Qwen-Image from a prompt to an image on the GPU (its Qwen2.5-VL text encoder with the pipeline's
# template, and its VAE): against the same bf16 pipeline on the CPU reference and, loosely,
# QwenImagePipeline's fp32.
d=tests/data/qwen_pipeline_tiny
read -r H Wd L STEPS CFG < <(python3 -c "import json; m=json.load(open('$d/meta.json')); print(m['height'], m['width'], m['text_len'], m['steps'], m['true_cfg'])")
PROMPT=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['prompt'])")
NEG=$(python3 -c "import json; print(json.load(open('$d/meta.json'))['negative_prompt'])")
for tgt in sm_90 cpu; do
  line=$("$BIN/ditc" compile "$d" --height "$H" --width "$Wd" --text-len "$L" --dtype bf16 --target $tgt -o "$W/qp_$tgt" 2>/dev/null | tail -n1)
  rm -f "$W/qwen_lat_$tgt.safetensors"
  check "$BIN/ditrun" generate "${line##* }" --prompt "$PROMPT" --negative-prompt "$NEG" --true-cfg "$CFG" --init-latents "$d/golden.safetensors" \
    --steps "$STEPS" --out "$W/qwen_img_$tgt.safetensors" --out-latents "$W/qwen_lat_$tgt.safetensors"
done
check "$BIN/st_compare" "$W/qwen_lat_sm_90.safetensors" "$W/qwen_lat_cpu.safetensors" latents 1 0.999
check "$BIN/st_compare" "$W/qwen_lat_sm_90.safetensors" "$d/golden.safetensors" latents 1 0.98
fi

if [ -z "${NO_13B:-}" ]; then
step "2. Wan2.1-1.3B config: every op on the GPU against the CPU reference, 126 tokens"
t0=$(date +%s)
"$BIN/make_tiny_wan" --preset wan2.1-1.3b --dtype bf16 --out "$W/wan13" --text-len 512 > /dev/null 2>&1 || fails=$((fails+1))
echo "model maker: $(( $(date +%s) - t0 )) s"
small=$("$BIN/ditc" compile "$W/wan13/model" --frames 5 --height 112 --width 144 --text-len 77 --dtype bf16 --target sm_90 -o "$W/b" | tail -n1 | cut -d' ' -f3)
python3 - "$W/in_small.safetensors" <<'PY'
import sys, torch
from safetensors.torch import save_file
g = torch.Generator().manual_seed(1)
save_file({"hidden_states": torch.randn(1, 16, 2, 14, 18, generator=g), "timestep": torch.tensor([700]),
           "encoder_hidden_states": torch.randn(1, 77, 4096, generator=g)}, sys.argv[1])
PY
check mem_within "$BIN/ditrun" forward "$small" --inputs "$W/in_small.safetensors" --out "$W/o_small.safetensors"
if [ -z "${NO_OPCHECK:-}${SKIP_CHECKS:-}" ]; then
  check "$BIN/ditrun" compare "$small" --inputs "$W/in_small.safetensors" --threads 16 --max-rel 3e-2 -v > "$OUT/compare_1.3b.txt"
  check env DIT_CUDA_LINEAR_GROUPS=batched "$BIN/ditrun" compare "$small" --inputs "$W/in_small.safetensors" --threads 16 --max-rel 3e-2
  tail -n 16 "$OUT/compare_1.3b.txt"
  "$BIN/ditrun" compare "$small" --inputs "$W/in_small.safetensors" --threads 16 --accumulate | tail -n 16 | tee "$OUT/compare_1.3b_accumulated.txt"
fi

fi
[ "$QUICK" = "--quick" ] && { echo; echo "gpu checks: $fails failures (quick)"; rm -rf "$W"; exit $((fails > 0)); }

wan_sc=$(case ",${STEP_CACHE:-}," in *,wan,*|,1,) echo 1;; esac)
if [ -z "${NO_13B:-}" ] && [ -n "${NO_FORWARD:-}" ] && [ -n "$wan_sc${SERVE:-}" ]; then
  step "3'. Wan2.1-1.3B 480x832 81 frames: the bundle alone (for the step-cache sweep and the served jobs)"
  big=$("$BIN/ditc" compile "$W/wan13/model" --frames 81 --height 480 --width 832 --text-len 512 --dtype bf16 --target sm_90 -o "$W/b" | tail -n1 | cut -d' ' -f3)
fi
if [ -z "${NO_FORWARD:-}${NO_13B:-}" ]; then
step "3. Wan2.1-1.3B 480x832 81 frames: compile, parity against diffusers, benchmark"
t0=$(date +%s%N)
seed_mlir_cache "$W/cold"
big=$(DITC_CACHE_DIR=$W/cold "$BIN/ditc" compile "$W/wan13/model" --frames 81 --height 480 --width 832 --text-len 512 --dtype bf16 --target sm_90 -o "$W/b" | tail -n1 | cut -d' ' -f3)
echo "ditc compile (cold codegen cache, MLIR kernels from the carried cache): $(( ($(date +%s%N) - t0) / 1000000 )) ms"
rm -rf "$W/b2"; t0=$(date +%s%N)
DITC_CACHE_DIR=$W/cold "$BIN/ditc" compile "$W/wan13/model" --frames 81 --height 480 --width 832 --text-len 512 --dtype bf16 --target sm_90 -o "$W/b2" -q >/dev/null
echo "ditc compile (warm codegen cache): $(( ($(date +%s%N) - t0) / 1000000 )) ms"
"$BIN/ditc" inspect "$big" | tee "$OUT/inspect_1.3b_480p.txt"
python3 bench/wan_forward.py --model "$W/wan13/model" --bundle "$big" --ditrun "$BIN/ditrun" --out "$W/bench" \
  --frames 81 --height 480 --width 832 --iters 5 ${NO_COMPILE:+--no-compile} 2>&1 | grep -v Warning | tee "$OUT/bench_forward.txt"
cp "$W/bench/forward_results.json" "$OUT/" 2>/dev/null
check python3 -c "import json, sys; r = json.load(open(sys.argv[1])); sys.exit(not r.get('runtime_within_prediction'))" "$W/bench/forward_results.json"
fi
if [ -n "${PARALLEL:-}" ] && [ "$ngpu" -ge 2 ]; then
  step "6. parallel topologies at 480p 81 frames: parity against one GPU and the generate step on $ngpu GPUs"
  python3 bench/parallel/wan_parallel.py --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" --model "$W/wan13/model" --out "$W/par" \
    --steps "${PARALLEL_STEPS:-4}" ${PARALLEL_FLAGS:---in-order} 2>&1 | tee "$OUT/bench_parallel.txt"
  cp "$W/par/parallel.json" "$OUT/" 2>/dev/null
fi
if [ -n "${GENERATE:-}" ] && [ -n "${big:-}" ]; then
  step "4. 50-step generate with CFG against the same loop in diffusers"
  python3 bench/wan_generate.py --model "$W/wan13/model" --bundle "$big" --ditrun "$BIN/ditrun" --out "$W/gen" \
    --frames 81 --height 480 --width 832 --steps 50 2>&1 | grep -v Warning | tee "$OUT/bench_generate.txt"
  cp "$W/gen/generate_results.json" "$OUT/" 2>/dev/null
fi
if [ -n "${STEP_CACHE:-}" ]; then
  step "4b. step caching: each policy against the exact run, cache-dit on diffusers as the peer"
  part=$([ "$STEP_CACHE" = 1 ] && echo wan,flux,hunyuan,qwen || echo "$STEP_CACHE")
  if [ -z "${big:-}" ] && [[ ",$part," == *,wan,* ]]; then
    part=$(echo ",$part," | sed 's/,wan,/,/; s/^,//; s/,$//')
    echo "STEP_CACHE=$STEP_CACHE: no Wan2.1-1.3B bundle (steps 3 and 3' skipped): ${part:-nothing else}"
  fi
fi
if [ -n "${STEP_CACHE:-}" ] && [ -n "$part" ]; then
  timeout "${STEP_CACHE_TIMEOUT:-1800}" python3 bench/step_cache.py --part "$part" --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" \
    --work "$W/sc" --out "$OUT" ${big:+--wan-model "$W/wan13/model" --wan-bundle "$big"} \
    ${STEP_CACHE_FLUX_LAYERS:+--flux-layers "$STEP_CACHE_FLUX_LAYERS"} ${STEP_CACHE_HUNYUAN_LAYERS:+--hunyuan-layers "$STEP_CACHE_HUNYUAN_LAYERS"} \
    ${STEP_CACHE_QWEN_LAYERS:+--qwen-layers "$STEP_CACHE_QWEN_LAYERS"} ${STEP_CACHE_POLICIES:+--policies "$STEP_CACHE_POLICIES"} \
    ${STEP_CACHE_BUDGET:+--budget "$STEP_CACHE_BUDGET"} ${STEP_CACHE_PEERS:+--peers "$STEP_CACHE_PEERS"} 2>&1 | grep -v Warning | tee "$OUT/bench_step_cache.txt"
  rc=${PIPESTATUS[0]}
  check test "$rc" = 0
fi
if [ -n "${LOSSY:-}" ] && [ -z "${NO_13B:-}" ]; then
  step "4c. lossy modes: exact, fp8, sta, radial, fp8+sta against exact bf16; torch.compile, sageattention, torchao FP8 as peers"
  # One call a resolution, each under its budget (the rest skipped with a row saying so).
  for res in $([ "$LOSSY" = 1 ] && echo 480p 720p || echo "$LOSSY" | tr , ' '); do
    timeout "${LOSSY_TIMEOUT:-600}" python3 bench/lossy.py --res "$res" --model "$W/wan13/model" --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" \
      --work "$W/lossy_$res" --out "$OUT" --budget "${LOSSY_BUDGET:-540}" $(v=LOSSY_FLAGS_$res; echo "${!v:-${LOSSY_FLAGS:-}}") 2>&1 | grep -v Warning | tee "$OUT/bench_lossy_$res.txt"
    check test "${PIPESTATUS[0]}" = 0
  done
fi
if [ -n "${VAE:-}" ]; then
  step "4d. VAE decodes: the compiled stage against diffusers' decode (bf16): Wan2.1's at 81 frames (480p, 720p), Wan2.2's at 121 frames of 704x1280 (704p), FLUX.1's at 1024x1024 (1024px)"
  # One call a resolution, each under its timeout; a side that cannot run gets a row saying why.
  for res in $([ "$VAE" = 1 ] && echo 480p 720p || echo "$VAE" | tr , ' '); do
    vae=$(case $res in 704p) echo wan2.2 ;; 1024px) echo flux ;; *) echo wan2.1 ;; esac)
    # shellcheck disable=SC2046
    timeout "${VAE_TIMEOUT:-600}" python3 bench/vae_decode.py --vae "$vae" --res "$res" --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" \
      --work "$W/vae_$res" --out "$OUT" --keep $([ "$vae" = wan2.1 ] && echo ${VAE_FLAGS:-}) 2>&1 | grep -v Warning | tee "$OUT/bench_vae_decode_$res.txt"
    check test "${PIPESTATUS[0]}" = 0
  done
  d=$(ls -d "$W"/vae_480p/pipeline/vae "$W"/vae_720p/pipeline/vae 2>/dev/null | head -n1)  # the Wan2.1 folder the decode above saved
fi
if [ -n "${VAE:-}" ] && [ -n "$d" ]; then
  step "4d2. the Wan2.1 VAE decoder at its published widths, 5 frames at 64x64: every op on the GPU against the CPU reference, whole and in chunks"
  python3 -c "import torch, sys; from safetensors.torch import save_file; save_file({'latents': torch.randn(1, 16, 2, 8, 8, generator=torch.Generator().manual_seed(3))}, sys.argv[1])" "$W/vae_cmp.safetensors"
  for chunk in "" "--vae-chunk 1" "--vae-chunk 1 --vae-first"; do
    # shellcheck disable=SC2086
    vb=$("$BIN/ditc" compile "$d" --frames 5 --height 64 --width 64 --dtype bf16 --target sm_90 $chunk -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
    if [ -z "$chunk" ]; then
      check "$BIN/ditrun" compare "$vb" --inputs "$W/vae_cmp.safetensors" --max-rel 5e-2
    else  # a chunk graph's inputs: one latent frame and its caches, zeros
      "$BIN/forward_inputs" "$vb" "$W/vae_cmp_chunk.safetensors" --seed 3 >/dev/null && check "$BIN/ditrun" compare "$vb" --inputs "$W/vae_cmp_chunk.safetensors" --max-rel 5e-2
    fi
  done
fi
if [ -n "${E2E:-}" ]; then
  step "4e. Wan2.1-1.3B prompt to MP4, 480x832, 81 frames, 50 steps with CFG: one cold ditrun generate against WanPipeline"
  # The results are rewritten after each measurement: a run cut short by the timeout keeps what it measured.
  # shellcheck disable=SC2086
  timeout "${E2E_TIMEOUT:-560}" python3 bench/e2e_wan.py --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" --work "$W/e2e" --out "$OUT" \
    ${E2E_FLAGS:-} 2>&1 | grep -v Warning | tee "$OUT/bench_e2e_wan.txt"
  check test "${PIPESTATUS[0]}" = 0
  rm -rf "$W/e2e"
fi
# The offload experiments, each bounded so that a slow one leaves the others their time;
# every sweep rewrites its JSON after each point, so one cut short keeps what it measured.
sweep=(python3 bench/offload/sweep.py --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" --clean --store "$W/store")
prof=bench/results/profile_h200.json  # the last calibration on this kind of host, unless one runs here
if [ -n "${OFFLOAD:-}" ]; then
  step "5. offload sweep (the seed's experiments): frames x {none, layerwise, chunked}, residency, chunk size"
  timeout "${OFFLOAD_TIMEOUT:-540}" "${sweep[@]}" --model "$W/wan13/model" --out "$W/offload" --frames "${OFFLOAD_FRAMES:-1,5,9,17,33,81}" \
    --calibrate ${OFFLOAD_FLAGS:-} 2>&1 | tee "$OUT/bench_offload.txt"
  cp "$W/offload/offload.json" "$W/offload/profile.json" "$W/offload/"*.png "$OUT/" 2>/dev/null
  [ -e "$W/offload/profile.json" ] && prof=$W/offload/profile.json
fi
if [ -n "${CONTENTION:-}" ] && [ "$ngpu" -ge 2 ]; then
  step "5b. contention: Ulysses-2 with NCCL_P2P_DISABLE=1 (collectives through host memory, beside the weight copies): layerwise, chunked and no offload; chunk sizes; chunked paced by the host"
  NCCL_P2P_DISABLE=1 timeout "${CONTENTION_TIMEOUT:-400}" "${sweep[@]}" --model "$W/wan13/model" --out "$W/contention" \
    --frames "${CONTENTION_FRAMES:-17,33,49,81}" --calibrate --extra "--cp 2 --cp-mode ulysses" --devices 2 --modes layerwise,chunked,none \
    --no-residency --chunk-frames "${CONTENTION_CHUNK_FRAMES:-33}" ${CONTENTION_FLAGS:-} 2>&1 | tee "$OUT/bench_offload_contention.txt"
  cp "$W/contention/offload.json" "$OUT/offload_contention.json" 2>/dev/null
  cp "$W/contention/profile.json" "$OUT/profile_contention.json" 2>/dev/null
  cprof=$W/contention/profile.json; [ -e "$cprof" ] || cprof=$prof
  NCCL_P2P_DISABLE=1 timeout "${PACE_TIMEOUT:-120}" "${sweep[@]}" --model "$W/wan13/model" --out "$W/pace" --frames "${PACE_FRAMES:-33,81}" \
    --profile "$cprof" --extra "--cp 2 --cp-mode ulysses" --devices 2 --modes chunked --no-residency --no-chunks ${CONTENTION_FLAGS:-} \
    --run-flags "--offload-pace host" 2>&1 | tee "$OUT/bench_offload_pace_host.txt"
  cp "$W/pace/offload.json" "$OUT/offload_pace_host.json" 2>/dev/null
fi
if [ -n "${OFFLOAD_14B:-}" ]; then
  step "5c. Wan2.1-14B at 720p, 81 frames and 1 frame: none, layerwise, chunked"
  t0=$(date +%s)
  "$BIN/make_tiny_wan" --preset wan2.1-14b --dtype bf16 --out "$W/wan14" --text-len 512 > /dev/null 2>&1 || fails=$((fails+1))
  echo "model maker (14B): $(( $(date +%s) - t0 )) s"
  timeout "${OFFLOAD_14B_TIMEOUT:-480}" "${sweep[@]}" --model "$W/wan14/model" --out "$W/offload14" --height 720 --width 1280 \
    --frames "${OFFLOAD_14B_FRAMES:-1,81}" --iters 1 --warmup 1 --profile "$prof" --no-residency --no-chunks 2>&1 | tee "$OUT/bench_offload_14b.txt"
  cp "$W/offload14/offload.json" "$OUT/offload_14b.json" 2>/dev/null
fi
# Wan2.2 at the published sizes: models made by diffusers on this host, compiled here with the
# MLIR kernels of tests/gpu/prepare.sh; each script rewrites its JSON as it goes, so a call cut
# short by its timeout keeps what it measured.
w22=(--ditc "$BIN/ditc" --ditrun "$BIN/ditrun" --work "$W/w22" --out "$OUT")
if [ -n "${WAN22:-}" ]; then
  for v in a14b ti2v-5b; do
    case "$WAN22" in all|"$v"|"${v%-5b}") ;; *) continue ;; esac
    step "7. Wan2.2 $v forward at the published size: ditrun against diffusers eager and torch.compile, parity"
    timeout "${WAN22_TIMEOUT:-480}" python3 bench/wan22_forward.py --variant "$v" "${w22[@]}" \
      ${WAN22_LAYERS:+--layers "$WAN22_LAYERS"} ${WAN22_EXPERT:+--expert "$WAN22_EXPERT"} ${NO_COMPILE:+--no-compile} 2>&1 \
      | grep -v Warning | tee "$OUT/bench_wan22_forward_$v.txt"
    rc=${PIPESTATUS[0]}
    check test "$rc" = 0
  done
fi
if [ -n "${WAN22_GENERATE:-}" ]; then
  for part in a14b ti2v; do
    case "$WAN22_GENERATE" in 1|all|"$part") ;; *) continue ;; esac
    step "7b. Wan2.2 $part generate (6 UniPC steps with CFG) against the diffusers pipeline"
    timeout "${WAN22_GENERATE_TIMEOUT:-300}" python3 bench/wan22_generate.py --part "$part" "${w22[@]}" \
      ${WAN22_GENERATE_LAYERS:+--layers "$WAN22_GENERATE_LAYERS"} --budget-gib "${WAN22_BUDGET_GIB:-48}" 2>&1 \
      | grep -v Warning | tee "$OUT/bench_wan22_generate_$part.txt"
    rc=${PIPESTATUS[0]}
    check test "$rc" = 0
  done
fi
if [ -n "${WAN22_SWAP:-}" ]; then
  step "7c. Wan2.2-A14B whole (2 x 40 blocks, random weights): a 4-step generate across the boundary with both experts resident and under --memory-budget WAN22_BUDGET_GIB (default 48), peak memory and the steps around the switch"
  timeout "${WAN22_SWAP_TIMEOUT:-540}" python3 bench/wan22_generate.py --part a14b-swap "${w22[@]}" --budget-gib "${WAN22_BUDGET_GIB:-48}" 2>&1 \
    | grep -v Warning | tee "$OUT/bench_wan22_generate_a14b-swap.txt"
  rc=${PIPESTATUS[0]}
  check test "$rc" = 0
fi
# A tiny pipeline: every op on the GPU against the CPU reference, and the GPU's bf16 forward
# against the CPU's (the bf16 graphs round t as diffusers does in bf16; key bounds from padded masks).
tiny_gpu_checks() { # name folder shape-flags... (TINY_INPUTS: the folder's inputs file, default forward_inputs)
  local name=$1 d=$2; shift 2
  local gb cb in="$d/${TINY_INPUTS:-forward_inputs}.safetensors"
  gb=$("$BIN/ditc" compile "$d" "$@" --dtype bf16 --target sm_90 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
  if [ -z "$gb" ]; then check false "ditc compile $d $* for sm_90 made no bundle"; return; fi
  check "$BIN/ditrun" compare "$gb" --inputs "$in" --max-rel 3e-2 > "$OUT/compare_$name.txt"
  tail -n 4 "$OUT/compare_$name.txt"
  cb=$("$BIN/ditc" compile "$d" "$@" --dtype bf16 -o "$W/b" -q | tail -n1 | cut -d' ' -f3)
  check "$BIN/ditrun" forward "$gb" --inputs "$in" --out "$W/${name}_gpu.safetensors"
  check "$BIN/ditrun" forward "$cb" --inputs "$in" --out "$W/${name}_cpu.safetensors"
  check "$BIN/st_compare" "$W/${name}_gpu.safetensors" "$W/${name}_cpu.safetensors" sample 3e-2 0.9995
}
# The tiny MMDiT checks of TINY_MMDIT (topologies.sh) whose name starts with $1, at each of
# TINY_MMDIT_BATCHES (batch 1: one item, the joint attention's concats and slices are views of
# one block there; its inputs are the folder's forward_inputs_b1).
tiny_mmdit_checks() {
  local entry name d flags b
  for entry in "${TINY_MMDIT[@]}"; do
    read -r name d flags <<< "$entry"
    [[ $name == "$1"* ]] || continue
    for b in "${TINY_MMDIT_BATCHES[@]}"; do
      # shellcheck disable=SC2086
      if [ "$b" = 1 ]; then TINY_INPUTS=forward_inputs_b1 tiny_gpu_checks "${name}_b1" "$d" $flags --batch 1
      else tiny_gpu_checks "$name" "$d" $flags --batch "$b"; fi
    done
  done
}
if [ -n "${FLUX:-}" ]; then
  step "8. FLUX.1 tiny pipelines on the GPU: op by op against the CPU, forward against the CPU's"
  tiny_mmdit_checks flux
  [ -n "${NO_BENCH:-}" ] || {
  step "8b. FLUX.1-dev 1024x1024: ditrun against diffusers eager and torch.compile, parity, 4-step generate"
  timeout "${FLUX_TIMEOUT:-540}" python3 bench/flux_forward.py --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" --work "$W/flux" --out "$OUT" \
    --batches "${FLUX_BATCHES:-1,4}" ${FLUX_LAYERS:+--layers "$FLUX_LAYERS"} ${FLUX_LOSSY:+--lossy "$FLUX_LOSSY"} ${NO_COMPILE:+--no-compile} 2>&1 | grep -v Warning \
    | tee "$OUT/bench_flux_forward.txt"
  rc=${PIPESTATUS[0]}
  check test "$rc" = 0
  }
fi
# ChunkFlow's offload experiment: a zero-weight folder from bench script $2's --write-folder with
# $3 blocks at the published widths, no offload against chunked with nothing resident over the
# sweep flags that follow (bench/offload/sweep.py), at most $4 seconds; offload_$1.json.
offload_sweep() {
  local name=$1 writer=$2 layers=$3 limit=$4; shift 4
  python3 "$writer" --write-folder "$W/${name}z" --layers "$layers" >/dev/null
  timeout "$limit" python3 bench/offload/sweep.py --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" --model "$W/${name}z" --out "$W/${name}off" \
    "$@" --modes none,chunked --no-residency --no-chunks --iters 3 --warmup 1 --store "$W/${name}store" --clean 2>&1 \
    | tee "$OUT/bench_${name}_offload.txt"
  check test "${PIPESTATUS[0]}" = 0
  cp "$W/${name}off/offload.json" "$OUT/offload_${name}.json" 2>/dev/null
  rm -rf "$W/${name}z" "$W/${name}store"
}
if [ -n "${FLUX_OFFLOAD:-}" ]; then
  step "8e. FLUX.1-dev offload over batch sizes (ChunkFlow's experiment): FLUX_OFFLOAD_LAYERS D,S blocks at the published widths"
  offload_sweep flux bench/flux_forward.py "${FLUX_OFFLOAD_LAYERS:-4,8}" "${FLUX_OFFLOAD_TIMEOUT:-300}" \
    --batches "${FLUX_OFFLOAD_BATCHES:-1,2,4,8,12,16}" --height 1024 --width 1024 --text-len 512
fi
if [ -n "${HUNYUAN_OFFLOAD:-}" ]; then
  step "8f. HunyuanVideo offload over frame counts at 1280x720 (ChunkFlow's experiment): HUNYUAN_OFFLOAD_LAYERS D,S blocks at the published widths"
  offload_sweep hunyuan bench/hunyuan_forward.py "${HUNYUAN_OFFLOAD_LAYERS:-2,4}" "${HUNYUAN_OFFLOAD_TIMEOUT:-420}" \
    --frames "${HUNYUAN_OFFLOAD_FRAMES:-1,9,17,33,65,129}" --height 720 --width 1280 --text-len 256
fi
if [ -n "${HUNYUAN:-}" ]; then
  step "8c. HunyuanVideo: the tiny pipeline on the GPU; 1280x720, 129 frames against diffusers eager and torch.compile, parity, a 4-step generate at 33 frames"
  tiny_mmdit_checks hunyuan
  [ -n "${NO_BENCH:-}" ] || timeout "${HUNYUAN_TIMEOUT:-520}" python3 bench/hunyuan_forward.py --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" --work "$W/hunyuan" \
    --out "$OUT" ${HUNYUAN_LAYERS:+--layers "$HUNYUAN_LAYERS"} ${HUNYUAN_LOSSY:+--lossy "$HUNYUAN_LOSSY"} ${NO_COMPILE:+--no-compile} 2>&1 | grep -v Warning \
    | tee "$OUT/bench_hunyuan_forward.txt"
  rc=${PIPESTATUS[0]}
  check test "$rc" = 0
fi
if [ -n "${QWEN:-}" ]; then
  step "8d. Qwen-Image: the tiny pipeline on the GPU; 1328x1328 against diffusers eager and torch.compile, parity, a 4-step generate with true CFG"
  tiny_mmdit_checks qwen
  [ -n "${NO_BENCH:-}" ] || timeout "${QWEN_TIMEOUT:-520}" python3 bench/qwen_forward.py --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" --work "$W/qwen" \
    --out "$OUT" ${QWEN_LAYERS:+--layers "$QWEN_LAYERS"} ${QWEN_LOSSY:+--lossy "$QWEN_LOSSY"} ${NO_COMPILE:+--no-compile} 2>&1 | grep -v Warning \
    | tee "$OUT/bench_qwen_forward.txt"
  rc=${PIPESTATUS[0]}
  check test "$rc" = 0
fi
if [ -n "${GEMM_FP8:-}" ]; then
  step "13. cuBLASLt's fp8 forms at Wan2.1-1.3B's linear shapes against bf16 (bench/gemm_fp8.py)"
  timeout 120 python3 bench/gemm_fp8.py --out "$OUT" 2>&1 | grep -v Warning | tee "$OUT/bench_gemm_fp8.txt"
  check test "${PIPESTATUS[0]}" = 0
fi
if [ -n "${ATTN:-}${ATTN_NCU_ONLY:-}" ]; then
  step "12. the attention kernels at the DiT shapes (bench/attention: build-attn from bench/attention/build.sh), with ATTN=fp8 also the fp8 form against the bf16 kernel and sageattn"
  # shellcheck disable=SC2086
  timeout "${ATTN_TIMEOUT:-300}" bash bench/attention/gpu.sh "$OUT/attention" $([ "${ATTN:-}" = fp8 ] && echo --fp8) ${ATTN_FLAGS:-}
  check test "$?" = 0
fi
if [ -n "${TEXT_ENCODER:-}" ]; then
  step "11. the UMT5-XXL text encoder stage (UMT5_LAYERS of 24 blocks at the published widths, 512 tokens) against transformers in bf16"
  timeout "${TEXT_ENCODER_TIMEOUT:-300}" python3 bench/umt5_encode.py --ditc "$BIN/ditc" --ditrun "$BIN/ditrun" --work "$W/umt5" --out "$OUT" \
    --layers "${UMT5_LAYERS:-24}" 2>&1 | grep -v Warning | tee "$OUT/bench_umt5_encode.txt"
  check test "${PIPESTATUS[0]}" = 0
  rm -rf "$W/umt5"
fi
if [ -n "${PIPELINE:-}" ]; then
  step "9. the Python package in diffusers pipelines: WanPipeline and FluxPipeline with the compiled transformer (parity, no extra device-to-host copies)"
  # The wheel built from this build (tests/gpu/prepare.sh) is installed with the peers' wheels.
  python3 -c "import ditrun, sys; print('ditrun package', ditrun.__version__, 'from', ditrun.__file__)" || fails=$((fails+1))
  if [[ ",$PIPELINE," != *,bench-only,* ]]; then
    timeout "${PIPELINE_TIMEOUT:-300}" python3 tests/gpu/pipeline_parity.py --json "$OUT/pipeline_parity.json" 2>&1 | grep -v Warning | tee "$OUT/pipeline_parity.txt"
    check test "${PIPESTATUS[0]}" = 0
  fi
  if [[ ",$PIPELINE," == *,bench* ]]; then
    step "9b. Wan2.1-1.3B 480p 81 frames, 50 steps with CFG: WanPipeline with the compiled transformer against stock and stock + torch.compile"
    timeout "${PIPELINE_BENCH_TIMEOUT:-420}" python3 tests/gpu/pipeline_parity.py --bench --json "$OUT/pipeline_bench.json" 2>&1 | grep -v Warning | tee "$OUT/pipeline_bench.txt"
    check test "${PIPESTATUS[0]}" = 0
  fi
fi
if [ -n "${SERVE:-}" ] && [ -n "${big:-}" ]; then
  step "10. ditrun serve: Wan2.1-1.3B 480p 81 frames, 50-step jobs with CFG against the command line's generate loop"
  python3 - "$W/serve_in.safetensors" <<'PY'
import sys, torch
from safetensors.torch import save_file
g = torch.Generator().manual_seed(3)
save_file({"prompt_embeds": torch.randn(1, 512, 4096, generator=g).bfloat16(),
           "negative_prompt_embeds": torch.randn(1, 512, 4096, generator=g).bfloat16()}, sys.argv[1])
PY
  "$BIN/ditrun" serve "$big" --listen 127.0.0.1:0 > "$W/serve.log" 2>&1 &
  spid=$!
  port=""
  for _ in $(seq 300); do port=$(grep -o "listening on http://127.0.0.1:[0-9]*" "$W/serve.log" | grep -o "[0-9]*$"); [ -n "$port" ] && break; sleep 0.2; done
  python3 -c "
import sys, time, urllib.request
for _ in range(300):
    try:
        urllib.request.urlopen('http://127.0.0.1:%s/ready' % sys.argv[1], timeout=5); break
    except Exception:
        time.sleep(0.5)" "$port"
  grep "^ditrun serve" "$W/serve.log" | head -5
  timeout "${SERVE_TIMEOUT:-400}" python3 bench/serve_overhead.py --port "$port" --ditrun "$BIN/ditrun" --bundle "$big" \
    --inputs "$W/serve_in.safetensors" --steps 50 -n "${SERVE_N:-2}" --cli-runs "${SERVE_CLI_RUNS:-2}" --enforce 2>&1 | tee "$OUT/serve_overhead.txt"
  check test "${PIPESTATUS[0]}" = 0
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  cp "$W/serve.log" "$OUT/serve.log"
fi
echo; echo "gpu checks: $fails failures"
rm -rf "$W"
exit $((fails > 0))
