/* The conditioning queue: the ops that depend on no token, only on small inputs (the timestep,
 * the guidance scale, pooled text) and weights, run on a queue of their own beside the
 * compute queue. A DiT's per-block modulation projections are such ops: matrix-vector products
 * that stream their weights from memory (FLUX.1's 96 read 6.4 GB a forward) while the blocks'
 * own work is bound by arithmetic, so running them beside the blocks, rather than in front of
 * each, takes them off the forward's critical path.
 *
 * The pass moves them, in their order, in front of every other op (each depends only on weights,
 * small inputs and ops moved before it, so the order stays topological), marks them queue 1 and
 * block -1 (they run before any block), and memplan keeps every temp they read or write for the
 * whole forward, placed before any other: nothing the compute queue writes shares their bytes,
 * so the two queues may run in any interleaving, and the compute queue waits only where it
 * reads their results. Nothing is marked unless a matrix product is among them and some other
 * op reads them (else a second queue buys nothing); values above COND_VALUE_BYTES, or a set
 * above COND_TOTAL_BYTES, stay on the compute queue, so what is pinned stays small. */
#include <stdlib.h>

#include "passes/passes.h"

#define COND_VALUE_BYTES (1ull << 20)
#define COND_TOTAL_BYTES (64ull << 20)

/* Inputs without a token dimension (rank 2 at most: a timestep or guidance scale per item,
 * pooled text, a text mask) of at most COND_VALUE_BYTES that no output replaces in place. */
static int small_input(const dit_graph_t *g, dit_vid_t v) {
  const dit_value_t *val = dit_graph_cvalue(g, v);
  if (val->kind != DIT_VALUE_INPUT || val->rank > 2 || dit_value_nbytes(val) > COND_VALUE_BYTES) return 0;
  for (dit_vid_t u = 0; u < dit_graph_num_values(g); u++)
    if (dit_graph_cvalue(g, u)->updates == v) return 0;
  return 1;
}

dit_status_t dit_pass_conditioning(dit_graph_t *g, dit_pass_result_t *r) {
  const int32_t no = dit_graph_num_ops(g), nv = dit_graph_num_values(g);
  uint8_t *cond = calloc((size_t)nv + 1, 1), *side = calloc((size_t)no + 1, 1);
  int32_t *order = malloc(((size_t)no + 1) * sizeof *order);
  dit_status_t s = DIT_OK;
  if (!cond || !side || !order) {
    s = DIT_ERR(RESOURCE_EXHAUSTED, "conditioning: out of memory");
    goto out;
  }
  for (dit_vid_t v = 0; v < nv; v++) {
    const dit_value_t *val = dit_graph_cvalue(g, v);
    cond[v] = val->kind == DIT_VALUE_WEIGHT || small_input(g, v);
  }
  uint64_t total = 0;
  int32_t n_side = 0, products = 0;
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    if (dit_op_is_collective(op->kind) || op->kind == DIT_OP_STATE_CACHE) continue;
    int ok = 1;
    for (int k = 0; ok && k < op->n_in; k++) ok = cond[op->in[k]];
    uint64_t bytes = 0;
    for (int k = 0; ok && k < op->n_out; k++) {
      const dit_value_t *val = dit_graph_cvalue(g, op->out[k]);
      ok = !val->is_output && dit_value_nbytes(val) <= COND_VALUE_BYTES;
      bytes += dit_value_nbytes(val);
    }
    if (!ok || total + bytes > COND_TOTAL_BYTES) continue;
    total += bytes;
    side[i] = 1, n_side++;
    products += op->kind == DIT_OP_LINEAR || op->kind == DIT_OP_LINEAR_FP8;
    for (int k = 0; k < op->n_out; k++) cond[op->out[k]] = 1;
  }
  int read = 0; /* a compute op reads a marked op's result */
  for (int32_t i = 0; i < no && !read; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    for (int k = 0; !side[i] && k < op->n_in && !read; k++) {
      const int32_t p = dit_graph_cvalue(g, op->in[k])->producer;
      read = p >= 0 && side[p];
    }
  }
  if (!products || !read || n_side == no) goto out;
  int32_t n = 0;
  for (int32_t i = 0; i < no; i++)
    if (side[i]) order[n++] = i;
  for (int32_t i = 0; i < no; i++)
    if (!side[i]) order[n++] = i;
  s = dit_graph_reorder(g, order);
  for (int32_t i = 0; !s && i < n_side; i++) {
    dit_op_t *op = dit_graph_op_at(g, i);
    op->queue = 1, op->block = -1;
  }
  if (!s) r->conditioning_ops = n_side;
out:
  free(cond), free(side), free(order);
  return s;
}
