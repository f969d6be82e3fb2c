/* Attention-state reuse in the executor (runtime/ditango.h has the design): which plan steps a
 * step's decisions skip, which copy of the state cache a forward uses, and the statistics the
 * planner reads (the local groups' drift from their anchor copies, and at anchors the state norms
 * and the LSE weights), summed over the ranks in rank order: the ranks of this process, or with one
 * rank per process every rank's numbers gathered over the processes' collectives and summed in the
 * same order, so every process and the one-process run get the same bits and take the same
 * decisions. The sums over a state run where it lies (the backend's sum_sq_diff: the drift against
 * an fp32 anchor copy allocated in backend memory, the norms, the measured errors); the LSE rows
 * (heads x tokens floats per group, at anchor layers only) are downloaded and weighted here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ditango.h"
#include "runtime/exec_internal.h"

struct dit_reuse_rank {
  int32_t *slot_of;    /* per plan step: its reuse_slot, -1 none */
  int32_t *local_of;   /* per plan step: the layer whose local state it makes, -1 none */
  size_t *cache_step;  /* per slot: its state_cache step */
  size_t *local_step;  /* per layer: the step making its local state */
  void **anchor;       /* per layer and copy: OUT_loc at the layer's last anchor, fp32 in backend memory (zeros: none yet) */
  uint64_t anchor_bytes; /* their sum, allocated through the backend */
  float **lse;         /* per layer: this forward's local LSE, downloaded at anchors for the weights */
  float *cache_lse;    /* the remote groups' LSEs of one layer, downloaded at its anchor */
  double *drift_sq, *local_sq, *rows; /* per layer */
  double *group_sq, *wsum, *err_num, *err_den; /* per slot */
};

struct dit_reuse {
  int layers, groups, copies, slots;
  uint64_t region;     /* bytes of one copy of the caches: [0, region) of the arena */
  int active;          /* between dit_runtime_reuse_begin and _end */
  int diagnostic, branch, forwards;
  uint8_t *compute, *anchor;
};

void dit_reuse_rank_free(rank_rt_t *rt) {
  struct dit_reuse_rank *r = rt->reuse;
  if (!r) return;
  const int layers = rt->owner->reuse ? rt->owner->reuse->layers : 0, copies = rt->owner->reuse ? rt->owner->reuse->copies : 0;
  for (int i = 0; r->anchor && i < layers * copies; i++)
    if (r->anchor[i]) rt->be->release(rt->be_state, r->anchor[i]);
  for (int i = 0; r->lse && i < layers; i++) free(r->lse[i]);
  free(r->slot_of), free(r->local_of), free(r->cache_step), free(r->local_step), free(r->anchor), free(r->lse), free(r->cache_lse);
  free(r->drift_sq), free(r->local_sq), free(r->rows), free(r->group_sq), free(r->wsum), free(r->err_num), free(r->err_den);
  free(r);
  rt->reuse = NULL;
}

void dit_reuse_free(dit_runtime_t *rt) {
  if (!rt->reuse) return;
  for (int e = 0; e < rt->n_experts; e++)
    for (int i = 0; rt->expert_ranks[e] && i < rt->n_ranks; i++) dit_reuse_rank_free(&rt->expert_ranks[e][i]);
  free(rt->reuse->compute), free(rt->reuse->anchor);
  free(rt->reuse);
  rt->reuse = NULL;
}

void dit_runtime_reuse_shape(const dit_runtime_t *rt, int *layers, int *groups) {
  const dit_manifest_t *m = rt->m;
  *layers = m->topology.reuse_group ? m->topology.reuse_layers : 0;
  /* The planner's groups are the cached states per layer: ceil(remote groups / merge), the groups
   * partitioning the cp / U ring members (U = 1 under ring). */
  const int u = m->topology.reuse_ulysses > 1 ? m->topology.reuse_ulysses : 1;
  const int remote = m->topology.reuse_group ? m->topology.cp / u / m->topology.reuse_group - 1 : 0, k = m->topology.reuse_merge;
  *groups = remote ? (remote - 1) / (k > 1 ? k : 1) + 1 : 0;
}

