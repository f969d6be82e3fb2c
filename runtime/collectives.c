/* Collective steps (lay out, one communicator call, lay out again) on any backend, and the
 * NCCL communicators of GPU ranks. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "artifacts/plan_memory.h"
#include "runtime/exec_internal.h"

/* ---- collectives ----
 * Every collective is: lay out the data the communicator sends (2-D copies on the backend's
 * compute queue, or its collective queue when collectives overlap compute), one communicator
 * call on contiguous buffers in backend memory, lay out what it received. The copies are the
 * backend's, so the same code runs on host and device memory; only the communicator call is
 * staged through host memory when the backend's memory is not the host's and there is no NCCL
 * (or when asked to, which checks that path on the CPU). */

typedef enum { COMM_ALLREDUCE, COMM_ALLGATHER, COMM_ALLTOALL, COMM_SHIFT } comm_kind_t;

static dit_status_t nccl_call(rank_rt_t *rt, int group, int me, comm_kind_t kind, void *send, void *recv, size_t bytes, dit_dtype_t dtype,
                              int distance);

/* Runs one communicator call on backend-memory buffers: recv = f(send). For ALLREDUCE, send
 * is recv (in place, `bytes` of dtype); ALLGATHER takes `bytes` and gives n * bytes; ALLTOALL
 * exchanges n chunks of `bytes`; SHIFT sends `bytes` to the member `distance` places on and
 * receives `bytes` from the one `distance` places back (send and recv apart). */
static dit_status_t host_call(rank_rt_t *rt, dit_comm_t *comm, comm_kind_t kind, const int *members, int n, void *send, void *recv,
                              size_t bytes, dit_dtype_t dtype, int distance);

/* One communicator call's arguments, kept for the collective queue that runs it later. */
typedef struct coll_job {
  rank_rt_t *rt;
  dit_comm_t *comm;
  comm_kind_t kind;
  int members[64], n;
  void *send, *recv;
  size_t bytes;
  dit_dtype_t dtype;
  int distance;
} coll_job_t;

static dit_status_t run_job(void *p) {
  coll_job_t *j = p;
  return host_call(j->rt, j->comm, j->kind, j->members, j->n, j->send, j->recv, j->bytes, j->dtype, j->distance);
}

static dit_status_t comm_call(rank_rt_t *rt, dit_comm_t *comm, int group, comm_kind_t kind, const int *members, int n, void *send,
                              void *recv, size_t bytes, dit_dtype_t dtype, int distance) {
  if (rt->owner->nccl && n > 1) {
    int me = 0;
    while (me < n && members[me] != rt->rank) me++;
    return nccl_call(rt, group, me, kind, send, recv, bytes, dtype, distance);
  }
  if (rt->coll_queue && n > 1) {
    /* Overlapped (host-memory backends): the call runs on the collective queue, after the
     * copies enqueued there before it. One job per collective step of the plan. */
    coll_job_t *j = &rt->coll_jobs[rt->coll_step];
    *j = (coll_job_t){rt, comm, kind, {0}, n, send, recv, bytes, dtype, distance};
    memcpy(j->members, members, sizeof(int) * (size_t)n);
    return rt->be->call(rt->be_state, rt->coll_queue, run_job, j);
  }
  return host_call(rt, comm, kind, members, n, send, recv, bytes, dtype, distance);
}

