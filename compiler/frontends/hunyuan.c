/* The HunyuanVideo frontend: HunyuanVideoTransformer3DModel as diffusers defines it (text to
 * video; the image-to-video variants are refused), built from the shared blocks. Latents
 * [B, C, F, H, W] are patchified (Conv3d patch embedding) and come back unpatchified. The text
 * first goes through the token refiner (its own self-attention blocks, gated by a timestep
 * embedding plus the text's masked mean), then double-stream blocks (image and text streams
 * with their own modulation, projections and norms, one joint attention over [image, text]
 * tokens) and single-stream blocks over the joined tokens. The rotary table covers the (f, h, w)
 * patch grid and is the identity on text tokens, so one table serves the joined sequence.
 * Tensor parallelism splits the blocks' heads and MLPs (modulation, embedders and the token
 * refiner replicated); context parallelism shares the image tokens among the group, the text
 * whole on every rank (dit_blocks_joint_attention), the refiner run by every rank. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/frontend.h"
#include "compiler/frontends/blocks.h"
#include "compiler/frontends/family.h"
#include "compiler/frontends/pipeline.h"

/* ---- config ---- */

static const dit_config_field_t kHunyuanFields[] = {
    {"in_channels", DIT_CF_INT, 0, 1, 4096, 0, NULL},
    {"out_channels", DIT_CF_INT, 1, 1, 4096, 0, NULL},
    {"num_attention_heads", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    {"attention_head_dim", DIT_CF_INT, 0, 2, 1024, 0, NULL},
    {"num_layers", DIT_CF_INT, 0, 0, 1024, 0, NULL},
    {"num_single_layers", DIT_CF_INT, 0, 0, 1024, 0, NULL},
    {"num_refiner_layers", DIT_CF_INT, 0, 0, 1024, 0, NULL},
    {"mlp_ratio", DIT_CF_FLOAT, 0, 0, 64, 0, NULL},
    {"patch_size", DIT_CF_INT, 0, 1, 64, 0, NULL},
    {"patch_size_t", DIT_CF_INT, 0, 1, 64, 0, NULL},
    {"qk_norm", DIT_CF_STR, 0, 0, 32, 0, NULL},
    {"guidance_embeds", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
    {"text_embed_dim", DIT_CF_INT, 0, 1, 65536, 0, NULL},
    {"pooled_projection_dim", DIT_CF_INT, 0, 1, 65536, 0, NULL},
    {"rope_theta", DIT_CF_FLOAT, 0, 1, 1000000000, 0, NULL},
    {"rope_axes_dim", DIT_CF_INTS, 0, 0, 1024, 3, "[frames, rows, columns]"},
    {"image_condition_type", DIT_CF_STR, 1, 0, 32, 0, NULL},
};

static const char kHunyuanDefaults[] =
    "{\"in_channels\":16,\"out_channels\":16,\"num_attention_heads\":24,\"attention_head_dim\":128,\"num_layers\":20,"
    "\"num_single_layers\":40,\"num_refiner_layers\":2,\"mlp_ratio\":4.0,\"patch_size\":2,\"patch_size_t\":1,"
    "\"qk_norm\":\"rms_norm\",\"guidance_embeds\":true,\"text_embed_dim\":4096,\"pooled_projection_dim\":768,"
    "\"rope_theta\":256.0,\"rope_axes_dim\":[16,56,56],\"image_condition_type\":null}";

#define HY_FREQ_DIM 256     /* Timesteps(num_channels=256) of every timestep and guidance embedder */
#define HY_REFINER_RATIO 4  /* the token refiner's feed-forward width over the model's (its fixed default) */
#define HY_EPS 1e-6         /* every LayerNorm and the q/k RMS norms */
#define HY_CLASS "HunyuanVideoTransformer3DModel"

static dit_status_t hunyuan_parse_config(dit_model_t *m, const dit_json_t *raw) {
  DIT_RETURN_IF(dit_config_read(kHunyuanFields, sizeof kHunyuanFields / sizeof kHunyuanFields[0], kHunyuanDefaults, HY_CLASS, raw,
                                &m->config));
  const cJSON *cfg = m->config;
  dit_hunyuan_config_t *h = &m->hunyuan;
  h->in_channels = dit_config_int(cfg, "in_channels");
  h->out_channels = dit_config_int(cfg, "out_channels");
  if (!h->out_channels) h->out_channels = h->in_channels; /* out_channels or in_channels, as diffusers resolves it */
  h->heads = dit_config_int(cfg, "num_attention_heads");
  h->head_dim = dit_config_int(cfg, "attention_head_dim");
  h->layers = dit_config_int(cfg, "num_layers");
  h->single_layers = dit_config_int(cfg, "num_single_layers");
  h->refiner_layers = dit_config_int(cfg, "num_refiner_layers");
  h->patch = dit_config_int(cfg, "patch_size");
  h->patch_t = dit_config_int(cfg, "patch_size_t");
  h->text_dim = dit_config_int(cfg, "text_embed_dim");
  h->pooled_dim = dit_config_int(cfg, "pooled_projection_dim");
  h->guidance_embeds = dit_config_bool(cfg, "guidance_embeds");
  h->rope_theta = dit_config_num(cfg, "rope_theta");
  const double ratio = dit_config_num(cfg, "mlp_ratio");
  h->mlp_dim = (int64_t)((double)(h->heads * h->head_dim) * ratio); /* int(hidden_size * mlp_ratio) */
  const cJSON *ict = cJSON_GetObjectItemCaseSensitive(cfg, "image_condition_type");
  if (cJSON_IsString(ict))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'image_condition_type' = \"%s\": the image-to-video HunyuanVideo models are not "
                   "supported; expected null (text to video)",
                   raw->what, ict->valuestring);
  const char *qk = cJSON_GetObjectItemCaseSensitive(cfg, "qk_norm")->valuestring;
  if (strcmp(qk, "rms_norm"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'qk_norm' = \"%s\": only \"rms_norm\" is supported", raw->what, qk);
  if (h->mlp_dim < 1)
    return DIT_ERR(INVALID_ARGUMENT, "%s: field 'mlp_ratio' = %g: the MLP width int(%" PRId64 " * %g) is 0; expected a positive width",
                   raw->what, ratio, h->heads * h->head_dim, ratio);
  if (h->layers + h->single_layers < 1)
    return DIT_ERR(INVALID_ARGUMENT, "%s: fields 'num_layers' and 'num_single_layers' are both 0: the model has no blocks", raw->what);
  return dit_config_rope_axes(cfg, "rope_axes_dim", h->head_dim, raw->what, h->axes);
}

/* ---- checkpoint ---- */

static void expected_refiner(const dit_hunyuan_config_t *h, dit_expected_t *l) {
  const int64_t D = h->heads * h->head_dim, M = HY_REFINER_RATIO * D, d1[1] = {D};
  dit_expected_embedder(l, D, HY_FREQ_DIM, "context_embedder.time_text_embed.timestep_embedder");
  dit_expected_embedder(l, D, h->text_dim, "context_embedder.time_text_embed.text_embedder");
  dit_expected_linear(l, D, h->text_dim, 1, "context_embedder.proj_in");
  for (int64_t i = 0; i < h->refiner_layers; i++) {
#define R "context_embedder.token_refiner.refiner_blocks.%" PRId64
    static const char *const norms[] = {"norm1", "norm2"};
    for (int k = 0; k < 2; k++) {
      dit_expected_add(l, 1, d1, R ".%s.weight", i, norms[k]);
      dit_expected_add(l, 1, d1, R ".%s.bias", i, norms[k]);
    }
    static const char *const proj[] = {"to_q", "to_k", "to_v", "to_out.0"};
    for (int k = 0; k < 4; k++) dit_expected_linear(l, D, D, 1, R ".attn.%s", i, proj[k]);
    dit_expected_linear(l, M, D, 1, R ".ff.net.0.proj", i);
    dit_expected_linear(l, D, M, 1, R ".ff.net.2", i);
    dit_expected_linear(l, 2 * D, D, 1, R ".norm_out.linear", i);
#undef R
  }
}

static void hunyuan_expected(const dit_model_t *m, dit_expected_t *l) {
  const dit_hunyuan_config_t *h = &m->hunyuan;
  const int64_t D = h->heads * h->head_dim, pe[5] = {D, h->in_channels, h->patch_t, h->patch, h->patch}, d1[1] = {D};
  dit_expected_add(l, 5, pe, "x_embedder.proj.weight");
  dit_expected_add(l, 1, d1, "x_embedder.proj.bias");
  expected_refiner(h, l);
  dit_expected_embedder(l, D, HY_FREQ_DIM, "time_text_embed.timestep_embedder");
  dit_expected_embedder(l, D, h->pooled_dim, "time_text_embed.text_embedder");
  if (h->guidance_embeds) {
    dit_expected_why(l, "field 'guidance_embeds' = true");
    dit_expected_embedder(l, D, HY_FREQ_DIM, "time_text_embed.guidance_embedder");
    dit_expected_why(l, NULL);
  }
  dit_expected_flux_blocks(l, h->layers, h->single_layers, D, h->mlp_dim, h->head_dim);
  dit_expected_linear(l, 2 * D, D, 1, "norm_out.linear");
  dit_expected_linear(l, h->patch_t * h->patch * h->patch * h->out_channels, D, 1, "proj_out");
}

/* ---- variant, pipeline, shape ---- */

static dit_status_t hunyuan_pick_variant(dit_model_t *m, const char *want, const char *vae_what) {
  if (want && strcmp(want, "hunyuan_video"))
    return DIT_ERR(INVALID_ARGUMENT, "--variant %s: unknown HunyuanVideo variant (hunyuan_video)", want);
  snprintf(m->variant, sizeof m->variant, "hunyuan_video");
  dit_vae_factors_t *vae = &m->pipeline.vae;
  if (!vae->source[0]) {
    /* HunyuanVideoPipeline's factors without a VAE: 8x spatial, 4x temporal. */
    vae->spatial = 8;
    vae->temporal = 4;
    snprintf(vae->source, sizeof vae->source, "variant");
  } else if (vae->z_dim && vae->z_dim != m->hunyuan.in_channels) {
    return DIT_ERR(INVALID_ARGUMENT, "%s: latent channels %" PRId64 ", but %s/config.json has in_channels %" PRId64, vae_what,
                   vae->z_dim, m->model_dir, m->hunyuan.in_channels);
  }
  m->vae_spatial = vae->spatial;
  m->vae_temporal = vae->temporal;
  return DIT_OK;
}

static dit_status_t hunyuan_check_compilable(const dit_model_t *m) {
  const char *cls = m->pipeline.index.class_name;
  if (cls[0] && strcmp(cls, "HunyuanVideoPipeline"))
    return DIT_ERR(UNIMPLEMENTED, "%s/model_index.json: field '_class_name' = \"%s\": a " HY_CLASS " runs in HunyuanVideoPipeline",
                   m->pipeline.dir, cls);
  if (m->pipeline.n_experts > 1)
    return DIT_ERR(UNIMPLEMENTED, "%s/model_index.json: field 'transformer_2': HunyuanVideo pipelines have one transformer",
                   m->pipeline.dir);
  return DIT_OK;
}

static dit_status_t hunyuan_pipeline_identity(const dit_model_t *m, cJSON **out) {
  *out = NULL;
  const dit_pipeline_t *p = &m->pipeline;
  cJSON *o = cJSON_CreateObject();
  if (!o) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  int ok = cJSON_AddStringToObject(o, "class", p->index.class_name) != NULL;
  cJSON *vae = ok ? cJSON_AddObjectToObject(o, "vae") : NULL;
  ok = vae && cJSON_AddNumberToObject(vae, "scale_factor_spatial", p->vae.spatial) &&
       cJSON_AddNumberToObject(vae, "scale_factor_temporal", p->vae.temporal);
  if (!ok) {
    cJSON_Delete(o);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  *out = o;
  return DIT_OK;
}

static dit_status_t hunyuan_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out) {
  const dit_hunyuan_config_t *h = &m->hunyuan;
  const int vt = m->vae_temporal, vs = m->vae_spatial;
  const int64_t q = vs * h->patch;
  if (r->frames < 0) return DIT_ERR(INVALID_ARGUMENT, "compile needs --frames: %s makes videos", m->model_class);
  if (r->frames < 1 || (r->frames - 1) % vt)
    return DIT_ERR(INVALID_ARGUMENT, "--frames %" PRId64 ": %s needs frames = %d*k + 1 (e.g. %" PRId64 ")", r->frames, m->model_class,
                   vt, r->frames < 1 ? 1 : (r->frames - 1) / vt * vt + 1);
  if (r->height < 1 || r->height % q)
    return DIT_ERR(INVALID_ARGUMENT, "--height %" PRId64 ": must be a positive multiple of %" PRId64 " (VAE %d x patch %" PRId64 ")",
                   r->height, q, vs, h->patch);
  if (r->width < 1 || r->width % q)
    return DIT_ERR(INVALID_ARGUMENT, "--width %" PRId64 ": must be a positive multiple of %" PRId64 " (VAE %d x patch %" PRId64 ")",
                   r->width, q, vs, h->patch);
  if (r->image_len)
    return DIT_ERR(INVALID_ARGUMENT, "--image-len %" PRId64 ": %s takes no image tokens", r->image_len, m->model_class);
  out->channels = h->in_channels;
  out->frames = (r->frames - 1) / vt + 1;
  out->height = r->height / vs;
  out->width = r->width / vs;
  if (out->frames % h->patch_t)
    return DIT_ERR(INVALID_ARGUMENT, "--frames %" PRId64 ": %" PRId64 " latent frames are not divisible by patch_size_t %" PRId64,
                   r->frames, out->frames, h->patch_t);
  out->tokens = (out->frames / h->patch_t) * (out->height / h->patch) * (out->width / h->patch);
  out->image_len = 0;
  return DIT_OK;
}

/* ---- graph ---- */

/* The rotary table of [image (gf x gh x gw patches, frame-major), text (L)] tokens, as
 * HunyuanVideoRotaryPosEmbed computes it for the image: per axis a, get_1d_rotary_pos_embed's
 * pairs in float32 (frequencies 1 / theta^(2j/dim_a), the angle position * frequency, both
 * rounded to float32 as torch computes them), the axes' pairs one after another; text rows are
 * (cos, sin) = (1, 0), the identity, as the text is not rotated. cs [T + L, head_dim]. */
static float *hunyuan_rope_table(const dit_hunyuan_config_t *h, int64_t gf, int64_t gh, int64_t gw, int64_t L) {
  const int64_t hd = h->head_dim, T = gf * gh * gw;
  float *cs = malloc((size_t)((T + L) * hd) * sizeof *cs);
  if (!cs) return NULL;
  for (int64_t t = 0; t < T + L; t++) {
    const float pos[3] = {(float)(t / (gh * gw)), (float)(t / gw % gh), (float)(t % gw)};
    float *row = cs + t * hd;
    int64_t j = 0;
    for (int a = 0; a < 3; a++) {
      for (int64_t i = 0; i < h->axes[a] / 2; i++, j++) {
        const float freq = 1.0f / powf((float)h->rope_theta, (float)(2 * i) / (float)h->axes[a]);
        const float ang = pos[a] * freq;
        row[2 * j] = t < T ? (float)cos((double)ang) : 1.0f;
        row[2 * j + 1] = t < T ? (float)sin((double)ang) : 0.0f;
      }
    }
  }
  return cs;
}

/* CombinedTimestepTextProjEmbeddings at prefix: the timestep's embedding (the sinusoid of t as
 * the pipeline passes it, fp32, unrounded) plus the pooled text's projection (linear, SiLU,
 * linear). */
static dit_vid_t time_text_embed(dit_blocks_t *b, dit_vid_t t, dit_vid_t pooled, const char *prefix, const char *name,
                                 dit_dtype_t dt) {
  char k[256], k1[256], k2[256], n1[256], n2[256], n3[256], n4[256];
  snprintf(n1, sizeof n1, "%s.time_sinusoid", name);
  dit_vid_t e = dit_blocks_sinusoid(b, t, HY_FREQ_DIM, 1, 0.0, n1);
  snprintf(k, sizeof k, "%s.timestep_embedder", prefix);
  snprintf(n1, sizeof n1, "%s.time", name);
  e = dit_blocks_timestep_mlp(b, e, k, n1);
  const dit_blocks_mlp_t text = {(snprintf(k1, sizeof k1, "%s.text_embedder.linear_1", prefix), k1),
                                 (snprintf(k2, sizeof k2, "%s.text_embedder.linear_2", prefix), k2),
                                 DIT_OP_SILU,
                                 (snprintf(n2, sizeof n2, "%s.pooled.linear_1", name), n2),
                                 (snprintf(n3, sizeof n3, "%s.pooled.silu", name), n3),
                                 (snprintf(n4, sizeof n4, "%s.pooled", name), n4),
                                 0,
                                 dt};
  return dit_blocks_add(b, e, dit_blocks_mlp(b, pooled, &text), name);
}

/* HunyuanVideoTokenRefiner, which every rank runs whole (it is small and its text is every rank's):
 * the text's masked mean conditions a timestep embedding; proj_in,
 * then per refiner block LayerNorm, self-attention over the valid text (keys below `bound`),
 * the gated residual, LayerNorm, the SiLU feed-forward and its gated residual. Padded text
 * rows come out as valid-text attention results (diffusers lets them see only key 0): they are
 * never keys of a later attention, so no valid output depends on them. */
static dit_vid_t token_refiner(dit_blocks_t *b, const dit_hunyuan_config_t *h, dit_vid_t ehs, dit_vid_t t, dit_vid_t bound,
                               dit_dtype_t dt) {
  (void)h;
  dit_vid_t pooled = dit_blocks_token_mean(b, ehs, bound, "refiner.pool");
  dit_vid_t temb = time_text_embed(b, t, pooled, "context_embedder.time_text_embed", "refiner.temb", dt);
  dit_vid_t tsilu = dit_blocks_unary(b, DIT_OP_SILU, temb, dt, "refiner.temb.silu");
  dit_vid_t x = dit_blocks_linear(b, ehs, "context_embedder.proj_in", dt, "refiner.proj_in");
  char n[192], k[192], kq[192], kk[192], kv[192], nu[192], na[192], nd[192];
  for (int64_t i = 0; i < h->refiner_layers; i++) {
#define NAME(s) (snprintf(n, sizeof n, "refiner.%" PRId64 ".%s", i, s), n)
#define KEY(buf, s) (snprintf(buf, sizeof buf, "context_embedder.token_refiner.refiner_blocks.%" PRId64 ".%s", i, s), buf)
    dit_vid_t n1 = dit_blocks_layernorm(b, x, KEY(k, "norm1"), HY_EPS, NAME("norm1"));
    dit_vid_t q = dit_blocks_linear(b, n1, KEY(kq, "attn.to_q"), dt, NAME("attn.q"));
    dit_vid_t kx = dit_blocks_linear(b, n1, KEY(kk, "attn.to_k"), dt, NAME("attn.k"));
    dit_vid_t v = dit_blocks_linear(b, n1, KEY(kv, "attn.to_v"), dt, NAME("attn.v"));
    dit_vid_t a = dit_blocks_attention_replicated(b, q, kx, v, bound, NAME("attn.sdpa"));
    a = dit_blocks_linear(b, a, KEY(k, "attn.to_out.0"), dt, NAME("attn.to_out"));
    const dit_blocks_mod_t gates = dit_blocks_mod_rows(b, tsilu, KEY(k, "norm_out.linear"), 2, NAME("norm_out.mod"));
    x = dit_blocks_gated_add(b, x, a, gates, 0, NAME("attn.residual"));
    dit_vid_t n2 = dit_blocks_layernorm(b, x, KEY(k, "norm2"), HY_EPS, NAME("norm2"));
    const dit_blocks_mlp_t ff = {KEY(kq, "ff.net.0.proj"), KEY(kk, "ff.net.2"), DIT_OP_SILU,
                                 (snprintf(nu, sizeof nu, "refiner.%" PRId64 ".ff.up", i), nu),
                                 (snprintf(na, sizeof na, "refiner.%" PRId64 ".ff.silu", i), na),
                                 (snprintf(nd, sizeof nd, "refiner.%" PRId64 ".ff.down", i), nd), 0, dt};
    x = dit_blocks_gated_add(b, x, dit_blocks_mlp(b, n2, &ff), gates, 1, NAME("ff.residual"));
#undef NAME
#undef KEY
  }
  return x;
}

static dit_status_t hunyuan_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  const dit_hunyuan_config_t *h = &m->hunyuan;
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  const int64_t B = req->batch, L = req->text_len, T = ls.tokens, gf = ls.frames / h->patch_t, gh = ls.height / h->patch,
                gw = ls.width / h->patch;
  DIT_RETURN_IF(dit_joint_parallel_check(m, req, h->heads, T));
  const int cp = req->cp > 1 ? req->cp : 1;
  /* This rank's image tokens: its share of the context-parallel group's; the text is whole on every rank. */
  const int64_t Tl = T / cp, t0 = (cp > 1 ? req->cp_rank : 0) * Tl;
  const dit_dtype_t dt = req->dtype;
  float *cs_data = hunyuan_rope_table(h, gf, gh, gw, L);
  if (!cs_data) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory for the rotary table");
  dit_graph_t *g;
  dit_blocks_t *b;
  dit_status_t s = dit_joint_builder(m, req, h->heads, h->head_dim, HY_EPS, &g, &b);
  if (s) {
    free(cs_data);
    return s;
  }
  const int64_t xs[5] = {B, ls.channels, ls.frames, ls.height, ls.width}, es[3] = {B, L, h->text_dim}, ms[2] = {B, L},
                ps[2] = {B, h->pooled_dim}, ts[1] = {B};
  dit_vid_t x = dit_graph_input(g, "hidden_states", dt, 5, xs);
  dit_vid_t t = dit_graph_input(g, "timestep", DIT_F32, 1, ts);
  dit_vid_t ehs = dit_graph_input(g, "encoder_hidden_states", dt, 3, es);
  dit_vid_t mask = dit_graph_input(g, "encoder_attention_mask", dt, 2, ms);
  dit_vid_t pooled = dit_graph_input(g, "pooled_projections", dt, 2, ps);
  dit_vid_t guid = h->guidance_embeds ? dit_graph_input(g, "guidance", DIT_F32, 1, ts) : -1;
  /* The rotary table of [image, text], every rank's the same: the rows of this rank's image tokens
   * then the text's for the single-stream blocks, of its image tokens alone for the double-stream
   * ones (the text's rows are the identity). */
  dit_vid_t cs, cs_img;
  dit_blocks_rope_rows(b, cs_data, T, L, "rope", &cs, &cs_img, NULL);
  free(cs_data);
  /* The text's valid prefix: the refiner's keys, and without cp the single-stream blocks' keys
   * after the image tokens (joint attention bounds its own keys). */
  dit_vid_t text_bound = dit_blocks_key_bound(b, mask, 0, "text_bound");
  dit_vid_t joint_bound = cp == 1 ? dit_blocks_key_bound(b, mask, T, "joint_bound") : -1;

  /* temb = timestep embedding (+ guidance embedding, the guidance as the pipeline passes it in
   * the model dtype) + pooled text projection. */
  dit_vid_t temb = time_text_embed(b, t, pooled, "time_text_embed", "temb", dt);
  if (guid >= 0) {
    dit_vid_t ge = dit_blocks_sinusoid_scaled(b, guid, HY_FREQ_DIM, 1, 0.0, 1.0, dt, "guidance.sinusoid");
    temb = dit_blocks_add(b, temb, dit_blocks_timestep_mlp(b, ge, "time_text_embed.guidance_embedder", "guidance"), "temb.guidance");
  }
  dit_vid_t tsilu = dit_blocks_unary(b, DIT_OP_SILU, temb, dt, "temb.silu"); /* every norm's SiLU(temb), once */
  const int64_t patch[3] = {h->patch_t, h->patch, h->patch};
  dit_vid_t hs = dit_blocks_patch_embed(b, x, patch, "x_embedder.proj");
  if (cp > 1) hs = dit_blocks_slice_tokens(b, hs, t0, Tl, dt, "image_tokens.local");
  dit_vid_t ctx = token_refiner(b, h, ehs, t, text_bound, dt);

  for (int64_t i = 0; i < h->layers; i++) {
    dit_graph_set_block(g, (int32_t)i);
    dit_blocks_flux_double(b, i, tsilu, cs_img, mask, &hs, &ctx);
  }
  dit_vid_t xj = dit_blocks_concat(b, hs, ctx, 1, "single.tokens");
  for (int64_t i = 0; i < h->single_layers; i++) {
    dit_graph_set_block(g, (int32_t)(h->layers + i));
    xj = dit_blocks_flux_single(b, i, tsilu, cs, joint_bound, mask, Tl, L, xj);
  }
  dit_graph_set_block(g, -1);
  hs = dit_blocks_slice_tokens(b, xj, 0, Tl, dt, "image_tokens");
  dit_vid_t y = dit_blocks_flux_out(b, hs, tsilu);
  y = dit_blocks_unpatchify_channels_first(b, y, patch, gf, gh, gw, "unpatchify");
  dit_graph_mark_output(g, y, "sample");
  return dit_blocks_finish(b, g, "HunyuanVideo", out);
}

/* HunyuanVideoPipeline's loop: the latents as hidden_states, the scheduler's t itself as the
 * timestep, guidance_scale * 1000 as the embedded guidance, the prompt's embeddings, mask and
 * pooled CLIP embedding as the text inputs; sigmas linspace(1, 0, n + 1)[:-1] shifted by the
 * scheduler's fixed shift (the pipeline passes no mu). */
static dit_status_t hunyuan_generate(const dit_model_t *m, const dit_latent_shape_t *ls, dit_manifest_generate_t *g) {
  static const dit_generate_condition_t cond[] = {{"prompt_embeds", "encoder_hidden_states"},
                                                  {"prompt_attention_mask", "encoder_attention_mask"},
                                                  {"pooled_prompt_embeds", "pooled_projections"}};
  DIT_RETURN_IF(dit_flow_generate(m, "HunyuanVideoPipeline", 50 /* its num_inference_steps */, 1.0, cond, 3, g));
  if (!g->present) return DIT_OK;
  const dit_scheduler_defaults_t *sc = &m->pipeline.scheduler;
  if (sc->use_dynamic_shifting)
    return DIT_ERR(UNIMPLEMENTED, "%s/scheduler/scheduler_config.json: field 'use_dynamic_shifting' = true: HunyuanVideoPipeline "
                   "passes no mu; expected false",
                   m->pipeline.dir);
  g->timestep_f32 = 1; /* t.expand(B).to(latents.dtype): the latents stay fp32 */
  if (m->hunyuan.guidance_embeds) {
    snprintf(g->guidance_input, sizeof g->guidance_input, "guidance");
    g->guidance_scale = 1000.0;
    g->guidance_default = 6.0; /* HunyuanVideoPipeline's guidance_scale */
  }
  return dit_flow_schedule_from(sc, ls->tokens, 1, g);
}

/* HunyuanVideoPipeline's encode_prompt: its Llama (text_encoder, tokenizer/) reads the prompt in
 * DEFAULT_PROMPT_TEMPLATE with the tokenizer's mask, padded to max_sequence_length plus the
 * template's crop_start (95) tokens; hidden_states[-3] from row 95 on is prompt_embeds, every row
 * kept, its mask prompt_attention_mask; CLIP (text_encoder_2, tokenizer_2/, at its tokenizer's 77,
 * no mask) gives pooled_prompt_embeds. */
static const dit_stage_feed_t kHunyuanTextStages[] = {
    {"text_encoder", "tokenizer", "prompt_embeds", "hidden_states_selected", DIT_PADDING_MASKED, 0,
     "<|start_header_id|>system<|end_header_id|>\n\nDescribe the video by detailing the following aspects: 1. The main content and "
     "theme of the video.2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects.3. Actions, "
     "events, behaviors temporal relationships, physical movement changes of the objects.4. background environment, light, style and "
     "atmosphere.5. camera angles, movements, and transitions used in the video:<|eot_id|><|start_header_id|>user<|end_header_id|>"
     "\n\n{}<|eot_id|>",
     95, "prompt_attention_mask"},
    {"text_encoder_2", "tokenizer_2", "pooled_prompt_embeds", "pooler_output", DIT_PADDING_ATTENDED, 1, NULL, 0, NULL},
};

const dit_family_t dit_family_hunyuan = {
    .name = "hunyuan_video",
    .model_class = HY_CLASS,
    .parse_config = hunyuan_parse_config,
    .expected = hunyuan_expected,
    .pick_variant = hunyuan_pick_variant,
    .check_compilable = hunyuan_check_compilable,
    .pipeline_identity = hunyuan_pipeline_identity,
    .latent_shape = hunyuan_latent_shape,
    .build_graph = hunyuan_build_graph,
    .generate = hunyuan_generate,
    .text_stages = kHunyuanTextStages,
    .n_text_stages = sizeof kHunyuanTextStages / sizeof kHunyuanTextStages[0],
    .whole_video_decoder = 1,
    /* AutoencoderKLHunyuanVideo's use_framewise_decoding, on by default and in the pipeline: windows
     * of 16 + 1 frames every 12. */
    .decode_window = 16,
    .decode_stride = 12,
};
