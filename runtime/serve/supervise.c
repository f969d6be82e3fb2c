/* The worker's supervisor: starts the worker (fork+exec of this binary, `serve-worker`), hands it
 * one queued job at a time, follows its steps, sends it the stop of a cancel or a deadline, and
 * kills and recreates it when it does not stop within the grace period, crashes, or reports a
 * backend error. Every job it takes ends in a final state with its reason. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "runtime/serve/serve_internal.h"

static void observe(uint64_t *hist, const double *bounds, double v) {
  int i = 0;
  while (i < SERVE_HIST && v > bounds[i]) i++;
  hist[i]++;
}

/* Results and latest previews are kept for the newest --keep-results ended jobs holding one: the
 * server's memory stays bounded by that many however long it runs (a job's own record is small
 * and stays). Only ended jobs count, and they end in queue order, so the walk never reaches the
 * running job. */
static void retain_results(void) {
  while (S.n_held > S.keep_results && S.oldest_held < S.n_jobs) {
    job_t *old = S.jobs[S.oldest_held++];
    if (!old->result && !old->preview) continue;
    free(old->result);
    free(old->preview);
    old->result = old->preview = NULL, old->n_result = old->n_preview = 0, old->dropped = 1;
    S.n_held--;
  }
}

void serve_job_end(job_t *j, job_state_t st, const char *why) {
  j->state = st;
  /* Not running from the moment it ended: a client that saw the job end (its event stream closes
   * on this broadcast) and asks /status next must find the server idle. */
  if (S.running == j) S.running = NULL;
  if (j->result || j->preview) S.n_held++, retain_results();
  snprintf(j->error, sizeof j->error, "%s", why ? why : "");
  j->t_end = dit_now_s();
  free(j->inputs);
  j->inputs = NULL;
  S.ended[st]++;
  const double dt = j->t_end - j->t_receipt;
  observe(S.req_hist, kRequestBuckets, dt);
  S.req_sum += dt, S.req_n++;
  fprintf(stderr, "ditrun serve: job-%llu %s%s%s\n", (unsigned long long)j->id, kServeStateNames[st], why ? ": " : "", why ? why : "");
  pthread_cond_broadcast(&S.cv);
}

void serve_expire_queued(double now) {
  for (job_t **p = &S.q_head; *p;) {
    job_t *j = *p;
    if (!(j->deadline && now >= j->deadline)) {
      p = &j->next;
      continue;
    }
    *p = j->next;
    S.n_queued--;
    serve_job_end(j, JOB_EXPIRED, "deadline passed while queued");
  }
  S.q_tail = NULL;
  for (job_t *j = S.q_head; j; j = j->next) S.q_tail = j;
}

/* The worker's exit as words: "exited with status N", "killed by signal N". */
static void reap(pid_t pid, char *out, size_t cap) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) snprintf(out, cap, "lost (waitpid: %s)", strerror(errno));
  else if (WIFSIGNALED(st)) snprintf(out, cap, "killed by signal %d", WTERMSIG(st));
  else snprintf(out, cap, "exited with status %d", WEXITSTATUS(st));
}

static void worker_kill(char *why, size_t cap) {
  if (S.pid > 0) {
    kill(S.pid, SIGKILL);
    reap(S.pid, why, cap);
  }
  if (S.fd >= 0) close(S.fd);
  pthread_mutex_lock(&S.mu);
  S.pid = -1, S.fd = -1, S.ready = 0;
  pthread_cond_broadcast(&S.cv);
  pthread_mutex_unlock(&S.mu);
}

static pid_t spawn(int *fd) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return -1;
  char fdarg[16], narg[16];
  snprintf(fdarg, sizeof fdarg, "3");
  snprintf(narg, sizeof narg, "%d", S.n_bundles);
  char *argv[4 + SERVE_MAX_BUNDLES + 64] = {"ditrun", "serve-worker", fdarg, narg};
  int n = 4;
  for (int i = 0; i < S.n_bundles; i++) argv[n++] = S.dirs[i];
  for (int i = 0; i < S.n_opts && n < (int)(sizeof argv / sizeof *argv) - 1; i++) argv[n++] = S.opts[i];
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid == 0) { /* only async-signal-safe calls until exec */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (dup2(sv[1], 3) < 0) _exit(127);
    closefrom(4);
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  close(sv[1]);
  if (pid < 0) close(sv[0]);
  else *fd = sv[0];
  return pid;
}

