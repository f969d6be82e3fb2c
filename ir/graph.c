/* Graph storage, builder with sticky errors, verifier, printer and compaction. */
#include "ir/graph.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct dit_graph {
  dit_value_t *values;
  int32_t n_values, cap_values;
  dit_op_t *ops;
  int32_t n_ops, cap_ops;
  int32_t block;
  dit_status_t error; /* first builder error, owned */
};

dit_status_t dit_graph_create(dit_graph_t **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return DIT_ERR(RESOURCE_EXHAUSTED, "graph: out of memory");
  (*out)->block = -1;
  return DIT_OK;
}

void dit_graph_destroy(dit_graph_t *g) {
  if (!g) return;
  for (int32_t i = 0; i < g->n_values; i++) {
    free(g->values[i].name);
    free(g->values[i].ref);
    free(g->values[i].src);
    free(g->values[i].data);
  }
  free(g->values);
  free(g->ops);
  dit_status_free(g->error);
  free(g);
}

static void set_error(dit_graph_t *g, dit_status_t s) {
  if (!g->error) g->error = s;
  else dit_status_free(s);
}

dit_status_t dit_graph_status(const dit_graph_t *g) { return g->error; }

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static dit_vid_t new_value(dit_graph_t *g, const char *name, const char *ref,
                           dit_value_kind_t kind, dit_dtype_t dtype, int rank,
                           const int64_t *dims) {
  if (rank < 0 || rank > DIT_MAX_RANK) {
    set_error(g, DIT_ERR(INVALID_ARGUMENT, "value '%s': rank %d outside 0..%d", name, rank,
                         DIT_MAX_RANK));
    return -1;
  }
  if (g->n_values == g->cap_values) {
    int32_t cap = g->cap_values ? g->cap_values * 2 : 64;
    dit_value_t *nv = realloc(g->values, (size_t)cap * sizeof *nv);
    if (!nv) {
      set_error(g, DIT_ERR(RESOURCE_EXHAUSTED, "graph: out of memory"));
      return -1;
    }
    g->values = nv;
    g->cap_values = cap;
  }
  dit_value_t *v = &g->values[g->n_values];
  memset(v, 0, sizeof *v);
  v->name = dup_or_null(name);
  v->ref = dup_or_null(ref);
  if ((name && !v->name) || (ref && !v->ref)) {
    free(v->name);
    free(v->ref);
    set_error(g, DIT_ERR(RESOURCE_EXHAUSTED, "graph: out of memory"));
    return -1;
  }
  v->kind = kind;
  v->dtype = dtype;
  v->rank = rank;
  for (int i = 0; i < rank; i++) v->dims[i] = dims[i];
  v->producer = -1;
  v->offset = -1;
  v->slice_dim = -1;
  v->updates = -1;
  return g->n_values++;
}

dit_vid_t dit_graph_input(dit_graph_t *g, const char *name, dit_dtype_t dtype, int rank,
                          const int64_t *dims) {
  return new_value(g, name, name, DIT_VALUE_INPUT, dtype, rank, dims);
}

dit_vid_t dit_graph_weight(dit_graph_t *g, const char *key, dit_dtype_t dtype, int rank,
                           const int64_t *dims) {
  return new_value(g, key, key, DIT_VALUE_WEIGHT, dtype, rank, dims);
}

dit_vid_t dit_graph_weight_slice_as(dit_graph_t *g, const char *ref, const char *key, dit_dtype_t dtype, int rank,
                                    const int64_t *full_dims, int dim, int64_t start, int64_t count) {
  dit_vid_t v = dit_graph_weight_slice(g, key, dtype, rank, full_dims, dim, start, count);
  if (v < 0) return -1;
  dit_value_t *val = &g->values[v];
  char *r = strdup(ref), *n = strdup(ref);
  if (!r || !n) {
    free(r);
    free(n);
    set_error(g, DIT_ERR(RESOURCE_EXHAUSTED, "graph: out of memory"));
    return -1;
  }
  val->src = val->ref; /* the checkpoint key */
  val->ref = r;
  free(val->name);
  val->name = n;
  return v;
}

