/* Pins the in-process communicator: every collective (and the shift at every distance)
 * against a serial reference for 1 to 8 ranks, bit-identical reductions in group order,
 * concurrent groups of tp x cp meshes, back-to-back generations, timeouts naming the missing
 * rank, abort, and mismatched calls failing on every member. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "runtime/comm/comm.h"

/* ---- threads and thread-safe checks ---- */

static pthread_mutex_t check_mu = PTHREAD_MUTEX_INITIALIZER;

/* check.h's counters are plain ints; rank threads report through here. */
static void tcheck(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tcheck(int ok, const char *fmt, ...) {
  pthread_mutex_lock(&check_mu);
  check_count_++;
  if (!ok) {
    check_failures_++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "CHECK failed: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
  }
  pthread_mutex_unlock(&check_mu);
}

static void expect_ok(dit_status_t s, const char *what, int rank) {
  tcheck(s == DIT_OK, "%s at rank %d: %s: %s", what, rank, dit_code_name(dit_status_code(s)),
         dit_status_message(s));
  dit_status_free(s);
}

static void expect_err(dit_status_t s, dit_code_t code, const char *needle, const char *what,
                       int rank) {
  tcheck(s && dit_status_code(s) == code && strstr(dit_status_message(s), needle),
         "%s at rank %d: expected %s containing '%s', got %s: %s", what, rank,
         dit_code_name(code), needle, dit_code_name(dit_status_code(s)), dit_status_message(s));
  dit_status_free(s);
}

typedef void (*rank_fn)(void *ctx, int rank);
typedef struct rank_arg {
  rank_fn fn;
  void *ctx;
  int rank;
} rank_arg_t;

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  a->fn(a->ctx, a->rank);
  return NULL;
}

