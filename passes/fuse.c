/* Fusion: an activation folded into the GEMM that feeds it, so the product is activated in
 * fp32 and stored once (a matrix library epilogue on GPUs) instead of written, read back and
 * written again; the Q/K RMSNorm folded into the rotary embedding that follows it, so Q and
 * K are read once and written once (base/ops.def: rope, rope_table); a linear over a concat of
 * features split into two products, the second accumulating onto the first (base/ops.def:
 * linear's acc), so the concat is never written; a residual add folded into the linear that makes
 * its other operand (acc again), so the product is never written; and a residual add folded into
 * the norm that reads its sum, so the sum is written once and never read back for the norm
 * (base/ops.def: layernorm's res_at); and the row quantizer of fp8 linears folded into the norm
 * that makes their rows, so the rows are written once, as e4m3 codes, and never read back
 * (base/ops.def: layernorm's quant); and an fp8 linear's GELU and bias moved into the quantizer of
 * its output rows, so its matmul runs without an epilogue (attn_quant's act). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Whether an adaln or gated_add reads its modulation per token (table and e unstored, or a
 * stored [B, R, n, D]): then its attrs token_group and token_offset pick the rows. */
static int reads_token_rows(const dit_graph_t *g, const dit_op_t *op) {
  const int mod = op->kind == DIT_OP_ADALN ? 1 : op->kind == DIT_OP_GATED_ADD ? 2 : -1;
  if (mod < 0 || op->n_in <= mod) return 0;
  return op->n_in == mod + 2 || dit_graph_cvalue(g, op->in[mod])->rank == 4;
}

static int reads_no_weight(const dit_graph_t *g, const dit_op_t *op) {
  for (int k = 0; k < op->n_in; k++)
    if (dit_graph_cvalue(g, op->in[k])->kind == DIT_VALUE_WEIGHT) return 0;
  return 1;
}

/* Folds the add or gated_add producing norm op i's x into the norm (base/ops.def: res_at) when
 * the norm is the sum's first reader and the sum is stored as the residual's x is; the norm then
 * writes the sum as its second output. first[v] is the first op reading v. The two are in one
 * block, or the residual ends block b >= 1 and the norm begins block b + 1 and the residual reads
 * no weight: block b's weights are not needed in block b + 1 (offload may have evicted them),
 * and block 0's last residual, the step cache's probe site, stays a step of block 0. Returns the
 * residual's op index, or -1. */
static int32_t fold_residual_into_norm(dit_graph_t *g, int32_t i, const int32_t *first) {
  dit_op_t *norm = dit_graph_op_at(g, i);
  if ((norm->kind != DIT_OP_LAYERNORM && norm->kind != DIT_OP_ADALN) || norm->n_out != 1 || dit_attrs_find(&norm->attrs, "res_at"))
    return -1;
  const dit_vid_t sum = norm->in[0];
  const dit_value_t *s = dit_graph_cvalue(g, sum);
  if (s->kind != DIT_VALUE_TEMP || s->producer < 0 || first[sum] != i) return -1;
  const int32_t ri = s->producer;
  const dit_op_t *res = dit_graph_cop_at(g, ri);
  if ((res->kind != DIT_OP_ADD && res->kind != DIT_OP_GATED_ADD) || res->n_out != 1) return -1;
  if (res->block != norm->block && !(res->block >= 1 && norm->block == res->block + 1 && reads_no_weight(g, res))) return -1;
  if (dit_graph_cvalue(g, res->in[0])->dtype != s->dtype || norm->n_in + res->n_in - 1 > DIT_OP_MAX_IN) return -1;
  /* The residual's attributes join the norm's: gate, and its token grouping, which a norm that
   * reads its modulation per token already has and must share when the residual does too. */
  dit_attrs_t attrs = norm->attrs;
  static const char *const keys[] = {"gate", "token_group", "token_offset"};
  const int norm_tok = reads_token_rows(g, norm), res_tok = reads_token_rows(g, res);
  for (int k = 0; k < 3; k++) {
    const dit_attr_t *a = dit_attrs_find(&res->attrs, keys[k]);
    if (k > 0 && norm_tok) {
      const dit_attr_t *b = dit_attrs_find(&norm->attrs, keys[k]);
      const int64_t def = k == 1 ? 1 : 0, va = a ? a->i : def, vb = b ? b->i : def;
      if (res_tok && va != vb) return -1;
      continue;
    }
    if (a && dit_attrs_set_int(&attrs, keys[k], a->i)) return -1;
  }
  if (dit_attrs_set_int(&attrs, "res_at", norm->n_in)) return -1;
  norm->attrs = attrs;
  for (int k = 1; k < res->n_in; k++) norm->in[norm->n_in++] = res->in[k];
  norm->in[0] = res->in[0];
  norm->out[norm->n_out++] = sum;
  return ri;
}

