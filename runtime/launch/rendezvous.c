/* The rendezvous protocol and its liveness watcher. Every message is a frame of rdzv_wire.h;
 * every connection proves the job secret first (rdzv_auth.h). Sockets are non-blocking and
 * every read and write waits with poll against a deadline, so no peer can stall a rank past
 * its timeout. */
#include "runtime/launch/rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "runtime/launch/rdzv_auth.h"
#include "runtime/launch/rdzv_wire.h"

#define MAX_TEXT DIT_RDZV_MAX_TEXT
#define FRAME_BUF (DIT_RDZV_HDR_BYTES + DIT_RDZV_MAX_BODY)
/* Frames after the meeting are tiny; a peer that cannot take one within this is as good as
 * gone, and the sender must not block its watcher or its caller for longer. */
#define SEND_MS 1000
#define CONNECT_RETRY_MS 50

struct dit_rendezvous {
  int rank, world;
  int *fds;  /* rank 0: fds[k] is rank k's connection; other ranks: fds[0] is rank 0's. -1 once closed */
  char *bye; /* bye[k]: that connection was closed cleanly */
  int n_fds;
  int wake[2];
  pthread_t watcher;
  int watcher_started;
  pthread_mutex_t mu; /* guards sends on fds, the failure state and closing */
  int failed, failed_rank, self_reported, closing;
  char why[MAX_TEXT];
  dit_rendezvous_failure_fn on_failure;
  void *ctx;
  struct sockaddr_storage local, root; /* see dit_rendezvous_addresses */
  socklen_t local_len, root_len;
};

static int remaining_ms(int64_t deadline) {
  int64_t r = deadline - dit_now_ms();
  return r < 0 ? 0 : r > 1000000000 ? 1000000000 : (int)r;
}

static int send_frame(int fd, int type, int a, int b, const void *body, size_t len, int64_t deadline) {
  return dit_rdzv_send(fd, type, a, b, body, len, deadline);
}

static void tune_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  /* A host that vanishes (power, network) sends no FIN; keepalive turns that into an error
   * on the liveness channel within about half a minute. */
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
#ifdef TCP_KEEPIDLE
  int idle = 10, intvl = 5, cnt = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
#endif
}

/* "2, 3, 5" — the first 32 ranks of the list, then how many more. */
static void format_ranks(char *buf, size_t cap, const int *ranks, int n) {
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < n && o < cap; i++) {
    if (i == 32) {
      snprintf(buf + o, cap - o, " and %d more", n - i);
      return;
    }
    int w = snprintf(buf + o, cap - o, "%s%d", i ? ", " : "", ranks[i]);
    if (w < 0) return;
    o += (size_t)w;
  }
}

static dit_code_t code_from_wire(int32_t c) {
  return c >= DIT_CODE_INVALID_ARGUMENT && c <= DIT_CODE_ABORTED ? (dit_code_t)c : DIT_CODE_INTERNAL;
}

/* ---- rank 0: listen and gather ---- */

/* The listener `ditrun launch` bound for rank 0 serves one meeting; a second rendezvous in
 * the same process binds its own. */
static int g_inherited_used;

