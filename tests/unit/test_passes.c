/* passes/: dead-code elimination and the memory plan's invariants on a real graph. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/plan.h"
#include "check.h"
#include "compiler/codegen_cuda.h"
#include "compiler/compile_internal.h"
#include "compiler/frontend.h"
#include "passes/passes.h"
#include "runtime/backend.h"
#include "runtime/cpu/cpu_ops.h"

static void test_dce(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int64_t xs[2] = {4, 8};
  dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 2, xs);
  dit_vid_t a = dit_graph_op(g, DIT_OP_SILU, &x, 1, NULL, DIT_F32, "a");
  dit_vid_t dead = dit_graph_op(g, DIT_OP_GELU_TANH, &x, 1, NULL, DIT_F32, "dead");
  dit_vid_t dead2 = dit_graph_op(g, DIT_OP_SILU, &dead, 1, NULL, DIT_F32, "dead2");
  (void)dead2;
  dit_vid_t b = dit_graph_op(g, DIT_OP_GELU_TANH, &a, 1, NULL, DIT_F32, "b");
  dit_graph_mark_output(g, b, "out");
  dit_pass_result_t r = {0};
  CHECK_OK(dit_pass_dce(g, &r));
  CHECK_EQ_INT(r.removed_ops, 2);
  CHECK_EQ_INT(dit_graph_num_ops(g), 2);
  CHECK_EQ_INT(dit_graph_num_values(g), 3);
  CHECK_OK(dit_graph_verify(g));
  dit_graph_destroy(g);
}

/* Every pair of arena values whose lifetimes overlap must occupy disjoint bytes. */
static void check_memplan(dit_graph_t *g, uint64_t arena) {
  int32_t nv = dit_graph_num_values(g), no = dit_graph_num_ops(g);
  int32_t *first = malloc(sizeof(int32_t) * (size_t)nv), *last = malloc(sizeof(int32_t) * (size_t)nv);
  for (int32_t v = 0; v < nv; v++) first[v] = last[v] = dit_graph_cvalue(g, v)->producer;
  for (int32_t i = 0; i < no; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    for (int k = 0; k < op->n_in; k++) last[op->in[k]] = i;
  }
  int violations = 0, checked = 0;
  for (int32_t a = 0; a < nv; a++) {
    const dit_value_t *va = dit_graph_cvalue(g, a);
    if (va->offset < 0) continue;
    if ((uint64_t)va->offset + dit_value_nbytes(va) > arena) violations++;
    for (int32_t b = a + 1; b < nv; b++) {
      const dit_value_t *vb = dit_graph_cvalue(g, b);
      if (vb->offset < 0) continue;
      int live_together = first[a] <= last[b] && first[b] <= last[a];
      int overlap = va->offset < vb->offset + (int64_t)dit_value_nbytes(vb) && vb->offset < va->offset + (int64_t)dit_value_nbytes(va);
      checked++;
      if (live_together && overlap) violations++;
    }
  }
  CHECK(checked > 100);
  CHECK_EQ_INT(violations, 0);
  free(first);
  free(last);
}

static void test_memplan_on_wan(void) {
  const char *data = getenv("DIT_TEST_DATA");
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/wan_tiny_b/model", data ? data : "data");
  dit_model_t *m;
  CHECK_OK(dit_model_load(dir, NULL, &m));
  if (!m) return;
  dit_shape_request_t req = {.batch = 2, .frames = 5, .height = 48, .width = 32, .text_len = 5, .dtype = DIT_F32};
  dit_graph_t *g;
  CHECK_OK(dit_model_build_graph(m, &req, &g));
  dit_pass_options_t po = {0};
  dit_pass_result_t r;
  CHECK_OK(dit_passes_run(g, &po, &r));
  CHECK(r.arena_bytes > 0);
  /* Every GELU (3 FFNs and the text embedder) is folded into the linear that feeds it, the
   * self-attention's Q and K norms (3 blocks) into their ropes (cross-attention's norms stay),
   * in each block the cross-attention's residual add into its output projection (acc) and the
   * attention's into norm2, and block 1's FFN residual into block 2's norm1 (it reads no weight:
   * its gate is block 1's stored table); block 0's (the step cache's site) and block 2's (read by
   * the output norm) stay. */
  CHECK_EQ_INT(r.fused_ops, 4 + 6 + 3 + 4);
  int gelus = 0, acts = 0, normed_ropes = 0, ropes = 0, rmsnorms = 0, res_norms = 0, residuals = 0, accs = 0;
  for (int32_t i = 0; i < dit_graph_num_ops(g); i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    gelus += op->kind == DIT_OP_GELU_TANH;
    acts += op->kind == DIT_OP_LINEAR && dit_attrs_find(&op->attrs, "act") != NULL;
    ropes += op->kind == DIT_OP_ROPE;
    normed_ropes += op->kind == DIT_OP_ROPE && op->n_in == 2 && dit_attrs_find(&op->attrs, "norm_eps") &&
                    !dit_attrs_find(&op->attrs, "norm_group");
    rmsnorms += op->kind == DIT_OP_RMSNORM;
    res_norms += dit_norm_residual(op->kind, &op->attrs, op->n_in, NULL) > 0 && op->n_out == 2;
    residuals += op->kind == DIT_OP_ADD || op->kind == DIT_OP_GATED_ADD;
    accs += op->kind == DIT_OP_LINEAR && dit_attrs_find(&op->attrs, "acc") != NULL;
  }
  CHECK_EQ_INT(accs, 3);
  CHECK_EQ_INT(res_norms, 4);
  CHECK_EQ_INT(residuals, 2);
  CHECK_EQ_INT(gelus, 0);
  CHECK_EQ_INT(acts, 4);
  CHECK_EQ_INT(ropes, 6);
  CHECK_EQ_INT(normed_ropes, 6);
  CHECK_EQ_INT(rmsnorms, 6);
  CHECK(r.arena_bytes * 3 < r.naive_bytes); /* reuse across blocks */
  check_memplan(g, r.arena_bytes);
  /* Linear groups: each block's self-attention q, k, v and its cross-attention's k, v (over the
   * text), their outputs one stride apart; the output projections and FFNs stay alone. */
  CHECK_EQ_INT(r.grouped_ops, 3 * 3 + 3 * 2);
  int heads = 0, members = 0;
  for (int32_t i = 0; i < dit_graph_num_ops(g); i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    const dit_attr_t *n = dit_attrs_find(&op->attrs, "group_size"), *at = dit_attrs_find(&op->attrs, "group_at");
    CHECK((n == NULL) == (at == NULL));
    if (!n || at->i != 0) continue;
    heads++;
    const dit_value_t *y0 = dit_graph_cvalue(g, op->out[0]);
    const int64_t stride = ((int64_t)dit_value_nbytes(y0) + DIT_ARENA_ALIGN - 1) / DIT_ARENA_ALIGN * DIT_ARENA_ALIGN;
    for (int64_t m = 0; m < n->i; m++, members++) {
      const dit_op_t *mo = dit_graph_cop_at(g, i + (int32_t)m);
      CHECK(mo->kind == DIT_OP_LINEAR && mo->in[0] == op->in[0] && dit_attrs_find(&mo->attrs, "group_at")->i == m);
      CHECK(dit_graph_cvalue(g, mo->out[0])->offset == y0->offset + m * stride);
    }
  }
  CHECK_EQ_INT(heads, 6);
  CHECK_EQ_INT(members, 15);
  /* Graph outputs, inputs and weights are not placed in the arena. */
  for (int32_t v = 0; v < dit_graph_num_values(g); v++) {
    const dit_value_t *val = dit_graph_cvalue(g, v);
    if (val->kind != DIT_VALUE_TEMP || val->is_output) CHECK(val->offset == -1);
    else CHECK(val->offset >= 0 && val->offset % DIT_ARENA_ALIGN == 0);
  }
  po.dump_after = "nope";
  CHECK_ERR(dit_passes_run(g, &po, &r), INVALID_ARGUMENT, "unknown pass");
  dit_graph_destroy(g);
  dit_model_free(m);
}

/* Two heads' chains feeding all-gathers, then one reader: the schedule puts each all-gather
 * right after its chain, and the memory plan keeps each all-gather's input alive until the
 * first compute op reads its result (the runtime may overlap the two). */
