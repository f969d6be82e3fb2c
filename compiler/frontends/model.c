/* The family-independent model loader (frontend.h's dit_model_* entry points): config.json's
 * _class_name picks the family (family.h), a pipeline directory is read through pipeline.c,
 * and every step a family defines is dispatched to it. Also the config reader and the
 * checkpoint check the families share. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/identity.h"
#include "base/fileio.h"
#include "compiler/frontends/family.h"
#include "compiler/frontends/pipeline.h"

static const dit_family_t *const kFamilies[] = {&dit_family_wan, &dit_family_flux, &dit_family_hunyuan, &dit_family_qwen,
                                                 &dit_family_umt5, &dit_family_t5, &dit_family_wan_vae, &dit_family_clip_text,
                                                 &dit_family_kl_vae, &dit_family_clip_vision, &dit_family_qwen25vl_text,
                                                 &dit_family_llama_text, &dit_family_hunyuan_vae};
#define N_FAMILIES (sizeof kFamilies / sizeof kFamilies[0])

/* ---- shared hooks of the stage families ---- */

dit_status_t dit_family_one_variant(dit_model_t *m, const char *want, const char *vae_what) {
  (void)vae_what;
  if (want && strcmp(want, m->fam->name))
    return DIT_ERR(INVALID_ARGUMENT, "--variant %s: %s has one variant (%s)", want, m->model_class, m->fam->name);
  snprintf(m->variant, sizeof m->variant, "%s", m->fam->name);
  return DIT_OK;
}

/* Only tokens: the pixel flags mean nothing to a text encoder and are refused by name. */
dit_status_t dit_family_text_shape(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out) {
  static const char *const flag[] = {"--frames", "--height", "--width"};
  const int64_t v[] = {r->frames, r->height, r->width};
  for (int i = 0; i < 3; i++)
    if (v[i] >= 0)
      return DIT_ERR(INVALID_ARGUMENT, "%s %" PRId64 ": %s is a text encoder: its shape is --batch and --text-len alone", flag[i], v[i],
                     m->model_class);
  if (r->image_len)
    return DIT_ERR(INVALID_ARGUMENT, "--image-len %" PRId64 ": %s takes no image tokens", r->image_len, m->model_class);
  memset(out, 0, sizeof *out);
  return DIT_OK;
}

/* ---- config readers ---- */

static dit_status_t field_check(const dit_config_field_t *f, const dit_json_t *v) {
  if (cJSON_IsNull(v->v)) {
    if (f->nullable) return DIT_OK;
    return dit_json_error(v, DIT_CODE_INVALID_ARGUMENT, "expected a value, found null");
  }
  int64_t i, p[8];
  double d;
  bool b;
  const char *s;
  size_t n = 0;
  switch (f->kind) {
    case DIT_CF_INT: return dit_json_as_int(v, f->lo, f->hi, &i);
    case DIT_CF_BOOL: return dit_json_as_bool(v, &b);
    case DIT_CF_FLOAT: return dit_json_as_num(v, (double)f->lo, (double)f->hi, &d);
    case DIT_CF_STR: return dit_json_as_str(v, (size_t)f->hi, true, &s);
    case DIT_CF_INTS:
      DIT_RETURN_IF(dit_json_as_int_array(v, (size_t)f->count, f->lo, f->hi, p, &n));
      if (n != (size_t)f->count)
        return dit_json_error(v, DIT_CODE_INVALID_ARGUMENT, "expected %d integers%s%s, found %zu", f->count, f->form ? " " : "",
                              f->form ? f->form : "", n);
      return DIT_OK;
    case DIT_CF_BOOLS:
    case DIT_CF_FLOATS: {
      DIT_RETURN_IF(dit_json_expect_array(v, (size_t)f->count, &n));
      if (f->kind == DIT_CF_BOOLS && n != (size_t)f->count)
        return dit_json_error(v, DIT_CODE_INVALID_ARGUMENT, "expected %d booleans%s%s, found %zu", f->count, f->form ? " " : "",
                              f->form ? f->form : "", n);
      dit_json_iter_t it;
      dit_json_t e;
      dit_json_iter_init(v, &it);
      while (dit_json_iter_next(&it, &e))
        DIT_RETURN_IF(f->kind == DIT_CF_BOOLS ? dit_json_as_bool(&e, &b) : dit_json_as_num(&e, (double)f->lo, (double)f->hi, &d));
      return DIT_OK;
    }
  }
  return DIT_OK;
}

