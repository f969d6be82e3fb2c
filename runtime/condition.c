/* Each denoising step's transformer inputs from the latents and the timestep, as diffusers'
 * WanPipeline and WanImageToVideoPipeline build them after prepare_latents: text-to-video,
 * image-to-video by channel concatenation (Wan2.1-I2V, Wan2.2-I2V-A14B) and the per-token
 * timestep loops of Wan2.2-TI2V (expand_timesteps), with and without an image. */
#include "runtime/condition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dit_condition {
  dit_condition_kind_t kind;
  int rank;
  int64_t dims[DIT_MAX_RANK]; /* the latents: [B, C, F, h, w] */
  int64_t in_channels;        /* hidden_states' channels */
  size_t n;                   /* elements of the latents */
  float *hidden;              /* [B, in_channels, F, h, w]; NULL where the latents go as they are */
  dit_tensor_t timestep;      /* owns its data */
  dit_tensor_t image;         /* owns its data, or data NULL */
  float *cond;                /* per-token image-to-video: the image latents [B, C, 1, h, w] */
};

static const dit_manifest_io_t *find_io(const dit_manifest_io_t *io, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(io[i].name, name)) return &io[i];
  return NULL;
}

static const char *dims_str(int rank, const int64_t *dims, char buf[160]) {
  size_t k = 0;
  k += (size_t)snprintf(buf + k, 160 - k, "[");
  for (int i = 0; i < rank && k < 150; i++) k += (size_t)snprintf(buf + k, 160 - k, "%s%lld", i ? ", " : "", (long long)dims[i]);
  snprintf(buf + k, 160 - k, "]");
  return buf;
}

dit_status_t dit_condition_latents_shape(const dit_manifest_t *m, int *out_rank, int64_t out_dims[DIT_MAX_RANK]) {
  const dit_manifest_io_t *hs = find_io(m->io_inputs, m->n_inputs, "hidden_states");
  if (!hs) return DIT_ERR(NOT_FOUND, "manifest.json: the bundle has no 'hidden_states' input");
  for (size_t i = 0; i < m->n_inputs; i++) {
    const char *nm = m->io_inputs[i].name;
    if (strcmp(nm, "hidden_states") && strcmp(nm, "timestep") && strcmp(nm, "encoder_hidden_states") &&
        strcmp(nm, "encoder_hidden_states_image"))
      return DIT_ERR(UNIMPLEMENTED, "manifest.json: field 'io.inputs[%zu].name' = \"%s\": generate supplies hidden_states, timestep, "
                     "encoder_hidden_states and encoder_hidden_states_image only", i, nm);
  }
  const dit_manifest_io_t *ts = find_io(m->io_inputs, m->n_inputs, "timestep");
  if (!ts || ts->rank < 1 || ts->rank > 2 || ts->dims[0] != hs->dims[0])
    return DIT_ERR(UNIMPLEMENTED, "manifest.json: the 'timestep' input is %s; generate feeds [batch] or [batch, tokens] with batch %lld",
                   ts ? "of another shape" : "missing", (long long)hs->dims[0]);
  const dit_manifest_io_t *out = find_io(m->io_outputs, m->n_outputs, "sample");
  if (!out) return DIT_ERR(NOT_FOUND, "manifest.json: the bundle has no 'sample' output");
  char a[160], b[160];
  int same = out->rank == hs->rank && hs->rank >= 2;
  for (int i = 0; same && i < hs->rank; i++) same = i == 1 || out->dims[i] == hs->dims[i];
  if (!same)
    return DIT_ERR(UNIMPLEMENTED, "manifest.json: output 'sample' %s and input 'hidden_states' %s differ in more than the channels",
                   dims_str(out->rank, out->dims, a), dims_str(hs->rank, hs->dims, b));
  if (out->dims[1] != hs->dims[1]) {
    /* WanImageToVideoPipeline's concatenation: latents, one mask channel per frame the VAE
     * folds into a latent frame, the image latents. */
    if (hs->rank != 5 || hs->dims[1] - 2 * out->dims[1] < 1)
      return DIT_ERR(UNIMPLEMENTED, "manifest.json: input 'hidden_states' %s with output 'sample' %s: expected 5 dimensions and "
                     "more than 2 x %lld input channels (latents, mask, image latents)", dims_str(hs->rank, hs->dims, b),
                     dims_str(out->rank, out->dims, a), (long long)out->dims[1]);
    if (ts->rank != 1)
      return DIT_ERR(UNIMPLEMENTED, "manifest.json: input 'timestep' [batch, tokens] with concatenated image latents: no pipeline "
                     "runs per-token timesteps on a concatenation");
  }
  if (ts->rank == 2 && (hs->rank != 5 || hs->dims[2] < 1 || ts->dims[1] % hs->dims[2]))
    return DIT_ERR(UNIMPLEMENTED, "manifest.json: input 'timestep' %s: its %lld tokens do not split over the %lld latent frames of "
                   "'hidden_states' %s", dims_str(ts->rank, ts->dims, a), (long long)ts->dims[1],
                   hs->rank == 5 ? (long long)hs->dims[2] : -1LL, dims_str(hs->rank, hs->dims, b));
  *out_rank = hs->rank;
  memcpy(out_dims, hs->dims, sizeof(int64_t) * DIT_MAX_RANK);
  out_dims[1] = out->dims[1];
  return DIT_OK;
}

