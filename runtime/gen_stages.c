/* generate's pipeline stages: see gen_stages.h. */
#include "runtime/gen_stages.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/bundle.h"
#include "base/fileio.h"
#include "runtime/gen_cli.h"
#include "text/tokenizer.h"

dit_status_t gen_stage_dir(const char *bundle_dir, const dit_manifest_t *m, const char *role, const char *why,
                           const char **out_dir) {
  const dit_manifest_stage_t *st = dit_manifest_find_stage(m, role);
  if (!st)
    return DIT_ERR(FAILED_PRECONDITION, "%s: bundle %s has no %s stage (it was compiled from a transformer folder, or with --stages "
                   "without %s): compile the pipeline directory with its stages (ditc compile PIPELINE_DIR ... --stages "
                   "transformer,text_encoder,vae, the default)", why, m->identity, role, !strcmp(role, "vae_decoder") ? "vae" : role);
  static char beside[8][4200]; /* kept until the process ends, as gen_resolve_bundle's */
  static int n_beside;
  char parent[4096];
  snprintf(parent, sizeof parent, "%s", bundle_dir);
  size_t n = strlen(parent);
  while (n > 1 && parent[n - 1] == '/') parent[--n] = 0;
  char *slash = strrchr(parent, '/');
  if (slash) *slash = 0;
  else snprintf(parent, sizeof parent, ".");
  char *dir = beside[n_beside % 8];
  snprintf(dir, sizeof beside[0], "%s/%s", slash && !parent[0] ? "" : parent, st->identity);
  if (dit_is_dir(dir)) {
    n_beside++;
    *out_dir = dir;
    return DIT_OK;
  }
  DIT_RETURN_IF_ERROR(gen_resolve_bundle(st->identity, out_dir), "%s: the %s stage (%s %s) is neither beside the bundle (%s) nor in --store",
                      why, role, st->model_class, st->identity, dir);
  return DIT_OK;
}

/* WanPipeline's prompt_clean on ASCII white space: runs become one space, the ends trimmed. (Its
 * ftfy and HTML-unescape passes change only mis-encoded text and entities.) */
static char *clean_prompt(const char *text) {
  char *out = malloc(strlen(text) + 1);
  if (!out) return NULL;
  size_t k = 0;
  int space = 0;
  for (const char *p = text; *p; p++) {
    if (isspace((unsigned char)*p)) {
      space = k > 0;
      continue;
    }
    if (space) out[k++] = ' ';
    space = 0;
    out[k++] = *p;
  }
  out[k] = 0;
  return out;
}

/* The tokenizer files the text encoder's bundle carries, each read through the bundle (its hash
 * checked), into a private folder the tokenizer opens; the folder is removed after. */
static dit_status_t open_bundle_tokenizer(const char *te_dir, dit_tokenizer_t **out) {
  dit_bundle_t *b = NULL;
  DIT_RETURN_IF(dit_bundle_open(te_dir, 0, &b));
  const dit_manifest_t *m = dit_bundle_manifest(b);
  const char *tmp = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/ditrun-tokenizer-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  dit_status_t s = mkdtemp(dir) ? DIT_OK : DIT_ERR(UNAVAILABLE, "%s: cannot make a folder for the tokenizer's files", dir);
  int files = 0;
  for (size_t i = 0; !s && i < m->n_blobs; i++) {
    if (strcmp(m->blobs[i].role, "tokenizer")) continue;
    dit_mapping_t map;
    s = dit_bundle_map_blob(b, m->blobs[i].hash, &map);
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, m->blobs[i].name);
    if (!s) {
      s = dit_file_write_new(p, map.data, map.size);
      dit_file_unmap(&map);
    }
    files++;
  }
  if (!s && !files)
    s = DIT_ERR(FAILED_PRECONDITION, "%s: the text encoder's bundle carries no tokenizer files (compiled on its own, not as a "
                "pipeline's stage)", te_dir);
  if (!s) s = dit_tokenizer_open(dir, out);
  dit_remove_tree(dir);
  dit_bundle_close(b);
  return s;
}

