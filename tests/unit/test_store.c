/* The local store: import, lookup and materialized views of a compiled tiny model; blobs that
 * arrive damaged (wrong hash, wrong SHA-256, too long, too short) never enter; a manifest
 * never enters before its blobs; 8 processes publishing and materializing the same identity
 * at once leave one valid entry and no temporary file; verify finds and removes a damaged
 * blob; gc by age and by size (least recently used first, shared blobs kept while listed);
 * the weights-hash memo; the miss explanation. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "artifacts/bundle.h"
#include "artifacts/identity.h"
#include "compiler/compile.h"
#include "compiler/compile_store.h"
#include "store/store.h"
#include "check.h"

static char g_root[CHECK_PATH_MAX];
static char g_model[CHECK_PATH_MAX];

/* Number of directory entries other than . and .. (-1 if it cannot be opened). */
static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}

/* Compiles the tiny model at a shape into parent (a plain directory) and returns its path. */
static char *compile_tiny(const char *parent, int frames, const char *store) {
  dit_compile_options_t o;
  memset(&o, 0, sizeof o);
  o.model_dir = g_model;
  o.shape.batch = 1;
  o.shape.frames = frames;
  o.shape.height = 32;
  o.shape.width = 48;
  o.shape.text_len = 7;
  o.shape.dtype = DIT_F32;
  o.target = "cpu";
  char bundles[CHECK_PATH_MAX];
  check_pathf(bundles, "%s/bundles", store ? store : ".");
  o.out_dir = parent ? parent : bundles;
  o.quiet = 1;
  o.store_dir = store;
  dit_compile_result_t r;
  dit_status_t s = dit_compile(&o, &r);
  CHECK_OK(s);
  return s ? NULL : r.path;
}

static const char *id_of(const char *bundle_path) { return strrchr(bundle_path, '/') + 1; }

static void test_import_and_views(const char *bundle) {
  char root[CHECK_PATH_MAX], view_parent[CHECK_PATH_MAX], p[CHECK_PATH_MAX];
  check_pathf(root, "%s/s1", g_root);
  dit_store_t *st = NULL;
  CHECK_OK(dit_store_open(root, &st));
  if (!st) return;
  const char *id = id_of(bundle);
  CHECK(!dit_store_has_entry(st, id));
  CHECK_ERR(dit_store_get_manifest(st, id, NULL, NULL, NULL), NOT_FOUND, id);
  char got[DIT_HASH_HEX];
  CHECK_OK(dit_store_import_bundle(st, bundle, got));
  CHECK(!strcmp(got, id));
  CHECK(dit_store_has_entry(st, id));
  /* Importing again changes nothing. */
  CHECK_OK(dit_store_import_bundle(st, bundle, NULL));
  dit_manifest_t *m = NULL;
  char *text = NULL;
  size_t len = 0;
  CHECK_OK(dit_store_get_manifest(st, id, &m, &text, &len));
  for (size_t i = 0; m && i < m->n_blobs; i++) {
    char h[DIT_HASH_HEX], sha[DIT_SHA256_HEX], *bp = NULL;
    uint64_t size = 0;
    CHECK_OK(dit_store_blob_path(st, m->blobs[i].hash, &bp));
    CHECK_OK(dit_file_hashes(bp, h, sha, &size));
    CHECK(!strcmp(h, m->blobs[i].hash));
    CHECK(!strcmp(sha, m->blobs[i].sha256));
    CHECK_EQ_INT(size, m->blobs[i].size);
    /* A bundle outside the store is copied in, never linked: editing it cannot reach cas. */
    struct stat a, b;
    check_pathf(p, "%s/blobs/%s", bundle, m->blobs[i].hash);
    CHECK(stat(bp, &a) == 0 && stat(p, &b) == 0 && a.st_ino != b.st_ino);
    CHECK((a.st_mode & 0222) == 0);
    free(bp);
  }
  /* A view elsewhere: valid as any bundle directory, blobs linked to cas. */
  check_pathf(view_parent, "%s/views", g_root);
  char *view = NULL;
  CHECK_OK(dit_store_materialize(st, id, view_parent, &view));
  dit_bundle_t *b = NULL;
  CHECK_OK(dit_bundle_open(view, DIT_BUNDLE_HASH_BLOBS, &b));
  dit_bundle_close(b);
  check_pathf(p, "%s/manifest.json", view);
  char *vtext = NULL;
  size_t vlen = 0;
  CHECK_OK(dit_file_read(p, 1 << 26, &vtext, &vlen));
  CHECK(vtext && vlen == len && !memcmp(vtext, text, len));
  free(vtext);
  if (m && m->n_blobs) {
    char *bp = NULL;
    struct stat a, c;
    CHECK_OK(dit_store_blob_path(st, m->blobs[0].hash, &bp));
    check_pathf(p, "%s/blobs/%s", view, m->blobs[0].hash);
    CHECK(stat(bp, &a) == 0 && stat(p, &c) == 0 && a.st_ino == c.st_ino);
    free(bp);
  }
  /* Materializing again keeps the valid view; a broken one is replaced. */
  char *again = NULL;
  CHECK_OK(dit_store_materialize(st, id, view_parent, &again));
  CHECK(again && view && !strcmp(again, view));
  free(again);
  check_pathf(p, "%s/manifest.xxh128", view);
  unlink(p);
  CHECK_OK(dit_store_materialize(st, id, view_parent, &again));
  CHECK_OK(dit_bundle_open(view, 0, &b));
  dit_bundle_close(b);
  free(again);
  CHECK_EQ_INT(count_entries(view_parent), 1);
  /* A missing blob makes the entry incomplete and materializing it fails, naming the blob. */
  if (m && m->n_blobs) {
    char *bp = NULL;
    CHECK_OK(dit_store_blob_path(st, m->blobs[0].hash, &bp));
    char saved[CHECK_PATH_MAX];
    check_pathf(saved, "%s.saved", bp);
    CHECK(rename(bp, saved) == 0);
    CHECK(!dit_store_has_entry(st, id));
    char other[CHECK_PATH_MAX];
    check_pathf(other, "%s/views2", g_root);
    CHECK_ERR(dit_store_materialize(st, id, other, &again), NOT_FOUND, m->blobs[0].hash);
    CHECK(count_entries(other) <= 0);
    CHECK(rename(saved, bp) == 0);
    free(bp);
  }
  free(view);
  free(text);
  dit_manifest_free(m);
  dit_store_close(st);
}

