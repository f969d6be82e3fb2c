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

/* A decoder bundle's io entry `name` (NULL if none). */
static const dit_manifest_io_t *find_io(const dit_manifest_io_t *io, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(io[i].name, name)) return &io[i];
  return NULL;
}

static int is_cache(const dit_manifest_io_t *io) { return !strncmp(io->name, "cache.", 6); }

/* One decoder bundle: its runtime, the latent frames it takes per forward and the frames it gives. */
typedef struct decoder {
  dit_runtime_t *rt;
  const dit_manifest_t *m;
  int64_t n, frames;
} decoder_t;

/* Loads the decoder bundle at dir and checks it takes latents of the loop's channels and size. */
static dit_status_t decoder_load(const char *dir, const dit_runtime_options_t *o, const dit_tensor_t *lat, decoder_t *d) {
  DIT_RETURN_IF(dit_runtime_load(dir, o, &d->rt));
  d->m = dit_runtime_manifest(d->rt);
  const dit_manifest_io_t *in = find_io(d->m->io_inputs, d->m->n_inputs, "latents");
  const dit_manifest_io_t *out = find_io(d->m->io_outputs, d->m->n_outputs, "sample");
  int same = in && out && in->rank == 5 && lat->rank == 5 && out->rank == 5 && in->dims[0] == 1;
  for (int k = 1; same && k < 5; k++) same = k == 2 || in->dims[k] == lat->dims[k];
  if (!same)
    return DIT_ERR(FAILED_PRECONDITION, "%s: the VAE decoder stage takes latents %s, the loop's are [%lld, %lld, %lld, %lld, %lld]: a "
                   "stage bundle of another shape", dir, in && out ? "of its compiled shape" : "(it has no 'latents' input or 'sample' output)",
                   (long long)lat->dims[0], (long long)lat->dims[1], (long long)lat->dims[2], (long long)lat->dims[3],
                   (long long)lat->dims[4]);
  d->n = in->dims[2];
  d->frames = out->dims[2];
  return DIT_OK;
}

/* Sets every cache input of d from the same-named output (NAME.next) of src's latest forward,
 * zeros where src is NULL or has none (the zero padding before the first frame). Within one
 * runtime of device memory the copy stays on the device. */
static dit_status_t carry_caches(decoder_t *d, decoder_t *src, const float *zeros) {
  int device = 0;
  if (src == d) DIT_RETURN_IF(dit_runtime_join_queue(d->rt, NULL, 1)); /* the forward's outputs are complete */
  for (size_t i = 0; i < d->m->n_inputs; i++) {
    const dit_manifest_io_t *in = &d->m->io_inputs[i];
    if (!is_cache(in)) continue;
    char next[80];
    snprintf(next, sizeof next, "%s.next", in->name);
    dit_tensor_t t = {(void *)zeros, DIT_F32, in->rank, {0}};
    memcpy(t.dims, in->dims, sizeof t.dims);
    dit_status_t s = DIT_OK;
    if (src && find_io(src->m->io_outputs, src->m->n_outputs, next)) {
      s = src == d ? dit_runtime_output_buffer(d->rt, next, &t, &device) : dit_runtime_output(src->rt, next, &t);
      if (!s && device) s = dit_runtime_set_input_device(d->rt, in->name, &t, NULL);
      else if (!s) s = dit_runtime_set_input(d->rt, in->name, &t);
    } else {
      s = dit_runtime_set_input(d->rt, in->name, &t);
    }
    if (s) return s;
  }
  return device ? dit_runtime_join_queue(d->rt, NULL, 0) : DIT_OK;
}

/* The largest cache input of d, in elements. */
static size_t largest_cache(const decoder_t *d) {
  size_t most = 0;
  for (size_t i = 0; d->m && i < d->m->n_inputs; i++) {
    dit_tensor_t t = {NULL, DIT_F32, d->m->io_inputs[i].rank, {0}};
    memcpy(t.dims, d->m->io_inputs[i].dims, sizeof t.dims);
    if (is_cache(&d->m->io_inputs[i]) && (size_t)dit_tensor_numel(&t) > most) most = (size_t)dit_tensor_numel(&t);
  }
  return most;
}

/* One forward of d over latent frames [t0, t0 + d->n) of item b of lat, its frames written to
 * frames (f32 [B, C, F, H, W]) from frame f0. buf: room for one chunk of latents. */
