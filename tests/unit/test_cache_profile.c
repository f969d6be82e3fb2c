/* Step-cache profiles: the polynomial fit recovers a known polynomial, the statistics' values on
 * hand-computed cases, the gate's three branches, the threshold replay against the controller
 * itself and the choice against a scan, the file's round trip and each of its refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/cache_profile.h"

static const char kBundle[] = "0123456789abcdef0123456789abcdef";

static void test_fit(void) {
  const double want[5] = {2, -1, 0.5, 3, 0.1};
  double x[20], y[20], got[5];
  for (int scale = 0; scale < 2; scale++) { /* changes of a few percent, and of order one */
    for (int i = 0; i < 20; i++) {
      x[i] = (scale ? 0.05 : 0.001) * (1 + i);
      y[i] = dit_cache_poly(want, 5, x[i]);
    }
    CHECK_OK(dit_cache_fit_poly(x, y, 20, 4, got));
    for (int i = 0; i < 20; i++) CHECK_NEAR(dit_cache_poly(got, 5, x[i]), y[i], 1e-9 * (1 + fabs(y[i])));
    if (scale)
      for (int j = 0; j < 5; j++) CHECK_NEAR(got[j], want[j], 1e-6 * (1 + fabs(want[j])));
  }
  /* Exact through five points (a square system). */
  CHECK_OK(dit_cache_fit_poly(x, y, 5, 4, got));
  for (int i = 0; i < 5; i++) CHECK_NEAR(dit_cache_poly(got, 5, x[i]), y[i], 1e-9 * (1 + fabs(y[i])));
  /* A line through noisy points: the least-squares line (0, 1, 2 at 0, 1, 2 with 1 raised by 3). */
  const double lx[3] = {0, 1, 2}, ly[3] = {0, 4, 2};
  double line[2];
  CHECK_OK(dit_cache_fit_poly(lx, ly, 3, 1, line));
  CHECK_NEAR(line[0], 1, 1e-12);
  CHECK_NEAR(line[1], 1, 1e-12);
  const double dup[6] = {1, 1, 2, 2, 3, 3};
  CHECK_ERR(dit_cache_fit_poly(dup, dup, 6, 4, got), FAILED_PRECONDITION, "needs at least 5 distinct probe changes, found 3");
}

static void test_statistics(void) {
  const double x[4] = {1, 2, 3, 4}, y[4] = {1, 3, 2, 4}, c[4] = {2, 2, 2, 2}, r[4] = {4, 3, 2, 1};
  CHECK_NEAR(dit_cache_pearson(x, y, 4), 0.8, 1e-12);
  CHECK_NEAR(dit_cache_pearson(x, r, 4), -1, 1e-12);
  CHECK(isnan(dit_cache_pearson(x, c, 4)));
  CHECK(isnan(dit_cache_pearson(x, y, 1)));
  /* o = 1 2 3 4 after a NaN: mean 2.5, sum of squares 5, lag-1 products 0.75 - 0.25 + 0.75. A second
   * run's pairs do not reach into the first's. */
  dit_cache_profile_t p = {.steps = 5};
  CHECK_OK(dit_cache_profile_alloc(&p, 1));
  for (int i = 1; i < 5; i++) p.o[i] = i;
  CHECK_NEAR(dit_cache_lag1(&p), 0.25, 1e-12);
  dit_cache_profile_free(&p);
  p.steps = 3;
  CHECK_OK(dit_cache_profile_alloc(&p, 2));
  p.o[1] = 1, p.o[2] = 2, p.o[4] = 3, p.o[5] = 4; /* mean 2.5; pairs (1,2) and (3,4) only */
  CHECK_NEAR(dit_cache_lag1(&p), (1.5 * 0.5 + 0.5 * 1.5) / 5, 1e-12);
  dit_cache_profile_free(&p);
}

/* A profile of `steps` steps, one run, W 2, C 1, target 2, with d and o from the functions. */
static void make(dit_cache_profile_t *p, int steps, double (*fd)(int), double (*fo)(int)) {
  memset(p, 0, sizeof *p);
  memcpy(p->bundle, kBundle, sizeof kBundle);
  snprintf(p->family, sizeof p->family, "wan");
  snprintf(p->sampler, sizeof p->sampler, "unipc");
  p->shift = 3, p->guidance = 5, p->true_cfg = 1;
  p->steps = steps, p->warmup = 2, p->cooldown = 1, p->target_speedup = 2;
  CHECK_OK(dit_cache_profile_alloc(p, 1));
  p->seeds[0] = 7;
  for (int i = 1; i < steps; i++) p->d[i] = fd(i), p->o[i] = fo(i);
}

