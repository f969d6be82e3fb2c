/* FP8 attention on the CPU: the reference of base/ops.def's attn_quant, attn_vmax, attn_quant_vt
 * and attention_fp8, the operands and the arithmetic the Hopper kernel uses (e4m3 or int8 codes
 * decoded exactly to fp32, fp32 sums (exact integers for int8), exp2 with log2(e) folded into the
 * scores, 2^8 P as e4m3 codes interpolated without an exponential (dit_e4m3_exp2_lin) before the
 * P V product). Deterministic: every sum runs in a fixed order whatever the thread count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/ops.h"
#include "runtime/cpu/cpu_internal.h"

#define QROWS 64              /* attention_fp8's query rows per scale */
#define KTILE DIT_SPARSE_TILE /* attn_quant_vt's key padding, a schedule's key tiles and the query rows of a task */

/* attn_quant_vt's channel mean from the sum of its L finite values (0 without keys), and the
 * largest |v - mean| from the largest and smallest values (subtracting one number keeps their
 * order, so this is the largest over the keys exactly). */
static float dit_attn_v_mean(float sum, int64_t L) { return L > 0 ? sum / (float)L : 0.0f; }
static float dit_attn_v_amax(float mx, float mn, float mean) { return fmaxf(mx - mean, mean - mn); }

int64_t dit_attn_vt_key(int64_t col) {
  const int64_t p = col % 16, t = p / 4, j = p % 4;
  return col - p + (j < 2 ? 2 * t + j : 6 + 2 * t + j);
}

/* Codes of dtype `want`: f8e4m3, or i8 where that is allowed too (want = DIT_I8 accepts either). */
static dit_status_t check_codes(const char *op, const char *name, const dit_tensor_t *t, dit_dtype_t want, int rank, const int64_t *dims) {
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_any(op, name, t));
  if (t->dtype != DIT_F8E4M3 && (want != DIT_I8 || t->dtype != DIT_I8))
    return DIT_ERR(INVALID_ARGUMENT, "%s: %s is %s %s, expected f8e4m3%s", op, name, dit_dtype_name(t->dtype), dit_cpu_dims_str(t, b1),
                   want == DIT_I8 ? " or i8" : "");
  return dit_cpu_check_dims(op, name, t, rank, dims);
}

static dit_status_t check_scales(const char *op, const char *name, const dit_tensor_t *t, int rank, const int64_t *dims) {
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_any(op, name, t));
  if (t->dtype != DIT_F32)
    return DIT_ERR(INVALID_ARGUMENT, "%s: %s is %s %s, expected f32", op, name, dit_dtype_name(t->dtype), dit_cpu_dims_str(t, b1));
  return dit_cpu_check_dims(op, name, t, rank, dims);
}

/* x [B, T, heads*Dh] float with heads dividing the channels. */
static dit_status_t check_x(const char *op, const char *name, const dit_tensor_t *x, int heads) {
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, name, x));
  if (x->rank != 3) return DIT_ERR(INVALID_ARGUMENT, "%s: %s has dims %s, expected [B, T, heads*Dh]", op, name, dit_cpu_dims_str(x, b1));
  if (heads < 1 || x->dims[2] % heads)
    return DIT_ERR(INVALID_ARGUMENT, "%s: %s's last dim %lld is not a positive multiple of heads = %d", op, name, (long long)x->dims[2],
                   heads);
  return DIT_OK;
}

/* ---- attn_quant ------------------------------------------------------------------------- */

typedef struct quant_job {
  const dit_tensor_t *x;
  uint8_t *x8;
  int int8; /* i8 codes, else e4m3 */
  float *xs;
  int64_t T, H, Dh, rows, nblk;
  const float *bias; /* token rows: act(x + bias) quantized (NULL: no bias) */
  int act;
  dit_cpu_scratch_t scratch;
} quant_job_t;

