/* libditrun: load a validated bundle and run forward passes and denoising loops. */
#ifndef DIT_RUNTIME_DITRUN_H
#define DIT_RUNTIME_DITRUN_H

#include <stddef.h>
#include <stdint.h>

#include "artifacts/manifest.h"
#include "base/status.h"
#include "runtime/condition.h"
#include "runtime/ditango.h"
#include "runtime/offload_engine.h"
#include "runtime/sampler.h"
#include "runtime/step_cache.h"
#include "runtime/tensor.h"

typedef struct dit_runtime dit_runtime_t;

typedef struct dit_runtime_options {
  const char *backend; /* "cpu", "cuda", or NULL for the bundle's target */
  int threads;         /* CPU threads, <= 0: all online CPUs */
  int device;          /* GPU ordinal */
  int graph;           /* capture the forward once as a device graph (CUDA) and replay it:
                          0 auto (where a graph applies: one rank in a process of its own, a
                          backend with graphs, no offload engine, no attention-state reuse;
                          silently none elsewhere, nor after a capture that failed), 1 on
                          (refused, naming why, where it cannot be used), -1 off (every
                          forward step by step) */
  int devices;         /* ranks of a multi-rank bundle round-robin over GPUs device ..
                          device + devices - 1 (<= 1: all on device) */
  int stage_collectives; /* collectives through host copies even on host-memory backends (a
                            check of the path that device ranks of one process take) */
  const struct dit_launch_env *launch; /* the launcher's rank and world, or NULL: one process */
  int overlap_collectives; /* collectives on a queue of their own, overlapped with compute (NCCL
                              GPU ranks; the CPU backend's in-process and TCP collectives):
                              1 on, -1 off, 0 where collectives run through NCCL (no graph) */
  int offload_pace_host;   /* chunked prefetch paced by the host (the seed's variant), not by
                              copy-queue dependencies */
  const char *only_expert; /* a two-expert bundle: prepare only this expert ("transformer" or
                              "transformer_2"; NULL: both), for forwards of one expert */
  /* A loaded runtime of one rank on the same backend and device whose forwards never overlap
   * this one's: this one runs in its activation arena when that is large enough, and its
   * inputs take that runtime's input buffers of the same name, dtype and size (a decoder's
   * first chunk writing the caches the later chunks' decoder reads). It must outlive this one. */
  const struct dit_runtime *borrow;
} dit_runtime_options_t;

/* Opens the bundle with full integrity checks (manifest, identity, every blob's size and
 * hash), checks fitness for this process (target runnable here, world size, predicted memory),
 * parses and cross-checks the plan, and binds memory. A two-expert bundle (Wan2.2-A14B) is
 * verified once and both experts are prepared (plans, weights; only_expert: that one alone, as
 * expert 0 of the runtime); expert 0 is selected. Caller
 * owns *out. */
dit_status_t dit_runtime_load(const char *bundle_dir, const dit_runtime_options_t *opts,
                              dit_runtime_t **out);
void dit_runtime_destroy(dit_runtime_t *rt);

/* Experts: 1, or 2 for a two-expert bundle (0 "transformer", the high-noise one, and 1
 * "transformer_2"). The selected expert is the one the next forward runs; each expert has its
 * own inputs and outputs, so inputs are set after selecting. */
int dit_runtime_expert_count(const dit_runtime_t *rt);
int dit_runtime_expert_active(const dit_runtime_t *rt);
/* The index of expert `name` (NULL: "transformer"); NOT_FOUND naming the bundle's experts. */
dit_status_t dit_runtime_expert_find(const dit_runtime_t *rt, const char *name, int *out_index);
dit_status_t dit_runtime_expert_select(dit_runtime_t *rt, int index);
/* The expert swap of a bundle compiled with a memory budget: the active expert runs
 * `forwards_left` more forwards (this one included) before expert `next` is selected (0: no
 * switch ahead). Those forwards load the incoming expert's resident set between their blocks,
 * as its plan paces it, so selecting it then only releases the outgoing expert's weights. */
void dit_runtime_expert_upcoming(dit_runtime_t *rt, int next, int forwards_left);
typedef struct dit_runtime_swap_stats {
  int switched;              /* a switch loaded the incoming expert's weights */
  int forwards;              /* forwards that loaded part of them before the switch */
  uint64_t chunks_before;    /* chunks loaded by those forwards */
  uint64_t chunks_at_switch; /* chunks left for the switch itself to load (a stall) */
  uint64_t bytes;            /* the resident set moved */
  double switch_ms;          /* the switch's own time: drain, release, the rest, slots */
} dit_runtime_swap_stats_t;
/* Rank 0's figures of the latest switch (zeros before any). */
dit_runtime_swap_stats_t dit_runtime_swap_stats(const dit_runtime_t *rt);

