/* compiler/frontend: config normalization and its field checks, variants and VAE factors,
 * latent shapes, the weights content hash (independent of file layout and sharding), dtype
 * policy, diffusers pipeline directories (Wan2.1, Wan2.2 A14B two experts, TI2V, I2V), VAE
 * factors, what the compile refuses for now, and scheduler defaults. */
#include <stdlib.h>
#include <string.h>

#include "artifacts/identity.h"
#include "artifacts/safetensors.h"
#include "base/fileio.h"
#include "check.h"
#include "compiler/frontend.h"
#include "compiler/frontends/family.h"

static char g_model[1024];

static void test_load_and_latent(void) {
  dit_model_t *m = NULL;
  CHECK_OK(dit_model_load(g_model, NULL, &m));
  if (!m) return;
  CHECK(strcmp(m->family, "wan") == 0);
  CHECK(strcmp(m->variant, "wan2.1") == 0);
  CHECK_EQ_INT(m->vae_temporal, 4);
  CHECK_EQ_INT(m->vae_spatial, 8);
  /* The normalized config carries every field, defaults filled, bookkeeping dropped. */
  CHECK(cJSON_GetObjectItem(m->config, "pos_embed_seq_len") != NULL);
  CHECK(cJSON_GetObjectItem(m->config, "_diffusers_version") == NULL);
  dit_shape_request_t r = {.batch = 1, .frames = 9, .height = 32, .width = 48, .text_len = 7, .dtype = DIT_F32};
  dit_latent_shape_t ls;
  CHECK_OK(dit_model_latent_shape(m, &r, &ls));
  CHECK_EQ_INT(ls.frames, 3);
  CHECK_EQ_INT(ls.height, 4);
  CHECK_EQ_INT(ls.width, 6);
  r.frames = 8;
  CHECK_ERR(dit_model_latent_shape(m, &r, &ls), INVALID_ARGUMENT, "--frames 8: wan2.1 needs frames = 4*k + 1 (e.g. 5)");
  r.frames = 9;
  r.width = 40;
  CHECK_ERR(dit_model_latent_shape(m, &r, &ls), INVALID_ARGUMENT, "--width 40: must be a positive multiple of 16");
  r.width = 48;
  r.batch = 0;
  CHECK_ERR(dit_model_latent_shape(m, &r, &ls), INVALID_ARGUMENT, "--batch 0");
  dit_model_free(m);

  /* The TI2V variant compresses 16x spatially: the factor is the variant's, not a constant. */
  CHECK_OK(dit_model_load(g_model, "wan2.2-ti2v", &m));
  if (!m) return;
  CHECK_EQ_INT(m->vae_spatial, 16);
  r.batch = 1;
  r.height = 64;
  r.width = 96;
  CHECK_OK(dit_model_latent_shape(m, &r, &ls));
  CHECK_EQ_INT(ls.height, 4);
  CHECK_EQ_INT(ls.width, 6);
  dit_model_free(m);
  CHECK_ERR(dit_model_load(g_model, "wan9", &m), INVALID_ARGUMENT, "--variant wan9");
}

static void test_weights_hash_sharding(void) {
  dit_model_t *m = NULL;
  CHECK_OK(dit_model_load(g_model, NULL, &m));
  if (!m) return;
  char h1[33], h2[33];
  CHECK_OK(dit_model_weights_hash(m, h1));
  /* Re-save the same tensors as two shards with an index, in another directory. */
  const char *dir = check_tmpdir("frontend_shards");
  dit_st_writer_t *w[2];
  CHECK_OK(dit_st_writer_create(&w[0]));
  CHECK_OK(dit_st_writer_create(&w[1]));
  size_t n = dit_safetensors_count(m->weights);
  char *index = malloc(64 * 1024);
  size_t len = (size_t)snprintf(index, 64 * 1024, "{\"metadata\":{},\"weight_map\":{");
  for (size_t i = 0; i < n; i++) {
    const dit_st_tensor_t *t = dit_safetensors_at(m->weights, i);
    void *copy = malloc(t->nbytes + 1);
    memcpy(copy, t->data, t->nbytes);
    CHECK_OK(dit_st_writer_add(w[i % 2], t->name, t->dtype, t->rank, t->dims, copy));
    free(copy);
    len += (size_t)snprintf(index + len, 64 * 1024 - len, "%s\"%s\":\"part-%zu.safetensors\"", i ? "," : "", t->name, i % 2);
  }
  snprintf(index + len, 64 * 1024 - len, "}}");
  char path[8192];
  for (int k = 0; k < 2; k++) {
    snprintf(path, sizeof path, "%s/part-%d.safetensors", dir, k);
    CHECK_OK(dit_st_writer_write(w[k], path));
    dit_st_writer_destroy(w[k]);
  }
  snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors.index.json", dir);
  CHECK_OK(dit_file_write_atomic(path, index, strlen(index)));
  free(index);
  char src[8192], dst[8192], *cfg = NULL;
  size_t cfg_len = 0;
  snprintf(src, sizeof src, "%s/config.json", g_model);
  snprintf(dst, sizeof dst, "%s/config.json", dir);
  CHECK_OK(dit_file_read(src, 1 << 20, &cfg, &cfg_len));
  CHECK_OK(dit_file_write_atomic(dst, cfg, cfg_len));
  free(cfg);
  dit_model_t *m2 = NULL;
  CHECK_OK(dit_model_load(dir, NULL, &m2));
  if (m2) {
    CHECK_OK(dit_model_weights_hash(m2, h2));
    CHECK(strcmp(h1, h2) == 0);
    dit_model_free(m2);
  }
  dit_model_free(m);
}

static void check_temb(const dit_graph_t *g, dit_dtype_t dt);

static void test_bf16_policy(void) {
  dit_model_t *m = NULL;
  CHECK_OK(dit_model_load(g_model, NULL, &m));
  if (!m) return;
  dit_shape_request_t r = {.batch = 1, .frames = 9, .height = 32, .width = 48, .text_len = 7, .dtype = DIT_BF16};
  dit_graph_t *g = NULL;
  CHECK_OK(dit_model_build_graph(m, &r, &g));
  if (!g) return;
  int checked = 0;
  for (dit_vid_t v = 0; v < dit_graph_num_values(g); v++) {
    const dit_value_t *val = dit_graph_cvalue(g, v);
    if (val->kind != DIT_VALUE_WEIGHT) continue;
    /* Modules diffusers keeps in fp32 stay fp32; the rest are bf16. */
    int fp32 = strstr(val->ref, "time_embedder") || strstr(val->ref, "scale_shift_table") || strstr(val->ref, ".norm2.");
    CHECK_EQ_INT(val->dtype, fp32 ? DIT_F32 : DIT_BF16);
    checked++;
  }
  CHECK_EQ_INT(checked, 69);
  check_temb(g, DIT_BF16);
  dit_graph_destroy(g);
  r.dtype = DIT_F16;
  CHECK_ERR(dit_model_build_graph(m, &r, &g), UNIMPLEMENTED, "--dtype f16");
  dit_model_free(m);
}

/* ---- config.json fields ---- */

static const char kTinyConfig[] =
    "{\"_class_name\": \"WanTransformer3DModel\", \"_diffusers_version\": \"0.40.0.dev0\", \"added_kv_proj_dim\": null,"
    " \"attention_head_dim\": 16, \"cross_attn_norm\": true, \"eps\": 1e-06, \"ffn_dim\": 64, \"freq_dim\": 32,"
    " \"image_dim\": null, \"in_channels\": 4, \"num_attention_heads\": 2, \"num_layers\": 2, \"out_channels\": 4,"
    " \"patch_size\": [1, 2, 2], \"pos_embed_seq_len\": null, \"qk_norm\": \"rms_norm_across_heads\","
    " \"rope_max_seq_len\": 64, \"text_dim\": 24}";

/* The config `base` with `key` set to the JSON text `value` (NULL: removed), parsed. */
static dit_status_t config_edit(const char *base, const char *key, const char *value) {
  const char *kTinyConfig = base;
  char text[2048];
  const char *at = key ? strstr(kTinyConfig, key) : NULL;
  if (!key) {
    snprintf(text, sizeof text, "%s", kTinyConfig);
  } else if (!at) {
    /* A new member: insert it first. */
    snprintf(text, sizeof text, "{\"%s\": %s, %s", key, value, kTinyConfig + 1);
  } else {
    /* Replace the old value: it runs to the next top-level ',' or '}' (arrays hold no '}'). */
    const char *v = strchr(at, ':') + 1, *end = v;
    int depth = 0;
    while (*end && (depth || (*end != ',' && *end != '}'))) {
      if (*end == '[') depth++;
      if (*end == ']') depth--;
      end++;
    }
    const char *kstart = at - 1; /* the key's opening quote */
    if (value)
      snprintf(text, sizeof text, "%.*s %s%s", (int)(v - kTinyConfig), kTinyConfig, value, end);
    else
      snprintf(text, sizeof text, "%.*s%s", (int)(kstart - kTinyConfig), kTinyConfig, *end == ',' ? end + 2 : end);
  }
  dit_model_t m;
  memset(&m, 0, sizeof m);
  dit_status_t s = dit_model_config_parse(text, strlen(text), "config.json", &m);
  cJSON_Delete(m.config);
  return s;
}

/* The tiny Wan config with `key` set to `value` (NULL: removed), parsed. */
static dit_status_t config_with(const char *key, const char *value) { return config_edit(kTinyConfig, key, value); }