/* One (b, h, row block): gathered into one fp32 row, quantized as one row, scattered back. */
static void quant_task(void *ctx, int64_t begin, int64_t end, int worker) {
  quant_job_t *j = ctx;
  float *buf = dit_cpu_scratch_get(&j->scratch, worker);
  uint8_t *codes = (uint8_t *)(buf + j->rows * j->Dh);
  const int64_t H = j->H, Dh = j->Dh, HD = H * Dh;
  for (int64_t t = begin; t < end; t++) {
    const int64_t r = t % j->nblk, h = t / j->nblk % H, b = t / j->nblk / H;
    const int64_t r0 = r * j->rows, n = (j->T - r0 < j->rows ? j->T - r0 : j->rows);
    for (int64_t i = 0; i < n; i++) {
      const float *src = dit_cpu_row_load(j->x->data, j->x->dtype, (b * j->T + r0 + i) * HD + h * Dh, Dh, buf + i * Dh);
      if (src != buf + i * Dh) memcpy(buf + i * Dh, src, sizeof(float) * (size_t)Dh);
    }
    if (j->bias || j->act)
      for (int64_t e = 0; e < n * Dh; e++) {
        const float v = j->bias ? buf[e] + j->bias[e % Dh] : buf[e];
        buf[e] = j->act ? dit_cpu_gelu_tanh1(v) : v;
      }
    j->xs[t] = j->int8 ? dit_i8_quantize_row(buf, n * Dh, (int8_t *)codes)
                       : dit_e4m3_quantize_to(buf, n * Dh, codes, dit_attn_quant_e4m3_max(H, j->rows));
    for (int64_t i = 0; i < n; i++) memcpy(j->x8 + (b * j->T + r0 + i) * HD + h * Dh, codes + i * Dh, (size_t)Dh);
  }
}

static dit_status_t attn_quant(dit_cpu_t *c, const dit_tensor_t *x, int heads, int64_t rows, const float *bias, int act, dit_tensor_t *x8,
                               dit_tensor_t *xs) {
  static const char *op = "attn_quant";
  DIT_RETURN_IF(check_x(op, "x", x, heads));
  if (rows < 1) return DIT_ERR(INVALID_ARGUMENT, "%s: rows = %lld, expected >= 1", op, (long long)rows);
  const int64_t B = x->dims[0], T = x->dims[1], nblk = (T + rows - 1) / rows, sd[3] = {B, heads, nblk};
  DIT_RETURN_IF(check_codes(op, "x8", x8, DIT_I8, 3, x->dims));
  DIT_RETURN_IF(check_scales(op, "xs", xs, 3, sd));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "x8", x8, "x", x));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "xs", xs, "x", x));
  if (B * T == 0) return DIT_OK;
  quant_job_t j = {.x = x, .x8 = x8->data, .int8 = x8->dtype == DIT_I8, .xs = xs->data, .T = T, .H = heads, .Dh = x->dims[2] / heads,
                   .rows = rows, .nblk = nblk, .bias = bias, .act = act};
  DIT_RETURN_IF(dit_cpu_scratch_alloc(op, c, (size_t)(rows * j.Dh) * 5 + 64, &j.scratch));
  dit_pool_parallel_for(dit_cpu_pool(c), B * heads * nblk, 1, quant_task, &j);
  dit_cpu_scratch_free(&j.scratch);
  return DIT_OK;
}

dit_status_t dit_cpu_attn_quant(dit_cpu_t *c, const dit_tensor_t *x, int heads, int64_t rows, dit_tensor_t *x8, dit_tensor_t *xs) {
  return attn_quant(c, x, heads, rows, NULL, 0, x8, xs);
}

dit_status_t dit_cpu_attn_quant_act(dit_cpu_t *c, const dit_tensor_t *x, const dit_tensor_t *bias, int act, dit_tensor_t *x8,
                                    dit_tensor_t *xs) {
  static const char *op = "attn_quant";
  char b1[DIT_CPU_DIMS_BUF];
  if (act != 0 && act != 1) return DIT_ERR(INVALID_ARGUMENT, "%s: act = %d, expected 0 or 1 (gelu_tanh)", op, act);
  if (!bias) return attn_quant(c, x, 1, 1, NULL, act, x8, xs);
  DIT_RETURN_IF(check_x(op, "x", x, 1));
  DIT_RETURN_IF(dit_cpu_check_float(op, "bias", bias));
  if (bias->rank != 1 || bias->dims[0] != x->dims[2])
    return DIT_ERR(INVALID_ARGUMENT, "%s: bias has dims %s, expected [%lld]", op, dit_cpu_dims_str(bias, b1), (long long)x->dims[2]);
  float *b = malloc(sizeof(float) * (size_t)x->dims[2] + 1);
  if (!b) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for the bias", op);
  dit_status_t s = dit_convert(b, DIT_F32, bias->data, bias->dtype, (size_t)x->dims[2]) ? DIT_ERR(INVALID_ARGUMENT, "%s: bias dtype", op) : DIT_OK;
  if (!s) s = attn_quant(c, x, 1, 1, b, act, x8, xs);
  free(b);
  return s;
}

