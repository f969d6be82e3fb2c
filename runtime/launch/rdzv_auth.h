/* The sockets under the rendezvous and the TCP mesh: bounded frame I/O, where rank 0's
 * listeners bind, and the handshake that admits only processes that know the job secret.
 * The accepting side challenges every connection with a fresh nonce; the connecting side
 * answers with an HMAC over it and its claimed rank; the acceptor checks that in constant
 * time and proves the secret back over the connecting side's own nonce. A connection that
 * fails is logged (one line naming its address and why), closed and forgotten: the acceptor
 * goes on waiting for the real ranks until its deadline. */
#ifndef DIT_RUNTIME_LAUNCH_RDZV_AUTH_H
#define DIT_RUNTIME_LAUNCH_RDZV_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/status.h"
#include "runtime/launch/launch_env.h"
#include "runtime/launch/rdzv_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A connection's first frame must complete within this; a silent one is closed then. */
#define DIT_RDZV_AUTH_MS 10000

/* 0, an errno, ETIMEDOUT at the deadline (dit_now_ms time), EPIPE when the peer closed. */
int dit_rdzv_write_all(int fd, const void *buf, size_t n, int64_t deadline);
int dit_rdzv_read_all(int fd, void *buf, size_t n, int64_t deadline);
int dit_rdzv_send(int fd, int type, int32_t a, int32_t b, const void *body, size_t len, int64_t deadline);
/* Reads one frame into buf (at least DIT_RDZV_HDR_BYTES + DIT_RDZV_MAX_BODY bytes) and parses
 * it into m (whose body points into buf). Returns 0 or an errno as above; EPROTO for bytes
 * that are not a well-formed frame, with the parser's reason in *why when why is not NULL
 * (the caller owns it). */
int dit_rdzv_recv(int fd, dit_rdzv_msg_t *m, unsigned char *buf, int64_t deadline, dit_status_t *why);

/* "127.0.0.1:4000" / "[::1]:4000" of a socket address. */
void dit_rdzv_format_addr(const struct sockaddr *sa, char *buf, size_t cap);

/* Where rank 0's listeners bind: the address e->addr resolves to when it is one of this host's
 * (a loopback address when e->addr is local), never the wildcard; port 0. An address that is
 * not this host's is FAILED_PRECONDITION naming the variable and what it resolved to. */
dit_status_t dit_rdzv_bind_address(const dit_launch_env_t *e, struct sockaddr_storage *out, socklen_t *out_len);

/* A non-blocking, close-on-exec listener on addr (its port; 0 lets the system pick), its port
 * in *out_port. Returns 0 or an errno. */
int dit_rdzv_listen(const struct sockaddr *addr, socklen_t len, int backlog, int *out_fd, int *out_port);

/* A non-blocking, close-on-exec connection to addr, its own end bound to `local` (port 0)
 * when local is not NULL, so the peer sees the address this rank listens on. Returns the
 * descriptor, or -1 with errno (ETIMEDOUT at the deadline). */
int dit_rdzv_connect(const struct sockaddr *addr, socklen_t len, const struct sockaddr *local, socklen_t local_len,
                     int64_t deadline);

/* What a connection that passed the handshake claimed. */
typedef struct dit_rdzv_peer {
  int32_t rank, world;
  uint32_t extra;
  char addr[64];
} dit_rdzv_peer_t;

typedef struct dit_rdzv_acceptor dit_rdzv_acceptor_t;

/* Takes ownership of the listening socket lfd (closed by destroy, also on failure). `who`
 * names this side in its log lines ("rendezvous, rank 0"); the secret is copied. */
dit_status_t dit_rdzv_acceptor_create(int lfd, int channel, int my_rank, const unsigned char *secret, size_t secret_len,
                                      const char *who, dit_rdzv_acceptor_t **out);
/* The next connection that proved the secret, its proof already sent back: *out_fd
 * (non-blocking, close-on-exec; the caller owns it) and what it claimed. Connections that
 * fail are refused meanwhile. DEADLINE_EXCEEDED (a bare message: callers name what they
 * waited for) at the deadline; IO when poll fails. */
dit_status_t dit_rdzv_acceptor_next(dit_rdzv_acceptor_t *a, int64_t deadline, int *out_fd, dit_rdzv_peer_t *out);
/* How many connections were refused so far, and how many of those failed the MAC itself (a
 * process that speaks our protocol with another secret: likely a rank of this job set up
 * with a different one). */
int dit_rdzv_acceptor_refused(const dit_rdzv_acceptor_t *a, int *out_bad_mac);
/* Closes the listener and every connection still being checked (each logged). NULL is a no-op. */
void dit_rdzv_acceptor_destroy(dit_rdzv_acceptor_t *a);

/* The connecting side of the handshake on a connected socket fd: waits for the challenge,
 * answers as rank/world with `extra`, and checks the acceptor's proof that it is
 * `acceptor_rank` of this job. `peer` names the other side in messages ("rank 0 at
 * 127.0.0.1:4000"). A refusal or a wrong proof is FAILED_PRECONDITION saying the ranks do not
 * share one job secret (naming e's variable); a peer that is not a ditrun rank, or closes, is
 * ABORTED; the deadline DEADLINE_EXCEEDED. */
dit_status_t dit_rdzv_handshake(int fd, int channel, const dit_launch_env_t *e, uint32_t extra, int acceptor_rank,
                                const char *peer, int64_t deadline);

#ifdef __cplusplus
}
#endif
#endif
