/* The CPU backend: host memory, and plan steps dispatched to the reference kernels. Steps run
 * synchronously on the caller's thread (the compute queue, 0); the copy queue (1, weight
 * streaming) and the collective queue (2) are threads of their own, so their work overlaps
 * compute as a GPU's copy engine and communication kernels do. Events are shared by the
 * queues. DIT_CPU_COPY_DELAY_US=N delays every queued copy or call by N microseconds: it widens
 * the windows in which a missing dependency between the queues would show, for tests. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "runtime/backend.h"
#include "runtime/cpu/cpu_ops.h"

enum { CQ_COPY, CQ_COPY2D, CQ_CALL, CQ_MARK, CQ_WAIT };

typedef struct cq_item {
  int kind, ev;
  void *dst;
  const void *src;
  size_t bytes, dpitch, spitch, height;
  dit_status_t (*fn)(void *);
  void *arg;
  uint64_t target; /* MARK: the event's new completion count; WAIT: the count to wait for */
} cq_item_t;

/* The state every queue shares, under one lock: events and the first failure of a call. */
typedef struct cq_shared {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t recorded[DIT_BACKEND_MAX_EVENTS], completed[DIT_BACKEND_MAX_EVENTS];
  double when[DIT_BACKEND_MAX_EVENTS]; /* monotonic seconds of each event's latest completion */
  dit_status_t failed;                 /* a queued call's failure, until synchronize reports it */
  unsigned delay_us;
} cq_shared_t;

typedef struct work_queue {
  cq_shared_t *sh;
  pthread_t thread;
  int started, stop;
  cq_item_t *items; /* a ring */
  size_t cap, head, n;
} work_queue_t;

typedef struct cpu_state {
  dit_cpu_t cpu;
  float *scratch; /* fp32 product of a linear with a fused activation */
  size_t scratch_n;
  cq_shared_t sh;
  work_queue_t q[3]; /* [1] copies, [2] collectives; [0] unused (compute is synchronous) */
  uint64_t allocated; /* bytes requested through cpu_alloc (allocated_bytes) */
} cpu_state_t;

static void copy_rows(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height) {
  for (size_t r = 0; r < height; r++) memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

static void *queue_thread(void *arg) {
  work_queue_t *q = arg;
  cq_shared_t *sh = q->sh;
  pthread_mutex_lock(&sh->mu);
  for (;;) {
    while (!q->n && !q->stop) pthread_cond_wait(&sh->cv, &sh->mu);
    if (q->stop) break; /* what is still queued is dropped (quiesce) */
    cq_item_t it = q->items[q->head];
    if (it.kind == CQ_WAIT) {
      while (sh->completed[it.ev] < it.target && !q->stop) pthread_cond_wait(&sh->cv, &sh->mu);
    } else if (it.kind == CQ_MARK) {
      sh->completed[it.ev] = it.target;
      sh->when[it.ev] = dit_now_s();
    } else {
      pthread_mutex_unlock(&sh->mu);
      if (sh->delay_us) usleep(sh->delay_us);
      dit_status_t s = DIT_OK;
      if (it.kind == CQ_COPY) memcpy(it.dst, it.src, it.bytes);
      else if (it.kind == CQ_COPY2D) copy_rows(it.dst, it.dpitch, it.src, it.spitch, it.bytes, it.height);
      else s = it.fn(it.arg);
      pthread_mutex_lock(&sh->mu);
      if (s && !sh->failed) sh->failed = s;
      else dit_status_free(s);
    }
    q->head = (q->head + 1) % q->cap;
    q->n--;
    pthread_cond_broadcast(&sh->cv);
  }
  pthread_mutex_unlock(&sh->mu);
  return NULL;
}

static dit_status_t cq_push(work_queue_t *q, cq_item_t it) {
  cq_shared_t *sh = q->sh;
  pthread_mutex_lock(&sh->mu);
  if (!q->started) {
    if (pthread_create(&q->thread, NULL, queue_thread, q) != 0) {
      pthread_mutex_unlock(&sh->mu);
      return DIT_ERR(RESOURCE_EXHAUSTED, "cpu backend: cannot start a queue thread");
    }
    q->started = 1;
  }
  if (q->n == q->cap) {
    size_t cap = q->cap ? 2 * q->cap : 256;
    cq_item_t *n = malloc(cap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&sh->mu);
      return DIT_ERR(RESOURCE_EXHAUSTED, "cpu backend: queue out of memory");
    }
    for (size_t i = 0; i < q->n; i++) n[i] = q->items[(q->head + i) % q->cap];
    free(q->items);
    q->items = n, q->cap = cap, q->head = 0;
  }
  if (it.kind == CQ_MARK) it.target = ++sh->recorded[it.ev];
  else if (it.kind == CQ_WAIT) it.target = sh->recorded[it.ev];
  q->items[(q->head + q->n++) % q->cap] = it;
  pthread_cond_broadcast(&sh->cv);
  pthread_mutex_unlock(&sh->mu);
  return DIT_OK;
}

