/* .ditb archives (format in archive.h): the writer streams a store entry through zstd into
 * a temporary file; the reader walks the image as hostile input, one bounds-checked record
 * at a time, handing each blob's bytes to a sink that verifies them. */
#include "store/archive.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "artifacts/identity.h"
#include "base/fileio.h"
#include "store/sign.h"

static const uint8_t kMagic[8] = {'D', 'I', 'T', 'B', '\r', '\n', 0x1a, '\n'};
#define HEADER_BYTES 16
#define RECORD_BYTES 24
#define NAME_MAX_BYTES 64
#define MANIFEST_MAX ((uint64_t)64 << 20)
#define SIG_MAX ((uint64_t)64 << 10)

enum { REC_MANIFEST = 1, REC_SIGNATURE = 2, REC_BLOB = 3, REC_END = 4 };

static void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

int dit_ditb_is_archive(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  uint8_t m[8];
  ssize_t n = read(fd, m, sizeof m);
  close(fd);
  return n == (ssize_t)sizeof m && !memcmp(m, kMagic, sizeof m);
}

/* ---------------------------------------------------------------------------------- */
/* Writer */

typedef struct {
  int fd;
  const char *path;
  uint64_t off;
} out_t;

static dit_status_t out_write(out_t *o, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(o->fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return DIT_ERR(IO, "%s: write failed: %s", o->path, strerror(errno));
    c += w;
    n -= (size_t)w;
    o->off += (uint64_t)w;
  }
  return DIT_OK;
}

static dit_status_t record_header(out_t *o, uint32_t kind, const char *name, uint64_t raw, uint64_t stored) {
  uint8_t h[RECORD_BYTES];
  size_t nl = name ? strlen(name) : 0;
  put_u32(h, kind);
  put_u32(h + 4, (uint32_t)nl);
  put_u64(h + 8, raw);
  put_u64(h + 16, stored);
  DIT_RETURN_IF(out_write(o, h, sizeof h));
  return nl ? out_write(o, name, nl) : DIT_OK;
}

static dit_status_t write_blob(out_t *o, dit_store_t *st, const dit_manifest_blob_t *b, ZSTD_CCtx *z, void *buf, size_t cap) {
  char *path = NULL;
  DIT_RETURN_IF(dit_store_blob_path(st, b->hash, &path));
  dit_mapping_t map;
  dit_status_t s = dit_file_map(path, &map);
  if (!s && map.size != b->size)
    s = DIT_ERR(DATA_LOSS, "%s: size mismatch: expected %" PRIu64 " bytes, found %zu", path, b->size, map.size);
  uint64_t hdr_at = o->off;
  /* stored_size is known only after compressing: written as 0 now, patched afterwards. */
  if (!s) s = record_header(o, REC_BLOB, b->hash, b->size, 0);
  uint64_t start = o->off;
  dit_hasher_t *h = NULL;
  if (!s) s = dit_hasher_create(&h);
  if (!s) {
    ZSTD_CCtx_reset(z, ZSTD_reset_session_only);
    ZSTD_CCtx_setPledgedSrcSize(z, map.size);
    size_t pos = 0;
    for (;;) {
      size_t take = map.size - pos < ((size_t)1 << 20) ? map.size - pos : (size_t)1 << 20;
      int last = pos + take == map.size;
      ZSTD_inBuffer in = {map.data ? map.data + pos : (const void *)"", take, 0};
      size_t ret;
      do {
        ZSTD_outBuffer out = {buf, cap, 0};
        ret = ZSTD_compressStream2(z, &out, &in, last ? ZSTD_e_end : ZSTD_e_continue);
        if (ZSTD_isError(ret)) {
          s = DIT_ERR(INTERNAL, "%s: ZSTD_compressStream2: %s", path, ZSTD_getErrorName(ret));
          break;
        }
        if (out.pos) s = out_write(o, buf, out.pos);
      } while (!s && (last ? ret != 0 : in.pos < in.size));
      if (s) break;
      if (take) dit_hasher_update(h, map.data + pos, take);
      pos += take;
      if (last) break;
    }
  }
  char found[DIT_HASH_HEX];
  if (!s) dit_hasher_hex(h, found);
  /* A blob damaged in the store must not travel on in an archive. */
  if (!s && strcmp(found, b->hash))
    s = DIT_ERR(DATA_LOSS, "%s: content hash mismatch: expected %s, found %s (run ditc cache verify)", path, b->hash, found);
  if (!s) {
    uint8_t v[8];
    put_u64(v, o->off - start);
    if (pwrite(o->fd, v, 8, (off_t)hdr_at + 16) != 8) s = DIT_ERR(IO, "%s: write failed: %s", o->path, strerror(errno));
  }
  dit_hasher_destroy(h);
  dit_file_unmap(&map);
  free(path);
  return s;
}

