/* ir/: builder and shape inference, verifier, printer, cost counts. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir/graph.h"

static dit_attrs_t attrs_i(const char *k1, int64_t v1, const char *k2, int64_t v2) {
  dit_attrs_t a = {0};
  if (k1) dit_attrs_set_int(&a, k1, v1);
  if (k2) dit_attrs_set_int(&a, k2, v2);
  return a;
}

static dit_vid_t in3(dit_graph_t *g, const char *name, dit_dtype_t t, int64_t a, int64_t b, int64_t c) {
  int64_t d[3] = {a, b, c};
  return dit_graph_input(g, name, t, 3, d);
}

static void test_builder_shapes(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int64_t xs[5] = {2, 4, 3, 8, 6};
  dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 5, xs);
  dit_attrs_t pa = {0};
  dit_attrs_set_int(&pa, "pt", 1);
  dit_attrs_set_int(&pa, "ph", 2);
  dit_attrs_set_int(&pa, "pw", 2);
  dit_vid_t p = dit_graph_op(g, DIT_OP_PATCHIFY, &x, 1, &pa, DIT_F32, "p");
  const dit_value_t *pv = dit_graph_cvalue(g, p);
  CHECK_EQ_INT(pv->rank, 3);
  CHECK_EQ_INT(pv->dims[0], 2);
  CHECK_EQ_INT(pv->dims[1], 3 * 4 * 3);
  CHECK_EQ_INT(pv->dims[2], 16);
  int64_t ws[5] = {32, 4, 1, 2, 2}, bs[1] = {32};
  dit_vid_t lin_in[3] = {p, dit_graph_weight(g, "w", DIT_F32, 5, ws), dit_graph_weight(g, "b", DIT_F32, 1, bs)};
  dit_vid_t h = dit_graph_op(g, DIT_OP_LINEAR, lin_in, 3, NULL, DIT_BF16, "h");
  CHECK_EQ_INT(dit_graph_cvalue(g, h)->dims[2], 32);
  CHECK_EQ_INT(dit_graph_cvalue(g, h)->dtype, DIT_BF16);
  dit_attrs_t aa = attrs_i("heads", 4, NULL, 0);
  dit_attrs_set_float(&aa, "scale", 0.5);
  dit_vid_t qkv[3] = {h, h, h}, outs[2];
  dit_dtype_t dts[2] = {DIT_BF16, DIT_F32};
  CHECK_OK(dit_graph_op2(g, DIT_OP_ATTENTION, qkv, 3, &aa, dts, "attn", outs));
  const dit_value_t *lse = dit_graph_cvalue(g, outs[1]);
  CHECK_EQ_INT(lse->rank, 3);
  CHECK_EQ_INT(lse->dims[1], 4);
  CHECK_EQ_INT(lse->dims[2], 36);
  dit_graph_mark_output(g, outs[0], "y");
  CHECK(dit_graph_status(g) == DIT_OK);
  CHECK_OK(dit_graph_verify(g));

  /* Bad operands are recorded, not crashed on. */
  int64_t ks[2] = {7, 5};
  dit_vid_t bad_in[2] = {h, dit_graph_weight(g, "bad", DIT_F32, 2, ks)};
  CHECK(dit_graph_op(g, DIT_OP_LINEAR, bad_in, 2, NULL, DIT_F32, "bad_linear") == -1);
  CHECK(dit_graph_status(g) != DIT_OK);
  CHECK(strstr(dit_status_message(dit_graph_status(g)), "weight 'bad' has K = 5") != NULL);
  CHECK_ERR(dit_graph_verify(g), INVALID_ARGUMENT, "bad_linear");
  dit_graph_destroy(g);
}

static void test_shape_errors(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int64_t xs[3] = {1, 10, 12};
  dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 3, xs);
  /* rope: grid does not match the token count */
  dit_attrs_t ra = {0};
  const char *keys[] = {"heads", "f", "h", "w", "t_dim", "h_dim", "w_dim"};
  int64_t vals[] = {2, 1, 3, 3, 2, 2, 2};
  for (int i = 0; i < 7; i++) dit_attrs_set_int(&ra, keys[i], vals[i]);
  dit_attrs_set_float(&ra, "theta", 10000);
  int rank[DIT_OP_MAX_OUT];
  int64_t dims[DIT_OP_MAX_OUT][DIT_MAX_RANK];
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE, &x, 1, &ra, 1, rank, dims), INVALID_ARGUMENT, "10 tokens from 0, grid has 9");
  /* missing attribute */
  dit_attrs_t none = {0};
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE, &x, 1, &none, 1, rank, dims), INVALID_ARGUMENT, "missing integer attribute 'heads'");
  /* adaln row index outside mod */
  int64_t ms[3] = {1, 2, 12};
  dit_vid_t mod = dit_graph_input(g, "mod", DIT_F32, 3, ms);
  dit_vid_t ins[2] = {x, mod};
  dit_attrs_t aa = attrs_i("shift", 0, "scale", 2);
  dit_attrs_set_float(&aa, "eps", 1e-6);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ADALN, ins, 2, &aa, 1, rank, dims), INVALID_ARGUMENT, "scale = 2 outside mod rows 0..1");
  /* add of different shapes */
  int64_t ys[3] = {1, 10, 11};
  dit_vid_t y = dit_graph_input(g, "y", DIT_F32, 3, ys);
  dit_vid_t ab[2] = {x, y};
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ADD, ab, 2, &none, 1, rank, dims), INVALID_ARGUMENT, "differ in shape");
  dit_graph_destroy(g);
}

static void test_verify_and_print(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int64_t xs[2] = {3, 4};
  dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 2, xs);
  dit_vid_t y = dit_graph_op(g, DIT_OP_SILU, &x, 1, NULL, DIT_F32, "y");
  /* No outputs yet: the verifier says so. */
  CHECK_ERR(dit_graph_verify(g), INVALID_ARGUMENT, "no outputs");
  dit_graph_mark_output(g, y, "out");
  CHECK_OK(dit_graph_verify(g));
  /* Corrupt the SSA order by hand: an op reading a value defined later. */
  dit_vid_t z = dit_graph_op(g, DIT_OP_GELU_TANH, &y, 1, NULL, DIT_F32, "z");
  dit_graph_op_at(g, 0)->in[0] = z;
  CHECK_ERR(dit_graph_verify(g), INTERNAL, "used before it is defined");
  dit_graph_op_at(g, 0)->in[0] = x;
  CHECK_OK(dit_graph_verify(g));

  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  dit_graph_print(g, f);
  fclose(f);
  CHECK(strstr(buf, "%0 = input \"x\" : f32[3,4]") != NULL);
  CHECK(strstr(buf, "%1 = silu(%0) : f32[3,4]") != NULL);
  CHECK(strstr(buf, "output \"out\" = %1") != NULL);
  free(buf);
  dit_graph_destroy(g);
}

