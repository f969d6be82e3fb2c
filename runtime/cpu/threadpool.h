/* A fixed pool of worker threads with a blocking parallel-for. */
#ifndef DIT_RUNTIME_CPU_THREADPOOL_H
#define DIT_RUNTIME_CPU_THREADPOOL_H

#include <stdint.h>

#include "base/status.h"

typedef struct dit_pool dit_pool_t;

/* n_threads <= 0 means the number of online CPUs. The caller owns *out. */
dit_status_t dit_pool_create(int n_threads, dit_pool_t **out);
void dit_pool_destroy(dit_pool_t *p);
int dit_pool_threads(const dit_pool_t *p);

/* Splits [0, n) into contiguous chunks of at least `grain` items and calls fn(ctx, begin,
 * end, worker) on the pool (the caller's thread works too); returns when all are done.
 * worker is in [0, dit_pool_threads(p)) and lets fn use per-worker scratch. Not reentrant:
 * fn must not call dit_pool_parallel_for on the same pool. */
typedef void (*dit_pool_fn)(void *ctx, int64_t begin, int64_t end, int worker);
void dit_pool_parallel_for(dit_pool_t *p, int64_t n, int64_t grain, dit_pool_fn fn, void *ctx);

#endif