/* Runs fn on `world` threads, one per rank, and joins them. */
static void run_ranks(int world, rank_fn fn, void *ctx) {
  pthread_t t[64];
  rank_arg_t a[64];
  for (int r = 0; r < world; r++) {
    a[r] = (rank_arg_t){fn, ctx, r};
    if (pthread_create(&t[r], NULL, rank_main, &a[r]) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      exit(2);
    }
  }
  for (int r = 0; r < world; r++) pthread_join(t[r], NULL);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- deterministic inputs ---- */

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Values over several binades with both signs, so the order of a sum changes its rounding. */
static float value(uint64_t seed, int rank, size_t e) {
  uint64_t h = mix(seed * 1000003u + (uint64_t)rank * 7919u + e);
  float m = (float)(h & 0xffffff) / 16777216.0f - 0.5f;
  return ldexpf(m, (int)((h >> 24) % 24) - 12);
}

static uint8_t byte_at(uint64_t seed, int rank, size_t i) {
  return (uint8_t)mix(seed ^ ((uint64_t)rank << 40) ^ i);
}

/* ---- every collective against a serial reference ---- */

static const size_t kSizes[] = {0, 1, 3, 7, 64, 1001, 4099};
#define N_SIZES (sizeof kSizes / sizeof kSizes[0])

typedef struct ref_ctx {
  dit_comm_t *c;
  int world;
  int group[8]; /* a permutation of the world: group order is not rank order */
  atomic_int barrier_count[8];
} ref_ctx_t;

static int idx_of(const int *group, int n, int rank) {
  for (int i = 0; i < n; i++)
    if (group[i] == rank) return i;
  return -1;
}

static void check_allreduce(ref_ctx_t *x, int rank, size_t count, dit_dtype_t dt, uint64_t seed) {
  const int n = x->world;
  const size_t es = dit_dtype_size(dt);
  void *buf = malloc(count * es + 1);
  void *ref = malloc(count * es + 1);
  for (size_t e = 0; e < count; e++) {
    float v = value(seed, rank, e);
    if (dt == DIT_F32) ((float *)buf)[e] = v;
    else ((uint16_t *)buf)[e] = dit_f32_to_bf16(v);
  }
  /* fp32 sum in group order, starting from the first member's value, rounded once. */
  for (size_t e = 0; e < count; e++) {
    float s = 0;
    for (int i = 0; i < n; i++) {
      float v = value(seed, x->group[i], e);
      if (dt == DIT_BF16) v = dit_bf16_to_f32(dit_f32_to_bf16(v));
      s = i ? s + v : v;
    }
    if (dt == DIT_F32) ((float *)ref)[e] = s;
    else ((uint16_t *)ref)[e] = dit_f32_to_bf16(s);
  }
  expect_ok(dit_comm_allreduce_sum(x->c, rank, x->group, n, buf, count, dt), "allreduce", rank);
  tcheck(memcmp(buf, ref, count * es) == 0, "allreduce %s world %d count %zu at rank %d differs "
         "from the group-order reference", dit_dtype_name(dt), n, count, rank);
  free(buf);
  free(ref);
}

static void check_allgather(ref_ctx_t *x, int rank, size_t bytes, int in_place, uint64_t seed) {
  const int n = x->world, me = idx_of(x->group, n, rank);
  uint8_t *recv = malloc(n * bytes + 1), *send = malloc(bytes + 1);
  for (size_t i = 0; i < bytes; i++) send[i] = byte_at(seed, rank, i);
  const uint8_t *src = send;
  if (in_place) {
    memset(recv, 0xee, n * bytes);
    memcpy(recv + me * bytes, send, bytes);
    src = recv + me * bytes;
  }
  expect_ok(dit_comm_allgather(x->c, rank, x->group, n, src, bytes, recv), "allgather", rank);
  int bad = 0;
  for (int j = 0; j < n; j++)
    for (size_t i = 0; i < bytes; i++) bad += recv[j * bytes + i] != byte_at(seed, x->group[j], i);
  tcheck(!bad, "allgather world %d bytes %zu in_place %d at rank %d: %d bytes wrong", n, bytes,
         in_place, rank, bad);
  free(recv);
  free(send);
}

static void check_alltoall(ref_ctx_t *x, int rank, size_t chunk, int in_place, uint64_t seed) {
  const int n = x->world, me = idx_of(x->group, n, rank);
  uint8_t *send = malloc(n * chunk + 1), *recv = malloc(n * chunk + 1);
  for (size_t i = 0; i < n * chunk; i++) send[i] = byte_at(seed, rank, i);
  uint8_t *out = recv;
  if (in_place) {
    memcpy(recv, send, n * chunk);
    out = recv;
  }
  expect_ok(dit_comm_alltoall(x->c, rank, x->group, n, in_place ? recv : send, out, chunk),
            "alltoall", rank);
  int bad = 0;
  for (int i = 0; i < n; i++)
    for (size_t b = 0; b < chunk; b++)
      bad += out[i * chunk + b] != byte_at(seed, x->group[i], (size_t)me * chunk + b);
  tcheck(!bad, "alltoall world %d chunk %zu in_place %d at rank %d: %d bytes wrong", n, chunk,
         in_place, rank, bad);
  free(send);
  free(recv);
}

static void check_broadcast(ref_ctx_t *x, int rank, size_t bytes, int root, uint64_t seed) {
  uint8_t *buf = malloc(bytes + 1);
  for (size_t i = 0; i < bytes; i++) buf[i] = byte_at(seed, rank, i);
  expect_ok(dit_comm_broadcast(x->c, rank, x->group, x->world, root, buf, bytes), "broadcast",
            rank);
  int bad = 0;
  for (size_t i = 0; i < bytes; i++) bad += buf[i] != byte_at(seed, root, i);
  tcheck(!bad, "broadcast world %d bytes %zu root %d at rank %d: %d bytes wrong", x->world, bytes,
         root, rank, bad);
  free(buf);
}

/* Every distance around the group: the block of the member `d` places back in group order,
 * and the caller's own send untouched. */
static void check_shift(ref_ctx_t *x, int rank, size_t bytes, int d, uint64_t seed) {
  const int n = x->world, me = idx_of(x->group, n, rank), from = x->group[(me + n - d) % n];
  uint8_t *send = malloc(bytes + 1), *recv = malloc(bytes + 2);
  for (size_t i = 0; i < bytes; i++) send[i] = byte_at(seed, rank, i);
  memset(recv, 0xee, bytes + 2);
  expect_ok(dit_comm_shift(x->c, rank, x->group, n, d, send, recv, bytes), "shift", rank);
  int bad = 0;
  for (size_t i = 0; i < bytes; i++) bad += recv[i] != byte_at(seed, from, i) || send[i] != byte_at(seed, rank, i);
  bad += recv[bytes] != 0xee || recv[bytes + 1] != 0xee;
  tcheck(!bad, "shift world %d distance %d bytes %zu at rank %d (from rank %d): %d bytes wrong", n, d,
         bytes, rank, from, bad);
  free(send);
  free(recv);
}

static void ref_rank(void *ctx, int rank) {
  ref_ctx_t *x = ctx;
  uint64_t seed = 1;
  for (size_t si = 0; si < N_SIZES; si++) {
    size_t sz = kSizes[si];
    check_allreduce(x, rank, sz, DIT_F32, seed++);
    check_allreduce(x, rank, sz, DIT_BF16, seed++);
    for (int in_place = 0; in_place < 2; in_place++) {
      check_allgather(x, rank, sz, in_place, seed++);
      check_alltoall(x, rank, sz, in_place, seed++);
    }
    for (int r = 0; r < x->world; r++) check_broadcast(x, rank, sz, r, seed++);
    for (int d = 0; d < x->world; d++) check_shift(x, rank, sz, d, seed++);
  }
  /* Nobody leaves a barrier before everyone has entered it. */
  for (int round = 0; round < 8; round++) {
    atomic_fetch_add(&x->barrier_count[round], 1);
    expect_ok(dit_comm_barrier(x->c, rank, x->group, x->world), "barrier", rank);
    tcheck(atomic_load(&x->barrier_count[round]) == x->world,
           "barrier round %d at rank %d: left with %d of %d arrived", round, rank,
           atomic_load(&x->barrier_count[round]), x->world);
  }
}

static void test_reference(void) {
  static const int worlds[] = {1, 2, 3, 4, 8};
  for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
    for (int order = 0; order < 2; order++) {
      ref_ctx_t x;
      memset(&x, 0, sizeof x);
      x.world = worlds[w];
      /* rank order, then a rotation with a swap, so group order != rank order */
      for (int i = 0; i < x.world; i++) x.group[i] = order ? (i + 1) % x.world : i;
      if (order && x.world > 2) {
        int t = x.group[0];
        x.group[0] = x.group[1];
        x.group[1] = t;
      }
      CHECK_OK(dit_comm_create_local(x.world, 20000, &x.c));
      CHECK_EQ_INT(dit_comm_world(x.c), x.world);
      run_ranks(x.world, ref_rank, &x);
      dit_comm_destroy(x.c);
    }
  }
}

