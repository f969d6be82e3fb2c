/* make_tiny_wan: writes a diffusers-format WanTransformer3DModel directory (config.json +
 * diffusion_pytorch_model.safetensors) with random weights drawn so every block changes the
 * residual stream, plus stand-in text embeddings (embeds.safetensors) for `ditrun generate`.
 * Presets cover the tiny default and the real Wan2.1 sizes (for timing on GPUs). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifacts/safetensors.h"
#include "base/fileio.h"
#include "runtime/rng.h"

typedef struct cfg {
  const char *name;
  int64_t heads, head_dim, layers, ffn, channels, text_dim, freq_dim;
} cfg_t;

static const cfg_t kPresets[] = {
    {"tiny", 2, 24, 2, 96, 4, 32, 32},
    /* Tiny models at the head dims of the Hopper attention kernel (64, 128). */
    {"tiny-hd64", 2, 64, 1, 256, 4, 32, 32},
    {"tiny-hd128", 2, 128, 1, 256, 4, 32, 32},
    {"wan2.1-1.3b", 12, 128, 30, 8960, 16, 4096, 256},
    {"wan2.1-14b", 40, 128, 40, 13824, 16, 4096, 256},
};

static const char kUsage[] =
    "usage: make_tiny_wan --out DIR [--preset tiny|tiny-hd64|tiny-hd128|wan2.1-1.3b|wan2.1-14b] [--seed S]\n"
    "                     [--dtype fp32|bf16] [--text-len L] [--batch B] [--layers N]\n"
    "Writes DIR/model (config.json, diffusion_pytorch_model.safetensors) and\n"
    "DIR/embeds.safetensors (prompt_embeds, negative_prompt_embeds [B, L, text_dim]).\n"
    "--layers N keeps the preset's shapes with N transformer blocks (every kernel of the full model,\n"
    "a fraction of its weights).\n";

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
  char k[200];
  int64_t wd[2] = {out, in}, bd[1] = {out};
  snprintf(k, sizeof k, "%s.weight", prefix);
  DIT_RETURN_IF(add(m, k, 2, wd, 0, 1 / sqrt((double)in), fp32));
  snprintf(k, sizeof k, "%s.bias", prefix);
  return add(m, k, 1, bd, 0, 0.1, fp32);
}

