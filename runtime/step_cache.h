/* Step caching: some denoising steps skip the transformer and take a prediction extrapolated
 * from the two most recent computed ones. Steps are numbered from 0; P_i is the prediction step
 * i hands the sampler (the velocity, after classifier-free guidance where it applies). A skipped
 * step uses P_i = P_{i-1} + (P_b - P_a) / (b - a), a < b the two most recent full steps, in fp32
 * elementwise. Every mode runs the first `warmup` and the last `cooldown` steps in full, and any
 * step before two full predictions exist (at the start, and after dit_step_cache_reset).
 *  - cadence:N  step i runs in full when (i - warmup) mod N == 0;
 *  - delta:T    after each full step, r = sum|P_b - P_a| / sum|P_a| (double accumulation); the
 *               next step is skipped when r < T, and a skipped step is always followed by a full
 *               one. T = 0 skips nothing.
 *  - easycache:T EasyCache (Zhou et al., "Less is Enough: Training-Free Video Diffusion
 *               Acceleration via Runtime-Adaptive Caching", arXiv 2507.02860), as its reference
 *               implementation computes it. x_i are the latents the sampler holds at step i (what
 *               the transformer's latent input is made from; dit_step_cache_observe), sums in double:
 *                 after full step b following full step a:  k = sum|P_b - P_a| / sum|x_b - x_a|
 *                 (the transformation rate: how far the output moves per unit of input movement);
 *                 at a step the rule above lets it skip:     E += k * sum|x_i - x_{i-1}| / sum|P_b|
 *                 (the output change this step's input change predicts, relative to the output);
 *               the step is skipped while E < T; when E reaches T (or is not a number) the step runs
 *               and E = 0; every full step sets E = 0. A skipped step reuses the last full step's
 *               transformation: P_i = x_i + (P_b - x_b), not the extrapolation above (x_{i-1} is the
 *               previous step's input, full or skipped). On the guided prediction this is the paper's
 *               per-branch reuse exactly (both branches move by x_i - x_b, which the guidance keeps);
 *               the paper measures k and the norm on the conditional branch alone. T = 0 skips
 *               nothing.
 *  - teacache:T TeaCache (Liu et al., "Timestep Embedding Tells: It's Time to Cache for Video
 *               Diffusion Model", arXiv 2411.19108). Each step the transformer runs up to a probe,
 *               the output of block 0's first modulated norm (the plan's first adaln step of block 0,
 *               conditional branch), whose change the backend's probe kernel measures where the value
 *               lies (dit_runtime_probe_change; the previous step's probe stays in backend memory) and
 *               generate hands to dit_step_cache_probe before the decision: d = sum|q_i - q_{i-1}| /
 *               sum|q_{i-1}| (q_{i-1} the previous step's probe, full or skipped), and at a step the common rule lets it skip  E += max(poly(d), 0), poly
 *               the family's rescaling polynomial (dit_step_cache_set_rescale; identity by default;
 *               the fitted ones dip below 0 between their fitted points, which would let T = 0 skip). The
 *               step is skipped while E < T; when E reaches T (or is not a number, or no previous
 *               probe exists) the step runs the rest of the transformer and E = 0; every full step
 *               sets E = 0. A skipped step reuses the block stack's residual as TeaCache does (see
 *               "Reuse" below), from block 0's input. Single-rank bundles without cfg lanes; with
 *               guidance both branches follow the conditional probe's decision. T = 0 skips nothing.
 *  - fbcache:T  first-block cache, as ParaAttention's FBCache and cache-dit's DBCache (F1B0) decide.
 *               Each step the transformer runs through block 0's image stream (conditional branch);
 *               the probe is block 0's output residual R_i = h_out - h_in, h_in the hidden state
 *               entering block 0 (the value block 0's first residual add reads, made before block 0
 *               from the latent input) and h_out the end of the chain of residual adds (add,
 *               gated_add: their first input is the stream) that starts from it in block 0. For
 *               FLUX's double-stream block 0 that is the image stream. d = sum|R_i - R_b| / sum|R_b|,
 *               R_b the residual of the last FULL step (the signal is kept only on full steps); at a
 *               step the common rule lets it skip, the step is skipped when d < T (no accumulation,
 *               consecutive skips allowed; NaN runs). A skipped step reuses the block stack's
 *               residual from block 0's output, as cache-dit does. T = 0 skips nothing.
 * Reuse (teacache, fbcache). Each branch keeps, on a full step, R = h_end - h_start in backend memory
 * (dit_runtime_residual): h_end the hidden state the output head takes (FLUX.1: the image tokens'
 * slice of the single-stream output), h_start block 0's input (teacache) or output (fbcache); a
 * skipped step runs block 0 up to the probe, writes h_end = h_start + R and runs the head, so the
 * timestep's modulation of the head is this step's. Where the plan's head takes more than h_end from
 * the skipped blocks, or with reuse_output, a skipped step reuses at the output as easycache does:
 * P_i = x_i + (P_b - x_b). */
#ifndef DIT_RUNTIME_STEP_CACHE_H
#define DIT_RUNTIME_STEP_CACHE_H

