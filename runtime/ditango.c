/* The DiTango planner (ditango.h): per layer the anchor's weights and scale ratios, per group the
 * drift at its last computation, eps's history of anchor correction errors, and the decision log the
 * report prints. */
#include "runtime/ditango.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer_state {
  int have_anchor;    /* w and alpha hold an anchor's statistics */
  int anchor_due;     /* decided an anchor; dit_ditango_anchor not yet called */
  double local_norm;  /* ||OUT_loc(t_a)|| */
  double *w, *alpha;  /* per remote group */
  double *drift_tc;   /* D(t_c) per remote group: the drift when it was last computed */
} layer_state_t;

typedef struct log_entry { /* one (step, layer) */
  int decided, anchor;
  double drift, eps;
} log_entry_t;

struct dit_ditango {
  dit_ditango_options_t o;
  int steps, layers, groups;
  int step;                /* the step being decided: earlier ones are final */
  layer_state_t *ls;
  double eps;
  double *hist;            /* anchor correction errors */
  size_t n_hist, cap_hist;
  double *sorted;          /* scratch for the quantile */
  int64_t computed, decided;
  log_entry_t *log;        /* [steps][layers] */
  uint8_t *decision;       /* [steps][layers][groups] */
  double *ase, *error;     /* [steps][layers][groups] */
};

dit_status_t dit_ditango_check(const dit_ditango_options_t *o) {
  if (!(o->ratio >= 0 && o->ratio <= 1))
    return DIT_ERR(INVALID_ARGUMENT, "--reuse-ratio: the share of remote attention recomputed: expected a number in [0, 1], found %g",
                   o->ratio);
  if (!(o->eps_local > 0 && isfinite(o->eps_local)))
    return DIT_ERR(INVALID_ARGUMENT, "--reuse-eps-local: the local drift that forces an anchor: expected a finite number > 0, found %g",
                   o->eps_local);
  if (o->warmup < 1)
    return DIT_ERR(INVALID_ARGUMENT, "--reuse-warmup: full steps first: expected >= 1 (step 0 has nothing cached), found %d",
                   o->warmup);
  return DIT_OK;
}

void dit_ditango_destroy(dit_ditango_t *p) {
  if (!p) return;
  for (int l = 0; p->ls && l < p->layers; l++) free(p->ls[l].w), free(p->ls[l].alpha), free(p->ls[l].drift_tc);
  free(p->ls), free(p->hist), free(p->sorted), free(p->log), free(p->decision), free(p->ase), free(p->error);
  free(p);
}

dit_status_t dit_ditango_create(const dit_ditango_options_t *o, int steps, int layers, int groups, dit_ditango_t **out) {
  *out = NULL;
  dit_status_t s = dit_ditango_check(o);
  if (s) return s;
  if (steps < 1 || layers < 1 || groups < 1)
    return DIT_ERR(INVALID_ARGUMENT, "ditango planner: expected steps, layers and remote groups >= 1, found %d, %d and %d", steps,
                   layers, groups);
  const size_t n = (size_t)steps * (size_t)layers * (size_t)groups;
  dit_ditango_t *p = calloc(1, sizeof *p);
  if (!p) return DIT_ERR(RESOURCE_EXHAUSTED, "ditango planner: out of memory");
  p->o = *o, p->steps = steps, p->layers = layers, p->groups = groups;
  p->eps = o->ratio > 0 ? 0 : INFINITY;
  p->ls = calloc((size_t)layers, sizeof *p->ls);
  p->log = calloc((size_t)steps * (size_t)layers, sizeof *p->log);
  p->decision = calloc(n, 1);
  p->ase = malloc(n * sizeof *p->ase);
  p->error = malloc(n * sizeof *p->error);
  int ok = p->ls && p->log && p->decision && p->ase && p->error;
  for (int l = 0; ok && l < layers; l++) {
    layer_state_t *L = &p->ls[l];
    L->w = calloc((size_t)groups, sizeof *L->w);
    L->alpha = calloc((size_t)groups, sizeof *L->alpha);
    L->drift_tc = calloc((size_t)groups, sizeof *L->drift_tc);
    ok = L->w && L->alpha && L->drift_tc;
  }
  if (!ok) {
    dit_ditango_destroy(p);
    return DIT_ERR(RESOURCE_EXHAUSTED, "ditango planner: out of memory for %d steps x %d layers x %d groups", steps, layers, groups);
  }
  for (size_t i = 0; i < n; i++) p->ase[i] = p->error[i] = NAN;
  *out = p;
  return DIT_OK;
}

