/* The job request's reader: every field typed and ranged by base/json, unknown fields refused
 * (a misspelt "step" must not silently run the default), the inputs decoded and parsed as
 * safetensors before the job is admitted, so a bad body costs no queue slot. */
#include "runtime/serve/request.h"

#include <stdlib.h>
#include <string.h>

#include "base/json.h"

static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

dit_status_t dit_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_n) {
  *out = NULL, *out_n = 0;
  if (n % 4) return DIT_ERR(INVALID_ARGUMENT, "base64: length %zu is not a multiple of 4", n);
  size_t pad = n && s[n - 1] == '=' ? (n > 1 && s[n - 2] == '=' ? 2 : 1) : 0;
  uint8_t *p = malloc(n / 4 * 3 + 1);
  if (!p) return DIT_ERR(RESOURCE_EXHAUSTED, "base64: out of memory for %zu characters", n);
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    uint32_t v = 0;
    for (size_t k = 0; k < 4; k++) {
      const int last = i + 4 == n, is_pad = last && k >= 4 - pad;
      int d = is_pad ? 0 : b64_value((unsigned char)s[i + k]);
      if (d < 0) {
        free(p);
        return DIT_ERR(INVALID_ARGUMENT, "base64: character %zu is not of the base64 alphabet", i + k);
      }
      v = v << 6 | (uint32_t)d;
    }
    if (i + 4 == n && (v & (pad == 2 ? 0xffffu : pad == 1 ? 0xffu : 0))) {
      free(p); /* bits past the data must be zero: one text per byte string */
      return DIT_ERR(INVALID_ARGUMENT, "base64: the last group has bits set past the data (not the canonical encoding)");
    }
    p[o++] = (uint8_t)(v >> 16);
    p[o++] = (uint8_t)(v >> 8);
    p[o++] = (uint8_t)v;
  }
  *out = p, *out_n = o - pad;
  return DIT_OK;
}

const char *const kDitServeOutputNames[DIT_SERVE_OUT_COUNT + 1] = {"latents", "frames", "png", "mp4", NULL};

static dit_status_t parse_options(const dit_json_t *root, dit_serve_spec_t *sp) {
  static const char *const kKeys[] = {"bundle", "steps", "guidance", "guidance_2", "true_cfg", "seed", "step_cache", "deadline_ms",
                                      "preview_every", "prompt", "negative_prompt", "output", "inputs", NULL};
  DIT_RETURN_IF(dit_json_check_keys(root, kKeys));
  if (dit_json_has(root, "bundle")) DIT_RETURN_IF(dit_json_str_copy(root, "bundle", sp->bundle, sizeof sp->bundle, false));
  if (dit_json_has(root, "steps")) DIT_RETURN_IF(dit_json_i32(root, "steps", 1, DIT_SERVE_MAX_STEPS, &sp->steps));
  if ((sp->have_guidance = dit_json_has(root, "guidance"))) DIT_RETURN_IF(dit_json_num(root, "guidance", 0, 1e6, &sp->guidance));
  if ((sp->have_guidance_2 = dit_json_has(root, "guidance_2")))
    DIT_RETURN_IF(dit_json_num(root, "guidance_2", 0, 1e6, &sp->guidance_2));
  if ((sp->have_true_cfg = dit_json_has(root, "true_cfg"))) DIT_RETURN_IF(dit_json_num(root, "true_cfg", 0, 1e6, &sp->true_cfg));
  if (dit_json_has(root, "seed")) DIT_RETURN_IF(dit_json_int(root, "seed", 0, (int64_t)DIT_JSON_MAX_SAFE, &sp->seed));
  if (dit_json_has(root, "step_cache"))
    DIT_RETURN_IF(dit_json_str_copy(root, "step_cache", sp->step_cache, sizeof sp->step_cache, false));
  if (!strcmp(sp->step_cache, "auto"))
    return DIT_ERR(INVALID_ARGUMENT, "request: field 'step_cache': 'auto' reads a cache profile file; name the policy (cadence:2, ...)");
  if (dit_json_has(root, "deadline_ms"))
    DIT_RETURN_IF(dit_json_int(root, "deadline_ms", 1, 7 * 24 * 3600 * 1000LL, &sp->deadline_ms));
  if (dit_json_has(root, "preview_every"))
    DIT_RETURN_IF(dit_json_i32(root, "preview_every", 1, DIT_SERVE_MAX_STEPS, &sp->preview_every));
  if (dit_json_has(root, "prompt")) DIT_RETURN_IF(dit_json_str_copy(root, "prompt", sp->prompt, sizeof sp->prompt, false));
  if (dit_json_has(root, "negative_prompt"))
    DIT_RETURN_IF(dit_json_str_copy(root, "negative_prompt", sp->negative_prompt, sizeof sp->negative_prompt, true));
  if (dit_json_has(root, "output")) DIT_RETURN_IF(dit_json_enum(root, "output", kDitServeOutputNames, &sp->output));
  /* generate's rules for --prompt, --negative-prompt and --out (gen_usage), said in the request's terms */
  if (!sp->prompt[0] && dit_json_has(root, "negative_prompt"))
    return DIT_ERR(INVALID_ARGUMENT, "request: field 'negative_prompt' goes with 'prompt' (with embeddings, the inputs' "
                   "negative_prompt_embeds)");
  if (!sp->prompt[0] && sp->output != DIT_SERVE_OUT_LATENTS)
    return DIT_ERR(INVALID_ARGUMENT, "request: field 'output' \"%s\": decoded frames come from the VAE stage, which runs after a text "
                   "'prompt'; embeddings give latents", kDitServeOutputNames[sp->output]);
  return DIT_OK;
}

