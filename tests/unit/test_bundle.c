/* Bundles on disk: write (in-memory and streamed blobs), publish atomically, open and map with
 * and without hashing; then every kind of damage (flipped, truncated and missing blobs, an
 * edited or flipped manifest, a renamed directory) must be refused with the right code and a
 * message naming the file, and concurrent or crashed writers must never leave a partial
 * bundle under its final name. */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "artifacts/bundle.h"
#include "artifacts/identity.h"
#include "check.h"

static char g_root[CHECK_PATH_MAX];

static char *read_all(const char *path, size_t *n) {
  char *t = NULL;
  dit_status_t s = dit_file_read(path, 1 << 26, &t, n);
  if (s) {
    fprintf(stderr, "read %s: %s\n", path, dit_status_message(s));
    dit_status_free(s);
    return NULL;
  }
  return t;
}

/* Plain, unsynced writes: the damage loops rewrite files thousands of times. */
static void write_all(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "write %s: %s\n", path, strerror(errno));
    exit(2);
  }
}

static void xor_byte(const char *path, size_t pos, unsigned char x) {
  FILE *f = fopen(path, "r+b");
  if (!f) {
    fprintf(stderr, "open %s: %s\n", path, strerror(errno));
    exit(2);
  }
  fseek(f, (long)pos, SEEK_SET);
  int c = fgetc(f);
  fseek(f, (long)pos, SEEK_SET);
  fputc(c ^ x, f);
  fclose(f);
}

static void sh(const char *fmt, const char *a, const char *b) {
  char cmd[9000];
  check_pathf(cmd, fmt, a, b);
  if (system(cmd) != 0) {
    fprintf(stderr, "command failed: %s\n", cmd);
    exit(2);
  }
}

/* Entries of dir: final bundles (not starting with '.') and leftover temporaries. */
static void count_entries(const char *dir, int *bundles, int *temps) {
  *bundles = *temps = 0;
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (!strncmp(e->d_name, ".tmp-", 5))
      (*temps)++;
    else if (e->d_name[0] != '.')
      (*bundles)++;
  }
  closedir(d);
}

/* ---- the bundle under test ---- */

enum { PLAN_SIZE = 1000, KERNELS_SIZE = 3001, WEIGHTS_SIZE = 12288 };

typedef struct {
  unsigned char plan[PLAN_SIZE], kernels[KERNELS_SIZE], weights[WEIGHTS_SIZE];
  char plan_hash[DIT_HASH_HEX], kernels_hash[DIT_HASH_HEX], weights_hash[DIT_HASH_HEX];
  char empty_hash[DIT_HASH_HEX];
} contents_t;

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (unsigned char)(seed >> 16);
  }
}

static void make_contents(contents_t *c) {
  fill(c->plan, PLAN_SIZE, 1);
  fill(c->kernels, KERNELS_SIZE, 2);
  fill(c->weights, WEIGHTS_SIZE, 3);
  dit_hash128_hex(c->plan, PLAN_SIZE, c->plan_hash);
  dit_hash128_hex(c->kernels, KERNELS_SIZE, c->kernels_hash);
  dit_hash128_hex(c->weights, WEIGHTS_SIZE, c->weights_hash);
  dit_hash128_hex("", 0, c->empty_hash);
}

static void tensor(dit_manifest_tensor_t *t, const char *name, dit_dtype_t dt, int64_t d0,
                   int64_t d1, uint64_t off) {
  t->name = strdup(name);
  t->dtype = dt;
  t->rank = 2;
  t->dims[0] = d0;
  t->dims[1] = d1;
  t->offset = off;
  t->nbytes = (uint64_t)(d0 * d1) * dit_dtype_size(dt);
}

/* The manifest for contents c; `variant` goes into inputs, so it changes the identity. */
static dit_manifest_t *make_manifest(const contents_t *c, int variant) {
  dit_manifest_t *m = calloc(1, sizeof *m);
  m->schema_major = DIT_SCHEMA_MAJOR;
  m->schema_minor = 0; /* one transformer: written as schema 1.0 */
  m->inputs = cJSON_CreateObject();
  cJSON_AddNumberToObject(m->inputs, "variant", variant);
  cJSON_AddStringToObject(m->inputs, "weights", c->weights_hash);
  cJSON *model = cJSON_AddObjectToObject(m->inputs, "model");
  cJSON_AddNumberToObject(model, "num_layers", 1);
  cJSON_AddNumberToObject(model, "eps", 1e-6);
  strcpy(m->family, "wan");
  strcpy(m->model_class, "WanTransformer3DModel");
  strcpy(m->variant, "tiny");
  strcpy(m->arch, "cpu");
  m->topology.world = m->topology.tp = m->topology.cp = m->topology.cfg = 1;
  strcpy(m->topology.cp_mode, "none");
  m->shape.batch = 1;
  m->shape.frames = 1;
  m->shape.height = m->shape.width = 16;
  m->shape.text_len = 8;
  m->shape.latent[0] = 16;
  m->shape.latent[1] = 1;
  m->shape.latent[2] = m->shape.latent[3] = 2;
  m->dtype = DIT_F32;
  m->n_blobs = 4;
  m->blobs = calloc(4, sizeof *m->blobs);
  const char *roles[] = {"plan", "kernels", "weights", "kernels"};
  const char *hashes[] = {c->plan_hash, c->kernels_hash, c->weights_hash, c->empty_hash};
  const uint64_t sizes[] = {PLAN_SIZE, KERNELS_SIZE, WEIGHTS_SIZE, 0};
  for (int i = 0; i < 4; i++) {
    strcpy(m->blobs[i].role, roles[i]);
    strcpy(m->blobs[i].hash, hashes[i]);
    m->blobs[i].size = sizes[i];
  }
  m->n_weights = 1;
  m->weights = calloc(1, sizeof *m->weights);
  strcpy(m->weights[0].blob, c->weights_hash);
  m->weights[0].tp_size = 1;
  m->weights[0].n_tensors = 3;
  m->weights[0].tensors = calloc(3, sizeof *m->weights[0].tensors);
  tensor(&m->weights[0].tensors[0], "proj.weight", DIT_F32, 32, 32, 0);
  tensor(&m->weights[0].tensors[1], "proj.bias", DIT_BF16, 1, 32, 4096);
  tensor(&m->weights[0].tensors[2], "norm.weight", DIT_F32, 1, 1024, 8192);
  m->n_ranks = 1;
  m->ranks = calloc(1, sizeof *m->ranks);
  strcpy(m->ranks[0].plan, c->plan_hash);
  strcpy(m->ranks[0].weights, c->weights_hash);
  m->arena_bytes = 65536;
  m->weight_bytes = WEIGHTS_SIZE;
  m->peak_bytes = 65536 + WEIGHTS_SIZE;
  return m;
}

