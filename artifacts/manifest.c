/* manifest.json: the deterministic serializer and the validating parser. The parser treats
 * the text as hostile: every count is capped before anything is allocated for it, every
 * number is range-checked before it is converted, and every cross-reference is resolved. */
#include "artifacts/manifest.h"
#include "base/strbuf.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/identity.h"
#include "base/json.h"

/* Caps that keep a hostile manifest from making us allocate absurd amounts. They are far
 * above anything a real model needs (Wan 14B at tp 8 has ~10k tensors over all shards). */
#define MF_MAX_BLOBS (1u << 20)
#define MF_MAX_WEIGHTS (1u << 16)
#define MF_MAX_TENSORS (1u << 20) /* over all weights entries together */
#define MF_MAX_IO 1024u
#define MF_MAX_WORLD 65536
#define MF_MAX_NAME 4096u /* bytes in a tensor name */
#define MF_MAX_SAFE ((int64_t)DIT_JSON_MAX_SAFE) /* 2^53 - 1: every integer below is exact */

/* ------------------------------------------------------------------------------------ */
/* Serializer: a pretty printer with two-space indentation; arrays of scalars stay on one
 * line so shapes read as [16, 1, 60, 104]. */

#define JW_MAX_DEPTH 16

typedef struct {
  dit_strbuf_t b;
  int depth;
  int pending; /* a key was just written; the next value belongs to it */
  unsigned char first[JW_MAX_DEPTH], inl[JW_MAX_DEPTH];
} jw_t;

static void jw_sep(jw_t *w) {
  if (w->pending) {
    w->pending = 0;
    return;
  }
  if (w->depth == 0) return;
  if (!w->first[w->depth]) dit_strbuf_puts(&w->b, w->inl[w->depth] ? ", " : ",");
  if (!w->inl[w->depth]) {
    dit_strbuf_put(&w->b, "\n", 1);
    for (int i = 0; i < w->depth; i++) dit_strbuf_put(&w->b, "  ", 2);
  }
  w->first[w->depth] = 0;
}

static void jw_open(jw_t *w, char c, int inl) {
  jw_sep(w);
  dit_strbuf_put(&w->b, &c, 1);
  if (w->depth + 1 >= JW_MAX_DEPTH) {
    w->b.oom = 1;
    return;
  }
  w->depth++;
  w->first[w->depth] = 1;
  w->inl[w->depth] = (unsigned char)inl;
}

static void jw_close(jw_t *w, char c) {
  if (w->depth <= 0) {
    w->b.oom = 1;
    return;
  }
  if (!w->first[w->depth] && !w->inl[w->depth]) {
    dit_strbuf_put(&w->b, "\n", 1);
    for (int i = 0; i < w->depth - 1; i++) dit_strbuf_put(&w->b, "  ", 2);
  }
  dit_strbuf_put(&w->b, &c, 1);
  w->depth--;
}

static void jw_key(jw_t *w, const char *k) {
  jw_sep(w);
  dit_strbuf_json_string(&w->b, k);
  dit_strbuf_puts(&w->b, ": ");
  w->pending = 1;
}

static void jw_str(jw_t *w, const char *s) {
  jw_sep(w);
  dit_strbuf_json_string(&w->b, s);
}

static void jw_u64(jw_t *w, uint64_t v) {
  jw_sep(w);
  dit_strbuf_printf(&w->b, "%" PRIu64, v);
}

static void jw_i64(jw_t *w, int64_t v) {
  jw_sep(w);
  dit_strbuf_printf(&w->b, "%" PRId64, v);
}

static void jw_raw(jw_t *w, const char *text) {
  jw_sep(w);
  dit_strbuf_puts(&w->b, text);
}

static void jw_kstr(jw_t *w, const char *k, const char *v) {
  jw_key(w, k);
  jw_str(w, v);
}
static void jw_ku64(jw_t *w, const char *k, uint64_t v) {
  jw_key(w, k);
  jw_u64(w, v);
}
static void jw_ki64(jw_t *w, const char *k, int64_t v) {
  jw_key(w, k);
  jw_i64(w, v);
}

/* A fixed-size char field must hold a terminated string, or printing it would read past it. */
#define FIXED_OK(field) (memchr((field), 0, sizeof(field)) != NULL)

static dit_status_t check_shape_rank(int rank, const char *what) {
  if (rank < 0 || rank > DIT_MAX_RANK)
    return DIT_ERR(INVALID_ARGUMENT, "manifest: %s: rank %d outside [0, %d]", what, rank,
                   DIT_MAX_RANK);
  return DIT_OK;
}

static void jw_shape(jw_t *w, int rank, const int64_t *dims) {
  jw_key(w, "shape");
  jw_open(w, '[', 1);
  for (int i = 0; i < rank; i++) jw_i64(w, dims[i]);
  jw_close(w, ']');
}

static dit_status_t write_io(jw_t *w, const char *key, size_t n, const dit_manifest_io_t *io) {
  if (n && !io) return DIT_ERR(INVALID_ARGUMENT, "manifest: io.%s: %zu entries but no array", key, n);
  jw_key(w, key);
  jw_open(w, '[', 0);
  for (size_t i = 0; i < n; i++) {
    if (!FIXED_OK(io[i].name))
      return DIT_ERR(INVALID_ARGUMENT, "manifest: io.%s[%zu].name is not terminated", key, i);
    DIT_RETURN_IF(check_shape_rank(io[i].rank, "io entry"));
    jw_open(w, '{', 0);
    jw_kstr(w, "name", io[i].name);
    jw_kstr(w, "dtype", dit_dtype_name(io[i].dtype));
    jw_shape(w, io[i].rank, io[i].dims);
    jw_close(w, '}');
  }
  jw_close(w, ']');
  return DIT_OK;
}

static void write_rank_list(jw_t *w, size_t n, const dit_manifest_rank_t *ranks) {
  jw_key(w, "ranks");
  jw_open(w, '[', 0);
  for (size_t i = 0; i < n; i++) {
    jw_open(w, '{', 0);
    jw_ki64(w, "rank", ranks[i].rank);
    jw_kstr(w, "plan", ranks[i].plan);
    jw_kstr(w, "weights", ranks[i].weights);
    jw_close(w, '}');
  }
  jw_close(w, ']');
}

static dit_status_t write_stages(jw_t *w, const dit_manifest_t *m) {
  if (m->n_stages > DIT_MAX_STAGES)
    return DIT_ERR(INVALID_ARGUMENT, "manifest: stages: %zu entries, expected at most %d", m->n_stages, DIT_MAX_STAGES);
  if (m->schema_minor < DIT_SCHEMA_MINOR_STAGES)
    return DIT_ERR(INVALID_ARGUMENT, "manifest: stages need schema minor >= %d, found %d", DIT_SCHEMA_MINOR_STAGES, m->schema_minor);
  jw_key(w, "stages");
  jw_open(w, '[', 0);
  for (size_t i = 0; i < m->n_stages; i++) {
    const dit_manifest_stage_t *st = &m->stages[i];
    if (!FIXED_OK(st->role) || !FIXED_OK(st->identity) || !FIXED_OK(st->family) || !FIXED_OK(st->model_class))
      return DIT_ERR(INVALID_ARGUMENT, "manifest: stages[%zu]: string field not terminated", i);
    const int need = dit_manifest_stage_minor(st->role);
    if (need < 0) return DIT_ERR(INVALID_ARGUMENT, "manifest: stages[%zu]: unknown role '%s'", i, st->role);
    if (m->schema_minor < need)
      return DIT_ERR(INVALID_ARGUMENT, "manifest: stages[%zu]: role %s needs schema minor >= %d, found %d", i, st->role, need,
                     m->schema_minor);
    if (!FIXED_OK(st->argument) || !FIXED_OK(st->output))
      return DIT_ERR(INVALID_ARGUMENT, "manifest: stages[%zu]: string field not terminated", i);
    if (st->argument[0] && m->schema_minor < DIT_SCHEMA_MINOR_FEEDS)
      return DIT_ERR(INVALID_ARGUMENT, "manifest: stages[%zu]: argument needs schema minor >= %d, found %d", i, DIT_SCHEMA_MINOR_FEEDS,
                     m->schema_minor);
    if (!FIXED_OK(st->prompt_template) || !FIXED_OK(st->mask_argument))
      return DIT_ERR(INVALID_ARGUMENT, "manifest: stages[%zu]: string field not terminated", i);
    if (st->padding < 0 || st->padding > DIT_PADDING_MASKED || st->drop < 0)
      return DIT_ERR(INVALID_ARGUMENT, "manifest: stages[%zu]: padding %d or drop %lld out of range", i, st->padding, (long long)st->drop);
    if ((st->prompt_template[0] || st->drop || st->mask_argument[0] || st->padding == DIT_PADDING_MASKED) &&
        (!st->argument[0] || m->schema_minor < DIT_SCHEMA_MINOR_IMAGE))
      return DIT_ERR(INVALID_ARGUMENT, "manifest: stages[%zu]: a template, drop, mask argument or masked padding needs an argument and "
                     "schema minor >= %d, found %d", i, DIT_SCHEMA_MINOR_IMAGE, m->schema_minor);
    if (st->window_stride && (st->window_stride < 0 || strcmp(st->role, "vae_decoder") || m->schema_minor < DIT_SCHEMA_MINOR_WINDOWS))
      return DIT_ERR(INVALID_ARGUMENT, "manifest: stages[%zu]: window_stride %lld: expected > 0, on a vae_decoder stage, with schema "
                     "minor >= %d, found role %s and minor %d", i, (long long)st->window_stride, DIT_SCHEMA_MINOR_WINDOWS, st->role,
                     m->schema_minor);
    if (st->argument[0] && (!st->output[0] || strncmp(st->role, "text_encoder", 12)))
      return DIT_ERR(INVALID_ARGUMENT, "manifest: stages[%zu]: argument %s: %s", i, st->argument,
                     st->output[0] ? "only a text encoder stage makes a generate argument" : "no output named");
    jw_open(w, '{', 0);
    jw_kstr(w, "role", st->role);
    jw_kstr(w, "identity", st->identity);
    jw_kstr(w, "family", st->family);
    jw_kstr(w, "class", st->model_class);
    if (st->argument[0]) {
      jw_kstr(w, "argument", st->argument);
      jw_kstr(w, "output", st->output);
      jw_kstr(w, "padding", dit_padding_names[st->padding]);
      if (st->prompt_template[0]) jw_kstr(w, "template", st->prompt_template);
      if (st->drop) jw_ki64(w, "drop", st->drop);
      if (st->mask_argument[0]) jw_kstr(w, "mask_argument", st->mask_argument);
    }
    if (st->window_stride) jw_ki64(w, "window_stride", st->window_stride);
    jw_close(w, '}');
  }
  jw_close(w, ']');
  return DIT_OK;
}