/* The rank's step tags, checked against the manifest's reuse section. */
static dit_status_t rank_setup(rank_rt_t *rt, struct dit_reuse *g) {
  const dit_plan_t *p = rt->plan;
  struct dit_reuse_rank *r = calloc(1, sizeof *r);
  if (!r) return DIT_ERR(RESOURCE_EXHAUSTED, "reuse: out of memory");
  rt->reuse = r;
  const size_t L = (size_t)g->layers, S = (size_t)g->slots;
  r->slot_of = malloc(p->n_steps * sizeof *r->slot_of), r->local_of = malloc(p->n_steps * sizeof *r->local_of);
  r->cache_step = calloc(S, sizeof *r->cache_step), r->local_step = calloc(L, sizeof *r->local_step);
  r->anchor = calloc(L * (size_t)g->copies, sizeof *r->anchor), r->lse = calloc(L, sizeof *r->lse);
  r->drift_sq = calloc(L, sizeof(double)), r->local_sq = calloc(L, sizeof(double)), r->rows = calloc(L, sizeof(double));
  r->group_sq = calloc(S, sizeof(double)), r->wsum = calloc(S, sizeof(double));
  r->err_num = calloc(S, sizeof(double)), r->err_den = calloc(S, sizeof(double));
  if (!r->slot_of || !r->local_of || !r->cache_step || !r->local_step || !r->anchor || !r->lse || !r->drift_sq || !r->local_sq ||
      !r->rows || !r->group_sq || !r->wsum || !r->err_num || !r->err_den)
    return DIT_ERR(RESOURCE_EXHAUSTED, "reuse: out of memory");
  int caches = 0, locals = 0;
  for (size_t i = 0; i < p->n_steps; i++) {
    const dit_plan_step_t *st = &p->steps[i];
    const dit_attr_t *sa = dit_attrs_find(&st->attrs, "reuse_slot"), *la = dit_attrs_find(&st->attrs, "reuse_local");
    r->slot_of[i] = sa ? (int32_t)sa->i : -1;
    r->local_of[i] = la ? (int32_t)la->i : -1;
    if ((sa && (sa->i < 0 || sa->i >= g->slots)) || (la && (la->i < 0 || la->i >= g->layers)))
      return DIT_ERR(INVALID_ARGUMENT, "reuse: plan step %zu: slot or layer tag outside the manifest's %d layers x %d groups", i, g->layers,
                     g->groups);
    if (la) r->local_step[la->i] = i, locals++;
    if (st->kind == DIT_OP_STATE_CACHE) {
      if (!sa) return DIT_ERR(INVALID_ARGUMENT, "reuse: plan step %zu: a state_cache without a reuse_slot", i);
      r->cache_step[sa->i] = i, caches++;
      for (int k = 0; k < 2; k++) {
        const dit_plan_value_t *v = &p->values[st->out[k]];
        if (v->storage != DIT_STORAGE_ARENA || v->offset + v->nbytes > g->region)
          return DIT_ERR(INVALID_ARGUMENT, "reuse: plan step %zu: cache '%s' is not inside the arena's cache region of %llu bytes", i,
                         v->name, (unsigned long long)g->region);
      }
    }
  }
  if (caches != g->slots || locals != g->layers)
    return DIT_ERR(INVALID_ARGUMENT, "reuse: the plan has %d state caches and %d local states, the manifest says %d and %d", caches,
                   locals, g->slots, g->layers);
  if (p->arena_bytes < g->region * (uint64_t)g->copies)
    return DIT_ERR(INVALID_ARGUMENT, "reuse: arena of %llu bytes, the %d cache copies need %llu", (unsigned long long)p->arena_bytes,
                   g->copies, (unsigned long long)(g->region * (uint64_t)g->copies));
  /* The anchor copies (zeros until the layer's first anchor: the drift before it is not read) and
   * the host rows of the LSEs. */
  size_t rows = 0;
  for (size_t l = 0; l < L; l++) {
    const dit_plan_step_t *st = &p->steps[r->local_step[l]];
    const size_t bytes = (size_t)dit_tensor_numel(&rt->bound[st->out[0]]) * sizeof(float);
    const size_t nl = (size_t)dit_tensor_numel(&rt->bound[st->out[1]]);
    for (int c = 0; c < g->copies; c++) {
      void **a = &r->anchor[l * (size_t)g->copies + (size_t)c];
      DIT_RETURN_IF_ERROR(rt->be->alloc(rt->be_state, bytes, "a reuse anchor copy", a), "reuse: layer %zu's anchor copy", l);
      r->anchor_bytes += bytes;
      DIT_RETURN_IF(rt->be->zero(rt->be_state, *a, bytes));
    }
    if (!(r->lse[l] = malloc(nl * sizeof(float)))) return DIT_ERR(RESOURCE_EXHAUSTED, "reuse: out of memory");
    if (nl > rows) rows = nl;
  }
  for (int s = 0; s < g->slots; s++) {
    const size_t nl = (size_t)dit_tensor_numel(&rt->bound[p->steps[r->cache_step[s]].out[1]]);
    if (nl > rows) rows = nl;
  }
  if (!(r->cache_lse = malloc((size_t)g->groups * rows * sizeof(float)))) return DIT_ERR(RESOURCE_EXHAUSTED, "reuse: out of memory");
  return DIT_OK;
}

