/* CPU attention: softmax(q k^T * scale) v per (batch, head), flash-style. Keys stream in
 * blocks with an online softmax (running max and sum), so memory is O(block) whatever the
 * sequence lengths; both products run on the GEMM micro-kernel. Parallel over (b, h, a few
 * query blocks). A key bound stops a batch item's stream at its bound: the keys past it are
 * never read, so the result is the unbounded attention over the first bound keys, bit for bit.
 * A tile schedule makes each task one query tile that streams only its listed key tiles (the
 * key block is the schedule's tile), in the dense order: a schedule listing every tile gives
 * the dense result bit for bit. A score bias [S, L, H] is added to each block's scaled scores
 * before the softmax. A frame-causal attention (causal block n: query i attends key j iff
 * j / n <= i / n) stops each task's stream after the last key any of its queries sees and gives
 * the keys past a query's limit -inf scores inside the blocks that straddle it; the first key
 * block always holds key 0, which every query sees, so each row's running max is finite from the
 * first block on. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/ops.h"
#include "runtime/cpu/cpu_internal.h"

/* A query block is a whole number of register tiles; a key block is sized so S and P for one
 * block stay in L1/L2 next to the packed K and V. A task takes up to DIT_ATTN_QC query blocks
 * so each packed K/V block serves several of them. */
#define DIT_ATTN_BQ (8 * DIT_GEMM_MR)
#define DIT_ATTN_BK 128
#define DIT_ATTN_QC 4
_Static_assert(DIT_ATTN_BK == DIT_SPARSE_TILE, "a key block is one tile of a sparse schedule");

typedef int32_t dit_v4i_t __attribute__((vector_size(16)));
typedef double dit_v2d_t __attribute__((vector_size(16)));

typedef struct attn_job {
  const dit_tensor_t *q, *k, *v, *out, *lse;
  const int32_t *bound; /* [B], or NULL: all keys */
  const float *bias;    /* [S, L, H] added to the scaled scores, or NULL */
  const int32_t *tiles; /* [ceil(S / DIT_SPARSE_TILE), tiles_w] schedule, or NULL: all key blocks */
  int64_t tiles_w;
  int64_t causal; /* causal block n (query i sees keys j with j / n <= i / n), or 0: none */
  int64_t B, S, L, H, Dh, ldo;
  int64_t qc;      /* query blocks per task */
  int64_t n_chunk; /* tasks per (b, h) */
  float scale;
  dit_cpu_scratch_t scratch;
  size_t off_q, off_k, off_v, off_s, off_p, off_o, off_m, off_l, off_row;
} attn_job_t;

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

static inline dit_v4_t v4_splat(float x) { return (dit_v4_t){x, x, x, x}; }

static inline dit_v4_t v4_select(dit_v4i_t mask, dit_v4_t a, dit_v4_t b) {
  return (dit_v4_t)(((dit_v4i_t)a & mask) | ((dit_v4i_t)b & ~mask));
}

/* exp for four floats, written so GCC keeps it in SSE registers (no libm call per score):
 * x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so n ln2 is exact), e^r from a degree-6
 * polynomial, 2^n put into the exponent bits. Relative error about 1e-7 (an ulp or two);
 * below -87.3 the result is 0, above 88 it saturates at e^88 (softmax only feeds x <= 0),
 * NaN stays NaN. */