static dit_status_t listen_on(const dit_launch_env_t *e, int *out_fd, struct sockaddr_storage *bound, socklen_t *bound_len) {
  if (e->rdzv_listen_fd > 2 && !__atomic_exchange_n(&g_inherited_used, 1, __ATOMIC_ACQ_REL)) {
    int fd = e->rdzv_listen_fd, listening = 0;
    socklen_t ol = sizeof listening;
    *bound_len = sizeof *bound;
    int port = -1;
    if (!getsockname(fd, (struct sockaddr *)bound, bound_len) && !getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol))
      port = bound->ss_family == AF_INET ? ntohs(((struct sockaddr_in *)bound)->sin_port)
           : bound->ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)bound)->sin6_port) : -1;
    if (port != e->port || !listening)
      return DIT_ERR(INVALID_ARGUMENT, "rendezvous: DIT_RDZV_LISTEN_FD=%d is not a socket listening on port %d (found port %d, %s)", fd,
                     e->port, port, listening ? "listening" : "not listening");
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) || fcntl(fd, F_SETFD, FD_CLOEXEC))
      return DIT_ERR(IO, "rendezvous: DIT_RDZV_LISTEN_FD=%d: %s", fd, strerror(errno));
    *out_fd = fd;
    return DIT_OK;
  }
  DIT_RETURN_IF(dit_rdzv_bind_address(e, bound, bound_len));
  struct sockaddr_storage a = *bound;
  if (a.ss_family == AF_INET) ((struct sockaddr_in *)&a)->sin_port = htons((uint16_t)e->port);
  else ((struct sockaddr_in6 *)&a)->sin6_port = htons((uint16_t)e->port);
  int port = 0, err = dit_rdzv_listen((struct sockaddr *)&a, *bound_len, 128, out_fd, &port);
  if (err) {
    char where[80];
    dit_rdzv_format_addr((struct sockaddr *)&a, where, sizeof where);
    return DIT_ERR(UNAVAILABLE, "rendezvous: rank 0 cannot listen on %s (%s='%s'): %s%s", where,
                   e->addr_var && e->addr_var[0] ? e->addr_var : "address", e->addr, strerror(err),
                   err == EADDRINUSE ? " (another job on this host? set DIT_RDZV_PORT to a free port)" : "");
  }
  return DIT_OK;
}

/* Tells every connected rank why the meeting failed, so each fails with rank 0's reason
 * instead of its own timeout. */
static void broadcast_error(const int *fds, int n, dit_status_t s, int64_t deadline) {
  const char *msg = dit_status_message(s);
  for (int k = 0; k < n; k++)
    if (fds[k] >= 0) send_frame(fds[k], DIT_RDZV_ERROR, (int)dit_status_code(s), 0, msg, strlen(msg), deadline);
}

/* Judges the hello of a connection that proved the secret: NULL to accept it into fds, else
 * the reason (every rank hears it: a process that knows the secret is one of ours, and a
 * mistake in its launch is the job's). Its payload size travels in `extra`. */
static dit_status_t judge_hello(const dit_launch_env_t *e, const dit_rdzv_peer_t *h, size_t len, const int *fds) {
  if (h->world != e->world)
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: world size mismatch: rank %d has world size %d, rank 0 has %d (%s from %s)", h->rank,
                   h->world, e->world, e->world_var && e->world_var[0] ? e->world_var : "world size", dit_launcher_name(e->launcher));
  if (h->rank <= 0 || h->rank >= e->world)
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: a process claims rank %d, outside 1..%d of a world of %d", h->rank, e->world - 1,
                   e->world);
  if (fds[h->rank] >= 0)
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: two processes claim rank %d (each rank must be launched once)", h->rank);
  if (h->extra != len)
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: rank %d expects a payload of %u bytes, rank 0 has %zu", h->rank, h->extra, len);
  return DIT_OK;
}

