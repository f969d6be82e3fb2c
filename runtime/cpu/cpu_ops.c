/* The CPU backend's row and elementwise kernels: patchify/unpatchify, timestep embedding,
 * activations, residual adds, modulation tables, LayerNorm/AdaLN/RMSNorm, 3-D and table RoPE,
 * reshape and concat.
 * Rows are widened to fp32 and rounded once on store; norm statistics are taken in double. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu_internal.h"

/* Elementwise work is handed out in chunks of this many elements and converted through a
 * stack buffer of the same size, so no scratch allocation is needed. */
#define DIT_EW_CHUNK 1024
#define DIT_EW_GRAIN (16 * DIT_EW_CHUNK)

/* ---- patchify / unpatchify ---------------------------------------------------------------- */

typedef struct patch_job {
  const dit_tensor_t *src;
  dit_tensor_t *dst;
  int64_t C, F, H, W; /* full-resolution sizes */
  int64_t f, h, w;    /* patch-grid sizes */
  int pt, ph, pw;
} patch_job_t;

/* One token row per item: gathers the (c, it, ih, iw) patch of x into y[b, token, :]. */
static void patchify_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  patch_job_t *j = ctx;
  const int64_t ntok = j->f * j->h * j->w;
  const int64_t rowlen = j->C * j->pt * j->ph * j->pw;
  for (int64_t r = begin; r < end; r++) {
    const int64_t b = r / ntok, tok = r % ntok;
    const int64_t ft = tok / (j->h * j->w), hi = (tok / j->w) % j->h, wi = tok % j->w;
    int64_t o = r * rowlen;
    for (int64_t c = 0; c < j->C; c++)
      for (int it = 0; it < j->pt; it++)
        for (int ih = 0; ih < j->ph; ih++) {
          const int64_t base =
              (((b * j->C + c) * j->F + ft * j->pt + it) * j->H + hi * j->ph + ih) * j->W + wi * j->pw;
          for (int iw = 0; iw < j->pw; iw++, o++)
            dit_cpu_store1(j->dst->data, j->dst->dtype, o,
                           dit_cpu_load1(j->src->data, j->src->dtype, base + iw));
        }
  }
}

dit_status_t dit_cpu_patchify(dit_cpu_t *c, const dit_tensor_t *x, int pt, int ph, int pw,
                              dit_tensor_t *y) {
  static const char *op = "patchify";
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  if (pt < 1 || ph < 1 || pw < 1)
    return DIT_ERR(INVALID_ARGUMENT, "%s: patch (%d, %d, %d) must be positive", op, pt, ph, pw);
  if (x->rank != 5)
    return DIT_ERR(INVALID_ARGUMENT, "%s: x has dims %s, expected [B, C, F, H, W]", op,
                   dit_cpu_dims_str(x, b1));
  if (x->dims[2] % pt || x->dims[3] % ph || x->dims[4] % pw)
    return DIT_ERR(INVALID_ARGUMENT, "%s: x has dims %s, F, H, W not divisible by patch (%d, %d, %d)",
                   op, dit_cpu_dims_str(x, b1), pt, ph, pw);
  patch_job_t j = {.src = x, .dst = y, .C = x->dims[1], .F = x->dims[2], .H = x->dims[3],
                   .W = x->dims[4], .pt = pt, .ph = ph, .pw = pw};
  j.f = j.F / pt, j.h = j.H / ph, j.w = j.W / pw;
  const int64_t want[3] = {x->dims[0], j.f * j.h * j.w, j.C * pt * ph * pw};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "y", y, 3, want));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  dit_pool_parallel_for(dit_cpu_pool(c), want[0] * want[1], 64, patchify_rows, &j);
  return DIT_OK;
}

/* One output row (b, c, frame, row) per item: each element comes from token (ft, hi, wi) at
 * position ((it*ph + ih)*pw + iw)*C + c of its row. */
static void unpatchify_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  patch_job_t *j = ctx;
  const int64_t rowlen = j->C * j->pt * j->ph * j->pw;
  for (int64_t r = begin; r < end; r++) {
    const int64_t y_ = r % j->H, fr = (r / j->H) % j->F, c = (r / (j->H * j->F)) % j->C;
    const int64_t b = r / (j->H * j->F * j->C);
    const int64_t ft = fr / j->pt, it = fr % j->pt, hi = y_ / j->ph, ih = y_ % j->ph;
    for (int64_t x_ = 0; x_ < j->W; x_++) {
      const int64_t wi = x_ / j->pw, iw = x_ % j->pw;
      const int64_t tok = (ft * j->h + hi) * j->w + wi;
      const int64_t src = (b * j->f * j->h * j->w + tok) * rowlen + ((it * j->ph + ih) * j->pw + iw) * j->C + c;
      dit_cpu_store1(j->dst->data, j->dst->dtype, r * j->W + x_,
                     dit_cpu_load1(j->src->data, j->src->dtype, src));
    }
  }
}

dit_status_t dit_cpu_unpatchify(dit_cpu_t *c, const dit_tensor_t *y, int pt, int ph, int pw,
                                int f, int h, int w, dit_tensor_t *out) {
  static const char *op = "unpatchify";
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  DIT_RETURN_IF(dit_cpu_check_float(op, "out", out));
  if (pt < 1 || ph < 1 || pw < 1 || f < 0 || h < 0 || w < 0)
    return DIT_ERR(INVALID_ARGUMENT, "%s: patch (%d, %d, %d) must be positive and grid (%d, %d, %d) non-negative",
                   op, pt, ph, pw, f, h, w);
  if (y->rank != 3)
    return DIT_ERR(INVALID_ARGUMENT, "%s: y has dims %s, expected [B, f*h*w, C*pt*ph*pw]", op,
                   dit_cpu_dims_str(y, b1));
  const int64_t ntok = (int64_t)f * h * w, pvol = (int64_t)pt * ph * pw;
  if (y->dims[1] != ntok)
    return DIT_ERR(INVALID_ARGUMENT, "%s: y has dims %s, expected %lld tokens (f*h*w = %d*%d*%d)", op,
                   dit_cpu_dims_str(y, b1), (long long)ntok, f, h, w);
  if (y->dims[2] % pvol)
    return DIT_ERR(INVALID_ARGUMENT, "%s: y has dims %s, last dim not a multiple of pt*ph*pw = %lld",
                   op, dit_cpu_dims_str(y, b1), (long long)pvol);
  patch_job_t j = {.src = y, .dst = out, .C = y->dims[2] / pvol, .F = (int64_t)f * pt,
                   .H = (int64_t)h * ph, .W = (int64_t)w * pw, .f = f, .h = h, .w = w,
                   .pt = pt, .ph = ph, .pw = pw};
  const int64_t want[5] = {y->dims[0], j.C, j.F, j.H, j.W};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "out", out, 5, want));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, "y", y));
  dit_pool_parallel_for(dit_cpu_pool(c), want[0] * j.C * j.F * j.H, 16, unpatchify_rows, &j);
  return DIT_OK;
}

/* ---- timestep embedding ------------------------------------------------------------------- */

dit_status_t dit_cpu_timestep_embed(dit_cpu_t *c, const dit_tensor_t *t, int flip, double shift,
                                    double max_period, double scale, dit_tensor_t *out) {
  static const char *op = "timestep_embed";
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_any(op, "t", t));
  DIT_RETURN_IF(dit_cpu_check_float(op, "out", out));
  if (t->rank != 1 && t->rank != 2)
    return DIT_ERR(INVALID_ARGUMENT, "%s: t has dims %s, expected [B] or [B, T]", op, dit_cpu_dims_str(t, b1));
  const int64_t want[3] = {t->dims[0], t->rank == 2 ? t->dims[1] : -1, -1};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "out", out, t->rank + 1, want));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, "t", t));
  if (!(max_period > 0))
    return DIT_ERR(INVALID_ARGUMENT, "%s: max_period %g must be positive", op, max_period);
  /* Per-token timesteps are embedded row by row like a batch of B*T. */
  const int64_t B = dit_tensor_numel(t), dim = out->dims[t->rank], half = dim / 2;
  if (half > 0 && (double)half - shift == 0.0)
    return DIT_ERR(INVALID_ARGUMENT, "%s: half dim %lld - shift %g is zero", op, (long long)half, shift);
  if (B == 0 || dim == 0) return DIT_OK;
  float *freq = malloc(sizeof(float) * (size_t)(half + 1));
  float *row = malloc(sizeof(float) * (size_t)dim);
  if (!freq || !row) {
    free(freq);
    free(row);
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: cannot allocate %lld floats", op, (long long)dim);
  }
  /* The reference forms the exponent in fp32, one rounding per step: (-ln P as float) * j,
   * then / (half - shift) as float. exp itself is taken in double and rounded once. */
  const float neg_log_p = (float)-log(max_period);
  const float denom = (float)((double)half - shift);
  for (int64_t i = 0; i < half; i++) {
    const float e = (neg_log_p * (float)i) / denom;
    freq[i] = (float)exp((double)e);
  }
  const float fscale = (float)scale;
  for (int64_t b = 0; b < B; b++) {
    const float tv = dit_cpu_load1(t->data, t->dtype, b);
    for (int64_t i = 0; i < half; i++) {
      const float arg = fscale * (tv * freq[i]);
      const float sn = (float)sin((double)arg), cs = (float)cos((double)arg);
      row[flip ? half + i : i] = sn;
      row[flip ? i : half + i] = cs;
    }
    if (dim % 2) row[dim - 1] = 0.0f;
    dit_cpu_row_store(out->data, out->dtype, b * dim, row, dim);
  }
  free(freq);
  free(row);
  return DIT_OK;
}

