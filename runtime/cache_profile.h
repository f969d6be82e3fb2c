/* A step-cache profile: what `ditrun calibrate-cache` measured on a bundle's exact generates and
 * the policy it chose from that, read by `ditrun generate --step-cache auto --cache-profile P`.
 *
 * Per calibration run and step i >= 1 (step 0 has no previous step; a step after an expert switch
 * no previous probe of its expert: those are NaN, null in the file):
 *   d_i  teacache's probe change: the relative L1 change of block 0's modulated norm from step i-1;
 *   o_i  the output change: sum|P_i - P_{i-1}| / sum|P_{i-1}| of the guided predictions.
 * From the steps where both exist, over every run:
 *   - the rescaling polynomial of degree 4 (TeaCache's fits' degree), least squares of o on d;
 *   - Pearson's correlation of (max(poly(d), 0), o): the estimate teacache accumulates against the
 *     change it stands for. The linear (d, o) correlation would mark down a monotone but curved
 *     relation the polynomial straightens (it can only be lower: the fit includes the line); with
 *     few points the fit's own flexibility flatters it, so calibrate with at least ~20 points;
 *   - the lag-1 autocorrelation of o (consecutive steps of one run, about the mean of every o):
 *     how well one step's output change predicts the next, which delta's rule relies on.
 * The gate: teacache with the fitted polynomial when Pearson >= 0.8, else delta when the lag-1
 * autocorrelation >= 0.7, else cadence (NaN statistics pass neither test). Its threshold replays
 * the controller's rule (step_cache.h) on the recorded signals, each run on its own, and takes the
 * one whose mean full steps per run come closest to steps / target_speedup (ties: the smaller
 * threshold); cadence takes the smallest N whose full steps reach it (at most steps / target),
 * else the N with the fewest. The replay sees the exact run's signals: teacache accumulates
 * max(poly(d_i), 0); delta's r after full step b takes the sum of o_j over a < j <= b (a the full
 * step before; o_b itself when b = a + 1), the exact run's path between the two predictions. */
#ifndef DIT_RUNTIME_CACHE_PROFILE_H
#define DIT_RUNTIME_CACHE_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "artifacts/manifest.h"
#include "base/status.h"
#include "runtime/step_cache.h"

#define DIT_CACHE_PROFILE_FORMAT "ditrun cache profile"
#define DIT_CACHE_PROFILE_VERSION 1
#define DIT_CACHE_PROFILE_DEGREE 4
#define DIT_CACHE_PROFILE_MAX_RUNS 64
#define DIT_CACHE_PROFILE_MAX_STEPS 10000
#define DIT_CACHE_GATE_PEARSON 0.8
#define DIT_CACHE_GATE_LAG1 0.7

typedef struct dit_cache_profile {
  /* what it was made for */
  char bundle[DIT_HASH_HEX]; /* the bundle's identity */
  char family[32];
  char sampler[16]; /* "unipc", "euler", or "flow-match" (a generate section's schedule) */
  double shift;     /* unipc/euler's shift (0 for flow-match) */
  double guidance, true_cfg;
  int steps, warmup, cooldown;
  double target_speedup; /* > 1 */
  /* what was measured: runs x steps, row by row; NaN where a step has none */
  int runs;
  uint64_t *seeds; /* runs */
  double *d, *o;
  /* what was derived */
  double rescale[DIT_CACHE_PROFILE_DEGREE + 1]; /* highest degree first */
  int points;                                   /* steps with both d and o, every run */
  double pearson, lag1;                         /* NaN when undefined (no variance) */
  dit_step_cache_options_t policy;              /* the gate's choice, with warmup and cooldown */
  double forwards;                              /* its mean full steps per run in the replay */
} dit_cache_profile_t;

/* Least squares fit of y on a polynomial of x of `degree` (<= 8), coef[degree + 1] highest degree
 * first: the normal equations on x scaled to [-1, 1], solved in double with partial pivoting.
 * Refuses fewer than degree + 1 distinct x. */
dit_status_t dit_cache_fit_poly(const double *x, const double *y, size_t n, int degree, double *coef);
/* coef[k] (highest degree first) at x, by Horner's rule. */
double dit_cache_poly(const double *coef, int k, double x);
/* Pearson's correlation of n pairs; NaN when either side has no variance or n < 2. */
double dit_cache_pearson(const double *x, const double *y, size_t n);
/* The lag-1 autocorrelation of the o of p's runs (NaN entries skipped, pairs within a run). */
double dit_cache_lag1(const dit_cache_profile_t *p);
/* The mean full steps per run of policy o replayed on p's signals (teacache: with p->rescale). */
double dit_cache_replay(const dit_cache_profile_t *p, const dit_step_cache_options_t *o);

/* From p's identity fields, steps, warmup, cooldown, target_speedup, runs, seeds, d and o: the fit,
 * the statistics, the gate's policy and its forwards. */
dit_status_t dit_cache_profile_fit(dit_cache_profile_t *p);
/* Allocates p's seeds, d and o for `runs` runs of p->steps steps (d, o NaN). */
dit_status_t dit_cache_profile_alloc(dit_cache_profile_t *p, int runs);
void dit_cache_profile_free(dit_cache_profile_t *p);

/* The file: JSON (caller frees *out with free). */
dit_status_t dit_cache_profile_to_json(const dit_cache_profile_t *p, char **out);
/* Parses and checks every field (errors: "<what>: field '<path>': expected ..., found ..."); the
 * policy must be the gate's for the statistics and its forwards the replay's. On success the
 * caller owns *out (dit_cache_profile_free). */
dit_status_t dit_cache_profile_parse(const char *text, size_t len, const char *what, dit_cache_profile_t *out);
dit_status_t dit_cache_profile_load(const char *path, dit_cache_profile_t *out);
/* Writes the file atomically (a temporary file renamed over it: nothing partial on error). */
dit_status_t dit_cache_profile_write(const char *path, const dit_cache_profile_t *p);

#endif
