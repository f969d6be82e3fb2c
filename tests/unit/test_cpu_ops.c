/* Pins the CPU reference kernels against naive double-precision references written here, at
 * odd and tail shapes, for f32, bf16 and f16 storage; checks every output element is written
 * (outputs are NaN-poisoned first), the argument errors, a torch/diffusers cross-check from
 * tests/data/cpu_ops, and prints GEMM and attention throughput (never fails on speed). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "runtime/cpu/cpu_ops.h"
#include "runtime/exec_internal.h"

/* Error bounds, as max|ours - ref| / max|ref| over a tensor. The reference sees exactly the
 * stored (rounded) inputs, so storage only adds the rounding of the output: half an ulp, which
 * for a value in [2^e, 2^(e+1)) is 2^(e-8) in bf16 and 2^(e-11) in f16, so at most 2^-8 resp.
 * 2^-11 of max|ref|; the margin covers the fp32 arithmetic. */
#define TOL_F32 1e-5
#define TOL_BF16 (0.00390625 + 2e-4)
#define TOL_F16 (0.00048828125 + 5e-5)

static double tol_for(dit_dtype_t out) {
  return out == DIT_BF16 ? TOL_BF16 : out == DIT_F16 ? TOL_F16 : TOL_F32;
}

/* ---- helpers ---------------------------------------------------------------------------- */

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static double rnd_unit(void) { /* splitmix64 -> [0, 1) */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform in [lo, hi], pushed away from zero so no input is trivially 0. */
static double rnd(double lo, double hi) {
  double v = lo + (hi - lo) * rnd_unit();
  if (fabs(v) < 1e-3) v = v < 0 ? -1e-3 : 1e-3;
  return v;
}

typedef struct tt {
  dit_tensor_t t;
  double *v; /* the values as stored, widened to double */
} tt_t;

static int64_t numel_of(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

static dit_tensor_t tensor_alloc(dit_dtype_t dt, int rank, const int64_t *dims) {
  dit_tensor_t t = {.dtype = dt, .rank = rank};
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  size_t bytes = dit_tensor_nbytes(&t);
  t.data = malloc(bytes ? bytes : 1);
  return t;
}

static double get_elem(const dit_tensor_t *t, int64_t i) {
  switch (t->dtype) {
    case DIT_F32: return ((const float *)t->data)[i];
    case DIT_BF16: return dit_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case DIT_F16: return dit_f16_to_f32(((const uint16_t *)t->data)[i]);
    case DIT_I64: return (double)((const int64_t *)t->data)[i];
    case DIT_I32: return (double)((const int32_t *)t->data)[i];
    case DIT_F8E4M3: return dit_e4m3_to_f32(((const uint8_t *)t->data)[i]);
    case DIT_I8: return ((const int8_t *)t->data)[i];
    default: return NAN;
  }
}

static void set_elem(dit_tensor_t *t, int64_t i, double v) {
  switch (t->dtype) {
    case DIT_F32: ((float *)t->data)[i] = (float)v; break;
    case DIT_BF16: ((uint16_t *)t->data)[i] = dit_f32_to_bf16((float)v); break;
    case DIT_F16: ((uint16_t *)t->data)[i] = dit_f32_to_f16((float)v); break;
    case DIT_I64: ((int64_t *)t->data)[i] = (int64_t)v; break;
    case DIT_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
    case DIT_U8: ((uint8_t *)t->data)[i] = v != 0; break; /* a bool */
    case DIT_F8E4M3: ((uint8_t *)t->data)[i] = dit_f32_to_e4m3((float)v); break;
    case DIT_I8: ((int8_t *)t->data)[i] = (int8_t)v; break;
    default: break;
  }
}

static tt_t tt_rand(dit_dtype_t dt, int rank, const int64_t *dims, double lo, double hi) {
  tt_t r = {.t = tensor_alloc(dt, rank, dims)};
  int64_t n = numel_of(rank, dims);
  r.v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) {
    set_elem(&r.t, i, rnd(lo, hi));
    r.v[i] = get_elem(&r.t, i);
  }
  return r;
}

static void tt_free(tt_t *t) {
  free(t->t.data);
  free(t->v);
}

/* An output filled with NaN, so an element the kernel skips cannot pass. */
static dit_tensor_t out_poisoned(dit_dtype_t dt, int rank, const int64_t *dims) {
  dit_tensor_t t = tensor_alloc(dt, rank, dims);
  int64_t n = numel_of(rank, dims);
  for (int64_t i = 0; i < n; i++) set_elem(&t, i, NAN);
  return t;
}

static int g_verbose; /* print every comparison's error, not just failures */

/* max|out - ref| / max|ref| <= tol and every element written (finite). */
static int compare(const char *what, const dit_tensor_t *out, const double *ref, double tol) {
  int64_t n = dit_tensor_numel(out), unwritten = 0, worst = -1;
  double maxref = 0, maxerr = 0;
  for (int64_t i = 0; i < n; i++) maxref = fmax(maxref, fabs(ref[i]));
  for (int64_t i = 0; i < n; i++) {
    double o = get_elem(out, i);
    if (!isfinite(o)) {
      unwritten++;
      continue;
    }
    double e = fabs(o - ref[i]);
    if (e > maxerr) maxerr = e, worst = i;
  }
  double rel = maxref > 0 ? maxerr / maxref : maxerr;
  int ok = unwritten == 0 && rel <= tol;
  if (ok && g_verbose)
    printf("  %s: max rel err %.3g (tol %.3g)\n", what, rel, tol);
  if (!ok)
    fprintf(stderr, "  %s [%s]: %lld of %lld elements not written/finite, max rel err %.3g (tol %.3g)"
            " at %lld: got %.9g want %.9g\n", what, dit_dtype_name(out->dtype),
            (long long)unwritten, (long long)n, rel, tol, (long long)worst,
            worst >= 0 ? get_elem(out, worst) : 0.0, worst >= 0 ? ref[worst] : 0.0);
  return ok;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static dit_cpu_t g_cpu[2]; /* a 1-thread and a 3-thread pool: results must not depend on it */

/* ---- linear ----------------------------------------------------------------------------- */

static void check_linear(int xr, const int64_t *xdims, int wr, const int64_t *wdims, int with_bias,
                         dit_dtype_t xt, dit_dtype_t wt, dit_dtype_t yt) {
  const int64_t K = xdims[xr - 1], N = wdims[0], M = numel_of(xr - 1, xdims);
  tt_t x = tt_rand(xt, xr, xdims, -1, 1), w = tt_rand(wt, wr, wdims, -1, 1);
  const int64_t bd[1] = {N};
  tt_t b = tt_rand(wt, 1, bd, -1, 1);
  int64_t ydims[DIT_MAX_RANK];
  memcpy(ydims, xdims, sizeof(int64_t) * (size_t)xr);
  ydims[xr - 1] = N;
  double *ref = malloc(sizeof(double) * (size_t)(M * N + 1));
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double s = with_bias ? b.v[n] : 0.0;
      for (int64_t k = 0; k < K; k++) s += x.v[m * K + k] * w.v[n * K + k];
      ref[m * N + n] = s;
    }
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(yt, xr, ydims);
    CHECK_OK(dit_cpu_linear(&g_cpu[pi], &x.t, &w.t, with_bias ? &b.t : NULL, &y));
    char what[160];
    snprintf(what, sizeof what, "linear M=%lld N=%lld K=%lld bias=%d x %s w %s pool %d", (long long)M,
             (long long)N, (long long)K, with_bias, dit_dtype_name(xt), dit_dtype_name(wt), pi);
    CHECK(compare(what, &y, ref, tol_for(yt)));
    free(y.data);
  }
  free(ref);
  tt_free(&x), tt_free(&w), tt_free(&b);
}

static void test_linear(void) {
  static const int64_t mnk[][3] = {{1, 1, 1},    {7, 13, 5},   {6, 8, 256},  {97, 65, 300},
                                   {5, 300, 33}, {200, 17, 1}, {13, 9, 257}, {130, 270, 520},
                                   {2, 1000, 40}};
  for (size_t i = 0; i < sizeof mnk / sizeof *mnk; i++) {
    const int64_t xd[2] = {mnk[i][0], mnk[i][2]}, wd[2] = {mnk[i][1], mnk[i][2]};
    check_linear(2, xd, 2, wd, (int)(i % 2), DIT_F32, DIT_F32, DIT_F32);
    check_linear(2, xd, 2, wd, 1, DIT_BF16, DIT_BF16, DIT_BF16);
  }
  /* Activations [B, T, K]; a Conv3d-shaped weight [N, C, pt, ph, pw] read as [N, K]. */
  const int64_t x3[3] = {2, 37, 16}, w5[5] = {24, 4, 1, 2, 2};
  check_linear(3, x3, 5, w5, 1, DIT_F32, DIT_F32, DIT_F32);
  check_linear(3, x3, 5, w5, 1, DIT_F32, DIT_BF16, DIT_F32);  /* bf16 weights, f32 activations */
  check_linear(3, x3, 5, w5, 0, DIT_F16, DIT_F16, DIT_F16);
  const int64_t x1[1] = {70}, w1[2] = {11, 70};
  check_linear(1, x1, 2, w1, 1, DIT_F32, DIT_F32, DIT_BF16);
  /* No pool at all (a NULL backend or pool runs on the calling thread). */
  {
    const int64_t xd[2] = {9, 20}, wd[2] = {11, 20}, yd[2] = {9, 11};
    tt_t x = tt_rand(DIT_F32, 2, xd, -1, 1), w = tt_rand(DIT_F32, 2, wd, -1, 1);
    double ref[99];
    for (int m = 0; m < 9; m++)
      for (int n = 0; n < 11; n++) {
        ref[m * 11 + n] = 0;
        for (int k = 0; k < 20; k++) ref[m * 11 + n] += x.v[m * 20 + k] * w.v[n * 20 + k];
      }
    dit_cpu_t nopool = {NULL};
    dit_tensor_t y = out_poisoned(DIT_F32, 2, yd);
    CHECK_OK(dit_cpu_linear(NULL, &x.t, &w.t, NULL, &y));
    CHECK(compare("linear, NULL backend", &y, ref, TOL_F32));
    free(y.data);
    y = out_poisoned(DIT_F32, 2, yd);
    CHECK_OK(dit_cpu_linear(&nopool, &x.t, &w.t, NULL, &y));
    CHECK(compare("linear, NULL pool", &y, ref, TOL_F32));
    free(y.data);
    tt_free(&x), tt_free(&w);
  }
  /* K = 0: the product is empty and y is the bias. */
  const int64_t x0[2] = {3, 0}, w0[2] = {5, 0};
  check_linear(2, x0, 2, w0, 1, DIT_F32, DIT_F32, DIT_F32);
}

/* ---- attention -------------------------------------------------------------------------- */

/* Dense attention in double. Optional: bounds[b] keys of item b (clamped to L), a score bias
 * [S, L, H] added to scale * q.k, and frame-causal blocks of `causal` (query i sees key j iff
 * j / causal <= i / causal; 0: none). lse may be NULL. */
static void attention_ref_masked(const tt_t *q, const tt_t *k, const tt_t *v, int64_t B, int64_t S, int64_t L, int64_t H, int64_t Dh,
                                 double scale, const int32_t *bounds, const double *bias, int64_t causal, double *out, double *lse) {
  double *sc = malloc(sizeof(double) * (size_t)L);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = 0; s < S; s++) {
        const int64_t lb = bounds ? (bounds[b] < L ? bounds[b] : L) : L;
        const double *qr = q->v + ((b * S + s) * H + h) * Dh;
        double mx = -INFINITY;
        for (int64_t l = 0; l < lb; l++) {
          const double *kr = k->v + ((b * L + l) * H + h) * Dh;
          double d = 0;
          for (int64_t e = 0; e < Dh; e++) d += qr[e] * kr[e];
          sc[l] = causal && l / causal > s / causal ? -INFINITY : bias ? d * scale + bias[(s * L + l) * H + h] : d * scale;
          mx = fmax(mx, sc[l]);
        }
        double sum = 0;
        for (int64_t l = 0; l < lb; l++) sum += (sc[l] = exp(sc[l] - mx));
        double *o = out + ((b * S + s) * H + h) * Dh;
        for (int64_t e = 0; e < Dh; e++) {
          double a = 0;
          for (int64_t l = 0; l < lb; l++) a += sc[l] * v->v[((b * L + l) * H + h) * Dh + e];
          o[e] = a / sum;
        }
        if (lse) lse[(b * H + h) * S + s] = mx + log(sum);
      }
  free(sc);
}

static void attention_ref(const tt_t *q, const tt_t *k, const tt_t *v, int64_t B, int64_t S,
                          int64_t L, int64_t H, int64_t Dh, double scale, double *out, double *lse) {
  attention_ref_masked(q, k, v, B, S, L, H, Dh, scale, NULL, NULL, 0, out, lse);
}

static void check_attention(int64_t B, int64_t S, int64_t L, int64_t H, int64_t Dh, double amp,
                            double scale, int with_lse, dit_dtype_t dt) {
  const int64_t qd[3] = {B, S, H * Dh}, kd[3] = {B, L, H * Dh}, ld[3] = {B, H, S};
  tt_t q = tt_rand(dt, 3, qd, -amp, amp), k = tt_rand(dt, 3, kd, -amp, amp);
  tt_t v = tt_rand(dt, 3, kd, -1, 1);
  /* Later keys score higher on average, so the running max moves from block to block. */
  for (int64_t b = 0; b < B; b++)
    for (int64_t l = 0; l < L; l++)
      for (int64_t e = 0; e < H * Dh; e++) {
        int64_t i = (b * L + l) * H * Dh + e;
        double bumped = k.v[i] + 0.5 * amp * (double)l / (double)L * (q.v[(b * S) * H * Dh + e] > 0 ? 1 : -1);
        set_elem(&k.t, i, bumped);
        k.v[i] = get_elem(&k.t, i);
      }
  double *ref = malloc(sizeof(double) * (size_t)(B * S * H * Dh + 1));
  double *lref = malloc(sizeof(double) * (size_t)(B * H * S + 1));
  attention_ref(&q, &k, &v, B, S, L, H, Dh, scale, ref, lref);
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t o = out_poisoned(dt, 3, qd);
    dit_tensor_t lse = out_poisoned(DIT_F32, 3, ld);
    CHECK_OK(dit_cpu_attention(&g_cpu[pi], &q.t, &k.t, &v.t, (int)H, scale, &o, with_lse ? &lse : NULL));
    char what[160];
    snprintf(what, sizeof what, "attention B=%lld S=%lld L=%lld H=%lld Dh=%lld scale=%g pool %d",
             (long long)B, (long long)S, (long long)L, (long long)H, (long long)Dh, scale, pi);
    CHECK(compare(what, &o, ref, tol_for(dt)));
    if (with_lse) {
      strncat(what, " (lse)", sizeof what - strlen(what) - 1);
      CHECK(compare(what, &lse, lref, TOL_F32));
    }
    free(o.data);
    free(lse.data);
  }
  free(ref);
  free(lref);
  tt_free(&q), tt_free(&k), tt_free(&v);
}

/* ---- fp8 attention ---------------------------------------------------------------------- */

/* attn_quant's scale and codes of one (b, h, block), recomputed here from their definition. */
static void check_quant_block(const dit_tensor_t *x, const dit_tensor_t *x8, const dit_tensor_t *xs, int64_t H, int64_t rows, int64_t b,
                              int64_t h, int64_t r) {
  const int64_t T = x->dims[1], HD = x->dims[2], Dh = HD / H, nblk = (T + rows - 1) / rows;
  const int64_t r1 = (r + 1) * rows < T ? (r + 1) * rows : T;
  float amax = 0.0f;
  for (int64_t t = r * rows; t < r1; t++)
    for (int64_t c = 0; c < Dh; c++) amax = fmaxf(amax, fabsf((float)get_elem(x, (b * T + t) * HD + h * Dh + c)));
  const int i8 = x8->dtype == DIT_I8;
  const float s = amax > 0.0f ? amax / (i8 ? 127.0f : 16.0f) : 1.0f; /* e4m3: amax on code 16 (f16 holds Q K^T) */
  CHECK(((const float *)xs->data)[(b * H + h) * nblk + r] == s);
  int bad = 0;
  for (int64_t t = r * rows; t < r1; t++)
    for (int64_t c = 0; c < Dh; c++) {
      const int64_t i = (b * T + t) * HD + h * Dh + c;
      const float y = (float)get_elem(x, i) / s;
      bad += i8 ? ((const int8_t *)x8->data)[i] != (int8_t)fmaxf(-127.0f, fminf(127.0f, rintf(y)))
                : ((const uint8_t *)x8->data)[i] != dit_f32_to_e4m3(y);
    }
  CHECK_EQ_INT(bad, 0);
}

/* Blocks of 64 rows over 70 tokens (the last one partial); head 1's first block all zero (scale 1,
 * codes 0); head 0's last block holds 1e30 (16, 0x58; int8 127) beside values that flush to 0 or
 * subnormals. e4m3 and int8 codes. */
static void test_attn_quant(void) {
  const int64_t H = 2, Dh = 128, xd[3] = {2, 70, H * Dh};
  for (int dt = 0; dt < 4; dt++) {
    const dit_dtype_t xt = dt & 1 ? DIT_BF16 : DIT_F32, ct = dt & 2 ? DIT_I8 : DIT_F8E4M3;
    const int64_t rows = dt & 1 ? 128 : 64, nb = (xd[1] + rows - 1) / rows, sd[3] = {2, H, nb};
    dit_tensor_t x = tensor_alloc(xt, 3, xd), x8 = tensor_alloc(ct, 3, xd), xs = tensor_alloc(DIT_F32, 3, sd);
    for (int64_t i = 0; i < numel_of(3, xd); i++) set_elem(&x, i, rnd(-3, 3));
    for (int64_t t = 0; t < 64; t++)
      for (int64_t c = 0; c < Dh; c++) set_elem(&x, t * H * Dh + Dh + c, 0.0);
    set_elem(&x, 66 * H * Dh + 5, 1e30);
    for (int c = 0; c < 2; c++) {
      memset(x8.data, 0xff, (size_t)numel_of(3, xd));
      CHECK_OK(dit_cpu_attn_quant(&g_cpu[c], &x, (int)H, rows, &x8, &xs));
      for (int64_t b = 0; b < 2; b++)
        for (int64_t h = 0; h < H; h++)
          for (int64_t r = 0; r < nb; r++) check_quant_block(&x, &x8, &xs, H, rows, b, h, r);
    }
    if (!(dt & 1)) {
      CHECK(((const float *)xs.data)[1 * nb + 0] == 1.0f); /* head 1, block 0: all zero */
      CHECK_EQ_INT(((const uint8_t *)x8.data)[Dh + 7], 0);
      CHECK_EQ_INT(((const uint8_t *)x8.data)[66 * H * Dh + 5], ct == DIT_I8 ? 127 : 0x58);
      CHECK(((const float *)xs.data)[1] == (float)1e30 / (ct == DIT_I8 ? 127.0f : 16.0f));
    }
    xs.dims[2] = nb + 1;
    CHECK_ERR(dit_cpu_attn_quant(&g_cpu[0], &x, (int)H, rows, &x8, &xs), INVALID_ARGUMENT, "attn_quant: xs has dims");
    free(x.data), free(x8.data), free(xs.data);
  }
}