static void test_cost(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int64_t xs[3] = {2, 16, 8}, ws[2] = {4, 8}, bs[1] = {4};
  dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 3, xs);
  dit_vid_t in[3] = {x, dit_graph_weight(g, "w", DIT_F32, 2, ws), dit_graph_weight(g, "b", DIT_F32, 1, bs)};
  dit_graph_set_block(g, 0);
  dit_vid_t y = dit_graph_op(g, DIT_OP_LINEAR, in, 3, NULL, DIT_F32, "y");
  dit_graph_set_block(g, 1);
  dit_attrs_t aa = attrs_i("heads", 2, NULL, 0);
  dit_attrs_set_float(&aa, "scale", 0.5);
  dit_vid_t qkv[3] = {y, y, y};
  dit_vid_t o = dit_graph_op(g, DIT_OP_ATTENTION, qkv, 3, &aa, DIT_F32, "o");
  dit_graph_mark_output(g, o, "o");
  dit_cost_t pb[2];
  dit_cost_t tot = dit_graph_cost(g, pb, 2);
  /* linear: 2*M*N*K + M*N with M = 32, N = 4, K = 8 */
  CHECK_NEAR(pb[0].flops, 2.0 * 32 * 4 * 8 + 32 * 4, 0);
  /* attention: 4 * B * S * L * C = 4 * 2 * 16 * 16 * 4 */
  CHECK_NEAR(pb[1].flops, 4.0 * 2 * 16 * 16 * 4, 0);
  CHECK_NEAR(tot.flops, pb[0].flops + pb[1].flops, 0);
  /* bytes of the linear: x (2*16*8*4) + w (4*8*4) + b (16) + y (2*16*4*4) */
  CHECK_NEAR(pb[0].bytes, 1024 + 128 + 16 + 512, 0);
  dit_graph_destroy(g);
}

/* reshape, concat, rope_table and rmsnorm's group: shapes, refusals naming the value, and the
 * output dtype they keep. */
