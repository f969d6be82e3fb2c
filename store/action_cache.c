/* The action cache: ac/<identity> (the manifest, every blob listed with its sha256), its
 * digest ac/<identity>.xxh128 and signature ac/<identity>.sig; reading validates an entry,
 * publishing links a complete file into place without replacing one already there. */
#include "store/store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "artifacts/identity.h"
#include "base/fileio.h"

dit_status_t dit_store_ac_path(const dit_store_t *st, const char *identity, const char *suffix, char **out) {
  *out = NULL;
  if (!dit_is_hash_hex(identity))
    return DIT_ERR(INVALID_ARGUMENT, "store: '%s' is not an identity (32 lowercase hex digits)", identity);
  size_t n = strlen(st->ac) + 48;
  *out = malloc(n);
  if (!*out) return dit_store_oom(st->root);
  snprintf(*out, n, "%s/%s%s", st->ac, identity, suffix);
  return DIT_OK;
}

/* ac/<identity>.xxh128 holds the XXH3-128 of the manifest's bytes and a newline, as a bundle
 * directory's manifest.xxh128 does: the identity covers only the inputs, so without it a
 * damaged field elsewhere in the manifest would go unnoticed. */
static dit_status_t check_digest(const dit_store_t *st, const char *identity, const char *path, const char *text,
                                 size_t len) {
  char *dp = NULL, *rec = NULL;
  size_t n = 0;
  DIT_RETURN_IF(dit_store_ac_path(st, identity, ".xxh128", &dp));
  dit_status_t s = dit_file_read(dp, 64, &rec, &n);
  if (!s && !(n == 33 && rec[32] == '\n' && (rec[32] = 0, dit_is_hash_hex(rec))))
    s = DIT_ERR(DATA_LOSS, "%s: expected 32 lowercase hex digits and a newline", dp);
  if (!s) {
    char found[DIT_HASH_HEX];
    dit_hash128_hex(text, len, found);
    if (strcmp(found, rec)) s = DIT_ERR(DATA_LOSS, "%s: content hash mismatch: expected %s (from %s), found %s", path, rec, dp, found);
  }
  free(rec);
  free(dp);
  return s;
}

/* Reads and validates an entry; touch marks it used. */
dit_status_t dit_store_read_entry(dit_store_t *st, const char *identity, int touch, dit_manifest_t **out_m,
                               char **out_text, size_t *out_len) {
  if (out_m) *out_m = NULL;
  if (out_text) *out_text = NULL;
  if (out_len) *out_len = 0;
  char *path;
  DIT_RETURN_IF(dit_store_ac_path(st, identity, "", &path));
  char *text = NULL;
  size_t len = 0;
  dit_manifest_t *m = NULL;
  dit_status_t s = dit_file_read(path, STORE_MANIFEST_MAX, &text, &len);
  if (s && dit_status_code(s) == DIT_CODE_NOT_FOUND) {
    dit_status_free(s);
    s = DIT_ERR(NOT_FOUND, "store %s: no entry for identity %s", st->root, identity);
  }
  if (!s) s = check_digest(st, identity, path, text, len);
  if (!s) s = dit_manifest_parse(text, len, path, &m);
  char recomputed[DIT_HASH_HEX];
  if (!s) s = dit_identity_compute(m->inputs, recomputed);
  if (!s && strcmp(m->identity, identity))
    s = DIT_ERR(DATA_LOSS, "%s: identity mismatch: entry name %s, manifest identity %s", path, identity, m->identity);
  if (!s && strcmp(recomputed, identity))
    s = DIT_ERR(DATA_LOSS, "%s: identity mismatch: recorded %s, recomputed from inputs %s", path, identity, recomputed);
  if (!s && touch) utimensat(AT_FDCWD, path, NULL, 0); /* best effort: a read-only store still serves */
  free(path);
  if (s) {
    free(text);
    dit_manifest_free(m);
    return s;
  }
  if (out_m) *out_m = m;
  else dit_manifest_free(m);
  if (out_text) *out_text = text;
  else free(text);
  if (out_len) *out_len = len;
  return DIT_OK;
}

dit_status_t dit_store_get_manifest(dit_store_t *st, const char *identity, dit_manifest_t **out_m,
                                    char **out_text, size_t *out_len) {
  return dit_store_read_entry(st, identity, 1, out_m, out_text, out_len);
}

int dit_store_blobs_complete(const dit_store_t *st, const dit_manifest_t *m) {
  for (size_t i = 0; i < m->n_blobs; i++)
    if (!dit_store_has_blob(st, m->blobs[i].hash, m->blobs[i].size)) return 0;
  return 1;
}

int dit_store_has_entry(dit_store_t *st, const char *identity) {
  dit_manifest_t *m = NULL;
  dit_status_t s = dit_store_read_entry(st, identity, 0, &m, NULL, NULL);
  if (s) {
    dit_status_free(s);
    return 0;
  }
  int ok = dit_store_blobs_complete(st, m);
  dit_manifest_free(m);
  return ok;
}

dit_status_t dit_store_get_signature(dit_store_t *st, const char *identity, char **out_text, size_t *out_len) {
  *out_text = NULL;
  if (out_len) *out_len = 0;
  char *path;
  DIT_RETURN_IF(dit_store_ac_path(st, identity, ".sig", &path));
  size_t len = 0;
  dit_status_t s = dit_file_read(path, STORE_SIG_MAX, out_text, &len);
  if (s && dit_status_code(s) == DIT_CODE_NOT_FOUND) {
    dit_status_free(s);
    s = DIT_ERR(NOT_FOUND, "store %s: entry %s is not signed (no %s)", st->root, identity, path);
  }
  free(path);
  if (!s && out_len) *out_len = len;
  return s;
}