static dit_status_t write_experts(jw_t *w, const dit_manifest_t *m) {
  if (!m->experts || m->n_experts > DIT_MAX_EXPERTS)
    return DIT_ERR(INVALID_ARGUMENT, "manifest: experts: %zu entries, expected at most %d", m->n_experts, DIT_MAX_EXPERTS);
  if (m->schema_minor < DIT_SCHEMA_MINOR_EXPERTS)
    return DIT_ERR(INVALID_ARGUMENT, "manifest: experts need schema minor >= %d, found %d", DIT_SCHEMA_MINOR_EXPERTS, m->schema_minor);
  if (!isfinite(m->boundary_timestep))
    return DIT_ERR(INVALID_ARGUMENT, "manifest: experts.boundary_timestep is not a finite number");
  char num[40];
  dit_json_fmt_num(m->boundary_timestep, num);
  jw_key(w, "experts");
  jw_open(w, '{', 0);
  jw_key(w, "boundary_timestep");
  jw_raw(w, num);
  jw_key(w, "list");
  jw_open(w, '[', 0);
  for (size_t e = 0; e < m->n_experts; e++) {
    const dit_manifest_expert_t *x = &m->experts[e];
    if (!FIXED_OK(x->name) || (x->n_ranks && !x->ranks))
      return DIT_ERR(INVALID_ARGUMENT, "manifest: experts.list[%zu]: bad entry", e);
    for (size_t i = 0; i < x->n_ranks; i++)
      if (!FIXED_OK(x->ranks[i].plan) || !FIXED_OK(x->ranks[i].weights))
        return DIT_ERR(INVALID_ARGUMENT, "manifest: experts.list[%zu].ranks[%zu]: string field not terminated", e, i);
    jw_open(w, '{', 0);
    jw_kstr(w, "name", x->name);
    write_rank_list(w, x->n_ranks, x->ranks);
    jw_close(w, '}');
  }
  jw_close(w, ']');
  jw_close(w, '}');
  return DIT_OK;
}

static void jw_knum(jw_t *w, const char *k, double v) {
  char num[40];
  dit_json_fmt_num(v, num);
  jw_key(w, k);
  jw_raw(w, num);
}

static dit_status_t write_generate(jw_t *w, const dit_manifest_t *m) {
  const dit_manifest_generate_t *g = &m->generate;
  if (m->schema_minor < DIT_SCHEMA_MINOR_GENERATE)
    return DIT_ERR(INVALID_ARGUMENT, "manifest: generate needs schema minor >= %d, found %d", DIT_SCHEMA_MINOR_GENERATE, m->schema_minor);
  int ok = FIXED_OK(g->latents) && FIXED_OK(g->timestep_input) && FIXED_OK(g->guidance_input) &&
           g->n_conditions <= DIT_GEN_MAX_CONDITIONS && isfinite(g->timestep_divisor) && isfinite(g->guidance_scale) &&
           isfinite(g->schedule.shift) && isfinite(g->schedule.base_shift) && isfinite(g->schedule.max_shift) &&
           isfinite(g->schedule.shift_terminal) && isfinite(g->guidance_default);
  for (size_t i = 0; ok && i < g->n_conditions; i++) ok = FIXED_OK(g->conditions[i].argument) && FIXED_OK(g->conditions[i].input);
  if (!ok) return DIT_ERR(INVALID_ARGUMENT, "manifest: generate: bad entry");
  jw_key(w, "generate");
  jw_open(w, '{', 0);
  jw_kstr(w, "latents", g->latents);
  jw_ki64(w, "steps", g->default_steps);
  jw_key(w, "timestep");
  jw_open(w, '{', 1);
  jw_kstr(w, "input", g->timestep_input);
  jw_knum(w, "divisor", g->timestep_divisor);
  if (g->timestep_f32) jw_kstr(w, "dtype", "f32");
  jw_close(w, '}');
  if (g->guidance_input[0]) {
    jw_key(w, "guidance");
    jw_open(w, '{', 1);
    jw_kstr(w, "input", g->guidance_input);
    jw_knum(w, "scale", g->guidance_scale);
    jw_knum(w, "default", g->guidance_default);
    jw_close(w, '}');
  }
  jw_key(w, "conditions");
  jw_open(w, '[', 0);
  for (size_t i = 0; i < g->n_conditions; i++) {
    jw_open(w, '{', 1);
    jw_kstr(w, "argument", g->conditions[i].argument);
    jw_kstr(w, "input", g->conditions[i].input);
    jw_close(w, '}');
  }
  jw_close(w, ']');
  jw_kstr(w, "true_cfg", g->true_cfg_norm ? "norm" : "plain");
  jw_key(w, "schedule");
  jw_open(w, '{', 0);
  jw_kstr(w, "sampler", "flow_match_euler");
  jw_ki64(w, "num_train_timesteps", g->schedule.num_train_timesteps);
  jw_knum(w, "shift", g->schedule.shift);
  jw_kstr(w, "sigmas", g->schedule.sigmas_to_zero ? "one_to_zero" : "one_to_1/n");
  jw_key(w, "dynamic");
  if (g->schedule.dynamic) {
    jw_open(w, '{', 0);
    jw_knum(w, "base_shift", g->schedule.base_shift);
    jw_knum(w, "max_shift", g->schedule.max_shift);
    jw_ki64(w, "base_image_seq_len", g->schedule.base_image_seq_len);
    jw_ki64(w, "max_image_seq_len", g->schedule.max_image_seq_len);
    jw_ki64(w, "image_seq_len", g->schedule.image_seq_len);
    jw_kstr(w, "time_shift_type", g->schedule.time_shift_linear ? "linear" : "exponential");
    jw_close(w, '}');
  } else {
    jw_raw(w, "null");
  }
  jw_key(w, "shift_terminal");
  if (g->schedule.has_shift_terminal) {
    char num[40];
    dit_json_fmt_num(g->schedule.shift_terminal, num);
    jw_raw(w, num);
  } else {
    jw_raw(w, "null");
  }
  jw_close(w, '}');
  jw_close(w, '}');
  return DIT_OK;
}

dit_status_t dit_manifest_generate_json(const dit_manifest_generate_t *g, cJSON **out) {
  *out = NULL;
  dit_manifest_t m = {.schema_minor = DIT_SCHEMA_MINOR_GENERATE, .generate = *g};
  jw_t w = {0};
  jw_open(&w, '{', 0);
  dit_status_t s = write_generate(&w, &m);
  jw_close(&w, '}');
  if (!s && w.b.oom) s = DIT_ERR(RESOURCE_EXHAUSTED, "manifest: out of memory");
  cJSON *doc = s ? NULL : cJSON_ParseWithLength(w.b.p, w.b.len);
  if (!s && !doc) s = DIT_ERR(INTERNAL, "manifest: the generate section does not read back");
  if (!s) *out = cJSON_DetachItemFromObjectCaseSensitive(doc, "generate");
  cJSON_Delete(doc);
  dit_strbuf_free(&w.b);
  return s;
}

