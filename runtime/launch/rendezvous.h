/* The ranks' own small TCP rendezvous: every rank meets rank 0, which hands them its payload
 * (the NCCL unique id); the connections then stay open as a liveness channel, so a rank that
 * dies or fails makes every other rank hear of it instead of hanging in a collective. */
#ifndef DIT_RUNTIME_LAUNCH_RENDEZVOUS_H
#define DIT_RUNTIME_LAUNCH_RENDEZVOUS_H

#include <stddef.h>
#include <sys/socket.h>

#include "base/status.h"
#include "runtime/launch/launch_env.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DIT_RDZV_MAX_PAYLOAD 4096

typedef struct dit_rendezvous dit_rendezvous_t;

/* Called at most once per rendezvous, on its watcher thread, when another rank has failed:
 * its connection dropped without a clean close, or it called dit_rendezvous_report_failure.
 * failed_rank is that rank; why is borrowed for the call. Keep it short and thread-safe (abort
 * the collectives, set a flag); it must not call dit_rendezvous_close. */
typedef void (*dit_rendezvous_failure_fn)(void *ctx, int failed_rank, const char *why);

/* Meets the other ranks of e (e->world processes, each calling this once). Rank 0 listens on
 * e->port, bound to e->addr's own interface only (dit_rdzv_bind_address: loopback when it is
 * local; an address that is not this host's is refused), or on the listener `ditrun launch`
 * handed it (e->rdzv_listen_fd); every other rank connects to e->addr:e->port, retrying until
 * the deadline. Every connection first proves e->secret (required for a world above one) both
 * ways; rank 0 refuses and logs any that does not (a port scanner, a stray process, a rank
 * with another secret) and goes on waiting for the real ranks. A rank whose secret differs
 * fails at once with FAILED_PRECONDITION naming the secret's variables. Every rank
 * passes the same len (<= DIT_RDZV_MAX_PAYLOAD); rank 0's `payload` is copied into every
 * rank's out_payload (len bytes; rank 0's own included). Other ranks' payload is ignored and
 * may be NULL.
 *
 * Each rank fails within timeout_ms (non-zero ranks that reached rank 0 wait a little longer,
 * at most a quarter of it and never over a second, to hear rank 0's verdict): ranks that never
 * arrive give DEADLINE_EXCEEDED naming them (rank 0 names them and tells the ranks that did
 * arrive); a rank 0 that cannot be reached gives DEADLINE_EXCEEDED naming the address; a world
 * size, protocol version or payload length that differs between ranks, or a rank number taken
 * twice, gives INVALID_ARGUMENT naming both values, on every rank that got as far as rank 0.
 *
 * On success a watcher thread keeps the connections and calls on_failure (may be NULL) when
 * another rank fails. The caller owns *out (dit_rendezvous_close). */
dit_status_t dit_rendezvous(const dit_launch_env_t *e, const void *payload, size_t len, int timeout_ms,
                            dit_rendezvous_failure_fn on_failure, void *on_failure_ctx,
                            dit_rendezvous_t **out, void *out_payload);

/* Tells every other rank that this one failed (`why` goes into their messages); their
 * on_failure fires. This process's own on_failure does not. Thread-safe; later calls and
 * calls after another rank's failure are ignored. */
void dit_rendezvous_report_failure(dit_rendezvous_t *r, const char *why);

/* OK while no rank has failed; afterwards ABORTED naming the failed rank and why (the caller
 * owns the status). For runtimes that poll rather than take the callback. */
dit_status_t dit_rendezvous_status(dit_rendezvous_t *r);

/* The addresses of this rank's connection to rank 0: the local end (where this rank's own
 * listeners bind, so its peers reach it the way it reached rank 0) and rank 0's end. On
 * rank 0 both are its rendezvous listener's address. FAILED_PRECONDITION for a world of one. */
dit_status_t dit_rendezvous_addresses(const dit_rendezvous_t *r, struct sockaddr_storage *local, socklen_t *local_len,
                                      struct sockaddr_storage *root, socklen_t *root_len);

int dit_rendezvous_rank(const dit_rendezvous_t *r);
int dit_rendezvous_world(const dit_rendezvous_t *r);

/* Clean shutdown: says goodbye to the other ranks (a clean close is not a failure for them),
 * stops the watcher, closes the connections and frees r. NULL is a no-op. */
void dit_rendezvous_close(dit_rendezvous_t *r);

#ifdef __cplusplus
}
#endif
#endif