static void test_mmdit_ops(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int rank[DIT_OP_MAX_OUT];
  int64_t dims[DIT_OP_MAX_OUT][DIT_MAX_RANK];
  /* reshape: a modulation output [B, n*D] viewed as [B, n, D] */
  int64_t ms[2] = {2, 6 * 16};
  dit_vid_t m = dit_graph_input(g, "mod", DIT_BF16, 2, ms);
  dit_attrs_t ra = {0};
  dit_attrs_set_int(&ra, "rank", 3);
  dit_attrs_set_int(&ra, "d0", 2);
  dit_attrs_set_int(&ra, "d1", 6);
  dit_attrs_set_int(&ra, "d2", 16);
  dit_vid_t mr = dit_graph_op(g, DIT_OP_RESHAPE, &m, 1, &ra, DIT_BF16, "mod3");
  const dit_value_t *mv = dit_graph_cvalue(g, mr);
  CHECK(mv != NULL);
  if (mv) {
    CHECK_EQ_INT(mv->rank, 3);
    CHECK_EQ_INT(mv->dims[0], 2);
    CHECK_EQ_INT(mv->dims[1], 6);
    CHECK_EQ_INT(mv->dims[2], 16);
  }
  dit_attrs_set_int(&ra, "d2", 15);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_RESHAPE, &m, 1, &ra, 1, rank, dims), INVALID_ARGUMENT,
            "reshape: dims [2,6,15] hold 180 elements, x 'mod' [2,96] has 192");
  dit_attrs_set_int(&ra, "d2", 16);
  dit_attrs_set_int(&ra, "d3", 1);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_RESHAPE, &m, 1, &ra, 1, rank, dims), INVALID_ARGUMENT, "attribute d3 given for rank 3");
  dit_attrs_t r9 = attrs_i("rank", DIT_MAX_RANK + 1, NULL, 0);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_RESHAPE, &m, 1, &r9, 1, rank, dims), INVALID_ARGUMENT, "attribute rank = 9, expected 1..8");
  dit_attrs_t r2 = attrs_i("rank", 2, "d0", 192);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_RESHAPE, &m, 1, &r2, 1, rank, dims), INVALID_ARGUMENT, "missing integer attribute 'd1'");
  /* the builder and the verifier keep x's dtype */
  dit_attrs_set_int(&ra, "rank", 3);
  dit_attrs_t ra3 = ra;
  ra3.count = 4; /* rank d0 d1 d2 */
  CHECK(dit_graph_op(g, DIT_OP_RESHAPE, &m, 1, &ra3, DIT_F32, "mod3_f32") == -1);
  CHECK(dit_graph_status(g) && strstr(dit_status_message(dit_graph_status(g)), "reshape: output dtype f32, expected bf16 as operand x 'mod'"));
  dit_graph_destroy(g);

  CHECK_OK(dit_graph_create(&g));
  /* concat: joint attention's tokens (dim 1) and the single-stream features (dim 2) */
  dit_vid_t txt = in3(g, "txt", DIT_BF16, 2, 5, 32), img = in3(g, "img", DIT_BF16, 2, 12, 32);
  dit_vid_t ti[2] = {txt, img};
  dit_attrs_t c1 = attrs_i("dim", 1, NULL, 0);
  dit_vid_t joint = dit_graph_op(g, DIT_OP_CONCAT, ti, 2, &c1, DIT_BF16, "joint");
  CHECK(joint >= 0 && dit_graph_cvalue(g, joint)->dims[1] == 17 && dit_graph_cvalue(g, joint)->dims[2] == 32);
  dit_vid_t mlp = in3(g, "mlp", DIT_BF16, 2, 17, 128), jm[2] = {joint, mlp};
  dit_attrs_t c2 = attrs_i("dim", 2, NULL, 0);
  dit_vid_t feat = dit_graph_op(g, DIT_OP_CONCAT, jm, 2, &c2, DIT_BF16, "feat");
  CHECK(feat >= 0 && dit_graph_cvalue(g, feat)->dims[1] == 17 && dit_graph_cvalue(g, feat)->dims[2] == 160);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_CONCAT, ti, 2, &c2, 1, rank, dims), INVALID_ARGUMENT,
            "concat: operands 'txt' [2,5,32] and 'img' [2,12,32] differ in dim 1, not only in the concatenated dim 2");
  dit_attrs_t c3 = attrs_i("dim", 3, NULL, 0);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_CONCAT, ti, 2, &c3, 1, rank, dims), INVALID_ARGUMENT, "attribute dim = 3 outside 0..2 of 'txt'");
  dit_vid_t txt32 = in3(g, "txt32", DIT_F32, 2, 5, 32), mixed[2] = {txt32, img};
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_CONCAT, mixed, 2, &c1, 1, rank, dims), INVALID_ARGUMENT,
            "operands 'txt32' (f32) and 'img' (bf16) differ in dtype");
  int64_t two[2] = {2, 32};
  dit_vid_t flat = dit_graph_input(g, "flat", DIT_BF16, 2, two), tf[2] = {txt, flat};
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_CONCAT, tf, 2, &c1, 1, rank, dims), INVALID_ARGUMENT, "(rank 3) and 'flat' (rank 2) differ in rank");

  /* rope_table: x [B, T, H*Dh], cs f32 [T, Dh] */
  int64_t cd[2] = {17, 16};
  dit_vid_t cs = dit_graph_input(g, "cs", DIT_F32, 2, cd), xc[2] = {joint, cs};
  dit_attrs_t h2 = attrs_i("heads", 2, NULL, 0);
  dit_vid_t rot = dit_graph_op(g, DIT_OP_ROPE_TABLE, xc, 2, &h2, DIT_BF16, "rot");
  CHECK(rot >= 0 && dit_graph_cvalue(g, rot)->dims[2] == 32);
  dit_attrs_t h4 = attrs_i("heads", 4, NULL, 0);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE_TABLE, xc, 2, &h4, 1, rank, dims), INVALID_ARGUMENT,
            "rope_table: table 'cs' is [17,16], expected [17,8] (tokens of 'joint', head dim)");
  dit_attrs_t h3 = attrs_i("heads", 3, NULL, 0);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE_TABLE, xc, 2, &h3, 1, rank, dims), INVALID_ARGUMENT,
            "32 channels of 'joint' do not split into 3 heads of an even head dim");
  dit_vid_t csb = dit_graph_input(g, "csb", DIT_BF16, 2, cd), xb[2] = {joint, csb};
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE_TABLE, xb, 2, &h2, 1, rank, dims), INVALID_ARGUMENT, "table 'csb' has dtype bf16, expected f32");
  CHECK(dit_graph_op(g, DIT_OP_ROPE_TABLE, xc, 2, &h2, DIT_F32, "rot_f32") == -1);
  CHECK(dit_graph_status(g) && strstr(dit_status_message(dit_graph_status(g)), "rope_table: output dtype f32, expected bf16"));
  dit_graph_destroy(g);

  CHECK_OK(dit_graph_create(&g));
  /* rmsnorm per head: weight [G], G dividing the last dim; absent group: the whole row */
  dit_vid_t q = in3(g, "q", DIT_BF16, 1, 7, 64);
  int64_t w16[1] = {16}, w64[1] = {64};
  dit_vid_t wh = dit_graph_weight(g, "norm_q.weight", DIT_BF16, 1, w16), qw[2] = {q, wh};
  dit_attrs_t na = attrs_i("group", 16, NULL, 0);
  dit_attrs_set_float(&na, "eps", 1e-6);
  dit_vid_t qn = dit_graph_op(g, DIT_OP_RMSNORM, qw, 2, &na, DIT_BF16, "qn");
  CHECK(qn >= 0);
  dit_attrs_t whole = {0};
  dit_attrs_set_float(&whole, "eps", 1e-6);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_RMSNORM, qw, 2, &whole, 1, rank, dims), INVALID_ARGUMENT, "weight 'norm_q.weight' must be [64]");
  dit_vid_t wf = dit_graph_weight(g, "full", DIT_BF16, 1, w64), qf[2] = {q, wf};
  CHECK_OK(dit_infer_shapes(g, DIT_OP_RMSNORM, qf, 2, &whole, 1, rank, dims));
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_RMSNORM, qf, 2, &na, 1, rank, dims), INVALID_ARGUMENT, "weight 'full' must be [16]");
  dit_attrs_t n24 = attrs_i("group", 24, NULL, 0);
  dit_attrs_set_float(&n24, "eps", 1e-6);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_RMSNORM, qw, 2, &n24, 1, rank, dims), INVALID_ARGUMENT,
            "attribute group = 24 does not divide the last dim 64 of 'q'");
  dit_attrs_t n0 = attrs_i("group", 0, NULL, 0);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_RMSNORM, qw, 2, &n0, 1, rank, dims), INVALID_ARGUMENT, "attribute group = 0, expected >= 1");
  dit_graph_mark_output(g, qn, "qn");

  /* The ropes with the norm folded in: the weight last, [G] with norm_group = G, else [D]. */
  int64_t cd7[2] = {7, 16};
  dit_vid_t cs7 = dit_graph_input(g, "cs7", DIT_F32, 2, cd7), xcw[3] = {q, cs7, wh}, xcf[3] = {q, cs7, wf};
  dit_attrs_t ta = attrs_i("heads", 4, "norm_group", 16);
  dit_attrs_set_float(&ta, "norm_eps", 1e-6);
  dit_vid_t rq = dit_graph_op(g, DIT_OP_ROPE_TABLE, xcw, 3, &ta, DIT_BF16, "rq");
  CHECK(rq >= 0 && dit_graph_cvalue(g, rq)->dims[2] == 64);
  dit_graph_mark_output(g, rq, "rq");
  /* Cost: the norm's 4 and the rotation's 3 flops an element; x read once (bf16), the table, the
   * weight, y written once. */
  const dit_cost_t rc = dit_op_cost(g, dit_graph_cop_at(g, dit_graph_cvalue(g, rq)->producer));
  CHECK_NEAR(rc.flops, 7 * 7 * 64, 0);
  CHECK_NEAR(rc.bytes, 7 * 64 * 2 + 7 * 16 * 4 + 16 * 2 + 7 * 64 * 2, 0);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE_TABLE, xcf, 3, &ta, 1, rank, dims), INVALID_ARGUMENT,
            "rope_table: weight 'full' must be [16]");
  dit_attrs_t tw = attrs_i("heads", 4, NULL, 0);
  dit_attrs_set_float(&tw, "norm_eps", 1e-6);
  CHECK_OK(dit_infer_shapes(g, DIT_OP_ROPE_TABLE, xcf, 3, &tw, 1, rank, dims));
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE_TABLE, xcw, 3, &tw, 1, rank, dims), INVALID_ARGUMENT,
            "rope_table: weight 'norm_q.weight' must be [64]");
  dit_attrs_t t24 = attrs_i("heads", 4, "norm_group", 24);
  dit_attrs_set_float(&t24, "norm_eps", 1e-6);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE_TABLE, xcw, 3, &t24, 1, rank, dims), INVALID_ARGUMENT,
            "rope_table: attribute norm_group = 24 does not divide the last dim 64 of 'q'");
  dit_attrs_t tn = attrs_i("heads", 4, "norm_group", 16);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE_TABLE, xcw, 3, &tn, 1, rank, dims), INVALID_ARGUMENT,
            "op rope_table: missing float attribute 'norm_eps'");
  dit_attrs_set_float(&tn, "norm_eps", -1);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE_TABLE, xcw, 3, &tn, 1, rank, dims), INVALID_ARGUMENT,
            "rope_table: attribute norm_eps = -1, expected finite and >= 0");
  dit_vid_t wi = dit_graph_weight(g, "int_w", DIT_I32, 1, w16), xci[3] = {q, cs7, wi};
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE_TABLE, xci, 3, &ta, 1, rank, dims), INVALID_ARGUMENT,
            "rope_table: norm weight 'int_w' has dtype i32, expected f32, bf16 or f16");
  /* Wan's rope over 7 tokens (a 1x7x1 grid), 4 heads of 8+4+4, its whole-row norm [64] */
  dit_attrs_t wa = {0};
  static const char *const wkeys[] = {"heads", "f", "h", "w", "t_dim", "h_dim", "w_dim"};
  static const int64_t wvals[] = {4, 1, 7, 1, 8, 4, 4};
  for (int i = 0; i < 7; i++) dit_attrs_set_int(&wa, wkeys[i], wvals[i]);
  dit_attrs_set_float(&wa, "theta", 10000);
  dit_attrs_set_float(&wa, "norm_eps", 1e-6);
  dit_vid_t xw1[2] = {q, wf}, xw2[2] = {q, wh};
  dit_vid_t wq = dit_graph_op(g, DIT_OP_ROPE, xw1, 2, &wa, DIT_BF16, "wq");
  CHECK(wq >= 0);
  dit_graph_mark_output(g, wq, "wq");
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE, xw2, 2, &wa, 1, rank, dims), INVALID_ARGUMENT, "rope: weight 'norm_q.weight' must be [64]");
  dit_attrs_set_int(&wa, "norm_group", 48);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ROPE, xw2, 2, &wa, 1, rank, dims), INVALID_ARGUMENT,
            "rope: attribute norm_group = 48 does not divide the last dim 64 of 'q'");
  CHECK_OK(dit_graph_verify(g));
  dit_graph_destroy(g);

  CHECK_OK(dit_graph_create(&g));
  dit_vid_t a = in3(g, "a", DIT_BF16, 1, 4, 8), b = in3(g, "b", DIT_BF16, 1, 2, 8), ab[2] = {a, b};
  dit_vid_t cat = dit_graph_op(g, DIT_OP_CONCAT, ab, 2, &c1, DIT_BF16, "cat");
  dit_graph_mark_output(g, cat, "cat");
  CHECK_OK(dit_graph_verify(g));
  /* A recorded dtype the op does not keep is the verifier's error too. */
  dit_graph_value(g, cat)->dtype = DIT_F32;
  CHECK_ERR(dit_graph_verify(g), INVALID_ARGUMENT, "concat: output dtype f32, expected bf16 as operand x 'a'");
  dit_graph_value(g, cat)->dtype = DIT_BF16;
  /* costs: copies move bytes without arithmetic; rope_table 3 flops an element */
  dit_cost_t cc = dit_op_cost(g, dit_graph_cop_at(g, 0));
  CHECK_NEAR(cc.flops, 0, 0);
  CHECK_NEAR(cc.bytes, 2.0 * (32 + 16 + 48), 0);
  dit_graph_destroy(g);
}

