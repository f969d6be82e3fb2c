/* safetensors: writer/reader round trips, the Python package's output, sharded checkpoints
 * and directories, and every malformed header refused with its code and a useful message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/safetensors.h"
#include "base/fileio.h"
#include "check.h"

/* ---- helpers ----------------------------------------------------------------------------- */

/* An image of header length, header and data, in a heap buffer of exactly that size so ASan
 * sees any read past it. */
static uint8_t *make_image(const char *header, const void *data, size_t ndata, size_t *out_size) {
  size_t h = strlen(header);
  uint8_t *img = malloc(8 + h + ndata + 1);
  for (int i = 0; i < 8; i++) img[i] = (uint8_t)((uint64_t)h >> (8 * i));
  memcpy(img + 8, header, h);
  if (ndata) memcpy(img + 8 + h, data, ndata);
  *out_size = 8 + h + ndata;
  return img;
}

/* Parses header + ndata zero bytes as "bad.safetensors"; returns the status. */
static dit_status_t parse_header(const char *header, size_t ndata) {
  uint8_t zeros[256] = {0};
  size_t size;
  uint8_t *img = make_image(header, zeros, ndata, &size);
  dit_safetensors_t *st = NULL;
  dit_status_t s = dit_safetensors_parse(img, size, "bad.safetensors", &st);
  if (!s && !st) s = DIT_ERR(INTERNAL, "parse succeeded without a result");
  dit_safetensors_close(st);
  free(img);
  return s;
}

static dit_status_t parse_raw(const uint8_t *bytes, size_t size) {
  uint8_t *copy = malloc(size ? size : 1);
  if (size) memcpy(copy, bytes, size);
  dit_safetensors_t *st = NULL;
  dit_status_t s = dit_safetensors_parse(copy, size, "bad.safetensors", &st);
  dit_safetensors_close(st);
  free(copy);
  return s;
}

static void write_image(const char *path, const char *header, const void *data, size_t ndata) {
  size_t size;
  uint8_t *img = make_image(header, data, ndata, &size);
  CHECK_OK(dit_file_write_atomic(path, img, size));
  free(img);
}

static void write_text(const char *path, const char *text) {
  CHECK_OK(dit_file_write_atomic(path, text, strlen(text)));
}

/* check_tmpdir returns a shared buffer; each test keeps its own copy. */
#define SCRATCH_DIR(var, name) \
  char var[4096];              \
  strcpy(var, check_tmpdir(name))

/* A few rotating buffers, enough for the paths one call needs at once. */
static char *path_in(const char *dir, const char *name) {
  static char buf[8][4096];
  static int next = 0;
  char *p = buf[next++ % 8];
  size_t a = strlen(dir), b = strlen(name);
  if (a + 1 + b >= sizeof buf[0]) {
    fprintf(stderr, "scratch path too long: %s/%s\n", dir, name);
    exit(2);
  }
  memcpy(p, dir, a);
  p[a] = '/';
  memcpy(p + a + 1, name, b + 1);
  return p;
}

static const char *test_data_dir(void) {
  const char *d = getenv("DIT_TEST_DATA");
  if (d) return d;
  /* Run by hand from the repository root rather than through ctest. */
  return dit_is_dir("tests/data") ? "tests/data" : "data";
}

/* Opens path, expecting success; returns NULL (and records a failure) otherwise. */
static dit_safetensors_t *open_ok(const char *path) {
  dit_safetensors_t *st = NULL;
  CHECK_OK(dit_safetensors_open(path, &st));
  return st;
}

static dit_status_t open_status(const char *path) {
  dit_safetensors_t *st = NULL;
  dit_status_t s = dit_safetensors_open(path, &st);
  dit_safetensors_close(st);
  return s;
}

/* ---- names ------------------------------------------------------------------------------- */

static void test_dtype_names(void) {
  CHECK(!strcmp(dit_st_dtype_name(DIT_F32), "F32"));
  CHECK(!strcmp(dit_st_dtype_name(DIT_BF16), "BF16"));
  CHECK(!strcmp(dit_st_dtype_name(DIT_F16), "F16"));
  CHECK(!strcmp(dit_st_dtype_name(DIT_I64), "I64"));
  CHECK(!strcmp(dit_st_dtype_name(DIT_I32), "I32"));
  CHECK(!strcmp(dit_st_dtype_name(DIT_DTYPE_COUNT), "?"));
}

/* ---- round trip -------------------------------------------------------------------------- */

typedef struct {
  char name[32];
  dit_dtype_t dtype;
  int rank;
  int64_t dims[DIT_MAX_RANK];
  size_t nbytes;
  uint8_t bytes[512];
} rt_case_t;

