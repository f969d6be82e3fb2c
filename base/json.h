/* The one reader for JSON that comes from outside this process: manifests, plans, profiles,
 * model configs, index files, HTTP bodies. It treats the text as hostile: a document is
 * refused whole for NUL bytes, trailing garbage, nesting deeper than DIT_JSON_MAX_DEPTH,
 * duplicate keys anywhere (cJSON would keep both and a lookup would pick one silently) and
 * numbers that overflow a double; every getter checks type and range before converting and
 * caps counts before the caller allocates for them.
 *
 * A dit_json_t is a borrowed view of one value plus its path for messages; it lives as long
 * as the document. Errors read "<what>: field '<path>': <problem>", e.g.
 *   manifest.json: field 'weights[2].tensors[7].offset': expected an integer in [0, 2^53), found -4 */
#ifndef DIT_BASE_JSON_H
#define DIT_BASE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DIT_JSON_PATH 192            /* bytes of a path kept for messages (cut short beyond) */
#define DIT_JSON_MAX_DEPTH 64        /* objects and arrays nested in one another */
#define DIT_JSON_MAX_SAFE 9007199254740991.0 /* 2^53 - 1: every integer below is exact */

typedef struct dit_json_doc dit_json_doc_t;

typedef struct dit_json {
  const cJSON *v;         /* the value; NULL only in a default-initialized view */
  const char *what;       /* the document's name for messages (borrowed from the doc) */
  char path[DIT_JSON_PATH];
} dit_json_t;

/* Parses `len` bytes of `text` (no terminator needed). `what` names the source in every
 * message (a file name, "remote .../ac/ID", ...) and is copied. On success the caller owns
 * *out_doc (dit_json_doc_free). */
dit_status_t dit_json_parse(const char *text, size_t len, const char *what,
                            dit_json_doc_t **out_doc);
/* Reads and parses a file of at most max_bytes; the path is the document's name. */
dit_status_t dit_json_parse_file(const char *path, size_t max_bytes, dit_json_doc_t **out_doc);
void dit_json_doc_free(dit_json_doc_t *doc);

/* The top-level value, which must be an object. */
dit_status_t dit_json_root(const dit_json_doc_t *doc, dit_json_t *out);
/* Hands the parsed tree to the caller, who then owns it (cJSON_Delete); the doc keeps nothing
 * and may only be freed after this. For holding a validated sub-tree beyond the doc. */
cJSON *dit_json_doc_release(dit_json_doc_t *doc);

/* ---- members of an object ---- */

/* Whether obj (an object) has member key. */
bool dit_json_has(const dit_json_t *obj, const char *key);
/* The member, or NOT_FOUND "missing". */
dit_status_t dit_json_get(const dit_json_t *obj, const char *key, dit_json_t *out);
/* Every member must be one of `allowed` (NULL-terminated): a misspelt or smuggled field is an
 * error, not silently ignored. */
dit_status_t dit_json_check_keys(const dit_json_t *obj, const char *const *allowed);

dit_status_t dit_json_object(const dit_json_t *obj, const char *key, dit_json_t *out);
/* An array of at most max_n entries; *out_n its length. */
dit_status_t dit_json_array(const dit_json_t *obj, const char *key, size_t max_n, dit_json_t *out,
                            size_t *out_n);
dit_status_t dit_json_int(const dit_json_t *obj, const char *key, int64_t lo, int64_t hi,
                          int64_t *out);
dit_status_t dit_json_i32(const dit_json_t *obj, const char *key, int lo, int hi, int *out);
/* An integer in [0, 2^53). */
dit_status_t dit_json_u64(const dit_json_t *obj, const char *key, uint64_t *out);
/* A finite number in [lo, hi]. */
dit_status_t dit_json_num(const dit_json_t *obj, const char *key, double lo, double hi,
                          double *out);
dit_status_t dit_json_bool(const dit_json_t *obj, const char *key, bool *out);
/* A string of at most max_len bytes (borrowed from the doc); empty only if allow_empty. */
dit_status_t dit_json_str(const dit_json_t *obj, const char *key, size_t max_len, bool allow_empty,
                          const char **out);
/* The same, copied into dst[cap] (so at most cap - 1 bytes). */
dit_status_t dit_json_str_copy(const dit_json_t *obj, const char *key, char *dst, size_t cap,
                               bool allow_empty);
/* One of the NULL-terminated `names`; *out its index. */
dit_status_t dit_json_enum(const dit_json_t *obj, const char *key, const char *const *names,
                           int *out);

/* ---- elements ---- */

/* Walks the entries of an array or the members of an object in order. */
typedef struct dit_json_iter {
  const dit_json_t *parent;
  const cJSON *next;
  size_t i;
} dit_json_iter_t;
void dit_json_iter_init(const dit_json_t *container, dit_json_iter_t *it);
/* Fills *out with the next entry (its path extended by [i] or .key) and returns true, or
 * returns false at the end. For an object, out->v->string is the member's key. */
bool dit_json_iter_next(dit_json_iter_t *it, dit_json_t *out);

/* ---- the value itself ---- */

dit_status_t dit_json_expect_object(const dit_json_t *v);
dit_status_t dit_json_expect_array(const dit_json_t *v, size_t max_n, size_t *out_n);
dit_status_t dit_json_as_int(const dit_json_t *v, int64_t lo, int64_t hi, int64_t *out);
dit_status_t dit_json_as_num(const dit_json_t *v, double lo, double hi, double *out);
dit_status_t dit_json_as_bool(const dit_json_t *v, bool *out);
dit_status_t dit_json_as_str(const dit_json_t *v, size_t max_len, bool allow_empty,
                             const char **out);
/* An array of at most max_n integers in [lo, hi] into out[max_n]. */
dit_status_t dit_json_as_int_array(const dit_json_t *v, size_t max_n, int64_t lo, int64_t hi,
                                   int64_t *out, size_t *out_n);

/* ---- messages ---- */

/* "<what>: field '<path>': <message>" with the given code, for checks the caller makes. */
dit_status_t dit_json_error(const dit_json_t *v, dit_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Names a value's JSON type: "null", "a boolean", "a number", "a string", "an array", ... */
const char *dit_json_type_name(const cJSON *v);
/* A found string for a message: quoted, escaped, cut short so a hostile value cannot flood it. */
void dit_json_quote(const char *s, char out[96]);
/* A number as an integer when it is one, else with full precision. */
void dit_json_fmt_num(double v, char out[40]);
/* Extends a path by .key or [i] (cut short when it does not fit: paths only label messages). */
void dit_json_path_key(char out[DIT_JSON_PATH], const char *base, const char *key);
void dit_json_path_idx(char out[DIT_JSON_PATH], const char *base, size_t i);

#ifdef __cplusplus
}
#endif
#endif