/* CLIP's ops: quick_gelu keeps x's shape; token_select [B, T, C] x [B, T] ids -> [B, C] in x's
 * dtype, refusals naming the operand; its cost reads the picked rows only. */
static void test_clip_ops(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int rank[DIT_OP_MAX_OUT];
  int64_t dims[DIT_OP_MAX_OUT][DIT_MAX_RANK];
  const int64_t idd[2] = {2, 7}, badd[2] = {2, 6};
  dit_vid_t x = in3(g, "x", DIT_BF16, 2, 7, 16), ids = dit_graph_input(g, "ids", DIT_I32, 2, idd);
  dit_vid_t qg = dit_graph_op(g, DIT_OP_QUICK_GELU, &x, 1, NULL, DIT_BF16, "act");
  CHECK(qg >= 0 && dit_graph_cvalue(g, qg)->rank == 3 && dit_graph_cvalue(g, qg)->dims[2] == 16);
  dit_attrs_t eos = attrs_i("eos", -1, NULL, 0), neg = attrs_i("eos", -2, NULL, 0);
  dit_vid_t xi[2] = {x, ids};
  dit_vid_t y = dit_graph_op(g, DIT_OP_TOKEN_SELECT, xi, 2, &eos, DIT_BF16, "pooled");
  CHECK(y >= 0 && dit_graph_cvalue(g, y)->rank == 2 && dit_graph_cvalue(g, y)->dims[0] == 2 && dit_graph_cvalue(g, y)->dims[1] == 16);
  dit_cost_t c = dit_op_cost(g, dit_graph_cop_at(g, 1));
  CHECK_NEAR(c.flops, 14, 0);
  CHECK_NEAR(c.bytes, 2.0 * (2 * 16) + 4.0 * 14 + 2.0 * (2 * 16), 0);
  dit_vid_t bad = dit_graph_input(g, "short_ids", DIT_I64, 2, badd), fids = dit_graph_input(g, "fids", DIT_F32, 2, idd);
  dit_vid_t xb[2] = {x, bad}, xf[2] = {x, fids};
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_TOKEN_SELECT, xb, 2, &eos, 1, rank, dims), INVALID_ARGUMENT,
            "token_select: ids 'short_ids' [2,6], expected [2,7] as the batch and tokens of x 'x' [2,7,16]");
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_TOKEN_SELECT, xf, 2, &eos, 1, rank, dims), INVALID_ARGUMENT,
            "token_select: ids 'fids' have dtype f32, expected i32 or i64");
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_TOKEN_SELECT, xi, 2, &neg, 1, rank, dims), INVALID_ARGUMENT,
            "token_select: attribute eos = -2, expected >= -1");
  CHECK(dit_graph_op(g, DIT_OP_TOKEN_SELECT, xi, 2, &eos, DIT_F32, "pooled_f32") == -1);
  CHECK(dit_graph_status(g) && strstr(dit_status_message(dit_graph_status(g)), "token_select: output dtype f32, expected bf16 as operand x 'x'"));
  dit_graph_destroy(g);
}

