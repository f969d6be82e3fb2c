/* The rendezvous on loopback, one forked process per rank: all ranks meet and get rank 0's
 * payload; a missing rank, a world mismatch or a doubled rank fails every rank within the
 * timeout; after the meeting a rank that dies or reports failure makes every other rank's
 * watcher fire, and a clean close does not. Only the job's own ranks get in: stray
 * connections (silent, garbage, no MAC, a wrong MAC, a right MAC over a replayed nonce, a
 * flood) are refused and logged while the ranks meet as usual, a rank with another secret
 * fails at once naming the secret, a peer that answers for rank 0 without proving the secret is
 * refused, rank 0 listens on its own address only, and every socket is close-on-exec. Every wait
 * is bounded. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "check.h"
#include "launch_helpers.h"
#include "runtime/launch/rdzv_auth.h"
#include "runtime/launch/rdzv_wire.h"
#include "runtime/launch/rendezvous.h"

#define SECRET "rendezvous test secret, 32 bytes"

#define MAXP 8
#define PAYLOAD 128
#define TIMEOUT_MS 1500

typedef struct plan {
  int world, port;
  int skip;                      /* this rank is never started */
  int die_rank;                  /* _exit(3) right after the meeting */
  int report_rank;               /* reports a failure right after the meeting */
  int wrong_world_rank, wrong_world;
  int dup_rank;                  /* one extra process also claims this rank */
  int late_rank, late_ms;        /* this rank starts late */
  int hold_ms;                   /* how long the others wait to hear of a failure */
  int close_stagger_ms;          /* rank k closes k * this after the meeting */
  int late_from, late_from_ms;   /* every rank >= late_from starts this late (0: none) */
  int other_secret_rank;         /* this rank has another secret */
  const char *log_path;          /* rank 0's stderr goes here */
} plan_t;

typedef struct result {
  int started, code, payload_ok, cb_fired, cb_rank, status_code, not_cloexec;
  long elapsed_ms, cb_ms;
  char msg[600], cb_why[300], status_msg[600];
} result_t;

static long ms_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

static atomic_int g_fired, g_rank;
static atomic_long g_when;
static char g_why[300];

static void on_failure(void *ctx, int rank, const char *why) {
  (void)ctx;
  snprintf(g_why, sizeof g_why, "%s", why);
  atomic_store(&g_rank, rank);
  atomic_store(&g_when, ms_now());
  atomic_store(&g_fired, 1);
}

static void fill_payload(unsigned char *p) {
  for (int i = 0; i < PAYLOAD; i++) p[i] = (unsigned char)(i * 7 + 13);
}

