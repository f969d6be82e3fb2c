/* The Wan frontend: WanTransformer3DModel as diffusers defines it, read from config.json and
 * safetensors (or a Wan pipeline directory: model_index.json, transformer/, transformer_2/,
 * scheduler/, vae/), validated, and built into a graph for one shape. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/identity.h"
#include "base/fileio.h"
#include "base/json.h"
#include "compiler/frontend.h"

/* ---- config ---- */

typedef enum { F_INT, F_BOOL, F_FLOAT, F_STR, F_INT3 } field_kind_t;

/* Every __init__ argument of WanTransformer3DModel, with the range this build accepts (far
 * beyond the released models, tight enough that products of them stay exact). Fields whose
 * non-default values this build cannot compile are checked after parsing. */
static const struct {
  const char *key;
  field_kind_t kind;
  int nullable;
  int64_t lo, hi;
} kWanFields[] = {
    {"patch_size", F_INT3, 0, 1, 64},           {"num_attention_heads", F_INT, 0, 1, 1024},
    {"attention_head_dim", F_INT, 0, 1, 1024},  {"in_channels", F_INT, 0, 1, 4096},
    {"out_channels", F_INT, 1, 0, 4096},        {"text_dim", F_INT, 0, 1, 65536},
    {"freq_dim", F_INT, 0, 1, 65536},           {"ffn_dim", F_INT, 0, 1, 1 << 20},
    {"num_layers", F_INT, 0, 1, 1024},          {"cross_attn_norm", F_BOOL, 0, 0, 0},
    {"qk_norm", F_STR, 1, 0, 64},               {"eps", F_FLOAT, 0, 0, 1},
    {"image_dim", F_INT, 1, 1, 1 << 20},        {"added_kv_proj_dim", F_INT, 1, 1, 1 << 20},
    {"rope_max_seq_len", F_INT, 0, 1, 1 << 20}, {"pos_embed_seq_len", F_INT, 1, 1, 1 << 20},
};
#define N_WAN_FIELDS (sizeof kWanFields / sizeof kWanFields[0])

static const char kWanDefaults[] =
    "{\"patch_size\":[1,2,2],\"num_attention_heads\":40,\"attention_head_dim\":128,"
    "\"in_channels\":16,\"out_channels\":16,\"text_dim\":4096,\"freq_dim\":256,"
    "\"ffn_dim\":13824,\"num_layers\":40,\"cross_attn_norm\":true,"
    "\"qk_norm\":\"rms_norm_across_heads\",\"eps\":1e-6,\"image_dim\":null,"
    "\"added_kv_proj_dim\":null,\"rope_max_seq_len\":1024,\"pos_embed_seq_len\":null}";

static dit_status_t field_check(size_t f, const dit_json_t *v) {
  if (cJSON_IsNull(v->v)) {
    if (kWanFields[f].nullable) return DIT_OK;
    return dit_json_error(v, DIT_CODE_INVALID_ARGUMENT, "expected a value, found null");
  }
  int64_t i;
  double d;
  bool b;
  const char *s;
  switch (kWanFields[f].kind) {
    case F_INT: return dit_json_as_int(v, kWanFields[f].lo, kWanFields[f].hi, &i);
    case F_BOOL: return dit_json_as_bool(v, &b);
    case F_FLOAT: return dit_json_as_num(v, (double)kWanFields[f].lo, (double)kWanFields[f].hi, &d);
    case F_STR: return dit_json_as_str(v, (size_t)kWanFields[f].hi, true, &s);
    case F_INT3: {
      int64_t p[3];
      size_t n = 0;
      DIT_RETURN_IF(dit_json_as_int_array(v, 3, kWanFields[f].lo, kWanFields[f].hi, p, &n));
      if (n != 3) return dit_json_error(v, DIT_CODE_INVALID_ARGUMENT, "expected 3 integers [t, h, w], found %zu", n);
      return DIT_OK;
    }
  }
  return DIT_OK;
}

/* Reads a field of the normalized config, which holds only values field_check accepted. */
static int64_t geti(const cJSON *cfg, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
}

/* The typed view of a normalized config (null optional fields read as 0). */
static void wan_typed(const cJSON *cfg, dit_wan_config_t *w) {
  const cJSON *ps = cJSON_GetObjectItemCaseSensitive(cfg, "patch_size");
  for (int i = 0; i < 3; i++) w->patch[i] = (int64_t)cJSON_GetArrayItem(ps, i)->valuedouble;
  w->heads = geti(cfg, "num_attention_heads");
  w->head_dim = geti(cfg, "attention_head_dim");
  w->in_channels = geti(cfg, "in_channels");
  w->out_channels = geti(cfg, "out_channels");
  w->text_dim = geti(cfg, "text_dim");
  w->freq_dim = geti(cfg, "freq_dim");
  w->ffn_dim = geti(cfg, "ffn_dim");
  w->layers = geti(cfg, "num_layers");
  w->rope_max_seq_len = geti(cfg, "rope_max_seq_len");
  w->image_dim = geti(cfg, "image_dim");
  w->added_kv_proj_dim = geti(cfg, "added_kv_proj_dim");
  w->pos_embed_seq_len = geti(cfg, "pos_embed_seq_len");
  w->cross_attn_norm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "cross_attn_norm"));
  w->eps = cJSON_GetObjectItemCaseSensitive(cfg, "eps")->valuedouble;
}