/* The communicator call on the calling thread (staged through host memory where needed). */
static dit_status_t host_call(rank_rt_t *rt, dit_comm_t *comm, comm_kind_t kind, const int *members, int n, void *send, void *recv,
                              size_t bytes, dit_dtype_t dtype, int distance) {
  const size_t in = kind == COMM_ALLTOALL ? (size_t)n * bytes : bytes;
  const size_t out = kind == COMM_ALLREDUCE || kind == COMM_SHIFT ? bytes : (size_t)n * bytes;
  const int staged = !rt->be->host_memory || rt->stage;
  void *hs = send, *hr = recv;
  if (staged) {
    if (rt->stage_cap < in + out) {
      char *nb = realloc(rt->stage_buf, in + out);
      if (!nb) return DIT_ERR(RESOURCE_EXHAUSTED, "collective: out of host memory staging %zu bytes", in + out);
      rt->stage_buf = nb;
      rt->stage_cap = in + out;
    }
    hs = rt->stage_buf;
    hr = kind == COMM_ALLREDUCE ? hs : rt->stage_buf + in;
    DIT_RETURN_IF(rt->be->download(rt->be_state, hs, send, in));
  }
  dit_status_t s = DIT_OK;
  if (n == 1 || (!comm && !rt->tcomm)) { /* a group of one */
    if (hr != hs) memcpy(hr, hs, in);
  } else if (rt->tcomm) {
    s = kind == COMM_ALLREDUCE   ? dit_tcomm_allreduce_sum(rt->tcomm, members, n, hr, bytes / dit_dtype_size(dtype), dtype)
        : kind == COMM_ALLGATHER ? dit_tcomm_allgather(rt->tcomm, members, n, hs, bytes, hr)
        : kind == COMM_SHIFT     ? dit_tcomm_shift(rt->tcomm, members, n, distance, hs, hr, bytes)
                                 : dit_tcomm_alltoall(rt->tcomm, members, n, hs, hr, bytes);
  } else if (kind == COMM_ALLREDUCE) {
    s = dit_comm_allreduce_sum(comm, rt->rank, members, n, hr, bytes / dit_dtype_size(dtype), dtype);
  } else if (kind == COMM_ALLGATHER) {
    s = dit_comm_allgather(comm, rt->rank, members, n, hs, bytes, hr);
  } else if (kind == COMM_SHIFT) {
    s = dit_comm_shift(comm, rt->rank, members, n, distance, hs, hr, bytes);
  } else {
    s = dit_comm_alltoall(comm, rt->rank, members, n, hs, hr, bytes);
  }
  if (!s && staged) s = rt->be->upload(rt->be_state, recv, hr, out);
  return s;
}

/* height rows of width bytes, from src (rows spitch apart) to dst (dpitch apart). */
static dit_status_t copy2d(rank_rt_t *rt, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height) {
  return rt->be->copy2d(rt->be_state, rt->coll_queue, dst, dpitch, src, spitch, width, height);
}

/* The members of a collective's group, and this rank's place among them. */
static dit_status_t group_members(const rank_rt_t *rt, const dit_plan_step_t *st, int *members, int *n_out, int *me_out, int *group_out) {
  const char *name = dit_op_info(st->kind)->name;
  int64_t group = 0, n = 0;
  DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "group", &group));
  if (st->kind == DIT_OP_ALLREDUCE) {
    if (group != 0) return DIT_ERR(UNIMPLEMENTED, "allreduce over group %lld: only tensor-parallel groups so far", (long long)group);
    n = rt->tp;
  } else {
    DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "n", &n));
  }
  /* Group 0 is the tensor-parallel group; 1 the whole cp group; 3 n consecutive cp ranks (with
   * USP this rank's Ulysses subgroup, under ring a reuse group) and 4 its ring subgroup (the ranks
   * at the same place in every Ulysses subgroup); 5 a reuse group inside the ring subgroup: n
   * consecutive members of it, cp ranks `stride` (the Ulysses degree) apart. */
  int me_cp = 0;
  while (me_cp < rt->cp && rt->cp_group[me_cp] != rt->rank) me_cp++;
  int64_t stride = 1;
  if (group == 5) DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, name, "stride", &stride));
  if (group == 0) {
    if (n != rt->tp) return DIT_ERR(INVALID_ARGUMENT, "%s: group 0 of %lld, this rank's tensor-parallel group has %d", name, (long long)n, rt->tp);
    memcpy(members, rt->tp_group, sizeof(int) * (size_t)n);
  } else {
    if (n < 1 || n > rt->cp || rt->cp % n || (group != 1 && group != 3 && group != 4 && group != 5) || (group == 1 && n != rt->cp) ||
        stride < 1 || rt->cp % (n * stride))
      return DIT_ERR(INVALID_ARGUMENT, "%s: group %lld of %lld (stride %lld) does not fit this rank's context-parallel group of %d", name,
                     (long long)group, (long long)n, (long long)stride, rt->cp);
    for (int64_t k = 0; k < n; k++) {
      const int64_t u = group == 4 ? rt->cp / n : group == 5 ? stride : n; /* the Ulysses degree (3: the group's size) */
      const int64_t c = group == 1   ? k
                        : group == 3 ? me_cp / u * u + k
                        : group == 4 ? k * u + me_cp % u
                                     : (me_cp / (n * u) * n + k) * u + me_cp % u;
      members[k] = rt->cp_group[c];
    }
  }
  int me = 0;
  while (me < n && members[me] != rt->rank) me++;
  *n_out = (int)n;
  *me_out = me;
  *group_out = (int)group;
  return DIT_OK;
}

