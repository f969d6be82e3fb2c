/* The decoder-only language models that encode prompts: Qwen-Image's text encoder (transformers'
 * Qwen2_5_VLForConditionalGeneration, family qwen2_5_vl_text: its language model; the vision tower's
 * and lm_head's tensors are accepted and not read, the pipeline passes no pixels) and HunyuanVideo's
 * (LlamaModel, family llama_text), each a pipeline's text_encoder/ folder (config.json naming the
 * class in `architectures`, the checkpoint), compiled like a transformer for one shape: --batch B
 * and --text-len L. Inputs input_ids and attention_mask, i32 [B, L] (torch's int64 converted with a
 * range check when set); output hidden_states_selected [B, L, hidden]: the entry of
 * output_hidden_states the pipeline takes.
 *
 * Which hidden state: transformers' hidden_states has num_hidden_layers + 1 entries, entry k the
 * output of the first k layers (0: the embeddings) except the last, which is last_hidden_state,
 * after the final norm. The family picks the pipeline's: QwenImagePipeline takes hidden_states[-1]
 * (every layer, then the norm), HunyuanVideoPipeline hidden_states[-(num_hidden_layers_to_skip + 1)]
 * with its default skip 2, hidden_states[-3] (the first num_hidden_layers - 2 layers, no norm): only
 * those layers are built, the others' tensors and the norm checked and unread. No compile option
 * selects another one: no pipeline asks for it.
 *
 * The model: token embedding gather, then per layer a pre-RMSNorm causal self-attention and a
 * pre-RMSNorm SwiGLU MLP (down(silu(gate(x)) * up(x)), no biases), each added to the residual.
 * Every norm is x * rsqrt(mean(x^2) + eps) * w. The attention: q from heads * head_dim features,
 * k and v from num_key_value_heads * head_dim (grouped-query attention: key/value head g serves
 * query heads g * rep .. g * rep + rep - 1, rep = heads / kv_heads), q/k/v biases in Qwen2 (Llama:
 * q/k/v/o biases when attention_bias), rotary embeddings on q and k, scores scaled by
 * head_dim^-0.5, o_proj.
 *
 * Rotary embeddings: positions 0..L-1 for every row, padded ones included (transformers' own for
 * text: Qwen2.5-VL computes multimodal positions only with image or video grids; its three position
 * sections are then equal, so its rotary embedding is the 1-D one, inv_freq_j = theta^(-2j/head_dim)).
 * transformers rotates the halves of a head (rotate_half: feature j pairs with j + head_dim/2); the
 * rope_table op rotates interleaved pairs (2j, 2j + 1). The q and k projections' output features are
 * reordered per head to put feature j at 2j and j + head_dim/2 at 2j + 1 (graph constants made from
 * the checkpoint's rows): q.k per head is a sum over the same pairs in another order, so the scores
 * are the same, and v and o_proj keep their order. The key/value heads are rotated before they are
 * repeated (concatenations of the one head row), as their rotation does not depend on the query head.
 *
 * Masks: transformers' causal mask combined with the padding mask (a key is seen by a query at or
 * after it and when its own mask is 1). The causal part is attention's causal_block of one token
 * (never a dense mask: the keys after a query weigh exactly zero, as transformers' masked ones, and
 * the key blocks past a query block are not read); the padding part is the key bound of each item's
 * valid prefix (the pipelines pad on the right; a mask that is not a prefix is refused when set). A
 * padded query row sees the valid keys before it, all of them: transformers computes the same rows
 * (the pipelines drop them afterwards).
 *
 * Checkpoint names: Qwen2.5-VL's language model under model. (what transformers 5 writes, as the
 * pipelines' checkpoints), model.language_model. or language_model.; Llama's without a prefix
 * (LlamaModel's) or under model.; a rotary inv_freq buffer of an older checkpoint is accepted.
 *
 * bf16 (--dtype bf16): every module bf16 as transformers runs the model in bf16, norms and softmax
 * in fp32 inside their ops. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/frontend.h"
#include "compiler/frontends/blocks.h"
#include "compiler/frontends/family.h"

/* ---- config ---- */