static void test_schedule_collectives(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int64_t xs[3] = {1, 8, 16};
  dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 3, xs);
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "group", 1);
  dit_attrs_set_int(&a, "n", 2);
  dit_vid_t q = dit_graph_op(g, DIT_OP_SILU, &x, 1, NULL, DIT_F32, "q");
  dit_vid_t k = dit_graph_op(g, DIT_OP_GELU_TANH, &x, 1, NULL, DIT_F32, "k");
  dit_vid_t qa = dit_graph_op(g, DIT_OP_ALLGATHER, &q, 1, &a, DIT_F32, "qa");
  dit_vid_t ka = dit_graph_op(g, DIT_OP_ALLGATHER, &k, 1, &a, DIT_F32, "ka");
  dit_vid_t both[2] = {qa, ka};
  dit_vid_t y = dit_graph_op(g, DIT_OP_ADD, both, 2, NULL, DIT_F32, "y");
  dit_graph_mark_output(g, y, "out");
  CHECK_OK(dit_graph_verify(g));
  dit_pass_result_t r = {0};
  CHECK_OK(dit_pass_schedule(g, &r));
  const char *want[5] = {"q", "qa", "k", "ka", "y"};
  for (int i = 0; i < 5 && i < dit_graph_num_ops(g); i++)
    CHECK(!strcmp(dit_graph_cvalue(g, dit_graph_cop_at(g, i)->out[0])->name, want[i]));
  CHECK_OK(dit_graph_verify(g));
  CHECK_OK(dit_pass_memplan(g, &r));
  /* q, read by qa (step 1), stays alive until y (step 4, qa's first compute reader): k, made
   * at step 2 and as large as q, does not take q's bytes (first fit would put it there). */
  const dit_value_t *vq = dit_graph_cvalue(g, q), *vk = dit_graph_cvalue(g, k);
  CHECK(vk->offset >= vq->offset + (int64_t)dit_value_nbytes(vq) || vq->offset >= vk->offset + (int64_t)dit_value_nbytes(vk));
  /* A reorder that would run an op before its input's producer changes nothing. */
  int32_t bad[5] = {1, 0, 2, 3, 4};
  CHECK_ERR(dit_graph_reorder(g, bad), INVALID_ARGUMENT, "before the producer of its input 'q'");
  int32_t dup[5] = {0, 0, 2, 3, 4};
  CHECK_ERR(dit_graph_reorder(g, dup), INVALID_ARGUMENT, "not a permutation");
  CHECK(!strcmp(dit_graph_cvalue(g, dit_graph_cop_at(g, 1)->out[0])->name, "qa"));
  dit_graph_destroy(g);

  /* The same through a view: q's reshape "qv" is what the collective reads; q's block (qv's
   * bytes) stays alive until the collective's first compute reader too, so k does not take it. */
  CHECK_OK(dit_graph_create(&g));
  x = dit_graph_input(g, "x", DIT_F32, 3, xs);
  q = dit_graph_op(g, DIT_OP_SILU, &x, 1, NULL, DIT_F32, "q");
  dit_attrs_t ra = {0};
  static const char *const rkeys[4] = {"rank", "d0", "d1", "d2"};
  static const int64_t rvals[4] = {3, 2, 4, 16}; /* [1, 8, 16] viewed as [2, 4, 16] */
  for (int i = 0; i < 4; i++) dit_attrs_set_int(&ra, rkeys[i], rvals[i]);
  dit_vid_t qv = dit_graph_op(g, DIT_OP_RESHAPE, &q, 1, &ra, DIT_F32, "qv");
  qa = dit_graph_op(g, DIT_OP_ALLGATHER, &qv, 1, &a, DIT_F32, "qa");
  k = dit_graph_op(g, DIT_OP_GELU_TANH, &x, 1, NULL, DIT_F32, "k");
  dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_SILU, &k, 1, NULL, DIT_F32, "k2"), "k2");
  dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_SILU, &qa, 1, NULL, DIT_F32, "z"), "z");
  CHECK_OK(dit_graph_verify(g));
  CHECK_OK(dit_pass_memplan(g, &r));
  vq = dit_graph_cvalue(g, q), vk = dit_graph_cvalue(g, k);
  CHECK(dit_graph_cvalue(g, qv)->offset == vq->offset);
  CHECK(vk->offset >= vq->offset + (int64_t)dit_value_nbytes(vq) || vq->offset >= vk->offset + (int64_t)dit_value_nbytes(vk));
  dit_graph_destroy(g);
}

static dit_vid_t in3(dit_graph_t *g, const char *name, int64_t a, int64_t b, int64_t c) {
  int64_t d[3] = {a, b, c};
  return dit_graph_input(g, name, DIT_F32, 3, d);
}

/* reshape, concat, per-head rmsnorm and rope_table through the passes (the norm folded into the
 * rope), the plan's JSON and back, and the CPU backend's steps: the attributes survive, every step
 * runs its kernel, and the fused step equals the norm and the rope run apart, bit for bit. */
static void test_mmdit_ops_plan(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int64_t md[2] = {2, 24}, wd[1] = {8}, cd[2] = {8, 8};
  dit_vid_t mod = dit_graph_input(g, "mod", DIT_F32, 2, md);
  dit_attrs_t ra = {0};
  dit_attrs_set_int(&ra, "rank", 3);
  dit_attrs_set_int(&ra, "d0", 2);
  dit_attrs_set_int(&ra, "d1", 3);
  dit_attrs_set_int(&ra, "d2", 8);
  dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_RESHAPE, &mod, 1, &ra, DIT_F32, "mod3"), "mod3");
  dit_vid_t ti[2] = {in3(g, "txt", 2, 3, 16), in3(g, "img", 2, 5, 16)};
  dit_attrs_t c1 = {0}, c2 = {0}, na = {0}, ha = {0};
  dit_attrs_set_int(&c1, "dim", 1);
  dit_attrs_set_int(&c2, "dim", 2);
  dit_attrs_set_float(&na, "eps", 1e-6);
  dit_attrs_set_int(&na, "group", 8);
  dit_attrs_set_int(&ha, "heads", 2);
  dit_vid_t joint = dit_graph_op(g, DIT_OP_CONCAT, ti, 2, &c1, DIT_F32, "joint");
  dit_vid_t qw[2] = {joint, dit_graph_weight(g, "norm_q.weight", DIT_F32, 1, wd)};
  dit_vid_t qn = dit_graph_op(g, DIT_OP_RMSNORM, qw, 2, &na, DIT_F32, "qn");
  dit_vid_t qc[2] = {qn, dit_graph_input(g, "cs", DIT_F32, 2, cd)};
  dit_vid_t rot = dit_graph_op(g, DIT_OP_ROPE_TABLE, qc, 2, &ha, DIT_F32, "rot"), rj[2] = {rot, joint};
  dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_CONCAT, rj, 2, &c2, DIT_F32, "feat"), "feat");
  dit_pass_result_t r = {0};
  CHECK_OK(dit_passes_run(g, &(dit_pass_options_t){0}, &r));
  CHECK_EQ_INT(r.fused_ops, 1);
  CHECK_EQ_INT(dit_graph_num_ops(g), 4);
  dit_plan_t *p = NULL, *q = NULL;
  char *text = NULL, *again = NULL;
  CHECK_OK(dit_compile_lower(g, r.arena_bytes, &p));
  if (p) CHECK_OK(dit_plan_to_json(p, &text));
  if (text) CHECK_OK(dit_plan_parse(text, strlen(text), "plan.json", &q));
  if (q) CHECK_OK(dit_plan_to_json(q, &again));
  CHECK(text && again && !strcmp(text, again));
  if (!q) goto done;
  static const dit_op_kind_t kinds[4] = {DIT_OP_RESHAPE, DIT_OP_CONCAT, DIT_OP_ROPE_TABLE, DIT_OP_CONCAT};
  CHECK_EQ_INT(q->n_steps, 4);
  if (q->n_steps != 4) goto done;
  for (size_t i = 0; i < 4; i++) CHECK_EQ_INT(q->steps[i].kind, kinds[i]);
  const dit_attr_t *grp = dit_attrs_find(&q->steps[2].attrs, "norm_group"), *d2 = dit_attrs_find(&q->steps[0].attrs, "d2");
  const dit_attr_t *eps = dit_attrs_find(&q->steps[2].attrs, "norm_eps");
  CHECK(grp && !grp->is_float && grp->i == 8 && d2 && d2->i == 8);
  CHECK(eps && eps->is_float && eps->f == 1e-6 && q->steps[2].n_in == 3);

  /* Every step on the CPU backend, each value in a buffer of its own. */
  const dit_backend_vtable_t *be = dit_backend_cpu();
  void *st = NULL;
  CHECK_OK(be->create(NULL, &st));
  dit_tensor_t *t = calloc(q->n_values, sizeof *t);
  for (size_t v = 0; v < q->n_values; v++) {
    t[v] = (dit_tensor_t){malloc(q->values[v].nbytes), q->values[v].dtype, q->values[v].rank, {0}};
    memcpy(t[v].dims, q->values[v].dims, sizeof(int64_t) * (size_t)t[v].rank);
    for (uint64_t i = 0; i < q->values[v].nbytes / 4; i++) ((float *)t[v].data)[i] = (float)((i * 37 + v * 11) % 23) / 7.f - 1.5f;
  }
  for (size_t i = 0; i < q->n_steps; i++) {
    const dit_plan_step_t *s = &q->steps[i];
    dit_tensor_t in[DIT_PLAN_MAX_IN], out[DIT_PLAN_MAX_OUT];
    for (int k = 0; k < s->n_in; k++) in[k] = t[s->in[k]];
    for (int k = 0; k < s->n_out; k++) out[k] = t[s->out[k]];
    CHECK_OK(be->run_step(st, i, s, in, out));
  }
  /* The same chain through the kernels directly, the norm and the rope apart: equal bytes. */
  const dit_plan_step_t *s1 = &q->steps[1], *s2 = &q->steps[2], *s3 = &q->steps[3];
  dit_cpu_t cpu = {0};
  dit_tensor_t j = t[s1->out[0]], n = t[s1->out[0]], o = t[s2->out[0]], f = t[s3->out[0]];
  j.data = malloc(q->values[s1->out[0]].nbytes);
  n.data = malloc(q->values[s1->out[0]].nbytes);
  o.data = malloc(q->values[s2->out[0]].nbytes);
  f.data = malloc(q->values[s3->out[0]].nbytes);
  CHECK_OK(dit_cpu_concat(&cpu, &t[s1->in[0]], &t[s1->in[1]], 1, &j));
  CHECK_OK(dit_cpu_rmsnorm_group(&cpu, &j, &t[s2->in[2]], 8, 1e-6, &n));
  CHECK_OK(dit_cpu_rope_table(&cpu, &n, &t[s2->in[1]], 2, &o));
  CHECK(!memcmp(o.data, t[s2->out[0]].data, q->values[s2->out[0]].nbytes));
  CHECK_OK(dit_cpu_concat(&cpu, &o, &j, 2, &f));
  CHECK(!memcmp(f.data, t[s3->out[0]].data, q->values[s3->out[0]].nbytes));
  CHECK(!memcmp(t[q->steps[0].in[0]].data, t[q->steps[0].out[0]].data, 2 * 24 * 4));
  free(j.data), free(n.data), free(o.data), free(f.data);
  for (size_t v = 0; v < q->n_values; v++) free(t[v].data);
  free(t);
  be->destroy(st);