static unsigned lcg_state;
static double lcg(void) {
  lcg_state = lcg_state * 1103515245u + 12345u;
  return (double)((lcg_state >> 8) & 0xffff) / 65536.0;
}
static double d_ramp(int i) { return 0.01 * i; }
static double o_square(int i) { return 0.02 * i + 0.001 * i * i; }
static double d_noise(int i) { return (void)i, 0.05 + 0.1 * lcg(); }
static double o_ramp(int i) { return 0.01 * i; }
static double o_alternate(int i) { return i % 2 ? 0.1 : 0.3; }

static void test_gate(void) {
  dit_cache_profile_t p;
  make(&p, 40, d_ramp, o_square); /* o a polynomial of d: the fit is exact */
  CHECK_OK(dit_cache_profile_fit(&p));
  CHECK(p.points == 39 && p.pearson > 0.999 && p.policy.mode == DIT_STEP_CACHE_TEACACHE);
  dit_cache_profile_free(&p);
  lcg_state = 1;
  make(&p, 60, d_noise, o_ramp); /* the probe says nothing, the output drifts smoothly */
  CHECK_OK(dit_cache_profile_fit(&p));
  CHECK(p.pearson < 0.8 && p.lag1 >= 0.7 && p.policy.mode == DIT_STEP_CACHE_DELTA);
  dit_cache_profile_free(&p);
  lcg_state = 2;
  make(&p, 60, d_noise, o_alternate); /* nor does the last output change */
  CHECK_OK(dit_cache_profile_fit(&p));
  CHECK(p.pearson < 0.8 && p.lag1 < 0.7 && p.policy.mode == DIT_STEP_CACHE_CADENCE);
  /* cadence: the smallest N whose full steps reach 60 / 2, every smaller one short of it. */
  const dit_step_cache_options_t chosen = p.policy;
  CHECK(p.forwards <= 30);
  dit_step_cache_options_t o = chosen;
  for (o.cadence = 2; o.cadence < chosen.cadence; o.cadence++) CHECK(dit_cache_replay(&p, &o) > 30);
  dit_cache_profile_free(&p);
  /* Too few points for the fit. */
  make(&p, 5, d_ramp, o_square);
  CHECK_ERR(dit_cache_profile_fit(&p), FAILED_PRECONDITION, "4 steps with both a probe change and an output change over 1 run");
  dit_cache_profile_free(&p);
}

static double d_tenth(int i) { return (void)i, 0.1; }

/* The real controller's full steps over 10 steps whose probes and predictions change by 0.1 relative
 * each step (q_i = p_i = 1.1^i), under o with the identity rescaling. */
static int controller_full(const dit_step_cache_options_t *o) {
  dit_step_cache_t *c = NULL;
  CHECK_OK(dit_step_cache_create(o, 10, 1, &c));
  if (!c) return -1;
  const double identity[2] = {1, 0};
  dit_step_cache_set_rescale(c, identity, 2);
  int full = 0;
  float v = 1, prev = 0, x = 0;
  for (int i = 0; i < 10; prev = v, v *= 1.1f, i++) {
    dit_step_cache_probe(c, i ? dit_step_cache_relative_l1(&prev, &v, 1) : NAN);
    dit_step_cache_observe(c, &x);
    if (dit_step_cache_full(c, i)) full++, dit_step_cache_record(c, i, &v);
  }
  dit_step_cache_destroy(c);
  return full;
}

