/* compiler/frontend: config normalization and its field checks, variants and VAE factors,
 * latent shapes, the weights content hash (independent of file layout and sharding), dtype
 * policy, diffusers pipeline directories and scheduler defaults. */
#include <stdlib.h>
#include <string.h>

#include "artifacts/identity.h"
#include "artifacts/safetensors.h"
#include "base/fileio.h"
#include "check.h"
#include "compiler/frontend.h"

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

/* The tiny config with `key` set to the JSON text `value` (NULL: removed), parsed. */
static dit_status_t config_with(const char *key, const char *value) {
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
  CHECK_ERR(config_with("image_dim", "-1"), OUT_OF_RANGE, "field 'image_dim': expected an integer in [0, 1048576], found -1");
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
  cJSON_Delete(m.config);
  CHECK_OK(config_with("out_channels", "null"));
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
  CHECK(strcmp(m->pipeline.class_name, "WanPipeline") == 0);
  CHECK(strcmp(m->pipeline.transformer_class, "WanTransformer3DModel") == 0);
  CHECK(strcmp(m->pipeline.scheduler_class, "UniPCMultistepScheduler") == 0);
  CHECK(m->scheduler.present);
  CHECK(strcmp(m->scheduler.class_name, "UniPCMultistepScheduler") == 0);
  CHECK_EQ_INT(m->scheduler.num_train_timesteps, 1000);
  CHECK_NEAR(m->scheduler.shift, 3.0, 0);
  CHECK(m->scheduler.use_flow_sigmas);
  CHECK(strcmp(m->scheduler.prediction_type, "flow_prediction") == 0);
  CHECK(strstr(m->model_dir, "/transformer") != NULL);
  CHECK(!direct->pipeline.class_name[0] && !direct->scheduler.present);
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
  CHECK(m && !m->scheduler.present);
  dit_model_free(m);

  /* Two experts (Wan2.2 A14B): a clear refusal, for now. */
  write_file(pipe, "model_index.json",
             "{\"_class_name\": \"WanPipeline\", \"boundary_ratio\": 0.875, \"transformer\": [\"diffusers\", "
             "\"WanTransformer3DModel\"], \"transformer_2\": [\"diffusers\", \"WanTransformer3DModel\"]}");
  CHECK_ERR(dit_model_load(pipe, NULL, &m), UNIMPLEMENTED,
            "model_index.json: field 'transformer_2': a second transformer (WanTransformer3DModel; two experts switched "
            "at boundary_ratio) is not supported yet");
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
  CHECK_ERR(index_of("{\"_class_name\": \"WanImageToVideoPipeline\", \"transformer\": [\"diffusers\", \"X\"]}"),
            UNIMPLEMENTED, "field '_class_name': found \"WanImageToVideoPipeline\"; supported pipelines: WanPipeline");
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

static dit_status_t sched_of(const char *text, dit_scheduler_defaults_t *d) {
  return dit_scheduler_config_parse(text, strlen(text), "scheduler_config.json", d);
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
}

int main(void) {
  const char *data = getenv("DIT_TEST_DATA");
  snprintf(g_model, sizeof g_model, "%s/wan_tiny_a/model", data ? data : "data");
  test_load_and_latent();
  test_weights_hash_sharding();
  test_bf16_policy();
  test_config_fields();
  test_pipeline_dir();
  test_pipeline_index();
  test_scheduler_config();
  return check_summary("test_frontend");
}
