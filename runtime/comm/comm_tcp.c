#include "runtime/comm/comm_tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "runtime/launch/rendezvous.h"

#define TCOMM_MAGIC 0x44544331u /* "DTC1" */
#define TCOMM_MAX_WORLD 64

struct dit_tcomm {
  int rank, world, timeout_ms;
  dit_rendezvous_t *rdzv; /* kept open: the launch's liveness channel */
  int fd[TCOMM_MAX_WORLD]; /* per peer; -1 for self */
  uint32_t seq[TCOMM_MAX_WORLD];
  int aborted; /* atomic: this rank failed; collectives in flight return */
};

typedef struct wire_header {
  uint32_t magic, seq;
  uint64_t bytes;
} wire_header_t;

dit_status_t dit_tcomm_status(dit_tcomm_t *c) { return dit_rendezvous_status(c->rdzv); }

void dit_tcomm_report_failure(dit_tcomm_t *c, const char *why) { dit_rendezvous_report_failure(c->rdzv, why); }

void dit_tcomm_abort(dit_tcomm_t *c) { __atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE); }

void dit_tcomm_destroy(dit_tcomm_t *c) {
  if (!c) return;
  for (int i = 0; i < c->world; i++)
    if (c->fd[i] >= 0) close(c->fd[i]);
  dit_rendezvous_close(c->rdzv);
  free(c);
}

/* Blocking whole reads and writes during setup, bounded by the deadline. */
static int io_all(int fd, void *p, size_t n, int writing, long long deadline) {
  char *b = p;
  while (n) {
    struct pollfd q = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
    long long left = deadline - dit_now_ms();
    if (left <= 0 || poll(&q, 1, (int)left) <= 0) return -1;
    ssize_t k = writing ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
    if (k <= 0) {
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      return -1;
    }
    b += k, n -= (size_t)k;
  }
  return 0;
}

/* A listener on a port the system picks; its number in *port. */
static int listen_any(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, TCOMM_MAX_WORLD) || getsockname(fd, (struct sockaddr *)&a, &len)) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

static int accept_by(int lfd, long long deadline) {
  struct pollfd q = {lfd, POLLIN, 0};
  long long left = deadline - dit_now_ms();
  return left > 0 && poll(&q, 1, (int)left) > 0 ? accept(lfd, NULL, NULL) : -1;
}

static int connect_to(uint32_t ip, int port, long long deadline) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = ip;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
    if (fd >= 0) close(fd);
    if (dit_now_ms() > deadline) return -1;
    usleep(20000);
  }
}

/* Every rank listens on a port of its own; the rendezvous hands out rank 0's; every rank tells
 * rank 0 its port, and rank 0 sends everyone the table of addresses (as it saw them connect)
 * and ports. Then each rank connects to the ranks below it and accepts those above. */
