/* Step-cache profiles (cache_profile.h): the fit, the statistics, the gate and its threshold
 * replay, and the file's writer and checking reader. */
#include "runtime/cache_profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/json.h"
#include "base/strbuf.h"

#define PEARSON_OF "max(poly(d),0),o"

/* ---- the numbers ---- */

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

dit_status_t dit_cache_fit_poly(const double *x, const double *y, size_t n, int degree, double *coef) {
  enum { K = 9 };
  if (degree < 0 || degree + 1 > K) return DIT_ERR(INVALID_ARGUMENT, "fit: degree: expected 0..%d, found %d", K - 1, degree);
  const int k = degree + 1;
  double *xs = malloc(n * sizeof *xs + 1);
  if (!xs) return DIT_ERR(RESOURCE_EXHAUSTED, "fit: out of memory for %zu points", n);
  memcpy(xs, x, n * sizeof *xs);
  qsort(xs, n, sizeof *xs, cmp_double);
  size_t distinct = n > 0;
  for (size_t i = 1; i < n; i++) distinct += xs[i] != xs[i - 1];
  const double scale = n ? fmax(fabs(xs[0]), fabs(xs[n - 1])) : 0;
  free(xs);
  if (distinct < (size_t)k)
    return DIT_ERR(FAILED_PRECONDITION, "fit: a polynomial of degree %d needs at least %d distinct probe changes, found %zu", degree, k,
                   distinct);
  /* The normal equations in u = x / scale (powers of a small x would leave them near singular),
   * lowest degree first: a[r][c] = sum u^(r+c), b[r] = sum u^r y. */
  double a[K][K + 1] = {{0}};
  for (size_t i = 0; i < n; i++) {
    double pw[2 * K], u = x[i] / scale;
    pw[0] = 1;
    for (int j = 1; j < 2 * k - 1; j++) pw[j] = pw[j - 1] * u;
    for (int r = 0; r < k; r++) {
      for (int c = 0; c < k; c++) a[r][c] += pw[r + c];
      a[r][k] += pw[r] * y[i];
    }
  }
  /* Gaussian elimination with partial pivoting, then back substitution. */
  for (int c = 0; c < k; c++) {
    int p = c;
    for (int r = c + 1; r < k; r++)
      if (fabs(a[r][c]) > fabs(a[p][c])) p = r;
    if (!(fabs(a[p][c]) > 1e-300)) return DIT_ERR(FAILED_PRECONDITION, "fit: the normal equations are singular (column %d)", c);
    for (int j = 0; j <= k; j++) {
      const double t = a[c][j];
      a[c][j] = a[p][j], a[p][j] = t;
    }
    for (int r = c + 1; r < k; r++) {
      const double f = a[r][c] / a[c][c];
      for (int j = c; j <= k; j++) a[r][j] -= f * a[c][j];
    }
  }
  for (int r = k - 1; r >= 0; r--) {
    double v = a[r][k];
    for (int j = r + 1; j < k; j++) v -= a[r][j] * coef[degree - j];
    coef[degree - r] = v / a[r][r]; /* coefficient of u^r */
  }
  for (int r = 0; r < k; r++) coef[degree - r] /= pow(scale, r); /* of x^r */
  return DIT_OK;
}

double dit_cache_poly(const double *coef, int k, double x) {
  double v = 0;
  for (int j = 0; j < k; j++) v = v * x + coef[j];
  return v;
}

double dit_cache_pearson(const double *x, const double *y, size_t n) {
  if (n < 2) return NAN;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; i++) mx += x[i], my += y[i];
  mx /= (double)n, my /= (double)n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < n; i++) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (!(sxx > 0 && syy > 0)) return NAN;
  const double r = sxy / sqrt(sxx * syy);
  return r > 1 ? 1 : r < -1 ? -1 : r; /* rounding may step past */
}

double dit_cache_lag1(const dit_cache_profile_t *p) {
  double m = 0, den = 0, num = 0;
  size_t n = 0;
  for (size_t i = 0; i < (size_t)p->runs * (size_t)p->steps; i++)
    if (isfinite(p->o[i])) m += p->o[i], n++;
  if (n < 2) return NAN;
  m /= (double)n;
  for (int r = 0; r < p->runs; r++) {
    const double *o = p->o + (size_t)r * (size_t)p->steps;
    for (int i = 0; i < p->steps; i++) {
      if (!isfinite(o[i])) continue;
      den += (o[i] - m) * (o[i] - m);
      if (i + 1 < p->steps && isfinite(o[i + 1])) num += (o[i] - m) * (o[i + 1] - m);
    }
  }
  if (!(den > 0)) return NAN;
  const double r = num / den;
  return r > 1 ? 1 : r < -1 ? -1 : r;
}

