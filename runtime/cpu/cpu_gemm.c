/* The CPU GEMM: y = x W^T + bias with packed, cache-blocked panels and a 6x8 register tile,
 * parallel over (M, N) tiles. Weights of any float dtype are widened to fp32 while packing. */
#include <stdint.h>
#include <stdlib.h>

#include "base/dtype.h"

#include "runtime/cpu/cpu_internal.h"

/* Blocking. KC keeps one A panel (KC*MR*16 bytes) plus the B panel in L1; MC x KC of packed A
 * per task fits L2 comfortably; NC bounds the fp32 C tile and the packed B block. */
#define DIT_GEMM_KC 256
#define DIT_GEMM_MC 96
#define DIT_GEMM_NC 256

static inline dit_v4_t loadu4(const float *p) {
  dit_v4_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void storeu4(float *p, dit_v4_t v) { memcpy(p, &v, sizeof v); }

/* Twelve named accumulators rather than an array: GCC then reliably keeps all of them, both
 * B vectors and the A broadcast in the 16 SSE registers. */
void dit_gemm_micro(int64_t kc, const dit_v4_t *a, const float *b, float *c, int64_t ldc,
                    int accumulate) {
  dit_v4_t c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  if (accumulate) {
    c00 = loadu4(c + 0 * ldc), c01 = loadu4(c + 0 * ldc + 4);
    c10 = loadu4(c + 1 * ldc), c11 = loadu4(c + 1 * ldc + 4);
    c20 = loadu4(c + 2 * ldc), c21 = loadu4(c + 2 * ldc + 4);
    c30 = loadu4(c + 3 * ldc), c31 = loadu4(c + 3 * ldc + 4);
    c40 = loadu4(c + 4 * ldc), c41 = loadu4(c + 4 * ldc + 4);
    c50 = loadu4(c + 5 * ldc), c51 = loadu4(c + 5 * ldc + 4);
  } else {
    const dit_v4_t z = {0, 0, 0, 0};
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = z;
  }
  const dit_v4_t *bv = (const dit_v4_t *)b;
  for (int64_t k = 0; k < kc; k++) {
    const dit_v4_t b0 = bv[0], b1 = bv[1];
    dit_v4_t t;
    t = a[0], c00 += t * b0, c01 += t * b1;
    t = a[1], c10 += t * b0, c11 += t * b1;
    t = a[2], c20 += t * b0, c21 += t * b1;
    t = a[3], c30 += t * b0, c31 += t * b1;
    t = a[4], c40 += t * b0, c41 += t * b1;
    t = a[5], c50 += t * b0, c51 += t * b1;
    a += DIT_GEMM_MR;
    bv += 2;
  }
  storeu4(c + 0 * ldc, c00), storeu4(c + 0 * ldc + 4, c01);
  storeu4(c + 1 * ldc, c10), storeu4(c + 1 * ldc + 4, c11);
  storeu4(c + 2 * ldc, c20), storeu4(c + 2 * ldc + 4, c21);
  storeu4(c + 3 * ldc, c30), storeu4(c + 3 * ldc + 4, c31);
  storeu4(c + 4 * ldc, c40), storeu4(c + 4 * ldc + 4, c41);
  storeu4(c + 5 * ldc, c50), storeu4(c + 5 * ldc + 4, c51);
}

/* ---- linear ----------------------------------------------------------------------------- */

typedef struct linear_job {
  const dit_tensor_t *x, *w, *bias, *acc, *y; /* acc: added after the bias, or NULL */
  int64_t M, N, K;
  int64_t mc, nc, kc;   /* blocking chosen for this call */
  int64_t tiles_n;      /* tiles along N; task t covers tile (t / tiles_n, t % tiles_n) */
  dit_cpu_scratch_t scratch;
  size_t off_a, off_b, off_c, off_row; /* byte offsets of the pieces of one worker's scratch */
  float *bias_f32;      /* bias widened once, or NULL */
} linear_job_t;

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

static void linear_tile(linear_job_t *j, int64_t m0, int64_t n0, int worker) {
  unsigned char *s = dit_cpu_scratch_get(&j->scratch, worker);
  dit_v4_t *apack = (dit_v4_t *)(s + j->off_a);
  float *bpack = (float *)(s + j->off_b);
  float *ctile = (float *)(s + j->off_c);
  float *row = (float *)(s + j->off_row); /* one row of up to max(kc, nc) floats */
  const int64_t mb = j->M - m0 < j->mc ? j->M - m0 : j->mc;
  const int64_t nb = j->N - n0 < j->nc ? j->N - n0 : j->nc;
  const int64_t ldc = round_up(nb, DIT_GEMM_NR);
  const int64_t K = j->K;
  const dit_tensor_t *x = j->x, *w = j->w;

  if (K == 0) memset(ctile, 0, sizeof(float) * (size_t)(round_up(mb, DIT_GEMM_MR) * ldc));
  for (int64_t k0 = 0; k0 < K; k0 += j->kc) {
    const int64_t kb = K - k0 < j->kc ? K - k0 : j->kc;
    /* B block: every NR-wide panel of W rows [n0, n0 + nb) over [k0, k0 + kb). */
    for (int64_t jr = 0; jr < nb; jr += DIT_GEMM_NR) {
      const int nr = (int)(nb - jr < DIT_GEMM_NR ? nb - jr : DIT_GEMM_NR);
      float *dst = bpack + jr * kb;
      for (int jj = 0; jj < DIT_GEMM_NR; jj++) {
        if (jj < nr) {
          const float *wr = dit_cpu_row_load(w->data, w->dtype, (n0 + jr + jj) * K + k0, kb, row);
          for (int64_t k = 0; k < kb; k++) dst[k * DIT_GEMM_NR + jj] = wr[k];
        } else {
          for (int64_t k = 0; k < kb; k++) dst[k * DIT_GEMM_NR + jj] = 0.0f;
        }
      }
    }
    for (int64_t ir = 0; ir < mb; ir += DIT_GEMM_MR) {
      const int mr = (int)(mb - ir < DIT_GEMM_MR ? mb - ir : DIT_GEMM_MR);
      for (int ii = 0; ii < DIT_GEMM_MR; ii++) {
        if (ii < mr) {
          const float *xr = dit_cpu_row_load(x->data, x->dtype, (m0 + ir + ii) * K + k0, kb, row);
          for (int64_t k = 0; k < kb; k++) {
            const float v = xr[k];
            apack[k * DIT_GEMM_MR + ii] = (dit_v4_t){v, v, v, v};
          }
        } else {
          for (int64_t k = 0; k < kb; k++) apack[k * DIT_GEMM_MR + ii] = (dit_v4_t){0, 0, 0, 0};
        }
      }
      for (int64_t jr = 0; jr < nb; jr += DIT_GEMM_NR)
        dit_gemm_micro(kb, apack, bpack + jr * kb, ctile + ir * ldc + jr, ldc, k0 > 0);
    }
  }
  for (int64_t i = 0; i < mb; i++) {
    float *cr = ctile + i * ldc;
    if (j->bias_f32)
      for (int64_t n = 0; n < nb; n++) cr[n] += j->bias_f32[n0 + n];
    if (j->acc) {
      const float *ar = dit_cpu_row_load(j->acc->data, j->acc->dtype, (m0 + i) * j->N + n0, nb, row);
      for (int64_t n = 0; n < nb; n++) cr[n] += ar[n];
    }
    dit_cpu_row_store(j->y->data, j->y->dtype, (m0 + i) * j->N + n0, cr, nb);
  }
}

static void linear_task(void *ctx, int64_t begin, int64_t end, int worker) {
  linear_job_t *j = ctx;
  for (int64_t t = begin; t < end; t++)
    linear_tile(j, (t / j->tiles_n) * j->mc, (t % j->tiles_n) * j->nc, worker);
}

dit_status_t dit_cpu_linear(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w,
                            const dit_tensor_t *bias, dit_tensor_t *y) {
  return dit_cpu_linear_acc(c, x, w, bias, NULL, y);
}

dit_status_t dit_cpu_linear_acc(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *w, const dit_tensor_t *bias,
                                const dit_tensor_t *acc, dit_tensor_t *y) {
  static const char *op = "linear";
  char b1[DIT_CPU_DIMS_BUF], b2[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "x", x));
  DIT_RETURN_IF(dit_cpu_check_float(op, "w", w));
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  if (bias) DIT_RETURN_IF(dit_cpu_check_float(op, "bias", bias));
  if (x->rank < 1)
    return DIT_ERR(INVALID_ARGUMENT, "%s: x has rank 0, expected [..., K]", op);
  if (w->rank < 1)
    return DIT_ERR(INVALID_ARGUMENT, "%s: w has rank 0, expected [N, ...]", op);
  const int64_t K = x->dims[x->rank - 1];
  const int64_t N = w->dims[0];
  int64_t wk = 1;
  for (int i = 1; i < w->rank; i++) wk *= w->dims[i];
  if (wk != K)
    return DIT_ERR(INVALID_ARGUMENT, "%s: w dims[1..] multiply to %lld, expected K = %lld from x %s",
                   op, (long long)wk, (long long)K, dit_cpu_dims_str(x, b1));
  if (bias && (bias->rank != 1 || bias->dims[0] != N))
    return DIT_ERR(INVALID_ARGUMENT, "%s: bias has dims %s, expected [%lld] (N from w %s)", op,
                   dit_cpu_dims_str(bias, b1), (long long)N, dit_cpu_dims_str(w, b2));
  int ok = y->rank == x->rank && y->dims[y->rank - 1] == N;
  for (int i = 0; ok && i < x->rank - 1; i++) ok = y->dims[i] == x->dims[i];
  if (!ok)
    return DIT_ERR(INVALID_ARGUMENT, "%s: y has dims %s, expected x's leading dims of %s with last dim N = %lld",
                   op, dit_cpu_dims_str(y, b1), dit_cpu_dims_str(x, b2), (long long)N);
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "w", w));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "bias", bias));
  if (acc) {
    DIT_RETURN_IF(dit_cpu_check_float(op, "c", acc));
    DIT_RETURN_IF(dit_cpu_check_same_dims(op, "c", acc, "y", y));
    DIT_RETURN_IF(dit_cpu_check_no_alias(op, "y", y, "c", acc));
  }

  const int64_t M = K > 0 ? dit_tensor_numel(x) / K : dit_tensor_numel(y) / (N > 0 ? N : 1);
  if (M == 0 || N == 0) return DIT_OK;

  linear_job_t j = {.x = x, .w = w, .bias = bias, .acc = acc, .y = y, .M = M, .N = N, .K = K};
  j.kc = K < DIT_GEMM_KC ? (K > 0 ? K : 1) : DIT_GEMM_KC;
  j.mc = M < DIT_GEMM_MC ? round_up(M, DIT_GEMM_MR) : DIT_GEMM_MC;
  j.nc = N < DIT_GEMM_NC ? round_up(N, DIT_GEMM_NR) : DIT_GEMM_NC;
  /* Few M tiles (small batches of tokens): split N finer so every worker gets work. */
  const int64_t threads = dit_pool_threads(dit_cpu_pool(c));
  const int64_t tiles_m = (M + j.mc - 1) / j.mc;
  while (tiles_m * ((N + j.nc - 1) / j.nc) < 2 * threads && j.nc > 4 * DIT_GEMM_NR)
    j.nc = round_up(j.nc / 2, DIT_GEMM_NR);
  j.tiles_n = (N + j.nc - 1) / j.nc;

  const size_t a_bytes = (size_t)(j.kc * DIT_GEMM_MR) * sizeof(dit_v4_t);
  const size_t b_bytes = (size_t)(j.kc * j.nc) * sizeof(float);
  const size_t c_bytes = (size_t)(j.mc * j.nc) * sizeof(float);
  const size_t row_bytes = (size_t)(j.kc > j.nc ? j.kc : j.nc) * sizeof(float);
  j.off_a = 0;
  j.off_b = (j.off_a + a_bytes + 63) & ~(size_t)63;
  j.off_c = (j.off_b + b_bytes + 63) & ~(size_t)63;
  j.off_row = (j.off_c + c_bytes + 63) & ~(size_t)63;
  DIT_RETURN_IF(dit_cpu_scratch_alloc(op, c, j.off_row + row_bytes, &j.scratch));
  if (bias) {
    j.bias_f32 = malloc((size_t)N * sizeof(float));
    if (!j.bias_f32) {
      dit_cpu_scratch_free(&j.scratch);
      return DIT_ERR(RESOURCE_EXHAUSTED, "%s: cannot allocate %lld floats for bias", op, (long long)N);
    }
    const float *bf = dit_cpu_row_load(bias->data, bias->dtype, 0, N, j.bias_f32);
    if (bf != j.bias_f32) memcpy(j.bias_f32, bf, (size_t)N * sizeof(float));
  }
  dit_pool_parallel_for(dit_cpu_pool(c), tiles_m * j.tiles_n, 1, linear_task, &j);
  free(j.bias_f32);
  dit_cpu_scratch_free(&j.scratch);
  return DIT_OK;
}

