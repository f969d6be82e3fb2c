/* The denoising loop, as diffusers' WanPipeline and WanImageToVideoPipeline run it: per step
 * the transformer sees the latents (with their image conditioning, runtime/condition.c) in its
 * dtype and the scheduler's timestep; with guidance the conditional and unconditional
 * predictions are combined in fp32; the sampler advances fp32 latents. A two-expert pipeline
 * runs transformer while t >= the boundary and transformer_2 after. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "artifacts/plan.h"
#include "base/clock.h"
#include "runtime/ditrun.h"

/* ---- step caching (step_cache.h), shared by both loops ---- */

/* Step i's decision, taken once on the guided prediction and the step's latents: 1 when the
 * transformer runs; else pred, which holds P_{i-1}, becomes the cached P_i, and the step's
 * `forwards` are counted as skipped. */
static int cache_decide(dit_step_cache_t *sc, const dit_generate_options_t *o, int i, int forwards, const float *latents,
                        float *pred) {
  dit_step_cache_observe(sc, latents);
  const int full = dit_step_cache_full(sc, i);
  if (!full) dit_step_cache_extrapolate(sc, pred);
  if (o->skipped_forwards) o->skipped_forwards[i] = full ? 0 : forwards;
  return full;
}

/* Step i's prediction as the sampler will take it: a computed one is kept for extrapolating. */
static void cache_settle(dit_step_cache_t *sc, const dit_generate_options_t *o, int i, int full, const float *pred, size_t n) {
  if (full) dit_step_cache_record(sc, i, pred);
  if (o->on_prediction) o->on_prediction(o->ctx, i, pred, n, full);
}

/* Where a probing mode stops the plan and what it measures, and where the block stack's residual
 * is taken: a skipped step then runs block 0 (up to the probe) and the output head on start + R,
 * R = end - start of the last full step, as TeaCache and first-block cache reuse it. */
typedef struct probe_site {
  size_t stop;  /* steps [0, stop] run before the decision */
  size_t value; /* the probed value */
  size_t hold;  /* fbcache: the step before which base is held (SIZE_MAX: teacache, none) */
  size_t base;  /* fbcache: the hidden state entering block 0 */
  size_t start; /* the residual's start: block 0's output (fbcache) or input (teacache) */
  size_t end;   /* the hidden state the head takes (SIZE_MAX: no hidden-level reuse) */
  size_t end_step; /* the step that makes it */
} probe_site_t;

/* The site of the plan it was found in: found once per plan (each expert has its own), not per
 * forward. */
typedef struct site_memo {
  const struct dit_plan *plan;
  probe_site_t site;
} site_memo_t;

/* A step's decision as cache_decide takes it; with teacache it is taken inside the conditional
 * forward, once the plan has made the probe. */
typedef struct step_decision {
  dit_step_cache_t *sc;
  const dit_generate_options_t *o;
  int i, forwards;
  const float *latents;
  float *pred;
  int full;   /* the decision, once taken */
  int slot;   /* the branch this forward runs: 0 conditional (probes and decides), 1 unconditional;
               * on cfg lanes one forward runs both, lane = slot */
  int hidden; /* a skipped step reuses the block stack's residual (probe_site_t), set with the decision */
  site_memo_t *memo; /* the loop's, across its steps */
} step_decision_t;


/* 1 when value v is made (through any chain of steps) from the input value `latent`; memo: -1
 * unknown, else the answer, per value. */
static int from_latent(const struct dit_plan *p, const int32_t *producer, size_t v, size_t latent, int *memo) {
  if (memo[v] >= 0) return memo[v];
  memo[v] = v == latent;
  const int32_t k = producer[v];
  for (int j = 0; !memo[v] && k >= 0 && j < p->steps[k].n_in; j++)
    if (p->values[p->steps[k].in[j]].storage != DIT_STORAGE_WEIGHT) memo[v] = from_latent(p, producer, (size_t)p->steps[k].in[j], latent, memo);
  return memo[v];
}

/* The sum a residual add step makes, and in *src the residual stream it adds onto: an add's or
 * gated_add's result (its first input), the second output of a norm with the residual folded in
 * (base/ops.def: res_at; its first input), or an accumulating linear's result (acc; its
 * accumulated input); -1 for other steps. */
static int32_t residual_sum(const dit_plan_step_t *st, int32_t *src) {
  int bi, ai;
  *src = st->in[0];
  if (st->kind == DIT_OP_ADD || st->kind == DIT_OP_GATED_ADD) return st->out[0];
  if (st->kind == DIT_OP_LINEAR) {
    if (dit_linear_operands(st->kind, &st->attrs, st->n_in, &bi, &ai) || ai < 0) return -1;
    *src = st->in[ai];
    return st->out[0];
  }
  return dit_norm_residual(st->kind, &st->attrs, st->n_in, NULL) > 0 && st->n_out == 2 ? st->out[1] : -1;
}

/* fbcache's site: h_in, the first input of block 0's first residual add (residual_sum) that is
 * made before block 0 from the latent input; h_out, the end of the chain of residual adds in block
 * 0 that starts from it (FLUX's double-stream block 0: the image stream); the plan stops at h_out's
 * step, and h_in is held before block 0's first step (its arena bytes may be reused within it). */
