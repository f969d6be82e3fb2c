/* The UMT5 text encoder of Wan's pipelines: transformers' UMT5EncoderModel (a pipeline's
 * text_encoder/ folder: config.json naming the class in `architectures`, model.safetensors), and
 * the T5 v1.1 encoder of FLUX.1's pipelines (text_encoder_2/: T5EncoderModel, family "t5"),
 * compiled like a transformer for one shape: --batch B and --text-len L. Inputs input_ids and
 * attention_mask, i32 [B, L] (token ids and masks arrive as torch's int64 and are converted with
 * a range check when set; i32 is what the gather and the key bound read on every backend);
 * output last_hidden_state [B, L, d_model].
 *
 * The encoder: token embedding gather, then per layer a pre-norm self-attention whose scores
 * are q.k unscaled plus the layer's own relative position bias, and a pre-norm gated-GELU
 * feed-forward (gelu_new, the tanh form, of wi_0 times wi_1, then wo), each added to the
 * residual; a final RMS norm. Every norm is T5's: x * rsqrt(mean(x^2) + eps) * w, no mean, no
 * bias. The bias of a (query, key) pair is a row of the layer's table [buckets, heads] picked by
 * the bidirectional bucket of key - query, which depends only on L: the bucket indices are a
 * compile-time constant, the table is gathered at run time (op embedding) as [L, L, heads].
 *
 * T5 is the same encoder but for that table: only layer 0 has one (transformers' T5Block
 * has_relative_attention_bias = i == 0) and the bias it makes is passed on to every later layer,
 * so the graph gathers it once. Its config (T5Config) differs in defaults and model_type "t5".
 * One file, two family entries: the loader picks a family by its class name alone, and the
 * bundle's family names which of the two encoders it holds.
 *
 * The padding mask: transformers adds finfo.min to the scores of masked keys, which weighs them
 * exactly zero; Wan's prompts are right-padded, so each item's valid prefix (op key_bound) bounds
 * its keys instead, and a mask that is not a prefix is refused when set. Padded query rows are
 * computed as transformers computes them (attending the valid keys); WanPipeline zeroes them
 * afterwards, which this graph leaves to the caller.
 *
 * bf16 (--dtype bf16) as transformers runs the model in bf16: every module bf16 but the
 * feed-forwards' wo, which _keep_in_fp32_modules keeps fp32 (its input cast up, its output fp32),
 * so the residual stream turns fp32 at the first feed-forward and stays so; each norm writes
 * bf16, as its bf16 weight makes it; the position bias and softmax in fp32. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/frontend.h"
#include "compiler/frontends/blocks.h"
#include "compiler/frontends/family.h"

/* ---- config ---- */