static dit_status_t wan_parse_config(dit_model_t *m, const dit_json_t *raw) {
  /* The defaults go through the same reader as any text: no second parser for one constant. */
  dit_json_doc_t *defaults = NULL;
  DIT_RETURN_IF_ERROR(dit_json_parse(kWanDefaults, strlen(kWanDefaults), "built-in Wan defaults", &defaults),
                      "internal");
  cJSON *cfg = dit_json_doc_release(defaults);
  dit_json_doc_free(defaults);
  m->config = cfg;
  dit_json_iter_t it;
  dit_json_t v;
  dit_json_iter_init(raw, &it);
  while (dit_json_iter_next(&it, &v)) {
    const char *key = v.v->string;
    if (key[0] == '_') continue; /* diffusers' bookkeeping: class name, version, source path */
    size_t f = 0;
    while (f < N_WAN_FIELDS && strcmp(kWanFields[f].key, key)) f++;
    if (f == N_WAN_FIELDS)
      return dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "not a WanTransformer3DModel option this build knows");
    DIT_RETURN_IF(field_check(f, &v));
    cJSON *copy = cJSON_Duplicate(v.v, 1);
    if (!copy || !cJSON_ReplaceItemInObjectCaseSensitive(cfg, key, copy)) {
      cJSON_Delete(copy);
      return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  /* out_channels = out_channels or in_channels, as diffusers resolves it. */
  const cJSON *oc = cJSON_GetObjectItemCaseSensitive(cfg, "out_channels");
  if (cJSON_IsNull(oc) || oc->valuedouble == 0) {
    cJSON *n = cJSON_CreateNumber((double)geti(cfg, "in_channels"));
    if (!n || !cJSON_ReplaceItemInObjectCaseSensitive(cfg, "out_channels", n)) {
      cJSON_Delete(n);
      return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  const cJSON *qk = cJSON_GetObjectItemCaseSensitive(cfg, "qk_norm");
  if (!cJSON_IsString(qk) || strcmp(qk->valuestring, "rms_norm_across_heads")) {
    char q[96] = "null";
    if (cJSON_IsString(qk)) dit_json_quote(qk->valuestring, q);
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'qk_norm' = %s: only \"rms_norm_across_heads\" is supported", raw->what, q);
  }
  wan_typed(cfg, &m->wan);
  if (m->wan.freq_dim % 2)
    return DIT_ERR(UNIMPLEMENTED, "%s: field 'freq_dim' = %" PRId64 ": odd sinusoidal widths are not supported", raw->what,
                   m->wan.freq_dim);
  int64_t hd = m->wan.head_dim, hw = 2 * (hd / 6), td = hd - 2 * hw;
  if (td % 2)
    return DIT_ERR(INVALID_ARGUMENT, "%s: field 'attention_head_dim' = %" PRId64 ": its rotary split t/h/w = %" PRId64 "/%" PRId64 "/%" PRId64 " has an odd part",
                   raw->what, hd, td, hw, hw);
  return DIT_OK;
}

/* The family of a config.json and its parse. */
dit_status_t dit_model_config_parse(const char *text, size_t len, const char *what, dit_model_t *m) {
  dit_json_doc_t *doc = NULL;
  dit_json_t root, cls;
  const char *name = NULL;
  dit_status_t s = dit_json_parse(text, len, what, &doc);
  if (!s) s = dit_json_root(doc, &root);
  if (!s && !dit_json_has(&root, "_class_name")) {
    cls = root;
    dit_json_path_key(cls.path, root.path, "_class_name");
    s = dit_json_error(&cls, DIT_CODE_NOT_FOUND, "missing: cannot tell the model family");
  }
  if (!s) s = dit_json_get(&root, "_class_name", &cls);
  if (!s) s = dit_json_as_str(&cls, sizeof m->model_class - 1, false, &name);
  if (!s) {
    snprintf(m->model_class, sizeof m->model_class, "%s", name);
    if (!strcmp(name, "WanTransformer3DModel")) {
      snprintf(m->family, sizeof m->family, "wan");
      s = wan_parse_config(m, &root);
    } else {
      char q[96];
      dit_json_quote(name, q);
      s = dit_json_error(&cls, DIT_CODE_UNIMPLEMENTED, "found %s; supported families: WanTransformer3DModel", q);
    }
  }
  dit_json_doc_free(doc);
  return s;
}

/* ---- pipelines and schedulers ---- */

/* A view of member `key` of o (NULL when absent), to label a message about it. */
static dit_json_t at_member(const dit_json_t *o, const char *key) {
  dit_json_t r = *o;
  r.v = cJSON_IsObject(o->v) ? cJSON_GetObjectItemCaseSensitive(o->v, key) : NULL;
  dit_json_path_key(r.path, o->path, key);
  return r;
}

/* A model_index.json component entry: [library, class], or [null, null] for a slot the
 * pipeline leaves empty (*out_present = 0). */
static dit_status_t component(const dit_json_t *root, const char *key, char lib[32], char cls[64], int *out_present) {
  dit_json_t a, e[2];
  size_t n = 0;
  *out_present = 0;
  lib[0] = cls[0] = 0;
  if (!dit_json_has(root, key)) return DIT_OK;
  DIT_RETURN_IF(dit_json_array(root, key, 2, &a, &n));
  dit_json_iter_t it;
  dit_json_iter_init(&a, &it);
  for (size_t i = 0; i < n; i++) dit_json_iter_next(&it, &e[i]);
  if (n == 2 && cJSON_IsNull(e[0].v) && cJSON_IsNull(e[1].v)) return DIT_OK;
  if (n != 2) return dit_json_error(&a, DIT_CODE_INVALID_ARGUMENT, "expected a [library, class] pair of strings, found %zu entries", n);
  const char *l = NULL, *c = NULL;
  DIT_RETURN_IF(dit_json_as_str(&e[0], 31, false, &l));
  DIT_RETURN_IF(dit_json_as_str(&e[1], 63, false, &c));
  snprintf(lib, 32, "%s", l);
  snprintf(cls, 64, "%s", c);
  *out_present = 1;
  return DIT_OK;
}

/* An optional member: absent and null both leave the default. */
static bool has_value(const dit_json_t *o, const char *key) {
  dit_json_t v = at_member(o, key);
  return v.v && !cJSON_IsNull(v.v);
}

/* A [library, class] entry naming a diffusers transformer; *present 0 for [null, null]. */
static dit_status_t transformer_entry(const dit_json_t *root, const char *key, char cls[64], int *present) {
  char lib[32];
  DIT_RETURN_IF(component(root, key, lib, cls, present));
  if (*present && strcmp(lib, "diffusers")) {
    char q[96];
    dit_json_quote(lib, q);
    dit_json_t v = at_member(root, key);
    return dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "library %s: expected \"diffusers\"", q);
  }
  return DIT_OK;
}

static dit_status_t pipeline_index_read(const dit_json_t *root, dit_pipeline_index_t *out) {
  static const char *const pipelines[] = {"WanPipeline", "WanImageToVideoPipeline", NULL};
  dit_json_t v;
  char lib[32];
  int present = 0, which = 0;
  DIT_RETURN_IF(dit_json_str_copy(root, "_class_name", out->class_name, sizeof out->class_name, false));
  dit_status_t s = dit_json_enum(root, "_class_name", pipelines, &which);
  if (s && dit_status_code(s) == DIT_CODE_INVALID_ARGUMENT) {
    /* A well-formed name of a pipeline this build does not read (video-to-video, VACE, ...). */
    dit_status_free(s);
    char q[96];
    dit_json_quote(out->class_name, q);
    v = at_member(root, "_class_name");
    return dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "found %s; supported pipelines: WanPipeline, WanImageToVideoPipeline", q);
  }
  DIT_RETURN_IF(s);
  DIT_RETURN_IF(transformer_entry(root, "transformer", out->transformer_class, &present));
  if (!present) {
    v = at_member(root, "transformer");
    return dit_json_error(&v, DIT_CODE_NOT_FOUND, "missing: the pipeline names no transformer");
  }
  /* Wan2.2's A14B pipelines pair two experts switched at boundary_ratio; TI2V and Wan2.1
   * leave the second slot [null, null] and the ratio null. */
  int two = 0;
  DIT_RETURN_IF(transformer_entry(root, "transformer_2", out->transformer_2_class, &two));
  if (has_value(root, "boundary_ratio")) {
    v = at_member(root, "boundary_ratio");
    double r = 0;
    DIT_RETURN_IF(dit_json_as_num(&v, -1e300, 1e300, &r));
    char f[40];
    dit_json_fmt_num(r, f);
    if (!(r > 0 && r <= 1)) return dit_json_error(&v, DIT_CODE_OUT_OF_RANGE, "expected a number in (0, 1], found %s", f);
    if (!two)
      return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT,
                            "found %s, but the pipeline has no transformer_2 to switch to; expected null", f);
    out->has_boundary_ratio = 1;
    out->boundary_ratio = r;
  } else if (two) {
    v = at_member(root, "boundary_ratio");
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT,
                          "missing: a pipeline with transformer_2 (%s) needs the ratio at which it takes over",
                          out->transformer_2_class);
  }
  if (has_value(root, "expand_timesteps")) {
    bool b = false;
    DIT_RETURN_IF(dit_json_bool(root, "expand_timesteps", &b));
    out->expand_timesteps = b;
  }
  return component(root, "scheduler", lib, out->scheduler_class, &present);
}

dit_status_t dit_pipeline_index_parse(const char *text, size_t len, const char *what, dit_pipeline_index_t *out) {
  memset(out, 0, sizeof *out);
  dit_json_doc_t *doc = NULL;
  dit_json_t root;
  DIT_RETURN_IF(dit_json_parse(text, len, what, &doc));
  dit_status_t s = dit_json_root(doc, &root);
  if (!s) s = pipeline_index_read(&root, out);
  dit_json_doc_free(doc);
  return s;
}

dit_status_t dit_scheduler_config_parse(const char *text, size_t len, const char *what, dit_scheduler_defaults_t *out) {
  static const char *const predictions[] = {"epsilon", "v_prediction", "sample", "flow_prediction", NULL};
  memset(out, 0, sizeof *out);
  dit_json_doc_t *doc = NULL;
  dit_json_t root;
  DIT_RETURN_IF(dit_json_parse(text, len, what, &doc));
  dit_status_t s = dit_json_root(doc, &root);
  if (!s) s = dit_json_str_copy(&root, "_class_name", out->class_name, sizeof out->class_name, false);
  /* diffusers' defaults: FlowMatchEuler is flow matching through and through (its shift is
   * "shift"); UniPC and the other multistep solvers predict epsilon unless told, and call the
   * flow shift "flow_shift". */
  const int euler = !s && !strncmp(out->class_name, "FlowMatch", 9);
  out->num_train_timesteps = 1000;
  out->shift = 1.0;
  out->use_flow_sigmas = euler;
  snprintf(out->prediction_type, sizeof out->prediction_type, "%s", euler ? "flow_prediction" : "epsilon");
  const char *shift_key = euler ? "shift" : "flow_shift";
  if (!s && has_value(&root, "num_train_timesteps")) s = dit_json_int(&root, "num_train_timesteps", 1, 1000000, &out->num_train_timesteps);
  if (!s && has_value(&root, shift_key)) s = dit_json_num(&root, shift_key, 1e-3, 1e3, &out->shift);
  if (!s && has_value(&root, "use_flow_sigmas")) {
    bool b = false;
    s = dit_json_bool(&root, "use_flow_sigmas", &b);
    out->use_flow_sigmas = b || euler;
  }
  if (!s && has_value(&root, "prediction_type")) {
    int k = 0;
    s = dit_json_enum(&root, "prediction_type", predictions, &k);
    if (!s) snprintf(out->prediction_type, sizeof out->prediction_type, "%s", predictions[k]);
  }
  if (!s) out->present = 1;
  dit_json_doc_free(doc);
  return s;
}

dit_status_t dit_vae_config_parse(const char *text, size_t len, const char *what, dit_vae_factors_t *out) {
  memset(out, 0, sizeof *out);
  dit_json_doc_t *doc = NULL;
  dit_json_t root, v;
  DIT_RETURN_IF(dit_json_parse(text, len, what, &doc));
  dit_status_t s = dit_json_root(doc, &root);
  char cls[64] = "";
  if (!s) s = dit_json_str_copy(&root, "_class_name", cls, sizeof cls, false);
  if (!s && strcmp(cls, "AutoencoderKLWan")) {
    char q[96];
    dit_json_quote(cls, q);
    v = at_member(&root, "_class_name");
    s = dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "found %s; expected \"AutoencoderKLWan\"", q);
  }
  /* diffusers' AutoencoderKLWan defaults; Wan2.2's VAE sets 16 and 48. */
  int64_t sp = 8, tm = 4, z = 16;
  if (!s && has_value(&root, "scale_factor_spatial")) s = dit_json_int(&root, "scale_factor_spatial", 1, 64, &sp);
  if (!s && has_value(&root, "scale_factor_temporal")) s = dit_json_int(&root, "scale_factor_temporal", 1, 64, &tm);
  if (!s && has_value(&root, "z_dim")) s = dit_json_int(&root, "z_dim", 1, 4096, &z);
  if (!s) {
    out->spatial = (int)sp;
    out->temporal = (int)tm;
    out->z_dim = z;
    snprintf(out->source, sizeof out->source, "vae/config.json");
  }
  dit_json_doc_free(doc);
  return s;
}

dit_status_t dit_expert_configs_match(const cJSON *a, const char *a_what, const cJSON *b, const char *b_what) {
  for (size_t f = 0; f < N_WAN_FIELDS; f++) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, kWanFields[f].key);
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, kWanFields[f].key);
    if (x && y && cJSON_Compare(x, y, true)) continue;
    /* Both are normalized configs of accepted values: short to print. */
    char *tx = x ? cJSON_PrintUnformatted(x) : NULL, *ty = y ? cJSON_PrintUnformatted(y) : NULL;
    dit_status_t s = DIT_ERR(INVALID_ARGUMENT,
                             "%s: field '%s' = %.64s, but %s has %.64s: a pipeline's experts must share the architecture",
                             b_what, kWanFields[f].key, ty ? ty : "(absent)", a_what, tx ? tx : "(absent)");
    free(tx);
    free(ty);
    return s;
  }
  return DIT_OK;
}

