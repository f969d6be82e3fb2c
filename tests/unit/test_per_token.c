/* Per-token modulation (Wan2.2 TI2V: one timestep per patch token): the shape rules of the
 * per-token forms of timestep_embed, mod_table, adaln and gated_add; the CPU kernels against
 * naive references and against the per-batch form applied to each token as a batch item of its
 * own (bit for bit); the refusals of mismatched operands; and, where NVRTC is present, the GPU
 * specializations of every per-token form compiling for sm_90. The unstored form (adaln and
 * gated_add reading the table and e themselves) against mod_table then the stored form, bit for
 * bit, its refusals and its kernels. Also the cast op that lets an
 * fp32 layer over many rows run as an fp32 library GEMM: its rounding (ties to even), that an fp32 linear
 * then a cast gives the bytes of a linear storing bf16 itself, its shape rule, its kernel, and
 * the code generator's choice of cuBLASLt for fp32 linears with many rows. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compiler/codegen_cuda.h"
#include "base/dtype.h"
#include "ir/graph.h"
#include "passes/passes.h"
#include "runtime/cpu/cpu_ops.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

static dit_tensor_t f32(int rank, const int64_t *dims, int fill) {
  dit_tensor_t t = {.dtype = DIT_F32, .rank = rank};
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  const int64_t n = dit_tensor_numel(&t);
  float *p = malloc(sizeof(float) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) p[i] = fill ? frand() : NAN;
  t.data = p;
  return t;
}

static double max_rel(const dit_tensor_t *a, const double *ref) {
  const int64_t n = dit_tensor_numel(a);
  double m = 0, e = 0;
  for (int64_t i = 0; i < n; i++) {
    const double v = ((const float *)a->data)[i];
    if (fabs(ref[i]) > m) m = fabs(ref[i]);
    if (!(fabs(v - ref[i]) <= e)) e = isnan(v) ? INFINITY : fabs(v - ref[i]);
  }
  return m > 0 ? e / m : e;
}

static int same_bytes(const dit_tensor_t *a, const dit_tensor_t *b) {
  return dit_tensor_numel(a) == dit_tensor_numel(b) && !memcmp(a->data, b->data, dit_tensor_nbytes(a));
}

enum { B = 2, T = 5, N = 6, D = 24 };
static const dit_token_group_t ONE_ROW = {1, 0}; /* a row of e per token */

static dit_cpu_t g_cpu;

/* t [B, T] -> [B, T, dim]: each token's row equals the [B*T] batch form's row. */
static void test_timestep_embed(void) {
  const int64_t td[2] = {B, T}, flat[1] = {B * T}, od[3] = {B, T, 32}, fd[2] = {B * T, 32};
  dit_tensor_t t = f32(2, td, 1), y = f32(3, od, 0), yf = f32(2, fd, 0);
  float *tv = t.data;
  for (int i = 0; i < B * T; i++) tv[i] = (float)(i * 97 % 1000);
  CHECK_OK(dit_cpu_timestep_embed(&g_cpu, &t, 1, 0, 10000, 1, &y));
  dit_tensor_t tf = t;
  tf.rank = 1, tf.dims[0] = flat[0];
  CHECK_OK(dit_cpu_timestep_embed(&g_cpu, &tf, 1, 0, 10000, 1, &yf));
  CHECK(same_bytes(&y, &yf));
  /* flip: cos first; token 3 of item 1 at its own timestep */
  const float *yv = y.data;
  const double tt = tv[1 * T + 3], f1 = exp(-log(10000.0) * 1 / 16.0);
  CHECK_NEAR(yv[(1 * T + 3) * 32 + 1], cos(tt * f1), 1e-4);
  CHECK_NEAR(yv[(1 * T + 3) * 32 + 17], sin(tt * f1), 1e-4);
  /* An output shaped for another token count is refused. */
  const int64_t bad[3] = {B, T + 1, 32};
  dit_tensor_t yb = f32(3, bad, 0);
  CHECK_ERR(dit_cpu_timestep_embed(&g_cpu, &t, 1, 0, 10000, 1, &yb), INVALID_ARGUMENT, "timestep_embed");
  free(yb.data), free(t.data), free(y.data), free(yf.data);
}

/* table [1, n, D] + e [B, T, r*D] -> [B, T, n, D], for r = n and r = 1. */
static void test_mod_table(void) {
  const int64_t tbl[3] = {1, N, D};
  dit_tensor_t table = f32(3, tbl, 1);
  for (int r = 1; r <= N; r += N - 1) {
    const int64_t ed[3] = {B, T, r * D}, od[4] = {B, T, N, D};
    dit_tensor_t e = f32(3, ed, 1), out = f32(4, od, 0);
    CHECK_OK(dit_cpu_mod_table(&g_cpu, &table, &e, &out));
    double *ref = malloc(sizeof(double) * B * T * N * D);
    const float *tv = table.data, *ev = e.data;
    for (int bt = 0; bt < B * T; bt++)
      for (int j = 0; j < N; j++)
        for (int d = 0; d < D; d++) ref[(bt * N + j) * D + d] = (double)tv[j * D + d] + ev[(bt * r + (r == 1 ? 0 : j)) * D + d];
    CHECK(max_rel(&out, ref) <= 1e-6);
    /* An e whose token count differs from out's is refused. */
    const int64_t bad[3] = {B, T - 1, r * D};
    dit_tensor_t eb = f32(3, bad, 1);
    CHECK_ERR(dit_cpu_mod_table(&g_cpu, &table, &eb, &out), INVALID_ARGUMENT, "per-token");
    free(eb.data), free(ref), free(e.data), free(out.data);
  }
  free(table.data);
}