static void test_blob_writer(void) {
  char root[CHECK_PATH_MAX], tmp[CHECK_PATH_MAX];
  check_pathf(root, "%s/s2", g_root);
  check_pathf(tmp, "%s/tmp", root);
  dit_store_t *st = NULL;
  CHECK_OK(dit_store_open(root, &st));
  if (!st) return;
  static const char data[] = "the bytes of a small blob";
  size_t n = sizeof data - 1;
  char h[DIT_HASH_HEX], sha[DIT_SHA256_HEX], wrong[DIT_HASH_HEX];
  dit_hash128_hex(data, n, h);
  dit_hash128_hex("other", 5, wrong);
  /* SHA-256 of the data, through a file. */
  char f[CHECK_PATH_MAX];
  check_pathf(f, "%s/data", g_root);
  CHECK_OK(dit_file_write_atomic(f, data, n));
  CHECK_OK(dit_file_hashes(f, wrong /* scratch */, sha, NULL));
  dit_hash128_hex("other", 5, wrong);
  char bad_sha[DIT_SHA256_HEX];
  memcpy(bad_sha, sha, DIT_SHA256_HEX);
  bad_sha[10] = bad_sha[10] == '0' ? '1' : '0';

  dit_store_blob_writer_t *w = NULL;
  /* Named by another hash: refused at commit. */
  CHECK_OK(dit_store_blob_writer_create(st, wrong, n, NULL, "test-source", &w));
  CHECK_OK(dit_store_blob_writer_append(w, data, n));
  CHECK_ERR(dit_store_blob_writer_commit(w), DATA_LOSS, "content hash mismatch");
  dit_store_blob_writer_destroy(w);
  CHECK(!dit_store_has_blob(st, wrong, n));
  /* Right XXH3, wrong SHA-256 (a forged manifest): refused. */
  CHECK_OK(dit_store_blob_writer_create(st, h, n, bad_sha, "test-source", &w));
  CHECK_OK(dit_store_blob_writer_append(w, data, n));
  CHECK_ERR(dit_store_blob_writer_commit(w), DATA_LOSS, "SHA-256 mismatch");
  dit_store_blob_writer_destroy(w);
  CHECK(!dit_store_has_blob(st, h, n));
  /* More bytes than listed: refused as they arrive. */
  CHECK_OK(dit_store_blob_writer_create(st, h, n - 1, NULL, "test-source", &w));
  CHECK_ERR(dit_store_blob_writer_append(w, data, n), DATA_LOSS, "more bytes than");
  dit_store_blob_writer_destroy(w);
  /* Truncated: refused at commit. */
  CHECK_OK(dit_store_blob_writer_create(st, h, n, sha, "test-source", &w));
  CHECK_OK(dit_store_blob_writer_append(w, data, n - 3));
  CHECK_ERR(dit_store_blob_writer_commit(w), DATA_LOSS, "truncated");
  dit_store_blob_writer_destroy(w);
  CHECK(!dit_store_has_blob(st, h, n));
  /* Abandoned without commit: nothing enters. */
  CHECK_OK(dit_store_blob_writer_create(st, h, n, sha, "test-source", &w));
  CHECK_OK(dit_store_blob_writer_append(w, data, n));
  dit_store_blob_writer_destroy(w);
  CHECK(!dit_store_has_blob(st, h, n));
  CHECK_EQ_INT(count_entries(tmp), 0);
  /* A retry after a damaged attempt: reset, then the right bytes. */
  CHECK_OK(dit_store_blob_writer_create(st, h, n, sha, "test-source", &w));
  CHECK_OK(dit_store_blob_writer_append(w, "garbage", 7));
  CHECK_OK(dit_store_blob_writer_reset(w));
  CHECK_OK(dit_store_blob_writer_append(w, data, 5));
  CHECK_OK(dit_store_blob_writer_append(w, data + 5, n - 5));
  CHECK_EQ_INT(dit_store_blob_writer_received(w), n);
  CHECK_OK(dit_store_blob_writer_commit(w));
  dit_store_blob_writer_destroy(w);
  CHECK(dit_store_has_blob(st, h, n));
  CHECK_EQ_INT(count_entries(tmp), 0);
  dit_store_close(st);
}

