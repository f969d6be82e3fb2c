/* FLUX.1's VAE decoder stage: AutoencoderKL's decode as diffusers defines it, compiled from a
 * pipeline's vae/ folder into one graph. The input is what the FLUX transformer gives: packed
 * latents [B, (h/2)(w/2), 4C], each token's row the (channel, row, column) of a 2x2 patch of latent
 * pixels; FluxPipeline unpacks them (_unpack_latents), de-normalizes them (latents / scaling_factor +
 * shift_factor) and decodes. Both are one linear here: the permutation that reorders a token's row to
 * (row, column, channel), its ones 1 / scaling_factor and its bias shift_factor, then the
 * unpatchify of the 2x2 patches. The decoder: conv_in, the mid block (a resnet, single-head
 * attention over all pixels after a GroupNorm, a resnet), up blocks of layers_per_block + 1 resnets
 * (GroupNorm, SiLU, 3x3 convolution, twice, plus the input through a 1x1 convolution where the
 * widths differ), each but the last followed by a nearest 2x upsampling and a 3x3 convolution, then
 * conv_norm_out, SiLU and conv_out. Activations are channel-last [B, 1, H, W, C] (a 2-D convolution
 * is conv3d over one frame); the sample is returned channel-first [B, out_channels, H, W] and not
 * clamped, as vae.decode gives it (the pipeline's image processor clamps).
 *
 * AutoencoderKLHunyuanVideo's decoder (family hunyuan_vae) is the same decoder in three dimensions,
 * built by the same code: every convolution a HunyuanVideoCausalConv3d (replicate padding, two
 * copies of the first frame in front and the edge pixels around, then a plain 3x3x3 Conv3d), the
 * mid block's attention frame-causal (every token of latent frame f attends to the tokens of frames
 * <= f: prepare_causal_attention_mask, here attention's causal_block of one frame's pixels), and
 * up block i's upsampler HunyuanVideoUpsampleCausal3D (nearest, the first frame in space alone, the
 * others in time and space, by the factors the compression ratios give block i, then the causal
 * convolution). The input is the transformer's latents [B, C, f, h, w]; HunyuanVideoPipeline
 * divides them by scaling_factor and vae.decode applies post_quant_conv (a 1x1x1 convolution) before
 * the decoder, which runs over the whole video at once (no tiling, no framewise decoding). The
 * sample [B, out_channels, 1 + (f - 1) * temporal, H, W] is not clamped (the video processor clamps). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/frontend.h"
#include "compiler/frontends/blocks.h"
#include "compiler/frontends/family.h"

#define KL_VAE_EPS 1e-6 /* every GroupNorm of the decoder (resnet_eps, conv_norm_out) */

/* ---- config ---- */

