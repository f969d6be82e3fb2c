/* The Wan frontend: WanTransformer3DModel as diffusers defines it, read from config.json and
 * safetensors (or a Wan pipeline directory through pipeline.c: transformer/ and
 * transformer_2/ loaded here), validated, and built into a graph for one shape from the
 * shared blocks (blocks.h). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/identity.h"
#include "base/fileio.h"
#include "base/json.h"
#include "compiler/frontend.h"
#include "compiler/frontends/blocks.h"
#include "compiler/frontends/family.h"
#include "compiler/frontends/pipeline.h"

/* ---- config ---- */

/* Every __init__ argument of WanTransformer3DModel, with the range this build accepts (far
 * beyond the released models, tight enough that products of them stay exact). Fields whose
 * non-default values this build cannot compile are checked after parsing. */
static const dit_config_field_t kWanFields[] = {
    {"patch_size", DIT_CF_INTS, 0, 1, 64, 3, "[t, h, w]"},        {"num_attention_heads", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    {"attention_head_dim", DIT_CF_INT, 0, 1, 1024, 0, NULL}, {"in_channels", DIT_CF_INT, 0, 1, 4096, 0, NULL},
    {"out_channels", DIT_CF_INT, 1, 0, 4096, 0, NULL},     {"text_dim", DIT_CF_INT, 0, 1, 65536, 0, NULL},
    {"freq_dim", DIT_CF_INT, 0, 1, 65536, 0, NULL},        {"ffn_dim", DIT_CF_INT, 0, 1, 1 << 20, 0, NULL},
    {"num_layers", DIT_CF_INT, 0, 1, 1024, 0, NULL},       {"cross_attn_norm", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
    {"qk_norm", DIT_CF_STR, 1, 0, 64, 0, NULL},            {"eps", DIT_CF_FLOAT, 0, 0, 1, 0, NULL},
    {"image_dim", DIT_CF_INT, 1, 1, 1 << 20, 0, NULL},     {"added_kv_proj_dim", DIT_CF_INT, 1, 1, 1 << 20, 0, NULL},
    {"rope_max_seq_len", DIT_CF_INT, 0, 1, 1 << 20, 0, NULL}, {"pos_embed_seq_len", DIT_CF_INT, 1, 1, 1 << 20, 0, NULL},
};

static const char kWanDefaults[] =
    "{\"patch_size\":[1,2,2],\"num_attention_heads\":40,\"attention_head_dim\":128,"
    "\"in_channels\":16,\"out_channels\":16,\"text_dim\":4096,\"freq_dim\":256,"
    "\"ffn_dim\":13824,\"num_layers\":40,\"cross_attn_norm\":true,"
    "\"qk_norm\":\"rms_norm_across_heads\",\"eps\":1e-6,\"image_dim\":null,"
    "\"added_kv_proj_dim\":null,\"rope_max_seq_len\":1024,\"pos_embed_seq_len\":null}";

/* The typed view of a normalized config (null optional fields read as 0). */
static void wan_typed(const cJSON *cfg, dit_wan_config_t *w) {
  const cJSON *ps = cJSON_GetObjectItemCaseSensitive(cfg, "patch_size");
  for (int i = 0; i < 3; i++) w->patch[i] = (int64_t)cJSON_GetArrayItem(ps, i)->valuedouble;
  w->heads = dit_config_int(cfg, "num_attention_heads");
  w->head_dim = dit_config_int(cfg, "attention_head_dim");
  w->in_channels = dit_config_int(cfg, "in_channels");
  w->out_channels = dit_config_int(cfg, "out_channels");
  w->text_dim = dit_config_int(cfg, "text_dim");
  w->freq_dim = dit_config_int(cfg, "freq_dim");
  w->ffn_dim = dit_config_int(cfg, "ffn_dim");
  w->layers = dit_config_int(cfg, "num_layers");
  w->rope_max_seq_len = dit_config_int(cfg, "rope_max_seq_len");
  w->image_dim = dit_config_int(cfg, "image_dim");
  w->added_kv_proj_dim = dit_config_int(cfg, "added_kv_proj_dim");
  w->pos_embed_seq_len = dit_config_int(cfg, "pos_embed_seq_len");
  w->cross_attn_norm = dit_config_bool(cfg, "cross_attn_norm");
  w->eps = dit_config_num(cfg, "eps");
}

static dit_status_t wan_parse_config(dit_model_t *m, const dit_json_t *raw) {
  DIT_RETURN_IF(dit_config_read(kWanFields, sizeof kWanFields / sizeof kWanFields[0], kWanDefaults, "WanTransformer3DModel", raw,
                                &m->config));
  cJSON *cfg = m->config;
  /* out_channels = out_channels or in_channels, as diffusers resolves it. */
  const cJSON *oc = cJSON_GetObjectItemCaseSensitive(cfg, "out_channels");
  if (cJSON_IsNull(oc) || oc->valuedouble == 0) {
    cJSON *n = cJSON_CreateNumber((double)dit_config_int(cfg, "in_channels"));
    if (!n || !cJSON_ReplaceItemInObjectCaseSensitive(cfg, "out_channels", n)) {
      cJSON_Delete(n);
      return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  const cJSON *qk = cJSON_GetObjectItemCaseSensitive(cfg, "qk_norm");
  if (!cJSON_IsString(qk) || strcmp(qk->valuestring, "rms_norm_across_heads")) {
    char q[96] = "null";
    if (cJSON_IsString(qk)) dit_json_quote(qk->valuestring, q);
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'qk_norm' = %s: only \"rms_norm_across_heads\" is supported", raw->what, q);
  }
  wan_typed(cfg, &m->wan);
  if (m->wan.freq_dim % 2)
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'freq_dim' = %" PRId64 ": odd sinusoidal widths are not supported", raw->what,
                   m->wan.freq_dim);
  int64_t hd = m->wan.head_dim, hw = 2 * (hd / 6), td = hd - 2 * hw;
  if (td % 2)
    return DIT_ERR(INVALID_ARGUMENT, "%s: field 'attention_head_dim' = %" PRId64 ": its rotary split t/h/w = %" PRId64 "/%" PRId64 "/%" PRId64 " has an odd part",
                   raw->what, hd, td, hw, hw);
  return DIT_OK;
}

/* ---- variants ---- */

static const struct {
  const char *name;
  int vae_t, vae_s;
} kWanVariants[] = {
    {"wan2.1", 4, 8},        /* also Wan2.2 A14B, whose VAE is Wan2.1's */
    {"wan2.2-ti2v", 4, 16}, /* the TI2V-5B model's VAE compresses 16x spatially */
};

/* The variant names the VAE factors when no vae/config.json gives them: --variant if given,
 * else a pipeline's expand_timesteps (the TI2V variant), else a bare transformer's 48 latent
 * channels. A VAE config that was read must agree with an explicit --variant and with the
 * transformer's latent channels. */
static dit_status_t pick_variant(dit_model_t *m, const char *want, const char *vae_what) {
  int idx = -1;
  if (want) {
    for (size_t i = 0; i < sizeof kWanVariants / sizeof kWanVariants[0]; i++)
      if (!strcmp(kWanVariants[i].name, want)) idx = (int)i;
    if (idx < 0) return DIT_ERR(INVALID_ARGUMENT, "--variant %s: unknown Wan variant (wan2.1, wan2.2-ti2v)", want);
  } else if (m->pipeline.index.class_name[0]) {
    idx = m->pipeline.index.expand_timesteps ? 1 : 0;
  } else {
    idx = m->wan.in_channels == 48 ? 1 : 0;
  }
  snprintf(m->variant, sizeof m->variant, "%s", kWanVariants[idx].name);
  dit_vae_factors_t *vae = &m->pipeline.vae;
  if (vae->source[0]) {
    if (want && (vae->spatial != kWanVariants[idx].vae_s || vae->temporal != kWanVariants[idx].vae_t))
      return DIT_ERR(INVALID_ARGUMENT,
                     "--variant %s: its VAE compresses %dx spatially and %dx temporally, but %s has "
                     "scale_factor_spatial = %d, scale_factor_temporal = %d",
                     want, kWanVariants[idx].vae_s, kWanVariants[idx].vae_t, vae_what, vae->spatial, vae->temporal);
    if (vae->z_dim != m->wan.out_channels)
      return DIT_ERR(INVALID_ARGUMENT, "%s: field 'z_dim' = %" PRId64 ", but %s/config.json has out_channels = %" PRId64
                     ": the transformer's latents are not this VAE's",
                     vae_what, vae->z_dim, m->model_dir, m->wan.out_channels);
  } else {
    vae->spatial = kWanVariants[idx].vae_s;
    vae->temporal = kWanVariants[idx].vae_t;
    snprintf(vae->source, sizeof vae->source, "variant");
  }
  m->vae_temporal = vae->temporal;
  m->vae_spatial = vae->spatial;
  return DIT_OK;
}

/* ---- expected weights ---- */

/* Wan2.1 I2V: the CLIP image embedder and, in each cross-attention, the image tokens' k/v. */
static void wan_expected_image(const dit_wan_config_t *w, dit_expected_t *l) {
  const int64_t D = w->heads * w->head_dim, I = w->image_dim, A = w->added_kv_proj_dim, d1[1] = {D};
  if (I) {
    int64_t i1[1] = {I};
    dit_expected_why(l, "field 'image_dim' = %" PRId64, I);
    dit_expected_add(l, 1, i1, "condition_embedder.image_embedder.norm1.weight");
    dit_expected_add(l, 1, i1, "condition_embedder.image_embedder.norm1.bias");
    dit_expected_linear(l, I, I, 1, "condition_embedder.image_embedder.ff.net.0.proj");
    dit_expected_linear(l, D, I, 1, "condition_embedder.image_embedder.ff.net.2");
    dit_expected_add(l, 1, d1, "condition_embedder.image_embedder.norm2.weight");
    dit_expected_add(l, 1, d1, "condition_embedder.image_embedder.norm2.bias");
    if (w->pos_embed_seq_len) {
      int64_t pe[3] = {1, w->pos_embed_seq_len, I};
      dit_expected_why(l, "field 'pos_embed_seq_len' = %" PRId64, w->pos_embed_seq_len);
      dit_expected_add(l, 3, pe, "condition_embedder.image_embedder.pos_embed");
    }
  }
  if (A) {
    dit_expected_why(l, "field 'added_kv_proj_dim' = %" PRId64, A);
    for (int64_t i = 0; i < w->layers; i++) {
      dit_expected_linear(l, D, A, 1, "blocks.%" PRId64 ".attn2.add_k_proj", i);
      dit_expected_linear(l, D, A, 1, "blocks.%" PRId64 ".attn2.add_v_proj", i);
      dit_expected_add(l, 1, d1, "blocks.%" PRId64 ".attn2.norm_added_k.weight", i);
    }
  }
  dit_expected_why(l, NULL);
}

/* Tensors a checkpoint may hold besides: diffusers ignores these too. */
static const char *const kWanIgnored[] = {"norm_added_q", NULL};

static void wan_expected(const dit_model_t *m, dit_expected_t *l) {
  const dit_wan_config_t *w = &m->wan;
  int64_t D = w->heads * w->head_dim, P = w->patch[0] * w->patch[1] * w->patch[2];
  wan_expected_image(w, l);
  int64_t pe[5] = {D, w->in_channels, w->patch[0], w->patch[1], w->patch[2]}, d1[1] = {D};
  dit_expected_add(l, 5, pe, "patch_embedding.weight");
  dit_expected_add(l, 1, d1, "patch_embedding.bias");
  dit_expected_embedder(l, D, w->freq_dim, "condition_embedder.time_embedder");
  dit_expected_linear(l, 6 * D, D, 1, "condition_embedder.time_proj");
  dit_expected_embedder(l, D, w->text_dim, "condition_embedder.text_embedder");
  for (int64_t i = 0; i < w->layers; i++) {
    int64_t sst[3] = {1, 6, D};
    dit_expected_add(l, 3, sst, "blocks.%" PRId64 ".scale_shift_table", i);
    for (int a = 1; a <= 2; a++) {
      static const char *const proj[] = {"to_q", "to_k", "to_v", "to_out.0"};
      for (int k = 0; k < 4; k++) dit_expected_linear(l, D, D, 1, "blocks.%" PRId64 ".attn%d.%s", i, a, proj[k]);
      dit_expected_add(l, 1, d1, "blocks.%" PRId64 ".attn%d.norm_q.weight", i, a);
      dit_expected_add(l, 1, d1, "blocks.%" PRId64 ".attn%d.norm_k.weight", i, a);
    }
    if (w->cross_attn_norm) {
      dit_expected_add(l, 1, d1, "blocks.%" PRId64 ".norm2.weight", i);
      dit_expected_add(l, 1, d1, "blocks.%" PRId64 ".norm2.bias", i);
    }
    dit_expected_linear(l, w->ffn_dim, D, 1, "blocks.%" PRId64 ".ffn.net.0.proj", i);
    dit_expected_linear(l, D, w->ffn_dim, 1, "blocks.%" PRId64 ".ffn.net.2", i);
  }
  dit_expected_linear(l, w->out_channels * P, D, 1, "proj_out");
  int64_t sst[3] = {1, 2, D};
  dit_expected_add(l, 3, sst, "scale_shift_table");
}

static dit_status_t wan_check_compilable(const dit_model_t *m) {
  const char *cls = m->pipeline.index.class_name;
  if (cls[0] && strncmp(cls, "Wan", 3))
    return DIT_ERR(UNIMPLEMENTED, "%s/model_index.json: field '_class_name' = \"%s\": a WanTransformer3DModel runs in WanPipeline or "
                   "WanImageToVideoPipeline", m->pipeline.dir, cls);
  const dit_wan_config_t *w = &m->wan;
  const int64_t D = w->heads * w->head_dim;
  if (w->pos_embed_seq_len)
    return DIT_ERR(UNIMPLEMENTED, "%s/config.json: field 'pos_embed_seq_len' = %" PRId64 ": first-last-frame image tokens (Wan2.1 "
                   "FLF2V, two images' tokens per sample) are not supported yet; expected null",
                   m->model_dir, w->pos_embed_seq_len);
  if (!w->image_dim != !w->added_kv_proj_dim)
    return DIT_ERR(UNIMPLEMENTED, "%s/config.json: field '%s' = %" PRId64 " but '%s' is null: image conditioning needs both the image "
                   "embedder (image_dim) and the cross-attention's image K/V (added_kv_proj_dim)",
                   m->model_dir, w->image_dim ? "image_dim" : "added_kv_proj_dim", w->image_dim ? w->image_dim : w->added_kv_proj_dim,
                   w->image_dim ? "added_kv_proj_dim" : "image_dim");
  if (w->added_kv_proj_dim && w->added_kv_proj_dim != D)
    return DIT_ERR(INVALID_ARGUMENT, "%s/config.json: field 'added_kv_proj_dim' = %" PRId64 ", expected %" PRId64
                   " (num_attention_heads x attention_head_dim): the image embedder's output is what add_k_proj reads",
                   m->model_dir, w->added_kv_proj_dim, D);
  /* in_channels != out_channels without image tokens is Wan2.2-I2V-A14B's forward: the
   * condition's channels concatenated to the latents, read by the patch embedding alone. */
  return DIT_OK;
}

static dit_status_t wan_pipeline_identity(const dit_model_t *m, cJSON **out) {
  *out = NULL;
  const dit_pipeline_t *p = &m->pipeline;
  const int plain = (!p->index.class_name[0] || !strcmp(p->index.class_name, "WanPipeline")) && p->n_experts <= 1 &&
                    !p->index.expand_timesteps;
  int variant_vae = 0;
  for (size_t i = 0; i < sizeof kWanVariants / sizeof kWanVariants[0]; i++)
    if (!strcmp(kWanVariants[i].name, m->variant))
      variant_vae = kWanVariants[i].vae_s == p->vae.spatial && kWanVariants[i].vae_t == p->vae.temporal;
  /* What compiled before these facts were read keeps its identity: the variant in the
   * identity already names its VAE factors. */
  if (plain && variant_vae) return DIT_OK;
  cJSON *o = cJSON_CreateObject();
  if (!o) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  int ok = cJSON_AddStringToObject(o, "class", p->index.class_name) != NULL;
  ok = ok && cJSON_AddNumberToObject(o, "experts", p->n_experts) != NULL;
  if (p->index.has_boundary_ratio) ok = ok && cJSON_AddNumberToObject(o, "boundary_ratio", p->index.boundary_ratio) != NULL;
  else ok = ok && cJSON_AddNullToObject(o, "boundary_ratio") != NULL;
  ok = ok && cJSON_AddBoolToObject(o, "expand_timesteps", p->index.expand_timesteps) != NULL;
  cJSON *vae = ok ? cJSON_AddObjectToObject(o, "vae") : NULL;
  ok = vae && cJSON_AddNumberToObject(vae, "scale_factor_spatial", p->vae.spatial) &&
       cJSON_AddNumberToObject(vae, "scale_factor_temporal", p->vae.temporal);
  if (ok && p->vae.z_dim) ok = cJSON_AddNumberToObject(vae, "z_dim", (double)p->vae.z_dim) != NULL;
  if (!ok) {
    cJSON_Delete(o);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  *out = o;
  return DIT_OK;
}

static dit_status_t wan_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out) {
  int vt = m->vae_temporal, vs = m->vae_spatial;
  if (r->frames < 0) return DIT_ERR(INVALID_ARGUMENT, "compile needs --frames: %s makes videos", m->model_class);
  if (r->frames < 1 || (r->frames - 1) % vt)
    return DIT_ERR(INVALID_ARGUMENT, "--frames %" PRId64 ": %s needs frames = %d*k + 1 (e.g. %" PRId64 ")", r->frames,
                   m->variant, vt, r->frames < 1 ? 1 : (r->frames - 1) / vt * vt + 1);
  int64_t sp_h = vs * m->wan.patch[1], sp_w = vs * m->wan.patch[2];
  if (r->height < 1 || r->height % sp_h)
    return DIT_ERR(INVALID_ARGUMENT, "--height %" PRId64 ": must be a positive multiple of %" PRId64 " (VAE %d x patch %" PRId64 ")",
                   r->height, sp_h, vs, m->wan.patch[1]);
  if (r->width < 1 || r->width % sp_w)
    return DIT_ERR(INVALID_ARGUMENT, "--width %" PRId64 ": must be a positive multiple of %" PRId64 " (VAE %d x patch %" PRId64 ")",
                   r->width, sp_w, vs, m->wan.patch[2]);
  out->channels = m->wan.in_channels;
  out->frames = (r->frames - 1) / vt + 1;
  out->height = r->height / vs;
  out->width = r->width / vs;
  if (out->frames % m->wan.patch[0])
    return DIT_ERR(INVALID_ARGUMENT, "--frames %" PRId64 ": %" PRId64 " latent frames are not divisible by the temporal patch %" PRId64,
                   r->frames, out->frames, m->wan.patch[0]);
  int64_t grid[3] = {out->frames / m->wan.patch[0], out->height / m->wan.patch[1], out->width / m->wan.patch[2]};
  for (int i = 0; i < 3; i++)
    if (grid[i] > m->wan.rope_max_seq_len)
      return DIT_ERR(INVALID_ARGUMENT, "shape: %" PRId64 " patches along %s exceed config.json rope_max_seq_len %" PRId64,
                     grid[i], i == 0 ? "frames" : i == 1 ? "height" : "width", m->wan.rope_max_seq_len);
  out->tokens = grid[0] * grid[1] * grid[2];
  out->image_len = 0;
  if (m->wan.image_dim) {
    /* diffusers splits the context as "image = all but the last 512 tokens". */
    if (r->text_len != 512)
      return DIT_ERR(INVALID_ARGUMENT, "--text-len %" PRId64 ": an image-conditioned model (config.json image_dim = %" PRId64
                     ") takes exactly 512 text tokens: diffusers' attention treats all context tokens before the last 512 as image tokens",
                     r->text_len, m->wan.image_dim);
    out->image_len = r->image_len ? r->image_len : 257;
    if (out->image_len < 1 || out->image_len > 65536)
      return DIT_ERR(INVALID_ARGUMENT, "--image-len %" PRId64 ": expected 1..65536", r->image_len);
  } else if (r->image_len) {
    return DIT_ERR(INVALID_ARGUMENT, "--image-len %" PRId64 ": %s/config.json has image_dim null: the model takes no image tokens",
                   r->image_len, m->model_dir);
  }
  return DIT_OK;
}

/* ---- graph ---- */

/* diffusers keeps these modules in fp32 when the model is cast to half precision. */
static const char *const kWanF32Keys[] = {"time_embedder", "scale_shift_table", ".norm2.", ".norm1.", NULL};

static dit_status_t wan_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  int tp = req->tp > 1 ? req->tp : 1;
  if (req->tp_rank < 0 || req->tp_rank >= tp)
    return DIT_ERR(INVALID_ARGUMENT, "tensor-parallel rank %d outside 0..%d", req->tp_rank, tp - 1);
  if (m->wan.heads % tp)
    return DIT_ERR(INVALID_ARGUMENT, "--tp %d: config.json num_attention_heads = %" PRId64 " is not divisible by %d", tp,
                   m->wan.heads, tp);
  if (m->wan.ffn_dim % tp)
    return DIT_ERR(INVALID_ARGUMENT, "--tp %d: config.json ffn_dim = %" PRId64 " is not divisible by %d", tp, m->wan.ffn_dim, tp);
  int cp = req->cp > 1 ? req->cp : 1;
  const int64_t ntok = (ls.frames / m->wan.patch[0]) * (ls.height / m->wan.patch[1]) * (ls.width / m->wan.patch[2]);
  if (cp > 1) {
    if (req->cp_rank < 0 || req->cp_rank >= cp)
      return DIT_ERR(INVALID_ARGUMENT, "context-parallel rank %d outside 0..%d", req->cp_rank, cp - 1);
    if (req->cp_mode < DIT_CP_GATHER || req->cp_mode > DIT_CP_USP)
      return DIT_ERR(UNIMPLEMENTED, "--cp %d: context-parallel mode %d (gather, ulysses, ring, usp)", cp, req->cp_mode);
    if (req->cp_mode == DIT_CP_USP && (req->ulysses < 2 || cp % req->ulysses || cp / req->ulysses < 2))
      return DIT_ERR(INVALID_ARGUMENT, "--cp %d --cp-mode usp --ulysses %d: U must be >= 2 and divide cp into a ring of >= 2", cp,
                     req->ulysses);
    if (req->cp_mode == DIT_CP_USP && (m->wan.heads / tp) % req->ulysses)
      return DIT_ERR(INVALID_ARGUMENT, "--cp-mode usp --ulysses %d: %" PRId64 " heads per tensor-parallel rank are not divisible by %d",
                     req->ulysses, m->wan.heads / tp, req->ulysses);
    if (ntok % cp)
      return DIT_ERR(INVALID_ARGUMENT, "--cp %d: the shape has %" PRId64 " tokens, which do not split into %d equal parts", cp, ntok, cp);
    if (req->cp_mode == DIT_CP_ULYSSES && (m->wan.heads / tp) % cp)
      return DIT_ERR(INVALID_ARGUMENT, "--cp %d --cp-mode ulysses: %" PRId64 " heads per tensor-parallel rank are not divisible by %d",
                     cp, m->wan.heads / tp, cp);
  }
  if (req->sparse.pattern && cp > 1)
    return DIT_ERR(UNIMPLEMENTED, "--sparse-attn %s with --cp %d: a rank's share of the tokens is not the schedule's tiles",
                   dit_sparse_attn_name(req->sparse.pattern), cp);
  if (req->sp && (tp < 2 || (ntok / cp) % tp))
    return DIT_ERR(INVALID_ARGUMENT, "--sp: needs --tp >= 2 and each context-parallel share of %" PRId64 " tokens divisible by tp %d",
                   ntok / cp, tp);
  const dit_blocks_options_t bo = {.dtype = req->dtype,
                                   .heads = m->wan.heads,
                                   .head_dim = m->wan.head_dim,
                                   .eps = m->wan.eps,
                                   .f32_keys = kWanF32Keys,
                                   .tp = tp,
                                   .tp_rank = req->tp_rank,
                                   .cp = cp,
                                   .cp_rank = cp > 1 ? req->cp_rank : 0,
                                   .cp_mode = cp > 1 ? req->cp_mode : 0,
                                   .ulysses = req->ulysses,
                                   .sp = req->sp ? 1 : 0,
                                   .reuse_group = cp > 1 ? req->reuse_group : 0,
                                   .reuse_copies = req->reuse_copies,
                                   .reuse_merge = req->reuse_merge};
  dit_graph_t *g;
  dit_blocks_t *b;
  dit_status_t s = dit_blocks_begin(m->weights, &bo, &g, &b);
  if (s) return s;
  const int sp = bo.sp;
  const int64_t tl = ntok / cp, t0 = bo.cp_rank * tl;
  const int64_t B = req->batch, L = req->text_len;
  const int64_t f = ls.frames / m->wan.patch[0], h = ls.height / m->wan.patch[1], w = ls.width / m->wan.patch[2];
  const dit_dtype_t dt = req->dtype;

  /* Wan2.2 TI2V's pipeline gives every patch token its own timestep (the conditioning frame's
   * at 0): timestep [B, tokens], and the modulation of every block and of the output norm
   * becomes a table per token. */
  const int per_token = m->pipeline.index.expand_timesteps;
  int64_t xs[5] = {B, ls.channels, ls.frames, ls.height, ls.width}, ts[2] = {B, ntok}, es[3] = {B, L, m->wan.text_dim};
  dit_vid_t x = dit_graph_input(g, "hidden_states", dt, 5, xs);
  dit_vid_t t = dit_graph_input(g, "timestep", DIT_F32, per_token ? 2 : 1, ts);
  dit_vid_t ehs = dit_graph_input(g, "encoder_hidden_states", dt, 3, es);
  dit_vid_t ehi = -1;
  if (ls.image_len) {
    int64_t is[3] = {B, ls.image_len, m->wan.image_dim};
    ehi = dit_graph_input(g, "encoder_hidden_states_image", dt, 3, is);
  }

  dit_vid_t hs = dit_blocks_patch_embed(b, x, m->wan.patch, "patch_embedding");
  /* This rank's contiguous share of the tokens (in frame order) from here to the output:
   * its cp share, and with sequence parallelism its tp part of that. Per-token timesteps are
   * sliced the same way, so each rank embeds only the timesteps of its own tokens. */
  const int sliced = cp > 1 || sp;
  const int64_t s0 = t0 + (sp ? req->tp_rank * (tl / tp) : 0), sn = sp ? tl / tp : tl;
  if (sliced) hs = dit_blocks_slice_tokens(b, hs, s0, sn, dt, "tokens");

  /* Per token, one timestep a latent frame: diffusers' pipelines give all tokens of a frame the
   * same (the conditioning frame's 0, the others t), so the time embedding and the modulation
   * rows are made once a frame (token_rows: each frame's first token) and every token reads its
   * frame's row; the runtime refuses a timestep input that varies within a frame. A rank embeds
   * the frames its tokens [s0, s0 + sn) touch, the first of them from token offset s0 mod hw. */
  dit_token_group_t rows = {1, 0};
  dit_vid_t tf = t;
  if (per_token) {
    dit_attrs_t ta = {0};
    dit_attrs_set_int(&ta, "group", h * w);
    tf = dit_graph_op(g, DIT_OP_TOKEN_ROWS, &t, 1, &ta, DIT_F32, "timestep.frames");
    rows.group = h * w;
  }
  /* Time embedding in fp32 (time_embedder is kept in fp32), cast like encoder states. */
  dit_vid_t te = dit_blocks_sinusoid(b, tf, m->wan.freq_dim, 1, 0.0, "time.sinusoid");
  if (per_token && sliced) {
    const int64_t f0 = s0 / rows.group, f1 = (s0 + sn - 1) / rows.group;
    te = dit_blocks_slice_tokens(b, te, f0, f1 - f0 + 1, DIT_F32, "time.sinusoid.frames");
    rows.offset = s0 - f0 * rows.group;
  }
  te = dit_blocks_linear(b, te, "condition_embedder.time_embedder.linear_1", DIT_F32, "time.linear_1");
  te = dit_blocks_unary(b, DIT_OP_SILU, te, DIT_F32, "time.silu");
  dit_vid_t temb = dit_blocks_linear(b, te, "condition_embedder.time_embedder.linear_2", dt, "temb");
  dit_vid_t tact = dit_blocks_unary(b, DIT_OP_SILU, temb, dt, "temb.silu");
  dit_vid_t tproj = dit_blocks_linear(b, tact, "condition_embedder.time_proj", dt, "timestep_proj");

  const dit_blocks_mlp_t text = {"condition_embedder.text_embedder.linear_1", "condition_embedder.text_embedder.linear_2",
                                 DIT_OP_GELU_TANH, "text.linear_1", "text.gelu", "context", 0, dt};
  dit_vid_t ctx = dit_blocks_mlp(b, ehs, &text);
  /* The image tokens' context, kept apart from the text's: diffusers concatenates the two and
   * its attention splits them again at the same place. */
  dit_vid_t ictx = -1;
  if (ehi >= 0) {
    const double ln_eps = 1e-5; /* FP32LayerNorm's default */
    const dit_blocks_mlp_t ff = {"condition_embedder.image_embedder.ff.net.0.proj",
                                 "condition_embedder.image_embedder.ff.net.2", DIT_OP_GELU, "image.ff.up", "image.ff.gelu",
                                 "image.ff.down", 0, dt};
    ictx = dit_blocks_layernorm(b, ehi, "condition_embedder.image_embedder.norm1", ln_eps, "image.norm1");
    ictx = dit_blocks_mlp(b, ictx, &ff);
    ictx = dit_blocks_layernorm(b, ictx, "condition_embedder.image_embedder.norm2", ln_eps, "image_context");
  }

  /* Wan's 3D rotary embedding: the head split t/h/w over the token grid, this rank's tokens
   * starting at t0 under context parallelism. */
  dit_attrs_t ra = {0};
  int64_t hw = 2 * (m->wan.head_dim / 6);
  dit_attrs_set_int(&ra, "heads", m->wan.heads / tp);
  dit_attrs_set_int(&ra, "f", f);
  dit_attrs_set_int(&ra, "h", h);
  dit_attrs_set_int(&ra, "w", w);
  dit_attrs_set_int(&ra, "t_dim", m->wan.head_dim - 2 * hw);
  dit_attrs_set_int(&ra, "h_dim", hw);
  dit_attrs_set_int(&ra, "w_dim", hw);
  dit_attrs_set_float(&ra, "theta", 10000.0);
  if (cp > 1) dit_attrs_set_int(&ra, "t0", t0);

  /* The self-attention's sparse schedule over the patched token grid, one constant every sparse
   * layer reads; none when the pattern covers the grid (dense, exactly as without it). Text
   * tokens are the cross-attention's keys, which stay dense. */
  dit_vid_t tiles = -1;
  if (req->sparse.pattern && req->sparse.dense_layers < m->wan.layers) {
    int32_t *rows = NULL;
    int64_t td[2];
    s = dit_sparse_attn_schedule(&req->sparse, f, h, w, &rows, &td[0], &td[1]);
    if (s) {
      dit_blocks_destroy(b);
      dit_graph_destroy(g);
      return s;
    }
    if (rows) tiles = dit_graph_constant(g, "sparse_attn.tiles", DIT_I32, 2, td, rows);
    free(rows);
  }

  char n[160], k[160], kq[160], kk[160], kv[160], knq[160], knk[160];
  for (int64_t i = 0; i < m->wan.layers; i++) {
    dit_graph_set_block(g, (int32_t)i);
#define NAME(s) (snprintf(n, sizeof n, "blocks.%" PRId64 ".%s", i, s), n)
#define KEY(buf, s) (snprintf(buf, sizeof buf, "blocks.%" PRId64 ".%s", i, s), buf)
    dit_blocks_mod_t mod = dit_blocks_modulation(b, dit_blocks_weight(b, "%s", KEY(k, "scale_shift_table")), tproj,
                                                 per_token ? &rows : NULL, NAME("mod"));

    dit_vid_t n1 = dit_blocks_sp_gather(b, dit_blocks_adaln(b, hs, mod, 0, 1, NAME("norm1")), NAME("norm1.all_tokens"));
    const dit_blocks_attn_keys_t self = {KEY(kq, "attn1.to_q"), KEY(kk, "attn1.to_k"), KEY(kv, "attn1.to_v"),
                                         KEY(knq, "attn1.norm_q.weight"), KEY(knk, "attn1.norm_k.weight"), 0};
    dit_blocks_qkv_t a1 = dit_blocks_attn_project(b, n1, n1, &self, NAME("attn1"));
    a1.q = dit_graph_op(g, DIT_OP_ROPE, &a1.q, 1, &ra, dt, NAME("attn1.rope_q"));
    a1.k = dit_graph_op(g, DIT_OP_ROPE, &a1.k, 1, &ra, dt, NAME("attn1.rope_k"));
    dit_vid_t a = tiles >= 0 && i >= req->sparse.dense_layers ? dit_blocks_attention_tiled(b, a1.q, a1.k, a1.v, tiles, NAME("attn1"))
                                                              : dit_blocks_attention_tokens(b, a1.q, a1.k, a1.v, NAME("attn1"));
    a = dit_blocks_linear_row(b, a, KEY(k, "attn1.to_out.0"), NAME("attn1.out"));
    hs = dit_blocks_gated_add(b, hs, a, mod, 2, NAME("attn1.residual"));

    dit_vid_t n2 = hs; /* norm2 is an identity without cross_attn_norm */
    if (m->wan.cross_attn_norm) n2 = dit_blocks_layernorm(b, hs, KEY(k, "norm2"), m->wan.eps, NAME("norm2"));
    n2 = dit_blocks_sp_gather(b, n2, NAME("norm2.all_tokens"));
    const dit_blocks_attn_keys_t cross = {KEY(kq, "attn2.to_q"), KEY(kk, "attn2.to_k"), KEY(kv, "attn2.to_v"),
                                          KEY(knq, "attn2.norm_q.weight"), KEY(knk, "attn2.norm_k.weight"), 0};
    dit_blocks_qkv_t a2p = dit_blocks_attn_project(b, n2, ctx, &cross, NAME("attn2"));
    dit_vid_t a2 = dit_blocks_attention(b, a2p.q, a2p.k, a2p.v, NAME("attn2.sdpa"));
    if (ictx >= 0) {
      /* The image tokens' own K/V, unrotated, attended by the same queries; heads split like
       * the text's, so under tensor parallelism the sum stays per rank before to_out. */
      dit_vid_t ki = dit_blocks_linear_col(b, ictx, KEY(k, "attn2.add_k_proj"), dt, NAME("attn2.k_img"));
      dit_vid_t vi = dit_blocks_linear_col(b, ictx, KEY(k, "attn2.add_v_proj"), dt, NAME("attn2.v_img"));
      ki = dit_blocks_qk_rmsnorm(b, ki, KEY(k, "attn2.norm_added_k.weight"), NAME("attn2.norm_added_k"));
      dit_vid_t ai = dit_blocks_attention(b, a2p.q, ki, vi, NAME("attn2.sdpa_img"));
      dit_vid_t sum_in[2] = {a2, ai};
      a2 = dit_graph_op(g, DIT_OP_ADD, sum_in, 2, NULL, dt, NAME("attn2.text_plus_img"));
    }
    a2 = dit_blocks_linear_row(b, a2, KEY(k, "attn2.to_out.0"), NAME("attn2.out"));
    dit_vid_t add_in[2] = {hs, a2};
    hs = dit_graph_op(g, DIT_OP_ADD, add_in, 2, NULL, dt, NAME("attn2.residual"));

    dit_vid_t n3 = dit_blocks_sp_gather(b, dit_blocks_adaln(b, hs, mod, 3, 4, NAME("norm3")), NAME("norm3.all_tokens"));
    char nu[192], na[192], nd[192];
    const dit_blocks_mlp_t ffn = {KEY(kq, "ffn.net.0.proj"), KEY(kk, "ffn.net.2"), DIT_OP_GELU_TANH,
                                  (snprintf(nu, sizeof nu, "blocks.%" PRId64 ".ffn.up", i), nu),
                                  (snprintf(na, sizeof na, "blocks.%" PRId64 ".ffn.gelu", i), na),
                                  (snprintf(nd, sizeof nd, "blocks.%" PRId64 ".ffn.down", i), nd), 1, dt};
    dit_vid_t f1 = dit_blocks_mlp(b, n3, &ffn);
    hs = dit_blocks_gated_add(b, hs, f1, mod, 5, NAME("ffn.residual"));
#undef NAME
#undef KEY
  }
  dit_graph_set_block(g, -1);
  dit_blocks_mod_t mod = dit_blocks_modulation(b, dit_blocks_weight(b, "scale_shift_table"), temb, per_token ? &rows : NULL, "out.mod");
  dit_vid_t no = dit_blocks_adaln(b, hs, mod, 0, 1, "norm_out");
  dit_vid_t y = dit_blocks_linear(b, no, "proj_out", dt, "proj_out");
  y = dit_blocks_sp_gather(b, y, "proj_out.tp_tokens");
  y = dit_blocks_cp_gather(b, y, "proj_out.all_tokens");
  dit_vid_t sample = dit_blocks_unpatchify(b, y, m->wan.patch, f, h, w, "unpatchify");
  dit_graph_mark_output(g, sample, "sample");
  return dit_blocks_finish(b, g, "Wan", out);
}

/* WanImageToVideoPipeline: with expand_timesteps (TI2V) the image's encoding is the first latent
 * frame; a transformer taking more channels than it gives reads the mask and the encoding of the
 * image followed by zero frames beside the latents, and image tokens when it has image_dim. */
static void wan_image_stages(const dit_model_t *m, dit_image_stages_t *out) {
  out->vae = m->pipeline.index.expand_timesteps ? DIT_IMAGE_FIRST_FRAME
             : m->wan.in_channels != m->wan.out_channels ? DIT_IMAGE_VIDEO
                                                         : DIT_IMAGE_NONE;
  out->image_encoder = out->vae == DIT_IMAGE_VIDEO && m->wan.image_dim > 0;
}

const dit_family_t dit_family_wan = {
    .name = "wan",
    .model_class = "WanTransformer3DModel",
    .parse_config = wan_parse_config,
    .expected = wan_expected,
    .ignored = kWanIgnored,
    .pick_variant = pick_variant,
    .check_compilable = wan_check_compilable,
    .pipeline_identity = wan_pipeline_identity,
    .latent_shape = wan_latent_shape,
    .build_graph = wan_build_graph,
    .image_stages = wan_image_stages,
};