/* ---- fp8 linear ---------------------------------------------------------------------------- */

/* The quantized operands decoded to fp32 (exact: every e4m3 value is an fp32 value), so the
 * fp32 GEMM above computes the accumulation; scales, bias and act follow it, as in the device's
 * epilogue. */
dit_status_t dit_cpu_linear_fp8(dit_cpu_t *c, const dit_tensor_t *xq, const dit_tensor_t *xs, const dit_tensor_t *w,
                                const dit_tensor_t *w_scale, const dit_tensor_t *bias, int act, dit_tensor_t *y) {
  static const char *op = "linear_fp8";
  char b1[DIT_CPU_DIMS_BUF], b2[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "y", y));
  if (bias) DIT_RETURN_IF(dit_cpu_check_float(op, "bias", bias));
  if (w->dtype != DIT_F8E4M3 || w->rank != 2)
    return DIT_ERR(INVALID_ARGUMENT, "%s: w is %s %s, expected f8e4m3 [N, K]", op, dit_dtype_name(w->dtype), dit_cpu_dims_str(w, b1));
  const int64_t N = w->dims[0], K = w->dims[1];
  if (w_scale->dtype != DIT_F32 || w_scale->rank != 1 || w_scale->dims[0] != N)
    return DIT_ERR(INVALID_ARGUMENT, "%s: w_scale is %s %s, expected f32 [%lld]", op, dit_dtype_name(w_scale->dtype),
                   dit_cpu_dims_str(w_scale, b1), (long long)N);
  if (bias && (bias->rank != 1 || bias->dims[0] != N))
    return DIT_ERR(INVALID_ARGUMENT, "%s: bias has dims %s, expected [%lld]", op, dit_cpu_dims_str(bias, b1), (long long)N);
  if (act != 0 && act != 1) return DIT_ERR(UNIMPLEMENTED, "%s: activation %d (known: 1 = gelu_tanh)", op, act);
  if (xq->dtype != DIT_F8E4M3 || xq->rank != 3 || xq->dims[2] != K)
    return DIT_ERR(INVALID_ARGUMENT, "%s: xq is %s %s, expected f8e4m3 [B, T, K = %lld]", op, dit_dtype_name(xq->dtype),
                   dit_cpu_dims_str(xq, b1), (long long)K);
  if (xs->dtype != DIT_F32 || xs->rank != 3 || xs->dims[0] != xq->dims[0] || xs->dims[1] != 1 || xs->dims[2] != xq->dims[1])
    return DIT_ERR(INVALID_ARGUMENT, "%s: xs is %s %s, expected f32 [%lld, 1, %lld]", op, dit_dtype_name(xs->dtype), dit_cpu_dims_str(xs, b1),
                   (long long)xq->dims[0], (long long)xq->dims[1]);
  int ok = y->rank == 3 && y->dims[2] == N && y->dims[0] == xq->dims[0] && y->dims[1] == xq->dims[1];
  if (!ok)
    return DIT_ERR(INVALID_ARGUMENT, "%s: y has dims %s, expected xq's leading dims of %s with last dim N = %lld", op,
                   dit_cpu_dims_str(y, b1), dit_cpu_dims_str(xq, b2), (long long)N);
  const int64_t M = xq->dims[0] * xq->dims[1];
  if (M == 0 || N == 0) return DIT_OK;
  /* Decoded x, decoded w, the fp32 sums and one row (of N). */
  float *xd = malloc(sizeof(float) * (size_t)(M * K + N * K + M * N + N));
  if (!xd)
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: cannot allocate the decoded operands (M %lld, N %lld, K %lld)", op, (long long)M, (long long)N,
                   (long long)K);
  float *wd = xd + M * K, *acc = wd + N * K, *row = acc + M * N;
  for (int64_t i = 0; i < M * K; i++) xd[i] = dit_e4m3_to_f32(((const uint8_t *)xq->data)[i]);
  for (int64_t i = 0; i < N * K; i++) wd[i] = dit_e4m3_to_f32(((const uint8_t *)w->data)[i]);
  dit_tensor_t xt = *xq, wt = *w, at = *y;
  xt.data = xd, xt.dtype = DIT_F32;
  wt.data = wd, wt.dtype = DIT_F32;
  at.data = acc, at.dtype = DIT_F32;
  dit_status_t s = dit_cpu_linear(c, &xt, &wt, NULL, &at);
  if (!s) {
    const float *ws = w_scale->data, *rs = xs->data;
    const float *bf = bias ? dit_cpu_row_load(bias->data, bias->dtype, 0, N, row) : NULL;
    for (int64_t m = 0; m < M; m++) {
      float *a = acc + m * N;
      for (int64_t n = 0; n < N; n++) a[n] = a[n] * rs[m] * ws[n] + (bf ? bf[n] : 0.0f);
      if (!act) dit_cpu_row_store(y->data, y->dtype, m * N, a, N);
    }
    if (act) s = dit_cpu_gelu_tanh(c, &at, y);
  }
  free(xd);
  return s;
}
