/* The shared DiT building blocks (blocks.h): the ops a family frontend's graph is made of,
 * with the tensor-, context- and sequence-parallel forms of each. */
#include "compiler/frontends/blocks.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/frontend.h"

struct dit_blocks {
  dit_graph_t *g;
  const dit_safetensors_t *weights;
  dit_blocks_options_t o;
  dit_status_t err; /* first error of a two-output op (the graph records single-output ones) */
  int reuse_layers; /* self-attention layers built with attention-state reuse so far */
};

dit_status_t dit_blocks_begin(const dit_safetensors_t *weights, const dit_blocks_options_t *opts, dit_graph_t **g, dit_blocks_t **b) {
  *b = NULL;
  DIT_RETURN_IF(dit_graph_create(g));
  dit_status_t s = dit_blocks_create(*g, weights, opts, b);
  if (s) {
    dit_graph_destroy(*g);
    *g = NULL;
  }
  return s;
}

/* The ring members that reuse groups partition: the cp ranks under ring, the cp / U Ulysses
 * subgroups under usp (0 where U does not divide cp). */
static int reuse_members(const dit_blocks_options_t *o) {
  if (o->cp_mode != DIT_CP_USP) return o->cp;
  return o->ulysses > 0 && o->cp % o->ulysses == 0 ? o->cp / o->ulysses : 0;
}

dit_status_t dit_blocks_create(dit_graph_t *g, const dit_safetensors_t *weights, const dit_blocks_options_t *opts,
                               dit_blocks_t **out) {
  *out = NULL;
  if (opts->tp < 1 || opts->tp_rank < 0 || opts->tp_rank >= opts->tp)
    return DIT_ERR(INVALID_ARGUMENT, "blocks: tensor-parallel rank %d of degree %d, expected 0..degree-1", opts->tp_rank,
                   opts->tp);
  if (opts->cp < 1 || opts->cp_rank < 0 || opts->cp_rank >= opts->cp)
    return DIT_ERR(INVALID_ARGUMENT, "blocks: context-parallel rank %d of degree %d, expected 0..degree-1", opts->cp_rank,
                   opts->cp);
  if (opts->heads < 1 || opts->head_dim < 1 || opts->heads % opts->tp)
    return DIT_ERR(INVALID_ARGUMENT, "blocks: %lld heads of width %lld, expected positive and divisible by tp %d",
                   (long long)opts->heads, (long long)opts->head_dim, opts->tp);
  const int members = reuse_members(opts);
  if (opts->reuse_group && (opts->reuse_group < 1 || members < 1 || members % opts->reuse_group || members / opts->reuse_group < 2))
    return DIT_ERR(INVALID_ARGUMENT, "blocks: reuse groups of %d ring members: expected a divisor of the %d ring members leaving >= 2 groups",
                   opts->reuse_group, members);
  if (opts->reuse_group && opts->reuse_merge && (opts->reuse_merge < 1 || opts->reuse_merge > members / opts->reuse_group - 1))
    return DIT_ERR(INVALID_ARGUMENT, "blocks: %d remote reuse groups per cached state: expected 1..%d (the remote groups)", opts->reuse_merge,
                   members / opts->reuse_group - 1);
  dit_blocks_t *b = calloc(1, sizeof *b);
  if (!b) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  b->g = g;
  b->weights = weights;
  b->o = *opts;
  *out = b;
  return DIT_OK;
}

void dit_blocks_destroy(dit_blocks_t *b) {
  if (!b) return;
  dit_status_free(b->err);
  free(b);
}

dit_graph_t *dit_blocks_graph(const dit_blocks_t *b) { return b->g; }

dit_status_t dit_blocks_status(dit_blocks_t *b) {
  if (b->err) {
    dit_status_t s = b->err;
    b->err = DIT_OK;
    return s;
  }
  dit_status_t g = dit_graph_status(b->g); /* borrowed from the graph: hand out a copy */
  return g ? dit_status_make(dit_status_code(g), "%s", dit_status_message(g)) : DIT_OK;
}

dit_status_t dit_blocks_finish(dit_blocks_t *b, dit_graph_t *g, const char *model, dit_graph_t **out) {
  dit_status_t s = dit_blocks_status(b);
  dit_blocks_destroy(b);
  if (s) {
    dit_status_t wrapped = dit_status_make(dit_status_code(s), "building the %s graph: %s", model, dit_status_message(s));
    dit_status_free(s);
    dit_graph_destroy(g);
    return wrapped;
  }
  *out = g;
  return DIT_OK;
}

static void op2(dit_blocks_t *b, dit_op_kind_t kind, const dit_vid_t *ins, int n_in, const dit_attrs_t *a,
                const dit_dtype_t dts[2], const char *name, dit_vid_t out[2]) {
  out[0] = out[1] = -1;
  dit_status_t s = dit_graph_op2(b->g, kind, ins, n_in, a, dts, name, out);
  if (s && !b->err) b->err = s;
  else dit_status_free(s);
}

/* ---- weights and linears ---- */

static dit_dtype_t weight_dtype(const dit_blocks_t *b, const char *key) {
  if (b->o.dtype == DIT_F32) return DIT_F32;
  for (const char *const *k = b->o.f32_keys; k && *k; k++)
    if (strstr(key, *k)) return DIT_F32;
  return b->o.dtype;
}

dit_vid_t dit_blocks_weight(dit_blocks_t *b, const char *fmt, ...) {
  char key[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(key, sizeof key, fmt, ap);
  va_end(ap);
  const dit_st_tensor_t *t = dit_safetensors_find(b->weights, key);
  if (!t) {
    /* The family checked its checkpoint; reaching this is a frontend bug. Record it through a bad op. */
    return dit_graph_weight(b->g, key, DIT_F32, -1, NULL);
  }
  return dit_graph_weight(b->g, key, weight_dtype(b, key), t->rank, t->dims);
}

dit_vid_t dit_blocks_weight_shard(dit_blocks_t *b, const char *key, int dim) {
  const dit_st_tensor_t *t = dit_safetensors_find(b->weights, key);
  if (!t) return dit_graph_weight(b->g, key, DIT_F32, -1, NULL);
  int64_t part = t->dims[dim] / b->o.tp;
  return dit_graph_weight_slice(b->g, key, weight_dtype(b, key), t->rank, t->dims, dim, b->o.tp_rank * part, part);
}

dit_vid_t dit_blocks_linear(dit_blocks_t *b, dit_vid_t x, const char *prefix, dit_dtype_t out_dtype, const char *name) {
  dit_vid_t ins[3] = {x, dit_blocks_weight(b, "%s.weight", prefix), dit_blocks_weight(b, "%s.bias", prefix)};
  return dit_graph_op(b->g, DIT_OP_LINEAR, ins, 3, NULL, out_dtype, name);
}

static dit_vid_t allreduce(dit_blocks_t *b, dit_vid_t x, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "group", 0);
  return dit_graph_op(b->g, DIT_OP_ALLREDUCE, &x, 1, &a, dit_graph_cvalue(b->g, x)->dtype, name);
}

dit_vid_t dit_blocks_linear_col(dit_blocks_t *b, dit_vid_t x, const char *prefix, dit_dtype_t out_dtype,
                                const char *name) {
  if (b->o.tp == 1) return dit_blocks_linear(b, x, prefix, out_dtype, name);
  char kw[160], kb[160];
  snprintf(kw, sizeof kw, "%s.weight", prefix);
  snprintf(kb, sizeof kb, "%s.bias", prefix);
  dit_vid_t ins[3] = {x, dit_blocks_weight_shard(b, kw, 0), dit_blocks_weight_shard(b, kb, 0)};
  return dit_graph_op(b->g, DIT_OP_LINEAR, ins, 3, NULL, out_dtype, name);
}

/* A row-parallel product's fp32 partial sums over the tensor-parallel group: all-reduced, or
 * reduce-scattered over the tokens with sequence parallelism. */
static dit_vid_t row_sum(dit_blocks_t *b, dit_vid_t p, const char *name) {
  if (!b->o.sp) return allreduce(b, p, name);
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "group", 0);
  dit_attrs_set_int(&a, "n", b->o.tp);
  return dit_graph_op(b->g, DIT_OP_REDUCE_SCATTER, &p, 1, &a, DIT_F32, name);
}

