/* The step-cache controller: option parsing and checks, cadence's and delta's decisions for
 * several steps / warmup / cooldown / N against the rule written out here, the extrapolated
 * predictions, the reset at an expert switch, and the forecast the expert swap paces by. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "runtime/step_cache.h"

/* The cadence rule as stated: full when i < W, i >= steps - C, (i - W) mod N == 0, or fewer
 * than two full predictions exist since the start or the latest reset (reset_at: -1 for none). */
static void cadence_rule(int steps, int w, int c, int n, int reset_at, int *full) {
  int since = 0;
  for (int i = 0; i < steps; i++) {
    if (i == reset_at) since = 0;
    full[i] = i < w || i >= steps - c || (i - w) % n == 0 || since < 2;
    since += full[i];
  }
}

/* Runs the controller over `steps` with constant predictions and latents; returns the skipped
 * steps as a string "3 5 7". */
static const char *run(const dit_step_cache_options_t *o, int steps, int reset_at, int *full) {
  static char buf[1024];
  dit_step_cache_t *c = NULL;
  float p[2] = {1, 2}, x[2] = {3, -4};
  buf[0] = 0;
  CHECK_OK(dit_step_cache_create(o, steps, 2, &c));
  if (!c) return buf;
  for (int i = 0; i < steps; i++) {
    if (i == reset_at) dit_step_cache_reset(c);
    dit_step_cache_observe(c, x);
    full[i] = dit_step_cache_full(c, i);
    if (full[i]) dit_step_cache_record(c, i, p);
    else snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%d", buf[0] ? " " : "", i);
  }
  dit_step_cache_destroy(c);
  return buf;
}

static void check_skipped(const dit_step_cache_options_t *o, int steps, int reset_at, const char *want) {
  int full[64];
  const char *got = run(o, steps, reset_at, full);
  CHECK(!strcmp(got, want));
  if (strcmp(got, want)) fprintf(stderr, "  steps %d W %d C %d: skipped '%s', expected '%s'\n", steps, o->warmup, o->cooldown, got, want);
}

