/* The local content-addressed store (layout and guarantees in store.h). Every file enters
 * cas/ or ac/ complete, by one rename or link from tmp/ on the same file system, and blobs
 * always before the manifest that lists them. */
#include "artifacts/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "artifacts/bundle.h"
#include "artifacts/identity.h"
#include "base/fileio.h"

#define STORE_MANIFEST_MAX ((size_t)64 << 20)
#define STORE_SIG_MAX ((size_t)64 << 10)
#define STORE_MEMO_MAX ((size_t)16 << 20)
#define IO_CHUNK ((size_t)1 << 20)
#define FLUSH_BYTES ((uint64_t)32 << 20)
/* A bundle directory of this store with no entry yet may be a compile between its publish
 * and its import; gc leaves such directories (and writers' temporaries) this long. */
#define GRACE_SECONDS (60 * 60)
#define STALE_TMP_SECONDS (24 * 60 * 60)

struct dit_store {
  char *root, *cas, *ac, *bundles, *memo, *tmp, *lock_path;
  char *bundles_real; /* realpath of bundles/, to tell our own bundle directories */
  int lock_fd, lock_depth, lock_excl;
};

static char *path2(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", a, b);
  return p;
}

static dit_status_t oom(const char *what) { return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what); }

void dit_format_bytes(uint64_t n, char out[32]) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (n < 1024) {
    snprintf(out, 32, "%" PRIu64 " B", n);
    return;
  }
  double v = (double)n;
  int u = -1;
  while (v >= 1024 && u < 3) v /= 1024, u++;
  snprintf(out, 32, "%.1f %s", v, units[u]);
}

/* ---------------------------------------------------------------------------------- */
/* SHA-256 (OpenSSL) */

typedef struct {
  EVP_MD_CTX *ctx;
} sha_t;

static dit_status_t sha_init(sha_t *s) {
  s->ctx = EVP_MD_CTX_new();
  if (!s->ctx || EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(s->ctx);
    s->ctx = NULL;
    return DIT_ERR(UNAVAILABLE, "OpenSSL EVP_DigestInit_ex(sha256) failed");
  }
  return DIT_OK;
}

static void sha_update(sha_t *s, const void *p, size_t n) {
  if (n) EVP_DigestUpdate(s->ctx, p, n);
}

static void sha_hex(sha_t *s, char out[DIT_SHA256_HEX]) {
  unsigned char d[32];
  unsigned int n = 0;
  EVP_DigestFinal_ex(s->ctx, d, &n);
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    out[2 * i] = digits[d[i] >> 4];
    out[2 * i + 1] = digits[d[i] & 15];
  }
  out[64] = 0;
}

static void sha_free(sha_t *s) {
  EVP_MD_CTX_free(s->ctx);
  s->ctx = NULL;
}

dit_status_t dit_file_hashes(const char *path, char out_hash[DIT_HASH_HEX],
                             char out_sha256[DIT_SHA256_HEX], uint64_t *out_size) {
  dit_mapping_t map;
  DIT_RETURN_IF(dit_file_map(path, &map));
  dit_hasher_t *h = NULL;
  sha_t sha = {0};
  dit_status_t s = dit_hasher_create(&h);
  if (!s) s = sha_init(&sha);
  if (!s) {
    /* One pass over the mapping feeds both digests while each chunk is in cache. */
    for (size_t off = 0; off < map.size; off += IO_CHUNK) {
      size_t n = map.size - off < IO_CHUNK ? map.size - off : IO_CHUNK;
      dit_hasher_update(h, map.data + off, n);
      sha_update(&sha, map.data + off, n);
    }
    dit_hasher_hex(h, out_hash);
    sha_hex(&sha, out_sha256);
    if (out_size) *out_size = map.size;
  }
  sha_free(&sha);
  dit_hasher_destroy(h);
  dit_file_unmap(&map);
  return s;
}

/* ---------------------------------------------------------------------------------- */
/* Open, close, lock */

dit_status_t dit_store_open(const char *root, dit_store_t **out) {
  *out = NULL;
  if (!root || !root[0]) return DIT_ERR(INVALID_ARGUMENT, "store: no directory given");
  dit_store_t *st = calloc(1, sizeof *st);
  if (!st) return oom(root);
  st->lock_fd = -1;
  st->root = strdup(root);
  if (st->root) {
    st->cas = path2(root, "cas");
    st->ac = path2(root, "ac");
    st->bundles = path2(root, "bundles");
    st->memo = path2(root, "memo");
    st->tmp = path2(root, "tmp");
    st->lock_path = path2(root, "lock");
  }
  if (!st->root || !st->cas || !st->ac || !st->bundles || !st->memo || !st->tmp || !st->lock_path) {
    dit_store_close(st);
    return oom(root);
  }
  const char *dirs[] = {st->cas, st->ac, st->bundles, st->memo, st->tmp};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    dit_status_t s = dit_mkdirs(dirs[i], 0755);
    if (s) {
      dit_store_close(st);
      return dit_status_annotate(s, "store %s", root);
    }
  }
  st->lock_fd = open(st->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  /* A store mounted read-only still serves: flock works on a read-only descriptor. */
  if (st->lock_fd < 0 && (errno == EACCES || errno == EROFS)) st->lock_fd = open(st->lock_path, O_RDONLY | O_CLOEXEC);
  if (st->lock_fd < 0) {
    dit_status_t s = DIT_ERR(IO, "store %s: cannot open %s: %s", root, st->lock_path, strerror(errno));
    dit_store_close(st);
    return s;
  }
  st->bundles_real = realpath(st->bundles, NULL);
  *out = st;
  return DIT_OK;
}