const dit_manifest_t *dit_runtime_manifest(const dit_runtime_t *rt);

/* Copies (and converts, between float dtypes; integer timesteps become floats) a caller
 * tensor into the named input. Shapes must equal the manifest's: the error names the input
 * with the expected and found shapes. */
dit_status_t dit_runtime_set_input(dit_runtime_t *rt, const char *name, const dit_tensor_t *src);
/* With a cfg-parallel bundle (topology.cfg == 2) each lane of ranks has its own inputs:
 * lane 0 runs the conditional branch, lane 1 the unconditional one, in the same forward.
 * dit_runtime_set_input sets every lane; these set or read one. */
int dit_runtime_cfg_lanes(const dit_runtime_t *rt);
dit_status_t dit_runtime_set_input_lane(dit_runtime_t *rt, int lane, const char *name, const dit_tensor_t *src);
dit_status_t dit_runtime_output_lane(dit_runtime_t *rt, int lane, const char *name, dit_tensor_t *out_view);
/* One forward pass over the current inputs. */
dit_status_t dit_runtime_forward(dit_runtime_t *rt);
/* One forward with every step drained before the next (collectives too), its time added to
 * seconds[kind] (DIT_OP_COUNT entries, zeroed by the caller) as this process's first rank saw
 * it: the time split of a forward, multi-rank bundles included. step_seconds, when not NULL,
 * gets each step's time (one entry per step of the first rank's plan, dit_runtime_plan). */
dit_status_t dit_runtime_forward_profiled(dit_runtime_t *rt, double *seconds, double *step_seconds);
/* The same split with the steps run back to back as in a forward: each step's time is the
 * device time between events marked before and after it on the compute queue (the queue drained
 * every few hundred steps to read them), so a step takes what it takes among its neighbours.
 * Refused for a bundle that streams weights (the offload engine's stall timing holds those
 * events). */
dit_status_t dit_runtime_forward_profiled_in_flight(dit_runtime_t *rt, double *seconds, double *step_seconds);
/* How a multi-rank run's collectives travel: "NCCL", "in-process", "TCP between processes", ... */
const char *dit_runtime_collectives(const dit_runtime_t *rt);
/* A view of the named output in the runtime's memory, valid until the next forward. */
dit_status_t dit_runtime_output(dit_runtime_t *rt, const char *name, dit_tensor_t *out_view);
/* 1 when dit_runtime_output's views are host copies that a forward leaves alone (a backend with
 * device memory, or ranks in other processes): such a view stays valid until the next
 * dit_runtime_output call. 0 when they are the runtime's own memory (the CPU backend's), which
 * the next forward overwrites. */
int dit_runtime_output_is_copy(const dit_runtime_t *rt);

/* A caller's device memory and queue (a CUstream of the runtime's context, for CUDA), for an
 * embedding caller that keeps its tensors on the device: one rank in this process, a backend
 * with device memory (else INVALID_ARGUMENT or UNIMPLEMENTED, naming the tensor). Shapes and
 * dtypes must equal the bundle's: device memory is copied as is, on `queue`. An input is read
 * when the copy runs, so its memory stays valid until then; the mask-prefix check of host inputs
 * is not made (it would read device memory back). The forward's kernels read fixed buffers (a
 * captured graph records their addresses), so a caller's tensor is copied, never bound in place. */
dit_status_t dit_runtime_set_input_device(dit_runtime_t *rt, const char *name, const dit_tensor_t *src, void *queue);
/* The checks of dit_runtime_set_input_device alone, without a copy. */
dit_status_t dit_runtime_check_input_device(dit_runtime_t *rt, const char *name, const dit_tensor_t *src);
/* After a forward: the named output copied into dst (device memory) on `queue`. */
dit_status_t dit_runtime_output_device(dit_runtime_t *rt, const char *name, const dit_tensor_t *dst, void *queue);
/* The named output of the latest forward in the runtime's own memory, valid until the next
 * forward (one rank in this process); *device_memory 1 when that is device memory. */
