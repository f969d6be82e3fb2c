/* MLIR code generation for pure elementwise chains: one chain becomes a `linalg.generic` over
 * vectors of contiguous elements, lowered through MLIR's GPU pipeline (parallel loops, GPU
 * mapping, kernel outlining, NVVM, gpu-module-to-binary) to PTX, all through the MLIR C API.
 *
 * Calling convention of the generated kernel (what the runtime needs to launch it):
 *   - entry `dit_kernel` (reported in dit_mlir_kernel_t.entry), one `.visible .entry` per module;
 *   - parameters are plain 64-bit global pointers (MLIR's bare-pointer memref convention), in
 *     the same order as NVRTC kernels: the output first, then in[0] .. in[n_in-1]; nothing else
 *     (no sizes, strides or descriptors: every shape is a compile-time constant);
 *   - launch exactly grid x block as reported, 1-D: the kernel is specialized to that block
 *     size (`.maxntid`), each thread handles `vector_width` contiguous elements and threads
 *     past the end do nothing; no dynamic shared memory;
 *   - every pointer must be aligned to `align` bytes (16 when vectorized; the memory plan's
 *     256-byte arena alignment and cudaMalloc both satisfy it);
 *   - bf16 is stored as 16-bit integers and converted exactly as the rest of the project does
 *     (bits << 16 on load; round to nearest even, NaN to a quiet NaN, on store); a chain keeps
 *     its intermediate values in fp32;
 *   - the PTX uses no arch-specific instructions and calls no external functions (libdevice
 *     is linked in), so it JIT-compiles on later GPUs too.
 */
#ifndef DIT_COMPILER_CODEGEN_MLIR_H
#define DIT_COMPILER_CODEGEN_MLIR_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/dtype.h"
#include "base/status.h"

#define DIT_MLIR_EW_MAX_IN 4
#define DIT_MLIR_EW_MAX_STEPS 4

/* One step of a chain acts on the running value `acc` (which starts as in[0]). */
typedef enum dit_mlir_ew_op {
  DIT_MLIR_EW_SILU = 1,      /* acc = acc / (1 + exp(-acc)) */
  DIT_MLIR_EW_GELU_TANH = 2, /* acc = 0.5 acc (1 + tanh(0.7978845608028654 (acc + 0.044715 acc^3))) */
  DIT_MLIR_EW_ADD = 3,       /* acc = acc + in[a] */
  DIT_MLIR_EW_GATED_ADD = 4, /* acc = acc + in[a] * in[b] */
} dit_mlir_ew_op_t;

/* How output element i (row-major [B, T, D] when broadcasts are used) picks an input element. */
typedef enum dit_mlir_ew_bcast {
  DIT_MLIR_EW_ELEMENT = 0, /* in[i]; the input has n elements */
  DIT_MLIR_EW_ROW = 1,     /* in[i % d]; a vector of d elements (a bias) */
  DIT_MLIR_EW_MOD = 2,     /* in[(b * rows + row) * d + i % d], b = i / (t * d); a [B, rows, d]
                            * modulation table of which row `row` is used */
} dit_mlir_ew_bcast_t;

typedef struct dit_mlir_ew_input {
  dit_dtype_t dtype; /* DIT_F32 or DIT_BF16 */
  dit_mlir_ew_bcast_t bcast;
} dit_mlir_ew_input_t;

typedef struct dit_mlir_ew_step {
  dit_mlir_ew_op_t op;
  int a, b; /* input indices the op reads besides acc (ADD: a; GATED_ADD: a, b) */
} dit_mlir_ew_step_t;

typedef struct dit_mlir_ew_spec {
  int64_t n;                /* output elements */
  int64_t d, t, rows, row;  /* broadcast geometry; d for ROW and MOD, t, rows, row for MOD */
  int n_in;
  dit_mlir_ew_input_t in[DIT_MLIR_EW_MAX_IN];
  dit_dtype_t out_dtype;    /* DIT_F32 or DIT_BF16 */
  int n_steps;
  dit_mlir_ew_step_t steps[DIT_MLIR_EW_MAX_STEPS];
} dit_mlir_ew_spec_t;

/* How to launch the generated kernel (see the calling convention above). */
typedef struct dit_mlir_kernel {
  char entry[32];
  int n_params;            /* 1 + n_in pointers: out, in[0], ... */
  uint32_t grid[3], block[3];
  uint32_t smem;           /* dynamic shared memory bytes: always 0 */
  uint32_t align;          /* bytes every pointer must be aligned to */
  int vector_width;        /* contiguous elements per thread */
} dit_mlir_kernel_t;

/* Generates PTX for `spec` on `sm_arch` (sm_80, sm_86, sm_89, sm_90). On success *out_kernel
 * says how to launch it, *out_ptx is a NUL-terminated heap string of *out_size bytes (not
 * counting the NUL), and, if out_mlir_text is not NULL, *out_mlir_text holds the input module
 * with the pass pipelines as comments (for dumps and cache keys); the caller frees both.
 * libdevice comes from the CUDA toolkit at $DITC_CUDA_ROOT, else the build's CUDA root.
 * Builds without MLIR return UNAVAILABLE. */
dit_status_t dit_mlir_elementwise_ptx(const dit_mlir_ew_spec_t *spec, const char *sm_arch,
                                      dit_mlir_kernel_t *out_kernel, char **out_ptx,
                                      size_t *out_size, char **out_mlir_text);

/* Adds the MLIR/LLVM version that generated the code to a toolchain identity object. */
dit_status_t dit_mlir_toolchain(cJSON *toolchain);

#endif