static void test_config_fields(void) {
  CHECK_OK(config_with(NULL, NULL));
  CHECK_ERR(config_with("num_attention_heads", "0"), OUT_OF_RANGE,
            "config.json: field 'num_attention_heads': expected an integer in [1, 1024], found 0");
  CHECK_ERR(config_with("num_attention_heads", "2.5"), INVALID_ARGUMENT,
            "config.json: field 'num_attention_heads': expected an integer, found 2.5");
  CHECK_ERR(config_with("num_layers", "1e999"), OUT_OF_RANGE, "field 'num_layers': number outside the range");
  CHECK_ERR(config_with("ffn_dim", "-64"), OUT_OF_RANGE, "field 'ffn_dim': expected an integer in [1, 1048576], found -64");
  CHECK_ERR(config_with("in_channels", "null"), INVALID_ARGUMENT, "field 'in_channels': expected a value, found null");
  CHECK_ERR(config_with("text_dim", "\"24\""), INVALID_ARGUMENT, "field 'text_dim': expected an integer, found a string");
  CHECK_ERR(config_with("patch_size", "[1, 2]"), INVALID_ARGUMENT, "field 'patch_size': expected 3 integers [t, h, w], found 2");
  CHECK_ERR(config_with("patch_size", "[1, 2, 2, 2]"), OUT_OF_RANGE, "field 'patch_size': more than 3 entries");
  CHECK_ERR(config_with("patch_size", "[1, 0, 2]"), OUT_OF_RANGE, "field 'patch_size[1]': expected an integer in [1, 64], found 0");
  CHECK_ERR(config_with("eps", "-1e-6"), OUT_OF_RANGE, "field 'eps': expected a number in [0, 1], found -9.9999999999999995e-07");
  CHECK_ERR(config_with("cross_attn_norm", "1"), INVALID_ARGUMENT, "field 'cross_attn_norm': expected a boolean, found a number");
  CHECK_ERR(config_with("qk_norm", "7"), INVALID_ARGUMENT, "field 'qk_norm': expected a string, found a number");
  CHECK_ERR(config_with("image_dim", "0"), OUT_OF_RANGE, "field 'image_dim': expected an integer in [1, 1048576], found 0");
  CHECK_ERR(config_with("added_kv_proj_dim", "1.5"), INVALID_ARGUMENT, "field 'added_kv_proj_dim': expected an integer, found 1.5");
  CHECK_ERR(config_with("pos_embed_seq_len", "\"257\""), INVALID_ARGUMENT, "field 'pos_embed_seq_len': expected an integer, found a string");
  CHECK_ERR(config_with("rope_max_seq_len", "0"), OUT_OF_RANGE, "field 'rope_max_seq_len': expected an integer in [1, 1048576], found 0");
  CHECK_ERR(config_with("in_channels", "4097"), OUT_OF_RANGE, "field 'in_channels': expected an integer in [1, 4096], found 4097");
  CHECK_ERR(config_with("freq_dim", "31"), UNIMPLEMENTED, "field 'freq_dim' = 31: odd sinusoidal widths");
  CHECK_ERR(config_with("_class_name", NULL), NOT_FOUND, "config.json: field '_class_name': missing: cannot tell the model family");
  CHECK_ERR(config_with("_class_name", "[\"WanTransformer3DModel\"]"), INVALID_ARGUMENT, "field '_class_name': expected a string, found an array");
  /* The whole document is judged first: a repeated key is refused even where either value would do. */
  CHECK_ERR(config_with("num_layers", "2, \"num_layers\": 2"), INVALID_ARGUMENT, "config.json: field '(top level)': duplicate key \"num_layers\"");
  CHECK_ERR(config_with("rope_max_seq_len", "64} trailing"), INVALID_ARGUMENT, "config.json: not valid JSON");
  /* out_channels null or 0 means in_channels, as in diffusers. */
  dit_model_t m;
  memset(&m, 0, sizeof m);
  CHECK_OK(dit_model_config_parse(kTinyConfig, strlen(kTinyConfig), "config.json", &m));
  CHECK_EQ_INT(m.wan.heads, 2);
  CHECK_EQ_INT(m.wan.patch[2], 2);
  CHECK_EQ_INT(m.wan.image_dim, 0);
  CHECK_EQ_INT(m.wan.rope_max_seq_len, 64);
  cJSON_Delete(m.config);
  CHECK_OK(config_with("out_channels", "null"));
  /* The Wan2.1 I2V / FLF2V fields are read into the typed config (the compile refuses them). */
  static const char kI2V[] =
      "{\"_class_name\": \"WanTransformer3DModel\", \"image_dim\": 1280, \"added_kv_proj_dim\": 5120,"
      " \"pos_embed_seq_len\": 514, \"in_channels\": 36, \"out_channels\": 16}";
  memset(&m, 0, sizeof m);
  CHECK_OK(dit_model_config_parse(kI2V, strlen(kI2V), "config.json", &m));
  CHECK_EQ_INT(m.wan.image_dim, 1280);
  CHECK_EQ_INT(m.wan.added_kv_proj_dim, 5120);
  CHECK_EQ_INT(m.wan.pos_embed_seq_len, 514);
  CHECK_EQ_INT(m.wan.in_channels, 36);
  CHECK_EQ_INT(m.wan.out_channels, 16);
  CHECK_EQ_INT(m.wan.rope_max_seq_len, 1024);
  cJSON_Delete(m.config);
}

/* HunyuanVideoTransformer3DModel: every __init__ argument read with its range, the
 * image-to-video variants and other q/k norms refused by name, the rotary split checked. */
static const char kHunyuanConfig[] =
    "{\"_class_name\": \"HunyuanVideoTransformer3DModel\", \"attention_head_dim\": 8, \"guidance_embeds\": true,"
    " \"image_condition_type\": null, \"in_channels\": 4, \"mlp_ratio\": 4.0, \"num_attention_heads\": 2,"
    " \"num_layers\": 1, \"num_refiner_layers\": 2, \"num_single_layers\": 2, \"out_channels\": 4, \"patch_size\": 2,"
    " \"patch_size_t\": 1, \"pooled_projection_dim\": 20, \"qk_norm\": \"rms_norm\", \"rope_axes_dim\": [2, 2, 4],"
    " \"rope_theta\": 256.0, \"text_embed_dim\": 24}";

static dit_status_t hunyuan_with(const char *key, const char *value) { return config_edit(kHunyuanConfig, key, value); }

static void test_hunyuan_config(void) {
  CHECK_OK(hunyuan_with(NULL, NULL));
  CHECK_ERR(hunyuan_with("image_condition_type", "\"latent_concat\""), UNIMPLEMENTED,
            "field 'image_condition_type' = \"latent_concat\": the image-to-video HunyuanVideo models are not supported");
  CHECK_ERR(hunyuan_with("image_condition_type", "\"token_replace\""), UNIMPLEMENTED, "field 'image_condition_type' = \"token_replace\"");
  CHECK_ERR(hunyuan_with("qk_norm", "\"layer_norm\""), UNIMPLEMENTED, "field 'qk_norm' = \"layer_norm\": only \"rms_norm\" is supported");
  CHECK_ERR(hunyuan_with("rope_axes_dim", "[2, 2, 2]"), INVALID_ARGUMENT,
            "field 'rope_axes_dim' = [2, 2, 2]: expected even parts summing to attention_head_dim = 8");
  CHECK_ERR(hunyuan_with("rope_axes_dim", "[1, 3, 4]"), INVALID_ARGUMENT, "field 'rope_axes_dim' = [1, 3, 4]");
  CHECK_ERR(hunyuan_with("rope_axes_dim", "[8]"), INVALID_ARGUMENT, "field 'rope_axes_dim': expected 3 integers [frames, rows, columns]");
  CHECK_ERR(hunyuan_with("mlp_ratio", "0.01"), INVALID_ARGUMENT, "field 'mlp_ratio' = 0.01: the MLP width int(16 * 0.01) is 0");
  CHECK_ERR(hunyuan_with("mlp_ratio", "65"), OUT_OF_RANGE, "field 'mlp_ratio': expected a number in [0, 64], found 65");
  CHECK_ERR(hunyuan_with("patch_size_t", "0"), OUT_OF_RANGE, "field 'patch_size_t': expected an integer in [1, 64], found 0");
  CHECK_ERR(hunyuan_with("num_refiner_layers", "-1"), OUT_OF_RANGE, "field 'num_refiner_layers': expected an integer in [0, 1024]");
  CHECK_ERR(hunyuan_with("text_embed_dim", "null"), INVALID_ARGUMENT, "field 'text_embed_dim': expected a value, found null");
  CHECK_ERR(hunyuan_with("rope_theta", "0.5"), OUT_OF_RANGE, "field 'rope_theta': expected a number in [1, 1000000000], found 0.5");
  CHECK_ERR(hunyuan_with("guidance_embeds", "1"), INVALID_ARGUMENT, "field 'guidance_embeds': expected a boolean, found a number");
  CHECK_ERR(hunyuan_with("text_dim", "24"), UNIMPLEMENTED, "field 'text_dim': not a HunyuanVideoTransformer3DModel option");
  CHECK_ERR(hunyuan_with("num_single_layers", "0, \"num_layers\": 0"), INVALID_ARGUMENT, "config.json: field '(top level)': duplicate key");
  dit_model_t m;
  memset(&m, 0, sizeof m);
  static const char kBoth0[] = "{\"_class_name\": \"HunyuanVideoTransformer3DModel\", \"num_layers\": 0, \"num_single_layers\": 0}";
  CHECK_ERR(dit_model_config_parse(kBoth0, strlen(kBoth0), "config.json", &m), INVALID_ARGUMENT,
            "fields 'num_layers' and 'num_single_layers' are both 0");
  cJSON_Delete(m.config);
  /* The defaults are the published model's; out_channels null means in_channels. */
  static const char kDefaults[] = "{\"_class_name\": \"HunyuanVideoTransformer3DModel\", \"out_channels\": null}";
  memset(&m, 0, sizeof m);
  CHECK_OK(dit_model_config_parse(kDefaults, strlen(kDefaults), "config.json", &m));
  CHECK(!strcmp(m.family, "hunyuan_video"));
  CHECK_EQ_INT(m.hunyuan.heads, 24);
  CHECK_EQ_INT(m.hunyuan.head_dim, 128);
  CHECK_EQ_INT(m.hunyuan.layers, 20);
  CHECK_EQ_INT(m.hunyuan.single_layers, 40);
  CHECK_EQ_INT(m.hunyuan.refiner_layers, 2);
  CHECK_EQ_INT(m.hunyuan.text_dim, 4096);
  CHECK_EQ_INT(m.hunyuan.pooled_dim, 768);
  CHECK_EQ_INT(m.hunyuan.out_channels, 16);
  CHECK_EQ_INT(m.hunyuan.mlp_dim, 4 * 3072);
  CHECK_EQ_INT(m.hunyuan.axes[0], 16);
  CHECK_EQ_INT(m.hunyuan.axes[2], 56);
  CHECK(m.hunyuan.guidance_embeds);
  CHECK(m.hunyuan.rope_theta == 256.0);
  cJSON_Delete(m.config);
}

/* ---- pipelines and schedulers ---- */

static void copy_file(const char *from, const char *to) {
  char *data = NULL;
  size_t len = 0;
  CHECK_OK(dit_file_read(from, 1 << 26, &data, &len));
  CHECK_OK(dit_file_write_atomic(to, data, len));
  free(data);
}

static void write_file(const char *dir, const char *name, const char *text) {
  char path[8192];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  CHECK_OK(dit_file_write_atomic(path, text, strlen(text)));
}

static const char kIndex[] =
    "{\"_class_name\": \"WanPipeline\", \"_diffusers_version\": \"0.40.0.dev0\", \"boundary_ratio\": null,"
    " \"expand_timesteps\": false, \"scheduler\": [\"diffusers\", \"UniPCMultistepScheduler\"],"
    " \"text_encoder\": [\"transformers\", \"UMT5EncoderModel\"], \"tokenizer\": [\"transformers\", \"T5TokenizerFast\"],"
    " \"transformer\": [\"diffusers\", \"WanTransformer3DModel\"], \"transformer_2\": [null, null],"
    " \"vae\": [\"diffusers\", \"AutoencoderKLWan\"]}";

