/* Parity metrics: how far a tensor is from its reference (max relative error, relative L2,
 * cosine similarity), the one definition every comparison in the project uses. */
#ifndef DIT_BASE_PARITY_H
#define DIT_BASE_PARITY_H

#include <stddef.h>

/* Everything is accumulated in fp64 over the n element pairs (test[i], ref[i]).
 *
 * A pair agrees exactly when test[i] == ref[i]; that includes the same infinity on both sides,
 * which is left out of every sum below (its difference is 0, and it carries no direction). NaN
 * equals nothing, itself included. A pair in which either side is NaN or infinite and which
 * does not agree exactly is a non-finite mismatch; with any of them, max_rel and rel_l2 are
 * +inf and cosine is NaN (undefined), so a threshold test written as !(cosine >= min) fails.
 *
 * Otherwise, with d = test - ref over the remaining (finite) pairs:
 *   max_rel = max|d| / max|ref|   and, when max|ref| = 0: 0 if max|d| = 0, else +inf;
 *   rel_l2  = ||d|| / ||ref||     and, when ||ref|| = 0: 0 if ||d|| = 0, else +inf;
 *   cosine  = <test, ref> / (||test|| ||ref||), clamped to [-1, 1], and when a norm is 0:
 *             1 if both vectors are zero (identical), 0 if only one is (no direction to share).
 * n = 0 compares two empty tensors: identical (max_rel 0, rel_l2 0, cosine 1). Identical
 * finite inputs give cosine exactly 1, negated ones exactly -1. */
typedef struct dit_parity {
  size_t n;                /* element pairs compared */
  size_t nonfinite;        /* non-finite mismatches (see above) */
  double max_abs_diff;     /* max|d| over the finite pairs */
  double max_abs_ref;      /* max|ref| over the finite pairs */
  double max_rel, rel_l2, cosine;
} dit_parity_t;

/* Compares test against ref (n floats each; either may be NULL only when n is 0). */
dit_parity_t dit_parity_f32(const float *test, const float *ref, size_t n);

#endif
