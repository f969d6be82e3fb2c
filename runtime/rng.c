/* Counter-based normal noise: Philox4x32-10 blocks turned into standard normals by
 * Box-Muller, with log/sin/cos written here from +, -, *, / and sqrt only so that a GPU
 * kernel doing the same operations in the same order (no fused multiply-add) reproduces
 * every bit. Must be compiled with -ffp-contract=off (GCC ignores the pragma below). */
/* GCC does not know this pragma (it warns, and relies on -ffp-contract=off instead); clang
 * honours it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#pragma STDC FP_CONTRACT OFF
#pragma GCC diagnostic pop

#include "runtime/rng.h"

#include <math.h>
#include <pthread.h>
#include <unistd.h>
#include <string.h>

/* Multipliers and Weyl key increments of Philox4x32 as published by Salmon et al. (SC'11). */
#define DIT_PHILOX_M0 0xD2511F53u
#define DIT_PHILOX_M1 0xCD9E8D57u
#define DIT_PHILOX_W0 0x9E3779B9u
#define DIT_PHILOX_W1 0xBB67AE85u

void dit_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; round++) {
    if (round > 0) {
      k0 += DIT_PHILOX_W0;
      k1 += DIT_PHILOX_W1;
    }
    uint64_t p0 = (uint64_t)DIT_PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)DIT_PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = (uint32_t)p0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* ln 2 split so that e * hi is exact for any binary exponent e (hi has 32 significant bits). */
static const double kLn2Hi = 0x1.62e42feep-1;
static const double kLn2Lo = 0x1.a39ef35793c76p-33;
static const double kSqrt2 = 0x1.6a09e667f3bcdp+0;
static const double kPiOver2 = 0x1.921fb54442d18p+0;

/* Natural log of a positive normal double. x = m * 2^e with m in (sqrt(1/2), sqrt(2)], then
 * ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172, by its series to s^23 (the next
 * term is below 1e-18 relative). m - 1 is exact, which keeps the result accurate near 1.
 * Exported for the unit test; not part of the public interface. */