static void test_pipeline_dir(void) {
  char pipe[4096], sub[8192], from[8192], to[8192];
  snprintf(pipe, sizeof pipe, "%s", check_tmpdir("frontend_pipeline"));
  snprintf(sub, sizeof sub, "%s/transformer", pipe);
  CHECK_OK(dit_mkdirs(sub, 0755));
  snprintf(sub, sizeof sub, "%s/scheduler", pipe);
  CHECK_OK(dit_mkdirs(sub, 0755));
  static const char *const files[] = {"config.json", "diffusion_pytorch_model.safetensors"};
  for (int i = 0; i < 2; i++) {
    snprintf(from, sizeof from, "%s/%s", g_model, files[i]);
    snprintf(to, sizeof to, "%s/transformer/%s", pipe, files[i]);
    copy_file(from, to);
  }
  write_file(pipe, "model_index.json", kIndex);
  write_file(pipe, "scheduler/scheduler_config.json",
             "{\"_class_name\": \"UniPCMultistepScheduler\", \"_diffusers_version\": \"0.40.0.dev0\", \"beta_end\": 0.02,"
             " \"flow_shift\": 3.0, \"num_train_timesteps\": 1000, \"prediction_type\": \"flow_prediction\","
             " \"solver_order\": 2, \"use_flow_sigmas\": true}");

  dit_model_t *direct = NULL, *m = NULL;
  CHECK_OK(dit_model_load(g_model, NULL, &direct));
  CHECK_OK(dit_model_load(pipe, NULL, &m));
  if (!m || !direct) {
    dit_model_free(direct);
    dit_model_free(m);
    return;
  }
  CHECK(strcmp(m->pipeline.index.class_name, "WanPipeline") == 0);
  CHECK(strcmp(m->pipeline.index.transformer_class, "WanTransformer3DModel") == 0);
  CHECK(strcmp(m->pipeline.index.scheduler_class, "UniPCMultistepScheduler") == 0);
  CHECK(m->pipeline.scheduler.present);
  CHECK(strcmp(m->pipeline.scheduler.class_name, "UniPCMultistepScheduler") == 0);
  CHECK_EQ_INT(m->pipeline.scheduler.num_train_timesteps, 1000);
  CHECK_NEAR(m->pipeline.scheduler.shift, 3.0, 0);
  CHECK(m->pipeline.scheduler.use_flow_sigmas);
  CHECK(strcmp(m->pipeline.scheduler.prediction_type, "flow_prediction") == 0);
  CHECK(strstr(m->model_dir, "/transformer") != NULL);
  CHECK(!direct->pipeline.index.class_name[0] && !direct->pipeline.scheduler.present);
  /* The same transformer read either way is the same compile input. */
  char *c1 = NULL, *c2 = NULL, h1[33], h2[33];
  CHECK_OK(dit_json_canonical(direct->config, &c1));
  CHECK_OK(dit_json_canonical(m->config, &c2));
  CHECK(c1 && c2 && strcmp(c1, c2) == 0);
  free(c1);
  free(c2);
  CHECK_OK(dit_model_weights_hash(direct, h1));
  CHECK_OK(dit_model_weights_hash(m, h2));
  CHECK(strcmp(h1, h2) == 0);
  dit_model_free(m);
  dit_model_free(direct);
  m = NULL;

  /* Without a scheduler folder the defaults stay unset. */
  snprintf(to, sizeof to, "%s/scheduler/scheduler_config.json", pipe);
  CHECK(remove(to) == 0);
  CHECK_OK(dit_model_load(pipe, NULL, &m));
  CHECK(m && !m->pipeline.scheduler.present);
  dit_model_free(m);

  /* Two experts listed without their second folder. */
  write_file(pipe, "model_index.json",
             "{\"_class_name\": \"WanPipeline\", \"boundary_ratio\": 0.875, \"transformer\": [\"diffusers\", "
             "\"WanTransformer3DModel\"], \"transformer_2\": [\"diffusers\", \"WanTransformer3DModel\"]}");
  CHECK_ERR(dit_model_load(pipe, NULL, &m), NOT_FOUND,
            "model_index.json: names a second transformer (WanTransformer3DModel), but ");
  /* The index and the transformer's own config must agree on the class. */
  write_file(pipe, "model_index.json", "{\"_class_name\": \"WanPipeline\", \"transformer\": [\"diffusers\", \"WanTransformer2\"]}");
  CHECK_ERR(dit_model_load(pipe, NULL, &m), INVALID_ARGUMENT, "field 'transformer': class \"WanTransformer2\", but ");
  /* A pipeline without its transformer folder. */
  write_file(pipe, "model_index.json", kIndex);
  snprintf(to, sizeof to, "%s/transformer", pipe);
  snprintf(from, sizeof from, "%s/moved", pipe);
  CHECK(rename(to, from) == 0);
  CHECK_ERR(dit_model_load(pipe, NULL, &m), NOT_FOUND, "/transformer is not a directory");
  CHECK(rename(from, to) == 0);
  /* A bad scheduler config refuses the load, naming its file. */
  write_file(pipe, "scheduler/scheduler_config.json", "{\"_class_name\": \"UniPCMultistepScheduler\", \"flow_shift\": -3}");
  CHECK_ERR(dit_model_load(pipe, NULL, &m), OUT_OF_RANGE, "scheduler_config.json: field 'flow_shift': expected a number in");
  CHECK(m == NULL);
}

static dit_status_t index_of(const char *text) {
  dit_pipeline_index_t p;
  return dit_pipeline_index_parse(text, strlen(text), "model_index.json", &p);
}

static void test_pipeline_index(void) {
  dit_pipeline_index_t p;
  CHECK_OK(dit_pipeline_index_parse(kIndex, strlen(kIndex), "model_index.json", &p));
  CHECK(strcmp(p.transformer_class, "WanTransformer3DModel") == 0);
  CHECK_ERR(index_of("{\"transformer\": [\"diffusers\", \"WanTransformer3DModel\"]}"), NOT_FOUND,
            "model_index.json: field '_class_name': missing");
  CHECK_ERR(index_of("{\"_class_name\": \"WanVideoToVideoPipeline\", \"transformer\": [\"diffusers\", \"X\"]}"),
            UNIMPLEMENTED, "field '_class_name': found \"WanVideoToVideoPipeline\"; supported pipelines: WanPipeline, WanImageToVideoPipeline");
  CHECK_ERR(index_of("{\"_class_name\": 3}"), INVALID_ARGUMENT, "field '_class_name': expected a string, found a number");
  CHECK_ERR(index_of("{\"_class_name\": \"WanPipeline\"}"), NOT_FOUND, "field 'transformer': missing: the pipeline names no transformer");
  CHECK_ERR(index_of("{\"_class_name\": \"WanPipeline\", \"transformer\": [null, null]}"), NOT_FOUND, "names no transformer");
  CHECK_ERR(index_of("{\"_class_name\": \"WanPipeline\", \"transformer\": \"WanTransformer3DModel\"}"), INVALID_ARGUMENT,
            "field 'transformer': expected an array, found a string");
  CHECK_ERR(index_of("{\"_class_name\": \"WanPipeline\", \"transformer\": [\"diffusers\"]}"), INVALID_ARGUMENT,
            "field 'transformer': expected a [library, class] pair of strings, found 1 entries");
  CHECK_ERR(index_of("{\"_class_name\": \"WanPipeline\", \"transformer\": [\"diffusers\", \"a\", \"b\"]}"), OUT_OF_RANGE,
            "field 'transformer': more than 2 entries");
  CHECK_ERR(index_of("{\"_class_name\": \"WanPipeline\", \"transformer\": [\"diffusers\", 5]}"), INVALID_ARGUMENT,
            "field 'transformer[1]': expected a string, found a number");
  CHECK_ERR(index_of("{\"_class_name\": \"WanPipeline\", \"transformer\": [\"diffusers\", null]}"), INVALID_ARGUMENT,
            "field 'transformer[1]': expected a string, found null");
  CHECK_ERR(index_of("{\"_class_name\": \"WanPipeline\", \"transformer\": [\"\", \"WanTransformer3DModel\"]}"), INVALID_ARGUMENT,
            "field 'transformer[0]': must not be empty");
  CHECK_ERR(index_of("{\"_class_name\": \"WanPipeline\", \"transformer\": [\"mylib\", \"WanTransformer3DModel\"]}"), UNIMPLEMENTED,
            "field 'transformer': library \"mylib\": expected \"diffusers\"");
  CHECK_ERR(index_of("{\"_class_name\": \"WanPipeline\", \"transformer\": [\"diffusers\", \"W\"], \"scheduler\": {}}"),
            INVALID_ARGUMENT, "field 'scheduler': expected an array, found an object");
  CHECK_ERR(index_of("[]"), INVALID_ARGUMENT, "model_index.json: expected a JSON object at the top level");
}

/* ---- Wan2.1 / Wan2.2 pipeline variants ---- */

/* The tiny config with these in_channels, num_layers, image_dim and added_kv_proj_dim. */
static void tiny_config(char out[1024], int64_t in, int layers, const char *image_dim, const char *kv) {
  snprintf(out, 1024,
           "{\"_class_name\": \"WanTransformer3DModel\", \"added_kv_proj_dim\": %s, \"attention_head_dim\": 16,"
           " \"cross_attn_norm\": true, \"eps\": 1e-06, \"ffn_dim\": 64, \"freq_dim\": 32, \"image_dim\": %s,"
           " \"in_channels\": %lld, \"num_attention_heads\": 2, \"num_layers\": %d, \"out_channels\": 4,"
           " \"patch_size\": [1, 2, 2], \"pos_embed_seq_len\": null, \"qk_norm\": \"rms_norm_across_heads\","
           " \"rope_max_seq_len\": 64, \"text_dim\": 24}",
           kv, image_dim, (long long)in, layers);
}

/* A transformer folder: the tiny model's tensors, its patch embedding widened to `in`
 * channels, and the image-conditioning tensors of image_dim / added_kv_proj_dim (0: none). */
static void write_expert(const char *dir, const char *config, int64_t in, int64_t image_dim, int64_t kv) {
  CHECK_OK(dit_mkdirs(dir, 0755));
  write_file(dir, "config.json", config);
  dit_safetensors_t *src = NULL;
  CHECK_OK(dit_safetensors_open(g_model, &src));
  if (!src) return;
  dit_st_writer_t *w = NULL;
  CHECK_OK(dit_st_writer_create(&w));
  float *zeros = calloc(1 << 16, sizeof(float));
  for (size_t i = 0; i < dit_safetensors_count(src); i++) {
    const dit_st_tensor_t *t = dit_safetensors_at(src, i);
    if (!strcmp(t->name, "patch_embedding.weight")) {
      int64_t d[5] = {32, in, 1, 2, 2};
      CHECK_OK(dit_st_writer_add(w, t->name, DIT_F32, 5, d, zeros));
    } else {
      CHECK_OK(dit_st_writer_add(w, t->name, t->dtype, t->rank, t->dims, t->data));
    }
  }
  const int64_t D = 32;
  if (image_dim) {
    int64_t i1[1] = {image_dim}, d1[1] = {D}, ii[2] = {image_dim, image_dim}, di[2] = {D, image_dim};
    static const struct {
      const char *name;
      int which; /* 0: [image_dim], 1: [D], 2: [image_dim, image_dim], 3: [D, image_dim] */
    } parts[] = {{"norm1.weight", 0}, {"norm1.bias", 0}, {"ff.net.0.proj.weight", 2}, {"ff.net.0.proj.bias", 0},
                 {"ff.net.2.weight", 3}, {"ff.net.2.bias", 1}, {"norm2.weight", 1}, {"norm2.bias", 1}};
    const int64_t *dims[4] = {i1, d1, ii, di};
    char n[160];
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
      snprintf(n, sizeof n, "condition_embedder.image_embedder.%s", parts[k].name);
      CHECK_OK(dit_st_writer_add(w, n, DIT_F32, parts[k].which >= 2 ? 2 : 1, dims[parts[k].which], zeros));
    }
  }
  if (kv) {
    int64_t dk[2] = {D, kv}, d1[1] = {D};
    char n[160];
    for (int b = 0; b < 2; b++) {
      static const char *const names[] = {"add_k_proj.weight", "add_k_proj.bias", "add_v_proj.weight", "add_v_proj.bias",
                                          "norm_added_k.weight"};
      for (int k = 0; k < 5; k++) {
        snprintf(n, sizeof n, "blocks.%d.attn2.%s", b, names[k]);
        CHECK_OK(dit_st_writer_add(w, n, DIT_F32, strstr(names[k], ".weight") && k != 4 ? 2 : 1,
                                   strstr(names[k], ".weight") && k != 4 ? dk : d1, zeros));
      }
    }
  }
  char path[8192];
  snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
  CHECK_OK(dit_st_writer_write(w, path));
  dit_st_writer_destroy(w);
  dit_safetensors_close(src);
  free(zeros);
}

/* A fresh pipeline folder `name` with this model_index.json, a tiny transformer/ (and
 * transformer_2/ when config_2 is given) and vae/config.json when vae is given. */
static const char *make_pipeline(const char *name, const char *index, const char *config_2, const char *vae) {
  static char dir[4096];
  char sub[8192], cfg[1024];
  snprintf(dir, sizeof dir, "%s", check_tmpdir(name));
  tiny_config(cfg, 4, 2, "null", "null");
  snprintf(sub, sizeof sub, "%s/transformer", dir);
  write_expert(sub, cfg, 4, 0, 0);
  if (config_2) {
    snprintf(sub, sizeof sub, "%s/transformer_2", dir);
    write_expert(sub, config_2, 4, 0, 0);
  }
  if (vae) {
    snprintf(sub, sizeof sub, "%s/vae", dir);
    CHECK_OK(dit_mkdirs(sub, 0755));
    write_file(sub, "config.json", vae);
  }
  write_file(dir, "model_index.json", index);
  return dir;
}

