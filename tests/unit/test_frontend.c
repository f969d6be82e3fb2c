/* compiler/frontend: config normalization, variants and VAE factors, latent shapes, the
 * weights content hash (independent of file layout and sharding), dtype policy. */
#include <stdlib.h>
#include <string.h>

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

int main(void) {
  const char *data = getenv("DIT_TEST_DATA");
  snprintf(g_model, sizeof g_model, "%s/wan_tiny_a/model", data ? data : "data");
  test_load_and_latent();
  test_weights_hash_sharding();
  test_bf16_policy();
  return check_summary("test_frontend");
}