dit_status_t dit_ditb_write(dit_store_t *st, const char *identity, const char *out_path, dit_ditb_stats_t *stats) {
  memset(stats, 0, sizeof *stats);
  dit_manifest_t *m = NULL;
  char *text = NULL, *sig = NULL;
  size_t len = 0;
  DIT_RETURN_IF(dit_store_get_manifest(st, identity, &m, &text, &len));
  dit_status_t s = dit_store_get_signature(st, identity, &sig, NULL);
  if (s && dit_status_code(s) == DIT_CODE_NOT_FOUND) {
    dit_status_free(s);
    s = DIT_OK;
  }
  size_t n = strlen(out_path) + 16;
  char *tmp = malloc(n);
  out_t o = {-1, out_path, 0};
  if (!tmp) {
    if (!s) s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", out_path);
  } else if (!s) {
    snprintf(tmp, n, "%s.tmpXXXXXX", out_path);
    o.fd = mkstemp(tmp);
    if (o.fd < 0) s = DIT_ERR(IO, "%s: cannot create a temporary file: %s", out_path, strerror(errno));
  }
  ZSTD_CCtx *z = ZSTD_createCCtx();
  size_t cap = ZSTD_CStreamOutSize();
  void *buf = malloc(cap);
  if (!s && (!z || !buf)) s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", out_path);
  if (!s) {
    ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 1);
    uint8_t h[HEADER_BYTES];
    memcpy(h, kMagic, 8);
    put_u16(h + 8, DIT_DITB_MAJOR);
    put_u16(h + 10, DIT_DITB_MINOR);
    put_u32(h + 12, 0);
    s = out_write(&o, h, sizeof h);
  }
  char digest[DIT_HASH_HEX];
  dit_hash128_hex(text, len, digest);
  if (!s) s = record_header(&o, REC_MANIFEST, digest, len, len);
  if (!s) s = out_write(&o, text, len);
  if (sig) dit_hash128_hex(sig, strlen(sig), digest);
  if (!s && sig) s = record_header(&o, REC_SIGNATURE, digest, strlen(sig), strlen(sig));
  if (!s && sig) s = out_write(&o, sig, strlen(sig));
  for (size_t i = 0; !s && i < m->n_blobs; i++) {
    s = write_blob(&o, st, &m->blobs[i], z, buf, cap);
    stats->raw_bytes += m->blobs[i].size;
  }
  if (!s) s = record_header(&o, REC_END, NULL, m->n_blobs, 0);
  if (!s && fsync(o.fd) != 0) s = DIT_ERR(IO, "%s: fsync failed: %s", tmp, strerror(errno));
  if (!s && fchmod(o.fd, 0644) != 0) s = DIT_ERR(IO, "%s: chmod failed: %s", tmp, strerror(errno));
  if (o.fd >= 0) close(o.fd);
  if (!s && rename(tmp, out_path) != 0) s = DIT_ERR(IO, "%s: rename from %s failed: %s", out_path, tmp, strerror(errno));
  if (s && o.fd >= 0) unlink(tmp);
  if (!s) {
    stats->blobs = m->n_blobs;
    stats->file_bytes = o.off;
  }
  ZSTD_freeCCtx(z);
  free(buf);
  free(tmp);
  free(text);
  free(sig);
  dit_manifest_free(m);
  return s ? dit_status_annotate(s, "pack %s", identity) : DIT_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Reader */

/* Where verified blob bytes go: the store (import) or only hashers (check); either way every
 * decoded byte is counted against the quota before it goes anywhere. */
typedef struct {
  dit_store_t *st;
  dit_store_quota_t *q;
  dit_store_blob_writer_t *w;
  dit_hasher_t *h;
  uint64_t got;
} blob_out_t;

