/* Fusion: an activation folded into the GEMM that feeds it, so the product is activated in
 * fp32 and stored once (a matrix library epilogue on GPUs) instead of written, read back and
 * written again. */
#include <stdlib.h>

#include "passes/passes.h"

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
  dit_status_t s = DIT_OK;
  if (fused) {
    /* The orphaned intermediate needs a producer for compaction to drop it cleanly. */
    s = dit_graph_compact(g, keep);
  }
  r->fused_ops += fused;
  free(uses);
  free(keep);
  return s;
}
