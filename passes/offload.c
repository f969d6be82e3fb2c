/* The F* model, the residency planner and the graph work behind them. */
#include "passes/offload.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
  /* Two staging slots; an allocation of no bytes takes one, as the runtime makes it. */
  out->peak_bytes = req->mode == DIT_OFFLOAD_NONE ? out->none_peak_bytes : resident + 2 * (slot ? slot : 1) + req->other_bytes;
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

/* ---- the graph's blocks ---- */

int dit_offload_graph_blocks(const dit_graph_t *g) {
  int32_t n = 0;
  for (int32_t k = 0; k < dit_graph_num_ops(g); k++) {
    const int32_t b = dit_graph_cop_at(g, k)->block;
    if (b >= n) n = b + 1;
  }
  return (int)n;
}

void dit_offload_weight_blocks(const dit_graph_t *g, int32_t *out) {
  const int32_t nv = dit_graph_num_values(g);
  enum { UNSEEN = -3, SHARED = -1 };
  for (int32_t v = 0; v < nv; v++) out[v] = UNSEEN;
  for (int32_t k = 0; k < dit_graph_num_ops(g); k++) {
    const dit_op_t *op = dit_graph_cop_at(g, k);
    for (int j = 0; j < op->n_in; j++) {
      const dit_vid_t v = op->in[j];
      if (dit_graph_cvalue(g, v)->kind != DIT_VALUE_WEIGHT) continue;
      const int32_t b = op->block >= 0 ? op->block : SHARED;
      out[v] = out[v] == UNSEEN || out[v] == b ? b : SHARED;
    }
  }
  for (int32_t v = 0; v < nv; v++)
    if (out[v] == UNSEEN) out[v] = -1;
}

void dit_offload_block_work(const dit_graph_t *g, int block, dit_offload_block_t *b) {
  for (int32_t k = 0; k < dit_graph_num_ops(g); k++) {
    const dit_op_t *op = dit_graph_cop_at(g, k);
    if (block != DIT_OFFLOAD_ALL_BLOCKS && op->block != block) continue;
    b->steps++;
    if (!dit_op_is_collective(op->kind)) continue;
    b->coll_count += 1;
    b->coll_bytes += (double)dit_value_nbytes(dit_graph_cvalue(g, op->in[0]));
  }
}

dit_status_t dit_offload_block_windows(const dit_hw_profile_t *hw, const dit_graph_t *g, int block, uint64_t chunk,
                                       dit_offload_windows_t *out) {
  memset(out, 0, sizeof *out);
  uint32_t steps[DIT_OFFLOAD_MAX_WINDOWS] = {0};
  double flops = 0;
  int n = 0;
  for (int32_t k = 0; k < dit_graph_num_ops(g); k++) {
    const dit_op_t *op = dit_graph_cop_at(g, k);
    if (op->block != block) continue;
    if (!dit_op_is_collective(op->kind)) {
      flops += dit_op_cost(g, op).flops;
      steps[n]++;
      continue;
    }
    if (n + 1 >= DIT_OFFLOAD_MAX_WINDOWS)
      return DIT_ERR(UNIMPLEMENTED, "offload plan: block %d has more than %d collectives", block, DIT_OFFLOAD_MAX_WINDOWS - 1);
    out->yield_ops[n] = k;
    out->window_chunks[n] = dit_offload_window_chunks(hw, flops, steps[n], chunk);
    flops = 0, n++;
  }
  out->window_chunks[n] = dit_offload_window_chunks(hw, flops, steps[n], chunk);
  out->n_yields = n;
  return DIT_OK;
}

dit_status_t dit_offload_plan_graph(const dit_hw_profile_t *hw, const dit_offload_request_t *req, const dit_graph_t *g,
                                    dit_offload_block_t *bl, int n, dit_offload_result_t *out) {
  dit_cost_t *pb = calloc((size_t)n + 1, sizeof *pb);
  if (!pb) return DIT_ERR(RESOURCE_EXHAUSTED, "offload plan: out of memory");
  dit_graph_cost(g, pb, n);
  for (int i = 0; i < n; i++) {
    bl[i].flops = pb[i].flops;
    dit_offload_block_work(g, i, &bl[i]);
  }
  free(pb);
  return dit_offload_plan(hw, req, bl, n, out);
}
