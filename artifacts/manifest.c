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

/* Caps that keep a hostile manifest from making us allocate absurd amounts. They are far
 * above anything a real model needs (Wan 14B at tp 8 has ~10k tensors over all shards). */
#define MF_MAX_BLOBS (1u << 20)
#define MF_MAX_WEIGHTS (1u << 16)
#define MF_MAX_TENSORS (1u << 20) /* over all weights entries together */
#define MF_MAX_IO 1024u
#define MF_MAX_WORLD 65536
#define MF_MAX_NAME 4096u /* bytes in a tensor name */
#define MF_MAX_SAFE 9007199254740991.0 /* 2^53 - 1: every integer below is exact in JSON */
#define MF_PATH 192

/* ------------------------------------------------------------------------------------ */

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
    if (!FIXED_OK(b->role) || !FIXED_OK(b->hash) || !FIXED_OK(b->sha256))
      return DIT_ERR(INVALID_ARGUMENT, "manifest: blobs[%zu]: string field not terminated", i);
    jw_open(w, '{', 0);
    jw_kstr(w, "role", b->role);
    jw_kstr(w, "hash", b->hash);
    jw_ku64(w, "size", b->size);
    /* Optional: absent keeps manifests written before the field byte-identical. */
    if (b->sha256[0]) jw_kstr(w, "sha256", b->sha256);
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
/* Parser helpers. Errors read "<what>: field '<path>': <problem>". */

typedef struct {
  const char *what;
} pctx_t;

static dit_status_t ferr(const pctx_t *c, dit_code_t code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static dit_status_t ferr(const pctx_t *c, dit_code_t code, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dit_status_t s = dit_status_makev(code, fmt, ap);
  va_end(ap);
  return dit_status_annotate(s, "%s: field '%s'", c->what, path);
}

/* Field paths only label messages, so one that does not fit is cut short, not an error. */
static void pathf(char out[MF_PATH], const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pathf(char out[MF_PATH], const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, MF_PATH, fmt, ap);
  va_end(ap);
}

static void path_key(char out[MF_PATH], const char *base, const char *key) {
  if (base[0])
    pathf(out, "%s.%s", base, key);
  else
    pathf(out, "%s", key);
}

static void path_idx(char out[MF_PATH], const char *base, size_t i) {
  pathf(out, "%s[%zu]", base, i);
}

static const char *type_name(const cJSON *v) {
  switch (v->type & 0xff) {
    case cJSON_NULL: return "null";
    case cJSON_False:
    case cJSON_True: return "a boolean";
    case cJSON_Number: return "a number";
    case cJSON_String: return "a string";
    case cJSON_Array: return "an array";
    case cJSON_Object: return "an object";
    default: return "an invalid value";
  }
}

/* A found string, quoted, escaped and cut short so a hostile value cannot flood a message. */
static void quote_short(const char *s, char out[96]) {
  size_t o = 0;
  out[o++] = '"';
  for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
    if (o > 80) {
      memcpy(out + o, "...", 3);
      o += 3;
      break;
    }
    if (*u < 32 || *u == '"' || *u == '\\' || *u >= 127)
      o += (size_t)snprintf(out + o, 96 - o, "\\x%02x", *u);
    else
      out[o++] = (char)*u;
  }
  out[o++] = '"';
  out[o] = 0;
}

static void fmt_num(double v, char out[40]) {
  if (v == trunc(v) && fabs(v) < 1e18)
    snprintf(out, 40, "%lld", (long long)v);
  else
    snprintf(out, 40, "%.17g", v);
}

static dit_status_t get_member(const pctx_t *c, const cJSON *obj, const char *base, const char *key,
                               const cJSON **out) {
  *out = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!*out) {
    char p[MF_PATH];
    path_key(p, base, key);
    return ferr(c, DIT_CODE_NOT_FOUND, p, "missing");
  }
  return DIT_OK;
}

static dit_status_t expect_type(const pctx_t *c, const cJSON *v, const char *path, int type,
                                const char *want) {
  if ((v->type & 0xff) != type)
    return ferr(c, DIT_CODE_INVALID_ARGUMENT, path, "expected %s, found %s", want, type_name(v));
  return DIT_OK;
}

static dit_status_t get_object(const pctx_t *c, const cJSON *obj, const char *base, const char *key,
                               const cJSON **out) {
  char p[MF_PATH];
  path_key(p, base, key);
  DIT_RETURN_IF(get_member(c, obj, base, key, out));
  return expect_type(c, *out, p, cJSON_Object, "an object");
}

/* Every member must be one of `allowed` (NULL-terminated): a misspelt or smuggled field is
 * an error rather than silently ignored. */
static dit_status_t check_keys(const pctx_t *c, const cJSON *obj, const char *base,
                               const char *const *allowed) {
  for (const cJSON *k = obj->child; k; k = k->next) {
    int ok = 0;
    for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, k->string) == 0;
    if (!ok) {
      char q[96];
      quote_short(k->string, q);
      return ferr(c, DIT_CODE_INVALID_ARGUMENT, base[0] ? base : "(top level)",
                  "unknown member %s", q);
    }
  }
  return DIT_OK;
}

