/* The DiTango planner (runtime/ditango.h) against hand-computed cases of Algorithm 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/ditango.h"

static const dit_ditango_options_t kOpts = {.ratio = 0.5, .eps_local = 0.5, .warmup = 2};

/* One layer, two remote groups; the numbers of every step worked out in the comments. */
static void test_algorithm(void) {
  dit_ditango_t *p = NULL;
  CHECK_OK(dit_ditango_create(&kOpts, 8, 1, 2, &p));
  if (!p) return;
  uint8_t c[2];
  int anchor = 0;
  CHECK_EQ_INT(dit_ditango_epsilon(p), 0); /* R > 0: 0 until the first anchor errors */
  /* step 0: nothing cached, an anchor whatever the drift. alpha = {5/10, 20/10}, w = {0.2, 0.4}. */
  CHECK_OK(dit_ditango_decide(p, 0, 0, 123, c, &anchor));
  CHECK(anchor && c[0] == DIT_DITANGO_COMPUTE && c[1] == DIT_DITANGO_COMPUTE);
  CHECK(isnan(dit_ditango_ase(p, 0, 0, 0)));
  const double n0[2] = {5, 20}, w0[2] = {0.2, 0.4};
  CHECK_OK(dit_ditango_anchor(p, 0, 10, n0, w0));
  /* step 1 (warm-up): D = 1, ASE = {0.2*0.5*1, 0.4*2*1} = {0.1, 0.8}: the history; no step counted
   * yet, so q = 1 - R = 0.5, index floor(0.5 * 1) = 0: eps = 0.1. */
  CHECK_OK(dit_ditango_decide(p, 1, 0, 1, c, &anchor));
  CHECK(anchor && c[0] && c[1]);
  CHECK_NEAR(dit_ditango_ase(p, 1, 0, 0), 0.1, 1e-12);
  CHECK_NEAR(dit_ditango_ase(p, 1, 0, 1), 0.8, 1e-12);
  CHECK_NEAR(dit_ditango_epsilon(p), 0.1, 1e-12);
  CHECK_OK(dit_ditango_anchor(p, 0, 10, n0, w0));
  /* step 2: D = 0.3: ASE = {0.03, 0.24}; not all over 0.1, local 0.3 <= 0.5 * 10: group 1 reused,
   * group 2 computed (its t_c drift becomes 0.3). */
  CHECK_OK(dit_ditango_decide(p, 2, 0, 0.3, c, &anchor));
  CHECK(!anchor && c[0] == DIT_DITANGO_REUSE && c[1] == DIT_DITANGO_COMPUTE);
  CHECK_NEAR(dit_ditango_ase(p, 2, 0, 1), 0.24, 1e-12);
  /* step 3: D = 0.6: ASE = {0.06, 0.8 * (0.6 - 0.3)} = {0.06, 0.24}: the same decisions. */
  CHECK_OK(dit_ditango_decide(p, 3, 0, 0.6, c, &anchor));
  CHECK(!anchor && !c[0] && c[1]);
  CHECK_NEAR(dit_ditango_ase(p, 3, 0, 0), 0.06, 1e-12);
  CHECK_NEAR(dit_ditango_ase(p, 3, 0, 1), 0.24, 1e-12);
  int64_t computed = 0, decided = 0;
  dit_ditango_counts(p, &computed, &decided);
  CHECK_EQ_INT(computed, 2);
  CHECK_EQ_INT(decided, 4);
  /* step 4 (r = 2/4 = R at its start: eps stays 0.1): D = 1.2: ASE = {0.12, 0.8 * 0.6} = {0.12, 0.48},
   * both over 0.1: an anchor. History {0.1, 0.8, 0.12, 0.48}, r = 4/6: q = 0.5 + 4 * (1/6) > 1,
   * clamped to 1: the largest, eps = 0.8. New statistics: alpha = {2/4, 4/4}, w = {0.5, 0.25}. */
  CHECK_OK(dit_ditango_decide(p, 4, 0, 1.2, c, &anchor));
  CHECK(anchor && c[0] && c[1]);
  CHECK_NEAR(dit_ditango_epsilon(p), 0.8, 1e-12);
  /* a step before the anchor's statistics is refused */
  CHECK_ERR(dit_ditango_decide(p, 5, 0, 1, c, &anchor), INVALID_ARGUMENT, "anchor's statistics were not given");
  const double n1[2] = {2, 4}, w1[2] = {0.5, 0.25};
  CHECK_OK(dit_ditango_anchor(p, 0, 4, n1, w1));
  CHECK_ERR(dit_ditango_anchor(p, 0, 4, n1, w1), INVALID_ARGUMENT, "no anchor is due");
  /* step 5: D = 3 > 0.5 * 4: the local drift anchors although no ASE = {0.75, 0.75} passes 0.8;
   * history of 6, r = 6/8: q clamped to 1 again, eps = 0.8. */
  CHECK_OK(dit_ditango_decide(p, 5, 0, 3, c, &anchor));
  CHECK(anchor && c[0] && c[1]);
  CHECK_NEAR(dit_ditango_epsilon(p), 0.8, 1e-12);
  CHECK_OK(dit_ditango_anchor(p, 0, 4, n1, w1));
  /* step 6: D = 1: ASE = {0.25, 0.25} <= 0.8: both reused. */
  CHECK_OK(dit_ditango_decide(p, 6, 0, 1, c, &anchor));
  CHECK(!anchor && !c[0] && !c[1]);
  dit_ditango_counts(p, &computed, &decided);
  CHECK_EQ_INT(computed, 6);
  CHECK_EQ_INT(decided, 10);
  /* order and range */
  CHECK_ERR(dit_ditango_decide(p, 5, 0, 1, c, &anchor), INVALID_ARGUMENT, "step 5: expected 6..7");
  CHECK_ERR(dit_ditango_decide(p, 6, 0, 1, c, &anchor), INVALID_ARGUMENT, "already decided");
  CHECK_ERR(dit_ditango_decide(p, 7, 1, 1, c, &anchor), INVALID_ARGUMENT, "layer 1: expected 0..0");
  CHECK_ERR(dit_ditango_decide(p, 7, 0, -1, c, &anchor), INVALID_ARGUMENT, "drift -1");
  /* step 7: between anchors eps follows r = 6/10: q = 0.5 + 4 * 0.1 = 0.9, index floor(0.9 * 5) = 4 of
   * {0.1, 0.12, 0.48, 0.75, 0.75, 0.8}: eps = 0.75; D = 1.5: ASE = {0.375, 0.375}: reused. */
  CHECK_OK(dit_ditango_decide(p, 7, 0, 1.5, c, &anchor));
  CHECK_NEAR(dit_ditango_epsilon(p), 0.75, 1e-12);
  CHECK(!anchor && !c[0] && !c[1]);
  CHECK_NEAR(dit_ditango_ase(p, 7, 0, 1), 0.375, 1e-12);
  dit_ditango_destroy(p);
}

