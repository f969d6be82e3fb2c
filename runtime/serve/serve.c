/* `ditrun serve`: the HTTP routes, admission and the job table (serve.h says why libmicrohttpd
 * and why one worker process). libmicrohttpd runs its own listening thread and a thread per
 * connection, bounded by a connection limit: the event stream's callback waits on the job's
 * condition variable between steps, which that mode allows without busy polling.
 *
 * Admission: at most --max-running jobs run (one worker per device set runs one at a time) and
 * --max-queued wait; beyond, 429 with Retry-After. A request's deadline (deadline_ms from
 * receipt) covers queue and run: when the work ahead of it (the running job's remaining steps and
 * the queued jobs' steps) plus its own steps, at the measured time per step, cannot end in time,
 * it is refused at once with 504; a job whose deadline passes while queued or running ends
 * `expired` (running: stopped at the next step). No path from a request reaches the filesystem:
 * bundles are named by identity among the served ones. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fileio.h"
#include "base/strbuf.h"
#include "runtime/gen_cli.h"
#include "runtime/serve/serve_internal.h"
#include "serve_page.h" /* serve_page: page.html's bytes */

serve_state_t S = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .pid = -1, .fd = -1};
const char *const kServeStateNames[JOB_STATES] = {"queued", "running", "succeeded", "failed", "cancelled", "expired"};
const double kStepBuckets[SERVE_HIST] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30};
const double kRequestBuckets[SERVE_HIST] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 120, 600};
static const char *const kRejectNames[REJ_COUNT] = {"queue_full", "deadline", "auth", "too_large", "bad_request", "no_bundle"};

/* ---- responses ---- */

static enum MHD_Result respond(struct MHD_Connection *c, unsigned code, const char *type, const void *body, size_t n) {
  struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", type);
  MHD_add_response_header(r, "Cache-Control", "no-store");
  enum MHD_Result ok = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result respond_buf(struct MHD_Connection *c, unsigned code, dit_strbuf_t *b) {
  enum MHD_Result ok = b->oom ? respond(c, 500, "text/plain", "out of memory\n", 14)
                              : respond(c, code, "application/json", b->p, b->len);
  dit_strbuf_free(b);
  return ok;
}

/* {"error": {"code": code_name, "message": msg}} */
static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned code, const char *name, const char *msg) {
  dit_strbuf_t b = {0};
  dit_strbuf_puts(&b, "{\"error\":{\"code\":");
  dit_strbuf_json_string(&b, name);
  dit_strbuf_puts(&b, ",\"message\":");
  dit_strbuf_json_string(&b, msg);
  dit_strbuf_puts(&b, "}}\n");
  return respond_buf(c, code, &b);
}

static enum MHD_Result reject(struct MHD_Connection *c, int why, unsigned code, const char *msg) {
  pthread_mutex_lock(&S.mu);
  S.rejected[why]++;
  pthread_mutex_unlock(&S.mu);
  return respond_error(c, code, kRejectNames[why], msg);
}

/* ---- auth ---- */

/* Equal strings in a time that depends on the lengths alone, not on where they differ. */
static int same_secret(const char *a, const char *b) {
  const size_t na = strlen(a), nb = strlen(b);
  unsigned char d = na != nb;
  for (size_t i = 0; i < nb; i++) d |= (unsigned char)(a[i < na ? i : 0] ^ b[i]);
  return d == 0 && na > 0;
}

static int authorized(struct MHD_Connection *c) {
  if (!S.token) return 1;
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  return h && !strncmp(h, "Bearer ", 7) && same_secret(h + 7, S.token);
}

/* ---- jobs ---- */

static job_t *find_job(const char *id) {
  if (strncmp(id, "job-", 4)) return NULL;
  char *end;
  errno = 0;
  unsigned long long n = strtoull(id + 4, &end, 10);
  if (errno || *end || end == id + 4 || n < 1 || n > S.n_jobs) return NULL;
  return S.jobs[n - 1];
}