void dit_condition_first_frame_mask(int64_t temporal, int64_t frames, int64_t h, int64_t w, float *out) {
  /* mask_lat_size over (frames - 1) * temporal + 1 video frames: 1 on frame 0 only; frame 0
   * repeated `temporal` times makes frames * temporal entries, entry k of which is item
   * [f = k / temporal, c = k % temporal] after the view and the transpose. */
  for (int64_t c = 0; c < temporal; c++)
    for (int64_t f = 0; f < frames; f++) {
      int64_t k = f * temporal + c;
      int64_t video_frame = k < temporal ? 0 : k - temporal + 1;
      float v = video_frame == 0 ? 1.0f : 0.0f;
      float *dst = out + (c * frames + f) * h * w;
      for (int64_t i = 0; i < h * w; i++) dst[i] = v;
    }
}

void dit_condition_blend_first_frame(int64_t channels, int64_t frames, int64_t hw, const float *condition,
                                     const float *latents, float *out) {
  for (int64_t c = 0; c < channels; c++)
    for (int64_t f = 0; f < frames; f++) {
      const float m = f == 0 ? 0.0f : 1.0f;
      const float *x = latents + (c * frames + f) * hw, *y = condition + c * hw;
      float *o = out + (c * frames + f) * hw;
      for (int64_t i = 0; i < hw; i++) o[i] = (1.0f - m) * y[i] + m * x[i];
    }
}

/* Copies `t` (batch 1 or `batch`) into fp32 `dst` of `batch` items, after checking it against
 * want (dims[0] = batch; -1 elsewhere: any). */
static dit_status_t take(const dit_tensor_t *t, const char *what, const char *tensor, const char *field, int rank,
                         const int64_t *want, float *dst) {
  char a[160], b[160];
  int ok = t->rank == rank && (t->dims[0] == 1 || t->dims[0] == want[0]);
  for (int i = 1; ok && i < rank; i++) ok = t->dims[i] == want[i];
  if (!ok) {
    char batches[48] = "batch 1";
    if (want[0] != 1) snprintf(batches, sizeof batches, "batch 1 or %lld", (long long)want[0]);
    return DIT_ERR(INVALID_ARGUMENT, "%s: tensor '%s' has shape %s, expected %s (%s; %s)", what, tensor,
                   dims_str(t->rank, t->dims, a), dims_str(rank, want, b), field, batches);
  }
  if (t->dtype != DIT_F32 && t->dtype != DIT_F16 && t->dtype != DIT_BF16)
    return DIT_ERR(INVALID_ARGUMENT, "%s: tensor '%s' has dtype %s, expected a float dtype (f32, f16, bf16)", what, tensor,
                   dit_dtype_name(t->dtype));
  size_t item = 1;
  for (int i = 1; i < rank; i++) item *= (size_t)want[i];
  for (int64_t bi = 0; bi < want[0]; bi++) {
    const char *src = (const char *)t->data + (t->dims[0] == 1 ? 0 : (size_t)bi * item * dit_dtype_size(t->dtype));
    if (dit_convert(dst + (size_t)bi * item, DIT_F32, src, t->dtype, item))
      return DIT_ERR(INVALID_ARGUMENT, "%s: tensor '%s' (dtype %s) does not convert to F32", what, tensor, dit_dtype_name(t->dtype));
  }
  return DIT_OK;
}