/* R = 1 computes everything at every step (each an anchor); R = 0 reuses outside anchors. */
static void test_extremes(void) {
  dit_ditango_options_t o = kOpts;
  o.ratio = 1;
  dit_ditango_t *p = NULL;
  CHECK_OK(dit_ditango_create(&o, 5, 2, 3, &p));
  uint8_t c[3];
  int anchor = 0, all = 1;
  const double n[3] = {1, 1, 1}, w[3] = {0.1, 0.1, 0.1};
  for (int t = 0; p && t < 5; t++)
    for (int l = 0; l < 2; l++) {
      CHECK_OK(dit_ditango_decide(p, t, l, 1e-9, c, &anchor));
      all &= anchor && c[0] && c[1] && c[2];
      CHECK_OK(dit_ditango_anchor(p, l, 1, n, w));
    }
  CHECK(all);
  int64_t computed = 0, decided = 0;
  if (p) dit_ditango_counts(p, &computed, &decided);
  CHECK_EQ_INT(computed, 3 * 2 * 3);
  CHECK_EQ_INT(decided, 3 * 2 * 3);
  dit_ditango_destroy(p);

  o.ratio = 0, o.warmup = 1;
  CHECK_OK(dit_ditango_create(&o, 4, 1, 3, &p));
  if (!p) return;
  CHECK(isinf(dit_ditango_epsilon(p)));
  CHECK_OK(dit_ditango_decide(p, 0, 0, 0, c, &anchor));
  CHECK_OK(dit_ditango_anchor(p, 0, 1, n, w));
  CHECK_OK(dit_ditango_decide(p, 1, 0, 0.4, c, &anchor)); /* 0.4 <= 0.5 * 1: no anchor */
  CHECK(!anchor && !c[0] && !c[1] && !c[2]);
  CHECK_OK(dit_ditango_decide(p, 2, 0, 0.6, c, &anchor)); /* the local drift still anchors */
  CHECK(anchor && c[0] && c[1] && c[2]);
  CHECK(isinf(dit_ditango_epsilon(p)));
  dit_ditango_destroy(p);
}