/* Folds attn_quant op i with heads 1 and rows 1 (the row quantizer of fp8 linears) into the
 * layernorm or adaln making its x when x is that norm's first output, a temporary nothing else
 * reads, stored in the norm's x dtype (the fused norm rounds its rows to that dtype before
 * quantizing them, as storing them did). The norm then writes the codes as its first output and
 * the row scales as its last (base/ops.def). Returns the norm's op index, or -1. */
static int32_t fold_quant_into_norm(dit_graph_t *g, int32_t i, const int32_t *uses) {
  const dit_op_t *aq = dit_graph_cop_at(g, i);
  if (!dit_attn_quant_rows(aq->kind, &aq->attrs) || aq->n_in != 1 || aq->n_out != 2 || dit_attrs_find(&aq->attrs, "act") ||
      dit_graph_cvalue(g, aq->out[0])->dtype != DIT_F8E4M3)
    return -1;
  const dit_vid_t yv = aq->in[0];
  const dit_value_t *y = dit_graph_cvalue(g, yv);
  if (y->kind != DIT_VALUE_TEMP || y->is_output || uses[yv] != 1 || y->producer < 0 || y->rank != 3) return -1;
  const int32_t n = y->producer;
  dit_op_t *norm = dit_graph_op_at(g, n);
  if ((norm->kind != DIT_OP_LAYERNORM && norm->kind != DIT_OP_ADALN) || norm->out[0] != yv || dit_attrs_find(&norm->attrs, "quant") ||
      norm->n_out >= DIT_OP_MAX_OUT || dit_graph_cvalue(g, norm->in[0])->dtype != y->dtype)
    return -1;
  if (dit_attrs_set_int(&norm->attrs, "quant", 1)) return -1;
  const dit_vid_t codes = aq->out[0], scales = aq->out[1];
  norm->out[0] = codes;
  norm->out[norm->n_out++] = scales;
  dit_graph_value(g, codes)->producer = n;
  dit_graph_value(g, scales)->producer = n;
  dit_graph_value(g, yv)->producer = -1;
  return n;
}

/* Splits linear op i over a concat of its x along the features (the single-stream blocks' attention
 * and MLP outputs side by side) into two products over the weight's two column blocks, the second
 * accumulating onto the first (attr acc: a GEMM with beta = 1), so the joined features are never
 * written and read back. The concat's op becomes the first product (with the bias), its value the
 * first product's output. The wider part (more features: FLUX.1's MLP, 12288 against the
 * attention's 3072) goes first, so the accumulating product is the short one: on an H200 at
 * batch 4, cuBLASLt's accumulating kernels took 1.91-2.11 ms for FLUX.1-dev's 12288-wide part,
 * where bias-only products of about that size (the double blocks' FFN down projections) took
 * about 1.8 ms (bench/results/bench_flux_kernels_4_8.txt, bench_flux_forward_batch4.txt).
 * Needs a plain 2-D checkpoint weight that nothing else reads and a concat nothing else reads;
 * an activated linear stays (its activation is of the whole sum). Returns 1 when it split. */