static dit_status_t find_fb_site(const struct dit_plan *p, const char *latent_input, probe_site_t *site) {
  size_t latent = p->n_values, first = p->n_steps;
  for (size_t v = 0; v < p->n_values; v++)
    if (p->values[v].storage == DIT_STORAGE_INPUT && p->values[v].ref && !strcmp(p->values[v].ref, latent_input)) latent = v;
  int32_t *producer = malloc(p->n_values * sizeof *producer + 1);
  int *memo = malloc(p->n_values * sizeof *memo + 1);
  if (!producer || !memo) {
    free(producer), free(memo);
    return DIT_ERR(RESOURCE_EXHAUSTED, "--step-cache fbcache: out of memory scanning the plan");
  }
  for (size_t v = 0; v < p->n_values; v++) producer[v] = -1, memo[v] = -1;
  for (size_t k = 0; k < p->n_steps; k++)
    for (int j = 0; j < p->steps[k].n_out; j++) producer[p->steps[k].out[j]] = (int32_t)k;
  size_t h = p->n_values;
  for (size_t k = 0; k < p->n_steps && h == p->n_values; k++) {
    const dit_plan_step_t *st = &p->steps[k];
    if (st->block != 0) continue;
    if (first == p->n_steps) first = k;
    int32_t src;
    if (residual_sum(st, &src) >= 0 && latent < p->n_values &&
        (producer[src] < 0 || p->steps[producer[src]].block != 0) && from_latent(p, producer, (size_t)src, latent, memo))
      h = (size_t)src;
  }
  free(memo);
  if (h == p->n_values) {
    free(producer);
    return DIT_ERR(UNIMPLEMENTED, "--step-cache fbcache: block 0 of the plan has no residual add on a hidden state made from input '%s'",
                   latent_input);
  }
  site->base = h, site->hold = first;
  for (size_t k = first, cur = h; k < p->n_steps && p->steps[k].block == 0; k++) {
    int32_t src;
    const int32_t sum = residual_sum(&p->steps[k], &src);
    if (sum >= 0 && (size_t)src == cur) cur = (size_t)sum, site->value = cur, site->stop = k;
  }
  free(producer);
  return DIT_OK;
}

/* The one value that steps [first, n) read from those made by steps (lo, hi] (SIZE_MAX when none);
 * *ok 0 when they read more than one. */
static size_t read_from(const struct dit_plan *p, const int32_t *producer, size_t first, size_t lo, size_t hi, int *ok) {
  size_t one = SIZE_MAX;
  *ok = 1;
  for (size_t k = first; *ok && k < p->n_steps; k++)
    for (int j = 0; *ok && j < p->steps[k].n_in; j++) {
      const int32_t v = p->steps[k].in[j], by = producer[v];
      if (by < 0 || (size_t)by <= lo || (size_t)by > hi || (size_t)v == one) continue;
      *ok = one == SIZE_MAX, one = (size_t)v;
    }
  return one;
}

static int same_shape(const dit_plan_value_t *a, const dit_plan_value_t *b) { return a->dtype == b->dtype && a->nbytes == b->nbytes; }

/* The hidden-level reuse's end: the one value the output head (the steps after the last block's)
 * reads from the steps after the probe, shaped as the start; where it is not (FLUX.1's single-stream
 * output holds the text tokens too) and the head's first step alone reads it and makes one value
 * (the image tokens' slice), that value, the head then the steps after it. Where the head reads
 * more than that, there is none: a skipped step reuses at the output. */
static void find_end(const struct dit_plan *p, probe_site_t *site) {
  site->end = site->end_step = SIZE_MAX;
  size_t last = 0;
  for (size_t k = 0; k < p->n_steps; k++)
    if (p->steps[k].block >= 0) last = k;
  int32_t *producer = malloc(p->n_values * sizeof *producer + 1);
  if (!producer) return;
  for (size_t v = 0; v < p->n_values; v++) producer[v] = -1;
  for (size_t k = 0; k < p->n_steps; k++)
    for (int j = 0; j < p->steps[k].n_out; j++) producer[p->steps[k].out[j]] = (int32_t)k;
  int ok;
  size_t end = read_from(p, producer, last + 1, site->stop, last, &ok), end_step = end != SIZE_MAX ? (size_t)producer[end] : 0;
  const dit_plan_value_t *start = &p->values[site->start];
  if (ok && end != SIZE_MAX && !same_shape(start, &p->values[end]) && last + 1 < p->n_steps) {
    const dit_plan_step_t *c = &p->steps[last + 1];
    int reads = 0;
    for (int j = 0; j < c->n_in; j++) reads += (size_t)c->in[j] == end;
    const size_t next = c->n_out == 1 ? (size_t)c->out[0] : SIZE_MAX;
    if (reads && next != SIZE_MAX && read_from(p, producer, last + 2, site->stop, last + 1, &ok) == next && ok)
      end = next, end_step = last + 1;
    else ok = 0;
  }
  if (ok && end != SIZE_MAX && same_shape(start, &p->values[end])) site->end = end, site->end_step = end_step;
  free(producer);
}

/* teacache's site: the output of block 0's first modulated norm (the plan's first adaln step of
 * block 0); fbcache's: find_fb_site. Both take the block stack's residual where find_end finds its
 * end (teacache from block 0's input, fbcache from its output) unless the options ask for the
 * output-level reuse. */