static dit_status_t gather(dit_rendezvous_t *r, const dit_launch_env_t *e, const void *payload, size_t len, int timeout_ms) {
  int *fds = r->fds;
  int lfd = -1;
  DIT_RETURN_IF(listen_on(e, &lfd, &r->local, &r->local_len));
  r->root = r->local, r->root_len = r->local_len;
  dit_rdzv_acceptor_t *acc = NULL;
  DIT_RETURN_IF(dit_rdzv_acceptor_create(lfd, DIT_RDZV_CHANNEL_RENDEZVOUS, 0, e->secret, e->secret_len, "rendezvous, rank 0", &acc));
  int64_t deadline = dit_now_ms() + timeout_ms;
  int arrived = 1;
  dit_status_t s = DIT_OK;
  while (!s && arrived < e->world) {
    int fd = -1;
    dit_rdzv_peer_t h;
    s = dit_rdzv_acceptor_next(acc, deadline, &fd, &h);
    if (s && dit_status_code(s) == DIT_CODE_DEADLINE_EXCEEDED) {
      dit_status_free(s);
      int missing[64], n_missing = 0, total = 0;
      for (int k = 1; k < e->world; k++)
        if (fds[k] < 0) {
          if (n_missing < 64) missing[n_missing++] = k;
          total++;
        }
      char list[400], refused[300] = "";
      format_ranks(list, sizeof list, missing, n_missing);
      int bad_mac = 0, n_refused = dit_rdzv_acceptor_refused(acc, &bad_mac);
      if (bad_mac)
        snprintf(refused, sizeof refused, "; %d connection%s refused for a wrong proof of the job secret: a rank with another "
                 "DIT_JOB_SECRET or DIT_JOB_SECRET_FILE?", bad_mac, bad_mac == 1 ? " was" : "s were");
      else if (n_refused)
        snprintf(refused, sizeof refused, "; %d stray connection%s refused", n_refused, n_refused == 1 ? " was" : "s were");
      s = DIT_ERR(DEADLINE_EXCEEDED, "rendezvous on %s:%d: rank%s %s%s of %d did not arrive within %d ms%s", e->addr, e->port,
                  total == 1 ? "" : "s", list, total > n_missing ? " (and more)" : "", e->world, timeout_ms, refused);
      break;
    }
    if (s) break;
    s = judge_hello(e, &h, len, fds);
    if (s) {
      send_frame(fd, DIT_RDZV_ERROR, (int)dit_status_code(s), 0, dit_status_message(s), strlen(dit_status_message(s)),
                 dit_now_ms() + SEND_MS);
      close(fd);
      break;
    }
    fds[h.rank] = fd;
    arrived++;
  }
  dit_rdzv_acceptor_destroy(acc);
  for (int k = 1; !s && k < e->world; k++) {
    int err = send_frame(fds[k], DIT_RDZV_WELCOME, 0, e->world, payload, len, deadline + SEND_MS);
    if (err)
      s = DIT_ERR(ABORTED, "rendezvous: rank %d left during the meeting (sending it the payload: %s)", k, strerror(err));
  }
  if (s) broadcast_error(fds + 1, e->world - 1, s, dit_now_ms() + SEND_MS);
  return s;
}

/* ---- other ranks: connect and hear rank 0 ---- */

