/* CUDA code generation: specializes the kernel templates (compiler/kernels) to one op's shapes
 * and dtypes, compiles them with NVRTC to PTX and links PTX to cubin with nvJitLink, through a
 * per-kernel cache keyed by the hash of source, options and toolchain. */
#ifndef DIT_COMPILER_CODEGEN_CUDA_H
#define DIT_COMPILER_CODEGEN_CUDA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "artifacts/plan.h"
#include "base/status.h"
#include "ir/graph.h"

typedef struct dit_cuda_codegen dit_cuda_codegen_t;

/* 1 if target names a CUDA architecture this build generates for (sm_80 .. sm_90). */
int dit_cuda_target_supported(const char *target);

/* cache_dir NULL: $DITC_CACHE_DIR, else $XDG_CACHE_HOME/ditc, else $HOME/.cache/ditc. */
dit_status_t dit_cuda_codegen_create(const char *target, const char *cache_dir,
                                     dit_cuda_codegen_t **out);
void dit_cuda_codegen_destroy(dit_cuda_codegen_t *cg);

/* The generated module of one step. Buffers are owned by the codegen and valid until the next
 * call. */
typedef struct dit_cuda_module {
  const void *cubin;
  size_t cubin_size;
  const char *ptx;
  size_t ptx_size;
} dit_cuda_module_t;

/* Generates op's kernel. *out_has_kernel = 0 when the runtime executes the op itself (GEMMs
 * through cuBLASLt); otherwise `launch` gets entry, grid, block and smem (module hashes are
 * the caller's to fill) and `module` the code. */
dit_status_t dit_cuda_codegen_op(dit_cuda_codegen_t *cg, const dit_graph_t *g, const dit_op_t *op,
                                 int *out_has_kernel, dit_plan_kernel_t *launch,
                                 dit_cuda_module_t *module);

/* Adds the code generators' versions to a toolchain identity object. */
dit_status_t dit_cuda_toolchain(cJSON *toolchain);
/* The minimum driver API version (cuDriverGetVersion units) the generated code needs. */
int dit_cuda_min_driver(void);

typedef struct dit_cuda_codegen_stats {
  int compiled, cache_hits;
  double compile_seconds;
} dit_cuda_codegen_stats_t;
dit_cuda_codegen_stats_t dit_cuda_codegen_stats(const dit_cuda_codegen_t *cg);

#endif
