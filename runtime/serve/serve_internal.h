/* The server's state, shared by its HTTP side (serve.c) and the worker's supervisor
 * (supervise.c). One mutex guards all of it; the condition variable is broadcast on every
 * change of a job or of the worker (event streams and the supervisor wait on it). */
#ifndef DIT_RUNTIME_SERVE_SERVE_INTERNAL_H
#define DIT_RUNTIME_SERVE_SERVE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime/serve/serve.h"

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_SUCCEEDED, JOB_FAILED, JOB_CANCELLED, JOB_EXPIRED, JOB_STATES } job_state_t;
extern const char *const kServeStateNames[JOB_STATES];

typedef struct job {
  uint64_t id;
  job_state_t state;
  int bundle;
  dit_serve_spec_t spec;
  int steps, step;          /* step: steps done */
  double t_receipt, deadline; /* dit_now_s(); deadline 0: none */
  /* dit_now_s() when sent to the worker, when its loop began (the first step's report less its
   * time since the loop began), at that report, at the end; 0: not yet */
  double t_sent, t_loop_start, t_first_step, t_end;
  double loop_s;            /* the worker's time of the loop so far (its latest step report) */
  int cancel;               /* DELETE asked for it */
  uint8_t *inputs, *result; /* inputs until the job runs; result once it succeeded, until retention drops it */
  size_t n_inputs, n_result;
  uint8_t *preview;         /* the latest preview message's payload (serve_preview_msg_t, then the PNG), until retention drops it */
  size_t n_preview;
  int preview_step;         /* the step it shows; 0: none yet */
  int dropped;              /* retention freed its result and preview */
  char error[600];
  struct job *next;         /* the queue */
} job_t;

enum { REJ_QUEUE_FULL, REJ_DEADLINE, REJ_AUTH, REJ_TOO_LARGE, REJ_BAD_REQUEST, REJ_NO_BUNDLE, REJ_COUNT };
#define SERVE_HIST 11

typedef struct serve_state {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  job_t **jobs;
  size_t n_jobs, cap_jobs;
  job_t *q_head, *q_tail, *running;
  int n_queued;
  /* the worker */
  pid_t pid;
  int fd;
  int ready;
  double heartbeat; /* its latest message */
  uint64_t restarts;
  char last_error[600];
  int n_bundles;
  char *dirs[SERVE_MAX_BUNDLES];
  serve_bundle_info_t info[SERVE_MAX_BUNDLES];
  double step_s[SERVE_MAX_BUNDLES]; /* measured time per step (smoke, then jobs) */
  char **opts;
  int n_opts;
  /* options */
  int max_running, max_queued;
  int keep_results;  /* ended jobs' results and previews held; older ones are dropped (their GET answers 410) */
  int n_held;        /* ended jobs holding a result or a preview */
  size_t oldest_held; /* no job before this index holds a result */
  double grace_s;
  size_t max_body;
  char *token;
  /* metrics */
  uint64_t step_hist[SERVE_HIST + 1], req_hist[SERVE_HIST + 1], step_n, req_n;
  double step_sum, req_sum;
  uint64_t rejected[REJ_COUNT], ended[JOB_STATES];
} serve_state_t;

extern serve_state_t S;
extern const double kStepBuckets[SERVE_HIST], kRequestBuckets[SERVE_HIST];

/* Ends job j (S.mu held) in state st with reason `why` (NULL for success). */
void serve_job_end(job_t *j, job_state_t st, const char *why);
/* Queued jobs whose deadline has passed end `expired` (S.mu held). */
void serve_expire_queued(double now);
/* Starts the worker and waits for its readiness (S.mu not held): 0, or -1 with S.last_error. */
int serve_worker_start(void);
/* The supervisor thread: runs queued jobs on the worker, recreating it when needed. */
void *serve_supervise(void *arg);

#endif