dit_vid_t dit_blocks_linear_row(dit_blocks_t *b, dit_vid_t x, const char *prefix, const char *name) {
  if (b->o.tp == 1) return dit_blocks_linear(b, x, prefix, b->o.dtype, name);
  char kw[160], partial[192];
  snprintf(kw, sizeof kw, "%s.weight", prefix);
  snprintf(partial, sizeof partial, "%s.partial", name);
  /* The bias in fp32, the partial product's dtype: a GEMM library adds it in its epilogue. */
  char kbias[160];
  snprintf(kbias, sizeof kbias, "%s.bias", prefix);
  const dit_st_tensor_t *bt = dit_safetensors_find(b->weights, kbias);
  const int rank0 = b->o.tp_rank == 0;
  dit_vid_t bias = !rank0 ? -1 : bt ? dit_graph_weight(b->g, kbias, DIT_F32, bt->rank, bt->dims)
                                    : dit_blocks_weight(b, "%s", kbias);
  dit_vid_t ins[3] = {x, dit_blocks_weight_shard(b, kw, 1), bias};
  return row_sum(b, dit_graph_op(b->g, DIT_OP_LINEAR, ins, rank0 ? 3 : 2, NULL, DIT_F32, partial), name);
}

dit_vid_t dit_blocks_linear_row2(dit_blocks_t *b, dit_vid_t x1, dit_vid_t x2, const char *prefix, int64_t split, const char *name) {
  char n1[224], kw[160], kb[160], ref[192];
  if (b->o.tp == 1) {
    snprintf(n1, sizeof n1, "%s.in", name);
    return dit_blocks_linear(b, dit_blocks_concat(b, x1, x2, 2, n1), prefix, b->o.dtype, name);
  }
  snprintf(kw, sizeof kw, "%s.weight", prefix);
  snprintf(kb, sizeof kb, "%s.bias", prefix);
  const dit_st_tensor_t *wt = dit_safetensors_find(b->weights, kw), *bt = dit_safetensors_find(b->weights, kb);
  if (!wt || wt->rank != 2 || split <= 0 || split >= wt->dims[1] || split % b->o.tp || (wt->dims[1] - split) % b->o.tp) {
    b->err = b->err ? b->err : DIT_ERR(INTERNAL, "blocks: '%s' cannot be split at column %lld over %d ranks", kw, (long long)split, b->o.tp);
    return -1;
  }
  const int64_t p1 = split / b->o.tp, p2 = (wt->dims[1] - split) / b->o.tp;
  const int rank0 = b->o.tp_rank == 0;
  dit_vid_t w1 = dit_graph_weight_slice(b->g, kw, weight_dtype(b, kw), 2, wt->dims, 1, b->o.tp_rank * p1, p1);
  snprintf(ref, sizeof ref, "%s[%lld:]", kw, (long long)split);
  dit_vid_t w2 = dit_graph_weight_slice_as(b->g, ref, kw, weight_dtype(b, kw), 2, wt->dims, 1, split + b->o.tp_rank * p2, p2);
  dit_vid_t bias = !rank0 ? -1 : bt ? dit_graph_weight(b->g, kb, DIT_F32, bt->rank, bt->dims) : -1;
  /* The wider part first, with the bias; the shorter accumulates (as passes/fuse.c splits it). */
  const int wide2 = p2 > p1;
  snprintf(n1, sizeof n1, "%s.partial1", name);
  dit_vid_t in1[3] = {wide2 ? x2 : x1, wide2 ? w2 : w1, bias};
  dit_vid_t a = dit_graph_op(b->g, DIT_OP_LINEAR, in1, rank0 && bias >= 0 ? 3 : 2, NULL, DIT_F32, n1);
  /* The second product accumulates onto the first (linear's acc): this rank's partial sum. */
  snprintf(n1, sizeof n1, "%s.partial", name);
  dit_vid_t in2[3] = {wide2 ? x1 : x2, wide2 ? w1 : w2, a};
  dit_attrs_t acc = {0};
  dit_attrs_set_int(&acc, "acc", 1);
  return row_sum(b, dit_graph_op(b->g, DIT_OP_LINEAR, in2, 3, &acc, DIT_F32, n1), name);
}

dit_vid_t dit_blocks_unary(dit_blocks_t *b, dit_op_kind_t kind, dit_vid_t x, dit_dtype_t out_dtype, const char *name) {
  return dit_graph_op(b->g, kind, &x, 1, NULL, out_dtype, name);
}

dit_vid_t dit_blocks_layernorm(dit_blocks_t *b, dit_vid_t x, const char *prefix, double eps, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_float(&a, "eps", eps);
  dit_vid_t ins[3] = {x, dit_blocks_weight(b, "%s.weight", prefix), dit_blocks_weight(b, "%s.bias", prefix)};
  return dit_graph_op(b->g, DIT_OP_LAYERNORM, ins, 3, &a, b->o.dtype, name);
}

dit_vid_t dit_blocks_groupnorm(dit_blocks_t *b, dit_vid_t x, const char *prefix, int64_t groups, double eps, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "groups", groups);
  dit_attrs_set_float(&a, "eps", eps);
  dit_vid_t ins[3] = {x, dit_blocks_weight(b, "%s.weight", prefix), dit_blocks_weight(b, "%s.bias", prefix)};
  return dit_graph_op(b->g, DIT_OP_GROUPNORM, ins, 3, &a, b->o.dtype, name);
}

dit_vid_t dit_blocks_mlp(dit_blocks_t *b, dit_vid_t x, const dit_blocks_mlp_t *m) {
  const dit_dtype_t dt = b->o.dtype;
  dit_vid_t h = m->parallel ? dit_blocks_linear_col(b, x, m->up, dt, m->up_name) : dit_blocks_linear(b, x, m->up, dt, m->up_name);
  h = dit_blocks_unary(b, m->act, h, dt, m->act_name);
  return m->parallel ? dit_blocks_linear_row(b, h, m->down, m->down_name)
                     : dit_blocks_linear(b, h, m->down, m->out_dtype, m->down_name);
}

/* ---- modulation ---- */

dit_blocks_mod_t dit_blocks_modulation(dit_blocks_t *b, dit_vid_t table, dit_vid_t e, const dit_token_group_t *rows,
                                       const char *name) {
  /* A row per token, a [B, T, n, D] table would be written and read again by every block (2 GB
   * each at 27280 tokens of Wan2.2 TI2V-5B): adaln and gated_add add the rows they use. Rows that
   * runs of tokens share (a latent frame's) are few: the table is formed once, [B, R, n, D], and
   * read as the per-batch one is, without the table's and e's second read per element. */
  if (rows && rows->group <= 1) return (dit_blocks_mod_t){table, e, *rows};
  dit_vid_t in[2] = {table, e};
  dit_attrs_t a = {0};
  if (rows) dit_attrs_set_int(&a, "per_token", 1);
  return (dit_blocks_mod_t){dit_graph_op(b->g, DIT_OP_MOD_TABLE, in, 2, &a, DIT_F32, name), -1, rows ? *rows : (dit_token_group_t){1, 0}};
}

/* A per-token form's grouping attrs, when its rows are shared. */
static void mod_rows_attrs(dit_blocks_mod_t mod, dit_attrs_t *a) {
  if (mod.rows.group <= 1) return;
  dit_attrs_set_int(a, "token_group", mod.rows.group);
  dit_attrs_set_int(a, "token_offset", mod.rows.offset);
}

dit_vid_t dit_blocks_adaln(dit_blocks_t *b, dit_vid_t x, dit_blocks_mod_t mod, int shift, int scale, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_float(&a, "eps", b->o.eps);
  dit_attrs_set_int(&a, "shift", shift);
  dit_attrs_set_int(&a, "scale", scale);
  mod_rows_attrs(mod, &a);
  dit_vid_t ins[3] = {x, mod.table, mod.e};
  return dit_graph_op(b->g, DIT_OP_ADALN, ins, mod.e < 0 ? 2 : 3, &a, b->o.dtype, name);
}

dit_vid_t dit_blocks_gated_add(dit_blocks_t *b, dit_vid_t x, dit_vid_t y, dit_blocks_mod_t mod, int gate,
                               const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "gate", gate);
  mod_rows_attrs(mod, &a);
  dit_vid_t ins[4] = {x, y, mod.table, mod.e};
  return dit_graph_op(b->g, DIT_OP_GATED_ADD, ins, mod.e < 0 ? 3 : 4, &a, b->o.dtype, name);
}

dit_blocks_mod_t dit_blocks_mod_rows(dit_blocks_t *b, dit_vid_t temb_silu, const char *prefix, int64_t n, const char *name) {
  char nm[256];
  snprintf(nm, sizeof nm, "%s.linear", name);
  dit_vid_t e = dit_blocks_linear(b, temb_silu, prefix, b->o.dtype, nm);
  return (dit_blocks_mod_t){dit_blocks_rows(b, e, n, name), -1, {1, 0}};
}

/* ---- attention ---- */

dit_vid_t dit_blocks_rmsnorm(dit_blocks_t *b, dit_vid_t x, const char *wkey, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_float(&a, "eps", b->o.eps);
  dit_vid_t ins[2] = {x, dit_blocks_weight(b, "%s", wkey)};
  return dit_graph_op(b->g, DIT_OP_RMSNORM, ins, 2, &a, b->o.dtype, name);
}