dit_status_t dit_config_read_ignoring(const dit_config_field_t *fields, size_t n_fields, const char *defaults,
                                      const char *class_name, const char *const *ignored, const dit_json_t *raw, cJSON **out) {
  /* The reader refuses keys it does not know: read a copy without the ignored ones. */
  cJSON *copy = cJSON_Duplicate(raw->v, 1);
  if (!copy) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  for (int i = 0; ignored[i]; i++) cJSON_DeleteItemFromObjectCaseSensitive(copy, ignored[i]);
  dit_json_t view = *raw;
  view.v = copy;
  dit_status_t s = dit_config_read(fields, n_fields, defaults, class_name, &view, out);
  cJSON_Delete(copy);
  return s;
}

dit_status_t dit_config_read(const dit_config_field_t *fields, size_t n_fields, const char *defaults, const char *class_name,
                             const dit_json_t *raw, cJSON **out) {
  *out = NULL;
  /* The defaults go through the same reader as any text: no second parser for one constant. */
  dit_json_doc_t *doc = NULL;
  DIT_RETURN_IF_ERROR(dit_json_parse(defaults, strlen(defaults), "built-in defaults", &doc), "internal");
  cJSON *cfg = dit_json_doc_release(doc);
  dit_json_doc_free(doc);
  dit_json_iter_t it;
  dit_json_t v;
  dit_json_iter_init(raw, &it);
  dit_status_t s = DIT_OK;
  while (!s && dit_json_iter_next(&it, &v)) {
    const char *key = v.v->string;
    if (key[0] == '_') continue; /* diffusers' bookkeeping: class name, version, source path */
    size_t f = 0;
    while (f < n_fields && strcmp(fields[f].key, key)) f++;
    if (f == n_fields) {
      s = dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "not a %s option this build knows", class_name);
      break;
    }
    s = field_check(&fields[f], &v);
    cJSON *copy = s ? NULL : cJSON_Duplicate(v.v, 1);
    if (!s && (!copy || !cJSON_ReplaceItemInObjectCaseSensitive(cfg, key, copy))) {
      cJSON_Delete(copy);
      s = DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  if (s) {
    cJSON_Delete(cfg);
    return s;
  }
  *out = cfg;
  return DIT_OK;
}

dit_status_t dit_config_rope_axes(const cJSON *cfg, const char *key, int64_t head_dim, const char *what, int64_t axes[3]) {
  const cJSON *ax = cJSON_GetObjectItemCaseSensitive(cfg, key);
  for (int i = 0; i < 3; i++) axes[i] = (int64_t)cJSON_GetArrayItem(ax, i)->valuedouble;
  if (axes[0] % 2 || axes[1] % 2 || axes[2] % 2 || axes[0] + axes[1] + axes[2] != head_dim)
    return DIT_ERR(INVALID_ARGUMENT,
                   "%s: field '%s' = [%" PRId64 ", %" PRId64 ", %" PRId64 "]: expected even parts summing to "
                   "attention_head_dim = %" PRId64,
                   what, key, axes[0], axes[1], axes[2], head_dim);
  return DIT_OK;
}

int64_t dit_config_int(const cJSON *cfg, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
}

double dit_config_num(const cJSON *cfg, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

int dit_config_bool(const cJSON *cfg, const char *key) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, key)); }