dit_status_t dit_runtime_output_buffer(dit_runtime_t *rt, const char *name, dit_tensor_t *out_view, int *device_memory);
/* Zeros input `name` in the runtime's memory (in order with its forwards). */
dit_status_t dit_runtime_zero_input(dit_runtime_t *rt, const char *name);
/* The input that output `name` replaces in place (they share one buffer: after a forward the
 * input holds the output), or NULL. */
const char *dit_runtime_output_updates(const dit_runtime_t *rt, const char *name);
/* The backend the runtime runs on: "cpu" or "cuda". */
const char *dit_runtime_backend(const dit_runtime_t *rt);
/* Orders the runtime's compute queue after the work enqueued on `queue` so far (queue_waits 0),
 * or `queue` after the compute queue's (1). NULL: the device's default queue; nothing to order
 * on host-memory backends. */
dit_status_t dit_runtime_join_queue(dit_runtime_t *rt, void *queue, int queue_waits);

/* Step-level access, for cross-backend parity checks: the plan, one step at a time (then
 * synchronized), and any value's bytes copied out or in (weights cannot be written). */
struct dit_plan;
const struct dit_plan *dit_runtime_plan(const dit_runtime_t *rt);
/* Host-to-device bandwidth (GB/s, best of `repeats`) of rank 0's weight blob streamed in
 * chunks on the backend's copy queue, as the offload engine streams it. */
dit_status_t dit_runtime_measure_h2d(dit_runtime_t *rt, uint64_t chunk_bytes, int repeats, double *gbs);
/* Device memory in use beyond what the bundle plans for itself (the driver's context, library
 * workspaces, and anything else on the device): rank 0's device, after a forward.
 * UNIMPLEMENTED on backends that do not report device memory. */
dit_status_t dit_runtime_memory_beyond_plan(dit_runtime_t *rt, uint64_t *bytes);
/* The memory the runtime allocated itself (arena, io, weights or their resident part and staging
 * slots, collective buffers, library workspaces) on the rank that allocated the most, and what
 * the bundle predicted for that rank by the same rule (dit_plan_memory plus its weights; an
 * offload plan's predicted peak less the profile's overhead). Allocations made inside device
 * libraries (NCCL's buffers, the driver's context) are not in either: the calibrated profile's
 * overhead covers them. *out_rank: that rank. UNIMPLEMENTED on a backend that does not count. */
dit_status_t dit_runtime_memory(const dit_runtime_t *rt, uint64_t *allocated, uint64_t *predicted, int *out_rank);
/* Rank 0's offload breakdown of the latest forward (see dit_offload_engine_breakdown). */
dit_status_t dit_runtime_offload_breakdown(dit_runtime_t *rt, double *stall_ms, double *host_ms);
/* 1 and *out filled when the bundle streams its weights (rank 0's engine); 0 otherwise. */
int dit_runtime_offload_stats(const dit_runtime_t *rt, dit_offload_stats_t *out);
dit_status_t dit_runtime_step(dit_runtime_t *rt, size_t i);
/* OK when the runtime takes step-level access: one rank, or a bundle with cfg lanes of one rank each
 * in this process whose plan has no collectives (steps then run on both lanes, the probe reads lane
 * 0, residual slot s is lane s); else why not. */
dit_status_t dit_runtime_stepwise(const dit_runtime_t *rt);
/* Steps [from, to) in order on every rank (cfg lanes: each in its thread), synchronized once at the
 * end (the step cache's segments of a forward). */
dit_status_t dit_runtime_steps(dit_runtime_t *rt, size_t from, size_t to);
dit_status_t dit_runtime_read_value(dit_runtime_t *rt, size_t v, void *host);
dit_status_t dit_runtime_write_value(dit_runtime_t *rt, size_t v, const void *host);

/* The step cache's probe, on rank 0 of a single-rank run or cfg lane 0 (dit_runtime_stepwise), with the backend's fused kernel: over
 * value v (f32, bf16 or f16) with r = v, or v - base (base: a value of the same dtype and size,
 * live now; DIT_PROBE_HELD: the copy dit_runtime_probe_hold made; SIZE_MAX: none), rounded to v's
 * dtype, *change = sum|r - prev| / sum|prev| (0 / 0 is 0) where prev is the r kept by an earlier
 * call with update_prev, in backend memory; then prev = r when update_prev. Only the two sums cross
 * to the host. *change is NaN when there is no previous signal: the first call, after
 * dit_runtime_probe_reset, after a change of expert, dtype or size. */
