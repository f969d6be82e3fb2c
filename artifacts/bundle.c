/* Bundle directories: the writer builds everything in a private temporary directory and
 * publishes it with one rename, so the final name either does not exist or names a complete,
 * fsynced bundle; the reader checks the manifest, the identity and every blob before it
 * hands out a byte. */
#include "artifacts/bundle.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "artifacts/identity.h"

#define MANIFEST_MAX_BYTES ((size_t)64 << 20)
/* XXH3-128 of manifest.json's bytes. The identity covers only `inputs`; without this a flipped
 * bit in, say, memory.arena_bytes or a tensor name would pass every other check. */
#define DIGEST_NAME "manifest.xxh128"
#define HASH_CHUNK ((size_t)1 << 20)

static char *path2(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", a, b);
  return p;
}

static dit_status_t oom(const char *what) {
  return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
}

/* ---------------------------------------------------------------------------------- */
/* Writer */

struct dit_bundle_writer {
  char *parent;
  char *tmp;       /* parent/.tmp-<pid>-<random>; NULL once published */
  char *blobs_dir; /* tmp/blobs */
  /* The open streamed blob, if any. */
  int stream_fd;
  char *stream_path;
  dit_hasher_t *stream_hash;
  uint64_t stream_size;
  dit_status_t stream_err; /* first failure of the stream; reported by end */
};

dit_status_t dit_bundle_writer_create(const char *parent_dir, dit_bundle_writer_t **out) {
  *out = NULL;
  if (!parent_dir || !parent_dir[0])
    return DIT_ERR(INVALID_ARGUMENT, "bundle writer: no parent directory");
  DIT_RETURN_IF_ERROR(dit_mkdirs(parent_dir, 0755), "bundle writer");
  dit_bundle_writer_t *w = calloc(1, sizeof *w);
  if (!w) return oom("bundle writer");
  w->stream_fd = -1;
  w->parent = strdup(parent_dir);
  char name[64];
  snprintf(name, sizeof name, ".tmp-%ld-XXXXXX", (long)getpid());
  w->tmp = w->parent ? path2(w->parent, name) : NULL;
  if (!w->tmp) {
    dit_bundle_writer_destroy(w);
    return oom("bundle writer");
  }
  /* mkdtemp supplies the random part and creates the directory exclusively, so two writers
   * (in this or another process, on this or another host sharing the store) never share it. */
  if (!mkdtemp(w->tmp)) {
    dit_status_t s = DIT_ERR(IO, "%s: cannot create a temporary directory: %s", w->tmp,
                             strerror(errno));
    free(w->tmp);
    w->tmp = NULL;
    dit_bundle_writer_destroy(w);
    return s;
  }
  w->blobs_dir = path2(w->tmp, "blobs");
  if (!w->blobs_dir) {
    dit_bundle_writer_destroy(w);
    return oom("bundle writer");
  }
  if (mkdir(w->blobs_dir, 0755) != 0) {
    dit_status_t s = DIT_ERR(IO, "%s: cannot create directory: %s", w->blobs_dir, strerror(errno));
    dit_bundle_writer_destroy(w);
    return s;
  }
  *out = w;
  return DIT_OK;
}

static dit_status_t writer_usable(const dit_bundle_writer_t *w, const char *op) {
  if (!w) return DIT_ERR(INVALID_ARGUMENT, "bundle writer: %s: no writer", op);
  if (!w->tmp) return DIT_ERR(FAILED_PRECONDITION, "bundle writer: %s: already published", op);
  return DIT_OK;
}

dit_status_t dit_bundle_writer_add_blob(dit_bundle_writer_t *w, const void *data, size_t size,
                                        char out_hash[DIT_HASH_HEX]) {
  out_hash[0] = 0;
  DIT_RETURN_IF(writer_usable(w, "add_blob"));
  if (size && !data) return DIT_ERR(INVALID_ARGUMENT, "bundle writer: add_blob: no data");
  char hex[DIT_HASH_HEX];
  dit_hash128_hex(data, size, hex);
  char *path = path2(w->blobs_dir, hex);
  if (!path) return oom("bundle writer");
  /* A blob is named by its content, so an existing file of that name already holds it. */
  dit_status_t s = dit_path_exists(path) ? DIT_OK : dit_file_write_atomic(path, data, size);
  free(path);
  DIT_RETURN_IF_ERROR(s, "bundle writer: blob %s", hex);
  memcpy(out_hash, hex, DIT_HASH_HEX);
  return DIT_OK;
}