/* Writes and publishes the bundle: plan and kernels from memory (kernels twice, to check
 * dedup), an empty blob, weights streamed in uneven pieces, and one blob the manifest does
 * not list (publish must drop it). */
static dit_status_t write_bundle(const char *store, const contents_t *c, int variant, char **out_path,
                                 int *out_existed) {
  dit_bundle_writer_t *w = NULL;
  DIT_RETURN_IF(dit_bundle_writer_create(store, &w));
  char h[DIT_HASH_HEX];
  uint64_t size = 0;
  dit_status_t s = dit_bundle_writer_add_blob(w, c->plan, PLAN_SIZE, h);
  if (!s && strcmp(h, c->plan_hash)) s = DIT_ERR(INTERNAL, "plan hash %s", h);
  if (!s) s = dit_bundle_writer_add_blob(w, c->kernels, KERNELS_SIZE, h);
  if (!s) s = dit_bundle_writer_add_blob(w, c->kernels, KERNELS_SIZE, h);
  if (!s && strcmp(h, c->kernels_hash)) s = DIT_ERR(INTERNAL, "kernels hash %s", h);
  if (!s) s = dit_bundle_writer_add_blob(w, NULL, 0, h);
  if (!s && strcmp(h, c->empty_hash)) s = DIT_ERR(INTERNAL, "empty hash %s", h);
  if (!s) s = dit_bundle_writer_add_blob(w, "orphan", 6, h);
  if (!s) s = dit_bundle_writer_blob_begin(w);
  for (size_t off = 0, step = 1; !s && off < WEIGHTS_SIZE; step = step * 2 + 3) {
    size_t n = step < WEIGHTS_SIZE - off ? step : WEIGHTS_SIZE - off;
    s = dit_bundle_writer_blob_append(w, c->weights + off, n);
    off += n;
  }
  if (!s) s = dit_bundle_writer_blob_end(w, h, &size);
  if (!s && (strcmp(h, c->weights_hash) || size != WEIGHTS_SIZE))
    s = DIT_ERR(INTERNAL, "streamed hash %s size %llu", h, (unsigned long long)size);
  dit_manifest_t *m = make_manifest(c, variant);
  if (!s) s = dit_bundle_writer_publish(w, m, "{\"host\":\"test\",\"pid\":1}", out_path, out_existed);
  dit_manifest_free(m);
  dit_bundle_writer_destroy(w);
  return s;
}

static void check_mapped(dit_bundle_t *b, const char *hash, const void *want, size_t n) {
  dit_mapping_t map;
  CHECK_OK(dit_bundle_map_blob(b, hash, &map));
  CHECK_EQ_INT(map.size, n);
  CHECK(n == 0 || (map.data && memcmp(map.data, want, n) == 0));
  dit_file_unmap(&map);
}

static char g_bundle[CHECK_PATH_MAX]; /* the published bundle */
static contents_t g_c;