static dit_status_t cpu_copy_enqueue(void *state, void *dst, const void *src, size_t bytes, int src_on_device) {
  (void)src_on_device;
  return cq_push(&((cpu_state_t *)state)->q[1], (cq_item_t){.kind = CQ_COPY, .dst = dst, .src = src, .bytes = bytes});
}

static dit_status_t cpu_call(void *state, int queue, dit_status_t (*fn)(void *), void *arg) {
  if (queue != 2) return DIT_ERR(INVALID_ARGUMENT, "cpu backend: calls go on queue 2, not %d", queue);
  return cq_push(&((cpu_state_t *)state)->q[2], (cq_item_t){.kind = CQ_CALL, .fn = fn, .arg = arg});
}

static dit_status_t check_event(int queue, int ev) {
  if (ev < 0 || ev >= DIT_BACKEND_MAX_EVENTS || queue < 0 || queue > 2)
    return DIT_ERR(INVALID_ARGUMENT, "cpu backend: event %d on queue %d", ev, queue);
  return DIT_OK;
}

static dit_status_t cpu_mark(void *state, int queue, int ev) {
  cpu_state_t *st = state;
  cq_shared_t *sh = &st->sh;
  DIT_RETURN_IF(check_event(queue, ev));
  if (queue) return cq_push(&st->q[queue], (cq_item_t){.kind = CQ_MARK, .ev = ev});
  /* Compute is synchronous: everything before this mark has already run. */
  pthread_mutex_lock(&sh->mu);
  sh->completed[ev] = ++sh->recorded[ev];
  sh->when[ev] = dit_now_s();
  pthread_cond_broadcast(&sh->cv);
  pthread_mutex_unlock(&sh->mu);
  return DIT_OK;
}

static dit_status_t cpu_wait(void *state, int queue, int ev) {
  cpu_state_t *st = state;
  cq_shared_t *sh = &st->sh;
  DIT_RETURN_IF(check_event(queue, ev));
  if (queue) return cq_push(&st->q[queue], (cq_item_t){.kind = CQ_WAIT, .ev = ev});
  pthread_mutex_lock(&sh->mu);
  const uint64_t target = sh->recorded[ev];
  while (sh->completed[ev] < target) pthread_cond_wait(&sh->cv, &sh->mu);
  pthread_mutex_unlock(&sh->mu);
  return DIT_OK;
}

static int cpu_query(void *state, int ev) {
  cq_shared_t *sh = &((cpu_state_t *)state)->sh;
  if (ev < 0 || ev >= DIT_BACKEND_MAX_EVENTS) return 0;
  pthread_mutex_lock(&sh->mu);
  const int done = sh->completed[ev] >= sh->recorded[ev];
  pthread_mutex_unlock(&sh->mu);
  return done;
}

static dit_status_t cpu_elapsed_ms(void *state, int a, int b, double *ms) {
  cq_shared_t *sh = &((cpu_state_t *)state)->sh;
  DIT_RETURN_IF(check_event(0, a));
  DIT_RETURN_IF(check_event(0, b));
  pthread_mutex_lock(&sh->mu);
  const int done = sh->completed[a] && sh->completed[b] && sh->completed[a] == sh->recorded[a] && sh->completed[b] == sh->recorded[b];
  *ms = 1e3 * (sh->when[b] - sh->when[a]);
  pthread_mutex_unlock(&sh->mu);
  return done ? DIT_OK : DIT_ERR(FAILED_PRECONDITION, "cpu backend: events %d and %d have not both completed", a, b);
}

static dit_status_t cpu_pin_host(void *state, const void *ptr, size_t bytes, const void **pinned) {
  (void)state, (void)bytes;
  *pinned = ptr; /* host memory is what the copies read already */
  return DIT_OK;
}

static dit_status_t cpu_create(const dit_backend_config_t *cfg, void **out) {
  cpu_state_t *st = calloc(1, sizeof *st);
  if (!st) return DIT_ERR(RESOURCE_EXHAUSTED, "cpu backend: out of memory");
  dit_status_t s = dit_pool_create(cfg ? cfg->threads : 0, &st->cpu.pool);
  if (s) {
    free(st);
    return s;
  }
  pthread_mutex_init(&st->sh.mu, NULL);
  pthread_cond_init(&st->sh.cv, NULL);
  const char *d = getenv("DIT_CPU_COPY_DELAY_US");
  st->sh.delay_us = d ? (unsigned)strtoul(d, NULL, 10) : 0;
  for (int k = 0; k < 3; k++) st->q[k].sh = &st->sh;
  *out = st;
  return DIT_OK;
}