static dit_status_t write_manifest(jw_t *w, const dit_manifest_t *m) {
  if (!m->inputs || !cJSON_IsObject(m->inputs))
    return DIT_ERR(INVALID_ARGUMENT, "manifest: inputs must be a JSON object");
  if (m->summary && !cJSON_IsObject(m->summary))
    return DIT_ERR(INVALID_ARGUMENT, "manifest: summary must be a JSON object when present");
  if (!FIXED_OK(m->identity) || !FIXED_OK(m->family) || !FIXED_OK(m->model_class) ||
      !FIXED_OK(m->variant) || !FIXED_OK(m->arch) || !FIXED_OK(m->topology.cp_mode))
    return DIT_ERR(INVALID_ARGUMENT, "manifest: a fixed-size string field is not terminated");

  jw_open(w, '{', 0);
  jw_kstr(w, "format", "ditc-bundle");
  jw_key(w, "schema");
  jw_open(w, '{', 0);
  jw_ki64(w, "major", m->schema_major);
  jw_ki64(w, "minor", m->schema_minor);
  jw_close(w, '}');
  jw_kstr(w, "identity", m->identity);

  /* inputs are stored in canonical form, so the bytes the identity hashes are visible
   * verbatim in the manifest. */
  char *canon = NULL;
  DIT_RETURN_IF_ERROR(dit_json_canonical(m->inputs, &canon), "manifest: inputs");
  jw_key(w, "inputs");
  jw_raw(w, canon);
  free(canon);

  jw_key(w, "model");
  jw_open(w, '{', 0);
  jw_kstr(w, "family", m->family);
  jw_kstr(w, "class", m->model_class);
  jw_kstr(w, "variant", m->variant);
  jw_close(w, '}');

  jw_key(w, "target");
  jw_open(w, '{', 0);
  jw_kstr(w, "arch", m->arch);
  jw_ki64(w, "min_driver", m->min_driver);
  jw_close(w, '}');

  jw_key(w, "topology");
  jw_open(w, '{', 0);
  jw_ki64(w, "world", m->topology.world);
  jw_ki64(w, "tp", m->topology.tp);
  jw_ki64(w, "cp", m->topology.cp);
  jw_ki64(w, "cfg", m->topology.cfg);
  jw_kstr(w, "cp_mode", m->topology.cp_mode);
  if (m->topology.reuse_group) {
    jw_key(w, "reuse");
    jw_open(w, '{', 0);
    jw_kstr(w, "mode", "ditango");
    jw_ki64(w, "group", m->topology.reuse_group);
    if (m->topology.reuse_ulysses > 1) jw_ki64(w, "ulysses", m->topology.reuse_ulysses);
    jw_ki64(w, "layers", m->topology.reuse_layers);
    jw_ki64(w, "copies", m->topology.reuse_copies);
    jw_ki64(w, "merge", m->topology.reuse_merge > 1 ? m->topology.reuse_merge : 1);
    jw_ku64(w, "cache_bytes", m->topology.reuse_cache_bytes);
    jw_close(w, '}');
  }
  jw_close(w, '}');

  jw_key(w, "shape");
  jw_open(w, '{', 0);
  jw_ki64(w, "batch", m->shape.batch);
  jw_ki64(w, "frames", m->shape.frames);
  jw_ki64(w, "height", m->shape.height);
  jw_ki64(w, "width", m->shape.width);
  jw_ki64(w, "text_len", m->shape.text_len);
  jw_key(w, "latent");
  jw_open(w, '[', 1);
  for (int i = 0; i < 4; i++) jw_i64(w, m->shape.latent[i]);
  jw_close(w, ']');
  if (m->shape.tile_count) {
    if (m->schema_minor < DIT_SCHEMA_MINOR_TILES)
      return DIT_ERR(INVALID_ARGUMENT, "manifest: shape.tile needs schema minor >= %d, found %d", DIT_SCHEMA_MINOR_TILES, m->schema_minor);
    jw_key(w, "tile");
    jw_open(w, '{', 1);
    jw_ki64(w, "count", m->shape.tile_count);
    jw_ki64(w, "full", m->shape.tile_full);
    jw_ki64(w, "halo", m->shape.tile_halo);
    jw_close(w, '}');
  }
  jw_close(w, '}');

  jw_kstr(w, "dtype", dit_dtype_name(m->dtype));

  jw_key(w, "io");
  jw_open(w, '{', 0);
  DIT_RETURN_IF(write_io(w, "inputs", m->n_inputs, m->io_inputs));
  DIT_RETURN_IF(write_io(w, "outputs", m->n_outputs, m->io_outputs));
  jw_close(w, '}');

  if (m->n_blobs && !m->blobs) return DIT_ERR(INVALID_ARGUMENT, "manifest: blobs: no array");
  jw_key(w, "blobs");
  jw_open(w, '[', 0);
  for (size_t i = 0; i < m->n_blobs; i++) {
    const dit_manifest_blob_t *b = &m->blobs[i];
    if (!FIXED_OK(b->role) || !FIXED_OK(b->hash) || !FIXED_OK(b->sha256) || !FIXED_OK(b->name))
      return DIT_ERR(INVALID_ARGUMENT, "manifest: blobs[%zu]: string field not terminated", i);
    const int named = dit_manifest_blob_named(b->role);
    if ((named >= 0) != !!b->name[0])
      return DIT_ERR(INVALID_ARGUMENT, "manifest: blobs[%zu]: a name goes with roles tokenizer and image_processor and only there "
                     "(role %s, name '%s')", i, b->role, b->name);
    if (b->name[0] && m->schema_minor < named)
      return DIT_ERR(INVALID_ARGUMENT, "manifest: %s blobs need schema minor >= %d, found %d", b->role, named, m->schema_minor);
    jw_open(w, '{', 0);
    jw_kstr(w, "role", b->role);
    jw_kstr(w, "hash", b->hash);
    jw_ku64(w, "size", b->size);
    /* Optional: absent keeps manifests written before the field byte-identical. */
    if (b->sha256[0]) jw_kstr(w, "sha256", b->sha256);
    if (b->name[0]) jw_kstr(w, "name", b->name);
    jw_close(w, '}');
  }
  jw_close(w, ']');

  if (m->n_weights && !m->weights) return DIT_ERR(INVALID_ARGUMENT, "manifest: weights: no array");
  jw_key(w, "weights");
  jw_open(w, '[', 0);
  for (size_t i = 0; i < m->n_weights; i++) {
    const dit_manifest_weights_t *wt = &m->weights[i];
    if (!FIXED_OK(wt->blob))
      return DIT_ERR(INVALID_ARGUMENT, "manifest: weights[%zu].blob not terminated", i);
    if (wt->n_tensors && !wt->tensors)
      return DIT_ERR(INVALID_ARGUMENT, "manifest: weights[%zu]: tensors: no array", i);
    jw_open(w, '{', 0);
    jw_kstr(w, "blob", wt->blob);
    jw_ki64(w, "tp_rank", wt->tp_rank);
    jw_ki64(w, "tp_size", wt->tp_size);
    jw_key(w, "tensors");
    jw_open(w, '[', 0);
    for (size_t j = 0; j < wt->n_tensors; j++) {
      const dit_manifest_tensor_t *t = &wt->tensors[j];
      if (!t->name)
        return DIT_ERR(INVALID_ARGUMENT, "manifest: weights[%zu].tensors[%zu]: no name", i, j);
      DIT_RETURN_IF(check_shape_rank(t->rank, "weight tensor"));
      jw_open(w, '{', 0);
      jw_kstr(w, "name", t->name);
      jw_kstr(w, "dtype", dit_dtype_name(t->dtype));
      jw_shape(w, t->rank, t->dims);
      jw_ku64(w, "offset", t->offset);
      jw_ku64(w, "nbytes", t->nbytes);
      jw_close(w, '}');
    }
    jw_close(w, ']');
    jw_close(w, '}');
  }
  jw_close(w, ']');

  if (m->n_ranks && !m->ranks) return DIT_ERR(INVALID_ARGUMENT, "manifest: ranks: no array");
  jw_key(w, "ranks");
  jw_open(w, '[', 0);
  for (size_t i = 0; i < m->n_ranks; i++) {
    const dit_manifest_rank_t *r = &m->ranks[i];
    if (!FIXED_OK(r->plan) || !FIXED_OK(r->weights))
      return DIT_ERR(INVALID_ARGUMENT, "manifest: ranks[%zu]: string field not terminated", i);
    jw_open(w, '{', 0);
    jw_ki64(w, "rank", r->rank);
    jw_kstr(w, "plan", r->plan);
    jw_kstr(w, "weights", r->weights);
    jw_close(w, '}');
  }
  jw_close(w, ']');

  jw_key(w, "memory");
  jw_open(w, '{', 0);
  jw_ku64(w, "arena_bytes", m->arena_bytes);
  jw_ku64(w, "weight_bytes", m->weight_bytes);
  jw_ku64(w, "peak_bytes", m->peak_bytes);
  jw_close(w, '}');

  if (m->summary) {
    DIT_RETURN_IF_ERROR(dit_json_canonical(m->summary, &canon), "manifest: summary");
    jw_key(w, "summary");
    jw_raw(w, canon);
    free(canon);
  }
  if (m->n_experts) DIT_RETURN_IF(write_experts(w, m));
  if (m->generate.present) DIT_RETURN_IF(write_generate(w, m));
  if (m->n_stages) DIT_RETURN_IF(write_stages(w, m));
  jw_close(w, '}');
  dit_strbuf_put(&w->b, "\n", 1);
  return DIT_OK;
}

dit_status_t dit_manifest_to_json(const dit_manifest_t *m, char **out_text) {
  *out_text = NULL;
  if (!m) return DIT_ERR(INVALID_ARGUMENT, "manifest: no manifest");
  jw_t w;
  memset(&w, 0, sizeof w);
  dit_status_t s = write_manifest(&w, m);
  if (!s && (w.b.oom || w.depth != 0))
    s = DIT_ERR(RESOURCE_EXHAUSTED, "manifest: out of memory while serializing");
  if (s) {
    free(w.b.p);
    return s;
  }
  *out_text = w.b.p;
  return DIT_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Parser. base/json refuses bad documents whole and does the typed getters; what is particular
 * to manifests (hashes, dtypes, shapes, cross-references, weight layouts) is here. Errors read
 * "<what>: field '<path>': <problem>". */

static dit_status_t oom(const dit_json_t *v) {
  return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", v->what);
}

/* A view of the same document at another path, for checks that span several values (the
 * path only labels the message). */
static dit_json_t at_path(const dit_json_t *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static dit_json_t at_path(const dit_json_t *v, const char *fmt, ...) {
  dit_json_t r = *v;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r.path, sizeof r.path, fmt, ap);
  va_end(ap);
  return r;
}

static dit_json_t at_key(const dit_json_t *obj, const char *key) {
  dit_json_t r = *obj;
  dit_json_path_key(r.path, obj->path, key);
  return r;
}

static dit_status_t get_hash(const dit_json_t *obj, const char *key, char dst[DIT_HASH_HEX]) {
  dit_json_t v;
  const char *s = NULL;
  DIT_RETURN_IF(dit_json_get(obj, key, &v));
  DIT_RETURN_IF(dit_json_as_str(&v, MF_MAX_NAME, true, &s));
  if (!dit_is_hash_hex(s)) {
    char q[96];
    dit_json_quote(s, q);
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected 32 lowercase hex digits, found %s", q);
  }
  memcpy(dst, s, DIT_HASH_HEX);
  return DIT_OK;
}

static dit_status_t get_dtype(const dit_json_t *obj, const char *key, dit_dtype_t *out) {
  dit_json_t v;
  const char *s = NULL;
  DIT_RETURN_IF(dit_json_get(obj, key, &v));
  DIT_RETURN_IF(dit_json_as_str(&v, MF_MAX_NAME, true, &s));
  if (dit_dtype_parse(s, out) != 0) {
    char q[96];
    dit_json_quote(s, q);
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT,
                          "expected one of f32, bf16, f16, i64, i32, found %s", q);
  }
  return DIT_OK;
}

/* "shape": [d0, d1, ...] with rank <= DIT_MAX_RANK and 0 <= d < 2^53. */
static dit_status_t get_shape(const dit_json_t *obj, int *out_rank, int64_t dims[DIT_MAX_RANK]) {
  dit_json_t a, e;
  size_t n;
  DIT_RETURN_IF(dit_json_array(obj, "shape", 1u << 20, &a, &n));
  if (n > DIT_MAX_RANK)
    return dit_json_error(&a, DIT_CODE_OUT_OF_RANGE, "rank %zu exceeds the maximum %d", n, DIT_MAX_RANK);
  dit_json_iter_t it;
  size_t i = 0;
  dit_json_iter_init(&a, &it);
  while (dit_json_iter_next(&it, &e)) DIT_RETURN_IF(dit_json_as_int(&e, 0, MF_MAX_SAFE, &dims[i++]));
  for (; i < DIT_MAX_RANK; i++) dims[i] = 0;
  *out_rank = (int)n;
  return DIT_OK;
}

typedef struct {
  const char *key;
  size_t idx;
} kidx_t;

