/* libFuzzer target for the serve job request's reader (runtime/serve/request): any body is parsed
 * without a crash; a refusal names the request; an accepted one has its fields in range (a
 * decoded output or a negative prompt only with a prompt, inputs unless a prompt), its inputs
 * parsed as safetensors (every tensor's bytes read), and its base64 text is the canonical
 * encoding of the decoded bytes (strict decoding: one text per byte string). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "runtime/serve/request.h"

static void encode(const uint8_t *p, size_t n, char *out) {
  static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    out[o++] = k[v >> 18 & 63], out[o++] = k[v >> 12 & 63];
    out[o++] = i + 1 < n ? k[v >> 6 & 63] : '=', out[o++] = i + 2 < n ? k[v & 63] : '=';
  }
  out[o] = 0;
}

/* The binary form: the same bytes as the body (its options from a fixed query), parsed with no
 * crash; 0 and *r when accepted, else 1 (the refusal named the request). */
static int binary_parse(const uint8_t *data, size_t size, const char *options, dit_serve_request_t *r) {
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) abort();
  memcpy(copy, data, size);
  dit_status_t s = dit_serve_request_parse_binary(options, strlen(options), copy, size, r);
  if (s && strncmp(dit_status_message(s), "request", 7)) abort();
  const int refused = s != DIT_OK;
  dit_status_free(s);
  return refused;
}

/* Accepted with its options, its tensors readable; with a prompt, an empty body is no inputs
 * (and accepted) and any other is parsed as without one. */
static void binary_form(const uint8_t *data, size_t size) {
  dit_serve_request_t r;
  const int refused = binary_parse(data, size, "{\"seed\":3,\"steps\":2,\"preview_every\":2}", &r);
  if (!refused && (r.spec.seed != 3 || r.spec.steps != 2 || r.spec.preview_every != 2 || !r.st)) abort();
  if (!refused) dit_serve_request_free(&r);
  if (binary_parse(data, size, "{\"prompt\":\"a fox\",\"output\":\"mp4\"}", &r)) {
    if (!size) abort();
    return;
  }
  if (strcmp(r.spec.prompt, "a fox") || r.spec.output != DIT_SERVE_OUT_MP4 || !r.st != !size) abort();
  dit_serve_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  binary_form(data, size);
  dit_serve_request_t r;
  dit_status_t s = dit_serve_request_parse((const char *)data, size, &r);
  if (s) {
    if (strncmp(dit_status_message(s), "request", 7)) abort();
    dit_status_free(s);
    return 0;
  }
  const dit_serve_spec_t *sp = &r.spec;
  if (sp->steps < 0 || sp->steps > DIT_SERVE_MAX_STEPS || sp->seed < 0 || sp->deadline_ms < 0 || sp->preview_every < 0 ||
      sp->preview_every > DIT_SERVE_MAX_STEPS || (!r.st && !sp->prompt[0]) || sp->output < 0 || sp->output >= DIT_SERVE_OUT_COUNT ||
      (sp->output != DIT_SERVE_OUT_LATENTS && !sp->prompt[0]) || (sp->negative_prompt[0] && !sp->prompt[0]) ||
      memchr(sp->bundle, 0, sizeof sp->bundle) == NULL || memchr(sp->step_cache, 0, sizeof sp->step_cache) == NULL ||
      memchr(sp->prompt, 0, sizeof sp->prompt) == NULL || memchr(sp->negative_prompt, 0, sizeof sp->negative_prompt) == NULL)
    abort();
  volatile uint8_t sum = 0;
  for (size_t i = 0; i < dit_safetensors_count(r.st); i++) {
    const dit_st_tensor_t *t = dit_safetensors_at(r.st, i);
    for (uint64_t b = 0; b < t->nbytes; b++) sum += ((const uint8_t *)t->data)[b];
  }
  /* The accepted text is the canonical encoding of what was decoded (a prompt's job may have none). */
  cJSON *root = cJSON_ParseWithLength((const char *)data, size);
  const cJSON *in = root ? cJSON_GetObjectItemCaseSensitive(root, "inputs") : NULL;
  if (!root || !in != !r.st) abort();
  char *again = in ? malloc(r.n_inputs / 3 * 4 + 8) : NULL;
  if (in && (!cJSON_IsString(in) || !again)) abort();
  if (in) encode(r.inputs, r.n_inputs, again);
  if (in && strcmp(again, in->valuestring)) abort();
  free(again);
  cJSON_Delete(root);
  dit_serve_request_free(&r);
  return 0;
}
