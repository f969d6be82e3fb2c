/* The op catalog table and attribute helpers. */
#include "base/ops.h"

#include <string.h>

#include "base/dtype.h"

static const dit_op_info_t kOps[DIT_OP_COUNT] = {
#define DIT_OP(E, name, a, b, c, d) [DIT_OP_##E] = {name, a, b, c, d},
#include "base/ops.def"
#undef DIT_OP
};

const dit_op_info_t *dit_op_info(dit_op_kind_t kind) {
  return (unsigned)kind < DIT_OP_COUNT ? &kOps[kind] : NULL;
}

int dit_op_is_collective(dit_op_kind_t kind) {
  return kind == DIT_OP_ALLREDUCE || kind == DIT_OP_ALLGATHER || kind == DIT_OP_ALLTOALL || kind == DIT_OP_RING_SHIFT ||
         kind == DIT_OP_REDUCE_SCATTER;
}

int dit_op_kind_parse(const char *name, dit_op_kind_t *out) {
  for (int i = 0; i < DIT_OP_COUNT; i++) {
    if (strcmp(kOps[i].name, name) == 0) {
      *out = (dit_op_kind_t)i;
      return 0;
    }
  }
  return -1;
}

static dit_attr_t *slot(dit_attrs_t *a, const char *key) {
  if (strlen(key) >= DIT_ATTR_KEY_MAX) return NULL;
  for (int i = 0; i < a->count; i++)
    if (strcmp(a->items[i].key, key) == 0) return &a->items[i];
  if (a->count >= DIT_MAX_ATTRS) return NULL;
  dit_attr_t *s = &a->items[a->count++];
  memset(s, 0, sizeof *s);
  strcpy(s->key, key);
  return s;
}

int dit_attrs_set_int(dit_attrs_t *a, const char *key, int64_t v) {
  dit_attr_t *s = slot(a, key);
  if (!s) return -1;
  s->is_float = 0;
  s->i = v;
  s->f = (double)v;
  return 0;
}

int dit_attrs_set_float(dit_attrs_t *a, const char *key, double v) {
  dit_attr_t *s = slot(a, key);
  if (!s) return -1;
  s->is_float = 1;
  s->f = v;
  s->i = 0;
  return 0;
}

const dit_attr_t *dit_attrs_find(const dit_attrs_t *a, const char *key) {
  for (int i = 0; i < a->count; i++)
    if (strcmp(a->items[i].key, key) == 0) return &a->items[i];
  return NULL;
}

dit_status_t dit_attrs_get_int(const dit_attrs_t *a, const char *op, const char *key,
                               int64_t *out) {
  const dit_attr_t *s = dit_attrs_find(a, key);
  if (!s) return DIT_ERR(INVALID_ARGUMENT, "op %s: missing integer attribute '%s'", op, key);
  if (s->is_float)
    return DIT_ERR(INVALID_ARGUMENT, "op %s: attribute '%s': expected an integer, found %g", op,
                   key, s->f);
  *out = s->i;
  return DIT_OK;
}

dit_status_t dit_attrs_get_float(const dit_attrs_t *a, const char *op, const char *key,
                                 double *out) {
  const dit_attr_t *s = dit_attrs_find(a, key);
  if (!s) return DIT_ERR(INVALID_ARGUMENT, "op %s: missing float attribute '%s'", op, key);
  *out = s->f; /* an integer literal is a valid float */
  return DIT_OK;
}

/* An optional integer attribute: def when absent. */
static dit_status_t get_int_or(const dit_attrs_t *a, const char *op, const char *key, int64_t def, int64_t min, int64_t *out) {
  *out = def;
  if (dit_attrs_find(a, key)) DIT_RETURN_IF(dit_attrs_get_int(a, op, key, out));
  if (*out < min)
    return DIT_ERR(INVALID_ARGUMENT, "op %s: attribute '%s' = %lld, expected >= %lld", op, key, (long long)*out, (long long)min);
  return DIT_OK;
}

dit_status_t dit_token_group_get(const dit_attrs_t *a, const char *op, dit_token_group_t *out) {
  DIT_RETURN_IF(get_int_or(a, op, "token_group", 1, 1, &out->group));
  DIT_RETURN_IF(get_int_or(a, op, "token_offset", 0, 0, &out->offset));
  if (out->offset >= out->group)
    return DIT_ERR(INVALID_ARGUMENT, "op %s: attribute 'token_offset' = %lld, expected below token_group %lld", op, (long long)out->offset,
                   (long long)out->group);
  return DIT_OK;
}