static dit_status_t find_site(const dit_runtime_t *rt, const dit_generate_options_t *o, probe_site_t *site) {
  const struct dit_plan *p = dit_runtime_plan(rt);
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  probe_site_t fb = {0, 0, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX};
  dit_status_t s = find_fb_site(p, m->generate.present ? m->generate.latents : "hidden_states", &fb);
  if (o->step_cache.mode == DIT_STEP_CACHE_FBCACHE) {
    DIT_RETURN_IF(s);
    *site = fb;
    site->start = fb.value;
  } else {
    size_t i = 0;
    while (i < p->n_steps && !(p->steps[i].kind == DIT_OP_ADALN && p->steps[i].block == 0)) i++;
    if (i == p->n_steps) {
      dit_status_free(s);
      return DIT_ERR(UNIMPLEMENTED, "--step-cache teacache: the plan has no adaln step in block 0 to probe");
    }
    *site = (probe_site_t){i, (size_t)p->steps[i].out[0], SIZE_MAX, SIZE_MAX, s ? SIZE_MAX : fb.base, SIZE_MAX, SIZE_MAX};
    dit_status_free(s);
  }
  if (site->start != SIZE_MAX && !o->step_cache.reuse_output) find_end(p, site);
  return DIT_OK;
}


/* One branch's forward; d (NULL: a plain forward) takes the step's decision: with teacache or
 * fbcache the plan runs step by step up to the probe; in the conditional branch (slot 0) the
 * backend measures the probe's change where it lies (only two sums come back) and the controller
 * decides. A full step runs the rest (keeping the block stack's residual where the site has one);
 * a skipped one runs the output head on the reused residual (d->hidden), or nothing more (d->pred
 * then holds the controller's output-level reuse). teacache keeps every step's probe as the next
 * one's reference; fbcache only a full step's. The unconditional branch follows the decision. On
 * cfg lanes each segment runs on both lanes (the plan is the same on each), lane 0 probes and each
 * lane keeps its own residual. */
static dit_status_t forward_decided(dit_runtime_t *rt, step_decision_t *d) {
  if (!d) return dit_runtime_forward(rt);
  const struct dit_plan *p = dit_runtime_plan(rt);
  if (d->memo->plan != p) {
    d->memo->site = (probe_site_t){0, 0, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX};
    DIT_RETURN_IF(find_site(rt, d->o, &d->memo->site));
    d->memo->plan = p;
  }
  const probe_site_t site = d->memo->site;
  const int fb = site.hold != SIZE_MAX, probe = d->slot == 0;
  const int lo = dit_runtime_cfg_lanes(rt) == 2 ? 0 : d->slot, hi = dit_runtime_cfg_lanes(rt) == 2 ? 2 : d->slot + 1;
  if (probe && site.hold <= site.stop) {
    DIT_RETURN_IF(dit_runtime_steps(rt, 0, site.hold));
    DIT_RETURN_IF(dit_runtime_probe_hold(rt, site.base));
    DIT_RETURN_IF(dit_runtime_steps(rt, site.hold, site.stop + 1));
  } else {
    DIT_RETURN_IF(dit_runtime_steps(rt, 0, site.stop + 1));
  }
  if (probe) {
    double change;
    DIT_RETURN_IF(dit_runtime_probe_change(rt, site.value, fb ? DIT_PROBE_HELD : SIZE_MAX, !fb, &change));
    dit_step_cache_probe(d->sc, change);
    if (d->o->on_probe) d->o->on_probe(d->o->ctx, d->i, change);
    d->full = cache_decide(d->sc, d->o, d->i, d->forwards, d->latents, d->pred);
    d->hidden = site.end != SIZE_MAX;
    if (d->o->hidden_reuse) *d->o->hidden_reuse = d->hidden;
    if (fb && d->full) DIT_RETURN_IF(dit_runtime_probe_change(rt, site.value, DIT_PROBE_HELD, 1, &change));
  }
  if (!d->hidden) return d->full ? dit_runtime_steps(rt, site.stop + 1, p->n_steps) : DIT_OK;
  for (int s = lo; s < hi; s++) DIT_RETURN_IF(dit_runtime_residual(rt, DIT_RESIDUAL_START, s, site.start));
  if (d->full) DIT_RETURN_IF(dit_runtime_steps(rt, site.stop + 1, site.end_step + 1));
  for (int s = lo; s < hi; s++) DIT_RETURN_IF(dit_runtime_residual(rt, d->full ? DIT_RESIDUAL_KEEP : DIT_RESIDUAL_APPLY, s, site.end));
  return dit_runtime_steps(rt, site.end_step + 1, p->n_steps);
}

/* The loop's controller: teacache and fbcache probe rank 0's plan step by step between the two
 * halves of the conditional forward, which a single-rank bundle runs as one forward does, and a
 * bundle with cfg lanes of one rank each with both lanes in step (dit_runtime_stepwise); teacache
 * takes the options' rescaling polynomial, else the family's. The runtime's previous probe is
 * forgotten: a run starts with none. */