static void job_json(dit_strbuf_t *b, const job_t *j) {
  const double eta = j->state <= JOB_RUNNING ? (j->steps - j->step) * S.step_s[j->bundle] : 0;
  dit_strbuf_printf(b, "{\"id\":\"job-%" PRIu64 "\",\"state\":\"%s\",\"bundle\":", j->id, kServeStateNames[j->state]);
  dit_strbuf_json_string(b, S.info[j->bundle].identity);
  dit_strbuf_printf(b, ",\"step\":%d,\"steps\":%d,\"eta_s\":%.3f", j->step, j->steps, eta);
  if (j->spec.preview_every) dit_strbuf_printf(b, ",\"preview_every\":%d,\"preview_step\":%d", j->spec.preview_every, j->preview_step);
  if (j->spec.output != DIT_SERVE_OUT_LATENTS) dit_strbuf_printf(b, ",\"output\":\"%s\"", kDitServeOutputNames[j->spec.output]);
  /* Where a request's time went, from its receipt: queued until sent to the worker, the loop's
   * start (the first step begins), the first step's report, the end; loop_s is the worker's own
   * time of the denoising loop so far (what generate's loop costs), so t_end_s - loop_s is the
   * server's overhead. -1: not yet. */
  const double r = j->t_receipt;
  dit_strbuf_printf(b, ",\"timing\":{\"t_queued_s\":%.6f,\"t_loop_start_s\":%.6f,\"t_first_step_s\":%.6f,\"t_end_s\":%.6f,\"loop_s\":%.6f}",
                    j->t_sent ? j->t_sent - r : -1.0, j->t_first_step ? j->t_loop_start - r : -1.0, j->t_first_step ? j->t_first_step - r : -1.0,
                    j->t_end ? j->t_end - r : -1.0, j->t_first_step ? j->loop_s : -1.0);
  if (j->error[0]) {
    dit_strbuf_puts(b, ",\"error\":");
    dit_strbuf_json_string(b, j->error);
  }
  dit_strbuf_puts(b, "}");
}

/* Seconds of work ahead of a new job: the running job's remaining steps and the queued jobs'. */
static double work_ahead(void) {
  double s = 0;
  if (S.running) s += (S.running->steps - S.running->step) * S.step_s[S.running->bundle];
  for (const job_t *j = S.q_head; j; j = j->next) s += j->steps * S.step_s[j->bundle];
  return s;
}

/* The bundle a request names (its identity; none: the only one served), or -1 with a message. */
static int route(const dit_serve_spec_t *sp, int video, char *msg, size_t cap) {
  int b = -1;
  if (!sp->bundle[0] && S.n_bundles == 1) b = 0;
  for (int i = 0; sp->bundle[0] && i < S.n_bundles; i++)
    if (!strcmp(sp->bundle, S.info[i].identity)) b = i;
  if (b < 0) {
    int n = snprintf(msg, cap, "%s; served:", sp->bundle[0] ? "no such bundle served" : "field 'bundle': several bundles are served, name one");
    for (int i = 0; i < S.n_bundles && n > 0 && (size_t)n < cap; i++) n += snprintf(msg + n, cap - (size_t)n, " %s", S.info[i].identity);
    return -1;
  }
  if (S.info[b].video != video) {
    snprintf(msg, cap, "bundle %s (%s) makes %s: use /v1/%s", S.info[b].identity, S.info[b].family, S.info[b].video ? "videos" : "images",
             S.info[b].video ? "videos" : "images");
    return -1;
  }
  return b;
}

/* Whether bundle b has the stages the request asks for (a prompt: the text encoder; a decoded
 * output: the VAE decoder); 0, or msg (generate's refusal, naming the compile that adds them). */
static int stages_refused(const dit_serve_spec_t *sp, int b, char *msg, size_t cap) {
  const serve_bundle_info_t *in = &S.info[b];
  if (sp->prompt[0] && in->no_text[0]) return snprintf(msg, cap, "%s", in->no_text), 1;
  if (sp->output != DIT_SERVE_OUT_LATENTS && in->no_vae[0]) return snprintf(msg, cap, "%s", in->no_vae), 1;
  if ((sp->output == DIT_SERVE_OUT_PNG || sp->output == DIT_SERVE_OUT_MP4) && in->batch > 1)
    return snprintf(msg, cap, "field 'output' \"%s\": bundle %s makes %d items a job (batch %d), one file each; ask for \"frames\"",
                    kDitServeOutputNames[sp->output], in->identity, in->batch, in->batch), 1;
  return 0;
}

/* Admits a parsed request (S.mu held): 0 and *out, or an HTTP status and msg. */
static unsigned admit(dit_serve_request_t *rq, int bundle, double t0, job_t **out, char *msg, size_t cap, int *why) {
  const int steps = rq->spec.steps ? rq->spec.steps : S.info[bundle].default_steps;
  if (S.n_queued >= S.max_queued) {
    snprintf(msg, cap, "the queue is full (%d running, %d queued of --max-queued %d)", S.running != NULL, S.n_queued, S.max_queued);
    return *why = REJ_QUEUE_FULL, 429;
  }
  const double need = work_ahead() + steps * S.step_s[bundle];
  if (rq->spec.deadline_ms && need * 1000 > rq->spec.deadline_ms) {
    snprintf(msg, cap, "deadline_ms %lld cannot be met: %.0f ms of work ahead and this job's %d steps at %.2f ms per step", (long long)rq->spec.deadline_ms,
             (need - steps * S.step_s[bundle]) * 1000, steps, S.step_s[bundle] * 1000);
    return *why = REJ_DEADLINE, 504;
  }
  job_t *j = calloc(1, sizeof *j);
  if (!j || (S.n_jobs == S.cap_jobs && !(S.jobs = realloc(S.jobs, (S.cap_jobs = S.cap_jobs * 2 + 64) * sizeof *S.jobs)))) {
    free(j);
    snprintf(msg, cap, "out of memory");
    return *why = REJ_BAD_REQUEST, 500;
  }
  j->id = S.n_jobs + 1, j->bundle = bundle, j->spec = rq->spec, j->steps = steps, j->t_receipt = t0;
  j->deadline = rq->spec.deadline_ms ? t0 + rq->spec.deadline_ms / 1000.0 : 0;
  j->inputs = rq->inputs, j->n_inputs = rq->n_inputs;
  rq->inputs = NULL;
  S.jobs[S.n_jobs++] = j;
  if (S.q_tail) S.q_tail->next = j;
  else S.q_head = j;
  S.q_tail = j, S.n_queued++;
  pthread_cond_broadcast(&S.cv);
  *out = j;
  return 0;
}

