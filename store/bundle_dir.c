/* Bundle directories into and out of the store: import (every blob hashed and entered into
 * cas/, then the manifest with sha256 fields) and materialize (a directory of hard links into
 * cas/, built aside and renamed into place). */
#include "store/store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "artifacts/bundle.h"
#include "artifacts/identity.h"
#include "base/fileio.h"

static int inside_dir(const char *real_dir, const char *real_path) {
  size_t n = real_dir ? strlen(real_dir) : 0;
  return n && !strncmp(real_dir, real_path, n) && real_path[n] == '/';
}

/* Enters one blob file into cas; fills sha256. */
static dit_status_t import_blob(dit_store_t *st, const char *src, dit_manifest_blob_t *b, int may_link) {
  char dir[4200], final[4300];
  if (may_link) {
    char hash[DIT_HASH_HEX];
    uint64_t size = 0;
    DIT_RETURN_IF(dit_file_hashes(src, hash, b->sha256, &size));
    if (size != b->size)
      return DIT_ERR(DATA_LOSS, "%s: size mismatch: expected %" PRIu64 " bytes, found %" PRIu64, src, b->size, size);
    if (strcmp(hash, b->hash))
      return DIT_ERR(DATA_LOSS, "%s: content hash mismatch: expected %s, found %s", src, b->hash, hash);
    if (dit_store_has_blob(st, b->hash, b->size)) return DIT_OK;
    DIT_RETURN_IF(dit_store_blob_dir(st, b->hash, dir));
    snprintf(final, sizeof final, "%s/%s", dir, b->hash);
    /* The bundle directory is the store's own: its blob and the cas file become one inode,
     * read-only, so neither can be edited in place by accident. */
    if (link(src, final) == 0 || errno == EEXIST) {
      chmod(final, 0444);
      return dit_fsync_dir(dir);
    }
    if (errno != EXDEV && errno != EPERM && errno != EMLINK)
      return DIT_ERR(IO, "%s: cannot link from %s: %s", final, src, strerror(errno));
  }
  dit_mapping_t map;
  DIT_RETURN_IF(dit_file_map(src, &map));
  dit_store_blob_writer_t *w = NULL;
  dit_status_t s = dit_store_blob_writer_create(st, b->hash, b->size, NULL, src, &w);
  for (size_t off = 0; !s && off < map.size; off += STORE_IO_CHUNK)
    s = dit_store_blob_writer_append(w, map.data + off, map.size - off < STORE_IO_CHUNK ? map.size - off : STORE_IO_CHUNK);
  if (!s) s = dit_store_blob_writer_commit(w);
  if (!s) memcpy(b->sha256, dit_store_blob_writer_sha256(w), DIT_SHA256_HEX);
  dit_store_blob_writer_destroy(w);
  dit_file_unmap(&map);
  return s;
}

dit_status_t dit_store_import_bundle(dit_store_t *st, const char *bundle_dir, char out_identity[DIT_HASH_HEX]) {
  if (out_identity) out_identity[0] = 0;
  dit_bundle_t *b = NULL;
  DIT_RETURN_IF_ERROR(dit_bundle_open(bundle_dir, 0, &b), "store %s: import", st->root);
  char *mpath = dit_store_join(bundle_dir, "manifest.json");
  char *spath = dit_store_join(bundle_dir, "manifest.sig");
  char *real = realpath(bundle_dir, NULL);
  char *text = NULL, *sig = NULL, *out_text = NULL;
  size_t len = 0, slen = 0;
  dit_manifest_t *m = NULL;
  dit_status_t s = mpath && spath && real ? DIT_OK : dit_store_oom(bundle_dir);
  /* Parse our own copy: the bundle's manifest is read-only, and the entry adds sha256s. */
  if (!s) s = dit_file_read(mpath, STORE_MANIFEST_MAX, &text, &len);
  if (!s) s = dit_manifest_parse(text, len, mpath, &m);
  if (!s && strcmp(m->identity, dit_bundle_manifest(b)->identity))
    s = DIT_ERR(DATA_LOSS, "%s: changed while being imported", mpath);
  if (!s && dit_path_exists(spath)) s = dit_file_read(spath, STORE_SIG_MAX, &sig, &slen);
  if (!s) s = dit_store_lock(st, 0);
  if (!s) {
    int may_link = inside_dir(st->bundles_real, real);
    for (size_t i = 0; !s && i < m->n_blobs; i++) {
      char rel[64];
      snprintf(rel, sizeof rel, "blobs/%s", m->blobs[i].hash);
      char *src = dit_store_join(bundle_dir, rel);
      s = src ? import_blob(st, src, &m->blobs[i], may_link) : dit_store_oom(bundle_dir);
      free(src);
    }
    if (!s) s = dit_manifest_to_json(m, &out_text);
    /* A signature covers the exact manifest bytes, so one made over the bundle's own text
     * does not carry over once sha256 fields are added. */
    int sig_valid = sig && !strcmp(out_text ? out_text : "", text);
    if (!s) s = dit_store_put_manifest(st, m->identity, out_text, strlen(out_text), sig_valid ? sig : NULL, NULL);
    dit_store_unlock(st);
  }
  if (!s && out_identity) memcpy(out_identity, m->identity, DIT_HASH_HEX);
  free(out_text);
  free(text);
  free(sig);
  free(mpath);
  free(spath);
  free(real);
  dit_manifest_free(m);
  dit_bundle_close(b);
  return s ? dit_status_annotate(s, "store %s: import %s", st->root, bundle_dir) : DIT_OK;
}

