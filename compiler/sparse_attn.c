/* Sparse attention patterns compiled into tile schedules (see sparse_attn.h). A tile is
 * DIT_SPARSE_TILE consecutive tokens of the frame-major grid, so it may span part of a row,
 * several rows or several frames; both patterns are decided per (query tile, key tile). */
#include "compiler/sparse_attn.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const char *dit_sparse_attn_name(int pattern) {
  return pattern == DIT_SPARSE_STA ? "sta" : pattern == DIT_SPARSE_RADIAL ? "radial" : "none";
}

dit_status_t dit_sparse_attn_parse(const char *spec, dit_sparse_attn_t *out) {
  static const char *const dims[3] = {"T (frames)", "H (rows)", "W (columns)"};
  if (!spec || !spec[0]) return DIT_ERR(INVALID_ARGUMENT, "--sparse-attn needs a pattern: sta:T,H,W or radial");
  if (!strcmp(spec, "radial")) {
    out->pattern = DIT_SPARSE_RADIAL;
    memset(out->window, 0, sizeof out->window);
    return DIT_OK;
  }
  if (strncmp(spec, "sta:", 4))
    return DIT_ERR(INVALID_ARGUMENT, "--sparse-attn %s: unknown pattern (known: sta:T,H,W, radial)", spec);
  const char *p = spec + 4;
  for (int d = 0; d < 3; d++) {
    char *end;
    errno = 0;
    const long long v = strtoll(p, &end, 10);
    if (end == p || (*end != (d < 2 ? ',' : '\0')) || errno)
      return DIT_ERR(INVALID_ARGUMENT, "--sparse-attn %s: window extent %s is not an integer (expected sta:T,H,W, three positive token counts)",
                     spec, dims[d]);
    if (v < 1 || v > 1000000)
      return DIT_ERR(INVALID_ARGUMENT, "--sparse-attn %s: window extent %s = %lld, expected 1..1000000 tokens", spec, dims[d], v);
    out->window[d] = v;
    p = end + (d < 2);
  }
  out->pattern = DIT_SPARSE_STA;
  return DIT_OK;
}

typedef struct box {
  int64_t lo[3], hi[3]; /* frame, row, column; inclusive */
} box_t;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The tokens of tile i in frame fr: flat in-frame indices [*s0, *s1]. */
static void frame_segment(int64_t i, int64_t n, int64_t hw, int64_t fr, int64_t *s0, int64_t *s1) {
  const int64_t t0 = i * DIT_SPARSE_TILE, t1 = min64(n, t0 + DIT_SPARSE_TILE) - 1;
  *s0 = fr == t0 / hw ? t0 % hw : 0;
  *s1 = fr == t1 / hw ? t1 % hw : hw - 1;
}

/* The bounding box of tile i's tokens. */
static void tile_box(int64_t i, int64_t n, int64_t h, int64_t w, box_t *b) {
  const int64_t hw = h * w, t0 = i * DIT_SPARSE_TILE, t1 = min64(n, t0 + DIT_SPARSE_TILE) - 1;
  b->lo[0] = t0 / hw, b->hi[0] = t1 / hw;
  b->lo[1] = h, b->hi[1] = -1, b->lo[2] = w, b->hi[2] = -1;
  for (int64_t fr = b->lo[0]; fr <= b->hi[0]; fr++) {
    int64_t s0, s1;
    frame_segment(i, n, hw, fr, &s0, &s1);
    const int64_t r0 = s0 / w, r1 = s1 / w;
    b->lo[1] = min64(b->lo[1], r0), b->hi[1] = max64(b->hi[1], r1);
    b->lo[2] = min64(b->lo[2], r0 == r1 ? s0 % w : 0), b->hi[2] = max64(b->hi[2], r0 == r1 ? s1 % w : w - 1);
  }
}

/* Sliding Tile Attention (Zhang et al., "Fast Video Generation with Sliding Tile Attention",
 * arXiv:2502.04507): a query at coordinate c of a dimension of n tokens sees the window of
 * min(win, n) tokens centered on c and shifted inside the grid at its edges, so a window as
 * large as the grid sees everything. A key tile is kept when its box meets the union of the
 * windows of the query tile's box (the windows of its first and last coordinates bound it). */
static int sta_keeps(const dit_sparse_attn_t *p, const int64_t grid[3], const box_t *q, const box_t *k) {
  for (int d = 0; d < 3; d++) {
    const int64_t n = grid[d], wd = min64(p->window[d], n);
    const int64_t a = min64(max64(q->lo[d] - wd / 2, 0), n - wd), b = min64(max64(q->hi[d] - wd / 2, 0), n - wd) + wd - 1;
    if (k->hi[d] < a || k->lo[d] > b) return 0;
  }
  return 1;
}