/* teacache's increment at step i of run r: max(poly(d_i), 0), NaN without d_i. */
static double tea_signal(const dit_cache_profile_t *p, const double *d, int i) {
  const double v = dit_cache_poly(p->rescale, DIT_CACHE_PROFILE_DEGREE + 1, d[i]);
  return v < 0 ? 0 : v;
}

/* The full steps of one run under o, the controller's rule on the run's signals. A step i > 0
 * without a probe change followed an expert switch: the controller reset there. */
static int replay_run(const dit_cache_profile_t *p, const dit_step_cache_options_t *o, int run) {
  const double *d = p->d + (size_t)run * (size_t)p->steps, *ov = p->o + (size_t)run * (size_t)p->steps;
  int nfull = 0, prev_full = 1, full_steps = 0, last = -1, r_below = 0;
  double acc = 0;
  for (int i = 0; i < p->steps; i++) {
    if (i > 0 && isnan(d[i])) nfull = 0, r_below = 0, acc = 0;
    int full = 1;
    if (i < o->warmup || i >= p->steps - o->cooldown || nfull < 2) full = 1;
    else if (o->mode == DIT_STEP_CACHE_CADENCE) full = (i - o->warmup) % o->cadence == 0;
    else if (o->mode == DIT_STEP_CACHE_DELTA) full = !prev_full || !r_below;
    else if (o->mode == DIT_STEP_CACHE_TEACACHE) {
      acc += tea_signal(p, d, i);
      full = !(acc < o->threshold); /* NaN runs */
    }
    prev_full = full;
    if (!full) continue;
    acc = 0;
    full_steps++;
    if (nfull < 2) nfull++;
    if (o->mode == DIT_STEP_CACHE_DELTA && nfull == 2) {
      double r = 0;
      for (int j = last + 1; j <= i; j++) r += ov[j];
      r_below = r < o->threshold;
    }
    last = i;
  }
  return full_steps;
}

double dit_cache_replay(const dit_cache_profile_t *p, const dit_step_cache_options_t *o) {
  double sum = 0;
  for (int r = 0; r < p->runs; r++) sum += replay_run(p, o, r);
  return p->runs ? sum / p->runs : NAN;
}

/* The threshold of teacache or delta (o->mode) whose replayed full steps come closest to goal.
 * Between two consecutive sums of a contiguous window of the run's signals (what the rule compares
 * with T) the decisions cannot change, so the candidates are 0, the midpoints of the sorted sums
 * and twice the largest; at most 4096 of them, evenly by rank, and windows up to the length that
 * keeps the sums to about 2^20. */
static dit_status_t pick_threshold(const dit_cache_profile_t *p, dit_step_cache_options_t *o, double goal) {
  const size_t steps = (size_t)p->steps, budget = (size_t)1 << 20;
  size_t span = budget / ((size_t)p->runs * steps);
  if (span < 1) span = 1;
  size_t cap = (size_t)p->runs * steps * (span < steps ? span : steps), n = 0;
  double *sums = malloc(cap * sizeof *sums + 1);
  if (!sums) return DIT_ERR(RESOURCE_EXHAUSTED, "calibrate-cache: out of memory for %zu window sums", cap);
  for (int r = 0; r < p->runs; r++) {
    const double *d = p->d + (size_t)r * steps, *ov = p->o + (size_t)r * steps;
    for (size_t a = 0; a < steps; a++) {
      double s = 0;
      for (size_t b = a; b < steps && b - a < span && n < cap; b++) {
        const double v = o->mode == DIT_STEP_CACHE_TEACACHE ? tea_signal(p, d, (int)b) : ov[b];
        if (!isfinite(v)) break;
        sums[n++] = s += v;
      }
    }
  }
  qsort(sums, n, sizeof *sums, cmp_double);
  size_t u = 0;
  for (size_t i = 0; i < n; i++)
    if (!u || sums[i] != sums[u - 1]) sums[u++] = sums[i];
  /* Candidate k: 0 for k = 0, the midpoint of sums k - 1 and k, twice the largest for k = u. */
  const size_t cands = u + 1, stride = (cands + 4095) / 4096;
  double best_t = 0, best_gap = INFINITY;
  for (size_t c = 0; c < cands; c = c + stride < cands || c == cands - 1 ? c + stride : cands - 1) { /* the last always */
    o->threshold = c == 0 ? 0 : c < u ? 0.5 * (sums[c - 1] + sums[c]) : 2 * sums[u - 1];
    const double gap = fabs(dit_cache_replay(p, o) - goal);
    if (gap < best_gap) best_gap = gap, best_t = o->threshold;
  }
  free(sums);
  o->threshold = best_t;
  return DIT_OK;
}