void dit_store_close(dit_store_t *st) {
  if (!st) return;
  if (st->lock_fd >= 0) close(st->lock_fd); /* also drops any flock */
  free(st->root);
  free(st->cas);
  free(st->ac);
  free(st->bundles);
  free(st->memo);
  free(st->tmp);
  free(st->lock_path);
  free(st->bundles_real);
  free(st);
}

const char *dit_store_root(const dit_store_t *st) { return st->root; }

dit_status_t dit_store_lock(dit_store_t *st, int exclusive) {
  if (st->lock_depth > 0) {
    if (exclusive && !st->lock_excl)
      return DIT_ERR(INTERNAL, "store %s: exclusive lock requested while holding it shared", st->root);
    st->lock_depth++;
    return DIT_OK;
  }
  int r;
  do r = flock(st->lock_fd, exclusive ? LOCK_EX : LOCK_SH);
  while (r != 0 && errno == EINTR);
  if (r != 0) return DIT_ERR(IO, "store %s: cannot lock %s: %s", st->root, st->lock_path, strerror(errno));
  st->lock_depth = 1;
  st->lock_excl = exclusive;
  return DIT_OK;
}

void dit_store_unlock(dit_store_t *st) {
  if (st->lock_depth <= 0) return;
  if (--st->lock_depth == 0) flock(st->lock_fd, LOCK_UN);
}

/* ---------------------------------------------------------------------------------- */
/* Blobs */

dit_status_t dit_store_blob_path(const dit_store_t *st, const char *hash, char **out_path) {
  *out_path = NULL;
  if (!dit_is_hash_hex(hash)) return DIT_ERR(INVALID_ARGUMENT, "store: '%s' is not a blob hash (32 lowercase hex digits)", hash);
  size_t n = strlen(st->cas) + 40;
  char *p = malloc(n);
  if (!p) return oom(st->root);
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

/* cas/<xx> for a hash, created if missing. */
static dit_status_t blob_dir(const dit_store_t *st, const char *hash, char out[4200]) {
  DIT_RETURN_IF(dit_path_join(out, 4200, st->cas, (char[3]){hash[0], hash[1], 0}));
  return dit_mkdirs(out, 0755);
}

static dit_status_t write_all(int fd, const char *path, const void *data, size_t n) {
  const char *p = data;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return DIT_ERR(IO, "%s: write failed: %s", path, strerror(errno));
    p += w;
    n -= (size_t)w;
  }
  return DIT_OK;
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
  sha_t sha;
  int locked;
};

static dit_status_t writer_start(dit_store_blob_writer_t *w) {
  size_t n = strlen(w->st->tmp) + 32;
  w->tmp_path = malloc(n);
  if (!w->tmp_path) return oom(w->st->root);
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
  return sha_init(&w->sha);
}

static void writer_drop(dit_store_blob_writer_t *w) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
  if (w->tmp_path) unlink(w->tmp_path);
  free(w->tmp_path);
  w->tmp_path = NULL;
  dit_hasher_destroy(w->xxh);
  w->xxh = NULL;
  sha_free(&w->sha);
}

dit_status_t dit_store_blob_writer_create(dit_store_t *st, const char *hash, uint64_t size,
                                          const char *sha256, const char *source,
                                          dit_store_blob_writer_t **out) {
  *out = NULL;
  if (!dit_is_hash_hex(hash)) return DIT_ERR(INVALID_ARGUMENT, "%s: '%s' is not a blob hash", source ? source : "blob", hash);
  if (sha256 && strlen(sha256) != 64) return DIT_ERR(INVALID_ARGUMENT, "%s: sha256 '%s' is not 64 hex digits", source ? source : hash, sha256);
  dit_store_blob_writer_t *w = calloc(1, sizeof *w);
  if (!w) return oom(st->root);
  w->st = st;
  w->fd = -1;
  memcpy(w->hash, hash, DIT_HASH_HEX);
  if (sha256) memcpy(w->sha256, sha256, DIT_SHA256_HEX);
  w->size = size;
  w->source = strdup(source ? source : hash);
  /* Held until destroy: gc empties tmp/ only when no writer can be using it. */
  dit_status_t s = w->source ? dit_store_lock(st, 0) : oom(st->root);
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
  DIT_RETURN_IF(write_all(w->fd, w->tmp_path, data, n));
  dit_hasher_update(w->xxh, data, n);
  sha_update(&w->sha, data, n);
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
  writer_drop(w);
  return writer_start(w);
}

