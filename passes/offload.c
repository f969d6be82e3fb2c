/* The F* model and the residency planner. */
#include "passes/offload.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const dit_hw_profile_t kPresets[] = {
    /* Datasheet dense bf16 rates; host links as measured with pinned 1 GiB copies (PCIe Gen5
     * x16 on the SXM parts); the efficiencies are placeholders until calibration measures them. */
    {"h100-pcie", 756, 50, 0.6, 0.9, 0, 0, 0, 0},
    {"h100-sxm", 989, 55, 0.6, 0.9, 0, 0, 0, 0},
    {"h200-sxm", 989, 55.3, 0.6, 0.9, 0, 0, 0, 0},
};

const dit_hw_profile_t *dit_hw_profile_preset(const char *name) {
  for (size_t i = 0; i < sizeof kPresets / sizeof kPresets[0]; i++)
    if (!strcmp(kPresets[i].name, name)) return &kPresets[i];
  return NULL;
}

static double sig3(double v) {
  if (!(v > 0)) return v;
  char buf[32];
  snprintf(buf, sizeof buf, "%.3g", v);
  double r;
  sscanf(buf, "%lf", &r);
  return r;
}

void dit_hw_profile_normalize(dit_hw_profile_t *p) {
  p->p_peak_tflops = sig3(p->p_peak_tflops);
  p->bw_h2d_gbs = sig3(p->bw_h2d_gbs);
  p->eta_comp = sig3(p->eta_comp);
  p->eta_pref = sig3(p->eta_pref);
  p->overhead_mib = sig3(p->overhead_mib);
  p->step_overhead_us = sig3(p->step_overhead_us);
  p->coll_latency_us = sig3(p->coll_latency_us);
  p->coll_gbs = sig3(p->coll_gbs);
}

static double comp_rate(const dit_hw_profile_t *hw) { return hw->eta_comp * hw->p_peak_tflops * 1e12; }    /* FLOP/s */
static double pref_rate(const dit_hw_profile_t *hw) { return hw->eta_pref * hw->bw_h2d_gbs * 1e9; }        /* B/s */

double dit_offload_compute_ms(const dit_hw_profile_t *hw, double flops, uint32_t steps) {
  return 1e3 * flops / comp_rate(hw) + 1e-3 * hw->step_overhead_us * steps;
}

static double coll_ms(const dit_hw_profile_t *hw, const dit_offload_block_t *b) {
  if (!(hw->coll_gbs > 0)) return 0;
  return 1e-3 * hw->coll_latency_us * b->coll_count + 1e3 * b->coll_bytes / (hw->coll_gbs * 1e9);
}

/* Resident fractions come in whole chunks (layerwise: all or nothing), then whole tensors. */
static void set_resident(dit_offload_block_t *b, const dit_offload_request_t *req, double r) {
  if (r < 0) r = 0;
  if (r > 1) r = 1;
  uint64_t cb = req->mode == DIT_OFFLOAD_CHUNKED && req->chunk_bytes ? req->chunk_bytes : (b->bytes ? b->bytes : 1);
  b->chunks = (uint32_t)((b->bytes + cb - 1) / cb);
  if (b->chunks == 0) b->chunks = 1;
  b->resident_chunks = (uint32_t)ceil(r * b->chunks - 1e-9);
  if (b->resident_chunks > b->chunks) b->resident_chunks = b->chunks;
  const uint64_t want = (uint64_t)b->resident_chunks * cb;
  b->resident_bytes = want < b->bytes ? want : b->bytes;
  if (req->whole_tensors && b->resident_bytes < b->bytes) b->resident_bytes = req->whole_tensors(req->ctx, b->offset, b->bytes, b->resident_bytes);
  if (b->resident_bytes > b->bytes) b->resident_bytes = b->bytes;
  b->resident = b->bytes ? (double)b->resident_bytes / (double)b->bytes : 1.0;
}

static uint64_t streamed(const dit_offload_block_t *b) { return b->bytes - b->resident_bytes; }

/* The compute that block i's load can hide behind: the previous block's, and for block 0 the
 * last block's where the runtime loads it across forwards (an even number of blocks). */
static int loads_across(int n) { return n % 2 == 0; }
static double hides_behind_ms(const dit_offload_request_t *req, const dit_offload_block_t *bl, int n, int i) {
  const int j = i > 0 ? i - 1 : loads_across(n) ? n - 1 : -1;
  if (j < 0) return 0;
  return bl[j].t_comp_ms + (req->mode == DIT_OFFLOAD_CHUNKED ? 0 : bl[j].t_coll_ms); /* chunked: not beside collectives */
}