/* Token rows as act(x + bias) (attn_quant with heads 1, rows 1, a bf16 bias and act 1): the same
 * codes and scales as the plain quantizer over the rows made by hand with gelu_tanh; without a bias
 * act alone; a bias of the wrong length is refused. */
static void test_attn_quant_act(void) {
  const int64_t xd[3] = {2, 5, 48}, bd[1] = {48}, sd[3] = {2, 1, 5};
  dit_tensor_t x = tensor_alloc(DIT_BF16, 3, xd), bias = tensor_alloc(DIT_BF16, 1, bd), y = tensor_alloc(DIT_F32, 3, xd);
  dit_tensor_t a8 = tensor_alloc(DIT_F8E4M3, 3, xd), as = tensor_alloc(DIT_F32, 3, sd);
  dit_tensor_t r8 = tensor_alloc(DIT_F8E4M3, 3, xd), rs = tensor_alloc(DIT_F32, 3, sd);
  for (int64_t i = 0; i < numel_of(3, xd); i++) set_elem(&x, i, rnd(-6, 6));
  for (int64_t c = 0; c < bd[0]; c++) set_elem(&bias, c, rnd(-1, 1));
  for (int with_bias = 0; with_bias < 2; with_bias++) {
    for (int64_t i = 0; i < numel_of(3, xd); i++) {
      const float v = (float)get_elem(&x, i) + (with_bias ? (float)get_elem(&bias, i % bd[0]) : 0.0f);
      set_elem(&y, i, dit_cpu_gelu_tanh1(v));
    }
    CHECK_OK(dit_cpu_attn_quant_act(&g_cpu[1], &x, with_bias ? &bias : NULL, 1, &a8, &as));
    CHECK_OK(dit_cpu_attn_quant(&g_cpu[0], &y, 1, 1, &r8, &rs));
    CHECK(!memcmp(a8.data, r8.data, (size_t)numel_of(3, xd)));
    CHECK(!memcmp(as.data, rs.data, sizeof(float) * 10));
  }
  CHECK(dit_cpu_gelu_tanh1(-30.0f) == 0.0f && dit_cpu_gelu_tanh1(30.0f) == 30.0f);
  CHECK(fabsf(dit_cpu_gelu_tanh1(1.0f) - 0.841192f) < 1e-5f);
  bias.dims[0] = 47;
  CHECK_ERR(dit_cpu_attn_quant_act(&g_cpu[0], &x, &bias, 1, &a8, &as), INVALID_ARGUMENT, "attn_quant: bias has dims");
  CHECK_ERR(dit_cpu_attn_quant_act(&g_cpu[0], &x, NULL, 2, &a8, &as), INVALID_ARGUMENT, "act = 2");
  free(x.data), free(bias.data), free(y.data), free(a8.data), free(as.data), free(r8.data), free(rs.data);
}

/* The key each column of a group of 16 holds (base/ops.def), written out. */
static const int kVtPerm[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};

/* attn_vmax over 150 keys in 1, 4 (38 keys a split, the last 36), 150 and 100 splits (2 keys a
 * split: splits 75..99 hold none: -inf, inf and 0), against the definition (the sums in key
 * order); a NaN and an infinity count in neither the extremes nor the sum (the infinity in the
 * largest). Too many splits and a wrong vmax shape are refused. */
static void test_attn_vmax(void) {
  const int64_t B = 2, L = 150, H = 2, Dh = 64, vd[3] = {B, L, H * Dh};
  dit_tensor_t v = tensor_alloc(DIT_F32, 3, vd);
  for (int64_t i = 0; i < numel_of(3, vd); i++) set_elem(&v, i, rnd(-2, 2));
  set_elem(&v, (L + 40) * H * Dh + 5, NAN);      /* batch 1, key 40, head 0, channel 5 */
  set_elem(&v, (L + 41) * H * Dh + 6, INFINITY); /* batch 1, key 41, head 0, channel 6 */
  const int64_t splits[4] = {1, 4, 150, 100};
  for (int i = 0; i < 4; i++) {
    const int64_t S = splits[i], n = (L + S - 1) / S, md[5] = {B, H, S, 3, Dh};
    dit_tensor_t m = tensor_alloc(DIT_F32, 5, md);
    for (int c = 0; c < 2; c++) {
      memset(m.data, 0xff, dit_tensor_nbytes(&m));
      CHECK_OK(dit_cpu_attn_vmax(&g_cpu[c], &v, (int)H, &m));
      int bad = 0;
      for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
          for (int64_t sp = 0; sp < S; sp++)
            for (int64_t ch = 0; ch < Dh; ch++) {
              float mx = -INFINITY, mn = INFINITY, sum = 0.0f;
              for (int64_t key = sp * n; key < L && key < (sp + 1) * n; key++) {
                const float x = (float)get_elem(&v, (b * L + key) * H * Dh + h * Dh + ch);
                if (isnan(x)) continue;
                mx = fmaxf(mx, x), mn = fminf(mn, x);
                if (isfinite(x)) sum += x;
              }
              const float *got = (const float *)m.data + ((b * H + h) * S + sp) * 3 * Dh + ch;
              bad += got[0] != mx || got[Dh] != mn || got[2 * Dh] != sum;
            }
      CHECK_EQ_INT(bad, 0);
    }
    if (S == 100) {
      const float *e = (const float *)m.data + ((1 * H + 1) * S + 99) * 3 * Dh + 7;
      CHECK(isinf(e[0]) && e[0] < 0 && isinf(e[Dh]) && e[Dh] > 0 && e[2 * Dh] == 0.0f);
    }
    free(m.data);
  }
  const int64_t md[5] = {B, H, L + 1, 3, Dh};
  dit_tensor_t m = tensor_alloc(DIT_F32, 5, md);
  CHECK_ERR(dit_cpu_attn_vmax(&g_cpu[0], &v, (int)H, &m), INVALID_ARGUMENT, "attn_vmax: vmax has 151 splits, more than the 150 keys of v");
  m.dims[2] = 3, m.dims[4] = Dh + 1;
  CHECK_ERR(dit_cpu_attn_vmax(&g_cpu[0], &v, (int)H, &m), INVALID_ARGUMENT, "attn_vmax: vmax has dims");
  m.rank = 4, m.dims[3] = Dh;
  CHECK_ERR(dit_cpu_attn_vmax(&g_cpu[0], &v, (int)H, &m), INVALID_ARGUMENT,
            "attn_vmax: vmax is f32 [2, 2, 3, 64], expected f32 [B, heads, splits >= 1, 3, Dh]");
  free(m.data), free(v.data);
}

/* 150 keys: two column tiles, the second holding keys 128..149 then zero padding; channel 3 of
 * head 1 in batch 1 all zero (scale 1, mean 0), channel 4 of head 0 offset by 40. From 1, 3 and 150
 * splits: each channel's mean within 1e-6 of the exact one (the splits only reorder its sum), and
 * the scale and codes exactly the rule's around that mean. */
static void test_attn_quant_vt(void) {
  const int64_t B = 2, L = 150, H = 2, Dh = 128, Lp = 256, vd[3] = {B, L, H * Dh}, td[4] = {B, H, Dh, Lp}, sd[4] = {B, H, 2, Dh};
  dit_tensor_t v = tensor_alloc(DIT_BF16, 3, vd), vt8 = tensor_alloc(DIT_F8E4M3, 4, td), vs = tensor_alloc(DIT_F32, 4, sd);
  for (int64_t i = 0; i < numel_of(3, vd); i++) set_elem(&v, i, rnd(-2, 2));
  for (int64_t key = 0; key < L; key++) set_elem(&v, (L + key) * H * Dh + Dh + 3, 0.0);
  for (int64_t b = 0; b < B; b++)
    for (int64_t key = 0; key < L; key++) set_elem(&v, (b * L + key) * H * Dh + 4, 40.0 + (double)((key * 37 + b * 11) % 101) / 50.0 - 1.0);
  for (int64_t col = 0; col < Lp; col++) CHECK_EQ_INT(dit_attn_vt_key(col), col / 16 * 16 + kVtPerm[col % 16]);
  const int64_t splits[3] = {1, 3, 150};
  for (int i = 0; i < 3; i++) {
    const int64_t md[5] = {B, H, splits[i], 3, Dh};
    dit_tensor_t m = tensor_alloc(DIT_F32, 5, md);
    CHECK_OK(dit_cpu_attn_vmax(&g_cpu[0], &v, (int)H, &m));
    for (int c = 0; c < 2; c++) {
      memset(vt8.data, 0xff, (size_t)numel_of(4, td));
      memset(vs.data, 0xff, dit_tensor_nbytes(&vs));
      CHECK_OK(dit_cpu_attn_quant_vt(&g_cpu[c], &v, &m, (int)H, &vt8, &vs));
      int bad = 0;
      for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
          for (int64_t ch = 0; ch < Dh; ch++) {
            const float mean = ((const float *)vs.data)[((b * H + h) * 2 + 1) * Dh + ch];
            double exact = 0;
            for (int64_t key = 0; key < L; key++) exact += get_elem(&v, (b * L + key) * H * Dh + h * Dh + ch);
            exact /= (double)L;
            bad += fabs(mean - exact) > 1e-6 * fmax(1.0, fabs(exact));
            float amax = 0.0f;
            for (int64_t key = 0; key < L; key++)
              amax = fmaxf(amax, fabsf((float)get_elem(&v, (b * L + key) * H * Dh + h * Dh + ch) - mean));
            const float s = amax > 0.0f ? amax / 448.0f : 1.0f, inv = amax > 0.0f ? 448.0f / amax : 1.0f;
            bad += ((const float *)vs.data)[(b * H + h) * 2 * Dh + ch] != s;
            for (int64_t col = 0; col < Lp; col++) {
              const int64_t key = col / 16 * 16 + kVtPerm[col % 16];
              const uint8_t want =
                  key < L ? dit_f32_to_e4m3(((float)get_elem(&v, (b * L + key) * H * Dh + h * Dh + ch) - mean) * inv) : 0;
              bad += ((const uint8_t *)vt8.data)[((b * H + h) * Dh + ch) * Lp + col] != want;
            }
          }
      CHECK_EQ_INT(bad, 0);
      CHECK(((const float *)vs.data)[(1 * H + 1) * 2 * Dh + 3] == 1.0f);
      CHECK(((const float *)vs.data)[((1 * H + 1) * 2 + 1) * Dh + 3] == 0.0f);
      CHECK(fabs(((const float *)vs.data)[Dh + 4] - 40.0) < 0.2); /* batch 0, head 0: the offset is the mean */
      CHECK(((const float *)vs.data)[4] < 1.01f / 448.0f * 2);    /* and the scale that of the spread, not of 40 */
    }
    if (i == 2) {
      m.dims[1] = 1;
      CHECK_ERR(dit_cpu_attn_quant_vt(&g_cpu[0], &v, &m, (int)H, &vt8, &vs), INVALID_ARGUMENT,
                "attn_quant_vt: vmax has dims [2, 1, 150, 3, 128], expected [2, 2, *, 3, 128]");
      m.dtype = DIT_BF16;
      CHECK_ERR(dit_cpu_attn_quant_vt(&g_cpu[0], &v, &m, (int)H, &vt8, &vs), INVALID_ARGUMENT,
                "attn_quant_vt: vmax is bf16 [2, 1, 150, 3, 128], expected f32 [B, heads, splits >= 1, 3, Dh]");
      m.dtype = DIT_F32, m.dims[1] = H;
      vt8.dims[3] = L;
      CHECK_ERR(dit_cpu_attn_quant_vt(&g_cpu[0], &v, &m, (int)H, &vt8, &vs), INVALID_ARGUMENT, "attn_quant_vt: vt8 has dims");
      vt8.dims[3] = Lp;
      vs.dims[2] = 1;
      CHECK_ERR(dit_cpu_attn_quant_vt(&g_cpu[0], &v, &m, (int)H, &vt8, &vs), INVALID_ARGUMENT, "attn_quant_vt: vs has dims");
      vs.dims[2] = 2;
    }
    free(m.data);
  }
  free(v.data), free(vt8.data), free(vs.data);
}

/* attention_fp8 against a dense attention in double over the DEQUANTIZED q, k and v (what the
 * operands hold) whose P is not rounded: what remains is P's e4m3 rounding (and fp32 sums). A P
 * of the normal range (>= 2^-6) is off by at most 2^-4 of itself, a subnormal one by at most
 * 2^-10; the output, a P-weighted average of v rows, moves by at most 2^-4 max|v| plus the
 * subnormals' share, and the errors of many keys mostly cancel: measured max|err| / max|v| 8.3e-3
 * (1.2e-2 with the schedule) and cosine 0.9998 here. Bounds: max|err| <= 2^-4 max|v|, cosine >=
 * 0.999. The row sums are the rounded P's (as the kernel's P V^T makes them), so lse, against the
 * unrounded P's, is off by at most -log(1 - 2^-4) < 0.0645 (measured 1.4e-2). With a schedule the
 * reference masks the unlisted key tiles. */
/* pv8 0: V is v itself and P rounds to bf16 (2^-9 of itself at most): bounds max|err| <= max|v| /
 * 128 and cosine >= 0.99999; the row sums are the unrounded P's, lse within 1e-4. kt: keys per
 * tile and per scale of k (128, or 192: one tile and part of another; the schedule only at 128). */
