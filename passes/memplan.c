/* Static memory plan: liveness over the whole forward, then first-fit placement of each
 * temp in one arena. Outputs are allocated before the op's dying inputs are released, so an
 * op never writes over what it reads; a collective's inputs live until its result is first
 * used by compute, so a runtime may overlap it with the compute in between. The attention-state
 * caches (state_cache outputs) persist across forwards: they take the bottom of the arena, one
 * after the other, `copies` times over (a runtime points each branch's forward at its copy), and
 * are never released, so nothing else ever writes there. A reshape of a temp into a temp is a
 * view: its result takes its input's block, which lives until the last reader of either (the
 * runtime skips a reshape whose input and output coincide); so are slices of the tokens that split
 * a one-item temp whole, each at its bytes of the block. A concat whose parts are contiguous
 * runs of its output is one too, the other way round: its parts are written into its block, which
 * the first part to be made takes and which lives until the last reader of any of the three. A
 * linear group's outputs (passes/group.c) are placed together when its first member runs, one
 * after another at one stride, each then released after its own last reader. */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

typedef struct block {
  uint64_t off, size;
  dit_vid_t v;
} block_t;

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static int planned(const dit_value_t *v) { return v->kind == DIT_VALUE_TEMP && !v->is_output; }

/* The concats whose parts can be written where the concat would put them, so the concat is a
 * view (artifacts/plan.h: dit_plan_step_is_view; the runtime skips it): the joined dim has only
 * ones before it (each part one contiguous run of the output), every part a planned temp of its
 * own (no view, no other concat's part or host, no state cache) that a compute op makes, and the
 * first part's bytes a multiple of DIT_ARENA_ALIGN (the second part starts aligned). Sets host[v]
 * and part_at[v] of each part, -1 elsewhere. */
static void concat_hosts(const dit_graph_t *g, const dit_vid_t *root, dit_vid_t *host, uint64_t *part_at) {
  const int32_t nv = dit_graph_num_values(g), no = dit_graph_num_ops(g);
  uint8_t *busy = calloc((size_t)nv + 1, 1); /* a view's root, or a host */
  for (dit_vid_t v = 0; v < nv; v++) host[v] = -1, part_at[v] = 0;
  if (!busy) return; /* no concat in place: the plan is still valid */
  for (dit_vid_t v = 0; v < nv; v++)
    if (root[v] != v) busy[root[v]] = 1;
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    if (op->kind != DIT_OP_CONCAT || op->n_in != 2 || op->n_out != 1) continue;
    const dit_vid_t y = op->out[0], a = op->in[0], b = op->in[1];
    const dit_value_t *yv = dit_graph_cvalue(g, y);
    const dit_attr_t *dim = dit_attrs_find(&op->attrs, "dim");
    if (!planned(yv) || root[y] != y || busy[y] || host[y] >= 0 || !dim || dim->i < 0 || dim->i >= yv->rank || a == b) continue;
    int ok = dit_value_nbytes(dit_graph_cvalue(g, a)) % DIT_ARENA_ALIGN == 0;
    for (int64_t d = 0; ok && d < dim->i; d++) ok = yv->dims[d] == 1;
    for (int k = 0; ok && k < 2; k++) {
      const dit_vid_t u = op->in[k];
      const dit_value_t *uv = dit_graph_cvalue(g, u);
      const dit_op_t *by = uv->producer >= 0 ? dit_graph_cop_at(g, uv->producer) : NULL;
      ok = planned(uv) && root[u] == u && !busy[u] && host[u] < 0 && by && !dit_op_is_collective(by->kind) &&
           by->kind != DIT_OP_STATE_CACHE && by->kind != DIT_OP_CONCAT;
    }
    if (!ok) continue;
    host[a] = host[b] = y;
    part_at[b] = dit_value_nbytes(dit_graph_cvalue(g, a));
    busy[y] = 1;
  }
  free(busy);
}

/* Linear groups (attrs group_size = G, group_at = 0 .. G - 1 on G consecutive ops i .. i + G - 1):
 * grouped[y0] = G for the first member's output y0 when every member's output is a planned temp of
 * its own (no view, no concat's part) of y0's size. The first member then takes one gap of G
 * strides (each output rounded up to DIT_ARENA_ALIGN) and places every member's output in it, one
 * stride apart, each part released after its own last reader as a block of its own would be. A
 * group not of that form is left alone: its outputs are placed one by one. */