uint64_t dit_store_blob_writer_received(const dit_store_blob_writer_t *w) { return w->got; }

dit_status_t dit_store_blob_writer_commit(dit_store_blob_writer_t *w) {
  if (!w->tmp_path) return DIT_ERR(FAILED_PRECONDITION, "%s: blob writer already finished", w->source);
  dit_status_t s = DIT_OK;
  char found[DIT_HASH_HEX];
  dit_hasher_hex(w->xxh, found);
  sha_hex(&w->sha, w->found_sha256);
  if (w->got != w->size)
    s = DIT_ERR(DATA_LOSS, "%s: truncated: blob %s should have %" PRIu64 " bytes, received %" PRIu64, w->source, w->hash, w->size, w->got);
  else if (strcmp(found, w->hash))
    s = DIT_ERR(DATA_LOSS, "%s: content hash mismatch: expected XXH3-128 %s, found %s", w->source, w->hash, found);
  else if (w->sha256[0] && strcmp(w->found_sha256, w->sha256))
    s = DIT_ERR(DATA_LOSS, "%s: SHA-256 mismatch for blob %s: the manifest lists %s, found %s", w->source, w->hash, w->sha256, w->found_sha256);
  if (!s && fsync(w->fd) != 0) s = DIT_ERR(IO, "%s: fsync failed: %s", w->tmp_path, strerror(errno));
  if (!s && fchmod(w->fd, 0444) != 0) s = DIT_ERR(IO, "%s: chmod failed: %s", w->tmp_path, strerror(errno));
  char dir[4200], final[4300];
  if (!s) s = blob_dir(w->st, w->hash, dir);
  if (!s) snprintf(final, sizeof final, "%s/%s", dir, w->hash);
  /* A blob already there with the right size was entered by the same checks; a wrong-size
   * leftover is replaced. */
  if (!s && !dit_store_has_blob(w->st, w->hash, w->size) && rename(w->tmp_path, final) != 0)
    s = DIT_ERR(IO, "%s: rename from %s failed: %s", final, w->tmp_path, strerror(errno));
  if (!s) s = dit_fsync_dir(dir);
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

/* ---------------------------------------------------------------------------------- */
/* Action cache */

static dit_status_t ac_path(const dit_store_t *st, const char *identity, const char *suffix, char **out) {
  *out = NULL;
  if (!dit_is_hash_hex(identity))
    return DIT_ERR(INVALID_ARGUMENT, "store: '%s' is not an identity (32 lowercase hex digits)", identity);
  size_t n = strlen(st->ac) + 48;
  *out = malloc(n);
  if (!*out) return oom(st->root);
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
  DIT_RETURN_IF(ac_path(st, identity, ".xxh128", &dp));
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
static dit_status_t read_entry(dit_store_t *st, const char *identity, int touch, dit_manifest_t **out_m,
                               char **out_text, size_t *out_len) {
  if (out_m) *out_m = NULL;
  if (out_text) *out_text = NULL;
  if (out_len) *out_len = 0;
  char *path;
  DIT_RETURN_IF(ac_path(st, identity, "", &path));
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
  return read_entry(st, identity, 1, out_m, out_text, out_len);
}

static int blobs_complete(const dit_store_t *st, const dit_manifest_t *m) {
  for (size_t i = 0; i < m->n_blobs; i++)
    if (!dit_store_has_blob(st, m->blobs[i].hash, m->blobs[i].size)) return 0;
  return 1;
}

int dit_store_has_entry(dit_store_t *st, const char *identity) {
  dit_manifest_t *m = NULL;
  dit_status_t s = read_entry(st, identity, 0, &m, NULL, NULL);
  if (s) {
    dit_status_free(s);
    return 0;
  }
  int ok = blobs_complete(st, m);
  dit_manifest_free(m);
  return ok;
}

dit_status_t dit_store_get_signature(dit_store_t *st, const char *identity, char **out_text, size_t *out_len) {
  *out_text = NULL;
  if (out_len) *out_len = 0;
  char *path;
  DIT_RETURN_IF(ac_path(st, identity, ".sig", &path));
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
  DIT_RETURN_IF(ac_path(st, identity, ".sig", &path));
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
  if (!tmp) return oom(st->root);
  snprintf(tmp, n, "%s/ac-XXXXXX", st->tmp);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    dit_status_t s = DIT_ERR(IO, "%s: cannot create: %s", tmp, strerror(errno));
    free(tmp);
    return s;
  }
  dit_status_t s = write_all(fd, tmp, data, len);
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
  DIT_RETURN_IF(ac_path(st, identity, "", &path));
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
    if (!s) s = ac_path(st, identity, ".xxh128", &dp);
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
        s = ac_path(st, identity, ".xxh128", &dp);
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

/* ---------------------------------------------------------------------------------- */
/* Import a bundle directory */

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
    DIT_RETURN_IF(blob_dir(st, b->hash, dir));
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
  for (size_t off = 0; !s && off < map.size; off += IO_CHUNK)
    s = dit_store_blob_writer_append(w, map.data + off, map.size - off < IO_CHUNK ? map.size - off : IO_CHUNK);
  if (!s) s = dit_store_blob_writer_commit(w);
  if (!s) memcpy(b->sha256, w->found_sha256, DIT_SHA256_HEX);
  dit_store_blob_writer_destroy(w);
  dit_file_unmap(&map);
  return s;
}

dit_status_t dit_store_import_bundle(dit_store_t *st, const char *bundle_dir, char out_identity[DIT_HASH_HEX]) {
  if (out_identity) out_identity[0] = 0;
  dit_bundle_t *b = NULL;
  DIT_RETURN_IF_ERROR(dit_bundle_open(bundle_dir, 0, &b), "store %s: import", st->root);
  char *mpath = path2(bundle_dir, "manifest.json");
  char *spath = path2(bundle_dir, "manifest.sig");
  char *real = realpath(bundle_dir, NULL);
  char *text = NULL, *sig = NULL, *out_text = NULL;
  size_t len = 0, slen = 0;
  dit_manifest_t *m = NULL;
  dit_status_t s = mpath && spath && real ? DIT_OK : oom(bundle_dir);
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
      char *src = path2(bundle_dir, rel);
      s = src ? import_blob(st, src, &m->blobs[i], may_link) : oom(bundle_dir);
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

/* ---------------------------------------------------------------------------------- */
/* Materialize */

static dit_status_t copy_file(const char *src, const char *dst);

/* Links make a view free in time and space; whoever runs the bundle still hashes every blob
 * first, exactly as for any other bundle directory. */
dit_status_t dit_store_blob_place(dit_store_t *st, const char *hash, uint64_t size, const char *dst) {
  char *src = NULL;
  DIT_RETURN_IF(dit_store_blob_path(st, hash, &src));
  dit_status_t s = DIT_OK;
  if (!dit_store_has_blob(st, hash, size))
    s = DIT_ERR(NOT_FOUND, "%s (%" PRIu64 " bytes): missing from the store", src, size);
  else if (link(src, dst) != 0) {
    if (errno == EXDEV || errno == EPERM || errno == EMLINK) s = copy_file(src, dst);
    else if (errno != EEXIST) s = DIT_ERR(IO, "%s: cannot link from %s: %s", dst, src, strerror(errno));
  }
  free(src);
  return s;
}

static dit_status_t copy_file(const char *src, const char *dst) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return DIT_ERR(IO, "%s: cannot open: %s", src, strerror(errno));
  int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (out < 0) {
    dit_status_t s = DIT_ERR(IO, "%s: cannot create: %s", dst, strerror(errno));
    close(in);
    return s;
  }
  dit_status_t s = DIT_OK;
  char *buf = malloc(IO_CHUNK);
  if (!buf) s = oom(dst);
  while (!s) {
    ssize_t r = read(in, buf, IO_CHUNK);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) s = DIT_ERR(IO, "%s: read failed: %s", src, strerror(errno));
    if (r <= 0) break;
    s = write_all(out, dst, buf, (size_t)r);
  }
  if (!s && fsync(out) != 0) s = DIT_ERR(IO, "%s: fsync failed: %s", dst, strerror(errno));
  free(buf);
  close(in);
  close(out);
  return s;
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
  char *blobs = path2(tmp, "blobs");
  if (!blobs) return oom(tmp);
  dit_status_t s = mkdir(blobs, 0755) == 0 ? DIT_OK : DIT_ERR(IO, "%s: cannot create: %s", blobs, strerror(errno));
  for (size_t i = 0; !s && i < m->n_blobs; i++) {
    char *dst = path2(blobs, m->blobs[i].hash);
    s = dst ? dit_store_blob_place(st, m->blobs[i].hash, m->blobs[i].size, dst) : oom(tmp);
    if (s && dit_status_code(s) == DIT_CODE_NOT_FOUND) s = dit_status_annotate(s, "role %s; pull or compile again", m->blobs[i].role);
    free(dst);
  }
  char *mp = path2(tmp, "manifest.json"), *hp = path2(tmp, "manifest.xxh128"), *sp = path2(tmp, "manifest.sig");
  if (!s && (!mp || !hp || !sp)) s = oom(tmp);
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
  char *final = path2(parent, identity);
  if (!final) return oom(parent);
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
    char *vs = path2(final, "manifest.sig");
    have = vs && dit_path_exists(vs);
    free(vs);
  }
  if (!s && !have) s = dit_mkdirs(parent, 0755);
  if (!s && !have) {
    tmp = path2(parent, ".tmp-view-XXXXXX");
    if (!tmp) s = oom(parent);
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

/* ---------------------------------------------------------------------------------- */
/* Listing */

static int cmp_entry_recent(const void *a, const void *b) {
  const dit_store_entry_t *x = a, *y = b;
  if (x->last_used != y->last_used) return x->last_used > y->last_used ? -1 : 1;
  return strcmp(x->identity, y->identity);
}

dit_status_t dit_store_list(dit_store_t *st, dit_store_entry_t **out, size_t *out_n) {
  *out = NULL;
  *out_n = 0;
  DIR *d = opendir(st->ac);
  if (!d) return DIT_ERR(IO, "%s: cannot open directory: %s", st->ac, strerror(errno));
  dit_store_entry_t *v = NULL;
  size_t n = 0, cap = 0;
  dit_status_t s = DIT_OK;
  struct dirent *e;
  while (!s && (e = readdir(d))) {
    if (!dit_is_hash_hex(e->d_name)) continue;
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 16;
      dit_store_entry_t *nv = realloc(v, nc * sizeof *nv);
      if (!nv) {
        s = oom(st->root);
        break;
      }
      v = nv;
      cap = nc;
    }
    dit_store_entry_t *x = &v[n++];
    memset(x, 0, sizeof *x);
    memcpy(x->identity, e->d_name, DIT_HASH_HEX);
    char *p = path2(st->ac, e->d_name);
    struct stat sb;
    if (p && stat(p, &sb) == 0) x->last_used = (int64_t)sb.st_mtime;
    free(p);
    char *sp = NULL;
    if (!ac_path(st, x->identity, ".sig", &sp)) x->is_signed = dit_path_exists(sp);
    free(sp);
    dit_status_t es = read_entry(st, x->identity, 0, &x->manifest, NULL, NULL);
    if (es) {
      x->error = strdup(dit_status_message(es));
      dit_status_free(es);
      continue;
    }
    for (size_t i = 0; i < x->manifest->n_blobs; i++) x->bytes += x->manifest->blobs[i].size;
    x->complete = blobs_complete(st, x->manifest);
  }
  closedir(d);
  if (s) {
    dit_store_entries_free(v, n);
    return s;
  }
  if (n > 1) qsort(v, n, sizeof *v, cmp_entry_recent);
  *out = v;
  *out_n = n;
  return DIT_OK;
}