/* ---- attn_vmax, attn_quant_vt ------------------------------------------------------------ */

typedef struct vt_job {
  const dit_tensor_t *v;
  const float *vmax; /* attn_quant_vt: [B, H, S, 3, Dh] */
  float *out;        /* attn_vmax: [B, H, S, 3, Dh] */
  uint8_t *vt8;
  float *vs;
  int64_t L, Lp, H, Dh, S;
  dit_cpu_scratch_t scratch;
} vt_job_t;

/* One (b, h, split): the split's key rows of head h read whole, their channels' largest and
 * smallest values and their sums (keys in order). */
static void vmax_task(void *ctx, int64_t begin, int64_t end, int worker) {
  vt_job_t *j = ctx;
  float *buf = dit_cpu_scratch_get(&j->scratch, worker);
  const int64_t H = j->H, Dh = j->Dh, HD = H * Dh, n = (j->L + j->S - 1) / j->S;
  for (int64_t t = begin; t < end; t++) {
    const int64_t s = t % j->S, h = t / j->S % H, b = t / j->S / H, k1 = (s + 1) * n < j->L ? (s + 1) * n : j->L;
    float *mx = j->out + t * 3 * Dh, *mn = mx + Dh, *sum = mn + Dh;
    for (int64_t c = 0; c < Dh; c++) mx[c] = -INFINITY, mn[c] = INFINITY, sum[c] = 0.0f;
    for (int64_t key = s * n; key < k1; key++) {
      const float *row = dit_cpu_row_load(j->v->data, j->v->dtype, (b * j->L + key) * HD + h * Dh, Dh, buf);
      for (int64_t c = 0; c < Dh; c++) {
        const float x = row[c];
        if (x > mx[c]) mx[c] = x; /* NaN never counts */
        if (x < mn[c]) mn[c] = x;
        if (isfinite(x)) sum[c] += x;
      }
    }
  }
}

/* x [B, L, heads*Dh] as v, its f32 statistics [B, heads, S, 3, Dh]. */
static dit_status_t check_vmax(const char *op, const dit_tensor_t *v, int heads, const dit_tensor_t *vmax) {
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_any(op, "vmax", vmax));
  if (vmax->dtype != DIT_F32 || vmax->rank != 5 || vmax->dims[2] < 1)
    return DIT_ERR(INVALID_ARGUMENT, "%s: vmax is %s %s, expected f32 [B, heads, splits >= 1, 3, Dh]", op, dit_dtype_name(vmax->dtype),
                   dit_cpu_dims_str(vmax, b1));
  const int64_t md[5] = {v->dims[0], heads, -1, 3, v->dims[2] / heads};
  return dit_cpu_check_dims(op, "vmax", vmax, 5, md);
}

dit_status_t dit_cpu_attn_vmax(dit_cpu_t *c, const dit_tensor_t *v, int heads, dit_tensor_t *vmax) {
  static const char *op = "attn_vmax";
  DIT_RETURN_IF(check_x(op, "v", v, heads));
  DIT_RETURN_IF(check_vmax(op, v, heads, vmax));
  const int64_t B = v->dims[0], L = v->dims[1], Dh = v->dims[2] / heads, S = vmax->dims[2];
  if (S > (L > 1 ? L : 1))
    return DIT_ERR(INVALID_ARGUMENT, "%s: vmax has %lld splits, more than the %lld keys of v", op, (long long)S, (long long)L);
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "vmax", vmax, "v", v));
  if (B * heads * Dh == 0) return DIT_OK;
  vt_job_t j = {.v = v, .out = vmax->data, .L = L, .H = heads, .Dh = Dh, .S = S};
  DIT_RETURN_IF(dit_cpu_scratch_alloc(op, c, (size_t)Dh * 4 + 64, &j.scratch));
  dit_pool_parallel_for(dit_cpu_pool(c), B * heads * S, 1, vmax_task, &j);
  dit_cpu_scratch_free(&j.scratch);
  return DIT_OK;
}