static int split_concat_linear(dit_graph_t *g, int32_t i, const int32_t *uses) {
  dit_op_t *lin = dit_graph_op_at(g, i);
  if (lin->kind != DIT_OP_LINEAR || lin->n_in > 3 || dit_attrs_find(&lin->attrs, "act") || dit_attrs_find(&lin->attrs, "acc")) return 0;
  const dit_vid_t xv = lin->in[0], wv = lin->in[1];
  const dit_value_t *x = dit_graph_cvalue(g, xv), *w = dit_graph_cvalue(g, wv);
  if (x->kind != DIT_VALUE_TEMP || x->is_output || uses[xv] != 1 || x->producer < 0) return 0;
  if (w->kind != DIT_VALUE_WEIGHT || w->data || w->slice_dim >= 0 || w->rank != 2 || uses[wv] != 1) return 0;
  const int32_t ci = x->producer;
  const dit_op_t *cat = dit_graph_cop_at(g, ci);
  const dit_attr_t *dim = dit_attrs_find(&cat->attrs, "dim");
  if (cat->kind != DIT_OP_CONCAT || cat->n_out != 1 || !dim || dim->i != x->rank - 1) return 0;
  const dit_vid_t a = cat->in[0], b = cat->in[1];
  const int64_t ka = dit_graph_cvalue(g, a)->dims[x->rank - 1], kb = dit_graph_cvalue(g, b)->dims[x->rank - 1];
  const dit_vid_t lin_out = lin->out[0];
  const dit_value_t *y = dit_graph_cvalue(g, lin_out);
  if (ka < 1 || kb < 1 || w->dims[1] != ka + kb) return 0;
  const char *key = w->src ? w->src : w->ref;
  char r1[256], r2[256];
  if (!key || snprintf(r1, sizeof r1, "%s[:%lld]", w->ref, (long long)ka) >= (int)sizeof r1 ||
      snprintf(r2, sizeof r2, "%s[%lld:]", w->ref, (long long)ka) >= (int)sizeof r2)
    return 0;
  const dit_dtype_t wdt = w->dtype, ydt = y->dtype;
  int64_t wdims[2] = {w->dims[0], w->dims[1]}, ydims[DIT_MAX_RANK];
  const int yrank = y->rank;
  memcpy(ydims, y->dims, sizeof ydims);
  char keybuf[256];
  if (snprintf(keybuf, sizeof keybuf, "%s", key) >= (int)sizeof keybuf) return 0;
  /* New values may move the value array: no value pointers are held past here. */
  const dit_vid_t w1 = dit_graph_weight_slice_as(g, r1, keybuf, wdt, 2, wdims, 1, 0, ka);
  const dit_vid_t w2 = dit_graph_weight_slice_as(g, r2, keybuf, wdt, 2, wdims, 1, ka, kb);
  if (w1 < 0 || w2 < 0) return 0;
  dit_value_t *part = dit_graph_value(g, xv);
  char pname[256];
  snprintf(pname, sizeof pname, "%s.part", dit_graph_cvalue(g, lin_out)->name ? dit_graph_cvalue(g, lin_out)->name : "linear");
  char *nm = strdup(pname);
  if (!nm) return 0;
  free(part->name);
  part->name = nm;
  part->dtype = ydt, part->rank = yrank;
  memcpy(part->dims, ydims, sizeof ydims);
  lin = dit_graph_op_at(g, i);
  dit_op_t *first = dit_graph_op_at(g, ci);
  first->kind = DIT_OP_LINEAR;
  memset(&first->attrs, 0, sizeof first->attrs);
  const int wide_b = kb > ka; /* which part goes first */
  first->in[0] = wide_b ? b : a, first->in[1] = wide_b ? w2 : w1, first->n_in = 2;
  if (lin->n_in == 3) first->in[first->n_in++] = lin->in[2];
  lin->in[0] = wide_b ? a : b, lin->in[1] = wide_b ? w1 : w2, lin->in[2] = xv, lin->n_in = 3;
  dit_attrs_set_int(&lin->attrs, "acc", 1);
  return 1;
}

/* Folds add op i into the linear that makes one of its operands (a residual add after a layer's
 * output projection: x + linear(h)): the linear takes the other operand as its accumulated input
 * (attr acc: a GEMM's C with beta = 1) and makes the sum itself, so its product is never written
 * and read back. Needs the product to be a temp only the add reads, a linear without act or acc,
 * one dtype for the product, the other operand and the sum, and the other operand made before the
 * linear runs. Returns 1 when it folded (op i is then dead). */
static int fold_add_into_linear(dit_graph_t *g, int32_t i, const int32_t *uses) {
  const dit_op_t *add = dit_graph_cop_at(g, i);
  if (add->kind != DIT_OP_ADD || add->n_in != 2 || add->n_out != 1 || add->in[0] == add->in[1]) return 0;
  const dit_value_t *sum = dit_graph_cvalue(g, add->out[0]);
  for (int k = 1; k >= 0; k--) {
    const dit_vid_t pv = add->in[k], cv = add->in[1 - k];
    const dit_value_t *prod = dit_graph_cvalue(g, pv), *c = dit_graph_cvalue(g, cv);
    if (prod->kind != DIT_VALUE_TEMP || prod->is_output || uses[pv] != 1 || prod->producer < 0) continue;
    const int32_t j = prod->producer;
    dit_op_t *lin = dit_graph_op_at(g, j);
    if (lin->kind != DIT_OP_LINEAR || lin->n_in > 3 || lin->n_out != 1 || dit_attrs_find(&lin->attrs, "act") ||
        dit_attrs_find(&lin->attrs, "acc"))
      continue;
    if (prod->dtype != sum->dtype || c->dtype != sum->dtype || (c->producer >= j && c->kind == DIT_VALUE_TEMP)) continue;
    if (dit_attrs_set_int(&lin->attrs, "acc", 1)) continue;
    lin->in[lin->n_in++] = cv;
    /* The linear now makes the sum; the product has no producer left. */
    lin->out[0] = add->out[0];
    dit_graph_value(g, add->out[0])->producer = j;
    dit_graph_value(g, pv)->producer = -1;
    return 1;
  }
  return 0;
}

