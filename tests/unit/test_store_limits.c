/* Limits on what comes from outside: the quota counts the bytes writers really receive and
 * refuses the one past the limit, leaving no temporary and no blob; a refused transfer's
 * blobs are taken out again unless an entry lists them; a remote's blob body is bounded by
 * its size, its quota and zstd's worst case whatever the manifest claims; a bearer token is
 * refused for plain http:// to hosts that are not loopback, before any connection. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "artifacts/identity.h"
#include "check.h"
#include "store/remote.h"
#include "store/remote_response.h"
#include "store/store.h"

static char g_root[CHECK_PATH_MAX];

/* Files under root/sub (recursively for cas/). */
static int count_files(const char *root, const char *sub) {
  char p[CHECK_PATH_MAX];
  check_pathf(p, "%s/%s", root, sub);
  DIR *d = opendir(p);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (!strcmp(sub, "cas")) {
      char s[CHECK_PATH_MAX];
      check_pathf(s, "cas/%s", e->d_name);
      n += count_files(root, s);
    } else {
      n++;
    }
  }
  closedir(d);
  return n;
}

static dit_manifest_blob_t blob_of(const void *p, size_t n) {
  dit_manifest_blob_t b;
  memset(&b, 0, sizeof b);
  dit_hash128_hex(p, n, b.hash);
  b.size = n;
  strcpy(b.role, "plan");
  return b;
}

static void test_quota_writer(void) {
  char root[CHECK_PATH_MAX];
  check_pathf(root, "%s/quota", g_root);
  dit_store_t *st = NULL;
  CHECK_OK(dit_store_open(root, &st));
  if (!st) return;
  char a[3000], b[3000], c[3000];
  memset(a, 'a', sizeof a);
  memset(b, 'b', sizeof b);
  memset(c, 'c', sizeof c);
  dit_manifest_blob_t ba = blob_of(a, sizeof a), bb = blob_of(b, sizeof b), bc = blob_of(c, sizeof c);
  dit_store_limits_t lim = {7000, 0};
  dit_store_quota_t *q = NULL;
  CHECK_OK(dit_store_quota_create(&lim, "test", &q));
  if (!q) return;

  /* Two blobs fit; a reset gives back what the dropped attempt counted. */
  dit_store_blob_writer_t *w = NULL;
  CHECK_OK(dit_store_blob_writer_create(st, ba.hash, ba.size, NULL, "a", &w));
  dit_store_blob_writer_set_quota(w, q);
  CHECK_OK(dit_store_blob_writer_append(w, a, 2000));
  CHECK_EQ_INT(dit_store_quota_bytes(q), 2000);
  CHECK_OK(dit_store_blob_writer_reset(w));
  CHECK_EQ_INT(dit_store_quota_bytes(q), 0);
  CHECK_OK(dit_store_blob_writer_append(w, a, sizeof a));
  CHECK_OK(dit_store_blob_writer_commit(w));
  dit_store_blob_writer_destroy(w);
  CHECK_OK(dit_store_blob_writer_create(st, bb.hash, bb.size, NULL, "b", &w));
  dit_store_blob_writer_set_quota(w, q);
  CHECK_OK(dit_store_blob_writer_append(w, b, sizeof b));
  CHECK_OK(dit_store_blob_writer_commit(w));
  dit_store_blob_writer_destroy(w);
  CHECK(dit_store_has_blob(st, ba.hash, ba.size) && dit_store_has_blob(st, bb.hash, bb.size));

  /* The third passes the limit at the byte that would cross it: refused with the limit and
   * the count, nothing of it written. */
  CHECK_OK(dit_store_blob_writer_create(st, bc.hash, bc.size, NULL, "c", &w));
  dit_store_blob_writer_set_quota(w, q);
  CHECK_OK(dit_store_blob_writer_append(w, c, 1000));
  CHECK_ERR(dit_store_blob_writer_append(w, c + 1000, 1000), RESOURCE_EXHAUSTED,
            "c: blob bytes received pass the limit: 7000 allowed (--max-bytes), 7000 received so far and 1000 more arriving");
  CHECK(dit_store_quota_exceeded(q));
  dit_store_blob_writer_destroy(w);
  CHECK_EQ_INT(count_files(root, "tmp"), 0);
  CHECK(!dit_store_has_blob(st, bc.hash, bc.size));

  /* Rollback takes out the blobs this transfer entered and no entry lists. */
  CHECK_EQ_INT(count_files(root, "cas"), 2);
  CHECK_OK(dit_store_quota_rollback(q, st));
  CHECK_EQ_INT(count_files(root, "cas"), 0);
  dit_store_quota_destroy(q);

  /* A blob that was already there is not the transfer's: rollback leaves it. */
  CHECK_OK(dit_store_blob_writer_create(st, ba.hash, ba.size, NULL, "a", &w));
  CHECK_OK(dit_store_blob_writer_append(w, a, sizeof a));
  CHECK_OK(dit_store_blob_writer_commit(w));
  dit_store_blob_writer_destroy(w);
  CHECK_OK(dit_store_quota_create(NULL, "test", &q));
  CHECK_OK(dit_store_blob_writer_create(st, ba.hash, ba.size, NULL, "a again", &w));
  dit_store_blob_writer_set_quota(w, q);
  CHECK_OK(dit_store_blob_writer_append(w, a, sizeof a));
  CHECK_OK(dit_store_blob_writer_commit(w));
  dit_store_blob_writer_destroy(w);
  CHECK_OK(dit_store_quota_rollback(q, st));
  CHECK(dit_store_has_blob(st, ba.hash, ba.size));

  /* The manifest's claims: a blob count and the bytes of the blobs not yet here. */
  dit_manifest_t m;
  memset(&m, 0, sizeof m);
  dit_manifest_blob_t list[3] = {ba, bb, bc};
  list[1].size = (uint64_t)1 << 62; /* a lie the writer would catch, claimed up front */
  m.blobs = list;
  m.n_blobs = 3;
  dit_store_quota_t *q2 = NULL;
  dit_store_limits_t lim2 = {1 << 20, 2};
  CHECK_OK(dit_store_quota_create(&lim2, "test", &q2));
  CHECK_ERR(dit_store_quota_check_manifest(q2, st, &m), RESOURCE_EXHAUSTED,
            "the manifest lists 3 blobs, more than the 2 allowed (--max-blobs); nothing transferred");
  m.n_blobs = 2;
  CHECK_ERR(dit_store_quota_check_manifest(q2, st, &m), RESOURCE_EXHAUSTED,
            "the manifest's 1 blob not yet in the store claim 4611686018427387904 bytes, more than the 1048576 allowed");
  list[1].size = bb.size;
  CHECK_OK(dit_store_quota_check_manifest(q2, st, &m));
  dit_store_quota_destroy(q2);
  dit_store_quota_destroy(q);
  dit_store_close(st);
}