/* adaln and gated_add with mod [B, T, n, D]: token t reads its own rows; the same bytes as the
 * per-batch form with every token a batch item. */
static void test_adaln_gated(void) {
  const int64_t xd[3] = {B, T, D}, md[4] = {B, T, N, D}, xf[3] = {B * T, 1, D}, mf[3] = {B * T, N, D};
  dit_tensor_t x = f32(3, xd, 1), yv = f32(3, xd, 1), mod = f32(4, md, 1), y = f32(3, xd, 0), yb = f32(3, xd, 0);
  CHECK_OK(dit_cpu_adaln(&g_cpu, &x, &mod, DIT_TOKEN_GROUP_NONE, 1e-6, 3, 4, &y));
  double *ref = malloc(sizeof(double) * B * T * D);
  const float *xv = x.data, *mv = mod.data, *yy = yv.data;
  for (int bt = 0; bt < B * T; bt++) {
    double mean = 0, var = 0;
    for (int d = 0; d < D; d++) mean += xv[bt * D + d];
    mean /= D;
    for (int d = 0; d < D; d++) var += (xv[bt * D + d] - mean) * (xv[bt * D + d] - mean);
    const double rstd = 1 / sqrt(var / D + 1e-6);
    for (int d = 0; d < D; d++)
      ref[bt * D + d] = (xv[bt * D + d] - mean) * rstd * (1 + mv[(bt * N + 4) * D + d]) + mv[(bt * N + 3) * D + d];
  }
  CHECK(max_rel(&y, ref) <= 1e-5);
  dit_tensor_t x1 = x, m1 = mod, y1 = yb;
  x1.rank = m1.rank = y1.rank = 3;
  memcpy(x1.dims, xf, sizeof xf), memcpy(y1.dims, xf, sizeof xf), memcpy(m1.dims, mf, sizeof mf);
  CHECK_OK(dit_cpu_adaln(&g_cpu, &x1, &m1, DIT_TOKEN_GROUP_NONE, 1e-6, 3, 4, &y1));
  CHECK(same_bytes(&y, &y1));

  CHECK_OK(dit_cpu_gated_add(&g_cpu, &x, &yv, &mod, DIT_TOKEN_GROUP_NONE, 5, &y));
  for (int bt = 0; bt < B * T; bt++)
    for (int d = 0; d < D; d++) ref[bt * D + d] = (double)xv[bt * D + d] + (double)yy[bt * D + d] * mv[(bt * N + 5) * D + d];
  CHECK(max_rel(&y, ref) <= 1e-6);
  dit_tensor_t v1 = yv;
  memcpy(v1.dims, xf, sizeof xf);
  CHECK_OK(dit_cpu_gated_add(&g_cpu, &x1, &v1, &m1, DIT_TOKEN_GROUP_NONE, 5, &y1));
  CHECK(same_bytes(&y, &y1));

  /* A per-token table for another token count is refused, naming the operand. */
  const int64_t bad[4] = {B, T + 1, N, D};
  dit_tensor_t mb = f32(4, bad, 1);
  CHECK_ERR(dit_cpu_adaln(&g_cpu, &x, &mb, DIT_TOKEN_GROUP_NONE, 1e-6, 0, 1, &y), INVALID_ARGUMENT, "mod");
  CHECK_ERR(dit_cpu_gated_add(&g_cpu, &x, &yv, &mb, DIT_TOKEN_GROUP_NONE, 2, &y), INVALID_ARGUMENT, "mod");
  CHECK_ERR(dit_cpu_gated_add(&g_cpu, &x, &yv, &mod, DIT_TOKEN_GROUP_NONE, N, &y), INVALID_ARGUMENT, "gate 6 out of range");
  free(mb.data), free(ref), free(x.data), free(yv.data), free(mod.data), free(y.data), free(yb.data);
}

/* The graph's shape rules: the per-token forms' shapes, and mismatches refused at build time.
 * fused: adaln and gated_add read the table and e [B, T, n*d] (bf16, as timestep_proj) rather
 * than mod_table's output, and an output-norm adaln reads a two-row table and e [B, T, d]. */
static dit_graph_t *per_token_graph_d(int64_t mod_tokens, int fused, int64_t d, dit_vid_t *out_ops) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const int64_t td[2] = {B, T}, xd[3] = {B, mod_tokens, d}, tbl[3] = {1, N, d}, tbl2[3] = {1, 2, d}, w1[2] = {N * d, 32},
                w2[2] = {d, 32};
  dit_vid_t t = dit_graph_input(g, "timestep", DIT_F32, 2, td);
  dit_vid_t x = dit_graph_input(g, "x", DIT_BF16, 3, xd);
  dit_attrs_t ta = {0};
  dit_attrs_set_int(&ta, "dim", 32);
  dit_attrs_set_int(&ta, "flip", 1);
  dit_attrs_set_float(&ta, "shift", 0);
  dit_attrs_set_float(&ta, "max_period", 10000);
  dit_attrs_set_float(&ta, "scale", 1);
  out_ops[0] = dit_graph_op(g, DIT_OP_TIMESTEP_EMBED, &t, 1, &ta, DIT_F32, "sinusoid");
  dit_vid_t lin[2] = {out_ops[0], dit_graph_weight(g, "proj", DIT_F32, 2, w1)};
  dit_vid_t e = dit_graph_op(g, DIT_OP_LINEAR, lin, 2, NULL, fused ? DIT_BF16 : DIT_F32, "proj");
  dit_vid_t table = dit_graph_weight(g, "table", DIT_F32, 3, tbl);
  dit_attrs_t pa = {0};
  dit_attrs_set_int(&pa, "per_token", 1);
  dit_vid_t mi[2] = {table, e};
  out_ops[1] = fused ? e : dit_graph_op(g, DIT_OP_MOD_TABLE, mi, 2, &pa, DIT_F32, "mod");
  dit_attrs_t aa = {0};
  dit_attrs_set_float(&aa, "eps", 1e-6);
  dit_attrs_set_int(&aa, "shift", 0);
  dit_attrs_set_int(&aa, "scale", 1);
  dit_vid_t ai[3] = {x, fused ? table : out_ops[1], e};
  out_ops[2] = dit_graph_op(g, DIT_OP_ADALN, ai, fused ? 3 : 2, &aa, DIT_BF16, "adaln");
  dit_attrs_t ga = {0};
  dit_attrs_set_int(&ga, "gate", 2);
  dit_vid_t gi[4] = {x, out_ops[2], fused ? table : out_ops[1], e};
  out_ops[3] = dit_graph_op(g, DIT_OP_GATED_ADD, gi, fused ? 4 : 3, &ga, DIT_BF16, "gated");
  if (fused) {
    dit_vid_t l2[2] = {out_ops[0], dit_graph_weight(g, "proj2", DIT_F32, 2, w2)};
    dit_vid_t e1 = dit_graph_op(g, DIT_OP_LINEAR, l2, 2, NULL, DIT_BF16, "temb");
    dit_vid_t oi[3] = {out_ops[3], dit_graph_weight(g, "table2", DIT_F32, 3, tbl2), e1};
    dit_graph_op(g, DIT_OP_ADALN, oi, 3, &aa, DIT_BF16, "norm_out");
  }
  return g;
}

