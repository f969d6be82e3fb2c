/* Collectives between GPUs through NCCL, loaded with dlopen on first use (so the same ditrun
 * runs where NCCL is absent and says so). A world communicator is made from a unique id that
 * the ranks share (through the launch's rendezvous, or in one process directly); the groups a
 * plan's collectives use are split from it, one communicator per group, its ranks in group
 * order. Every call is enqueued on the caller's CUDA stream and returns without waiting, so
 * collectives stay in order with the kernels around them. */
#ifndef DIT_RUNTIME_COMM_COMM_NCCL_H
#define DIT_RUNTIME_COMM_COMM_NCCL_H

#include <stddef.h>

#include "base/dtype.h"
#include "base/status.h"

#define DIT_NCCL_ID_BYTES 128

typedef struct dit_ncomm dit_ncomm_t;

/* Loads the library (DIT_NCCL_LIBRARY names a path, else libnccl.so.2 on the loader's path);
 * UNAVAILABLE says what is missing. *version is NCCL's (e.g. 22809), may be NULL. */
dit_status_t dit_nccl_load(int *version);

/* A fresh id for a world communicator (rank 0 makes it, every rank passes it to create). */
dit_status_t dit_nccl_unique_id(unsigned char id[DIT_NCCL_ID_BYTES]);

/* Joins the world communicator as `rank` of `world`. Blocks until every rank has joined; the
 * calling thread's current CUDA context must be the rank's device's. */
dit_status_t dit_ncomm_create(const unsigned char id[DIT_NCCL_ID_BYTES], int world, int rank, dit_ncomm_t **out);

/* Splits c: ranks that pass the same color form one communicator, ordered by key. Every rank
 * of c calls it, in the same order as every other split of c. */
dit_status_t dit_ncomm_split(dit_ncomm_t *c, int color, int key, dit_ncomm_t **out);

int dit_ncomm_size(const dit_ncomm_t *c);

/* In place: buf (count elements) becomes the sum over the communicator. */
dit_status_t dit_ncomm_allreduce_sum(dit_ncomm_t *c, void *buf, size_t count, dit_dtype_t dtype, void *stream);
/* recv (size * bytes) receives every rank's send (bytes) in rank order. */
dit_status_t dit_ncomm_allgather(dit_ncomm_t *c, const void *send, void *recv, size_t bytes, void *stream);
/* send holds size chunks, chunk j for rank j; recv gets size chunks, chunk i from rank i;
 * rank `skip`'s chunk (the caller's own, which it places itself) is not exchanged (-1: none). */
dit_status_t dit_ncomm_alltoall(dit_ncomm_t *c, const void *send, void *recv, size_t chunk_bytes, int skip, void *stream);

/* Rank `me` of c sends send (bytes) to rank (me + distance) % size and receives recv (bytes)
 * from rank (me - distance + size) % size: one send and one receive in one NCCL group. */
dit_status_t dit_ncomm_shift(dit_ncomm_t *c, const void *send, void *recv, size_t bytes, int me, int distance, void *stream);

/* OK, or the asynchronous error NCCL recorded for c (a peer that vanished, a transport that
 * broke). Safe from another thread while collectives run. */
dit_status_t dit_ncomm_async_error(dit_ncomm_t *c);
/* Ends collectives in flight (the kernels that wait for a peer return) and frees c. Safe from
 * another thread; c must not be used afterwards. */
void dit_ncomm_abort(dit_ncomm_t *c);
void dit_ncomm_destroy(dit_ncomm_t *c);

#endif