static char *pipeline_identity(const dit_model_t *m) {
  cJSON *o = NULL;
  char *text = NULL;
  CHECK_OK(dit_model_pipeline_identity(m, &o));
  if (o) CHECK_OK(dit_json_canonical(o, &text));
  cJSON_Delete(o);
  return text;
}

#define A14B(ratio)                                                                                          \
  "{\"_class_name\": \"WanPipeline\", \"boundary_ratio\": " ratio ", \"expand_timesteps\": false,"          \
  " \"transformer\": [\"diffusers\", \"WanTransformer3DModel\"], \"transformer_2\": [\"diffusers\", "       \
  "\"WanTransformer3DModel\"], \"vae\": [\"diffusers\", \"AutoencoderKLWan\"]}"

static void test_two_experts(void) {
  char cfg[1024];
  tiny_config(cfg, 4, 2, "null", "null");
  dit_model_t *m = NULL, *m2 = NULL;
  const char *dir = make_pipeline("frontend_a14b", A14B("0.875"), cfg, NULL);
  CHECK_OK(dit_model_load(dir, NULL, &m));
  if (!m) return;
  const dit_pipeline_t *p = &m->pipeline;
  CHECK_EQ_INT(p->n_experts, 2);
  CHECK(p->index.has_boundary_ratio);
  CHECK_NEAR(p->index.boundary_ratio, 0.875, 0);
  CHECK(!p->index.expand_timesteps);
  CHECK(strcmp(p->index.transformer_2_class, "WanTransformer3DModel") == 0);
  CHECK(strstr(p->experts[0].dir, "/transformer") && !strstr(p->experts[0].dir, "transformer_2"));
  CHECK(strstr(p->experts[1].dir, "/transformer_2") != NULL);
  CHECK(p->experts[0].config == m->config && p->experts[0].weights == m->weights);
  CHECK(p->experts[1].config && p->experts[1].weights && p->experts[1].weights != m->weights);
  CHECK_EQ_INT(p->experts[1].wan.layers, 2);
  CHECK_EQ_INT(p->experts[1].wan.heads, 2);
  char *c0 = NULL, *c1 = NULL;
  CHECK_OK(dit_json_canonical(p->experts[0].config, &c0));
  CHECK_OK(dit_json_canonical(p->experts[1].config, &c1));
  CHECK(c0 && c1 && strcmp(c0, c1) == 0);
  free(c0);
  free(c1);
  /* A14B keeps Wan2.1's VAE: 8x / 4x from the variant without a vae/config.json. */
  CHECK(strcmp(m->variant, "wan2.1") == 0 && strcmp(p->vae.source, "variant") == 0);
  CHECK_EQ_INT(m->vae_spatial, 8);
  CHECK_OK(dit_model_check_compilable(m)); /* two experts compile into one bundle */
  /* The ratio decides which expert runs when: it is part of the identity. */
  char *id1 = pipeline_identity(m);
  CHECK(id1 && strstr(id1, "\"boundary_ratio\":0.875") && strstr(id1, "\"experts\":2"));
  dir = make_pipeline("frontend_a14b_09", A14B("0.9"), cfg, NULL);
  CHECK_OK(dit_model_load(dir, NULL, &m2));
  char *id2 = m2 ? pipeline_identity(m2) : NULL;
  CHECK(id1 && id2 && strcmp(id1, id2) != 0);
  free(id1);
  free(id2);
  dit_model_free(m2);
  dit_model_free(m);
  m = NULL;

  /* Experts that differ in anything but the weights are refused, naming field and values. */
  char other[1024];
  tiny_config(other, 4, 1, "null", "null");
  dir = make_pipeline("frontend_a14b_layers", A14B("0.875"), other, NULL);
  CHECK_ERR(dit_model_load(dir, NULL, &m), INVALID_ARGUMENT,
            "transformer_2/config.json: field 'num_layers' = 1, but ");
  CHECK_ERR(dit_model_load(dir, NULL, &m), INVALID_ARGUMENT,
            "transformer/config.json has 2: a pipeline's experts must share the architecture");
  snprintf(other, sizeof other, "%s", cfg);
  char *eps = strstr(other, "1e-06");
  memcpy(eps, "1e-05", 5);
  dir = make_pipeline("frontend_a14b_eps", A14B("0.875"), other, NULL);
  CHECK_ERR(dit_model_load(dir, NULL, &m), INVALID_ARGUMENT, "field 'eps' = 1e-05, but ");
  /* The second expert's weights are checked too. */
  dir = make_pipeline("frontend_a14b_weights", A14B("0.875"), cfg, NULL);
  char path[8192];
  snprintf(path, sizeof path, "%s/transformer_2/diffusion_pytorch_model.safetensors", dir);
  dit_st_writer_t *w = NULL;
  CHECK_OK(dit_st_writer_create(&w));
  float one = 1;
  int64_t d1[1] = {1};
  CHECK_OK(dit_st_writer_add(w, "proj_out.bias", DIT_F32, 1, d1, &one));
  CHECK_OK(dit_st_writer_write(w, path));
  dit_st_writer_destroy(w);
  CHECK_ERR(dit_model_load(dir, NULL, &m), NOT_FOUND, "transformer_2: checkpoint has no tensor ");
  /* A second expert's class must be the one the index names. */
  snprintf(other, sizeof other, "%s", cfg);
  memcpy(strstr(other, "WanTransformer3DModel"), "WanTransformer3DModeX", 21);
  dir = make_pipeline("frontend_a14b_class", A14B("0.875"), other, NULL);
  CHECK_ERR(dit_model_load(dir, NULL, &m), UNIMPLEMENTED, "transformer_2/config.json: field '_class_name': found \"WanTransformer3DModeX\"");
  CHECK(m == NULL);
}

static void test_boundary_ratio(void) {
  dit_pipeline_index_t p;
#define IDX(ratio, t2)                                                                                                \
  "{\"_class_name\": \"WanPipeline\", \"transformer\": [\"diffusers\", \"WanTransformer3DModel\"], \"boundary_ratio\": " \
  ratio ", \"transformer_2\": " t2 "}"
  static const char kT2[] = "[\"diffusers\", \"WanTransformer3DModel\"]";
  char text[512];
  snprintf(text, sizeof text, IDX("1", "%s"), kT2);
  CHECK_OK(dit_pipeline_index_parse(text, strlen(text), "model_index.json", &p));
  CHECK(p.has_boundary_ratio && p.boundary_ratio == 1.0);
  snprintf(text, sizeof text, IDX("0", "%s"), kT2);
  CHECK_ERR(index_of(text), OUT_OF_RANGE, "model_index.json: field 'boundary_ratio': expected a number in (0, 1], found 0");
  snprintf(text, sizeof text, IDX("1.5", "%s"), kT2);
  CHECK_ERR(index_of(text), OUT_OF_RANGE, "field 'boundary_ratio': expected a number in (0, 1], found 1.5");
  snprintf(text, sizeof text, IDX("-0.2", "%s"), kT2);
  CHECK_ERR(index_of(text), OUT_OF_RANGE, "found -0.20000000000000001");
  snprintf(text, sizeof text, IDX("\"0.9\"", "%s"), kT2);
  CHECK_ERR(index_of(text), INVALID_ARGUMENT, "field 'boundary_ratio': expected a number, found a string");
  /* Two experts need the ratio; the ratio needs two experts. */
  snprintf(text, sizeof text, IDX("null", "%s"), kT2);
  CHECK_ERR(index_of(text), INVALID_ARGUMENT,
            "field 'boundary_ratio': missing: a pipeline with transformer_2 (WanTransformer3DModel) needs the ratio");
  CHECK_ERR(index_of(IDX("0.5", "[null, null]")), INVALID_ARGUMENT,
            "field 'boundary_ratio': found 0.5, but the pipeline has no transformer_2 to switch to; expected null");
  CHECK_ERR(index_of(IDX("0.5", "[\"mylib\", \"WanTransformer3DModel\"]")), UNIMPLEMENTED,
            "field 'transformer_2': library \"mylib\": expected \"diffusers\"");
  CHECK_ERR(index_of(IDX("0.5", "[\"diffusers\"]")), INVALID_ARGUMENT, "field 'transformer_2': expected a [library, class] pair");
  CHECK_OK(index_of(IDX("null", "[null, null]")));
  CHECK_ERR(index_of("{\"_class_name\": \"WanPipeline\", \"transformer\": [\"diffusers\", \"W\"], \"expand_timesteps\": 1}"),
            INVALID_ARGUMENT, "field 'expand_timesteps': expected a boolean, found a number");
#undef IDX
}

#define TI2V                                                                                                 \
  "{\"_class_name\": \"WanPipeline\", \"boundary_ratio\": null, \"expand_timesteps\": true,"                \
  " \"transformer\": [\"diffusers\", \"WanTransformer3DModel\"], \"transformer_2\": [null, null],"          \
  " \"vae\": [\"diffusers\", \"AutoencoderKLWan\"]}"
#define PLAIN                                                                                                \
  "{\"_class_name\": \"WanPipeline\", \"transformer\": [\"diffusers\", \"WanTransformer3DModel\"]}"

static const dit_value_t *input_named(const dit_graph_t *g, const char *name) {
  for (dit_vid_t v = 0; v < dit_graph_num_values(g); v++) {
    const dit_value_t *x = dit_graph_cvalue(g, v);
    if (x->kind == DIT_VALUE_INPUT && x->ref && !strcmp(x->ref, name)) return x;
  }
  return NULL;
}

static const dit_op_t *op_named(const dit_graph_t *g, const char *name);

/* temb's producer: time_embedder.linear_2 stores temb's dtype itself (per token too: its rows are
 * the latent frames', a few). */
static void check_temb(const dit_graph_t *g, dit_dtype_t dt) {
  const dit_op_t *temb = op_named(g, "temb");
  CHECK(temb && dit_graph_cvalue(g, temb->out[0])->dtype == dt);
  if (!temb) return;
  CHECK(temb->kind == DIT_OP_LINEAR && op_named(g, "temb.f32") == NULL);
}

/* expand_timesteps: timestep [B, tokens], embedded once a latent frame (token_rows: each frame's
 * first token); each block's table is stored once a frame (mod_table per_token: scale_shift_table
 * plus timestep_proj [B, R, 6D] -> [B, R, 6, D], R frames), the output norm's from the table and
 * temb ([B, R, 2, D]); adaln and gated_add read each token's frame row (attrs token_group,
 * token_offset); a context-parallel rank embeds the frames of its own tokens only. */
