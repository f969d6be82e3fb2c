/* compiler/frontends/blocks: the builder's refusals, the fp32-module weight policy, the
 * tensor-parallel linears, the context-parallel attention forms, the errors a build reports
 * and how its end hands them out, on the tiny Wan checkpoint's tensors (D = 32, 2 heads of 16). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/safetensors.h"
#include "check.h"
#include "compiler/frontend.h"
#include "compiler/frontends/blocks.h"

static dit_safetensors_t *g_weights;
static const char *const kF32[] = {"scale_shift_table", NULL};

static dit_blocks_options_t opts(dit_dtype_t dt, int tp, int tp_rank, int cp, int cp_rank, int cp_mode) {
  return (dit_blocks_options_t){.dtype = dt, .heads = 2, .head_dim = 16, .eps = 1e-6, .f32_keys = kF32, .tp = tp,
                                .tp_rank = tp_rank, .cp = cp, .cp_rank = cp_rank, .cp_mode = cp_mode, .ulysses = 0, .sp = 0};
}

/* The op that produces the value named name, or NULL. */
static const dit_op_t *op_named(const dit_graph_t *g, const char *name) {
  for (int32_t i = 0; i < dit_graph_num_ops(g); i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    const dit_value_t *v = dit_graph_cvalue(g, op->out[0]);
    if (v->name && !strcmp(v->name, name)) return op;
  }
  return NULL;
}

static void test_create_refusals(void) {
  dit_graph_t *g = NULL;
  CHECK_OK(dit_graph_create(&g));
  dit_blocks_t *b = NULL;
  dit_blocks_options_t o = opts(DIT_F32, 2, 2, 1, 0, 0);
  CHECK_ERR(dit_blocks_create(g, g_weights, &o, &b), INVALID_ARGUMENT, "tensor-parallel rank 2 of degree 2");
  o = opts(DIT_F32, 1, 0, 2, -1, DIT_CP_RING);
  CHECK_ERR(dit_blocks_create(g, g_weights, &o, &b), INVALID_ARGUMENT, "context-parallel rank -1 of degree 2");
  o = opts(DIT_F32, 4, 0, 1, 0, 0);
  CHECK_ERR(dit_blocks_create(g, g_weights, &o, &b), INVALID_ARGUMENT, "2 heads of width 16, expected positive and divisible by tp 4");
  CHECK(b == NULL);
  dit_graph_destroy(g);
}

static void test_weight_policy(void) {
  for (int bf = 0; bf < 2; bf++) {
    dit_graph_t *g = NULL;
    CHECK_OK(dit_graph_create(&g));
    dit_blocks_t *b = NULL;
    dit_blocks_options_t o = opts(bf ? DIT_BF16 : DIT_F32, 1, 0, 1, 0, 0);
    CHECK_OK(dit_blocks_create(g, g_weights, &o, &b));
    if (!b) return;
    dit_vid_t sst = dit_blocks_weight(b, "blocks.%d.scale_shift_table", 1);
    dit_vid_t w = dit_blocks_weight(b, "proj_out.weight");
    CHECK_EQ_INT(dit_graph_cvalue(g, sst)->dtype, DIT_F32);
    CHECK_EQ_INT(dit_graph_cvalue(g, w)->dtype, bf ? DIT_BF16 : DIT_F32);
    CHECK_EQ_INT(dit_graph_cvalue(g, w)->dims[0], 16);
    CHECK_EQ_INT(dit_graph_cvalue(g, w)->dims[1], 32);
    dit_status_t s = dit_blocks_status(b);
    CHECK(s == DIT_OK);
    dit_blocks_destroy(b);
    dit_graph_destroy(g);
  }
}

/* Rank 1 of 2: column-parallel keeps half the output features; row-parallel reads half the
 * inputs, adds no bias (rank 0 does) and all-reduces, or reduce-scatters with sp. */
