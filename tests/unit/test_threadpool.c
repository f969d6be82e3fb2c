/* Pins the thread pool's contract: every index covered exactly once, chunks no smaller than
 * the grain, worker ids in range, one-thread pools, nested and concurrent callers. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "runtime/cpu/threadpool.h"

typedef struct cover {
  atomic_int *hits;
  int64_t n, grain;
  int threads;
  atomic_int bad_range, bad_worker, small_chunk, calls;
  atomic_int worker_used[64];
} cover_t;

static void cover_fn(void *ctx, int64_t begin, int64_t end, int worker) {
  cover_t *c = ctx;
  atomic_fetch_add(&c->calls, 1);
  if (begin < 0 || end > c->n || begin >= end) atomic_fetch_add(&c->bad_range, 1);
  if (worker < 0 || worker >= c->threads) atomic_fetch_add(&c->bad_worker, 1);
  else if (worker < 64) atomic_fetch_add(&c->worker_used[worker], 1);
  const int64_t min_chunk = c->n < c->grain ? c->n : c->grain;
  if (end - begin < min_chunk) atomic_fetch_add(&c->small_chunk, 1);
  for (int64_t i = begin; i < end && i < c->n && i >= 0; i++) atomic_fetch_add(&c->hits[i], 1);
}

/* Runs one parallel_for and checks every property; returns the number of distinct workers. */
static int run_cover(dit_pool_t *p, int64_t n, int64_t grain) {
  cover_t c;
  memset(&c, 0, sizeof c);
  c.hits = calloc((size_t)(n > 0 ? n : 1), sizeof *c.hits);
  c.n = n;
  c.grain = grain < 1 ? 1 : grain;
  c.threads = dit_pool_threads(p);
  dit_pool_parallel_for(p, n, grain, cover_fn, &c);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; i++) wrong += atomic_load(&c.hits[i]) != 1;
  if (wrong || c.bad_range || c.bad_worker || c.small_chunk)
    fprintf(stderr, "threads %d n %lld grain %lld: %lld indices not hit once, %d bad ranges, "
            "%d bad workers, %d chunks under the grain\n", c.threads, (long long)n,
            (long long)grain, (long long)wrong, c.bad_range, c.bad_worker, c.small_chunk);
  CHECK_EQ_INT(wrong, 0);
  CHECK_EQ_INT(atomic_load(&c.bad_range), 0);
  CHECK_EQ_INT(atomic_load(&c.bad_worker), 0);
  CHECK_EQ_INT(atomic_load(&c.small_chunk), 0);
  if (n <= 0) CHECK_EQ_INT(atomic_load(&c.calls), 0);
  int used = 0;
  for (int w = 0; w < 64; w++) used += atomic_load(&c.worker_used[w]) > 0;
  free(c.hits);
  return used;
}

static void test_coverage(void) {
  static const int threads[] = {1, 2, 3, 4, 7, 16};
  static const int64_t ns[] = {0, 1, 2, 3, 5, 17, 64, 100, 1000, 4097, 100003};
  static const int64_t grains[] = {0, 1, 2, 3, 7, 64, 1000, 5000, 1 << 20};
  for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++) {
    dit_pool_t *p = NULL;
    CHECK_OK(dit_pool_create(threads[ti], &p));
    if (!p) continue;
    CHECK_EQ_INT(dit_pool_threads(p), threads[ti]);
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
      for (size_t gi = 0; gi < sizeof grains / sizeof *grains; gi++) run_cover(p, ns[ni], grains[gi]);
    dit_pool_destroy(p);
  }
}

static void test_default_and_single(void) {
  dit_pool_t *p = NULL;
  CHECK_OK(dit_pool_create(0, &p));
  CHECK(p && dit_pool_threads(p) >= 1);
  if (p) run_cover(p, 12345, 10);
  dit_pool_destroy(p);

  p = NULL;
  CHECK_OK(dit_pool_create(-3, &p));
  CHECK(p && dit_pool_threads(p) >= 1);
  dit_pool_destroy(p);

  /* One thread: the caller does everything as worker 0. */
  p = NULL;
  CHECK_OK(dit_pool_create(1, &p));
  if (p) {
    CHECK_EQ_INT(run_cover(p, 1000, 1), 1);
    CHECK_EQ_INT(run_cover(p, 1, 1), 1);
  }
  dit_pool_destroy(p);
  dit_pool_destroy(NULL);
}

/* Many short calls in a row catch lost wake-ups and a job slot reused too early. */
static void test_repeated(void) {
  dit_pool_t *p = NULL;
  CHECK_OK(dit_pool_create(4, &p));
  if (!p) return;
  for (int i = 0; i < 3000; i++) run_cover(p, 1 + i % 97, 1 + i % 5);
  dit_pool_destroy(p);
}