static void test_write_and_open(void) {
  char store[CHECK_PATH_MAX];
  check_pathf(store, "%s/store", g_root);
  char *path = NULL;
  int existed = -1;
  CHECK_OK(write_bundle(store, &g_c, 1, &path, &existed));
  CHECK(path != NULL);
  CHECK_EQ_INT(existed, 0);
  if (!path) exit(1);
  check_pathf(g_bundle, "%s", path);

  /* Named by the identity of its inputs, containing exactly the listed blobs. */
  dit_manifest_t *m = make_manifest(&g_c, 1);
  char id[33];
  CHECK_OK(dit_identity_compute(m->inputs, id));
  dit_manifest_free(m);
  char want[CHECK_PATH_MAX];
  check_pathf(want, "%s/%s", store, id);
  CHECK(strcmp(path, want) == 0);
  int bundles, temps;
  count_entries(store, &bundles, &temps);
  CHECK_EQ_INT(bundles, 1);
  CHECK_EQ_INT(temps, 0);
  char blobs[CHECK_PATH_MAX];
  check_pathf(blobs, "%s/blobs", path);
  count_entries(blobs, &bundles, &temps);
  CHECK_EQ_INT(bundles, 4);
  CHECK_EQ_INT(temps, 0);
  char diag[CHECK_PATH_MAX];
  check_pathf(diag, "%s/diagnostics.json", path);
  CHECK(dit_path_exists(diag));
  free(path);

  for (int pass = 0; pass < 2; pass++) {
    dit_bundle_t *b = NULL;
    CHECK_OK(dit_bundle_open(g_bundle, pass ? DIT_BUNDLE_HASH_BLOBS : 0, &b));
    if (!b) continue;
    const dit_manifest_t *bm = dit_bundle_manifest(b);
    CHECK(strcmp(bm->identity, id) == 0);
    CHECK_EQ_INT(bm->n_blobs, 4);
    CHECK_EQ_INT(bm->weights[0].tensors[1].offset, 4096);
    CHECK(strcmp(dit_bundle_dir(b), g_bundle) == 0);
    check_mapped(b, g_c.plan_hash, g_c.plan, PLAN_SIZE);
    check_mapped(b, g_c.kernels_hash, g_c.kernels, KERNELS_SIZE);
    check_mapped(b, g_c.weights_hash, g_c.weights, WEIGHTS_SIZE);
    check_mapped(b, g_c.empty_hash, NULL, 0);
    dit_mapping_t map;
    CHECK_ERR(dit_bundle_map_blob(b, "ffffffffffffffffffffffffffffffff", &map), NOT_FOUND,
              "blob ffffffffffffffffffffffffffffffff is not listed");
    CHECK(map.data == NULL && map.size == 0);
    char orphan[33];
    dit_hash128_hex("orphan", 6, orphan);
    CHECK_ERR(dit_bundle_map_blob(b, orphan, &map), NOT_FOUND, "not listed");
    dit_bundle_close(b);
  }

  /* A trailing slash and a non-hash directory name are both fine. */
  char slash[CHECK_PATH_MAX], alias[CHECK_PATH_MAX];
  check_pathf(slash, "%s/", g_bundle);
  dit_bundle_t *b = NULL;
  CHECK_OK(dit_bundle_open(slash, 0, &b));
  dit_bundle_close(b);
  check_pathf(alias, "%s/latest", g_root);
  sh("cp -a '%s' '%s'", g_bundle, alias);
  b = NULL;
  CHECK_OK(dit_bundle_open(alias, DIT_BUNDLE_HASH_BLOBS, &b));
  dit_bundle_close(b);

  /* The same identity again: the first copy stays, ours is discarded. */
  struct stat before, after;
  CHECK(stat(g_bundle, &before) == 0);
  path = NULL;
  existed = -1;
  CHECK_OK(write_bundle(store, &g_c, 1, &path, &existed));
  CHECK_EQ_INT(existed, 1);
  CHECK(path && strcmp(path, g_bundle) == 0);
  free(path);
  CHECK(stat(g_bundle, &after) == 0);
  CHECK(before.st_ino == after.st_ino);
  count_entries(store, &bundles, &temps);
  CHECK_EQ_INT(bundles, 1);
  CHECK_EQ_INT(temps, 0);

  /* A different identity is a second bundle beside it. */
  path = NULL;
  CHECK_OK(write_bundle(store, &g_c, 2, &path, &existed));
  CHECK_EQ_INT(existed, 0);
  CHECK(path && strcmp(path, g_bundle) != 0);
  free(path);
  count_entries(store, &bundles, &temps);
  CHECK_EQ_INT(bundles, 2);
  CHECK_EQ_INT(temps, 0);
}

static void test_writer_errors(void) {
  char store[CHECK_PATH_MAX];
  check_pathf(store, "%s/werr", g_root);
  dit_bundle_writer_t *w = NULL;
  char h[DIT_HASH_HEX];
  uint64_t size;
  char *path = NULL;
  int existed;

  CHECK_OK(dit_bundle_writer_create(store, &w));
  CHECK_ERR(dit_bundle_writer_blob_append(w, "x", 1), FAILED_PRECONDITION, "no streamed blob is open");
  CHECK_ERR(dit_bundle_writer_blob_end(w, h, &size), FAILED_PRECONDITION, "no streamed blob is open");
  CHECK_OK(dit_bundle_writer_blob_begin(w));
  CHECK_ERR(dit_bundle_writer_blob_begin(w), FAILED_PRECONDITION, "a streamed blob is open");
  CHECK_OK(dit_bundle_writer_blob_append(w, "abc", 3));
  dit_manifest_t *m = make_manifest(&g_c, 3);
  CHECK_ERR(dit_bundle_writer_publish(w, m, NULL, &path, &existed), FAILED_PRECONDITION,
            "still open");
  CHECK_OK(dit_bundle_writer_blob_end(w, h, &size));
  CHECK_EQ_INT(size, 3);
  char abc[33];
  dit_hash128_hex("abc", 3, abc);
  CHECK(strcmp(h, abc) == 0);
  /* The manifest lists blobs never added. */
  CHECK_ERR(dit_bundle_writer_publish(w, m, NULL, &path, &existed), NOT_FOUND, "never added");
  CHECK(path == NULL);
  CHECK_OK(dit_bundle_writer_add_blob(w, g_c.plan, PLAN_SIZE, h));
  CHECK_OK(dit_bundle_writer_add_blob(w, g_c.kernels, KERNELS_SIZE, h));
  CHECK_OK(dit_bundle_writer_add_blob(w, g_c.weights, WEIGHTS_SIZE, h));
  CHECK_OK(dit_bundle_writer_add_blob(w, "", 0, h));
  /* A listed size that is not the blob's. */
  m->blobs[1].size = 7;
  CHECK_ERR(dit_bundle_writer_publish(w, m, NULL, &path, &existed), INVALID_ARGUMENT,
            "with size 7, but it has 3001 bytes");
  m->blobs[1].size = KERNELS_SIZE;
  /* A manifest the reader would refuse is never published. */
  m->weights[0].tensors[1].offset = 100;
  CHECK_ERR(dit_bundle_writer_publish(w, m, NULL, &path, &existed), INVALID_ARGUMENT,
            "field 'weights[0].tensors[1].offset': expected a multiple of 4096, found 100");
  m->weights[0].tensors[1].offset = 4096;
  cJSON_AddNumberToObject(m->inputs, "bad", 1.0 / 0.0);
  CHECK_ERR(dit_bundle_writer_publish(w, m, NULL, &path, &existed), INVALID_ARGUMENT, "non-finite");
  cJSON_DeleteItemFromObject(m->inputs, "bad");
  int bundles, temps;
  count_entries(store, &bundles, &temps);
  CHECK_EQ_INT(bundles, 0);
  CHECK_EQ_INT(temps, 1);
  /* After the failures above, a corrected manifest publishes. */
  CHECK_OK(dit_bundle_writer_publish(w, m, NULL, &path, &existed));
  CHECK_EQ_INT(existed, 0);
  CHECK_ERR(dit_bundle_writer_publish(w, m, NULL, NULL, NULL), FAILED_PRECONDITION, "already published");
  CHECK_ERR(dit_bundle_writer_add_blob(w, "x", 1, h), FAILED_PRECONDITION, "already published");
  dit_bundle_writer_destroy(w);
  count_entries(store, &bundles, &temps);
  CHECK_EQ_INT(bundles, 1);
  CHECK_EQ_INT(temps, 0);
  dit_bundle_t *b = NULL;
  CHECK_OK(dit_bundle_open(path, DIT_BUNDLE_HASH_BLOBS, &b));
  dit_bundle_close(b);
  CHECK(path && dit_is_dir(path)); /* destroying the writer after publish keeps the bundle */
  free(path);
  dit_manifest_free(m);

  /* Destroy without publish removes everything, an open stream included. */
  w = NULL;
  CHECK_OK(dit_bundle_writer_create(store, &w));
  CHECK_OK(dit_bundle_writer_add_blob(w, "x", 1, h));
  CHECK_OK(dit_bundle_writer_blob_begin(w));
  CHECK_OK(dit_bundle_writer_blob_append(w, "y", 1));
  count_entries(store, &bundles, &temps);
  CHECK_EQ_INT(temps, 1);
  dit_bundle_writer_destroy(w);
  count_entries(store, &bundles, &temps);
  CHECK_EQ_INT(temps, 0);
  dit_bundle_writer_destroy(NULL);

  /* A parent that is a file. */
  char file[CHECK_PATH_MAX];
  check_pathf(file, "%s/plainfile", g_root);
  write_all(file, "x", 1);
  w = (dit_bundle_writer_t *)1;
  CHECK_ERR(dit_bundle_writer_create(file, &w), IO, "plainfile");
  CHECK(w == NULL);
  CHECK_ERR(dit_bundle_writer_create("", &w), INVALID_ARGUMENT, "no parent directory");
}