static void test_parse(void) {
  dit_step_cache_options_t o = {.warmup = 3, .cooldown = 4};
  CHECK_OK(dit_step_cache_parse("cadence:3", &o));
  CHECK(o.mode == DIT_STEP_CACHE_CADENCE && o.cadence == 3 && o.warmup == 3 && o.cooldown == 4);
  CHECK_OK(dit_step_cache_parse("delta:0.05", &o));
  CHECK(o.mode == DIT_STEP_CACHE_DELTA && o.threshold == 0.05);
  CHECK_OK(dit_step_cache_parse("delta:0", &o));
  CHECK(o.mode == DIT_STEP_CACHE_DELTA && o.threshold == 0);
  CHECK_OK(dit_step_cache_parse("off", &o));
  CHECK(o.mode == DIT_STEP_CACHE_OFF);
  char d[32];
  CHECK_ERR(dit_step_cache_parse("cadence:1", &o), INVALID_ARGUMENT, "expected an integer >= 2 (1 would skip nothing), found 1");
  CHECK_ERR(dit_step_cache_parse("cadence:2.5", &o), INVALID_ARGUMENT, "found 2.5");
  CHECK_ERR(dit_step_cache_parse("cadence:x", &o), INVALID_ARGUMENT, "found 'cadence:x'");
  CHECK_ERR(dit_step_cache_parse("cadence:", &o), INVALID_ARGUMENT, "found 'cadence:'");
  CHECK_ERR(dit_step_cache_parse("cadence", &o), INVALID_ARGUMENT, "expected off, cadence:N");
  CHECK_ERR(dit_step_cache_parse("delta:-0.1", &o), INVALID_ARGUMENT, "expected a finite number >= 0, found -0.1");
  CHECK_ERR(dit_step_cache_parse("delta:inf", &o), INVALID_ARGUMENT, "found inf");
  CHECK_ERR(dit_step_cache_parse("teacup:0.1", &o), INVALID_ARGUMENT, "found 'teacup:0.1'");
  CHECK_ERR(dit_step_cache_parse("teacache:-1", &o), INVALID_ARGUMENT,
            "teacache:-1: T is a relative L1 change accumulated between full steps: expected a finite number >= 0, found -1");
  CHECK_ERR(dit_step_cache_parse("easycache:-0.5", &o), INVALID_ARGUMENT,
            "easycache:-0.5: T is a relative L1 change accumulated between full steps: expected a finite number >= 0, found -0.5");
  CHECK_ERR(dit_step_cache_parse("easycache", &o), INVALID_ARGUMENT,
            "delta:T, easycache:T, teacache:T or fbcache:T (T a number >= 0), found 'easycache'");
  CHECK_ERR(dit_step_cache_parse("fbcache:-0.1", &o), INVALID_ARGUMENT,
            "fbcache:-0.1: T is a relative L1 distance: expected a finite number >= 0, found -0.1");
  CHECK(o.mode == DIT_STEP_CACHE_OFF); /* a refused spec leaves the options alone */

  dit_step_cache_options_t bad = {.mode = DIT_STEP_CACHE_CADENCE, .cadence = 1};
  dit_step_cache_t *c = NULL;
  CHECK_ERR(dit_step_cache_create(&bad, 10, 4, &c), INVALID_ARGUMENT, "step_cache.cadence: expected an integer >= 2, found 1");
  CHECK(!c);
  bad.cadence = 2, bad.warmup = -1;
  CHECK_ERR(dit_step_cache_check(&bad), INVALID_ARGUMENT, "step_cache.warmup: expected a step count >= 0, found -1");
  bad.warmup = 0, bad.cooldown = -2;
  CHECK_ERR(dit_step_cache_check(&bad), INVALID_ARGUMENT, "step_cache.cooldown: expected a step count >= 0, found -2");
  bad = (dit_step_cache_options_t){.mode = DIT_STEP_CACHE_DELTA, .threshold = NAN};
  CHECK_ERR(dit_step_cache_check(&bad), INVALID_ARGUMENT, "step_cache.threshold");
  bad.mode = 7;
  CHECK_ERR(dit_step_cache_check(&bad), INVALID_ARGUMENT,
            "step_cache.mode: expected off (0), cadence (1), delta (2), easycache (3), teacache (4) or fbcache (5), found 7");
  bad = (dit_step_cache_options_t){.mode = DIT_STEP_CACHE_EASYCACHE, .threshold = -1};
  CHECK_ERR(dit_step_cache_check(&bad), INVALID_ARGUMENT, "step_cache.threshold: expected a finite number >= 0, found -1");
  CHECK_OK(dit_step_cache_parse("easycache:0.06", &o));
  CHECK(o.mode == DIT_STEP_CACHE_EASYCACHE && o.threshold == 0.06 && o.warmup == 3 && o.cooldown == 4);
  CHECK(!strcmp(dit_step_cache_describe(&o, d, sizeof d), "easycache:0.06"));
  CHECK_OK(dit_step_cache_parse("teacache:0.08", &o));
  CHECK(o.mode == DIT_STEP_CACHE_TEACACHE && o.threshold == 0.08);
  CHECK(!strcmp(dit_step_cache_describe(&o, d, sizeof d), "teacache:0.08"));
  CHECK_OK(dit_step_cache_parse("fbcache:0.12", &o));
  CHECK(o.mode == DIT_STEP_CACHE_FBCACHE && o.threshold == 0.12 && dit_step_cache_probes(&o));
  CHECK(!strcmp(dit_step_cache_describe(&o, d, sizeof d), "fbcache:0.12"));
  CHECK_OK(dit_step_cache_parse("easycache:0.06", &o));
  bad = (dit_step_cache_options_t){.mode = DIT_STEP_CACHE_DELTA, .threshold = 0.05};
  CHECK(!strcmp(dit_step_cache_describe(&bad, d, sizeof d), "delta:0.05"));
}

