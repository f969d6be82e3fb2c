/* The denoising loop, as diffusers' WanPipeline and WanImageToVideoPipeline run it: per step
 * the transformer sees the latents (with their image conditioning, runtime/condition.c) in its
 * dtype and the scheduler's timestep; with guidance the conditional and unconditional
 * predictions are combined in fp32; the sampler advances fp32 latents. A two-expert pipeline
 * runs transformer while t >= the boundary and transformer_2 after. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "runtime/ditrun.h"

static dit_status_t read_sample(dit_runtime_t *rt, int lane, float *out, size_t n) {
  dit_tensor_t y;
  DIT_RETURN_IF(dit_runtime_output_lane(rt, lane, "sample", &y));
  if ((size_t)dit_tensor_numel(&y) != n)
    return DIT_ERR(INTERNAL, "output 'sample' has %lld elements, latents %zu", (long long)dit_tensor_numel(&y), n);
  if (dit_convert(out, DIT_F32, y.data, y.dtype, n)) return DIT_ERR(INTERNAL, "output 'sample': not a float tensor");
  return DIT_OK;
}

static dit_status_t predict(dit_runtime_t *rt, const dit_tensor_t *ctx, float *out, size_t n) {
  DIT_RETURN_IF(dit_runtime_set_input(rt, "encoder_hidden_states", ctx));
  DIT_RETURN_IF(dit_runtime_forward(rt));
  return read_sample(rt, 0, out, n);
}

/* Both branches in one forward: lane 0 conditional, lane 1 unconditional. */
static dit_status_t predict_lanes(dit_runtime_t *rt, const dit_tensor_t *cond, const dit_tensor_t *uncond, float *out_c,
                                  float *out_u, size_t n) {
  DIT_RETURN_IF(dit_runtime_set_input_lane(rt, 0, "encoder_hidden_states", cond));
  DIT_RETURN_IF(dit_runtime_set_input_lane(rt, 1, "encoder_hidden_states", uncond));
  DIT_RETURN_IF(dit_runtime_forward(rt));
  DIT_RETURN_IF(read_sample(rt, 0, out_c, n));
  return read_sample(rt, 1, out_u, n);
}

int dit_generate_uses_expert_2(double t, double boundary_timestep) {
  return !((float)t >= (float)boundary_timestep);
}

/* The forwards the current expert runs from step i up to the switch (0: none ahead): what the
 * runtime paces the incoming expert's load by. A step with guidance takes two forwards unless
 * the bundle runs both branches in one (cfg lanes). */
static int forwards_before_switch(const dit_runtime_t *rt, const dit_generate_options_t *o, const dit_sampler_t *smp, double boundary,
                                  int i) {
  const int expert = dit_generate_uses_expert_2(dit_sampler_timestep(smp, i), boundary);
  int n = 0;
  for (int j = i; j < o->steps; j++) {
    if (dit_generate_uses_expert_2(dit_sampler_timestep(smp, j), boundary) != expert) return n;
    const double g = expert ? o->guidance_2 : o->guidance;
    n += g > 1.0 && dit_runtime_cfg_lanes(rt) != 2 ? 2 : 1;
  }
  return 0;
}

dit_status_t dit_runtime_generate(dit_runtime_t *rt, const dit_generate_options_t *o,
                                  const dit_tensor_t *prompt, const dit_tensor_t *negative,
                                  float *latents) {
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  /* The sampler steps the latents; the condition makes the transformer's inputs from them
   * (image-to-video: the mask and image latents concatenated, or the first frame held to the
   * image) and checks the image inputs against the bundle. */
  dit_tensor_t lat = {latents, DIT_F32, 0, {0}};
  DIT_RETURN_IF(dit_condition_latents_shape(m, &lat.rank, lat.dims));
  /* As the pipeline: guidance applies to a step when that step's scale is above 1. */
  const int two = dit_runtime_expert_count(rt) == 2;
  int cfg_any = o->guidance > 1.0 || (two && o->guidance_2 > 1.0);
  if (cfg_any && !negative)
    return DIT_ERR(INVALID_ARGUMENT, "--guidance %g%s: classifier-free guidance needs negative prompt embeddings",
                   two && o->guidance <= 1.0 ? o->guidance_2 : o->guidance, two && o->guidance <= 1.0 ? " (--guidance-2)" : "");
  size_t n = (size_t)dit_tensor_numel(&lat);
  dit_condition_t *cnd;
  DIT_RETURN_IF(dit_condition_create(m, &o->condition, &cnd));

  dit_sampler_t *smp;
  dit_status_t s = dit_sampler_create(o->sampler, o->steps, o->shift, n, &smp);
  if (s) {
    dit_condition_destroy(cnd);
    return s;
  }
  float *cond = malloc(n * sizeof *cond), *uncond = cfg_any ? malloc(n * sizeof *uncond) : NULL;
  s = (!cond || (cfg_any && !uncond)) ? DIT_ERR(RESOURCE_EXHAUSTED, "generate: out of memory") : DIT_OK;
  for (int i = 0; !s && i < o->steps; i++) {
    double t0 = dit_now_s();
    double t = dit_sampler_timestep(smp, i);
    const int second = two && dit_generate_uses_expert_2(t, m->boundary_timestep);
    s = dit_runtime_expert_select(rt, second);
    if (s) break;
    if (two) dit_runtime_expert_upcoming(rt, !second, forwards_before_switch(rt, o, smp, m->boundary_timestep, i));
    const double guidance = second ? o->guidance_2 : o->guidance;
    const int cfg = guidance > 1.0;
    if (o->expert_used) o->expert_used[i] = second;
    dit_tensor_t x, tt, img;
    s = dit_condition_step(cnd, latents, t, &x, &tt, &img);
    if (!s) s = dit_runtime_set_input(rt, "hidden_states", &x);
    if (!s) s = dit_runtime_set_input(rt, "timestep", &tt);
    if (!s && img.data) s = dit_runtime_set_input(rt, "encoder_hidden_states_image", &img);
    int lanes = cfg && dit_runtime_cfg_lanes(rt) == 2;
    if (!s) s = lanes ? predict_lanes(rt, prompt, negative, cond, uncond, n) : predict(rt, prompt, cond, n);
    if (!s && cfg) {
      if (!lanes) s = predict(rt, negative, uncond, n);
      if (!s) dit_cfg_combine(cond, uncond, (float)guidance, n, cond);
    }
    if (!s) s = dit_sampler_step(smp, cond, latents);
    if (s) s = dit_status_annotate(s, "denoising step %d of %d (timestep %g)", i + 1, o->steps, t);
    else if (o->on_step) o->on_step(o->ctx, i, o->steps, t, dit_now_s() - t0);
  }
  if (!s) dit_condition_finish(cnd, latents);
  free(cond);
  free(uncond);
  dit_condition_destroy(cnd);
  dit_sampler_destroy(smp);
  return s;
}
