/* The in-process communicator of comm.h: ranks are threads, every collective is a rendezvous
 * on a record kept per group (its member list), and data moves directly between the members'
 * own buffers, so a collective costs no copies beyond the ones its result needs (plus one of
 * the send buffer for the in-place forms of allgather and alltoall). */
#include "runtime/comm/comm.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/strbuf.h"

/* Far above any real topology; it only keeps the member checks cheap and sizes sane. */
#define DIT_COMM_MAX_WORLD 65536
/* Messages list at most this many members: the first ones identify a group well enough. */
#define DIT_COMM_NAME_MEMBERS 32
/* Elements summed per block: an fp32 accumulator of this size stays in L1. */
#define DIT_COMM_REDUCE_BLOCK 1024

typedef enum dit_comm_op {
  DIT_COMM_ALLREDUCE,
  DIT_COMM_ALLGATHER,
  DIT_COMM_ALLTOALL,
  DIT_COMM_BROADCAST,
  DIT_COMM_BARRIER,
  DIT_COMM_SHIFT,
} dit_comm_op_t;

static const char *const kOpNames[] = {"allreduce_sum", "allgather", "alltoall", "broadcast",
                                       "barrier",       "shift"};
/* What `size` and `param` mean for each collective, for messages about values that differ. */
static const char *const kSizeNames[] = {"count", "bytes", "chunk_bytes", "bytes", "size", "bytes"};
static const char *const kParamNames[] = {"dtype", "", "", "root", "", "distance"};

/* One member's request. Published at arrival; the other members read it (and the memory it
 * points to) until the collective's last step, which is why no member returns before it. */
typedef struct dit_comm_slot {
  dit_comm_op_t op;
  size_t size;        /* count (allreduce), bytes (allgather, broadcast, shift), chunk (alltoall) */
  int param;          /* dtype (allreduce), root (broadcast), distance (shift) */
  const void *src;    /* what the others read from this member */
  size_t src_len;
  void *dst;          /* what this member writes */
  size_t dst_len;
  dit_code_t bad_code; /* this member's own arguments are wrong: every member reports it */
  char bad[200];
  bool arrived;       /* in the arrival under way: the ones still false are named on timeout */
  bool busy;          /* from arrival to return: a second thread using this rank is refused */
} dit_comm_slot_t;

typedef struct dit_comm_group {
  struct dit_comm_group *next;
  int n;
  int *members;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* Steps completed so far. A waiter sleeps until it moves, so a member that races ahead
   * into the next collective counts toward the next step and never releases this one. */
  uint64_t seq;
  int waiting;        /* members at the step under way */
  dit_comm_slot_t *slots;
  /* The verdict on the last arrival, set by its last member; the others read it before they
   * can arrive again, so it stays valid until the next arrival completes. */
  dit_code_t verdict_code;
  char *verdict;
  /* Set when a member gave up waiting: the missing member may still come, and must not
   * complete a rendezvous the others have left. */
  char *broken;
  bool broken_owned;
} dit_comm_group_t;

struct dit_comm {
  int world;
  int timeout_ms;
  pthread_mutex_t mu; /* the group list and the abort message */
  dit_comm_group_t *groups;
  atomic_int aborted;
  char *abort_msg; /* written once, before aborted is set; read only after seeing it set */
};

static void group_name(char *out, size_t cap, const int *members, int n) {
  size_t len = 0;
  len += (size_t)snprintf(out + len, cap - len, "{");
  for (int i = 0; i < n && len < cap; i++) {
    if (i == DIT_COMM_NAME_MEMBERS) {
      snprintf(out + len, cap - len, ",... %d members}", n);
      return;
    }
    len += (size_t)snprintf(out + len, cap - len, i ? ",%d" : "%d", members[i]);
  }
  if (len < cap) snprintf(out + len, cap - len, "}");
}

static void group_free(dit_comm_group_t *g) {
  if (!g) return;
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g->members);
  free(g->slots);
  free(g->verdict);
  if (g->broken_owned) free(g->broken);
  free(g);
}