static dit_status_t reach(dit_rendezvous_t *r, const dit_launch_env_t *e, size_t len, int timeout_ms, void *out_payload) {
  int64_t start = dit_now_ms(), deadline = start + timeout_ms;
  int grace = timeout_ms / 4 < 1000 ? timeout_ms / 4 : 1000;
  char port[16];
  snprintf(port, sizeof port, "%d", e->port);
  int fd = -1, err = 0, gai = 0;
  while (fd < 0) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    gai = getaddrinfo(e->addr, port, &hints, &res);
    if (gai && gai != EAI_AGAIN)
      return DIT_ERR(INVALID_ARGUMENT, "rendezvous: rank %d cannot resolve rank 0's address '%s'%s%s: %s", e->rank, e->addr,
                     e->addr_var && e->addr_var[0] ? " from " : "", e->addr_var ? e->addr_var : "", gai_strerror(gai));
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
      fd = dit_rdzv_connect(ai->ai_addr, ai->ai_addrlen, NULL, 0, deadline);
      if (fd < 0) err = errno;
    }
    if (res) freeaddrinfo(res);
    if (fd >= 0) break;
    if (remaining_ms(deadline) == 0)
      return DIT_ERR(DEADLINE_EXCEEDED, "rendezvous: rank %d could not reach rank 0 at %s:%d within %d ms (%s): rank 0 did not start or is elsewhere",
                     e->rank, e->addr, e->port, timeout_ms, gai ? gai_strerror(gai) : strerror(err));
    /* Rank 0 may simply not be listening yet. */
    int nap = remaining_ms(deadline) < CONNECT_RETRY_MS ? remaining_ms(deadline) : CONNECT_RETRY_MS;
    poll(NULL, 0, nap);
  }
  r->local_len = sizeof r->local, r->root_len = sizeof r->root;
  getsockname(fd, (struct sockaddr *)&r->local, &r->local_len);
  getpeername(fd, (struct sockaddr *)&r->root, &r->root_len);
  char peer[160], where[80];
  dit_rdzv_format_addr((struct sockaddr *)&r->root, where, sizeof where);
  snprintf(peer, sizeof peer, "rank 0 at %s", where);
  /* The hello's extra is the payload size this rank expects. */
  dit_status_t s = dit_rdzv_handshake(fd, DIT_RDZV_CHANNEL_RENDEZVOUS, e, (uint32_t)len, 0, peer, deadline + grace);
  if (!s) {
    dit_rdzv_msg_t *m = malloc(sizeof *m);
    unsigned char *body = malloc(FRAME_BUF);
    dit_status_t why = DIT_OK;
    if (!body || !m) {
      s = DIT_ERR(RESOURCE_EXHAUSTED, "rendezvous: out of memory");
    } else {
      err = dit_rdzv_recv(fd, m, body, deadline + grace, &why);
      if (err == ETIMEDOUT)
        s = DIT_ERR(DEADLINE_EXCEEDED, "rendezvous: rank %d reached rank 0 at %s:%d but heard nothing within %d ms (other ranks missing?)",
                    e->rank, e->addr, e->port, (int)(dit_now_ms() - start));
      else if (err)
        s = DIT_ERR(ABORTED, "rendezvous: rank %d lost rank 0 at %s:%d during the meeting: %s", e->rank, e->addr, e->port,
                    err == EPIPE ? "connection closed" : why ? dit_status_message(why) : strerror(err));
      else if (m->h.type == DIT_RDZV_ERROR)
        s = dit_status_make(code_from_wire(m->h.a), "%s (rank 0's verdict, heard by rank %d)", m->text, e->rank);
      else if (m->h.type != DIT_RDZV_WELCOME || m->body_len != len || m->h.b != e->world)
        s = DIT_ERR(ABORTED, "rendezvous: rank %d got an unexpected answer from rank 0 (type %u, %zu bytes, world %d)", e->rank,
                    m->h.type, m->body_len, m->h.b);
      else if (len)
        memcpy(out_payload, m->body, len);
    }
    dit_status_free(why);
    free(body);
    free(m);
  }
  if (s) {
    close(fd);
    return s;
  }
  r->fds[0] = fd;
  return DIT_OK;
}

/* ---- after the meeting: the liveness channel ---- */

static int peer_of(const dit_rendezvous_t *r, int k) { return r->rank == 0 ? k : 0; }

/* Records the first failure; rank 0 passes it on to every rank still listening. The
 * callback runs outside the lock so it may call report_failure or status. */
static void note_failure(dit_rendezvous_t *r, int failed_rank, const char *why) {
  pthread_mutex_lock(&r->mu);
  if (r->failed || r->closing) {
    pthread_mutex_unlock(&r->mu);
    return;
  }
  r->failed = 1;
  r->failed_rank = failed_rank;
  snprintf(r->why, sizeof r->why, "%s", why);
  if (r->rank == 0) {
    int64_t deadline = dit_now_ms() + SEND_MS;
    for (int k = 1; k < r->n_fds; k++)
      if (k != failed_rank && r->fds[k] >= 0 && !r->bye[k])
        send_frame(r->fds[k], DIT_RDZV_FAIL, failed_rank, 0, r->why, strlen(r->why), deadline);
  }
  pthread_mutex_unlock(&r->mu);
  if (r->on_failure) r->on_failure(r->ctx, failed_rank, r->why);
}