/* One (b, h, channel): the mean and the scale from the splits' statistics (merged in split order,
 * as the kernel), the channel's L codes, then its vt8 row in column order. */
static void vt_task(void *ctx, int64_t begin, int64_t end, int worker) {
  vt_job_t *j = ctx;
  uint8_t *codes = (uint8_t *)dit_cpu_scratch_get(&j->scratch, worker);
  const int64_t H = j->H, Dh = j->Dh, HD = H * Dh;
  for (int64_t t = begin; t < end; t++) {
    const int64_t ch = t % Dh, bh = t / Dh, h = bh % H, b = bh / H;
    float mx = -INFINITY, mn = INFINITY, sum = 0.0f;
    for (int64_t s = 0; s < j->S; s++) {
      const float *st = j->vmax + (bh * j->S + s) * 3 * Dh + ch;
      mx = fmaxf(mx, st[0]), mn = fminf(mn, st[Dh]), sum += st[2 * Dh];
    }
    const float mean = dit_attn_v_mean(sum, j->L), amax = dit_attn_v_amax(mx, mn, mean);
    const float scale = dit_e4m3_scale(amax), inv = dit_e4m3_inv(amax);
    for (int64_t key = 0; key < j->L; key++)
      codes[key] = dit_f32_to_e4m3((dit_cpu_load1(j->v->data, j->v->dtype, (b * j->L + key) * HD + h * Dh + ch) - mean) * inv);
    j->vs[bh * 2 * Dh + ch] = scale;
    j->vs[bh * 2 * Dh + Dh + ch] = mean;
    uint8_t *row = j->vt8 + t * j->Lp;
    for (int64_t col = 0; col < j->Lp; col++) {
      const int64_t key = dit_attn_vt_key(col);
      row[col] = key < j->L ? codes[key] : 0;
    }
  }
}

dit_status_t dit_cpu_attn_quant_vt(dit_cpu_t *c, const dit_tensor_t *v, const dit_tensor_t *vmax, int heads, dit_tensor_t *vt8,
                                   dit_tensor_t *vs) {
  static const char *op = "attn_quant_vt";
  DIT_RETURN_IF(check_x(op, "v", v, heads));
  DIT_RETURN_IF(check_vmax(op, v, heads, vmax));
  const int64_t B = v->dims[0], L = v->dims[1], Dh = v->dims[2] / heads, Lp = (L + KTILE - 1) / KTILE * KTILE;
  const int64_t td[4] = {B, heads, Dh, Lp}, sd[4] = {B, heads, 2, Dh};
  DIT_RETURN_IF(check_codes(op, "vt8", vt8, DIT_F8E4M3, 4, td));
  DIT_RETURN_IF(check_scales(op, "vs", vs, 4, sd));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "vt8", vt8, "v", v));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "vs", vs, "v", v));
  if (B * heads * Dh == 0) return DIT_OK;
  vt_job_t j = {.v = v, .vmax = vmax->data, .vt8 = vt8->data, .vs = vs->data, .L = L, .Lp = Lp, .H = heads, .Dh = Dh, .S = vmax->dims[2]};
  DIT_RETURN_IF(dit_cpu_scratch_alloc(op, c, (size_t)L + 64, &j.scratch));
  dit_pool_parallel_for(dit_cpu_pool(c), B * heads * Dh, 1, vt_task, &j);
  dit_cpu_scratch_free(&j.scratch);
  return DIT_OK;
}

/* ---- attention_fp8 ---------------------------------------------------------------------- */

typedef struct fp8_job {
  const uint8_t *q8, *k8, *vt8; /* vt8 NULL: V is v itself (bf16 P V) */
  const dit_tensor_t *v;
  const float *qs, *ks, *vs;
  const dit_tensor_t *out, *lse;
  const int32_t *tiles; /* schedule rows of tiles_w, or NULL: every key tile */
  const int32_t *bound; /* [B]: item b's keys end at bound[b] (clamped to [0, L]), or NULL: all keys */
  int64_t tiles_w;
  int64_t B, S, L, Lp, H, Dh, kt; /* kt: keys per tile and per scale of k */
  float scale_log2e;
  float dec[256];   /* every e4m3 code decoded: P's and V's */
  float qkdec[256]; /* Q's and K's codes decoded: e4m3's, or each byte as a signed integer */
  dit_cpu_scratch_t scratch;
} fp8_job_t;

