# The topologies the GPU checks compile (sourced by prepare.sh, which caches their MLIR
# kernels where MLIR is, and by run.sh).
# shellcheck disable=SC2034
TINY_TOPOLOGIES=("--tp 2" "--tp 2 --sp" "--cfg-parallel" "--cp 2 --cp-mode ulysses" "--cp 2 --cp-mode ring"
                 "--cp 4 --cp-mode usp --ulysses 2" "--tp 2 --sp --cp 2 --cp-mode ring --cfg-parallel")
PARALLEL_TOPOLOGIES=("--cp 2 --cp-mode ulysses" "--cp 2 --cp-mode ring" "--tp 2" "--cfg-parallel")