static const dit_config_field_t kKlVaeFields[] = {
    {"in_channels", DIT_CF_INT, 0, 1, 64, 0, NULL}, /* the encoder's */
    {"out_channels", DIT_CF_INT, 0, 1, 64, 0, NULL},
    {"block_out_channels", DIT_CF_INTS, 0, 1, 8192, DIT_KL_VAE_LEVELS, "[four levels, as FLUX.1's VAE]"},
    {"layers_per_block", DIT_CF_INT, 0, 1, 64, 0, NULL},
    {"act_fn", DIT_CF_STR, 0, 0, 32, 0, NULL},
    {"latent_channels", DIT_CF_INT, 0, 1, 256, 0, NULL},
    {"norm_num_groups", DIT_CF_INT, 0, 1, 8192, 0, NULL},
    {"sample_size", DIT_CF_INT, 0, 1, 1 << 20, 0, NULL}, /* tiling's; the decode here is whole */
    {"scaling_factor", DIT_CF_FLOAT, 0, -1e9, 1e9, 0, NULL},
    {"shift_factor", DIT_CF_FLOAT, 1, -1e9, 1e9, 0, NULL},
    {"latents_mean", DIT_CF_FLOATS, 1, -1e9, 1e9, 1024, NULL},
    {"latents_std", DIT_CF_FLOATS, 1, -1e9, 1e9, 1024, NULL},
    {"force_upcast", DIT_CF_BOOL, 0, 0, 0, 0, NULL}, /* a half-precision runtime's hint */
    {"use_quant_conv", DIT_CF_BOOL, 0, 0, 0, 0, NULL}, /* the encoder's output convolution */
    {"use_post_quant_conv", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
    {"mid_block_add_attention", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
};

/* FLUX.1's vae/config.json (diffusers' class defaults describe a one-level VAE; a saved config
 * states every field anyway). */
static const char kKlVaeDefaults[] =
    "{\"in_channels\":3,\"out_channels\":3,\"block_out_channels\":[128,256,512,512],\"layers_per_block\":2,\"act_fn\":\"silu\","
    "\"latent_channels\":16,\"norm_num_groups\":32,\"sample_size\":1024,\"scaling_factor\":0.3611,\"shift_factor\":0.1159,"
    "\"latents_mean\":null,\"latents_std\":null,\"force_upcast\":true,\"use_quant_conv\":false,\"use_post_quant_conv\":false,"
    "\"mid_block_add_attention\":true}";

/* Lists of class names, checked here rather than by the reader: the encoder's are not read. */
static const char *const kKlVaeBlockLists[] = {"down_block_types", "up_block_types", NULL};

/* AutoencoderKLHunyuanVideo's fields (the block lists checked as above). */
static const dit_config_field_t kHyVaeFields[] = {
    {"in_channels", DIT_CF_INT, 0, 1, 64, 0, NULL}, /* the encoder's */
    {"out_channels", DIT_CF_INT, 0, 1, 64, 0, NULL},
    {"latent_channels", DIT_CF_INT, 0, 1, 256, 0, NULL},
    {"block_out_channels", DIT_CF_INTS, 0, 1, 8192, DIT_KL_VAE_LEVELS, "[four levels, as HunyuanVideo's VAE]"},
    {"layers_per_block", DIT_CF_INT, 0, 1, 64, 0, NULL},
    {"act_fn", DIT_CF_STR, 0, 0, 32, 0, NULL},
    {"norm_num_groups", DIT_CF_INT, 0, 1, 8192, 0, NULL},
    {"scaling_factor", DIT_CF_FLOAT, 0, -1e9, 1e9, 0, NULL},
    {"spatial_compression_ratio", DIT_CF_INT, 0, 1, 1 << 10, 0, NULL},
    {"temporal_compression_ratio", DIT_CF_INT, 0, 1, 64, 0, NULL},
    {"mid_block_add_attention", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
};

/* diffusers' class defaults: HunyuanVideo's VAE. */
static const char kHyVaeDefaults[] =
    "{\"in_channels\":3,\"out_channels\":3,\"latent_channels\":16,\"block_out_channels\":[128,256,512,512],\"layers_per_block\":2,"
    "\"act_fn\":\"silu\",\"norm_num_groups\":32,\"scaling_factor\":0.476986,\"spatial_compression_ratio\":8,"
    "\"temporal_compression_ratio\":4,\"mid_block_add_attention\":true}";

/* up_block_types: one `block` per level (or absent: the defaults' four). */
static dit_status_t check_up_blocks(const dit_json_t *raw, const char *block) {
  const cJSON *u = cJSON_GetObjectItemCaseSensitive(raw->v, "up_block_types"), *e;
  if (!u) return DIT_OK;
  int n = 0, bad = !cJSON_IsArray(u);
  cJSON_ArrayForEach(e, u) {
    if (!cJSON_IsString(e) || strcmp(e->valuestring, block)) bad = 1;
    n++;
  }
  if (bad || n != DIT_KL_VAE_LEVELS)
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'up_block_types': expected %d \"%s\" (one per level of block_out_channels)", raw->what,
                   DIT_KL_VAE_LEVELS, block);
  return DIT_OK;
}

/* The fields both decoders read: the activation, the mid block's attention, the widths and groups,
 * the scaling factor. */
static dit_status_t read_decoder(dit_model_t *m, const char *what, const char *model) {
  const cJSON *cfg = m->config;
  dit_kl_vae_config_t *v = &m->kl_vae;
  const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "act_fn");
  if (strcmp(act->valuestring, "silu"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'act_fn' = \"%s\": only \"silu\" is supported (%s)", what, act->valuestring, model);
  if (!dit_config_bool(cfg, "mid_block_add_attention"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'mid_block_add_attention' = false: a mid block without attention is not supported yet "
                   "(%s has it); expected true", what, model);
  v->latent_channels = dit_config_int(cfg, "latent_channels");
  v->out_channels = dit_config_int(cfg, "out_channels");
  v->layers_per_block = dit_config_int(cfg, "layers_per_block");
  v->groups = dit_config_int(cfg, "norm_num_groups");
  v->scaling_factor = dit_config_num(cfg, "scaling_factor");
  if (!(v->scaling_factor != 0))
    return DIT_ERR(INVALID_ARGUMENT, "%s: field 'scaling_factor' = 0: the pipeline divides the latents by it", what);
  const cJSON *bo = cJSON_GetObjectItemCaseSensitive(cfg, "block_out_channels");
  for (int i = 0; i < DIT_KL_VAE_LEVELS; i++) {
    v->widths[i] = (int64_t)cJSON_GetArrayItem(bo, i)->valuedouble;
    if (v->widths[i] % v->groups)
      return DIT_ERR(INVALID_ARGUMENT, "%s: field 'norm_num_groups' = %" PRId64 " does not divide block_out_channels[%d] = %" PRId64,
                     what, v->groups, i, v->widths[i]);
  }
  return DIT_OK;
}

static dit_status_t kl_vae_parse_config(dit_model_t *m, const dit_json_t *raw) {
  DIT_RETURN_IF(dit_config_read_ignoring(kKlVaeFields, sizeof kKlVaeFields / sizeof kKlVaeFields[0], kKlVaeDefaults, "AutoencoderKL",
                                         kKlVaeBlockLists, raw, &m->config));
  DIT_RETURN_IF(check_up_blocks(raw, "UpDecoderBlock2D"));
  const cJSON *cfg = m->config;
  dit_kl_vae_config_t *v = &m->kl_vae;
  const char *what = raw->what;
  if (dit_config_bool(cfg, "use_post_quant_conv"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'use_post_quant_conv' = true: a convolution before the decoder is not supported yet "
                   "(FLUX.1's VAE has none); expected false", what);
  static const char *const stats[] = {"latents_mean", "latents_std"};
  for (int i = 0; i < 2; i++)
    if (!cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cfg, stats[i])))
      return DIT_ERR(UNIMPLEMENTED, "%s: field '%s' is set: FluxPipeline de-normalizes with scaling_factor and shift_factor alone, a "
                     "pipeline that reads per-channel statistics is not supported yet; expected null", what, stats[i]);
  DIT_RETURN_IF(read_decoder(m, what, "FLUX.1's VAE"));
  v->shift_factor = dit_config_num(cfg, "shift_factor");
  v->spatial = (int64_t)1 << (DIT_KL_VAE_LEVELS - 1);
  for (int i = 0; i < DIT_KL_VAE_LEVELS; i++) v->up_s[i] = i < DIT_KL_VAE_LEVELS - 1 ? 2 : 1, v->up_t[i] = 1;
  v->temporal = 1;
  return DIT_OK;
}

/* HunyuanVideoDecoder3D's upsamplers: with n levels, s = log2(spatial_compression_ratio) and
 * temporal_compression_ratio 4 (the only one it builds), up block i doubles the pixels when i < s
 * and the frames when n - 3 <= i < n - 1; the factors those make must be the config's (the pipeline
 * sizes the latents by the config's). */
static dit_status_t hunyuan_vae_parse_config(dit_model_t *m, const dit_json_t *raw) {
  DIT_RETURN_IF(dit_config_read_ignoring(kHyVaeFields, sizeof kHyVaeFields / sizeof kHyVaeFields[0], kHyVaeDefaults,
                                         "AutoencoderKLHunyuanVideo", kKlVaeBlockLists, raw, &m->config));
  DIT_RETURN_IF(check_up_blocks(raw, "HunyuanVideoUpBlock3D"));
  const cJSON *cfg = m->config;
  dit_kl_vae_config_t *v = &m->kl_vae;
  const char *what = raw->what;
  DIT_RETURN_IF(read_decoder(m, what, "HunyuanVideo's VAE"));
  v->causal = 1;
  const int64_t sr = dit_config_int(cfg, "spatial_compression_ratio"), tr = dit_config_int(cfg, "temporal_compression_ratio");
  if (tr != 4)
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'temporal_compression_ratio' = %" PRId64 ": HunyuanVideoDecoder3D builds 4 alone", what, tr);
  int ns = 0;
  while (((int64_t)1 << ns) < sr) ns++;
  if (((int64_t)1 << ns) != sr || ns > DIT_KL_VAE_LEVELS)
    return DIT_ERR(INVALID_ARGUMENT, "%s: field 'spatial_compression_ratio' = %" PRId64 ": expected a power of 2 up to %d (one 2x per "
                   "up block)", what, sr, 1 << DIT_KL_VAE_LEVELS);
  v->spatial = sr;
  v->temporal = 1;
  for (int i = 0; i < DIT_KL_VAE_LEVELS; i++) {
    v->up_s[i] = i < ns ? 2 : 1;
    v->up_t[i] = i >= DIT_KL_VAE_LEVELS - 3 && i < DIT_KL_VAE_LEVELS - 1 ? 2 : 1;
    v->temporal *= v->up_t[i];
  }
  return DIT_OK;
}

/* ---- the decoder's layout ---- */

/* Up block i: input and output widths (the widths reversed; the first block's input is conv_in's). */
static void up_widths(const dit_kl_vae_config_t *v, int i, int64_t *in, int64_t *out) {
  *out = v->widths[DIT_KL_VAE_LEVELS - 1 - i];
  *in = v->widths[DIT_KL_VAE_LEVELS - (i ? i : 1)];
}

/* ---- checkpoint ---- */

/* A Conv2d at prefix, or a HunyuanVideoCausalConv3d (its Conv3d at prefix.conv) for the causal decoder. */
static void expect_conv(dit_expected_t *l, int causal, int64_t out, int64_t in, int64_t k, const char *prefix) {
  const int64_t w3[5] = {out, in, k, k, k}, w2[4] = {out, in, k, k}, b[1] = {out};
  const char *sub = causal ? ".conv" : "";
  dit_expected_add(l, causal ? 5 : 4, causal ? w3 : w2, "%s%s.weight", prefix, sub);
  dit_expected_add(l, 1, b, "%s%s.bias", prefix, sub);
}

static void expect_norm(dit_expected_t *l, int64_t c, const char *prefix) {
  const int64_t d[1] = {c};
  dit_expected_add(l, 1, d, "%s.weight", prefix);
  dit_expected_add(l, 1, d, "%s.bias", prefix);
}

static void expect_resnet(dit_expected_t *l, int causal, int64_t in, int64_t out, const char *prefix) {
  char k[160];
  snprintf(k, sizeof k, "%s.norm1", prefix);
  expect_norm(l, in, k);
  snprintf(k, sizeof k, "%s.conv1", prefix);
  expect_conv(l, causal, out, in, 3, k);
  snprintf(k, sizeof k, "%s.norm2", prefix);
  expect_norm(l, out, k);
  snprintf(k, sizeof k, "%s.conv2", prefix);
  expect_conv(l, causal, out, out, 3, k);
  snprintf(k, sizeof k, "%s.conv_shortcut", prefix);
  if (in != out) expect_conv(l, causal, out, in, 1, k);
}

static void kl_vae_expected(const dit_model_t *m, dit_expected_t *l) {
  const dit_kl_vae_config_t *v = &m->kl_vae;
  const int64_t c = v->widths[DIT_KL_VAE_LEVELS - 1], z = v->latent_channels, pq[5] = {z, z, 1, 1, 1}, pb[1] = {z};
  const int cz = v->causal;
  char p[128];
  if (cz) {
    dit_expected_add(l, 5, pq, "post_quant_conv.weight");
    dit_expected_add(l, 1, pb, "post_quant_conv.bias");
  }
  expect_conv(l, cz, c, v->latent_channels, 3, "decoder.conv_in");
  expect_resnet(l, cz, c, c, "decoder.mid_block.resnets.0");
  expect_norm(l, c, "decoder.mid_block.attentions.0.group_norm");
  static const char *const proj[] = {"to_q", "to_k", "to_v", "to_out.0"};
  for (int i = 0; i < 4; i++) dit_expected_linear(l, c, c, 1, "decoder.mid_block.attentions.0.%s", proj[i]);
  expect_resnet(l, cz, c, c, "decoder.mid_block.resnets.1");
  for (int i = 0; i < DIT_KL_VAE_LEVELS; i++) {
    int64_t in, out;
    up_widths(v, i, &in, &out);
    for (int64_t r = 0; r <= v->layers_per_block; r++) {
      snprintf(p, sizeof p, "decoder.up_blocks.%d.resnets.%" PRId64, i, r);
      expect_resnet(l, cz, r ? out : in, out, p);
    }
    snprintf(p, sizeof p, "decoder.up_blocks.%d.upsamplers.0.conv", i);
    if (v->up_s[i] * v->up_t[i] > 1) expect_conv(l, cz, out, out, 3, p);
  }
  expect_norm(l, v->widths[0], "decoder.conv_norm_out");
  expect_conv(l, cz, v->out_channels, v->widths[0], 3, "decoder.conv_out");
}

/* The encoder's tensors (and its quant_conv): the decode stage does not read them. */
static const char *const kKlVaeIgnored[] = {"encoder.", "quant_conv.", NULL};

/* ---- variant, shape ---- */

static dit_status_t kl_vae_pick_variant(dit_model_t *m, const char *want, const char *vae_what) {
  DIT_RETURN_IF(dit_family_one_variant(m, want, vae_what));
  m->pipeline.vae.spatial = m->vae_spatial = (int)m->kl_vae.spatial;
  m->pipeline.vae.temporal = m->vae_temporal = 1;
  m->pipeline.vae.z_dim = m->kl_vae.latent_channels;
  snprintf(m->pipeline.vae.source, sizeof m->pipeline.vae.source, "config.json");
  return DIT_OK;
}

static dit_status_t hunyuan_vae_pick_variant(dit_model_t *m, const char *want, const char *vae_what) {
  DIT_RETURN_IF(kl_vae_pick_variant(m, want, vae_what));
  m->pipeline.vae.temporal = m->vae_temporal = (int)m->kl_vae.temporal;
  return DIT_OK;
}

/* --frames, --height, --width of the video, as the transformer's: latents [B, C, (F - 1) / temporal + 1,
 * H / spatial, W / spatial], decoded whole (no chunks, windows or split). */
static dit_status_t hunyuan_vae_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out) {
  const dit_kl_vae_config_t *v = &m->kl_vae;
  const int64_t vt = v->temporal, vs = v->spatial;
  if (r->vae_chunk > 0 || r->vae_first)
    return DIT_ERR(UNIMPLEMENTED, "%s: %s decodes the whole video in one graph (its mid block attends across frames): no chunks",
                   r->vae_first ? "--vae-first" : "--vae-chunk", m->model_class);
  if (r->vae_part != DIT_VAE_WHOLE || r->vae_tiles > 0)
    return DIT_ERR(UNIMPLEMENTED, "%s: %s decodes the whole video in one graph (no split decoder, no windows)",
                   r->vae_part != DIT_VAE_WHOLE ? "--vae-part" : "--vae-tiles", m->model_class);
  if (r->tp > 1 || r->cp > 1 || r->sp)
    return DIT_ERR(UNIMPLEMENTED, "%s: the VAE decoder stage runs on one rank (no --tp, --cp or --sp)", m->model_class);
  if (r->frames < 1 || (r->frames - 1) % vt)
    return DIT_ERR(INVALID_ARGUMENT, "--frames %" PRId64 ": %s decodes frames = %" PRId64 "*k + 1 (e.g. %" PRId64 ")", r->frames,
                   m->model_class, vt, r->frames < 1 ? 1 : (r->frames - 1) / vt * vt + 1);
  if (r->height < 1 || r->height % vs)
    return DIT_ERR(INVALID_ARGUMENT, "--height %" PRId64 ": must be a positive multiple of %" PRId64 " (the VAE's factor)", r->height, vs);
  if (r->width < 1 || r->width % vs)
    return DIT_ERR(INVALID_ARGUMENT, "--width %" PRId64 ": must be a positive multiple of %" PRId64 " (the VAE's factor)", r->width, vs);
  memset(out, 0, sizeof *out);
  out->channels = v->latent_channels;
  out->frames = (r->frames - 1) / vt + 1;
  out->height = r->height / vs;
  out->width = r->width / vs;
  out->tokens = out->frames * out->height * out->width;
  return DIT_OK;
}

/* --height, --width in pixels: the packed latents the FLUX transformer gives (dit_image_vae_latent_shape). */
static dit_status_t kl_vae_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out) {
  return dit_image_vae_latent_shape(m, r, m->kl_vae.latent_channels, out);
}