/* One (b, h, query tile of KTILE rows): the online softmax over its key tiles of KT keys. */
static void fp8_task(void *ctx, int64_t begin, int64_t end, int worker) {
  fp8_job_t *j = ctx;
  const int64_t H = j->H, Dh = j->Dh, HD = H * Dh, S = j->S, nqt = (S + KTILE - 1) / KTILE, KT = j->kt;
  float *qd = dit_cpu_scratch_get(&j->scratch, worker); /* [KTILE][Dh] decoded queries */
  float *kt = qd + KTILE * Dh;                          /* [Dh][KT] decoded keys, transposed */
  float *vd = kt + Dh * KT;                             /* [KT][Dh] decoded values by key */
  float *o = vd + KT * Dh;                              /* [KTILE][Dh] accumulators */
  float *m = o + KTILE * Dh, *l = m + KTILE, *s = l + KTILE;  /* s: [KT] */
  const float *dec = j->dec, *qkdec = j->qkdec;
  for (int64_t t = begin; t < end; t++) {
    const int64_t qt = t % nqt, h = t / nqt % H, b = t / nqt / H, q0 = qt * KTILE;
    const int64_t nq = S - q0 < KTILE ? S - q0 : KTILE;
    /* The item's keys: past a bound they are excluded, their tiles never read. */
    const int64_t L = !j->bound ? j->L : j->bound[b] <= 0 ? 0 : j->bound[b] < j->L ? j->bound[b] : j->L;
    for (int64_t i = 0; i < nq; i++) {
      const uint8_t *src = j->q8 + (b * S + q0 + i) * HD + h * Dh;
      for (int64_t c = 0; c < Dh; c++) qd[i * Dh + c] = qkdec[src[c]];
      m[i] = -INFINITY;
      l[i] = 0.0f;
    }
    memset(o, 0, sizeof(float) * (size_t)(nq * Dh));
    const int32_t *sched = j->tiles ? j->tiles + qt * j->tiles_w : NULL;
    const int64_t n_tiles = sched ? sched[0] : (L + KT - 1) / KT;
    const float *qs = j->qs + (b * H + h) * ((S + QROWS - 1) / QROWS);
    for (int64_t e = 0; e < n_tiles; e++) {
      const int64_t kti = sched ? sched[1 + e] : e, k0 = kti * KT, nk = L - k0 < KT ? L - k0 : KT;
      for (int64_t key = 0; key < nk; key++) {
        const uint8_t *src = j->k8 + (b * j->L + k0 + key) * HD + h * Dh;
        for (int64_t c = 0; c < Dh; c++) kt[c * KT + key] = qkdec[src[c]];
      }
      if (j->vt8) {
        const uint8_t *vrows = j->vt8 + (b * H + h) * Dh * j->Lp + k0;
        for (int64_t col = 0; col < KT; col++) {
          const int64_t key = dit_attn_vt_key(col);
          if (key < nk)
            for (int64_t c = 0; c < Dh; c++) vd[key * Dh + c] = dec[vrows[c * j->Lp + col]];
        }
      } else {
        for (int64_t key = 0; key < nk; key++) {
          const float *src = dit_cpu_row_load(j->v->data, j->v->dtype, (b * j->L + k0 + key) * HD + h * Dh, Dh, vd + key * Dh);
          if (src != vd + key * Dh) memcpy(vd + key * Dh, src, sizeof(float) * (size_t)Dh);
        }
      }
      const float ks = j->ks[(b * H + h) * ((j->L + KT - 1) / KT) + kti];
      for (int64_t i = 0; i < nq; i++) {
        for (int64_t key = 0; key < nk; key++) s[key] = 0.0f;
        const float *qr = qd + i * Dh;
        for (int64_t c = 0; c < Dh; c++) {
          const float qv = qr[c], *kr = kt + c * KT;
          for (int64_t key = 0; key < nk; key++) s[key] += qv * kr[key];
        }
        const float qsc = qs[(q0 + i) / QROWS];
        float mx = m[i];
        for (int64_t key = 0; key < nk; key++) {
          s[key] = s[key] * qsc * ks * j->scale_log2e;
          if (s[key] > mx) mx = s[key];
        }
        const float alpha = exp2f(m[i] - mx);
        float sum = 0.0f;
        float *orow = o + i * Dh;
        for (int64_t c = 0; c < Dh; c++) orow[c] *= alpha;
        for (int64_t key = 0; key < nk; key++) {
          /* e4m3 of 2^8 P made without an exponential (dit_e4m3_exp2_lin), whose sums the kernel's
           * P V^T makes; or bf16 P, with the unrounded P's sums */
          float p8;
          if (j->vt8) {
            p8 = dec[dit_e4m3_exp2_lin(s[key] - mx + 8.0f)] * (1.0f / 256.0f);
            sum += p8;
          } else {
            const float p = exp2f(s[key] - mx);
            p8 = dit_bf16_to_f32(dit_f32_to_bf16(p));
            sum += p;
          }
          if (p8 == 0.0f) continue;
          const float *vr = vd + key * Dh;
          for (int64_t c = 0; c < Dh; c++) orow[c] += p8 * vr[c];
        }
        l[i] = l[i] * alpha + sum;
        m[i] = mx;
      }
    }
    const float *vs = j->vs ? j->vs + (b * H + h) * 2 * Dh : NULL, *vm = vs ? vs + Dh : NULL;
    for (int64_t i = 0; i < nq; i++) {
      float *orow = o + i * Dh;
      /* No keys (a bound of 0): a zero output, and lse = -inf (m) + log2(0). */
      for (int64_t c = 0; c < Dh; c++) orow[c] = L ? (vs ? orow[c] * vs[c] / l[i] + vm[c] : orow[c] / l[i]) : 0.0f;
      dit_cpu_row_store(j->out->data, j->out->dtype, (b * S + q0 + i) * HD + h * Dh, orow, Dh);
      if (j->lse) dit_cpu_store1(j->lse->data, j->lse->dtype, (b * H + h) * S + q0 + i, (m[i] + log2f(l[i])) * 0.69314718055994531f);
    }
  }
}

