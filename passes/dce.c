/* Dead-code elimination: drops ops none of whose results reach a graph output. */
#include <stdlib.h>

#include "passes/passes.h"

dit_status_t dit_pass_dce(dit_graph_t *g, dit_pass_result_t *r) {
  int32_t nv = dit_graph_num_values(g), no = dit_graph_num_ops(g);
  uint8_t *live = calloc((size_t)nv + 1, 1), *keep = calloc((size_t)no + 1, 1);
  if (!live || !keep) {
    free(live);
    free(keep);
    return DIT_ERR(RESOURCE_EXHAUSTED, "dce: out of memory");
  }
  for (dit_vid_t v = 0; v < nv; v++) live[v] = dit_graph_cvalue(g, v)->is_output;
  for (int32_t i = no - 1; i >= 0; i--) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    for (int k = 0; k < op->n_out; k++) keep[i] |= live[op->out[k]];
    if (!keep[i]) continue;
    for (int k = 0; k < op->n_in; k++) live[op->in[k]] = 1;
  }
  int32_t removed = 0;
  for (int32_t i = 0; i < no; i++) removed += !keep[i];
  dit_status_t s = removed ? dit_graph_compact(g, keep) : DIT_OK;
  r->removed_ops += removed;
  free(live);
  free(keep);
  return s;
}
