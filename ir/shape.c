/* Shape inference: one rule per op kind of base/ops.def; used by the builder and verifier. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/graph.h"

#define FAIL(...) return dit_status_make(DIT_CODE_INVALID_ARGUMENT, __VA_ARGS__)

static const dit_value_t *operand(const dit_graph_t *g, const dit_vid_t *ins, int i) {
  return dit_graph_cvalue(g, ins[i]);
}

static dit_status_t need_rank(const char *op, const char *what, const dit_value_t *v, int rank) {
  if (v->rank != rank)
    FAIL("%s: operand %s '%s' has rank %d, expected %d", op, what, v->name, v->rank, rank);
  return DIT_OK;
}

static int same_shape(const dit_value_t *a, const dit_value_t *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

static void copy_shape(const dit_value_t *v, int *rank, int64_t *dims) {
  *rank = v->rank;
  memcpy(dims, v->dims, sizeof(int64_t) * DIT_MAX_RANK);
}

static dit_status_t get_i(const dit_attrs_t *a, const char *op, const char *key, int64_t *out,
                          int64_t min) {
  DIT_RETURN_IF(dit_attrs_get_int(a, op, key, out));
  if (*out < min) FAIL("%s: attribute %s = %" PRId64 ", expected >= %" PRId64, op, key, *out, min);
  return DIT_OK;
}

/* Writes "[d0,d1,...]" into buf. */
static const char *dims_str(int rank, const int64_t *dims, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < rank && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? "," : "", dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

static int is_float(dit_dtype_t t) { return t == DIT_F32 || t == DIT_BF16 || t == DIT_F16; }

/* v must be dtype [dims] exactly: the message names the operand, what it is for, and both shapes. */
static dit_status_t expect_value(const char *op, const char *what, const dit_value_t *v, dit_dtype_t dtype, int rank,
                                 const int64_t *dims, const char *why) {
  int ok = v->dtype == dtype && v->rank == rank;
  for (int i = 0; ok && i < rank; i++) ok = v->dims[i] == dims[i];
  if (!ok) {
    char b1[96], b2[96];
    FAIL("%s: %s '%s' is %s %s, expected %s %s (%s)", op, what, v->name, dit_dtype_name(v->dtype), dims_str(v->rank, v->dims, b1, sizeof b1),
         dit_dtype_name(dtype), dims_str(rank, dims, b2, sizeof b2), why);
  }
  return DIT_OK;
}

/* groupnorm's x: float [B, ..., C] of rank >= 3 whose channels the groups divide (`what` names
 * where the group count comes from). */
static dit_status_t check_groupnorm_x(const char *op, const dit_value_t *x, const char *what, int64_t groups) {
  char b1[96];
  if (x->rank < 3) FAIL("%s: operand x '%s' has rank %d, expected [B, ..., C] of rank >= 3", op, x->name, x->rank);
  if (!is_float(x->dtype)) FAIL("%s: operand x '%s' has dtype %s, expected f32, bf16 or f16", op, x->name, dit_dtype_name(x->dtype));
  const int64_t c = x->dims[x->rank - 1];
  if (c % groups)
    FAIL("%s: %s = %" PRId64 " does not divide the %" PRId64 " channels of x '%s' %s", op, what, groups, c, x->name,
         dims_str(x->rank, x->dims, b1, sizeof b1));
  return DIT_OK;
}

/* The pixels per batch item of groupnorm's x [B, ..., C]: the dims between. */
static int64_t groupnorm_pixels(const dit_value_t *x) {
  int64_t p = 1;
  for (int d = 1; d < x->rank - 1; d++) p *= x->dims[d];
  return p;
}

/* groupnorm's weight and bias [C] and its eps (finite, >= 0). */
static dit_status_t check_groupnorm_affine(const char *op, const dit_value_t *x, const dit_value_t *w, const dit_value_t *b,
                                           const dit_attrs_t *attrs) {
  double eps;
  DIT_RETURN_IF(dit_attrs_get_float(attrs, op, "eps", &eps));
  if (!(eps >= 0) || !isfinite(eps)) FAIL("%s: attribute eps = %g, expected finite and >= 0", op, eps);
  const int64_t c = x->dims[x->rank - 1];
  if (w->rank != 1 || b->rank != 1 || w->dims[0] != c || b->dims[0] != c)
    FAIL("%s: affine parameters '%s' and '%s' must be [%" PRId64 "]", op, w->name, b->name, c);
  return DIT_OK;
}

/* Checks that the row indices `keys` are inside the n rows of a modulation table. */
static dit_status_t check_mod_rows(const char *op, int64_t rows, const dit_attrs_t *attrs, const char *const *keys, int n_keys) {
  for (int k = 0; k < n_keys; k++) {
    int64_t idx;
    DIT_RETURN_IF(get_i(attrs, op, keys[k], &idx, 0));
    if (idx >= rows)
      FAIL("%s: attribute %s = %" PRId64 " outside mod rows 0..%" PRId64, op, keys[k], idx, rows - 1);
  }
  return DIT_OK;
}

/* Checks that mod is [B, n, D] (one table per batch item) or [B, R, n, D] (per token of x
 * [B, T, D]: R = T, or with attrs token_group and token_offset the rows runs of tokens share) with
 * the row indices `keys` inside n. */
static dit_status_t check_mod(const char *op, const dit_value_t *x, const dit_value_t *mod,
                              const dit_attrs_t *attrs, const char *const *keys, int n_keys) {
  if (mod->rank == 4) {
    dit_token_group_t tg;
    DIT_RETURN_IF(dit_token_group_get(attrs, op, &tg));
    const int64_t rows = dit_token_group_rows(tg, x->dims[1]);
    if (mod->dims[0] != x->dims[0] || mod->dims[1] != rows || mod->dims[3] != x->dims[x->rank - 1])
      FAIL("%s: per-token mod '%s' is [%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "], expected [%" PRId64 ",%" PRId64 ",n,%" PRId64
           "] (%" PRId64 " tokens, %" PRId64 " a row from offset %" PRId64 ")",
           op, mod->name, mod->dims[0], mod->dims[1], mod->dims[2], mod->dims[3], x->dims[0], rows, x->dims[x->rank - 1], x->dims[1],
           tg.group, tg.offset);
  } else {
    DIT_RETURN_IF(need_rank(op, "mod", mod, 3));
    if (mod->dims[0] != x->dims[0] || mod->dims[2] != x->dims[x->rank - 1])
      FAIL("%s: mod '%s' is [%" PRId64 ",%" PRId64 ",%" PRId64 "], expected [%" PRId64 ",n,%" PRId64 "]",
           op, mod->name, mod->dims[0], mod->dims[1], mod->dims[2], x->dims[0], x->dims[x->rank - 1]);
  }
  return check_mod_rows(op, mod->dims[mod->rank - 2], attrs, keys, n_keys);
}

/* The fused per-token form: table [1, n, D] and e [B, R, r*D] (r = 1 or n) of x [B, T, D],
 * the operands mod_table with per_token = 1 would have summed, R = T or, with attrs token_group
 * and token_offset, the rows that runs of tokens share. */
static dit_status_t check_mod_tok(const char *op, const dit_value_t *x, const dit_value_t *table, const dit_value_t *e,
                                  const dit_attrs_t *attrs, const char *const *keys, int n_keys) {
  DIT_RETURN_IF(need_rank(op, "table", table, 3));
  DIT_RETURN_IF(need_rank(op, "e", e, 3));
  const int64_t n = table->dims[1], d = x->dims[x->rank - 1];
  if (table->dims[0] != 1 || table->dims[2] != d)
    FAIL("%s: table '%s' is [%" PRId64 ",%" PRId64 ",%" PRId64 "], expected [1,n,%" PRId64 "]", op, table->name, table->dims[0],
         table->dims[1], table->dims[2], d);
  dit_token_group_t tg;
  DIT_RETURN_IF(dit_token_group_get(attrs, op, &tg));
  const int64_t rows = dit_token_group_rows(tg, x->dims[1]);
  if (e->dims[0] != x->dims[0] || e->dims[1] != rows || (e->dims[2] != d && e->dims[2] != n * d))
    FAIL("%s: per-token e '%s' is [%" PRId64 ",%" PRId64 ",%" PRId64 "], expected [%" PRId64 ",%" PRId64 ",%" PRId64 " or %" PRId64
         "] (%" PRId64 " tokens, %" PRId64 " a row from offset %" PRId64 ")",
         op, e->name, e->dims[0], e->dims[1], e->dims[2], x->dims[0], rows, d, n * d, x->dims[1], tg.group, tg.offset);
  return check_mod_rows(op, n, attrs, keys, n_keys);
}

/* rmsnorm's weight for the rows of x: [G] with G the attribute group_key when it is given (one
 * RMS per G-wide chunk of a row: a head; G must divide the last dim), else [D], the whole row. */
static dit_status_t check_rms_weight(const char *op, const dit_value_t *x, const dit_value_t *w, const dit_attrs_t *attrs,
                                     const char *group_key) {
  const int64_t d = x->dims[x->rank - 1];
  int64_t group = d;
  if (dit_attrs_find(attrs, group_key)) {
    DIT_RETURN_IF(get_i(attrs, op, group_key, &group, 1));
    if (d % group)
      FAIL("%s: attribute %s = %" PRId64 " does not divide the last dim %" PRId64 " of '%s'", op, group_key, group, d, x->name);
  }
  if (w->rank != 1 || w->dims[0] != group) FAIL("%s: weight '%s' must be [%" PRId64 "]", op, w->name, group);
  return DIT_OK;
}

/* A rope's folded RMSNorm: its weight (last input) and attributes norm_eps and norm_group. */
static dit_status_t check_rope_norm(const char *op, const dit_value_t *x, const dit_value_t *w, const dit_attrs_t *attrs) {
  double eps;
  DIT_RETURN_IF(dit_attrs_get_float(attrs, op, "norm_eps", &eps));
  if (!(eps >= 0) || !isfinite(eps)) FAIL("%s: attribute norm_eps = %g, expected finite and >= 0", op, eps);
  if (!is_float(w->dtype)) FAIL("%s: norm weight '%s' has dtype %s, expected f32, bf16 or f16", op, w->name, dit_dtype_name(w->dtype));
  return check_rms_weight(op, x, w, attrs, "norm_group");
}

static dit_status_t infer_core(const dit_graph_t *g, dit_op_kind_t kind, const dit_vid_t *ins, int n_in, const dit_attrs_t *attrs,
                               int n_out, int out_rank[DIT_OP_MAX_OUT], int64_t out_dims[DIT_OP_MAX_OUT][DIT_MAX_RANK]);

dit_status_t dit_infer_shapes(const dit_graph_t *g, dit_op_kind_t kind, const dit_vid_t *ins,
                              int n_in, const dit_attrs_t *attrs, int n_out,
                              int out_rank[DIT_OP_MAX_OUT],
                              int64_t out_dims[DIT_OP_MAX_OUT][DIT_MAX_RANK]) {
  const int quant = dit_norm_quant(kind, attrs);
  const char *op = dit_op_info(kind) ? dit_op_info(kind)->name : "op";
  if (quant < 0) FAIL("%s: attribute quant must be 0 or 1, on layernorm or adaln (base/ops.def)", op);
  if (!quant) return infer_core(g, kind, ins, n_in, attrs, n_out, out_rank, out_dims);
  /* A folded row quantizer: the norm's outputs, then the row scales [B, 1, T]. */
  if (n_out < 2) FAIL("%s: a folded row quantizer adds the row scales as the last output; found %d outputs", op, n_out);
  DIT_RETURN_IF(infer_core(g, kind, ins, n_in, attrs, n_out - 1, out_rank, out_dims));
  if (n_in < 1 || !operand(g, ins, 0)) FAIL("%s: operand 0 is not a value", op);
  const dit_value_t *x = operand(g, ins, 0);
  if (x->rank != 3) FAIL("%s: a folded row quantizer takes x [B, T, D]; '%s' has rank %d", op, x->name, x->rank);
  out_rank[n_out - 1] = 3;
  out_dims[n_out - 1][0] = x->dims[0];
  out_dims[n_out - 1][1] = 1;
  out_dims[n_out - 1][2] = x->dims[1];
  return DIT_OK;
}

static dit_status_t infer_core(const dit_graph_t *g, dit_op_kind_t kind, const dit_vid_t *ins, int n_in, const dit_attrs_t *attrs,
                               int n_out, int out_rank[DIT_OP_MAX_OUT], int64_t out_dims[DIT_OP_MAX_OUT][DIT_MAX_RANK]) {
  const dit_op_info_t *info = dit_op_info(kind);
  if (!info) FAIL("unknown op kind %d", (int)kind);
  const char *op = info->name;
  for (int i = 0; i < n_in; i++)
    if (!operand(g, ins, i)) FAIL("%s: operand %d is not a value", op, i);
  const dit_value_t *x = operand(g, ins, 0);
  memset(out_dims, 0, sizeof(int64_t) * DIT_OP_MAX_OUT * DIT_MAX_RANK);
  dit_op_kind_t res_kind;
  const int res_at = dit_norm_residual(kind, attrs, n_in, &res_kind);
  if (res_at < 0) FAIL("%s: attribute res_at does not fit its %d operands (base/ops.def)", op, n_in);
  if (res_at > 0) {
    /* The residual's shapes (its sum s has x's), then the norm's of s. */
    if (n_out != 2) FAIL("%s: a folded residual add has two outputs (the norm and the sum), found %d", op, n_out);
    dit_vid_t res_ins[DIT_OP_MAX_IN] = {ins[0]};
    for (int i = res_at; i < n_in; i++) res_ins[1 + i - res_at] = ins[i];
    int r_rank[DIT_OP_MAX_OUT];
    int64_t r_dims[DIT_OP_MAX_OUT][DIT_MAX_RANK];
    DIT_RETURN_IF(infer_core(g, res_kind, res_ins, 1 + n_in - res_at, attrs, 1, r_rank, r_dims));
    DIT_RETURN_IF(infer_core(g, kind, ins, res_at, attrs, 1, out_rank, out_dims));
    out_rank[1] = r_rank[0];
    memcpy(out_dims[1], r_dims[0], sizeof r_dims[0]);
    return DIT_OK;
  }
  switch (kind) {
    case DIT_OP_PATCHIFY: {
      int64_t pt, ph, pw;
      DIT_RETURN_IF(need_rank(op, "x", x, 5));
      DIT_RETURN_IF(get_i(attrs, op, "pt", &pt, 1));
      DIT_RETURN_IF(get_i(attrs, op, "ph", &ph, 1));
      DIT_RETURN_IF(get_i(attrs, op, "pw", &pw, 1));
      if (x->dims[2] % pt || x->dims[3] % ph || x->dims[4] % pw)
        FAIL("%s: grid %" PRId64 "x%" PRId64 "x%" PRId64 " not divisible by patch %" PRId64
             "x%" PRId64 "x%" PRId64, op, x->dims[2], x->dims[3], x->dims[4], pt, ph, pw);
      out_rank[0] = 3;
      out_dims[0][0] = x->dims[0];
      out_dims[0][1] = (x->dims[2] / pt) * (x->dims[3] / ph) * (x->dims[4] / pw);
      out_dims[0][2] = x->dims[1] * pt * ph * pw;
      break;
    }
    case DIT_OP_UNPATCHIFY: {
      int64_t pt, ph, pw, f, h, w;
      DIT_RETURN_IF(need_rank(op, "y", x, 3));
      DIT_RETURN_IF(get_i(attrs, op, "pt", &pt, 1));
      DIT_RETURN_IF(get_i(attrs, op, "ph", &ph, 1));
      DIT_RETURN_IF(get_i(attrs, op, "pw", &pw, 1));
      DIT_RETURN_IF(get_i(attrs, op, "f", &f, 1));
      DIT_RETURN_IF(get_i(attrs, op, "h", &h, 1));
      DIT_RETURN_IF(get_i(attrs, op, "w", &w, 1));
      if (x->dims[1] != f * h * w || x->dims[2] % (pt * ph * pw))
        FAIL("%s: y [%" PRId64 ",%" PRId64 ",%" PRId64 "] does not fit grid %" PRId64 "x%" PRId64
             "x%" PRId64 " with patch volume %" PRId64, op, x->dims[0], x->dims[1], x->dims[2], f,
             h, w, pt * ph * pw);
      out_rank[0] = 5;
      out_dims[0][0] = x->dims[0];
      out_dims[0][1] = x->dims[2] / (pt * ph * pw);
      out_dims[0][2] = f * pt;
      out_dims[0][3] = h * ph;
      out_dims[0][4] = w * pw;
      break;
    }
    case DIT_OP_LINEAR:
    case DIT_OP_LINEAR_FP8: {
      const int fp8 = kind == DIT_OP_LINEAR_FP8; /* xq, xs, w, w_scale, [bias] */
      if (n_in < 2 + 2 * fp8) FAIL("%s: %d operands, expected at least %d", op, n_in, 2 + 2 * fp8);
      const dit_value_t *w = operand(g, ins, 1 + fp8);
      if (x->rank < 1 || w->rank < 2) FAIL("%s: x rank %d, w rank %d; expected >= 1 and >= 2", op, x->rank, w->rank);
      int64_t k = 1;
      for (int i = 1; i < w->rank; i++) k *= w->dims[i];
      if (k != x->dims[x->rank - 1])
        FAIL("%s: weight '%s' has K = %" PRId64 ", input '%s' has %" PRId64, op, w->name, k,
             x->name, x->dims[x->rank - 1]);
      if (fp8) {
        const dit_value_t *xs = operand(g, ins, 1), *ws = operand(g, ins, 3);
        if (w->dtype != DIT_F8E4M3 || w->rank != 2)
          FAIL("%s: weight '%s' is %s of rank %d, expected f8e4m3 [N, K]", op, w->name, dit_dtype_name(w->dtype), w->rank);
        if (ws->dtype != DIT_F32 || ws->rank != 1 || ws->dims[0] != w->dims[0])
          FAIL("%s: weight scales '%s' must be f32 [%" PRId64 "], found %s of rank %d", op, ws->name, w->dims[0],
               dit_dtype_name(ws->dtype), ws->rank);
        if (x->dtype != DIT_F8E4M3 || x->rank != 3)
          FAIL("%s: operand xq '%s' is %s of rank %d, expected f8e4m3 [B, T, K] (attn_quant's codes)", op, x->name,
               dit_dtype_name(x->dtype), x->rank);
        if (xs->dtype != DIT_F32 || xs->rank != 3 || xs->dims[0] != x->dims[0] || xs->dims[1] != 1 || xs->dims[2] != x->dims[1])
          FAIL("%s: row scales '%s' must be f32 [%" PRId64 ", 1, %" PRId64 "], found %s of rank %d", op, xs->name, x->dims[0],
               x->dims[1], dit_dtype_name(xs->dtype), xs->rank);
      }
      int bi, ai;
      if (dit_linear_operands(kind, attrs, n_in, &bi, &ai))
        FAIL("%s: %d operands do not fit attribute acc (%s, an optional bias%s)", op, n_in, fp8 ? "xq, xs, w, w_scale" : "x, w",
             fp8 ? "" : ", and c when acc = 1");
      if (bi >= 0) {
        const dit_value_t *b = operand(g, ins, bi);
        if (b->rank != 1 || b->dims[0] != w->dims[0])
          FAIL("%s: bias '%s' must be [%" PRId64 "]", op, b->name, w->dims[0]);
      }
      copy_shape(x, &out_rank[0], out_dims[0]);
      out_dims[0][x->rank - 1] = w->dims[0];
      if (ai >= 0) {
        const dit_value_t *c = operand(g, ins, ai);
        if (dit_attrs_find(attrs, "act")) FAIL("%s: attributes act and acc together (the sum would be activated)", op);
        int same = c->rank == out_rank[0];
        for (int i = 0; same && i < c->rank; i++) same = c->dims[i] == out_dims[0][i];
        if (!same) FAIL("%s: accumulated input '%s' must have the output's shape (x's leading dims, then N = %" PRId64 ")", op, c->name,
                        w->dims[0]);
      }
      break;
    }
    case DIT_OP_TIMESTEP_EMBED: {
      int64_t dim;
      /* t [B], or [B, T] for one timestep per token. */
      if (x->rank != 1 && x->rank != 2) FAIL("%s: operand t '%s' has rank %d, expected 1 or 2", op, x->name, x->rank);
      DIT_RETURN_IF(get_i(attrs, op, "dim", &dim, 2));
      copy_shape(x, &out_rank[0], out_dims[0]);
      out_rank[0] = x->rank + 1;
      out_dims[0][x->rank] = dim;
      break;
    }
    case DIT_OP_SILU:
    case DIT_OP_GELU_TANH:
    case DIT_OP_GELU:
    case DIT_OP_QUICK_GELU:
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    case DIT_OP_CAST:
      /* The output's dtype is the op's own; a conversion is defined between float types only. */
      if (!is_float(x->dtype))
        FAIL("%s: operand x '%s' has dtype %s, expected f32, bf16 or f16", op, x->name, dit_dtype_name(x->dtype));
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    case DIT_OP_ADD:
    case DIT_OP_MUL:
      if (!same_shape(x, operand(g, ins, 1)))
        FAIL("%s: operands '%s' and '%s' differ in shape", op, x->name, operand(g, ins, 1)->name);
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    case DIT_OP_MOD_TABLE: {
      const dit_value_t *e = operand(g, ins, 1);
      DIT_RETURN_IF(need_rank(op, "table", x, 3));
      if (x->dims[0] != 1) FAIL("%s: table '%s' dims[0] = %" PRId64 ", expected 1", op, x->name, x->dims[0]);
      if (e->rank < 1) FAIL("%s: e '%s' has rank 0", op, e->name);
      int64_t n = x->dims[1], d = x->dims[2], b = e->dims[0];
      const dit_attr_t *pt = dit_attrs_find(attrs, "per_token");
      if (pt && pt->i) {
        /* One table per token: e [B, T, r*D] -> [B, T, n, D]. */
        DIT_RETURN_IF(need_rank(op, "e", e, 3));
        if (e->dims[2] != d && e->dims[2] != n * d)
          FAIL("%s: per-token e '%s' has %" PRId64 " elements per token, expected %" PRId64 " or %" PRId64, op, e->name, e->dims[2],
               d, n * d);
        out_rank[0] = 4;
        out_dims[0][0] = b;
        out_dims[0][1] = e->dims[1];
        out_dims[0][2] = n;
        out_dims[0][3] = d;
        break;
      }
      int64_t per = dit_value_numel(e) / (b ? b : 1);
      if (per != d && per != n * d)
        FAIL("%s: e '%s' has %" PRId64 " elements per batch item, expected %" PRId64 " or %" PRId64,
             op, e->name, per, d, n * d);
      out_rank[0] = 3;
      out_dims[0][0] = b;
      out_dims[0][1] = n;
      out_dims[0][2] = d;
      break;
    }
    case DIT_OP_LAYERNORM:
      if (n_in == 2) FAIL("%s: weight without bias", op);
      if (n_in == 3) {
        const dit_value_t *w = operand(g, ins, 1), *b = operand(g, ins, 2);
        if (w->rank != 1 || b->rank != 1 || w->dims[0] != x->dims[x->rank - 1] || b->dims[0] != w->dims[0])
          FAIL("%s: affine parameters must be [%" PRId64 "]", op, x->dims[x->rank - 1]);
      }
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    case DIT_OP_GROUPNORM: {
      int64_t groups;
      DIT_RETURN_IF(get_i(attrs, op, "groups", &groups, 1));
      DIT_RETURN_IF(check_groupnorm_x(op, x, "attribute groups", groups));
      DIT_RETURN_IF(check_groupnorm_affine(op, x, operand(g, ins, 1), operand(g, ins, 2), attrs));
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    }
    case DIT_OP_GROUPNORM_STATS: {
      int64_t groups, slices;
      DIT_RETURN_IF(get_i(attrs, op, "groups", &groups, 1));
      DIT_RETURN_IF(get_i(attrs, op, "slices", &slices, 1));
      DIT_RETURN_IF(check_groupnorm_x(op, x, "attribute groups", groups));
      const int64_t pixels = groupnorm_pixels(x);
      if (slices > pixels)
        FAIL("%s: attribute slices = %" PRId64 " exceeds the %" PRId64 " pixels of x '%s' (every slice needs one)", op, slices, pixels,
             x->name);
      out_rank[0] = 4;
      out_dims[0][0] = x->dims[0];
      out_dims[0][1] = slices;
      out_dims[0][2] = groups;
      out_dims[0][3] = 2;
      break;
    }
    case DIT_OP_GROUPNORM_APPLY: {
      const dit_value_t *st = operand(g, ins, 1);
      char b1[96];
      if (st->dtype != DIT_F32 || st->rank != 4 || st->dims[0] != x->dims[0] || st->dims[1] < 1 || st->dims[2] < 1 || st->dims[3] != 2)
        FAIL("%s: stats '%s' %s %s, expected f32 [%" PRId64 ", S, G, 2]", op, st->name, dit_dtype_name(st->dtype),
             dims_str(st->rank, st->dims, b1, sizeof b1), x->dims[0]);
      DIT_RETURN_IF(check_groupnorm_x(op, x, "the groups of stats", st->dims[2]));
      const int64_t pixels = groupnorm_pixels(x);
      if (st->dims[1] > pixels)
        FAIL("%s: stats '%s' has %" PRId64 " slices, more than the %" PRId64 " pixels of x '%s'", op, st->name, st->dims[1], pixels, x->name);
      DIT_RETURN_IF(check_groupnorm_affine(op, x, operand(g, ins, 2), operand(g, ins, 3), attrs));
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    }
    case DIT_OP_ADALN: {
      static const char *const keys[] = {"shift", "scale"};
      DIT_RETURN_IF(need_rank(op, "x", x, 3));
      if (n_in == 3) DIT_RETURN_IF(check_mod_tok(op, x, operand(g, ins, 1), operand(g, ins, 2), attrs, keys, 2));
      else DIT_RETURN_IF(check_mod(op, x, operand(g, ins, 1), attrs, keys, 2));
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    }
    case DIT_OP_RMSNORM:
      if (x->rank < 1) FAIL("%s: operand x '%s' has rank 0, expected [..., D]", op, x->name);
      DIT_RETURN_IF(check_rms_weight(op, x, operand(g, ins, 1), attrs, "group"));
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    case DIT_OP_ROPE: {
      int64_t heads, f, h, w, td, hd, wd;
      DIT_RETURN_IF(need_rank(op, "x", x, 3));
      DIT_RETURN_IF(get_i(attrs, op, "heads", &heads, 1));
      DIT_RETURN_IF(get_i(attrs, op, "f", &f, 1));
      DIT_RETURN_IF(get_i(attrs, op, "h", &h, 1));
      DIT_RETURN_IF(get_i(attrs, op, "w", &w, 1));
      DIT_RETURN_IF(get_i(attrs, op, "t_dim", &td, 0));
      DIT_RETURN_IF(get_i(attrs, op, "h_dim", &hd, 0));
      DIT_RETURN_IF(get_i(attrs, op, "w_dim", &wd, 0));
      const dit_attr_t *t0a = dit_attrs_find(attrs, "t0");
      int64_t t0 = t0a ? t0a->i : 0;
      if (t0 < 0 || x->dims[1] + t0 > f * h * w || (!t0a && x->dims[1] != f * h * w))
        FAIL("%s: %" PRId64 " tokens from %" PRId64 ", grid has %" PRId64, op, x->dims[1], t0, f * h * w);
      if ((td | hd | wd) & 1) FAIL("%s: rope parts %" PRId64 "/%" PRId64 "/%" PRId64 " must be even", op, td, hd, wd);
      if (x->dims[2] != heads * (td + hd + wd))
        FAIL("%s: channels %" PRId64 " != heads %" PRId64 " x head dim %" PRId64, op, x->dims[2], heads, td + hd + wd);
      if (n_in == 2) DIT_RETURN_IF(check_rope_norm(op, x, operand(g, ins, 1), attrs));
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    }
    case DIT_OP_ATTENTION: {
      const dit_value_t *k = operand(g, ins, 1), *v = operand(g, ins, 2);
      int64_t heads;
      DIT_RETURN_IF(get_i(attrs, op, "heads", &heads, 1));
      DIT_RETURN_IF(need_rank(op, "q", x, 3));
      DIT_RETURN_IF(need_rank(op, "k", k, 3));
      DIT_RETURN_IF(need_rank(op, "v", v, 3));
      if (!same_shape(k, v) || k->dims[0] != x->dims[0] || k->dims[2] != x->dims[2])
        FAIL("%s: q [%" PRId64 ",%" PRId64 ",%" PRId64 "], k/v [%" PRId64 ",%" PRId64 ",%" PRId64
             "] do not match", op, x->dims[0], x->dims[1], x->dims[2], k->dims[0], k->dims[1], k->dims[2]);
      if (x->dims[2] % heads) FAIL("%s: %" PRId64 " channels not divisible by %" PRId64 " heads", op, x->dims[2], heads);
      const dit_attr_t *ta = dit_attrs_find(attrs, "tiles"), *ba = dit_attrs_find(attrs, "bias");
      const int tiled = ta && !ta->is_float && ta->i == 1, biased = ba && !ba->is_float && ba->i == 1;
      if (ta && !tiled) FAIL("%s: attribute tiles must be 1 (the last input is a tile schedule) when present", op);
      if (ba && !biased) FAIL("%s: attribute bias must be 1 (the last input is a score bias) when present", op);
      if (tiled && biased) FAIL("%s: a score bias with a tile schedule is not supported", op);
      const dit_attr_t *ca = dit_attrs_find(attrs, "causal_block");
      if (ca && (ca->is_float || ca->i < 1))
        FAIL("%s: attribute causal_block must be an integer >= 1 (tokens per causal block) when present", op);
      if (ca && (tiled || biased))
        FAIL("%s: causal_block with a %s is not supported", op, tiled ? "tile schedule" : "score bias");
      if (ca && x->dims[1] != k->dims[1])
        FAIL("%s: causal_block = %" PRId64 " needs self-attention: q '%s' has %" PRId64 " tokens, k '%s' %" PRId64, op, ca->i, x->name,
             x->dims[1], k->name, k->dims[1]);
      if (biased) {
        if (n_in < 4) FAIL("%s: attribute bias = 1 needs the bias as the last input (%d inputs)", op, n_in);
        const dit_value_t *bias = operand(g, ins, n_in - 1);
        char b1[96];
        if (bias->dtype != DIT_F32 || bias->rank != 3 || bias->dims[0] != x->dims[1] || bias->dims[1] != k->dims[1] ||
            bias->dims[2] != heads)
          FAIL("%s: bias '%s' is %s %s, expected f32 [%" PRId64 ",%" PRId64 ",%" PRId64 "] (queries of '%s', keys of '%s', heads)", op,
               bias->name, dit_dtype_name(bias->dtype), dims_str(bias->rank, bias->dims, b1, sizeof b1), x->dims[1], k->dims[1], heads,
               x->name, k->name);
        n_in--; /* the rest is checked as without it */
      }
      if (!tiled && n_in == 5) FAIL("%s: a fifth input is a tile schedule only with attribute tiles = 1", op);
      if (tiled && n_in != 4)
        FAIL("%s: a tile schedule needs q, k, v and the schedule (%d inputs; a key bound with a schedule is not supported)", op, n_in);
      if (tiled) {
        const dit_value_t *t = operand(g, ins, 3);
        const int64_t nq = (x->dims[1] + DIT_SPARSE_TILE - 1) / DIT_SPARSE_TILE;
        const int64_t nk = (k->dims[1] + DIT_SPARSE_TILE - 1) / DIT_SPARSE_TILE;
        char b1[96];
        if (t->dtype != DIT_I32 || t->rank != 2 || t->dims[0] != nq || t->dims[1] < 2 || t->dims[1] > nk + 1)
          FAIL("%s: tile schedule '%s' is %s %s, expected i32 [%" PRId64 ", 2..%" PRId64 "] (query tiles of %d tokens of '%s', then a count and up to %" PRId64 " key tiles)",
               op, t->name, dit_dtype_name(t->dtype), dims_str(t->rank, t->dims, b1, sizeof b1), nq, nk + 1, DIT_SPARSE_TILE, x->name, nk);
      } else if (n_in == 4) {
        const dit_value_t *bound = operand(g, ins, 3);
        char b1[96];
        if (bound->dtype != DIT_I32 || bound->rank != 1 || bound->dims[0] != x->dims[0])
          FAIL("%s: bound '%s' is %s %s, expected i32 [%" PRId64 "] (one key bound per batch item of q '%s')", op, bound->name,
               dit_dtype_name(bound->dtype), dims_str(bound->rank, bound->dims, b1, sizeof b1), x->dims[0], x->name);
      }
      copy_shape(x, &out_rank[0], out_dims[0]);
      if (n_out == 2) {
        out_rank[1] = 3;
        out_dims[1][0] = x->dims[0];
        out_dims[1][1] = heads;
        out_dims[1][2] = x->dims[1];
      }
      break;
    }
    case DIT_OP_ATTN_QUANT:
    case DIT_OP_ATTN_QUANT_VT:
    case DIT_OP_ATTN_VMAX: {
      int64_t heads, rows = DIT_SPARSE_TILE;
      DIT_RETURN_IF(get_i(attrs, op, "heads", &heads, 1));
      if (kind == DIT_OP_ATTN_QUANT) DIT_RETURN_IF(get_i(attrs, op, "rows", &rows, 1));
      DIT_RETURN_IF(need_rank(op, "x", x, 3));
      if (!is_float(x->dtype)) FAIL("%s: operand x '%s' has dtype %s, expected f32, bf16 or f16", op, x->name, dit_dtype_name(x->dtype));
      if (x->dims[2] % heads) FAIL("%s: %" PRId64 " channels of x '%s' not divisible by %" PRId64 " heads", op, x->dims[2], x->name, heads);
      const int64_t B = x->dims[0], T = x->dims[1], Dh = x->dims[2] / heads;
      if (kind == DIT_OP_ATTN_VMAX) {
        int64_t splits;
        DIT_RETURN_IF(get_i(attrs, op, "splits", &splits, 1));
        if (splits > (T > 1 ? T : 1))
          FAIL("%s: attribute splits = %" PRId64 " exceeds the %" PRId64 " keys of x '%s' (every split needs one)", op, splits, T, x->name);
        out_rank[0] = 5;
        const int64_t d0[5] = {B, heads, splits, 3, Dh};
        memcpy(out_dims[0], d0, sizeof d0);
        break;
      }
      if (kind == DIT_OP_ATTN_QUANT_VT) {
        /* vmax: attn_vmax of x, any number of splits. */
        const dit_value_t *m = operand(g, ins, 1);
        const int64_t md[5] = {B, heads, m->rank == 5 ? m->dims[2] : 1, 3, Dh};
        DIT_RETURN_IF(expect_value(op, "vmax", m, DIT_F32, 5, md, "attn_vmax's largest, smallest and sum of x per head, split and channel"));
        if (md[2] < 1) FAIL("%s: vmax '%s' has no splits, expected at least one", op, m->name);
      }
      if (kind == DIT_OP_ATTN_QUANT) {
        /* Token rows may quantize act(x + bias): bias [C] float, act 0 or 1 (gelu_tanh). */
        const dit_attr_t *act = dit_attrs_find(attrs, "act");
        const int token_rows = heads == 1 && rows == 1;
        if (act && (act->is_float || act->i < 0 || act->i > 1))
          FAIL("%s: attribute act must be 0 or 1 (gelu_tanh)", op);
        if ((act || n_in > 1) && !token_rows)
          FAIL("%s: a bias or act needs token rows (heads = 1, rows = 1), found heads = %" PRId64 ", rows = %" PRId64, op, heads, rows);
        if (n_in > 1) {
          const dit_value_t *b = operand(g, ins, 1);
          if (b->rank != 1 || b->dims[0] != x->dims[2] || !is_float(b->dtype))
            FAIL("%s: bias '%s' must be float [%" PRId64 "]", op, b->name, x->dims[2]);
        }
      }
      out_rank[0] = out_rank[1] = 3;
      if (kind == DIT_OP_ATTN_QUANT) {
        copy_shape(x, &out_rank[0], out_dims[0]);
        const int64_t d1[3] = {B, heads, (T + rows - 1) / rows};
        memcpy(out_dims[1], d1, sizeof d1);
      } else {
        out_rank[0] = out_rank[1] = 4;
        const int64_t d0[4] = {B, heads, Dh, (T + DIT_SPARSE_TILE - 1) / DIT_SPARSE_TILE * DIT_SPARSE_TILE}, d1[4] = {B, heads, 2, Dh};
        memcpy(out_dims[0], d0, sizeof d0);
        memcpy(out_dims[1], d1, sizeof d1);
      }
      break;
    }
    case DIT_OP_ATTENTION_FP8: {
      int64_t heads;
      DIT_RETURN_IF(get_i(attrs, op, "heads", &heads, 1));
      double scale;
      DIT_RETURN_IF(dit_attrs_get_float(attrs, op, "scale", &scale));
      DIT_RETURN_IF(need_rank(op, "q8", x, 3));
      if (x->dims[2] % heads) FAIL("%s: %" PRId64 " channels of q8 '%s' not divisible by %" PRId64 " heads", op, x->dims[2], x->name, heads);
      const dit_value_t *k8 = operand(g, ins, 2);
      DIT_RETURN_IF(need_rank(op, "k8", k8, 3));
      const int64_t B = x->dims[0], S = x->dims[1], HD = x->dims[2], Dh = HD / heads, L = k8->dims[1];
      const int64_t Lp = (L + DIT_SPARSE_TILE - 1) / DIT_SPARSE_TILE * DIT_SPARSE_TILE;
      /* key_tile: keys per tile of the online softmax and per scale of k (128 unless set). */
      const dit_attr_t *kta = dit_attrs_find(attrs, "key_tile");
      const int64_t kt = kta ? kta->i : DIT_SPARSE_TILE;
      if (kta && (kta->is_float || kt < 32 || kt > 256 || kt % 32))
        FAIL("%s: attribute key_tile must be a multiple of 32 in 32..256", op);
      const int64_t qd[3] = {B, S, HD}, kd[3] = {B, L, HD}, qsd[3] = {B, heads, (S + 63) / 64}, ksd[3] = {B, heads, (L + kt - 1) / kt},
                    vtd[4] = {B, heads, Dh, Lp}, vsd[4] = {B, heads, 2, Dh};
      /* Q and K: both e4m3 or both int8 (the codes' dtype is q8's). */
      const dit_dtype_t qk = x->dtype == DIT_I8 ? DIT_I8 : DIT_F8E4M3;
      DIT_RETURN_IF(expect_value(op, "q8", x, qk, 3, qd, "attn_quant's codes of q"));
      DIT_RETURN_IF(expect_value(op, "qs", operand(g, ins, 1), DIT_F32, 3, qsd, "q's scales per head and 64 rows"));
      DIT_RETURN_IF(expect_value(op, "k8", k8, qk, 3, kd, "attn_quant's codes of k, q8's dtype, batch and channels"));
      DIT_RETURN_IF(expect_value(op, "ks", operand(g, ins, 3), DIT_F32, 3, ksd, "k's scales per head and key_tile rows"));
      /* V: e4m3 V^T and its scales (fp8 P V), or the float v itself (bf16 P V). */
      const dit_value_t *v4 = operand(g, ins, 4);
      const int pv8 = v4->dtype == DIT_F8E4M3, nv = pv8 ? 2 : 1;
      if (pv8) {
        DIT_RETURN_IF(expect_value(op, "vt8", v4, DIT_F8E4M3, 4, vtd, "attn_quant_vt's transposed v, keys padded to 128"));
        if (n_in < 6) FAIL("%s: vt8 '%s' without its scales vs (6 or 7 inputs), found %d inputs", op, v4->name, n_in);
        DIT_RETURN_IF(expect_value(op, "vs", operand(g, ins, 5), DIT_F32, 4, vsd, "v's scales and means per head and channel"));
      } else if (!is_float(v4->dtype) || v4->rank != 3 || v4->dims[0] != B || v4->dims[1] != L || v4->dims[2] != HD) {
        char b1[96];
        FAIL("%s: v '%s' is %s %s, expected f8e4m3 [%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "] (attn_quant_vt's) or a float "
             "[%" PRId64 ",%" PRId64 ",%" PRId64 "] (k8's batch, keys and channels)", op, v4->name, dit_dtype_name(v4->dtype),
             dims_str(v4->rank, v4->dims, b1, sizeof b1), B, heads, Dh, Lp, B, L, HD);
      }
      const dit_attr_t *ta = dit_attrs_find(attrs, "tiles");
      const int tiled = ta && !ta->is_float && ta->i == 1;
      if (ta && !tiled) FAIL("%s: attribute tiles must be 1 (the last input is a tile schedule) when present", op);
      if (tiled && kt != DIT_SPARSE_TILE) FAIL("%s: attribute key_tile = %" PRId64 " with a tile schedule, expected %d", op, kt, DIT_SPARSE_TILE);
      /* Then a tile schedule (exactly with tiles = 1) or a key bound i32 [B] (without), or nothing. */
      const int bounded = !tiled && n_in == 5 + nv;
      if (n_in != 4 + nv + tiled + bounded)
        FAIL("%s: %d inputs with %s and attribute tiles %s: expected %d (a tile schedule last, present exactly with tiles = 1)%s", op, n_in,
             pv8 ? "vt8, vs" : "v", tiled ? "= 1" : "absent", 4 + nv + tiled, tiled ? "" : " or one more (a key bound)");
      if (bounded) {
        const dit_value_t *bd = operand(g, ins, 4 + nv);
        char b1[96];
        if (bd->dtype != DIT_I32 || bd->rank != 1 || bd->dims[0] != B)
          FAIL("%s: key bound '%s' is %s %s, expected i32 [%" PRId64 "] (one bound a batch item)", op, bd->name, dit_dtype_name(bd->dtype),
               dims_str(bd->rank, bd->dims, b1, sizeof b1), B);
      }
      if (tiled) {
        const dit_value_t *t = operand(g, ins, 4 + nv);
        const int64_t nq = (S + DIT_SPARSE_TILE - 1) / DIT_SPARSE_TILE, nk = Lp / DIT_SPARSE_TILE;
        char b1[96];
        if (t->dtype != DIT_I32 || t->rank != 2 || t->dims[0] != nq || t->dims[1] < 2 || t->dims[1] > nk + 1)
          FAIL("%s: tile schedule '%s' is %s %s, expected i32 [%" PRId64 ", 2..%" PRId64 "] (query tiles of %d tokens, then a count and up to %" PRId64 " key tiles)",
               op, t->name, dit_dtype_name(t->dtype), dims_str(t->rank, t->dims, b1, sizeof b1), nq, nk + 1, DIT_SPARSE_TILE, nk);
      }
      copy_shape(x, &out_rank[0], out_dims[0]);
      if (n_out == 2) {
        out_rank[1] = 3;
        out_dims[1][0] = B;
        out_dims[1][1] = heads;
        out_dims[1][2] = S;
      }
      break;
    }
    case DIT_OP_GATED_ADD: {
      static const char *const keys[] = {"gate"};
      DIT_RETURN_IF(need_rank(op, "x", x, 3));
      if (!same_shape(x, operand(g, ins, 1))) FAIL("%s: x and y differ in shape", op);
      if (n_in == 4) DIT_RETURN_IF(check_mod_tok(op, x, operand(g, ins, 2), operand(g, ins, 3), attrs, keys, 1));
      else DIT_RETURN_IF(check_mod(op, x, operand(g, ins, 2), attrs, keys, 1));
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    }
    case DIT_OP_ROWSUMSQ:
      copy_shape(x, &out_rank[0], out_dims[0]);
      out_dims[0][x->rank - 1] = 1;
      break;
    case DIT_OP_RMSNORM_SLICE: {
      const dit_value_t *ss = operand(g, ins, 1), *w = operand(g, ins, 2);
      int64_t dim;
      DIT_RETURN_IF(get_i(attrs, op, "dim", &dim, 1));
      if (ss->rank != x->rank || ss->dims[x->rank - 1] != 1 || dit_value_numel(ss) * x->dims[x->rank - 1] != dit_value_numel(x))
        FAIL("%s: sumsq '%s' must hold one value per row of '%s'", op, ss->name, x->name);
      if (w->rank != 1 || w->dims[0] != x->dims[x->rank - 1])
        FAIL("%s: weight '%s' must be [%" PRId64 "]", op, w->name, x->dims[x->rank - 1]);
      if (dim < x->dims[x->rank - 1]) FAIL("%s: dim %" PRId64 " is less than the slice's %" PRId64, op, dim, x->dims[x->rank - 1]);
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    }
    case DIT_OP_ALLREDUCE: {
      int64_t group;
      DIT_RETURN_IF(get_i(attrs, op, "group", &group, 0));
      if (group > 2) FAIL("%s: group %" PRId64 " (0 tp, 1 cp, 2 cfg)", op, group);
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    }
    case DIT_OP_TOKEN_ROWS: {
      int64_t group;
      DIT_RETURN_IF(need_rank(op, "x", x, 2));
      DIT_RETURN_IF(get_i(attrs, op, "group", &group, 1));
      if (x->dims[1] % group) FAIL("%s: group %" PRId64 " does not divide the %" PRId64 " tokens of '%s'", op, group, x->dims[1], x->name);
      copy_shape(x, &out_rank[0], out_dims[0]);
      out_dims[0][1] = x->dims[1] / group;
      break;
    }
    case DIT_OP_SLICE_TOKENS: {
      int64_t t0, count;
      DIT_RETURN_IF(need_rank(op, "x", x, 3));
      DIT_RETURN_IF(get_i(attrs, op, "t0", &t0, 0));
      DIT_RETURN_IF(get_i(attrs, op, "count", &count, 1));
      if (t0 + count > x->dims[1]) FAIL("%s: tokens [%" PRId64 ", %" PRId64 ") outside %" PRId64, op, t0, t0 + count, x->dims[1]);
      copy_shape(x, &out_rank[0], out_dims[0]);
      out_dims[0][1] = count;
      break;
    }
    case DIT_OP_REDUCE_SCATTER: {
      int64_t group, n;
      DIT_RETURN_IF(need_rank(op, "x", x, 3));
      DIT_RETURN_IF(get_i(attrs, op, "group", &group, 0));
      DIT_RETURN_IF(get_i(attrs, op, "n", &n, 1));
      if (x->dims[1] % n) FAIL("%s: %" PRId64 " tokens not divisible by %" PRId64, op, x->dims[1], n);
      copy_shape(x, &out_rank[0], out_dims[0]);
      out_dims[0][1] = x->dims[1] / n;
      break;
    }
    case DIT_OP_RING_SHIFT: {
      int64_t group, n;
      DIT_RETURN_IF(get_i(attrs, op, "group", &group, 0));
      DIT_RETURN_IF(get_i(attrs, op, "n", &n, 1));
      const dit_attr_t *d = dit_attrs_find(attrs, "distance");
      if (d && (d->i < 1 || d->i >= n)) FAIL("%s: distance %lld: expected 1..%lld (the group has %lld members)", op, (long long)d->i, (long long)n - 1, (long long)n);
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    }
    case DIT_OP_STATE_CACHE: {
      int64_t slot, copies;
      const dit_value_t *lse = operand(g, ins, 1);
      DIT_RETURN_IF(get_i(attrs, op, "slot", &slot, 0));
      DIT_RETURN_IF(get_i(attrs, op, "copies", &copies, 1));
      if (copies > 2) FAIL("%s: copies %lld: expected 1 or 2", op, (long long)copies);
      DIT_RETURN_IF(need_rank(op, "o", x, 3));
      if (lse->rank != 3 || lse->dims[0] != x->dims[0] || lse->dims[2] != x->dims[1] || lse->dtype != DIT_F32)
        FAIL("%s: lse '%s' is not the f32 [B, H, S] of o '%s'", op, lse->name, x->name);
      copy_shape(x, &out_rank[0], out_dims[0]);
      copy_shape(lse, &out_rank[1], out_dims[1]);
      break;
    }
    case DIT_OP_ATTN_MERGE: {
      int64_t heads;
      const dit_value_t *la = operand(g, ins, 1), *ob = operand(g, ins, 2), *lb = operand(g, ins, 3);
      DIT_RETURN_IF(get_i(attrs, op, "heads", &heads, 1));
      DIT_RETURN_IF(need_rank(op, "o_a", x, 3));
      if (!same_shape(x, ob) || !same_shape(la, lb) || la->rank != 3 || la->dims[0] != x->dims[0] || la->dims[1] != heads ||
          la->dims[2] != x->dims[1] || x->dims[2] % heads)
        FAIL("%s: states [B, S, H*Dh] and [B, H, S] of '%s' and '%s' do not match", op, x->name, ob->name);
      copy_shape(x, &out_rank[0], out_dims[0]);
      copy_shape(la, &out_rank[1], out_dims[1]);
      break;
    }
    case DIT_OP_ALLGATHER:
    case DIT_OP_ALLTOALL: {
      int64_t group, n;
      DIT_RETURN_IF(need_rank(op, "x", x, 3));
      DIT_RETURN_IF(get_i(attrs, op, "group", &group, 0));
      DIT_RETURN_IF(get_i(attrs, op, "n", &n, 1));
      copy_shape(x, &out_rank[0], out_dims[0]);
      if (kind == DIT_OP_ALLGATHER) {
        out_dims[0][1] = x->dims[1] * n;
        break;
      }
      int64_t heads, reverse = 0;
      DIT_RETURN_IF(get_i(attrs, op, "heads", &heads, 1));
      const dit_attr_t *rv = dit_attrs_find(attrs, "reverse");
      if (rv) reverse = rv->i;
      if (heads % n) FAIL("%s: %" PRId64 " heads not divisible by the group of %" PRId64, op, heads, n);
      int64_t dh = (reverse ? x->dims[2] * n : x->dims[2]) / heads;
      if (dh * heads != (reverse ? x->dims[2] * n : x->dims[2])) FAIL("%s: channels do not split into %" PRId64 " heads", op, heads);
      if (!reverse) {
        out_dims[0][1] = x->dims[1] * n;
        out_dims[0][2] = x->dims[2] / n;
      } else {
        if (x->dims[1] % n) FAIL("%s: %" PRId64 " tokens not divisible by %" PRId64, op, x->dims[1], n);
        out_dims[0][1] = x->dims[1] / n;
        out_dims[0][2] = x->dims[2] * n;
      }
      break;
    }
    case DIT_OP_RESHAPE: {
      int64_t rank, numel = 1;
      char key[16], b1[96], b2[96];
      DIT_RETURN_IF(get_i(attrs, op, "rank", &rank, 1));
      if (rank > DIT_MAX_RANK) FAIL("%s: attribute rank = %" PRId64 ", expected 1..%d", op, rank, DIT_MAX_RANK);
      snprintf(key, sizeof key, "d%d", (int)rank);
      if (dit_attrs_find(attrs, key)) FAIL("%s: attribute %s given for rank %" PRId64 " (dims d0..d%d)", op, key, rank, (int)rank - 1);
      for (int i = 0; i < rank; i++) {
        snprintf(key, sizeof key, "d%d", i);
        DIT_RETURN_IF(get_i(attrs, op, key, &out_dims[0][i], 0));
        if (out_dims[0][i] && numel > INT64_MAX / out_dims[0][i]) FAIL("%s: dims overflow 64-bit element counts", op);
        numel *= out_dims[0][i];
      }
      out_rank[0] = (int)rank;
      if (numel != dit_value_numel(x))
        FAIL("%s: dims %s hold %" PRId64 " elements, x '%s' %s has %" PRId64, op, dims_str((int)rank, out_dims[0], b1, sizeof b1), numel,
             x->name, dims_str(x->rank, x->dims, b2, sizeof b2), dit_value_numel(x));
      break;
    }
    case DIT_OP_CONCAT: {
      const dit_value_t *b = operand(g, ins, 1);
      int64_t dim;
      char b1[96], b2[96];
      DIT_RETURN_IF(get_i(attrs, op, "dim", &dim, 0));
      if (b->rank != x->rank) FAIL("%s: operands '%s' (rank %d) and '%s' (rank %d) differ in rank", op, x->name, x->rank, b->name, b->rank);
      if (dim >= x->rank) FAIL("%s: attribute dim = %" PRId64 " outside 0..%d of '%s'", op, dim, x->rank - 1, x->name);
      if (b->dtype != x->dtype)
        FAIL("%s: operands '%s' (%s) and '%s' (%s) differ in dtype", op, x->name, dit_dtype_name(x->dtype), b->name,
             dit_dtype_name(b->dtype));
      for (int i = 0; i < x->rank; i++)
        if (i != dim && b->dims[i] != x->dims[i])
          FAIL("%s: operands '%s' %s and '%s' %s differ in dim %d, not only in the concatenated dim %" PRId64, op, x->name,
               dims_str(x->rank, x->dims, b1, sizeof b1), b->name, dims_str(b->rank, b->dims, b2, sizeof b2), i, dim);
      copy_shape(x, &out_rank[0], out_dims[0]);
      out_dims[0][dim] += b->dims[dim];
      break;
    }
    case DIT_OP_ROPE_TABLE: {
      const dit_value_t *cs = operand(g, ins, 1);
      int64_t heads;
      DIT_RETURN_IF(need_rank(op, "x", x, 3));
      DIT_RETURN_IF(need_rank(op, "cs", cs, 2));
      DIT_RETURN_IF(get_i(attrs, op, "heads", &heads, 1));
      if (!is_float(x->dtype)) FAIL("%s: operand x '%s' has dtype %s, expected f32, bf16 or f16", op, x->name, dit_dtype_name(x->dtype));
      if (cs->dtype != DIT_F32) FAIL("%s: table '%s' has dtype %s, expected f32", op, cs->name, dit_dtype_name(cs->dtype));
      const int64_t dh = x->dims[2] / heads;
      if (x->dims[2] % heads || dh % 2)
        FAIL("%s: %" PRId64 " channels of '%s' do not split into %" PRId64 " heads of an even head dim", op, x->dims[2], x->name, heads);
      if (cs->dims[0] != x->dims[1] || cs->dims[1] != dh)
        FAIL("%s: table '%s' is [%" PRId64 ",%" PRId64 "], expected [%" PRId64 ",%" PRId64 "] (tokens of '%s', head dim)", op, cs->name,
             cs->dims[0], cs->dims[1], x->dims[1], dh, x->name);
      if (n_in == 3) DIT_RETURN_IF(check_rope_norm(op, x, operand(g, ins, 2), attrs));
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    }
    case DIT_OP_KEY_BOUND: {
      int64_t offset;
      DIT_RETURN_IF(need_rank(op, "mask", x, 2));
      DIT_RETURN_IF(get_i(attrs, op, "offset", &offset, 0));
      /* The bound is an i32: the largest, offset + L, must fit. */
      if (offset > INT32_MAX - x->dims[1])
        FAIL("%s: attribute offset = %" PRId64 " plus the %" PRId64 " entries of mask '%s' exceeds the i32 range", op, offset,
             x->dims[1], x->name);
      out_rank[0] = 1;
      out_dims[0][0] = x->dims[0];
      break;
    }
    case DIT_OP_EMBEDDING: {
      const dit_value_t *t = operand(g, ins, 1);
      if (x->dtype != DIT_I32 && x->dtype != DIT_I64)
        FAIL("%s: ids '%s' have dtype %s, expected i32 or i64", op, x->name, dit_dtype_name(x->dtype));
      DIT_RETURN_IF(need_rank(op, "table", t, 2));
      if (!is_float(t->dtype)) FAIL("%s: table '%s' has dtype %s, expected f32, bf16 or f16", op, t->name, dit_dtype_name(t->dtype));
      if (x->rank + 1 > DIT_MAX_RANK) FAIL("%s: ids '%s' of rank %d leave no room for the row dim", op, x->name, x->rank);
      copy_shape(x, &out_rank[0], out_dims[0]);
      out_rank[0] = x->rank + 1;
      out_dims[0][x->rank] = t->dims[1];
      break;
    }
    case DIT_OP_CONV3D: {
      const dit_value_t *w = operand(g, ins, 1);
      dit_conv3d_attrs_t ca;
      char b1[96], b2[96];
      DIT_RETURN_IF(need_rank(op, "x", x, 5));
      DIT_RETURN_IF(dit_conv3d_attrs_get(attrs, op, &ca));
      if (!is_float(x->dtype) || !is_float(w->dtype))
        FAIL("%s: operands x '%s' (%s) and w '%s' (%s) must be f32, bf16 or f16", op, x->name, dit_dtype_name(x->dtype), w->name,
             dit_dtype_name(w->dtype));
      if (w->rank != 4 && w->rank != 5)
        FAIL("%s: weight '%s' has rank %d, expected [Cout, kt, kh, kw, Cin] or [Cout, kh, kw, Cin]", op, w->name, w->rank);
      const int64_t kt = w->rank == 5 ? w->dims[1] : 1, kh = w->dims[w->rank - 3], kw = w->dims[w->rank - 2], cin = w->dims[w->rank - 1];
      if (cin != x->dims[4])
        FAIL("%s: weight '%s' %s takes %" PRId64 " input channels, x '%s' %s has %" PRId64, op, w->name,
             dims_str(w->rank, w->dims, b1, sizeof b1), cin, x->name, dims_str(x->rank, x->dims, b2, sizeof b2), x->dims[4]);
      if (kt < 1 || kh < 1 || kw < 1) FAIL("%s: weight '%s' has an empty kernel", op, w->name);
      /* The padded extents the kernel slides over, by the strides. */
      const int64_t ft = x->dims[1] + ca.pad_t - kt, ht = x->dims[2] + ca.pad_h + ca.pad_h_after - kh,
                    wt = x->dims[3] + ca.pad_w + ca.pad_w_after - kw;
      if (ft < 0 || ht < 0 || wt < 0) {
        if (ca.pad_h_after != ca.pad_h || ca.pad_w_after != ca.pad_w)
          FAIL("%s: kernel %" PRId64 "x%" PRId64 "x%" PRId64 " with padding (%" PRId64 ", %" PRId64 "+%" PRId64 ", %" PRId64 "+%" PRId64
               ") does not fit x '%s' %s", op, kt, kh, kw, ca.pad_t, ca.pad_h, ca.pad_h_after, ca.pad_w, ca.pad_w_after, x->name,
               dims_str(x->rank, x->dims, b1, sizeof b1));
        FAIL("%s: kernel %" PRId64 "x%" PRId64 "x%" PRId64 " with padding (%" PRId64 ", %" PRId64 ", %" PRId64 ") does not fit x '%s' %s", op,
             kt, kh, kw, ca.pad_t, ca.pad_h, ca.pad_w, x->name, dims_str(x->rank, x->dims, b1, sizeof b1));
      }
      if (n_in == 3) {
        const dit_value_t *b = operand(g, ins, 2);
        if (b->rank != 1 || b->dims[0] != w->dims[0]) FAIL("%s: bias '%s' must be [%" PRId64 "]", op, b->name, w->dims[0]);
      }
      out_rank[0] = 5;
      out_dims[0][0] = x->dims[0];
      out_dims[0][1] = ft / ca.stride_t + 1;
      out_dims[0][2] = ht / ca.stride_h + 1;
      out_dims[0][3] = wt / ca.stride_w + 1;
      out_dims[0][4] = w->dims[0];
      break;
    }
    case DIT_OP_UPSAMPLE: {
      int64_t scale;
      DIT_RETURN_IF(need_rank(op, "x", x, 5));
      DIT_RETURN_IF(get_i(attrs, op, "scale", &scale, 1));
      if (scale > 64) FAIL("%s: attribute scale = %" PRId64 ", expected 1..64", op, scale);
      copy_shape(x, &out_rank[0], out_dims[0]);
      out_dims[0][2] *= scale;
      out_dims[0][3] *= scale;
      break;
    }
    case DIT_OP_CLAMP: {
      double lo, hi;
      DIT_RETURN_IF(dit_attrs_get_float(attrs, op, "lo", &lo));
      DIT_RETURN_IF(dit_attrs_get_float(attrs, op, "hi", &hi));
      if (!(lo <= hi)) FAIL("%s: attributes lo = %g and hi = %g: expected lo <= hi", op, lo, hi);
      if (!is_float(x->dtype)) FAIL("%s: operand x '%s' has dtype %s, expected f32, bf16 or f16", op, x->name, dit_dtype_name(x->dtype));
      copy_shape(x, &out_rank[0], out_dims[0]);
      break;
    }
    case DIT_OP_TOKEN_SELECT: {
      const dit_value_t *ids = operand(g, ins, 1);
      int64_t eos;
      char b1[96], b2[96];
      DIT_RETURN_IF(need_rank(op, "x", x, 3));
      DIT_RETURN_IF(get_i(attrs, op, "eos", &eos, -1));
      if (ids->dtype != DIT_I32 && ids->dtype != DIT_I64)
        FAIL("%s: ids '%s' have dtype %s, expected i32 or i64", op, ids->name, dit_dtype_name(ids->dtype));
      if (ids->rank != 2 || ids->dims[0] != x->dims[0] || ids->dims[1] != x->dims[1])
        FAIL("%s: ids '%s' %s, expected [%" PRId64 ",%" PRId64 "] as the batch and tokens of x '%s' %s", op, ids->name,
             dims_str(ids->rank, ids->dims, b1, sizeof b1), x->dims[0], x->dims[1], x->name, dims_str(x->rank, x->dims, b2, sizeof b2));
      out_rank[0] = 2;
      out_dims[0][0] = x->dims[0];
      out_dims[0][1] = x->dims[2];
      break;
    }
    case DIT_OP_COUNT:
      FAIL("unknown op kind");
  }
  return DIT_OK;
}

dit_status_t dit_check_out_dtypes(const dit_graph_t *g, dit_op_kind_t kind, const dit_vid_t *ins, int n_out,
                                  const dit_dtype_t *out_dtypes) {
  switch (kind) {
    case DIT_OP_RESHAPE:
    case DIT_OP_CONCAT:
    case DIT_OP_UPSAMPLE:
    case DIT_OP_TOKEN_SELECT:
    case DIT_OP_TOKEN_ROWS:
    case DIT_OP_ROPE_TABLE: {
      /* Data movement, and a rotation rounded once to its input's type: the dtype is x's. */
      const dit_value_t *x = operand(g, ins, 0);
      if (n_out >= 1 && out_dtypes[0] != x->dtype)
        FAIL("%s: output dtype %s, expected %s as operand x '%s'", dit_op_info(kind)->name, dit_dtype_name(out_dtypes[0]),
             dit_dtype_name(x->dtype), x->name);
      return DIT_OK;
    }
    case DIT_OP_STATE_CACHE: {
      /* A copy: o keeps its dtype, lse stays fp32. */
      const dit_value_t *x = operand(g, ins, 0);
      if (n_out == 2 && (out_dtypes[0] != x->dtype || out_dtypes[1] != DIT_F32))
        FAIL("state_cache: output dtypes %s and %s, expected %s (as o '%s') and f32", dit_dtype_name(out_dtypes[0]),
             dit_dtype_name(out_dtypes[1]), dit_dtype_name(x->dtype), x->name);
      return DIT_OK;
    }
    case DIT_OP_LAYERNORM:
    case DIT_OP_ADALN: {
      /* A folded residual's sum is stored as x is; a folded row quantizer (e4m3 first output)
       * writes fp32 row scales last. */
      const dit_value_t *x = operand(g, ins, 0);
      const int quant = n_out >= 1 && out_dtypes[0] == DIT_F8E4M3, sum = quant ? (n_out == 3 ? 1 : -1) : (n_out == 2 ? 1 : -1);
      if (sum > 0 && out_dtypes[sum] != x->dtype)
        FAIL("%s: the residual sum's dtype %s, expected %s as operand x '%s'", dit_op_info(kind)->name, dit_dtype_name(out_dtypes[sum]),
             dit_dtype_name(x->dtype), x->name);
      if (quant && (n_out < 2 || out_dtypes[n_out - 1] != DIT_F32))
        FAIL("%s: e4m3 codes need fp32 row scales as the last output", dit_op_info(kind)->name);
      return DIT_OK;
    }
    case DIT_OP_GROUPNORM_STATS:
      if (n_out >= 1 && out_dtypes[0] != DIT_F32)
        FAIL("groupnorm_stats: output dtype %s, expected f32", dit_dtype_name(out_dtypes[0]));
      return DIT_OK;
    case DIT_OP_EMBEDDING:
      if (n_out >= 1 && !is_float(out_dtypes[0]))
        FAIL("embedding: output dtype %s, expected f32, bf16 or f16", dit_dtype_name(out_dtypes[0]));
      return DIT_OK;
    case DIT_OP_ATTN_QUANT:
      if (n_out == 2 && ((out_dtypes[0] != DIT_F8E4M3 && out_dtypes[0] != DIT_I8) || out_dtypes[1] != DIT_F32))
        FAIL("attn_quant: output dtypes %s and %s, expected f8e4m3 or i8 (the codes) and f32 (the scales)", dit_dtype_name(out_dtypes[0]),
             dit_dtype_name(out_dtypes[1]));
      return DIT_OK;
    case DIT_OP_ATTN_QUANT_VT:
      if (n_out == 2 && (out_dtypes[0] != DIT_F8E4M3 || out_dtypes[1] != DIT_F32))
        FAIL("attn_quant_vt: output dtypes %s and %s, expected f8e4m3 (the codes) and f32 (the scales and means)", dit_dtype_name(out_dtypes[0]),
             dit_dtype_name(out_dtypes[1]));
      return DIT_OK;
    case DIT_OP_ATTN_VMAX:
      if (n_out >= 1 && out_dtypes[0] != DIT_F32) FAIL("attn_vmax: output dtype %s, expected f32", dit_dtype_name(out_dtypes[0]));
      return DIT_OK;
    case DIT_OP_ATTENTION_FP8:
      for (int i = 0; i < n_out; i++)
        if (!is_float(out_dtypes[i]))
          FAIL("attention_fp8: output %d dtype %s, expected f32, bf16 or f16", i, dit_dtype_name(out_dtypes[i]));
      return DIT_OK;
    case DIT_OP_KEY_BOUND:
      if (n_out >= 1 && out_dtypes[0] != DIT_I32)
        FAIL("key_bound: output dtype %s, expected i32", dit_dtype_name(out_dtypes[0]));
      return DIT_OK;
    default:
      return DIT_OK;
  }
}
