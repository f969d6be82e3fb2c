/* The CPU backend's video kernels over channel-last activations [B, F, H, W, C]: the direct
 * convolution (causal temporal padding, spatial padding before and after, strides) and nearest
 * upsampling. The convolution packs its weight once per call into fp32 [tap][Cin][Cout], so the
 * innermost loop runs over contiguous output channels of one pixel. */
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu_internal.h"

typedef struct conv_job {
  const dit_tensor_t *x;
  dit_tensor_t *y;
  const float *w;    /* packed [kt*kh*kw][Cin][Cout] */
  const float *bias; /* [Cout] or NULL */
  int64_t F, H, W, Cin, Fo, Ho, Wo, Cout, kt, kh, kw, pt, ph, pw, st, sh, sw;
  dit_cpu_scratch_t scratch; /* per worker: acc [Wo*Cout], an input row [W*Cin] */
} conv_job_t;

/* One output row (b, fo, ho) per item: every tap whose input row exists adds its products. */
static void conv_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  conv_job_t *j = ctx;
  float *acc = dit_cpu_scratch_get(&j->scratch, worker);
  float *row = acc + j->Wo * j->Cout;
  const int64_t Cin = j->Cin, Cout = j->Cout;
  for (int64_t r = begin; r < end; r++) {
    const int64_t ho = r % j->Ho, fo = (r / j->Ho) % j->Fo, b = r / (j->Ho * j->Fo);
    for (int64_t wo = 0; wo < j->Wo; wo++) {
      float *a = acc + wo * Cout;
      if (j->bias) memcpy(a, j->bias, sizeof(float) * (size_t)Cout);
      else memset(a, 0, sizeof(float) * (size_t)Cout);
    }
    for (int64_t it = 0; it < j->kt; it++) {
      const int64_t fi = fo * j->st + it - j->pt;
      if (fi < 0 || fi >= j->F) continue;
      for (int64_t ih = 0; ih < j->kh; ih++) {
        const int64_t hi = ho * j->sh + ih - j->ph;
        if (hi < 0 || hi >= j->H) continue;
        const float *x = dit_cpu_row_load(j->x->data, j->x->dtype, ((b * j->F + fi) * j->H + hi) * j->W * Cin, j->W * Cin, row);
        for (int64_t iw = 0; iw < j->kw; iw++) {
          const float *wt = j->w + ((it * j->kh + ih) * j->kw + iw) * Cin * Cout;
          for (int64_t wo = 0; wo < j->Wo; wo++) {
            const int64_t wi = wo * j->sw + iw - j->pw;
            if (wi < 0 || wi >= j->W) continue;
            const float *xp = x + wi * Cin;
            float *a = acc + wo * Cout;
            for (int64_t ci = 0; ci < Cin; ci++) {
              const float xv = xp[ci];
              const float *wr = wt + ci * Cout;
              for (int64_t co = 0; co < Cout; co++) a[co] += xv * wr[co];
            }
          }
        }
      }
    }
    dit_cpu_row_store(j->y->data, j->y->dtype, r * j->Wo * Cout, acc, j->Wo * Cout);
  }
}

dit_status_t dit_cpu_conv3d(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w, const dit_tensor_t *bias, int64_t pad_t,
                            int64_t pad_h, int64_t pad_w, dit_tensor_t *y) {
  const dit_conv3d_attrs_t a = {.pad_t = pad_t, .pad_h = pad_h, .pad_w = pad_w, .pad_h_after = pad_h, .pad_w_after = pad_w,
                                .stride_t = 1, .stride_h = 1, .stride_w = 1};
  return dit_cpu_conv3d_ex(c, x, w, bias, &a, y);
}

