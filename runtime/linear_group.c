/* Linear groups as one batched product: the checks a backend makes before it trusts a group's
 * layout (runtime/linear_group.h). */
#include "runtime/linear_group.h"

#include <string.h>

static int64_t attr_int(const dit_plan_step_t *s, const char *key) {
  const dit_attr_t *a = dit_attrs_find(&s->attrs, key);
  return a && !a->is_float ? a->i : -1;
}

static int same_shape(const dit_tensor_t *a, const dit_tensor_t *b) {
  return a->dtype == b->dtype && a->rank == b->rank && !memcmp(a->dims, b->dims, (size_t)a->rank * sizeof a->dims[0]);
}

/* The distance from a to b in elements of a's dtype when b lies above a by a whole number of
 * them, else 0. */
static int64_t elem_stride(const dit_tensor_t *a, const dit_tensor_t *b) {
  const uintptr_t pa = (uintptr_t)a->data, pb = (uintptr_t)b->data;
  const uint64_t es = dit_dtype_size(a->dtype);
  if (pb <= pa || !es || (pb - pa) % es || (pb - pa) / es > (uint64_t)INT64_MAX) return 0;
  return (int64_t)((pb - pa) / es);
}

/* A linear step as a group member: no kernel, activation or accumulated input, one output. */
static int plain_linear(const dit_plan_step_t *s, int *bias) {
  int acc;
  return s->kind == DIT_OP_LINEAR && !s->has_kernel && s->n_out == 1 && !dit_attrs_find(&s->attrs, "act") &&
         !dit_linear_operands(s->kind, &s->attrs, s->n_in, bias, &acc) && acc < 0;
}

int dit_linear_group(const dit_plan_t *plan, size_t i, const dit_tensor_t *bound, dit_linear_batch_t *b) {
  if (i >= plan->n_steps || plan->offload.mode != DIT_PLAN_OFFLOAD_NONE) return 0;
  const dit_plan_step_t *s = &plan->steps[i];
  const int64_t G = attr_int(s, "group_size");
  int bi;
  if (G < 2 || G > DIT_LINEAR_GROUP_MAX || attr_int(s, "group_at") != 0 || (size_t)G > plan->n_steps - i || !plain_linear(s, &bi)) return 0;
  int64_t ws = 0, bs = 0, ys = 0;
  for (int64_t m = 1; m < G; m++) {
    const dit_plan_step_t *t = &plan->steps[i + (size_t)m];
    int tb;
    if (!plain_linear(t, &tb) || tb != bi || attr_int(t, "group_size") != G || attr_int(t, "group_at") != m || t->n_in != s->n_in ||
        t->in[0] != s->in[0])
      return 0;
    for (int k = 1; k < s->n_in; k++)
      if (!same_shape(&bound[s->in[k]], &bound[t->in[k]])) return 0;
    if (!same_shape(&bound[s->out[0]], &bound[t->out[0]])) return 0;
    const int64_t w = elem_stride(&bound[s->in[1]], &bound[t->in[1]]), y = elem_stride(&bound[s->out[0]], &bound[t->out[0]]);
    const int64_t c = bi >= 0 ? elem_stride(&bound[s->in[bi]], &bound[t->in[bi]]) : 0;
    if (m == 1) ws = w, ys = y, bs = c;
    if (!w || !y || (bi >= 0 && !c) || w != m * ws || y != m * ys || c != m * bs) return 0;
  }
  if (ys < dit_tensor_numel(&bound[s->out[0]])) return 0; /* the outputs must not overlap */
  *b = (dit_linear_batch_t){(int)G, ws, bs, ys};
  return 1;
}