/* Scratch in backend memory for every collective of the plan: what is sent, what arrives. */
dit_status_t dit_exec_alloc_collective_scratch(rank_rt_t *rt) {
  const size_t need = (size_t)dit_plan_collective_buffer_bytes(rt->plan);
  if (!need) return DIT_OK;
  DIT_RETURN_IF(rt->be->alloc(rt->be_state, need, "collective send buffer", &rt->coll_send));
  DIT_RETURN_IF(rt->be->alloc(rt->be_state, need, "collective receive buffer", &rt->coll_recv));
  rt->coll_cap = need;
  return DIT_OK;
}

static dit_status_t collective_body(rank_rt_t *rt, dit_comm_t *comm, const dit_plan_step_t *st);
static dit_status_t groups_used(const rank_rt_t *k, int used[DIT_COLL_GROUPS], int *any);

/* ---- overlap ----
 * With overlapped collectives a collective step runs whole (layout copies and communicator
 * call) on queue 2: it starts after what the compute queue has enqueued so far (event "in"),
 * and the first compute step that reads its output waits for it (event "out"). The compiler's
 * memory plan keeps a collective's input alive until then, so compute that runs meanwhile
 * never reuses its memory. Collectives stay in plan order on their queue, which keeps the
 * shared scratch buffers and every rank's sequence of calls consistent. */

#define COLL_SLOTS ((DIT_BACKEND_TIMED_EVENTS - DIT_BACKEND_COLL_EVENTS) / 2)
#define EV_IN(slot) (DIT_BACKEND_COLL_EVENTS + 2 * (slot))
#define EV_OUT(slot) (DIT_BACKEND_COLL_EVENTS + 2 * (slot) + 1)

/* The compute queue waits for the collective in `slot` and forgets it. */
static dit_status_t settle_slot(rank_rt_t *rt, int slot) {
  const int32_t v = rt->slot_value[slot];
  if (v < 0) return DIT_OK;
  DIT_RETURN_IF(rt->be->wait(rt->be_state, 0, EV_OUT(slot)));
  rt->pending[v] = -1;
  rt->slot_value[slot] = -1;
  return DIT_OK;
}

dit_status_t dit_exec_collectives_before_step(rank_rt_t *rt, const dit_plan_step_t *st) {
  if (!rt->coll_queue || dit_op_is_collective(st->kind)) return DIT_OK; /* collectives follow their queue's order */
  for (int k = 0; k < st->n_in; k++)
    if (rt->pending[st->in[k]] >= 0) DIT_RETURN_IF(settle_slot(rt, rt->pending[st->in[k]]));
  return DIT_OK;
}

int dit_exec_collective_done_event(const rank_rt_t *rt, const dit_plan_step_t *st) {
  if (!rt->coll_queue || !dit_op_is_collective(st->kind) || rt->pending[st->out[0]] < 0) return -1;
  return EV_OUT(rt->pending[st->out[0]]);
}