/* key_bound and attention's bound: shapes, the i32 they fix, refusals naming the value, costs. */
static void test_key_bound(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int rank[DIT_OP_MAX_OUT];
  int64_t dims[DIT_OP_MAX_OUT][DIT_MAX_RANK];
  int64_t md[2] = {3, 7};
  dit_vid_t mask = dit_graph_input(g, "encoder_attention_mask", DIT_I64, 2, md);
  dit_attrs_t off = attrs_i("offset", 12, NULL, 0);
  dit_vid_t bound = dit_graph_op(g, DIT_OP_KEY_BOUND, &mask, 1, &off, DIT_I32, "bound");
  CHECK(bound >= 0 && dit_graph_cvalue(g, bound)->rank == 1 && dit_graph_cvalue(g, bound)->dims[0] == 3);
  CHECK(dit_graph_op(g, DIT_OP_KEY_BOUND, &mask, 1, &off, DIT_F32, "bound_f32") == -1);
  CHECK(dit_graph_status(g) && strstr(dit_status_message(dit_graph_status(g)), "key_bound: output dtype f32, expected i32"));
  dit_graph_destroy(g);

  CHECK_OK(dit_graph_create(&g));
  mask = dit_graph_input(g, "encoder_attention_mask", DIT_F32, 2, md);
  dit_vid_t m3 = in3(g, "m3", DIT_F32, 3, 7, 1);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_KEY_BOUND, &m3, 1, &off, 1, rank, dims), INVALID_ARGUMENT,
            "key_bound: operand mask 'm3' has rank 3, expected 2");
  dit_attrs_t neg = attrs_i("offset", -1, NULL, 0), big = attrs_i("offset", INT32_MAX - 6, NULL, 0);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_KEY_BOUND, &mask, 1, &neg, 1, rank, dims), INVALID_ARGUMENT,
            "key_bound: attribute offset = -1, expected >= 0");
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_KEY_BOUND, &mask, 1, &big, 1, rank, dims), INVALID_ARGUMENT,
            "plus the 7 entries of mask 'encoder_attention_mask' exceeds the i32 range");
  bound = dit_graph_op(g, DIT_OP_KEY_BOUND, &mask, 1, &off, DIT_I32, "bound");

  /* attention with a fourth input: i32 [B] */
  dit_vid_t q = in3(g, "q", DIT_BF16, 3, 10, 32), kv = in3(g, "kv", DIT_BF16, 3, 19, 32);
  dit_attrs_t a = attrs_i("heads", 2, NULL, 0);
  dit_attrs_set_float(&a, "scale", 0.25);
  dit_vid_t ins[4] = {q, kv, kv, bound};
  dit_vid_t o = dit_graph_op(g, DIT_OP_ATTENTION, ins, 4, &a, DIT_BF16, "sdpa");
  CHECK(o >= 0 && dit_graph_cvalue(g, o)->dims[1] == 10);
  int64_t b2[1] = {2};
  ins[3] = dit_graph_input(g, "short", DIT_I32, 1, b2);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ATTENTION, ins, 4, &a, 1, rank, dims), INVALID_ARGUMENT,
            "attention: bound 'short' is i32 [2], expected i32 [3] (one key bound per batch item of q 'q')");
  ins[3] = mask;
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ATTENTION, ins, 4, &a, 1, rank, dims), INVALID_ARGUMENT,
            "attention: bound 'encoder_attention_mask' is f32 [3,7], expected i32 [3]");
  int64_t b3[1] = {3};
  ins[3] = dit_graph_input(g, "fbound", DIT_F32, 1, b3);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ATTENTION, ins, 4, &a, 1, rank, dims), INVALID_ARGUMENT, "bound 'fbound' is f32 [3]");
  dit_graph_mark_output(g, o, "out");
  CHECK_OK(dit_graph_verify(g));
  /* costs: the bound is an operand of 12 bytes; a test per mask entry */
  const dit_op_t *kb = dit_graph_cop_at(g, 0), *att = dit_graph_cop_at(g, 1);
  CHECK_NEAR(dit_op_cost(g, kb).flops, 21, 0);
  CHECK_NEAR(dit_op_cost(g, att).bytes, (3 * 10 * 32 * 2) * 2 + (3 * 19 * 32 * 2) * 2 + 12, 0);
  dit_graph_destroy(g);
}

/* conv3d, upsample and clamp: output shapes (causal frames, padded and valid sizes, a per-frame
 * Conv2d weight), the conv's cost, refusals naming the operand and attribute. */