static void test_tensor_parallel_linears(void) {
  for (int sp = 0; sp < 2; sp++) {
    dit_graph_t *g = NULL;
    CHECK_OK(dit_graph_create(&g));
    dit_blocks_t *b = NULL;
    dit_blocks_options_t o = opts(DIT_F32, 2, 1, 1, 0, 0);
    o.sp = sp;
    CHECK_OK(dit_blocks_create(g, g_weights, &o, &b));
    if (!b) return;
    int64_t xs[3] = {1, 8, 32};
    dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 3, xs);
    const dit_blocks_mlp_t ffn = {"blocks.0.ffn.net.0.proj", "blocks.0.ffn.net.2", DIT_OP_GELU_TANH, "up", "gelu", "down",
                                  1, DIT_F32};
    dit_vid_t y = dit_blocks_mlp(b, x, &ffn);
    CHECK_OK(dit_blocks_status(b));
    CHECK_EQ_INT(dit_graph_cvalue(g, op_named(g, "up")->out[0])->dims[2], 32); /* ffn_dim 64 / 2 */
    const dit_op_t *partial = op_named(g, "down.partial");
    CHECK(partial && partial->n_in == 2);
    CHECK_EQ_INT(op_named(g, "down")->kind, sp ? DIT_OP_REDUCE_SCATTER : DIT_OP_ALLREDUCE);
    CHECK(y >= 0);
    /* Without sp the gather is the value itself. */
    CHECK_EQ_INT(dit_blocks_sp_gather(b, x, "x.all") == x, !sp);
    dit_blocks_destroy(b);
    dit_graph_destroy(g);
  }
}

/* Self-attention over a cp group of 2 (rank 1): the ops each mode adds, named under the
 * prefix; no cp is one attention op. */
static void test_attention_modes(void) {
  const int modes[4] = {DIT_CP_NONE, DIT_CP_GATHER, DIT_CP_ULYSSES, DIT_CP_RING};
  const char *marks[4] = {NULL, "a.k_all", "a.q_heads", "a.ring_merge1"};
  for (int i = 0; i < 4; i++) {
    dit_graph_t *g = NULL;
    CHECK_OK(dit_graph_create(&g));
    dit_blocks_t *b = NULL;
    const int cp = modes[i] ? 2 : 1;
    dit_blocks_options_t o = opts(DIT_F32, 1, 0, cp, cp - 1, modes[i]);
    CHECK_OK(dit_blocks_create(g, g_weights, &o, &b));
    if (!b) return;
    int64_t xs[3] = {1, 8, 32};
    dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 3, xs);
    const dit_blocks_attn_keys_t keys = {"blocks.0.attn1.to_q", "blocks.0.attn1.to_k", "blocks.0.attn1.to_v",
                                         "blocks.0.attn1.norm_q.weight", "blocks.0.attn1.norm_k.weight", 0};
    dit_blocks_qkv_t p = dit_blocks_attn_project(b, x, x, &keys, "a");
    CHECK(op_named(g, "a.norm_q") && op_named(g, "a.norm_k"));
    dit_vid_t a = dit_blocks_attention_tokens(b, p.q, p.k, p.v, "a");
    CHECK_OK(dit_blocks_status(b));
    CHECK(a >= 0);
    if (marks[i]) CHECK(op_named(g, marks[i]) != NULL);
    if (modes[i] == DIT_CP_NONE) CHECK(op_named(g, "a.sdpa") && op_named(g, "a.sdpa")->kind == DIT_OP_ATTENTION);
    if (modes[i] == DIT_CP_ULYSSES) CHECK(op_named(g, "a.sdpa_tokens") && op_named(g, "a.sdpa_tokens")->kind == DIT_OP_ALLTOALL);
    if (modes[i] == DIT_CP_RING) CHECK(op_named(g, "a.k_ring") && op_named(g, "a.k_ring")->kind == DIT_OP_RING_SHIFT);
    CHECK_EQ_INT(dit_graph_cvalue(g, a)->dims[1], 8);
    dit_blocks_destroy(b);
    dit_graph_destroy(g);
  }
}

/* Text masks: key_bound then bounded attention, without cp, with gather and with Ulysses (the
 * bound the fourth input of the attention op); ring and usp refuse a bound. */
