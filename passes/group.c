/* Linear groups: runs of consecutive linears that read one x through checkpoint weights of one
 * shape (an attention's q, k and v projections, or k and v of a cross-attention) are marked as a
 * group: attr group_size = G on each member and group_at = its place, 0 .. G - 1. The memory
 * plan then puts the members' outputs one after another at one stride, so a backend may run the
 * group as one batched matrix product (runtime/linear_group.h; the CUDA backend's strided-batched
 * cuBLASLt GEMM, the weight layout putting the weights and biases at one stride too, in
 * execution order); any backend may also run each member on its own. Values, ops and results
 * are unchanged. Runs after schedule, which fixes the op order the runs are taken from. */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

/* A run longer than this is split (q, k and v are the largest group the models have). */
#define GROUP_MAX 4

/* The values some op reads as a view (reshape, slice_tokens and concat take blocks of their own
 * in the memory plan), flagged; NULL when out of memory. */
static uint8_t *viewed_values(const dit_graph_t *g) {
  const int32_t nv = dit_graph_num_values(g), no = dit_graph_num_ops(g);
  uint8_t *viewed = calloc((size_t)nv + 1, 1);
  for (int32_t i = 0; viewed && i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    if (op->kind != DIT_OP_RESHAPE && op->kind != DIT_OP_SLICE_TOKENS && op->kind != DIT_OP_CONCAT) continue;
    for (int k = 0; k < op->n_in; k++) viewed[op->in[k]] = 1;
  }
  return viewed;
}

/* Whether the value a group member makes may share a block with its group: a temp the memory
 * plan places (not an output) that no op reads as a view. */
static int own_block(const dit_graph_t *g, const uint8_t *viewed, dit_vid_t y) {
  const dit_value_t *v = dit_graph_cvalue(g, y);
  return v->kind == DIT_VALUE_TEMP && !v->is_output && !viewed[y];
}

static int same_shape(const dit_value_t *a, const dit_value_t *b) {
  return a->dtype == b->dtype && a->rank == b->rank && !memcmp(a->dims, b->dims, (size_t)a->rank * sizeof a->dims[0]);
}

/* Linear op i as a possible member: no activation, no accumulated input, a 2-D checkpoint weight
 * (not a computed constant) and at most a bias. */
static int candidate(const dit_graph_t *g, int32_t i) {
  const dit_op_t *op = dit_graph_cop_at(g, i);
  if (op->kind != DIT_OP_LINEAR || op->n_out != 1 || op->n_in < 2 || op->n_in > 3 || dit_attrs_find(&op->attrs, "act") ||
      dit_attrs_find(&op->attrs, "acc") || dit_attrs_find(&op->attrs, "group_size"))
    return 0;
  for (int k = 1; k < op->n_in; k++) {
    const dit_value_t *w = dit_graph_cvalue(g, op->in[k]);
    if (w->kind != DIT_VALUE_WEIGHT || w->data) return 0;
  }
  return dit_graph_cvalue(g, op->in[1])->rank == 2;
}

/* Whether linear op j joins the group that op i (its first member) begins. */
static int joins(const dit_graph_t *g, int32_t i, int32_t j) {
  const dit_op_t *a = dit_graph_cop_at(g, i), *b = dit_graph_cop_at(g, j);
  if (!candidate(g, j) || b->in[0] != a->in[0] || b->n_in != a->n_in || b->block != a->block) return 0;
  for (int k = 1; k < a->n_in; k++) {
    if (!same_shape(dit_graph_cvalue(g, a->in[k]), dit_graph_cvalue(g, b->in[k]))) return 0;
    for (int32_t m = i; m < j; m++) /* each member its own weights */
      if (dit_graph_cop_at(g, m)->in[k] == b->in[k]) return 0;
  }
  return same_shape(dit_graph_cvalue(g, a->out[0]), dit_graph_cvalue(g, b->out[0]));
}

dit_status_t dit_pass_group(dit_graph_t *g, dit_pass_result_t *r) {
  const int32_t no = dit_graph_num_ops(g);
  uint8_t *viewed = viewed_values(g);
  if (!viewed) return DIT_ERR(RESOURCE_EXHAUSTED, "group: out of memory");
  dit_status_t s = DIT_OK;
  for (int32_t i = 0; i < no && !s;) {
    if (!candidate(g, i) || !own_block(g, viewed, dit_graph_cop_at(g, i)->out[0])) {
      i++;
      continue;
    }
    int32_t n = 1;
    while (n < GROUP_MAX && i + n < no && joins(g, i, i + n) && own_block(g, viewed, dit_graph_cop_at(g, i + n)->out[0])) n++;
    for (int32_t m = 0; n > 1 && m < n && !s; m++) {
      dit_op_t *op = dit_graph_op_at(g, i + m);
      if (dit_attrs_set_int(&op->attrs, "group_size", n) || dit_attrs_set_int(&op->attrs, "group_at", m))
        s = DIT_ERR(RESOURCE_EXHAUSTED, "group: too many attributes on linear op %d", i + m);
    }
    if (n > 1) r->grouped_ops += n;
    i += n;
  }
  free(viewed);
  return s;
}
