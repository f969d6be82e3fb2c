/* Row ops for rows split across tensor-parallel ranks: each rank's partial sum of squares,
 * and RMSNorm of a row slice once the partial sums are all-reduced. Sums in double. */
#include <math.h>
#include <stdlib.h>

#include "runtime/cpu/cpu_internal.h"

typedef struct shard_job {
  const dit_tensor_t *x, *ss, *w;
  dit_tensor_t *y;
  int64_t c;
  double eps, dim;
  dit_cpu_scratch_t scratch;
} shard_job_t;

static void sumsq_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  shard_job_t *j = ctx;
  float *tmp = dit_cpu_scratch_get(&j->scratch, worker);
  for (int64_t r = begin; r < end; r++) {
    const float *v = dit_cpu_row_load(j->x->data, j->x->dtype, r * j->c, j->c, tmp);
    double s = 0;
    for (int64_t i = 0; i < j->c; i++) s += (double)v[i] * v[i];
    dit_cpu_store1(j->y->data, j->y->dtype, r, (float)s);
  }
}

static void norm_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  shard_job_t *j = ctx;
  float *tmp = dit_cpu_scratch_get(&j->scratch, worker), *w = tmp + j->c, *out = w + j->c;
  const float *wv = dit_cpu_row_load(j->w->data, j->w->dtype, 0, j->c, w);
  for (int64_t r = begin; r < end; r++) {
    const float *v = dit_cpu_row_load(j->x->data, j->x->dtype, r * j->c, j->c, tmp);
    const double inv = 1.0 / sqrt((double)dit_cpu_load1(j->ss->data, j->ss->dtype, r) / j->dim + j->eps);
    for (int64_t i = 0; i < j->c; i++) out[i] = (float)((double)v[i] * inv) * wv[i];
    dit_cpu_row_store(j->y->data, j->y->dtype, r * j->c, out, j->c);
  }
}

dit_status_t dit_cpu_rowsumsq(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y) {
  static const char *op = "rowsumsq";
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  if (x->rank < 1) return DIT_ERR(INVALID_ARGUMENT, "%s: x has rank 0", op);
  shard_job_t j = {.x = x, .y = y, .c = x->dims[x->rank - 1]};
  int64_t rows = j.c ? dit_tensor_numel(x) / j.c : 0;
  if (dit_tensor_numel(y) != rows) return DIT_ERR(INVALID_ARGUMENT, "%s: y has %lld elements, expected one per row (%lld)", op,
                                                  (long long)dit_tensor_numel(y), (long long)rows);
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_scratch_alloc(op, c, (size_t)j.c * sizeof(float), &j.scratch));
  dit_pool_parallel_for(dit_cpu_pool(c), rows, 16, sumsq_rows, &j);
  dit_cpu_scratch_free(&j.scratch);
  return DIT_OK;
}

dit_status_t dit_cpu_rmsnorm_slice(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *sumsq,
                                   const dit_tensor_t *w, double eps, int64_t dim, dit_tensor_t *y) {
  static const char *op = "rmsnorm_slice";
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "sumsq", sumsq));
  DIT_RETURN_IF(dit_cpu_check_float(op, "w", w));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "y", y, "x", x));
  if (x->rank < 1 || dim < 1) return DIT_ERR(INVALID_ARGUMENT, "%s: x has rank 0 or dim %lld < 1", op, (long long)dim);
  shard_job_t j = {.x = x, .ss = sumsq, .w = w, .y = y, .c = x->dims[x->rank - 1], .eps = eps, .dim = (double)dim};
  int64_t rows = j.c ? dit_tensor_numel(x) / j.c : 0;
  if (dit_tensor_numel(sumsq) != rows || dit_tensor_numel(w) != j.c)
    return DIT_ERR(INVALID_ARGUMENT, "%s: sumsq has %lld values for %lld rows, w %lld for %lld columns", op,
                   (long long)dit_tensor_numel(sumsq), (long long)rows, (long long)dit_tensor_numel(w), (long long)j.c);
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_scratch_alloc(op, c, 3 * (size_t)j.c * sizeof(float), &j.scratch));
  dit_pool_parallel_for(dit_cpu_pool(c), rows, 16, norm_rows, &j);
  dit_cpu_scratch_free(&j.scratch);
  return DIT_OK;
}