static void linear_groups(const dit_graph_t *g, const dit_vid_t *root, const dit_vid_t *host, int64_t *grouped) {
  const int32_t no = dit_graph_num_ops(g);
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    const dit_attr_t *n = dit_attrs_find(&op->attrs, "group_size"), *at = dit_attrs_find(&op->attrs, "group_at");
    if (!n || !at || at->i != 0 || n->i < 2 || n->i > no - i) continue;
    const dit_vid_t y0 = op->out[0];
    int ok = 1;
    for (int64_t m = 0; ok && m < n->i; m++) {
      const dit_op_t *mo = dit_graph_cop_at(g, i + (int32_t)m);
      const dit_attr_t *mn = dit_attrs_find(&mo->attrs, "group_size"), *mat = dit_attrs_find(&mo->attrs, "group_at");
      const dit_vid_t y = mo->out[0];
      const dit_value_t *yv = dit_graph_cvalue(g, y);
      ok = mo->n_out == 1 && mn && mat && mn->i == n->i && mat->i == m && planned(yv) && root[y] == y && host[y] < 0 &&
           dit_value_nbytes(yv) > 0 && dit_value_nbytes(yv) == dit_value_nbytes(dit_graph_cvalue(g, y0));
    }
    if (ok) grouped[y0] = n->i;
  }
}

/* The temps that slices of the tokens split whole: one item ([1, T, C]), read by nothing but
 * slice_tokens ops (at most SPLIT_MAX) whose ranges are disjoint and cover all T tokens, each
 * starting at a multiple of DIT_ARENA_ALIGN bytes. Each slice is then a view of its bytes (the
 * runtime skips it), and the block, which lives as long as any slice, holds nothing unread.
 * Returns a flag per value (NULL: out of memory). */
