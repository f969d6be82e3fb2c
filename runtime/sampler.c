/* Flow-matching samplers (UniPC and Euler) that reproduce diffusers' schedulers for Wan
 * bit for bit where the reference is deterministic: the schedule is built in double with
 * numpy's operation order and rounded to float32 where diffusers does; every scalar the
 * reference step keeps in a float32 tensor is rounded to float32 here at the same point,
 * and the per-element update uses the same float32 operations in the same order. The only
 * known deviations are last-bit ones from the reference's float32 log/expm1, which are not
 * correctly rounded (ours are). */
/* GCC does not know this pragma (it warns, and relies on -ffp-contract=off instead); clang
 * honours it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#pragma STDC FP_CONTRACT OFF
#pragma GCC diagnostic pop

#include "runtime/sampler.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Float expressions below must round to float after every operation, as the reference's
 * float32 tensor arithmetic does. */
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "runtime/sampler.c needs FLT_EVAL_METHOD == 0 (float arithmetic evaluated in float)"
#endif

#define DIT_TRAIN_TIMESTEPS 1000

struct dit_sampler {
  dit_sampler_kind_t kind;
  int steps;
  int next;      /* index of the next step */
  size_t n;
  double *timesteps; /* [steps], what the transformer receives */
  float *sigmas;     /* [steps + 1], the last one 0 */
  /* UniPC only. */
  float *lambdas;    /* [steps + 1], log(alpha) - log(sigma) as float32; +inf at sigma 0 */
  float *m_older;    /* converted (x0) model output of step next-2 */
  float *m_last;     /* converted model output of step next-1 */
  float *x_last;     /* the (corrected) sample the previous predictor started from */
  int last_order;    /* order of the previous predictor, which is the corrector's order */
};

/* numpy.linspace(start, stop, num)[i]: i * step + start with step = (stop - start) / (num - 1),
 * the last element set to stop exactly. */
static double dit_linspace(double start, double stop, int num, int i) {
  if (num > 1 && i == num - 1) return stop;
  if (num <= 1) return 0.0 * (stop - start) + start;
  double step = (stop - start) / (double)(num - 1);
  return (double)i * step + start;
}

/* Float32 natural log / expm1 of a float32, correctly rounded. */
static float dit_logf_cr(float x) { return (float)log((double)x); }
static float dit_expm1f_cr(float x) { return (float)expm1((double)x); }

static void dit_sampler_unipc_schedule(dit_sampler_t *s, double shift) {
  const int n = s->steps;
  for (int i = 0; i < n; i++) {
    /* linspace(1, 1/1000, n + 1)[:-1], then the flow shift, all in double. */
    double sig = dit_linspace(1.0, 1.0 / DIT_TRAIN_TIMESTEPS, n + 1, i);
    sig = shift * sig / (1.0 + (shift - 1.0) * sig);
    if (i == 0 && fabs(sig - 1.0) < 1e-6) sig -= 1e-6;
    /* Timesteps truncate the double sigma * 1000 to int64; sigmas round it to float32. */
    s->timesteps[i] = (double)(int64_t)(sig * DIT_TRAIN_TIMESTEPS);
    s->sigmas[i] = (float)sig;
  }
  s->sigmas[n] = 0.0f;
  for (int i = 0; i <= n; i++) {
    float sig = s->sigmas[i];
    float alpha = 1.0f - sig;
    /* log(0) = -inf makes the final lambda +inf, as in the reference. */
    s->lambdas[i] = sig == 0.0f ? INFINITY : dit_logf_cr(alpha) - dit_logf_cr(sig);
  }
}

dit_flow_schedule_t dit_flow_schedule_default(double shift) {
  dit_flow_schedule_t c = {0};
  c.sigmas = DIT_FLOW_SIGMAS_DEFAULT;
  c.shift = shift;
  c.time_shift = DIT_TIME_SHIFT_EXPONENTIAL;
  c.num_train_timesteps = DIT_TRAIN_TIMESTEPS;
  return c;
}

double dit_flow_calculate_shift(double image_seq_len, double base_seq_len, double max_seq_len,
                                double base_shift, double max_shift) {
  const double m = (max_shift - base_shift) / (max_seq_len - base_seq_len);
  const double b = base_shift - m * base_seq_len;
  return image_seq_len * m + b;
}

/* x as an element of the reference's array: rounded to float32 when the array is float32 (a
 * float32 +, -, * or / computed in double and rounded once is the float32 result exactly), kept
 * when it is float64. Scalars meeting a float32 array are rounded the same way. */