static int cmp_kidx(const void *a, const void *b) {
  const kidx_t *x = a, *y = b;
  int r = strcmp(x->key, y->key);
  if (r) return r;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static const kidx_t *kidx_find(const kidx_t *v, size_t n, const char *key) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int r = strcmp(v[mid].key, key);
    if (r == 0) {
      while (mid > 0 && strcmp(v[mid - 1].key, key) == 0) mid--;
      return &v[mid];
    }
    if (r < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

static dit_status_t parse_schema(const dit_json_t *root, dit_manifest_t *m) {
  static const char *const keys[] = {"major", "minor", NULL};
  dit_json_t o;
  int64_t major, minor;
  DIT_RETURN_IF(dit_json_object(root, "schema", &o));
  DIT_RETURN_IF(dit_json_int(&o, "major", 0, 1000000000, &major));
  /* A different major may mean anything at all below, so it is reported before any other
   * field is looked at. */
  if (major != DIT_SCHEMA_MAJOR)
    return DIT_ERR(FAILED_PRECONDITION, "%s: schema major %" PRId64 " is %s than this build's %d%s",
                   root->what, major, major > DIT_SCHEMA_MAJOR ? "newer" : "older", DIT_SCHEMA_MAJOR,
                   major > DIT_SCHEMA_MAJOR ? "; update ditrun" : "; recompile the bundle");
  DIT_RETURN_IF(dit_json_int(&o, "minor", 0, 1000000000, &minor));
  if (minor > DIT_SCHEMA_MINOR)
    return DIT_ERR(FAILED_PRECONDITION, "%s: schema %" PRId64 ".%" PRId64
                   " is newer than this build's %d.%d; update ditrun",
                   root->what, major, minor, DIT_SCHEMA_MAJOR, DIT_SCHEMA_MINOR);
  DIT_RETURN_IF(dit_json_check_keys(&o, keys));
  m->schema_major = (int)major;
  m->schema_minor = (int)minor;
  return DIT_OK;
}

static dit_status_t parse_io_list(const dit_json_t *io, const char *key, size_t *out_n,
                                  dit_manifest_io_t **out) {
  static const char *const keys[] = {"name", "dtype", "shape", NULL};
  dit_json_t a, e;
  size_t n;
  DIT_RETURN_IF(dit_json_array(io, key, MF_MAX_IO, &a, &n));
  if (n) {
    *out = calloc(n, sizeof **out);
    if (!*out) return oom(io);
  }
  *out_n = n;
  dit_json_iter_t it;
  size_t i = 0;
  dit_json_iter_init(&a, &it);
  for (; dit_json_iter_next(&it, &e); i++) {
    dit_manifest_io_t *t = &(*out)[i];
    DIT_RETURN_IF(dit_json_expect_object(&e));
    DIT_RETURN_IF(dit_json_check_keys(&e, keys));
    DIT_RETURN_IF(dit_json_str_copy(&e, "name", t->name, sizeof t->name, false));
    DIT_RETURN_IF(get_dtype(&e, "dtype", &t->dtype));
    DIT_RETURN_IF(get_shape(&e, &t->rank, t->dims));
    /* n <= MF_MAX_IO, so the quadratic scan is bounded. */
    for (size_t j = 0; j < i; j++) {
      if (strcmp((*out)[j].name, t->name) == 0) {
        char q[96];
        dit_json_quote(t->name, q);
        dit_json_t pn = at_key(&e, "name");
        return dit_json_error(&pn, DIT_CODE_INVALID_ARGUMENT, "duplicate name %s (also %s[%zu])", q,
                              a.path, j);
      }
    }
  }
  return DIT_OK;
}

/* A named blob's file name (dit_manifest_blob_named's roles): required with those roles, refused
 * elsewhere; a plain file name (no path, not hidden) unique among blobs[0..i). */
static dit_status_t parse_blob_name(const dit_json_t *e, const dit_manifest_t *m, dit_manifest_blob_t *b, size_t i) {
  const int need = dit_manifest_blob_named(b->role), named = need >= 0;
  if (named && m->schema_minor < need) {
    dit_json_t pr = at_key(e, "role");
    return dit_json_error(&pr, DIT_CODE_INVALID_ARGUMENT, "role \"%s\" needs schema minor >= %d, found %d.%d", b->role, need,
                          m->schema_major, m->schema_minor);
  }
  if (!dit_json_has(e, "name")) {
    if (named) return dit_json_error(e, DIT_CODE_INVALID_ARGUMENT, "a blob of role \"%s\" needs a \"name\" (its file name)", b->role);
    return DIT_OK;
  }
  dit_json_t v = at_key(e, "name");
  if (!named)
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "only blobs of roles \"tokenizer\" and \"image_processor\" have a name, "
                          "this one is \"%s\"", b->role);
  DIT_RETURN_IF(dit_json_str_copy(e, "name", b->name, sizeof b->name, false));
  if (b->name[0] == '.' || strchr(b->name, '/') || strchr(b->name, '\\')) {
    char q[96];
    dit_json_quote(b->name, q);
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected a plain file name (no '/', not starting with '.'), found %s", q);
  }
  for (size_t j = 0; j < i; j++)
    if (!strcmp(m->blobs[j].name, b->name)) return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "duplicate of blobs[%zu].name \"%s\"", j, b->name);
  return DIT_OK;
}

static dit_status_t parse_blobs(const dit_json_t *root, dit_manifest_t *m, kidx_t **out_index) {
  static const char *const keys[] = {"role", "hash", "size", "sha256", "name", NULL};
  static const char *const roles[] = {"plan", "weights", "kernels", "tokenizer", "image_processor", NULL};
  dit_json_t a, e;
  size_t n;
  DIT_RETURN_IF(dit_json_array(root, "blobs", MF_MAX_BLOBS, &a, &n));
  if (n) {
    m->blobs = calloc(n, sizeof *m->blobs);
    *out_index = calloc(n, sizeof **out_index);
    if (!m->blobs || !*out_index) return oom(root);
  }
  m->n_blobs = n;
  dit_json_iter_t it;
  size_t i = 0;
  dit_json_iter_init(&a, &it);
  for (; dit_json_iter_next(&it, &e); i++) {
    dit_manifest_blob_t *b = &m->blobs[i];
    DIT_RETURN_IF(dit_json_expect_object(&e));
    DIT_RETURN_IF(dit_json_check_keys(&e, keys));
    int role = 0;
    DIT_RETURN_IF(dit_json_enum(&e, "role", roles, &role));
    snprintf(b->role, sizeof b->role, "%s", roles[role]);
    DIT_RETURN_IF(get_hash(&e, "hash", b->hash));
    DIT_RETURN_IF(dit_json_u64(&e, "size", &b->size));
    /* Optional: the store adds it for remote pulls. Absent stays "" and is not printed, so
     * manifests without it keep their bytes. */
    if (dit_json_has(&e, "sha256")) {
      dit_json_t v;
      const char *sha = NULL;
      DIT_RETURN_IF(dit_json_get(&e, "sha256", &v));
      DIT_RETURN_IF(dit_json_as_str(&v, MF_MAX_NAME, true, &sha));
      size_t k = 0;
      while (k < 64 && ((sha[k] >= '0' && sha[k] <= '9') || (sha[k] >= 'a' && sha[k] <= 'f'))) k++;
      if (k != 64 || sha[64]) {
        char q[96];
        dit_json_quote(sha, q);
        return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected 64 lowercase hex digits, found %s", q);
      }
      memcpy(b->sha256, sha, DIT_SHA256_HEX);
    }
    DIT_RETURN_IF(parse_blob_name(&e, m, b, i));
    (*out_index)[i].key = b->hash;
    (*out_index)[i].idx = i;
  }
  if (n > 1) qsort(*out_index, n, sizeof **out_index, cmp_kidx);
  for (i = 1; i < n; i++) {
    if (strcmp((*out_index)[i - 1].key, (*out_index)[i].key) == 0) {
      dit_json_t ph = at_path(&a, "blobs[%zu].hash", (*out_index)[i].idx);
      return dit_json_error(&ph, DIT_CODE_INVALID_ARGUMENT, "duplicate of blobs[%zu] (%s)",
                            (*out_index)[i - 1].idx, (*out_index)[i].key);
    }
  }
  return DIT_OK;
}

/* `hash` (read from field v) must be listed in blobs[] with role `role`. */
static dit_status_t check_blob_ref(const dit_manifest_t *m, const kidx_t *index, const dit_json_t *v,
                                   const char *hash, const char *role) {
  const kidx_t *k = kidx_find(index, m->n_blobs, hash);
  if (!k) return dit_json_error(v, DIT_CODE_NOT_FOUND, "blob %s is not listed in blobs[]", hash);
  const dit_manifest_blob_t *b = &m->blobs[k->idx];
  if (strcmp(b->role, role) != 0)
    return dit_json_error(v, DIT_CODE_INVALID_ARGUMENT,
                          "blob %s is listed in blobs[%zu] with role '%s', expected role '%s'", hash,
                          k->idx, b->role, role);
  return DIT_OK;
}

typedef struct {
  uint64_t offset, end;
  size_t idx;
} span_t;

static int cmp_span(const void *a, const void *b) {
  const span_t *x = a, *y = b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static dit_status_t parse_tensor(const dit_json_t *e, dit_manifest_tensor_t *t, uint64_t blob_size,
                                 const char *blob) {
  static const char *const keys[] = {"name", "dtype", "shape", "offset", "nbytes", NULL};
  DIT_RETURN_IF(dit_json_expect_object(e));
  DIT_RETURN_IF(dit_json_check_keys(e, keys));
  const char *name = NULL;
  DIT_RETURN_IF(dit_json_str(e, "name", MF_MAX_NAME, false, &name));
  t->name = strdup(name);
  if (!t->name) return oom(e);
  DIT_RETURN_IF(get_dtype(e, "dtype", &t->dtype));
  DIT_RETURN_IF(get_shape(e, &t->rank, t->dims));
  DIT_RETURN_IF(dit_json_u64(e, "offset", &t->offset));
  DIT_RETURN_IF(dit_json_u64(e, "nbytes", &t->nbytes));
  if (t->offset % DIT_WEIGHT_ALIGN != 0) {
    dit_json_t pf = at_key(e, "offset");
    return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT, "expected a multiple of %d, found %" PRIu64,
                          DIT_WEIGHT_ALIGN, t->offset);
  }
  /* Every factor is below 2^53, so one overflow check per step keeps the product exact. */
  uint64_t want = dit_dtype_size(t->dtype);
  int over = 0;
  for (int i = 0; i < t->rank && !over; i++)
    over = __builtin_mul_overflow(want, (uint64_t)t->dims[i], &want) || want > (uint64_t)MF_MAX_SAFE;
  if (over) {
    dit_json_t pf = at_key(e, "shape");
    return dit_json_error(&pf, DIT_CODE_OUT_OF_RANGE, "the tensor would exceed 2^53 bytes");
  }
  if (t->nbytes != want) {
    dit_json_t pf = at_key(e, "nbytes");
    return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT,
                          "expected %" PRIu64 " (shape elements x %zu-byte %s), found %" PRIu64, want,
                          dit_dtype_size(t->dtype), dit_dtype_name(t->dtype), t->nbytes);
  }
  if (t->offset > blob_size || t->nbytes > blob_size - t->offset)
    return dit_json_error(e, DIT_CODE_OUT_OF_RANGE,
                          "bytes [%" PRIu64 ", %" PRIu64 ") extend past the end of blob %s (%" PRIu64
                          " bytes)",
                          t->offset, t->offset + t->nbytes, blob, blob_size);
  return DIT_OK;
}

/* Names unique and byte ranges disjoint within one weights entry (at `entry`). */
static dit_status_t check_layout(const dit_json_t *entry, const dit_manifest_weights_t *w) {
  size_t n = w->n_tensors;
  if (n < 2) return DIT_OK;
  dit_status_t s = DIT_OK;
  kidx_t *names = malloc(n * sizeof *names);
  span_t *spans = malloc(n * sizeof *spans);
  if (!names || !spans) {
    s = oom(entry);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    names[i].key = w->tensors[i].name;
    names[i].idx = i;
    spans[i].offset = w->tensors[i].offset;
    spans[i].end = w->tensors[i].offset + w->tensors[i].nbytes;
    spans[i].idx = i;
  }
  qsort(names, n, sizeof *names, cmp_kidx);
  for (size_t i = 1; i < n && !s; i++) {
    if (strcmp(names[i - 1].key, names[i].key) == 0) {
      char q[96];
      dit_json_quote(names[i].key, q);
      dit_json_t pn = at_path(entry, "%s.tensors[%zu].name", entry->path, names[i].idx);
      s = dit_json_error(&pn, DIT_CODE_INVALID_ARGUMENT, "duplicate name %s (also tensors[%zu])", q,
                         names[i - 1].idx);
    }
  }
  qsort(spans, n, sizeof *spans, cmp_span);
  /* Compare against the furthest-reaching earlier span, not just the previous one: a long
   * tensor can overlap several that start after it. Empty tensors occupy no bytes. */
  const span_t *reach = NULL;
  for (size_t i = 0; i < n && !s; i++) {
    const span_t *cur = &spans[i];
    if (cur->end == cur->offset) continue;
    if (reach && cur->offset < reach->end) {
      dit_json_t p = at_path(entry, "%s.tensors[%zu]", entry->path, cur->idx);
      s = dit_json_error(&p, DIT_CODE_INVALID_ARGUMENT,
                         "bytes [%" PRIu64 ", %" PRIu64 ") overlap tensors[%zu] at [%" PRIu64
                         ", %" PRIu64 ")",
                         cur->offset, cur->end, reach->idx, reach->offset, reach->end);
    }
    if (!reach || cur->end > reach->end) reach = cur;
  }
done:
  free(names);
  free(spans);
  return s;
}