/* ---- elementwise ------------------------------------------------------------------------- */

typedef enum ew_kind { EW_SILU, EW_GELU_TANH, EW_ADD, EW_GELU, EW_MUL, EW_CLAMP, EW_QUICK_GELU } ew_kind_t;

typedef struct ew_job {
  ew_kind_t kind;
  const dit_tensor_t *a, *b;
  dit_tensor_t *y;
  float lo, hi; /* EW_CLAMP's bounds */
} ew_job_t;

static void ew_range(void *ctx, int64_t begin, int64_t end, int worker) {
  ew_job_t *j = ctx;
  float ta[DIT_EW_CHUNK], tb[DIT_EW_CHUNK], out[DIT_EW_CHUNK];
  for (int64_t s = begin; s < end; s += DIT_EW_CHUNK) {
    const int64_t n = end - s < DIT_EW_CHUNK ? end - s : DIT_EW_CHUNK;
    const float *a = dit_cpu_row_load(j->a->data, j->a->dtype, s, n, ta);
    switch (j->kind) {
      case EW_SILU:
        for (int64_t i = 0; i < n; i++) out[i] = a[i] / (1.0f + expf(-a[i]));
        break;
      case EW_GELU_TANH:
        for (int64_t i = 0; i < n; i++) out[i] = dit_cpu_gelu_tanh1(a[i]);
        break;
      case EW_GELU:
        /* erfc keeps the negative tail's relative precision, which 1 + erf loses. */
        for (int64_t i = 0; i < n; i++) out[i] = 0.5f * a[i] * erfcf(-a[i] * 0.70710678118654752f);
        break;
      case EW_QUICK_GELU:
        /* transformers' input * sigmoid(1.702 * input), the sigmoid as 1 / (1 + e^-z). */
        for (int64_t i = 0; i < n; i++) out[i] = a[i] * (1.0f / (1.0f + expf(-1.702f * a[i])));
        break;
      case EW_CLAMP:
        for (int64_t i = 0; i < n; i++) out[i] = a[i] < j->lo ? j->lo : a[i] > j->hi ? j->hi : a[i];
        break;
      case EW_ADD: {
        const float *b = dit_cpu_row_load(j->b->data, j->b->dtype, s, n, tb);
        for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
        break;
      }
      case EW_MUL: {
        const float *b = dit_cpu_row_load(j->b->data, j->b->dtype, s, n, tb);
        for (int64_t i = 0; i < n; i++) out[i] = a[i] * b[i];
        break;
      }
    }
    dit_cpu_row_store(j->y->data, j->y->dtype, s, out, n);
  }
}

static dit_status_t unary(dit_cpu_t *c, const char *op, ew_kind_t kind, const dit_tensor_t *x,
                          dit_tensor_t *y) {
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  ew_job_t j = {.kind = kind, .a = x, .y = y};
  dit_pool_parallel_for(dit_cpu_pool(c), dit_tensor_numel(x), DIT_EW_GRAIN, ew_range, &j);
  return DIT_OK;
}

dit_status_t dit_cpu_silu(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y) {
  return unary(c, "silu", EW_SILU, x, y);
}

/* 0.5 x (1 + tanh u) written as x / (1 + e^(-2u)): the same function, without the cancellation of
 * 1 + tanh u that flushes the negative tail to zero in fp32. */
float dit_cpu_gelu_tanh1(float x) {
  const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
  const float u = k0 * (x + 0.044715f * x * x * x);
  return x / (1.0f + expf(-2.0f * u));
}

dit_status_t dit_cpu_gelu_tanh(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y) {
  return unary(c, "gelu_tanh", EW_GELU_TANH, x, y);
}

dit_status_t dit_cpu_gelu(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y) {
  return unary(c, "gelu", EW_GELU, x, y);
}

dit_status_t dit_cpu_quick_gelu(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y) {
  return unary(c, "quick_gelu", EW_QUICK_GELU, x, y);
}

dit_status_t dit_cpu_clamp(dit_cpu_t *c, const dit_tensor_t *x, double lo, double hi, dit_tensor_t *y) {
  static const char *op = "clamp";
  if (!(lo <= hi)) return DIT_ERR(INVALID_ARGUMENT, "%s: bounds [%g, %g] are empty", op, lo, hi);
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  ew_job_t j = {.kind = EW_CLAMP, .a = x, .y = y, .lo = (float)lo, .hi = (float)hi};
  dit_pool_parallel_for(dit_cpu_pool(c), dit_tensor_numel(x), DIT_EW_GRAIN, ew_range, &j);
  return DIT_OK;
}

static dit_status_t binary(dit_cpu_t *c, const char *op, ew_kind_t kind, const dit_tensor_t *a, const dit_tensor_t *b,
                           dit_tensor_t *y) {
  DIT_RETURN_IF(dit_cpu_check_float(op, "a", a));
  DIT_RETURN_IF(dit_cpu_check_float(op, "b", b));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "b", b, "a", a));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "y", y, "a", a));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "a", a));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "b", b));
  ew_job_t j = {.kind = kind, .a = a, .b = b, .y = y};
  dit_pool_parallel_for(dit_cpu_pool(c), dit_tensor_numel(a), DIT_EW_GRAIN, ew_range, &j);
  return DIT_OK;
}

dit_status_t dit_cpu_add(dit_cpu_t *c, const dit_tensor_t *a, const dit_tensor_t *b, dit_tensor_t *y) {
  return binary(c, "add", EW_ADD, a, b, y);
}

dit_status_t dit_cpu_mul(dit_cpu_t *c, const dit_tensor_t *a, const dit_tensor_t *b, dit_tensor_t *y) {
  return binary(c, "mul", EW_MUL, a, b, y);
}

/* ---- embedding ----------------------------------------------------------------------------- */

typedef struct embed_job {
  const dit_tensor_t *table;
  dit_tensor_t *y;
  const int64_t *rows; /* the checked ids */
  int64_t D;
} embed_job_t;

static void embed_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  embed_job_t *j = ctx;
  const size_t ts = dit_dtype_size(j->table->dtype), ys = dit_dtype_size(j->y->dtype);
  for (int64_t i = begin; i < end; i++)
    dit_convert((char *)j->y->data + (size_t)(i * j->D) * ys, j->y->dtype, (const char *)j->table->data + (size_t)(j->rows[i] * j->D) * ts,
                j->table->dtype, (size_t)j->D);
}

dit_status_t dit_cpu_embedding(dit_cpu_t *c, const dit_tensor_t *ids, const dit_tensor_t *table, dit_tensor_t *y) {
  static const char *op = "embedding";
  DIT_RETURN_IF(dit_cpu_check_any(op, "ids", ids));
  DIT_RETURN_IF(dit_cpu_check_float(op, "table", table));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  if (ids->dtype != DIT_I32 && ids->dtype != DIT_I64)
    return DIT_ERR(INVALID_ARGUMENT, "%s: ids have dtype %s, expected i32 or i64", op, dit_dtype_name(ids->dtype));
  const int64_t td[2] = {-1, -1};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "table", table, 2, td));
  if (ids->rank + 1 > DIT_MAX_RANK) return DIT_ERR(INVALID_ARGUMENT, "%s: ids of rank %d leave no room for the row dim", op, ids->rank);
  int64_t want[DIT_MAX_RANK];
  for (int i = 0; i < ids->rank; i++) want[i] = ids->dims[i];
  want[ids->rank] = table->dims[1];
  DIT_RETURN_IF(dit_cpu_check_dims(op, "y", y, ids->rank + 1, want));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "ids", ids));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "table", table));
  const int64_t n = dit_tensor_numel(ids), V = table->dims[0];
  int64_t *rows = malloc(sizeof *rows * (size_t)(n ? n : 1));
  if (!rows) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", op);
  for (int64_t i = 0; i < n; i++) {
    rows[i] = ids->dtype == DIT_I32 ? ((const int32_t *)ids->data)[i] : ((const int64_t *)ids->data)[i];
    if (rows[i] < 0 || rows[i] >= V) {
      const long long bad = (long long)rows[i];
      free(rows);
      return DIT_ERR(OUT_OF_RANGE, "%s: id %lld at flat position %lld is outside the table's rows 0..%lld", op, bad, (long long)i,
                     (long long)V - 1);
    }
  }
  embed_job_t j = {.table = table, .y = y, .rows = rows, .D = table->dims[1]};
  dit_pool_parallel_for(dit_cpu_pool(c), n, 64, embed_rows, &j);
  free(rows);
  return DIT_OK;
}

/* ---- token select ------------------------------------------------------------------------ */

