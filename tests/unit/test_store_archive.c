/* .ditb archives and manifest signatures: pack and import round trip into a store whose
 * view opens as a bundle; a trusted key accepts its own signature and refuses other keys,
 * unsigned archives and altered manifests before any blob enters; truncated, flipped,
 * reordered, newer-format and padded archives are refused and leave no entry, no blob and no
 * temporary behind; imports stop at their limits; a remote's manifest and signature bodies
 * are checked before they are used.
 * With DIT_WRITE_CORPUS=DIR set it also writes the fuzz_ditb seed corpus there. */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/archive.h"
#include "artifacts/bundle.h"
#include "store/fetch.h"
#include "store/remote_response.h"
#include "artifacts/identity.h"
#include "store/sign.h"
#include "store/store.h"
#include "check.h"

static char g_root[CHECK_PATH_MAX];

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* A small bundle: a 4 KiB weights blob holding one tensor and a short plan blob. `variant`
 * goes into the inputs, so it changes the identity. */
static char *make_bundle(const char *parent, int variant) {
  unsigned char weights[4096 + 64];
  for (size_t i = 0; i < sizeof weights; i++) weights[i] = (unsigned char)(i * 7 + (size_t)variant);
  const char plan[] = "{\"not\": \"parsed by the store\"}";
  dit_bundle_writer_t *w = NULL;
  CHECK_OK(dit_bundle_writer_create(parent, &w));
  if (!w) return NULL;
  dit_manifest_t m;
  memset(&m, 0, sizeof m);
  dit_manifest_blob_t blobs[2];
  memset(blobs, 0, sizeof blobs);
  dit_manifest_weights_t wt;
  memset(&wt, 0, sizeof wt);
  dit_manifest_tensor_t t;
  memset(&t, 0, sizeof t);
  dit_manifest_rank_t rk;
  memset(&rk, 0, sizeof rk);
  CHECK_OK(dit_bundle_writer_add_blob(w, weights, sizeof weights, blobs[0].hash));
  CHECK_OK(dit_bundle_writer_add_blob(w, plan, sizeof plan - 1, blobs[1].hash));
  strcpy(blobs[0].role, "weights");
  blobs[0].size = sizeof weights;
  strcpy(blobs[1].role, "plan");
  blobs[1].size = sizeof plan - 1;
  t.name = "proj.weight";
  t.dtype = DIT_F32;
  t.rank = 2;
  t.dims[0] = 32;
  t.dims[1] = 32;
  t.nbytes = 4096;
  memcpy(wt.blob, blobs[0].hash, DIT_HASH_HEX);
  wt.tp_size = 1;
  wt.n_tensors = 1;
  wt.tensors = &t;
  memcpy(rk.plan, blobs[1].hash, DIT_HASH_HEX);
  memcpy(rk.weights, blobs[0].hash, DIT_HASH_HEX);
  m.schema_major = DIT_SCHEMA_MAJOR;
  m.schema_minor = DIT_SCHEMA_MINOR;
  m.inputs = cJSON_CreateObject();
  cJSON_AddNumberToObject(m.inputs, "variant", variant);
  cJSON_AddStringToObject(m.inputs, "weights", blobs[0].hash);
  strcpy(m.family, "wan");
  strcpy(m.model_class, "WanTransformer3DModel");
  strcpy(m.variant, "tiny");
  strcpy(m.arch, "cpu");
  m.topology.world = m.topology.tp = m.topology.cp = m.topology.cfg = 1;
  strcpy(m.topology.cp_mode, "none");
  m.shape.batch = m.shape.frames = 1;
  m.shape.height = m.shape.width = 16;
  m.shape.text_len = 4;
  m.shape.latent[0] = 16;
  m.shape.latent[1] = 1;
  m.shape.latent[2] = m.shape.latent[3] = 2;
  m.dtype = DIT_F32;
  m.blobs = blobs;
  m.n_blobs = 2;
  m.weights = &wt;
  m.n_weights = 1;
  m.ranks = &rk;
  m.n_ranks = 1;
  m.arena_bytes = 1024;
  m.weight_bytes = sizeof weights;
  m.peak_bytes = 1024 + sizeof weights;
  char *path = NULL;
  CHECK_OK(dit_bundle_writer_publish(w, &m, NULL, &path, NULL));
  dit_bundle_writer_destroy(w);
  cJSON_Delete(m.inputs);
  return path;
}

static uint8_t *read_file(const char *path, size_t *n) {
  char *t = NULL;
  dit_status_t s = dit_file_read(path, 1 << 26, &t, n);
  CHECK_OK(s);
  return (uint8_t *)t;
}

static void write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(p, 1, n, f) == n);
  if (f) fclose(f);
}