static dit_status_t num_int(const pctx_t *c, const cJSON *v, const char *path, double lo, double hi,
                            int64_t *out) {
  DIT_RETURN_IF(expect_type(c, v, path, cJSON_Number, "an integer"));
  double d = v->valuedouble;
  char f[40];
  fmt_num(d, f);
  if (!isfinite(d) || d != trunc(d))
    return ferr(c, DIT_CODE_INVALID_ARGUMENT, path, "expected an integer, found %s", f);
  if (d < lo || d > hi) {
    char a[40], b[40];
    fmt_num(lo, a);
    fmt_num(hi, b);
    return ferr(c, DIT_CODE_OUT_OF_RANGE, path, "expected an integer in [%s, %s], found %s", a, b,
                f);
  }
  *out = (int64_t)d;
  return DIT_OK;
}

static dit_status_t get_int(const pctx_t *c, const cJSON *obj, const char *base, const char *key,
                            double lo, double hi, int64_t *out) {
  const cJSON *v;
  char p[MF_PATH];
  path_key(p, base, key);
  DIT_RETURN_IF(get_member(c, obj, base, key, &v));
  return num_int(c, v, p, lo, hi, out);
}

static dit_status_t get_i32(const pctx_t *c, const cJSON *obj, const char *base, const char *key,
                            int lo, int hi, int *out) {
  int64_t v;
  DIT_RETURN_IF(get_int(c, obj, base, key, lo, hi, &v));
  *out = (int)v;
  return DIT_OK;
}

static dit_status_t get_u64(const pctx_t *c, const cJSON *obj, const char *base, const char *key,
                            uint64_t *out) {
  int64_t v;
  DIT_RETURN_IF(get_int(c, obj, base, key, 0, MF_MAX_SAFE, &v));
  *out = (uint64_t)v;
  return DIT_OK;
}

static dit_status_t get_str(const pctx_t *c, const cJSON *obj, const char *base, const char *key,
                            size_t max_len, int allow_empty, const char **out) {
  const cJSON *v;
  char p[MF_PATH];
  path_key(p, base, key);
  DIT_RETURN_IF(get_member(c, obj, base, key, &v));
  DIT_RETURN_IF(expect_type(c, v, p, cJSON_String, "a string"));
  size_t n = strlen(v->valuestring);
  if (!n && !allow_empty) return ferr(c, DIT_CODE_INVALID_ARGUMENT, p, "must not be empty");
  if (n > max_len)
    return ferr(c, DIT_CODE_OUT_OF_RANGE, p, "expected at most %zu bytes, found %zu", max_len, n);
  *out = v->valuestring;
  return DIT_OK;
}

static dit_status_t get_str_fixed(const pctx_t *c, const cJSON *obj, const char *base,
                                  const char *key, char *dst, size_t cap, int allow_empty) {
  const char *s = NULL;
  DIT_RETURN_IF(get_str(c, obj, base, key, cap - 1, allow_empty, &s));
  memcpy(dst, s, strlen(s) + 1);
  return DIT_OK;
}

static dit_status_t get_hash(const pctx_t *c, const cJSON *obj, const char *base, const char *key,
                             char dst[DIT_HASH_HEX]) {
  const char *s = NULL;
  char p[MF_PATH];
  path_key(p, base, key);
  DIT_RETURN_IF(get_str(c, obj, base, key, MF_MAX_NAME, 1, &s));
  if (!dit_is_hash_hex(s)) {
    char q[96];
    quote_short(s, q);
    return ferr(c, DIT_CODE_INVALID_ARGUMENT, p, "expected 32 lowercase hex digits, found %s", q);
  }
  memcpy(dst, s, DIT_HASH_HEX);
  return DIT_OK;
}

static dit_status_t get_dtype(const pctx_t *c, const cJSON *obj, const char *base, const char *key,
                              dit_dtype_t *out) {
  const char *s = NULL;
  char p[MF_PATH];
  path_key(p, base, key);
  DIT_RETURN_IF(get_str(c, obj, base, key, MF_MAX_NAME, 1, &s));
  if (dit_dtype_parse(s, out) != 0) {
    char q[96];
    quote_short(s, q);
    return ferr(c, DIT_CODE_INVALID_ARGUMENT, p,
                "expected one of f32, bf16, f16, i64, i32, found %s", q);
  }
  return DIT_OK;
}

static dit_status_t get_array(const pctx_t *c, const cJSON *obj, const char *base, const char *key,
                              size_t max_n, const cJSON **out, size_t *out_n) {
  char p[MF_PATH];
  path_key(p, base, key);
  DIT_RETURN_IF(get_member(c, obj, base, key, out));
  DIT_RETURN_IF(expect_type(c, *out, p, cJSON_Array, "an array"));
  size_t n = 0;
  for (const cJSON *e = (*out)->child; e; e = e->next) {
    if (++n > max_n)
      return ferr(c, DIT_CODE_OUT_OF_RANGE, p, "more than %zu entries", max_n);
  }
  *out_n = n;
  return DIT_OK;
}

