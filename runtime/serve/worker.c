/* The serve worker: loads the served bundles once, runs each one's smoke request, then runs the
 * jobs the server sends through generate's own code path (runtime/gen_cli.h: the same options,
 * checks, loop and writer), reporting each step and stopping at a step boundary when the server
 * says so.
 *
 * Test hooks (environment, read at start; for the integration test only): DITRUN_SERVE_TEST_STEP_MS=N
 * sleeps N ms after each step (the tiny test model's steps take microseconds, too short to
 * cancel or expire a job between); DITRUN_SERVE_TEST_SLOW_SEED=S makes the steps of a job with
 * seed S 20 times that long (slower than the server's estimate: it expires while running);
 * DITRUN_SERVE_TEST_HANG_SEED=S makes a job with seed S hang inside its first step (sleeps
 * without reading the server's stop), as a stuck device would. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fileio.h"
#include "runtime/gen_cli.h"
#include "runtime/gen_stages.h"
#include "runtime/preview.h"
#include "runtime/serve/serve.h"

static int write_all(int fd, const void *p, size_t n) {
  const uint8_t *c = p;
  while (n) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w, n -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, void *p, size_t n) {
  uint8_t *c = p;
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    c += r, n -= (size_t)r;
  }
  return 0;
}

int serve_send(int fd, uint32_t type, uint64_t job, const void *a, size_t na, const void *b, size_t nb) {
  serve_msg_hdr_t h = {type, 0, job, na + nb};
  if (write_all(fd, &h, sizeof h) || (na && write_all(fd, a, na)) || (nb && write_all(fd, b, nb))) return -1;
  return 0;
}

int serve_recv(int fd, serve_msg_hdr_t *h, uint8_t **payload) {
  *payload = NULL;
  if (read_all(fd, h, sizeof *h) || h->len > SERVE_MAX_MSG) return -1;
  if (!h->len) return 0;
  if (!(*payload = malloc(h->len))) return -1;
  if (read_all(fd, *payload, h->len)) {
    free(*payload);
    *payload = NULL;
    return -1;
  }
  return 0;
}

/* ---- the worker ---- */

typedef struct worker {
  int fd;
  int n;                          /* bundles */
  char **dirs;                    /* their directories */
  int n_opts;                     /* load options, appended to every bundle's arguments */
  char **opts;
  dit_runtime_t *rt[SERVE_MAX_BUNDLES];
  serve_bundle_info_t info[SERVE_MAX_BUNDLES];
  uint64_t job;                   /* the running job */
  int stop;                       /* the server's stop code for it */
  double step_t0, loop_t0;
  long step_ms, hang_seed, slow_seed;
  int64_t seed;
  /* The running job's previews (preview_every 0: none, and no preview work at all). */
  int preview_every;
  const dit_preview_map_t *map;
  const float *latents;
  int rank;
  int64_t dims[DIT_MAX_RANK];
} worker_t;

/* Reads a stop the server sent for the running job, without waiting. */
static int worker_should_stop(void *ctx) {
  worker_t *w = ctx;
  struct pollfd p = {w->fd, POLLIN, 0};
  while (!w->stop && poll(&p, 1, 0) == 1) {
    serve_msg_hdr_t h;
    uint8_t *pl = NULL;
    if (serve_recv(w->fd, &h, &pl)) _exit(3); /* the server is gone */
    if (h.type == SERVE_MSG_STOP && h.job == w->job && h.len == sizeof(int32_t)) memcpy(&w->stop, pl, sizeof(int32_t));
    free(pl);
  }
  return w->stop;
}