static double dit_as(int f32, double x) { return f32 ? (double)(float)x : x; }

/* set_timesteps' shift of one sigma t: time_shift(mu, 1.0, t) when dynamic, else
 * shift * t / (1 + (shift - 1) * t). */
static double dit_flow_shift_one(const dit_flow_schedule_t *c, int f32, double t) {
  if (c->use_dynamic_shifting) {
    const double m = dit_as(f32, c->time_shift == DIT_TIME_SHIFT_EXPONENTIAL ? exp(c->mu) : c->mu);
    const double x = dit_as(f32, dit_as(f32, 1.0 / t) - 1.0); /* (1/t - 1) ** 1.0 */
    return dit_as(f32, m / dit_as(f32, m + x));
  }
  const double sh = dit_as(f32, c->shift), sh_m1 = dit_as(f32, c->shift - 1.0);
  return dit_as(f32, dit_as(f32, sh * t) / dit_as(f32, 1.0 + dit_as(f32, sh_m1 * t)));
}

/* FlowMatchEulerDiscreteScheduler.set_timesteps after the constructor, for the sigmas the
 * pipeline passes: sigmas [steps + 1] (terminal appended), timesteps [steps]. */
static void dit_flow_schedule_fill(const dit_flow_schedule_t *c, int n, float *sigmas, double *timesteps) {
  const double ntt = (double)c->num_train_timesteps;
  /* Sigmas the pipeline passes are made float32 (np.array(sigmas).astype(float32)); the
   * default ones stay the float64 of np.linspace. */
  const int f32 = c->sigmas != DIT_FLOW_SIGMAS_DEFAULT;
  double start = 0, stop = 0;
  if (c->sigmas == DIT_FLOW_SIGMAS_DEFAULT) {
    /* The constructor's training sigmas are float32 t / num_train_timesteps, statically
     * shifted in float32 unless dynamic; only the two ends are used, spaced in float64. */
    dit_flow_schedule_t ctor = *c;
    ctor.use_dynamic_shifting = 0;
    const float ntt_f = (float)c->num_train_timesteps;
    double sigma_max = (double)(ntt_f / ntt_f), sigma_min = (double)(1.0f / ntt_f);
    if (!c->use_dynamic_shifting) {
      sigma_max = dit_flow_shift_one(&ctor, 1, sigma_max);
      sigma_min = dit_flow_shift_one(&ctor, 1, sigma_min);
    }
    start = sigma_max * ntt;
    stop = sigma_min * ntt;
  }
  /* The unrounded sigmas live in timesteps until each becomes its float32 timestep. */
  double *sig = timesteps;
  for (int i = 0; i < n; i++) {
    double t;
    if (c->sigmas == DIT_FLOW_SIGMAS_DEFAULT) t = dit_linspace(start, stop, n, i) / ntt;
    else if (c->sigmas == DIT_FLOW_SIGMAS_FLUX) t = (double)(float)dit_linspace(1.0, 1.0 / n, n, i);
    else t = (double)(float)dit_linspace(1.0, 0.0, n + 1, i);
    sig[i] = dit_flow_shift_one(c, f32, t);
  }
  if (c->shift_terminal > 0) {
    /* stretch_shift_to_terminal: 1 - (1 - t) / ((1 - t[-1]) / (1 - shift_terminal)). */
    const double scale = dit_as(f32, dit_as(f32, 1.0 - sig[n - 1]) / dit_as(f32, 1.0 - c->shift_terminal));
    for (int i = 0; i < n; i++) sig[i] = dit_as(f32, 1.0 - dit_as(f32, dit_as(f32, 1.0 - sig[i]) / scale));
  }
  /* From here on float32 tensors: timesteps = sigmas * num_train_timesteps. */
  const float ntt_f = (float)c->num_train_timesteps;
  for (int i = 0; i < n; i++) {
    float s = (float)sig[i];
    if (c->invert_sigmas) s = 1.0f - s;
    sigmas[i] = s;
    timesteps[i] = (double)(s * ntt_f);
  }
  sigmas[n] = c->invert_sigmas ? 1.0f : 0.0f;
}

void dit_sampler_destroy(dit_sampler_t *s) {
  if (!s) return;
  free(s->timesteps);
  free(s->sigmas);
  free(s->lambdas);
  free(s->m_older);
  free(s->m_last);
  free(s->x_last);
  free(s);
}