static void test_options(void) {
  dit_ditango_options_t o = kOpts;
  o.ratio = 1.5;
  CHECK_ERR(dit_ditango_check(&o), INVALID_ARGUMENT, "--reuse-ratio: the share of remote attention recomputed: expected a number in [0, 1], found 1.5");
  o.ratio = NAN;
  CHECK_ERR(dit_ditango_check(&o), INVALID_ARGUMENT, "--reuse-ratio");
  o = kOpts, o.eps_local = 0;
  CHECK_ERR(dit_ditango_check(&o), INVALID_ARGUMENT, "--reuse-eps-local: the local drift that forces an anchor: expected a finite number > 0, found 0");
  o = kOpts, o.warmup = 0;
  CHECK_ERR(dit_ditango_check(&o), INVALID_ARGUMENT, "--reuse-warmup: full steps first: expected >= 1");
  dit_ditango_t *p = NULL;
  CHECK_ERR(dit_ditango_create(&kOpts, 4, 1, 0, &p), INVALID_ARGUMENT, "remote groups >= 1");
  CHECK(!p);
  CHECK_OK(dit_ditango_create(&kOpts, 4, 1, 1, &p));
  uint8_t c[1];
  int anchor = 0;
  const double bad_n[1] = {-1}, w[1] = {0.5}, n[1] = {1}, bad_w[1] = {2};
  CHECK_OK(dit_ditango_decide(p, 0, 0, 0, c, &anchor));
  CHECK_ERR(dit_ditango_anchor(p, 0, 1, bad_n, w), INVALID_ARGUMENT, "group 1: norm -1 and weight 0.5");
  CHECK_ERR(dit_ditango_anchor(p, 0, 1, n, bad_w), INVALID_ARGUMENT, "weight in [0, 1]");
  CHECK_ERR(dit_ditango_anchor(p, 0, NAN, n, w), INVALID_ARGUMENT, "local norm nan");
  dit_ditango_destroy(p);
}

/* A run of two layers over 6 steps, its report as text. */
static char *run_report(double measured) {
  dit_ditango_t *p = NULL;
  CHECK_OK(dit_ditango_create(&kOpts, 6, 2, 2, &p));
  if (!p) return NULL;
  uint8_t c[2];
  int anchor = 0;
  const double n[2] = {3, 1}, w[2] = {0.3, 0.1};
  for (int t = 0; t < 6; t++)
    for (int l = 0; l < 2; l++) {
      CHECK_OK(dit_ditango_decide(p, t, l, 0.1 * t * (l + 1), c, &anchor));
      if (anchor) CHECK_OK(dit_ditango_anchor(p, l, 2, n, w));
      for (int g = 0; g < 2; g++)
        if (!c[g]) dit_ditango_measured(p, t, l, g, measured);
    }
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK_OK(dit_ditango_report(p, f));
  fclose(f);
  dit_ditango_destroy(p);
  return text;
}

static void test_report(void) {
  char *a = run_report(0.25), *b = run_report(0.25);
  CHECK(a && b && !strcmp(a, b)); /* the same decisions give the same bytes */
  if (a) {
    const char *head = "{\"format\": \"ditango-report\", \"version\": 1, \"ratio\": 0.5, \"eps_local\": 0.5, \"warmup\": 2,";
    CHECK(!strncmp(a, head, strlen(head)));
    CHECK(strstr(a, "{\"step\": 5, \"layers\": ["));
    CHECK(strstr(a, "\"decision\": \"reuse\""));
    CHECK(strstr(a, "\"error\": 0.25"));
    CHECK(strstr(a, "{\"group\": 1, \"decision\": \"compute\", \"ase\": null, \"error\": null}")); /* step 0 */
  }
  free(a), free(b);
}

int main(void) {
  test_algorithm();
  test_extremes();
  test_options();
  test_report();
  return check_summary("test_ditango");
}