/* Stops the queue threads: the copy or call each is running finishes, what is queued behind it
 * is dropped, and nothing reads or writes backend memory afterwards. */
static void cpu_quiesce(void *state) {
  cpu_state_t *st = state;
  pthread_mutex_lock(&st->sh.mu);
  for (int k = 1; k < 3; k++) st->q[k].stop = 1;
  pthread_cond_broadcast(&st->sh.cv);
  pthread_mutex_unlock(&st->sh.mu);
  for (int k = 1; k < 3; k++)
    if (st->q[k].started) pthread_join(st->q[k].thread, NULL), st->q[k].started = 0;
}

static void cpu_destroy(void *state) {
  cpu_state_t *st = state;
  if (!st) return;
  cpu_quiesce(st);
  for (int k = 1; k < 3; k++) free(st->q[k].items);
  dit_status_free(st->sh.failed);
  pthread_mutex_destroy(&st->sh.mu);
  pthread_cond_destroy(&st->sh.cv);
  dit_pool_destroy(st->cpu.pool);
  free(st->scratch);
  free(st);
}

static dit_status_t cpu_alloc(void *state, size_t bytes, const char *what, void **out) {
  /* 64-byte alignment keeps every row load of the kernels on cache-line boundaries. */
  size_t n = (bytes + 63) / 64 * 64;
  void *p = aligned_alloc(64, n ? n : 64);
  if (!p) return DIT_ERR(RESOURCE_EXHAUSTED, "cpu backend: cannot allocate %zu bytes for %s", bytes, what);
  ((cpu_state_t *)state)->allocated += bytes ? bytes : 1;
  *out = p;
  return DIT_OK;
}

static uint64_t cpu_allocated_bytes(void *state) { return ((cpu_state_t *)state)->allocated; }

static void cpu_release(void *state, void *p) {
  (void)state;
  free(p);
}

static dit_status_t cpu_copy(void *state, void *dst, const void *src, size_t bytes) {
  (void)state;
  memcpy(dst, src, bytes);
  return DIT_OK;
}

static dit_status_t cpu_zero(void *state, void *dst, size_t bytes) {
  (void)state;
  memset(dst, 0, bytes);
  return DIT_OK;
}

static dit_status_t cpu_copy2d(void *state, int queue, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                               size_t height) {
  if (queue == 2)
    return cq_push(&((cpu_state_t *)state)->q[2], (cq_item_t){.kind = CQ_COPY2D, .dst = dst, .dpitch = dpitch, .src = src,
                                                               .spitch = spitch, .bytes = width, .height = height});
  if (queue) return DIT_ERR(INVALID_ARGUMENT, "cpu backend: 2-D copies go on queue 0 or 2, not %d", queue);
  copy_rows(dst, dpitch, src, spitch, width, height);
  return DIT_OK;
}

/* Drains the queues; a queued call's failure comes out here, once. */
static dit_status_t cpu_sync(void *state) {
  cpu_state_t *st = state;
  cq_shared_t *sh = &st->sh;
  pthread_mutex_lock(&sh->mu);
  while (st->q[1].n || st->q[2].n) pthread_cond_wait(&sh->cv, &sh->mu);
  dit_status_t s = sh->failed;
  sh->failed = DIT_OK;
  pthread_mutex_unlock(&sh->mu);
  return s;
}

#define GETI(key, var)                                                        \
  do {                                                                        \
    int64_t v_;                                                               \
    DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, key, &v_));             \
    var = (int)v_;                                                            \
  } while (0)
#define GETF(key, var) DIT_RETURN_IF(dit_attrs_get_float(&st->attrs, name, key, &var))

/* A rope step's folded RMSNorm (base/ops.def) when it has `n_in` inputs, the weight last: norm_eps,
 * and norm_group or the whole row. With fewer inputs the step has none and norm is left unset. */
static dit_status_t rope_norm(const dit_plan_step_t *st, const char *name, const dit_tensor_t *in, int n_in,
                              dit_cpu_rope_norm_t *norm) {
  if (st->n_in != n_in) return DIT_OK;
  const dit_tensor_t *x = &in[0];
  DIT_RETURN_IF(dit_attrs_get_float(&st->attrs, name, "norm_eps", &norm->eps));
  const dit_attr_t *group = dit_attrs_find(&st->attrs, "norm_group");
  norm->w = &in[n_in - 1];
  norm->group = group ? group->i : x->rank >= 1 ? x->dims[x->rank - 1] : 1;
  return DIT_OK;
}

