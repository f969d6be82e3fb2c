/* Cross-backend parity of one plan, step by step (see compare.c). */
#ifndef DIT_RUNTIME_COMPARE_H
#define DIT_RUNTIME_COMPARE_H

#include <stddef.h>

#include "runtime/ditrun.h"

/* The metrics as base/parity.h defines them (zero, empty and non-finite cases included). */
typedef struct dit_step_diff {
  size_t step;
  const char *op, *value;
  double max_rel;  /* max|test - ref| / max|ref|; +inf on a non-finite mismatch */
  double cosine;   /* NaN on a non-finite mismatch */
  size_t elements;
  double rel_l2;   /* ||test - ref|| / ||ref|| */
  /* For 8-bit codes (e4m3, int8), the largest step of their grid relative to its largest value
   * (e4m3: 32 / 448, int8: 1 / 127), else 0: codes from two backends may sit one step apart where
   * a row's last bit moved a value, or its scale, across a rounding boundary. */
  double code_step;
} dit_step_diff_t;

/* Both runtimes must hold the same plan with the same inputs set. With accumulate = 0 each
 * step's reference outputs replace the test's before the next step. */
dit_status_t dit_runtime_compare(dit_runtime_t *test, dit_runtime_t *ref, int accumulate,
                                 void (*report)(void *ctx, const dit_step_diff_t *d), void *ctx);

#endif
