/* The Wan VAE decoder (and encoder) stage: AutoencoderKLWan's decode as diffusers defines it, compiled from a
 * pipeline's vae/ folder into one graph: latents in the transformer's output space, de-normalized
 * as WanPipeline does (latents * std + mean per channel), post_quant_conv, the decoder (causal
 * 3-D convolutions, channel RMS norms, the mid block's single-head attention over each frame's
 * pixels, up blocks of residual blocks with nearest 2x upsampling and, in upsample3d blocks, a
 * temporal convolution that doubles frames), the output clamped to [-1, 1]. The Wan2.2 VAE
 * (is_residual, variant wan2.2-vae) keeps each up block's width through its upsampler and adds the
 * block's input, duplicated over the new pixels and frames (DupUp3D), to its output; its decoder
 * gives patch_size x patch_size pixels per output pixel as channels, unpatchified at the end.
 *
 * AutoencoderKLQwenImage (variant qwen-image-vae) is the Wan2.1 VAE under another class (its image
 * channels one field, input_channels) decoding QwenImagePipeline's images: the input is what the
 * Qwen-Image transformer gives, packed latents [B, (h/2)(w/2), 4 z_dim] (each token's row the
 * (channel, row, column) of a 2x2 patch of latent pixels, as FLUX's), unpacked (_unpack_latents) to
 * one latent frame, de-normalized and decoded as above (one frame: the causal caches all zeros); the
 * output is that frame, the image [B, 3, H, W].
 *
 * diffusers decodes latent frame by latent frame, each causal convolution reading the last
 * CACHE_T = 2 frames of its input from the previous chunks (feat_cache). That is the same
 * computation as every causal convolution running once over the whole sequence of its input with
 * two zero frames in front: chunk 0 pads two zero frames, chunk 1 one zero frame and chunk 0's
 * frame, later chunks the two frames before them. The one exception is each upsample3d's
 * time_conv: diffusers skips it on chunk 0 (the first frame passes through once) and starts the
 * later chunks from zeros ("Rep"), so it is a causal convolution over the frames after the first,
 * its 2C output channels interleaved into two frames each. The graph is built that way, over the
 * whole video at once (channel-last activations [B, F, H, W, C] throughout).
 *
 * Or, its peak memory that of a chunk rather than the video's, in chunks as diffusers runs it
 * (shape request vae_chunk): one graph for latent frame 0 (vae_first), one for each later chunk of
 * vae_chunk latent frames. Every causal convolution there reads its input's two frames before the
 * chunk from a graph input cache.NAME ([B, 2, H*W*C], zeros before the first chunk: the zero
 * padding) and gives its input's last two frames (of the cache and the chunk) as output
 * cache.NAME.next, which the caller feeds to the next chunk. The first graph's time_convs pass the
 * frame through and leave their caches alone; the later graphs' read theirs as any causal
 * convolution (zeros at the first of them: "Rep"), every frame giving two.
 *
 * The encoder (shape request vae_part DIT_VAE_ENCODER: image-to-video's conditioning) is
 * AutoencoderKLWan.encode as WanImageToVideoPipeline uses it: the video [B, 3, F, H, W] in [-1, 1]
 * (patchified for Wan2.2), WanEncoder3d (conv_in, down blocks of residual blocks and downsamplers,
 * the mid block, norm_out, SiLU, conv_out to mu and logvar), quant_conv, the posterior's mean
 * (retrieve_latents' argmax), normalized as the pipeline does, (mu - mean) * (1 / std), folded into
 * quant_conv's rows. diffusers encodes frame 0 alone, then 4 frames at a time, with the same
 * causal caches; each downsample3d's time_conv (stride 2 in time) starts at the second chunk over
 * the previous chunk's last frame: over the whole video, frame 0 passes through and the frames
 * after it come from the stride-2 conv of all frames. The graph is that, over the whole video, or
 * in chunks as diffusers runs them (vae_chunk latent frames = 4 vae_chunk video frames, vae_first
 * frame 0), the caches as the decoder's, each time_conv's one frame.
 *
 * WanRMS_norm is F.normalize over channels times sqrt(C) times gamma: x / max(|x|, 1e-12) *
 * sqrt(C) = x / sqrt(max(mean(x^2), 1e-24 / C)); the rmsnorm op with eps = 1e-24 / C is the same
 * but for rows whose norm is below 1e-12. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/frontend.h"
#include "compiler/frontends/blocks.h"
#include "compiler/frontends/family.h"

/* ---- config ---- */

/* The fields AutoencoderKLWan and AutoencoderKLQwenImage share. */
#define WAN_VAE_COMMON_FIELDS                                                                    \
  {"base_dim", DIT_CF_INT, 0, 1, 4096, 0, NULL},                                                 \
  {"z_dim", DIT_CF_INT, 0, 1, 1024, 0, NULL},                                                    \
  {"dim_mult", DIT_CF_INTS, 0, 1, 64, 4, "[one per resolution]"},                                \
  {"num_res_blocks", DIT_CF_INT, 0, 0, 64, 0, NULL},                                             \
  {"attn_scales", DIT_CF_FLOATS, 0, 0, 1e9, 16, NULL}, /* the encoder's; the decoder has none */ \
  {"temperal_downsample", DIT_CF_BOOLS, 0, 0, 0, 3, "[one per downsampling block]"},             \
  {"dropout", DIT_CF_FLOAT, 0, 0, 1, 0, NULL}, /* training only */                               \
  {"latents_mean", DIT_CF_FLOATS, 0, -1e9, 1e9, 1024, NULL},                                     \
  {"latents_std", DIT_CF_FLOATS, 0, -1e9, 1e9, 1024, NULL}

static const dit_config_field_t kWanVaeFields[] = {
    WAN_VAE_COMMON_FIELDS,
    {"decoder_base_dim", DIT_CF_INT, 1, 1, 4096, 0, NULL},
    {"is_residual", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
    {"in_channels", DIT_CF_INT, 0, 1, 64, 0, NULL},
    {"out_channels", DIT_CF_INT, 0, 1, 64, 0, NULL},
    {"patch_size", DIT_CF_INT, 1, 1, 64, 0, NULL},
    {"scale_factor_temporal", DIT_CF_INT, 1, 1, 64, 0, NULL},
    {"scale_factor_spatial", DIT_CF_INT, 1, 1, 1024, 0, NULL},
};

/* AutoencoderKLQwenImage: the Wan2.1 VAE's fields, its image channels (encoder input and decoder
 * output) one field. */
static const dit_config_field_t kQwenVaeFields[] = {
    WAN_VAE_COMMON_FIELDS,
    {"input_channels", DIT_CF_INT, 0, 1, 64, 0, NULL},
};

/* Both classes' defaults: the Wan2.1 VAE. */
#define WAN21_VAE_DEFAULTS                                                                                        \
  "\"base_dim\":96,\"z_dim\":16,\"dim_mult\":[1,2,4,4],\"num_res_blocks\":2,\"attn_scales\":[],"                  \
  "\"temperal_downsample\":[false,true,true],\"dropout\":0.0,"                                                    \
  "\"latents_mean\":[-0.7571,-0.7089,-0.9113,0.1075,-0.1745,0.9653,-0.1517,1.5508,0.4134,-0.0715,0.5517,-0.3632," \
  "-0.1922,-0.9497,0.2503,-0.2921],"                                                                              \
  "\"latents_std\":[2.8184,1.4541,2.3275,2.6558,1.2196,1.7708,2.6052,2.0743,3.2687,2.1526,2.8652,1.5579,1.6382,"  \
  "1.1253,2.8251,1.9160],"
static const char kWanVaeDefaults[] =
    "{" WAN21_VAE_DEFAULTS "\"decoder_base_dim\":null,\"is_residual\":false,\"in_channels\":3,\"out_channels\":3,"
    "\"patch_size\":null,\"scale_factor_temporal\":4,\"scale_factor_spatial\":8}";
static const char kQwenVaeDefaults[] = "{" WAN21_VAE_DEFAULTS "\"input_channels\":3}";

#define QWEN_VAE_CLASS "AutoencoderKLQwenImage"

/* Reads a list of numbers of a normalized config into out; its length into *n. */
static void config_nums(const cJSON *cfg, const char *key, double *out, int64_t cap, int64_t *n) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(cfg, key), *e;
  *n = 0;
  cJSON_ArrayForEach(e, a) {
    if (*n < cap) out[*n] = e->valuedouble;
    (*n)++;
  }
}

