/* Flow-match schedules, Euler steps and true-CFG combinations against diffusers: the FLUX.1-dev,
 * FLUX.1-schnell, Qwen-Image and HunyuanVideo schedulers as their pipelines set them, recorded
 * in tests/data/flow_schedule_golden.json by tests/data/make_flow_schedule_golden.py. Each
 * case's scheduler config goes through the scheduler_config.json reader, as a pipeline's does. */
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
#include <string.h>

#include "base/fileio.h"
#include "check.h"
#include "compiler/frontend.h"
#include "runtime/sampler.h"

#define MAX_ELEMS 64

static double num_at(const cJSON *arr, int i) {
  const cJSON *v = cJSON_GetArrayItem(arr, i);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Reads n numbers of a JSON array as float32 (they were written from float32 values). */
static int floats_of(const cJSON *arr, float *out, int n) {
  if (cJSON_GetArraySize(arr) != n) return 0;
  for (int i = 0; i < n; i++) out[i] = (float)num_at(arr, i);
  return 1;
}

/* What a pipeline hands its scheduler, from the scheduler config it read. */
static dit_flow_schedule_t schedule_of(const dit_scheduler_defaults_t *d, dit_flow_sigmas_t kind, double mu) {
  dit_flow_schedule_t c = dit_flow_schedule_default(d->shift);
  c.sigmas = kind;
  c.use_dynamic_shifting = d->use_dynamic_shifting;
  c.mu = mu;
  c.time_shift = strcmp(d->time_shift_type, "linear") ? DIT_TIME_SHIFT_EXPONENTIAL : DIT_TIME_SHIFT_LINEAR;
  c.shift_terminal = d->shift_terminal;
  c.invert_sigmas = d->invert_sigmas;
  c.num_train_timesteps = d->num_train_timesteps;
  return c;
}

static void check_case(const cJSON *cs) {
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(cs, "name"));
  const char *kind_name = cJSON_GetStringValue(cJSON_GetObjectItem(cs, "sigmas_kind"));
  const cJSON *config = cJSON_GetObjectItem(cs, "config");
  const cJSON *j_steps = cJSON_GetObjectItem(cs, "steps");
  const cJSON *j_seq = cJSON_GetObjectItem(cs, "image_seq_len");
  const cJSON *j_mu = cJSON_GetObjectItem(cs, "mu");
  const cJSON *sigmas = cJSON_GetObjectItem(cs, "sigmas");
  const cJSON *timesteps = cJSON_GetObjectItem(cs, "timesteps");
  const cJSON *model_out = cJSON_GetObjectItem(cs, "model_out");
  const cJSON *latents = cJSON_GetObjectItem(cs, "latents");
  CHECK(name && kind_name && cJSON_IsObject(config) && cJSON_IsNumber(j_steps));
  if (!name || !kind_name || !cJSON_IsObject(config) || !cJSON_IsNumber(j_steps)) return;
  const int steps = j_steps->valueint;
  dit_flow_sigmas_t kind = !strcmp(kind_name, "flux")      ? DIT_FLOW_SIGMAS_FLUX
                           : !strcmp(kind_name, "hunyuan") ? DIT_FLOW_SIGMAS_HUNYUAN
                                                           : DIT_FLOW_SIGMAS_DEFAULT;
  CHECK(kind != DIT_FLOW_SIGMAS_DEFAULT || !strcmp(kind_name, "default"));

  /* The config as scheduler/scheduler_config.json would hold it. */
  cJSON *cfg = cJSON_Duplicate(config, 1);
  cJSON_DeleteItemFromObject(cfg, "_class_name");
  cJSON_AddStringToObject(cfg, "_class_name", "FlowMatchEulerDiscreteScheduler");
  char *text = cJSON_PrintUnformatted(cfg);
  cJSON_Delete(cfg);
  dit_scheduler_defaults_t d;
  CHECK_OK(dit_scheduler_config_parse(text, strlen(text), "scheduler_config.json", &d));
  free(text);
  if (!d.present) return;

  /* mu as the pipeline computes it from the packed image tokens. */
  double mu = 0.0;
  if (cJSON_IsNumber(j_seq)) {
    mu = dit_flow_calculate_shift(j_seq->valuedouble, (double)d.base_image_seq_len, (double)d.max_image_seq_len,
                                  d.base_shift, d.max_shift);
    CHECK(cJSON_IsNumber(j_mu) && mu == j_mu->valuedouble);
  }
  const dit_flow_schedule_t c = schedule_of(&d, kind, mu);

  const int n_elems = cJSON_GetArraySize(cJSON_GetObjectItem(cs, "init"));
  float x[MAX_ELEMS], mo[MAX_ELEMS], want[MAX_ELEMS];
  CHECK(n_elems > 0 && n_elems <= MAX_ELEMS);
  CHECK_EQ_INT(cJSON_GetArraySize(sigmas), steps + 1);
  CHECK_EQ_INT(cJSON_GetArraySize(timesteps), steps);
  CHECK_EQ_INT(cJSON_GetArraySize(model_out), steps);
  CHECK_EQ_INT(cJSON_GetArraySize(latents), steps);
  if (n_elems <= 0 || n_elems > MAX_ELEMS || cJSON_GetArraySize(sigmas) != steps + 1 ||
      cJSON_GetArraySize(timesteps) != steps || cJSON_GetArraySize(model_out) != steps ||
      cJSON_GetArraySize(latents) != steps)
    return;

  dit_sampler_t *s = NULL;
  CHECK_OK(dit_sampler_create_flow(&c, steps, (size_t)n_elems, &s));
  if (!s) return;
  /* set_timesteps is deterministic float arithmetic: every sigma and timestep bit for bit. */
  int bad = 0;
  for (int i = 0; i <= steps; i++) {
    double got_s = dit_sampler_sigma(s, i), want_s = num_at(sigmas, i);
    double got_t = i < steps ? dit_sampler_timestep(s, i) : 0, want_t = i < steps ? num_at(timesteps, i) : 0;
    if (got_s != want_s || got_t != want_t) {
      if (bad++ < 3)
        fprintf(stderr, "%s %s %d steps: sigma[%d] = %.9g (diffusers %.9g), timestep = %.9g (diffusers %.9g)\n", name,
                kind_name, steps, i, got_s, want_s, got_t, want_t);
    }
  }
  CHECK_EQ_INT(bad, 0);

  /* The Euler steps, also exact: one float32 multiply-add per element. */
  CHECK(floats_of(cJSON_GetObjectItem(cs, "init"), x, n_elems));
  int lat_bad = 0;
  for (int i = 0; i < steps; i++) {
    CHECK(floats_of(cJSON_GetArrayItem(model_out, i), mo, n_elems));
    CHECK(floats_of(cJSON_GetArrayItem(latents, i), want, n_elems));
    CHECK_OK(dit_sampler_step(s, mo, x));
    for (int j = 0; j < n_elems; j++) lat_bad += x[j] != want[j];
  }
  CHECK_EQ_INT(lat_bad, 0);
  printf("%-16s %-7s steps %2d: mu %.6g, %d sigmas, %d latents bit-exact\n", name, kind_name, steps, mu,
         bad ? -1 : steps + 1, steps * n_elems - lat_bad);
  dit_sampler_destroy(s);
}