/* The caches' region: they sit at the bottom of the arena, each rounded to the arena alignment. */
static uint64_t cache_region(const dit_plan_t *p) {
  uint64_t end = 0;
  for (size_t i = 0; i < p->n_steps; i++) {
    if (p->steps[i].kind != DIT_OP_STATE_CACHE) continue;
    for (int k = 0; k < 2; k++) {
      const dit_plan_value_t *v = &p->values[p->steps[i].out[k]];
      const uint64_t e = (v->offset + (v->nbytes ? v->nbytes : 1) + 255) / 256 * 256;
      if (e > end) end = e;
    }
  }
  return end;
}

static dit_status_t setup(dit_runtime_t *rt) {
  int layers, groups;
  dit_runtime_reuse_shape(rt, &layers, &groups);
  if (!layers) return DIT_ERR(INVALID_ARGUMENT, "reuse: the bundle was compiled without --reuse ditango");
  if (rt->n_experts > 1) return DIT_ERR(UNIMPLEMENTED, "reuse: a two-expert bundle (the experts share one arena)");
  for (int i = 0; i < rt->n_ranks; i++) {
    if (!rt->ranks[i].be->sum_sq_diff)
      return DIT_ERR(UNIMPLEMENTED, "reuse: the %s backend has no sum_sq_diff operation (the drift, norms and errors the planner reads)",
                     rt->ranks[i].be->name);
    /* A replayed forward cannot leave out a reused group's steps: refused under --cuda-graph, a
     * graph the runtime chose itself is dropped. */
    DIT_RETURN_IF(dit_exec_graph_resolve(&rt->ranks[i], 1));
  }
  struct dit_reuse *g = calloc(1, sizeof *g);
  if (!g) return DIT_ERR(RESOURCE_EXHAUSTED, "reuse: out of memory");
  rt->reuse = g;
  g->layers = layers, g->groups = groups, g->slots = layers * groups, g->copies = rt->m->topology.reuse_copies;
  g->region = cache_region(rt->ranks[0].plan);
  g->compute = calloc((size_t)g->slots, 1), g->anchor = calloc((size_t)layers, 1);
  if (!g->compute || !g->anchor) return DIT_ERR(RESOURCE_EXHAUSTED, "reuse: out of memory");
  for (int i = 0; i < rt->n_ranks; i++) {
    if (cache_region(rt->ranks[i].plan) != g->region)
      return DIT_ERR(INVALID_ARGUMENT, "reuse: rank %d's cache region differs from rank 0's", rt->ranks[i].rank);
    DIT_RETURN_IF(rank_setup(&rt->ranks[i], g));
  }
  return DIT_OK;
}