/* ---- graph ---- */

typedef struct kl_builder {
  dit_blocks_t *b;
  dit_graph_t *g;
  dit_dtype_t dt;
  int64_t groups;
  int causal;
} kl_builder_t;

/* x's dims (rank 5: [B, F, H, W, C]); 0 when x is not a value. */
static int dims5(const kl_builder_t *v, dit_vid_t x, int64_t d[5]) {
  const dit_value_t *xv = x >= 0 ? dit_graph_cvalue(v->g, x) : NULL;
  if (!xv || xv->rank != 5) return 0;
  memcpy(d, xv->dims, 5 * sizeof *d);
  return 1;
}

/* x [R, T, C] with its first row (of the T) `front` times before and, with `back`, its last row after. */
static dit_vid_t replicate_rows(kl_builder_t *v, dit_vid_t x, int64_t T, int front, int back, const char *name) {
  char n[256];
  snprintf(n, sizeof n, "%s.first", name);
  const dit_vid_t first = dit_blocks_slice_tokens(v->b, x, 0, 1, v->dt, n);
  for (int i = 0; i < front; i++) {
    snprintf(n, sizeof n, "%s.front%d", name, i);
    x = dit_blocks_concat(v->b, first, x, 1, n);
  }
  if (!back) return x;
  snprintf(n, sizeof n, "%s.last", name);
  const dit_vid_t last = dit_blocks_slice_tokens(v->b, x, T + front - 1, 1, v->dt, n);
  snprintf(n, sizeof n, "%s.back", name);
  return dit_blocks_concat(v->b, x, last, 1, n);
}