/* ---- damage ---- */

static char g_work[CHECK_PATH_MAX]; /* a copy of the bundle under its own name, damaged and repaired */

static void blob_path(char *out, const char *hash) { check_pathf(out, "%s/blobs/%s", g_work, hash); }

static void test_flipped_blobs(void) {
  struct {
    const char *hash, *role;
    size_t size;
  } blobs[] = {{g_c.plan_hash, "plan", PLAN_SIZE},
               {g_c.kernels_hash, "kernels", KERNELS_SIZE},
               {g_c.weights_hash, "weights", WEIGHTS_SIZE}};
  for (size_t i = 0; i < 3; i++) {
    size_t pos[] = {0, 1, blobs[i].size / 2, 4096 % blobs[i].size, blobs[i].size - 1};
    for (size_t k = 0; k < sizeof pos / sizeof *pos; k++) {
      char p[CHECK_PATH_MAX], needle[CHECK_PATH_MAX];
      blob_path(p, blobs[i].hash);
      xor_byte(p, pos[k], 0x01);
      check_pathf(needle, "blobs/%s (role %s): content hash mismatch: expected %s, found ",
               blobs[i].hash, blobs[i].role, blobs[i].hash);
      dit_bundle_t *b = (dit_bundle_t *)1;
      CHECK_ERR(dit_bundle_open(g_work, DIT_BUNDLE_HASH_BLOBS, &b), DATA_LOSS, needle);
      CHECK(b == NULL);
      /* Without hashing at open the bundle opens (sizes are right), but the damaged blob is
       * never handed out; the others still are. */
      b = NULL;
      CHECK_OK(dit_bundle_open(g_work, 0, &b));
      if (b) {
        dit_mapping_t map = {(const uint8_t *)1, 1};
        CHECK_ERR(dit_bundle_map_blob(b, blobs[i].hash, &map), DATA_LOSS, needle);
        CHECK(map.data == NULL && map.size == 0);
        for (size_t j = 0; j < 3; j++) {
          if (j == i) continue;
          CHECK_OK(dit_bundle_map_blob(b, blobs[j].hash, &map));
          dit_file_unmap(&map);
        }
        /* Every mapping is checked, not only the first. */
        CHECK_ERR(dit_bundle_map_blob(b, blobs[i].hash, &map), DATA_LOSS, needle);
        dit_bundle_close(b);
      }
      /* Hashing the weights later: open passes a damaged weights blob and maps it unhashed, and
       * dit_bundle_check_blob refuses it; any other damaged blob still fails the open. */
      b = NULL;
      dit_status_t s = dit_bundle_open(g_work, DIT_BUNDLE_HASH_BLOBS | DIT_BUNDLE_HASH_LATER, &b);
      if (strcmp(blobs[i].role, "weights")) {
        CHECK_ERR(s, DATA_LOSS, needle);
      } else if (!s) {
        dit_mapping_t map = {0};
        CHECK_OK(dit_bundle_map_blob(b, blobs[i].hash, &map));
        CHECK_ERR(dit_bundle_check_blob(b, blobs[i].hash, &map), DATA_LOSS, needle);
        dit_file_unmap(&map);
        dit_bundle_close(b);
      } else {
        CHECK_OK(s);
      }
      xor_byte(p, pos[k], 0x01);
    }
  }
  /* Damage after a hashing open is past what open can see; a later open catches it. */
  dit_bundle_t *b = NULL;
  CHECK_OK(dit_bundle_open(g_work, DIT_BUNDLE_HASH_BLOBS, &b));
  if (b) {
    dit_mapping_t map = {0};
    CHECK_OK(dit_bundle_map_blob(b, g_c.weights_hash, &map));
    CHECK_OK(dit_bundle_check_blob(b, g_c.weights_hash, &map));
    CHECK_ERR(dit_bundle_check_blob(b, g_c.plan_hash, &map), DATA_LOSS, "size mismatch");
    CHECK_ERR(dit_bundle_check_blob(b, "00000000000000000000000000000000", &map), NOT_FOUND, "not listed");
    dit_file_unmap(&map);
  }
  dit_bundle_close(b);
}