static void run_rank(const plan_t *pl, int rank, int fd) {
  result_t res;
  memset(&res, 0, sizeof res);
  res.started = 1;
  res.cb_rank = -1;
  if (rank == 0 && pl->log_path) {
    int lf = open(pl->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (lf >= 0) dup2(lf, 2), close(lf);
  }
  if (rank == pl->late_rank) poll(NULL, 0, pl->late_ms);
  if (pl->late_from > 0 && rank >= pl->late_from) poll(NULL, 0, pl->late_from_ms);
  dit_launch_env_t e;
  launch_env_fill(&e, rank, rank == pl->wrong_world_rank ? pl->wrong_world : pl->world, pl->port,
           rank == pl->other_secret_rank ? "another secret of 32 bytes......" : SECRET);
  unsigned char mine[PAYLOAD], want[PAYLOAD], got[PAYLOAD];
  fill_payload(want);
  memset(mine, rank == 0 ? 0 : 0xee, sizeof mine);
  if (rank == 0) memcpy(mine, want, sizeof mine);
  memset(got, 0, sizeof got);
  long t0 = ms_now();
  dit_rendezvous_t *r = NULL;
  dit_status_t s = dit_rendezvous(&e, mine, sizeof mine, TIMEOUT_MS, on_failure, NULL, &r, got);
  long met = ms_now();
  res.elapsed_ms = met - t0;
  res.code = (int)dit_status_code(s);
  snprintf(res.msg, sizeof res.msg, "%s", dit_status_message(s));
  dit_status_free(s);
  if (r) {
    res.payload_ok = !memcmp(got, want, sizeof got);
    res.not_cloexec = launch_inheritable_sockets();
    if (rank == pl->die_rank) _exit(3);
    if (rank == pl->report_rank) dit_rendezvous_report_failure(r, "disk on fire");
    long hold_until = met + (rank == pl->report_rank ? 300 : pl->hold_ms);
    while (!atomic_load(&g_fired) && ms_now() < hold_until) poll(NULL, 0, 5);
    if (pl->close_stagger_ms) poll(NULL, 0, rank * pl->close_stagger_ms);
    dit_status_t st = dit_rendezvous_status(r);
    res.status_code = (int)dit_status_code(st);
    snprintf(res.status_msg, sizeof res.status_msg, "%s", dit_status_message(st));
    dit_status_free(st);
    dit_rendezvous_close(r);
    /* A clean close must not wake anyone: wait a moment for a spurious callback. */
    poll(NULL, 0, 50);
    res.cb_fired = atomic_load(&g_fired);
    res.cb_rank = atomic_load(&g_rank);
    /* The watcher may hear a failure before this thread has even noted the meeting's end. */
    res.cb_ms = res.cb_fired ? (atomic_load(&g_when) > met ? atomic_load(&g_when) - met : 0) : -1;
    snprintf(res.cb_why, sizeof res.cb_why, "%s", g_why);
  }
  ssize_t w = write(fd, &res, sizeof res);
  _exit(w == (ssize_t)sizeof res ? 0 : 1);
}

/* Runs the plan; res[i] for process i (rank i; the extra one of dup_rank is last). Returns
 * the number of processes. */
typedef void (*during_fn)(const plan_t *pl, void *ctx);

static int run_plan_with(plan_t pl, result_t *res, during_fn during, void *ctx) {
  int n = pl.world + (pl.dup_rank >= 0);
  pid_t pids[MAXP];
  int fds[MAXP];
  memset(res, 0, sizeof *res * MAXP);
  fflush(NULL);
  for (int i = 0; i < n; i++) {
    pids[i] = -1, fds[i] = -1;
    int rank = i < pl.world ? i : pl.dup_rank;
    if (i < pl.world && i == pl.skip) continue;
    int p[2];
    if (pipe(p)) exit(2);
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      run_rank(&pl, rank, p[1]);
    }
    close(p[1]);
    pids[i] = pid, fds[i] = p[0];
  }
  if (during) during(&pl, ctx);
  /* Hard bound on the whole scenario: no test may hang. */
  long deadline = ms_now() + 10000;
  for (int i = 0; i < n; i++) {
    if (pids[i] < 0) continue;
    int st;
    while (waitpid(pids[i], &st, WNOHANG) == 0) {
      if (ms_now() > deadline) {
        fprintf(stderr, "process %d hangs; killing it\n", i);
        kill(pids[i], SIGKILL);
      }
      poll(NULL, 0, 5);
    }
    if (read(fds[i], &res[i], sizeof res[i]) != (ssize_t)sizeof res[i]) {
      memset(&res[i], 0, sizeof res[i]);
      res[i].code = -1;
    }
    close(fds[i]);
  }
  return n;
}

static int run_plan(plan_t pl, result_t *res) { return run_plan_with(pl, res, NULL, NULL); }

static plan_t base_plan(int world) {
  plan_t p = {world, launch_free_port(), -1, -1, -1, -1, 0, -1, -1, 0, 0, 0, 0, 0, -1, NULL};
  return p;
}