double dit_rng_ln(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  int e = (int)((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;
  double m;
  memcpy(&m, &bits, sizeof m);
  if (m > kSqrt2) {
    m = m * 0.5;
    e = e + 1;
  }
  double s = (m - 1.0) / (m + 1.0);
  double s2 = s * s;
  /* Coefficients 1/(2k+1), k = 1..11, as correctly rounded doubles. */
  double p = 0.043478260869565216;
  p = 0.047619047619047616 + s2 * p;
  p = 0.05263157894736842 + s2 * p;
  p = 0.058823529411764705 + s2 * p;
  p = 0.06666666666666667 + s2 * p;
  p = 0.07692307692307693 + s2 * p;
  p = 0.09090909090909091 + s2 * p;
  p = 0.1111111111111111 + s2 * p;
  p = 0.14285714285714285 + s2 * p;
  p = 0.2 + s2 * p;
  p = 0.3333333333333333 + s2 * p;
  double two_s = s + s;
  double ln_m = two_s + two_s * (s2 * p);
  double de = (double)e;
  return de * kLn2Hi + (de * kLn2Lo + ln_m);
}

/* sin(2 pi u) and cos(2 pi u) for u in [0, 1]. The reduction is done in turns, where it is
 * exact: 4u = q + r with integer q and |r| <= 1/2, so only theta = r * pi/2 is rounded;
 * then Taylor series on |theta| <= pi/4 (sin to theta^19, cos to theta^20, next terms
 * below 1e-18). Exported for the unit test; not part of the public interface. */
void dit_rng_sincos_turns(double u, double *out_sin, double *out_cos) {
  double y = u * 4.0;
  double qf = (double)(int64_t)y;
  double r = y - qf;
  if (r > 0.5) {
    r = r - 1.0;
    qf = qf + 1.0;
  }
  int q = (int)(int64_t)qf & 3;
  double t = r * kPiOver2;
  double t2 = t * t;
  /* (-1)^k / (2k+1)!, k = 1..9 */
  double ps = -8.22063524662433e-18;
  ps = 2.8114572543455206e-15 + t2 * ps;
  ps = -7.647163731819816e-13 + t2 * ps;
  ps = 1.6059043836821613e-10 + t2 * ps;
  ps = -2.505210838544172e-08 + t2 * ps;
  ps = 2.7557319223985893e-06 + t2 * ps;
  ps = -0.0001984126984126984 + t2 * ps;
  ps = 0.008333333333333333 + t2 * ps;
  ps = -0.16666666666666666 + t2 * ps;
  double sin_t = t + t * (t2 * ps);
  /* (-1)^k / (2k)!, k = 1..10 */
  double pc = 4.110317623312165e-19;
  pc = -1.5619206968586225e-16 + t2 * pc;
  pc = 4.779477332387385e-14 + t2 * pc;
  pc = -1.1470745597729725e-11 + t2 * pc;
  pc = 2.08767569878681e-09 + t2 * pc;
  pc = -2.755731922398589e-07 + t2 * pc;
  pc = 2.48015873015873e-05 + t2 * pc;
  pc = -0.001388888888888889 + t2 * pc;
  pc = 0.041666666666666664 + t2 * pc;
  pc = -0.5 + t2 * pc;
  double cos_t = 1.0 + t2 * pc;
  switch (q) {
    case 0:
      *out_sin = sin_t;
      *out_cos = cos_t;
      break;
    case 1:
      *out_sin = cos_t;
      *out_cos = -sin_t;
      break;
    case 2:
      *out_sin = -sin_t;
      *out_cos = -cos_t;
      break;
    default:
      *out_sin = -cos_t;
      *out_cos = sin_t;
      break;
  }
}

/* Two normals from two 32-bit words. u = (x + 1/2) 2^-32 lies strictly inside (0, 1), so
 * the log is finite; both products are exact in double. */
static void dit_rng_box_muller(uint32_t x0, uint32_t x1, float *z0, float *z1) {
  const double two_m32 = 0x1p-32;
  double u0 = ((double)x0 + 0.5) * two_m32;
  double u1 = ((double)x1 + 0.5) * two_m32;
  double r = sqrt(-2.0 * dit_rng_ln(u0));
  double s, c;
  dit_rng_sincos_turns(u1, &s, &c);
  *z0 = (float)(r * c);
  *z1 = (float)(r * s);
}

static void dit_rng_block(uint64_t seed, uint64_t block, float z[4]) {
  const uint32_t counter[4] = {(uint32_t)block, (uint32_t)(block >> 32), 0, 0};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t x[4];
  dit_philox4x32_10(counter, key, x);
  dit_rng_box_muller(x[0], x[1], &z[0], &z[1]);
  dit_rng_box_muller(x[2], x[3], &z[2], &z[3]);
}

static void rng_normal_serial(uint64_t seed, uint64_t offset, float *out, size_t n) {
  size_t k = 0;
  uint64_t i = offset;
  while (k < n) {
    float z[4];
    dit_rng_block(seed, i >> 2, z);
    for (unsigned lane = (unsigned)(i & 3); lane < 4 && k < n; lane++, k++, i++) out[k] = z[lane];
  }
}

typedef struct rng_part {
  uint64_t seed, offset;
  float *out;
  size_t n;
} rng_part_t;

static void *rng_part_run(void *arg) {
  const rng_part_t *p = arg;
  rng_normal_serial(p->seed, p->offset, p->out, p->n);
  return NULL;
}

/* Every value depends only on (seed, its index), so parts of the range drawn on threads give the
 * serial draw's bytes; a video's noise (millions of values) is then a few milliseconds, not tens,
 * of the time from a served request to its first step. */
void dit_rng_normal(uint64_t seed, uint64_t offset, float *out, size_t n) {
  enum { MAX_PARTS = 16, MIN_PART = 1 << 16 };
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  size_t parts = n / MIN_PART;
  if (parts > (size_t)(cpus > 0 ? cpus : 1)) parts = (size_t)(cpus > 0 ? cpus : 1);
  if (parts > MAX_PARTS) parts = MAX_PARTS;
  if (parts < 2) {
    rng_normal_serial(seed, offset, out, n);
    return;
  }
  rng_part_t p[MAX_PARTS];
  pthread_t th[MAX_PARTS];
  int started[MAX_PARTS] = {0};
  const size_t each = (n + parts - 1) / parts;
  for (size_t t = 0; t < parts; t++) {
    const size_t b = t * each, e = b + each < n ? b + each : n;
    p[t] = (rng_part_t){seed, offset + b, out + b, e - b};
    started[t] = t > 0 && pthread_create(&th[t], NULL, rng_part_run, &p[t]) == 0;
    if (t > 0 && !started[t]) rng_part_run(&p[t]); /* no thread: draw it here */
  }
  rng_part_run(&p[0]);
  for (size_t t = 1; t < parts; t++)
    if (started[t]) pthread_join(th[t], NULL);
}