void dit_store_entries_free(dit_store_entry_t *e, size_t n) {
  for (size_t i = 0; i < n; i++) {
    dit_manifest_free(e[i].manifest);
    free(e[i].error);
  }
  free(e);
}

/* ---------------------------------------------------------------------------------- */
/* Blob inventory for verify and gc */

typedef struct {
  char hash[DIT_HASH_HEX];
  uint64_t size;
  int refs;
} inv_blob_t;

typedef struct {
  inv_blob_t *v;
  size_t n, cap;
} inventory_t;

static int cmp_inv(const void *a, const void *b) { return strcmp(((const inv_blob_t *)a)->hash, ((const inv_blob_t *)b)->hash); }

/* Every file under cas/xx/ named by a hash with the right prefix; other names are strays. */
static dit_status_t scan_cas(dit_store_t *st, inventory_t *inv, FILE *report, size_t *strays) {
  DIR *d = opendir(st->cas);
  if (!d) return DIT_ERR(IO, "%s: cannot open directory: %s", st->cas, strerror(errno));
  dit_status_t s = DIT_OK;
  struct dirent *e;
  while (!s && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char *sub = path2(st->cas, e->d_name);
    DIR *d2 = sub ? opendir(sub) : NULL;
    if (!d2) {
      free(sub);
      continue;
    }
    struct dirent *f;
    while (!s && (f = readdir(d2))) {
      if (f->d_name[0] == '.' && (!f->d_name[1] || (f->d_name[1] == '.' && !f->d_name[2]))) continue;
      char *p = path2(sub, f->d_name);
      struct stat sb;
      if (!p) {
        s = oom(st->root);
      } else if (!dit_is_hash_hex(f->d_name) || strncmp(f->d_name, e->d_name, 2) || strlen(e->d_name) != 2 ||
                 stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        if (report) fprintf(report, "%s: not a blob of this store (removed by gc)\n", p);
        if (strays) (*strays)++;
      } else {
        if (inv->n == inv->cap) {
          size_t nc = inv->cap ? inv->cap * 2 : 256;
          inv_blob_t *nv = realloc(inv->v, nc * sizeof *nv);
          if (!nv) s = oom(st->root);
          else inv->v = nv, inv->cap = nc;
        }
        if (!s) {
          inv_blob_t *b = &inv->v[inv->n++];
          memcpy(b->hash, f->d_name, DIT_HASH_HEX);
          b->size = (uint64_t)sb.st_size;
          b->refs = 0;
        }
      }
      free(p);
    }
    closedir(d2);
    free(sub);
  }
  closedir(d);
  if (!s && inv->n > 1) qsort(inv->v, inv->n, sizeof *inv->v, cmp_inv);
  return s;
}

