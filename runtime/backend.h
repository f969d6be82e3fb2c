/* The backend interface: a versioned table of functions the executor drives. A backend owns
 * its memory and runs plan steps on tensors bound to that memory. */
#ifndef DIT_RUNTIME_BACKEND_H
#define DIT_RUNTIME_BACKEND_H

#include <stddef.h>

#include "artifacts/plan.h"
#include "base/fileio.h"
#include "base/status.h"
#include "runtime/tensor.h"

#define DIT_BACKEND_ABI_VERSION 2

typedef struct dit_backend_config {
  int threads; /* CPU worker threads; <= 0: all online CPUs */
  int device;  /* GPU ordinal */
  const char *arch;     /* the bundle's target arch, e.g. "sm_90" */
  int64_t min_driver;   /* the bundle's minimum driver version */
} dit_backend_config_t;

/* Maps a verified bundle blob by hash (the executor's bundle does the checking). */
typedef dit_status_t (*dit_blob_loader_fn)(void *ctx, const char *hash, dit_mapping_t *out);

typedef struct dit_backend_vtable {
  int abi_version;
  const char *name;
  /* Nonzero when backend memory is ordinary host memory: the executor then binds weights
   * straight from the mapped bundle blob instead of uploading them. */
  int host_memory;
  dit_status_t (*create)(const dit_backend_config_t *cfg, void **out_state);
  void (*destroy)(void *state);
  /* `what` names the allocation in an out-of-memory error. */
  dit_status_t (*alloc)(void *state, size_t bytes, const char *what, void **out_ptr);
  void (*release)(void *state, void *ptr);
  dit_status_t (*upload)(void *state, void *dst, const void *src, size_t bytes);
  dit_status_t (*download)(void *state, void *dst, const void *src, size_t bytes);
  /* Zeros bytes of backend memory at dst, in order with the steps. */
  dit_status_t (*zero)(void *state, void *dst, size_t bytes);
  /* On queue 0 (compute, in order with the steps) or 2 (collectives, for backends that have
   * it): height rows of width bytes from src (rows spitch apart) to dst (dpitch apart), both in
   * backend memory. */
  dit_status_t (*copy2d)(void *state, int queue, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height);
  /* Runs step `index` of the plan given to prepare (or of any plan, for backends without
   * prepare) on bound tensors. */
  dit_status_t (*run_step)(void *state, size_t index, const dit_plan_step_t *step,
                           const dit_tensor_t *ins, dit_tensor_t *outs);
  dit_status_t (*synchronize)(void *state);
  /* Optional (may be NULL): called once after every plan value is bound to memory, to load
   * generated code and plan library calls. bound has plan->n_values entries. */
  dit_status_t (*prepare)(void *state, const dit_plan_t *plan, const dit_tensor_t *bound,
                          dit_blob_loader_fn load_blob, void *loader_ctx);
  /* Optional: device memory (free, total) in bytes, for the load-time memory check. */
  dit_status_t (*memory_info)(void *state, size_t *free_bytes, size_t *total_bytes);
  /* Optional: the steps run between capture_begin and capture_end are recorded (not run) as
   * one graph; replay runs it again, with the same memory bindings. */
  dit_status_t (*capture_begin)(void *state);
  dit_status_t (*capture_end)(void *state);
  dit_status_t (*replay)(void *state);

  /* Optional, all or none: a second in-order queue for weight streaming, beside the compute
   * queue that runs the steps (queue 0 = compute, 1 = copy). copy_enqueue appends a copy to
   * the copy queue (src in host memory, or in backend memory with src_on_device); mark
   * records event `ev` (0 .. DIT_BACKEND_MAX_EVENTS-1) at the current end of a queue; wait
   * makes a queue's later work wait for the event's most recent mark, as of the call. Events
   * are reused: a wait refers to the mark made before it. synchronize drains both queues.
   * pin_host page-locks host memory for asynchronous copies where it can, and otherwise gives
   * a page-locked copy of it (owned by the backend until destroy) in *pinned. */
  dit_status_t (*copy_enqueue)(void *state, void *dst, const void *src, size_t bytes, int src_on_device);
  dit_status_t (*mark)(void *state, int queue, int ev);
  dit_status_t (*wait)(void *state, int queue, int ev);
  dit_status_t (*pin_host)(void *state, const void *ptr, size_t bytes, const void **pinned);
  /* Optional: milliseconds between the most recent marks of two events, once both completed
   * (after synchronize). Events from DIT_BACKEND_TIMED_EVENTS up carry times. */
  dit_status_t (*elapsed_ms)(void *state, int ev_a, int ev_b, double *ms);
  /* Optional, both or neither (device backends whose collectives a device library runs):
   * native_queue makes the backend's device current on the calling thread and returns queue 0
   * (compute) or 2 (collectives) as the library sees it (a CUstream for CUDA); device_count
   * gives the number of devices this process sees. */
  void *(*native_queue)(void *state, int queue);
  dit_status_t (*device_count)(int *count);
  /* Optional: runs fn(arg) on queue 2 in order with that queue's copies, marks and waits (a
   * collective's communicator call, overlapped with compute); a failure comes out of the next
   * synchronize. mark and wait take queue 2 on backends that have this or native_queue. */
  dit_status_t (*call)(void *state, int queue, dit_status_t (*fn)(void *), void *arg);
  /* Optional: 1 when event ev's most recent mark has completed, 0 while it is pending, without
   * waiting (a host that paces work by what the device has finished). */
  int (*query)(void *state, int ev);
  /* Optional: bytes allocated so far through alloc and by the backend itself (library
   * workspaces), as requested; what the predicted peak is checked against. */
  uint64_t (*allocated_bytes)(void *state);
  /* Optional: the step cache's probe, on queue 0 in order with the steps. Over n elements of x
   * (dtype dt: f32, bf16 or f16) with r = x, or x - base when base is not NULL, computed in fp32
   * and rounded to dt: sums[0] = sum |r - prev| and sums[1] = sum |prev| (fp32 per thread, the
   * threads' sums added in double), then prev = r when update_prev. x, base and prev (n elements
   * of dt) are in backend memory; only the two sums come back. */
  dit_status_t (*probe_change)(void *state, const void *x, const void *base, void *prev, dit_dtype_t dt, size_t n,
                               int update_prev, double sums[2]);
  /* Optional: attention-state reuse's statistics (runtime/reuse_exec.c: a local state's drift from
   * its anchor copy, a state's norm, a reused state's measured error), on queue 0 in order with the
   * steps. Over n elements of x (dtype dt: f32, bf16 or f16) and ref (f32 or dt; NULL: zeros), each
   * read as a double: sums[0] = sum (x - ref)^2 and sums[1] = sum x^2, then ref = x (exact: ref is
   * f32 or x's dtype) when update_ref. x and ref are in backend memory; only the two sums come back.
   * The CPU backend adds the terms in element order; a device adds per-thread sums in its own order. */
  dit_status_t (*sum_sq_diff)(void *state, const void *x, dit_dtype_t dt, void *ref, dit_dtype_t ref_dt, size_t n, int update_ref,
                              double sums[2]);
  /* Optional, both or neither (device backends): work on a queue the caller owns (a CUstream of
   * the backend's context for CUDA). external_copy copies bytes between two addresses of
   * backend memory on it; external_join makes the compute queue wait for the work enqueued on
   * `queue` so far (queue_waits 0), or `queue` wait for the compute queue's (1). */
  dit_status_t (*external_copy)(void *state, void *queue, void *dst, const void *src, size_t bytes);
  dit_status_t (*external_join)(void *state, void *queue, int queue_waits);
  /* Optional (backends whose queues are host threads): stops the queues before teardown, when a
   * failed run may have left work queued behind a wait that nothing will satisfy. The work
   * running finishes, the rest is dropped; afterwards nothing touches backend memory, so it
   * may be released. Only destroy may follow. */
  void (*quiesce)(void *state);
} dit_backend_vtable_t;

/* Event numbers: [0, COLL) the offload engine's, [COLL, TIMED) the overlapped collectives',
 * [TIMED, MAX) timed ones. */
#define DIT_BACKEND_MAX_EVENTS 1024
#define DIT_BACKEND_COLL_EVENTS 384
#define DIT_BACKEND_TIMED_EVENTS 512

const dit_backend_vtable_t *dit_backend_cpu(void);
/* The CUDA backend: the driver API and cuBLASLt are loaded with dlopen on first use, so the
 * same binary runs (CPU only) where they are absent. */
const dit_backend_vtable_t *dit_backend_cuda(void);
/* The PTX text of the CUDA backend's probe and reuse statistics kernels (probe_change, sum_sq_diff:
 * loaded on first use; a test assembles it). */
const char *dit_cuda_probe_ptx(void);

#endif