static dit_status_t bo_begin(blob_out_t *bo, const dit_manifest_blob_t *b, const char *what) {
  bo->got = 0;
  if (bo->st) {
    DIT_RETURN_IF(dit_store_blob_writer_create(bo->st, b->hash, b->size, b->sha256[0] ? b->sha256 : NULL, what, &bo->w));
    dit_store_blob_writer_set_quota(bo->w, bo->q);
    return DIT_OK;
  }
  return dit_hasher_create(&bo->h);
}

static dit_status_t bo_append(blob_out_t *bo, const void *p, size_t n, const dit_manifest_blob_t *b, const char *what) {
  if (bo->w) return dit_store_blob_writer_append(bo->w, p, n);
  if (n > b->size - bo->got)
    return DIT_ERR(DATA_LOSS, "%s: blob %s decodes to more than its %" PRIu64 " bytes", what, b->hash, b->size);
  DIT_RETURN_IF_ERROR(dit_store_quota_charge(bo->q, n), "%s", what);
  dit_hasher_update(bo->h, p, n);
  bo->got += n;
  return DIT_OK;
}

static dit_status_t bo_end(blob_out_t *bo, const dit_manifest_blob_t *b, const char *what) {
  if (bo->w) return dit_store_blob_writer_commit(bo->w);
  char found[DIT_HASH_HEX];
  dit_hasher_hex(bo->h, found);
  if (bo->got != b->size)
    return DIT_ERR(DATA_LOSS, "%s: truncated: blob %s should have %" PRIu64 " bytes, found %" PRIu64, what, b->hash, b->size, bo->got);
  if (strcmp(found, b->hash)) return DIT_ERR(DATA_LOSS, "%s: content hash mismatch: expected %s, found %s", what, b->hash, found);
  return DIT_OK;
}

static void bo_free(blob_out_t *bo) {
  dit_store_blob_writer_destroy(bo->w);
  bo->w = NULL;
  dit_hasher_destroy(bo->h);
  bo->h = NULL;
}

static dit_status_t decode_blob(const uint8_t *p, uint64_t n, const dit_manifest_blob_t *b, blob_out_t *bo, const char *what) {
  ZSTD_DStream *z = ZSTD_createDStream();
  size_t cap = ZSTD_DStreamOutSize();
  void *buf = malloc(cap);
  dit_status_t s = z && buf ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  if (!s) s = bo_begin(bo, b, what);
  ZSTD_inBuffer in = {p, (size_t)n, 0};
  size_t ret = 1;
  while (!s) {
    ZSTD_outBuffer out = {buf, cap, 0};
    ret = ZSTD_decompressStream(z, &out, &in);
    if (ZSTD_isError(ret)) {
      s = DIT_ERR(DATA_LOSS, "%s: blob %s: not a valid zstd stream (ZSTD_decompressStream: %s)", what, b->hash, ZSTD_getErrorName(ret));
      break;
    }
    if (out.pos) s = bo_append(bo, buf, out.pos, b, what);
    if (in.pos == in.size && out.pos < out.size) break;
  }
  if (!s && ret != 0)
    s = DIT_ERR(DATA_LOSS, "%s: blob %s: truncated: its zstd stream ends inside a frame", what, b->hash);
  if (!s) s = bo_end(bo, b, what);
  bo_free(bo);
  ZSTD_freeDStream(z);
  free(buf);
  return s;
}