/* The family of a config.json and its parse. */
dit_status_t dit_model_config_parse(const char *text, size_t len, const char *what, dit_model_t *m) {
  dit_json_doc_t *doc = NULL;
  dit_json_t root, cls;
  const char *name = NULL;
  dit_status_t s = dit_json_parse(text, len, what, &doc);
  if (!s) s = dit_json_root(doc, &root);
  /* diffusers names the class in _class_name; transformers (a pipeline's text encoder) in
   * architectures, a list of one class. */
  const int transformers = !s && !dit_json_has(&root, "_class_name") && dit_json_has(&root, "architectures");
  if (!s && !transformers && !dit_json_has(&root, "_class_name")) {
    cls = root;
    dit_json_path_key(cls.path, root.path, "_class_name");
    s = dit_json_error(&cls, DIT_CODE_NOT_FOUND, "missing: cannot tell the model family");
  }
  if (!s && transformers) {
    dit_json_t arch;
    dit_json_iter_t it;
    size_t n = 0;
    s = dit_json_array(&root, "architectures", 16, &arch, &n);
    if (!s && n != 1) s = dit_json_error(&arch, DIT_CODE_INVALID_ARGUMENT, "expected one class name, found %zu", n);
    if (!s) {
      dit_json_iter_init(&arch, &it);
      dit_json_iter_next(&it, &cls);
    }
  } else if (!s) {
    s = dit_json_get(&root, "_class_name", &cls);
  }
  if (!s) s = dit_json_as_str(&cls, sizeof m->model_class - 1, false, &name);
  if (!s) {
    snprintf(m->model_class, sizeof m->model_class, "%s", name);
    m->fam = NULL;
    for (size_t i = 0; i < N_FAMILIES && !m->fam; i++) {
      if (!strcmp(name, kFamilies[i]->model_class)) m->fam = kFamilies[i];
      for (const char *const *o = kFamilies[i]->other_classes; o && *o && !m->fam; o++)
        if (!strcmp(name, *o)) m->fam = kFamilies[i];
    }
    if (m->fam) {
      snprintf(m->family, sizeof m->family, "%s", m->fam->name);
      s = m->fam->parse_config(m, &root);
    } else {
      char q[96], known[512] = "";
      dit_json_quote(name, q);
      for (size_t i = 0; i < N_FAMILIES; i++) {
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", kFamilies[i]->model_class);
        for (const char *const *o = kFamilies[i]->other_classes; o && *o; o++)
          snprintf(known + strlen(known), sizeof known - strlen(known), ", %s", *o);
      }
      s = dit_json_error(&cls, DIT_CODE_UNIMPLEMENTED, "found %s; supported families: %s", q, known);
    }
  }
  dit_json_doc_free(doc);
  return s;
}

/* Refuses two experts whose normalized configs differ in any field. */
dit_status_t dit_expert_configs_match(const cJSON *a, const char *a_what, const cJSON *b, const char *b_what) {
  const cJSON *x;
  cJSON_ArrayForEach(x, a) {
    if (x->string[0] == '_') continue;
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
    if (y && cJSON_Compare(x, y, true)) continue;
    /* Both are normalized configs of accepted values: short to print. */
    char *tx = cJSON_PrintUnformatted(x), *ty = y ? cJSON_PrintUnformatted(y) : NULL;
    dit_status_t s = DIT_ERR(INVALID_ARGUMENT,
                             "%s: field '%s' = %.64s, but %s has %.64s: a pipeline's experts must share the architecture",
                             b_what, x->string, ty ? ty : "(absent)", a_what, tx ? tx : "(absent)");
    free(tx);
    free(ty);
    return s;
  }
  return DIT_OK;
}

/* ---- checkpoint checks ---- */

typedef struct expected {
  char name[128];
  int rank;
  int64_t dims[5];
  char why[64]; /* the config field that calls for an optional tensor; "" for the others */
} expected_t;

struct dit_expected {
  expected_t *items;
  size_t n, cap;
  int oom;
  char why[64]; /* given to the tensors expected from here on */
};

dit_status_t dit_expected_create(dit_expected_t **out) {
  *out = calloc(1, sizeof **out);
  return *out ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
}

void dit_expected_destroy(dit_expected_t *l) {
  if (!l) return;
  free(l->items);
  free(l);
}

void dit_expected_why(dit_expected_t *l, const char *fmt, ...) {
  l->why[0] = 0;
  if (!fmt) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->why, sizeof l->why, fmt, ap);
  va_end(ap);
}

static void vadd(dit_expected_t *l, int rank, const int64_t *dims, const char *fmt, va_list ap) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 256;
    expected_t *n = realloc(l->items, cap * sizeof *n);
    if (!n) {
      l->oom = 1;
      return;
    }
    l->items = n;
    l->cap = cap;
  }
  expected_t *e = &l->items[l->n++];
  vsnprintf(e->name, sizeof e->name, fmt, ap);
  e->rank = rank;
  for (int i = 0; i < rank; i++) e->dims[i] = dims[i];
  memcpy(e->why, l->why, sizeof e->why);
}

void dit_expected_add(dit_expected_t *l, int rank, const int64_t *dims, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vadd(l, rank, dims, fmt, ap);
  va_end(ap);
}

