/* Sparse attention patterns compiled into tile schedules (see sparse_attn.h). A tile is
 * DIT_SPARSE_TILE consecutive tokens of the frame-major grid, so it may span part of a row,
 * several rows or several frames; both patterns are decided per (query tile, key tile). */
#include "compiler/sparse_attn.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
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
 * Energy Decay for Long Video Generation", arXiv:2506.19852, section 4), as its authors' mask
 * builder makes it for Wan (decay factor 1), with s tokens a frame and d = |i - j| the frames'
 * distance: keys of frame 0 are seen by every query (the attention sink); else a query at in-frame
 * index k sees the key at l when |k - l| <= w, w = s at d = 0, s / 2 at d = 1, else
 * max(2^bitlen(s) / 2^bitlen(d), 128); and where that decay 2^bitlen(s) / 2^bitlen(d) is below 128
 * only every (128 / decay)-th frame is kept (d % floor(128 / decay) == 0). Each frame pair's token
 * mask is cut into the 128-token tiles of the whole sequence and a tile is kept when more than 60%
 * of its non-empty key columns are more than a third full (the builder's "strict" shrink). The
 * builder's rows also hold the text tokens, which keep every query row non-empty; Wan's text is a
 * cross-attention of its own here, so each query tile also keeps its own (diagonal) key tile. */
static int64_t bit_length(int64_t x) {
  int64_t b = 0;
  for (; x; x >>= 1) b++;
  return b;
}

static void radial_mark(int64_t f, int64_t s, int64_t nt, uint8_t *keep) {
  const int64_t T = DIT_SPARSE_TILE, span = (s - 1) / T + 1;
  for (int64_t i = 0; i < f; i++)
    for (int64_t j = 0; j < f; j++) {
      const int64_t d = i > j ? i - j : j - i;
      const int sink = j == 0;
      const double decay = ldexp(1.0, (int)(bit_length(s) - bit_length(d)));
      int64_t w = s;
      if (!sink) {
        if (decay < (double)T && d % (int64_t)((double)T / decay)) continue; /* a frame the decay skips */
        w = d == 0 ? s : d == 1 ? s / 2 : (int64_t)floor(decay > (double)T ? decay : (double)T);
      }
      /* The pair's tokens sit at rows i*s .. and columns j*s .. of the sequence: its blocks are
       * the first ceil(s / 128) by ceil(s / 128) tiles from the ones holding its first tokens (the
       * builder's shrink keeps that many; a frame's tail spilling into one more tile is left to the
       * neighbouring frame pair's blocks). */
      const int64_t ro = (i * s) % T, co = (j * s) % T, nbr = span, nbc = span;
      for (int64_t br = 0; br < nbr; br++) {
        const int64_t k0 = max64(br * T - ro, 0), k1 = min64(br * T - ro + T, s); /* the block's rows [k0, k1) */
        const int64_t gr = (i * s) / T + br;
        if (k0 >= k1 || gr >= nt) continue;
        for (int64_t bc = 0; bc < nbc; bc++) {
          const int64_t gc = (j * s) / T + bc;
          if (gc >= nt) continue;
          int64_t nonzero = 0, high = 0;
          for (int64_t c = 0; c < T; c++) {
            const int64_t l = bc * T + c - co;
            if (l < 0 || l >= s) continue;
            const int64_t lo = max64(k0, l - w), hi = min64(k1 - 1, l + w), cnt = hi >= lo ? hi - lo + 1 : 0;
            nonzero += cnt > 0, high += 3 * cnt > T;
          }
          if ((double)high / ((double)nonzero + 1e-9) > 0.6) keep[gr * nt + gc] = 1;
        }
      }
    }
  for (int64_t t = 0; t < nt; t++) keep[t * nt + t] = 1;
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
  if (p->pattern == DIT_SPARSE_RADIAL) radial_mark(f, h * w, nt, keep);
  int64_t most = 0, all = 0;
  for (int64_t i = 0; i < nt; i++) {
    int64_t c = 0;
    for (int64_t j = 0; j < nt; j++) {
      if (p->pattern == DIT_SPARSE_STA) keep[i * nt + j] = (uint8_t)sta_keeps(p, grid, &boxes[i], &boxes[j]);
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