static void test_round_trip(void) {
  SCRATCH_DIR(dir, "st_round_trip");
  static const int64_t kShapes[][4] = {{0}, {5}, {2, 3}, {2, 0, 3}, {1, 2, 3, 2}};
  static const int kRanks[] = {0, 1, 2, 3, 4};
  enum { kCases = DIT_DTYPE_COUNT * 5 };
  static rt_case_t cases[kCases];
  int n = 0;
  for (int d = 0; d < DIT_DTYPE_COUNT; d++) {
    for (int r = 0; r < 5; r++, n++) {
      rt_case_t *c = &cases[n];
      /* Names whose order differs from the add order, to check the sort. */
      snprintf(c->name, sizeof c->name, "t%d.%s.r%d", 9 - r, dit_dtype_name((dit_dtype_t)d),
               kRanks[r]);
      c->dtype = (dit_dtype_t)d;
      c->rank = kRanks[r];
      size_t elems = 1;
      for (int k = 0; k < c->rank; k++) {
        c->dims[k] = kShapes[r][k];
        elems *= (size_t)kShapes[r][k];
      }
      c->nbytes = elems * dit_dtype_size(c->dtype);
      for (size_t b = 0; b < c->nbytes; b++) c->bytes[b] = (uint8_t)(b * 31 + (size_t)n * 7 + 1);
    }
  }
  dit_st_writer_t *w;
  CHECK_OK(dit_st_writer_create(&w));
  for (int i = n - 1; i >= 0; i--)
    CHECK_OK(dit_st_writer_add(w, cases[i].name, cases[i].dtype, cases[i].rank, cases[i].dims,
                               cases[i].bytes));
  CHECK_OK(dit_st_writer_set_metadata(w, "format", "pt"));
  CHECK_OK(dit_st_writer_set_metadata(w, "note", "first"));
  CHECK_OK(dit_st_writer_set_metadata(w, "note", "a \"quoted\"\nvalue"));
  const char *path = path_in(dir, "rt.safetensors");
  CHECK_OK(dit_st_writer_write(w, path));
  dit_st_writer_destroy(w);

  dit_safetensors_t *st = open_ok(path);
  if (!st) return;
  CHECK_EQ_INT(dit_safetensors_count(st), n);
  const dit_st_tensor_t *prev = NULL;
  for (size_t i = 0; i < dit_safetensors_count(st); i++) {
    const dit_st_tensor_t *t = dit_safetensors_at(st, i);
    if (prev) {
      CHECK(strcmp(prev->name, t->name) < 0);
      /* Data is contiguous in name order. */
      CHECK((const uint8_t *)prev->data + prev->nbytes == (const uint8_t *)t->data);
    }
    CHECK(!strcmp(t->file, path));
    CHECK(dit_safetensors_find(st, t->name) == t);
    prev = t;
  }
  for (int i = 0; i < n; i++) {
    const rt_case_t *c = &cases[i];
    const dit_st_tensor_t *t = dit_safetensors_find(st, c->name);
    CHECK(t != NULL);
    if (!t) continue;
    CHECK_EQ_INT(t->dtype, c->dtype);
    CHECK_EQ_INT(t->rank, c->rank);
    for (int k = 0; k < c->rank; k++) CHECK_EQ_INT(t->dims[k], c->dims[k]);
    CHECK_EQ_INT(t->nbytes, c->nbytes);
    CHECK(c->nbytes == 0 || memcmp(t->data, c->bytes, c->nbytes) == 0);
  }
  CHECK(dit_safetensors_find(st, "absent") == NULL);
  CHECK(dit_safetensors_find(st, "") == NULL);
  CHECK(dit_safetensors_at(st, (size_t)n) == NULL);
  dit_safetensors_close(st);

  /* Header framing: length a multiple of 8, metadata escaped, the later value kept. */
  char *bytes;
  size_t size;
  CHECK_OK(dit_file_read(path, 1 << 20, &bytes, &size));
  if (bytes) {
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = (h << 8) | (uint8_t)bytes[i];
    CHECK_EQ_INT(h % 8, 0);
    CHECK(h + 8 <= size);
    CHECK(bytes[8] == '{');
    CHECK(strstr(bytes + 8, "\"__metadata__\":{\"format\":\"pt\",\"note\":\"a \\\"quoted\\\"\\nvalue\"}"));
    CHECK(!strstr(bytes + 8, "first"));
    free(bytes);
  }

  /* An empty checkpoint is a valid file too. */
  CHECK_OK(dit_st_writer_create(&w));
  const char *empty = path_in(dir, "empty.safetensors");
  CHECK_OK(dit_st_writer_write(w, empty));
  dit_st_writer_destroy(w);
  st = open_ok(empty);
  CHECK_EQ_INT(dit_safetensors_count(st), 0);
  CHECK(dit_safetensors_find(st, "x") == NULL);
  dit_safetensors_close(st);
}

/* ---- the Python package's output --------------------------------------------------------- */