static dit_graph_t *per_token_graph(int64_t mod_tokens, dit_vid_t *out_ops) {
  return per_token_graph_d(mod_tokens, 0, D, out_ops);
}

static void test_shapes(void) {
  dit_vid_t v[4];
  dit_graph_t *g = per_token_graph(T, v);
  CHECK(dit_graph_status(g) == DIT_OK);
  const dit_value_t *s = dit_graph_cvalue(g, v[0]), *m = dit_graph_cvalue(g, v[1]);
  CHECK(s && s->rank == 3 && s->dims[0] == B && s->dims[1] == T && s->dims[2] == 32);
  CHECK(m && m->rank == 4 && m->dims[0] == B && m->dims[1] == T && m->dims[2] == N && m->dims[3] == D);
  dit_graph_destroy(g);
  /* Activations of T + 1 tokens cannot take a table of T tokens. */
  g = per_token_graph(T + 1, v);
  dit_status_t st = dit_graph_status(g); /* owned by the graph */
  CHECK(st && dit_status_code(st) == DIT_CODE_INVALID_ARGUMENT && strstr(dit_status_message(st), "per-token mod"));
  dit_graph_destroy(g);
  /* The unstored form: adaln and gated_add keep x's shape; e of another token count is refused. */
  g = per_token_graph_d(T, 1, D, v);
  CHECK(dit_graph_status(g) == DIT_OK);
  const dit_value_t *a = dit_graph_cvalue(g, v[2]), *ga = dit_graph_cvalue(g, v[3]);
  CHECK(a && a->rank == 3 && a->dims[1] == T && a->dims[2] == D && ga && ga->rank == 3 && ga->dims[1] == T);
  dit_graph_destroy(g);
  g = per_token_graph_d(T + 1, 1, D, v);
  st = dit_graph_status(g);
  CHECK(st && dit_status_code(st) == DIT_CODE_INVALID_ARGUMENT && strstr(dit_status_message(st), "adaln: per-token e 'proj'"));
  dit_graph_destroy(g);
  /* A table whose rows are not x's width is refused too. */
  CHECK_OK(dit_graph_create(&g));
  const int64_t xd[3] = {B, T, D}, tb[3] = {1, N, D + 8}, ed[3] = {B, T, N * D};
  dit_vid_t in[3] = {dit_graph_input(g, "x", DIT_F32, 3, xd), dit_graph_weight(g, "table", DIT_F32, 3, tb),
                     dit_graph_input(g, "e", DIT_F32, 3, ed)};
  dit_attrs_t aa = {0};
  dit_attrs_set_float(&aa, "eps", 1e-6);
  dit_attrs_set_int(&aa, "shift", 0);
  dit_attrs_set_int(&aa, "scale", 1);
  dit_graph_op(g, DIT_OP_ADALN, in, 3, &aa, DIT_F32, "adaln");
  st = dit_graph_status(g);
  CHECK(st && strstr(dit_status_message(st), "adaln: table 'table' is [1,6,32], expected [1,n,24]"));
  dit_graph_destroy(g);
}

/* The unstored per-token form on the CPU: adaln and gated_add given the table and e give the
 * bytes of mod_table's stored table then the stored form, for e with n rows per token
 * (timestep_proj) and with one (the output norm's temb), in fp32 and bf16. */
