/* runtime/condition: the first-frame mask and the first-frame blend against hand-computed
 * values, each step's transformer inputs for every kind of bundle, and the refusals of inputs
 * that do not fit the bundle. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "runtime/condition.h"

typedef struct fake {
  dit_manifest_t m;
  dit_manifest_io_t in[4], out[1];
} fake_t;

static void io(dit_manifest_io_t *x, const char *name, int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t d4) {
  memset(x, 0, sizeof *x);
  snprintf(x->name, sizeof x->name, "%s", name);
  x->dtype = DIT_F32;
  x->rank = rank;
  int64_t d[5] = {d0, d1, d2, d3, d4};
  for (int i = 0; i < rank; i++) x->dims[i] = d[i];
}

/* A bundle of batch B taking hidden_states [B, cin, F, h, w] and giving sample [B, cout, ...];
 * timestep [B] (tokens 0) or [B, tokens]; image tokens n_img (0: none). */
static void make(fake_t *f, int64_t B, int64_t cin, int64_t cout, int64_t F, int64_t h, int64_t w, int64_t tokens, int64_t n_img) {
  memset(f, 0, sizeof *f);
  io(&f->in[0], "hidden_states", 5, B, cin, F, h, w);
  if (tokens) io(&f->in[1], "timestep", 2, B, tokens, 0, 0, 0);
  else io(&f->in[1], "timestep", 1, B, 0, 0, 0, 0);
  io(&f->in[2], "encoder_hidden_states", 3, B, 3, 4, 0, 0);
  if (n_img) io(&f->in[3], "encoder_hidden_states_image", 3, B, n_img, 2, 0, 0);
  io(&f->out[0], "sample", 5, B, cout, F, h, w);
  f->m.io_inputs = f->in;
  f->m.n_inputs = n_img ? 4 : 3;
  f->m.io_outputs = f->out;
  f->m.n_outputs = 1;
}

static dit_tensor_t view(void *data, dit_dtype_t dt, int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t d4) {
  dit_tensor_t t = {data, dt, rank, {d0, d1, d2, d3, d4}};
  return t;
}

static void test_mask(void) {
  /* WanImageToVideoPipeline, 9 video frames, vae_scale_factor_temporal 4: mask_lat_size is
   * [1, 1, 0, 0, 0, 0, 0, 0, 0]; frame 0 repeated 4 times gives [1, 1, 1, 1, 0 x 8], viewed as
   * [3, 4] and transposed: every channel is 1 on latent frame 0 and 0 after. */
  float got[4 * 3 * 2];
  dit_condition_first_frame_mask(4, 3, 1, 2, got);
  static const float want[4 * 3 * 2] = {1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0};
  for (int i = 0; i < 24; i++) CHECK_EQ_INT(got[i] == want[i], 1);
  /* One latent frame (one video frame): all ones. */
  float one[2 * 1 * 3];
  dit_condition_first_frame_mask(2, 1, 3, 1, one);
  for (int i = 0; i < 6; i++) CHECK(one[i] == 1.0f);
}