/* The URL's query as a JSON object for the binary form's options: numbers where the value is one
 * (the reader then types and ranges every field as in the JSON form), else strings; the fields
 * that are text are strings whatever they spell (a prompt "42"). */
typedef struct query_json {
  dit_strbuf_t b;
  int n;
} query_json_t;

static enum MHD_Result query_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
  (void)kind;
  query_json_t *q = cls;
  dit_strbuf_puts(&q->b, q->n++ ? "," : "{");
  dit_strbuf_json_string(&q->b, key);
  dit_strbuf_puts(&q->b, ":");
  static const char *const kText[] = {"bundle", "step_cache", "prompt", "negative_prompt", "output", NULL};
  int text = 0;
  for (int i = 0; kText[i]; i++) text |= !strcmp(key, kText[i]);
  char *end = NULL;
  const double v = value && *value && !text ? strtod(value, &end) : 0;
  if (value && *value && !text && !*end && isfinite(v) && !strchr(value, 'x') && !strchr(value, 'X')) dit_strbuf_puts(&q->b, value);
  else dit_strbuf_json_string(&q->b, value ? value : "");
  return MHD_YES;
}

/* The request: a JSON body, or (Content-Type application/octet-stream) the safetensors inputs as
 * the body with the options in the query; *body_owned is taken for the binary form. */
static dit_status_t parse_request(struct MHD_Connection *c, char **body_owned, size_t n, dit_serve_request_t *rq) {
  const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
  if (!type || strncasecmp(type, "application/octet-stream", 24)) return dit_serve_request_parse(*body_owned ? *body_owned : "", n, rq);
  query_json_t q = {0};
  MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, query_arg, &q);
  dit_strbuf_puts(&q.b, q.n ? "}" : "{}");
  uint8_t *inputs = (uint8_t *)*body_owned;
  *body_owned = NULL;
  dit_status_t s = q.b.oom ? (free(inputs), DIT_ERR(RESOURCE_EXHAUSTED, "request: out of memory"))
                           : dit_serve_request_parse_binary(q.b.p, q.b.len, inputs, n, rq);
  dit_strbuf_free(&q.b);
  return s;
}

static enum MHD_Result create_job(struct MHD_Connection *c, char **body, size_t n, int video, double t0) {
  dit_serve_request_t rq;
  dit_status_t s = parse_request(c, body, n, &rq);
  if (s) {
    enum MHD_Result ok = reject(c, REJ_BAD_REQUEST, 400, dit_status_message(s));
    dit_status_free(s);
    return ok;
  }
  char msg[700];
  int why = 0;
  job_t *j = NULL;
  pthread_mutex_lock(&S.mu);
  const int bundle = route(&rq.spec, video, msg, sizeof msg);
  unsigned code = bundle < 0                                        ? (why = REJ_NO_BUNDLE, 404)
                  : stages_refused(&rq.spec, bundle, msg, sizeof msg) ? (why = REJ_BAD_REQUEST, 400)
                                                                    : admit(&rq, bundle, t0, &j, msg, sizeof msg, &why);
  const double retry = work_ahead();
  enum MHD_Result ok = MHD_YES;
  if (!code) {
    dit_strbuf_t b = {0};
    job_json(&b, j);
    pthread_mutex_unlock(&S.mu);
    dit_strbuf_puts(&b, "\n");
    ok = respond_buf(c, 201, &b);
  } else {
    S.rejected[why]++;
    pthread_mutex_unlock(&S.mu);
    if (code == 429) {
      char after[32];
      snprintf(after, sizeof after, "%d", (int)retry + 1);
      dit_strbuf_t b = {0};
      dit_strbuf_printf(&b, "{\"error\":{\"code\":\"%s\",\"message\":", kRejectNames[why]);
      dit_strbuf_json_string(&b, msg);
      dit_strbuf_puts(&b, "}}\n");
      struct MHD_Response *r = MHD_create_response_from_buffer(b.len, b.p, MHD_RESPMEM_MUST_COPY);
      MHD_add_response_header(r, "Content-Type", "application/json");
      MHD_add_response_header(r, "Retry-After", after);
      ok = MHD_queue_response(c, 429, r);
      MHD_destroy_response(r);
      dit_strbuf_free(&b);
    } else {
      ok = respond_error(c, code, kRejectNames[why], msg);
    }
  }
  dit_serve_request_free(&rq);
  return ok;
}