static dit_store_t *fresh_store(const char *name) {
  char root[CHECK_PATH_MAX];
  check_pathf(root, "%s/%s", g_root, name);
  dit_store_t *st = NULL;
  CHECK_OK(dit_store_open(root, &st));
  return st;
}

/* Imports a damaged image into a fresh store: must fail and leave no entry. */
static void expect_refused(const uint8_t *p, size_t n, const char *name) {
  dit_status_t s = dit_ditb_check(p, n, name, UINT64_MAX);
  CHECK(s != DIT_OK);
  dit_status_free(s);
  dit_store_t *st = fresh_store(name);
  if (!st) return;
  char id[DIT_HASH_HEX];
  s = dit_ditb_import(st, p, n, name, NULL, NULL, id);
  CHECK(s != DIT_OK);
  dit_status_free(s);
  char ac[CHECK_PATH_MAX];
  check_pathf(ac, "%s/%s/ac", g_root, name);
  CHECK_EQ_INT(count_entries(ac), 0);
  check_pathf(ac, "%s/%s/tmp", g_root, name);
  CHECK_EQ_INT(count_entries(ac), 0);
  /* Blobs entered before the damage was found are taken out again. */
  check_pathf(ac, "%s/%s/cas", g_root, name);
  DIR *d = opendir(ac);
  struct dirent *e;
  int blobs = 0;
  while (d && (e = readdir(d))) {
    char sub[CHECK_PATH_MAX];
    check_pathf(sub, "%s/%s", ac, e->d_name);
    if (e->d_name[0] != '.') blobs += count_entries(sub);
  }
  if (d) closedir(d);
  CHECK_EQ_INT(blobs, 0);
  dit_store_close(st);
}

/* The remote's answers for entry id of st: its manifest and signature bodies. */
static void test_remote_bodies(dit_store_t *st, const char *id, const char *other_id) {
  char *text = NULL, *sig = NULL;
  size_t len = 0, slen = 0;
  CHECK_OK(dit_store_get_manifest(st, id, NULL, &text, &len));
  CHECK_OK(dit_store_get_signature(st, id, &sig, &slen));
  if (!text || !sig) return;
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_remote_manifest_body_check(text, len, id, "ac", &m));
  CHECK(m && !strcmp(m->identity, id));
  dit_manifest_free(m);
  m = NULL;
  CHECK_ERR(dit_remote_manifest_body_check(text, len, other_id, "ac", &m), DATA_LOSS, "identity mismatch: asked for");
  CHECK(m == NULL);
  char *cut = strstr(text, "\"sha256\"");
  if (cut) {
    /* The same manifest without the first blob's sha256 key (renamed, so it still parses). */
    memcpy(cut, "\"sha257\"", 8);
    CHECK_ERR(dit_remote_manifest_body_check(text, len, id, "ac", &m), INVALID_ARGUMENT, "");
  }
  CHECK_OK(dit_remote_signature_body_check(sig, slen, "sig"));
  CHECK_ERR(dit_remote_signature_body_check(sig, slen - 1, "sig"), DATA_LOSS, "sig: signature is malformed");
  char *big = calloc(1, 70000);
  if (big) CHECK_ERR(dit_remote_signature_body_check(big, 70000, "sig"), OUT_OF_RANGE, "at most 65536");
  free(big);
  free(text);
  free(sig);
}

static void test_signatures(const char *key, const char *pub, const char *other_pub) {
  static const char text[] = "{\"a manifest\": 1}\n";
  char *sig = NULL;
  CHECK_OK(dit_sign_text(key, text, sizeof text - 1, &sig));
  if (!sig) return;
  size_t n = strlen(sig);
  CHECK_OK(dit_sign_verify(pub, text, sizeof text - 1, sig, n, "m"));
  CHECK_ERR(dit_sign_verify(other_pub, text, sizeof text - 1, sig, n, "m"), FAILED_PRECONDITION, "not by the trusted key");
  CHECK_ERR(dit_sign_verify(pub, "{\"a manifest\": 2}\n", sizeof text - 1, sig, n, "m"), DATA_LOSS, "does not match");
  CHECK_ERR(dit_sign_verify(pub, text, sizeof text - 1, NULL, 0, "m"), FAILED_PRECONDITION, "unsigned");
  CHECK_ERR(dit_sign_verify(pub, text, sizeof text - 1, sig, n - 1, "m"), DATA_LOSS, "malformed");
  /* A flipped signature digit. */
  sig[n - 5] = sig[n - 5] == '0' ? '1' : '0';
  CHECK_ERR(dit_sign_verify(pub, text, sizeof text - 1, sig, n, "m"), DATA_LOSS, "does not match");
  CHECK_ERR(dit_sign_verify(key, text, sizeof text - 1, sig, n, "m"), INVALID_ARGUMENT, "not a PEM public key");
  CHECK_ERR(dit_sign_keygen(key, pub), ALREADY_EXISTS, key);
  free(sig);
}