void dit_expected_linear(dit_expected_t *l, int64_t out, int64_t in, int bias, const char *fmt, ...) {
  char prefix[112];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  const int64_t w[2] = {out, in}, b[1] = {out};
  dit_expected_add(l, 2, w, "%s.weight", prefix);
  if (bias) dit_expected_add(l, 1, b, "%s.bias", prefix);
}

void dit_expected_embedder(dit_expected_t *l, int64_t D, int64_t in, const char *prefix) {
  dit_expected_linear(l, D, in, 1, "%s.linear_1", prefix);
  dit_expected_linear(l, D, D, 1, "%s.linear_2", prefix);
}

void dit_expected_flux_blocks(dit_expected_t *l, int64_t layers, int64_t single_layers, int64_t D, int64_t M, int64_t head_dim) {
  const int64_t hd[1] = {head_dim};
  for (int64_t i = 0; i < layers; i++) {
    static const char *const proj[] = {"to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"};
    static const char *const norms[] = {"norm_q", "norm_k", "norm_added_q", "norm_added_k"};
    dit_expected_linear(l, 6 * D, D, 1, "transformer_blocks.%" PRId64 ".norm1.linear", i);
    dit_expected_linear(l, 6 * D, D, 1, "transformer_blocks.%" PRId64 ".norm1_context.linear", i);
    for (int k = 0; k < 8; k++) dit_expected_linear(l, D, D, 1, "transformer_blocks.%" PRId64 ".attn.%s", i, proj[k]);
    for (int k = 0; k < 4; k++) dit_expected_add(l, 1, hd, "transformer_blocks.%" PRId64 ".attn.%s.weight", i, norms[k]);
    dit_expected_linear(l, M, D, 1, "transformer_blocks.%" PRId64 ".ff.net.0.proj", i);
    dit_expected_linear(l, D, M, 1, "transformer_blocks.%" PRId64 ".ff.net.2", i);
    dit_expected_linear(l, M, D, 1, "transformer_blocks.%" PRId64 ".ff_context.net.0.proj", i);
    dit_expected_linear(l, D, M, 1, "transformer_blocks.%" PRId64 ".ff_context.net.2", i);
  }
  for (int64_t i = 0; i < single_layers; i++) {
    dit_expected_linear(l, 3 * D, D, 1, "single_transformer_blocks.%" PRId64 ".norm.linear", i);
    dit_expected_linear(l, M, D, 1, "single_transformer_blocks.%" PRId64 ".proj_mlp", i);
    dit_expected_linear(l, D, D + M, 1, "single_transformer_blocks.%" PRId64 ".proj_out", i);
    static const char *const proj[] = {"to_q", "to_k", "to_v"}, *const norms[] = {"norm_q", "norm_k"};
    for (int k = 0; k < 3; k++) dit_expected_linear(l, D, D, 1, "single_transformer_blocks.%" PRId64 ".attn.%s", i, proj[k]);
    for (int k = 0; k < 2; k++) dit_expected_add(l, 1, hd, "single_transformer_blocks.%" PRId64 ".attn.%s.weight", i, norms[k]);
  }
}

static int cmp_expected(const void *a, const void *b) {
  return strcmp(((const expected_t *)a)->name, ((const expected_t *)b)->name);
}

static int is_ignored(const char *name, const char *const *ignored) {
  for (size_t i = 0; ignored && ignored[i]; i++)
    if (strstr(name, ignored[i])) return 1;
  return 0;
}