static void stream_reset(dit_bundle_writer_t *w, int remove_file) {
  if (w->stream_fd >= 0) close(w->stream_fd);
  w->stream_fd = -1;
  if (remove_file && w->stream_path) unlink(w->stream_path);
  free(w->stream_path);
  w->stream_path = NULL;
  dit_hasher_destroy(w->stream_hash);
  w->stream_hash = NULL;
  dit_status_free(w->stream_err);
  w->stream_err = DIT_OK;
  w->stream_size = 0;
}

dit_status_t dit_bundle_writer_blob_dest(dit_bundle_writer_t *w, const char *hash, char **out_path) {
  *out_path = NULL;
  DIT_RETURN_IF(writer_usable(w, "blob_dest"));
  if (strlen(hash) != DIT_HASH_HEX - 1 || strspn(hash, "0123456789abcdef") != DIT_HASH_HEX - 1)
    return DIT_ERR(INVALID_ARGUMENT, "bundle writer: blob_dest: '%s' is not a blob hash", hash);
  *out_path = path2(w->blobs_dir, hash);
  return *out_path ? DIT_OK : oom("bundle writer");
}

dit_status_t dit_bundle_writer_blob_begin(dit_bundle_writer_t *w) {
  DIT_RETURN_IF(writer_usable(w, "blob_begin"));
  if (w->stream_path)
    return DIT_ERR(FAILED_PRECONDITION, "bundle writer: blob_begin: a streamed blob is open");
  w->stream_path = path2(w->blobs_dir, ".stream-XXXXXX");
  if (!w->stream_path) return oom("bundle writer");
  w->stream_fd = mkstemp(w->stream_path);
  if (w->stream_fd < 0) {
    dit_status_t s = DIT_ERR(IO, "%s: cannot create: %s", w->stream_path, strerror(errno));
    free(w->stream_path);
    w->stream_path = NULL;
    return s;
  }
  dit_status_t s = dit_hasher_create(&w->stream_hash);
  if (s) {
    stream_reset(w, 1);
    return s;
  }
  return DIT_OK;
}

dit_status_t dit_bundle_writer_blob_append(dit_bundle_writer_t *w, const void *data, size_t size) {
  DIT_RETURN_IF(writer_usable(w, "blob_append"));
  if (!w->stream_path)
    return DIT_ERR(FAILED_PRECONDITION, "bundle writer: blob_append: no streamed blob is open");
  if (w->stream_err) return DIT_ERR(FAILED_PRECONDITION, "bundle writer: blob_append: the stream "
                                                         "already failed: %s",
                                    dit_status_message(w->stream_err));
  if (size && !data) return DIT_ERR(INVALID_ARGUMENT, "bundle writer: blob_append: no data");
  const char *p = data;
  size_t left = size;
  while (left) {
    ssize_t n = write(w->stream_fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      /* Remember the failure so blob_end cannot name a blob with missing bytes. */
      w->stream_err = DIT_ERR(IO, "%s: write failed: %s", w->stream_path, strerror(errno));
      return DIT_ERR(IO, "%s", dit_status_message(w->stream_err));
    }
    p += n;
    left -= (size_t)n;
  }
  dit_hasher_update(w->stream_hash, data, size);
  w->stream_size += size;
  return DIT_OK;
}

dit_status_t dit_bundle_writer_blob_end(dit_bundle_writer_t *w, char out_hash[DIT_HASH_HEX],
                                        uint64_t *out_size) {
  out_hash[0] = 0;
  if (out_size) *out_size = 0;
  DIT_RETURN_IF(writer_usable(w, "blob_end"));
  if (!w->stream_path)
    return DIT_ERR(FAILED_PRECONDITION, "bundle writer: blob_end: no streamed blob is open");
  if (w->stream_err) {
    dit_status_t s = w->stream_err;
    w->stream_err = DIT_OK;
    stream_reset(w, 1);
    return s;
  }
  char hex[DIT_HASH_HEX];
  dit_hasher_hex(w->stream_hash, hex);
  dit_status_t s = DIT_OK;
  if (fsync(w->stream_fd) != 0)
    s = DIT_ERR(IO, "%s: fsync failed: %s", w->stream_path, strerror(errno));
  if (!s && fchmod(w->stream_fd, 0644) != 0)
    s = DIT_ERR(IO, "%s: chmod failed: %s", w->stream_path, strerror(errno));
  char *final = s ? NULL : path2(w->blobs_dir, hex);
  if (!s && !final) s = oom("bundle writer");
  if (!s && !dit_path_exists(final) && rename(w->stream_path, final) != 0)
    s = DIT_ERR(IO, "%s: rename from %s failed: %s", final, w->stream_path, strerror(errno));
  free(final);
  uint64_t size = w->stream_size;
  /* After a successful rename the temporary name is gone and the unlink is a no-op; if the
   * blob already existed, the duplicate copy is dropped here. */
  stream_reset(w, 1);
  if (s) return s;
  memcpy(out_hash, hex, DIT_HASH_HEX);
  if (out_size) *out_size = size;
  return DIT_OK;
}

