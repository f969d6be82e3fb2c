/* Bounded socket I/O, rank 0's bind address, and the job-secret handshake of rdzv_auth.h. */
#include "runtime/launch/rdzv_auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/sha256.h"

/* Connections still proving themselves at once; the oldest is dropped for a newer one, so a
 * flood of silent connections cannot keep a real rank out (real ranks answer at once). */
#define MAX_PENDING 32
/* Log lines per acceptor: a port scan must not bury the job's own messages. */
#define MAX_LOGGED 32
#define SEND_MS 1000

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

int dit_rdzv_write_all(int fd, const void *buf, size_t n, int64_t deadline) {
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

int dit_rdzv_read_all(int fd, void *buf, size_t n, int64_t deadline) {
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

int dit_rdzv_send(int fd, int type, int32_t a, int32_t b, const void *body, size_t len, int64_t deadline) {
  unsigned char h[DIT_RDZV_HDR_BYTES];
  dit_rdzv_frame_t f = {DIT_RDZV_MAGIC, DIT_RDZV_VERSION, (uint16_t)type, a, b, (uint32_t)len};
  dit_rdzv_header_encode(&f, h);
  int err = dit_rdzv_write_all(fd, h, sizeof h, deadline);
  if (!err && len) err = dit_rdzv_write_all(fd, body, len, deadline);
  return err;
}

int dit_rdzv_recv(int fd, dit_rdzv_msg_t *m, unsigned char *buf, int64_t deadline, dit_status_t *why) {
  if (why) *why = DIT_OK;
  int err = dit_rdzv_read_all(fd, buf, DIT_RDZV_HDR_BYTES, deadline);
  if (err) return err;
  dit_rdzv_frame_t f;
  dit_status_t s = dit_rdzv_header_parse(buf, DIT_RDZV_HDR_BYTES, &f);
  if (!s && f.len) err = dit_rdzv_read_all(fd, buf + DIT_RDZV_HDR_BYTES, f.len, deadline);
  if (err) return err;
  size_t used;
  if (!s) s = dit_rdzv_msg_parse(buf, DIT_RDZV_HDR_BYTES + (size_t)f.len, m, &used);
  if (!s) return 0;
  if (why) *why = s;
  else dit_status_free(s);
  return EPROTO;
}

void dit_rdzv_format_addr(const struct sockaddr *sa, char *buf, size_t cap) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    snprintf(buf, cap, "%s:%u", host, ntohs(a->sin_port));
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    snprintf(buf, cap, "[%s]:%u", host, ntohs(a->sin6_port));
  } else {
    snprintf(buf, cap, "(address family %d)", sa->sa_family);
  }
}

static void set_port(struct sockaddr *sa, int port) {
  if (sa->sa_family == AF_INET) ((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
  else if (sa->sa_family == AF_INET6) ((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
}

dit_status_t dit_rdzv_bind_address(const dit_launch_env_t *e, struct sockaddr_storage *out, socklen_t *out_len) {
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const char *var = e->addr_var && e->addr_var[0] ? e->addr_var : "rank 0's address";
  int gai = getaddrinfo(e->addr, NULL, &hints, &res);
  if (gai) return DIT_ERR(INVALID_ARGUMENT, "rendezvous: rank 0 cannot resolve its address %s='%s': %s", var, e->addr, gai_strerror(gai));
  char tried[512] = "";
  size_t o = 0;
  int found = 0;
  /* Binding is the test of "one of this host's addresses" that also covers every loopback
   * address and whatever the kernel counts as local. */
  for (struct addrinfo *ai = res; ai && !found; ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof *out || (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)) continue;
    struct sockaddr_storage a;
    memcpy(&a, ai->ai_addr, ai->ai_addrlen);
    set_port((struct sockaddr *)&a, 0);
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, ai->ai_addrlen)) {
      memcpy(out, &a, ai->ai_addrlen);
      *out_len = ai->ai_addrlen;
      found = 1;
    } else if (o < sizeof tried) {
      char s[80];
      dit_rdzv_format_addr((struct sockaddr *)&a, s, sizeof s);
      char *colon = strrchr(s, ':');
      if (colon) *colon = 0; /* the port is always 0 here */
      int w = snprintf(tried + o, sizeof tried - o, "%s%s", o ? ", " : "", s);
      if (w > 0) o += (size_t)w;
    }
    if (fd >= 0) close(fd);
  }
  freeaddrinfo(res);
  if (!found)
    return DIT_ERR(FAILED_PRECONDITION, "rendezvous: %s='%s' resolves to %s, which is not an address of this host: rank 0 must run "
                   "on the host it names (its listeners bind to that address only, never to every interface)",
                   var, e->addr, o ? tried : "no IPv4 or IPv6 address");
  return DIT_OK;
}

int dit_rdzv_listen(const struct sockaddr *addr, socklen_t len, int backlog, int *out_fd, int *out_port) {
  int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_storage a;
  socklen_t al = sizeof a;
  if (bind(fd, addr, len) || listen(fd, backlog) || getsockname(fd, (struct sockaddr *)&a, &al)) {
    int err = errno;
    close(fd);
    return err;
  }
  *out_port = a.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&a)->sin_port) : ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
  *out_fd = fd;
  return 0;
}

