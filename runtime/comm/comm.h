/* Collectives between the ranks of a topology, behind one interface: in-process (ranks are
 * threads of one process; the CPU backend's multi-rank runs and CI) and, later, NCCL. Groups
 * are lists of world ranks in group order; every member calls the same collective with the
 * same group and sizes, and the call returns when the collective is complete for that rank.
 * Results are deterministic: reductions add contributions in group order. */
#ifndef DIT_RUNTIME_COMM_COMM_H
#define DIT_RUNTIME_COMM_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"

typedef struct dit_comm dit_comm_t;

/* In-process communicator for `world` ranks (threads). timeout_ms bounds every wait (a rank
 * that never arrives makes the others fail with DEADLINE_EXCEEDED naming the group and the
 * missing ranks); 0 = no limit. A group that timed out fails every later call at once (its
 * missing rank may still come); other groups are unaffected. Members that disagree (collective,
 * sizes, dtype, root, distance) or whose buffers overlap one another's all get INVALID_ARGUMENT, and no
 * buffer changes. The caller owns *out. */
dit_status_t dit_comm_create_local(int world, int timeout_ms, dit_comm_t **out);
void dit_comm_destroy(dit_comm_t *c);
int dit_comm_world(const dit_comm_t *c);

/* Marks the communicator failed (e.g. a rank's step failed): every rank blocked in or
 * entering a collective returns ABORTED with `why` in the message. Thread-safe, idempotent. */
void dit_comm_abort(dit_comm_t *c, int rank, const char *why);

/* buf (count elements of f32 or bf16) becomes the elementwise sum over the group, computed
 * in fp32 in group order and rounded once to the dtype. */
dit_status_t dit_comm_allreduce_sum(dit_comm_t *c, int rank, const int *group, int n, void *buf,
                                    size_t count, dit_dtype_t dtype);
/* recv (n * bytes) receives every member's send (bytes) in group order. send and recv must
 * not overlap. */
dit_status_t dit_comm_allgather(dit_comm_t *c, int rank, const int *group, int n,
                                const void *send, size_t bytes, void *recv);
/* send holds n chunks of chunk_bytes, chunk j for member j; recv receives n chunks, chunk i
 * from member i. */
dit_status_t dit_comm_alltoall(dit_comm_t *c, int rank, const int *group, int n,
                               const void *send, void *recv, size_t chunk_bytes);
/* Copies root's buf (bytes) to every member's buf. root is a world rank in the group. */
dit_status_t dit_comm_broadcast(dit_comm_t *c, int rank, const int *group, int n, int root,
                                void *buf, size_t bytes);
/* Point-to-point around the group: the member at place i sends send (bytes) to the member at
 * place (i + distance) % n and receives into recv what the member at (i - distance + n) % n
 * sent, in one call. distance is in 0..n-1 (0 copies send to recv) and the same on every
 * member; send and recv must not overlap. Moves bytes, not n * bytes, per member. */
dit_status_t dit_comm_shift(dit_comm_t *c, int rank, const int *group, int n, int distance,
                            const void *send, void *recv, size_t bytes);
dit_status_t dit_comm_barrier(dit_comm_t *c, int rank, const int *group, int n);

#endif