static void test_sizes_and_missing(void) {
  char p[CHECK_PATH_MAX], tmp[CHECK_PATH_MAX], needle[CHECK_PATH_MAX];
  size_t n;
  blob_path(p, g_c.weights_hash);
  char *orig = read_all(p, &n);
  /* Truncated. */
  write_all(p, orig, n - 1);
  check_pathf(needle,
           "blobs/%s (role weights): size mismatch: expected 12288 bytes, found 12287", g_c.weights_hash);
  dit_bundle_t *b = NULL;
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), DATA_LOSS, needle);
  CHECK_ERR(dit_bundle_open(g_work, DIT_BUNDLE_HASH_BLOBS, &b), DATA_LOSS, needle);
  /* Grown. */
  char *big = malloc(n + 1);
  memcpy(big, orig, n);
  big[n] = 0;
  write_all(p, big, n + 1);
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), DATA_LOSS, "found 12289");
  free(big);
  /* Emptied. */
  write_all(p, "", 0);
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), DATA_LOSS, "expected 12288 bytes, found 0");
  write_all(p, orig, n);
  free(orig);
  CHECK_OK(dit_bundle_open(g_work, DIT_BUNDLE_HASH_BLOBS, &b));
  dit_bundle_close(b);

  /* Missing, for each blob in turn, including the empty one. */
  const char *hashes[] = {g_c.plan_hash, g_c.kernels_hash, g_c.weights_hash, g_c.empty_hash};
  const char *roles[] = {"plan", "kernels", "weights", "kernels"};
  for (int i = 0; i < 4; i++) {
    blob_path(p, hashes[i]);
    check_pathf(tmp, "%s/moved", g_root);
    CHECK(rename(p, tmp) == 0);
    check_pathf(needle, "blobs/%s (role %s): missing", hashes[i], roles[i]);
    b = (dit_bundle_t *)1;
    CHECK_ERR(dit_bundle_open(g_work, 0, &b), NOT_FOUND, needle);
    CHECK(b == NULL);
    CHECK(rename(tmp, p) == 0);
  }
  /* Opened fine, then a blob disappears: mapping it fails cleanly. */
  b = NULL;
  CHECK_OK(dit_bundle_open(g_work, DIT_BUNDLE_HASH_BLOBS, &b));
  blob_path(p, g_c.plan_hash);
  CHECK(rename(p, tmp) == 0);
  dit_mapping_t map;
  CHECK_ERR(dit_bundle_map_blob(b, g_c.plan_hash, &map), NOT_FOUND, "(role plan): missing");
  CHECK(rename(tmp, p) == 0);
  dit_bundle_close(b);
  /* A directory where a blob should be. */
  blob_path(p, g_c.empty_hash);
  CHECK(unlink(p) == 0);
  CHECK(mkdir(p, 0755) == 0);
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), DATA_LOSS, "not a regular file");
  CHECK(rmdir(p) == 0);
  write_all(p, "", 0);
}

/* Replaces manifest.json and, if `digest`, its recorded hash, as a writer would. */
static void put_manifest(const char *text, int digest) {
  char p[CHECK_PATH_MAX];
  check_pathf(p, "%s/manifest.json", g_work);
  write_all(p, text, strlen(text));
  if (digest) {
    char d[34];
    dit_hash128_hex(text, strlen(text), d);
    d[32] = '\n';
    check_pathf(p, "%s/manifest.xxh128", g_work);
    write_all(p, d, 33);
  }
}

