/* --quant fp8: the large linears of the transformer blocks become linear_fp8 ops over e4m3
 * weights with per-output-channel scales. The scales are graph constants computed here from the
 * checkpoint; the weights writer quantizes the weight itself by the same rule
 * (dit_e4m3_quantize_row), so the two agree bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "compiler/att90_tiles.h"
#include "compiler/compile_internal.h"

const char *dit_quant_name(dit_quant_t q) {
  return q == DIT_QUANT_FP8 ? "fp8" : q == DIT_QUANT_INT8 ? "int8" : q == DIT_QUANT_INT8FP8 ? "int8fp8" : "none";
}

int dit_quant_parse(const char *name, dit_quant_t *out) {
  if (!strcmp(name, "none")) *out = DIT_QUANT_NONE;
  else if (!strcmp(name, "fp8")) *out = DIT_QUANT_FP8;
  else if (!strcmp(name, "int8")) *out = DIT_QUANT_INT8;
  else if (!strcmp(name, "int8fp8")) *out = DIT_QUANT_INT8FP8;
  else return -1;
  return 0;
}

/* Products over at most FP8_SMALL_ROWS token rows with more than FP8_SMALL_MAX_K inputs stay
 * bf16: cuBLASLt has no fp8 kernel with a scale per row and per column for them on Hopper (its
 * heuristic answers CUBLAS_STATUS_NOT_SUPPORTED; seen for HunyuanVideo's text-stream FFN, 256
 * rows by K 12288, while K 3072 at 256 rows and K 12288 at 512 rows run). Such products are a
 * negligible part of a forward. */
#define FP8_SMALL_ROWS 256
#define FP8_SMALL_MAX_K 4096
#define QSTR_(x) #x
#define QSTR(x) QSTR_(x)

/* A large linear of the blocks: inside a block, over token rows ([B, T, K]: modulation linears
 * inside blocks take one row per batch item), with a whole 2-D checkpoint weight that no other
 * op reads, K and N multiples of 16 (what fp8 matmuls take), not a small product with a long K
 * (above); the same ops on every target. Everything outside the blocks (embedders, patch embed,
 * the head) and every norm and modulation stays as it is. Token rows [B, T, K]: their quantizer is
 * attn_quant with heads 1 and rows 1. */
static int quantizable(const dit_graph_t *g, const dit_op_t *op, const int32_t *uses) {
  if (op->kind != DIT_OP_LINEAR || op->block < 0 || dit_attrs_find(&op->attrs, "acc")) return 0;
  const dit_value_t *x = dit_graph_cvalue(g, op->in[0]), *w = dit_graph_cvalue(g, op->in[1]);
  if (!(x->rank == 3 && w->kind == DIT_VALUE_WEIGHT && !w->data && w->rank == 2 && w->slice_dim < 0 && uses[op->in[1]] == 1 &&
        w->dims[0] % 16 == 0 && w->dims[1] % 16 == 0))
    return 0;
  const int64_t k = w->dims[1], rows = dit_value_numel(x) / k;
  return !(rows <= FP8_SMALL_ROWS && k > FP8_SMALL_MAX_K);
}

