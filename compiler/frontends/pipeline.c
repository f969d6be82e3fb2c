/* Family-independent pipeline reading (pipeline.h, and the dit_pipeline_index_parse,
 * dit_scheduler_config_parse, dit_vae_config_parse and dit_expert_configs_match of
 * frontend.h): model_index.json, scheduler/scheduler_config.json, vae/config.json. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/json.h"
#include "compiler/frontend.h"
#include "compiler/frontends/pipeline.h"

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
  static const char *const pipelines[] = {"WanPipeline", "WanImageToVideoPipeline", "FluxPipeline", "HunyuanVideoPipeline",
                                          "QwenImagePipeline", NULL};
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
    char known[256] = "";
    for (int i = 0; pipelines[i]; i++) snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", pipelines[i]);
    return dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "found %s; supported pipelines: %s", q, known);
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

/* An optional boolean; absent and null leave *out. */
static dit_status_t opt_bool(const dit_json_t *root, const char *key, int *out) {
  if (!has_value(root, key)) return DIT_OK;
  bool b = false;
  DIT_RETURN_IF(dit_json_bool(root, key, &b));
  *out = b;
  return DIT_OK;
}

/* FlowMatchEulerDiscreteScheduler's schedule fields, diffusers' defaults when absent. The
 * sigma spacings and the stochastic step it offers are refused: the sampler does not run them. */
static dit_status_t flow_match_read(const dit_json_t *root, dit_scheduler_defaults_t *out) {
  static const char *const refused[] = {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                                        "stochastic_sampling", NULL};
  static const char *const shift_types[] = {"exponential", "linear", NULL};
  out->base_shift = 0.5;
  out->max_shift = 1.15;
  out->base_image_seq_len = 256;
  out->max_image_seq_len = 4096;
  snprintf(out->time_shift_type, sizeof out->time_shift_type, "exponential");
  for (int i = 0; refused[i]; i++) {
    int on = 0;
    DIT_RETURN_IF(opt_bool(root, refused[i], &on));
    if (on) {
      dit_json_t v = at_member(root, refused[i]);
      return dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "found true; only false is supported");
    }
  }
  DIT_RETURN_IF(opt_bool(root, "use_dynamic_shifting", &out->use_dynamic_shifting));
  DIT_RETURN_IF(opt_bool(root, "invert_sigmas", &out->invert_sigmas));
  if (has_value(root, "base_shift")) DIT_RETURN_IF(dit_json_num(root, "base_shift", -1e3, 1e3, &out->base_shift));
  if (has_value(root, "max_shift")) DIT_RETURN_IF(dit_json_num(root, "max_shift", -1e3, 1e3, &out->max_shift));
  if (has_value(root, "base_image_seq_len"))
    DIT_RETURN_IF(dit_json_int(root, "base_image_seq_len", 1, INT64_C(1) << 40, &out->base_image_seq_len));
  if (has_value(root, "max_image_seq_len"))
    DIT_RETURN_IF(dit_json_int(root, "max_image_seq_len", 1, INT64_C(1) << 40, &out->max_image_seq_len));
  if (out->max_image_seq_len == out->base_image_seq_len) {
    /* calculate_shift divides by their difference. */
    dit_json_t v = at_member(root, "max_image_seq_len");
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT,
                          "found %" PRId64 ", equal to base_image_seq_len; expected a different value", out->max_image_seq_len);
  }
  if (has_value(root, "time_shift_type")) {
    int k = 0;
    DIT_RETURN_IF(dit_json_enum(root, "time_shift_type", shift_types, &k));
    snprintf(out->time_shift_type, sizeof out->time_shift_type, "%s", shift_types[k]);
  }
  if (has_value(root, "shift_terminal")) {
    /* diffusers stretches only for a truthy value: 0 is "none" as null is. */
    dit_json_t v = at_member(root, "shift_terminal");
    double t = 0;
    DIT_RETURN_IF(dit_json_as_num(&v, -1e300, 1e300, &t));
    char f[40];
    dit_json_fmt_num(t, f);
    if (!(t >= 0 && t < 1))
      return dit_json_error(&v, DIT_CODE_OUT_OF_RANGE, "expected null or a number in [0, 1), found %s", f);
    out->shift_terminal = t;
  }
  return DIT_OK;
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
  if (!s && euler) s = flow_match_read(&root, out);
  if (!s) out->present = 1;
  dit_json_doc_free(doc);
  return s;
}

/* The VAE classes this build reads: their config keys for the compression factors and latent
 * channels, and diffusers' defaults for each. */
static const struct vae_class {
  const char *name, *spatial_key, *temporal_key, *z_key;
  int64_t spatial, temporal, z;
  /* Classes without a spatial factor in their config: the pipelines' 2 ** (len(list) + offset). */
  const char *spatial_list;
  int list_offset;
} kVaeClasses[] = {
    /* Wan2.2's VAE sets 16 and 48. */
    {"AutoencoderKLWan", "scale_factor_spatial", "scale_factor_temporal", "z_dim", 8, 4, 16, NULL, 0},
    {"AutoencoderKLHunyuanVideo", "spatial_compression_ratio", "temporal_compression_ratio", "latent_channels", 8, 4, 16, NULL, 0},
    {"AutoencoderKLQwenImage", NULL, NULL, "z_dim", 8, 4, 16, "temperal_downsample", 0},
    /* FLUX.1's: FluxPipeline's vae_scale_factor from block_out_channels. */
    {"AutoencoderKL", NULL, NULL, "latent_channels", 8, 1, 4, "block_out_channels", -1},
};

