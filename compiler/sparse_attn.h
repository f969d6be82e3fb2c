/* Compiled sparse attention for video: a pattern over the (frame, row, column) grid of a
 * model's patched tokens, laid out frame-major, becomes a static per-query-tile list of key
 * tiles (DIT_SPARSE_TILE tokens each; the attention op's tile schedule, base/ops.def). Every
 * backend iterates only the listed key tiles; skipped tiles contribute nothing. */
#ifndef DIT_COMPILER_SPARSE_ATTN_H
#define DIT_COMPILER_SPARSE_ATTN_H

#include <stdint.h>

#include "base/ops.h"
#include "base/status.h"

enum { DIT_SPARSE_NONE = 0, DIT_SPARSE_STA = 1, DIT_SPARSE_RADIAL = 2 };

typedef struct dit_sparse_attn {
  int pattern;                       /* DIT_SPARSE_* */
  int64_t window[3];                 /* sta: the window's extent in tokens (frames, rows, columns) */
  int64_t dense_steps, dense_layers; /* the first steps / layers kept dense */
} dit_sparse_attn_t;

/* Parses "sta:T,H,W" or "radial" (the value of --sparse-attn) into *out (dense_* untouched). */
dit_status_t dit_sparse_attn_parse(const char *spec, dit_sparse_attn_t *out);

/* "sta", "radial" or "none". */
const char *dit_sparse_attn_name(int pattern);

/* The schedule of pattern p over a grid of f x h x w tokens (self-attention: query and key
 * tiles are the same tiles): *rows (caller frees) is i32 [*n_rows, *width], row i holding its
 * count then its key tiles ascending, -1 after. *rows is NULL when every query tile lists every
 * key tile: the pattern is dense attention on this grid. */
dit_status_t dit_sparse_attn_schedule(const dit_sparse_attn_t *p, int64_t f, int64_t h, int64_t w, int32_t **rows,
                                      int64_t *n_rows, int64_t *width);

#endif