void dit_exec_collectives_settled(rank_rt_t *rt) {
  if (!rt->coll_queue) return;
  for (int k = 0; k < COLL_SLOTS; k++)
    if (rt->slot_value[k] >= 0) rt->pending[rt->slot_value[k]] = -1, rt->slot_value[k] = -1;
}

dit_status_t dit_exec_collectives_setup(dit_runtime_t *rt, const dit_runtime_options_t *o) {
  if (!o || o->overlap_collectives < 0 || rt->m->topology.world < 2) return DIT_OK;
  /* By default collectives overlap where they run through NCCL, outside a captured graph (the
   * ranks' graphs are resolved by now). */
  if (!o->overlap_collectives && (!rt->nccl || rt->ranks[0].graph)) return DIT_OK;
  for (int r = 0; r < rt->n_ranks; r++) {
    rank_rt_t *k = &rt->ranks[r];
    int used[DIT_COLL_GROUPS] = {0}, any = 0;
    DIT_RETURN_IF(groups_used(k, used, &any));
    if (!any) continue; /* nothing to overlap in a plan without collectives (cfg lanes alone) */
    const int host = k->be->host_memory && !k->stage && k->be->call && (rt->comm || rt->tcomm);
    if (!rt->nccl && !host)
      return DIT_ERR(UNIMPLEMENTED, "--overlap-collectives: the %s backend's collectives here %s", k->be->name,
                     k->stage ? "are staged through host memory" : "have no queue of their own (GPU ranks need NCCL and a GPU each)");
    k->pending = malloc((k->plan->n_values + 1) * sizeof *k->pending);
    k->coll_jobs = calloc(k->plan->n_steps + 1, sizeof *k->coll_jobs);
    if (!k->pending || !k->coll_jobs) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    for (size_t v = 0; v < k->plan->n_values; v++) k->pending[v] = -1;
    for (int q = 0; q < COLL_SLOTS; q++) k->slot_value[q] = -1;
    k->coll_queue = 2;
  }
  return DIT_OK;
}

dit_status_t dit_exec_run_collective(rank_rt_t *rt, dit_comm_t *comm, const dit_plan_step_t *st) {
  if (!rt->coll_queue) return collective_body(rt, comm, st);
  const int slot = (int)(rt->coll_seq++ % COLL_SLOTS);
  DIT_RETURN_IF(settle_slot(rt, slot)); /* the slot's last collective: done before its events are reused */
  DIT_RETURN_IF(rt->be->mark(rt->be_state, 0, EV_IN(slot)));
  DIT_RETURN_IF(rt->be->wait(rt->be_state, 2, EV_IN(slot)));
  rt->coll_step = (size_t)(st - rt->plan->steps);
  DIT_RETURN_IF(collective_body(rt, comm, st));
  DIT_RETURN_IF(rt->be->mark(rt->be_state, 2, EV_OUT(slot)));
  rt->pending[st->out[0]] = slot;
  rt->slot_value[slot] = st->out[0];
  return DIT_OK;
}