/* A sampler of `kind` without its schedule, after the checks both constructors share. */
static dit_status_t dit_sampler_alloc(dit_sampler_kind_t kind, int steps, size_t n_elems, dit_sampler_t **out) {
  if (!out) return DIT_ERR(INVALID_ARGUMENT, "sampler: out is NULL");
  *out = NULL;
  if (steps < 1 || steps > 100000)
    return DIT_ERR(OUT_OF_RANGE, "sampler: steps = %d, expected 1..100000", steps);
  if (n_elems == 0) return DIT_ERR(INVALID_ARGUMENT, "sampler: n_elems is 0");
  if (n_elems > SIZE_MAX / sizeof(float))
    return DIT_ERR(OUT_OF_RANGE, "sampler: n_elems = %zu is too large", n_elems);

  dit_sampler_t *s = calloc(1, sizeof *s);
  if (!s) return DIT_ERR(RESOURCE_EXHAUSTED, "sampler: out of memory");
  s->kind = kind;
  s->steps = steps;
  s->n = n_elems;
  s->timesteps = calloc((size_t)steps, sizeof *s->timesteps);
  s->sigmas = calloc((size_t)steps + 1, sizeof *s->sigmas);
  int ok = s->timesteps && s->sigmas;
  if (ok && kind == DIT_SAMPLER_UNIPC) {
    s->lambdas = calloc((size_t)steps + 1, sizeof *s->lambdas);
    s->m_older = malloc(n_elems * sizeof(float));
    s->m_last = malloc(n_elems * sizeof(float));
    s->x_last = malloc(n_elems * sizeof(float));
    ok = s->lambdas && s->m_older && s->m_last && s->x_last;
  }
  if (!ok) {
    dit_sampler_destroy(s);
    return DIT_ERR(RESOURCE_EXHAUSTED, "sampler: out of memory for %zu elements, %d steps",
                   n_elems, steps);
  }
  *out = s;
  return DIT_OK;
}

static int dit_finite_positive(double x) { return x > 0.0 && isfinite(x); }

dit_status_t dit_sampler_create(dit_sampler_kind_t kind, int steps, double shift, size_t n_elems,
                                dit_sampler_t **out) {
  if (kind != DIT_SAMPLER_UNIPC && kind != DIT_SAMPLER_EULER) {
    if (out) *out = NULL;
    return DIT_ERR(INVALID_ARGUMENT, "sampler: unknown kind %d", (int)kind);
  }
  if (kind == DIT_SAMPLER_EULER) {
    const dit_flow_schedule_t c = dit_flow_schedule_default(shift);
    return dit_sampler_create_flow(&c, steps, n_elems, out);
  }
  if (!dit_finite_positive(shift)) {
    if (out) *out = NULL;
    return DIT_ERR(INVALID_ARGUMENT, "sampler: shift = %g, expected a finite value > 0", shift);
  }
  DIT_RETURN_IF(dit_sampler_alloc(kind, steps, n_elems, out));
  dit_sampler_unipc_schedule(*out, shift);
  return DIT_OK;
}

dit_status_t dit_sampler_create_flow(const dit_flow_schedule_t *c, int steps, size_t n_elems,
                                     dit_sampler_t **out) {
  if (out) *out = NULL;
  if (!c) return DIT_ERR(INVALID_ARGUMENT, "sampler: flow schedule is NULL");
  if (c->sigmas != DIT_FLOW_SIGMAS_DEFAULT && c->sigmas != DIT_FLOW_SIGMAS_FLUX &&
      c->sigmas != DIT_FLOW_SIGMAS_HUNYUAN)
    return DIT_ERR(INVALID_ARGUMENT,
                   "sampler: flow schedule sigmas kind %d, expected 0 (default), 1 (FLUX) or 2 (HunyuanVideo)",
                   (int)c->sigmas);
  if (!dit_finite_positive(c->shift))
    return DIT_ERR(INVALID_ARGUMENT, "sampler: shift = %g, expected a finite value > 0", c->shift);
  if (c->use_dynamic_shifting && !isfinite(c->mu))
    return DIT_ERR(INVALID_ARGUMENT, "sampler: mu = %g with dynamic shifting, expected a finite value", c->mu);
  if (c->time_shift != DIT_TIME_SHIFT_EXPONENTIAL && c->time_shift != DIT_TIME_SHIFT_LINEAR)
    return DIT_ERR(INVALID_ARGUMENT, "sampler: time shift type %d, expected 0 (exponential) or 1 (linear)",
                   (int)c->time_shift);
  if (!(c->shift_terminal >= 0.0 && c->shift_terminal < 1.0))
    return DIT_ERR(OUT_OF_RANGE, "sampler: shift_terminal = %g, expected 0 (none) or a value in (0, 1)",
                   c->shift_terminal);
  if (c->num_train_timesteps < 1 || c->num_train_timesteps > 1000000)
    return DIT_ERR(OUT_OF_RANGE, "sampler: num_train_timesteps = %lld, expected 1..1000000",
                   (long long)c->num_train_timesteps);
  DIT_RETURN_IF(dit_sampler_alloc(DIT_SAMPLER_EULER, steps, n_elems, out));
  dit_flow_schedule_fill(c, steps, (*out)->sigmas, (*out)->timesteps);
  return DIT_OK;
}