static inline dit_v4_t v4_exp(dit_v4_t x) {
  const dit_v4_t hi = v4_splat(88.0f), lo = v4_splat(-87.3365447505531f);
  const dit_v4i_t under = x < lo;
  x = v4_select(x > hi, hi, x);
  x = v4_select(under, lo, x);
  /* Round x*log2(e) to nearest: adding 1.5*2^23 pushes the fraction out of the mantissa. */
  const dit_v4_t magic = v4_splat(12582912.0f);
  const dit_v4_t fn = (x * v4_splat(1.44269504088896341f) + magic) - magic;
  const dit_v4_t r = (x - fn * v4_splat(0.693359375f)) - fn * v4_splat(-2.12194440e-4f);
  dit_v4_t p = v4_splat(1.9875691500e-4f);
  p = p * r + v4_splat(1.3981999507e-3f);
  p = p * r + v4_splat(8.3334519073e-3f);
  p = p * r + v4_splat(4.1665795894e-2f);
  p = p * r + v4_splat(1.6666665459e-1f);
  p = p * r + v4_splat(5.0000001201e-1f);
  p = p * (r * r) + r + v4_splat(1.0f);
  const dit_v4i_t n = __builtin_convertvector(fn, dit_v4i_t);
  const dit_v4_t scale = (dit_v4_t)((n + 127) << 23);
  return v4_select(under, v4_splat(0.0f), p * scale);
}

