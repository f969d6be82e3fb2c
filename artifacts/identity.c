/* Content hashes (XXH3-128 as canonical hex) and the compile identity over canonical JSON. */
#include "artifacts/identity.h"
#include "base/strbuf.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

static void hash_to_hex(XXH128_hash_t h, char out_hex[33]) {
  /* The canonical form is big-endian, so the hex reads the same on every host and matches
   * what xxhsum prints for XXH3-128. */
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out_hex[2 * i] = digits[c.digest[i] >> 4];
    out_hex[2 * i + 1] = digits[c.digest[i] & 15];
  }
  out_hex[32] = 0;
}

void dit_hash128_hex(const void *data, size_t size, char out_hex[33]) {
  static const char empty = 0;
  hash_to_hex(XXH3_128bits(size ? data : &empty, size), out_hex);
}

struct dit_hasher {
  XXH3_state_t *state;
};

dit_status_t dit_hasher_create(dit_hasher_t **out) {
  *out = NULL;
  dit_hasher_t *h = calloc(1, sizeof *h);
  if (!h) return DIT_ERR(RESOURCE_EXHAUSTED, "hasher: out of memory");
  h->state = XXH3_createState();
  if (!h->state) {
    free(h);
    return DIT_ERR(RESOURCE_EXHAUSTED, "hasher: XXH3_createState failed");
  }
  if (XXH3_128bits_reset(h->state) != XXH_OK) {
    dit_hasher_destroy(h);
    return DIT_ERR(INTERNAL, "hasher: XXH3_128bits_reset failed");
  }
  *out = h;
  return DIT_OK;
}

void dit_hasher_update(dit_hasher_t *h, const void *data, size_t size) {
  if (size) XXH3_128bits_update(h->state, data, size);
}

void dit_hasher_hex(const dit_hasher_t *h, char out_hex[33]) {
  hash_to_hex(XXH3_128bits_digest(h->state), out_hex);
}

void dit_hasher_destroy(dit_hasher_t *h) {
  if (!h) return;
  XXH3_freeState(h->state);
  free(h);
}

int dit_is_hash_hex(const char *s) {
  if (!s) return 0;
  for (int i = 0; i < 32; i++) {
    char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return 0;
  }
  return s[32] == 0;
}

/* ---- canonical JSON ---- */




/* Integers print as integers; every other finite double as %.17g, which round-trips exactly
 * and is the same on every IEEE host. */
static dit_status_t put_number(dit_strbuf_t *b, double v) {
  char tmp[64];
  if (!isfinite(v)) return DIT_ERR(INVALID_ARGUMENT, "canonical JSON: non-finite number");
  if (v == trunc(v) && fabs(v) < 9007199254740992.0) {
    snprintf(tmp, sizeof tmp, "%" PRId64, (int64_t)v);
  } else {
    snprintf(tmp, sizeof tmp, "%.17g", v);
    /* A caller's setlocale() could make printf use a decimal comma; JSON needs a point. */
    for (char *c = tmp; *c; c++)
      if (!((*c >= '0' && *c <= '9') || *c == '-' || *c == '+' || *c == 'e')) *c = '.';
  }
  dit_strbuf_puts(b, tmp);
  return DIT_OK;
}

static int cmp_keys(const void *a, const void *b) {
  const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
  return strcmp(x->string, y->string);
}

#define CANON_MAX_DEPTH 1000

static dit_status_t put_value(dit_strbuf_t *b, const cJSON *v, int depth) {
  if (depth > CANON_MAX_DEPTH)
    return DIT_ERR(OUT_OF_RANGE, "canonical JSON: nesting deeper than %d", CANON_MAX_DEPTH);
  switch (v->type & 0xff) {
    case cJSON_NULL: dit_strbuf_puts(b, "null"); return DIT_OK;
    case cJSON_False: dit_strbuf_puts(b, "false"); return DIT_OK;
    case cJSON_True: dit_strbuf_puts(b, "true"); return DIT_OK;
    case cJSON_Number: return put_number(b, v->valuedouble);
    case cJSON_String:
      if (!v->valuestring) return DIT_ERR(INVALID_ARGUMENT, "canonical JSON: string without a value");
      dit_strbuf_json_string(b, v->valuestring);
      return DIT_OK;
    case cJSON_Array: {
      dit_strbuf_put(b, "[", 1);
      int first = 1;
      for (const cJSON *c = v->child; c; c = c->next) {
        if (!first) dit_strbuf_put(b, ",", 1);
        first = 0;
        DIT_RETURN_IF(put_value(b, c, depth + 1));
      }
      dit_strbuf_put(b, "]", 1);
      return DIT_OK;
    }
    case cJSON_Object: {
      size_t n = 0;
      for (const cJSON *c = v->child; c; c = c->next) {
        if (!c->string) return DIT_ERR(INVALID_ARGUMENT, "canonical JSON: object member without a key");
        n++;
      }
      const cJSON **kids = NULL;
      if (n) {
        kids = malloc(n * sizeof *kids);
        if (!kids) return DIT_ERR(RESOURCE_EXHAUSTED, "canonical JSON: out of memory");
      }
      size_t i = 0;
      for (const cJSON *c = v->child; c; c = c->next) kids[i++] = c;
      if (n > 1) qsort(kids, n, sizeof *kids, cmp_keys);
      dit_status_t s = DIT_OK;
      /* Two members with one key would make the identity depend on which one a reader
       * picks, so they are an error rather than a silent choice. */
      for (i = 1; i < n && !s; i++) {
        if (strcmp(kids[i - 1]->string, kids[i]->string) == 0) {
          dit_strbuf_t kb = {0};
          dit_strbuf_json_string(&kb, kids[i]->string);
          s = DIT_ERR(INVALID_ARGUMENT, "canonical JSON: duplicate key %s",
                      kb.p ? kb.p : "(out of memory)");
          free(kb.p);
        }
      }
      dit_strbuf_put(b, "{", 1);
      for (i = 0; i < n && !s; i++) {
        if (i) dit_strbuf_put(b, ",", 1);
        dit_strbuf_json_string(b, kids[i]->string);
        dit_strbuf_put(b, ":", 1);
        s = put_value(b, kids[i], depth + 1);
      }
      dit_strbuf_put(b, "}", 1);
      free(kids);
      return s;
    }
    default:
      return DIT_ERR(INVALID_ARGUMENT, "canonical JSON: unsupported cJSON item type %d",
                     v->type & 0xff);
  }
}

dit_status_t dit_json_canonical(const cJSON *v, char **out_text) {
  *out_text = NULL;
  if (!v) return DIT_ERR(INVALID_ARGUMENT, "canonical JSON: no value");
  dit_strbuf_t b = {0};
  dit_status_t s = put_value(&b, v, 0);
  if (!s && b.oom) s = DIT_ERR(RESOURCE_EXHAUSTED, "canonical JSON: out of memory");
  if (s) {
    free(b.p);
    return s;
  }
  *out_text = b.p;
  return DIT_OK;
}

dit_status_t dit_identity_compute(const cJSON *inputs, char out_hex[33]) {
  out_hex[0] = 0;
  char *text = NULL;
  DIT_RETURN_IF_ERROR(dit_json_canonical(inputs, &text), "compile identity");
  dit_hash128_hex(text, strlen(text), out_hex);
  free(text);
  return DIT_OK;
}