/* The gate's mode for the statistics. */
static dit_step_cache_mode_t gate_mode(double pearson, double lag1) {
  return pearson >= DIT_CACHE_GATE_PEARSON ? DIT_STEP_CACHE_TEACACHE
         : lag1 >= DIT_CACHE_GATE_LAG1     ? DIT_STEP_CACHE_DELTA
                                           : DIT_STEP_CACHE_CADENCE;
}

/* The (d, o) pairs where both exist (x, y: runs x steps entries each); their count. */
static size_t pairs(const dit_cache_profile_t *p, double *x, double *y) {
  size_t n = 0;
  for (size_t i = 0; i < (size_t)p->runs * (size_t)p->steps; i++)
    if (isfinite(p->d[i]) && isfinite(p->o[i])) {
      if (x) x[n] = p->d[i], y[n] = p->o[i];
      n++;
    }
  return n;
}

dit_status_t dit_cache_profile_fit(dit_cache_profile_t *p) {
  const size_t total = (size_t)p->runs * (size_t)p->steps;
  double *x = calloc(total + 1, sizeof *x), *y = calloc(total + 1, sizeof *y);
  dit_status_t s = x && y ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "calibrate-cache: out of memory");
  const size_t n = s ? 0 : pairs(p, x, y);
  p->points = (int)n;
  if (!s) s = dit_status_annotate(dit_cache_fit_poly(x, y, n, DIT_CACHE_PROFILE_DEGREE, p->rescale),
                                  "calibrate-cache: %zu steps with both a probe change and an output change over %d run%s (more "
                                  "--steps or --runs give more)", n, p->runs, p->runs == 1 ? "" : "s");
  for (size_t i = 0; !s && i < n; i++) {
    const double v = dit_cache_poly(p->rescale, DIT_CACHE_PROFILE_DEGREE + 1, x[i]);
    x[i] = v < 0 ? 0 : v; /* what teacache accumulates */
  }
  if (!s) {
    p->pearson = dit_cache_pearson(x, y, n);
    p->lag1 = dit_cache_lag1(p);
    dit_step_cache_options_t *o = &p->policy;
    memset(o, 0, sizeof *o);
    o->mode = gate_mode(p->pearson, p->lag1);
    o->warmup = p->warmup, o->cooldown = p->cooldown;
    const double goal = p->steps / p->target_speedup;
    if (o->mode != DIT_STEP_CACHE_CADENCE) s = pick_threshold(p, o, goal);
    else {
      int best = 2;
      double fewest = INFINITY;
      for (int nn = 2; nn <= (p->steps > 2 ? p->steps : 2); nn++) {
        o->cadence = nn;
        const double f = dit_cache_replay(p, o);
        if (f <= goal + 1e-9) {
          best = nn;
          break;
        }
        if (f < fewest) fewest = f, best = nn;
      }
      o->cadence = best;
    }
    p->forwards = dit_cache_replay(p, o);
  }
  free(x);
  free(y);
  return s;
}

dit_status_t dit_cache_profile_alloc(dit_cache_profile_t *p, int runs) {
  const size_t total = (size_t)runs * (size_t)p->steps;
  p->runs = runs;
  p->seeds = calloc((size_t)runs + 1, sizeof *p->seeds);
  p->d = malloc(total * sizeof *p->d + 1);
  p->o = malloc(total * sizeof *p->o + 1);
  if (!p->seeds || !p->d || !p->o) {
    dit_cache_profile_free(p);
    return DIT_ERR(RESOURCE_EXHAUSTED, "cache profile: out of memory for %d runs of %d steps", runs, p->steps);
  }
  for (size_t i = 0; i < total; i++) p->d[i] = p->o[i] = NAN;
  return DIT_OK;
}

