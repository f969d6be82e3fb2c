/* passes/offload: the F* model, predictions, and residency chosen from a budget or a target. */
#include <string.h>

#include "check.h"
#include "passes/offload.h"

#define NB 6

/* Tensors of 10 MB each: a resident prefix ends on a multiple of 10 MB. */
static uint64_t tensors_of_10mb(void *ctx, uint64_t offset, uint64_t bytes, uint64_t want) {
  (void)ctx, (void)offset, (void)bytes;
  return want / 10000000 * 10000000;
}

static void blocks(dit_offload_block_t *b, double flops, uint64_t bytes) {
  memset(b, 0, sizeof(*b) * NB);
  for (int i = 0; i < NB; i++) b[i].flops = flops, b[i].bytes = bytes;
}

int main(void) {
  const dit_hw_profile_t *h200 = dit_hw_profile_preset("h200-sxm");
  CHECK(h200 != NULL);
  CHECK(dit_hw_profile_preset("tpu") == NULL);
  dit_hw_profile_t hw = *h200;
  dit_hw_profile_normalize(&hw);
  CHECK_NEAR(hw.bw_h2d_gbs, 55.3, 1e-12);
  dit_hw_profile_t odd = {"x", 988.77, 55.34, 0.6049, 0.9, 577.6, 3.914, 0, 0};
  dit_hw_profile_normalize(&odd);
  CHECK_NEAR(odd.p_peak_tflops, 989, 1e-9);
  CHECK_NEAR(odd.bw_h2d_gbs, 55.3, 1e-9);
  CHECK_NEAR(odd.eta_comp, 0.605, 1e-12);
  CHECK_NEAR(odd.overhead_mib, 578, 1e-9);
  CHECK_NEAR(odd.step_overhead_us, 3.91, 1e-12);

  /* A Wan2.1-1.3B block: 92.9 MB of weights; F* = 0.6 * 989e12 * 92.9e6 / (0.9 * 55.3e9). */
  const uint64_t B = 92900000;
  const double fstar = 0.6 * 989e12 * (double)B / (0.9 * 55.3e9);
  dit_offload_block_t b[NB];
  dit_offload_result_t r, r_none;
  dit_offload_request_t req = {DIT_OFFLOAD_NONE, 16u << 20, -1, 0, 0, 1000, NULL, NULL};
  blocks(b, 9.43e12, B);
  CHECK_OK(dit_offload_plan(&hw, &req, b, NB, &r_none));
  CHECK_NEAR(b[0].f_star, fstar, fstar * 1e-12);
  CHECK_NEAR(r_none.step_ms, NB * 1e3 * 9.43e12 / (0.6 * 989e12), 1e-9);
  CHECK_EQ_INT(r_none.peak_bytes, NB * B + 1000);

  /* Far above F*: streaming everything costs nothing in the steady state of repeated forwards
   * with an even number of blocks (block 0 loads behind the last block), and only block 0's
   * load with an odd number. */
  req.mode = DIT_OFFLOAD_CHUNKED;
  req.residency = 0;
  CHECK_OK(dit_offload_plan(&hw, &req, b, NB, &r));
  CHECK_NEAR(r.step_ms, r_none.step_ms + (NB % 2 ? b[0].t_pref_ms : 0), 1e-9);
  dit_offload_result_t r_odd, r_odd_none;
  req.mode = DIT_OFFLOAD_NONE;
  CHECK_OK(dit_offload_plan(&hw, &req, b, NB - 1, &r_odd_none));
  req.mode = DIT_OFFLOAD_CHUNKED;
  CHECK_OK(dit_offload_plan(&hw, &req, b, NB - 1, &r_odd));
  CHECK_NEAR(r_odd.step_ms, r_odd_none.step_ms + b[0].t_pref_ms, 1e-9);
  CHECK_OK(dit_offload_plan(&hw, &req, b, NB, &r));
  CHECK_EQ_INT(r.peak_bytes, 2 * B + 1000);
  CHECK(r.step_ms <= 1.03 * r.none_step_ms);

  /* Below F* (a short clip): resident fraction trades memory for time monotonically. */
  blocks(b, 0.2e12, B);
  double last_ms = 1e30;
  uint64_t last_peak = 0;
  const double fracs[] = {0, 0.2, 0.4, 0.6, 1.0};
  for (int k = 0; k < 5; k++) {
    req.residency = fracs[k];
    CHECK_OK(dit_offload_plan(&hw, &req, b, NB, &r));
    CHECK(r.step_ms <= last_ms + 1e-12);
    CHECK(r.peak_bytes >= last_peak);
    CHECK(b[0].resident >= fracs[k] - 1e-12);
    last_ms = r.step_ms;
    last_peak = r.peak_bytes;
  }
  CHECK_NEAR(last_ms, r.none_step_ms, 1e-9);

  /* A budget: the largest uniform fraction that fits. */
  req.residency = -1;
  req.memory_budget_bytes = 4.0 * B + 1000;
  CHECK_OK(dit_offload_plan(&hw, &req, b, NB, &r));
  CHECK(r.peak_bytes <= req.memory_budget_bytes);
  CHECK(b[0].resident > 0 && b[0].resident < 1);
  req.memory_budget_bytes = 1.0 * B;
  CHECK_ERR(dit_offload_plan(&hw, &req, b, NB, &r), RESOURCE_EXHAUSTED, "even with every block streamed");

  /* A latency target: met, with as little resident as that allows. */
  req.memory_budget_bytes = 0;
  req.latency_target_ms = 1.10 * r_none.step_ms * 0.2 / 9.43;
  CHECK_OK(dit_offload_plan(&hw, &req, b, NB, &r));
  CHECK(r.step_ms <= req.latency_target_ms + 1e-9);
  CHECK(r.peak_bytes < r.none_peak_bytes);

  /* Layerwise moves whole blocks. */
  req.mode = DIT_OFFLOAD_LAYERWISE;
  req.latency_target_ms = 0;
  req.residency = 0.5;
  CHECK_OK(dit_offload_plan(&hw, &req, b, NB, &r));
  CHECK_EQ_INT(b[0].chunks, 1);
  CHECK(b[0].resident == 0 || b[0].resident == 1);

  req.memory_budget_bytes = 10.0 * B;
  CHECK_ERR(dit_offload_plan(&hw, &req, b, NB, &r), INVALID_ARGUMENT, "at most one of");
  dit_hw_profile_t bad = hw;
  bad.bw_h2d_gbs = 0;
  req.memory_budget_bytes = 0;
  CHECK_ERR(dit_offload_plan(&bad, &req, b, NB, &r), INVALID_ARGUMENT, "must be positive");

  /* Residency is cut back to whole tensors as the runtime cuts it: 3 of 6 chunks of 16 MiB
   * (50.3 MB) keep 50 MB of 10 MB tensors resident; T_pref and the peak count that. */
  dit_offload_request_t cut = {DIT_OFFLOAD_CHUNKED, 16u << 20, 0.5, 0, 0, 0, tensors_of_10mb, NULL};
  blocks(b, 1e12, B);
  CHECK_OK(dit_offload_plan(&hw, &cut, b, NB, &r));
  CHECK_EQ_INT(b[0].chunks, 6);
  CHECK_EQ_INT(b[0].resident_chunks, 3);
  CHECK_EQ_INT(b[0].resident_bytes, 50000000);
  CHECK_NEAR(b[0].resident, 50000000.0 / B, 1e-12);
  CHECK_NEAR(b[0].t_pref_ms, 1e3 * (B - 50000000.0) / (0.9 * 55.3e9), 1e-9);
  CHECK_EQ_INT(r.peak_bytes, NB * 50000000ull + 2 * (B - 50000000ull));

  /* A window between two collectives holds the whole chunks whose load takes no longer than
   * its compute: 16 MiB at 0.9 * 55.3 GB/s is 0.337 ms, 0.6 * 989 TFLOP/s runs 200 GFLOP in 0.337 ms. */
  const double per_chunk = 0.6 * 989e12 * (16u << 20) / (0.9 * 55.3e9);
  CHECK_EQ_INT(dit_offload_window_chunks(&hw, 0, 0, 16u << 20), 0);
  CHECK_EQ_INT(dit_offload_window_chunks(&hw, 0.999 * per_chunk, 0, 16u << 20), 0);
  CHECK_EQ_INT(dit_offload_window_chunks(&hw, 1.001 * per_chunk, 0, 16u << 20), 1);
  CHECK_EQ_INT(dit_offload_window_chunks(&hw, 7.5 * per_chunk, 0, 16u << 20), 7);
  CHECK_EQ_INT(dit_offload_window_chunks(&hw, 7.6 * per_chunk, 0, 4u << 20), 30);
  /* With a per-step overhead the window is longer by its steps' share: 2 chunks' FLOPs plus
   * 337 us of overhead hold 3. */
  dit_hw_profile_t slow = hw;
  slow.step_overhead_us = 1e3 * per_chunk / (0.6 * 989e12) * 1e3 / 100; /* 100 steps = one chunk */
  CHECK_EQ_INT(dit_offload_window_chunks(&slow, 2.01 * per_chunk, 100, 16u << 20), 3);
  CHECK_NEAR(dit_offload_compute_ms(&slow, 0, 100), 1e3 * per_chunk / (0.6 * 989e12), 1e-9);

  /* Collectives: 30 ms of them per block (10 of 1 ms latency, 2 GB at 100 GB/s) add to every
   * block; chunked loads only beside compute, so 40 ms of compute hide a 30 ms load there,
   * while layerwise loads beside the collectives too (contention not modeled). */
  dit_hw_profile_t coll = hw;
  coll.coll_latency_us = 1000, coll.coll_gbs = 100;
  blocks(b, 0.04 * 0.6 * 989e12, 0.03 * 0.9 * 55.3e9);
  for (int i = 0; i < NB; i++) b[i].coll_count = 10, b[i].coll_bytes = 2e9;
  dit_offload_request_t cr = {DIT_OFFLOAD_CHUNKED, 1u << 20, 0, 0, 0, 0, NULL, NULL};
  CHECK_OK(dit_offload_plan(&coll, &cr, b, NB, &r));
  CHECK_NEAR(b[0].t_coll_ms, 30, 1e-9);
  CHECK_NEAR(r.none_step_ms, NB * 70.0, 1e-6);
  CHECK_NEAR(r.step_ms, NB * 70.0, 1e-6);
  blocks(b, 0.01 * 0.6 * 989e12, 0.03 * 0.9 * 55.3e9); /* 10 ms of compute: chunked stalls 20 ms, layerwise 0 */
  for (int i = 0; i < NB; i++) b[i].coll_count = 10, b[i].coll_bytes = 2e9;
  CHECK_OK(dit_offload_plan(&coll, &cr, b, NB, &r));
  CHECK_NEAR(r.step_ms, NB * 60.0, 1e-6);
  cr.mode = DIT_OFFLOAD_LAYERWISE;
  CHECK_OK(dit_offload_plan(&coll, &cr, b, NB, &r));
  CHECK_NEAR(r.step_ms, NB * 40.0, 1e-6);
  return check_summary("test_offload");
}