dit_status_t dit_compile_quantize(const dit_model_t *m, dit_graph_t *g, dit_quant_t quant, cJSON *summary, dit_compile_progress_t *pr) {
  if (quant == DIT_QUANT_NONE) return DIT_OK;
  const int32_t nv = dit_graph_num_values(g), no = dit_graph_num_ops(g);
  int32_t *uses = calloc((size_t)nv + 1, sizeof *uses);
  /* Per value read by a quantized linear: its quantizer's codes and scales. Per op: the first of
   * the quantizers of its outputs (after[no]: of graph inputs), chained through next_q by their
   * index past no; the final order. */
  dit_vid_t(*rows_q)[2] = malloc(((size_t)nv + 1) * sizeof *rows_q);
  int32_t *after = malloc(((size_t)no + 2) * sizeof *after), *next_q = malloc(((size_t)no + 1) * sizeof *next_q);
  int32_t *order = malloc(((size_t)2 * no + 1) * sizeof *order);
  if (!uses || !rows_q || !after || !next_q || !order) {
    free(uses), free(rows_q), free(after), free(next_q), free(order);
    return DIT_ERR(RESOURCE_EXHAUSTED, "quantize: out of memory");
  }
  for (int32_t v = 0; v < nv; v++) rows_q[v][0] = rows_q[v][1] = -1;
  for (int32_t i = 0; i <= no; i++) after[i] = -1;
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    for (int k = 0; k < op->n_in; k++) uses[op->in[k]]++;
  }
  cJSON *q = summary ? cJSON_AddObjectToObject(summary, "quant") : NULL;
  cJSON *names = NULL;
  if (q) {
    cJSON_AddStringToObject(q, "mode", "fp8");
    cJSON_AddStringToObject(q, "weights", "e4m3, one fp32 scale per output channel: amax / 448");
    cJSON_AddStringToObject(q, "activations", "e4m3, one fp32 scale per token row: amax / 448, on the fly (one quantizer for every "
                                              "linear that reads the rows, folded into the norm that makes them where there is one)");
    cJSON_AddStringToObject(q, "accumulate", "fp32 on the CPU, cuBLASLt fast accumulation on GPUs; scaled by token scale * channel scale, "
                                              "then bias and activation");
    cJSON_AddStringToObject(q, "kept", "norms, modulation, time and text embedders, patch embed, output head, attention, "
                                       "products over at most " QSTR(FP8_SMALL_ROWS) " token rows with more than " QSTR(FP8_SMALL_MAX_K)
                                       " inputs");
    names = cJSON_AddArrayToObject(q, "ops");
  }
  dit_status_t s = DIT_OK;
  float *rowf = NULL;
  uint8_t *rowq = NULL;
  void *raw = NULL;
  size_t cap = 0;
  int n = 0, nq = 0;
  uint64_t bytes = 0;
  for (int32_t i = 0; !s && i < no; i++) {
    dit_op_t *op = dit_graph_op_at(g, i);
    if (!quantizable(g, op, uses)) continue;
    dit_value_t *w = dit_graph_value(g, op->in[1]);
    const char *key = w->src ? w->src : w->ref;
    const dit_st_tensor_t *t = dit_safetensors_find(m->weights, key);
    if (!t) {
      s = DIT_ERR(INTERNAL, "quantize: weight '%s' of op '%s' is not in the checkpoint", key, dit_graph_cvalue(g, op->out[0])->name);
      break;
    }
    const int64_t rows = w->dims[0], cols = w->dims[1];
    /* The checkpoint's bytes, then one row widened to fp32 and its e4m3 codes. */
    const size_t need = (t->nbytes + 3) / 4 * 4 + 5 * (size_t)cols;
    if (need > cap) {
      free(raw);
      cap = need;
      if (!(raw = malloc(cap))) {
        s = DIT_ERR(RESOURCE_EXHAUSTED, "quantize: cannot allocate %zu bytes for '%s'", cap, key);
        break;
      }
    }
    float *scales = malloc(sizeof(float) * (size_t)rows + 1);
    rowf = (float *)((char *)raw + (t->nbytes + 3) / 4 * 4);
    rowq = (uint8_t *)(rowf + cols);
    if (!scales) {
      s = DIT_ERR(RESOURCE_EXHAUSTED, "quantize: out of memory for the scales of '%s'", key);
      break;
    }
    memcpy(raw, t->data, t->nbytes); /* tensors in a safetensors file need not be aligned */
    const size_t esize = dit_dtype_size(t->dtype);
    for (int64_t r = 0; !s && r < rows; r++) {
      if (dit_convert(rowf, DIT_F32, (const char *)raw + (size_t)(r * cols) * esize, t->dtype, (size_t)cols))
        s = DIT_ERR(INVALID_ARGUMENT, "quantize: weight '%s' is %s, expected a float dtype", key, dit_dtype_name(t->dtype));
      else scales[r] = dit_e4m3_quantize_row(rowf, cols, rowq);
    }
    char ckey[512];
    snprintf(ckey, sizeof ckey, "%s.fp8_scale", w->ref);
    const dit_vid_t sv = s ? -1 : dit_graph_constant(g, ckey, DIT_F32, 1, &rows, scales);
    free(scales);
    if (s) break;
    if (sv < 0) {
      s = DIT_ERR(INTERNAL, "quantize: cannot add the scales of '%s': %s", key, dit_status_message(dit_graph_status(g)));
      break;
    }
    /* The rows of x: one quantizer for all the linears that read them (Q, K and V share one; the
     * blocks' cross-attention K and V, one for the text), just after the op making them, in its
     * block (a graph input's first). */
    const dit_vid_t xv = dit_graph_cop_at(g, i)->in[0];
    if (rows_q[xv][0] < 0) {
      const dit_op_t *lin = dit_graph_cop_at(g, i);
      const dit_value_t *xval = dit_graph_cvalue(g, xv);
      const int32_t prod = xval->producer >= 0 && xval->producer < no ? xval->producer : no;
      dit_attrs_t qa = {0};
      const dit_dtype_t qdt[2] = {DIT_F8E4M3, DIT_F32};
      char qname[512];
      snprintf(qname, sizeof qname, "%s.rows8", xval->name ? xval->name : dit_graph_cvalue(g, lin->out[0])->name);
      if (dit_attrs_set_int(&qa, "heads", 1) || dit_attrs_set_int(&qa, "rows", 1)) {
        s = DIT_ERR(RESOURCE_EXHAUSTED, "quantize: out of memory");
        break;
      }
      dit_graph_set_block(g, prod < no ? dit_graph_cop_at(g, prod)->block : -1);
      s = dit_graph_op2(g, DIT_OP_ATTN_QUANT, &xv, 1, &qa, qdt, qname, rows_q[xv]);
      dit_graph_set_block(g, -1);
      if (s) break;
      next_q[nq] = after[prod];
      after[prod] = no + nq++;
    }
    op = dit_graph_op_at(g, i); /* adding values and ops may move the tables */
    w = dit_graph_value(g, op->in[1]);
    w->dtype = DIT_F8E4M3;
    const dit_vid_t wv = op->in[1], bv = op->n_in == 3 ? op->in[2] : -1;
    op->kind = DIT_OP_LINEAR_FP8;
    op->in[0] = rows_q[xv][0], op->in[1] = rows_q[xv][1], op->in[2] = wv, op->in[3] = sv, op->n_in = 4;
    if (bv >= 0) op->in[op->n_in++] = bv;
    bytes += (uint64_t)(rows * cols);
    n++;
    if (names) cJSON_AddItemToArray(names, cJSON_CreateString(dit_graph_cvalue(g, op->out[0])->name));
  }
  free(raw);
  free(uses);
  free(rows_q);
  /* The graph inputs' quantizers first, then each op followed by its outputs'. */
  int32_t placed = 0;
  for (int32_t q = after[no]; !s && q >= 0; q = next_q[q - no]) order[placed++] = q;
  for (int32_t i = 0; !s && i < no; i++) {
    order[placed++] = i;
    for (int32_t q = after[i]; q >= 0; q = next_q[q - no]) order[placed++] = q;
  }
  if (!s && placed != no + nq) s = DIT_ERR(INTERNAL, "quantize: %d ops ordered of %d", placed, no + nq);
  if (!s) s = dit_graph_reorder(g, order);
  free(after);
  free(next_q);
  free(order);
  if (!s) s = dit_graph_verify(g);
  if (!s && n == 0) s = DIT_ERR(INVALID_ARGUMENT, "--quant fp8: the graph has no linear of the transformer blocks to quantize");
  if (!s)
    dit_compile_progress(pr, "quant fp8: %d block linears with e4m3 weights (%.1f MiB) and per-channel scales, %d row quantizers", n,
                         (double)bytes / (1 << 20), nq);
  return s;
}

