/* `ditrun launch` spawns and supervises the ranks of one host; `ditrun rendezvous-selftest`
 * is what the launch tests run in each rank. */
#include "runtime/launch/launch_cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "base/clock.h"
#include "base/sha256.h"
#include "runtime/launch/launch_env.h"
#include "runtime/launch/rdzv_auth.h"
#include "runtime/launch/rendezvous.h"

extern char **environ;

#define MAX_LOCAL_RANKS 1024
#define LINE_MAX_BYTES 4096

static int launch_usage(const char *what) {
  fprintf(stderr, "ditrun launch: error: %s\nusage: ditrun launch -n N [--port P] [--grace-ms MS] -- COMMAND [ARGS...]\n", what);
  return 2;
}

static int parse_count(const char *v, long lo, long hi, long *out) {
  if (!v || !v[0]) return -1;
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno || *end || n < lo || n > hi) return -1;
  *out = n;
  return 0;
}

/* The rendezvous listener, bound here before any rank starts and handed to rank 0, so no
 * other process can take the port between choosing it and rank 0 listening on it. */
static int rdzv_listener(int port, int *out_fd, int *out_port) {
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  int fd = -1, err = dit_rdzv_listen((struct sockaddr *)&a, sizeof a, 128, &fd, out_port);
  if (err) return err;
  if (fd <= 2) { /* launched with a standard descriptor closed: rank 0 takes descriptors above 2 */
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    err = errno;
    close(fd);
    if (moved < 0) return err;
    fd = moved;
  }
  *out_fd = fd;
  return 0;
}

/* A job secret for ranks whose environment has none: 32 random bytes in hex. */
static int make_secret(char *out, size_t cap) {
  unsigned char b[32];
  size_t n = 0;
  while (n < sizeof b) {
    ssize_t r = getrandom(b + n, sizeof b - n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    n += (size_t)r;
  }
  size_t o = (size_t)snprintf(out, cap, "DIT_JOB_SECRET=");
  for (size_t i = 0; i < sizeof b && o + 3 <= cap; i++) o += (size_t)snprintf(out + o, cap - o, "%02x", b[i]);
  dit_crypto_wipe(b, sizeof b);
  return 0;
}

/* ---- signals: the loop wakes on a child's exit or a request to stop ---- */

static int g_sig_pipe[2] = {-1, -1};
static volatile sig_atomic_t g_stop_signal;

static void on_signal(int sig) {
  int saved = errno;
  if (sig != SIGCHLD) g_stop_signal = sig;
  if (write(g_sig_pipe[1], "", 1) < 0) { /* full: the loop is awake anyway */
  }
  errno = saved;
}

typedef struct child {
  pid_t pid;
  int err_fd; /* read end of its stderr; -1 at end of stream */
  int status, reaped;
  int ended_after_stop; /* reaped after the launch began stopping the ranks */
  size_t n_line;
  char line[LINE_MAX_BYTES];
} child_t;

static void emit_line(int rank, const char *s, size_t n) {
  fprintf(stderr, "[rank %d] %.*s\n", rank, (int)n, s);
}

/* Passes on whatever the child wrote, one prefixed line at a time. */
static void pump(child_t *c, int rank) {
  char buf[4096];
  for (;;) {
    ssize_t r = read(c->err_fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (r <= 0) {
      if (c->n_line) emit_line(rank, c->line, c->n_line);
      c->n_line = 0;
      close(c->err_fd);
      c->err_fd = -1;
      break;
    }
    for (ssize_t i = 0; i < r; i++) {
      if (buf[i] == '\n' || c->n_line == sizeof c->line) {
        emit_line(rank, c->line, c->n_line);
        c->n_line = 0;
        if (buf[i] == '\n') continue;
      }
      c->line[c->n_line++] = buf[i];
    }
  }
  fflush(stderr);
}

static void describe(int status, char *buf, size_t n) {
  if (WIFEXITED(status)) snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status)) snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else snprintf(buf, n, "ended with wait status %d", status);
}

static int failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