dit_status_t dit_cpu_token_select(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *ids, int64_t eos, dit_tensor_t *y) {
  (void)c;
  static const char *op = "token_select";
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_any(op, "ids", ids));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  if (ids->dtype != DIT_I32 && ids->dtype != DIT_I64)
    return DIT_ERR(INVALID_ARGUMENT, "%s: ids have dtype %s, expected i32 or i64", op, dit_dtype_name(ids->dtype));
  if (eos < -1) return DIT_ERR(INVALID_ARGUMENT, "%s: eos = %lld, expected >= -1", op, (long long)eos);
  const int64_t xd[3] = {-1, -1, -1};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "x", x, 3, xd));
  const int64_t B = x->dims[0], T = x->dims[1], C = x->dims[2], id[2] = {B, T}, yd[2] = {B, C};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "ids", ids, 2, id));
  DIT_RETURN_IF(dit_cpu_check_dims(op, "y", y, 2, yd));
  if (y->dtype != x->dtype) return DIT_ERR(INVALID_ARGUMENT, "%s: y has dtype %s, expected x's %s", op, dit_dtype_name(y->dtype),
                                            dit_dtype_name(x->dtype));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  const size_t row = (size_t)C * dit_dtype_size(x->dtype);
  for (int64_t b = 0; b < B; b++) {
    /* The first position of the largest id (eos -1), else of the id eos; 0 when none is. */
    int64_t pick = 0, best = INT64_MIN;
    for (int64_t t = 0; t < T; t++) {
      const int64_t v = ids->dtype == DIT_I32 ? ((const int32_t *)ids->data)[b * T + t] : ((const int64_t *)ids->data)[b * T + t];
      if (eos < 0 ? v > best : v == eos) {
        pick = t;
        best = v;
        if (eos >= 0) break;
      }
    }
    memcpy((char *)y->data + (size_t)b * row, (const char *)x->data + (size_t)(b * T + pick) * row, row);
  }
  return DIT_OK;
}

/* ---- cast ---------------------------------------------------------------------------------- */

static void cast_range(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const dit_tensor_t *const *xy = ctx;
  const size_t sx = dit_dtype_size(xy[0]->dtype), sy = dit_dtype_size(xy[1]->dtype);
  /* Both dtypes were checked to be float types, for which dit_convert cannot fail. */
  (void)dit_convert((char *)xy[1]->data + (size_t)begin * sy, xy[1]->dtype, (const char *)xy[0]->data + (size_t)begin * sx,
                    xy[0]->dtype, (size_t)(end - begin));
}

dit_status_t dit_cpu_cast(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y) {
  static const char *op = "cast";
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  const dit_tensor_t *xy[2] = {x, y};
  dit_pool_parallel_for(dit_cpu_pool(c), dit_tensor_numel(x), DIT_EW_GRAIN, cast_range, xy);
  return DIT_OK;
}

/* ---- modulation table ---------------------------------------------------------------------- */

dit_status_t dit_cpu_mod_table(dit_cpu_t *c, const dit_tensor_t *table, const dit_tensor_t *e,
                               dit_tensor_t *out) {
  static const char *op = "mod_table";
  char b1[DIT_CPU_DIMS_BUF], b2[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "table", table));
  DIT_RETURN_IF(dit_cpu_check_float(op, "e", e));
  DIT_RETURN_IF(dit_cpu_check_float(op, "out", out));
  if (table->rank != 3 || table->dims[0] != 1)
    return DIT_ERR(INVALID_ARGUMENT, "%s: table has dims %s, expected [1, n, D]", op,
                   dit_cpu_dims_str(table, b1));
  const int64_t n = table->dims[1], D = table->dims[2];
  /* out [B, n, D], or [B, T, n, D] with e [B, T, r*D]: a table per token, computed as B*T
   * batch rows. */
  const int per_token = out->rank == 4;
  const int64_t want[4] = {-1, per_token ? -1 : n, per_token ? n : D, D};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "out", out, per_token ? 4 : 3, want));
  const int64_t B = per_token ? out->dims[0] * out->dims[1] : out->dims[0];
  const int64_t ne = dit_tensor_numel(e);
  if (per_token && (e->rank != 3 || e->dims[0] != out->dims[0] || e->dims[1] != out->dims[1] || (e->dims[2] != D && e->dims[2] != n * D)))
    return DIT_ERR(INVALID_ARGUMENT, "%s: e has dims %s, expected [%lld, %lld, %lld or %lld] for the per-token out %s", op,
                   dit_cpu_dims_str(e, b1), (long long)out->dims[0], (long long)out->dims[1], (long long)D,
                   (long long)(n * D), dit_cpu_dims_str(out, b2));
  if (!per_token && (e->rank < 1 || e->dims[0] != B || (ne != B * D && ne != B * n * D)))
    return DIT_ERR(INVALID_ARGUMENT,
                   "%s: e has dims %s, expected [B = %lld, ...] with %lld (r = 1) or %lld (r = n = %lld) "
                   "elements for out %s",
                   op, dit_cpu_dims_str(e, b1), (long long)B, (long long)(B * D),
                   (long long)(B * n * D), (long long)n, dit_cpu_dims_str(out, b2));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, "table", table));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, "e", e));
  if (B == 0 || n == 0 || D == 0) return DIT_OK;
  const int64_t r = ne == B * n * D ? n : 1;
  /* Small (B * n rows of D): one thread, rows converted element by element. */
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < n; i++)
      for (int64_t d = 0; d < D; d++) {
        const float tv = dit_cpu_load1(table->data, table->dtype, i * D + d);
        const float ev = dit_cpu_load1(e->data, e->dtype, (b * r + (r == 1 ? 0 : i)) * D + d);
        dit_cpu_store1(out->data, out->dtype, (b * n + i) * D + d, tv + ev);
      }
  return DIT_OK;
}

/* ---- norms --------------------------------------------------------------------------------- */

/* RMSNorm of a row of D: each G-wide chunk (G = D: the whole row) by its own RMS, in double,
 * times the weight w [G] in fp32. rmsnorm's arithmetic, and that of the ropes that fold it in. */
static void rms_row(const float *x, int64_t D, int64_t G, const float *w, double eps, float *out) {
  for (int64_t g0 = 0; g0 < D; g0 += G) {
    double ss = 0.0;
    for (int64_t d = g0; d < g0 + G; d++) ss += (double)x[d] * x[d];
    const double inv = 1.0 / sqrt(ss / (double)G + eps);
    for (int64_t d = g0; d < g0 + G; d++) out[d] = (float)(x[d] * inv) * w[d - g0];
  }
}

typedef enum norm_kind { NORM_LAYER, NORM_ADALN, NORM_RMS } norm_kind_t;

typedef struct norm_job {
  norm_kind_t kind;
  const dit_tensor_t *x, *w, *b, *mod;
  dit_tensor_t *y;
  int64_t D, T, n_mod;
  int64_t G;     /* NORM_RMS: normalized chunks of a row (D for the whole row) */
  int per_token; /* mod [B, rows_e, n, D] (token rows picked by tg) rather than [B, n, D] */
  int shift, scale;
  double eps;
  float *w_f32, *b_f32; /* affine parameters widened once, or NULL */
  /* The unstored per-token table: tab_f32 [n, D] (widened once) + rows of e [B, rows_e, r_e*D],
   * token t of an item reading row dit_token_group_row(tg, t). */
  const dit_tensor_t *e;
  float *tab_f32;
  int64_t r_e, rows_e;
  dit_token_group_t tg;
  dit_cpu_scratch_t scratch;
} norm_job_t;

static void norm_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  norm_job_t *j = ctx;
  const int64_t D = j->D;
  float *tmp = dit_cpu_scratch_get(&j->scratch, worker);
  float *out = tmp + D;
  float *t1 = out + D, *t2 = t1 + D;
  for (int64_t r = begin; r < end; r++) {
    const float *x = dit_cpu_row_load(j->x->data, j->x->dtype, r * D, D, tmp);
    if (j->kind == NORM_RMS) {
      rms_row(x, D, j->G, j->w_f32, j->eps, out);
    } else {
      double sum = 0.0;
      for (int64_t d = 0; d < D; d++) sum += x[d];
      const double mean = sum / (double)D;
      double var = 0.0;
      for (int64_t d = 0; d < D; d++) {
        const double dv = x[d] - mean;
        var += dv * dv;
      }
      const double rstd = 1.0 / sqrt(var / (double)D + j->eps);
      for (int64_t d = 0; d < D; d++) out[d] = (float)((x[d] - mean) * rstd);
      if (j->kind == NORM_LAYER && j->w_f32) {
        for (int64_t d = 0; d < D; d++) out[d] = out[d] * j->w_f32[d] + j->b_f32[d];
      } else if (j->kind == NORM_ADALN && j->tab_f32) {
        /* mod_table's fp32 sums, kept in arrays so the expression below is the stored form's. */
        float *sc = t2 + D, *sh = sc + D;
        const int64_t eb = ((r / j->T) * j->rows_e + dit_token_group_row(j->tg, r % j->T)) * j->r_e * D;
        const float *es = dit_cpu_row_load(j->e->data, j->e->dtype, eb + (j->r_e == 1 ? 0 : j->scale) * D, D, t1);
        for (int64_t d = 0; d < D; d++) sc[d] = j->tab_f32[j->scale * D + d] + es[d];
        es = dit_cpu_row_load(j->e->data, j->e->dtype, eb + (j->r_e == 1 ? 0 : j->shift) * D, D, t1);
        for (int64_t d = 0; d < D; d++) sh[d] = j->tab_f32[j->shift * D + d] + es[d];
        for (int64_t d = 0; d < D; d++) out[d] = out[d] * (1.0f + sc[d]) + sh[d];
      } else if (j->kind == NORM_ADALN) {
        const int64_t b = j->per_token ? (r / j->T) * j->rows_e + dit_token_group_row(j->tg, r % j->T) : r / j->T,
                      base = b * j->n_mod * D;
        const float *scale = dit_cpu_row_load(j->mod->data, j->mod->dtype, base + j->scale * D, D, t1);
        const float *shift = dit_cpu_row_load(j->mod->data, j->mod->dtype, base + j->shift * D, D, t2);
        for (int64_t d = 0; d < D; d++) out[d] = out[d] * (1.0f + scale[d]) + shift[d];
      }
    }
    dit_cpu_row_store(j->y->data, j->y->dtype, r * D, out, D);
  }
}