static dit_status_t make(const cfg_t *c, const char *out, uint64_t seed, dit_dtype_t dtype, int64_t text_len,
                         int64_t batch) {
  char dir[4096], path[4200];
  DIT_RETURN_IF(dit_path_join(dir, sizeof dir, out, "model"));
  DIT_RETURN_IF(dit_mkdirs(dir, 0755));
  int64_t D = c->heads * c->head_dim;
  char config[1024];
  snprintf(config, sizeof config,
           "{\n  \"_class_name\": \"WanTransformer3DModel\",\n  \"patch_size\": [1, 2, 2],\n"
           "  \"num_attention_heads\": %" PRId64 ",\n  \"attention_head_dim\": %" PRId64 ",\n"
           "  \"in_channels\": %" PRId64 ",\n  \"out_channels\": %" PRId64 ",\n  \"text_dim\": %" PRId64 ",\n"
           "  \"freq_dim\": %" PRId64 ",\n  \"ffn_dim\": %" PRId64 ",\n  \"num_layers\": %" PRId64 ",\n"
           "  \"cross_attn_norm\": true,\n  \"qk_norm\": \"rms_norm_across_heads\",\n  \"eps\": 1e-06,\n"
           "  \"image_dim\": null,\n  \"added_kv_proj_dim\": null,\n  \"rope_max_seq_len\": 1024\n}\n",
           c->heads, c->head_dim, c->channels, c->channels, c->text_dim, c->freq_dim, c->ffn, c->layers);
  DIT_RETURN_IF(dit_path_join(path, sizeof path, dir, "config.json"));
  DIT_RETURN_IF(dit_file_write_atomic(path, config, strlen(config)));

  maker_t m = {0};
  m.dtype = dtype;
  m.seed = seed;
  dit_status_t s = dit_st_writer_create(&m.w);
  int64_t pe[5] = {D, c->channels, 1, 2, 2}, d1[1] = {D}, sst6[3] = {1, 6, D}, sst2[3] = {1, 2, D};
  if (!s) s = add(&m, "patch_embedding.weight", 5, pe, 0, 1 / sqrt((double)(c->channels * 4)), 0);
  if (!s) s = add(&m, "patch_embedding.bias", 1, d1, 0, 0.1, 0);
  if (!s) s = linear(&m, "condition_embedder.time_embedder.linear_1", D, c->freq_dim, 1);
  if (!s) s = linear(&m, "condition_embedder.time_embedder.linear_2", D, D, 1);
  if (!s) s = linear(&m, "condition_embedder.time_proj", 6 * D, D, 0);
  if (!s) s = linear(&m, "condition_embedder.text_embedder.linear_1", D, c->text_dim, 0);
  if (!s) s = linear(&m, "condition_embedder.text_embedder.linear_2", D, D, 0);
  char k[200];
  for (int64_t i = 0; !s && i < c->layers; i++) {
    snprintf(k, sizeof k, "blocks.%" PRId64 ".scale_shift_table", i);
    s = add(&m, k, 3, sst6, 0, 0.3, 1);
    for (int a = 1; !s && a <= 2; a++) {
      static const char *const proj[] = {"to_q", "to_k", "to_v", "to_out.0"};
      for (int p = 0; !s && p < 4; p++) {
        snprintf(k, sizeof k, "blocks.%" PRId64 ".attn%d.%s", i, a, proj[p]);
        s = linear(&m, k, D, D, 0);
      }
      snprintf(k, sizeof k, "blocks.%" PRId64 ".attn%d.norm_q.weight", i, a);
      if (!s) s = add(&m, k, 1, d1, 1, 0.2, 0);
      snprintf(k, sizeof k, "blocks.%" PRId64 ".attn%d.norm_k.weight", i, a);
      if (!s) s = add(&m, k, 1, d1, 1, 0.2, 0);
    }
    snprintf(k, sizeof k, "blocks.%" PRId64 ".norm2.weight", i);
    if (!s) s = add(&m, k, 1, d1, 1, 0.2, 1);
    snprintf(k, sizeof k, "blocks.%" PRId64 ".norm2.bias", i);
    if (!s) s = add(&m, k, 1, d1, 0, 0.1, 1);
    snprintf(k, sizeof k, "blocks.%" PRId64 ".ffn.net.0.proj", i);
    if (!s) s = linear(&m, k, c->ffn, D, 0);
    snprintf(k, sizeof k, "blocks.%" PRId64 ".ffn.net.2", i);
    if (!s) s = linear(&m, k, D, c->ffn, 0);
    if (!s && c->layers > 4) fprintf(stderr, "make_tiny_wan: block %" PRId64 "/%" PRId64 "\n", i + 1, c->layers);
  }
  if (!s) s = linear(&m, "proj_out", c->channels * 4, D, 0);
  if (!s) s = add(&m, "scale_shift_table", 3, sst2, 0, 0.3, 1);
  if (!s) s = dit_path_join(path, sizeof path, dir, "diffusion_pytorch_model.safetensors");
  if (!s) s = dit_st_writer_write(m.w, path);
  dit_st_writer_destroy(m.w);
  m.w = NULL;

  /* Stand-in text embeddings: what a text encoder would hand the transformer. */
  int64_t ed[3] = {batch, text_len, c->text_dim};
  if (!s) s = dit_st_writer_create(&m.w);
  if (!s) s = add(&m, "prompt_embeds", 3, ed, 0, 1, 1);
  if (!s) s = add(&m, "negative_prompt_embeds", 3, ed, 0, 1, 1);
  if (!s) s = dit_path_join(path, sizeof path, out, "embeds.safetensors");
  if (!s) s = dit_st_writer_write(m.w, path);
  dit_st_writer_destroy(m.w);
  free(m.buf);
  free(m.conv);
  return s;
}

int main(int argc, char **argv) {
  const char *out = NULL, *preset = "tiny";
  uint64_t seed = 0;
  int64_t text_len = 16, batch = 1, layers = 0;
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
    if (end && (*end || errno)) {
      fprintf(stderr, "make_tiny_wan: error: %s %s: expected an integer\n", a, v);
      return 2;
    }
  }
  if (!out) {
    fprintf(stderr, "make_tiny_wan: error: --out is required\n%s", kUsage);
    return 2;
  }
  if (text_len < 1 || batch < 1 || layers < 0) {
    fprintf(stderr, "make_tiny_wan: error: --text-len and --batch must be >= 1, --layers >= 0 (0: the preset's)\n");
    return 2;
  }
  const cfg_t *c = NULL;
  for (size_t i = 0; i < sizeof kPresets / sizeof kPresets[0]; i++)
    if (!strcmp(kPresets[i].name, preset)) c = &kPresets[i];
  if (!c) {
    fprintf(stderr, "make_tiny_wan: error: --preset %s: expected tiny, tiny-hd64, tiny-hd128, wan2.1-1.3b or wan2.1-14b\n", preset);
    return 2;
  }
  cfg_t cfg = *c;
  if (layers) cfg.layers = layers;
  dit_status_t s = make(&cfg, out, seed, dtype, text_len, batch);
  if (s) return dit_status_report(s, "make_tiny_wan");
  printf("wrote %s/model and %s/embeds.safetensors (%s)\n", out, out, c->name);
  return 0;
}