dit_status_t dit_conv3d_attrs_get(const dit_attrs_t *a, const char *op, dit_conv3d_attrs_t *out) {
  DIT_RETURN_IF(dit_attrs_get_int(a, op, "pad_t", &out->pad_t));
  DIT_RETURN_IF(dit_attrs_get_int(a, op, "pad_h", &out->pad_h));
  DIT_RETURN_IF(dit_attrs_get_int(a, op, "pad_w", &out->pad_w));
  DIT_RETURN_IF(get_int_or(a, op, "pad_t", out->pad_t, 0, &out->pad_t));
  DIT_RETURN_IF(get_int_or(a, op, "pad_h", out->pad_h, 0, &out->pad_h));
  DIT_RETURN_IF(get_int_or(a, op, "pad_w", out->pad_w, 0, &out->pad_w));
  DIT_RETURN_IF(get_int_or(a, op, "pad_h_after", out->pad_h, 0, &out->pad_h_after));
  DIT_RETURN_IF(get_int_or(a, op, "pad_w_after", out->pad_w, 0, &out->pad_w_after));
  DIT_RETURN_IF(get_int_or(a, op, "stride_t", 1, 1, &out->stride_t));
  DIT_RETURN_IF(get_int_or(a, op, "stride_h", 1, 1, &out->stride_h));
  return get_int_or(a, op, "stride_w", 1, 1, &out->stride_w);
}

int dit_norm_residual(dit_op_kind_t kind, const dit_attrs_t *attrs, int n_in, dit_op_kind_t *residual) {
  if (kind != DIT_OP_LAYERNORM && kind != DIT_OP_ADALN) return 0;
  const dit_attr_t *a = dit_attrs_find(attrs, "res_at");
  if (!a) return 0;
  /* The norm's own operands: layernorm's x or x, w, b; adaln's x, mod or x, table, e. The
   * residual's after x: y, then nothing, a mod, or a table and e. */
  const int64_t at = a->is_float ? -1 : a->i, extra = n_in - at;
  if (extra == 0) return 0; /* the norm's own operands alone: the part its consumers split off */
  const int own_ok = kind == DIT_OP_LAYERNORM ? at == 1 || at == 3 : at == 2 || at == 3;
  if (!own_ok || extra < 1 || extra > 3) return -1;
  if (residual) *residual = extra == 1 ? DIT_OP_ADD : DIT_OP_GATED_ADD;
  return (int)at;
}

int dit_norm_quant(dit_op_kind_t kind, const dit_attrs_t *attrs) {
  if (kind != DIT_OP_LAYERNORM && kind != DIT_OP_ADALN) return 0; /* a folded residual's attrs are the norm's */
  const dit_attr_t *a = dit_attrs_find(attrs, "quant");
  if (!a) return 0;
  if (a->is_float || (a->i != 0 && a->i != 1)) return -1;
  return (int)a->i;
}

int dit_attn_quant_rows(dit_op_kind_t kind, const dit_attrs_t *attrs) {
  const dit_attr_t *h = dit_attrs_find(attrs, "heads"), *r = dit_attrs_find(attrs, "rows");
  return kind == DIT_OP_ATTN_QUANT && h && r && !h->is_float && !r->is_float && h->i == 1 && r->i == 1;
}

float dit_attn_quant_e4m3_max(int64_t heads, int64_t rows) { return heads == 1 && rows == 1 ? DIT_E4M3_MAX : DIT_ATTN_QK_E4M3_MAX; }

int dit_linear_operands(dit_op_kind_t kind, const dit_attrs_t *attrs, int n_in, int *bias, int *acc) {
  /* linear: x, w, [bias], [c]; linear_fp8: xq, xs, w, w_scale, [bias]. */
  const int fp8 = kind == DIT_OP_LINEAR_FP8 ? 2 : 0;
  const dit_attr_t *a = fp8 ? NULL : dit_attrs_find(attrs, "acc");
  const int has_acc = a && !a->is_float && a->i != 0, own = 2 + fp8 + has_acc;
  *bias = *acc = -1;
  if ((kind != DIT_OP_LINEAR && !fp8) || (a && (a->is_float || a->i < 0 || a->i > 1)) || n_in < own || n_in > own + 1) return -1;
  if (n_in == own + 1) *bias = 2 + fp8;
  if (has_acc) *acc = n_in - 1;
  return 0;
}