/* ---- event stream ---- */

typedef struct stream {
  job_t *j;
  int sent;         /* steps sent */
  int preview_sent; /* the step of the latest preview sent */
  int done;
  dit_strbuf_t out; /* the event being sent: a preview's exceeds one read's buffer */
  size_t off;
} stream_t;

/* The next event of the job into st->out (S.mu held), waiting up to 5 s for one: each step, the
 * latest preview once its step was sent (a stream that falls behind skips to the newest), then
 * the final state. */
static void next_event(stream_t *st) {
  job_t *j = st->j;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 5;
  while (j->step <= st->sent && j->preview_step <= st->preview_sent && j->state <= JOB_RUNNING)
    if (pthread_cond_timedwait(&S.cv, &S.mu, &ts)) break;
  dit_strbuf_t *b = &st->out;
  if (j->step > st->sent) {
    st->sent++;
    dit_strbuf_printf(b, "event: step\ndata: {\"id\":\"job-%" PRIu64 "\",\"step\":%d,\"steps\":%d}\n\n", j->id, st->sent, j->steps);
  } else if (j->preview_step > st->preview_sent && j->preview) {
    st->preview_sent = j->preview_step;
    dit_strbuf_printf(b, "event: preview\ndata: {\"step\":%d,\"png\":\"", j->preview_step);
    dit_strbuf_base64(b, j->preview + sizeof(serve_preview_msg_t), j->n_preview - sizeof(serve_preview_msg_t));
    dit_strbuf_puts(b, "\"}\n\n");
  } else if (j->state > JOB_RUNNING) {
    dit_strbuf_printf(b, "event: %s\ndata: ", j->state == JOB_SUCCEEDED ? "done" : kServeStateNames[j->state]);
    job_json(b, j);
    dit_strbuf_puts(b, "\n\n");
    st->done = 1;
  } else {
    dit_strbuf_puts(b, ": waiting\n\n"); /* keeps the connection alive */
  }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  stream_t *st = cls;
  (void)pos;
  if (st->off == st->out.len) {
    if (st->done) return MHD_CONTENT_READER_END_OF_STREAM;
    st->out.len = st->off = 0;
    pthread_mutex_lock(&S.mu);
    next_event(st);
    pthread_mutex_unlock(&S.mu);
    if (st->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  const size_t n = st->out.len - st->off < max ? st->out.len - st->off : max;
  memcpy(buf, st->out.p + st->off, n);
  st->off += n;
  return (ssize_t)n;
}

static void stream_free(void *cls) {
  stream_t *st = cls;
  dit_strbuf_free(&st->out);
  free(st);
}

static enum MHD_Result events(struct MHD_Connection *c, job_t *j) {
  stream_t *st = calloc(1, sizeof *st);
  if (!st) return MHD_NO;
  st->j = j;
  struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
  if (!r) return free(st), MHD_NO;
  MHD_add_response_header(r, "Content-Type", "text/event-stream");
  MHD_add_response_header(r, "Cache-Control", "no-store");
  enum MHD_Result ok = MHD_queue_response(c, 200, r);
  MHD_destroy_response(r);
  return ok;
}

/* ---- routes ---- */

/* GET /v1/jobs/ID/preview (S.mu held; released here): the job's latest preview PNG. */
static enum MHD_Result preview(struct MHD_Connection *c, const job_t *j) {
  char msg[160];
  unsigned code = 404;
  const char *name = "no_preview";
  if (j->preview) {
    char step[16];
    snprintf(step, sizeof step, "%d", j->preview_step);
    struct MHD_Response *r = MHD_create_response_from_buffer(j->n_preview - sizeof(serve_preview_msg_t),
                                                             j->preview + sizeof(serve_preview_msg_t), MHD_RESPMEM_MUST_COPY);
    pthread_mutex_unlock(&S.mu);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "image/png");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Preview-Step", step);
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok;
  }
  const int first = j->spec.preview_every < j->steps ? j->spec.preview_every : j->steps;
  if (!j->spec.preview_every) {
    snprintf(msg, sizeof msg, "the job asked for no previews (option 'preview_every')");
  } else if (j->dropped) {
    code = 410, name = "preview_dropped";
    snprintf(msg, sizeof msg, "the preview was dropped: the server keeps the newest %d jobs' results and previews (--keep-results)",
             S.keep_results);
  } else if (j->state > JOB_RUNNING) {
    snprintf(msg, sizeof msg, "no preview: the job ended (%s) before its first (after step %d)", kServeStateNames[j->state], first);
  } else {
    snprintf(msg, sizeof msg, "no preview yet: the first comes after step %d (preview_every %d)", first, j->spec.preview_every);
  }
  pthread_mutex_unlock(&S.mu);
  return respond_error(c, code, name, msg);
}

static enum MHD_Result job_route(struct MHD_Connection *c, const char *method, const char *rest) {
  char id[32];
  const char *slash = strchr(rest, '/');
  const size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
  if (n >= sizeof id) return respond_error(c, 404, "not_found", "no such job");
  memcpy(id, rest, n), id[n] = 0;
  const char *sub = slash ? slash : "";
  pthread_mutex_lock(&S.mu);
  job_t *j = find_job(id);
  if (!j) {
    pthread_mutex_unlock(&S.mu);
    return respond_error(c, 404, "not_found", "no such job");
  }
  dit_strbuf_t b = {0};
  if (!strcmp(method, "DELETE") && !*sub) {
    unsigned code = 200;
    if (j->state == JOB_QUEUED) {
      for (job_t **p = &S.q_head; *p; p = &(*p)->next)
        if (*p == j) {
          *p = j->next;
          break;
        }
      S.q_tail = NULL;
      for (job_t *q = S.q_head; q; q = q->next) S.q_tail = q;
      S.n_queued--;
      serve_job_end(j, JOB_CANCELLED, "cancelled while queued");
    } else if (j->state == JOB_RUNNING) {
      j->cancel = 1, code = 202; /* stopped at the next step boundary */
    } else {
      code = 409;
    }
    job_json(&b, j);
    pthread_mutex_unlock(&S.mu);
    dit_strbuf_puts(&b, "\n");
    return respond_buf(c, code, &b);
  }
  if (strcmp(method, "GET")) {
    pthread_mutex_unlock(&S.mu);
    return respond_error(c, 405, "method_not_allowed", "GET or DELETE");
  }
  if (!strcmp(sub, "/events")) {
    pthread_mutex_unlock(&S.mu);
    return events(c, j); /* jobs are never freed: the stream may keep j */
  }
  if (!strcmp(sub, "/preview")) return preview(c, j); /* unlocks */
  if (!strcmp(sub, "/result") && j->state == JOB_SUCCEEDED && !j->result) {
    pthread_mutex_unlock(&S.mu);
    char msg[160];
    snprintf(msg, sizeof msg, "the result was dropped: the server keeps the newest %d results (--keep-results)", S.keep_results);
    return respond_error(c, 410, "result_dropped", msg);
  }
  if (!strcmp(sub, "/result") && j->state == JOB_SUCCEEDED) {
    static const char *const kTypes[DIT_SERVE_OUT_COUNT] = {"application/octet-stream", "application/octet-stream", "image/png",
                                                            "video/mp4"};
    enum MHD_Result ok = respond(c, 200, kTypes[j->spec.output], j->result, j->n_result);
    pthread_mutex_unlock(&S.mu);
    return ok;
  }
  job_json(&b, j);
  dit_strbuf_puts(&b, "\n");
  unsigned code = 200;
  if (!strcmp(sub, "/result")) code = j->state == JOB_EXPIRED ? 504 : j->state <= JOB_RUNNING ? 409 : j->state == JOB_CANCELLED ? 410 : 500;
  else if (*sub) code = 404;
  pthread_mutex_unlock(&S.mu);
  return respond_buf(c, code, &b);
}

static void status_json(dit_strbuf_t *b) {
  const double now = dit_now_s();
  uint64_t n[JOB_STATES] = {0};
  n[JOB_QUEUED] = (uint64_t)S.n_queued, n[JOB_RUNNING] = S.running != NULL;
  for (int i = JOB_SUCCEEDED; i < JOB_STATES; i++) n[i] = S.ended[i];
  dit_strbuf_printf(b, "{\"ready\":%s,\"jobs\":{", S.ready ? "true" : "false");
  for (int i = 0; i < JOB_STATES; i++) dit_strbuf_printf(b, "%s\"%s\":%" PRIu64, i ? "," : "", kServeStateNames[i], n[i]);
  dit_strbuf_puts(b, "},\"running\":");
  if (S.running) job_json(b, S.running);
  else dit_strbuf_puts(b, "null");
  dit_strbuf_printf(b, ",\"worker\":{\"pid\":%d,\"heartbeat_age_s\":%.3f,\"starts\":%" PRIu64 ",\"last_error\":", (int)S.pid,
                    S.heartbeat ? now - S.heartbeat : -1.0, S.restarts);
  dit_strbuf_json_string(b, S.last_error);
  dit_strbuf_puts(b, "},\"bundles\":[");
  for (int i = 0; i < S.n_bundles; i++) {
    dit_strbuf_printf(b, "%s{\"identity\":", i ? "," : "");
    dit_strbuf_json_string(b, S.info[i].identity);
    dit_strbuf_printf(b, ",\"family\":\"%s\",\"route\":\"/v1/%s\",\"step_s\":%.6f}", S.info[i].family, S.info[i].video ? "videos" : "images",
                      S.step_s[i]);
  }
  dit_strbuf_puts(b, "]}\n");
}

static void histogram(dit_strbuf_t *b, const char *name, const char *help, const uint64_t *h, const double *bounds, double sum, uint64_t n) {
  dit_strbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
  uint64_t acc = 0;
  for (int i = 0; i < SERVE_HIST; i++) acc += h[i], dit_strbuf_printf(b, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, bounds[i], acc);
  dit_strbuf_printf(b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %.6f\n%s_count %" PRIu64 "\n", name, n, name, sum, name, n);
}

static void metrics_text(dit_strbuf_t *b) {
  dit_strbuf_printf(b, "# HELP ditrun_serve_queue_depth Jobs waiting in the queue.\n# TYPE ditrun_serve_queue_depth gauge\n"
                    "ditrun_serve_queue_depth %d\n", S.n_queued);
  dit_strbuf_printf(b, "# HELP ditrun_serve_running Jobs running.\n# TYPE ditrun_serve_running gauge\nditrun_serve_running %d\n", S.running != NULL);
  dit_strbuf_printf(b, "# HELP ditrun_serve_ready 1 when the worker is ready.\n# TYPE ditrun_serve_ready gauge\nditrun_serve_ready %d\n", S.ready);
  histogram(b, "ditrun_serve_step_seconds", "Time of one denoising step in the worker.", S.step_hist, kStepBuckets, S.step_sum, S.step_n);
  histogram(b, "ditrun_serve_request_seconds", "Time from a job's receipt to its final state.", S.req_hist, kRequestBuckets, S.req_sum, S.req_n);
  dit_strbuf_puts(b, "# HELP ditrun_serve_rejections_total Requests refused, by reason.\n# TYPE ditrun_serve_rejections_total counter\n");
  for (int i = 0; i < REJ_COUNT; i++) dit_strbuf_printf(b, "ditrun_serve_rejections_total{reason=\"%s\"} %" PRIu64 "\n", kRejectNames[i], S.rejected[i]);
  dit_strbuf_puts(b, "# HELP ditrun_serve_jobs_total Jobs ended, by final state.\n# TYPE ditrun_serve_jobs_total counter\n");
  for (int i = JOB_SUCCEEDED; i < JOB_STATES; i++) dit_strbuf_printf(b, "ditrun_serve_jobs_total{state=\"%s\"} %" PRIu64 "\n", kServeStateNames[i], S.ended[i]);
  dit_strbuf_printf(b, "# HELP ditrun_serve_worker_starts_total Worker processes started.\n# TYPE ditrun_serve_worker_starts_total counter\n"
                    "ditrun_serve_worker_starts_total %" PRIu64 "\n", S.restarts);
}

static enum MHD_Result info_route(struct MHD_Connection *c, const char *url) {
  dit_strbuf_t b = {0};
  pthread_mutex_lock(&S.mu);
  const int ready = S.ready;
  if (!strcmp(url, "/status")) status_json(&b);
  else if (!strcmp(url, "/metrics")) metrics_text(&b);
  pthread_mutex_unlock(&S.mu);
  if (!strcmp(url, "/metrics")) {
    enum MHD_Result ok = respond(c, 200, "text/plain; version=0.0.4", b.p ? b.p : "", b.len);
    dit_strbuf_free(&b);
    return ok;
  }
  if (!strcmp(url, "/status")) return respond_buf(c, 200, &b);
  if (!strcmp(url, "/ready")) {
    dit_strbuf_printf(&b, "{\"ready\":%s}\n", ready ? "true" : "false");
    return respond_buf(c, ready ? 200 : 503, &b);
  }
  return respond_error(c, 404, "not_found", "no such route");
}

typedef struct upload {
  dit_strbuf_t body;
  int too_large;
  double t0;
} upload_t;

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
  upload_t *u = *con_cls;
  if (u) dit_strbuf_free(&u->body), free(u);
  *con_cls = NULL;
}

static enum MHD_Result post_route(struct MHD_Connection *c, const char *url, const char *data, size_t *size, void **con_cls) {
  const int video = !strcmp(url, "/v1/videos");
  if (!video && strcmp(url, "/v1/images")) return respond_error(c, 404, "not_found", "no such route");
  upload_t *u = *con_cls;
  if (!u) { /* the headers alone: refuse before reading a body */
    if (!(u = calloc(1, sizeof *u))) return MHD_NO;
    u->t0 = dit_now_s();
    *con_cls = u;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > S.max_body) u->too_large = 1;
    return MHD_YES;
  }
  if (*size) {
    if (!u->too_large && u->body.len + *size > S.max_body) u->too_large = 1;
    if (!u->too_large) dit_strbuf_put(&u->body, data, *size);
    *size = 0;
    return MHD_YES;
  }
  char msg[128];
  snprintf(msg, sizeof msg, "the body exceeds --max-body-mb (%zu bytes)", S.max_body);
  if (u->too_large) return reject(c, REJ_TOO_LARGE, 413, msg);
  if (u->body.oom) return respond_error(c, 500, "internal", "out of memory");
  return create_job(c, &u->body.p, u->body.len, video, u->t0);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
                              const char *data, size_t *size, void **con_cls) {
  if (!strcmp(url, "/health")) return respond(c, 200, "application/json", "{\"status\":\"ok\"}\n", 16);
  if (!strcmp(url, "/ready")) return info_route(c, url);
  if (!strcmp(url, "/") && !strcmp(method, "GET")) return respond(c, 200, "text/html; charset=utf-8", serve_page, sizeof serve_page - 1);
  if (!authorized(c)) return reject(c, REJ_AUTH, 401, "a valid bearer token is required (Authorization: Bearer ...)");
  if (!strcmp(method, "POST")) return post_route(c, url, data, size, con_cls);
  if (!strncmp(url, "/v1/jobs/", 9)) return job_route(c, method, url + 9);
  if (strcmp(method, "GET")) return respond_error(c, 405, "method_not_allowed", "this route takes GET");
  return info_route(c, url);
}