/* --attn-quant fp8 ---------------------------------------------------------------------------- */

/* An attention the fp8 kernel takes: self or joint attention (as many queries as keys), head
 * dim 64 or 128, no score bias and no frame-causal mask; a tile schedule or a key bound (a text mask)
 * stays, as attention_fp8's last input. Cross-attention to text and the image embedder's
 * attention keep their exact form. */
static int attention_quantizable(const dit_graph_t *g, const dit_op_t *op) {
  if (op->kind != DIT_OP_ATTENTION) return 0;
  const dit_value_t *q = dit_graph_cvalue(g, op->in[0]), *k = dit_graph_cvalue(g, op->in[1]);
  const dit_attr_t *ha = dit_attrs_find(&op->attrs, "heads"), *ca = dit_attrs_find(&op->attrs, "causal_block");
  return ha && ha->i > 0 && q->rank == 3 && k->rank == 3 && q->dims[1] == k->dims[1] && (q->dims[2] == 128 * ha->i || q->dims[2] == 64 * ha->i) &&
         !dit_attrs_find(&op->attrs, "bias") && !(ca && ca->i) && (op->n_in == 3 || op->n_in == 4);
}

/* attn_vmax's splits for v [B, L, heads*Dh]. attn_vmax runs a block per (item, head, 32 channels,
 * split), attn_quant_vt one per (item, head, 32 channels, 128-key tile), so the codes' pass is
 * wide already; with one split the maxima's pass would run on B*heads*Dh/32 blocks alone, each
 * walking all L keys (48 blocks for 132 multiprocessors at Wan2.1-1.3B). Enough splits for 4
 * blocks on each of the Hopper parts' 132 multiprocessors keep loads in flight on every one; at
 * least 128 keys a split (at most L/128 splits) keep a block's work above its start-up and the
 * splits' maxima that every attn_quant_vt block merges (S a channel) small beside its tile.
 * Wan2.1-1.3B at 480p (B 1, 12 heads, 32760 keys): 11 splits of 2979 keys, 528 blocks. */
