/* The TCP mesh of one process per rank on loopback: three forked ranks build the mesh and
 * run collectives (sums, gathers and shifts at every distance give the expected values, a
 * shift whose members disagree on the distance fails where they meet), while the test, acting as a
 * port scanner, finds the ranks' listening sockets and sends each stray connections (garbage,
 * no MAC, a wrong secret, a replayed nonce, the other channel's proof, silence): every stray is
 * refused and logged, the collectives give the same values, and the ranks are not delayed.
 * Every listener is bound to 127.0.0.1, never the wildcard, and every socket is
 * close-on-exec. A rank with another secret makes the mesh fail, naming the secret. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "check.h"
#include "launch_helpers.h"
#include "runtime/comm/comm_tcp.h"
#include "runtime/launch/rdzv_auth.h"
#include "runtime/launch/rdzv_wire.h"

#define WORLD 3
#define SECRET "tcp mesh test secret of 32 bytes"
#define TIMEOUT_MS 3000
#define LATE_MS 700

typedef struct result {
  int code, sums_ok, gather_ok, shift_ok, not_cloexec;
  int mm_code, mm_unchanged; /* the shift whose members disagree on the distance */
  char mm_msg[300];
  long setup_ms;
  char msg[600];
} result_t;

static uint8_t pattern(int rank, int distance, size_t i) { return (uint8_t)(rank * 37 + distance * 11 + i * 7 + (i >> 8)); }

/* Shifts at every distance and odd sizes over the world (group order {1, 2, 0}) and a pair
 * {2, 0} (one peer both ways); then members that disagree on the distance (ranks 0 and 1 meet
 * that disagree see it), which leaves the mesh out of step, so it comes last. */
static void shift_checks(dit_tcomm_t *c, int rank, result_t *res) {
  static const size_t sizes[] = {0, 1, 7, 1001, 70001};
  static const int g[WORLD] = {1, 2, 0}, pair[2] = {2, 0};
  const int me = rank == 1 ? 0 : rank == 2 ? 1 : 2;
  uint8_t *send = malloc(70001), *recv = malloc(70001 + 1);
  res->shift_ok = send && recv;
  for (int d = 0; d < WORLD && res->shift_ok; d++)
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes && res->shift_ok; k++) {
      for (size_t i = 0; i < sizes[k]; i++) send[i] = pattern(rank, d, i);
      memset(recv, 0xee, sizes[k] + 1);
      dit_status_t s = dit_tcomm_shift(c, g, WORLD, d, send, recv, sizes[k]);
      const int from = g[(me + WORLD - d) % WORLD];
      res->shift_ok &= !s && recv[sizes[k]] == 0xee;
      for (size_t i = 0; i < sizes[k] && res->shift_ok; i++) res->shift_ok &= recv[i] == pattern(from, d, i);
      if (s) snprintf(res->msg, sizeof res->msg, "shift distance %d: %s", d, dit_status_message(s));
      dit_status_free(s);
    }
  if (rank != 1 && res->shift_ok) {
    for (size_t i = 0; i < 333; i++) send[i] = pattern(rank, 9, i);
    dit_status_t s = dit_tcomm_shift(c, pair, 2, 1, send, recv, 333);
    for (size_t i = 0; i < 333 && !s && res->shift_ok; i++) res->shift_ok &= recv[i] == pattern(2 - rank, 9, i);
    res->shift_ok &= !s;
    dit_status_free(s);
  }
  if (res->shift_ok) {
    memset(recv, 0xcd, 64);
    dit_status_t s = dit_tcomm_shift(c, g, WORLD, rank == 2 ? 2 : 1, send, recv, 64);
    res->mm_code = (int)dit_status_code(s);
    snprintf(res->mm_msg, sizeof res->mm_msg, "%s", dit_status_message(s));
    dit_status_free(s);
    res->mm_unchanged = 1;
    for (int i = 0; i < 64; i++) res->mm_unchanged &= recv[i] == 0xcd;
    poll(NULL, 0, 300); /* the mesh stays open until every member has read its peers' headers */
  }
  free(send);
  free(recv);
}

