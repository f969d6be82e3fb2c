/* The memory a runtime allocates to run one rank's plan, as one rule that the compiler (for the
 * manifest's predicted peak and the offload planner) and the runtime (for its allocations and
 * their check) both use, so that prediction and allocation cannot drift apart. */
#ifndef DIT_ARTIFACTS_PLAN_MEMORY_H
#define DIT_ARTIFACTS_PLAN_MEMORY_H

#include <stdint.h>

#include "artifacts/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuBLASLt's workspace on a device backend, allocated when the plan has a step without a
 * generated kernel (a library GEMM). */
#define DIT_GEMM_WORKSPACE_BYTES (32ull << 20)

typedef struct dit_plan_memory {
  uint64_t arena;              /* the activation arena */
  uint64_t io;                 /* every input and output value (a 0-byte value takes 1) */
  uint64_t collective_scratch; /* send and receive buffers for the plan's collectives */
  uint64_t gemm_workspace;     /* DIT_GEMM_WORKSPACE_BYTES on a device with a library GEMM */
  uint64_t total;              /* the sum: what the runtime allocates besides weights */
} dit_plan_memory_t;

/* The runtime's own allocations for `plan` (weights and offload staging not included: the
 * caller adds what it keeps of the weight blob). `device` is nonzero for a device backend
 * (one whose memory is not the host's). */
void dit_plan_memory(const dit_plan_t *plan, int device, dit_plan_memory_t *out);

/* A runtime may run `plan` in the memory of another running `lender` (one after the other, never
 * at once): the index in lender's values of the input that serves v, an input of plan (the same
 * name, dtype and size), else -1. */
long dit_plan_lent_input(const dit_plan_t *lender, const dit_plan_value_t *v);

/* What such a runtime does not allocate: its arena when lender's is at least as large, and the
 * inputs lender serves. */
uint64_t dit_plan_lent_bytes(const dit_plan_t *plan, const dit_plan_t *lender);

/* Bytes of each of the two collective buffers: the largest of, over every collective, its
 * input times the group size (all-reduce: once) and its output. 0 without collectives. */
uint64_t dit_plan_collective_buffer_bytes(const dit_plan_t *plan);

#ifdef __cplusplus
}
#endif
#endif