static dit_status_t parse_weights(const dit_json_t *root, dit_manifest_t *m, const kidx_t *blob_index,
                                  kidx_t **out_index) {
  static const char *const keys[] = {"blob", "tp_rank", "tp_size", "tensors", NULL};
  dit_json_t a, e, ta, te;
  size_t n, total = 0;
  DIT_RETURN_IF(dit_json_array(root, "weights", MF_MAX_WEIGHTS, &a, &n));
  if (n) {
    m->weights = calloc(n, sizeof *m->weights);
    *out_index = calloc(n, sizeof **out_index);
    if (!m->weights || !*out_index) return oom(root);
  }
  m->n_weights = n;
  dit_json_iter_t it;
  size_t i = 0;
  dit_json_iter_init(&a, &it);
  for (; dit_json_iter_next(&it, &e); i++) {
    dit_manifest_weights_t *w = &m->weights[i];
    DIT_RETURN_IF(dit_json_expect_object(&e));
    DIT_RETURN_IF(dit_json_check_keys(&e, keys));
    DIT_RETURN_IF(get_hash(&e, "blob", w->blob));
    dit_json_t pf = at_key(&e, "blob");
    DIT_RETURN_IF(check_blob_ref(m, blob_index, &pf, w->blob, "weights"));
    uint64_t blob_size = m->blobs[kidx_find(blob_index, m->n_blobs, w->blob)->idx].size;
    DIT_RETURN_IF(dit_json_i32(&e, "tp_size", 1, MF_MAX_WORLD, &w->tp_size));
    DIT_RETURN_IF(dit_json_i32(&e, "tp_rank", 0, w->tp_size - 1, &w->tp_rank));
    size_t nt;
    DIT_RETURN_IF(dit_json_array(&e, "tensors", MF_MAX_TENSORS, &ta, &nt));
    total += nt;
    if (total > MF_MAX_TENSORS)
      return dit_json_error(&a, DIT_CODE_OUT_OF_RANGE, "more than %u tensors in all entries",
                            MF_MAX_TENSORS);
    if (nt) {
      w->tensors = calloc(nt, sizeof *w->tensors);
      if (!w->tensors) return oom(root);
    }
    w->n_tensors = nt;
    dit_json_iter_t tit;
    size_t j = 0;
    dit_json_iter_init(&ta, &tit);
    for (; dit_json_iter_next(&tit, &te); j++)
      DIT_RETURN_IF(parse_tensor(&te, &w->tensors[j], blob_size, w->blob));
    DIT_RETURN_IF(check_layout(&e, w));
    (*out_index)[i].key = w->blob;
    (*out_index)[i].idx = i;
  }
  if (n > 1) qsort(*out_index, n, sizeof **out_index, cmp_kidx);
  for (i = 1; i < n; i++) {
    if (strcmp((*out_index)[i - 1].key, (*out_index)[i].key) == 0) {
      dit_json_t pf = at_path(&a, "weights[%zu].blob", (*out_index)[i].idx);
      return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT, "blob %s already has a layout in weights[%zu]",
                            (*out_index)[i].key, (*out_index)[i - 1].idx);
    }
  }
  return DIT_OK;
}

/* A "ranks" list of obj (the top level's, or an expert's) into *out_ranks / *out_n. */
static dit_status_t parse_rank_list(const dit_json_t *root, dit_manifest_t *m, const kidx_t *blob_index,
                                    const kidx_t *weights_index, dit_manifest_rank_t **out_ranks, size_t *out_n) {
  static const char *const keys[] = {"rank", "plan", "weights", NULL};
  dit_json_t a, e;
  size_t n;
  int world = m->topology.world;
  DIT_RETURN_IF(dit_json_array(root, "ranks", MF_MAX_WORLD, &a, &n));
  if (n > (size_t)world)
    return dit_json_error(&a, DIT_CODE_OUT_OF_RANGE, "%zu entries for world size %d", n, world);
  size_t *seen = calloc((size_t)world, sizeof *seen); /* index + 1 of the entry naming rank r */
  if (n) *out_ranks = calloc(n, sizeof **out_ranks);
  if (!seen || (n && !*out_ranks)) {
    free(seen);
    return oom(root);
  }
  *out_n = n;
  dit_status_t s = DIT_OK;
  dit_json_iter_t it;
  size_t i = 0;
  dit_json_iter_init(&a, &it);
  for (; !s && dit_json_iter_next(&it, &e); i++) {
    dit_manifest_rank_t *r = &(*out_ranks)[i];
    if ((s = dit_json_expect_object(&e))) break;
    if ((s = dit_json_check_keys(&e, keys))) break;
    if ((s = dit_json_i32(&e, "rank", 0, world - 1, &r->rank))) break;
    if (seen[r->rank]) {
      dit_json_t pf = at_key(&e, "rank");
      s = dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT, "rank %d is listed twice (also ranks[%zu])",
                         r->rank, seen[r->rank] - 1);
      break;
    }
    seen[r->rank] = i + 1;
    if ((s = get_hash(&e, "plan", r->plan))) break;
    dit_json_t pf = at_key(&e, "plan");
    if ((s = check_blob_ref(m, blob_index, &pf, r->plan, "plan"))) break;
    if ((s = get_hash(&e, "weights", r->weights))) break;
    pf = at_key(&e, "weights");
    if ((s = check_blob_ref(m, blob_index, &pf, r->weights, "weights"))) break;
    if (!kidx_find(weights_index, m->n_weights, r->weights))
      s = dit_json_error(&pf, DIT_CODE_NOT_FOUND, "blob %s has no tensor layout in weights[]",
                         r->weights);
  }
  for (int k = 0; k < world && !s; k++)
    if (!seen[k])
      s = dit_json_error(&a, DIT_CODE_NOT_FOUND, "rank %d of world size %d is missing", k, world);
  free(seen);
  return s;
}

static dit_status_t parse_ranks(const dit_json_t *root, dit_manifest_t *m, const kidx_t *blob_index,
                                const kidx_t *weights_index) {
  return parse_rank_list(root, m, blob_index, weights_index, &m->ranks, &m->n_ranks);
}

/* The optional experts section (schema 1.1): two named experts in pipeline order, the first
 * repeating `ranks`, each rank's plan and weights listed with their roles and layouts, and a
 * boundary inside the training schedule's range of timesteps. */
static dit_status_t parse_experts(const dit_json_t *root, dit_manifest_t *m, const kidx_t *blob_index,
                                  const kidx_t *weights_index) {
  static const char *const keys[] = {"boundary_timestep", "list", NULL};
  static const char *const entry_keys[] = {"name", "ranks", NULL};
  static const char *const names[] = {"transformer", "transformer_2", NULL};
  dit_json_t o, a, e;
  size_t n;
  DIT_RETURN_IF(dit_json_object(root, "experts", &o));
  if (m->schema_minor < DIT_SCHEMA_MINOR_EXPERTS) {
    return dit_json_error(&o, DIT_CODE_INVALID_ARGUMENT, "needs schema minor >= %d, found %d.%d", DIT_SCHEMA_MINOR_EXPERTS,
                          m->schema_major, m->schema_minor);
  }
  DIT_RETURN_IF(dit_json_check_keys(&o, keys));
  /* Timesteps run over (0, 1000] for every scheduler this build samples with. */
  DIT_RETURN_IF(dit_json_num(&o, "boundary_timestep", 1e-9, 1000.0, &m->boundary_timestep));
  DIT_RETURN_IF(dit_json_array(&o, "list", DIT_MAX_EXPERTS, &a, &n));
  if (n != DIT_MAX_EXPERTS)
    return dit_json_error(&a, DIT_CODE_INVALID_ARGUMENT, "expected %d experts (transformer, transformer_2), found %zu",
                          DIT_MAX_EXPERTS, n);
  if (!(m->experts = calloc(n, sizeof *m->experts))) return oom(root);
  m->n_experts = n;
  dit_json_iter_t it;
  size_t i = 0;
  dit_json_iter_init(&a, &it);
  for (; dit_json_iter_next(&it, &e); i++) {
    dit_manifest_expert_t *x = &m->experts[i];
    DIT_RETURN_IF(dit_json_expect_object(&e));
    DIT_RETURN_IF(dit_json_check_keys(&e, entry_keys));
    int which = 0;
    DIT_RETURN_IF(dit_json_enum(&e, "name", names, &which));
    if ((size_t)which != i) {
      dit_json_t pf = at_key(&e, "name");
      return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT, "expected \"%s\" (experts in pipeline order), found \"%s\"", names[i],
                            names[which]);
    }
    snprintf(x->name, sizeof x->name, "%s", names[which]);
    DIT_RETURN_IF(parse_rank_list(&e, m, blob_index, weights_index, &x->ranks, &x->n_ranks));
    if (i == 0) {
      /* Readers of `ranks` run the first expert: both must say the same. */
      for (size_t k = 0; k < x->n_ranks; k++) {
        const dit_manifest_rank_t *top = dit_manifest_expert_rank(m, NULL, x->ranks[k].rank);
        if (!top || strcmp(top->plan, x->ranks[k].plan) || strcmp(top->weights, x->ranks[k].weights)) {
          dit_json_t pf = at_path(&e, "%s.ranks[%zu]", e.path, k);
          return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT, "rank %d differs from the top-level ranks[] entry of that rank",
                                x->ranks[k].rank);
        }
      }
    }
  }
  return DIT_OK;
}

/* An input name of the generate section: one of the bundle's inputs. */
static dit_status_t gen_input(const dit_json_t *o, const char *key, const dit_manifest_t *m, char dst[64]) {
  DIT_RETURN_IF(dit_json_str_copy(o, key, dst, 64, false));
  for (size_t i = 0; i < m->n_inputs; i++)
    if (!strcmp(m->io_inputs[i].name, dst)) return DIT_OK;
  dit_json_t v = at_key(o, key);
  char q[96];
  dit_json_quote(dst, q);
  return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "%s is not one of the bundle's inputs (io.inputs)", q);
}