static dit_status_t cpu_run_step(void *state, size_t index, const dit_plan_step_t *st,
                                 const dit_tensor_t *in, dit_tensor_t *out) {
  (void)index;
  dit_cpu_t *c = &((cpu_state_t *)state)->cpu;
  const char *name = dit_op_info(st->kind)->name;
  const int quant = dit_norm_quant(st->kind, &st->attrs);
  if (quant < 0) return DIT_ERR(INVALID_ARGUMENT, "%s: attribute quant must be 0 or 1", name);
  if (quant) {
    /* A folded row quantizer: the norm's rows (and a folded residual's sum) into a temporary of
     * x's dtype, then attn_quant with heads 1 and rows 1 of the rows: exactly the ops it replaces. */
    if (st->n_out < 2 || in[0].rank != 3 || out[0].rank != 3)
      return DIT_ERR(INVALID_ARGUMENT, "%s: a folded row quantizer needs x [B, T, D] and the codes, then the row scales", name);
    dit_plan_step_t part = *st;
    if (dit_attrs_set_int(&part.attrs, "quant", 0)) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: attributes full", name);
    part.n_out = st->n_out - 1;
    dit_tensor_t outs[DIT_PLAN_MAX_OUT];
    for (int k = 0; k < part.n_out; k++) outs[k] = out[k];
    outs[0].dtype = in[0].dtype;
    if (!(outs[0].data = malloc(dit_tensor_nbytes(&outs[0]) + 1))) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory for the rows", name);
    dit_status_t s = cpu_run_step(state, index, &part, in, outs);
    if (!s) s = dit_cpu_attn_quant(c, &outs[0], 1, 1, &out[0], &out[st->n_out - 1]);
    free(outs[0].data);
    return s;
  }
  dit_op_kind_t res_kind;
  const int res_at = dit_norm_residual(st->kind, &st->attrs, st->n_in, &res_kind);
  if (res_at < 0) return DIT_ERR(INVALID_ARGUMENT, "%s: attribute res_at does not fit its %d operands", name, st->n_in);
  if (res_at > 0) {
    /* A folded residual add: the residual into the second output, then the norm of that sum,
     * exactly the two ops it replaces. */
    if (st->n_out != 2) return DIT_ERR(INVALID_ARGUMENT, "%s: a folded residual add has two outputs, found %d", name, st->n_out);
    dit_plan_step_t part = *st;
    dit_tensor_t ops[DIT_PLAN_MAX_IN];
    part.kind = res_kind;
    part.n_in = 1 + st->n_in - res_at;
    part.n_out = 1;
    ops[0] = in[0];
    for (int i = res_at; i < st->n_in; i++) ops[1 + i - res_at] = in[i];
    DIT_RETURN_IF(cpu_run_step(state, index, &part, ops, &out[1]));
    part = *st;
    part.n_in = res_at;
    part.n_out = 1;
    for (int i = 0; i < res_at; i++) ops[i] = i ? in[i] : out[1];
    return cpu_run_step(state, index, &part, ops, &out[0]);
  }
  switch (st->kind) {
    case DIT_OP_PATCHIFY: {
      int pt, ph, pw;
      GETI("pt", pt);
      GETI("ph", ph);
      GETI("pw", pw);
      return dit_cpu_patchify(c, &in[0], pt, ph, pw, &out[0]);
    }
    case DIT_OP_UNPATCHIFY: {
      int pt, ph, pw, f, h, w;
      GETI("pt", pt);
      GETI("ph", ph);
      GETI("pw", pw);
      GETI("f", f);
      GETI("h", h);
      GETI("w", w);
      return dit_cpu_unpatchify(c, &in[0], pt, ph, pw, f, h, w, &out[0]);
    }
    case DIT_OP_LINEAR: {
      int bi, ai;
      if (dit_linear_operands(st->kind, &st->attrs, st->n_in, &bi, &ai))
        return DIT_ERR(INVALID_ARGUMENT, "linear: %d operands do not fit attribute acc", st->n_in);
      const dit_tensor_t *bias = bi >= 0 ? &in[bi] : NULL;
      if (ai >= 0) return dit_cpu_linear_acc(c, &in[0], &in[1], bias, &in[ai], &out[0]);
      if (!dit_attrs_find(&st->attrs, "act")) return dit_cpu_linear(c, &in[0], &in[1], bias, &out[0]);
      int act;
      GETI("act", act);
      if (act != 1) return DIT_ERR(UNIMPLEMENTED, "linear: activation %d (known: 1 = gelu_tanh)", act);
      /* Activate the fp32 product and round once, as a GEMM epilogue does. */
      cpu_state_t *cs = state;
      size_t n = (size_t)dit_tensor_numel(&out[0]);
      if (n > cs->scratch_n) {
        free(cs->scratch);
        cs->scratch_n = 0;
        if (!(cs->scratch = malloc(n * sizeof(float)))) return DIT_ERR(RESOURCE_EXHAUSTED, "linear: out of memory");
        cs->scratch_n = n;
      }
      dit_tensor_t tmp = out[0];
      tmp.data = cs->scratch;
      tmp.dtype = DIT_F32;
      DIT_RETURN_IF(dit_cpu_linear(c, &in[0], &in[1], bias, &tmp));
      return dit_cpu_gelu_tanh(c, &tmp, &out[0]);
    }
    case DIT_OP_LINEAR_FP8: {
      int act = 0;
      if (dit_attrs_find(&st->attrs, "act")) GETI("act", act);
      return dit_cpu_linear_fp8(c, &in[0], &in[1], &in[2], &in[3], st->n_in > 4 ? &in[4] : NULL, act, &out[0]);
    }
    case DIT_OP_TIMESTEP_EMBED: {
      int flip;
      double shift, max_period, scale;
      GETI("flip", flip);
      GETF("shift", shift);
      GETF("max_period", max_period);
      GETF("scale", scale);
      const dit_attr_t *pm = dit_attrs_find(&st->attrs, "premul"), *rd = dit_attrs_find(&st->attrs, "round");
      if (!pm) return dit_cpu_timestep_embed(c, &in[0], flip, shift, max_period, scale, &out[0]);
      /* t * premul as diffusers' `t.to(dtype) * premul`: fp32 arithmetic, with round = 1 each
       * operand and the product rounded to bf16. */
      const int64_t n = dit_tensor_numel(&in[0]);
      float *tv = malloc(sizeof(float) * (size_t)(n ? n : 1));
      if (!tv) return DIT_ERR(RESOURCE_EXHAUSTED, "timestep_embed: out of memory");
      const int bf = rd && rd->i;
      if (dit_convert(tv, DIT_F32, in[0].data, in[0].dtype, (size_t)n)) {
        free(tv);
        return DIT_ERR(INVALID_ARGUMENT, "timestep_embed: t is not a number type");
      }
      for (int64_t i = 0; i < n; i++) {
        float v = tv[i];
        if (bf) v = dit_bf16_to_f32(dit_f32_to_bf16(v));
        v *= (float)pm->f;
        tv[i] = bf ? dit_bf16_to_f32(dit_f32_to_bf16(v)) : v;
      }
      dit_tensor_t t = in[0];
      t.data = tv;
      t.dtype = DIT_F32;
      dit_status_t s = dit_cpu_timestep_embed(c, &t, flip, shift, max_period, scale, &out[0]);
      free(tv);
      return s;
    }
    case DIT_OP_SILU: return dit_cpu_silu(c, &in[0], &out[0]);
    case DIT_OP_GELU_TANH: return dit_cpu_gelu_tanh(c, &in[0], &out[0]);
    case DIT_OP_GELU: return dit_cpu_gelu(c, &in[0], &out[0]);
    case DIT_OP_QUICK_GELU: return dit_cpu_quick_gelu(c, &in[0], &out[0]);
    case DIT_OP_CAST: return dit_cpu_cast(c, &in[0], &out[0]);
    case DIT_OP_ADD: return dit_cpu_add(c, &in[0], &in[1], &out[0]);
    case DIT_OP_MUL: return dit_cpu_mul(c, &in[0], &in[1], &out[0]);
    case DIT_OP_EMBEDDING: return dit_cpu_embedding(c, &in[0], &in[1], &out[0]);
    case DIT_OP_MOD_TABLE: return dit_cpu_mod_table(c, &in[0], &in[1], &out[0]);
    case DIT_OP_LAYERNORM: {
      double eps;
      GETF("eps", eps);
      return dit_cpu_layernorm(c, &in[0], st->n_in > 1 ? &in[1] : NULL, st->n_in > 2 ? &in[2] : NULL, eps, &out[0]);
    }
    case DIT_OP_ADALN: {
      double eps;
      int shift, scale;
      GETF("eps", eps);
      GETI("shift", shift);
      GETI("scale", scale);
      dit_token_group_t tg;
      DIT_RETURN_IF(dit_token_group_get(&st->attrs, name, &tg));
      if (st->n_in == 3) return dit_cpu_adaln_tok(c, &in[0], &in[1], &in[2], tg, eps, shift, scale, &out[0]);
      return dit_cpu_adaln(c, &in[0], &in[1], tg, eps, shift, scale, &out[0]);
    }
    case DIT_OP_RMSNORM: {
      double eps;
      GETF("eps", eps);
      const dit_attr_t *group = dit_attrs_find(&st->attrs, "group");
      if (group) return dit_cpu_rmsnorm_group(c, &in[0], &in[1], group->i, eps, &out[0]);
      return dit_cpu_rmsnorm(c, &in[0], &in[1], eps, &out[0]);
    }
    case DIT_OP_GROUPNORM: {
      int64_t groups;
      double eps;
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "groups", &groups));
      GETF("eps", eps);
      return dit_cpu_groupnorm(c, &in[0], &in[1], &in[2], groups, eps, &out[0]);
    }
    case DIT_OP_GROUPNORM_STATS: {
      int64_t groups, slices;
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "groups", &groups));
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "slices", &slices));
      return dit_cpu_groupnorm_stats(c, &in[0], groups, slices, &out[0]);
    }
    case DIT_OP_GROUPNORM_APPLY: {
      double eps;
      GETF("eps", eps);
      return dit_cpu_groupnorm_apply(c, &in[0], &in[1], &in[2], &in[3], eps, &out[0]);
    }
    case DIT_OP_ROPE: {
      int heads, f, h, w, td, hd, wd;
      double theta;
      GETI("heads", heads);
      GETI("f", f);
      GETI("h", h);
      GETI("w", w);
      GETI("t_dim", td);
      GETI("h_dim", hd);
      GETI("w_dim", wd);
      GETF("theta", theta);
      const dit_attr_t *t0 = dit_attrs_find(&st->attrs, "t0");
      dit_cpu_rope_norm_t norm;
      DIT_RETURN_IF(rope_norm(st, name, in, 2, &norm));
      return dit_cpu_rope_normed(c, &in[0], st->n_in == 2 ? &norm : NULL, heads, f, h, w, td, hd, wd, theta, t0 ? t0->i : 0, &out[0]);
    }
    case DIT_OP_ATTENTION: {
      int heads;
      double scale;
      GETI("heads", heads);
      GETF("scale", scale);
      const dit_attr_t *tiles = dit_attrs_find(&st->attrs, "tiles"), *bias = dit_attrs_find(&st->attrs, "bias");
      if (bias && bias->i == 1)
        return dit_cpu_attention_biased(c, &in[0], &in[1], &in[2], st->n_in > 4 ? &in[3] : NULL, &in[st->n_in - 1], heads, scale,
                                        &out[0], st->n_out > 1 ? &out[1] : NULL);
      const dit_attr_t *causal = dit_attrs_find(&st->attrs, "causal_block");
      if (causal && causal->i)
        return dit_cpu_attention_causal(c, &in[0], &in[1], &in[2], st->n_in > 3 ? &in[3] : NULL, causal->i, heads, scale, &out[0],
                                        st->n_out > 1 ? &out[1] : NULL);
      if (tiles && tiles->i == 1)
        return dit_cpu_attention_tiled(c, &in[0], &in[1], &in[2], &in[st->n_in - 1], heads, scale, &out[0],
                                       st->n_out > 1 ? &out[1] : NULL);
      return dit_cpu_attention_bounded(c, &in[0], &in[1], &in[2], st->n_in > 3 ? &in[3] : NULL, heads, scale, &out[0],
                                       st->n_out > 1 ? &out[1] : NULL);
    }
    case DIT_OP_ATTN_QUANT:
    case DIT_OP_ATTN_QUANT_VT:
    case DIT_OP_ATTN_VMAX: {
      int heads;
      GETI("heads", heads);
      if (st->kind == DIT_OP_ATTN_VMAX) return dit_cpu_attn_vmax(c, &in[0], heads, &out[0]);
      if (st->kind == DIT_OP_ATTN_QUANT_VT) return dit_cpu_attn_quant_vt(c, &in[0], &in[1], heads, &out[0], &out[1]);
      int64_t rows;
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "rows", &rows));
      const dit_attr_t *act = dit_attrs_find(&st->attrs, "act");
      if (act || st->n_in > 1) { /* token rows as act(x + bias) */
        if (heads != 1 || rows != 1)
          return DIT_ERR(INVALID_ARGUMENT, "%s: a bias or act needs heads = 1 and rows = 1, found %d and %lld", name, heads, (long long)rows);
        return dit_cpu_attn_quant_act(c, &in[0], st->n_in > 1 ? &in[1] : NULL, act ? (int)act->i : 0, &out[0], &out[1]);
      }
      return dit_cpu_attn_quant(c, &in[0], heads, rows, &out[0], &out[1]);
    }
    case DIT_OP_ATTENTION_FP8: {
      int heads;
      double scale;
      GETI("heads", heads);
      GETF("scale", scale);
      /* V as e4m3 V^T with its scales, or v itself; then a tile schedule (attr tiles) or a key bound. */
      const int pv8 = st->n_in > 4 && in[4].dtype == DIT_F8E4M3, extra = st->n_in > 4 + (pv8 ? 2 : 1);
      const int tiled = extra && dit_attrs_find(&st->attrs, "tiles") != NULL;
      const dit_attr_t *kt = dit_attrs_find(&st->attrs, "key_tile");
      return dit_cpu_attention_fp8(c, &in[0], &in[1], &in[2], &in[3], &in[4], pv8 ? &in[5] : NULL, tiled ? &in[st->n_in - 1] : NULL,
                                   extra && !tiled ? &in[st->n_in - 1] : NULL, heads, scale, kt ? kt->i : DIT_SPARSE_TILE, &out[0],
                                   st->n_out > 1 ? &out[1] : NULL);
    }
    case DIT_OP_GATED_ADD: {
      int gate;
      GETI("gate", gate);
      dit_token_group_t tg;
      DIT_RETURN_IF(dit_token_group_get(&st->attrs, name, &tg));
      if (st->n_in == 4) return dit_cpu_gated_add_tok(c, &in[0], &in[1], &in[2], &in[3], tg, gate, &out[0]);
      return dit_cpu_gated_add(c, &in[0], &in[1], &in[2], tg, gate, &out[0]);
    }
    case DIT_OP_ROWSUMSQ: return dit_cpu_rowsumsq(c, &in[0], &out[0]);
    case DIT_OP_RMSNORM_SLICE: {
      double eps;
      int64_t dim;
      GETF("eps", eps);
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "dim", &dim));
      return dit_cpu_rmsnorm_slice(c, &in[0], &in[1], &in[2], eps, dim, &out[0]);
    }
    case DIT_OP_TOKEN_ROWS: {
      int64_t group;
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "group", &group));
      return dit_cpu_token_rows(&in[0], group, &out[0]);
    }
    case DIT_OP_SLICE_TOKENS: {
      int64_t t0, count;
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "t0", &t0));
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "count", &count));
      const dit_tensor_t *x = &in[0];
      dit_tensor_t *y = &out[0];
      if (x->rank != 3 || y->rank != 3 || x->dtype != y->dtype || t0 < 0 || count != y->dims[1] || t0 + count > x->dims[1] ||
          y->dims[0] != x->dims[0] || y->dims[2] != x->dims[2])
        return DIT_ERR(INVALID_ARGUMENT, "slice_tokens: operands do not match tokens [%lld, %lld)", (long long)t0,
                       (long long)(t0 + count));
      size_t row = (size_t)x->dims[2] * dit_dtype_size(x->dtype);
      for (int64_t b = 0; b < x->dims[0]; b++)
        memcpy((char *)y->data + (size_t)(b * count) * row, (const char *)x->data + (size_t)(b * x->dims[1] + t0) * row,
               (size_t)count * row);
      return DIT_OK;
    }
    case DIT_OP_RESHAPE: return dit_cpu_reshape(c, &in[0], &out[0]);
    case DIT_OP_KEY_BOUND: {
      int64_t offset;
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "offset", &offset));
      return dit_cpu_key_bound(c, &in[0], offset, &out[0]);
    }
    case DIT_OP_CONCAT: {
      int64_t dim;
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "dim", &dim));
      return dit_cpu_concat(c, &in[0], &in[1], dim, &out[0]);
    }
    case DIT_OP_ROPE_TABLE: {
      int64_t heads;
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "heads", &heads));
      dit_cpu_rope_norm_t norm;
      DIT_RETURN_IF(rope_norm(st, name, in, 3, &norm));
      return dit_cpu_rope_table_normed(c, &in[0], &in[1], st->n_in == 3 ? &norm : NULL, heads, &out[0]);
    }
    case DIT_OP_ATTN_MERGE: {
      int heads;
      GETI("heads", heads);
      return dit_cpu_attn_merge(c, &in[0], &in[1], &in[2], &in[3], heads, &out[0], &out[1]);
    }
    case DIT_OP_STATE_CACHE: /* the executor decides whether it runs; running, it stores the fresh state */
      for (int k = 0; k < 2; k++) {
        if (in[k].dtype != out[k].dtype || dit_tensor_nbytes(&in[k]) != dit_tensor_nbytes(&out[k]))
          return DIT_ERR(INVALID_ARGUMENT, "state_cache: operand %d and its cache differ in dtype or size", k);
        memcpy(out[k].data, in[k].data, dit_tensor_nbytes(&in[k]));
      }
      return DIT_OK;
    case DIT_OP_CONV3D: {
      dit_conv3d_attrs_t ca;
      DIT_RETURN_IF(dit_conv3d_attrs_get(&st->attrs, name, &ca));
      return dit_cpu_conv3d_ex(c, &in[0], &in[1], st->n_in > 2 ? &in[2] : NULL, &ca, &out[0]);
    }
    case DIT_OP_UPSAMPLE: {
      int64_t scale;
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "scale", &scale));
      return dit_cpu_upsample(c, &in[0], scale, &out[0]);
    }
    case DIT_OP_TOKEN_SELECT: {
      int64_t eos;
      DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "eos", &eos));
      return dit_cpu_token_select(c, &in[0], &in[1], eos, &out[0]);
    }
    case DIT_OP_CLAMP: {
      double lo, hi;
      GETF("lo", lo);
      GETF("hi", hi);
      return dit_cpu_clamp(c, &in[0], lo, hi, &out[0]);
    }
    case DIT_OP_RING_SHIFT:
    case DIT_OP_REDUCE_SCATTER:
    case DIT_OP_ALLREDUCE: /* collectives are the executor's, between steps */
    case DIT_OP_ALLGATHER:
    case DIT_OP_ALLTOALL:
    case DIT_OP_COUNT: break;
  }
  return DIT_ERR(UNIMPLEMENTED, "cpu backend: op %s has no kernel", name);
}

