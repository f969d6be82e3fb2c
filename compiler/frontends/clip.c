/* The CLIP text encoder of FLUX.1's pipelines: transformers' CLIPTextModel (a pipeline's
 * text_encoder/ folder: config.json naming the class in `architectures`, model.safetensors),
 * compiled like a transformer for one shape: --batch B and --text-len L (at most
 * max_position_embeddings; FluxPipeline pads every prompt to 77). Input input_ids, i32 [B, L]
 * (torch's int64 ids are converted with a range check when set); outputs last_hidden_state
 * [B, L, hidden] and pooler_output [B, hidden], the final hidden state of each item's
 * end-of-text token, which is what FluxPipeline keeps.
 *
 * The model: token embedding plus the learned position embedding of positions 0..L-1, then per
 * layer a pre-LayerNorm causal self-attention (q, k, v, out_proj with biases, scores scaled by
 * head_dim^-0.5) and a pre-LayerNorm MLP (fc1, quick_gelu, fc2), each added to the residual; a
 * final LayerNorm. The pipeline passes no attention mask, so the causal mask is the only one:
 * a constant score bias [L, L, heads] of 0 on and below the diagonal and -1e30 above, whose
 * keys weigh exactly zero after the softmax as transformers' masked ones do (finite, so no
 * kernel's running maximum can meet inf - inf).
 *
 * The pooled token: with eos_token_id 2 in the config (openai/clip-vit-large-patch14's, kept
 * by transformers for compatibility) the first position of the largest id, the end of text being
 * the vocabulary's last token (and the pad token); with any other eos_token_id the first position
 * of that id (0 if absent), as transformers' CLIPTextTransformer picks it (op token_select).
 *
 * Checkpoint names: text_model.* (the pipelines' checkpoints) or the same names without the
 * prefix (what newer transformers saves for CLIPTextModel).
 *
 * The image encoder of Wan2.1's image-to-video pipelines (family clip_vision): transformers'
 * CLIPVisionModel (a pipeline's image_encoder/ folder; CLIPVisionModelWithProjection is read alike,
 * its visual_projection accepted and unread), compiled for --batch B images of the config's
 * image_size S (--height and --width may be left out, or given as S; --text-len is not read). Input
 * pixel_values, f32 [B, num_channels, S, S], normalized as the pipeline's image processor leaves
 * them; output hidden_states_penultimate [B, 1 + (S/p)^2, hidden], hidden_states[-2] of
 * output_hidden_states, which WanImageToVideoPipeline.encode_image returns as image_embeds.
 *
 * The model: the p x p patches (a convolution of stride p without bias: patchify, then a linear
 * over each patch's (channel, row, column) values), the class embedding as token 0, the learned
 * position embedding added, pre_layrnorm (hidden_states[0]), then the text model's layer without a
 * mask. hidden_states[-2] is the output of the first num_hidden_layers - 1 layers: only those are
 * built; the last layer's and post_layernorm's tensors are checked and unread. Checkpoint names:
 * vision_model.* (the pipelines' checkpoints, and CLIPVisionModelWithProjection's) or the same
 * names without the prefix (what newer transformers saves for CLIPVisionModel). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/frontend.h"
#include "compiler/frontends/blocks.h"
#include "compiler/frontends/family.h"

/* The additive score bias of the keys after their query. */
#define CLIP_MASKED (-1e30f)

/* ---- config ---- */

