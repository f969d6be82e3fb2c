/* libFuzzer target for what a remote store sends back (store/remote_response.h), fed from
 * memory. The first byte picks the answer:
 *   0  a blob body: 4 bytes of claimed size (LE), 1 byte of piece size, then the body, fed
 *      in pieces into a scratch store under a 1 MiB quota. Odd selectors claim the hash of
 *      what the body really decodes to (so the commit path is reached), even ones another.
 *      An accepted body must leave exactly that blob; a refused one, nothing.
 *   1  a manifest body: 32 bytes of the identity asked for, then the text; odd selectors
 *      ask for the identity the text itself records (so the recomputation is reached).
 *   2  a signature body, then checked against a key made at start.
 * No input may crash, read out of bounds, leak or do unbounded work. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "artifacts/identity.h"
#include "base/fileio.h"
#include "fuzz_scratch.h"
#include "store/remote_response.h"
#include "store/sign.h"

#define QUOTA ((uint64_t)1 << 20)

static char g_root[256], g_pub[300];
static dit_store_t *g_st;

static void fail(const char *why, dit_status_t s) {
  fprintf(stderr, "%s%s%s\n", why, s ? ": " : "", s ? dit_status_message(s) : "");
  abort();
}

static void teardown(void) {
  dit_store_close(g_st);
  dit_status_free(dit_remove_tree(g_root));
}

static void setup(void) {
  fuzz_scratch_root(g_root, sizeof g_root, "fuzz_remote_response");
  dit_status_free(dit_remove_tree(g_root));
  dit_status_t s = dit_store_open(g_root, &g_st);
  if (s) fail("scratch store", s);
  char key[300];
  snprintf(key, sizeof key, "%s/key", g_root);
  snprintf(g_pub, sizeof g_pub, "%s/key.pub", g_root);
  s = dit_sign_keygen(key, g_pub);
  if (s) fail("keygen", s);
  atexit(teardown);
}

static void blob_body(uint8_t sel, const uint8_t *p, size_t n) {
  if (n < 5) return;
  uint64_t claimed = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
  size_t piece = (size_t)p[4] * 13 + 1;
  p += 5;
  n -= 5;
  dit_manifest_blob_t b;
  memset(&b, 0, sizeof b);
  strcpy(b.role, "plan");
  b.size = claimed;
  dit_hash128_hex("", 0, b.hash);
  if (sel & 1) {
    /* What the body really decodes to, up to the quota: then the claim is honest. */
    void *out = malloc(QUOTA);
    size_t r = out ? ZSTD_decompress(out, QUOTA, p, n) : 0;
    if (out && !ZSTD_isError(r)) {
      dit_hash128_hex(out, r, b.hash);
      if (sel & 2) b.size = r;
    }
    free(out);
  }
  dit_store_limits_t lim = {QUOTA, 0};
  dit_store_quota_t *q = NULL;
  dit_status_t s = dit_store_quota_create(&lim, "fuzz", &q);
  if (s) fail("quota", s);
  dit_remote_blob_body_t *k = NULL;
  s = dit_remote_blob_body_create(g_st, &b, q, "fuzz body", &k);
  if (s) fail("body", s);
  for (size_t off = 0; !s && off < n; off += piece) s = dit_remote_blob_body_feed(k, p + off, n - off < piece ? n - off : piece);
  if (!s) s = dit_remote_blob_body_finish(k);
  if (dit_store_quota_bytes(q) > QUOTA) fail("quota passed", NULL);
  int have = dit_store_has_blob(g_st, b.hash, b.size);
  if ((s == DIT_OK) != have) fail(s ? "a refused body left its blob" : "an accepted body left no blob", s);
  dit_remote_blob_body_destroy(k);
  dit_store_quota_destroy(q);
  if (fuzz_scratch_count(g_root, "tmp", 0)) fail("temporaries left", NULL);
  dit_status_free(s);
  if (have) {
    char *path = NULL;
    if (!dit_store_blob_path(g_st, b.hash, &path)) unlink(path);
    free(path);
  }
}

static void manifest_body(uint8_t sel, const uint8_t *p, size_t n) {
  if (n < 32) return;
  char identity[33];
  memcpy(identity, p, 32);
  identity[32] = 0;
  p += 32;
  n -= 32;
  if (sel & 1) {
    dit_manifest_t *m = NULL;
    dit_status_t ps = dit_manifest_parse((const char *)p, n, "fuzz", &m);
    if (!ps) memcpy(identity, m->identity, sizeof identity);
    dit_manifest_free(m);
    dit_status_free(ps);
  }
  dit_manifest_t *m = NULL;
  dit_status_t s = dit_remote_manifest_body_check((const char *)p, n, identity, "fuzz manifest", &m);
  if (!s) {
    if (!m || strcmp(m->identity, identity)) fail("accepted another identity", NULL);
    for (size_t i = 0; i < m->n_blobs; i++)
      if (!m->blobs[i].sha256[0]) fail("accepted a blob without sha256", NULL);
    dit_store_quota_t *q = NULL;
    s = dit_store_quota_create(NULL, "fuzz", &q);
    if (s) fail("quota", s);
    dit_status_free(dit_store_quota_check_manifest(q, g_st, m));
    dit_store_quota_destroy(q);
  } else if (m) {
    fail("refused but handed out a manifest", s);
  }
  dit_status_free(s);
  dit_manifest_free(m);
}

static void signature_body(const uint8_t *p, size_t n) {
  dit_status_t s = dit_remote_signature_body_check((const char *)p, n, "fuzz sig");
  if (!s) {
    static const char text[] = "a manifest";
    dit_status_t v = dit_sign_verify(g_pub, text, sizeof text - 1, (const char *)p, n, "fuzz sig");
    if (!v) fail("a signature nobody made verified", NULL);
    dit_status_free(v);
  }
  dit_status_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_st) setup();
  if (size < 1) return 0;
  uint8_t sel = data[0];
  switch ((sel >> 4) % 3) {
    case 0: blob_body(sel, data + 1, size - 1); break;
    case 1: manifest_body(sel, data + 1, size - 1); break;
    default: signature_body(data + 1, size - 1); break;
  }
  return 0;
}