dit_status_t dit_vae_config_parse(const char *text, size_t len, const char *what, dit_vae_factors_t *out) {
  memset(out, 0, sizeof *out);
  dit_json_doc_t *doc = NULL;
  dit_json_t root, v;
  DIT_RETURN_IF(dit_json_parse(text, len, what, &doc));
  dit_status_t s = dit_json_root(doc, &root);
  char cls[64] = "";
  if (!s) s = dit_json_str_copy(&root, "_class_name", cls, sizeof cls, false);
  const size_t n = sizeof kVaeClasses / sizeof kVaeClasses[0];
  size_t k = 0;
  while (k < n && strcmp(cls, kVaeClasses[k].name)) k++;
  if (!s && k == n) {
    char q[96];
    dit_json_quote(cls, q);
    v = at_member(&root, "_class_name");
    char known[192] = "";
    for (size_t i = 0; i < n; i++) snprintf(known + strlen(known), sizeof known - strlen(known), "%s\"%s\"", i ? ", " : "", kVaeClasses[i].name);
    s = dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "found %s; expected one of %s", q, known);
  }
  if (s) {
    dit_json_doc_free(doc);
    return s;
  }
  const struct vae_class *c = &kVaeClasses[k];
  int64_t sp = c->spatial, tm = c->temporal, z = c->z;
  if (!s && c->spatial_key && has_value(&root, c->spatial_key)) s = dit_json_int(&root, c->spatial_key, 1, 64, &sp);
  if (!s && c->temporal_key && has_value(&root, c->temporal_key)) s = dit_json_int(&root, c->temporal_key, 1, 64, &tm);
  if (!s && c->spatial_list && has_value(&root, c->spatial_list)) {
    size_t nd = 0;
    s = dit_json_array(&root, c->spatial_list, 7, &v, &nd);
    if (!s && (int)nd + c->list_offset < 0)
      s = dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected at least %d entries, found %zu", -c->list_offset, nd);
    if (!s) sp = INT64_C(1) << ((int)nd + c->list_offset);
  }
  if (!s && has_value(&root, c->z_key)) s = dit_json_int(&root, c->z_key, 1, 4096, &z);
  if (!s) {
    out->spatial = (int)sp;
    out->temporal = (int)tm;
    out->z_dim = z;
    snprintf(out->source, sizeof out->source, "vae/config.json");
  }
  dit_json_doc_free(doc);
  return s;
}

/* ---- pipeline directories ---- */

#define CONFIG_MAX_BYTES (1 << 20)

dit_status_t dit_pipeline_file_read(const char *path, char **text, size_t *len) {
  return dit_file_read(path, CONFIG_MAX_BYTES, text, len);
}

dit_status_t dit_pipeline_dir_read(dit_model_t *m, const char *dir) {
  char path[4200], *text = NULL;
  size_t len = 0;
  DIT_RETURN_IF(dit_path_join(path, sizeof path, dir, "model_index.json"));
  DIT_RETURN_IF(dit_pipeline_file_read(path, &text, &len));
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
    s = dit_pipeline_file_read(sub, &text, &len);
    if (!s) s = dit_scheduler_config_parse(text, len, sub, &m->pipeline.scheduler);
    free(text);
    text = NULL;
  }
  if (!s) s = dit_path_join(sub, sizeof sub, dir, "vae/config.json");
  if (!s && dit_path_exists(sub)) {
    s = dit_pipeline_file_read(sub, &text, &len);
    if (!s) s = dit_vae_config_parse(text, len, sub, &m->pipeline.vae);
    free(text);
  }
  return s;
}

dit_status_t dit_pipeline_identity_spatial(const dit_model_t *m, cJSON **out) {
  *out = NULL;
  const dit_pipeline_t *p = &m->pipeline;
  cJSON *o = cJSON_CreateObject();
  if (!o) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  int ok = cJSON_AddStringToObject(o, "class", p->index.class_name) != NULL;
  cJSON *vae = ok ? cJSON_AddObjectToObject(o, "vae") : NULL;
  ok = vae && cJSON_AddNumberToObject(vae, "scale_factor_spatial", p->vae.spatial);
  if (!ok) {
    cJSON_Delete(o);
    return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  }
  *out = o;
  return DIT_OK;
}

dit_status_t dit_flow_schedule_from(const dit_scheduler_defaults_t *sc, int64_t image_seq_len, int sigmas_to_zero,
                                    dit_manifest_generate_t *g) {
  if (sc->invert_sigmas)
    return DIT_ERR(UNIMPLEMENTED, "scheduler/scheduler_config.json: field 'invert_sigmas' = true: this pipeline's sampling does not "
                   "invert sigmas; expected false");
  g->schedule.num_train_timesteps = sc->num_train_timesteps;
  g->schedule.shift = sc->shift;
  g->schedule.sigmas_to_zero = sigmas_to_zero;
  g->schedule.dynamic = sc->use_dynamic_shifting;
  if (sc->use_dynamic_shifting) {
    g->schedule.base_shift = sc->base_shift;
    g->schedule.max_shift = sc->max_shift;
    g->schedule.base_image_seq_len = sc->base_image_seq_len;
    g->schedule.max_image_seq_len = sc->max_image_seq_len;
    g->schedule.image_seq_len = image_seq_len;
    g->schedule.time_shift_linear = !strcmp(sc->time_shift_type, "linear");
  }
  g->schedule.has_shift_terminal = sc->shift_terminal > 0;
  g->schedule.shift_terminal = sc->shift_terminal;
  return DIT_OK;
}