static dit_status_t wan_vae_parse_config(dit_model_t *m, const dit_json_t *raw) {
  dit_wan_vae_config_t *v = &m->wan_vae;
  v->image = !strcmp(m->model_class, QWEN_VAE_CLASS);
  if (v->image)
    DIT_RETURN_IF(dit_config_read(kQwenVaeFields, sizeof kQwenVaeFields / sizeof kQwenVaeFields[0], kQwenVaeDefaults, QWEN_VAE_CLASS,
                                  raw, &m->config));
  else
    DIT_RETURN_IF(dit_config_read(kWanVaeFields, sizeof kWanVaeFields / sizeof kWanVaeFields[0], kWanVaeDefaults, "AutoencoderKLWan",
                                  raw, &m->config));
  const cJSON *cfg = m->config;
  const char *what = raw->what;
  /* Fields AutoencoderKLQwenImage lacks read as absent: 0, false, null (its decoder is the Wan2.1 one). */
  v->in_channels = dit_config_int(cfg, v->image ? "input_channels" : "in_channels");
  v->out_channels = dit_config_int(cfg, v->image ? "input_channels" : "out_channels");
  v->residual = dit_config_bool(cfg, "is_residual");
  v->patch = dit_config_int(cfg, "patch_size");
  if (!v->patch) v->patch = 1;
  v->dim = dit_config_int(cfg, "decoder_base_dim");
  if (!v->dim) v->dim = dit_config_int(cfg, "base_dim");
  v->z_dim = dit_config_int(cfg, "z_dim");
  v->num_res_blocks = dit_config_int(cfg, "num_res_blocks");
  const cJSON *dm = cJSON_GetObjectItemCaseSensitive(cfg, "dim_mult");
  for (int i = 0; i < 4; i++) v->dim_mult[i] = (int64_t)cJSON_GetArrayItem(dm, i)->valuedouble;
  const cJSON *td = cJSON_GetObjectItemCaseSensitive(cfg, "temperal_downsample");
  v->temporal = 1;
  for (int i = 0; i < 3; i++) {
    v->temporal_up[i] = cJSON_IsTrue(cJSON_GetArrayItem(td, 2 - i));
    if (v->temporal_up[i]) v->temporal *= 2;
  }
  v->spatial = 8 * v->patch; /* three up blocks of 2x, then the patches */
  if (v->z_dim > DIT_WAN_VAE_MAX_Z)
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'z_dim' = %" PRId64 ": at most %d latent channels are supported", what, v->z_dim,
                   DIT_WAN_VAE_MAX_Z);
  int64_t nm, ns;
  config_nums(cfg, "latents_mean", v->latents_mean, DIT_WAN_VAE_MAX_Z, &nm);
  config_nums(cfg, "latents_std", v->latents_std, DIT_WAN_VAE_MAX_Z, &ns);
  if (nm != v->z_dim || ns != v->z_dim)
    return DIT_ERR(INVALID_ARGUMENT, "%s: field '%s' has %" PRId64 " entries, expected z_dim = %" PRId64, what,
                   nm != v->z_dim ? "latents_mean" : "latents_std", nm != v->z_dim ? nm : ns, v->z_dim);
  for (int64_t c = 0; c < v->z_dim; c++)
    if (!(v->latents_std[c] != 0))
      return DIT_ERR(INVALID_ARGUMENT, "%s: field 'latents_std' entry %" PRId64 " is 0: the pipeline divides by its inverse", what, c);
  /* The decoder's widths: dims[i] = dim * dim_mult reversed (the first twice); without residual
   * blocks, up blocks after the first take half the previous width (their upsampler halves it). */
  for (int i = 0; i < 4 && !v->residual; i++)
    if ((v->dim * v->dim_mult[i]) % 2)
      return DIT_ERR(INVALID_ARGUMENT, "%s: fields 'base_dim'/'dim_mult': width %" PRId64 " is odd; the upsamplers halve it", what,
                     v->dim * v->dim_mult[i]);
  /* A residual up block's shortcut (DupUp3D) from in to out channels repeats each input channel
   * over out * factor / in outputs (factor: its 2x2 pixels, times 2 frames when it doubles them);
   * output channel o reads input channels o * q .. o * q + q - 1, q = in / out, one per group of
   * the factor's duplicates: q must divide the factor. Up blocks 1 and 2 go from dim_mult[4 - i]
   * to dim_mult[3 - i] (block 0 keeps its width). */
  for (int i = 1; i < 3 && v->residual; i++) {
    const int64_t in = v->dim_mult[4 - i], outw = v->dim_mult[3 - i], factor = 4 * (v->temporal_up[i] ? 2 : 1);
    if (in % outw || factor % (in / outw))
      return DIT_ERR(UNIMPLEMENTED, "%s: field 'dim_mult': residual up block %d goes from width %" PRId64 " to %" PRId64 "; its shortcut "
                     "needs the input width a multiple of the output's by a factor dividing %" PRId64, what, i, v->dim * in, v->dim * outw,
                     factor);
  }
  if (v->out_channels % (v->patch * v->patch))
    return DIT_ERR(INVALID_ARGUMENT, "%s: field 'out_channels' = %" PRId64 " does not unpatchify with patch_size %" PRId64
                   ": expected a multiple of %" PRId64, what, v->out_channels, v->patch, v->patch * v->patch);
  const int64_t tf = dit_config_int(cfg, "scale_factor_temporal"), sf = dit_config_int(cfg, "scale_factor_spatial");
  if (tf && tf != v->temporal)
    return DIT_ERR(INVALID_ARGUMENT, "%s: field 'scale_factor_temporal' = %" PRId64 ", but temperal_downsample makes %" PRId64, what, tf,
                   v->temporal);
  if (sf && sf != v->spatial)
    return DIT_ERR(INVALID_ARGUMENT, "%s: field 'scale_factor_spatial' = %" PRId64 ", but the decoder upsamples by %" PRId64, what, sf,
                   v->spatial);
  return DIT_OK;
}

/* ---- the decoder's layout ---- */

/* Up block i: its input and output widths and what follows its residual blocks. */
typedef struct up_block {
  int64_t in, out;
  int up;         /* 0: none (the last block), 2: upsample2d, 3: upsample3d */
  int64_t up_out; /* the upsampler's output width: half the block's (Wan2.1) or all of it (residual) */
  int shortcut;   /* residual: the block's input duplicated (DupUp3D) and added to its output */
} up_block_t;

static void up_blocks(const dit_wan_vae_config_t *v, up_block_t ub[4]) {
  int64_t dims[5];
  dims[0] = v->dim * v->dim_mult[3];
  for (int i = 0; i < 4; i++) dims[i + 1] = v->dim * v->dim_mult[3 - i];
  for (int i = 0; i < 4; i++) {
    ub[i].in = i > 0 && !v->residual ? dims[i] / 2 : dims[i];
    ub[i].out = dims[i + 1];
    ub[i].up = i == 3 ? 0 : v->temporal_up[i] ? 3 : 2;
    ub[i].up_out = v->residual ? ub[i].out : ub[i].out / 2;
    ub[i].shortcut = v->residual && ub[i].up;
  }
}

/* The upsampler's module: WanResidualUpBlock's `upsampler`, WanUpBlock's `upsamplers.0`. */
static const char *upsampler_name(const up_block_t *ub) { return ub->shortcut ? "upsampler" : "upsamplers.0"; }

/* The split decoder (shape request vae_part): the head runs over whole frames up to the
 * latent-resolution blocks, the tail from there over windows of columns. Without residual blocks
 * the head ends after up block 0's resnets; with them, whose shortcut reads the block's input,
 * after the mid block (up block 0 in the tail). */
static int head_resnets(const dit_wan_vae_config_t *v) { return v->residual ? 0 : (int)v->num_res_blocks + 1; }

/* The head's output width: the tail's input channels. */
static int64_t head_width(const dit_wan_vae_config_t *v, const up_block_t ub[4]) { return head_resnets(v) ? ub[0].out : ub[0].in; }

/* The tail's halo in latent columns. Each 3x3 convolution makes one more column at a window's
 * edge inexact, each 2x upsampling doubles the inexact columns (the shortcuts' duplication reads
 * no neighbours); in the tail's input pixels, the halo is that count at the decoder's output
 * resolution over its 8x, rounded up (unpatchifying maps each column to patch columns alike). */
static int64_t tail_halo(const dit_wan_vae_config_t *v) {
  up_block_t ub[4];
  up_blocks(v, ub);
  int64_t out_px = 1; /* conv_out */
  for (int i = 0; i < 4; i++) {
    const int64_t at_level = (int64_t)1 << (3 - i); /* output pixels per pixel of level i (latent: 0) */
    if (i > 0 || !head_resnets(v)) out_px += 2 * (v->num_res_blocks + 1) * at_level; /* up block i's resnets */
    if (ub[i].up) out_px += at_level / 2;                                            /* its upsampler's conv, a level up */
  }
  return (out_px + 7) / 8;
}

/* ---- checkpoint ---- */

/* prefix.sub (sub alone for an empty prefix): a Conv3d [out, in, kt, k, k] and its bias. */
static void expect_conv(dit_expected_t *l, int64_t out, int64_t in, int64_t kt, int64_t k, const char *prefix, const char *sub) {
  const int64_t w[5] = {out, in, kt, k, k}, b[1] = {out};
  const char *dot = prefix[0] ? "." : "";
  dit_expected_add(l, 5, w, "%s%s%s.weight", prefix, dot, sub);
  dit_expected_add(l, 1, b, "%s%s%s.bias", prefix, dot, sub);
}

static void expect_gamma(dit_expected_t *l, int64_t c, int images, const char *prefix, const char *sub) {
  const int64_t g[4] = {c, 1, 1, 1};
  dit_expected_add(l, images ? 3 : 4, g, "%s.%s.gamma", prefix, sub);
}

static void expect_resnet(dit_expected_t *l, int64_t in, int64_t out, const char *prefix) {
  expect_gamma(l, in, 0, prefix, "norm1");
  expect_conv(l, out, in, 3, 3, prefix, "conv1");
  expect_gamma(l, out, 0, prefix, "norm2");
  expect_conv(l, out, out, 3, 3, prefix, "conv2");
  if (in != out) expect_conv(l, out, in, 1, 1, prefix, "conv_shortcut");
}

/* WanAttentionBlock over c channels. */
static void expect_attention(dit_expected_t *l, int64_t c, const char *prefix) {
  expect_gamma(l, c, 1, prefix, "norm");
  const int64_t qkv[4] = {3 * c, c, 1, 1}, proj[4] = {c, c, 1, 1}, b3[1] = {3 * c}, b1[1] = {c};
  dit_expected_add(l, 4, qkv, "%s.to_qkv.weight", prefix);
  dit_expected_add(l, 1, b3, "%s.to_qkv.bias", prefix);
  dit_expected_add(l, 4, proj, "%s.proj.weight", prefix);
  dit_expected_add(l, 1, b1, "%s.proj.bias", prefix);
}

/* WanMidBlock over c channels: resnet, attention, resnet. */
static void expect_mid(dit_expected_t *l, int64_t c, const char *prefix) {
  char p[128];
  for (int r = 0; r < 2; r++) {
    snprintf(p, sizeof p, "%s.resnets.%d", prefix, r);
    expect_resnet(l, c, c, p);
  }
  snprintf(p, sizeof p, "%s.attentions.0", prefix);
  expect_attention(l, c, p);
}

