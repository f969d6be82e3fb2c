/* passes/offload: the F* model, predictions, and residency chosen from a budget or a target;
 * block membership and windows from the graph; base/hw_profile: the profile file's format. */
#include <stdlib.h>
#include <string.h>

#include "base/hw_profile.h"
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

static dit_status_t profile(const char *text, dit_hw_profile_t *p, dit_hw_measured_t *m) {
  return dit_hw_profile_parse(text, strlen(text), "prof.json", p, m);
}

/* The one profile format: what calibrate writes, compile reads back; unknown fields and numbers
 * out of range are refused naming the file and field. */
static void test_profile_format(void) {
  dit_hw_profile_t p, q;
  dit_hw_measured_t m, mq;
  CHECK_OK(profile("{\"name\": \"a\", \"p_peak_tflops\": 3e-7, \"bw_h2d_gbs\": 1e-4, \"eta_comp\": 1, \"eta_pref\": 1}", &p, &m));
  CHECK(!strcmp(p.name, "a") && p.p_peak_tflops == 3e-7 && p.coll_gbs == 0 && m.forwards == 0);
  CHECK_OK(profile("{\"p_peak_tflops\": 1, \"bw_h2d_gbs\": 1, \"eta_comp\": 1, \"eta_pref\": 1}", &p, NULL));
  CHECK(!strcmp(p.name, "file"));
  CHECK_ERR(profile("{\"p_peak_tflops\": 1, \"bw_h2d_gbs\": 1, \"eta_comp\": 1, \"eta_pref\": 1, \"eta_prf\": 1}", &p, NULL),
            INVALID_ARGUMENT, "prof.json: field '(top level)': unknown member \"eta_prf\"");
  CHECK_ERR(profile("{\"p_peak_tflops\": 1, \"bw_h2d_gbs\": 1, \"eta_comp\": 1}", &p, NULL), NOT_FOUND, "prof.json: field 'eta_pref': missing");
  CHECK_ERR(profile("{\"p_peak_tflops\": 0, \"bw_h2d_gbs\": 1, \"eta_comp\": 1, \"eta_pref\": 1}", &p, NULL), OUT_OF_RANGE,
            "prof.json: field 'p_peak_tflops': expected a number in (0, 1000000], found 0");
  CHECK_ERR(profile("{\"p_peak_tflops\": 1, \"bw_h2d_gbs\": 1, \"eta_comp\": 1.5, \"eta_pref\": 1}", &p, NULL), OUT_OF_RANGE,
            "field 'eta_comp'");
  CHECK_ERR(profile("{\"p_peak_tflops\": 1, \"bw_h2d_gbs\": 1, \"eta_comp\": 1, \"eta_pref\": 1, \"overhead_mib\": -1}", &p, NULL),
            OUT_OF_RANGE, "field 'overhead_mib': expected a number in [0,");
  CHECK_ERR(profile("{\"p_peak_tflops\": 1, \"bw_h2d_gbs\": 1, \"eta_comp\": 1, \"eta_pref\": 1, \"coll_gbs\": \"fast\"}", &p, NULL),
            INVALID_ARGUMENT, "field 'coll_gbs'");
  CHECK_ERR(profile("{\"p_peak_tflops\": 1, \"bw_h2d_gbs\": 1, \"eta_comp\": 1, \"eta_pref\": 1, \"coll_latency_us\": 3}", &p, NULL),
            INVALID_ARGUMENT, "without a positive 'coll_gbs'");
  CHECK_ERR(profile("{\"p_peak_tflops\": 1, \"bw_h2d_gbs\": 1, \"eta_comp\": 1, \"eta_pref\": 1, \"measured\": {\"forwards\": 3, \"x\": 1}}",
                    &p, &m),
            INVALID_ARGUMENT, "prof.json: field 'measured': unknown member \"x\"");
  CHECK_ERR(profile("{\"name\": \"012345678901234567890123456789012\", \"p_peak_tflops\": 1, \"bw_h2d_gbs\": 1, \"eta_comp\": 1, \"eta_pref\": 1}",
                    &p, NULL),
            OUT_OF_RANGE, "field 'name'");
  /* Written, then read back: the same values, the optional ones only where written. */
  dit_hw_profile_t w = {"calibrated", 123.456, 21.5, 1, 1, 577.25, 3.5, 12, 80.5};
  dit_hw_measured_t wm = {"0123456789abcdef0123456789abcdef", 4.25, 0.5, 3, 16, 1e9, "fedcba9876543210fedcba9876543210", 1.5, 0.25};
  char *text = NULL;
  CHECK_OK(dit_hw_profile_to_json(&w, DIT_HW_WITH_OVERHEAD | DIT_HW_WITH_STEP_OVERHEAD | DIT_HW_WITH_COLLECTIVES, &wm, &text));
  CHECK_OK(profile(text, &q, &mq));
  CHECK(!memcmp(&w, &q, sizeof w));
  CHECK(mq.forwards == 3 && mq.h2d_bytes == 1e9 && !strcmp(mq.second, wm.second) && mq.second_collectives_ms == 0.25);
  free(text);
  CHECK_OK(dit_hw_profile_to_json(&w, DIT_HW_WITH_STEP_OVERHEAD, NULL, &text));
  CHECK(text && !strstr(text, "overhead_mib") && !strstr(text, "coll_gbs") && strstr(text, "step_overhead_us"));
  CHECK_OK(profile(text, &q, NULL));
  CHECK(q.overhead_mib == 0 && q.step_overhead_us == 3.5 && q.coll_gbs == 0);
  free(text);
  CHECK_OK(dit_hw_profile_load("h100-pcie", &q));
  CHECK(q.p_peak_tflops == 756);
  CHECK_ERR(dit_hw_profile_load("/nonexistent/p.json", &q), NOT_FOUND, "not a preset (h100-pcie, h100-sxm, h200-sxm)");
}