/* How long the launch waits, after a rank stopped because another failed, for the failed rank to
 * end by itself before it stops the ranks left (at most the grace period). */
#define PEER_WAIT_MS 2000

#define N_VARS 9

/* environ without the variables the launch sets, then those, for rank i (their text lives
 * in tmp, which must outlive the exec). secret is "DIT_JOB_SECRET=..." when the launch made
 * one up, else NULL (the ranks inherit the caller's); listen_fd goes to rank 0 only. */
static char **child_env(int rank, int n, int master_port, int rdzv_port, const char *secret, int listen_fd,
                        char tmp[N_VARS][96]) {
  static const char *const kSet[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",
                                     "MASTER_PORT=", "DIT_RDZV_PORT=", "DIT_RDZV_LISTEN_FD="};
  size_t n_env = 0;
  while (environ[n_env]) n_env++;
  char **env = calloc(n_env + N_VARS + 1, sizeof *env);
  if (!env) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n_env; i++) {
    int ours = 0;
    for (size_t k = 0; k < sizeof kSet / sizeof kSet[0]; k++)
      ours |= !strncmp(environ[i], kSet[k], strlen(kSet[k])) && (k != 6 || rdzv_port > 0);
    if (!ours) env[o++] = environ[i];
  }
  int t = 0;
  snprintf(tmp[t++], 96, "RANK=%d", rank);
  snprintf(tmp[t++], 96, "WORLD_SIZE=%d", n);
  snprintf(tmp[t++], 96, "LOCAL_RANK=%d", rank);
  snprintf(tmp[t++], 96, "LOCAL_WORLD_SIZE=%d", n);
  snprintf(tmp[t++], 96, "MASTER_ADDR=127.0.0.1");
  snprintf(tmp[t++], 96, "MASTER_PORT=%d", master_port);
  if (rdzv_port > 0) snprintf(tmp[t++], 96, "DIT_RDZV_PORT=%d", rdzv_port);
  if (rank == 0 && listen_fd > 2) snprintf(tmp[t++], 96, "DIT_RDZV_LISTEN_FD=%d", listen_fd);
  if (secret) env[o++] = (char *)secret;
  for (int k = 0; k < t; k++) env[o++] = tmp[k];
  return env;
}