static char *replace(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  if (!at) {
    fprintf(stderr, "replace: '%s' not found\n", from);
    exit(2);
  }
  size_t n = strlen(text) - strlen(from) + strlen(to);
  char *out = malloc(n + 1);
  snprintf(out, n + 1, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  return out;
}

static void test_manifest_damage(void) {
  char mp[CHECK_PATH_MAX], dp[CHECK_PATH_MAX];
  check_pathf(mp, "%s/manifest.json", g_work);
  check_pathf(dp, "%s/manifest.xxh128", g_work);
  size_t n, dn;
  char *orig = read_all(mp, &n);
  char *orig_digest = read_all(dp, &dn);
  dit_bundle_t *b = NULL;

  /* A newer schema, written consistently by a newer ditc, or edited in place: either way
   * the version is what gets reported. */
  char *t = replace(orig, "\"major\": 1", "\"major\": 2");
  put_manifest(t, 1);
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), FAILED_PRECONDITION,
            "manifest.json: schema major 2 is newer than this build's 1");
  put_manifest(t, 0);
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), FAILED_PRECONDITION, "schema major 2 is newer");
  put_manifest(orig, 1);
  free(t);
  char newer[32], msg[96];
  snprintf(newer, sizeof newer, "\"minor\": %d", DIT_SCHEMA_MINOR + 1);
  snprintf(msg, sizeof msg, "schema 1.%d is newer than this build's 1.%d", DIT_SCHEMA_MINOR + 1, DIT_SCHEMA_MINOR);
  t = replace(orig, "\"minor\": 0", newer);
  put_manifest(t, 1);
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), FAILED_PRECONDITION, msg);
  free(t);

  /* Edited inputs: the recorded identity no longer matches. */
  t = replace(orig, "\"variant\":1", "\"variant\":7");
  put_manifest(t, 1);
  dit_manifest_t *m = make_manifest(&g_c, 7);
  char recomputed[33], needle[CHECK_PATH_MAX];
  CHECK_OK(dit_identity_compute(m->inputs, recomputed));
  dit_manifest_free(m);
  const char *base = strrchr(g_work, '/') + 1;
  check_pathf(needle, "manifest.json: identity mismatch: recorded %s, recomputed from inputs %s",
           base, recomputed);
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), DATA_LOSS, needle);
  put_manifest(orig, 1);
  put_manifest(t, 0); /* edited in place: still the identity that is reported */
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), DATA_LOSS, needle);
  /* ... and if the identity is edited too, the directory name still disagrees. */
  char *t2 = replace(t, base, recomputed);
  put_manifest(t2, 1);
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), DATA_LOSS, "identity mismatch: directory name");
  free(t2);
  free(t);
  /* A value only the digest covers, edited in place. */
  put_manifest(orig, 1);
  t = replace(orig, "\"arena_bytes\": 65536", "\"arena_bytes\": 65537");
  put_manifest(t, 0);
  check_pathf(needle, "manifest.json: content hash mismatch: expected %.32s (from manifest.xxh128), found ",
           orig_digest);
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), DATA_LOSS, needle);
  free(t);
  put_manifest(orig, 1);
  CHECK_OK(dit_bundle_open(g_work, 0, &b));
  dit_bundle_close(b);

  /* The digest file itself damaged or missing. */
  write_all(dp, "nothex\n", 7);
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), DATA_LOSS, "manifest.xxh128: expected 32 lowercase hex digits");
  unlink(dp);
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), NOT_FOUND, "manifest.xxh128");
  write_all(dp, orig_digest, dn);
  unlink(mp);
  CHECK_ERR(dit_bundle_open(g_work, 0, &b), NOT_FOUND, "manifest.json: cannot open");
  write_all(mp, orig, n);

  /* One flipped byte anywhere in manifest.json or its digest: always an error naming
   * manifest.json, never a crash. Which check fires depends on the byte (syntax, a field, the
   * identity, or for a value only the digest covers, the digest). */
  int failures_before = check_failures_, by_code[DIT_CODE_ABORTED + 1] = {0}, by_digest = 0;
  for (size_t pos = 0; pos < n; pos++) {
    static const unsigned char flips[] = {0x01, 0x20, 0x80};
    for (size_t f = 0; f < sizeof flips; f++) {
      xor_byte(mp, pos, flips[f]);
      b = NULL;
      dit_status_t s = dit_bundle_open(g_work, 0, &b);
      CHECK(s != DIT_OK && b == NULL);
      CHECK(strstr(dit_status_message(s), "manifest.json") != NULL);
      by_code[dit_status_code(s)]++;
      by_digest += strstr(dit_status_message(s), "content hash mismatch") != NULL;
      dit_status_free(s);
      xor_byte(mp, pos, flips[f]);
    }
    if (check_failures_ != failures_before) {
      fprintf(stderr, "  (flipped byte at offset %zu of manifest.json)\n", pos);
      break;
    }
  }
  printf("flipped manifest bytes: %zu refused (invalid %d, not found %d, out of range %d, "
         "data loss %d of which %d by the digest alone, precondition %d)\n",
         3 * n, by_code[DIT_CODE_INVALID_ARGUMENT], by_code[DIT_CODE_NOT_FOUND],
         by_code[DIT_CODE_OUT_OF_RANGE], by_code[DIT_CODE_DATA_LOSS], by_digest,
         by_code[DIT_CODE_FAILED_PRECONDITION]);
  CHECK(by_digest > 0);
  for (size_t pos = 0; pos < dn; pos++) {
    xor_byte(dp, pos, 0x01);
    dit_status_t s = dit_bundle_open(g_work, 0, &b);
    CHECK(s != DIT_OK && dit_status_code(s) == DIT_CODE_DATA_LOSS);
    dit_status_free(s);
    xor_byte(dp, pos, 0x01);
  }

  /* The same flips with the digest rewritten to match (a consistent but hostile manifest):
   * the parser and the identity check must cope with every one of them. Most are refused;
   * some change a value that only the digest covers, and open then succeeds. */
  int refused = 0, accepted = 0;
  for (size_t pos = 0; pos < n; pos++) {
    char *x = strdup(orig);
    x[pos] ^= 0x01;
    if (!x[pos]) x[pos] = ' ';
    put_manifest(x, 1);
    b = NULL;
    dit_status_t s = dit_bundle_open(g_work, DIT_BUNDLE_HASH_BLOBS, &b);
    if (s) {
      CHECK(b == NULL);
      CHECK(dit_status_code(s) != DIT_CODE_OK && dit_status_message(s)[0]);
      refused++;
    } else {
      CHECK(b != NULL);
      accepted++;
    }
    dit_status_free(s);
    dit_bundle_close(b);
    free(x);
  }
  printf("consistent single-bit manifest edits: %d refused, %d accepted\n", refused, accepted);
  CHECK(refused > accepted);
  put_manifest(orig, 1);
  write_all(dp, orig_digest, dn);
  CHECK_OK(dit_bundle_open(g_work, DIT_BUNDLE_HASH_BLOBS, &b));
  dit_bundle_close(b);
  free(orig);
  free(orig_digest);
}

static void test_renamed(void) {
  char other[CHECK_PATH_MAX], ren[CHECK_PATH_MAX];
  check_pathf(other, "%s/ren", g_root);
  CHECK(mkdir(other, 0755) == 0);
  /* Another 32-hex name: that name promises another bundle. */
  check_pathf(ren, "%s/0123456789abcdef0123456789abcdef", other);
  sh("cp -a '%s' '%s'", g_work, ren);
  dit_bundle_t *b = NULL;
  CHECK_ERR(dit_bundle_open(ren, 0, &b), DATA_LOSS,
            "identity mismatch: directory name 0123456789abcdef0123456789abcdef, manifest identity");
  /* Names that are not hashes say nothing. */
  check_pathf(ren, "%s/0123456789ABCDEF0123456789ABCDEF", other);
  sh("cp -a '%s' '%s'", g_work, ren);
  CHECK_OK(dit_bundle_open(ren, 0, &b));
  dit_bundle_close(b);

  /* A FIFO planted as manifest.json is refused, not opened (which would block forever). */
  char mp[CHECK_PATH_MAX], moved[CHECK_PATH_MAX];
  check_pathf(mp, "%s/manifest.json", ren);
  check_pathf(moved, "%s/manifest.moved", ren);
  CHECK(rename(mp, moved) == 0);
  CHECK(mkfifo(mp, 0644) == 0);
  CHECK_ERR(dit_bundle_open(ren, 0, &b), DATA_LOSS, "manifest.json: not a regular file");
  CHECK(unlink(mp) == 0);
  CHECK(rename(moved, mp) == 0);
  check_pathf(mp, "%s/manifest.xxh128", ren);
  CHECK(unlink(mp) == 0);
  CHECK(mkfifo(mp, 0644) == 0);
  CHECK_ERR(dit_bundle_open(ren, 0, &b), DATA_LOSS, "manifest.xxh128: not a regular file");

  CHECK_ERR(dit_bundle_open("/nonexistent/dir", 0, &b), NOT_FOUND, "/nonexistent/dir/manifest.json");
  CHECK_ERR(dit_bundle_open(g_work, 0x80, &b), INVALID_ARGUMENT, "unknown open flags");
  CHECK_ERR(dit_bundle_open("", 0, &b), INVALID_ARGUMENT, "no directory");
}