/* CLIPTextConfig's fields that shape the text transformer, with the range this build accepts. */
static const dit_config_field_t kClipFields[] = {
    {"vocab_size", DIT_CF_INT, 0, 1, INT32_MAX, 0, NULL},
    {"hidden_size", DIT_CF_INT, 0, 1, 65536, 0, NULL},
    {"intermediate_size", DIT_CF_INT, 0, 1, 1 << 20, 0, NULL},
    {"num_hidden_layers", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    {"num_attention_heads", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    {"max_position_embeddings", DIT_CF_INT, 0, 1, 16384, 0, NULL},
    {"hidden_act", DIT_CF_STR, 0, 0, 64, 0, NULL},
    {"layer_norm_eps", DIT_CF_FLOAT, 0, 0, 1, 0, NULL},
    {"eos_token_id", DIT_CF_INT, 0, 0, INT32_MAX, 0, NULL},
    {"model_type", DIT_CF_STR, 0, 0, 64, 0, NULL},
};

/* CLIPTextConfig's defaults of those fields (transformers' CLIPTextConfig.__init__). */
static const char kClipDefaults[] =
    "{\"vocab_size\":49408,\"hidden_size\":512,\"intermediate_size\":2048,\"num_hidden_layers\":12,"
    "\"num_attention_heads\":8,\"max_position_embeddings\":77,\"hidden_act\":\"quick_gelu\",\"layer_norm_eps\":1e-5,"
    "\"eos_token_id\":49407,\"model_type\":\"clip_text_model\"}";

/* Fields of a saved config that do not change either encoder's forward: bookkeeping, the
 * projection of CLIPTextModelWithProjection and CLIPVisionModelWithProjection, the tokenizer's ids
 * and the training's settings (dropout is off in inference). */
static const char *const kClipIgnored[] = {
    "architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "projection_dim", "pad_token_id",
    "bos_token_id", "attention_dropout", "dropout", "initializer_range", "initializer_factor", NULL,
};

/* Buffers an older checkpoint may hold besides the parameters (position_ids: arange, rebuilt here). */
static const char *const kClipExtraTensors[] = {"position_ids", NULL};

/* CLIPVisionConfig's fields that shape the vision transformer, with the range this build accepts. */
static const dit_config_field_t kClipVisionFields[] = {
    {"hidden_size", DIT_CF_INT, 0, 1, 65536, 0, NULL},
    {"intermediate_size", DIT_CF_INT, 0, 1, 1 << 20, 0, NULL},
    {"num_hidden_layers", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    {"num_attention_heads", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    {"num_channels", DIT_CF_INT, 0, 1, 64, 0, NULL},
    {"image_size", DIT_CF_INT, 0, 1, 16384, 0, NULL},
    {"patch_size", DIT_CF_INT, 0, 1, 16384, 0, NULL},
    {"hidden_act", DIT_CF_STR, 0, 0, 64, 0, NULL},
    {"layer_norm_eps", DIT_CF_FLOAT, 0, 0, 1, 0, NULL},
    {"model_type", DIT_CF_STR, 0, 0, 64, 0, NULL},
};

/* CLIPVisionConfig's defaults of those fields (transformers' CLIPVisionConfig). */
static const char kClipVisionDefaults[] =
    "{\"hidden_size\":768,\"intermediate_size\":3072,\"num_hidden_layers\":12,\"num_attention_heads\":12,\"num_channels\":3,"
    "\"image_size\":224,\"patch_size\":32,\"hidden_act\":\"quick_gelu\",\"layer_norm_eps\":1e-5,\"model_type\":\"clip_vision_model\"}";

/* The fields both models' encoders share, from the normalized config, checked: model_type (the
 * configuration class's, named `config` in messages), the activation, the heads. */
static dit_status_t clip_encoder_config(dit_model_t *m, const dit_json_t *raw, const char *model_type, const char *config) {
  const cJSON *cfg = m->config;
  dit_clip_config_t *c = &m->clip;
  c->hidden = dit_config_int(cfg, "hidden_size");
  c->intermediate = dit_config_int(cfg, "intermediate_size");
  c->layers = dit_config_int(cfg, "num_hidden_layers");
  c->heads = dit_config_int(cfg, "num_attention_heads");
  c->eps = dit_config_num(cfg, "layer_norm_eps");
  const char *mt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cfg, "model_type"));
  if (strcmp(mt, model_type))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'model_type' = \"%s\": only \"%s\" is supported (%s)", raw->what, mt, model_type, config);
  const char *act = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act"));
  if (!strcmp(act, "quick_gelu"))
    c->act = DIT_OP_QUICK_GELU;
  else if (!strcmp(act, "gelu"))
    c->act = DIT_OP_GELU;
  else
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'hidden_act' = \"%s\": only \"quick_gelu\" and \"gelu\" are supported", raw->what, act);
  if (c->hidden % c->heads)
    return DIT_ERR(INVALID_ARGUMENT, "%s: field 'hidden_size' = %" PRId64 " is not a multiple of num_attention_heads = %" PRId64,
                   raw->what, c->hidden, c->heads);
  return DIT_OK;
}