static dit_status_t cache_create(dit_runtime_t *rt, const dit_generate_options_t *o, size_t n, dit_step_cache_t **out) {
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  if (dit_step_cache_probes(&o->step_cache))
    DIT_RETURN_IF_ERROR(dit_runtime_stepwise(rt), "--step-cache %s: the probe is read between plan steps",
                        o->step_cache.mode == DIT_STEP_CACHE_FBCACHE ? "fbcache" : "teacache");
  dit_runtime_probe_reset(rt);
  DIT_RETURN_IF(dit_step_cache_create(&o->step_cache, o->steps, n, out));
  const double *coef;
  int k;
  dit_step_cache_teacache_rescale(m->family, &coef, &k);
  if (o->step_cache_rescale) coef = o->step_cache_rescale, k = o->step_cache_rescale_k;
  dit_step_cache_set_rescale(*out, coef, k);
  return DIT_OK;
}

/* Step i's decision and prediction: without teacache the decision comes first and a full step runs
 * predict(d NULL); with it predict takes the decision (d) in the conditional forward. */
static int probes(const dit_generate_options_t *o) { return dit_step_cache_probes(&o->step_cache); }

static dit_status_t read_sample(dit_runtime_t *rt, int lane, float *out, size_t n) {
  dit_tensor_t y;
  DIT_RETURN_IF(dit_runtime_output_lane(rt, lane, "sample", &y));
  if ((size_t)dit_tensor_numel(&y) != n)
    return DIT_ERR(INTERNAL, "output 'sample' has %lld elements, latents %zu", (long long)dit_tensor_numel(&y), n);
  if (dit_convert(out, DIT_F32, y.data, y.dtype, n)) return DIT_ERR(INTERNAL, "output 'sample': not a float tensor");
  return DIT_OK;
}

static dit_status_t predict(dit_runtime_t *rt, const dit_tensor_t *ctx, float *out, size_t n, step_decision_t *d) {
  DIT_RETURN_IF(dit_runtime_set_input(rt, "encoder_hidden_states", ctx));
  DIT_RETURN_IF(forward_decided(rt, d));
  return d && !d->full && !d->hidden ? DIT_OK : read_sample(rt, 0, out, n);
}

/* The unconditional branch's forward of a step the conditional one decided (NULL without a probe). */
static step_decision_t *second_branch(step_decision_t *d) {
  if (d) d->slot = 1;
  return d;
}

/* Both branches in one forward: lane 0 conditional, lane 1 unconditional. */
static dit_status_t predict_lanes(dit_runtime_t *rt, const dit_tensor_t *cond, const dit_tensor_t *uncond, float *out_c,
                                  float *out_u, size_t n, step_decision_t *d) {
  DIT_RETURN_IF(dit_runtime_set_input_lane(rt, 0, "encoder_hidden_states", cond));
  DIT_RETURN_IF(dit_runtime_set_input_lane(rt, 1, "encoder_hidden_states", uncond));
  DIT_RETURN_IF(forward_decided(rt, d));
  if (d && !d->full && !d->hidden) return DIT_OK;
  DIT_RETURN_IF(read_sample(rt, 0, out_c, n));
  return read_sample(rt, 1, out_u, n);
}

int dit_generate_uses_expert_2(double t, double boundary_timestep) {
  return !((float)t >= (float)boundary_timestep);
}

/* The forwards the current expert runs from step i up to the switch (0: none ahead): what the
 * runtime paces the incoming expert's load by. A step with guidance takes two forwards unless
 * the bundle runs both branches in one (cfg lanes); steps the step cache skips take none. */
static int forwards_before_switch(const dit_runtime_t *rt, const dit_generate_options_t *o, const dit_sampler_t *smp,
                                  const dit_step_cache_t *sc, double boundary, int i) {
  const int expert = dit_generate_uses_expert_2(dit_sampler_timestep(smp, i), boundary);
  int k = i;
  while (k < o->steps && dit_generate_uses_expert_2(dit_sampler_timestep(smp, k), boundary) == expert) k++;
  if (k == o->steps) return 0;
  const double g = expert ? o->guidance_2 : o->guidance;
  return dit_step_cache_forecast_full(sc, i, k) * (g > 1.0 && dit_runtime_cfg_lanes(rt) != 2 ? 2 : 1);
}

/* ---- bundles with a generate section ---- */

static const dit_manifest_io_t *find_input(const dit_manifest_t *m, const char *name) {
  for (size_t i = 0; i < m->n_inputs; i++)
    if (!strcmp(m->io_inputs[i].name, name)) return &m->io_inputs[i];
  return NULL;
}

/* Wan's loop is built in; every other family's comes with its bundle. */
static dit_status_t check_generate_known(const dit_manifest_t *m) {
  if (m->generate.present || !strcmp(m->family, "wan")) return DIT_OK;
  return DIT_ERR(FAILED_PRECONDITION, "manifest.json: a %s bundle without a generate section: its schedule comes from a pipeline's "
                 "scheduler config; compile the pipeline directory (model_index.json), not the transformer folder", m->model_class);
}

