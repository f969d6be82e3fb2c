/* Checks a step-cached generate through the library against the step-cache rule, recomputed
 * here from what the run reported:
 *  - runs generate exactly and with the step cache, recording every step's prediction P_i
 *    (on_prediction) and which steps ran (and which expert);
 *  - the latents x_i each step started from, by a fresh sampler fed the recorded predictions
 *    from the same noise;
 *  - the steps that ran are the rule's (cadence from the indices; delta from r of the recorded
 *    full predictions, easycache from the rate and the accumulated estimate of the recorded
 *    predictions and the replayed latents, teacache and fbcache from the probe changes the run
 *    reported (on_probe; teacache with the family's rescaling polynomial), in double; the cache
 *    reset where the expert changes, where the reported change must be NaN as at step 0);
 *    each skipped step counts the forwards it would have run;
 *  - each skipped prediction is P_{i-1} + (P_b - P_a) / (b - a) of the recorded ones (easycache,
 *    teacache, fbcache: x_i + (P_b - x_b));
 *  - the steps before the first skip are the exact run's, bit for bit;
 *  - that replay reproduces the cached run's final latents (max relative error <= 1e-4): the
 *    sampler took P_i as if the model had produced it.
 * usage: step_cache_check BUNDLE INPUTS.safetensors MODE STEPS [key=value...]
 *   keys: guidance, guidance_2, shift, sampler (unipc|euler), true_cfg, warmup (2), cooldown (1),
 *   profile (MODE auto: the cache profile whose policy, warmup, cooldown and, for teacache,
 *   rescaling polynomial the run takes, as generate --step-cache auto resolves them), reuse (output,
 *   the default: the rule's skipped predictions are checked; hidden: teacache's and fbcache's
 *   block-stack residual, whose predictions are the model's head on it: decisions and replay only)
 *   INPUTS: prompt_embeds and negative_prompt_embeds (Wan), or the generate section's arguments
 *   and their negative_ forms, and the noise as init_latents or latents. Text-to-video and
 *   generate-section bundles in fp32 (the replay applies no image condition). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/safetensors.h"
#include "base/parity.h"
#include "runtime/cache_profile.h"
#include "runtime/ditrun.h"

typedef struct record {
  int steps;
  size_t n;
  float *p;      /* steps x n */
  int *computed; /* steps */
  double *change; /* teacache, fbcache: steps, each step's reported probe change */
  int *probed;    /* steps */
} record_t;

static void on_probe(void *ctx, int step, double change) {
  record_t *r = ctx;
  if (step < 0 || step >= r->steps) return;
  r->change[step] = change;
  r->probed[step]++;
}

static void on_prediction(void *ctx, int step, const float *prediction, size_t n, int computed) {
  record_t *r = ctx;
  if (n != r->n || step < 0 || step >= r->steps) return;
  memcpy(r->p + (size_t)step * n, prediction, n * sizeof *prediction);
  r->computed[step] = computed;
}

static int fail(const char *fmt, const char *what) {
  fprintf(stderr, "step_cache_check: FAIL: ");
  fprintf(stderr, fmt, what);
  fprintf(stderr, "\n");
  return 1;
}

/* A copy of tensor `name` of st (NULL when absent). */
static int take(const dit_safetensors_t *st, const char *name, dit_tensor_t *t) {
  const dit_st_tensor_t *e = dit_safetensors_find(st, name);
  if (!e) return 0;
  t->dtype = e->dtype;
  t->rank = e->rank;
  memcpy(t->dims, e->dims, sizeof t->dims);
  t->data = malloc(e->nbytes + 1);
  if (t->data) memcpy(t->data, e->data, e->nbytes);
  return t->data != NULL;
}

/* sum|b - a| (sum|a| when b is NULL), in double. */
static double l1(const float *a, const float *b, size_t n) {
  double d = 0;
  for (size_t j = 0; j < n; j++) d += fabs((b ? (double)b[j] : 0) - (double)a[j]);
  return d;
}