static dit_status_t clip_parse_config(dit_model_t *m, const dit_json_t *raw) {
  DIT_RETURN_IF(dit_config_read_ignoring(kClipFields, sizeof kClipFields / sizeof kClipFields[0], kClipDefaults, "CLIPTextModel",
                                         kClipIgnored, raw, &m->config));
  dit_clip_config_t *c = &m->clip;
  memset(c, 0, sizeof *c);
  c->vocab = dit_config_int(m->config, "vocab_size");
  c->positions = dit_config_int(m->config, "max_position_embeddings");
  const int64_t eos = dit_config_int(m->config, "eos_token_id");
  c->eos = eos == 2 ? -1 : eos;
  return clip_encoder_config(m, raw, "clip_text_model", "CLIPTextModel's configuration");
}

static dit_status_t clip_vision_parse_config(dit_model_t *m, const dit_json_t *raw) {
  DIT_RETURN_IF(dit_config_read_ignoring(kClipVisionFields, sizeof kClipVisionFields / sizeof kClipVisionFields[0], kClipVisionDefaults,
                                         m->model_class, kClipIgnored, raw, &m->config));
  dit_clip_config_t *c = &m->clip;
  memset(c, 0, sizeof *c);
  c->channels = dit_config_int(m->config, "num_channels");
  c->image = dit_config_int(m->config, "image_size");
  c->patch = dit_config_int(m->config, "patch_size");
  DIT_RETURN_IF(clip_encoder_config(m, raw, "clip_vision_model", "CLIPVisionModel's configuration"));
  /* transformers' strided convolution would leave the last image_size % patch_size rows and
   * columns unread; patchify takes whole patches only. */
  if (c->image % c->patch)
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'image_size' = %" PRId64 " is not a multiple of patch_size = %" PRId64
                   ": only images that split into whole patches are supported", raw->what, c->image, c->patch);
  const int64_t side = c->image / c->patch;
  c->positions = 1 + side * side;
  return DIT_OK;
}

/* ---- checkpoint ---- */

/* Buffers an older checkpoint may hold besides the parameters (position_ids: arange, rebuilt
 * here), and CLIPVisionModelWithProjection's projection, which the image embeddings do not use. */
static const char *const kClipVisionExtraTensors[] = {"position_ids", "visual_projection.", NULL};

/* `nested` (the pipelines' checkpoints) unless the checkpoint names its tensors without it: has `probe`. */
static const char *prefix(const dit_model_t *m, const char *probe, const char *nested) {
  return m->weights && dit_safetensors_find(m->weights, probe) ? "" : nested;
}

static const char *text_prefix(const dit_model_t *m) { return prefix(m, "final_layer_norm.weight", "text_model."); }
static const char *vision_prefix(const dit_model_t *m) { return prefix(m, "pre_layrnorm.weight", "vision_model."); }

static void expected_norm(dit_expected_t *l, int64_t D, const char *p, const char *name) {
  const int64_t w[1] = {D};
  dit_expected_add(l, 1, w, "%s%s.weight", p, name);
  dit_expected_add(l, 1, w, "%s%s.bias", p, name);
}

/* Every encoder layer's tensors, both models' (the vision model's last layer too: unread, but
 * CLIPVisionModel's checkpoint has it). */
