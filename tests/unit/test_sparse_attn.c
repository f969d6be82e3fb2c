/* Sparse attention: the spec parser's refusals, the tile schedules against the patterns'
 * token-level definitions, and the CPU attention over a schedule against a masked dense
 * reference (fp32, element-wise to 1e-6). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "compiler/sparse_attn.h"
#include "runtime/cpu/cpu_ops.h"

#define TILE DIT_SPARSE_TILE

static void test_parse(void) {
  dit_sparse_attn_t p = {0};
  CHECK_OK(dit_sparse_attn_parse("sta:3,5,7", &p));
  CHECK(p.pattern == DIT_SPARSE_STA && p.window[0] == 3 && p.window[1] == 5 && p.window[2] == 7);
  CHECK_OK(dit_sparse_attn_parse("radial", &p));
  CHECK(p.pattern == DIT_SPARSE_RADIAL);
  CHECK_ERR(dit_sparse_attn_parse("sta:0,1,1", &p), INVALID_ARGUMENT, "--sparse-attn sta:0,1,1: window extent T (frames) = 0, expected 1..1000000");
  CHECK_ERR(dit_sparse_attn_parse("sta:1,x,1", &p), INVALID_ARGUMENT, "window extent H (rows) is not an integer");
  CHECK_ERR(dit_sparse_attn_parse("sta:1,2", &p), INVALID_ARGUMENT, "window extent H (rows) is not an integer");
  CHECK_ERR(dit_sparse_attn_parse("sta:1,2,3,4", &p), INVALID_ARGUMENT, "window extent W (columns) is not an integer");
  CHECK_ERR(dit_sparse_attn_parse("sta:1,2,-3", &p), INVALID_ARGUMENT, "W (columns) = -3");
  CHECK_ERR(dit_sparse_attn_parse("swa", &p), INVALID_ARGUMENT, "--sparse-attn swa: unknown pattern (known: sta:T,H,W, radial)");
  CHECK_ERR(dit_sparse_attn_parse("", &p), INVALID_ARGUMENT, "needs a pattern");
}

/* Token-level definitions, written from the papers independently of the tile code. */
static int64_t win_start(int64_t c, int64_t n, int64_t win) {
  const int64_t wd = win < n ? win : n;
  int64_t s = c - wd / 2;
  if (s < 0) s = 0;
  if (s > n - wd) s = n - wd;
  return s;
}

static int sta_token(const dit_sparse_attn_t *p, const int64_t g[3], int64_t qt, int64_t kt) {
  const int64_t qc[3] = {qt / (g[1] * g[2]), qt / g[2] % g[1], qt % g[2]}, kc[3] = {kt / (g[1] * g[2]), kt / g[2] % g[1], kt % g[2]};
  for (int d = 0; d < 3; d++) {
    const int64_t s = win_start(qc[d], g[d], p->window[d]), wd = p->window[d] < g[d] ? p->window[d] : g[d];
    if (kc[d] < s || kc[d] >= s + wd) return 0;
  }
  return 1;
}

static int64_t bitlen(int64_t x) { return x ? 1 + bitlen(x >> 1) : 0; }

/* Radial Attention's tile mask, literally as its authors' builder makes it for Wan (decay factor
 * 1): per frame pair the token mask (the sink frame 0 whole; else the band |k - l| <= w with the
 * temporal split), padded from the pair's first tile, shrunk block by block (kept when more than
 * 60% of the non-empty columns are more than a third full; ceil(s / 128) blocks a side), OR-ed in. */