dit_vid_t dit_blocks_qk_rmsnorm(dit_blocks_t *b, dit_vid_t x, const char *wkey, const char *name) {
  if (b->o.tp == 1) return dit_blocks_rmsnorm(b, x, wkey, name);
  dit_attrs_t a = {0};
  dit_attrs_set_float(&a, "eps", b->o.eps);
  char n1[192], n2[192];
  snprintf(n1, sizeof n1, "%s.sumsq", name);
  snprintf(n2, sizeof n2, "%s.sumsq_all", name);
  dit_vid_t ss = dit_graph_op(b->g, DIT_OP_ROWSUMSQ, &x, 1, NULL, DIT_F32, n1);
  ss = allreduce(b, ss, n2);
  dit_attrs_set_int(&a, "dim", b->o.heads * b->o.head_dim);
  dit_vid_t ins[3] = {x, ss, dit_blocks_weight_shard(b, wkey, 0)};
  return dit_graph_op(b->g, DIT_OP_RMSNORM_SLICE, ins, 3, &a, b->o.dtype, name);
}

dit_vid_t dit_blocks_head_rmsnorm(dit_blocks_t *b, dit_vid_t x, const char *wkey, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_float(&a, "eps", b->o.eps);
  dit_attrs_set_int(&a, "group", b->o.head_dim);
  dit_vid_t ins[2] = {x, dit_blocks_weight(b, "%s", wkey)};
  return dit_graph_op(b->g, DIT_OP_RMSNORM, ins, 2, &a, b->o.dtype, name);
}

/* prefix.suffix, for the ops one block adds. */
static const char *sub(char *buf, size_t n, const char *prefix, const char *suffix) {
  snprintf(buf, n, "%s.%s", prefix, suffix);
  return buf;
}

dit_blocks_qkv_t dit_blocks_attn_project(dit_blocks_t *b, dit_vid_t xq, dit_vid_t xkv, const dit_blocks_attn_keys_t *keys,
                                         const char *name) {
  char n[192];
  const dit_dtype_t dt = b->o.dtype;
  dit_blocks_qkv_t r;
  r.q = dit_blocks_linear_col(b, xq, keys->q, dt, sub(n, sizeof n, name, "q"));
  r.k = dit_blocks_linear_col(b, xkv, keys->k, dt, sub(n, sizeof n, name, "k"));
  r.v = dit_blocks_linear_col(b, xkv, keys->v, dt, sub(n, sizeof n, name, "v"));
  dit_vid_t (*norm)(dit_blocks_t *, dit_vid_t, const char *, const char *) =
      keys->norm_per_head ? dit_blocks_head_rmsnorm : dit_blocks_qk_rmsnorm;
  if (keys->norm_q) r.q = norm(b, r.q, keys->norm_q, sub(n, sizeof n, name, "norm_q"));
  if (keys->norm_k) r.k = norm(b, r.k, keys->norm_k, sub(n, sizeof n, name, "norm_k"));
  return r;
}

static void sdpa_attrs(const dit_blocks_t *b, int64_t heads, dit_attrs_t *a) {
  dit_attrs_set_int(a, "heads", heads);
  dit_attrs_set_float(a, "scale", 1.0 / sqrt((double)b->o.head_dim));
}

/* Attention over `heads` heads, with the key bound as a fourth input unless bound < 0. */
static dit_vid_t sdpa(dit_blocks_t *b, int64_t heads, dit_vid_t q, dit_vid_t k, dit_vid_t v, dit_vid_t bound, const char *name) {
  dit_attrs_t a = {0};
  sdpa_attrs(b, heads, &a);
  dit_vid_t ins[4] = {q, k, v, bound};
  return dit_graph_op(b->g, DIT_OP_ATTENTION, ins, bound < 0 ? 3 : 4, &a, b->o.dtype, name);
}

dit_vid_t dit_blocks_attention_tiled(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, dit_vid_t tiles, const char *prefix) {
  if (b->o.cp > 1) {
    /* A rank's share of the queries or keys is not the schedule's tiles. */
    if (!b->err)
      b->err = DIT_ERR(UNIMPLEMENTED, "attention '%s': a sparse tile schedule under context parallelism (--cp %d)", prefix, b->o.cp);
    return -1;
  }
  char n[192];
  dit_attrs_t a = {0};
  sdpa_attrs(b, b->o.heads / b->o.tp, &a);
  dit_attrs_set_int(&a, "tiles", 1);
  dit_vid_t ins[4] = {q, k, v, tiles};
  return dit_graph_op(b->g, DIT_OP_ATTENTION, ins, 4, &a, b->o.dtype, sub(n, sizeof n, prefix, "sdpa"));
}

dit_vid_t dit_blocks_attention(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, const char *name) {
  return dit_blocks_attention_bounded(b, q, k, v, -1, name);
}

dit_vid_t dit_blocks_attention_bounded(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, dit_vid_t bound, const char *name) {
  return sdpa(b, b->o.heads / b->o.tp, q, k, v, bound, name);
}

dit_vid_t dit_blocks_attention_replicated(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, dit_vid_t bound,
                                          const char *name) {
  return sdpa(b, b->o.heads, q, k, v, bound, name);
}

dit_vid_t dit_blocks_key_bound(dit_blocks_t *b, dit_vid_t mask, int64_t offset, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "offset", offset);
  return dit_graph_op(b->g, DIT_OP_KEY_BOUND, &mask, 1, &a, DIT_I32, name);
}

/* Context-parallel collectives: group 1 = the cp group (n = cp); with USP, 3 = the Ulysses
 * subgroup (n = U) and 4 = the ring subgroup (n = cp / U). */
static dit_vid_t cp_collective_in(dit_blocks_t *b, dit_op_kind_t kind, dit_vid_t x, int64_t heads, int reverse, int group,
                                  int n, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "group", group);
  dit_attrs_set_int(&a, "n", n);
  if (kind == DIT_OP_ALLTOALL) {
    dit_attrs_set_int(&a, "heads", heads);
    dit_attrs_set_int(&a, "reverse", reverse);
  }
  const dit_value_t *xv = dit_graph_cvalue(b->g, x);
  return xv ? dit_graph_op(b->g, kind, &x, 1, &a, xv->dtype, name) : -1; /* an operand failed: recorded */
}

static dit_vid_t cp_collective(dit_blocks_t *b, dit_op_kind_t kind, dit_vid_t x, int64_t heads, int reverse, const char *name) {
  return cp_collective_in(b, kind, x, heads, reverse, 1, b->o.cp, name);
}

/* A K/V ring_shift of the reuse ring (slot < 0: untagged). Inside a group (distance 0): one member
 * on around the group, collective group 3 (n = G consecutive cp ranks) under ring, group 5 (n = G
 * consecutive members of this rank's ring subgroup, `stride` U cp ranks apart) under usp. Between
 * groups: `distance` members over the ring, group 1 (the cp group) under ring, group 4 (the ring
 * subgroup, the members sharing this rank's Ulysses index) under usp. */
static dit_vid_t reuse_shift(dit_blocks_t *b, dit_vid_t x, int64_t distance, int slot, const char *name) {
  const int usp = b->o.cp_mode == DIT_CP_USP, u = usp ? b->o.ulysses : 1;
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "group", distance ? (usp ? 4 : 1) : (usp ? 5 : 3));
  dit_attrs_set_int(&a, "n", distance ? b->o.cp / u : b->o.reuse_group);
  if (!distance && usp) dit_attrs_set_int(&a, "stride", u);
  if (distance) dit_attrs_set_int(&a, "distance", distance);
  if (slot >= 0) dit_attrs_set_int(&a, "reuse_slot", slot);
  const dit_value_t *xv = dit_graph_cvalue(b->g, x);
  return xv ? dit_graph_op(b->g, DIT_OP_RING_SHIFT, &x, 1, &a, xv->dtype, name) : -1; /* an operand failed: recorded */
}

/* Ring attention with attention-state reuse (DiTango, runtime/ditango.h) over R ring members (the
 * cp ranks under ring; under usp the cp / U ranks sharing this rank's Ulysses index, each holding
 * its heads / U of U ranks' tokens after the all-to-all, which the caller does): the m = R / G
 * groups of G consecutive members; the local group's ring (reuse_shift inside the group) always
 * runs; per remote group at distance o, its K/V come by a shift of o*G members over the ring, ring
 * inside the group. With k = reuse_merge remote groups per cached state, the
 * states of the k adjacent groups at distances j*k+1 .. (j+1)*k (fewer in the last) are merged by
 * LSE and pass through state_cache slot layer * c + j (c = ceil((m - 1) / k) slots per layer; k = 1:
 * slot layer * (m - 1) + o - 1). Every op of a slot carries reuse_slot (the executor skips them
 * together when the runtime reuses the slot); the op whose result is the local group's state
 * carries reuse_local = layer. With G = 1 and k = 1 the K/V and the merges come in plain ring's
 * order; k > 1 merges a slot's groups before the running state (other roundings than ring's). */