static void check_cfg(const cJSON *cfg) {
  const cJSON *shape = cJSON_GetObjectItem(cfg, "shape");
  const int rank = cJSON_GetArraySize(shape);
  CHECK(rank >= 1);
  if (rank < 1) return;
  int n = 1;
  for (int i = 0; i < rank; i++) n *= (int)num_at(shape, i);
  const int dim = (int)num_at(shape, rank - 1);
  float pos[MAX_ELEMS], neg[MAX_ELEMS], want[MAX_ELEMS], out[MAX_ELEMS];
  CHECK(n > 0 && n <= MAX_ELEMS);
  if (n <= 0 || n > MAX_ELEMS) return;
  CHECK(floats_of(cJSON_GetObjectItem(cfg, "pos"), pos, n));
  CHECK(floats_of(cJSON_GetObjectItem(cfg, "neg"), neg, n));
  const cJSON *cs;
  int n_cases = 0;
  cJSON_ArrayForEach(cs, cJSON_GetObjectItem(cfg, "cases")) {
    n_cases++;
    const float scale = (float)cJSON_GetNumberValue(cJSON_GetObjectItem(cs, "scale"));
    CHECK(floats_of(cJSON_GetObjectItem(cs, "plain"), want, n));
    dit_cfg_combine(pos, neg, scale, (size_t)n, out);
    int bad = 0;
    for (int j = 0; j < n; j++) bad += out[j] != want[j];
    CHECK_EQ_INT(bad, 0);
    /* The norms accumulate differently from the reference's float32 reduction: a few ulps. */
    CHECK(floats_of(cJSON_GetObjectItem(cs, "norm"), want, n));
    dit_cfg_combine_norm(pos, neg, scale, (size_t)(n / dim), (size_t)dim, out);
    double worst = 0;
    for (int j = 0; j < n; j++)
      worst = fmax(worst, fabs((double)out[j] - want[j]) / fmax(fabs((double)want[j]), 1e-30));
    CHECK(worst <= 5e-7);
    /* In place over pos, as the denoising loop calls it. */
    float inplace[MAX_ELEMS];
    memcpy(inplace, pos, sizeof inplace);
    dit_cfg_combine_norm(inplace, neg, scale, (size_t)(n / dim), (size_t)dim, inplace);
    CHECK(memcmp(inplace, out, (size_t)n * sizeof(float)) == 0);
    printf("cfg scale %g: plain %d/%d bit-exact, norm-rescaled max rel err %.2g\n", scale, n - bad, n, worst);
  }
  CHECK(n_cases >= 2);
}

