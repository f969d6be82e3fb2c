/* base/parity: the one comparison every tool uses, at its edges: empty, zero vectors, NaN and
 * infinities, identical and negated inputs, fp64 accumulation. */
#include <float.h>

#include "base/parity.h"
#include "check.h"

static void test_empty(void) {
  dit_parity_t p = dit_parity_f32(NULL, NULL, 0);
  CHECK_EQ_INT(p.n, 0);
  CHECK_EQ_INT(p.nonfinite, 0);
  CHECK(p.max_rel == 0 && p.rel_l2 == 0 && p.cosine == 1);
}

static void test_zeros(void) {
  const float z[4] = {0, 0, -0.f, 0}, x[4] = {0, 1e-30f, 0, 0}, y[4] = {1, 2, 3, 4};
  dit_parity_t p = dit_parity_f32(z, z, 4);
  CHECK(p.max_rel == 0 && p.rel_l2 == 0 && p.cosine == 1); /* both zero: identical */
  p = dit_parity_f32(x, z, 4);                              /* reference zero, test not */
  CHECK(isinf(p.max_rel) && p.max_rel > 0 && isinf(p.rel_l2));
  CHECK(p.cosine == 0);
  CHECK_EQ_INT(p.nonfinite, 0);
  CHECK_NEAR(p.max_abs_diff, 1e-30, 1e-36);
  p = dit_parity_f32(z, y, 4); /* test zero, reference not: off by all of it */
  CHECK(p.max_rel == 1 && p.rel_l2 == 1 && p.cosine == 0);
}

static void test_identical_and_negated(void) {
  float a[1000], b[1000];
  for (int i = 0; i < 1000; i++) {
    a[i] = (float)sin(i * 0.37) * (float)(1 + i % 7) * 1e3f;
    b[i] = -a[i];
  }
  dit_parity_t p = dit_parity_f32(a, a, 1000);
  CHECK(p.cosine == 1 && p.max_rel == 0 && p.rel_l2 == 0);
  p = dit_parity_f32(b, a, 1000);
  CHECK(p.cosine == -1);
  CHECK(p.max_rel == 2 && p.rel_l2 == 2);
}

static void test_values(void) {
  const float t[3] = {1, 2, 4}, r[3] = {1, 2, 2};
  dit_parity_t p = dit_parity_f32(t, r, 3);
  CHECK(p.max_abs_diff == 2 && p.max_abs_ref == 2 && p.max_rel == 1);
  CHECK_NEAR(p.rel_l2, 2.0 / 3.0, 1e-15);
  CHECK_NEAR(p.cosine, 13.0 / (sqrt(21.0) * 3.0), 1e-15);
  /* fp64 accumulation: 2^24 + 1 ones plus a large value would lose the ones in fp32. */
  static float big[1 << 20];
  for (int i = 0; i < (1 << 20); i++) big[i] = 1;
  big[0] = 16777216.f;
  p = dit_parity_f32(big, big, 1 << 20);
  CHECK(p.cosine == 1);
}

static void test_nonfinite(void) {
  const float nan = NAN, inf = INFINITY;
  const float r[3] = {1, inf, -inf};
  float t[3] = {1, inf, -inf};
  dit_parity_t p = dit_parity_f32(t, r, 3); /* the same infinities agree, and carry no weight */
  CHECK_EQ_INT(p.nonfinite, 0);
  CHECK(p.max_rel == 0 && p.rel_l2 == 0 && p.cosine == 1);
  t[1] = -inf; /* opposite infinity */
  p = dit_parity_f32(t, r, 3);
  CHECK_EQ_INT(p.nonfinite, 1);
  CHECK(isinf(p.max_rel) && isinf(p.rel_l2) && isnan(p.cosine));
  CHECK(!(p.cosine >= 0.999)); /* a threshold written as documented fails */
  t[1] = nan;
  t[2] = 5; /* NaN in the test, a finite value against -inf */
  p = dit_parity_f32(t, r, 3);
  CHECK_EQ_INT(p.nonfinite, 2);
  const float n2[2] = {nan, 1};
  p = dit_parity_f32(n2, n2, 2); /* NaN never equals NaN */
  CHECK_EQ_INT(p.nonfinite, 1);
  CHECK(isinf(p.max_rel));
  const float fin[2] = {1, FLT_MAX}, fin2[2] = {1, -FLT_MAX};
  p = dit_parity_f32(fin, fin2, 2); /* large finite values stay finite in fp64 */
  CHECK_EQ_INT(p.nonfinite, 0);
  CHECK(p.max_rel == 2 && isfinite(p.cosine) && p.cosine < -0.99);
}

int main(void) {
  test_empty();
  test_zeros();
  test_identical_and_negated();
  test_values();
  test_nonfinite();
  return check_summary("test_parity");
}