static dit_status_t collective_body(rank_rt_t *rt, dit_comm_t *comm, const dit_plan_step_t *st) {
  const dit_tensor_t *x = &rt->bound[st->in[0]], *y = &rt->bound[st->out[0]];
  const char *name = dit_op_info(st->kind)->name;
  int members[64], n = 1, me = 0, group = 0;
  DIT_RETURN_IF(group_members(rt, st, members, &n, &me, &group));
  const size_t es = dit_dtype_size(x->dtype), bytes = dit_tensor_nbytes(x);
  if (x->dtype != y->dtype) return DIT_ERR(INVALID_ARGUMENT, "%s: input and output differ in dtype", name);
  if (st->kind == DIT_OP_ALLREDUCE) {
    if (dit_tensor_numel(x) != dit_tensor_numel(y)) return DIT_ERR(INVALID_ARGUMENT, "allreduce: input and output differ in size");
    DIT_RETURN_IF(copy2d(rt, y->data, bytes, x->data, bytes, bytes, 1));
    return comm_call(rt, comm, group, COMM_ALLREDUCE, members, n, y->data, y->data, bytes, y->dtype, 0);
  }
  if (x->rank != 3 || y->rank != 3) return DIT_ERR(INVALID_ARGUMENT, "%s: operands are not [B, T, C]", name);
  /* The plan sizes the scratch for n * bytes of every collective but allreduce
   * (dit_plan_collective_buffer_bytes); ring_shift uses at most bytes of it now, the rest is
   * slack the plan format keeps. */
  const size_t scratch = (st->kind == DIT_OP_RING_SHIFT ? 1 : (size_t)n) * bytes;
  if (scratch > rt->coll_cap) return DIT_ERR(INTERNAL, "%s: collective scratch of %zu bytes is short of %zu", name, rt->coll_cap, scratch);
  uint8_t *send = rt->coll_send, *recv = rt->coll_recv, *yd = y->data;
  const uint8_t *xd = x->data;
  const size_t B = (size_t)x->dims[0], T = (size_t)x->dims[1], row = (size_t)x->dims[2] * es;
  switch (st->kind) {
    case DIT_OP_REDUCE_SCATTER: { /* the group's sum (fp32, group order), then this member's token share */
      const size_t Tl = T / (size_t)n;
      DIT_RETURN_IF(copy2d(rt, recv, bytes, xd, bytes, bytes, 1));
      DIT_RETURN_IF(comm_call(rt, comm, group, COMM_ALLREDUCE, members, n, recv, recv, bytes, x->dtype, 0));
      return copy2d(rt, yd, Tl * row, recv + (size_t)me * Tl * row, T * row, Tl * row, B);
    }
    case DIT_OP_RING_SHIFT: { /* the block of the member `distance` places back (the previous one), point to point */
      const dit_attr_t *da = dit_attrs_find(&st->attrs, "distance");
      const int d = da ? (int)da->i : 1;
      if (d < 1 || d >= n) return DIT_ERR(INVALID_ARGUMENT, "ring_shift: distance %d: expected 1..%d", d, n - 1);
      if (dit_tensor_nbytes(y) != bytes) return DIT_ERR(INVALID_ARGUMENT, "ring_shift: output of %zu bytes, input of %zu", dit_tensor_nbytes(y), bytes);
      /* x and y are whole contiguous blocks: the exchange writes y directly unless they share
       * memory (a communicator's send and receive must not overlap), then it lands in scratch. */
      const int apart = xd + bytes <= yd || yd + bytes <= xd;
      DIT_RETURN_IF(comm_call(rt, comm, group, COMM_SHIFT, members, n, (void *)xd, apart ? yd : recv, bytes, x->dtype, d));
      return apart ? DIT_OK : copy2d(rt, yd, bytes, recv, bytes, bytes, 1);
    }
    case DIT_OP_ALLGATHER: /* recv = [member][B][T][C] -> y[b][member*T + t][c] */
      DIT_RETURN_IF(comm_call(rt, comm, group, COMM_ALLGATHER, members, n, (void *)xd, recv, bytes, x->dtype, 0));
      for (int p = 0; p < n; p++) DIT_RETURN_IF(copy2d(rt, yd + (size_t)p * T * row, (size_t)n * T * row, recv + (size_t)p * bytes, T * row, T * row, B));
      return DIT_OK;
    case DIT_OP_ALLTOALL: {
      const dit_attr_t *rv = dit_attrs_find(&st->attrs, "reverse");
      const int reverse = rv ? (int)rv->i : 0;
      /* Chunks exchanged: [B][T_local][heads/n * Dh] per member. Forward: member p gets head
       * group p of my tokens; reverse: member p gets my heads of its tokens. */
      const size_t Tl = reverse ? T / (size_t)n : T, seg = (reverse ? (size_t)x->dims[2] : (size_t)x->dims[2] / (size_t)n) * es;
      const size_t chunk = B * Tl * seg, yrow = (size_t)y->dims[2] * es;
      /* With one batch row a forward exchange's chunks land in y as they are (member p's
       * tokens are rows p*Tl.. of y) and a reverse one's leave from x as they are (rows p*Tl..
       * of x): only the other side is laid out. The others go through the scratch buffers. */
      uint8_t *sbuf = B == 1 && reverse ? (uint8_t *)xd : send, *rbuf = B == 1 && !reverse ? yd : recv;
      for (int p = 0; p < n && sbuf == send; p++) {
        if (p == me) continue;
        if (reverse) DIT_RETURN_IF(copy2d(rt, send + (size_t)p * chunk, Tl * seg, xd + (size_t)p * Tl * seg, T * seg, Tl * seg, B));
        else DIT_RETURN_IF(copy2d(rt, send + (size_t)p * chunk, seg, xd + (size_t)p * seg, row, seg, B * Tl));
      }
      DIT_RETURN_IF(comm_call(rt, comm, group, COMM_ALLTOALL, members, n, sbuf, rbuf, chunk, x->dtype, 0));
      for (int p = 0; p < n && rbuf == recv; p++) {
        if (p == me) continue;
        if (reverse) DIT_RETURN_IF(copy2d(rt, yd + (size_t)p * seg, yrow, recv + (size_t)p * chunk, seg, seg, B * Tl));
        else DIT_RETURN_IF(copy2d(rt, yd + (size_t)p * Tl * seg, (size_t)n * Tl * seg, recv + (size_t)p * chunk, Tl * seg, Tl * seg, B));
      }
      /* This member's own chunk goes straight from x to y, after the exchange: a communicator
       * may fill the own chunk of what it receives into. */
      for (size_t b = 0; b < B; b++) {
        if (reverse) DIT_RETURN_IF(copy2d(rt, yd + b * Tl * yrow + (size_t)me * seg, yrow, xd + (b * T + (size_t)me * Tl) * seg, seg, seg, Tl));
        else DIT_RETURN_IF(copy2d(rt, yd + (b * (size_t)n * Tl + (size_t)me * Tl) * seg, seg, xd + b * Tl * row + (size_t)me * seg, row, seg, Tl));
      }
      return DIT_OK;
    }
    default: return DIT_ERR(INTERNAL, "%s is not a collective", name);
  }
}