done:
  free(text), free(again);
  dit_plan_free(p), dit_plan_free(q);
  dit_graph_destroy(g);
}

/* x -> rmsnorm (group 0: the whole row) -> rope (Wan's, 3-D) or rope_table (the MMDiTs'); the norm
 * in norm_dt, the rope in dt. extra_use: the norm's output also feeds an add (1) or is a graph
 * output (2). */
static dit_graph_t *norm_rope_graph(int table, int64_t group, dit_dtype_t dt, dit_dtype_t norm_dt, int extra_use) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int64_t xd[3] = {2, 8, 32}, wd[1] = {group ? group : 32}, cd[2] = {8, 16};
  dit_vid_t x = dit_graph_input(g, "x", dt, 3, xd), xw[2] = {x, dit_graph_weight(g, "norm_q.weight", dt, 1, wd)};
  dit_attrs_t na = {0}, ra = {0};
  dit_attrs_set_float(&na, "eps", 1e-6);
  if (group) dit_attrs_set_int(&na, "group", group);
  dit_vid_t qn = dit_graph_op(g, DIT_OP_RMSNORM, xw, 2, &na, norm_dt, "qn");
  dit_attrs_set_int(&ra, "heads", 2);
  dit_vid_t q;
  if (table) {
    dit_vid_t qc[2] = {qn, dit_graph_input(g, "cs", DIT_F32, 2, cd)};
    q = dit_graph_op(g, DIT_OP_ROPE_TABLE, qc, 2, &ra, norm_dt, "q");
  } else {
    static const char *const keys[] = {"f", "h", "w", "t_dim", "h_dim", "w_dim"};
    static const int64_t vals[] = {2, 2, 2, 8, 4, 4};
    for (int i = 0; i < 6; i++) dit_attrs_set_int(&ra, keys[i], vals[i]);
    dit_attrs_set_float(&ra, "theta", 10000);
    q = dit_graph_op(g, DIT_OP_ROPE, &qn, 1, &ra, dt, "q");
  }
  dit_graph_mark_output(g, q, "q");
  dit_vid_t qq[2] = {qn, qn};
  if (extra_use == 1) dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_ADD, qq, 2, NULL, norm_dt, "twice"), "twice");
  if (extra_use == 2) dit_graph_mark_output(g, qn, "qn");
  CHECK_OK(dit_graph_verify(g));
  return g;
}

/* The fuse pass folds a Q/K rmsnorm into the rope after it: Wan's whole-row norm into rope, a
 * per-head norm into rope_table; not when the normalized value is read again, is an output, or
 * is stored in another dtype than the rope's. */
static void test_fuse_norm_rope(void) {
  for (int table = 0; table < 2; table++) {
    dit_graph_t *g = norm_rope_graph(table, table ? 16 : 0, DIT_BF16, DIT_BF16, 0);
    dit_pass_result_t r = {0};
    CHECK_OK(dit_pass_fuse(g, &r));
    CHECK_EQ_INT(r.fused_ops, 1);
    CHECK_EQ_INT(dit_graph_num_ops(g), 1);
    const dit_op_t *op = dit_graph_cop_at(g, 0);
    CHECK_EQ_INT(op->kind, table ? DIT_OP_ROPE_TABLE : DIT_OP_ROPE);
    CHECK_EQ_INT(op->n_in, table ? 3 : 2);
    CHECK(!strcmp(dit_graph_cvalue(g, op->in[0])->name, "x"));
    CHECK(!strcmp(dit_graph_cvalue(g, op->in[op->n_in - 1])->name, "norm_q.weight"));
    if (table) CHECK(!strcmp(dit_graph_cvalue(g, op->in[1])->name, "cs"));
    const dit_attr_t *eps = dit_attrs_find(&op->attrs, "norm_eps"), *grp = dit_attrs_find(&op->attrs, "norm_group");
    CHECK(eps && eps->is_float && eps->f == 1e-6);
    CHECK(table ? grp && grp->i == 16 : grp == NULL);
    for (int32_t v = 0; v < dit_graph_num_values(g); v++) CHECK(strcmp(dit_graph_cvalue(g, v)->name, "qn"));
    CHECK_OK(dit_graph_verify(g));
    /* Already fused: nothing more to fold. */
    r = (dit_pass_result_t){0};
    CHECK_OK(dit_pass_fuse(g, &r));
    CHECK_EQ_INT(r.fused_ops, 0);
    dit_graph_destroy(g);
  }
  /* Two readers, a graph output, an f32 norm before a bf16 rope: left alone. */
  static const struct { int table, extra; dit_dtype_t norm_dt; int ops; } keep[] = {
      {0, 1, DIT_BF16, 3}, {1, 1, DIT_BF16, 3}, {0, 2, DIT_BF16, 2}, {1, 2, DIT_BF16, 2}, {0, 0, DIT_F32, 2}};
  for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
    dit_graph_t *g = norm_rope_graph(keep[i].table, keep[i].table ? 16 : 0, DIT_BF16, keep[i].norm_dt, keep[i].extra);
    dit_pass_result_t r = {0};
    CHECK_OK(dit_pass_fuse(g, &r));
    CHECK_EQ_INT(r.fused_ops, 0);
    CHECK_EQ_INT(dit_graph_num_ops(g), keep[i].ops);
    CHECK_EQ_INT(dit_graph_cop_at(g, 0)->kind, DIT_OP_RMSNORM);
    dit_graph_destroy(g);
  }
}

/* x [1, 6, 16] plus y, gated by mod's row 2 (gated) or not, then normalized: a layernorm with
 * w and b, or an adaln by mod's rows 0 and 1 (per_token: by a table and e, e's rows shared by
 * runs of tok_norm tokens, the gate's by runs of tok_res when gated per token). between: a
 * silu reads the sum between the residual and the norm; block: the norm is in block 1 and the
 * residual outside the blocks (1), or the norm in block 2 and the residual in block 1 (2), or in
 * block 1 and block 0 (3). The sum is the graph's output "h" beside the norm's "n". */
typedef struct res_case {
  int gated, adaln, per_token, tok_res, tok_norm, between, block;
} res_case_t;
static dit_graph_t *residual_norm_graph(res_case_t c) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const int64_t xd[3] = {1, 6, 16}, md[3] = {1, 6, 16}, wd[1] = {16}, td[3] = {1, 6, 16};
  const int64_t erd[3] = {1, c.tok_res ? (6 + c.tok_res - 1) / c.tok_res : 6, 6 * 16};
  const int64_t end[3] = {1, c.tok_norm ? (6 + c.tok_norm - 1) / c.tok_norm : 6, 6 * 16};
  dit_vid_t x = dit_graph_input(g, "x", DIT_BF16, 3, xd), y = dit_graph_input(g, "y", DIT_BF16, 3, xd);
  dit_vid_t mod = dit_graph_input(g, "mod", DIT_F32, 3, md), table = dit_graph_weight(g, "table", DIT_F32, 3, td);
  dit_vid_t e = dit_graph_input(g, "e", DIT_F32, 3, erd);
  dit_vid_t e2 = c.tok_norm == c.tok_res ? e : dit_graph_input(g, "e2", DIT_F32, 3, end);
  dit_attrs_t ra = {0};
  dit_attrs_set_int(&ra, "gate", 2);
  if (c.per_token) dit_attrs_set_int(&ra, "token_group", c.tok_res);
  dit_vid_t ri[4] = {x, y, c.per_token ? table : mod, e};
  const int rn = !c.gated ? 2 : c.per_token ? 4 : 3;
  dit_vid_t h = dit_graph_op(g, c.gated ? DIT_OP_GATED_ADD : DIT_OP_ADD, ri, rn, c.gated ? &ra : NULL, DIT_BF16, "h");
  if (c.between) dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_SILU, &h, 1, NULL, DIT_BF16, "between"), "b");
  dit_attrs_t na = {0};
  dit_attrs_set_float(&na, "eps", 1e-6);
  dit_vid_t n;
  if (c.adaln) {
    dit_attrs_set_int(&na, "shift", 0);
    dit_attrs_set_int(&na, "scale", 1);
    if (c.per_token) dit_attrs_set_int(&na, "token_group", c.tok_norm);
    dit_vid_t ni[3] = {h, c.per_token ? table : mod, e2};
    n = dit_graph_op(g, DIT_OP_ADALN, ni, c.per_token ? 3 : 2, &na, DIT_BF16, "n");
  } else {
    dit_vid_t ni[3] = {h, dit_graph_weight(g, "w", DIT_F32, 1, wd), dit_graph_weight(g, "b", DIT_F32, 1, wd)};
    n = dit_graph_op(g, DIT_OP_LAYERNORM, ni, 3, &na, DIT_BF16, "n");
  }
  if (c.block) {
    dit_graph_op_at(g, dit_graph_num_ops(g) - 1)->block = c.block == 2 ? 2 : 1;
    dit_graph_op_at(g, 0)->block = c.block == 2 ? 1 : c.block == 3 ? 0 : -1;
  }
  dit_graph_mark_output(g, n, "n");
  dit_graph_mark_output(g, h, "h");
  CHECK_OK(dit_graph_verify(g));
  return g;
}