static void test_video_ops(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const int64_t xd[5] = {2, 3, 8, 6, 4}, w5[5] = {5, 3, 3, 3, 4}, w4[4] = {5, 3, 3, 4}, bd[1] = {5}, wbad[5] = {5, 3, 3, 3, 3};
  dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 5, xd);
  dit_vid_t ins[3] = {x, dit_graph_weight(g, "w", DIT_F32, 5, w5), dit_graph_weight(g, "b", DIT_F32, 1, bd)};
  dit_attrs_t a = attrs_i("pad_t", 2, "pad_h", 1);
  dit_attrs_set_int(&a, "pad_w", 1);
  dit_vid_t y = dit_graph_op(g, DIT_OP_CONV3D, ins, 3, &a, DIT_F32, "causal");
  const dit_value_t *yv = dit_graph_cvalue(g, y);
  CHECK(yv && yv->rank == 5 && yv->dims[1] == 3 && yv->dims[2] == 8 && yv->dims[3] == 6 && yv->dims[4] == 5);
  /* 2 * outputs * Cin * 27 taps + a bias add per output */
  const double outs = 2.0 * 3 * 8 * 6 * 5;
  CHECK_NEAR(dit_op_cost(g, dit_graph_cop_at(g, dit_graph_num_ops(g) - 1)).flops, 2 * outs * 4 * 27 + outs, 0);
  dit_attrs_t valid = attrs_i("pad_t", 0, "pad_h", 0);
  dit_attrs_set_int(&valid, "pad_w", 0);
  dit_vid_t i2[2] = {x, dit_graph_weight(g, "w2", DIT_F32, 4, w4)};
  yv = dit_graph_cvalue(g, dit_graph_op(g, DIT_OP_CONV3D, i2, 2, &valid, DIT_F32, "per_frame"));
  CHECK(yv && yv->dims[1] == 3 && yv->dims[2] == 6 && yv->dims[3] == 4 && yv->dims[4] == 5);
  int rank[DIT_OP_MAX_OUT];
  int64_t dims[DIT_OP_MAX_OUT][DIT_MAX_RANK];
  dit_vid_t bad[2] = {x, dit_graph_weight(g, "wbad", DIT_F32, 5, wbad)};
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_CONV3D, bad, 2, &a, 1, rank, dims), INVALID_ARGUMENT,
            "conv3d: weight 'wbad' [5,3,3,3,3] takes 3 input channels, x 'x' [2,3,8,6,4] has 4");
  const int64_t wlong[5] = {5, 4, 3, 3, 4};
  ins[1] = dit_graph_weight(g, "wlong", DIT_F32, 5, wlong);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_CONV3D, ins, 2, &valid, 1, rank, dims), INVALID_ARGUMENT,
            "conv3d: kernel 4x3x3 with padding (0, 0, 0) does not fit x 'x' [2,3,8,6,4]");
  /* Downsampling: a padded row and column after the last, stride 2 per frame (8x6 -> 4x3); the
   * stride-2 temporal kernel (3 frames -> 1); a zero stride and a kernel past the padded input refused. */
  dit_attrs_t down = attrs_i("pad_t", 2, "pad_h", 0);
  dit_attrs_set_int(&down, "pad_w", 0);
  dit_attrs_set_int(&down, "pad_h_after", 1);
  dit_attrs_set_int(&down, "pad_w_after", 1);
  dit_attrs_set_int(&down, "stride_h", 2);
  dit_attrs_set_int(&down, "stride_w", 2);
  yv = dit_graph_cvalue(g, dit_graph_op(g, DIT_OP_CONV3D, ins, 3, &down, DIT_F32, "down"));
  CHECK(yv && yv->dims[1] == 2 && yv->dims[2] == 4 && yv->dims[3] == 3 && yv->dims[4] == 5); /* wlong's 4 frames */
  const int64_t wt[5] = {5, 3, 1, 1, 4};
  dit_vid_t it[2] = {x, dit_graph_weight(g, "wt", DIT_F32, 5, wt)};
  dit_attrs_t tdown = valid;
  dit_attrs_set_int(&tdown, "stride_t", 2);
  yv = dit_graph_cvalue(g, dit_graph_op(g, DIT_OP_CONV3D, it, 2, &tdown, DIT_F32, "time_down"));
  CHECK(yv && yv->dims[1] == 1 && yv->dims[2] == 8 && yv->dims[3] == 6);
  dit_attrs_set_int(&tdown, "stride_t", 0);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_CONV3D, it, 2, &tdown, 1, rank, dims), INVALID_ARGUMENT,
            "op conv3d: attribute 'stride_t' = 0, expected >= 1");
  const int64_t xs[5] = {1, 1, 2, 2, 4};
  dit_vid_t small[2] = {dit_graph_input(g, "xs", DIT_F32, 5, xs), ins[1]};
  dit_attrs_t asym = valid;
  dit_attrs_set_int(&asym, "pad_h_after", 1);
  dit_attrs_set_int(&asym, "pad_t", 2);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_CONV3D, small, 2, &asym, 1, rank, dims), INVALID_ARGUMENT,
            "conv3d: kernel 4x3x3 with padding (2, 0+1, 0+0) does not fit x 'xs' [1,1,2,2,4]");
  dit_attrs_t up = attrs_i("scale", 2, NULL, 0);
  yv = dit_graph_cvalue(g, dit_graph_op(g, DIT_OP_UPSAMPLE, &x, 1, &up, DIT_F32, "up"));
  CHECK(yv && yv->dims[1] == 3 && yv->dims[2] == 16 && yv->dims[3] == 12 && yv->dims[4] == 4);
  CHECK(dit_graph_op(g, DIT_OP_UPSAMPLE, &x, 1, &up, DIT_BF16, "up_bf16") == -1); /* data movement keeps x's dtype */
  dit_graph_destroy(g);
  CHECK_OK(dit_graph_create(&g));
  x = dit_graph_input(g, "x", DIT_F32, 5, xd);
  dit_attrs_t cl = {0};
  dit_attrs_set_float(&cl, "lo", 1.0);
  dit_attrs_set_float(&cl, "hi", -1.0);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_CLAMP, &x, 1, &cl, 1, rank, dims), INVALID_ARGUMENT,
            "clamp: attributes lo = 1 and hi = -1: expected lo <= hi");
  /* groupnorm over x [2, 3, 8, 6, 4]: the shape kept; groups that do not divide the channels,
   * parameters of another width and a missing eps refused by name. */
  const int64_t c4[1] = {4}, c3[1] = {3};
  dit_vid_t gn[3] = {x, dit_graph_weight(g, "gn.weight", DIT_F32, 1, c4), dit_graph_weight(g, "gn.bias", DIT_F32, 1, c4)};
  dit_attrs_t ga = attrs_i("groups", 2, NULL, 0);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_GROUPNORM, gn, 3, &ga, 1, rank, dims), INVALID_ARGUMENT, "eps");
  dit_attrs_set_float(&ga, "eps", 1e-6);
  yv = dit_graph_cvalue(g, dit_graph_op(g, DIT_OP_GROUPNORM, gn, 3, &ga, DIT_BF16, "gn"));
  CHECK(yv && yv->rank == 5 && yv->dims[4] == 4 && yv->dims[2] == 8 && yv->dtype == DIT_BF16);
  dit_attrs_t g3 = attrs_i("groups", 3, NULL, 0);
  dit_attrs_set_float(&g3, "eps", 1e-6);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_GROUPNORM, gn, 3, &g3, 1, rank, dims), INVALID_ARGUMENT,
            "groupnorm: attribute groups = 3 does not divide the 4 channels of x 'x' [2,3,8,6,4]");
  gn[2] = dit_graph_weight(g, "gn.bias3", DIT_F32, 1, c3);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_GROUPNORM, gn, 3, &ga, 1, rank, dims), INVALID_ARGUMENT,
            "groupnorm: affine parameters 'gn.weight' and 'gn.bias3' must be [4]");
  /* Its sliced form: stats f32 [B, S, G, 2] over the 3 x 8 x 6 = 144 pixels (at most one slice a
   * pixel, f32 only), and the apply back to x's shape from stats that match x. */
  dit_attrs_t sa = attrs_i("groups", 2, "slices", 144);
  const dit_value_t *sv = dit_graph_cvalue(g, dit_graph_op(g, DIT_OP_GROUPNORM_STATS, &x, 1, &sa, DIT_F32, "gn.stats"));
  CHECK(sv && sv->rank == 4 && sv->dims[0] == 2 && sv->dims[1] == 144 && sv->dims[2] == 2 && sv->dims[3] == 2);
  CHECK(dit_graph_op(g, DIT_OP_GROUPNORM_STATS, &x, 1, &sa, DIT_BF16, "gn.stats_bf16") == -1);
  CHECK(dit_graph_status(g) && strstr(dit_status_message(dit_graph_status(g)), "groupnorm_stats: output dtype bf16, expected f32"));
  dit_graph_destroy(g);
  CHECK_OK(dit_graph_create(&g));
  x = dit_graph_input(g, "x", DIT_F32, 5, xd);
  dit_attrs_set_int(&sa, "slices", 145);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_GROUPNORM_STATS, &x, 1, &sa, 1, rank, dims), INVALID_ARGUMENT,
            "groupnorm_stats: attribute slices = 145 exceeds the 144 pixels of x 'x'");
  dit_attrs_set_int(&sa, "slices", 3);
  const dit_vid_t st = dit_graph_op(g, DIT_OP_GROUPNORM_STATS, &x, 1, &sa, DIT_F32, "st");
  dit_attrs_t ea = {0};
  dit_attrs_set_float(&ea, "eps", 1e-6);
  dit_vid_t ap[4] = {x, st, dit_graph_weight(g, "gn.weight", DIT_F32, 1, c4), dit_graph_weight(g, "gn.bias", DIT_F32, 1, c4)};
  yv = dit_graph_cvalue(g, dit_graph_op(g, DIT_OP_GROUPNORM_APPLY, ap, 4, &ea, DIT_BF16, "gn"));
  CHECK(yv && yv->rank == 5 && yv->dims[2] == 8 && yv->dims[4] == 4 && yv->dtype == DIT_BF16);
  const int64_t x3d[5] = {2, 3, 8, 6, 3};
  ap[0] = dit_graph_input(g, "x3", DIT_F32, 5, x3d);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_GROUPNORM_APPLY, ap, 4, &ea, 1, rank, dims), INVALID_ARGUMENT,
            "groupnorm_apply: the groups of stats = 2 does not divide the 3 channels of x 'x3'");
  ap[0] = x;
  ap[1] = x;
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_GROUPNORM_APPLY, ap, 4, &ea, 1, rank, dims), INVALID_ARGUMENT,
            "groupnorm_apply: stats 'x' f32 [2,3,8,6,4], expected f32 [2, S, G, 2]");
  dit_graph_destroy(g);
}