/* Every listed blob must be in the temporary directory with its listed size, and nothing
 * else may be: a published bundle holds exactly what its manifest lists. */
static dit_status_t check_and_prune_blobs(dit_bundle_writer_t *w, const dit_manifest_t *m) {
  for (size_t i = 0; i < m->n_blobs; i++) {
    char *p = path2(w->blobs_dir, m->blobs[i].hash);
    if (!p) return oom("bundle writer");
    struct stat st;
    int r = stat(p, &st);
    free(p);
    if (r != 0)
      return DIT_ERR(NOT_FOUND, "bundle writer: manifest lists blob %s (role %s) but it was never "
                                "added",
                     m->blobs[i].hash, m->blobs[i].role);
    if ((uint64_t)st.st_size != m->blobs[i].size)
      return DIT_ERR(INVALID_ARGUMENT, "bundle writer: manifest lists blob %s (role %s) with size "
                                       "%llu, but it has %lld bytes",
                     m->blobs[i].hash, m->blobs[i].role, (unsigned long long)m->blobs[i].size,
                     (long long)st.st_size);
  }
  DIR *d = opendir(w->blobs_dir);
  if (!d) return DIT_ERR(IO, "%s: cannot open directory: %s", w->blobs_dir, strerror(errno));
  dit_status_t s = DIT_OK;
  struct dirent *e;
  while (!s && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (dit_manifest_find_blob(m, e->d_name)) continue;
    char *p = path2(w->blobs_dir, e->d_name);
    if (!p) {
      s = oom("bundle writer");
    } else {
      s = dit_remove_tree(p);
      free(p);
    }
  }
  closedir(d);
  return s;
}