/* Walks the records; with st the blobs enter the store and the manifest last. */
static dit_status_t read_archive(dit_store_t *st, const uint8_t *data, size_t size, const char *what, const char *trusted_key,
                                 dit_store_quota_t *q, char out_identity[33]) {
  if (size < HEADER_BYTES)
    return DIT_ERR(DATA_LOSS, "%s: truncated: %zu bytes, a .ditb archive has a %d-byte header", what, size, HEADER_BYTES);
  if (memcmp(data, kMagic, 8)) return DIT_ERR(INVALID_ARGUMENT, "%s: not a .ditb archive (bad magic)", what);
  uint16_t major = get_u16(data + 8), minor = get_u16(data + 10);
  uint32_t flags = get_u32(data + 12);
  if (major != DIT_DITB_MAJOR || minor > DIT_DITB_MINOR)
    return DIT_ERR(FAILED_PRECONDITION, "%s: archive format %u.%u, this build reads %d.0 to %d.%d", what, major, minor,
                   DIT_DITB_MAJOR, DIT_DITB_MAJOR, DIT_DITB_MINOR);
  if (flags) return DIT_ERR(FAILED_PRECONDITION, "%s: header flags 0x%x: expected 0", what, flags);
  size_t off = HEADER_BYTES;
  dit_manifest_t *m = NULL;
  const char *text = NULL, *sig = NULL;
  size_t text_len = 0, sig_len = 0;
  size_t next_blob = 0;
  int ended = 0;
  dit_status_t s = DIT_OK;
  if (st) s = dit_store_lock(st, 0);
  int locked = st && !s;
  while (!s && !ended) {
    if (size - off < RECORD_BYTES) {
      s = DIT_ERR(DATA_LOSS, "%s: truncated: a record header at offset %zu needs %d bytes, %zu are left", what, off, RECORD_BYTES,
                  size - off);
      break;
    }
    const uint8_t *h = data + off;
    uint32_t kind = get_u32(h), name_len = get_u32(h + 4);
    uint64_t raw = get_u64(h + 8), stored = get_u64(h + 16);
    size_t at = off;
    off += RECORD_BYTES;
    if (name_len > NAME_MAX_BYTES) {
      s = DIT_ERR(OUT_OF_RANGE, "%s: record at offset %zu: name length %u, at most %d allowed", what, at, name_len, NAME_MAX_BYTES);
      break;
    }
    if (name_len > size - off || stored > size - off - name_len) {
      s = DIT_ERR(DATA_LOSS, "%s: truncated: record at offset %zu announces %u + %" PRIu64 " bytes, %zu are left", what, at, name_len,
                  stored, size - off);
      break;
    }
    char name[NAME_MAX_BYTES + 1];
    memcpy(name, data + off, name_len);
    name[name_len] = 0;
    off += name_len;
    const uint8_t *body = data + off;
    off += (size_t)stored;
    if (kind == REC_MANIFEST || kind == REC_SIGNATURE) {
      char found[DIT_HASH_HEX];
      dit_hash128_hex(body, (size_t)stored, found);
      if (strcmp(found, name)) {
        s = DIT_ERR(DATA_LOSS, "%s: record at offset %zu: content hash mismatch: named %s, found %s", what, at, name, found);
        break;
      }
    }
    if (kind == REC_MANIFEST) {
      if (m) s = DIT_ERR(INVALID_ARGUMENT, "%s: record at offset %zu: a second manifest", what, at);
      else if (at != HEADER_BYTES) s = DIT_ERR(INVALID_ARGUMENT, "%s: the manifest must be the first record", what);
      else if (raw != stored || raw > MANIFEST_MAX)
        s = DIT_ERR(OUT_OF_RANGE, "%s: manifest record: %" PRIu64 " raw vs %" PRIu64 " stored bytes (expected equal, at most %" PRIu64 ")",
                    what, raw, stored, MANIFEST_MAX);
      if (!s) {
        char mwhat[512];
        snprintf(mwhat, sizeof mwhat, "%s (manifest)", what);
        text = (const char *)body;
        text_len = (size_t)stored;
        s = dit_manifest_parse(text, text_len, mwhat, &m);
        char recomputed[DIT_HASH_HEX];
        if (!s) s = dit_identity_compute(m->inputs, recomputed);
        if (!s && strcmp(recomputed, m->identity))
          s = DIT_ERR(DATA_LOSS, "%s: identity mismatch: recorded %s, recomputed from inputs %s", mwhat, m->identity, recomputed);
        /* The blob count and the sizes the manifest claims, before any blob is decoded. */
        if (!s) s = dit_status_annotate(dit_store_quota_check_manifest(q, st, m), "%s", what);
      }
    } else if (kind == REC_SIGNATURE) {
      if (!m || sig || next_blob) s = DIT_ERR(INVALID_ARGUMENT, "%s: record at offset %zu: a signature belongs right after the manifest", what, at);
      else if (raw != stored || raw > SIG_MAX)
        s = DIT_ERR(OUT_OF_RANGE, "%s: signature record: %" PRIu64 " raw vs %" PRIu64 " stored bytes (expected equal, at most %" PRIu64 ")",
                    what, raw, stored, SIG_MAX);
      else sig = (const char *)body, sig_len = (size_t)stored;
    } else if (kind == REC_BLOB) {
      if (!m) {
        s = DIT_ERR(INVALID_ARGUMENT, "%s: record at offset %zu: a blob before the manifest", what, at);
        break;
      }
      /* Trust, when asked for, is settled before the first blob is read. */
      if (next_blob == 0 && trusted_key) s = dit_sign_verify(trusted_key, text, text_len, sig, sig_len, what);
      if (s) break;
      if (next_blob >= m->n_blobs) {
        s = DIT_ERR(INVALID_ARGUMENT, "%s: record at offset %zu: blob %s is not listed in the manifest (it lists %zu)", what, at, name,
                    m->n_blobs);
        break;
      }
      const dit_manifest_blob_t *b = &m->blobs[next_blob];
      if (strcmp(name, b->hash) || raw != b->size) {
        s = DIT_ERR(INVALID_ARGUMENT, "%s: record at offset %zu: expected blob %s (%" PRIu64 " bytes, manifest order), found '%s' (%" PRIu64 " bytes)",
                    what, at, b->hash, b->size, name, raw);
        break;
      }
      /* A blob the store already holds needs no decoding, but the archive still vouches
       * for nothing: the store's copy was verified when it entered. */
      if (!st || !dit_store_has_blob(st, b->hash, b->size)) {
        blob_out_t bo = {st, q, NULL, NULL, 0};
        char bwhat[512];
        snprintf(bwhat, sizeof bwhat, "%s (blob record at offset %zu)", what, at);
        s = decode_blob(body, stored, b, &bo, bwhat);
      }
      next_blob++;
    } else if (kind == REC_END) {
      if (!m) s = DIT_ERR(INVALID_ARGUMENT, "%s: the end record comes before any manifest", what);
      else if (name_len || stored || raw != m->n_blobs || next_blob != m->n_blobs)
        s = DIT_ERR(DATA_LOSS, "%s: end record at offset %zu: %zu of the manifest's %zu blobs present (end says %" PRIu64 ")", what, at,
                    next_blob, m->n_blobs, raw);
      else if (off != size)
        s = DIT_ERR(INVALID_ARGUMENT, "%s: %zu bytes after the end record", what, size - off);
      ended = 1;
    } else {
      s = DIT_ERR(INVALID_ARGUMENT, "%s: record at offset %zu: unknown kind %u", what, at, kind);
    }
  }
  if (!s && m && m->n_blobs == 0 && trusted_key) s = dit_sign_verify(trusted_key, text, text_len, sig, sig_len, what);
  if (!s && st) {
    char *sigz = NULL;
    if (sig) {
      sigz = malloc(sig_len + 1);
      if (!sigz) s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
      else memcpy(sigz, sig, sig_len), sigz[sig_len] = 0;
    }
    if (!s) s = dit_store_put_manifest(st, m->identity, text, text_len, sigz, NULL);
    free(sigz);
  }
  if (!s && out_identity) memcpy(out_identity, m->identity, DIT_HASH_HEX);
  if (locked) dit_store_unlock(st);
  dit_manifest_free(m);
  return s;
}