/* ---- concurrency and crashes ---- */

static void test_concurrent_publish(void) {
  enum { N = 8 };
  char store[CHECK_PATH_MAX];
  check_pathf(store, "%s/race", g_root);
  CHECK_OK(dit_mkdirs(store, 0755));
  int gate[2];
  CHECK(pipe(gate) == 0);
  pid_t pids[N];
  for (int i = 0; i < N; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      close(gate[1]);
      char c;
      /* All start together once the parent closes the pipe. */
      if (read(gate[0], &c, 1) < 0) _exit(3);
      char *path = NULL;
      int existed = -1;
      dit_status_t s = write_bundle(store, &g_c, 5, &path, &existed);
      if (s) {
        fprintf(stderr, "child %d: %s\n", i, dit_status_message(s));
        _exit(4);
      }
      free(path);
      _exit(existed ? 10 : 11);
    }
  }
  close(gate[0]);
  close(gate[1]);
  int won = 0, lost = 0;
  for (int i = 0; i < N; i++) {
    int st = 0;
    waitpid(pids[i], &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (code == 11)
      won++;
    else if (code == 10)
      lost++;
    else
      fprintf(stderr, "child %d: exit %d\n", i, code);
  }
  CHECK_EQ_INT(won, 1);
  CHECK_EQ_INT(lost, N - 1);
  int bundles, temps;
  count_entries(store, &bundles, &temps);
  CHECK_EQ_INT(bundles, 1);
  CHECK_EQ_INT(temps, 0);
  dit_manifest_t *m = make_manifest(&g_c, 5);
  char id[33], dir[CHECK_PATH_MAX];
  CHECK_OK(dit_identity_compute(m->inputs, id));
  dit_manifest_free(m);
  check_pathf(dir, "%s/%s", store, id);
  dit_bundle_t *b = NULL;
  CHECK_OK(dit_bundle_open(dir, DIT_BUNDLE_HASH_BLOBS, &b));
  dit_bundle_close(b);
  char blobs[CHECK_PATH_MAX];
  check_pathf(blobs, "%s/blobs", dir);
  count_entries(blobs, &bundles, &temps);
  CHECK_EQ_INT(bundles, 4);
}

/* A writer that dies at any point before its rename leaves only a .tmp-* directory, which
 * no reader looks at; the final name never exists half-written. */
