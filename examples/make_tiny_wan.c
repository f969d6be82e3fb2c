/* make_tiny_wan: writes a diffusers-format WanTransformer3DModel directory (config.json +
 * diffusion_pytorch_model.safetensors) with random weights drawn so every block changes the
 * residual stream, or, with --variant, a diffusers pipeline directory of a Wan2.2 or
 * image-to-video model (model_index.json, scheduler, one or two transformers, the VAE config
 * TI2V needs), plus stand-in text embeddings (embeds.safetensors) for `ditrun generate`.
 * Presets cover the tiny default and the real Wan2.1/Wan2.2 sizes (for timing on GPUs). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifacts/safetensors.h"
#include "base/fileio.h"
#include "runtime/rng.h"

/* The model variants. A pipeline variant's published facts (class, experts and boundary,
 * per-token timesteps, the scheduler's flow_shift, latent channels) are diffusers' own: those
 * of scripts/convert_wan_to_diffusers.py at the pinned commit. */
enum { V_T2V, V_T2V_A14B, V_TI2V, V_I2V_A14B, V_I2V_WAN21, N_VARIANTS };

typedef struct variant {
  const char *name;
  const char *pipeline;   /* model_index.json's _class_name; NULL: a bare transformer directory */
  const char *boundary;   /* boundary_ratio as diffusers writes it; NULL: one transformer */
  int expand_timesteps;   /* Wan2.2 TI2V: a timestep per patch token */
  const char *flow_shift; /* UniPC's flow_shift as diffusers writes it */
  int64_t in_channels, out_channels; /* 0: the preset's latent channels */
  int image;              /* Wan2.1 I2V: the CLIP image embedder and the image K/V of attn2 */
  int vae_config;         /* TI2V: vae/config.json of Wan2.2's 48-channel, 16x VAE */
} variant_t;

static const variant_t kVariants[N_VARIANTS] = {
    [V_T2V] = {"t2v", NULL, NULL, 0, NULL, 0, 0, 0, 0},
    [V_T2V_A14B] = {"t2v-a14b", "WanPipeline", "0.875", 0, "3.0", 16, 16, 0, 0},
    [V_TI2V] = {"ti2v", "WanPipeline", NULL, 1, "5.0", 48, 48, 0, 1},
    [V_I2V_A14B] = {"i2v-a14b", "WanImageToVideoPipeline", "0.9", 0, "3.0", 36, 16, 0, 0},
    [V_I2V_WAN21] = {"i2v-wan21", "WanImageToVideoPipeline", NULL, 0, "3.0", 36, 16, 1, 0},
};

#define FITS(v) (1u << (v))
#define ALL_VARIANTS (FITS(N_VARIANTS) - 1)

typedef struct cfg {
  const char *name;
  int64_t heads, head_dim, layers, ffn, channels, text_dim, freq_dim;
  int64_t image_dim; /* the image encoder's width, for the I2V variant */
  unsigned variants; /* FITS() of every variant this preset makes sense for */
} cfg_t;

static const cfg_t kPresets[] = {
    {"tiny", 2, 24, 2, 96, 4, 32, 32, 40, ALL_VARIANTS},
    /* Tiny models at the head dims of the Hopper attention kernel (64, 128). */
    {"tiny-hd64", 2, 64, 1, 256, 4, 32, 32, 40, ALL_VARIANTS},
    {"tiny-hd128", 2, 128, 1, 256, 4, 32, 32, 40, ALL_VARIANTS},
    {"wan2.1-1.3b", 12, 128, 30, 8960, 16, 4096, 256, 1280, FITS(V_T2V)},
    /* Wan2.1-T2V-14B, and Wan2.1-I2V-14B (480p and 720p share the transformer). */
    {"wan2.1-14b", 40, 128, 40, 13824, 16, 4096, 256, 1280, FITS(V_T2V) | FITS(V_I2V_WAN21)},
    /* Each expert of Wan2.2-T2V-A14B and Wan2.2-I2V-A14B. */
    {"wan2.2-a14b", 40, 128, 40, 13824, 16, 4096, 256, 1280, FITS(V_T2V_A14B) | FITS(V_I2V_A14B)},
    {"wan2.2-ti2v-5b", 24, 128, 30, 14336, 48, 4096, 256, 1280, FITS(V_TI2V)},
};
#define N_PRESETS (sizeof kPresets / sizeof kPresets[0])

