/* Fusion: an activation folded into the GEMM that feeds it, so the product is activated in
 * fp32 and stored once (a matrix library epilogue on GPUs) instead of written, read back and
 * written again; and the Q/K RMSNorm folded into the rotary embedding that follows it, so Q and
 * K are read once and written once (base/ops.def: rope, rope_table). */
#include <stdlib.h>

#include "passes/passes.h"

/* Folds the rmsnorm producing rope op i's x into the rope when the normalized value is a
 * temporary nothing else reads and every dtype on the way is the rope's (the fused form rounds
 * the normalized row to y's dtype, as storing it did). Returns the rmsnorm's op index, or -1. */
static int32_t fold_norm_into_rope(dit_graph_t *g, int32_t i, const int32_t *uses) {
  dit_op_t *rope = dit_graph_op_at(g, i);
  const int plain = rope->kind == DIT_OP_ROPE ? 1 : rope->kind == DIT_OP_ROPE_TABLE ? 2 : 0;
  if (!plain || rope->n_in != plain) return -1;
  const dit_value_t *mid = dit_graph_cvalue(g, rope->in[0]);
  if (mid->kind != DIT_VALUE_TEMP || mid->is_output || uses[rope->in[0]] != 1 || mid->producer < 0) return -1;
  const int32_t n = mid->producer;
  const dit_op_t *norm = dit_graph_cop_at(g, n);
  if (norm->kind != DIT_OP_RMSNORM || norm->n_in != 2) return -1;
  const dit_dtype_t dt = dit_graph_cvalue(g, rope->out[0])->dtype;
  if (dit_graph_cvalue(g, norm->in[0])->dtype != dt || mid->dtype != dt) return -1;
  const dit_attr_t *eps = dit_attrs_find(&norm->attrs, "eps"), *group = dit_attrs_find(&norm->attrs, "group");
  if (!eps || dit_attrs_set_float(&rope->attrs, "norm_eps", eps->is_float ? eps->f : (double)eps->i)) return -1;
  if (group && dit_attrs_set_int(&rope->attrs, "norm_group", group->i)) return -1;
  rope->in[0] = norm->in[0];
  rope->in[rope->n_in++] = norm->in[1];
  return n;
}

dit_status_t dit_pass_fuse(dit_graph_t *g, dit_pass_result_t *r) {
  int32_t nv = dit_graph_num_values(g), no = dit_graph_num_ops(g);
  int32_t *uses = calloc((size_t)nv + 1, sizeof *uses);
  uint8_t *keep = malloc((size_t)no + 1);
  if (!uses || !keep) {
    free(uses);
    free(keep);
    return DIT_ERR(RESOURCE_EXHAUSTED, "fuse: out of memory");
  }
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    for (int k = 0; k < op->n_in; k++) uses[op->in[k]]++;
    keep[i] = 1;
  }
  int32_t fused = 0;
  for (int32_t i = 0; i < no; i++) {
    dit_op_t *act = dit_graph_op_at(g, i);
    if (act->kind != DIT_OP_GELU_TANH) continue;
    dit_value_t *mid = dit_graph_value(g, act->in[0]);
    if (mid->kind != DIT_VALUE_TEMP || mid->is_output || uses[act->in[0]] != 1) continue;
    dit_op_t *lin = dit_graph_op_at(g, mid->producer);
    if ((lin->kind != DIT_OP_LINEAR && lin->kind != DIT_OP_LINEAR_FP8) || dit_attrs_find(&lin->attrs, "act")) continue;
    if (dit_attrs_set_int(&lin->attrs, "act", 1)) continue;
    /* The linear now produces the activation's result directly. */
    dit_value_t *out = dit_graph_value(g, act->out[0]);
    out->producer = mid->producer;
    lin->out[0] = act->out[0];
    mid->producer = -1;
    keep[i] = 0;
    fused++;
  }
  for (int32_t i = 0; i < no; i++) {
    const int32_t n = fold_norm_into_rope(g, i, uses);
    if (n < 0) continue;
    /* The rope reads x itself now: the normalized temporary has no producer left to keep. */
    dit_graph_value(g, dit_graph_cop_at(g, n)->out[0])->producer = -1;
    keep[n] = 0;
    fused++;
  }
  dit_status_t s = DIT_OK;
  if (fused) {
    /* The orphaned intermediates need a producer for compaction to drop them cleanly. */
    s = dit_graph_compact(g, keep);
  }
  r->fused_ops += fused;
  free(uses);
  free(keep);
  return s;
}