static void test_crash(void) {
  char store[CHECK_PATH_MAX];
  check_pathf(store, "%s/crash", g_root);
  for (int stage = 0; stage < 4; stage++) {
    pid_t pid = fork();
    if (pid == 0) {
      dit_bundle_writer_t *w = NULL;
      char h[DIT_HASH_HEX];
      uint64_t size;
      if (dit_bundle_writer_create(store, &w)) _exit(3);
      if (stage == 0) _exit(0);
      if (dit_bundle_writer_add_blob(w, g_c.plan, PLAN_SIZE, h)) _exit(3);
      if (dit_bundle_writer_blob_begin(w)) _exit(3);
      if (dit_bundle_writer_blob_append(w, g_c.weights, 5000)) _exit(3);
      if (stage == 1) _exit(0);
      if (dit_bundle_writer_blob_append(w, g_c.weights + 5000, WEIGHTS_SIZE - 5000)) _exit(3);
      if (dit_bundle_writer_blob_end(w, h, &size)) _exit(3);
      if (dit_bundle_writer_add_blob(w, g_c.kernels, KERNELS_SIZE, h)) _exit(3);
      if (stage == 2) _exit(0);
      if (dit_bundle_writer_add_blob(w, "", 0, h)) _exit(3);
      _exit(0); /* everything written, never published */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int bundles, temps;
    count_entries(store, &bundles, &temps);
    CHECK_EQ_INT(bundles, 0);
    CHECK_EQ_INT(temps, stage + 1);
  }
  /* Leftover temporaries do not get in the way of a real publish. */
  char *path = NULL;
  int existed = -1;
  CHECK_OK(write_bundle(store, &g_c, 1, &path, &existed));
  CHECK_EQ_INT(existed, 0);
  dit_bundle_t *b = NULL;
  CHECK_OK(dit_bundle_open(path, DIT_BUNDLE_HASH_BLOBS, &b));
  dit_bundle_close(b);
  free(path);
}

/* A two-expert bundle: transformer_2's plan and weights are blobs of their own, listed in the
 * experts section; opening checks them like every other blob, and their layout is found. */
static void test_two_experts(void) {
  contents_t c2;
  fill(c2.plan, PLAN_SIZE, 11);
  fill(c2.weights, WEIGHTS_SIZE, 13);
  dit_hash128_hex(c2.plan, PLAN_SIZE, c2.plan_hash);
  dit_hash128_hex(c2.weights, WEIGHTS_SIZE, c2.weights_hash);
  char store[CHECK_PATH_MAX];
  check_pathf(store, "%s/experts", g_root);
  dit_bundle_writer_t *w = NULL;
  char h[DIT_HASH_HEX];
  CHECK_OK(dit_bundle_writer_create(store, &w));
  CHECK_OK(dit_bundle_writer_add_blob(w, g_c.plan, PLAN_SIZE, h));
  CHECK_OK(dit_bundle_writer_add_blob(w, g_c.kernels, KERNELS_SIZE, h));
  CHECK_OK(dit_bundle_writer_add_blob(w, NULL, 0, h));
  CHECK_OK(dit_bundle_writer_add_blob(w, g_c.weights, WEIGHTS_SIZE, h));
  CHECK_OK(dit_bundle_writer_add_blob(w, c2.plan, PLAN_SIZE, h));
  CHECK_OK(dit_bundle_writer_add_blob(w, c2.weights, WEIGHTS_SIZE, h));
  dit_manifest_t *m = make_manifest(&g_c, 7);
  m->schema_minor = DIT_SCHEMA_MINOR_EXPERTS;
  m->blobs = realloc(m->blobs, 6 * sizeof *m->blobs);
  memset(&m->blobs[4], 0, 2 * sizeof *m->blobs);
  strcpy(m->blobs[4].role, "plan");
  strcpy(m->blobs[4].hash, c2.plan_hash);
  m->blobs[4].size = PLAN_SIZE;
  strcpy(m->blobs[5].role, "weights");
  strcpy(m->blobs[5].hash, c2.weights_hash);
  m->blobs[5].size = WEIGHTS_SIZE;
  m->n_blobs = 6;
  m->weights = realloc(m->weights, 2 * sizeof *m->weights);
  m->weights[1] = m->weights[0];
  m->weights[1].tensors = calloc(3, sizeof *m->weights[1].tensors);
  for (int i = 0; i < 3; i++) {
    m->weights[1].tensors[i] = m->weights[0].tensors[i];
    m->weights[1].tensors[i].name = strdup(m->weights[0].tensors[i].name);
  }
  strcpy(m->weights[1].blob, c2.weights_hash);
  m->n_weights = 2;
  dit_manifest_expert_t ex[2];
  dit_manifest_rank_t r2 = {0, "", ""};
  strcpy(r2.plan, c2.plan_hash);
  strcpy(r2.weights, c2.weights_hash);
  memset(ex, 0, sizeof ex);
  strcpy(ex[0].name, "transformer");
  ex[0].n_ranks = 1;
  ex[0].ranks = m->ranks;
  strcpy(ex[1].name, "transformer_2");
  ex[1].n_ranks = 1;
  ex[1].ranks = &r2;
  m->experts = ex;
  m->n_experts = 2;
  m->boundary_timestep = 875;
  char *path = NULL;
  int existed = -1;
  CHECK_OK(dit_bundle_writer_publish(w, m, NULL, &path, &existed));
  m->experts = NULL; /* on the stack */
  m->n_experts = 0;
  dit_manifest_free(m);
  dit_bundle_writer_destroy(w);
  if (!path) return;

  dit_bundle_t *b = NULL;
  CHECK_OK(dit_bundle_open(path, DIT_BUNDLE_HASH_BLOBS, &b));
  if (b) {
    const dit_manifest_t *bm = dit_bundle_manifest(b);
    CHECK_EQ_INT(bm->n_experts, 2);
    CHECK_EQ_INT(bm->schema_minor, 1);
    const dit_manifest_rank_t *rk = dit_manifest_expert_rank(bm, "transformer_2", 0);
    CHECK(rk && strcmp(rk->plan, c2.plan_hash) == 0 && strcmp(rk->weights, c2.weights_hash) == 0);
    CHECK(rk && dit_manifest_find_weights(bm, rk->weights) != NULL);
    if (rk) check_mapped(b, rk->weights, c2.weights, WEIGHTS_SIZE);
    CHECK(strcmp(dit_manifest_expert_rank(bm, NULL, 0)->plan, g_c.plan_hash) == 0);
    dit_bundle_close(b);
  }
  /* transformer_2's blobs are checked like the first expert's. */
  char p[CHECK_PATH_MAX], tmp[CHECK_PATH_MAX], needle[CHECK_PATH_MAX];
  check_pathf(p, "%s/blobs/%s", path, c2.weights_hash);
  check_pathf(tmp, "%s/moved2", g_root);
  CHECK(rename(p, tmp) == 0);
  check_pathf(needle, "blobs/%s (role weights): missing", c2.weights_hash);
  CHECK_ERR(dit_bundle_open(path, 0, &b), NOT_FOUND, needle);
  CHECK(rename(tmp, p) == 0);
  check_pathf(p, "%s/blobs/%s", path, c2.plan_hash);
  size_t n;
  char *orig = read_all(p, &n);
  orig[0] ^= 1;
  write_all(p, orig, n);
  check_pathf(needle, "blobs/%s (role plan)", c2.plan_hash);
  CHECK_ERR(dit_bundle_open(path, DIT_BUNDLE_HASH_BLOBS, &b), DATA_LOSS, needle);
  free(orig);
  free(path);
}

int main(void) {
  check_pathf(g_root, "%s", check_tmpdir("test_bundle"));
  make_contents(&g_c);
  test_write_and_open();
  test_writer_errors();

  const char *id = strrchr(g_bundle, '/') + 1;
  char wdir[CHECK_PATH_MAX];
  check_pathf(wdir, "%s/work", g_root);
  CHECK(mkdir(wdir, 0755) == 0);
  check_pathf(g_work, "%s/%s", wdir, id);
  sh("cp -a '%s' '%s'", g_bundle, g_work);
  test_flipped_blobs();
  test_sizes_and_missing();
  test_manifest_damage();
  test_renamed();
  test_concurrent_publish();
  test_crash();
  test_two_experts();
  return check_summary("test_bundle");
}
