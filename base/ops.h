/* Op kinds and attributes: the backend-neutral op surface shared by ir/, the plan format
 * and the backends. */
#ifndef DIT_BASE_OPS_H
#define DIT_BASE_OPS_H

#include <stdint.h>

#include "base/status.h"

typedef enum dit_op_kind {
#define DIT_OP(E, name, a, b, c, d) DIT_OP_##E,
#include "base/ops.def"
#undef DIT_OP
  DIT_OP_COUNT
} dit_op_kind_t;

typedef struct dit_op_info {
  const char *name;
  int min_inputs, max_inputs, min_outputs, max_outputs;
} dit_op_info_t;

/* NULL for an unknown kind. */
const dit_op_info_t *dit_op_info(dit_op_kind_t kind);
/* 1 for the ops that move data between ranks (the executor's, between steps). */
int dit_op_is_collective(dit_op_kind_t kind);
/* Returns 0 and sets *out if name is known, -1 otherwise. */
int dit_op_kind_parse(const char *name, dit_op_kind_t *out);

/* Tokens per query and key tile of a sparse attention's schedule (attention's attr tiles): a
 * multiple of every kernel's key tile and equal to the kernels' query tiles. */
#define DIT_SPARSE_TILE 128

#define DIT_MAX_ATTRS 10
#define DIT_ATTR_KEY_MAX 16

typedef struct dit_attr {
  char key[DIT_ATTR_KEY_MAX];
  int is_float;
  int64_t i;
  double f;
} dit_attr_t;

typedef struct dit_attrs {
  int count;
  dit_attr_t items[DIT_MAX_ATTRS];
} dit_attrs_t;

/* Setters keep insertion order; setting a key twice replaces it. Return -1 when full or the
 * key is too long (a programming error in a frontend, reported by the verifier). */
int dit_attrs_set_int(dit_attrs_t *a, const char *key, int64_t v);
int dit_attrs_set_float(dit_attrs_t *a, const char *key, double v);
const dit_attr_t *dit_attrs_find(const dit_attrs_t *a, const char *key);

/* Typed getters for consumers: a missing key or the wrong kind is an error that names the
 * op and the key. */
dit_status_t dit_attrs_get_int(const dit_attrs_t *a, const char *op, const char *key,
                               int64_t *out);
dit_status_t dit_attrs_get_float(const dit_attrs_t *a, const char *op, const char *key,
                                 double *out);

/* adaln's and gated_add's per-token rows shared by runs of tokens (attrs token_group k and
 * token_offset o, optional: 1 and 0): token t reads row (t + o) / k of ceil((T + o) / k). The
 * getter checks k >= 1 and 0 <= o < k. */
typedef struct dit_token_group {
  int64_t group, offset;
} dit_token_group_t;
dit_status_t dit_token_group_get(const dit_attrs_t *a, const char *op, dit_token_group_t *out);
/* Every token its own row. */
#define DIT_TOKEN_GROUP_NONE ((dit_token_group_t){1, 0})
static inline int64_t dit_token_group_rows(dit_token_group_t tg, int64_t tokens) { return (tokens + tg.offset + tg.group - 1) / tg.group; }
static inline int64_t dit_token_group_row(dit_token_group_t tg, int64_t t) { return (t + tg.offset) / tg.group; }

/* A layernorm or adaln with its residual add folded in (base/ops.def, attr res_at): the
 * residual's operands are x and in[at..n_in), the norm's own are its x and in[1..at). Returns
 * at (>= 1), 0 when the op has none (or only its own n_in = at operands: the norm part split
 * off), or -1 when res_at does not fit the op's inputs; *residual
 * (may be NULL) gets the residual's kind, DIT_OP_ADD (one operand from at) or DIT_OP_GATED_ADD. */
int dit_norm_residual(dit_op_kind_t kind, const dit_attrs_t *attrs, int n_in, dit_op_kind_t *residual);

/* Whether a layernorm or adaln carries the row quantizer of an fp8 linear (attr quant, base/ops.def):
 * 1 if so, 0 if not (other ops: always 0), -1 when the attribute is not 0 or 1. */
int dit_norm_quant(dit_op_kind_t kind, const dit_attrs_t *attrs);

/* Whether op kind with attrs is the row quantizer of fp8 linears: attn_quant with heads 1 and rows 1. */
int dit_attn_quant_rows(dit_op_kind_t kind, const dit_attrs_t *attrs);
/* The e4m3 code magnitude attn_quant maps a block's amax to: 448 for token rows (heads 1, rows 1:
 * an fp8 linear's), DIT_ATTN_QK_E4M3_MAX for attention's Q and K blocks. */
float dit_attn_quant_e4m3_max(int64_t heads, int64_t rows);

/* A linear's operands (base/ops.def): the index of its bias and of its accumulated input c (attr
 * acc), each -1 when absent; 0 when n_in fits, -1 when it does not. */
int dit_linear_operands(dit_op_kind_t kind, const dit_attrs_t *attrs, int n_in, int *bias, int *acc);

/* conv3d's attributes (base/ops.def): the padding before the first frame, row and column, after
 * the last row and column (absent: as before), and the strides (absent: 1). */
typedef struct dit_conv3d_attrs {
  int64_t pad_t, pad_h, pad_w, pad_h_after, pad_w_after;
  int64_t stride_t, stride_h, stride_w;
} dit_conv3d_attrs_t;

/* Reads them, checking paddings >= 0 and strides >= 1 (errors name op and the attribute). */
dit_status_t dit_conv3d_attrs_get(const dit_attrs_t *a, const char *op, dit_conv3d_attrs_t *out);

#endif