/* The reference test above checks group order; this checks that order matters for these
 * inputs at all, or the test could not tell group order from any other. */
static void test_order_matters(void) {
  int differ = 0;
  for (size_t e = 0; e < 1000; e++) {
    float a = 0, b = 0;
    for (int i = 0; i < 8; i++) a = i ? a + value(9, i, e) : value(9, i, e);
    for (int i = 7; i >= 0; i--) b = i < 7 ? b + value(9, i, e) : value(9, i, e);
    differ += a != b;
  }
  CHECK(differ > 10);
}

/* Same inputs, two runs, reversed group: results identical across members and runs. */
typedef struct repeat_ctx {
  dit_comm_t *c;
  int group[8];
  uint16_t out[2][8][777];
} repeat_ctx_t;

static void repeat_rank(void *ctx, int rank) {
  repeat_ctx_t *x = ctx;
  for (int run = 0; run < 2; run++) {
    uint16_t *b = x->out[run][rank];
    for (size_t e = 0; e < 777; e++) b[e] = dit_f32_to_bf16(value(77, rank, e));
    expect_ok(dit_comm_allreduce_sum(x->c, rank, x->group, 8, b, 777, DIT_BF16), "bf16 repeat",
              rank);
  }
}

static void test_bf16_identical(void) {
  repeat_ctx_t *x = calloc(1, sizeof *x);
  for (int i = 0; i < 8; i++) x->group[i] = 7 - i;
  CHECK_OK(dit_comm_create_local(8, 20000, &x->c));
  run_ranks(8, repeat_rank, x);
  for (int run = 0; run < 2; run++)
    for (int r = 0; r < 8; r++)
      CHECK(memcmp(x->out[run][r], x->out[0][0], sizeof x->out[0][0]) == 0);
  dit_comm_destroy(x->c);
  free(x);
}

/* ---- meshes: several groups at once, and many generations ---- */

typedef struct mesh_ctx {
  dit_comm_t *c;
  int tp, cp, iters;
} mesh_ctx_t;