/* A convolution with k x k (x k) taps at prefix: a Conv2d zero-padded by k / 2, or a
 * HunyuanVideoCausalConv3d: F.pad(replicate) by k - 1 frames in front and k / 2 pixels around, then
 * its unpadded Conv3d (prefix.conv). */
static dit_vid_t conv(kl_builder_t *v, dit_vid_t x, const char *prefix, int64_t k) {
  char key[192], n[224];
  if (!v->causal) return dit_blocks_conv(v->b, x, prefix, 0, k / 2, prefix);
  int64_t d[5];
  snprintf(key, sizeof key, "%s.conv", prefix);
  if (k > 1 && dims5(v, x, d)) {
    const int64_t B = d[0], F = d[1], H = d[2], W = d[3], C = d[4], p = k / 2;
    const int64_t fr[3] = {B, F, H * W * C};
    const int64_t out[5] = {B, F + k - 1, H + 2 * p, W + 2 * p, C};
    snprintf(n, sizeof n, "%s.pad_frames", prefix);
    x = replicate_rows(v, dit_blocks_reshape(v->b, x, 3, fr, n), F, (int)(k - 1), 0, n);
    for (int64_t i = 0; i < p; i++) {
      const int64_t rows[3] = {B * (F + k - 1), H + 2 * i, (W + 2 * i) * C};
      snprintf(n, sizeof n, "%s.pad_rows%" PRId64, prefix, i);
      x = replicate_rows(v, dit_blocks_reshape(v->b, x, 3, rows, n), H + 2 * i, 1, 1, n);
      const int64_t cols[3] = {B * (F + k - 1) * (H + 2 * i + 2), W + 2 * i, C};
      snprintf(n, sizeof n, "%s.pad_cols%" PRId64, prefix, i);
      x = replicate_rows(v, dit_blocks_reshape(v->b, x, 3, cols, n), W + 2 * i, 1, 1, n);
    }
    snprintf(n, sizeof n, "%s.padded", prefix);
    x = dit_blocks_reshape(v->b, x, 5, out, n);
  }
  return dit_blocks_conv(v->b, x, key, 0, 0, key);
}