dit_status_t dit_cpu_attention_fp8(dit_cpu_t *c, const dit_tensor_t *q8, const dit_tensor_t *qs, const dit_tensor_t *k8,
                                   const dit_tensor_t *ks, const dit_tensor_t *vt8, const dit_tensor_t *vs, const dit_tensor_t *tiles,
                                   const dit_tensor_t *bound, int heads, double scale, int64_t key_tile, dit_tensor_t *out,
                                   dit_tensor_t *lse) {
  static const char *op = "attention_fp8";
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_any(op, "q8", q8));
  if (q8->rank != 3 || heads < 1 || q8->dims[2] % heads)
    return DIT_ERR(INVALID_ARGUMENT, "%s: q8 has dims %s, expected [B, S, heads*Dh] with heads = %d", op, dit_cpu_dims_str(q8, b1), heads);
  DIT_RETURN_IF(dit_cpu_check_any(op, "k8", k8));
  if (k8->rank != 3) return DIT_ERR(INVALID_ARGUMENT, "%s: k8 has dims %s, expected [B, L, heads*Dh]", op, dit_cpu_dims_str(k8, b1));
  if (!isfinite(scale)) return DIT_ERR(INVALID_ARGUMENT, "%s: scale %g is not finite", op, scale);
  if (key_tile < 32 || key_tile > 256 || key_tile % 32)
    return DIT_ERR(INVALID_ARGUMENT, "%s: key_tile %lld, expected a multiple of 32 in 32..256", op, (long long)key_tile);
  if (tiles && key_tile != DIT_SPARSE_TILE)
    return DIT_ERR(INVALID_ARGUMENT, "%s: key_tile %lld with a tile schedule, expected the schedule's %d", op, (long long)key_tile,
                   DIT_SPARSE_TILE);
  const int64_t B = q8->dims[0], S = q8->dims[1], HD = q8->dims[2], Dh = HD / heads, L = k8->dims[1];
  const int64_t Lp = (L + KTILE - 1) / KTILE * KTILE;
  const int64_t kd[3] = {B, L, HD}, qsd[3] = {B, heads, (S + QROWS - 1) / QROWS}, ksd[3] = {B, heads, (L + key_tile - 1) / key_tile},
                vtd[4] = {B, heads, Dh, Lp}, vsd[4] = {B, heads, 2, Dh}, ld[3] = {B, heads, S};
  DIT_RETURN_IF(check_codes(op, "q8", q8, DIT_I8, 3, q8->dims));
  DIT_RETURN_IF(check_codes(op, "k8", k8, q8->dtype, 3, kd));
  if (k8->dtype != q8->dtype)
    return DIT_ERR(INVALID_ARGUMENT, "%s: k8 is %s, expected q8's dtype %s", op, dit_dtype_name(k8->dtype), dit_dtype_name(q8->dtype));
  if (vs) { /* e4m3 V^T and its scales */
    DIT_RETURN_IF(check_codes(op, "vt8", vt8, DIT_F8E4M3, 4, vtd));
    DIT_RETURN_IF(check_scales(op, "vs", vs, 4, vsd));
  } else { /* v itself */
    DIT_RETURN_IF(dit_cpu_check_float(op, "v", vt8));
    DIT_RETURN_IF(dit_cpu_check_dims(op, "v", vt8, 3, kd));
  }
  DIT_RETURN_IF(check_scales(op, "qs", qs, 3, qsd));
  DIT_RETURN_IF(check_scales(op, "ks", ks, 3, ksd));
  DIT_RETURN_IF(dit_cpu_check_float(op, "out", out));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "out", out, "q8", q8));
  if (lse) {
    DIT_RETURN_IF(dit_cpu_check_float(op, "lse", lse));
    DIT_RETURN_IF(dit_cpu_check_dims(op, "lse", lse, 3, ld));
  }
  if (tiles) DIT_RETURN_IF(dit_cpu_check_tiles(op, tiles, S, L));
  if (bound) {
    if (tiles) return DIT_ERR(INVALID_ARGUMENT, "%s: a key bound with a tile schedule: expected one or the other", op);
    DIT_RETURN_IF(dit_cpu_check_bound(op, bound, B));
  }
  if (L == 0 && B * S > 0) return DIT_ERR(INVALID_ARGUMENT, "%s: k8 has dims %s: no keys to attend to", op, dit_cpu_dims_str(k8, b1));
  const char *in_names[8] = {"q8", "qs", "k8", "ks", vs ? "vt8" : "v", "vs", "tiles", "bound"};
  const dit_tensor_t *ins[8] = {q8, qs, k8, ks, vt8, vs, tiles, bound};
  for (int i = 0; i < 8; i++) {
    DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, in_names[i], ins[i]));
    DIT_RETURN_IF(dit_cpu_check_no_alias(op, "lse", lse, in_names[i], ins[i]));
  }
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "lse", lse, "out", out));
  if (B * S == 0) return DIT_OK;
  fp8_job_t j = {.q8 = q8->data, .k8 = k8->data, .vt8 = vs ? vt8->data : NULL, .v = vt8, .qs = qs->data, .ks = ks->data,
                 .vs = vs ? vs->data : NULL, .out = out,
                 .lse = lse, .tiles = tiles ? tiles->data : NULL, .bound = bound ? bound->data : NULL,
                 .tiles_w = tiles ? tiles->dims[1] : 0, .B = B, .S = S, .L = L,
                 .Lp = Lp, .H = heads, .Dh = Dh, .kt = key_tile, .scale_log2e = (float)(scale * 1.4426950408889634)};
  for (int i = 0; i < 256; i++) {
    j.dec[i] = dit_e4m3_to_f32((uint8_t)i);
    j.qkdec[i] = q8->dtype == DIT_I8 ? (float)(int8_t)(uint8_t)i : j.dec[i];
  }
  DIT_RETURN_IF(dit_cpu_scratch_alloc(op, c, sizeof(float) * (size_t)(2 * KTILE * Dh + 2 * key_tile * Dh + 2 * KTILE + key_tile), &j.scratch));
  dit_pool_parallel_for(dit_cpu_pool(c), B * heads * ((S + KTILE - 1) / KTILE), 1, fp8_task, &j);
  dit_cpu_scratch_free(&j.scratch);
  return DIT_OK;
}