/* Widens a [D] parameter vector to a fresh fp32 array. */
static dit_status_t widen(const char *op, const char *name, const dit_tensor_t *t, int64_t D,
                          float **out) {
  *out = malloc(sizeof(float) * (size_t)(D > 0 ? D : 1));
  if (!*out)
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: cannot allocate %lld floats for %s", op, (long long)D, name);
  const float *p = dit_cpu_row_load(t->data, t->dtype, 0, D, *out);
  if (p != *out) memcpy(*out, p, sizeof(float) * (size_t)D);
  return DIT_OK;
}

static dit_status_t run_norm(dit_cpu_t *c, const char *op, norm_job_t *j) {
  const int64_t rows = j->D > 0 ? dit_tensor_numel(j->x) / j->D : 0;
  dit_status_t s = DIT_OK;
  if (rows > 0) {
    s = dit_cpu_scratch_alloc(op, c, sizeof(float) * (size_t)((j->tab_f32 ? 6 : 4) * j->D), &j->scratch);
    if (!s) {
      dit_pool_parallel_for(dit_cpu_pool(c), rows, 8, norm_rows, j);
      dit_cpu_scratch_free(&j->scratch);
    }
  }
  free(j->w_f32);
  free(j->b_f32);
  free(j->tab_f32);
  return s;
}

static dit_status_t check_eps(const char *op, double eps) {
  if (!(eps >= 0) || !isfinite(eps))
    return DIT_ERR(INVALID_ARGUMENT, "%s: eps %g must be finite and non-negative", op, eps);
  return DIT_OK;
}

dit_status_t dit_cpu_layernorm(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w,
                               const dit_tensor_t *b, double eps, dit_tensor_t *y) {
  static const char *op = "layernorm";
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  DIT_RETURN_IF(check_eps(op, eps));
  if (x->rank < 1) return DIT_ERR(INVALID_ARGUMENT, "%s: x has rank 0, expected [..., D]", op);
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "y", y, "x", x));
  if ((w == NULL) != (b == NULL))
    return DIT_ERR(INVALID_ARGUMENT, "%s: w and b must be given together (w %s, b %s)", op,
                   w ? "given" : "NULL", b ? "given" : "NULL");
  const int64_t D = x->dims[x->rank - 1];
  if (w) {
    const int64_t want[1] = {D};
    DIT_RETURN_IF(dit_cpu_check_float(op, "w", w));
    DIT_RETURN_IF(dit_cpu_check_float(op, "b", b));
    DIT_RETURN_IF(dit_cpu_check_dims(op, "w", w, 1, want));
    DIT_RETURN_IF(dit_cpu_check_dims(op, "b", b, 1, want));
  }
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "w", w));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "b", b));
  norm_job_t j = {.kind = NORM_LAYER, .x = x, .w = w, .b = b, .y = y, .D = D, .eps = eps};
  if (w) {
    DIT_RETURN_IF(widen(op, "w", w, D, &j.w_f32));
    dit_status_t s = widen(op, "b", b, D, &j.b_f32);
    if (s) {
      free(j.w_f32);
      return s;
    }
  }
  return run_norm(c, op, &j);
}

/* adaln's x and y and eps, whichever form its modulation takes: float [B, T, D]. */
static dit_status_t check_adaln_xy(const char *op, const dit_tensor_t *x, const dit_tensor_t *y, double eps) {
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  DIT_RETURN_IF(check_eps(op, eps));
  if (x->rank != 3)
    return DIT_ERR(INVALID_ARGUMENT, "%s: x has dims %s, expected [B, T, D]", op, dit_cpu_dims_str(x, b1));
  return dit_cpu_check_same_dims(op, "y", y, "x", x);
}

static dit_status_t check_token_group(const char *op, dit_token_group_t tg) {
  if (tg.group < 1 || tg.offset < 0 || tg.offset >= tg.group)
    return DIT_ERR(INVALID_ARGUMENT, "%s: token group %lld from offset %lld, expected a group >= 1 and an offset below it", op,
                   (long long)tg.group, (long long)tg.offset);
  return DIT_OK;
}

/* A stored modulation of x [B, T, D]: float [B, n, D], or per token [B, R, n, D] with R the rows
 * of tg; sets its n. */
static dit_status_t check_mod(const char *op, const dit_tensor_t *x, const dit_tensor_t *mod, dit_token_group_t tg, int64_t *n) {
  DIT_RETURN_IF(dit_cpu_check_float(op, "mod", mod));
  const int per_token = mod->rank == 4;
  if (per_token) DIT_RETURN_IF(check_token_group(op, tg));
  const int64_t rows = per_token ? dit_token_group_rows(tg, x->dims[1]) : -1;
  const int64_t want[4] = {x->dims[0], per_token ? rows : -1, per_token ? -1 : x->dims[2], x->dims[2]};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "mod", mod, per_token ? 4 : 3, want));
  *n = mod->dims[mod->rank - 2];
  return DIT_OK;
}

dit_status_t dit_cpu_adaln(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *mod, dit_token_group_t tg,
                           double eps, int shift, int scale, dit_tensor_t *y) {
  static const char *op = "adaln";
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(check_adaln_xy(op, x, y, eps));
  int64_t n;
  DIT_RETURN_IF(check_mod(op, x, mod, tg, &n));
  const int per_token = mod->rank == 4;
  if (shift < 0 || shift >= n || scale < 0 || scale >= n)
    return DIT_ERR(INVALID_ARGUMENT, "%s: shift %d / scale %d out of range for mod %s (n = %lld)", op,
                   shift, scale, dit_cpu_dims_str(mod, b1), (long long)n);
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "mod", mod));
  norm_job_t j = {.kind = NORM_ADALN, .x = x, .mod = mod, .y = y, .D = x->dims[2], .T = x->dims[1], .n_mod = n,
                  .per_token = per_token, .shift = shift, .scale = scale, .eps = eps, .rows_e = mod->dims[1], .tg = tg};
  return run_norm(c, op, &j);
}

/* Checks the fused per-token operands of x [B, T, D]: table [1, n, D], e [B, T, r*D] with
 * r = 1 or n; sets n and r. */
static dit_status_t check_tok(const char *op, const dit_tensor_t *x, const dit_tensor_t *table, const dit_tensor_t *e,
                              dit_token_group_t tg, int64_t *n, int64_t *r) {
  char b1[DIT_CPU_DIMS_BUF], b2[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "table", table));
  DIT_RETURN_IF(dit_cpu_check_float(op, "e", e));
  const int64_t D = x->dims[2];
  if (table->rank != 3 || table->dims[0] != 1 || table->dims[2] != D)
    return DIT_ERR(INVALID_ARGUMENT, "%s: table has dims %s, expected [1, n, %lld]", op, dit_cpu_dims_str(table, b1), (long long)D);
  *n = table->dims[1];
  DIT_RETURN_IF(check_token_group(op, tg));
  const int64_t rows = dit_token_group_rows(tg, x->dims[1]);
  if (e->rank != 3 || e->dims[0] != x->dims[0] || e->dims[1] != rows || (e->dims[2] != D && e->dims[2] != *n * D))
    return DIT_ERR(INVALID_ARGUMENT, "%s: e has dims %s, expected [%lld, %lld, %lld or %lld] for x %s", op, dit_cpu_dims_str(e, b1),
                   (long long)x->dims[0], (long long)rows, (long long)D, (long long)(*n * D), dit_cpu_dims_str(x, b2));
  *r = e->dims[2] == D ? 1 : *n;
  return DIT_OK;
}

dit_status_t dit_cpu_adaln_tok(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *table,
                               const dit_tensor_t *e, dit_token_group_t tg, double eps, int shift, int scale, dit_tensor_t *y) {
  static const char *op = "adaln";
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(check_adaln_xy(op, x, y, eps));
  int64_t n, r;
  DIT_RETURN_IF(check_tok(op, x, table, e, tg, &n, &r));
  if (shift < 0 || shift >= n || scale < 0 || scale >= n)
    return DIT_ERR(INVALID_ARGUMENT, "%s: shift %d / scale %d out of range for table %s (n = %lld)", op, shift, scale,
                   dit_cpu_dims_str(table, b1), (long long)n);
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "table", table));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "e", e));
  norm_job_t j = {.kind = NORM_ADALN, .x = x, .e = e, .y = y, .D = x->dims[2], .T = x->dims[1], .n_mod = n,
                  .per_token = 1, .shift = shift, .scale = scale, .eps = eps, .r_e = r, .rows_e = e->dims[1], .tg = tg};
  DIT_RETURN_IF(widen(op, "table", table, n * x->dims[2], &j.tab_f32));
  return run_norm(c, op, &j);
}