/* The latents' preview after `step`, encoded in memory and sent after that step's report. */
static void send_preview(worker_t *w, int step) {
  void *png = NULL;
  size_t len = 0;
  dit_status_t s = dit_preview_png(w->map, w->latents, w->rank, w->dims, &png, &len);
  if (s) { /* the job goes on: a preview is a view of it, not its result */
    fprintf(stderr, "ditrun serve-worker: warning: job %llu: previews stopped: %s\n", (unsigned long long)w->job, dit_status_message(s));
    dit_status_free(s);
    w->preview_every = 0;
    return;
  }
  const serve_preview_msg_t m = {step};
  const int rc = serve_send(w->fd, SERVE_MSG_PREVIEW, w->job, &m, sizeof m, png, len);
  free(png);
  if (rc) _exit(3);
}

static void worker_on_step(void *ctx, int step, int steps, double t, double seconds) {
  worker_t *w = ctx;
  if (w->hang_seed >= 0 && w->seed == w->hang_seed) sleep(3600);
  if (w->step_ms > 0) usleep((useconds_t)w->step_ms * (w->seed == w->slow_seed ? 20 : 1) * 1000);
  const double now = dit_now_s();
  serve_step_msg_t m = {step + 1, steps, now - w->step_t0, now - w->loop_t0};
  w->step_t0 = now;
  if (w->job && serve_send(w->fd, SERVE_MSG_STEP, w->job, &m, sizeof m, NULL, 0)) _exit(3);
  if (w->preview_every && w->job && ((step + 1) % w->preview_every == 0 || step + 1 == steps)) send_preview(w, step + 1);
}

/* generate's arguments for a job: the bundle, the load options, the request's options as the
 * command line spells them, its tensors named as files (run_args_t.request reads them); a decoded
 * output goes to `out` (a file of the worker's private folder). */
static int job_argv(const worker_t *w, int bundle, const dit_serve_spec_t *sp, const dit_safetensors_t *st, const char *out,
                    char **argv, char num[][40]) {
  int n = 0, k = 0;
  argv[n++] = w->dirs[bundle];
  for (int i = 0; i < w->n_opts; i++) argv[n++] = w->opts[i];
  if (sp->prompt[0]) {
    argv[n++] = "--prompt", argv[n++] = (char *)sp->prompt;
    if (sp->negative_prompt[0]) argv[n++] = "--negative-prompt", argv[n++] = (char *)sp->negative_prompt;
  } else {
    argv[n++] = "--prompt-embeds", argv[n++] = "inputs";
  }
  if (out) argv[n++] = "--out", argv[n++] = (char *)out;
  int neg = 0;
  for (size_t i = 0; st && i < dit_safetensors_count(st); i++) neg |= !strncmp(dit_safetensors_at(st, i)->name, "negative_", 9);
  if (neg && !sp->prompt[0]) argv[n++] = "--negative-embeds", argv[n++] = "inputs";
  if (st && dit_safetensors_find(st, "image_latents")) argv[n++] = "--image-latents", argv[n++] = "inputs";
  if (st && dit_safetensors_find(st, "image_embeds")) argv[n++] = "--image-embeds", argv[n++] = "inputs";
  snprintf(num[k], 40, "%lld", (long long)sp->seed), argv[n++] = "--seed", argv[n++] = num[k++];
  if (sp->steps) snprintf(num[k], 40, "%d", sp->steps), argv[n++] = "--steps", argv[n++] = num[k++];
  if (sp->have_guidance) snprintf(num[k], 40, "%.17g", sp->guidance), argv[n++] = "--guidance", argv[n++] = num[k++];
  if (sp->have_guidance_2) snprintf(num[k], 40, "%.17g", sp->guidance_2), argv[n++] = "--guidance-2", argv[n++] = num[k++];
  if (sp->have_true_cfg) snprintf(num[k], 40, "%.17g", sp->true_cfg), argv[n++] = "--true-cfg", argv[n++] = num[k++];
  if (sp->step_cache[0]) argv[n++] = "--step-cache", argv[n++] = (char *)sp->step_cache;
  argv[n] = NULL;
  return n;
}

/* A decoded output's file (the spec's output) in a folder of its own: written by generate's
 * writer, read back as the result's bytes, removed. *dir "" for the latents (no file). */