static void test_cadence(void) {
  dit_step_cache_options_t o = {.mode = DIT_STEP_CACHE_CADENCE, .cadence = 2, .warmup = 2, .cooldown = 1};
  check_skipped(&o, 10, -1, "3 5 7");
  check_skipped(&o, 20, -1, "3 5 7 9 11 13 15 17");
  o.warmup = 1;
  check_skipped(&o, 20, -1, "2 4 6 8 10 12 14 16 18");
  o.cadence = 3, o.warmup = 2;
  check_skipped(&o, 10, -1, "3 4 6 7");
  /* Without warmup the first two steps still run: extrapolation needs two predictions. */
  o.warmup = 0, o.cooldown = 0;
  check_skipped(&o, 7, -1, "2 4 5");
  o.cadence = 2;
  check_skipped(&o, 8, -1, "3 5 7");
  o.cooldown = 3;
  check_skipped(&o, 8, -1, "3");
  o.warmup = 8;
  check_skipped(&o, 8, -1, "");
  check_skipped(&o, 1, -1, "");
  /* Off: every step runs. */
  dit_step_cache_options_t off = {0};
  check_skipped(&off, 12, -1, "");

  /* Every combination against the rule. */
  int bad = 0;
  for (int steps = 1; steps <= 40; steps++)
    for (int w = 0; w <= 4; w++)
      for (int c = 0; c <= 3; c++)
        for (int n = 2; n <= 5; n++)
          for (int reset = -1; reset < steps; reset += 3) {
            o = (dit_step_cache_options_t){.mode = DIT_STEP_CACHE_CADENCE, .cadence = n, .warmup = w, .cooldown = c};
            int want[64], got[64];
            cadence_rule(steps, w, c, n, reset, want);
            run(&o, steps, reset, got);
            if (memcmp(want, got, sizeof(int) * (size_t)steps) && bad++ < 5)
              fprintf(stderr, "cadence:%d steps %d W %d C %d reset at %d differs from the rule\n", n, steps, w, c, reset);
          }
  CHECK_EQ_INT(bad, 0);
}

/* The expert switch: the two steps from the switch on run, whatever the cadence says. */
static void test_reset(void) {
  dit_step_cache_options_t o = {.mode = DIT_STEP_CACHE_CADENCE, .cadence = 2, .warmup = 0, .cooldown = 0};
  check_skipped(&o, 10, -1, "3 5 7 9");
  check_skipped(&o, 10, 4, "3 7 9");
  check_skipped(&o, 10, 6, "3 5 9");
  o.cadence = 3, o.warmup = 2, o.cooldown = 1;
  check_skipped(&o, 12, -1, "3 4 6 7 9 10");
  check_skipped(&o, 12, 3, "6 7 9 10");
  /* delta: r of the predictions before the switch does not carry over. */
  dit_step_cache_options_t d = {.mode = DIT_STEP_CACHE_DELTA, .threshold = 1e30, .warmup = 2, .cooldown = 1};
  check_skipped(&d, 12, -1, "2 4 6 8 10");
  check_skipped(&d, 12, 5, "2 4 7 9");
}

/* Extrapolation: P_i = P_{i-1} + (P_b - P_a) / (b - a) over the two latest full steps a < b. */
static void test_extrapolate(void) {
  dit_step_cache_options_t o = {.mode = DIT_STEP_CACHE_CADENCE, .cadence = 3, .warmup = 2, .cooldown = 1};
  dit_step_cache_t *c = NULL;
  CHECK_OK(dit_step_cache_create(&o, 12, 3, &c));
  if (!c) return;
  const float p0[3] = {1, 2, -1}, p1[3] = {2, 4, -1}, p2[3] = {4, 4, 0.5f}, p5[3] = {10, 5, 3.5f};
  float p[3];
  CHECK(dit_step_cache_full(c, 0));
  dit_step_cache_record(c, 0, p0);
  CHECK(dit_step_cache_full(c, 1));
  dit_step_cache_record(c, 1, p1);
  CHECK(dit_step_cache_full(c, 2));
  dit_step_cache_record(c, 2, p2);
  memcpy(p, p2, sizeof p);
  CHECK(!dit_step_cache_full(c, 3));
  dit_step_cache_extrapolate(c, p); /* + (p2 - p1) / 1 */
  CHECK(p[0] == 6 && p[1] == 4 && p[2] == 2);
  CHECK(!dit_step_cache_full(c, 4));
  dit_step_cache_extrapolate(c, p);
  CHECK(p[0] == 8 && p[1] == 4 && p[2] == 3.5f);
  CHECK(dit_step_cache_full(c, 5));
  dit_step_cache_record(c, 5, p5);
  memcpy(p, p5, sizeof p);
  CHECK(!dit_step_cache_full(c, 6));
  dit_step_cache_extrapolate(c, p); /* + (p5 - p2) / 3, in fp32 */
  CHECK(p[0] == 10.0f + 6.0f / 3.0f && p[1] == 5.0f + 1.0f / 3.0f && p[2] == 3.5f + 3.0f / 3.0f);
  dit_step_cache_destroy(c);
}