static inv_blob_t *inv_find(inventory_t *inv, const char *hash) {
  inv_blob_t key;
  memcpy(key.hash, hash, DIT_HASH_HEX);
  return inv->n ? bsearch(&key, inv->v, inv->n, sizeof *inv->v, cmp_inv) : NULL;
}

static dit_status_t remove_blob(dit_store_t *st, const char *hash) {
  char *p = NULL;
  DIT_RETURN_IF(dit_store_blob_path(st, hash, &p));
  dit_status_t s = unlink(p) == 0 || errno == ENOENT ? DIT_OK : DIT_ERR(IO, "%s: cannot remove: %s", p, strerror(errno));
  free(p);
  return s;
}

/* Removes ac/<identity>, its signature and its view. */
static dit_status_t remove_entry_files(dit_store_t *st, const char *identity) {
  char *p = NULL, *sp = NULL, *vp = path2(st->bundles, identity);
  dit_status_t s = vp ? DIT_OK : oom(st->root);
  if (!s) s = ac_path(st, identity, "", &p);
  if (!s) s = ac_path(st, identity, ".sig", &sp);
  if (!s && unlink(p) != 0 && errno != ENOENT) s = DIT_ERR(IO, "%s: cannot remove: %s", p, strerror(errno));
  if (!s && unlink(sp) != 0 && errno != ENOENT) s = DIT_ERR(IO, "%s: cannot remove: %s", sp, strerror(errno));
  if (!s) {
    /* The digest last: an entry without one reads as damaged, never as valid. */
    size_t n = strlen(p) + 8;
    char *dp = malloc(n);
    if (!dp) s = oom(st->root);
    else snprintf(dp, n, "%s.xxh128", p);
    if (dp && unlink(dp) != 0 && errno != ENOENT) s = DIT_ERR(IO, "%s: cannot remove: %s", dp, strerror(errno));
    free(dp);
  }
  if (!s) s = dit_remove_tree(vp);
  free(p);
  free(sp);
  free(vp);
  return s;
}