static void wan_vae_expected(const dit_model_t *m, dit_expected_t *l) {
  const dit_wan_vae_config_t *v = &m->wan_vae;
  up_block_t ub[4];
  up_blocks(v, ub);
  char p[128];
  expect_conv(l, v->z_dim, v->z_dim, 1, 1, "", "post_quant_conv");
  expect_conv(l, ub[0].in, v->z_dim, 3, 3, "decoder", "conv_in");
  expect_mid(l, ub[0].in, "decoder.mid_block");
  for (int i = 0; i < 4; i++) {
    for (int64_t r = 0; r <= v->num_res_blocks; r++) {
      snprintf(p, sizeof p, "decoder.up_blocks.%d.resnets.%" PRId64, i, r);
      expect_resnet(l, r ? ub[i].out : ub[i].in, ub[i].out, p);
    }
    if (!ub[i].up) continue;
    const int64_t o = ub[i].out, w[4] = {ub[i].up_out, o, 3, 3}, b[1] = {ub[i].up_out};
    snprintf(p, sizeof p, "decoder.up_blocks.%d.%s", i, upsampler_name(&ub[i]));
    dit_expected_add(l, 4, w, "%s.resample.1.weight", p);
    dit_expected_add(l, 1, b, "%s.resample.1.bias", p);
    if (ub[i].up == 3) expect_conv(l, 2 * o, o, 3, 1, p, "time_conv");
  }
  expect_gamma(l, ub[3].out, 0, "decoder", "norm_out");
  expect_conv(l, v->out_channels, ub[3].out, 3, 3, "decoder", "conv_out");
}

/* The encoder's tensors: the decode stage does not read them (the encoder stage checks them itself,
 * encoder_check). */
static const char *const kWanVaeIgnored[] = {"encoder.", "quant_conv.", NULL};

/* ---- variant, shape ---- */

static dit_status_t wan_vae_pick_variant(dit_model_t *m, const char *want, const char *vae_what) {
  (void)vae_what;
  if (m->wan_vae.image) {
    /* One variant; an image's latent frame decodes to one frame. */
    if (want && strcmp(want, "qwen-image-vae"))
      return DIT_ERR(INVALID_ARGUMENT, "--variant %s: %s compiles as qwen-image-vae (Qwen-Image's image decoder)", want, m->model_class);
    snprintf(m->variant, sizeof m->variant, "qwen-image-vae");
  } else {
    /* is_residual marks the Wan2.2 VAE (its patch_size 2 goes with it). */
    const char *name = m->wan_vae.residual ? "wan2.2-vae" : "wan2.1-vae";
    if (want && strcmp(want, name))
      return DIT_ERR(INVALID_ARGUMENT, "--variant %s: this AutoencoderKLWan (is_residual %s) compiles as %s (the %s VAE decoder)", want,
                     m->wan_vae.residual ? "true" : "false", name, m->wan_vae.residual ? "Wan2.2" : "Wan2.1");
    snprintf(m->variant, sizeof m->variant, "%s", name);
  }
  m->pipeline.vae.spatial = m->vae_spatial = (int)m->wan_vae.spatial;
  m->pipeline.vae.temporal = m->vae_temporal = m->wan_vae.image ? 1 : (int)m->wan_vae.temporal;
  m->pipeline.vae.z_dim = m->wan_vae.z_dim;
  snprintf(m->pipeline.vae.source, sizeof m->pipeline.vae.source, "config.json");
  return DIT_OK;
}



/* --frames, --height, --width in pixels, as the transformer's: latents [B, z_dim, (F-1)/4 + 1, H/s, W/s], s the
 * spatial factor (8, or 16 for the Wan2.2 VAE). */
static dit_status_t wan_vae_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out) {
  /* AutoencoderKLQwenImage: --height and --width alone, the packed latents of QwenImagePipeline. */
  if (m->wan_vae.image) return dit_image_vae_latent_shape(m, r, m->wan_vae.z_dim, out);
  const int64_t vt = m->wan_vae.temporal, vs = m->wan_vae.spatial;
  const char *verb = r->vae_part == DIT_VAE_ENCODER ? "encodes" : "decodes";
  if (r->frames < 0) return DIT_ERR(INVALID_ARGUMENT, "compile needs --frames: %s %s videos (1 for an image)", m->model_class, verb);
  if (r->frames < 1 || (r->frames - 1) % vt)
    return DIT_ERR(INVALID_ARGUMENT, "--frames %" PRId64 ": %s %s frames = %" PRId64 "*k + 1 (e.g. %" PRId64 ")", r->frames,
                   m->model_class, verb, vt, r->frames < 1 ? 1 : (r->frames - 1) / vt * vt + 1);
  if (r->height < 1 || r->height % vs)
    return DIT_ERR(INVALID_ARGUMENT, "--height %" PRId64 ": must be a positive multiple of %" PRId64 " (the VAE's factor)", r->height, vs);
  if (r->width < 1 || r->width % vs)
    return DIT_ERR(INVALID_ARGUMENT, "--width %" PRId64 ": must be a positive multiple of %" PRId64 " (the VAE's factor)", r->width, vs);
  if (r->tp > 1 || r->cp > 1 || r->sp)
    return DIT_ERR(UNIMPLEMENTED, "%s: the VAE %s stage runs on one rank (no --tp, --cp or --sp)", m->model_class,
                   r->vae_part == DIT_VAE_ENCODER ? "encoder" : "decoder");
  if (r->vae_part == DIT_VAE_ENCODER && r->vae_tiles)
    return DIT_ERR(UNIMPLEMENTED, "--vae-part encoder: the encoder runs over whole frames; --vae-tiles is the decoder tail's");
  const int64_t f = (r->frames - 1) / vt + 1;
  if (r->vae_chunk > 0 && (f - 1) % r->vae_chunk)
    return DIT_ERR(INVALID_ARGUMENT, "--vae-chunk %" PRId64 ": the %" PRId64 " latent frames after the first (--frames %" PRId64
                   ") do not split into chunks of that many; expected a divisor of %" PRId64 " (1 always is)", r->vae_chunk, f - 1,
                   r->frames, f - 1);
  if (r->vae_first && r->vae_chunk <= 0) return DIT_ERR(INVALID_ARGUMENT, "the first chunk's graph (vae_first) needs --vae-chunk");
  memset(out, 0, sizeof *out);
  out->channels = m->wan_vae.z_dim;
  /* A chunk graph's latents: latent frame 0, or one chunk of the frames after it. */
  out->frames = r->vae_chunk <= 0 ? f : r->vae_first ? 1 : r->vae_chunk;
  out->height = r->height / vs;
  out->width = r->width / vs;
  if (r->vae_part == DIT_VAE_HEAD && (r->vae_chunk != 1 || r->vae_first))
    return DIT_ERR(INVALID_ARGUMENT, "--vae-part head: the head decodes one latent frame per forward, the first as the others: expected "
                   "--vae-chunk 1 without --vae-first, found --vae-chunk %" PRId64 "%s", r->vae_chunk, r->vae_first ? " --vae-first" : "");
  if (r->vae_part == DIT_VAE_TAIL) {
    if (r->vae_chunk <= 0) return DIT_ERR(INVALID_ARGUMENT, "--vae-part tail: the tail runs in chunks: expected --vae-chunk N >= 1");
    up_block_t ub[4];
    up_blocks(&m->wan_vae, ub);
    const int64_t halo = tail_halo(&m->wan_vae), window = dit_vae_tile_window(r->vae_tiles, out->width, halo);
    if (r->vae_tiles < 1 || !window)
      return DIT_ERR(INVALID_ARGUMENT, "--vae-tiles %" PRId64 ": %" PRId64 " latent columns (--width %" PRId64 ") make at most %" PRId64
                     " exact windows (each needs more than twice the halo of %" PRId64 " columns); expected 1..that", r->vae_tiles,
                     out->width, r->width, out->width > 2 * halo + 1 ? out->width - 2 * halo : 1, halo);
    out->channels = head_width(&m->wan_vae, ub); /* the head's output, channel-last */
    out->width = window;
    out->tile_count = r->vae_tiles;
    out->tile_full = r->width / vs;
    out->tile_halo = halo;
  }
  out->tokens = out->frames * out->height * out->width;
  return DIT_OK;
}

/* ---- graph ---- */

typedef struct vae_builder {
  dit_blocks_t *b;
  dit_graph_t *g;
  dit_dtype_t dt;
  int chunked, first; /* the shape request's vae_chunk > 0 and vae_first */
} vae_builder_t;

/* x's dims (rank 5 activations); false after an earlier builder error (x < 0). */
static int dims5(const vae_builder_t *v, dit_vid_t x, int64_t d[5]) {
  const dit_value_t *xv = x >= 0 ? dit_graph_cvalue(v->g, x) : NULL;
  if (!xv || xv->rank < 1 || xv->rank > 5) return 0;
  memset(d, 0, 5 * sizeof *d);
  memcpy(d, xv->dims, (size_t)xv->rank * sizeof *d);
  return 1;
}

/* PATCHIFY's attributes: pt x ph x pw patches (1 x 1 x 1: the channel-first to channel-last transpose). */
static dit_attrs_t patch_attrs(int64_t pt, int64_t ph, int64_t pw) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "pt", pt);
  dit_attrs_set_int(&a, "ph", ph);
  dit_attrs_set_int(&a, "pw", pw);
  return a;
}

/* UNPATCHIFY's attributes: pt x ph x pw patches back into a video of f x h x w patches. */
static dit_attrs_t unpatch_attrs(int64_t pt, int64_t ph, int64_t pw, int64_t f, int64_t h, int64_t w) {
  dit_attrs_t a = patch_attrs(pt, ph, pw);
  dit_attrs_set_int(&a, "f", f);
  dit_attrs_set_int(&a, "h", h);
  dit_attrs_set_int(&a, "w", w);
  return a;
}

static dit_vid_t reshape(vae_builder_t *v, dit_vid_t x, int rank, const int64_t *dims, const char *name) {
  return dit_blocks_reshape(v->b, x, rank, dims, name);
}

/* A chunk's causal convolution input: the two frames before the chunk (graph input cache.NAME)
 * then x [B, F, H, W, C]; its last two frames become output cache.NAME.next. */