/* rank = cp_index * tp + tp_index: tp groups are runs of adjacent ranks, cp groups strided. */
static void mesh_rank(void *ctx, int rank) {
  mesh_ctx_t *x = ctx;
  const int ti = rank % x->tp, ci = rank / x->tp;
  int tpg[8], cpg[8];
  for (int i = 0; i < x->tp; i++) tpg[i] = ci * x->tp + i;
  for (int i = 0; i < x->cp; i++) cpg[i] = i * x->tp + ti;
  float buf[5];
  int32_t send[8 * 3], recv[8 * 3], mine[3];
  for (int it = 0; it < x->iters; it++) {
    /* tp all-reduce: contributions depend on the iteration, so mixing generations shows. */
    for (int e = 0; e < 5; e++) buf[e] = (float)(rank * 1000 + it * 10 + e);
    dit_status_t s = dit_comm_allreduce_sum(x->c, rank, tpg, x->tp, buf, 5, DIT_F32);
    if (s) {
      expect_ok(s, "mesh allreduce", rank);
      return;
    }
    int bad = 0;
    for (int e = 0; e < 5; e++) {
      float want = 0;
      for (int i = 0; i < x->tp; i++) want += (float)(tpg[i] * 1000 + it * 10 + e);
      bad += buf[e] != want;
    }
    /* cp all-gather of (rank, iteration, tp index) */
    mine[0] = rank;
    mine[1] = it;
    mine[2] = ti;
    s = dit_comm_allgather(x->c, rank, cpg, x->cp, mine, sizeof mine, recv);
    if (s) {
      expect_ok(s, "mesh allgather", rank);
      return;
    }
    for (int i = 0; i < x->cp; i++)
      bad += recv[3 * i] != cpg[i] || recv[3 * i + 1] != it || recv[3 * i + 2] != ti;
    /* every few iterations: a cp all-to-all and a world barrier */
    if (it % 7 == 3) {
      for (int j = 0; j < x->cp; j++) send[j] = rank * 100 + j + it;
      s = dit_comm_alltoall(x->c, rank, cpg, x->cp, send, recv, sizeof(int32_t));
      if (s) {
        expect_ok(s, "mesh alltoall", rank);
        return;
      }
      for (int i = 0; i < x->cp; i++) bad += recv[i] != cpg[i] * 100 + ci + it;
      int world[64];
      for (int i = 0; i < x->tp * x->cp; i++) world[i] = i;
      s = dit_comm_barrier(x->c, rank, world, x->tp * x->cp);
      if (s) {
        expect_ok(s, "mesh barrier", rank);
        return;
      }
    }
    if (bad) {
      tcheck(0, "mesh %dx%d iteration %d at rank %d: %d wrong values", x->tp, x->cp, it, rank,
             bad);
      return;
    }
  }
  tcheck(1, "mesh");
}

static void test_meshes(void) {
  static const int shapes[][3] = {{2, 2, 200}, {2, 4, 200}, {4, 2, 200}, {1, 4, 50}, {2, 2, 1000}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    mesh_ctx_t x = {.tp = shapes[i][0], .cp = shapes[i][1], .iters = shapes[i][2]};
    CHECK_OK(dit_comm_create_local(x.tp * x.cp, 20000, &x.c));
    run_ranks(x.tp * x.cp, mesh_rank, &x);
    dit_comm_destroy(x.c);
  }
}

/* 1000 back-to-back collectives on one rank pair, alternating between two groups that share
 * a member, with no other synchronization. */
typedef struct alt_ctx {
  dit_comm_t *c;
} alt_ctx_t;

static void alt_rank(void *ctx, int rank) {
  alt_ctx_t *x = ctx;
  static const int g01[] = {0, 1}, g12[] = {1, 2}, g012[] = {2, 0, 1};
  int bad = 0, failed = 0;
  for (int it = 0; it < 1000 && !failed; it++) {
    const int *g = it % 2 ? g12 : g01;
    if (it % 10 == 9) g = g012;
    const int n = g == g012 ? 3 : 2;
    if (idx_of(g, n, rank) < 0) continue;
    float v[3] = {(float)(rank + it), (float)(rank * it), 1};
    dit_status_t s = dit_comm_allreduce_sum(x->c, rank, g, n, v, 3, DIT_F32);
    if (s) {
      expect_ok(s, "alternating allreduce", rank);
      failed = 1;
      break;
    }
    float w0 = 0, w1 = 0;
    for (int i = 0; i < n; i++) {
      w0 += (float)(g[i] + it);
      w1 += (float)(g[i] * it);
    }
    bad += v[0] != w0 || v[1] != w1 || v[2] != (float)n;
  }
  tcheck(!bad, "alternating groups at rank %d: %d wrong results", rank, bad);
}