/* A prompt's job reads its embeddings from the text encoder stage: tensors of the inputs that
 * would give them too are refused (generate's --prompt with --prompt-embeds). */
static dit_status_t check_prompt_inputs(const dit_serve_request_t *r) {
  for (size_t i = 0; r->spec.prompt[0] && r->st && i < dit_safetensors_count(r->st); i++) {
    const char *name = dit_safetensors_at(r->st, i)->name;
    if (!strcmp(name, "prompt_embeds") || !strcmp(name, "negative_prompt_embeds"))
      return DIT_ERR(INVALID_ARGUMENT, "request: field 'prompt' and the inputs' tensor '%s': give the text or its embeddings, not both", name);
  }
  return DIT_OK;
}

dit_status_t dit_serve_request_parse(const char *body, size_t len, dit_serve_request_t *out) {
  memset(out, 0, sizeof *out);
  dit_json_doc_t *doc = NULL;
  DIT_RETURN_IF(dit_json_parse(body, len, "request", &doc));
  dit_json_t root;
  const char *b64 = NULL;
  dit_status_t s = dit_json_root(doc, &root);
  if (!s) s = parse_options(&root, &out->spec);
  const int inputs = !s && (!out->spec.prompt[0] || dit_json_has(&root, "inputs"));
  if (inputs) s = dit_json_str(&root, "inputs", len, false, &b64);
  if (inputs && !s) s = dit_status_annotate(dit_base64_decode(b64, strlen(b64), &out->inputs, &out->n_inputs), "request: field 'inputs'");
  if (inputs && !s) s = dit_safetensors_parse(out->inputs, out->n_inputs, "request: field 'inputs' (safetensors)", &out->st);
  if (!s) s = check_prompt_inputs(out);
  dit_json_doc_free(doc);
  if (s) dit_serve_request_free(out);
  return s;
}

dit_status_t dit_serve_request_parse_binary(const char *options, size_t options_len, uint8_t *inputs, size_t n_inputs,
                                            dit_serve_request_t *out) {
  memset(out, 0, sizeof *out);
  out->inputs = inputs, out->n_inputs = n_inputs;
  dit_json_doc_t *doc = NULL;
  dit_json_t root;
  dit_status_t s = dit_json_parse(options, options_len, "request options", &doc);
  if (!s) s = dit_json_root(doc, &root);
  if (!s && dit_json_has(&root, "inputs"))
    s = DIT_ERR(INVALID_ARGUMENT, "request: option 'inputs': a binary request's inputs are its body");
  if (!s) s = parse_options(&root, &out->spec);
  if (!s && (n_inputs || !out->spec.prompt[0])) s = dit_safetensors_parse(out->inputs, out->n_inputs, "request body (safetensors)", &out->st);
  if (!s) s = check_prompt_inputs(out);
  dit_json_doc_free(doc);
  if (s) dit_serve_request_free(out);
  return s;
}

void dit_serve_request_free(dit_serve_request_t *r) {
  dit_safetensors_close(r->st);
  free(r->inputs);
  memset(r, 0, sizeof *r);
}