/* The residual add folds into the norm that reads its sum first: one op with two outputs, the
 * residual's operands after the norm's own (res_at), its attributes joined; it verifies, and its
 * cost is the two ops' less the sum's second read; across a block boundary too (block 1 into 2). */
static void test_fuse_residual_norm(void) {
  static const res_case_t fold[] = {{1, 1, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0},
                                    {1, 1, 1, 3, 3, 0, 0}, {1, 0, 1, 2, 0, 0, 0}, {0, 1, 1, 0, 2, 0, 0}, {1, 1, 1, 1, 1, 0, 0},
                                    {1, 1, 0, 0, 0, 0, 2}, {0, 0, 0, 0, 0, 0, 2}};
  for (size_t i = 0; i < sizeof fold / sizeof fold[0]; i++) {
    const res_case_t c = fold[i];
    dit_graph_t *g = residual_norm_graph(c);
    dit_cost_t before = dit_graph_cost(g, NULL, 0);
    const dit_vid_t h = dit_graph_cop_at(g, 0)->out[0];
    const uint64_t hbytes = dit_value_nbytes(dit_graph_cvalue(g, h));
    dit_pass_result_t r = {0};
    CHECK_OK(dit_pass_fuse(g, &r));
    CHECK_EQ_INT(r.fused_ops, 1);
    CHECK_EQ_INT(dit_graph_num_ops(g), 1);
    const dit_op_t *op = dit_graph_cop_at(g, 0);
    const int own = c.adaln ? (c.per_token ? 3 : 2) : 3, res = !c.gated ? 1 : c.per_token ? 3 : 2;
    CHECK_EQ_INT(op->kind, c.adaln ? DIT_OP_ADALN : DIT_OP_LAYERNORM);
    CHECK_EQ_INT(op->n_in, own + res);
    CHECK_EQ_INT(op->n_out, 2);
    dit_op_kind_t rk;
    CHECK_EQ_INT(dit_norm_residual(op->kind, &op->attrs, op->n_in, &rk), own);
    CHECK_EQ_INT(rk, c.gated ? DIT_OP_GATED_ADD : DIT_OP_ADD);
    CHECK(!strcmp(dit_graph_cvalue(g, op->in[0])->name, "x") && !strcmp(dit_graph_cvalue(g, op->in[own])->name, "y"));
    CHECK(!strcmp(dit_graph_cvalue(g, op->out[0])->name, "n") && !strcmp(dit_graph_cvalue(g, op->out[1])->name, "h"));
    CHECK_EQ_INT(dit_graph_cvalue(g, op->out[1])->producer, 0);
    const dit_attr_t *gate = dit_attrs_find(&op->attrs, "gate"), *tg = dit_attrs_find(&op->attrs, "token_group");
    CHECK(c.gated ? gate && gate->i == 2 : gate == NULL);
    CHECK(c.per_token ? tg && tg->i == (c.gated ? c.tok_res : c.tok_norm) : tg == NULL);
    CHECK_OK(dit_graph_verify(g));
    dit_cost_t after = dit_graph_cost(g, NULL, 0);
    CHECK(after.flops == before.flops && after.bytes == before.bytes - (double)hbytes);
    dit_graph_destroy(g);
  }
  /* Kept: a reader between; a norm in block 1 after a residual outside the blocks or in block 0;
   * a residual reading block 1's table (a weight) for block 2's norm; per-token rows grouped
   * differently. */
  static const res_case_t keep[] = {{1, 1, 0, 0, 0, 1, 0}, {1, 0, 0, 0, 0, 0, 1}, {1, 0, 0, 0, 0, 0, 3},
                                    {1, 1, 1, 2, 2, 0, 2}, {1, 1, 1, 2, 3, 0, 0}};
  for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
    dit_graph_t *g = residual_norm_graph(keep[i]);
    const int ops = dit_graph_num_ops(g);
    dit_pass_result_t r = {0};
    CHECK_OK(dit_pass_fuse(g, &r));
    CHECK_EQ_INT(r.fused_ops, 0);
    CHECK_EQ_INT(dit_graph_num_ops(g), ops);
    dit_graph_destroy(g);
  }
  /* res_at that does not fit the operands is refused by name. */
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "res_at", 2);
  CHECK_EQ_INT(dit_norm_residual(DIT_OP_LAYERNORM, &a, 4, NULL), -1);
  CHECK_EQ_INT(dit_norm_residual(DIT_OP_ADALN, &a, 6, NULL), -1);
  CHECK_EQ_INT(dit_norm_residual(DIT_OP_ADALN, &a, 3, NULL), 2);
  CHECK_EQ_INT(dit_norm_residual(DIT_OP_RMSNORM, &a, 3, NULL), 0);
}

/* x + y, layernorm'd (w, b), then the row quantizer of two fp8 linears (attn_quant with heads 1
 * and rows 1); with `other`, a silu reads the normalized rows too. */
static dit_graph_t *quant_norm_graph(int other) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const int64_t xd[3] = {1, 6, 16}, wd[1] = {16}, w8d[2] = {16, 16};
  dit_vid_t xy[2] = {dit_graph_input(g, "x", DIT_BF16, 3, xd), dit_graph_input(g, "y", DIT_BF16, 3, xd)};
  dit_vid_t h = dit_graph_op(g, DIT_OP_ADD, xy, 2, NULL, DIT_BF16, "h");
  dit_attrs_t na = {0}, qa = {0};
  dit_attrs_set_float(&na, "eps", 1e-6);
  dit_vid_t ni[3] = {h, dit_graph_weight(g, "w", DIT_F32, 1, wd), dit_graph_weight(g, "b", DIT_F32, 1, wd)};
  dit_vid_t n = dit_graph_op(g, DIT_OP_LAYERNORM, ni, 3, &na, DIT_BF16, "n");
  if (other) dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_SILU, &n, 1, NULL, DIT_BF16, "other"), "o");
  dit_attrs_set_int(&qa, "heads", 1), dit_attrs_set_int(&qa, "rows", 1);
  const dit_dtype_t qdt[2] = {DIT_F8E4M3, DIT_F32};
  dit_vid_t q[2];
  CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &n, 1, &qa, qdt, "n.rows8", q));
  for (int i = 0; i < 2; i++) {
    char wn[16], sn[16], yn[16];
    snprintf(wn, sizeof wn, "w8_%d", i), snprintf(sn, sizeof sn, "s8_%d", i), snprintf(yn, sizeof yn, "y%d", i);
    dit_vid_t li[4] = {q[0], q[1], dit_graph_weight(g, wn, DIT_F8E4M3, 2, w8d), dit_graph_weight(g, sn, DIT_F32, 1, wd)};
    dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_LINEAR_FP8, li, 4, NULL, DIT_BF16, yn), yn);
  }
  dit_graph_mark_output(g, h, "h");
  CHECK_OK(dit_graph_verify(g));
  return g;
}

/* The row quantizer of fp8 linears folds into the norm making its rows (after the residual fold):
 * one op, codes first, the sum, the row scales [B, 1, T] last; both linears read the codes. Kept
 * when the rows have another reader. */
static void test_fuse_quant_norm(void) {
  dit_graph_t *g = quant_norm_graph(0);
  dit_pass_result_t r = {0};
  CHECK_OK(dit_pass_fuse(g, &r));
  CHECK_EQ_INT(r.fused_ops, 2); /* the residual, then the quantizer */
  CHECK_EQ_INT(dit_graph_num_ops(g), 3);
  const dit_op_t *op = dit_graph_cop_at(g, 0);
  CHECK_EQ_INT(op->kind, DIT_OP_LAYERNORM);
  CHECK_EQ_INT(op->n_out, 3);
  CHECK_EQ_INT(dit_norm_quant(op->kind, &op->attrs), 1);
  const dit_value_t *codes = dit_graph_cvalue(g, op->out[0]), *sc = dit_graph_cvalue(g, op->out[2]);
  CHECK(codes->dtype == DIT_F8E4M3 && sc->dtype == DIT_F32 && sc->rank == 3 && sc->dims[1] == 1 && sc->dims[2] == 6);
  CHECK(!strcmp(dit_graph_cvalue(g, op->out[1])->name, "h"));
  for (int i = 1; i < 3; i++) {
    const dit_op_t *l = dit_graph_cop_at(g, i);
    CHECK(l->kind == DIT_OP_LINEAR_FP8 && l->in[0] == op->out[0] && l->in[1] == op->out[2]);
  }
  CHECK_OK(dit_graph_verify(g));
  dit_graph_destroy(g);
  g = quant_norm_graph(1);
  CHECK_OK(dit_pass_fuse(g, &r));
  int quantizers = 0;
  for (int i = 0; i < dit_graph_num_ops(g); i++) {
    quantizers += dit_graph_cop_at(g, i)->kind == DIT_OP_ATTN_QUANT;
    CHECK_EQ_INT(dit_norm_quant(dit_graph_cop_at(g, i)->kind, &dit_graph_cop_at(g, i)->attrs), 0);
  }
  CHECK_EQ_INT(quantizers, 1);
  CHECK_OK(dit_graph_verify(g));
  dit_graph_destroy(g);
}