static dit_vid_t with_cache(vae_builder_t *v, dit_vid_t x, const char *name) {
  int64_t d[5];
  if (!dims5(v, x, d)) return -1;
  const int64_t B = d[0], F = d[1], H = d[2], W = d[3], C = d[4];
  const int64_t cd[3] = {B, 2, H * W * C}, flat[3] = {B, F, H * W * C}, out[5] = {B, F + 2, H, W, C};
  char n[160], k[200];
  snprintf(n, sizeof n, "cache.%s", name);
  dit_vid_t c = dit_graph_input(v->g, n, v->dt, 3, cd);
  snprintf(k, sizeof k, "%s.flat", n);
  dit_vid_t t = dit_blocks_concat(v->b, c, reshape(v, x, 3, flat, k), 1, n);
  snprintf(k, sizeof k, "%s.next", n);
  /* The next state replaces the cache in place: the concat above is its only reader. */
  dit_graph_mark_output_updating(v->g, dit_blocks_slice_tokens(v->b, t, F, 2, v->dt, k), k, c);
  snprintf(k, sizeof k, "%s.video", n);
  return reshape(v, t, 5, out, k);
}

/* A convolution, with rows its output channels the checkpoint's rows[0..) (NULL: as stored); a
 * causal one (pad_t 2) in a chunk graph reads its cache instead of zero padding. */
static dit_vid_t conv_rows(vae_builder_t *v, dit_vid_t x, const char *prefix, int64_t pad_t, int64_t pad_s, const int64_t *rows,
                           const char *name) {
  if (v->chunked && pad_t == 2) {
    x = with_cache(v, x, name);
    pad_t = 0;
  }
  return dit_blocks_conv_rows(v->b, x, prefix, pad_t, pad_s, rows, name);
}

static dit_vid_t conv(vae_builder_t *v, dit_vid_t x, const char *prefix, int64_t pad_t, int64_t pad_s, const char *name) {
  return conv_rows(v, x, prefix, pad_t, pad_s, NULL, name);
}

/* WanRMS_norm over the channels of x with gamma at key (stored [C, 1, 1(, 1)], read as [C]). */
static dit_vid_t channel_norm(vae_builder_t *v, dit_vid_t x, const char *key, const char *name) {
  int64_t d[5];
  if (!dims5(v, x, d)) return -1;
  const int64_t c = d[4];
  dit_attrs_t a = {0};
  dit_attrs_set_float(&a, "eps", 1e-24 / (double)c);
  const dit_vid_t ins[2] = {x, dit_graph_weight(v->g, key, v->dt, 1, &c)};
  return dit_graph_op(v->g, DIT_OP_RMSNORM, ins, 2, &a, v->dt, name);
}

/* WanResidualBlock: norm, SiLU, causal 3x3x3 conv, twice, plus the (1x1x1-projected) input. */
static dit_vid_t resnet(vae_builder_t *v, dit_vid_t x, const char *prefix, int64_t in, int64_t out) {
  char k[160], n[160];
  dit_vid_t h = x;
  if (in != out) {
    snprintf(k, sizeof k, "%s.conv_shortcut", prefix);
    h = dit_blocks_linear(v->b, x, k, v->dt, k); /* a 1x1x1 convolution over channel-last pixels */
  }
  dit_vid_t t = x;
  for (int i = 1; i <= 2; i++) {
    snprintf(k, sizeof k, "%s.norm%d.gamma", prefix, i);
    snprintf(n, sizeof n, "%s.norm%d", prefix, i);
    t = channel_norm(v, t, k, n);
    snprintf(n, sizeof n, "%s.silu%d", prefix, i);
    t = dit_blocks_unary(v->b, DIT_OP_SILU, t, v->dt, n);
    snprintf(k, sizeof k, "%s.conv%d", prefix, i);
    t = conv(v, t, k, 2, 1, k);
  }
  snprintf(n, sizeof n, "%s.out", prefix);
  return dit_blocks_add(v->b, t, h, n);
}

/* One of to_qkv's three C-row parts (q, k, v) as a linear over the frame's pixels. */
static dit_vid_t qkv_part(vae_builder_t *v, dit_vid_t x, const char *prefix, int64_t c, int part) {
  static const char *const names[3] = {"q", "k", "v"};
  char kw[160], kb[160], rw[160], rb[160], n[160];
  snprintf(kw, sizeof kw, "%s.to_qkv.weight", prefix);
  snprintf(kb, sizeof kb, "%s.to_qkv.bias", prefix);
  snprintf(rw, sizeof rw, "%s.to_qkv.weight.%s", prefix, names[part]);
  snprintf(rb, sizeof rb, "%s.to_qkv.bias.%s", prefix, names[part]);
  snprintf(n, sizeof n, "%s.%s", prefix, names[part]);
  const int64_t wd[4] = {3 * c, c, 1, 1}, bd[1] = {3 * c};
  dit_vid_t ins[3];
  if (part == 0) {
    ins[1] = dit_graph_weight_slice(v->g, kw, v->dt, 4, wd, 0, 0, c);
    ins[2] = dit_graph_weight_slice(v->g, kb, v->dt, 1, bd, 0, 0, c);
  } else {
    ins[1] = dit_graph_weight_slice_as(v->g, rw, kw, v->dt, 4, wd, 0, part * c, c);
    ins[2] = dit_graph_weight_slice_as(v->g, rb, kb, v->dt, 1, bd, 0, part * c, c);
  }
  ins[0] = x;
  return dit_graph_op(v->g, DIT_OP_LINEAR, ins, 3, NULL, v->dt, n);
}

/* WanAttentionBlock: one head over each frame's H*W pixels, channels as the head dim. */
static dit_vid_t attention(vae_builder_t *v, dit_vid_t x, const char *prefix) {
  int64_t d[5];
  if (!dims5(v, x, d)) return -1;
  const int64_t B = d[0], F = d[1], H = d[2], W = d[3], C = d[4];
  char k[160], n[160], nf[160];
  snprintf(k, sizeof k, "%s.norm.gamma", prefix);
  snprintf(n, sizeof n, "%s.norm", prefix);
  snprintf(nf, sizeof nf, "%s.frames", prefix);
  const int64_t fr[3] = {B * F, H * W, C};
  dit_vid_t t = reshape(v, channel_norm(v, x, k, n), 3, fr, nf);
  dit_vid_t q = qkv_part(v, t, prefix, C, 0), kk = qkv_part(v, t, prefix, C, 1), vv = qkv_part(v, t, prefix, C, 2);
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "heads", 1);
  dit_attrs_set_float(&a, "scale", 1.0 / sqrt((double)C));
  const dit_vid_t ins[3] = {q, kk, vv};
  snprintf(n, sizeof n, "%s.attn", prefix);
  dit_vid_t o = dit_graph_op(v->g, DIT_OP_ATTENTION, ins, 3, &a, v->dt, n);
  snprintf(k, sizeof k, "%s.proj", prefix);
  o = dit_blocks_linear(v->b, o, k, v->dt, k);
  snprintf(n, sizeof n, "%s.video", prefix);
  o = reshape(v, o, 5, d, n);
  snprintf(n, sizeof n, "%s.out", prefix);
  return dit_blocks_add(v->b, o, x, n);
}

/* Frames [f0, f0 + count) of x [B, F, H, W, C]. */
static dit_vid_t frames(vae_builder_t *v, dit_vid_t x, int64_t f0, int64_t count, const char *name) {
  int64_t d[5];
  if (!dims5(v, x, d)) return -1;
  const int64_t B = d[0], F = d[1], H = d[2], W = d[3], C = d[4];
  const int64_t flat[3] = {B, F, H * W * C}, out[5] = {B, count, H, W, C};
  char n[160];
  snprintf(n, sizeof n, "%s.flat", name);
  dit_vid_t t = reshape(v, x, 3, flat, n);
  t = dit_blocks_slice_tokens(v->b, t, f0, count, v->dt, name);
  snprintf(n, sizeof n, "%s.video", name);
  return reshape(v, t, 5, out, n);
}

/* upsample3d's time_conv: the causal (3, 1, 1) convolution over the frames after the first, each
 * output frame's two C-channel halves becoming two frames; the first frame passes through. In a
 * later chunk every frame is after the first: the convolution reads its cache. */
static dit_vid_t time_conv(vae_builder_t *v, dit_vid_t x, const char *prefix) {
  int64_t d[5];
  if (!dims5(v, x, d)) return -1;
  const int64_t B = d[0], F = d[1], H = d[2], W = d[3], C = d[4];
  if (v->first || (!v->chunked && F == 1)) return x; /* one latent frame: diffusers' first chunk only */
  const int whole = !v->chunked;
  const int64_t N = whole ? F - 1 : F; /* the frames it convolves */
  char n[200], kw[160], kb[160], rw[160], rb[160];
  snprintf(n, sizeof n, "%s.time_conv.later", prefix);
  dit_vid_t rest = x;
  int64_t pad = 2;
  if (whole) rest = frames(v, x, 1, F - 1, n);
  else {
    snprintf(n, sizeof n, "%s.time_conv", prefix);
    rest = with_cache(v, x, n);
    pad = 0;
  }
  snprintf(kw, sizeof kw, "%s.time_conv.weight", prefix);
  snprintf(kb, sizeof kb, "%s.time_conv.bias", prefix);
  snprintf(rw, sizeof rw, "%s.time_conv.weight.second", prefix);
  snprintf(rb, sizeof rb, "%s.time_conv.bias.second", prefix);
  const int64_t bd[1] = {2 * C}, half[4] = {B, N, 1, H * W * C};
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "pad_t", pad);
  dit_attrs_set_int(&a, "pad_h", 0);
  dit_attrs_set_int(&a, "pad_w", 0);
  dit_vid_t parts[2];
  for (int p = 0; p < 2; p++) {
    snprintf(n, sizeof n, "%s.channels_last", p ? rw : kw);
    dit_vid_t ins[3] = {rest, dit_blocks_conv_weight(v->b, kw, p * C, C, NULL, n),
                        p ? dit_graph_weight_slice_as(v->g, rb, kb, v->dt, 1, bd, 0, C, C) : dit_graph_weight_slice(v->g, kb, v->dt, 1, bd, 0, 0, C)};
    snprintf(n, sizeof n, "%s.time_conv.%d", prefix, p);
    parts[p] = dit_graph_op(v->g, DIT_OP_CONV3D, ins, 3, &a, v->dt, n);
    snprintf(n, sizeof n, "%s.time_conv.%d.frames", prefix, p);
    parts[p] = reshape(v, parts[p], 4, half, n);
  }
  /* [B, N, 2, HWC]: frame 2t + j (after the first, in the whole video) is output t's half j. */
  snprintf(n, sizeof n, "%s.time_conv.pairs", prefix);
  dit_vid_t pairs = dit_blocks_concat(v->b, parts[0], parts[1], 2, n);
  const int64_t seq[3] = {B, 2 * N, H * W * C}, first[3] = {B, 1, H * W * C}, out[5] = {B, 2 * N + whole, H, W, C};
  snprintf(n, sizeof n, "%s.time_conv.seq", prefix);
  pairs = reshape(v, pairs, 3, seq, n);
  if (!whole) {
    snprintf(n, sizeof n, "%s.time_conv.out", prefix);
    return reshape(v, pairs, 5, out, n);
  }
  snprintf(n, sizeof n, "%s.time_conv.first", prefix);
  dit_vid_t f0 = reshape(v, frames(v, x, 0, 1, n), 3, first, n);
  snprintf(n, sizeof n, "%s.time_conv.all", prefix);
  dit_vid_t all = dit_blocks_concat(v->b, f0, pairs, 1, n);
  snprintf(n, sizeof n, "%s.time_conv.out", prefix);
  return reshape(v, all, 5, out, n);
}

