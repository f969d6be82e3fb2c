/* The step-cache controller (step_cache.h): the decision per step, the two most recent full
 * predictions, and the extrapolation from them. */
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
};

#define SPEC_EXPECTED "expected off, cadence:N (N an integer >= 2) or delta:T (T a number >= 0)"

dit_status_t dit_step_cache_parse(const char *spec, dit_step_cache_options_t *o) {
  if (!spec) return DIT_ERR(INVALID_ARGUMENT, SPEC_EXPECTED ", found nothing");
  if (!strcmp(spec, "off")) {
    o->mode = DIT_STEP_CACHE_OFF;
    return DIT_OK;
  }
  const char *colon = strchr(spec, ':');
  const size_t kw = colon ? (size_t)(colon - spec) : 0;
  const int cadence = kw == 7 && !strncmp(spec, "cadence", 7), delta = kw == 5 && !strncmp(spec, "delta", 5);
  char *end = NULL;
  errno = 0;
  const double v = cadence || delta ? strtod(colon + 1, &end) : NAN;
  if (!(cadence || delta) || errno || end == colon + 1 || *end)
    return DIT_ERR(INVALID_ARGUMENT, SPEC_EXPECTED ", found '%s'", spec);
  if (cadence && !(v >= 2 && v <= 1e6 && v == (double)(int)v))
    return DIT_ERR(INVALID_ARGUMENT, "%s: N is a step count: expected an integer >= 2 (1 would skip nothing), found %s",
                   spec, colon + 1);
  if (delta && !(v >= 0 && isfinite(v)))
    return DIT_ERR(INVALID_ARGUMENT, "%s: T is a relative L1 distance: expected a finite number >= 0, found %s", spec,
                   colon + 1);
  o->mode = cadence ? DIT_STEP_CACHE_CADENCE : DIT_STEP_CACHE_DELTA;
  if (cadence) o->cadence = (int)v;
  else o->threshold = v;
  return DIT_OK;
}

dit_status_t dit_step_cache_check(const dit_step_cache_options_t *o) {
  if (o->mode == DIT_STEP_CACHE_OFF) return DIT_OK;
  if (o->mode != DIT_STEP_CACHE_CADENCE && o->mode != DIT_STEP_CACHE_DELTA)
    return DIT_ERR(INVALID_ARGUMENT, "step_cache.mode: expected off (0), cadence (1) or delta (2), found %d", (int)o->mode);
  if (o->mode == DIT_STEP_CACHE_CADENCE && o->cadence < 2)
    return DIT_ERR(INVALID_ARGUMENT, "step_cache.cadence: expected an integer >= 2, found %d", o->cadence);
  if (o->mode == DIT_STEP_CACHE_DELTA && !(o->threshold >= 0 && isfinite(o->threshold)))
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
  if (o->mode != DIT_STEP_CACHE_OFF) {
    c->pa = malloc(n * sizeof *c->pa + 1);
    c->pb = malloc(n * sizeof *c->pb + 1);
    if (!c->pa || !c->pb) {
      dit_step_cache_destroy(c);
      return DIT_ERR(RESOURCE_EXHAUSTED, "step cache: out of memory for two predictions of %zu elements", n);
    }
  }
  *out = c;
  return DIT_OK;
}

void dit_step_cache_destroy(dit_step_cache_t *c) {
  if (!c) return;
  free(c->pa);
  free(c->pb);
  free(c);
}

/* The rule, on the state the decision depends on (the forecast replays it). */
static int decide(const dit_step_cache_t *c, int i, int nfull, int prev_full, int r_below) {
  const dit_step_cache_options_t *o = &c->o;
  if (o->mode == DIT_STEP_CACHE_OFF || i < o->warmup || i >= c->steps - o->cooldown || nfull < 2) return 1;
  if (o->mode == DIT_STEP_CACHE_CADENCE) return (i - o->warmup) % o->cadence == 0;
  return !prev_full || !r_below;
}

int dit_step_cache_full(dit_step_cache_t *c, int i) {
  return c->prev_full = decide(c, i, c->nfull, c->prev_full, c->r_below);
}

/* sum|b - a| / sum|a| in double; identical zero predictions are no change (0). */
static double relative_l1(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t j = 0; j < n; j++) {
    num += fabs((double)b[j] - (double)a[j]);
    den += fabs((double)a[j]);
  }
  return den > 0 ? num / den : num > 0 ? INFINITY : 0;
}

void dit_step_cache_record(dit_step_cache_t *c, int i, const float *p) {
  if (c->o.mode == DIT_STEP_CACHE_OFF) return;
  float *t = c->pa;
  c->pa = c->pb, c->a = c->b;
  c->pb = t, c->b = i;
  memcpy(c->pb, p, c->n * sizeof *p);
  if (c->nfull < 2) c->nfull++;
  if (c->o.mode == DIT_STEP_CACHE_DELTA && c->nfull == 2) c->r_below = relative_l1(c->pa, c->pb, c->n) < c->o.threshold;
}

void dit_step_cache_extrapolate(const dit_step_cache_t *c, float *p) {
  const float span = (float)(c->b - c->a);
  for (size_t j = 0; j < c->n; j++) p[j] = p[j] + (c->pb[j] - c->pa[j]) / span;
}

void dit_step_cache_reset(dit_step_cache_t *c) {
  c->nfull = 0;
  c->r_below = 0;
}

int dit_step_cache_forecast_full(const dit_step_cache_t *c, int from, int to) {
  int nfull = c->nfull, prev_full = c->prev_full, full = 0;
  for (int i = from; i < to; i++) {
    prev_full = decide(c, i, nfull, prev_full, i == from ? c->r_below : 1);
    full += prev_full;
    nfull += prev_full && nfull < 2;
  }
  return full;
}
