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
  int rank[2];
  int64_t dims[2][DIT_MAX_RANK];
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

int main(void) {
  test_builder_shapes();
  test_shape_errors();
  test_verify_and_print();
  test_cost();
  return check_summary("test_ir");
}