/* Moves the GELU op whose output row quantizer op i alone reads, and the bias of the fp8 linear
 * making the GELU's input, into that quantizer (base/ops.def: attn_quant's act and bias), so the
 * matmul runs without an epilogue (cuBLASLt's fp8 GELU and bias epilogue cost an H200 more than
 * the quantizer's pass gains in arithmetic: 0.65 against 0.54 ms for Wan2.1-1.3B's FFN at 32760
 * tokens). Needs the linear's output and the activation to be temporaries nothing else reads, in
 * the activation's dtype. Returns the GELU's op index, or -1. */
static int32_t fold_act_into_quant(dit_graph_t *g, int32_t i, const int32_t *uses) {
  dit_op_t *aq = dit_graph_op_at(g, i);
  if (!dit_attn_quant_rows(aq->kind, &aq->attrs) || aq->n_in != 1 || dit_attrs_find(&aq->attrs, "act") ||
      dit_graph_cvalue(g, aq->out[0])->dtype != DIT_F8E4M3)
    return -1;
  const dit_vid_t hv = aq->in[0];
  const dit_value_t *h = dit_graph_cvalue(g, hv);
  if (h->kind != DIT_VALUE_TEMP || h->is_output || uses[hv] != 1 || h->producer < 0) return -1;
  const int32_t a = h->producer;
  const dit_op_t *act = dit_graph_cop_at(g, a);
  if (act->kind != DIT_OP_GELU_TANH) return -1;
  const dit_vid_t yv = act->in[0];
  const dit_value_t *y = dit_graph_cvalue(g, yv);
  if (y->kind != DIT_VALUE_TEMP || y->is_output || uses[yv] != 1 || y->producer < 0 || y->dtype != h->dtype) return -1;
  dit_op_t *lin = dit_graph_op_at(g, y->producer);
  int bi, ai;
  if (lin->kind != DIT_OP_LINEAR_FP8 || dit_attrs_find(&lin->attrs, "act") ||
      dit_linear_operands(lin->kind, &lin->attrs, lin->n_in, &bi, &ai))
    return -1;
  if (dit_attrs_set_int(&aq->attrs, "act", 1)) return -1;
  aq->in[0] = yv;
  if (bi >= 0) {
    aq->in[aq->n_in++] = lin->in[bi];
    lin->n_in--; /* the bias is the linear's last operand */
  }
  dit_graph_value(g, hv)->producer = -1;
  return a;
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
  /* Activations into fp8 rows' quantizers first: the rest go into their linears' epilogues. */
  for (int32_t i = 0; i < no; i++) {
    const int32_t a = fold_act_into_quant(g, i, uses);
    if (a < 0) continue;
    keep[a] = 0;
    fused++;
  }
  for (int32_t i = 0; i < no; i++) {
    dit_op_t *act = dit_graph_op_at(g, i);
    if (act->kind != DIT_OP_GELU_TANH || !keep[i]) continue;
    dit_value_t *mid = dit_graph_value(g, act->in[0]);
    if (mid->kind != DIT_VALUE_TEMP || mid->is_output || uses[act->in[0]] != 1) continue;
    dit_op_t *lin = dit_graph_op_at(g, mid->producer);
    if ((lin->kind != DIT_OP_LINEAR && lin->kind != DIT_OP_LINEAR_FP8) || dit_attrs_find(&lin->attrs, "act") ||
        dit_attrs_find(&lin->attrs, "acc"))
      continue;
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
  for (int32_t i = 0; i < no; i++)
    if (keep[i]) fused += split_concat_linear(g, i, uses);
  for (int32_t i = 0; i < no; i++)
    if (keep[i] && fold_add_into_linear(g, i, uses)) keep[i] = 0, fused++;
  nv = dit_graph_num_values(g); /* the splits made weight slices */
  /* Residual adds into the norms that read their sums first (after the folds above, which
   * change no norm's x). */
  int32_t *first = malloc(((size_t)nv + 1) * sizeof *first);
  if (!first) {
    free(uses);
    free(keep);
    return DIT_ERR(RESOURCE_EXHAUSTED, "fuse: out of memory");
  }
  for (int32_t v = 0; v < nv; v++) first[v] = -1;
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    if (!keep[i]) continue;
    for (int k = 0; k < op->n_in; k++)
      if (first[op->in[k]] < 0) first[op->in[k]] = i;
  }
  for (int32_t i = 0; i < no; i++) {
    if (!keep[i]) continue;
    const int32_t n = fold_residual_into_norm(g, i, first);
    if (n < 0) continue;
    /* The norm now makes the sum; the residual op goes. */
    dit_graph_value(g, dit_graph_cop_at(g, i)->out[1])->producer = i;
    keep[n] = 0;
    fused++;
  }
  free(first);
  /* Row quantizers into the norms making their rows (after the residual folds: a norm that took
   * its residual still makes the same rows). */
  for (int32_t i = 0; i < no; i++) {
    if (!keep[i] || fold_quant_into_norm(g, i, uses) < 0) continue;
    keep[i] = 0;
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