/* WanResample's upsampling: (upsample3d: time_conv), then per frame nearest 2x and a 3x3 conv to
 * half the channels. */
static dit_vid_t resample(vae_builder_t *v, dit_vid_t x, const char *prefix, int mode) {
  char k[160], n[160];
  if (mode == 3) x = time_conv(v, x, prefix);
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "scale", 2);
  snprintf(n, sizeof n, "%s.upsample", prefix);
  x = dit_graph_op(v->g, DIT_OP_UPSAMPLE, &x, 1, &a, v->dt, n);
  snprintf(k, sizeof k, "%s.resample.1", prefix);
  return conv(v, x, k, 0, 1, k);
}

/* x along dim repeated n times ([.., d, ..] -> [.., n * d, ..], the copies one after another). */
static dit_vid_t repeat(vae_builder_t *v, dit_vid_t x, int dim, int64_t n, const char *name) {
  if (n == 1) return x;
  char k[200];
  snprintf(k, sizeof k, "%s.%s", name, n % 2 ? "but_one" : "half");
  if (n % 2) return dit_blocks_concat(v->b, repeat(v, x, dim, n - 1, k), x, dim, name);
  const dit_vid_t half = repeat(v, x, dim, n / 2, k);
  return dit_blocks_concat(v->b, half, half, dim, name);
}

/* A residual up block's shortcut (DupUp3D) from x [B, F, H, W, in] to out channels: each pixel
 * becomes 2x2 (and, when the block doubles frames, each frame two); output channel o at sub-pixel
 * s = (t * 2 + i) * 2 + j (frame t, row i, column j of the duplicates) is input channel o * q + s /
 * (factor / q), q = in / out, factor the duplicates per pixel. With q = 1 that is nearest
 * upsampling; otherwise the channels, transposed to [q, out], are repeated into a token row of
 * (s, o) that unpatchify spreads over the duplicates, channel-first, and patchify brings back
 * channel-last. In latent frame 0's chunk diffusers keeps only the last of frame 0's duplicates
 * (first_chunk): frame 0 once, every later frame twice. */
static dit_vid_t dup_up(vae_builder_t *v, dit_vid_t x, int64_t out, int frames2, const char *prefix) {
  int64_t d[5];
  if (!dims5(v, x, d)) return -1;
  const int64_t B = d[0], F = d[1], H = d[2], W = d[3], q = d[4] / out, ft = frames2 ? 2 : 1, factor = 4 * ft;
  const int64_t F2 = F * ft, up[5] = {B, F2, 2 * H, 2 * W, out};
  char n[200];
  dit_vid_t y;
  if (q == 1) {
    dit_attrs_t a = {0};
    dit_attrs_set_int(&a, "scale", 2);
    snprintf(n, sizeof n, "%s.shortcut.upsample", prefix);
    y = dit_graph_op(v->g, DIT_OP_UPSAMPLE, &x, 1, &a, v->dt, n);
    if (frames2) {
      const int64_t one[4] = {B, F, 1, 4 * H * W * out};
      snprintf(n, sizeof n, "%s.shortcut.frame", prefix);
      y = reshape(v, y, 4, one, n);
      snprintf(n, sizeof n, "%s.shortcut.frame_pairs", prefix);
      y = dit_blocks_concat(v->b, y, y, 2, n);
      snprintf(n, sizeof n, "%s.shortcut.frames", prefix);
      y = reshape(v, y, 5, up, n);
    }
  } else {
    const int64_t N = B * F * H * W, grouped[5] = {N, out, q, 1, 1}, parts[4] = {N, q, 1, out}, row[3] = {B, F * H * W, factor * out};
    const int64_t tok[3] = {B, F2 * 4 * H * W, out};
    snprintf(n, sizeof n, "%s.shortcut.grouped", prefix);
    dit_vid_t t = reshape(v, x, 5, grouped, n);
    dit_attrs_t pa = patch_attrs(1, 1, 1);
    snprintf(n, sizeof n, "%s.shortcut.transposed", prefix);
    t = dit_graph_op(v->g, DIT_OP_PATCHIFY, &t, 1, &pa, v->dt, n);
    snprintf(n, sizeof n, "%s.shortcut.parts", prefix);
    t = reshape(v, t, 4, parts, n);
    snprintf(n, sizeof n, "%s.shortcut.repeat", prefix);
    t = repeat(v, t, 2, factor / q, n);
    snprintf(n, sizeof n, "%s.shortcut.rows", prefix);
    t = reshape(v, t, 3, row, n);
    dit_attrs_t ua = unpatch_attrs(ft, 2, 2, F, H, W);
    snprintf(n, sizeof n, "%s.shortcut.spread", prefix);
    t = dit_graph_op(v->g, DIT_OP_UNPATCHIFY, &t, 1, &ua, v->dt, n);
    snprintf(n, sizeof n, "%s.shortcut.channels_last", prefix);
    t = reshape(v, dit_graph_op(v->g, DIT_OP_PATCHIFY, &t, 1, &pa, v->dt, n), 3, tok, n);
    snprintf(n, sizeof n, "%s.shortcut.video", prefix);
    y = reshape(v, t, 5, up, n);
  }
  if (frames2 && (v->first || !v->chunked)) {
    snprintf(n, sizeof n, "%s.shortcut.after_first", prefix);
    y = frames(v, y, 1, F2 - 1, n);
  }
  return y;
}

/* Up block i from its resnet r0 on: resnets, upsampler, and (residual) the shortcut of the block's
 * input added. */
static dit_vid_t up_block(vae_builder_t *v, const up_block_t *ub, int i, int64_t r0, int64_t num_res_blocks, dit_vid_t x) {
  char p[128];
  const dit_vid_t in = x;
  for (int64_t r = r0; r <= num_res_blocks; r++) {
    snprintf(p, sizeof p, "decoder.up_blocks.%d.resnets.%" PRId64, i, r);
    x = resnet(v, x, p, r ? ub->out : ub->in, ub->out);
  }
  if (!ub->up) return x;
  snprintf(p, sizeof p, "decoder.up_blocks.%d.%s", i, upsampler_name(ub));
  x = resample(v, x, p, ub->up);
  if (!ub->shortcut) return x;
  snprintf(p, sizeof p, "decoder.up_blocks.%d", i);
  const dit_vid_t sc = dup_up(v, in, ub->up_out, ub->up == 3, p);
  snprintf(p, sizeof p, "decoder.up_blocks.%d.out", i);
  return dit_blocks_add(v->b, x, sc, p);
}

/* The first n values of checkpoint tensor key (row-major) as f32 into out. */
static dit_status_t checkpoint_f32(const dit_model_t *m, const char *key, size_t n, float *out) {
  const dit_st_tensor_t *t = dit_safetensors_find(m->weights, key);
  if (!t) return DIT_ERR(INTERNAL, "%s vanished from the checkpoint", key);
  void *buf = malloc(t->nbytes);
  if (!buf) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  /* Checkpoint tensors need not be aligned: copied before conversion. */
  memcpy(buf, t->data, t->nbytes);
  const int bad = dit_convert(out, DIT_F32, buf, t->dtype, n) != 0;
  free(buf);
  return bad ? DIT_ERR(INVALID_ARGUMENT, "%s: cannot convert its %s values", key, dit_st_dtype_name(t->dtype)) : DIT_OK;
}

/* A linear over channel-last x with an f32 weight [n, k] followed by its bias [n] (fw), computed
 * here, stored as constants wname and bname in the graph's dtype. */
static dit_status_t linear_constants(vae_builder_t *v, dit_vid_t x, const float *fw, int64_t n, int64_t k, const char *wname,
                                     const char *bname, const char *name, dit_vid_t *out) {
  const size_t nw = (size_t)(n * k), esz = dit_dtype_size(v->dt);
  void *wd = malloc((nw + (size_t)n) * esz);
  if (!wd) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  if (dit_convert(wd, v->dt, fw, DIT_F32, nw + (size_t)n)) {
    free(wd);
    return DIT_ERR(INTERNAL, "%s: conversion to %s", name, dit_dtype_name(v->dt));
  }
  const int64_t wdims[2] = {n, k}, bdims[1] = {n};
  const dit_vid_t ins[3] = {x, dit_graph_constant(v->g, wname, v->dt, 2, wdims, wd),
                            dit_graph_constant(v->g, bname, v->dt, 1, bdims, (char *)wd + nw * esz)};
  *out = dit_graph_op(v->g, DIT_OP_LINEAR, ins, 3, NULL, v->dt, name);
  free(wd);
  return DIT_OK;
}

