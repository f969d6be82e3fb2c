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
 * clamped, as vae.decode gives it (the pipeline's image processor clamps). */
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

/* up_block_types: one UpDecoderBlock2D per level (or absent: the defaults' four). */
static dit_status_t check_up_blocks(const dit_json_t *raw) {
  const cJSON *u = cJSON_GetObjectItemCaseSensitive(raw->v, "up_block_types"), *e;
  if (!u) return DIT_OK;
  int n = 0, bad = !cJSON_IsArray(u);
  cJSON_ArrayForEach(e, u) {
    if (!cJSON_IsString(e) || strcmp(e->valuestring, "UpDecoderBlock2D")) bad = 1;
    n++;
  }
  if (bad || n != DIT_KL_VAE_LEVELS)
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'up_block_types': expected %d \"UpDecoderBlock2D\" (one per level of block_out_channels)",
                   raw->what, DIT_KL_VAE_LEVELS);
  return DIT_OK;
}

static dit_status_t kl_vae_parse_config(dit_model_t *m, const dit_json_t *raw) {
  DIT_RETURN_IF(dit_config_read_ignoring(kKlVaeFields, sizeof kKlVaeFields / sizeof kKlVaeFields[0], kKlVaeDefaults, "AutoencoderKL",
                                         kKlVaeBlockLists, raw, &m->config));
  DIT_RETURN_IF(check_up_blocks(raw));
  const cJSON *cfg = m->config;
  dit_kl_vae_config_t *v = &m->kl_vae;
  const char *what = raw->what;
  const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "act_fn");
  if (strcmp(act->valuestring, "silu"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'act_fn' = \"%s\": only \"silu\" is supported (FLUX.1's VAE)", what, act->valuestring);
  if (dit_config_bool(cfg, "use_post_quant_conv"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'use_post_quant_conv' = true: a convolution before the decoder is not supported yet "
                   "(FLUX.1's VAE has none); expected false", what);
  if (!dit_config_bool(cfg, "mid_block_add_attention"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'mid_block_add_attention' = false: a mid block without attention is not supported yet "
                   "(FLUX.1's VAE has it); expected true", what);
  static const char *const stats[] = {"latents_mean", "latents_std"};
  for (int i = 0; i < 2; i++)
    if (!cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cfg, stats[i])))
      return DIT_ERR(UNIMPLEMENTED, "%s: field '%s' is set: FluxPipeline de-normalizes with scaling_factor and shift_factor alone, a "
                     "pipeline that reads per-channel statistics is not supported yet; expected null", what, stats[i]);
  v->latent_channels = dit_config_int(cfg, "latent_channels");
  v->out_channels = dit_config_int(cfg, "out_channels");
  v->layers_per_block = dit_config_int(cfg, "layers_per_block");
  v->groups = dit_config_int(cfg, "norm_num_groups");
  v->scaling_factor = dit_config_num(cfg, "scaling_factor");
  v->shift_factor = dit_config_num(cfg, "shift_factor");
  v->spatial = (int64_t)1 << (DIT_KL_VAE_LEVELS - 1);
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

/* ---- the decoder's layout ---- */

/* Up block i: input and output widths (the widths reversed; the first block's input is conv_in's). */
static void up_widths(const dit_kl_vae_config_t *v, int i, int64_t *in, int64_t *out) {
  *out = v->widths[DIT_KL_VAE_LEVELS - 1 - i];
  *in = v->widths[DIT_KL_VAE_LEVELS - (i ? i : 1)];
}

/* ---- checkpoint ---- */

static void expect_conv(dit_expected_t *l, int64_t out, int64_t in, int64_t k, const char *prefix) {
  const int64_t w[4] = {out, in, k, k}, b[1] = {out};
  dit_expected_add(l, 4, w, "%s.weight", prefix);
  dit_expected_add(l, 1, b, "%s.bias", prefix);
}

static void expect_norm(dit_expected_t *l, int64_t c, const char *prefix) {
  const int64_t d[1] = {c};
  dit_expected_add(l, 1, d, "%s.weight", prefix);
  dit_expected_add(l, 1, d, "%s.bias", prefix);
}

static void expect_resnet(dit_expected_t *l, int64_t in, int64_t out, const char *prefix) {
  char k[160];
  snprintf(k, sizeof k, "%s.norm1", prefix);
  expect_norm(l, in, k);
  snprintf(k, sizeof k, "%s.conv1", prefix);
  expect_conv(l, out, in, 3, k);
  snprintf(k, sizeof k, "%s.norm2", prefix);
  expect_norm(l, out, k);
  snprintf(k, sizeof k, "%s.conv2", prefix);
  expect_conv(l, out, out, 3, k);
  snprintf(k, sizeof k, "%s.conv_shortcut", prefix);
  if (in != out) expect_conv(l, out, in, 1, k);
}

static void kl_vae_expected(const dit_model_t *m, dit_expected_t *l) {
  const dit_kl_vae_config_t *v = &m->kl_vae;
  const int64_t c = v->widths[DIT_KL_VAE_LEVELS - 1];
  char p[128];
  expect_conv(l, c, v->latent_channels, 3, "decoder.conv_in");
  expect_resnet(l, c, c, "decoder.mid_block.resnets.0");
  expect_norm(l, c, "decoder.mid_block.attentions.0.group_norm");
  static const char *const proj[] = {"to_q", "to_k", "to_v", "to_out.0"};
  for (int i = 0; i < 4; i++) dit_expected_linear(l, c, c, 1, "decoder.mid_block.attentions.0.%s", proj[i]);
  expect_resnet(l, c, c, "decoder.mid_block.resnets.1");
  for (int i = 0; i < DIT_KL_VAE_LEVELS; i++) {
    int64_t in, out;
    up_widths(v, i, &in, &out);
    for (int64_t r = 0; r <= v->layers_per_block; r++) {
      snprintf(p, sizeof p, "decoder.up_blocks.%d.resnets.%" PRId64, i, r);
      expect_resnet(l, r ? out : in, out, p);
    }
    snprintf(p, sizeof p, "decoder.up_blocks.%d.upsamplers.0.conv", i);
    if (i < DIT_KL_VAE_LEVELS - 1) expect_conv(l, out, out, 3, p);
  }
  expect_norm(l, v->widths[0], "decoder.conv_norm_out");
  expect_conv(l, v->out_channels, v->widths[0], 3, "decoder.conv_out");
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
} kl_builder_t;

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
    h = dit_blocks_conv(v->b, x, k, 0, 0, k);
  }
  dit_vid_t t = x;
  for (int i = 1; i <= 2; i++) {
    snprintf(k, sizeof k, "%s.norm%d", prefix, i);
    t = group_norm(v, t, k);
    snprintf(n, sizeof n, "%s.silu%d", prefix, i);
    t = dit_blocks_unary(v->b, DIT_OP_SILU, t, v->dt, n);
    snprintf(k, sizeof k, "%s.conv%d", prefix, i);
    t = dit_blocks_conv(v->b, t, k, 0, 1, k);
  }
  snprintf(n, sizeof n, "%s.out", prefix);
  return dit_blocks_add(v->b, h, t, n);
}