dit_status_t dit_expected_check(dit_expected_t *l, const dit_safetensors_t *weights, const char *dir,
                                const char *const *ignored) {
  if (l->oom || l->n == 0) return DIT_ERR(RESOURCE_EXHAUSTED, "out of memory");
  qsort(l->items, l->n, sizeof *l->items, cmp_expected);
  for (size_t i = 0; i < l->n; i++) {
    const expected_t *e = &l->items[i];
    const dit_st_tensor_t *t = dit_safetensors_find(weights, e->name);
    if (!t)
      return DIT_ERR(NOT_FOUND, "%s: checkpoint has no tensor '%s', which this config requires%s%s%s", dir, e->name,
                     e->why[0] ? " (" : "", e->why, e->why[0] ? ")" : "");
    if (t->dtype != DIT_F32 && t->dtype != DIT_BF16 && t->dtype != DIT_F16)
      return DIT_ERR(INVALID_ARGUMENT, "%s: tensor '%s' has dtype %s, expected a float type", t->file, e->name,
                     dit_st_dtype_name(t->dtype));
    int ok = t->rank == e->rank;
    for (int d = 0; ok && d < e->rank; d++) ok = t->dims[d] == e->dims[d];
    if (!ok) {
      char want[96] = "", got[96] = "";
      for (int d = 0; d < e->rank; d++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%" PRId64, d ? "," : "", e->dims[d]);
      for (int d = 0; d < t->rank; d++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%" PRId64, d ? "," : "", t->dims[d]);
      return DIT_ERR(INVALID_ARGUMENT, "%s: tensor '%s': shape [%s], expected [%s] from config.json", t->file, e->name, got, want);
    }
  }
  /* Both lists are sorted by name: walk them together to find tensors the config does not use. */
  for (size_t i = 0, j = 0; i < dit_safetensors_count(weights); i++) {
    const char *name = dit_safetensors_at(weights, i)->name;
    while (j < l->n && strcmp(l->items[j].name, name) < 0) j++;
    if ((j < l->n && !strcmp(l->items[j].name, name)) || is_ignored(name, ignored)) continue;
    return DIT_ERR(INVALID_ARGUMENT, "%s: unexpected tensor '%s' (not part of this config: a different architecture or variant?)",
                   dit_safetensors_at(weights, i)->file, name);
  }
  return DIT_OK;
}

/* ---- loading ---- */

/* transformer_2/: its config must equal transformer/'s but for the weights, and its weights
 * must fit it. */
/* One transformer folder's checkpoint (dir) against m's config, as its family lists it. */
static dit_status_t check_weights(const dit_model_t *m, const dit_safetensors_t *weights, const char *dir) {
  dit_expected_t *l;
  DIT_RETURN_IF(dit_expected_create(&l));
  m->fam->expected(m, l);
  dit_status_t s = dit_expected_check(l, weights, dir, m->fam->ignored);
  dit_expected_destroy(l);
  return s;
}

static dit_status_t load_second_expert(dit_model_t *m, const char *index_path) {
  dit_expert_t *e = &m->pipeline.experts[1];
  char path[4200], first[4200], *text = NULL;
  size_t len = 0;
  DIT_RETURN_IF(dit_path_join(path, sizeof path, e->dir, "config.json"));
  DIT_RETURN_IF(dit_path_join(first, sizeof first, m->model_dir, "config.json"));
  DIT_RETURN_IF(dit_pipeline_file_read(path, &text, &len));
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
  if (!s) s = check_weights(m, e->weights, e->dir);
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
    s = dit_pipeline_dir_read(m, model_dir);
    if (!s) s = dit_path_join(path, sizeof path, m->model_dir, "config.json");
  }
  if (!s) s = dit_pipeline_file_read(path, &text, &len);
  if (!s) s = dit_model_config_parse(text, len, path, m);
  if (!s && m->pipeline.index.transformer_class[0] && strcmp(m->pipeline.index.transformer_class, m->model_class))
    s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'transformer': class \"%s\", but %s says \"%s\"", index,
                m->pipeline.index.transformer_class, path, m->model_class);
  if (!s) s = dit_safetensors_open(m->model_dir, &m->weights);
  if (!s) s = check_weights(m, m->weights, m->model_dir);
  if (!s && m->pipeline.experts[1].dir[0]) s = load_second_expert(m, index);
  if (!s) s = m->fam->pick_variant(m, variant, vae);
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
  /* Two experts compile when their configs agree (dit_model_load checked it) and the pipeline
   * says where to switch. */
  if (p->n_experts > 1 && !p->index.has_boundary_ratio)
    return DIT_ERR(INVALID_ARGUMENT, "%s/model_index.json: field 'boundary_ratio': missing: two experts need the ratio at which "
                   "transformer_2 takes over", p->dir);
  return m->fam->check_compilable ? m->fam->check_compilable(m) : DIT_OK;
}

dit_status_t dit_model_pipeline_identity(const dit_model_t *m, cJSON **out) {
  *out = NULL;
  return m->fam->pipeline_identity ? m->fam->pipeline_identity(m, out) : DIT_OK;
}