dit_status_t dit_tcomm_create(const dit_launch_env_t *e, int timeout_ms, dit_tcomm_t **out) {
  *out = NULL;
  if (e->world < 1 || e->world > TCOMM_MAX_WORLD || e->rank < 0 || e->rank >= e->world)
    return DIT_ERR(INVALID_ARGUMENT, "tcp collectives: rank %d of %d (at most %d ranks)", e->rank, e->world, TCOMM_MAX_WORLD);
  dit_tcomm_t *c = calloc(1, sizeof *c);
  if (!c) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  c->rank = e->rank, c->world = e->world, c->timeout_ms = timeout_ms;
  for (int i = 0; i < TCOMM_MAX_WORLD; i++) c->fd[i] = -1;
  const long long deadline = dit_now_ms() + timeout_ms;
  int myport = 0, lfd = listen_any(&myport), one = 1;
  dit_status_t s = lfd < 0 ? DIT_ERR(UNAVAILABLE, "tcp collectives: rank %d cannot listen: %s", e->rank, strerror(errno)) : DIT_OK;
  uint32_t port0 = (uint32_t)myport, got0 = 0;
  if (!s) s = dit_rendezvous(e, &port0, sizeof port0, timeout_ms, NULL, NULL, &c->rdzv, &got0);
  uint32_t table[2 * TCOMM_MAX_WORLD] = {0}; /* per rank: IPv4 address (network order), port */
  if (!s && e->rank == 0) {
    table[0] = htonl(INADDR_LOOPBACK), table[1] = (uint32_t)myport;
    for (int k = 1; !s && k < e->world; k++) {
      int fd = accept_by(lfd, deadline);
      uint32_t hello[3] = {0, 0, 0};
      struct sockaddr_in pa;
      socklen_t pl = sizeof pa;
      if (fd < 0 || io_all(fd, hello, sizeof hello, 0, deadline) || hello[0] != TCOMM_MAGIC || hello[1] < 1 ||
          hello[1] >= (uint32_t)e->world || c->fd[hello[1]] >= 0 || getpeername(fd, (struct sockaddr *)&pa, &pl)) {
        if (fd >= 0) close(fd);
        s = DIT_ERR(DEADLINE_EXCEEDED, "tcp collectives: rank 0 heard from %d of %d ranks within %d ms (or a bad hello)", k - 1, e->world - 1,
                    timeout_ms);
        break;
      }
      c->fd[hello[1]] = fd;
      table[2 * hello[1]] = pa.sin_addr.s_addr, table[2 * hello[1] + 1] = hello[2];
    }
    for (int k = 1; !s && k < e->world; k++)
      if (io_all(c->fd[k], table, sizeof table, 1, deadline)) s = DIT_ERR(UNAVAILABLE, "tcp collectives: sending rank %d the table failed", k);
  } else if (!s) {
    struct sockaddr_in a0;
    if (inet_pton(AF_INET, e->addr, &a0.sin_addr) != 1)
      s = DIT_ERR(INVALID_ARGUMENT, "tcp collectives: rank 0's address '%s' is not IPv4", e->addr);
    int fd = s ? -1 : connect_to(a0.sin_addr.s_addr, (int)got0, deadline);
    uint32_t hello[3] = {TCOMM_MAGIC, (uint32_t)e->rank, (uint32_t)myport};
    if (!s && (fd < 0 || io_all(fd, hello, sizeof hello, 1, deadline) || io_all(fd, table, sizeof table, 0, deadline)))
      s = DIT_ERR(UNAVAILABLE, "tcp collectives: rank %d could not reach rank 0 at %s:%u", e->rank, e->addr, got0);
    if (fd >= 0 && s) close(fd);
    if (!s) c->fd[0] = fd;
    if (!s && table[0] == htonl(INADDR_LOOPBACK)) table[0] = a0.sin_addr.s_addr;
    for (int j = 1; !s && j < e->rank; j++) {
      int f = connect_to(table[2 * j], (int)table[2 * j + 1], deadline);
      uint32_t h[3] = {TCOMM_MAGIC, (uint32_t)e->rank, 0};
      if (f < 0 || io_all(f, h, sizeof h, 1, deadline)) {
        if (f >= 0) close(f);
        s = DIT_ERR(DEADLINE_EXCEEDED, "tcp collectives: rank %d could not reach rank %d within %d ms", e->rank, j, timeout_ms);
      } else {
        c->fd[j] = f;
      }
    }
    for (int k = e->rank + 1; !s && k < e->world; k++) {
      int f = accept_by(lfd, deadline);
      uint32_t h[3] = {0, 0, 0};
      if (f < 0 || io_all(f, h, sizeof h, 0, deadline) || h[0] != TCOMM_MAGIC || h[1] <= (uint32_t)e->rank || h[1] >= (uint32_t)e->world ||
          c->fd[h[1]] >= 0) {
        if (f >= 0) close(f);
        s = DIT_ERR(DEADLINE_EXCEEDED, "tcp collectives: rank %d: a higher rank did not connect within %d ms (or sent a bad hello)", e->rank,
                    timeout_ms);
      } else {
        c->fd[h[1]] = f;
      }
    }
  }
  if (lfd >= 0) close(lfd);
  for (int i = 0; !s && i < c->world; i++)
    if (c->fd[i] >= 0) {
      setsockopt(c->fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fcntl(c->fd[i], F_SETFL, fcntl(c->fd[i], F_GETFL) | O_NONBLOCK);
    }
  if (s) {
    dit_tcomm_destroy(c);
    return s;
  }
  /* Meeting is quick; a collective may wait for a peer that computes a whole block first. */
  c->timeout_ms = 10 * timeout_ms;
  *out = c;
  return DIT_OK;
}

/* One transfer each way with every other member: to member k, send[k] (slen[k] bytes); from
 * member k, into recv[k] (rlen[k] bytes, which the sender's header must agree with). */
typedef struct xfer {
  int peer;
  const char *send;
  char *recv;
  size_t slen, rlen, sdone, rdone;
  wire_header_t sh, rh;
  size_t shdone, rhdone;
} xfer_t;

static dit_status_t exchange_once(dit_tcomm_t *c, xfer_t *x, int m);

/* A peer's connection that breaks usually means the peer failed: its report travels on the
 * launch's liveness channel, and a moment's wait for it makes the error name the real cause. */
static dit_status_t exchange(dit_tcomm_t *c, xfer_t *x, int m) {
  dit_status_t s = exchange_once(c, x, m);
  if (!s || dit_status_code(s) != DIT_CODE_ABORTED || __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) return s;
  for (int waited = 0; waited <= 500; waited += 20) {
    dit_status_t why = dit_rendezvous_status(c->rdzv);
    if (why) {
      dit_status_t r = DIT_ERR(ABORTED, "%s (%s)", dit_status_message(why), dit_status_message(s));
      dit_status_free(why);
      dit_status_free(s);
      return r;
    }
    usleep(20 * 1000);
  }
  return s;
}

static dit_status_t exchange_once(dit_tcomm_t *c, xfer_t *x, int m) {
  for (int i = 0; i < m; i++) {
    x[i].sh = (wire_header_t){TCOMM_MAGIC, c->seq[x[i].peer]++, (uint64_t)x[i].slen};
    x[i].sdone = x[i].rdone = x[i].shdone = x[i].rhdone = 0;
  }
  const long long deadline = c->timeout_ms > 0 ? dit_now_ms() + c->timeout_ms : 0;
  struct pollfd q[TCOMM_MAX_WORLD];
  for (;;) {
    int active = 0;
    for (int i = 0; i < m; i++) {
      short ev = 0;
      if (x[i].shdone < sizeof x[i].sh || x[i].sdone < x[i].slen) ev |= POLLOUT;
      if (x[i].rhdone < sizeof x[i].rh || x[i].rdone < x[i].rlen) ev |= POLLIN;
      q[i] = (struct pollfd){c->fd[x[i].peer], ev, 0};
      active += ev != 0;
    }
    if (!active) return DIT_OK;
    long long left = deadline ? deadline - dit_now_ms() : 1000;
    if (deadline && left <= 0) {
      char who[256] = "";
      size_t w = 0;
      for (int i = 0; i < m && w < sizeof who - 8; i++)
        if (q[i].events) w += (size_t)snprintf(who + w, sizeof who - w, "%s%d", w ? ", " : "", x[i].peer);
      return DIT_ERR(DEADLINE_EXCEEDED, "tcp collectives: rank %d waited %d ms for ranks %s", c->rank, c->timeout_ms, who);
    }
    if (poll(q, (nfds_t)m, (int)(left > 100 ? 100 : left)) < 0 && errno != EINTR)
      return DIT_ERR(INTERNAL, "tcp collectives: poll: %s", strerror(errno));
    if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE))
      return DIT_ERR(ABORTED, "tcp collectives: rank %d stopped its collectives (it failed)", c->rank);
    for (int i = 0; i < m; i++) {
      xfer_t *t = &x[i];
      if (q[i].revents & (POLLERR | POLLHUP | POLLNVAL) && !(q[i].revents & POLLIN))
        return DIT_ERR(ABORTED, "tcp collectives: rank %d's connection to rank %d closed", c->rank, t->peer);
      if (q[i].revents & POLLOUT) {
        const int hdr = t->shdone < sizeof t->sh;
        const char *p = hdr ? (const char *)&t->sh + t->shdone : t->send + t->sdone;
        size_t n = hdr ? sizeof t->sh - t->shdone : t->slen - t->sdone;
        ssize_t k = send(q[i].fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN && errno != EINTR)
          return DIT_ERR(ABORTED, "tcp collectives: rank %d sending to rank %d: %s", c->rank, t->peer, strerror(errno));
        if (k > 0) *(hdr ? &t->shdone : &t->sdone) += (size_t)k;
      }
      if (q[i].revents & POLLIN) {
        const int hdr = t->rhdone < sizeof t->rh;
        char *p = hdr ? (char *)&t->rh + t->rhdone : t->recv + t->rdone;
        size_t n = hdr ? sizeof t->rh - t->rhdone : t->rlen - t->rdone;
        ssize_t k = recv(q[i].fd, p, n, 0);
        if (k == 0) return DIT_ERR(ABORTED, "tcp collectives: rank %d closed its connection to rank %d", t->peer, c->rank);
        if (k < 0 && errno != EAGAIN && errno != EINTR)
          return DIT_ERR(ABORTED, "tcp collectives: rank %d receiving from rank %d: %s", c->rank, t->peer, strerror(errno));
        if (k > 0) *(hdr ? &t->rhdone : &t->rdone) += (size_t)k;
        if (hdr && t->rhdone == sizeof t->rh) {
          const uint32_t want = c->seq[t->peer] - 1;
          if (t->rh.magic != TCOMM_MAGIC || t->rh.seq != want || t->rh.bytes != (uint64_t)t->rlen)
            return DIT_ERR(INVALID_ARGUMENT, "tcp collectives: rank %d sent call %u of %llu bytes, rank %d expected call %u of %zu bytes",
                           t->peer, t->rh.seq, (unsigned long long)t->rh.bytes, c->rank, want, t->rlen);
        }
      }
    }
  }
}