/* The pipeline's 1 / std per latent channel, rounded as diffusers rounds it (an fp32 tensor's inverse). */
static double inv_std(const dit_wan_vae_config_t *cv, int64_t c) { return (double)(float)(1.0 / (double)(float)cv->latents_std[c]); }

/* The de-normalization folded into post_quant_conv (a 1x1x1 convolution, a linear over channels):
 * W (x * std + mean) + b = (W diag(std)) x + (W mean + b), computed in double from the checkpoint
 * and stored as constants in the graph's dtype. */
static dit_status_t post_quant(const dit_model_t *m, vae_builder_t *v, dit_vid_t x, dit_vid_t *out) {
  const int64_t z = m->wan_vae.z_dim;
  const size_t nw = (size_t)(z * z);
  float *raw = malloc(sizeof(float) * (nw + (size_t)z) * 2);
  if (!raw) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  dit_status_t s = checkpoint_f32(m, "post_quant_conv.weight", nw, raw);
  if (!s) s = checkpoint_f32(m, "post_quant_conv.bias", (size_t)z, raw + nw);
  if (!s) {
    float *fw = raw + nw + z, *fb = fw + nw;
    for (int64_t o = 0; o < z; o++) {
      /* diffusers divides by the fp32 inverse of std: the same factor, rounded as it rounds it. */
      double acc = raw[nw + o];
      for (int64_t i = 0; i < z; i++) {
        fw[o * z + i] = (float)((double)raw[o * z + i] / inv_std(&m->wan_vae, i));
        acc += (double)raw[o * z + i] * (double)(float)m->wan_vae.latents_mean[i];
      }
      fb[o] = (float)acc;
    }
    s = linear_constants(v, x, fw, z, z, "post_quant_conv.weight.denormalizing", "post_quant_conv.bias.denormalizing", "post_quant_conv",
                         out);
  }
  free(raw);
  return s;
}

/* The head: latents (channel-first, as the pipeline's) through post_quant_conv, conv_in, the mid
 * block and up block 0's first head_resnets resnets; x the channel-last latents. */
static dit_vid_t decoder_head(vae_builder_t *v, const dit_wan_vae_config_t *cv, const up_block_t ub[4], dit_vid_t x) {
  x = conv(v, x, "decoder.conv_in", 2, 1, "decoder.conv_in");
  x = resnet(v, x, "decoder.mid_block.resnets.0", ub[0].in, ub[0].in);
  x = attention(v, x, "decoder.mid_block.attentions.0");
  x = resnet(v, x, "decoder.mid_block.resnets.1", ub[0].in, ub[0].in);
  char p[128];
  for (int64_t r = 0; r < head_resnets(cv); r++) {
    snprintf(p, sizeof p, "decoder.up_blocks.0.resnets.%" PRId64, r);
    x = resnet(v, x, p, r ? ub[0].out : ub[0].in, ub[0].out);
  }
  return x;
}

/* The tail: the rest of the up blocks, norm_out, conv_out; the sample channel-first [B, 3, F, H,
 * W] (the decoder's out_channels unpatchified), clamped, as diffusers' decode gives it. */
static dit_vid_t decoder_tail(vae_builder_t *v, const dit_wan_vae_config_t *cv, const up_block_t ub[4], int64_t B, dit_vid_t x) {
  for (int i = 0; i < 4; i++) x = up_block(v, &ub[i], i, i ? 0 : head_resnets(cv), cv->num_res_blocks, x);
  x = channel_norm(v, x, "decoder.norm_out.gamma", "decoder.norm_out");
  x = dit_blocks_unary(v->b, DIT_OP_SILU, x, v->dt, "decoder.silu_out");
  /* diffusers' unpatchify reads channel c * p * p + jw * p + jh as pixel (jh, jw) of channel c;
   * unpatchify here reads a token row as (jh, jw, c): conv_out's rows reordered so. */
  const int64_t p = cv->patch, c = cv->out_channels / (p * p);
  int64_t rows[64];
  for (int64_t jh = 0; jh < p; jh++)
    for (int64_t jw = 0; jw < p; jw++)
      for (int64_t k = 0; k < c; k++) rows[(jh * p + jw) * c + k] = k * p * p + jw * p + jh;
  x = conv_rows(v, x, "decoder.conv_out", 2, 1, p > 1 ? rows : NULL, "decoder.conv_out");
  /* Back to channel-first [B, c, F, p H, p W] (with 1x1x1 patches: the transpose), clamped as diffusers' decode. */
  int64_t d[5];
  if (dims5(v, x, d)) {
    const int64_t F = d[1], H = d[2], W = d[3], tok[3] = {B, F * H * W, d[4]};
    x = reshape(v, x, 3, tok, "sample.tokens");
    dit_attrs_t ua = unpatch_attrs(1, p, p, F, H, W);
    x = dit_graph_op(v->g, DIT_OP_UNPATCHIFY, &x, 1, &ua, v->dt, "sample.channels_first");
  }
  dit_attrs_t ca = {0};
  dit_attrs_set_float(&ca, "lo", -1.0);
  dit_attrs_set_float(&ca, "hi", 1.0);
  return dit_graph_op(v->g, DIT_OP_CLAMP, &x, 1, &ca, v->dt, "sample");
}

/* ---- the encoder ---- */

/* WanEncoder3d's layout: widths dims[i] = base_dim * [1, dim_mult..][i]; level i goes from
 * dims[i] to dims[i + 1] through num_res_blocks resnets and (but the last) a downsampler, 2x in
 * space and, where temperal_downsample says, 2x in time. Wan2.1 lists the levels' modules in one
 * flat down_blocks (resnets, an attention after each where attn_scales holds the level's scale,
 * the downsampler); Wan2.2 (is_residual) groups each level as a WanResidualDownBlock whose input,
 * averaged over each downsampled pixel's 2x2 (x2 frames) inputs and its channels' groups
 * (AvgDown3D), is added to its output. */
typedef struct enc_layout {
  int64_t dims[5], in_channels, video_channels;
  int temporal[4]; /* level i's downsampler halves frames (downsample3d) */
  int attn[4];     /* Wan2.1: an attention block after each of level i's resnets */
} enc_layout_t;

static dit_status_t encoder_layout(const dit_model_t *m, enc_layout_t *e) {
  const cJSON *cfg = m->config;
  const dit_wan_vae_config_t *v = &m->wan_vae;
  const char *what = m->model_class;
  e->dims[0] = dit_config_int(cfg, "base_dim");
  for (int i = 0; i < 4; i++) e->dims[i + 1] = e->dims[0] * v->dim_mult[i];
  e->in_channels = v->in_channels;
  double scales[16];
  int64_t ns;
  config_nums(cfg, "attn_scales", scales, 16, &ns);
  double scale = 1.0; /* halved after each downsampler */
  for (int i = 0; i < 4; i++, scale /= 2) {
    e->temporal[i] = i < 3 && v->temporal_up[2 - i];
    e->attn[i] = 0;
    for (int64_t k = 0; k < ns && k < 16 && !v->residual; k++) e->attn[i] |= scales[k] == scale;
  }
  const int64_t pp = v->patch * v->patch;
  if (e->in_channels % pp)
    return DIT_ERR(INVALID_ARGUMENT, "%s: field 'in_channels' = %" PRId64 " does not patchify with patch_size %" PRId64 ": expected a multiple "
                   "of %" PRId64, what, e->in_channels, v->patch, pp);
  e->video_channels = e->in_channels / pp;
  /* AvgDown3D averages groups of in * factor / out of the block's input channels (factor: the
   * inputs per output pixel); diffusers asserts they divide. */
  for (int i = 0; i < 4 && v->residual; i++) {
    const int64_t factor = i < 3 ? 4 * (e->temporal[i] ? 2 : 1) : 1;
    if ((e->dims[i] * factor) % e->dims[i + 1])
      return DIT_ERR(INVALID_ARGUMENT, "%s: fields 'base_dim'/'dim_mult': residual down block %d goes from width %" PRId64 " to %" PRId64
                     "; its shortcut averages groups of %" PRId64 " x %" PRId64 " / %" PRId64 " inputs, not a whole number", what, i,
                     e->dims[i], e->dims[i + 1], e->dims[i], factor, e->dims[i + 1]);
  }
  return DIT_OK;
}

/* Module names of level i: resnet r, the attention after it (attn), the downsampler (r < 0). Wan2.1
 * numbers its flat list: *k is the next index. */
static void enc_name(const dit_wan_vae_config_t *v, char *p, size_t cap, int i, int64_t r, int64_t *k) {
  if (!v->residual) snprintf(p, cap, "encoder.down_blocks.%" PRId64, (*k)++);
  else if (r >= 0) snprintf(p, cap, "encoder.down_blocks.%d.resnets.%" PRId64, i, r);
  else snprintf(p, cap, "encoder.down_blocks.%d.downsampler", i);
}

static void expect_downsampler(dit_expected_t *l, int64_t c, int temporal, const char *prefix) {
  const int64_t w[4] = {c, c, 3, 3}, b[1] = {c};
  dit_expected_add(l, 4, w, "%s.resample.1.weight", prefix);
  dit_expected_add(l, 1, b, "%s.resample.1.bias", prefix);
  if (temporal) expect_conv(l, c, c, 3, 1, prefix, "time_conv");
}

static void encoder_expected(const dit_model_t *m, const enc_layout_t *e, dit_expected_t *l) {
  const dit_wan_vae_config_t *v = &m->wan_vae;
  const int64_t z2 = 2 * v->z_dim, c = e->dims[4];
  char p[128];
  int64_t k = 0;
  expect_conv(l, e->dims[0], e->in_channels, 3, 3, "encoder", "conv_in");
  for (int i = 0; i < 4; i++) {
    for (int64_t r = 0; r < v->num_res_blocks; r++) {
      enc_name(v, p, sizeof p, i, r, &k);
      expect_resnet(l, r ? e->dims[i + 1] : e->dims[i], e->dims[i + 1], p);
      if (e->attn[i]) {
        enc_name(v, p, sizeof p, i, r, &k);
        expect_attention(l, e->dims[i + 1], p);
      }
    }
    if (i == 3) continue;
    enc_name(v, p, sizeof p, i, -1, &k);
    expect_downsampler(l, e->dims[i + 1], e->temporal[i], p);
  }
  expect_mid(l, c, "encoder.mid_block");
  expect_gamma(l, c, 0, "encoder", "norm_out");
  expect_conv(l, z2, c, 3, 3, "encoder", "conv_out");
  expect_conv(l, z2, z2, 1, 1, "", "quant_conv");
}