/* ---- NCCL ----
 * GPU ranks that each have a device of their own (a launch's processes, or one process's
 * ranks spread by --devices) run their collectives through NCCL, on device buffers, enqueued
 * on the compute queue: nothing waits on the host. One communicator per plan group, split
 * from the world in group order; a rank's failure, a peer's death (the launch's liveness
 * channel) or an asynchronous NCCL error aborts them all, so no rank hangs in a collective. */

static void nccl_free_comms(rank_rt_t *k, int abort) {
  for (int g = DIT_COLL_GROUPS - 1; g >= -1; g--) {
    dit_ncomm_t **c = g < 0 ? &k->nworld : &k->ngroup[g];
    if (!*c) continue;
    if (abort) dit_ncomm_abort(*c);
    else dit_ncomm_destroy(*c);
    *c = NULL;
  }
}

/* Stops every collective of this process and tells the other processes. If a collective
 * call holds the lock past ten seconds (blocked on a dead peer) the process cannot be
 * stopped cleanly and exits. */
void dit_exec_nccl_abort_all(dit_runtime_t *rt, int rank, const char *why) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += 10;
  if (pthread_rwlock_timedwrlock(&rt->nlock, &t) != 0) {
    fprintf(stderr, "ditrun: rank %d: %s; a collective did not stop, exiting\n", rank, why);
    _exit(70);
  }
  if (!rt->naborted) {
    rt->naborted = 1;
    snprintf(rt->nwhy, sizeof rt->nwhy, "rank %d: %s", rank, why);
    if (rt->tcomm && rank == rt->ranks[0].rank) dit_tcomm_report_failure(rt->tcomm, why);
    for (int r = 0; r < rt->n_ranks; r++) {
      rt->ranks[r].be->native_queue(rt->ranks[r].be_state, 0);
      nccl_free_comms(&rt->ranks[r], 1);
    }
  }
  pthread_rwlock_unlock(&rt->nlock);
}