static dit_vid_t reuse_ring(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, int64_t heads, const char *prefix) {
  char n[192], hn[64];
  const int G = b->o.reuse_group, m = reuse_members(&b->o) / G, layer = b->reuse_layers++;
  const dit_dtype_t dts[2] = {b->o.dtype, DIT_F32};
  if (!dit_graph_cvalue(b->g, q) || !dit_graph_cvalue(b->g, k) || !dit_graph_cvalue(b->g, v)) return -1; /* recorded */
#define N(s) sub(n, sizeof n, prefix, s)
  dit_attrs_t aa = {0}, ma = {0};
  sdpa_attrs(b, heads, &aa);
  dit_attrs_set_int(&ma, "heads", heads);
  /* One op of the layer's reuse ring: attrs plus the slot tag (slot < 0: none) and the local tag. */
  dit_attrs_t t;
#define TAGGED(base, slot, local) \
  (t = (base), ((slot) >= 0 ? dit_attrs_set_int(&t, "reuse_slot", (slot)) : 0), \
   ((local) ? dit_attrs_set_int(&t, "reuse_local", layer) : 0), &t)
  dit_vid_t state[2], ins[3] = {q, k, v};
  op2(b, DIT_OP_ATTENTION, ins, 3, TAGGED(aa, -1, G == 1), dts, N("ring0"), state);
  for (int hop = 1; hop < G; hop++) {
    ins[1] = reuse_shift(b, ins[1], 0, -1, N("k_ring"));
    ins[2] = reuse_shift(b, ins[2], 0, -1, N("v_ring"));
    dit_vid_t part[2], mi[4];
    snprintf(hn, sizeof hn, "ring%d", hop);
    op2(b, DIT_OP_ATTENTION, ins, 3, &aa, dts, N(hn), part);
    mi[0] = state[0], mi[1] = state[1], mi[2] = part[0], mi[3] = part[1];
    snprintf(hn, sizeof hn, "ring_merge%d", hop);
    op2(b, DIT_OP_ATTN_MERGE, mi, 4, TAGGED(ma, -1, hop == G - 1), dts, N(hn), state);
  }
  const int km = b->o.reuse_merge > 1 ? b->o.reuse_merge : 1, c = (m - 2) / km + 1;
  for (int j = 0; j < c; j++) {
    const int slot = layer * c + j, first = j * km + 1, last = first + km - 1 < m - 1 ? first + km - 1 : m - 1;
    dit_vid_t ss[2], mi[4];
    for (int o = first; o <= last; o++) {
      dit_vid_t gs[2], part[2], kv[2] = {k, v};
      for (int i = 0; i < 2; i++) {
        snprintf(hn, sizeof hn, "group%d_%c", o, i ? 'v' : 'k');
        kv[i] = reuse_shift(b, kv[i], (int64_t)o * G, slot, N(hn));
      }
      dit_vid_t gi[3] = {q, kv[0], kv[1]};
      snprintf(hn, sizeof hn, "group%d_ring0", o);
      op2(b, DIT_OP_ATTENTION, gi, 3, TAGGED(aa, slot, 0), dts, N(hn), gs);
      for (int hop = 1; hop < G; hop++) {
        for (int i = 1; i < 3; i++) {
          snprintf(hn, sizeof hn, "group%d_%c_ring", o, i == 1 ? 'k' : 'v');
          gi[i] = reuse_shift(b, gi[i], 0, slot, N(hn));
        }
        snprintf(hn, sizeof hn, "group%d_ring%d", o, hop);
        op2(b, DIT_OP_ATTENTION, gi, 3, TAGGED(aa, slot, 0), dts, N(hn), part);
        mi[0] = gs[0], mi[1] = gs[1], mi[2] = part[0], mi[3] = part[1];
        snprintf(hn, sizeof hn, "group%d_merge%d", o, hop);
        op2(b, DIT_OP_ATTN_MERGE, mi, 4, TAGGED(ma, slot, 0), dts, N(hn), gs);
      }
      if (o == first) {
        ss[0] = gs[0], ss[1] = gs[1];
        continue;
      }
      mi[0] = ss[0], mi[1] = ss[1], mi[2] = gs[0], mi[3] = gs[1];
      snprintf(hn, sizeof hn, "group%d_join", o);
      op2(b, DIT_OP_ATTN_MERGE, mi, 4, TAGGED(ma, slot, 0), dts, N(hn), ss);
    }
    dit_attrs_t ca = {0};
    dit_attrs_set_int(&ca, "slot", slot);
    dit_attrs_set_int(&ca, "copies", b->o.reuse_copies > 1 ? 2 : 1);
    dit_attrs_set_int(&ca, "reuse_slot", slot);
    snprintf(hn, sizeof hn, "group%d_cache", first);
    dit_vid_t cached[2];
    op2(b, DIT_OP_STATE_CACHE, ss, 2, &ca, dts, N(hn), cached);
    mi[0] = state[0], mi[1] = state[1], mi[2] = cached[0], mi[3] = cached[1];
    snprintf(hn, sizeof hn, "group%d_merge", first);
    op2(b, DIT_OP_ATTN_MERGE, mi, 4, &ma, dts, N(hn), state);
  }
#undef TAGGED
#undef N
  return state[0];
}

dit_vid_t dit_blocks_attention_tokens(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, const char *prefix) {
  return dit_blocks_attention_tokens_bounded(b, q, k, v, -1, prefix);
}

dit_vid_t dit_blocks_attention_tokens_bounded(dit_blocks_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, dit_vid_t bound,
                                              const char *prefix) {
  char n[192];
  const dit_dtype_t dt = b->o.dtype;
  const int cp = b->o.cp, mode = cp > 1 ? b->o.cp_mode : DIT_CP_NONE;
  const int64_t hl = b->o.heads / b->o.tp; /* this tensor-parallel rank's heads */
#define N(s) sub(n, sizeof n, prefix, s)
  if (mode == DIT_CP_GATHER) {
    k = cp_collective(b, DIT_OP_ALLGATHER, k, 0, 0, N("k_all"));
    v = cp_collective(b, DIT_OP_ALLGATHER, v, 0, 0, N("v_all"));
    return dit_blocks_attention_bounded(b, q, k, v, bound, N("sdpa"));
  }
  if (mode == DIT_CP_ULYSSES) {
    /* Tokens to heads: each rank attends over every token with heads/cp of its heads. */
    q = cp_collective(b, DIT_OP_ALLTOALL, q, hl, 0, N("q_heads"));
    k = cp_collective(b, DIT_OP_ALLTOALL, k, hl, 0, N("k_heads"));
    v = cp_collective(b, DIT_OP_ALLTOALL, v, hl, 0, N("v_heads"));
    dit_vid_t a = sdpa(b, hl / cp, q, k, v, bound, N("sdpa"));
    return cp_collective(b, DIT_OP_ALLTOALL, a, hl, 1, N("sdpa_tokens"));
  }
  if ((mode == DIT_CP_RING || mode == DIT_CP_USP) && bound >= 0) {
    /* A ring hop sees one rank's share of the keys, so one bound cannot describe them. */
    if (!b->err)
      b->err = DIT_ERR(UNIMPLEMENTED, "attention '%s': a key bound under context parallelism %s (supported: gather, ulysses)",
                       prefix, mode == DIT_CP_RING ? "ring" : "usp");
    return -1;
  }
  if (mode == DIT_CP_RING || mode == DIT_CP_USP) {
    /* Ring: K/V travel around the group; each hop's partial state (OUT, LSE) over one
     * partition of the keys is merged into the running one by LSE. USP first moves tokens
     * to heads inside each Ulysses subgroup of U ranks, then rings between the subgroups. */
    const int usp = mode == DIT_CP_USP, u = usp ? b->o.ulysses : 1, ring = cp / u;
    if (usp) {
      q = cp_collective_in(b, DIT_OP_ALLTOALL, q, hl, 0, 3, u, N("q_heads"));
      k = cp_collective_in(b, DIT_OP_ALLTOALL, k, hl, 0, 3, u, N("k_heads"));
      v = cp_collective_in(b, DIT_OP_ALLTOALL, v, hl, 0, 3, u, N("v_heads"));
    }
    if (b->o.reuse_group) {
      dit_vid_t a = reuse_ring(b, q, k, v, hl / u, prefix);
      return usp ? cp_collective_in(b, DIT_OP_ALLTOALL, a, hl, 1, 3, u, N("sdpa_tokens")) : a;
    }
    dit_attrs_t aa = {0}, ma = {0};
    sdpa_attrs(b, hl / u, &aa);
    dit_attrs_set_int(&ma, "heads", hl / u);
    const dit_dtype_t dts[2] = {dt, DIT_F32};
    dit_vid_t state[2], ins[3] = {q, k, v};
    op2(b, DIT_OP_ATTENTION, ins, 3, &aa, dts, N("ring0"), state);
    for (int hop = 1; hop < ring; hop++) {
      char hn[64];
      ins[1] = cp_collective_in(b, DIT_OP_RING_SHIFT, ins[1], 0, 0, usp ? 4 : 1, ring, N("k_ring"));
      ins[2] = cp_collective_in(b, DIT_OP_RING_SHIFT, ins[2], 0, 0, usp ? 4 : 1, ring, N("v_ring"));
      dit_vid_t part[2], mi[4];
      snprintf(hn, sizeof hn, "ring%d", hop);
      op2(b, DIT_OP_ATTENTION, ins, 3, &aa, dts, N(hn), part);
      mi[0] = state[0], mi[1] = state[1], mi[2] = part[0], mi[3] = part[1];
      snprintf(hn, sizeof hn, "ring_merge%d", hop);
      op2(b, DIT_OP_ATTN_MERGE, mi, 4, &ma, dts, N(hn), state);
    }
    dit_vid_t a = state[0];
    if (usp) a = cp_collective_in(b, DIT_OP_ALLTOALL, a, hl, 1, 3, u, N("sdpa_tokens"));
    return a;
  }
#undef N
  return dit_blocks_attention_bounded(b, q, k, v, bound, sub(n, sizeof n, prefix, "sdpa"));
}