static void evaluate(const dit_hw_profile_t *hw, const dit_offload_request_t *req, dit_offload_block_t *bl, int n,
                     dit_offload_result_t *out) {
  double none = 0, step = 0;
  uint64_t resident = 0, slot = 0, all = 0;
  for (int i = 0; i < n; i++) {
    bl[i].t_comp_ms = dit_offload_compute_ms(hw, bl[i].flops, bl[i].steps);
    bl[i].t_coll_ms = coll_ms(hw, &bl[i]);
    bl[i].t_pref_ms = 1e3 * (double)streamed(&bl[i]) / pref_rate(hw);
    bl[i].f_star = comp_rate(hw) * (double)bl[i].bytes / pref_rate(hw);
    none += bl[i].t_comp_ms + bl[i].t_coll_ms;
    resident += bl[i].bytes - streamed(&bl[i]);
    if (streamed(&bl[i]) > slot) slot = streamed(&bl[i]);
    all += bl[i].bytes;
  }
  if (n > 0) {
    /* The steady state of repeated forwards (a sampler's loop): with an even number of blocks
     * the runtime loads the next forward's block 0 behind the last block's compute; otherwise
     * nothing overlaps block 0's load. */
    const int across = loads_across(n);
    step = across ? 0 : bl[0].t_pref_ms;
    /* Chunked loads only while a block computes (never beside its collectives); layerwise
     * beside its collectives too. */
    const int paced = req->mode == DIT_OFFLOAD_CHUNKED;
    for (int i = 0; i < n; i++) {
      const double next = i + 1 < n ? bl[i + 1].t_pref_ms : across ? bl[0].t_pref_ms : 0.0;
      step += paced ? bl[i].t_coll_ms + fmax(bl[i].t_comp_ms, next) : fmax(bl[i].t_comp_ms + bl[i].t_coll_ms, next);
    }
  }
  out->none_step_ms = none;
  out->step_ms = req->mode == DIT_OFFLOAD_NONE ? none : step;
  out->none_peak_bytes = all + req->other_bytes;
  out->peak_bytes = req->mode == DIT_OFFLOAD_NONE ? out->none_peak_bytes : resident + 2 * slot + req->other_bytes;
}

dit_status_t dit_offload_plan(const dit_hw_profile_t *hw, const dit_offload_request_t *req, dit_offload_block_t *bl, int n,
                              dit_offload_result_t *out) {
  if (!(hw->p_peak_tflops > 0) || !(hw->bw_h2d_gbs > 0) || !(hw->eta_comp > 0) || !(hw->eta_pref > 0))
    return DIT_ERR(INVALID_ARGUMENT, "hardware profile '%s': every rate and efficiency must be positive", hw->name);
  int given = (req->residency >= 0) + (req->memory_budget_bytes > 0) + (req->latency_target_ms > 0);
  if (given > 1) return DIT_ERR(INVALID_ARGUMENT, "give at most one of --residency, --memory-budget and --latency-target");
  if (req->mode == DIT_OFFLOAD_CHUNKED && req->chunk_bytes == 0) return DIT_ERR(INVALID_ARGUMENT, "--chunk-mb must be positive");
  if (req->mode == DIT_OFFLOAD_NONE) {
    for (int i = 0; i < n; i++) set_resident(&bl[i], req, 1);
    evaluate(hw, req, bl, n, out);
    return DIT_OK;
  }
  if (req->memory_budget_bytes > 0) {
    /* Memory falls monotonically with the uniform fraction: bisect for the largest that fits. */
    for (int i = 0; i < n; i++) set_resident(&bl[i], req, 0);
    evaluate(hw, req, bl, n, out);
    if ((double)out->peak_bytes > req->memory_budget_bytes)
      return DIT_ERR(RESOURCE_EXHAUSTED, "--memory-budget %.3f GiB: even with every block streamed the plan needs %.3f GiB",
                     req->memory_budget_bytes / (1u << 30), (double)out->peak_bytes / (1u << 30));
    double lo = 0, hi = 1;
    for (int it = 0; it < 40; it++) {
      double mid = 0.5 * (lo + hi);
      for (int i = 0; i < n; i++) set_resident(&bl[i], req, mid);
      evaluate(hw, req, bl, n, out);
      if ((double)out->peak_bytes <= req->memory_budget_bytes) lo = mid;
      else hi = mid;
    }
    for (int i = 0; i < n; i++) set_resident(&bl[i], req, lo);
  } else if (req->latency_target_ms > 0) {
    /* Keep resident just enough of block i+1 that its load hides behind block i's compute plus
     * an even share of the allowed slack; block 0's hides behind the last block's where the
     * runtime loads it across forwards (an even number of blocks), else it is all stall. */
    for (int i = 0; i < n; i++) set_resident(&bl[i], req, 0);
    evaluate(hw, req, bl, n, out);
    double slack = n > 0 ? (req->latency_target_ms - out->none_step_ms) / n : 0;
    if (slack < 0) slack = 0;
    for (int i = 0; i < n; i++) {
      double hide_ms = hides_behind_ms(req, bl, n, i) + slack;
      double can = hide_ms * 1e-3 * pref_rate(hw);
      set_resident(&bl[i], req, bl[i].bytes ? 1.0 - can / (double)bl[i].bytes : 1.0);
    }
    evaluate(hw, req, bl, n, out);
    /* Chunk rounding can leave the first block over: keep adding resident chunks until it fits. */
    for (int guard = 0; out->step_ms > req->latency_target_ms && guard < 100000; guard++) {
      int worst = -1;
      double gap = 0;
      for (int i = 0; i < n; i++) {
        double g = bl[i].t_pref_ms - hides_behind_ms(req, bl, n, i);
        if (bl[i].resident_chunks < bl[i].chunks && g > gap) gap = g, worst = i;
      }
      if (worst < 0) break;
      set_resident(&bl[worst], req, (double)(bl[worst].resident_chunks + 1) / bl[worst].chunks);
      evaluate(hw, req, bl, n, out);
    }
  } else {
    double r = req->residency >= 0 ? req->residency : 0;
    for (int i = 0; i < n; i++) set_resident(&bl[i], req, r);
  }
  evaluate(hw, req, bl, n, out);
  return DIT_OK;
}

uint32_t dit_offload_window_chunks(const dit_hw_profile_t *hw, double flops, uint32_t steps, uint64_t chunk_bytes) {
  if (!(flops > 0) || chunk_bytes == 0) return 0;
  const double n = 1e-3 * dit_offload_compute_ms(hw, flops, steps) * pref_rate(hw) / (double)chunk_bytes;
  return n >= 4294967295.0 ? UINT32_MAX : (uint32_t)n;
}