static void test_manifest_order(const char *bundle) {
  char root[CHECK_PATH_MAX], p[CHECK_PATH_MAX];
  check_pathf(root, "%s/s3", g_root);
  dit_store_t *st = NULL;
  CHECK_OK(dit_store_open(root, &st));
  dit_store_t *src = NULL;
  char sroot[CHECK_PATH_MAX];
  check_pathf(sroot, "%s/s1", g_root);
  CHECK_OK(dit_store_open(sroot, &src));
  if (!st || !src) return;
  const char *id = id_of(bundle);
  char *text = NULL;
  size_t len = 0;
  CHECK_OK(dit_store_get_manifest(src, id, NULL, &text, &len));
  /* The blobs are not there yet: the manifest may not enter. */
  CHECK_ERR(dit_store_put_manifest(st, id, text, len, NULL, NULL), FAILED_PRECONDITION, "blobs go in before their manifest");
  check_pathf(p, "%s/ac/%s", root, id);
  CHECK(!dit_path_exists(p));
  /* Under a different name: refused. */
  char other[DIT_HASH_HEX];
  dit_hash128_hex("x", 1, other);
  CHECK_ERR(dit_store_put_manifest(st, other, text, len, NULL, NULL), DATA_LOSS, "identity mismatch");
  /* Without sha256 fields (a bundle directory's own manifest): refused. */
  char mp[CHECK_PATH_MAX];
  check_pathf(mp, "%s/manifest.json", bundle);
  char *raw = NULL;
  size_t rlen = 0;
  CHECK_OK(dit_file_read(mp, 1 << 26, &raw, &rlen));
  CHECK_ERR(dit_store_put_manifest(st, id, raw, rlen, NULL, NULL), INVALID_ARGUMENT, "sha256");
  free(raw);
  free(text);
  dit_store_close(src);
  dit_store_close(st);
}

/* 8 processes import the same bundle into one store, and materialize it into one directory,
 * released together. */