/* delta:T on predictions whose relative L1 change is chosen: r(p0, p1) = 0.05, then 0.5, 0.01. */
static void test_delta(void) {
  dit_step_cache_options_t o = {.mode = DIT_STEP_CACHE_DELTA, .threshold = 0.1, .warmup = 2, .cooldown = 1};
  dit_step_cache_t *c = NULL;
  CHECK_OK(dit_step_cache_create(&o, 10, 4, &c));
  if (!c) return;
  float p[4] = {1, -1, 2, -2};
  const float scale[10] = {1, 1.05f, 0, 1.5f, 1.01f, 0, 1, 1, 1, 1};
  const int want_full[10] = {1, 1, 0, 1, 1, 0, 1, 0, 1, 1};
  for (int i = 0; i < 10; i++) {
    const int full = dit_step_cache_full(c, i);
    CHECK_EQ_INT(full, want_full[i]);
    if (!full) continue;
    for (int j = 0; j < 4; j++) p[j] *= scale[i];
    dit_step_cache_record(c, i, p);
  }
  dit_step_cache_destroy(c);
  /* r = 0.25 / 4 = 0.0625 exactly: not below 0.0625, below 0.0626. */
  const float a[4] = {1, 1, 1, 1}, b[4] = {1.25f, 1, 1, 1};
  for (int k = 0; k < 2; k++) {
    o.threshold = k ? 0.0626 : 0.0625;
    CHECK_OK(dit_step_cache_create(&o, 10, 4, &c));
    if (!c) return;
    dit_step_cache_full(c, 0), dit_step_cache_record(c, 0, a);
    dit_step_cache_full(c, 1), dit_step_cache_record(c, 1, b);
    CHECK_EQ_INT(dit_step_cache_full(c, 2), !k);
    dit_step_cache_destroy(c);
  }
  /* T = 0 skips nothing; T huge skips every other step after warmup, never the cooldown. */
  o.threshold = 0;
  check_skipped(&o, 10, -1, "");
  o.threshold = 1e30;
  check_skipped(&o, 10, -1, "2 4 6 8");
  check_skipped(&o, 9, -1, "2 4 6");
  o.warmup = 0, o.cooldown = 0;
  check_skipped(&o, 7, -1, "2 4 6");
}

/* easycache:T on two-element latents x_i = (v, v) and predictions (p_i, p_i) chosen so that the
 * rates and estimates come out as worked by hand (W 2, C 1, 10 steps):
 *   x  10  9    8.5  8  7.5  7  5  4.5  4    3.5     (sum|x_i - x_{i-1}| = 2 at step 1, 4 at 6, else 1)
 *   p  1   1.5  1.2  2  2.5  3  4  4.2  4.4  5       (what a full step records)
 * T 0.3: k = 1/2 after step 1 (sum|P| 3): E = 1/6 at 2 (skip), 1/3 at 3 (full: k = 1/2, sum|P| 4),
 *        1/8 at 4, 1/4 at 5 (skips), 3/4 at 6 (full: k = 2/3, sum|P| 8), 1/12 at 7, 1/6 at 8, 9 cooldown;
 * T 0.2: the same to step 4, 1/4 at 5 (full: k = 1, sum|P| 6), 2/3 at 6 (full: k = 1/2, sum|P| 8), 7 8 skipped;
 * T 0.3 reset at 5: 5 and 6 run (k = 1/2 from them, sum|P| 8), 1/16 at 7, 1/8 at 8;
 * a skipped step's prediction is x_i + (P_b - x_b): step 2: 8.5 + 1.5 - 9 = 1; 4: 1.5; 5: 1; 7: 3.5; 8: 3. */