static void expected_layers(const dit_clip_config_t *c, const char *p, dit_expected_t *l) {
  const int64_t D = c->hidden;
  for (int64_t i = 0; i < c->layers; i++) {
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    char n[64];
    for (int k = 0; k < 4; k++) dit_expected_linear(l, D, D, 1, "%sencoder.layers.%" PRId64 ".self_attn.%s", p, i, proj[k]);
    dit_expected_linear(l, c->intermediate, D, 1, "%sencoder.layers.%" PRId64 ".mlp.fc1", p, i);
    dit_expected_linear(l, D, c->intermediate, 1, "%sencoder.layers.%" PRId64 ".mlp.fc2", p, i);
    for (int k = 1; k <= 2; k++) {
      snprintf(n, sizeof n, "encoder.layers.%" PRId64 ".layer_norm%d", i, k);
      expected_norm(l, D, p, n);
    }
  }
}

static void clip_expected(const dit_model_t *m, dit_expected_t *l) {
  const dit_clip_config_t *c = &m->clip;
  const char *p = text_prefix(m);
  const int64_t tok[2] = {c->vocab, c->hidden}, pos[2] = {c->positions, c->hidden};
  dit_expected_add(l, 2, tok, "%sembeddings.token_embedding.weight", p);
  dit_expected_add(l, 2, pos, "%sembeddings.position_embedding.weight", p);
  expected_layers(c, p, l);
  expected_norm(l, c->hidden, p, "final_layer_norm");
}

static void clip_vision_expected(const dit_model_t *m, dit_expected_t *l) {
  const dit_clip_config_t *c = &m->clip;
  const char *p = vision_prefix(m);
  const int64_t D = c->hidden, cls[1] = {D}, conv[4] = {D, c->channels, c->patch, c->patch}, pos[2] = {c->positions, D};
  dit_expected_add(l, 1, cls, "%sembeddings.class_embedding", p);
  dit_expected_add(l, 4, conv, "%sembeddings.patch_embedding.weight", p);
  dit_expected_add(l, 2, pos, "%sembeddings.position_embedding.weight", p);
  expected_norm(l, D, p, "pre_layrnorm");
  expected_layers(c, p, l);
  expected_norm(l, D, p, "post_layernorm");
}

/* ---- variant, shape ---- */

/* Tokens only, at most one per position embedding. */
static dit_status_t clip_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out) {
  DIT_RETURN_IF(dit_family_text_shape(m, r, out));
  if (r->text_len > m->clip.positions)
    return DIT_ERR(INVALID_ARGUMENT, "--text-len %" PRId64 ": %s has %" PRId64 " position embeddings (max_position_embeddings)",
                   r->text_len, m->model_class, m->clip.positions);
  return DIT_OK;
}

/* One image of the config's size per batch item: --height and --width left out or that size;
 * tokens: the class token and the patches. */
static dit_status_t clip_vision_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out) {
  const int64_t S = m->clip.image;
  if (r->frames >= 0)
    return DIT_ERR(INVALID_ARGUMENT, "--frames %" PRId64 ": %s encodes images: leave --frames out", r->frames, m->model_class);
  static const char *const flag[] = {"--height", "--width"};
  const int64_t v[] = {r->height, r->width};
  for (int i = 0; i < 2; i++)
    if (v[i] >= 0 && v[i] != S)
      return DIT_ERR(INVALID_ARGUMENT, "%s %" PRId64 ": %s encodes %" PRId64 " x %" PRId64 " images (config image_size): leave %s out or give %"
                     PRId64, flag[i], v[i], m->model_class, S, S, flag[i], S);
  if (r->image_len)
    return DIT_ERR(INVALID_ARGUMENT, "--image-len %" PRId64 ": %s takes no image tokens", r->image_len, m->model_class);
  memset(out, 0, sizeof *out);
  out->tokens = m->clip.positions;
  return DIT_OK;
}

/* ---- graph ---- */

/* Encoder layer i (checkpoint prefix p) of both models on h [B, T, hidden]: a pre-LayerNorm
 * self-attention (q, k, v, out_proj with biases, scores scaled by head_dim^-0.5, plus the score
 * bias `mask` [T, T, heads] unless mask < 0) and a pre-LayerNorm MLP (fc1, the activation, fc2),
 * each added to the residual. */
