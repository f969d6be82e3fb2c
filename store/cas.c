/* Blobs in cas/: paths and presence, the verifying writer through which every blob from
 * outside (a remote, an archive, a bundle directory elsewhere) enters, and placing a blob in
 * a bundle directory (a hard link, or a copy across file systems). */
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

/* Start writeback every so many bytes so the fsync at commit finds little left to write. */
#define FLUSH_BYTES ((uint64_t)32 << 20)

dit_status_t dit_store_blob_path(const dit_store_t *st, const char *hash, char **out_path) {
  *out_path = NULL;
  if (!dit_is_hash_hex(hash)) return DIT_ERR(INVALID_ARGUMENT, "store: '%s' is not a blob hash (32 lowercase hex digits)", hash);
  size_t n = strlen(st->cas) + 40;
  char *p = malloc(n);
  if (!p) return dit_store_oom(st->root);
  snprintf(p, n, "%s/%.2s/%s", st->cas, hash, hash);
  *out_path = p;
  return DIT_OK;
}

int dit_store_has_blob(const dit_store_t *st, const char *hash, uint64_t size) {
  char *p = NULL;
  dit_status_t s = dit_store_blob_path(st, hash, &p);
  if (s) {
    dit_status_free(s);
    return 0;
  }
  struct stat sb;
  int ok = stat(p, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == size;
  free(p);
  return ok;
}

dit_status_t dit_store_blob_dir(const dit_store_t *st, const char *hash, char out[4200]) {
  DIT_RETURN_IF(dit_path_join(out, 4200, st->cas, (char[3]){hash[0], hash[1], 0}));
  return dit_mkdirs(out, 0755);
}

struct dit_store_blob_writer {
  dit_store_t *st;
  char hash[DIT_HASH_HEX], sha256[DIT_SHA256_HEX];
  char found_sha256[DIT_SHA256_HEX];
  char *source;
  uint64_t size, got, flushed;
  int fd;
  char *tmp_path;
  dit_hasher_t *xxh;
  dit_store_sha_t sha;
  int locked;
  dit_store_quota_t *quota; /* not owned; NULL: no limit but size */
};

static dit_status_t writer_start(dit_store_blob_writer_t *w) {
  size_t n = strlen(w->st->tmp) + 32;
  w->tmp_path = malloc(n);
  if (!w->tmp_path) return dit_store_oom(w->st->root);
  snprintf(w->tmp_path, n, "%s/blob-XXXXXX", w->st->tmp);
  w->fd = mkstemp(w->tmp_path);
  if (w->fd < 0) {
    dit_status_t s = DIT_ERR(IO, "%s: cannot create: %s", w->tmp_path, strerror(errno));
    free(w->tmp_path);
    w->tmp_path = NULL;
    return s;
  }
  w->got = w->flushed = 0;
  DIT_RETURN_IF(dit_hasher_create(&w->xxh));
  return dit_store_sha_init(&w->sha);
}

static void writer_drop(dit_store_blob_writer_t *w) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
  if (w->tmp_path) unlink(w->tmp_path);
  free(w->tmp_path);
  w->tmp_path = NULL;
  dit_hasher_destroy(w->xxh);
  w->xxh = NULL;
  dit_store_sha_free(&w->sha);
}

dit_status_t dit_store_blob_writer_create(dit_store_t *st, const char *hash, uint64_t size,
                                          const char *sha256, const char *source,
                                          dit_store_blob_writer_t **out) {
  *out = NULL;
  if (!dit_is_hash_hex(hash)) return DIT_ERR(INVALID_ARGUMENT, "%s: '%s' is not a blob hash", source ? source : "blob", hash);
  if (sha256 && strlen(sha256) != 64) return DIT_ERR(INVALID_ARGUMENT, "%s: sha256 '%s' is not 64 hex digits", source ? source : hash, sha256);
  dit_store_blob_writer_t *w = calloc(1, sizeof *w);
  if (!w) return dit_store_oom(st->root);
  w->st = st;
  w->fd = -1;
  memcpy(w->hash, hash, DIT_HASH_HEX);
  if (sha256) memcpy(w->sha256, sha256, DIT_SHA256_HEX);
  w->size = size;
  w->source = strdup(source ? source : hash);
  /* Held until destroy: gc empties tmp/ only when no writer can be using it. */
  dit_status_t s = w->source ? dit_store_lock(st, 0) : dit_store_oom(st->root);
  if (!s) w->locked = 1;
  if (!s) s = writer_start(w);
  if (s) {
    dit_store_blob_writer_destroy(w);
    return s;
  }
  *out = w;
  return DIT_OK;
}