/* An output replacing an input in place: accepted while every reader of the input precedes its
 * producer; refused for a value that is not an input of its dtype and size, and once an op
 * after the producer reads the input. */
static void test_in_place_outputs(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const int64_t d[1] = {4}, d5[1] = {5};
  dit_vid_t c = dit_graph_input(g, "c", DIT_F32, 1, d), other = dit_graph_input(g, "other", DIT_F32, 1, d5);
  dit_vid_t n = dit_graph_op(g, DIT_OP_SILU, &c, 1, NULL, DIT_F32, "next");
  dit_graph_mark_output_updating(g, n, "c.next", c);
  CHECK_OK(dit_graph_status(g));
  CHECK_EQ_INT(dit_graph_cvalue(g, n)->updates, c);
  CHECK_OK(dit_graph_check_updates(g));
  dit_vid_t late = dit_graph_op(g, DIT_OP_SILU, &c, 1, NULL, DIT_F32, "late");
  dit_graph_mark_output(g, late, "late");
  CHECK_ERR(dit_graph_check_updates(g), INTERNAL, "output 'c.next' replaces input 'c' in place, yet op 1 ('late') reads the input after");
  dit_graph_mark_output_updating(g, late, "late", other);
  const dit_status_t bad = dit_graph_status(g); /* borrowed: the graph frees it */
  CHECK(bad && dit_status_code(bad) == DIT_CODE_INVALID_ARGUMENT &&
        strstr(dit_status_message(bad), "output 'late': updates value 1 in place, which is not an input of its dtype and size"));
  dit_graph_destroy(g);
}

/* FP8 attention's ops: attn_quant's, attn_vmax's and attn_quant_vt's shapes and fixed dtypes
 * (the splits at most the keys, vmax any splits of v's shape), attention_fp8's operand checks
 * naming the operand and the expected shape, its cost as attention's. */
