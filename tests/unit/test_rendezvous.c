/* The rendezvous on loopback, one forked process per rank: all ranks meet and get rank 0's
 * payload; a missing rank, a world mismatch or a doubled rank fails every rank within the
 * timeout; after the meeting a rank that dies or reports failure makes every other rank's
 * watcher fire, and a clean close does not. Every wait is bounded. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "runtime/launch/rendezvous.h"

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
} plan_t;

typedef struct result {
  int started, code, payload_ok, cb_fired, cb_rank, status_code;
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

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (!bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len)) port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static void fill_payload(unsigned char *p) {
  for (int i = 0; i < PAYLOAD; i++) p[i] = (unsigned char)(i * 7 + 13);
}

static void run_rank(const plan_t *pl, int rank, int fd) {
  result_t res;
  memset(&res, 0, sizeof res);
  res.started = 1;
  res.cb_rank = -1;
  if (rank == pl->late_rank) poll(NULL, 0, pl->late_ms);
  dit_launch_env_t e;
  memset(&e, 0, sizeof e);
  e.launcher = DIT_LAUNCHER_TORCHRUN;
  e.rank = rank, e.local_rank = rank;
  e.world = rank == pl->wrong_world_rank ? pl->wrong_world : pl->world;
  e.local_world = -1;
  e.rank_var = "RANK", e.world_var = "WORLD_SIZE", e.local_rank_var = "LOCAL_RANK", e.addr_var = "MASTER_ADDR", e.port_var = "";
  strcpy(e.addr, "127.0.0.1");
  e.port = pl->port;
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
static int run_plan(plan_t pl, result_t *res) {
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

static plan_t base_plan(int world) {
  plan_t p = {world, free_port(), -1, -1, -1, -1, 0, -1, -1, 0, 0, 0};
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
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  test_bad_arguments();
  test_meet();
  test_missing_rank();
  test_world_mismatch();
  test_rank_dies();
  test_reported_failure();
  return check_summary("test_rendezvous");
}
