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

typedef struct merge_job {
  const dit_tensor_t *oa, *la, *ob, *lb;
  dit_tensor_t *o, *lse;
  int64_t S, H, Dh;
  dit_cpu_scratch_t scratch;
} merge_job_t;

/* One (batch, query) row: every head's two partial outputs weighted by e^(lse - max). */
static void merge_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  merge_job_t *j = ctx;
  const int64_t C = j->H * j->Dh;
  float *ta = dit_cpu_scratch_get(&j->scratch, worker), *tb = ta + C, *out = tb + C;
  for (int64_t r = begin; r < end; r++) {
    const int64_t b = r / j->S, s = r % j->S;
    const float *va = dit_cpu_row_load(j->oa->data, j->oa->dtype, r * C, C, ta);
    const float *vb = dit_cpu_row_load(j->ob->data, j->ob->dtype, r * C, C, tb);
    for (int64_t h = 0; h < j->H; h++) {
      const int64_t li = (b * j->H + h) * j->S + s;
      const double a = dit_cpu_load1(j->la->data, j->la->dtype, li), c = dit_cpu_load1(j->lb->data, j->lb->dtype, li);
      const double m = a > c ? a : c, wa = exp(a - m), wb = exp(c - m), sum = wa + wb;
      for (int64_t d = 0; d < j->Dh; d++) out[h * j->Dh + d] = (float)((wa * va[h * j->Dh + d] + wb * vb[h * j->Dh + d]) / sum);
      dit_cpu_store1(j->lse->data, j->lse->dtype, li, (float)(m + log(sum)));
    }
    dit_cpu_row_store(j->o->data, j->o->dtype, r * C, out, C);
  }
}

dit_status_t dit_cpu_attn_merge(dit_cpu_t *c, const dit_tensor_t *oa, const dit_tensor_t *la, const dit_tensor_t *ob,
                                const dit_tensor_t *lb, int heads, dit_tensor_t *o, dit_tensor_t *lse) {
  static const char *op = "attn_merge";
  DIT_RETURN_IF(dit_cpu_check_float(op, "o_a", oa));
  DIT_RETURN_IF(dit_cpu_check_float(op, "lse_a", la));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "o_b", ob, "o_a", oa));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "o", o, "o_a", oa));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "lse_b", lb, "lse_a", la));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "lse", lse, "lse_a", la));
  if (oa->rank != 3 || heads < 1 || oa->dims[2] % heads || la->rank != 3 || la->dims[0] != oa->dims[0] || la->dims[1] != heads ||
      la->dims[2] != oa->dims[1])
    return DIT_ERR(INVALID_ARGUMENT, "%s: o [B, S, H*Dh] and lse [B, H, S] do not match with %d heads", op, heads);
  merge_job_t j = {.oa = oa, .la = la, .ob = ob, .lb = lb, .o = o, .lse = lse, .S = oa->dims[1], .H = heads,
                   .Dh = oa->dims[2] / heads};
  DIT_RETURN_IF(dit_cpu_scratch_alloc(op, c, 3 * (size_t)oa->dims[2] * sizeof(float), &j.scratch));
  dit_pool_parallel_for(dit_cpu_pool(c), oa->dims[0] * oa->dims[1], 8, merge_rows, &j);
  dit_cpu_scratch_free(&j.scratch);
  return DIT_OK;
}