/* teacache's estimate of step i: max(poly(d), 0) of the reported change d (NaN stays). */
static double tea_change(const record_t *r, int i, const double *coef, int k) {
  const double d = r->change[i];
  double v = 0;
  for (int j = 0; j < k; j++) v = v * d + coef[j];
  return v < 0 ? 0 : v;
}

/* The rule, from the recorded run and the latents x (steps x n): 1 per step that should have run
 * the transformer. coef, k: teacache's rescaling polynomial. */
static void expected_full(const dit_step_cache_options_t *c, const record_t *r, const float *x, const int *expert, const double *coef,
                          int k, int *full) {
  const size_t n = r->n;
  int since = 0, a = -1, b = -1;
  double rel = INFINITY, rate = NAN, norm_b = 0, e = 0;
  for (int i = 0; i < r->steps; i++) {
    const int switched = i > 0 && expert && expert[i] != expert[i - 1];
    if (switched) since = 0, rel = INFINITY, e = 0;
    const int must = i < c->warmup || i >= r->steps - c->cooldown || since < 2;
    int f = must;
    if (c->mode == DIT_STEP_CACHE_CADENCE) f = f || (i - c->warmup) % c->cadence == 0;
    else if (c->mode == DIT_STEP_CACHE_DELTA) f = f || !full[i - 1] || !(rel < c->threshold); /* i >= 1 here: since >= 2 */
    else if (!must && c->mode == DIT_STEP_CACHE_FBCACHE) f = !(r->change[i] < c->threshold); /* no accumulation */
    else if (!must) { /* easycache, teacache: i >= 1 here */
      e += c->mode == DIT_STEP_CACHE_TEACACHE ? tea_change(r, i, coef, k)
                                              : rate * l1(x + (size_t)(i - 1) * n, x + (size_t)i * n, n) / norm_b;
      f = !(e < c->threshold);
    }
    full[i] = f;
    if (!f) continue;
    e = 0;
    since++;
    a = b, b = i;
    const float *pa = r->p + (size_t)a * n, *pb = r->p + (size_t)b * n;
    if (since >= 2) {
      const double den = l1(pa, NULL, n), num = l1(pa, pb, n);
      rel = den > 0 ? num / den : num > 0 ? INFINITY : 0;
      rate = num / l1(x + (size_t)a * n, x + (size_t)b * n, n);
    }
    norm_b = l1(pb, NULL, n);
  }
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: step_cache_check BUNDLE INPUTS.safetensors MODE STEPS [key=value...]\n");
    return 2;
  }
  dit_generate_options_t o = {.sampler = DIT_SAMPLER_UNIPC, .steps = atoi(argv[4]), .guidance = 1, .shift = 3, .true_cfg = 1};
  o.step_cache.warmup = DIT_STEP_CACHE_DEFAULT_WARMUP;
  o.step_cache.cooldown = DIT_STEP_CACHE_DEFAULT_COOLDOWN;
  const int automatic = !strcmp(argv[3], "auto");
  dit_status_t s = automatic ? DIT_OK : dit_step_cache_parse(argv[3], &o.step_cache);
  if (s) return dit_status_report(s, "step_cache_check");
  int have_g2 = 0, reuse_hidden = 0, hidden = 0;
  const char *profile_path = NULL;
  dit_cache_profile_t profile = {0};
  for (int i = 5; i < argc; i++) {
    const char *eq = strchr(argv[i], '=');
    if (!eq) return fail("expected key=value, found '%s'", argv[i]);
    const double v = atof(eq + 1);
    const size_t k = (size_t)(eq - argv[i]);
    if (!strncmp(argv[i], "guidance", k) && k == 8) o.guidance = v;
    else if (!strncmp(argv[i], "guidance_2", k) && k == 10) o.guidance_2 = v, have_g2 = 1;
    else if (!strncmp(argv[i], "shift", k) && k == 5) o.shift = v;
    else if (!strncmp(argv[i], "true_cfg", k) && k == 8) o.true_cfg = v;
    else if (!strncmp(argv[i], "warmup", k) && k == 6) o.step_cache.warmup = (int)v;
    else if (!strncmp(argv[i], "cooldown", k) && k == 8) o.step_cache.cooldown = (int)v;
    else if (!strncmp(argv[i], "profile", k) && k == 7) profile_path = eq + 1;
    else if (!strncmp(argv[i], "reuse", k) && k == 5) {
      if (strcmp(eq + 1, "output") && strcmp(eq + 1, "hidden")) return fail("reuse: expected output or hidden, found '%s'", eq + 1);
      reuse_hidden = !strcmp(eq + 1, "hidden");
    }
    else if (!strncmp(argv[i], "sampler", k) && k == 7) {
      if (dit_sampler_kind_parse(eq + 1, &o.sampler)) return fail("sampler: expected unipc or euler, found '%s'", eq + 1);
    } else return fail("unknown key in '%s'", argv[i]);
  }
  if (automatic != !!profile_path) return fail("%s", "MODE auto and profile=P.json go together");
  if (automatic) {
    s = dit_cache_profile_load(profile_path, &profile);
    if (s) return dit_status_report(s, "step_cache_check");
    o.step_cache = profile.policy;
    if (profile.policy.mode == DIT_STEP_CACHE_TEACACHE) o.step_cache_rescale = profile.rescale, o.step_cache_rescale_k = DIT_CACHE_PROFILE_DEGREE + 1;
  }
  if (o.steps < 1 || o.step_cache.mode == DIT_STEP_CACHE_OFF) return fail("%s", "expected STEPS >= 1 and a MODE other than off");

  dit_runtime_options_t ro = {.backend = "cpu", .threads = 2};
  dit_runtime_t *rt = NULL;
  s = dit_runtime_load(argv[1], &ro, &rt);
  if (s) return dit_status_report(s, "step_cache_check");
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  if (m->dtype != DIT_F32) return fail("%s: an fp32 bundle, for an exact replay", argv[1]);
  const int two = dit_runtime_expert_count(rt) == 2;
  if (!have_g2) o.guidance_2 = o.guidance;

  dit_safetensors_t *st = NULL;
  s = dit_safetensors_open(argv[2], &st);
  if (s) return dit_status_report(s, "step_cache_check");
  dit_tensor_t prompt = {0}, negative = {0}, init = {0};
  dit_named_tensor_t args[2 * DIT_GEN_MAX_CONDITIONS];
  char names[2 * DIT_GEN_MAX_CONDITIONS][96];
  if (!take(st, "init_latents", &init) && !take(st, "latents", &init)) return fail("%s: no init_latents or latents", argv[2]);
  if (m->generate.present) {
    o.args = args;
    for (int neg = 0; neg <= (o.true_cfg > 1.0); neg++)
      for (size_t i = 0; i < m->generate.n_conditions; i++) {
        snprintf(names[o.n_args], sizeof names[0], "%s%s", neg ? "negative_" : "", m->generate.conditions[i].argument);
        args[o.n_args].name = names[o.n_args];
        if (!take(st, names[o.n_args], &args[o.n_args].t)) return fail("inputs lack '%s'", names[o.n_args]);
        o.n_args++;
      }
  } else {
    if (!take(st, "prompt_embeds", &prompt)) return fail("%s: no prompt_embeds", argv[2]);
    take(st, "negative_prompt_embeds", &negative);
  }

  dit_tensor_t lat = {0};
  s = dit_generate_latents_shape(m, &lat.rank, lat.dims);
  if (s) return dit_status_report(s, "step_cache_check");
  const size_t n = (size_t)dit_tensor_numel(&lat);
  const int steps = o.steps;
  float *noise = malloc(n * sizeof *noise), *exact = malloc(n * sizeof *exact), *cached = malloc(n * sizeof *cached),
        *replay = malloc(n * sizeof *replay), *xs = malloc((size_t)steps * n * sizeof *xs);
  record_t rx = {steps, n, malloc((size_t)steps * n * sizeof(float)), calloc((size_t)steps, sizeof(int)), NULL, NULL};
  record_t rc = {steps, n, malloc((size_t)steps * n * sizeof(float)), calloc((size_t)steps, sizeof(int)),
                 calloc((size_t)steps, sizeof(double)), calloc((size_t)steps, sizeof(int))};
  int *skipped = calloc((size_t)steps, sizeof *skipped), *expert = calloc((size_t)steps, sizeof *expert),
      *full = calloc((size_t)steps, sizeof *full);
  if (!noise || !exact || !cached || !replay || !xs || !rx.p || !rx.computed || !rc.p || !rc.computed || !rc.change || !rc.probed || !skipped || !expert || !full)
    return fail("%s", "out of memory");
  if (dit_convert(noise, DIT_F32, init.data, init.dtype, n)) return fail("%s", "the noise is not a float tensor");

  /* The exact run, then the cached one. */
  dit_generate_options_t ox = o;
  ox.step_cache.mode = DIT_STEP_CACHE_OFF;
  ox.on_prediction = on_prediction, ox.ctx = &rx;
  ox.expert_used = two ? expert : NULL;
  memcpy(exact, noise, n * sizeof *exact);
  s = dit_runtime_generate(rt, &ox, &prompt, negative.data ? &negative : NULL, exact);
  if (s) return dit_status_report(dit_status_annotate(s, "exact run"), "step_cache_check");
  o.on_prediction = on_prediction, o.on_probe = on_probe, o.ctx = &rc;
  o.step_cache.reuse_output = !reuse_hidden;
  o.hidden_reuse = &hidden;
  o.skipped_forwards = skipped;
  o.expert_used = two ? expert : NULL;
  memcpy(cached, noise, n * sizeof *cached);
  s = dit_runtime_generate(rt, &o, &prompt, negative.data ? &negative : NULL, cached);
  if (s) return dit_status_report(dit_status_annotate(s, "cached run"), "step_cache_check");

  /* The sampler fed the recorded predictions from the same noise: each step's latents. */
  dit_sampler_t *smp = NULL;
  s = dit_generate_sampler(rt, &o, n, &smp);
  if (s) return dit_status_report(s, "step_cache_check");
  memcpy(replay, noise, n * sizeof *replay);
  for (int i = 0; !s && i < steps; i++) {
    memcpy(xs + (size_t)i * n, replay, n * sizeof *replay);
    s = dit_sampler_step(smp, rc.p + (size_t)i * n, replay);
  }
  dit_sampler_destroy(smp);
  if (s) return dit_status_report(s, "step_cache_check");

  /* Decisions and the forwards each skipped step saved. */
  const double *coef;
  int k;
  dit_step_cache_teacache_rescale(m->family, &coef, &k);
  if (o.step_cache_rescale) coef = o.step_cache_rescale, k = o.step_cache_rescale_k;
  if (dit_step_cache_probes(&o.step_cache))
    for (int i = 0; i < steps; i++) {
      const int fresh = i == 0 || (two && expert[i] != expert[i - 1]);
      if (rc.probed[i] != 1) return fail("%s", "a step without exactly one probe");
      if (fresh != isnan(rc.change[i])) {
        fprintf(stderr, "step_cache_check: FAIL: step %d's probe change is %g: expected %s\n", i, rc.change[i],
                fresh ? "NaN (no previous signal)" : "a number");
        return 1;
      }
    }
  expected_full(&o.step_cache, &rc, xs, two ? expert : NULL, coef, k, full);
  char got[4096] = "", want[4096] = "";
  int bad = 0, saved = 0, first_skip = steps;
  for (int i = 0; i < steps; i++) {
    const double g = m->generate.present ? o.true_cfg : expert[i] ? o.guidance_2 : o.guidance;
    const int forwards = g > 1.0 && dit_runtime_cfg_lanes(rt) != 2 ? 2 : 1;
    if (!rc.computed[i]) snprintf(got + strlen(got), sizeof got - strlen(got), " %d", i);
    if (!full[i]) snprintf(want + strlen(want), sizeof want - strlen(want), " %d", i);
    if (!full[i] && first_skip == steps) first_skip = i;
    bad += skipped[i] != (rc.computed[i] ? 0 : forwards);
    saved += skipped[i];
  }
  if (strcmp(got, want)) {
    fprintf(stderr, "step_cache_check: FAIL: skipped steps [%s ] differ from the rule's [%s ]\n", got, want);
    return 1;
  }
  if (bad) return fail("%s", "the forwards counted for skipped steps differ from the steps' forwards");

  if (reuse_hidden && !hidden) return fail("%s", "reuse=hidden: the run reused at the output (the plan has no hidden-level site)");
  /* Each skipped prediction from the recorded ones (the output-level reuse; the hidden-level one
   * is the model's head on the kept residual: only the decisions and the replay are checked). */
  for (int i = 0, a = -1, b = -1; i < steps && !hidden; i++) {
    const float *p = rc.p + (size_t)i * n;
    if (two && i > 0 && expert[i] != expert[i - 1]) a = b = -1;
    if (rc.computed[i]) {
      a = b, b = i;
      continue;
    }
    if (a < 0) return fail("%s", "a skipped step without two full predictions before it");
    const float *prev = rc.p + (size_t)(i - 1) * n, *pa = rc.p + (size_t)a * n, *pb = rc.p + (size_t)b * n;
    const float *xi = xs + (size_t)i * n, *xb = xs + (size_t)b * n;
    const int easy = o.step_cache.mode == DIT_STEP_CACHE_EASYCACHE || dit_step_cache_probes(&o.step_cache);
    double worst = 0, scale = 0;
    for (size_t j = 0; j < n; j++) {
      const float e = easy ? xi[j] + (pb[j] - xb[j]) : prev[j] + (pb[j] - pa[j]) / (float)(b - a);
      worst = fmax(worst, fabs((double)e - (double)p[j]));
      scale = fmax(scale, fabs((double)e));
    }
    if (!(worst <= 1e-6 * scale)) {
      if (easy) fprintf(stderr, "step_cache_check: FAIL: step %d's prediction is %g away from x_%d + (P_%d - x_%d)\n", i, worst, i, b, b);
      else
        fprintf(stderr, "step_cache_check: FAIL: step %d's prediction is %g away from P_%d + (P_%d - P_%d) / %d\n", i, worst, i - 1, b, a,
                b - a);
      return 1;
    }
  }
  /* Before the first skip the runs are one. */
  if (first_skip < steps && memcmp(rc.p, rx.p, (size_t)first_skip * n * sizeof(float)))
    return fail("%s", "a step before the first skip differs from the exact run");
  if (first_skip == steps && memcmp(cached, exact, n * sizeof *cached)) return fail("%s", "nothing skipped, yet the latents differ from exact");

  /* The replay's final latents. */
  const dit_parity_t pr = dit_parity_f32(replay, cached, n), px = dit_parity_f32(cached, exact, n);
  if (!(pr.nonfinite == 0 && pr.max_rel <= 1e-4)) {
    fprintf(stderr, "step_cache_check: FAIL: the replayed latents differ from the cached run's: max_rel_err %.3e\n", pr.max_rel);
    return 1;
  }
  char mode[64];
  printf("step_cache_check: %s (W %d, C %d), %d steps: skipped%s (%d forwards saved) as the rule; cached predictions %s; first %d steps "
         "equal the exact run's; replay max_rel_err %.3e; against exact max_rel_err %.3e cosine %.9f\n",
         dit_step_cache_describe(&o.step_cache, mode, sizeof mode), o.step_cache.warmup, o.step_cache.cooldown, steps, got[0] ? got : " none",
         saved, hidden ? "from the head on the kept residual" : "exact", first_skip, pr.max_rel, px.max_rel, px.cosine);
  float *bufs[] = {noise, exact, cached, replay, xs, rx.p, rc.p};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
  free(rx.computed);
  free(rc.computed);
  free(rc.change);
  free(rc.probed);
  free(skipped);
  free(expert);
  free(full);
  free(init.data);
  free(prompt.data);
  free(negative.data);
  for (size_t i = 0; i < o.n_args; i++) free(args[i].t.data);
  dit_safetensors_close(st);
  dit_runtime_destroy(rt);
  dit_cache_profile_free(&profile);
  return 0;
}
