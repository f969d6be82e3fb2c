/* Shared internals of the CPU backend's kernels: argument checks with uniform messages,
 * row conversion between storage dtypes and fp32, per-worker scratch, and the packed GEMM
 * micro-kernel that both linear and attention are built on. Not a public interface. */
#ifndef DIT_RUNTIME_CPU_CPU_INTERNAL_H
#define DIT_RUNTIME_CPU_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/dtype.h"
#include "base/status.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/tensor.h"

/* ---- argument checks ------------------------------------------------------------------ */

/* Writes "[d0, d1, ...]" into buf (at least DIT_CPU_DIMS_BUF bytes) and returns buf. */
#define DIT_CPU_DIMS_BUF 192
const char *dit_cpu_dims_str(const dit_tensor_t *t, char *buf);

/* t must be non-NULL with a sane rank, non-negative dims, data present when non-empty, and a
 * float storage dtype (f32, bf16, f16). */
dit_status_t dit_cpu_check_float(const char *op, const char *name, const dit_tensor_t *t);
/* As above but any dtype of base/dtype.h is accepted. */
dit_status_t dit_cpu_check_any(const char *op, const char *name, const dit_tensor_t *t);
/* t must have exactly this rank and these dims; a negative entry in want matches anything. */
dit_status_t dit_cpu_check_dims(const char *op, const char *name, const dit_tensor_t *t,
                                int rank, const int64_t *want);
/* t must have the same rank and dims as ref (named ref_name in the message). */
dit_status_t dit_cpu_check_same_dims(const char *op, const char *name, const dit_tensor_t *t,
                                     const char *ref_name, const dit_tensor_t *ref);
/* The output's bytes must not overlap the input's: kernels read inputs after writing outputs. */
dit_status_t dit_cpu_check_no_alias(const char *op, const char *out_name, const dit_tensor_t *out,
                                    const char *in_name, const dit_tensor_t *in);
/* A tile schedule (attention's attr tiles) for S queries and L keys: i32 [ceil(S/DIT_SPARSE_TILE),
 * >= 2], each row a count in 1..min(W-1, key tiles) then that many ascending key tiles. */
dit_status_t dit_cpu_check_tiles(const char *op, const dit_tensor_t *tiles, int64_t S, int64_t L);
/* A key bound (attention's, attention_fp8's) for B batch items: i32 [B]. */
dit_status_t dit_cpu_check_bound(const char *op, const dit_tensor_t *bound, int64_t B);

/* ---- element and row conversion -------------------------------------------------------- */

static inline float dit_cpu_load1(const void *base, dit_dtype_t dt, int64_t i) {
  switch (dt) {
    case DIT_F32: return ((const float *)base)[i];
    case DIT_BF16: return dit_bf16_to_f32(((const uint16_t *)base)[i]);
    case DIT_F16: return dit_f16_to_f32(((const uint16_t *)base)[i]);
    case DIT_I64: return (float)((const int64_t *)base)[i];
    case DIT_I32: return (float)((const int32_t *)base)[i];
    default: return 0.0f;
  }
}

static inline void dit_cpu_store1(void *base, dit_dtype_t dt, int64_t i, float v) {
  switch (dt) {
    case DIT_F32: ((float *)base)[i] = v; break;
    case DIT_BF16: ((uint16_t *)base)[i] = dit_f32_to_bf16(v); break;
    case DIT_F16: ((uint16_t *)base)[i] = dit_f32_to_f16(v); break;
    default: break;
  }
}

/* v rounded to dt's precision as storing it would (f32: unchanged), back in fp32. */
static inline float dit_cpu_round1(dit_dtype_t dt, float v) {
  switch (dt) {
    case DIT_BF16: return dit_bf16_to_f32(dit_f32_to_bf16(v));
    case DIT_F16: return dit_f16_to_f32(dit_f32_to_f16(v));
    default: return v;
  }
}

/* Returns n fp32 values starting at element `off` of base: a pointer into base itself for
 * f32 storage, else tmp (n floats) filled by conversion. */
const float *dit_cpu_row_load(const void *base, dit_dtype_t dt, int64_t off, int64_t n, float *tmp);
/* Stores n fp32 values at element `off` of base, rounding to the storage dtype. */
void dit_cpu_row_store(void *base, dit_dtype_t dt, int64_t off, const float *src, int64_t n);

/* ---- per-worker scratch ---------------------------------------------------------------- */

/* One 64-byte aligned block of `per_worker` bytes for each pool worker; NULL on failure. */
typedef struct dit_cpu_scratch {
  unsigned char *base;
  size_t stride;
} dit_cpu_scratch_t;
dit_status_t dit_cpu_scratch_alloc(const char *op, dit_cpu_t *c, size_t per_worker,
                                   dit_cpu_scratch_t *out);
static inline void *dit_cpu_scratch_get(const dit_cpu_scratch_t *s, int worker) {
  return s->base + s->stride * (size_t)worker;
}
void dit_cpu_scratch_free(dit_cpu_scratch_t *s);

static inline dit_pool_t *dit_cpu_pool(dit_cpu_t *c) { return c ? c->pool : NULL; }

/* ---- GEMM building blocks --------------------------------------------------------------- */

/* The register tile: MR rows by NR columns of C live in 12 SSE registers. With only SSE2
 * (no broadcast loads), A is packed pre-broadcast: every element as a 4-wide vector, so the
 * inner loop is plain loads, multiplies and adds that GCC keeps in registers. */
#define DIT_GEMM_MR 6
#define DIT_GEMM_NR 8
typedef float dit_v4_t __attribute__((vector_size(16)));

/* Operands are packed by the callers (they also widen dtypes while packing):
 * A panel: a[k*MR + i] = splat(A[i][k]) for the MR rows, zero rows past the edge;
 * B panel: b[k*NR + j] = B[k][j] for the NR columns, zero columns past the edge (16-byte
 * aligned). c[MR][NR] (row stride ldc, fp32) = (accumulate ? c : 0) + A * B over kc. */
void dit_gemm_micro(int64_t kc, const dit_v4_t *a, const float *b, float *c, int64_t ldc,
                    int accumulate);

#endif