/* "shape": [d0, d1, ...] with rank <= DIT_MAX_RANK and 0 <= d < 2^53. */
static dit_status_t get_shape(const pctx_t *c, const cJSON *obj, const char *base, int *out_rank,
                              int64_t dims[DIT_MAX_RANK]) {
  const cJSON *a;
  size_t n;
  char p[MF_PATH], q[MF_PATH];
  path_key(p, base, "shape");
  DIT_RETURN_IF(get_array(c, obj, base, "shape", 1u << 20, &a, &n));
  if (n > DIT_MAX_RANK)
    return ferr(c, DIT_CODE_OUT_OF_RANGE, p, "rank %zu exceeds the maximum %d", n, DIT_MAX_RANK);
  size_t i = 0;
  for (const cJSON *e = a->child; e; e = e->next, i++) {
    path_idx(q, p, i);
    DIT_RETURN_IF(num_int(c, e, q, 0, MF_MAX_SAFE, &dims[i]));
  }
  for (; i < DIT_MAX_RANK; i++) dims[i] = 0;
  *out_rank = (int)n;
  return DIT_OK;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Pre-pass over the whole document: duplicate keys anywhere (cJSON keeps both and a lookup
 * would silently pick the first) and numbers that overflowed to infinity. */
static dit_status_t walk_doc(const pctx_t *c, const cJSON *v, char *path, size_t len, size_t cap) {
  if ((v->type & 0xff) == cJSON_Number && !isfinite(v->valuedouble))
    return ferr(c, DIT_CODE_OUT_OF_RANGE, len ? path : "(top level)",
                "number outside the range of a double");
  if ((v->type & 0xff) == cJSON_Object) {
    size_t n = 0;
    for (const cJSON *k = v->child; k; k = k->next) n++;
    if (n > 1) {
      const char **keys = malloc(n * sizeof *keys);
      if (!keys) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", c->what);
      size_t i = 0;
      for (const cJSON *k = v->child; k; k = k->next) keys[i++] = k->string;
      qsort(keys, n, sizeof *keys, cmp_str);
      const char *dup = NULL;
      for (i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) dup = keys[i];
      dit_status_t s = DIT_OK;
      if (dup) {
        char q[96];
        quote_short(dup, q);
        s = ferr(c, DIT_CODE_INVALID_ARGUMENT, len ? path : "(top level)", "duplicate key %s", q);
      }
      free(keys);
      if (s) return s;
    }
  }
  size_t i = 0;
  for (const cJSON *k = v->child; k; k = k->next, i++) {
    int n = (v->type & 0xff) == cJSON_Object
                ? snprintf(path + len, cap - len, len ? ".%s" : "%s", k->string)
                : snprintf(path + len, cap - len, "[%zu]", i);
    size_t nl = n < 0 ? len : len + (size_t)n;
    if (nl >= cap) nl = cap - 1; /* the path is only for messages; cut it short */
    dit_status_t s = walk_doc(c, k, path, nl, cap);
    path[len] = 0;
    if (s) return s;
  }
  return DIT_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Parser proper. */

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

static dit_status_t parse_schema(const pctx_t *c, const cJSON *root, dit_manifest_t *m) {
  static const char *const keys[] = {"major", "minor", NULL};
  const cJSON *o;
  int64_t major, minor;
  DIT_RETURN_IF(get_object(c, root, "", "schema", &o));
  DIT_RETURN_IF(get_int(c, o, "schema", "major", 0, 1e9, &major));
  /* A different major may mean anything at all below, so it is reported before any other
   * field is looked at. */
  if (major != DIT_SCHEMA_MAJOR)
    return DIT_ERR(FAILED_PRECONDITION, "%s: schema major %" PRId64 " is %s than this build's %d%s",
                   c->what, major, major > DIT_SCHEMA_MAJOR ? "newer" : "older", DIT_SCHEMA_MAJOR,
                   major > DIT_SCHEMA_MAJOR ? "; update ditrun" : "; recompile the bundle");
  DIT_RETURN_IF(get_int(c, o, "schema", "minor", 0, 1e9, &minor));
  if (minor > DIT_SCHEMA_MINOR)
    return DIT_ERR(FAILED_PRECONDITION, "%s: schema %" PRId64 ".%" PRId64
                   " is newer than this build's %d.%d; update ditrun",
                   c->what, major, minor, DIT_SCHEMA_MAJOR, DIT_SCHEMA_MINOR);
  DIT_RETURN_IF(check_keys(c, o, "schema", keys));
  m->schema_major = (int)major;
  m->schema_minor = (int)minor;
  return DIT_OK;
}

static dit_status_t parse_io_list(const pctx_t *c, const cJSON *io, const char *key, size_t *out_n,
                                  dit_manifest_io_t **out) {
  static const char *const keys[] = {"name", "dtype", "shape", NULL};
  const cJSON *a;
  size_t n;
  char base[MF_PATH], p[MF_PATH];
  path_key(base, "io", key);
  DIT_RETURN_IF(get_array(c, io, "io", key, MF_MAX_IO, &a, &n));
  if (n) {
    *out = calloc(n, sizeof **out);
    if (!*out) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", c->what);
  }
  *out_n = n;
  size_t i = 0;
  for (const cJSON *e = a->child; e; e = e->next, i++) {
    dit_manifest_io_t *t = &(*out)[i];
    path_idx(p, base, i);
    DIT_RETURN_IF(expect_type(c, e, p, cJSON_Object, "an object"));
    DIT_RETURN_IF(check_keys(c, e, p, keys));
    DIT_RETURN_IF(get_str_fixed(c, e, p, "name", t->name, sizeof t->name, 0));
    DIT_RETURN_IF(get_dtype(c, e, p, "dtype", &t->dtype));
    DIT_RETURN_IF(get_shape(c, e, p, &t->rank, t->dims));
    /* n <= MF_MAX_IO, so the quadratic scan is bounded. */
    for (size_t j = 0; j < i; j++) {
      if (strcmp((*out)[j].name, t->name) == 0) {
        char q[96], pn[MF_PATH];
        quote_short(t->name, q);
        path_key(pn, p, "name");
        return ferr(c, DIT_CODE_INVALID_ARGUMENT, pn, "duplicate name %s (also %s[%zu])", q, base, j);
      }
    }
  }
  return DIT_OK;
}

static dit_status_t parse_blobs(const pctx_t *c, const cJSON *root, dit_manifest_t *m,
                                kidx_t **out_index) {
  static const char *const keys[] = {"role", "hash", "size", "sha256", NULL};
  const cJSON *a;
  size_t n;
  char p[MF_PATH];
  DIT_RETURN_IF(get_array(c, root, "", "blobs", MF_MAX_BLOBS, &a, &n));
  if (n) {
    m->blobs = calloc(n, sizeof *m->blobs);
    *out_index = calloc(n, sizeof **out_index);
    if (!m->blobs || !*out_index) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", c->what);
  }
  m->n_blobs = n;
  size_t i = 0;
  for (const cJSON *e = a->child; e; e = e->next, i++) {
    dit_manifest_blob_t *b = &m->blobs[i];
    path_idx(p, "blobs", i);
    DIT_RETURN_IF(expect_type(c, e, p, cJSON_Object, "an object"));
    DIT_RETURN_IF(check_keys(c, e, p, keys));
    const char *role = NULL;
    DIT_RETURN_IF(get_str(c, e, p, "role", MF_MAX_NAME, 1, &role));
    if (strcmp(role, "plan") && strcmp(role, "weights") && strcmp(role, "kernels")) {
      char q[96], pr[MF_PATH];
      quote_short(role, q);
      path_key(pr, p, "role");
      return ferr(c, DIT_CODE_INVALID_ARGUMENT, pr, "expected one of plan, weights, kernels, found %s",
                  q);
    }
    snprintf(b->role, sizeof b->role, "%s", role);
    DIT_RETURN_IF(get_hash(c, e, p, "hash", b->hash));
    DIT_RETURN_IF(get_u64(c, e, p, "size", &b->size));
    /* Optional: the store adds it for remote pulls. Absent stays "" and is not printed, so
     * manifests without it keep their bytes. */
    if (cJSON_GetObjectItemCaseSensitive(e, "sha256")) {
      const char *sha = NULL;
      char ps[MF_PATH];
      path_key(ps, p, "sha256");
      DIT_RETURN_IF(get_str(c, e, p, "sha256", MF_MAX_NAME, 1, &sha));
      size_t k = 0;
      while (k < 64 && ((sha[k] >= '0' && sha[k] <= '9') || (sha[k] >= 'a' && sha[k] <= 'f'))) k++;
      if (k != 64 || sha[64]) {
        char q[96];
        quote_short(sha, q);
        return ferr(c, DIT_CODE_INVALID_ARGUMENT, ps, "expected 64 lowercase hex digits, found %s", q);
      }
      memcpy(b->sha256, sha, DIT_SHA256_HEX);
    }
    (*out_index)[i].key = b->hash;
    (*out_index)[i].idx = i;
  }
  if (n > 1) qsort(*out_index, n, sizeof **out_index, cmp_kidx);
  for (i = 1; i < n; i++) {
    if (strcmp((*out_index)[i - 1].key, (*out_index)[i].key) == 0) {
      char ph[MF_PATH];
      path_idx(p, "blobs", (*out_index)[i].idx);
      path_key(ph, p, "hash");
      return ferr(c, DIT_CODE_INVALID_ARGUMENT, ph, "duplicate of blobs[%zu] (%s)",
                  (*out_index)[i - 1].idx, (*out_index)[i].key);
    }
  }
  return DIT_OK;
}

/* `hash` must be listed in blobs[] with role `role`. */
static dit_status_t check_blob_ref(const pctx_t *c, const dit_manifest_t *m, const kidx_t *index,
                                   const char *path, const char *hash, const char *role) {
  const kidx_t *k = kidx_find(index, m->n_blobs, hash);
  if (!k) return ferr(c, DIT_CODE_NOT_FOUND, path, "blob %s is not listed in blobs[]", hash);
  const dit_manifest_blob_t *b = &m->blobs[k->idx];
  if (strcmp(b->role, role) != 0)
    return ferr(c, DIT_CODE_INVALID_ARGUMENT, path,
                "blob %s is listed in blobs[%zu] with role '%s', expected role '%s'", hash, k->idx,
                b->role, role);
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

static dit_status_t parse_tensor(const pctx_t *c, const cJSON *e, const char *p,
                                 dit_manifest_tensor_t *t, uint64_t blob_size, const char *blob) {
  static const char *const keys[] = {"name", "dtype", "shape", "offset", "nbytes", NULL};
  char pf[MF_PATH];
  DIT_RETURN_IF(expect_type(c, e, p, cJSON_Object, "an object"));
  DIT_RETURN_IF(check_keys(c, e, p, keys));
  const char *name = NULL;
  DIT_RETURN_IF(get_str(c, e, p, "name", MF_MAX_NAME, 0, &name));
  t->name = strdup(name);
  if (!t->name) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", c->what);
  DIT_RETURN_IF(get_dtype(c, e, p, "dtype", &t->dtype));
  DIT_RETURN_IF(get_shape(c, e, p, &t->rank, t->dims));
  DIT_RETURN_IF(get_u64(c, e, p, "offset", &t->offset));
  DIT_RETURN_IF(get_u64(c, e, p, "nbytes", &t->nbytes));
  if (t->offset % DIT_WEIGHT_ALIGN != 0) {
    path_key(pf, p, "offset");
    return ferr(c, DIT_CODE_INVALID_ARGUMENT, pf, "expected a multiple of %d, found %" PRIu64,
                DIT_WEIGHT_ALIGN, t->offset);
  }
  /* Every factor is below 2^53, so one overflow check per step keeps the product exact. */
  uint64_t want = dit_dtype_size(t->dtype);
  int over = 0;
  for (int i = 0; i < t->rank && !over; i++)
    over = __builtin_mul_overflow(want, (uint64_t)t->dims[i], &want) || want > (uint64_t)MF_MAX_SAFE;
  if (over) {
    path_key(pf, p, "shape");
    return ferr(c, DIT_CODE_OUT_OF_RANGE, pf, "the tensor would exceed 2^53 bytes");
  }
  if (t->nbytes != want) {
    path_key(pf, p, "nbytes");
    return ferr(c, DIT_CODE_INVALID_ARGUMENT, pf,
                "expected %" PRIu64 " (shape elements x %zu-byte %s), found %" PRIu64, want,
                dit_dtype_size(t->dtype), dit_dtype_name(t->dtype), t->nbytes);
  }
  if (t->offset > blob_size || t->nbytes > blob_size - t->offset)
    return ferr(c, DIT_CODE_OUT_OF_RANGE, p,
                "bytes [%" PRIu64 ", %" PRIu64 ") extend past the end of blob %s (%" PRIu64
                " bytes)",
                t->offset, t->offset + t->nbytes, blob, blob_size);
  return DIT_OK;
}

/* Names unique and byte ranges disjoint within one weights entry. */
static dit_status_t check_layout(const pctx_t *c, const char *base, const dit_manifest_weights_t *w) {
  size_t n = w->n_tensors;
  if (n < 2) return DIT_OK;
  dit_status_t s = DIT_OK;
  char p[MF_PATH], pn[MF_PATH];
  kidx_t *names = malloc(n * sizeof *names);
  span_t *spans = malloc(n * sizeof *spans);
  if (!names || !spans) {
    s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", c->what);
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
      quote_short(names[i].key, q);
      pathf(pn, "%s.tensors[%zu].name", base, names[i].idx);
      s = ferr(c, DIT_CODE_INVALID_ARGUMENT, pn, "duplicate name %s (also tensors[%zu])", q,
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
      pathf(p, "%s.tensors[%zu]", base, cur->idx);
      s = ferr(c, DIT_CODE_INVALID_ARGUMENT, p,
               "bytes [%" PRIu64 ", %" PRIu64 ") overlap tensors[%zu] at [%" PRIu64 ", %" PRIu64 ")",
               cur->offset, cur->end, reach->idx, reach->offset, reach->end);
    }
    if (!reach || cur->end > reach->end) reach = cur;
  }
done:
  free(names);
  free(spans);
  return s;
}

static dit_status_t parse_weights(const pctx_t *c, const cJSON *root, dit_manifest_t *m,
                                  const kidx_t *blob_index, kidx_t **out_index) {
  static const char *const keys[] = {"blob", "tp_rank", "tp_size", "tensors", NULL};
  const cJSON *a;
  size_t n, total = 0;
  char p[MF_PATH], pf[MF_PATH], pt[MF_PATH];
  DIT_RETURN_IF(get_array(c, root, "", "weights", MF_MAX_WEIGHTS, &a, &n));
  if (n) {
    m->weights = calloc(n, sizeof *m->weights);
    *out_index = calloc(n, sizeof **out_index);
    if (!m->weights || !*out_index) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", c->what);
  }
  m->n_weights = n;
  size_t i = 0;
  for (const cJSON *e = a->child; e; e = e->next, i++) {
    dit_manifest_weights_t *w = &m->weights[i];
    path_idx(p, "weights", i);
    DIT_RETURN_IF(expect_type(c, e, p, cJSON_Object, "an object"));
    DIT_RETURN_IF(check_keys(c, e, p, keys));
    DIT_RETURN_IF(get_hash(c, e, p, "blob", w->blob));
    path_key(pf, p, "blob");
    DIT_RETURN_IF(check_blob_ref(c, m, blob_index, pf, w->blob, "weights"));
    uint64_t blob_size = m->blobs[kidx_find(blob_index, m->n_blobs, w->blob)->idx].size;
    DIT_RETURN_IF(get_i32(c, e, p, "tp_size", 1, MF_MAX_WORLD, &w->tp_size));
    DIT_RETURN_IF(get_i32(c, e, p, "tp_rank", 0, w->tp_size - 1, &w->tp_rank));
    const cJSON *ta;
    size_t nt;
    DIT_RETURN_IF(get_array(c, e, p, "tensors", MF_MAX_TENSORS, &ta, &nt));
    total += nt;
    if (total > MF_MAX_TENSORS)
      return ferr(c, DIT_CODE_OUT_OF_RANGE, "weights", "more than %u tensors in all entries",
                  MF_MAX_TENSORS);
    if (nt) {
      w->tensors = calloc(nt, sizeof *w->tensors);
      if (!w->tensors) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", c->what);
    }
    w->n_tensors = nt;
    size_t j = 0;
    for (const cJSON *te = ta->child; te; te = te->next, j++) {
      pathf(pt, "%s.tensors[%zu]", p, j);
      DIT_RETURN_IF(parse_tensor(c, te, pt, &w->tensors[j], blob_size, w->blob));
    }
    DIT_RETURN_IF(check_layout(c, p, w));
    (*out_index)[i].key = w->blob;
    (*out_index)[i].idx = i;
  }
  if (n > 1) qsort(*out_index, n, sizeof **out_index, cmp_kidx);
  for (i = 1; i < n; i++) {
    if (strcmp((*out_index)[i - 1].key, (*out_index)[i].key) == 0) {
      pathf(pf, "weights[%zu].blob", (*out_index)[i].idx);
      return ferr(c, DIT_CODE_INVALID_ARGUMENT, pf, "blob %s already has a layout in weights[%zu]",
                  (*out_index)[i].key, (*out_index)[i - 1].idx);
    }
  }
  return DIT_OK;
}

static dit_status_t parse_ranks(const pctx_t *c, const cJSON *root, dit_manifest_t *m,
                                const kidx_t *blob_index, const kidx_t *weights_index) {
  static const char *const keys[] = {"rank", "plan", "weights", NULL};
  const cJSON *a;
  size_t n;
  char p[MF_PATH], pf[MF_PATH];
  int world = m->topology.world;
  DIT_RETURN_IF(get_array(c, root, "", "ranks", MF_MAX_WORLD, &a, &n));
  if (n > (size_t)world)
    return ferr(c, DIT_CODE_OUT_OF_RANGE, "ranks", "%zu entries for world size %d", n, world);
  size_t *seen = calloc((size_t)world, sizeof *seen); /* index + 1 of the entry naming rank r */
  if (n) m->ranks = calloc(n, sizeof *m->ranks);
  if (!seen || (n && !m->ranks)) {
    free(seen);
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", c->what);
  }
  m->n_ranks = n;
  dit_status_t s = DIT_OK;
  size_t i = 0;
  for (const cJSON *e = a->child; e && !s; e = e->next, i++) {
    dit_manifest_rank_t *r = &m->ranks[i];
    path_idx(p, "ranks", i);
    if ((s = expect_type(c, e, p, cJSON_Object, "an object"))) break;
    if ((s = check_keys(c, e, p, keys))) break;
    if ((s = get_i32(c, e, p, "rank", 0, world - 1, &r->rank))) break;
    if (seen[r->rank]) {
      path_key(pf, p, "rank");
      s = ferr(c, DIT_CODE_INVALID_ARGUMENT, pf, "rank %d is listed twice (also ranks[%zu])",
               r->rank, seen[r->rank] - 1);
      break;
    }
    seen[r->rank] = i + 1;
    if ((s = get_hash(c, e, p, "plan", r->plan))) break;
    path_key(pf, p, "plan");
    if ((s = check_blob_ref(c, m, blob_index, pf, r->plan, "plan"))) break;
    if ((s = get_hash(c, e, p, "weights", r->weights))) break;
    path_key(pf, p, "weights");
    if ((s = check_blob_ref(c, m, blob_index, pf, r->weights, "weights"))) break;
    if (!kidx_find(weights_index, m->n_weights, r->weights))
      s = ferr(c, DIT_CODE_NOT_FOUND, pf, "blob %s has no tensor layout in weights[]", r->weights);
  }
  for (int k = 0; k < world && !s; k++)
    if (!seen[k])
      s = ferr(c, DIT_CODE_NOT_FOUND, "ranks", "rank %d of world size %d is missing", k, world);
  free(seen);
  return s;
}

static dit_status_t parse_topology(const pctx_t *c, const cJSON *root, dit_manifest_t *m) {
  static const char *const keys[] = {"world", "tp", "cp", "cfg", "cp_mode", NULL};
  static const char *const modes[] = {"none", "gather", "ring", "ulysses", "usp", NULL};
  const cJSON *o;
  DIT_RETURN_IF(get_object(c, root, "", "topology", &o));
  DIT_RETURN_IF(check_keys(c, o, "topology", keys));
  DIT_RETURN_IF(get_i32(c, o, "topology", "world", 1, MF_MAX_WORLD, &m->topology.world));
  DIT_RETURN_IF(get_i32(c, o, "topology", "tp", 1, MF_MAX_WORLD, &m->topology.tp));
  DIT_RETURN_IF(get_i32(c, o, "topology", "cp", 1, MF_MAX_WORLD, &m->topology.cp));
  DIT_RETURN_IF(get_i32(c, o, "topology", "cfg", 1, MF_MAX_WORLD, &m->topology.cfg));
  const char *mode = NULL;
  DIT_RETURN_IF(get_str(c, o, "topology", "cp_mode", MF_MAX_NAME, 1, &mode));
  int known = 0;
  for (const char *const *k = modes; *k && !known; k++) known = strcmp(*k, mode) == 0;
  if (!known) {
    char q[96];
    quote_short(mode, q);
    return ferr(c, DIT_CODE_INVALID_ARGUMENT, "topology.cp_mode",
                "expected one of none, gather, ring, ulysses, usp, found %s", q);
  }
  snprintf(m->topology.cp_mode, sizeof m->topology.cp_mode, "%s", mode);
  int64_t prod = (int64_t)m->topology.tp * m->topology.cp * m->topology.cfg;
  if (prod != m->topology.world)
    return ferr(c, DIT_CODE_INVALID_ARGUMENT, "topology.world",
                "expected tp*cp*cfg = %" PRId64 " (tp %d, cp %d, cfg %d), found %d", prod,
                m->topology.tp, m->topology.cp, m->topology.cfg, m->topology.world);
  if (m->topology.cp > 1 && strcmp(mode, "none") == 0)
    return ferr(c, DIT_CODE_INVALID_ARGUMENT, "topology.cp_mode",
                "cp %d needs a context-parallel mode, found \"none\"", m->topology.cp);
  return DIT_OK;
}

static dit_status_t parse_root(const pctx_t *c, cJSON *root, dit_manifest_t *m) {
  static const char *const top_keys[] = {"format", "schema", "identity", "inputs", "model",
                                         "target", "topology", "shape", "dtype", "io",
                                         "blobs", "weights", "ranks", "memory", "summary", NULL};
  static const char *const model_keys[] = {"family", "class", "variant", NULL};
  static const char *const target_keys[] = {"arch", "min_driver", NULL};
  static const char *const shape_keys[] = {"batch", "frames", "height", "width",
                                           "text_len", "latent", NULL};
  static const char *const io_keys[] = {"inputs", "outputs", NULL};
  static const char *const mem_keys[] = {"arena_bytes", "weight_bytes", "peak_bytes", NULL};
  const cJSON *o;
  const char *s = NULL;

  DIT_RETURN_IF(get_str(c, root, "", "format", MF_MAX_NAME, 1, &s));
  if (strcmp(s, "ditc-bundle") != 0) {
    char q[96];
    quote_short(s, q);
    return ferr(c, DIT_CODE_INVALID_ARGUMENT, "format", "expected \"ditc-bundle\", found %s", q);
  }
  DIT_RETURN_IF(parse_schema(c, root, m));
  DIT_RETURN_IF(check_keys(c, root, "", top_keys));
  DIT_RETURN_IF(get_hash(c, root, "", "identity", m->identity));

  DIT_RETURN_IF(get_object(c, root, "", "inputs", &o));
  char *canon = NULL;
  dit_status_t st = dit_json_canonical(o, &canon);
  free(canon);
  if (st) return dit_status_annotate(st, "%s: field 'inputs'", c->what);
  m->inputs = cJSON_DetachItemFromObjectCaseSensitive(root, "inputs");

  DIT_RETURN_IF(get_object(c, root, "", "model", &o));
  DIT_RETURN_IF(check_keys(c, o, "model", model_keys));
  DIT_RETURN_IF(get_str_fixed(c, o, "model", "family", m->family, sizeof m->family, 0));
  DIT_RETURN_IF(get_str_fixed(c, o, "model", "class", m->model_class, sizeof m->model_class, 0));
  DIT_RETURN_IF(get_str_fixed(c, o, "model", "variant", m->variant, sizeof m->variant, 1));

  DIT_RETURN_IF(get_object(c, root, "", "target", &o));
  DIT_RETURN_IF(check_keys(c, o, "target", target_keys));
  DIT_RETURN_IF(get_str_fixed(c, o, "target", "arch", m->arch, sizeof m->arch, 0));
  DIT_RETURN_IF(get_int(c, o, "target", "min_driver", 0, MF_MAX_SAFE, &m->min_driver));

  DIT_RETURN_IF(parse_topology(c, root, m));

  DIT_RETURN_IF(get_object(c, root, "", "shape", &o));
  DIT_RETURN_IF(check_keys(c, o, "shape", shape_keys));
  DIT_RETURN_IF(get_int(c, o, "shape", "batch", 0, MF_MAX_SAFE, &m->shape.batch));
  DIT_RETURN_IF(get_int(c, o, "shape", "frames", 0, MF_MAX_SAFE, &m->shape.frames));
  DIT_RETURN_IF(get_int(c, o, "shape", "height", 0, MF_MAX_SAFE, &m->shape.height));
  DIT_RETURN_IF(get_int(c, o, "shape", "width", 0, MF_MAX_SAFE, &m->shape.width));
  DIT_RETURN_IF(get_int(c, o, "shape", "text_len", 0, MF_MAX_SAFE, &m->shape.text_len));
  const cJSON *lat;
  size_t nl;
  DIT_RETURN_IF(get_array(c, o, "shape", "latent", 1u << 20, &lat, &nl));
  if (nl != 4)
    return ferr(c, DIT_CODE_INVALID_ARGUMENT, "shape.latent",
                "expected 4 entries [C, f, h, w], found %zu", nl);
  size_t i = 0;
  for (const cJSON *e = lat->child; e; e = e->next, i++) {
    char p[MF_PATH];
    path_idx(p, "shape.latent", i);
    DIT_RETURN_IF(num_int(c, e, p, 0, MF_MAX_SAFE, &m->shape.latent[i]));
  }

  DIT_RETURN_IF(get_dtype(c, root, "", "dtype", &m->dtype));

  DIT_RETURN_IF(get_object(c, root, "", "io", &o));
  DIT_RETURN_IF(check_keys(c, o, "io", io_keys));
  DIT_RETURN_IF(parse_io_list(c, o, "inputs", &m->n_inputs, &m->io_inputs));
  DIT_RETURN_IF(parse_io_list(c, o, "outputs", &m->n_outputs, &m->io_outputs));

  kidx_t *blob_index = NULL, *weights_index = NULL;
  st = parse_blobs(c, root, m, &blob_index);
  if (!st) st = parse_weights(c, root, m, blob_index, &weights_index);
  if (!st) st = parse_ranks(c, root, m, blob_index, weights_index);
  free(blob_index);
  free(weights_index);
  DIT_RETURN_IF(st);

  DIT_RETURN_IF(get_object(c, root, "", "memory", &o));
  DIT_RETURN_IF(check_keys(c, o, "memory", mem_keys));
  DIT_RETURN_IF(get_u64(c, o, "memory", "arena_bytes", &m->arena_bytes));
  DIT_RETURN_IF(get_u64(c, o, "memory", "weight_bytes", &m->weight_bytes));
  DIT_RETURN_IF(get_u64(c, o, "memory", "peak_bytes", &m->peak_bytes));

  o = cJSON_GetObjectItemCaseSensitive(root, "summary");
  if (o) {
    DIT_RETURN_IF(expect_type(c, o, "summary", cJSON_Object, "an object"));
    st = dit_json_canonical(o, &canon);
    free(canon);
    if (st) return dit_status_annotate(st, "%s: field 'summary'", c->what);
    m->summary = cJSON_DetachItemFromObjectCaseSensitive(root, "summary");
  }
  return DIT_OK;
}

dit_status_t dit_manifest_parse(const char *text, size_t len, const char *what,
                                dit_manifest_t **out) {
  *out = NULL;
  pctx_t c = {what ? what : "manifest.json"};
  if (!text && len) return DIT_ERR(INVALID_ARGUMENT, "%s: no text", c.what);
  const char *nul = len ? memchr(text, 0, len) : NULL;
  if (nul)
    return DIT_ERR(INVALID_ARGUMENT, "%s: not valid JSON: NUL byte at offset %zu", c.what,
                   (size_t)(nul - text));
  /* cJSON wants a terminated buffer to reject trailing garbage; the caller's may not be. */
  char *buf = malloc(len + 1);
  if (!buf) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory (%zu bytes)", c.what, len + 1);
  if (len) memcpy(buf, text, len);
  buf[len] = 0;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(buf, len + 1, &end, 1);
  if (!root) {
    size_t off = end && end >= buf && end <= buf + len ? (size_t)(end - buf) : 0;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < off; i++) {
      if (buf[i] == '\n') {
        line++;
        col = 1;
      } else {
        col++;
      }
    }
    free(buf);
    return DIT_ERR(INVALID_ARGUMENT, "%s: not valid JSON: syntax error at line %zu, column %zu",
                   c.what, line, col);
  }
  free(buf);
  dit_status_t s = DIT_OK;
  if (!cJSON_IsObject(root)) {
    s = DIT_ERR(INVALID_ARGUMENT, "%s: expected a JSON object at the top level, found %s", c.what,
                type_name(root));
  }
  if (!s) {
    char path[MF_PATH];
    path[0] = 0;
    s = walk_doc(&c, root, path, 0, sizeof path);
  }
  dit_manifest_t *m = NULL;
  if (!s) {
    m = calloc(1, sizeof *m);
    if (!m) s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", c.what);
  }
  if (!s) s = parse_root(&c, root, m);
  cJSON_Delete(root);
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
  free(m);
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