static void test_alternating(void) {
  alt_ctx_t x;
  CHECK_OK(dit_comm_create_local(3, 20000, &x.c));
  run_ranks(3, alt_rank, &x);
  dit_comm_destroy(x.c);
}

/* ---- failures ---- */

typedef struct fail_ctx {
  dit_comm_t *c;
  int timeout_ms;
  double elapsed_ms[8];
} fail_ctx_t;

static void timeout_rank(void *ctx, int rank) {
  fail_ctx_t *x = ctx;
  static const int g[] = {0, 1, 2, 3};
  if (rank == 2) return; /* never arrives */
  float v[4] = {1, 2, 3, 4};
  double t0 = now_ms();
  dit_status_t s = dit_comm_allreduce_sum(x->c, rank, g, 4, v, 4, DIT_F32);
  x->elapsed_ms[rank] = now_ms() - t0;
  expect_err(s, DIT_CODE_DEADLINE_EXCEEDED, "rank 2 did not arrive", "timeout", rank);
  tcheck(v[0] == 1 && v[3] == 4, "timeout at rank %d changed the buffer", rank);
}

static void test_timeout(void) {
  fail_ctx_t x = {.timeout_ms = 200};
  CHECK_OK(dit_comm_create_local(4, x.timeout_ms, &x.c));
  run_ranks(4, timeout_rank, &x);
  /* The first member to give up waited its whole timeout; it releases the others at once,
   * so those that arrived later waited less. */
  double longest = 0;
  for (int r = 0; r < 4; r++) {
    if (r == 2) continue;
    if (x.elapsed_ms[r] > longest) longest = x.elapsed_ms[r];
    CHECK(x.elapsed_ms[r] < x.timeout_ms + 2000);
  }
  CHECK(longest >= x.timeout_ms - 1);
  /* The late member finds the group failed instead of waiting for the ones that left. */
  static const int g[] = {0, 1, 2, 3};
  double t0 = now_ms();
  CHECK_ERR(dit_comm_barrier(x.c, 2, g, 4), DEADLINE_EXCEEDED, "rank 2 did not arrive");
  CHECK(now_ms() - t0 < 100);
  /* Other groups are untouched. */
  static const int g3[] = {3};
  float v = 5;
  CHECK_OK(dit_comm_allreduce_sum(x.c, 3, g3, 1, &v, 1, DIT_F32));
  CHECK(v == 5);
  dit_comm_destroy(x.c);
  /* The group and the group order are named. */
  CHECK_OK(dit_comm_create_local(3, 50, &x.c));
  static const int h[] = {2, 0, 1};
  CHECK_ERR(dit_comm_barrier(x.c, 0, h, 3), DEADLINE_EXCEEDED, "{2,0,1}");
  dit_comm_destroy(x.c);
  CHECK_OK(dit_comm_create_local(3, 50, &x.c));
  CHECK_ERR(dit_comm_barrier(x.c, 0, h, 3), DEADLINE_EXCEEDED, "ranks 2,1 did not arrive");
  dit_comm_destroy(x.c);
}

/* A shift whose member never comes: the others time out naming the group and the missing
 * rank, and nothing arrives in their buffers. */
static void shift_timeout_rank(void *ctx, int rank) {
  fail_ctx_t *x = ctx;
  static const int g[] = {3, 1, 0, 2};
  if (rank == 0) return; /* never arrives */
  uint8_t send[32], recv[32];
  memset(send, rank, sizeof send);
  memset(recv, 0xcd, sizeof recv);
  expect_err(dit_comm_shift(x->c, rank, g, 4, 1, send, recv, sizeof send), DIT_CODE_DEADLINE_EXCEEDED,
             "shift on group {3,1,0,2}", "shift timeout", rank);
  int changed = 0;
  for (size_t i = 0; i < sizeof recv; i++) changed += recv[i] != 0xcd;
  tcheck(!changed, "shift timeout at rank %d changed %d bytes of recv", rank, changed);
}