/* The optional generate section (schema 1.2). */
static dit_status_t parse_generate(const dit_json_t *root, dit_manifest_t *m) {
  static const char *const keys[] = {"latents", "steps", "timestep", "guidance", "conditions", "true_cfg", "schedule", NULL};
  static const char *const in_keys[] = {"input", "divisor", "dtype", NULL};
  static const char *const t_dtypes[] = {"model", "f32", NULL};
  static const char *const g_keys[] = {"input", "scale", "default", NULL};
  static const char *const c_keys[] = {"argument", "input", NULL};
  static const char *const s_keys[] = {"sampler", "num_train_timesteps", "shift", "sigmas", "dynamic", "shift_terminal", NULL};
  static const char *const d_keys[] = {"base_shift", "max_shift", "base_image_seq_len", "max_image_seq_len", "image_seq_len",
                                       "time_shift_type", NULL};
  static const char *const cfgs[] = {"plain", "norm", NULL};
  static const char *const samplers[] = {"flow_match_euler", NULL};
  static const char *const sigmas[] = {"one_to_1/n", "one_to_zero", NULL};
  static const char *const shifts[] = {"exponential", "linear", NULL};
  dit_manifest_generate_t *g = &m->generate;
  dit_json_t o, v, a, e;
  DIT_RETURN_IF(dit_json_object(root, "generate", &o));
  if (m->schema_minor < DIT_SCHEMA_MINOR_GENERATE)
    return dit_json_error(&o, DIT_CODE_INVALID_ARGUMENT, "needs schema minor >= %d, found %d.%d", DIT_SCHEMA_MINOR_GENERATE,
                          m->schema_major, m->schema_minor);
  DIT_RETURN_IF(dit_json_check_keys(&o, keys));
  DIT_RETURN_IF(gen_input(&o, "latents", m, g->latents));
  DIT_RETURN_IF(dit_json_int(&o, "steps", 1, 10000, &g->default_steps));
  DIT_RETURN_IF(dit_json_object(&o, "timestep", &v));
  DIT_RETURN_IF(dit_json_check_keys(&v, in_keys));
  DIT_RETURN_IF(gen_input(&v, "input", m, g->timestep_input));
  DIT_RETURN_IF(dit_json_num(&v, "divisor", 1e-6, 1e6, &g->timestep_divisor));
  if (dit_json_has(&v, "dtype")) DIT_RETURN_IF(dit_json_enum(&v, "dtype", t_dtypes, &g->timestep_f32));
  if (dit_json_has(&o, "guidance")) {
    DIT_RETURN_IF(dit_json_object(&o, "guidance", &v));
    DIT_RETURN_IF(dit_json_check_keys(&v, g_keys));
    DIT_RETURN_IF(gen_input(&v, "input", m, g->guidance_input));
    DIT_RETURN_IF(dit_json_num(&v, "scale", 1e-6, 1e6, &g->guidance_scale));
    DIT_RETURN_IF(dit_json_num(&v, "default", 0, 1e6, &g->guidance_default));
  }
  size_t n = 0;
  DIT_RETURN_IF(dit_json_array(&o, "conditions", DIT_GEN_MAX_CONDITIONS, &a, &n));
  dit_json_iter_t it;
  dit_json_iter_init(&a, &it);
  for (size_t i = 0; dit_json_iter_next(&it, &e); i++) {
    DIT_RETURN_IF(dit_json_expect_object(&e));
    DIT_RETURN_IF(dit_json_check_keys(&e, c_keys));
    DIT_RETURN_IF(dit_json_str_copy(&e, "argument", g->conditions[i].argument, sizeof g->conditions[i].argument, false));
    DIT_RETURN_IF(gen_input(&e, "input", m, g->conditions[i].input));
    g->n_conditions = i + 1;
  }
  int k = 0;
  DIT_RETURN_IF(dit_json_enum(&o, "true_cfg", cfgs, &k));
  g->true_cfg_norm = k == 1;
  DIT_RETURN_IF(dit_json_object(&o, "schedule", &v));
  DIT_RETURN_IF(dit_json_check_keys(&v, s_keys));
  DIT_RETURN_IF(dit_json_enum(&v, "sampler", samplers, &k));
  DIT_RETURN_IF(dit_json_int(&v, "num_train_timesteps", 1, 1000000, &g->schedule.num_train_timesteps));
  DIT_RETURN_IF(dit_json_num(&v, "shift", 1e-6, 1e6, &g->schedule.shift));
  DIT_RETURN_IF(dit_json_enum(&v, "sigmas", sigmas, &k));
  g->schedule.sigmas_to_zero = k == 1;
  dit_json_t d;
  DIT_RETURN_IF(dit_json_get(&v, "dynamic", &d));
  if (!cJSON_IsNull(d.v)) {
    DIT_RETURN_IF(dit_json_object(&v, "dynamic", &d));
    DIT_RETURN_IF(dit_json_check_keys(&d, d_keys));
    g->schedule.dynamic = 1;
    DIT_RETURN_IF(dit_json_num(&d, "base_shift", -100, 100, &g->schedule.base_shift));
    DIT_RETURN_IF(dit_json_num(&d, "max_shift", -100, 100, &g->schedule.max_shift));
    DIT_RETURN_IF(dit_json_int(&d, "base_image_seq_len", 1, MF_MAX_SAFE, &g->schedule.base_image_seq_len));
    DIT_RETURN_IF(dit_json_int(&d, "max_image_seq_len", 1, MF_MAX_SAFE, &g->schedule.max_image_seq_len));
    DIT_RETURN_IF(dit_json_int(&d, "image_seq_len", 1, MF_MAX_SAFE, &g->schedule.image_seq_len));
    if (g->schedule.max_image_seq_len == g->schedule.base_image_seq_len) {
      dit_json_t pf = at_key(&d, "max_image_seq_len");
      return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT, "equals base_image_seq_len: the shift's slope is undefined");
    }
    DIT_RETURN_IF(dit_json_enum(&d, "time_shift_type", shifts, &k));
    g->schedule.time_shift_linear = k == 1;
  }
  dit_json_t st;
  DIT_RETURN_IF(dit_json_get(&v, "shift_terminal", &st));
  if (!cJSON_IsNull(st.v)) {
    DIT_RETURN_IF(dit_json_num(&v, "shift_terminal", 1e-9, 1.0 - 1e-9, &g->schedule.shift_terminal));
    g->schedule.has_shift_terminal = 1;
  }
  g->present = 1;
  return DIT_OK;
}

static dit_status_t parse_topology(const dit_json_t *root, dit_manifest_t *m) {
  static const char *const keys[] = {"world", "tp", "cp", "cfg", "cp_mode", "reuse", NULL};
  static const char *const modes[] = {"none", "gather", "ring", "ulysses", "usp", NULL};
  dit_json_t o;
  DIT_RETURN_IF(dit_json_object(root, "topology", &o));
  DIT_RETURN_IF(dit_json_check_keys(&o, keys));
  DIT_RETURN_IF(dit_json_i32(&o, "world", 1, MF_MAX_WORLD, &m->topology.world));
  DIT_RETURN_IF(dit_json_i32(&o, "tp", 1, MF_MAX_WORLD, &m->topology.tp));
  DIT_RETURN_IF(dit_json_i32(&o, "cp", 1, MF_MAX_WORLD, &m->topology.cp));
  DIT_RETURN_IF(dit_json_i32(&o, "cfg", 1, MF_MAX_WORLD, &m->topology.cfg));
  int mode = 0;
  DIT_RETURN_IF(dit_json_enum(&o, "cp_mode", modes, &mode));
  snprintf(m->topology.cp_mode, sizeof m->topology.cp_mode, "%s", modes[mode]);
  int64_t prod = (int64_t)m->topology.tp * m->topology.cp * m->topology.cfg;
  if (prod != m->topology.world) {
    dit_json_t pf = at_key(&o, "world");
    return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT,
                          "expected tp*cp*cfg = %" PRId64 " (tp %d, cp %d, cfg %d), found %d", prod,
                          m->topology.tp, m->topology.cp, m->topology.cfg, m->topology.world);
  }
  if (m->topology.cp > 1 && mode == 0) {
    dit_json_t pf = at_key(&o, "cp_mode");
    return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT,
                          "cp %d needs a context-parallel mode, found \"none\"", m->topology.cp);
  }
  if (dit_json_has(&o, "reuse")) {
    static const char *const rkeys[] = {"mode", "group", "ulysses", "layers", "copies", "merge", "cache_bytes", NULL};
    static const char *const rmodes[] = {"ditango", NULL};
    dit_json_t r;
    DIT_RETURN_IF(dit_json_object(&o, "reuse", &r));
    if (m->schema_minor < DIT_SCHEMA_MINOR_REUSE)
      return dit_json_error(&r, DIT_CODE_INVALID_ARGUMENT, "needs schema minor >= %d, found %d.%d", DIT_SCHEMA_MINOR_REUSE,
                            m->schema_major, m->schema_minor);
    DIT_RETURN_IF(dit_json_check_keys(&r, rkeys));
    int rmode = 0;
    DIT_RETURN_IF(dit_json_enum(&r, "mode", rmodes, &rmode));
    if (mode != 2 && mode != 4) {
      dit_json_t pf = at_key(&o, "cp_mode");
      return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT, "reuse needs cp_mode \"ring\" or \"usp\", found \"%s\"", modes[mode]);
    }
    /* Under usp the groups partition the cp / U ranks of each ring subgroup (U: "ulysses", usp only). */
    m->topology.reuse_ulysses = 1;
    if (mode == 4 || dit_json_has(&r, "ulysses")) {
      DIT_RETURN_IF(dit_json_i32(&r, "ulysses", 2, MF_MAX_WORLD, &m->topology.reuse_ulysses));
      dit_json_t pf = at_key(&r, "ulysses");
      if (mode != 4) return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT, "a Ulysses degree needs cp_mode \"usp\", found \"%s\"", modes[mode]);
      if (m->topology.cp % m->topology.reuse_ulysses || m->topology.cp / m->topology.reuse_ulysses < 2)
        return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT, "expected a divisor of cp %d leaving a ring of >= 2, found %d", m->topology.cp,
                              m->topology.reuse_ulysses);
    }
    const int members = m->topology.cp / m->topology.reuse_ulysses;
    DIT_RETURN_IF(dit_json_i32(&r, "group", 1, MF_MAX_WORLD, &m->topology.reuse_group));
    if (members % m->topology.reuse_group || members / m->topology.reuse_group < 2) {
      dit_json_t pf = at_key(&r, "group");
      if (mode != 4)
        return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT, "expected a divisor of cp %d leaving >= 2 groups, found %d", m->topology.cp,
                              m->topology.reuse_group);
      return dit_json_error(&pf, DIT_CODE_INVALID_ARGUMENT,
                            "expected a divisor of the %d ring members (cp %d / ulysses %d) leaving >= 2 groups, found %d", members,
                            m->topology.cp, m->topology.reuse_ulysses, m->topology.reuse_group);
    }
    DIT_RETURN_IF(dit_json_i32(&r, "layers", 1, 1 << 16, &m->topology.reuse_layers));
    DIT_RETURN_IF(dit_json_i32(&r, "copies", 1, 2, &m->topology.reuse_copies));
    /* merge and cache_bytes came after the first 1.3 bundles: absent, one state per group. */
    m->topology.reuse_merge = 1;
    if (dit_json_has(&r, "merge"))
      DIT_RETURN_IF(dit_json_i32(&r, "merge", 1, members / m->topology.reuse_group - 1, &m->topology.reuse_merge));
    if (dit_json_has(&r, "cache_bytes")) DIT_RETURN_IF(dit_json_u64(&r, "cache_bytes", &m->topology.reuse_cache_bytes));
  }
  return DIT_OK;
}

/* A free-form member kept as a tree: it must be an object that canonicalizes (no value the
 * identity hash cannot represent). */
static dit_status_t check_tree(const dit_json_t *root, const char *key) {
  dit_json_t o;
  char *canon = NULL;
  DIT_RETURN_IF(dit_json_object(root, key, &o));
  dit_status_t st = dit_json_canonical(o.v, &canon);
  free(canon);
  if (st) return dit_status_annotate(st, "%s: field '%s'", root->what, key);
  return DIT_OK;
}

