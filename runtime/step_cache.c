/* The step-cache controller (step_cache.h): the decision per step, the two most recent full
 * predictions, and the extrapolation from them (easycache: the reuse of the last transformation). */
#include "runtime/step_cache.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dit_step_cache {
  dit_step_cache_options_t o;
  int steps;
  size_t n;
  float *pa, *pb; /* the full predictions of steps a < b */
  int a, b;
  int nfull;      /* full predictions since the start or the last reset, at most 2 counted */
  int prev_full;  /* the step decided last ran in full */
  int r_below;    /* delta: the latest r was below the threshold */
  /* easycache */
  float *xb, *xprev; /* the latents of full step b and of the step observed last */
  int have_prev;     /* xprev holds a step's latents */
  double dx;         /* sum|x_i - x_{i-1}| of the step observed last */
  double k;          /* the transformation rate between the two most recent full steps */
  double pb_l1;      /* sum|P_b| */
  double acc;        /* E, the predicted change accumulated since the last full step */
  /* teacache, fbcache */
  double probe_rel;  /* the change of the step probed last: NaN when there was no previous signal */
  double rescale[8]; /* the rescaling polynomial, highest degree first */
  int rescale_k;
};

#define SPEC_EXPECTED \
  "expected off, cadence:N (N an integer >= 2), delta:T, easycache:T, teacache:T or fbcache:T (T a number >= 0)"

dit_status_t dit_step_cache_parse(const char *spec, dit_step_cache_options_t *o) {
  if (!spec) return DIT_ERR(INVALID_ARGUMENT, SPEC_EXPECTED ", found nothing");
  if (!strcmp(spec, "off")) {
    o->mode = DIT_STEP_CACHE_OFF;
    return DIT_OK;
  }
  const char *colon = strchr(spec, ':');
  const size_t kw = colon ? (size_t)(colon - spec) : 0;
  const int cadence = kw == 7 && !strncmp(spec, "cadence", 7), delta = kw == 5 && !strncmp(spec, "delta", 5),
            easy = kw == 9 && !strncmp(spec, "easycache", 9), tea = kw == 8 && !strncmp(spec, "teacache", 8),
            fb = kw == 7 && !strncmp(spec, "fbcache", 7);
  char *end = NULL;
  errno = 0;
  const double v = cadence || delta || easy || tea || fb ? strtod(colon + 1, &end) : NAN;
  if (!(cadence || delta || easy || tea || fb) || errno || end == colon + 1 || *end)
    return DIT_ERR(INVALID_ARGUMENT, SPEC_EXPECTED ", found '%s'", spec);
  if (cadence && !(v >= 2 && v <= 1e6 && v == (double)(int)v))
    return DIT_ERR(INVALID_ARGUMENT, "%s: N is a step count: expected an integer >= 2 (1 would skip nothing), found %s",
                   spec, colon + 1);
  if (!cadence && !(v >= 0 && isfinite(v)))
    return DIT_ERR(INVALID_ARGUMENT, "%s: T is a relative L1 %s: expected a finite number >= 0, found %s", spec,
                   delta || fb ? "distance" : "change accumulated between full steps", colon + 1);
  o->mode = cadence ? DIT_STEP_CACHE_CADENCE
            : delta ? DIT_STEP_CACHE_DELTA
            : easy  ? DIT_STEP_CACHE_EASYCACHE
            : tea   ? DIT_STEP_CACHE_TEACACHE
                    : DIT_STEP_CACHE_FBCACHE;
  if (cadence) o->cadence = (int)v;
  else o->threshold = v;
  return DIT_OK;
}

dit_status_t dit_step_cache_check(const dit_step_cache_options_t *o) {
  if (o->mode == DIT_STEP_CACHE_OFF) return DIT_OK;
  if (o->mode < DIT_STEP_CACHE_OFF || o->mode > DIT_STEP_CACHE_FBCACHE)
    return DIT_ERR(INVALID_ARGUMENT,
                   "step_cache.mode: expected off (0), cadence (1), delta (2), easycache (3), teacache (4) or fbcache (5), found %d",
                   (int)o->mode);
  if (o->mode == DIT_STEP_CACHE_CADENCE && o->cadence < 2)
    return DIT_ERR(INVALID_ARGUMENT, "step_cache.cadence: expected an integer >= 2, found %d", o->cadence);
  if (o->mode != DIT_STEP_CACHE_CADENCE && !(o->threshold >= 0 && isfinite(o->threshold)))
    return DIT_ERR(INVALID_ARGUMENT, "step_cache.threshold: expected a finite number >= 0, found %g", o->threshold);
  if (o->warmup < 0)
    return DIT_ERR(INVALID_ARGUMENT, "step_cache.warmup: expected a step count >= 0, found %d", o->warmup);
  if (o->cooldown < 0)
    return DIT_ERR(INVALID_ARGUMENT, "step_cache.cooldown: expected a step count >= 0, found %d", o->cooldown);
  return DIT_OK;
}