#define DIT_PROBE_HELD (SIZE_MAX - 1)
dit_status_t dit_runtime_probe_change(dit_runtime_t *rt, size_t v, size_t base, int update_prev, double *change);
/* Copies value v now into a buffer the runtime keeps (a base that later steps may overwrite in the
 * arena: the hidden state entering a block, read after it). */
dit_status_t dit_runtime_probe_hold(dit_runtime_t *rt, size_t v);
/* Forgets the previous signal (and the residuals below). */
void dit_runtime_probe_reset(dit_runtime_t *rt);
/* The step cache's block-stack residual, reused at the hidden level as TeaCache and first-block
 * cache do, on rank 0 of a single-rank run, slot 0 or 1 (a guided step's two branches), or on cfg
 * lane `slot` of a bundle with cfg lanes (dit_runtime_stepwise). START
 * copies value v (the hidden state the reuse starts from) now; KEEP, later in a full forward,
 * keeps R = v - that copy (v: the hidden state the output head takes); APPLY, in a skipped one,
 * writes v = the copy START made + the kept R, in v's dtype, so the head's steps can run on it. */
typedef enum dit_residual_op { DIT_RESIDUAL_START, DIT_RESIDUAL_KEEP, DIT_RESIDUAL_APPLY } dit_residual_op_t;
dit_status_t dit_runtime_residual(dit_runtime_t *rt, dit_residual_op_t op, int slot, size_t v);

/* Attention-state reuse on a bundle compiled with --reuse ditango (runtime/ditango.h): every
 * self-attention layer has `groups` remote groups, slot layer * groups + g each (0, 0: no reuse).
 * Without dit_runtime_reuse_begin every forward computes every group. */
void dit_runtime_reuse_shape(const dit_runtime_t *rt, int *layers, int *groups);
/* One denoising step's decisions, before its forwards: compute[slot] 1 computes the slot (and
 * stores it in the cache), 0 reuses the cached state (none of its transfers or compute run);
 * anchor[layer] 1 gathers the layer's anchor statistics. diagnostic: reused slots are computed too,
 * but not stored, and their relative error against the cached state measured. The step's forwards
 * take the cache copies in turn (the conditional branch the first, the unconditional the second).
 * Backends with sum_sq_diff (cpu, cuda), one-transformer bundles, refused otherwise and under
 * graph = 1; a graph the runtime chose itself (graph = 0) is dropped, the forwards from then on
 * step by step. The first call allocates the anchor copies (dit_runtime_reuse_bytes). */
dit_status_t dit_runtime_reuse_begin(dit_runtime_t *rt, const uint8_t *compute, const uint8_t *anchor, int diagnostic);
/* What the step's forwards measured, summed over every rank and forward (caller's arrays): drift
 * [layers] = ||OUT_loc - its anchor copy|| (at an anchor: from the previous anchor's copy), local_norm [layers] = ||OUT_loc|| (at
 * anchors), per slot group_norm = ||OUT_G|| and group_weight = the mean of e^LSE_G / sum e^LSE over
 * the rows (at anchors), error = ||OUT_fresh - OUT_cached|| / ||OUT_fresh|| (diagnostic, reused
 * slots; NaN otherwise). */
typedef struct dit_reuse_stats {
  double *drift, *local_norm;
  double *group_norm, *group_weight, *error;
} dit_reuse_stats_t;
dit_status_t dit_runtime_reuse_end(dit_runtime_t *rt, dit_reuse_stats_t *out);
/* The most backend memory one rank holds for reuse beyond its plan: the fp32 anchor copies of the
 * local states (layers x cache copies x the local OUT's elements x 4 bytes), allocated by the first
 * dit_runtime_reuse_begin; 0 before. The manifest's predicted peak does not hold them (the compiler
 * plans the arena, the runtime these); dit_runtime_memory's prediction adds them. */
uint64_t dit_runtime_reuse_bytes(const dit_runtime_t *rt);

typedef struct dit_named_tensor {
  const char *name;
  dit_tensor_t t;
} dit_named_tensor_t;