static dit_vid_t clip_layer(dit_blocks_t *b, const dit_clip_config_t *c, const char *p, int64_t i, dit_dtype_t dt, dit_vid_t mask,
                            dit_vid_t h) {
  dit_graph_t *g = dit_blocks_graph(b);
  char k[160], n[128];
  dit_graph_set_block(g, (int32_t)i);
  snprintf(k, sizeof k, "%sencoder.layers.%" PRId64 ".layer_norm1", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".layer_norm1", i);
  dit_vid_t x = dit_blocks_layernorm(b, h, k, c->eps, n);
  dit_vid_t qkv[4];
  static const char *const proj[] = {"q_proj", "k_proj", "v_proj"};
  for (int j = 0; j < 3; j++) {
    snprintf(k, sizeof k, "%sencoder.layers.%" PRId64 ".self_attn.%s", p, i, proj[j]);
    snprintf(n, sizeof n, "layer%" PRId64 ".%s", i, proj[j]);
    qkv[j] = dit_blocks_linear(b, x, k, dt, n);
  }
  qkv[3] = mask;
  dit_attrs_t at = {0};
  dit_attrs_set_int(&at, "heads", c->heads);
  dit_attrs_set_float(&at, "scale", 1.0 / sqrt((double)(c->hidden / c->heads)));
  if (mask >= 0) dit_attrs_set_int(&at, "bias", 1);
  snprintf(n, sizeof n, "layer%" PRId64 ".sdpa", i);
  dit_vid_t a = dit_graph_op(g, DIT_OP_ATTENTION, qkv, mask >= 0 ? 4 : 3, &at, dt, n);
  snprintf(k, sizeof k, "%sencoder.layers.%" PRId64 ".self_attn.out_proj", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".out_proj", i);
  a = dit_blocks_linear(b, a, k, dt, n);
  snprintf(n, sizeof n, "layer%" PRId64 ".attn_residual", i);
  h = dit_blocks_add(b, h, a, n);
  snprintf(k, sizeof k, "%sencoder.layers.%" PRId64 ".layer_norm2", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".layer_norm2", i);
  x = dit_blocks_layernorm(b, h, k, c->eps, n);
  snprintf(k, sizeof k, "%sencoder.layers.%" PRId64 ".mlp.fc1", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".fc1", i);
  x = dit_blocks_linear(b, x, k, dt, n);
  snprintf(n, sizeof n, "layer%" PRId64 ".act", i);
  x = dit_blocks_unary(b, (dit_op_kind_t)c->act, x, dt, n);
  snprintf(k, sizeof k, "%sencoder.layers.%" PRId64 ".mlp.fc2", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".fc2", i);
  x = dit_blocks_linear(b, x, k, dt, n);
  snprintf(n, sizeof n, "layer%" PRId64 ".mlp_residual", i);
  return dit_blocks_add(b, h, x, n);
}

/* The constants' bytes: i32 position ids (each of B rows 0..T-1) and, with causal_heads > 0, the
 * causal score bias [T, T, causal_heads]; both freed by the caller. */
static dit_status_t clip_constants(int64_t B, int64_t T, int64_t causal_heads, int32_t **pos, float **causal) {
  *pos = malloc(sizeof **pos * (size_t)(B * T));
  *causal = causal_heads > 0 ? malloc(sizeof **causal * (size_t)(T * T * causal_heads)) : NULL;
  if (!*pos || (causal_heads > 0 && !*causal)) {
    free(*pos);
    free(*causal);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory for the position ids%s", causal_heads > 0 ? " and the causal mask" : "");
  }
  for (int64_t i = 0; i < B * T; i++) (*pos)[i] = (int32_t)(i % T);
  for (int64_t q = 0; q < T && causal_heads > 0; q++)
    for (int64_t k = 0; k < T; k++)
      for (int64_t h = 0; h < causal_heads; h++) (*causal)[(q * T + k) * causal_heads + h] = k > q ? CLIP_MASKED : 0.0f;
  return DIT_OK;
}

