/* The rendezvous protocol and its liveness watcher. Every message is a frame: a 20-byte
 * header {magic "DITR", version, type, a, b, body length} in network byte order, then the
 * body. Sockets are non-blocking and every read and write waits with poll against a deadline,
 * so no peer can stall a rank past its timeout. */
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

#define RDZV_MAGIC 0x44495452u /* "DITR" */
#define RDZV_VERSION 1
#define HDR_BYTES 20
#define MAX_TEXT 1024
/* Stray connections (port scanners, a previous job's late rank) are dropped, not fatal;
 * this caps how many may be half-open at once. */
#define MAX_PENDING 64
/* Frames after the meeting are tiny; a peer that cannot take one within this is as good as
 * gone, and the sender must not block its watcher or its caller for longer. */
#define SEND_MS 1000
#define CONNECT_RETRY_MS 50

enum { F_HELLO = 1, F_WELCOME = 2, F_ERROR = 3, F_FAIL = 4, F_BYE = 5 };

typedef struct frame {
  uint32_t magic;
  uint16_t version, type;
  int32_t a, b; /* HELLO: rank, world; WELCOME: 0, world; ERROR: code; FAIL: failed rank; BYE: rank */
  uint32_t len;
} frame_t;

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
};

/* ---- time and bounded I/O ---- */

static int remaining(int64_t deadline) {
  int64_t r = deadline - dit_now_ms();
  return r < 0 ? 0 : r > 1000000000 ? 1000000000 : (int)r;
}

/* 1 when fd is ready for `events`, 0 at the deadline, -1 on a poll error. */
static int wait_fd(int fd, short events, int64_t deadline) {
  for (;;) {
    struct pollfd p = {fd, events, 0};
    int n = poll(&p, 1, remaining(deadline));
    if (n > 0) return 1;
    if (n == 0) return 0;
    if (errno != EINTR) return -1;
  }
}

/* 0, or an errno (ETIMEDOUT at the deadline). */
static int write_all(int fd, const void *buf, size_t n, int64_t deadline) {
  const char *p = buf;
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w, n -= (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    int ready = wait_fd(fd, POLLOUT, deadline);
    if (ready == 0) return ETIMEDOUT;
    if (ready < 0) return errno;
  }
  return 0;
}

/* 0, an errno, ETIMEDOUT at the deadline, or EPIPE when the peer closed. */
static int read_all(int fd, void *buf, size_t n, int64_t deadline) {
  char *p = buf;
  while (n) {
    ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r, n -= (size_t)r;
      continue;
    }
    if (r == 0) return EPIPE;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    int ready = wait_fd(fd, POLLIN, deadline);
    if (ready == 0) return ETIMEDOUT;
    if (ready < 0) return errno;
  }
  return 0;
}

static void put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void encode(const frame_t *f, unsigned char h[HDR_BYTES]) {
  put32(h, f->magic);
  put32(h + 4, (uint32_t)f->version << 16 | f->type);
  put32(h + 8, (uint32_t)f->a);
  put32(h + 12, (uint32_t)f->b);
  put32(h + 16, f->len);
}

static void decode(const unsigned char h[HDR_BYTES], frame_t *f) {
  f->magic = get32(h);
  uint32_t vt = get32(h + 4);
  f->version = (uint16_t)(vt >> 16), f->type = (uint16_t)vt;
  f->a = (int32_t)get32(h + 8), f->b = (int32_t)get32(h + 12);
  f->len = get32(h + 16);
}

static int send_frame(int fd, int type, int a, int b, const void *body, size_t len, int64_t deadline) {
  unsigned char h[HDR_BYTES];
  frame_t f = {RDZV_MAGIC, RDZV_VERSION, (uint16_t)type, a, b, (uint32_t)len};
  encode(&f, h);
  int err = write_all(fd, h, sizeof h, deadline);
  if (!err && len) err = write_all(fd, body, len, deadline);
  return err;
}

/* Reads one frame whose body fits `cap` (body is NUL-terminated when cap > len). EPROTO for
 * a frame that is not ours or too long. */