dit_status_t dit_model_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, dit_latent_shape_t *out) {
  if (r->batch < 1 || r->batch > 4096) return DIT_ERR(INVALID_ARGUMENT, "--batch %" PRId64 ": expected 1..4096", r->batch);
  if (r->text_len < 1 || r->text_len > 65536) return DIT_ERR(INVALID_ARGUMENT, "--text-len %" PRId64 ": expected 1..65536", r->text_len);
  /* Every family but an encoder's (text, or images of its config's size) maps pixels to latents
   * (-1: the flag left out). */
  const int sized = !m->fam->text_encoder && !m->fam->image_encoder;
  if (sized && r->height < 0) return DIT_ERR(INVALID_ARGUMENT, "compile needs --height");
  if (sized && r->width < 0) return DIT_ERR(INVALID_ARGUMENT, "compile needs --width");
  /* Fields a family does not set (a decoder tail's windows, image tokens) are zero, not the caller's stack. */
  memset(out, 0, sizeof *out);
  return m->fam->latent_shape(m, r, out);
}

dit_status_t dit_model_build_graph(const dit_model_t *m, const dit_shape_request_t *req, dit_graph_t **out) {
  *out = NULL;
  if (req->dtype != DIT_F32 && req->dtype != DIT_BF16)
    return DIT_ERR(UNIMPLEMENTED, "--dtype %s: supported: f32, bf16", dit_dtype_name(req->dtype));
  return m->fam->build_graph(m, req, out);
}

dit_status_t dit_model_generate_contract(const dit_model_t *m, const dit_latent_shape_t *ls, dit_manifest_generate_t *out) {
  memset(out, 0, sizeof *out);
  return m->fam->generate ? m->fam->generate(m, ls, out) : DIT_OK;
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

void dit_image_vae_factors(dit_model_t *m) {
  dit_vae_factors_t *vae = &m->pipeline.vae;
  if (!vae->source[0]) {
    vae->spatial = 8;
    snprintf(vae->source, sizeof vae->source, "variant");
  }
  vae->temporal = 1;
  m->vae_spatial = vae->spatial;
  m->vae_temporal = 1;
}

dit_status_t dit_packed_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, int64_t in_channels,
                                     dit_latent_shape_t *out) {
  const int64_t q = 2 * m->vae_spatial; /* a packed token covers 2x2 latent pixels */
  if (r->frames > 1 || r->frames == 0)
    return DIT_ERR(INVALID_ARGUMENT, "--frames %" PRId64 ": %s makes images: leave --frames out", r->frames, m->model_class);
  if (r->height < 1 || r->height % q)
    return DIT_ERR(INVALID_ARGUMENT, "--height %" PRId64 ": must be a positive multiple of %" PRId64 " (VAE %d x 2x2 packing)",
                   r->height, q, m->vae_spatial);
  if (r->width < 1 || r->width % q)
    return DIT_ERR(INVALID_ARGUMENT, "--width %" PRId64 ": must be a positive multiple of %" PRId64 " (VAE %d x 2x2 packing)",
                   r->width, q, m->vae_spatial);
  if (r->image_len)
    return DIT_ERR(INVALID_ARGUMENT, "--image-len %" PRId64 ": %s takes no image tokens", r->image_len, m->model_class);
  out->channels = in_channels / 4;
  out->frames = 1;
  out->height = r->height / m->vae_spatial;
  out->width = r->width / m->vae_spatial;
  out->tokens = (out->height / 2) * (out->width / 2);
  out->image_len = 0;
  return DIT_OK;
}

dit_status_t dit_image_vae_latent_shape(const dit_model_t *m, const dit_shape_request_t *r, int64_t z_dim, dit_latent_shape_t *out) {
  if (r->vae_chunk > 0)
    return DIT_ERR(INVALID_ARGUMENT, "--vae-chunk %" PRId64 ": %s decodes an image, it has no frames to decode in chunks", r->vae_chunk,
                   m->model_class);
  if (r->vae_first) return DIT_ERR(INVALID_ARGUMENT, "--vae-first: %s decodes an image, it has no first frame to decode alone", m->model_class);
  if (r->vae_part != DIT_VAE_WHOLE || r->vae_tiles > 0)
    return DIT_ERR(UNIMPLEMENTED, "%s: %s decodes the whole image in one graph (no split decoder, no windows)",
                   r->vae_part != DIT_VAE_WHOLE ? "--vae-part" : "--vae-tiles", m->model_class);
  if (r->tp > 1 || r->cp > 1 || r->sp)
    return DIT_ERR(UNIMPLEMENTED, "%s: the VAE decoder stage runs on one rank (no --tp, --cp or --sp)", m->model_class);
  memset(out, 0, sizeof *out);
  return dit_packed_latent_shape(m, r, 4 * z_dim, out);
}

