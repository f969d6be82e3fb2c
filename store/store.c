/* The store object (layout and guarantees in store.h): open, close, the writer lock, and the
 * helpers the other store files share (paths, SHA-256, whole-buffer writes and copies). Every
 * file enters cas/ or ac/ complete, by one rename or link from tmp/ on the same file system,
 * and blobs always before the manifest that lists them. */
#include "store/store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/file.h>

#include "artifacts/identity.h"
#include "base/fileio.h"

char *dit_store_join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", a, b);
  return p;
}

dit_status_t dit_store_oom(const char *what) { return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what); }

dit_status_t dit_store_write_fd(int fd, const char *path, const void *data, size_t n) {
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

dit_status_t dit_store_sha_init(dit_store_sha_t *s) {
  s->ctx = EVP_MD_CTX_new();
  if (!s->ctx || EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(s->ctx);
    s->ctx = NULL;
    return DIT_ERR(UNAVAILABLE, "OpenSSL EVP_DigestInit_ex(sha256) failed");
  }
  return DIT_OK;
}

void dit_store_sha_update(dit_store_sha_t *s, const void *p, size_t n) {
  if (n) EVP_DigestUpdate(s->ctx, p, n);
}

void dit_store_sha_hex(dit_store_sha_t *s, char out[DIT_SHA256_HEX]) {
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

void dit_store_sha_free(dit_store_sha_t *s) {
  EVP_MD_CTX_free(s->ctx);
  s->ctx = NULL;
}

dit_status_t dit_file_hashes(const char *path, char out_hash[DIT_HASH_HEX],
                             char out_sha256[DIT_SHA256_HEX], uint64_t *out_size) {
  dit_mapping_t map;
  DIT_RETURN_IF(dit_file_map(path, &map));
  dit_hasher_t *h = NULL;
  dit_store_sha_t sha = {0};
  dit_status_t s = dit_hasher_create(&h);
  if (!s) s = dit_store_sha_init(&sha);
  if (!s) {
    /* One pass over the mapping feeds both digests while each chunk is in cache. */
    for (size_t off = 0; off < map.size; off += STORE_IO_CHUNK) {
      size_t n = map.size - off < STORE_IO_CHUNK ? map.size - off : STORE_IO_CHUNK;
      dit_hasher_update(h, map.data + off, n);
      dit_store_sha_update(&sha, map.data + off, n);
    }
    dit_hasher_hex(h, out_hash);
    dit_store_sha_hex(&sha, out_sha256);
    if (out_size) *out_size = map.size;
  }
  dit_store_sha_free(&sha);
  dit_hasher_destroy(h);
  dit_file_unmap(&map);
  return s;
}

dit_status_t dit_store_open(const char *root, dit_store_t **out) {
  *out = NULL;
  if (!root || !root[0]) return DIT_ERR(INVALID_ARGUMENT, "store: no directory given");
  dit_store_t *st = calloc(1, sizeof *st);
  if (!st) return dit_store_oom(root);
  st->lock_fd = -1;
  st->root = strdup(root);
  if (st->root) {
    st->cas = dit_store_join(root, "cas");
    st->ac = dit_store_join(root, "ac");
    st->bundles = dit_store_join(root, "bundles");
    st->memo = dit_store_join(root, "memo");
    st->tmp = dit_store_join(root, "tmp");
    st->lock_path = dit_store_join(root, "lock");
  }
  if (!st->root || !st->cas || !st->ac || !st->bundles || !st->memo || !st->tmp || !st->lock_path) {
    dit_store_close(st);
    return dit_store_oom(root);
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

dit_status_t dit_store_copy_file(const char *src, const char *dst) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return DIT_ERR(IO, "%s: cannot open: %s", src, strerror(errno));
  int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (out < 0) {
    dit_status_t s = DIT_ERR(IO, "%s: cannot create: %s", dst, strerror(errno));
    close(in);
    return s;
  }
  dit_status_t s = DIT_OK;
  char *buf = malloc(STORE_IO_CHUNK);
  if (!buf) s = dit_store_oom(dst);
  while (!s) {
    ssize_t r = read(in, buf, STORE_IO_CHUNK);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) s = DIT_ERR(IO, "%s: read failed: %s", src, strerror(errno));
    if (r <= 0) break;
    s = dit_store_write_fd(out, dst, buf, (size_t)r);
  }
  if (!s && fsync(out) != 0) s = DIT_ERR(IO, "%s: fsync failed: %s", dst, strerror(errno));
  free(buf);
  close(in);
  close(out);
  return s;
}