static uint8_t *radial_reference(const int64_t g[3]) {
  const int64_t f = g[0], s = g[1] * g[2], n = f * s, nt = (n + TILE - 1) / TILE, span = (s - 1) / TILE + 1;
  uint8_t *m = calloc((size_t)(nt * nt), 1);
  uint8_t *pad = malloc((size_t)((TILE + span * TILE) * (TILE + span * TILE)));
  for (int64_t i = 0; i < f; i++)
    for (int64_t j = 0; j < f; j++) {
      const int64_t ro = (i * s) % TILE, co = (j * s) % TILE, R = ro + span * TILE, C = co + span * TILE;
      memset(pad, 0, (size_t)(R * C));
      const int64_t d = i > j ? i - j : j - i;
      const double decay = pow(2.0, (double)bitlen(s)) / pow(2.0, (double)bitlen(d));
      for (int64_t k = 0; k < s; k++)
        for (int64_t l = 0; l < s; l++) {
          int on = 1;
          if (j != 0) {
            const double w = d == 0 ? (double)s : d == 1 ? (double)(s / 2) : (decay >= TILE ? decay : TILE);
            on = fabs((double)(k - l)) <= w;
            if (decay < TILE && d % (int64_t)(TILE / decay) != 0) on = 0;
          }
          pad[(ro + k) * C + co + l] = (uint8_t)on;
        }
      const int64_t bn = R / TILE; /* the shrink's view: R // 128 blocks both ways */
      for (int64_t br = 0; br < bn; br++)
        for (int64_t bc = 0; bc < bn; bc++) {
          int64_t nonzero = 0, high = 0;
          for (int64_t c = 0; c < TILE; c++) {
            int64_t cnt = 0;
            for (int64_t r = 0; r < TILE; r++) cnt += bc * TILE + c < C && pad[(br * TILE + r) * C + bc * TILE + c];
            nonzero += cnt > 0;
            high += (double)cnt / TILE > 1.0 / 3;
          }
          const int64_t gr = i * s / TILE + br, gc = j * s / TILE + bc;
          if ((double)high / ((double)nonzero + 1e-9) > 0.6 && gr < nt && gc < nt) m[gr * nt + gc] = 1;
        }
    }
  free(pad);
  for (int64_t t = 0; t < nt; t++) m[t * nt + t] = 1; /* every query tile keeps its own (no text columns here) */
  return m;
}

/* The tile mask a schedule lists (nt x nt). */
static uint8_t *listed(const int32_t *rows, int64_t nt, int64_t width) {
  uint8_t *m = calloc((size_t)(nt * nt), 1);
  for (int64_t i = 0; i < nt; i++) {
    const int32_t *r = rows + i * width;
    CHECK(r[0] >= 1 && r[0] <= width - 1);
    for (int32_t e = 0; e < r[0]; e++) {
      CHECK(r[1 + e] >= 0 && r[1 + e] < nt && (e == 0 || r[1 + e] > r[e]));
      m[i * nt + r[1 + e]] = 1;
    }
    for (int64_t e = r[0]; e < width - 1; e++) CHECK(r[1 + e] == -1);
  }
  return m;
}

/* Whether any token pair of tiles (i, j) is in the sliding-tile token mask. */
static uint8_t *token_union(const dit_sparse_attn_t *p, const int64_t g[3]) {
  const int64_t n = g[0] * g[1] * g[2], nt = (n + TILE - 1) / TILE;
  uint8_t *m = calloc((size_t)(nt * nt), 1);
  for (int64_t a = 0; a < n; a++)
    for (int64_t b = 0; b < n; b++)
      if (sta_token(p, g, a, b)) m[a / TILE * nt + b / TILE] = 1;
  return m;
}