static void *watch(void *arg) {
  dit_rendezvous_t *r = arg;
  struct pollfd *p = malloc(sizeof *p * (size_t)(r->n_fds + 1));
  int *who = malloc(sizeof *who * (size_t)(r->n_fds + 1));
  unsigned char *buf = malloc(FRAME_BUF);
  dit_rdzv_msg_t *m = malloc(sizeof *m);
  if (!p || !who || !buf || !m) {
    /* Without a watcher this process would never hear of a failure: say so loudly. */
    note_failure(r, r->rank, "out of memory starting the rendezvous watcher");
    goto done;
  }
  for (;;) {
    int n = 0;
    p[n++] = (struct pollfd){r->wake[0], POLLIN, 0};
    for (int k = 0; k < r->n_fds; k++)
      if (r->fds[k] >= 0 && !r->bye[k]) who[n] = k, p[n++] = (struct pollfd){r->fds[k], POLLIN, 0};
    if (poll(p, (nfds_t)n, -1) < 0) {
      if (errno == EINTR) continue;
      note_failure(r, r->rank, "the rendezvous watcher cannot poll");
      goto done;
    }
    if (p[0].revents) goto done;
    for (int i = 1; i < n; i++) {
      if (!p[i].revents) continue;
      int k = who[i], peer = peer_of(r, k);
      int err = dit_rdzv_recv(r->fds[k], m, buf, dit_now_ms() + SEND_MS, NULL);
      if (!err && m->h.type == DIT_RDZV_BYE) {
        pthread_mutex_lock(&r->mu);
        r->bye[k] = 1;
        pthread_mutex_unlock(&r->mu);
        continue;
      }
      if (!err && m->h.type == DIT_RDZV_FAIL) {
        /* Rank 0 trusts the connection, not the frame, for who failed. */
        note_failure(r, r->rank == 0 ? peer : m->h.a, m->text);
        goto done;
      }
      if (!err) continue; /* a newer minor frame type: not ours to judge */
      char why[256];
      snprintf(why, sizeof why, "its connection dropped without a clean close (%s): the process exited, was killed or lost its host",
               err == EPIPE ? "end of stream" : err == EPROTO ? "garbled frame" : strerror(err));
      note_failure(r, peer, why);
      goto done;
    }
  }
done:
  free(p);
  free(who);
  free(buf);
  free(m);
  return NULL;
}

static void destroy(dit_rendezvous_t *r) {
  for (int k = 0; k < r->n_fds; k++)
    if (r->fds[k] >= 0) close(r->fds[k]);
  if (r->wake[0] >= 0) close(r->wake[0]);
  if (r->wake[1] >= 0) close(r->wake[1]);
  pthread_mutex_destroy(&r->mu);
  free(r->fds);
  free(r->bye);
  free(r);
}

dit_status_t dit_rendezvous(const dit_launch_env_t *e, const void *payload, size_t len, int timeout_ms,
                            dit_rendezvous_failure_fn on_failure, void *on_failure_ctx, dit_rendezvous_t **out,
                            void *out_payload) {
  *out = NULL;
  if (e->world < 1 || e->rank < 0 || e->rank >= e->world)
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: rank %d of world %d", e->rank, e->world);
  if (len > DIT_RDZV_MAX_PAYLOAD)
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: payload of %zu bytes, at most %d", len, DIT_RDZV_MAX_PAYLOAD);
  if (len && (!out_payload || (e->rank == 0 && !payload)))
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: a %zu-byte payload needs its buffers", len);
  if (timeout_ms <= 0) return DIT_ERR(INVALID_ARGUMENT, "rendezvous: timeout of %d ms: must be positive", timeout_ms);
  dit_rendezvous_t *r = calloc(1, sizeof *r);
  if (!r) return DIT_ERR(RESOURCE_EXHAUSTED, "rendezvous: out of memory");
  r->rank = e->rank, r->world = e->world;
  r->n_fds = e->rank == 0 ? e->world : 1;
  r->fds = malloc(sizeof *r->fds * (size_t)r->n_fds);
  r->bye = calloc((size_t)r->n_fds, 1);
  r->wake[0] = r->wake[1] = -1;
  r->on_failure = on_failure, r->ctx = on_failure_ctx;
  pthread_mutex_init(&r->mu, NULL);
  if (!r->fds || !r->bye) {
    free(r->fds);
    r->fds = NULL;
    r->n_fds = 0;
    destroy(r);
    return DIT_ERR(RESOURCE_EXHAUSTED, "rendezvous: out of memory");
  }
  for (int k = 0; k < r->n_fds; k++) r->fds[k] = -1;
  if (e->world == 1) {
    if (len) memmove(out_payload, payload, len);
    *out = r;
    return DIT_OK;
  }
  if (!e->secret_len) {
    destroy(r);
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: rank %d of %d has no job secret: set DIT_JOB_SECRET or DIT_JOB_SECRET_FILE to the same "
                   "secret on every rank", e->rank, e->world);
  }
  dit_status_t s = e->rank == 0 ? gather(r, e, payload, len, timeout_ms) : reach(r, e, len, timeout_ms, out_payload);
  if (!s && e->rank == 0 && len) memmove(out_payload, payload, len);
  if (!s && pipe2(r->wake, O_CLOEXEC | O_NONBLOCK)) s = DIT_ERR(IO, "rendezvous: pipe: %s", strerror(errno));
  if (!s) {
    for (int k = 0; k < r->n_fds; k++)
      if (r->fds[k] >= 0) tune_socket(r->fds[k]);
    int err = pthread_create(&r->watcher, NULL, watch, r);
    if (err) s = DIT_ERR(RESOURCE_EXHAUSTED, "rendezvous: cannot start the watcher thread: %s", strerror(err));
    r->watcher_started = !err;
  }
  if (s) {
    destroy(r);
    return s;
  }
  *out = r;
  return DIT_OK;
}