static dit_status_t build(dit_condition_t *c, const dit_manifest_t *m, const dit_condition_inputs_t *in) {
  DIT_RETURN_IF(dit_condition_latents_shape(m, &c->rank, c->dims));
  const dit_manifest_io_t *hs = find_io(m->io_inputs, m->n_inputs, "hidden_states");
  const dit_manifest_io_t *ts = find_io(m->io_inputs, m->n_inputs, "timestep");
  const dit_manifest_io_t *ie = find_io(m->io_inputs, m->n_inputs, "encoder_hidden_states_image");
  dit_tensor_t lat = {NULL, DIT_F32, c->rank, {0}};
  memcpy(lat.dims, c->dims, sizeof lat.dims);
  c->n = (size_t)dit_tensor_numel(&lat);
  c->in_channels = hs->dims[1];
  const int64_t B = c->dims[0], C = c->dims[1];
  const int image = in->image_latents.data != NULL;
  const char *il_what = in->image_latents_what ? in->image_latents_what : "image latents";
  char a[160];
  if (c->in_channels != C) c->kind = DIT_CONDITION_CONCAT;
  else if (ts->rank == 2) c->kind = image ? DIT_CONDITION_TOKEN_IMAGE : DIT_CONDITION_TOKEN_TEXT;
  else c->kind = DIT_CONDITION_TEXT;

  if (c->kind == DIT_CONDITION_TEXT && image)
    return DIT_ERR(INVALID_ARGUMENT, "%s: the bundle is text-to-video (input 'hidden_states' %s has the %lld channels of its output "
                   "'sample', and 'timestep' one value per item): it takes no image latents", il_what,
                   dims_str(hs->rank, hs->dims, a), (long long)C);
  if (c->kind == DIT_CONDITION_CONCAT && !image) {
    int64_t want[5] = {B, C, c->dims[2], c->dims[3], c->dims[4]};
    char w[160];
    return DIT_ERR(INVALID_ARGUMENT, "the bundle is image-to-video (input 'hidden_states' has %lld channels = %lld latent + %lld mask "
                   "+ %lld image-latent channels): generate needs --image-latents with a tensor 'image_latents' %s",
                   (long long)c->in_channels, (long long)C, (long long)(c->in_channels - 2 * C), (long long)C,
                   dims_str(5, want, w));
  }
  if (ie && !in->image_embeds.data)
    return DIT_ERR(INVALID_ARGUMENT, "the bundle takes image embeddings (input 'encoder_hidden_states_image' %s): generate needs "
                   "--image-embeds with a tensor 'image_embeds' of that shape (batch 1 or %lld)",
                   dims_str(ie->rank, ie->dims, a), (long long)ie->dims[0]);
  if (!ie && in->image_embeds.data)
    return DIT_ERR(INVALID_ARGUMENT, "%s: the bundle has no 'encoder_hidden_states_image' input (it was compiled without image "
                   "tokens): it takes no image embeddings", in->image_embeds_what ? in->image_embeds_what : "image embeddings");

  /* The timestep: one per item, or one per token (frame-major, as the patch embedding
   * flattens [F, h / p, w / p]). */
  c->timestep.dtype = DIT_F32;
  c->timestep.rank = ts->rank;
  memcpy(c->timestep.dims, ts->dims, sizeof ts->dims);
  c->timestep.data = malloc((size_t)dit_tensor_numel(&c->timestep) * sizeof(float));
  if (!c->timestep.data) return DIT_ERR(RESOURCE_EXHAUSTED, "generate: timestep: out of memory");

  if (ie) {
    if (ie->rank != 3)
      return DIT_ERR(UNIMPLEMENTED, "manifest.json: input 'encoder_hidden_states_image' %s: expected [batch, n_img, image_dim]",
                     dims_str(ie->rank, ie->dims, a));
    const dit_tensor_t *t = &in->image_embeds;
    const char *what = in->image_embeds_what ? in->image_embeds_what : "image embeddings";
    if (t->rank == 3 && t->dims[1] != ie->dims[1])
      return DIT_ERR(INVALID_ARGUMENT, "%s: tensor 'image_embeds' has %lld image tokens (shape %s), but the bundle was compiled for "
                     "%lld (ditc compile --image-len %lld)", what, (long long)t->dims[1], dims_str(t->rank, t->dims, a),
                     (long long)ie->dims[1], (long long)t->dims[1]);
    c->image.dtype = DIT_F32;
    c->image.rank = 3;
    memcpy(c->image.dims, ie->dims, sizeof ie->dims);
    c->image.data = malloc((size_t)dit_tensor_numel(&c->image) * sizeof(float));
    if (!c->image.data) return DIT_ERR(RESOURCE_EXHAUSTED, "generate: image embeddings: out of memory");
    DIT_RETURN_IF(take(t, what, "image_embeds", "the bundle's input 'encoder_hidden_states_image'", 3, ie->dims, c->image.data));
  }

  const int64_t F = c->dims[2], hw = c->rank == 5 ? c->dims[3] * c->dims[4] : 0;
  if (c->kind == DIT_CONDITION_CONCAT) {
    const int64_t T = c->in_channels - 2 * C;
    const size_t item_in = (size_t)(c->in_channels * F * hw), frame_block = (size_t)(F * hw);
    c->hidden = malloc((size_t)B * item_in * sizeof(float));
    float *img = malloc((size_t)B * C * frame_block * sizeof(float));
    dit_status_t s = c->hidden && img ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "generate: image latents: out of memory");
    int64_t want[5] = {B, C, F, c->dims[3], c->dims[4]};
    if (!s) s = take(&in->image_latents, il_what, "image_latents", "the latents' shape", 5, want, img);
    /* The mask and the image latents are the same every step: only the latents' channels
     * change. */
    for (int64_t b = 0; !s && b < B; b++) {
      float *item = c->hidden + (size_t)b * item_in;
      dit_condition_first_frame_mask(T, F, c->dims[3], c->dims[4], item + (size_t)C * frame_block);
      memcpy(item + (size_t)(C + T) * frame_block, img + (size_t)b * C * frame_block, (size_t)C * frame_block * sizeof(float));
    }
    free(img);
    return s;
  }
  if (c->kind == DIT_CONDITION_TOKEN_IMAGE) {
    int64_t want[5] = {B, C, 1, c->dims[3], c->dims[4]};
    c->cond = malloc((size_t)(B * C * hw) * sizeof(float));
    c->hidden = malloc(c->n * sizeof(float));
    if (!c->cond || !c->hidden) return DIT_ERR(RESOURCE_EXHAUSTED, "generate: image latents: out of memory");
    return take(&in->image_latents, il_what, "image_latents", "one latent frame", 5, want, c->cond);
  }
  return DIT_OK;
}