/* x [B, S, H*Dh] viewed [B*S, H, Dh] (tokens as rows, heads as the middle dim), or back. */
static dit_vid_t heads_view(dit_blocks_t *b, dit_vid_t x, int64_t B, int64_t S, int64_t H, int back, const char *name) {
  const int64_t hd = b->o.head_dim, dims[3] = {back ? B : B * S, back ? S : H, back ? H * hd : hd};
  return dit_blocks_reshape(b, x, 3, dims, name);
}

void dit_blocks_joint_attention(dit_blocks_t *b, dit_vid_t qi, dit_vid_t ki, dit_vid_t vi, dit_vid_t qt, dit_vid_t kt, dit_vid_t vt,
                                dit_vid_t txt_mask, const char *prefix, dit_vid_t *img, dit_vid_t *txt) {
  char n[192];
  *img = *txt = -1;
  const dit_value_t *vqi = dit_graph_cvalue(b->g, qi), *vqt = dit_graph_cvalue(b->g, qt);
  if (!vqi || !vqt) return; /* an operand failed: the graph recorded why */
  const dit_dtype_t dt = b->o.dtype;
  const int cp = b->o.cp, mode = cp > 1 ? b->o.cp_mode : DIT_CP_NONE;
  const int64_t B = vqi->dims[0], Ti = vqi->dims[1], L = vqt->dims[1], hl = b->o.heads / b->o.tp;
#define N(s) sub(n, sizeof n, prefix, s)
  if (mode == DIT_CP_USP) {
    if (!b->err) b->err = DIT_ERR(UNIMPLEMENTED, "joint attention '%s': context parallelism usp (supported: gather, ulysses, ring)", prefix);
    return;
  }
  if (b->o.reuse_group) {
    if (!b->err) b->err = DIT_ERR(UNIMPLEMENTED, "joint attention '%s': --reuse ditango (supported: self-attention over one token set, as Wan's)", prefix);
    return;
  }
  int64_t heads = hl, Tk = mode == DIT_CP_GATHER || mode == DIT_CP_ULYSSES ? Ti * cp : Ti; /* image keys attended */
  if (mode == DIT_CP_GATHER) {
    ki = cp_collective(b, DIT_OP_ALLGATHER, ki, 0, 0, N("k_img_all"));
    vi = cp_collective(b, DIT_OP_ALLGATHER, vi, 0, 0, N("v_img_all"));
  } else if (mode == DIT_CP_ULYSSES) {
    /* Image tokens to heads; the text, whole on every rank, gives up the other ranks' heads. */
    qi = cp_collective(b, DIT_OP_ALLTOALL, qi, hl, 0, N("q_img_heads"));
    ki = cp_collective(b, DIT_OP_ALLTOALL, ki, hl, 0, N("k_img_heads"));
    vi = cp_collective(b, DIT_OP_ALLTOALL, vi, hl, 0, N("v_img_heads"));
    heads = hl / cp;
    dit_vid_t *tx[3] = {&qt, &kt, &vt};
    static const char *const nm[3][2] = {{"q_txt_view", "q_txt_heads"}, {"k_txt_view", "k_txt_heads"}, {"v_txt_view", "v_txt_heads"}};
    for (int i = 0; i < 3; i++) {
      dit_vid_t h = heads_view(b, *tx[i], B, L, hl, 0, N(nm[i][0]));
      h = dit_blocks_slice_tokens(b, h, b->o.cp_rank * heads, heads, dt, N(nm[i][1]));
      *tx[i] = heads_view(b, h, B, L, heads, 1, N(nm[i][1]));
    }
  }
  dit_vid_t bound = txt_mask >= 0 ? dit_blocks_key_bound(b, txt_mask, Tk, N("key_bound")) : -1;
  dit_vid_t q = dit_blocks_concat(b, qi, qt, 1, N("q")), k = dit_blocks_concat(b, ki, kt, 1, N("k")),
            v = dit_blocks_concat(b, vi, vt, 1, N("v"));
  const int64_t Tq = mode == DIT_CP_ULYSSES ? Ti * cp : Ti;
  dit_vid_t a;
  if (mode == DIT_CP_RING) {
    /* The first hop over this rank's image keys and the text's; then the other ranks' image keys. */
    dit_attrs_t aa = {0}, ma = {0};
    sdpa_attrs(b, hl, &aa);
    dit_attrs_set_int(&ma, "heads", hl);
    const dit_dtype_t dts[2] = {dt, DIT_F32};
    dit_vid_t state[2], ins[4] = {q, k, v, bound};
    op2(b, DIT_OP_ATTENTION, ins, bound < 0 ? 3 : 4, &aa, dts, N("ring0"), state);
    dit_vid_t kr = ki, vr = vi;
    for (int hop = 1; hop < cp; hop++) {
      char hn[64];
      kr = cp_collective(b, DIT_OP_RING_SHIFT, kr, 0, 0, N("k_ring"));
      vr = cp_collective(b, DIT_OP_RING_SHIFT, vr, 0, 0, N("v_ring"));
      dit_vid_t part[2], mi[4], hi[3] = {q, kr, vr};
      snprintf(hn, sizeof hn, "ring%d", hop);
      op2(b, DIT_OP_ATTENTION, hi, 3, &aa, dts, N(hn), part);
      mi[0] = state[0], mi[1] = state[1], mi[2] = part[0], mi[3] = part[1];
      snprintf(hn, sizeof hn, "ring_merge%d", hop);
      op2(b, DIT_OP_ATTN_MERGE, mi, 4, &ma, dts, N(hn), state);
    }
    a = state[0];
  } else {
    a = sdpa(b, heads, q, k, v, bound, N("sdpa"));
  }
  *img = dit_blocks_slice_tokens(b, a, 0, Tq, dt, N("img"));
  *txt = dit_blocks_slice_tokens(b, a, Tq, L, dt, N("txt"));
  if (mode == DIT_CP_ULYSSES) {
    *img = cp_collective(b, DIT_OP_ALLTOALL, *img, hl, 1, N("img_tokens"));
    /* The text's heads from every rank, in group order: this rank's heads are the group's slice. */
    dit_vid_t h = heads_view(b, *txt, B, L, heads, 0, N("txt_view"));
    h = cp_collective(b, DIT_OP_ALLGATHER, h, 0, 0, N("txt_all_heads"));
    *txt = heads_view(b, h, B, L, hl, 1, N("txt_heads"));
  }
#undef N
}

/* ---- embeddings and tokens ---- */

/* TIMESTEP_EMBED of t; premul 0: none (t as given). */
static dit_vid_t sinusoid_op(dit_blocks_t *b, dit_vid_t t, int64_t dim, int flip_sin_to_cos, double freq_shift, double scale,
                             double premul, dit_dtype_t dtype, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "dim", dim);
  dit_attrs_set_int(&a, "flip", flip_sin_to_cos ? 1 : 0);
  dit_attrs_set_float(&a, "shift", freq_shift);
  dit_attrs_set_float(&a, "max_period", 10000.0);
  dit_attrs_set_float(&a, "scale", scale);
  if (premul != 0) dit_attrs_set_float(&a, "premul", premul);
  if (premul != 0 && dtype == DIT_BF16) dit_attrs_set_int(&a, "round", 1);
  return dit_graph_op(b->g, DIT_OP_TIMESTEP_EMBED, &t, 1, &a, DIT_F32, name);
}