/* A zstd frame of n bytes of p. */
static void *frame(const void *p, size_t n, size_t *out_n) {
  size_t cap = ZSTD_compressBound(n);
  void *z = malloc(cap);
  *out_n = ZSTD_compress(z, cap, p, n, 3);
  CHECK(!ZSTD_isError(*out_n));
  return z;
}

/* Feeds a body in pieces of `step` bytes, then finishes it. */
static dit_status_t feed_all(dit_remote_blob_body_t *k, const uint8_t *p, size_t n, size_t step) {
  for (size_t off = 0; off < n; off += step) {
    dit_status_t s = dit_remote_blob_body_feed(k, p + off, n - off < step ? n - off : step);
    if (s) return s;
  }
  return dit_remote_blob_body_finish(k);
}

static void test_blob_bodies(void) {
  char root[CHECK_PATH_MAX];
  check_pathf(root, "%s/bodies", g_root);
  dit_store_t *st = NULL;
  CHECK_OK(dit_store_open(root, &st));
  if (!st) return;
  size_t n = 200000;
  uint8_t *raw = malloc(n);
  for (size_t i = 0; i < n; i++) raw[i] = (uint8_t)(i * 31 / 7);
  size_t zn = 0;
  uint8_t *z = frame(raw, n, &zn);
  dit_manifest_blob_t b = blob_of(raw, n);
  dit_remote_blob_body_t *k = NULL;

  /* A manifest that understates the size: the body stops at the claimed size. */
  dit_manifest_blob_t small = b;
  small.size = n / 2;
  CHECK_OK(dit_remote_blob_body_create(st, &small, NULL, "understated", &k));
  CHECK_ERR(feed_all(k, z, zn, 4096), DATA_LOSS, "more bytes than the 100000 the manifest lists");
  dit_remote_blob_body_destroy(k);
  /* One that overstates it (a size past the quota): the quota stops it as bytes arrive. */
  dit_manifest_blob_t big = b;
  big.size = (uint64_t)1 << 40;
  dit_store_limits_t lim = {65536, 0};
  dit_store_quota_t *q = NULL;
  CHECK_OK(dit_store_quota_create(&lim, "test", &q));
  CHECK_OK(dit_remote_blob_body_create(st, &big, q, "overstated", &k));
  CHECK_ERR(feed_all(k, z, zn, 1000), RESOURCE_EXHAUSTED, "65536 allowed (--max-bytes)");
  dit_remote_blob_body_destroy(k);
  dit_store_quota_destroy(q);
  /* A truncated frame, a damaged one, and trailing garbage after a whole one. */
  CHECK_OK(dit_remote_blob_body_create(st, &b, NULL, "truncated", &k));
  CHECK_ERR(feed_all(k, z, zn - 10, 777), DATA_LOSS, "truncated");
  CHECK_OK(dit_remote_blob_body_reset(k));
  uint8_t *bad = malloc(zn + 64);
  memcpy(bad, z, zn);
  bad[zn / 2] ^= 0x40;
  CHECK_ERR(feed_all(k, bad, zn, 4096), DATA_LOSS, "");
  CHECK_OK(dit_remote_blob_body_reset(k));
  memcpy(bad, z, zn);
  memset(bad + zn, 0x55, 64);
  CHECK_ERR(feed_all(k, bad, zn + 64, 4096), DATA_LOSS, "not a valid zstd stream");
  /* More wire bytes than zstd can need for the size are refused before decoding. */
  dit_remote_blob_body_destroy(k);
  dit_manifest_blob_t tiny = blob_of("x", 1);
  CHECK_OK(dit_remote_blob_body_create(st, &tiny, NULL, "padded", &k));
  uint8_t *zeros = calloc(1, 70000);
  CHECK_ERR(dit_remote_blob_body_feed(k, zeros, 70000), DATA_LOSS, "compressed bytes");
  free(zeros);
  dit_remote_blob_body_destroy(k);
  CHECK_EQ_INT(count_files(root, "cas"), 0);
  CHECK_EQ_INT(count_files(root, "tmp"), 0);
  /* After a reset the right body goes in, in pieces of one byte at the frame's end. */
  CHECK_OK(dit_remote_blob_body_create(st, &b, NULL, "good", &k));
  CHECK_OK(dit_remote_blob_body_feed(k, z, 100));
  CHECK_OK(dit_remote_blob_body_reset(k));
  CHECK_OK(feed_all(k, z, zn, zn > 1 ? zn - 1 : 1));
  CHECK_EQ_INT(dit_remote_blob_body_wire_bytes(k), zn);
  dit_remote_blob_body_destroy(k);
  CHECK(dit_store_has_blob(st, b.hash, b.size));
  free(bad);
  free(z);
  free(raw);
  dit_store_close(st);
}