/* ---- the command ---- */

static const char kServeUsage[] =
    "usage: ditrun serve BUNDLE|ID... [--store DIR] [--listen ADDR:PORT] [--max-running 1] [--max-queued 16]\n"
    "                    [--token-file F] [--max-body-mb 64] [--grace-s 5] [--keep-results 256] [--backend B]\n"
    "                    [--threads N] [--device D] [--devices K] [--cuda-graph | --no-cuda-graph]\n"
    "  serves generate over HTTP with the bundles loaded once (README: Resident serving); a CUDA graph\n"
    "  by default where it applies (one rank, a GPU backend, no offload streaming), as generate\n";

static int serve_usage(const char *what, const char *arg) {
  fprintf(stderr, "ditrun serve: error: ");
  fprintf(stderr, what, arg);
  fprintf(stderr, "\n%s", kServeUsage);
  return 2;
}

static char *g_token_file;

int dit_serve_take_token_file(int *argc, char **argv) {
  int o = 2;
  for (int i = 2; i < *argc; i++) {
    if (strcmp(argv[i], "--token-file")) {
      argv[o++] = argv[i];
      continue;
    }
    if (i + 1 >= *argc) return serve_usage("%s needs a value", "--token-file");
    g_token_file = argv[++i];
  }
  *argc = o;
  argv[o] = NULL;
  return 0;
}

