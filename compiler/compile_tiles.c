/* A VAE decode's tile plan from its memory budget: see compile_internal.h. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "artifacts/manifest.h"
#include "artifacts/plan_memory.h"
#include "compiler/compile_internal.h"
#include "passes/passes.h"

/* The plan of the graph req describes, as the compile lowers it. */
static dit_status_t plan_of(const dit_model_t *m, const dit_shape_request_t *req, const char *target, dit_plan_t **plan) {
  dit_graph_t *g = NULL;
  dit_pass_result_t pres;
  memset(&pres, 0, sizeof pres);
  const dit_pass_options_t popt = {NULL, NULL};
  dit_status_t s = dit_model_build_graph(m, req, &g);
  if (!s) s = dit_compile_lower_target(target, g, NULL);
  if (!s) s = dit_passes_run(g, &popt, &pres);
  if (!s) s = dit_compile_lower(g, pres.arena_bytes, plan);
  dit_graph_destroy(g);
  return s;
}

/* What a runtime allocates for plan (dit_plan_memory) and its weights, each aligned as the weights
 * blob aligns them, less what it borrows from lender's (if not NULL). */
static uint64_t runtime_bytes(const dit_plan_t *plan, int device, const dit_plan_t *lender) {
  dit_plan_memory_t mem;
  dit_plan_memory(plan, device, &mem);
  uint64_t n = mem.total - dit_plan_lent_bytes(plan, lender);
  for (size_t i = 0; i < plan->n_values; i++)
    if (plan->values[i].storage == DIT_STORAGE_WEIGHT) n += (plan->values[i].nbytes + DIT_WEIGHT_ALIGN - 1) / DIT_WEIGHT_ALIGN * DIT_WEIGHT_ALIGN;
  return n;
}

/* The decode's peak with the later chunks' graph of req (vae_first clear) loaded and latent
 * frame 0's borrowing its memory, as the runtime runs them. */
static dit_status_t pair_peak(const dit_model_t *m, dit_shape_request_t req, const char *target, uint64_t *peak) {
  const int device = strcmp(target, "cpu") != 0;
  dit_plan_t *later = NULL, *first = NULL;
  req.vae_first = 0;
  dit_status_t s = plan_of(m, &req, target, &later);
  req.vae_first = 1;
  if (!s) s = plan_of(m, &req, target, &first);
  if (!s) *peak = runtime_bytes(later, device, NULL) + runtime_bytes(first, device, later);
  dit_plan_free(later);
  dit_plan_free(first);
  return s;
}

static double mib(uint64_t b) { return (double)b / (double)(1ull << 20); }

dit_status_t dit_compile_vae_tiles(const dit_compile_options_t *o, int allow_whole, int64_t *tiles, uint64_t *peak_out) {
  *tiles = 0;
  dit_model_t *m = NULL;
  DIT_RETURN_IF(dit_model_load(o->model_dir, o->variant, &m));
  const int device = strcmp(o->target, "cpu") != 0;
  dit_shape_request_t req = o->shape;
  if (req.vae_chunk < 1) req.vae_chunk = 1;
  uint64_t peak = 0, best = UINT64_MAX;
  dit_status_t s = DIT_OK;
  if (allow_whole) {
    req.vae_part = DIT_VAE_WHOLE;
    s = pair_peak(m, req, o->target, &peak);
    if (!s && peak <= (uint64_t)(o->vae_budget_gib * (double)(1ull << 30))) {
      *peak_out = peak;
      dit_model_free(m);
      return DIT_OK; /* fits whole: no split */
    }
    best = peak;
  }
  /* The head runs alone before the tail: its peak must fit as well. */
  uint64_t head_peak = 0;
  if (!s) {
    dit_shape_request_t h = req;
    h.vae_part = DIT_VAE_HEAD;
    h.vae_chunk = 1;
    h.vae_first = 0;
    dit_plan_t *hp = NULL;
    s = plan_of(m, &h, o->target, &hp);
    if (!s) head_peak = runtime_bytes(hp, device, NULL);
    dit_plan_free(hp);
  }
  const uint64_t budget = (uint64_t)(o->vae_budget_gib * (double)(1ull << 30));
  if (!s && head_peak > budget)
    s = DIT_ERR(RESOURCE_EXHAUSTED, "--vae-budget %g: the decoder's head (whole frames up to the latent-resolution blocks) alone "
                "takes a predicted %.1f MiB", o->vae_budget_gib, mib(head_peak));
  /* Peaks fall with the window's width: the fewest windows that fit. */
  const int64_t cols = o->shape.width / 8;
  for (int64_t t = 1; !s && t <= cols; t++) {
    req.vae_part = DIT_VAE_TAIL;
    req.vae_tiles = t;
    dit_latent_shape_t ls;
    dit_status_t e = dit_model_latent_shape(m, &req, &ls);
    if (e) { /* no more windows: the narrowest has been tried */
      dit_status_free(e);
      break;
    }
    s = pair_peak(m, req, o->target, &peak);
    if (s) break;
    if (head_peak > peak) peak = head_peak;
    if (peak < best) best = peak;
    if (peak <= budget) {
      *tiles = t;
      *peak_out = peak;
      break;
    }
  }
  if (!s && !*tiles)
    s = DIT_ERR(RESOURCE_EXHAUSTED, "--vae-budget %g: the VAE decode takes a predicted %.1f MiB at the least (its narrowest windows), "
                "more than the budget", o->vae_budget_gib, mib(best));
  dit_model_free(m);
  return s;
}
