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
 * prefix (what newer transformers saves for CLIPTextModel). */
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

/* Fields of a saved config that do not change the text transformer's forward: bookkeeping, the
 * projection of CLIPTextModelWithProjection, the tokenizer's ids and the training's settings
 * (dropout is off in inference). */
static const char *const kClipIgnored[] = {
    "architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "projection_dim", "pad_token_id",
    "bos_token_id", "attention_dropout", "dropout", "initializer_range", "initializer_factor", NULL,
};

/* Buffers an older checkpoint may hold besides the parameters (position_ids: arange, rebuilt here). */
static const char *const kClipExtraTensors[] = {"position_ids", NULL};

static dit_status_t clip_parse_config(dit_model_t *m, const dit_json_t *raw) {
  DIT_RETURN_IF(dit_config_read_ignoring(kClipFields, sizeof kClipFields / sizeof kClipFields[0], kClipDefaults, "CLIPTextModel",
                                         kClipIgnored, raw, &m->config));
  const cJSON *cfg = m->config;
  dit_clip_config_t *c = &m->clip;
  c->vocab = dit_config_int(cfg, "vocab_size");
  c->hidden = dit_config_int(cfg, "hidden_size");
  c->intermediate = dit_config_int(cfg, "intermediate_size");
  c->layers = dit_config_int(cfg, "num_hidden_layers");
  c->heads = dit_config_int(cfg, "num_attention_heads");
  c->positions = dit_config_int(cfg, "max_position_embeddings");
  c->eps = dit_config_num(cfg, "layer_norm_eps");
  const int64_t eos = dit_config_int(cfg, "eos_token_id");
  c->eos = eos == 2 ? -1 : eos;
  const char *mt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cfg, "model_type"));
  if (strcmp(mt, "clip_text_model"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'model_type' = \"%s\": only \"clip_text_model\" is supported (CLIPTextModel's configuration)",
                   raw->what, mt);
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

/* ---- checkpoint ---- */

/* "text_model." unless the checkpoint names its tensors without it. */
static const char *prefix(const dit_model_t *m) {
  return m->weights && dit_safetensors_find(m->weights, "final_layer_norm.weight") ? "" : "text_model.";
}

static void clip_expected(const dit_model_t *m, dit_expected_t *l) {
  const dit_clip_config_t *c = &m->clip;
  const char *p = prefix(m);
  const int64_t D = c->hidden, tok[2] = {c->vocab, D}, pos[2] = {c->positions, D}, w[1] = {D};
  dit_expected_add(l, 2, tok, "%sembeddings.token_embedding.weight", p);
  dit_expected_add(l, 2, pos, "%sembeddings.position_embedding.weight", p);
  for (int64_t i = 0; i < c->layers; i++) {
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    for (int k = 0; k < 4; k++) dit_expected_linear(l, D, D, 1, "%sencoder.layers.%" PRId64 ".self_attn.%s", p, i, proj[k]);
    dit_expected_linear(l, c->intermediate, D, 1, "%sencoder.layers.%" PRId64 ".mlp.fc1", p, i);
    dit_expected_linear(l, D, c->intermediate, 1, "%sencoder.layers.%" PRId64 ".mlp.fc2", p, i);
    for (int n = 1; n <= 2; n++) {
      dit_expected_add(l, 1, w, "%sencoder.layers.%" PRId64 ".layer_norm%d.weight", p, i, n);
      dit_expected_add(l, 1, w, "%sencoder.layers.%" PRId64 ".layer_norm%d.bias", p, i, n);
    }
  }
  dit_expected_add(l, 1, w, "%sfinal_layer_norm.weight", p);
  dit_expected_add(l, 1, w, "%sfinal_layer_norm.bias", p);
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

/* ---- graph ---- */

static dit_status_t clip_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  const dit_clip_config_t *c = &m->clip;
  if ((req->tp > 1) || (req->cp > 1) || req->sp) return DIT_ERR(UNIMPLEMENTED, "--tp/--cp/--sp: CLIPTextModel compiles for one rank");
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  const int64_t B = req->batch, L = req->text_len, H = c->heads, D = c->hidden;
  const dit_dtype_t dt = req->dtype;
  /* The constants: every item's position ids 0..L-1, and the causal score bias. */
  int32_t *pos = malloc(sizeof *pos * (size_t)(B * L));
  float *causal = malloc(sizeof *causal * (size_t)(L * L * H));
  if (!pos || !causal) {
    free(pos);
    free(causal);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory for the position ids and the causal mask");
  }
  for (int64_t i = 0; i < B * L; i++) pos[i] = (int32_t)(i % L);
  for (int64_t q = 0; q < L; q++)
    for (int64_t k = 0; k < L; k++)
      for (int64_t h = 0; h < H; h++) causal[(q * L + k) * H + h] = k > q ? CLIP_MASKED : 0.0f;
  const dit_blocks_options_t bo = {.dtype = dt, .heads = H, .head_dim = D / H, .eps = c->eps, .tp = 1, .cp = 1};
  dit_graph_t *g;
  dit_blocks_t *b;
  dit_status_t s = dit_blocks_begin(m->weights, &bo, &g, &b);
  if (s) {
    free(pos);
    free(causal);
    return s;
  }
  const char *p = prefix(m);
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
  for (int64_t i = 0; i < c->layers; i++) {
    char k[160], n[128];
    dit_graph_set_block(g, (int32_t)i);
    /* Causal self-attention: pre-LayerNorm, q, k, v with biases, the mask as a score bias. */
    snprintf(k, sizeof k, "%sencoder.layers.%" PRId64 ".layer_norm1", p, i);
    snprintf(n, sizeof n, "layer%" PRId64 ".layer_norm1", i);
    dit_vid_t x = dit_blocks_layernorm(b, h, k, c->eps, n);
    dit_vid_t qkv[5];
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj"};
    for (int j = 0; j < 3; j++) {
      snprintf(k, sizeof k, "%sencoder.layers.%" PRId64 ".self_attn.%s", p, i, proj[j]);
      snprintf(n, sizeof n, "layer%" PRId64 ".%s", i, proj[j]);
      qkv[j] = dit_blocks_linear(b, x, k, dt, n);
    }
    qkv[3] = mask;
    dit_attrs_t at = {0};
    dit_attrs_set_int(&at, "heads", H);
    dit_attrs_set_float(&at, "scale", 1.0 / sqrt((double)(D / H)));
    dit_attrs_set_int(&at, "bias", 1);
    snprintf(n, sizeof n, "layer%" PRId64 ".sdpa", i);
    dit_vid_t a = dit_graph_op(g, DIT_OP_ATTENTION, qkv, 4, &at, dt, n);
    snprintf(k, sizeof k, "%sencoder.layers.%" PRId64 ".self_attn.out_proj", p, i);
    snprintf(n, sizeof n, "layer%" PRId64 ".out_proj", i);
    a = dit_blocks_linear(b, a, k, dt, n);
    snprintf(n, sizeof n, "layer%" PRId64 ".attn_residual", i);
    h = dit_blocks_add(b, h, a, n);
    /* MLP: pre-LayerNorm, fc1, the activation, fc2. */
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
    h = dit_blocks_add(b, h, x, n);
  }
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