/* ---- variants ---- */

static const struct {
  const char *name;
  int vae_t, vae_s;
} kWanVariants[] = {
    {"wan2.1", 4, 8},        /* also Wan2.2 A14B, whose VAE is Wan2.1's */
    {"wan2.2-ti2v", 4, 16}, /* the TI2V-5B model's VAE compresses 16x spatially */
};

/* The variant names the VAE factors when no vae/config.json gives them: --variant if given,
 * else a pipeline's expand_timesteps (the TI2V variant), else a bare transformer's 48 latent
 * channels. A VAE config that was read must agree with an explicit --variant and with the
 * transformer's latent channels. */
static dit_status_t pick_variant(dit_model_t *m, const char *want, const char *vae_what) {
  int idx = -1;
  if (want) {
    for (size_t i = 0; i < sizeof kWanVariants / sizeof kWanVariants[0]; i++)
      if (!strcmp(kWanVariants[i].name, want)) idx = (int)i;
    if (idx < 0) return DIT_ERR(INVALID_ARGUMENT, "--variant %s: unknown Wan variant (wan2.1, wan2.2-ti2v)", want);
  } else if (m->pipeline.index.class_name[0]) {
    idx = m->pipeline.index.expand_timesteps ? 1 : 0;
  } else {
    idx = m->wan.in_channels == 48 ? 1 : 0;
  }
  snprintf(m->variant, sizeof m->variant, "%s", kWanVariants[idx].name);
  dit_vae_factors_t *vae = &m->pipeline.vae;
  if (vae->source[0]) {
    if (want && (vae->spatial != kWanVariants[idx].vae_s || vae->temporal != kWanVariants[idx].vae_t))
      return DIT_ERR(INVALID_ARGUMENT,
                     "--variant %s: its VAE compresses %dx spatially and %dx temporally, but %s has "
                     "scale_factor_spatial = %d, scale_factor_temporal = %d",
                     want, kWanVariants[idx].vae_s, kWanVariants[idx].vae_t, vae_what, vae->spatial, vae->temporal);
    if (vae->z_dim != m->wan.out_channels)
      return DIT_ERR(INVALID_ARGUMENT, "%s: field 'z_dim' = %" PRId64 ", but %s/config.json has out_channels = %" PRId64
                     ": the transformer's latents are not this VAE's",
                     vae_what, vae->z_dim, m->model_dir, m->wan.out_channels);
  } else {
    vae->spatial = kWanVariants[idx].vae_s;
    vae->temporal = kWanVariants[idx].vae_t;
    snprintf(vae->source, sizeof vae->source, "variant");
  }
  m->vae_temporal = vae->temporal;
  m->vae_spatial = vae->spatial;
  return DIT_OK;
}

/* ---- expected weights ---- */

typedef struct expected {
  char name[128];
  int rank;
  int64_t dims[5];
  char why[64]; /* the config field that calls for an optional tensor; "" for the others */
} expected_t;

typedef struct expected_list {
  expected_t *items;
  size_t n, cap;
  char why[64]; /* given to the tensors expected from here on */
} expected_list_t;

static int expect(expected_list_t *l, int rank, const int64_t *dims, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int expect(expected_list_t *l, int rank, const int64_t *dims, const char *fmt, ...) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 256;
    expected_t *n = realloc(l->items, cap * sizeof *n);
    if (!n) return -1;
    l->items = n;
    l->cap = cap;
  }
  expected_t *e = &l->items[l->n++];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->name, sizeof e->name, fmt, ap);
  va_end(ap);
  e->rank = rank;
  for (int i = 0; i < rank; i++) e->dims[i] = dims[i];
  memcpy(e->why, l->why, sizeof e->why);
  return 0;
}

static void expect_linear(expected_list_t *l, int64_t out, int64_t in, const char *prefix) {
  int64_t w[2] = {out, in}, b[1] = {out};
  expect(l, 2, w, "%s.weight", prefix);
  expect(l, 1, b, "%s.bias", prefix);
}

/* Wan2.1 I2V: the CLIP image embedder and, in each cross-attention, the image tokens' k/v. */
static void wan_expected_image(const dit_wan_config_t *w, expected_list_t *l) {
  const int64_t D = w->heads * w->head_dim, I = w->image_dim, A = w->added_kv_proj_dim, d1[1] = {D};
  if (I) {
    int64_t i1[1] = {I};
    snprintf(l->why, sizeof l->why, "field 'image_dim' = %" PRId64, I);
    expect(l, 1, i1, "condition_embedder.image_embedder.norm1.weight");
    expect(l, 1, i1, "condition_embedder.image_embedder.norm1.bias");
    expect_linear(l, I, I, "condition_embedder.image_embedder.ff.net.0.proj");
    expect_linear(l, D, I, "condition_embedder.image_embedder.ff.net.2");
    expect(l, 1, d1, "condition_embedder.image_embedder.norm2.weight");
    expect(l, 1, d1, "condition_embedder.image_embedder.norm2.bias");
    if (w->pos_embed_seq_len) {
      int64_t pe[3] = {1, w->pos_embed_seq_len, I};
      snprintf(l->why, sizeof l->why, "field 'pos_embed_seq_len' = %" PRId64, w->pos_embed_seq_len);
      expect(l, 3, pe, "condition_embedder.image_embedder.pos_embed");
    }
  }
  if (A) {
    char p[128];
    snprintf(l->why, sizeof l->why, "field 'added_kv_proj_dim' = %" PRId64, A);
    for (int64_t i = 0; i < w->layers; i++) {
      snprintf(p, sizeof p, "blocks.%" PRId64 ".attn2.add_k_proj", i);
      expect_linear(l, D, A, p);
      snprintf(p, sizeof p, "blocks.%" PRId64 ".attn2.add_v_proj", i);
      expect_linear(l, D, A, p);
      expect(l, 1, d1, "blocks.%" PRId64 ".attn2.norm_added_k.weight", i);
    }
  }
  l->why[0] = 0;
}

static dit_status_t wan_expected(const dit_wan_config_t *w, expected_list_t *l) {
  int64_t D = w->heads * w->head_dim, P = w->patch[0] * w->patch[1] * w->patch[2];
  wan_expected_image(w, l);
  int64_t pe[5] = {D, w->in_channels, w->patch[0], w->patch[1], w->patch[2]}, d1[1] = {D};
  expect(l, 5, pe, "patch_embedding.weight");
  expect(l, 1, d1, "patch_embedding.bias");
  expect_linear(l, D, w->freq_dim, "condition_embedder.time_embedder.linear_1");
  expect_linear(l, D, D, "condition_embedder.time_embedder.linear_2");
  expect_linear(l, 6 * D, D, "condition_embedder.time_proj");
  expect_linear(l, D, w->text_dim, "condition_embedder.text_embedder.linear_1");
  expect_linear(l, D, D, "condition_embedder.text_embedder.linear_2");
  char p[128];
  for (int64_t i = 0; i < w->layers; i++) {
    int64_t sst[3] = {1, 6, D};
    expect(l, 3, sst, "blocks.%" PRId64 ".scale_shift_table", i);
    for (int a = 1; a <= 2; a++) {
      static const char *const proj[] = {"to_q", "to_k", "to_v", "to_out.0"};
      for (int k = 0; k < 4; k++) {
        snprintf(p, sizeof p, "blocks.%" PRId64 ".attn%d.%s", i, a, proj[k]);
        expect_linear(l, D, D, p);
      }
      expect(l, 1, d1, "blocks.%" PRId64 ".attn%d.norm_q.weight", i, a);
      expect(l, 1, d1, "blocks.%" PRId64 ".attn%d.norm_k.weight", i, a);
    }
    if (w->cross_attn_norm) {
      expect(l, 1, d1, "blocks.%" PRId64 ".norm2.weight", i);
      expect(l, 1, d1, "blocks.%" PRId64 ".norm2.bias", i);
    }
    snprintf(p, sizeof p, "blocks.%" PRId64 ".ffn.net.0.proj", i);
    expect_linear(l, w->ffn_dim, D, p);
    snprintf(p, sizeof p, "blocks.%" PRId64 ".ffn.net.2", i);
    expect_linear(l, D, w->ffn_dim, p);
  }
  expect_linear(l, w->out_channels * P, D, "proj_out");
  int64_t sst[3] = {1, 2, D};
  expect(l, 3, sst, "scale_shift_table");
  return DIT_OK;
}

static int cmp_expected(const void *a, const void *b) {
  return strcmp(((const expected_t *)a)->name, ((const expected_t *)b)->name);
}