dit_status_t dit_generate_latents_shape(const dit_manifest_t *m, int *rank, int64_t dims[DIT_MAX_RANK]) {
  DIT_RETURN_IF(check_generate_known(m));
  if (!m->generate.present) return dit_condition_latents_shape(m, rank, dims);
  const dit_manifest_io_t *x = find_input(m, m->generate.latents);
  if (!x) return DIT_ERR(INTERNAL, "manifest.json: generate.latents names no input"); /* the parser checked it */
  *rank = x->rank;
  memcpy(dims, x->dims, sizeof x->dims);
  return DIT_OK;
}

static const dit_tensor_t *find_arg(const dit_generate_options_t *o, const char *name) {
  for (size_t i = 0; i < o->n_args; i++)
    if (!strcmp(o->args[i].name, name)) return &o->args[i].t;
  return NULL;
}

/* v as the pipeline holds it in the model's dtype: rounded to bf16 for a bf16 bundle. */
static float in_dtype(float v, dit_dtype_t dt) { return dt == DIT_BF16 ? dit_bf16_to_f32(dit_f32_to_bf16(v)) : v; }

/* A [B] input holding one value per batch item (ditc compiles batches of at most 4096). */
static dit_status_t set_scalar_input(dit_runtime_t *rt, const dit_manifest_t *m, const char *name, float v) {
  float vals[4096];
  const dit_manifest_io_t *io = find_input(m, name);
  if (!io || io->rank != 1 || io->dims[0] < 1 || io->dims[0] > (int64_t)(sizeof vals / sizeof vals[0]))
    return DIT_ERR(UNIMPLEMENTED, "manifest.json: input '%s' is not [batch] with batch 1..4096: generate feeds one value per sample",
                   name);
  for (int64_t i = 0; i < io->dims[0]; i++) vals[i] = v;
  const dit_tensor_t t = {vals, DIT_F32, 1, {io->dims[0]}};
  return dit_runtime_set_input(rt, name, &t);
}

/* One branch's text inputs: the section's conditions from the arguments named prefix+argument,
 * on every lane (lane < 0) or one. */
static dit_status_t set_conditions(dit_runtime_t *rt, const dit_manifest_generate_t *g, const dit_generate_options_t *o,
                                   const char *prefix, int lane) {
  for (size_t i = 0; i < g->n_conditions; i++) {
    char name[96];
    snprintf(name, sizeof name, "%s%s", prefix, g->conditions[i].argument);
    const dit_tensor_t *t = find_arg(o, name);
    if (!t) return DIT_ERR(INVALID_ARGUMENT, "generate: tensor '%s' missing: the pipeline passes it as %s", name, g->conditions[i].input);
    DIT_RETURN_IF_ERROR(lane < 0 ? dit_runtime_set_input(rt, g->conditions[i].input, t)
                                 : dit_runtime_set_input_lane(rt, lane, g->conditions[i].input, t),
                        "generate: tensor '%s'", name);
  }
  return DIT_OK;
}

static dit_status_t predict_branch(dit_runtime_t *rt, const dit_manifest_generate_t *g, const dit_generate_options_t *o,
                                   const char *prefix, float *out, size_t n, step_decision_t *d) {
  DIT_RETURN_IF(set_conditions(rt, g, o, prefix, -1));
  DIT_RETURN_IF(forward_decided(rt, d));
  return d && !d->full && !d->hidden ? DIT_OK : read_sample(rt, 0, out, n);
}

/* Both branches in one forward on a bundle with cfg lanes: lane 0 the prompt, lane 1 the negative. */
static dit_status_t predict_both(dit_runtime_t *rt, const dit_manifest_generate_t *g, const dit_generate_options_t *o, float *cond,
                                 float *uncond, size_t n, step_decision_t *d) {
  DIT_RETURN_IF(set_conditions(rt, g, o, "", 0));
  DIT_RETURN_IF(set_conditions(rt, g, o, "negative_", 1));
  DIT_RETURN_IF(forward_decided(rt, d));
  if (d && !d->full && !d->hidden) return DIT_OK;
  DIT_RETURN_IF(read_sample(rt, 0, cond, n));
  return read_sample(rt, 1, uncond, n);
}

dit_status_t dit_generate_sampler(const dit_runtime_t *rt, const dit_generate_options_t *o, size_t n, dit_sampler_t **out) {
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  const dit_manifest_generate_t *g = &m->generate;
  DIT_RETURN_IF(check_generate_known(m));
  if (!g->present) return dit_sampler_create(o->sampler, o->steps, o->shift, n, out);
  dit_flow_schedule_t fs = {
      .sigmas = g->schedule.sigmas_to_zero ? DIT_FLOW_SIGMAS_HUNYUAN : DIT_FLOW_SIGMAS_FLUX,
      .shift = g->schedule.shift,
      .use_dynamic_shifting = g->schedule.dynamic,
      .time_shift = g->schedule.time_shift_linear ? DIT_TIME_SHIFT_LINEAR : DIT_TIME_SHIFT_EXPONENTIAL,
      .shift_terminal = g->schedule.has_shift_terminal ? g->schedule.shift_terminal : 0,
      .num_train_timesteps = g->schedule.num_train_timesteps,
  };
  if (fs.use_dynamic_shifting)
    fs.mu = dit_flow_calculate_shift((double)g->schedule.image_seq_len, (double)g->schedule.base_image_seq_len,
                                     (double)g->schedule.max_image_seq_len, g->schedule.base_shift, g->schedule.max_shift);
  return dit_sampler_create_flow(&fs, o->steps, n, out);
}