static void test_meet(void) {
  result_t res[MAXP];
  plan_t pl = base_plan(4);
  pl.close_stagger_ms = 40; /* ranks leave one by one: each a clean close */
  int n = run_plan(pl, res);
  for (int i = 0; i < n; i++) {
    CHECK_EQ_INT(res[i].code, DIT_CODE_OK);
    if (res[i].code) fprintf(stderr, "rank %d: %s\n", i, res[i].msg);
    CHECK(res[i].payload_ok);
    CHECK_EQ_INT(res[i].cb_fired, 0);
    CHECK_EQ_INT(res[i].status_code, DIT_CODE_OK);
    CHECK_EQ_INT(res[i].not_cloexec, 0);
  }
  pl = base_plan(1);
  n = run_plan(pl, res);
  CHECK_EQ_INT(n, 1);
  CHECK_EQ_INT(res[0].code, DIT_CODE_OK);
  CHECK(res[0].payload_ok);
}

static void test_missing_rank(void) {
  result_t res[MAXP];
  plan_t pl = base_plan(3);
  pl.skip = 2;
  run_plan(pl, res);
  for (int i = 0; i < 2; i++) {
    CHECK_EQ_INT(res[i].code, DIT_CODE_DEADLINE_EXCEEDED);
    CHECK(strstr(res[i].msg, "rank 2 of 3 did not arrive within 1500 ms") != NULL);
    if (!strstr(res[i].msg, "rank 2 of 3")) fprintf(stderr, "rank %d: %s\n", i, res[i].msg);
    CHECK(res[i].elapsed_ms >= TIMEOUT_MS - 50 && res[i].elapsed_ms < TIMEOUT_MS + 1000);
  }
  /* Rank 0 missing: the others name the address they could not reach. */
  pl = base_plan(3);
  pl.skip = 0;
  run_plan(pl, res);
  for (int i = 1; i < 3; i++) {
    CHECK_EQ_INT(res[i].code, DIT_CODE_DEADLINE_EXCEEDED);
    CHECK(strstr(res[i].msg, "could not reach rank 0 at 127.0.0.1:") != NULL);
    CHECK(res[i].elapsed_ms < TIMEOUT_MS + 500);
  }
}

static void test_world_mismatch(void) {
  result_t res[MAXP];
  plan_t pl = base_plan(3);
  pl.wrong_world_rank = 2, pl.wrong_world = 4;
  pl.late_rank = 2, pl.late_ms = 300; /* rank 1 is already there to hear the verdict */
  run_plan(pl, res);
  for (int i = 0; i < 3; i++) {
    CHECK_EQ_INT(res[i].code, DIT_CODE_INVALID_ARGUMENT);
    CHECK(strstr(res[i].msg, "world size mismatch: rank 2 has world size 4, rank 0 has 3 (WORLD_SIZE from torchrun)") != NULL);
    if (res[i].code != DIT_CODE_INVALID_ARGUMENT) fprintf(stderr, "rank %d: %s\n", i, res[i].msg);
    CHECK(res[i].elapsed_ms < TIMEOUT_MS);
  }
  pl = base_plan(3);
  pl.dup_rank = 1;
  pl.late_rank = 2, pl.late_ms = 300; /* both rank-1 processes arrive first */
  int n = run_plan(pl, res);
  int refused = 0;
  /* The late rank 2 finds the meeting over and times out on its own. */
  for (int i = 0; i < n; i++)
    if (i != 2) refused += res[i].code == DIT_CODE_INVALID_ARGUMENT && strstr(res[i].msg, "two processes claim rank 1");
  CHECK_EQ_INT(refused, n - 1);
  CHECK_EQ_INT(res[2].code, DIT_CODE_DEADLINE_EXCEEDED);
}