static void test_python_reference(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/safetensors/reference.safetensors", test_data_dir());
  dit_safetensors_t *st = open_ok(path);
  if (!st) return;
  CHECK_EQ_INT(dit_safetensors_count(st), 7);

  const dit_st_tensor_t *t = dit_safetensors_find(st, "a_i64");
  CHECK(t && t->dtype == DIT_I64 && t->rank == 1 && t->dims[0] == 3);
  if (t) {
    int64_t v[3];
    memcpy(v, t->data, sizeof v);
    CHECK_EQ_INT(v[0], (int64_t)1 << 40);
    CHECK_EQ_INT(v[1], -5);
    CHECK_EQ_INT(v[2], 7);
  }
  t = dit_safetensors_find(st, "b_f32");
  CHECK(t && t->dtype == DIT_F32 && t->rank == 2 && t->dims[0] == 2 && t->dims[1] == 3);
  if (t) {
    float v[6];
    memcpy(v, t->data, sizeof v);
    for (int i = 0; i < 6; i++) CHECK_NEAR(v[i], i * 0.5 - 1.0, 0);
  }
  t = dit_safetensors_find(st, "c_i32");
  CHECK(t && t->dtype == DIT_I32 && t->rank == 2 && t->nbytes == 16);
  if (t) {
    int32_t v[4];
    memcpy(v, t->data, sizeof v);
    CHECK(v[0] == 1 && v[1] == -2 && v[2] == 3 && v[3] == -4);
  }
  t = dit_safetensors_find(st, "d_bf16");
  CHECK(t && t->dtype == DIT_BF16 && t->rank == 2 && t->dims[0] == 2 && t->dims[1] == 1);
  if (t) {
    uint16_t v[2];
    memcpy(v, t->data, sizeof v);
    CHECK_NEAR(dit_bf16_to_f32(v[0]), 3.0, 0);
    CHECK_NEAR(dit_bf16_to_f32(v[1]), -0.5, 0);
  }
  t = dit_safetensors_find(st, "e_scalar");
  CHECK(t && t->dtype == DIT_BF16 && t->rank == 0 && t->nbytes == 2);
  if (t) {
    uint16_t v;
    memcpy(&v, t->data, 2);
    CHECK_NEAR(dit_bf16_to_f32(v), 2.5, 0);
  }
  t = dit_safetensors_find(st, "f_f16");
  CHECK(t && t->dtype == DIT_F16 && t->rank == 1 && t->dims[0] == 3);
  if (t) {
    uint16_t v[3];
    memcpy(v, t->data, sizeof v);
    CHECK_NEAR(dit_f16_to_f32(v[0]), 1.5, 0);
    CHECK_NEAR(dit_f16_to_f32(v[1]), -2.0, 0);
    CHECK_NEAR(dit_f16_to_f32(v[2]), 0.25, 0);
  }
  t = dit_safetensors_find(st, "g_empty");
  CHECK(t && t->dtype == DIT_F16 && t->rank == 2 && t->dims[0] == 0 && t->dims[1] == 3 &&
        t->nbytes == 0);

  /* Our writer, given the same tensors and metadata, must produce the same bytes. */
  dit_st_writer_t *w;
  CHECK_OK(dit_st_writer_create(&w));
  for (size_t i = 0; i < dit_safetensors_count(st); i++) {
    t = dit_safetensors_at(st, i);
    CHECK_OK(dit_st_writer_add(w, t->name, t->dtype, t->rank, t->dims, t->data));
  }
  CHECK_OK(dit_st_writer_set_metadata(w, "format", "pt"));
  SCRATCH_DIR(tmp, "st_python");
  const char *ours = path_in(tmp, "ours.safetensors");
  CHECK_OK(dit_st_writer_write(w, ours));
  dit_st_writer_destroy(w);
  dit_safetensors_close(st);
  char *a, *b;
  size_t na, nb;
  CHECK_OK(dit_file_read(path, 1 << 20, &a, &na));
  CHECK_OK(dit_file_read(ours, 1 << 20, &b, &nb));
  if (a && b) {
    CHECK_EQ_INT(na, nb);
    CHECK(na == nb && memcmp(a, b, na) == 0);
  }
  free(a);
  free(b);
}

/* ---- shards, indexes, directories -------------------------------------------------------- */

static void write_shard(const char *path, const char *const *names, int n, float base) {
  dit_st_writer_t *w;
  CHECK_OK(dit_st_writer_create(&w));
  for (int i = 0; i < n; i++) {
    float v[2] = {base + (float)i, -(base + (float)i)};
    int64_t dims[1] = {2};
    CHECK_OK(dit_st_writer_add(w, names[i], DIT_F32, 1, dims, v));
  }
  CHECK_OK(dit_st_writer_write(w, path));
  dit_st_writer_destroy(w);
}

static const char kShard1[] = "diffusion_pytorch_model-00001-of-00002.safetensors";
static const char kShard2[] = "diffusion_pytorch_model-00002-of-00002.safetensors";