static dit_vid_t group_norm(kl_builder_t *v, dit_vid_t x, const char *prefix) {
  return dit_blocks_groupnorm(v->b, x, prefix, v->groups, KL_VAE_EPS, prefix);
}

/* ResnetBlock2D without a time embedding: (GroupNorm, SiLU, 3x3 conv) twice, plus the input (through
 * conv_shortcut, 1x1, where the widths differ). */
static dit_vid_t resnet(kl_builder_t *v, dit_vid_t x, const char *prefix, int64_t in, int64_t out) {
  char k[160], n[160];
  dit_vid_t h = x;
  if (in != out) {
    snprintf(k, sizeof k, "%s.conv_shortcut", prefix);
    h = conv(v, x, k, 1);
  }
  dit_vid_t t = x;
  for (int i = 1; i <= 2; i++) {
    snprintf(k, sizeof k, "%s.norm%d", prefix, i);
    t = group_norm(v, t, k);
    snprintf(n, sizeof n, "%s.silu%d", prefix, i);
    t = dit_blocks_unary(v->b, DIT_OP_SILU, t, v->dt, n);
    snprintf(k, sizeof k, "%s.conv%d", prefix, i);
    t = conv(v, t, k, 3);
  }
  snprintf(n, sizeof n, "%s.out", prefix);
  return dit_blocks_add(v->b, h, t, n);
}