void dit_rendezvous_report_failure(dit_rendezvous_t *r, const char *why) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  if (!r->failed && !r->closing) {
    r->failed = 1;
    r->self_reported = 1;
    r->failed_rank = r->rank;
    snprintf(r->why, sizeof r->why, "%s", why && why[0] ? why : "reported failure");
    int64_t deadline = dit_now_ms() + SEND_MS;
    for (int k = 0; k < r->n_fds; k++)
      if (r->fds[k] >= 0 && !r->bye[k]) send_frame(r->fds[k], DIT_RDZV_FAIL, r->rank, 0, r->why, strlen(r->why), deadline);
  }
  pthread_mutex_unlock(&r->mu);
}

dit_status_t dit_rendezvous_status(dit_rendezvous_t *r) {
  dit_status_t s = DIT_OK;
  pthread_mutex_lock(&r->mu);
  if (r->failed && r->self_reported)
    s = DIT_ERR(ABORTED, "rank %d (this process) failed: %s", r->failed_rank, r->why);
  else if (r->failed)
    s = DIT_ERR(ABORTED, "rank %d failed: %s", r->failed_rank, r->why);
  pthread_mutex_unlock(&r->mu);
  return s;
}

dit_status_t dit_rendezvous_addresses(const dit_rendezvous_t *r, struct sockaddr_storage *local, socklen_t *local_len,
                                      struct sockaddr_storage *root, socklen_t *root_len) {
  if (!r->local_len)
    return DIT_ERR(FAILED_PRECONDITION, "rendezvous: rank %d of a world of %d met nobody, so it has no address to share", r->rank,
                   r->world);
  *local = r->local, *local_len = r->local_len;
  *root = r->root, *root_len = r->root_len;
  return DIT_OK;
}

int dit_rendezvous_rank(const dit_rendezvous_t *r) { return r->rank; }
int dit_rendezvous_world(const dit_rendezvous_t *r) { return r->world; }

void dit_rendezvous_close(dit_rendezvous_t *r) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  r->closing = 1;
  int64_t deadline = dit_now_ms() + SEND_MS;
  for (int k = 0; k < r->n_fds; k++)
    if (r->fds[k] >= 0 && !r->bye[k]) send_frame(r->fds[k], DIT_RDZV_BYE, r->rank, 0, NULL, 0, deadline);
  pthread_mutex_unlock(&r->mu);
  if (r->watcher_started) {
    ssize_t w;
    do w = write(r->wake[1], "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(r->watcher, NULL);
  }
  destroy(r);
}