static int parse_listen(const char *v, struct sockaddr_in *sa) {
  char host[64];
  const char *colon = strrchr(v, ':');
  if (!colon || (size_t)(colon - v) >= sizeof host) return -1;
  memcpy(host, v, (size_t)(colon - v)), host[colon - v] = 0;
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || port < 0 || port > 65535) return -1;
  sa->sin_family = AF_INET, sa->sin_port = htons((uint16_t)port);
  return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static int int_opt(const char *f, const char *v, long lo, long hi, long *out) {
  char *end;
  if (!v) return serve_usage("%s needs a value", f);
  *out = strtol(v, &end, 10);
  if (*end || end == v || *out < lo || *out > hi) return serve_usage("%s: out of range or not an integer", f);
  return 0;
}

#define SERVE_MAX_OPTS 16

/* Options of serve; load options (--backend, --threads, --device, --devices, --cuda-graph, --no-cuda-graph)
 * go to the worker as given (at most SERVE_MAX_OPTS words): a
 * multi-rank bundle is one worker holding all its ranks, as generate runs them (threads of one
 * process; --devices spreads them over GPUs). */
static int parse_serve(int argc, char **argv, struct sockaddr_in *sa, char **opts, const char **bundles, int *nb) {
  long v = 0;
  int rc = 0;
  S.max_running = 1, S.max_queued = 16, S.grace_s = 5, S.max_body = 64u << 20, S.keep_results = 256;
  for (int i = 0; i < argc && !rc; i++) {
    const char *f = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(f, "--listen")) rc = !val || parse_listen(val, sa) ? serve_usage("--listen %s: expected IPv4:PORT", val ? val : "") : 0, i++;
    else if (!strcmp(f, "--max-running")) rc = int_opt(f, val, 1, 1, &v), S.max_running = (int)v, i++;
    else if (!strcmp(f, "--max-queued")) rc = int_opt(f, val, 0, 1 << 20, &v), S.max_queued = (int)v, i++;
    else if (!strcmp(f, "--max-body-mb")) rc = int_opt(f, val, 1, 1 << 14, &v), S.max_body = (size_t)v << 20, i++;
    else if (!strcmp(f, "--keep-results")) rc = int_opt(f, val, 1, 1 << 20, &v), S.keep_results = (int)v, i++;
    else if (!strcmp(f, "--grace-s")) rc = int_opt(f, val, 0, 3600, &v), S.grace_s = (double)v, i++;
    else if (!strcmp(f, "--backend") || !strcmp(f, "--threads") || !strcmp(f, "--device") || !strcmp(f, "--devices")) {
      if (!val) return serve_usage("%s needs a value", f);
      if (S.n_opts + 2 > SERVE_MAX_OPTS) return serve_usage("%s: too many load options", f);
      opts[S.n_opts++] = argv[i], opts[S.n_opts++] = argv[++i];
    } else if (!strcmp(f, "--cuda-graph") || !strcmp(f, "--no-cuda-graph")) {
      if (S.n_opts + 1 > SERVE_MAX_OPTS) return serve_usage("%s: too many load options", f);
      opts[S.n_opts++] = argv[i];
    } else if (f[0] == '-') rc = serve_usage("unknown option %s", f);
    else if (*nb == SERVE_MAX_BUNDLES) rc = serve_usage("at most 8 bundles, found %s more", f);
    else bundles[(*nb)++] = f;
  }
  if (!rc && !*nb) rc = serve_usage("%s", "missing BUNDLE");
  return rc;
}