dit_vid_t dit_blocks_sinusoid(dit_blocks_t *b, dit_vid_t t, int64_t dim, int flip_sin_to_cos, double freq_shift,
                              const char *name) {
  return sinusoid_op(b, t, dim, flip_sin_to_cos, freq_shift, 1.0, 0, DIT_F32, name);
}

dit_vid_t dit_blocks_sinusoid_scaled(dit_blocks_t *b, dit_vid_t t, int64_t dim, int flip_sin_to_cos, double freq_shift,
                                     double premul, dit_dtype_t dtype, const char *name) {
  return sinusoid_op(b, t, dim, flip_sin_to_cos, freq_shift, 1.0, premul, dtype, name);
}

dit_vid_t dit_blocks_sinusoid_rounded(dit_blocks_t *b, dit_vid_t t, int64_t dim, int flip_sin_to_cos, double freq_shift,
                                      double scale, dit_dtype_t dtype, const char *name) {
  /* premul 1 only rounds: bf16(t) * 1 is exact. */
  return sinusoid_op(b, t, dim, flip_sin_to_cos, freq_shift, scale, 1.0, dtype, name);
}

dit_vid_t dit_blocks_timestep_mlp(dit_blocks_t *b, dit_vid_t emb, const char *prefix, const char *name) {
  char n[192], k[192];
  const dit_dtype_t dt = b->o.dtype;
  dit_vid_t e = dit_blocks_unary(b, DIT_OP_CAST, emb, dt, sub(n, sizeof n, name, "in"));
  e = dit_blocks_linear(b, e, sub(k, sizeof k, prefix, "linear_1"), dt, sub(n, sizeof n, name, "linear_1"));
  e = dit_blocks_unary(b, DIT_OP_SILU, e, dt, sub(n, sizeof n, name, "silu"));
  return dit_blocks_linear(b, e, sub(k, sizeof k, prefix, "linear_2"), dt, name);
}

static void patch_attrs(const int64_t patch[3], dit_attrs_t *a) {
  dit_attrs_set_int(a, "pt", patch[0]);
  dit_attrs_set_int(a, "ph", patch[1]);
  dit_attrs_set_int(a, "pw", patch[2]);
}

dit_vid_t dit_blocks_patch_embed(dit_blocks_t *b, dit_vid_t x, const int64_t patch[3], const char *key) {
  dit_attrs_t pa = {0};
  patch_attrs(patch, &pa);
  dit_vid_t xp = dit_graph_op(b->g, DIT_OP_PATCHIFY, &x, 1, &pa, b->o.dtype, "patchify");
  return dit_blocks_linear(b, xp, key, b->o.dtype, key);
}

dit_vid_t dit_blocks_slice_tokens(dit_blocks_t *b, dit_vid_t x, int64_t t0, int64_t count, dit_dtype_t dtype,
                                  const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "t0", t0);
  dit_attrs_set_int(&a, "count", count);
  return dit_graph_op(b->g, DIT_OP_SLICE_TOKENS, &x, 1, &a, dtype, name);
}

dit_vid_t dit_blocks_sp_gather(dit_blocks_t *b, dit_vid_t x, const char *name) {
  if (!b->o.sp) return x;
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "group", 0);
  dit_attrs_set_int(&a, "n", b->o.tp);
  return dit_graph_op(b->g, DIT_OP_ALLGATHER, &x, 1, &a, dit_graph_cvalue(b->g, x)->dtype, name);
}

dit_vid_t dit_blocks_cp_gather(dit_blocks_t *b, dit_vid_t x, const char *name) {
  if (b->o.cp <= 1) return x;
  return cp_collective(b, DIT_OP_ALLGATHER, x, 0, 0, name);
}

dit_vid_t dit_blocks_unpatchify(dit_blocks_t *b, dit_vid_t y, const int64_t patch[3], int64_t f, int64_t h, int64_t w,
                                const char *name) {
  dit_attrs_t a = {0};
  patch_attrs(patch, &a);
  dit_attrs_set_int(&a, "f", f);
  dit_attrs_set_int(&a, "h", h);
  dit_attrs_set_int(&a, "w", w);
  return dit_graph_op(b->g, DIT_OP_UNPATCHIFY, &y, 1, &a, b->o.dtype, name);
}

/* A constant of dims (rank 2 or 3) in dtype from f32 values (NULL: zeros), named key. */
static dit_vid_t constant_from_f32(dit_blocks_t *b, const char *key, dit_dtype_t dtype, int rank, const int64_t *dims,
                                   const float *vals) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  void *buf = calloc((size_t)n, dit_dtype_size(dtype));
  if (!buf || (vals && dit_convert(buf, dtype, vals, DIT_F32, (size_t)n))) {
    free(buf);
    if (!b->err) b->err = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", key);
    return -1;
  }
  dit_vid_t c = dit_graph_constant(b->g, key, dtype, rank, dims, buf);
  free(buf);
  return c;
}

dit_vid_t dit_blocks_token_mean(dit_blocks_t *b, dit_vid_t x, dit_vid_t bound, const char *name) {
  const dit_value_t *v = dit_graph_cvalue(b->g, x);
  if (!v) return -1;
  char n[192];
  const int64_t B = v->dims[0], C = v->dims[2], qd[3] = {B, 1, C};
  /* Heads only split the channels (every score is 0): as wide as the model's when they fit. */
  int64_t hd = b->o.head_dim;
  while (C % hd) hd /= 2;
  dit_vid_t q = constant_from_f32(b, sub(n, sizeof n, name, "query"), v->dtype, 3, qd, NULL);
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "heads", C / hd);
  dit_attrs_set_float(&a, "scale", 1.0);
  dit_vid_t ins[4] = {q, x, x, bound};
  dit_vid_t m = dit_graph_op(b->g, DIT_OP_ATTENTION, ins, bound < 0 ? 3 : 4, &a, v->dtype, sub(n, sizeof n, name, "sdpa"));
  dit_attrs_t r = {0};
  dit_attrs_set_int(&r, "rank", 2);
  dit_attrs_set_int(&r, "d0", B);
  dit_attrs_set_int(&r, "d1", C);
  return dit_graph_op(b->g, DIT_OP_RESHAPE, &m, 1, &r, v->dtype, name);
}

/* ---- convolutions ---- */

dit_vid_t dit_blocks_conv_weight(dit_blocks_t *b, const char *key, int64_t o0, int64_t n, const int64_t *rows, const char *name) {
  const dit_dtype_t dt = b->o.dtype;
  const dit_st_tensor_t *t = dit_safetensors_find(b->weights, key);
  int ok = t && (t->rank == 4 || t->rank == 5) && o0 >= 0 && n >= 1 && o0 + n <= t->dims[0];
  for (int64_t o = 0; ok && rows && o < n; o++) ok = rows[o] >= 0 && rows[o] < t->dims[0];
  /* The family checked its checkpoint; reaching this is a frontend bug, recorded through a bad op. */
  if (!ok) return dit_graph_weight(b->g, key, DIT_F32, -1, NULL);
  const int64_t cin = t->dims[1];
  int64_t taps = 1, dims[5] = {n};
  for (int d = 2; d < t->rank; d++) taps *= dims[d - 1] = t->dims[d];
  dims[t->rank - 1] = cin;
  const size_t count = (size_t)(n * cin * taps), src_size = t->nbytes / (size_t)(t->dims[0] * cin * taps);
  const size_t row = (size_t)(cin * taps) * src_size;
  float *f = malloc(sizeof(float) * count * 2);
  void *raw = malloc(count * src_size), *out = malloc(count * dit_dtype_size(dt));
  dit_vid_t id = -1;
  if (f && raw && out) {
    /* Checkpoint tensors need not be aligned: copied before conversion. */
    for (int64_t o = 0; o < n; o++) memcpy((char *)raw + (size_t)o * row, (const char *)t->data + (size_t)(rows ? rows[o] : o0 + o) * row, row);
    float *cl = f + count;
    if (!dit_convert(f, DIT_F32, raw, t->dtype, count)) {
      for (int64_t o = 0; o < n; o++)
        for (int64_t i = 0; i < cin; i++)
          for (int64_t k = 0; k < taps; k++) cl[(o * taps + k) * cin + i] = f[(o * cin + i) * taps + k];
      if (!dit_convert(out, dt, cl, DIT_F32, count)) id = dit_graph_constant(b->g, name, dt, t->rank, dims, out);
    }
  }
  free(f);
  free(raw);
  free(out);
  return id >= 0 ? id : dit_graph_weight(b->g, key, DIT_F32, -1, NULL);
}