/* The text configs' fields that shape the forward, with the range this build accepts (one table:
 * each family's config has a subset; the rest keep their defaults). */
static const dit_config_field_t kLmFields[] = {
    {"vocab_size", DIT_CF_INT, 0, 1, INT32_MAX, 0, NULL},
    {"hidden_size", DIT_CF_INT, 0, 1, 65536, 0, NULL},
    {"intermediate_size", DIT_CF_INT, 0, 1, 1 << 20, 0, NULL},
    {"num_hidden_layers", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    {"num_attention_heads", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    {"num_key_value_heads", DIT_CF_INT, 1, 1, 1024, 0, NULL},
    {"head_dim", DIT_CF_INT, 1, 2, 1024, 0, NULL},
    {"hidden_act", DIT_CF_STR, 0, 0, 64, 0, NULL},
    {"rms_norm_eps", DIT_CF_FLOAT, 0, 0, 1, 0, NULL},
    {"rope_theta", DIT_CF_FLOAT, 1, 1, 1000000000000LL, 0, NULL},
    {"max_position_embeddings", DIT_CF_INT, 0, 1, INT32_MAX, 0, NULL},
    {"attention_bias", DIT_CF_BOOL, 1, 0, 0, 0, NULL},
    {"mlp_bias", DIT_CF_BOOL, 1, 0, 0, 0, NULL},
    {"use_sliding_window", DIT_CF_BOOL, 1, 0, 0, 0, NULL},
    {"model_type", DIT_CF_STR, 0, 0, 64, 0, NULL},
};

/* transformers' Qwen2_5_VLTextConfig and LlamaConfig defaults of those fields (rope_theta null:
 * the rotary parameters' default, kDefaultTheta). */
static const char kQwenDefaults[] =
    "{\"vocab_size\":152064,\"hidden_size\":8192,\"intermediate_size\":29568,\"num_hidden_layers\":80,\"num_attention_heads\":64,"
    "\"num_key_value_heads\":8,\"head_dim\":null,\"hidden_act\":\"silu\",\"rms_norm_eps\":1e-5,\"rope_theta\":null,"
    "\"max_position_embeddings\":32768,\"attention_bias\":null,\"mlp_bias\":null,\"use_sliding_window\":false,"
    "\"model_type\":\"qwen2_5_vl_text\"}";
static const char kLlamaDefaults[] =
    "{\"vocab_size\":32000,\"hidden_size\":4096,\"intermediate_size\":11008,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
    "\"num_key_value_heads\":null,\"head_dim\":null,\"hidden_act\":\"silu\",\"rms_norm_eps\":1e-6,\"rope_theta\":null,"
    "\"max_position_embeddings\":2048,\"attention_bias\":false,\"mlp_bias\":false,\"use_sliding_window\":null,"
    "\"model_type\":\"llama\"}";

/* Fields of a saved config that do not change the text forward: bookkeeping, the tokenizer's ids,
 * the training's and generation's settings, the vision tower's config and ids (Qwen2.5-VL's top
 * level), and the fields read by hand below (the rotary parameters, layer_types). */
static const char *const kLmIgnored[] = {
    "architectures", "transformers_version", "torch_dtype", "dtype", "bos_token_id", "eos_token_id", "pad_token_id",
    "initializer_range", "attention_dropout", "use_cache", "tie_word_embeddings", "pretraining_tp", "max_window_layers",
    "sliding_window", "rope_parameters", "rope_scaling", "layer_types", "text_config", "vision_config", "image_token_id",
    "video_token_id", "vision_start_token_id", "vision_end_token_id", "vision_token_id", NULL,
};

/* One family's facts: its defaults, the model_type values of its text config, the rotary types it
 * accepts, its default theta, whether q/k/v have biases by architecture, its default checkpoint
 * prefix and the others it accepts, and the hidden state its pipeline takes. */
typedef struct lm_kind {
  const char *defaults;
  const char *model_types[2];
  const char *rope_types[2];
  double default_theta;
  int qkv_bias;
  const char *prefixes[3];
  int64_t hidden_index;
  const char *pipeline;
} lm_kind_t;

static const lm_kind_t kQwen = {
    kQwenDefaults, {"qwen2_5_vl_text", "qwen2_5_vl"}, {"default", "mrope"}, 1e6, 1,
    {"model.", "model.language_model.", "language_model."}, -1, "QwenImagePipeline",
};
static const lm_kind_t kLlama = {
    kLlamaDefaults, {"llama", NULL}, {"default", NULL}, 1e4, 0, {"", "model.", NULL}, -3, "HunyuanVideoPipeline",
};

static const lm_kind_t *kind_of(const dit_model_t *m) { return m->fam == &dit_family_qwen25vl_text ? &kQwen : &kLlama; }

static int one_of(const char *v, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (names[i] && v && !strcmp(v, names[i])) return 1;
  return 0;
}

/* The rotary parameters: rope_parameters (transformers 5) or rope_scaling (older configs; null: none),
 * of an accepted type; theta from them, else rope_theta, else the default. Qwen2.5-VL's
 * mrope_section must cover head_dim / 2 frequencies (it splits them over the three position rows,
 * equal for text). */
static dit_status_t lm_rope(const lm_kind_t *k, const char *m_class, const dit_json_t *src, dit_decoder_lm_config_t *c,
                            const cJSON *cfg) {
  const cJSON *theta = cJSON_GetObjectItemCaseSensitive(cfg, "rope_theta");
  c->rope_theta = cJSON_IsNumber(theta) ? theta->valuedouble : k->default_theta;
  static const char *const keys[] = {"rope_parameters", "rope_scaling"};
  for (int i = 0; i < 2; i++) {
    if (!dit_json_has(src, keys[i])) continue;
    dit_json_t r, v;
    DIT_RETURN_IF(dit_json_get(src, keys[i], &r));
    if (cJSON_IsNull(r.v)) continue;
    DIT_RETURN_IF(dit_json_expect_object(&r));
    const char *rt = NULL;
    const char *const type_keys[] = {"rope_type", "type"};
    for (int t = 0; t < 2; t++) {
      if (!dit_json_has(&r, type_keys[t])) continue;
      DIT_RETURN_IF(dit_json_get(&r, type_keys[t], &v));
      rt = cJSON_GetStringValue(v.v);
      if (!one_of(rt, k->rope_types, 2))
        return dit_json_error(&v, DIT_CODE_UNIMPLEMENTED,
                              "rotary type \"%s\": only %s's unscaled rotary embedding (\"%s\") is supported", rt ? rt : "",
                              m_class, k->rope_types[0]);
    }
    if (dit_json_has(&r, "rope_theta")) DIT_RETURN_IF(dit_json_num(&r, "rope_theta", 1, 1e12, &c->rope_theta));
    if (dit_json_has(&r, "mrope_section")) {
      int64_t sec[3];
      size_t n = 0;
      DIT_RETURN_IF(dit_json_get(&r, "mrope_section", &v));
      DIT_RETURN_IF(dit_json_as_int_array(&v, 3, 0, 1 << 20, sec, &n));
      const int64_t sum = n == 3 ? sec[0] + sec[1] + sec[2] : -1;
      if (sum != c->head_dim / 2)
        return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected three sections summing to head_dim / 2 = %" PRId64,
                              c->head_dim / 2);
    }
  }
  return DIT_OK;
}

static dit_status_t lm_parse_config(dit_model_t *m, const dit_json_t *raw) {
  const lm_kind_t *k = kind_of(m);
  /* Qwen2.5-VL: the language model's fields in text_config (transformers 5 writes only those;
   * older configs repeat them at the top level, which transformers then reads from text_config). */
  dit_json_t src = *raw;
  if (k == &kQwen && dit_json_has(raw, "text_config")) DIT_RETURN_IF(dit_json_object(raw, "text_config", &src));
  DIT_RETURN_IF(dit_config_read_ignoring(kLmFields, sizeof kLmFields / sizeof kLmFields[0], k->defaults, m->model_class,
                                         kLmIgnored, &src, &m->config));
  const cJSON *cfg = m->config;
  dit_decoder_lm_config_t *c = &m->decoder_lm;
  memset(c, 0, sizeof *c);
  c->vocab = dit_config_int(cfg, "vocab_size");
  c->hidden = dit_config_int(cfg, "hidden_size");
  c->intermediate = dit_config_int(cfg, "intermediate_size");
  c->layers = dit_config_int(cfg, "num_hidden_layers");
  c->heads = dit_config_int(cfg, "num_attention_heads");
  c->kv_heads = dit_config_int(cfg, "num_key_value_heads");
  if (!c->kv_heads) c->kv_heads = c->heads; /* transformers' default: one key/value head per query head */
  c->eps = dit_config_num(cfg, "rms_norm_eps");
  const char *what = src.what;
  const char *mt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cfg, "model_type"));
  if (!one_of(mt, k->model_types, 2))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'model_type' = \"%s\": only \"%s\" is supported (%s's language model)", what, mt,
                   k->model_types[0], m->model_class);
  const char *act = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act"));
  if (strcmp(act, "silu"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'hidden_act' = \"%s\": only \"silu\" (the SwiGLU MLP) is supported", what, act);
  if (c->hidden % c->heads)
    return DIT_ERR(INVALID_ARGUMENT, "%s: field 'hidden_size' = %" PRId64 " is not a multiple of num_attention_heads = %" PRId64,
                   what, c->hidden, c->heads);
  /* Qwen2.5-VL's attention uses hidden_size / heads whatever head_dim says; Llama's head_dim is its own. */
  c->head_dim = dit_config_int(cfg, "head_dim");
  if (!c->head_dim || k == &kQwen) {
    if (c->head_dim && c->head_dim != c->hidden / c->heads)
      return DIT_ERR(INVALID_ARGUMENT,
                     "%s: field 'head_dim' = %" PRId64 ": %s's attention heads are hidden_size / num_attention_heads = %" PRId64,
                     what, c->head_dim, m->model_class, c->hidden / c->heads);
    c->head_dim = c->hidden / c->heads;
  }
  if (c->head_dim % 2)
    return DIT_ERR(INVALID_ARGUMENT, "%s: head_dim %" PRId64 " is odd: rotary embeddings rotate pairs of features", what,
                   c->head_dim);
  if (c->heads % c->kv_heads)
    return DIT_ERR(INVALID_ARGUMENT,
                   "%s: field 'num_attention_heads' = %" PRId64 " is not a multiple of num_key_value_heads = %" PRId64, what, c->heads,
                   c->kv_heads);
  if (dit_config_bool(cfg, "use_sliding_window"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'use_sliding_window' = true: only full causal attention is supported", what);
  if (dit_config_bool(cfg, "mlp_bias"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'mlp_bias' = true: only the MLP without biases is supported", what);
  if (k == &kQwen && dit_config_bool(cfg, "attention_bias"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'attention_bias' = true: %s's attention has q/k/v biases and none on o_proj", what,
                   m->model_class);
  c->qkv_bias = k->qkv_bias || dit_config_bool(cfg, "attention_bias");
  c->o_bias = k == &kLlama && dit_config_bool(cfg, "attention_bias");
  if (dit_json_has(&src, "layer_types")) {
    dit_json_t lt, v;
    dit_json_iter_t it;
    DIT_RETURN_IF(dit_json_get(&src, "layer_types", &lt));
    size_t n_types;
    DIT_RETURN_IF(dit_json_expect_array(&lt, 1024, &n_types));
    dit_json_iter_init(&lt, &it);
    while (dit_json_iter_next(&it, &v)) {
      const char *t = cJSON_GetStringValue(v.v);
      if (!t || strcmp(t, "full_attention"))
        return dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "layer type \"%s\": only \"full_attention\" is supported", t ? t : "");
    }
  }
  DIT_RETURN_IF(lm_rope(k, m->model_class, &src, c, cfg));
  /* The rotary theta the graph uses, in the normalized config (the bundle's identity). */
  cJSON *th = cJSON_CreateNumber(c->rope_theta);
  if (!th || !cJSON_ReplaceItemInObjectCaseSensitive(m->config, "rope_theta", th)) {
    cJSON_Delete(th);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  /* hidden_states[index]: entry n + 1 + index, the output of that many layers; the last entry normed. */
  const int64_t entry = c->layers + 1 + k->hidden_index;
  if (entry < 0)
    return DIT_ERR(INVALID_ARGUMENT,
                   "%s: field 'num_hidden_layers' = %" PRId64 ": %s takes hidden_states[%" PRId64 "], which needs at least %" PRId64
                   " layers", what, c->layers, k->pipeline, k->hidden_index, -1 - k->hidden_index);
  c->run_layers = entry;
  c->final_norm = entry == c->layers;
  return DIT_OK;
}

/* ---- checkpoint ---- */

/* The language model's key prefix: the first of the family's whose embedding table the checkpoint
 * holds (the family's usual one without a checkpoint). */
static const char *lm_prefix(const dit_model_t *m) {
  const lm_kind_t *k = kind_of(m);
  for (int i = 0; m->weights && i < 3 && k->prefixes[i]; i++) {
    char key[96];
    snprintf(key, sizeof key, "%sembed_tokens.weight", k->prefixes[i]);
    if (dit_safetensors_find(m->weights, key)) return k->prefixes[i];
  }
  return k->prefixes[0];
}

static void lm_expected(const dit_model_t *m, dit_expected_t *l) {
  const dit_decoder_lm_config_t *c = &m->decoder_lm;
  const char *p = lm_prefix(m);
  const int64_t D = c->hidden, q = c->heads * c->head_dim, kv = c->kv_heads * c->head_dim, emb[2] = {c->vocab, D}, w[1] = {D};
  dit_expected_add(l, 2, emb, "%sembed_tokens.weight", p);
  for (int64_t i = 0; i < c->layers; i++) {
    dit_expected_add(l, 1, w, "%slayers.%" PRId64 ".input_layernorm.weight", p, i);
    dit_expected_linear(l, q, D, c->qkv_bias, "%slayers.%" PRId64 ".self_attn.q_proj", p, i);
    dit_expected_linear(l, kv, D, c->qkv_bias, "%slayers.%" PRId64 ".self_attn.k_proj", p, i);
    dit_expected_linear(l, kv, D, c->qkv_bias, "%slayers.%" PRId64 ".self_attn.v_proj", p, i);
    dit_expected_linear(l, D, q, c->o_bias, "%slayers.%" PRId64 ".self_attn.o_proj", p, i);
    dit_expected_add(l, 1, w, "%slayers.%" PRId64 ".post_attention_layernorm.weight", p, i);
    dit_expected_linear(l, c->intermediate, D, 0, "%slayers.%" PRId64 ".mlp.gate_proj", p, i);
    dit_expected_linear(l, c->intermediate, D, 0, "%slayers.%" PRId64 ".mlp.up_proj", p, i);
    dit_expected_linear(l, D, c->intermediate, 0, "%slayers.%" PRId64 ".mlp.down_proj", p, i);
  }
  dit_expected_add(l, 1, w, "%snorm.weight", p);
}

/* Tensors besides the language model's: Qwen2.5-VL's vision tower and lm_head (the pipeline runs
 * neither), an older checkpoint's rotary buffers. */
static const char *const kQwenExtraTensors[] = {"visual.", "lm_head.", "rotary_emb.inv_freq", NULL};
static const char *const kLlamaExtraTensors[] = {"rotary_emb.inv_freq", NULL};

/* ---- graph ---- */

/* x @ key.weight^T (+ key.bias when bias), the weight given (a reordered constant) or the
 * checkpoint's (w < 0). */
static dit_vid_t lm_linear(dit_blocks_t *b, dit_vid_t x, dit_vid_t w, dit_vid_t bias, const char *key, dit_dtype_t dt,
                           const char *name) {
  dit_vid_t ins[3] = {x, w >= 0 ? w : dit_blocks_weight(b, "%s.weight", key), bias};
  return dit_graph_op(dit_blocks_graph(b), DIT_OP_LINEAR, ins, bias >= 0 ? 3 : 2, NULL, dt, name);
}

/* q or k of `heads` heads at key, its output features reordered from rotate-half to interleaved
 * pairs by rows (one head's order repeated per head: row h*Dh + 2j is h*Dh + j, row h*Dh + 2j + 1 is
 * h*Dh + j + Dh/2), then rotated by the table cs. */
static dit_vid_t lm_rotated(dit_blocks_t *b, dit_vid_t x, const char *key, int bias, const int64_t *rows, int64_t n, dit_vid_t cs,
                            dit_dtype_t dt, const char *name) {
  char k[200], c[200];
  snprintf(k, sizeof k, "%s.weight", key);
  snprintf(c, sizeof c, "%s.weight_pairs", name);
  dit_vid_t w = dit_blocks_weight_rows(b, k, rows, n, c);
  dit_vid_t bv = -1;
  if (bias) {
    snprintf(k, sizeof k, "%s.bias", key);
    snprintf(c, sizeof c, "%s.bias_pairs", name);
    bv = dit_blocks_weight_rows(b, k, rows, n, c);
  }
  dit_vid_t y = lm_linear(b, x, w, bv, key, dt, name);
  snprintf(c, sizeof c, "%s.rope", name);
  return dit_blocks_rope_table(b, y, cs, c);
}

/* Key/value heads x [B, L, kv * Dh] repeated for the query heads: [B, L, kv * rep * Dh], kv head g
 * at heads g * rep .. g * rep + rep - 1 (transformers' repeat_kv), built by doubling concatenations. */
static dit_vid_t lm_repeat_kv(dit_blocks_t *b, dit_vid_t x, int64_t B, int64_t L, int64_t kv, int64_t rep, int64_t Dh,
                              const char *name) {
  if (rep == 1) return x;
  char n[160];
  const int64_t one[5] = {B, L, kv, 1, Dh}, all[3] = {B, L, kv * rep * Dh};
  snprintf(n, sizeof n, "%s.head_rows", name);
  dit_vid_t unit = dit_blocks_reshape(b, x, 5, one, n), acc = -1, pow2 = unit;
  /* acc gathers the powers of two of rep: 1, 2, 4, ... copies along dim 3. */
  for (int64_t r = rep, p = 1; r; r >>= 1, p <<= 1) {
    if (r & 1) {
      snprintf(n, sizeof n, "%s.copies%" PRId64, name, p);
      acc = acc < 0 ? pow2 : dit_blocks_concat(b, acc, pow2, 3, n);
    }
    if (r > 1) {
      snprintf(n, sizeof n, "%s.double%" PRId64, name, 2 * p);
      pow2 = dit_blocks_concat(b, pow2, pow2, 3, n);
    }
  }
  snprintf(n, sizeof n, "%s.repeated", name);
  return dit_blocks_reshape(b, acc, 3, all, n);
}

/* The constants: the rotary table [L, Dh] of (cos, sin) pairs of positions 0..L-1 in transformers'
 * fp32 arithmetic (inv_freq = 1 / theta^(2j/Dh), angle = position * inv_freq), and the rows that
 * reorder one projection's output features (heads of Dh); freed by the caller. */
static dit_status_t lm_constants(const dit_decoder_lm_config_t *c, int64_t L, float **cs, int64_t **rows) {
  const int64_t Dh = c->head_dim, H = c->heads, half = Dh / 2;
  *cs = malloc(sizeof **cs * (size_t)(L * Dh));
  *rows = malloc(sizeof **rows * (size_t)(H * Dh));
  if (!*cs || !*rows) {
    free(*cs);
    free(*rows);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory for the rotary table");
  }
  for (int64_t j = 0; j < half; j++) {
    const float inv = 1.0f / powf((float)c->rope_theta, (float)(2 * j) / (float)Dh);
    for (int64_t t = 0; t < L; t++) {
      const float a = (float)t * inv;
      (*cs)[t * Dh + 2 * j] = cosf(a);
      (*cs)[t * Dh + 2 * j + 1] = sinf(a);
    }
  }
  for (int64_t h = 0; h < H; h++)
    for (int64_t j = 0; j < half; j++) {
      (*rows)[h * Dh + 2 * j] = h * Dh + j;
      (*rows)[h * Dh + 2 * j + 1] = h * Dh + j + half;
    }
  return DIT_OK;
}

/* Decoder layer i (checkpoint prefix p) on h [B, L, hidden]. */
static dit_vid_t lm_layer(dit_blocks_t *b, const dit_decoder_lm_config_t *c, const char *p, int64_t i, int64_t B, int64_t L,
                          dit_dtype_t dt, dit_vid_t cs, dit_vid_t bound, const int64_t *rows, dit_vid_t h) {
  dit_graph_t *g = dit_blocks_graph(b);
  char k[160], n[128];
  dit_graph_set_block(g, (int32_t)i);
  snprintf(k, sizeof k, "%slayers.%" PRId64 ".input_layernorm.weight", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".input_layernorm", i);
  dit_vid_t x = dit_blocks_rmsnorm(b, h, k, n);
  const int64_t Dh = c->head_dim, rep = c->heads / c->kv_heads;
  snprintf(k, sizeof k, "%slayers.%" PRId64 ".self_attn.q_proj", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".q_proj", i);
  dit_vid_t q = lm_rotated(b, x, k, c->qkv_bias, rows, c->heads * Dh, cs, dt, n);
  snprintf(k, sizeof k, "%slayers.%" PRId64 ".self_attn.k_proj", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".k_proj", i);
  dit_vid_t kk = lm_rotated(b, x, k, c->qkv_bias, rows, c->kv_heads * Dh, cs, dt, n);
  kk = lm_repeat_kv(b, kk, B, L, c->kv_heads, rep, Dh, n);
  snprintf(k, sizeof k, "%slayers.%" PRId64 ".self_attn.v_proj", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".v_proj", i);
  char kb[170];
  snprintf(kb, sizeof kb, "%s.bias", k);
  dit_vid_t v = lm_linear(b, x, -1, c->qkv_bias ? dit_blocks_weight(b, "%s", kb) : -1, k, dt, n);
  v = lm_repeat_kv(b, v, B, L, c->kv_heads, rep, Dh, n);
  dit_attrs_t at = {0};
  dit_attrs_set_int(&at, "heads", c->heads);
  dit_attrs_set_float(&at, "scale", 1.0 / sqrt((double)Dh));
  dit_attrs_set_int(&at, "causal_block", 1);
  dit_vid_t ains[4] = {q, kk, v, bound};
  snprintf(n, sizeof n, "layer%" PRId64 ".sdpa", i);
  dit_vid_t a = dit_graph_op(g, DIT_OP_ATTENTION, ains, 4, &at, dt, n);
  snprintf(k, sizeof k, "%slayers.%" PRId64 ".self_attn.o_proj", p, i);
  snprintf(kb, sizeof kb, "%s.bias", k);
  snprintf(n, sizeof n, "layer%" PRId64 ".o_proj", i);
  a = lm_linear(b, a, -1, c->o_bias ? dit_blocks_weight(b, "%s", kb) : -1, k, dt, n);
  snprintf(n, sizeof n, "layer%" PRId64 ".attn_residual", i);
  h = dit_blocks_add(b, h, a, n);
  /* SwiGLU: down(silu(gate(x)) * up(x)). */
  snprintf(k, sizeof k, "%slayers.%" PRId64 ".post_attention_layernorm.weight", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".post_attention_layernorm", i);
  x = dit_blocks_rmsnorm(b, h, k, n);
  snprintf(k, sizeof k, "%slayers.%" PRId64 ".mlp.gate_proj", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".gate_proj", i);
  dit_vid_t gate = lm_linear(b, x, -1, -1, k, dt, n);
  snprintf(n, sizeof n, "layer%" PRId64 ".silu", i);
  gate = dit_blocks_unary(b, DIT_OP_SILU, gate, dt, n);
  snprintf(k, sizeof k, "%slayers.%" PRId64 ".mlp.up_proj", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".up_proj", i);
  dit_vid_t in[2] = {gate, lm_linear(b, x, -1, -1, k, dt, n)};
  snprintf(n, sizeof n, "layer%" PRId64 ".gated", i);
  dit_vid_t f = dit_graph_op(g, DIT_OP_MUL, in, 2, NULL, dt, n);
  snprintf(k, sizeof k, "%slayers.%" PRId64 ".mlp.down_proj", p, i);
  snprintf(n, sizeof n, "layer%" PRId64 ".down_proj", i);
  f = lm_linear(b, f, -1, -1, k, dt, n);
  snprintf(n, sizeof n, "layer%" PRId64 ".mlp_residual", i);
  return dit_blocks_add(b, h, f, n);
}

static dit_status_t lm_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  const dit_decoder_lm_config_t *c = &m->decoder_lm;
  if ((req->tp > 1) || (req->cp > 1) || req->sp)
    return DIT_ERR(UNIMPLEMENTED, "--tp/--cp/--sp: %s compiles for one rank", m->model_class);
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  const int64_t B = req->batch, L = req->text_len, H = c->heads, Dh = c->head_dim;
  const dit_dtype_t dt = req->dtype;
  float *table;
  int64_t *rows;
  DIT_RETURN_IF(lm_constants(c, L, &table, &rows));
  const dit_blocks_options_t bo = {.dtype = dt, .heads = H, .head_dim = Dh, .eps = c->eps, .tp = 1, .cp = 1};
  dit_graph_t *g;
  dit_blocks_t *b;
  dit_status_t s = dit_blocks_begin(m->weights, &bo, &g, &b);
  if (s) {
    free(table);
    free(rows);
    return s;
  }
  const char *p = lm_prefix(m);
  const int64_t is[2] = {B, L}, td[2] = {L, Dh};
  dit_vid_t ids = dit_graph_input(g, "input_ids", DIT_I32, 2, is);
  dit_vid_t mask = dit_graph_input(g, "attention_mask", DIT_I32, 2, is);
  dit_vid_t cs = dit_graph_constant(g, "rope.cos_sin", DIT_F32, 2, td, table);
  free(table);
  dit_vid_t bound = dit_blocks_key_bound(b, mask, 0, "key_bound");
  dit_vid_t in[2] = {ids, dit_blocks_weight(b, "%sembed_tokens.weight", p)};
  dit_vid_t h = dit_graph_op(g, DIT_OP_EMBEDDING, in, 2, NULL, dt, "embed_tokens");
  for (int64_t i = 0; i < c->run_layers; i++) h = lm_layer(b, c, p, i, B, L, dt, cs, bound, rows, h);
  free(rows);
  dit_graph_set_block(g, -1);
  if (c->final_norm) {
    char k[96];
    snprintf(k, sizeof k, "%snorm.weight", p);
    h = dit_blocks_rmsnorm(b, h, k, "norm");
  }
  dit_graph_mark_output(g, h, "hidden_states_selected");
  return dit_blocks_finish(b, g, m->model_class, out);
}

const dit_family_t dit_family_qwen25vl_text = {
    .name = "qwen2_5_vl_text",
    .model_class = "Qwen2_5_VLForConditionalGeneration",
    .text_encoder = 1,
    .parse_config = lm_parse_config,
    .expected = lm_expected,
    .ignored = kQwenExtraTensors,
    .pick_variant = dit_family_one_variant,
    .latent_shape = dit_family_text_shape,
    .build_graph = lm_build_graph,
};

const dit_family_t dit_family_llama_text = {
    .name = "llama_text",
    .model_class = "LlamaModel",
    .text_encoder = 1,
    .parse_config = lm_parse_config,
    .expected = lm_expected,
    .ignored = kLlamaExtraTensors,
    .pick_variant = dit_family_one_variant,
    .latent_shape = dit_family_text_shape,
    .build_graph = lm_build_graph,
};