static void slow_fn(void *ctx, int64_t begin, int64_t end, int worker) {
  atomic_int *used = ctx;
  atomic_fetch_add(&used[worker], 1);
  usleep(1000);
}

/* Work that outlasts a wake-up must actually be shared (tried a few times: the machine may be
 * busy, but not for all of them). */
static void test_workers_participate(void) {
  dit_pool_t *p = NULL;
  CHECK_OK(dit_pool_create(2, &p));
  if (!p) return;
  int shared = 0;
  for (int attempt = 0; attempt < 5 && !shared; attempt++) {
    atomic_int used[2];
    atomic_init(&used[0], 0);
    atomic_init(&used[1], 0);
    dit_pool_parallel_for(p, 8, 1, slow_fn, used);
    CHECK_EQ_INT(atomic_load(&used[0]) + atomic_load(&used[1]), 8);
    shared = atomic_load(&used[0]) > 0 && atomic_load(&used[1]) > 0;
  }
  CHECK(shared);
  dit_pool_destroy(p);
}

typedef struct nested {
  dit_pool_t *p;
  atomic_int inner_hits[8 * 50];
  atomic_int bad_worker;
} nested_t;

typedef struct inner {
  nested_t *n;
  int64_t row;
  int outer_worker;
} inner_t;

static void inner_fn(void *ctx, int64_t begin, int64_t end, int worker) {
  inner_t *in = ctx;
  if (worker != in->outer_worker) atomic_fetch_add(&in->n->bad_worker, 1);
  for (int64_t i = begin; i < end; i++) atomic_fetch_add(&in->n->inner_hits[in->row * 50 + i], 1);
}

static void outer_fn(void *ctx, int64_t begin, int64_t end, int worker) {
  nested_t *n = ctx;
  for (int64_t r = begin; r < end; r++) {
    inner_t in = {n, r, worker};
    dit_pool_parallel_for(n->p, 50, 1, inner_fn, &in);
  }
}

/* The header forbids nested calls; this implementation runs them inline rather than
 * deadlocking, which this pins. */
static void test_nested_inline(void) {
  nested_t *n = calloc(1, sizeof *n);
  CHECK_OK(dit_pool_create(3, &n->p));
  if (n->p) {
    dit_pool_parallel_for(n->p, 8, 1, outer_fn, n);
    int wrong = 0;
    for (int i = 0; i < 8 * 50; i++) wrong += atomic_load(&n->inner_hits[i]) != 1;
    CHECK_EQ_INT(wrong, 0);
    CHECK_EQ_INT(atomic_load(&n->bad_worker), 0);
  }
  dit_pool_destroy(n->p);
  free(n);
}

typedef struct caller {
  dit_pool_t *p;
  int failures;
} caller_t;

static void sum_fn(void *ctx, int64_t begin, int64_t end, int worker) {
  atomic_llong *sum = ctx;
  long long s = 0;
  for (int64_t i = begin; i < end; i++) s += i;
  atomic_fetch_add(sum, s);
}

static void *caller_main(void *arg) {
  caller_t *c = arg;
  for (int it = 0; it < 300; it++) {
    atomic_llong sum;
    atomic_init(&sum, 0);
    const int64_t n = 1000 + it;
    dit_pool_parallel_for(c->p, n, 16, sum_fn, &sum);
    if (atomic_load(&sum) != (long long)(n * (n - 1) / 2)) c->failures++;
  }
  return NULL;
}

/* Independent threads sharing one pool are serialized, not corrupted. */
static void test_concurrent_callers(void) {
  dit_pool_t *p = NULL;
  CHECK_OK(dit_pool_create(3, &p));
  if (!p) return;
  caller_t cs[3] = {{p, 0}, {p, 0}, {p, 0}};
  pthread_t th[3];
  for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, caller_main, &cs[i]);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(cs[i].failures, 0);
  dit_pool_destroy(p);
}

static void test_null_pool(void) {
  cover_t c;
  memset(&c, 0, sizeof c);
  c.hits = calloc(100, sizeof *c.hits);
  c.n = 100;
  c.grain = 1;
  c.threads = 1;
  dit_pool_parallel_for(NULL, 100, 1, cover_fn, &c);
  int wrong = 0;
  for (int i = 0; i < 100; i++) wrong += atomic_load(&c.hits[i]) != 1;
  CHECK_EQ_INT(wrong, 0);
  CHECK_EQ_INT(atomic_load(&c.bad_worker), 0);
  CHECK_EQ_INT(dit_pool_threads(NULL), 1);
  free(c.hits);
}

int main(void) {
  test_coverage();
  test_default_and_single();
  test_repeated();
  test_workers_participate();
  test_nested_inline();
  test_concurrent_callers();
  test_null_pool();
  return check_summary("test_threadpool");
}