void dit_cache_profile_free(dit_cache_profile_t *p) {
  free(p->seeds);
  free(p->d);
  free(p->o);
  p->seeds = NULL, p->d = p->o = NULL;
  p->runs = 0;
}

/* ---- the file ---- */

static const char *const kSamplers[] = {"unipc", "euler", "flow-match", NULL};
static const char *const kModes[] = {"teacache", "delta", "cadence", NULL};
static const dit_step_cache_mode_t kModeOf[] = {DIT_STEP_CACHE_TEACACHE, DIT_STEP_CACHE_DELTA, DIT_STEP_CACHE_CADENCE};

/* A double that reads back to itself; null for NaN (and the infinities JSON cannot hold). */
static void put_num(dit_strbuf_t *b, double v) {
  char t[40];
  snprintf(t, sizeof t, "%.15g", v); /* the shorter form where it reads back the same */
  if (strtod(t, NULL) != v) snprintf(t, sizeof t, "%.17g", v);
  dit_strbuf_puts(b, isfinite(v) ? t : "null");
}

static void put_array(dit_strbuf_t *b, const double *v, int n) {
  dit_strbuf_puts(b, "[");
  for (int i = 0; i < n; i++) {
    if (i) dit_strbuf_puts(b, ", ");
    put_num(b, v[i]);
  }
  dit_strbuf_puts(b, "]");
}

dit_status_t dit_cache_profile_to_json(const dit_cache_profile_t *p, char **out) {
  dit_strbuf_t b = {0};
  dit_strbuf_printf(&b, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"bundle\": ", DIT_CACHE_PROFILE_FORMAT, DIT_CACHE_PROFILE_VERSION);
  dit_strbuf_json_string(&b, p->bundle);
  dit_strbuf_puts(&b, ",\n  \"family\": ");
  dit_strbuf_json_string(&b, p->family);
  dit_strbuf_puts(&b, ",\n  \"sampler\": ");
  dit_strbuf_json_string(&b, p->sampler);
  dit_strbuf_puts(&b, ",\n  \"shift\": ");
  put_num(&b, p->shift);
  dit_strbuf_puts(&b, ",\n  \"guidance\": ");
  put_num(&b, p->guidance);
  dit_strbuf_puts(&b, ",\n  \"true_cfg\": ");
  put_num(&b, p->true_cfg);
  dit_strbuf_printf(&b, ",\n  \"steps\": %d,\n  \"warmup\": %d,\n  \"cooldown\": %d,\n  \"target_speedup\": ", p->steps, p->warmup,
                    p->cooldown);
  put_num(&b, p->target_speedup);
  dit_strbuf_puts(&b, ",\n  \"runs\": [");
  for (int r = 0; r < p->runs; r++) {
    dit_strbuf_printf(&b, "%s\n    {\"seed\": %llu,\n     \"probe_change\": ", r ? "," : "", (unsigned long long)p->seeds[r]);
    put_array(&b, p->d + (size_t)r * (size_t)p->steps, p->steps);
    dit_strbuf_puts(&b, ",\n     \"output_change\": ");
    put_array(&b, p->o + (size_t)r * (size_t)p->steps, p->steps);
    dit_strbuf_puts(&b, "}");
  }
  dit_strbuf_printf(&b, "\n  ],\n  \"fit\": {\"degree\": %d, \"points\": %d, \"rescale\": ", DIT_CACHE_PROFILE_DEGREE, p->points);
  put_array(&b, p->rescale, DIT_CACHE_PROFILE_DEGREE + 1);
  dit_strbuf_puts(&b, ", \"pearson\": ");
  put_num(&b, p->pearson);
  dit_strbuf_puts(&b, ", \"pearson_of\": \"" PEARSON_OF "\", \"lag1_autocorrelation\": ");
  put_num(&b, p->lag1);
  dit_strbuf_puts(&b, "},\n  \"gate\": {\"pearson_min\": ");
  put_num(&b, DIT_CACHE_GATE_PEARSON);
  dit_strbuf_puts(&b, ", \"lag1_min\": ");
  put_num(&b, DIT_CACHE_GATE_LAG1);
  const dit_step_cache_options_t *o = &p->policy;
  const char *mode = o->mode == DIT_STEP_CACHE_TEACACHE ? "teacache" : o->mode == DIT_STEP_CACHE_DELTA ? "delta" : "cadence";
  dit_strbuf_printf(&b, ", \"mode\": \"%s\", ", mode);
  if (o->mode == DIT_STEP_CACHE_CADENCE) dit_strbuf_printf(&b, "\"cadence\": %d", o->cadence);
  else {
    dit_strbuf_puts(&b, "\"threshold\": ");
    put_num(&b, o->threshold);
  }
  dit_strbuf_puts(&b, ", \"forwards\": ");
  put_num(&b, p->forwards);
  dit_strbuf_puts(&b, "}\n}\n");
  if (b.oom) {
    dit_strbuf_free(&b);
    return DIT_ERR(RESOURCE_EXHAUSTED, "cache profile: out of memory");
  }
  *out = b.p;
  return DIT_OK;
}