dit_status_t dit_cpu_rmsnorm(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w,
                             double eps, dit_tensor_t *y) {
  /* One group of the whole row; a malformed x is refused by the checks before its group matters. */
  const int ok = x && x->rank >= 1 && x->rank <= DIT_MAX_RANK;
  return dit_cpu_rmsnorm_group(c, x, w, ok ? x->dims[x->rank - 1] : 1, eps, y);
}

/* rmsnorm's operands beyond x and y: w float [group], group dividing x's last dim, eps; w not
 * aliasing y. Checked alike for rmsnorm and for the ropes that fold it in. */
static dit_status_t check_rms(const char *op, const dit_tensor_t *x, const dit_tensor_t *w, int64_t group, double eps,
                              const dit_tensor_t *y) {
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "w", w));
  DIT_RETURN_IF(check_eps(op, eps));
  const int64_t D = x->dims[x->rank - 1];
  if (group < 1 || D % group)
    return DIT_ERR(INVALID_ARGUMENT, "%s: group %lld does not divide the last dim of x %s", op, (long long)group,
                   dit_cpu_dims_str(x, b1));
  const int64_t want[1] = {group};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "w", w, 1, want));
  return dit_cpu_check_no_alias(op, "y", y, "w", w);
}

dit_status_t dit_cpu_rmsnorm_group(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w,
                                   int64_t group, double eps, dit_tensor_t *y) {
  static const char *op = "rmsnorm";
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  if (x->rank < 1) return DIT_ERR(INVALID_ARGUMENT, "%s: x has rank 0, expected [..., D]", op);
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "y", y, "x", x));
  DIT_RETURN_IF(check_rms(op, x, w, group, eps, y));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  norm_job_t j = {.kind = NORM_RMS, .x = x, .w = w, .y = y, .D = x->dims[x->rank - 1], .G = group, .eps = eps};
  DIT_RETURN_IF(widen(op, "w", w, group, &j.w_f32));
  return run_norm(c, op, &j);
}

/* ---- group norm ---------------------------------------------------------------------------- */

/* Two passes: the statistics of every (item, group), each over its pixels and channels in double
 * (or merged from groupnorm_stats' slices), then the rows (pixels) normalized, each reading its
 * items' statistics. */
typedef struct group_norm_job {
  const dit_tensor_t *x;
  dit_tensor_t *y;
  int64_t P, C, G; /* pixels per item, channels, groups */
  int64_t S;       /* groupnorm_stats: slices of the pixels */
  float *stats;    /* groupnorm_stats' output, or groupnorm_apply's input [B, S, G, 2] */
  double eps;
  float *w_f32, *b_f32;
  double *mean, *rstd; /* [B * G] */
  dit_cpu_scratch_t scratch;
} group_norm_job_t;

/* Mean and sum of squared deviations of group c0's channels over pixels [p0, p1) of item b. */
static void group_norm_moments(const group_norm_job_t *j, int64_t b, int64_t c0, int64_t p0, int64_t p1, float *tmp, double *mean,
                               double *m2) {
  const int64_t cg = j->C / j->G;
  double sum = 0.0, var = 0.0;
  for (int64_t p = p0; p < p1; p++) {
    const float *x = dit_cpu_row_load(j->x->data, j->x->dtype, (b * j->P + p) * j->C + c0, cg, tmp);
    for (int64_t c = 0; c < cg; c++) sum += x[c];
  }
  *mean = sum / (double)((p1 - p0) * cg);
  for (int64_t p = p0; p < p1; p++) {
    const float *x = dit_cpu_row_load(j->x->data, j->x->dtype, (b * j->P + p) * j->C + c0, cg, tmp);
    for (int64_t c = 0; c < cg; c++) var += (x[c] - *mean) * (x[c] - *mean);
  }
  *m2 = var;
}

static void group_norm_stats(void *ctx, int64_t begin, int64_t end, int worker) {
  group_norm_job_t *j = ctx;
  const int64_t cg = j->C / j->G;
  float *tmp = dit_cpu_scratch_get(&j->scratch, worker);
  for (int64_t i = begin; i < end; i++) {
    double mean, var;
    group_norm_moments(j, i / j->G, (i % j->G) * cg, 0, j->P, tmp, &mean, &var);
    j->mean[i] = mean;
    j->rstd[i] = 1.0 / sqrt(var / (double)(j->P * cg) + j->eps);
  }
}

/* Slice s of S over P pixels: [s*P/S, (s+1)*P/S), as groupnorm_stats defines it. */
static int64_t group_norm_slice_start(int64_t s, int64_t P, int64_t S) { return s * P / S; }

static void group_norm_slices(void *ctx, int64_t begin, int64_t end, int worker) {
  group_norm_job_t *j = ctx;
  float *tmp = dit_cpu_scratch_get(&j->scratch, worker);
  for (int64_t i = begin; i < end; i++) { /* i = (b * S + s) * G + g */
    const int64_t g = i % j->G, s = i / j->G % j->S, b = i / (j->G * j->S);
    double mean, m2;
    group_norm_moments(j, b, g * (j->C / j->G), group_norm_slice_start(s, j->P, j->S), group_norm_slice_start(s + 1, j->P, j->S), tmp,
                       &mean, &m2);
    j->stats[2 * i] = (float)mean;
    j->stats[2 * i + 1] = (float)m2;
  }
}

/* Each (item, group)'s statistics from its slices, in double: the count-weighted mean, then the
 * slices' M2 plus their means' squared deviations from it. */
static void group_norm_merge(group_norm_job_t *j, int64_t B) {
  const int64_t cg = j->C / j->G, S = j->S;
  for (int64_t b = 0; b < B; b++)
    for (int64_t g = 0; g < j->G; g++) {
      const float *st = j->stats + (b * S * j->G + g) * 2;
      double mean = 0.0, m2 = 0.0;
      for (int64_t s = 0; s < S; s++)
        mean += (double)(group_norm_slice_start(s + 1, j->P, S) - group_norm_slice_start(s, j->P, S)) * st[s * j->G * 2];
      mean /= (double)j->P; /* each slice's pixels weigh the same number of channels */
      for (int64_t s = 0; s < S; s++) {
        const double n = (double)((group_norm_slice_start(s + 1, j->P, S) - group_norm_slice_start(s, j->P, S)) * cg);
        const double d = st[s * j->G * 2] - mean;
        m2 += st[s * j->G * 2 + 1] + n * d * d;
      }
      j->mean[b * j->G + g] = mean;
      j->rstd[b * j->G + g] = 1.0 / sqrt(m2 / (double)(j->P * cg) + j->eps);
    }
}

static void group_norm_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  group_norm_job_t *j = ctx;
  const int64_t C = j->C, cg = C / j->G;
  float *tmp = dit_cpu_scratch_get(&j->scratch, worker), *out = tmp + C;
  for (int64_t r = begin; r < end; r++) {
    const int64_t s0 = r / j->P * j->G;
    const float *x = dit_cpu_row_load(j->x->data, j->x->dtype, r * C, C, tmp);
    for (int64_t c = 0; c < C; c++) {
      const int64_t s = s0 + c / cg;
      out[c] = (float)((x[c] - j->mean[s]) * j->rstd[s]) * j->w_f32[c] + j->b_f32[c];
    }
    dit_cpu_row_store(j->y->data, j->y->dtype, r * C, out, C);
  }
}

/* x float [B, ..., C] of rank >= 3 with `groups` dividing C; its pixels per item in *P. */
static dit_status_t check_group_norm_x(const char *op, const dit_tensor_t *x, int64_t groups, int64_t *P) {
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  if (x->rank < 3) return DIT_ERR(INVALID_ARGUMENT, "%s: x has dims %s, expected [B, ..., C] of rank >= 3", op, dit_cpu_dims_str(x, b1));
  const int64_t C = x->dims[x->rank - 1];
  if (groups < 1 || C % groups)
    return DIT_ERR(INVALID_ARGUMENT, "%s: %lld groups do not divide the channels of x %s", op, (long long)groups, dit_cpu_dims_str(x, b1));
  *P = 1;
  for (int d = 1; d < x->rank - 1; d++) *P *= x->dims[d];
  return DIT_OK;
}

/* The normalization given x, w, b, y (checked here) and, with j->stats, the slices to merge;
 * without, the statistics computed from x. */
