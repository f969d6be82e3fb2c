/* The checkpoint content-hash memo: small records under memo/<key>.json, written atomically;
 * only a shortcut, so a lost record costs a rehash, never a wrong answer. */
#include "store/store_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "artifacts/identity.h"
#include "base/fileio.h"

static dit_status_t memo_path(const dit_store_t *st, const char *key, char **out) {
  *out = NULL;
  if (!dit_is_hash_hex(key)) return DIT_ERR(INVALID_ARGUMENT, "store memo: '%s' is not a key (32 lowercase hex digits)", key);
  size_t n = strlen(st->memo) + 48;
  *out = malloc(n);
  if (!*out) return dit_store_oom(st->root);
  snprintf(*out, n, "%s/%s.json", st->memo, key);
  return DIT_OK;
}

dit_status_t dit_store_memo_read(dit_store_t *st, const char *key, char **out_text, size_t *out_len) {
  char *p;
  DIT_RETURN_IF(memo_path(st, key, &p));
  size_t len = 0;
  dit_status_t s = dit_file_read(p, STORE_MEMO_MAX, out_text, &len);
  if (out_len) *out_len = len;
  free(p);
  return s;
}

dit_status_t dit_store_memo_write(dit_store_t *st, const char *key, const char *text) {
  char *p;
  DIT_RETURN_IF(memo_path(st, key, &p));
  dit_status_t s = dit_file_write_atomic(p, text, strlen(text));
  free(p);
  return s;
}