typedef struct dit_generate_options {
  dit_sampler_kind_t sampler;
  int steps;
  double guidance; /* classifier-free guidance applies when > 1 and negatives are given */
  double shift;
  /* Called after each step (may be NULL). */
  void (*on_step)(void *ctx, int step, int steps, double timestep, double seconds);
  void *ctx;
  /* A two-expert runtime (dit_runtime_expert_count 2) runs transformer_2 for the steps whose
   * timestep is below the manifest's boundary_timestep, with guidance_2. */
  double guidance_2;
  /* Per step, which expert ran (0 transformer, 1 transformer_2); may be NULL, else
   * `steps` entries. */
  int *expert_used;
  /* Image-to-video: the image latents and embeddings the bundle's inputs need (absent tensors
   * have data NULL); checked against the bundle before the first step. */
  dit_condition_inputs_t condition;
  /* Bundles with a generate section (FLUX.1, ...): the pipeline's call arguments by the
   * section's names (prompt_embeds, pooled_prompt_embeds, ...), and with true_cfg > 1 their
   * negative_ forms, which then must all be present. guidance feeds the section's guidance
   * input when there is one; prompt/negative of dit_runtime_generate are unused. */
  const dit_named_tensor_t *args;
  size_t n_args;
  double true_cfg;
  /* Step caching (runtime/step_cache.h; zero: off): the decision is taken once per step on the
   * guided prediction, so a skipped step runs no forward on any lane. A two-expert runtime
   * resets the cache at the expert switch. */
  dit_step_cache_options_t step_cache;
  /* teacache's rescaling polynomial (highest degree first, 1..8 coefficients; a cache profile's
   * fit); NULL: the family's published one. */
  const double *step_cache_rescale;
  int step_cache_rescale_k;
  /* Per step, 0 when the transformer ran, else the forwards the step skipped (1, or 2 for a
   * guided step on a bundle without cfg lanes); set before on_step. May be NULL, else `steps`
   * entries. */
  int *skipped_forwards;
  /* Called with each step's prediction P_i (fp32, n elements in the latents' shape, after
   * guidance) before the sampler takes it; computed 1 when the transformer produced it, 0 when
   * the step cache extrapolated it. May be NULL. */
  void (*on_prediction)(void *ctx, int step, const float *prediction, size_t n, int computed);
  /* teacache, fbcache: called with each step's probe change (dit_runtime_probe_change's; NaN
   * without a previous signal) as the controller gets it. May be NULL. */
  void (*on_probe)(void *ctx, int step, double change);
  /* teacache, fbcache: set to 1 when skipped steps reused the block stack's residual (ran block 0
   * and the output head on it), 0 when they reused at the output (x_i + P_b - x_b: step_cache.h).
   * May be NULL. */
  int *hidden_reuse;
  /* Called after each step but the last, after on_step (may be NULL): a nonzero dit_code_t
   * (DIT_CODE_ABORTED for a cancel, DIT_CODE_DEADLINE_EXCEEDED for a deadline) stops the loop
   * there with that code, so a resident server ends a job at a step boundary. */
  int (*should_stop)(void *ctx);
  /* Attention-state reuse (runtime/ditango.h) on a bundle compiled with --reuse ditango: on when
   * reuse_on, with the planner's options; the planner's report is written to reuse_report (NULL:
   * none); reuse_counts (NULL, or 2 entries) gets the remote-group states computed and decided
   * after warm-up. Wan bundles without a step cache. */
  int reuse_on;
  dit_ditango_options_t reuse;
  const char *reuse_report;
  int64_t *reuse_counts;
} dit_generate_options_t;

/* Whether step timestep t runs on transformer_2: WanPipeline compares the scheduler's
 * timestep with boundary_ratio * num_train_timesteps as torch promotes a tensor against a
 * Python float, in float32. */
int dit_generate_uses_expert_2(double t, double boundary_timestep);

/* The latents generate steps: a generate section's latents input, else
 * dit_condition_latents_shape's. */
dit_status_t dit_generate_latents_shape(const dit_manifest_t *m, int *rank, int64_t dims[DIT_MAX_RANK]);

/* The sampler generate steps with for n latent elements: the flow-match schedule of a generate
 * section, else o->sampler with o->shift. Caller owns *out. */
dit_status_t dit_generate_sampler(const dit_runtime_t *rt, const dit_generate_options_t *o, size_t n, dit_sampler_t **out);

/* The denoising loop as diffusers' WanPipeline and WanImageToVideoPipeline run it. latents:
 * fp32 in dit_condition_latents_shape's shape ([B, C, f, h, w], C the sample's channels), the
 * initial noise in, the final latents out. prompt and negative (may be NULL) are encoder
 * states [B, L, text_dim] of any float dtype. */
dit_status_t dit_runtime_generate(dit_runtime_t *rt, const dit_generate_options_t *opts,
                                  const dit_tensor_t *prompt, const dit_tensor_t *negative,
                                  float *latents);

#endif
