/* Static memory plan: liveness over the whole forward, then first-fit placement of each
 * temp in one arena. Outputs are allocated before the op's dying inputs are released, so an
 * op never writes over what it reads; a collective's inputs live until its result is first
 * used by compute, so a runtime may overlap it with the compute in between. The attention-state
 * caches (state_cache outputs) persist across forwards: they take the bottom of the arena, one
 * after the other, `copies` times over (a runtime points each branch's forward at its copy), and
 * are never released, so nothing else ever writes there. A reshape of a temp into a temp is a
 * view: its result takes its input's block, which lives until the last reader of either (the
 * runtime skips a reshape whose input and output coincide). */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

typedef struct block {
  uint64_t off, size;
  dit_vid_t v;
} block_t;

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static int planned(const dit_value_t *v) { return v->kind == DIT_VALUE_TEMP && !v->is_output; }

dit_status_t dit_pass_memplan(dit_graph_t *g, dit_pass_result_t *r) {
  int32_t nv = dit_graph_num_values(g), no = dit_graph_num_ops(g);
  int32_t *last = malloc(((size_t)nv + 1) * sizeof *last);
  block_t *live = malloc(((size_t)nv + 1) * sizeof *live);
  if (!last || !live) {
    free(last);
    free(live);
    return DIT_ERR(RESOURCE_EXHAUSTED, "memplan: out of memory");
  }
  for (dit_vid_t v = 0; v < nv; v++) {
    dit_value_t *val = dit_graph_value(g, v);
    val->offset = -1;
    last[v] = val->producer; /* a result nobody reads dies at its own op */
  }
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    for (int k = 0; k < op->n_in; k++) last[op->in[k]] = i;
  }
  /* Views: root[v] is the temp whose block v shares (itself unless v reshapes a temp). Ops run
   * in order, so a view's root is known before the view. */
  dit_vid_t *root = malloc(((size_t)nv + 1) * sizeof *root);
  if (!root) {
    free(last);
    free(live);
    return DIT_ERR(RESOURCE_EXHAUSTED, "memplan: out of memory");
  }
  for (dit_vid_t v = 0; v < nv; v++) root[v] = v;
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    if (op->kind == DIT_OP_RESHAPE && planned(dit_graph_cvalue(g, op->in[0])) && planned(dit_graph_cvalue(g, op->out[0])))
      root[op->out[0]] = root[op->in[0]];
  }
  for (dit_vid_t v = 0; v < nv; v++)
    if (root[v] != v && last[v] > last[root[v]]) last[root[v]] = last[v];
  /* A collective may run on a queue of its own, overlapped with the compute after it, until
   * the first compute op that reads its result (through a chain of collectives, which run in
   * order on that queue): its inputs stay alive until then. */
  int32_t *first = malloc(((size_t)nv + 1) * sizeof *first), *until = malloc(((size_t)no + 1) * sizeof *until);
  if (!first || !until) {
    free(first), free(until), free(last), free(live), free(root);
    return DIT_ERR(RESOURCE_EXHAUSTED, "memplan: out of memory");
  }
  for (dit_vid_t v = 0; v < nv; v++) first[v] = -1;
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    for (int k = 0; k < op->n_in; k++)
      if (first[op->in[k]] < 0) first[op->in[k]] = i;
  }
  for (int32_t i = no - 1; i >= 0; i--) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    if (!dit_op_is_collective(op->kind)) continue;
    const int32_t j = first[op->out[0]];
    until[i] = j < 0 ? i : dit_op_is_collective(dit_graph_cop_at(g, j)->kind) ? until[j] : j;
    for (int k = 0; k < op->n_in; k++)
      if (last[op->in[k]] < until[i]) last[op->in[k]] = until[i];
  }
  free(first);
  free(until);
  int n_live = 0;
  uint64_t arena = 0, naive = 0, states = 0;
  int64_t copies = 1;
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    if (op->kind != DIT_OP_STATE_CACHE) continue;
    const dit_attr_t *c = dit_attrs_find(&op->attrs, "copies");
    if (c && c->i > copies) copies = c->i;
    for (int k = 0; k < op->n_out; k++) {
      dit_value_t *val = dit_graph_value(g, op->out[k]);
      if (!planned(val)) continue;
      val->offset = (int64_t)states;
      states += round_up(dit_value_nbytes(val) ? dit_value_nbytes(val) : 1, DIT_ARENA_ALIGN);
    }
  }
  if (states) {
    last[nv] = no; /* the sentinel value id nv: the caches' block outlives every op */
    live[n_live++] = (block_t){0, states * (uint64_t)copies, nv};
    arena = naive = states * (uint64_t)copies;
  }
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    for (int k = 0; k < op->n_out; k++) {
      dit_value_t *val = dit_graph_value(g, op->out[k]);
      if (!planned(val) || val->offset >= 0) continue;
      if (root[op->out[k]] != op->out[k]) { /* a view: its root's block */
        val->offset = dit_graph_cvalue(g, root[op->out[k]])->offset;
        continue;
      }
      uint64_t size = round_up(dit_value_nbytes(val) ? dit_value_nbytes(val) : 1, DIT_ARENA_ALIGN);
      naive += size;
      /* live[] is sorted by offset: take the first gap that fits. */
      uint64_t off = 0;
      int pos = 0;
      for (; pos < n_live; pos++) {
        if (live[pos].off >= off + size) break;
        uint64_t end = live[pos].off + live[pos].size;
        if (end > off) off = end;
      }
      memmove(&live[pos + 1], &live[pos], (size_t)(n_live - pos) * sizeof *live);
      live[pos] = (block_t){off, size, op->out[k]};
      n_live++;
      val->offset = (int64_t)off;
      if (off + size > arena) arena = off + size;
    }
    /* Release everything whose last reader (or, if unread, producer) is this op. */
    int w = 0;
    for (int j = 0; j < n_live; j++)
      if (last[live[j].v] > i) live[w++] = live[j];
    n_live = w;
  }
  r->arena_bytes = arena;
  r->naive_bytes = naive;
  free(root);
  free(last);
  free(live);
  return DIT_OK;
}