static const char *easy_run(double threshold, int reset_at, float *skipped_p) {
  static const float xs[10] = {10, 9, 8.5f, 8, 7.5f, 7, 5, 4.5f, 4, 3.5f}, ps[10] = {1, 1.5f, 1.2f, 2, 2.5f, 3, 4, 4.2f, 4.4f, 5};
  static char buf[256];
  dit_step_cache_options_t o = {.mode = DIT_STEP_CACHE_EASYCACHE, .threshold = threshold, .warmup = 2, .cooldown = 1};
  dit_step_cache_t *c = NULL;
  buf[0] = 0;
  CHECK_OK(dit_step_cache_create(&o, 10, 2, &c));
  if (!c) return buf;
  float p[2] = {0, 0};
  for (int i = 0; i < 10; i++) {
    const float x[2] = {xs[i], xs[i]};
    if (i == reset_at) dit_step_cache_reset(c);
    dit_step_cache_observe(c, x);
    if (dit_step_cache_full(c, i)) {
      p[0] = p[1] = ps[i];
      dit_step_cache_record(c, i, p);
      skipped_p[i] = NAN;
      continue;
    }
    dit_step_cache_extrapolate(c, p);
    CHECK(p[0] == p[1]);
    skipped_p[i] = p[0];
    snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%d", buf[0] ? " " : "", i);
  }
  dit_step_cache_destroy(c);
  return buf;
}

static void test_easycache(void) {
  float sp[10];
  const char *got = easy_run(0.3, -1, sp);
  CHECK(!strcmp(got, "2 4 5 7 8"));
  CHECK(sp[2] == 1 && sp[4] == 1.5f && sp[5] == 1 && sp[7] == 3.5f && sp[8] == 3);
  got = easy_run(0.2, -1, sp);
  CHECK(!strcmp(got, "2 4 7 8"));
  got = easy_run(0.3, 5, sp);
  CHECK(!strcmp(got, "2 4 7 8"));
  CHECK(sp[7] == 4.5f + (4 - 5) && sp[8] == 4 + (4 - 5)); /* from step 6, the latest full one */
  /* T = 0 skips nothing; T huge skips every step the warmup and cooldown leave. */
  CHECK(!strcmp(easy_run(0, -1, sp), ""));
  CHECK(!strcmp(easy_run(1e30, -1, sp), "2 3 4 5 6 7 8"));
  CHECK(!strcmp(easy_run(1e30, 4, sp), "2 3 6 7 8"));
  /* Latents and predictions that never move: the rate is 0 / 0, no number, and every step runs. */
  dit_step_cache_options_t o = {.mode = DIT_STEP_CACHE_EASYCACHE, .threshold = 1e30, .warmup = 2, .cooldown = 1};
  check_skipped(&o, 10, -1, "");
}

/* teacache on a one-element probe q: d_i = |q_i - q_{i-1}| / |q_{i-1}| is 0.1, 0.1, 0.0123, 0.0125,
 * 0.114, 0.0143, 0.0101, 0.122 for steps 1..8. With the identity and T = 0.05 (W 2, C 1): step 2
 * runs (0.1), 3 and 4 skip (0.0123, 0.0248), 5 runs (0.139), 6 and 7 skip, 8 runs, 9 is the cooldown.
 * With 4x: 3 skips (0.049), 4 runs (0.099), 5 and 6 run, 7 skips (0.041). A skipped step's
 * prediction is x_i + (P_b - x_b). */
static const char *probe_run(const dit_step_cache_options_t *o, const double *d, const double *coef, int k, float *skipped_p);

static const char *tea_run(double threshold, const double *coef, int k, float *skipped_p) {
  static const float qs[10] = {100, 90, 81, 80, 79, 70, 69, 68.3f, 60, 50};
  const dit_step_cache_options_t o = {.mode = DIT_STEP_CACHE_TEACACHE, .threshold = threshold, .warmup = 2, .cooldown = 1};
  double d[10];
  for (int i = 0; i < 10; i++) d[i] = i ? fabs((double)qs[i] - qs[i - 1]) / fabs((double)qs[i - 1]) : NAN;
  return probe_run(&o, d, coef, k, skipped_p);
}