dit_vid_t dit_blocks_weight_rows(dit_blocks_t *b, const char *key, const int64_t *rows, int64_t n, const char *name) {
  const dit_st_tensor_t *t = dit_safetensors_find(b->weights, key);
  int ok = t && t->rank >= 1 && n >= 1;
  for (int64_t o = 0; ok && o < n; o++) ok = rows[o] >= 0 && rows[o] < t->dims[0];
  if (!ok) return dit_graph_weight(b->g, key, DIT_F32, -1, NULL);
  int64_t dims[DIT_MAX_RANK] = {n}, per = 1; /* elements per row */
  for (int d = 1; d < t->rank; d++) per *= dims[d] = t->dims[d];
  const size_t esz = (size_t)t->nbytes / (size_t)t->dims[0], count = (size_t)(n * per);
  void *raw = malloc((size_t)n * esz), *out = malloc(count * dit_dtype_size(b->o.dtype));
  float *f = malloc(sizeof(float) * count);
  dit_vid_t id = -1;
  if (raw && out && f) {
    /* Checkpoint tensors need not be aligned: copied before conversion. */
    for (int64_t o = 0; o < n; o++) memcpy((char *)raw + (size_t)o * esz, (const char *)t->data + (size_t)rows[o] * esz, esz);
    if (!dit_convert(f, DIT_F32, raw, t->dtype, count) && !dit_convert(out, b->o.dtype, f, DIT_F32, count))
      id = dit_graph_constant(b->g, name, b->o.dtype, t->rank, dims, out);
  }
  free(raw);
  free(out);
  free(f);
  return id >= 0 ? id : dit_graph_weight(b->g, key, DIT_F32, -1, NULL);
}

dit_vid_t dit_blocks_conv_rows(dit_blocks_t *b, dit_vid_t x, const char *prefix, int64_t pad_t, int64_t pad_s, const int64_t *rows,
                               const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "pad_t", pad_t);
  dit_attrs_set_int(&a, "pad_h", pad_s);
  dit_attrs_set_int(&a, "pad_w", pad_s);
  char k[200], c[220], kb[200];
  snprintf(k, sizeof k, "%s.weight", prefix);
  snprintf(c, sizeof c, "%s.channels_last", k);
  const dit_st_tensor_t *t = dit_safetensors_find(b->weights, k);
  const int64_t n = t ? t->dims[0] : 0;
  dit_vid_t ins[3] = {x, dit_blocks_conv_weight(b, k, 0, n, rows, c), -1};
  if (rows) {
    snprintf(kb, sizeof kb, "%s.bias", prefix);
    snprintf(c, sizeof c, "%s.bias.reordered", prefix);
    ins[2] = dit_blocks_weight_rows(b, kb, rows, n, c);
  } else {
    ins[2] = dit_blocks_weight(b, "%s.bias", prefix);
  }
  return dit_graph_op(b->g, DIT_OP_CONV3D, ins, 3, &a, b->o.dtype, name);
}

dit_vid_t dit_blocks_conv(dit_blocks_t *b, dit_vid_t x, const char *prefix, int64_t pad_t, int64_t pad_s, const char *name) {
  return dit_blocks_conv_rows(b, x, prefix, pad_t, pad_s, NULL, name);
}

dit_vid_t dit_blocks_unpatchify_channels_first(dit_blocks_t *b, dit_vid_t y, const int64_t patch[3], int64_t f, int64_t h,
                                               int64_t w, const char *name) {
  return dit_blocks_unpatchify_channels_first_affine(b, y, patch, f, h, w, 1.0, 0.0, name);
}

dit_vid_t dit_blocks_unpatchify_channels_first_affine(dit_blocks_t *b, dit_vid_t y, const int64_t patch[3], int64_t f, int64_t h,
                                                      int64_t w, double mul, double add, const char *name) {
  const dit_value_t *v = dit_graph_cvalue(b->g, y);
  if (!v) return -1;
  const int64_t N = v->dims[2], P = patch[0] * patch[1] * patch[2], C = N / P, pd[2] = {N, N};
  float *perm = calloc((size_t)(N * (N + 1)), sizeof *perm), *bias = perm ? perm + N * N : NULL;
  if (!perm) {
    if (!b->err) b->err = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", name);
    return -1;
  }
  /* Output feature p*C + c (p the flat (it, ih, iw)) is input feature c*P + p, times mul, plus add. */
  for (int64_t c = 0; c < C; c++)
    for (int64_t p = 0; p < P; p++) perm[(p * C + c) * N + c * P + p] = (float)mul;
  for (int64_t i = 0; i < N; i++) bias[i] = (float)add;
  char n[192];
  dit_vid_t ins[3] = {y, constant_from_f32(b, sub(n, sizeof n, name, "permutation"), v->dtype, 2, pd, perm),
                      add != 0 ? constant_from_f32(b, sub(n, sizeof n, name, "shift"), v->dtype, 1, pd, bias) : -1};
  free(perm);
  dit_vid_t yo = dit_graph_op(b->g, DIT_OP_LINEAR, ins, add != 0 ? 3 : 2, NULL, v->dtype, sub(n, sizeof n, name, "order"));
  return dit_blocks_unpatchify(b, yo, patch, f, h, w, name);
}

dit_vid_t dit_blocks_concat(dit_blocks_t *b, dit_vid_t a, dit_vid_t c, int dim, const char *name) {
  dit_attrs_t at = {0};
  dit_attrs_set_int(&at, "dim", dim);
  const dit_value_t *va = dit_graph_cvalue(b->g, a);
  dit_vid_t ins[2] = {a, c};
  return dit_graph_op(b->g, DIT_OP_CONCAT, ins, 2, &at, va ? va->dtype : b->o.dtype, name);
}

dit_vid_t dit_blocks_reshape(dit_blocks_t *b, dit_vid_t x, int rank, const int64_t *dims, const char *name) {
  const dit_value_t *v = dit_graph_cvalue(b->g, x);
  if (!v) return -1;
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "rank", rank);
  static const char *const keys[DIT_MAX_RANK] = {"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"};
  for (int i = 0; i < rank && i < DIT_MAX_RANK; i++) dit_attrs_set_int(&a, keys[i], dims[i]);
  return dit_graph_op(b->g, DIT_OP_RESHAPE, &x, 1, &a, v->dtype, name);
}

dit_vid_t dit_blocks_rows(dit_blocks_t *b, dit_vid_t x, int64_t n, const char *name) {
  const dit_value_t *v = dit_graph_cvalue(b->g, x);
  if (!v) return -1;
  const int64_t dims[3] = {v->dims[0], n, dit_value_numel(v) / v->dims[0] / n};
  return dit_blocks_reshape(b, x, 3, dims, name);
}

dit_vid_t dit_blocks_rope_table(dit_blocks_t *b, dit_vid_t x, dit_vid_t cs, const char *name) {
  dit_attrs_t a = {0};
  const dit_value_t *v = dit_graph_cvalue(b->g, x);
  dit_attrs_set_int(&a, "heads", v ? v->dims[v->rank - 1] / b->o.head_dim : 0);
  dit_vid_t ins[2] = {x, cs};
  return dit_graph_op(b->g, DIT_OP_ROPE_TABLE, ins, 2, &a, v ? v->dtype : b->o.dtype, name);
}

void dit_blocks_rope_rows(dit_blocks_t *b, const float *table, int64_t T, int64_t L, const char *name, dit_vid_t *joined,
                          dit_vid_t *image, dit_vid_t *text) {
  char n[192];
  const int cp = b->o.cp > 1;
  const int64_t hd = b->o.head_dim, full_dims[3] = {1, T + L, hd};
  dit_vid_t full = dit_graph_constant(b->g, sub(n, sizeof n, name, "cos_sin"), DIT_F32, 3, full_dims, table);
  const int64_t Tl = T / b->o.cp, t0 = b->o.cp_rank * Tl, dj[2] = {Tl + L, hd}, di[2] = {Tl, hd},
                dt[2] = {L, hd};
  dit_vid_t img = -1, txt = -1;
  if (image || (joined && cp)) img = dit_blocks_slice_tokens(b, full, t0, Tl, DIT_F32, sub(n, sizeof n, name, "image_rows"));
  if (text || (joined && cp)) txt = dit_blocks_slice_tokens(b, full, T, L, DIT_F32, sub(n, sizeof n, name, "text_rows"));
  /* Without cp the whole table is the joined one; with cp this rank's image rows join the text's. */
  if (joined) *joined = dit_blocks_reshape(b, cp ? dit_blocks_concat(b, img, txt, 1, sub(n, sizeof n, name, "rows")) : full, 2, dj,
                                           sub(n, sizeof n, name, "table"));
  if (image) *image = dit_blocks_reshape(b, img, 2, di, sub(n, sizeof n, name, "table_image"));
  if (text) *text = dit_blocks_reshape(b, txt, 2, dt, sub(n, sizeof n, name, "table_text"));
}

