/* Flow-matching samplers, state in fp32 (coefficients in double):
 *  - UniPC as diffusers' UniPCMultistepScheduler with prediction_type=flow_prediction,
 *    use_flow_sigmas=True, solver_order=2, solver_type=bh2, predict_x0, lower_order_final,
 *    final_sigmas_type=zero, timestep_spacing=linspace, flow_shift=shift;
 *  - Euler as FlowMatchEulerDiscreteScheduler(shift=shift). */
#ifndef DIT_RUNTIME_SAMPLER_H
#define DIT_RUNTIME_SAMPLER_H

#include <stddef.h>

#include "base/status.h"

typedef enum dit_sampler_kind {
  DIT_SAMPLER_UNIPC = 0,
  DIT_SAMPLER_EULER = 1,
} dit_sampler_kind_t;

typedef struct dit_sampler dit_sampler_t;

/* n_elems: elements of one latent sample tensor (all of the batch). Caller owns *out. */
dit_status_t dit_sampler_create(dit_sampler_kind_t kind, int steps, double shift, size_t n_elems,
                                dit_sampler_t **out);
void dit_sampler_destroy(dit_sampler_t *s);
int dit_sampler_steps(const dit_sampler_t *s);
/* The timestep the transformer receives at step i, exactly as diffusers passes it: UniPC's
 * int64 timesteps (sigma*1000 truncated), Euler's float32 ones. */
double dit_sampler_timestep(const dit_sampler_t *s, int i);
double dit_sampler_sigma(const dit_sampler_t *s, int i);
/* One step, in order i = 0..steps-1: sample (fp32, n_elems) is replaced by the next one
 * given the model output at this step. */
dit_status_t dit_sampler_step(dit_sampler_t *s, const float *model_out, float *sample);
/* Parses "unipc" / "euler". */
int dit_sampler_kind_parse(const char *name, dit_sampler_kind_t *out);

#endif