static void check_attention_fp8(dit_dtype_t codes, int pv8, int64_t kt) {
  const int64_t B = 1, S = 200, H = 2, Dh = 128, HD = H * Dh, Lp = 256;
  const int64_t xd[3] = {B, S, HD}, qsd[3] = {B, H, 4}, ksd[3] = {B, H, 2}, td[4] = {B, H, Dh, Lp}, vsd[4] = {B, H, 2, Dh},
                ld[3] = {B, H, S}, tsd[2] = {2, 3};
  const double scale = 1.0 / sqrt((double)Dh);
  dit_tensor_t q = tensor_alloc(DIT_BF16, 3, xd), k = tensor_alloc(DIT_BF16, 3, xd), v = tensor_alloc(DIT_BF16, 3, xd);
  /* v: every fourth channel offset by 1.5 (V^T holds v less its channel means) */
  for (int64_t i = 0; i < numel_of(3, xd); i++)
    set_elem(&q, i, rnd(-2, 2)), set_elem(&k, i, rnd(-2, 2)), set_elem(&v, i, rnd(-1, 1) + (i % 4 == 1 ? 1.5 : 0.0));
  dit_tensor_t q8 = tensor_alloc(codes, 3, xd), k8 = tensor_alloc(codes, 3, xd), vt8 = tensor_alloc(DIT_F8E4M3, 4, td);
  dit_tensor_t qs = tensor_alloc(DIT_F32, 3, qsd), ks = tensor_alloc(DIT_F32, 3, ksd), vs = tensor_alloc(DIT_F32, 4, vsd);
  dit_tensor_t o = tensor_alloc(DIT_F32, 3, xd), o1 = tensor_alloc(DIT_F32, 3, xd), lse = tensor_alloc(DIT_F32, 3, ld);
  dit_tensor_t tiles = tensor_alloc(DIT_I32, 2, tsd), bound = tensor_alloc(DIT_I32, 1, &B);
  CHECK_OK(dit_cpu_attn_quant(&g_cpu[0], &q, (int)H, 64, &q8, &qs));
  CHECK_OK(dit_cpu_attn_quant(&g_cpu[0], &k, (int)H, kt, &k8, &ks));
  const int64_t md[5] = {B, H, 2, 3, Dh};
  dit_tensor_t vm = tensor_alloc(DIT_F32, 5, md);
  CHECK_OK(dit_cpu_attn_vmax(&g_cpu[0], &v, (int)H, &vm));
  CHECK_OK(dit_cpu_attn_quant_vt(&g_cpu[0], &v, &vm, (int)H, &vt8, &vs));
  free(vm.data);
  /* The dequantized operands, [b, t, h*Dh + c]. */
  double *dq = malloc(sizeof(double) * (size_t)(3 * S * HD) + 1), *dk = dq + S * HD, *dv = dk + S * HD, *p = malloc(sizeof(double) * S);
  for (int64_t t = 0; t < S; t++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t c = 0; c < Dh; c++) {
        const int64_t i = t * HD + h * Dh + c, col = t / 16 * 16;
        int64_t pos = 0;
        while (kVtPerm[pos] != t % 16) pos++;
        dq[i] = get_elem(&q8, i) * ((const float *)qs.data)[h * 4 + t / 64];
        dk[i] = get_elem(&k8, i) * ((const float *)ks.data)[h * 2 + t / kt];
        dv[i] = pv8 ? dit_e4m3_to_f32(((const uint8_t *)vt8.data)[(h * Dh + c) * Lp + col + pos]) * ((const float *)vs.data)[h * 2 * Dh + c] +
                          ((const float *)vs.data)[(h * 2 + 1) * Dh + c]
                    : get_elem(&v, i);
      }
  const int32_t sched[6] = {1, 1, -1, 2, 0, 1}; /* query tile 0: key tile 1; tile 1: both */
  memcpy(tiles.data, sched, sizeof sched);
  /* Every key, the schedule, then a key bound inside the second key tile (150: its keys 150..199 excluded). */
  ((int32_t *)bound.data)[0] = 150;
  for (int mode = 0; mode < 3; mode++) {
    const int tiled = mode == 1, bounded = mode == 2;
    if (tiled && kt != 128) continue;
    for (int c = 0; c < 2; c++)
      CHECK_OK(dit_cpu_attention_fp8(&g_cpu[c], &q8, &qs, &k8, &ks, pv8 ? &vt8 : &v, pv8 ? &vs : NULL, tiled ? &tiles : NULL,
                                     bounded ? &bound : NULL, (int)H, scale, kt, c ? &o1 : &o, c ? NULL : &lse));
    CHECK(!memcmp(o.data, o1.data, dit_tensor_nbytes(&o))); /* the thread count changes nothing */
    double dot = 0, n1 = 0, n2 = 0, maxerr = 0, maxv = 0, maxlse = 0;
    for (int64_t i = 0; i < S * HD; i++) maxv = fmax(maxv, fabs(dv[i]));
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < S; i++) {
        double mx = -INFINITY, l = 0;
        for (int64_t j = 0; j < S; j++) {
          const int allowed = tiled ? (i < 128 ? j >= 128 : 1) : bounded ? j < 150 : 1;
          double sc = 0;
          for (int64_t c = 0; c < Dh; c++) sc += dq[i * HD + h * Dh + c] * dk[j * HD + h * Dh + c];
          p[j] = allowed ? sc * scale : -INFINITY;
          mx = fmax(mx, p[j]);
        }
        for (int64_t j = 0; j < S; j++) l += (p[j] = exp(p[j] - mx));
        for (int64_t c = 0; c < Dh; c++) {
          double r = 0;
          for (int64_t j = 0; j < S; j++) r += p[j] * dv[j * HD + h * Dh + c];
          r /= l;
          const double got = get_elem(&o, i * HD + h * Dh + c);
          dot += got * r, n1 += got * got, n2 += r * r;
          maxerr = fmax(maxerr, fabs(got - r));
        }
        maxlse = fmax(maxlse, fabs(get_elem(&lse, h * S + i) - (mx + log(l))));
      }
    const double cosine = dot / sqrt(n1 * n2);
    printf("attention_fp8 (%s q, k; %s P V; key tiles of %lld)%s: max|err| / max|v| %.3e, cosine %.6f, max lse err %.2e\n",
           dit_dtype_name(codes), pv8 ? "e4m3" : "bf16", (long long)kt, tiled ? " (tiled)" : bounded ? " (key bound 150)" : "",
           maxerr / maxv, cosine, maxlse);
    CHECK(maxerr <= maxv / (pv8 ? 16 : 128));
    CHECK(maxerr > 1e-6 * maxv); /* P is rounded: not the unrounded result */
    CHECK(cosine >= (pv8 ? 0.999 : 0.99999));
    CHECK(maxlse <= (pv8 ? 0.0645 : 1e-4));
  }
  /* A bound of 0 (or below): no keys, a zero output and lse -inf; one past L: every key, as without. */
  ((int32_t *)bound.data)[0] = 0;
  CHECK_OK(dit_cpu_attention_fp8(&g_cpu[0], &q8, &qs, &k8, &ks, pv8 ? &vt8 : &v, pv8 ? &vs : NULL, NULL, &bound, (int)H, scale, kt, &o, &lse));
  for (int64_t i = 0; i < S * HD; i++) CHECK(get_elem(&o, i) == 0.0);
  for (int64_t i = 0; i < H * S; i++) CHECK(isinf(get_elem(&lse, i)) && get_elem(&lse, i) < 0);
  ((int32_t *)bound.data)[0] = 1000;
  CHECK_OK(dit_cpu_attention_fp8(&g_cpu[0], &q8, &qs, &k8, &ks, pv8 ? &vt8 : &v, pv8 ? &vs : NULL, NULL, &bound, (int)H, scale, kt, &o, NULL));
  CHECK_OK(dit_cpu_attention_fp8(&g_cpu[0], &q8, &qs, &k8, &ks, pv8 ? &vt8 : &v, pv8 ? &vs : NULL, NULL, NULL, (int)H, scale, kt, &o1, NULL));
  CHECK(!memcmp(o.data, o1.data, dit_tensor_nbytes(&o)));
  CHECK_ERR(dit_cpu_attention_fp8(&g_cpu[0], &q8, &qs, &k8, &ks, &vt8, &vs, &tiles, &bound, (int)H, scale, 128, &o, NULL), INVALID_ARGUMENT,
            "attention_fp8: a key bound with a tile schedule: expected one or the other");
  CHECK_ERR(dit_cpu_attention_fp8(&g_cpu[0], &q8, &qs, &k8, &ks, &vt8, &vs, &tiles, NULL, (int)H, scale, 192, &o, NULL), INVALID_ARGUMENT,
            "attention_fp8: key_tile 192 with a tile schedule, expected the schedule's 128");
  CHECK_ERR(dit_cpu_attention_fp8(&g_cpu[0], &q8, &qs, &k8, &ks, &vt8, &vs, NULL, NULL, (int)H, scale, 100, &o, NULL), INVALID_ARGUMENT,
            "attention_fp8: key_tile 100, expected a multiple of 32 in 32..256");
  bound.dtype = DIT_F32;
  CHECK_ERR(dit_cpu_attention_fp8(&g_cpu[0], &q8, &qs, &k8, &ks, &vt8, &vs, NULL, &bound, (int)H, scale, kt, &o, NULL), INVALID_ARGUMENT,
            "attention_fp8: bound has dtype f32, expected i32");
  bound.dtype = DIT_I32;
  vs.dims[3] = 64;
  CHECK_ERR(dit_cpu_attention_fp8(&g_cpu[0], &q8, &qs, &k8, &ks, &vt8, &vs, NULL, NULL, (int)H, scale, kt, &o, NULL), INVALID_ARGUMENT,
            "attention_fp8: vs has dims");
  CHECK_ERR(dit_cpu_attention_fp8(&g_cpu[0], &q, &qs, &k8, &ks, &vt8, &vs, NULL, NULL, (int)H, scale, kt, &o, NULL), INVALID_ARGUMENT,
            "attention_fp8: q8 is bf16");
  vs.dims[3] = Dh;
  k8.dtype = codes == DIT_I8 ? DIT_F8E4M3 : DIT_I8; /* q and k codes of two kinds */
  CHECK_ERR(dit_cpu_attention_fp8(&g_cpu[0], &q8, &qs, &k8, &ks, &vt8, &vs, NULL, NULL, (int)H, scale, kt, &o, NULL), INVALID_ARGUMENT,
            codes == DIT_I8 ? "attention_fp8: k8 is f8e4m3, expected q8's dtype i8" : "attention_fp8: k8 is i8 [1, 200, 256], expected f8e4m3");
  k8.dtype = codes;
  CHECK_ERR(dit_cpu_attention_fp8(&g_cpu[0], &q8, &qs, &k8, &ks, &vs, NULL, NULL, NULL, (int)H, scale, kt, &o, NULL), INVALID_ARGUMENT,
            "attention_fp8: v has dims [1, 2, 2, 128], expected [1, 200, 256]"); /* v itself: k8's dims */
  free(dq), free(p);
  dit_tensor_t *all[] = {&q, &k, &v, &q8, &k8, &vt8, &qs, &ks, &vs, &o, &o1, &lse, &tiles, &bound};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
}

static void test_attention_fp8(void) {
  check_attention_fp8(DIT_F8E4M3, 1, 128);
  check_attention_fp8(DIT_F8E4M3, 1, 192);
  check_attention_fp8(DIT_I8, 1, 128);
  check_attention_fp8(DIT_I8, 1, 192);
  check_attention_fp8(DIT_I8, 0, 128);
}

static void test_attention(void) {
  check_attention(1, 1, 1, 1, 8, 1, 1 / sqrt(8.0), 1, DIT_F32);
  check_attention(2, 5, 1, 3, 16, 1, 0.25, 1, DIT_F32);
  check_attention(1, 49, 130, 2, 24, 1, 1 / sqrt(24.0), 1, DIT_F32);
  check_attention(1, 100, 257, 2, 64, 1, 0.125, 0, DIT_F32);
  check_attention(2, 3, 300, 1, 12, 2, 1.0, 1, DIT_F32); /* large scores: online max matters */
  check_attention(1, 97, 129, 1, 6, 1.5, 0.7, 1, DIT_F32);
  check_attention(1, 48, 128, 4, 128, 1, 1 / sqrt(128.0), 1, DIT_F32);
  check_attention(1, 50, 140, 2, 40, 1, 1 / sqrt(40.0), 1, DIT_BF16);
  check_attention(1, 7, 33, 3, 8, 1, 0.5, 1, DIT_F16);
}

/* Attention with a score bias [S, L, H] (T5's relative position bias) and a key bound, against
 * a naive double reference: scores scale * q.k + bias over each item's first bound keys. The
 * keys span several blocks and the bias grows with the key, so the running max moves. */
static void check_biased_attention(int64_t B, int64_t S, int64_t L, int64_t H, int64_t Dh, const int32_t *bounds, double scale,
                                   dit_dtype_t dt) {
  const int64_t C = H * Dh, qd[3] = {B, S, C}, kd[3] = {B, L, C}, bd[3] = {S, L, H};
  tt_t q = tt_rand(dt, 3, qd, -1, 1), k = tt_rand(dt, 3, kd, -1, 1), v = tt_rand(dt, 3, kd, -1, 1);
  tt_t bias = tt_rand(DIT_F32, 3, bd, -3, 3);
  for (int64_t i = 0; i < S * L * H; i++) {
    bias.v[i] += 4.0 * (double)((i / H) % L) / (double)L;
    set_elem(&bias.t, i, bias.v[i]);
    bias.v[i] = get_elem(&bias.t, i);
  }
  double *ref = malloc(sizeof(double) * (size_t)(B * S * C));
  attention_ref_masked(&q, &k, &v, B, S, L, H, Dh, scale, bounds, bias.v, 0, ref, NULL);
  dit_tensor_t bt = {(void *)bounds, DIT_I32, 1, {B}};
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t o = out_poisoned(dt, 3, qd);
    CHECK_OK(dit_cpu_attention_biased(&g_cpu[pi], &q.t, &k.t, &v.t, bounds ? &bt : NULL, &bias.t, (int)H, scale, &o, NULL));
    char what[160];
    snprintf(what, sizeof what, "biased attention B=%lld S=%lld L=%lld H=%lld Dh=%lld bound=%d pool %d", (long long)B, (long long)S,
             (long long)L, (long long)H, (long long)Dh, bounds != NULL, pi);
    CHECK(compare(what, &o, ref, tol_for(dt)));
    free(o.data);
  }
  free(ref);
  tt_free(&q), tt_free(&k), tt_free(&v), tt_free(&bias);
}

/* Frame-causal attention (causal_block n: query i attends key j iff j / n <= i / n) against a
 * dense reference whose masked scores are -inf: blocks of n that straddle the 128-key blocks and
 * the query blocks, a partial last block, n = 1 (ordinary causal attention) and n >= S (no mask).
 * The keys grow with their index, so the masked keys would dominate if they leaked. */
static void check_causal_attention(int64_t B, int64_t S, int64_t H, int64_t Dh, int64_t n, dit_dtype_t dt) {
  const int64_t C = H * Dh, qd[3] = {B, S, C}, ld[3] = {B, H, S};
  tt_t q = tt_rand(dt, 3, qd, -1, 1), k = tt_rand(dt, 3, qd, -1, 1), v = tt_rand(dt, 3, qd, -1, 1);
  for (int64_t i = 0; i < B * S * C; i++) {
    set_elem(&k.t, i, k.v[i] + 2.0 * (double)((i / C) % S) / (double)S * (q.v[i % C] > 0 ? 1 : -1));
    k.v[i] = get_elem(&k.t, i);
  }
  double *ref = malloc(sizeof(double) * (size_t)(B * S * C)), *lref = malloc(sizeof(double) * (size_t)(B * H * S));
  const double scale = 1 / sqrt((double)Dh);
  attention_ref_masked(&q, &k, &v, B, S, S, H, Dh, scale, NULL, NULL, n, ref, lref);
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t o = out_poisoned(dt, 3, qd), lse = out_poisoned(DIT_F32, 3, ld);
    CHECK_OK(dit_cpu_attention_causal(&g_cpu[pi], &q.t, &k.t, &v.t, NULL, n, (int)H, scale, &o, &lse));
    char what[160];
    snprintf(what, sizeof what, "causal attention B=%lld S=%lld H=%lld Dh=%lld block=%lld pool %d", (long long)B, (long long)S,
             (long long)H, (long long)Dh, (long long)n, pi);
    CHECK(compare(what, &o, ref, tol_for(dt)));
    strncat(what, " (lse)", sizeof what - strlen(what) - 1);
    CHECK(compare(what, &lse, lref, TOL_F32));
    free(o.data);
    free(lse.data);
  }
  free(ref);
  free(lref);
  tt_free(&q), tt_free(&k), tt_free(&v);
}

static void test_causal_attention(void) {
  check_causal_attention(1, 300, 1, 16, 96, DIT_F32);  /* frames of 96 tokens across key blocks of 128, a partial last frame */
  check_causal_attention(2, 200, 2, 8, 1, DIT_F32);    /* ordinary causal attention */
  check_causal_attention(1, 520, 1, 24, 130, DIT_F32); /* frames just over a key block */
  check_causal_attention(1, 45, 3, 8, 7, DIT_F32);     /* short frames inside one block */
  check_causal_attention(1, 40, 1, 8, 64, DIT_F32);    /* one partial frame: no mask */
  check_causal_attention(1, 190, 2, 16, 48, DIT_BF16);
  /* A key count other than the queries' is refused. */
  const int64_t qd[3] = {1, 8, 8}, kd[3] = {1, 9, 8};
  tt_t q = tt_rand(DIT_F32, 3, qd, -1, 1), k = tt_rand(DIT_F32, 3, kd, -1, 1);
  dit_tensor_t o = out_poisoned(DIT_F32, 3, qd);
  CHECK_ERR(dit_cpu_attention_causal(&g_cpu[0], &q.t, &k.t, &k.t, NULL, 4, 1, 1.0, &o, NULL), INVALID_ARGUMENT,
            "attention: causal_block = 4 with S != L");
  free(o.data);
  tt_free(&q), tt_free(&k);
}

/* The gated feed-forward's product and the embedding gather (token ids, position buckets). */
static void test_umt5_ops(void) {
  static const int32_t bounds[2] = {300, 77};
  check_biased_attention(2, 16, 16, 4, 8, NULL, 1.0, DIT_F32);
  check_biased_attention(2, 70, 300, 3, 16, bounds, 1.0, DIT_F32);
  check_biased_attention(2, 33, 140, 2, 24, bounds, 0.5, DIT_BF16);
  /* mul: odd length, mixed storage */
  const int64_t md[2] = {3, 37};
  tt_t a = tt_rand(DIT_BF16, 2, md, -2, 2), b = tt_rand(DIT_F32, 2, md, -2, 2);
  double ref[3 * 37];
  for (int i = 0; i < 3 * 37; i++) ref[i] = a.v[i] * b.v[i];
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(DIT_F32, 2, md);
    CHECK_OK(dit_cpu_mul(&g_cpu[pi], &a.t, &b.t, &y));
    CHECK(compare("mul bf16 x f32", &y, ref, TOL_F32));
    free(y.data);
  }
  tt_free(&a), tt_free(&b);
  /* embedding: i64 and i32 ids, bf16 table into f32 and bf16 rows */
  const int64_t td[2] = {11, 5}, id[2] = {2, 3}, yd[3] = {2, 3, 5};
  tt_t table = tt_rand(DIT_BF16, 2, td, -3, 3);
  const int64_t ids64[6] = {0, 10, 3, 3, 7, 1};
  int32_t ids32[6];
  for (int i = 0; i < 6; i++) ids32[i] = (int32_t)ids64[i];
  double eref[30];
  for (int i = 0; i < 6; i++)
    for (int d = 0; d < 5; d++) eref[i * 5 + d] = table.v[ids64[i] * 5 + d];
  for (int w = 0; w < 2; w++) {
    dit_tensor_t ids = {w ? (void *)ids32 : (void *)ids64, w ? DIT_I32 : DIT_I64, 2, {id[0], id[1]}};
    dit_tensor_t y = out_poisoned(w ? DIT_BF16 : DIT_F32, 3, yd);
    CHECK_OK(dit_cpu_embedding(&g_cpu[w], &ids, &table.t, &y));
    CHECK(compare("embedding", &y, eref, TOL_F32));
    free(y.data);
  }
  int32_t bad[6] = {0, 1, 2, 11, 4, 5};
  dit_tensor_t ids = {bad, DIT_I32, 2, {id[0], id[1]}};
  dit_tensor_t y = out_poisoned(DIT_F32, 3, yd);
  CHECK_ERR(dit_cpu_embedding(&g_cpu[0], &ids, &table.t, &y), OUT_OF_RANGE,
            "embedding: id 11 at flat position 3 is outside the table's rows 0..10");
  free(y.data);
  tt_free(&table);
}

/* ---- text masks: key_bound and bounded attention ----------------------------------------- */

/* Attention with a key bound against the unbounded kernel over each item's first bound keys
 * (views of the same data): outputs and lse bit-identical, since the bounded stream stops where
 * the shorter one ends; a bound <= 0 gives zeros and lse -inf, a bound >= L all keys. */
static void check_bounded_attention(int64_t S, int64_t L, int64_t H, int64_t Dh, int64_t B, const int32_t *bounds,
                                    dit_dtype_t dt) {
  const int64_t C = H * Dh, qd[3] = {B, S, C}, kd[3] = {B, L, C}, ld[3] = {B, H, S};
  const size_t es = dit_dtype_size(dt);
  const double scale = 1 / sqrt((double)Dh);
  tt_t q = tt_rand(dt, 3, qd, -2, 2), k = tt_rand(dt, 3, kd, -2, 2), v = tt_rand(dt, 3, kd, -1, 1);
  dit_tensor_t bt = {(void *)bounds, DIT_I32, 1, {B}};
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t o = out_poisoned(dt, 3, qd), lse = out_poisoned(DIT_F32, 3, ld);
    CHECK_OK(dit_cpu_attention_bounded(&g_cpu[pi], &q.t, &k.t, &v.t, &bt, (int)H, scale, &o, &lse));
    for (int64_t b = 0; b < B; b++) {
      const int64_t lb = bounds[b] <= 0 ? 0 : bounds[b] < L ? bounds[b] : L;
      const char *ob = (const char *)o.data + (size_t)(b * S * C) * es;
      const float *lsb = (const float *)lse.data + b * H * S;
      if (lb == 0) {
        int zero = 1;
        for (int64_t i = 0; i < S * C; i++) zero &= get_elem(&o, b * S * C + i) == 0;
        for (int64_t i = 0; i < H * S; i++) zero &= lsb[i] == -INFINITY;
        CHECK(zero);
        continue;
      }
      const dit_tensor_t q1 = {(char *)q.t.data + (size_t)(b * S * C) * es, dt, 3, {1, S, C}};
      const dit_tensor_t k1 = {(char *)k.t.data + (size_t)(b * L * C) * es, dt, 3, {1, lb, C}};
      const dit_tensor_t v1 = {(char *)v.t.data + (size_t)(b * L * C) * es, dt, 3, {1, lb, C}};
      const int64_t qd1[3] = {1, S, C}, ld1[3] = {1, H, S};
      dit_tensor_t o1 = out_poisoned(dt, 3, qd1), l1 = out_poisoned(DIT_F32, 3, ld1);
      CHECK_OK(dit_cpu_attention(&g_cpu[pi], &q1, &k1, &v1, (int)H, scale, &o1, &l1));
      const int same_o = !memcmp(ob, o1.data, (size_t)(S * C) * es), same_l = !memcmp(lsb, l1.data, sizeof(float) * (size_t)(H * S));
      if (!same_o || !same_l)
        fprintf(stderr, "  bounded attention S=%lld L=%lld %s pool %d: item %lld (bound %d) differs from %lld keys (out %d, lse %d)\n",
                (long long)S, (long long)L, dit_dtype_name(dt), pi, (long long)b, bounds[b], (long long)lb, same_o, same_l);
      CHECK(same_o && same_l);
      free(o1.data);
      free(l1.data);
    }
    free(o.data);
    free(lse.data);
  }
  tt_free(&q), tt_free(&k), tt_free(&v);
}

