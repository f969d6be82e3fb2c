/* Collectives as early as their inputs allow: a list schedule that always takes, among the
 * ops whose inputs are ready, the one feeding the earliest collective (the op itself, or any
 * op downstream of it), ties in the original order. Each collective then directly follows
 * the chain that produces its input, and the independent compute after it (the next head
 * projection, say) can overlap it when the runtime gives collectives a queue of their own.
 * Collectives keep their relative order, so every rank issues them in the same sequence; ops
 * stay inside their run of one transformer block (the offload engine streams weights per block
 * run); a graph without collectives keeps its order. */
#include <stdlib.h>

#include "passes/passes.h"

dit_status_t dit_pass_schedule(dit_graph_t *g, dit_pass_result_t *r) {
  (void)r;
  const int32_t no = dit_graph_num_ops(g), nv = dit_graph_num_values(g);
  int any = 0;
  for (int32_t i = 0; i < no && !any; i++) any = dit_op_is_collective(dit_graph_cop_at(g, i)->kind);
  if (!any) return DIT_OK;
  int32_t *prio = malloc(((size_t)no + 1) * sizeof *prio), *waiting = calloc((size_t)no + 1, sizeof *waiting);
  int32_t *order = malloc(((size_t)no + 1) * sizeof *order), *vprio = malloc(((size_t)nv + 1) * sizeof *vprio);
  uint8_t *done = calloc((size_t)no + 1, 1);
  int32_t *seg = malloc(((size_t)no + 1) * sizeof *seg);
  dit_status_t s = DIT_OK;
  if (!prio || !waiting || !order || !vprio || !done || !seg) {
    s = DIT_ERR(RESOURCE_EXHAUSTED, "schedule: out of memory");
    goto out;
  }
  /* Priorities, last op first (the graph's order is topological): a collective's own index,
   * else the smallest among the readers of its outputs; vprio[v] is that over v's readers. */
  for (dit_vid_t v = 0; v < nv; v++) vprio[v] = INT32_MAX;
  for (int32_t i = no - 1; i >= 0; i--) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    int32_t p = dit_op_is_collective(op->kind) ? i : INT32_MAX;
    for (int k = 0; k < op->n_out; k++)
      if (vprio[op->out[k]] < p) p = vprio[op->out[k]];
    prio[i] = p;
    for (int k = 0; k < op->n_in; k++)
      if (p < vprio[op->in[k]]) vprio[op->in[k]] = p;
  }
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    for (int k = 0; k < op->n_in; k++) waiting[i] += dit_graph_cvalue(g, op->in[k])->producer >= 0;
  }
  /* Runs of ops of one block (or of none) in the original order: segments, taken in turn. */
  for (int32_t i = 0; i < no; i++)
    seg[i] = i && dit_graph_cop_at(g, i)->block == dit_graph_cop_at(g, i - 1)->block ? seg[i - 1] : i;
  /* Readiness is counted per input slot: an op reading one value twice waits for it twice. */
  for (int32_t k = 0, cur = 0; k < no; k++) {
    while (done[cur]) cur++; /* the first op not yet taken: its segment is the current one */
    int32_t best = -1;
    for (int32_t i = cur; i < no && seg[i] == seg[cur]; i++)
      if (!done[i] && !waiting[i] && (best < 0 || prio[i] < prio[best])) best = i;
    if (best < 0) {
      s = DIT_ERR(INTERNAL, "schedule: no op is ready after %d of %d (a cycle)", k, no);
      goto out;
    }
    done[best] = 1;
    order[k] = best;
    const dit_op_t *op = dit_graph_cop_at(g, best);
    for (int32_t i = 0; i < no; i++) {
      if (done[i]) continue;
      const dit_op_t *c = dit_graph_cop_at(g, i);
      for (int a = 0; a < c->n_in; a++)
        for (int o = 0; o < op->n_out; o++) waiting[i] -= c->in[a] == op->out[o];
    }
  }
  s = dit_graph_reorder(g, order);
out:
  free(prio);
  free(waiting);
  free(order);
  free(vprio);
  free(done);
  free(seg);
  return s;
}