/* The mid block's Attention: GroupNorm, then one head over all F*H*W pixels (channels as the head
 * dim, scale 1/sqrt(C); frame-causal for the causal decoder), to_out, plus the input. */
static dit_vid_t attention(kl_builder_t *v, dit_vid_t x, const int64_t d[5], const char *prefix) {
  char k[160], n[160];
  const int64_t tok[3] = {d[0], d[1] * d[2] * d[3], d[4]};
  snprintf(k, sizeof k, "%s.group_norm", prefix);
  snprintf(n, sizeof n, "%s.tokens", prefix);
  dit_vid_t t = dit_blocks_reshape(v->b, group_norm(v, x, k), 3, tok, n);
  dit_vid_t qkv[3];
  static const char *const proj[3] = {"to_q", "to_k", "to_v"};
  for (int i = 0; i < 3; i++) {
    snprintf(k, sizeof k, "%s.%s", prefix, proj[i]);
    qkv[i] = dit_blocks_linear(v->b, t, k, v->dt, k);
  }
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "heads", 1);
  dit_attrs_set_float(&a, "scale", 1.0 / sqrt((double)d[4]));
  if (v->causal && d[1] > 1) dit_attrs_set_int(&a, "causal_block", d[2] * d[3]);
  snprintf(n, sizeof n, "%s.attn", prefix);
  dit_vid_t o = dit_graph_op(v->g, DIT_OP_ATTENTION, qkv, 3, &a, v->dt, n);
  snprintf(k, sizeof k, "%s.to_out.0", prefix);
  o = dit_blocks_linear(v->b, o, k, v->dt, k);
  snprintf(n, sizeof n, "%s.pixels", prefix);
  o = dit_blocks_reshape(v->b, o, 5, d, n);
  snprintf(n, sizeof n, "%s.out", prefix);
  return dit_blocks_add(v->b, o, x, n);
}

/* Nearest spatial upsampling by s (none for 1). */
static dit_vid_t nearest(kl_builder_t *v, dit_vid_t x, int s, const char *name) {
  if (s == 1) return x;
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "scale", s);
  return dit_graph_op(v->g, DIT_OP_UPSAMPLE, &x, 1, &a, v->dt, name);
}

/* Upsample2D: nearest 2x, then the 3x3 convolution. HunyuanVideoUpsampleCausal3D: the first frame
 * nearest in space alone, the others nearest in time (each frame twice, for t = 2) and space, the
 * frames joined, then the causal convolution. */