dit_status_t dit_runtime_reuse_begin(dit_runtime_t *rt, const uint8_t *compute, const uint8_t *anchor, int diagnostic) {
  if (!rt->reuse) {
    dit_status_t s = setup(rt);
    if (s) {
      dit_reuse_free(rt);
      return s;
    }
  }
  struct dit_reuse *g = rt->reuse;
  memcpy(g->compute, compute, (size_t)g->slots);
  memcpy(g->anchor, anchor, (size_t)g->layers);
  g->diagnostic = diagnostic, g->forwards = 0, g->active = 1;
  for (int i = 0; i < rt->n_ranks; i++) {
    struct dit_reuse_rank *r = rt->ranks[i].reuse;
    const size_t L = (size_t)g->layers, S = (size_t)g->slots;
    memset(r->drift_sq, 0, L * sizeof(double)), memset(r->local_sq, 0, L * sizeof(double)), memset(r->rows, 0, L * sizeof(double));
    memset(r->group_sq, 0, S * sizeof(double)), memset(r->wsum, 0, S * sizeof(double));
    memset(r->err_num, 0, S * sizeof(double)), memset(r->err_den, 0, S * sizeof(double));
  }
  return DIT_OK;
}

/* Before a forward: this branch's copy of the caches. */
void dit_reuse_forward_begin(rank_rt_t *rt) {
  const struct dit_reuse *g = rt->owner->reuse;
  if (!g || !g->active) return;
  const int branch = g->forwards % g->copies;
  for (int s = 0; s < g->slots; s++) {
    const dit_plan_step_t *st = &rt->plan->steps[rt->reuse->cache_step[s]];
    for (int k = 0; k < 2; k++)
      rt->bound[st->out[k]].data = (uint8_t *)rt->arena + rt->plan->values[st->out[k]].offset + (uint64_t)branch * g->region;
  }
}

/* Whether plan step i runs: a reused slot's steps do not (in diagnostic mode all but the cache
 * write, where the fresh state's distance from the cached one is measured instead). */
dit_status_t dit_reuse_skip(rank_rt_t *rt, size_t i, int *skip) {
  *skip = 0;
  const struct dit_reuse *g = rt->owner->reuse;
  if (!g || !g->active) return DIT_OK;
  const int32_t slot = rt->reuse->slot_of[i];
  if (slot < 0 || g->compute[slot]) return DIT_OK;
  const dit_plan_step_t *st = &rt->plan->steps[i];
  if (g->diagnostic && st->kind != DIT_OP_STATE_CACHE) return DIT_OK;
  *skip = 1;
  if (!g->diagnostic) return DIT_OK;
  const dit_tensor_t *fresh = &rt->bound[st->in[0]], *cached = &rt->bound[st->out[0]];
  double sums[2];
  DIT_RETURN_IF_ERROR(rt->be->sum_sq_diff(rt->be_state, fresh->data, fresh->dtype, cached->data, cached->dtype,
                                          (size_t)dit_tensor_numel(fresh), 0, sums),
                      "reuse: slot %d's measured error", (int)slot);
  rt->reuse->err_num[slot] += sums[0], rt->reuse->err_den[slot] += sums[1];
  return DIT_OK;
}