/* The mid block's Attention: GroupNorm, then one head over all H*W pixels (channels as the head
 * dim, scale 1/sqrt(C)), to_out, plus the input. */
static dit_vid_t attention(kl_builder_t *v, dit_vid_t x, const int64_t d[5], const char *prefix) {
  char k[160], n[160];
  const int64_t tok[3] = {d[0], d[2] * d[3], d[4]};
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
  snprintf(n, sizeof n, "%s.attn", prefix);
  dit_vid_t o = dit_graph_op(v->g, DIT_OP_ATTENTION, qkv, 3, &a, v->dt, n);
  snprintf(k, sizeof k, "%s.to_out.0", prefix);
  o = dit_blocks_linear(v->b, o, k, v->dt, k);
  snprintf(n, sizeof n, "%s.pixels", prefix);
  o = dit_blocks_reshape(v->b, o, 5, d, n);
  snprintf(n, sizeof n, "%s.out", prefix);
  return dit_blocks_add(v->b, o, x, n);
}

/* Upsample2D: nearest 2x, then the 3x3 convolution. */
static dit_vid_t upsample(kl_builder_t *v, dit_vid_t x, int i) {
  char k[160], n[160];
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "scale", 2);
  snprintf(n, sizeof n, "decoder.up_blocks.%d.upsamplers.0.nearest", i);
  x = dit_graph_op(v->g, DIT_OP_UPSAMPLE, &x, 1, &a, v->dt, n);
  snprintf(k, sizeof k, "decoder.up_blocks.%d.upsamplers.0.conv", i);
  return dit_blocks_conv(v->b, x, k, 0, 1, k);
}