dit_status_t dit_store_blob_writer_append(dit_store_blob_writer_t *w, const void *data, size_t n) {
  if (!w->tmp_path) return DIT_ERR(FAILED_PRECONDITION, "%s: blob writer already finished", w->source);
  if (n > w->size - w->got)
    return DIT_ERR(DATA_LOSS, "%s: more bytes than the %" PRIu64 " the manifest lists for blob %s", w->source, w->size, w->hash);
  if (w->quota) DIT_RETURN_IF_ERROR(dit_store_quota_charge(w->quota, n), "%s", w->source);
  DIT_RETURN_IF(dit_store_write_fd(w->fd, w->tmp_path, data, n));
  dit_hasher_update(w->xxh, data, n);
  dit_store_sha_update(&w->sha, data, n);
  w->got += n;
  if (w->got - w->flushed >= FLUSH_BYTES) {
    /* Start writeback while the download goes on, so the fsync at commit finds little left
     * to write: a multi-GiB blob then costs max(transfer, disk), not their sum. */
    sync_file_range(w->fd, (off_t)w->flushed, (off_t)(w->got - w->flushed), SYNC_FILE_RANGE_WRITE);
    w->flushed = w->got;
  }
  return DIT_OK;
}

dit_status_t dit_store_blob_writer_reset(dit_store_blob_writer_t *w) {
  /* The dropped bytes never reach the store; a retry may receive them again. */
  if (w->quota) dit_store_quota_refund(w->quota, w->got);
  writer_drop(w);
  return writer_start(w);
}

uint64_t dit_store_blob_writer_received(const dit_store_blob_writer_t *w) { return w->got; }

void dit_store_blob_writer_set_quota(dit_store_blob_writer_t *w, dit_store_quota_t *q) { w->quota = q; }

const char *dit_store_blob_writer_sha256(const dit_store_blob_writer_t *w) { return w->found_sha256; }

dit_status_t dit_store_blob_writer_commit(dit_store_blob_writer_t *w) {
  if (!w->tmp_path) return DIT_ERR(FAILED_PRECONDITION, "%s: blob writer already finished", w->source);
  dit_status_t s = DIT_OK;
  char found[DIT_HASH_HEX];
  dit_hasher_hex(w->xxh, found);
  dit_store_sha_hex(&w->sha, w->found_sha256);
  if (w->got != w->size)
    s = DIT_ERR(DATA_LOSS, "%s: truncated: blob %s should have %" PRIu64 " bytes, received %" PRIu64, w->source, w->hash, w->size, w->got);
  else if (strcmp(found, w->hash))
    s = DIT_ERR(DATA_LOSS, "%s: content hash mismatch: expected XXH3-128 %s, found %s", w->source, w->hash, found);
  else if (w->sha256[0] && strcmp(w->found_sha256, w->sha256))
    s = DIT_ERR(DATA_LOSS, "%s: SHA-256 mismatch for blob %s: the manifest lists %s, found %s", w->source, w->hash, w->sha256, w->found_sha256);
  if (!s && fsync(w->fd) != 0) s = DIT_ERR(IO, "%s: fsync failed: %s", w->tmp_path, strerror(errno));
  if (!s && fchmod(w->fd, 0444) != 0) s = DIT_ERR(IO, "%s: chmod failed: %s", w->tmp_path, strerror(errno));
  char dir[4200], final[4300];
  if (!s) s = dit_store_blob_dir(w->st, w->hash, dir);
  if (!s) snprintf(final, sizeof final, "%s/%s", dir, w->hash);
  /* A blob already there with the right size was entered by the same checks; a wrong-size
   * leftover is replaced. */
  int entered = 0;
  if (!s && !dit_store_has_blob(w->st, w->hash, w->size)) {
    if (rename(w->tmp_path, final) != 0) s = DIT_ERR(IO, "%s: rename from %s failed: %s", final, w->tmp_path, strerror(errno));
    else entered = 1;
  }
  if (!s) s = dit_fsync_dir(dir);
  /* Only a blob this writer entered is the transfer's to take back; one already there may
   * be listed by another entry or another writer's manifest to come. */
  if (!s && entered && w->quota) s = dit_store_quota_record(w->quota, w->hash);
  writer_drop(w);
  return s;
}

void dit_store_blob_writer_destroy(dit_store_blob_writer_t *w) {
  if (!w) return;
  writer_drop(w);
  if (w->locked) dit_store_unlock(w->st);
  free(w->source);
  free(w);
}

/* Links make a view free in time and space; whoever runs the bundle still hashes every blob
 * first, exactly as for any other bundle directory. */
dit_status_t dit_store_blob_place(dit_store_t *st, const char *hash, uint64_t size, const char *dst) {
  char *src = NULL;
  DIT_RETURN_IF(dit_store_blob_path(st, hash, &src));
  dit_status_t s = DIT_OK;
  if (!dit_store_has_blob(st, hash, size))
    s = DIT_ERR(NOT_FOUND, "%s (%" PRIu64 " bytes): missing from the store", src, size);
  else if (link(src, dst) != 0) {
    if (errno == EXDEV || errno == EPERM || errno == EMLINK) s = dit_store_copy_file(src, dst);
    else if (errno != EEXIST) s = DIT_ERR(IO, "%s: cannot link from %s: %s", dst, src, strerror(errno));
  }
  free(src);
  return s;
}