/* Radial Attention's static mask (Li et al., "Radial Attention: O(n log n) Sparse Attention with
 * Energy Decay for Long Video Generation", arXiv:2506.19852, section 4): a query of frame i at
 * in-frame index k and a key of frame j at index l, s tokens a frame, r = floor(log2(max(|i-j|,
 * 1))): while 2^r <= s the key is attended when |k - l| + 1 <= s / 2^r (the spatial band halves
 * each time the temporal distance doubles); past that only the same position l = k of every
 * ceil(2^r / s)-th frame. The first frame is attended by every query (the attention sink the
 * paper keeps). Here at tile granularity: a key tile is kept when any of its tokens is attended
 * by any query of the tile, decided per pair of the tiles' frame segments. */
static int radial_segments(int64_t fi, int64_t k0, int64_t k1, int64_t fj, int64_t l0, int64_t l1, int64_t s) {
  if (fj == 0) return 1;
  const int64_t dist = fi > fj ? fi - fj : fj - fi;
  int r = 0;
  while (r < 62 && ((int64_t)2 << r) <= dist) r++;
  const int64_t gap = max64(0, max64(l0 - k1, k0 - l1)), pow2 = (int64_t)1 << r;
  if (pow2 <= s) return gap + 1 <= s / pow2;
  const int64_t step = (pow2 + s - 1) / s;
  return gap == 0 && dist % step == 0;
}

static int radial_keeps(int64_t qi, int64_t kj, int64_t n, int64_t hw) {
  const int64_t qf0 = qi * DIT_SPARSE_TILE / hw, qf1 = (min64(n, (qi + 1) * DIT_SPARSE_TILE) - 1) / hw;
  const int64_t kf0 = kj * DIT_SPARSE_TILE / hw, kf1 = (min64(n, (kj + 1) * DIT_SPARSE_TILE) - 1) / hw;
  for (int64_t fi = qf0; fi <= qf1; fi++) {
    int64_t k0, k1;
    frame_segment(qi, n, hw, fi, &k0, &k1);
    for (int64_t fj = kf0; fj <= kf1; fj++) {
      int64_t l0, l1;
      frame_segment(kj, n, hw, fj, &l0, &l1);
      if (radial_segments(fi, k0, k1, fj, l0, l1, hw)) return 1;
    }
  }
  return 0;
}

dit_status_t dit_sparse_attn_schedule(const dit_sparse_attn_t *p, int64_t f, int64_t h, int64_t w, int32_t **rows,
                                      int64_t *n_rows, int64_t *width) {
  *rows = NULL;
  *n_rows = *width = 0;
  if (p->pattern != DIT_SPARSE_STA && p->pattern != DIT_SPARSE_RADIAL)
    return DIT_ERR(INVALID_ARGUMENT, "sparse attention: pattern %d (known: sta, radial)", p->pattern);
  if (f < 1 || h < 1 || w < 1 || f * h * w > INT32_MAX)
    return DIT_ERR(INVALID_ARGUMENT, "sparse attention: token grid %" PRId64 "x%" PRId64 "x%" PRId64 " (expected positive, at most 2^31 tokens)", f, h, w);
  const int64_t n = f * h * w, nt = (n + DIT_SPARSE_TILE - 1) / DIT_SPARSE_TILE, grid[3] = {f, h, w};
  uint8_t *keep = calloc((size_t)(nt * nt), 1);
  box_t *boxes = calloc((size_t)nt, sizeof *boxes);
  if (!keep || !boxes) {
    free(keep);
    free(boxes);
    return DIT_ERR(RESOURCE_EXHAUSTED, "sparse attention: out of memory for %" PRId64 " tiles", nt);
  }
  for (int64_t i = 0; i < nt; i++) tile_box(i, n, h, w, &boxes[i]);
  int64_t most = 0, all = 0;
  for (int64_t i = 0; i < nt; i++) {
    int64_t c = 0;
    for (int64_t j = 0; j < nt; j++) {
      keep[i * nt + j] = p->pattern == DIT_SPARSE_STA ? (uint8_t)sta_keeps(p, grid, &boxes[i], &boxes[j])
                                                      : (uint8_t)radial_keeps(i, j, n, h * w);
      c += keep[i * nt + j];
    }
    most = max64(most, c);
    all += c;
  }
  free(boxes);
  if (all == nt * nt) {
    free(keep);
    return DIT_OK; /* dense */
  }
  int32_t *t = malloc(sizeof *t * (size_t)(nt * (most + 1)));
  if (!t) {
    free(keep);
    return DIT_ERR(RESOURCE_EXHAUSTED, "sparse attention: out of memory for the tile schedule");
  }
  for (int64_t i = 0; i < nt; i++) {
    int32_t *row = t + i * (most + 1);
    int64_t c = 0;
    for (int64_t j = 0; j < nt; j++)
      if (keep[i * nt + j]) row[1 + c++] = (int32_t)j;
    row[0] = (int32_t)c;
    for (int64_t e = c; e < most; e++) row[1 + e] = -1;
  }
  free(keep);
  *rows = t;
  *n_rows = nt;
  *width = most + 1;
  return DIT_OK;
}