static void test_replay(void) {
  dit_cache_profile_t p;
  make(&p, 10, d_tenth, d_tenth);
  const double identity[5] = {0, 0, 0, 1, 0};
  memcpy(p.rescale, identity, sizeof identity);
  /* teacache:0.25: 0 1 full, then 0.1 accumulates: 4 and 7 reach it, 9 the cooldown. */
  dit_step_cache_options_t o = {.mode = DIT_STEP_CACHE_TEACACHE, .threshold = 0.25, .warmup = 2, .cooldown = 1};
  CHECK_NEAR(dit_cache_replay(&p, &o), 5, 0);
  CHECK_EQ_INT(controller_full(&o), 5);
  /* delta:0.15: a skip after every r of one step (0.1), a full step after it (r over two: 0.2). */
  o.mode = DIT_STEP_CACHE_DELTA;
  o.threshold = 0.15;
  CHECK_NEAR(dit_cache_replay(&p, &o), 7, 0);
  CHECK_EQ_INT(controller_full(&o), 7);
  o.mode = DIT_STEP_CACHE_CADENCE, o.cadence = 3;
  CHECK_NEAR(dit_cache_replay(&p, &o), 6, 0); /* 0 1 2 5 8 9 */
  CHECK_EQ_INT(controller_full(&o), 6);
  for (double t = 0.025; t < 1; t += 0.05) { /* between the sums of 0.1 (at them float and double rounding part) */
    o.mode = DIT_STEP_CACHE_TEACACHE, o.threshold = t;
    CHECK_EQ_INT((int)dit_cache_replay(&p, &o), controller_full(&o));
  }
  /* An expert switch (no probe change at step 5) resets as the controller does: 5 and 6 run. */
  p.d[5] = NAN;
  o.threshold = 10;
  CHECK_NEAR(dit_cache_replay(&p, &o), 5, 0); /* 0 1, 5 6, 9 */
  dit_cache_profile_free(&p);

  /* The chosen threshold's full steps are the closest to steps / 2 of a fine scan. */
  make(&p, 40, d_ramp, o_square);
  CHECK_OK(dit_cache_profile_fit(&p));
  o = p.policy;
  const double gap = fabs(p.forwards - 20);
  for (double t = 0; t < 3; t += 0.0005) {
    o.threshold = t;
    CHECK(fabs(dit_cache_replay(&p, &o) - 20) >= gap);
  }
  CHECK(gap <= 1);
  dit_cache_profile_free(&p);
}