static void test_masks(void) {
  /* Key blocks of 128: a bound inside the second block, none, past the end, one past a block. */
  static const int32_t b4[4] = {130, 0, 400, 257}, b3[3] = {128, 1, -3}, b2[2] = {33, 70};
  check_bounded_attention(37, 300, 2, 24, 4, b4, DIT_F32);
  check_bounded_attention(5, 128, 1, 8, 3, b3, DIT_F32);
  check_bounded_attention(20, 70, 3, 16, 2, b2, DIT_BF16);

  /* key_bound on every dtype: a prefix of 3 (then -0, a zero), all valid, none, and a zero then
   * nonzeros (only the prefix counts). */
  static const double rows[4][5] = {{1, 2, -1, -0.0, 0}, {1, 1, 1, 1, 7}, {0, 0, 0, 0, 0}, {3, 0, 1, 0, 1}};
  static const int32_t want[4] = {10, 12, 7, 8};
  const int64_t md[2] = {4, 5}, od[1] = {4};
  for (int dt = 0; dt < DIT_DTYPE_COUNT; dt++) {
    dit_tensor_t m = tensor_alloc((dit_dtype_t)dt, 2, md), o = tensor_alloc(DIT_I32, 1, od);
    for (int i = 0; i < 20; i++) set_elem(&m, i, rows[i / 5][i % 5]);
    for (int i = 0; i < 4; i++) ((int32_t *)o.data)[i] = -1;
    CHECK_OK(dit_cpu_key_bound(&g_cpu[0], &m, 7, &o));
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(((int32_t *)o.data)[i], want[i]);
    /* The runtime refuses the fourth row when the mask is set as a key_bound step's input. */
    dit_plan_step_t st = {.kind = DIT_OP_KEY_BOUND, .n_in = 1, .n_out = 1, .in = {2}, .out = {3}};
    dit_plan_t plan = {.n_steps = 1, .steps = &st};
    CHECK_ERR(dit_exec_check_mask_input(&plan, 2, "encoder_attention_mask", &m), INVALID_ARGUMENT,
              "input 'encoder_attention_mask': batch item 3 has a nonzero at position 2 after a zero at 1");
    m.dims[0] = 3; /* the first three rows are prefixes */
    CHECK_OK(dit_exec_check_mask_input(&plan, 2, "encoder_attention_mask", &m));
    m.dims[0] = 4;
    CHECK_OK(dit_exec_check_mask_input(&plan, 1, "other", &m)); /* not read by key_bound: not a mask */
    free(m.data);
    free(o.data);
  }

  float buf[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  int32_t ib[4];
  dit_tensor_t m = {buf, DIT_F32, 2, {2, 4}}, m1 = {buf, DIT_F32, 1, {8}}, of = {ib, DIT_F32, 1, {2}}, oi = {ib, DIT_I32, 1, {2}};
  dit_tensor_t o3 = {ib, DIT_I32, 1, {3}};
  CHECK_ERR(dit_cpu_key_bound(&g_cpu[0], &m, 0, &of), INVALID_ARGUMENT, "key_bound: out has dtype f32, expected i32");
  CHECK_ERR(dit_cpu_key_bound(&g_cpu[0], &m1, 0, &oi), INVALID_ARGUMENT, "key_bound: mask");
  CHECK_ERR(dit_cpu_key_bound(&g_cpu[0], &m, 0, &o3), INVALID_ARGUMENT, "key_bound: out");
  CHECK_ERR(dit_cpu_key_bound(&g_cpu[0], &m, -1, &oi), INVALID_ARGUMENT, "key_bound: offset -1 is outside");
  CHECK_OK(dit_cpu_key_bound(&g_cpu[0], &m, 5, &oi));
  CHECK(ib[0] == 9 && ib[1] == 9);

  /* bound must be i32 [B] */
  float qb[64], ob[64];
  for (int i = 0; i < 64; i++) qb[i] = 0.5f;
  dit_tensor_t q = {qb, DIT_F32, 3, {2, 4, 8}}, o = {ob, DIT_F32, 3, {2, 4, 8}};
  dit_tensor_t bf = {ib, DIT_F32, 1, {2}}, bshort = {ib, DIT_I32, 1, {3}};
  ib[0] = ib[1] = 2;
  CHECK_ERR(dit_cpu_attention_bounded(&g_cpu[0], &q, &q, &q, &bf, 2, 0.5, &o, NULL), INVALID_ARGUMENT,
            "attention: bound has dtype f32, expected i32");
  CHECK_ERR(dit_cpu_attention_bounded(&g_cpu[0], &q, &q, &q, &bshort, 2, 0.5, &o, NULL), INVALID_ARGUMENT, "attention: bound");
}

/* ---- norms ------------------------------------------------------------------------------ */

static void layernorm_row(const double *x, int64_t D, double eps, double *y) {
  double mean = 0, var = 0;
  for (int64_t d = 0; d < D; d++) mean += x[d];
  mean /= (double)D;
  for (int64_t d = 0; d < D; d++) var += (x[d] - mean) * (x[d] - mean);
  var /= (double)D;
  for (int64_t d = 0; d < D; d++) y[d] = (x[d] - mean) / sqrt(var + eps);
}

static void check_layernorm(int rank, const int64_t *dims, int affine, double eps, double lo,
                            double hi, dit_dtype_t dt) {
  const int64_t D = dims[rank - 1], rows = numel_of(rank, dims) / D;
  const int64_t wd[1] = {D};
  tt_t x = tt_rand(dt, rank, dims, lo, hi);
  tt_t w = tt_rand(dt, 1, wd, -2, 2), b = tt_rand(dt, 1, wd, -1, 1);
  double *ref = malloc(sizeof(double) * (size_t)(rows * D));
  for (int64_t r = 0; r < rows; r++) {
    layernorm_row(x.v + r * D, D, eps, ref + r * D);
    if (affine)
      for (int64_t d = 0; d < D; d++) ref[r * D + d] = ref[r * D + d] * w.v[d] + b.v[d];
  }
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(dt, rank, dims);
    CHECK_OK(dit_cpu_layernorm(&g_cpu[pi], &x.t, affine ? &w.t : NULL, affine ? &b.t : NULL, eps, &y));
    char what[128];
    snprintf(what, sizeof what, "layernorm rows=%lld D=%lld affine=%d", (long long)rows, (long long)D, affine);
    CHECK(compare(what, &y, ref, tol_for(dt)));
    free(y.data);
  }
  free(ref);
  tt_free(&x), tt_free(&w), tt_free(&b);
}

/* The sliced form of groupnorm: groupnorm_stats against each slice's mean and M2 in double (slices
 * of floor-divided pixel ranges: one, three and one pixel a slice), and groupnorm_apply of them
 * equal to groupnorm's result y within fp32 rounding (the statistics pass through f32). */
static void check_groupnorm_sliced(const tt_t *x, const tt_t *w, const tt_t *b, int64_t P, int64_t groups, double eps,
                                   const dit_tensor_t *y) {
  const int64_t B = x->t.dims[0], C = x->t.dims[x->t.rank - 1], cg = C / groups, n = dit_tensor_numel(y);
  const int64_t counts[3] = {1, P < 3 ? P : 3, P};
  double *one = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) one[i] = get_elem(y, i);
  for (int k = 0; k < 3; k++) {
    const int64_t S = counts[k], sd[4] = {B, S, groups, 2};
    dit_tensor_t st = out_poisoned(DIT_F32, 4, sd);
    double *sref = malloc(sizeof(double) * (size_t)(B * S * groups * 2));
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t s = 0; s < S; s++)
        for (int64_t g = 0; g < groups; g++) {
          const int64_t p0 = s * P / S, p1 = (s + 1) * P / S;
          double sum = 0, m2 = 0;
          for (int64_t p = p0; p < p1; p++)
            for (int64_t c = g * cg; c < (g + 1) * cg; c++) sum += x->v[(bi * P + p) * C + c];
          const double mean = sum / (double)((p1 - p0) * cg);
          for (int64_t p = p0; p < p1; p++)
            for (int64_t c = g * cg; c < (g + 1) * cg; c++) m2 += (x->v[(bi * P + p) * C + c] - mean) * (x->v[(bi * P + p) * C + c] - mean);
          sref[((bi * S + s) * groups + g) * 2] = mean;
          sref[((bi * S + s) * groups + g) * 2 + 1] = m2;
        }
    char what[128];
    snprintf(what, sizeof what, "groupnorm_stats P=%lld C=%lld groups=%lld slices=%lld", (long long)P, (long long)C, (long long)groups,
             (long long)S);
    CHECK_OK(dit_cpu_groupnorm_stats(&g_cpu[1], &x->t, groups, S, &st));
    CHECK(compare(what, &st, sref, 1e-6));
    dit_tensor_t y2 = out_poisoned(y->dtype, y->rank, y->dims);
    CHECK_OK(dit_cpu_groupnorm_apply(&g_cpu[1], &x->t, &st, &w->t, &b->t, eps, &y2));
    snprintf(what, sizeof what, "groupnorm_apply = groupnorm, P=%lld C=%lld groups=%lld slices=%lld", (long long)P, (long long)C,
             (long long)groups, (long long)S);
    CHECK(compare(what, &y2, one, y->dtype == DIT_F32 ? 2e-6 : tol_for(y->dtype)));
    free(y2.data);
    free(st.data);
    free(sref);
  }
  /* More slices than pixels, and statistics of another grouping, refused by name. */
  const int64_t bad[4] = {B, P + 1, groups, 2};
  dit_tensor_t st = out_poisoned(DIT_F32, 4, bad), y2 = out_poisoned(y->dtype, y->rank, y->dims);
  CHECK_ERR(dit_cpu_groupnorm_stats(&g_cpu[1], &x->t, groups, P + 1, &st), INVALID_ARGUMENT, "slices of the");
  CHECK_ERR(dit_cpu_groupnorm_apply(&g_cpu[1], &x->t, &st, &w->t, &b->t, eps, &y2), INVALID_ARGUMENT, "groupnorm_apply: stats");
  free(st.data), free(y2.data), free(one);
}

/* groupnorm against the naive loop of its definition: per item and group, the mean and variance
 * (two passes in double) over every pixel's channels of the group. */
static void check_groupnorm(int rank, const int64_t *dims, int64_t groups, double eps, double lo, double hi, dit_dtype_t dt) {
  const int64_t B = dims[0], C = dims[rank - 1], P = numel_of(rank, dims) / (B * C), cg = C / groups, wd[1] = {C};
  tt_t x = tt_rand(dt, rank, dims, lo, hi), w = tt_rand(dt, 1, wd, -2, 2), b = tt_rand(dt, 1, wd, -1, 1);
  double *ref = malloc(sizeof(double) * (size_t)(B * P * C));
  for (int64_t bi = 0; bi < B; bi++)
    for (int64_t g = 0; g < groups; g++) {
      double sum = 0, var = 0;
      for (int64_t p = 0; p < P; p++)
        for (int64_t c = g * cg; c < (g + 1) * cg; c++) sum += x.v[(bi * P + p) * C + c];
      const double mean = sum / (double)(P * cg);
      for (int64_t p = 0; p < P; p++)
        for (int64_t c = g * cg; c < (g + 1) * cg; c++) var += (x.v[(bi * P + p) * C + c] - mean) * (x.v[(bi * P + p) * C + c] - mean);
      const double rstd = 1 / sqrt(var / (double)(P * cg) + eps);
      for (int64_t p = 0; p < P; p++)
        for (int64_t c = g * cg; c < (g + 1) * cg; c++) {
          const int64_t i = (bi * P + p) * C + c;
          ref[i] = (x.v[i] - mean) * rstd * w.v[c] + b.v[c];
        }
    }
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(dt, rank, dims);
    CHECK_OK(dit_cpu_groupnorm(&g_cpu[pi], &x.t, &w.t, &b.t, groups, eps, &y));
    char what[128];
    snprintf(what, sizeof what, "groupnorm B=%lld P=%lld C=%lld groups=%lld", (long long)B, (long long)P, (long long)C, (long long)groups);
    CHECK(compare(what, &y, ref, tol_for(dt)));
    if (pi == 0) check_groupnorm_sliced(&x, &w, &b, P, groups, eps, &y);
    free(y.data);
  }
  free(ref);
  tt_free(&x), tt_free(&w), tt_free(&b);
}

static void check_adaln(int64_t B, int64_t T, int64_t D, int64_t n, int shift, int scale,
                        dit_dtype_t dt, dit_dtype_t mt) {
  const int64_t xd[3] = {B, T, D}, md[3] = {B, n, D};
  tt_t x = tt_rand(dt, 3, xd, -3, 4), mod = tt_rand(mt, 3, md, -1, 1);
  double *ref = malloc(sizeof(double) * (size_t)(B * T * D));
  for (int64_t r = 0; r < B * T; r++) {
    const int64_t b = r / T;
    layernorm_row(x.v + r * D, D, 1e-6, ref + r * D);
    for (int64_t d = 0; d < D; d++)
      ref[r * D + d] = ref[r * D + d] * (1 + mod.v[(b * n + scale) * D + d]) + mod.v[(b * n + shift) * D + d];
  }
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(dt, 3, xd);
    CHECK_OK(dit_cpu_adaln(&g_cpu[pi], &x.t, &mod.t, DIT_TOKEN_GROUP_NONE, 1e-6, shift, scale, &y));
    char what[128];
    snprintf(what, sizeof what, "adaln B=%lld T=%lld D=%lld shift=%d scale=%d", (long long)B, (long long)T,
             (long long)D, shift, scale);
    CHECK(compare(what, &y, ref, tol_for(dt)));
    free(y.data);
  }
  free(ref);
  tt_free(&x), tt_free(&mod);
}

/* group 0: the whole row through dit_cpu_rmsnorm; else per group-wide chunk, weight [group]. */
static void check_rmsnorm(int rank, const int64_t *dims, int64_t group, double eps, double amp, dit_dtype_t dt) {
  const int64_t D = dims[rank - 1], rows = numel_of(rank, dims) / D, G = group ? group : D;
  const int64_t wd[1] = {G};
  tt_t x = tt_rand(dt, rank, dims, -amp, amp), w = tt_rand(dt, 1, wd, -2, 2);
  double *ref = malloc(sizeof(double) * (size_t)(rows * D));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t g0 = r * D; g0 < (r + 1) * D; g0 += G) {
      double ss = 0;
      for (int64_t d = 0; d < G; d++) ss += x.v[g0 + d] * x.v[g0 + d];
      const double inv = 1 / sqrt(ss / (double)G + eps);
      for (int64_t d = 0; d < G; d++) ref[g0 + d] = x.v[g0 + d] * inv * w.v[d];
    }
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(dt, rank, dims);
    if (group) CHECK_OK(dit_cpu_rmsnorm_group(&g_cpu[pi], &x.t, &w.t, group, eps, &y));
    else CHECK_OK(dit_cpu_rmsnorm(&g_cpu[pi], &x.t, &w.t, eps, &y));
    char what[128];
    snprintf(what, sizeof what, "rmsnorm rows=%lld D=%lld group=%lld", (long long)rows, (long long)D, (long long)G);
    CHECK(compare(what, &y, ref, tol_for(dt)));
    free(y.data);
  }
  free(ref);
  tt_free(&x), tt_free(&w);
}

static void test_norms(void) {
  static const dit_dtype_t dts[3] = {DIT_F32, DIT_BF16, DIT_F16};
  for (int i = 0; i < 3; i++) {
    const int64_t a[2] = {1, 1}, b3[3] = {3, 7, 33}, c2[2] = {5, 1027};
    /* An offset mean (variance must not cancel), and a spread so small that eps matters. */
    check_layernorm(2, a, 0, 1e-6, 2, 5, dts[i]);
    check_layernorm(3, b3, 1, 1e-5, 2, 5, dts[i]);
    check_layernorm(2, c2, 0, 1e-6, 2, 5, dts[i]);
    check_layernorm(2, c2, 1, 1e-6, -3, 3, dts[i]);
    check_layernorm(3, b3, 1, 1e-5, 3, 3.004, dts[i]);
    check_adaln(2, 9, 40, 6, 0, 1, dts[i], DIT_F32);
    check_adaln(1, 33, 130, 6, 3, 4, dts[i], dts[i]);
    const int64_t r1[3] = {2, 11, 96}, r2[2] = {1, 5}, r3[1] = {1500};
    check_rmsnorm(3, r1, 0, 1e-6, 3, dts[i]);
    check_rmsnorm(2, r2, 0, 1e-5, 3, dts[i]);
    check_rmsnorm(1, r3, 0, 1e-6, 3, dts[i]);
    check_rmsnorm(3, r1, 0, 1e-5, 4e-3, dts[i]);
    /* Per head: heads of 16 and 6 (odd widths), and one group of the whole row. */
    check_rmsnorm(3, r1, 16, 1e-6, 3, dts[i]);
    check_rmsnorm(3, r1, 6, 1e-5, 4e-3, dts[i]);
    check_rmsnorm(1, r3, 1500, 1e-6, 3, dts[i]);
  }
}

/* GroupNorm: video [B, F, H, W, C] and tokens [B, P, C], several channels a group, one group, a
 * channel a group; an offset mean, and a spread so small that eps matters. (Run after the tests
 * whose random draws were tuned, so their streams stay as they were.) */
static void test_groupnorm(void) {
  static const dit_dtype_t dts[3] = {DIT_F32, DIT_BF16, DIT_F16};
  const int64_t g1[5] = {2, 1, 5, 7, 12}, g2[3] = {3, 33, 8}, g3[4] = {1, 3, 4, 5};
  for (int i = 0; i < 3; i++) {
    check_groupnorm(5, g1, 4, 1e-6, 2, 5, dts[i]);
    check_groupnorm(5, g1, 1, 1e-6, -3, 3, dts[i]);
    check_groupnorm(3, g2, 8, 1e-6, -1, 2, dts[i]);
    check_groupnorm(4, g3, 5, 1e-2, 3, 3.004, dts[i]);
  }
}

/* ---- fp8 linear ------------------------------------------------------------------------- */