static void test_schedules(void) {
  int32_t *rows;
  int64_t nt, width;
  /* A window as large as the grid (or larger) is dense: no schedule. */
  dit_sparse_attn_t dense = {.pattern = DIT_SPARSE_STA, .window = {5, 8, 8}};
  CHECK_OK(dit_sparse_attn_schedule(&dense, 5, 8, 8, &rows, &nt, &width));
  CHECK(rows == NULL);
  dense.window[0] = 100;
  CHECK_OK(dit_sparse_attn_schedule(&dense, 5, 8, 8, &rows, &nt, &width));
  CHECK(rows == NULL);
  /* One frame short of the grid is sparse on 128-token tiles of two frames. */
  dense.window[0] = 1;
  CHECK_OK(dit_sparse_attn_schedule(&dense, 5, 8, 8, &rows, &nt, &width));
  CHECK(rows != NULL && nt == 3);
  if (rows) CHECK(rows[0] == 1 && rows[1] == 0);
  free(rows);

  /* sta: the schedule covers every token pair in a window; when a tile is one whole frame it is
   * exactly the tiles those pairs touch. radial: exactly the authors' builder's tiles on every grid. */
  static const struct {
    int pattern;
    int64_t g[3], win[3];
    int exact;
  } cases[] = {
      {DIT_SPARSE_STA, {6, 8, 16}, {3, 8, 16}, 1}, {DIT_SPARSE_STA, {7, 8, 16}, {1, 2, 2}, 1},
      {DIT_SPARSE_STA, {5, 9, 11}, {3, 3, 5}, 0},  {DIT_SPARSE_STA, {3, 20, 30}, {1, 6, 10}, 0},
      {DIT_SPARSE_STA, {9, 4, 6}, {3, 4, 6}, 0},   {DIT_SPARSE_RADIAL, {12, 8, 8}, {0}, 1},
      {DIT_SPARSE_RADIAL, {9, 4, 4}, {0}, 1},      {DIT_SPARSE_RADIAL, {5, 10, 10}, {0}, 1},
      {DIT_SPARSE_RADIAL, {33, 3, 5}, {0}, 1},     {DIT_SPARSE_RADIAL, {6, 16, 16}, {0}, 1},
      /* Radial is sparse at tile granularity once a frame spans many tiles. */
      {DIT_SPARSE_RADIAL, {8, 16, 24}, {0}, 1},    {DIT_SPARSE_RADIAL, {5, 32, 32}, {0}, 1},
  };
  int sparse_seen = 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    dit_sparse_attn_t p = {.pattern = cases[c].pattern, .window = {cases[c].win[0], cases[c].win[1], cases[c].win[2]}};
    const int64_t *g = cases[c].g, n = g[0] * g[1] * g[2], ntt = (n + TILE - 1) / TILE;
    CHECK_OK(dit_sparse_attn_schedule(&p, g[0], g[1], g[2], &rows, &nt, &width));
    uint8_t *want = p.pattern == DIT_SPARSE_STA ? token_union(&p, g) : radial_reference(g);
    uint8_t *got = rows ? listed(rows, nt, width) : NULL;
    int64_t bad = 0, extra = 0, n_listed = 0;
    for (int64_t e = 0; e < ntt * ntt; e++) {
      const int have = got ? got[e] : 1;
      n_listed += have;
      bad += want[e] && !have;
      extra += have && !want[e];
    }
    CHECK_EQ_INT(bad, 0);
    if (cases[c].exact) CHECK_EQ_INT(extra, 0);
    if (rows) CHECK_EQ_INT(nt, ntt);
    sparse_seen += n_listed < ntt * ntt;
    free(want);
    free(got);
    free(rows);
  }
  CHECK(sparse_seen >= 6);
}

/* softmax(q k^T scale) v with the scores of unlisted tiles -inf, in double. */
static void masked_reference(const float *q, const float *k, const float *v, const uint8_t *mask, int64_t S, int64_t H, int64_t Dh,
                             double scale, float *out) {
  const int64_t nt = (S + TILE - 1) / TILE, C = H * Dh;
  double *sc = malloc(sizeof *sc * (size_t)S);
  for (int64_t h = 0; h < H; h++)
    for (int64_t i = 0; i < S; i++) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < S; j++) {
        if (!mask[i / TILE * nt + j / TILE]) {
          sc[j] = -INFINITY;
          continue;
        }
        double d = 0;
        for (int64_t e = 0; e < Dh; e++) d += (double)q[i * C + h * Dh + e] * k[j * C + h * Dh + e];
        sc[j] = d * scale;
        if (sc[j] > mx) mx = sc[j];
      }
      for (int64_t j = 0; j < S; j++) sum += sc[j] == -INFINITY ? 0 : exp(sc[j] - mx);
      for (int64_t e = 0; e < Dh; e++) {
        double acc = 0;
        for (int64_t j = 0; j < S; j++)
          if (sc[j] != -INFINITY) acc += exp(sc[j] - mx) * v[j * C + h * Dh + e];
        out[i * C + h * Dh + e] = (float)(acc / sum);
      }
    }
  free(sc);
}