static dit_status_t clip_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  const dit_clip_config_t *c = &m->clip;
  if ((req->tp > 1) || (req->cp > 1) || req->sp) return DIT_ERR(UNIMPLEMENTED, "--tp/--cp/--sp: CLIPTextModel compiles for one rank");
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  const int64_t B = req->batch, L = req->text_len, H = c->heads, D = c->hidden;
  const dit_dtype_t dt = req->dtype;
  /* The constants: every item's position ids 0..L-1, and the causal score bias. */
  int32_t *pos;
  float *causal;
  DIT_RETURN_IF(clip_constants(B, L, H, &pos, &causal));
  const dit_blocks_options_t bo = {.dtype = dt, .heads = H, .head_dim = D / H, .eps = c->eps, .tp = 1, .cp = 1};
  dit_graph_t *g;
  dit_blocks_t *b;
  dit_status_t s = dit_blocks_begin(m->weights, &bo, &g, &b);
  if (s) {
    free(pos);
    free(causal);
    return s;
  }
  const char *p = text_prefix(m);
  const int64_t is[2] = {B, L}, cd[3] = {L, L, H};
  dit_vid_t ids = dit_graph_input(g, "input_ids", DIT_I32, 2, is);
  dit_vid_t pids = dit_graph_constant(g, "position_ids", DIT_I32, 2, is, pos);
  dit_vid_t mask = dit_graph_constant(g, "causal_mask", DIT_F32, 3, cd, causal);
  free(pos);
  free(causal);
  dit_vid_t in[2] = {ids, dit_blocks_weight(b, "%sembeddings.token_embedding.weight", p)};
  dit_vid_t tok = dit_graph_op(g, DIT_OP_EMBEDDING, in, 2, NULL, dt, "token_embedding");
  in[0] = pids;
  in[1] = dit_blocks_weight(b, "%sembeddings.position_embedding.weight", p);
  dit_vid_t h = dit_blocks_add(b, tok, dit_graph_op(g, DIT_OP_EMBEDDING, in, 2, NULL, dt, "position_embedding"), "embeddings");
  for (int64_t i = 0; i < c->layers; i++) h = clip_layer(b, c, p, i, dt, mask, h);
  dit_graph_set_block(g, -1);
  char k[160];
  snprintf(k, sizeof k, "%sfinal_layer_norm", p);
  h = dit_blocks_layernorm(b, h, k, c->eps, "final_layer_norm");
  dit_graph_mark_output(g, h, "last_hidden_state");
  dit_attrs_t ea = {0};
  dit_attrs_set_int(&ea, "eos", c->eos);
  in[0] = h;
  in[1] = ids;
  dit_graph_mark_output(g, dit_graph_op(g, DIT_OP_TOKEN_SELECT, in, 2, &ea, dt, "pooler"), "pooler_output");
  return dit_blocks_finish(b, g, "CLIPTextModel", out);
}