int dit_sampler_steps(const dit_sampler_t *s) { return s ? s->steps : 0; }

double dit_sampler_timestep(const dit_sampler_t *s, int i) {
  if (!s || i < 0 || i >= s->steps) return NAN;
  return s->timesteps[i];
}

double dit_sampler_sigma(const dit_sampler_t *s, int i) {
  if (!s || i < 0 || i > s->steps) return NAN;
  return (double)s->sigmas[i];
}

/* The coefficients of one UniP/UniC update from s0 = sigmas[i0] to t = sigmas[i0 + 1] in
 * the x0-predicting B(h) = expm1(-h) form, each a float32 scalar as in the reference. */
typedef struct dit_unipc_coef {
  float c_x;   /* sigma_t / sigma_s0 */
  float c_m0;  /* alpha_t * expm1(-h) */
  float c_b;   /* alpha_t * B(h) */
  float hh;    /* -h */
  float b_h;   /* B(h) */
  float h_phi_1;
} dit_unipc_coef_t;

static dit_unipc_coef_t dit_unipc_coef(const dit_sampler_t *s, int i0) {
  dit_unipc_coef_t c;
  const float sigma_t = s->sigmas[i0 + 1];
  const float sigma_s0 = s->sigmas[i0];
  const float alpha_t = 1.0f - sigma_t;
  const float h = s->lambdas[i0 + 1] - s->lambdas[i0];
  c.hh = -h;
  /* At the final sigma 0, h = +inf and expm1(-inf) = -1: the update becomes x0 itself. */
  c.h_phi_1 = dit_expm1f_cr(c.hh);
  c.b_h = c.h_phi_1;
  c.c_x = sigma_t / sigma_s0;
  c.c_m0 = alpha_t * c.h_phi_1;
  c.c_b = alpha_t * c.b_h;
  return c;
}

/* rk = (lambda_si - lambda_s0) / h for the update starting at s0 = i0, history point si. */
static float dit_unipc_rk(const dit_sampler_t *s, int i0, int si) {
  const float h = s->lambdas[i0 + 1] - s->lambdas[i0];
  return (s->lambdas[si] - s->lambdas[i0]) / h;
}

/* Solves [[1, 1], [rk, 1]] x = b in float32 the way LAPACK's sgesv does for 2x2: partial
 * pivoting on the first column, then substitution multiplying by the reciprocal of each
 * pivot (the reference solves this system with torch.linalg.solve). */
static void dit_unipc_solve2(float rk, float b0, float b1, float *x0, float *x1) {
  float a00 = 1.0f, a01 = 1.0f, a10 = rk, a11 = 1.0f;
  if (fabsf(a10) > fabsf(a00)) {
    float t;
    t = a00, a00 = a10, a10 = t;
    t = a01, a01 = a11, a11 = t;
    t = b0, b0 = b1, b1 = t;
  }
  const float l = a10 * (1.0f / a00);
  const float u = a11 - l * a01;
  const float y1 = b1 - l * b0;
  *x1 = y1 * (1.0f / u);
  *x0 = (b0 - a01 * *x1) * (1.0f / a00);
}