static void test_shift_timeout(void) {
  fail_ctx_t x = {.timeout_ms = 100};
  CHECK_OK(dit_comm_create_local(4, x.timeout_ms, &x.c));
  run_ranks(4, shift_timeout_rank, &x);
  static const int g[] = {3, 1, 0, 2};
  uint8_t a[4] = {0}, b[4] = {0};
  CHECK_ERR(dit_comm_shift(x.c, 0, g, 4, 1, a, b, 4), DEADLINE_EXCEEDED, "rank 0 did not arrive");
  dit_comm_destroy(x.c);
}

static void abort_rank(void *ctx, int rank) {
  fail_ctx_t *x = ctx;
  static const int g[] = {0, 1, 2, 3}, g01[] = {0, 1};
  if (rank == 3) {
    usleep(50 * 1000);
    dit_comm_abort(x->c, 3, "step 7 failed");
    dit_comm_abort(x->c, 1, "second abort is ignored");
    return;
  }
  double t0 = now_ms();
  dit_status_t s;
  if (rank == 0 || rank == 1) {
    /* ranks 0 and 1 first complete a collective of their own, then wait for rank 3 */
    float v = 1;
    expect_ok(dit_comm_allreduce_sum(x->c, rank, g01, 2, &v, 1, DIT_F32), "before abort", rank);
    s = dit_comm_allreduce_sum(x->c, rank, g, 4, &v, 1, DIT_F32);
  } else {
    uint8_t buf[4] = {0};
    s = dit_comm_broadcast(x->c, rank, g, 4, 0, buf, 4);
  }
  x->elapsed_ms[rank] = now_ms() - t0;
  expect_err(s, DIT_CODE_ABORTED, "aborted by rank 3: step 7 failed", "abort", rank);
  /* Every later collective fails at once, on any group. */
  const int self[] = {rank};
  expect_err(dit_comm_barrier(x->c, rank, self, 1), DIT_CODE_ABORTED, "step 7 failed",
             "after abort", rank);
}

static void test_abort(void) {
  fail_ctx_t x = {0};
  CHECK_OK(dit_comm_create_local(4, 0, &x.c)); /* no timeout: only the abort releases them */
  run_ranks(4, abort_rank, &x);
  for (int r = 0; r < 3; r++) CHECK(x.elapsed_ms[r] < 5000);
  static const int g2[] = {2};
  CHECK_ERR(dit_comm_barrier(x.c, 2, g2, 1), ABORTED, "aborted by rank 3");
  dit_comm_destroy(x.c);
  dit_comm_abort(NULL, 0, "no communicator");
}

/* Each member passes different arguments; all must fail with the same kind of error and no
 * buffer may change. */
typedef struct mismatch_ctx {
  dit_comm_t *c;
  int kind;
} mismatch_ctx_t;

enum {
  MM_COUNT,
  MM_DTYPE,
  MM_GATHER_BYTES,
  MM_CHUNK,
  MM_ROOT,
  MM_OP,
  MM_NULL_BUF,
  MM_SHARED_BUF,
  MM_BAD_DTYPE,
  MM_SHIFT_DISTANCE,
  MM_SHIFT_BYTES,
  MM_SHIFT_RANGE,
  MM_SHIFT_OVERLAP,
  MM_KINDS
};
static const char *const kMismatchNeedle[] = {
    "disagree on count: rank 0 10, rank 1 10, rank 2 12, rank 3 10",
    "disagree on dtype",
    "disagree on bytes",
    "disagree on chunk_bytes",
    "disagree on root",
    "different collectives",
    "rank 1: buf is NULL",
    "overlaps",
    "rank 2: dtype f16",
    "shift on group {0,1,2,3} at rank %d: members disagree on distance: rank 0 1, rank 1 3, rank 2 1, rank 3 1",
    "members disagree on bytes: rank 0 16, rank 1 16, rank 2 16, rank 3 12",
    "rank 2: distance 4 is not in 0..3",
    "rank 0: send and recv overlap",
};

static float shared_buf[16];