static size_t at(const dit_ditango_t *p, int step, int layer, int group) {
  return ((size_t)step * (size_t)p->layers + (size_t)layer) * (size_t)p->groups + (size_t)group;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* eps = the q-quantile of the history, q = 1 - R + DIT_DITANGO_GAIN * (r - R) clamped to [0, 1] (ditango.h). */
static dit_status_t update_eps(dit_ditango_t *p) {
  if (!p->n_hist || p->o.ratio <= 0) return DIT_OK;
  double *sorted = realloc(p->sorted, p->n_hist * sizeof *sorted);
  if (!sorted) return DIT_ERR(RESOURCE_EXHAUSTED, "ditango planner: out of memory for %zu anchor errors", p->n_hist);
  p->sorted = sorted;
  memcpy(sorted, p->hist, p->n_hist * sizeof *sorted);
  qsort(sorted, p->n_hist, sizeof *sorted, cmp_double);
  const double R = p->o.ratio, r = p->decided ? (double)p->computed / (double)p->decided : R;
  double q = 1 - R + DIT_DITANGO_GAIN * (r - R);
  q = q < 0 ? 0 : q > 1 ? 1 : q;
  p->eps = sorted[(size_t)floor(q * (double)(p->n_hist - 1))];
  return DIT_OK;
}

static dit_status_t push_hist(dit_ditango_t *p, double e) {
  if (p->n_hist == p->cap_hist) {
    const size_t cap = p->cap_hist ? 2 * p->cap_hist : 64;
    double *h = realloc(p->hist, cap * sizeof *h);
    if (!h) return DIT_ERR(RESOURCE_EXHAUSTED, "ditango planner: out of memory for %zu anchor errors", cap);
    p->hist = h, p->cap_hist = cap;
  }
  p->hist[p->n_hist++] = e;
  return DIT_OK;
}

dit_status_t dit_ditango_decide(dit_ditango_t *p, int step, int layer, double drift, uint8_t *compute, int *is_anchor) {
  if (step < p->step || step >= p->steps)
    return DIT_ERR(INVALID_ARGUMENT, "ditango planner: step %d: expected %d..%d (steps in order)", step, p->step, p->steps - 1);
  if (layer < 0 || layer >= p->layers)
    return DIT_ERR(INVALID_ARGUMENT, "ditango planner: layer %d: expected 0..%d", layer, p->layers - 1);
  log_entry_t *e = &p->log[(size_t)step * (size_t)p->layers + (size_t)layer];
  if (e->decided) return DIT_ERR(INVALID_ARGUMENT, "ditango planner: step %d, layer %d: already decided", step, layer);
  layer_state_t *L = &p->ls[layer];
  if (L->anchor_due)
    return DIT_ERR(INVALID_ARGUMENT, "ditango planner: layer %d: the anchor's statistics were not given before step %d", layer, step);
  if (step > p->step) {
    /* A new step: eps follows the ratio achieved so far, also between anchors. */
    p->step = step;
    dit_status_t s = update_eps(p);
    if (s) return s;
  }
  double *ase = &p->ase[at(p, step, layer, 0)];
  int anchor = step < p->o.warmup || !L->have_anchor || p->o.ratio >= 1;
  if (L->have_anchor && p->o.ratio < 1) {
    if (!(drift >= 0)) return DIT_ERR(INVALID_ARGUMENT, "ditango planner: layer %d: drift %g: expected a number >= 0", layer, drift);
    int all_exceed = 1;
    for (int g = 0; g < p->groups; g++) {
      const double grow = drift - L->drift_tc[g];
      ase[g] = L->w[g] * L->alpha[g] * (grow > 0 ? grow : 0);
      all_exceed &= ase[g] > p->eps;
    }
    anchor |= all_exceed || drift > p->o.eps_local * L->local_norm;
  }
  e->decided = 1, e->anchor = anchor, e->eps = p->eps, e->drift = L->have_anchor ? drift : NAN;
  int n_compute = 0;
  for (int g = 0; g < p->groups; g++) {
    compute[g] = anchor || ase[g] > p->eps ? DIT_DITANGO_COMPUTE : DIT_DITANGO_REUSE;
    if (compute[g] && !anchor) L->drift_tc[g] = drift;
    n_compute += compute[g];
  }
  memcpy(&p->decision[at(p, step, layer, 0)], compute, (size_t)p->groups);
  if (step >= p->o.warmup) p->computed += n_compute, p->decided += p->groups;
  if (anchor) {
    L->anchor_due = 1;
    for (int g = 0; g < p->groups; g++) {
      if (isnan(ase[g])) continue;
      dit_status_t s = push_hist(p, ase[g]);
      if (s) return s;
    }
    dit_status_t s = update_eps(p);
    if (s) return s;
  }
  *is_anchor = anchor;
  return DIT_OK;
}

dit_status_t dit_ditango_anchor(dit_ditango_t *p, int layer, double local_norm, const double *group_norm,
                                const double *group_weight) {
  if (layer < 0 || layer >= p->layers)
    return DIT_ERR(INVALID_ARGUMENT, "ditango planner: layer %d: expected 0..%d", layer, p->layers - 1);
  layer_state_t *L = &p->ls[layer];
  if (!L->anchor_due) return DIT_ERR(INVALID_ARGUMENT, "ditango planner: layer %d: no anchor is due", layer);
  if (!(local_norm >= 0 && isfinite(local_norm)))
    return DIT_ERR(INVALID_ARGUMENT, "ditango planner: layer %d: local norm %g: expected a finite number >= 0", layer, local_norm);
  for (int g = 0; g < p->groups; g++)
    if (!(group_norm[g] >= 0 && isfinite(group_norm[g]) && group_weight[g] >= 0 && group_weight[g] <= 1))
      return DIT_ERR(INVALID_ARGUMENT,
                     "ditango planner: layer %d, group %d: norm %g and weight %g: expected a finite norm >= 0 and a weight in [0, 1]",
                     layer, g + 1, group_norm[g], group_weight[g]);
  L->local_norm = local_norm;
  for (int g = 0; g < p->groups; g++) {
    /* A zero local state says nothing about how the others move: scale 1 keeps the drift as it is. */
    L->alpha[g] = local_norm > 0 ? group_norm[g] / local_norm : 1;
    L->w[g] = group_weight[g];
    L->drift_tc[g] = 0;
  }
  L->have_anchor = 1, L->anchor_due = 0;
  return DIT_OK;
}

void dit_ditango_measured(dit_ditango_t *p, int step, int layer, int group, double error) {
  if (step >= 0 && step < p->steps && layer >= 0 && layer < p->layers && group >= 0 && group < p->groups)
    p->error[at(p, step, layer, group)] = error;
}

double dit_ditango_epsilon(const dit_ditango_t *p) { return p->eps; }

void dit_ditango_counts(const dit_ditango_t *p, int64_t *computed, int64_t *decided) {
  *computed = p->computed, *decided = p->decided;
}

double dit_ditango_ase(const dit_ditango_t *p, int step, int layer, int group) {
  if (step < 0 || step >= p->steps || layer < 0 || layer >= p->layers || group < 0 || group >= p->groups) return NAN;
  return p->ase[at(p, step, layer, group)];
}

static void num(FILE *f, const char *key, double v) {
  if (isfinite(v)) fprintf(f, "\"%s\": %.9g", key, v);
  else fprintf(f, "\"%s\": null", key);
}

dit_status_t dit_ditango_report(const dit_ditango_t *p, FILE *f) {
  fprintf(f, "{\"format\": \"ditango-report\", \"version\": 1, ");
  num(f, "ratio", p->o.ratio);
  fprintf(f, ", ");
  num(f, "eps_local", p->o.eps_local);
  fprintf(f, ", \"warmup\": %d, \"diagnostic\": %s, \"layers\": %d, \"groups\": %d, \"computed\": %lld, \"decided\": %lld,\n",
          p->o.warmup, p->o.diagnostic ? "true" : "false", p->layers, p->groups, (long long)p->computed, (long long)p->decided);
  fprintf(f, " \"steps\": [");
  int first_step = 1;
  for (int t = 0; t < p->steps; t++) {
    const log_entry_t *row = &p->log[(size_t)t * (size_t)p->layers];
    int any = 0;
    for (int l = 0; l < p->layers; l++) any |= row[l].decided;
    if (!any) continue;
    fprintf(f, "%s\n  {\"step\": %d, \"layers\": [", first_step ? "" : ",", t);
    first_step = 0;
    int first_layer = 1;
    for (int l = 0; l < p->layers; l++) {
      if (!row[l].decided) continue;
      fprintf(f, "%s\n   {\"layer\": %d, \"anchor\": %s, ", first_layer ? "" : ",", l, row[l].anchor ? "true" : "false");
      first_layer = 0;
      num(f, "eps", row[l].eps);
      fprintf(f, ", ");
      num(f, "drift", row[l].drift);
      fprintf(f, ", \"groups\": [");
      for (int g = 0; g < p->groups; g++) {
        const size_t i = at(p, t, l, g);
        fprintf(f, "%s{\"group\": %d, \"decision\": \"%s\", ", g ? ", " : "", g + 1, p->decision[i] ? "compute" : "reuse");
        num(f, "ase", p->ase[i]);
        fprintf(f, ", ");
        num(f, "error", p->error[i]);
        fprintf(f, "}");
      }
      fprintf(f, "]}");
    }
    fprintf(f, "]}");
  }
  fprintf(f, "\n ]}\n");
  return ferror(f) ? DIT_ERR(IO, "ditango report: write failed") : DIT_OK;
}