dit_status_t dit_flow_generate(const dit_model_t *m, const char *pipeline, int default_steps, double timestep_divisor,
                               const dit_generate_condition_t *cond, int n_cond, dit_manifest_generate_t *g) {
  const dit_scheduler_defaults_t *sc = &m->pipeline.scheduler;
  if (!sc->present) return DIT_OK; /* the schedule comes only from a pipeline's scheduler config */
  if (strcmp(sc->class_name, "FlowMatchEulerDiscreteScheduler"))
    return DIT_ERR(UNIMPLEMENTED, "%s/scheduler/scheduler_config.json: class \"%s\": %s samples with FlowMatchEulerDiscreteScheduler",
                   m->pipeline.dir, sc->class_name, pipeline);
  if (n_cond > DIT_GEN_MAX_CONDITIONS)
    return DIT_ERR(INTERNAL, "%s: %d generate conditions, at most %d fit the manifest", pipeline, n_cond, DIT_GEN_MAX_CONDITIONS);
  g->present = 1;
  snprintf(g->latents, sizeof g->latents, "hidden_states");
  g->default_steps = default_steps;
  snprintf(g->timestep_input, sizeof g->timestep_input, "timestep");
  g->timestep_divisor = timestep_divisor;
  g->n_conditions = (size_t)n_cond;
  for (int i = 0; i < n_cond; i++) {
    snprintf(g->conditions[i].argument, sizeof g->conditions[i].argument, "%s", cond[i].argument);
    snprintf(g->conditions[i].input, sizeof g->conditions[i].input, "%s", cond[i].input);
  }
  return DIT_OK;
}

dit_status_t dit_joint_parallel_check(const dit_model_t *m, const dit_shape_request_t *req, int64_t heads, int64_t tokens) {
  const int tp = req->tp > 1 ? req->tp : 1, cp = req->cp > 1 ? req->cp : 1;
  if (req->sp) return DIT_ERR(UNIMPLEMENTED, "--sp: %s does not run sequence parallelism yet (tp, cp and cfg lanes do)", m->model_class);
  if (req->tp_rank < 0 || req->tp_rank >= tp)
    return DIT_ERR(INVALID_ARGUMENT, "tensor-parallel rank %d outside 0..%d", req->tp_rank, tp - 1);
  if (heads % tp)
    return DIT_ERR(INVALID_ARGUMENT, "--tp %d: config.json num_attention_heads = %" PRId64 " is not divisible by %d", tp, heads, tp);
  if (cp == 1) return DIT_OK;
  if (req->cp_rank < 0 || req->cp_rank >= cp) return DIT_ERR(INVALID_ARGUMENT, "context-parallel rank %d outside 0..%d", req->cp_rank, cp - 1);
  if (req->cp_mode != DIT_CP_GATHER && req->cp_mode != DIT_CP_ULYSSES && req->cp_mode != DIT_CP_RING)
    return DIT_ERR(UNIMPLEMENTED, "--cp %d: %s's joint attention runs gather, ulysses and ring", cp, m->model_class);
  if (tokens % cp)
    return DIT_ERR(INVALID_ARGUMENT, "--cp %d: the shape has %" PRId64 " image tokens, which do not split into %d equal parts", cp,
                   tokens, cp);
  if (req->cp_mode == DIT_CP_ULYSSES && (heads / tp) % cp)
    return DIT_ERR(INVALID_ARGUMENT, "--cp %d --cp-mode ulysses: %" PRId64 " heads per tensor-parallel rank are not divisible by %d", cp,
                   heads / tp, cp);
  return DIT_OK;
}

dit_status_t dit_joint_builder(const dit_model_t *m, const dit_shape_request_t *req, int64_t heads, int64_t head_dim, double eps,
                               dit_graph_t **g, dit_blocks_t **b) {
  *g = NULL;
  *b = NULL;
  const int cp = req->cp > 1 ? req->cp : 1;
  const dit_blocks_options_t bo = {.dtype = req->dtype, .heads = heads, .head_dim = head_dim, .eps = eps,
                                   .tp = req->tp > 1 ? req->tp : 1, .tp_rank = req->tp_rank, .cp = cp,
                                   .cp_rank = cp > 1 ? req->cp_rank : 0, .cp_mode = cp > 1 ? req->cp_mode : 0};
  return dit_blocks_begin(m->weights, &bo, g, b);
}