dit_status_t dit_bundle_writer_publish(dit_bundle_writer_t *w, dit_manifest_t *m,
                                       const char *diagnostics_json, char **out_path,
                                       int *out_existed) {
  if (out_path) *out_path = NULL;
  if (out_existed) *out_existed = 0;
  DIT_RETURN_IF(writer_usable(w, "publish"));
  if (!m) return DIT_ERR(INVALID_ARGUMENT, "bundle writer: publish: no manifest");
  if (w->stream_path)
    return DIT_ERR(FAILED_PRECONDITION, "bundle writer: publish: a streamed blob is still open");
  DIT_RETURN_IF_ERROR(dit_identity_compute(m->inputs, m->identity), "bundle writer: publish");

  char *text = NULL;
  DIT_RETURN_IF_ERROR(dit_manifest_to_json(m, &text), "bundle writer: publish");
  /* Never publish what the reader would refuse: a compiler bug surfaces here, at the writer,
   * instead of on every host that pulls the bundle. */
  dit_manifest_t *check = NULL;
  dit_status_t s = dit_manifest_parse(text, strlen(text), "manifest.json (being published)", &check);
  dit_manifest_free(check);
  if (!s) s = check_and_prune_blobs(w, m);

  char *mpath = NULL, *dpath = NULL, *hpath = NULL, *final = NULL;
  if (!s) {
    mpath = path2(w->tmp, "manifest.json");
    dpath = path2(w->tmp, "diagnostics.json");
    hpath = path2(w->tmp, DIGEST_NAME);
    final = path2(w->parent, m->identity);
    if (!mpath || !dpath || !hpath || !final) s = oom("bundle writer");
  }
  if (!s) s = dit_file_write_atomic(mpath, text, strlen(text));
  if (!s) {
    char digest[DIT_HASH_HEX + 1];
    dit_hash128_hex(text, strlen(text), digest);
    digest[32] = '\n';
    s = dit_file_write_atomic(hpath, digest, 33);
  }
  if (!s && diagnostics_json) s = dit_file_write_atomic(dpath, diagnostics_json, strlen(diagnostics_json));
  if (!s) s = dit_fsync_dir(w->blobs_dir);
  if (!s) s = dit_fsync_dir(w->tmp);
  free(text);
  free(mpath);
  free(dpath);
  free(hpath);
  if (s) {
    free(final);
    return dit_status_annotate(s, "bundle writer: publish");
  }

  /* The one step that makes the bundle visible. RENAME_NOREPLACE refuses any existing
   * target; plain rename() would silently replace an empty directory, and is only the
   * fallback for file systems without it. */
  int existed = 0;
  int r = renameat2(AT_FDCWD, w->tmp, AT_FDCWD, final, RENAME_NOREPLACE);
  if (r != 0 && (errno == EINVAL || errno == ENOSYS)) r = rename(w->tmp, final);
  if (r != 0) {
    if (errno == EEXIST || errno == ENOTEMPTY) {
      existed = 1;
    } else {
      s = DIT_ERR(IO, "bundle writer: publish: rename %s -> %s failed: %s", w->tmp, final,
                  strerror(errno));
      free(final);
      return s;
    }
  }
  if (existed) {
    /* Same identity, same inputs: the bundle already there is equivalent, so it is kept
     * (readers may be using it) and ours is discarded. */
    s = dit_remove_tree(w->tmp);
    if (s) {
      free(final);
      return dit_status_annotate(s, "bundle writer: publish: discarding the duplicate");
    }
  } else {
    s = dit_fsync_dir(w->parent);
    if (s) {
      /* The rename happened; the bundle is complete, only its durability is unknown. */
      free(w->tmp);
      w->tmp = NULL;
      free(final);
      return dit_status_annotate(s, "bundle writer: publish");
    }
  }
  free(w->tmp);
  w->tmp = NULL;
  if (out_existed) *out_existed = existed;
  if (out_path)
    *out_path = final;
  else
    free(final);
  return DIT_OK;
}

void dit_bundle_writer_destroy(dit_bundle_writer_t *w) {
  if (!w) return;
  stream_reset(w, 1);
  if (w->tmp) {
    dit_status_t s = dit_remove_tree(w->tmp);
    dit_status_free(s); /* nothing to report to; a leftover .tmp-* dir is never read */
  }
  free(w->tmp);
  free(w->blobs_dir);
  free(w->parent);
  free(w);
}

/* ---------------------------------------------------------------------------------- */
/* Reader */

struct dit_bundle {
  char *dir;
  dit_manifest_t *m;
  unsigned flags;
};

static dit_status_t hash_mapping(const dit_mapping_t *map, char out_hex[DIT_HASH_HEX]) {
  dit_hasher_t *h;
  DIT_RETURN_IF(dit_hasher_create(&h));
  /* Chunked so the hasher never sees one huge length and page faults come in order. */
  for (size_t off = 0; off < map->size; off += HASH_CHUNK) {
    size_t n = map->size - off < HASH_CHUNK ? map->size - off : HASH_CHUNK;
    dit_hasher_update(h, map->data + off, n);
  }
  dit_hasher_hex(h, out_hex);
  dit_hasher_destroy(h);
  return DIT_OK;
}

/* Process-wide: every blob hash this process computed, so a caller can show that a bundle's
 * bytes were verified once however many parts of it were loaded. */
static uint64_t g_hashed_blobs, g_hashed_bytes;

void dit_bundle_hash_stats(uint64_t *out_blobs, uint64_t *out_bytes) {
  *out_blobs = __atomic_load_n(&g_hashed_blobs, __ATOMIC_RELAXED);
  *out_bytes = __atomic_load_n(&g_hashed_bytes, __ATOMIC_RELAXED);
}

/* The content hash of a mapping of blob (at path p) against the manifest's. */
static dit_status_t check_hash(const char *p, const dit_manifest_blob_t *blob, const dit_mapping_t *map) {
  char found[DIT_HASH_HEX];
  dit_status_t s = hash_mapping(map, found);
  __atomic_add_fetch(&g_hashed_blobs, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&g_hashed_bytes, (uint64_t)map->size, __ATOMIC_RELAXED);
  if (!s && strcmp(found, blob->hash) != 0)
    s = DIT_ERR(DATA_LOSS, "%s (role %s): content hash mismatch: expected %s, found %s", p, blob->role, blob->hash, found);
  return s;
}