/* Worked by hand. Row 0 {1, -2, 0.5}: scale 2/448, codes 224, -448, 112 (exact). Row 1
 * {0.1, 0.2, 0.3}: scale 0.3/448; 149.3 -> 144 (step 16 in [128, 256)), 298.7 -> 288 (step 32),
 * 448. Weights (exact e4m3) {1, 0.5, -2}, {0.25, 3, 1.5}, scales {0.5, 2}, bias {1, -1}:
 * sums -224, -1120, -608, 1572; y = sum * x_scale * w_scale + bias. Unquantized, y[1][0] would
 * be 0.8, not 0.79643: the rounding of the activations is what is checked. */
static double gelu_d(double x);
static void test_linear_fp8(void) {
  const int64_t xd[3] = {1, 2, 3}, sd[3] = {1, 1, 2}, wd[2] = {2, 3}, nd[1] = {2}, yd[3] = {1, 2, 2};
  dit_tensor_t x = tensor_alloc(DIT_F32, 3, xd), xq = tensor_alloc(DIT_F8E4M3, 3, xd), xs = tensor_alloc(DIT_F32, 3, sd),
               w = tensor_alloc(DIT_F8E4M3, 2, wd), ws = tensor_alloc(DIT_F32, 1, nd), b = tensor_alloc(DIT_BF16, 1, nd),
               y = tensor_alloc(DIT_F32, 3, yd);
  static const double xv[6] = {1, -2, 0.5, 0.1, 0.2, 0.3}, wv[6] = {1, 0.5, -2, 0.25, 3, 1.5};
  for (int i = 0; i < 6; i++) set_elem(&x, i, xv[i]), set_elem(&w, i, wv[i]);
  set_elem(&ws, 0, 0.5), set_elem(&ws, 1, 2);
  set_elem(&b, 0, 1), set_elem(&b, 1, -1);
  /* The rows' quantizer: attn_quant with heads 1 and rows 1. */
  CHECK_OK(dit_cpu_attn_quant(&g_cpu[0], &x, 1, 1, &xq, &xs));
  CHECK_NEAR(get_elem(&xs, 0), 2.0 / 448, 1e-9);
  CHECK_NEAR(get_elem(&xs, 1), 0.3 / 448, 1e-9);
  static const double codes[6] = {224, -448, 112, 144, 288, 448};
  for (int i = 0; i < 6; i++) CHECK_NEAR(get_elem(&xq, i), codes[i], 0);
  const double want[4] = {-224 * (2.0 / 448) * 0.5 + 1, -1120 * (2.0 / 448) * 2 - 1, -608 * (0.3 / 448) * 0.5 + 1,
                          1572 * (0.3 / 448) * 2 - 1};
  for (int c = 0; c < 2; c++) {
    CHECK_OK(dit_cpu_linear_fp8(&g_cpu[c], &xq, &xs, &w, &ws, &b, 0, &y));
    for (int i = 0; i < 4; i++) CHECK_NEAR(get_elem(&y, i), want[i], 2e-6 * (1 + fabs(want[i])));
    CHECK_OK(dit_cpu_linear_fp8(&g_cpu[c], &xq, &xs, &w, &ws, &b, 1, &y)); /* gelu_tanh after the bias */
    for (int i = 0; i < 4; i++) CHECK_NEAR(get_elem(&y, i), gelu_d(want[i]), 2e-6 * (1 + fabs(want[i])));
  }
  CHECK_OK(dit_cpu_linear_fp8(&g_cpu[0], &xq, &xs, &w, &ws, NULL, 0, &y));
  CHECK_NEAR(get_elem(&y, 2), -608 * (0.3 / 448) * 0.5, 1e-6);
  CHECK_ERR(dit_cpu_linear_fp8(&g_cpu[0], &xq, &xs, &ws, &ws, NULL, 0, &y), INVALID_ARGUMENT,
            "linear_fp8: w is f32 [2], expected f8e4m3 [N, K]");
  CHECK_ERR(dit_cpu_linear_fp8(&g_cpu[0], &x, &xs, &w, &ws, NULL, 0, &y), INVALID_ARGUMENT,
            "linear_fp8: xq is f32 [1, 2, 3], expected f8e4m3 [B, T, K = 3]");
  CHECK_ERR(dit_cpu_linear_fp8(&g_cpu[0], &xq, &ws, &w, &ws, NULL, 0, &y), INVALID_ARGUMENT,
            "linear_fp8: xs is f32 [2], expected f32 [1, 1, 2]");
  ws.dims[0] = 3;
  CHECK_ERR(dit_cpu_linear_fp8(&g_cpu[0], &xq, &xs, &w, &ws, NULL, 0, &y), INVALID_ARGUMENT,
            "linear_fp8: w_scale is f32 [3], expected f32 [2]");
  ws.dims[0] = 2;
  CHECK_ERR(dit_cpu_linear_fp8(&g_cpu[0], &xq, &xs, &w, &ws, NULL, 2, &y), UNIMPLEMENTED, "activation 2");
  free(x.data), free(xq.data), free(xs.data), free(w.data), free(ws.data), free(b.data), free(y.data);
}

/* ---- elementwise ------------------------------------------------------------------------ */

static double silu_d(double x) { return x / (1 + exp(-x)); }
static double gelu_d(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void check_unary(int which, int rank, const int64_t *dims, dit_dtype_t xt, dit_dtype_t yt) {
  const int64_t n = numel_of(rank, dims);
  tt_t x = tt_rand(xt, rank, dims, -8, 8);
  double *ref = malloc(sizeof(double) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) ref[i] = which ? gelu_d(x.v[i]) : silu_d(x.v[i]);
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(yt, rank, dims);
    CHECK_OK(which ? dit_cpu_gelu_tanh(&g_cpu[pi], &x.t, &y) : dit_cpu_silu(&g_cpu[pi], &x.t, &y));
    char what[96];
    snprintf(what, sizeof what, "%s n=%lld", which ? "gelu_tanh" : "silu", (long long)n);
    CHECK(compare(what, &y, ref, tol_for(yt)));
    free(y.data);
  }
  free(ref);
  tt_free(&x);
}

static void check_add(int rank, const int64_t *dims, dit_dtype_t at, dit_dtype_t bt, dit_dtype_t yt) {
  const int64_t n = numel_of(rank, dims);
  tt_t a = tt_rand(at, rank, dims, -4, 4), b = tt_rand(bt, rank, dims, -4, 4);
  double *ref = malloc(sizeof(double) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) ref[i] = a.v[i] + b.v[i];
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(yt, rank, dims);
    CHECK_OK(dit_cpu_add(&g_cpu[pi], &a.t, &b.t, &y));
    char what[96];
    snprintf(what, sizeof what, "add n=%lld", (long long)n);
    CHECK(compare(what, &y, ref, tol_for(yt)));
    free(y.data);
  }
  free(ref);
  tt_free(&a), tt_free(&b);
}

static void check_gated_add(int64_t B, int64_t T, int64_t D, int64_t n, int gate, dit_dtype_t dt) {
  const int64_t xd[3] = {B, T, D}, md[3] = {B, n, D};
  tt_t x = tt_rand(dt, 3, xd, -4, 4), y = tt_rand(dt, 3, xd, -4, 4), mod = tt_rand(DIT_F32, 3, md, -1, 1);
  double *ref = malloc(sizeof(double) * (size_t)(B * T * D));
  for (int64_t r = 0; r < B * T; r++)
    for (int64_t d = 0; d < D; d++)
      ref[r * D + d] = x.v[r * D + d] + y.v[r * D + d] * mod.v[((r / T) * n + gate) * D + d];
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t o = out_poisoned(dt, 3, xd);
    CHECK_OK(dit_cpu_gated_add(&g_cpu[pi], &x.t, &y.t, &mod.t, DIT_TOKEN_GROUP_NONE, gate, &o));
    char what[96];
    snprintf(what, sizeof what, "gated_add B=%lld T=%lld D=%lld", (long long)B, (long long)T, (long long)D);
    CHECK(compare(what, &o, ref, tol_for(dt)));
    free(o.data);
  }
  free(ref);
  tt_free(&x), tt_free(&y), tt_free(&mod);
}

static void check_mod_table(int64_t B, int64_t n, int64_t D, int er, const int64_t *edims,
                            dit_dtype_t dt) {
  const int64_t td[3] = {1, n, D}, od[3] = {B, n, D};
  tt_t tab = tt_rand(dt, 3, td, -1, 1), e = tt_rand(dt, er, edims, -1, 1);
  const int64_t r = numel_of(er, edims) / (B * D);
  double *ref = malloc(sizeof(double) * (size_t)(B * n * D));
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < n; i++)
      for (int64_t d = 0; d < D; d++)
        ref[(b * n + i) * D + d] = tab.v[i * D + d] + e.v[(b * r + (r == 1 ? 0 : i)) * D + d];
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t o = out_poisoned(dt, 3, od);
    CHECK_OK(dit_cpu_mod_table(&g_cpu[pi], &tab.t, &e.t, &o));
    char what[96];
    snprintf(what, sizeof what, "mod_table B=%lld n=%lld D=%lld r=%lld", (long long)B, (long long)n,
             (long long)D, (long long)r);
    CHECK(compare(what, &o, ref, tol_for(dt)));
    free(o.data);
  }
  free(ref);
  tt_free(&tab), tt_free(&e);
}

static void test_elementwise(void) {
  const int64_t s1[1] = {1}, s2[2] = {3, 333}, s3[3] = {2, 7, 5001}, s4[4] = {1, 2, 3, 4};
  for (int which = 0; which < 2; which++) {
    check_unary(which, 1, s1, DIT_F32, DIT_F32);
    check_unary(which, 2, s2, DIT_F32, DIT_F32);
    check_unary(which, 3, s3, DIT_F32, DIT_F32);
    check_unary(which, 3, s3, DIT_BF16, DIT_BF16);
    check_unary(which, 4, s4, DIT_F16, DIT_F16);
    check_unary(which, 2, s2, DIT_BF16, DIT_F32);
  }
  check_add(1, s1, DIT_F32, DIT_F32, DIT_F32);
  check_add(3, s3, DIT_F32, DIT_F32, DIT_F32);
  check_add(3, s3, DIT_BF16, DIT_F32, DIT_BF16);
  check_add(4, s4, DIT_F16, DIT_F16, DIT_F16);
  check_gated_add(2, 9, 40, 6, 2, DIT_F32);
  check_gated_add(1, 3, 2500, 6, 5, DIT_BF16);
  check_gated_add(3, 1, 7, 1, 0, DIT_F16);
  const int64_t e1[2] = {2, 240}, e2[2] = {2, 40}, e3[3] = {2, 6, 40}, e4[3] = {3, 1, 9};
  check_mod_table(2, 6, 40, 2, e1, DIT_F32);
  check_mod_table(2, 6, 40, 2, e2, DIT_F32);
  check_mod_table(2, 6, 40, 3, e3, DIT_BF16);
  check_mod_table(3, 2, 9, 3, e4, DIT_F32);
  const int64_t e5[2] = {2, 11};
  check_mod_table(2, 1, 11, 2, e5, DIT_F16);
}

/* ---- patchify / unpatchify -------------------------------------------------------------- */

/* Patchify followed by linear with the flattened weight must equal a strided Conv3d
 * (kernel = stride = patch) computed directly. */
static void check_patchify(int64_t B, int64_t C, int64_t F, int64_t H, int64_t W, int pt, int ph,
                           int pw, int64_t D, dit_dtype_t dt) {
  const int64_t xd[5] = {B, C, F, H, W};
  const int64_t f = F / pt, h = H / ph, w = W / pw, K = C * pt * ph * pw;
  const int64_t wd[5] = {D, C, pt, ph, pw}, yd[3] = {B, f * h * w, K}, od[3] = {B, f * h * w, D};
  tt_t x = tt_rand(dt, 5, xd, -1, 1), wt = tt_rand(DIT_F32, 5, wd, -1, 1);
  double *conv = malloc(sizeof(double) * (size_t)(B * f * h * w * D));
  for (int64_t b = 0; b < B; b++)
    for (int64_t o = 0; o < D; o++)
      for (int64_t ft = 0; ft < f; ft++)
        for (int64_t hi = 0; hi < h; hi++)
          for (int64_t wi = 0; wi < w; wi++) {
            double s = 0;
            for (int64_t c = 0; c < C; c++)
              for (int it = 0; it < pt; it++)
                for (int ih = 0; ih < ph; ih++)
                  for (int iw = 0; iw < pw; iw++)
                    s += wt.v[(((o * C + c) * pt + it) * ph + ih) * pw + iw] *
                         x.v[(((b * C + c) * F + ft * pt + it) * H + hi * ph + ih) * W + wi * pw + iw];
            conv[((b * f * h * w) + (ft * h + hi) * w + wi) * D + o] = s;
          }
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(dt, 3, yd);
    CHECK_OK(dit_cpu_patchify(&g_cpu[pi], &x.t, pt, ph, pw, &y));
    /* Every element is a plain copy of an input element. */
    int64_t n = dit_tensor_numel(&y), copies_ok = 0;
    for (int64_t i = 0; i < n; i++) {
      const int64_t row = i / K, col = i % K, b = row / (f * h * w), tok = row % (f * h * w);
      const int64_t c = col / (pt * ph * pw), it = (col / (ph * pw)) % pt, ih = (col / pw) % ph, iw = col % pw;
      const int64_t ft = tok / (h * w), hi = (tok / w) % h, wi = tok % w;
      copies_ok += get_elem(&y, i) ==
                   x.v[(((b * C + c) * F + ft * pt + it) * H + hi * ph + ih) * W + wi * pw + iw];
    }
    CHECK_EQ_INT(copies_ok, n);
    dit_tensor_t out = out_poisoned(DIT_F32, 3, od);
    CHECK_OK(dit_cpu_linear(&g_cpu[pi], &y, &wt.t, NULL, &out));
    CHECK(compare("patchify + linear vs conv3d", &out, conv, TOL_F32));
    free(out.data);
    free(y.data);
  }
  free(conv);
  tt_free(&x), tt_free(&wt);
}

/* The reference applies the specification literally: view y as [B, f, h, w, pt, ph, pw, C],
 * permute to (0, 7, 1, 4, 2, 5, 3, 6), then read the result in row-major order. */
static void check_unpatchify(int64_t B, int64_t C, int f, int h, int w, int pt, int ph, int pw,
                             dit_dtype_t dt) {
  const int64_t yd[3] = {B, (int64_t)f * h * w, C * pt * ph * pw};
  const int64_t od[5] = {B, C, (int64_t)f * pt, (int64_t)h * ph, (int64_t)w * pw};
  tt_t y = tt_rand(dt, 3, yd, -1, 1);
  const int64_t v8[8] = {B, f, h, w, pt, ph, pw, C};
  static const int perm[8] = {0, 7, 1, 4, 2, 5, 3, 6};
  int64_t pd[8], vstride[8];
  vstride[7] = 1;
  for (int i = 6; i >= 0; i--) vstride[i] = vstride[i + 1] * v8[i + 1];
  for (int i = 0; i < 8; i++) pd[i] = v8[perm[i]];
  const int64_t n = numel_of(3, yd);
  double *ref = malloc(sizeof(double) * (size_t)(n + 1));
  for (int64_t o = 0; o < n; o++) {
    int64_t rem = o, src = 0;
    for (int i = 7; i >= 0; i--) {
      const int64_t idx = rem % pd[i];
      rem /= pd[i];
      src += idx * vstride[perm[i]];
    }
    ref[o] = y.v[src];
  }
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t out = out_poisoned(dt, 5, od);
    CHECK_OK(dit_cpu_unpatchify(&g_cpu[pi], &y.t, pt, ph, pw, f, h, w, &out));
    CHECK(compare("unpatchify", &out, ref, 0.0));
    free(out.data);
  }
  free(ref);
  tt_free(&y);
}

static void test_patch(void) {
  check_patchify(2, 3, 4, 6, 8, 1, 2, 2, 5, DIT_F32);
  check_patchify(1, 2, 4, 9, 4, 2, 3, 2, 7, DIT_F32);
  check_patchify(1, 16, 1, 4, 6, 1, 2, 2, 12, DIT_BF16);
  check_unpatchify(2, 3, 2, 3, 4, 1, 2, 2, DIT_F32);
  check_unpatchify(1, 5, 3, 2, 2, 2, 3, 2, DIT_F32);
  check_unpatchify(1, 16, 1, 1, 1, 1, 2, 2, DIT_BF16);
}

/* ---- timestep embedding ----------------------------------------------------------------- */

/* ideal: frequencies in double. fp32: the exponent rounded step by step in fp32 as the
 * specification does, so the kernel must agree closely with this one. */
static void timestep_ref(const tt_t *t, int64_t dim, int flip, double shift, double maxp,
                         double scale, int fp32_exponent, double *out) {
  const int64_t B = t->t.dims[0], half = dim / 2;
  for (int64_t b = 0; b < B; b++) {
    const double tv = (double)(float)t->v[b];
    for (int64_t i = 0; i < half; i++) {
      double fr;
      if (fp32_exponent) {
        const float e = ((float)-log(maxp) * (float)i) / (float)((double)half - shift);
        fr = (double)(float)exp((double)e);
      } else {
        fr = exp(-log(maxp) * (double)i / ((double)half - shift));
      }
      const double arg = fp32_exponent ? (double)((float)scale * ((float)tv * (float)fr)) : scale * tv * fr;
      out[b * dim + (flip ? half + i : i)] = sin(arg);
      out[b * dim + (flip ? i : half + i)] = cos(arg);
    }
    if (dim % 2) out[b * dim + dim - 1] = 0;
  }
}

static void check_timestep(dit_dtype_t tt, const double *tv, int64_t B, int64_t dim, int flip,
                           double shift, double maxp, double scale, dit_dtype_t ot) {
  const int64_t td[1] = {B}, od[2] = {B, dim};
  tt_t t = {.t = tensor_alloc(tt, 1, td), .v = malloc(sizeof(double) * (size_t)B)};
  for (int64_t b = 0; b < B; b++) {
    set_elem(&t.t, b, tv[b]);
    t.v[b] = get_elem(&t.t, b);
  }
  double *ideal = malloc(sizeof(double) * (size_t)(B * dim)), *spec = malloc(sizeof(double) * (size_t)(B * dim));
  timestep_ref(&t, dim, flip, shift, maxp, scale, 0, ideal);
  timestep_ref(&t, dim, flip, shift, maxp, scale, 1, spec);
  dit_tensor_t out = out_poisoned(ot, 2, od);
  CHECK_OK(dit_cpu_timestep_embed(&g_cpu[1], &t.t, flip, shift, maxp, scale, &out));
  char what[128];
  snprintf(what, sizeof what, "timestep_embed t %s dim %lld flip %d shift %g (fp32 exponent)",
           dit_dtype_name(tt), (long long)dim, flip, shift);
  CHECK(compare(what, &out, spec, ot == DIT_F32 ? 1e-6 : tol_for(ot)));
  /* Against double frequencies the fp32 exponent costs up to ~t * 2^-24 * a few in the angle. */
  snprintf(what, sizeof what, "timestep_embed t %s dim %lld (double exponent)", dit_dtype_name(tt), (long long)dim);
  CHECK(compare(what, &out, ideal, ot == DIT_F32 ? 3e-4 : tol_for(ot) + 3e-4));
  free(out.data);
  free(ideal);
  free(spec);
  tt_free(&t);
}

