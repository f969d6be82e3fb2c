/* The checks on what a remote sends back (remote_response.h): every length bounded before it
 * is used, every decoded byte counted before it is written. */
#include "store/remote_response.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "artifacts/identity.h"
#include "store/sign.h"

#define SIG_MAX ((size_t)64 << 10)

struct dit_remote_blob_body {
  dit_store_blob_writer_t *w;
  ZSTD_DStream *z;
  void *buf;
  size_t buf_cap;
  uint64_t wire, wire_cap, size;
  int frame_done;
  char *what;
};

dit_status_t dit_remote_blob_body_create(dit_store_t *st, const dit_manifest_blob_t *b, dit_store_quota_t *q,
                                         const char *what, dit_remote_blob_body_t **out) {
  *out = NULL;
  dit_remote_blob_body_t *k = calloc(1, sizeof *k);
  if (!k) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  k->what = strdup(what);
  k->buf_cap = ZSTD_DStreamOutSize();
  k->buf = malloc(k->buf_cap);
  k->z = ZSTD_createDStream();
  k->size = b->size;
  /* zstd's worst case for incompressible input, plus slack for frame headers. A size past
   * zstd's bound (0) leaves the quota and the writer's size check to stop the body. */
  size_t bound = b->size < (uint64_t)SIZE_MAX / 2 ? ZSTD_compressBound((size_t)b->size) : 0;
  k->wire_cap = bound ? (uint64_t)bound + (64u << 10) : UINT64_MAX;
  dit_status_t s = k->what && k->buf && k->z ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  if (!s) s = dit_store_blob_writer_create(st, b->hash, b->size, b->sha256[0] ? b->sha256 : NULL, what, &k->w);
  if (!s && q) dit_store_blob_writer_set_quota(k->w, q);
  if (s) {
    dit_remote_blob_body_destroy(k);
    return s;
  }
  *out = k;
  return DIT_OK;
}

void dit_remote_blob_body_destroy(dit_remote_blob_body_t *k) {
  if (!k) return;
  dit_store_blob_writer_destroy(k->w);
  ZSTD_freeDStream(k->z);
  free(k->buf);
  free(k->what);
  free(k);
}

dit_status_t dit_remote_blob_body_reset(dit_remote_blob_body_t *k) {
  k->frame_done = 0;
  k->wire = 0;
  ZSTD_DCtx_reset(k->z, ZSTD_reset_session_only);
  return dit_store_blob_writer_reset(k->w);
}

uint64_t dit_remote_blob_body_wire_bytes(const dit_remote_blob_body_t *k) { return k->wire; }

dit_status_t dit_remote_blob_body_feed(dit_remote_blob_body_t *k, const void *p, size_t n) {
  if (n > k->wire_cap - k->wire)
    return DIT_ERR(DATA_LOSS, "%s: more than %" PRIu64 " compressed bytes, more than the blob's %" PRIu64 " bytes can need", k->what,
                   k->wire_cap, k->size);
  k->wire += n;
  ZSTD_inBuffer in = {p, n, 0};
  for (;;) {
    ZSTD_outBuffer out = {k->buf, k->buf_cap, 0};
    size_t ret = ZSTD_decompressStream(k->z, &out, &in);
    if (ZSTD_isError(ret))
      return DIT_ERR(DATA_LOSS, "%s: not a valid zstd stream (ZSTD_decompressStream: %s)", k->what, ZSTD_getErrorName(ret));
    if (out.pos) DIT_RETURN_IF(dit_store_blob_writer_append(k->w, k->buf, out.pos));
    k->frame_done = ret == 0;
    if (in.pos == in.size && out.pos < out.size) break;
  }
  return DIT_OK;
}

dit_status_t dit_remote_blob_body_finish(dit_remote_blob_body_t *k) {
  if (!k->frame_done)
    return DIT_ERR(DATA_LOSS, "%s: truncated: the zstd stream ends before its frame does (%" PRIu64 " of %" PRIu64 " bytes decoded)",
                   k->what, dit_store_blob_writer_received(k->w), k->size);
  return dit_store_blob_writer_commit(k->w);
}

dit_status_t dit_remote_manifest_body_check(const char *text, size_t len, const char *identity, const char *what,
                                            dit_manifest_t **out_m) {
  *out_m = NULL;
  dit_manifest_t *m = NULL;
  DIT_RETURN_IF(dit_manifest_parse(text, len, what, &m));
  char recomputed[DIT_HASH_HEX];
  dit_status_t s = dit_identity_compute(m->inputs, recomputed);
  if (!s && (strcmp(m->identity, identity) || strcmp(recomputed, identity)))
    s = DIT_ERR(DATA_LOSS, "%s: identity mismatch: asked for %s, manifest records %s, recomputed from inputs %s", what, identity,
                m->identity, recomputed);
  for (size_t i = 0; !s && i < m->n_blobs; i++)
    if (!m->blobs[i].sha256[0])
      s = DIT_ERR(DATA_LOSS, "%s: field 'blobs[%zu].sha256' missing: a pulled blob must be checkable against its SHA-256", what, i);
  if (s) {
    dit_manifest_free(m);
    return s;
  }
  *out_m = m;
  return DIT_OK;
}

dit_status_t dit_remote_signature_body_check(const char *sig, size_t len, const char *what) {
  if (len > SIG_MAX) return DIT_ERR(OUT_OF_RANGE, "%s: a signature of %zu bytes, at most %zu allowed", what, len, SIG_MAX);
  unsigned char pub[32], sigb[64];
  return dit_sign_parse(sig, len, what, pub, sigb);
}