static void run_rank(int rank, int port, const char *secret, const char *log, int out_fd) {
  result_t res;
  memset(&res, 0, sizeof res);
  if (rank == 0 && log) {
    int lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (lf >= 0) dup2(lf, 2), close(lf);
  }
  if (rank > 0) poll(NULL, 0, LATE_MS); /* the strays come first */
  dit_launch_env_t e;
  launch_env_fill(&e, rank, WORLD, port, secret);
  int64_t t0 = dit_now_ms();
  dit_tcomm_t *c = NULL;
  dit_status_t s = dit_tcomm_create(&e, TIMEOUT_MS, &c);
  res.setup_ms = (long)(dit_now_ms() - t0);
  res.code = (int)dit_status_code(s);
  snprintf(res.msg, sizeof res.msg, "%s", dit_status_message(s));
  dit_status_free(s);
  if (c) {
    res.not_cloexec = launch_inheritable_sockets();
    const int world[WORLD] = {0, 1, 2};
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = (float)(rank * 100 + i);
    s = dit_tcomm_allreduce_sum(c, world, WORLD, v, 64, DIT_F32);
    res.sums_ok = !s;
    for (int i = 0; i < 64 && !s; i++) res.sums_ok &= v[i] == (float)(300 + 3 * i);
    dit_status_free(s);
    int mine[4] = {rank, rank + 10, rank + 20, rank + 30}, all[4 * WORLD];
    s = dit_tcomm_allgather(c, world, WORLD, mine, sizeof mine, all);
    res.gather_ok = !s;
    for (int k = 0; k < WORLD && !s; k++) res.gather_ok &= all[4 * k] == k && all[4 * k + 3] == k + 30;
    dit_status_free(s);
    shift_checks(c, rank, &res);
    dit_tcomm_destroy(c);
  }
  ssize_t w = write(out_fd, &res, sizeof res);
  _exit(w == (ssize_t)sizeof res ? 0 : 1);
}

/* ---- the scanner ---- */

/* Socket inodes of a process. */
static int socket_inodes(pid_t pid, unsigned long *out, int cap) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d)) && n < cap;) {
    char p[128], link[64];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    ssize_t k = readlink(p, link, sizeof link - 1);
    if (k <= 0) continue;
    link[k] = 0;
    unsigned long ino;
    if (sscanf(link, "socket:[%lu]", &ino) == 1) out[n++] = ino;
  }
  if (d) closedir(d);
  return n;
}

typedef struct listener {
  unsigned addr;
  int port;
} listener_t;

/* The listening TCP sockets among the given inodes. */
static int listeners_of(const unsigned long *inos, int n_inos, listener_t *out, int cap) {
  FILE *f = fopen("/proc/net/tcp", "r");
  char line[512];
  int n = 0;
  while (f && fgets(line, sizeof line, f) && n < cap) {
    unsigned addr, port, state;
    unsigned long ino;
    if (sscanf(line, " %*d: %8x:%4x %*x:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu", &addr, &port, &state, &ino) != 4 || state != 0x0A)
      continue;
    for (int i = 0; i < n_inos; i++)
      if (inos[i] == ino) out[n++] = (listener_t){addr, (int)port};
  }
  if (f) fclose(f);
  return n;
}

static int read_challenge(int fd, unsigned char nonce[DIT_RDZV_NONCE_BYTES], int *channel) {
  static unsigned char buf[DIT_RDZV_HDR_BYTES + DIT_RDZV_MAX_BODY];
  dit_rdzv_msg_t m;
  if (fd < 0 || dit_rdzv_recv(fd, &m, buf, dit_now_ms() + 2000, NULL) || m.h.type != DIT_RDZV_CHALLENGE) return -1;
  memcpy(nonce, m.nonce, DIT_RDZV_NONCE_BYTES);
  *channel = m.h.a;
  return 0;
}

static void send_hello(int fd, int channel, const char *secret, const unsigned char *server_nonce) {
  unsigned char body[DIT_RDZV_HELLO_BODY] = {0}, cn[DIT_RDZV_NONCE_BYTES];
  for (int i = 0; i < DIT_RDZV_NONCE_BYTES; i++) cn[i] = (unsigned char)(rand() & 0xff);
  memcpy(body + 4, cn, sizeof cn);
  if (secret) dit_rdzv_hello_mac((const unsigned char *)secret, strlen(secret), channel, server_nonce, cn, 1, WORLD, 0, body + 36);
  dit_rdzv_send(fd, DIT_RDZV_HELLO, 1, WORLD, body, sizeof body, dit_now_ms() + 1000);
}

/* 1 when the peer closed within ms without ever sending its proof (an error frame first is
 * fine); 0 otherwise. */
static int refused_by_peer(int fd, int ms) {
  static unsigned char buf[DIT_RDZV_HDR_BYTES + DIT_RDZV_MAX_BODY];
  dit_rdzv_msg_t m;
  int64_t end = dit_now_ms() + ms;
  for (;;) {
    int err = dit_rdzv_recv(fd, &m, buf, end, NULL);
    if (!err && m.h.type == DIT_RDZV_PROOF) return 0;
    if (!err) continue;
    return err != ETIMEDOUT;
  }
}