/* Block membership, work and windows come from the graph's op tags, not from weight names. */
static void test_graph_blocks(void) {
  dit_graph_t *g = NULL;
  CHECK_OK(dit_graph_create(&g));
  if (!g) return;
  const int64_t d[1] = {256};
  dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 1, d);
  dit_vid_t head = dit_graph_weight(g, "embed.w", DIT_F32, 1, d);
  dit_vid_t odd = dit_graph_weight(g, "blocks.7.not_block_1", DIT_F32, 1, d); /* the name says 7: ignored */
  dit_vid_t w0 = dit_graph_weight(g, "a", DIT_F32, 1, d), shared = dit_graph_weight(g, "s", DIT_F32, 1, d);
  dit_vid_t in2[2] = {x, head};
  dit_vid_t v = dit_graph_op(g, DIT_OP_ADD, in2, 2, NULL, DIT_F32, "h");
  dit_graph_set_block(g, 0);
  in2[0] = v, in2[1] = w0;
  v = dit_graph_op(g, DIT_OP_ADD, in2, 2, NULL, DIT_F32, "b0");
  in2[0] = v, in2[1] = shared;
  v = dit_graph_op(g, DIT_OP_ADD, in2, 2, NULL, DIT_F32, "b0s");
  dit_graph_set_block(g, 1);
  in2[0] = v, in2[1] = odd;
  v = dit_graph_op(g, DIT_OP_ADD, in2, 2, NULL, DIT_F32, "b1");
  dit_attrs_t ga = {0};
  dit_attrs_set_int(&ga, "group", 0);
  v = dit_graph_op(g, DIT_OP_ALLREDUCE, &v, 1, &ga, DIT_F32, "ar");
  in2[0] = v, in2[1] = shared;
  v = dit_graph_op(g, DIT_OP_ADD, in2, 2, NULL, DIT_F32, "b1s");
  dit_graph_set_block(g, -1);
  dit_graph_mark_output(g, v, "y");
  CHECK(dit_graph_status(g) == DIT_OK); /* borrowed */
  CHECK_EQ_INT(dit_offload_graph_blocks(g), 2);
  int32_t *vb = calloc((size_t)dit_graph_num_values(g), sizeof *vb);
  dit_offload_weight_blocks(g, vb);
  CHECK_EQ_INT(vb[head], -1);
  CHECK_EQ_INT(vb[w0], 0);
  CHECK_EQ_INT(vb[odd], 1);
  CHECK_EQ_INT(vb[shared], -1); /* read by two blocks: no single block holds it */
  CHECK_EQ_INT(vb[x], -1);
  free(vb);
  dit_offload_block_t b1 = {0}, all = {0};
  dit_offload_block_work(g, 1, &b1);
  dit_offload_block_work(g, DIT_OFFLOAD_ALL_BLOCKS, &all);
  CHECK_EQ_INT(b1.steps, 3);
  CHECK_NEAR(b1.coll_count, 1, 0);
  CHECK_NEAR(b1.coll_bytes, 1024, 0);
  CHECK_EQ_INT(all.steps, 6);
  dit_hw_profile_t hw = {"x", 1e-9, 1e-6, 1, 1, 0, 0, 0, 0}; /* 1 kFLOP/s, 1 kB/s: 256 flops hide 256 bytes, 4 chunks of 60 */
  dit_offload_windows_t win;
  CHECK_OK(dit_offload_block_windows(&hw, g, 1, 60, &win));
  CHECK_EQ_INT(win.n_yields, 1);
  CHECK_EQ_INT(win.yield_ops[0], 4); /* op 4 of the graph: step 4 of its plan */
  CHECK_EQ_INT(win.window_chunks[0], 4);
  CHECK_EQ_INT(win.window_chunks[1], 4);
  CHECK_OK(dit_offload_block_windows(&hw, g, 0, 60, &win));
  CHECK_EQ_INT(win.n_yields, 0);
  CHECK_EQ_INT(win.window_chunks[0], 8);
  dit_graph_destroy(g);
}

int main(void) {
  test_profile_format();
  test_graph_blocks();
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