static int read_frame(int fd, frame_t *f, char *body, size_t cap, int64_t deadline) {
  unsigned char h[HDR_BYTES];
  int err = read_all(fd, h, sizeof h, deadline);
  if (err) return err;
  decode(h, f);
  if (f->magic != RDZV_MAGIC || f->version != RDZV_VERSION || f->len > cap) return EPROTO;
  err = f->len ? read_all(fd, body, f->len, deadline) : 0;
  if (!err && f->len < cap) body[f->len] = 0;
  return err;
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

static int set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
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

static dit_status_t listen_on(const dit_launch_env_t *e, int *out_fd) {
  char port[16];
  snprintf(port, sizeof port, "%d", e->port);
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int gai = getaddrinfo(e->addr, port, &hints, &res);
  if (gai)
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: rank 0 cannot resolve its address '%s'%s%s: %s", e->addr,
                   e->addr_var && e->addr_var[0] ? " from " : "", e->addr_var ? e->addr_var : "", gai_strerror(gai));
  int err = 0, fd = -1;
  for (int pass = 0; pass < 2 && fd < 0; pass++) {
    /* The address may name this host from outside (NAT, an alias) without being one of its
     * interfaces; then every interface will do. */
    if (pass == 1) {
      if (err != EADDRNOTAVAIL) break;
      freeaddrinfo(res);
      res = NULL;
      hints.ai_family = AF_INET;
      if (getaddrinfo(NULL, port, &hints, &res)) break;
    }
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
      fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        err = errno;
        continue;
      }
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128) || set_nonblocking(fd)) {
        err = errno;
        close(fd);
        fd = -1;
      }
    }
  }
  if (res) freeaddrinfo(res);
  if (fd < 0)
    return DIT_ERR(UNAVAILABLE, "rendezvous: rank 0 cannot listen on %s:%d: %s%s", e->addr, e->port, strerror(err),
                   err == EADDRINUSE ? " (another job on this host? set DIT_RDZV_PORT to a free port)" : "");
  *out_fd = fd;
  return DIT_OK;
}

typedef struct pending {
  int fd;
  size_t got;
  unsigned char h[HDR_BYTES];
} pending_t;

/* Tells every connected rank why the meeting failed, so each fails with rank 0's reason
 * instead of its own timeout. */
static void broadcast_error(const int *fds, int n, dit_status_t s, int64_t deadline) {
  const char *msg = dit_status_message(s);
  for (int k = 0; k < n; k++)
    if (fds[k] >= 0) send_frame(fds[k], F_ERROR, (int)dit_status_code(s), 0, msg, strlen(msg), deadline);
}

/* Judges one complete hello: NULL to accept it into fds, else the reason (every rank hears
 * it). *drop is set for connections that are not a rank of ours at all. */
static dit_status_t judge_hello(const dit_launch_env_t *e, const frame_t *f, size_t len, const int *fds, int *drop) {
  *drop = 0;
  if (f->magic != RDZV_MAGIC || f->type != F_HELLO) {
    *drop = 1;
    return DIT_OK;
  }
  if (f->version != RDZV_VERSION)
    return DIT_ERR(FAILED_PRECONDITION, "rendezvous: rank %d speaks protocol version %u, rank 0 speaks %d (different ditrun builds in one launch)",
                   f->a, f->version, RDZV_VERSION);
  if (f->b != e->world)
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: world size mismatch: rank %d has world size %d, rank 0 has %d (%s from %s)", f->a,
                   f->b, e->world, e->world_var && e->world_var[0] ? e->world_var : "world size", dit_launcher_name(e->launcher));
  if (f->a <= 0 || f->a >= e->world)
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: a process claims rank %d, outside 1..%d of a world of %d", f->a, e->world - 1,
                   e->world);
  if (fds[f->a] >= 0)
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: two processes claim rank %d (each rank must be launched once)", f->a);
  if (f->len != len)
    return DIT_ERR(INVALID_ARGUMENT, "rendezvous: rank %d expects a payload of %u bytes, rank 0 has %zu", f->a, f->len, len);
  return DIT_OK;
}