static dit_status_t decode_chunk(decoder_t *d, const dit_tensor_t *lat, int64_t b, int64_t t0, float *buf, dit_tensor_t *frames,
                                 int64_t f0) {
  const int64_t z = lat->dims[1], f = lat->dims[2], hw = lat->dims[3] * lat->dims[4];
  for (int64_t c = 0; c < z; c++)
    memcpy(buf + c * d->n * hw, (const float *)lat->data + ((b * z + c) * f + t0) * hw, (size_t)(d->n * hw) * sizeof *buf);
  const dit_tensor_t li = {buf, DIT_F32, 5, {1, z, d->n, lat->dims[3], lat->dims[4]}};
  dit_tensor_t y = {0};
  DIT_RETURN_IF(dit_runtime_set_input(d->rt, "latents", &li));
  DIT_RETURN_IF(dit_runtime_forward(d->rt));
  DIT_RETURN_IF(dit_runtime_output(d->rt, "sample", &y));
  const int64_t C = frames->dims[1], F = frames->dims[2], HW = frames->dims[3] * frames->dims[4];
  const size_t esz = dit_dtype_size(y.dtype), plane = (size_t)(d->frames * HW);
  for (int64_t c = 0; c < C; c++)
    if (dit_convert((float *)frames->data + ((b * C + c) * F + f0) * HW, DIT_F32, (const char *)y.data + (size_t)c * plane * esz, y.dtype,
                    plane))
      return DIT_ERR(INVALID_ARGUMENT, "the VAE decoder's sample is %s, not a float tensor", dit_dtype_name(y.dtype));
  return DIT_OK;
}

dit_status_t gen_decode_latents(const char *vae_dir, const char *first_dir, const dit_runtime_options_t *o, const dit_tensor_t *latents,
                                dit_tensor_t *frames) {
  memset(frames, 0, sizeof *frames);
  decoder_t first = {0}, rest = {0};
  float *buf = NULL, *zeros = NULL;
  const int64_t B = latents->dims[0], f = latents->rank == 5 ? latents->dims[2] : 0;
  dit_status_t s = first_dir ? decoder_load(first_dir, o, latents, &first) : DIT_OK;
  /* Latent frame 0 alone needs no later chunk. */
  const int later = !first_dir || f > 1;
  if (!s && later) s = decoder_load(vae_dir, o, latents, &rest);
  if (!s && first_dir && first.n != 1)
    s = DIT_ERR(FAILED_PRECONDITION, "%s: the first chunk's decoder takes %lld latent frames, expected 1", first_dir, (long long)first.n);
  if (!s && later && (first_dir ? (f - 1) % rest.n : f != rest.n))
    s = DIT_ERR(FAILED_PRECONDITION, "%s: the VAE decoder stage takes %lld latent frames per forward, which the loop's %lld %s", vae_dir,
                (long long)rest.n, (long long)(first_dir ? f - 1 : f),
                first_dir ? "latent frames after the first do not split into" : "latent frames are not (a stage of another shape)");
  const int64_t chunks = !later ? 0 : first_dir ? (f - 1) / rest.n : 1;
  const int64_t F = (first_dir ? first.frames : 0) + chunks * rest.frames;
  const decoder_t *any = first_dir ? &first : &rest;
  const dit_manifest_io_t *out = s ? NULL : find_io(any->m->io_outputs, any->m->n_outputs, "sample");
  const size_t zero_n = s ? 0 : largest_cache(&first) > largest_cache(&rest) ? largest_cache(&first) : largest_cache(&rest);
  if (!s) {
    *frames = (dit_tensor_t){NULL, DIT_F32, 5, {B, out->dims[1], F, out->dims[3], out->dims[4]}};
    const int64_t lat_n = later ? rest.n : 1;
    frames->data = malloc((size_t)dit_tensor_numel(frames) * sizeof(float) + 1);
    buf = malloc((size_t)(latents->dims[1] * lat_n * latents->dims[3] * latents->dims[4]) * sizeof *buf);
    zeros = calloc(zero_n + 1, sizeof *zeros);
    if (!frames->data || !buf || !zeros) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  for (int64_t b = 0; !s && b < B; b++) {
    int64_t t = 0, fo = 0;
    if (first_dir) {
      s = carry_caches(&first, NULL, zeros);
      if (!s) s = decode_chunk(&first, latents, b, 0, buf, frames, 0);
      if (!s && later) s = carry_caches(&rest, &first, zeros);
      t = 1, fo = first.frames;
    }
    for (int64_t k = 0; !s && k < chunks; k++, t += rest.n, fo += rest.frames) {
      if (k) s = carry_caches(&rest, &rest, zeros);
      if (!s) s = decode_chunk(&rest, latents, b, t, buf, frames, fo);
    }
  }
  if (s) {
    free(frames->data);
    memset(frames, 0, sizeof *frames);
  }
  free(buf);
  free(zeros);
  dit_runtime_destroy(first.rt);
  dit_runtime_destroy(rest.rt);
  return s;
}
