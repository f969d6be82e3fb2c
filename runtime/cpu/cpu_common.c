/* Argument checks, dtype row conversion and per-worker scratch shared by the CPU kernels. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/cpu/cpu_internal.h"

const char *dit_cpu_dims_str(const dit_tensor_t *t, char *buf) {
  size_t n = 0;
  buf[n++] = '[';
  buf[n] = 0;
  int rank = t->rank < 0 ? 0 : (t->rank > DIT_MAX_RANK ? DIT_MAX_RANK : t->rank);
  for (int i = 0; i < rank && n < DIT_CPU_DIMS_BUF - 1; i++) {
    int w = snprintf(buf + n, DIT_CPU_DIMS_BUF - n, "%s%" PRId64, i ? ", " : "", t->dims[i]);
    if (w < 0) break;
    n += (size_t)w;
  }
  if (n < DIT_CPU_DIMS_BUF - 1) {
    buf[n++] = ']';
    buf[n] = 0;
  } else {
    buf[DIT_CPU_DIMS_BUF - 1] = 0;
  }
  return buf;
}

dit_status_t dit_cpu_check_any(const char *op, const char *name, const dit_tensor_t *t) {
  if (!t) return DIT_ERR(INVALID_ARGUMENT, "%s: %s is missing", op, name);
  if (t->rank < 0 || t->rank > DIT_MAX_RANK)
    return DIT_ERR(INVALID_ARGUMENT, "%s: %s has rank %d, expected 0..%d", op, name, t->rank,
                   DIT_MAX_RANK);
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) {
      char b[DIT_CPU_DIMS_BUF];
      return DIT_ERR(INVALID_ARGUMENT, "%s: %s has a negative dim: %s", op, name,
                     dit_cpu_dims_str(t, b));
    }
  }
  if ((unsigned)t->dtype >= DIT_DTYPE_COUNT)
    return DIT_ERR(INVALID_ARGUMENT, "%s: %s has unknown dtype %d", op, name, (int)t->dtype);
  if (!t->data && dit_tensor_numel(t) > 0)
    return DIT_ERR(INVALID_ARGUMENT, "%s: %s has no data", op, name);
  return DIT_OK;
}

dit_status_t dit_cpu_check_float(const char *op, const char *name, const dit_tensor_t *t) {
  DIT_RETURN_IF(dit_cpu_check_any(op, name, t));
  if (t->dtype != DIT_F32 && t->dtype != DIT_BF16 && t->dtype != DIT_F16)
    return DIT_ERR(INVALID_ARGUMENT, "%s: %s has dtype %s, expected f32, bf16 or f16", op, name,
                   dit_dtype_name(t->dtype));
  return DIT_OK;
}

dit_status_t dit_cpu_check_dims(const char *op, const char *name, const dit_tensor_t *t,
                                int rank, const int64_t *want) {
  int ok = t->rank == rank;
  for (int i = 0; ok && i < rank; i++) ok = want[i] < 0 || t->dims[i] == want[i];
  if (ok) return DIT_OK;
  char b[DIT_CPU_DIMS_BUF], e[DIT_CPU_DIMS_BUF];
  size_t n = 0;
  e[n++] = '[';
  for (int i = 0; i < rank && n < sizeof e - 24; i++) {
    int w = want[i] < 0 ? snprintf(e + n, sizeof e - n, "%s*", i ? ", " : "")
                        : snprintf(e + n, sizeof e - n, "%s%" PRId64, i ? ", " : "", want[i]);
    if (w < 0) break;
    n += (size_t)w;
  }
  e[n++] = ']';
  e[n] = 0;
  return DIT_ERR(INVALID_ARGUMENT, "%s: %s has dims %s, expected %s", op, name,
                 dit_cpu_dims_str(t, b), e);
}

dit_status_t dit_cpu_check_same_dims(const char *op, const char *name, const dit_tensor_t *t,
                                     const char *ref_name, const dit_tensor_t *ref) {
  int ok = t->rank == ref->rank;
  for (int i = 0; ok && i < t->rank; i++) ok = t->dims[i] == ref->dims[i];
  if (ok) return DIT_OK;
  char b[DIT_CPU_DIMS_BUF], e[DIT_CPU_DIMS_BUF];
  return DIT_ERR(INVALID_ARGUMENT, "%s: %s has dims %s, expected %s as %s", op, name,
                 dit_cpu_dims_str(t, b), dit_cpu_dims_str(ref, e), ref_name);
}

dit_status_t dit_cpu_check_no_alias(const char *op, const char *out_name, const dit_tensor_t *out,
                                    const char *in_name, const dit_tensor_t *in) {
  if (!in || !out || !in->data || !out->data) return DIT_OK;
  uintptr_t a0 = (uintptr_t)out->data, a1 = a0 + dit_tensor_nbytes(out);
  uintptr_t b0 = (uintptr_t)in->data, b1 = b0 + dit_tensor_nbytes(in);
  if (a0 < b1 && b0 < a1 && a1 > a0 && b1 > b0)
    return DIT_ERR(INVALID_ARGUMENT, "%s: output %s overlaps input %s (outputs never alias inputs)",
                   op, out_name, in_name);
  return DIT_OK;
}

const float *dit_cpu_row_load(const void *base, dit_dtype_t dt, int64_t off, int64_t n, float *tmp) {
  switch (dt) {
    case DIT_F32: return (const float *)base + off;
    case DIT_BF16: {
      const uint16_t *s = (const uint16_t *)base + off;
      for (int64_t i = 0; i < n; i++) tmp[i] = dit_bf16_to_f32(s[i]);
      return tmp;
    }
    case DIT_F16: {
      const uint16_t *s = (const uint16_t *)base + off;
      for (int64_t i = 0; i < n; i++) tmp[i] = dit_f16_to_f32(s[i]);
      return tmp;
    }
    default:
      for (int64_t i = 0; i < n; i++) tmp[i] = dit_cpu_load1(base, dt, off + i);
      return tmp;
  }
}

void dit_cpu_row_store(void *base, dit_dtype_t dt, int64_t off, const float *src, int64_t n) {
  switch (dt) {
    case DIT_F32:
      if ((float *)base + off != src) memcpy((float *)base + off, src, (size_t)n * sizeof(float));
      break;
    case DIT_BF16: {
      uint16_t *d = (uint16_t *)base + off;
      for (int64_t i = 0; i < n; i++) d[i] = dit_f32_to_bf16(src[i]);
      break;
    }
    case DIT_F16: {
      uint16_t *d = (uint16_t *)base + off;
      for (int64_t i = 0; i < n; i++) d[i] = dit_f32_to_f16(src[i]);
      break;
    }
    default: break;
  }
}

dit_status_t dit_cpu_scratch_alloc(const char *op, dit_cpu_t *c, size_t per_worker,
                                   dit_cpu_scratch_t *out) {
  int threads = dit_pool_threads(dit_cpu_pool(c));
  size_t stride = (per_worker + 63) & ~(size_t)63;
  if (stride == 0) stride = 64;
  out->stride = stride;
  out->base = NULL;
  if (stride > SIZE_MAX / (size_t)threads)
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: scratch of %zu bytes x %d workers overflows", op,
                   per_worker, threads);
  out->base = aligned_alloc(64, stride * (size_t)threads);
  if (!out->base)
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: cannot allocate %zu bytes of scratch for %d workers",
                   op, stride * (size_t)threads, threads);
  return DIT_OK;
}

void dit_cpu_scratch_free(dit_cpu_scratch_t *s) {
  free(s->base);
  s->base = NULL;
}