static void test_teacache(void) {
  float sp[10];
  CHECK(!strcmp(tea_run(0.05, NULL, 0, sp), "3 4 6 7"));
  CHECK(sp[3] == 7 + (1.0f - 8) && sp[4] == 6 + (1.0f - 8) && sp[7] == 3 + (2.5f - 5)); /* b = 2, then 5 */
  const double four[2] = {4, 0}, below[2] = {-1, 0};
  CHECK(!strcmp(tea_run(0.05, four, 2, sp), "3 7"));
  /* T = 0 skips nothing, even where the polynomial dips below 0; T huge skips what W and C leave. */
  CHECK(!strcmp(tea_run(0, below, 2, sp), ""));
  CHECK(!strcmp(tea_run(0, NULL, 0, sp), ""));
  CHECK(!strcmp(tea_run(1e30, NULL, 0, sp), "2 3 4 5 6 7 8"));
  CHECK(!strcmp(tea_run(0.05, below, 2, sp), "2 3 4 5 6 7 8"));
  /* The published polynomials: FLUX.1's and Wan2.1's; the identity for others. */
  const double *coef;
  int k;
  CHECK(dit_step_cache_teacache_rescale("flux", &coef, &k) == 1 && k == 5 && coef[0] == 4.98651651e+02);
  CHECK(dit_step_cache_teacache_rescale("wan", &coef, &k) == 1 && k == 5 && coef[4] == 1.37887774e-01);
  CHECK(dit_step_cache_teacache_rescale("hunyuan", &coef, &k) == 0 && k == 2 && coef[0] == 1 && coef[1] == 0);
  /* A reset (another expert) starts over: two full steps before the next skip. */
  dit_step_cache_options_t o = {.mode = DIT_STEP_CACHE_TEACACHE, .threshold = 1e30, .warmup = 0, .cooldown = 0};
  dit_step_cache_t *c = NULL;
  CHECK_OK(dit_step_cache_create(&o, 6, 1, &c));
  if (!c) return;
  const float x = 1;
  int full[6];
  for (int i = 0; i < 6; i++) {
    if (i == 3) dit_step_cache_reset(c);
    dit_step_cache_probe(c, i == 0 || i == 3 ? NAN : 0);
    dit_step_cache_observe(c, &x);
    full[i] = dit_step_cache_full(c, i);
    if (full[i]) dit_step_cache_record(c, i, &x);
  }
  CHECK(full[0] && full[1] && !full[2] && full[3] && full[4] && !full[5]);
  dit_step_cache_destroy(c);
}

/* fbcache on given changes d_i (of the residual against the last full step's, as the runtime
 * measures them): skipped when d_i < T at a step W, C and two full steps allow; no accumulation, so
 * skips may follow one another; NaN runs. A skipped step's prediction is x_i + (P_b - x_b). */
static const char *fb_run(double threshold, const double *d, int warmup, float *skipped_p) {
  const dit_step_cache_options_t o = {.mode = DIT_STEP_CACHE_FBCACHE, .threshold = threshold, .warmup = warmup, .cooldown = 1};
  return probe_run(&o, d, NULL, 0, skipped_p);
}

/* A probing mode over 10 steps of given probe changes d (rescaled by coef when given): the skipped
 * steps, and each skipped step's prediction in skipped_p (NaN for full steps) with x_i = 10 - i and
 * P_i = i / 2 on full steps. */
static const char *probe_run(const dit_step_cache_options_t *o, const double *d, const double *coef, int k, float *skipped_p) {
  static char buf[256];
  dit_step_cache_t *c = NULL;
  buf[0] = 0;
  CHECK_OK(dit_step_cache_create(o, 10, 1, &c));
  if (!c) return buf;
  if (coef) dit_step_cache_set_rescale(c, coef, k);
  float p = 0;
  for (int i = 0; i < 10; i++) {
    const float x = 10.0f - (float)i;
    dit_step_cache_probe(c, d[i]);
    dit_step_cache_observe(c, &x);
    if (dit_step_cache_full(c, i)) {
      p = (float)i * 0.5f;
      dit_step_cache_record(c, i, &p);
      skipped_p[i] = NAN;
      continue;
    }
    dit_step_cache_extrapolate(c, &p);
    skipped_p[i] = p;
    snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%d", buf[0] ? " " : "", i);
  }
  dit_step_cache_destroy(c);
  return buf;
}