static void test_fused_cpu(void) {
  for (int r = 1; r <= N; r += N - 1)
    for (int bf = 0; bf <= 1; bf++) {
      const int64_t xd[3] = {B, T, D}, td[3] = {1, N, D}, ed[3] = {B, T, r * D}, md[4] = {B, T, N, D};
      dit_tensor_t x = f32(3, xd, 1), yv = f32(3, xd, 1), table = f32(3, td, 1), e32 = f32(3, ed, 1), mod = f32(4, md, 0);
      dit_tensor_t y = f32(3, xd, 0), yf = f32(3, xd, 0);
      dit_tensor_t e = e32;
      uint16_t *eb = NULL;
      if (bf) {
        eb = malloc(sizeof(uint16_t) * (size_t)dit_tensor_numel(&e32));
        e.dtype = DIT_BF16, e.data = eb;
        CHECK_OK(dit_cpu_cast(&g_cpu, &e32, &e));
      }
      CHECK_OK(dit_cpu_mod_table(&g_cpu, &table, &e, &mod));
      for (int sh = 0; sh < N; sh += 3) {
        CHECK_OK(dit_cpu_adaln(&g_cpu, &x, &mod, DIT_TOKEN_GROUP_NONE, 1e-6, sh, sh + 1, &y));
        CHECK_OK(dit_cpu_adaln_tok(&g_cpu, &x, &table, &e, ONE_ROW, 1e-6, sh, sh + 1, &yf));
        CHECK(same_bytes(&y, &yf));
        CHECK_OK(dit_cpu_gated_add(&g_cpu, &x, &yv, &mod, DIT_TOKEN_GROUP_NONE, sh + 2, &y));
        CHECK_OK(dit_cpu_gated_add_tok(&g_cpu, &x, &yv, &table, &e, ONE_ROW, sh + 2, &yf));
        CHECK(same_bytes(&y, &yf));
      }
      /* The rows really are per token and per row: another e changes the result. */
      ((float *)table.data)[1 * D + 3] += 1.0f;
      CHECK_OK(dit_cpu_adaln_tok(&g_cpu, &x, &table, &e, ONE_ROW, 1e-6, 0, 1, &yf));
      CHECK_OK(dit_cpu_adaln(&g_cpu, &x, &mod, DIT_TOKEN_GROUP_NONE, 1e-6, 0, 1, &y));
      CHECK(!same_bytes(&y, &yf));
      free(x.data), free(yv.data), free(table.data), free(e32.data), free(mod.data), free(y.data), free(yf.data), free(eb);
    }
  /* Mismatched operands are refused, naming them. */
  const int64_t xd[3] = {B, T, D}, td[3] = {1, N, D}, ed[3] = {B, T + 1, N * D}, e2[3] = {B, T, 2 * D}, tb[2] = {N, D};
  dit_tensor_t x = f32(3, xd, 1), table = f32(3, td, 1), e = f32(3, ed, 1), ew = f32(3, e2, 1), t2 = f32(2, tb, 1), y = f32(3, xd, 0);
  CHECK_ERR(dit_cpu_adaln_tok(&g_cpu, &x, &table, &e, ONE_ROW, 1e-6, 0, 1, &y), INVALID_ARGUMENT, "adaln: e has dims [2, 6, 144], expected [2, 5, 24 or 144]");
  CHECK_ERR(dit_cpu_gated_add_tok(&g_cpu, &x, &x, &table, &ew, ONE_ROW, 2, &y), INVALID_ARGUMENT, "gated_add: e has dims [2, 5, 48]");
  CHECK_ERR(dit_cpu_adaln_tok(&g_cpu, &x, &t2, &e, ONE_ROW, 1e-6, 0, 1, &y), INVALID_ARGUMENT, "adaln: table has dims [6, 24], expected [1, n, 24]");
  dit_tensor_t ee = f32(3, (const int64_t[3]){B, T, N * D}, 1);
  CHECK_ERR(dit_cpu_gated_add_tok(&g_cpu, &x, &x, &table, &ee, ONE_ROW, N, &y), INVALID_ARGUMENT, "gated_add: gate 6 out of range");
  CHECK_ERR(dit_cpu_adaln_tok(&g_cpu, &x, &table, &ee, ONE_ROW, 1e-6, N, 1, &y), INVALID_ARGUMENT, "adaln: shift 6 / scale 1 out of range");
  free(x.data), free(table.data), free(e.data), free(ew.data), free(t2.data), free(y.data), free(ee.data);
}

/* Rows shared by runs of tokens (token_group k from token_offset o): adaln and gated_add given
 * e's R rows give the bytes of the same ops given e expanded to a row per token; token_rows picks
 * each run's first token; and the shape rules and the CPU refuse an e of any other row count. */