static void check_per_token_graph(const dit_model_t *m, const dit_shape_request_t *req) {
  dit_shape_request_t r = *req;
  const int64_t D = m->wan.heads * m->wan.head_dim;
  for (int cp = 1; cp <= 2; cp++) {
    r.cp = cp, r.cp_rank = cp - 1, r.cp_mode = cp > 1 ? DIT_CP_GATHER : 0;
    dit_graph_t *g = NULL;
    CHECK_OK(dit_model_build_graph(m, &r, &g));
    if (!g) return;
    const int64_t tokens = 18, local = tokens / cp;
    const dit_value_t *t = input_named(g, "timestep");
    CHECK(t && t->rank == 2 && t->dims[0] == r.batch && t->dims[1] == tokens);
    const dit_op_t *fr = op_named(g, "timestep.frames");
    CHECK(fr && fr->kind == DIT_OP_TOKEN_ROWS && dit_graph_cvalue(g, fr->in[0]) == t);
    if (!fr) continue;
    const int64_t hw = dit_attrs_find(&fr->attrs, "group")->i, s0 = (cp - 1) * local, f0 = s0 / hw, f1 = (s0 + local - 1) / hw;
    const int64_t rows = f1 - f0 + 1, offset = s0 - f0 * hw;
    CHECK(hw > 1 && tokens % hw == 0 && dit_graph_cvalue(g, fr->out[0])->dims[1] == tokens / hw);
    const dit_op_t *sl = op_named(g, "time.sinusoid.frames");
    CHECK(cp == 1 ? sl == NULL
                  : sl != NULL && dit_attrs_find(&sl->attrs, "t0")->i == f0 && dit_attrs_find(&sl->attrs, "count")->i == rows);
    CHECK(cp == 1 || offset != 0); /* rank 1 starts inside a frame: the offset is exercised */
    const dit_op_t *tp = op_named(g, "timestep_proj"), *temb = op_named(g, "temb");
    const struct {
      const char *table;
      int64_t n;
      const dit_op_t *e;
    } tables[] = {{"blocks.1.mod", 6, tp}, {"out.mod", 2, temb}};
    for (size_t k = 0; k < 2; k++) {
      const dit_op_t *mt = op_named(g, tables[k].table);
      CHECK(mt && mt->kind == DIT_OP_MOD_TABLE && tables[k].e && mt->in[1] == tables[k].e->out[0]);
      if (!mt) continue;
      const dit_attr_t *pt = dit_attrs_find(&mt->attrs, "per_token");
      const dit_value_t *y = dit_graph_cvalue(g, mt->out[0]);
      CHECK(pt && pt->i == 1 && y->rank == 4 && y->dims[0] == r.batch && y->dims[1] == rows && y->dims[2] == tables[k].n &&
            y->dims[3] == D);
    }
    const struct {
      const char *name;
      dit_op_kind_t kind;
      int n_in;
      const char *table;
    } uses[] = {{"blocks.1.norm1", DIT_OP_ADALN, 2, "blocks.1.mod"}, {"blocks.1.attn1.residual", DIT_OP_GATED_ADD, 3, "blocks.1.mod"},
                {"blocks.1.norm3", DIT_OP_ADALN, 2, "blocks.1.mod"}, {"blocks.1.ffn.residual", DIT_OP_GATED_ADD, 3, "blocks.1.mod"},
                {"norm_out", DIT_OP_ADALN, 2, "out.mod"}};
    for (size_t u = 0; u < sizeof uses / sizeof uses[0]; u++) {
      const dit_op_t *op = op_named(g, uses[u].name), *mt = op_named(g, uses[u].table);
      CHECK(op && mt && op->kind == uses[u].kind && op->n_in == uses[u].n_in);
      if (!op || !mt || op->n_in != uses[u].n_in) continue;
      CHECK(op->in[op->n_in - 1] == mt->out[0]);
      const dit_attr_t *kg = dit_attrs_find(&op->attrs, "token_group"), *ko = dit_attrs_find(&op->attrs, "token_offset");
      CHECK(kg && kg->i == hw && ko && ko->i == offset);
    }
    check_temb(g, r.dtype);
    dit_graph_destroy(g);
  }
  r = *req;
  r.dtype = DIT_BF16;
  dit_graph_t *g = NULL;
  CHECK_OK(dit_model_build_graph(m, &r, &g));
  if (g) check_temb(g, DIT_BF16);
  dit_graph_destroy(g);
}

static void test_ti2v_and_vae(void) {
  dit_model_t *m = NULL;
  dit_shape_request_t r = {.batch = 1, .frames = 9, .height = 64, .width = 96, .text_len = 7, .dtype = DIT_F32};
  dit_latent_shape_t ls;
  /* Without vae/config.json, expand_timesteps names the TI2V variant: 16x spatial, 4x temporal. */
  const char *dir = make_pipeline("frontend_ti2v", TI2V, NULL, NULL);
  CHECK_OK(dit_model_load(dir, NULL, &m));
  if (!m) return;
  CHECK(m->pipeline.index.expand_timesteps && m->pipeline.n_experts == 1);
  CHECK(strcmp(m->variant, "wan2.2-ti2v") == 0 && strcmp(m->pipeline.vae.source, "variant") == 0);
  CHECK_EQ_INT(m->vae_spatial, 16);
  CHECK_EQ_INT(m->vae_temporal, 4);
  CHECK_OK(dit_model_latent_shape(m, &r, &ls));
  CHECK_EQ_INT(ls.height, 4);
  CHECK_OK(dit_model_check_compilable(m));
  check_per_token_graph(m, &r);
  char *id = pipeline_identity(m);
  CHECK(id && strstr(id, "\"expand_timesteps\":true") && strstr(id, "\"scale_factor_spatial\":16"));
  free(id);
  dit_model_free(m);
  m = NULL;

  /* With vae/config.json its factors are read, and its z_dim must be the latent width. */
  dir = make_pipeline("frontend_ti2v_vae", TI2V, NULL,
                      "{\"_class_name\": \"AutoencoderKLWan\", \"z_dim\": 4, \"scale_factor_spatial\": 16,"
                      " \"scale_factor_temporal\": 4, \"is_residual\": true, \"patch_size\": 2}");
  CHECK_OK(dit_model_load(dir, NULL, &m));
  if (m) {
    CHECK(strcmp(m->pipeline.vae.source, "vae/config.json") == 0);
    CHECK_EQ_INT(m->pipeline.vae.z_dim, 4);
    CHECK_EQ_INT(m->vae_spatial, 16);
    CHECK_OK(dit_model_latent_shape(m, &r, &ls));
    CHECK_EQ_INT(ls.width, 6);
  }
  dit_model_free(m);
  m = NULL;
  /* An explicit --variant must agree with the VAE the pipeline ships. */
  CHECK_ERR(dit_model_load(dir, "wan2.1", &m), INVALID_ARGUMENT,
            "--variant wan2.1: its VAE compresses 8x spatially and 4x temporally, but ");

  /* A Wan2.1 pipeline: a VAE config with the variant's factors keeps the identity of before. */
  dir = make_pipeline("frontend_t2v_vae", PLAIN, NULL, "{\"_class_name\": \"AutoencoderKLWan\", \"z_dim\": 4}");
  CHECK_OK(dit_model_load(dir, NULL, &m));
  if (m) {
    CHECK(strcmp(m->variant, "wan2.1") == 0 && strcmp(m->pipeline.vae.source, "vae/config.json") == 0);
    CHECK_EQ_INT(m->vae_spatial, 8);
    CHECK_EQ_INT(m->vae_temporal, 4);
    CHECK_OK(dit_model_check_compilable(m));
    char *none = pipeline_identity(m);
    CHECK(none == NULL);
    free(none);
  }
  dit_model_free(m);
  m = NULL;
  /* ... while factors other than the variant's enter it. */
  dir = make_pipeline("frontend_t2v_vae16", PLAIN, NULL,
                      "{\"_class_name\": \"AutoencoderKLWan\", \"z_dim\": 4, \"scale_factor_spatial\": 16}");
  CHECK_OK(dit_model_load(dir, NULL, &m));
  if (m) {
    CHECK_EQ_INT(m->vae_spatial, 16);
    char *vid = pipeline_identity(m);
    CHECK(vid && strstr(vid, "\"scale_factor_spatial\":16") && strstr(vid, "\"z_dim\":4"));
    free(vid);
  }
  dit_model_free(m);
  m = NULL;

  /* Bad VAE configs, each named by its file and field. */
  static const struct {
    const char *text, *needle;
    dit_code_t code;
  } bad[] = {
      {"{\"_class_name\": \"AutoencoderKLWan\", \"z_dim\": 16}", "vae/config.json: field 'z_dim' = 16, but ", DIT_CODE_INVALID_ARGUMENT},
      {"{\"_class_name\": \"AutoencoderKLWan\", \"z_dim\": 4, \"scale_factor_spatial\": 0}",
       "vae/config.json: field 'scale_factor_spatial': expected an integer in [1, 64], found 0", DIT_CODE_OUT_OF_RANGE},
      {"{\"_class_name\": \"AutoencoderKLWan\", \"z_dim\": 4, \"scale_factor_temporal\": 2.5}",
       "field 'scale_factor_temporal': expected an integer, found 2.5", DIT_CODE_INVALID_ARGUMENT},
      {"{\"_class_name\": \"AutoencoderKLWan\", \"z_dim\": \"4\"}", "field 'z_dim': expected an integer, found a string",
       DIT_CODE_INVALID_ARGUMENT},
      {"{\"_class_name\": \"AutoencoderKLMochi\", \"z_dim\": 4}", "field '_class_name': found \"AutoencoderKLMochi\"; expected one of \"AutoencoderKLWan\"",
       DIT_CODE_UNIMPLEMENTED},
      {"{\"z_dim\": 4}", "vae/config.json: field '_class_name': missing", DIT_CODE_NOT_FOUND},
      {"[4]", "vae/config.json: expected a JSON object", DIT_CODE_INVALID_ARGUMENT},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dir = make_pipeline("frontend_bad_vae", PLAIN, NULL, bad[i].text);
    dit_status_t s = dit_model_load(dir, NULL, &m);
    CHECK(s && dit_status_code(s) == bad[i].code && strstr(dit_status_message(s), bad[i].needle));
    if (s && !strstr(dit_status_message(s), bad[i].needle)) fprintf(stderr, "  vae case %zu: %s\n", i, dit_status_message(s));
    dit_status_free(s);
    CHECK(m == NULL);
  }
  dit_vae_factors_t v;
  const char def[] = "{\"_class_name\": \"AutoencoderKLWan\", \"scale_factor_spatial\": null}";
  CHECK_OK(dit_vae_config_parse(def, strlen(def), "vae/config.json", &v));
  CHECK(v.spatial == 8 && v.temporal == 4 && v.z_dim == 16);
}

#define I2V                                                                                                  \
  "{\"_class_name\": \"WanImageToVideoPipeline\", \"boundary_ratio\": null, \"expand_timesteps\": false,"   \
  " \"transformer\": [\"diffusers\", \"WanTransformer3DModel\"], \"transformer_2\": [null, null],"          \
  " \"image_encoder\": [\"transformers\", \"CLIPVisionModel\"]}"