static inline dit_v4_t v4_load(const float *p) {
  dit_v4_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* One query block's online-softmax step over one key block: S = Q K^T (scaled), running max
 * and sum per row, P packed for the P V product, O rescaled then accumulated. */
static void attn_step(attn_job_t *j, const dit_v4_t *qpack, const float *kpack,
                      const float *vpack, float *stile, dit_v4_t *ppack, float *otile, float *m,
                      double *l, int64_t nq, int64_t nk, const float *bias, int64_t qi0, int64_t k0) {
  const int64_t Dh = j->Dh, ldo = j->ldo, lds = round_up(nk, DIT_GEMM_NR);
  const int64_t n_qpanels = (nq + DIT_GEMM_MR - 1) / DIT_GEMM_MR;

  for (int64_t ip = 0; ip < n_qpanels; ip++)
    for (int64_t jr = 0; jr < lds; jr += DIT_GEMM_NR)
      dit_gemm_micro(Dh, qpack + ip * Dh * DIT_GEMM_MR, kpack + jr * Dh,
                     stile + ip * DIT_GEMM_MR * lds + jr, lds, 0);

  const dit_v4_t vscale = v4_splat(j->scale);
  for (int64_t i = 0; i < n_qpanels * DIT_GEMM_MR; i++) {
    dit_v4_t *pd = ppack + (i / DIT_GEMM_MR) * lds * DIT_GEMM_MR + i % DIT_GEMM_MR;
    if (i >= nq) {
      /* Padding rows of the last tile: keep them finite; their outputs are dropped. */
      for (int64_t key = 0; key < nk; key++) pd[key * DIT_GEMM_MR] = v4_splat(0.0f);
      continue;
    }
    float *sr = stile + i * lds;
    dit_v4_t vmax = v4_splat(-INFINITY);
    for (int64_t key = 0; key < lds; key += 4) {
      dit_v4_t x = v4_load(sr + key) * vscale;
      memcpy(sr + key, &x, sizeof x);
    }
    /* The score bias of this row's keys (bias points at the block's first query and key). */
    if (bias)
      for (int64_t key = 0; key < nk; key++) sr[key] += bias[(i * j->L + key) * j->H];
    /* Padded keys, and keys past this query's causal limit, must weigh nothing whatever the sign of scale. */
    int64_t valid = nk;
    if (j->causal) {
      const int64_t limit = ((qi0 + i) / j->causal + 1) * j->causal - k0;
      valid = limit < 0 ? 0 : limit < nk ? limit : nk;
    }
    for (int64_t key = valid; key < lds; key++) sr[key] = -INFINITY;
    for (int64_t key = 0; key < lds; key += 4) {
      const dit_v4_t x = v4_load(sr + key);
      vmax = v4_select(x > vmax, x, vmax);
    }
    float mx = m[i];
    for (int e = 0; e < 4; e++) mx = vmax[e] > mx ? vmax[e] : mx;
    /* exp(-inf) = 0 covers the first block; later blocks rescale what came before. */
    const float alpha = v4_exp(v4_splat(m[i] - mx))[0];
    const dit_v4_t vmx = v4_splat(mx);
    dit_v2d_t s0 = {0, 0}, s1 = {0, 0};
    for (int64_t key = 0; key < lds; key += 4) {
      const dit_v4_t p = v4_exp(v4_load(sr + key) - vmx);
      s0 += (dit_v2d_t){p[0], p[1]};
      s1 += (dit_v2d_t){p[2], p[3]};
      pd[(key + 0) * DIT_GEMM_MR] = v4_splat(p[0]);
      pd[(key + 1) * DIT_GEMM_MR] = v4_splat(p[1]);
      pd[(key + 2) * DIT_GEMM_MR] = v4_splat(p[2]);
      pd[(key + 3) * DIT_GEMM_MR] = v4_splat(p[3]);
    }
    l[i] = l[i] * alpha + ((s0[0] + s1[0]) + (s0[1] + s1[1]));
    m[i] = mx;
    if (alpha != 1.0f) {
      float *orow = otile + i * ldo;
      for (int64_t d = 0; d < Dh; d++) orow[d] *= alpha;
    }
  }

  for (int64_t ip = 0; ip < n_qpanels; ip++)
    for (int64_t dp = 0; dp < ldo; dp += DIT_GEMM_NR)
      dit_gemm_micro(nk, ppack + ip * lds * DIT_GEMM_MR, vpack + dp * nk,
                     otile + ip * DIT_GEMM_MR * ldo + dp, ldo, 1);
}

/* Queries [q0, q0 + nq) of head h in batch b (nq <= qc query blocks) against all keys. */
static void attn_chunk(attn_job_t *j, int64_t b, int64_t h, int64_t q0, int64_t nq, int worker) {
  unsigned char *s = dit_cpu_scratch_get(&j->scratch, worker);
  dit_v4_t *qpack = (dit_v4_t *)(s + j->off_q);
  float *kpack = (float *)(s + j->off_k);
  float *vpack = (float *)(s + j->off_v);
  float *stile = (float *)(s + j->off_s);
  dit_v4_t *ppack = (dit_v4_t *)(s + j->off_p);
  float *otile = (float *)(s + j->off_o);
  float *m = (float *)(s + j->off_m);
  double *l = (double *)(s + j->off_l);
  float *row = (float *)(s + j->off_row);
  const int64_t Dh = j->Dh, H = j->H, ldo = j->ldo, HD = H * Dh;
  const int64_t n_qpanels = (nq + DIT_GEMM_MR - 1) / DIT_GEMM_MR;
  const dit_tensor_t *q = j->q, *k = j->k, *v = j->v;

  for (int64_t ip = 0; ip < n_qpanels; ip++) {
    dit_v4_t *dst = qpack + ip * Dh * DIT_GEMM_MR;
    for (int ii = 0; ii < DIT_GEMM_MR; ii++) {
      const int64_t i = ip * DIT_GEMM_MR + ii;
      if (i < nq) {
        const float *qr = dit_cpu_row_load(q->data, q->dtype, ((b * j->S + q0 + i) * H + h) * Dh, Dh, row);
        for (int64_t d = 0; d < Dh; d++) dst[d * DIT_GEMM_MR + ii] = v4_splat(qr[d]);
      } else {
        for (int64_t d = 0; d < Dh; d++) dst[d * DIT_GEMM_MR + ii] = v4_splat(0.0f);
      }
    }
  }
  for (int64_t i = 0; i < nq; i++) {
    m[i] = -INFINITY;
    l[i] = 0.0;
  }
  memset(otile, 0, sizeof(float) * (size_t)(n_qpanels * DIT_GEMM_MR * ldo));

  int64_t L = j->L;
  if (j->bound) L = j->bound[b] <= 0 ? 0 : j->bound[b] < L ? j->bound[b] : L;
  /* Key blocks wholly past the chunk's last query's limit are never read. */
  const int64_t Ls = j->causal && ((q0 + nq - 1) / j->causal + 1) * j->causal < L ? ((q0 + nq - 1) / j->causal + 1) * j->causal : L;
  /* A task of a tiled attention is one query tile (q0 a multiple of the tile). */
  const int32_t *sched = j->tiles ? j->tiles + q0 / DIT_SPARSE_TILE * j->tiles_w : NULL;
  const int64_t n_blocks = sched ? sched[0] : (Ls + DIT_ATTN_BK - 1) / DIT_ATTN_BK;
  for (int64_t blk = 0; blk < n_blocks; blk++) {
    const int64_t k0 = (sched ? sched[1 + blk] : blk) * DIT_ATTN_BK;
    const int64_t nk = L - k0 < DIT_ATTN_BK ? L - k0 : DIT_ATTN_BK;
    const int64_t lds = round_up(nk, DIT_GEMM_NR);

    /* K block as B panels (one per NR keys, d running down the panel); V block as B panels
     * over head dims (one per NR dims, keys running down). */
    for (int64_t jr = 0; jr < lds; jr += DIT_GEMM_NR) {
      float *kd = kpack + jr * Dh;
      for (int jj = 0; jj < DIT_GEMM_NR; jj++) {
        if (jr + jj < nk) {
          const float *kr = dit_cpu_row_load(k->data, k->dtype, (b * j->L + k0 + jr + jj) * HD + h * Dh, Dh, row);
          for (int64_t d = 0; d < Dh; d++) kd[d * DIT_GEMM_NR + jj] = kr[d];
        } else {
          for (int64_t d = 0; d < Dh; d++) kd[d * DIT_GEMM_NR + jj] = 0.0f;
        }
      }
    }
    for (int64_t key = 0; key < nk; key++) {
      const float *vr = dit_cpu_row_load(v->data, v->dtype, (b * j->L + k0 + key) * HD + h * Dh, Dh, row);
      for (int64_t dp = 0; dp < ldo; dp += DIT_GEMM_NR) {
        float *vd = vpack + dp * nk + key * DIT_GEMM_NR;
        for (int jj = 0; jj < DIT_GEMM_NR; jj++) vd[jj] = dp + jj < Dh ? vr[dp + jj] : 0.0f;
      }
    }

    for (int64_t qb = 0; qb * DIT_ATTN_BQ < nq; qb++) {
      const int64_t r0 = qb * DIT_ATTN_BQ;
      const int64_t nqb = nq - r0 < DIT_ATTN_BQ ? nq - r0 : DIT_ATTN_BQ;
      const float *bias = j->bias ? j->bias + ((q0 + r0) * j->L + k0) * H + h : NULL;
      attn_step(j, qpack + r0 * Dh, kpack, vpack, stile, ppack, otile + r0 * ldo, m + r0, l + r0,
                nqb, nk, bias, q0 + r0, k0);
    }
  }

  for (int64_t i = 0; i < nq; i++) {
    float *orow = otile + i * ldo;
    /* No keys (a bound of 0): a zero output, and lse = -inf (m) + log(0). */
    const double inv = L ? 1.0 / l[i] : 0.0;
    for (int64_t d = 0; d < Dh; d++) orow[d] = (float)(orow[d] * inv);
    dit_cpu_row_store(j->out->data, j->out->dtype, ((b * j->S + q0 + i) * H + h) * Dh, orow, Dh);
    if (j->lse)
      dit_cpu_store1(j->lse->data, j->lse->dtype, (b * H + h) * j->S + q0 + i,
                     (float)((double)m[i] + log(l[i])));
  }
}

static void attn_task(void *ctx, int64_t begin, int64_t end, int worker) {
  attn_job_t *j = ctx;
  const int64_t span = j->tiles ? DIT_SPARSE_TILE : j->qc * DIT_ATTN_BQ;
  for (int64_t t = begin; t < end; t++) {
    const int64_t ch = t % j->n_chunk, bh = t / j->n_chunk;
    const int64_t q0 = ch * span, nq = j->S - q0 < span ? j->S - q0 : span;
    attn_chunk(j, bh / j->H, bh % j->H, q0, nq, worker);
  }
}

dit_status_t dit_cpu_attention(dit_cpu_t *c, const dit_tensor_t *q, const dit_tensor_t *k,
                               const dit_tensor_t *v, int heads, double scale, dit_tensor_t *out,
                               dit_tensor_t *lse) {
  return dit_cpu_attention_bounded(c, q, k, v, NULL, heads, scale, out, lse);
}

dit_status_t dit_cpu_check_bound(const char *op, const dit_tensor_t *bound, int64_t B) {
  DIT_RETURN_IF(dit_cpu_check_any(op, "bound", bound));
  if (bound->dtype != DIT_I32) return DIT_ERR(INVALID_ARGUMENT, "%s: bound has dtype %s, expected i32", op, dit_dtype_name(bound->dtype));
  const int64_t bd[1] = {B};
  return dit_cpu_check_dims(op, "bound", bound, 1, bd);
}

dit_status_t dit_cpu_check_tiles(const char *op, const dit_tensor_t *tiles, int64_t S, int64_t L) {
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_any(op, "tiles", tiles));
  const int64_t nq = (S + DIT_SPARSE_TILE - 1) / DIT_SPARSE_TILE, nk = (L + DIT_SPARSE_TILE - 1) / DIT_SPARSE_TILE;
  if (tiles->dtype != DIT_I32 || tiles->rank != 2 || tiles->dims[0] != nq || tiles->dims[1] < 2)
    return DIT_ERR(INVALID_ARGUMENT, "%s: tile schedule is %s %s, expected i32 [%lld, >= 2] (one row per query tile of %d tokens)", op,
                   dit_dtype_name(tiles->dtype), dit_cpu_dims_str(tiles, b1), (long long)nq, DIT_SPARSE_TILE);
  const int32_t *t = tiles->data;
  const int64_t w = tiles->dims[1];
  for (int64_t i = 0; i < nq; i++) {
    const int32_t *row = t + i * w;
    if (row[0] < 1 || row[0] > w - 1 || row[0] > nk)
      return DIT_ERR(INVALID_ARGUMENT, "%s: tile schedule row %lld lists %d key tiles, expected 1..%lld", op, (long long)i, row[0],
                     (long long)(w - 1 < nk ? w - 1 : nk));
    for (int32_t e = 0; e < row[0]; e++)
      if (row[1 + e] < 0 || row[1 + e] >= nk || (e && row[1 + e] <= row[e]))
        return DIT_ERR(INVALID_ARGUMENT, "%s: tile schedule row %lld entry %d is key tile %d, expected ascending tiles in 0..%lld", op,
                       (long long)i, e, row[1 + e], (long long)nk - 1);
  }
  return DIT_OK;
}