static void test_grouped_rows(void) {
  enum { TG = 12, K = 4, O = 1, R = (TG + O + K - 1) / K };
  const dit_token_group_t tg = {K, O};
  CHECK_EQ_INT((int)dit_token_group_rows(tg, TG), R);
  CHECK_EQ_INT((int)dit_token_group_row(tg, 2), 0);
  CHECK_EQ_INT((int)dit_token_group_row(tg, 3), 1);
  CHECK_EQ_INT((int)dit_token_group_row(tg, TG - 1), R - 1);
  for (int r = 1; r <= N; r += N - 1) {
    const int64_t xd[3] = {B, TG, D}, td[3] = {1, N, D}, eg[3] = {B, R, r * D}, ex[3] = {B, TG, r * D};
    dit_tensor_t x = f32(3, xd, 1), yv = f32(3, xd, 1), table = f32(3, td, 1), e = f32(3, eg, 1), e_all = f32(3, ex, 0);
    dit_tensor_t y = f32(3, xd, 0), yg = f32(3, xd, 0);
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < TG; t++)
        memcpy((float *)e_all.data + (b * TG + t) * r * D, (const float *)e.data + (b * R + dit_token_group_row(tg, t)) * r * D,
               sizeof(float) * (size_t)(r * D));
    CHECK_OK(dit_cpu_adaln_tok(&g_cpu, &x, &table, &e_all, ONE_ROW, 1e-6, 0, 1, &y));
    CHECK_OK(dit_cpu_adaln_tok(&g_cpu, &x, &table, &e, tg, 1e-6, 0, 1, &yg));
    CHECK(same_bytes(&y, &yg));
    CHECK_OK(dit_cpu_gated_add_tok(&g_cpu, &x, &yv, &table, &e_all, ONE_ROW, 2 % r, &y));
    CHECK_OK(dit_cpu_gated_add_tok(&g_cpu, &x, &yv, &table, &e, tg, 2 % r, &yg));
    CHECK(same_bytes(&y, &yg));
    /* Row 1 of item 1 feeds tokens 3..6 only: changing it changes those tokens and no other. */
    CHECK_OK(dit_cpu_adaln_tok(&g_cpu, &x, &table, &e, tg, 1e-6, 0, 1, &y));
    ((float *)e.data)[(1 * R + 1) * r * D] += 0.5f;
    CHECK_OK(dit_cpu_adaln_tok(&g_cpu, &x, &table, &e, tg, 1e-6, 0, 1, &yg));
    for (int64_t t = 0; t < TG; t++) {
      const int changed = memcmp((float *)y.data + (TG + t) * D, (float *)yg.data + (TG + t) * D, sizeof(float) * D) != 0;
      CHECK_EQ_INT(changed, t >= 3 && t <= 6);
    }
    /* The full-row e of the ungrouped form is not the grouped form's. */
    CHECK_ERR(dit_cpu_adaln_tok(&g_cpu, &x, &table, &e_all, tg, 1e-6, 0, 1, &y), INVALID_ARGUMENT, "expected [2, 4, ");
    CHECK_ERR(dit_cpu_gated_add_tok(&g_cpu, &x, &yv, &table, &e, (dit_token_group_t){K, K}, 0, &y), INVALID_ARGUMENT,
              "token group 4 from offset 4");
    free(x.data), free(yv.data), free(table.data), free(e.data), free(e_all.data), free(y.data), free(yg.data);
  }
  /* token_rows: the first of every run. */
  const int64_t td[2] = {B, TG}, rd[2] = {B, TG / K}, bad[2] = {B, TG / K + 1};
  dit_tensor_t t = f32(2, td, 1), rows = f32(2, rd, 0), wrong = f32(2, bad, 0);
  CHECK_OK(dit_cpu_token_rows(&t, K, &rows));
  for (int64_t i = 0; i < B * TG / K; i++) CHECK(((float *)rows.data)[i] == ((float *)t.data)[i * K]);
  CHECK_ERR(dit_cpu_token_rows(&t, K, &wrong), INVALID_ARGUMENT, "token_rows: x [2, 12] and y [2, 4] of group 4");
  CHECK_ERR(dit_cpu_token_rows(&t, 5, &rows), INVALID_ARGUMENT, "of group 5");
  free(t.data), free(rows.data), free(wrong.data);

  /* The shape rules: e of R rows with the attrs; any other count, an offset not below the group,
   * and a group not dividing token_rows' tokens are refused. */
  for (int rows_e = R - 1; rows_e <= R; rows_e++)
    for (int off = O; off <= K; off += K - O) {
      dit_graph_t *g;
      CHECK_OK(dit_graph_create(&g));
      const int64_t xd[3] = {B, TG, D}, tb[3] = {1, N, D}, ed[3] = {B, rows_e, N * D};
      dit_vid_t in[4] = {dit_graph_input(g, "x", DIT_F32, 3, xd), dit_graph_input(g, "y", DIT_F32, 3, xd),
                         dit_graph_weight(g, "table", DIT_F32, 3, tb), dit_graph_input(g, "e", DIT_F32, 3, ed)};
      dit_attrs_t ga = {0};
      dit_attrs_set_int(&ga, "gate", 2);
      dit_attrs_set_int(&ga, "token_group", K);
      dit_attrs_set_int(&ga, "token_offset", off);
      dit_vid_t y = dit_graph_op(g, DIT_OP_GATED_ADD, in, 4, &ga, DIT_F32, "gated");
      dit_status_t st = dit_graph_status(g);
      if (rows_e == R && off == O) {
        CHECK(st == DIT_OK && y >= 0);
      } else if (off != O) {
        CHECK(st && strstr(dit_status_message(st), "'token_offset' = 4, expected below token_group 4"));
      } else {
        CHECK(st && strstr(dit_status_message(st), "gated_add: per-token e 'e' is [2,3,144], expected [2,4,24 or 144] (12 tokens, 4 a row from offset 1)"));
      }
      dit_graph_destroy(g);
    }
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  dit_vid_t ti = dit_graph_input(g, "timestep", DIT_F32, 2, td);
  dit_attrs_t ra = {0};
  dit_attrs_set_int(&ra, "group", 5);
  dit_graph_op(g, DIT_OP_TOKEN_ROWS, &ti, 1, &ra, DIT_F32, "frames");
  dit_status_t st = dit_graph_status(g);
  CHECK(st && strstr(dit_status_message(st), "token_rows: group 5 does not divide the 12 tokens of 'timestep'"));
  dit_graph_destroy(g);
}

#if DIT_HAVE_NVRTC
/* Every op of g but its linears (cuBLASLt's) compiles to a kernel with a cubin. */
static void check_kernels(dit_cuda_codegen_t *cg, const dit_graph_t *g) {
  for (int32_t i = 0; i < dit_graph_num_ops(g); i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    if (op->kind == DIT_OP_LINEAR) continue;
    int has = 0;
    dit_plan_kernel_t k;
    dit_cuda_module_t mod;
    memset(&mod, 0, sizeof mod);
    dit_status_t s = dit_cuda_codegen_op(cg, g, op, &has, &k, &mod);
    if (s) fprintf(stderr, "%s: %s\n", dit_op_info(op->kind)->name, dit_status_message(s));
    CHECK(s == DIT_OK);
    dit_status_free(s);
    CHECK_EQ_INT(has, 1);
    CHECK(mod.cubin && mod.cubin_size > 0);
  }
}
#endif