static void dit_sampler_unipc_step(dit_sampler_t *s, const float *model_out, float *sample) {
  const int i = s->next;
  const int n_steps = s->steps;
  const float sigma_i = s->sigmas[i];
  const size_t n = s->n;

  /* Corrector (UniC) from step i-1 to i, of the previous predictor's order. */
  const int use_corr = i > 0;
  const int corr_order = s->last_order;
  dit_unipc_coef_t cc = {0};
  float corr_rk = 1.0f, rho_c0 = 0.0f, rho_c1 = 0.5f;
  if (use_corr) {
    cc = dit_unipc_coef(s, i - 1);
    if (corr_order == 2) {
      corr_rk = dit_unipc_rk(s, i - 1, i - 2);
      /* b_k = h_phi_k * k! / B(h), h_phi_1 = expm1(hh) / hh - 1, h_phi_2 = h_phi_1 / hh - 1/2 */
      const float h_phi_k1 = cc.h_phi_1 / cc.hh - 1.0f;
      const float b1 = h_phi_k1 * 1.0f / cc.b_h;
      const float h_phi_k2 = h_phi_k1 / cc.hh - 0.5f;
      const float b2 = h_phi_k2 * 2.0f / cc.b_h;
      dit_unipc_solve2(corr_rk, b1, b2, &rho_c0, &rho_c1);
    }
  }

  /* Predictor (UniP) from step i to i+1: order 1 while warming up and at the last step. */
  int order = n_steps - i < 2 ? n_steps - i : 2;
  if (order > i + 1) order = i + 1;
  const dit_unipc_coef_t pc = dit_unipc_coef(s, i);
  const float pred_rk = order == 2 ? dit_unipc_rk(s, i, i - 1) : 1.0f;
  const float rho_p = 0.5f;

  /* Everything is elementwise, so one pass does conversion, correction and prediction.
   * m_older[j] is dead once read, so it receives this step's converted output and the two
   * history buffers swap roles afterwards. */
  float *m_older = s->m_older, *m_last = s->m_last, *x_last = s->x_last;
  for (size_t j = 0; j < n; j++) {
    float x = sample[j];
    const float m_new = x - sigma_i * model_out[j];
    if (use_corr) {
      const float m0 = m_last[j];
      const float base = cc.c_x * x_last[j] - cc.c_m0 * m0;
      float res = rho_c1 * (m_new - m0);
      if (corr_order == 2) res = rho_c0 * ((m_older[j] - m0) / corr_rk) + res;
      x = base - cc.c_b * res;
    }
    x_last[j] = x;
    float next = pc.c_x * x - pc.c_m0 * m_new;
    if (order == 2) next = next - pc.c_b * (rho_p * ((m_last[j] - m_new) / pred_rk));
    sample[j] = next;
    m_older[j] = m_new;
  }
  s->m_older = m_last;
  s->m_last = m_older;
  s->last_order = order;
}

static void dit_sampler_euler_step(dit_sampler_t *s, const float *model_out, float *sample) {
  const float dt = s->sigmas[s->next + 1] - s->sigmas[s->next];
  for (size_t j = 0; j < s->n; j++) sample[j] = sample[j] + dt * model_out[j];
}

dit_status_t dit_sampler_step(dit_sampler_t *s, const float *model_out, float *sample) {
  if (!s || !model_out || !sample)
    return DIT_ERR(INVALID_ARGUMENT, "sampler step: NULL sampler, model output or sample");
  if (s->next >= s->steps)
    return DIT_ERR(OUT_OF_RANGE, "sampler step: all %d steps already taken", s->steps);
  if (s->kind == DIT_SAMPLER_UNIPC)
    dit_sampler_unipc_step(s, model_out, sample);
  else
    dit_sampler_euler_step(s, model_out, sample);
  s->next++;
  return DIT_OK;
}

void dit_cfg_combine(const float *pos, const float *neg, float scale, size_t n, float *out) {
  for (size_t j = 0; j < n; j++) out[j] = neg[j] + scale * (pos[j] - neg[j]);
}

/* sqrt(sum x^2) of a row, accumulated in double, as float32. */
static float dit_row_norm(const float *x, size_t dim) {
  double acc = 0.0;
  for (size_t k = 0; k < dim; k++) acc += (double)x[k] * (double)x[k];
  return (float)sqrt(acc);
}

void dit_cfg_combine_norm(const float *pos, const float *neg, float scale, size_t rows, size_t dim,
                          float *out) {
  for (size_t r = 0; r < rows; r++) {
    const size_t o = r * dim;
    /* pos's norm first: out may be pos. */
    const float pos_norm = dit_row_norm(pos + o, dim);
    dit_cfg_combine(pos + o, neg + o, scale, dim, out + o);
    const float ratio = pos_norm / dit_row_norm(out + o, dim);
    for (size_t k = 0; k < dim; k++) out[o + k] = out[o + k] * ratio;
  }
}

int dit_sampler_kind_parse(const char *name, dit_sampler_kind_t *out) {
  if (!name || !out) return -1;
  if (strcmp(name, "unipc") == 0) {
    *out = DIT_SAMPLER_UNIPC;
    return 0;
  }
  if (strcmp(name, "euler") == 0) {
    *out = DIT_SAMPLER_EULER;
    return 0;
  }
  return -1;
}
