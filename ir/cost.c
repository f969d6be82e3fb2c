/* FLOP and byte counts per op: matrix products and attention exactly (2 per multiply-add),
 * elementwise and row ops by a small per-element constant; bytes are each operand read once
 * and each result written once. */
#include "ir/graph.h"

static double elem_flops(dit_op_kind_t k) {
  switch (k) {
    case DIT_OP_SILU: return 4;      /* exp, add, div, mul */
    case DIT_OP_GELU_TANH: return 8;
    case DIT_OP_GELU: return 8;
    case DIT_OP_QUICK_GELU: return 5; /* mul, exp, add, div, mul */
    case DIT_OP_LAYERNORM: return 7;
    case DIT_OP_GROUPNORM: return 8; /* two passes over x: sums, then the normalization */
    case DIT_OP_ADALN: return 9;
    case DIT_OP_RMSNORM: return 4;
    case DIT_OP_ROPE: return 3;
    case DIT_OP_GATED_ADD: return 2;
    case DIT_OP_ADD:
    case DIT_OP_MUL:
    case DIT_OP_MOD_TABLE: return 1;
    case DIT_OP_TIMESTEP_EMBED: return 4;
    case DIT_OP_RMSNORM_SLICE: return 3;
    case DIT_OP_ALLREDUCE: return 1;
    case DIT_OP_ATTN_MERGE: return 4;
    case DIT_OP_CAST: return 0; /* a conversion moves bytes; no arithmetic */
    case DIT_OP_RESHAPE:
    case DIT_OP_EMBEDDING:
    case DIT_OP_CONCAT: return 0; /* copies */
    case DIT_OP_ROPE_TABLE: return 3; /* two products and a sum per element */
    case DIT_OP_UPSAMPLE: return 0; /* copies */
    case DIT_OP_CLAMP: return 2;
    default: return 0;
  }
}

/* The share of the key tiles a tile schedule t (a constant) lists for L keys: 1 when unknown. */
static double schedule_share(const dit_value_t *t, int64_t L) {
  if (!t->data || t->rank != 2) return 1.0;
  const int32_t *rows = t->data;
  const double nk = (double)((L + DIT_SPARSE_TILE - 1) / DIT_SPARSE_TILE);
  double listed = 0;
  for (int64_t i = 0; i < t->dims[0]; i++) listed += rows[i * t->dims[1]];
  return t->dims[0] > 0 && nk > 0 ? listed / ((double)t->dims[0] * nk) : 1.0;
}