#define SPLIT_MAX 4
static uint8_t *split_views(const dit_graph_t *g) {
  const int32_t nv = dit_graph_num_values(g), no = dit_graph_num_ops(g);
  uint8_t *ok = calloc((size_t)nv + 1, 1);
  int64_t (*rg)[SPLIT_MAX][2] = malloc(((size_t)nv + 1) * sizeof *rg);
  int *n = calloc((size_t)nv + 1, sizeof *n);
  if (!ok || !rg || !n) {
    free(ok), free(rg), free(n);
    return NULL;
  }
  for (dit_vid_t v = 0; v < nv; v++) {
    const dit_value_t *val = dit_graph_cvalue(g, v);
    ok[v] = planned(val) && val->rank == 3 && val->dims[0] == 1 && val->dims[1] > 0;
  }
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    for (int k = 0; k < op->n_in; k++) {
      const dit_vid_t x = op->in[k];
      if (!ok[x]) continue;
      const dit_value_t *xv = dit_graph_cvalue(g, x);
      const dit_attr_t *t0 = dit_attrs_find(&op->attrs, "t0"), *cnt = dit_attrs_find(&op->attrs, "count");
      const uint64_t row = dit_value_nbytes(xv) / (uint64_t)xv->dims[1];
      if (op->kind != DIT_OP_SLICE_TOKENS || !t0 || !cnt || n[x] == SPLIT_MAX || ((uint64_t)t0->i * row) % DIT_ARENA_ALIGN) {
        ok[x] = 0;
        continue;
      }
      rg[x][n[x]][0] = t0->i, rg[x][n[x]][1] = t0->i + cnt->i;
      n[x]++;
    }
  }
  for (dit_vid_t v = 0; v < nv; v++) {
    if (!ok[v] || !n[v]) {
      ok[v] = 0;
      continue;
    }
    int64_t covered = 0;
    for (int a = 0; a < n[v]; a++) {
      covered += rg[v][a][1] - rg[v][a][0];
      for (int b = 0; b < a; b++)
        if (rg[v][a][0] < rg[v][b][1] && rg[v][b][0] < rg[v][a][1]) ok[v] = 0;
    }
    if (covered != dit_graph_cvalue(g, v)->dims[1]) ok[v] = 0;
  }
  free(rg);
  free(n);
  return ok;
}

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
  /* A collective may run on a queue of its own, overlapped with the compute after it, until
   * the first compute op that reads its result (through a chain of collectives, which run in
   * order on that queue): its inputs stay alive until then (and with them, below, the blocks of
   * views and concat parts among them). */
  int32_t *first = malloc(((size_t)nv + 1) * sizeof *first), *until = malloc(((size_t)no + 1) * sizeof *until);
  if (!first || !until) {
    free(first), free(until), free(last), free(live);
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
  /* Views: root[v] is the temp whose block v shares (itself unless v reshapes a temp or is a slice
   * of one split whole), view_at[v] where in it. Ops run in order, so a view's root is known before
   * the view. */
  dit_vid_t *root = malloc(((size_t)nv + 1) * sizeof *root);
  if (!root) {
    free(last);
    free(live);
    return DIT_ERR(RESOURCE_EXHAUSTED, "memplan: out of memory");
  }
  uint64_t *view_at = malloc(((size_t)nv + 1) * sizeof *view_at); /* a view's bytes into its root's block */
  uint8_t *split = split_views(g);
  if (!view_at || !split) {
    free(view_at), free(split), free(root), free(last), free(live);
    return DIT_ERR(RESOURCE_EXHAUSTED, "memplan: out of memory");
  }
  for (dit_vid_t v = 0; v < nv; v++) root[v] = v, view_at[v] = 0;
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    const dit_vid_t x = op->in[0], y = op->out[0];
    if (op->kind == DIT_OP_RESHAPE && planned(dit_graph_cvalue(g, x)) && planned(dit_graph_cvalue(g, y))) {
      root[y] = root[x], view_at[y] = view_at[x];
    } else if (op->kind == DIT_OP_SLICE_TOKENS && split[x] && planned(dit_graph_cvalue(g, y))) {
      const dit_value_t *xv = dit_graph_cvalue(g, x);
      root[y] = root[x];
      view_at[y] = view_at[x] + (uint64_t)dit_attrs_find(&op->attrs, "t0")->i * (dit_value_nbytes(xv) / (uint64_t)xv->dims[1]);
    }
  }
  free(split);
  for (dit_vid_t v = 0; v < nv; v++)
    if (root[v] != v && last[v] > last[root[v]]) last[root[v]] = last[v];
  /* Concats in place: host[v] is the concat output whose block part v is written into, at
   * part_at[v] bytes (-1: none). */
  dit_vid_t *host = malloc(((size_t)nv + 1) * sizeof *host);
  uint64_t *part_at = malloc(((size_t)nv + 1) * sizeof *part_at);
  int64_t *grouped = calloc((size_t)nv + 1, sizeof *grouped);
  if (!host || !part_at || !grouped) {
    free(host), free(part_at), free(grouped), free(view_at), free(last), free(live), free(root);
    return DIT_ERR(RESOURCE_EXHAUSTED, "memplan: out of memory");
  }
  concat_hosts(g, root, host, part_at);
  linear_groups(g, root, host, grouped);
  for (dit_vid_t v = 0; v < nv; v++)
    if (host[v] >= 0 && last[v] > last[host[v]]) last[host[v]] = last[v];
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
      if (root[op->out[k]] != op->out[k]) { /* a view: bytes of its root's block */
        val->offset = dit_graph_cvalue(g, root[op->out[k]])->offset + (int64_t)view_at[op->out[k]];
        continue;
      }
      /* A concat's part: its host's block, taken by its first part. */
      const dit_vid_t b = host[op->out[k]] >= 0 ? host[op->out[k]] : op->out[k];
      dit_value_t *bval = dit_graph_value(g, b);
      if (b != op->out[k] && bval->offset >= 0) {
        val->offset = bval->offset + (int64_t)part_at[op->out[k]];
        continue;
      }
      const uint64_t one = round_up(dit_value_nbytes(bval) ? dit_value_nbytes(bval) : 1, DIT_ARENA_ALIGN);
      const int64_t parts = b == op->out[k] && grouped[b] ? grouped[b] : 1; /* a linear group's outputs, one after another */
      const uint64_t size = one * (uint64_t)parts;
      naive += size;
      /* live[] is sorted by offset: take the first gap that fits. */
      uint64_t off = 0;
      int pos = 0;
      for (; pos < n_live; pos++) {
        if (live[pos].off >= off + size) break;
        uint64_t end = live[pos].off + live[pos].size;
        if (end > off) off = end;
      }
      memmove(&live[pos + parts], &live[pos], (size_t)(n_live - pos) * sizeof *live);
      for (int64_t m = 0; m < parts; m++) { /* a group member's part lives as its own block */
        const dit_vid_t part = m ? dit_graph_cop_at(g, i + (int32_t)m)->out[0] : b;
        live[pos + m] = (block_t){off + (uint64_t)m * one, one, part};
        dit_graph_value(g, part)->offset = (int64_t)(off + (uint64_t)m * one);
      }
      n_live += (int)parts;
      bval->offset = (int64_t)off;
      if (b != op->out[k]) val->offset = (int64_t)(off + part_at[op->out[k]]);
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
  free(host);
  free(part_at);
  free(grouped);
  free(view_at);
  free(root);
  free(last);
  free(live);
  return DIT_OK;
}