/* Maps blob i, checks its size and, if `verify`, its content hash. */
static dit_status_t map_checked(const dit_bundle_t *b, const dit_manifest_blob_t *blob, int verify,
                                dit_mapping_t *out) {
  out->data = NULL;
  out->size = 0;
  char rel[64];
  snprintf(rel, sizeof rel, "blobs/%s", blob->hash);
  char *p = path2(b->dir, rel);
  if (!p) return oom(b->dir);
  struct stat st;
  if (stat(p, &st) != 0) {
    dit_status_t s = errno == ENOENT
                         ? DIT_ERR(NOT_FOUND, "%s (role %s): missing", p, blob->role)
                         : DIT_ERR(IO, "%s (role %s): cannot stat: %s", p, blob->role, strerror(errno));
    free(p);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    dit_status_t s = DIT_ERR(DATA_LOSS, "%s (role %s): not a regular file", p, blob->role);
    free(p);
    return s;
  }
  /* Checked before mapping so a size mismatch is reported as such, and checked again on the
   * mapping in case the file changed in between. */
  if ((uint64_t)st.st_size != blob->size) {
    dit_status_t s = DIT_ERR(DATA_LOSS, "%s (role %s): size mismatch: expected %llu bytes, found %lld",
                             p, blob->role, (unsigned long long)blob->size, (long long)st.st_size);
    free(p);
    return s;
  }
  dit_mapping_t map;
  dit_status_t s = dit_file_map(p, &map);
  if (!s && (uint64_t)map.size != blob->size) {
    s = DIT_ERR(DATA_LOSS, "%s (role %s): size mismatch: expected %llu bytes, found %zu", p,
                blob->role, (unsigned long long)blob->size, map.size);
    dit_file_unmap(&map);
  }
  if (!s && verify) {
    s = check_hash(p, blob, &map);
    if (s) dit_file_unmap(&map);
  }
  free(p);
  if (s) return s;
  *out = map;
  return DIT_OK;
}

/* The last path component, ignoring trailing slashes, into out (cut to fit). */
static void base_name(const char *dir, char *out, size_t cap) {
  size_t end = strlen(dir);
  while (end > 1 && dir[end - 1] == '/') end--;
  size_t start = end;
  while (start > 0 && dir[start - 1] != '/') start--;
  size_t n = end - start;
  if (n >= cap) n = cap - 1;
  memcpy(out, dir + start, n);
  out[n] = 0;
}

/* Reading a FIFO or device planted under a bundle's file name would block or never end, so
 * only regular files are opened. */
static dit_status_t require_regular(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0)
    return dit_status_make(errno == ENOENT ? DIT_CODE_NOT_FOUND : DIT_CODE_IO, "%s: cannot open: %s",
                           path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return DIT_ERR(DATA_LOSS, "%s: not a regular file", path);
  return DIT_OK;
}

/* manifest.xxh128 holds the 32 hex digits of manifest.json's XXH3-128 and a newline. */
static dit_status_t check_manifest_digest(const char *dir, const char *mpath, const char *text,
                                          size_t len) {
  char *hpath = path2(dir, DIGEST_NAME);
  if (!hpath) return oom(dir);
  char *rec = NULL;
  size_t n = 0;
  dit_status_t s = require_regular(hpath);
  if (!s) s = dit_file_read(hpath, 64, &rec, &n);
  if (!s && !(n == 33 && rec[32] == '\n' && (rec[32] = 0, dit_is_hash_hex(rec))))
    s = DIT_ERR(DATA_LOSS, "%s: expected 32 lowercase hex digits and a newline", hpath);
  if (!s) {
    char found[DIT_HASH_HEX];
    dit_hash128_hex(text, len, found);
    if (strcmp(found, rec) != 0)
      s = DIT_ERR(DATA_LOSS, "%s: content hash mismatch: expected %s (from %s), found %s", mpath,
                  rec, DIGEST_NAME, found);
  }
  free(rec);
  free(hpath);
  return s;
}

