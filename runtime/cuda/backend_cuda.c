/* The CUDA backend: device memory, generated kernels launched through the driver API, GEMMs
 * through cuBLASLt (algorithm chosen once per distinct GEMM at load, by timing the heuristic's
 * candidates on the real operands). Both libraries are opened with dlopen and reached through
 * symbol tables, so ditrun starts on machines without them and says so.
 *
 * Environment: DIT_CUDA_GEMM=heuristic keeps cuBLASLt's first heuristic choice instead of
 * timing candidates (to compare); DIT_CUDA_GEMM_CANDIDATES=N times the heuristic's first N
 * (default 8, at most 64); DIT_CUDA_GEMM_TUNE_DATA=random times them on random activations
 * (cuda_prepare) and DIT_CUDA_GEMM_TUNE_MS=T after T ms of warm launches each (gemm_tune_ms);
 * DIT_CUDA_GEMM_VERBOSE=1 reports each GEMM's choice and times on stderr. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/plan_memory.h"
#include "runtime/backend.h"
#include "runtime/cpu/threadpool.h"
#include "runtime/linear_group.h"

/* The step cache's probe (probe_change in backend.h): a grid-stride loop over the elements, each
 * thread's sums in fp32, a warp's added in double through shuffles, and one double atomic add per
 * warp into sums[2] (zeroed before the launch). dtype 0 f32, 1 bf16, 2 f16; r is rounded to the
 * dtype (bf16: to nearest even by integer arithmetic, which keeps the sm_70 target) before it is
 * compared and stored. The threads of a warp all leave the loop before the shuffles. */
#define PROBE_SHFL(reg, off)                                                                            \
  "  mov.b64 {%r20, %r21}, " reg ";\n"                                                                  \
  "  shfl.sync.bfly.b32 %r22, %r20, " off ", 31, -1;\n  shfl.sync.bfly.b32 %r23, %r21, " off ", 31, -1;\n" \
  "  mov.b64 %fd9, {%r22, %r23};\n  add.f64 " reg ", " reg ", %fd9;\n"
#define PROBE_REDUCE(reg) PROBE_SHFL(reg, "16") PROBE_SHFL(reg, "8") PROBE_SHFL(reg, "4") PROBE_SHFL(reg, "2") PROBE_SHFL(reg, "1")
/* Loads element [addr] of the dtype into f (h: the 16-bit pattern). */
#define PROBE_LOAD(ld, f, h, addr)                                               \
  "  @%p3 " ld ".f32 " f ", [" addr "];\n  @!%p3 " ld ".b16 " h ", [" addr "];\n" \
  "  @%p4 cvt.u32.u16 %r8, " h ";\n  @%p4 shl.b32 %r8, %r8, 16;\n  @%p4 mov.b32 " f ", %r8;\n" \
  "  @%p6 cvt.f32.f16 " f ", " h ";\n"
static const char kProbePtx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry dit_probe_change(.param .u64 p_x, .param .u64 p_base, .param .u64 p_prev, .param .u64 p_sums,\n"
    "                                 .param .u64 p_n, .param .u32 p_dtype, .param .u32 p_update)\n"
    "{\n"
    "  .reg .pred %p<12>;\n  .reg .b16 %h<4>;\n  .reg .b32 %r<24>;\n  .reg .f32 %f<12>;\n"
    "  .reg .b64 %rd<16>;\n  .reg .f64 %fd<12>;\n"
    "  ld.param.u64 %rd1, [p_x];\n  ld.param.u64 %rd2, [p_base];\n  ld.param.u64 %rd3, [p_prev];\n"
    "  ld.param.u64 %rd4, [p_sums];\n  ld.param.u64 %rd5, [p_n];\n"
    "  ld.param.u32 %r1, [p_dtype];\n  ld.param.u32 %r2, [p_update];\n"
    "  setp.ne.u64 %p1, %rd2, 0;\n  setp.ne.u32 %p2, %r2, 0;\n"
    "  setp.eq.u32 %p3, %r1, 0;\n  setp.eq.u32 %p4, %r1, 1;\n  setp.eq.u32 %p6, %r1, 2;\n"
    "  and.pred %p8, %p2, %p3;\n  and.pred %p9, %p2, !%p3;\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n  cvta.to.global.u64 %rd2, %rd2;\n"
    "  cvta.to.global.u64 %rd3, %rd3;\n  cvta.to.global.u64 %rd4, %rd4;\n"
    "  selp.u32 %r7, 2, 1, %p3;\n"
    /* i = ctaid.x * ntid.x + tid.x, stride nctaid.x * ntid.x */
    "  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n"
    "  mul.wide.u32 %rd7, %r3, %r4;\n  cvt.u64.u32 %rd8, %r5;\n  add.u64 %rd7, %rd7, %rd8;\n"
    "  mov.u32 %r6, %nctaid.x;\n  mul.wide.u32 %rd9, %r6, %r4;\n"
    "  mov.f32 %f1, 0f00000000;\n  mov.f32 %f2, 0f00000000;\n"
    "$LOOP:\n"
    "  setp.ge.u64 %p5, %rd7, %rd5;\n  @%p5 bra $END;\n"
    "  shl.b64 %rd10, %rd7, %r7;\n  add.u64 %rd11, %rd1, %rd10;\n  add.u64 %rd12, %rd3, %rd10;\n  add.u64 %rd13, %rd2, %rd10;\n"
    PROBE_LOAD("ld.global.nc", "%f3", "%h1", "%rd11")
    "  @!%p1 bra $NOBASE;\n"
    PROBE_LOAD("ld.global.nc", "%f4", "%h1", "%rd13")
    "  sub.rn.f32 %f3, %f3, %f4;\n"
    "$NOBASE:\n"
    /* r rounded to the dtype: %f3, its 16-bit pattern in %h2 */
    "  @%p6 cvt.rn.f16.f32 %h2, %f3;\n  @%p6 cvt.f32.f16 %f3, %h2;\n"
    "  @!%p4 bra $ROUNDED;\n"
    "  mov.b32 %r9, %f3;\n  shr.u32 %r10, %r9, 16;\n  and.b32 %r11, %r10, 1;\n  add.u32 %r11, %r11, 32767;\n"
    "  add.u32 %r12, %r9, %r11;\n  shr.u32 %r12, %r12, 16;\n"
    "  testp.notanumber.f32 %p7, %f3;\n  @%p7 or.b32 %r12, %r10, 64;\n"
    "  cvt.u16.u32 %h2, %r12;\n  shl.b32 %r12, %r12, 16;\n  mov.b32 %f3, %r12;\n"
    "$ROUNDED:\n"
    PROBE_LOAD("ld.global", "%f5", "%h3", "%rd12")
    "  sub.rn.f32 %f6, %f3, %f5;\n  abs.f32 %f6, %f6;\n  add.rn.f32 %f1, %f1, %f6;\n"
    "  abs.f32 %f7, %f5;\n  add.rn.f32 %f2, %f2, %f7;\n"
    "  @%p8 st.global.f32 [%rd12], %f3;\n  @%p9 st.global.b16 [%rd12], %h2;\n"
    "  add.u64 %rd7, %rd7, %rd9;\n  bra.uni $LOOP;\n"
    "$END:\n"
    "  cvt.f64.f32 %fd1, %f1;\n  cvt.f64.f32 %fd2, %f2;\n"
    PROBE_REDUCE("%fd1") PROBE_REDUCE("%fd2")
    "  and.b32 %r13, %r5, 31;\n  setp.eq.u32 %p10, %r13, 0;\n"
    "  @%p10 red.global.add.f64 [%rd4], %fd1;\n  @%p10 red.global.add.f64 [%rd4+8], %fd2;\n"
    "  ret;\n}\n"
    /* Reuse's statistics (sum_sq_diff in backend.h), in the same module: the same grid-stride loop
     * and warp reduction, each thread's sums in double. x's dtype p_xdt and ref's p_rdt: 0 f32,
     * 1 bf16, 2 f16 (ref f32 or x's dtype, so the refresh stores x's f32 value or its 16 bits). */
    ".visible .entry dit_sum_sq_diff(.param .u64 p_x, .param .u64 p_ref, .param .u64 p_sums, .param .u64 p_n,\n"
    "                                .param .u32 p_xdt, .param .u32 p_rdt, .param .u32 p_update)\n"
    "{\n"
    "  .reg .pred %p<16>;\n  .reg .b16 %h<4>;\n  .reg .b32 %r<24>;\n  .reg .f32 %f<8>;\n"
    "  .reg .b64 %rd<16>;\n  .reg .f64 %fd<12>;\n"
    "  ld.param.u64 %rd1, [p_x];\n  ld.param.u64 %rd2, [p_ref];\n  ld.param.u64 %rd4, [p_sums];\n  ld.param.u64 %rd5, [p_n];\n"
    "  ld.param.u32 %r1, [p_xdt];\n  ld.param.u32 %r15, [p_rdt];\n  ld.param.u32 %r2, [p_update];\n"
    "  setp.ne.u64 %p1, %rd2, 0;\n  setp.ne.u32 %p2, %r2, 0;\n"
    "  setp.eq.u32 %p3, %r1, 0;\n  setp.eq.u32 %p4, %r1, 1;\n  setp.eq.u32 %p6, %r1, 2;\n"
    "  setp.eq.u32 %p11, %r15, 0;\n  setp.eq.u32 %p12, %r15, 1;\n  setp.eq.u32 %p13, %r15, 2;\n"
    "  and.pred %p8, %p2, %p11;\n  and.pred %p9, %p2, !%p11;\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n  cvta.to.global.u64 %rd2, %rd2;\n  cvta.to.global.u64 %rd4, %rd4;\n"
    "  selp.u32 %r7, 2, 1, %p3;\n  selp.u32 %r14, 2, 1, %p11;\n"
    "  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n"
    "  mul.wide.u32 %rd7, %r3, %r4;\n  cvt.u64.u32 %rd8, %r5;\n  add.u64 %rd7, %rd7, %rd8;\n"
    "  mov.u32 %r6, %nctaid.x;\n  mul.wide.u32 %rd9, %r6, %r4;\n"
    "  mov.f64 %fd1, 0d0000000000000000;\n  mov.f64 %fd2, 0d0000000000000000;\n"
    "$SLOOP:\n"
    "  setp.ge.u64 %p5, %rd7, %rd5;\n  @%p5 bra $SEND;\n"
    "  shl.b64 %rd10, %rd7, %r7;\n  add.u64 %rd11, %rd1, %rd10;\n"
    "  @%p3 ld.global.nc.f32 %f3, [%rd11];\n  @!%p3 ld.global.nc.b16 %h1, [%rd11];\n"
    "  @%p4 cvt.u32.u16 %r8, %h1;\n  @%p4 shl.b32 %r8, %r8, 16;\n  @%p4 mov.b32 %f3, %r8;\n"
    "  @%p6 cvt.f32.f16 %f3, %h1;\n"
    "  cvt.f64.f32 %fd3, %f3;\n  mov.f64 %fd4, 0d0000000000000000;\n"
    "  @!%p1 bra $SNOREF;\n"
    "  shl.b64 %rd12, %rd7, %r14;\n  add.u64 %rd13, %rd2, %rd12;\n"
    "  @%p11 ld.global.f32 %f4, [%rd13];\n  @!%p11 ld.global.b16 %h2, [%rd13];\n"
    "  @%p12 cvt.u32.u16 %r9, %h2;\n  @%p12 shl.b32 %r9, %r9, 16;\n  @%p12 mov.b32 %f4, %r9;\n"
    "  @%p13 cvt.f32.f16 %f4, %h2;\n"
    "  cvt.f64.f32 %fd4, %f4;\n"
    "  @%p8 st.global.f32 [%rd13], %f3;\n  @%p9 st.global.b16 [%rd13], %h1;\n"
    "$SNOREF:\n"
    "  sub.rn.f64 %fd5, %fd3, %fd4;\n  mul.rn.f64 %fd5, %fd5, %fd5;\n  add.rn.f64 %fd1, %fd1, %fd5;\n"
    "  mul.rn.f64 %fd6, %fd3, %fd3;\n  add.rn.f64 %fd2, %fd2, %fd6;\n"
    "  add.u64 %rd7, %rd7, %rd9;\n  bra.uni $SLOOP;\n"
    "$SEND:\n"
    PROBE_REDUCE("%fd1") PROBE_REDUCE("%fd2")
    "  and.b32 %r13, %r5, 31;\n  setp.eq.u32 %p10, %r13, 0;\n"
    "  @%p10 red.global.add.f64 [%rd4], %fd1;\n  @%p10 red.global.add.f64 [%rd4+8], %fd2;\n"
    "  ret;\n}\n"
    /* GEMM timing's operand data (DIT_CUDA_GEMM_TUNE_DATA=random): n bf16 values, each from a
     * hash of its index: a random sign and 7 mantissa bits, magnitude in [0.5, 2) (exponent 126
     * or 127 by one more hash bit), so a candidate is timed on operands that switch like an
     * activation's rather than on what a fresh arena holds (in practice zeros). */
    ".visible .entry dit_fill_bf16(.param .u64 p_x, .param .u64 p_n)\n"
    "{\n"
    "  .reg .pred %p<2>;\n  .reg .b16 %h<2>;\n  .reg .b32 %r<10>;\n  .reg .b64 %rd<10>;\n"
    "  ld.param.u64 %rd1, [p_x];\n  ld.param.u64 %rd2, [p_n];\n  cvta.to.global.u64 %rd1, %rd1;\n"
    "  mov.u32 %r1, %ctaid.x;\n  mov.u32 %r2, %ntid.x;\n  mov.u32 %r3, %tid.x;\n"
    "  mul.wide.u32 %rd3, %r1, %r2;\n  cvt.u64.u32 %rd4, %r3;\n  add.u64 %rd3, %rd3, %rd4;\n"
    "  mov.u32 %r4, %nctaid.x;\n  mul.wide.u32 %rd5, %r4, %r2;\n"
    "$FLOOP:\n"
    "  setp.ge.u64 %p1, %rd3, %rd2;\n  @%p1 bra $FEND;\n"
    "  cvt.u32.u64 %r5, %rd3;\n  shr.u64 %rd6, %rd3, 32;\n  cvt.u32.u64 %r6, %rd6;\n  xor.b32 %r5, %r5, %r6;\n"
    "  mul.lo.u32 %r5, %r5, 0x9E3779B1;\n  shr.u32 %r7, %r5, 15;\n  xor.b32 %r5, %r5, %r7;\n"
    "  mul.lo.u32 %r5, %r5, 0x85EBCA77;\n  shr.u32 %r7, %r5, 13;\n  xor.b32 %r5, %r5, %r7;\n"
    "  and.b32 %r5, %r5, 0x80FF;\n  or.b32 %r5, %r5, 0x3F00;\n  cvt.u16.u32 %h1, %r5;\n"
    "  shl.b64 %rd7, %rd3, 1;\n  add.u64 %rd8, %rd1, %rd7;\n  st.global.b16 [%rd8], %h1;\n"
    "  add.u64 %rd3, %rd3, %rd5;\n  bra.uni $FLOOP;\n"
    "$FEND:\n"
    "  ret;\n}\n";
#undef PROBE_SHFL
#undef PROBE_REDUCE
#undef PROBE_LOAD

/* The probe and statistics kernels' source, for a test that assembles it (it is loaded on first use). */
const char *dit_cuda_probe_ptx(void) { return kProbePtx; }

#if DIT_HAVE_CUDA_HEADERS
#include <cublasLt.h>
#include <cuda.h>

/* ---- symbol tables ---- */

typedef struct cu_api {
  void *lib;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemGetInfo)(size_t *, size_t *);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **);
  CUresult (*cuTensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                                     const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
  CUresult (*cuGraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuMemHostRegister)(void *, size_t, unsigned);
  CUresult (*cuMemHostUnregister)(void *);
  CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void *);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuMemcpy2DAsync)(const CUDA_MEMCPY2D *, CUstream);
} cu_api_t;

