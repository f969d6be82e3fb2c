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
#include "runtime/launch/rdzv_auth.h"
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

/* kind: 0 for the whole-buffer exchanges, 1 + distance for a shift, so members that disagree
 * on the distance fail where they meet instead of moving the wrong bytes. */
typedef struct wire_header {
  uint32_t magic, seq;
  uint64_t bytes;
  uint32_t kind, reserved;
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

static void set_port(struct sockaddr_storage *a, int port) {
  if (a->ss_family == AF_INET) ((struct sockaddr_in *)a)->sin_port = htons((uint16_t)port);
  else if (a->ss_family == AF_INET6) ((struct sockaddr_in6 *)a)->sin6_port = htons((uint16_t)port);
}

/* A mesh connection that proved the job secret: a rank of this world, above `above`, not yet
 * connected; anything else from a process that knows the secret is the job's error. */
static dit_status_t check_peer(const dit_tcomm_t *c, const dit_rdzv_peer_t *p, int above) {
  if (p->world != c->world)
    return DIT_ERR(INVALID_ARGUMENT, "tcp collectives: rank %d (%s) has world size %d, rank %d has %d", p->rank, p->addr, p->world, c->rank,
                   c->world);
  if (p->rank <= above || p->rank >= c->world || c->fd[p->rank] >= 0)
    return DIT_ERR(INVALID_ARGUMENT, "tcp collectives: rank %d got a connection from %s claiming rank %d (expected one of %d..%d, each once)",
                   c->rank, p->addr, p->rank, above + 1, c->world - 1);
  return DIT_OK;
}

/* Waits for the ranks above `above` to connect (rank 0: everyone). Strays are refused by the
 * acceptor and do not count; rank 0 passes `table`, which gets each rank's listening address. */
static dit_status_t accept_ranks(dit_tcomm_t *c, dit_rdzv_acceptor_t *acc, int above, int64_t deadline, int timeout_ms,
                                 unsigned char (*table)[DIT_RDZV_ADDR_BYTES]) {
  for (int got = 0; got < c->world - 1 - above; got++) {
    int fd = -1;
    dit_rdzv_peer_t p;
    dit_status_t s = dit_rdzv_acceptor_next(acc, deadline, &fd, &p);
    if (s && dit_status_code(s) == DIT_CODE_DEADLINE_EXCEEDED) {
      dit_status_free(s);
      int bad_mac = 0, refused = dit_rdzv_acceptor_refused(acc, &bad_mac);
      return DIT_ERR(DEADLINE_EXCEEDED, "tcp collectives: rank %d heard from %d of the %d ranks above it within %d ms (%d connection%s "
                     "refused, %d of them for a wrong proof of the job secret)", c->rank, got, c->world - 1 - above, timeout_ms,
                     refused, refused == 1 ? "" : "s", bad_mac);
    }
    if (!s) s = check_peer(c, &p, above);
    struct sockaddr_storage pa;
    socklen_t pl = sizeof pa;
    if (!s && table) {
      /* The peer bound its end to the address it listens on (see dit_tcomm_create). */
      if (getpeername(fd, (struct sockaddr *)&pa, &pl) || p.extra == 0 || p.extra > 65535)
        s = DIT_ERR(INVALID_ARGUMENT, "tcp collectives: rank %d (%s) announced listening port %u", p.rank, p.addr, p.extra);
      if (!s) {
        set_port(&pa, (int)p.extra);
        s = dit_rdzv_addr_encode((struct sockaddr *)&pa, table[p.rank]);
      }
    }
    if (s) {
      if (fd >= 0) close(fd);
      return s;
    }
    c->fd[p.rank] = fd;
  }
  return DIT_OK;
}

/* Every rank listens on a port of its own, bound to the address it meets rank 0 on (rank 0:
 * the interface of its address); rank 0's port travels as the rendezvous payload. Every rank
 * connects to rank 0 (its own end bound to its listening address) and tells it its port;
 * rank 0 sends everyone the table of addresses and ports. Then each rank connects to the
 * ranks below it and accepts those above. Every connection proves the job secret both ways;
 * strays are refused and do not delay the mesh. */
dit_status_t dit_tcomm_create(const dit_launch_env_t *e, int timeout_ms, dit_tcomm_t **out) {
  *out = NULL;
  if (e->world < 1 || e->world > TCOMM_MAX_WORLD || e->rank < 0 || e->rank >= e->world)
    return DIT_ERR(INVALID_ARGUMENT, "tcp collectives: rank %d of %d (at most %d ranks)", e->rank, e->world, TCOMM_MAX_WORLD);
  dit_tcomm_t *c = calloc(1, sizeof *c);
  if (!c) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  c->rank = e->rank, c->world = e->world, c->timeout_ms = timeout_ms;
  for (int i = 0; i < TCOMM_MAX_WORLD; i++) c->fd[i] = -1;
  const int64_t deadline = dit_now_ms() + timeout_ms;
  int lfd = -1, myport = 0, one = 1;
  dit_status_t s = DIT_OK;
  struct sockaddr_storage local, root;
  socklen_t local_len = 0, root_len = 0;
  if (e->world > 1 && e->rank == 0) {
    s = dit_rdzv_bind_address(e, &local, &local_len);
    int err = s ? 0 : dit_rdzv_listen((struct sockaddr *)&local, local_len, TCOMM_MAX_WORLD, &lfd, &myport);
    if (err) s = DIT_ERR(UNAVAILABLE, "tcp collectives: rank 0 cannot listen on %s: %s", e->addr, strerror(err));
  }
  uint32_t port0 = (uint32_t)myport, got0 = 0;
  if (!s) s = dit_rendezvous(e, &port0, sizeof port0, timeout_ms, NULL, NULL, &c->rdzv, &got0);
  if (!s && e->world > 1 && e->rank > 0) {
    s = dit_rendezvous_addresses(c->rdzv, &local, &local_len, &root, &root_len);
    set_port(&local, 0); /* the address, not the connection's own port */
    int err = s ? 0 : dit_rdzv_listen((struct sockaddr *)&local, local_len, TCOMM_MAX_WORLD, &lfd, &myport);
    if (err) {
      char where[80];
      dit_rdzv_format_addr((struct sockaddr *)&local, where, sizeof where);
      s = DIT_ERR(UNAVAILABLE, "tcp collectives: rank %d cannot listen on %s: %s", e->rank, where, strerror(err));
    }
  }
  dit_rdzv_acceptor_t *acc = NULL;
  if (!s && lfd >= 0) {
    char who[64];
    snprintf(who, sizeof who, "tcp collectives, rank %d", e->rank);
    s = dit_rdzv_acceptor_create(lfd, DIT_RDZV_CHANNEL_MESH, e->rank, e->secret, e->secret_len, who, &acc);
  } else if (lfd >= 0) {
    close(lfd);
  }
  unsigned char table[TCOMM_MAX_WORLD][DIT_RDZV_ADDR_BYTES];
  memset(table, 0, sizeof table);
  if (!s && e->world > 1 && e->rank == 0) {
    struct sockaddr_storage mine = local;
    set_port(&mine, myport);
    s = dit_rdzv_addr_encode((struct sockaddr *)&mine, table[0]);
    if (!s) s = accept_ranks(c, acc, 0, deadline, timeout_ms, table);
    for (int k = 1; !s && k < e->world; k++)
      if (dit_rdzv_send(c->fd[k], DIT_RDZV_TABLE, e->world, 0, table, (size_t)e->world * DIT_RDZV_ADDR_BYTES, deadline))
        s = DIT_ERR(UNAVAILABLE, "tcp collectives: sending rank %d the address table failed", k);
  } else if (!s && e->world > 1) {
    char peer[120], where[80];
    set_port(&root, (int)got0);
    dit_rdzv_format_addr((struct sockaddr *)&root, where, sizeof where);
    snprintf(peer, sizeof peer, "rank 0's collectives at %s", where);
    int fd = dit_rdzv_connect((struct sockaddr *)&root, root_len, (struct sockaddr *)&local, local_len, deadline);
    if (fd < 0) s = DIT_ERR(UNAVAILABLE, "tcp collectives: rank %d could not reach %s: %s", e->rank, peer, strerror(errno));
    if (!s) s = dit_rdzv_handshake(fd, DIT_RDZV_CHANNEL_MESH, e, (uint32_t)myport, 0, peer, deadline);
    unsigned char *buf = s ? NULL : malloc(DIT_RDZV_HDR_BYTES + DIT_RDZV_MAX_BODY);
    dit_rdzv_msg_t *m = s ? NULL : malloc(sizeof *m);
    if (!s && (!buf || !m)) s = DIT_ERR(RESOURCE_EXHAUSTED, "tcp collectives: out of memory");
    dit_status_t why = DIT_OK;
    int err = s ? 0 : dit_rdzv_recv(fd, m, buf, deadline, &why);
    if (!s && (err || m->h.type != DIT_RDZV_TABLE || m->h.a != e->world))
      s = DIT_ERR(UNAVAILABLE, "tcp collectives: rank %d did not get the address table from %s (%s)", e->rank, peer,
                  why ? dit_status_message(why) : err ? strerror(err) : "another frame");
    if (!s) memcpy(table, m->body, (size_t)e->world * DIT_RDZV_ADDR_BYTES);
    dit_status_free(why);
    free(buf);
    free(m);
    if (fd >= 0 && s) close(fd);
    if (!s) c->fd[0] = fd;
    for (int j = 1; !s && j < e->rank; j++) {
      struct sockaddr_storage a;
      socklen_t al = 0;
      s = dit_rdzv_addr_decode(table[j], &a, &al);
      if (s) break;
      dit_rdzv_format_addr((struct sockaddr *)&a, where, sizeof where);
      snprintf(peer, sizeof peer, "rank %d at %s", j, where);
      const int same = a.ss_family == local.ss_family;
      int f = dit_rdzv_connect((struct sockaddr *)&a, al, same ? (struct sockaddr *)&local : NULL, same ? local_len : 0, deadline);
      if (f < 0)
        s = DIT_ERR(DEADLINE_EXCEEDED, "tcp collectives: rank %d could not reach %s within %d ms: %s", e->rank, peer, timeout_ms,
                    strerror(errno));
      if (!s) s = dit_rdzv_handshake(f, DIT_RDZV_CHANNEL_MESH, e, 0, j, peer, deadline);
      if (s && f >= 0) close(f);
      if (!s) c->fd[j] = f;
    }
    if (!s) s = accept_ranks(c, acc, e->rank, deadline, timeout_ms, NULL);
  }
  dit_rdzv_acceptor_destroy(acc);
  for (int i = 0; !s && i < c->world; i++)
    if (c->fd[i] >= 0) setsockopt(c->fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
  uint32_t kind; /* the header's kind, sent and expected */
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
    x[i].sh = (wire_header_t){TCOMM_MAGIC, c->seq[x[i].peer]++, (uint64_t)x[i].slen, x[i].kind, 0};
    x[i].sdone = x[i].rdone = x[i].shdone = x[i].rhdone = 0;
  }
  const long long deadline = c->timeout_ms > 0 ? dit_now_ms() + c->timeout_ms : 0;
  struct pollfd q[TCOMM_MAX_WORLD];
  /* A peer's header that disagrees with this call: it fails once every peer has this call's
   * header too, so each member that disagrees sees it rather than a closed connection. */
  dit_status_t bad = DIT_OK;
  for (;;) {
    int active = 0;
    for (int i = 0; i < m; i++) {
      short ev = 0;
      if (x[i].shdone < sizeof x[i].sh || (!bad && x[i].sdone < x[i].slen)) ev |= POLLOUT;
      if (!bad && (x[i].rhdone < sizeof x[i].rh || x[i].rdone < x[i].rlen)) ev |= POLLIN;
      q[i] = (struct pollfd){c->fd[x[i].peer], ev, 0};
      active += ev != 0;
    }
    if (!active) return bad;
    long long left = deadline ? deadline - dit_now_ms() : 1000;
    if (bad && deadline && left <= 0) return bad;
    if (deadline && left <= 0) {
      char who[256] = "";
      size_t w = 0;
      for (int i = 0; i < m && w < sizeof who - 8; i++)
        if (q[i].events) w += (size_t)snprintf(who + w, sizeof who - w, "%s%d", w ? ", " : "", x[i].peer);
      return DIT_ERR(DEADLINE_EXCEEDED, "tcp collectives: rank %d waited %d ms for ranks %s", c->rank, c->timeout_ms, who);
    }
    if (poll(q, (nfds_t)m, (int)(left > 100 ? 100 : left)) < 0 && errno != EINTR) {
      dit_status_free(bad);
      return DIT_ERR(INTERNAL, "tcp collectives: poll: %s", strerror(errno));
    }
    if (bad && __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) return bad;
    if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE))
      return DIT_ERR(ABORTED, "tcp collectives: rank %d stopped its collectives (it failed)", c->rank);
    for (int i = 0; i < m; i++) {
      xfer_t *t = &x[i];
      if (q[i].revents & (POLLERR | POLLHUP | POLLNVAL) && !(q[i].revents & POLLIN)) {
        if (bad) return bad;
        return DIT_ERR(ABORTED, "tcp collectives: rank %d's connection to rank %d closed", c->rank, t->peer);
      }
      if (q[i].revents & POLLOUT) {
        const int hdr = t->shdone < sizeof t->sh;
        const char *p = hdr ? (const char *)&t->sh + t->shdone : t->send + t->sdone;
        size_t n = hdr ? sizeof t->sh - t->shdone : t->slen - t->sdone;
        ssize_t k = send(q[i].fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN && errno != EINTR) {
          if (bad) return bad;
          return DIT_ERR(ABORTED, "tcp collectives: rank %d sending to rank %d: %s", c->rank, t->peer, strerror(errno));
        }
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
          if (t->rh.magic == TCOMM_MAGIC && t->rh.seq == want && t->rh.kind != t->kind)
            bad = DIT_ERR(INVALID_ARGUMENT, "tcp collectives: rank %d's call %u is %s of distance %d, rank %d's %s of distance %d",
                          t->peer, want, t->rh.kind ? "a shift" : "not a shift", (int)t->rh.kind - 1, c->rank,
                          t->kind ? "a shift" : "not a shift", (int)t->kind - 1);
          else if (t->rh.magic != TCOMM_MAGIC || t->rh.seq != want || t->rh.bytes != (uint64_t)t->rlen)
            bad = DIT_ERR(INVALID_ARGUMENT, "tcp collectives: rank %d sent call %u of %llu bytes, rank %d expected call %u of %zu bytes",
                          t->peer, t->rh.seq, (unsigned long long)t->rh.bytes, c->rank, want, t->rlen);
          if (bad) break; /* no more of any peer's bytes */
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

dit_status_t dit_tcomm_shift(dit_tcomm_t *c, const int *group, int n, int distance, const void *send, void *recv, size_t bytes) {
  dit_status_t s = DIT_OK;
  const int me = member_index(c, group, n, &s);
  if (me < 0) return s;
  if (distance < 0 || distance >= n)
    return DIT_ERR(INVALID_ARGUMENT, "tcp collectives: shift distance %d is not in 0..%d (group of %d)", distance, n - 1, n);
  if (bytes && (!send || !recv)) return DIT_ERR(INVALID_ARGUMENT, "tcp collectives: shift %s is NULL for %zu bytes", send ? "recv" : "send", bytes);
  if (bytes && (const char *)send < (const char *)recv + bytes && (const char *)recv < (const char *)send + bytes)
    return DIT_ERR(INVALID_ARGUMENT, "tcp collectives: shift send and recv overlap");
  const int to = group[(me + distance) % n], from = group[(me + n - distance) % n];
  if (to == c->rank) { /* distance 0 */
    if (bytes) memcpy(recv, send, bytes);
    return DIT_OK;
  }
  /* Both directions move at once (exchange polls every connection), so no order of the pairs
   * can deadlock; with 2 * distance == n both go to one peer, one transfer each way. */
  const uint32_t kind = 1u + (uint32_t)distance;
  xfer_t x[2];
  int m = 0;
  x[m++] = (xfer_t){.peer = to, .send = send, .slen = bytes, .kind = kind};
  if (from == to) x[0].recv = recv, x[0].rlen = bytes;
  else x[m++] = (xfer_t){.peer = from, .recv = recv, .rlen = bytes, .kind = kind};
  return exchange(c, x, m);
}