static dit_status_t group_norm_run(dit_cpu_t *c, const char *op, group_norm_job_t *j, const dit_tensor_t *w, const dit_tensor_t *b) {
  const dit_tensor_t *x = j->x;
  const int64_t C = x->dims[x->rank - 1], want[1] = {C};
  DIT_RETURN_IF(dit_cpu_check_float(op, "w", w));
  DIT_RETURN_IF(dit_cpu_check_float(op, "b", b));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", j->y));
  DIT_RETURN_IF(check_eps(op, j->eps));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "y", j->y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_dims(op, "w", w, 1, want));
  DIT_RETURN_IF(dit_cpu_check_dims(op, "b", b, 1, want));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", j->y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", j->y, "w", w));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", j->y, "b", b));
  const int64_t B = x->dims[0];
  if (!j->P || !B || !C) return DIT_OK;
  dit_status_t s = widen(op, "w", w, C, &j->w_f32);
  if (!s) s = widen(op, "b", b, C, &j->b_f32);
  j->mean = s ? NULL : malloc(sizeof(double) * (size_t)(2 * B * j->G));
  if (!s && !j->mean) s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: cannot allocate the statistics of %lld groups", op, (long long)(B * j->G));
  if (!s) s = dit_cpu_scratch_alloc(op, c, sizeof(float) * (size_t)(2 * C), &j->scratch);
  if (!s) {
    j->rstd = j->mean + B * j->G;
    if (j->stats) group_norm_merge(j, B);
    else dit_pool_parallel_for(dit_cpu_pool(c), B * j->G, 1, group_norm_stats, j);
    dit_pool_parallel_for(dit_cpu_pool(c), B * j->P, 8, group_norm_rows, j);
    dit_cpu_scratch_free(&j->scratch);
  }
  free(j->mean);
  free(j->w_f32);
  free(j->b_f32);
  return s;
}

dit_status_t dit_cpu_groupnorm(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w, const dit_tensor_t *b, int64_t groups,
                               double eps, dit_tensor_t *y) {
  static const char *op = "groupnorm";
  group_norm_job_t j = {.x = x, .y = y, .G = groups, .eps = eps};
  DIT_RETURN_IF(check_group_norm_x(op, x, groups, &j.P));
  j.C = x->dims[x->rank - 1];
  return group_norm_run(c, op, &j, w, b);
}

dit_status_t dit_cpu_groupnorm_stats(dit_cpu_t *c, const dit_tensor_t *x, int64_t groups, int64_t slices, dit_tensor_t *stats) {
  static const char *op = "groupnorm_stats";
  char b1[DIT_CPU_DIMS_BUF];
  group_norm_job_t j = {.x = x, .G = groups, .S = slices};
  DIT_RETURN_IF(check_group_norm_x(op, x, groups, &j.P));
  j.C = x->dims[x->rank - 1];
  if (slices < 1 || slices > j.P)
    return DIT_ERR(INVALID_ARGUMENT, "%s: %lld slices of the %lld pixels of x %s, expected 1..%lld", op, (long long)slices, (long long)j.P,
                   dit_cpu_dims_str(x, b1), (long long)j.P);
  const int64_t want[4] = {x->dims[0], slices, groups, 2};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "stats", stats, 4, want));
  if (stats->dtype != DIT_F32) return DIT_ERR(INVALID_ARGUMENT, "%s: stats has dtype %s, expected f32", op, dit_dtype_name(stats->dtype));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "stats", stats, "x", x));
  if (!dit_tensor_numel(stats)) return DIT_OK;
  j.stats = stats->data;
  DIT_RETURN_IF(dit_cpu_scratch_alloc(op, c, sizeof(float) * (size_t)j.C, &j.scratch));
  dit_pool_parallel_for(dit_cpu_pool(c), dit_tensor_numel(stats) / 2, 1, group_norm_slices, &j);
  dit_cpu_scratch_free(&j.scratch);
  return DIT_OK;
}

dit_status_t dit_cpu_groupnorm_apply(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *stats, const dit_tensor_t *w,
                                     const dit_tensor_t *b, double eps, dit_tensor_t *y) {
  static const char *op = "groupnorm_apply";
  char b1[DIT_CPU_DIMS_BUF], b2[DIT_CPU_DIMS_BUF];
  group_norm_job_t j = {.x = x, .y = y, .eps = eps};
  DIT_RETURN_IF(dit_cpu_check_any(op, "stats", stats));
  if (stats->dtype != DIT_F32 || stats->rank != 4 || stats->dims[3] != 2)
    return DIT_ERR(INVALID_ARGUMENT, "%s: stats %s %s, expected f32 [B, S, G, 2]", op, dit_dtype_name(stats->dtype), dit_cpu_dims_str(stats, b1));
  j.S = stats->dims[1];
  j.G = stats->dims[2];
  DIT_RETURN_IF(check_group_norm_x(op, x, j.G, &j.P));
  j.C = x->dims[x->rank - 1];
  if (stats->dims[0] != x->dims[0] || j.S < 1 || j.S > j.P)
    return DIT_ERR(INVALID_ARGUMENT, "%s: stats %s, expected [%lld, 1..%lld slices, %lld, 2] for x %s", op, dit_cpu_dims_str(stats, b1),
                   (long long)x->dims[0], (long long)j.P, (long long)j.G, dit_cpu_dims_str(x, b2));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "stats", stats));
  j.stats = stats->data;
  return group_norm_run(c, op, &j, w, b);
}

/* ---- gated residual ------------------------------------------------------------------------ */

typedef struct gated_job {
  const dit_tensor_t *x, *y, *mod;
  dit_tensor_t *out;
  int64_t T, D, n;
  int per_token; /* mod [B, rows_e, n, D] (token rows picked by tg) rather than [B, n, D] */
  int gate;
  const dit_tensor_t *e; /* with tab_f32: the unstored per-token gate tab_f32[gate] + e (rows as norm_job's) */
  const float *tab_f32;
  int64_t r_e, rows_e;
  dit_token_group_t tg;
} gated_job_t;

static void gated_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  gated_job_t *j = ctx;
  float tx[DIT_EW_CHUNK], ty[DIT_EW_CHUNK], tg[DIT_EW_CHUNK], tt[DIT_EW_CHUNK], o[DIT_EW_CHUNK];
  for (int64_t r = begin; r < end; r++) {
    const int64_t b = j->per_token ? (r / j->T) * j->rows_e + dit_token_group_row(j->tg, r % j->T) : r / j->T;
    for (int64_t s = 0; s < j->D; s += DIT_EW_CHUNK) {
      const int64_t n = j->D - s < DIT_EW_CHUNK ? j->D - s : DIT_EW_CHUNK;
      const float *x = dit_cpu_row_load(j->x->data, j->x->dtype, r * j->D + s, n, tx);
      const float *y = dit_cpu_row_load(j->y->data, j->y->dtype, r * j->D + s, n, ty);
      const float *g;
      if (j->tab_f32) {
        const int64_t er = (r / j->T) * j->rows_e + dit_token_group_row(j->tg, r % j->T);
        const float *es = dit_cpu_row_load(j->e->data, j->e->dtype, (er * j->r_e + (j->r_e == 1 ? 0 : j->gate)) * j->D + s, n, tg);
        for (int64_t i = 0; i < n; i++) tt[i] = j->tab_f32[j->gate * j->D + s + i] + es[i];
        g = tt;
      } else {
        g = dit_cpu_row_load(j->mod->data, j->mod->dtype, (b * j->n + j->gate) * j->D + s, n, tg);
      }
      for (int64_t i = 0; i < n; i++) o[i] = x[i] + y[i] * g[i];
      dit_cpu_row_store(j->out->data, j->out->dtype, r * j->D + s, o, n);
    }
  }
}

/* gated_add's x, y and out, whichever form its modulation takes: float [B, T, D], out apart. */
static dit_status_t check_gated_xy(const char *op, const dit_tensor_t *x, const dit_tensor_t *y, const dit_tensor_t *out) {
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  DIT_RETURN_IF(dit_cpu_check_float(op, "out", out));
  if (x->rank != 3)
    return DIT_ERR(INVALID_ARGUMENT, "%s: x has dims %s, expected [B, T, D]", op, dit_cpu_dims_str(x, b1));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "out", out, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, "x", x));
  return dit_cpu_check_no_alias(op, "out", out, "y", y);
}

dit_status_t dit_cpu_gated_add(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *y,
                               const dit_tensor_t *mod, dit_token_group_t tg, int gate, dit_tensor_t *out) {
  static const char *op = "gated_add";
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(check_gated_xy(op, x, y, out));
  int64_t n_mod;
  DIT_RETURN_IF(check_mod(op, x, mod, tg, &n_mod));
  if (gate < 0 || gate >= n_mod)
    return DIT_ERR(INVALID_ARGUMENT, "%s: gate %d out of range for mod %s (n = %lld)", op, gate,
                   dit_cpu_dims_str(mod, b1), (long long)n_mod);
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, "mod", mod));
  gated_job_t j = {.x = x, .y = y, .mod = mod, .out = out, .T = x->dims[1], .D = x->dims[2], .n = n_mod,
                   .per_token = mod->rank == 4, .gate = gate, .rows_e = mod->dims[1], .tg = tg};
  const int64_t grain = j.D > 0 ? (DIT_EW_GRAIN + j.D - 1) / j.D : 1;
  dit_pool_parallel_for(dit_cpu_pool(c), x->dims[0] * j.T, grain, gated_rows, &j);
  return DIT_OK;
}