/* Two shards (blocks.0.*, blocks.1.* interleaved across them) and a matching index. */
static void make_sharded(const char *dir, const char *index_name) {
  static const char *const s1[] = {"blocks.0.attn.weight", "blocks.1.ffn.weight"};
  static const char *const s2[] = {"blocks.0.ffn.weight", "proj_out.weight"};
  write_shard(path_in(dir, kShard1), s1, 2, 1.0f);
  write_shard(path_in(dir, kShard2), s2, 2, 10.0f);
  char index[2048];
  snprintf(index, sizeof index,
           "{\"metadata\": {\"total_size\": 32},\n \"weight_map\": {\n"
           "  \"blocks.0.attn.weight\": \"%s\",\n  \"blocks.0.ffn.weight\": \"%s\",\n"
           "  \"blocks.1.ffn.weight\": \"%s\",\n  \"proj_out.weight\": \"%s\"}}\n",
           kShard1, kShard2, kShard1, kShard2);
  write_text(path_in(dir, index_name), index);
}

static void check_sharded(dit_safetensors_t *st, const char *dir) {
  if (!st) return;
  CHECK_EQ_INT(dit_safetensors_count(st), 4);
  static const char *const order[] = {"blocks.0.attn.weight", "blocks.0.ffn.weight",
                                      "blocks.1.ffn.weight", "proj_out.weight"};
  for (size_t i = 0; i < 4 && i < dit_safetensors_count(st); i++)
    CHECK(!strcmp(dit_safetensors_at(st, i)->name, order[i]));
  const dit_st_tensor_t *t = dit_safetensors_find(st, "proj_out.weight");
  CHECK(t && strstr(t->file, kShard2) && !strncmp(t->file, dir, strlen(dir)));
  if (t) {
    float v[2];
    memcpy(v, t->data, sizeof v);
    CHECK_NEAR(v[0], 11.0, 0);
    CHECK_NEAR(v[1], -11.0, 0);
  }
  t = dit_safetensors_find(st, "blocks.1.ffn.weight");
  CHECK(t && strstr(t->file, kShard1));
}

static void test_sharded(void) {
  SCRATCH_DIR(dir, "st_sharded");
  make_sharded(dir, "diffusion_pytorch_model.safetensors.index.json");
  dit_safetensors_t *st = open_ok(path_in(dir, "diffusion_pytorch_model.safetensors.index.json"));
  check_sharded(st, dir);
  dit_safetensors_close(st);
  st = open_ok(dir);
  check_sharded(st, dir);
  dit_safetensors_close(st);

  /* Another name for the index: the directory's only index is taken over its shards. */
  SCRATCH_DIR(dir2, "st_sharded_other");
  make_sharded(dir2, "model.safetensors.index.json");
  st = open_ok(dir2);
  check_sharded(st, dir2);
  dit_safetensors_close(st);
}

static void test_directories(void) {
  float one = 1.0f;
  int64_t dims[1] = {1};
  dit_st_writer_t *w;
  CHECK_OK(dit_st_writer_create(&w));
  CHECK_OK(dit_st_writer_add(w, "x", DIT_F32, 1, dims, &one));

  SCRATCH_DIR(dir, "st_dir_single");
  CHECK_OK(dit_st_writer_write(w, path_in(dir, "model.safetensors")));
  dit_safetensors_t *st = open_ok(dir);
  CHECK(st && dit_safetensors_find(st, "x"));
  dit_safetensors_close(st);

  /* Two candidates and no index: refuse, naming both. */
  CHECK_OK(dit_st_writer_write(w, path_in(dir, "other.safetensors")));
  CHECK_ERR(open_status(dir), INVALID_ARGUMENT, "model.safetensors, other.safetensors");

  /* The diffusers name wins over any other candidate. */
  dit_st_writer_t *w2;
  CHECK_OK(dit_st_writer_create(&w2));
  CHECK_OK(dit_st_writer_add(w2, "preferred", DIT_F32, 1, dims, &one));
  CHECK_OK(dit_st_writer_write(w2, path_in(dir, "diffusion_pytorch_model.safetensors")));
  dit_st_writer_destroy(w2);
  st = open_ok(dir);
  CHECK(st && dit_safetensors_find(st, "preferred") && !dit_safetensors_find(st, "x"));
  dit_safetensors_close(st);

  SCRATCH_DIR(idx, "st_dir_two_indexes");
  write_text(path_in(idx, "a.safetensors.index.json"), "{\"weight_map\": {}}");
  write_text(path_in(idx, "b.safetensors.index.json"), "{\"weight_map\": {}}");
  CHECK_ERR(open_status(idx), INVALID_ARGUMENT,
            "a.safetensors.index.json, b.safetensors.index.json");

  SCRATCH_DIR(none, "st_dir_empty");
  write_text(path_in(none, "config.json"), "{}");
  CHECK_ERR(open_status(none), NOT_FOUND, "no *.safetensors");

  CHECK_ERR(open_status(path_in(none, "missing.safetensors")), NOT_FOUND, "missing.safetensors");
  dit_st_writer_destroy(w);
}