int dit_rdzv_connect(const struct sockaddr *addr, socklen_t len, const struct sockaddr *local, socklen_t local_len,
                     int64_t deadline) {
  int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int err = 0;
  if (local) {
    struct sockaddr_storage l;
    memcpy(&l, local, local_len);
    set_port((struct sockaddr *)&l, 0);
    if (bind(fd, (struct sockaddr *)&l, local_len)) err = errno;
  }
  if (!err && connect(fd, addr, len)) {
    err = errno;
    if (err == EINPROGRESS) {
      int ready = wait_fd(fd, POLLOUT, deadline);
      socklen_t sl = sizeof err;
      err = ready == 0 ? ETIMEDOUT : ready < 0 ? errno : 0;
      if (ready > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl)) err = errno;
    }
  }
  if (err) {
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

static int random_bytes(void *p, size_t n) {
  unsigned char *b = p;
  while (n) {
    ssize_t r = getrandom(b, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    b += r, n -= (size_t)r;
  }
  return 0;
}

/* ---- accepting side ---- */

typedef struct pend {
  int fd;
  int64_t since;
  size_t got, need;
  unsigned char buf[DIT_RDZV_HDR_BYTES + DIT_RDZV_HELLO_BODY];
  unsigned char nonce[DIT_RDZV_NONCE_BYTES];
  char addr[64];
} pend_t;

struct dit_rdzv_acceptor {
  int lfd, channel, rank;
  unsigned char secret[DIT_LAUNCH_SECRET_MAX];
  size_t secret_len;
  char who[96];
  pend_t pend[MAX_PENDING];
  int n_pend, refused, bad_mac, logged;
};

dit_status_t dit_rdzv_acceptor_create(int lfd, int channel, int my_rank, const unsigned char *secret, size_t secret_len,
                                      const char *who, dit_rdzv_acceptor_t **out) {
  *out = NULL;
  if (secret_len == 0 || secret_len > DIT_LAUNCH_SECRET_MAX) {
    close(lfd);
    return DIT_ERR(INVALID_ARGUMENT, "%s: a job secret of %zu bytes (expected 1..%d): the ranks cannot prove who they are", who, secret_len,
                   DIT_LAUNCH_SECRET_MAX);
  }
  dit_rdzv_acceptor_t *a = calloc(1, sizeof *a);
  if (!a) {
    close(lfd);
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", who);
  }
  a->lfd = lfd, a->channel = channel, a->rank = my_rank;
  memcpy(a->secret, secret, secret_len);
  a->secret_len = secret_len;
  snprintf(a->who, sizeof a->who, "%s", who);
  *out = a;
  return DIT_OK;
}

static void drop_pending(dit_rdzv_acceptor_t *a, int i, const char *why, const char *tell) {
  pend_t *p = &a->pend[i];
  a->refused++;
  if (a->logged < MAX_LOGGED)
    fprintf(stderr, "ditrun: %s: refused a connection from %s: %s\n", a->who, p->addr, why);
  else if (a->logged == MAX_LOGGED)
    fprintf(stderr, "ditrun: %s: more connections refused; no more are logged\n", a->who);
  a->logged++;
  /* Only a peer that spoke our protocol hears why: a rank set up with another secret then
   * fails at once with a message that says so, instead of waiting for its timeout. */
  if (tell) dit_rdzv_send(p->fd, DIT_RDZV_ERROR, DIT_CODE_FAILED_PRECONDITION, 0, tell, strlen(tell), dit_now_ms() + 100);
  close(p->fd);
  a->pend[i] = a->pend[--a->n_pend];
}

/* 1: a complete, proven hello (the proof is sent); 0: still waiting; -1: refused and dropped. */
static int step_pending(dit_rdzv_acceptor_t *a, int i, dit_rdzv_peer_t *out) {
  pend_t *p = &a->pend[i];
  for (;;) {
    ssize_t r = recv(p->fd, p->buf + p->got, p->need - p->got, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (r <= 0) {
      char why[128];
      snprintf(why, sizeof why, "it closed the connection after %zu bytes, before proving the job secret%s%s", p->got,
               r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
      drop_pending(a, i, why, NULL);
      return -1;
    }
    p->got += (size_t)r;
    if (p->got < p->need) continue;
    if (p->need == DIT_RDZV_HDR_BYTES) {
      dit_rdzv_frame_t f;
      dit_status_t s = dit_rdzv_header_parse(p->buf, p->got, &f);
      if (!s && f.type != DIT_RDZV_HELLO) {
        char b[32];
        s = DIT_ERR(INVALID_ARGUMENT, "it sent a %s frame where a hello belongs", dit_rdzv_type_name(f.type, b, sizeof b));
      }
      if (s) {
        drop_pending(a, i, dit_status_message(s), NULL);
        dit_status_free(s);
        return -1;
      }
      p->need += f.len; /* a hello's body size, which the header check fixed */
      continue;
    }
    dit_rdzv_msg_t m;
    dit_status_t s = dit_rdzv_hello_verify(a->secret, a->secret_len, a->channel, p->nonce, p->buf, p->got, &m);
    if (s) {
      char tell[200];
      const int bad_mac = dit_status_code(s) == DIT_CODE_DATA_LOSS;
      snprintf(tell, sizeof tell, "%s refused the proof of the job secret", a->who);
      a->bad_mac += bad_mac;
      drop_pending(a, i, dit_status_message(s), bad_mac ? tell : NULL);
      dit_status_free(s);
      return -1;
    }
    unsigned char proof[DIT_RDZV_MAC_BYTES];
    dit_rdzv_proof_mac(a->secret, a->secret_len, a->channel, p->nonce, m.nonce, a->rank, m.h.a, m.h.b, proof);
    int err = dit_rdzv_send(p->fd, DIT_RDZV_PROOF, a->rank, 0, proof, sizeof proof, dit_now_ms() + SEND_MS);
    if (err) {
      char why[160];
      snprintf(why, sizeof why, "it proved the job secret as rank %d but left before hearing the proof back (%s)", m.h.a, strerror(err));
      drop_pending(a, i, why, NULL);
      return -1;
    }
    out->rank = m.h.a, out->world = m.h.b, out->extra = m.extra;
    snprintf(out->addr, sizeof out->addr, "%s", p->addr);
    return 1;
  }
}

static void take_new(dit_rdzv_acceptor_t *a) {
  for (;;) {
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    int c = accept4(a->lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    if (a->n_pend == MAX_PENDING) {
      int oldest = 0;
      for (int i = 1; i < a->n_pend; i++)
        if (a->pend[i].since < a->pend[oldest].since) oldest = i;
      char why[128];
      snprintf(why, sizeof why, "crowded out while silent: %d newer connections were waiting to prove the job secret", MAX_PENDING);
      drop_pending(a, oldest, why, NULL);
    }
    pend_t *p = &a->pend[a->n_pend];
    memset(p, 0, sizeof *p);
    p->fd = c;
    p->since = dit_now_ms();
    p->need = DIT_RDZV_HDR_BYTES;
    dit_rdzv_format_addr((struct sockaddr *)&sa, p->addr, sizeof p->addr);
    a->n_pend++;
    if (random_bytes(p->nonce, sizeof p->nonce)) {
      drop_pending(a, a->n_pend - 1, "this host's random source failed, so the connection cannot be challenged", NULL);
      continue;
    }
    /* A fresh connection's send buffer is empty: the challenge goes out whole at once. */
    unsigned char h[DIT_RDZV_HDR_BYTES];
    dit_rdzv_frame_t f = {DIT_RDZV_MAGIC, DIT_RDZV_VERSION, DIT_RDZV_CHALLENGE, a->channel, 0, DIT_RDZV_NONCE_BYTES};
    dit_rdzv_header_encode(&f, h);
    unsigned char msg[sizeof h + DIT_RDZV_NONCE_BYTES];
    memcpy(msg, h, sizeof h);
    memcpy(msg + sizeof h, p->nonce, sizeof p->nonce);
    if (send(c, msg, sizeof msg, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof msg)
      drop_pending(a, a->n_pend - 1, "it could not take the challenge", NULL);
  }
}

dit_status_t dit_rdzv_acceptor_next(dit_rdzv_acceptor_t *a, int64_t deadline, int *out_fd, dit_rdzv_peer_t *out) {
  *out_fd = -1;
  for (;;) {
    int64_t now = dit_now_ms();
    for (int i = a->n_pend - 1; i >= 0; i--)
      if (now - a->pend[i].since >= DIT_RDZV_AUTH_MS) {
        char why[96];
        snprintf(why, sizeof why, "it sent no complete hello within %d ms", DIT_RDZV_AUTH_MS);
        drop_pending(a, i, why, NULL);
      }
    if (now >= deadline) return DIT_ERR(DEADLINE_EXCEEDED, "deadline");
    int64_t wake = deadline;
    for (int i = 0; i < a->n_pend; i++)
      if (a->pend[i].since + DIT_RDZV_AUTH_MS < wake) wake = a->pend[i].since + DIT_RDZV_AUTH_MS;
    struct pollfd p[1 + MAX_PENDING];
    p[0] = (struct pollfd){a->lfd, POLLIN, 0};
    for (int i = 0; i < a->n_pend; i++) p[1 + i] = (struct pollfd){a->pend[i].fd, POLLIN, 0};
    int n_p = 1 + a->n_pend;
    int n = poll(p, (nfds_t)n_p, remaining(wake));
    if (n < 0) {
      if (errno == EINTR) continue;
      return DIT_ERR(IO, "%s: poll: %s", a->who, strerror(errno));
    }
    /* Backwards: dropping entry i moves the last one into its place, which is already done. */
    for (int i = n_p - 2; i >= 0; i--) {
      if (!p[1 + i].revents) continue;
      int r = step_pending(a, i, out);
      if (r == 1) {
        *out_fd = a->pend[i].fd;
        a->pend[i] = a->pend[--a->n_pend];
        return DIT_OK;
      }
    }
    if (p[0].revents) take_new(a);
  }
}

int dit_rdzv_acceptor_refused(const dit_rdzv_acceptor_t *a, int *out_bad_mac) {
  if (out_bad_mac) *out_bad_mac = a->bad_mac;
  return a->refused;
}

void dit_rdzv_acceptor_destroy(dit_rdzv_acceptor_t *a) {
  if (!a) return;
  while (a->n_pend) drop_pending(a, a->n_pend - 1, "it had not proved the job secret when the meeting ended", NULL);
  close(a->lfd);
  dit_crypto_wipe(a->secret, sizeof a->secret);
  free(a);
}

/* ---- connecting side ---- */

static dit_status_t refused_by(const dit_rdzv_msg_t *m, const dit_launch_env_t *e, const char *peer) {
  if (m->h.a == DIT_CODE_FAILED_PRECONDITION)
    return DIT_ERR(FAILED_PRECONDITION, "rank %d: %s refused this rank's proof of the job secret: the ranks do not share one "
                   "secret; set the same DIT_JOB_SECRET or DIT_JOB_SECRET_FILE on every rank (this rank's is from %s)",
                   e->rank, peer, e->secret_var && e->secret_var[0] ? e->secret_var : "nowhere");
  dit_code_t c = m->h.a >= DIT_CODE_INVALID_ARGUMENT && m->h.a <= DIT_CODE_ABORTED ? (dit_code_t)m->h.a : DIT_CODE_INTERNAL;
  return dit_status_make(c, "rank %d: %s refused the connection: %s", e->rank, peer, m->text);
}

dit_status_t dit_rdzv_handshake(int fd, int channel, const dit_launch_env_t *e, uint32_t extra, int acceptor_rank,
                                const char *peer, int64_t deadline) {
  unsigned char *buf = malloc(DIT_RDZV_HDR_BYTES + DIT_RDZV_MAX_BODY);
  dit_rdzv_msg_t *m = malloc(sizeof *m);
  dit_status_t s = DIT_OK, why = DIT_OK;
  unsigned char server_nonce[DIT_RDZV_NONCE_BYTES], nonce[DIT_RDZV_NONCE_BYTES];
  if (!buf || !m) s = DIT_ERR(RESOURCE_EXHAUSTED, "rank %d: out of memory", e->rank);
  int err = s ? 0 : dit_rdzv_recv(fd, m, buf, deadline, &why);
  char tb[32];
  if (s) {
  } else if (err == ETIMEDOUT) {
    s = DIT_ERR(DEADLINE_EXCEEDED, "rank %d: %s accepted the connection but sent no challenge in time", e->rank, peer);
  } else if (err) {
    s = DIT_ERR(ABORTED, "rank %d: %s is not a ditrun rank of this job (%s)", e->rank, peer,
                why ? dit_status_message(why) : err == EPIPE ? "it closed the connection" : strerror(err));
  } else if (m->h.type == DIT_RDZV_ERROR) {
    s = refused_by(m, e, peer);
  } else if (m->h.type != DIT_RDZV_CHALLENGE || m->h.a != channel) {
    s = DIT_ERR(ABORTED, "rank %d: %s sent a %s (channel %d) where a challenge on channel %d belongs", e->rank, peer,
                dit_rdzv_type_name(m->h.type, tb, sizeof tb), m->h.a, channel);
  } else if (random_bytes(nonce, sizeof nonce)) {
    s = DIT_ERR(IO, "rank %d: this host's random source failed: %s", e->rank, strerror(errno));
  }
  dit_status_free(why);
  why = DIT_OK;
  if (!s) {
    memcpy(server_nonce, m->nonce, sizeof server_nonce);
    unsigned char body[DIT_RDZV_HELLO_BODY];
    body[0] = (unsigned char)(extra >> 24), body[1] = (unsigned char)(extra >> 16), body[2] = (unsigned char)(extra >> 8);
    body[3] = (unsigned char)extra;
    memcpy(body + 4, nonce, sizeof nonce);
    dit_rdzv_hello_mac(e->secret, e->secret_len, channel, server_nonce, nonce, e->rank, e->world, extra, body + 4 + sizeof nonce);
    err = dit_rdzv_send(fd, DIT_RDZV_HELLO, e->rank, e->world, body, sizeof body, deadline);
    if (err)
      s = dit_status_make(err == ETIMEDOUT ? DIT_CODE_DEADLINE_EXCEEDED : DIT_CODE_ABORTED, "rank %d: could not greet %s: %s", e->rank,
                          peer, strerror(err));
  }
  if (!s) {
    err = dit_rdzv_recv(fd, m, buf, deadline, &why);
    unsigned char want[DIT_RDZV_MAC_BYTES];
    if (err == ETIMEDOUT)
      s = DIT_ERR(DEADLINE_EXCEEDED, "rank %d: %s did not answer this rank's hello in time", e->rank, peer);
    else if (err)
      s = DIT_ERR(ABORTED, "rank %d: %s closed the connection during the handshake (%s)", e->rank, peer,
                  why ? dit_status_message(why) : err == EPIPE ? "end of stream" : strerror(err));
    else if (m->h.type == DIT_RDZV_ERROR)
      s = refused_by(m, e, peer);
    else if (m->h.type != DIT_RDZV_PROOF)
      s = DIT_ERR(ABORTED, "rank %d: %s sent a %s where its proof of the job secret belongs", e->rank, peer,
                  dit_rdzv_type_name(m->h.type, tb, sizeof tb));
    if (!s) {
      dit_rdzv_proof_mac(e->secret, e->secret_len, channel, server_nonce, nonce, acceptor_rank, e->rank, e->world, want);
      if (m->h.a != acceptor_rank || !dit_crypto_equal(want, m->mac, sizeof want))
        s = DIT_ERR(FAILED_PRECONDITION, "rank %d: %s did not prove that it knows the job secret: the ranks do not share one secret "
                    "(set the same DIT_JOB_SECRET or DIT_JOB_SECRET_FILE on every rank; this rank's is from %s), or another process "
                    "listens there", e->rank, peer, e->secret_var && e->secret_var[0] ? e->secret_var : "nowhere");
    }
  }
  dit_status_free(why);
  free(buf);
  free(m);
  return s;
}