static void mismatch_rank(void *ctx, int rank) {
  mismatch_ctx_t *x = ctx;
  static const int g[] = {0, 1, 2, 3};
  /* Buffers are sized for what each rank claims, so a wrong copy would be an overrun that the
   * sanitizers see, and a guard pattern that the check below sees. */
  float buf[64];
  uint8_t recv[4 * 64];
  for (int i = 0; i < 64; i++) buf[i] = (float)(rank + i);
  memset(recv, 0xab, sizeof recv);
  dit_status_t s = DIT_OK;
  switch (x->kind) {
    case MM_COUNT:
      s = dit_comm_allreduce_sum(x->c, rank, g, 4, buf, rank == 2 ? 12 : 10, DIT_F32);
      break;
    case MM_DTYPE:
      s = dit_comm_allreduce_sum(x->c, rank, g, 4, buf, 10, rank == 1 ? DIT_BF16 : DIT_F32);
      break;
    case MM_GATHER_BYTES:
      s = dit_comm_allgather(x->c, rank, g, 4, buf, rank == 3 ? 64 : 16, recv);
      break;
    case MM_CHUNK:
      s = dit_comm_alltoall(x->c, rank, g, 4, buf, recv, rank == 0 ? 8 : 16);
      break;
    case MM_ROOT:
      s = dit_comm_broadcast(x->c, rank, g, 4, rank == 1 ? 1 : 0, buf, 16);
      break;
    case MM_OP:
      s = rank == 2 ? dit_comm_barrier(x->c, rank, g, 4)
                    : dit_comm_allreduce_sum(x->c, rank, g, 4, buf, 4, DIT_F32);
      break;
    case MM_NULL_BUF:
      s = dit_comm_allreduce_sum(x->c, rank, g, 4, rank == 1 ? NULL : buf, 4, DIT_F32);
      break;
    case MM_SHARED_BUF:
      s = dit_comm_allreduce_sum(x->c, rank, g, 4, rank >= 2 ? shared_buf : buf, 4, DIT_F32);
      break;
    case MM_BAD_DTYPE:
      s = dit_comm_allreduce_sum(x->c, rank, g, 4, buf, 4, rank == 2 ? DIT_F16 : DIT_F32);
      break;
    case MM_SHIFT_DISTANCE:
      s = dit_comm_shift(x->c, rank, g, 4, rank == 1 ? 3 : 1, buf, recv, 16);
      break;
    case MM_SHIFT_BYTES:
      s = dit_comm_shift(x->c, rank, g, 4, 2, buf, recv, rank == 3 ? 12 : 16);
      break;
    case MM_SHIFT_RANGE:
      s = dit_comm_shift(x->c, rank, g, 4, rank == 2 ? 4 : 1, buf, recv, 16);
      break;
    case MM_SHIFT_OVERLAP: /* rank 0 shifts within its own buffer */
      s = dit_comm_shift(x->c, rank, g, 4, 1, buf, rank == 0 ? (uint8_t *)buf + 8 : recv, 16);
      break;
  }
  char needle[200];
  snprintf(needle, sizeof needle, kMismatchNeedle[x->kind], rank);
  expect_err(s, DIT_CODE_INVALID_ARGUMENT, needle, "mismatch", rank);
  int changed = 0;
  for (int i = 0; i < 64; i++) changed += buf[i] != (float)(rank + i);
  for (size_t i = 0; i < sizeof recv; i++) changed += recv[i] != 0xab;
  tcheck(!changed, "mismatch kind %d at rank %d: %d values changed", x->kind, rank, changed);
  /* The group stays usable after a refused call. */
  float v = (float)rank;
  expect_ok(dit_comm_allreduce_sum(x->c, rank, g, 4, &v, 1, DIT_F32), "after mismatch", rank);
  tcheck(v == 6.0f, "after mismatch kind %d at rank %d: sum %g", x->kind, rank, (double)v);
}

static void test_mismatch(void) {
  for (int kind = 0; kind < MM_KINDS; kind++) {
    mismatch_ctx_t x = {.kind = kind};
    CHECK_OK(dit_comm_create_local(4, 20000, &x.c));
    run_ranks(4, mismatch_rank, &x);
    dit_comm_destroy(x.c);
  }
}