static void test_index_errors(void) {
  SCRATCH_DIR(dir, "st_index_errors");
  static const char *const ab[] = {"a", "b"};
  static const char *const bc[] = {"b", "c"};
  static const char *const c[] = {"c"};
  write_shard(path_in(dir, "s1.safetensors"), ab, 2, 1.0f);
  write_shard(path_in(dir, "s2.safetensors"), bc, 2, 2.0f);
  write_shard(path_in(dir, "s3.safetensors"), c, 1, 3.0f);
  char index[4096];
  strcpy(index, path_in(dir, "x.safetensors.index.json"));

  /* The same tensor in two shards. */
  write_text(index, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\","
                    " \"c\": \"s2.safetensors\"}}");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "tensor 'b' appears in two shards");

  write_text(index, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"missing.safetensors\"}}");
  CHECK_ERR(open_status(index), NOT_FOUND, "missing.safetensors");

  /* The index names a tensor its shard lacks. */
  write_text(index, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\","
                    " \"z\": \"s1.safetensors\"}}");
  CHECK_ERR(open_status(index), NOT_FOUND, "tensor 'z'");

  /* A shard holds a tensor the index does not list. */
  write_text(index, "{\"weight_map\": {\"a\": \"s1.safetensors\"}}");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "tensor 'b', which weight_map does not list");

  /* The index places a tensor in the wrong shard. */
  static const char *const d[] = {"d"};
  write_shard(path_in(dir, "s4.safetensors"), d, 1, 4.0f);
  write_text(index, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\","
                    " \"c\": \"s4.safetensors\", \"d\": \"s3.safetensors\"}}");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT,
            "/s4.safetensors, but it is in ");

  /* Escapes out of the index's directory. */
  write_text(index, "{\"weight_map\": {\"a\": \"../s1.safetensors\"}}");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "\"../s1.safetensors\" is not a plain file name");
  write_text(index, "{\"weight_map\": {\"a\": \"..\"}}");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "not a plain file name");
  write_text(index, "{\"weight_map\": {\"a\": \"/etc/passwd\"}}");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "not a plain file name");
  write_text(index, "{\"weight_map\": {\"a\": \"\"}}");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "not a plain file name");

  write_text(index, "{\"metadata\": {}}");
  CHECK_ERR(open_status(index), NOT_FOUND, "x.safetensors.index.json: field 'weight_map': missing");
  write_text(index, "{\"weight_map\": []}");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "field 'weight_map': expected an object, found an array");
  write_text(index, "{\"metadata\": 3, \"weight_map\": {}}");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "field 'metadata': expected an object, found a number");
  write_text(index, "{\"weight_map\": {\"a\": 1}}");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "field 'weight_map.a': expected a string, found a number");
  write_text(index, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"a\": \"s1.safetensors\"}}");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "field 'weight_map': duplicate key \"a\"");
  write_text(index, "{\"weight_map\": {");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "x.safetensors.index.json: not valid JSON: syntax error at line 1, column 17");
  write_text(index, "[]");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "x.safetensors.index.json: expected a JSON object at the top level, found an array");

  /* Names beyond what a manifest can list. */
  char *longname = malloc(4200);
  memset(longname, 'n', 4097);
  longname[4097] = 0;
  char *text = malloc(4400);
  snprintf(text, 4400, "{\"weight_map\": {\"%s\": \"s1.safetensors\"}}", longname);
  write_text(index, text);
  CHECK_ERR(open_status(index), OUT_OF_RANGE, "tensor name of 4097 bytes, expected at most 4096");
  memset(longname, 's', 300);
  longname[300] = 0;
  snprintf(text, 4400, "{\"weight_map\": {\"a\": \"%s\"}}", longname);
  write_text(index, text);
  CHECK_ERR(open_status(index), OUT_OF_RANGE, "field 'weight_map.a': expected at most 255 bytes, found 300");
  free(longname);
  free(text);
  /* Other members of the index are not ours to judge. */
  write_text(index, "{\"metadata\": {\"total_size\": 24}, \"format\": 1, \"weight_map\": "
                    "{\"a\": \"s1.safetensors\", \"b\": \"s1.safetensors\"}}");
  dit_safetensors_close(open_ok(index));

  /* A corrupt shard is reported with its own file name. */
  write_image(path_in(dir, "bad.safetensors"), "{\"a\":{\"dtype\":\"F64\",\"shape\":[1],"
              "\"data_offsets\":[0,8]}}", "\0\0\0\0\0\0\0\0", 8);
  write_text(index, "{\"weight_map\": {\"a\": \"bad.safetensors\"}}");
  CHECK_ERR(open_status(index), INVALID_ARGUMENT, "bad.safetensors: header: field 'a.dtype': expected one of F32");
}

/* ---- malformed single files -------------------------------------------------------------- */