dit_vid_t dit_blocks_add(dit_blocks_t *b, dit_vid_t x, dit_vid_t y, const char *name) {
  const dit_value_t *v = dit_graph_cvalue(b->g, x);
  dit_vid_t ins[2] = {x, y};
  return dit_graph_op(b->g, DIT_OP_ADD, ins, 2, NULL, v ? v->dtype : b->o.dtype, name);
}

/* ---- FLUX-style blocks ---- */

void dit_blocks_flux_double(dit_blocks_t *b, int64_t i, dit_vid_t tsilu, dit_vid_t cs_img, dit_vid_t mask, dit_vid_t *hs,
                            dit_vid_t *ctx) {
  const dit_dtype_t dt = b->o.dtype;
  char n[192], k[192], kq[192], kk[192], kv[192], knq[192], knk[192], nu[192], na[192], nd[192];
  /* Keys and op names share the prefix transformer_blocks.<i>. */
#define NAME(s) (snprintf(n, sizeof n, "transformer_blocks.%" PRId64 ".%s", i, s), n)
#define KEY(buf, s) (snprintf(buf, sizeof buf, "transformer_blocks.%" PRId64 ".%s", i, s), buf)
  const dit_blocks_mod_t modi = dit_blocks_mod_rows(b, tsilu, KEY(k, "norm1.linear"), 6, NAME("norm1.mod"));
  const dit_blocks_mod_t modc = dit_blocks_mod_rows(b, tsilu, KEY(k, "norm1_context.linear"), 6, NAME("norm1_context.mod"));
  dit_vid_t ni = dit_blocks_adaln(b, *hs, modi, 0, 1, NAME("norm1"));
  dit_vid_t nc = dit_blocks_adaln(b, *ctx, modc, 0, 1, NAME("norm1_context"));
  const dit_blocks_attn_keys_t ki = {KEY(kq, "attn.to_q"), KEY(kk, "attn.to_k"), KEY(kv, "attn.to_v"), KEY(knq, "attn.norm_q.weight"),
                                     KEY(knk, "attn.norm_k.weight"), 1};
  dit_blocks_qkv_t ai = dit_blocks_attn_project(b, ni, ni, &ki, NAME("attn.img"));
  const dit_blocks_attn_keys_t kc = {KEY(kq, "attn.add_q_proj"), KEY(kk, "attn.add_k_proj"), KEY(kv, "attn.add_v_proj"),
                                     KEY(knq, "attn.norm_added_q.weight"), KEY(knk, "attn.norm_added_k.weight"), 1};
  dit_blocks_qkv_t ac = dit_blocks_attn_project(b, nc, nc, &kc, NAME("attn.txt"));
  ai.q = dit_blocks_rope_table(b, ai.q, cs_img, NAME("attn.rope_q"));
  ai.k = dit_blocks_rope_table(b, ai.k, cs_img, NAME("attn.rope_k"));
  dit_vid_t a_img, a_txt;
  dit_blocks_joint_attention(b, ai.q, ai.k, ai.v, ac.q, ac.k, ac.v, mask, NAME("attn"), &a_img, &a_txt);
  a_img = dit_blocks_linear_row(b, a_img, KEY(k, "attn.to_out.0"), NAME("attn.to_out"));
  a_txt = dit_blocks_linear_row(b, a_txt, KEY(k, "attn.to_add_out"), NAME("attn.to_add_out"));

  *hs = dit_blocks_gated_add(b, *hs, a_img, modi, 2, NAME("attn.residual"));
  dit_vid_t n2 = dit_blocks_adaln(b, *hs, modi, 3, 4, NAME("norm2"));
  const dit_blocks_mlp_t ff = {KEY(kq, "ff.net.0.proj"), KEY(kk, "ff.net.2"), DIT_OP_GELU_TANH, KEY(nu, "ff.up"), KEY(na, "ff.gelu"),
                               KEY(nd, "ff.down"), 1, dt};
  *hs = dit_blocks_gated_add(b, *hs, dit_blocks_mlp(b, n2, &ff), modi, 5, NAME("ff.residual"));

  *ctx = dit_blocks_gated_add(b, *ctx, a_txt, modc, 2, NAME("attn.context_residual"));
  dit_vid_t n2c = dit_blocks_adaln(b, *ctx, modc, 3, 4, NAME("norm2_context"));
  const dit_blocks_mlp_t ffc = {KEY(kq, "ff_context.net.0.proj"), KEY(kk, "ff_context.net.2"), DIT_OP_GELU_TANH,
                                KEY(nu, "ff_context.up"), KEY(na, "ff_context.gelu"), KEY(nd, "ff_context.down"), 1, dt};
  *ctx = dit_blocks_gated_add(b, *ctx, dit_blocks_mlp(b, n2c, &ffc), modc, 5, NAME("ff_context.residual"));
#undef NAME
#undef KEY
}

dit_vid_t dit_blocks_flux_single(dit_blocks_t *b, int64_t i, dit_vid_t tsilu, dit_vid_t cs, dit_vid_t bound, dit_vid_t mask,
                                 int64_t Tl, int64_t L, dit_vid_t x) {
  const dit_dtype_t dt = b->o.dtype;
  char n[192], k[192], kq[192], kk[192], kv[192], knq[192], knk[192];
#define NAME(s) (snprintf(n, sizeof n, "single_transformer_blocks.%" PRId64 ".%s", i, s), n)
#define KEY(buf, s) (snprintf(buf, sizeof buf, "single_transformer_blocks.%" PRId64 ".%s", i, s), buf)
  const dit_blocks_mod_t mod = dit_blocks_mod_rows(b, tsilu, KEY(k, "norm.linear"), 3, NAME("norm.mod"));
  dit_vid_t nx = dit_blocks_adaln(b, x, mod, 0, 1, NAME("norm"));
  dit_vid_t mlp = dit_blocks_linear_col(b, nx, KEY(k, "proj_mlp"), dt, NAME("proj_mlp"));
  mlp = dit_blocks_unary(b, DIT_OP_GELU_TANH, mlp, dt, NAME("act_mlp"));
  const dit_blocks_attn_keys_t ka = {KEY(kq, "attn.to_q"), KEY(kk, "attn.to_k"), KEY(kv, "attn.to_v"), KEY(knq, "attn.norm_q.weight"),
                                     KEY(knk, "attn.norm_k.weight"), 1};
  dit_blocks_qkv_t at = dit_blocks_attn_project(b, nx, nx, &ka, NAME("attn"));
  at.q = dit_blocks_rope_table(b, at.q, cs, NAME("attn.rope_q"));
  at.k = dit_blocks_rope_table(b, at.k, cs, NAME("attn.rope_k"));
  dit_vid_t a;
  if (b->o.cp <= 1) {
    a = dit_blocks_attention_bounded(b, at.q, at.k, at.v, bound, NAME("attn.sdpa"));
  } else {
    /* The rows of this rank's image tokens and of the text, attended jointly across the group. */
    dit_vid_t p[6], *src[3] = {&at.q, &at.k, &at.v}, a_img, a_txt;
    static const char *const rows[3][2] = {{"attn.q_img", "attn.q_txt"}, {"attn.k_img", "attn.k_txt"}, {"attn.v_img", "attn.v_txt"}};
    for (int j = 0; j < 3; j++) {
      p[j] = dit_blocks_slice_tokens(b, *src[j], 0, Tl, dt, NAME(rows[j][0]));
      p[3 + j] = dit_blocks_slice_tokens(b, *src[j], Tl, L, dt, NAME(rows[j][1]));
    }
    dit_blocks_joint_attention(b, p[0], p[1], p[2], p[3], p[4], p[5], mask, NAME("attn"), &a_img, &a_txt);
    a = dit_blocks_concat(b, a_img, a_txt, 1, NAME("attn.rows"));
  }
  /* The output projection's input features: the attention's (the model width) then the MLP's. */
  dit_vid_t y = dit_blocks_linear_row2(b, a, mlp, KEY(k, "proj_out"), b->o.heads * b->o.head_dim, NAME("proj_out"));
  return dit_blocks_gated_add(b, x, y, mod, 2, NAME("residual"));
#undef NAME
#undef KEY
}

dit_vid_t dit_blocks_flux_out(dit_blocks_t *b, dit_vid_t x, dit_vid_t tsilu) {
  const dit_blocks_mod_t mod = dit_blocks_mod_rows(b, tsilu, "norm_out.linear", 2, "norm_out.mod");
  dit_vid_t y = dit_blocks_linear(b, dit_blocks_adaln(b, x, mod, 1, 0, "norm_out"), "proj_out", b->o.dtype, "proj_out");
  return dit_blocks_cp_gather(b, y, "proj_out.all_tokens");
}