static void test_fbcache(void) {
  const double d[10] = {NAN, 0.5, 0.05, 0.08, 0.09, 0.2, 0.01, NAN, 0.02, 0.01};
  float sp[10];
  /* T 0.1: 2 3 4 below (consecutive skips), 5 runs, 6 skips, 7 NaN runs, 8 skips, 9 the cooldown. */
  CHECK(!strcmp(fb_run(0.1, d, 2, sp), "2 3 4 6 8"));
  CHECK(sp[2] == 8 + (0.5f - 9) && sp[4] == 6 + (0.5f - 9) && sp[6] == 4 + (2.5f - 5) && sp[8] == 2 + (3.5f - 3));
  CHECK(!strcmp(fb_run(0.06, d, 2, sp), "2 6 8"));
  /* The warmup holds, and the two full steps: W 0 still runs 0 and 1. */
  CHECK(!strcmp(fb_run(0.1, d, 4, sp), "4 6 8"));
  CHECK(!strcmp(fb_run(1e30, d, 0, sp), "2 3 4 5 6 8"));
  CHECK(!strcmp(fb_run(0, d, 2, sp), ""));
  /* The forecast: the fewest full steps, every step it may skip skipped. */
  dit_step_cache_options_t o = {.mode = DIT_STEP_CACHE_FBCACHE, .threshold = 0.1, .warmup = 2, .cooldown = 1};
  dit_step_cache_t *c = NULL;
  CHECK_OK(dit_step_cache_create(&o, 12, 1, &c));
  if (c) CHECK_EQ_INT(dit_step_cache_forecast_full(c, 0, 12), 3); /* 0 1 11 */
  dit_step_cache_destroy(c);
}

/* What the swap paces by: exact for cadence, the fewest for delta and easycache. */
static void test_forecast(void) {
  dit_step_cache_options_t o = {.mode = DIT_STEP_CACHE_CADENCE, .cadence = 3, .warmup = 2, .cooldown = 1};
  dit_step_cache_t *c = NULL;
  CHECK_OK(dit_step_cache_create(&o, 12, 1, &c));
  if (!c) return;
  const float p = 1;
  CHECK_EQ_INT(dit_step_cache_forecast_full(c, 0, 12), 6); /* 0 1 2 5 8 11 */
  CHECK_EQ_INT(dit_step_cache_forecast_full(c, 0, 4), 3);
  for (int i = 0; i < 4; i++)
    if (dit_step_cache_full(c, i)) dit_step_cache_record(c, i, &p);
  CHECK_EQ_INT(dit_step_cache_forecast_full(c, 4, 9), 2); /* 5 8 */
  CHECK_EQ_INT(dit_step_cache_forecast_full(c, 4, 5), 0);
  dit_step_cache_reset(c);
  CHECK_EQ_INT(dit_step_cache_forecast_full(c, 4, 9), 3); /* 4 5 (after the reset) 8 */
  dit_step_cache_destroy(c);
  dit_step_cache_options_t d = {.mode = DIT_STEP_CACHE_DELTA, .threshold = 0.5, .warmup = 2, .cooldown = 1};
  CHECK_OK(dit_step_cache_create(&d, 12, 1, &c));
  if (!c) return;
  CHECK_EQ_INT(dit_step_cache_forecast_full(c, 0, 12), 7); /* 0 1 3 5 7 9 11 */
  dit_step_cache_destroy(c);
  d.mode = DIT_STEP_CACHE_EASYCACHE;
  CHECK_OK(dit_step_cache_create(&d, 12, 1, &c));
  if (!c) return;
  CHECK_EQ_INT(dit_step_cache_forecast_full(c, 0, 12), 3); /* 0 1 11 */
  CHECK_EQ_INT(dit_step_cache_forecast_full(c, 4, 11), 2); /* 4 5: no full prediction yet */
  dit_step_cache_destroy(c);
  dit_step_cache_options_t off = {0};
  CHECK_OK(dit_step_cache_create(&off, 12, 1, &c));
  if (c) CHECK_EQ_INT(dit_step_cache_forecast_full(c, 3, 12), 9);
  dit_step_cache_destroy(c);
}

int main(void) {
  test_parse();
  test_cadence();
  test_reset();
  test_extrapolate();
  test_delta();
  test_easycache();
  test_teacache();
  test_fbcache();
  test_forecast();
  return check_summary("test_step_cache");
}