dit_status_t dit_cpu_gated_add_tok(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *y,
                                   const dit_tensor_t *table, const dit_tensor_t *e, dit_token_group_t tg, int gate,
                                   dit_tensor_t *out) {
  static const char *op = "gated_add";
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(check_gated_xy(op, x, y, out));
  int64_t n, r;
  DIT_RETURN_IF(check_tok(op, x, table, e, tg, &n, &r));
  if (gate < 0 || gate >= n)
    return DIT_ERR(INVALID_ARGUMENT, "%s: gate %d out of range for table %s (n = %lld)", op, gate, dit_cpu_dims_str(table, b1),
                   (long long)n);
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, "table", table));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, "e", e));
  float *tab;
  DIT_RETURN_IF(widen(op, "table", table, n * x->dims[2], &tab));
  gated_job_t j = {.x = x, .y = y, .out = out, .T = x->dims[1], .D = x->dims[2], .n = n, .per_token = 1, .gate = gate,
                   .e = e, .tab_f32 = tab, .r_e = r, .rows_e = e->dims[1], .tg = tg};
  const int64_t grain = j.D > 0 ? (DIT_EW_GRAIN + j.D - 1) / j.D : 1;
  dit_pool_parallel_for(dit_cpu_pool(c), x->dims[0] * j.T, grain, gated_rows, &j);
  free(tab);
  return DIT_OK;
}

dit_status_t dit_cpu_token_rows(const dit_tensor_t *x, int64_t group, dit_tensor_t *y) {
  static const char *op = "token_rows";
  char b1[DIT_CPU_DIMS_BUF], b2[DIT_CPU_DIMS_BUF];
  if (x->rank != 2 || group < 1 || x->dims[1] % group || y->rank != 2 || y->dtype != x->dtype || y->dims[0] != x->dims[0] ||
      y->dims[1] != x->dims[1] / group)
    return DIT_ERR(INVALID_ARGUMENT, "%s: x %s and y %s of group %lld, expected [B, T] and [B, T / group] of one dtype", op,
                   dit_cpu_dims_str(x, b1), dit_cpu_dims_str(y, b2), (long long)group);
  const size_t es = dit_dtype_size(x->dtype);
  const int64_t rows = y->dims[0] * y->dims[1];
  for (int64_t r = 0; r < rows; r++) memcpy((char *)y->data + (size_t)r * es, (const char *)x->data + (size_t)(r * group) * es, es);
  return DIT_OK;
}

/* ---- rope ---------------------------------------------------------------------------------- */

/* n interleaved pairs of x rotated by their (cos, sin) pairs in cs: (x0 c - x1 s, x0 s + x1 c). */
static void rotate_pairs(const float *x, const float *cs, int64_t n, float *out) {
  for (int64_t q = 0; q < n; q++) {
    const float x0 = x[2 * q], x1 = x[2 * q + 1], cv = cs[2 * q], sv = cs[2 * q + 1];
    out[2 * q] = x0 * cv - x1 * sv;
    out[2 * q + 1] = x0 * sv + x1 * cv;
  }
}

/* A rope's folded RMSNorm (base/ops.def): the weight widened to fp32, its group and eps; w_f32
 * NULL when the rope has none. */
typedef struct rope_norm {
  float *w_f32;
  int64_t G;
  double eps;
} rope_norm_t;

/* Checks a rope's folded norm against x and y and widens its weight; none: an empty rope_norm_t. */
static dit_status_t rope_norm_prepare(const char *op, const dit_cpu_rope_norm_t *norm, const dit_tensor_t *x, const dit_tensor_t *y,
                                      rope_norm_t *out) {
  *out = (rope_norm_t){0};
  if (!norm) return DIT_OK;
  DIT_RETURN_IF(check_rms(op, x, norm->w, norm->group, norm->eps, y));
  out->G = norm->group;
  out->eps = norm->eps;
  return widen(op, "w", norm->w, norm->group, &out->w_f32);
}

/* The row of HD the rope rotates: x itself, or with a folded norm x normalized as rmsnorm does
 * and rounded to y's dtype as rmsnorm's stored output was, in out. */
static const float *rope_input(const rope_norm_t *n, const float *x, int64_t HD, dit_dtype_t dt, float *out) {
  if (!n->w_f32) return x;
  rms_row(x, HD, n->G, n->w_f32, n->eps, out);
  for (int64_t d = 0; d < HD; d++) out[d] = dit_cpu_round1(dt, out[d]);
  return out;
}

typedef struct rope_job {
  const dit_tensor_t *x;
  dit_tensor_t *y;
  rope_norm_t norm;
  int64_t ntok, heads, Dh;
  int64_t t0, count; /* this tensor holds tokens [t0, t0 + count) of the f*h*w grid */
  int f, h, w, pairs[3];
  const float *cs[3]; /* per part: [positions][pairs][2] = (cos, sin) */
  dit_cpu_scratch_t scratch;
} rope_job_t;

static void rope_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  rope_job_t *j = ctx;
  const int64_t HD = j->heads * j->Dh;
  float *tmp = dit_cpu_scratch_get(&j->scratch, worker);
  float *out = tmp + HD, *normed = out + HD;
  for (int64_t r = begin; r < end; r++) {
    const int64_t tok = j->t0 + r % j->count;
    const int64_t pos[3] = {tok / ((int64_t)j->h * j->w), (tok / j->w) % j->h, tok % j->w};
    const float *x = rope_input(&j->norm, dit_cpu_row_load(j->x->data, j->x->dtype, r * HD, HD, tmp), HD, j->y->dtype, normed);
    for (int64_t hd = 0; hd < j->heads; hd++) {
      const float *xh = x + hd * j->Dh;
      float *oh = out + hd * j->Dh;
      int64_t p = 0;
      for (int part = 0; part < 3; p += j->pairs[part], part++)
        rotate_pairs(xh + 2 * p, j->cs[part] + pos[part] * j->pairs[part] * 2, j->pairs[part], oh + 2 * p);
    }
    dit_cpu_row_store(j->y->data, j->y->dtype, r * HD, out, HD);
  }
}

dit_status_t dit_cpu_rope(dit_cpu_t *c, const dit_tensor_t *x, int heads, int f, int h, int w,
                          int t_dim, int h_dim, int w_dim, double theta, int64_t t0, dit_tensor_t *y) {
  return dit_cpu_rope_normed(c, x, NULL, heads, f, h, w, t_dim, h_dim, w_dim, theta, t0, y);
}

dit_status_t dit_cpu_rope_normed(dit_cpu_t *c, const dit_tensor_t *x, const dit_cpu_rope_norm_t *norm, int heads, int f, int h,
                                 int w, int t_dim, int h_dim, int w_dim, double theta, int64_t t0, dit_tensor_t *y) {
  static const char *op = "rope";
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  if (heads < 1 || f < 0 || h < 0 || w < 0)
    return DIT_ERR(INVALID_ARGUMENT, "%s: heads %d must be positive and grid (%d, %d, %d) non-negative",
                   op, heads, f, h, w);
  if (t_dim < 0 || h_dim < 0 || w_dim < 0 || t_dim % 2 || h_dim % 2 || w_dim % 2)
    return DIT_ERR(INVALID_ARGUMENT, "%s: part dims (t %d, h %d, w %d) must be even and non-negative",
                   op, t_dim, h_dim, w_dim);
  if (!(theta > 0) || !isfinite(theta))
    return DIT_ERR(INVALID_ARGUMENT, "%s: theta %g must be positive and finite", op, theta);
  if (x->rank != 3)
    return DIT_ERR(INVALID_ARGUMENT, "%s: x has dims %s, expected [B, f*h*w, heads*Dh]", op,
                   dit_cpu_dims_str(x, b1));
  const int64_t Dh = (int64_t)t_dim + h_dim + w_dim, ntok = (int64_t)f * h * w;
  if (t0 < 0 || x->dims[1] + t0 > ntok || x->dims[2] != heads * Dh)
    return DIT_ERR(INVALID_ARGUMENT,
                   "%s: x has dims %s from token %lld, expected [B, %lld (f*h*w = %d*%d*%d), %lld (heads %d * Dh %lld = %d+%d+%d)]",
                   op, dit_cpu_dims_str(x, b1), (long long)t0, (long long)ntok, f, h, w, (long long)(heads * Dh),
                   heads, (long long)Dh, t_dim, h_dim, w_dim);
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  const int64_t rows = x->dims[0] * x->dims[1];
  if (rows == 0 || Dh == 0) {
    /* Nothing rotates: a zero-width head dim leaves an empty row. */
    return DIT_OK;
  }

  rope_job_t j = {.x = x, .y = y, .ntok = ntok, .heads = heads, .Dh = Dh, .t0 = t0, .count = x->dims[1], .f = f, .h = h, .w = w,
                  .pairs = {t_dim / 2, h_dim / 2, w_dim / 2}};
  DIT_RETURN_IF(rope_norm_prepare(op, norm, x, y, &j.norm));
  const int extent[3] = {f, h, w};
  size_t total = 0;
  for (int p = 0; p < 3; p++) total += (size_t)extent[p] * (size_t)j.pairs[p] * 2;
  float *tab = malloc(sizeof(float) * (total ? total : 1));
  if (!tab) {
    free(j.norm.w_f32);
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: cannot allocate %zu floats of tables", op, total);
  }
  /* Frequencies, angles and cos/sin in double, each rounded once to float at the end. */
  float *dst = tab;
  const int dims[3] = {t_dim, h_dim, w_dim};
  for (int p = 0; p < 3; p++) {
    j.cs[p] = dst;
    for (int pos = 0; pos < extent[p]; pos++)
      for (int q = 0; q < j.pairs[p]; q++) {
        const double freq = 1.0 / pow(theta, (double)(2 * q) / (double)dims[p]);
        const double ang = (double)pos * freq;
        *dst++ = (float)cos(ang);
        *dst++ = (float)sin(ang);
      }
  }
  dit_status_t s = dit_cpu_scratch_alloc(op, c, sizeof(float) * (size_t)(3 * heads * Dh), &j.scratch);
  if (!s) {
    dit_pool_parallel_for(dit_cpu_pool(c), rows, 16, rope_rows, &j);
    dit_cpu_scratch_free(&j.scratch);
  }
  free(tab);
  free(j.norm.w_f32);
  return s;
}

