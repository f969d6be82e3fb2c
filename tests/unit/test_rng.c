/* Noise generator: Philox4x32-10 known answers, our log/sin/cos against the C library, the
 * moments of the normals and the independence of a slice from where it starts. */
/* GCC does not know this pragma (it warns, and relies on -ffp-contract=off instead); clang
 * honours it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#pragma STDC FP_CONTRACT OFF
#pragma GCC diagnostic pop

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/rng.h"

/* Internal to runtime/rng.c, exported for this test. */
double dit_rng_ln(double x);
void dit_rng_sincos_turns(double u, double *out_sin, double *out_cos);

static void test_philox_kat(void) {
  /* Known-answer vectors of the Random123 distribution (kat_vectors, philox4x32_10). */
  static const struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t k = 0; k < sizeof kat / sizeof kat[0]; k++) {
    uint32_t out[4];
    dit_philox4x32_10(kat[k].ctr, kat[k].key, out);
    for (int w = 0; w < 4; w++) {
      if (out[w] != kat[k].out[w])
        fprintf(stderr, "KAT %zu word %d: %08x, expected %08x\n", k, w, out[w], kat[k].out[w]);
      CHECK_EQ_INT(out[w], kat[k].out[w]);
    }
  }
}

/* A small deterministic source of test points (not the generator under test). */
static uint64_t splitmix(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void test_ln(void) {
  uint64_t st = 1;
  double worst = 0.0, worst_x = 0.0;
  int n = 0;
  /* The generator's whole domain, [2^-33, 1 - 2^-33], plus points spread in log scale and
   * values just below 1, where ln is small and cancellation would show. */
  static const double fixed[] = {0x1p-33, 0x1p-32, 0.5, 0.7071067811865476, 0.7071067811865475,
                                 1.0 - 0x1p-33, 1.0 - 0x1p-20, 0.999, 0.25, 1e-9};
  for (size_t k = 0; k < sizeof fixed / sizeof fixed[0] + 300000; k++) {
    double x;
    if (k < sizeof fixed / sizeof fixed[0]) {
      x = fixed[k];
    } else if (k % 3 == 0) {
      x = ((double)(uint32_t)splitmix(&st) + 0.5) * 0x1p-32;
    } else if (k % 3 == 1) {
      x = exp2(-33.0 * (double)(splitmix(&st) >> 11) * 0x1p-53);
    } else {
      x = 1.0 - (double)(splitmix(&st) >> 11) * 0x1p-53 * 0x1p-10;
      if (x >= 1.0) x = 0.5;
    }
    double ref = log(x), got = dit_rng_ln(x);
    double rel = ref != 0.0 ? fabs(got - ref) / fabs(ref) : fabs(got);
    if (rel > worst) worst = rel, worst_x = x;
    n++;
  }
  printf("ln: %d points, max rel err %.3g (at %.17g)\n", n, worst, worst_x);
  CHECK(worst <= 1e-14);
  CHECK(dit_rng_ln(1.0) == 0.0);
}

static void test_sincos(void) {
  const long double two_pi = 6.283185307179586476925286766559005768L;
  uint64_t st = 2;
  double worst_s = 0.0, worst_c = 0.0, worst_abs = 0.0;
  int n = 0;
  for (int k = 0; k < 300000 + 64; k++) {
    double u;
    if (k < 64)
      u = (double)k / 64.0 + (k % 2 ? 0x1p-33 : 0.0); /* quadrant edges, exact zeros */
    else
      u = ((double)(uint32_t)splitmix(&st) + 0.5) * 0x1p-32;
    double s, c;
    dit_rng_sincos_turns(u, &s, &c);
    long double a = two_pi * (long double)u;
    double rs = (double)sinl(a), rc = (double)cosl(a);
    worst_abs = fmax(worst_abs, fmax(fabs(s - rs), fabs(c - rc)));
    /* Relative error where the long double reference itself is relatively exact enough. */
    if (fabs(rs) > 1e-4) worst_s = fmax(worst_s, fabs(s - rs) / fabs(rs));
    if (fabs(rc) > 1e-4) worst_c = fmax(worst_c, fabs(c - rc) / fabs(rc));
    n++;
  }
  printf("sin/cos(2 pi u): %d points, max rel err %.3g / %.3g, max abs err %.3g\n", n, worst_s,
         worst_c, worst_abs);
  CHECK(worst_s <= 1e-14);
  CHECK(worst_c <= 1e-14);
  CHECK(worst_abs <= 1e-15);
  /* Exact at the quadrant points. */
  double s, c;
  dit_rng_sincos_turns(0.0, &s, &c);
  CHECK(s == 0.0 && c == 1.0);
  dit_rng_sincos_turns(0.25, &s, &c);
  CHECK(s == 1.0 && c == 0.0);
  dit_rng_sincos_turns(0.5, &s, &c);
  CHECK(s == 0.0 && c == -1.0);
  dit_rng_sincos_turns(0.75, &s, &c);
  CHECK(s == -1.0 && c == 0.0);
}

/* Against libm: the same Box-Muller in the C library's functions agrees to float rounding. */
static void test_normal_vs_libm(void) {
  const uint64_t seed = 0x123456789abcdefull;
  enum { N = 4096 };
  static float z[N];
  dit_rng_normal(seed, 0, z, N);
  int mismatch = 0;
  for (int i = 0; i < N; i += 4) {
    const uint64_t block = (uint64_t)i / 4;
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), 0, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t x[4];
    dit_philox4x32_10(ctr, key, x);
    for (int p = 0; p < 2; p++) {
      double u0 = ((double)x[2 * p] + 0.5) * 0x1p-32, u1 = ((double)x[2 * p + 1] + 0.5) * 0x1p-32;
      double r = sqrt(-2.0 * log(u0));
      double z0 = r * cos(2.0 * M_PI * u1), z1 = r * sin(2.0 * M_PI * u1);
      if (fabs(z0 - z[i + 2 * p]) > 1e-6 * fmax(1.0, fabs(z0))) mismatch++;
      if (fabs(z1 - z[i + 2 * p + 1]) > 1e-6 * fmax(1.0, fabs(z1))) mismatch++;
    }
  }
  CHECK_EQ_INT(mismatch, 0);
}