static int member_index(const dit_tcomm_t *c, const int *group, int n, dit_status_t *s) {
  int me = -1;
  for (int i = 0; i < n; i++) {
    if (group[i] < 0 || group[i] >= c->world) {
      *s = DIT_ERR(INVALID_ARGUMENT, "tcp collectives: group member %d of a world of %d", group[i], c->world);
      return -1;
    }
    if (group[i] == c->rank) me = i;
  }
  if (me < 0 || n > TCOMM_MAX_WORLD) *s = DIT_ERR(INVALID_ARGUMENT, "tcp collectives: rank %d is not in the group of %d", c->rank, n);
  return me;
}

/* Member i receives send + i * stride (bytes of it); recv gets member i's at i * bytes. An
 * allgather sends one block to all (stride 0); an all-to-all a block each (stride bytes). */
static dit_status_t spread(dit_tcomm_t *c, const int *group, int n, const void *send, size_t stride, void *recv, size_t bytes) {
  dit_status_t s = DIT_OK;
  const int me = member_index(c, group, n, &s);
  if (me < 0) return s;
  xfer_t x[TCOMM_MAX_WORLD];
  int m = 0;
  for (int i = 0; i < n; i++)
    if (i != me)
      x[m++] = (xfer_t){.peer = group[i], .send = (const char *)send + (size_t)i * stride, .slen = bytes,
                        .recv = (char *)recv + (size_t)i * bytes, .rlen = bytes};
  memmove((char *)recv + (size_t)me * bytes, (const char *)send + (size_t)me * stride, bytes);
  return exchange(c, x, m);
}