dit_status_t dit_cpu_conv3d_ex(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w, const dit_tensor_t *bias,
                               const dit_conv3d_attrs_t *a, dit_tensor_t *y) {
  static const char *op = "conv3d";
  char b1[DIT_CPU_DIMS_BUF], b2[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "w", w));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  if (bias) DIT_RETURN_IF(dit_cpu_check_float(op, "bias", bias));
  if (a->pad_t < 0 || a->pad_h < 0 || a->pad_w < 0 || a->pad_h_after < 0 || a->pad_w_after < 0)
    return DIT_ERR(INVALID_ARGUMENT, "%s: padding (%lld, %lld, %lld) must not be negative", op, (long long)a->pad_t, (long long)a->pad_h,
                   (long long)a->pad_w);
  if (a->stride_t < 1 || a->stride_h < 1 || a->stride_w < 1)
    return DIT_ERR(INVALID_ARGUMENT, "%s: strides (%lld, %lld, %lld) must be positive", op, (long long)a->stride_t, (long long)a->stride_h,
                   (long long)a->stride_w);
  if (x->rank != 5) return DIT_ERR(INVALID_ARGUMENT, "%s: x has dims %s, expected [B, F, H, W, Cin]", op, dit_cpu_dims_str(x, b1));
  if ((w->rank != 4 && w->rank != 5) || w->dims[w->rank - 1] != x->dims[4])
    return DIT_ERR(INVALID_ARGUMENT, "%s: w has dims %s, expected [Cout, kt, kh, kw, %lld] or [Cout, kh, kw, %lld] for x %s", op,
                   dit_cpu_dims_str(w, b1), (long long)x->dims[4], (long long)x->dims[4], dit_cpu_dims_str(x, b2));
  conv_job_t j = {.x = x, .y = y, .F = x->dims[1], .H = x->dims[2], .W = x->dims[3], .Cin = x->dims[4], .Cout = w->dims[0],
                  .kt = w->rank == 5 ? w->dims[1] : 1, .kh = w->dims[w->rank - 3], .kw = w->dims[w->rank - 2], .pt = a->pad_t,
                  .ph = a->pad_h, .pw = a->pad_w, .st = a->stride_t, .sh = a->stride_h, .sw = a->stride_w};
  const int64_t ft = j.F + a->pad_t - j.kt, ht = j.H + a->pad_h + a->pad_h_after - j.kh, wt = j.W + a->pad_w + a->pad_w_after - j.kw;
  if (j.kt < 1 || j.kh < 1 || j.kw < 1 || ft < 0 || ht < 0 || wt < 0)
    return DIT_ERR(INVALID_ARGUMENT, "%s: w %s with padding (%lld, %lld, %lld) does not fit x %s", op, dit_cpu_dims_str(w, b1),
                   (long long)a->pad_t, (long long)a->pad_h, (long long)a->pad_w, dit_cpu_dims_str(x, b2));
  j.Fo = ft / j.st + 1, j.Ho = ht / j.sh + 1, j.Wo = wt / j.sw + 1;
  const int64_t want[5] = {x->dims[0], j.Fo, j.Ho, j.Wo, j.Cout}, bd[1] = {j.Cout};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "y", y, 5, want));
  if (bias) DIT_RETURN_IF(dit_cpu_check_dims(op, "bias", bias, 1, bd));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "w", w));
  const int64_t rows = x->dims[0] * j.Fo * j.Ho, taps = j.kt * j.kh * j.kw;
  if (rows == 0 || j.Cout == 0) return DIT_OK;
  float *packed = malloc(sizeof(float) * (size_t)(taps * j.Cin * j.Cout + j.Cout));
  if (!packed) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory packing w %s", op, dit_cpu_dims_str(w, b1));
  /* w[co][tap][ci] -> packed[tap][ci][co]; the bias after it. */
  for (int64_t co = 0; co < j.Cout; co++)
    for (int64_t t = 0; t < taps; t++)
      for (int64_t ci = 0; ci < j.Cin; ci++)
        packed[(t * j.Cin + ci) * j.Cout + co] = dit_cpu_load1(w->data, w->dtype, (co * taps + t) * j.Cin + ci);
  j.w = packed;
  if (bias) {
    float *pb = packed + taps * j.Cin * j.Cout;
    for (int64_t co = 0; co < j.Cout; co++) pb[co] = dit_cpu_load1(bias->data, bias->dtype, co);
    j.bias = pb;
  }
  dit_status_t s = dit_cpu_scratch_alloc(op, c, sizeof(float) * (size_t)(j.Wo * j.Cout + j.W * j.Cin), &j.scratch);
  if (!s) {
    dit_pool_parallel_for(dit_cpu_pool(c), rows, 1, conv_rows, &j);
    dit_cpu_scratch_free(&j.scratch);
  }
  free(packed);
  return s;
}

typedef struct upsample_job {
  const char *x;
  char *y;
  int64_t H, W, s;
  size_t pixel; /* bytes of one pixel's C channels */
} upsample_job_t;

/* One output row (b, f, ho) per item: input row ho / s, each pixel repeated s times. */
static void upsample_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  upsample_job_t *j = ctx;
  const int64_t Ho = j->H * j->s, Wo = j->W * j->s;
  for (int64_t r = begin; r < end; r++) {
    const int64_t ho = r % Ho, bf = r / Ho;
    const char *src = j->x + (size_t)((bf * j->H + ho / j->s) * j->W) * j->pixel;
    char *dst = j->y + (size_t)(r * Wo) * j->pixel;
    for (int64_t wo = 0; wo < Wo; wo++) memcpy(dst + (size_t)wo * j->pixel, src + (size_t)(wo / j->s) * j->pixel, j->pixel);
  }
}

dit_status_t dit_cpu_upsample(dit_cpu_t *c, const dit_tensor_t *x, int64_t scale, dit_tensor_t *y) {
  static const char *op = "upsample";
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_any(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_any(op, "y", y));
  if (x->rank != 5) return DIT_ERR(INVALID_ARGUMENT, "%s: x has dims %s, expected [B, F, H, W, C]", op, dit_cpu_dims_str(x, b1));
  if (scale < 1) return DIT_ERR(INVALID_ARGUMENT, "%s: scale %lld must be positive", op, (long long)scale);
  if (x->dtype != y->dtype)
    return DIT_ERR(INVALID_ARGUMENT, "%s: y has dtype %s, expected x's %s", op, dit_dtype_name(y->dtype), dit_dtype_name(x->dtype));
  const int64_t want[5] = {x->dims[0], x->dims[1], x->dims[2] * scale, x->dims[3] * scale, x->dims[4]};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "y", y, 5, want));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  upsample_job_t j = {.x = x->data, .y = y->data, .H = x->dims[2], .W = x->dims[3], .s = scale,
                      .pixel = (size_t)x->dims[4] * dit_dtype_size(x->dtype)};
  const int64_t rows = want[0] * want[1] * want[2];
  if (rows == 0 || j.pixel == 0 || want[3] == 0) return DIT_OK;
  dit_pool_parallel_for(dit_cpu_pool(c), rows, 16, upsample_rows, &j);
  return DIT_OK;
}