/* Waits for READY, expiring queued jobs meanwhile. */
static int await_ready(void) {
  for (;;) {
    struct pollfd p = {S.fd, POLLIN, 0};
    int r = poll(&p, 1, 100);
    pthread_mutex_lock(&S.mu);
    serve_expire_queued(dit_now_s());
    pthread_mutex_unlock(&S.mu);
    if (r < 1) continue;
    serve_msg_hdr_t h;
    uint8_t *pl = NULL;
    char why[128] = "";
    if (serve_recv(S.fd, &h, &pl)) {
      worker_kill(why, sizeof why);
      snprintf(S.last_error, sizeof S.last_error, "the worker %s before it was ready", why);
      return -1;
    }
    if (h.type == SERVE_MSG_FAIL && h.len >= sizeof(serve_fail_msg_t)) {
      snprintf(S.last_error, sizeof S.last_error, "worker start: %.*s", (int)(h.len - sizeof(serve_fail_msg_t)),
               (const char *)pl + sizeof(serve_fail_msg_t));
      free(pl);
      worker_kill(why, sizeof why);
      return -1;
    }
    if (h.type == SERVE_MSG_READY && h.len == (uint64_t)S.n_bundles * sizeof(serve_bundle_info_t)) {
      pthread_mutex_lock(&S.mu);
      memcpy(S.info, pl, h.len);
      for (int i = 0; i < S.n_bundles; i++)
        if (!S.step_s[i]) S.step_s[i] = S.info[i].step_s;
      S.ready = 1, S.heartbeat = dit_now_s();
      pthread_cond_broadcast(&S.cv);
      pthread_mutex_unlock(&S.mu);
      free(pl);
      return 0;
    }
    free(pl);
  }
}

int serve_worker_start(void) {
  int fd = -1;
  pid_t pid = spawn(&fd);
  if (pid < 0) {
    snprintf(S.last_error, sizeof S.last_error, "worker start: %s", strerror(errno));
    return -1;
  }
  pthread_mutex_lock(&S.mu);
  S.pid = pid, S.fd = fd;
  pthread_mutex_unlock(&S.mu);
  fprintf(stderr, "ditrun serve: worker %d started; loading %d bundle%s and running the smoke request%s\n", (int)pid, S.n_bundles,
          S.n_bundles > 1 ? "s" : "", S.n_bundles > 1 ? "s" : "");
  return await_ready();
}

/* The next queued job, now running (S.mu held); NULL when none. */
static job_t *take_job(void) {
  job_t *j = S.q_head;
  if (!j) return NULL;
  S.q_head = j->next;
  if (!S.q_head) S.q_tail = NULL;
  S.n_queued--;
  j->next = NULL;
  j->state = JOB_RUNNING;
  S.running = j;
  pthread_cond_broadcast(&S.cv);
  return j;
}

/* One message of the running job's worker; 1 when the job has ended. */
static int on_message(job_t *j, const serve_msg_hdr_t *h, uint8_t *pl, int *recreate) {
  if (h->job != j->id) return 0;
  if (h->type == SERVE_MSG_STEP && h->len == sizeof(serve_step_msg_t)) {
    serve_step_msg_t m;
    memcpy(&m, pl, sizeof m);
    j->step = m.step, j->steps = m.steps, j->loop_s = m.loop_s;
    if (!j->t_first_step) j->t_first_step = dit_now_s(), j->t_loop_start = j->t_first_step - m.loop_s;
    observe(S.step_hist, kStepBuckets, m.seconds);
    S.step_sum += m.seconds, S.step_n++;
    S.step_s[j->bundle] = 0.8 * S.step_s[j->bundle] + 0.2 * m.seconds;
    pthread_cond_broadcast(&S.cv);
    return 0;
  }
  if (h->type == SERVE_MSG_PREVIEW && h->len > sizeof(serve_preview_msg_t)) { /* kept: the latest replaces the one before */
    serve_preview_msg_t m;
    memcpy(&m, pl, sizeof m);
    free(j->preview);
    j->preview = pl, j->n_preview = h->len, j->preview_step = m.step;
    pthread_cond_broadcast(&S.cv);
    return 0;
  }
  if (h->type == SERVE_MSG_DONE) {
    j->result = pl, j->n_result = h->len;
    serve_job_end(j, JOB_SUCCEEDED, NULL);
    return 1;
  }
  if (h->type == SERVE_MSG_FAIL && h->len >= sizeof(serve_fail_msg_t)) {
    serve_fail_msg_t f;
    memcpy(&f, pl, sizeof f);
    char why[600];
    snprintf(why, sizeof why, "%s%.*s", f.backend ? "backend error (worker recreated): " : "", (int)(h->len - sizeof f),
             (const char *)pl + sizeof f);
    serve_job_end(j, f.code == DIT_CODE_ABORTED ? JOB_CANCELLED : f.code == DIT_CODE_DEADLINE_EXCEEDED ? JOB_EXPIRED : JOB_FAILED, why);
    *recreate = f.backend;
    return 1;
  }
  return 0;
}