/* One step's guided prediction into cond on a bundle with a generate section: the latents, the
 * timestep / divisor (in the model's dtype unless the section says fp32) and the embedded
 * guidance in the model's dtype, a forward per branch (both in one on cfg lanes), true CFG. */
static dit_status_t flow_predict(dit_runtime_t *rt, const dit_generate_options_t *o, const dit_tensor_t *lat, double t,
                                 float *cond, float *uncond, step_decision_t *d) {
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  const dit_manifest_generate_t *g = &m->generate;
  const dit_dtype_t dt = m->dtype;
  const size_t n = (size_t)dit_tensor_numel(lat);
  const int cfg = o->true_cfg > 1.0, lanes = cfg && dit_runtime_cfg_lanes(rt) == 2;
  DIT_RETURN_IF(dit_runtime_set_input(rt, g->latents, lat));
  const float tv = g->timestep_f32 ? (float)t / (float)g->timestep_divisor
                                   : in_dtype(in_dtype((float)t, dt) / (float)g->timestep_divisor, dt);
  DIT_RETURN_IF(set_scalar_input(rt, m, g->timestep_input, tv));
  if (g->guidance_input[0])
    DIT_RETURN_IF(set_scalar_input(rt, m, g->guidance_input, (float)(o->guidance * g->guidance_scale)));
  DIT_RETURN_IF(lanes ? predict_both(rt, g, o, cond, uncond, n, d) : predict_branch(rt, g, o, "", cond, n, d));
  if (!cfg || (d && !d->full && !d->hidden)) return DIT_OK;
  if (!lanes) DIT_RETURN_IF(predict_branch(rt, g, o, "negative_", uncond, n, second_branch(d)));
  const size_t dim = (size_t)lat->dims[lat->rank - 1];
  if (g->true_cfg_norm) dit_cfg_combine_norm(cond, uncond, (float)o->true_cfg, n / dim, dim, cond);
  else dit_cfg_combine(cond, uncond, (float)o->true_cfg, n, cond);
  return DIT_OK;
}

/* should_stop's answer after step i (0-based): a status with its code, or OK. */
static dit_status_t stop_requested(const dit_generate_options_t *o, int i) {
  const int code = o->should_stop && i + 1 < o->steps ? o->should_stop(o->ctx) : 0;
  if (!code) return DIT_OK;
  return dit_status_make((dit_code_t)code, "stopped after step %d of %d (%s)", i + 1, o->steps,
                         code == DIT_CODE_DEADLINE_EXCEEDED ? "deadline passed" : code == DIT_CODE_ABORTED ? "cancelled" : "stop requested");
}

/* The pipelines' loop over FlowMatchEulerDiscreteScheduler (FluxPipeline, ...): per step the
 * guided prediction (flow_predict), the Euler step in fp32, and the latents back in the model's
 * dtype as the scheduler returns them. */
static dit_status_t generate_flow(dit_runtime_t *rt, const dit_generate_options_t *o, float *latents) {
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  dit_tensor_t lat = {latents, DIT_F32, 0, {0}};
  DIT_RETURN_IF(dit_generate_latents_shape(m, &lat.rank, lat.dims));
  const size_t n = (size_t)dit_tensor_numel(&lat);
  const int cfg = o->true_cfg > 1.0;
  dit_step_cache_t *sc;
  DIT_RETURN_IF(cache_create(rt, o, n, &sc));
  dit_sampler_t *smp = NULL;
  dit_status_t s = dit_generate_sampler(rt, o, n, &smp);
  float *cond = s ? NULL : malloc(n * sizeof *cond), *uncond = cfg && !s ? malloc(n * sizeof *uncond) : NULL;
  if (!s && (!cond || (cfg && !uncond))) s = DIT_ERR(RESOURCE_EXHAUSTED, "generate: out of memory");
  const dit_dtype_t dt = m->dtype;
  const int forwards = cfg && dit_runtime_cfg_lanes(rt) != 2 ? 2 : 1;
  site_memo_t memo = {0};
  for (int i = 0; !s && i < o->steps; i++) {
    double t0 = dit_now_s();
    const double t = dit_sampler_timestep(smp, i);
    step_decision_t d = {sc, o, i, forwards, latents, cond, 1, 0, 0, &memo};
    if (!probes(o)) d.full = cache_decide(sc, o, i, forwards, latents, cond);
    if (d.full) s = flow_predict(rt, o, &lat, t, cond, uncond, probes(o) ? &d : NULL);
    if (!s) cache_settle(sc, o, i, d.full, cond, n);
    if (!s) s = dit_sampler_step(smp, cond, latents);
    for (size_t j = 0; !s && dt == DIT_BF16 && j < n; j++) latents[j] = in_dtype(latents[j], dt);
    if (s) s = dit_status_annotate(s, "denoising step %d of %d (timestep %g)", i + 1, o->steps, t);
    else if (o->on_step) o->on_step(o->ctx, i, o->steps, t, dit_now_s() - t0);
    if (!s) s = stop_requested(o, i);
  }
  free(cond);
  free(uncond);
  dit_sampler_destroy(smp);
  dit_step_cache_destroy(sc);
  return s;
}