static float probe_load(const void *p, dit_dtype_t dt, size_t j) {
  if (dt == DIT_F32) return ((const float *)p)[j];
  const uint16_t h = ((const uint16_t *)p)[j];
  return dt == DIT_BF16 ? dit_bf16_to_f32(h) : dit_f16_to_f32(h);
}

/* r rounded to dt, and stored there when dst is not NULL. */
static float probe_round(float r, dit_dtype_t dt, void *dst, size_t j) {
  if (dt == DIT_F32) {
    if (dst) ((float *)dst)[j] = r;
    return r;
  }
  const uint16_t h = dt == DIT_BF16 ? dit_f32_to_bf16(r) : dit_f32_to_f16(r);
  if (dst) ((uint16_t *)dst)[j] = h;
  return dt == DIT_BF16 ? dit_bf16_to_f32(h) : dit_f16_to_f32(h);
}

/* The sums in fp32 over runs of kProbeRun elements (a GPU thread's share at a typical size), the
 * runs added in double, as the device kernels accumulate. */
enum { kProbeRun = 4096 };

static dit_status_t cpu_probe_change(void *state, const void *x, const void *base, void *prev, dit_dtype_t dt, size_t n,
                                     int update_prev, double sums[2]) {
  (void)state;
  if (dt != DIT_F32 && dt != DIT_BF16 && dt != DIT_F16)
    return DIT_ERR(INVALID_ARGUMENT, "probe: expected a value of dtype f32, bf16 or f16, found %s", dit_dtype_name(dt));
  sums[0] = sums[1] = 0;
  for (size_t lo = 0; lo < n; lo += kProbeRun) {
    const size_t hi = n - lo < kProbeRun ? n : lo + kProbeRun;
    float d = 0, m = 0;
    for (size_t j = lo; j < hi; j++) {
      const float r = probe_round(probe_load(x, dt, j) - (base ? probe_load(base, dt, j) : 0.0f), dt, NULL, 0);
      const float p = probe_load(prev, dt, j);
      d += fabsf(r - p);
      m += fabsf(p);
      if (update_prev) probe_round(r, dt, prev, j);
    }
    sums[0] += d, sums[1] += m;
  }
  return DIT_OK;
}