static void test_moments(void) {
  enum { N = 1000000 };
  float *z = malloc(N * sizeof *z);
  CHECK(z != NULL);
  if (!z) return;
  dit_rng_normal(42, 0, z, N);
  double sum = 0, sum2 = 0, sum3 = 0, sum4 = 0;
  int finite = 1;
  for (int i = 0; i < N; i++) {
    double v = z[i];
    finite &= isfinite(v) != 0;
    sum += v;
    sum2 += v * v;
    sum3 += v * v * v;
    sum4 += v * v * v * v;
  }
  double mean = sum / N, var = sum2 / N - mean * mean;
  double skew = sum3 / N, kurt = sum4 / N;
  printf("normals: mean %.5f var %.5f third moment %.4f fourth moment %.4f\n", mean, var, skew,
         kurt);
  CHECK(finite);
  CHECK(fabs(mean) < 0.005);
  CHECK(fabs(var - 1.0) < 0.01);
  CHECK(fabs(skew) < 0.02);
  CHECK(fabs(kurt - 3.0) < 0.05);
  /* Different seeds give different streams. */
  float a[8], b[8];
  dit_rng_normal(1, 0, a, 8);
  dit_rng_normal(2, 0, b, 8);
  CHECK(memcmp(a, b, sizeof a) != 0);
  free(z);
}

static void test_offsets(void) {
  enum { N = 1031 };
  float full[N];
  const uint64_t seed = 0xfeedface00000001ull;
  dit_rng_normal(seed, 0, full, N);
  int bad = 0;
  static const struct {
    uint64_t off;
    size_t n;
  } cuts[] = {{0, 1}, {1, 1}, {1, 2}, {2, 3}, {3, 1}, {3, 6}, {5, 0}, {7, 513}, {100, 931}, {0, N}};
  for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
    float part[N + 1];
    part[cuts[c].n] = 12345.0f; /* guard: nothing past n is written */
    dit_rng_normal(seed, cuts[c].off, part, cuts[c].n);
    if (memcmp(part, full + cuts[c].off, cuts[c].n * sizeof(float)) != 0) bad++;
    if (part[cuts[c].n] != 12345.0f) bad++;
  }
  CHECK_EQ_INT(bad, 0);
  /* Offsets far out: element i of the stream depends only on (seed, i). */
  float far1[6], far2[3];
  const uint64_t big = (1ull << 40) + 2;
  dit_rng_normal(seed, big, far1, 6);
  dit_rng_normal(seed, big + 3, far2, 3);
  CHECK(memcmp(far1 + 3, far2, sizeof far2) == 0);
}

int main(void) {
  test_philox_kat();
  test_ln();
  test_sincos();
  test_normal_vs_libm();
  test_moments();
  test_offsets();
  return check_summary("test_rng");
}