dit_status_t dit_condition_create(const dit_manifest_t *m, const dit_condition_inputs_t *in, dit_condition_t **out) {
  *out = NULL;
  dit_condition_t *c = calloc(1, sizeof *c);
  if (!c) return DIT_ERR(RESOURCE_EXHAUSTED, "generate: out of memory");
  static const dit_condition_inputs_t none = {{0}, NULL, {0}, NULL};
  dit_status_t s = build(c, m, in ? in : &none);
  if (s) {
    dit_condition_destroy(c);
    return s;
  }
  *out = c;
  return DIT_OK;
}

void dit_condition_destroy(dit_condition_t *c) {
  if (!c) return;
  free(c->hidden);
  free(c->timestep.data);
  free(c->image.data);
  free(c->cond);
  free(c);
}

dit_condition_kind_t dit_condition_kind(const dit_condition_t *c) { return c->kind; }

dit_status_t dit_condition_step(dit_condition_t *c, const float *latents, double t, dit_tensor_t *out_hidden,
                                dit_tensor_t *out_timestep, dit_tensor_t *out_image) {
  const int64_t B = c->dims[0], C = c->dims[1];
  const int64_t F = c->rank == 5 ? c->dims[2] : 0, hw = c->rank == 5 ? c->dims[3] * c->dims[4] : 0;
  const size_t item = c->n / (size_t)B;
  memset(out_hidden, 0, sizeof *out_hidden);
  out_hidden->dtype = DIT_F32;
  out_hidden->rank = c->rank;
  memcpy(out_hidden->dims, c->dims, sizeof c->dims);
  out_hidden->data = (void *)(uintptr_t)latents; /* read only: set_input copies it */
  if (c->kind == DIT_CONDITION_CONCAT) {
    out_hidden->dims[1] = c->in_channels;
    out_hidden->data = c->hidden;
    for (int64_t b = 0; b < B; b++)
      memcpy(c->hidden + (size_t)b * (size_t)(c->in_channels * F * hw), latents + (size_t)b * item, item * sizeof(float));
  } else if (c->kind == DIT_CONDITION_TOKEN_IMAGE) {
    out_hidden->data = c->hidden;
    for (int64_t b = 0; b < B; b++)
      dit_condition_blend_first_frame(C, F, hw, c->cond + (size_t)b * (size_t)(C * hw), latents + (size_t)b * item,
                                      c->hidden + (size_t)b * item);
  }
  /* The pipelines multiply a float32 mask by t: the first frame's tokens 0, the rest t. */
  float *tv = c->timestep.data;
  const float tf = (float)t;
  if (c->timestep.rank == 1) {
    for (int64_t b = 0; b < B; b++) tv[b] = tf;
  } else {
    const int64_t tokens = c->timestep.dims[1], per_frame = tokens / F;
    for (int64_t b = 0; b < B; b++)
      for (int64_t k = 0; k < tokens; k++)
        tv[b * tokens + k] = c->kind == DIT_CONDITION_TOKEN_IMAGE ? (k < per_frame ? 0.0f : 1.0f) * tf : tf;
  }
  *out_timestep = c->timestep;
  *out_image = c->image;
  return DIT_OK;
}

void dit_condition_finish(const dit_condition_t *c, float *latents) {
  if (c->kind != DIT_CONDITION_TOKEN_IMAGE) return;
  const int64_t B = c->dims[0], C = c->dims[1], F = c->dims[2], hw = c->dims[3] * c->dims[4];
  const size_t item = c->n / (size_t)B;
  for (int64_t b = 0; b < B; b++)
    dit_condition_blend_first_frame(C, F, hw, c->cond + (size_t)b * (size_t)(C * hw), latents + (size_t)b * item,
                                    latents + (size_t)b * item);
}