static void test_token_hosts(void) {
  static const char *const loop[] = {"http://127.0.0.1:8080/x", "http://127.5.6.7/", "http://[::1]:80/", "http://localhost/",
                                     "http://LOCALHOST:1/store", "https://127.0.0.1/", "http://[::ffff:127.0.0.1]/",
                                     /* curl reads this as 127.0.0.1, and connects there */
                                     "http://0x7f.1/"};
  static const char *const other[] = {"http://192.0.2.1:9/", "http://127.0.0.1@evil.example/", "http://127.0.0.1.evil.example/",
                                      "http://localhost.evil.example/", "http://[::2]/", "http://10.0.0.1/",
                                      "not a url"};
  for (size_t i = 0; i < sizeof loop / sizeof *loop; i++) {
    if (!dit_remote_url_is_loopback(loop[i])) fprintf(stderr, "not taken as loopback: %s\n", loop[i]);
    CHECK(dit_remote_url_is_loopback(loop[i]));
  }
  for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
    if (dit_remote_url_is_loopback(other[i])) fprintf(stderr, "taken as loopback: %s\n", other[i]);
    CHECK(!dit_remote_url_is_loopback(other[i]));
  }
  dit_remote_options_t o;
  memset(&o, 0, sizeof o);
  o.url = "http://192.0.2.1:9/";
  o.token = "s3cret";
  dit_remote_t *r = NULL;
  CHECK_ERR(dit_remote_create(&o, &r), FAILED_PRECONDITION,
            "remote http://192.0.2.1:9/: refusing to send the bearer token over plain http:// to a host that is not loopback");
  CHECK(r == NULL);
  o.url = "http://127.0.0.1@192.0.2.1:9/";
  CHECK_ERR(dit_remote_create(&o, &r), FAILED_PRECONDITION, "--insecure-token");
  /* Allowed: the flag, https, loopback, or no token. Creating connects to nothing. */
  o.insecure_token = 1;
  CHECK_OK(dit_remote_create(&o, &r));
  dit_remote_destroy(r);
  o.insecure_token = 0;
  const char *ok[] = {"https://192.0.2.1:9/", "http://127.0.0.1:9/", "http://[::1]:9/", "http://localhost:9/"};
  for (size_t i = 0; i < 4; i++) {
    o.url = ok[i];
    r = NULL;
    CHECK_OK(dit_remote_create(&o, &r));
    dit_remote_destroy(r);
  }
  o.url = "http://192.0.2.1:9/";
  o.token = NULL;
  r = NULL;
  CHECK_OK(dit_remote_create(&o, &r));
  dit_remote_destroy(r);
}

int main(void) {
  snprintf(g_root, sizeof g_root, "%s", check_tmpdir("test_store_limits"));
  test_quota_writer();
  test_blob_bodies();
  test_token_hosts();
  return check_summary("test_store_limits");
}