/* A number in [lo, hi] or null (NaN). */
static dit_status_t num_or_null(const dit_json_t *v, double lo, double hi, double *out) {
  if (cJSON_IsNull(v->v)) {
    *out = NAN;
    return DIT_OK;
  }
  return dit_json_as_num(v, lo, hi, out);
}

/* An array of exactly n numbers in [lo, hi] or nulls (NaN) into out; null_first: entry 0 must be
 * null (step 0 has no previous step). */
static dit_status_t num_array(const dit_json_t *obj, const char *key, int n, double lo, double hi, int null_first, double *out) {
  dit_json_t a, e;
  size_t len = 0;
  DIT_RETURN_IF(dit_json_array(obj, key, (size_t)n, &a, &len));
  if (len != (size_t)n) return dit_json_error(&a, DIT_CODE_INVALID_ARGUMENT, "expected %d entries (one per step), found %zu", n, len);
  dit_json_iter_t it;
  dit_json_iter_init(&a, &it);
  for (int i = 0; dit_json_iter_next(&it, &e); i++) {
    if (i == 0 && null_first && !cJSON_IsNull(e.v))
      return dit_json_error(&e, DIT_CODE_INVALID_ARGUMENT, "expected null (step 0 has no previous step), found %s", dit_json_type_name(e.v));
    DIT_RETURN_IF(null_first ? num_or_null(&e, lo, hi, &out[i]) : dit_json_as_num(&e, lo, hi, &out[i]));
  }
  return DIT_OK;
}

static dit_status_t parse_run(const dit_json_t *run, dit_cache_profile_t *p, int r) {
  static const char *const keys[] = {"seed", "probe_change", "output_change", NULL};
  DIT_RETURN_IF(dit_json_expect_object(run));
  DIT_RETURN_IF(dit_json_check_keys(run, keys));
  DIT_RETURN_IF(dit_json_u64(run, "seed", &p->seeds[r]));
  DIT_RETURN_IF(num_array(run, "probe_change", p->steps, 0, 1e300, 1, p->d + (size_t)r * (size_t)p->steps));
  return num_array(run, "output_change", p->steps, 0, 1e300, 1, p->o + (size_t)r * (size_t)p->steps);
}

static dit_status_t parse_fit(const dit_json_t *root, dit_cache_profile_t *p) {
  static const char *const keys[] = {"degree", "points", "rescale", "pearson", "pearson_of", "lag1_autocorrelation", NULL};
  dit_json_t f, v;
  int degree = 0;
  const char *of = NULL;
  DIT_RETURN_IF(dit_json_object(root, "fit", &f));
  DIT_RETURN_IF(dit_json_check_keys(&f, keys));
  DIT_RETURN_IF(dit_json_i32(&f, "degree", DIT_CACHE_PROFILE_DEGREE, DIT_CACHE_PROFILE_DEGREE, &degree));
  const int both = (int)pairs(p, NULL, NULL);
  DIT_RETURN_IF(dit_json_i32(&f, "points", 0, DIT_CACHE_PROFILE_MAX_RUNS * DIT_CACHE_PROFILE_MAX_STEPS, &p->points));
  if (p->points != both) {
    dit_json_get(&f, "points", &v);
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected %d (the steps of the runs with both changes), found %d", both, p->points);
  }
  DIT_RETURN_IF(num_array(&f, "rescale", DIT_CACHE_PROFILE_DEGREE + 1, -1e300, 1e300, 0, p->rescale));
  DIT_RETURN_IF(dit_json_get(&f, "pearson", &v));
  DIT_RETURN_IF(num_or_null(&v, -1, 1, &p->pearson));
  DIT_RETURN_IF(dit_json_str(&f, "pearson_of", 64, false, &of));
  if (strcmp(of, PEARSON_OF)) {
    char q[96];
    dit_json_quote(of, q);
    dit_json_get(&f, "pearson_of", &v);
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected \"" PEARSON_OF "\", found %s", q);
  }
  DIT_RETURN_IF(dit_json_get(&f, "lag1_autocorrelation", &v));
  return num_or_null(&v, -1, 1, &p->lag1);
}