static void test_rank_dies(void) {
  result_t res[MAXP];
  plan_t pl = base_plan(4);
  pl.die_rank = 2;
  pl.hold_ms = 3000;
  run_plan(pl, res);
  for (int i = 0; i < 4; i++) {
    if (i == 2) continue;
    CHECK_EQ_INT(res[i].code, DIT_CODE_OK);
    CHECK_EQ_INT(res[i].cb_fired, 1);
    CHECK_EQ_INT(res[i].cb_rank, 2);
    CHECK(res[i].cb_ms >= 0 && res[i].cb_ms < 1500);
    CHECK(strstr(res[i].cb_why, "connection dropped without a clean close") != NULL);
    CHECK_EQ_INT(res[i].status_code, DIT_CODE_ABORTED);
    CHECK(strstr(res[i].status_msg, "rank 2 failed") != NULL);
  }
  /* Rank 0 itself dying is heard directly. */
  pl = base_plan(3);
  pl.die_rank = 0;
  pl.hold_ms = 3000;
  run_plan(pl, res);
  for (int i = 1; i < 3; i++) {
    CHECK_EQ_INT(res[i].cb_fired, 1);
    CHECK_EQ_INT(res[i].cb_rank, 0);
    CHECK(res[i].cb_ms >= 0 && res[i].cb_ms < 1500);
  }
}

static void test_reported_failure(void) {
  for (int reporter = 0; reporter < 4; reporter += 3) {
    result_t res[MAXP];
    plan_t pl = base_plan(4);
    pl.report_rank = reporter;
    pl.hold_ms = 3000;
    run_plan(pl, res);
    for (int i = 0; i < 4; i++) {
      CHECK_EQ_INT(res[i].code, DIT_CODE_OK);
      if (i == reporter) {
        /* Its own report does not call it back, but its status says it. */
        CHECK_EQ_INT(res[i].cb_fired, 0);
        CHECK(strstr(res[i].status_msg, "(this process) failed: disk on fire") != NULL);
        continue;
      }
      CHECK_EQ_INT(res[i].cb_fired, 1);
      CHECK_EQ_INT(res[i].cb_rank, reporter);
      CHECK(!strcmp(res[i].cb_why, "disk on fire"));
      CHECK(res[i].cb_ms >= 0 && res[i].cb_ms < 1500);
    }
  }
}

/* ---- strays: connections that are not ranks of this job ---- */

/* A connection to the rendezvous port, retried while rank 0 is not listening yet. */
static int connect_port(int port) {
  int fd = -1;
  for (long end = ms_now() + 3000; fd < 0 && ms_now() < end;)
    if ((fd = launch_connect(port)) < 0) poll(NULL, 0, 10);
  return fd;
}

/* Reads one whole frame within ms: 0 on success, -1 on EOF, error or timeout. */
static int read_msg(int fd, dit_rdzv_msg_t *m, unsigned char *buf, int ms) {
  int err = dit_rdzv_recv(fd, m, buf, dit_now_ms() + ms, NULL);
  return err ? -1 : 0;
}

static int read_challenge(int fd, unsigned char nonce[DIT_RDZV_NONCE_BYTES]) {
  static unsigned char buf[DIT_RDZV_HDR_BYTES + DIT_RDZV_MAX_BODY];
  dit_rdzv_msg_t m;
  if (fd < 0 || read_msg(fd, &m, buf, 2000) || m.h.type != DIT_RDZV_CHALLENGE) return -1;
  memcpy(nonce, m.nonce, DIT_RDZV_NONCE_BYTES);
  return 0;
}

static void send_hello(int fd, int channel, const char *secret, const unsigned char *server_nonce, int rank, int world) {
  unsigned char body[DIT_RDZV_HELLO_BODY] = {0}, cn[DIT_RDZV_NONCE_BYTES];
  for (int i = 0; i < DIT_RDZV_NONCE_BYTES; i++) cn[i] = (unsigned char)(rand() & 0xff);
  body[3] = PAYLOAD;
  memcpy(body + 4, cn, sizeof cn);
  if (secret)
    dit_rdzv_hello_mac((const unsigned char *)secret, strlen(secret), channel, server_nonce, cn, rank, world, PAYLOAD,
                       body + 4 + sizeof cn);
  CHECK_EQ_INT(dit_rdzv_send(fd, DIT_RDZV_HELLO, rank, world, body, sizeof body, dit_now_ms() + 1000), 0);
}

