/* The weight-offload engine (DESIGN.md §6): carries out the chunk schedule that ditc wrote into
 * the rank's plan (its typed offload section, validated by artifacts/plan.c). The weights outside the blocks, and each block's resident
 * chunks, live in backend memory; every block runs from one of two staging slots, contiguous
 * like the blob's own range for the block, filled on the backend's copy queue while the
 * previous block computes: resident chunks by a device copy, the rest from host memory in
 * chunks. The compute queue waits for a block's slot to be full; the copy queue waits for the
 * block that last used the slot to finish, and, in chunked mode, paces the chunks of the next
 * block behind the current block's collectives (yield points). All of it is queue
 * dependencies (events), so a device graph can record it. */
#ifndef DIT_RUNTIME_OFFLOAD_ENGINE_H
#define DIT_RUNTIME_OFFLOAD_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "artifacts/manifest.h"
#include "artifacts/plan.h"
#include "base/status.h"
#include "runtime/backend.h"
#include "runtime/tensor.h"

typedef struct dit_offload_engine dit_offload_engine_t;

typedef struct dit_offload_stats {
  const char *mode;          /* "layerwise" or "chunked" */
  int blocks;
  uint64_t chunk_bytes;
  uint64_t resident_bytes;   /* backend memory held for weights outside the slots */
  uint64_t slot_bytes;       /* both staging slots */
  uint64_t streamed_bytes;   /* host-to-device bytes per forward */
  uint64_t total_weight_bytes;
  uint64_t predicted_peak_bytes; /* the compiler's, from the manifest */
} dit_offload_stats_t;

/* 1 when the rank's plan carries an offload section. */
int dit_offload_planned(const dit_plan_t *p);
/* The compiler's predicted device peak with the plan (offload.predicted_peak_bytes); the
 * manifest's memory.peak_bytes without one. */
uint64_t dit_offload_predicted_peak(const dit_plan_t *p, const dit_manifest_t *m);
/* Of that peak, the runtime's own device memory the calibrated profile counted (the driver's
 * context and the like: already held when the peak is checked against free memory); 0 if none. */
uint64_t dit_offload_overhead(const dit_plan_t *p);

/* Takes the schedule from the plan's offload section (already checked against the plan and
 * this rank's weight layout by dit_plan_check_bindings), allocates the resident parts and the
 * slots through the backend, uploads the resident parts from host_weights (the rank's mapped
 * weight blob), and points every weight value in `bound` at its place: resident memory, or the
 * slot its block runs from. */
dit_status_t dit_offload_engine_create(const dit_manifest_t *m, const dit_plan_t *plan, const dit_manifest_weights_t *layout,
                                       const dit_backend_vtable_t *be, void *be_state, const void *host_weights,
                                       size_t host_size, dit_tensor_t *bound, dit_offload_engine_t **out);
void dit_offload_engine_destroy(dit_offload_engine_t *e);

/* The expert swap of a two-expert pipeline under a memory budget (the plan's offload.swap).
 * create_parked with parked = 1 takes the schedule but allocates no device memory: the weights
 * stay in host memory and `bound` is left alone until the engine is loaded. park gives every
 * device allocation back (the caller drained the queues that used it). unpark_begin allocates
 * the resident set (head, tail, the blocks' resident parts); unpark_copy enqueues up to
 * max_chunks more chunks of it on `via`'s copy queue (another backend state of the same
 * device, the expert computing meanwhile; NULL: its own) and says how many are left;
 * unpark_finish enqueues the rest on its own queue, allocates the slots, waits for every copy
 * and binds the weights. released: the bytes given back so far (backends count what they
 * allocate, never what they release). */
dit_status_t dit_offload_engine_create_parked(const dit_manifest_t *m, const dit_plan_t *plan, const dit_manifest_weights_t *layout,
                                              const dit_backend_vtable_t *be, void *be_state, const void *host_weights,
                                              size_t host_size, dit_tensor_t *bound, int parked, dit_offload_engine_t **out);
int dit_offload_engine_parked(const dit_offload_engine_t *e);
dit_status_t dit_offload_engine_park(dit_offload_engine_t *e);
dit_status_t dit_offload_engine_unpark_begin(dit_offload_engine_t *e, uint64_t chunk_bytes);
dit_status_t dit_offload_engine_unpark_copy(dit_offload_engine_t *e, uint32_t max_chunks, const dit_backend_vtable_t *via, void *via_state,
                                            uint32_t *out_left);
dit_status_t dit_offload_engine_unpark_finish(dit_offload_engine_t *e);
uint64_t dit_offload_engine_released(const dit_offload_engine_t *e);

/* Around every plan step, in order: queue dependencies and copies of the schedule. After a
 * collective step that runs on a queue of its own, done_event is the event marked there when
 * it completes (the yield point waits for it); otherwise -1 (it ran on the compute queue). */
dit_status_t dit_offload_before_step(dit_offload_engine_t *e, size_t step);
dit_status_t dit_offload_after_step(dit_offload_engine_t *e, size_t step, int done_event);

dit_offload_stats_t dit_offload_engine_stats(const dit_offload_engine_t *e);

/* The seed's host-paced variant of chunked prefetch, to compare with the default: a yield
 * point pauses the issuing of the next chunks on the host until it sees the collective done
 * (queried at every step), instead of a dependency on the copy queue. Needs backend query. */
dit_status_t dit_offload_engine_pace_host(dit_offload_engine_t *e);
/* Whether a forward ends by loading the next forward's first block (on by default; off for a
 * forward captured as a graph, which must leave nothing in flight). */
void dit_offload_engine_across_forwards(dit_offload_engine_t *e, int on);

/* Of the latest forward, once synchronized: the time the compute queue waited for slots to
 * fill (prefetch stall, from timed events on the backend's timeline) and the host time spent
 * issuing the schedule. */
dit_status_t dit_offload_engine_breakdown(dit_offload_engine_t *e, double *stall_ms, double *host_ms);

#endif