static const char kUsage[] =
    "usage: make_tiny_wan --out DIR [--variant t2v|t2v-a14b|ti2v|i2v-a14b|i2v-wan21]\n"
    "                     [--preset tiny|tiny-hd64|tiny-hd128|wan2.1-1.3b|wan2.1-14b|wan2.2-a14b|wan2.2-ti2v-5b]\n"
    "                     [--seed S] [--dtype fp32|bf16] [--text-len L] [--batch B] [--layers N]\n"
    "Writes DIR/model and DIR/embeds.safetensors (prompt_embeds, negative_prompt_embeds\n"
    "[B, L, text_dim]); `ditc compile DIR/model` takes every variant.\n"
    "--variant (default t2v):\n"
    "  t2v        Wan2.1 text-to-video: DIR/model is one transformer (config.json,\n"
    "             diffusion_pytorch_model.safetensors).\n"
    "  t2v-a14b   Wan2.2-T2V-A14B: DIR/model is a WanPipeline directory (model_index.json,\n"
    "             scheduler/, transformer/, transformer_2/): two experts (transformer_2 from\n"
    "             seed S+1), boundary_ratio 0.875, UniPC flow_shift 3.0, 16 latent channels.\n"
    "  ti2v       Wan2.2-TI2V-5B: WanPipeline with expand_timesteps (a timestep per token),\n"
    "             flow_shift 5.0, 48 latent channels, vae/config.json (AutoencoderKLWan, z_dim 48,\n"
    "             16x spatial, 4x temporal: height and width multiples of 32).\n"
    "  i2v-a14b   Wan2.2-I2V-A14B: WanImageToVideoPipeline, two experts, boundary_ratio 0.9,\n"
    "             flow_shift 3.0, in_channels 36 (latents + mask + image latents), out 16.\n"
    "  i2v-wan21  Wan2.1-I2V: WanImageToVideoPipeline, one transformer with the image embedder\n"
    "             (image_dim) and image K/V (added_kv_proj_dim), flow_shift 3.0, in 36, out 16;\n"
    "             text length 512 (diffusers reads the context before the last 512 tokens as the\n"
    "             image's).\n"
    "The pipeline directories name no text encoder, tokenizer or image encoder ([null, null]) and\n"
    "hold no VAE weights.\n"
    "--preset (default tiny): tiny, tiny-hd64, tiny-hd128 fit every variant (the pipeline variants\n"
    "set their latent channels); wan2.1-1.3b fits t2v; wan2.1-14b fits t2v and i2v-wan21 (image_dim\n"
    "1280); wan2.2-a14b (dim 5120, 40 heads, 40 layers, ffn 13824) fits t2v-a14b and i2v-a14b;\n"
    "wan2.2-ti2v-5b (dim 3072, 24 heads, 30 layers, ffn 14336) fits ti2v.\n"
    "--layers N keeps the preset's shapes with N transformer blocks (every kernel of the full model,\n"
    "a fraction of its weights).\n"
    "--text-len defaults to 16 (512 for i2v-wan21).\n";

typedef struct maker {
  dit_st_writer_t *w;
  dit_dtype_t dtype;
  uint64_t seed, stream; /* each tensor draws from its own range of the noise stream */
  float *buf;
  void *conv;
  size_t cap;
} maker_t;

static dit_status_t reserve(maker_t *m, size_t n) {
  if (n <= m->cap) return DIT_OK;
  free(m->buf);
  free(m->conv);
  m->buf = malloc(n * sizeof(float));
  m->conv = malloc(n * sizeof(float));
  m->cap = n;
  if (!m->buf || !m->conv) return DIT_ERR(RESOURCE_EXHAUSTED, "cannot allocate %zu floats", n);
  return DIT_OK;
}

