/* Samplers against diffusers: schedules and a synthetic run recorded in
 * tests/data/sampler_golden.json by tests/data/make_goldens.py, plus argument checks. */
/* GCC does not know this pragma (it warns, and relies on -ffp-contract=off instead); clang
 * honours it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#pragma STDC FP_CONTRACT OFF
#pragma GCC diagnostic pop

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/fileio.h"
#include "check.h"
#include "runtime/sampler.h"

#define N_SYNTH 8

/* Must match synth_model_out in make_goldens.py. */
static void synth_model_out(const float *sample, int i, float *out) {
  for (int j = 0; j < N_SYNTH; j++) {
    double c = (double)(((j * 37 + i * 11) % 17) - 8) / 8.0;
    out[j] = (float)(0.5 * (double)sample[j] + 0.1 * c);
  }
}

static double num_at(const cJSON *arr, int i) {
  const cJSON *v = cJSON_GetArrayItem(arr, i);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Max |ours - ref| / max |ref| over a vector, the project's "max relative error". */
static double max_rel_err(const float *ours, const cJSON *ref, int n) {
  double num = 0.0, den = 0.0;
  for (int j = 0; j < n; j++) {
    double r = num_at(ref, j);
    if (isnan(r)) return INFINITY;
    num = fmax(num, fabs((double)ours[j] - r));
    den = fmax(den, fabs(r));
  }
  return den > 0 ? num / den : num;
}

static void check_case(const cJSON *cs, const cJSON *init) {
  const char *kind_name = cJSON_GetStringValue(cJSON_GetObjectItem(cs, "sampler"));
  const cJSON *j_steps = cJSON_GetObjectItem(cs, "steps");
  const cJSON *j_shift = cJSON_GetObjectItem(cs, "shift");
  const cJSON *timesteps = cJSON_GetObjectItem(cs, "timesteps");
  const cJSON *sigmas = cJSON_GetObjectItem(cs, "sigmas");
  const cJSON *latents = cJSON_GetObjectItem(cs, "latents");
  dit_sampler_kind_t kind;
  CHECK(kind_name && dit_sampler_kind_parse(kind_name, &kind) == 0);
  CHECK(cJSON_IsNumber(j_steps) && cJSON_IsNumber(j_shift));
  if (!kind_name || !cJSON_IsNumber(j_steps) || !cJSON_IsNumber(j_shift)) return;
  const int steps = j_steps->valueint;
  const double shift = j_shift->valuedouble;
  CHECK_EQ_INT(cJSON_GetArraySize(timesteps), steps);
  CHECK_EQ_INT(cJSON_GetArraySize(sigmas), steps + 1);
  CHECK_EQ_INT(cJSON_GetArraySize(latents), steps);
  if (cJSON_GetArraySize(timesteps) != steps || cJSON_GetArraySize(sigmas) != steps + 1 ||
      cJSON_GetArraySize(latents) != steps)
    return;

  dit_sampler_t *s = NULL;
  CHECK_OK(dit_sampler_create(kind, steps, shift, N_SYNTH, &s));
  if (!s) return;
  CHECK_EQ_INT(dit_sampler_steps(s), steps);

  int ts_bad = 0, sig_exact = 0;
  double sig_worst = 0.0;
  for (int i = 0; i < steps; i++) {
    double want = num_at(timesteps, i), got = dit_sampler_timestep(s, i);
    if (got != want) {
      if (ts_bad++ < 3)
        fprintf(stderr, "%s %d/%g: timestep[%d] = %.17g, diffusers %.17g\n", kind_name, steps,
                shift, i, got, want);
    }
  }
  for (int i = 0; i <= steps; i++) {
    double want = num_at(sigmas, i), got = dit_sampler_sigma(s, i);
    double rel = want != 0.0 ? fabs(got - want) / fabs(want) : fabs(got);
    sig_worst = fmax(sig_worst, rel);
    sig_exact += got == want;
  }
  CHECK_EQ_INT(ts_bad, 0);
  CHECK(sig_worst <= 1e-7);
  CHECK_EQ_INT(sig_exact, steps + 1); /* the schedule is diffusers' to the bit */

  float x[N_SYNTH], mo[N_SYNTH];
  for (int j = 0; j < N_SYNTH; j++) x[j] = (float)num_at(init, j);
  double lat_worst = 0.0;
  int lat_exact = 0;
  for (int i = 0; i < steps; i++) {
    synth_model_out(x, i, mo);
    CHECK_OK(dit_sampler_step(s, mo, x));
    const cJSON *ref = cJSON_GetArrayItem(latents, i);
    double err = max_rel_err(x, ref, N_SYNTH);
    if (err > 1e-6)
      fprintf(stderr, "%s %d/%g: latents after step %d: max rel err %.3g\n", kind_name, steps,
              shift, i, err);
    CHECK(err <= 1e-6);
    lat_worst = fmax(lat_worst, err);
    for (int j = 0; j < N_SYNTH; j++) lat_exact += (double)x[j] == num_at(ref, j);
  }
  /* Euler's update is one float32 multiply-add per element, as torch does it: to the bit.
   * UniPC's corrector and predictor sum in another order than torch's kernels: within 1e-6. */
  if (kind == DIT_SAMPLER_EULER) CHECK_EQ_INT(lat_exact, steps * N_SYNTH);
  /* One step too many is refused. */
  CHECK_ERR(dit_sampler_step(s, mo, x), OUT_OF_RANGE, "steps");
  printf("%-5s steps %2d shift %g: sigmas %d/%d bit-exact (max rel %.2g), latents %d/%d "
         "bit-exact (max rel %.2g)\n",
         kind_name, steps, shift, sig_exact, steps + 1, sig_worst, lat_exact, steps * N_SYNTH,
         lat_worst);
  dit_sampler_destroy(s);
}

static void test_golden(void) {
  const char *dir = getenv("DIT_TEST_DATA");
  char path[4096];
  snprintf(path, sizeof path, "%s/sampler_golden.json", dir ? dir : "data");
  char *text = NULL;
  size_t size = 0;
  CHECK_OK(dit_file_read(path, 16u << 20, &text, &size));
  if (!text) return;
  cJSON *doc = cJSON_ParseWithLength(text, size);
  CHECK(doc != NULL);
  const cJSON *init = cJSON_GetObjectItem(doc, "init");
  const cJSON *cases = cJSON_GetObjectItem(doc, "cases");
  CHECK_EQ_INT(cJSON_GetArraySize(init), N_SYNTH);
  CHECK(cJSON_GetArraySize(cases) >= 6);
  const cJSON *cs;
  cJSON_ArrayForEach(cs, cases) check_case(cs, init);
  cJSON_Delete(doc);
  free(text);
}

/* The end of the schedule: UniPC's last step lands on the converted x0 exactly (final sigma
 * 0 gives lambda = +inf and expm1(-inf) = -1) and nothing becomes NaN. */
static void test_final_step(void) {
  for (int steps = 1; steps <= 3; steps++) {
    dit_sampler_t *s = NULL;
    CHECK_OK(dit_sampler_create(DIT_SAMPLER_UNIPC, steps, 3.0, 2, &s));
    if (!s) continue;
    CHECK(dit_sampler_sigma(s, steps) == 0.0);
    float x[2] = {0.5f, -1.25f}, mo[2] = {0.25f, 2.0f};
    for (int i = 0; i < steps; i++) {
      float before[2] = {x[0], x[1]};
      CHECK_OK(dit_sampler_step(s, mo, x));
      if (i == steps - 1 && steps == 1) {
        /* One step: no corrector, so the result is sample - sigma_0 * model_out. */
        float sig = (float)dit_sampler_sigma(s, 0);
        CHECK(x[0] == before[0] - sig * mo[0]);
        CHECK(x[1] == before[1] - sig * mo[1]);
      }
    }
    CHECK(isfinite(x[0]) && isfinite(x[1]));
    dit_sampler_destroy(s);
  }
}

static void test_args(void) {
  dit_sampler_t *s = NULL;
  CHECK_ERR(dit_sampler_create(DIT_SAMPLER_UNIPC, 0, 3.0, 4, &s), OUT_OF_RANGE, "steps = 0");
  CHECK_ERR(dit_sampler_create(DIT_SAMPLER_EULER, 4, 0.0, 4, &s), INVALID_ARGUMENT, "shift");
  CHECK_ERR(dit_sampler_create(DIT_SAMPLER_EULER, 4, NAN, 4, &s), INVALID_ARGUMENT, "shift");
  CHECK_ERR(dit_sampler_create(DIT_SAMPLER_EULER, 4, 3.0, 0, &s), INVALID_ARGUMENT, "n_elems");
  CHECK_ERR(dit_sampler_create((dit_sampler_kind_t)7, 4, 3.0, 4, &s), INVALID_ARGUMENT, "kind 7");
  CHECK(s == NULL);
  CHECK_OK(dit_sampler_create(DIT_SAMPLER_EULER, 4, 3.0, 4, &s));
  CHECK(isnan(dit_sampler_timestep(s, 4)));
  CHECK(isnan(dit_sampler_sigma(s, 5)));
  CHECK_ERR(dit_sampler_step(s, NULL, NULL), INVALID_ARGUMENT, "NULL");
  dit_sampler_destroy(s);
  dit_sampler_destroy(NULL);

  dit_sampler_kind_t k;
  CHECK(dit_sampler_kind_parse("unipc", &k) == 0 && k == DIT_SAMPLER_UNIPC);
  CHECK(dit_sampler_kind_parse("euler", &k) == 0 && k == DIT_SAMPLER_EULER);
  CHECK(dit_sampler_kind_parse("ddim", &k) == -1);
}

int main(void) {
  test_golden();
  test_final_step();
  test_args();
  return check_summary("test_sampler");
}