/* 1 if dir opens as a bundle of `identity` (sizes checked, not hashes: the runtime hashes
 * before it runs anything). */
static int valid_bundle(const char *dir, const char *identity) {
  if (!dit_is_dir(dir)) return 0;
  dit_bundle_t *b = NULL;
  dit_status_t s = dit_bundle_open(dir, 0, &b);
  int ok = !s && !strcmp(dit_bundle_manifest(b)->identity, identity);
  dit_status_free(s);
  dit_bundle_close(b);
  return ok;
}

static dit_status_t build_view(dit_store_t *st, const char *tmp, const dit_manifest_t *m, const char *text,
                               size_t len, const char *sig) {
  char *blobs = dit_store_join(tmp, "blobs");
  if (!blobs) return dit_store_oom(tmp);
  dit_status_t s = mkdir(blobs, 0755) == 0 ? DIT_OK : DIT_ERR(IO, "%s: cannot create: %s", blobs, strerror(errno));
  for (size_t i = 0; !s && i < m->n_blobs; i++) {
    char *dst = dit_store_join(blobs, m->blobs[i].hash);
    s = dst ? dit_store_blob_place(st, m->blobs[i].hash, m->blobs[i].size, dst) : dit_store_oom(tmp);
    if (s && dit_status_code(s) == DIT_CODE_NOT_FOUND) s = dit_status_annotate(s, "role %s; pull or compile again", m->blobs[i].role);
    free(dst);
  }
  char *mp = dit_store_join(tmp, "manifest.json"), *hp = dit_store_join(tmp, "manifest.xxh128"), *sp = dit_store_join(tmp, "manifest.sig");
  if (!s && (!mp || !hp || !sp)) s = dit_store_oom(tmp);
  if (!s) s = dit_file_write_new(mp, text, len);
  if (!s) {
    /* The bundle reader's digest of manifest.json: 32 hex digits and a newline. */
    char digest[DIT_HASH_HEX + 1];
    dit_hash128_hex(text, len, digest);
    digest[32] = '\n';
    s = dit_file_write_new(hp, digest, 33);
  }
  if (!s && sig) s = dit_file_write_new(sp, sig, strlen(sig));
  if (!s) s = dit_fsync_dir(blobs);
  if (!s) s = dit_fsync_dir(tmp);
  free(mp);
  free(hp);
  free(sp);
  free(blobs);
  return s;
}

dit_status_t dit_store_materialize(dit_store_t *st, const char *identity, const char *parent_dir, char **out_path) {
  *out_path = NULL;
  const char *parent = parent_dir ? parent_dir : st->bundles;
  if (!dit_is_hash_hex(identity))
    return DIT_ERR(INVALID_ARGUMENT, "store: '%s' is not an identity (32 lowercase hex digits)", identity);
  char *final = dit_store_join(parent, identity);
  if (!final) return dit_store_oom(parent);
  dit_manifest_t *m = NULL;
  char *text = NULL, *sig = NULL, *tmp = NULL;
  size_t len = 0;
  dit_status_t s = dit_store_lock(st, 0);
  if (s) {
    free(final);
    return s;
  }
  s = dit_store_get_manifest(st, identity, &m, &text, &len);
  if (!s) {
    dit_status_t ss = dit_store_get_signature(st, identity, &sig, NULL);
    if (ss && dit_status_code(ss) != DIT_CODE_NOT_FOUND) s = ss;
    else dit_status_free(ss);
  }
  int have = !s && valid_bundle(final, identity);
  if (!s && have && sig) {
    /* A view made before the entry was signed lacks the signature a trusted-key run needs. */
    char *vs = dit_store_join(final, "manifest.sig");
    have = vs && dit_path_exists(vs);
    free(vs);
  }
  if (!s && !have) s = dit_mkdirs(parent, 0755);
  if (!s && !have) {
    tmp = dit_store_join(parent, ".tmp-view-XXXXXX");
    if (!tmp) s = dit_store_oom(parent);
    else if (!mkdtemp(tmp)) s = DIT_ERR(IO, "%s: cannot create: %s", tmp, strerror(errno));
    if (!s) s = build_view(st, tmp, m, text, len, sig);
    if (!s) {
      int r = renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_NOREPLACE);
      if (r != 0 && (errno == EINVAL || errno == ENOSYS)) r = rename(tmp, final);
      if (r != 0 && (errno == EEXIST || errno == ENOTEMPTY)) {
        /* Either a concurrent view (keep it) or a broken one: swap ours in atomically so a
         * reader sees the old directory or the new one, never neither. */
        if (!valid_bundle(final, identity) || sig) {
          r = renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE);
          if (r != 0) s = DIT_ERR(IO, "%s: cannot replace the invalid directory there: %s", final, strerror(errno));
        } else {
          r = 0;
        }
      } else if (r != 0) {
        s = DIT_ERR(IO, "%s: rename from %s failed: %s", final, tmp, strerror(errno));
      }
      if (!s) s = dit_fsync_dir(parent);
    }
    if (tmp && dit_is_dir(tmp)) dit_status_free(dit_remove_tree(tmp));
  }
  dit_store_unlock(st);
  free(tmp);
  free(text);
  free(sig);
  dit_manifest_free(m);
  if (s) {
    free(final);
    return dit_status_annotate(s, "store %s: materialize %s", st->root, identity);
  }
  *out_path = final;
  return DIT_OK;
}