/* The stored form with shared rows: mod_table per token over e's R rows gives [B, R, n, D], and
 * adaln and gated_add reading it through the token group give the unstored form's bytes; its
 * shape rule takes R rows and refuses T; and where NVRTC is present, its kernels (adaln,
 * gated_add, and a layernorm with the gated residual folded in) compile for sm_90. */
static void test_grouped_stored(void) {
  enum { TG = 12, K = 4, O = 1, R = (TG + O + K - 1) / K };
  const dit_token_group_t tg = {K, O};
  const int64_t xd[3] = {B, TG, D}, td[3] = {1, N, D}, eg[3] = {B, R, N * D}, md[4] = {B, R, N, D};
  dit_tensor_t x = f32(3, xd, 1), yv = f32(3, xd, 1), table = f32(3, td, 1), e = f32(3, eg, 1), mod = f32(4, md, 0);
  dit_tensor_t y = f32(3, xd, 0), ys = f32(3, xd, 0);
  CHECK_OK(dit_cpu_mod_table(&g_cpu, &table, &e, &mod));
  CHECK_OK(dit_cpu_adaln_tok(&g_cpu, &x, &table, &e, tg, 1e-6, 3, 4, &y));
  CHECK_OK(dit_cpu_adaln(&g_cpu, &x, &mod, tg, 1e-6, 3, 4, &ys));
  CHECK(same_bytes(&y, &ys));
  CHECK_OK(dit_cpu_gated_add_tok(&g_cpu, &x, &yv, &table, &e, tg, 5, &y));
  CHECK_OK(dit_cpu_gated_add(&g_cpu, &x, &yv, &mod, tg, 5, &ys));
  CHECK(same_bytes(&y, &ys));
  /* Read as a row per token, R rows are too few. */
  CHECK_ERR(dit_cpu_adaln(&g_cpu, &x, &mod, ONE_ROW, 1e-6, 3, 4, &ys), INVALID_ARGUMENT, "mod");
  CHECK_ERR(dit_cpu_gated_add(&g_cpu, &x, &yv, &mod, (dit_token_group_t){K, K}, 5, &ys), INVALID_ARGUMENT, "token group 4 from offset 4");
  free(x.data), free(yv.data), free(table.data), free(e.data), free(mod.data), free(y.data), free(ys.data);

  for (int rows = R; rows <= TG; rows += TG - R) {
    dit_graph_t *g;
    CHECK_OK(dit_graph_create(&g));
    const int64_t gd[4] = {B, rows, N, D}, wd[1] = {D};
    dit_vid_t xv = dit_graph_input(g, "x", DIT_BF16, 3, xd), yi = dit_graph_input(g, "y", DIT_BF16, 3, xd);
    dit_vid_t m = dit_graph_input(g, "mod", DIT_F32, 4, gd);
    dit_attrs_t ga = {0}, aa = {0}, la = {0};
    dit_attrs_set_int(&ga, "gate", 2);
    dit_attrs_set_int(&ga, "token_group", K);
    dit_attrs_set_int(&ga, "token_offset", O);
    aa = ga;
    dit_attrs_set_float(&aa, "eps", 1e-6);
    dit_attrs_set_int(&aa, "shift", 0);
    dit_attrs_set_int(&aa, "scale", 1);
    dit_attrs_set_float(&la, "eps", 1e-6);
    dit_vid_t ai[2] = {xv, m}, gi[3] = {xv, yi, m};
    dit_vid_t a = dit_graph_op(g, DIT_OP_ADALN, ai, 2, &aa, DIT_BF16, "adaln");
    dit_vid_t h = dit_graph_op(g, DIT_OP_GATED_ADD, gi, 3, &ga, DIT_BF16, "gated");
    dit_vid_t li[3] = {h, dit_graph_weight(g, "w", DIT_F32, 1, wd), dit_graph_weight(g, "b", DIT_F32, 1, wd)};
    dit_vid_t n = dit_graph_op(g, DIT_OP_LAYERNORM, li, 3, &la, DIT_BF16, "ln");
    dit_status_t st = dit_graph_status(g);
    if (rows == TG) {
      CHECK(st && strstr(dit_status_message(st), "adaln: per-token mod 'mod' is [2,12,6,24], expected [2,4,n,24] (12 tokens, 4 a row from offset 1)"));
      dit_graph_destroy(g);
      continue;
    }
    CHECK(st == DIT_OK);
    dit_graph_mark_output(g, a, "a");
    dit_graph_mark_output(g, n, "n");
    dit_graph_mark_output(g, h, "h");
    dit_pass_result_t pr = {0};
    CHECK_OK(dit_pass_fuse(g, &pr));
    CHECK_EQ_INT(pr.fused_ops, 1);
    const dit_attr_t *kg = dit_attrs_find(&dit_graph_cop_at(g, dit_graph_num_ops(g) - 1)->attrs, "token_group");
    CHECK(kg && kg->i == K);
#if DIT_HAVE_NVRTC
    dit_cuda_codegen_t *cg = NULL;
    CHECK_OK(dit_cuda_codegen_create("sm_90", check_tmpdir("per_token_grouped_codegen"), &cg));
    if (cg) check_kernels(cg, g);
    dit_cuda_codegen_destroy(cg);
#endif
    dit_graph_destroy(g);
  }
}

/* Every per-token specialization compiles for sm_90 through NVRTC (and MLIR where the gated
 * residual goes there), with no GPU. */
static void test_codegen(void) {
#if DIT_HAVE_NVRTC
  dit_cuda_codegen_t *cg = NULL;
  CHECK_OK(dit_cuda_codegen_create("sm_90", check_tmpdir("per_token_codegen"), &cg));
  if (!cg) return;
  dit_vid_t v[4];
  /* The stored table, then the unstored form with D a multiple of 8 (VEC8) and not. */
  for (int form = 0; form < 3; form++) {
  dit_graph_t *g = per_token_graph_d(T, form > 0, form == 2 ? 12 : D, v);
  CHECK(dit_graph_status(g) == DIT_OK);
  check_kernels(cg, g);
  dit_graph_destroy(g);
  }
  dit_cuda_codegen_destroy(cg);
#endif
}