int main(void) {
  snprintf(g_root, sizeof g_root, "%s", check_tmpdir("test_store_archive"));
  char key[CHECK_PATH_MAX], pub[CHECK_PATH_MAX], key2[CHECK_PATH_MAX], pub2[CHECK_PATH_MAX], p[CHECK_PATH_MAX];
  check_pathf(key, "%s/key", g_root);
  check_pathf(pub, "%s/key.pub", g_root);
  check_pathf(key2, "%s/key2", g_root);
  check_pathf(pub2, "%s/key2.pub", g_root);
  CHECK_OK(dit_sign_keygen(key, pub));
  CHECK_OK(dit_sign_keygen(key2, pub2));
  struct stat sb;
  CHECK(stat(key, &sb) == 0 && (sb.st_mode & 077) == 0);
  test_signatures(key, pub, pub2);

  check_pathf(p, "%s/plain", g_root);
  char *bundle = make_bundle(p, 1), *bundle2 = make_bundle(p, 2);
  if (!bundle || !bundle2) return check_summary("test_store_archive");
  dit_store_t *a = fresh_store("a");
  char id[DIT_HASH_HEX], id2[DIT_HASH_HEX];
  CHECK_OK(dit_store_import_bundle(a, bundle, id));
  CHECK_OK(dit_store_import_bundle(a, bundle2, id2));
  char *text = NULL, *sig = NULL;
  size_t len = 0;
  CHECK_OK(dit_store_get_manifest(a, id, NULL, &text, &len));
  CHECK_OK(dit_sign_text(key, text, len, &sig));
  CHECK_OK(dit_store_put_signature(a, id, sig));
  free(text);
  free(sig);

  char signed_path[CHECK_PATH_MAX], unsigned_path[CHECK_PATH_MAX];
  check_pathf(signed_path, "%s/signed.ditb", g_root);
  check_pathf(unsigned_path, "%s/unsigned.ditb", g_root);
  dit_ditb_stats_t ps;
  CHECK_OK(dit_ditb_write(a, id, signed_path, &ps));
  CHECK_EQ_INT(ps.blobs, 2);
  CHECK_OK(dit_ditb_write(a, id2, unsigned_path, &ps));
  size_t n = 0, n2 = 0;
  uint8_t *img = read_file(signed_path, &n), *img2 = read_file(unsigned_path, &n2);
  if (!img || !img2) return check_summary("test_store_archive");
  CHECK(dit_ditb_is_archive(signed_path));
  CHECK(!dit_ditb_is_archive(key));
  CHECK_OK(dit_ditb_check(img, n, "signed.ditb", UINT64_MAX));
  CHECK_ERR(dit_ditb_check(img, n, "signed.ditb", 100), RESOURCE_EXHAUSTED, "allowed (--max-bytes)");

  /* Round trip into an empty store, with the trusted key; the view is a bundle. */
  dit_store_t *b = fresh_store("b");
  char got[DIT_HASH_HEX];
  CHECK_OK(dit_ditb_import(b, img, n, "signed.ditb", pub, NULL, got));
  CHECK(!strcmp(got, id));
  char *view = NULL;
  CHECK_OK(dit_store_materialize(b, id, NULL, &view));
  dit_bundle_t *bb = NULL;
  if (view) CHECK_OK(dit_bundle_open(view, DIT_BUNDLE_HASH_BLOBS, &bb));
  dit_bundle_close(bb);
  if (view) CHECK_OK(dit_fetch_check_signature(view, pub));
  if (view) CHECK_ERR(dit_fetch_check_signature(view, pub2), FAILED_PRECONDITION, "not by the trusted key");
  free(view);
  /* Through the runtime's resolver, into a temporary store that goes away. */
  dit_fetch_options_t fo;
  memset(&fo, 0, sizeof fo);
  fo.trusted_key = pub;
  dit_fetched_t *f = NULL;
  CHECK_OK(dit_fetch_bundle(signed_path, &fo, &f));
  char tmp_root[CHECK_PATH_MAX] = "";
  if (f) {
    CHECK_OK(dit_bundle_open(dit_fetched_dir(f), DIT_BUNDLE_HASH_BLOBS, &bb));
    dit_bundle_close(bb);
    check_pathf(tmp_root, "%s", dit_fetched_dir(f));
  }
  dit_fetched_destroy(f);
  CHECK(tmp_root[0] && !dit_path_exists(tmp_root));

  /* Trust: another key, or no signature, is refused before any blob enters. */
  dit_store_t *c = fresh_store("c");
  CHECK_ERR(dit_ditb_import(c, img, n, "signed.ditb", pub2, NULL, got), FAILED_PRECONDITION, "not by the trusted key");
  CHECK_ERR(dit_ditb_import(c, img2, n2, "unsigned.ditb", pub, NULL, got), FAILED_PRECONDITION, "unsigned");
  check_pathf(p, "%s/c/cas", g_root);
  CHECK_EQ_INT(count_entries(p), 0);
  check_pathf(p, "%s/c/ac", g_root);
  CHECK_EQ_INT(count_entries(p), 0);
  memset(&fo, 0, sizeof fo);
  fo.trusted_key = pub;
  f = NULL;
  CHECK_ERR(dit_fetch_bundle(unsigned_path, &fo, &f), FAILED_PRECONDITION, "unsigned");
  CHECK(f == NULL);

  /* Damage. Every truncation at and around each record boundary, and a spread of others. */
  uint8_t *buf = malloc(n + 16);
  int cases = 0;
  for (size_t cut = 0; cut < n; cut += (cut < 200 || n - cut < 200) ? 1 : 97) {
    expect_refused(img, cut, "trunc");
    cases++;
  }
  /* Every byte of the headers and manifest flipped, and a spread over the blobs. */
  for (size_t pos = 0; pos < n; pos += pos < 2000 || n - pos < 64 ? 1 : 31) {
    memcpy(buf, img, n);
    buf[pos] ^= 0x20;
    dit_status_t s = dit_ditb_check(buf, n, "flip", UINT64_MAX);
    if (!s) fprintf(stderr, "a flip at offset %zu was accepted\n", pos);
    CHECK(s != DIT_OK);
    dit_status_free(s);
    cases++;
  }
  /* Versions and trailing bytes. */
  memcpy(buf, img, n);
  buf[8] = 2;
  CHECK_ERR(dit_ditb_check(buf, n, "v2", UINT64_MAX), FAILED_PRECONDITION, "format 2.0");
  memcpy(buf, img, n);
  buf[10] = 1;
  CHECK_ERR(dit_ditb_check(buf, n, "v1.1", UINT64_MAX), FAILED_PRECONDITION, "format 1.1");
  memcpy(buf, img, n);
  memcpy(buf + n, "garbage!", 8);
  CHECK_ERR(dit_ditb_check(buf, n + 8, "padded", UINT64_MAX), INVALID_ARGUMENT, "after the end record");
  expect_refused(buf, n + 8, "padded");
  CHECK_ERR(dit_ditb_check((const uint8_t *)"DITB", 4, "short", UINT64_MAX), DATA_LOSS, "truncated");
  CHECK_ERR(dit_ditb_check((const uint8_t *)"PK\x03\x04........", 16, "zip", UINT64_MAX), INVALID_ARGUMENT, "bad magic");
  printf("damaged archives refused: %d\n", cases);
  /* A damaged last blob: the first one entered already and must go again. */
  memcpy(buf, img, n);
  buf[n - 40] ^= 1;
  expect_refused(buf, n, "flipped_last_blob");

  /* Limits: the claimed bytes and the blob count, before anything is decoded. */
  dit_store_t *d = fresh_store("limits");
  dit_store_limits_t lim = {4160 + 29, 0};
  CHECK_ERR(dit_ditb_import(d, img, n, "signed.ditb", NULL, &lim, got), RESOURCE_EXHAUSTED,
            "signed.ditb: the manifest's 2 blobs not yet in the store claim 4190 bytes, more than the 4189 allowed (--max-bytes)");
  dit_store_limits_t lim2 = {0, 1};
  CHECK_ERR(dit_ditb_import(d, img, n, "signed.ditb", NULL, &lim2, got), RESOURCE_EXHAUSTED, "lists 2 blobs, more than the 1 allowed");
  check_pathf(p, "%s/limits/ac", g_root);
  CHECK_EQ_INT(count_entries(p), 0);
  dit_store_limits_t lim3 = {4190, 2};
  CHECK_OK(dit_ditb_import(d, img, n, "signed.ditb", NULL, &lim3, got));
  dit_store_close(d);
  test_remote_bodies(a, id, id2);

  const char *corpus = getenv("DIT_WRITE_CORPUS");
  if (corpus) {
    check_pathf(p, "%s/signed.ditb", corpus);
    write_file(p, img, n);
    check_pathf(p, "%s/unsigned.ditb", corpus);
    write_file(p, img2, n2);
    check_pathf(p, "%s/truncated.ditb", corpus);
    write_file(p, img, n / 2);
    memcpy(buf, img, n);
    buf[n - 40] ^= 1;
    check_pathf(p, "%s/flipped_blob.ditb", corpus);
    write_file(p, buf, n);
  }
  free(buf);
  free(img);
  free(img2);
  free(bundle);
  free(bundle2);
  dit_store_close(a);
  dit_store_close(b);
  dit_store_close(c);
  return check_summary("test_store_archive");
}