dit_vid_t dit_graph_constant(dit_graph_t *g, const char *key, dit_dtype_t dtype, int rank, const int64_t *dims,
                             const void *data) {
  dit_vid_t v = new_value(g, key, key, DIT_VALUE_WEIGHT, dtype, rank, dims);
  if (v < 0) return -1;
  const size_t n = (size_t)dit_value_nbytes(&g->values[v]);
  if (!(g->values[v].data = malloc(n ? n : 1))) {
    set_error(g, DIT_ERR(RESOURCE_EXHAUSTED, "graph: out of memory for constant '%s'", key));
    return -1;
  }
  memcpy(g->values[v].data, data, n);
  return v;
}

dit_vid_t dit_graph_weight_slice(dit_graph_t *g, const char *key, dit_dtype_t dtype, int rank,
                                 const int64_t *full_dims, int dim, int64_t start, int64_t count) {
  if (dim < 0 || dim >= rank || start < 0 || count < 1 || start + count > full_dims[dim]) {
    set_error(g, DIT_ERR(INVALID_ARGUMENT, "weight '%s': slice [%lld, %lld) of dim %d outside the tensor", key,
                         (long long)start, (long long)(start + count), dim));
    return -1;
  }
  int64_t dims[DIT_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = full_dims[i];
  dims[dim] = count;
  dit_vid_t v = new_value(g, key, key, DIT_VALUE_WEIGHT, dtype, rank, dims);
  if (v >= 0 && count != full_dims[dim]) {
    g->values[v].slice_dim = dim;
    g->values[v].slice_start = start;
  }
  return v;
}

void dit_graph_set_block(dit_graph_t *g, int32_t block) { g->block = block; }

static dit_status_t append_op(dit_graph_t *g, dit_op_kind_t kind, const dit_vid_t *ins, int n_in,
                              const dit_attrs_t *attrs, int n_out, const dit_dtype_t *dtypes,
                              const char *name, dit_vid_t *out_ids) {
  const dit_op_info_t *info = dit_op_info(kind);
  if (!info) return DIT_ERR(INVALID_ARGUMENT, "op '%s': unknown kind %d", name, (int)kind);
  if (n_in < info->min_inputs || n_in > info->max_inputs || n_in > DIT_OP_MAX_IN)
    return DIT_ERR(INVALID_ARGUMENT, "op %s '%s': %d inputs, expected %d..%d", info->name, name,
                   n_in, info->min_inputs, info->max_inputs);
  if (n_out < info->min_outputs || n_out > info->max_outputs)
    return DIT_ERR(INVALID_ARGUMENT, "op %s '%s': %d outputs, expected %d..%d", info->name,
                   name, n_out, info->min_outputs, info->max_outputs);
  for (int i = 0; i < n_in; i++)
    if (ins[i] < 0 || ins[i] >= g->n_values)
      return DIT_ERR(INVALID_ARGUMENT, "op %s '%s': input %d is not a value (%d)", info->name,
                     name, i, ins[i]);
  dit_attrs_t empty = {0};
  if (!attrs) attrs = &empty;
  int out_rank[DIT_OP_MAX_OUT];
  int64_t out_dims[DIT_OP_MAX_OUT][DIT_MAX_RANK];
  DIT_RETURN_IF_ERROR(dit_infer_shapes(g, kind, ins, n_in, attrs, n_out, out_rank, out_dims),
                      "building '%s'", name);
  DIT_RETURN_IF_ERROR(dit_check_out_dtypes(g, kind, ins, n_out, dtypes), "building '%s'", name);
  if (g->n_ops == g->cap_ops) {
    int32_t cap = g->cap_ops ? g->cap_ops * 2 : 64;
    dit_op_t *no = realloc(g->ops, (size_t)cap * sizeof *no);
    if (!no) return DIT_ERR(RESOURCE_EXHAUSTED, "graph: out of memory");
    g->ops = no;
    g->cap_ops = cap;
  }
  dit_op_t op;
  memset(&op, 0, sizeof op);
  op.kind = kind;
  op.n_in = n_in;
  op.n_out = n_out;
  op.attrs = *attrs;
  op.block = g->block;
  for (int i = 0; i < n_in; i++) op.in[i] = ins[i];
  for (int o = 0; o < n_out; o++) {
    char oname[256];
    if (o == 0) snprintf(oname, sizeof oname, "%s", name);
    else snprintf(oname, sizeof oname, "%s.%d", name, o);
    dit_vid_t v = new_value(g, oname, NULL, DIT_VALUE_TEMP, dtypes[o], out_rank[o], out_dims[o]);
    if (v < 0) return DIT_ERR(RESOURCE_EXHAUSTED, "graph: out of memory");
    g->values[v].producer = g->n_ops;
    op.out[o] = v;
    out_ids[o] = v;
  }
  g->ops[g->n_ops++] = op;
  return DIT_OK;
}

dit_vid_t dit_graph_op(dit_graph_t *g, dit_op_kind_t kind, const dit_vid_t *ins, int n_in,
                       const dit_attrs_t *attrs, dit_dtype_t out_dtype, const char *name) {
  dit_vid_t out = -1;
  dit_status_t s = append_op(g, kind, ins, n_in, attrs, 1, &out_dtype, name, &out);
  if (s) {
    set_error(g, s);
    return -1;
  }
  return out;
}

dit_status_t dit_graph_op2(dit_graph_t *g, dit_op_kind_t kind, const dit_vid_t *ins, int n_in,
                           const dit_attrs_t *attrs, const dit_dtype_t out_dtypes[2],
                           const char *name, dit_vid_t out_ids[2]) {
  dit_status_t s = append_op(g, kind, ins, n_in, attrs, 2, out_dtypes, name, out_ids);
  return s;
}

void dit_graph_mark_output(dit_graph_t *g, dit_vid_t v, const char *name) {
  if (v < 0 || v >= g->n_values) {
    set_error(g, DIT_ERR(INVALID_ARGUMENT, "output '%s': not a value (%d)", name, v));
    return;
  }
  free(g->values[v].ref);
  g->values[v].ref = strdup(name);
  g->values[v].is_output = 1;
}

void dit_graph_mark_output_updating(dit_graph_t *g, dit_vid_t v, const char *name, dit_vid_t input) {
  dit_graph_mark_output(g, v, name);
  if (v < 0 || v >= g->n_values) return;
  const dit_value_t *in = input >= 0 && input < g->n_values ? &g->values[input] : NULL;
  if (!in || in->kind != DIT_VALUE_INPUT || in->dtype != g->values[v].dtype || dit_value_nbytes(in) != dit_value_nbytes(&g->values[v])) {
    set_error(g, DIT_ERR(INVALID_ARGUMENT, "output '%s': updates value %d in place, which is not an input of its dtype and size", name, input));
    return;
  }
  g->values[v].updates = input;
}

dit_status_t dit_graph_check_updates(const dit_graph_t *g) {
  for (dit_vid_t v = 0; v < g->n_values; v++) {
    const dit_value_t *o = &g->values[v];
    if (o->updates < 0) continue;
    for (int32_t i = o->producer + 1; i < g->n_ops; i++)
      for (int k = 0; k < g->ops[i].n_in; k++)
        if (g->ops[i].in[k] == o->updates)
          return DIT_ERR(INTERNAL, "output '%s' replaces input '%s' in place, yet op %d ('%s') reads the input after the output's producer", o->ref,
                         g->values[o->updates].ref, i, g->values[g->ops[i].out[0]].name ? g->values[g->ops[i].out[0]].name : "");
  }
  return DIT_OK;
}

int32_t dit_graph_num_values(const dit_graph_t *g) { return g->n_values; }
int32_t dit_graph_num_ops(const dit_graph_t *g) { return g->n_ops; }
dit_value_t *dit_graph_value(dit_graph_t *g, dit_vid_t v) {
  return v >= 0 && v < g->n_values ? &g->values[v] : NULL;
}
const dit_value_t *dit_graph_cvalue(const dit_graph_t *g, dit_vid_t v) {
  return v >= 0 && v < g->n_values ? &g->values[v] : NULL;
}
dit_op_t *dit_graph_op_at(dit_graph_t *g, int32_t i) {
  return i >= 0 && i < g->n_ops ? &g->ops[i] : NULL;
}
const dit_op_t *dit_graph_cop_at(const dit_graph_t *g, int32_t i) {
  return i >= 0 && i < g->n_ops ? &g->ops[i] : NULL;
}

int64_t dit_value_numel(const dit_value_t *v) {
  int64_t n = 1;
  for (int i = 0; i < v->rank; i++) n *= v->dims[i];
  return n;
}

uint64_t dit_value_nbytes(const dit_value_t *v) {
  return (uint64_t)dit_value_numel(v) * dit_dtype_size(v->dtype);
}

dit_status_t dit_graph_compact(dit_graph_t *g, const uint8_t *keep_ops) {
  uint8_t *used = calloc((size_t)g->n_values + 1, 1);
  dit_vid_t *remap = malloc(((size_t)g->n_values + 1) * sizeof *remap);
  if (!used || !remap) {
    free(used);
    free(remap);
    return DIT_ERR(RESOURCE_EXHAUSTED, "graph: out of memory");
  }
  for (int32_t v = 0; v < g->n_values; v++)
    used[v] = g->values[v].kind == DIT_VALUE_INPUT || g->values[v].is_output;
  for (int32_t i = 0; i < g->n_ops; i++) {
    if (!keep_ops[i]) continue;
    for (int k = 0; k < g->ops[i].n_in; k++) used[g->ops[i].in[k]] = 1;
    for (int k = 0; k < g->ops[i].n_out; k++) used[g->ops[i].out[k]] = 1;
  }
  int32_t nv = 0;
  for (int32_t v = 0; v < g->n_values; v++) {
    if (used[v]) {
      remap[v] = nv;
      g->values[nv++] = g->values[v];
    } else {
      remap[v] = -1;
      free(g->values[v].name);
      free(g->values[v].ref);
      free(g->values[v].src);
      free(g->values[v].data);
    }
  }
  int32_t no = 0;
  for (int32_t i = 0; i < g->n_ops; i++) {
    if (!keep_ops[i]) continue;
    dit_op_t op = g->ops[i];
    for (int k = 0; k < op.n_in; k++) op.in[k] = remap[op.in[k]];
    for (int k = 0; k < op.n_out; k++) {
      op.out[k] = remap[op.out[k]];
      g->values[op.out[k]].producer = no;
    }
    g->ops[no++] = op;
  }
  g->n_values = nv;
  g->n_ops = no;
  free(used);
  free(remap);
  return DIT_OK;
}

dit_status_t dit_graph_reorder(dit_graph_t *g, const int32_t *order) {
  const int32_t n = g->n_ops;
  int32_t *pos = malloc(((size_t)n + 1) * sizeof *pos);
  dit_op_t *ops = malloc(((size_t)n + 1) * sizeof *ops);
  if (!pos || !ops) {
    free(pos);
    free(ops);
    return DIT_ERR(RESOURCE_EXHAUSTED, "graph: out of memory");
  }
  for (int32_t i = 0; i < n; i++) pos[i] = -1;
  dit_status_t s = DIT_OK;
  for (int32_t k = 0; k < n && !s; k++) {
    if (order[k] < 0 || order[k] >= n || pos[order[k]] >= 0) s = DIT_ERR(INVALID_ARGUMENT, "graph reorder: entry %d (%d) is not a permutation", k, order[k]);
    else pos[order[k]] = k;
  }
  for (int32_t k = 0; k < n && !s; k++) {
    const dit_op_t *op = &g->ops[order[k]];
    for (int i = 0; i < op->n_in && !s; i++) {
      const int32_t p = g->values[op->in[i]].producer;
      if (p >= 0 && pos[p] >= k)
        s = DIT_ERR(INVALID_ARGUMENT, "graph reorder: op '%s' would run before the producer of its input '%s'",
                    g->values[op->out[0]].name, g->values[op->in[i]].name);
    }
  }
  if (!s) {
    for (int32_t k = 0; k < n; k++) {
      ops[k] = g->ops[order[k]];
      for (int i = 0; i < ops[k].n_out; i++) g->values[ops[k].out[i]].producer = k;
    }
    memcpy(g->ops, ops, (size_t)n * sizeof *ops);
  }
  free(pos);
  free(ops);
  return s;
}

dit_status_t dit_graph_verify(const dit_graph_t *g) {
  if (g->error) return dit_status_make(dit_status_code(g->error), "%s", dit_status_message(g->error));
  int has_output = 0;
  uint8_t *defined = calloc((size_t)g->n_values + 1, 1);
  if (!defined) return DIT_ERR(RESOURCE_EXHAUSTED, "verify: out of memory");
  dit_status_t s = DIT_OK;
  for (int32_t v = 0; v < g->n_values && !s; v++) {
    const dit_value_t *val = &g->values[v];
    has_output |= val->is_output;
    if (val->kind != DIT_VALUE_TEMP) {
      defined[v] = 1;
      if (val->producer != -1)
        s = DIT_ERR(INTERNAL, "value %%%d '%s': input or weight with a producer", v, val->name);
      if (!val->ref) s = DIT_ERR(INTERNAL, "value %%%d '%s': input or weight without a key", v, val->name);
    }
    if (val->is_output && !val->ref)
      s = DIT_ERR(INTERNAL, "value %%%d '%s': output without a name", v, val->name);
  }
  for (int32_t i = 0; i < g->n_ops && !s; i++) {
    const dit_op_t *op = &g->ops[i];
    const dit_op_info_t *info = dit_op_info(op->kind);
    if (!info) {
      s = DIT_ERR(INTERNAL, "op #%d: unknown kind %d", i, (int)op->kind);
      break;
    }
    if (op->n_in < info->min_inputs || op->n_in > info->max_inputs || op->n_out < info->min_outputs ||
        op->n_out > info->max_outputs) {
      s = DIT_ERR(INTERNAL, "op #%d %s: arity %d->%d outside the catalog's", i, info->name,
                  op->n_in, op->n_out);
      break;
    }
    for (int k = 0; k < op->n_in && !s; k++) {
      dit_vid_t v = op->in[k];
      if (v < 0 || v >= g->n_values) s = DIT_ERR(INTERNAL, "op #%d %s: input %d out of range", i, info->name, k);
      else if (!defined[v])
        s = DIT_ERR(INTERNAL, "op #%d %s: input %%%d '%s' used before it is defined", i,
                    info->name, v, g->values[v].name);
    }
    int rank[DIT_OP_MAX_OUT];
    int64_t dims[DIT_OP_MAX_OUT][DIT_MAX_RANK];
    if (!s) s = dit_infer_shapes(g, op->kind, op->in, op->n_in, &op->attrs, op->n_out, rank, dims);
    for (int k = 0; k < op->n_out && !s; k++) {
      dit_vid_t v = op->out[k];
      if (v < 0 || v >= g->n_values) {
        s = DIT_ERR(INTERNAL, "op #%d %s: output %d out of range", i, info->name, k);
        break;
      }
      const dit_value_t *val = &g->values[v];
      if (defined[v] || val->kind != DIT_VALUE_TEMP || val->producer != i) {
        s = DIT_ERR(INTERNAL, "op #%d %s: output %%%d '%s' defined more than once", i,
                    info->name, v, val->name);
        break;
      }
      defined[v] = 1;
      int same = val->rank == rank[k];
      for (int d = 0; same && d < rank[k]; d++) same = val->dims[d] == dims[k][d];
      if (!same) s = DIT_ERR(INTERNAL, "op #%d %s: output '%s' shape differs from the inferred one", i, info->name, val->name);
    }
    if (!s) {
      dit_dtype_t dts[DIT_OP_MAX_OUT];
      for (int k = 0; k < op->n_out; k++) dts[k] = g->values[op->out[k]].dtype;
      s = dit_check_out_dtypes(g, op->kind, op->in, op->n_out, dts);
    }
    if (s) s = dit_status_annotate(s, "verify");
  }
  for (int32_t v = 0; v < g->n_values && !s; v++)
    if (!defined[v]) s = DIT_ERR(INTERNAL, "verify: value %%%d '%s' is never defined", v, g->values[v].name);
  free(defined);
  if (!s && !has_output) s = DIT_ERR(INVALID_ARGUMENT, "verify: the graph has no outputs");
  return s;
}

static void print_type(const dit_value_t *v, FILE *f) {
  fprintf(f, "%s[", dit_dtype_name(v->dtype));
  for (int i = 0; i < v->rank; i++) fprintf(f, "%s%" PRId64, i ? "," : "", v->dims[i]);
  fputc(']', f);
}

void dit_graph_print(const dit_graph_t *g, FILE *f) {
  fprintf(f, "graph {\n");
  for (int32_t v = 0; v < g->n_values; v++) {
    const dit_value_t *val = &g->values[v];
    if (val->kind == DIT_VALUE_TEMP) continue;
    fprintf(f, "  %%%d = %s \"%s\" : ", v, val->kind == DIT_VALUE_INPUT ? "input" : val->data ? "constant" : "weight",
            val->ref);
    print_type(val, f);
    fputc('\n', f);
  }
  int32_t block = -2;
  for (int32_t i = 0; i < g->n_ops; i++) {
    const dit_op_t *op = &g->ops[i];
    if (op->block != block) {
      block = op->block;
      if (block >= 0) fprintf(f, "  // block %d\n", block);
      else fprintf(f, "  // outside blocks\n");
    }
    fputs("  ", f);
    for (int k = 0; k < op->n_out; k++) fprintf(f, "%s%%%d", k ? ", " : "", op->out[k]);
    fprintf(f, " = %s(", dit_op_info(op->kind)->name);
    for (int k = 0; k < op->n_in; k++) fprintf(f, "%s%%%d", k ? ", " : "", op->in[k]);
    fputc(')', f);
    if (op->attrs.count) {
      fputs(" {", f);
      for (int a = 0; a < op->attrs.count; a++) {
        const dit_attr_t *at = &op->attrs.items[a];
        if (at->is_float) fprintf(f, "%s%s=%.9g", a ? ", " : "", at->key, at->f);
        else fprintf(f, "%s%s=%" PRId64, a ? ", " : "", at->key, at->i);
      }
      fputc('}', f);
    }
    fputs(" : ", f);
    for (int k = 0; k < op->n_out; k++) {
      if (k) fputs(", ", f);
      print_type(&g->values[op->out[k]], f);
    }
    const dit_value_t *o = &g->values[op->out[0]];
    fprintf(f, "  // %s", o->name);
    if (o->offset >= 0) fprintf(f, " @%" PRId64, o->offset);
    fputc('\n', f);
  }
  for (int32_t v = 0; v < g->n_values; v++)
    if (g->values[v].is_output) fprintf(f, "  output \"%s\" = %%%d\n", g->values[v].ref, v);
  fprintf(f, "}\n");
}