/* 1 when rank 0 closed the connection within ms; *told when it said why first. */
static int closed_by_peer(int fd, int ms, int *told) {
  static unsigned char buf[DIT_RDZV_HDR_BYTES + DIT_RDZV_MAX_BODY];
  dit_rdzv_msg_t m;
  *told = 0;
  int64_t end = dit_now_ms() + ms;
  for (;;) {
    int err = dit_rdzv_recv(fd, &m, buf, end, NULL);
    if (!err && m.h.type == DIT_RDZV_ERROR) {
      *told = strstr(m.text, "refused the proof of the job secret") != NULL;
      continue;
    }
    if (!err) continue;
    return err != ETIMEDOUT;
  }
}

typedef struct strays {
  int silent, old, closed[8], told[8];
} strays_t;

static void send_strays(const plan_t *pl, void *ctx) {
  strays_t *st = ctx;
  int fd[8];
  unsigned char old_nonce[DIT_RDZV_NONCE_BYTES], n[DIT_RDZV_NONCE_BYTES];
  st->silent = connect_port(pl->port);
  /* Garbage: an HTTP request. */
  fd[0] = connect_port(pl->port);
  CHECK(fd[0] >= 0 && write(fd[0], "GET / HTTP/1.1\r\nHost: example\r\n\r\n", 34) == 34);
  /* Our protocol with no MAC at all. */
  fd[1] = connect_port(pl->port);
  CHECK_EQ_INT(read_challenge(fd[1], n), 0);
  send_hello(fd[1], DIT_RDZV_CHANNEL_RENDEZVOUS, NULL, n, 1, pl->world);
  /* A MAC made with another secret. */
  fd[2] = connect_port(pl->port);
  CHECK_EQ_INT(read_challenge(fd[2], n), 0);
  send_hello(fd[2], DIT_RDZV_CHANNEL_RENDEZVOUS, "not the secret of this job at all", n, 1, pl->world);
  /* The right secret over an old nonce: the answer to another connection's challenge. */
  st->old = connect_port(pl->port);
  CHECK_EQ_INT(read_challenge(st->old, old_nonce), 0);
  fd[3] = connect_port(pl->port);
  CHECK_EQ_INT(read_challenge(fd[3], n), 0);
  send_hello(fd[3], DIT_RDZV_CHANNEL_RENDEZVOUS, SECRET, old_nonce, 1, pl->world);
  /* The right secret and nonce for the other channel (the mesh's). */
  fd[4] = connect_port(pl->port);
  CHECK_EQ_INT(read_challenge(fd[4], n), 0);
  send_hello(fd[4], DIT_RDZV_CHANNEL_MESH, SECRET, n, 1, pl->world);
  /* Each is refused at once, long before the real ranks arrive; those that spoke our
   * protocol hear why. */
  for (int i = 0; i < 5; i++) {
    st->closed[i] = fd[i] >= 0 && closed_by_peer(fd[i], 300, &st->told[i]);
    if (fd[i] >= 0) close(fd[i]);
  }
}