static dit_status_t kl_vae_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  const dit_kl_vae_config_t *cv = &m->kl_vae;
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  const int64_t B = req->batch, h = ls.height, w = ls.width, z = cv->latent_channels, s = cv->spatial;
  kl_builder_t v = {.dt = req->dtype, .groups = cv->groups};
  const dit_blocks_options_t bo = {.dtype = req->dtype, .heads = 1, .head_dim = 1, .eps = KL_VAE_EPS, .tp = 1, .cp = 1};
  DIT_RETURN_IF(dit_blocks_begin(m->weights, &bo, &v.g, &v.b));
  const int64_t packed[3] = {B, ls.tokens, 4 * z}, patch[3] = {1, 2, 2}, one[3] = {1, 1, 1};
  dit_vid_t x = dit_graph_input(v.g, "latents", req->dtype, 3, packed);
  /* Unpacked and de-normalized: [B, z, 1, h, w]; then channel-last (patchify with 1x1x1 patches is
   * that transpose) [B, 1, h, w, z]. */
  x = dit_blocks_unpatchify_channels_first_affine(v.b, x, patch, 1, h / 2, w / 2, 1.0 / cv->scaling_factor, cv->shift_factor,
                                                  "latents.unpacked");
  dit_attrs_t pa = {0};
  dit_attrs_set_int(&pa, "pt", 1);
  dit_attrs_set_int(&pa, "ph", 1);
  dit_attrs_set_int(&pa, "pw", 1);
  x = dit_graph_op(v.g, DIT_OP_PATCHIFY, &x, 1, &pa, v.dt, "latents.channels_last");
  int64_t d[5] = {B, 1, h, w, z};
  x = dit_blocks_reshape(v.b, x, 5, d, "latents.pixels");

  const int64_t c = cv->widths[DIT_KL_VAE_LEVELS - 1];
  x = dit_blocks_conv(v.b, x, "decoder.conv_in", 0, 1, "decoder.conv_in");
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
    if (i < DIT_KL_VAE_LEVELS - 1) x = upsample(&v, x, i);
  }
  dit_graph_set_block(v.g, -1);
  x = group_norm(&v, x, "decoder.conv_norm_out");
  x = dit_blocks_unary(v.b, DIT_OP_SILU, x, v.dt, "decoder.conv_act");
  x = dit_blocks_conv(v.b, x, "decoder.conv_out", 0, 1, "decoder.conv_out");
  /* Back to channel-first [B, out_channels, H, W] (unpatchify with 1x1x1 patches). */
  const int64_t H = h * s, W = w * s, tok[3] = {B, H * W, cv->out_channels}, img[4] = {B, cv->out_channels, H, W};
  x = dit_blocks_reshape(v.b, x, 3, tok, "sample.tokens");
  x = dit_blocks_unpatchify(v.b, x, one, 1, H, W, "sample.channels_first");
  x = dit_blocks_reshape(v.b, x, 4, img, "sample");
  dit_graph_mark_output(v.g, x, "sample");
  return dit_blocks_finish(v.b, v.g, "AutoencoderKL decoder", out);
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