/* One thread's share of a tensor: elements [lo, hi) drawn, scaled and converted. The noise
 * stream is indexed by element, so any split gives the bytes of one thread. */
typedef struct fill_job {
  const maker_t *m;
  size_t lo, hi;
  double mean, std;
  dit_dtype_t dt;
} fill_job_t;

static void *fill(void *p) {
  const fill_job_t *j = p;
  float *b = j->m->buf + j->lo;
  dit_rng_normal(j->m->seed, j->m->stream + j->lo, b, j->hi - j->lo);
  for (size_t i = 0; i < j->hi - j->lo; i++) b[i] = (float)(j->mean + j->std * b[i]);
  dit_convert((char *)j->m->conv + j->lo * dit_dtype_size(j->dt), j->dt, b, DIT_F32, j->hi - j->lo);
  return NULL;
}

/* value = mean + std * N(0, 1), drawn on every CPU for large tensors */
static dit_status_t add(maker_t *m, const char *name, int rank, const int64_t *dims, double mean, double std, int fp32) {
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
  DIT_RETURN_IF(reserve(m, n));
  const dit_dtype_t dt = fp32 ? DIT_F32 : m->dtype;
  enum { MAX_THREADS = 64 };
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int t = n < (1u << 20) || cpus < 2 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus;
  fill_job_t jobs[MAX_THREADS];
  pthread_t th[MAX_THREADS];
  int started = 0;
  for (int k = 0; k < t; k++) {
    jobs[k] = (fill_job_t){m, n * (size_t)k / (size_t)t, n * (size_t)(k + 1) / (size_t)t, mean, std, dt};
    if (k < t - 1 && pthread_create(&th[k], NULL, fill, &jobs[k]) == 0) {
      started++;
      continue;
    }
    jobs[k].hi = n; /* the last share, or all that is left if a thread could not start */
    fill(&jobs[k]);
    break;
  }
  for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
  m->stream += (n + 3) / 4 * 4 + 1024;
  return dit_st_writer_add(m->w, name, dt, rank, dims, m->conv);
}

static dit_status_t linear(maker_t *m, const char *prefix, int64_t out, int64_t in, int fp32) {
  char k[224]; /* callers' names fit 200 bytes: room for the suffix */
  int64_t wd[2] = {out, in}, bd[1] = {out};
  snprintf(k, sizeof k, "%s.weight", prefix);
  DIT_RETURN_IF(add(m, k, 2, wd, 0, 1 / sqrt((double)in), fp32));
  snprintf(k, sizeof k, "%s.bias", prefix);
  return add(m, k, 1, bd, 0, 0.1, fp32);
}

/* A text built by appends; a too small buffer is an error, never a truncated file. */
typedef struct text {
  char b[8192];
  size_t n;
  int overflow;
} text_t;