typedef struct scan {
  int listeners, mesh_listeners, wildcard, strays, refused;
} scan_t;

/* Stray connections to one listener: all connected at once (so they queue ahead of the real
 * ranks even where rank 0 is not accepting yet), then each plays its part. */
typedef struct attack {
  int port, silent, keep, fd[5];
} attack_t;

static void attack_connect(attack_t *a, int port) {
  a->port = port;
  a->silent = launch_connect(port);
  a->keep = launch_connect(port);
  for (int i = 0; i < 5; i++) a->fd[i] = launch_connect(port);
  /* Garbage: the start of a TLS hello. */
  if (a->fd[0] >= 0 && write(a->fd[0], "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not a rendezvous frame", 35) < 0)
    close(a->fd[0]), a->fd[0] = -1;
}

static void attack_play(attack_t *a, scan_t *sc) {
  unsigned char n[DIT_RDZV_NONCE_BYTES], old[DIT_RDZV_NONCE_BYTES];
  int ch = 0, och = 0;
  /* The old nonce: another connection's challenge. */
  int have_old = !read_challenge(a->keep, old, &och);
  CHECK(have_old);
  if (!read_challenge(a->fd[1], n, &ch)) send_hello(a->fd[1], ch, NULL, n);
  if (!read_challenge(a->fd[2], n, &ch)) send_hello(a->fd[2], ch, "the secret of some other job....", n);
  if (!read_challenge(a->fd[3], n, &ch) && have_old) send_hello(a->fd[3], ch, SECRET, old);
  if (!read_challenge(a->fd[4], n, &ch))
    send_hello(a->fd[4], ch == DIT_RDZV_CHANNEL_MESH ? DIT_RDZV_CHANNEL_RENDEZVOUS : DIT_RDZV_CHANNEL_MESH, SECRET, n);
  for (int i = 0; i < 5; i++) {
    sc->strays++;
    sc->refused += a->fd[i] >= 0 && refused_by_peer(a->fd[i], 3000);
    if (a->fd[i] >= 0) close(a->fd[i]);
  }
}

static void attack_end(attack_t *a) {
  if (a->silent >= 0) close(a->silent);
  if (a->keep >= 0) close(a->keep);
}

static void scan_and_attack(pid_t rank0, int rdzv_port, scan_t *sc) {
  listener_t l[8];
  int n = 0;
  /* Rank 0 opens its mesh listener, then its rendezvous one; the others arrive LATE_MS later. */
  for (int64_t end = dit_now_ms() + LATE_MS - 300; dit_now_ms() < end && n < 2; poll(NULL, 0, 2)) {
    unsigned long inos[64];
    n = listeners_of(inos, socket_inodes(rank0, inos, 64), l, 8);
  }
  attack_t at[8];
  for (int i = 0; i < n; i++) {
    sc->listeners++;
    sc->wildcard += l[i].addr != htonl(INADDR_LOOPBACK);
    sc->mesh_listeners += l[i].port != rdzv_port;
    attack_connect(&at[i], l[i].port);
  }
  /* The rendezvous first: rank 0 answers there at once; the mesh listener's queue is served
   * once the ranks have met. */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n; i++)
      if ((l[i].port == rdzv_port) == (pass == 0)) attack_play(&at[i], sc);
  for (int i = 0; i < n; i++) attack_end(&at[i]);
}

static int run_world(const char *secrets[WORLD], const char *log, result_t *res, scan_t *sc) {
  int port = launch_free_port();
  pid_t pids[WORLD];
  int fds[WORLD];
  fflush(NULL);
  for (int r = 0; r < WORLD; r++) {
    int p[2];
    if (pipe(p)) exit(2);
    pids[r] = fork();
    if (pids[r] == 0) {
      close(p[0]);
      run_rank(r, port, secrets[r], log, p[1]);
    }
    close(p[1]);
    fds[r] = p[0];
  }
  if (sc) scan_and_attack(pids[0], port, sc);
  int64_t deadline = dit_now_ms() + 20000;
  for (int r = 0; r < WORLD; r++) {
    int st;
    while (waitpid(pids[r], &st, WNOHANG) == 0) {
      if (dit_now_ms() > deadline) kill(pids[r], SIGKILL);
      poll(NULL, 0, 5);
    }
    if (read(fds[r], &res[r], sizeof res[r]) != (ssize_t)sizeof res[r]) res[r].code = -1;
    close(fds[r]);
  }
  return 0;
}