static void test_concurrent(const char *bundle) {
  char root[CHECK_PATH_MAX], views[CHECK_PATH_MAX], p[CHECK_PATH_MAX];
  check_pathf(root, "%s/s4", g_root);
  check_pathf(views, "%s/cviews", g_root);
  const char *id = id_of(bundle);
  int go[2];
  CHECK(pipe(go) == 0);
  pid_t kids[8];
  for (int k = 0; k < 8; k++) {
    kids[k] = fork();
    if (kids[k] == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) != 1) _exit(3);
      dit_store_t *st = NULL;
      dit_status_t s = dit_store_open(root, &st);
      if (!s) s = dit_store_import_bundle(st, bundle, NULL);
      char *view = NULL;
      if (!s) s = dit_store_materialize(st, id, views, &view);
      if (!s) s = dit_store_materialize(st, id, NULL, &view);
      int rc = s ? 1 : 0;
      if (s) fprintf(stderr, "child %d: %s\n", k, dit_status_message(s));
      dit_status_free(s);
      free(view);
      dit_store_close(st);
      _exit(rc);
    }
  }
  close(go[0]);
  char release[8] = {0};
  CHECK(write(go[1], release, 8) == 8);
  close(go[1]);
  for (int k = 0; k < 8; k++) {
    int status = 0;
    CHECK(waitpid(kids[k], &status, 0) == kids[k]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  dit_store_t *st = NULL;
  CHECK_OK(dit_store_open(root, &st));
  if (!st) return;
  CHECK(dit_store_has_entry(st, id));
  check_pathf(p, "%s/ac", root);
  CHECK_EQ_INT(count_entries(p), 2); /* the manifest and its digest */
  check_pathf(p, "%s/tmp", root);
  CHECK_EQ_INT(count_entries(p), 0);
  CHECK_EQ_INT(count_entries(views), 1);
  check_pathf(p, "%s/bundles", root);
  CHECK_EQ_INT(count_entries(p), 1);
  check_pathf(p, "%s/%s", views, id);
  dit_bundle_t *b = NULL;
  CHECK_OK(dit_bundle_open(p, DIT_BUNDLE_HASH_BLOBS, &b));
  dit_bundle_close(b);
  dit_store_stats_t v;
  CHECK_OK(dit_store_verify(st, NULL, &v));
  CHECK_EQ_INT(v.bad_blobs, 0);
  CHECK_EQ_INT(v.bad_entries, 0);
  CHECK_EQ_INT(v.entries, 1);
  dit_store_close(st);
}

static void set_last_used(const char *root, const char *id, time_t t) {
  char p[CHECK_PATH_MAX];
  check_pathf(p, "%s/ac/%s", root, id);
  struct timespec ts[2] = {{t, 0}, {t, 0}};
  CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0);
}