static void cat(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cat(text_t *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(t->b + t->n, sizeof t->b - t->n, fmt, ap);
  va_end(ap);
  if (k < 0 || (size_t)k >= sizeof t->b - t->n) t->overflow = 1;
  else t->n += (size_t)k;
}

static dit_status_t write_text(const char *dir, const char *name, const text_t *t) {
  char path[4200];
  if (t->overflow) return DIT_ERR(INTERNAL, "%s/%s: text longer than %zu bytes", dir, name, sizeof t->b);
  DIT_RETURN_IF(dit_mkdirs(dir, 0755));
  DIT_RETURN_IF(dit_path_join(path, sizeof path, dir, name));
  return dit_file_write_atomic(path, t->b, t->n);
}

/* The transformer's config.json: today's layout for the bare t2v directory; in a pipeline,
 * every field with sorted keys, as diffusers' save_pretrained writes it. */
static dit_status_t write_config(const cfg_t *c, const variant_t *v, int64_t in_ch, int64_t out_ch, const char *dir) {
  text_t t = {0};
  if (!v->pipeline) {
    cat(&t,
        "{\n  \"_class_name\": \"WanTransformer3DModel\",\n  \"patch_size\": [1, 2, 2],\n"
        "  \"num_attention_heads\": %" PRId64 ",\n  \"attention_head_dim\": %" PRId64 ",\n"
        "  \"in_channels\": %" PRId64 ",\n  \"out_channels\": %" PRId64 ",\n  \"text_dim\": %" PRId64 ",\n"
        "  \"freq_dim\": %" PRId64 ",\n  \"ffn_dim\": %" PRId64 ",\n  \"num_layers\": %" PRId64 ",\n"
        "  \"cross_attn_norm\": true,\n  \"qk_norm\": \"rms_norm_across_heads\",\n  \"eps\": 1e-06,\n"
        "  \"image_dim\": null,\n  \"added_kv_proj_dim\": null,\n  \"rope_max_seq_len\": 1024\n}\n",
        c->heads, c->head_dim, in_ch, out_ch, c->text_dim, c->freq_dim, c->ffn, c->layers);
    return write_text(dir, "config.json", &t);
  }
  char image[32] = "null", added[32] = "null";
  if (v->image) {
    snprintf(image, sizeof image, "%" PRId64, c->image_dim);
    snprintf(added, sizeof added, "%" PRId64, c->heads * c->head_dim); /* the image embedder's output */
  }
  cat(&t,
      "{\n  \"_class_name\": \"WanTransformer3DModel\",\n  \"_diffusers_version\": \"0.40.0.dev0\",\n"
      "  \"added_kv_proj_dim\": %s,\n  \"attention_head_dim\": %" PRId64 ",\n  \"cross_attn_norm\": true,\n"
      "  \"eps\": 1e-06,\n  \"ffn_dim\": %" PRId64 ",\n  \"freq_dim\": %" PRId64 ",\n  \"image_dim\": %s,\n"
      "  \"in_channels\": %" PRId64 ",\n  \"num_attention_heads\": %" PRId64 ",\n  \"num_layers\": %" PRId64 ",\n"
      "  \"out_channels\": %" PRId64 ",\n  \"patch_size\": [\n    1,\n    2,\n    2\n  ],\n"
      "  \"pos_embed_seq_len\": null,\n  \"qk_norm\": \"rms_norm_across_heads\",\n  \"rope_max_seq_len\": 1024,\n"
      "  \"text_dim\": %" PRId64 "\n}\n",
      added, c->head_dim, c->ffn, c->freq_dim, image, in_ch, c->heads, c->layers, out_ch, c->text_dim);
  return write_text(dir, "config.json", &t);
}

/* One transformer's weights in dir/diffusion_pytorch_model.safetensors, drawn from m's stream. */
static dit_status_t write_weights(maker_t *m, const cfg_t *c, const variant_t *v, int64_t in_ch, int64_t out_ch,
                                  const char *dir) {
  char path[4200];
  int64_t D = c->heads * c->head_dim;
  dit_status_t s = dit_st_writer_create(&m->w);
  int64_t pe[5] = {D, in_ch, 1, 2, 2}, d1[1] = {D}, sst6[3] = {1, 6, D}, sst2[3] = {1, 2, D};
  if (!s) s = add(m, "patch_embedding.weight", 5, pe, 0, 1 / sqrt((double)(in_ch * 4)), 0);
  if (!s) s = add(m, "patch_embedding.bias", 1, d1, 0, 0.1, 0);
  if (!s) s = linear(m, "condition_embedder.time_embedder.linear_1", D, c->freq_dim, 1);
  if (!s) s = linear(m, "condition_embedder.time_embedder.linear_2", D, D, 1);
  if (!s) s = linear(m, "condition_embedder.time_proj", 6 * D, D, 0);
  if (!s) s = linear(m, "condition_embedder.text_embedder.linear_1", D, c->text_dim, 0);
  if (!s) s = linear(m, "condition_embedder.text_embedder.linear_2", D, D, 0);
  if (!s && v->image) {
    /* CLIP's hidden states through LayerNorm, GELU MLP, LayerNorm; diffusers keeps the norms in fp32. */
    int64_t i1[1] = {c->image_dim};
    s = add(m, "condition_embedder.image_embedder.norm1.weight", 1, i1, 1, 0.2, 1);
    if (!s) s = add(m, "condition_embedder.image_embedder.norm1.bias", 1, i1, 0, 0.1, 1);
    if (!s) s = linear(m, "condition_embedder.image_embedder.ff.net.0.proj", c->image_dim, c->image_dim, 0);
    if (!s) s = linear(m, "condition_embedder.image_embedder.ff.net.2", D, c->image_dim, 0);
    if (!s) s = add(m, "condition_embedder.image_embedder.norm2.weight", 1, d1, 1, 0.2, 1);
    if (!s) s = add(m, "condition_embedder.image_embedder.norm2.bias", 1, d1, 0, 0.1, 1);
  }
  char k[200];
  for (int64_t i = 0; !s && i < c->layers; i++) {
    snprintf(k, sizeof k, "blocks.%" PRId64 ".scale_shift_table", i);
    s = add(m, k, 3, sst6, 0, 0.3, 1);
    for (int a = 1; !s && a <= 2; a++) {
      static const char *const proj[] = {"to_q", "to_k", "to_v", "to_out.0"};
      for (int p = 0; !s && p < 4; p++) {
        snprintf(k, sizeof k, "blocks.%" PRId64 ".attn%d.%s", i, a, proj[p]);
        s = linear(m, k, D, D, 0);
      }
      snprintf(k, sizeof k, "blocks.%" PRId64 ".attn%d.norm_q.weight", i, a);
      if (!s) s = add(m, k, 1, d1, 1, 0.2, 0);
      snprintf(k, sizeof k, "blocks.%" PRId64 ".attn%d.norm_k.weight", i, a);
      if (!s) s = add(m, k, 1, d1, 1, 0.2, 0);
    }
    if (!s && v->image) {
      snprintf(k, sizeof k, "blocks.%" PRId64 ".attn2.add_k_proj", i);
      s = linear(m, k, D, D, 0);
      snprintf(k, sizeof k, "blocks.%" PRId64 ".attn2.add_v_proj", i);
      if (!s) s = linear(m, k, D, D, 0);
      snprintf(k, sizeof k, "blocks.%" PRId64 ".attn2.norm_added_k.weight", i);
      if (!s) s = add(m, k, 1, d1, 1, 0.2, 0);
    }
    snprintf(k, sizeof k, "blocks.%" PRId64 ".norm2.weight", i);
    if (!s) s = add(m, k, 1, d1, 1, 0.2, 1);
    snprintf(k, sizeof k, "blocks.%" PRId64 ".norm2.bias", i);
    if (!s) s = add(m, k, 1, d1, 0, 0.1, 1);
    snprintf(k, sizeof k, "blocks.%" PRId64 ".ffn.net.0.proj", i);
    if (!s) s = linear(m, k, c->ffn, D, 0);
    snprintf(k, sizeof k, "blocks.%" PRId64 ".ffn.net.2", i);
    if (!s) s = linear(m, k, D, c->ffn, 0);
    if (!s && c->layers > 4) fprintf(stderr, "make_tiny_wan: block %" PRId64 "/%" PRId64 "\n", i + 1, c->layers);
  }
  if (!s) s = linear(m, "proj_out", out_ch * 4, D, 0);
  if (!s) s = add(m, "scale_shift_table", 3, sst2, 0, 0.3, 1);
  if (!s) s = dit_path_join(path, sizeof path, dir, "diffusion_pytorch_model.safetensors");
  if (!s) s = dit_st_writer_write(m->w, path);
  dit_st_writer_destroy(m->w);
  m->w = NULL;
  return s;
}

static void component(text_t *t, const char *key, const char *lib, const char *cls) {
  if (lib) cat(t, "  \"%s\": [\n    \"%s\",\n    \"%s\"\n  ]", key, lib, cls);
  else cat(t, "  \"%s\": [\n    null,\n    null\n  ]", key);
}

/* model_index.json with sorted keys, as save_pretrained writes it: the slots this directory
 * does not fill (text encoder, tokenizer, image encoder, VAE weights) are [null, null]. */
static dit_status_t write_index(const variant_t *v, const char *dir) {
  text_t t = {0};
  const int i2v = !strcmp(v->pipeline, "WanImageToVideoPipeline");
  cat(&t, "{\n  \"_class_name\": \"%s\",\n  \"_diffusers_version\": \"0.40.0.dev0\",\n", v->pipeline);
  cat(&t, "  \"boundary_ratio\": %s,\n  \"expand_timesteps\": %s,\n", v->boundary ? v->boundary : "null",
      v->expand_timesteps ? "true" : "false");
  if (i2v) {
    component(&t, "image_encoder", NULL, NULL);
    cat(&t, ",\n");
    component(&t, "image_processor", NULL, NULL);
    cat(&t, ",\n");
  }
  component(&t, "scheduler", "diffusers", "UniPCMultistepScheduler");
  cat(&t, ",\n");
  component(&t, "text_encoder", NULL, NULL);
  cat(&t, ",\n");
  component(&t, "tokenizer", NULL, NULL);
  cat(&t, ",\n");
  component(&t, "transformer", "diffusers", "WanTransformer3DModel");
  cat(&t, ",\n");
  if (v->boundary) component(&t, "transformer_2", "diffusers", "WanTransformer3DModel");
  else component(&t, "transformer_2", NULL, NULL);
  cat(&t, ",\n");
  if (v->vae_config) component(&t, "vae", "diffusers", "AutoencoderKLWan");
  else component(&t, "vae", NULL, NULL);
  cat(&t, "\n}\n");
  return write_text(dir, "model_index.json", &t);
}

/* UniPCMultistepScheduler as the Wan conversion configures it (flow sigmas, flow prediction,
 * the variant's flow_shift), every field as save_pretrained writes it. */
static dit_status_t write_scheduler(const variant_t *v, const char *dir) {
  text_t t = {0};
  cat(&t,
      "{\n  \"_class_name\": \"UniPCMultistepScheduler\",\n  \"_diffusers_version\": \"0.40.0.dev0\",\n"
      "  \"beta_end\": 0.02,\n  \"beta_schedule\": \"linear\",\n  \"beta_start\": 0.0001,\n"
      "  \"disable_corrector\": [],\n  \"dynamic_thresholding_ratio\": 0.995,\n  \"final_sigmas_type\": \"zero\",\n"
      "  \"flow_shift\": %s,\n  \"lower_order_final\": true,\n  \"num_train_timesteps\": 1000,\n"
      "  \"predict_x0\": true,\n  \"prediction_type\": \"flow_prediction\",\n  \"rescale_betas_zero_snr\": false,\n"
      "  \"sample_max_value\": 1.0,\n  \"shift_terminal\": null,\n  \"sigma_max\": null,\n  \"sigma_min\": null,\n"
      "  \"solver_order\": 2,\n  \"solver_p\": null,\n  \"solver_type\": \"bh2\",\n  \"steps_offset\": 0,\n"
      "  \"thresholding\": false,\n  \"time_shift_type\": \"exponential\",\n  \"timestep_spacing\": \"linspace\",\n"
      "  \"trained_betas\": null,\n  \"use_beta_sigmas\": false,\n  \"use_dynamic_shifting\": false,\n"
      "  \"use_exponential_sigmas\": false,\n  \"use_flow_sigmas\": true,\n  \"use_karras_sigmas\": false\n}\n",
      v->flow_shift);
  return write_text(dir, "scheduler_config.json", &t);
}

/* Wan2.2's VAE: what the frontend reads of it (the class, its compression and latent channels);
 * the encoder and decoder are not part of these folders. */
static dit_status_t write_vae(int64_t z_dim, const char *dir) {
  text_t t = {0};
  cat(&t,
      "{\n  \"_class_name\": \"AutoencoderKLWan\",\n  \"_diffusers_version\": \"0.40.0.dev0\",\n"
      "  \"scale_factor_spatial\": 16,\n  \"scale_factor_temporal\": 4,\n  \"z_dim\": %" PRId64 "\n}\n",
      z_dim);
  return write_text(dir, "config.json", &t);
}

static dit_status_t make(const cfg_t *c, const variant_t *v, const char *out, uint64_t seed, dit_dtype_t dtype,
                         int64_t text_len, int64_t batch) {
  char dir[4096], tdir[4200], path[4200];
  DIT_RETURN_IF(dit_path_join(dir, sizeof dir, out, "model"));
  DIT_RETURN_IF(dit_mkdirs(dir, 0755));
  const int64_t in_ch = v->in_channels ? v->in_channels : c->channels;
  const int64_t out_ch = v->out_channels ? v->out_channels : c->channels;
  if (v->pipeline) {
    DIT_RETURN_IF(write_index(v, dir));
    DIT_RETURN_IF(dit_path_join(tdir, sizeof tdir, dir, "scheduler"));
    DIT_RETURN_IF(write_scheduler(v, tdir));
    if (v->vae_config) {
      DIT_RETURN_IF(dit_path_join(tdir, sizeof tdir, dir, "vae"));
      DIT_RETURN_IF(write_vae(out_ch, tdir));
    }
    DIT_RETURN_IF(dit_path_join(tdir, sizeof tdir, dir, "transformer"));
  } else {
    snprintf(tdir, sizeof tdir, "%s", dir);
  }
  DIT_RETURN_IF(write_config(c, v, in_ch, out_ch, tdir));

  maker_t m = {0};
  m.dtype = dtype;
  m.seed = seed;
  dit_status_t s = write_weights(&m, c, v, in_ch, out_ch, tdir);

  /* Stand-in text embeddings: what a text encoder would hand the transformer. */
  int64_t ed[3] = {batch, text_len, c->text_dim};
  if (!s) s = dit_st_writer_create(&m.w);
  if (!s) s = add(&m, "prompt_embeds", 3, ed, 0, 1, 1);
  if (!s) s = add(&m, "negative_prompt_embeds", 3, ed, 0, 1, 1);
  if (!s) s = dit_path_join(path, sizeof path, out, "embeds.safetensors");
  if (!s) s = dit_st_writer_write(m.w, path);
  dit_st_writer_destroy(m.w);
  m.w = NULL;

  /* The second expert: the same architecture, its own weights (the next seed). */
  if (!s && v->boundary) {
    m.seed = seed + 1;
    m.stream = 0;
    s = dit_path_join(tdir, sizeof tdir, dir, "transformer_2");
    if (!s) s = write_config(c, v, in_ch, out_ch, tdir);
    if (!s) s = write_weights(&m, c, v, in_ch, out_ch, tdir);
  }
  free(m.buf);
  free(m.conv);
  return s;
}

int main(int argc, char **argv) {
  const char *out = NULL, *preset = "tiny", *variant = "t2v";
  uint64_t seed = 0;
  int64_t text_len = 0, batch = 1, layers = 0;
  dit_dtype_t dtype = DIT_F32;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(kUsage, stdout);
      return 0;
    }
    if (!v) {
      fprintf(stderr, "make_tiny_wan: error: %s needs a value\n%s", a, kUsage);
      return 2;
    }
    i++;
    char *end = NULL;
    errno = 0;
    if (!strcmp(a, "--out")) out = v;
    else if (!strcmp(a, "--preset")) preset = v;
    else if (!strcmp(a, "--variant")) variant = v;
    else if (!strcmp(a, "--seed")) seed = strtoull(v, &end, 10);
    else if (!strcmp(a, "--text-len")) text_len = strtoll(v, &end, 10);
    else if (!strcmp(a, "--batch")) batch = strtoll(v, &end, 10);
    else if (!strcmp(a, "--layers")) layers = strtoll(v, &end, 10);
    else if (!strcmp(a, "--dtype")) {
      if (!strcmp(v, "bf16")) dtype = DIT_BF16;
      else if (strcmp(v, "fp32")) {
        fprintf(stderr, "make_tiny_wan: error: --dtype %s: expected fp32 or bf16\n", v);
        return 2;
      }
    } else {
      fprintf(stderr, "make_tiny_wan: error: unknown option %s\n%s", a, kUsage);
      return 2;
    }
    if (end && (*end || errno || end == v)) {
      fprintf(stderr, "make_tiny_wan: error: %s %s: expected an integer\n", a, v);
      return 2;
    }
  }
  if (!out) {
    fprintf(stderr, "make_tiny_wan: error: --out is required\n%s", kUsage);
    return 2;
  }
  const variant_t *vr = NULL;
  for (int i = 0; i < N_VARIANTS; i++)
    if (!strcmp(kVariants[i].name, variant)) vr = &kVariants[i];
  if (!vr) {
    fprintf(stderr, "make_tiny_wan: error: --variant %s: expected t2v, t2v-a14b, ti2v, i2v-a14b or i2v-wan21\n", variant);
    return 2;
  }
  const int vi = (int)(vr - kVariants);
  if (!text_len) text_len = vi == V_I2V_WAN21 ? 512 : 16;
  if (text_len < 1 || batch < 1 || layers < 0) {
    fprintf(stderr, "make_tiny_wan: error: --text-len and --batch must be >= 1, --layers >= 0 (0: the preset's)\n");
    return 2;
  }
  if (vi == V_I2V_WAN21 && text_len != 512) {
    fprintf(stderr,
            "make_tiny_wan: error: --text-len %" PRId64 ": --variant i2v-wan21 takes exactly 512 text tokens (diffusers' "
            "attention reads every context token before the last 512 as an image token)\n",
            text_len);
    return 2;
  }
  const cfg_t *c = NULL;
  for (size_t i = 0; i < N_PRESETS; i++)
    if (!strcmp(kPresets[i].name, preset)) c = &kPresets[i];
  if (!c) {
    fprintf(stderr,
            "make_tiny_wan: error: --preset %s: expected tiny, tiny-hd64, tiny-hd128, wan2.1-1.3b, wan2.1-14b, "
            "wan2.2-a14b or wan2.2-ti2v-5b\n",
            preset);
    return 2;
  }
  if (!(c->variants & FITS(vi))) {
    char fit[256] = "", vs[128] = "";
    for (size_t i = 0; i < N_PRESETS; i++)
      if (kPresets[i].variants & FITS(vi)) snprintf(fit + strlen(fit), sizeof fit - strlen(fit), "%s%s", fit[0] ? ", " : "", kPresets[i].name);
    for (int i = 0; i < N_VARIANTS; i++)
      if (c->variants & FITS(i)) snprintf(vs + strlen(vs), sizeof vs - strlen(vs), "%s%s", vs[0] ? ", " : "", kVariants[i].name);
    fprintf(stderr, "make_tiny_wan: error: --preset %s is a model of --variant %s, not %s; presets of %s: %s\n", preset, vs,
            variant, variant, fit);
    return 2;
  }
  cfg_t cfg = *c;
  if (layers) cfg.layers = layers;
  dit_status_t s = make(&cfg, vr, out, seed, dtype, text_len, batch);
  if (s) return dit_status_report(s, "make_tiny_wan");
  if (vr->pipeline)
    printf("wrote %s/model (%s: %s, %s%s%s) and %s/embeds.safetensors (%s)\n", out, vr->name, vr->pipeline,
           vr->boundary ? "transformer, transformer_2" : "transformer", ", scheduler", vr->vae_config ? ", vae config" : "",
           out, c->name);
  else
    printf("wrote %s/model and %s/embeds.safetensors (%s)\n", out, out, c->name);
  return 0;
}