int dit_launch_main(int argc, char **argv) {
  long n = 0, port = 0, grace_ms = 3000;
  int i = 0;
  for (; i < argc; i += 2) { /* every option takes a value */
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(f, "--")) {
      i++;
      break;
    }
    if (!strcmp(f, "-n") || !strcmp(f, "--nproc")) {
      if (parse_count(v, 1, MAX_LOCAL_RANKS, &n)) return launch_usage("-n: expected a number of ranks in 1..1024");
    } else if (!strcmp(f, "--port")) {
      if (parse_count(v, 1, 65534, &port)) return launch_usage("--port: expected a port in 1..65534");
    } else if (!strcmp(f, "--grace-ms")) {
      if (parse_count(v, 0, 3600000, &grace_ms)) return launch_usage("--grace-ms: expected milliseconds");
    } else if (f[0] == '-') {
      fprintf(stderr, "ditrun launch: error: unknown option %s\n", f);
      return 2;
    } else {
      break; /* the command starts here even without "--" */
    }
  }
  if (n == 0) return launch_usage("missing -n N");
  if (i >= argc) return launch_usage("missing the command to run in each rank");
  char **cmd = argv + i;
  int n_cmd = argc - i;

  /* Without --port nothing else of ours uses the port, so the store port and ours coincide. */
  int master_port = (int)port, rdzv_port = 0, listen_fd = -1, bound = 0;
  int err = rdzv_listener(port ? (int)port + 1 : 0, &listen_fd, &bound);
  if (err) {
    fprintf(stderr, "ditrun launch: error: cannot listen for the rendezvous on 127.0.0.1:%ld: %s%s\n", port ? port + 1 : 0, strerror(err),
            err == EADDRINUSE ? " (another job uses --port's port + 1: pick another --port)" : "");
    return 1;
  }
  if (!port) master_port = rdzv_port = bound;
  /* Ranks without a secret of the caller's get one made up for this launch only. */
  static char secret[96];
  const char *made = NULL;
  if (!getenv("DIT_JOB_SECRET") && !getenv("DIT_JOB_SECRET_FILE")) {
    if (make_secret(secret, sizeof secret)) {
      fprintf(stderr, "ditrun launch: error: cannot make a job secret: this host's random source failed: %s\n", strerror(errno));
      close(listen_fd);
      return 1;
    }
    made = secret;
  }

  char **child_argv = calloc((size_t)n_cmd + 2, sizeof *child_argv);
  child_t *kids = calloc((size_t)n, sizeof *kids);
  if (!child_argv || !kids || pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK)) {
    fprintf(stderr, "ditrun launch: error: out of resources: %s\n", strerror(errno));
    free(child_argv);
    free(kids);
    close(listen_fd);
    return 1;
  }
  child_argv[0] = "ditrun";
  for (int k = 0; k < n_cmd; k++) child_argv[1 + k] = cmd[k];

  struct sigaction sa = {0}, old_chld, old_int, old_term;
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, &old_chld);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  pid_t parent = getpid();
  int first_failed = -1, stopping = 0, live = 0, termed = 1; /* termed: the ranks left have had SIGTERM */
  int64_t kill_at = 0, term_at = 0;
  for (int r = 0; r < n; r++) kids[r].err_fd = -1;
  for (int r = 0; r < n && !stopping; r++) {
    int errp[2];
    char vars[N_VARS][96];
    char **env = child_env(r, (int)n, master_port, rdzv_port, made, listen_fd, vars);
    if (!env || pipe2(errp, O_CLOEXEC)) {
      fprintf(stderr, "ditrun launch: error: rank %d: %s\n", r, strerror(errno ? errno : ENOMEM));
      stopping = 1;
      free(env);
      break;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
#ifdef __linux__
      /* A launcher killed outright (SIGKILL) must not leave its ranks behind. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
#endif
      signal(SIGCHLD, SIG_DFL);
      dup2(errp[1], 2);
      /* Rank 0 alone keeps the rendezvous listener across exec. */
      if (r == 0 && fcntl(listen_fd, F_SETFD, 0)) _exit(127);
      execve("/proc/self/exe", child_argv, env);
      dprintf(2, "ditrun launch: cannot run /proc/self/exe: %s\n", strerror(errno));
      _exit(127);
    }
    int saved = errno;
    close(errp[1]);
    free(env);
    if (r == 0) {
      close(listen_fd);
      listen_fd = -1;
    }
    if (pid < 0) {
      fprintf(stderr, "ditrun launch: error: cannot start rank %d: %s\n", r, strerror(saved));
      close(errp[0]);
      stopping = 1;
      break;
    }
    fcntl(errp[0], F_SETFL, fcntl(errp[0], F_GETFL) | O_NONBLOCK);
    kids[r].pid = pid;
    kids[r].err_fd = errp[0];
    live++;
  }
  if (listen_fd >= 0) close(listen_fd); /* rank 0 never started */
  if (stopping) kill_at = dit_now_ms() + grace_ms, first_failed = -2;
  if (stopping)
    for (int r = 0; r < n; r++)
      if (kids[r].pid > 0) kill(kids[r].pid, SIGTERM);

  struct pollfd *p = calloc((size_t)n + 1, sizeof *p);
  int *who = calloc((size_t)n + 1, sizeof *who);
  while (live > 0 && p && who) {
    int np = 0;
    p[np++] = (struct pollfd){g_sig_pipe[0], POLLIN, 0};
    for (int r = 0; r < n; r++)
      if (kids[r].err_fd >= 0) who[np] = r, p[np++] = (struct pollfd){kids[r].err_fd, POLLIN, 0};
    /* A signal landing between the checks and poll is caught by the pipe; the cap only
     * bounds how late SIGKILL can be. */
    const int64_t next = termed ? kill_at : term_at;
    int wait_ms = stopping ? (int)(next - dit_now_ms() > 0 ? next - dit_now_ms() : 0) : 1000;
    poll(p, (nfds_t)np, wait_ms > 1000 ? 1000 : wait_ms);
    char drain[64];
    while (read(g_sig_pipe[0], drain, sizeof drain) > 0) {
    }
    for (int k = 1; k < np; k++)
      if (p[k].revents) pump(&kids[who[k]], who[k]);
    for (int r = 0; r < n; r++) {
      if (kids[r].pid <= 0 || kids[r].reaped) continue;
      int st;
      pid_t w = waitpid(kids[r].pid, &st, WNOHANG);
      if (w != kids[r].pid) continue;
      kids[r].reaped = 1, kids[r].status = st, kids[r].ended_after_stop = stopping;
      live--;
      if (failed(st) && !stopping) {
        char how[96];
        describe(st, how, sizeof how);
        first_failed = r;
        /* A rank that stopped because another failed ends first when the failed one is slow to
         * (it told the others, then tears down): that one is given PEER_WAIT_MS to end by itself,
         * so that it is named as the cause rather than stopped. */
        const int peer = WIFEXITED(st) && WEXITSTATUS(st) == DIT_EXIT_PEER_FAILED;
        fprintf(stderr, "ditrun launch: rank %d (pid %d) %s; stopping the other ranks%s\n", r, (int)kids[r].pid, how,
                peer ? " (the failed one first given time to end)" : "");
        stopping = 1, termed = 0, term_at = dit_now_ms() + (peer ? (grace_ms < PEER_WAIT_MS ? grace_ms : PEER_WAIT_MS) : 0);
        kill_at = term_at + grace_ms;
      }
    }
    if (stopping && !termed && dit_now_ms() >= term_at) {
      termed = 1;
      for (int o = 0; o < n; o++)
        if (kids[o].pid > 0 && !kids[o].reaped) kill(kids[o].pid, SIGTERM);
    }
    if (g_stop_signal && (!stopping || !termed)) { /* also cuts short the wait for a failed rank */
      fprintf(stderr, "ditrun launch: %s; stopping the ranks\n", strsignal(g_stop_signal));
      if (!stopping) first_failed = -2;
      stopping = 1, termed = 1, kill_at = dit_now_ms() + grace_ms;
      for (int o = 0; o < n; o++)
        if (kids[o].pid > 0 && !kids[o].reaped) kill(kids[o].pid, SIGTERM);
    }
    if (stopping && dit_now_ms() >= kill_at)
      for (int o = 0; o < n; o++)
        if (kids[o].pid > 0 && !kids[o].reaped) kill(kids[o].pid, SIGKILL);
  }
  /* What the ranks wrote just before exiting; a grandchild holding the pipe open is not
   * waited for (the descriptors are non-blocking). */
  for (int r = 0; r < n; r++)
    if (kids[r].err_fd >= 0) {
      pump(&kids[r], r);
      if (kids[r].err_fd >= 0) close(kids[r].err_fd);
    }
  free(p);
  free(who);

  sigaction(SIGCHLD, &old_chld, NULL);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  close(g_sig_pipe[0]);
  close(g_sig_pipe[1]);

  /* A rank that stopped because of another is no cause; neither is one the launch ended. */
  for (int r = 0; first_failed >= 0 && r < n; r++) {
    int st = kids[first_failed].status;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != DIT_EXIT_PEER_FAILED) break;
    st = kids[r].status;
    int stopped_by_us = kids[r].ended_after_stop && WIFSIGNALED(st) &&
                        (WTERMSIG(st) == SIGTERM || WTERMSIG(st) == SIGKILL);
    if (kids[r].pid > 0 && failed(st) && !stopped_by_us && !(WIFEXITED(st) && WEXITSTATUS(st) == DIT_EXIT_PEER_FAILED))
      first_failed = r;
  }
  int rc = 0;
  if (first_failed >= 0 || first_failed == -2) {
    char msg[2048], how[96];
    size_t o = 0;
    if (first_failed >= 0) {
      describe(kids[first_failed].status, how, sizeof how);
      o += (size_t)snprintf(msg, sizeof msg, "rank %d of %ld failed: %s", first_failed, n, how);
    } else {
      o += (size_t)snprintf(msg, sizeof msg, "the launch of %ld ranks was stopped", n);
    }
    const char *sep = "; the others: ";
    for (int r = 0; r < n && o < sizeof msg; r++) {
      if (r == first_failed || kids[r].pid <= 0) continue;
      describe(kids[r].status, how, sizeof how);
      o += (size_t)snprintf(msg + o, sizeof msg - o, "%srank %d %s", sep, r, how);
      sep = ", ";
    }
    fprintf(stderr, "ditrun launch: error: %s\n", msg);
    rc = 1;
  }
  free(kids);
  free(child_argv);
  return rc;
}