static void test_framing_errors(void) {
  CHECK_ERR(parse_raw((const uint8_t *)"\x05\x00\x00", 3), DATA_LOSS,
            "bad.safetensors: truncated: 3 bytes");
  CHECK_ERR(parse_raw(NULL, 0), DATA_LOSS, "truncated: 0 bytes");
  static const uint8_t zero[10] = {0, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  CHECK_ERR(parse_raw(zero, sizeof zero), INVALID_ARGUMENT, "header length is 0");
  static const uint8_t past[10] = {0xe8, 0x03, 0, 0, 0, 0, 0, 0, '{', '}'};
  CHECK_ERR(parse_raw(past, sizeof past), DATA_LOSS,
            "header length 1000 runs past the end of the file (expected <= 2");
  static const uint8_t huge[10] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
  CHECK_ERR(parse_raw(huge, sizeof huge), OUT_OF_RANGE, "exceeds the limit of 104857600");
  static const uint8_t big[10] = {1, 0, 0x40, 6, 0, 0, 0, 0, '{', '}'};
  CHECK_ERR(parse_raw(big, sizeof big), OUT_OF_RANGE, "header length 104857601 exceeds");

  /* A truncated copy of a valid file. */
  size_t size;
  uint8_t *img = make_image("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                            "0123456789abcdef", 16, &size);
  CHECK_OK(parse_raw(img, size));
  CHECK_ERR(parse_raw(img, size - 1), OUT_OF_RANGE, "end is past the data buffer (expected end "
                                                    "<= 15, found 16)");
  CHECK_ERR(parse_raw(img, 20), DATA_LOSS, "truncated: header length");
  free(img);

  CHECK_ERR(parse_header("{\"a\":{\"dtype\":\"F32\",", 0), INVALID_ARGUMENT,
            "bad.safetensors: header: not valid JSON: syntax error at line 1, column 21");
  CHECK_ERR(parse_header("{} x", 0), INVALID_ARGUMENT, "header: not valid JSON: syntax error at line 1, column 4 (trailing data after the JSON value)");
  CHECK_OK(parse_header("{}  \n\t ", 0));
  CHECK_ERR(parse_header("[1, 2]", 0), INVALID_ARGUMENT, "header: expected a JSON object at the top level, "
                                                          "found an array");
  CHECK_ERR(parse_header("\"s\"", 0), INVALID_ARGUMENT, "header: expected a JSON object at the top level, found a string");
  CHECK_ERR(parse_header("{\"\xff\":1}", 0), INVALID_ARGUMENT, "not valid UTF-8 (byte 0xff at "
                                                               "offset 2)");
  CHECK_ERR(parse_header("{\"\xc0\x80\":1}", 0), INVALID_ARGUMENT, "not valid UTF-8");
  CHECK_ERR(parse_header("{\"\xed\xa0\x80\":1}", 0), INVALID_ARGUMENT, "not valid UTF-8");
  static const uint8_t nul[11] = {3, 0, 0, 0, 0, 0, 0, 0, '{', 0, '}'};
  CHECK_ERR(parse_raw(nul, sizeof nul), INVALID_ARGUMENT, "not valid UTF-8 (byte 0x00");
  CHECK_OK(parse_header("{\"caf\xc3\xa9\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}",
                        4));
}

static void test_entry_errors(void) {
#define T(body) "{\"blocks.0.x\":" body "}"
  CHECK_ERR(parse_header(T("7"), 0), INVALID_ARGUMENT,
            "bad.safetensors: header: field 'blocks.0.x': expected an object, found a number");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"data_offsets\":[0,4]}"), 4), NOT_FOUND,
            "field 'blocks.0.x.shape': missing");
  CHECK_ERR(parse_header(T("{\"shape\":[1],\"data_offsets\":[0,4]}"), 4), NOT_FOUND,
            "field 'blocks.0.x.dtype': missing");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1]}"), 4), NOT_FOUND,
            "field 'blocks.0.x.data_offsets': missing");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}"), 4),
            INVALID_ARGUMENT, "field 'blocks.0.x': unknown member \"x\"");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],"
                           "\"data_offsets\":[0,4]}"), 4),
            INVALID_ARGUMENT, "field 'blocks.0.x': duplicate key \"dtype\"");
  CHECK_ERR(parse_header(T("{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}"), 4),
            INVALID_ARGUMENT, "field 'blocks.0.x.dtype': expected a string, found a number");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}"), 8),
            INVALID_ARGUMENT,
            "bad.safetensors: header: field 'blocks.0.x.dtype': expected one of F32, BF16, F16, "
            "I64, I32, U8, BOOL, F8_E4M3, I8, found \"F64\"");
  CHECK_ERR(parse_header(T("{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}"), 4),
            INVALID_ARGUMENT, "found \"f32\"");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]}"), 4),
            INVALID_ARGUMENT, "field 'blocks.0.x.shape': expected an array, found an object");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":\"0,4\"}"), 4),
            INVALID_ARGUMENT, "field 'blocks.0.x.data_offsets': expected an array, found a string");

  /* Shape x element size against the byte range. */
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}"), 12),
            INVALID_ARGUMENT, "field 'blocks.0.x.data_offsets': shape [3] x 4 bytes (F32) needs 12 bytes, "
                              "but data_offsets [0, 8] span 8 (expected 12, found 8)");
  CHECK_ERR(parse_header(T("{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}"), 16),
            INVALID_ARGUMENT, "(expected 8, found 16)");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}"), 8),
            OUT_OF_RANGE, "field 'blocks.0.x.data_offsets': [0, 16]: end is past the data "
                          "buffer (expected end <= 8, found 16)");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[9,9]}"), 8),
            OUT_OF_RANGE, "end is past the data buffer");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}"), 8),
            INVALID_ARGUMENT, "field 'blocks.0.x.data_offsets': [8, 4]: begin is after end");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}"), 8),
            INVALID_ARGUMENT, "field 'blocks.0.x.data_offsets': expected 2 entries [begin, end], found 3");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.5]}"), 8),
            INVALID_ARGUMENT, "field 'blocks.0.x.data_offsets[1]': expected an integer, found 4.5");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}"), 8),
            OUT_OF_RANGE, "field 'blocks.0.x.data_offsets[0]': expected an integer in [0, 9007199254740991], found -4");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,\"4\"]}"), 8),
            INVALID_ARGUMENT, "field 'blocks.0.x.data_offsets[1]': expected an integer, found a string");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1],"
                           "\"data_offsets\":[18014398509481984,18014398509481988]}"), 8),
            OUT_OF_RANGE, "field 'blocks.0.x.data_offsets[0]': expected an integer in [0, 9007199254740991], found 18014398509481984");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e999]}"), 8),
            OUT_OF_RANGE, "field 'blocks.0.x.data_offsets[1]': number outside the range of a double");

  /* Shapes. */
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                           "\"data_offsets\":[0,4]}"), 4),
            OUT_OF_RANGE, "field 'blocks.0.x.shape': rank 9 exceeds the maximum 8");
  CHECK_OK(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1],"
                          "\"data_offsets\":[0,4]}"), 4));
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,4]}"), 4),
            OUT_OF_RANGE, "field 'blocks.0.x.shape[1]': expected an integer in [0, 9007199254740991], found -2");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}"), 4),
            INVALID_ARGUMENT, "field 'blocks.0.x.shape[0]': expected an integer, found 1.5");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,4]}"), 4),
            INVALID_ARGUMENT, "field 'blocks.0.x.shape[0]': expected an integer, found null");
  CHECK_ERR(parse_header(T("{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                           "\"data_offsets\":[0,4]}"), 4),
            OUT_OF_RANGE, "field 'blocks.0.x.shape': [4294967296, 4294967296] x 4 bytes overflows 64 bits");
  CHECK_ERR(parse_header(T("{\"dtype\":\"I64\",\"shape\":[4611686018427387904],"
                           "\"data_offsets\":[0,4]}"), 4),
            OUT_OF_RANGE, "field 'blocks.0.x.shape[0]': expected an integer in [0, 9007199254740991]");
  CHECK_ERR(parse_header(T("{\"dtype\":\"I64\",\"shape\":[4503599627370496,4096],"
                           "\"data_offsets\":[0,4]}"), 4),
            OUT_OF_RANGE, "overflows 64 bits");
  /* A zero dim makes the tensor empty whatever the others say. */
  CHECK_OK(parse_header(T("{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],"
                          "\"data_offsets\":[4,4]}"), 4));