static void test_i2v(void) {
  dit_model_t *m = NULL;
  char cfg[1024], sub[8192];
  /* Wan2.1 I2V: CLIP image tokens through image_dim and added_kv_proj_dim. */
  const char *dir = make_pipeline("frontend_i2v", I2V, NULL, NULL);
  snprintf(sub, sizeof sub, "%s/transformer", dir);
  tiny_config(cfg, 4, 2, "8", "8");
  write_expert(sub, cfg, 4, 8, 8);
  CHECK_OK(dit_model_load(dir, NULL, &m));
  if (m) {
    CHECK(strcmp(m->pipeline.index.class_name, "WanImageToVideoPipeline") == 0);
    CHECK_EQ_INT(m->wan.image_dim, 8);
    CHECK_EQ_INT(m->wan.added_kv_proj_dim, 8);
    /* The image embedder's output (the model width) is what add_k_proj reads. */
    CHECK_ERR(dit_model_check_compilable(m), INVALID_ARGUMENT,
              "transformer/config.json: field 'added_kv_proj_dim' = 8, expected 32 (num_attention_heads x attention_head_dim)");
    char *id = pipeline_identity(m);
    CHECK(id && strstr(id, "\"class\":\"WanImageToVideoPipeline\""));
    free(id);
  }
  dit_model_free(m);
  m = NULL;
  /* The image tensors are required by those fields, and named by them when missing. */
  write_expert(sub, cfg, 4, 0, 8);
  CHECK_ERR(dit_model_load(dir, NULL, &m), NOT_FOUND,
            "checkpoint has no tensor 'condition_embedder.image_embedder.ff.net.0.proj.bias', which this config requires "
            "(field 'image_dim' = 8)");
  write_expert(sub, cfg, 4, 8, 0);
  CHECK_ERR(dit_model_load(dir, NULL, &m), NOT_FOUND, "(field 'added_kv_proj_dim' = 8)");
  /* added_kv_proj_dim alone is image K/V with no image embedder to feed them. */
  tiny_config(cfg, 4, 2, "null", "8");
  write_expert(sub, cfg, 4, 0, 8);
  CHECK_OK(dit_model_load(dir, NULL, &m));
  if (m)
    CHECK_ERR(dit_model_check_compilable(m), UNIMPLEMENTED,
              "field 'added_kv_proj_dim' = 8 but 'image_dim' is null: image conditioning needs both");
  dit_model_free(m);
  m = NULL;
  /* A well-formed Wan2.1 I2V transformer in an image-to-video pipeline compiles. */
  tiny_config(cfg, 4, 2, "8", "32");
  write_expert(sub, cfg, 4, 8, 32);
  CHECK_OK(dit_model_load(dir, NULL, &m));
  if (m) CHECK_OK(dit_model_check_compilable(m));
  dit_model_free(m);
  m = NULL;
  /* Wan2.2 A14B I2V: the image latents are concatenated to the noise (in_channels 2 z + 4);
   * the patch embedding reads all of them, the output has z. */
  tiny_config(cfg, 12, 2, "null", "null");
  write_expert(sub, cfg, 12, 0, 0);
  CHECK_OK(dit_model_load(dir, NULL, &m));
  if (m) {
    CHECK_EQ_INT(m->wan.in_channels, 12);
    CHECK_EQ_INT(m->wan.out_channels, 4);
    CHECK_OK(dit_model_check_compilable(m));
    dit_shape_request_t r = {.batch = 2, .frames = 9, .height = 32, .width = 48, .text_len = 7, .dtype = DIT_F32};
    dit_graph_t *g = NULL;
    CHECK_OK(dit_model_build_graph(m, &r, &g));
    if (g) {
      const dit_value_t *hs = input_named(g, "hidden_states"), *t = input_named(g, "timestep");
      CHECK(hs && hs->rank == 5 && hs->dims[1] == 12);
      CHECK(t && t->rank == 1 && t->dims[0] == 2);
      for (dit_vid_t v = 0; v < dit_graph_num_values(g); v++)
        if (dit_graph_cvalue(g, v)->is_output) CHECK(dit_graph_cvalue(g, v)->dims[1] == 4);
    }
    dit_graph_destroy(g);
  }
  dit_model_free(m);
  m = NULL;
  /* A text-to-video transformer in an image-to-video pipeline compiles too. */
  tiny_config(cfg, 4, 2, "null", "null");
  write_expert(sub, cfg, 4, 0, 0);
  CHECK_OK(dit_model_load(dir, NULL, &m));
  if (m) CHECK_OK(dit_model_check_compilable(m));
  dit_model_free(m);
  m = NULL;
  /* What compiles today passes, with no pipeline facts in its identity. */
  CHECK_OK(dit_model_load(g_model, NULL, &m));
  if (m) {
    CHECK_OK(dit_model_check_compilable(m));
    CHECK_EQ_INT(m->pipeline.n_experts, 1);
    char *none = pipeline_identity(m);
    CHECK(none == NULL);
    free(none);
  }
  dit_model_free(m);
}

/* The op named `name` in g, or NULL. */
static const dit_op_t *op_named(const dit_graph_t *g, const char *name) {
  for (int32_t i = 0; i < dit_graph_num_ops(g); i++) {
    const dit_op_t *op = dit_graph_cop_at(g, i);
    if (!strcmp(dit_graph_cvalue(g, op->out[0])->name, name)) return op;
  }
  return NULL;
}

/* The committed tiny Wan2.1 I2V transformer compiles: the image embedder (exact GELU), the
 * image K/V added to the text attention before to_out, shapes from --image-len; the text is
 * exactly 512 tokens; a text-only model takes no image tokens. */
static void test_i2v_graph(void) {
  char dir[1200];
  const char *data = getenv("DIT_TEST_DATA");
  snprintf(dir, sizeof dir, "%s/wan21_i2v_tiny/model", data ? data : "data");
  dit_model_t *m = NULL;
  CHECK_OK(dit_model_load(dir, NULL, &m));
  if (!m) return;
  CHECK_OK(dit_model_check_compilable(m));
  dit_shape_request_t r = {.batch = 2, .frames = 9, .height = 32, .width = 48, .text_len = 512, .dtype = DIT_F32};
  dit_latent_shape_t ls;
  CHECK_OK(dit_model_latent_shape(m, &r, &ls));
  CHECK_EQ_INT(ls.image_len, 257);
  CHECK_EQ_INT(ls.channels, 36);
  r.image_len = 5;
  CHECK_OK(dit_model_latent_shape(m, &r, &ls));
  CHECK_EQ_INT(ls.image_len, 5);
  dit_graph_t *g = NULL;
  CHECK_OK(dit_model_build_graph(m, &r, &g));
  if (g) {
    int found = 0;
    for (dit_vid_t v = 0; v < dit_graph_num_values(g); v++) {
      const dit_value_t *x = dit_graph_cvalue(g, v);
      if (x->kind == DIT_VALUE_INPUT && x->ref && !strcmp(x->ref, "encoder_hidden_states_image")) {
        found = 1;
        CHECK(x->rank == 3 && x->dims[0] == 2 && x->dims[1] == 5 && x->dims[2] == 20);
      }
      if (x->is_output) CHECK(x->rank == 5 && x->dims[1] == 16);
    }
    CHECK(found);
    const dit_op_t *gelu = op_named(g, "image.ff.gelu");
    CHECK(gelu && gelu->kind == DIT_OP_GELU);
    const dit_op_t *sum = op_named(g, "blocks.1.attn2.text_plus_img");
    const dit_op_t *img = op_named(g, "blocks.1.attn2.sdpa_img");
    const dit_op_t *out = op_named(g, "blocks.1.attn2.out");
    CHECK(sum && img && out && sum->kind == DIT_OP_ADD && sum->in[1] == img->out[0] && out->in[0] == sum->out[0]);
    if (img) CHECK(dit_graph_cvalue(g, img->in[1])->dims[1] == 5); /* the image keys: 5 tokens */
    CHECK(op_named(g, "blocks.0.attn2.norm_added_k") != NULL);
  }
  dit_graph_destroy(g);
  r.text_len = 511;
  CHECK_ERR(dit_model_latent_shape(m, &r, &ls), INVALID_ARGUMENT, "--text-len 511: an image-conditioned model (config.json "
            "image_dim = 20) takes exactly 512 text tokens");
  dit_model_free(m);
  m = NULL;
  CHECK_OK(dit_model_load(g_model, NULL, &m));
  if (!m) return;
  r.text_len = 7;
  CHECK_ERR(dit_model_latent_shape(m, &r, &ls), INVALID_ARGUMENT, "--image-len 5: ");
  r.image_len = 0;
  CHECK_OK(dit_model_latent_shape(m, &r, &ls));
  CHECK_EQ_INT(ls.image_len, 0);
  dit_model_free(m);
}

static dit_status_t sched_of(const char *text, dit_scheduler_defaults_t *d) {
  return dit_scheduler_config_parse(text, strlen(text), "scheduler_config.json", d);
}

/* FlowMatchEulerDiscreteScheduler's schedule fields: diffusers' defaults, the published FLUX.1-dev
 * and Qwen-Image values, and the refusals. */
static void test_flow_match_config(void) {
  dit_scheduler_defaults_t d;
  CHECK_OK(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\"}", &d));
  CHECK(!d.use_dynamic_shifting && !d.invert_sigmas);
  CHECK_NEAR(d.base_shift, 0.5, 0);
  CHECK_NEAR(d.max_shift, 1.15, 0);
  CHECK_EQ_INT(d.base_image_seq_len, 256);
  CHECK_EQ_INT(d.max_image_seq_len, 4096);
  CHECK(strcmp(d.time_shift_type, "exponential") == 0);
  CHECK_NEAR(d.shift_terminal, 0, 0);
  /* FLUX.1-dev; nulls and false spacings are accepted as defaults. */
  CHECK_OK(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"base_image_seq_len\": 256, \"base_shift\": 0.5,"
                    " \"max_image_seq_len\": 4096, \"max_shift\": 1.15, \"num_train_timesteps\": 1000, \"shift\": 3.0,"
                    " \"use_dynamic_shifting\": true, \"shift_terminal\": null, \"use_karras_sigmas\": false,"
                    " \"use_beta_sigmas\": null}", &d));
  CHECK(d.use_dynamic_shifting);
  CHECK_NEAR(d.shift, 3.0, 0);
  CHECK_NEAR(d.shift_terminal, 0, 0);
  /* Qwen-Image. */
  CHECK_OK(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"base_image_seq_len\": 256, \"base_shift\": 0.5,"
                    " \"invert_sigmas\": false, \"max_image_seq_len\": 8192, \"max_shift\": 0.9, \"shift\": 1.0,"
                    " \"shift_terminal\": 0.02, \"stochastic_sampling\": false, \"time_shift_type\": \"linear\","
                    " \"use_dynamic_shifting\": true, \"use_exponential_sigmas\": false}", &d));
  CHECK(d.use_dynamic_shifting && !d.invert_sigmas);
  CHECK_NEAR(d.max_shift, 0.9, 0);
  CHECK_EQ_INT(d.max_image_seq_len, 8192);
  CHECK_NEAR(d.shift_terminal, 0.02, 0);
  CHECK(strcmp(d.time_shift_type, "linear") == 0);
  CHECK_OK(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"invert_sigmas\": true, \"shift_terminal\": 0}", &d));
  CHECK(d.invert_sigmas);
  CHECK_NEAR(d.shift_terminal, 0, 0);
  /* Other schedulers do not read them. */
  CHECK_OK(sched_of("{\"_class_name\": \"UniPCMultistepScheduler\", \"use_karras_sigmas\": true, \"max_shift\": \"x\"}", &d));
  CHECK(!d.use_dynamic_shifting && d.max_image_seq_len == 0);

  CHECK_ERR(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"use_karras_sigmas\": true}", &d), UNIMPLEMENTED,
            "scheduler_config.json: field 'use_karras_sigmas': found true; only false is supported");
  CHECK(!d.present);
  CHECK_ERR(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"use_exponential_sigmas\": true}", &d),
            UNIMPLEMENTED, "field 'use_exponential_sigmas': found true");
  CHECK_ERR(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"use_beta_sigmas\": true}", &d), UNIMPLEMENTED,
            "field 'use_beta_sigmas': found true");
  CHECK_ERR(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"stochastic_sampling\": true}", &d),
            UNIMPLEMENTED, "field 'stochastic_sampling': found true");
  CHECK_ERR(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"use_dynamic_shifting\": \"yes\"}", &d),
            INVALID_ARGUMENT, "field 'use_dynamic_shifting': expected a boolean, found a string");
  CHECK_ERR(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"time_shift_type\": \"cosine\"}", &d),
            INVALID_ARGUMENT, "field 'time_shift_type': expected one of exponential, linear, found \"cosine\"");
  CHECK_ERR(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"shift_terminal\": 1}", &d), OUT_OF_RANGE,
            "field 'shift_terminal': expected null or a number in [0, 1), found 1");
  CHECK_ERR(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"max_image_seq_len\": 256}", &d),
            INVALID_ARGUMENT, "field 'max_image_seq_len': found 256, equal to base_image_seq_len");
  CHECK_ERR(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"base_image_seq_len\": 0}", &d), OUT_OF_RANGE,
            "field 'base_image_seq_len': expected an integer in");
}

