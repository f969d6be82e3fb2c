/* `ditrun serve`: a resident HTTP server over one worker process that keeps bundles loaded.
 *
 * The HTTP server is libmicrohttpd (Debian libmicrohttpd-dev): a small, well-kept HTTP/1.1
 * server with its own threads, connection limits and streaming response callbacks (the event
 * stream); parsing HTTP here would be a security liability. The server process holds the job
 * table and the queue; the model runs in ONE worker process per device set, started by
 * fork+exec of this same binary (`ditrun serve-worker`): exec, not fork alone, because the
 * server is multi-threaded by then (libmicrohttpd's threads hold locks a forked child would
 * inherit locked) and because a fresh process image is what a recovery wants. They talk over a
 * socketpair with length-prefixed messages (below): job spec and input tensors in, progress
 * events and the result out. The worker loads every bundle once and runs a smoke request (a
 * 2-step generate on zero inputs of each bundle's shape) before the server reports ready; it is
 * killed (SIGKILL after a grace period) and recreated when a cancel or deadline does not stop it
 * at the next step, when it crashes or when it reports a backend error. */
#ifndef DIT_RUNTIME_SERVE_SERVE_H
#define DIT_RUNTIME_SERVE_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/serve/request.h"

/* Messages: a header, then `len` payload bytes. Both ends are this binary, so structs travel as
 * bytes. */
typedef enum {
  SERVE_MSG_READY = 1, /* worker -> server: serve_bundle_info_t per bundle, after the smoke requests */
  SERVE_MSG_JOB,       /* server -> worker: serve_job_msg_t, then the inputs' safetensors bytes */
  SERVE_MSG_STEP,      /* worker -> server: serve_step_msg_t after each step */
  SERVE_MSG_DONE,      /* worker -> server: the result file's bytes (the spec's output: latents, frames, PNG, MP4) */
  SERVE_MSG_FAIL,      /* worker -> server: serve_fail_msg_t, then the message text */
  SERVE_MSG_STOP,      /* server -> worker: an int32 dit_code_t (ABORTED, DEADLINE_EXCEEDED) */
  SERVE_MSG_PREVIEW,   /* worker -> server: serve_preview_msg_t, then the latents' preview PNG (a job with preview_every) */
} serve_msg_type_t;

typedef struct serve_msg_hdr {
  uint32_t type;
  uint32_t reserved;
  uint64_t job; /* the job the message is about (0: none) */
  uint64_t len;
} serve_msg_hdr_t;

#define SERVE_MAX_BUNDLES 8
#define SERVE_MAX_MSG ((uint64_t)16 << 30)

typedef struct serve_bundle_info {
  char identity[96];
  char family[32];
  int video;         /* latents [B, C, f, h, w]: /v1/videos; else /v1/images */
  int default_steps; /* generate's default for this bundle */
  double step_s;     /* the smoke request's time per step */
  int batch;         /* the latents' batch: a PNG or MP4 result is one item's file */
  /* Why a request's 'prompt' (the text-encoder stage) or decoded 'output' (the VAE stage) is
   * refused for this bundle, as generate words it; "" when the stage is there. */
  char no_text[600], no_vae[600];
} serve_bundle_info_t;

typedef struct serve_job_msg {
  dit_serve_spec_t spec;
  int bundle; /* index into the served bundles */
} serve_job_msg_t;

typedef struct serve_step_msg {
  int step, steps; /* step: 1-based, done */
  double seconds;  /* this step's */
  double loop_s;   /* since the loop began (the last step's: the loop's time, as generate's) */
} serve_step_msg_t;

typedef struct serve_preview_msg {
  int step; /* 1-based: the latents after this step */
} serve_preview_msg_t;

typedef struct serve_fail_msg {
  int code;    /* dit_code_t */
  int backend; /* 1: the backend failed (not the request): the worker is recreated */
} serve_fail_msg_t;

/* Sends one message (parts concatenated as its payload); 0 or -1 (errno set). */
int serve_send(int fd, uint32_t type, uint64_t job, const void *a, size_t na, const void *b, size_t nb);
/* Receives one message into *payload (malloc'd, caller frees; NULL when len is 0); 0, or -1 at
 * EOF or on an error. */
int serve_recv(int fd, serve_msg_hdr_t *h, uint8_t **payload);

/* `ditrun serve ...` and the hidden `ditrun serve-worker FD ...` (argv after the command). */
int dit_serve_main(int argc, char **argv);
int dit_serve_worker_main(int argc, char **argv);
/* serve's --token-file is its bearer token, not the store's: taken out of argv before the
 * store's options are (0 or an exit status). */
int dit_serve_take_token_file(int *argc, char **argv);

#endif