static dit_status_t output_file(const dit_serve_spec_t *sp, char dir[4096], char path[4200]) {
  static const char *const kExt[DIT_SERVE_OUT_COUNT] = {NULL, "safetensors", "png", "mp4"};
  dir[0] = path[0] = 0;
  if (sp->output == DIT_SERVE_OUT_LATENTS) return DIT_OK;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, 4096, "%s/ditrun-serve-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    dir[0] = 0;
    return DIT_ERR(UNAVAILABLE, "%s: cannot make a folder for the job's %s file", tmp && tmp[0] ? tmp : "/tmp",
                   kDitServeOutputNames[sp->output]);
  }
  snprintf(path, 4200, "%s/result.%s", dir, kExt[sp->output]);
  return DIT_OK;
}

/* Runs one job as generate would; on success *out holds the bytes of the file generate --out
 * writes: the latents, or (a prompt's job) the decoded frames as the spec's output names. */
static dit_status_t run_job(worker_t *w, int bundle, const dit_serve_spec_t *sp, const dit_safetensors_t *st, uint8_t **out,
                            size_t *out_n, int *steps) {
  char *argv[64 + 2 * 16], num[8][40], dir[4096], path[4200];
  DIT_RETURN_IF(output_file(sp, dir, path));
  const int argc = job_argv(w, bundle, sp, st, path[0] ? path : NULL, argv, num);
  run_args_t a;
  gen_job_t *j = calloc(1, sizeof *j);
  if (!j || parse_run_args(argc, argv, &a, 0, "generate") || gen_usage(&a, j)) {
    free(j);
    if (dir[0]) dit_status_free(dit_remove_tree(dir));
    return j ? DIT_ERR(INVALID_ARGUMENT, "the request's options were refused: %s", gen_usage_message())
             : DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  a.request = st;
  j->rt = w->rt[bundle];
  dit_status_t s = gen_inputs(&a, j);
  j->g.on_step = worker_on_step, j->g.ctx = w, j->g.should_stop = worker_should_stop;
  w->seed = sp->seed, w->stop = 0, w->preview_every = 0;
  if (!s && sp->preview_every) { /* checked before the first step, as generate --preview is */
    /* The preview map is a stage: step by step, as ditrun's stage bundles. */
    const dit_runtime_options_t so = {.backend = a.backend, .threads = (int)a.threads, .device = (int)a.device, .graph = -1};
    w->map = gen_preview_map(w->dirs[bundle], dit_runtime_manifest(j->rt), &so), w->latents = j->latents, w->rank = j->lat.rank;
    memcpy(w->dims, j->lat.dims, sizeof w->dims);
    s = dit_status_annotate(dit_preview_check(w->map, w->rank, w->dims), "request: field 'preview_every'");
    w->preview_every = s ? 0 : sp->preview_every;
  }
  *steps = j->g.steps;
  if (!s) gen_noise(j, (uint64_t)sp->seed);
  w->step_t0 = w->loop_t0 = dit_now_s();
  if (!s) s = gen_run(j, &a);
  dit_st_writer_t *wr = NULL;
  if (!s && dir[0]) s = gen_frames_output(&a, j);
  if (!s && dir[0]) s = dit_file_read(path, SERVE_MAX_MSG, (char **)out, out_n);
  if (!s && !dir[0]) s = gen_output(j, &wr);
  if (!s && !dir[0]) s = dit_st_writer_serialize(wr, "result", out, out_n);
  dit_st_writer_destroy(wr);
  if (dir[0]) dit_status_free(dit_remove_tree(dir));
  w->preview_every = 0, w->latents = NULL;
  gen_release_inputs(j);
  free(j);
  return s;
}

/* A zero input of every tensor the bundle's loop reads (its shape and dtype), for the smoke
 * request. */
static dit_status_t smoke_inputs(const dit_runtime_t *rt, uint8_t **out, size_t *n) {
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  const dit_manifest_generate_t *gs = &m->generate;
  dit_st_writer_t *wr;
  DIT_RETURN_IF(dit_st_writer_create(&wr));
  dit_status_t s = DIT_OK;
  /* A Wan bundle guides with the negative embeddings by default (guidance 5): both are given. */
  const size_t conds = gs->present ? gs->n_conditions : 2;
  for (size_t c = 0; !s && c < conds; c++) {
    const char *input = gs->present ? gs->conditions[c].input : "encoder_hidden_states";
    const char *name = gs->present ? gs->conditions[c].argument : c ? "negative_prompt_embeds" : "prompt_embeds";
    const dit_manifest_io_t *io = NULL;
    for (size_t i = 0; i < m->n_inputs; i++)
      if (!strcmp(m->io_inputs[i].name, input)) io = &m->io_inputs[i];
    if (!io) {
      s = DIT_ERR(NOT_FOUND, "smoke request: the bundle has no input '%s'", input);
      break;
    }
    dit_tensor_t t = {NULL, io->dtype, io->rank, {0}};
    memcpy(t.dims, io->dims, sizeof t.dims);
    void *zeros = calloc(1, dit_tensor_nbytes(&t) + 1);
    s = zeros ? dit_st_writer_add(wr, name, io->dtype, io->rank, io->dims, zeros) : DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    free(zeros);
  }
  if (!s) s = dit_st_writer_serialize(wr, "smoke request", out, n);
  dit_st_writer_destroy(wr);
  return s;
}

/* Loads bundle i and runs its smoke request: a 2-step generate on zero inputs. */
static dit_status_t load_bundle(worker_t *w, int i) {
  char *argv[64];
  int argc = 0;
  argv[argc++] = w->dirs[i];
  for (int k = 0; k < w->n_opts && argc < 63; k++) argv[argc++] = w->opts[k];
  run_args_t a;
  gen_job_t j = {0};
  if (parse_run_args(argc, argv, &a, 0, "generate")) return DIT_ERR(INVALID_ARGUMENT, "%s: the load options were refused", w->dirs[i]);
  DIT_RETURN_IF(gen_load(&a, &j));
  w->rt[i] = j.rt;
  const dit_manifest_t *m = dit_runtime_manifest(j.rt);
  serve_bundle_info_t *b = &w->info[i];
  snprintf(b->identity, sizeof b->identity, "%s", m->identity);
  snprintf(b->family, sizeof b->family, "%s", m->family);
  int rank = 0;
  int64_t dims[DIT_MAX_RANK];
  DIT_RETURN_IF(dit_generate_latents_shape(m, &rank, dims));
  b->video = rank == 5;
  b->default_steps = m->generate.present ? (int)m->generate.default_steps : (int)a.steps;
  b->batch = (int)dims[0];
  /* The stages a request may ask for: refused at admission, in generate's words, when absent. */
  const char *stage = NULL;
  const char *const roles[2] = {"text_encoder", "vae_decoder"}, *const fields[2] = {"field 'prompt'", "field 'output'"};
  char *const why[2] = {b->no_text, b->no_vae};
  const dit_manifest_stage_t *text[DIT_GEN_MAX_CONDITIONS];
  const char *text_dirs[DIT_GEN_MAX_CONDITIONS];
  for (int r = 0; r < 2; r++) {
    dit_status_t s = r ? gen_stage_dir(w->dirs[i], m, roles[r], fields[r], &stage) : gen_text_stages(w->dirs[i], m, fields[r], text, text_dirs);
    if (s) snprintf(why[r], sizeof b->no_text, "%s", dit_status_message(s));
    dit_status_free(s);
  }
  uint8_t *in = NULL, *res = NULL;
  size_t n_in = 0, n_res = 0;
  dit_safetensors_t *st = NULL;
  dit_serve_spec_t sp = {.steps = 2};
  DIT_RETURN_IF(smoke_inputs(j.rt, &in, &n_in));
  dit_status_t s = dit_safetensors_parse(in, n_in, "smoke request", &st);
  int steps = 0;
  const double t0 = dit_now_s();
  if (!s) s = run_job(w, i, &sp, st, &res, &n_res, &steps);
  b->step_s = (dit_now_s() - t0) / 2;
  dit_safetensors_close(st);
  free(in);
  free(res);
  return dit_status_annotate(s, "smoke request of bundle %s", m->identity);
}

/* Whether a failed job's status means the backend (not the request) failed. */
static int backend_error(dit_code_t c) {
  return c == DIT_CODE_INTERNAL || c == DIT_CODE_UNAVAILABLE || c == DIT_CODE_DATA_LOSS || c == DIT_CODE_IO ||
         c == DIT_CODE_RESOURCE_EXHAUSTED;
}

static int report_fail(worker_t *w, uint64_t job, dit_status_t s) {
  serve_fail_msg_t f = {dit_status_code(s), backend_error(dit_status_code(s))};
  const char *msg = dit_status_message(s);
  int rc = serve_send(w->fd, SERVE_MSG_FAIL, job, &f, sizeof f, msg, strlen(msg));
  dit_status_free(s);
  return rc;
}

static void handle_job(worker_t *w, const serve_msg_hdr_t *h, const uint8_t *pl) {
  serve_job_msg_t jm;
  if (h->len < sizeof jm) _exit(3);
  memcpy(&jm, pl, sizeof jm);
  if (jm.bundle < 0 || jm.bundle >= w->n) _exit(3);
  dit_safetensors_t *st = NULL;
  uint8_t *res = NULL;
  size_t n_res = 0;
  int steps = 0;
  w->job = h->job;
  /* a prompt's job may come without inputs */
  dit_status_t s = h->len == sizeof jm ? DIT_OK : dit_safetensors_parse(pl + sizeof jm, h->len - sizeof jm, "request inputs", &st);
  if (!s) s = run_job(w, jm.bundle, &jm.spec, st, &res, &n_res, &steps);
  if (s ? report_fail(w, h->job, s) : serve_send(w->fd, SERVE_MSG_DONE, h->job, res, n_res, NULL, 0)) _exit(3);
  w->job = 0;
  dit_safetensors_close(st);
  free(res);
}

int dit_serve_worker_main(int argc, char **argv) {
  /* FD N DIR... OPTION... */
  if (argc < 3) return 2;
  worker_t w = {.fd = atoi(argv[0]), .n = atoi(argv[1]), .hang_seed = -1, .slow_seed = -1};
  if (w.n < 1 || w.n > SERVE_MAX_BUNDLES || argc < 2 + w.n) return 2;
  w.dirs = argv + 2, w.opts = argv + 2 + w.n, w.n_opts = argc - 2 - w.n;
  const char *e = getenv("DITRUN_SERVE_TEST_STEP_MS");
  if (e) w.step_ms = atol(e);
  if ((e = getenv("DITRUN_SERVE_TEST_HANG_SEED"))) w.hang_seed = atol(e);
  if ((e = getenv("DITRUN_SERVE_TEST_SLOW_SEED"))) w.slow_seed = atol(e);
  for (int i = 0; i < w.n; i++) {
    dit_status_t s = load_bundle(&w, i);
    if (s) {
      fprintf(stderr, "ditrun serve-worker: %s\n", dit_status_message(s));
      report_fail(&w, 0, s);
      return 1;
    }
  }
  if (serve_send(w.fd, SERVE_MSG_READY, 0, w.info, (size_t)w.n * sizeof *w.info, NULL, 0)) return 3;
  for (;;) {
    serve_msg_hdr_t h;
    uint8_t *pl = NULL;
    if (serve_recv(w.fd, &h, &pl)) break; /* the server closed its end */
    if (h.type == SERVE_MSG_JOB) handle_job(&w, &h, pl);
    free(pl); /* a stop for a job already ended is dropped */
  }
  for (int i = 0; i < w.n; i++) dit_runtime_destroy(w.rt[i]);
  return 0;
}
