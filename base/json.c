/* The hostile-JSON reader (json.h): whole-document checks at parse time, then typed getters
 * that carry each value's path into their messages. */
#include "base/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"

struct dit_json_doc {
  cJSON *root;
  char *what;
};

static dit_status_t errv(const char *what, const char *path, dit_code_t code, const char *fmt,
                         va_list ap) {
  dit_status_t s = dit_status_makev(code, fmt, ap);
  return dit_status_annotate(s, "%s: field '%s'", what, path[0] ? path : "(top level)");
}

static dit_status_t err_at(const char *what, const char *path, dit_code_t code, const char *fmt,
                           ...) __attribute__((format(printf, 4, 5)));
static dit_status_t err_at(const char *what, const char *path, dit_code_t code, const char *fmt,
                           ...) {
  va_list ap;
  va_start(ap, fmt);
  dit_status_t s = errv(what, path, code, fmt, ap);
  va_end(ap);
  return s;
}

dit_status_t dit_json_error(const dit_json_t *v, dit_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dit_status_t s = errv(v->what, v->path, code, fmt, ap);
  va_end(ap);
  return s;
}

const char *dit_json_type_name(const cJSON *v) {
  if (!v) return "nothing";
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

void dit_json_quote(const char *s, char out[96]) {
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

void dit_json_fmt_num(double v, char out[40]) {
  if (v == trunc(v) && fabs(v) < 1e18)
    snprintf(out, 40, "%lld", (long long)v);
  else
    snprintf(out, 40, "%.17g", v);
}

/* A key as it appears in a path: bytes that could garble a terminal or a log line (control
 * characters, quotes, backslashes, non-ASCII) become '?', so a hostile key cannot forge a
 * message. Cut short to fit, as paths are. */
static void safe_key(const char *key, char *out, size_t cap) {
  size_t o = 0;
  for (const unsigned char *u = (const unsigned char *)key; *u && o + 1 < cap; u++)
    out[o++] = *u < 32 || *u >= 127 || *u == '\'' || *u == '"' || *u == '\\' ? '?' : (char)*u;
  out[o] = 0;
}

/* Paths only label messages, so one that does not fit is cut short, not an error. */
static void pathf(char out[DIT_JSON_PATH], const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pathf(char out[DIT_JSON_PATH], const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, DIT_JSON_PATH, fmt, ap);
  va_end(ap);
}

void dit_json_path_key(char out[DIT_JSON_PATH], const char *base, const char *key) {
  char k[DIT_JSON_PATH];
  safe_key(key, k, sizeof k);
  if (base[0])
    pathf(out, "%s.%s", base, k);
  else
    pathf(out, "%s", k);
}

void dit_json_path_idx(char out[DIT_JSON_PATH], const char *base, size_t i) {
  pathf(out, "%s[%zu]", base, i);
}

/* ---- parse ---- */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* One pass over the whole document: depth, duplicate keys and numbers that overflowed. */
static dit_status_t walk(const char *what, const cJSON *v, char *path, size_t len, size_t cap,
                         int depth) {
  int type = v->type & 0xff;
  if (type == cJSON_Number && !isfinite(v->valuedouble))
    return err_at(what, path, DIT_CODE_OUT_OF_RANGE, "number outside the range of a double");
  if ((type == cJSON_Object || type == cJSON_Array) && depth > DIT_JSON_MAX_DEPTH)
    return err_at(what, path, DIT_CODE_OUT_OF_RANGE, "nested deeper than %d levels",
                  DIT_JSON_MAX_DEPTH);
  if (type == cJSON_Object) {
    size_t n = 0;
    for (const cJSON *k = v->child; k; k = k->next) n++;
    if (n > 1) {
      const char **keys = malloc(n * sizeof *keys);
      if (!keys) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
      size_t i = 0;
      for (const cJSON *k = v->child; k; k = k->next) keys[i++] = k->string;
      qsort(keys, n, sizeof *keys, cmp_str);
      const char *dup = NULL;
      for (i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) dup = keys[i];
      dit_status_t s = DIT_OK;
      if (dup) {
        char q[96];
        dit_json_quote(dup, q);
        s = err_at(what, path, DIT_CODE_INVALID_ARGUMENT, "duplicate key %s", q);
      }
      free(keys);
      if (s) return s;
    }
  }
  size_t i = 0;
  for (const cJSON *k = v->child; k; k = k->next, i++) {
    char key[DIT_JSON_PATH];
    if (type == cJSON_Object) safe_key(k->string, key, sizeof key);
    int n = type == cJSON_Object ? snprintf(path + len, cap - len, len ? ".%s" : "%s", key)
                                 : snprintf(path + len, cap - len, "[%zu]", i);
    size_t nl = n < 0 ? len : len + (size_t)n;
    if (nl >= cap) nl = cap - 1; /* the path is only for messages; cut it short */
    dit_status_t s = walk(what, k, path, nl, cap, depth + 1);
    path[len] = 0;
    if (s) return s;
  }
  return DIT_OK;
}

dit_status_t dit_json_parse(const char *text, size_t len, const char *what,
                            dit_json_doc_t **out_doc) {
  *out_doc = NULL;
  if (!what) what = "JSON";
  if (!text && len) return DIT_ERR(INVALID_ARGUMENT, "%s: no text", what);
  const char *nul = len ? memchr(text, 0, len) : NULL;
  if (nul)
    return DIT_ERR(INVALID_ARGUMENT, "%s: not valid JSON: NUL byte at offset %zu", what,
                   (size_t)(nul - text));
  /* cJSON recurses once per nesting level before any check of ours runs; its own limit
   * (CJSON_NESTING_LIMIT) bounds the stack, ours bounds what callers see. */
  /* cJSON wants a terminated buffer to reject trailing garbage; the caller's may not be. */
  char *buf = malloc(len + 1);
  if (!buf) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory (%zu bytes)", what, len + 1);
  if (len) memcpy(buf, text, len);
  buf[len] = 0;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(buf, len + 1, &end, 1);
  if (!root) {
    /* A value followed by more text fails the same way as a broken one; say which it is. */
    cJSON *value = cJSON_ParseWithLengthOpts(buf, len + 1, NULL, 0);
    const char *note = value ? " (trailing data after the JSON value)" : "";
    cJSON_Delete(value);
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
    return DIT_ERR(INVALID_ARGUMENT, "%s: not valid JSON: syntax error at line %zu, column %zu%s",
                   what, line, col, note);
  }
  free(buf);
  char path[DIT_JSON_PATH] = {0};
  dit_status_t s = walk(what, root, path, 0, sizeof path, 1);
  dit_json_doc_t *d = NULL;
  if (!s) {
    d = calloc(1, sizeof *d);
    if (d) d->what = strdup(what);
    if (!d || !d->what) s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  }
  if (s) {
    cJSON_Delete(root);
    if (d) free(d->what);
    free(d);
    return s;
  }
  d->root = root;
  *out_doc = d;
  return DIT_OK;
}

dit_status_t dit_json_parse_file(const char *path, size_t max_bytes, dit_json_doc_t **out_doc) {
  *out_doc = NULL;
  char *text = NULL;
  size_t len = 0;
  DIT_RETURN_IF(dit_file_read(path, max_bytes, &text, &len));
  dit_status_t s = dit_json_parse(text, len, path, out_doc);
  free(text);
  return s;
}

void dit_json_doc_free(dit_json_doc_t *doc) {
  if (!doc) return;
  cJSON_Delete(doc->root);
  free(doc->what);
  free(doc);
}

cJSON *dit_json_doc_release(dit_json_doc_t *doc) {
  cJSON *r = doc->root;
  doc->root = NULL;
  return r;
}

dit_status_t dit_json_root(const dit_json_doc_t *doc, dit_json_t *out) {
  memset(out, 0, sizeof *out);
  out->v = doc->root;
  out->what = doc->what;
  if (!cJSON_IsObject(doc->root))
    return DIT_ERR(INVALID_ARGUMENT, "%s: expected a JSON object at the top level, found %s",
                   doc->what, dit_json_type_name(doc->root));
  return DIT_OK;
}

/* ---- the value itself ---- */

static dit_status_t expect_type(const dit_json_t *v, int type, const char *want) {
  if (!v->v || (v->v->type & 0xff) != type)
    return dit_json_error(v, DIT_CODE_INVALID_ARGUMENT, "expected %s, found %s", want,
                          dit_json_type_name(v->v));
  return DIT_OK;
}

dit_status_t dit_json_expect_object(const dit_json_t *v) {
  return expect_type(v, cJSON_Object, "an object");
}

dit_status_t dit_json_expect_array(const dit_json_t *v, size_t max_n, size_t *out_n) {
  DIT_RETURN_IF(expect_type(v, cJSON_Array, "an array"));
  size_t n = 0;
  for (const cJSON *e = v->v->child; e; e = e->next)
    if (++n > max_n)
      return dit_json_error(v, DIT_CODE_OUT_OF_RANGE, "more than %zu entries", max_n);
  if (out_n) *out_n = n;
  return DIT_OK;
}

dit_status_t dit_json_as_num(const dit_json_t *v, double lo, double hi, double *out) {
  DIT_RETURN_IF(expect_type(v, cJSON_Number, "a number"));
  double d = v->v->valuedouble;
  if (!(d >= lo && d <= hi)) {
    char a[40], b[40], f[40];
    dit_json_fmt_num(lo, a);
    dit_json_fmt_num(hi, b);
    dit_json_fmt_num(d, f);
    return dit_json_error(v, DIT_CODE_OUT_OF_RANGE, "expected a number in [%s, %s], found %s", a,
                          b, f);
  }
  *out = d;
  return DIT_OK;
}

dit_status_t dit_json_as_int(const dit_json_t *v, int64_t lo, int64_t hi, int64_t *out) {
  DIT_RETURN_IF(expect_type(v, cJSON_Number, "an integer"));
  double d = v->v->valuedouble;
  char f[40];
  dit_json_fmt_num(d, f);
  if (!isfinite(d) || d != trunc(d))
    return dit_json_error(v, DIT_CODE_INVALID_ARGUMENT, "expected an integer, found %s", f);
  /* Compared as doubles: lo and hi are exact there for every range used (|x| <= 2^53). */
  if (d < (double)lo || d > (double)hi)
    return dit_json_error(v, DIT_CODE_OUT_OF_RANGE,
                          "expected an integer in [%lld, %lld], found %s", (long long)lo,
                          (long long)hi, f);
  *out = (int64_t)d;
  return DIT_OK;
}

dit_status_t dit_json_as_bool(const dit_json_t *v, bool *out) {
  if (!v->v || !cJSON_IsBool(v->v))
    return dit_json_error(v, DIT_CODE_INVALID_ARGUMENT, "expected a boolean, found %s",
                          dit_json_type_name(v->v));
  *out = cJSON_IsTrue(v->v);
  return DIT_OK;
}

dit_status_t dit_json_as_str(const dit_json_t *v, size_t max_len, bool allow_empty,
                             const char **out) {
  DIT_RETURN_IF(expect_type(v, cJSON_String, "a string"));
  size_t n = strlen(v->v->valuestring);
  if (!n && !allow_empty) return dit_json_error(v, DIT_CODE_INVALID_ARGUMENT, "must not be empty");
  if (n > max_len)
    return dit_json_error(v, DIT_CODE_OUT_OF_RANGE, "expected at most %zu bytes, found %zu",
                          max_len, n);
  *out = v->v->valuestring;
  return DIT_OK;
}

dit_status_t dit_json_as_int_array(const dit_json_t *v, size_t max_n, int64_t lo, int64_t hi,
                                   int64_t *out, size_t *out_n) {
  size_t n = 0;
  DIT_RETURN_IF(dit_json_expect_array(v, max_n, &n));
  dit_json_iter_t it;
  dit_json_t e;
  size_t i = 0;
  dit_json_iter_init(v, &it);
  while (dit_json_iter_next(&it, &e)) DIT_RETURN_IF(dit_json_as_int(&e, lo, hi, &out[i++]));
  *out_n = n;
  return DIT_OK;
}

/* ---- members ---- */

static void child_view(const dit_json_t *parent, const cJSON *c, const char *key, size_t idx,
                       dit_json_t *out) {
  char p[DIT_JSON_PATH];
  if (key)
    dit_json_path_key(p, parent->path, key);
  else
    dit_json_path_idx(p, parent->path, idx);
  memcpy(out->path, p, sizeof p);
  out->v = c;
  out->what = parent->what;
}

bool dit_json_has(const dit_json_t *obj, const char *key) {
  return cJSON_IsObject(obj->v) && cJSON_GetObjectItemCaseSensitive(obj->v, key) != NULL;
}

dit_status_t dit_json_get(const dit_json_t *obj, const char *key, dit_json_t *out) {
  DIT_RETURN_IF(dit_json_expect_object(obj));
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(obj->v, key);
  child_view(obj, c, key, 0, out);
  if (!c) return dit_json_error(out, DIT_CODE_NOT_FOUND, "missing");
  return DIT_OK;
}

dit_status_t dit_json_check_keys(const dit_json_t *obj, const char *const *allowed) {
  DIT_RETURN_IF(dit_json_expect_object(obj));
  for (const cJSON *k = obj->v->child; k; k = k->next) {
    bool ok = false;
    for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, k->string) == 0;
    if (!ok) {
      char q[96];
      dit_json_quote(k->string, q);
      return dit_json_error(obj, DIT_CODE_INVALID_ARGUMENT, "unknown member %s", q);
    }
  }
  return DIT_OK;
}

dit_status_t dit_json_object(const dit_json_t *obj, const char *key, dit_json_t *out) {
  DIT_RETURN_IF(dit_json_get(obj, key, out));
  return dit_json_expect_object(out);
}

dit_status_t dit_json_array(const dit_json_t *obj, const char *key, size_t max_n, dit_json_t *out,
                            size_t *out_n) {
  DIT_RETURN_IF(dit_json_get(obj, key, out));
  return dit_json_expect_array(out, max_n, out_n);
}

dit_status_t dit_json_int(const dit_json_t *obj, const char *key, int64_t lo, int64_t hi,
                          int64_t *out) {
  dit_json_t v;
  DIT_RETURN_IF(dit_json_get(obj, key, &v));
  return dit_json_as_int(&v, lo, hi, out);
}

dit_status_t dit_json_i32(const dit_json_t *obj, const char *key, int lo, int hi, int *out) {
  int64_t v = 0;
  DIT_RETURN_IF(dit_json_int(obj, key, lo, hi, &v));
  *out = (int)v;
  return DIT_OK;
}

dit_status_t dit_json_u64(const dit_json_t *obj, const char *key, uint64_t *out) {
  int64_t v = 0;
  DIT_RETURN_IF(dit_json_int(obj, key, 0, (int64_t)DIT_JSON_MAX_SAFE, &v));
  *out = (uint64_t)v;
  return DIT_OK;
}

dit_status_t dit_json_num(const dit_json_t *obj, const char *key, double lo, double hi,
                          double *out) {
  dit_json_t v;
  DIT_RETURN_IF(dit_json_get(obj, key, &v));
  return dit_json_as_num(&v, lo, hi, out);
}

dit_status_t dit_json_bool(const dit_json_t *obj, const char *key, bool *out) {
  dit_json_t v;
  DIT_RETURN_IF(dit_json_get(obj, key, &v));
  return dit_json_as_bool(&v, out);
}

dit_status_t dit_json_str(const dit_json_t *obj, const char *key, size_t max_len, bool allow_empty,
                          const char **out) {
  dit_json_t v;
  DIT_RETURN_IF(dit_json_get(obj, key, &v));
  return dit_json_as_str(&v, max_len, allow_empty, out);
}

dit_status_t dit_json_str_copy(const dit_json_t *obj, const char *key, char *dst, size_t cap,
                               bool allow_empty) {
  const char *s = NULL;
  DIT_RETURN_IF(dit_json_str(obj, key, cap - 1, allow_empty, &s));
  memcpy(dst, s, strlen(s) + 1);
  return DIT_OK;
}

dit_status_t dit_json_enum(const dit_json_t *obj, const char *key, const char *const *names,
                           int *out) {
  dit_json_t v;
  const char *s = NULL;
  DIT_RETURN_IF(dit_json_get(obj, key, &v));
  DIT_RETURN_IF(dit_json_as_str(&v, 4096, true, &s));
  for (int i = 0; names[i]; i++)
    if (strcmp(names[i], s) == 0) {
      *out = i;
      return DIT_OK;
    }
  char want[512] = "", q[96];
  size_t o = 0;
  for (int i = 0; names[i] && o < sizeof want - 1; i++)
    o += (size_t)snprintf(want + o, sizeof want - o, "%s%s", i ? ", " : "", names[i]);
  dit_json_quote(s, q);
  return dit_json_error(&v, DIT_CODE_INVALID_ARGUMENT, "expected one of %s, found %s", want, q);
}

/* ---- iteration ---- */

void dit_json_iter_init(const dit_json_t *container, dit_json_iter_t *it) {
  it->parent = container;
  it->next = container->v && (cJSON_IsArray(container->v) || cJSON_IsObject(container->v))
                 ? container->v->child
                 : NULL;
  it->i = 0;
}

bool dit_json_iter_next(dit_json_iter_t *it, dit_json_t *out) {
  if (!it->next) return false;
  const cJSON *c = it->next;
  child_view(it->parent, c, cJSON_IsObject(it->parent->v) ? c->string : NULL, it->i, out);
  it->next = c->next;
  it->i++;
  return true;
}