/* Removes every blob with no reference and the stray files; counts what stays. */
static dit_status_t sweep(dit_store_t *st, inventory_t *inv, dit_store_stats_t *out) {
  for (size_t i = 0; i < inv->n; i++) {
    if (inv->v[i].refs > 0) {
      out->blobs++;
      out->bytes += inv->v[i].size;
      continue;
    }
    DIT_RETURN_IF(remove_blob(st, inv->v[i].hash));
    out->blobs_removed++;
    out->bytes_removed += inv->v[i].size;
  }
  return DIT_OK;
}

static dit_status_t remove_strays_and_temps(dit_store_t *st, int64_t now) {
  /* Under the exclusive lock no writer of this store is running, so tmp/ holds only
   * leftovers of crashed ones. */
  DIR *d = opendir(st->tmp);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *p = path2(st->tmp, e->d_name);
    if (p) dit_status_free(dit_remove_tree(p));
    free(p);
  }
  if (d) closedir(d);
  /* bundles/ holds compiles in progress (their temporaries, and bundles not yet imported):
   * only old ones, or views of entries that are gone, are removed. */
  d = opendir(st->bundles);
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *p = path2(st->bundles, e->d_name);
    struct stat sb;
    if (p && lstat(p, &sb) == 0) {
      int64_t age = now - (int64_t)sb.st_mtime;
      int remove = 0;
      if (!strncmp(e->d_name, ".tmp", 4)) remove = age > STALE_TMP_SECONDS;
      else if (dit_is_hash_hex(e->d_name)) {
        char *ap = NULL;
        if (!ac_path(st, e->d_name, "", &ap)) remove = !dit_path_exists(ap) && age > GRACE_SECONDS;
        free(ap);
      }
      if (remove) dit_status_free(dit_remove_tree(p));
    }
    free(p);
  }
  if (d) closedir(d);
  /* A signature or digest whose manifest never arrived (a publisher that died between). */
  d = opendir(st->ac);
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.' || dit_is_hash_hex(e->d_name)) continue;
    char id[DIT_HASH_HEX];
    snprintf(id, sizeof id, "%.32s", e->d_name);
    char *mp = path2(st->ac, id), *p = path2(st->ac, e->d_name);
    if (mp && p && (!dit_is_hash_hex(id) || !dit_path_exists(mp))) unlink(p);
    free(mp);
    free(p);
  }
  if (d) closedir(d);
  /* Stray files in cas/ (names that are not blobs of their directory). */
  d = opendir(st->cas);
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char *sub = path2(st->cas, e->d_name);
    DIR *d2 = sub ? opendir(sub) : NULL;
    struct dirent *f;
    while (d2 && (f = readdir(d2))) {
      if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, "..")) continue;
      if (dit_is_hash_hex(f->d_name) && !strncmp(f->d_name, e->d_name, 2) && strlen(e->d_name) == 2) continue;
      char *p = path2(sub, f->d_name);
      if (p) dit_status_free(dit_remove_tree(p));
      free(p);
    }
    if (d2) closedir(d2);
    free(sub);
  }
  if (d) closedir(d);
  return DIT_OK;
}