static void test_timestep(void) {
  const double ti[5] = {0, 1, 500, 999, 17};
  const double tf[3] = {999.5, 0.25, 321.125};
  check_timestep(DIT_I64, ti, 5, 256, 1, 0, 10000, 1, DIT_F32);
  check_timestep(DIT_I32, ti, 4, 256, 0, 1, 10000, 1, DIT_F32);
  check_timestep(DIT_F32, tf, 3, 7, 0, 1, 10000, 2, DIT_F32);
  check_timestep(DIT_F32, tf, 3, 64, 1, 0, 100, 1, DIT_BF16);
  check_timestep(DIT_I64, ti, 2, 1, 1, 0, 10000, 1, DIT_F32);
}

/* ---- rope ------------------------------------------------------------------------------- */

static void check_rope(int64_t B, int heads, int f, int h, int w, int td, int hd, int wd,
                       double theta, dit_dtype_t dt) {
  const int64_t Dh = td + hd + wd, T = (int64_t)f * h * w;
  const int64_t xd[3] = {B, T, heads * Dh};
  tt_t x = tt_rand(dt, 3, xd, -2, 2);
  const int64_t n = numel_of(3, xd);
  double *ref = malloc(sizeof(double) * (size_t)(n + 1));
  const int part_dim[3] = {td, hd, wd};
  for (int64_t r = 0; r < B * T; r++) {
    const int64_t tok = r % T;
    const int64_t pos[3] = {tok / (h * w), (tok / w) % h, tok % w};
    for (int hh = 0; hh < heads; hh++) {
      int64_t c0 = (r * heads + hh) * Dh;
      for (int part = 0; part < 3; part++) {
        for (int q = 0; q < part_dim[part] / 2; q++, c0 += 2) {
          const double freq = 1.0 / pow(theta, (double)(2 * q) / part_dim[part]);
          const double cs = (float)cos(pos[part] * freq), sn = (float)sin(pos[part] * freq);
          ref[c0] = x.v[c0] * cs - x.v[c0 + 1] * sn;
          ref[c0 + 1] = x.v[c0] * sn + x.v[c0 + 1] * cs;
        }
      }
    }
  }
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(dt, 3, xd);
    CHECK_OK(dit_cpu_rope(&g_cpu[pi], &x.t, heads, f, h, w, td, hd, wd, theta, 0, &y));
    char what[128];
    snprintf(what, sizeof what, "rope grid %dx%dx%d heads %d dims %d/%d/%d", f, h, w, heads, td, hd, wd);
    CHECK(compare(what, &y, ref, tol_for(dt)));
    free(y.data);
  }
  free(ref);
  tt_free(&x);
}

static void test_rope(void) {
  check_rope(2, 2, 2, 3, 4, 8, 4, 4, 10000, DIT_F32);
  check_rope(1, 3, 5, 4, 6, 8, 8, 8, 10000, DIT_F32); /* Wan's split for Dh = 24 */
  check_rope(1, 1, 1, 7, 9, 0, 6, 4, 500, DIT_F32);   /* an empty t part */
  check_rope(2, 2, 3, 2, 2, 8, 8, 8, 10000, DIT_BF16);
  check_rope(1, 2, 2, 2, 3, 4, 2, 2, 10000, DIT_F16);
}

/* rope_table against the double reference: B > 1 shares the [T, Dh] table, odd T and heads. */
static void check_rope_table(int64_t B, int64_t T, int64_t heads, int64_t Dh, dit_dtype_t dt) {
  const int64_t xd[3] = {B, T, heads * Dh}, cd[2] = {T, Dh};
  tt_t x = tt_rand(dt, 3, xd, -2, 2), cs = tt_rand(DIT_F32, 2, cd, -1, 1);
  const int64_t n = numel_of(3, xd);
  double *ref = malloc(sizeof(double) * (size_t)(n + 1));
  for (int64_t r = 0; r < B * T; r++)
    for (int64_t c = 0; c < heads * Dh; c += 2) {
      const double *t = cs.v + (r % T) * Dh + c % Dh, *xv = x.v + r * heads * Dh + c;
      ref[r * heads * Dh + c] = xv[0] * t[0] - xv[1] * t[1];
      ref[r * heads * Dh + c + 1] = xv[1] * t[0] + xv[0] * t[1];
    }
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(dt, 3, xd);
    CHECK_OK(dit_cpu_rope_table(&g_cpu[pi], &x.t, &cs.t, heads, &y));
    char what[128];
    snprintf(what, sizeof what, "rope_table B %lld T %lld heads %lld Dh %lld", (long long)B, (long long)T, (long long)heads, (long long)Dh);
    CHECK(compare(what, &y, ref, tol_for(dt)));
    free(y.data);
  }
  free(ref);
  tt_free(&x), tt_free(&cs);
}

/* The ropes with the Q/K rmsnorm folded in (table 0: Wan's rope, 1: rope_table) against the two
 * ops they replace, the norm's output stored in dt: equal bits, on both pools. group 0: the whole
 * row (Wan), 16: a head (the MMDiTs), 8: half a head. */
static void check_rope_normed(int table, int64_t group, dit_dtype_t dt) {
  const int heads = 3, f = 2, h = 3, w = 2, td = 8, hd = 4, wd = 4;
  const int64_t Dh = td + hd + wd, T = (int64_t)f * h * w, D = heads * Dh, G = group ? group : D;
  const int64_t xd[3] = {2, T, D}, cd[2] = {T, Dh}, wdims[1] = {G};
  tt_t x = tt_rand(dt, 3, xd, -3, 3), nw = tt_rand(dt, 1, wdims, 0.5, 1.5), cs = tt_rand(DIT_F32, 2, cd, -1, 1);
  const dit_cpu_rope_norm_t norm = {&nw.t, G, 1e-6};
  char what[96];
  snprintf(what, sizeof what, "%s with its norm, group %lld, %s", table ? "rope_table" : "rope", (long long)G, dit_dtype_name(dt));
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t mid = out_poisoned(dt, 3, xd), apart = out_poisoned(dt, 3, xd), fused = out_poisoned(dt, 3, xd);
    dit_tensor_t plain = out_poisoned(dt, 3, xd);
    CHECK_OK(dit_cpu_rmsnorm_group(&g_cpu[pi], &x.t, &nw.t, G, 1e-6, &mid));
    if (table) {
      CHECK_OK(dit_cpu_rope_table(&g_cpu[pi], &mid, &cs.t, heads, &apart));
      CHECK_OK(dit_cpu_rope_table_normed(&g_cpu[pi], &x.t, &cs.t, &norm, heads, &fused));
      CHECK_OK(dit_cpu_rope_table_normed(&g_cpu[pi], &x.t, &cs.t, NULL, heads, &plain));
    } else {
      CHECK_OK(dit_cpu_rope(&g_cpu[pi], &mid, heads, f, h, w, td, hd, wd, 10000, 0, &apart));
      CHECK_OK(dit_cpu_rope_normed(&g_cpu[pi], &x.t, &norm, heads, f, h, w, td, hd, wd, 10000, 0, &fused));
      CHECK_OK(dit_cpu_rope_normed(&g_cpu[pi], &x.t, NULL, heads, f, h, w, td, hd, wd, 10000, 0, &plain));
    }
    const size_t bytes = dit_tensor_nbytes(&fused);
    if (memcmp(apart.data, fused.data, bytes)) {
      fprintf(stderr, "%s: differs from rmsnorm then the rope\n", what);
      CHECK(0);
    }
    CHECK(memcmp(plain.data, fused.data, bytes)); /* the norm did something */
    free(mid.data), free(apart.data), free(fused.data), free(plain.data);
  }
  /* A weight of the wrong length is refused by rmsnorm's rule, naming the op. */
  dit_tensor_t y = out_poisoned(dt, 3, xd), bad = nw.t;
  bad.dims[0] = G + 1;
  const dit_cpu_rope_norm_t wrong = {&bad, G, 1e-6};
  char want[96];
  snprintf(want, sizeof want, "%s: w has dims [%lld], expected [%lld]", table ? "rope_table" : "rope", (long long)(G + 1), (long long)G);
  if (table) CHECK_ERR(dit_cpu_rope_table_normed(&g_cpu[0], &x.t, &cs.t, &wrong, heads, &y), INVALID_ARGUMENT, want);
  else CHECK_ERR(dit_cpu_rope_normed(&g_cpu[0], &x.t, &wrong, heads, f, h, w, td, hd, wd, 10000, 0, &y), INVALID_ARGUMENT, want);
  free(y.data);
  tt_free(&x), tt_free(&nw), tt_free(&cs);
}

static void test_rope_normed(void) {
  static const dit_dtype_t dts[3] = {DIT_F32, DIT_BF16, DIT_F16};
  static const int64_t groups[3] = {0, 16, 8};
  for (int table = 0; table < 2; table++)
    for (int d = 0; d < 3; d++)
      for (int gi = 0; gi < 3; gi++) check_rope_normed(table, groups[gi], dts[d]);
}

/* The MMDiT ops on values worked out by hand, then rope_table at random shapes. */
static void test_mmdit_ops(void) {
  dit_cpu_t *c = &g_cpu[1];
  /* rmsnorm per head of 2: [1, 7] has RMS 5, [2, 2] 2, [3, -3] 3, [0.5, 0.5] 0.5; w = [1, 2]. */
  static const float xv[8] = {1, 7, 2, 2, 3, -3, 0.5f, 0.5f}, wv[2] = {1, 2}, want_rms[8] = {0.2f, 2.8f, 1, 2, 1, -2, 1, 2};
  float yv[8];
  dit_tensor_t x = {(void *)xv, DIT_F32, 2, {2, 4}}, w = {(void *)wv, DIT_F32, 1, {2}}, y = {yv, DIT_F32, 2, {2, 4}};
  CHECK_OK(dit_cpu_rmsnorm_group(c, &x, &w, 2, 0.0, &y));
  for (int i = 0; i < 8; i++) CHECK_NEAR(yv[i], want_rms[i], 1e-6);

  /* rope_table, heads 2 of Dh 4, two tokens: token 0's row (1, 0, 1, 0) leaves it unchanged; token 1
   * turns pair 0 by 90 degrees (cos 0, sin 1) and pair 1 by (cos 0.6, sin 0.8). */
  static const float rx[16] = {1, 2, 3, 4, 5, -1, 10, 5, 1, 2, 3, 4, 5, -1, 10, 5};
  static const float rcs[8] = {1, 0, 1, 0, 0, 1, 0.6f, 0.8f};
  static const float want_rope[16] = {1, 2, 3, 4, 5, -1, 10, 5, -2, 1, -1.4f, 4.8f, 1, 5, 2, 11};
  float ry[16];
  dit_tensor_t rxt = {(void *)rx, DIT_F32, 3, {1, 2, 8}}, rct = {(void *)rcs, DIT_F32, 2, {2, 4}}, ryt = {ry, DIT_F32, 3, {1, 2, 8}};
  CHECK_OK(dit_cpu_rope_table(c, &rxt, &rct, 2, &ryt));
  for (int i = 0; i < 16; i++) CHECK_NEAR(ry[i], want_rope[i], 1e-6);
  /* bf16 x: the fp32 result rounded once (-1.4 and 4.8 are not bf16 values; their neighbours are) */
  uint16_t bx[16], by[16];
  for (int i = 0; i < 16; i++) bx[i] = dit_f32_to_bf16(rx[i]);
  dit_tensor_t bxt = {bx, DIT_BF16, 3, {1, 2, 8}}, byt = {by, DIT_BF16, 3, {1, 2, 8}};
  CHECK_OK(dit_cpu_rope_table(c, &bxt, &rct, 2, &byt));
  for (int i = 0; i < 16; i++) CHECK_EQ_INT(by[i], dit_f32_to_bf16(want_rope[i]));

  /* concat of bf16 bits (copied as they are): a [2, 1, 2] ++ b [2, 2, 2] along dim 1, then along 0 */
  uint16_t av[4] = {1, 2, 3, 4}, bv[8] = {5, 6, 7, 8, 9, 10, 11, 12}, cv[12];
  static const uint16_t want_d1[12] = {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12};
  dit_tensor_t at = {av, DIT_BF16, 3, {2, 1, 2}}, bt = {bv, DIT_BF16, 3, {2, 2, 2}}, ct = {cv, DIT_BF16, 3, {2, 3, 2}};
  CHECK_OK(dit_cpu_concat(c, &at, &bt, 1, &ct));
  for (int i = 0; i < 12; i++) CHECK_EQ_INT(cv[i], want_d1[i]);
  dit_tensor_t a0 = {av, DIT_BF16, 2, {1, 4}}, b0 = {bv, DIT_BF16, 2, {2, 4}}, c0 = {cv, DIT_BF16, 2, {3, 4}};
  CHECK_OK(dit_cpu_concat(c, &a0, &b0, 0, &c0));
  for (int i = 0; i < 12; i++) CHECK_EQ_INT(cv[i], i + 1);
  /* along the last dim: [attn | mlp] features of each token */
  dit_tensor_t a2 = {av, DIT_BF16, 2, {2, 2}}, b2 = {bv, DIT_BF16, 2, {2, 4}}, c2 = {cv, DIT_BF16, 2, {2, 6}};
  static const uint16_t want_d2[12] = {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12};
  CHECK_OK(dit_cpu_concat(c, &a2, &b2, 1, &c2));
  for (int i = 0; i < 12; i++) CHECK_EQ_INT(cv[i], want_d2[i]);

  /* reshape: the same bytes in new dims */
  uint16_t rv[12];
  dit_tensor_t rs = {rv, DIT_BF16, 3, {3, 2, 2}};
  CHECK_OK(dit_cpu_reshape(c, &c2, &rs));
  for (int i = 0; i < 12; i++) CHECK_EQ_INT(rv[i], want_d2[i]);

  check_rope_table(3, 5, 3, 8, DIT_F32);
  check_rope_table(2, 7, 2, 6, DIT_BF16);
  check_rope_table(1, 4, 1, 2, DIT_F16);
}

/* ---- video ops: conv3d, upsample, clamp ------------------------------------------------- */

/* conv3d against the definition in double, over zero-padded input (channel-last x and weights
 * [Cout, kt, kh, kw, Cin]; wr 4: [Cout, kh, kw, Cin], kt = 1), with paddings before and after and
 * strides a. */
static void check_conv3d_ex(int64_t B, int64_t F, int64_t H, int64_t W, int64_t Cin, int64_t Cout, int wr, int64_t kt, int64_t kh,
                            int64_t kw, const dit_conv3d_attrs_t *a, int with_bias, dit_dtype_t dt) {
  const int64_t xd[5] = {B, F, H, W, Cin}, wd5[5] = {Cout, kt, kh, kw, Cin}, wd4[4] = {Cout, kh, kw, Cin}, bd[1] = {Cout};
  tt_t x = tt_rand(dt, 5, xd, -1, 1), w = tt_rand(dt, wr, wr == 5 ? wd5 : wd4, -1, 1), b = tt_rand(dt, 1, bd, -1, 1);
  const int64_t pt = a->pad_t, ph = a->pad_h, pw = a->pad_w;
  const int64_t Fo = (F + pt - kt) / a->stride_t + 1, Ho = (H + ph + a->pad_h_after - kh) / a->stride_h + 1,
                Wo = (W + pw + a->pad_w_after - kw) / a->stride_w + 1, yd[5] = {B, Fo, Ho, Wo, Cout};
  const int plain = a->pad_h_after == ph && a->pad_w_after == pw && a->stride_t == 1 && a->stride_h == 1 && a->stride_w == 1;
  double *ref = malloc(sizeof(double) * (size_t)numel_of(5, yd));
  for (int64_t bb = 0; bb < B; bb++)
    for (int64_t fo = 0; fo < Fo; fo++)
      for (int64_t ho = 0; ho < Ho; ho++)
        for (int64_t wo = 0; wo < Wo; wo++)
          for (int64_t co = 0; co < Cout; co++) {
            double s = with_bias ? b.v[co] : 0;
            for (int64_t ci = 0; ci < Cin; ci++)
              for (int64_t it = 0; it < kt; it++)
                for (int64_t ih = 0; ih < kh; ih++)
                  for (int64_t iw = 0; iw < kw; iw++) {
                    const int64_t fi = fo * a->stride_t + it - pt, hi = ho * a->stride_h + ih - ph, wi = wo * a->stride_w + iw - pw;
                    if (fi < 0 || fi >= F || hi < 0 || hi >= H || wi < 0 || wi >= W) continue;
                    s += x.v[(((bb * F + fi) * H + hi) * W + wi) * Cin + ci] * w.v[(((co * kt + it) * kh + ih) * kw + iw) * Cin + ci];
                  }
            ref[(((bb * Fo + fo) * Ho + ho) * Wo + wo) * Cout + co] = s;
          }
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(dt, 5, yd);
    /* Symmetric padding and unit strides through the short form too. */
    if (plain && pi == 0) CHECK_OK(dit_cpu_conv3d(&g_cpu[pi], &x.t, &w.t, with_bias ? &b.t : NULL, pt, ph, pw, &y));
    else CHECK_OK(dit_cpu_conv3d_ex(&g_cpu[pi], &x.t, &w.t, with_bias ? &b.t : NULL, a, &y));
    char what[256];
    snprintf(what, sizeof what, "conv3d x [%lld,%lld,%lld,%lld,%lld] k %lldx%lldx%lld pad (%lld,%lld+%lld,%lld+%lld) stride (%lld,%lld,%lld) "
             "Cout %lld pool %d", (long long)B, (long long)F, (long long)H, (long long)W, (long long)Cin, (long long)kt, (long long)kh,
             (long long)kw, (long long)pt, (long long)ph, (long long)a->pad_h_after, (long long)pw, (long long)a->pad_w_after,
             (long long)a->stride_t, (long long)a->stride_h, (long long)a->stride_w, (long long)Cout, pi);
    CHECK(compare(what, &y, ref, tol_for(dt)));
    free(y.data);
  }
  free(ref);
  tt_free(&x), tt_free(&w), tt_free(&b);
}

static void check_conv3d(int64_t B, int64_t F, int64_t H, int64_t W, int64_t Cin, int64_t Cout, int wr, int64_t kt, int64_t kh, int64_t kw,
                         int64_t pt, int64_t ph, int64_t pw, int with_bias, dit_dtype_t dt) {
  const dit_conv3d_attrs_t a = {.pad_t = pt, .pad_h = ph, .pad_w = pw, .pad_h_after = ph, .pad_w_after = pw, .stride_t = 1, .stride_h = 1,
                                .stride_w = 1};
  check_conv3d_ex(B, F, H, W, Cin, Cout, wr, kt, kh, kw, &a, with_bias, dt);
}