static dit_status_t attention(dit_cpu_t *c, const dit_tensor_t *q, const dit_tensor_t *k, const dit_tensor_t *v,
                              const dit_tensor_t *bound, const dit_tensor_t *tiles, const dit_tensor_t *bias, int64_t causal,
                              int heads, double scale, dit_tensor_t *out, dit_tensor_t *lse) {
  static const char *op = "attention";
  char b1[DIT_CPU_DIMS_BUF];
  DIT_RETURN_IF(dit_cpu_check_float(op, "q", q));
  DIT_RETURN_IF(dit_cpu_check_float(op, "k", k));
  DIT_RETURN_IF(dit_cpu_check_float(op, "v", v));
  DIT_RETURN_IF(dit_cpu_check_float(op, "out", out));
  if (lse) DIT_RETURN_IF(dit_cpu_check_float(op, "lse", lse));
  if (q->rank != 3)
    return DIT_ERR(INVALID_ARGUMENT, "%s: q has dims %s, expected [B, S, heads*Dh]", op,
                   dit_cpu_dims_str(q, b1));
  if (heads < 1 || q->dims[2] % heads != 0)
    return DIT_ERR(INVALID_ARGUMENT, "%s: q's last dim %lld is not a positive multiple of heads = %d",
                   op, (long long)q->dims[2], heads);
  if (!isfinite(scale))
    return DIT_ERR(INVALID_ARGUMENT, "%s: scale %g is not finite", op, scale);
  const int64_t B = q->dims[0], S = q->dims[1], HD = q->dims[2];
  const int64_t kd[3] = {B, -1, HD};
  DIT_RETURN_IF(dit_cpu_check_dims(op, "k", k, 3, kd));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "v", v, "k", k));
  DIT_RETURN_IF(dit_cpu_check_same_dims(op, "out", out, "q", q));
  const int64_t L = k->dims[1];
  if (lse) {
    const int64_t ld[3] = {B, heads, S};
    DIT_RETURN_IF(dit_cpu_check_dims(op, "lse", lse, 3, ld));
  }
  if (bound) DIT_RETURN_IF(dit_cpu_check_bound(op, bound, B));
  if (tiles) DIT_RETURN_IF(dit_cpu_check_tiles(op, tiles, S, L));
  if (causal < 0 || (causal && (tiles || S != L)))
    return DIT_ERR(INVALID_ARGUMENT, "%s: causal_block = %lld with %s: expected a positive block over self-attention (S = L) without a "
                   "tile schedule", op, (long long)causal, tiles ? "a tile schedule" : causal < 0 ? "a negative block" : "S != L");
  if (bias) {
    const int64_t bd[3] = {S, L, heads};
    DIT_RETURN_IF(dit_cpu_check_any(op, "bias", bias));
    if (bias->dtype != DIT_F32)
      return DIT_ERR(INVALID_ARGUMENT, "%s: bias has dtype %s, expected f32", op, dit_dtype_name(bias->dtype));
    DIT_RETURN_IF(dit_cpu_check_dims(op, "bias", bias, 3, bd));
    DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, "bias", bias));
    DIT_RETURN_IF(dit_cpu_check_no_alias(op, "lse", lse, "bias", bias));
  }
  if (L == 0 && B * S > 0)
    return DIT_ERR(INVALID_ARGUMENT, "%s: k has dims %s: no keys to attend to", op,
                   dit_cpu_dims_str(k, b1));
  static const char *in_names[3] = {"q", "k", "v"};
  const dit_tensor_t *ins[3] = {q, k, v};
  for (int i = 0; i < 3; i++) {
    DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, in_names[i], ins[i]));
    DIT_RETURN_IF(dit_cpu_check_no_alias(op, "lse", lse, in_names[i], ins[i]));
  }
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, "bound", bound));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "lse", lse, "bound", bound));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "lse", lse, "out", out));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "out", out, "tiles", tiles));
  DIT_RETURN_IF(dit_cpu_check_no_alias(op, "lse", lse, "tiles", tiles));
  if (B == 0 || S == 0) return DIT_OK;

  attn_job_t j = {.q = q, .k = k, .v = v, .out = out, .lse = lse, .bound = bound ? bound->data : NULL,
                  .bias = bias ? bias->data : NULL,
                  .tiles = tiles ? tiles->data : NULL, .tiles_w = tiles ? tiles->dims[1] : 0, .B = B, .S = S, .L = L,
                  .causal = causal, .H = heads, .Dh = HD / heads, .scale = (float)scale};
  j.ldo = round_up(j.Dh, DIT_GEMM_NR);
  /* Several query blocks per task amortize K/V packing, unless that starves the pool. */
  const int64_t n_qb = (S + DIT_ATTN_BQ - 1) / DIT_ATTN_BQ;
  const int64_t threads = dit_pool_threads(dit_cpu_pool(c));
  j.qc = B * heads * n_qb / (2 * threads);
  j.qc = j.qc < 1 ? 1 : j.qc > DIT_ATTN_QC ? DIT_ATTN_QC : j.qc;
  j.n_chunk = (n_qb + j.qc - 1) / j.qc;
  if (tiles) {
    /* One query tile a task: enough query blocks to hold it. */
    j.qc = (DIT_SPARSE_TILE + DIT_ATTN_BQ - 1) / DIT_ATTN_BQ;
    j.n_chunk = (S + DIT_SPARSE_TILE - 1) / DIT_SPARSE_TILE;
  }
  const size_t bq = DIT_ATTN_BQ, bk = DIT_ATTN_BK, dh = (size_t)j.Dh, ldo = (size_t)j.ldo;
  const size_t qrows = bq * (size_t)j.qc;
  const size_t sizes[9] = {
      qrows * dh * sizeof(dit_v4_t), /* packed Q, pre-broadcast */
      bk * dh * sizeof(float),       /* packed K block */
      bk * ldo * sizeof(float),      /* packed V block */
      bq * bk * sizeof(float),       /* scores */
      bq * bk * sizeof(dit_v4_t),    /* probabilities, packed pre-broadcast */
      qrows * ldo * sizeof(float),   /* output accumulator */
      qrows * sizeof(float),         /* running max */
      qrows * sizeof(double),        /* running sum */
      (dh ? dh : 1) * sizeof(float), /* one converted row */
  };
  size_t *offs[9] = {&j.off_q, &j.off_k, &j.off_v, &j.off_s, &j.off_p,
                     &j.off_o, &j.off_m, &j.off_l, &j.off_row};
  size_t total = 0;
  for (int i = 0; i < 9; i++) {
    *offs[i] = total;
    total = (total + sizes[i] + 63) & ~(size_t)63;
  }
  DIT_RETURN_IF(dit_cpu_scratch_alloc(op, c, total, &j.scratch));
  dit_pool_parallel_for(dit_cpu_pool(c), B * heads * j.n_chunk, 1, attn_task, &j);
  dit_cpu_scratch_free(&j.scratch);
  return DIT_OK;
}