/* After a rank's queue drained: an abort (here or elsewhere) wins over what the queue said. */
dit_status_t dit_exec_nccl_after_sync(dit_runtime_t *rt, dit_status_t s) {
  pthread_rwlock_rdlock(&rt->nlock);
  dit_status_t a = rt->naborted ? DIT_ERR(ABORTED, "collectives aborted: %s", rt->nwhy) : DIT_OK;
  pthread_rwlock_unlock(&rt->nlock);
  if (a) dit_status_free(s);
  return a ? a : s;
}

static dit_status_t nccl_call(rank_rt_t *rt, int group, int me, comm_kind_t kind, void *send, void *recv, size_t bytes, dit_dtype_t dtype,
                              int distance) {
  dit_runtime_t *o = rt->owner;
  pthread_rwlock_rdlock(&o->nlock);
  dit_ncomm_t *c = group >= 0 && group < DIT_COLL_GROUPS ? rt->ngroup[group] : NULL;
  dit_status_t s = DIT_OK;
  if (o->naborted) s = DIT_ERR(ABORTED, "collectives aborted: %s", o->nwhy);
  else if (!c) s = DIT_ERR(INTERNAL, "no NCCL communicator for group %d", group);
  else {
    void *q = rt->be->native_queue(rt->be_state, rt->coll_queue);
    s = kind == COMM_ALLREDUCE   ? dit_ncomm_allreduce_sum(c, recv, bytes / dit_dtype_size(dtype), dtype, q)
        : kind == COMM_ALLGATHER ? dit_ncomm_allgather(c, send, recv, bytes, q)
        : kind == COMM_SHIFT     ? dit_ncomm_shift(c, send, recv, bytes, me, distance, q)
                                 : dit_ncomm_alltoall(c, send, recv, bytes, me, q);
  }
  pthread_rwlock_unlock(&o->nlock);
  return s;
}

/* The groups the plan's collectives use: used[g] = 1 + the index of a step using group g. */
static dit_status_t groups_used(const rank_rt_t *k, int used[DIT_COLL_GROUPS], int *any) {
  *any = 0;
  for (size_t i = 0; i < k->plan->n_steps; i++) {
    const dit_plan_step_t *st = &k->plan->steps[i];
    if (!dit_op_is_collective(st->kind)) continue;
    int64_t g = 0;
    DIT_RETURN_IF(dit_attrs_get_int(&st->attrs, dit_op_info(st->kind)->name, "group", &g));
    if (g < 0 || g >= DIT_COLL_GROUPS) return DIT_ERR(INVALID_ARGUMENT, "step %zu: collective group %lld", i, (long long)g);
    if (!used[g]) used[g] = (int)i + 1;
    *any = 1;
  }
  return DIT_OK;
}

typedef struct nccl_init {
  unsigned char id[DIT_NCCL_ID_BYTES];
  int used[DIT_COLL_GROUPS];
} nccl_init_t;

static dit_status_t rank_nccl_init(dit_runtime_t *rt, rank_rt_t *k, void *arg) {
  const nccl_init_t *in = arg;
  k->be->native_queue(k->be_state, 0); /* NCCL takes the device current on this thread */
  DIT_RETURN_IF(dit_ncomm_create(in->id, rt->m->topology.world, k->rank, &k->nworld));
  for (int g = 0; g < DIT_COLL_GROUPS; g++) {
    if (!in->used[g]) continue;
    int members[64], n = 0, me = 0, group = 0;
    DIT_RETURN_IF(group_members(k, &k->plan->steps[in->used[g] - 1], members, &n, &me, &group));
    DIT_RETURN_IF_ERROR(dit_ncomm_split(k->nworld, members[0], me, &k->ngroup[g]), "rank %d, collective group %d", k->rank, g);
  }
  return DIT_OK;
}

static dit_status_t rank_nccl_destroy(dit_runtime_t *rt, rank_rt_t *k, void *arg) {
  (void)rt, (void)arg;
  k->be->native_queue(k->be_state, 0);
  nccl_free_comms(k, 0);
  return DIT_OK;
}