static void test_mesh_with_strays(void) {
  char log[512];
  launch_log_path(log, sizeof log, "tcomm_strays");
  const char *secrets[WORLD] = {SECRET, SECRET, SECRET};
  result_t res[WORLD];
  scan_t sc;
  memset(&sc, 0, sizeof sc);
  run_world(secrets, log, res, &sc);
  for (int r = 0; r < WORLD; r++) {
    CHECK_EQ_INT(res[r].code, DIT_CODE_OK);
    if (res[r].code) fprintf(stderr, "rank %d: %s\n", r, res[r].msg);
    CHECK(res[r].sums_ok);
    CHECK(res[r].gather_ok);
    CHECK(res[r].shift_ok);
    CHECK_EQ_INT(res[r].not_cloexec, 0);
  }
  /* Group {1, 2, 0}, rank 2 at distance 2, the others at 1: ranks 1 and 2 each send to the
   * other, ranks 0 and 2 each expect the other's block; every pair that disagrees sees the
   * other's distance in its header and refuses before a byte lands. Rank 1 may get rank 0's
   * block (that pair agrees) before it hears from rank 2. */
  CHECK(res[0].mm_unchanged);
  CHECK(res[2].mm_unchanged);
  for (int r = 0; r < WORLD; r++) {
    CHECK_EQ_INT(res[r].mm_code, DIT_CODE_INVALID_ARGUMENT);
    CHECK(strstr(res[r].mm_msg, "is a shift of distance"));
    if (res[r].mm_code != DIT_CODE_INVALID_ARGUMENT) fprintf(stderr, "rank %d: %s\n", r, res[r].mm_msg);
  }
  CHECK(strstr(res[1].mm_msg, "rank 2's call") && strstr(res[1].mm_msg, "of distance 2, rank 1's a shift of distance 1"));
  CHECK(strstr(res[0].mm_msg, "rank 2's call") && strstr(res[0].mm_msg, "of distance 2, rank 0's a shift of distance 1"));
  /* Not delayed: the late ranks finish setting up at once. */
  CHECK(res[0].setup_ms < LATE_MS + 1500);
  CHECK(res[1].setup_ms < 1500);
  /* Both of rank 0's listeners were found, on 127.0.0.1; no stray ever got a proof back, and
   * each was logged. On the rendezvous port every one was judged on what it sent; on the mesh
   * port, the strays still unanswered when the real ranks got through are closed with the
   * meeting. */
  CHECK_EQ_INT(sc.listeners, 2);
  CHECK_EQ_INT(sc.mesh_listeners, 1);
  CHECK_EQ_INT(sc.wildcard, 0);
  CHECK_EQ_INT(sc.strays, 10);
  CHECK_EQ_INT(sc.refused, 10);
  CHECK_EQ_INT(launch_count_lines(log, "ditrun: tcp collectives, rank 0: refused a connection from 127.0.0.1:", NULL), 7);
  CHECK_EQ_INT(launch_count_lines(log, "ditrun: rendezvous, rank 0: refused a connection from 127.0.0.1:", NULL), 7);
  CHECK_EQ_INT(launch_count_lines(log, "ditrun: rendezvous, rank 0: refused", "not a ditrun rendezvous frame"), 1);
  CHECK_EQ_INT(launch_count_lines(log, "ditrun: rendezvous, rank 0: refused", "does not prove the job secret"), 4);
  if (check_failures_) {
    FILE *f = fopen(log, "r");
    for (char line[1024]; f && fgets(line, sizeof line, f);) fprintf(stderr, "rank 0 log: %s", line);
    if (f) fclose(f);
  }
  unlink(log);
}

static void test_mesh_wrong_secret(void) {
  const char *secrets[WORLD] = {SECRET, SECRET, "another secret, also 32 bytes..."};
  result_t res[WORLD];
  run_world(secrets, NULL, res, NULL);
  CHECK_EQ_INT(res[2].code, DIT_CODE_FAILED_PRECONDITION);
  CHECK(strstr(res[2].msg, "refused this rank's proof of the job secret") && strstr(res[2].msg, "DIT_JOB_SECRET"));
  for (int r = 0; r < 2; r++) CHECK(res[r].code != DIT_CODE_OK);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  srand((unsigned)time(NULL));
  test_mesh_with_strays();
  test_mesh_wrong_secret();
  return check_summary("test_comm_tcp");
}