/* Counts references of the given entries (those not being removed). */
static void add_refs(inventory_t *inv, const dit_store_entry_t *x, int delta) {
  if (!x->manifest) return;
  for (size_t i = 0; i < x->manifest->n_blobs; i++) {
    inv_blob_t *b = inv_find(inv, x->manifest->blobs[i].hash);
    if (b) b->refs += delta;
  }
}

dit_status_t dit_store_verify(dit_store_t *st, FILE *report, dit_store_stats_t *out) {
  memset(out, 0, sizeof *out);
  inventory_t inv = {0};
  char **bad = NULL;
  size_t nbad = 0;
  /* Hashing runs under the shared lock so publishers are not held up; removing the bad
   * blobs takes the exclusive one. */
  dit_status_t s = dit_store_lock(st, 0);
  if (!s) {
    s = scan_cas(st, &inv, report, NULL);
    bad = calloc(inv.n + 1, sizeof *bad);
    if (!s && !bad) s = oom(st->root);
    for (size_t i = 0; !s && i < inv.n; i++) {
      char *p = NULL;
      s = dit_store_blob_path(st, inv.v[i].hash, &p);
      dit_mapping_t map;
      dit_status_t ms = s ? DIT_OK : dit_file_map(p, &map);
      if (ms) {
        if (report) fprintf(report, "%s: cannot read: %s\n", p, dit_status_message(ms));
        dit_status_free(ms);
        bad[nbad++] = strdup(inv.v[i].hash);
      } else if (!s) {
        char found[DIT_HASH_HEX];
        dit_hasher_t *h = NULL;
        s = dit_hasher_create(&h);
        for (size_t off = 0; !s && off < map.size; off += IO_CHUNK)
          dit_hasher_update(h, map.data + off, map.size - off < IO_CHUNK ? map.size - off : IO_CHUNK);
        if (!s) dit_hasher_hex(h, found);
        dit_hasher_destroy(h);
        dit_file_unmap(&map);
        if (!s && strcmp(found, inv.v[i].hash)) {
          if (report) fprintf(report, "%s: content hash mismatch: expected %s, found %s (removed)\n", p, inv.v[i].hash, found);
          bad[nbad++] = strdup(inv.v[i].hash);
        }
      }
      free(p);
    }
    dit_store_unlock(st);
  }
  if (!s && nbad) {
    s = dit_store_lock(st, 1);
    for (size_t i = 0; !s && i < nbad; i++)
      if (bad[i]) s = remove_blob(st, bad[i]);
    /* This store's bundle directories share the damaged inodes: drop the views listing a
     * removed blob, so a compile rebuilds them instead of finding them. */
    dit_store_entry_t *ents = NULL;
    size_t ne = 0;
    if (!s) s = dit_store_list(st, &ents, &ne);
    for (size_t i = 0; !s && i < ne; i++) {
      int hit = 0;
      for (size_t k = 0; ents[i].manifest && k < ents[i].manifest->n_blobs && !hit; k++)
        for (size_t j = 0; j < nbad && !hit; j++) hit = bad[j] && !strcmp(bad[j], ents[i].manifest->blobs[k].hash);
      char *vp = hit ? path2(st->bundles, ents[i].identity) : NULL;
      if (vp) s = dit_remove_tree(vp);
      free(vp);
    }
    dit_store_entries_free(ents, ne);
    dit_store_unlock(st);
  }
  out->bad_blobs = nbad;
  dit_store_entry_t *ents = NULL;
  size_t ne = 0;
  if (!s) s = dit_store_list(st, &ents, &ne);
  for (size_t i = 0; !s && i < ne; i++) {
    const dit_store_entry_t *x = &ents[i];
    int ok = 1;
    if (!x->manifest) {
      if (report) fprintf(report, "%s/ac/%s: %s\n", st->root, x->identity, x->error ? x->error : "invalid");
      ok = 0;
    } else {
      for (size_t k = 0; k < x->manifest->n_blobs; k++) {
        const dit_manifest_blob_t *b = &x->manifest->blobs[k];
        if (!dit_store_has_blob(st, b->hash, b->size)) {
          if (report)
            fprintf(report, "%s/ac/%s: blob %s (role %s, %" PRIu64 " bytes) missing or damaged: pull or compile it again\n", st->root,
                    x->identity, b->hash, b->role, b->size);
          ok = 0;
        }
      }
    }
    if (!ok) out->bad_entries++;
    out->entries++;
  }
  for (size_t i = 0; i < inv.n; i++) {
    int was_bad = 0;
    for (size_t k = 0; k < nbad && !was_bad; k++) was_bad = bad[k] && !strcmp(bad[k], inv.v[i].hash);
    if (!was_bad) {
      out->blobs++;
      out->bytes += inv.v[i].size;
    }
  }
  dit_store_entries_free(ents, ne);
  for (size_t i = 0; i < nbad; i++) free(bad[i]);
  free(bad);
  free(inv.v);
  return s;
}

