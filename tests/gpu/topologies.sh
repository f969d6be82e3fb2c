# The topologies and tiny pipelines the GPU checks compile (sourced by prepare.sh, which caches
# their MLIR kernels where MLIR is, and by run.sh).
# shellcheck disable=SC2034
TINY_TOPOLOGIES=("--tp 2" "--tp 2 --sp" "--cfg-parallel" "--cp 2 --cp-mode ulysses" "--cp 2 --cp-mode ring"
                 "--cp 4 --cp-mode usp --ulysses 2" "--tp 2 --sp --cp 2 --cp-mode ring --cfg-parallel")
PARALLEL_TOPOLOGIES=("--cp 2 --cp-mode ulysses" "--cp 2 --cp-mode ring" "--tp 2" "--cfg-parallel")
# The tiny MMDiT pipelines of run.sh 8, 8c and 8d ("name folder shape-flags"), each checked at
# batch 2 and at batch 1 (where joint attention's concats and token slices are views).
TINY_MMDIT=("flux_dev tests/data/flux_dev_tiny --height 64 --width 64 --text-len 8"
            "flux_schnell tests/data/flux_schnell_tiny --height 64 --width 64 --text-len 8"
            "hunyuan tests/data/hunyuan_video_tiny --frames 5 --height 48 --width 32 --text-len 8"
            "qwen tests/data/qwen_tiny --height 48 --width 80 --text-len 8")
TINY_MMDIT_BATCHES=(2 1)