/* xq, xs -> linear_fp8 (w8, s8, bias) -> gelu_tanh -> the row quantizer -> linear_fp8: the FFN of an
 * fp8 block. With `other`, a silu reads the activation too. */
static dit_graph_t *act_quant_graph(int other) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const int64_t xd[3] = {1, 6, 16}, sd[3] = {1, 1, 6}, nd[1] = {32}, wud[2] = {32, 16}, wdd[2] = {16, 32}, kd[1] = {16};
  dit_vid_t li[5] = {dit_graph_input(g, "xq", DIT_F8E4M3, 3, xd), dit_graph_input(g, "xs", DIT_F32, 3, sd),
                     dit_graph_weight(g, "wu", DIT_F8E4M3, 2, wud), dit_graph_weight(g, "su", DIT_F32, 1, nd),
                     dit_graph_weight(g, "bu", DIT_BF16, 1, nd)};
  dit_vid_t y = dit_graph_op(g, DIT_OP_LINEAR_FP8, li, 5, NULL, DIT_BF16, "up");
  dit_vid_t h = dit_graph_op(g, DIT_OP_GELU_TANH, &y, 1, NULL, DIT_BF16, "h");
  if (other) dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_SILU, &h, 1, NULL, DIT_BF16, "other"), "o");
  dit_attrs_t qa = {0};
  dit_attrs_set_int(&qa, "heads", 1), dit_attrs_set_int(&qa, "rows", 1);
  const dit_dtype_t qdt[2] = {DIT_F8E4M3, DIT_F32};
  dit_vid_t q[2];
  CHECK_OK(dit_graph_op2(g, DIT_OP_ATTN_QUANT, &h, 1, &qa, qdt, "h.rows8", q));
  dit_vid_t di[4] = {q[0], q[1], dit_graph_weight(g, "wd", DIT_F8E4M3, 2, wdd), dit_graph_weight(g, "sd", DIT_F32, 1, kd)};
  dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_LINEAR_FP8, di, 4, NULL, DIT_BF16, "down"), "down");
  CHECK_OK(dit_graph_verify(g));
  return g;
}

/* An fp8 linear's GELU and bias move into the quantizer of its rows (attn_quant act 1, the bias its
 * second operand) and the matmul keeps no epilogue; with another reader of the activation the GELU
 * goes into the matmul's epilogue as before, with its bias. */
static void test_fuse_act_quant(void) {
  dit_graph_t *g = act_quant_graph(0);
  dit_pass_result_t r = {0};
  CHECK_OK(dit_pass_fuse(g, &r));
  CHECK_EQ_INT(r.fused_ops, 1);
  CHECK_EQ_INT(dit_graph_num_ops(g), 3);
  const dit_op_t *up = dit_graph_cop_at(g, 0), *aq = dit_graph_cop_at(g, 1);
  CHECK(up->kind == DIT_OP_LINEAR_FP8 && up->n_in == 4 && !dit_attrs_find(&up->attrs, "act"));
  CHECK(aq->kind == DIT_OP_ATTN_QUANT && aq->n_in == 2 && aq->in[0] == up->out[0]);
  CHECK(!strcmp(dit_graph_cvalue(g, aq->in[1])->name, "bu"));
  const dit_attr_t *act = dit_attrs_find(&aq->attrs, "act");
  CHECK(act && act->i == 1);
  CHECK_OK(dit_graph_verify(g));
  dit_graph_destroy(g);
  g = act_quant_graph(1);
  CHECK_OK(dit_pass_fuse(g, &r));
  for (int i = 0; i < dit_graph_num_ops(g); i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    if (op->kind == DIT_OP_ATTN_QUANT) CHECK(op->n_in == 1 && !dit_attrs_find(&op->attrs, "act"));
    if (i == 0) CHECK(op->kind == DIT_OP_LINEAR_FP8 && op->n_in == 5 && dit_attrs_find(&op->attrs, "act"));
  }
  CHECK_OK(dit_graph_verify(g));
  dit_graph_destroy(g);
}

/* A reshape of a temp is a view: it shares its input's block, which stays alive until the view's
 * last reader, so a temp made in between does not take those bytes; a reshape of a graph input
 * gets a block of its own. */
/* a [1, 6, 16] ++ b [1, 6, 48] along the features into a linear (w [8, 64], bias), or (kind 1)
 * along the tokens, or (2) with w read by a second linear, or (3) with an activation. */
static dit_graph_t *concat_linear_graph(int kind) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const int64_t ad[3] = {1, 6, 16}, bd[3] = {1, 6, kind == 1 ? 16 : 48}, wd[2] = {8, kind == 1 ? 16 : 64}, nd[1] = {8};
  dit_vid_t a = dit_graph_input(g, "a", DIT_F32, 3, ad), b = dit_graph_input(g, "b", DIT_F32, 3, bd);
  dit_attrs_t ca = {0}, la = {0};
  dit_attrs_set_int(&ca, "dim", kind == 1 ? 1 : 2);
  if (kind == 3) dit_attrs_set_int(&la, "act", 1);
  dit_vid_t ci[2] = {a, b};
  dit_vid_t x = dit_graph_op(g, DIT_OP_CONCAT, ci, 2, &ca, DIT_F32, "proj.in");
  dit_vid_t w = dit_graph_weight(g, "proj.weight", DIT_F32, 2, wd), li[3] = {x, w, dit_graph_weight(g, "proj.bias", DIT_F32, 1, nd)};
  dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_LINEAR, li, 3, &la, DIT_F32, "proj"), "y");
  if (kind == 2) {
    dit_vid_t o[2] = {dit_graph_input(g, "o", DIT_F32, 3, (const int64_t[3]){1, 2, 64}), w};
    dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_LINEAR, o, 2, NULL, DIT_F32, "other"), "z");
  }
  CHECK_OK(dit_graph_verify(g));
  return g;
}

/* A linear over features joined by a concat splits into two products over the weight's column
 * blocks, the second accumulating onto the first (acc): the concat is gone, the whole weight too
 * (two slices of it instead), it verifies, and on the CPU the two products give the one's sums
 * to fp32 rounding. Joined tokens, a weight read elsewhere and an activated linear stay. */