static void test_scheduler_config(void) {
  dit_scheduler_defaults_t d;
  /* FlowMatch Euler: flow sigmas always; its shift is "shift". */
  CHECK_OK(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"shift\": 5.0, \"flow_shift\": 9}", &d));
  CHECK(d.present && d.use_flow_sigmas);
  CHECK_NEAR(d.shift, 5.0, 0);
  CHECK_EQ_INT(d.num_train_timesteps, 1000);
  CHECK(strcmp(d.prediction_type, "flow_prediction") == 0);
  /* UniPC left at diffusers' defaults; nulls are defaults too. */
  CHECK_OK(sched_of("{\"_class_name\": \"UniPCMultistepScheduler\", \"flow_shift\": null, \"use_flow_sigmas\": null}", &d));
  CHECK(!d.use_flow_sigmas && strcmp(d.prediction_type, "epsilon") == 0);
  CHECK_NEAR(d.shift, 1.0, 0);
  CHECK_OK(sched_of("{\"_class_name\": \"UniPCMultistepScheduler\", \"flow_shift\": 12, \"num_train_timesteps\": 500,"
                    " \"use_flow_sigmas\": true, \"prediction_type\": \"v_prediction\"}", &d));
  CHECK(d.use_flow_sigmas && strcmp(d.prediction_type, "v_prediction") == 0);
  CHECK_NEAR(d.shift, 12.0, 0);
  CHECK_EQ_INT(d.num_train_timesteps, 500);
  CHECK_ERR(sched_of("{\"flow_shift\": 3}", &d), NOT_FOUND, "scheduler_config.json: field '_class_name': missing");
  CHECK(!d.present);
  CHECK_ERR(sched_of("{\"_class_name\": \"UniPCMultistepScheduler\", \"num_train_timesteps\": 0}", &d), OUT_OF_RANGE,
            "field 'num_train_timesteps': expected an integer in [1, 1000000], found 0");
  CHECK_ERR(sched_of("{\"_class_name\": \"UniPCMultistepScheduler\", \"flow_shift\": \"3\"}", &d), INVALID_ARGUMENT,
            "field 'flow_shift': expected a number, found a string");
  CHECK_ERR(sched_of("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"shift\": 0}", &d), OUT_OF_RANGE,
            "field 'shift': expected a number in [0.001, 1000], found 0");
  CHECK_ERR(sched_of("{\"_class_name\": \"UniPCMultistepScheduler\", \"use_flow_sigmas\": 1}", &d), INVALID_ARGUMENT,
            "field 'use_flow_sigmas': expected a boolean, found a number");
  CHECK_ERR(sched_of("{\"_class_name\": \"UniPCMultistepScheduler\", \"prediction_type\": \"flow\"}", &d), INVALID_ARGUMENT,
            "field 'prediction_type': expected one of epsilon, v_prediction, sample, flow_prediction, found \"flow\"");

  test_flow_match_config();
}

/* ---- Qwen-Image ---- */

static dit_status_t qwen_config(const char *fields, dit_model_t *m) {
  char text[1024];
  snprintf(text, sizeof text, "{\"_class_name\": \"QwenImageTransformer2DModel\"%s%s}", fields[0] ? ", " : "", fields);
  memset(m, 0, sizeof *m);
  dit_status_t s = dit_model_config_parse(text, strlen(text), "config.json", m);
  cJSON_Delete(m->config);
  m->config = NULL;
  return s;
}

static void test_qwen_config(void) {
  dit_model_t m;
  /* The class defaults are the published Qwen-Image config. */
  CHECK_OK(qwen_config("", &m));
  CHECK(!strcmp(m.family, "qwen"));
  CHECK_EQ_INT(m.qwen.layers, 60);
  CHECK_EQ_INT(m.qwen.heads, 24);
  CHECK_EQ_INT(m.qwen.head_dim, 128);
  CHECK_EQ_INT(m.qwen.joint_dim, 3584);
  CHECK_EQ_INT(m.qwen.in_channels, 64);
  CHECK_EQ_INT(m.qwen.out_channels, 16);
  CHECK_EQ_INT(m.qwen.patch, 2);
  CHECK_EQ_INT(m.qwen.axes[1], 56);
  /* out_channels null means in_channels, as in diffusers. */
  CHECK_OK(qwen_config("\"out_channels\": null, \"in_channels\": 16", &m));
  CHECK_EQ_INT(m.qwen.out_channels, 16);
  CHECK_ERR(qwen_config("\"zero_cond_t\": true", &m), UNIMPLEMENTED, "config.json: field 'zero_cond_t' = true: ");
  CHECK_ERR(qwen_config("\"use_additional_t_cond\": true", &m), UNIMPLEMENTED, "field 'use_additional_t_cond' = true: ");
  CHECK_ERR(qwen_config("\"use_layer3d_rope\": true", &m), UNIMPLEMENTED, "field 'use_layer3d_rope' = true: ");
  CHECK_ERR(qwen_config("\"guidance_embeds\": true", &m), UNIMPLEMENTED, "field 'guidance_embeds' = true: the class's time embedding");
  CHECK_OK(qwen_config("\"guidance_embeds\": false, \"zero_cond_t\": false, \"use_layer3d_rope\": false", &m));
  CHECK_ERR(qwen_config("\"axes_dims_rope\": [16, 56, 58]", &m), INVALID_ARGUMENT,
            "field 'axes_dims_rope' = [16, 56, 58]: expected even parts summing to attention_head_dim = 128");
  CHECK_ERR(qwen_config("\"axes_dims_rope\": [16, 56]", &m), INVALID_ARGUMENT,
            "field 'axes_dims_rope': expected 3 integers [frame, rows, columns], found 2");
  CHECK_ERR(qwen_config("\"num_layers\": 0", &m), OUT_OF_RANGE, "field 'num_layers': expected an integer in [1, 1024], found 0");
  CHECK_ERR(qwen_config("\"pooled_projection_dim\": 768", &m), UNIMPLEMENTED,
            "field 'pooled_projection_dim': not a QwenImageTransformer2DModel option this build knows");
  CHECK_ERR(qwen_config("\"use_additional_t_cond\": 1", &m), INVALID_ARGUMENT,
            "field 'use_additional_t_cond': expected a boolean, found a number");

  /* AutoencoderKLQwenImage: QwenImagePipeline's factor is 2 ** len(temperal_downsample). */
  dit_vae_factors_t v;
  static const char kVae[] = "{\"_class_name\": \"AutoencoderKLQwenImage\", \"z_dim\": 16}";
  CHECK_OK(dit_vae_config_parse(kVae, strlen(kVae), "vae/config.json", &v));
  CHECK_EQ_INT(v.spatial, 8);
  CHECK_EQ_INT(v.z_dim, 16);
  static const char kVae4[] = "{\"_class_name\": \"AutoencoderKLQwenImage\", \"temperal_downsample\": [false, true, true, true]}";
  CHECK_OK(dit_vae_config_parse(kVae4, strlen(kVae4), "vae/config.json", &v));
  CHECK_EQ_INT(v.spatial, 16);
  static const char kVaeBad[] = "{\"_class_name\": \"AutoencoderKLQwenImage\", \"temperal_downsample\": 3}";
  dit_status_t s = dit_vae_config_parse(kVaeBad, strlen(kVaeBad), "vae/config.json", &v);
  CHECK(s && strstr(dit_status_message(s), "field 'temperal_downsample'"));
  dit_status_free(s);
}

/* ---- UMT5 (transformers' UMT5EncoderModel) ---- */

static dit_status_t encoder_config(const char *cls, const char *fields, dit_model_t *m) {
  char text[1024];
  snprintf(text, sizeof text, "{\"architectures\": [\"%s\"], \"transformers_version\": \"5.24.0\"%s%s}", cls,
           fields[0] ? ", " : "", fields);
  memset(m, 0, sizeof *m);
  dit_status_t s = dit_model_config_parse(text, strlen(text), "config.json", m);
  cJSON_Delete(m->config);
  m->config = NULL;
  return s;
}

static dit_status_t umt5_config(const char *fields, dit_model_t *m) { return encoder_config("UMT5EncoderModel", fields, m); }

static void test_umt5_config(const char *data) {
  dit_model_t m;
  /* The class defaults are UMT5Config's; Wan's UMT5-XXL fields read as given. */
  CHECK_OK(umt5_config("", &m));
  CHECK(!strcmp(m.family, "umt5"));
  CHECK_EQ_INT(m.umt5.d_model, 512);
  CHECK_EQ_INT(m.umt5.buckets, 32);
  CHECK_OK(umt5_config("\"d_model\": 4096, \"d_ff\": 10240, \"num_heads\": 64, \"num_layers\": 24, \"vocab_size\": 256384, "
                       "\"scalable_attention\": true, \"output_past\": true, \"torch_dtype\": \"bfloat16\"", &m));
  CHECK_EQ_INT(m.umt5.d_ff, 10240);
  CHECK_EQ_INT(m.umt5.vocab, 256384);
  CHECK_ERR(umt5_config("\"feed_forward_proj\": \"relu\"", &m), UNIMPLEMENTED,
            "config.json: field 'feed_forward_proj' = \"relu\": only \"gated-gelu\" is supported");
  CHECK_ERR(umt5_config("\"dense_act_fn\": \"relu\"", &m), UNIMPLEMENTED, "field 'dense_act_fn' = \"relu\": only \"gelu_new\"");
  CHECK_ERR(umt5_config("\"is_decoder\": true", &m), UNIMPLEMENTED, "field 'is_decoder' = true: only the encoder");
  CHECK_ERR(umt5_config("\"is_gated_act\": false", &m), UNIMPLEMENTED, "field 'is_gated_act' = false");
  CHECK_ERR(umt5_config("\"model_type\": \"t5\"", &m), UNIMPLEMENTED, "field 'model_type' = \"t5\": only \"umt5\"");
  CHECK_ERR(umt5_config("\"relative_attention_max_distance\": 8", &m), INVALID_ARGUMENT,
            "field 'relative_attention_max_distance' = 8: must exceed the 8 exact buckets of relative_attention_num_buckets = 32");
  CHECK_ERR(umt5_config("\"relative_attention_num_buckets\": 2", &m), OUT_OF_RANGE, "field 'relative_attention_num_buckets'");
  CHECK_ERR(umt5_config("\"rope_theta\": 2", &m), UNIMPLEMENTED, "field 'rope_theta': not a UMT5EncoderModel option this build knows");
  static const char kTwo[] = "{\"architectures\": [\"UMT5EncoderModel\", \"T5EncoderModel\"]}";
  memset(&m, 0, sizeof m);
  CHECK_ERR(dit_model_config_parse(kTwo, strlen(kTwo), "config.json", &m), INVALID_ARGUMENT,
            "field 'architectures': expected one class name, found 2");
  static const char kBert[] = "{\"architectures\": [\"BertModel\"]}";
  CHECK_ERR(dit_model_config_parse(kBert, strlen(kBert), "config.json", &m), UNIMPLEMENTED,
            "found \"BertModel\"; supported families: ");

  /* Every relative position's bucket of Wan's text length (32 buckets, max distance 128) is the
   * one transformers computed (tests/data/make_goldens_umt5.py). */
  char path[1200];
  snprintf(path, sizeof path, "%s/umt5_tiny/meta.json", data);
  char *text = NULL;
  size_t len = 0;
  CHECK_OK(dit_file_read(path, 1 << 22, &text, &len));
  cJSON *meta = text ? cJSON_ParseWithLength(text, len) : NULL;
  const cJSON *buckets = cJSON_GetObjectItemCaseSensitive(meta, "buckets");
  const int from = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(meta, "buckets_rel_from"));
  CHECK_EQ_INT(cJSON_GetArraySize(buckets), 1023);
  int i = 0, bad = 0, large = 0;
  const cJSON *b;
  cJSON_ArrayForEach(b, buckets) {
    const int rel = from + i++, want = (int)b->valuedouble, got = dit_umt5_relative_bucket(rel, 32, 128);
    if (got != want && bad++ < 5) fprintf(stderr, "  bucket of %d: %d, transformers %d\n", rel, got, want);
    large += want == 15 || want == 31; /* the saturated buckets are reached */
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(large > 0);
  cJSON_Delete(meta);
  free(text);
}

/* T5EncoderModel (FLUX.1's text_encoder_2): UMT5's encoder with T5Config's defaults, model_type
 * "t5" and layer 0's position bias shared by every layer. */
