/* The body of POST /v1/videos and /v1/images: a JSON object read through base/json (the
 * project's one reader of hostile JSON), its "inputs" base64 safetensors decoded and parsed.
 * Kept apart from the HTTP server so the parser links without it (and is fuzzed alone). */
#ifndef DIT_RUNTIME_SERVE_REQUEST_H
#define DIT_RUNTIME_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "artifacts/safetensors.h"
#include "base/status.h"

#define DIT_SERVE_MAX_STEPS 10000
/* A prompt's bytes, bounded: the text encoder's tokens are bounded anyway (its text length), and
 * a job's spec travels and is kept as plain bytes. */
#define DIT_SERVE_MAX_PROMPT 4095

/* What a job's result is, as generate --out writes it: the latents (safetensors), or, after a text
 * prompt, the VAE stage's frames as safetensors (tensor frames), a PNG or an MP4. */
typedef enum { DIT_SERVE_OUT_LATENTS, DIT_SERVE_OUT_FRAMES, DIT_SERVE_OUT_PNG, DIT_SERVE_OUT_MP4, DIT_SERVE_OUT_COUNT } dit_serve_output_t;
/* The request's names of the outputs ("latents", "frames", "png", "mp4"), NULL-terminated. */
extern const char *const kDitServeOutputNames[DIT_SERVE_OUT_COUNT + 1];

/* A job's options: plain data (no pointers), so the server hands it to its worker as bytes. */
typedef struct dit_serve_spec {
  char bundle[96];      /* the bundle's identity; "" when the request names none */
  int steps;            /* 0: the command line's default */
  double guidance, guidance_2, true_cfg;
  int have_guidance, have_guidance_2, have_true_cfg;
  int64_t seed;         /* the initial noise's seed (default 0) */
  char step_cache[64];  /* generate's --step-cache value; "" off */
  int64_t deadline_ms;  /* budget from receipt, queue and run; 0: none */
  int preview_every;    /* a latent preview PNG every K steps and after the last (runtime/preview.h); 0: none */
  int output;           /* dit_serve_output_t */
  /* generate's --prompt and --negative-prompt (the bundle's text-encoder stage); "" none. */
  char prompt[DIT_SERVE_MAX_PROMPT + 1], negative_prompt[DIT_SERVE_MAX_PROMPT + 1];
} dit_serve_spec_t;

typedef struct dit_serve_request {
  dit_serve_spec_t spec;
  uint8_t *inputs;      /* the decoded safetensors image (owned); NULL for a prompt without inputs */
  size_t n_inputs;
  dit_safetensors_t *st; /* parsed over inputs; NULL when there are none */
} dit_serve_request_t;

/* Parses a body of len bytes ("inputs" optional with a "prompt"); every refusal names the field:
 * INVALID_ARGUMENT or OUT_OF_RANGE for the JSON, the safetensors reader's code (DATA_LOSS for a
 * truncated image) for the inputs, RESOURCE_EXHAUSTED out of memory. On success the caller owns
 * *out (dit_serve_request_free). */
dit_status_t dit_serve_request_parse(const char *body, size_t len, dit_serve_request_t *out);
/* The binary form: the body is the safetensors inputs themselves (no base64, no JSON to scan:
 * what keeps a video's megabytes of embeddings off the time to the first step), the options a
 * JSON object `options` (from the URL's query) with the fields of the JSON form but "inputs"; an
 * empty body with a prompt: no inputs. Takes ownership of inputs (malloc'd) whatever the outcome. */
dit_status_t dit_serve_request_parse_binary(const char *options, size_t options_len, uint8_t *inputs, size_t n_inputs,
                                            dit_serve_request_t *out);
void dit_serve_request_free(dit_serve_request_t *r);

/* Strict RFC 4648 base64 (padding required, no whitespace); NULL *out for an invalid text. */
dit_status_t dit_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_n);

#endif