static dit_status_t parse_gate(const dit_json_t *root, dit_cache_profile_t *p) {
  static const char *const keys[] = {"pearson_min", "lag1_min", "mode", "threshold", "cadence", "forwards", NULL};
  dit_json_t g, v;
  double pmin, lmin;
  int mode;
  DIT_RETURN_IF(dit_json_object(root, "gate", &g));
  DIT_RETURN_IF(dit_json_check_keys(&g, keys));
  DIT_RETURN_IF(dit_json_num(&g, "pearson_min", DIT_CACHE_GATE_PEARSON, DIT_CACHE_GATE_PEARSON, &pmin));
  DIT_RETURN_IF(dit_json_num(&g, "lag1_min", DIT_CACHE_GATE_LAG1, DIT_CACHE_GATE_LAG1, &lmin));
  DIT_RETURN_IF(dit_json_enum(&g, "mode", kModes, &mode));
  dit_step_cache_options_t *o = &p->policy;
  memset(o, 0, sizeof *o);
  o->mode = kModeOf[mode];
  o->warmup = p->warmup, o->cooldown = p->cooldown;
  const dit_step_cache_mode_t want = gate_mode(p->pearson, p->lag1);
  if (o->mode != want) {
    dit_json_get(&g, "mode", &v);
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected \"%s\" (the gate's choice for pearson %g, lag-1 autocorrelation %g), found \"%s\"",
                          kModes[want == DIT_STEP_CACHE_TEACACHE ? 0 : want == DIT_STEP_CACHE_DELTA ? 1 : 2], p->pearson, p->lag1, kModes[mode]);
  }
  const int cad = o->mode == DIT_STEP_CACHE_CADENCE;
  if (dit_json_has(&g, cad ? "threshold" : "cadence")) {
    dit_json_get(&g, cad ? "threshold" : "cadence", &v);
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected no %s with mode \"%s\" (it takes %s), found one", cad ? "threshold" : "cadence",
                          kModes[mode], cad ? "cadence" : "threshold");
  }
  if (cad) DIT_RETURN_IF(dit_json_i32(&g, "cadence", 2, p->steps > 2 ? p->steps : 2, &o->cadence));
  else DIT_RETURN_IF(dit_json_num(&g, "threshold", 0, 1e300, &o->threshold));
  DIT_RETURN_IF(dit_json_num(&g, "forwards", 0, p->steps, &p->forwards));
  const double replayed = dit_cache_replay(p, o);
  if (!(fabs(replayed - p->forwards) <= 1e-9 * p->steps)) {
    dit_json_get(&g, "forwards", &v);
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected %.17g (the policy replayed on the runs), found %.17g", replayed, p->forwards);
  }
  return DIT_OK;
}