static void test_strays(void) {
  result_t res[MAXP];
  char logf[512];
  launch_log_path(logf, sizeof logf, "rdzv_strays");
  plan_t pl = base_plan(3);
  pl.late_from = 1, pl.late_from_ms = 600; /* the strays come first */
  pl.log_path = logf;
  strays_t st;
  memset(&st, 0, sizeof st);
  run_plan_with(pl, res, send_strays, &st);
  for (int i = 0; i < 3; i++) {
    CHECK_EQ_INT(res[i].code, DIT_CODE_OK);
    if (res[i].code) fprintf(stderr, "rank %d: %s\n", i, res[i].msg);
    CHECK(res[i].payload_ok);
  }
  /* Not delayed: the meeting ends when the late ranks arrive, far before the timeout. */
  CHECK(res[0].elapsed_ms < TIMEOUT_MS - 300);
  for (int i = 0; i < 5; i++) CHECK(st.closed[i]);
  CHECK(!st.told[0]);
  for (int i = 1; i < 5; i++) CHECK(st.told[i]);
  close(st.silent);
  close(st.old);
  CHECK_EQ_INT(launch_count_lines(logf, "ditrun: rendezvous, rank 0: refused a connection from 127.0.0.1:", NULL), 7);
  CHECK_EQ_INT(launch_count_lines(logf, "not a ditrun rendezvous frame", NULL), 1);
  CHECK_EQ_INT(launch_count_lines(logf, "claims rank 1 of 3 but its answer to this connection's challenge does not prove the job secret", NULL), 4);
  CHECK_EQ_INT(launch_count_lines(logf, "it had not proved the job secret when the meeting ended", NULL), 2);
  if (check_failures_) {
    FILE *f = fopen(logf, "r");
    for (char line[1024]; f && fgets(line, sizeof line, f);) fprintf(stderr, "rank 0 log: %s", line);
    if (f) fclose(f);
  }
  unlink(logf);
}

static void send_flood(const plan_t *pl, void *ctx) {
  int *fds = ctx;
  for (int i = 0; i < 40; i++) fds[i] = connect_port(pl->port);
}

static void test_flood(void) {
  result_t res[MAXP];
  char logf[512];
  launch_log_path(logf, sizeof logf, "rdzv_flood");
  plan_t pl = base_plan(2);
  pl.late_from = 1, pl.late_from_ms = 500;
  pl.log_path = logf;
  int fds[40];
  run_plan_with(pl, res, send_flood, fds);
  /* More silent connections than rank 0 keeps pending do not keep the real rank out. */
  for (int i = 0; i < 2; i++) CHECK_EQ_INT(res[i].code, DIT_CODE_OK);
  CHECK(res[0].elapsed_ms < TIMEOUT_MS);
  CHECK(launch_count_lines(logf, "crowded out while silent", NULL) >= 8);
  for (int i = 0; i < 40; i++)
    if (fds[i] >= 0) close(fds[i]);
  unlink(logf);
}

static void test_wrong_secret(void) {
  result_t res[MAXP];
  plan_t pl = base_plan(3);
  pl.other_secret_rank = 2;
  pl.late_from = 2, pl.late_from_ms = 100;
  run_plan(pl, res);
  /* The rank with the other secret fails at once, naming the secret. */
  CHECK_EQ_INT(res[2].code, DIT_CODE_FAILED_PRECONDITION);
  CHECK(strstr(res[2].msg, "rank 2: rank 0 at 127.0.0.1:") && strstr(res[2].msg, "refused this rank's proof of the job secret") &&
        strstr(res[2].msg, "set the same DIT_JOB_SECRET or DIT_JOB_SECRET_FILE on every rank (this rank's is from DIT_JOB_SECRET)"));
  CHECK(res[2].elapsed_ms < 1000);
  /* The others time out, and rank 0 says a rank may have another secret. */
  for (int i = 0; i < 2; i++) CHECK_EQ_INT(res[i].code, DIT_CODE_DEADLINE_EXCEEDED);
  CHECK(strstr(res[0].msg, "rank 2 of 3 did not arrive within 1500 ms; 1 connection was refused for a wrong proof of the job secret") != NULL);
  if (check_failures_)
    for (int i = 0; i < 3; i++) fprintf(stderr, "rank %d: %s\n", i, res[i].msg);
  /* Rank 0 with the other secret: every rank hears that its proof was refused. */
  pl = base_plan(3);
  pl.other_secret_rank = 0;
  run_plan(pl, res);
  for (int i = 1; i < 3; i++) {
    CHECK_EQ_INT(res[i].code, DIT_CODE_FAILED_PRECONDITION);
    CHECK(strstr(res[i].msg, "refused this rank's proof of the job secret") != NULL);
  }
}