static void test_bounded_attention(void) {
  const int modes[5] = {DIT_CP_NONE, DIT_CP_GATHER, DIT_CP_ULYSSES, DIT_CP_RING, DIT_CP_USP};
  for (int i = 0; i < 5; i++) {
    dit_graph_t *g = NULL;
    CHECK_OK(dit_graph_create(&g));
    dit_blocks_t *b = NULL;
    const int cp = modes[i] ? 2 : 1;
    dit_blocks_options_t o = opts(DIT_BF16, 1, 0, cp, 0, modes[i]);
    o.ulysses = modes[i] == DIT_CP_USP ? 2 : 0;
    CHECK_OK(dit_blocks_create(g, g_weights, &o, &b));
    if (!b) return;
    int64_t xs[3] = {2, 8, 32}, ms[2] = {2, 5};
    dit_vid_t x = dit_graph_input(g, "x", DIT_BF16, 3, xs), mask = dit_graph_input(g, "mask", DIT_I64, 2, ms);
    dit_vid_t bound = dit_blocks_key_bound(b, mask, 3 * cp, "bound");
    CHECK(bound >= 0 && dit_graph_cvalue(g, bound)->dtype == DIT_I32 && dit_graph_cvalue(g, bound)->dims[0] == 2);
    const dit_op_t *kb = op_named(g, "bound");
    CHECK(kb && kb->kind == DIT_OP_KEY_BOUND && dit_attrs_find(&kb->attrs, "offset")->i == 3 * cp);
    dit_vid_t a = dit_blocks_attention_tokens_bounded(b, x, x, x, bound, "a");
    if (modes[i] == DIT_CP_RING || modes[i] == DIT_CP_USP) {
      CHECK(a == -1);
      CHECK_ERR(dit_blocks_status(b), UNIMPLEMENTED, modes[i] == DIT_CP_RING ? "attention 'a': a key bound under context parallelism ring"
                                                                             : "attention 'a': a key bound under context parallelism usp");
    } else {
      CHECK_OK(dit_blocks_status(b));
      const dit_op_t *sdpa = op_named(g, "a.sdpa");
      CHECK(sdpa && sdpa->kind == DIT_OP_ATTENTION && sdpa->n_in == 4 && sdpa->in[3] == bound);
      CHECK_EQ_INT(dit_graph_cvalue(g, a)->dims[1], 8);
    }
    /* no bound: three inputs, as before */
    dit_vid_t u = dit_blocks_attention_bounded(b, x, x, x, -1, "plain");
    CHECK(u >= 0 && op_named(g, "plain")->n_in == 3);
    dit_vid_t w = dit_blocks_attention_bounded(b, x, x, x, bound, "bounded");
    CHECK(w >= 0 && op_named(g, "bounded")->n_in == 4);
    CHECK_OK(dit_blocks_status(b));
    dit_blocks_destroy(b);
    dit_graph_destroy(g);
  }
}

/* A key the checkpoint lacks is an error the build reports once it is done, and each call
 * hands out its own copy. */
static void test_errors(void) {
  dit_graph_t *g = NULL;
  CHECK_OK(dit_graph_create(&g));
  dit_blocks_t *b = NULL;
  dit_blocks_options_t o = opts(DIT_F32, 1, 0, 1, 0, 0);
  CHECK_OK(dit_blocks_create(g, g_weights, &o, &b));
  if (!b) return;
  int64_t xs[3] = {1, 8, 32};
  dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 3, xs);
  dit_blocks_linear(b, x, "no_such_layer", DIT_F32, "bad");
  CHECK_ERR(dit_blocks_status(b), INVALID_ARGUMENT, "no_such_layer");
  CHECK_ERR(dit_blocks_status(b), INVALID_ARGUMENT, "no_such_layer");
  dit_blocks_destroy(b);
  dit_graph_destroy(g);
}

/* The end of a build: the first error wrapped as "building the <model> graph: ..." (the graph
 * destroyed, *out untouched), else the graph handed out. */
static void test_finish(void) {
  for (int bad = 0; bad < 2; bad++) {
    dit_graph_t *g = NULL, *out = NULL;
    CHECK_OK(dit_graph_create(&g));
    dit_blocks_t *b = NULL;
    dit_blocks_options_t o = opts(DIT_F32, 1, 0, 1, 0, 0);
    CHECK_OK(dit_blocks_create(g, g_weights, &o, &b));
    if (!b) {
      dit_graph_destroy(g);
      return;
    }
    int64_t xs[3] = {1, 8, 32};
    dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 3, xs);
    dit_blocks_linear(b, x, bad ? "no_such_layer" : "blocks.0.attn1.to_q", DIT_F32, "y");
    if (bad) {
      CHECK_ERR(dit_blocks_finish(b, g, "Tiny", &out), INVALID_ARGUMENT, "building the Tiny graph: ");
      CHECK(out == NULL);
    } else {
      CHECK_OK(dit_blocks_finish(b, g, "Tiny", &out));
      CHECK(out == g);
      dit_graph_destroy(out);
    }
  }
}

int main(void) {
  const char *data = getenv("DIT_TEST_DATA");
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/wan_tiny_a/model", data ? data : "data");
  CHECK_OK(dit_safetensors_open(dir, &g_weights));
  if (g_weights) {
    test_create_refusals();
    test_weight_policy();
    test_tensor_parallel_linears();
    test_attention_modes();
    test_bounded_attention();
    test_errors();
    test_finish();
  }
  dit_safetensors_close(g_weights);
  return check_summary("test_blocks");
}