#undef T

  /* Names and metadata. */
  CHECK_ERR(parse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8),
            INVALID_ARGUMENT, "bad.safetensors: header: field '(top level)': duplicate key \"a\"");
  CHECK_ERR(parse_header("{\"__metadata__\":{\"k\":1}}", 0), INVALID_ARGUMENT,
            "field '__metadata__.k': expected a string, found a number");
  CHECK_ERR(parse_header("{\"__metadata__\":[]}", 0), INVALID_ARGUMENT,
            "field '__metadata__': expected an object, found an array");
  CHECK_ERR(parse_header("{\"__metadata__\":{},\"__metadata__\":{}}", 0), INVALID_ARGUMENT,
            "field '(top level)': duplicate key \"__metadata__\"");
  CHECK_OK(parse_header("{\"__metadata__\":{\"format\":\"pt\"}}", 0));
  char *hdr = malloc(4200);
  size_t o = (size_t)snprintf(hdr, 4200, "{\"");
  memset(hdr + o, 'n', 4097);
  o += 4097;
  snprintf(hdr + o, 4200 - o, "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
  CHECK_ERR(parse_header(hdr, 4), OUT_OF_RANGE, "tensor name of 4097 bytes, expected at most 4096");
  memmove(hdr + 5, hdr + 4099, strlen(hdr + 4099) + 1); /* the same with a 3-byte name */
  CHECK_OK(parse_header(hdr, 4));
  free(hdr);
}