static void test_cpu_attention(dit_cpu_t *cpu) {
  static const struct {
    int pattern;
    int64_t g[3], win[3];
  } cases[] = {
      {DIT_SPARSE_STA, {5, 8, 8}, {1, 8, 8}},
      {DIT_SPARSE_STA, {4, 10, 13}, {1, 4, 6}},
      {DIT_SPARSE_RADIAL, {8, 16, 24}, {0}},
  };
  const int64_t H = 2, Dh = 16, C = H * Dh;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    dit_sparse_attn_t p = {.pattern = cases[c].pattern, .window = {cases[c].win[0], cases[c].win[1], cases[c].win[2]}};
    const int64_t *g = cases[c].g, S = g[0] * g[1] * g[2];
    int32_t *rows;
    int64_t nt, width;
    CHECK_OK(dit_sparse_attn_schedule(&p, g[0], g[1], g[2], &rows, &nt, &width));
    CHECK(rows != NULL);
    if (!rows) continue;
    uint8_t *mask = listed(rows, nt, width);
    float *q = malloc(sizeof(float) * (size_t)(S * C)), *k = malloc(sizeof(float) * (size_t)(S * C)),
          *v = malloc(sizeof(float) * (size_t)(S * C)), *o = malloc(sizeof(float) * (size_t)(S * C)),
          *ref = malloc(sizeof(float) * (size_t)(S * C)), *dense = malloc(sizeof(float) * (size_t)(S * C));
    uint32_t st = 12345u + (uint32_t)c;
    for (int64_t e = 0; e < S * C; e++) {
      st = st * 1664525u + 1013904223u;
      q[e] = (float)((st >> 8) / 16777216.0 * 4 - 2);
      st = st * 1664525u + 1013904223u;
      k[e] = (float)((st >> 8) / 16777216.0 * 4 - 2);
      st = st * 1664525u + 1013904223u;
      v[e] = (float)((st >> 8) / 16777216.0 * 2 - 1);
    }
    const double scale = 0.25;
    dit_tensor_t tq = {q, DIT_F32, 3, {1, S, C}}, tk = {k, DIT_F32, 3, {1, S, C}}, tv = {v, DIT_F32, 3, {1, S, C}};
    dit_tensor_t to = {o, DIT_F32, 3, {1, S, C}}, td = {dense, DIT_F32, 3, {1, S, C}}, tt = {rows, DIT_I32, 2, {nt, width}};
    CHECK_OK(dit_cpu_attention_tiled(cpu, &tq, &tk, &tv, &tt, (int)H, scale, &to, NULL));
    masked_reference(q, k, v, mask, S, H, Dh, scale, ref);
    double worst = 0, moved = 0;
    CHECK_OK(dit_cpu_attention(cpu, &tq, &tk, &tv, (int)H, scale, &td, NULL));
    for (int64_t e = 0; e < S * C; e++) {
      const double err = fabs((double)o[e] - ref[e]);
      if (err > worst) worst = err;
      moved += fabs((double)o[e] - dense[e]);
    }
    CHECK(worst <= 1e-6);
    CHECK(moved > 1e-3); /* the mask matters: not the dense result */
    if (worst > 1e-6) fprintf(stderr, "case %zu: max error %g\n", c, worst);

    /* A schedule listing every tile is the dense attention, bit for bit. */
    int32_t *full = malloc(sizeof(int32_t) * (size_t)(nt * (nt + 1)));
    for (int64_t i = 0; i < nt; i++) {
      full[i * (nt + 1)] = (int32_t)nt;
      for (int64_t j = 0; j < nt; j++) full[i * (nt + 1) + 1 + j] = (int32_t)j;
    }
    dit_tensor_t tf = {full, DIT_I32, 2, {nt, nt + 1}};
    CHECK_OK(dit_cpu_attention_tiled(cpu, &tq, &tk, &tv, &tf, (int)H, scale, &to, NULL));
    CHECK(memcmp(o, dense, sizeof(float) * (size_t)(S * C)) == 0);

    /* Malformed schedules are refused, naming the row. */
    full[0] = 0;
    CHECK_ERR(dit_cpu_attention_tiled(cpu, &tq, &tk, &tv, &tf, (int)H, scale, &to, NULL), INVALID_ARGUMENT,
              "attention: tile schedule row 0 lists 0 key tiles");
    full[0] = 2, full[1] = 1, full[2] = 0;
    CHECK_ERR(dit_cpu_attention_tiled(cpu, &tq, &tk, &tv, &tf, (int)H, scale, &to, NULL), INVALID_ARGUMENT,
              "attention: tile schedule row 0 entry 1 is key tile 0, expected ascending");
    dit_tensor_t tshort = {full, DIT_I32, 2, {nt - 1, nt + 1}};
    CHECK_ERR(dit_cpu_attention_tiled(cpu, &tq, &tk, &tv, &tshort, (int)H, scale, &to, NULL), INVALID_ARGUMENT, "attention: tile schedule is i32");
    free(full);
    free(q), free(k), free(v), free(o), free(ref), free(dense), free(mask), free(rows);
  }
}

int main(void) {
  test_parse();
  test_schedules();
  dit_pool_t *pool = NULL;
  CHECK_OK(dit_pool_create(3, &pool));
  dit_cpu_t cpu = {pool};
  test_cpu_attention(&cpu);
  dit_pool_destroy(pool);
  return check_summary("test_sparse_attn");
}
