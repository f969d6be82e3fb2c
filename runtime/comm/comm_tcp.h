/* Collectives between the processes of one host over TCP (loopback), for ranks that run one
 * per process on the CPU backend: a full mesh of connections, every collective an exchange
 * of whole buffers between the group's members. Reductions add contributions in fp32 in group
 * order and round once, exactly as the in-process communicator does, so a multi-process run
 * gives the bytes of a one-process run. Ranks meet through the launch's rendezvous (its port),
 * which also stays open as the liveness channel; their own listening ports are the system's
 * choice, bound to the interface they meet rank 0 on (never every interface), exchanged
 * through rank 0; every mesh connection proves the job secret both ways. */
#ifndef DIT_RUNTIME_COMM_COMM_TCP_H
#define DIT_RUNTIME_COMM_COMM_TCP_H

#include <stddef.h>

#include "base/dtype.h"
#include "base/status.h"
#include "runtime/launch/launch_env.h"

typedef struct dit_tcomm dit_tcomm_t;

/* Connects this rank to every other within timeout_ms (e->secret is required for a world of
 * more than one; connections that do not prove it are refused and logged, and the mesh goes
 * on waiting for the real ranks); each collective then waits at most ten times that for its
 * peers. */
dit_status_t dit_tcomm_create(const dit_launch_env_t *e, int timeout_ms, dit_tcomm_t **out);
void dit_tcomm_destroy(dit_tcomm_t *c);

/* group: world ranks in group order, this rank among them. Every member calls with the same
 * sizes; a member whose size differs, or that closes its connection, fails the call. */
dit_status_t dit_tcomm_allgather(dit_tcomm_t *c, const int *group, int n, const void *send, size_t bytes, void *recv);
dit_status_t dit_tcomm_alltoall(dit_tcomm_t *c, const int *group, int n, const void *send, void *recv, size_t chunk_bytes);
/* Member i sends send (bytes) to member (i + distance) % n and receives into recv from member
 * (i - distance + n) % n: one transfer each way, not the group's. distance in 0..n-1, the same
 * on every member: members whose distance or bytes differ fail the call where they exchange
 * (nothing of the other's lands in recv), the others on the deadline. send and recv must not
 * overlap. */
dit_status_t dit_tcomm_shift(dit_tcomm_t *c, const int *group, int n, int distance, const void *send, void *recv, size_t bytes);
dit_status_t dit_tcomm_allreduce_sum(dit_tcomm_t *c, const int *group, int n, void *buf, size_t count, dit_dtype_t dtype);
/* The launch's liveness: OK while no rank has failed, else ABORTED naming it (the caller owns
 * the status). report_failure tells every other rank that this one failed. */
dit_status_t dit_tcomm_status(dit_tcomm_t *c);
void dit_tcomm_report_failure(dit_tcomm_t *c, const char *why);
/* This rank failed: its collectives in flight (another thread's) return ABORTED within 0.1 s,
 * and so does every later one. Thread-safe. */
void dit_tcomm_abort(dit_tcomm_t *c);
dit_status_t dit_tcomm_broadcast(dit_tcomm_t *c, const int *group, int n, int root, void *buf, size_t bytes);

#endif