dit_status_t dit_store_put_signature(dit_store_t *st, const char *identity, const char *sig_text) {
  char *path;
  DIT_RETURN_IF(dit_store_ac_path(st, identity, ".sig", &path));
  dit_status_t s = dit_store_lock(st, 0);
  if (!s) {
    s = dit_file_write_atomic(path, sig_text, strlen(sig_text));
    dit_store_unlock(st);
  }
  free(path);
  return s;
}

/* Writes data to a fresh file in tmp/ and links it to `final` without replacing anything:
 * *out_existed tells when final was already there. */
static dit_status_t publish_noreplace(dit_store_t *st, const char *final, const void *data, size_t len,
                                      int *out_existed) {
  *out_existed = 0;
  size_t n = strlen(st->tmp) + 32;
  char *tmp = malloc(n);
  if (!tmp) return dit_store_oom(st->root);
  snprintf(tmp, n, "%s/ac-XXXXXX", st->tmp);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    dit_status_t s = DIT_ERR(IO, "%s: cannot create: %s", tmp, strerror(errno));
    free(tmp);
    return s;
  }
  dit_status_t s = dit_store_write_fd(fd, tmp, data, len);
  if (!s && fsync(fd) != 0) s = DIT_ERR(IO, "%s: fsync failed: %s", tmp, strerror(errno));
  if (!s && fchmod(fd, 0444) != 0) s = DIT_ERR(IO, "%s: chmod failed: %s", tmp, strerror(errno));
  close(fd);
  if (!s && link(tmp, final) != 0) {
    if (errno == EEXIST) {
      *out_existed = 1;
    } else {
      /* File systems without hard links: rename with no replacement does the same. */
      int r = renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_NOREPLACE);
      if (r != 0 && errno == EEXIST) *out_existed = 1;
      else if (r != 0) s = DIT_ERR(IO, "%s: cannot publish from %s: %s", final, tmp, strerror(errno));
    }
  }
  unlink(tmp);
  free(tmp);
  return s;
}

dit_status_t dit_store_put_manifest(dit_store_t *st, const char *identity, const char *text, size_t len,
                                    const char *sig_text, int *out_existed) {
  if (out_existed) *out_existed = 0;
  char *path = NULL;
  DIT_RETURN_IF(dit_store_ac_path(st, identity, "", &path));
  char what[128];
  snprintf(what, sizeof what, "manifest for store entry %s", identity);
  dit_manifest_t *m = NULL;
  dit_status_t s = dit_manifest_parse(text, len, what, &m);
  char recomputed[DIT_HASH_HEX];
  if (!s) s = dit_identity_compute(m->inputs, recomputed);
  if (!s && (strcmp(m->identity, identity) || strcmp(recomputed, identity)))
    s = DIT_ERR(DATA_LOSS, "%s: identity mismatch: expected %s, manifest records %s, recomputed from inputs %s", what, identity,
                m->identity, recomputed);
  if (!s) s = dit_store_lock(st, 0);
  if (!s) {
    for (size_t i = 0; !s && i < m->n_blobs; i++) {
      const dit_manifest_blob_t *b = &m->blobs[i];
      if (!b->sha256[0])
        s = DIT_ERR(INVALID_ARGUMENT, "%s: field 'blobs[%zu].sha256' missing: store entries list every blob's SHA-256", what, i);
      else if (!dit_store_has_blob(st, b->hash, b->size))
        s = DIT_ERR(FAILED_PRECONDITION, "%s: blob %s (role %s, %" PRIu64 " bytes) is not in %s/cas: blobs go in before their manifest",
                    what, b->hash, b->role, b->size, st->root);
    }
    if (!s && sig_text) s = dit_store_put_signature(st, identity, sig_text);
    char *dp = NULL;
    if (!s) s = dit_store_ac_path(st, identity, ".xxh128", &dp);
    if (!s) {
      /* Written before the manifest it vouches for; rewriting it with the same digest is
       * harmless, and an entry whose text differs keeps its own (checked below). */
      char digest[DIT_HASH_HEX + 1];
      dit_hash128_hex(text, len, digest);
      digest[32] = '\n';
      if (!dit_path_exists(path)) s = dit_file_write_atomic(dp, digest, 33);
    }
    free(dp);
    dp = NULL;
    int existed = 0;
    if (!s) s = publish_noreplace(st, path, text, len, &existed);
    if (!s && existed) {
      /* Another publisher won with other bytes for this identity (a remote's, say): the
       * digest must describe the manifest that stayed. */
      char *kept = NULL;
      size_t klen = 0;
      s = dit_file_read(path, STORE_MANIFEST_MAX, &kept, &klen);
      dit_status_t ds = s ? DIT_OK : check_digest(st, identity, path, kept, klen);
      if (ds) {
        dit_status_free(ds);
        char digest[DIT_HASH_HEX + 1];
        dit_hash128_hex(kept, klen, digest);
        digest[32] = '\n';
        s = dit_store_ac_path(st, identity, ".xxh128", &dp);
        if (!s) s = dit_file_write_atomic(dp, digest, 33);
        free(dp);
      }
      free(kept);
    }
    if (!s) s = dit_fsync_dir(st->ac);
    if (!s && out_existed) *out_existed = existed;
    dit_store_unlock(st);
  }
  dit_manifest_free(m);
  free(path);
  return s;
}