/* Problems no rendezvous can happen for fail at once, for the caller only. */
static void test_local_args(void) {
  dit_comm_t *c = NULL;
  CHECK_ERR(dit_comm_create_local(0, 0, &c), INVALID_ARGUMENT, "world 0");
  CHECK_ERR(dit_comm_create_local(2, -1, &c), INVALID_ARGUMENT, "timeout_ms -1");
  CHECK_ERR(dit_comm_create_local(2, 0, NULL), INVALID_ARGUMENT, "out is NULL");
  CHECK_OK(dit_comm_create_local(4, 1000, &c));
  float v = 1;
  static const int g[] = {0, 1}, dup[] = {0, 0}, out_of_range[] = {0, 4}, neg[] = {-1, 0};
  CHECK_ERR(dit_comm_allreduce_sum(c, 4, g, 2, &v, 1, DIT_F32), INVALID_ARGUMENT,
            "rank 4 is not in 0..3");
  CHECK_ERR(dit_comm_allreduce_sum(c, 2, g, 2, &v, 1, DIT_F32), INVALID_ARGUMENT,
            "rank 2 is not a member");
  CHECK_ERR(dit_comm_allreduce_sum(c, 0, dup, 2, &v, 1, DIT_F32), INVALID_ARGUMENT,
            "rank 0 appears twice");
  CHECK_ERR(dit_comm_barrier(c, 0, out_of_range, 2), INVALID_ARGUMENT, "(rank 4) is not in 0..3");
  CHECK_ERR(dit_comm_barrier(c, 0, neg, 2), INVALID_ARGUMENT, "(rank -1)");
  CHECK_ERR(dit_comm_barrier(c, 0, g, 0), INVALID_ARGUMENT, "group size 0");
  CHECK_ERR(dit_comm_barrier(c, 0, g, 5), INVALID_ARGUMENT, "group size 5");
  CHECK_ERR(dit_comm_barrier(c, 0, NULL, 2), INVALID_ARGUMENT, "group size");
  CHECK_ERR(dit_comm_barrier(NULL, 0, g, 2), INVALID_ARGUMENT, "NULL");
  /* A one-member group reports argument errors through its own rendezvous. */
  static const int g1[] = {1};
  uint8_t b[4] = {0};
  CHECK_ERR(dit_comm_broadcast(c, 1, g1, 1, 0, b, 4), INVALID_ARGUMENT, "root 0 is not a member");
  CHECK_ERR(dit_comm_allreduce_sum(c, 1, g1, 1, b + 1, 1, DIT_F32), INVALID_ARGUMENT, "aligned");
  CHECK_ERR(dit_comm_allreduce_sum(c, 1, g1, 1, b, SIZE_MAX / 2, DIT_F32), OUT_OF_RANGE,
            "overflows");
  CHECK_ERR(dit_comm_allgather(c, 1, g1, 1, NULL, 4, b), INVALID_ARGUMENT, "send is NULL");
  CHECK_OK(dit_comm_allgather(c, 1, g1, 1, NULL, 0, NULL));
  CHECK_OK(dit_comm_broadcast(c, 1, g1, 1, 1, b, 4));
  /* A shift in a group of one is a copy, at distance 0 only, between buffers apart. */
  uint8_t d[4] = {9, 8, 7, 6};
  CHECK_OK(dit_comm_shift(c, 1, g1, 1, 0, d, b, 4));
  CHECK(memcmp(b, d, 4) == 0);
  CHECK_ERR(dit_comm_shift(c, 1, g1, 1, 1, d, b, 4), INVALID_ARGUMENT, "distance 1 is not in 0..0");
  CHECK_ERR(dit_comm_shift(c, 1, g1, 1, -1, d, b, 4), INVALID_ARGUMENT, "distance -1");
  CHECK_ERR(dit_comm_shift(c, 1, g1, 1, 0, d, d + 1, 2), INVALID_ARGUMENT, "send and recv overlap");
  CHECK_ERR(dit_comm_shift(c, 1, g1, 1, 0, NULL, b, 4), INVALID_ARGUMENT, "send is NULL");
  CHECK_OK(dit_comm_shift(c, 1, g1, 1, 0, NULL, NULL, 0));
  dit_comm_destroy(c);
  dit_comm_destroy(NULL);
  CHECK_EQ_INT(dit_comm_world(NULL), 0);
}

int main(void) {
  test_local_args();
  test_order_matters();
  test_reference();
  test_bf16_identical();
  test_meshes();
  test_alternating();
  test_mismatch();
  test_timeout();
  test_shift_timeout();
  test_abort();
  return check_summary("test_comm");
}