static void test_overlaps(void) {
  CHECK_ERR(parse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8),
            INVALID_ARGUMENT, "tensors 'a' (data_offsets [0, 8]) and 'b' (data_offsets [4, 8]) "
                              "overlap");
  /* Identical ranges. */
  CHECK_ERR(parse_header("{\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
            INVALID_ARGUMENT, "overlap");
  /* A long range covering a later one that its neighbour does not touch. */
  CHECK_ERR(parse_header("{\"big\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                         "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}}", 32),
            INVALID_ARGUMENT, "'big' (data_offsets [0, 32]) and 'b'");
  CHECK_ERR(parse_header("{\"big\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
                         "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[32,36]},"
                         "\"d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[20,24]}}", 36),
            INVALID_ARGUMENT, "'big' (data_offsets [0, 32]) and 'd'");
  /* Empty tensors own no bytes; gaps and unordered ranges are fine. */
  CHECK_OK(parse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                        "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[10,10]},"
                        "\"f\":{\"dtype\":\"F16\",\"shape\":[0,2],\"data_offsets\":[10,10]},"
                        "\"z\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 20));
}

static void test_writer_errors(void) {
  SCRATCH_DIR(dir, "st_writer_errors");
  dit_st_writer_t *w;
  CHECK_OK(dit_st_writer_create(&w));
  int64_t dims[DIT_MAX_RANK + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  float v = 1.0f;
  CHECK_ERR(dit_st_writer_add(w, "__metadata__", DIT_F32, 0, NULL, &v), INVALID_ARGUMENT,
            "'__metadata__' is reserved");
  CHECK_ERR(dit_st_writer_add(w, "x", DIT_DTYPE_COUNT, 0, NULL, &v), INVALID_ARGUMENT,
            "tensor 'x': unknown dtype");
  CHECK_ERR(dit_st_writer_add(w, "x", DIT_F32, DIT_MAX_RANK + 1, dims, &v), OUT_OF_RANGE,
            "tensor 'x': rank 9");
  CHECK_ERR(dit_st_writer_add(w, "x", DIT_F32, -1, dims, &v), OUT_OF_RANGE, "rank -1");
  int64_t neg[2] = {2, -1};
  CHECK_ERR(dit_st_writer_add(w, "x", DIT_F32, 2, neg, &v), OUT_OF_RANGE, "dims[1] is -1");
  int64_t large[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
  CHECK_ERR(dit_st_writer_add(w, "x", DIT_F32, 2, large, &v), OUT_OF_RANGE, "size overflows");
  CHECK_ERR(dit_st_writer_add(w, "x", DIT_F32, 1, dims, NULL), INVALID_ARGUMENT, "data is NULL");
  CHECK_ERR(dit_st_writer_add(w, "\xff", DIT_F32, 1, dims, &v), INVALID_ARGUMENT, "UTF-8");
  char longname[4098];
  memset(longname, 'n', 4097);
  longname[4097] = 0;
  CHECK_ERR(dit_st_writer_add(w, longname, DIT_F32, 1, dims, &v), OUT_OF_RANGE,
            "a tensor name of 4097 bytes, expected at most 4096");
  CHECK_ERR(dit_st_writer_set_metadata(w, "k", "\xc3"), INVALID_ARGUMENT, "UTF-8");
  int64_t zero[1] = {0};
  CHECK_OK(dit_st_writer_add(w, "empty", DIT_F32, 1, zero, NULL));
  CHECK_OK(dit_st_writer_add(w, "x", DIT_F32, 1, dims, &v));
  CHECK_OK(dit_st_writer_add(w, "x", DIT_F32, 1, dims, &v));
  const char *path = path_in(dir, "dup.safetensors");
  CHECK_ERR(dit_st_writer_write(w, path), INVALID_ARGUMENT, "tensor 'x' was added twice");
  CHECK(!dit_path_exists(path));
  dit_st_writer_destroy(w);

  /* Names that need JSON escapes survive a round trip. */
  CHECK_OK(dit_st_writer_create(&w));
  const char *odd = "a\"b\\c\nd\x01" "e/\xc3\xa9";
  CHECK_OK(dit_st_writer_add(w, odd, DIT_F32, 0, NULL, &v));
  path = path_in(dir, "odd.safetensors");
  CHECK_OK(dit_st_writer_write(w, path));
  dit_st_writer_destroy(w);
  dit_safetensors_t *st = open_ok(path);
  CHECK(st && dit_safetensors_count(st) == 1 && dit_safetensors_find(st, odd));
  dit_safetensors_close(st);
}

int main(void) {
  test_dtype_names();
  test_round_trip();
  test_python_reference();
  test_sharded();
  test_directories();
  test_index_errors();
  test_framing_errors();
  test_entry_errors();
  test_overlaps();
  test_writer_errors();
  return check_summary("test_safetensors");
}