typedef struct lt_api {
  void *lib;
  cublasStatus_t (*create)(cublasLtHandle_t *);
  cublasStatus_t (*destroy)(cublasLtHandle_t);
  cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
  cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t);
  cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t);
  cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t);
  cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t);
  cublasStatus_t (*layout_set)(cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, const void *, size_t);
  cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t *);
  cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t);
  cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t);
  cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                              cublasLtMatmulHeuristicResult_t *, int *);
  cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *, cublasLtMatrixLayout_t,
                           const void *, cublasLtMatrixLayout_t, const void *, const void *, cublasLtMatrixLayout_t, void *,
                           cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t);
  /* Optional (NULL when absent): only the verbose report names an algorithm's configuration. */
  cublasStatus_t (*algo_config_get)(const cublasLtMatmulAlgo_t *, cublasLtMatmulAlgoConfigAttributes_t, void *, size_t, size_t *);
} lt_api_t;

static void *open_first(const char *const *names) {
  for (int i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

#define LOAD(api, field, sym)                                                                      \
  do {                                                                                             \
    *(void **)&(api)->field = dlsym((api)->lib, sym);                                              \
    if (!(api)->field) return DIT_ERR(UNAVAILABLE, "%s: symbol %s not found", libname, sym);       \
  } while (0)

static dit_status_t load_cu(cu_api_t *a) {
  static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
  const char *libname = "libcuda.so.1";
  a->lib = open_first(names);
  if (!a->lib)
    return DIT_ERR(UNAVAILABLE, "CUDA backend unavailable: cannot load the NVIDIA driver library libcuda.so.1 (%s)", dlerror());
  LOAD(a, cuInit, "cuInit");
  LOAD(a, cuDriverGetVersion, "cuDriverGetVersion");
  LOAD(a, cuDeviceGet, "cuDeviceGet");
  LOAD(a, cuDeviceGetCount, "cuDeviceGetCount");
  LOAD(a, cuDeviceGetAttribute, "cuDeviceGetAttribute");
  LOAD(a, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  LOAD(a, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  LOAD(a, cuCtxSetCurrent, "cuCtxSetCurrent");
  LOAD(a, cuStreamCreate, "cuStreamCreate");
  LOAD(a, cuStreamDestroy, "cuStreamDestroy_v2");
  LOAD(a, cuStreamSynchronize, "cuStreamSynchronize");
  LOAD(a, cuMemAlloc, "cuMemAlloc_v2");
  LOAD(a, cuMemFree, "cuMemFree_v2");
  LOAD(a, cuMemGetInfo, "cuMemGetInfo_v2");
  LOAD(a, cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  LOAD(a, cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  LOAD(a, cuModuleLoadData, "cuModuleLoadData");
  LOAD(a, cuModuleUnload, "cuModuleUnload");
  LOAD(a, cuModuleGetFunction, "cuModuleGetFunction");
  LOAD(a, cuFuncSetAttribute, "cuFuncSetAttribute");
  LOAD(a, cuLaunchKernel, "cuLaunchKernel");
  LOAD(a, cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled");
  LOAD(a, cuGetErrorString, "cuGetErrorString");
  LOAD(a, cuGetErrorName, "cuGetErrorName");
  LOAD(a, cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  LOAD(a, cuStreamEndCapture, "cuStreamEndCapture");
  LOAD(a, cuGraphInstantiate, "cuGraphInstantiateWithFlags");
  LOAD(a, cuGraphLaunch, "cuGraphLaunch");
  LOAD(a, cuGraphExecDestroy, "cuGraphExecDestroy");
  LOAD(a, cuGraphDestroy, "cuGraphDestroy");
  LOAD(a, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  LOAD(a, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  LOAD(a, cuMemsetD8Async, "cuMemsetD8Async");
  LOAD(a, cuEventCreate, "cuEventCreate");
  LOAD(a, cuEventSynchronize, "cuEventSynchronize");
  LOAD(a, cuEventDestroy, "cuEventDestroy_v2");
  LOAD(a, cuEventRecord, "cuEventRecord");
  LOAD(a, cuEventQuery, "cuEventQuery");
  LOAD(a, cuStreamWaitEvent, "cuStreamWaitEvent");
  LOAD(a, cuMemHostRegister, "cuMemHostRegister_v2");
  LOAD(a, cuMemHostUnregister, "cuMemHostUnregister");
  LOAD(a, cuMemHostAlloc, "cuMemHostAlloc");
  LOAD(a, cuMemFreeHost, "cuMemFreeHost");
  LOAD(a, cuEventElapsedTime, "cuEventElapsedTime");
  LOAD(a, cuMemcpy2DAsync, "cuMemcpy2DAsync_v2");
  return DIT_OK;
}

static dit_status_t load_lt(lt_api_t *a) {
  static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL};
  const char *libname = "libcublasLt";
  a->lib = open_first(names);
  if (!a->lib) return DIT_ERR(UNAVAILABLE, "cuBLASLt unavailable: cannot load libcublasLt.so (%s)", dlerror());
  LOAD(a, create, "cublasLtCreate");
  LOAD(a, destroy, "cublasLtDestroy");
  LOAD(a, desc_create, "cublasLtMatmulDescCreate");
  LOAD(a, desc_destroy, "cublasLtMatmulDescDestroy");
  LOAD(a, desc_set, "cublasLtMatmulDescSetAttribute");
  LOAD(a, layout_create, "cublasLtMatrixLayoutCreate");
  LOAD(a, layout_destroy, "cublasLtMatrixLayoutDestroy");
  LOAD(a, layout_set, "cublasLtMatrixLayoutSetAttribute");
  LOAD(a, pref_create, "cublasLtMatmulPreferenceCreate");
  LOAD(a, pref_destroy, "cublasLtMatmulPreferenceDestroy");
  LOAD(a, pref_set, "cublasLtMatmulPreferenceSetAttribute");
  LOAD(a, heuristic, "cublasLtMatmulAlgoGetHeuristic");
  LOAD(a, matmul, "cublasLtMatmul");
  *(void **)&a->algo_config_get = dlsym(a->lib, "cublasLtMatmulAlgoConfigGetAttribute");
  return DIT_OK;
}

/* ---- state ---- */

typedef struct gemm {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
  const void *bias_at; /* the bias address the description holds (operands may move: an expert swap) */
  const void *a_scale_at; /* linear_fp8: the weight's channel scales the description holds */
  const void *b_scale_at; /* linear_fp8: x's row scales the description holds */
} gemm_t;

/* What makes two GEMMs the same problem for cuBLASLt: identical ones (every block's q, k, v,
 * ...) share one algorithm choice, tuned once. */
typedef struct gemm_key {
  int64_t m, n, k;
  int tx, tw, ty, tbias; /* dit dtypes; tbias -1 without a bias */
  int epilogue;
  uint32_t align; /* the operands' common pointer alignment, at most 256 bytes */
  int batch;      /* products in one strided-batched call (a linear group); 1: one */
} gemm_key_t;

typedef struct gemm_choice {
  gemm_key_t key;
  cublasLtMatmulAlgo_t algo;
} gemm_choice_t;

/* Candidates timed per distinct GEMM: warm launches, then timed launches whose median counts. */
#define GEMM_CANDIDATES 8
#define GEMM_CANDIDATES_MAX 64
#define GEMM_WARM 2
#define GEMM_REPS 5
#define GEMM_MARGIN 0.03 /* a candidate replaces the heuristic's first when this much faster */

typedef struct loaded_module {
  char hash[DIT_HASH_HEX];
  CUmodule mod;
} loaded_module_t;

typedef struct cuda_state {
  cu_api_t cu;
  lt_api_t lt;
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  int cc_major, cc_minor;
  cublasLtHandle_t lt_handle;
  CUdeviceptr workspace;
  size_t workspace_size;
  uint64_t allocated; /* bytes requested through cuda_alloc (allocated_bytes) */
  loaded_module_t *mods;
  size_t n_mods;
  CUgraph graph;     /* a captured forward, and its executable */
  CUgraphExec graph_exec;
  CUfunction *funcs; /* per step */
  CUtensorMap *tmaps;  /* per step, DIT_PLAN_MAX_TMAPS each: encoded at load, again if an address moves */
  const void **tmap_at; /* the addresses they were encoded for */
  gemm_t *gemms;     /* per step */
  size_t n_steps;
  int *group_len;    /* per step: G where the step's GEMM makes its whole linear group, else 0 */
  size_t group_next, group_left; /* the next member a group's first step made, and how many are left */
  gemm_choice_t *choices; /* per distinct GEMM */
  size_t n_choices;
  CUevent tune_ev[GEMM_REPS + 1]; /* timing events of the GEMM tuning, created on first use */
  CUstream copy_stream;                 /* weight streaming, created on first use */
  CUstream coll_stream;                 /* collectives overlapped with compute, on first use */
  CUevent events[DIT_BACKEND_MAX_EVENTS]; /* created on first use */
  void *registered;                     /* host memory page-locked in place */
  void *pinned_copy;                    /* or a page-locked copy of it */
  const void *pinned_src;
  CUmodule copy_mod; /* the strided copy kernel below (none: copies on the copy engines) */
  CUfunction copy_fn;
  CUmodule probe_mod; /* the probe and statistics kernels, loaded on first use, and their two sums */
  CUfunction probe_fn, stats_fn, fill_fn;
  CUdeviceptr probe_sums;
  CUevent ext_ev;    /* orders a caller's stream with the compute stream, created on first use */
} cuda_state_t;

/* Device-to-device copies of rows (a collective's layouts: a head group of each token, one
 * member's tokens) on the SMs: one 16-byte vector per thread and row, the rows strided over
 * the grid's y. The copy engines move such narrow rows at a fraction of the memory bandwidth.
 * Kept as PTX text, loaded into each context: the driver compiles it for the device. */
static const char kCopyPtx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry dit_copy2d(.param .u64 p_dst, .param .u64 p_dpitch, .param .u64 p_src, .param .u64 p_spitch,\n"
    "                           .param .u64 p_w16, .param .u64 p_height)\n"
    "{\n"
    "  .reg .pred %p<3>;\n  .reg .b32 %r<16>;\n  .reg .b64 %rd<16>;\n"
    "  ld.param.u64 %rd1, [p_dst];\n  ld.param.u64 %rd2, [p_dpitch];\n"
    "  ld.param.u64 %rd3, [p_src];\n  ld.param.u64 %rd4, [p_spitch];\n"
    "  ld.param.u64 %rd5, [p_w16];\n  ld.param.u64 %rd6, [p_height];\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n  cvta.to.global.u64 %rd3, %rd3;\n"
    /* column (16-byte vector) = ctaid.x * ntid.x + tid.x */
    "  mov.u32 %r1, %ctaid.x;\n  mov.u32 %r2, %ntid.x;\n  mov.u32 %r3, %tid.x;\n"
    "  mad.lo.u32 %r4, %r1, %r2, %r3;\n  cvt.u64.u32 %rd7, %r4;\n"
    "  setp.ge.u64 %p1, %rd7, %rd5;\n  @%p1 bra $DONE;\n"
    "  shl.b64 %rd8, %rd7, 4;\n  add.u64 %rd1, %rd1, %rd8;\n  add.u64 %rd3, %rd3, %rd8;\n"
    /* first row = ctaid.y * ntid.y + tid.y, then every nctaid.y * ntid.y rows */
    "  mov.u32 %r5, %ctaid.y;\n  mov.u32 %r6, %ntid.y;\n  mov.u32 %r7, %tid.y;\n"
    "  mad.lo.u32 %r8, %r5, %r6, %r7;\n  cvt.u64.u32 %rd9, %r8;\n"
    "  mov.u32 %r9, %nctaid.y;\n  mul.lo.u32 %r10, %r9, %r6;\n  cvt.u64.u32 %rd10, %r10;\n"
    "$LOOP:\n"
    "  setp.ge.u64 %p2, %rd9, %rd6;\n  @%p2 bra $DONE;\n"
    "  mad.lo.u64 %rd11, %rd9, %rd4, %rd3;\n"
    "  ld.global.nc.v4.u32 {%r11, %r12, %r13, %r14}, [%rd11];\n"
    "  mad.lo.u64 %rd12, %rd9, %rd2, %rd1;\n"
    "  st.global.v4.u32 [%rd12], {%r11, %r12, %r13, %r14};\n"
    "  add.u64 %rd9, %rd9, %rd10;\n  bra.uni $LOOP;\n"
    "$DONE:\n  ret;\n}\n";

static dit_status_t cu_check(cuda_state_t *st, CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return DIT_OK;
  const char *name = "?", *msg = "?";
  st->cu.cuGetErrorName(r, &name);
  st->cu.cuGetErrorString(r, &msg);
  return dit_status_make(r == CUDA_ERROR_OUT_OF_MEMORY ? DIT_CODE_RESOURCE_EXHAUSTED : DIT_CODE_INTERNAL, "%s: %s (%s)", what,
                         name, msg);
}

static const char *lt_status_name(cublasStatus_t r) {
  switch (r) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
  }
}

/* `what` names the cuBLASLt API (and the attribute, where one is set). */
static dit_status_t lt_check(cublasStatus_t r, const char *what) {
  if (r == CUBLAS_STATUS_SUCCESS) return DIT_OK;
  const dit_code_t code = r == CUBLAS_STATUS_ALLOC_FAILED    ? DIT_CODE_RESOURCE_EXHAUSTED
                          : r == CUBLAS_STATUS_NOT_SUPPORTED ? DIT_CODE_UNIMPLEMENTED
                                                             : DIT_CODE_INTERNAL;
  return dit_status_make(code, "%s: %s (%d)", what, lt_status_name(r), (int)r);
}

/* Ranks of one process run on threads of their own: every entry point makes the rank's
 * context current on the calling thread first (a thread-local pointer; cheap). */
static void bind(cuda_state_t *st) {
  if (st->ctx) st->cu.cuCtxSetCurrent(st->ctx);
}

/* Destroys what a GEMM's setup created, on its error paths and at teardown (a failure to
 * destroy leaves nothing to undo, so their statuses are not reported). */
static void gemm_release(cuda_state_t *st, gemm_t *g) {
  if (g->desc) st->lt.desc_destroy(g->desc);
  if (g->a) st->lt.layout_destroy(g->a);
  if (g->b) st->lt.layout_destroy(g->b);
  if (g->c) st->lt.layout_destroy(g->c);
  memset(g, 0, sizeof *g);
}

static void cuda_destroy(void *p) {
  cuda_state_t *st = p;
  if (!st) return;
  if (st->ctx) {
    st->cu.cuCtxSetCurrent(st->ctx);
    for (size_t i = 0; st->gemms && i < st->n_steps; i++) gemm_release(st, &st->gemms[i]);
    for (int i = 0; i <= GEMM_REPS; i++)
      if (st->tune_ev[i]) st->cu.cuEventDestroy(st->tune_ev[i]);
    if (st->graph_exec) st->cu.cuGraphExecDestroy(st->graph_exec);
    if (st->graph) st->cu.cuGraphDestroy(st->graph);
    for (size_t i = 0; i < st->n_mods; i++) st->cu.cuModuleUnload(st->mods[i].mod);
    if (st->workspace) st->cu.cuMemFree(st->workspace);
    if (st->lt_handle) st->lt.destroy(st->lt_handle);
    if (st->stream) st->cu.cuStreamDestroy(st->stream);
    if (st->copy_stream) st->cu.cuStreamDestroy(st->copy_stream);
    if (st->coll_stream) st->cu.cuStreamDestroy(st->coll_stream);
    for (int i = 0; i < DIT_BACKEND_MAX_EVENTS; i++)
      if (st->events[i]) st->cu.cuEventDestroy(st->events[i]);
    if (st->ext_ev) st->cu.cuEventDestroy(st->ext_ev);
    if (st->copy_mod) st->cu.cuModuleUnload(st->copy_mod);
    if (st->probe_mod) st->cu.cuModuleUnload(st->probe_mod);
    if (st->probe_sums) st->cu.cuMemFree(st->probe_sums);
    if (st->registered) st->cu.cuMemHostUnregister(st->registered);
    if (st->pinned_copy) st->cu.cuMemFreeHost(st->pinned_copy);
    st->cu.cuDevicePrimaryCtxRelease(st->dev);
  }
  free(st->gemms);
  free(st->group_len);
  free(st->choices);
  free(st->funcs);
  free(st->tmaps);
  free(st->tmap_at);
  free(st->mods);
  if (st->lt.lib) dlclose(st->lt.lib);
  if (st->cu.lib) dlclose(st->cu.lib);
  free(st);
}

static dit_status_t cuda_create(const dit_backend_config_t *cfg, void **out) {
  cuda_state_t *st = calloc(1, sizeof *st);
  if (!st) return DIT_ERR(RESOURCE_EXHAUSTED, "cuda backend: out of memory");
  dit_status_t s = load_cu(&st->cu);
  if (!s) s = cu_check(st, st->cu.cuInit(0), "cuInit");
  int ndev = 0, drv = 0;
  if (!s) s = cu_check(st, st->cu.cuDeviceGetCount(&ndev), "cuDeviceGetCount");
  if (!s && (cfg->device < 0 || cfg->device >= ndev))
    s = DIT_ERR(UNAVAILABLE, "CUDA device %d requested, %d present", cfg->device, ndev);
  if (!s) s = cu_check(st, st->cu.cuDriverGetVersion(&drv), "cuDriverGetVersion");
  if (!s && drv < cfg->min_driver)
    s = DIT_ERR(FAILED_PRECONDITION, "manifest.json: field 'target.min_driver': the bundle needs CUDA driver API %lld, this driver provides %d",
                (long long)cfg->min_driver, drv);
  if (!s) s = cu_check(st, st->cu.cuDeviceGet(&st->dev, cfg->device), "cuDeviceGet");
  if (!s) s = cu_check(st, st->cu.cuDeviceGetAttribute(&st->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, st->dev), "cuDeviceGetAttribute");
  if (!s) s = cu_check(st, st->cu.cuDeviceGetAttribute(&st->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, st->dev), "cuDeviceGetAttribute");
  if (!s && cfg->arch && !strncmp(cfg->arch, "sm_", 3)) {
    int want = atoi(cfg->arch + 3), have = st->cc_major * 10 + st->cc_minor;
    if (have < want)
      s = DIT_ERR(FAILED_PRECONDITION, "manifest.json: field 'target.arch' = \"%s\": device %d is sm_%d", cfg->arch, cfg->device, have);
  }
  if (!s) s = cu_check(st, st->cu.cuDevicePrimaryCtxRetain(&st->ctx, st->dev), "cuDevicePrimaryCtxRetain");
  if (!s) s = cu_check(st, st->cu.cuCtxSetCurrent(st->ctx), "cuCtxSetCurrent");
  if (!s) s = cu_check(st, st->cu.cuStreamCreate(&st->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  /* DIT_CUDA_COPY=engines: device copies on the copy engines (cuMemcpy2DAsync), to compare. */
  const char *ce = getenv("DIT_CUDA_COPY");
  if (!s && !(ce && !strcmp(ce, "engines"))) s = cu_check(st, st->cu.cuModuleLoadData(&st->copy_mod, kCopyPtx), "cuModuleLoadData (copy kernel)");
  if (!s && st->copy_mod) s = cu_check(st, st->cu.cuModuleGetFunction(&st->copy_fn, st->copy_mod, "dit_copy2d"), "cuModuleGetFunction (copy kernel)");
  if (s) {
    cuda_destroy(st);
    return s;
  }
  *out = st;
  return DIT_OK;
}

static dit_status_t cuda_alloc(void *p, size_t bytes, const char *what, void **out) {
  cuda_state_t *st = p;
  bind(st);
  CUdeviceptr d = 0;
  CUresult r = st->cu.cuMemAlloc(&d, bytes ? bytes : 1);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t fr = 0, tot = 0;
    st->cu.cuMemGetInfo(&fr, &tot);
    return DIT_ERR(RESOURCE_EXHAUSTED, "device out of memory allocating %.2f MiB for %s (%.2f MiB free of %.2f MiB)",
                   (double)bytes / (1 << 20), what, (double)fr / (1 << 20), (double)tot / (1 << 20));
  }
  DIT_RETURN_IF_ERROR(cu_check(st, r, "cuMemAlloc"), "allocating %s", what);
  st->allocated += bytes ? bytes : 1;
  *out = (void *)(uintptr_t)d;
  return DIT_OK;
}

static uint64_t cuda_allocated_bytes(void *p) { return ((cuda_state_t *)p)->allocated; }

static void cuda_release(void *p, void *ptr) {
  cuda_state_t *st = p;
  bind(st);
  if (ptr) st->cu.cuMemFree((CUdeviceptr)(uintptr_t)ptr);
}

/* Uploads and downloads go through the compute stream and wait for it: the stream is
 * non-blocking, so a copy on the legacy stream would not be ordered with its kernels (a
 * pageable upload may still be in flight when cuMemcpyHtoD returns). */
/* A large upload (a bundle's weights, from a fresh mapping of the file) goes through page-locked
 * staging buffers: threads copy each chunk of the pageable source into one of UPLOAD_BUFS
 * buffers (taking the source's page faults in parallel) while the copy engine moves the ones
 * before it, rather than the driver's pageable path, one thread through its own small buffer. */
#define UPLOAD_CHUNK ((size_t)32 << 20)
#define UPLOAD_BUFS 4
#define UPLOAD_THREADS 8

typedef struct upload_part {
  char *dst;
  const char *src;
} upload_part_t;

static void upload_copy(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const upload_part_t *u = ctx;
  memcpy(u->dst + begin, u->src + begin, (size_t)(end - begin));
}

/* 0 when the staging buffers cannot be had (the caller takes the plain path). */
static int upload_staged(cuda_state_t *st, void *dst, const void *src, size_t bytes, dit_status_t *s) {
  void *buf[UPLOAD_BUFS] = {0};
  CUevent done[UPLOAD_BUFS] = {0};
  dit_pool_t *pool = NULL;
  int ok = !dit_pool_create(UPLOAD_THREADS, &pool);
  for (int i = 0; ok && i < UPLOAD_BUFS; i++)
    ok = st->cu.cuMemHostAlloc(&buf[i], UPLOAD_CHUNK, 0) == CUDA_SUCCESS &&
         st->cu.cuEventCreate(&done[i], CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
  *s = DIT_OK;
  for (size_t off = 0, k = 0; ok && !*s && off < bytes; k++) {
    const size_t n = bytes - off < UPLOAD_CHUNK ? bytes - off : UPLOAD_CHUNK, i = k % UPLOAD_BUFS;
    if (k >= UPLOAD_BUFS) *s = cu_check(st, st->cu.cuEventSynchronize(done[i]), "cuEventSynchronize (upload)");
    upload_part_t u = {buf[i], (const char *)src + off};
    if (!*s) dit_pool_parallel_for(pool, (int64_t)n, (int64_t)1 << 20, upload_copy, &u);
    if (!*s) *s = cu_check(st, st->cu.cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst + off, buf[i], n, st->stream), "cuMemcpyHtoDAsync");
    if (!*s) *s = cu_check(st, st->cu.cuEventRecord(done[i], st->stream), "cuEventRecord (upload)");
    off += n;
  }
  if (ok) {
    dit_status_t e = cu_check(st, st->cu.cuStreamSynchronize(st->stream), "cuStreamSynchronize (upload)");
    if (!*s) *s = e;
    else dit_status_free(e);
  }
  for (int i = 0; i < UPLOAD_BUFS; i++) {
    if (buf[i]) st->cu.cuMemFreeHost(buf[i]);
    if (done[i]) st->cu.cuEventDestroy(done[i]);
  }
  dit_pool_destroy(pool);
  return ok;
}

static dit_status_t cuda_upload(void *p, void *dst, const void *src, size_t bytes) {
  cuda_state_t *st = p;
  bind(st);
  dit_status_t s = DIT_OK;
  if (bytes >= 2 * UPLOAD_CHUNK && upload_staged(st, dst, src, bytes, &s)) return s;
  DIT_RETURN_IF(cu_check(st, st->cu.cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, bytes, st->stream), "cuMemcpyHtoDAsync"));
  return cu_check(st, st->cu.cuStreamSynchronize(st->stream), "cuStreamSynchronize (upload)");
}

static dit_status_t cuda_zero(void *p, void *dst, size_t bytes) {
  cuda_state_t *st = p;
  bind(st);
  return cu_check(st, st->cu.cuMemsetD8Async((CUdeviceptr)(uintptr_t)dst, 0, bytes, st->stream), "cuMemsetD8Async");
}

static dit_status_t cuda_download(void *p, void *dst, const void *src, size_t bytes) {
  cuda_state_t *st = p;
  bind(st);
  DIT_RETURN_IF(cu_check(st, st->cu.cuStreamSynchronize(st->stream), "cuStreamSynchronize"));
  return cu_check(st, st->cu.cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, bytes), "cuMemcpyDtoH");
}

static dit_status_t queue_stream(cuda_state_t *st, int queue, CUstream *out);

static dit_status_t cuda_copy2d(void *p, int queue, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                size_t height) {
  cuda_state_t *st = p;
  bind(st);
  CUstream q = NULL;
  DIT_RETURN_IF(queue_stream(st, queue, &q));
  if (!width || !height) return DIT_OK;
  if (st->copy_fn && !(((uintptr_t)dst | (uintptr_t)src | dpitch | spitch | width) & 15)) {
    unsigned long long w16 = width / 16, rows = height;
    void *args[] = {&dst, &dpitch, &src, &spitch, &w16, &rows};
    const unsigned tx = w16 >= 256 ? 256 : (unsigned)((w16 + 31) / 32 * 32), ty = 256 / tx;
    const unsigned long long gy = (rows + ty - 1) / ty;
    return cu_check(st, st->cu.cuLaunchKernel(st->copy_fn, (unsigned)((w16 + tx - 1) / tx), gy > 65535 ? 65535 : (unsigned)gy, 1, tx, ty,
                                              1, 0, q, args, NULL),
                    "cuLaunchKernel (copy)");
  }
  if (height == 1) /* no pitch limits on a plain copy */
    return cu_check(st, st->cu.cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, width, q),
                    "cuMemcpyDtoDAsync");
  CUDA_MEMCPY2D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = (CUdeviceptr)(uintptr_t)src;
  c.srcPitch = spitch;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = (CUdeviceptr)(uintptr_t)dst;
  c.dstPitch = dpitch;
  c.WidthInBytes = width;
  c.Height = height;
  return cu_check(st, st->cu.cuMemcpy2DAsync(&c, q), "cuMemcpy2DAsync");
}

/* The probe module's kernels and their sums buffer, zeroed on the compute stream. */
static dit_status_t probe_ready(cuda_state_t *st) {
  if (!st->probe_mod) {
    DIT_RETURN_IF(cu_check(st, st->cu.cuModuleLoadData(&st->probe_mod, kProbePtx), "cuModuleLoadData (probe kernel)"));
    DIT_RETURN_IF(cu_check(st, st->cu.cuModuleGetFunction(&st->probe_fn, st->probe_mod, "dit_probe_change"),
                           "cuModuleGetFunction (probe kernel)"));
    DIT_RETURN_IF(cu_check(st, st->cu.cuModuleGetFunction(&st->stats_fn, st->probe_mod, "dit_sum_sq_diff"),
                           "cuModuleGetFunction (statistics kernel)"));
    DIT_RETURN_IF(cu_check(st, st->cu.cuModuleGetFunction(&st->fill_fn, st->probe_mod, "dit_fill_bf16"), "cuModuleGetFunction (fill kernel)"));
  }
  if (!st->probe_sums) DIT_RETURN_IF(cu_check(st, st->cu.cuMemAlloc(&st->probe_sums, 2 * sizeof(double)), "cuMemAlloc (probe sums)"));
  static const double zero[2] = {0, 0};
  return cu_check(st, st->cu.cuMemcpyHtoDAsync(st->probe_sums, zero, sizeof zero, st->stream), "cuMemcpyHtoDAsync (probe sums)");
}

/* Launches a probe-module kernel over n elements (enough warps to fill the device several times
 * over; each thread loops over the rest) and brings its two sums back. */
static dit_status_t probe_launch(cuda_state_t *st, CUfunction fn, void **args, size_t n, const char *what, double sums[2]) {
  const unsigned long long blocks = (n + 255) / 256;
  DIT_RETURN_IF_ERROR(cu_check(st, st->cu.cuLaunchKernel(fn, blocks > 2048 ? 2048 : blocks ? (unsigned)blocks : 1, 1, 1, 256, 1, 1, 0,
                                                         st->stream, args, NULL), "cuLaunchKernel"), "%s", what);
  DIT_RETURN_IF_ERROR(cu_check(st, st->cu.cuStreamSynchronize(st->stream), "cuStreamSynchronize"), "%s", what);
  return dit_status_annotate(cu_check(st, st->cu.cuMemcpyDtoH(sums, st->probe_sums, 2 * sizeof(double)), "cuMemcpyDtoH"), "%s", what);
}

/* n bf16 values of hashed random bits at x, on the compute stream (dit_fill_bf16). */
static dit_status_t fill_random_bf16(cuda_state_t *st, void *x, size_t n) {
  DIT_RETURN_IF(probe_ready(st));
  unsigned long long nn = n;
  void *args[] = {&x, &nn};
  const unsigned long long blocks = (n + 255) / 256;
  return cu_check(st, st->cu.cuLaunchKernel(st->fill_fn, blocks > 2048 ? 2048 : blocks ? (unsigned)blocks : 1, 1, 1, 256, 1, 1, 0, st->stream,
                                            args, NULL),
                  "cuLaunchKernel (fill)");
}

static unsigned dtype_code(dit_dtype_t dt) { return dt == DIT_F32 ? 0 : dt == DIT_BF16 ? 1 : dt == DIT_F16 ? 2 : 3; }

static dit_status_t cuda_probe_change(void *p, const void *x, const void *base, void *prev, dit_dtype_t dt, size_t n,
                                      int update_prev, double sums[2]) {
  cuda_state_t *st = p;
  bind(st);
  const unsigned code = dtype_code(dt);
  if (code == 3) return DIT_ERR(INVALID_ARGUMENT, "probe: expected a value of dtype f32, bf16 or f16, found %s", dit_dtype_name(dt));
  DIT_RETURN_IF(probe_ready(st));
  unsigned long long nn = n;
  unsigned upd = update_prev != 0;
  void *args[] = {&x, &base, &prev, &st->probe_sums, &nn, (void *)&code, &upd};
  return probe_launch(st, st->probe_fn, args, n, "probe", sums);
}

static dit_status_t cuda_sum_sq_diff(void *p, const void *x, dit_dtype_t dt, void *ref, dit_dtype_t ref_dt, size_t n, int update_ref,
                                     double sums[2]) {
  cuda_state_t *st = p;
  bind(st);
  const unsigned code = dtype_code(dt), rcode = ref ? dtype_code(ref_dt) : 0;
  if (code == 3) return DIT_ERR(INVALID_ARGUMENT, "sum_sq_diff: expected x of dtype f32, bf16 or f16, found %s", dit_dtype_name(dt));
  if (ref && ref_dt != DIT_F32 && ref_dt != dt)
    return DIT_ERR(INVALID_ARGUMENT, "sum_sq_diff: expected a reference of dtype f32 or %s (x's), found %s", dit_dtype_name(dt),
                   dit_dtype_name(ref_dt));
  DIT_RETURN_IF(probe_ready(st));
  unsigned long long nn = n;
  unsigned upd = ref && update_ref;
  void *args[] = {&x, &ref, &st->probe_sums, &nn, (void *)&code, (void *)&rcode, &upd};
  return probe_launch(st, st->stats_fn, args, n, "reuse statistics", sums);
}

static dit_status_t cuda_sync(void *p) {
  cuda_state_t *st = p;
  bind(st);
  if (st->copy_stream) DIT_RETURN_IF(cu_check(st, st->cu.cuStreamSynchronize(st->copy_stream), "cuStreamSynchronize (weight copies)"));
  if (st->coll_stream) DIT_RETURN_IF(cu_check(st, st->cu.cuStreamSynchronize(st->coll_stream), "cuStreamSynchronize (collectives)"));
  return cu_check(st, st->cu.cuStreamSynchronize(st->stream), "cuStreamSynchronize (a kernel or GEMM of this forward failed)");
}

/* ---- the copy and collective queues: more streams, and events between them ---- */

static dit_status_t copy_stream(cuda_state_t *st, CUstream *out) {
  if (!st->copy_stream) DIT_RETURN_IF(cu_check(st, st->cu.cuStreamCreate(&st->copy_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate (copies)"));
  *out = st->copy_stream;
  return DIT_OK;
}

/* Queue 0 is the compute stream, 1 the copy stream, 2 the collective stream. */
static dit_status_t queue_stream(cuda_state_t *st, int queue, CUstream *out) {
  if (queue == 0) *out = st->stream;
  else if (queue == 1) return copy_stream(st, out);
  else if (queue == 2) {
    if (!st->coll_stream)
      DIT_RETURN_IF(cu_check(st, st->cu.cuStreamCreate(&st->coll_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate (collectives)"));
    *out = st->coll_stream;
  } else {
    return DIT_ERR(INVALID_ARGUMENT, "cuda backend: no queue %d", queue);
  }
  return DIT_OK;
}

static dit_status_t cuda_copy_enqueue(void *p, void *dst, const void *src, size_t bytes, int src_on_device) {
  cuda_state_t *st = p;
  bind(st);
  CUstream cs;
  DIT_RETURN_IF(copy_stream(st, &cs));
  if (src_on_device)
    return cu_check(st, st->cu.cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes, cs), "cuMemcpyDtoDAsync");
  return cu_check(st, st->cu.cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, bytes, cs), "cuMemcpyHtoDAsync");
}

static dit_status_t queue_event(cuda_state_t *st, int queue, int ev, CUstream *s, CUevent *e) {
  if (ev < 0 || ev >= DIT_BACKEND_MAX_EVENTS || queue < 0 || queue > 2)
    return DIT_ERR(INVALID_ARGUMENT, "cuda backend: event %d on queue %d", ev, queue);
  if (!st->events[ev])
    DIT_RETURN_IF(cu_check(st, st->cu.cuEventCreate(&st->events[ev], ev >= DIT_BACKEND_TIMED_EVENTS ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING),
                           "cuEventCreate"));
  *e = st->events[ev];
  return queue_stream(st, queue, s);
}

static dit_status_t cuda_mark(void *p, int queue, int ev) {
  cuda_state_t *st = p;
  bind(st);
  CUstream s = NULL;
  CUevent e = NULL;
  DIT_RETURN_IF(queue_event(st, queue, ev, &s, &e));
  return cu_check(st, st->cu.cuEventRecord(e, s), "cuEventRecord");
}

static dit_status_t cuda_wait(void *p, int queue, int ev) {
  cuda_state_t *st = p;
  bind(st);
  CUstream s = NULL;
  CUevent e = NULL;
  DIT_RETURN_IF(queue_event(st, queue, ev, &s, &e));
  return cu_check(st, st->cu.cuStreamWaitEvent(s, e, 0), "cuStreamWaitEvent");
}

static dit_status_t cuda_elapsed_ms(void *p, int a, int b, double *ms) {
  cuda_state_t *st = p;
  bind(st);
  if (a < DIT_BACKEND_TIMED_EVENTS || b < DIT_BACKEND_TIMED_EVENTS || a >= DIT_BACKEND_MAX_EVENTS || b >= DIT_BACKEND_MAX_EVENTS ||
      !st->events[a] || !st->events[b])
    return DIT_ERR(INVALID_ARGUMENT, "cuda backend: events %d and %d are not recorded timing events", a, b);
  float f = 0;
  DIT_RETURN_IF(cu_check(st, st->cu.cuEventElapsedTime(&f, st->events[a], st->events[b]), "cuEventElapsedTime"));
  *ms = f;
  return DIT_OK;
}

/* The weight blob is a read-only file mapping, copied once into page-locked memory (2.7 GiB
 * in about 1.5 s on an H200 host). Registering the mapping in place saves that memory but can
 * take minutes (every page of the file faulted in and pinned): DIT_CUDA_PIN=register asks for
 * it, and the copy stays the fallback. */
static dit_status_t cuda_pin_host(void *p, const void *ptr, size_t bytes, const void **pinned) {
  cuda_state_t *st = p;
  bind(st);
  if (st->registered || st->pinned_copy) {
    if (ptr != st->pinned_src) return DIT_ERR(FAILED_PRECONDITION, "cuda backend: one host region per rank can be pinned");
    *pinned = st->registered ? st->registered : st->pinned_copy;
    return DIT_OK;
  }
  st->pinned_src = ptr;
  const char *how = getenv("DIT_CUDA_PIN");
  if (how && !strcmp(how, "register") && st->cu.cuMemHostRegister((void *)ptr, bytes, CU_MEMHOSTREGISTER_READ_ONLY) == CUDA_SUCCESS) {
    st->registered = (void *)ptr;
    *pinned = ptr;
    return DIT_OK;
  }
  DIT_RETURN_IF_ERROR(cu_check(st, st->cu.cuMemHostAlloc(&st->pinned_copy, bytes ? bytes : 1, 0), "cuMemHostAlloc"),
                      "page-locking %.2f MiB of weights", (double)bytes / (1 << 20));
  memcpy(st->pinned_copy, ptr, bytes);
  *pinned = st->pinned_copy;
  return DIT_OK;
}

static dit_status_t cuda_memory_info(void *p, size_t *fr, size_t *tot) {
  cuda_state_t *st = p;
  bind(st);
  return cu_check(st, st->cu.cuMemGetInfo(fr, tot), "cuMemGetInfo");
}

/* One module image from the bundle: cuModuleLoadData wants a NUL-terminated image for PTX and an
 * aligned one for cubin, so the mapped blob is copied first. */
static dit_status_t load_module(cuda_state_t *st, dit_blob_loader_fn load, void *ctx, const char *hash, const char *what,
                                CUmodule *out) {
  dit_mapping_t m;
  DIT_RETURN_IF(load(ctx, hash, &m));
  char *img = malloc(m.size + 1);
  if (!img) {
    dit_file_unmap(&m);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(img, m.data, m.size);
  img[m.size] = 0;
  dit_file_unmap(&m);
  dit_status_t s = cu_check(st, st->cu.cuModuleLoadData(out, img), what);
  free(img);
  return s;
}

static dit_status_t get_module(cuda_state_t *st, const dit_plan_kernel_t *k, dit_blob_loader_fn load, void *ctx, CUmodule *out) {
  /* The cubin runs on exactly its architecture; newer devices JIT the PTX. */
  char arch_hash[DIT_HASH_HEX];
  memcpy(arch_hash, k->cubin, DIT_HASH_HEX);
  for (size_t i = 0; i < st->n_mods; i++)
    if (!strcmp(st->mods[i].hash, arch_hash)) {
      *out = st->mods[i].mod;
      return DIT_OK;
    }
  CUmodule mod;
  dit_status_t s = load_module(st, load, ctx, k->cubin, "cuModuleLoadData", &mod);
  if (s && k->ptx[0]) {
    dit_status_free(s);
    s = load_module(st, load, ctx, k->ptx, "cuModuleLoadData (PTX)", &mod);
  }
  DIT_RETURN_IF_ERROR(s, "kernel module %s", k->cubin);
  loaded_module_t *n = realloc(st->mods, (st->n_mods + 1) * sizeof *n);
  if (!n) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  st->mods = n;
  memcpy(st->mods[st->n_mods].hash, arch_hash, DIT_HASH_HEX);
  st->mods[st->n_mods++].mod = mod;
  *out = mod;
  return DIT_OK;
}

static cudaDataType_t lt_type(dit_dtype_t t) { return t == DIT_BF16 ? CUDA_R_16BF : t == DIT_F8E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_32F; }

/* cuBLASLt's outer-vector scaling of fp8 products (one fp32 scale per row of A, one per column
 * of B) arrived in cuBLAS 12.9. */
#define DIT_LT_OUTER_VEC (CUBLAS_VERSION >= 120900)

static uint32_t ptr_align(const void *p) {
  const uintptr_t u = (uintptr_t)p;
  return u ? (uint32_t)(u & (~u + 1)) : 256u;
}

static int gemm_key_eq(const gemm_key_t *a, const gemm_key_t *b) {
  return a->m == b->m && a->n == b->n && a->k == b->k && a->tx == b->tx && a->tw == b->tw && a->ty == b->ty && a->tbias == b->tbias &&
         a->epilogue == b->epilogue && a->align == b->align && a->batch == b->batch;
}

/* Describes Y = X W^T (+ bias, GELU) to cuBLASLt in g; on failure releases what it made.
 * CUBLAS_COMPUTE_32F is strict fp32: fp32 operands multiply in full fp32 (TF32 would take
 * CUBLAS_COMPUTE_32F_FAST_TF32), bf16 and e4m3 operands accumulate in fp32. With w_scale and
 * x_scale (e4m3 operands) each product sum is scaled by w_scale[n] * x_scale[m] before the
 * epilogue. */
static dit_status_t gemm_describe(cuda_state_t *st, const dit_tensor_t *x, const dit_tensor_t *w, const dit_tensor_t *bias,
                                  const dit_tensor_t *y, cublasLtEpilogue_t ep, int64_t M, int64_t N, int64_t K, const void *w_scale,
                                  const void *x_scale, const dit_linear_batch_t *batch, gemm_t *g) {
  memset(g, 0, sizeof *g);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  dit_status_t s = lt_check(st->lt.desc_create(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  if (!s) s = lt_check(st->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "cublasLtMatmulDescSetAttribute(TRANSA)");
  if (!s) s = lt_check(st->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "cublasLtMatmulDescSetAttribute(TRANSB)");
  if (!s && ep != CUBLASLT_EPILOGUE_DEFAULT)
    s = lt_check(st->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep), "cublasLtMatmulDescSetAttribute(EPILOGUE)");
  if (!s && bias) {
    const void *bp = bias->data;
    g->bias_at = bp;
    const cudaDataType_t bt = lt_type(bias->dtype);
    s = lt_check(st->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp), "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
    if (!s)
      s = lt_check(st->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
                   "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
  }
  if (!s && w_scale) {
#if DIT_LT_OUTER_VEC
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    g->a_scale_at = w_scale;
    g->b_scale_at = x_scale;
    s = lt_check(st->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode), "cublasLtMatmulDescSetAttribute(A_SCALE_MODE)");
    if (!s) s = lt_check(st->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode), "cublasLtMatmulDescSetAttribute(B_SCALE_MODE)");
    if (!s) s = lt_check(st->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale), "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)");
    if (!s) s = lt_check(st->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof x_scale), "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)");
    /* Fast accumulation (no periodic promotion of the tensor cores' partial sums): measured 1.1 to
     * 1.3x on Wan2.1-1.3B's linear shapes with outer-vector scales (bench/gemm_fp8.py), within the
     * fp8 mode's own error. */
    const int8_t fast = 1;
    if (!s) s = lt_check(st->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast), "cublasLtMatmulDescSetAttribute(FAST_ACCUM)");
#else
    (void)x_scale;
    s = DIT_ERR(UNIMPLEMENTED, "linear_fp8: this ditrun was built against cuBLAS %d, before outer-vector fp8 scaling (12.9)", CUBLAS_VERSION);
#endif
  }
  if (!s) s = lt_check(st->lt.layout_create(&g->a, lt_type(w->dtype), (uint64_t)K, (uint64_t)N, K), "cublasLtMatrixLayoutCreate(A = W)");
  if (!s) s = lt_check(st->lt.layout_create(&g->b, lt_type(x->dtype), (uint64_t)K, (uint64_t)M, K), "cublasLtMatrixLayoutCreate(B = X)");
  if (!s) s = lt_check(st->lt.layout_create(&g->c, lt_type(y->dtype), (uint64_t)N, (uint64_t)M, N), "cublasLtMatrixLayoutCreate(C = Y)");
  if (!s && batch && batch->count > 1) {
    /* Every product reads the same X: its batch stride stays 0. */
    const int32_t count = batch->count;
    const cublasLtMatrixLayout_t lays[3] = {g->a, g->b, g->c};
    const int64_t strides[3] = {batch->w_stride, 0, batch->y_stride};
    for (int i = 0; !s && i < 3; i++) {
      s = lt_check(st->lt.layout_set(lays[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                   "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
      if (!s)
        s = lt_check(st->lt.layout_set(lays[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i], sizeof strides[i]),
                     "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
    }
    if (!s && bias)
      s = lt_check(st->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &batch->bias_stride, sizeof batch->bias_stride),
                   "cublasLtMatmulDescSetAttribute(BIAS_BATCH_STRIDE)");
  }
  if (s) gemm_release(st, g);
  return s;
}

/* Up to `want` heuristic candidates that fit the workspace, best first, into res. */
static dit_status_t gemm_candidates(cuda_state_t *st, const gemm_t *g, uint32_t align, int want, cublasLtMatmulHeuristicResult_t *res,
                                    int *out_n) {
  *out_n = 0;
  cublasLtMatmulPreference_t pref = NULL;
  DIT_RETURN_IF(lt_check(st->lt.pref_create(&pref), "cublasLtMatmulPreferenceCreate"));
  const uint64_t ws = st->workspace_size;
  dit_status_t s = lt_check(st->lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                            "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  /* Only algorithms that work at the operands' actual alignment (cuBLASLt assumes 256 bytes). */
  static const cublasLtMatmulPreferenceAttributes_t aligns[] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (size_t i = 0; !s && i < sizeof aligns / sizeof aligns[0]; i++)
    s = lt_check(st->lt.pref_set(pref, aligns[i], &align, sizeof align), "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
  int found = 0;
  if (!s) {
    /* NOT_SUPPORTED: no algorithm for this configuration, which the caller reports with the shape. */
    const cublasStatus_t r = st->lt.heuristic(st->lt_handle, g->desc, g->a, g->b, g->c, g->c, pref, want, res, &found);
    if (r == CUBLAS_STATUS_NOT_SUPPORTED) found = 0;
    else s = lt_check(r, "cublasLtMatmulAlgoGetHeuristic");
  }
  st->lt.pref_destroy(pref);
  DIT_RETURN_IF(s);
  int n = 0;
  for (int i = 0; i < found && i < want; i++)
    if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= st->workspace_size) res[n++] = res[i];
  *out_n = n;
  return DIT_OK;
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* The milliseconds of device work a GEMM candidate runs before it is timed:
 * DIT_CUDA_GEMM_TUNE_MS (default 0: GEMM_WARM launches). Long enough, the device reaches the
 * clock a sustained forward holds under its power limit, where a candidate that draws more power
 * for its speed runs slower than it does from a cool start. */
static double gemm_tune_ms(void) {
  const char *v = getenv("DIT_CUDA_GEMM_TUNE_MS");
  const double ms = v && *v ? strtod(v, NULL) : 0;
  return ms > 0 && ms <= 10000 ? ms : 0;
}

/* One launch of algo on the GEMM's operands (y = w x, beta 0) on the compute stream. */
static cublasStatus_t gemm_launch(cuda_state_t *st, const gemm_t *g, const cublasLtMatmulAlgo_t *algo, const dit_tensor_t *x,
                                  const dit_tensor_t *w, const dit_tensor_t *y) {
  const float one = 1.f, zero = 0.f;
  return st->lt.matmul(st->lt_handle, g->desc, &one, w->data, g->a, x->data, g->b, &zero, y->data, g->c, y->data, g->c, algo,
                       (void *)(uintptr_t)st->workspace, st->workspace_size, (cudaStream_t)st->stream);
}

/* Median milliseconds of GEMM_REPS launches of algo on the GEMM's real operands, after
 * GEMM_WARM warm launches (or as many as fill gemm_tune_ms()); *ok = 0 when cuBLASLt refuses
 * the algorithm for these operands (the candidate is skipped). A device fault is an error: it
 * leaves the context unusable. */
static dit_status_t gemm_time(cuda_state_t *st, const gemm_t *g, const cublasLtMatmulAlgo_t *algo, const dit_tensor_t *x,
                              const dit_tensor_t *w, const dit_tensor_t *y, float *out_ms, int *ok) {
  *ok = 0;
  for (int i = 0; i <= GEMM_REPS; i++)
    if (!st->tune_ev[i]) DIT_RETURN_IF(cu_check(st, st->cu.cuEventCreate(&st->tune_ev[i], CU_EVENT_DEFAULT), "cuEventCreate (GEMM timing)"));
  long warm = GEMM_WARM;
  const double tune_ms = gemm_tune_ms();
  if (tune_ms > 0) { /* one launch timed, then as many as fill tune_ms */
    float one_ms = 0;
    DIT_RETURN_IF(cu_check(st, st->cu.cuEventRecord(st->tune_ev[0], st->stream), "cuEventRecord (GEMM timing)"));
    if (gemm_launch(st, g, algo, x, w, y) != CUBLAS_STATUS_SUCCESS)
      return cu_check(st, st->cu.cuStreamSynchronize(st->stream), "cuStreamSynchronize (GEMM timing)");
    DIT_RETURN_IF(cu_check(st, st->cu.cuEventRecord(st->tune_ev[1], st->stream), "cuEventRecord (GEMM timing)"));
    DIT_RETURN_IF(cu_check(st, st->cu.cuStreamSynchronize(st->stream), "cuStreamSynchronize (GEMM timing: a candidate failed on the device)"));
    DIT_RETURN_IF(cu_check(st, st->cu.cuEventElapsedTime(&one_ms, st->tune_ev[0], st->tune_ev[1]), "cuEventElapsedTime (GEMM timing)"));
    const double n = one_ms > 0 ? tune_ms / one_ms : GEMM_WARM;
    warm = n < GEMM_WARM ? GEMM_WARM : n > 100000 ? 100000 : (long)n;
  }
  for (long i = 0; i < warm + GEMM_REPS; i++) {
    const long timed = i - warm;
    if (timed >= 0) DIT_RETURN_IF(cu_check(st, st->cu.cuEventRecord(st->tune_ev[timed], st->stream), "cuEventRecord (GEMM timing)"));
    if (gemm_launch(st, g, algo, x, w, y) != CUBLAS_STATUS_SUCCESS) {
      /* Whatever was enqueued must finish before the next candidate is timed. */
      return cu_check(st, st->cu.cuStreamSynchronize(st->stream), "cuStreamSynchronize (GEMM timing)");
    }
  }
  DIT_RETURN_IF(cu_check(st, st->cu.cuEventRecord(st->tune_ev[GEMM_REPS], st->stream), "cuEventRecord (GEMM timing)"));
  DIT_RETURN_IF(cu_check(st, st->cu.cuStreamSynchronize(st->stream), "cuStreamSynchronize (GEMM timing: a candidate failed on the device)"));
  float ms[GEMM_REPS];
  for (int i = 0; i < GEMM_REPS; i++)
    DIT_RETURN_IF(cu_check(st, st->cu.cuEventElapsedTime(&ms[i], st->tune_ev[i], st->tune_ev[i + 1]), "cuEventElapsedTime (GEMM timing)"));
  qsort(ms, GEMM_REPS, sizeof ms[0], cmp_float);
  *out_ms = ms[GEMM_REPS / 2];
  *ok = 1;
  return DIT_OK;
}

static void algo_text(const cuda_state_t *st, const cublasLtMatmulAlgo_t *a, char *buf, size_t cap) {
  int32_t id = -1;
  uint32_t tile = 0, stages = 0, splitk = 0;
  if (!st->lt.algo_config_get || st->lt.algo_config_get(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, NULL) != CUBLAS_STATUS_SUCCESS) {
    snprintf(buf, cap, "(configuration not reported)");
    return;
  }
  st->lt.algo_config_get(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, NULL);
  st->lt.algo_config_get(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, NULL);
  st->lt.algo_config_get(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, NULL);
  snprintf(buf, cap, "algo %d tile %u stages %u splitk %u", (int)id, tile, stages, splitk);
}

/* The algorithm of one distinct GEMM: the heuristic's first, or (by default) the fastest of its
 * candidates timed on this GEMM's operands. */
static dit_status_t gemm_choose(cuda_state_t *st, const gemm_t *g, const gemm_key_t *key, const dit_tensor_t *x, const dit_tensor_t *w,
                                const dit_tensor_t *y, const char *what, cublasLtMatmulAlgo_t *out) {
  const char *mode = getenv("DIT_CUDA_GEMM"), *verbose = getenv("DIT_CUDA_GEMM_VERBOSE");
  const int tune = !(mode && !strcmp(mode, "heuristic")) && x->data && w->data && y->data;
  const int loud = verbose && *verbose && strcmp(verbose, "0");
  cublasLtMatmulHeuristicResult_t res[GEMM_CANDIDATES_MAX];
  const char *wide = getenv("DIT_CUDA_GEMM_CANDIDATES");
  long want = wide && *wide ? strtol(wide, NULL, 10) : GEMM_CANDIDATES;
  if (want < 1 || !tune) want = 1;
  if (want > GEMM_CANDIDATES_MAX) want = GEMM_CANDIDATES_MAX;
  int n = 0;
  DIT_RETURN_IF(gemm_candidates(st, g, key->align, (int)want, res, &n));
  if (n < 1)
    return DIT_ERR(UNIMPLEMENTED, "cuBLASLt has no algorithm for a %lldx%lldx%lld GEMM (%s x %s -> %s, %s bias, epilogue %d, %u-byte aligned%s)",
                   (long long)key->m, (long long)key->n, (long long)key->k, dit_dtype_name((dit_dtype_t)key->tx),
                   dit_dtype_name((dit_dtype_t)key->tw), dit_dtype_name((dit_dtype_t)key->ty),
                   key->tbias < 0 ? "no" : dit_dtype_name((dit_dtype_t)key->tbias), key->epilogue, key->align,
                   key->tx == DIT_F8E4M3 ? ", a scale per row and per column" : "");
  int best = 0;
  float best_ms = 0, first_ms = -1;
  if (tune && n > 1) {
    best = -1;
    for (int i = 0; i < n; i++) {
      float ms = 0;
      int ok = 0;
      DIT_RETURN_IF_ERROR(gemm_time(st, g, &res[i].algo, x, w, y, &ms, &ok), "timing cuBLASLt candidate %d of %d for %s", i, n, what);
      if (!ok) continue;
      if (i == 0) first_ms = ms;
      if (best < 0 || ms < best_ms) best = i, best_ms = ms;
    }
    if (best < 0)
      return DIT_ERR(UNIMPLEMENTED, "%s: cuBLASLt refused all %d heuristic candidates of a %lldx%lldx%lld GEMM", what, n, (long long)key->m,
                     (long long)key->n, (long long)key->k);
    /* Timing noise must not flip the choice from one load to the next (and with it the last
     * bits of the results): the heuristic's first stays unless another is clearly faster. */
    if (first_ms >= 0 && best != 0 && best_ms > first_ms * (1 - GEMM_MARGIN)) best = 0, best_ms = first_ms;
  }
  *out = res[best].algo;
  if (loud) {
    char txt[96];
    algo_text(st, out, txt, sizeof txt);
    if (tune && n > 1 && first_ms >= 0)
      fprintf(stderr, "cuda: gemm %lldx%lldx%lld (%s): candidate %d of %d (%s) %.4f ms median; the heuristic's first %.4f ms (%.2fx)\n",
              (long long)key->m, (long long)key->n, (long long)key->k, what, best, n, txt, best_ms, first_ms,
              best_ms > 0 ? first_ms / best_ms : 1.0);
    else if (tune && n > 1)
      fprintf(stderr, "cuda: gemm %lldx%lldx%lld (%s): candidate %d of %d (%s) %.4f ms median; the heuristic's first was refused\n",
              (long long)key->m, (long long)key->n, (long long)key->k, what, best, n, txt, best_ms);
    else
      fprintf(stderr, "cuda: gemm %lldx%lldx%lld (%s): the heuristic's first (%s), %s\n", (long long)key->m, (long long)key->n,
              (long long)key->k, what, txt, tune ? "the only candidate" : "untimed");
  }
  return DIT_OK;
}

/* Y[M,N] = X[M,K] W[N,K]^T (+ bias) seen column-major: Y^T (N x M) = W (K x N)^T X^T (K x M).
 * The algorithm comes from st->choices when an identical GEMM was set up before. */
static dit_status_t plan_gemm(cuda_state_t *st, const dit_tensor_t *x, const dit_tensor_t *w, const dit_tensor_t *bias,
                              const dit_tensor_t *y, int act, const void *w_scale, const void *x_scale, const dit_linear_batch_t *batch,
                              const char *what, gemm_t *g) {
  const int64_t K = x->dims[x->rank - 1], M = dit_tensor_numel(x) / K, N = w->dims[0];
  if (act && act != 1) return DIT_ERR(UNIMPLEMENTED, "linear: activation %d has no cuBLASLt epilogue", act);
  /* lt_type knows bf16, fp32 and (x and w of a scaled fp8 product) e4m3: anything else would be
   * described as fp32. */
  const dit_tensor_t *ops[4] = {x, w, y, bias};
  static const char *const op_names[4] = {"x", "w", "y", "bias"};
  for (int i = 0; i < 4; i++)
    if (ops[i] && ops[i]->dtype != DIT_BF16 && ops[i]->dtype != DIT_F32 && !(w_scale && i < 2 && ops[i]->dtype == DIT_F8E4M3))
      return DIT_ERR(UNIMPLEMENTED, "linear '%s': operand %s is %s; the cuBLASLt path takes bf16 or f32", what, op_names[i],
                     dit_dtype_name(ops[i]->dtype));
  /* cuBLASLt's GELU epilogue is the tanh approximation, as our gelu_tanh op. */
  const cublasLtEpilogue_t ep = bias ? (act ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                     : (act ? CUBLASLT_EPILOGUE_GELU : CUBLASLT_EPILOGUE_DEFAULT);
  uint32_t align = ptr_align(x->data);
  const uint32_t aw = ptr_align(w->data), ay = ptr_align(y->data);
  if (aw < align) align = aw;
  if (ay < align) align = ay;
  const int count = batch && batch->count > 1 ? batch->count : 1;
  if (count > 1) { /* every product's operands start at the first's alignment or a stride's, whichever is less */
    const uint32_t aws = ptr_align((const void *)(uintptr_t)(batch->w_stride * (int64_t)dit_dtype_size(w->dtype)));
    const uint32_t ays = ptr_align((const void *)(uintptr_t)(batch->y_stride * (int64_t)dit_dtype_size(y->dtype)));
    if (aws < align) align = aws;
    if (ays < align) align = ays;
  }
  if (align > 256) align = 256;
  const gemm_key_t key = {M, N, K, (int)x->dtype, (int)w->dtype, (int)y->dtype, bias ? (int)bias->dtype : -1, (int)ep, align, count};
  DIT_RETURN_IF(gemm_describe(st, x, w, bias, y, ep, M, N, K, w_scale, x_scale, batch, g));
  for (size_t i = 0; i < st->n_choices; i++)
    if (gemm_key_eq(&st->choices[i].key, &key)) {
      g->algo = st->choices[i].algo;
      return DIT_OK;
    }
  gemm_choice_t *more = realloc(st->choices, (st->n_choices + 1) * sizeof *more);
  dit_status_t s = more ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  if (more) st->choices = more;
  if (!s) s = gemm_choose(st, g, &key, x, w, y, what, &g->algo);
  if (s) {
    gemm_release(st, g);
    return s;
  }
  st->choices[st->n_choices].key = key;
  st->choices[st->n_choices++].algo = g->algo;
  return DIT_OK;
}

/* A step's pointer argument a: its outputs, then its inputs. */
static const dit_tensor_t *kernel_arg(const dit_plan_step_t *s, const dit_tensor_t *in, const dit_tensor_t *out, uint32_t a) {
  return a < (uint32_t)s->n_out ? &out[a] : &in[a - (uint32_t)s->n_out];
}

/* Encodes a plan tensor map over its argument: its 2-D row view [numel / last dim, last dim], or
 * with a box of the argument's rank its own dims, innermost first. */
static dit_status_t encode_tmap(cuda_state_t *st, size_t idx, int j, const dit_plan_tmap_t *m, const dit_tensor_t *t) {
  const size_t es = dit_dtype_size(t->dtype);
  CUtensorMapDataType dt;
  if (t->dtype == DIT_BF16) dt = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  else if (t->dtype == DIT_F16) dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  else if (t->dtype == DIT_F32) dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  else if (t->dtype == DIT_F8E4M3 || t->dtype == DIT_I8) dt = CU_TENSOR_MAP_DATA_TYPE_UINT8; /* fp8 attention's operands: bytes to the copy engine */
  else return DIT_ERR(UNIMPLEMENTED, "step %zu: tensor map %d over a %s tensor", idx, j, dit_dtype_name(t->dtype));
  const uint32_t rank = m->rank;
  if (rank < 2 || rank > DIT_PLAN_TMAP_MAX_RANK || (rank > 2 && (int)rank != t->rank))
    return DIT_ERR(INVALID_ARGUMENT, "step %zu: tensor map %d has a box of %u dims over a tensor of rank %d (expected 2 or %d)", idx, j, rank,
                   t->rank, t->rank);
  cuuint64_t dims[DIT_PLAN_TMAP_MAX_RANK], strides[DIT_PLAN_TMAP_MAX_RANK - 1];
  cuuint32_t box[DIT_PLAN_TMAP_MAX_RANK], estr[DIT_PLAN_TMAP_MAX_RANK];
  if (rank == 2) {
    const uint64_t inner = t->rank > 0 ? (uint64_t)t->dims[t->rank - 1] : 1, all = (uint64_t)dit_tensor_numel(t);
    dims[0] = inner, dims[1] = inner ? all / inner : 0;
  } else {
    for (uint32_t d = 0; d < rank; d++) dims[d] = (cuuint64_t)t->dims[t->rank - 1 - (int)d];
  }
  uint64_t stride = es;
  for (uint32_t d = 0; d < rank; d++) {
    if (d > 0) strides[d - 1] = stride;
    stride *= dims[d];
    box[d] = m->box[d], estr[d] = 1;
  }
  const CUtensorMapSwizzle sw = m->swizzle == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : m->swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                : m->swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B : CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMap *tm = &st->tmaps[idx * DIT_PLAN_MAX_TMAPS + (size_t)j];
  DIT_RETURN_IF_ERROR(cu_check(st, st->cu.cuTensorMapEncodeTiled(tm, dt, rank, t->data, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                                 sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                               "cuTensorMapEncodeTiled"),
                      "step %zu: tensor map %d over %u dims (innermost %llu) of a %s tensor, box [%u, %u, ...], swizzle %u", idx, j, rank,
                      (unsigned long long)dims[0], dit_dtype_name(t->dtype), box[0], box[1], m->swizzle);
  st->tmap_at[idx * DIT_PLAN_MAX_TMAPS + (size_t)j] = t->data;
  return DIT_OK;
}

/* Linear groups (passes/group.c) run as one strided-batched GEMM each when
 * DIT_CUDA_LINEAR_GROUPS=batched, else member by member (the default). */
static int groups_batched(void) {
  const char *v = getenv("DIT_CUDA_LINEAR_GROUPS");
  return v && !strcmp(v, "batched");
}

static dit_status_t cuda_prepare(void *p, const dit_plan_t *plan, const dit_tensor_t *bound, dit_blob_loader_fn load,
                                 void *ctx) {
  cuda_state_t *st = p;
  bind(st);
  st->n_steps = plan->n_steps;
  st->funcs = calloc(plan->n_steps + 1, sizeof *st->funcs);
  st->gemms = calloc(plan->n_steps + 1, sizeof *st->gemms);
  st->group_len = calloc(plan->n_steps + 1, sizeof *st->group_len);
  st->group_left = 0;
  st->tmaps = aligned_alloc(64, (plan->n_steps + 1) * DIT_PLAN_MAX_TMAPS * sizeof *st->tmaps);
  st->tmap_at = calloc((plan->n_steps + 1) * DIT_PLAN_MAX_TMAPS, sizeof *st->tmap_at);
  if (!st->funcs || !st->gemms || !st->group_len || !st->tmaps || !st->tmap_at) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  const int batched = groups_batched();
  /* DIT_CUDA_GEMM_TUNE_DATA=random: a GEMM whose x is an activation (arena memory, which holds
   * nothing yet at load) has it filled with random bf16 values before its candidates are timed,
   * which then draw the power real operands draw; by default they are timed on what the arena
   * holds (a fresh allocation: in practice zeros). */
  const char *tune_data = getenv("DIT_CUDA_GEMM_TUNE_DATA");
  const int fill = tune_data && !strcmp(tune_data, "random");
  int need_lt = 0;
  for (size_t i = 0; i < plan->n_steps; i++) need_lt |= !plan->steps[i].has_kernel;
  if (need_lt) {
    DIT_RETURN_IF(load_lt(&st->lt));
    DIT_RETURN_IF(lt_check(st->lt.create(&st->lt_handle), "cublasLtCreate"));
    st->workspace_size = DIT_GEMM_WORKSPACE_BYTES;
    void *wsp;
    DIT_RETURN_IF(cuda_alloc(st, st->workspace_size, "cuBLASLt workspace", &wsp));
    st->workspace = (CUdeviceptr)(uintptr_t)wsp;
  }
  for (size_t i = 0; i < plan->n_steps; i++) {
    const dit_plan_step_t *s = &plan->steps[i];
    if (s->has_kernel) {
      CUmodule mod = NULL;
      DIT_RETURN_IF_ERROR(get_module(st, &s->kernel, load, ctx, &mod), "step %zu", i);
      DIT_RETURN_IF_ERROR(cu_check(st, st->cu.cuModuleGetFunction(&st->funcs[i], mod, s->kernel.entry), "cuModuleGetFunction"),
                          "step %zu entry '%s'", i, s->kernel.entry);
      if (s->kernel.smem > 48 * 1024)
        DIT_RETURN_IF_ERROR(cu_check(st, st->cu.cuFuncSetAttribute(st->funcs[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                                    (int)s->kernel.smem),
                                     "cuFuncSetAttribute"),
                            "step %zu asks for %u bytes of shared memory", i, s->kernel.smem);
      dit_tensor_t ins[DIT_PLAN_MAX_IN], outs[DIT_PLAN_MAX_OUT];
      for (int k = 0; k < s->n_in; k++) ins[k] = bound[s->in[k]];
      for (int k = 0; k < s->n_out; k++) outs[k] = bound[s->out[k]];
      for (int j = 0; j < s->kernel.n_tmaps; j++)
        DIT_RETURN_IF(encode_tmap(st, i, j, &s->kernel.tmaps[j], kernel_arg(s, ins, outs, s->kernel.tmaps[j].arg)));
    } else if (dit_op_is_collective(s->kind)) {
      continue; /* the executor's communicator runs them */
    } else if (s->kind == DIT_OP_STATE_CACHE) {
      continue; /* device copies (run_step) */
    } else if (s->kind == DIT_OP_LINEAR_FP8) { /* e4m3 rows and their scales (in 0, 1) by the e4m3 weight (2, 3) */
      const dit_attr_t *act = dit_attrs_find(&s->attrs, "act");
      DIT_RETURN_IF_ERROR(plan_gemm(st, &bound[s->in[0]], &bound[s->in[2]], s->n_in > 4 ? &bound[s->in[4]] : NULL, &bound[s->out[0]],
                                    act ? (int)act->i : 0, bound[s->in[3]].data, bound[s->in[1]].data, NULL, plan->values[s->out[0]].name,
                                    &st->gemms[i]),
                          "step %zu (linear_fp8 '%s')", i, plan->values[s->out[0]].name);
    } else if (s->kind == DIT_OP_LINEAR) {
      const dit_attr_t *act = dit_attrs_find(&s->attrs, "act");
      int bi, ai;
      if (dit_linear_operands(s->kind, &s->attrs, s->n_in, &bi, &ai))
        return DIT_ERR(INVALID_ARGUMENT, "step %zu (linear): %d operands do not fit attribute acc", i, s->n_in);
      if (ai >= 0 && (bound[s->in[ai]].dtype != bound[s->out[0]].dtype || bound[s->in[ai]].data == bound[s->out[0]].data))
        return DIT_ERR(UNIMPLEMENTED, "step %zu (linear '%s'): the accumulated input must have the output's dtype and its own memory", i,
                       plan->values[s->out[0]].name);
      /* A group's first step may make the whole group; every member keeps a GEMM of its own for
       * a run that does not follow it. */
      dit_linear_batch_t batch = {1, 0, 0, 0};
      if (batched && dit_linear_group(plan, i, bound, &batch)) st->group_len[i] = batch.count;
      const dit_tensor_t *x = &bound[s->in[0]];
      if (fill && plan->values[s->in[0]].storage == DIT_STORAGE_ARENA && x->dtype == DIT_BF16 && x->data)
        DIT_RETURN_IF_ERROR(fill_random_bf16(st, x->data, (size_t)dit_tensor_numel(x)), "step %zu (linear '%s'): filling its input for GEMM timing",
                            i, plan->values[s->out[0]].name);
      DIT_RETURN_IF_ERROR(plan_gemm(st, &bound[s->in[0]], &bound[s->in[1]], bi >= 0 ? &bound[s->in[bi]] : NULL, &bound[s->out[0]],
                                    act ? (int)act->i : 0, NULL, NULL, &batch, plan->values[s->out[0]].name, &st->gemms[i]),
                          "step %zu (linear '%s'%s)", i, plan->values[s->out[0]].name, batch.count > 1 ? ", its group as one batch" : "");
    } else {
      return DIT_ERR(UNIMPLEMENTED, "step %zu (%s): no kernel in the bundle and no library implementation", i,
                     dit_op_info(s->kind)->name);
    }
  }
  return DIT_OK;
}

/* cuBLASLt's Y = X W^T (+ C: beta = 1, when c is not NULL) of step idx, with the operand
 * addresses of this call: B (X, or its e4m3 codes) and the bias and the weight's and x's scales
 * where they moved since the GEMM was described. C has Y's layout. */
/* Points the GEMM's description attribute attr at p when p (not NULL) differs from *held, the
 * address it holds (an operand moved since the GEMM was described: an expert swap). */
static dit_status_t repoint(cuda_state_t *st, gemm_t *g, cublasLtMatmulDescAttributes_t attr, const void **held, const void *p,
                            const char *what) {
  if (!p || p == *held) return DIT_OK;
  DIT_RETURN_IF(lt_check(st->lt.desc_set(g->desc, attr, &p, sizeof p), what));
  *held = p;
  return DIT_OK;
}

static dit_status_t run_gemm(cuda_state_t *st, size_t idx, const void *b, const dit_tensor_t *w, const dit_tensor_t *bias,
                             const void *w_scale, const void *x_scale, const void *c, dit_tensor_t *y) {
  gemm_t *g = &st->gemms[idx];
  DIT_RETURN_IF(repoint(st, g, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias_at, bias ? bias->data : NULL,
                        "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
  DIT_RETURN_IF(repoint(st, g, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->a_scale_at, w_scale, "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)"));
  DIT_RETURN_IF(repoint(st, g, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->b_scale_at, x_scale, "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)"));
  const float one = 1.f, zero = 0.f;
  return lt_check(st->lt.matmul(st->lt_handle, g->desc, &one, w->data, g->a, b, g->b, c ? &one : &zero, c ? c : y->data, g->c, y->data,
                                g->c, &g->algo, (void *)(uintptr_t)st->workspace, st->workspace_size, (cudaStream_t)st->stream),
                  "cublasLtMatmul");
}

static dit_status_t cuda_run_step(void *p, size_t idx, const dit_plan_step_t *s, const dit_tensor_t *in,
                                  dit_tensor_t *out) {
  cuda_state_t *st = p;
  bind(st);
  if (idx >= st->n_steps) return DIT_ERR(INTERNAL, "cuda backend: step %zu of a plan of %zu", idx, st->n_steps);
  /* A member its group's first step made just before: nothing to do. */
  if (st->group_left && idx == st->group_next) {
    st->group_next++, st->group_left--;
    return DIT_OK;
  }
  st->group_left = 0;
  if (s->kind == DIT_OP_LINEAR_FP8) /* the rows' codes and scales by the weight's */
    return run_gemm(st, idx, in[0].data, &in[2], s->n_in > 4 ? &in[4] : NULL, in[3].data, in[1].data, NULL, &out[0]);
  if (s->kind == DIT_OP_STATE_CACHE && !s->has_kernel) { /* the executor decides whether it runs; running, it stores the fresh state */
    for (int k = 0; k < 2; k++) {
      if (in[k].dtype != out[k].dtype || dit_tensor_nbytes(&in[k]) != dit_tensor_nbytes(&out[k]))
        return DIT_ERR(INVALID_ARGUMENT, "state_cache: operand %d and its cache differ in dtype or size", k);
      DIT_RETURN_IF(cu_check(st, st->cu.cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)out[k].data, (CUdeviceptr)(uintptr_t)in[k].data,
                                                          dit_tensor_nbytes(&in[k]), st->stream),
                             "cuMemcpyDtoDAsync (state_cache)"));
    }
    return DIT_OK;
  }
  if (s->has_kernel) {
    CUdeviceptr ptrs[DIT_PLAN_MAX_IN + DIT_PLAN_MAX_OUT];
    void *args[DIT_PLAN_MAX_IN + DIT_PLAN_MAX_OUT + DIT_PLAN_MAX_TMAPS];
    int n = 0;
    for (int k = 0; k < s->n_out; k++, n++) ptrs[n] = (CUdeviceptr)(uintptr_t)out[k].data, args[n] = &ptrs[n];
    for (int k = 0; k < s->n_in; k++, n++) ptrs[n] = (CUdeviceptr)(uintptr_t)in[k].data, args[n] = &ptrs[n];
    const dit_plan_kernel_t *k = &s->kernel;
    for (int j = 0; j < k->n_tmaps; j++) {
      const dit_tensor_t *t = kernel_arg(s, in, out, k->tmaps[j].arg);
      if (st->tmap_at[idx * DIT_PLAN_MAX_TMAPS + (size_t)j] != t->data) DIT_RETURN_IF(encode_tmap(st, idx, j, &k->tmaps[j], t));
      args[n++] = &st->tmaps[idx * DIT_PLAN_MAX_TMAPS + (size_t)j];
    }
    return cu_check(st, st->cu.cuLaunchKernel(st->funcs[idx], k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1],
                                              k->block[2], k->smem, st->stream, args, NULL),
                    "cuLaunchKernel");
  }
  int bi, ai;
  if (dit_linear_operands(s->kind, &s->attrs, s->n_in, &bi, &ai))
    return DIT_ERR(INVALID_ARGUMENT, "cuda backend: step %zu (linear): %d operands do not fit attribute acc", idx, s->n_in);
  DIT_RETURN_IF(run_gemm(st, idx, in[0].data, &in[1], bi >= 0 ? &in[bi] : NULL, NULL, NULL, ai >= 0 ? in[ai].data : NULL, &out[0]));
  if (st->group_len[idx] > 1) st->group_next = idx + 1, st->group_left = (size_t)st->group_len[idx] - 1;
  return DIT_OK;
}

/* A whole forward as one CUDA graph: kernel launches and cuBLASLt calls recorded from the
 * stream, replayed without per-launch host overhead. Inputs are uploaded before replay into the
 * same buffers, so the recorded pointers stay valid. */
static dit_status_t cuda_capture_begin(void *p) {
  cuda_state_t *st = p;
  bind(st);
  if (st->graph_exec) return DIT_ERR(FAILED_PRECONDITION, "a forward is already captured");
  return cu_check(st, st->cu.cuStreamBeginCapture(st->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
}

static dit_status_t cuda_capture_end(void *p) {
  cuda_state_t *st = p;
  bind(st);
  DIT_RETURN_IF(cu_check(st, st->cu.cuStreamEndCapture(st->stream, &st->graph), "cuStreamEndCapture"));
  return cu_check(st, st->cu.cuGraphInstantiate(&st->graph_exec, st->graph, 0), "cuGraphInstantiate");
}

static dit_status_t cuda_replay(void *p) {
  cuda_state_t *st = p;
  bind(st);
  if (!st->graph_exec) return DIT_ERR(FAILED_PRECONDITION, "no captured forward to replay");
  return cu_check(st, st->cu.cuGraphLaunch(st->graph_exec, st->stream), "cuGraphLaunch");
}

static int cuda_query(void *p, int ev) {
  cuda_state_t *st = p;
  if (ev < 0 || ev >= DIT_BACKEND_MAX_EVENTS || !st->events[ev]) return 1; /* never marked: nothing pending */
  bind(st);
  return st->cu.cuEventQuery(st->events[ev]) != CUDA_ERROR_NOT_READY;
}

/* An embedding caller's stream (torch's current stream, in the primary context this backend
 * retains): device-to-device copies on it, and event waits between it and the compute stream,
 * so nothing passes through the host. */
static dit_status_t cuda_external_copy(void *p, void *queue, void *dst, const void *src, size_t bytes) {
  cuda_state_t *st = p;
  bind(st);
  return cu_check(st, st->cu.cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes, (CUstream)queue),
                  "cuMemcpyDtoDAsync (the caller's stream)");
}

static dit_status_t cuda_external_join(void *p, void *queue, int queue_waits) {
  cuda_state_t *st = p;
  bind(st);
  if (!st->ext_ev) DIT_RETURN_IF(cu_check(st, st->cu.cuEventCreate(&st->ext_ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate (caller's stream)"));
  CUstream from = queue_waits ? st->stream : (CUstream)queue, to = queue_waits ? (CUstream)queue : st->stream;
  DIT_RETURN_IF(cu_check(st, st->cu.cuEventRecord(st->ext_ev, from), "cuEventRecord (caller's stream)"));
  return cu_check(st, st->cu.cuStreamWaitEvent(to, st->ext_ev, 0), "cuStreamWaitEvent (caller's stream)");
}

static void *cuda_native_queue(void *p, int queue) {
  cuda_state_t *st = p;
  bind(st);
  CUstream s = NULL;
  dit_status_t e = queue_stream(st, queue, &s);
  dit_status_free(e);
  return e ? NULL : s;
}

static dit_status_t cuda_device_count(int *count) {
  cu_api_t cu;
  memset(&cu, 0, sizeof cu);
  *count = 0;
  DIT_RETURN_IF(load_cu(&cu));
  CUresult r = cu.cuInit(0);
  if (r == CUDA_SUCCESS) r = cu.cuDeviceGetCount(count);
  dlclose(cu.lib);
  return r == CUDA_SUCCESS ? DIT_OK : DIT_ERR(UNAVAILABLE, "CUDA driver: cuInit or cuDeviceGetCount failed (error %d)", (int)r);
}

static const dit_backend_vtable_t kCuda = {
    .abi_version = DIT_BACKEND_ABI_VERSION,
    .name = "cuda",
    .host_memory = 0,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .allocated_bytes = cuda_allocated_bytes,
    .release = cuda_release,
    .upload = cuda_upload,
    .download = cuda_download,
    .zero = cuda_zero,
    .copy2d = cuda_copy2d,
    .run_step = cuda_run_step,
    .synchronize = cuda_sync,
    .prepare = cuda_prepare,
    .memory_info = cuda_memory_info,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .replay = cuda_replay,
    .copy_enqueue = cuda_copy_enqueue,
    .mark = cuda_mark,
    .wait = cuda_wait,
    .pin_host = cuda_pin_host,
    .elapsed_ms = cuda_elapsed_ms,
    .native_queue = cuda_native_queue,
    .device_count = cuda_device_count,
    .query = cuda_query,
    .probe_change = cuda_probe_change,
    .sum_sq_diff = cuda_sum_sq_diff,
    .external_copy = cuda_external_copy,
    .external_join = cuda_external_join,
};

const dit_backend_vtable_t *dit_backend_cuda(void) { return &kCuda; }

#else

const dit_backend_vtable_t *dit_backend_cuda(void) { return NULL; }

#endif
