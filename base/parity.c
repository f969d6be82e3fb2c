/* Parity metrics in fp64 with defined zero, empty and non-finite cases (see parity.h). */
#include "base/parity.h"

#include <math.h>

dit_parity_t dit_parity_f32(const float *test, const float *ref, size_t n) {
  dit_parity_t p = {0};
  p.n = n;
  double dot = 0, nt = 0, nr = 0, nd = 0;
  for (size_t i = 0; i < n; i++) {
    const double a = test[i], b = ref[i];
    if (a == b && isinf(a)) continue; /* the same infinity: agrees, no direction */
    if (!isfinite(a) || !isfinite(b)) {
      p.nonfinite++;
      continue;
    }
    const double d = fabs(a - b);
    if (d > p.max_abs_diff) p.max_abs_diff = d;
    if (fabs(b) > p.max_abs_ref) p.max_abs_ref = fabs(b);
    dot += a * b;
    nt += a * a;
    nr += b * b;
    nd += d * d;
  }
  if (p.nonfinite) {
    p.max_rel = p.rel_l2 = INFINITY;
    p.cosine = NAN;
    return p;
  }
  p.max_rel = p.max_abs_ref > 0 ? p.max_abs_diff / p.max_abs_ref : p.max_abs_diff == 0 ? 0 : INFINITY;
  p.rel_l2 = nr > 0 ? sqrt(nd / nr) : nd == 0 ? 0 : INFINITY;
  if (nt > 0 && nr > 0) {
    /* sqrt(nt * nr) rather than sqrt(nt) * sqrt(nr): for identical or negated inputs nt == nr
     * == |dot|, and the square root of a correctly rounded square is exact. */
    const double c = dot / sqrt(nt * nr);
    p.cosine = c > 1 ? 1 : c < -1 ? -1 : c;
  } else {
    p.cosine = nt == nr ? 1 : 0;
  }
  return p;
}