static dit_vid_t upsample(kl_builder_t *v, dit_vid_t x, int i, int t, int s) {
  char k[160], n[160];
  int64_t d[5];
  snprintf(n, sizeof n, "decoder.up_blocks.%d.upsamplers.0.nearest", i);
  if (!v->causal || t == 1 || !dims5(v, x, d)) {
    x = nearest(v, x, s, n); /* frame by frame: the first frame's rule is then the others' */
  } else {
    const int64_t B = d[0], F = d[1], H = d[2], W = d[3], C = d[4], fr[3] = {B, F, H * W * C};
    char m[192];
    snprintf(m, sizeof m, "%s.frames", n);
    const dit_vid_t xf = dit_blocks_reshape(v->b, x, 3, fr, m);
    snprintf(m, sizeof m, "%s.first", n);
    const int64_t d1[5] = {B, 1, H, W, C};
    dit_vid_t first = nearest(v, dit_blocks_reshape(v->b, dit_blocks_slice_tokens(v->b, xf, 0, 1, v->dt, m), 5, d1, m), s, m);
    if (F > 1) {
      const int64_t each[3] = {B * (F - 1), 1, H * W * C}, d2[5] = {B, 2 * (F - 1), H, W, C};
      snprintf(m, sizeof m, "%s.rest", n);
      dit_vid_t rest = dit_blocks_reshape(v->b, dit_blocks_slice_tokens(v->b, xf, 1, F - 1, v->dt, m), 3, each, m);
      snprintf(m, sizeof m, "%s.doubled", n);
      rest = dit_blocks_reshape(v->b, dit_blocks_concat(v->b, rest, rest, 1, m), 5, d2, m);
      snprintf(m, sizeof m, "%s.rest_pixels", n);
      rest = nearest(v, rest, s, m);
      const int64_t ft[3] = {B, 1, H * s * W * s * C}, rt[3] = {B, 2 * (F - 1), H * s * W * s * C}, o[5] = {B, 2 * F - 1, H * s, W * s, C};
      snprintf(m, sizeof m, "%s.joined", n);
      first = dit_blocks_reshape(v->b, dit_blocks_concat(v->b, dit_blocks_reshape(v->b, first, 3, ft, m),
                                                         dit_blocks_reshape(v->b, rest, 3, rt, m), 1, m), 5, o, m);
    }
    x = first;
  }
  snprintf(k, sizeof k, "decoder.up_blocks.%d.upsamplers.0.conv", i);
  return conv(v, x, k, 3);
}

/* HunyuanVideoPipeline's latents [B, z, f, h, w] divided by scaling_factor, then post_quant_conv:
 * channel-last [B, f * h * w, z] (patchify with 1x1x1 patches is that transpose), times 1 /
 * scaling_factor (a linear by that diagonal: one product a channel), the 1x1x1 convolution (a linear
 * over channels). */
static dit_vid_t hunyuan_latents(kl_builder_t *v, const dit_kl_vae_config_t *cv, dit_vid_t x, const int64_t d[5]) {
  const int64_t z = cv->latent_channels, dd[2] = {z, z};
  dit_attrs_t pa = {0};
  dit_attrs_set_int(&pa, "pt", 1);
  dit_attrs_set_int(&pa, "ph", 1);
  dit_attrs_set_int(&pa, "pw", 1);
  x = dit_graph_op(v->g, DIT_OP_PATCHIFY, &x, 1, &pa, v->dt, "latents.channels_last");
  float *diag = calloc((size_t)(z * z), sizeof *diag);
  void *buf = calloc((size_t)(z * z), dit_dtype_size(v->dt));
  if (diag && buf) {
    for (int64_t i = 0; i < z; i++) diag[i * z + i] = (float)(1.0 / cv->scaling_factor);
    dit_convert(buf, v->dt, diag, DIT_F32, (size_t)(z * z));
    const dit_vid_t ins[2] = {x, dit_graph_constant(v->g, "latents.unscale", v->dt, 2, dd, buf)};
    x = dit_graph_op(v->g, DIT_OP_LINEAR, ins, 2, NULL, v->dt, "latents.unscaled");
  } else {
    x = -1; /* the graph records the missing operand */
  }
  free(diag);
  free(buf);
  x = dit_blocks_linear(v->b, x, "post_quant_conv", v->dt, "post_quant_conv");
  return dit_blocks_reshape(v->b, x, 5, d, "latents.pixels");
}