/* ---- cast ---- */

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* f32 -> bf16 rounds to nearest, ties to even; bf16 -> f32 is exact; f32 -> f16 ties to even. */
static void test_cast_values(void) {
  static const struct { uint32_t f; uint16_t bf; } cases[] = {
      {0x3F800000u, 0x3F80}, /* 1 */
      {0x3F808000u, 0x3F80}, /* 1 + 2^-8: a tie, to the even 0x3F80 */
      {0x3F818000u, 0x3F82}, /* a tie, to the even 0x3F82 (up) */
      {0x3F808001u, 0x3F81}, /* just above a tie: up */
      {0x3F807FFFu, 0x3F80}, /* just below: down */
      {0xBF818000u, 0xBF82}, /* negative tie, to even */
      {0x7F7FFFFFu, 0x7F80}, /* the largest float rounds to infinity */
      {0xFF800000u, 0xFF80}, /* -inf */
      {0x00000001u, 0x0000}, /* the smallest subnormal rounds to zero */
      {0x7FA00000u, 0x7FE0}, /* a signalling NaN comes out quiet */
  };
  enum { NC = sizeof cases / sizeof cases[0] };
  const int64_t d[1] = {NC};
  dit_tensor_t x = f32(1, d, 0), y = {.dtype = DIT_BF16, .rank = 1, .dims = {NC}}, back = f32(1, d, 0);
  uint16_t out[NC];
  y.data = out;
  for (int i = 0; i < NC; i++) ((float *)x.data)[i] = from_bits(cases[i].f);
  CHECK_OK(dit_cpu_cast(&g_cpu, &x, &y));
  for (int i = 0; i < NC; i++) {
    if (out[i] != cases[i].bf) fprintf(stderr, "cast 0x%08x: 0x%04x, expected 0x%04x\n", cases[i].f, out[i], cases[i].bf);
    CHECK_EQ_INT(out[i], cases[i].bf);
  }
  CHECK_OK(dit_cpu_cast(&g_cpu, &y, &back));
  for (int i = 0; i < NC; i++) {
    uint32_t u;
    memcpy(&u, &((float *)back.data)[i], 4);
    CHECK_EQ_INT(u, (uint32_t)cases[i].bf << 16);
  }
  /* f16: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 (to 1), 1 + 3 * 2^-11 one to 1 + 2^-9. */
  uint16_t h[2];
  dit_tensor_t x2 = f32(1, (const int64_t[]){2}, 0), yh = {.dtype = DIT_F16, .rank = 1, .dims = {2}, .data = h};
  ((float *)x2.data)[0] = from_bits(0x3F801000u), ((float *)x2.data)[1] = from_bits(0x3F803000u);
  CHECK_OK(dit_cpu_cast(&g_cpu, &x2, &yh));
  CHECK_EQ_INT(h[0], 0x3C00);
  CHECK_EQ_INT(h[1], 0x3C02);
  /* Refusals: other dims, a non-float dtype, an output over its input. */
  dit_tensor_t ys = y;
  ys.dims[0] = NC - 1;
  CHECK_ERR(dit_cpu_cast(&g_cpu, &x, &ys), INVALID_ARGUMENT, "cast");
  int32_t iv[NC];
  dit_tensor_t yi = {.dtype = DIT_I32, .rank = 1, .dims = {NC}, .data = iv};
  CHECK_ERR(dit_cpu_cast(&g_cpu, &x, &yi), INVALID_ARGUMENT, "expected f32, bf16 or f16");
  dit_tensor_t ya = x;
  ya.dtype = DIT_BF16;
  CHECK_ERR(dit_cpu_cast(&g_cpu, &x, &ya), INVALID_ARGUMENT, "cast");
  free(x.data), free(back.data), free(x2.data);
}

/* An fp32 linear writing fp32, then a cast to bf16 (the form a library GEMM over many rows
 * takes) gives the bytes of the linear storing bf16 itself: one rounding of the same fp32
 * sums. Large enough for the thread pool to split both. */
static void test_cast_after_linear(void) {
  enum { M = 300, K = 96, NN = 80 };
  const int64_t xd[3] = {1, M, K}, wd[2] = {NN, K}, bd[1] = {NN}, yd[3] = {1, M, NN};
  dit_tensor_t x = f32(3, xd, 1), w = f32(2, wd, 1), bias = f32(1, bd, 1), yf = f32(3, yd, 0);
  uint16_t *direct = malloc(sizeof(uint16_t) * M * NN), *cast = malloc(sizeof(uint16_t) * M * NN);
  dit_tensor_t yb = {.dtype = DIT_BF16, .rank = 3, .dims = {1, M, NN}, .data = direct}, yc = yb;
  yc.data = cast;
  CHECK_OK(dit_cpu_linear(&g_cpu, &x, &w, &bias, &yb));
  CHECK_OK(dit_cpu_linear(&g_cpu, &x, &w, &bias, &yf));
  CHECK_OK(dit_cpu_cast(&g_cpu, &yf, &yc));
  CHECK(same_bytes(&yb, &yc));
  /* and the cast is the per-element conversion */
  int per_element = 1;
  for (int64_t i = 0; i < (int64_t)M * NN; i++) per_element &= cast[i] == dit_f32_to_bf16(((const float *)yf.data)[i]);
  CHECK(per_element);
  free(direct), free(cast), free(x.data), free(w.data), free(bias.data), free(yf.data);
}