/* One step's guided prediction into cond: the condition's inputs made from the latents, a
 * forward per branch (both in one on cfg lanes), the guidance combined in fp32. */
static dit_status_t wan_predict(dit_runtime_t *rt, dit_condition_t *cnd, const float *latents, double t, double guidance,
                                const dit_tensor_t *prompt, const dit_tensor_t *negative, float *cond, float *uncond, size_t n,
                                step_decision_t *d) {
  const int cfg = guidance > 1.0, lanes = cfg && dit_runtime_cfg_lanes(rt) == 2;
  dit_tensor_t x, tt, img;
  DIT_RETURN_IF(dit_condition_step(cnd, latents, t, &x, &tt, &img));
  DIT_RETURN_IF(dit_runtime_set_input(rt, "hidden_states", &x));
  DIT_RETURN_IF(dit_runtime_set_input(rt, "timestep", &tt));
  if (img.data) DIT_RETURN_IF(dit_runtime_set_input(rt, "encoder_hidden_states_image", &img));
  DIT_RETURN_IF(lanes ? predict_lanes(rt, prompt, negative, cond, uncond, n, d) : predict(rt, prompt, cond, n, d));
  if (!cfg || (d && !d->full && !d->hidden)) return DIT_OK;
  if (!lanes) DIT_RETURN_IF(predict(rt, negative, uncond, n, second_branch(d)));
  dit_cfg_combine(cond, uncond, (float)guidance, n, cond);
  return DIT_OK;
}

/* Attention-state reuse over a denoising loop: the planner, the decisions of the step about to
 * run, and the statistics its forwards measured (the drift the next step's decisions read). */
typedef struct reuse_run {
  dit_ditango_t *p;
  int layers, groups;
  uint8_t *compute, *anchor;
  double *drift, *local_norm, *group_norm, *group_weight, *error;
  double *next;       /* per layer: the drift predicted for the step about to be decided */
  double *rate;       /* per layer: the drift per step over the last anchor interval (NaN: none yet) */
  int *last_anchor;   /* per layer: its last anchor step (-1: none) */
} reuse_run_t;

static void reuse_destroy(reuse_run_t *r) {
  dit_ditango_destroy(r->p);
  free(r->compute), free(r->anchor), free(r->drift), free(r->local_norm), free(r->group_norm), free(r->group_weight), free(r->error);
  free(r->next), free(r->rate), free(r->last_anchor);
}

static dit_status_t reuse_create(dit_runtime_t *rt, const dit_generate_options_t *o, reuse_run_t *r) {
  memset(r, 0, sizeof *r);
  if (!o->reuse_on) return DIT_OK;
  dit_runtime_reuse_shape(rt, &r->layers, &r->groups);
  if (!r->layers) return DIT_ERR(INVALID_ARGUMENT, "--reuse-ratio: the bundle was compiled without --reuse ditango (no state cache to reuse)");
  if (o->step_cache.mode != DIT_STEP_CACHE_OFF)
    return DIT_ERR(UNIMPLEMENTED, "--reuse-ratio with --step-cache: attention-state reuse and step caching are not combined yet");
  const size_t L = (size_t)r->layers, S = L * (size_t)r->groups;
  DIT_RETURN_IF(dit_ditango_create(&o->reuse, o->steps, r->layers, r->groups, &r->p));
  r->compute = malloc(S), r->anchor = malloc(L);
  r->drift = calloc(L, sizeof(double)), r->local_norm = calloc(L, sizeof(double));
  r->group_norm = calloc(S, sizeof(double)), r->group_weight = calloc(S, sizeof(double)), r->error = calloc(S, sizeof(double));
  r->next = calloc(L, sizeof(double)), r->rate = malloc(L * sizeof(double)), r->last_anchor = malloc(L * sizeof(int));
  if (!r->compute || !r->anchor || !r->drift || !r->local_norm || !r->group_norm || !r->group_weight || !r->error || !r->next ||
      !r->rate || !r->last_anchor)
    return DIT_ERR(RESOURCE_EXHAUSTED, "reuse: out of memory");
  for (size_t l = 0; l < L; l++) r->rate[l] = NAN, r->last_anchor[l] = -1;
  return DIT_OK;
}

/* Step i's decisions, made before its forwards (as they would be made while the previous step
 * runs), from the local drift predicted for step i: the previous step's measured D(i-1) grown
 * linearly with the steps since the anchor, D(i-1) * (i - t_a) / (i - 1 - t_a); right after an
 * anchor, the previous anchor interval's drift per step (0 before there is one). */
static dit_status_t reuse_begin(dit_runtime_t *rt, const dit_generate_options_t *o, reuse_run_t *r, int i) {
  if (!r->p) return DIT_OK;
  for (int l = 0; l < r->layers; l++) {
    int anchor = 0;
    DIT_RETURN_IF(dit_ditango_decide(r->p, i, l, r->next[l], &r->compute[(size_t)l * (size_t)r->groups], &anchor));
    r->anchor[l] = (uint8_t)anchor;
  }
  return dit_runtime_reuse_begin(rt, r->compute, r->anchor, o->reuse.diagnostic);
}