/* After plan step i ran: the local state's drift (and at an anchor its new copy), or a fresh cache's norm. */
dit_status_t dit_reuse_after_step(rank_rt_t *rt, size_t i) {
  struct dit_reuse *g = rt->owner->reuse;
  if (!g || !g->active) return DIT_OK;
  struct dit_reuse_rank *r = rt->reuse;
  const dit_plan_step_t *st = &rt->plan->steps[i];
  const int32_t layer = r->local_of[i];
  if (layer >= 0) {
    const dit_tensor_t *o = &rt->bound[st->out[0]], *lse = &rt->bound[st->out[1]];
    void *a = r->anchor[(size_t)layer * (size_t)g->copies + (size_t)(g->forwards % g->copies)];
    double sums[2]; /* the drift from the copy in effect, then at an anchor the copy refreshed */
    DIT_RETURN_IF_ERROR(rt->be->sum_sq_diff(rt->be_state, o->data, o->dtype, a, DIT_F32, (size_t)dit_tensor_numel(o), g->anchor[layer],
                                            sums),
                        "reuse: layer %d's local drift", (int)layer);
    r->drift_sq[layer] += sums[0];
    if (g->anchor[layer]) {
      r->local_sq[layer] += sums[1];
      DIT_RETURN_IF_ERROR(rt->be->download(rt->be_state, r->lse[layer], lse->data, (size_t)dit_tensor_numel(lse) * sizeof(float)),
                          "reuse: layer %d's local LSE", (int)layer);
    }
  }
  const int32_t slot = st->kind == DIT_OP_STATE_CACHE ? r->slot_of[i] : -1;
  if (slot >= 0 && g->anchor[slot / g->groups]) {
    const dit_tensor_t *o = &rt->bound[st->out[0]];
    double sums[2];
    DIT_RETURN_IF_ERROR(rt->be->sum_sq_diff(rt->be_state, o->data, o->dtype, NULL, DIT_F32, (size_t)dit_tensor_numel(o), 0, sums),
                        "reuse: slot %d's norm", (int)slot);
    r->group_sq[slot] += sums[1];
  }
  return DIT_OK;
}

/* After a forward: at anchor layers, every group's share of the softmax mass per (batch, head,
 * query) row, w = e^LSE_G / (e^LSE_loc + sum e^LSE_G'), summed over the rows. */
dit_status_t dit_reuse_forward_end(rank_rt_t *rt) {
  const struct dit_reuse *g = rt->owner->reuse;
  if (!g || !g->active) return DIT_OK;
  struct dit_reuse_rank *r = rt->reuse;
  const int G = g->groups;
  for (int l = 0; l < g->layers; l++) {
    if (!g->anchor[l]) continue;
    /* Every group's LSE has the local state's rows (the merges take them side by side). */
    const size_t rows = (size_t)dit_tensor_numel(&rt->bound[rt->plan->steps[r->local_step[l]].out[1]]);
    for (int k = 0; k < G; k++) {
      const dit_tensor_t *t = &rt->bound[rt->plan->steps[r->cache_step[l * G + k]].out[1]];
      if ((size_t)dit_tensor_numel(t) != rows)
        return DIT_ERR(INVALID_ARGUMENT, "reuse: layer %d group %d: an LSE of %lld rows, the local state's has %zu", l, k,
                       (long long)dit_tensor_numel(t), rows);
      DIT_RETURN_IF_ERROR(rt->be->download(rt->be_state, r->cache_lse + (size_t)k * rows, t->data, rows * sizeof(float)),
                          "reuse: layer %d group %d's LSE", l, k);
    }
    const float *lse = r->lse[l], *cl = r->cache_lse;
    for (size_t j = 0; j < rows; j++) {
      double m = lse[j], den = 0;
      for (int k = 0; k < G; k++) m = cl[(size_t)k * rows + j] > m ? cl[(size_t)k * rows + j] : m;
      if (!isfinite(m)) continue; /* a row with no keys at all */
      den = exp(lse[j] - m);
      for (int k = 0; k < G; k++) den += exp(cl[(size_t)k * rows + j] - m);
      for (int k = 0; k < G; k++) r->wsum[l * G + k] += exp(cl[(size_t)k * rows + j] - m) / den;
    }
    r->rows[l] += (double)rows;
  }
  return DIT_OK;
}

uint64_t dit_reuse_rank_bytes(const rank_rt_t *rt) { return rt->reuse ? rt->reuse->anchor_bytes : 0; }

uint64_t dit_runtime_reuse_bytes(const dit_runtime_t *rt) {
  uint64_t most = 0;
  for (int i = 0; rt->reuse && i < rt->n_ranks; i++)
    if (dit_reuse_rank_bytes(&rt->ranks[i]) > most) most = dit_reuse_rank_bytes(&rt->ranks[i]);
  return most;
}

void dit_reuse_forward_done(dit_runtime_t *rt) {
  if (rt->reuse && rt->reuse->active) rt->reuse->forwards++;
}