static void test_golden(void) {
  const char *dir = getenv("DIT_TEST_DATA");
  char path[4096];
  snprintf(path, sizeof path, "%s/flow_schedule_golden.json", dir ? dir : "data");
  char *text = NULL;
  size_t size = 0;
  dit_status_t st = dit_file_read(path, 16u << 20, &text, &size);
  if (st) {
    fprintf(stderr, "test_flow_schedule: cannot read %s: it is written by tests/data/make_flow_schedule_golden.py "
                    "(needs torch and the pinned diffusers)\n", path);
    dit_status_free(st);
    CHECK(!"tests/data/flow_schedule_golden.json is missing");
    return;
  }
  cJSON *doc = cJSON_ParseWithLength(text, size);
  CHECK(doc != NULL);
  const cJSON *cases = cJSON_GetObjectItem(doc, "cases");
  CHECK(cJSON_GetArraySize(cases) >= 12);
  const cJSON *cs;
  cJSON_ArrayForEach(cs, cases) check_case(cs);
  check_cfg(cJSON_GetObjectItem(doc, "cfg"));
  if (check_failures_)
    fprintf(stderr, "reference from diffusers %s, torch %s, numpy %s\n",
            cJSON_GetStringValue(cJSON_GetObjectItem(doc, "diffusers_version")),
            cJSON_GetStringValue(cJSON_GetObjectItem(doc, "torch_version")),
            cJSON_GetStringValue(cJSON_GetObjectItem(doc, "numpy_version")));
  cJSON_Delete(doc);
  free(text);
}