/* The optional shape.tile (schema 1.5): windows that cover the full width exactly, the latent's
 * width one window's. */
static dit_status_t parse_tile(const dit_json_t *shape, dit_manifest_t *m) {
  static const char *const keys[] = {"count", "full", "halo", NULL};
  dit_json_t t;
  DIT_RETURN_IF(dit_json_object(shape, "tile", &t));
  if (m->schema_minor < DIT_SCHEMA_MINOR_TILES)
    return dit_json_error(&t, DIT_CODE_INVALID_ARGUMENT, "needs schema minor >= %d, found %d.%d", DIT_SCHEMA_MINOR_TILES,
                          m->schema_major, m->schema_minor);
  DIT_RETURN_IF(dit_json_check_keys(&t, keys));
  DIT_RETURN_IF(dit_json_int(&t, "count", 1, 1 << 16, &m->shape.tile_count));
  DIT_RETURN_IF(dit_json_int(&t, "full", 1, MF_MAX_SAFE, &m->shape.tile_full));
  DIT_RETURN_IF(dit_json_int(&t, "halo", 0, MF_MAX_SAFE, &m->shape.tile_halo));
  int64_t o, lo, hi;
  if (!dit_vae_tile_span(m->shape.tile_count, m->shape.tile_full, m->shape.latent[3], m->shape.tile_halo, 0, &o, &lo, &hi))
    return dit_json_error(&t, DIT_CODE_INVALID_ARGUMENT, "%" PRId64 " windows of shape.latent's width %" PRId64 " with halo %" PRId64
                          " do not cover %" PRId64 " columns exactly (expected a window of at least %" PRId64 ")", m->shape.tile_count,
                          m->shape.latent[3], m->shape.tile_halo, m->shape.tile_full,
                          dit_vae_tile_window(m->shape.tile_count, m->shape.tile_full, m->shape.tile_halo));
  return DIT_OK;
}

int64_t dit_vae_tile_window(int64_t count, int64_t full, int64_t halo) {
  if (count < 1 || full < 1 || halo < 0 || (count > 1 && count > full - 2 * halo)) return 0;
  const int64_t w = (full + 2 * halo * (count - 1) + count - 1) / count;
  return w <= full && (count == 1 || w > 2 * halo) ? w : 0;
}

int dit_vae_tile_span(int64_t count, int64_t full, int64_t window, int64_t halo, int64_t i, int64_t *offset, int64_t *lo, int64_t *hi) {
  if (count < 1 || i < 0 || i >= count || window < 1 || window > full || halo < 0 || (count > 1 && window <= 2 * halo) ||
      count * window - 2 * halo * (count - 1) < full)
    return 0;
  /* Evenly spaced offsets step at most window - 2 * halo, so each window's exact part reaches the
   * next one's. */
  const int64_t step_num = full - window, den = count > 1 ? count - 1 : 1;
  *offset = i * step_num / den;
  *lo = i ? *offset + halo : 0;
  *hi = i + 1 < count ? (i + 1) * step_num / den + halo : full;
  return 1;
}

/* A text encoder stage's optional argument, output and padding (schema 1.6): the three together,
 * the argument made by no earlier stage. */
static dit_status_t parse_stage_feed(const dit_json_t *e, const dit_manifest_t *m, size_t i, dit_manifest_stage_t *st,
                                     const char *const *paddings) {
  const int n = dit_json_has(e, "argument") + dit_json_has(e, "output") + dit_json_has(e, "padding");
  if (!n) return DIT_OK;
  dit_json_t pr = at_key(e, dit_json_has(e, "argument") ? "argument" : dit_json_has(e, "output") ? "output" : "padding");
  if (m->schema_minor < DIT_SCHEMA_MINOR_FEEDS)
    return dit_json_error(&pr, DIT_CODE_INVALID_ARGUMENT, "needs schema minor >= %d, found %d.%d", DIT_SCHEMA_MINOR_FEEDS,
                          m->schema_major, m->schema_minor);
  if (n != 3)
    return dit_json_error(&pr, DIT_CODE_INVALID_ARGUMENT, "expected argument, output and padding together (the generate argument the "
                          "stage makes, from which output, how)");
  if (strncmp(st->role, "text_encoder", 12))
    return dit_json_error(&pr, DIT_CODE_INVALID_ARGUMENT, "role \"%s\" makes no generate argument (only a text encoder does)", st->role);
  DIT_RETURN_IF(dit_json_str_copy(e, "argument", st->argument, sizeof st->argument, false));
  DIT_RETURN_IF(dit_json_str_copy(e, "output", st->output, sizeof st->output, false));
  int k = 0;
  DIT_RETURN_IF(dit_json_enum(e, "padding", paddings, &k));
  st->padding = k;
  const int later = dit_json_has(e, "template") || dit_json_has(e, "drop") || dit_json_has(e, "mask_argument") || k == DIT_PADDING_MASKED;
  if (later && m->schema_minor < DIT_SCHEMA_MINOR_IMAGE) {
    pr = at_key(e, k == DIT_PADDING_MASKED ? "padding" : dit_json_has(e, "template") ? "template" : dit_json_has(e, "drop") ? "drop" : "mask_argument");
    return dit_json_error(&pr, DIT_CODE_INVALID_ARGUMENT, "needs schema minor >= %d, found %d.%d", DIT_SCHEMA_MINOR_IMAGE, m->schema_major,
                          m->schema_minor);
  }
  if (dit_json_has(e, "template")) {
    DIT_RETURN_IF(dit_json_str_copy(e, "template", st->prompt_template, sizeof st->prompt_template, false));
    const char *at = strstr(st->prompt_template, "{}");
    if (!at || strstr(at + 2, "{}")) {
      pr = at_key(e, "template");
      return dit_json_error(&pr, DIT_CODE_INVALID_ARGUMENT, "expected one \"{}\" where the prompt goes, found %s", at ? "two" : "none");
    }
  }
  if (dit_json_has(e, "drop")) DIT_RETURN_IF(dit_json_int(e, "drop", 0, 1 << 20, &st->drop));
  if (dit_json_has(e, "mask_argument")) DIT_RETURN_IF(dit_json_str_copy(e, "mask_argument", st->mask_argument, sizeof st->mask_argument, false));
  pr = at_key(e, "argument");
  for (size_t j = 0; j < i; j++)
    if (!strcmp(m->stages[j].argument, st->argument) || !strcmp(m->stages[j].mask_argument, st->argument) ||
        (st->mask_argument[0] && (!strcmp(m->stages[j].argument, st->mask_argument) || !strcmp(m->stages[j].mask_argument, st->mask_argument))))
      return dit_json_error(&pr, DIT_CODE_INVALID_ARGUMENT, "\"%s\" is made by stages[%zu] too: each argument comes from one stage",
                            st->mask_argument[0] && strcmp(m->stages[j].argument, st->argument) && strcmp(m->stages[j].mask_argument, st->argument)
                                ? st->mask_argument : st->argument, j);
  if (st->mask_argument[0] && !strcmp(st->mask_argument, st->argument))
    return dit_json_error(&pr, DIT_CODE_INVALID_ARGUMENT, "\"%s\" is the stage's mask_argument too", st->argument);
  return DIT_OK;
}

/* The optional stages section (schema 1.4): 1..DIT_MAX_STAGES entries, each role at most once. */
static dit_status_t parse_stages(const dit_json_t *root, dit_manifest_t *m) {
  static const char *const keys[] = {"role", "identity", "family", "class", "argument", "output", "padding", "template", "drop",
                                     "mask_argument", "window_stride", NULL};
  static const char *const roles[] = {"text_encoder", "vae_decoder", "vae_decoder_first", "vae_decoder_head", "text_encoder_2",
                                      "vae_encoder", "vae_encoder_first", "image_encoder", "vae_decoder_last", NULL};
  dit_json_t a, e;
  size_t n;
  DIT_RETURN_IF(dit_json_array(root, "stages", DIT_MAX_STAGES, &a, &n));
  if (m->schema_minor < DIT_SCHEMA_MINOR_STAGES)
    return dit_json_error(&a, DIT_CODE_INVALID_ARGUMENT, "needs schema minor >= %d, found %d.%d", DIT_SCHEMA_MINOR_STAGES,
                          m->schema_major, m->schema_minor);
  if (!n) return dit_json_error(&a, DIT_CODE_INVALID_ARGUMENT, "expected at least one stage (a bundle without stages has no section)");
  dit_json_iter_t it;
  size_t i = 0;
  dit_json_iter_init(&a, &it);
  for (; dit_json_iter_next(&it, &e); i++) {
    dit_manifest_stage_t *st = &m->stages[i];
    DIT_RETURN_IF(dit_json_expect_object(&e));
    DIT_RETURN_IF(dit_json_check_keys(&e, keys));
    int role = 0;
    DIT_RETURN_IF(dit_json_enum(&e, "role", roles, &role));
    snprintf(st->role, sizeof st->role, "%s", roles[role]);
    const int need = dit_manifest_stage_minor(st->role);
    if (m->schema_minor < need) {
      dit_json_t pr = at_key(&e, "role");
      return dit_json_error(&pr, DIT_CODE_INVALID_ARGUMENT, "role \"%s\" needs schema minor >= %d, found %d.%d", st->role, need,
                            m->schema_major, m->schema_minor);
    }
    for (size_t j = 0; j < i; j++)
      if (!strcmp(m->stages[j].role, st->role)) {
        dit_json_t pr = at_key(&e, "role");
        return dit_json_error(&pr, DIT_CODE_INVALID_ARGUMENT, "duplicate of stages[%zu].role \"%s\"", j, st->role);
      }
    DIT_RETURN_IF(get_hash(&e, "identity", st->identity));
    DIT_RETURN_IF(dit_json_str_copy(&e, "family", st->family, sizeof st->family, false));
    DIT_RETURN_IF(dit_json_str_copy(&e, "class", st->model_class, sizeof st->model_class, false));
    DIT_RETURN_IF(parse_stage_feed(&e, m, i, st, dit_padding_names));
    if (dit_json_has(&e, "window_stride")) {
      dit_json_t pr = at_key(&e, "window_stride");
      if (m->schema_minor < DIT_SCHEMA_MINOR_WINDOWS)
        return dit_json_error(&pr, DIT_CODE_INVALID_ARGUMENT, "needs schema minor >= %d, found %d.%d", DIT_SCHEMA_MINOR_WINDOWS,
                              m->schema_major, m->schema_minor);
      if (strcmp(st->role, "vae_decoder"))
        return dit_json_error(&pr, DIT_CODE_INVALID_ARGUMENT, "role \"%s\" decodes no windows (only a vae_decoder stage does)", st->role);
      DIT_RETURN_IF(dit_json_int(&e, "window_stride", 1, 1 << 20, &st->window_stride));
    }
  }
  m->n_stages = n;
  return DIT_OK;
}

