/* generate's pipeline stages: see gen_stages.h. */
#include "runtime/gen_stages.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/bundle.h"
#include "artifacts/image_processor.h"
#include "base/clock.h"
#include "base/fileio.h"
#include "runtime/gen_cli.h"
#include "runtime/media.h"
#include "runtime/preview.h"
#include "runtime/rng.h"
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

dit_status_t gen_text_stages(const char *bundle_dir, const dit_manifest_t *m, const char *why, const dit_manifest_stage_t **st,
                             const char **dirs) {
  const dit_manifest_generate_t *gs = &m->generate;
  if (!gs->present) {
    st[0] = dit_manifest_find_stage(m, "text_encoder");
    return gen_stage_dir(bundle_dir, m, "text_encoder", why, &dirs[0]);
  }
  for (size_t i = 0; i < gs->n_conditions; i++) {
    if (!(st[i] = dit_manifest_stage_for(m, gs->conditions[i].argument)))
      return DIT_ERR(FAILED_PRECONDITION, "%s: bundle %s has no text encoder stage making the generate argument '%s' (it was compiled "
                     "from a transformer folder, or with --stages without its text encoders): compile the pipeline directory with its "
                     "stages (ditc compile PIPELINE_DIR ..., every stage by default), or give the embeddings", why, m->identity,
                     gs->conditions[i].argument);
    DIT_RETURN_IF(gen_stage_dir(bundle_dir, m, st[i]->role, why, &dirs[i]));
  }
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

/* Whether the bundle's manifest has input `name`. */
static int has_input(const dit_manifest_t *m, const char *name) {
  for (size_t i = 0; i < m->n_inputs; i++)
    if (!strcmp(m->io_inputs[i].name, name)) return 1;
  return 0;
}

/* The text the tokenizer reads: the prompt in the stage's template, else cleaned as WanPipeline
 * cleans it (a zeroed stage) or as given. */
static char *prompt_text(const dit_manifest_stage_t *st, const char *text) {
  const char *tpl = st ? st->prompt_template : "", *at = tpl[0] ? strstr(tpl, "{}") : NULL;
  if (!at) return st && st->argument[0] && st->padding != DIT_PADDING_ZEROED ? strdup(text) : clean_prompt(text);
  const size_t n = strlen(tpl) + strlen(text);
  char *out = malloc(n);
  if (out) snprintf(out, n, "%.*s%s%s", (int)(at - tpl), tpl, text, at + 2);
  return out;
}

dit_status_t gen_encode_prompt(const char *te_dir, const dit_manifest_stage_t *st, const dit_runtime_options_t *o, const char *text,
                               int64_t batch, dit_tensor_t *out, dit_tensor_t *mask_out, int *tokens) {
  memset(out, 0, sizeof *out);
  if (mask_out) memset(mask_out, 0, sizeof *mask_out);
  const int listed = st && st->argument[0], padding = listed ? st->padding : DIT_PADDING_ZEROED;
  const int64_t drop = listed ? st->drop : 0;
  const char *output = listed ? st->output : "last_hidden_state";
  dit_tokenizer_t *tk = NULL;
  dit_runtime_t *rt = NULL;
  int32_t *ids = NULL, *mask = NULL;
  char *prompt = prompt_text(listed ? st : NULL, text);
  dit_status_t s = prompt ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  if (!s) s = open_bundle_tokenizer(te_dir, &tk);
  if (!s) s = dit_runtime_load(te_dir, o, &rt);
  const dit_manifest_t *m = rt ? dit_runtime_manifest(rt) : NULL;
  const int64_t L = m ? m->shape.text_len : 0;
  if (!s && (L < 1 || L > DIT_TOKENIZER_MAX_LENGTH || drop >= L))
    s = DIT_ERR(INVALID_ARGUMENT, "%s: text length %lld, expected 1..%d and more than the template's %lld rows", te_dir, (long long)L,
                DIT_TOKENIZER_MAX_LENGTH, (long long)drop);
  if (!s) {
    ids = malloc((size_t)L * sizeof *ids);
    mask = malloc((size_t)L * sizeof *mask);
    if (!ids || !mask) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!s) s = dit_tokenizer_encode(tk, prompt, strlen(prompt), (int)L, ids, mask);
  int n = 0;
  for (int64_t t = 0; !s && t < L; t++) n += mask[t] > 0;
  if (!s && n <= drop)
    s = DIT_ERR(INVALID_ARGUMENT, "%s: the prompt in its template is %d tokens, no more than the template's %lld the pipeline drops", te_dir,
                n, (long long)drop);
  dit_tensor_t ti = {ids, DIT_I32, 2, {1, L}}, tm = {mask, DIT_I32, 2, {1, L}}, h = {0};
  if (!s) s = dit_runtime_set_input(rt, "input_ids", &ti);
  /* FluxPipeline passes no mask: every position attended, the padding's too. The others pass the
   * tokenizer's. */
  const int attended = padding == DIT_PADDING_ATTENDED;
  for (int64_t t = 0; !s && attended && t < L; t++) mask[t] = 1;
  if (!s && (!attended || has_input(m, "attention_mask"))) s = dit_runtime_set_input(rt, "attention_mask", &tm);
  if (!s) s = dit_runtime_forward(rt);
  if (!s) s = dit_runtime_output(rt, output, &h);
  const int pooled = h.rank == 2;
  if (!s && (h.dims[0] != 1 || (pooled ? drop : h.rank != 3 || h.dims[1] != L)))
    s = DIT_ERR(INVALID_ARGUMENT, "%s: output %s has rank %d, expected [1, %lld, D]%s", te_dir, output, h.rank, (long long)L,
                drop ? "" : " or [1, D]");
  /* The rows kept: from the template's end; the mask of the prompt's among them. */
  const int64_t K = L - drop, valid = n - drop;
  if (!s) {
    const size_t row = (size_t)h.dims[h.rank - 1], one = pooled ? row : (size_t)K * row;
    float *x = malloc((size_t)batch * one * sizeof *x + 1);
    if (!x || dit_convert(x, DIT_F32, (const char *)h.data + (pooled ? 0 : (size_t)drop * row * dit_dtype_size(h.dtype)), h.dtype, one))
      s = x ? DIT_ERR(INVALID_ARGUMENT, "%s: %s is not a float tensor", te_dir, output) : DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    /* WanPipeline and QwenImagePipeline keep each prompt's own rows and zero the rest (not the
     * encoder's padded rows). */
    if (!s && padding == DIT_PADDING_ZEROED && !pooled) memset(x + (size_t)valid * row, 0, (one - (size_t)valid * row) * sizeof *x);
    for (int64_t b = 1; !s && b < batch; b++) memcpy(x + (size_t)b * one, x, one * sizeof *x);
    if (s) free(x);
    else if (pooled) *out = (dit_tensor_t){x, DIT_F32, 2, {batch, (int64_t)row}};
    else *out = (dit_tensor_t){x, DIT_F32, 3, {batch, K, (int64_t)row}};
  }
  if (!s && mask_out) {
    float *mk = malloc((size_t)(batch * K) * sizeof *mk);
    if (!mk) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    for (int64_t i = 0; !s && i < batch * K; i++) mk[i] = i % K < valid ? 1.0f : 0.0f;
    if (!s) *mask_out = (dit_tensor_t){mk, DIT_F32, 2, {batch, K}};
  }
  if (s) {
    free(out->data);
    memset(out, 0, sizeof *out);
  }
  if (tokens) *tokens = n;
  free(ids);
  free(mask);
  free(prompt);
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

/* One decoder bundle: the latent frames it takes per forward, the frames it gives, where its time
 * went and, while loaded, its runtime. */
typedef struct decoder {
  const char *dir;
  int64_t n, frames;
  /* From its manifest: its input's and its 'sample' output's shapes (rank 0: none) and, for a
   * split decoder's tail, its windows (shape.tile; count 0: none; window: shape.latent's width). */
  int in_rank, out_rank;
  int64_t in_dims[DIT_MAX_RANK], out_dims[DIT_MAX_RANK];
  int64_t tile_count, tile_full, tile_halo, tile_window;
  double load_s;  /* seconds spent loading it */
  double run_s, carry_s, out_s; /* in its forwards (with their inputs), carrying caches, taking its frames */
  uint64_t alloc; /* the most it allocated while loaded */
  dit_runtime_t *rt;
  const dit_manifest_t *m;
} decoder_t;

/* The stage bundle at dir: its input `input`, its output `output` and its windows, read from its
 * manifest alone (the runtime is loaded when it runs). */
static dit_status_t stage_open(const char *dir, const char *input, const char *output, decoder_t *d) {
  dit_bundle_t *b = NULL;
  DIT_RETURN_IF(dit_bundle_open(dir, 0, &b));
  const dit_manifest_t *m = dit_bundle_manifest(b);
  const dit_manifest_io_t *in = find_io(m->io_inputs, m->n_inputs, input), *out = find_io(m->io_outputs, m->n_outputs, output);
  *d = (decoder_t){.dir = dir, .tile_count = m->shape.tile_count, .tile_full = m->shape.tile_full, .tile_halo = m->shape.tile_halo,
                   .tile_window = m->shape.latent[3]};
  if (in) d->in_rank = in->rank, memcpy(d->in_dims, in->dims, sizeof d->in_dims);
  if (out) d->out_rank = out->rank, memcpy(d->out_dims, out->dims, sizeof d->out_dims);
  dit_bundle_close(b);
  return DIT_OK;
}

/* d's frames a forward: n in (its input's dim), its output's dim 2 out; a manifest edited to none
 * is refused here, before any chunk count divides by them. */
static dit_status_t stage_frames(decoder_t *d, int64_t n) {
  d->n = n, d->frames = d->out_dims[2];
  if (d->n < 1 || d->frames < 1)
    return DIT_ERR(FAILED_PRECONDITION, "%s: a stage that takes %lld frames a forward and gives %lld (expected at least 1 each)", d->dir,
                   (long long)d->n, (long long)d->frames);
  return DIT_OK;
}

/* The decoder bundle at dir, checked to take latents of the loop's channels and size. */
static dit_status_t decoder_open(const char *dir, const dit_tensor_t *lat, const char *output, decoder_t *d) {
  DIT_RETURN_IF(stage_open(dir, "latents", output, d));
  int same = d->in_rank == 5 && lat->rank == 5 && d->out_rank == 5 && d->in_dims[0] == 1;
  for (int k = 1; same && k < 5; k++) same = k == 2 || d->in_dims[k] == lat->dims[k];
  if (!same)
    return DIT_ERR(FAILED_PRECONDITION, "%s: the VAE decoder stage takes latents %s, the loop's are [%lld, %lld, %lld, %lld, %lld]: a "
                   "stage bundle of another shape", dir, d->in_rank && d->out_rank ? "of its compiled shape" : "(it has no 'latents' input or no output of the expected name)",
                   (long long)lat->dims[0], (long long)lat->dims[1], (long long)lat->dims[2], (long long)lat->dims[3],
                   (long long)lat->dims[4]);
  return stage_frames(d, d->in_dims[2]);
}

/* A split decoder's tail at dir: input 'hidden' ([1, n, h, window, C], channel-last), output
 * 'sample' (checked against the head's output by tail_tiles). */
static dit_status_t tail_open(const char *dir, decoder_t *d) {
  DIT_RETURN_IF(stage_open(dir, "hidden", "sample", d));
  if (d->in_rank != 5 || d->out_rank != 5 || d->in_dims[0] != 1)
    return DIT_ERR(FAILED_PRECONDITION, "%s: not a split decoder's tail: expected input 'hidden' [1, n, h, w, C] and output 'sample' [1, C, F, H, W]",
                   dir);
  return stage_frames(d, d->in_dims[1]);
}

static dit_status_t decoder_load(decoder_t *d, const dit_runtime_options_t *o) {
  if (d->rt) return DIT_OK;
  const double t0 = dit_now_s();
  DIT_RETURN_IF(dit_runtime_load(d->dir, o, &d->rt));
  d->load_s += dit_now_s() - t0;
  d->m = dit_runtime_manifest(d->rt);
  uint64_t alloc = 0, pred = 0;
  int rank = 0;
  if (!dit_runtime_memory(d->rt, &alloc, &pred, &rank) && alloc > d->alloc) d->alloc = alloc;
  return DIT_OK;
}

static void decoder_unload(decoder_t *d) {
  dit_runtime_destroy(d->rt);
  d->rt = NULL;
  d->m = NULL;
}

/* Zeros every cache input of d: the zero padding before the first frame. */
static dit_status_t zero_caches(decoder_t *d) {
  for (size_t i = 0; i < d->m->n_inputs; i++)
    if (is_cache(&d->m->io_inputs[i])) DIT_RETURN_IF(dit_runtime_zero_input(d->rt, d->m->io_inputs[i].name));
  return DIT_OK;
}

/* Makes every cache input of d the same-named output (NAME.next) of d's latest forward: nothing
 * to do where the output replaced the input in place, else a copy on the device (or in host
 * memory, on a host backend). */
static dit_status_t carry_caches(decoder_t *d) {
  int device = 0, copied = 0;
  DIT_RETURN_IF(dit_runtime_join_queue(d->rt, NULL, 1)); /* the forward's outputs are complete */
  for (size_t i = 0; i < d->m->n_inputs; i++) {
    const dit_manifest_io_t *in = &d->m->io_inputs[i];
    if (!is_cache(in)) continue;
    char next[80];
    snprintf(next, sizeof next, "%s.next", in->name);
    const char *upd = dit_runtime_output_updates(d->rt, next);
    if (upd && !strcmp(upd, in->name)) continue; /* the forward left it in place */
    dit_tensor_t t;
    DIT_RETURN_IF(dit_runtime_output_buffer(d->rt, next, &t, &device));
    DIT_RETURN_IF(device ? dit_runtime_set_input_device(d->rt, in->name, &t, NULL) : dit_runtime_set_input(d->rt, in->name, &t));
    copied = 1;
  }
  return copied && device ? dit_runtime_join_queue(d->rt, NULL, 0) : DIT_OK;
}

/* The first chunk's decoder hands its caches to the later chunks' through their buffers: each of
 * its cache inputs must be one of theirs. */
static dit_status_t check_handoff(const char *first_dir, const char *vae_dir) {
  dit_bundle_t *a = NULL, *b = NULL;
  dit_status_t s = dit_bundle_open(first_dir, 0, &a);
  if (!s) s = dit_bundle_open(vae_dir, 0, &b);
  const dit_manifest_t *fm = s ? NULL : dit_bundle_manifest(a), *rm = s ? NULL : dit_bundle_manifest(b);
  for (size_t i = 0; !s && i < fm->n_inputs; i++) {
    const dit_manifest_io_t *in = &fm->io_inputs[i], *r = is_cache(in) ? find_io(rm->io_inputs, rm->n_inputs, in->name) : NULL;
    if (is_cache(in) && (!r || r->rank != in->rank || memcmp(r->dims, in->dims, sizeof r->dims[0] * (size_t)r->rank)))
      s = DIT_ERR(FAILED_PRECONDITION, "%s: cache input '%s' of the first chunk's decoder is not one of %s's (a decoder pair of another "
                  "shape)", first_dir, in->name, vae_dir);
  }
  dit_bundle_close(a);
  dit_bundle_close(b);
  return s;
}

/* A chunk's frames taken into the video on a thread of their own while the next chunk's forward
 * runs where the sample view y is a host copy that a forward leaves alone (a GPU's; on the CPU
 * the view is the runtime's own memory, so they are taken before the next forward): y converted
 * into frames (f32 [B, C, F, H, W]) of item b from frame f0, columns [lo, hi) of the video from
 * the sample's columns from lo - x0 (a window's: x0 its first column; a whole frame's: 0). */
typedef struct frames_job {
  dit_tensor_t y;
  dit_tensor_t *frames;
  int64_t b, f0, x0, lo, hi;
  double seconds;
  int running;
  pthread_t th;
} frames_job_t;

static void *store_frames(void *p) {
  frames_job_t *j = p;
  const double t0 = dit_now_s();
  const int64_t C = j->frames->dims[1], F = j->frames->dims[2], H = j->frames->dims[3], W = j->frames->dims[4];
  const int64_t yf = j->y.dims[2], yw = j->y.dims[4], n = j->hi - j->lo;
  const size_t esz = dit_dtype_size(j->y.dtype);
  const char *src = (const char *)j->y.data + (size_t)(j->lo - j->x0) * esz;
  for (int64_t c = 0; c < C; c++)
    for (int64_t f = 0; f < yf; f++) {
      float *dst = (float *)j->frames->data + (((j->b * C + c) * F + j->f0 + f) * H) * W + j->lo;
      const char *row = src + (size_t)((c * yf + f) * H) * (size_t)yw * esz;
      if (n == W && yw == W) { /* whole rows: one conversion a frame */
        (void)dit_convert(dst, DIT_F32, row, j->y.dtype, (size_t)(H * W)); /* a float sample (checked): cannot fail */
        continue;
      }
      for (int64_t y = 0; y < H; y++) (void)dit_convert(dst + y * W, DIT_F32, row + (size_t)(y * yw) * esz, j->y.dtype, (size_t)n);
    }
  j->seconds += dit_now_s() - t0;
  return NULL;
}

/* Waits for the frames job in flight, if any. */
static void frames_join(frames_job_t *j) {
  if (j->running) pthread_join(j->th, NULL);
  j->running = 0;
}

/* One forward of d on input `name` = in, its sample stored (by job, on a thread, or here if none
 * starts) into frames of item b from frame f0, video columns [lo, hi) from window column x0. */
static dit_status_t decode_chunk(decoder_t *d, const char *name, const dit_tensor_t *in, int64_t b, frames_job_t *job, int64_t f0,
                                 int64_t x0, int64_t lo, int64_t hi) {
  dit_tensor_t y = {0};
  const double start = dit_now_s();
  DIT_RETURN_IF(dit_runtime_set_input(d->rt, name, in));
  if (!dit_runtime_output_is_copy(d->rt)) frames_join(job); /* the forward writes where the view points */
  DIT_RETURN_IF(dit_runtime_forward(d->rt));
  const double t1 = dit_now_s();
  d->run_s += t1 - start;
  frames_join(job); /* the previous chunk's frames are out of the view before the next one is taken */
  DIT_RETURN_IF(dit_runtime_output(d->rt, "sample", &y));
  const dit_tensor_t *fr = job->frames;
  if (y.rank != 5 || y.dims[1] != fr->dims[1] || y.dims[2] != d->frames || y.dims[3] != fr->dims[3] || x0 > lo || hi - x0 > y.dims[4])
    return DIT_ERR(INTERNAL, "%s: sample of rank %d, not the manifest's", d->dir, y.rank);
  if (y.dtype != DIT_F32 && y.dtype != DIT_BF16 && y.dtype != DIT_F16) return DIT_ERR(INVALID_ARGUMENT, "the VAE decoder's sample is %s, not a float tensor", dit_dtype_name(y.dtype));
  d->out_s += dit_now_s() - t1;
  job->y = y, job->b = b, job->f0 = f0, job->x0 = x0, job->lo = lo, job->hi = hi;
  job->running = !pthread_create(&job->th, NULL, store_frames, job);
  if (!job->running) store_frames(job);
  return DIT_OK;
}

void gen_decode_report(double seconds, const gen_decode_stats_t *st) {
  fprintf(stderr, "ditrun: vae decode %.2f s (loading %.2f s, %.2f MiB allocated; forwards %.2f s, caches %.2f s, frames %.2f s, %.2f s "
          "of it beside the forwards)\n", seconds, st->load_s, st->peak_bytes / 1048576.0, st->run_s, st->carry_s, st->out_s, st->store_s);
}

/* What the chunks' decoders read: latent frames of item b of the latents (channel-first f32), or,
 * for a split decoder's tail, frames of the head's output (channel-last, the stash: [B, f, h, w,
 * C] in the head's dtype), columns [x0, x0 + width) of them. */
typedef struct chunk_source {
  const dit_tensor_t *latents; /* NULL: the stash */
  const dit_tensor_t *stash;
  int64_t x0, width;
  void *buf; /* room for the largest chunk */
} chunk_source_t;

/* Frames [t0, t0 + n) of item b of the latents lat (f32 [B, C, f, h, w]) into buf, as *in. */
static void latent_frames(const dit_tensor_t *lat, int64_t b, int64_t t0, int64_t n, float *buf, dit_tensor_t *in) {
  const int64_t z = lat->dims[1], f = lat->dims[2], hw = lat->dims[3] * lat->dims[4];
  for (int64_t c = 0; c < z; c++)
    memcpy(buf + c * n * hw, (const float *)lat->data + ((b * z + c) * f + t0) * hw, (size_t)(n * hw) * sizeof *buf);
  *in = (dit_tensor_t){buf, DIT_F32, 5, {1, z, n, lat->dims[3], lat->dims[4]}};
}

/* Frames [t0, t0 + n) of item b of src into src->buf, as the tensor *in. */
static void gather_chunk(const chunk_source_t *src, int64_t b, int64_t t0, int64_t n, dit_tensor_t *in) {
  if (src->latents) {
    latent_frames(src->latents, b, t0, n, src->buf, in);
    return;
  }
  const dit_tensor_t *st = src->stash;
  const int64_t f = st->dims[1], h = st->dims[2], w = st->dims[3], C = st->dims[4];
  const size_t px = (size_t)C * dit_dtype_size(st->dtype), row = (size_t)src->width * px;
  for (int64_t t = 0; t < n; t++)
    for (int64_t y = 0; y < h; y++)
      memcpy((char *)src->buf + (size_t)(t * h + y) * row, (const char *)st->data + ((size_t)(((b * f + t0 + t) * h + y) * w + src->x0)) * px, row);
  *in = (dit_tensor_t){src->buf, st->dtype, 5, {1, n, h, src->width, C}};
}

/* The head of a split decoder over every latent frame of every item, one frame a forward, its
 * output `hidden` gathered into *stash ([B, f, h, w, C], malloc'ed). */
static dit_status_t run_head(decoder_t *hd, const dit_runtime_options_t *o, const dit_tensor_t *lat, dit_tensor_t *stash) {
  const int64_t B = lat->dims[0], f = lat->dims[2];
  chunk_source_t src = {.latents = lat, .buf = malloc((size_t)(lat->dims[1] * lat->dims[3] * lat->dims[4]) * sizeof(float))};
  dit_status_t s = src.buf ? decoder_load(hd, o) : DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  size_t one = 0;
  for (int64_t b = 0; !s && b < B; b++) {
    s = zero_caches(hd);
    for (int64_t t = 0; !s && t < f; t++) {
      dit_tensor_t in, y;
      const double t0 = dit_now_s();
      if (t) s = carry_caches(hd);
      hd->carry_s += dit_now_s() - t0;
      gather_chunk(&src, b, t, 1, &in);
      const double t1 = dit_now_s();
      if (!s) s = dit_runtime_set_input(hd->rt, "latents", &in);
      if (!s) s = dit_runtime_forward(hd->rt);
      hd->run_s += dit_now_s() - t1;
      const double t2 = dit_now_s();
      if (!s) s = dit_runtime_output(hd->rt, "hidden", &y);
      if (!s && (y.rank != 5 || y.dims[1] != 1 || y.dims[2] != lat->dims[3] || y.dims[3] != lat->dims[4]))
        s = DIT_ERR(INTERNAL, "%s: output 'hidden' of rank %d, not [1, 1, %lld, %lld, C]", hd->dir, y.rank, (long long)lat->dims[3],
                    (long long)lat->dims[4]);
      if (!s && !stash->data) {
        one = (size_t)dit_tensor_numel(&y) * dit_dtype_size(y.dtype);
        *stash = (dit_tensor_t){malloc(one * (size_t)(B * f) + 1), y.dtype, 5, {B, f, y.dims[2], y.dims[3], y.dims[4]}};
        if (!stash->data) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory: the head's output of %lld frames", (long long)(B * f));
      }
      if (!s) memcpy((char *)stash->data + (size_t)(b * f + t) * one, y.data, one);
      hd->out_s += dit_now_s() - t2;
    }
  }
  free(src.buf);
  decoder_unload(hd);
  return s;
}

/* A tail's windows (its manifest's shape.tile), checked against the head's output. */
static dit_status_t tail_tiles(const decoder_t *d, const dit_tensor_t *stash) {
  if (!d->tile_count)
    return DIT_ERR(FAILED_PRECONDITION, "%s: not a split decoder's tail (no shape.tile, or no input 'hidden'), yet a head was given", d->dir);
  if (d->tile_full != stash->dims[3] || d->in_dims[2] != stash->dims[2] || d->in_dims[4] != stash->dims[4])
    return DIT_ERR(FAILED_PRECONDITION, "%s: the tail's windows cover [%lld, %lld] columns of %lld channels, the head gives [%lld, %lld] of %lld "
                   "(a head of another shape)", d->dir, (long long)d->in_dims[2], (long long)d->tile_full, (long long)d->in_dims[4],
                   (long long)stash->dims[2], (long long)stash->dims[3], (long long)stash->dims[4]);
  return DIT_OK;
}

/* An image family's decode: each item of the latents (any rank but 5) through the decoder bundle at
 * dir (input 'latents' one item of them, output 'sample' [1, C, H, W]) into frames [B, C, H, W]. */
static dit_status_t decode_images(const char *dir, const dit_runtime_options_t *o, const dit_tensor_t *lat, dit_tensor_t *frames,
                                  gen_decode_stats_t *stats) {
  decoder_t d = {.dir = dir};
  dit_status_t s = stage_open(dir, "latents", "sample", &d);
  int same = d.in_rank && d.out_rank == 4 && d.out_dims[0] == 1 && d.in_rank == lat->rank && d.in_dims[0] == 1;
  for (int k = 1; same && k < lat->rank; k++) same = d.in_dims[k] == lat->dims[k];
  if (!s && !same) {
    char want[160] = "[";
    for (int k = 0; k < lat->rank; k++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", k ? ", " : "", k ? (long long)lat->dims[k] : 1LL);
    s = DIT_ERR(FAILED_PRECONDITION, "%s: the VAE decoder stage does not take one item of the loop's latents (%s]) to an image [1, C, H, W] "
                "'sample' (%s): a stage bundle of another shape", dir, want, d.in_rank && d.out_rank ? "its compiled shape differs" : "no input 'latents' or no output 'sample'");
  }
  if (!s) *frames = (dit_tensor_t){NULL, DIT_F32, 4, {lat->dims[0], d.out_dims[1], d.out_dims[2], d.out_dims[3]}};
  const size_t item = s ? 0 : (size_t)(dit_tensor_numel(lat) / lat->dims[0]), img = s ? 0 : (size_t)(dit_tensor_numel(frames) / lat->dims[0]);
  if (!s && !(frames->data = malloc(img * lat->dims[0] * sizeof(float) + 1))) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  if (!s) s = decoder_load(&d, o);
  for (int64_t i = 0; !s && i < lat->dims[0]; i++) {
    dit_tensor_t x = *lat, y;
    x.data = (float *)lat->data + (size_t)i * item;
    x.dims[0] = 1;
    double t0 = dit_now_s();
    s = dit_runtime_set_input(d.rt, "latents", &x);
    if (!s) s = dit_runtime_forward(d.rt);
    const double t1 = dit_now_s();
    d.run_s += t1 - t0;
    if (!s) s = dit_runtime_output(d.rt, "sample", &y);
    if (!s && dit_convert((float *)frames->data + (size_t)i * img, DIT_F32, y.data, y.dtype, img))
      s = DIT_ERR(INVALID_ARGUMENT, "the VAE decoder's sample is %s, not a float tensor", dit_dtype_name(y.dtype));
    d.out_s += dit_now_s() - t1;
  }
  if (s) {
    free(frames->data);
    memset(frames, 0, sizeof *frames);
  }
  if (stats) *stats = (gen_decode_stats_t){d.load_s, d.run_s, 0, d.out_s, 0, d.alloc};
  decoder_unload(&d);
  return s;
}

dit_status_t gen_decoder_stages(const char *bundle_dir, const dit_manifest_t *m, const char *why, gen_decoders_t *out) {
  memset(out, 0, sizeof *out);
  DIT_RETURN_IF(gen_stage_dir(bundle_dir, m, "vae_decoder", why, &out->vae_dir));
  out->stride = dit_manifest_find_stage(m, "vae_decoder")->window_stride;
  /* A decoder in chunks has latent frame 0's bundle beside its later chunks'; one in spatial
   * windows its head's beside its tails'; one framewise its last window's beside the others'. */
  static const char *const roles[] = {"vae_decoder_first", "vae_decoder_head", "vae_decoder_last"};
  const char **dirs[] = {&out->first_dir, &out->head_dir, &out->last_dir};
  for (int i = 0; i < 3; i++)
    if (dit_manifest_find_stage(m, roles[i])) DIT_RETURN_IF(gen_stage_dir(bundle_dir, m, roles[i], why, dirs[i]));
  return DIT_OK;
}

/* A framewise decode (diffusers' _temporal_tiled_decode): latent windows [k * stride, k * stride
 * + n) (the last one shorter: last's graph) decoded one after another; window k > 0 gives its
 * frames after its first, of which the first `blend` are blended with the previous window's last
 * ones (blend_t: a[-e + x] * (1 - x / e) + b[x] * x / e, e = min(blend, both windows' frames)),
 * in place as diffusers blends them; the first window gives S + 1 frames, the others S (S = stride
 * * temporal), the video cropped to (f - 1) * temporal + 1. A later window of one latent frame
 * gives nothing (its one frame is dropped) and is not run. */
static dit_status_t decode_windows(const gen_decoders_t *dec, const dit_runtime_options_t *o, const dit_tensor_t *lat, dit_tensor_t *frames,
                                   gen_decode_stats_t *stats) {
  decoder_t win = {0}, last = {0};
  const int64_t B = lat->dims[0], f = lat->dims[2], stride = dec->stride;
  dit_status_t s = decoder_open(dec->vae_dir, lat, "sample", &win);
  const int64_t n = win.n, T = win.frames, r = n > 1 ? (T - 1) / (n - 1) : 0, S = stride * r, blend = T - 1 - S;
  if (!s && (n < 2 || r < 1 || (T - 1) % (n - 1) || stride >= n || blend < 0))
    s = DIT_ERR(FAILED_PRECONDITION, "%s: a window of %lld latent frames decoding to %lld frames does not take windows every %lld latent "
                "frames (expected 2+ frames a window, a stride below them and (n - 1) * temporal + 1 frames)", dec->vae_dir, (long long)n,
                (long long)T, (long long)stride);
  if (!s && f < n)
    s = DIT_ERR(FAILED_PRECONDITION, "%s: latents of %lld frames: the framewise decoder's windows take %lld, the video has fewer (a "
                "stage of another shape: %lld or fewer latent frames decode in one graph)", dec->vae_dir, (long long)f, (long long)n,
                (long long)(n - 1));
  const int64_t windows = s ? 0 : 1 + (f - 2) / stride, tail = s ? 0 : f - (windows - 1) * stride; /* the last window's frames */
  if (!s && tail != n && !dec->last_dir)
    s = DIT_ERR(FAILED_PRECONDITION, "%s: latents of %lld frames end in a window of %lld latent frames, and no last window's decoder "
                "(vae_decoder_last) was given", dec->vae_dir, (long long)f, (long long)tail);
  if (!s && tail != n) s = decoder_open(dec->last_dir, lat, "sample", &last);
  if (!s && tail != n && (last.n != tail || last.frames != (tail - 1) * r + 1))
    s = DIT_ERR(FAILED_PRECONDITION, "%s: the last window's decoder takes %lld latent frames to %lld, the latents' last window has %lld "
                "(a stage of another shape)", dec->last_dir, (long long)last.n, (long long)last.frames, (long long)tail);
  const int64_t C = win.out_dims[1], H = win.out_dims[3], W = win.out_dims[4], hw = H * W, F = (f - 1) * r + 1;
  float *buf = NULL, *prev = NULL, *cur = NULL;
  if (!s) {
    *frames = (dit_tensor_t){malloc((size_t)(B * C * F * hw) * sizeof(float) + 1), DIT_F32, 5, {B, C, F, H, W}};
    buf = malloc((size_t)(lat->dims[1] * n * lat->dims[3] * lat->dims[4]) * sizeof *buf);
    prev = malloc((size_t)(C * T * hw) * sizeof *prev);
    cur = malloc((size_t)(C * T * hw) * sizeof *cur);
    if (!frames->data || !buf || !prev || !cur) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!s) s = decoder_load(&win, o);
  /* The last window runs in the full windows' arena: the decode's peak is a full window's. */
  if (!s && tail != n) {
    dit_runtime_options_t lo = o ? *o : (dit_runtime_options_t){0};
    lo.borrow = win.rt;
    s = decoder_load(&last, &lo);
  }
  int64_t prev_t = 0; /* the previous window's frames after its drop (the first's: all) */
  for (int64_t b = 0; !s && b < B; b++)
    for (int64_t k = 0; !s && k < windows; k++) {
      decoder_t *d = k + 1 == windows && tail != n ? &last : &win;
      const int64_t cnt = k + 1 == windows ? tail : n, tk = d->frames, drop = k > 0, got = tk - drop;
      dit_tensor_t in, y = {0};
      latent_frames(lat, b, k * stride, cnt, buf, &in);
      const double t0 = dit_now_s();
      s = dit_runtime_set_input(d->rt, "latents", &in);
      if (!s) s = dit_runtime_forward(d->rt);
      const double t1 = dit_now_s();
      d->run_s += t1 - t0;
      if (!s) s = dit_runtime_output(d->rt, "sample", &y);
      if (!s && (y.rank != 5 || y.dims[1] != C || y.dims[2] != tk || y.dims[3] != H || y.dims[4] != W))
        s = DIT_ERR(INTERNAL, "%s: sample of rank %d, not the manifest's", d->dir, y.rank);
      if (!s && dit_convert(cur, DIT_F32, (const char *)y.data, y.dtype, (size_t)(C * tk * hw)))
        s = DIT_ERR(INVALID_ARGUMENT, "the VAE decoder's sample is %s, not a float tensor", dit_dtype_name(y.dtype));
      if (s) break;
      /* Blended in place, kept, and the window becomes the next one's previous. */
      int64_t e = k ? blend : 0; /* blend_t's blend_extent */
      if (e > prev_t) e = prev_t;
      if (e > got) e = got;
      const int64_t keep = k ? (S < got ? S : got) : (S + 1 < got ? S + 1 : got), at = k ? k * S + 1 : 0;
      for (int64_t c = 0; c < C; c++) {
        float *wc = cur + (size_t)(c * tk + drop) * (size_t)hw;
        const float *pc = prev + (size_t)(c * T + prev_t - e) * (size_t)hw;
        for (int64_t x = 0; x < e; x++) {
          const float wa = (float)(1.0 - (double)x / (double)e), wb = (float)((double)x / (double)e);
          for (int64_t p = 0; p < hw; p++) wc[x * hw + p] = pc[x * hw + p] * wa + wc[x * hw + p] * wb;
        }
        const int64_t n_out = at + keep > F ? F - at : keep;
        if (n_out > 0)
          memcpy((float *)frames->data + (size_t)(((b * C + c) * F + at) * hw), wc, (size_t)(n_out * hw) * sizeof(float));
        /* prev holds this window's frames after the drop, channel c at c * T frames. */
        memcpy(prev + (size_t)(c * T) * (size_t)hw, wc, (size_t)(got * hw) * sizeof(float));
      }
      prev_t = got;
      d->out_s += dit_now_s() - t1;
    }
  if (s) {
    free(frames->data);
    memset(frames, 0, sizeof *frames);
  }
  free(buf);
  free(prev);
  free(cur);
  if (stats)
    *stats = (gen_decode_stats_t){win.load_s + last.load_s, win.run_s + last.run_s, 0, win.out_s + last.out_s, 0, win.alloc + last.alloc};
  decoder_unload(&last);
  decoder_unload(&win);
  return s;
}

dit_status_t gen_decode_latents(const gen_decoders_t *dec, const dit_runtime_options_t *o, const dit_tensor_t *latents, dit_tensor_t *frames,
                                gen_decode_stats_t *stats) {
  const char *vae_dir = dec->vae_dir, *first_dir = dec->first_dir, *head_dir = dec->head_dir;
  memset(frames, 0, sizeof *frames);
  for (int k = 0; k < latents->rank; k++)
    if (latents->dims[k] < 1)
      return DIT_ERR(INVALID_ARGUMENT, "latents of rank %d with %lld in dim %d: nothing to decode (every dim at least 1)", latents->rank,
                     (long long)latents->dims[k], k);
  if (dec->stride < 0 || (dec->stride && (first_dir || head_dir || latents->rank != 5)))
    return DIT_ERR(INVALID_ARGUMENT, "%s: a framewise decode (windows every %lld latent frames) takes video latents [B, C, f, h, w] and "
                   "no first chunk's or head's decoder", vae_dir, (long long)dec->stride);
  if (dec->last_dir && !dec->stride)
    return DIT_ERR(INVALID_ARGUMENT, "%s: a last window's decoder without a window stride (the vae_decoder stage's window_stride)",
                   dec->last_dir);
  if (dec->stride) return decode_windows(dec, o, latents, frames, stats);
  if (latents->rank != 5) {
    if (first_dir || head_dir)
      return DIT_ERR(INVALID_ARGUMENT, "%s: latents of rank %d are an image's: it decodes in one graph, without a first chunk's or a head's "
                     "decoder", first_dir ? first_dir : head_dir, latents->rank);
    return decode_images(vae_dir, o, latents, frames, stats);
  }
  decoder_t first = {0}, rest = {0}, head = {0};
  dit_tensor_t stash = {0};
  chunk_source_t src = {.latents = latents};
  frames_job_t job = {.frames = frames};
  const int64_t B = latents->dims[0], f = latents->rank == 5 ? latents->dims[2] : 0;
  dit_status_t s = DIT_OK;
  if (head_dir && !first_dir) s = DIT_ERR(INVALID_ARGUMENT, "a split decoder's head (%s) needs its tail's first chunk's decoder too", head_dir);
  if (!s && head_dir) {
    /* The head takes the latents one frame at a time; its output feeds the tails. */
    s = decoder_open(head_dir, latents, "hidden", &head);
    if (!s && head.n != 1) s = DIT_ERR(FAILED_PRECONDITION, "%s: the head takes %lld latent frames per forward, expected 1", head_dir, (long long)head.n);
  }
  if (!s && head_dir) s = run_head(&head, o, latents, &stash);
  if (!s && head_dir) src = (chunk_source_t){.stash = &stash};
  const dit_tensor_t *in0 = head_dir ? &stash : latents;
  /* The tails check their input against the stash (channel-last) instead of the latents. */
  if (!s && first_dir) s = head_dir ? tail_open(first_dir, &first) : decoder_open(first_dir, latents, "sample", &first);
  /* Latent frame 0 alone needs no later chunk. */
  const int later = !first_dir || f > 1;
  if (!s && later) s = head_dir ? tail_open(vae_dir, &rest) : decoder_open(vae_dir, latents, "sample", &rest);
  if (!s && first_dir && first.n != 1)
    s = DIT_ERR(FAILED_PRECONDITION, "%s: the first chunk's decoder takes %lld latent frames, expected 1", first_dir, (long long)first.n);
  if (!s && later && (first_dir ? (f - 1) % rest.n : f != rest.n))
    s = DIT_ERR(FAILED_PRECONDITION, "%s: the VAE decoder stage takes %lld latent frames per forward, the latents have %lld%s", vae_dir,
                (long long)rest.n, (long long)f, first_dir ? ": the frames after the first do not split into chunks of that many" : " (a stage of "
                "another shape)");
  if (!s && first_dir && later) s = check_handoff(first_dir, vae_dir);
  if (!s && head_dir) s = tail_tiles(&first, &stash);
  const int64_t tiles = head_dir ? first.tile_count : 1, window = first.tile_window, halo = first.tile_halo;
  const int64_t chunks = s || !later ? 0 : first_dir ? (f - 1) / rest.n : 1;
  if (!s) {
    /* The frames' channels and height: any decoder's (the loop's latents fixed them alike); the
     * width the windows' together. */
    const int64_t *out = first_dir ? first.out_dims : rest.out_dims;
    *frames = (dit_tensor_t){NULL, DIT_F32, 5, {B, out[1], first.frames + chunks * rest.frames, out[3],
                                                 head_dir ? stash.dims[3] * (out[4] / window) : out[4]}};
  }
  if (!s) {
    frames->data = malloc((size_t)dit_tensor_numel(frames) * sizeof(float) + 1);
    const int64_t n = later ? rest.n : 1;
    src.width = head_dir ? window : 0;
    src.buf = malloc(head_dir ? (size_t)(n * stash.dims[2] * window * stash.dims[4]) * dit_dtype_size(stash.dtype)
                              : (size_t)(in0->dims[1] * n * in0->dims[3] * in0->dims[4]) * sizeof(float));
    if (!frames->data || !src.buf) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  /* The later chunks' decoder stays loaded; latent frame 0's runs in its arena and writes its
   * cache buffers (zeros before), so the caches never leave the device. */
  if (!s && later) s = decoder_load(&rest, o);
  if (!s && first_dir) {
    dit_runtime_options_t fo_opts = o ? *o : (dit_runtime_options_t){0};
    fo_opts.borrow = later ? rest.rt : NULL;
    s = decoder_load(&first, &fo_opts);
  }
  const char *input = head_dir ? "hidden" : "latents";
  const int64_t W = frames->dims[4], scale = head_dir && !s ? W / stash.dims[3] : 1; /* video columns per head column */
  for (int64_t b = 0; !s && b < B; b++)
    for (int64_t i = 0; !s && i < tiles; i++) {
      /* Window i: its columns in the head's output, the video's columns it gives. */
      int64_t x0 = 0, lo = 0, hi = W;
      if (head_dir && !dit_vae_tile_span(tiles, stash.dims[3], window, halo, i, &x0, &lo, &hi))
        s = DIT_ERR(INTERNAL, "%s: %lld windows of %lld do not cover %lld columns", vae_dir, (long long)tiles, (long long)window,
                    (long long)stash.dims[3]);
      src.x0 = x0;
      x0 *= scale, lo *= scale, hi *= scale;
      int64_t t = 0, fo = 0;
      dit_tensor_t in;
      if (!s && later) s = zero_caches(&rest);
      if (!s && first_dir) {
        s = zero_caches(&first);
        gather_chunk(&src, b, 0, 1, &in);
        if (!s) s = decode_chunk(&first, input, &in, b, &job, 0, x0, lo, hi);
        frames_join(&job); /* its frames are out of first's host copy before the later chunks' */
        t = 1, fo = first.frames;
      }
      for (int64_t k = 0; !s && k < chunks; k++, t += rest.n, fo += rest.frames) {
        const double t0 = dit_now_s();
        if (k) s = carry_caches(&rest); /* the first chunk's caches are zeros or latent frame 0's, in place */
        rest.carry_s += dit_now_s() - t0;
        gather_chunk(&src, b, t, rest.n, &in);
        if (!s) s = decode_chunk(&rest, input, &in, b, &job, fo, x0, lo, hi);
      }
    }
  frames_join(&job);
  if (s) {
    free(frames->data);
    memset(frames, 0, sizeof *frames);
  }
  free(src.buf);
  free(stash.data);
  if (stats) {
    const uint64_t tails = first.alloc + rest.alloc; /* both loaded at once; the head before them */
    *stats = (gen_decode_stats_t){head.load_s + first.load_s + rest.load_s, head.run_s + first.run_s + rest.run_s,
                                  head.carry_s + first.carry_s + rest.carry_s, head.out_s + first.out_s + rest.out_s, job.seconds,
                                  head.alloc > tails ? head.alloc : tails};
  }
  decoder_unload(&first);
  decoder_unload(&rest);
  decoder_unload(&head);
  return s;
}

/* ---- image-to-video: the VAE encoder of --image ---- */

/* An encoder bundle at dir: input 'video' [1, 3, n, H, W], output 'latents' [1, C, k, h, w]. */
static dit_status_t encoder_open(const char *dir, decoder_t *d) {
  DIT_RETURN_IF(stage_open(dir, "video", "latents", d));
  if (d->in_rank != 5 || d->out_rank != 5 || d->in_dims[0] != 1 || d->in_dims[1] != 3 || d->out_dims[0] != 1)
    return DIT_ERR(FAILED_PRECONDITION, "%s: not a VAE encoder stage: expected input 'video' [1, 3, F, H, W] and output 'latents' [1, C, f, h, w]",
                   dir);
  return stage_frames(d, d->in_dims[2]);
}

dit_status_t gen_encode_video(const char *enc_dir, const char *first_dir, const dit_runtime_options_t *o, int64_t frames,
                              const float *frame0, dit_tensor_t *latents, double *load_s) {
  memset(latents, 0, sizeof *latents);
  decoder_t first = {0}, rest = {0};
  dit_status_t s = encoder_open(enc_dir, &rest);
  if (!s && first_dir) s = encoder_open(first_dir, &first);
  if (!s && first_dir && (first.n != 1 || first.frames != 1 || memcmp(first.in_dims + 3, rest.in_dims + 3, 2 * sizeof first.in_dims[0])))
    s = DIT_ERR(FAILED_PRECONDITION, "%s: frame 0's encoder takes [%lld, %lld, %lld] frames, expected one of %s's size", first_dir,
                (long long)first.n, (long long)first.in_dims[3], (long long)first.in_dims[4], enc_dir);
  if (!s && first_dir) s = check_handoff(first_dir, enc_dir);
  const int64_t chunks = s ? 0 : first_dir ? (frames - 1) / rest.n : 1;
  if (!s && (first_dir ? (frames - 1) % rest.n : frames != rest.n))
    s = DIT_ERR(FAILED_PRECONDITION, "%s: the VAE encoder stage takes %lld frames per forward, the video has %lld%s", enc_dir,
                (long long)rest.n, (long long)frames, first_dir ? " (after frame 0)" : "");
  const int64_t H = rest.in_dims[3], W = rest.in_dims[4], hw = H * W;
  float *zeros = s ? NULL : calloc((size_t)(3 * rest.n * hw), sizeof *zeros);
  if (!s) {
    *latents = (dit_tensor_t){NULL, DIT_F32, 5, {1, rest.out_dims[1], (first_dir ? 1 : 0) + chunks * rest.frames, rest.out_dims[3], rest.out_dims[4]}};
    latents->data = malloc((size_t)dit_tensor_numel(latents) * sizeof(float));
    if (!zeros || !latents->data) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!s) s = decoder_load(&rest, o);
  if (!s && first_dir) {
    dit_runtime_options_t fo = o ? *o : (dit_runtime_options_t){0};
    fo.borrow = rest.rt;
    s = decoder_load(&first, &fo);
  }
  if (!s) s = zero_caches(&rest);
  if (!s && first_dir) s = zero_caches(&first);
  /* Frame 0 is the image, every later frame zeros (the pipeline's video_condition); one chunk a
   * forward, each chunk's latent frames stored at their place (channel-first). */
  const int64_t C = latents->dims[1], f = latents->dims[2], lhw = latents->dims[3] * latents->dims[4];
  for (int64_t k = first_dir ? -1 : 0, lf = 0; !s && k < chunks; k++) {
    decoder_t *d = k < 0 ? &first : &rest;
    dit_tensor_t in = {zeros, DIT_F32, 5, {1, 3, d->n, H, W}}, y;
    const int lead = k == (first_dir ? -1 : 0); /* frame 0 leads the first forward */
    if (lead)
      for (int c = 0; c < 3; c++) memcpy(zeros + (size_t)(c * d->n * hw), frame0 + (size_t)(c * hw), (size_t)hw * sizeof *zeros);
    if (k > 0) s = carry_caches(d);
    const double t0 = dit_now_s();
    if (!s) s = dit_runtime_set_input(d->rt, "video", &in);
    if (!s) s = dit_runtime_forward(d->rt);
    if (!s) s = dit_runtime_output(d->rt, "latents", &y);
    d->run_s += dit_now_s() - t0;
    if (lead)
      for (int c = 0; c < 3; c++) memset(zeros + (size_t)(c * d->n * hw), 0, (size_t)hw * sizeof *zeros);
    if (!s && (y.rank != 5 || y.dims[1] != C || y.dims[2] != d->frames || y.dims[3] * y.dims[4] != lhw))
      s = DIT_ERR(INTERNAL, "%s: output 'latents' of rank %d, not the manifest's", d->dir, y.rank);
    for (int64_t c = 0; !s && c < C; c++)
      if (dit_convert((float *)latents->data + (size_t)((c * f + lf) * lhw), DIT_F32, (const char *)y.data + (size_t)(c * d->frames * lhw) * dit_dtype_size(y.dtype),
                      y.dtype, (size_t)(d->frames * lhw)))
        s = DIT_ERR(INVALID_ARGUMENT, "%s: output 'latents' is %s, not a float tensor", d->dir, dit_dtype_name(y.dtype));
    lf += d->frames;
  }
  if (load_s) *load_s = first.load_s + rest.load_s;
  decoder_unload(&first);
  decoder_unload(&rest);
  free(zeros);
  if (s) {
    free(latents->data);
    memset(latents, 0, sizeof *latents);
  }
  return s;
}

/* The image processor configuration the image encoder's bundle at dir carries, parsed. */
static dit_status_t bundle_image_processor(const char *dir, dit_image_processor_t *p) {
  dit_bundle_t *b = NULL;
  DIT_RETURN_IF(dit_bundle_open(dir, 0, &b));
  const dit_manifest_t *m = dit_bundle_manifest(b);
  dit_status_t s = DIT_ERR(FAILED_PRECONDITION, "%s: the image encoder's bundle carries no %s (compiled on its own, not as a "
                           "pipeline's stage)", dir, DIT_IMAGE_PROCESSOR_FILE);
  for (size_t i = 0; i < m->n_blobs; i++) {
    if (strcmp(m->blobs[i].role, "image_processor") || strcmp(m->blobs[i].name, DIT_IMAGE_PROCESSOR_FILE)) continue;
    dit_status_free(s);
    dit_mapping_t map;
    char what[4200];
    snprintf(what, sizeof what, "%s: %s", dir, DIT_IMAGE_PROCESSOR_FILE);
    s = dit_bundle_map_blob(b, m->blobs[i].hash, &map);
    if (!s) {
      s = dit_image_processor_parse((const char *)map.data, map.size, what, p);
      dit_file_unmap(&map);
    }
    break;
  }
  dit_bundle_close(b);
  return s;
}

/* The image's pixels as the pipeline's float frame [3, H, W]: x / 255 * 2 - 1 in fp32 (the VAE
 * processor's pil_to_numpy and normalize). */
static void frame_of(const dit_image_t *im, float *out) {
  const size_t hw = (size_t)im->width * (size_t)im->height;
  for (size_t p = 0; p < hw; p++)
    for (int c = 0; c < 3; c++) {
      const float v = (float)im->rgb[p * 3 + c] / 255.0f;
      out[(size_t)c * hw + p] = 2.0f * v - 1.0f;
    }
}

/* The image through the processor p into pixel_values [3, S, S] (data malloc'ed): resize, crop,
 * rescale, normalize as CLIPImageProcessor (its PIL backend), to the stage's size h x w. */
static dit_status_t process_image(const dit_image_t *im, const dit_image_processor_t *p, int64_t h, int64_t w, const char *dir,
                                  float **out) {
  dit_image_t a = {0}, c = {0};
  const dit_image_t *x = im;
  dit_status_t s = DIT_OK;
  if (p->do_resize) {
    int rw = p->resize_w, rh = p->resize_h;
    if (p->shortest_edge) dit_image_shortest_edge_size(im->width, im->height, p->shortest_edge, &rw, &rh);
    s = dit_image_resize(im, rw, rh, p->resample == 1 ? DIT_RESAMPLE_LANCZOS : DIT_RESAMPLE_BICUBIC, &a);
    x = &a;
  }
  if (!s && p->do_center_crop) {
    s = dit_image_center_crop(x, p->crop_w, p->crop_h, &c);
    x = &c;
  }
  if (!s && (x->height != h || x->width != w))
    s = DIT_ERR(FAILED_PRECONDITION, "%s: the image processor makes %d x %d pixels, the image encoder takes %lld x %lld", dir, x->width,
                x->height, (long long)w, (long long)h);
  float *v = s ? NULL : malloc((size_t)(3 * h * w) * sizeof *v);
  if (!s && !v) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  for (int64_t i = 0; !s && i < h * w; i++)
    for (int k = 0; k < 3; k++) {
      double y = (double)x->rgb[i * 3 + k];
      if (p->do_rescale) y = (double)(float)(y * p->rescale_factor);
      if (p->do_normalize) y = ((double)(float)y - (double)(float)p->mean[k]) / (double)(float)p->std[k];
      v[k * h * w + i] = (float)y;
    }
  dit_image_free(&a);
  dit_image_free(&c);
  if (s) free(v);
  else *out = v;
  return s;
}

dit_status_t gen_encode_image(const char *bundle_dir, const dit_manifest_t *m, const dit_runtime_options_t *o, const dit_image_t *im,
                              dit_tensor_t *latents, dit_tensor_t *embeds) {
  memset(latents, 0, sizeof *latents);
  memset(embeds, 0, sizeof *embeds);
  const char *enc = NULL, *first = NULL, *ie = NULL;
  /* A text-to-video transformer: as many channels in as out, one timestep per item. */
  const dit_manifest_io_t *hs = find_io(m->io_inputs, m->n_inputs, "hidden_states"), *ts = find_io(m->io_inputs, m->n_inputs, "timestep");
  const dit_manifest_io_t *out = find_io(m->io_outputs, m->n_outputs, "sample");
  if (!dit_manifest_find_stage(m, "vae_encoder") && hs && ts && out && hs->rank > 1 && out->rank > 1 && hs->dims[1] == out->dims[1] &&
      ts->rank == 1)
    return DIT_ERR(INVALID_ARGUMENT, "--image: bundle %s is text-to-video: its transformer (%s) takes no image condition", m->identity,
                   m->model_class);
  DIT_RETURN_IF(gen_stage_dir(bundle_dir, m, "vae_encoder", "--image", &enc));
  if (dit_manifest_find_stage(m, "vae_encoder_first")) DIT_RETURN_IF(gen_stage_dir(bundle_dir, m, "vae_encoder_first", "--image", &first));
  if (dit_manifest_find_stage(m, "image_encoder")) DIT_RETURN_IF(gen_stage_dir(bundle_dir, m, "image_encoder", "--image", &ie));
  const double t0 = dit_now_s();
  /* The video's frame 0: the image resized to the encoder's frames with PIL's LANCZOS, as the
   * pipeline's video processor. */
  decoder_t d;
  DIT_RETURN_IF(encoder_open(enc, &d));
  const int64_t H = d.in_dims[3], W = d.in_dims[4];
  dit_image_t sized = {0};
  DIT_RETURN_IF_ERROR(dit_image_resize(im, (int)W, (int)H, DIT_RESAMPLE_LANCZOS, &sized), "--image");
  float *frame0 = malloc((size_t)(3 * H * W) * sizeof *frame0);
  dit_status_t s = frame0 ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  if (!s) frame_of(&sized, frame0);
  dit_image_free(&sized);
  double load = 0;
  if (!s) s = gen_encode_video(enc, first, o, first ? m->shape.frames : d.n, frame0, latents, &load);
  free(frame0);
  if (s) return dit_status_annotate(s, "--image: the VAE encoder stage");
  const double t1 = dit_now_s();
  if (ie) {
    /* The image encoder's embeddings of the image as given (the pipeline's encode_image). */
    dit_image_processor_t p;
    decoder_t e;
    float *px = NULL;
    dit_runtime_t *rt = NULL;
    dit_tensor_t y = {0};
    s = bundle_image_processor(ie, &p);
    if (!s) s = stage_open(ie, "pixel_values", "hidden_states_penultimate", &e);
    if (!s && (e.in_rank != 4 || e.in_dims[0] != 1 || e.in_dims[1] != 3 || e.out_rank != 3))
      s = DIT_ERR(FAILED_PRECONDITION, "%s: not an image encoder stage: expected input 'pixel_values' [1, 3, S, S] and output "
                  "'hidden_states_penultimate' [1, n, D]", ie);
    if (!s) s = process_image(im, &p, e.in_dims[2], e.in_dims[3], ie, &px);
    if (!s) s = dit_runtime_load(ie, o, &rt);
    dit_tensor_t in = {px, DIT_F32, 4, {1, 3, e.in_dims[2], e.in_dims[3]}};
    if (!s) s = dit_runtime_set_input(rt, "pixel_values", &in);
    if (!s) s = dit_runtime_forward(rt);
    if (!s) s = dit_runtime_output(rt, "hidden_states_penultimate", &y);
    if (!s) {
      *embeds = (dit_tensor_t){malloc((size_t)dit_tensor_numel(&y) * sizeof(float) + 1), DIT_F32, 3, {1, y.dims[1], y.dims[2]}};
      if (!embeds->data) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
      else if (dit_convert(embeds->data, DIT_F32, y.data, y.dtype, (size_t)dit_tensor_numel(&y)))
        s = DIT_ERR(INVALID_ARGUMENT, "%s: output 'hidden_states_penultimate' is %s, not a float tensor", ie, dit_dtype_name(y.dtype));
    }
    dit_runtime_destroy(rt);
    free(px);
    if (s) {
      free(latents->data);
      free(embeds->data);
      memset(latents, 0, sizeof *latents);
      memset(embeds, 0, sizeof *embeds);
      return dit_status_annotate(s, "--image: the image encoder stage");
    }
  }
  fprintf(stderr, "ditrun: image encode %.2f s (VAE encoder %.2f s, %.2f s of it loading; image encoder %.2f s)\n", dit_now_s() - t0,
          t1 - t0, load, ie ? dit_now_s() - t1 : 0.0);
  return DIT_OK;
}

/* ---- the preview's latent-to-RGB map, fitted on the VAE decoder stage ---- */

/* Solves the n x n system a x = b (row-major, overwritten) by Gaussian elimination with partial
 * pivoting; 0 when it is singular. */
static int solve(double *a, double *b, int n) {
  for (int k = 0; k < n; k++) {
    int p = k;
    for (int i = k + 1; i < n; i++)
      if (fabs(a[i * n + k]) > fabs(a[p * n + k])) p = i;
    if (!(fabs(a[p * n + k]) > 1e-12)) return 0;
    for (int j = 0; j < n && p != k; j++) {
      const double t = a[k * n + j];
      a[k * n + j] = a[p * n + j], a[p * n + j] = t;
    }
    const double t = b[k];
    b[k] = b[p], b[p] = t;
    for (int i = k + 1; i < n; i++) {
      const double f = a[i * n + k] / a[k * n + k];
      for (int j = k; j < n; j++) a[i * n + j] -= f * a[k * n + j];
      b[i] -= f * b[k];
    }
  }
  for (int k = n - 1; k >= 0; k--) {
    double s = b[k];
    for (int j = k + 1; j < n; j++) s -= a[k * n + j] * b[j];
    b[k] = s / a[k * n + k];
  }
  return 1;
}

/* One fitted map per VAE decoder stage, for the process (the server previews many jobs). */
static struct {
  char identity[DIT_HASH_HEX];
  dit_preview_map_t map;
  float *matrix;
  int failed;
} g_fitted[4];
static pthread_mutex_t g_fit_lock = PTHREAD_MUTEX_INITIALIZER;

/* Fits rgb = M z + bias by least squares: z the C channels of a latent pixel of frame 0, rgb the
 * mean of the pixels it decodes to in frame 0, over `draws` decodes of standard normal latents
 * (the transformer's output space) with the stage itself. */
static dit_status_t fit_map(const gen_decoders_t *dec, const dit_runtime_options_t *o, int64_t C, int64_t f, int64_t h, int64_t w,
                            dit_preview_map_t *map, float **matrix) {
  const int n = (int)C + 1;
  const int64_t per = h * w, draws = (4 * n + per - 1) / per < 64 ? (4 * n + per - 1) / per : 64;
  double *ata = calloc((size_t)(n * n), sizeof *ata), *atb = calloc((size_t)(3 * n), sizeof *atb);
  double *z = malloc((size_t)n * sizeof *z);
  dit_tensor_t lat = {malloc((size_t)(C * f * per) * sizeof(float)), DIT_F32, 5, {1, C, f, h, w}};
  dit_status_t s = ata && atb && z && lat.data ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  int up = 0;
  for (int64_t d = 0; !s && d < draws; d++) {
    dit_rng_normal(0x5eed + (uint64_t)d, 0, lat.data, (size_t)(C * f * per));
    dit_tensor_t fr = {0};
    s = gen_decode_latents(dec, o, &lat, &fr, NULL);
    const int64_t H = s ? 0 : fr.dims[3], W = s ? 0 : fr.dims[4], F = s ? 0 : fr.dims[2];
    if (!s && (fr.dims[1] != 3 || H % h || W % w || H / h != W / w))
      s = DIT_ERR(FAILED_PRECONDITION, "the VAE decoder gives [%lld, %lld, %lld, %lld] frames of latents %lld x %lld: no preview map",
                  (long long)fr.dims[1], (long long)F, (long long)H, (long long)W, (long long)h, (long long)w);
    up = s ? 0 : (int)(H / h);
    for (int64_t p = 0; !s && p < per; p++) {
      const int64_t y = p / w, x = p % w;
      for (int c = 0; c < C; c++) z[c] = ((const float *)lat.data)[(size_t)(c * f) * (size_t)per + (size_t)p]; /* frame 0 */
      z[C] = 1.0;
      double rgb[3] = {0, 0, 0};
      for (int k = 0; k < 3; k++) {
        for (int dy = 0; dy < up; dy++)
          for (int dx = 0; dx < up; dx++) rgb[k] += ((const float *)fr.data)[((size_t)k * (size_t)F * (size_t)H + (size_t)(y * up + dy)) * (size_t)W + (size_t)(x * up + dx)];
        rgb[k] /= (double)(up * up);
      }
      for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) ata[i * n + j] += z[i] * z[j];
        for (int k = 0; k < 3; k++) atb[k * n + i] += z[i] * rgb[k];
      }
    }
    free(fr.data);
  }
  float *m = s ? NULL : malloc((size_t)(3 * C) * sizeof *m);
  if (!s && !m) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  double *a = s ? NULL : malloc((size_t)(n * n) * sizeof *a);
  for (int k = 0; !s && k < 3; k++) {
    memcpy(a, ata, (size_t)(n * n) * sizeof *a);
    if (!solve(a, atb + k * n, n)) s = DIT_ERR(FAILED_PRECONDITION, "the VAE decoder's response to its latents is singular: no preview map");
    for (int c = 0; !s && c < C; c++) m[k * C + c] = (float)atb[k * n + c];
    if (!s) map->bias[k] = (float)atb[k * n + C];
  }
  if (!s) {
    map->channels = (int)C, map->matrix = m, map->upsample = up;
    *matrix = m;
  } else {
    free(m);
  }
  free(a);
  free(ata);
  free(atb);
  free(z);
  free(lat.data);
  return s;
}

const dit_preview_map_t *gen_preview_map(const char *bundle_dir, const dit_manifest_t *m, const dit_runtime_options_t *o) {
  const dit_manifest_stage_t *st = dit_manifest_find_stage(m, "vae_decoder");
  if (!st) return NULL;
  pthread_mutex_lock(&g_fit_lock);
  const dit_preview_map_t *out = NULL;
  int slot = -1;
  for (int i = 0; i < 4 && !out; i++)
    if (!strcmp(g_fitted[i].identity, st->identity)) slot = i, out = g_fitted[i].failed ? NULL : &g_fitted[i].map;
  if (slot < 0) {
    slot = 0; /* the first free slot, else the last one's map replaced */
    while (slot < 3 && g_fitted[slot].identity[0]) slot++;
    free(g_fitted[slot].matrix);
    memset(&g_fitted[slot], 0, sizeof g_fitted[slot]);
    snprintf(g_fitted[slot].identity, sizeof g_fitted[slot].identity, "%s", st->identity);
    gen_decoders_t dec;
    const double t0 = dit_now_s();
    dit_status_t s = gen_decoder_stages(bundle_dir, m, "--preview", &dec);
    const char *vae = dec.vae_dir, *first = dec.first_dir, *head = dec.head_dir;
    /* The latents one forward takes: latent frame 0 alone when the first has a decoder of its own;
     * a framewise decoder's window decoded as a whole video. */
    dec.last_dir = NULL, dec.stride = 0;
    dit_bundle_t *b = NULL;
    if (!s) s = dit_bundle_open(first ? first : head ? head : vae, 0, &b);
    const dit_manifest_t *vm = b ? dit_bundle_manifest(b) : NULL;
    const dit_manifest_io_t *in = vm ? find_io(vm->io_inputs, vm->n_inputs, "latents") : NULL;
    int64_t dims[5] = {0};
    if (in && in->rank == 5) memcpy(dims, in->dims, sizeof dims);
    dit_bundle_close(b);
    if (!s && !dims[1])
      s = DIT_ERR(FAILED_PRECONDITION, "%s: the VAE decoder stage takes no [1, C, f, h, w] latents: no preview map", vae);
    if (!s) s = fit_map(&dec, o, dims[1], first ? 1 : dims[2], dims[3], dims[4], &g_fitted[slot].map, &g_fitted[slot].matrix);
    if (s) {
      fprintf(stderr, "ditrun: note: --preview: %s; previews show latent channels 0-2\n", dit_status_message(s));
      dit_status_free(s);
      g_fitted[slot].failed = 1;
    } else {
      out = &g_fitted[slot].map;
      fprintf(stderr, "ditrun: preview map fitted on the VAE decoder stage in %.2f s (%lld channels to RGB)\n", dit_now_s() - t0,
              (long long)dims[1]);
    }
  }
  pthread_mutex_unlock(&g_fit_lock);
  return out;
}