static dit_status_t clip_vision_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  const dit_clip_config_t *c = &m->clip;
  if ((req->tp > 1) || (req->cp > 1) || req->sp)
    return DIT_ERR(UNIMPLEMENTED, "--tp/--cp/--sp: %s compiles for one rank", m->model_class);
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  const int64_t B = req->batch, S = c->image, P = c->patch, T = c->positions, H = c->heads, D = c->hidden;
  const dit_dtype_t dt = req->dtype;
  /* The constants: every item's position ids 0..T-1, and its class token's row (0) of the class
   * embedding viewed as a one-row table. */
  int32_t *pos, *cls_ids = calloc((size_t)B, sizeof *cls_ids);
  float *none;
  if (!cls_ids) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory for the class token ids");
  dit_status_t s = clip_constants(B, T, 0, &pos, &none);
  if (s) {
    free(cls_ids);
    return s;
  }
  const dit_blocks_options_t bo = {.dtype = dt, .heads = H, .head_dim = D / H, .eps = c->eps, .tp = 1, .cp = 1};
  dit_graph_t *g;
  dit_blocks_t *b;
  s = dit_blocks_begin(m->weights, &bo, &g, &b);
  if (s) {
    free(pos);
    free(cls_ids);
    return s;
  }
  const char *p = vision_prefix(m);
  const int64_t xs[4] = {B, c->channels, S, S}, video[5] = {B, c->channels, 1, S, S}, ps[2] = {B, T}, cs[2] = {B, 1}, row[2] = {1, D};
  dit_vid_t pids = dit_graph_constant(g, "position_ids", DIT_I32, 2, ps, pos);
  dit_vid_t cids = dit_graph_constant(g, "class_ids", DIT_I32, 2, cs, cls_ids);
  free(pos);
  free(cls_ids);
  /* The patch convolution: patchify a one-frame video into rows of (channel, row, column), the
   * order of the Conv2d weight [hidden, channels, p, p] flattened; then that weight as a linear. */
  dit_vid_t x = dit_graph_input(g, "pixel_values", DIT_F32, 4, xs);
  x = dit_blocks_reshape(b, x, 5, video, "pixel_values.video");
  dit_attrs_t pa = {0};
  dit_attrs_set_int(&pa, "pt", 1);
  dit_attrs_set_int(&pa, "ph", P);
  dit_attrs_set_int(&pa, "pw", P);
  x = dit_graph_op(g, DIT_OP_PATCHIFY, &x, 1, &pa, dt, "patchify");
  dit_vid_t in[2] = {x, dit_blocks_weight(b, "%sembeddings.patch_embedding.weight", p)};
  dit_vid_t patches = dit_graph_op(g, DIT_OP_LINEAR, in, 2, NULL, dt, "patch_embedding");
  in[0] = cids;
  in[1] = dit_blocks_reshape(b, dit_blocks_weight(b, "%sembeddings.class_embedding", p), 2, row, "class_embedding.table");
  dit_vid_t cls = dit_graph_op(g, DIT_OP_EMBEDDING, in, 2, NULL, dt, "class_embedding");
  dit_vid_t h = dit_blocks_concat(b, cls, patches, 1, "tokens");
  in[0] = pids;
  in[1] = dit_blocks_weight(b, "%sembeddings.position_embedding.weight", p);
  h = dit_blocks_add(b, h, dit_graph_op(g, DIT_OP_EMBEDDING, in, 2, NULL, dt, "position_embedding"), "embeddings");
  char k[160];
  snprintf(k, sizeof k, "%spre_layrnorm", p);
  h = dit_blocks_layernorm(b, h, k, c->eps, "pre_layrnorm");
  /* hidden_states[-2]: all layers but the last. */
  for (int64_t i = 0; i + 1 < c->layers; i++) h = clip_layer(b, c, p, i, dt, -1, h);
  dit_graph_set_block(g, -1);
  dit_graph_mark_output(g, h, "hidden_states_penultimate");
  return dit_blocks_finish(b, g, m->model_class, out);
}

const dit_family_t dit_family_clip_text = {
    .name = "clip_text",
    .model_class = "CLIPTextModel",
    .text_encoder = 1,
    .parse_config = clip_parse_config,
    .expected = clip_expected,
    .ignored = kClipExtraTensors,
    .pick_variant = dit_family_one_variant,
    .latent_shape = clip_latent_shape,
    .build_graph = clip_build_graph,
};

static const char *const kClipVisionOtherClasses[] = {"CLIPVisionModelWithProjection", NULL};

const dit_family_t dit_family_clip_vision = {
    .name = "clip_vision",
    .model_class = "CLIPVisionModel",
    .other_classes = kClipVisionOtherClasses,
    .image_encoder = 1,
    .parse_config = clip_vision_parse_config,
    .expected = clip_vision_expected,
    .ignored = kClipVisionExtraTensors,
    .pick_variant = dit_family_one_variant,
    .latent_shape = clip_vision_latent_shape,
    .build_graph = clip_vision_build_graph,
};