static void test_fuse_concat_linear(void) {
  dit_graph_t *g = concat_linear_graph(0);
  const dit_cost_t before = dit_graph_cost(g, NULL, 0);
  dit_pass_result_t r = {0};
  CHECK_OK(dit_pass_fuse(g, &r));
  CHECK_EQ_INT(r.fused_ops, 1);
  CHECK_EQ_INT(dit_graph_num_ops(g), 2);
  const dit_op_t *p1 = dit_graph_cop_at(g, 0), *p2 = dit_graph_cop_at(g, 1);
  CHECK(p1->kind == DIT_OP_LINEAR && p1->n_in == 3 && p2->kind == DIT_OP_LINEAR && p2->n_in == 3);
  const dit_attr_t *acc = dit_attrs_find(&p2->attrs, "acc");
  CHECK(acc && acc->i == 1 && dit_attrs_find(&p1->attrs, "acc") == NULL && p2->in[2] == p1->out[0]);
  const dit_value_t *part = dit_graph_cvalue(g, p1->out[0]), *w1 = dit_graph_cvalue(g, p1->in[1]), *w2 = dit_graph_cvalue(g, p2->in[1]);
  /* The wider part (b, 48 features against a's 16) first, with the bias; a's accumulates. */
  CHECK(!strcmp(part->name, "proj.part") && part->rank == 3 && part->dims[2] == 8 && part->producer == 0);
  CHECK(!strcmp(dit_graph_cvalue(g, p1->in[0])->name, "b") && !strcmp(dit_graph_cvalue(g, p2->in[0])->name, "a"));
  CHECK(!strcmp(dit_graph_cvalue(g, p1->in[2])->name, "proj.bias"));
  CHECK(w2->slice_dim == 1 && w2->slice_start == 0 && w2->dims[0] == 8 && w2->dims[1] == 16 && !strcmp(w2->src, "proj.weight"));
  CHECK(w1->slice_dim == 1 && w1->slice_start == 16 && w1->dims[1] == 48 && !strcmp(w1->src, "proj.weight") && strcmp(w1->ref, w2->ref));
  for (int32_t v = 0; v < dit_graph_num_values(g); v++) CHECK(dit_graph_cvalue(g, v)->slice_dim >= 0 || strcmp(dit_graph_cvalue(g, v)->name, "proj.weight"));
  CHECK_OK(dit_graph_verify(g));
  const dit_cost_t after = dit_graph_cost(g, NULL, 0);
  CHECK(after.flops == before.flops + 6 * 8 && after.bytes < before.bytes);

  /* The CPU: one product over the joined features against the two. */
  dit_cpu_t cpu = {0};
  CHECK_OK(dit_pool_create(2, &cpu.pool));
  float av[6 * 16], bv[6 * 48], wv[8 * 64], w1v[8 * 16], w2v[8 * 48], biasv[8], xv[6 * 64], y[6 * 8], y1[6 * 8], y2[6 * 8];
  uint64_t seed = 7;
  float *fill[4] = {av, bv, wv, biasv};
  const int counts[4] = {6 * 16, 6 * 48, 8 * 64, 8};
  for (int t = 0; t < 4; t++)
    for (int i = 0; i < counts[t]; i++) seed = seed * 6364136223846793005ull + 1, fill[t][i] = (float)((seed >> 40) % 2001) / 1000.f - 1.f;
  for (int m = 0; m < 6; m++) memcpy(xv + m * 64, av + m * 16, 16 * sizeof(float)), memcpy(xv + m * 64 + 16, bv + m * 48, 48 * sizeof(float));
  for (int n = 0; n < 8; n++) memcpy(w1v + n * 16, wv + n * 64, 16 * sizeof(float)), memcpy(w2v + n * 48, wv + n * 64 + 16, 48 * sizeof(float));
  const dit_tensor_t tx = {.data = xv, .dtype = DIT_F32, .rank = 2, .dims = {6, 64}}, tw = {.data = wv, .dtype = DIT_F32, .rank = 2, .dims = {8, 64}},
                     ta = {.data = av, .dtype = DIT_F32, .rank = 2, .dims = {6, 16}}, tb = {.data = bv, .dtype = DIT_F32, .rank = 2, .dims = {6, 48}},
                     tw1 = {.data = w1v, .dtype = DIT_F32, .rank = 2, .dims = {8, 16}}, tw2 = {.data = w2v, .dtype = DIT_F32, .rank = 2, .dims = {8, 48}},
                     tbias = {.data = biasv, .dtype = DIT_F32, .rank = 1, .dims = {8}};
  dit_tensor_t ty = {.data = y, .dtype = DIT_F32, .rank = 2, .dims = {6, 8}}, ty1 = ty, ty2 = ty;
  ty1.data = y1, ty2.data = y2;
  CHECK_OK(dit_cpu_linear(&cpu, &tx, &tw, &tbias, &ty));
  CHECK_OK(dit_cpu_linear(&cpu, &tb, &tw2, &tbias, &ty1));
  CHECK_OK(dit_cpu_linear_acc(&cpu, &ta, &tw1, NULL, &ty1, &ty2));
  for (int i = 0; i < 6 * 8; i++) CHECK(fabsf(y[i] - y2[i]) <= 1e-5f * (1.f + fabsf(y[i])));
  CHECK_ERR(dit_cpu_linear_acc(&cpu, &tb, &tw2, NULL, &ty2, &ty2), INVALID_ARGUMENT, "alias");
  dit_tensor_t bad = ty1;
  bad.dims[1] = 4;
  CHECK_ERR(dit_cpu_linear_acc(&cpu, &tb, &tw2, NULL, &bad, &ty2), INVALID_ARGUMENT, "c");
  dit_pool_destroy(cpu.pool);
  dit_graph_destroy(g);

  for (int kind = 1; kind <= 3; kind++) {
    g = concat_linear_graph(kind);
    const int ops = dit_graph_num_ops(g);
    dit_pass_result_t k = {0};
    CHECK_OK(dit_pass_fuse(g, &k));
    CHECK_EQ_INT(dit_graph_num_ops(g), ops);
    CHECK_EQ_INT(dit_graph_cop_at(g, 0)->kind, DIT_OP_CONCAT);
    dit_graph_destroy(g);
  }

  /* The shape rules: c must have the output's shape, acc no act. */
  CHECK_OK(dit_graph_create(&g));
  const int64_t xd[2] = {6, 16}, wd[2] = {8, 16}, cd[2] = {6, 4};
  dit_attrs_t aa = {0};
  dit_attrs_set_int(&aa, "acc", 1);
  dit_vid_t li[3] = {dit_graph_input(g, "x", DIT_F32, 2, xd), dit_graph_weight(g, "w", DIT_F32, 2, wd), dit_graph_input(g, "c", DIT_F32, 2, cd)};
  dit_graph_op(g, DIT_OP_LINEAR, li, 3, &aa, DIT_F32, "bad");
  dit_status_t st = dit_graph_status(g);
  CHECK(st && strstr(dit_status_message(st), "linear: accumulated input 'c' must have the output's shape"));
  dit_graph_destroy(g);
}

static void test_memplan_views(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int64_t xs[3] = {1, 8, 16};
  dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 3, xs);
  dit_vid_t a = dit_graph_op(g, DIT_OP_SILU, &x, 1, NULL, DIT_F32, "a");
  dit_attrs_t ra = {0};
  dit_attrs_set_int(&ra, "rank", 2);
  dit_attrs_set_int(&ra, "d0", 8);
  dit_attrs_set_int(&ra, "d1", 16);
  dit_vid_t v = dit_graph_op(g, DIT_OP_RESHAPE, &a, 1, &ra, DIT_F32, "view");
  dit_vid_t xi = dit_graph_op(g, DIT_OP_RESHAPE, &x, 1, &ra, DIT_F32, "copy");
  dit_vid_t b = dit_graph_op(g, DIT_OP_SILU, &xi, 1, NULL, DIT_F32, "b");
  dit_vid_t both[2] = {v, b};
  dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_ADD, both, 2, NULL, DIT_F32, "y"), "out");
  CHECK_OK(dit_graph_verify(g));
  dit_pass_result_t r = {0};
  CHECK_OK(dit_pass_memplan(g, &r));
  const dit_value_t *va = dit_graph_cvalue(g, a), *vv = dit_graph_cvalue(g, v), *vi = dit_graph_cvalue(g, xi), *vb = dit_graph_cvalue(g, b);
  CHECK(vv->offset == va->offset);
  const int64_t n = (int64_t)dit_value_nbytes(va);
  CHECK(vi->offset >= va->offset + n || va->offset >= vi->offset + n);
  CHECK(vb->offset >= va->offset + n || va->offset >= vb->offset + n);
  CHECK_EQ_INT(r.arena_bytes, 3 * 512);
  dit_graph_destroy(g);
}

/* x + linear(silu(x)) ([1, 6, 16], a bias): the add folds into the linear (acc, x its accumulated
 * input), which makes the sum "y" itself; on the CPU the one op gives the two's sums. Kept: the
 * product read twice (case 1), the other operand made after the linear (2), another dtype (3). */
static void test_fuse_add_linear(void) {
  for (int c = 0; c < 4; c++) {
    dit_graph_t *g;
    CHECK_OK(dit_graph_create(&g));
    const int64_t xd[3] = {1, 6, 16}, wd[2] = {16, 16}, bd[1] = {16};
    dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 3, xd);
    dit_vid_t h = dit_graph_op(g, DIT_OP_SILU, &x, 1, NULL, DIT_F32, "h");
    dit_vid_t li[3] = {h, dit_graph_weight(g, "w", DIT_F32, 2, wd), dit_graph_weight(g, "b", DIT_F32, 1, bd)};
    dit_vid_t p = dit_graph_op(g, DIT_OP_LINEAR, li, 3, NULL, c == 3 ? DIT_BF16 : DIT_F32, "proj");
    dit_vid_t other = c == 2 ? dit_graph_op(g, DIT_OP_SILU, &h, 1, NULL, DIT_F32, "late") : x;
    if (c == 3) other = dit_graph_op(g, DIT_OP_CAST, &x, 1, NULL, DIT_BF16, "xb");
    dit_vid_t ai[2] = {other, p};
    dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_ADD, ai, 2, NULL, DIT_F32, "y"), "y");
    if (c == 1) dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_SILU, &p, 1, NULL, DIT_F32, "again"), "again");
    if (dit_graph_status(g) != DIT_OK) { /* an add of two dtypes: refused by the shape rules, nothing to fold */
      CHECK(c == 3);
      dit_graph_destroy(g);
      continue;
    }
    const int ops = dit_graph_num_ops(g);
    dit_pass_result_t r = {0};
    CHECK_OK(dit_pass_fuse(g, &r));
    CHECK_OK(dit_graph_verify(g));
    if (c == 0) {
      CHECK_EQ_INT(r.fused_ops, 1);
      CHECK_EQ_INT(dit_graph_num_ops(g), 2);
      const dit_op_t *lin = dit_graph_cop_at(g, 1);
      const dit_attr_t *acc = dit_attrs_find(&lin->attrs, "acc");
      CHECK(lin->kind == DIT_OP_LINEAR && acc && acc->i == 1 && lin->n_in == 4 && lin->in[3] == x);
      CHECK(!strcmp(dit_graph_cvalue(g, lin->out[0])->name, "y") && dit_graph_cvalue(g, lin->out[0])->is_output);
    } else {
      CHECK_EQ_INT(dit_graph_num_ops(g), ops);
    }
    dit_graph_destroy(g);
  }
}

/* Token views. A concat along the tokens of [1, 8, 16] and [1, 4, 16] (silu of inputs) is a view: its parts
 * are written side by side into its block and the plan reads it as one (dit_plan_step_is_view);
 * with two batch items the parts are not contiguous runs and each has its own block; a first
 * part whose bytes are not a multiple of the arena alignment keeps its own block too. */