/* UMT5Config's (and T5Config's) fields that shape the encoder, with the range this build accepts. */
static const dit_config_field_t kUmt5Fields[] = {
    {"vocab_size", DIT_CF_INT, 0, 1, INT32_MAX, 0, NULL},
    {"d_model", DIT_CF_INT, 0, 1, 65536, 0, NULL},
    {"d_kv", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    {"d_ff", DIT_CF_INT, 0, 1, 1 << 20, 0, NULL},
    {"num_layers", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    {"num_heads", DIT_CF_INT, 0, 1, 1024, 0, NULL},
    /* Bidirectional: half the buckets per direction, half of those exact; at least one exact. */
    {"relative_attention_num_buckets", DIT_CF_INT, 0, 4, 65536, 0, NULL},
    {"relative_attention_max_distance", DIT_CF_INT, 0, 2, 1 << 24, 0, NULL},
    {"layer_norm_epsilon", DIT_CF_FLOAT, 0, 0, 1, 0, NULL},
    {"feed_forward_proj", DIT_CF_STR, 0, 0, 64, 0, NULL},
    {"dense_act_fn", DIT_CF_STR, 0, 0, 64, 0, NULL},
    {"is_gated_act", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
    {"is_decoder", DIT_CF_BOOL, 0, 0, 0, 0, NULL},
    {"model_type", DIT_CF_STR, 0, 0, 64, 0, NULL},
};

/* UMT5Config's defaults of those fields (transformers' UMT5Config.__init__). */
static const char kUmt5Defaults[] =
    "{\"vocab_size\":250112,\"d_model\":512,\"d_kv\":64,\"d_ff\":1024,\"num_layers\":8,\"num_heads\":6,"
    "\"relative_attention_num_buckets\":32,\"relative_attention_max_distance\":128,\"layer_norm_epsilon\":1e-6,"
    "\"feed_forward_proj\":\"gated-gelu\",\"dense_act_fn\":\"gelu_new\",\"is_gated_act\":true,\"is_decoder\":false,"
    "\"model_type\":\"umt5\"}";

/* T5Config's defaults. transformers derives dense_act_fn and is_gated_act from feed_forward_proj
 * (T5 v1.1's saved configs may lack them): absent, they are what "gated-gelu", the one value
 * accepted, implies; feed_forward_proj's own default is "relu", refused by name. */
static const char kT5Defaults[] =
    "{\"vocab_size\":32128,\"d_model\":512,\"d_kv\":64,\"d_ff\":2048,\"num_layers\":6,\"num_heads\":8,"
    "\"relative_attention_num_buckets\":32,\"relative_attention_max_distance\":128,\"layer_norm_epsilon\":1e-6,"
    "\"feed_forward_proj\":\"relu\",\"dense_act_fn\":\"gelu_new\",\"is_gated_act\":true,\"is_decoder\":false,"
    "\"model_type\":\"t5\"}";

/* Fields of a saved config that do not change the encoder's forward: the configuration's
 * bookkeeping, the decoder's and the training's settings (dropout is off in inference). */
static const char *const kUmt5Ignored[] = {
    "architectures", "transformers_version", "torch_dtype", "dtype", "tokenizer_class", "output_past", "use_cache",
    "is_encoder_decoder", "pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id", "num_decoder_layers",
    "classifier_dropout", "dropout_rate", "initializer_factor", "scalable_attention", "tie_word_embeddings",
    "scale_decoder_outputs", NULL,
};

static dit_status_t str_is(const cJSON *cfg, const char *key, const char *want, const char *what, const char *why) {
  const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cfg, key));
  if (v && !strcmp(v, want)) return DIT_OK;
  return DIT_ERR(UNIMPLEMENTED, "%s: field '%s' = \"%s\": only \"%s\" is supported (%s)", what, key, v ? v : "", want, why);
}

static dit_status_t umt5_parse_config(dit_model_t *m, const dit_json_t *raw) {
  const int t5 = m->fam == &dit_family_t5;
  DIT_RETURN_IF(dit_config_read_ignoring(kUmt5Fields, sizeof kUmt5Fields / sizeof kUmt5Fields[0], t5 ? kT5Defaults : kUmt5Defaults,
                                         m->fam->model_class, kUmt5Ignored, raw, &m->config));
  const cJSON *cfg = m->config;
  dit_umt5_config_t *u = &m->umt5;
  u->vocab = dit_config_int(cfg, "vocab_size");
  u->d_model = dit_config_int(cfg, "d_model");
  u->d_kv = dit_config_int(cfg, "d_kv");
  u->d_ff = dit_config_int(cfg, "d_ff");
  u->layers = dit_config_int(cfg, "num_layers");
  u->heads = dit_config_int(cfg, "num_heads");
  u->buckets = dit_config_int(cfg, "relative_attention_num_buckets");
  u->max_distance = dit_config_int(cfg, "relative_attention_max_distance");
  u->eps = dit_config_num(cfg, "layer_norm_epsilon");
  u->shared_bias = t5;
  char why[96];
  snprintf(why, sizeof why, "%s's configuration", m->fam->model_class);
  DIT_RETURN_IF(str_is(cfg, "model_type", m->fam->name, raw->what, why));
  DIT_RETURN_IF(str_is(cfg, "feed_forward_proj", "gated-gelu", raw->what, t5 ? "the gated-GELU feed-forward of T5 v1.1" :
                                                                                  "the gated-GELU feed-forward of UMT5"));
  DIT_RETURN_IF(str_is(cfg, "dense_act_fn", "gelu_new", raw->what, "the tanh-approximated GELU gated-gelu implies"));
  if (!dit_config_bool(cfg, "is_gated_act"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'is_gated_act' = false: only the gated feed-forward (wi_0, wi_1) is supported", raw->what);
  if (dit_config_bool(cfg, "is_decoder"))
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'is_decoder' = true: only the encoder (bidirectional attention) is supported", raw->what);
  /* The bucket of a distance n >= max_exact is logarithmic in n / max_exact up to max_distance. */
  const int64_t max_exact = u->buckets / 4;
  if (u->max_distance <= max_exact)
    return DIT_ERR(INVALID_ARGUMENT,
                   "%s: field 'relative_attention_max_distance' = %" PRId64 ": must exceed the %" PRId64
                   " exact buckets of relative_attention_num_buckets = %" PRId64,
                   raw->what, u->max_distance, max_exact, u->buckets);
  return DIT_OK;
}

/* ---- checkpoint ---- */

/* The token embedding: shared.weight (the model's input embeddings, which encoder.embed_tokens
 * is tied to), else encoder.embed_tokens.weight when a checkpoint holds only that name. */
static const char *embed_key(const dit_model_t *m) {
  return !m->weights || dit_safetensors_find(m->weights, "shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight";
}

static void umt5_expected(const dit_model_t *m, dit_expected_t *l) {
  const dit_umt5_config_t *u = &m->umt5;
  const int64_t D = u->d_model, inner = u->heads * u->d_kv, emb[2] = {u->vocab, D}, w[1] = {D}, rel[2] = {u->buckets, u->heads};
  dit_expected_add(l, 2, emb, "%s", embed_key(m));
  /* Both names, when saved untied: the same shape. */
  if (m->weights && dit_safetensors_find(m->weights, "shared.weight") && dit_safetensors_find(m->weights, "encoder.embed_tokens.weight"))
    dit_expected_add(l, 2, emb, "encoder.embed_tokens.weight");
  for (int64_t i = 0; i < u->layers; i++) {
    static const char *const qkv[] = {"q", "k", "v"};
    for (int k = 0; k < 3; k++) dit_expected_linear(l, inner, D, 0, "encoder.block.%" PRId64 ".layer.0.SelfAttention.%s", i, qkv[k]);
    dit_expected_linear(l, D, inner, 0, "encoder.block.%" PRId64 ".layer.0.SelfAttention.o", i);
    if (!u->shared_bias || i == 0)
      dit_expected_add(l, 2, rel, "encoder.block.%" PRId64 ".layer.0.SelfAttention.relative_attention_bias.weight", i);
    dit_expected_add(l, 1, w, "encoder.block.%" PRId64 ".layer.0.layer_norm.weight", i);
    dit_expected_linear(l, u->d_ff, D, 0, "encoder.block.%" PRId64 ".layer.1.DenseReluDense.wi_0", i);
    dit_expected_linear(l, u->d_ff, D, 0, "encoder.block.%" PRId64 ".layer.1.DenseReluDense.wi_1", i);
    dit_expected_linear(l, D, u->d_ff, 0, "encoder.block.%" PRId64 ".layer.1.DenseReluDense.wo", i);
    dit_expected_add(l, 1, w, "encoder.block.%" PRId64 ".layer.1.layer_norm.weight", i);
  }
  dit_expected_add(l, 1, w, "encoder.final_layer_norm.weight");
}

/* ---- variant, shape ---- */

/* ---- graph ---- */

int32_t dit_umt5_relative_bucket(int64_t rel, int64_t num_buckets, int64_t max_distance) {
  /* transformers' _relative_position_bucket of an encoder, in its fp32 arithmetic: keys after the
   * query take the upper half of the buckets; the first half of each half is exact distances,
   * the rest logarithmic up to max_distance, then the last bucket. */
  const int64_t half = num_buckets / 2, max_exact = half / 2, n = rel < 0 ? -rel : rel;
  const int32_t base = rel > 0 ? (int32_t)half : 0;
  if (n < max_exact) return base + (int32_t)n;
  const float ratio = logf((float)n / (float)max_exact) / (float)log((double)max_distance / (double)max_exact);
  int64_t large = max_exact + (int64_t)(ratio * (float)(half - max_exact));
  if (large > half - 1) large = half - 1;
  return base + (int32_t)large;
}

/* x @ key.weight^T: T5's linears have no bias. */
static dit_vid_t linear(dit_blocks_t *b, dit_vid_t x, const char *key, dit_dtype_t out, const char *name) {
  dit_vid_t ins[2] = {x, dit_blocks_weight(b, "%s.weight", key)};
  return dit_graph_op(dit_blocks_graph(b), DIT_OP_LINEAR, ins, 2, NULL, out, name);
}

static dit_status_t umt5_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  const dit_umt5_config_t *u = &m->umt5;
  if ((req->tp > 1) || (req->cp > 1) || req->sp)
    return DIT_ERR(UNIMPLEMENTED, "--tp/--cp/--sp: %s compiles for one rank", m->model_class);
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  const int64_t B = req->batch, L = req->text_len, H = u->heads;
  if (L > 16384)
    return DIT_ERR(INVALID_ARGUMENT, "--text-len %" PRId64 ": the position bias of %s is [L, L, heads]: at most 16384", L,
                   m->model_class);
  const dit_dtype_t dt = req->dtype;
  int32_t *buckets = malloc(sizeof *buckets * (size_t)(L * L));
  if (!buckets) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory for the relative position buckets");
  for (int64_t i = 0; i < L; i++)
    for (int64_t j = 0; j < L; j++) buckets[i * L + j] = dit_umt5_relative_bucket(j - i, u->buckets, u->max_distance);
  static const char *const f32_keys[] = {"DenseReluDense.wo", NULL}; /* _keep_in_fp32_modules */
  const dit_blocks_options_t bo = {.dtype = dt, .heads = H, .head_dim = u->d_kv, .eps = u->eps, .f32_keys = f32_keys, .tp = 1, .cp = 1};
  dit_graph_t *g;
  dit_blocks_t *b;
  dit_status_t s = dit_blocks_begin(m->weights, &bo, &g, &b);
  if (s) {
    free(buckets);
    return s;
  }
  const int64_t is[2] = {B, L}, bd[2] = {L, L};
  dit_vid_t ids = dit_graph_input(g, "input_ids", DIT_I32, 2, is);
  dit_vid_t mask = dit_graph_input(g, "attention_mask", DIT_I32, 2, is);
  dit_vid_t pos = dit_graph_constant(g, "relative_position_buckets", DIT_I32, 2, bd, buckets);
  free(buckets);
  dit_vid_t bound = dit_blocks_key_bound(b, mask, 0, "key_bound");
  dit_vid_t in[2] = {ids, dit_blocks_weight(b, "%s", embed_key(m))};
  dit_vid_t h = dit_graph_op(g, DIT_OP_EMBEDDING, in, 2, NULL, dt, "embed_tokens");
  dit_dtype_t rd = dt; /* the residual stream's: fp32 from a bf16 graph's first fp32 wo on */
  /* T5's one bias, from layer 0's table, belongs to no block: every block reads it. */
  dit_vid_t bias = -1;
  if (u->shared_bias) {
    in[0] = pos;
    in[1] = dit_blocks_weight(b, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    bias = dit_graph_op(g, DIT_OP_EMBEDDING, in, 2, NULL, DIT_F32, "position_bias");
  }
  for (int64_t i = 0; i < u->layers; i++) {
    char p[96], n[128], k[160];
    dit_graph_set_block(g, (int32_t)i);
    snprintf(p, sizeof p, "encoder.block.%" PRId64 ".layer", i);
    /* Self-attention: pre-norm, unscaled scores plus the position bias (this layer's, or T5's
     * shared one), keys bounded. */
    if (!u->shared_bias) {
      snprintf(k, sizeof k, "%s.0.SelfAttention.relative_attention_bias.weight", p);
      snprintf(n, sizeof n, "block%" PRId64 ".position_bias", i);
      in[0] = pos;
      in[1] = dit_blocks_weight(b, "%s", k);
      bias = dit_graph_op(g, DIT_OP_EMBEDDING, in, 2, NULL, DIT_F32, n);
    }
    snprintf(k, sizeof k, "%s.0.layer_norm.weight", p);
    snprintf(n, sizeof n, "block%" PRId64 ".attn_norm", i);
    dit_vid_t x = dit_blocks_rmsnorm(b, h, k, n);
    dit_vid_t qkv[3];
    static const char *const names[] = {"q", "k", "v"};
    for (int c = 0; c < 3; c++) {
      snprintf(k, sizeof k, "%s.0.SelfAttention.%s", p, names[c]);
      snprintf(n, sizeof n, "block%" PRId64 ".%s", i, names[c]);
      qkv[c] = linear(b, x, k, dt, n);
    }
    dit_attrs_t at = {0};
    dit_attrs_set_int(&at, "heads", H);
    dit_attrs_set_float(&at, "scale", 1.0);
    dit_attrs_set_int(&at, "bias", 1);
    dit_vid_t ains[5] = {qkv[0], qkv[1], qkv[2], bound, bias};
    snprintf(n, sizeof n, "block%" PRId64 ".sdpa", i);
    dit_vid_t a = dit_graph_op(g, DIT_OP_ATTENTION, ains, 5, &at, dt, n);
    snprintf(k, sizeof k, "%s.0.SelfAttention.o", p);
    snprintf(n, sizeof n, "block%" PRId64 ".o", i);
    a = linear(b, a, k, dt, n);
    snprintf(n, sizeof n, "block%" PRId64 ".attn_residual", i);
    in[0] = h;
    in[1] = a;
    h = dit_graph_op(g, DIT_OP_ADD, in, 2, NULL, rd, n);
    /* Gated-GELU feed-forward: gelu_new(wi_0 x) * wi_1 x, then wo (fp32 in a bf16 graph). */
    snprintf(k, sizeof k, "%s.1.layer_norm.weight", p);
    snprintf(n, sizeof n, "block%" PRId64 ".ff_norm", i);
    x = dit_blocks_rmsnorm(b, h, k, n);
    snprintf(k, sizeof k, "%s.1.DenseReluDense.wi_0", p);
    snprintf(n, sizeof n, "block%" PRId64 ".wi_0", i);
    dit_vid_t gate = linear(b, x, k, dt, n);
    snprintf(n, sizeof n, "block%" PRId64 ".gelu", i);
    gate = dit_blocks_unary(b, DIT_OP_GELU_TANH, gate, dt, n);
    snprintf(k, sizeof k, "%s.1.DenseReluDense.wi_1", p);
    snprintf(n, sizeof n, "block%" PRId64 ".wi_1", i);
    in[0] = gate;
    in[1] = linear(b, x, k, dt, n);
    snprintf(n, sizeof n, "block%" PRId64 ".gated", i);
    dit_vid_t f = dit_graph_op(g, DIT_OP_MUL, in, 2, NULL, dt, n);
    if (dt != DIT_F32) {
      snprintf(n, sizeof n, "block%" PRId64 ".gated_f32", i);
      f = dit_blocks_unary(b, DIT_OP_CAST, f, DIT_F32, n);
    }
    snprintf(k, sizeof k, "%s.1.DenseReluDense.wo", p);
    snprintf(n, sizeof n, "block%" PRId64 ".wo", i);
    f = linear(b, f, k, DIT_F32, n);
    rd = DIT_F32;
    snprintf(n, sizeof n, "block%" PRId64 ".ff_residual", i);
    in[0] = h;
    in[1] = f;
    h = dit_graph_op(g, DIT_OP_ADD, in, 2, NULL, rd, n);
  }
  dit_graph_set_block(g, -1);
  h = dit_blocks_rmsnorm(b, h, "encoder.final_layer_norm.weight", "final_layer_norm");
  dit_graph_mark_output(g, h, "last_hidden_state");
  return dit_blocks_finish(b, g, m->model_class, out);
}

const dit_family_t dit_family_umt5 = {
    .name = "umt5",
    .model_class = "UMT5EncoderModel",
    .text_encoder = 1,
    .parse_config = umt5_parse_config,
    .expected = umt5_expected,
    .pick_variant = dit_family_one_variant,
    .latent_shape = dit_family_text_shape,
    .build_graph = umt5_build_graph,
};

const dit_family_t dit_family_t5 = {
    .name = "t5",
    .model_class = "T5EncoderModel",
    .text_encoder = 1,
    .parse_config = umt5_parse_config,
    .expected = umt5_expected,
    .pick_variant = dit_family_one_variant,
    .latent_shape = dit_family_text_shape,
    .build_graph = umt5_build_graph,
};