dit_status_t dit_tcomm_allgather(dit_tcomm_t *c, const int *group, int n, const void *send, size_t bytes, void *recv) {
  return spread(c, group, n, send, 0, recv, bytes);
}

dit_status_t dit_tcomm_alltoall(dit_tcomm_t *c, const int *group, int n, const void *send, void *recv, size_t chunk) {
  return spread(c, group, n, send, chunk, recv, chunk);
}

dit_status_t dit_tcomm_allreduce_sum(dit_tcomm_t *c, const int *group, int n, void *buf, size_t count, dit_dtype_t dtype) {
  if (dtype != DIT_F32 && dtype != DIT_BF16) return DIT_ERR(INVALID_ARGUMENT, "tcp collectives: allreduce of %s", dit_dtype_name(dtype));
  const size_t es = dit_dtype_size(dtype), bytes = count * es;
  char *all = malloc((size_t)n * bytes + 1);
  if (!all) return DIT_ERR(RESOURCE_EXHAUSTED, "tcp collectives: out of memory for %d x %zu bytes", n, bytes);
  dit_status_t s = dit_tcomm_allgather(c, group, n, buf, bytes, all);
  /* fp32 in group order, rounded once: the in-process communicator's arithmetic. */
  for (size_t e = 0; !s && e < count; e++) {
    if (dtype == DIT_F32) {
      float acc = ((const float *)all)[e];
      for (int k = 1; k < n; k++) acc += ((const float *)(all + (size_t)k * bytes))[e];
      ((float *)buf)[e] = acc;
    } else {
      float acc = dit_bf16_to_f32(((const uint16_t *)all)[e]);
      for (int k = 1; k < n; k++) acc += dit_bf16_to_f32(((const uint16_t *)(all + (size_t)k * bytes))[e]);
      ((uint16_t *)buf)[e] = dit_f32_to_bf16(acc);
    }
  }
  free(all);
  return s;
}

dit_status_t dit_tcomm_broadcast(dit_tcomm_t *c, const int *group, int n, int root, void *buf, size_t bytes) {
  dit_status_t s = DIT_OK;
  const int me = member_index(c, group, n, &s);
  if (me < 0) return s;
  xfer_t x[TCOMM_MAX_WORLD];
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (i == me) continue;
    if (c->rank == root) x[m++] = (xfer_t){.peer = group[i], .send = buf, .slen = bytes};
    else if (group[i] == root) x[m++] = (xfer_t){.peer = root, .recv = buf, .rlen = bytes};
    else x[m++] = (xfer_t){.peer = group[i]}; /* an empty message keeps every pair's calls in step */
  }
  return exchange(c, x, m);
}
