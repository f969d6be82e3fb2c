/* The runtime's allocations for a plan (plan_memory.h). */
#include "artifacts/plan_memory.h"

#include <string.h>

#include "base/ops.h"

uint64_t dit_plan_collective_buffer_bytes(const dit_plan_t *plan) {
  uint64_t need = 0;
  for (size_t i = 0; i < plan->n_steps; i++) {
    const dit_plan_step_t *st = &plan->steps[i];
    if (!dit_op_is_collective(st->kind)) continue;
    const dit_attr_t *na = dit_attrs_find(&st->attrs, "n");
    /* A group size outside [1, 64] is refused by the executor; 64 bounds the buffer then.
     * ring_shift counts n blocks too, though its point-to-point exchange needs one block at
     * most (none when its input and output are apart): kept, so the plan's predicted peak and
     * its recorded figures stay as they were. */
    const uint64_t n = st->kind == DIT_OP_ALLREDUCE ? 1 : na && na->i > 0 && na->i <= 64 ? (uint64_t)na->i : 64;
    const uint64_t b = plan->values[st->in[0]].nbytes, o = plan->values[st->out[0]].nbytes;
    if (n * b > need) need = n * b;
    if (o > need) need = o;
  }
  return need;
}

void dit_plan_memory(const dit_plan_t *plan, int device, dit_plan_memory_t *out) {
  *out = (dit_plan_memory_t){0};
  out->arena = plan->arena_bytes ? plan->arena_bytes : 1;
  for (size_t i = 0; i < plan->n_values; i++) {
    const dit_plan_value_t *v = &plan->values[i];
    /* An output that replaces an input in place has no buffer of its own. */
    if (v->storage == DIT_STORAGE_INPUT || (v->storage == DIT_STORAGE_OUTPUT && v->updates < 0)) out->io += v->nbytes ? v->nbytes : 1;
  }
  out->collective_scratch = 2 * dit_plan_collective_buffer_bytes(plan);
  int library_gemm = 0;
  for (size_t i = 0; i < plan->n_steps && !library_gemm; i++) library_gemm = !plan->steps[i].has_kernel;
  if (device && library_gemm) out->gemm_workspace = DIT_GEMM_WORKSPACE_BYTES;
  out->total = out->arena + out->io + out->collective_scratch + out->gemm_workspace;
}

long dit_plan_lent_input(const dit_plan_t *lender, const dit_plan_value_t *v) {
  for (size_t i = 0; lender && v->storage == DIT_STORAGE_INPUT && i < lender->n_values; i++) {
    const dit_plan_value_t *u = &lender->values[i];
    if (u->storage == DIT_STORAGE_INPUT && !strcmp(u->ref, v->ref) && u->dtype == v->dtype && u->nbytes == v->nbytes) return (long)i;
  }
  return -1;
}

uint64_t dit_plan_lent_bytes(const dit_plan_t *plan, const dit_plan_t *lender) {
  if (!lender) return 0;
  uint64_t n = lender->arena_bytes >= plan->arena_bytes ? plan->arena_bytes : 0;
  for (size_t i = 0; i < plan->n_values; i++)
    if (dit_plan_lent_input(lender, &plan->values[i]) >= 0) n += plan->values[i].nbytes;
  return n;
}