/* The shape rule: the input's shape in the op's dtype; a non-float input refused at build. */
static void test_cast_shape(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const int64_t d[3] = {2, 3, 5};
  dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 3, d);
  dit_vid_t y = dit_graph_op(g, DIT_OP_CAST, &x, 1, NULL, DIT_BF16, "y");
  const dit_value_t *v = dit_graph_cvalue(g, y);
  CHECK(v && v->dtype == DIT_BF16 && v->rank == 3 && v->dims[0] == 2 && v->dims[1] == 3 && v->dims[2] == 5);
  CHECK(dit_graph_status(g) == DIT_OK);
  dit_vid_t i = dit_graph_input(g, "i", DIT_I64, 3, d);
  dit_graph_op(g, DIT_OP_CAST, &i, 1, NULL, DIT_F32, "yi");
  dit_status_t st = dit_graph_status(g); /* owned by the graph */
  CHECK(st && dit_status_code(st) == DIT_CODE_INVALID_ARGUMENT && strstr(dit_status_message(st), "cast: operand x 'i' has dtype i64"));
  dit_graph_destroy(g);
}

#if DIT_HAVE_NVRTC
/* has_kernel of the last op of g: 1 a generated kernel (compiled), 0 the runtime's library. */
static int codegen_has_kernel(dit_cuda_codegen_t *cg, const dit_graph_t *g) {
  const dit_op_t *op = dit_graph_cop_at(g, dit_graph_num_ops(g) - 1);
  int has = -1;
  dit_plan_kernel_t k;
  dit_cuda_module_t mod;
  memset(&mod, 0, sizeof mod);
  dit_status_t s = dit_cuda_codegen_op(cg, g, op, &has, &k, &mod);
  if (s) fprintf(stderr, "%s '%s': %s\n", dit_op_info(op->kind)->name, dit_graph_cvalue(g, op->out[0])->name, dit_status_message(s));
  CHECK(s == DIT_OK);
  dit_status_free(s);
  if (has == 1) CHECK(mod.cubin && mod.cubin_size > 0);
  return s ? -1 : has;
}

/* The per-token time embedder's GEMMs: fp32 x fp32 -> fp32 with 64 rows or more goes to
 * cuBLASLt (no kernel), fewer rows or a bf16 output stay on the small kernel; the cast's
 * kernel compiles, vectorized and not, both ways. */
static void test_cast_and_f32_gemm_codegen(void) {
  dit_cuda_codegen_t *cg = NULL;
  CHECK_OK(dit_cuda_codegen_create("sm_90", check_tmpdir("per_token_cast_codegen"), &cg));
  if (!cg) return;
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const int64_t wd[2] = {48, 32}, bd[1] = {48};
  dit_vid_t w = dit_graph_weight(g, "w", DIT_F32, 2, wd), b = dit_graph_weight(g, "b", DIT_F32, 1, bd);
  dit_vid_t wb = dit_graph_weight(g, "wb", DIT_BF16, 2, wd);
  for (int64_t rows = 63; rows <= 64; rows++) {
    const int64_t xd[3] = {1, rows, 32};
    dit_vid_t x = dit_graph_input(g, rows == 63 ? "x63" : "x64", DIT_F32, 3, xd), in[3] = {x, w, b};
    dit_vid_t y = dit_graph_op(g, DIT_OP_LINEAR, in, 3, NULL, DIT_F32, rows == 63 ? "y63" : "y64");
    CHECK_EQ_INT(codegen_has_kernel(cg, g), rows >= 64 ? 0 : 1);
    dit_graph_op(g, DIT_OP_LINEAR, in, 2, NULL, DIT_F32, "nobias");
    CHECK_EQ_INT(codegen_has_kernel(cg, g), rows >= 64 ? 0 : 1);
    /* cuBLASLt has no fp32 x fp32 -> bf16: the small kernel, as before the cast existed */
    dit_graph_op(g, DIT_OP_LINEAR, in, 2, NULL, DIT_BF16, "to_bf16");
    CHECK_EQ_INT(codegen_has_kernel(cg, g), 1);
    /* nor mixed fp32 x bf16 */
    dit_vid_t mixed[2] = {x, wb};
    dit_graph_op(g, DIT_OP_LINEAR, mixed, 2, NULL, DIT_F32, "mixed");
    CHECK_EQ_INT(codegen_has_kernel(cg, g), 1);
    dit_graph_op(g, DIT_OP_CAST, &y, 1, NULL, DIT_BF16, "cast"); /* 64 x 48: VEC8 */
    CHECK_EQ_INT(codegen_has_kernel(cg, g), 1);
  }
  const int64_t od[2] = {3, 7};
  dit_vid_t odd = dit_graph_input(g, "odd", DIT_BF16, 2, od);
  dit_graph_op(g, DIT_OP_CAST, &odd, 1, NULL, DIT_F32, "odd_f32"); /* 21 elements: scalar path */
  CHECK_EQ_INT(codegen_has_kernel(cg, g), 1);
  CHECK_OK(dit_graph_status(g));
  dit_graph_destroy(g);
  dit_cuda_codegen_destroy(cg);
}
#endif

int main(void) {
  CHECK_OK(dit_pool_create(3, &g_cpu.pool));
  test_timestep_embed();
  test_mod_table();
  test_adaln_gated();
  test_shapes();
  test_fused_cpu();
  test_grouped_rows();
  test_grouped_stored();
  test_cast_values();
  test_cast_after_linear();
  test_cast_shape();
  test_codegen();
#if DIT_HAVE_NVRTC
  test_cast_and_f32_gemm_codegen();
#endif
  dit_pool_destroy(g_cpu.pool);
  return check_summary("test_per_token");
}