static dit_status_t parse_root(const dit_json_t *root, dit_cache_profile_t *p) {
  static const char *const keys[] = {"format", "version", "bundle", "family", "sampler", "shift", "guidance", "true_cfg", "steps",
                                     "warmup", "cooldown", "target_speedup", "runs", "fit", "gate", NULL};
  dit_json_t v, runs, run;
  const char *format = NULL;
  int version = 0, sampler = 0;
  size_t n_runs = 0;
  DIT_RETURN_IF(dit_json_check_keys(root, keys));
  DIT_RETURN_IF(dit_json_str(root, "format", 64, false, &format));
  if (strcmp(format, DIT_CACHE_PROFILE_FORMAT)) {
    char q[96];
    dit_json_quote(format, q);
    dit_json_get(root, "format", &v);
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected \"" DIT_CACHE_PROFILE_FORMAT "\", found %s", q);
  }
  DIT_RETURN_IF(dit_json_i32(root, "version", DIT_CACHE_PROFILE_VERSION, DIT_CACHE_PROFILE_VERSION, &version));
  DIT_RETURN_IF(dit_json_str_copy(root, "bundle", p->bundle, sizeof p->bundle, false));
  if (strlen(p->bundle) != DIT_HASH_HEX - 1 || strspn(p->bundle, "0123456789abcdef") != DIT_HASH_HEX - 1) {
    char q[96];
    dit_json_quote(p->bundle, q);
    dit_json_get(root, "bundle", &v);
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected a bundle identity (%d lowercase hex digits), found %s", DIT_HASH_HEX - 1, q);
  }
  DIT_RETURN_IF(dit_json_str_copy(root, "family", p->family, sizeof p->family, false));
  DIT_RETURN_IF(dit_json_enum(root, "sampler", kSamplers, &sampler));
  snprintf(p->sampler, sizeof p->sampler, "%s", kSamplers[sampler]);
  DIT_RETURN_IF(dit_json_num(root, "shift", 0, 1e6, &p->shift));
  DIT_RETURN_IF(dit_json_num(root, "guidance", 0, 1e6, &p->guidance));
  DIT_RETURN_IF(dit_json_num(root, "true_cfg", 1, 1e6, &p->true_cfg));
  DIT_RETURN_IF(dit_json_i32(root, "steps", 1, DIT_CACHE_PROFILE_MAX_STEPS, &p->steps));
  DIT_RETURN_IF(dit_json_i32(root, "warmup", 0, p->steps, &p->warmup));
  DIT_RETURN_IF(dit_json_i32(root, "cooldown", 0, p->steps, &p->cooldown));
  DIT_RETURN_IF(dit_json_num(root, "target_speedup", 1, 1e6, &p->target_speedup));
  if (!(p->target_speedup > 1)) {
    dit_json_get(root, "target_speedup", &v);
    return dit_json_error(&v, DIT_CODE_OUT_OF_RANGE, "expected a number in (1, 1000000], found 1");
  }
  DIT_RETURN_IF(dit_json_array(root, "runs", DIT_CACHE_PROFILE_MAX_RUNS, &runs, &n_runs));
  if (n_runs == 0) return dit_json_error(&runs, DIT_CODE_INVALID_ARGUMENT, "expected 1 to %d runs, found none", DIT_CACHE_PROFILE_MAX_RUNS);
  DIT_RETURN_IF(dit_cache_profile_alloc(p, (int)n_runs));
  dit_json_iter_t it;
  dit_json_iter_init(&runs, &it);
  for (int r = 0; dit_json_iter_next(&it, &run); r++) DIT_RETURN_IF(parse_run(&run, p, r));
  DIT_RETURN_IF(parse_fit(root, p));
  return parse_gate(root, p);
}

dit_status_t dit_cache_profile_parse(const char *text, size_t len, const char *what, dit_cache_profile_t *out) {
  memset(out, 0, sizeof *out);
  dit_json_doc_t *doc = NULL;
  DIT_RETURN_IF(dit_json_parse(text, len, what, &doc));
  dit_json_t root;
  dit_status_t s = dit_json_root(doc, &root);
  if (!s) s = parse_root(&root, out);
  dit_json_doc_free(doc);
  if (s) dit_cache_profile_free(out);
  return s;
}

dit_status_t dit_cache_profile_load(const char *path, dit_cache_profile_t *out) {
  char *text = NULL;
  size_t len = 0;
  memset(out, 0, sizeof *out);
  DIT_RETURN_IF(dit_file_read(path, (size_t)256 << 20, &text, &len));
  dit_status_t s = dit_cache_profile_parse(text, len, path, out);
  free(text);
  return s;
}

dit_status_t dit_cache_profile_write(const char *path, const dit_cache_profile_t *p) {
  char *text = NULL;
  DIT_RETURN_IF(dit_cache_profile_to_json(p, &text));
  dit_status_t s = dit_file_write_atomic(path, text, strlen(text));
  free(text);
  return s;
}