dit_status_t dit_bundle_open(const char *dir, unsigned flags, dit_bundle_t **out) {
  *out = NULL;
  if (!dir || !dir[0]) return DIT_ERR(INVALID_ARGUMENT, "bundle: no directory");
  if (flags & ~(unsigned)(DIT_BUNDLE_HASH_BLOBS | DIT_BUNDLE_HASH_LATER))
    return DIT_ERR(INVALID_ARGUMENT, "%s: unknown open flags 0x%x", dir, flags);
  dit_bundle_t *b = calloc(1, sizeof *b);
  if (!b) return oom(dir);
  b->flags = flags;
  b->dir = strdup(dir);
  char *mpath = b->dir ? path2(dir, "manifest.json") : NULL;
  if (!mpath) {
    dit_bundle_close(b);
    return oom(dir);
  }
  char *text = NULL;
  size_t len = 0;
  dit_status_t s = require_regular(mpath);
  if (!s) s = dit_file_read(mpath, MANIFEST_MAX_BYTES, &text, &len);
  if (!s) s = dit_manifest_parse(text, len, mpath, &b->m);

  char recomputed[DIT_HASH_HEX];
  if (!s) s = dit_identity_compute(b->m->inputs, recomputed);
  if (!s && strcmp(recomputed, b->m->identity) != 0)
    s = DIT_ERR(DATA_LOSS, "%s: identity mismatch: recorded %s, recomputed from inputs %s", mpath,
                b->m->identity, recomputed);
  if (!s) {
    /* A bundle found under a store name must be the bundle of that name; other names (a
     * copy under "latest", say) are fine. */
    char name[64];
    base_name(dir, name, sizeof name);
    if (dit_is_hash_hex(name) && strcmp(name, b->m->identity) != 0)
      s = DIT_ERR(DATA_LOSS, "%s: identity mismatch: directory name %s, manifest identity %s", dir,
                  name, b->m->identity);
  }
  /* Last of the manifest checks: any edit fails here at the latest, but one that breaks the
   * schema, the identity or the name is reported as that, which says more (and a bundle of a
   * newer schema gets "newer", whatever it keeps beside its manifest). */
  if (!s) s = check_manifest_digest(dir, mpath, text, len);
  free(text);
  for (size_t i = 0; !s && i < b->m->n_blobs; i++) {
    dit_mapping_t map;
    const int later = (flags & DIT_BUNDLE_HASH_LATER) && !strcmp(b->m->blobs[i].role, "weights");
    s = map_checked(b, &b->m->blobs[i], (flags & DIT_BUNDLE_HASH_BLOBS) && !later, &map);
    if (!s) dit_file_unmap(&map);
  }
  free(mpath);
  if (s) {
    dit_bundle_close(b);
    return s;
  }
  *out = b;
  return DIT_OK;
}

void dit_bundle_close(dit_bundle_t *b) {
  if (!b) return;
  dit_manifest_free(b->m);
  free(b->dir);
  free(b);
}

const dit_manifest_t *dit_bundle_manifest(const dit_bundle_t *b) { return b->m; }

const char *dit_bundle_dir(const dit_bundle_t *b) { return b->dir; }

dit_status_t dit_bundle_check_blob(const dit_bundle_t *b, const char *hash, const dit_mapping_t *map) {
  const dit_manifest_blob_t *blob = b ? dit_manifest_find_blob(b->m, hash) : NULL;
  if (!blob) return DIT_ERR(NOT_FOUND, "bundle: blob %s is not listed in manifest.json", hash ? hash : "(null)");
  char rel[64];
  snprintf(rel, sizeof rel, "blobs/%s", blob->hash);
  char *p = path2(b->dir, rel);
  if (!p) return oom(b->dir);
  dit_status_t s = map->size != blob->size ? DIT_ERR(DATA_LOSS, "%s (role %s): size mismatch: expected %llu bytes, found %zu", p, blob->role,
                                                     (unsigned long long)blob->size, map->size)
                                           : check_hash(p, blob, map);
  free(p);
  return s;
}

dit_status_t dit_bundle_map_blob(dit_bundle_t *b, const char *hash, dit_mapping_t *out) {
  out->data = NULL;
  out->size = 0;
  if (!b) return DIT_ERR(INVALID_ARGUMENT, "bundle: map_blob: no bundle");
  const dit_manifest_blob_t *blob = dit_manifest_find_blob(b->m, hash);
  if (!blob)
    return DIT_ERR(NOT_FOUND, "%s: blob %s is not listed in manifest.json", b->dir,
                   hash ? hash : "(null)");
  /* Without HASH_BLOBS at open nothing vouches for these bytes yet; each mapping is hashed,
   * since the file may have changed since any earlier one. */
  return map_checked(b, blob, !(b->flags & DIT_BUNDLE_HASH_BLOBS), out);
}