/* The encoder's tensors against the config (the family's own check, at load, covers the decoder's
 * and lets these pass). */
static dit_status_t encoder_check(const dit_model_t *m, const enc_layout_t *e) {
  static const char *const ignored[] = {"decoder.", "post_quant_conv.", NULL};
  dit_expected_t *l;
  DIT_RETURN_IF(dit_expected_create(&l));
  encoder_expected(m, e, l);
  dit_status_t s = dit_expected_check(l, m->weights, m->model_dir, ignored);
  dit_expected_destroy(l);
  return s;
}

/* x [B, F, H, W, C] with frames (dim 1) as rows of H*W*C: [B, F, H*W*C]. */
static dit_vid_t frame_rows(vae_builder_t *v, dit_vid_t x, const char *name) {
  int64_t d[5];
  if (!dims5(v, x, d)) return -1;
  const int64_t flat[3] = {d[0], d[1], d[2] * d[3] * d[4]};
  return reshape(v, x, 3, flat, name);
}

/* WanResample's downsampling: per frame ZeroPad2d((0, 1, 0, 1)) and a stride-2 3x3 conv (output
 * pixel (i, j) reads input rows 2i .. 2i + 2 and columns 2j .. 2j + 2, zeros past the last); in
 * downsample3d then time_conv, a (3, 1, 1) conv of stride 2 in time without padding. diffusers
 * runs it from the second chunk on over the previous chunk's last frame and the chunk (1 frame,
 * then 4 at a time, halved at each downsample3d): frame 0 passes through, and output frame t >= 1
 * reads frames 2t - 2 .. 2t, over the whole video the stride-2 conv of all frames after frame 0. */
static dit_vid_t downsample(vae_builder_t *v, dit_vid_t x, const char *prefix, int64_t c, int temporal) {
  char k[160], n[240];
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "pad_t", 0);
  dit_attrs_set_int(&a, "pad_h", 0);
  dit_attrs_set_int(&a, "pad_w", 0);
  dit_attrs_set_int(&a, "pad_h_after", 1);
  dit_attrs_set_int(&a, "pad_w_after", 1);
  dit_attrs_set_int(&a, "stride_h", 2);
  dit_attrs_set_int(&a, "stride_w", 2);
  snprintf(k, sizeof k, "%s.resample.1.weight", prefix);
  snprintf(n, sizeof n, "%s.channels_last", k);
  dit_vid_t ins[3] = {x, dit_blocks_conv_weight(v->b, k, 0, c, NULL, n), dit_blocks_weight(v->b, "%s.resample.1.bias", prefix)};
  snprintf(n, sizeof n, "%s.resample.1", prefix);
  x = dit_graph_op(v->g, DIT_OP_CONV3D, ins, 3, &a, v->dt, n);
  int64_t d[5];
  if (!temporal || !dims5(v, x, d)) return x;
  const int64_t B = d[0], F = d[1], H = d[2], W = d[3], rows[3] = {B, 1, H * W * c};
  snprintf(n, sizeof n, "%s.frames", prefix);
  dit_vid_t t = frame_rows(v, x, n), first = -1;
  if (v->chunked) {
    /* The previous chunk's last frame (cache.NAME [B, 1, H*W*C]) before the chunk; the chunk's
     * last frame the next one's. Latent frame 0's graph only sets it. */
    char cn[180];
    snprintf(cn, sizeof cn, "cache.%s.time_conv", prefix);
    const dit_vid_t cache = dit_graph_input(v->g, cn, v->dt, 3, rows);
    if (!v->first) {
      snprintf(n, sizeof n, "%s.with_cache", cn);
      t = dit_blocks_concat(v->b, cache, t, 1, n);
    }
    snprintf(n, sizeof n, "%s.next", cn);
    /* Sliced from the concatenation (when there is one), so that it is written after its read. */
    dit_graph_mark_output_updating(v->g, dit_blocks_slice_tokens(v->b, t, v->first ? F - 1 : F, 1, v->dt, n), n, cache);
    if (v->first) return x;
  } else {
    if (F == 1) return x; /* one frame: diffusers' first chunk only */
    snprintf(n, sizeof n, "%s.first_frame", prefix);
    first = dit_blocks_slice_tokens(v->b, t, 0, 1, v->dt, n);
  }
  const int64_t Fin = v->chunked ? F + 1 : F, in[5] = {B, Fin, H, W, c}, later = (Fin - 3) / 2 + 1;
  snprintf(n, sizeof n, "%s.time_conv.in", prefix);
  const dit_vid_t tx = reshape(v, t, 5, in, n);
  dit_attrs_t ta = {0};
  dit_attrs_set_int(&ta, "pad_t", 0);
  dit_attrs_set_int(&ta, "pad_h", 0);
  dit_attrs_set_int(&ta, "pad_w", 0);
  dit_attrs_set_int(&ta, "stride_t", 2);
  snprintf(k, sizeof k, "%s.time_conv.weight", prefix);
  snprintf(n, sizeof n, "%s.channels_last", k);
  const dit_vid_t tins[3] = {tx, dit_blocks_conv_weight(v->b, k, 0, c, NULL, n), dit_blocks_weight(v->b, "%s.time_conv.bias", prefix)};
  snprintf(n, sizeof n, "%s.time_conv", prefix);
  dit_vid_t y = dit_graph_op(v->g, DIT_OP_CONV3D, tins, 3, &ta, v->dt, n);
  if (v->chunked) return y;
  const int64_t out[5] = {B, 1 + later, H, W, c};
  snprintf(n, sizeof n, "%s.time_conv.rows", prefix);
  y = frame_rows(v, y, n);
  snprintf(n, sizeof n, "%s.frames_out", prefix);
  y = dit_blocks_concat(v->b, first, y, 1, n);
  snprintf(n, sizeof n, "%s.out", prefix);
  return reshape(v, y, 5, out, n);
}

/* AvgDown3D from x [B, F, H, W, in] to out channels: each output pixel's ft frames x fs x fs
 * pixels (ft - F % ft zero frames in front when ft does not divide F: diffusers pads each chunk,
 * and the video after frame 0 comes in chunks of even length) give in * factor values, ordered
 * (channel, frame, row, column); output channel o is the mean of the q = in * factor / out values
 * from o * q on. That is a convolution of stride (ft, fs, fs) with a constant kernel of 1 / q. */
static dit_vid_t avg_down(vae_builder_t *v, dit_vid_t x, int64_t out, int64_t ft, int64_t fs, const char *prefix) {
  int64_t d[5];
  if (!dims5(v, x, d)) return -1;
  const int64_t in = d[4], factor = ft * fs * fs, q = in * factor / out;
  if (factor == 1 && q == 1) return x;
  const int64_t kd[5] = {out, ft, fs, fs, in}, n = out * factor * in;
  float *f = calloc((size_t)n, sizeof *f);
  void *buf = malloc((size_t)n * dit_dtype_size(v->dt));
  char name[200];
  dit_vid_t y = -1;
  if (f && buf) {
    for (int64_t o = 0; o < out; o++)
      for (int64_t s = 0; s < factor; s++)
        for (int64_t c = 0; c < in; c++)
          if ((c * factor + s) / q == o) f[(o * factor + s) * in + c] = (float)(1.0 / (double)q);
    if (!dit_convert(buf, v->dt, f, DIT_F32, (size_t)n)) {
      snprintf(name, sizeof name, "%s.avg_shortcut.weight", prefix);
      const dit_vid_t ins[2] = {x, dit_graph_constant(v->g, name, v->dt, 5, kd, buf)};
      dit_attrs_t a = {0};
      dit_attrs_set_int(&a, "pad_t", (ft - d[1] % ft) % ft);
      dit_attrs_set_int(&a, "pad_h", 0);
      dit_attrs_set_int(&a, "pad_w", 0);
      dit_attrs_set_int(&a, "stride_t", ft);
      dit_attrs_set_int(&a, "stride_h", fs);
      dit_attrs_set_int(&a, "stride_w", fs);
      snprintf(name, sizeof name, "%s.avg_shortcut", prefix);
      y = dit_graph_op(v->g, DIT_OP_CONV3D, ins, 2, &a, v->dt, name);
    }
  }
  free(f);
  free(buf);
  return y;
}

/* The video [B, c, F, H, W] (channel-first, as the pipeline's) channel-last, patch x patch pixels a
 * pixel: [B, F, H / p, W / p, c p p], channels ordered as diffusers' patchify, c * p * p + jw * p +
 * jh (column before row). Patchify gives (c, jh, jw); each c's p x p block, read as a channel-first
 * [p, 1, p, 1] volume, transposes by patchify with 1x1x1 patches. */
static dit_vid_t video_in(vae_builder_t *v, dit_vid_t x, int64_t p) {
  const dit_value_t *xv = dit_graph_cvalue(v->g, x);
  if (!xv) return -1;
  const int64_t B = xv->dims[0], c = xv->dims[1], F = xv->dims[2], h = xv->dims[3] / p, w = xv->dims[4] / p;
  const int64_t pix[5] = {B, F, h, w, c * p * p}, blocks[5] = {B * F * h * w * c, p, 1, p, 1};
  dit_attrs_t pa = patch_attrs(1, p, p);
  x = dit_graph_op(v->g, DIT_OP_PATCHIFY, &x, 1, &pa, v->dt, "video.channels_last");
  if (p > 1) {
    dit_attrs_t one = patch_attrs(1, 1, 1);
    x = reshape(v, x, 5, blocks, "video.patches");
    x = dit_graph_op(v->g, DIT_OP_PATCHIFY, &x, 1, &one, v->dt, "video.patches.column_first");
  }
  return reshape(v, x, 5, pix, "video.pixels");
}