static dit_status_t gather(const dit_launch_env_t *e, const void *payload, size_t len, int timeout_ms, int *fds) {
  int lfd = -1;
  DIT_RETURN_IF(listen_on(e, &lfd));
  int64_t deadline = dit_now_ms() + timeout_ms;
  pending_t pend[MAX_PENDING];
  int n_pend = 0, arrived = 1;
  dit_status_t s = DIT_OK;
  while (!s && arrived < e->world) {
    struct pollfd p[1 + MAX_PENDING];
    p[0] = (struct pollfd){lfd, POLLIN, 0};
    for (int i = 0; i < n_pend; i++) p[1 + i] = (struct pollfd){pend[i].fd, POLLIN, 0};
    int n = poll(p, (nfds_t)(1 + n_pend), remaining(deadline));
    if (n < 0 && errno != EINTR) {
      s = DIT_ERR(IO, "rendezvous: poll: %s", strerror(errno));
      break;
    }
    if (n == 0 && remaining(deadline) == 0) {
      int missing[64], n_missing = 0, total = 0;
      for (int k = 1; k < e->world; k++)
        if (fds[k] < 0) {
          if (n_missing < 64) missing[n_missing++] = k;
          total++;
        }
      char list[400];
      format_ranks(list, sizeof list, missing, n_missing);
      s = DIT_ERR(DEADLINE_EXCEEDED, "rendezvous on %s:%d: rank%s %s%s of %d did not arrive within %d ms", e->addr, e->port,
                  total == 1 ? "" : "s", list, total > n_missing ? " (and more)" : "", e->world, timeout_ms);
      break;
    }
    /* Hellos first: p[] was built before accepting, and accepting may reorder pend[]. */
    for (int i = n_pend - 1; i >= 0 && !s; i--) {
      if (!p[1 + i].revents) continue;
      ssize_t r = recv(pend[i].fd, pend[i].h + pend[i].got, HDR_BYTES - pend[i].got, MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      int drop = r <= 0;
      if (r > 0 && (pend[i].got += (size_t)r) == HDR_BYTES) {
        frame_t f;
        decode(pend[i].h, &f);
        s = judge_hello(e, &f, len, fds, &drop);
        if (s) {
          send_frame(pend[i].fd, F_ERROR, (int)dit_status_code(s), 0, dit_status_message(s),
                     strlen(dit_status_message(s)), dit_now_ms() + SEND_MS);
          drop = 1;
        } else if (!drop) {
          fds[f.a] = pend[i].fd;
          arrived++;
          pend[i] = pend[--n_pend];
          continue;
        }
      }
      if (drop) {
        close(pend[i].fd);
        pend[i] = pend[--n_pend];
      }
    }
    if (!s && p[0].revents) {
      for (;;) {
        int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) break;
        if (n_pend == MAX_PENDING) {
          close(c);
          continue;
        }
        pend[n_pend++] = (pending_t){c, 0, {0}};
      }
    }
  }
  close(lfd);
  for (int i = 0; i < n_pend; i++) close(pend[i].fd);
  for (int k = 1; !s && k < e->world; k++) {
    int err = send_frame(fds[k], F_WELCOME, 0, e->world, payload, len, deadline + SEND_MS);
    if (err)
      s = DIT_ERR(ABORTED, "rendezvous: rank %d left during the meeting (sending it the payload: %s)", k, strerror(err));
  }
  if (s) broadcast_error(fds + 1, e->world - 1, s, dit_now_ms() + SEND_MS);
  return s;
}

/* ---- other ranks: connect and hear rank 0 ---- */