/* Checks the weights of the transformer in dir against its config. */
static dit_status_t wan_check_weights(const dit_wan_config_t *w, const dit_safetensors_t *weights, const char *dir) {
  expected_list_t l = {0};
  dit_status_t s = wan_expected(w, &l);
  if (!s && l.n == 0) s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  if (s) {
    free(l.items);
    return s;
  }
  qsort(l.items, l.n, sizeof *l.items, cmp_expected);
  for (size_t i = 0; i < l.n && !s; i++) {
    const expected_t *e = &l.items[i];
    const dit_st_tensor_t *t = dit_safetensors_find(weights, e->name);
    if (!t) {
      s = DIT_ERR(NOT_FOUND, "%s: checkpoint has no tensor '%s', which this config requires%s%s%s", dir, e->name,
                  e->why[0] ? " (" : "", e->why, e->why[0] ? ")" : "");
      break;
    }
    if (t->dtype != DIT_F32 && t->dtype != DIT_BF16 && t->dtype != DIT_F16) {
      s = DIT_ERR(INVALID_ARGUMENT, "%s: tensor '%s' has dtype %s, expected a float type", t->file, e->name,
                  dit_st_dtype_name(t->dtype));
      break;
    }
    int ok = t->rank == e->rank;
    for (int d = 0; ok && d < e->rank; d++) ok = t->dims[d] == e->dims[d];
    if (!ok) {
      char want[96] = "", got[96] = "";
      for (int d = 0; d < e->rank; d++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%" PRId64, d ? "," : "", e->dims[d]);
      for (int d = 0; d < t->rank; d++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%" PRId64, d ? "," : "", t->dims[d]);
      s = DIT_ERR(INVALID_ARGUMENT, "%s: tensor '%s': shape [%s], expected [%s] from config.json", t->file, e->name, got, want);
    }
  }
  /* Both lists are sorted by name: walk them together to find tensors the config does not use. */
  for (size_t i = 0, j = 0; !s && i < dit_safetensors_count(weights); i++) {
    const char *name = dit_safetensors_at(weights, i)->name;
    while (j < l.n && strcmp(l.items[j].name, name) < 0) j++;
    if (j < l.n && !strcmp(l.items[j].name, name)) continue;
    if (strstr(name, "norm_added_q")) continue; /* diffusers ignores these too */
    s = DIT_ERR(INVALID_ARGUMENT, "%s: unexpected tensor '%s' (not part of this config: image conditioning or a different architecture?)",
                dit_safetensors_at(weights, i)->file, name);
  }
  free(l.items);
  return s;
}

/* ---- loading ---- */

#define CONFIG_MAX_BYTES (1 << 20)

static dit_status_t read_small(const char *path, char **text, size_t *len) {
  return dit_file_read(path, CONFIG_MAX_BYTES, text, len);
}

/* A diffusers pipeline directory: model_index.json names the transformers (read from
 * transformer/ and transformer_2/) and the scheduler, whose config gives the sampler's
 * defaults; vae/config.json, when present, gives the VAE factors. */
static dit_status_t load_pipeline(dit_model_t *m, const char *dir) {
  char path[4200], *text = NULL;
  size_t len = 0;
  DIT_RETURN_IF(dit_path_join(path, sizeof path, dir, "model_index.json"));
  DIT_RETURN_IF(read_small(path, &text, &len));
  dit_status_t s = dit_pipeline_index_parse(text, len, path, &m->pipeline.index);
  free(text);
  text = NULL;
  if (!s) s = dit_path_join(m->model_dir, sizeof m->model_dir, dir, "transformer");
  if (!s && !dit_is_dir(m->model_dir))
    s = DIT_ERR(NOT_FOUND, "%s: names a transformer (%s), but %s is not a directory", path,
                m->pipeline.index.transformer_class, m->model_dir);
  dit_expert_t *e2 = &m->pipeline.experts[1];
  if (!s && m->pipeline.index.transformer_2_class[0]) {
    s = dit_path_join(e2->dir, sizeof e2->dir, dir, "transformer_2");
    if (!s && !dit_is_dir(e2->dir))
      s = DIT_ERR(NOT_FOUND, "%s: names a second transformer (%s), but %s is not a directory", path,
                  m->pipeline.index.transformer_2_class, e2->dir);
  }
  char sub[4200];
  if (!s) s = dit_path_join(sub, sizeof sub, dir, "scheduler/scheduler_config.json");
  if (!s && dit_path_exists(sub)) {
    s = read_small(sub, &text, &len);
    if (!s) s = dit_scheduler_config_parse(text, len, sub, &m->pipeline.scheduler);
    free(text);
    text = NULL;
  }
  if (!s) s = dit_path_join(sub, sizeof sub, dir, "vae/config.json");
  if (!s && dit_path_exists(sub)) {
    s = read_small(sub, &text, &len);
    if (!s) s = dit_vae_config_parse(text, len, sub, &m->pipeline.vae);
    free(text);
  }
  return s;
}

/* transformer_2/: its config must equal transformer/'s but for the weights, and its weights
 * must fit it. */
static dit_status_t load_second_expert(dit_model_t *m, const char *index_path) {
  dit_expert_t *e = &m->pipeline.experts[1];
  char path[4200], first[4200], *text = NULL;
  size_t len = 0;
  DIT_RETURN_IF(dit_path_join(path, sizeof path, e->dir, "config.json"));
  DIT_RETURN_IF(dit_path_join(first, sizeof first, m->model_dir, "config.json"));
  DIT_RETURN_IF(read_small(path, &text, &len));
  dit_model_t *t = calloc(1, sizeof *t);
  dit_status_t s = t ? dit_model_config_parse(text, len, path, t) : DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  free(text);
  if (t) {
    e->config = t->config;
    e->wan = t->wan;
    if (!s && strcmp(m->pipeline.index.transformer_2_class, t->model_class))
      s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'transformer_2': class \"%s\", but %s says \"%s\"", index_path,
                  m->pipeline.index.transformer_2_class, path, t->model_class);
    free(t);
  }
  if (!s) s = dit_expert_configs_match(m->config, first, e->config, path);
  if (!s) s = dit_safetensors_open(e->dir, &e->weights);
  if (!s) s = wan_check_weights(&e->wan, e->weights, e->dir);
  if (!s) {
    /* Normalized like the first expert's (which gets its class after its weights check). */
    cJSON *cls = cJSON_CreateString(m->pipeline.index.transformer_2_class);
    if (!cls || !cJSON_AddItemToObject(e->config, "_class_name", cls)) {
      cJSON_Delete(cls);
      s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  return s;
}

dit_status_t dit_model_load(const char *model_dir, const char *variant, dit_model_t **out) {
  *out = NULL;
  dit_model_t *m = calloc(1, sizeof *m);
  if (!m) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  snprintf(m->model_dir, sizeof m->model_dir, "%s", model_dir);
  char path[4200], index[4200], vae[4200];
  char *text = NULL;
  size_t len = 0;
  dit_status_t s = dit_path_join(path, sizeof path, model_dir, "config.json");
  if (!s) s = dit_path_join(index, sizeof index, model_dir, "model_index.json");
  if (!s) s = dit_path_join(vae, sizeof vae, model_dir, "vae/config.json");
  if (!s && !dit_is_dir(model_dir)) s = DIT_ERR(NOT_FOUND, "%s: not a model directory", model_dir);
  if (!s && !dit_path_exists(path) && dit_path_exists(index)) {
    snprintf(m->pipeline.dir, sizeof m->pipeline.dir, "%s", model_dir);
    s = load_pipeline(m, model_dir);
    if (!s) s = dit_path_join(path, sizeof path, m->model_dir, "config.json");
  }
  if (!s) s = read_small(path, &text, &len);
  if (!s) s = dit_model_config_parse(text, len, path, m);
  if (!s && m->pipeline.index.transformer_class[0] && strcmp(m->pipeline.index.transformer_class, m->model_class))
    s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'transformer': class \"%s\", but %s says \"%s\"", index,
                m->pipeline.index.transformer_class, path, m->model_class);
  if (!s) s = dit_safetensors_open(m->model_dir, &m->weights);
  if (!s) s = wan_check_weights(&m->wan, m->weights, m->model_dir);
  if (!s && m->pipeline.experts[1].dir[0]) s = load_second_expert(m, index);
  if (!s) s = pick_variant(m, variant, vae);
  free(text);
  if (!s) {
    cJSON *cls = cJSON_CreateString(m->model_class);
    if (!cls || !cJSON_AddItemToObject(m->config, "_class_name", cls)) {
      cJSON_Delete(cls);
      s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  if (s) {
    dit_model_free(m);
    return s;
  }
  dit_expert_t *e0 = &m->pipeline.experts[0];
  snprintf(e0->dir, sizeof e0->dir, "%s", m->model_dir);
  e0->config = m->config;
  e0->wan = m->wan;
  e0->weights = m->weights;
  m->pipeline.n_experts = m->pipeline.experts[1].dir[0] ? 2 : 1;
  *out = m;
  return DIT_OK;
}

void dit_model_free(dit_model_t *m) {
  if (!m) return;
  cJSON_Delete(m->config);
  dit_safetensors_close(m->weights);
  cJSON_Delete(m->pipeline.experts[1].config);
  dit_safetensors_close(m->pipeline.experts[1].weights);
  free(m);
}

dit_status_t dit_model_check_compilable(const dit_model_t *m) {
  const dit_pipeline_t *p = &m->pipeline;
  const dit_wan_config_t *w = &m->wan;
  /* Two experts compile when their configs agree (dit_model_load checked it) and the pipeline
   * says where to switch. */
  if (p->n_experts > 1 && !p->index.has_boundary_ratio)
    return DIT_ERR(INVALID_ARGUMENT, "%s/model_index.json: field 'boundary_ratio': missing: two experts need the ratio at which "
                   "transformer_2 takes over", p->dir);
  const int64_t D = w->heads * w->head_dim;
  if (w->pos_embed_seq_len)
    return DIT_ERR(UNIMPLEMENTED, "%s/config.json: field 'pos_embed_seq_len' = %" PRId64 ": first-last-frame image tokens (Wan2.1 "
                   "FLF2V, two images' tokens per sample) are not supported yet; expected null",
                   m->model_dir, w->pos_embed_seq_len);
  if (!w->image_dim != !w->added_kv_proj_dim)
    return DIT_ERR(UNIMPLEMENTED, "%s/config.json: field '%s' = %" PRId64 " but '%s' is null: image conditioning needs both the image "
                   "embedder (image_dim) and the cross-attention's image K/V (added_kv_proj_dim)",
                   m->model_dir, w->image_dim ? "image_dim" : "added_kv_proj_dim", w->image_dim ? w->image_dim : w->added_kv_proj_dim,
                   w->image_dim ? "added_kv_proj_dim" : "image_dim");
  if (w->added_kv_proj_dim && w->added_kv_proj_dim != D)
    return DIT_ERR(INVALID_ARGUMENT, "%s/config.json: field 'added_kv_proj_dim' = %" PRId64 ", expected %" PRId64
                   " (num_attention_heads x attention_head_dim): the image embedder's output is what add_k_proj reads",
                   m->model_dir, w->added_kv_proj_dim, D);
  /* in_channels != out_channels without image tokens is Wan2.2-I2V-A14B's forward: the
   * condition's channels concatenated to the latents, read by the patch embedding alone. */
  return DIT_OK;
}

dit_status_t dit_model_pipeline_identity(const dit_model_t *m, cJSON **out) {
  *out = NULL;
  const dit_pipeline_t *p = &m->pipeline;
  const int plain = (!p->index.class_name[0] || !strcmp(p->index.class_name, "WanPipeline")) && p->n_experts <= 1 &&
                    !p->index.expand_timesteps;
  int variant_vae = 0;
  for (size_t i = 0; i < sizeof kWanVariants / sizeof kWanVariants[0]; i++)
    if (!strcmp(kWanVariants[i].name, m->variant))
      variant_vae = kWanVariants[i].vae_s == p->vae.spatial && kWanVariants[i].vae_t == p->vae.temporal;
  /* What compiled before these facts were read keeps its identity: the variant in the
   * identity already names its VAE factors. */
  if (plain && variant_vae) return DIT_OK;
  cJSON *o = cJSON_CreateObject();
  if (!o) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  int ok = cJSON_AddStringToObject(o, "class", p->index.class_name) != NULL;
  ok = ok && cJSON_AddNumberToObject(o, "experts", p->n_experts) != NULL;
  if (p->index.has_boundary_ratio) ok = ok && cJSON_AddNumberToObject(o, "boundary_ratio", p->index.boundary_ratio) != NULL;
  else ok = ok && cJSON_AddNullToObject(o, "boundary_ratio") != NULL;
  ok = ok && cJSON_AddBoolToObject(o, "expand_timesteps", p->index.expand_timesteps) != NULL;
  cJSON *vae = ok ? cJSON_AddObjectToObject(o, "vae") : NULL;
  ok = vae && cJSON_AddNumberToObject(vae, "scale_factor_spatial", p->vae.spatial) &&
       cJSON_AddNumberToObject(vae, "scale_factor_temporal", p->vae.temporal);
  if (ok && p->vae.z_dim) ok = cJSON_AddNumberToObject(vae, "z_dim", (double)p->vae.z_dim) != NULL;
  if (!ok) {
    cJSON_Delete(o);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  *out = o;
  return DIT_OK;
}

dit_status_t dit_model_latent_shape(const dit_model_t *m, const dit_shape_request_t *r,
                                    dit_latent_shape_t *out) {
  int vt = m->vae_temporal, vs = m->vae_spatial;
  if (r->frames < 1 || (r->frames - 1) % vt)
    return DIT_ERR(INVALID_ARGUMENT, "--frames %" PRId64 ": %s needs frames = %d*k + 1 (e.g. %" PRId64 ")", r->frames,
                   m->variant, vt, r->frames < 1 ? 1 : (r->frames - 1) / vt * vt + 1);
  int64_t sp_h = vs * m->wan.patch[1], sp_w = vs * m->wan.patch[2];
  if (r->height < 1 || r->height % sp_h)
    return DIT_ERR(INVALID_ARGUMENT, "--height %" PRId64 ": must be a positive multiple of %" PRId64 " (VAE %d x patch %" PRId64 ")",
                   r->height, sp_h, vs, m->wan.patch[1]);
  if (r->width < 1 || r->width % sp_w)
    return DIT_ERR(INVALID_ARGUMENT, "--width %" PRId64 ": must be a positive multiple of %" PRId64 " (VAE %d x patch %" PRId64 ")",
                   r->width, sp_w, vs, m->wan.patch[2]);
  out->channels = m->wan.in_channels;
  out->frames = (r->frames - 1) / vt + 1;
  out->height = r->height / vs;
  out->width = r->width / vs;
  if (out->frames % m->wan.patch[0])
    return DIT_ERR(INVALID_ARGUMENT, "--frames %" PRId64 ": %" PRId64 " latent frames are not divisible by the temporal patch %" PRId64,
                   r->frames, out->frames, m->wan.patch[0]);
  int64_t grid[3] = {out->frames / m->wan.patch[0], out->height / m->wan.patch[1], out->width / m->wan.patch[2]};
  for (int i = 0; i < 3; i++)
    if (grid[i] > m->wan.rope_max_seq_len)
      return DIT_ERR(INVALID_ARGUMENT, "shape: %" PRId64 " patches along %s exceed config.json rope_max_seq_len %" PRId64,
                     grid[i], i == 0 ? "frames" : i == 1 ? "height" : "width", m->wan.rope_max_seq_len);
  if (r->batch < 1 || r->batch > 4096) return DIT_ERR(INVALID_ARGUMENT, "--batch %" PRId64 ": expected 1..4096", r->batch);
  if (r->text_len < 1 || r->text_len > 65536) return DIT_ERR(INVALID_ARGUMENT, "--text-len %" PRId64 ": expected 1..65536", r->text_len);
  out->image_len = 0;
  if (m->wan.image_dim) {
    /* diffusers splits the context as "image = all but the last 512 tokens". */
    if (r->text_len != 512)
      return DIT_ERR(INVALID_ARGUMENT, "--text-len %" PRId64 ": an image-conditioned model (config.json image_dim = %" PRId64
                     ") takes exactly 512 text tokens: diffusers' attention treats all context tokens before the last 512 as image tokens",
                     r->text_len, m->wan.image_dim);
    out->image_len = r->image_len ? r->image_len : 257;
    if (out->image_len < 1 || out->image_len > 65536)
      return DIT_ERR(INVALID_ARGUMENT, "--image-len %" PRId64 ": expected 1..65536", r->image_len);
  } else if (r->image_len) {
    return DIT_ERR(INVALID_ARGUMENT, "--image-len %" PRId64 ": %s/config.json has image_dim null: the model takes no image tokens",
                   r->image_len, m->model_dir);
  }
  return DIT_OK;
}

/* ---- graph ---- */

typedef struct wan_builder {
  dit_graph_t *g;
  const dit_model_t *m;
  dit_dtype_t dt; /* activation storage dtype */
  int tp, rank;   /* tensor-parallel degree and rank */
  int cp, cp_rank, cp_mode;
  int sp; /* norms, modulation and residuals on 1/tp of the tokens; gather before, reduce-scatter after */
  dit_status_t err; /* first error of a two-output op (the graph records single-output ones) */
} wan_builder_t;

static void op2(wan_builder_t *b, dit_op_kind_t kind, const dit_vid_t *ins, int n_in, const dit_attrs_t *a,
                const dit_dtype_t dts[2], const char *name, dit_vid_t out[2]) {
  out[0] = out[1] = -1;
  dit_status_t s = dit_graph_op2(b->g, kind, ins, n_in, a, dts, name, out);
  if (s && !b->err) b->err = s;
  else dit_status_free(s);
}

/* diffusers keeps these modules in fp32 when the model is cast to half precision. */
static dit_dtype_t weight_dtype(const wan_builder_t *b, const char *key) {
  if (b->dt == DIT_F32) return DIT_F32;
  if (strstr(key, "time_embedder") || strstr(key, "scale_shift_table") || strstr(key, ".norm2.") ||
      strstr(key, ".norm1."))
    return DIT_F32;
  return b->dt;
}

static dit_vid_t W(wan_builder_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static dit_vid_t W(wan_builder_t *b, const char *fmt, ...) {
  char key[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(key, sizeof key, fmt, ap);
  va_end(ap);
  const dit_st_tensor_t *t = dit_safetensors_find(b->m->weights, key);
  if (!t) {
    /* Checked at load; reaching this is a frontend bug. Record it through a bad op. */
    return dit_graph_weight(b->g, key, DIT_F32, -1, NULL);
  }
  return dit_graph_weight(b->g, key, weight_dtype(b, key), t->rank, t->dims);
}

static dit_vid_t linear(wan_builder_t *b, dit_vid_t x, const char *prefix, dit_dtype_t out, const char *name) {
  dit_vid_t ins[3] = {x, W(b, "%s.weight", prefix), W(b, "%s.bias", prefix)};
  return dit_graph_op(b->g, DIT_OP_LINEAR, ins, 3, NULL, out, name);
}

/* This rank's 1/tp of a checkpoint tensor along dim. */
static dit_vid_t Wshard(wan_builder_t *b, const char *key, int dim) {
  const dit_st_tensor_t *t = dit_safetensors_find(b->m->weights, key);
  if (!t) return dit_graph_weight(b->g, key, DIT_F32, -1, NULL);
  int64_t part = t->dims[dim] / b->tp;
  return dit_graph_weight_slice(b->g, key, weight_dtype(b, key), t->rank, t->dims, dim, b->rank * part, part);
}

/* Context-parallel collectives: group 1 = the cp group (n = cp); with USP, 3 = the Ulysses
 * subgroup (n = U) and 4 = the ring subgroup (n = cp / U). */
static dit_vid_t cp_collective_in(wan_builder_t *b, dit_op_kind_t kind, dit_vid_t x, int64_t heads, int reverse, int group,
                                  int n, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "group", group);
  dit_attrs_set_int(&a, "n", n);
  if (kind == DIT_OP_ALLTOALL) {
    dit_attrs_set_int(&a, "heads", heads);
    dit_attrs_set_int(&a, "reverse", reverse);
  }
  return dit_graph_op(b->g, kind, &x, 1, &a, dit_graph_cvalue(b->g, x)->dtype, name);
}

static dit_vid_t cp_collective(wan_builder_t *b, dit_op_kind_t kind, dit_vid_t x, int64_t heads, int reverse, const char *name) {
  return cp_collective_in(b, kind, x, heads, reverse, 1, b->cp, name);
}

static dit_vid_t allreduce(wan_builder_t *b, dit_vid_t x, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "group", 0);
  return dit_graph_op(b->g, DIT_OP_ALLREDUCE, &x, 1, &a, dit_graph_cvalue(b->g, x)->dtype, name);
}

/* Column-parallel: this rank's rows of the weight and bias (output features). */
static dit_vid_t linear_col(wan_builder_t *b, dit_vid_t x, const char *prefix, dit_dtype_t out, const char *name) {
  if (b->tp == 1) return linear(b, x, prefix, out, name);
  char kw[160], kb[160];
  snprintf(kw, sizeof kw, "%s.weight", prefix);
  snprintf(kb, sizeof kb, "%s.bias", prefix);
  dit_vid_t ins[3] = {x, Wshard(b, kw, 0), Wshard(b, kb, 0)};
  return dit_graph_op(b->g, DIT_OP_LINEAR, ins, 3, NULL, out, name);
}

/* Row-parallel: this rank's columns of the weight (input features); partial products in
 * fp32 summed over the group, the bias added once (by rank 0). */
static dit_vid_t linear_row(wan_builder_t *b, dit_vid_t x, const char *prefix, const char *name) {
  if (b->tp == 1) return linear(b, x, prefix, b->dt, name);
  char kw[160], partial[192];
  snprintf(kw, sizeof kw, "%s.weight", prefix);
  snprintf(partial, sizeof partial, "%s.partial", name);
  /* The bias in fp32, the partial product's dtype: a GEMM library adds it in its epilogue. */
  char kbias[160];
  snprintf(kbias, sizeof kbias, "%s.bias", prefix);
  const dit_st_tensor_t *bt = dit_safetensors_find(b->m->weights, kbias);
  dit_vid_t bias = b->rank != 0 ? -1 : bt ? dit_graph_weight(b->g, kbias, DIT_F32, bt->rank, bt->dims) : W(b, "%s", kbias);
  dit_vid_t ins[3] = {x, Wshard(b, kw, 1), bias};
  dit_vid_t p = dit_graph_op(b->g, DIT_OP_LINEAR, ins, b->rank == 0 ? 3 : 2, NULL, DIT_F32, partial);
  if (!b->sp) return allreduce(b, p, name);
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "group", 0);
  dit_attrs_set_int(&a, "n", b->tp);
  return dit_graph_op(b->g, DIT_OP_REDUCE_SCATTER, &p, 1, &a, DIT_F32, name);
}

/* Sequence parallelism: a token-sharded activation gathered over the tensor-parallel group
 * before a column-parallel product. */
static dit_vid_t sp_gather(wan_builder_t *b, dit_vid_t x, const char *name) {
  if (!b->sp) return x;
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "group", 0);
  dit_attrs_set_int(&a, "n", b->tp);
  return dit_graph_op(b->g, DIT_OP_ALLGATHER, &x, 1, &a, dit_graph_cvalue(b->g, x)->dtype, name);
}

static dit_vid_t unary(wan_builder_t *b, dit_op_kind_t k, dit_vid_t x, dit_dtype_t out, const char *name) {
  return dit_graph_op(b->g, k, &x, 1, NULL, out, name);
}

/* A block's modulation: a stored table (per batch item: mod_table's [B, n, D]), or per token
 * the table and timestep projection that adaln and gated_add add where they use a row (a
 * [B, T, n, D] table would be written and read again by every block: 2 GB each at 27280
 * tokens of Wan2.2 TI2V-5B). */
typedef struct wan_mod {
  dit_vid_t table, e; /* e < 0: table is mod_table's output */
} wan_mod_t;

static dit_vid_t adaln(wan_builder_t *b, dit_vid_t x, wan_mod_t mod, int shift, int scale, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_float(&a, "eps", b->m->wan.eps);
  dit_attrs_set_int(&a, "shift", shift);
  dit_attrs_set_int(&a, "scale", scale);
  dit_vid_t ins[3] = {x, mod.table, mod.e};
  return dit_graph_op(b->g, DIT_OP_ADALN, ins, mod.e < 0 ? 2 : 3, &a, b->dt, name);
}

static dit_vid_t gated(wan_builder_t *b, dit_vid_t x, dit_vid_t y, wan_mod_t mod, int gate, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "gate", gate);
  dit_vid_t ins[4] = {x, y, mod.table, mod.e};
  return dit_graph_op(b->g, DIT_OP_GATED_ADD, ins, mod.e < 0 ? 3 : 4, &a, b->dt, name);
}

/* Per batch item mod_table's [B, n, D] table; per token the unsummed operands. */
static wan_mod_t modulation(wan_builder_t *b, dit_vid_t table, dit_vid_t e, int per_token, const char *name) {
  if (per_token) return (wan_mod_t){table, e};
  dit_vid_t in[2] = {table, e};
  return (wan_mod_t){dit_graph_op(b->g, DIT_OP_MOD_TABLE, in, 2, NULL, DIT_F32, name), -1};
}

/* RMSNorm over all heads. Split across tensor-parallel ranks, the rows' sums of squares are
 * all-reduced first so the scale is the whole row's, as the single-rank model computes it. */
static dit_vid_t rmsnorm(wan_builder_t *b, dit_vid_t x, const char *wkey, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_float(&a, "eps", b->m->wan.eps);
  if (b->tp == 1) {
    dit_vid_t ins[2] = {x, W(b, "%s", wkey)};
    return dit_graph_op(b->g, DIT_OP_RMSNORM, ins, 2, &a, b->dt, name);
  }
  char n1[192], n2[192];
  snprintf(n1, sizeof n1, "%s.sumsq", name);
  snprintf(n2, sizeof n2, "%s.sumsq_all", name);
  dit_vid_t ss = dit_graph_op(b->g, DIT_OP_ROWSUMSQ, &x, 1, NULL, DIT_F32, n1);
  ss = allreduce(b, ss, n2);
  dit_attrs_set_int(&a, "dim", b->m->wan.heads * b->m->wan.head_dim);
  dit_vid_t ins[3] = {x, ss, Wshard(b, wkey, 0)};
  return dit_graph_op(b->g, DIT_OP_RMSNORM_SLICE, ins, 3, &a, b->dt, name);
}

static dit_vid_t attention(wan_builder_t *b, dit_vid_t q, dit_vid_t k, dit_vid_t v, const char *name) {
  dit_attrs_t a = {0};
  dit_attrs_set_int(&a, "heads", b->m->wan.heads / b->tp);
  dit_attrs_set_float(&a, "scale", 1.0 / sqrt((double)b->m->wan.head_dim));
  dit_vid_t ins[3] = {q, k, v};
  return dit_graph_op(b->g, DIT_OP_ATTENTION, ins, 3, &a, b->dt, name);
}

dit_status_t dit_model_build_graph(const dit_model_t *m, const dit_shape_request_t *req,
                                   dit_graph_t **out) {
  *out = NULL;
  if (req->dtype != DIT_F32 && req->dtype != DIT_BF16)
    return DIT_ERR(UNIMPLEMENTED, "--dtype %s: supported: f32, bf16", dit_dtype_name(req->dtype));
  dit_latent_shape_t ls;
  DIT_RETURN_IF(dit_model_latent_shape(m, req, &ls));
  int tp = req->tp > 1 ? req->tp : 1;
  if (req->tp_rank < 0 || req->tp_rank >= tp)
    return DIT_ERR(INVALID_ARGUMENT, "tensor-parallel rank %d outside 0..%d", req->tp_rank, tp - 1);
  if (m->wan.heads % tp)
    return DIT_ERR(INVALID_ARGUMENT, "--tp %d: config.json num_attention_heads = %" PRId64 " is not divisible by %d", tp,
                   m->wan.heads, tp);
  if (m->wan.ffn_dim % tp)
    return DIT_ERR(INVALID_ARGUMENT, "--tp %d: config.json ffn_dim = %" PRId64 " is not divisible by %d", tp, m->wan.ffn_dim, tp);
  int cp = req->cp > 1 ? req->cp : 1;
  const int64_t ntok = (ls.frames / m->wan.patch[0]) * (ls.height / m->wan.patch[1]) * (ls.width / m->wan.patch[2]);
  if (cp > 1) {
    if (req->cp_rank < 0 || req->cp_rank >= cp)
      return DIT_ERR(INVALID_ARGUMENT, "context-parallel rank %d outside 0..%d", req->cp_rank, cp - 1);
    if (req->cp_mode < DIT_CP_GATHER || req->cp_mode > DIT_CP_USP)
      return DIT_ERR(UNIMPLEMENTED, "--cp %d: context-parallel mode %d (gather, ulysses, ring, usp)", cp, req->cp_mode);
    if (req->cp_mode == DIT_CP_USP && (req->ulysses < 2 || cp % req->ulysses || cp / req->ulysses < 2))
      return DIT_ERR(INVALID_ARGUMENT, "--cp %d --cp-mode usp --ulysses %d: U must be >= 2 and divide cp into a ring of >= 2", cp,
                     req->ulysses);
    if (req->cp_mode == DIT_CP_USP && (m->wan.heads / tp) % req->ulysses)
      return DIT_ERR(INVALID_ARGUMENT, "--cp-mode usp --ulysses %d: %" PRId64 " heads per tensor-parallel rank are not divisible by %d",
                     req->ulysses, m->wan.heads / tp, req->ulysses);
    if (ntok % cp)
      return DIT_ERR(INVALID_ARGUMENT, "--cp %d: the shape has %" PRId64 " tokens, which do not split into %d equal parts", cp, ntok, cp);
    if (req->cp_mode == DIT_CP_ULYSSES && (m->wan.heads / tp) % cp)
      return DIT_ERR(INVALID_ARGUMENT, "--cp %d --cp-mode ulysses: %" PRId64 " heads per tensor-parallel rank are not divisible by %d",
                     cp, m->wan.heads / tp, cp);
  }
  dit_graph_t *g;
  DIT_RETURN_IF(dit_graph_create(&g));
  if (req->sp && (tp < 2 || (ntok / cp) % tp))
    return DIT_ERR(INVALID_ARGUMENT, "--sp: needs --tp >= 2 and each context-parallel share of %" PRId64 " tokens divisible by tp %d",
                   ntok / cp, tp);
  wan_builder_t bb = {g, m, req->dtype, tp, req->tp_rank, cp, cp > 1 ? req->cp_rank : 0, cp > 1 ? req->cp_mode : 0,
                      req->sp ? 1 : 0, DIT_OK}, *b = &bb;
  const int64_t tl = ntok / cp, t0 = b->cp_rank * tl;
  const int64_t B = req->batch, L = req->text_len;
  const int64_t pt = m->wan.patch[0], ph = m->wan.patch[1], pw = m->wan.patch[2];
  const int64_t f = ls.frames / pt, h = ls.height / ph, w = ls.width / pw;
  const dit_dtype_t dt = req->dtype;

  /* Wan2.2 TI2V's pipeline gives every patch token its own timestep (the conditioning frame's
   * at 0): timestep [B, tokens], and the modulation of every block and of the output norm
   * becomes a table per token. */
  const int per_token = m->pipeline.index.expand_timesteps;
  int64_t xs[5] = {B, ls.channels, ls.frames, ls.height, ls.width}, ts[2] = {B, ntok}, es[3] = {B, L, m->wan.text_dim};
  dit_vid_t x = dit_graph_input(g, "hidden_states", dt, 5, xs);
  dit_vid_t t = dit_graph_input(g, "timestep", DIT_F32, per_token ? 2 : 1, ts);
  dit_vid_t ehs = dit_graph_input(g, "encoder_hidden_states", dt, 3, es);
  dit_vid_t ehi = -1;
  if (ls.image_len) {
    int64_t is[3] = {B, ls.image_len, m->wan.image_dim};
    ehi = dit_graph_input(g, "encoder_hidden_states_image", dt, 3, is);
  }

  dit_attrs_t pa = {0};
  dit_attrs_set_int(&pa, "pt", pt);
  dit_attrs_set_int(&pa, "ph", ph);
  dit_attrs_set_int(&pa, "pw", pw);
  dit_vid_t xp = dit_graph_op(g, DIT_OP_PATCHIFY, &x, 1, &pa, dt, "patchify");
  dit_vid_t hs = linear(b, xp, "patch_embedding", dt, "patch_embedding");
  /* This rank's contiguous share of the tokens (in frame order) from here to the output:
   * its cp share, and with sequence parallelism its tp part of that. Per-token timesteps are
   * sliced the same way, so each rank embeds only the timesteps of its own tokens. */
  const int sliced = cp > 1 || b->sp;
  dit_attrs_t sa = {0};
  dit_attrs_set_int(&sa, "t0", t0 + (b->sp ? req->tp_rank * (tl / tp) : 0));
  dit_attrs_set_int(&sa, "count", b->sp ? tl / tp : tl);
  if (sliced) hs = dit_graph_op(g, DIT_OP_SLICE_TOKENS, &hs, 1, &sa, dt, "tokens");

  /* Time embedding in fp32 (time_embedder is kept in fp32), cast like encoder states. */
  dit_attrs_t ta = {0};
  dit_attrs_set_int(&ta, "dim", m->wan.freq_dim);
  dit_attrs_set_int(&ta, "flip", 1);
  dit_attrs_set_float(&ta, "shift", 0.0);
  dit_attrs_set_float(&ta, "max_period", 10000.0);
  dit_attrs_set_float(&ta, "scale", 1.0);
  dit_vid_t te = dit_graph_op(g, DIT_OP_TIMESTEP_EMBED, &t, 1, &ta, DIT_F32, "time.sinusoid");
  if (per_token && sliced) te = dit_graph_op(g, DIT_OP_SLICE_TOKENS, &te, 1, &sa, DIT_F32, "time.sinusoid.tokens");
  te = linear(b, te, "condition_embedder.time_embedder.linear_1", DIT_F32, "time.linear_1");
  te = unary(b, DIT_OP_SILU, te, DIT_F32, "time.silu");
  /* Per token the embedder runs on every token's row, a GEMM worth a library (fp32 x fp32 ->
   * fp32 only): linear_2 writes fp32 and a cast rounds it once to temb's dtype, the bytes a
   * direct bf16 store gives. Per-batch graphs keep the direct store (a few rows). */
  dit_vid_t temb;
  if (per_token && dt != DIT_F32) {
    temb = linear(b, te, "condition_embedder.time_embedder.linear_2", DIT_F32, "temb.f32");
    temb = unary(b, DIT_OP_CAST, temb, dt, "temb");
  } else {
    temb = linear(b, te, "condition_embedder.time_embedder.linear_2", dt, "temb");
  }
  dit_vid_t tact = unary(b, DIT_OP_SILU, temb, dt, "temb.silu");
  dit_vid_t tproj = linear(b, tact, "condition_embedder.time_proj", dt, "timestep_proj");

  dit_vid_t ctx = linear(b, ehs, "condition_embedder.text_embedder.linear_1", dt, "text.linear_1");
  ctx = unary(b, DIT_OP_GELU_TANH, ctx, dt, "text.gelu");
  ctx = linear(b, ctx, "condition_embedder.text_embedder.linear_2", dt, "context");
  /* The image tokens' context, kept apart from the text's: diffusers concatenates the two and
   * its attention splits them again at the same place. */
  dit_vid_t ictx = -1;
  if (ehi >= 0) {
    dit_attrs_t la = {0};
    dit_attrs_set_float(&la, "eps", 1e-5); /* FP32LayerNorm's default */
    dit_vid_t n1_in[3] = {ehi, W(b, "condition_embedder.image_embedder.norm1.weight"),
                          W(b, "condition_embedder.image_embedder.norm1.bias")};
    ictx = dit_graph_op(g, DIT_OP_LAYERNORM, n1_in, 3, &la, dt, "image.norm1");
    ictx = linear(b, ictx, "condition_embedder.image_embedder.ff.net.0.proj", dt, "image.ff.up");
    ictx = unary(b, DIT_OP_GELU, ictx, dt, "image.ff.gelu");
    ictx = linear(b, ictx, "condition_embedder.image_embedder.ff.net.2", dt, "image.ff.down");
    dit_vid_t n2_in[3] = {ictx, W(b, "condition_embedder.image_embedder.norm2.weight"),
                          W(b, "condition_embedder.image_embedder.norm2.bias")};
    ictx = dit_graph_op(g, DIT_OP_LAYERNORM, n2_in, 3, &la, dt, "image_context");
  }

  dit_attrs_t ra = {0};
  int64_t hw = 2 * (m->wan.head_dim / 6);
  dit_attrs_set_int(&ra, "heads", m->wan.heads / tp);
  dit_attrs_set_int(&ra, "f", f);
  dit_attrs_set_int(&ra, "h", h);
  dit_attrs_set_int(&ra, "w", w);
  dit_attrs_set_int(&ra, "t_dim", m->wan.head_dim - 2 * hw);
  dit_attrs_set_int(&ra, "h_dim", hw);
  dit_attrs_set_int(&ra, "w_dim", hw);
  dit_attrs_set_float(&ra, "theta", 10000.0);
  if (cp > 1) dit_attrs_set_int(&ra, "t0", t0);

  char n[160], k[160];
  for (int64_t i = 0; i < m->wan.layers; i++) {
    dit_graph_set_block(g, (int32_t)i);
#define NAME(s) (snprintf(n, sizeof n, "blocks.%" PRId64 ".%s", i, s), n)
#define KEY(s) (snprintf(k, sizeof k, "blocks.%" PRId64 ".%s", i, s), k)
    wan_mod_t mod = modulation(b, W(b, "%s", KEY("scale_shift_table")), tproj, per_token, NAME("mod"));

    dit_vid_t n1 = sp_gather(b, adaln(b, hs, mod, 0, 1, NAME("norm1")), NAME("norm1.all_tokens"));
    dit_vid_t q = linear_col(b, n1, KEY("attn1.to_q"), dt, NAME("attn1.q"));
    dit_vid_t kk = linear_col(b, n1, KEY("attn1.to_k"), dt, NAME("attn1.k"));
    dit_vid_t v = linear_col(b, n1, KEY("attn1.to_v"), dt, NAME("attn1.v"));
    q = rmsnorm(b, q, KEY("attn1.norm_q.weight"), NAME("attn1.norm_q"));
    kk = rmsnorm(b, kk, KEY("attn1.norm_k.weight"), NAME("attn1.norm_k"));
    q = dit_graph_op(g, DIT_OP_ROPE, &q, 1, &ra, dt, NAME("attn1.rope_q"));
    kk = dit_graph_op(g, DIT_OP_ROPE, &kk, 1, &ra, dt, NAME("attn1.rope_k"));
    dit_vid_t a;
    if (b->cp_mode == DIT_CP_GATHER) {
      kk = cp_collective(b, DIT_OP_ALLGATHER, kk, 0, 0, NAME("attn1.k_all"));
      v = cp_collective(b, DIT_OP_ALLGATHER, v, 0, 0, NAME("attn1.v_all"));
      a = attention(b, q, kk, v, NAME("attn1.sdpa"));
    } else if (b->cp_mode == DIT_CP_ULYSSES) {
      /* Tokens to heads: each rank attends over every token with heads/cp of its heads. */
      const int64_t hl = m->wan.heads / tp;
      q = cp_collective(b, DIT_OP_ALLTOALL, q, hl, 0, NAME("attn1.q_heads"));
      kk = cp_collective(b, DIT_OP_ALLTOALL, kk, hl, 0, NAME("attn1.k_heads"));
      v = cp_collective(b, DIT_OP_ALLTOALL, v, hl, 0, NAME("attn1.v_heads"));
      dit_attrs_t aa = {0};
      dit_attrs_set_int(&aa, "heads", hl / cp);
      dit_attrs_set_float(&aa, "scale", 1.0 / sqrt((double)m->wan.head_dim));
      dit_vid_t ins[3] = {q, kk, v};
      a = dit_graph_op(g, DIT_OP_ATTENTION, ins, 3, &aa, dt, NAME("attn1.sdpa"));
      a = cp_collective(b, DIT_OP_ALLTOALL, a, hl, 1, NAME("attn1.sdpa_tokens"));
    } else if (b->cp_mode == DIT_CP_RING || b->cp_mode == DIT_CP_USP) {
      /* Ring: K/V travel around the group; each hop's partial state (OUT, LSE) over one
       * partition of the keys is merged into the running one by LSE. USP first moves tokens
       * to heads inside each Ulysses subgroup of U ranks, then rings between the subgroups. */
      const int usp = b->cp_mode == DIT_CP_USP, u = usp ? req->ulysses : 1, ring = cp / u;
      const int64_t hl = m->wan.heads / tp;
      if (usp) {
        q = cp_collective_in(b, DIT_OP_ALLTOALL, q, hl, 0, 3, u, NAME("attn1.q_heads"));
        kk = cp_collective_in(b, DIT_OP_ALLTOALL, kk, hl, 0, 3, u, NAME("attn1.k_heads"));
        v = cp_collective_in(b, DIT_OP_ALLTOALL, v, hl, 0, 3, u, NAME("attn1.v_heads"));
      }
      dit_attrs_t aa = {0}, ma = {0};
      dit_attrs_set_int(&aa, "heads", hl / u);
      dit_attrs_set_float(&aa, "scale", 1.0 / sqrt((double)m->wan.head_dim));
      dit_attrs_set_int(&ma, "heads", hl / u);
      const dit_dtype_t dts[2] = {dt, DIT_F32};
      dit_vid_t state[2], ins[3] = {q, kk, v};
      op2(b, DIT_OP_ATTENTION, ins, 3, &aa, dts, NAME("attn1.ring0"), state);
      for (int hop = 1; hop < ring; hop++) {
        char hn[64];
        snprintf(hn, sizeof hn, "attn1.ring%d", hop);
        ins[1] = cp_collective_in(b, DIT_OP_RING_SHIFT, ins[1], 0, 0, usp ? 4 : 1, ring, NAME("attn1.k_ring"));
        ins[2] = cp_collective_in(b, DIT_OP_RING_SHIFT, ins[2], 0, 0, usp ? 4 : 1, ring, NAME("attn1.v_ring"));
        dit_vid_t part[2], mi[4];
        op2(b, DIT_OP_ATTENTION, ins, 3, &aa, dts, NAME(hn), part);
        mi[0] = state[0], mi[1] = state[1], mi[2] = part[0], mi[3] = part[1];
        snprintf(hn, sizeof hn, "attn1.ring_merge%d", hop);
        op2(b, DIT_OP_ATTN_MERGE, mi, 4, &ma, dts, NAME(hn), state);
      }
      a = state[0];
      if (usp) a = cp_collective_in(b, DIT_OP_ALLTOALL, a, hl, 1, 3, u, NAME("attn1.sdpa_tokens"));
    } else {
      a = attention(b, q, kk, v, NAME("attn1.sdpa"));
    }
    a = linear_row(b, a, KEY("attn1.to_out.0"), NAME("attn1.out"));
    hs = gated(b, hs, a, mod, 2, NAME("attn1.residual"));

    dit_vid_t n2 = hs; /* norm2 is an identity without cross_attn_norm */
    if (m->wan.cross_attn_norm) {
      dit_attrs_t la = {0};
      dit_attrs_set_float(&la, "eps", m->wan.eps);
      dit_vid_t ln_in[3] = {hs, W(b, "%s", KEY("norm2.weight")), W(b, "%s", KEY("norm2.bias"))};
      n2 = dit_graph_op(g, DIT_OP_LAYERNORM, ln_in, 3, &la, dt, NAME("norm2"));
    }
    n2 = sp_gather(b, n2, NAME("norm2.all_tokens"));
    dit_vid_t q2 = linear_col(b, n2, KEY("attn2.to_q"), dt, NAME("attn2.q"));
    dit_vid_t k2 = linear_col(b, ctx, KEY("attn2.to_k"), dt, NAME("attn2.k"));
    dit_vid_t v2 = linear_col(b, ctx, KEY("attn2.to_v"), dt, NAME("attn2.v"));
    q2 = rmsnorm(b, q2, KEY("attn2.norm_q.weight"), NAME("attn2.norm_q"));
    k2 = rmsnorm(b, k2, KEY("attn2.norm_k.weight"), NAME("attn2.norm_k"));
    dit_vid_t a2 = attention(b, q2, k2, v2, NAME("attn2.sdpa"));
    if (ictx >= 0) {
      /* The image tokens' own K/V, unrotated, attended by the same queries; heads split like
       * the text's, so under tensor parallelism the sum stays per rank before to_out. */
      dit_vid_t ki = linear_col(b, ictx, KEY("attn2.add_k_proj"), dt, NAME("attn2.k_img"));
      dit_vid_t vi = linear_col(b, ictx, KEY("attn2.add_v_proj"), dt, NAME("attn2.v_img"));
      ki = rmsnorm(b, ki, KEY("attn2.norm_added_k.weight"), NAME("attn2.norm_added_k"));
      dit_vid_t ai = attention(b, q2, ki, vi, NAME("attn2.sdpa_img"));
      dit_vid_t sum_in[2] = {a2, ai};
      a2 = dit_graph_op(g, DIT_OP_ADD, sum_in, 2, NULL, dt, NAME("attn2.text_plus_img"));
    }
    a2 = linear_row(b, a2, KEY("attn2.to_out.0"), NAME("attn2.out"));
    dit_vid_t add_in[2] = {hs, a2};
    hs = dit_graph_op(g, DIT_OP_ADD, add_in, 2, NULL, dt, NAME("attn2.residual"));

    dit_vid_t n3 = sp_gather(b, adaln(b, hs, mod, 3, 4, NAME("norm3")), NAME("norm3.all_tokens"));
    dit_vid_t f1 = linear_col(b, n3, KEY("ffn.net.0.proj"), dt, NAME("ffn.up"));
    f1 = unary(b, DIT_OP_GELU_TANH, f1, dt, NAME("ffn.gelu"));
    f1 = linear_row(b, f1, KEY("ffn.net.2"), NAME("ffn.down"));
    hs = gated(b, hs, f1, mod, 5, NAME("ffn.residual"));
#undef NAME
#undef KEY
  }
  dit_graph_set_block(g, -1);
  wan_mod_t mod = modulation(b, W(b, "scale_shift_table"), temb, per_token, "out.mod");
  dit_vid_t no = adaln(b, hs, mod, 0, 1, "norm_out");
  dit_vid_t y = linear(b, no, "proj_out", dt, "proj_out");
  y = sp_gather(b, y, "proj_out.tp_tokens");
  if (cp > 1) y = cp_collective(b, DIT_OP_ALLGATHER, y, 0, 0, "proj_out.all_tokens");
  dit_attrs_t ua = pa;
  dit_attrs_set_int(&ua, "f", f);
  dit_attrs_set_int(&ua, "h", h);
  dit_attrs_set_int(&ua, "w", w);
  dit_vid_t sample = dit_graph_op(g, DIT_OP_UNPATCHIFY, &y, 1, &ua, dt, "unpatchify");
  dit_graph_mark_output(g, sample, "sample");

  dit_status_t s = b->err ? b->err : dit_graph_status(g);
  if (s) {
    s = dit_status_make(dit_status_code(s), "building the Wan graph: %s", dit_status_message(s));
    dit_status_free(b->err);
    dit_graph_destroy(g);
    return s;
  }
  *out = g;
  return DIT_OK;
}

dit_status_t dit_model_weights_hash(const dit_model_t *m, char out_hex[33]) {
  dit_hasher_t *h;
  DIT_RETURN_IF(dit_hasher_create(&h));
  for (size_t i = 0; i < dit_safetensors_count(m->weights); i++) {
    const dit_st_tensor_t *t = dit_safetensors_at(m->weights, i);
    int32_t meta[2] = {(int32_t)t->dtype, t->rank};
    dit_hasher_update(h, t->name, strlen(t->name) + 1);
    dit_hasher_update(h, meta, sizeof meta);
    dit_hasher_update(h, t->dims, sizeof(int64_t) * (size_t)t->rank);
    dit_hasher_update(h, t->data, t->nbytes);
  }
  dit_hasher_hex(h, out_hex);
  dit_hasher_destroy(h);
  return DIT_OK;
}