static void test_t5_config(void) {
  dit_model_t m;
  /* T5Config's default feed-forward is the original T5's relu, which the encoder does not run. */
  CHECK_ERR(encoder_config("T5EncoderModel", "", &m), UNIMPLEMENTED,
            "config.json: field 'feed_forward_proj' = \"relu\": only \"gated-gelu\" is supported (the gated-GELU feed-forward of T5 v1.1)");
  /* google/t5-v1_1-xxl's config as the hub has it: dense_act_fn and is_gated_act derived. */
  CHECK_OK(encoder_config("T5EncoderModel",
                          "\"d_model\": 4096, \"d_ff\": 10240, \"d_kv\": 64, \"num_heads\": 64, \"num_layers\": 24, "
                          "\"num_decoder_layers\": 24, \"feed_forward_proj\": \"gated-gelu\", \"model_type\": \"t5\", "
                          "\"output_past\": true, \"tie_word_embeddings\": false, \"is_encoder_decoder\": true",
                          &m));
  CHECK(!strcmp(m.family, "t5"));
  CHECK_EQ_INT(m.umt5.vocab, 32128);
  CHECK_EQ_INT(m.umt5.d_ff, 10240);
  CHECK_EQ_INT(m.umt5.layers, 24);
  CHECK_EQ_INT(m.umt5.buckets, 32);
  CHECK_EQ_INT(m.umt5.max_distance, 128);
  CHECK_EQ_INT(m.umt5.shared_bias, 1);
  CHECK_OK(umt5_config("", &m));
  CHECK_EQ_INT(m.umt5.shared_bias, 0);
  CHECK_ERR(encoder_config("T5EncoderModel", "\"feed_forward_proj\": \"gated-gelu\", \"model_type\": \"umt5\"", &m),
            UNIMPLEMENTED, "field 'model_type' = \"umt5\": only \"t5\" is supported (T5EncoderModel's configuration)");
  CHECK_ERR(encoder_config("T5EncoderModel", "\"feed_forward_proj\": \"gated-gelu\", \"dense_act_fn\": \"gelu\"", &m),
            UNIMPLEMENTED, "field 'dense_act_fn' = \"gelu\": only \"gelu_new\"");
  CHECK_ERR(encoder_config("T5EncoderModel", "\"feed_forward_proj\": \"gated-gelu\", \"n_positions\": 512", &m), UNIMPLEMENTED,
            "field 'n_positions': not a T5EncoderModel option this build knows");
}

/* CLIPVisionModel (Wan2.1-I2V's image_encoder): CLIPVisionConfig's defaults, the published ViT-H/14's
 * fields, CLIPVisionModelWithProjection read alike, and its shape: the config's image size. */
static void test_clip_vision_config(void) {
  dit_model_t m;
  CHECK_OK(encoder_config("CLIPVisionModel", "", &m));
  CHECK(!strcmp(m.family, "clip_vision"));
  CHECK_EQ_INT(m.clip.hidden, 768);
  CHECK_EQ_INT(m.clip.positions, 1 + 7 * 7);
  CHECK_EQ_INT(m.clip.act, DIT_OP_QUICK_GELU);
  CHECK_OK(encoder_config("CLIPVisionModelWithProjection",
                          "\"hidden_size\": 1280, \"intermediate_size\": 5120, \"num_hidden_layers\": 32, \"num_attention_heads\": 16, "
                          "\"patch_size\": 14, \"image_size\": 224, \"hidden_act\": \"gelu\", \"projection_dim\": 1024, "
                          "\"model_type\": \"clip_vision_model\", \"initializer_factor\": 1.0, \"torch_dtype\": \"float32\"",
                          &m));
  CHECK(!strcmp(m.family, "clip_vision"));
  CHECK(!strcmp(m.model_class, "CLIPVisionModelWithProjection"));
  CHECK_EQ_INT(m.clip.positions, 257);
  CHECK_EQ_INT(m.clip.layers, 32);
  CHECK_EQ_INT(m.clip.patch, 14);
  CHECK_EQ_INT(m.clip.act, DIT_OP_GELU);
  /* The shape: --height/--width left out or the config's image size, 257 tokens. */
  dit_shape_request_t r = {.batch = 1, .frames = -1, .height = -1, .width = -1, .text_len = 512, .dtype = DIT_F32};
  dit_latent_shape_t ls;
  CHECK_OK(dit_model_latent_shape(&m, &r, &ls));
  CHECK_EQ_INT(ls.tokens, 257);
  r.height = r.width = 224;
  CHECK_OK(dit_model_latent_shape(&m, &r, &ls));
  r.width = 448;
  CHECK_ERR(dit_model_latent_shape(&m, &r, &ls), INVALID_ARGUMENT,
            "--width 448: CLIPVisionModelWithProjection encodes 224 x 224 images (config image_size): leave --width out or give 224");
  CHECK_ERR(encoder_config("CLIPVisionModel", "\"image_size\": 230, \"patch_size\": 14", &m), UNIMPLEMENTED,
            "config.json: field 'image_size' = 230 is not a multiple of patch_size = 14");
  CHECK_ERR(encoder_config("CLIPVisionModel", "\"vocab_size\": 10", &m), UNIMPLEMENTED,
            "field 'vocab_size': not a CLIPVisionModel option this build knows");
  CHECK_ERR(encoder_config("CLIPTextModel", "\"image_size\": 224", &m), UNIMPLEMENTED,
            "field 'image_size': not a CLIPTextModel option this build knows");
  static const char kBert[] = "{\"architectures\": [\"BertModel\"]}";
  memset(&m, 0, sizeof m);
  CHECK_ERR(dit_model_config_parse(kBert, strlen(kBert), "config.json", &m), UNIMPLEMENTED,
            "CLIPVisionModel, CLIPVisionModelWithProjection");
}

/* The decoder-only text encoders: LlamaModel (HunyuanVideo's) with LlamaConfig's defaults and the
 * published llava-llama-3-8b's fields, Qwen2_5_VLForConditionalGeneration (Qwen-Image's) in the
 * older layout (the language model's fields at the top level, rope_scaling "mrope"), and the hidden
 * state each pipeline takes: how many layers are built and whether the final norm is. */
static void test_decoder_lm_config(void) {
  dit_model_t m;
  CHECK_OK(encoder_config("LlamaModel", "", &m));
  CHECK(!strcmp(m.family, "llama_text"));
  CHECK_EQ_INT(m.decoder_lm.kv_heads, 32); /* num_key_value_heads null: one per query head */
  CHECK_EQ_INT(m.decoder_lm.head_dim, 128);
  CHECK_EQ_INT(m.decoder_lm.run_layers, 30); /* hidden_states[-3] of 32 layers */
  CHECK_EQ_INT(m.decoder_lm.final_norm, 0);
  CHECK(m.decoder_lm.rope_theta == 10000.0);
  CHECK_OK(encoder_config("LlamaModel",
                          "\"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": 32, "
                          "\"num_key_value_heads\": 8, \"rope_theta\": 500000.0, \"rope_scaling\": null, \"vocab_size\": 128320, "
                          "\"max_position_embeddings\": 8192, \"rms_norm_eps\": 1e-5, \"pretraining_tp\": 1, \"model_type\": \"llama\", "
                          "\"bos_token_id\": 128000, \"eos_token_id\": 128001, \"torch_dtype\": \"float16\"",
                          &m));
  CHECK_EQ_INT(m.decoder_lm.kv_heads, 8);
  CHECK_EQ_INT(m.decoder_lm.vocab, 128320);
  CHECK_EQ_INT(m.decoder_lm.qkv_bias, 0);
  CHECK(m.decoder_lm.rope_theta == 500000.0);
  CHECK_OK(encoder_config("LlamaModel", "\"head_dim\": 64, \"attention_bias\": true", &m));
  CHECK_EQ_INT(m.decoder_lm.head_dim, 64); /* Llama's own: q_proj has heads * head_dim outputs */
  CHECK_EQ_INT(m.decoder_lm.qkv_bias, 1);
  CHECK_EQ_INT(m.decoder_lm.o_bias, 1);
  static const char kQwen[] =
      "\"hidden_size\": 3584, \"intermediate_size\": 18944, \"num_hidden_layers\": 28, \"num_attention_heads\": 28, "
      "\"num_key_value_heads\": 4, \"rope_theta\": 1000000.0, \"sliding_window\": 32768, \"use_sliding_window\": false, "
      "\"max_window_layers\": 28, \"model_type\": \"qwen2_5_vl\", \"image_token_id\": 151655, \"vision_config\": {\"depth\": 32}, "
      "\"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [16, 24, 24]}";
  CHECK_OK(encoder_config("Qwen2_5_VLForConditionalGeneration", kQwen, &m));
  CHECK(!strcmp(m.family, "qwen2_5_vl_text"));
  CHECK_EQ_INT(m.decoder_lm.head_dim, 128);
  CHECK_EQ_INT(m.decoder_lm.kv_heads, 4);
  CHECK_EQ_INT(m.decoder_lm.qkv_bias, 1);
  CHECK_EQ_INT(m.decoder_lm.o_bias, 0);
  CHECK_EQ_INT(m.decoder_lm.run_layers, 28); /* hidden_states[-1]: every layer, then the norm */
  CHECK_EQ_INT(m.decoder_lm.final_norm, 1);
  CHECK(m.decoder_lm.rope_theta == 1000000.0);
  CHECK_ERR(encoder_config("Qwen2_5_VLForConditionalGeneration",
                           "\"hidden_size\": 3584, \"num_attention_heads\": 28, \"num_key_value_heads\": 4, "
                           "\"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [16, 24, 16]}",
                           &m),
            INVALID_ARGUMENT, "expected three sections summing to head_dim / 2 = 64");
  CHECK_ERR(encoder_config("Qwen2_5_VLForConditionalGeneration", "\"text_config\": {\"layer_types\": [\"sliding_attention\"]}", &m),
            UNIMPLEMENTED, "layer type \"sliding_attention\": only \"full_attention\" is supported");
  CHECK_ERR(encoder_config("LlamaModel", "\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}", &m), UNIMPLEMENTED,
            "rotary type \"dynamic\": only LlamaModel's unscaled rotary embedding (\"default\") is supported");
  CHECK_ERR(encoder_config("LlamaModel", "\"num_hidden_layers\": 1", &m), INVALID_ARGUMENT,
            "HunyuanVideoPipeline takes hidden_states[-3], which needs at least 2 layers");
  CHECK_ERR(encoder_config("LlamaModel", "\"d_model\": 8", &m), UNIMPLEMENTED, "field 'd_model': not a LlamaModel option this build knows");
  /* A text encoder's shape is tokens alone. */
  CHECK_OK(encoder_config("LlamaModel", "", &m));
  dit_shape_request_t r = {.batch = 1, .frames = 5, .height = -1, .width = -1, .text_len = 256, .dtype = DIT_F32};
  dit_latent_shape_t ls;
  CHECK_ERR(dit_model_latent_shape(&m, &r, &ls), INVALID_ARGUMENT, "--frames 5: LlamaModel is a text encoder");
}

int main(void) {
  const char *data = getenv("DIT_TEST_DATA");
  snprintf(g_model, sizeof g_model, "%s/wan_tiny_a/model", data ? data : "data");
  test_load_and_latent();
  test_weights_hash_sharding();
  test_bf16_policy();
  test_config_fields();
  test_hunyuan_config();
  test_pipeline_dir();
  test_umt5_config(data ? data : "data");
  test_t5_config();
  test_clip_vision_config();
  test_decoder_lm_config();
  test_pipeline_index();
  test_two_experts();
  test_boundary_ratio();
  test_ti2v_and_vae();
  test_i2v();
  test_i2v_graph();
  test_scheduler_config();
  test_qwen_config();
  return check_summary("test_frontend");
}