/* Properties that hold whatever the reference: the schedule's ends, the pipelines' mu, refusals. */
static void test_schedule_properties(void) {
  /* calculate_shift: base_shift at base_seq_len, max_shift at max_seq_len. */
  CHECK(dit_flow_calculate_shift(256, 256, 4096, 0.5, 1.15) == 0.5);
  CHECK_NEAR(dit_flow_calculate_shift(4096, 256, 4096, 0.5, 1.15), 1.15, 1e-15);

  /* FLUX sigmas with shift 1 and no dynamic shifting are linspace(1, 1/n, n) as float32, then 0. */
  dit_flow_schedule_t c = dit_flow_schedule_default(1.0);
  c.sigmas = DIT_FLOW_SIGMAS_FLUX;
  dit_sampler_t *s = NULL;
  CHECK_OK(dit_sampler_create_flow(&c, 4, 2, &s));
  CHECK(dit_sampler_sigma(s, 0) == 1.0 && dit_sampler_sigma(s, 1) == (double)0.75f);
  CHECK(dit_sampler_sigma(s, 3) == (double)0.25f && dit_sampler_sigma(s, 4) == 0.0);
  CHECK(dit_sampler_timestep(s, 1) == 750.0);
  dit_sampler_destroy(s);

  /* shift_terminal stretches the last sigma onto it; inverting makes the terminal sigma 1. */
  c = dit_flow_schedule_default(3.0);
  c.sigmas = DIT_FLOW_SIGMAS_HUNYUAN;
  c.shift_terminal = 0.02;
  CHECK_OK(dit_sampler_create_flow(&c, 10, 2, &s));
  CHECK_NEAR(dit_sampler_sigma(s, 9), 0.02, 1e-7);
  CHECK(dit_sampler_sigma(s, 0) == 1.0);
  dit_sampler_destroy(s);
  c.shift_terminal = 0;
  c.invert_sigmas = 1;
  CHECK_OK(dit_sampler_create_flow(&c, 3, 2, &s));
  CHECK(dit_sampler_sigma(s, 0) == 0.0 && dit_sampler_sigma(s, 3) == 1.0);
  dit_sampler_destroy(s);

  /* The time shifts: exponential at mu = 0 is the identity, linear at mu = 0.5 maps 0.75 to
   * 0.5 / (0.5 + 1/0.75 - 1) = 0.6. */
  c = dit_flow_schedule_default(1.0);
  c.sigmas = DIT_FLOW_SIGMAS_FLUX;
  c.use_dynamic_shifting = 1;
  c.mu = 0.0;
  CHECK_OK(dit_sampler_create_flow(&c, 4, 2, &s));
  CHECK(dit_sampler_sigma(s, 1) == (double)0.75f); /* e^0 / (e^0 + 1/t - 1) = t */
  dit_sampler_destroy(s);
  c.time_shift = DIT_TIME_SHIFT_LINEAR;
  c.mu = 0.5;
  CHECK_OK(dit_sampler_create_flow(&c, 4, 2, &s));
  CHECK(dit_sampler_sigma(s, 0) == 1.0);
  CHECK_NEAR(dit_sampler_sigma(s, 1), 0.6, 1e-7);
  dit_sampler_destroy(s);

  /* The default sigmas are the "euler" sampler's. */
  dit_sampler_t *e = NULL;
  c = dit_flow_schedule_default(5.0);
  CHECK_OK(dit_sampler_create(DIT_SAMPLER_EULER, 7, 5.0, 2, &e));
  CHECK_OK(dit_sampler_create_flow(&c, 7, 2, &s));
  for (int i = 0; i <= 7; i++) CHECK(dit_sampler_sigma(s, i) == dit_sampler_sigma(e, i));
  dit_sampler_destroy(s);
  dit_sampler_destroy(e);

  c = dit_flow_schedule_default(3.0);
  c.shift_terminal = 1.0;
  CHECK_ERR(dit_sampler_create_flow(&c, 4, 2, &s), OUT_OF_RANGE, "shift_terminal = 1");
  c = dit_flow_schedule_default(3.0);
  c.use_dynamic_shifting = 1;
  c.mu = NAN;
  CHECK_ERR(dit_sampler_create_flow(&c, 4, 2, &s), INVALID_ARGUMENT, "mu = nan");
  c = dit_flow_schedule_default(-1.0);
  CHECK_ERR(dit_sampler_create_flow(&c, 4, 2, &s), INVALID_ARGUMENT, "shift = -1");
  c = dit_flow_schedule_default(3.0);
  c.sigmas = (dit_flow_sigmas_t)9;
  CHECK_ERR(dit_sampler_create_flow(&c, 4, 2, &s), INVALID_ARGUMENT, "sigmas kind 9");
  c = dit_flow_schedule_default(3.0);
  c.time_shift = (dit_time_shift_t)5;
  CHECK_ERR(dit_sampler_create_flow(&c, 4, 2, &s), INVALID_ARGUMENT, "time shift type 5");
  c = dit_flow_schedule_default(3.0);
  c.num_train_timesteps = 0;
  CHECK_ERR(dit_sampler_create_flow(&c, 4, 2, &s), OUT_OF_RANGE, "num_train_timesteps = 0");
  CHECK_ERR(dit_sampler_create_flow(NULL, 4, 2, &s), INVALID_ARGUMENT, "NULL");
  c = dit_flow_schedule_default(3.0);
  CHECK_ERR(dit_sampler_create_flow(&c, 0, 2, &s), OUT_OF_RANGE, "steps = 0");
  CHECK(s == NULL);
}

int main(void) {
  test_golden();
  test_schedule_properties();
  return check_summary("test_flow_schedule");
}