static void *nccl_watch(void *p) {
  dit_runtime_t *rt = p;
  while (__atomic_load_n(&rt->watching, __ATOMIC_ACQUIRE)) {
    usleep(50 * 1000);
    dit_status_t e = rt->tcomm ? dit_tcomm_status(rt->tcomm) : DIT_OK;
    pthread_rwlock_rdlock(&rt->nlock);
    for (int r = 0; !e && !rt->naborted && r < rt->n_ranks; r++)
      for (int g = -1; !e && g < DIT_COLL_GROUPS; g++) {
        dit_ncomm_t *c = g < 0 ? rt->ranks[r].nworld : rt->ranks[r].ngroup[g];
        if (c) e = dit_ncomm_async_error(c);
      }
    pthread_rwlock_unlock(&rt->nlock);
    if (e) {
      dit_exec_nccl_abort_all(rt, rt->ranks[0].rank, dit_status_message(e));
      dit_status_free(e);
      break;
    }
  }
  return NULL;
}

dit_status_t dit_exec_nccl_setup(dit_runtime_t *rt, const dit_runtime_options_t *o) {
  rank_rt_t *r0 = &rt->ranks[0];
  if (!r0->be->native_queue || rt->m->topology.world < 2 || (o && o->stage_collectives)) return DIT_OK;
  nccl_init_t in;
  memset(&in, 0, sizeof in);
  int any = 0;
  DIT_RETURN_IF(groups_used(r0, in.used, &any));
  if (!any) return DIT_OK;
  if (!rt->process) {
    /* Ranks that share a device, or no NCCL: collectives staged through host memory. */
    for (int r = 1; r < rt->n_ranks; r++)
      for (int q = 0; q < r; q++)
        if (rt->ranks[r].device == rt->ranks[q].device) return DIT_OK;
    dit_status_t e = dit_nccl_load(NULL);
    if (e) {
      dit_status_free(e);
      return DIT_OK;
    }
  }
  if (!rt->process || rt->ranks[0].rank == 0) DIT_RETURN_IF(dit_nccl_unique_id(in.id));
  if (rt->process) {
    int world[64];
    for (int r = 0; r < rt->m->topology.world && r < 64; r++) world[r] = r;
    DIT_RETURN_IF_ERROR(dit_tcomm_broadcast(rt->tcomm, world, rt->m->topology.world, 0, in.id, sizeof in.id), "sharing the NCCL id");
  }
  if (pthread_rwlock_init(&rt->nlock, NULL)) return DIT_ERR(RESOURCE_EXHAUSTED, "cannot make a lock");
  rt->nccl = 1;
  DIT_RETURN_IF(dit_exec_run_ranks(rt, rank_nccl_init, &in));
  __atomic_store_n(&rt->watching, 1, __ATOMIC_RELEASE);
  if (pthread_create(&rt->watchdog, NULL, nccl_watch, rt)) {
    rt->watching = 0;
    return DIT_ERR(RESOURCE_EXHAUSTED, "cannot start the collectives' watchdog");
  }
  return DIT_OK;
}

void dit_exec_nccl_shutdown(dit_runtime_t *rt) {
  if (!rt->nccl) return;
  if (__atomic_exchange_n(&rt->watching, 0, __ATOMIC_ACQ_REL)) pthread_join(rt->watchdog, NULL);
  dit_status_free(dit_exec_run_ranks(rt, rank_nccl_destroy, NULL));
  pthread_rwlock_destroy(&rt->nlock);
  rt->nccl = 0;
}

const char *dit_runtime_collectives(const dit_runtime_t *rt) {
  if (rt->m->topology.world < 2) return "none (one rank)";
  if (rt->nccl) return "NCCL";
  if (rt->process) return "TCP between processes";
  return rt->ranks[0].be->host_memory && !rt->ranks[0].stage ? "in-process" : "in-process, staged through host memory";
}

