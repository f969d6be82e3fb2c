/* Flow-matching samplers, state in fp32 (coefficients in double):
 *  - UniPC as diffusers' UniPCMultistepScheduler with prediction_type=flow_prediction,
 *    use_flow_sigmas=True, solver_order=2, solver_type=bh2, predict_x0, lower_order_final,
 *    final_sigmas_type=zero, timestep_spacing=linspace, flow_shift=shift;
 *  - Euler as FlowMatchEulerDiscreteScheduler(shift=shift), or with a full flow-match schedule
 *    (dit_flow_schedule_t) as the FLUX, Qwen-Image and HunyuanVideo pipelines set it. */
#ifndef DIT_RUNTIME_SAMPLER_H
#define DIT_RUNTIME_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef enum dit_sampler_kind {
  DIT_SAMPLER_UNIPC = 0,
  DIT_SAMPLER_EULER = 1,
} dit_sampler_kind_t;

typedef struct dit_sampler dit_sampler_t;

/* The sigmas a pipeline hands FlowMatchEulerDiscreteScheduler.set_timesteps before shifting. */
typedef enum dit_flow_sigmas {
  /* None: set_timesteps(n) spaces them (float64) between the constructor's sigma_max and
   * sigma_min (Wan's Euler). */
  DIT_FLOW_SIGMAS_DEFAULT = 0,
  DIT_FLOW_SIGMAS_FLUX = 1,    /* linspace(1, 1/n, n) as float32 (FLUX, Qwen-Image) */
  DIT_FLOW_SIGMAS_HUNYUAN = 2, /* linspace(1, 0, n + 1)[:-1] as float32 (HunyuanVideo) */
} dit_flow_sigmas_t;

typedef enum dit_time_shift {
  DIT_TIME_SHIFT_EXPONENTIAL = 0, /* e^mu / (e^mu + (1/t - 1)) */
  DIT_TIME_SHIFT_LINEAR = 1,      /* mu / (mu + (1/t - 1)) */
} dit_time_shift_t;

/* FlowMatchEulerDiscreteScheduler's schedule settings (its config) and what the pipeline passes
 * to set_timesteps (the initial sigmas and mu). */
typedef struct dit_flow_schedule {
  dit_flow_sigmas_t sigmas;
  double shift;                /* the static shift, used when !use_dynamic_shifting; > 0 */
  int use_dynamic_shifting;    /* shift by mu (resolution-dependent) instead of `shift` */
  double mu;                   /* dit_flow_calculate_shift's value; read only when dynamic */
  dit_time_shift_t time_shift;
  double shift_terminal;       /* 0: none; else in (0, 1): the last sigma is stretched to it */
  int invert_sigmas;           /* sigmas become 1 - sigma and the terminal sigma 1 (Mochi) */
  int64_t num_train_timesteps; /* 1000 in every published config */
} dit_flow_schedule_t;

/* FlowMatchEulerDiscreteScheduler(shift=shift)'s settings with default sigmas: what the
 * "euler" sampler of dit_sampler_create runs. */
dit_flow_schedule_t dit_flow_schedule_default(double shift);

/* The pipelines' calculate_shift: mu linear in the image tokens, base_shift at base_seq_len and
 * max_shift at max_seq_len (extrapolated beyond), in double as Python computes it. */
double dit_flow_calculate_shift(double image_seq_len, double base_seq_len, double max_seq_len,
                                double base_shift, double max_shift);

/* n_elems: elements of one latent sample tensor (all of the batch). Caller owns *out. */
dit_status_t dit_sampler_create(dit_sampler_kind_t kind, int steps, double shift, size_t n_elems,
                                dit_sampler_t **out);
/* An Euler sampler on the schedule *sched: sigmas and timesteps exactly as set_timesteps
 * computes them (float64 where it uses numpy float64 arrays, float32 where float32 ones or
 * torch), the terminal sigma appended. Refuses settings outside the ranges above, naming the
 * field and value. */
dit_status_t dit_sampler_create_flow(const dit_flow_schedule_t *sched, int steps, size_t n_elems,
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
/* True classifier-free guidance in fp32, as the pipelines combine the two predictions:
 * out = neg + scale * (pos - neg), elementwise over n (out may be pos or neg). */
void dit_cfg_combine(const float *pos, const float *neg, float scale, size_t n, float *out);
/* Qwen-Image's variant: the combination rescaled per row of the last dimension (rows x dim) to
 * the norm of pos's row: comb * (||pos|| / ||comb||). Norms accumulate in double, so they may
 * differ from the reference's float32 reduction in the last bit. out may be pos or neg. */
void dit_cfg_combine_norm(const float *pos, const float *neg, float scale, size_t rows, size_t dim,
                          float *out);
/* Parses "unipc" / "euler". */
int dit_sampler_kind_parse(const char *name, dit_sampler_kind_t *out);

#endif