static void test_verify_and_gc(void) {
  char root[CHECK_PATH_MAX], p[CHECK_PATH_MAX];
  check_pathf(root, "%s/s5", g_root);
  /* Two shapes: the weights blob is shared, each has its own plan. */
  char *a = compile_tiny(NULL, 9, root), *b = NULL;
  (void)a;
  free(a);
  a = compile_tiny(NULL, 9, root); /* a hit now */
  b = compile_tiny(NULL, 5, root);
  if (!a || !b) return;
  char ida[64], idb[64];
  snprintf(ida, sizeof ida, "%s", id_of(a));
  snprintf(idb, sizeof idb, "%s", id_of(b));
  dit_store_t *st = NULL;
  CHECK_OK(dit_store_open(root, &st));
  if (!st) return;
  dit_store_stats_t v;
  CHECK_OK(dit_store_verify(st, NULL, &v));
  CHECK_EQ_INT(v.blobs, 3);
  CHECK_EQ_INT(v.entries, 2);

  /* A damaged blob: verify reports it, removes it, and the entry is incomplete. */
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_store_get_manifest(st, ida, &m, NULL, NULL));
  const char *plan = NULL;
  uint64_t weights_size = 0, plan_size = 0;
  for (size_t i = 0; m && i < m->n_blobs; i++) {
    if (!strcmp(m->blobs[i].role, "plan")) plan = m->blobs[i].hash, plan_size = m->blobs[i].size;
    else weights_size = m->blobs[i].size;
  }
  char *pp = NULL;
  if (plan) CHECK_OK(dit_store_blob_path(st, plan, &pp));
  if (pp) {
    chmod(pp, 0644);
    int fd = open(pp, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "X", 1, 10) == 1);
    close(fd);
  }
  FILE *rep = tmpfile();
  CHECK_OK(dit_store_verify(st, rep, &v));
  CHECK_EQ_INT(v.bad_blobs, 1);
  CHECK_EQ_INT(v.bad_entries, 1);
  char buf[4096] = "";
  rewind(rep);
  size_t got = fread(buf, 1, sizeof buf - 1, rep);
  buf[got] = 0;
  fclose(rep);
  CHECK(strstr(buf, "content hash mismatch") && plan && strstr(buf, plan));
  CHECK(!dit_store_has_entry(st, ida));
  CHECK(dit_store_has_entry(st, idb));
  /* Compiling again repairs it. */
  free(a);
  a = compile_tiny(NULL, 9, root);
  CHECK(dit_store_has_entry(st, ida));
  CHECK_OK(dit_store_verify(st, NULL, &v));
  CHECK_EQ_INT(v.bad_blobs + v.bad_entries, 0);

  /* Size: b used long ago, a just now. A limit that fits one entry evicts b only; the shared
   * weights stay. */
  time_t now = time(NULL);
  set_last_used(root, idb, now - 3600);
  set_last_used(root, ida, now - 10);
  dit_store_stats_t g;
  CHECK_OK(dit_store_gc(st, weights_size + plan_size + 1, -1, &g));
  CHECK_EQ_INT(g.entries_removed, 1);
  CHECK_EQ_INT(g.blobs_removed, 1);
  CHECK_EQ_INT(g.entries, 1);
  CHECK(dit_store_has_entry(st, ida));
  CHECK(!dit_store_has_entry(st, idb));
  check_pathf(p, "%s/bundles/%s", root, idb);
  CHECK(!dit_path_exists(p));
  /* Age: a was used 10 s ago; 1 h keeps it, 5 s drops it and every blob. */
  CHECK_OK(dit_store_gc(st, 0, 3600, &g));
  CHECK_EQ_INT(g.entries_removed, 0);
  CHECK_OK(dit_store_gc(st, 0, 5, &g));
  CHECK_EQ_INT(g.entries_removed, 1);
  CHECK_EQ_INT(g.entries, 0);
  CHECK_EQ_INT(g.blobs, 0);
  check_pathf(p, "%s/cas", root);
  CHECK_OK(dit_store_verify(st, NULL, &v));
  CHECK_EQ_INT(v.blobs, 0);
  /* Stale temporaries go; an entry that no longer validates goes. */
  check_pathf(p, "%s/tmp/blob-leftover", root);
  CHECK_OK(dit_file_write_atomic(p, "x", 1));
  char fake[DIT_HASH_HEX];
  dit_hash128_hex("fake", 4, fake);
  check_pathf(p, "%s/ac/%s", root, fake);
  CHECK_OK(dit_file_write_atomic(p, "{}", 2));
  CHECK_OK(dit_store_gc(st, 0, -1, &g));
  CHECK_EQ_INT(g.entries_removed, 1);
  check_pathf(p, "%s/tmp", root);
  CHECK_EQ_INT(count_entries(p), 0);
  check_pathf(p, "%s/ac", root);
  CHECK_EQ_INT(count_entries(p), 0);
  CHECK_ERR(dit_store_remove(st, ida, &g), NOT_FOUND, ida);
  dit_manifest_free(m);
  free(pp);
  free(a);
  free(b);
  dit_store_close(st);
}