#define VMAX_TARGET_BLOCKS (4 * 132)
static int64_t vmax_splits(int64_t batch, int64_t heads, int64_t hd, int64_t keys) {
  const int64_t groups = batch * heads * ((hd + 31) / 32), cap = keys / DIT_SPARSE_TILE;
  int64_t s = groups > 0 ? (VMAX_TARGET_BLOCKS + groups - 1) / groups : 1;
  if (s > cap) s = cap;
  return s < 1 ? 1 : s;
}

/* The ops an attention becomes: Q's and K's quantizers, with fp8 P V V's maxima and its e4m3 V^T,
 * and attention_fp8. */
static int ops_per_attention(dit_quant_t quant) { return quant == DIT_QUANT_INT8 ? 3 : 5; }

/* Attention op i (copied: appending moves the ops) as its fp8 ops appended to the graph;
 * attention_fp8 takes over the attention's outputs, so readers, names and output roles stay. */
static dit_status_t quantize_attention(dit_graph_t *g, int32_t i, dit_quant_t quant) {
  const dit_op_t op = *dit_graph_cop_at(g, i);
  const dit_value_t *y = dit_graph_cvalue(g, op.out[0]);
  const char *base = y->name ? y->name : "attention";
  const int64_t heads = dit_attrs_find(&op.attrs, "heads")->i;
  const dit_value_t *v = dit_graph_cvalue(g, op.in[2]);
  const int64_t splits = vmax_splits(v->dims[0], heads, v->dims[2] / heads, v->dims[1]);
  const int pv8 = quant != DIT_QUANT_INT8; /* P and V in e4m3 (else v itself, P bf16) */
  /* keys per tile of the online softmax and per scale of k (a tile schedule's are 128) */
  const int64_t kt = dit_cuda_att90_fp8_key_tile(pv8, dit_attrs_find(&op.attrs, "tiles") != NULL, quant == DIT_QUANT_FP8);
  dit_attrs_t qa = {0}, ka = {0}, va = {0}, ma = {0}, fa = op.attrs;
  if (dit_attrs_set_int(&qa, "heads", heads) || dit_attrs_set_int(&qa, "rows", 64) || dit_attrs_set_int(&ka, "heads", heads) ||
      dit_attrs_set_int(&ka, "rows", kt) || dit_attrs_set_int(&va, "heads", heads) || dit_attrs_set_int(&ma, "heads", heads) ||
      dit_attrs_set_int(&ma, "splits", splits) || dit_attrs_set_int(&fa, "key_tile", kt))
    return DIT_ERR(RESOURCE_EXHAUSTED, "attn quant: out of memory");
  const dit_dtype_t qdt[2] = {DIT_F8E4M3, DIT_F32}, qkdt[2] = {quant == DIT_QUANT_FP8 ? DIT_F8E4M3 : DIT_I8, DIT_F32},
                    odt[2] = {y->dtype, op.n_out > 1 ? dit_graph_cvalue(g, op.out[1])->dtype : DIT_F32};
  dit_vid_t q[2] = {-1, -1}, k[2] = {-1, -1}, vt[2] = {op.in[2], -1}, vin[2] = {op.in[2], -1}, o[2] = {-1, -1};
  char name[512];
  dit_graph_set_block(g, op.block);
  dit_status_t s = DIT_OK;
  snprintf(name, sizeof name, "%s.q8", base);
  if (!s) s = dit_graph_op2(g, DIT_OP_ATTN_QUANT, &op.in[0], 1, &qa, qkdt, name, q);
  snprintf(name, sizeof name, "%s.k8", base);
  if (!s) s = dit_graph_op2(g, DIT_OP_ATTN_QUANT, &op.in[1], 1, &ka, qkdt, name, k);
  if (pv8) {
    snprintf(name, sizeof name, "%s.vmax", base);
    if (!s && (vin[1] = dit_graph_op(g, DIT_OP_ATTN_VMAX, &op.in[2], 1, &ma, DIT_F32, name)) < 0)
      s = dit_status_make(dit_status_code(dit_graph_status(g)), "%s", dit_status_message(dit_graph_status(g)));
    snprintf(name, sizeof name, "%s.vt8", base);
    if (!s) s = dit_graph_op2(g, DIT_OP_ATTN_QUANT_VT, vin, 2, &va, qdt, name, vt);
  }
  /* q8, qs, k8, ks, then vt8, vs or v, then the tile schedule or the key bound if any. */
  dit_vid_t ins[7] = {q[0], q[1], k[0], k[1], vt[0], vt[1], -1};
  int n_in = pv8 ? 6 : 5;
  if (op.n_in == 4) ins[n_in++] = op.in[3];
  snprintf(name, sizeof name, "%s.fp8", base);
  if (!s) {
    if (op.n_out == 2) s = dit_graph_op2(g, DIT_OP_ATTENTION_FP8, ins, n_in, &fa, odt, name, o);
    else if ((o[0] = dit_graph_op(g, DIT_OP_ATTENTION_FP8, ins, n_in, &fa, odt[0], name)) < 0)
      s = dit_status_make(dit_status_code(dit_graph_status(g)), "%s", dit_status_message(dit_graph_status(g)));
  }
  dit_graph_set_block(g, -1);
  if (s) return s;
  const int32_t a = dit_graph_num_ops(g) - 1;
  for (int r = 0; r < op.n_out; r++) {
    dit_graph_op_at(g, a)->out[r] = op.out[r];
    dit_graph_value(g, op.out[r])->producer = a;
    dit_graph_value(g, o[r])->producer = -1; /* an orphan that compaction drops */
  }
  return DIT_OK;
}