static dit_status_t parse_root(const dit_json_t *root, dit_manifest_t *m) {
  static const char *const top_keys[] = {"format", "schema", "identity", "inputs", "model",
                                         "target", "topology", "shape", "dtype", "io",
                                         "blobs", "weights", "ranks", "memory", "summary",
                                         "experts", "generate", "stages", NULL};
  static const char *const model_keys[] = {"family", "class", "variant", NULL};
  static const char *const target_keys[] = {"arch", "min_driver", NULL};
  static const char *const shape_keys[] = {"batch", "frames", "height", "width",
                                           "text_len", "latent", "tile", NULL};
  static const char *const io_keys[] = {"inputs", "outputs", NULL};
  static const char *const mem_keys[] = {"arena_bytes", "weight_bytes", "peak_bytes", NULL};
  dit_json_t o, v;
  const char *s = NULL;

  DIT_RETURN_IF(dit_json_get(root, "format", &v));
  DIT_RETURN_IF(dit_json_as_str(&v, MF_MAX_NAME, true, &s));
  if (strcmp(s, "ditc-bundle") != 0) {
    char q[96];
    dit_json_quote(s, q);
    return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected \"ditc-bundle\", found %s", q);
  }
  DIT_RETURN_IF(parse_schema(root, m));
  DIT_RETURN_IF(dit_json_check_keys(root, top_keys));
  DIT_RETURN_IF(get_hash(root, "identity", m->identity));
  DIT_RETURN_IF(check_tree(root, "inputs"));

  DIT_RETURN_IF(dit_json_object(root, "model", &o));
  DIT_RETURN_IF(dit_json_check_keys(&o, model_keys));
  DIT_RETURN_IF(dit_json_str_copy(&o, "family", m->family, sizeof m->family, false));
  DIT_RETURN_IF(dit_json_str_copy(&o, "class", m->model_class, sizeof m->model_class, false));
  DIT_RETURN_IF(dit_json_str_copy(&o, "variant", m->variant, sizeof m->variant, true));

  DIT_RETURN_IF(dit_json_object(root, "target", &o));
  DIT_RETURN_IF(dit_json_check_keys(&o, target_keys));
  DIT_RETURN_IF(dit_json_str_copy(&o, "arch", m->arch, sizeof m->arch, false));
  DIT_RETURN_IF(dit_json_int(&o, "min_driver", 0, MF_MAX_SAFE, &m->min_driver));

  DIT_RETURN_IF(parse_topology(root, m));

  DIT_RETURN_IF(dit_json_object(root, "shape", &o));
  DIT_RETURN_IF(dit_json_check_keys(&o, shape_keys));
  DIT_RETURN_IF(dit_json_int(&o, "batch", 0, MF_MAX_SAFE, &m->shape.batch));
  DIT_RETURN_IF(dit_json_int(&o, "frames", 0, MF_MAX_SAFE, &m->shape.frames));
  DIT_RETURN_IF(dit_json_int(&o, "height", 0, MF_MAX_SAFE, &m->shape.height));
  DIT_RETURN_IF(dit_json_int(&o, "width", 0, MF_MAX_SAFE, &m->shape.width));
  DIT_RETURN_IF(dit_json_int(&o, "text_len", 0, MF_MAX_SAFE, &m->shape.text_len));
  dit_json_t lat;
  size_t nl;
  DIT_RETURN_IF(dit_json_array(&o, "latent", 1u << 20, &lat, &nl));
  if (nl != 4)
    return dit_json_error(&lat, DIT_CODE_INVALID_ARGUMENT, "expected 4 entries [C, f, h, w], found %zu", nl);
  DIT_RETURN_IF(dit_json_as_int_array(&lat, 4, 0, MF_MAX_SAFE, m->shape.latent, &nl));
  if (dit_json_has(&o, "tile")) DIT_RETURN_IF(parse_tile(&o, m));

  DIT_RETURN_IF(get_dtype(root, "dtype", &m->dtype));

  DIT_RETURN_IF(dit_json_object(root, "io", &o));
  DIT_RETURN_IF(dit_json_check_keys(&o, io_keys));
  DIT_RETURN_IF(parse_io_list(&o, "inputs", &m->n_inputs, &m->io_inputs));
  DIT_RETURN_IF(parse_io_list(&o, "outputs", &m->n_outputs, &m->io_outputs));

  kidx_t *blob_index = NULL, *weights_index = NULL;
  dit_status_t st = parse_blobs(root, m, &blob_index);
  if (!st) st = parse_weights(root, m, blob_index, &weights_index);
  if (!st) st = parse_ranks(root, m, blob_index, weights_index);
  if (!st && dit_json_has(root, "experts")) st = parse_experts(root, m, blob_index, weights_index);
  free(blob_index);
  free(weights_index);
  DIT_RETURN_IF(st);

  DIT_RETURN_IF(dit_json_object(root, "memory", &o));
  DIT_RETURN_IF(dit_json_check_keys(&o, mem_keys));
  DIT_RETURN_IF(dit_json_u64(&o, "arena_bytes", &m->arena_bytes));
  DIT_RETURN_IF(dit_json_u64(&o, "weight_bytes", &m->weight_bytes));
  DIT_RETURN_IF(dit_json_u64(&o, "peak_bytes", &m->peak_bytes));

  if (dit_json_has(root, "summary")) DIT_RETURN_IF(check_tree(root, "summary"));
  if (dit_json_has(root, "generate")) DIT_RETURN_IF(parse_generate(root, m));
  if (dit_json_has(root, "stages")) DIT_RETURN_IF(parse_stages(root, m));
  return DIT_OK;
}

dit_status_t dit_manifest_parse(const char *text, size_t len, const char *what,
                                dit_manifest_t **out) {
  *out = NULL;
  dit_json_doc_t *doc = NULL;
  dit_json_t root;
  dit_manifest_t *m = NULL;
  dit_status_t s = dit_json_parse(text, len, what ? what : "manifest.json", &doc);
  if (!s) s = dit_json_root(doc, &root);
  if (!s) {
    m = calloc(1, sizeof *m);
    if (!m) s = oom(&root);
  }
  if (!s) s = parse_root(&root, m);
  if (!s) {
    /* inputs and summary stay trees for their readers: taken out of the validated document. */
    cJSON *tree = dit_json_doc_release(doc);
    m->inputs = cJSON_DetachItemFromObjectCaseSensitive(tree, "inputs");
    m->summary = cJSON_DetachItemFromObjectCaseSensitive(tree, "summary");
    cJSON_Delete(tree);
  }
  dit_json_doc_free(doc);
  if (s) {
    dit_manifest_free(m);
    return s;
  }
  *out = m;
  return DIT_OK;
}

void dit_manifest_free(dit_manifest_t *m) {
  if (!m) return;
  cJSON_Delete(m->inputs);
  cJSON_Delete(m->summary);
  free(m->io_inputs);
  free(m->io_outputs);
  free(m->blobs);
  for (size_t i = 0; m->weights && i < m->n_weights; i++) {
    for (size_t j = 0; m->weights[i].tensors && j < m->weights[i].n_tensors; j++)
      free(m->weights[i].tensors[j].name);
    free(m->weights[i].tensors);
  }
  free(m->weights);
  free(m->ranks);
  for (size_t i = 0; m->experts && i < m->n_experts; i++) free(m->experts[i].ranks);
  free(m->experts);
  free(m);
}

const dit_manifest_expert_t *dit_manifest_find_expert(const dit_manifest_t *m, const char *name) {
  if (!m) return NULL;
  if (!name) name = "transformer";
  for (size_t i = 0; m->experts && i < m->n_experts; i++)
    if (!strcmp(m->experts[i].name, name)) return &m->experts[i];
  return NULL;
}

const dit_manifest_rank_t *dit_manifest_expert_rank(const dit_manifest_t *m, const char *name, int r) {
  if (!m) return NULL;
  const dit_manifest_rank_t *v = m->ranks;
  size_t n = m->n_ranks;
  if (name && strcmp(name, "transformer")) {
    const dit_manifest_expert_t *x = dit_manifest_find_expert(m, name);
    if (!x) return NULL;
    v = x->ranks;
    n = x->n_ranks;
  }
  for (size_t i = 0; v && i < n; i++)
    if (v[i].rank == r) return &v[i];
  return NULL;
}

const char *const dit_padding_names[] = {"zeroed", "attended", "masked", NULL};

const dit_manifest_stage_t *dit_manifest_stage_for(const dit_manifest_t *m, const char *argument) {
  for (size_t i = 0; m && argument && argument[0] && i < m->n_stages; i++)
    if (!strcmp(m->stages[i].argument, argument) || !strcmp(m->stages[i].mask_argument, argument)) return &m->stages[i];
  return NULL;
}

int dit_manifest_stage_minor(const char *role) {
  static const struct {
    const char *role;
    int minor;
  } k[] = {{"text_encoder", DIT_SCHEMA_MINOR_STAGES},      {"vae_decoder", DIT_SCHEMA_MINOR_STAGES},
           {"vae_decoder_first", DIT_SCHEMA_MINOR_STAGES}, {"vae_decoder_head", DIT_SCHEMA_MINOR_TILES},
           {"text_encoder_2", DIT_SCHEMA_MINOR_FEEDS},     {"vae_encoder", DIT_SCHEMA_MINOR_IMAGE},
           {"vae_encoder_first", DIT_SCHEMA_MINOR_IMAGE},  {"image_encoder", DIT_SCHEMA_MINOR_IMAGE},
           {"vae_decoder_last", DIT_SCHEMA_MINOR_WINDOWS}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (!strcmp(k[i].role, role)) return k[i].minor;
  return -1;
}

int dit_manifest_blob_named(const char *role) {
  return !strcmp(role, "tokenizer") ? DIT_SCHEMA_MINOR_STAGES : !strcmp(role, "image_processor") ? DIT_SCHEMA_MINOR_IMAGE : -1;
}

const dit_manifest_stage_t *dit_manifest_find_stage(const dit_manifest_t *m, const char *role) {
  for (size_t i = 0; m && role && i < m->n_stages; i++)
    if (!strcmp(m->stages[i].role, role)) return &m->stages[i];
  return NULL;
}

const dit_manifest_blob_t *dit_manifest_find_blob(const dit_manifest_t *m, const char *hash) {
  if (!m || !hash) return NULL;
  for (size_t i = 0; i < m->n_blobs; i++)
    if (strcmp(m->blobs[i].hash, hash) == 0) return &m->blobs[i];
  return NULL;
}

const dit_manifest_weights_t *dit_manifest_find_weights(const dit_manifest_t *m,
                                                        const char *blob) {
  if (!m || !blob) return NULL;
  for (size_t i = 0; i < m->n_weights; i++)
    if (strcmp(m->weights[i].blob, blob) == 0) return &m->weights[i];
  return NULL;
}

uint64_t dit_manifest_weights_split(const dit_manifest_weights_t *w, uint64_t lo, uint64_t hi, uint64_t cut) {
  uint64_t split = hi;
  for (size_t t = 0; t < w->n_tensors; t++) {
    const dit_manifest_tensor_t *x = &w->tensors[t];
    if (x->offset >= lo && x->offset < hi && x->offset + x->nbytes > cut && x->offset < split) split = x->offset;
  }
  return split;
}