/* Parses text (with one replacement of `from` by `to`) and expects the message. */
#define expect_refused(text, from, to, needle) expect_refused_code(text, from, to, DIT_CODE_INVALID_ARGUMENT, needle)
static void expect_refused_code(const char *text, const char *from, const char *to, dit_code_t code, const char *needle) {
  const char *at = strstr(text, from);
  CHECK(at != NULL);
  if (!at) {
    fprintf(stderr, "  '%s' not in the profile\n", from);
    return;
  }
  size_t n = strlen(text) + strlen(to) + 1;
  char *t = malloc(n);
  snprintf(t, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  dit_cache_profile_t q;
  dit_status_t s = dit_cache_profile_parse(t, strlen(t), "p.json", &q);
  CHECK(s && dit_status_code(s) == code && strstr(dit_status_message(s), needle));
  if (s && !(dit_status_code(s) == code && strstr(dit_status_message(s), needle)))
    fprintf(stderr, "  expected code %d and '%s', got %d: %s\n", (int)code, needle, (int)dit_status_code(s), dit_status_message(s));
  if (!s) dit_cache_profile_free(&q);
  dit_status_free(s);
  free(t);
}

static void test_file(void) {
  dit_cache_profile_t p, q;
  make(&p, 12, d_ramp, o_square);
  p.runs = 1;
  CHECK_OK(dit_cache_profile_fit(&p));
  char *text = NULL;
  CHECK_OK(dit_cache_profile_to_json(&p, &text));
  if (!text) return;
  CHECK_OK(dit_cache_profile_parse(text, strlen(text), "p.json", &q));
  CHECK(!strcmp(q.bundle, p.bundle) && !strcmp(q.family, "wan") && !strcmp(q.sampler, "unipc") && q.steps == 12 && q.runs == 1);
  CHECK(q.seeds && q.seeds[0] == 7 && q.warmup == 2 && q.cooldown == 1 && q.target_speedup == 2 && q.shift == 3 && q.guidance == 5);
  CHECK(q.d && !memcmp(q.d + 1, p.d + 1, 11 * sizeof(double)) && !memcmp(q.o + 1, p.o + 1, 11 * sizeof(double)) && isnan(q.d[0]));
  CHECK(!memcmp(q.rescale, p.rescale, sizeof p.rescale) && q.points == 11 && q.pearson == p.pearson && q.lag1 == p.lag1);
  CHECK(q.policy.mode == p.policy.mode && q.policy.threshold == p.policy.threshold && q.forwards == p.forwards);
  dit_cache_profile_free(&q);
  /* Written atomically, and loaded. */
  char path[4200];
  snprintf(path, sizeof path, "%s/p.json", check_tmpdir("cache_profile"));
  CHECK_OK(dit_cache_profile_write(path, &p));
  CHECK_OK(dit_cache_profile_load(path, &q));
  CHECK(q.policy.threshold == p.policy.threshold);
  dit_cache_profile_free(&q);
  CHECK_ERR(dit_cache_profile_load("/nonexistent/p.json", &q), NOT_FOUND, "/nonexistent/p.json");

  expect_refused(text, "\"ditrun cache profile\"", "\"other\"", "p.json: field 'format': expected \"ditrun cache profile\", found \"other\"");
  expect_refused(text, "\"bundle\": \"0123", "\"bundle\": \"X123", "field 'bundle': expected a bundle identity (32 lowercase hex digits)");
  expect_refused(text, "\"steps\": 12", "\"steps\": 12, \"extra\": 1", "extra");
  expect_refused(text, "\"probe_change\": [null", "\"probe_change\": [0.5", "field 'runs[0].probe_change[0]': expected null (step 0 has no previous step)");
  expect_refused_code(text, "\"probe_change\": [null, ", "\"probe_change\": [null, 1, ", DIT_CODE_OUT_OF_RANGE,
                      "field 'runs[0].probe_change': more than 12 entries");
  expect_refused(text, "\"probe_change\": [null, 0.01, ", "\"probe_change\": [null, ", "field 'runs[0].probe_change': expected 12 entries (one per step), found 11");
  expect_refused_code(text, "\"probe_change\": [null, 0.01, ", "\"probe_change\": [null, -0.01, ", DIT_CODE_OUT_OF_RANGE,
                      "field 'runs[0].probe_change[1]'");
  expect_refused(text, "\"pearson_of\": \"max(poly(d),0),o\"", "\"pearson_of\": \"d,o\"", "field 'fit.pearson_of': expected \"max(poly(d),0),o\", found \"d,o\"");
  expect_refused(text, "\"points\": 11", "\"points\": 10", "field 'fit.points': expected 11 (the steps of the runs with both changes), found 10");
  expect_refused(text, "\"mode\": \"teacache\"", "\"mode\": \"delta\"", "field 'gate.mode': expected \"teacache\" (the gate's choice for pearson");
  expect_refused(text, "\"threshold\"", "\"cadence\": 2, \"threshold\"", "field 'gate.cadence': expected no cadence with mode \"teacache\"");
  expect_refused(text, "\"forwards\": ", "\"forwards\": 1.5, \"x\": ", "x");
  char fw[64];
  snprintf(fw, sizeof fw, "\"forwards\": %.17g", p.forwards);
  expect_refused(text, fw, "\"forwards\": 1.5", "field 'gate.forwards': expected");
  /* Out of range: the reader's own codes. */
  dit_cache_profile_t r;
  char *t2 = strdup(text);
  char *v = strstr(t2, "\"version\": 1");
  if (v) v[11] = '2';
  CHECK_ERR(dit_cache_profile_parse(t2, strlen(t2), "p.json", &r), OUT_OF_RANGE, "field 'version'");
  free(t2);
  t2 = strdup(text);
  v = strstr(t2, "\"target_speedup\": 2");
  if (v) v[18] = '1';
  CHECK_ERR(dit_cache_profile_parse(t2, strlen(t2), "p.json", &r), OUT_OF_RANGE, "field 'target_speedup': expected a number in (1, 1000000], found 1");
  free(t2);
  CHECK_ERR(dit_cache_profile_parse("{}", 2, "p.json", &r), NOT_FOUND, "p.json: field 'format'");
  free(text);
  dit_cache_profile_free(&p);
}

int main(void) {
  test_fit();
  test_statistics();
  test_gate();
  test_replay();
  test_file();
  return check_summary("test_cache_profile");
}