/* ---- rope from a table --------------------------------------------------------------------- */

typedef struct rope_table_job {
  const dit_tensor_t *x, *cs;
  dit_tensor_t *y;
  rope_norm_t norm;
  int64_t T, heads, Dh;
  dit_cpu_scratch_t scratch;
} rope_table_job_t;

static void rope_table_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  rope_table_job_t *j = ctx;
  const int64_t HD = j->heads * j->Dh;
  float *tmp = dit_cpu_scratch_get(&j->scratch, worker);
  float *out = tmp + HD, *normed = out + HD;
  for (int64_t r = begin; r < end; r++) {
    const float *x = rope_input(&j->norm, dit_cpu_row_load(j->x->data, j->x->dtype, r * HD, HD, tmp), HD, j->y->dtype, normed);
    const float *cs = (const float *)j->cs->data + (r % j->T) * j->Dh;
    for (int64_t hd = 0; hd < j->heads; hd++) rotate_pairs(x + hd * j->Dh, cs, j->Dh / 2, out + hd * j->Dh);
    dit_cpu_row_store(j->y->data, j->y->dtype, r * HD, out, HD);
  }
}

dit_status_t dit_cpu_rope_table(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *cs, int64_t heads,
                                dit_tensor_t *y) {
  return dit_cpu_rope_table_normed(c, x, cs, NULL, heads, y);
}

dit_status_t dit_cpu_rope_table_normed(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *cs, const dit_cpu_rope_norm_t *norm,
                                       int64_t heads, dit_tensor_t *y) {
  static const char *op = "rope_table";
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  DIT_RETURN_IF(dit_cpu_check_any(op, "cs", cs));
  if (cs->dtype != DIT_F32) return DIT_ERR(INVALID_ARGUMENT, "%s: cs has dtype %s, expected f32", op, dit_dtype_name(cs->dtype));
  if (x->rank != 3 || heads < 1 || x->dims[2] % heads || (x->dims[2] / heads) % 2)
    return DIT_ERR(INVALID_ARGUMENT, "%s: x has dims %s, expected [B, T, heads * Dh] with heads = %lld and Dh even", op,
                   dit_cpu_dims_str(x, b1), (long long)heads);
  const int64_t T = x->dims[1], Dh = x->dims[2] / heads;
  const int64_t want[2] = {T, Dh};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "cs", cs, 2, want));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "cs", cs));
  const int64_t rows = x->dims[0] * T;
  if (rows == 0 || Dh == 0) return DIT_OK;
  rope_table_job_t j = {.x = x, .cs = cs, .y = y, .T = T, .heads = heads, .Dh = Dh};
  DIT_RETURN_IF(rope_norm_prepare(op, norm, x, y, &j.norm));
  dit_status_t s = dit_cpu_scratch_alloc(op, c, sizeof(float) * (size_t)(3 * x->dims[2]), &j.scratch);
  if (!s) {
    dit_pool_parallel_for(dit_cpu_pool(c), rows, 16, rope_table_rows, &j);
    dit_cpu_scratch_free(&j.scratch);
  }
  free(j.norm.w_f32);
  return s;
}

/* ---- reshape and concat -------------------------------------------------------------------- */

dit_status_t dit_cpu_key_bound(dit_cpu_t *c, const dit_tensor_t *mask, int64_t offset, dit_tensor_t *out) {
  static const char *op = "key_bound";
  (void)c;
  DIT_RETURN_IF(dit_cpu_check_any(op, "mask", mask));
  DIT_RETURN_IF(dit_cpu_check_any(op, "out", out));
  const int64_t md[2] = {-1, -1};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "mask", mask, 2, md));
  const int64_t B = mask->dims[0], L = mask->dims[1], od[1] = {B};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "out", out, 1, od));
  if (out->dtype != DIT_I32) return DIT_ERR(INVALID_ARGUMENT, "%s: out has dtype %s, expected i32", op, dit_dtype_name(out->dtype));
  if (offset < 0 || offset > INT32_MAX - L)
    return DIT_ERR(INVALID_ARGUMENT, "%s: offset %lld is outside [0, %lld] for masks of %lld entries", op, (long long)offset,
                   (long long)(INT32_MAX - L), (long long)L);
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, "mask", mask));
  const size_t row = (size_t)L * dit_dtype_size(mask->dtype);
  for (int64_t b = 0; b < B; b++)
    ((int32_t *)out->data)[b] = (int32_t)(offset + dit_mask_prefix((const char *)mask->data + (size_t)b * row, mask->dtype, L, NULL));
  return DIT_OK;
}

dit_status_t dit_cpu_reshape(dit_cpu_t *c, const dit_tensor_t *x, dit_tensor_t *y) {
  static const char *op = "reshape";
  char b1[DIT_CPU_DIMS_BUF], b2[DIT_CPU_DIMS_BUF];
  (void)c;
  DIT_RETURN_IF(dit_cpu_check_any(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_any(op, "y", y));
  if (x->dtype != y->dtype || dit_tensor_numel(x) != dit_tensor_numel(y))
    return DIT_ERR(INVALID_ARGUMENT, "%s: y %s %s must hold x's %lld elements of %s (x %s)", op, dit_dtype_name(y->dtype),
                   dit_cpu_dims_str(y, b1), (long long)dit_tensor_numel(x), dit_dtype_name(x->dtype), dit_cpu_dims_str(x, b2));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  if (dit_tensor_numel(x)) memcpy(y->data, x->data, dit_tensor_nbytes(x));
  return DIT_OK;
}

typedef struct concat_job {
  const char *a, *b;
  char *y;
  size_t row_a, row_b; /* bytes of a and b per index of the dims before the concatenated one */
} concat_job_t;

static void concat_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  concat_job_t *j = ctx;
  for (int64_t o = begin; o < end; o++) {
    char *dst = j->y + (size_t)o * (j->row_a + j->row_b);
    memcpy(dst, j->a + (size_t)o * j->row_a, j->row_a);
    memcpy(dst + j->row_a, j->b + (size_t)o * j->row_b, j->row_b);
  }
}

dit_status_t dit_cpu_concat(dit_cpu_t *c, const dit_tensor_t *a, const dit_tensor_t *b, int64_t dim,
                            dit_tensor_t *y) {
  static const char *op = "concat";
  char b1[DIT_CPU_DIMS_BUF], b2[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_any(op, "a", a));
  DIT_RETURN_IF(dit_cpu_check_any(op, "b", b));
  DIT_RETURN_IF(dit_cpu_check_any(op, "y", y));
  if (a->dtype != b->dtype || a->dtype != y->dtype)
    return DIT_ERR(INVALID_ARGUMENT, "%s: dtypes a %s, b %s, y %s differ", op, dit_dtype_name(a->dtype), dit_dtype_name(b->dtype),
                   dit_dtype_name(y->dtype));
  if (dim < 0 || dim >= a->rank)
    return DIT_ERR(INVALID_ARGUMENT, "%s: dim %lld outside 0..%d of a %s", op, (long long)dim, a->rank - 1, dit_cpu_dims_str(a, b1));
  int same = b->rank == a->rank;
  for (int i = 0; same && i < a->rank; i++) same = i == dim || b->dims[i] == a->dims[i];
  if (!same)
    return DIT_ERR(INVALID_ARGUMENT, "%s: b has dims %s, expected those of a %s but for dim %lld", op, dit_cpu_dims_str(b, b1),
                   dit_cpu_dims_str(a, b2), (long long)dim);
  int64_t want[DIT_MAX_RANK];
  for (int i = 0; i < a->rank; i++) want[i] = i == dim ? a->dims[i] + b->dims[i] : a->dims[i];
  DIT_RETURN_IF(dit_cpu_check_dims(op, "y", y, a->rank, want));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "a", a));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "b", b));
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; i++) outer *= a->dims[i];
  for (int i = (int)dim + 1; i < a->rank; i++) inner *= a->dims[i];
  const size_t es = dit_dtype_size(a->dtype);
  concat_job_t j = {.a = a->data, .b = b->data, .y = y->data, .row_a = (size_t)(a->dims[dim] * inner) * es,
                    .row_b = (size_t)(b->dims[dim] * inner) * es};
  if (outer == 0 || j.row_a + j.row_b == 0) return DIT_OK;
  /* Rows of at least 64 KiB a worker's share. */
  const int64_t grain = (int64_t)((65536 + j.row_a + j.row_b - 1) / (j.row_a + j.row_b));
  dit_pool_parallel_for(dit_cpu_pool(c), outer, grain, concat_rows, &j);
  return DIT_OK;
}