static dit_status_t kl_vae_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  const dit_kl_vae_config_t *cv = &m->kl_vae;
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  const int64_t B = req->batch, h = ls.height, w = ls.width, z = cv->latent_channels, s = cv->spatial;
  kl_builder_t v = {.dt = req->dtype, .groups = cv->groups, .causal = cv->causal};
  const dit_blocks_options_t bo = {.dtype = req->dtype, .heads = 1, .head_dim = 1, .eps = KL_VAE_EPS, .tp = 1, .cp = 1};
  DIT_RETURN_IF(dit_blocks_begin(m->weights, &bo, &v.g, &v.b));
  const int64_t patch[3] = {1, 2, 2}, one[3] = {1, 1, 1}, f = cv->causal ? ls.frames : 1;
  int64_t d[5] = {B, f, h, w, z};
  dit_vid_t x;
  if (cv->causal) {
    const int64_t lat[5] = {B, z, f, h, w};
    x = hunyuan_latents(&v, cv, dit_graph_input(v.g, "latents", req->dtype, 5, lat), d);
  } else {
    const int64_t packed[3] = {B, ls.tokens, 4 * z};
    x = dit_graph_input(v.g, "latents", req->dtype, 3, packed);
    /* Unpacked and de-normalized: [B, z, 1, h, w]; then channel-last (patchify with 1x1x1 patches is
     * that transpose) [B, 1, h, w, z]. */
    x = dit_blocks_unpatchify_channels_first_affine(v.b, x, patch, 1, h / 2, w / 2, 1.0 / cv->scaling_factor, cv->shift_factor,
                                                    "latents.unpacked");
    dit_attrs_t pa = {0};
    dit_attrs_set_int(&pa, "pt", 1);
    dit_attrs_set_int(&pa, "ph", 1);
    dit_attrs_set_int(&pa, "pw", 1);
    x = dit_graph_op(v.g, DIT_OP_PATCHIFY, &x, 1, &pa, v.dt, "latents.channels_last");
    x = dit_blocks_reshape(v.b, x, 5, d, "latents.pixels");
  }

  const int64_t c = cv->widths[DIT_KL_VAE_LEVELS - 1];
  x = conv(&v, x, "decoder.conv_in", 3);
  d[4] = c;
  x = resnet(&v, x, "decoder.mid_block.resnets.0", c, c);
  x = attention(&v, x, d, "decoder.mid_block.attentions.0");
  x = resnet(&v, x, "decoder.mid_block.resnets.1", c, c);
  char p[128];
  for (int i = 0; i < DIT_KL_VAE_LEVELS; i++) {
    dit_graph_set_block(v.g, i);
    int64_t in, o;
    up_widths(cv, i, &in, &o);
    for (int64_t r = 0; r <= cv->layers_per_block; r++) {
      snprintf(p, sizeof p, "decoder.up_blocks.%d.resnets.%" PRId64, i, r);
      x = resnet(&v, x, p, r ? o : in, o);
    }
    if (cv->up_s[i] * cv->up_t[i] > 1) x = upsample(&v, x, i, cv->up_t[i], cv->up_s[i]);
  }
  dit_graph_set_block(v.g, -1);
  x = group_norm(&v, x, "decoder.conv_norm_out");
  x = dit_blocks_unary(v.b, DIT_OP_SILU, x, v.dt, "decoder.conv_act");
  x = conv(&v, x, "decoder.conv_out", 3);
  /* Back to channel-first [B, out_channels, (F,) H, W] (unpatchify with 1x1x1 patches). */
  const int64_t F = 1 + (f - 1) * cv->temporal, H = h * s, W = w * s, tok[3] = {B, F * H * W, cv->out_channels};
  const int64_t img[5] = {B, cv->out_channels, F, H, W}, pic[4] = {B, cv->out_channels, H, W};
  x = dit_blocks_reshape(v.b, x, 3, tok, "sample.tokens");
  x = dit_blocks_unpatchify(v.b, x, one, F, H, W, "sample.channels_first");
  x = cv->causal ? dit_blocks_reshape(v.b, x, 5, img, "sample") : dit_blocks_reshape(v.b, x, 4, pic, "sample");
  dit_graph_mark_output(v.g, x, "sample");
  return dit_blocks_finish(v.b, v.g, cv->causal ? "AutoencoderKLHunyuanVideo decoder" : "AutoencoderKL decoder", out);
}

const dit_family_t dit_family_kl_vae = {
    .name = "kl_vae",
    .model_class = "AutoencoderKL",
    .parse_config = kl_vae_parse_config,
    .expected = kl_vae_expected,
    .ignored = kKlVaeIgnored,
    .pick_variant = kl_vae_pick_variant,
    .latent_shape = kl_vae_latent_shape,
    .build_graph = kl_vae_build_graph,
};

/* The encoder's tensors (and its quant_conv): the decode stage does not read them. */
const dit_family_t dit_family_hunyuan_vae = {
    .name = "hunyuan_vae",
    .model_class = "AutoencoderKLHunyuanVideo",
    .parse_config = hunyuan_vae_parse_config,
    .expected = kl_vae_expected,
    .ignored = kKlVaeIgnored,
    .pick_variant = hunyuan_vae_pick_variant,
    .latent_shape = hunyuan_vae_latent_shape,
    .build_graph = kl_vae_build_graph,
};