static void test_memo(void) {
  char root[CHECK_PATH_MAX], model[CHECK_PATH_MAX], cmd[3 * CHECK_PATH_MAX];
  check_pathf(root, "%s/s6", g_root);
  check_pathf(model, "%s/model", g_root);
  snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", g_model, model);
  CHECK(system(cmd) == 0);
  /* A checkpoint written a moment ago is not trusted to the memo yet (see RACY_NS). */
  char st_path[CHECK_PATH_MAX];
  check_pathf(st_path, "%s/diffusion_pytorch_model.safetensors", model);
  struct timespec old[2] = {{time(NULL) - 100, 0}, {time(NULL) - 100, 0}};
  CHECK(utimensat(AT_FDCWD, st_path, old, 0) == 0);
  dit_store_t *st = NULL;
  CHECK_OK(dit_store_open(root, &st));
  dit_model_t *m = NULL;
  CHECK_OK(dit_model_load(model, NULL, &m));
  if (!st || !m) return;
  char direct[33], h[33];
  int hit = -1;
  CHECK_OK(dit_model_weights_hash(m, direct));
  CHECK_OK(dit_compile_weights_hash(st, m, 0, h, &hit));
  CHECK_EQ_INT(hit, 0);
  CHECK(!strcmp(h, direct));
  CHECK_OK(dit_compile_weights_hash(st, m, 0, h, &hit));
  CHECK_EQ_INT(hit, 1);
  CHECK(!strcmp(h, direct));
  /* --rehash bypasses it. */
  CHECK_OK(dit_compile_weights_hash(st, m, 1, h, &hit));
  CHECK_EQ_INT(hit, 0);
  /* Any change of the file's stat tuple misses: a touch to another time. */
  struct timespec older[2] = {{time(NULL) - 200, 0}, {time(NULL) - 200, 0}};
  CHECK(utimensat(AT_FDCWD, st_path, older, 0) == 0);
  CHECK_OK(dit_compile_weights_hash(st, m, 0, h, &hit));
  CHECK_EQ_INT(hit, 0);
  CHECK(!strcmp(h, direct));
  dit_model_free(m);
  /* Rewritten with other content (the file replaced, a new inode): misses, new hash. */
  char *data = NULL;
  size_t n = 0;
  CHECK_OK(dit_file_read(st_path, 1 << 26, &data, &n));
  if (data && n > 200) data[n - 1] ^= 1;
  CHECK_OK(dit_file_write_atomic(st_path, data, n));
  free(data);
  CHECK(utimensat(AT_FDCWD, st_path, older, 0) == 0);
  CHECK_OK(dit_model_load(model, NULL, &m));
  if (m) {
    CHECK_OK(dit_compile_weights_hash(st, m, 0, h, &hit));
    CHECK_EQ_INT(hit, 0);
    CHECK(strcmp(h, direct) != 0);
    dit_model_free(m);
  }
  dit_store_close(st);
}

static void test_explain(void) {
  char root[CHECK_PATH_MAX];
  check_pathf(root, "%s/s7", g_root);
  free(compile_tiny(NULL, 9, root));
  dit_store_t *st = NULL;
  CHECK_OK(dit_store_open(root, &st));
  if (!st) return;
  dit_compile_options_t o;
  memset(&o, 0, sizeof o);
  o.model_dir = g_model;
  o.shape = (dit_shape_request_t){.batch = 1, .frames = 17, .height = 32, .width = 48, .text_len = 7, .dtype = DIT_F32};
  o.target = "cpu";
  o.store_dir = root;
  cJSON *inputs = NULL;
  char id[33];
  CHECK_OK(dit_compile_identity(&o, &inputs, id));
  FILE *f = tmpfile();
  CHECK_EQ_INT(dit_compile_explain(st, NULL, inputs, id, f), 1);
  char buf[8192] = "";
  rewind(f);
  size_t got = fread(buf, 1, sizeof buf - 1, f);
  buf[got] = 0;
  fclose(f);
  CHECK(strstr(buf, "shape.frames: 17 vs 9") != NULL);
  CHECK(strstr(buf, "shape.latent[1]: 5 vs 3") != NULL);
  CHECK(strstr(buf, "2 inputs differ") != NULL);
  if (!strstr(buf, "shape.frames: 17 vs 9")) fputs(buf, stderr);
  cJSON_Delete(inputs);
  dit_store_close(st);
}

int main(void) {
  const char *data = getenv("DIT_TEST_DATA");
  check_pathf(g_model, "%s/wan_tiny_a/model", data ? data : "tests/data");
  snprintf(g_root, sizeof g_root, "%s", check_tmpdir("test_store"));
  char plain[CHECK_PATH_MAX];
  check_pathf(plain, "%s/plain", g_root);
  char *bundle = compile_tiny(plain, 9, NULL);
  if (!bundle) return check_summary("test_store");
  test_import_and_views(bundle);
  test_blob_writer();
  test_manifest_order(bundle);
  test_concurrent(bundle);
  test_verify_and_gc();
  test_memo();
  test_explain();
  free(bundle);
  return check_summary("test_store");
}
