/* Cross-backend parity, step by step: the same plan runs on a test and a reference backend;
 * each step's outputs are compared, and (unless accumulating) the reference's outputs are
 * copied into the test run so every op is judged on identical inputs. The metrics are
 * base/parity.h's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/plan.h"
#include "base/parity.h"
#include "runtime/compare.h"

/* Values as fp32 for the metrics: floats converted, integers (key bounds) as their values, e4m3
 * and int8 codes (fp8 attention's operands) decoded. */
static dit_status_t to_f32(const void *src, dit_dtype_t t, size_t n, float *dst) {
  if (t == DIT_F8E4M3 || t == DIT_I8) {
    for (size_t i = 0; i < n; i++) dst[i] = t == DIT_I8 ? (float)((const int8_t *)src)[i] : dit_e4m3_to_f32(((const uint8_t *)src)[i]);
    return DIT_OK;
  }
  if (t == DIT_I32 || t == DIT_I64) {
    for (size_t i = 0; i < n; i++) dst[i] = t == DIT_I32 ? (float)((const int32_t *)src)[i] : (float)((const int64_t *)src)[i];
    return DIT_OK;
  }
  if (dit_convert(dst, DIT_F32, src, t, n)) return DIT_ERR(INTERNAL, "compare: %s is not a number dtype", dit_dtype_name(t));
  return DIT_OK;
}

dit_status_t dit_runtime_compare(dit_runtime_t *test, dit_runtime_t *ref, int accumulate,
                                 void (*report)(void *ctx, const dit_step_diff_t *d), void *ctx) {
  const dit_plan_t *p = dit_runtime_plan(test), *q = dit_runtime_plan(ref);
  if (p->n_steps != q->n_steps || p->n_values != q->n_values)
    return DIT_ERR(INVALID_ARGUMENT, "compare: the two runtimes hold different plans");
  size_t cap = 0;
  for (size_t v = 0; v < p->n_values; v++)
    if (p->values[v].nbytes > cap) cap = p->values[v].nbytes;
  void *ra = malloc(cap + 16), *rb = malloc(cap + 16);
  float *fa = malloc((cap / 2 + 4) * sizeof(float)), *fb = malloc((cap / 2 + 4) * sizeof(float));
  dit_status_t s = (ra && rb && fa && fb) ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "compare: out of memory");
  for (size_t i = 0; !s && i < p->n_steps; i++) {
    s = dit_runtime_step(ref, i);
    if (!s) s = dit_runtime_step(test, i);
    const dit_plan_step_t *st = &p->steps[i];
    for (int k = 0; !s && k < st->n_out; k++) {
      size_t v = (size_t)st->out[k];
      const dit_plan_value_t *val = &p->values[v];
      size_t n = val->nbytes / dit_dtype_size(val->dtype);
      s = dit_runtime_read_value(test, v, ra);
      if (!s) s = dit_runtime_read_value(ref, v, rb);
      if (!s) s = to_f32(ra, val->dtype, n, fa);
      if (!s) s = to_f32(rb, val->dtype, n, fb);
      if (s) break;
      const dit_parity_t m = dit_parity_f32(fa, fb, n);
      const double step = val->dtype == DIT_F8E4M3 ? 32.0 / 448.0 : val->dtype == DIT_I8 ? 1.0 / 127.0 : 0.0;
      dit_step_diff_t d = {i, dit_op_info(st->kind)->name, val->name, m.max_rel, m.cosine, n, m.rel_l2, step};
      if (report) report(ctx, &d);
      if (!accumulate) s = dit_runtime_write_value(test, v, rb);
    }
  }
  free(ra);
  free(rb);
  free(fa);
  free(fb);
  return s;
}