static void test_video_ops(void) {
  /* Causal 3x3x3 with two zero frames in front (more frames of padding than input), odd sizes. */
  check_conv3d(2, 3, 5, 7, 3, 5, 5, 3, 3, 3, 2, 1, 1, 1, DIT_F32);
  check_conv3d(1, 1, 4, 3, 4, 2, 5, 3, 3, 3, 2, 1, 1, 1, DIT_BF16);
  /* The temporal (3, 1, 1) kernel, no bias; a Conv2d per frame; a 1x1x1 without padding. */
  check_conv3d(1, 4, 2, 3, 6, 4, 5, 3, 1, 1, 2, 0, 0, 0, DIT_F32);
  /* Downsampling: ZeroPad2d((0, 1, 0, 1)) then a stride-2 3x3 Conv2d per frame (even and odd sizes);
   * the stride-2 temporal (3, 1, 1) kernel without padding; a strided (2, 2, 2) kernel with a causal
   * frame in front (an average-pooling shortcut's shape), in bf16. */
  const dit_conv3d_attrs_t down = {.pad_h_after = 1, .pad_w_after = 1, .stride_t = 1, .stride_h = 2, .stride_w = 2};
  check_conv3d_ex(2, 2, 6, 8, 3, 5, 4, 1, 3, 3, &down, 1, DIT_F32);
  check_conv3d_ex(1, 1, 5, 7, 4, 3, 4, 1, 3, 3, &down, 0, DIT_F32);
  const dit_conv3d_attrs_t time_down = {.stride_t = 2, .stride_h = 1, .stride_w = 1};
  check_conv3d_ex(1, 9, 2, 3, 4, 4, 5, 3, 1, 1, &time_down, 1, DIT_F32);
  const dit_conv3d_attrs_t pool = {.pad_t = 1, .stride_t = 2, .stride_h = 2, .stride_w = 2};
  check_conv3d_ex(2, 5, 4, 6, 8, 4, 5, 2, 2, 2, &pool, 0, DIT_BF16);
  check_conv3d(2, 2, 6, 5, 5, 3, 4, 1, 3, 3, 0, 1, 1, 1, DIT_F16);
  check_conv3d(1, 2, 3, 3, 7, 9, 5, 1, 1, 1, 0, 0, 0, 1, DIT_F32);
  /* Valid (unpadded) and a kernel wider than tall. */
  check_conv3d(1, 5, 6, 7, 2, 3, 5, 2, 3, 5, 0, 0, 2, 1, DIT_F32);

  /* upsample: each pixel of x [1, 2, 2, 3, 2] (bf16 bits copied as they are) repeated 2x2. */
  uint16_t xv[24], yv[216];
  for (int i = 0; i < 24; i++) xv[i] = (uint16_t)(100 + i);
  dit_tensor_t xt = {xv, DIT_BF16, 5, {1, 2, 2, 3, 2}}, yt = {yv, DIT_BF16, 5, {1, 2, 4, 6, 2}};
  for (int pi = 0; pi < 2; pi++) {
    memset(yv, 0, sizeof yv);
    CHECK_OK(dit_cpu_upsample(&g_cpu[pi], &xt, 2, &yt));
    for (int f = 0; f < 2; f++)
      for (int h = 0; h < 4; h++)
        for (int w = 0; w < 6; w++)
          for (int ch = 0; ch < 2; ch++) CHECK_EQ_INT(yv[((f * 4 + h) * 6 + w) * 2 + ch], xv[((f * 2 + h / 2) * 3 + w / 2) * 2 + ch]);
  }
  dit_tensor_t y3 = {yv, DIT_BF16, 5, {1, 2, 6, 9, 2}};
  CHECK_OK(dit_cpu_upsample(&g_cpu[1], &xt, 3, &y3));
  CHECK_EQ_INT(yv[((1 * 6 + 5) * 9 + 8) * 2 + 1], xv[((1 * 2 + 1) * 3 + 2) * 2 + 1]);

  /* clamp: bounds kept, inside values exact, NaN kept, in every storage type. */
  static const float cin[6] = {-3.5f, -1.0f, -0.25f, 0.75f, 1.5f, NAN};
  static const float cwant[6] = {-1.0f, -1.0f, -0.25f, 0.75f, 1.0f, NAN};
  const dit_dtype_t types[3] = {DIT_F32, DIT_BF16, DIT_F16};
  for (int k = 0; k < 3; k++) {
    const int64_t d[1] = {6};
    dit_tensor_t a = tensor_alloc(types[k], 1, d), o = out_poisoned(types[k], 1, d);
    for (int i = 0; i < 6; i++) set_elem(&a, i, cin[i]);
    CHECK_OK(dit_cpu_clamp(&g_cpu[k % 2], &a, -1.0, 1.0, &o));
    for (int i = 0; i < 5; i++) CHECK(get_elem(&o, i) == cwant[i]);
    CHECK(isnan(get_elem(&o, 5)));
    free(a.data), free(o.data);
  }
}

/* ---- CLIP's ops: quick_gelu, token_select -------------------------------------------------- */

static void test_clip_ops(void) {
  /* quick_gelu against x * sigmoid(1.702 x) in double, both tails included, f32 and bf16 out. */
  const int64_t qd[2] = {3, 41};
  tt_t x = tt_rand(DIT_F32, 2, qd, -12, 12);
  double ref[3 * 41];
  for (int i = 0; i < 3 * 41; i++) ref[i] = x.v[i] / (1.0 + exp(-1.702 * x.v[i]));
  for (int pi = 0; pi < 2; pi++) {
    dit_tensor_t y = out_poisoned(pi ? DIT_BF16 : DIT_F32, 2, qd);
    CHECK_OK(dit_cpu_quick_gelu(&g_cpu[pi], &x.t, &y));
    CHECK(compare(pi ? "quick_gelu bf16" : "quick_gelu f32", &y, ref, pi ? TOL_BF16 : TOL_F32));
    free(y.data);
  }
  tt_free(&x);
  /* token_select: x [3, 5, 4]; the first of tied largest ids (item 0: 9 at 1 and 3), the last
   * position (item 1), position 0 (item 2); with eos = 7 its first position, 0 when absent. */
  const int64_t xd[3] = {3, 5, 4}, yd[2] = {3, 4};
  tt_t xs = tt_rand(DIT_BF16, 3, xd, -3, 3);
  static const int64_t ids64[15] = {0, 9, 7, 9, 7, /**/ 1, 2, 3, 4, 5, /**/ 8, 7, 7, 1, 0};
  int32_t ids32[15];
  for (int i = 0; i < 15; i++) ids32[i] = (int32_t)ids64[i];
  static const int64_t want_max[3] = {1, 4, 0}, want_eos[3] = {2, 0, 1};
  for (int w = 0; w < 4; w++) {
    dit_tensor_t ids = {w & 1 ? (void *)ids32 : (void *)ids64, w & 1 ? DIT_I32 : DIT_I64, 2, {3, 5}};
    dit_tensor_t y = out_poisoned(DIT_BF16, 2, yd);
    CHECK_OK(dit_cpu_token_select(&g_cpu[w & 1], &xs.t, &ids, w < 2 ? -1 : 7, &y));
    const int64_t *want = w < 2 ? want_max : want_eos;
    for (int b = 0; b < 3; b++)
      CHECK(!memcmp((const uint16_t *)y.data + b * 4, (const uint16_t *)xs.t.data + (b * 5 + want[b]) * 4, 4 * sizeof(uint16_t)));
    free(y.data);
  }
  dit_tensor_t ids = {ids32, DIT_I32, 2, {3, 5}}, short_ids = {ids32, DIT_I32, 2, {3, 4}};
  dit_tensor_t yf = out_poisoned(DIT_F32, 2, yd);
  CHECK_ERR(dit_cpu_token_select(&g_cpu[0], &xs.t, &ids, -1, &yf), INVALID_ARGUMENT, "token_select: y has dtype f32, expected x's bf16");
  free(yf.data);
  dit_tensor_t y = out_poisoned(DIT_BF16, 2, yd);
  CHECK_ERR(dit_cpu_token_select(&g_cpu[0], &xs.t, &short_ids, -1, &y), INVALID_ARGUMENT, "token_select: ids has dims [3, 4]");
  CHECK_ERR(dit_cpu_token_select(&g_cpu[0], &xs.t, &ids, -2, &y), INVALID_ARGUMENT, "token_select: eos = -2, expected >= -1");
  free(y.data);
  tt_free(&xs);
}

/* ---- argument errors --------------------------------------------------------------------- */

static void test_errors(void) {
  dit_cpu_t *c = &g_cpu[0];
  float buf[4096];
  for (int i = 0; i < 4096; i++) buf[i] = 1.0f;
  float obuf[4096];
#define T(name, dt, r, ...) dit_tensor_t name = {buf, dt, r, {__VA_ARGS__}}
#define O(name, dt, r, ...) dit_tensor_t name = {obuf, dt, r, {__VA_ARGS__}}
  {
    T(x, DIT_F32, 2, 4, 64);
    T(w, DIT_F32, 3, 8, 4, 12);
    O(y, DIT_F32, 2, 4, 8);
    CHECK_ERR(dit_cpu_linear(c, &x, &w, NULL, &y), INVALID_ARGUMENT,
              "linear: w dims[1..] multiply to 48, expected K = 64 from x");
    T(w2, DIT_F32, 2, 8, 64);
    T(bias, DIT_F32, 1, 9);
    CHECK_ERR(dit_cpu_linear(c, &x, &w2, &bias, &y), INVALID_ARGUMENT, "linear: bias has dims [9], expected [8]");
    O(y2, DIT_F32, 2, 4, 9);
    CHECK_ERR(dit_cpu_linear(c, &x, &w2, NULL, &y2), INVALID_ARGUMENT, "linear: y has dims [4, 9]");
    T(xi, DIT_I32, 2, 4, 64);
    CHECK_ERR(dit_cpu_linear(c, &xi, &w2, NULL, &y), INVALID_ARGUMENT, "linear: x has dtype i32");
    dit_tensor_t ya = {buf, DIT_F32, 2, {4, 8}};
    CHECK_ERR(dit_cpu_linear(c, &x, &w2, NULL, &ya), INVALID_ARGUMENT, "linear: output y overlaps input x");
    CHECK_ERR(dit_cpu_linear(c, NULL, &w2, NULL, &y), INVALID_ARGUMENT, "linear: x is missing");
  }
  {
    T(q, DIT_F32, 3, 1, 4, 32);
    T(k, DIT_F32, 3, 1, 5, 16);
    O(o, DIT_F32, 3, 1, 4, 32);
    CHECK_ERR(dit_cpu_attention(c, &q, &k, &k, 2, 0.25, &o, NULL), INVALID_ARGUMENT,
              "attention: k has dims [1, 5, 16], expected [1, *, 32]");
    T(k2, DIT_F32, 3, 1, 5, 32);
    T(v2, DIT_F32, 3, 1, 6, 32);
    CHECK_ERR(dit_cpu_attention(c, &q, &k2, &v2, 2, 0.25, &o, NULL), INVALID_ARGUMENT,
              "attention: v has dims [1, 6, 32], expected [1, 5, 32] as k");
    CHECK_ERR(dit_cpu_attention(c, &q, &k2, &k2, 3, 0.25, &o, NULL), INVALID_ARGUMENT,
              "not a positive multiple of heads = 3");
    dit_tensor_t lse = {obuf + 1024, DIT_F32, 3, {1, 4, 2}};
    CHECK_ERR(dit_cpu_attention(c, &q, &k2, &k2, 2, 0.25, &o, &lse), INVALID_ARGUMENT,
              "attention: lse has dims [1, 4, 2], expected [1, 2, 4]");
    T(k0, DIT_F32, 3, 1, 0, 32);
    CHECK_ERR(dit_cpu_attention(c, &q, &k0, &k0, 2, 0.25, &o, NULL), INVALID_ARGUMENT, "no keys");
  }
  {
    T(x, DIT_F32, 2, 3, 10);
    T(w, DIT_F32, 1, 10);
    T(w9, DIT_F32, 1, 9);
    O(y, DIT_F32, 2, 3, 10);
    CHECK_ERR(dit_cpu_layernorm(c, &x, &w, NULL, 1e-6, &y), INVALID_ARGUMENT,
              "layernorm: w and b must be given together");
    CHECK_ERR(dit_cpu_layernorm(c, &x, &w9, &w9, 1e-6, &y), INVALID_ARGUMENT,
              "layernorm: w has dims [9], expected [10]");
    CHECK_ERR(dit_cpu_rmsnorm(c, &x, &w9, 1e-6, &y), INVALID_ARGUMENT, "rmsnorm: w has dims [9], expected [10]");
    CHECK_ERR(dit_cpu_rmsnorm_group(c, &x, &w, 4, 1e-6, &y), INVALID_ARGUMENT, "rmsnorm: group 4 does not divide the last dim of x [3, 10]");
    T(w5, DIT_F32, 1, 5);
    CHECK_ERR(dit_cpu_rmsnorm_group(c, &x, &w, 5, 1e-6, &y), INVALID_ARGUMENT, "rmsnorm: w has dims [10], expected [5]");
    CHECK_OK(dit_cpu_rmsnorm_group(c, &x, &w5, 5, 1e-6, &y));
    O(y2, DIT_F32, 2, 3, 11);
    CHECK_ERR(dit_cpu_silu(c, &x, &y2), INVALID_ARGUMENT, "silu: y has dims [3, 11], expected [3, 10] as x");
    CHECK_ERR(dit_cpu_gelu_tanh(c, &x, &y2), INVALID_ARGUMENT, "gelu_tanh: y has dims [3, 11]");
    T(b2, DIT_F32, 2, 10, 3);
    CHECK_ERR(dit_cpu_add(c, &x, &b2, &y), INVALID_ARGUMENT, "add: b has dims [10, 3], expected [3, 10] as a");
  }
  {
    T(x, DIT_F32, 3, 2, 5, 8);
    T(mod, DIT_F32, 3, 2, 6, 8);
    T(modbad, DIT_F32, 3, 1, 6, 8);
    O(y, DIT_F32, 3, 2, 5, 8);
    CHECK_ERR(dit_cpu_adaln(c, &x, &mod, DIT_TOKEN_GROUP_NONE, 1e-6, 0, 6, &y), INVALID_ARGUMENT,
              "adaln: shift 0 / scale 6 out of range for mod [2, 6, 8]");
    CHECK_ERR(dit_cpu_adaln(c, &x, &modbad, DIT_TOKEN_GROUP_NONE, 1e-6, 0, 1, &y), INVALID_ARGUMENT,
              "adaln: mod has dims [1, 6, 8], expected [2, *, 8]");
    CHECK_ERR(dit_cpu_gated_add(c, &x, &x, &mod, DIT_TOKEN_GROUP_NONE, 7, &y), INVALID_ARGUMENT, "gated_add: gate 7 out of range");
    T(tab, DIT_F32, 3, 1, 6, 8);
    T(e, DIT_F32, 2, 2, 40);
    O(o, DIT_F32, 3, 2, 6, 8);
    CHECK_ERR(dit_cpu_mod_table(c, &tab, &e, &o), INVALID_ARGUMENT, "mod_table: e has dims [2, 40]");
    T(tab2, DIT_F32, 2, 6, 8);
    CHECK_ERR(dit_cpu_mod_table(c, &tab2, &e, &o), INVALID_ARGUMENT, "mod_table: table has dims [6, 8], expected [1, n, D]");
  }
  {
    T(x, DIT_F32, 5, 1, 2, 3, 4, 4);
    O(y, DIT_F32, 3, 1, 12, 16);
    CHECK_ERR(dit_cpu_patchify(c, &x, 2, 2, 2, &y), INVALID_ARGUMENT, "not divisible by patch (2, 2, 2)");
    O(y2, DIT_F32, 3, 1, 12, 15);
    CHECK_ERR(dit_cpu_patchify(c, &x, 1, 2, 2, &y2), INVALID_ARGUMENT,
              "patchify: y has dims [1, 12, 15], expected [1, 12, 8]");
    T(yy, DIT_F32, 3, 1, 12, 8);
    O(out, DIT_F32, 5, 1, 2, 3, 4, 4);
    CHECK_ERR(dit_cpu_unpatchify(c, &yy, 1, 2, 2, 3, 2, 3, &out), INVALID_ARGUMENT,
              "unpatchify: y has dims [1, 12, 8], expected 18 tokens");
    O(out2, DIT_F32, 5, 1, 2, 3, 4, 5);
    CHECK_ERR(dit_cpu_unpatchify(c, &yy, 1, 2, 2, 3, 2, 2, &out2), INVALID_ARGUMENT,
              "unpatchify: out has dims [1, 2, 3, 4, 5], expected [1, 2, 3, 4, 4]");
  }
  {
    T(t, DIT_I64, 3, 2, 1, 1);
    O(o, DIT_F32, 2, 2, 16);
    CHECK_ERR(dit_cpu_timestep_embed(c, &t, 1, 0, 10000, 1, &o), INVALID_ARGUMENT,
              "timestep_embed: t has dims [2, 1, 1], expected [B] or [B, T]");
    T(tt, DIT_I64, 2, 2, 3); /* per token: out must be [2, 3, dim] */
    CHECK_ERR(dit_cpu_timestep_embed(c, &tt, 1, 0, 10000, 1, &o), INVALID_ARGUMENT,
              "timestep_embed: out has dims [2, 16], expected [2, 3, *]");
    T(t1, DIT_I64, 1, 3);
    CHECK_ERR(dit_cpu_timestep_embed(c, &t1, 1, 0, 10000, 1, &o), INVALID_ARGUMENT,
              "timestep_embed: out has dims [2, 16], expected [3, *]");
  }
  {
    T(x, DIT_F32, 3, 1, 6, 32);
    O(y, DIT_F32, 3, 1, 6, 32);
    CHECK_ERR(dit_cpu_rope(c, &x, 2, 1, 2, 3, 6, 5, 5, 10000, 0, &y), INVALID_ARGUMENT,
              "rope: part dims (t 6, h 5, w 5) must be even");
    CHECK_ERR(dit_cpu_rope(c, &x, 2, 1, 2, 2, 8, 4, 4, 10000, 0, &y), INVALID_ARGUMENT,
              "rope: x has dims [1, 6, 32] from token 0, expected [B, 4 (f*h*w = 1*2*2)");
    T(cs, DIT_F32, 2, 6, 8);
    CHECK_ERR(dit_cpu_rope_table(c, &x, &cs, 2, &y), INVALID_ARGUMENT, "rope_table: cs has dims [6, 8], expected [6, 16]");
    CHECK_ERR(dit_cpu_rope_table(c, &x, &cs, 3, &y), INVALID_ARGUMENT,
              "rope_table: x has dims [1, 6, 32], expected [B, T, heads * Dh] with heads = 3 and Dh even");
    T(csb, DIT_BF16, 2, 6, 16);
    CHECK_ERR(dit_cpu_rope_table(c, &x, &csb, 2, &y), INVALID_ARGUMENT, "rope_table: cs has dtype bf16, expected f32");
    dit_tensor_t ya = {buf, DIT_F32, 3, {1, 6, 32}};
    T(cs16, DIT_F32, 2, 6, 16);
    CHECK_ERR(dit_cpu_rope_table(c, &x, &cs16, 2, &ya), INVALID_ARGUMENT, "rope_table: output y overlaps input x");
  }
  {
    T(a, DIT_BF16, 3, 2, 3, 8);
    T(b, DIT_BF16, 3, 2, 4, 6);
    O(y, DIT_BF16, 3, 2, 7, 8);
    CHECK_ERR(dit_cpu_concat(c, &a, &b, 1, &y), INVALID_ARGUMENT,
              "concat: b has dims [2, 4, 6], expected those of a [2, 3, 8] but for dim 1");
    T(b2, DIT_F32, 3, 2, 4, 8);
    CHECK_ERR(dit_cpu_concat(c, &a, &b2, 1, &y), INVALID_ARGUMENT, "concat: dtypes a bf16, b f32, y bf16 differ");
    CHECK_ERR(dit_cpu_concat(c, &a, &a, 3, &y), INVALID_ARGUMENT, "concat: dim 3 outside 0..2 of a [2, 3, 8]");
    CHECK_ERR(dit_cpu_concat(c, &a, &a, 1, &y), INVALID_ARGUMENT, "concat: y has dims [2, 7, 8], expected [2, 6, 8]");
    O(r, DIT_BF16, 2, 6, 7);
    CHECK_ERR(dit_cpu_reshape(c, &a, &r), INVALID_ARGUMENT, "reshape: y bf16 [6, 7] must hold x's 48 elements of bf16 (x [2, 3, 8])");
  }
  {
    T(x, DIT_F32, 5, 1, 2, 4, 4, 3);
    T(w, DIT_F32, 5, 6, 3, 3, 3, 2);
    O(y, DIT_F32, 5, 1, 2, 4, 4, 6);
    CHECK_ERR(dit_cpu_conv3d(c, &x, &w, NULL, 2, 1, 1, &y), INVALID_ARGUMENT,
              "conv3d: w has dims [6, 3, 3, 3, 2], expected [Cout, kt, kh, kw, 3] or [Cout, kh, kw, 3] for x [1, 2, 4, 4, 3]");
    T(w3, DIT_F32, 5, 6, 3, 3, 3, 3);
    CHECK_ERR(dit_cpu_conv3d(c, &x, &w3, NULL, 1, 1, 1, &y), INVALID_ARGUMENT, "conv3d: y has dims [1, 2, 4, 4, 6], expected [1, 1, 4, 4, 6]");
    CHECK_ERR(dit_cpu_conv3d(c, &x, &w3, NULL, 0, 1, 1, &y), INVALID_ARGUMENT,
              "conv3d: w [6, 3, 3, 3, 3] with padding (0, 1, 1) does not fit x [1, 2, 4, 4, 3]");
    T(bias, DIT_F32, 1, 5);
    CHECK_ERR(dit_cpu_conv3d(c, &x, &w3, &bias, 2, 1, 1, &y), INVALID_ARGUMENT, "conv3d: bias has dims [5], expected [6]");
    const dit_conv3d_attrs_t zero_stride = {.pad_t = 2, .pad_h = 1, .pad_w = 1, .pad_h_after = 1, .pad_w_after = 1, .stride_t = 1,
                                            .stride_h = 0, .stride_w = 1};
    CHECK_ERR(dit_cpu_conv3d_ex(c, &x, &w3, NULL, &zero_stride, &y), INVALID_ARGUMENT, "conv3d: strides (1, 0, 1) must be positive");
    const dit_conv3d_attrs_t halved = {.pad_t = 2, .pad_h = 0, .pad_w = 0, .pad_h_after = 1, .pad_w_after = 1, .stride_t = 1,
                                       .stride_h = 2, .stride_w = 2};
    CHECK_ERR(dit_cpu_conv3d_ex(c, &x, &w3, NULL, &halved, &y), INVALID_ARGUMENT,
              "conv3d: y has dims [1, 2, 4, 4, 6], expected [1, 2, 2, 2, 6]");
    O(u, DIT_F32, 5, 1, 2, 8, 7, 3);
    CHECK_ERR(dit_cpu_upsample(c, &x, 2, &u), INVALID_ARGUMENT, "upsample: y has dims [1, 2, 8, 7, 3], expected [1, 2, 8, 8, 3]");
    O(cl, DIT_F32, 5, 1, 2, 4, 4, 3);
    CHECK_ERR(dit_cpu_clamp(c, &x, 1.0, -1.0, &cl), INVALID_ARGUMENT, "clamp: bounds [1, -1] are empty");
    T(gw, DIT_F32, 1, 3);
    T(gb, DIT_F32, 1, 2);
    CHECK_ERR(dit_cpu_groupnorm(c, &x, &gw, &gw, 2, 1e-6, &cl), INVALID_ARGUMENT, "groupnorm: 2 groups do not divide the channels of x [1, 2, 4, 4, 3]");
    CHECK_ERR(dit_cpu_groupnorm(c, &x, &gw, &gb, 3, 1e-6, &cl), INVALID_ARGUMENT, "groupnorm: b has dims [2], expected [3]");
    T(x2, DIT_F32, 2, 4, 3);
    O(y2, DIT_F32, 2, 4, 3);
    CHECK_ERR(dit_cpu_groupnorm(c, &x2, &gw, &gw, 1, 1e-6, &y2), INVALID_ARGUMENT, "groupnorm: x has dims [4, 3], expected [B, ..., C] of rank >= 3");
  }
#undef T
#undef O
}