dit_status_t dit_ditb_import(dit_store_t *st, const uint8_t *data, size_t size, const char *what, const char *trusted_key,
                             const dit_store_limits_t *limits, char out_identity[33]) {
  dit_store_quota_t *q = NULL;
  DIT_RETURN_IF(dit_store_quota_create(limits, what, &q));
  dit_status_t s = read_archive(st, data, size, what, trusted_key, q, out_identity);
  /* A refused archive leaves nothing: importing it again would fail the same way, so its
   * blobs are no start to build on. */
  if (s) {
    dit_status_t rs = dit_store_quota_rollback(q, st);
    if (rs) s = dit_status_annotate(s, "removing the blobs it entered failed too (%s)", dit_status_message(rs));
    dit_status_free(rs);
  }
  dit_store_quota_destroy(q);
  return s;
}

dit_status_t dit_ditb_check(const uint8_t *data, size_t size, const char *what, uint64_t max_raw_bytes) {
  dit_store_limits_t limits = {max_raw_bytes ? max_raw_bytes : UINT64_MAX, 0};
  dit_store_quota_t *q = NULL;
  DIT_RETURN_IF(dit_store_quota_create(&limits, what, &q));
  dit_status_t s = read_archive(NULL, data, size, what, NULL, q, NULL);
  dit_store_quota_destroy(q);
  return s;
}