static int load_token(void) {
  if (!g_token_file) return 0;
  size_t n = 0;
  dit_status_t s = dit_file_read(g_token_file, 64 << 10, &S.token, &n);
  if (s) return dit_status_report(dit_status_annotate(s, "--token-file"), "ditrun serve");
  while (n && (S.token[n - 1] == '\n' || S.token[n - 1] == '\r')) S.token[--n] = 0;
  if (!n) return serve_usage("--token-file %s: the token is empty", g_token_file);
  return 0;
}

int dit_serve_main(int argc, char **argv) {
  struct sockaddr_in sa = {0};
  parse_listen("127.0.0.1:8088", &sa);
  static char *opts[SERVE_MAX_OPTS];
  const char *bundles[SERVE_MAX_BUNDLES];
  int nb = 0, rc = parse_serve(argc, argv, &sa, opts, bundles, &nb);
  if (!rc) rc = load_token();
  if (rc) return rc;
  S.opts = opts, S.n_bundles = nb;
  for (int i = 0; i < nb; i++) { /* by directory or by identity in the store: the worker gets directories */
    const char *dir;
    dit_status_t s = gen_resolve_bundle(bundles[i], &dir);
    if (s) return dit_status_report(s, "ditrun serve");
    S.dirs[i] = (char *)dir;
  }
  signal(SIGPIPE, SIG_IGN);
  if (serve_worker_start()) {
    fprintf(stderr, "ditrun serve: error: %s\n", S.last_error);
    return 1;
  }
  S.restarts = 1;
  sigset_t set;
  sigemptyset(&set), sigaddset(&set, SIGINT), sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL); /* the threads below inherit the mask; sigwait takes them here */
  pthread_t sup;
  pthread_create(&sup, NULL, serve_supervise, NULL);
  struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                                          handle, NULL, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_CONNECTION_LIMIT, 256u,
                                          MHD_OPTION_CONNECTION_TIMEOUT, 120u, MHD_OPTION_NOTIFY_COMPLETED, request_done, NULL, MHD_OPTION_END);
  if (!d) {
    fprintf(stderr, "ditrun serve: error: cannot listen on %s:%d\n", inet_ntoa(sa.sin_addr), ntohs(sa.sin_port));
    kill(S.pid, SIGKILL);
    return 1;
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  fprintf(stderr, "ditrun serve: listening on http://%s:%u/ (%d bundle%s, ready)\n", inet_ntoa(sa.sin_addr), di ? di->port : 0, nb,
          nb > 1 ? "s" : "");
  int sig = 0;
  sigwait(&set, &sig);
  fprintf(stderr, "ditrun serve: signal %d: stopping\n", sig);
  MHD_stop_daemon(d);
  pthread_mutex_lock(&S.mu);
  if (S.pid > 0) kill(S.pid, SIGKILL);
  pthread_mutex_unlock(&S.mu);
  return 0;
}
