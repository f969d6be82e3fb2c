/* Limits on one pull or import (store.h): a count of the bytes that actually arrive, checked
 * on every append, the manifest's claims checked before anything is fetched, and the blobs
 * entered on the way, so a refused transfer can remove them again. */
#include "store/store_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifacts/identity.h"

struct dit_store_quota {
  uint64_t max_bytes, max_blobs;
  uint64_t bytes;
  int exceeded;
  char *what;
  char (*entered)[DIT_HASH_HEX];
  size_t n_entered, cap_entered;
};

dit_status_t dit_store_quota_create(const dit_store_limits_t *limits, const char *what, dit_store_quota_t **out) {
  *out = NULL;
  dit_store_quota_t *q = calloc(1, sizeof *q);
  if (q) q->what = strdup(what ? what : "transfer");
  if (!q || !q->what) {
    free(q);
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what ? what : "transfer");
  }
  q->max_bytes = limits && limits->max_bytes ? limits->max_bytes : DIT_STORE_DEFAULT_MAX_BYTES;
  q->max_blobs = limits && limits->max_blobs ? limits->max_blobs : DIT_STORE_DEFAULT_MAX_BLOBS;
  *out = q;
  return DIT_OK;
}

void dit_store_quota_destroy(dit_store_quota_t *q) {
  if (!q) return;
  free(q->entered);
  free(q->what);
  free(q);
}

dit_status_t dit_store_quota_check_manifest(dit_store_quota_t *q, const dit_store_t *st, const dit_manifest_t *m) {
  if ((uint64_t)m->n_blobs > q->max_blobs) {
    q->exceeded = 1;
    return DIT_ERR(RESOURCE_EXHAUSTED, "the manifest lists %zu blobs, more than the %" PRIu64 " allowed (--max-blobs); nothing transferred",
                   m->n_blobs, q->max_blobs);
  }
  uint64_t claimed = 0;
  size_t missing = 0;
  for (size_t i = 0; i < m->n_blobs; i++) {
    const dit_manifest_blob_t *b = &m->blobs[i];
    if (st && dit_store_has_blob(st, b->hash, b->size)) continue;
    missing++;
    claimed = b->size > UINT64_MAX - claimed ? UINT64_MAX : claimed + b->size;
  }
  if (claimed > q->max_bytes - q->bytes) {
    q->exceeded = 1;
    return DIT_ERR(RESOURCE_EXHAUSTED,
                   "the manifest's %zu blob%s not yet in the store claim %" PRIu64 " bytes, more than the %" PRIu64
                   " allowed (--max-bytes); nothing transferred",
                   missing, missing == 1 ? "" : "s", claimed, q->max_bytes - q->bytes);
  }
  return DIT_OK;
}

dit_status_t dit_store_quota_charge(dit_store_quota_t *q, uint64_t n) {
  if (n > q->max_bytes - q->bytes) {
    q->exceeded = 1;
    return DIT_ERR(RESOURCE_EXHAUSTED,
                   "blob bytes received pass the limit: %" PRIu64 " allowed (--max-bytes), %" PRIu64
                   " received so far and %" PRIu64 " more arriving",
                   q->max_bytes, q->bytes, n);
  }
  q->bytes += n;
  return DIT_OK;
}

void dit_store_quota_refund(dit_store_quota_t *q, uint64_t n) { q->bytes -= n < q->bytes ? n : q->bytes; }

uint64_t dit_store_quota_bytes(const dit_store_quota_t *q) { return q->bytes; }

int dit_store_quota_exceeded(const dit_store_quota_t *q) { return q->exceeded; }

dit_status_t dit_store_quota_record(dit_store_quota_t *q, const char *hash) {
  if (q->n_entered == q->cap_entered) {
    size_t nc = q->cap_entered ? q->cap_entered * 2 : 16;
    char(*nv)[DIT_HASH_HEX] = realloc(q->entered, nc * sizeof *nv);
    if (!nv) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", q->what);
    q->entered = nv;
    q->cap_entered = nc;
  }
  memcpy(q->entered[q->n_entered++], hash, DIT_HASH_HEX);
  return DIT_OK;
}

dit_status_t dit_store_quota_rollback(dit_store_quota_t *q, dit_store_t *st) {
  if (!q->n_entered) return DIT_OK;
  /* Exclusive: no publisher is between entering a blob and listing it in a manifest, so a
   * blob no entry lists now belongs to nobody but this transfer. */
  DIT_RETURN_IF(dit_store_lock(st, 1));
  dit_store_entry_t *ents = NULL;
  size_t ne = 0;
  dit_status_t s = dit_store_list(st, &ents, &ne);
  for (size_t i = 0; !s && i < q->n_entered; i++) {
    const char *h = q->entered[i];
    int listed = 0;
    for (size_t e = 0; e < ne && !listed; e++)
      for (size_t k = 0; ents[e].manifest && k < ents[e].manifest->n_blobs && !listed; k++)
        listed = !strcmp(ents[e].manifest->blobs[k].hash, h);
    if (listed) continue;
    char *p = NULL;
    s = dit_store_blob_path(st, h, &p);
    if (!s && unlink(p) != 0 && errno != ENOENT) s = DIT_ERR(IO, "%s: cannot remove: %s", p, strerror(errno));
    free(p);
  }
  dit_store_entries_free(ents, ne);
  dit_store_unlock(st);
  if (!s) q->n_entered = 0;
  return s;
}