/* A rank's statistics as one row of doubles: per layer drift^2, ||OUT_loc||^2 and rows, then per
 * slot ||OUT_G||^2, the weights' sum and the measured error's numerator and denominator. */
static size_t row_len(const struct dit_reuse *g) { return 3 * (size_t)g->layers + 4 * (size_t)g->slots; }

static void pack_row(const struct dit_reuse *g, const struct dit_reuse_rank *r, double *row) {
  const size_t L = (size_t)g->layers, S = (size_t)g->slots;
  const double *parts[7] = {r->drift_sq, r->local_sq, r->rows, r->group_sq, r->wsum, r->err_num, r->err_den};
  for (int k = 0; k < 7; k++) {
    const size_t n = k < 3 ? L : S;
    memcpy(row, parts[k], n * sizeof(double));
    row += n;
  }
}

/* Entry `at` of the rows summed over the ranks in rank order: the same sum whatever the threads or
 * processes did. */
static double rank_sum(const double *rows, int n, size_t len, size_t at) {
  double acc = 0;
  for (int i = 0; i < n; i++) acc += rows[(size_t)i * len + at];
  return acc;
}

/* Every rank's row, in rank order: this process's ranks, or gathered from every process. */
static dit_status_t gather_rows(dit_runtime_t *rt, double **out, int *n) {
  const struct dit_reuse *g = rt->reuse;
  const size_t len = row_len(g);
  const int world = rt->process ? rt->m->topology.world : rt->n_ranks;
  double *rows = malloc((size_t)world * len * sizeof *rows);
  if (!rows) return DIT_ERR(RESOURCE_EXHAUSTED, "reuse: out of memory for %d ranks' statistics", world);
  *out = rows, *n = world;
  if (!rt->process) {
    for (int i = 0; i < rt->n_ranks; i++) pack_row(g, rt->ranks[i].reuse, rows + (size_t)i * len);
    return DIT_OK;
  }
  double *mine = malloc(len * sizeof *mine);
  int *group = malloc((size_t)world * sizeof *group);
  dit_status_t s = mine && group ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "reuse: out of memory for the statistics");
  for (int i = 0; !s && i < world; i++) group[i] = i;
  if (!s) pack_row(g, rt->ranks[0].reuse, mine);
  if (!s) s = dit_status_annotate(dit_tcomm_allgather(rt->tcomm, group, world, mine, len * sizeof *mine, rows),
                                  "reuse: gathering the ranks' statistics");
  free(mine), free(group);
  if (s) free(rows), *out = NULL;
  return s;
}

dit_status_t dit_runtime_reuse_end(dit_runtime_t *rt, dit_reuse_stats_t *out) {
  struct dit_reuse *g = rt->reuse;
  if (!g || !g->active) return DIT_ERR(INVALID_ARGUMENT, "reuse: dit_runtime_reuse_end without dit_runtime_reuse_begin");
  g->active = 0;
  double *rows = NULL;
  int n = 0;
  DIT_RETURN_IF(gather_rows(rt, &rows, &n));
  const size_t len = row_len(g), L = (size_t)g->layers, S = (size_t)g->slots;
#define SUM(base, j) rank_sum(rows, n, len, (base) + (j))
  for (size_t l = 0; l < L; l++) {
    const double drift = SUM(0, l), local = SUM(L, l), nrows = SUM(2 * L, l);
    out->drift[l] = sqrt(drift); /* from the copy in effect when the forward ran (at an anchor, the previous one) */
    out->local_norm[l] = sqrt(local);
    for (size_t k = 0; k < (size_t)g->groups; k++) {
      const size_t s = l * (size_t)g->groups + k;
      const double sq = SUM(3 * L, s), w = SUM(3 * L + S, s), num = SUM(3 * L + 2 * S, s), den = SUM(3 * L + 3 * S, s);
      out->group_norm[s] = sqrt(sq);
      out->group_weight[s] = nrows > 0 ? w / nrows : 0;
      out->error[s] = g->diagnostic && !g->compute[s] ? (den > 0 ? sqrt(num / den) : 0) : NAN;
    }
  }
#undef SUM
  free(rows);
  return DIT_OK;
}