static void test_memplan_concat_views(void) {
  for (int c = 0; c < 3; c++) {
    dit_graph_t *g;
    CHECK_OK(dit_graph_create(&g));
    const int64_t bt = c == 1 ? 2 : 1, w = c == 2 ? 3 : 16, xa[3] = {bt, 8, w}, xb[3] = {bt, 4, w};
    dit_vid_t ia = dit_graph_input(g, "xa", DIT_F32, 3, xa), ib = dit_graph_input(g, "xb", DIT_F32, 3, xb);
    dit_vid_t a = dit_graph_op(g, DIT_OP_SILU, &ia, 1, NULL, DIT_F32, "a"), b = dit_graph_op(g, DIT_OP_SILU, &ib, 1, NULL, DIT_F32, "b");
    dit_attrs_t ca = {0};
    dit_attrs_set_int(&ca, "dim", 1);
    dit_vid_t ab[2] = {a, b};
    dit_vid_t y = dit_graph_op(g, DIT_OP_CONCAT, ab, 2, &ca, DIT_F32, "y");
    dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_SILU, &y, 1, NULL, DIT_F32, "z"), "out");
    CHECK_OK(dit_graph_verify(g));
    dit_pass_result_t r = {0};
    CHECK_OK(dit_pass_memplan(g, &r));
    const dit_value_t *va = dit_graph_cvalue(g, a), *vb = dit_graph_cvalue(g, b), *vy = dit_graph_cvalue(g, y);
    const int64_t na = (int64_t)dit_value_nbytes(va), nb = (int64_t)dit_value_nbytes(vb);
    if (c == 0) {
      CHECK(va->offset == vy->offset && vb->offset == vy->offset + na);
      CHECK_EQ_INT(r.arena_bytes, (na + nb + 255) / 256 * 256);
    } else {
      CHECK(va->offset + na <= vy->offset || vy->offset + na + nb <= va->offset);
      CHECK(vb->offset + nb <= vy->offset || vy->offset + na + nb <= vb->offset);
    }
    dit_plan_t *p = NULL;
    CHECK_OK(dit_compile_lower(g, r.arena_bytes, &p));
    for (size_t i = 0; p && i < p->n_steps; i++)
      CHECK_EQ_INT(dit_plan_step_is_view(p, &p->steps[i]), c == 0 && p->steps[i].kind == DIT_OP_CONCAT);
    if (p) {
      char *json = NULL;
      dit_plan_t *back = NULL;
      CHECK_OK(dit_plan_to_json(p, &json));
      CHECK_OK(dit_plan_parse(json, strlen(json), "concat views", &back)); /* the validator takes the view */
      free(json);
      dit_plan_free(back);
    }
    dit_plan_free(p);
    dit_graph_destroy(g);
  }
  /* Slices of the tokens that split a one-item temp whole ([1, 8, 16]: tokens [0, 4) and [4, 8))
   * are views at their bytes; one slice alone (half the block unread), two items, or two slices
   * whose counts add up to the tokens but overlap ([1, 16, 16]: [0, 8) and [4, 12)), are not. */
  for (int c = 0; c < 4; c++) {
    dit_graph_t *g;
    CHECK_OK(dit_graph_create(&g));
    const int64_t xd[3] = {c == 2 ? 2 : 1, c == 3 ? 16 : 8, 16};
    dit_vid_t xi = dit_graph_input(g, "x", DIT_F32, 3, xd);
    dit_vid_t x = dit_graph_op(g, DIT_OP_SILU, &xi, 1, NULL, DIT_F32, "x.act"), parts[2] = {-1, -1};
    for (int k = 0; k < (c == 1 ? 1 : 2); k++) {
      dit_attrs_t sa = {0};
      dit_attrs_set_int(&sa, "t0", 4 * k);
      dit_attrs_set_int(&sa, "count", c == 3 ? 8 : 4);
      parts[k] = dit_graph_op(g, DIT_OP_SLICE_TOKENS, &x, 1, &sa, DIT_F32, k ? "hi" : "lo");
      dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_SILU, &parts[k], 1, NULL, DIT_F32, k ? "z1" : "z0"), k ? "z1" : "z0");
    }
    CHECK_OK(dit_graph_verify(g));
    dit_pass_result_t r = {0};
    CHECK_OK(dit_pass_memplan(g, &r));
    const dit_value_t *vx = dit_graph_cvalue(g, x), *lo = dit_graph_cvalue(g, parts[0]);
    const int64_t row = 16 * 4;
    if (c == 0) {
      CHECK(lo->offset == vx->offset && dit_graph_cvalue(g, parts[1])->offset == vx->offset + 4 * row);
      CHECK_EQ_INT(r.arena_bytes, 8 * row);
    } else {
      CHECK(lo->offset >= vx->offset + (int64_t)dit_value_nbytes(vx) || lo->offset + (int64_t)dit_value_nbytes(lo) <= vx->offset);
    }
    dit_plan_t *p = NULL;
    CHECK_OK(dit_compile_lower(g, r.arena_bytes, &p));
    int views = 0;
    for (size_t i = 0; p && i < p->n_steps; i++) views += dit_plan_step_is_view(p, &p->steps[i]);
    CHECK_EQ_INT(views, c == 0 ? 2 : 0);
    if (p) {
      char *json = NULL;
      dit_plan_t *back = NULL;
      CHECK_OK(dit_plan_to_json(p, &json));
      CHECK_OK(dit_plan_parse(json, strlen(json), "slice views", &back));
      free(json);
      dit_plan_free(back);
    }
    dit_plan_free(p);
    dit_graph_destroy(g);
  }
}

/* x f32 [2, 6, 5, 16] -> silu -> groupnorm "gn" (4 groups, tagged block 3) -> silu -> output "y",
 * and a groupnorm of 12 channels (not whole 8-channel chunks: the sliced kernels leave it) -> "z". */
static dit_graph_t *groupnorm_graph(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  const int64_t xd[4] = {2, 6, 5, 16}, zd[3] = {2, 7, 12}, c16[1] = {16}, c12[1] = {12};
  dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 4, xd);
  dit_attrs_t ga = {0};
  dit_attrs_set_int(&ga, "groups", 4);
  dit_attrs_set_float(&ga, "eps", 1e-5);
  dit_vid_t in[3] = {dit_graph_op(g, DIT_OP_SILU, &x, 1, NULL, DIT_F32, "act"), dit_graph_weight(g, "gn.weight", DIT_F32, 1, c16),
                     dit_graph_weight(g, "gn.bias", DIT_F32, 1, c16)};
  dit_graph_set_block(g, 3);
  dit_vid_t gn = dit_graph_op(g, DIT_OP_GROUPNORM, in, 3, &ga, DIT_F32, "gn");
  dit_graph_set_block(g, -1);
  dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_SILU, &gn, 1, NULL, DIT_F32, "y"), "y");
  dit_vid_t zin[3] = {dit_graph_input(g, "xz", DIT_F32, 3, zd), dit_graph_weight(g, "gz.weight", DIT_F32, 1, c12),
                      dit_graph_weight(g, "gz.bias", DIT_F32, 1, c12)};
  dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_GROUPNORM, zin, 3, &ga, DIT_F32, "z"), "z");
  CHECK_OK(dit_graph_status(g));
  return g;
}

/* Runs plan p's steps on the CPU backend, every input and weight filled from its name (so two
 * plans of one graph get the same operands); returns a copy of output `ref`'s floats. */
static float *run_on_cpu(const dit_plan_t *p, const char *ref) {
  const dit_backend_vtable_t *be = dit_backend_cpu();
  void *st = NULL;
  CHECK_OK(be->create(NULL, &st));
  dit_tensor_t *t = calloc(p->n_values, sizeof *t);
  float *out = NULL;
  for (size_t v = 0; v < p->n_values; v++) {
    const dit_plan_value_t *pv = &p->values[v];
    t[v] = (dit_tensor_t){calloc(1, pv->nbytes + 4), pv->dtype, pv->rank, {0}};
    memcpy(t[v].dims, pv->dims, sizeof(int64_t) * (size_t)pv->rank);
    uint32_t h = 2166136261u;
    for (const char *c = pv->name; *c; c++) h = (h ^ (uint8_t)*c) * 16777619u;
    for (uint64_t i = 0; i < pv->nbytes / 4; i++) ((float *)t[v].data)[i] = (float)((i * 37 + h % 101) % 23) / 7.f + 0.5f;
  }
  for (size_t i = 0; i < p->n_steps; i++) {
    const dit_plan_step_t *s = &p->steps[i];
    dit_tensor_t in[DIT_PLAN_MAX_IN], o[DIT_PLAN_MAX_OUT];
    for (int k = 0; k < s->n_in; k++) in[k] = t[s->in[k]];
    for (int k = 0; k < s->n_out; k++) o[k] = t[s->out[k]];
    CHECK_OK(be->run_step(st, i, s, in, o));
  }
  for (size_t v = 0; v < p->n_values; v++) {
    if (p->values[v].storage == DIT_STORAGE_OUTPUT && !strcmp(p->values[v].ref, ref)) {
      out = t[v].data;
      t[v].data = NULL;
    }
    free(t[v].data);
  }
  free(t);
  be->destroy(st);
  return out;
}

/* GPU targets run a groupnorm the sliced kernels take as groupnorm_stats + groupnorm_apply in its
 * place (the apply keeps its value, readers and block; the other groupnorm stays one op); the cpu
 * target keeps every groupnorm. Both plans survive JSON and give the same outputs on the CPU
 * backend (the sliced statistics pass through f32: equal within its rounding). */