/* conv_in, the down blocks, the mid block, norm_out, SiLU, conv_out: [B, f, h, w, 2 z_dim] (mu, logvar). */
static dit_vid_t encoder_body(vae_builder_t *v, const dit_wan_vae_config_t *cv, const enc_layout_t *e, dit_vid_t x) {
  char p[128];
  int64_t k = 0;
  x = conv(v, x, "encoder.conv_in", 2, 1, "encoder.conv_in");
  for (int i = 0; i < 4; i++) {
    const dit_vid_t in = x;
    const int64_t out = e->dims[i + 1];
    for (int64_t r = 0; r < cv->num_res_blocks; r++) {
      enc_name(cv, p, sizeof p, i, r, &k);
      x = resnet(v, x, p, r ? out : e->dims[i], out);
      if (e->attn[i]) {
        enc_name(cv, p, sizeof p, i, r, &k);
        x = attention(v, x, p);
      }
    }
    if (i < 3) {
      enc_name(cv, p, sizeof p, i, -1, &k);
      x = downsample(v, x, p, out, e->temporal[i]);
    }
    if (cv->residual) {
      snprintf(p, sizeof p, "encoder.down_blocks.%d", i);
      const dit_vid_t sc = avg_down(v, in, out, e->temporal[i] ? 2 : 1, i < 3 ? 2 : 1, p);
      snprintf(p, sizeof p, "encoder.down_blocks.%d.out", i);
      x = dit_blocks_add(v->b, x, sc, p);
    }
  }
  const int64_t c = e->dims[4];
  x = resnet(v, x, "encoder.mid_block.resnets.0", c, c);
  x = attention(v, x, "encoder.mid_block.attentions.0");
  x = resnet(v, x, "encoder.mid_block.resnets.1", c, c);
  x = channel_norm(v, x, "encoder.norm_out.gamma", "encoder.norm_out");
  x = dit_blocks_unary(v->b, DIT_OP_SILU, x, v->dt, "encoder.silu_out");
  return conv(v, x, "encoder.conv_out", 2, 1, "encoder.conv_out");
}

/* quant_conv's first z_dim rows (the posterior's mean: retrieve_latents' argmax) normalized as the
 * pipeline does, (mu - mean) * (1 / std), folded into one linear over the 2 z_dim channels:
 * (W x + b - mean) / std = (diag(1 / std) W) x + (b - mean) / std, in double from the checkpoint. */
static dit_status_t quant_mean(const dit_model_t *m, vae_builder_t *v, dit_vid_t x, dit_vid_t *out) {
  const int64_t z = m->wan_vae.z_dim, z2 = 2 * z;
  const size_t nw = (size_t)(z * z2);
  float *raw = malloc(sizeof(float) * (nw + (size_t)z) * 2);
  if (!raw) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  dit_status_t s = checkpoint_f32(m, "quant_conv.weight", nw, raw);
  if (!s) s = checkpoint_f32(m, "quant_conv.bias", (size_t)z, raw + nw);
  if (!s) {
    float *fw = raw + nw + z, *fb = fw + nw;
    for (int64_t o = 0; o < z; o++) {
      const double inv = inv_std(&m->wan_vae, o);
      for (int64_t i = 0; i < z2; i++) fw[o * z2 + i] = (float)((double)raw[o * z2 + i] * inv);
      fb[o] = (float)(((double)raw[nw + o] - (double)(float)m->wan_vae.latents_mean[o]) * inv);
    }
    s = linear_constants(v, x, fw, z, z2, "quant_conv.weight.mean_normalizing", "quant_conv.bias.mean_normalizing", "latents.normalized",
                         out);
  }
  free(raw);
  return s;
}

/* The encoder's graph: video [B, in_channels / p^2, F, H, W] in [-1, 1] to latents [B, z_dim,
 * (F - 1) / 4 + 1, H / s, W / s], normalized. */
static dit_status_t encoder_graph(const dit_model_t *m, const dit_shape_request_t *req, const dit_latent_shape_t *ls, dit_graph_t **out) {
  const dit_wan_vae_config_t *cv = &m->wan_vae;
  enc_layout_t e = {0};
  DIT_RETURN_IF(encoder_layout(m, &e));
  DIT_RETURN_IF(encoder_check(m, &e));
  vae_builder_t v = {.dt = req->dtype, .chunked = req->vae_chunk > 0, .first = req->vae_chunk > 0 && req->vae_first};
  const dit_blocks_options_t bo = {.dtype = req->dtype, .heads = 1, .head_dim = 1, .eps = 0, .tp = 1, .cp = 1};
  DIT_RETURN_IF(dit_blocks_begin(m->weights, &bo, &v.g, &v.b));
  /* In chunks: frame 0 alone (vae_first), or the frames of vae_chunk latent frames. */
  const int64_t F = !v.chunked ? req->frames : v.first ? 1 : cv->temporal * req->vae_chunk;
  const int64_t B = req->batch, z = cv->z_dim, vd[5] = {B, e.video_channels, F, req->height, req->width};
  dit_vid_t x = video_in(&v, dit_graph_input(v.g, "video", req->dtype, 5, vd), cv->patch);
  x = encoder_body(&v, cv, &e, x);
  dit_status_t s = quant_mean(m, &v, x, &x);
  if (s) {
    dit_blocks_destroy(v.b);
    dit_graph_destroy(v.g);
    return s;
  }
  /* Channel-first, as the pipeline's latents: unpatchify with 1x1x1 patches is the transpose. */
  const int64_t tok[3] = {B, ls->frames * ls->height * ls->width, z};
  x = reshape(&v, x, 3, tok, "latents.tokens");
  dit_attrs_t ua = unpatch_attrs(1, 1, 1, ls->frames, ls->height, ls->width);
  dit_graph_mark_output(v.g, dit_graph_op(v.g, DIT_OP_UNPATCHIFY, &x, 1, &ua, v.dt, "latents"), "latents");
  return dit_blocks_finish(v.b, v.g, "Wan VAE encoder", out);
}

/* The whole decoder, or its head (output "hidden", channel-last [B, F, h, w, C]) or its tail
 * (input "hidden", one window of it). */
static dit_status_t wan_vae_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  const dit_wan_vae_config_t *cv = &m->wan_vae;
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  if (req->vae_part == DIT_VAE_ENCODER) return encoder_graph(m, req, &ls, out);
  const int64_t B = req->batch, f = ls.frames, h = ls.height, w = ls.width, z = cv->z_dim;
  vae_builder_t v = {.dt = req->dtype, .chunked = req->vae_chunk > 0, .first = req->vae_chunk > 0 && req->vae_first};
  const dit_blocks_options_t bo = {.dtype = req->dtype, .heads = 1, .head_dim = 1, .eps = 0, .tp = 1, .cp = 1};
  dit_status_t s = dit_blocks_begin(m->weights, &bo, &v.g, &v.b);
  if (s) return s;
  up_block_t ub[4];
  up_blocks(cv, ub);
  dit_vid_t x;
  if (req->vae_part == DIT_VAE_TAIL) {
    const int64_t hid[5] = {B, f, h, w, ls.channels};
    x = dit_graph_input(v.g, "hidden", req->dtype, 5, hid);
  } else {
    const int64_t in_dims[5] = {B, z, f, h, w}, pix[5] = {B, f, h, w, z}, packed[3] = {B, ls.tokens, 4 * z}, patch[3] = {1, 2, 2};
    if (cv->image) {
      /* QwenImagePipeline's _unpack_latents: each token's row (channel, row, column) of a 2x2 patch
       * of latent pixels, to [B, z, 1, h, w]. */
      x = dit_graph_input(v.g, "latents", req->dtype, 3, packed);
      x = dit_blocks_unpatchify_channels_first(v.b, x, patch, 1, h / 2, w / 2, "latents.unpacked");
    } else {
      x = dit_graph_input(v.g, "latents", req->dtype, 5, in_dims);
    }
    /* Channel-first to channel-last: patchify with 1x1x1 patches is exactly that transpose. */
    dit_attrs_t pa = patch_attrs(1, 1, 1);
    x = dit_graph_op(v.g, DIT_OP_PATCHIFY, &x, 1, &pa, v.dt, "latents.channels_last");
    x = reshape(&v, x, 5, pix, "latents.video");
    s = post_quant(m, &v, x, &x);
    if (s) {
      dit_blocks_destroy(v.b);
      dit_graph_destroy(v.g);
      return s;
    }
    x = decoder_head(&v, cv, ub, x);
  }
  if (req->vae_part == DIT_VAE_HEAD) {
    dit_graph_mark_output(v.g, x, "hidden");
  } else {
    x = decoder_tail(&v, cv, ub, B, x);
    if (cv->image) {
      /* The pipeline keeps frame 0, the only one: the image [B, 3, H, W]. */
      const int64_t img[4] = {B, cv->out_channels, h * cv->spatial, w * cv->spatial};
      x = reshape(&v, x, 4, img, "sample.image");
    }
    dit_graph_mark_output(v.g, x, "sample");
  }
  return dit_blocks_finish(v.b, v.g, cv->image ? "AutoencoderKLQwenImage decoder" : "Wan VAE decoder", out);
}

/* Qwen-Image's VAE: the Wan2.1 VAE's modules and forward, decoding the images of QwenImagePipeline. */
static const char *const kWanVaeOtherClasses[] = {QWEN_VAE_CLASS, NULL};

const dit_family_t dit_family_wan_vae = {
    .name = "wan_vae",
    .model_class = "AutoencoderKLWan",
    .other_classes = kWanVaeOtherClasses,
    .parse_config = wan_vae_parse_config,
    .expected = wan_vae_expected,
    .ignored = kWanVaeIgnored,
    .pick_variant = wan_vae_pick_variant,
    .latent_shape = wan_vae_latent_shape,
    .build_graph = wan_vae_build_graph,
};