/* The first IPv4 address of this host that is not loopback, or 0. */
static uint32_t other_local_ipv4(void) {
  struct ifaddrs *ifs = NULL, *i;
  uint32_t found = 0;
  if (getifaddrs(&ifs)) return 0;
  for (i = ifs; i && !found; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
      uint32_t a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
      if ((ntohl(a) >> 24) != 127) found = a;
    }
  freeifaddrs(ifs);
  return found;
}

typedef struct bind_probe {
  int listeners, wildcard, reached_other;
} bind_probe_t;

static void probe_listener(const plan_t *pl, void *ctx) {
  bind_probe_t *b = ctx;
  int fd = connect_port(pl->port); /* rank 0 is listening now */
  FILE *f = fopen("/proc/net/tcp", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    unsigned addr, port, state;
    if (sscanf(line, " %*d: %8x:%4x %*x:%*x %x", &addr, &port, &state) == 3 && state == 0x0A && (int)port == pl->port) {
      b->listeners++;
      b->wildcard += addr != htonl(INADDR_LOOPBACK);
    }
  }
  if (f) fclose(f);
  uint32_t other = other_local_ipv4();
  if (other) {
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = other;
    a.sin_port = htons((uint16_t)pl->port);
    int o = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    b->reached_other = !connect(o, (struct sockaddr *)&a, sizeof a);
    close(o);
  }
  if (fd >= 0) close(fd);
}

static void test_bind(void) {
  dit_launch_env_t e;
  struct sockaddr_storage a;
  socklen_t al;
  char s[80];
  launch_env_fill(&e, 0, 2, 1, SECRET);
  CHECK_OK(dit_rdzv_bind_address(&e, &a, &al));
  dit_rdzv_format_addr((struct sockaddr *)&a, s, sizeof s);
  CHECK(!strcmp(s, "127.0.0.1:0"));
  strcpy(e.addr, "localhost");
  CHECK_OK(dit_rdzv_bind_address(&e, &a, &al));
  dit_rdzv_format_addr((struct sockaddr *)&a, s, sizeof s);
  CHECK(!strcmp(s, "127.0.0.1:0") || !strcmp(s, "[::1]:0"));
  strcpy(e.addr, "203.0.113.7"); /* TEST-NET-3: nobody's */
  CHECK_ERR(dit_rdzv_bind_address(&e, &a, &al), FAILED_PRECONDITION,
            "MASTER_ADDR='203.0.113.7' resolves to 203.0.113.7, which is not an address of this host");
  uint32_t other = other_local_ipv4();
  if (other) {
    inet_ntop(AF_INET, &other, e.addr, sizeof e.addr);
    CHECK_OK(dit_rdzv_bind_address(&e, &a, &al));
    CHECK(a.ss_family == AF_INET && ((struct sockaddr_in *)&a)->sin_addr.s_addr == other);
  }
  /* While it waits, rank 0 listens on 127.0.0.1 only: not on this host's other addresses. */
  result_t res[MAXP];
  plan_t pl = base_plan(2);
  pl.late_from = 1, pl.late_from_ms = 300;
  bind_probe_t b = {0, 0, 0};
  run_plan_with(pl, res, probe_listener, &b);
  CHECK_EQ_INT(res[0].code, DIT_CODE_OK);
  CHECK_EQ_INT(b.listeners, 1);
  CHECK_EQ_INT(b.wildcard, 0);
  CHECK_EQ_INT(b.reached_other, 0);
}

/* The connecting side's check of the acceptor: a peer that sends a challenge and then a proof it
 * could not have made (not knowing the secret: a MAC of random bytes, or the secret's MAC over
 * another nonce than the connector's) is refused, naming the peer. The peer's frames are queued on
 * a socket pair before the handshake reads them; the hello it sends goes unread into the pair's
 * buffer. */