static void test_blend(void) {
  /* C 2, F 3, hw 2: frame 0 takes the condition, frames 1 and 2 the latents. */
  const float lat[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const float cond[4] = {-1, -2, -3, -4};
  const float want[12] = {-1, -2, 3, 4, 5, 6, -3, -4, 9, 10, 11, 12};
  float out[12];
  dit_condition_blend_first_frame(2, 3, 2, cond, lat, out);
  for (int i = 0; i < 12; i++) CHECK(out[i] == want[i]);
  /* In place, as the loop's last blend runs. */
  float inplace[12];
  memcpy(inplace, lat, sizeof lat);
  dit_condition_blend_first_frame(2, 3, 2, cond, inplace, inplace);
  for (int i = 0; i < 12; i++) CHECK(inplace[i] == want[i]);
}

static void test_text(void) {
  fake_t f;
  make(&f, 2, 3, 3, 2, 1, 2, 0, 0);
  int rank = 0;
  int64_t dims[DIT_MAX_RANK];
  CHECK_OK(dit_condition_latents_shape(&f.m, &rank, dims));
  CHECK_EQ_INT(rank, 5);
  CHECK_EQ_INT(dims[1], 3);
  dit_condition_t *c = NULL;
  CHECK_OK(dit_condition_create(&f.m, NULL, &c));
  if (!c) return;
  CHECK_EQ_INT(dit_condition_kind(c), DIT_CONDITION_TEXT);
  float lat[24] = {0};
  dit_tensor_t x, t, img;
  CHECK_OK(dit_condition_step(c, lat, 999.0, &x, &t, &img));
  CHECK(x.data == (void *)lat);
  CHECK_EQ_INT(t.rank, 1);
  CHECK_EQ_INT(t.dims[0], 2);
  CHECK(((float *)t.data)[0] == 999.0f && ((float *)t.data)[1] == 999.0f);
  CHECK(img.data == NULL);
  dit_condition_destroy(c);
}

static void test_concat(void) {
  /* Wan2.1-I2V-shaped: 2 latent channels, 4 mask channels, 2 image channels; F 2, h 1, w 2;
   * 3 image tokens of dim 2. */
  fake_t f;
  make(&f, 2, 8, 2, 2, 1, 2, 0, 3);
  int rank = 0;
  int64_t dims[DIT_MAX_RANK];
  CHECK_OK(dit_condition_latents_shape(&f.m, &rank, dims));
  CHECK_EQ_INT(dims[0], 2);
  CHECK_EQ_INT(dims[1], 2);
  CHECK_EQ_INT(dims[2], 2);
  float image[1 * 2 * 2 * 2] = {10, 11, 12, 13, 14, 15, 16, 17};
  float embeds[1 * 3 * 2] = {1, 2, 3, 4, 5, 6};
  dit_condition_inputs_t in = {view(image, DIT_F32, 5, 1, 2, 2, 1, 2), "img", view(embeds, DIT_F32, 3, 1, 3, 2, 0, 0), "emb"};
  dit_condition_t *c = NULL;
  CHECK_OK(dit_condition_create(&f.m, &in, &c));
  if (!c) return;
  CHECK_EQ_INT(dit_condition_kind(c), DIT_CONDITION_CONCAT);
  float lat[2 * 2 * 2 * 2];
  for (int i = 0; i < 16; i++) lat[i] = (float)(100 + i);
  dit_tensor_t x, t, img;
  CHECK_OK(dit_condition_step(c, lat, 500.0, &x, &t, &img));
  CHECK_EQ_INT(x.dims[1], 8);
  const float *h = x.data;
  /* Per item: 2 latent channels (8 values), the mask (4 channels: 1 1 0 0 each), the image
   * (batch 1 serves both items). */
  for (int b = 0; b < 2; b++) {
    const float *it = h + b * 32;
    for (int i = 0; i < 8; i++) CHECK(it[i] == lat[b * 8 + i]);
    for (int ch = 0; ch < 4; ch++) {
      const float *mk = it + 8 + ch * 4;
      CHECK(mk[0] == 1.0f && mk[1] == 1.0f && mk[2] == 0.0f && mk[3] == 0.0f);
    }
    for (int i = 0; i < 8; i++) CHECK(it[24 + i] == image[i]);
  }
  CHECK(((float *)t.data)[0] == 500.0f && ((float *)t.data)[1] == 500.0f);
  CHECK(img.data != NULL);
  CHECK_EQ_INT(img.dims[0], 2);
  CHECK_EQ_INT(img.dims[1], 3);
  for (int b = 0; b < 2 && img.data; b++)
    for (int i = 0; i < 6; i++) CHECK(((float *)img.data)[b * 6 + i] == embeds[i]);
  /* The next step sees the new latents and the same conditioning. */
  for (int i = 0; i < 16; i++) lat[i] = -(float)i;
  CHECK_OK(dit_condition_step(c, lat, 250.0, &x, &t, &img));
  h = x.data;
  CHECK(h[32 + 3] == -11.0f && h[32 + 8] == 1.0f && h[32 + 24] == 10.0f);
  dit_condition_finish(c, lat);
  CHECK(lat[0] == 0.0f && lat[15] == -15.0f);
  dit_condition_destroy(c);
}

static void test_tokens(void) {
  /* TI2V-shaped: C 2 in and out, F 2, h 2, w 2, patch 2: 2 tokens, one per frame. */
  fake_t f;
  make(&f, 1, 2, 2, 2, 2, 2, 2, 0);
  float lat[2 * 2 * 4];
  for (int i = 0; i < 16; i++) lat[i] = (float)i;
  dit_condition_t *c = NULL;
  CHECK_OK(dit_condition_create(&f.m, NULL, &c));
  if (c) {
    CHECK_EQ_INT(dit_condition_kind(c), DIT_CONDITION_TOKEN_TEXT);
    dit_tensor_t x, t, img;
    CHECK_OK(dit_condition_step(c, lat, 757.0, &x, &t, &img));
    CHECK(x.data == (void *)lat);
    CHECK_EQ_INT(t.rank, 2);
    CHECK(((float *)t.data)[0] == 757.0f && ((float *)t.data)[1] == 757.0f);
    dit_condition_destroy(c);
  }
  float cond[2 * 1 * 4] = {-1, -2, -3, -4, -5, -6, -7, -8};
  dit_condition_inputs_t in = {view(cond, DIT_F32, 5, 1, 2, 1, 2, 2), "img", {0}, NULL};
  CHECK_OK(dit_condition_create(&f.m, &in, &c));
  if (!c) return;
  CHECK_EQ_INT(dit_condition_kind(c), DIT_CONDITION_TOKEN_IMAGE);
  dit_tensor_t x, t, img;
  CHECK_OK(dit_condition_step(c, lat, 757.0, &x, &t, &img));
  const float want[16] = {-1, -2, -3, -4, 4, 5, 6, 7, -5, -6, -7, -8, 12, 13, 14, 15};
  for (int i = 0; i < 16; i++) CHECK(((float *)x.data)[i] == want[i]);
  /* The latents themselves are left to the sampler. */
  CHECK(lat[0] == 0.0f);
  CHECK(((float *)t.data)[0] == 0.0f && ((float *)t.data)[1] == 757.0f);
  dit_condition_finish(c, lat);
  for (int i = 0; i < 16; i++) CHECK(lat[i] == want[i]);
  dit_condition_destroy(c);
}

/* Batch 2, 3 frames of 2 x 3 tokens: each item's first 6 tokens at 0, the other 12 at t; the
 * image (batch 1) held on both items' first frame. */
static void test_token_layout(void) {
  fake_t f;
  make(&f, 2, 1, 1, 3, 4, 6, 18, 0);
  float cond[24], lat[2 * 72];
  for (int i = 0; i < 24; i++) cond[i] = -1.0f - (float)i;
  for (int i = 0; i < 144; i++) lat[i] = (float)i;
  dit_condition_inputs_t in = {view(cond, DIT_F32, 5, 1, 1, 1, 4, 6), "img", {0}, NULL};
  dit_condition_t *c = NULL;
  CHECK_OK(dit_condition_create(&f.m, &in, &c));
  if (!c) return;
  dit_tensor_t x, t, img;
  CHECK_OK(dit_condition_step(c, lat, 312.0, &x, &t, &img));
  CHECK_EQ_INT(t.dims[0], 2);
  CHECK_EQ_INT(t.dims[1], 18);
  const float *tv = t.data, *h = x.data;
  for (int b = 0; b < 2; b++) {
    for (int k = 0; k < 18; k++) CHECK(tv[b * 18 + k] == (k < 6 ? 0.0f : 312.0f));
    for (int i = 0; i < 72; i++) CHECK(h[b * 72 + i] == (i < 24 ? cond[i] : lat[b * 72 + i]));
  }
  dit_condition_destroy(c);
}

static void test_refusals(void) {
  fake_t f;
  dit_condition_t *c = (dit_condition_t *)&f; /* must come back NULL */
  float buf[64] = {0};
  int64_t i64[64] = {0};
  /* Text-to-video bundle given image latents or embeddings. */
  make(&f, 1, 2, 2, 2, 1, 2, 0, 0);
  dit_condition_inputs_t in = {view(buf, DIT_F32, 5, 1, 2, 2, 1, 2), "--image-latents i.st", {0}, NULL};
  CHECK_ERR(dit_condition_create(&f.m, &in, &c), INVALID_ARGUMENT, "--image-latents i.st: the bundle is text-to-video");
  CHECK(c == NULL);
  dit_condition_inputs_t emb = {{0}, NULL, view(buf, DIT_F32, 3, 1, 3, 2, 0, 0), "--image-embeds e.st"};
  CHECK_ERR(dit_condition_create(&f.m, &emb, &c), INVALID_ARGUMENT, "--image-embeds e.st: the bundle has no 'encoder_hidden_states_image'");
  /* Image-to-video bundle without its image latents, and with wrong ones. */
  make(&f, 1, 8, 2, 2, 1, 2, 0, 0);
  CHECK_ERR(dit_condition_create(&f.m, NULL, &c), INVALID_ARGUMENT,
            "8 channels = 2 latent + 4 mask + 2 image-latent channels): generate needs --image-latents with a tensor 'image_latents' [1, 2, 2, 1, 2]");
  in.image_latents = view(buf, DIT_F32, 5, 1, 2, 3, 1, 2);
  CHECK_ERR(dit_condition_create(&f.m, &in, &c), INVALID_ARGUMENT, "--image-latents i.st: tensor 'image_latents' has shape [1, 2, 3, 1, 2], expected [1, 2, 2, 1, 2]");
  in.image_latents = view(buf, DIT_F32, 4, 1, 2, 2, 2, 0);
  CHECK_ERR(dit_condition_create(&f.m, &in, &c), INVALID_ARGUMENT, "has shape [1, 2, 2, 2], expected [1, 2, 2, 1, 2]");
  in.image_latents = view(buf, DIT_F32, 5, 3, 2, 2, 1, 2);
  CHECK_ERR(dit_condition_create(&f.m, &in, &c), INVALID_ARGUMENT, "expected [1, 2, 2, 1, 2] (the latents' shape; batch 1)");
  in.image_latents = view(i64, DIT_I64, 5, 1, 2, 2, 1, 2);
  CHECK_ERR(dit_condition_create(&f.m, &in, &c), INVALID_ARGUMENT, "tensor 'image_latents' has dtype i64, expected a float dtype");
  /* A bundle that takes image embeddings: without them, with another token count. */
  make(&f, 1, 8, 2, 2, 1, 2, 0, 5);
  in.image_latents = view(buf, DIT_F32, 5, 1, 2, 2, 1, 2);
  CHECK_ERR(dit_condition_create(&f.m, &in, &c), INVALID_ARGUMENT,
            "the bundle takes image embeddings (input 'encoder_hidden_states_image' [1, 5, 2]): generate needs --image-embeds");
  in.image_embeds = view(buf, DIT_F32, 3, 1, 3, 2, 0, 0);
  in.image_embeds_what = "--image-embeds e.st";
  CHECK_ERR(dit_condition_create(&f.m, &in, &c), INVALID_ARGUMENT,
            "--image-embeds e.st: tensor 'image_embeds' has 3 image tokens (shape [1, 3, 2]), but the bundle was compiled for 5");
  in.image_embeds = view(buf, DIT_F32, 3, 1, 5, 3, 0, 0);
  CHECK_ERR(dit_condition_create(&f.m, &in, &c), INVALID_ARGUMENT, "tensor 'image_embeds' has shape [1, 5, 3], expected [1, 5, 2]");
  in.image_embeds = view(buf, DIT_F32, 3, 1, 5, 2, 0, 0);
  CHECK_OK(dit_condition_create(&f.m, &in, &c));
  dit_condition_destroy(c);
  /* Per-token bundle: the image is one latent frame. */
  make(&f, 1, 2, 2, 2, 2, 2, 2, 0);
  in = (dit_condition_inputs_t){view(buf, DIT_F32, 5, 1, 2, 2, 2, 2), "--image-latents i.st", {0}, NULL};
  CHECK_ERR(dit_condition_create(&f.m, &in, &c), INVALID_ARGUMENT, "has shape [1, 2, 2, 2, 2], expected [1, 2, 1, 2, 2] (one latent frame");
  /* Bundles generate cannot feed. */
  int rank;
  int64_t dims[DIT_MAX_RANK];
  make(&f, 1, 2, 2, 2, 1, 2, 0, 0);
  snprintf(f.in[2].name, sizeof f.in[2].name, "control");
  CHECK_ERR(dit_condition_latents_shape(&f.m, &rank, dims), UNIMPLEMENTED, "field 'io.inputs[2].name' = \"control\"");
  make(&f, 1, 4, 2, 2, 1, 2, 0, 0);
  CHECK_ERR(dit_condition_latents_shape(&f.m, &rank, dims), UNIMPLEMENTED, "more than 2 x 2 input channels");
  make(&f, 1, 2, 2, 3, 2, 2, 4, 0);
  CHECK_ERR(dit_condition_latents_shape(&f.m, &rank, dims), UNIMPLEMENTED, "its 4 tokens do not split over the 3 latent frames");
  make(&f, 1, 2, 2, 2, 1, 2, 0, 0);
  f.m.n_outputs = 0;
  CHECK_ERR(dit_condition_latents_shape(&f.m, &rank, dims), NOT_FOUND, "no 'sample' output");
}

int main(void) {
  test_mask();
  test_blend();
  test_text();
  test_concat();
  test_tokens();
  test_token_layout();
  test_refusals();
  return check_summary("test_condition");
}