#include <stddef.h>

#include "base/status.h"

typedef enum dit_step_cache_mode {
  DIT_STEP_CACHE_OFF = 0,
  DIT_STEP_CACHE_CADENCE = 1,
  DIT_STEP_CACHE_DELTA = 2,
  DIT_STEP_CACHE_EASYCACHE = 3,
  DIT_STEP_CACHE_TEACACHE = 4,
  DIT_STEP_CACHE_FBCACHE = 5,
} dit_step_cache_mode_t;

/* The command line's defaults for warmup and cooldown. */
enum { DIT_STEP_CACHE_DEFAULT_WARMUP = 2, DIT_STEP_CACHE_DEFAULT_COOLDOWN = 1 };

typedef struct dit_step_cache_options {
  dit_step_cache_mode_t mode; /* zero: off */
  int cadence;                /* cadence:N's N, >= 2 */
  double threshold;           /* delta:T's, easycache:T's, teacache:T's and fbcache:T's T, finite, >= 0 */
  int warmup;                 /* leading steps always in full, >= 0 */
  int cooldown;               /* trailing steps always in full, >= 0 */
  int reuse_output;           /* teacache, fbcache: reuse at the output (x_i + P_b - x_b) even where the
                                 plan allows the hidden-level reuse (runtime/generate.c) */
} dit_step_cache_options_t;

/* Parses "off", "cadence:N", "delta:T", "easycache:T", "teacache:T" or "fbcache:T" into o->mode and its parameter
 * (warmup and cooldown are left as they are); the error names what was expected and what was found. */
dit_status_t dit_step_cache_parse(const char *spec, dit_step_cache_options_t *o);
/* Refuses out-of-range options, naming the field, the expected range and the value. */
dit_status_t dit_step_cache_check(const dit_step_cache_options_t *o);
/* "off", "cadence:4", "delta:0.05", "easycache:0.06", "teacache:0.08", "fbcache:0.1" (into buf). */
const char *dit_step_cache_describe(const dit_step_cache_options_t *o, char *buf, size_t size);

typedef struct dit_step_cache dit_step_cache_t;

/* A controller for a loop of `steps` steps whose predictions (and latents) have n elements
 * (fp32). Off needs no memory; the other modes keep two predictions, easycache also two latents.
 * Caller owns *out. */
dit_status_t dit_step_cache_create(const dit_step_cache_options_t *o, int steps, size_t n, dit_step_cache_t **out);
void dit_step_cache_destroy(dit_step_cache_t *c);

/* TeaCache's published rescaling polynomial for a manifest's model family (coefficients highest
 * degree first, *k of them), or the identity polynomial where none is published (returns 0 then). */
int dit_step_cache_teacache_rescale(const char *family, const double **coef, int *k);
/* The rescaling polynomial teacache applies to the probe's relative change (highest degree first,
 * at most 8 coefficients; copied). */
void dit_step_cache_set_rescale(dit_step_cache_t *c, const double *coef, int k);
/* teacache, fbcache: step i's probe change (NaN without a previous signal), before
 * dit_step_cache_full decides step i; every step's, full or skipped. Other modes ignore it. */
void dit_step_cache_probe(dit_step_cache_t *c, double change);
/* 1 for the modes that decide inside the forward from a probe (teacache, fbcache). */
int dit_step_cache_probes(const dit_step_cache_options_t *o);
/* sum|b - a| / sum|a| in double (0 for two zero arrays, infinity from a zero a to a nonzero b): the
 * relative L1 change delta's r is. */
double dit_step_cache_relative_l1(const float *a, const float *b, size_t n);

/* Step i's latents x_i (copied where the mode needs them: easycache, teacache, fbcache), before dit_step_cache_full
 * decides step i; every step's, full or skipped. Other modes ignore them. */
void dit_step_cache_observe(dit_step_cache_t *c, const float *x);
/* Called once per step, in order: 1 when step i runs the transformer, 0 when it is skipped (then
 * dit_step_cache_extrapolate gives its prediction). */
int dit_step_cache_full(dit_step_cache_t *c, int i);
/* After full step i: its prediction (copied). */
void dit_step_cache_record(dit_step_cache_t *c, int i, const float *p);
/* A skipped step's prediction: p holds P_{i-1} (the prediction the previous step used) on entry
 * and P_i on return (easycache, teacache, fbcache: x_i + P_b - x_b, whatever p held). */
void dit_step_cache_extrapolate(const dit_step_cache_t *c, float *p);
/* Forgets the predictions (a change of expert: the other model's predictions are no base for
 * extrapolating this one's); the next two steps run in full. */
void dit_step_cache_reset(dit_step_cache_t *c);
/* How many of steps [from, to) will run in full, from the controller's state before step
 * `from` is decided, with no reset in between: exact for off and cadence; for delta,
 * easycache, teacache and fbcache the fewest possible (every step they may skip skipped). What the expert swap paces
 * its loads by. */
int dit_step_cache_forecast_full(const dit_step_cache_t *c, int from, int to);

#endif