dit_status_t gen_encode_prompt(const char *te_dir, const dit_runtime_options_t *o, const char *text, int64_t batch,
                               dit_tensor_t *out, int *tokens) {
  memset(out, 0, sizeof *out);
  dit_tokenizer_t *tk = NULL;
  dit_runtime_t *rt = NULL;
  int32_t *ids = NULL, *mask = NULL;
  char *clean = clean_prompt(text);
  dit_status_t s = clean ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  if (!s) s = open_bundle_tokenizer(te_dir, &tk);
  if (!s) s = dit_runtime_load(te_dir, o, &rt);
  const dit_manifest_t *m = rt ? dit_runtime_manifest(rt) : NULL;
  const int64_t L = m ? m->shape.text_len : 0;
  if (!s && (L < 1 || L > DIT_TOKENIZER_MAX_LENGTH))
    s = DIT_ERR(INVALID_ARGUMENT, "%s: text length %lld, expected 1..%d", te_dir, (long long)L, DIT_TOKENIZER_MAX_LENGTH);
  if (!s) {
    ids = malloc((size_t)L * sizeof *ids);
    mask = malloc((size_t)L * sizeof *mask);
    if (!ids || !mask) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!s) s = dit_tokenizer_encode(tk, clean, strlen(clean), (int)L, ids, mask);
  int n = 0;
  for (int64_t t = 0; !s && t < L; t++) n += mask[t] > 0;
  dit_tensor_t ti = {ids, DIT_I32, 2, {1, L}}, tm = {mask, DIT_I32, 2, {1, L}}, h = {0};
  if (!s) s = dit_runtime_set_input(rt, "input_ids", &ti);
  if (!s) s = dit_runtime_set_input(rt, "attention_mask", &tm);
  if (!s) s = dit_runtime_forward(rt);
  if (!s) s = dit_runtime_output(rt, "last_hidden_state", &h);
  if (!s && (h.rank != 3 || h.dims[0] != 1 || h.dims[1] != L))
    s = DIT_ERR(INVALID_ARGUMENT, "%s: last_hidden_state has rank %d, expected [1, %lld, D]", te_dir, h.rank, (long long)L);
  if (!s) {
    const size_t row = (size_t)h.dims[2], one = (size_t)L * row;
    float *x = malloc((size_t)batch * one * sizeof *x + 1);
    if (!x || dit_convert(x, DIT_F32, h.data, h.dtype, one)) s = x ? DIT_ERR(INVALID_ARGUMENT, "%s: last_hidden_state is not a float tensor", te_dir)
                                                               : DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    /* WanPipeline keeps each prompt's own rows and zeros the rest (not the encoder's padded rows). */
    if (!s) memset(x + (size_t)n * row, 0, (one - (size_t)n * row) * sizeof *x);
    for (int64_t b = 1; !s && b < batch; b++) memcpy(x + (size_t)b * one, x, one * sizeof *x);
    if (s) free(x);
    else *out = (dit_tensor_t){x, DIT_F32, 3, {batch, L, (int64_t)row}};
  }
  if (tokens) *tokens = n;
  free(ids);
  free(mask);
  free(clean);
  dit_tokenizer_free(tk);
  dit_runtime_destroy(rt);
  return s;
}

dit_status_t gen_decode_latents(const char *vae_dir, const dit_runtime_options_t *o, const dit_tensor_t *latents,
                                dit_tensor_t *frames) {
  memset(frames, 0, sizeof *frames);
  dit_runtime_t *rt = NULL;
  DIT_RETURN_IF(dit_runtime_load(vae_dir, o, &rt));
  const dit_manifest_t *m = dit_runtime_manifest(rt);
  const dit_manifest_io_t *in = NULL;
  for (size_t i = 0; i < m->n_inputs; i++)
    if (!strcmp(m->io_inputs[i].name, "latents")) in = &m->io_inputs[i];
  dit_status_t s = DIT_OK;
  int same = in && in->rank == latents->rank && in->dims[0] == 1;
  for (int d = 1; same && d < in->rank; d++) same = in->dims[d] == latents->dims[d];
  if (!same)
    s = DIT_ERR(FAILED_PRECONDITION, "%s: the VAE decoder stage takes latents %s, the loop's are [%lld, %lld, ...] of rank %d: a "
                "stage bundle of another shape", vae_dir, in ? "of its compiled shape" : "(it has no 'latents' input)",
                (long long)latents->dims[0], (long long)latents->dims[1], latents->rank);
  const int64_t B = latents->dims[0];
  const size_t item = (size_t)(dit_tensor_numel(latents) / B);
  float *x = NULL;
  size_t frame_item = 0;
  for (int64_t b = 0; !s && b < B; b++) {
    dit_tensor_t li = *latents, y = {0};
    li.dims[0] = 1;
    li.data = (float *)latents->data + (size_t)b * item;
    s = dit_runtime_set_input(rt, "latents", &li);
    if (!s) s = dit_runtime_forward(rt);
    if (!s) s = dit_runtime_output(rt, "sample", &y);
    if (!s && b == 0) {
      frame_item = (size_t)dit_tensor_numel(&y);
      *frames = y;
      frames->dims[0] = B;
      frames->dtype = DIT_F32;
      if (!(x = malloc((size_t)B * frame_item * sizeof *x + 1))) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
      frames->data = x;
    }
    if (!s && dit_convert(x + (size_t)b * frame_item, DIT_F32, y.data, y.dtype, frame_item))
      s = DIT_ERR(INVALID_ARGUMENT, "%s: sample is not a float tensor", vae_dir);
  }
  if (s) {
    free(x);
    memset(frames, 0, sizeof *frames);
  }
  dit_runtime_destroy(rt);
  return s;
}