const char *dit_step_cache_describe(const dit_step_cache_options_t *o, char *buf, size_t size) {
  if (o->mode == DIT_STEP_CACHE_CADENCE) snprintf(buf, size, "cadence:%d", o->cadence);
  else if (o->mode == DIT_STEP_CACHE_DELTA) snprintf(buf, size, "delta:%g", o->threshold);
  else if (o->mode == DIT_STEP_CACHE_EASYCACHE) snprintf(buf, size, "easycache:%g", o->threshold);
  else if (o->mode == DIT_STEP_CACHE_TEACACHE) snprintf(buf, size, "teacache:%g", o->threshold);
  else if (o->mode == DIT_STEP_CACHE_FBCACHE) snprintf(buf, size, "fbcache:%g", o->threshold);
  else snprintf(buf, size, "off");
  return buf;
}

dit_status_t dit_step_cache_create(const dit_step_cache_options_t *o, int steps, size_t n, dit_step_cache_t **out) {
  *out = NULL;
  DIT_RETURN_IF(dit_step_cache_check(o));
  dit_step_cache_t *c = calloc(1, sizeof *c);
  if (!c) return DIT_ERR(RESOURCE_EXHAUSTED, "step cache: out of memory");
  c->o = *o;
  c->steps = steps;
  c->n = n;
  c->prev_full = 1;
  c->probe_rel = NAN;
  c->rescale[0] = 1, c->rescale[1] = 0, c->rescale_k = 2; /* the identity */
  if (o->mode != DIT_STEP_CACHE_OFF) {
    const int easy = o->mode == DIT_STEP_CACHE_EASYCACHE || o->mode == DIT_STEP_CACHE_TEACACHE || o->mode == DIT_STEP_CACHE_FBCACHE;
    c->pa = malloc(n * sizeof *c->pa + 1);
    c->pb = malloc(n * sizeof *c->pb + 1);
    c->xb = easy ? malloc(n * sizeof *c->xb + 1) : NULL;
    c->xprev = easy ? malloc(n * sizeof *c->xprev + 1) : NULL;
    if (!c->pa || !c->pb || (easy && (!c->xb || !c->xprev))) {
      dit_step_cache_destroy(c);
      return DIT_ERR(RESOURCE_EXHAUSTED, "step cache: out of memory for %d arrays of %zu elements", easy ? 4 : 2, n);
    }
  }
  *out = c;
  return DIT_OK;
}

void dit_step_cache_destroy(dit_step_cache_t *c) {
  if (!c) return;
  free(c->pa);
  free(c->pb);
  free(c->xb);
  free(c->xprev);
  free(c);
}

/* The rule, on the state the decision depends on (the forecast replays it); may_skip: delta's r
 * or easycache's E is below the threshold. */
static int decide(const dit_step_cache_t *c, int i, int nfull, int prev_full, int may_skip) {
  const dit_step_cache_options_t *o = &c->o;
  if (o->mode == DIT_STEP_CACHE_OFF || i < o->warmup || i >= c->steps - o->cooldown || nfull < 2) return 1;
  if (o->mode == DIT_STEP_CACHE_CADENCE) return (i - o->warmup) % o->cadence == 0;
  if (o->mode == DIT_STEP_CACHE_DELTA) return !prev_full || !may_skip;
  return !may_skip;
}

/* The modes that reuse the last full step's residual, x_i + P_b - x_b, and so keep latents. */
static int reuses_residual(const dit_step_cache_t *c) {
  return c->o.mode == DIT_STEP_CACHE_EASYCACHE || c->o.mode == DIT_STEP_CACHE_TEACACHE || c->o.mode == DIT_STEP_CACHE_FBCACHE;
}

/* TeaCache's rescaling polynomials (np.poly1d order, highest degree first) as published with its
 * reference implementation, github.com/ali-vilab/TeaCache: TeaCache4FLUX/teacache_flux.py (FLUX.1)
 * and TeaCache4Wan2.1/teacache_generate.py (Wan2.1 T2V 1.3B, without retention steps; fitted there
 * on the time embedding's change, used here on the probe). Every Wan bundle takes the 1.3B one. */
static const struct {
  const char *family;
  double coef[5];
} kRescale[] = {
    {"flux", {4.98651651e+02, -2.83781631e+02, 5.58554382e+01, -3.82021401e+00, 2.64230861e-01}},
    {"wan", {2.39676752e+03, -1.31110545e+03, 2.01331979e+02, -8.29855975e+00, 1.37887774e-01}},
};

int dit_step_cache_teacache_rescale(const char *family, const double **coef, int *k) {
  static const double identity[2] = {1, 0};
  for (size_t i = 0; i < sizeof kRescale / sizeof kRescale[0]; i++)
    if (family && !strcmp(family, kRescale[i].family)) {
      *coef = kRescale[i].coef, *k = 5;
      return 1;
    }
  *coef = identity, *k = 2;
  return 0;
}