/* ---- torch / diffusers cross-check ------------------------------------------------------- */

/* tests/data/cpu_ops/ref.bin, written by make_ref.py: records of
 * u32 name_len, name, u32 rank, i64 dims[rank], f32 data[numel], all little-endian. */
typedef struct ref_rec {
  char name[64];
  dit_tensor_t t;
} ref_rec_t;

static ref_rec_t g_ref[64];
static int g_nref;

static int load_refs(void) {
  const char *root = getenv("DIT_TEST_DATA");
  char path[4096];
  snprintf(path, sizeof path, "%s/cpu_ops/ref.bin", root ? root : "data");
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return 0;
  }
  for (;;) {
    uint32_t nl, rank;
    if (fread(&nl, 4, 1, f) != 1) break;
    ref_rec_t *r = &g_ref[g_nref];
    if (g_nref >= 64 || nl >= sizeof r->name || fread(r->name, 1, nl, f) != nl) goto bad;
    r->name[nl] = 0;
    if (fread(&rank, 4, 1, f) != 1 || rank > DIT_MAX_RANK) goto bad;
    r->t.rank = (int)rank;
    r->t.dtype = DIT_F32;
    if (rank && fread(r->t.dims, 8, rank, f) != rank) goto bad;
    int64_t n = dit_tensor_numel(&r->t);
    if (n < 0 || n > (1 << 22)) goto bad;
    r->t.data = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if ((int64_t)fread(r->t.data, 4, (size_t)n, f) != n) goto bad;
    g_nref++;
  }
  fclose(f);
  return 1;
bad:
  fprintf(stderr, "%s: malformed record %d\n", path, g_nref);
  fclose(f);
  return 0;
}

static dit_tensor_t *ref_get(const char *name) {
  for (int i = 0; i < g_nref; i++)
    if (strcmp(g_ref[i].name, name) == 0) return &g_ref[i].t;
  fprintf(stderr, "reference tensor %s missing\n", name);
  return NULL;
}

static double *as_double(const dit_tensor_t *t) {
  int64_t n = dit_tensor_numel(t);
  double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) d[i] = get_elem(t, i);
  return d;
}

/* Compares a kernel's output to a torch tensor: same dims, within tol. */
static void check_vs_torch(const char *what, const dit_tensor_t *out, const char *ref_name, double tol) {
  dit_tensor_t *r = ref_get(ref_name);
  CHECK(r != NULL);
  if (!r) return;
  CHECK_EQ_INT(dit_tensor_numel(r), dit_tensor_numel(out));
  if (dit_tensor_numel(r) != dit_tensor_numel(out)) return;
  double *d = as_double(r);
  CHECK(compare(what, out, d, tol));
  free(d);
}

static dit_tensor_t out_like(const dit_tensor_t *t) { return out_poisoned(DIT_F32, t->rank, t->dims); }

static void test_torch(void) {
  CHECK(load_refs());
  if (!g_nref) return;
  printf("cross-check against torch/diffusers (tests/data/cpu_ops/ref.bin):\n");
  g_verbose = 1;
  dit_cpu_t *c = &g_cpu[1];
  dit_tensor_t *x, *w, *b, *t, *q, *k, *v, *mod;
  /* Tolerances: torch's fp32 kernels round differently (its own exp/sin/tanh, summation
   * order), so these are 1e-5 except where noted. */
  if ((x = ref_get("ln.x")) && (w = ref_get("ln.w")) && (b = ref_get("ln.b"))) {
    dit_tensor_t y = out_like(x);
    CHECK_OK(dit_cpu_layernorm(c, x, w, b, 1e-6, &y));
    check_vs_torch("torch layer_norm", &y, "ln.y", TOL_F32);
    CHECK_OK(dit_cpu_layernorm(c, x, NULL, NULL, 1e-6, &y));
    check_vs_torch("torch layer_norm (no affine)", &y, "ln.y_noaffine", TOL_F32);
    CHECK_OK(dit_cpu_rmsnorm(c, x, w, 1e-6, &y));
    check_vs_torch("torch nn.RMSNorm", &y, "rms.y", TOL_F32);
    CHECK_OK(dit_cpu_gelu_tanh(c, x, &y));
    check_vs_torch("torch gelu tanh", &y, "gelu.y", TOL_F32);
    CHECK_OK(dit_cpu_silu(c, x, &y));
    check_vs_torch("torch silu", &y, "silu.y", TOL_F32);
    if ((mod = ref_get("adaln.mod"))) {
      CHECK_OK(dit_cpu_adaln(c, x, mod, DIT_TOKEN_GROUP_NONE, 1e-6, 0, 1, &y));
      check_vs_torch("diffusers-style adaln", &y, "adaln.y", TOL_F32);
    }
    free(y.data);
  }
  if ((t = ref_get("temb.t"))) {
    /* t is stored as float; the kernel converts any dtype with a plain cast. */
    dit_tensor_t o = out_poisoned(DIT_F32, 2, (int64_t[]){t->dims[0], 256});
    CHECK_OK(dit_cpu_timestep_embed(c, t, 1, 0, 10000, 1, &o));
    /* torch's exp/sin/cos are within an ulp or so of ours; at t ~ 1000 an ulp of the angle
     * is 6e-5. */
    check_vs_torch("diffusers get_timestep_embedding (Wan: flip, shift 0)", &o, "temb.y", 1.5e-4);
    free(o.data);
    dit_tensor_t o2 = out_poisoned(DIT_F32, 2, (int64_t[]){t->dims[0], 33});
    CHECK_OK(dit_cpu_timestep_embed(c, t, 0, 1, 10000, 2, &o2));
    check_vs_torch("diffusers get_timestep_embedding (odd dim, shift 1, scale 2)", &o2, "temb.y2", 3e-4);
    free(o2.data);
  }
  if ((x = ref_get("rope.x"))) {
    dit_tensor_t y = out_like(x);
    /* Wan with head dim 24 (t/h/w = 8/8/8), 2 heads, grid 2x3x4. */
    CHECK_OK(dit_cpu_rope(c, x, 2, 2, 3, 4, 8, 8, 8, 10000, 0, &y));
    check_vs_torch("diffusers WanRotaryPosEmbed + rotation", &y, "rope.y", TOL_F32);
    free(y.data);
  }
  if ((q = ref_get("attn.q")) && (k = ref_get("attn.k")) && (v = ref_get("attn.v"))) {
    dit_tensor_t o = out_like(q);
    dit_tensor_t lse = out_poisoned(DIT_F32, 3, (int64_t[]){q->dims[0], 2, q->dims[1]});
    CHECK_OK(dit_cpu_attention(c, q, k, v, 2, 1 / sqrt((double)q->dims[2] / 2), &o, &lse));
    check_vs_torch("torch scaled_dot_product_attention", &o, "attn.o", TOL_F32);
    check_vs_torch("torch logsumexp of scores", &lse, "attn.lse", TOL_F32);
    free(o.data);
    free(lse.data);
  }
  if ((x = ref_get("patch.x")) && (w = ref_get("patch.w")) && (b = ref_get("patch.b"))) {
    /* x [1, 4, 2, 6, 4], Conv3d patch (1, 2, 2) -> [1, 2*3*2, 16] -> linear to 8. */
    dit_tensor_t p = out_poisoned(DIT_F32, 3, (int64_t[]){1, 12, 16});
    dit_tensor_t y = out_poisoned(DIT_F32, 3, (int64_t[]){1, 12, 8});
    CHECK_OK(dit_cpu_patchify(c, x, 1, 2, 2, &p));
    CHECK_OK(dit_cpu_linear(c, &p, w, b, &y));
    check_vs_torch("torch Conv3d patch embedding", &y, "patch.y", TOL_F32);
    free(p.data);
    free(y.data);
  }
  if ((x = ref_get("unpatch.y"))) {
    /* [1, 2*3*2, 4*1*2*2] -> [1, 4, 2, 6, 4] */
    dit_tensor_t o = out_poisoned(DIT_F32, 5, (int64_t[]){1, 4, 2, 6, 4});
    CHECK_OK(dit_cpu_unpatchify(c, x, 1, 2, 2, 2, 3, 2, &o));
    check_vs_torch("diffusers Wan unpatchify", &o, "unpatch.out", 0.0);
    free(o.data);
  }
  g_verbose = 0;
  for (int i = 0; i < g_nref; i++) free(g_ref[i].t.data);
}

/* ---- throughput -------------------------------------------------------------------------- */

static double time_best(int reps, dit_status_t (*fn)(void *), void *arg) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    const double t0 = now_s();
    dit_status_t s = fn(arg);
    const double dt = now_s() - t0;
    if (s) {
      dit_status_free(s);
      return -1;
    }
    best = dt < best ? dt : best;
  }
  return best;
}

typedef struct bench_lin {
  dit_cpu_t *c;
  dit_tensor_t x, w, y;
} bench_lin_t;

static dit_status_t run_lin(void *a) {
  bench_lin_t *b = a;
  return dit_cpu_linear(b->c, &b->x, &b->w, NULL, &b->y);
}

typedef struct bench_attn {
  dit_cpu_t *c;
  dit_tensor_t q, k, v, o;
  int heads;
} bench_attn_t;

static dit_status_t run_attn(void *a) {
  bench_attn_t *b = a;
  return dit_cpu_attention(b->c, &b->q, &b->k, &b->v, b->heads, 0.125, &b->o, NULL);
}

static void bench(void) {
  const int64_t n = 512;
  const int64_t d2[2] = {n, n};
  tt_t x = tt_rand(DIT_F32, 2, d2, -1, 1), w = tt_rand(DIT_F32, 2, d2, -1, 1);
  tt_t wb = tt_rand(DIT_BF16, 2, d2, -1, 1);
  dit_tensor_t y = tensor_alloc(DIT_F32, 2, d2);
  dit_pool_t *p1 = NULL, *pn = NULL;
  CHECK_OK(dit_pool_create(1, &p1));
  CHECK_OK(dit_pool_create(0, &pn));
  dit_cpu_t c1 = {p1}, cn = {pn};
  bench_lin_t bl = {&c1, x.t, w.t, y};
  const double flop = 2.0 * n * n * n;
  double t1 = time_best(5, run_lin, &bl);
  bl.c = &cn;
  double tn = time_best(5, run_lin, &bl);
  bl.w = wb.t;
  double tb = time_best(5, run_lin, &bl);
  printf("bench linear 512x512x512 f32: %.1f GFLOP/s on 1 thread, %.1f GFLOP/s on %d threads;"
         " bf16 weights %.1f GFLOP/s\n", flop / t1 * 1e-9, flop / tn * 1e-9, dit_pool_threads(pn),
         flop / tb * 1e-9);

  const int64_t S = 1024, H = 4, Dh = 64;
  const int64_t ad[3] = {1, S, H * Dh};
  tt_t q = tt_rand(DIT_F32, 3, ad, -1, 1), k = tt_rand(DIT_F32, 3, ad, -1, 1), v = tt_rand(DIT_F32, 3, ad, -1, 1);
  dit_tensor_t o = tensor_alloc(DIT_F32, 3, ad);
  bench_attn_t ba = {&c1, q.t, k.t, v.t, o, (int)H};
  const double aflop = 4.0 * S * S * Dh * H;
  double a1 = time_best(3, run_attn, &ba);
  ba.c = &cn;
  double an = time_best(3, run_attn, &ba);
  printf("bench attention S=L=%lld H=%lld Dh=%lld f32: %.1f GFLOP/s (%.1f Mscores/s) on 1 thread,"
         " %.1f GFLOP/s on %d threads\n", (long long)S, (long long)H, (long long)Dh, aflop / a1 * 1e-9,
         (double)S * S * H / a1 * 1e-6, aflop / an * 1e-9, dit_pool_threads(pn));
  free(y.data);
  free(o.data);
  tt_free(&x), tt_free(&w), tt_free(&wb), tt_free(&q), tt_free(&k), tt_free(&v);
  dit_pool_destroy(p1);
  dit_pool_destroy(pn);
}

int main(void) {
  dit_pool_t *p1 = NULL, *p3 = NULL;
  CHECK_OK(dit_pool_create(1, &p1));
  CHECK_OK(dit_pool_create(3, &p3));
  g_cpu[0].pool = p1;
  g_cpu[1].pool = p3;
  test_linear();
  test_linear_fp8();
  test_attention();
  test_attn_quant();
  test_attn_quant_act();
  test_attn_vmax();
  test_attn_quant_vt();
  test_attention_fp8();
  test_masks();
  test_umt5_ops();
  test_causal_attention();
  test_norms();
  test_elementwise();
  test_patch();
  test_timestep();
  test_rope();
  test_mmdit_ops();
  test_rope_normed();
  test_video_ops();
  test_clip_ops();
  test_groupnorm();
  test_errors();
  test_torch();
  bench();
  dit_pool_destroy(p1);
  dit_pool_destroy(p3);
  return check_summary("test_cpu_ops");
}