/* Follows job j on the worker to its end; 1 when the worker must be recreated. */
static int follow(job_t *j) {
  double stop_at = 0;
  int stop_code = 0;
  for (;;) {
    struct pollfd p = {S.fd, POLLIN, 0};
    const int r = poll(&p, 1, 20);
    serve_msg_hdr_t h;
    uint8_t *pl = NULL;
    char why[400], how[128] = "";
    if (r == 1 && serve_recv(S.fd, &h, &pl)) {
      worker_kill(how, sizeof how);
      snprintf(why, sizeof why, "the worker crashed (%s) after step %d of %d; recreated", how, j->step, j->steps);
      pthread_mutex_lock(&S.mu);
      serve_job_end(j, JOB_FAILED, why);
      pthread_mutex_unlock(&S.mu);
      return 1;
    }
    pthread_mutex_lock(&S.mu);
    const double now = dit_now_s();
    int recreate = 0, ended = 0;
    if (r == 1) S.heartbeat = now, ended = on_message(j, &h, pl, &recreate);
    if (r == 1 && !(ended && h.type == SERVE_MSG_DONE) && !(h.type == SERVE_MSG_PREVIEW && j->preview == pl)) free(pl);
    serve_expire_queued(now);
    const int want = j->cancel ? DIT_CODE_ABORTED : j->deadline && now >= j->deadline ? DIT_CODE_DEADLINE_EXCEEDED : 0;
    pthread_mutex_unlock(&S.mu);
    if (ended) return recreate;
    if (want && !stop_at) {
      int32_t code = want;
      stop_at = now, stop_code = want;
      serve_send(S.fd, SERVE_MSG_STOP, j->id, &code, sizeof code, NULL, 0);
    }
    if (stop_at && now - stop_at > S.grace_s) {
      worker_kill(how, sizeof how);
      snprintf(why, sizeof why, "%s, and the worker did not stop at the next step within the %g s grace: %s (SIGKILL) after step %d of %d; "
               "recreated", stop_code == DIT_CODE_ABORTED ? "cancelled" : "deadline passed", S.grace_s, how, j->step, j->steps);
      pthread_mutex_lock(&S.mu);
      serve_job_end(j, JOB_FAILED, why);
      pthread_mutex_unlock(&S.mu);
      return 1;
    }
  }
}

/* Sends job j to the worker and follows it (S.mu not held). */
static void run(job_t *j) {
  serve_job_msg_t m = {j->spec, j->bundle};
  int recreate = 1;
  pthread_mutex_lock(&S.mu);
  j->t_sent = dit_now_s();
  pthread_mutex_unlock(&S.mu);
  if (serve_send(S.fd, SERVE_MSG_JOB, j->id, &m, sizeof m, j->inputs, j->n_inputs)) {
    char how[128] = "", why[300];
    worker_kill(how, sizeof how);
    snprintf(why, sizeof why, "the worker was gone when the job was sent (%s); recreated", how);
    pthread_mutex_lock(&S.mu);
    serve_job_end(j, JOB_FAILED, why);
    pthread_mutex_unlock(&S.mu);
  } else {
    recreate = follow(j);
  }
  pthread_mutex_lock(&S.mu);
  S.running = NULL;
  pthread_mutex_unlock(&S.mu);
  if (recreate && S.pid > 0) {
    char how[128];
    worker_kill(how, sizeof how);
  }
}

void *serve_supervise(void *arg) {
  (void)arg;
  double backoff = 0.5;
  for (;;) {
    if (S.pid <= 0) {
      pthread_mutex_lock(&S.mu);
      S.restarts++;
      pthread_mutex_unlock(&S.mu);
      if (serve_worker_start()) {
        fprintf(stderr, "ditrun serve: %s; retrying in %g s\n", S.last_error, backoff);
        usleep((useconds_t)(backoff * 1e6));
        backoff = backoff * 2 > 30 ? 30 : backoff * 2;
        continue;
      }
      backoff = 0.5;
    }
    pthread_mutex_lock(&S.mu);
    serve_expire_queued(dit_now_s());
    job_t *j = take_job();
    if (!j) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 100 * 1000 * 1000;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&S.cv, &S.mu, &ts);
    }
    pthread_mutex_unlock(&S.mu);
    if (j) run(j);
  }
  return NULL;
}