void dit_step_cache_set_rescale(dit_step_cache_t *c, const double *coef, int k) {
  if (k < 1 || k > 8) return;
  memcpy(c->rescale, coef, (size_t)k * sizeof *coef);
  c->rescale_k = k;
}

/* sum|b - a| in double. */
static double l1_distance(const float *a, const float *b, size_t n) {
  double d = 0;
  for (size_t j = 0; j < n; j++) d += fabs((double)b[j] - (double)a[j]);
  return d;
}

/* sum|a| in double. */
static double l1_norm(const float *a, size_t n) {
  double d = 0;
  for (size_t j = 0; j < n; j++) d += fabs((double)a[j]);
  return d;
}

/* Identical zero predictions are no change (0). */
double dit_step_cache_relative_l1(const float *a, const float *b, size_t n) {
  const double num = l1_distance(a, b, n), den = l1_norm(a, n);
  return den > 0 ? num / den : num > 0 ? INFINITY : 0;
}

void dit_step_cache_probe(dit_step_cache_t *c, double change) { c->probe_rel = change; }

int dit_step_cache_probes(const dit_step_cache_options_t *o) {
  return o->mode == DIT_STEP_CACHE_TEACACHE || o->mode == DIT_STEP_CACHE_FBCACHE;
}

void dit_step_cache_observe(dit_step_cache_t *c, const float *x) {
  if (!reuses_residual(c)) return;
  c->dx = c->have_prev ? l1_distance(c->xprev, x, c->n) : 0;
  memcpy(c->xprev, x, c->n * sizeof *x);
  c->have_prev = 1;
}

int dit_step_cache_full(dit_step_cache_t *c, int i) {
  int may_skip = c->r_below;
  /* easycache accumulates only on the steps the common rule lets it skip, as the paper's loop. */
  if (reuses_residual(c) && !decide(c, i, c->nfull, 1, 1)) {
    if (c->o.mode == DIT_STEP_CACHE_EASYCACHE) c->acc += c->k * c->dx / c->pb_l1;
    else if (c->o.mode == DIT_STEP_CACHE_FBCACHE) c->acc = c->probe_rel; /* no accumulation */
    else { /* teacache: poly(d) by Horner's rule; d is NaN without a previous probe */
      double r = 0;
      for (int j = 0; j < c->rescale_k; j++) r = r * c->probe_rel + c->rescale[j];
      c->acc += r < 0 ? 0 : r; /* a fit's negative excursion is no change (NaN stays) */
    }
    may_skip = c->acc < c->o.threshold; /* false for NaN: the step runs */
  }
  c->prev_full = decide(c, i, c->nfull, c->prev_full, may_skip);
  if (c->prev_full) c->acc = 0;
  return c->prev_full;
}

void dit_step_cache_record(dit_step_cache_t *c, int i, const float *p) {
  if (c->o.mode == DIT_STEP_CACHE_OFF) return;
  float *t = c->pa;
  c->pa = c->pb, c->a = c->b;
  c->pb = t, c->b = i;
  memcpy(c->pb, p, c->n * sizeof *p);
  if (c->nfull < 2) c->nfull++;
  if (c->o.mode == DIT_STEP_CACHE_DELTA && c->nfull == 2) c->r_below = dit_step_cache_relative_l1(c->pa, c->pb, c->n) < c->o.threshold;
  if (reuses_residual(c)) {
    /* xprev holds x_i (observed before this step was decided); xb still x_a. 0 / 0 is NaN: the
     * estimates from it are no numbers, so the steps run until a rate is measured again. */
    if (c->nfull == 2) c->k = l1_distance(c->pa, c->pb, c->n) / l1_distance(c->xb, c->xprev, c->n);
    c->pb_l1 = l1_norm(c->pb, c->n);
    memcpy(c->xb, c->xprev, c->n * sizeof *c->xb);
  }
}

void dit_step_cache_extrapolate(const dit_step_cache_t *c, float *p) {
  if (reuses_residual(c)) {
    for (size_t j = 0; j < c->n; j++) p[j] = c->xprev[j] + (c->pb[j] - c->xb[j]);
    return;
  }
  const float span = (float)(c->b - c->a);
  for (size_t j = 0; j < c->n; j++) p[j] = p[j] + (c->pb[j] - c->pa[j]) / span;
}

void dit_step_cache_reset(dit_step_cache_t *c) {
  c->nfull = 0;
  c->r_below = 0;
  c->acc = 0;
  c->probe_rel = NAN;
}

int dit_step_cache_forecast_full(const dit_step_cache_t *c, int from, int to) {
  int nfull = c->nfull, prev_full = c->prev_full, full = 0;
  for (int i = from; i < to; i++) {
    prev_full = decide(c, i, nfull, prev_full, i == from && c->o.mode == DIT_STEP_CACHE_DELTA ? c->r_below : 1);
    full += prev_full;
    nfull += prev_full && nfull < 2;
  }
  return full;
}