static void test_impostor_acceptor(void) {
  dit_launch_env_t e;
  launch_env_fill(&e, 1, 2, 1, SECRET);
  for (int c = 0; c < 2; c++) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    unsigned char nonce[DIT_RDZV_NONCE_BYTES], mac[DIT_RDZV_MAC_BYTES], cn[DIT_RDZV_NONCE_BYTES] = {0};
    for (int i = 0; i < DIT_RDZV_NONCE_BYTES; i++) nonce[i] = (unsigned char)(rand() & 0xff);
    const int64_t end = dit_now_ms() + 1000;
    CHECK_EQ_INT(dit_rdzv_send(sv[1], DIT_RDZV_CHALLENGE, DIT_RDZV_CHANNEL_RENDEZVOUS, 0, nonce, sizeof nonce, end), 0);
    if (c == 0) { /* a MAC of random bytes */
      for (int i = 0; i < DIT_RDZV_MAC_BYTES; i++) mac[i] = (unsigned char)(rand() & 0xff);
    } else { /* the job's secret over a nonce of its own choosing, not the connector's */
      dit_rdzv_proof_mac((const unsigned char *)SECRET, strlen(SECRET), DIT_RDZV_CHANNEL_RENDEZVOUS, nonce, cn, 0, 1, 2, mac);
    }
    CHECK_EQ_INT(dit_rdzv_send(sv[1], DIT_RDZV_PROOF, 0, 0, mac, sizeof mac, end), 0);
    CHECK_ERR(dit_rdzv_handshake(sv[0], DIT_RDZV_CHANNEL_RENDEZVOUS, &e, PAYLOAD, 0, "rank 0 at test", end), FAILED_PRECONDITION,
              "rank 1: rank 0 at test did not prove that it knows the job secret");
    close(sv[0]), close(sv[1]);
  }
}

static void test_bad_arguments(void) {
  dit_launch_env_t e;
  memset(&e, 0, sizeof e);
  e.world = 2, e.rank = 2;
  dit_rendezvous_t *r;
  char buf[8] = {0};
  CHECK_ERR(dit_rendezvous(&e, buf, sizeof buf, 100, NULL, NULL, &r, buf), INVALID_ARGUMENT, "rank 2 of world 2");
  e.rank = 0;
  CHECK_ERR(dit_rendezvous(&e, buf, DIT_RDZV_MAX_PAYLOAD + 1, 100, NULL, NULL, &r, buf), INVALID_ARGUMENT, "at most");
  CHECK_ERR(dit_rendezvous(&e, buf, sizeof buf, 0, NULL, NULL, &r, buf), INVALID_ARGUMENT, "timeout");
  /* A world of more than one needs a secret. */
  CHECK_ERR(dit_rendezvous(&e, buf, sizeof buf, 100, NULL, NULL, &r, buf), INVALID_ARGUMENT,
            "rank 0 of 2 has no job secret: set DIT_JOB_SECRET or DIT_JOB_SECRET_FILE");
  /* The listener handed down by `ditrun launch` must be the one for this port. */
  launch_env_fill(&e, 0, 2, launch_free_port(), SECRET);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int lfd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
  socklen_t al = sizeof a;
  CHECK(lfd > 2 && !bind(lfd, (struct sockaddr *)&a, sizeof a) && !listen(lfd, 4) && !getsockname(lfd, (struct sockaddr *)&a, &al));
  port = ntohs(a.sin_port);
  e.rdzv_listen_fd = lfd;
  char want[96];
  snprintf(want, sizeof want, "is not a socket listening on port %d (found port %d, listening)", e.port, port);
  CHECK_ERR(dit_rendezvous(&e, buf, sizeof buf, 100, NULL, NULL, &r, buf), INVALID_ARGUMENT, want);
  close(lfd);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  test_bad_arguments();
  test_impostor_acceptor();
  test_meet();
  test_missing_rank();
  test_world_mismatch();
  test_rank_dies();
  test_reported_failure();
  test_strays();
  test_flood();
  test_wrong_secret();
  test_bind();
  return check_summary("test_rendezvous");
}