static dit_status_t reuse_end(dit_runtime_t *rt, reuse_run_t *r, int i) {
  if (!r->p) return DIT_OK;
  dit_reuse_stats_t st = {r->drift, r->local_norm, r->group_norm, r->group_weight, r->error};
  DIT_RETURN_IF(dit_runtime_reuse_end(rt, &st));
  for (int l = 0; l < r->layers; l++) {
    const size_t at = (size_t)l * (size_t)r->groups;
    if (r->anchor[l]) {
      DIT_RETURN_IF(dit_ditango_anchor(r->p, l, r->local_norm[l], &r->group_norm[at], &r->group_weight[at]));
      if (r->last_anchor[l] >= 0) r->rate[l] = r->drift[l] / (double)(i - r->last_anchor[l]);
      r->last_anchor[l] = i;
      r->next[l] = isnan(r->rate[l]) ? 0 : r->rate[l];
    } else {
      r->next[l] = r->drift[l] * (double)(i + 1 - r->last_anchor[l]) / (double)(i - r->last_anchor[l]);
    }
    for (int g = 0; g < r->groups; g++)
      if (!isnan(r->error[at + (size_t)g])) dit_ditango_measured(r->p, i, l, g, r->error[at + (size_t)g]);
  }
  return DIT_OK;
}

static dit_status_t reuse_finish(const dit_generate_options_t *o, const reuse_run_t *r) {
  if (!r->p) return DIT_OK;
  if (o->reuse_counts) dit_ditango_counts(r->p, &o->reuse_counts[0], &o->reuse_counts[1]);
  if (!o->reuse_report) return DIT_OK;
  FILE *f = fopen(o->reuse_report, "w");
  if (!f) return DIT_ERR(IO, "--reuse-report %s: cannot create it", o->reuse_report);
  dit_status_t s = dit_ditango_report(r->p, f);
  if (fclose(f) && !s) s = DIT_ERR(IO, "--reuse-report %s: write failed", o->reuse_report);
  return s;
}

dit_status_t dit_runtime_generate(dit_runtime_t *rt, const dit_generate_options_t *o,
                                  const dit_tensor_t *prompt, const dit_tensor_t *negative,
                                  float *latents) {
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  DIT_RETURN_IF(check_generate_known(m));
  if (m->generate.present) {
    if (o->reuse_on) return DIT_ERR(UNIMPLEMENTED, "--reuse-ratio: attention-state reuse drives Wan bundles so far");
    return generate_flow(rt, o, latents);
  }
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

  dit_sampler_t *smp = NULL;
  dit_step_cache_t *sc = NULL;
  reuse_run_t ru;
  dit_status_t s = reuse_create(rt, o, &ru);
  if (!s) s = cache_create(rt, o, n, &sc);
  if (!s) s = dit_generate_sampler(rt, o, n, &smp);
  float *cond = s ? NULL : malloc(n * sizeof *cond), *uncond = cfg_any && !s ? malloc(n * sizeof *uncond) : NULL;
  if (!s && (!cond || (cfg_any && !uncond))) s = DIT_ERR(RESOURCE_EXHAUSTED, "generate: out of memory");
  site_memo_t memo = {0};
  for (int i = 0; !s && i < o->steps; i++) {
    double t0 = dit_now_s();
    double t = dit_sampler_timestep(smp, i);
    const int second = two && dit_generate_uses_expert_2(t, m->boundary_timestep);
    s = dit_runtime_expert_select(rt, second);
    if (s) break;
    /* The other expert's predictions are no base for this one's. */
    if (two && i > 0 && second != dit_generate_uses_expert_2(dit_sampler_timestep(smp, i - 1), m->boundary_timestep)) {
      dit_step_cache_reset(sc);
      dit_runtime_probe_reset(rt);
    }
    if (two) dit_runtime_expert_upcoming(rt, !second, forwards_before_switch(rt, o, smp, sc, m->boundary_timestep, i));
    const double guidance = second ? o->guidance_2 : o->guidance;
    const int cfg = guidance > 1.0;
    if (o->expert_used) o->expert_used[i] = second;
    step_decision_t d = {sc, o, i, cfg && dit_runtime_cfg_lanes(rt) != 2 ? 2 : 1, latents, cond, 1, 0, 0, &memo};
    if (!probes(o)) d.full = cache_decide(sc, o, i, d.forwards, latents, cond);
    if (d.full) s = reuse_begin(rt, o, &ru, i);
    if (d.full && !s) s = wan_predict(rt, cnd, latents, t, guidance, prompt, negative, cond, uncond, n, probes(o) ? &d : NULL);
    if (d.full && !s) s = reuse_end(rt, &ru, i);
    if (!s) cache_settle(sc, o, i, d.full, cond, n);
    if (!s) s = dit_sampler_step(smp, cond, latents);
    if (s) s = dit_status_annotate(s, "denoising step %d of %d (timestep %g)", i + 1, o->steps, t);
    else if (o->on_step) o->on_step(o->ctx, i, o->steps, t, dit_now_s() - t0);
    if (!s) s = stop_requested(o, i);
  }
  if (!s) dit_condition_finish(cnd, latents);
  if (!s) s = reuse_finish(o, &ru);
  reuse_destroy(&ru);
  free(cond);
  free(uncond);
  dit_condition_destroy(cnd);
  dit_sampler_destroy(smp);
  dit_step_cache_destroy(sc);
  return s;
}