static dit_comm_group_t *group_new(const int *members, int n) {
  dit_comm_group_t *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->n = n;
  g->members = malloc((size_t)n * sizeof *g->members);
  g->slots = calloc((size_t)n, sizeof *g->slots);
  if (!g->members || !g->slots) {
    free(g->members);
    free(g->slots);
    free(g);
    return NULL;
  }
  memcpy(g->members, members, (size_t)n * sizeof *members);
  /* Deadlines are on the monotonic clock so a wall-clock step cannot fire or stall them. */
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(&g->cv, &attr);
  pthread_condattr_destroy(&attr);
  if (rc != 0) {
    free(g->members);
    free(g->slots);
    free(g);
    return NULL;
  }
  pthread_mutex_init(&g->mu, NULL);
  return g;
}

/* Groups live until the communicator is destroyed: topologies use a handful of them, and a
 * record that never goes away needs no reference counting against threads still in it. */
static dit_comm_group_t *group_get(dit_comm_t *c, const int *members, int n) {
  pthread_mutex_lock(&c->mu);
  dit_comm_group_t *g = c->groups;
  while (g && !(g->n == n && memcmp(g->members, members, (size_t)n * sizeof *members) == 0))
    g = g->next;
  if (!g) {
    g = group_new(members, n);
    if (g) {
      g->next = c->groups;
      c->groups = g;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return g;
}

dit_status_t dit_comm_create_local(int world, int timeout_ms, dit_comm_t **out) {
  if (!out) return DIT_ERR(INVALID_ARGUMENT, "dit_comm_create_local: out is NULL");
  *out = NULL;
  if (world < 1 || world > DIT_COMM_MAX_WORLD)
    return DIT_ERR(INVALID_ARGUMENT, "dit_comm_create_local: world %d is not in 1..%d", world,
                   DIT_COMM_MAX_WORLD);
  if (timeout_ms < 0)
    return DIT_ERR(INVALID_ARGUMENT, "dit_comm_create_local: timeout_ms %d is negative",
                   timeout_ms);
  dit_comm_t *c = calloc(1, sizeof *c);
  if (!c) return DIT_ERR(RESOURCE_EXHAUSTED, "dit_comm_create_local: out of memory");
  c->world = world;
  c->timeout_ms = timeout_ms;
  pthread_mutex_init(&c->mu, NULL);
  atomic_init(&c->aborted, 0);
  *out = c;
  return DIT_OK;
}

void dit_comm_destroy(dit_comm_t *c) {
  if (!c) return;
  for (dit_comm_group_t *g = c->groups, *next; g; g = next) {
    next = g->next;
    group_free(g);
  }
  pthread_mutex_destroy(&c->mu);
  free(c->abort_msg);
  free(c);
}

int dit_comm_world(const dit_comm_t *c) { return c ? c->world : 0; }

void dit_comm_abort(dit_comm_t *c, int rank, const char *why) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  if (!atomic_load(&c->aborted)) {
    dit_strbuf_t b = {0};
    dit_strbuf_printf(&b, "aborted by rank %d: %s", rank, why ? why : "(no reason given)");
    c->abort_msg = b.oom ? NULL : b.p;
    if (b.oom) dit_strbuf_free(&b);
    atomic_store(&c->aborted, 1);
  }
  /* Waiters check the flag under their group's lock, so taking each lock before the
   * broadcast means none can miss it between its check and its wait. */
  for (dit_comm_group_t *g = c->groups; g; g = g->next) {
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
  }
  pthread_mutex_unlock(&c->mu);
}

/* ---- one call's request and its checks ---- */

typedef struct dit_comm_call {
  dit_comm_t *c;
  int rank;
  const int *group;
  int n;
  int idx; /* the caller's position in the group */
  dit_comm_op_t op;
  dit_comm_slot_t req; /* what goes into the caller's slot at arrival */
  void *stage;         /* the caller's private copy of send; owned */
} dit_comm_call_t;

static dit_status_t call_err(const dit_comm_call_t *k, dit_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static dit_status_t call_err(const dit_comm_call_t *k, dit_code_t code, const char *fmt, ...) {
  char name[DIT_COMM_NAME_MEMBERS * 7 + 16] = "(no group)";
  /* A size outside the world is a wrong n, and the list may be shorter than it claims. */
  if (k->group && k->n > 0 && k->c && k->n <= k->c->world)
    group_name(name, sizeof name, k->group, k->n);
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dit_status_make(code, "%s on group %s at rank %d: %s", kOpNames[k->op], name, k->rank,
                         msg);
}

/* Problems only this caller can see and no rendezvous can happen for: it returns at once. */
static dit_status_t check_group(dit_comm_call_t *k) {
  dit_comm_t *c = k->c;
  if (!c) return call_err(k, DIT_CODE_INVALID_ARGUMENT, "communicator is NULL");
  if (k->rank < 0 || k->rank >= c->world)
    return call_err(k, DIT_CODE_INVALID_ARGUMENT, "rank %d is not in 0..%d", k->rank,
                    c->world - 1);
  if (!k->group || k->n < 1 || k->n > c->world)
    return call_err(k, DIT_CODE_INVALID_ARGUMENT, "group size %d is not in 1..%d (world)",
                    k->group ? k->n : 0, c->world);
  k->idx = -1;
  for (int i = 0; i < k->n; i++) {
    int m = k->group[i];
    if (m < 0 || m >= c->world)
      return call_err(k, DIT_CODE_INVALID_ARGUMENT, "member %d (rank %d) is not in 0..%d", i, m,
                      c->world - 1);
    if (m == k->rank) k->idx = i;
  }
  /* Distinctness: quadratic for the small groups topologies use, a bitmap beyond. */
  if (k->n <= 64) {
    for (int i = 0; i < k->n; i++)
      for (int j = 0; j < i; j++)
        if (k->group[i] == k->group[j])
          return call_err(k, DIT_CODE_INVALID_ARGUMENT, "rank %d appears twice", k->group[i]);
  } else {
    unsigned char *seen = calloc((size_t)c->world, 1);
    if (!seen) return call_err(k, DIT_CODE_RESOURCE_EXHAUSTED, "out of memory");
    for (int i = 0; i < k->n; i++) {
      if (seen[k->group[i]]++) {
        free(seen);
        return call_err(k, DIT_CODE_INVALID_ARGUMENT, "rank %d appears twice", k->group[i]);
      }
    }
    free(seen);
  }
  if (k->idx < 0)
    return call_err(k, DIT_CODE_INVALID_ARGUMENT, "rank %d is not a member", k->rank);
  return DIT_OK;
}

/* Argument problems are published instead of returned, so every member fails together rather
 * than the others waiting out the timeout for a member that already left. */
static void mark_bad(dit_comm_call_t *k, dit_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void mark_bad(dit_comm_call_t *k, dit_code_t code, const char *fmt, ...) {
  if (k->req.bad_code != DIT_CODE_OK) return;
  k->req.bad_code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(k->req.bad, sizeof k->req.bad, fmt, ap);
  va_end(ap);
}

static bool overlaps(const void *a, size_t alen, const void *b, size_t blen) {
  if (!alen || !blen) return false;
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + blen && y < x + alen;
}

/* Members read each other's send buffers while they write their own recv, so a send that
 * overlaps its own recv (the in-place forms) is read from a private copy instead. */
static void stage_send(dit_comm_call_t *k) {
  if (k->op != DIT_COMM_ALLGATHER && k->op != DIT_COMM_ALLTOALL) return;
  if (k->req.bad_code != DIT_CODE_OK) return;
  if (!overlaps(k->req.src, k->req.src_len, k->req.dst, k->req.dst_len)) return;
  k->stage = malloc(k->req.src_len);
  if (!k->stage) {
    mark_bad(k, DIT_CODE_RESOURCE_EXHAUSTED, "out of memory staging %zu bytes", k->req.src_len);
    return;
  }
  memcpy(k->stage, k->req.src, k->req.src_len);
  k->req.src = k->stage;
}

/* ---- the rendezvous ---- */

static char *missing_members(const dit_comm_group_t *g) {
  dit_strbuf_t b = {0};
  int missing = 0;
  for (int i = 0; i < g->n; i++) missing += !g->slots[i].arrived;
  dit_strbuf_puts(&b, missing == 1 ? "rank " : "ranks ");
  int listed = 0;
  for (int i = 0; i < g->n && listed < DIT_COMM_NAME_MEMBERS; i++) {
    if (g->slots[i].arrived) continue;
    dit_strbuf_printf(&b, listed ? ",%d" : "%d", g->members[i]);
    listed++;
  }
  if (listed < missing) dit_strbuf_printf(&b, ",... (%d in all)", missing);
  dit_strbuf_puts(&b, " did not arrive");
  if (b.oom) {
    dit_strbuf_free(&b);
    return NULL;
  }
  return b.p;
}

/* Judges a complete arrival; runs in the last member to arrive, under the group's lock.
 * Every member sees the same verdict, so a mismatch fails all of them and touches no
 * buffer. */
static void judge(dit_comm_group_t *g) {
  free(g->verdict);
  g->verdict = NULL;
  g->verdict_code = DIT_CODE_OK;
  dit_strbuf_t b = {0};
  const dit_comm_slot_t *s = g->slots;
  dit_code_t code = DIT_CODE_OK;

  for (int i = 0; i < g->n; i++) {
    if (s[i].bad_code == DIT_CODE_OK) continue;
    if (code == DIT_CODE_OK) code = s[i].bad_code;
    dit_strbuf_printf(&b, "%srank %d: %s", b.len ? "; " : "", g->members[i], s[i].bad);
  }
  bool same_op = true, same_size = true, same_param = true;
  for (int i = 1; i < g->n; i++) {
    same_op &= s[i].op == s[0].op;
    same_size &= s[i].size == s[0].size;
    same_param &= s[i].param == s[0].param;
  }
  if (code == DIT_CODE_OK && !same_op) {
    code = DIT_CODE_INVALID_ARGUMENT;
    dit_strbuf_puts(&b, "members called different collectives:");
    for (int i = 0; i < g->n; i++)
      dit_strbuf_printf(&b, "%s rank %d %s", i ? "," : "", g->members[i], kOpNames[s[i].op]);
  }
  if (code == DIT_CODE_OK && (!same_size || !same_param)) {
    code = DIT_CODE_INVALID_ARGUMENT;
    const char *what = !same_size ? kSizeNames[s[0].op] : kParamNames[s[0].op];
    dit_strbuf_printf(&b, "members disagree on %s:", what);
    for (int i = 0; i < g->n; i++) {
      dit_strbuf_printf(&b, "%s rank %d ", i ? "," : "", g->members[i]);
      if (!same_size) dit_strbuf_printf(&b, "%zu", s[i].size);
      else if (s[0].op == DIT_COMM_ALLREDUCE)
        dit_strbuf_puts(&b, dit_dtype_name((dit_dtype_t)s[i].param));
      else dit_strbuf_printf(&b, "%d", s[i].param);
    }
  }
  /* Members write their outputs while reading the others' inputs: buffers shared between
   * members would make the result depend on the schedule. */
  for (int i = 0; i < g->n && code == DIT_CODE_OK; i++) {
    for (int j = 0; j < g->n && code == DIT_CODE_OK; j++) {
      if (i == j) continue;
      if (overlaps(s[i].dst, s[i].dst_len, s[j].dst, s[j].dst_len) ||
          overlaps(s[i].dst, s[i].dst_len, s[j].src, s[j].src_len)) {
        code = DIT_CODE_INVALID_ARGUMENT;
        dit_strbuf_printf(&b, "rank %d's output overlaps a buffer of rank %d", g->members[i],
                          g->members[j]);
      }
    }
  }
  if (code != DIT_CODE_OK) {
    g->verdict_code = code;
    g->verdict = b.oom ? NULL : b.p;
    if (b.oom) dit_strbuf_free(&b);
  } else {
    dit_strbuf_free(&b);
  }
}

static void deadline_after(struct timespec *t, int ms) {
  clock_gettime(CLOCK_MONOTONIC, t);
  t->tv_sec += ms / 1000;
  t->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (t->tv_nsec >= 1000000000L) {
    t->tv_sec++;
    t->tv_nsec -= 1000000000L;
  }
}

/* Arrival: publishes the caller's request and waits for the whole group, within the deadline
 * and unless the communicator is aborted. Called and returns with g->mu held. Once an arrival
 * completes, every member is past all of its waits that can fail, which is what lets the
 * later steps wait without a deadline: the others only copy memory until they get there. */
static dit_status_t arrive(dit_comm_call_t *k, dit_comm_group_t *g, const struct timespec *dl) {
  dit_comm_t *c = k->c;
  if (atomic_load(&c->aborted))
    return call_err(k, DIT_CODE_ABORTED, "%s", c->abort_msg ? c->abort_msg : "aborted");
  if (g->broken)
    return call_err(k, DIT_CODE_DEADLINE_EXCEEDED,
                    "the group failed earlier and cannot be used: %s", g->broken);
  dit_comm_slot_t *me = &g->slots[k->idx];
  if (me->busy)
    return call_err(k, DIT_CODE_INVALID_ARGUMENT,
                    "rank %d is already in a collective on this group (two threads, one rank?)",
                    k->rank);
  *me = k->req;
  me->arrived = true;
  me->busy = true;

  uint64_t step = g->seq;
  if (++g->waiting == g->n) {
    judge(g);
    for (int i = 0; i < g->n; i++) g->slots[i].arrived = false;
    g->waiting = 0;
    g->seq++;
    pthread_cond_broadcast(&g->cv);
  }
  while (g->seq == step) {
    dit_status_t s = DIT_OK;
    if (atomic_load(&c->aborted)) {
      s = call_err(k, DIT_CODE_ABORTED, "%s", c->abort_msg ? c->abort_msg : "aborted");
    } else if (g->broken) {
      s = call_err(k, DIT_CODE_DEADLINE_EXCEEDED, "%s", g->broken);
    } else if (dl) {
      if (pthread_cond_timedwait(&g->cv, &g->mu, dl) == ETIMEDOUT && g->seq == step &&
          !atomic_load(&c->aborted) && !g->broken) {
        char *missing = missing_members(g);
        dit_strbuf_t b = {0};
        dit_strbuf_printf(&b, "%s within %d ms", missing ? missing : "a member did not arrive",
                          c->timeout_ms);
        free(missing);
        if (b.oom) {
          dit_strbuf_free(&b);
          dit_strbuf_puts(&b, "a member did not arrive in time");
        }
        /* Even without memory for the message the group must end up broken. */
        g->broken = b.p ? b.p : (char *)"a member did not arrive in time";
        g->broken_owned = b.p != NULL;
        s = call_err(k, DIT_CODE_DEADLINE_EXCEEDED, "%s", g->broken);
        pthread_cond_broadcast(&g->cv);
      }
    } else {
      pthread_cond_wait(&g->cv, &g->mu);
    }
    if (s) {
      me->busy = false;
      return s;
    }
  }
  if (g->verdict_code != DIT_CODE_OK) {
    me->busy = false;
    return call_err(k, g->verdict_code, "%s", g->verdict ? g->verdict : "invalid arguments");
  }
  return DIT_OK;
}

/* A step inside a collective every member has joined: no deadline and no abort, because a
 * member that left here could free a buffer another member is still reading. */
static void step(dit_comm_group_t *g) {
  uint64_t at = g->seq;
  if (++g->waiting == g->n) {
    g->waiting = 0;
    g->seq++;
    pthread_cond_broadcast(&g->cv);
    return;
  }
  while (g->seq == at) pthread_cond_wait(&g->cv, &g->mu);
}

/* ---- the data movement, between steps, without the lock ---- */

static void slice_of(size_t count, int n, int i, size_t *lo, size_t *hi) {
  size_t base = count / (size_t)n, extra = count % (size_t)n, ui = (size_t)i;
  *lo = base * ui + (ui < extra ? ui : extra);
  *hi = *lo + base + (ui < extra ? 1 : 0);
}

/* Sums elements [lo, hi) over the members in group order into the caller's buffer. Only the
 * caller writes this slice and only it reads the others' copies of it, so the in-place
 * update is safe; one member computing each element makes the results bit-identical. */
static void reduce_slice(const dit_comm_group_t *g, int idx, size_t lo, size_t hi,
                         dit_dtype_t dt) {
  float acc[DIT_COMM_REDUCE_BLOCK];
  for (size_t b0 = lo; b0 < hi; b0 += DIT_COMM_REDUCE_BLOCK) {
    size_t m = hi - b0 < DIT_COMM_REDUCE_BLOCK ? hi - b0 : DIT_COMM_REDUCE_BLOCK;
    if (dt == DIT_F32) {
      const float *x0 = (const float *)g->slots[0].dst + b0;
      for (size_t e = 0; e < m; e++) acc[e] = x0[e];
      for (int k = 1; k < g->n; k++) {
        const float *x = (const float *)g->slots[k].dst + b0;
        for (size_t e = 0; e < m; e++) acc[e] += x[e];
      }
      memcpy((float *)g->slots[idx].dst + b0, acc, m * sizeof *acc);
    } else {
      const uint16_t *x0 = (const uint16_t *)g->slots[0].dst + b0;
      for (size_t e = 0; e < m; e++) acc[e] = dit_bf16_to_f32(x0[e]);
      for (int k = 1; k < g->n; k++) {
        const uint16_t *x = (const uint16_t *)g->slots[k].dst + b0;
        for (size_t e = 0; e < m; e++) acc[e] += dit_bf16_to_f32(x[e]);
      }
      uint16_t *out = (uint16_t *)g->slots[idx].dst + b0;
      for (size_t e = 0; e < m; e++) out[e] = dit_f32_to_bf16(acc[e]);
    }
  }
}

/* Runs the collective after a successful arrival; called and returns with g->mu held. The
 * slots are stable until the last step: no member can arrive again before it. */
static void run(dit_comm_call_t *k, dit_comm_group_t *g) {
  const dit_comm_slot_t *s = g->slots;
  const dit_comm_slot_t *me = &s[k->idx];
  /* Every member takes the same branches (sizes are agreed), so all reach the same steps. */
  if (me->op == DIT_COMM_BARRIER || me->size == 0 || g->n == 1) {
    if ((me->op == DIT_COMM_ALLGATHER || me->op == DIT_COMM_ALLTOALL || me->op == DIT_COMM_SHIFT) &&
        me->size)
      memcpy(me->dst, me->src, me->size);
    return;
  }
  pthread_mutex_unlock(&g->mu);
  switch (me->op) {
    case DIT_COMM_ALLREDUCE: {
      const dit_dtype_t dt = (dit_dtype_t)me->param;
      const size_t es = dit_dtype_size(dt);
      size_t lo, hi;
      slice_of(me->size, g->n, k->idx, &lo, &hi);
      reduce_slice(g, k->idx, lo, hi, dt);
      pthread_mutex_lock(&g->mu);
      step(g); /* every slice is summed; now each member collects the others' */
      pthread_mutex_unlock(&g->mu);
      for (int j = 0; j < g->n; j++) {
        if (j == k->idx) continue;
        slice_of(me->size, g->n, j, &lo, &hi);
        memcpy((char *)me->dst + lo * es, (const char *)s[j].dst + lo * es, (hi - lo) * es);
      }
      break;
    }
    case DIT_COMM_ALLGATHER:
      for (int j = 0; j < g->n; j++)
        memcpy((char *)me->dst + (size_t)j * me->size, s[j].src, me->size);
      break;
    case DIT_COMM_ALLTOALL:
      for (int j = 0; j < g->n; j++)
        memcpy((char *)me->dst + (size_t)j * me->size,
               (const char *)s[j].src + (size_t)k->idx * me->size, me->size);
      break;
    case DIT_COMM_BROADCAST:
      for (int j = 0; j < g->n; j++)
        if (g->members[j] == me->param && j != k->idx) memcpy(me->dst, s[j].src, me->size);
      break;
    case DIT_COMM_SHIFT: /* from the member `distance` places back, around the group */
      memcpy(me->dst, s[(k->idx + g->n - me->param) % g->n].src, me->size);
      break;
    case DIT_COMM_BARRIER:
      break;
  }
  pthread_mutex_lock(&g->mu);
  step(g); /* nobody returns (and frees its buffers) while another may still read them */
}

static dit_status_t collective(dit_comm_call_t *k) {
  struct timespec dl;
  dit_status_t s = check_group(k);
  if (s) return s;
  if (k->c->timeout_ms > 0) deadline_after(&dl, k->c->timeout_ms);
  if (atomic_load(&k->c->aborted))
    return call_err(k, DIT_CODE_ABORTED, "%s", k->c->abort_msg ? k->c->abort_msg : "aborted");
  stage_send(k);
  dit_comm_group_t *g = group_get(k->c, k->group, k->n);
  if (!g) {
    free(k->stage);
    return call_err(k, DIT_CODE_RESOURCE_EXHAUSTED, "out of memory for the group's record");
  }
  pthread_mutex_lock(&g->mu);
  s = arrive(k, g, k->c->timeout_ms > 0 ? &dl : NULL);
  if (!s) {
    run(k, g);
    g->slots[k->idx].busy = false;
  }
  pthread_mutex_unlock(&g->mu);
  free(k->stage);
  return s;
}

static size_t mul_or_max(size_t a, size_t b) {
  return b && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

/* A call's buffers once its arguments passed their checks. */
static void set_buffers(dit_comm_call_t *k, const void *src, size_t src_len, void *dst, size_t dst_len) {
  k->req.src = src;
  k->req.src_len = src_len;
  k->req.dst = dst;
  k->req.dst_len = dst_len;
}

dit_status_t dit_comm_allreduce_sum(dit_comm_t *c, int rank, const int *group, int n, void *buf,
                                    size_t count, dit_dtype_t dtype) {
  dit_comm_call_t k = {.c = c, .rank = rank, .group = group, .n = n, .op = DIT_COMM_ALLREDUCE};
  k.req.op = k.op;
  k.req.size = count;
  k.req.param = (int)dtype;
  if (dtype != DIT_F32 && dtype != DIT_BF16) {
    mark_bad(&k, DIT_CODE_INVALID_ARGUMENT, "dtype %s (%d) is not f32 or bf16",
             dit_dtype_name(dtype), (int)dtype);
  } else {
    size_t es = dit_dtype_size(dtype), bytes = mul_or_max(count, es);
    if (bytes == SIZE_MAX)
      mark_bad(&k, DIT_CODE_OUT_OF_RANGE, "count %zu overflows the address space", count);
    else if (count && !buf)
      mark_bad(&k, DIT_CODE_INVALID_ARGUMENT, "buf is NULL for %zu elements", count);
    else if ((uintptr_t)buf % es)
      mark_bad(&k, DIT_CODE_INVALID_ARGUMENT, "buf %p is not aligned to %s", buf,
               dit_dtype_name(dtype));
    else
      set_buffers(&k, buf, bytes, buf, bytes);
  }
  return collective(&k);
}

dit_status_t dit_comm_allgather(dit_comm_t *c, int rank, const int *group, int n,
                                const void *send, size_t bytes, void *recv) {
  dit_comm_call_t k = {.c = c, .rank = rank, .group = group, .n = n, .op = DIT_COMM_ALLGATHER};
  k.req.op = k.op;
  k.req.size = bytes;
  size_t total = mul_or_max(bytes, n > 0 ? (size_t)n : 0);
  if (total == SIZE_MAX)
    mark_bad(&k, DIT_CODE_OUT_OF_RANGE, "%d x %zu bytes overflows the address space", n, bytes);
  else if (bytes && (!send || !recv))
    mark_bad(&k, DIT_CODE_INVALID_ARGUMENT, "%s is NULL for %zu bytes", send ? "recv" : "send",
             bytes);
  else
    set_buffers(&k, send, bytes, recv, total);
  return collective(&k);
}

dit_status_t dit_comm_alltoall(dit_comm_t *c, int rank, const int *group, int n,
                               const void *send, void *recv, size_t chunk_bytes) {
  dit_comm_call_t k = {.c = c, .rank = rank, .group = group, .n = n, .op = DIT_COMM_ALLTOALL};
  k.req.op = k.op;
  k.req.size = chunk_bytes;
  size_t total = mul_or_max(chunk_bytes, n > 0 ? (size_t)n : 0);
  if (total == SIZE_MAX)
    mark_bad(&k, DIT_CODE_OUT_OF_RANGE, "%d x %zu bytes overflows the address space", n,
             chunk_bytes);
  else if (chunk_bytes && (!send || !recv))
    mark_bad(&k, DIT_CODE_INVALID_ARGUMENT, "%s is NULL for %d chunks of %zu bytes",
             send ? "recv" : "send", n, chunk_bytes);
  else
    set_buffers(&k, send, total, recv, total);
  return collective(&k);
}

dit_status_t dit_comm_broadcast(dit_comm_t *c, int rank, const int *group, int n, int root,
                                void *buf, size_t bytes) {
  dit_comm_call_t k = {.c = c, .rank = rank, .group = group, .n = n, .op = DIT_COMM_BROADCAST};
  k.req.op = k.op;
  k.req.size = bytes;
  k.req.param = root;
  bool in_group = false;
  for (int i = 0; group && i < n; i++) in_group |= group[i] == root;
  if (!in_group)
    mark_bad(&k, DIT_CODE_INVALID_ARGUMENT, "root %d is not a member", root);
  else if (bytes && !buf)
    mark_bad(&k, DIT_CODE_INVALID_ARGUMENT, "buf is NULL for %zu bytes", bytes);
  else if (rank == root) {
    k.req.src = buf;
    k.req.src_len = bytes;
  } else {
    k.req.dst = buf;
    k.req.dst_len = bytes;
  }
  return collective(&k);
}

dit_status_t dit_comm_barrier(dit_comm_t *c, int rank, const int *group, int n) {
  dit_comm_call_t k = {.c = c, .rank = rank, .group = group, .n = n, .op = DIT_COMM_BARRIER};
  k.req.op = k.op;
  return collective(&k);
}

dit_status_t dit_comm_shift(dit_comm_t *c, int rank, const int *group, int n, int distance,
                            const void *send, void *recv, size_t bytes) {
  dit_comm_call_t k = {.c = c, .rank = rank, .group = group, .n = n, .op = DIT_COMM_SHIFT};
  k.req.op = k.op;
  k.req.size = bytes;
  k.req.param = distance;
  if (distance < 0 || distance >= (n > 0 ? n : 1))
    mark_bad(&k, DIT_CODE_INVALID_ARGUMENT, "distance %d is not in 0..%d", distance,
             n > 0 ? n - 1 : 0);
  else if (bytes && (!send || !recv))
    mark_bad(&k, DIT_CODE_INVALID_ARGUMENT, "%s is NULL for %zu bytes", send ? "recv" : "send",
             bytes);
  else if (overlaps(send, bytes, recv, bytes))
    mark_bad(&k, DIT_CODE_INVALID_ARGUMENT, "send and recv overlap");
  else
    set_buffers(&k, send, bytes, recv, bytes);
  return collective(&k);
}