/* ---- rendezvous-selftest ---- */

static atomic_int g_heard_failure;

static void selftest_on_failure(void *ctx, int failed_rank, const char *why) {
  (void)ctx, (void)failed_rank, (void)why;
  atomic_store(&g_heard_failure, 1);
}

int dit_rendezvous_selftest_main(int argc, char **argv) {
  long fail_rank = -1, hold_ms = -1, timeout_ms = 10000, late_ms = 0, exit_after_ms = 0;
  int die = 0;
  for (int i = 0; i < argc; i += 2) { /* every option takes a value */
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (!strcmp(f, "--fail-rank")) bad = parse_count(v, 0, 1 << 20, &fail_rank);
    else if (!strcmp(f, "--hold-ms")) bad = parse_count(v, 0, 3600000, &hold_ms);
    else if (!strcmp(f, "--timeout-ms")) bad = parse_count(v, 1, 3600000, &timeout_ms);
    else if (!strcmp(f, "--late-ms")) bad = parse_count(v, 0, 3600000, &late_ms);
    else if (!strcmp(f, "--exit-after-ms")) bad = parse_count(v, 0, 3600000, &exit_after_ms);
    else if (!strcmp(f, "--fail-how")) {
      bad = !v || (strcmp(v, "report") && strcmp(v, "exit"));
      die = v && !strcmp(v, "exit");
    } else if (!strcmp(f, "--tag")) bad = !v;
    else bad = 1, v = f;
    if (bad) {
      fprintf(stderr, "ditrun rendezvous-selftest: error: bad argument %s %s\n", f, v ? v : "");
      return 2;
    }
  }
  if (hold_ms < 0) hold_ms = fail_rank >= 0 ? 10000 : 0;

  dit_launch_env_t e;
  dit_status_t s = dit_launch_env_read(&e);
  if (s) return dit_status_report(s, "ditrun");
  if (e.rank > 0 && late_ms) poll(NULL, 0, (int)late_ms);
  char payload[128] = {0}, got[128] = {0};
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  snprintf(payload, sizeof payload, "selftest-%d-%ld", (int)getpid(), (long)t.tv_nsec);
  dit_rendezvous_t *r;
  s = dit_rendezvous(&e, payload, sizeof payload, (int)timeout_ms, selftest_on_failure, NULL, &r, got);
  if (s) return dit_status_report(s, "ditrun");
  printf("rank %d of %d: payload %s\n", e.rank, e.world, got);
  fflush(stdout);
  fprintf(stderr, "rendezvous-selftest: rank %d met %d ranks\n", e.rank, e.world);
  if (e.rank == fail_rank) {
    fprintf(stderr, "rendezvous-selftest: rank %d fails on purpose\n", e.rank);
    if (!die) dit_rendezvous_report_failure(r, "rendezvous-selftest: failing on purpose");
    if (exit_after_ms) poll(NULL, 0, (int)exit_after_ms); /* a slow teardown: the others end first */
    _exit(3); /* no clean close: a crash, as far as the other ranks can tell */
  }
  for (int64_t end = dit_now_ms() + hold_ms; !atomic_load(&g_heard_failure) && dit_now_ms() < end;) poll(NULL, 0, 10);
  s = dit_rendezvous_status(r);
  dit_rendezvous_close(r);
  return s ? (dit_status_report(s, "ditrun"), DIT_EXIT_PEER_FAILED) : 0;
}