dit_status_t dit_cpu_attention_bounded(dit_cpu_t *c, const dit_tensor_t *q, const dit_tensor_t *k,
                                       const dit_tensor_t *v, const dit_tensor_t *bound, int heads, double scale,
                                       dit_tensor_t *out, dit_tensor_t *lse) {
  return attention(c, q, k, v, bound, NULL, NULL, 0, heads, scale, out, lse);
}

dit_status_t dit_cpu_attention_causal(dit_cpu_t *c, const dit_tensor_t *q, const dit_tensor_t *k, const dit_tensor_t *v,
                                      const dit_tensor_t *bound, int64_t causal_block, int heads, double scale, dit_tensor_t *out,
                                      dit_tensor_t *lse) {
  return attention(c, q, k, v, bound, NULL, NULL, causal_block, heads, scale, out, lse);
}

dit_status_t dit_cpu_attention_biased(dit_cpu_t *c, const dit_tensor_t *q, const dit_tensor_t *k,
                                      const dit_tensor_t *v, const dit_tensor_t *bound, const dit_tensor_t *bias, int heads,
                                      double scale, dit_tensor_t *out, dit_tensor_t *lse) {
  return attention(c, q, k, v, bound, NULL, bias, 0, heads, scale, out, lse);
}

dit_status_t dit_cpu_attention_tiled(dit_cpu_t *c, const dit_tensor_t *q, const dit_tensor_t *k,
                                     const dit_tensor_t *v, const dit_tensor_t *tiles, int heads, double scale,
                                     dit_tensor_t *out, dit_tensor_t *lse) {
  return attention(c, q, k, v, NULL, tiles, NULL, 0, heads, scale, out, lse);
}