static dit_status_t reach(const dit_launch_env_t *e, const void *payload, size_t len, int timeout_ms, int *out_fd,
                          void *out_payload) {
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
      fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        err = errno;
        continue;
      }
      int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (rc && errno == EINPROGRESS) {
        int ready = wait_fd(fd, POLLOUT, deadline);
        socklen_t sl = sizeof err;
        err = ready == 0 ? ETIMEDOUT : ready < 0 ? errno : 0;
        if (ready > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl)) err = errno;
        rc = err ? -1 : 0;
      } else if (rc) {
        err = errno;
      }
      if (rc) {
        close(fd);
        fd = -1;
      }
    }
    if (res) freeaddrinfo(res);
    if (fd >= 0) break;
    if (remaining(deadline) == 0)
      return DIT_ERR(DEADLINE_EXCEEDED, "rendezvous: rank %d could not reach rank 0 at %s:%d within %d ms (%s): rank 0 did not start or is elsewhere",
                     e->rank, e->addr, e->port, timeout_ms, gai ? gai_strerror(gai) : strerror(err));
    /* Rank 0 may simply not be listening yet. */
    int nap = remaining(deadline) < CONNECT_RETRY_MS ? remaining(deadline) : CONNECT_RETRY_MS;
    poll(NULL, 0, nap);
  }
  dit_status_t s = DIT_OK;
  /* The hello has no body; its length field is the payload size this rank expects. */
  unsigned char hello[HDR_BYTES];
  frame_t hf = {RDZV_MAGIC, RDZV_VERSION, F_HELLO, e->rank, e->world, (uint32_t)len};
  encode(&hf, hello);
  err = write_all(fd, hello, sizeof hello, deadline);
  (void)payload;
  if (err) {
    s = dit_status_make(err == ETIMEDOUT ? DIT_CODE_DEADLINE_EXCEEDED : DIT_CODE_UNAVAILABLE,
                "rendezvous: rank %d could not greet rank 0 at %s:%d: %s", e->rank, e->addr, e->port, strerror(err));
  } else {
    frame_t f;
    char *body = malloc(DIT_RDZV_MAX_PAYLOAD + MAX_TEXT + 1);
    if (!body) {
      close(fd);
      return DIT_ERR(RESOURCE_EXHAUSTED, "rendezvous: out of memory");
    }
    err = read_frame(fd, &f, body, DIT_RDZV_MAX_PAYLOAD + MAX_TEXT, deadline + grace);
    if (err == ETIMEDOUT)
      s = DIT_ERR(DEADLINE_EXCEEDED, "rendezvous: rank %d reached rank 0 at %s:%d but heard nothing within %d ms (other ranks missing?)",
                  e->rank, e->addr, e->port, (int)(dit_now_ms() - start));
    else if (err)
      s = DIT_ERR(ABORTED, "rendezvous: rank %d lost rank 0 at %s:%d during the meeting: %s", e->rank, e->addr, e->port,
                  err == EPIPE ? "connection closed" : err == EPROTO ? "not a ditrun rendezvous" : strerror(err));
    else if (f.type == F_ERROR)
      s = dit_status_make(code_from_wire(f.a), "%s (rank 0's verdict, heard by rank %d)", body, e->rank);
    else if (f.type != F_WELCOME || f.len != len || f.b != e->world)
      s = DIT_ERR(ABORTED, "rendezvous: rank %d got an unexpected answer from rank 0 (type %u, %u bytes, world %d)", e->rank,
                  f.type, f.len, f.b);
    else if (len)
      memcpy(out_payload, body, len);
    free(body);
  }
  if (s) {
    close(fd);
    return s;
  }
  *out_fd = fd;
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
        send_frame(r->fds[k], F_FAIL, failed_rank, 0, r->why, strlen(r->why), deadline);
  }
  pthread_mutex_unlock(&r->mu);
  if (r->on_failure) r->on_failure(r->ctx, failed_rank, r->why);
}

static void *watch(void *arg) {
  dit_rendezvous_t *r = arg;
  struct pollfd *p = malloc(sizeof *p * (size_t)(r->n_fds + 1));
  int *who = malloc(sizeof *who * (size_t)(r->n_fds + 1));
  char *text = malloc(MAX_TEXT + 1);
  if (!p || !who || !text) {
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
      frame_t f;
      int err = read_frame(r->fds[k], &f, text, MAX_TEXT, dit_now_ms() + SEND_MS);
      if (!err && f.type == F_BYE) {
        pthread_mutex_lock(&r->mu);
        r->bye[k] = 1;
        pthread_mutex_unlock(&r->mu);
        continue;
      }
      if (!err && f.type == F_FAIL) {
        /* Rank 0 trusts the connection, not the frame, for who failed. */
        note_failure(r, r->rank == 0 ? peer : f.a, text);
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
  free(text);
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
  dit_status_t s = e->rank == 0 ? gather(e, payload, len, timeout_ms, r->fds)
                                : reach(e, payload, len, timeout_ms, &r->fds[0], out_payload);
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
      if (r->fds[k] >= 0 && !r->bye[k]) send_frame(r->fds[k], F_FAIL, r->rank, 0, r->why, strlen(r->why), deadline);
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

int dit_rendezvous_rank(const dit_rendezvous_t *r) { return r->rank; }
int dit_rendezvous_world(const dit_rendezvous_t *r) { return r->world; }

void dit_rendezvous_close(dit_rendezvous_t *r) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  r->closing = 1;
  int64_t deadline = dit_now_ms() + SEND_MS;
  for (int k = 0; k < r->n_fds; k++)
    if (r->fds[k] >= 0 && !r->bye[k]) send_frame(r->fds[k], F_BYE, r->rank, 0, NULL, 0, deadline);
  pthread_mutex_unlock(&r->mu);
  if (r->watcher_started) {
    ssize_t w;
    do w = write(r->wake[1], "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(r->watcher, NULL);
  }
  destroy(r);
}