static dit_status_t cpu_sum_sq_diff(void *state, const void *x, dit_dtype_t dt, void *ref, dit_dtype_t ref_dt, size_t n, int update_ref,
                                    double sums[2]) {
  (void)state;
  if (dt != DIT_F32 && dt != DIT_BF16 && dt != DIT_F16)
    return DIT_ERR(INVALID_ARGUMENT, "sum_sq_diff: expected x of dtype f32, bf16 or f16, found %s", dit_dtype_name(dt));
  if (ref && ref_dt != DIT_F32 && ref_dt != dt)
    return DIT_ERR(INVALID_ARGUMENT, "sum_sq_diff: expected a reference of dtype f32 or %s (x's), found %s", dit_dtype_name(dt),
                   dit_dtype_name(ref_dt));
  double diff = 0, norm = 0;
  for (size_t j = 0; j < n; j++) {
    const double v = probe_load(x, dt, j), d = v - (ref ? probe_load(ref, ref_dt, j) : 0.0);
    diff += d * d, norm += v * v;
    if (ref && update_ref) probe_round((float)v, ref_dt, ref, j); /* exact: v is a value of dt */
  }
  sums[0] = diff, sums[1] = norm;
  return DIT_OK;
}

static const dit_backend_vtable_t kCpuBackend = {
    .abi_version = DIT_BACKEND_ABI_VERSION,
    .name = "cpu",
    .host_memory = 1,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .quiesce = cpu_quiesce,
    .alloc = cpu_alloc,
    .allocated_bytes = cpu_allocated_bytes,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .copy2d = cpu_copy2d,
    .run_step = cpu_run_step,
    .synchronize = cpu_sync,
    .copy_enqueue = cpu_copy_enqueue,
    .mark = cpu_mark,
    .wait = cpu_wait,
    .pin_host = cpu_pin_host,
    .elapsed_ms = cpu_elapsed_ms,
    .call = cpu_call,
    .query = cpu_query,
    .probe_change = cpu_probe_change,
    .sum_sq_diff = cpu_sum_sq_diff,
};

const dit_backend_vtable_t *dit_backend_cpu(void) { return &kCpuBackend; }