dit_status_t dit_store_remove(dit_store_t *st, const char *identity, dit_store_stats_t *out) {
  memset(out, 0, sizeof *out);
  char *p = NULL;
  DIT_RETURN_IF(ac_path(st, identity, "", &p));
  dit_status_t s = dit_store_lock(st, 1);
  if (!s && !dit_path_exists(p)) s = DIT_ERR(NOT_FOUND, "store %s: no entry for identity %s", st->root, identity);
  free(p);
  if (s) {
    dit_store_unlock(st);
    return s;
  }
  s = remove_entry_files(st, identity);
  if (!s) out->entries_removed = 1;
  inventory_t inv = {0};
  dit_store_entry_t *ents = NULL;
  size_t ne = 0;
  if (!s) s = scan_cas(st, &inv, NULL, NULL);
  if (!s) s = dit_store_list(st, &ents, &ne);
  for (size_t i = 0; !s && i < ne; i++) add_refs(&inv, &ents[i], 1);
  if (!s) s = sweep(st, &inv, out);
  if (!s) out->entries = ne;
  dit_store_unlock(st);
  dit_store_entries_free(ents, ne);
  free(inv.v);
  return s;
}

dit_status_t dit_store_gc(dit_store_t *st, uint64_t max_bytes, int64_t max_age_s, dit_store_stats_t *out) {
  memset(out, 0, sizeof *out);
  DIT_RETURN_IF(dit_store_lock(st, 1));
  int64_t now = (int64_t)time(NULL);
  inventory_t inv = {0};
  dit_store_entry_t *ents = NULL;
  size_t ne = 0;
  char *drop = NULL;
  dit_status_t s = scan_cas(st, &inv, NULL, NULL);
  if (!s) s = dit_store_list(st, &ents, &ne);
  if (!s && !(drop = calloc(ne + 1, 1))) s = oom(st->root);
  if (!s) {
    for (size_t i = 0; i < ne; i++) {
      /* An entry that no longer validates can never be used: it goes, whatever its age. */
      if (!ents[i].manifest || (max_age_s >= 0 && now - ents[i].last_used > max_age_s)) drop[i] = 1;
      else add_refs(&inv, &ents[i], 1);
    }
    if (max_bytes) {
      uint64_t kept = 0;
      for (size_t k = 0; k < inv.n; k++)
        if (inv.v[k].refs > 0) kept += inv.v[k].size;
      /* ents is most recent first: evict from the end. */
      for (size_t i = ne; kept > max_bytes && i-- > 0;) {
        if (drop[i]) continue;
        drop[i] = 1;
        for (size_t k = 0; k < ents[i].manifest->n_blobs; k++) {
          inv_blob_t *b = inv_find(&inv, ents[i].manifest->blobs[k].hash);
          if (b && --b->refs == 0) kept -= b->size;
        }
      }
    }
    for (size_t i = 0; !s && i < ne; i++) {
      if (!drop[i]) {
        out->entries++;
        continue;
      }
      s = remove_entry_files(st, ents[i].identity);
      out->entries_removed++;
    }
  }
  if (!s) s = sweep(st, &inv, out);
  if (!s) s = remove_strays_and_temps(st, now);
  dit_store_unlock(st);
  free(drop);
  dit_store_entries_free(ents, ne);
  free(inv.v);
  return s;
}

/* ---------------------------------------------------------------------------------- */
/* Memo */

static dit_status_t memo_path(const dit_store_t *st, const char *key, char **out) {
  *out = NULL;
  if (!dit_is_hash_hex(key)) return DIT_ERR(INVALID_ARGUMENT, "store memo: '%s' is not a key (32 lowercase hex digits)", key);
  size_t n = strlen(st->memo) + 48;
  *out = malloc(n);
  if (!*out) return oom(st->root);
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
