/* --quant fp8: the large linears of the transformer blocks become linear_fp8 ops over e4m3
 * weights with per-output-channel scales. The scales are graph constants computed here from the
 * checkpoint; the weights writer quantizes the weight itself by the same rule
 * (dit_e4m3_quantize_row), so the two agree bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "compiler/compile_internal.h"

const char *dit_quant_name(dit_quant_t q) { return q == DIT_QUANT_FP8 ? "fp8" : "none"; }

int dit_quant_parse(const char *name, dit_quant_t *out) {
  if (!strcmp(name, "none")) *out = DIT_QUANT_NONE;
  else if (!strcmp(name, "fp8")) *out = DIT_QUANT_FP8;
  else return -1;
  return 0;
}

/* A large linear of the blocks: inside a block, over token rows ([B, T, K]: modulation linears
 * inside blocks take one row per batch item), with a whole 2-D checkpoint weight that no other
 * op reads, K and N multiples of 16 (what fp8 matmuls take; the same ops on every target).
 * Everything outside the blocks (embedders, patch embed, the head) and every norm and
 * modulation stays as it is. */
static int quantizable(const dit_graph_t *g, const dit_op_t *op, const int32_t *uses) {
  if (op->kind != DIT_OP_LINEAR || op->block < 0) return 0;
  const dit_value_t *x = dit_graph_cvalue(g, op->in[0]), *w = dit_graph_cvalue(g, op->in[1]);
  return x->rank >= 3 && w->kind == DIT_VALUE_WEIGHT && !w->data && w->rank == 2 && w->slice_dim < 0 && uses[op->in[1]] == 1 &&
         w->dims[0] % 16 == 0 && w->dims[1] % 16 == 0;
}

dit_status_t dit_compile_quantize(const dit_model_t *m, dit_graph_t *g, dit_quant_t quant, cJSON *summary, dit_compile_progress_t *pr) {
  if (quant == DIT_QUANT_NONE) return DIT_OK;
  const int32_t nv = dit_graph_num_values(g), no = dit_graph_num_ops(g);
  int32_t *uses = calloc((size_t)nv + 1, sizeof *uses);
  if (!uses) return DIT_ERR(RESOURCE_EXHAUSTED, "quantize: out of memory");
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    for (int k = 0; k < op->n_in; k++) uses[op->in[k]]++;
  }
  cJSON *q = summary ? cJSON_AddObjectToObject(summary, "quant") : NULL;
  cJSON *names = NULL;
  if (q) {
    cJSON_AddStringToObject(q, "mode", "fp8");
    cJSON_AddStringToObject(q, "weights", "e4m3, one fp32 scale per output channel: amax / 448");
    cJSON_AddStringToObject(q, "activations", "e4m3, one fp32 scale per token row: amax / 448, on the fly");
    cJSON_AddStringToObject(q, "accumulate", "fp32, scaled by token scale * channel scale, then bias and activation");
    cJSON_AddStringToObject(q, "kept", "norms, modulation, time and text embedders, patch embed, output head, attention");
    names = cJSON_AddArrayToObject(q, "ops");
  }
  dit_status_t s = DIT_OK;
  float *rowf = NULL;
  uint8_t *rowq = NULL;
  void *raw = NULL;
  size_t cap = 0;
  int n = 0;
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
    op = dit_graph_op_at(g, i); /* adding a value may move the tables */
    w = dit_graph_value(g, op->in[1]);
    w->dtype = DIT_F8E4M3;
    op->kind = DIT_OP_LINEAR_FP8;
    if (op->n_in == 3) op->in[3] = op->in[2];
    op->in[2] = sv;
    op->n_in++;
    bytes += (uint64_t)(rows * cols);
    n++;
    if (names) cJSON_AddItemToArray(names, cJSON_CreateString(dit_graph_cvalue(g, op->out[0])->name));
  }
  free(raw);
  free(uses);
  if (!s) s = dit_graph_verify(g);
  if (!s && n == 0) s = DIT_ERR(INVALID_ARGUMENT, "--quant fp8: the graph has no linear of the transformer blocks to quantize");
  if (!s) dit_compile_progress(pr, "quant fp8: %d block linears with e4m3 weights (%.1f MiB) and per-channel scales", n, (double)bytes / (1 << 20));
  return s;
}
