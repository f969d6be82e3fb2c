/* The backend interface: a versioned table of functions the executor drives. A backend owns
 * its memory and runs plan steps on tensors bound to that memory. */
#ifndef DIT_RUNTIME_BACKEND_H
#define DIT_RUNTIME_BACKEND_H

#include <stddef.h>

#include "artifacts/plan.h"
#include "base/status.h"
#include "runtime/tensor.h"

#define DIT_BACKEND_ABI_VERSION 1

typedef struct dit_backend_config {
  int threads; /* CPU worker threads; <= 0: all online CPUs */
} dit_backend_config_t;

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
  dit_status_t (*run_step)(void *state, const dit_plan_step_t *step, const dit_tensor_t *ins,
                           dit_tensor_t *outs);
  dit_status_t (*synchronize)(void *state);
} dit_backend_vtable_t;

const dit_backend_vtable_t *dit_backend_cpu(void);

#endif