dit_cost_t dit_op_cost(const dit_graph_t *g, const dit_op_t *op) {
  dit_cost_t c = {0, 0};
  dit_op_kind_t res_kind;
  const int res_at = dit_norm_residual(op->kind, &op->attrs, op->n_in, &res_kind);
  if (res_at > 0 && op->n_out == 2) {
    /* A folded residual add: the residual's cost and the norm's, less the norm's read of the
     * sum (it normalizes what it has just formed). */
    dit_op_t res = *op, norm = *op;
    res.kind = res_kind;
    res.n_in = 1 + op->n_in - res_at;
    for (int i = res_at; i < op->n_in; i++) res.in[1 + i - res_at] = op->in[i];
    res.out[0] = op->out[1];
    res.n_out = norm.n_out = 1;
    norm.n_in = res_at;
    norm.in[0] = op->out[1];
    const dit_cost_t a = dit_op_cost(g, &res), b = dit_op_cost(g, &norm);
    c.flops = a.flops + b.flops;
    c.bytes = a.bytes + b.bytes - (double)dit_value_nbytes(dit_graph_cvalue(g, op->out[1]));
    return c;
  }
  for (int i = 0; i < op->n_in; i++) c.bytes += (double)dit_value_nbytes(dit_graph_cvalue(g, op->in[i]));
  for (int i = 0; i < op->n_out; i++) c.bytes += (double)dit_value_nbytes(dit_graph_cvalue(g, op->out[i]));
  const dit_value_t *x = dit_graph_cvalue(g, op->in[0]);
  const dit_value_t *y = dit_graph_cvalue(g, op->out[0]);
  switch (op->kind) {
    case DIT_OP_LINEAR:
    case DIT_OP_LINEAR_FP8: {
      const dit_value_t *w = dit_graph_cvalue(g, op->in[op->kind == DIT_OP_LINEAR_FP8 ? 2 : 1]);
      double m = (double)dit_value_numel(x) / (double)x->dims[x->rank - 1];
      double k = (double)x->dims[x->rank - 1], n = (double)w->dims[0];
      int bias, acc;
      dit_linear_operands(op->kind, &op->attrs, op->n_in, &bias, &acc);
      c.flops = 2 * m * n * k + (bias >= 0 ? m * n : 0) + (acc >= 0 ? m * n : 0);
      if (dit_attrs_find(&op->attrs, "act")) c.flops += elem_flops(DIT_OP_GELU_TANH) * m * n;
      break;
    }
    case DIT_OP_ATTENTION: {
      const dit_value_t *k = dit_graph_cvalue(g, op->in[1]);
      /* QK^T and PV: 2 * (2 * B * S * L * H * Dh) = 4 * B * S * L * C; with a key bound, the
       * most it can be (bounds are known only at run time) */
      c.flops = 4.0 * (double)x->dims[0] * (double)x->dims[1] * (double)k->dims[1] * (double)x->dims[2];
      const dit_attr_t *ta = dit_attrs_find(&op->attrs, "tiles");
      if (ta && ta->i == 1) c.flops *= schedule_share(dit_graph_cvalue(g, op->in[op->n_in - 1]), k->dims[1]);
      const dit_attr_t *ca = dit_attrs_find(&op->attrs, "causal_block");
      if (ca && ca->i >= 1 && x->dims[1] > 0) {
        /* A frame-causal mask: block f of nb sees f + 1 blocks, (nb + 1) / 2 of nb on average. */
        const double nb = (double)((x->dims[1] + ca->i - 1) / ca->i);
        c.flops *= (nb + 1) / (2 * nb);
      }
      break;
    }
    case DIT_OP_ATTENTION_FP8: {
      /* attention's products at q8's shape; keys are k8's. A schedule thins them as attention's. */
      const dit_value_t *k = dit_graph_cvalue(g, op->in[2]);
      c.flops = 4.0 * (double)x->dims[0] * (double)x->dims[1] * (double)k->dims[1] * (double)x->dims[2];
      if (dit_attrs_find(&op->attrs, "tiles")) c.flops *= schedule_share(dit_graph_cvalue(g, op->in[op->n_in - 1]), k->dims[1]);
      break;
    }
    case DIT_OP_ATTN_QUANT:
      /* Bandwidth-bound: a max and a division per element (bytes: x read, codes and scales written),
       * and a token row's bias and activation where it has them. */
      c.flops = (2.0 + (op->n_in > 1) + (dit_attrs_find(&op->attrs, "act") ? elem_flops(DIT_OP_GELU_TANH) : 0.0)) * (double)dit_value_numel(x);
      break;
    case DIT_OP_ATTN_VMAX:
      c.flops = 3.0 * (double)dit_value_numel(x); /* a max, a min and an add per element of v */
      break;
    case DIT_OP_ATTN_QUANT_VT:
      /* A subtraction and a product per element of v, and an op per split statistic (the channels'
       * means and scales). */
      c.flops = 2.0 * (double)dit_value_numel(x) + (double)dit_value_numel(dit_graph_cvalue(g, op->in[1]));
      break;
    case DIT_OP_CONV3D: {
      /* Every output element a dot product over Cin * kt * kh * kw taps (padding counted). */
      const dit_value_t *w = dit_graph_cvalue(g, op->in[1]);
      const double taps = (double)dit_value_numel(w) / (double)w->dims[0];
      c.flops = 2.0 * (double)dit_value_numel(y) * taps + (op->n_in == 3 ? (double)dit_value_numel(y) : 0);
      break;
    }
    case DIT_OP_ROWSUMSQ:
      c.flops = 2.0 * (double)dit_value_numel(x);
      break;
    case DIT_OP_GROUPNORM_STATS:
      c.flops = 3.0 * (double)dit_value_numel(x); /* a difference from the shift, its square and two sums */
      break;
    case DIT_OP_GROUPNORM_APPLY:
      /* (x - mean) * rstd * w + b per element; the merge, 4 per slice statistic. */
      c.flops = 4.0 * (double)dit_value_numel(y) + 4.0 * (double)dit_value_numel(dit_graph_cvalue(g, op->in[1]));
      break;
    case DIT_OP_KEY_BOUND:
      c.flops = (double)dit_value_numel(x); /* a test per mask entry, at most */
      break;
    case DIT_OP_TOKEN_SELECT:
      /* A comparison per id; of x only the picked rows are read. */
      c.flops = (double)dit_value_numel(dit_graph_cvalue(g, op->in[1]));
      c.bytes -= (double)dit_value_nbytes(x) - (double)dit_value_nbytes(y);
      break;
    case DIT_OP_TOKEN_ROWS: /* of x only the rows' first tokens are read */
      c.bytes -= (double)dit_value_nbytes(x) - (double)dit_value_nbytes(y);
      break;
    case DIT_OP_ADALN:
    case DIT_OP_GATED_ADD: {
      c.flops = elem_flops(op->kind) * (double)dit_value_numel(y);
      /* The unstored per-token form: each token reads only its used rows of e (scale and shift,
       * or the gate; one row when e has one), plus one add per used element. */
      const int tok = op->kind == DIT_OP_ADALN ? 3 : 4;
      if (op->n_in == tok) {
        const dit_value_t *e = dit_graph_cvalue(g, op->in[tok - 1]);
        const double used = op->kind == DIT_OP_ADALN ? 2 : 1, rows_e = (double)e->dims[2] / (double)x->dims[2];
        const double read = (rows_e < used ? rows_e : used) / rows_e;
        c.bytes -= (1.0 - read) * (double)dit_value_nbytes(e);
        c.flops += used * (double)dit_value_numel(y);
      }
      break;
    }
    case DIT_OP_ROPE:
    case DIT_OP_ROPE_TABLE:
      /* With the Q/K RMSNorm folded in (its weight the extra input) the norm's arithmetic comes
       * along; the bytes stay one read of x and one write of y (plus the weight, the table). */
      c.flops = elem_flops(op->kind) * (double)dit_value_numel(y);
      if (op->n_in == (op->kind == DIT_OP_ROPE ? 2 : 3)) c.flops += elem_flops(DIT_OP_RMSNORM) * (double)dit_value_numel(y);
      break;
    default:
      c.flops = elem_flops(op->kind) * (double)dit_value_numel(y);
      break;
  }
  return c;
}

dit_cost_t dit_graph_cost(const dit_graph_t *g, dit_cost_t *per_block, int n_blocks) {
  dit_cost_t total = {0, 0};
  for (int b = 0; per_block && b < n_blocks; b++) per_block[b] = total;
  for (int32_t i = 0; i < dit_graph_num_ops(g); i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    dit_cost_t c = dit_op_cost(g, op);
    total.flops += c.flops;
    total.bytes += c.bytes;
    if (per_block && op->block >= 0 && op->block < n_blocks) {
      per_block[op->block].flops += c.flops;
      per_block[op->block].bytes += c.bytes;
    }
  }
  return total;
}