static void test_fp8_attention_ops(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int64_t xd[3] = {1, 200, 256};
  const dit_vid_t x = dit_graph_input(g, "x", DIT_BF16, 3, xd);
  dit_attrs_t qa = attrs_i("heads", 2, "rows", 64), ka = attrs_i("heads", 2, "rows", 128), va = attrs_i("heads", 2, NULL, 0);
  const dit_dtype_t qdt[2] = {DIT_F8E4M3, DIT_F32}, bad[2] = {DIT_F32, DIT_F32}, odt[2] = {DIT_BF16, DIT_F32};
  dit_vid_t q[2], k[2], v[2], o[2];
  CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &x, 1, &qa, qdt, "q8", q));
  CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &x, 1, &ka, qdt, "k8", k));
  dit_attrs_t ma = attrs_i("heads", 2, "splits", 200);
  const dit_vid_t m = dit_graph_op(g, DIT_OP_ATTN_VMAX, &x, 1, &ma, DIT_F32, "vmax");
  const dit_value_t *mv = dit_graph_cvalue(g, m);
  CHECK(mv->rank == 5 && mv->dims[0] == 1 && mv->dims[1] == 2 && mv->dims[2] == 200 && mv->dims[3] == 3 && mv->dims[4] == 128 &&
        mv->dtype == DIT_F32);
  CHECK_NEAR(dit_op_cost(g, dit_graph_cop_at(g, dit_graph_num_ops(g) - 1)).flops, 3.0 * 200 * 256, 0);
  int rank[DIT_OP_MAX_OUT];
  int64_t dims[DIT_OP_MAX_OUT][DIT_MAX_RANK];
  dit_attrs_set_int(&ma, "splits", 201);
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ATTN_VMAX, &x, 1, &ma, 1, rank, dims), INVALID_ARGUMENT,
            "attn_vmax: attribute splits = 201 exceeds the 200 keys of x 'x' (every split needs one)");
  CHECK_ERR(dit_check_out_dtypes(g, DIT_OP_ATTN_VMAX, &x, 1, odt), INVALID_ARGUMENT, "attn_vmax: output dtype bf16, expected f32");
  dit_vid_t vi[2] = {x, x};
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ATTN_QUANT_VT, vi, 2, &va, 2, rank, dims), INVALID_ARGUMENT,
            "attn_quant_vt: vmax 'x' is bf16 [1,200,256], expected f32 [1,2,1,3,128] (attn_vmax's largest, smallest and sum of x per "
            "head, split and channel)");
  CHECK_ERR(dit_graph_op2(g, DIT_OP_ATTN_QUANT_VT, &x, 1, &va, qdt, "vt8_one", v), INVALID_ARGUMENT,
            "op attn_quant_vt 'vt8_one': 1 inputs, expected 2..2");
  vi[1] = m;
  CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT_VT, vi, 2, &va, qdt, "vt8", v));
  CHECK_NEAR(dit_op_cost(g, dit_graph_cop_at(g, dit_graph_num_ops(g) - 1)).flops, 2.0 * 200 * 256 + 200.0 * 3 * 256, 0);
  const dit_value_t *qs = dit_graph_cvalue(g, q[1]), *ks = dit_graph_cvalue(g, k[1]), *vt = dit_graph_cvalue(g, v[0]);
  CHECK(qs->rank == 3 && qs->dims[1] == 2 && qs->dims[2] == 4 && ks->dims[2] == 2);
  const dit_value_t *vsv = dit_graph_cvalue(g, v[1]);
  CHECK(vt->rank == 4 && vt->dims[2] == 128 && vt->dims[3] == 256 && vsv->rank == 4 && vsv->dims[2] == 2 && vsv->dims[3] == 128);
  CHECK(dit_graph_cvalue(g, q[0])->dims[1] == 200 && dit_graph_cvalue(g, q[0])->dtype == DIT_F8E4M3);
  CHECK_ERR(dit_check_out_dtypes(g, DIT_OP_ATTN_QUANT, &x, 2, bad), INVALID_ARGUMENT,
            "attn_quant: output dtypes f32 and f32, expected f8e4m3 or i8 (the codes) and f32 (the scales)");
  dit_attrs_t fa = attrs_i("heads", 2, NULL, 0);
  dit_attrs_set_float(&fa, "scale", 0.088);
  dit_vid_t fi[7] = {q[0], q[1], k[0], k[1], v[0], v[1], -1};
  CHECK_OK(dit_graph_op2(g, DIT_OP_ATTENTION_FP8, fi, 6, &fa, odt, "o", o));
  const dit_value_t *lse = dit_graph_cvalue(g, o[1]);
  CHECK(lse->rank == 3 && lse->dims[1] == 2 && lse->dims[2] == 200);
  CHECK_NEAR(dit_op_cost(g, dit_graph_cop_at(g, dit_graph_num_ops(g) - 1)).flops, 4.0 * 200 * 200 * 256, 0);
  fi[1] = k[1];
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ATTENTION_FP8, fi, 6, &fa, 1, rank, dims), INVALID_ARGUMENT,
            "attention_fp8: qs 'k8.1' is f32 [1,2,2], expected f32 [1,2,4] (q's scales per head and 64 rows)");
  fi[1] = q[1], fi[4] = x; /* v itself: bf16 P V, five inputs */
  CHECK_OK(dit_infer_shapes(g, DIT_OP_ATTENTION_FP8, fi, 5, &fa, 1, rank, dims));
  CHECK(rank[0] == 3 && dims[0][1] == 200 && dims[0][2] == 256);
  /* One more input without tiles is a key bound: i32 [B]. */
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ATTENTION_FP8, fi, 6, &fa, 1, rank, dims), INVALID_ARGUMENT,
            "attention_fp8: key bound 'vt8.1' is f32 [1,2,2,128], expected i32 [1] (one bound a batch item)");
  const int64_t bdim[1] = {1};
  const dit_vid_t bound = dit_graph_input(g, "bound", DIT_I32, 1, bdim);
  fi[5] = bound, fi[6] = bound;
  CHECK_OK(dit_infer_shapes(g, DIT_OP_ATTENTION_FP8, fi, 6, &fa, 1, rank, dims));
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ATTENTION_FP8, fi, 7, &fa, 1, rank, dims), INVALID_ARGUMENT,
            "attention_fp8: 7 inputs with v and attribute tiles absent: expected 5 (a tile schedule last, present exactly with tiles = 1) "
            "or one more (a key bound)");
  fi[5] = v[1];
  fi[4] = q[1];
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ATTENTION_FP8, fi, 5, &fa, 1, rank, dims), INVALID_ARGUMENT,
            "attention_fp8: v 'q8.1' is f32 [1,2,4], expected f8e4m3 [1,2,128,256] (attn_quant_vt's) or a float [1,200,256]");
  fi[4] = v[0], fi[6] = x;
  CHECK_ERR(dit_infer_shapes(g, DIT_OP_ATTENTION_FP8, fi, 7, &fa, 1, rank, dims), INVALID_ARGUMENT,
            "attention_fp8: key bound 'x' is bf16 [1,200,256], expected i32 [1] (one bound a batch item)");
  fi[6] = bound;
  CHECK_OK(dit_infer_shapes(g, DIT_OP_ATTENTION_FP8, fi, 7, &fa, 1, rank, dims));
  dit_graph_destroy(g);
}

int main(void) {
  test_builder_shapes();
  test_in_place_outputs();
  test_shape_errors();
  test_verify_and_print();
  test_cost();
  test_mmdit_ops();
  test_key_bound();
  test_clip_ops();
  test_video_ops();
  test_fp8_attention_ops();
  return check_summary("test_ir");
}