static void test_groupnorm_lowering(void) {
  dit_graph_t *gc = groupnorm_graph(), *gg = groupnorm_graph();
  int split = -1;
  CHECK_OK(dit_compile_lower_target("cpu", gc, &split));
  CHECK_EQ_INT(split, 0);
  CHECK_EQ_INT(dit_graph_num_ops(gc), 4);
  CHECK_OK(dit_compile_lower_target("sm_90", gg, &split));
  CHECK_EQ_INT(split, 1);
  CHECK_OK(dit_graph_verify(gg));
  static const dit_op_kind_t kinds[5] = {DIT_OP_SILU, DIT_OP_GROUPNORM_STATS, DIT_OP_GROUPNORM_APPLY, DIT_OP_SILU, DIT_OP_GROUPNORM};
  CHECK_EQ_INT(dit_graph_num_ops(gg), 5);
  for (int32_t i = 0; i < dit_graph_num_ops(gg) && i < 5; i++) {
    const dit_op_t *op = dit_graph_cop_at(gg, i);
    CHECK_EQ_INT(op->kind, kinds[i]);
    CHECK_EQ_INT(op->block, i == 1 || i == 2 ? 3 : -1);
  }
  const dit_op_t *stats = dit_graph_cop_at(gg, 1), *apply = dit_graph_cop_at(gg, 2), *after = dit_graph_cop_at(gg, 3);
  const dit_attr_t *sl = dit_attrs_find(&stats->attrs, "slices"), *gr = dit_attrs_find(&stats->attrs, "groups");
  CHECK(sl && sl->i == dit_cuda_groupnorm_slices(2, 30, 16, 4) && sl->i > 1 && gr && gr->i == 4);
  CHECK(apply->in[1] == stats->out[0] && apply->in[0] == stats->in[0] && after->in[0] == apply->out[0]);
  CHECK(!strcmp(dit_graph_cvalue(gg, apply->out[0])->name, "gn"));
  const dit_attr_t *eps = dit_attrs_find(&apply->attrs, "eps");
  CHECK(eps && eps->f == 1e-5);

  dit_plan_t *plans[2] = {NULL, NULL};
  dit_graph_t *gs[2] = {gc, gg};
  for (int k = 0; k < 2; k++) {
    dit_pass_result_t r = {0};
    dit_plan_t *p = NULL;
    char *text = NULL;
    CHECK_OK(dit_passes_run(gs[k], &(dit_pass_options_t){0}, &r));
    CHECK_OK(dit_compile_lower(gs[k], r.arena_bytes, &p));
    if (p) CHECK_OK(dit_plan_to_json(p, &text));
    if (text) CHECK_OK(dit_plan_parse(text, strlen(text), "plan.json", &plans[k]));
    free(text);
    dit_plan_free(p);
  }
  if (plans[0] && plans[1]) {
    CHECK_EQ_INT(plans[1]->n_steps, plans[0]->n_steps + 1);
    static const char *const outs[2] = {"y", "z"};
    for (int o = 0; o < 2; o++) {
      float *a = run_on_cpu(plans[0], outs[o]), *b = run_on_cpu(plans[1], outs[o]);
      const int n = o ? 2 * 7 * 12 : 2 * 30 * 16;
      double worst = 0, big = 0;
      for (int i = 0; a && b && i < n; i++) worst = fmax(worst, fabs(a[i] - b[i])), big = fmax(big, fabs(a[i]));
      CHECK(a && b && big > 0.1 && worst <= 1e-5 * big);
      if (o == 1) CHECK(a && b && !memcmp(a, b, sizeof(float) * (size_t)n)); /* the same single op */
      free(a), free(b);
    }
  }
  dit_plan_free(plans[0]), dit_plan_free(plans[1]);
  dit_graph_destroy(gc), dit_graph_destroy(gg);
}

/* Linear groups over x [1, 8, 16]: a and b (weights [16, 16] and biases) group, then c's
 * weight is wider and d's output is reshaped (a view), so each stays alone, and e and f group
 * again (no biases); g (another x) and h (an activation) never join. The memory plan puts a
 * group's outputs one 512-byte stride apart. */
static void test_group_linears(void) {
  dit_graph_t *g;
  CHECK_OK(dit_graph_create(&g));
  int64_t xs[3] = {1, 8, 16}, ws[2] = {16, 16}, wide[2] = {32, 16}, bs[1] = {16};
  const dit_vid_t x = dit_graph_input(g, "x", DIT_F32, 3, xs), x2 = dit_graph_input(g, "x2", DIT_F32, 3, xs);
  const char *names[] = {"a", "b", "c", "d", "e", "f", "g", "h"};
  dit_vid_t y[8];
  for (int i = 0; i < 8; i++) {
    char wk[16], bk[16];
    snprintf(wk, sizeof wk, "%s.weight", names[i]);
    snprintf(bk, sizeof bk, "%s.bias", names[i]);
    dit_vid_t in[3] = {i == 6 ? x2 : x, dit_graph_weight(g, wk, DIT_F32, 2, i == 2 ? wide : ws), -1};
    const int nb = i < 4 ? 1 : 0;
    if (nb) in[2] = dit_graph_weight(g, bk, DIT_F32, 1, i == 2 ? wide : bs);
    dit_attrs_t at = {0};
    if (i == 7) dit_attrs_set_int(&at, "act", 1);
    y[i] = dit_graph_op(g, DIT_OP_LINEAR, in, 2 + nb, &at, DIT_F32, names[i]);
  }
  dit_attrs_t ra = {0};
  dit_attrs_set_int(&ra, "rank", 2);
  dit_attrs_set_int(&ra, "d0", 8);
  dit_attrs_set_int(&ra, "d1", 16);
  const dit_vid_t view = dit_graph_op(g, DIT_OP_RESHAPE, &y[3], 1, &ra, DIT_F32, "d.view");
  dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_SILU, &y[2], 1, NULL, DIT_F32, "c.act"), "c");
  dit_vid_t sum = y[0];
  for (int i = 1; i < 8; i++) {
    if (i == 2 || i == 3) continue;
    const dit_vid_t two[2] = {sum, y[i]};
    sum = dit_graph_op(g, DIT_OP_ADD, two, 2, NULL, DIT_F32, "sum");
  }
  dit_graph_mark_output(g, sum, "out");
  dit_graph_mark_output(g, view, "view");
  CHECK_OK(dit_graph_verify(g));
  dit_pass_result_t r = {0};
  CHECK_OK(dit_pass_group(g, &r));
  CHECK_EQ_INT(r.grouped_ops, 4);
  static const int size[8] = {2, 2, 0, 0, 2, 2, 0, 0}, at[8] = {0, 1, 0, 0, 0, 1, 0, 0};
  for (int i = 0; i < 8; i++) {
    const dit_op_t *op = dit_graph_cop_at(g, dit_graph_cvalue(g, y[i])->producer);
    const dit_attr_t *n = dit_attrs_find(&op->attrs, "group_size"), *a = dit_attrs_find(&op->attrs, "group_at");
    CHECK_EQ_INT(n ? (int)n->i : 0, size[i]);
    CHECK_EQ_INT(a ? (int)a->i : 0, at[i]);
  }
  CHECK_OK(dit_pass_memplan(g, &r));
  CHECK_OK(dit_graph_verify(g));
  CHECK(dit_graph_cvalue(g, y[1])->offset == dit_graph_cvalue(g, y[0])->offset + 512);
  CHECK(dit_graph_cvalue(g, y[5])->offset == dit_graph_cvalue(g, y[4])->offset + 512);
  dit_graph_destroy(g);
}

/* x -> linear (w, b) -> y -> gelu_tanh -> h: the GELU becomes the linear's epilogue (act 1), y
 * is no longer made; with another reader of y (a silu), y must stay the product itself, so the
 * GELU stays an op of its own. */
static void test_fuse_gelu_linear(void) {
  for (int other = 0; other < 2; other++) {
    dit_graph_t *g;
    CHECK_OK(dit_graph_create(&g));
    const int64_t xd[3] = {1, 6, 16}, wd[2] = {32, 16}, bd[1] = {32};
    dit_vid_t li[3] = {dit_graph_input(g, "x", DIT_F32, 3, xd), dit_graph_weight(g, "w", DIT_F32, 2, wd),
                       dit_graph_weight(g, "b", DIT_F32, 1, bd)};
    dit_vid_t y = dit_graph_op(g, DIT_OP_LINEAR, li, 3, NULL, DIT_F32, "y");
    dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_GELU_TANH, &y, 1, NULL, DIT_F32, "h"), "h");
    if (other) dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_SILU, &y, 1, NULL, DIT_F32, "o"), "o");
    CHECK_OK(dit_graph_verify(g));
    dit_pass_result_t r = {0};
    CHECK_OK(dit_pass_fuse(g, &r));
    CHECK_OK(dit_graph_verify(g));
    int gelus = 0, acts = 0;
    for (int32_t i = 0; i < dit_graph_num_ops(g); i++) {
      const dit_op_t *op = dit_graph_cop_at(g, i);
      gelus += op->kind == DIT_OP_GELU_TANH;
      acts += op->kind == DIT_OP_LINEAR && dit_attrs_find(&op->attrs, "act") != NULL;
    }
    CHECK_EQ_INT(gelus, other);
    CHECK_EQ_INT(acts, 1 - other);
    dit_graph_destroy(g);
  }
}

int main(void) {
  test_groupnorm_lowering();
  test_dce();
  test_memplan_views();
  test_memplan_concat_views();
  test_mmdit_ops_plan();
  test_fuse_norm_rope();
  test_fuse_residual_norm();
  test_fuse_quant_norm();
  test_fuse_act_quant();
  test_fuse_gelu_linear();
  test_fuse_concat_linear();
  test_fuse_add_linear();
  test_memplan_on_wan();
  test_group_linears();
  test_schedule_collectives();
  return check_summary("test_passes");
}
