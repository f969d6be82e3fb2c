/* The CPU backend's thread pool: persistent workers woken per parallel-for, chunks handed
 * out dynamically so uneven chunks (tails, cache effects) balance themselves. Beyond the
 * header's contract: a NULL pool runs fn inline, a nested call from fn runs inline on its
 * worker instead of deadlocking, and callers on different threads are serialized. */
#include "runtime/cpu/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* More chunks than threads lets a fast worker take over a slow one's share; more than a few
 * per thread only adds hand-out traffic. */
#define DIT_POOL_CHUNKS_PER_THREAD 4

typedef struct dit_pool_worker {
  dit_pool_t *pool;
  int id;
  pthread_t thread;
} dit_pool_worker_t;

struct dit_pool {
  int n_threads;
  dit_pool_worker_t *workers; /* n_threads - 1 of them: the caller is worker 0 */
  int started;                /* how many worker threads exist (for partial teardown) */

  /* Serializes callers from different threads: the job slot below is shared. */
  pthread_mutex_t call_mu;

  pthread_mutex_t mu;
  pthread_cond_t wake_cv; /* workers wait here for a new generation or shutdown */
  pthread_cond_t done_cv; /* the caller waits here for every worker to check out */
  uint64_t generation;
  int busy;     /* workers still inside the current generation */
  int shutdown;

  /* The current job; written by the caller before bumping generation, read-only after. */
  dit_pool_fn fn;
  void *ctx;
  int64_t n_chunks, chunk_base, chunk_extra;
  atomic_llong next_chunk;
};

/* Lets a call made from inside fn run inline instead of deadlocking on the busy pool. */
static _Thread_local const dit_pool_t *dit_pool_current;
static _Thread_local int dit_pool_current_worker;

/* Chunk c covers [begin, end): the first chunk_extra chunks get one item more, so all are
 * within one item of each other and none is below the grain. */
static void run_chunks(dit_pool_t *p, int worker) {
  const dit_pool_t *saved = dit_pool_current;
  int saved_worker = dit_pool_current_worker;
  dit_pool_current = p;
  dit_pool_current_worker = worker;
  for (;;) {
    int64_t c = atomic_fetch_add_explicit(&p->next_chunk, 1, memory_order_relaxed);
    if (c >= p->n_chunks) break;
    int64_t begin = c * p->chunk_base + (c < p->chunk_extra ? c : p->chunk_extra);
    int64_t end = begin + p->chunk_base + (c < p->chunk_extra ? 1 : 0);
    p->fn(p->ctx, begin, end, worker);
  }
  dit_pool_current = saved;
  dit_pool_current_worker = saved_worker;
}

static void *worker_main(void *arg) {
  dit_pool_worker_t *w = arg;
  dit_pool_t *p = w->pool;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->shutdown && p->generation == seen) pthread_cond_wait(&p->wake_cv, &p->mu);
    if (p->shutdown) break;
    seen = p->generation;
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, w->id);
    pthread_mutex_lock(&p->mu);
    if (--p->busy == 0) pthread_cond_signal(&p->done_cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

dit_status_t dit_pool_create(int n_threads, dit_pool_t **out) {
  *out = NULL;
  if (n_threads <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    n_threads = n > 0 ? (int)n : 1;
  }
  if (n_threads > 4096)
    return DIT_ERR(INVALID_ARGUMENT, "pool: %d threads requested, at most 4096", n_threads);
  dit_pool_t *p = calloc(1, sizeof *p);
  if (!p) return DIT_ERR(RESOURCE_EXHAUSTED, "pool: cannot allocate the pool");
  p->n_threads = n_threads;
  pthread_mutex_init(&p->call_mu, NULL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake_cv, NULL);
  pthread_cond_init(&p->done_cv, NULL);
  atomic_init(&p->next_chunk, 0);
  if (n_threads > 1) {
    p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
    if (!p->workers) {
      dit_pool_destroy(p);
      return DIT_ERR(RESOURCE_EXHAUSTED, "pool: cannot allocate %d workers", n_threads - 1);
    }
    for (int i = 0; i < n_threads - 1; i++) {
      p->workers[i].pool = p;
      p->workers[i].id = i + 1;
      int rc = pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]);
      if (rc != 0) {
        dit_pool_destroy(p);
        return DIT_ERR(RESOURCE_EXHAUSTED, "pool: pthread_create failed for worker %d of %d (error %d)",
                       i + 1, n_threads, rc);
      }
      p->started++;
    }
  }
  *out = p;
  return DIT_OK;
}

void dit_pool_destroy(dit_pool_t *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->shutdown = 1;
  pthread_cond_broadcast(&p->wake_cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->started; i++) pthread_join(p->workers[i].thread, NULL);
  free(p->workers);
  pthread_cond_destroy(&p->done_cv);
  pthread_cond_destroy(&p->wake_cv);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->call_mu);
  free(p);
}

int dit_pool_threads(const dit_pool_t *p) { return p ? p->n_threads : 1; }

void dit_pool_parallel_for(dit_pool_t *p, int64_t n, int64_t grain, dit_pool_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t threads = p ? p->n_threads : 1;
  int64_t n_chunks = n / grain;
  if (n_chunks > threads * DIT_POOL_CHUNKS_PER_THREAD) n_chunks = threads * DIT_POOL_CHUNKS_PER_THREAD;
  if (n_chunks < 1) n_chunks = 1;

  /* A nested call runs inline on the worker that made it (the pool is busy with the outer
   * call); one chunk or one thread gains nothing from a hand-off. */
  if (p && dit_pool_current == p) {
    fn(ctx, 0, n, dit_pool_current_worker);
    return;
  }
  if (n_chunks == 1 || threads == 1) {
    fn(ctx, 0, n, 0);
    return;
  }

  pthread_mutex_lock(&p->call_mu);
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->ctx = ctx;
  p->n_chunks = n_chunks;
  p->chunk_base = n / n_chunks;
  p->chunk_extra = n % n_chunks;
  atomic_store_explicit(&p->next_chunk, 0, memory_order_relaxed);
  p->busy = p->n_threads - 1;
  p->generation++;
  pthread_cond_broadcast(&p->wake_cv);
  pthread_mutex_unlock(&p->mu);

  run_chunks(p, 0);

  /* Every worker must check out before the job slot can be reused by the next call. */
  pthread_mutex_lock(&p->mu);
  while (p->busy > 0) pthread_cond_wait(&p->done_cv, &p->mu);
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&p->call_mu);
}