dit_status_t dit_compile_quantize_attention(dit_graph_t *g, dit_quant_t quant, cJSON *summary, dit_compile_progress_t *pr) {
  if (quant == DIT_QUANT_NONE) return DIT_OK;
  const int32_t n = dit_graph_num_ops(g);
  const int per = ops_per_attention(quant);
  uint8_t *done = calloc((size_t)n + 1, 1), *keep = malloc((size_t)(per + 1) * (size_t)n + 1);
  int32_t *order = malloc(((size_t)(per + 1) * (size_t)n + 1) * sizeof *order);
  dit_status_t s = done && keep && order ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "attn quant: out of memory");
  cJSON *names = NULL;
  if (!s && summary) {
    const int i8 = quant == DIT_QUANT_INT8 || quant == DIT_QUANT_INT8FP8;
    cJSON *q = cJSON_AddObjectToObject(summary, "attn_quant");
    cJSON_AddStringToObject(q, "mode", dit_quant_name(quant));
    cJSON_AddStringToObject(q, "rule", "attentions with as many queries as keys, head dim 64 or 128, no score bias or frame-causal mask");
    cJSON_AddStringToObject(q, "q", i8 ? "int8, one fp32 scale per head and 64 rows: amax / 127" : "e4m3, one fp32 scale per head and 64 rows: amax / 16 (Q K^T's sums fit f16)");
    cJSON_AddStringToObject(q, "k", i8 ? "int8, one fp32 scale per head and key tile (attention_fp8's key_tile rows): amax / 127"
                                       : "e4m3, one fp32 scale per head and key tile (attention_fp8's key_tile rows): amax / 16");
    cJSON_AddStringToObject(q, "v", quant == DIT_QUANT_INT8 ? "as --dtype says (bf16 on GPUs)"
                                                             : "e4m3 of v less its channel mean, transposed, one fp32 scale per head "
                                                               "and channel: max |v - mean| / 448");
    cJSON_AddStringToObject(q, "p", quant == DIT_QUANT_INT8 ? "bf16 softmax probabilities; fp32 row sums and accumulators"
                                                             : "e4m3 softmax probabilities scaled by 2^8, interpolated linearly between "
                                                               "powers of two (no exponential); fp32 row sums (of the e4m3 "
                                                               "probabilities) and accumulators");
    names = cJSON_AddArrayToObject(q, "ops");
  }
  int32_t count = 0, kept = 0;
  for (int32_t i = 0; !s && i < n; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    if (op->kind != DIT_OP_ATTENTION) continue;
    if (!attention_quantizable(g, op)) {
      kept++;
      continue;
    }
    if (names) cJSON_AddItemToArray(names, cJSON_CreateString(dit_graph_cvalue(g, op->out[0])->name));
    s = quantize_attention(g, i, quant);
    done[i] = 1;
    count++;
  }
  if (!s && count == 0)
    s = DIT_ERR(INVALID_ARGUMENT,
                "--attn-quant %s: none of the graph's %d attentions has as many queries as keys, head dim 64 or 128, no score bias and no frame-causal mask",
                dit_quant_name(quant), kept);
  if (!s) {
    /* Drop the rewritten attentions (the appended groups keep their order at the end), then put
     * each group where its attention was. */
    for (int32_t i = 0; i < n + per * count; i++) keep[i] = i >= n || !done[i];
    s = dit_graph_compact(g, keep);
    int32_t m = 0, dropped = 0, next = n - count;
    for (int32_t i = 0; !s && i < n; i++) {
      if (done[i]) {
        for (int r = 0; r < per; r++) order[m++] = next++;
        dropped++;
      } else {
        order[m++] = i - dropped;
      }
    }
    if (!s) s = dit_graph_reorder(g, order);
  }
  if (!s) s = dit_graph_verify(g);
  if (!s && summary) {
    cJSON *q = cJSON_GetObjectItem(summary, "attn_quant");
    cJSON_AddNumberToObject(q, "attentions", count);
    cJSON_AddNumberToObject(q, "kept", kept);
  }
  if (!s)
    dit_compile_progress(pr, "attn quant %s: %d attention%s on %s q, k and %s v (%d kept exact)", dit_quant_name(quant), count,
                         count == 1 ? "" : "s", quant == DIT_QUANT_FP8 ? "e4m3" : "int8", quant == DIT_QUANT_INT8 ? "unquantized" : "e4m3", kept);
  free(done);
  free(keep);
  free(order);
  return s;
}
