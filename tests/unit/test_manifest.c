/* manifest.json: a round trip through the serializer and parser keeps every field and gives
 * identical bytes, and every validation rule rejects its violation with the right code and a
 * message naming the field. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/identity.h"
#include "artifacts/image_processor.h"
#include "artifacts/manifest.h"
#include "base/json.h"
#include "check.h"

static void fake_hash(const char *seed, char out[DIT_HASH_HEX]) {
  dit_hash128_hex(seed, strlen(seed), out);
}

static void set_tensor(dit_manifest_tensor_t *t, const char *name, dit_dtype_t dt, int rank,
                       const int64_t *dims, uint64_t offset) {
  t->name = strdup(name);
  t->dtype = dt;
  t->rank = rank;
  uint64_t n = dit_dtype_size(dt);
  for (int i = 0; i < rank; i++) {
    t->dims[i] = dims[i];
    n *= (uint64_t)dims[i];
  }
  t->offset = offset;
  t->nbytes = n;
}

/* A tree of constant test text, read like any other JSON (base/json); the caller owns it. */
static cJSON *tree(const char *text) {
  dit_json_doc_t *doc = NULL;
  dit_status_t s = dit_json_parse(text, strlen(text), "test text", &doc);
  if (s) {
    fprintf(stderr, "%s\n", dit_status_message(s));
    abort();
  }
  cJSON *t = dit_json_doc_release(doc);
  dit_json_doc_free(doc);
  return t;
}

/* A small but complete manifest: tp 2 x cp 2 with shared weight shards, a rank-0 tensor, an
 * empty tensor and a name that needs escaping. Owned by the caller (dit_manifest_free). */
static dit_manifest_t *make_manifest(void) {
  dit_manifest_t *m = calloc(1, sizeof *m);
  m->schema_major = DIT_SCHEMA_MAJOR;
  m->schema_minor = DIT_SCHEMA_MINOR;
  m->inputs = tree(
      "{\"model\":{\"num_layers\":2,\"eps\":1e-6,\"_class_name\":\"WanTransformer3DModel\"},"
      "\"weights\":\"00112233445566778899aabbccddeeff\",\"dtype\":\"bf16\",\"ratio\":0.1}");
  strcpy(m->family, "wan");
  strcpy(m->model_class, "WanTransformer3DModel");
  strcpy(m->variant, "wan2.1");
  strcpy(m->arch, "sm_90");
  m->min_driver = 12040;
  m->topology.world = 4;
  m->topology.tp = 2;
  m->topology.cp = 2;
  m->topology.cfg = 1;
  strcpy(m->topology.cp_mode, "ring");
  m->shape.batch = 1;
  m->shape.frames = 5;
  m->shape.height = 64;
  m->shape.width = 96;
  m->shape.text_len = 16;
  int64_t lat[4] = {16, 2, 8, 12};
  memcpy(m->shape.latent, lat, sizeof lat);
  m->dtype = DIT_BF16;

  m->n_inputs = 2;
  m->io_inputs = calloc(2, sizeof *m->io_inputs);
  strcpy(m->io_inputs[0].name, "latent");
  m->io_inputs[0].dtype = DIT_F32;
  m->io_inputs[0].rank = 5;
  int64_t ld[5] = {1, 16, 2, 8, 12};
  memcpy(m->io_inputs[0].dims, ld, sizeof ld);
  strcpy(m->io_inputs[1].name, "timestep");
  m->io_inputs[1].dtype = DIT_I64;
  m->io_inputs[1].rank = 1;
  m->io_inputs[1].dims[0] = 1;
  m->n_outputs = 1;
  m->io_outputs = calloc(1, sizeof *m->io_outputs);
  m->io_outputs[0] = m->io_inputs[0];
  strcpy(m->io_outputs[0].name, "velocity");

  m->n_blobs = 4;
  m->blobs = calloc(4, sizeof *m->blobs);
  const char *roles[4] = {"plan", "weights", "weights", "kernels"};
  const uint64_t sizes[4] = {100, 12288, 4096, 0};
  for (int i = 0; i < 4; i++) {
    char seed[16];
    snprintf(seed, sizeof seed, "blob%d", i);
    strcpy(m->blobs[i].role, roles[i]);
    fake_hash(seed, m->blobs[i].hash);
    m->blobs[i].size = sizes[i];
  }

  strcpy(m->blobs[1].sha256, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  m->n_weights = 2;
  m->weights = calloc(2, sizeof *m->weights);
  dit_manifest_weights_t *w0 = &m->weights[0], *w1 = &m->weights[1];
  strcpy(w0->blob, m->blobs[1].hash);
  w0->tp_rank = 0;
  w0->tp_size = 2;
  w0->n_tensors = 3;
  w0->tensors = calloc(3, sizeof *w0->tensors);
  set_tensor(&w0->tensors[0], "blocks.0.attn1.to_q.weight", DIT_BF16, 2, (int64_t[]){64, 32}, 0);
  set_tensor(&w0->tensors[1], "blocks.0.attn1.to_q.bias", DIT_BF16, 1, (int64_t[]){64}, 4096);
  set_tensor(&w0->tensors[2], "scale", DIT_F32, 0, NULL, 8192);
  strcpy(w1->blob, m->blobs[2].hash);
  w1->tp_rank = 1;
  w1->tp_size = 2;
  w1->n_tensors = 2;
  w1->tensors = calloc(2, sizeof *w1->tensors);
  set_tensor(&w1->tensors[0], "we\"ird\\name\n\x01\xc3\xa9", DIT_F16, 2, (int64_t[]){0, 5}, 0);
  set_tensor(&w1->tensors[1], "blocks.0.attn1.to_q.weight", DIT_BF16, 2, (int64_t[]){32, 32}, 0);

  m->n_ranks = 4;
  m->ranks = calloc(4, sizeof *m->ranks);
  for (int r = 0; r < 4; r++) {
    m->ranks[r].rank = r;
    strcpy(m->ranks[r].plan, m->blobs[0].hash);
    strcpy(m->ranks[r].weights, m->blobs[1 + r % 2].hash);
  }
  m->arena_bytes = 1u << 20;
  m->weight_bytes = 16384;
  m->peak_bytes = (1u << 20) + 16384;
  m->summary = tree("{\"ops\":{\"matmul\":4,\"attention\":1},\"flops\":1.5e12}");
  return m;
}

static void check_same(const dit_manifest_t *a, const dit_manifest_t *b) {
  CHECK_EQ_INT(a->schema_major, b->schema_major);
  CHECK_EQ_INT(a->schema_minor, b->schema_minor);
  CHECK(strcmp(a->identity, b->identity) == 0);
  char *ia = NULL, *ib = NULL;
  CHECK_OK(dit_json_canonical(a->inputs, &ia));
  CHECK_OK(dit_json_canonical(b->inputs, &ib));
  CHECK(ia && ib && strcmp(ia, ib) == 0);
  free(ia);
  free(ib);
  CHECK(strcmp(a->family, b->family) == 0);
  CHECK(strcmp(a->model_class, b->model_class) == 0);
  CHECK(strcmp(a->variant, b->variant) == 0);
  CHECK(strcmp(a->arch, b->arch) == 0);
  CHECK_EQ_INT(a->min_driver, b->min_driver);
  CHECK_EQ_INT(a->topology.world, b->topology.world);
  CHECK_EQ_INT(a->topology.tp, b->topology.tp);
  CHECK_EQ_INT(a->topology.cp, b->topology.cp);
  CHECK_EQ_INT(a->topology.cfg, b->topology.cfg);
  CHECK(strcmp(a->topology.cp_mode, b->topology.cp_mode) == 0);
  CHECK_EQ_INT(a->shape.batch, b->shape.batch);
  CHECK_EQ_INT(a->shape.frames, b->shape.frames);
  CHECK_EQ_INT(a->shape.height, b->shape.height);
  CHECK_EQ_INT(a->shape.width, b->shape.width);
  CHECK_EQ_INT(a->shape.text_len, b->shape.text_len);
  for (int i = 0; i < 4; i++) CHECK_EQ_INT(a->shape.latent[i], b->shape.latent[i]);
  CHECK_EQ_INT(a->dtype, b->dtype);
  CHECK_EQ_INT(a->n_inputs, b->n_inputs);
  CHECK_EQ_INT(a->n_outputs, b->n_outputs);
  for (size_t i = 0; i < a->n_inputs && i < b->n_inputs; i++) {
    CHECK(strcmp(a->io_inputs[i].name, b->io_inputs[i].name) == 0);
    CHECK_EQ_INT(a->io_inputs[i].dtype, b->io_inputs[i].dtype);
    CHECK_EQ_INT(a->io_inputs[i].rank, b->io_inputs[i].rank);
    for (int d = 0; d < a->io_inputs[i].rank; d++)
      CHECK_EQ_INT(a->io_inputs[i].dims[d], b->io_inputs[i].dims[d]);
  }
  for (size_t i = 0; i < a->n_outputs && i < b->n_outputs; i++)
    CHECK(strcmp(a->io_outputs[i].name, b->io_outputs[i].name) == 0);
  CHECK_EQ_INT(a->n_blobs, b->n_blobs);
  for (size_t i = 0; i < a->n_blobs && i < b->n_blobs; i++) {
    CHECK(strcmp(a->blobs[i].role, b->blobs[i].role) == 0);
    CHECK(strcmp(a->blobs[i].hash, b->blobs[i].hash) == 0);
    CHECK_EQ_INT(a->blobs[i].size, b->blobs[i].size);
    CHECK(strcmp(a->blobs[i].sha256, b->blobs[i].sha256) == 0);
  }
  CHECK_EQ_INT(a->n_weights, b->n_weights);
  for (size_t i = 0; i < a->n_weights && i < b->n_weights; i++) {
    const dit_manifest_weights_t *x = &a->weights[i], *y = &b->weights[i];
    CHECK(strcmp(x->blob, y->blob) == 0);
    CHECK_EQ_INT(x->tp_rank, y->tp_rank);
    CHECK_EQ_INT(x->tp_size, y->tp_size);
    CHECK_EQ_INT(x->n_tensors, y->n_tensors);
    for (size_t j = 0; j < x->n_tensors && j < y->n_tensors; j++) {
      const dit_manifest_tensor_t *s = &x->tensors[j], *t = &y->tensors[j];
      CHECK(strcmp(s->name, t->name) == 0);
      CHECK_EQ_INT(s->dtype, t->dtype);
      CHECK_EQ_INT(s->rank, t->rank);
      for (int d = 0; d < s->rank; d++) CHECK_EQ_INT(s->dims[d], t->dims[d]);
      CHECK_EQ_INT(s->offset, t->offset);
      CHECK_EQ_INT(s->nbytes, t->nbytes);
    }
  }
  CHECK_EQ_INT(a->n_ranks, b->n_ranks);
  for (size_t i = 0; i < a->n_ranks && i < b->n_ranks; i++) {
    CHECK_EQ_INT(a->ranks[i].rank, b->ranks[i].rank);
    CHECK(strcmp(a->ranks[i].plan, b->ranks[i].plan) == 0);
    CHECK(strcmp(a->ranks[i].weights, b->ranks[i].weights) == 0);
  }
  CHECK_EQ_INT(a->arena_bytes, b->arena_bytes);
  CHECK_EQ_INT(a->weight_bytes, b->weight_bytes);
  CHECK_EQ_INT(a->peak_bytes, b->peak_bytes);
  CHECK((a->summary == NULL) == (b->summary == NULL));
}

static dit_status_t parse_text(const char *text) {
  dit_manifest_t *m = NULL;
  dit_status_t s = dit_manifest_parse(text, strlen(text), "manifest.json", &m);
  if (!s) CHECK(m != NULL);
  if (s) CHECK(m == NULL);
  dit_manifest_free(m);
  return s;
}

static char *g_base; /* the serialized make_manifest() */

/* Resolves "a.b[2].c" to its node. */
static cJSON *at(cJSON *root, const char *path) {
  cJSON *cur = root;
  const char *p = path;
  while (*p && cur) {
    if (*p == '.') p++;
    if (*p == '[') {
      int idx = atoi(p + 1);
      cur = cJSON_GetArrayItem(cur, idx);
      p = strchr(p, ']') + 1;
    } else {
      size_t n = strcspn(p, ".[");
      char key[128];
      snprintf(key, sizeof key, "%.*s", (int)n, p);
      cur = cJSON_GetObjectItemCaseSensitive(cur, key);
      p += n;
    }
  }
  return cur;
}

/* Applies edits (path, JSON text of the new value or NULL to delete; NULL path ends) to the
 * base manifest and returns the new text. An index past the end of an array appends. */
static char *edited(const char *path, ...) {
  cJSON *root = tree(g_base);
  va_list ap;
  va_start(ap, path);
  for (; path; path = va_arg(ap, const char *)) {
    const char *val = va_arg(ap, const char *);
    const char *cut = strrchr(path, '.');
    const char *br = strrchr(path, '[');
    if (br && (!cut || br > cut)) cut = br;
    char parent_path[128];
    size_t pl = cut ? (size_t)(cut - path) : 0;
    snprintf(parent_path, sizeof parent_path, "%.*s", (int)pl, path);
    cJSON *parent = pl ? at(root, parent_path) : root;
    if (!parent) {
      fprintf(stderr, "edited: no parent for %s\n", path);
      abort();
    }
    /* Raw items print verbatim: cJSON's own number printing is lossy near 2^53 and turns
     * infinity into null, which would hide exactly the values these tests are about. */
    cJSON *v = val ? cJSON_CreateRaw(val) : NULL;
    if (cut && *cut == '[') {
      int idx = atoi(cut + 1);
      if (v && idx >= cJSON_GetArraySize(parent))
        cJSON_AddItemToArray(parent, v);
      else if (v)
        cJSON_ReplaceItemInArray(parent, idx, v);
      else
        cJSON_DeleteItemFromArray(parent, idx);
    } else {
      const char *key = cut ? cut + 1 : path;
      if (!v)
        cJSON_DeleteItemFromObjectCaseSensitive(parent, key);
      else if (cJSON_GetObjectItemCaseSensitive(parent, key))
        cJSON_ReplaceItemInObjectCaseSensitive(parent, key, v);
      else
        cJSON_AddItemToObject(parent, key, v);
    }
  }
  va_end(ap);
  char *t = cJSON_Print(root);
  cJSON_Delete(root);
  return t;
}

#define EXPECT(CODE, needle, ...)                   \
  do {                                              \
    char *t_ = edited(__VA_ARGS__, NULL);           \
    CHECK_ERR(parse_text(t_), CODE, needle);        \
    cJSON_free(t_);                                 \
  } while (0)

/* m written, parsed back and written again: the two texts must be the same. Returns the parsed copy (NULL
 * when a step failed) and, when text is not NULL, the first text; the caller frees both. */
static dit_manifest_t *round_trip(const dit_manifest_t *m, char **text) {
  char *a = NULL, *b = NULL;
  dit_manifest_t *m2 = NULL;
  CHECK_OK(dit_manifest_to_json(m, &a));
  if (a) CHECK_OK(dit_manifest_parse(a, strlen(a), "manifest.json", &m2));
  if (m2) CHECK_OK(dit_manifest_to_json(m2, &b));
  CHECK(a && b && strcmp(a, b) == 0);
  free(b);
  if (text)
    *text = a;
  else
    free(a);
  return m2;
}

static void test_round_trip(void) {
  dit_manifest_t *m = make_manifest();
  CHECK_OK(dit_identity_compute(m->inputs, m->identity));
  char *t1 = NULL, *t2 = NULL, *t3 = NULL;
  CHECK_OK(dit_manifest_to_json(m, &t1));
  CHECK_OK(dit_manifest_to_json(m, &t3));
  CHECK(t1 && t3 && strcmp(t1, t3) == 0);
  free(t3);
  /* Shape of the text: fixed key order, two-space indentation, trailing newline, inputs in
   * canonical form. */
  CHECK(strncmp(t1, "{\n  \"format\": \"ditc-bundle\",\n  \"schema\": {\n    \"major\": 1,", 54) == 0);
  size_t n = strlen(t1);
  CHECK(n > 2 && t1[n - 1] == '\n' && t1[n - 2] == '}');
  CHECK(strstr(t1, "\"latent\": [16, 2, 8, 12]") != NULL);
  CHECK(strstr(t1, "\"sha256\": \"0123456789abcdef") != NULL);
  {
    const char *first = strstr(t1, "\"sha256\"");
    CHECK(first && !strstr(first + 1, "\"sha256\"")); /* only the blob that has one */
  }
  char *canon = NULL;
  CHECK_OK(dit_json_canonical(m->inputs, &canon));
  CHECK(strstr(t1, canon) != NULL);
  free(canon);
  const char *order[] = {"\"format\"", "\"schema\"", "\"identity\"", "\"inputs\"",
                         "\"model\"", "\"target\"", "\"topology\"", "\"shape\"",
                         "\"dtype\": \"bf16\"", "\"io\"", "\"blobs\"", "\"weights\": [",
                         "\"ranks\"", "\"memory\"", "\"summary\""};
  const char *prev = t1;
  for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
    const char *f = strstr(t1, order[i]);
    CHECK(f != NULL && f >= prev);
    if (f) prev = f;
  }

  dit_manifest_t *m2 = NULL;
  CHECK_OK(dit_manifest_parse(t1, n, "manifest.json", &m2));
  if (m2) {
    check_same(m, m2);
    CHECK_OK(dit_manifest_to_json(m2, &t2));
    CHECK(t2 && strcmp(t1, t2) == 0);
    /* Lookups. */
    CHECK(dit_manifest_find_blob(m2, m->blobs[2].hash) == &m2->blobs[2]);
    CHECK(dit_manifest_find_blob(m2, "ffffffffffffffffffffffffffffffff") == NULL);
    CHECK(dit_manifest_find_weights(m2, m->blobs[2].hash) == &m2->weights[1]);
    CHECK(dit_manifest_find_weights(m2, m->blobs[0].hash) == NULL);
    CHECK(strcmp(m2->weights[1].tensors[0].name, "we\"ird\\name\n\x01\xc3\xa9") == 0);
  }
  free(t2);
  dit_manifest_free(m2);

  /* Without a summary the key is left out and the result still round-trips. */
  cJSON_Delete(m->summary);
  m->summary = NULL;
  char *t4 = NULL, *t5 = NULL;
  CHECK_OK(dit_manifest_to_json(m, &t4));
  CHECK(t4 && !strstr(t4, "summary"));
  m2 = NULL;
  CHECK_OK(dit_manifest_parse(t4, strlen(t4), "manifest.json", &m2));
  if (m2) {
    CHECK(m2->summary == NULL);
    CHECK_OK(dit_manifest_to_json(m2, &t5));
    CHECK(t5 && strcmp(t4, t5) == 0);
  }
  free(t4);
  free(t5);
  dit_manifest_free(m2);

  /* Text parsed from any layout (tabs, other key order) serializes to the same bytes. */
  cJSON *j = tree(t1);
  char *tabbed = cJSON_Print(j);
  cJSON_Delete(j);
  m2 = NULL;
  CHECK_OK(dit_manifest_parse(tabbed, strlen(tabbed), "manifest.json", &m2));
  t2 = NULL;
  if (m2) CHECK_OK(dit_manifest_to_json(m2, &t2));
  CHECK(t2 && strcmp(t1, t2) == 0);
  free(t2);
  cJSON_free(tabbed);
  dit_manifest_free(m2);

  g_base = t1;
  dit_manifest_free(m);
}

static void test_serializer_errors(void) {
  dit_manifest_t *m = make_manifest();
  char *t = NULL;
  cJSON *in = m->inputs;
  m->inputs = NULL;
  CHECK_ERR(dit_manifest_to_json(m, &t), INVALID_ARGUMENT, "inputs must be a JSON object");
  m->inputs = cJSON_CreateArray();
  CHECK_ERR(dit_manifest_to_json(m, &t), INVALID_ARGUMENT, "inputs must be a JSON object");
  cJSON_Delete(m->inputs);
  m->inputs = in;
  cJSON *sum = m->summary;
  m->summary = cJSON_CreateNumber(1);
  CHECK_ERR(dit_manifest_to_json(m, &t), INVALID_ARGUMENT, "summary");
  cJSON_Delete(m->summary);
  m->summary = sum;
  char *name = m->weights[0].tensors[1].name;
  m->weights[0].tensors[1].name = NULL;
  CHECK_ERR(dit_manifest_to_json(m, &t), INVALID_ARGUMENT, "weights[0].tensors[1]: no name");
  m->weights[0].tensors[1].name = name;
  m->io_inputs[0].rank = 9;
  CHECK_ERR(dit_manifest_to_json(m, &t), INVALID_ARGUMENT, "rank 9");
  m->io_inputs[0].rank = 5;
  memset(m->arch, 'x', sizeof m->arch);
  CHECK_ERR(dit_manifest_to_json(m, &t), INVALID_ARGUMENT, "not terminated");
  strcpy(m->arch, "cpu");
  cJSON_AddNumberToObject(m->inputs, "bad", 1.0 / 0.0);
  CHECK_ERR(dit_manifest_to_json(m, &t), INVALID_ARGUMENT, "non-finite");
  CHECK(t == NULL);
  CHECK_ERR(dit_manifest_to_json(NULL, &t), INVALID_ARGUMENT, "no manifest");
  dit_manifest_free(m);
}

static void test_syntax(void) {
  dit_manifest_t *m = NULL;
  CHECK_ERR(dit_manifest_parse("", 0, "manifest.json", &m), INVALID_ARGUMENT, "not valid JSON");
  CHECK_ERR(dit_manifest_parse(NULL, 0, "manifest.json", &m), INVALID_ARGUMENT, "not valid JSON");
  CHECK_ERR(parse_text("{"), INVALID_ARGUMENT, "manifest.json: not valid JSON");
  CHECK_ERR(parse_text("{\n\"a\": 1,\n  ]"), INVALID_ARGUMENT, "syntax error at line 3");
  CHECK_ERR(parse_text("{} trailing"), INVALID_ARGUMENT, "not valid JSON");
  CHECK_ERR(parse_text("[]"), INVALID_ARGUMENT, "expected a JSON object at the top level, found an array");
  CHECK_ERR(parse_text("\"x\""), INVALID_ARGUMENT, "found a string");
  CHECK_ERR(dit_manifest_parse("{}\0{}", 5, "manifest.json", &m), INVALID_ARGUMENT,
            "NUL byte at offset 2");
  CHECK_ERR(parse_text("{}"), NOT_FOUND, "manifest.json: field 'format': missing");
  /* The caller's buffer need not be terminated. */
  char *copy = malloc(strlen(g_base));
  memcpy(copy, g_base, strlen(g_base));
  CHECK_OK(dit_manifest_parse(copy, strlen(g_base), NULL, &m));
  dit_manifest_free(m);
  m = NULL;
  CHECK_ERR(dit_manifest_parse(copy, strlen(g_base) - 3, "cut.json", &m), INVALID_ARGUMENT,
            "cut.json: not valid JSON");
  free(copy);
  /* Duplicate keys anywhere, even inside free-form sections. */
  char *dup = strdup(g_base);
  char *p = strstr(dup, "\"frames\"");
  memcpy(p, "\"height\"", 8);
  CHECK_ERR(parse_text(dup), INVALID_ARGUMENT, "field 'shape': duplicate key \"height\"");
  free(dup);
  EXPECT(INVALID_ARGUMENT, "field 'summary.ops': duplicate key",
         "summary.ops", "{\"a\":1,\"a\":2}");
  EXPECT(INVALID_ARGUMENT, "duplicate key", "inputs.model", "{\"a\":1,\"b\":{\"a\":1,\"a\":1}}");
  EXPECT(OUT_OF_RANGE, "field 'summary.flops': number outside the range", "summary.flops", "1e999");
  EXPECT(OUT_OF_RANGE, "field 'inputs.x[1]': number outside the range", "inputs.x", "[1, -1e400]");
  /* Nesting is bounded for the whole document, free-form members included. */
  char deep[200];
  memset(deep, '[', 70);
  memset(deep + 70, ']', 70);
  deep[140] = 0;
  EXPECT(OUT_OF_RANGE, "field 'summary.x", "summary.x", deep);
  EXPECT(OUT_OF_RANGE, "nested deeper than 64 levels", "summary.x", deep);
}

static void test_schema(void) {
  EXPECT(FAILED_PRECONDITION, "schema major 2 is newer than this build's 1", "schema.major", "2");
  EXPECT(FAILED_PRECONDITION, "schema major 0 is older than this build's 1", "schema.major", "0");
  EXPECT(FAILED_PRECONDITION, "schema 1.9 is newer than this build's 1.8", "schema.minor", "9");
  /* A newer major is reported even when the rest no longer looks like schema 1. */
  EXPECT(FAILED_PRECONDITION, "schema major 7", "schema.major", "7", "blobs", NULL, "weights",
         "{\"new\":1}", "surprise", "1");
  EXPECT(NOT_FOUND, "field 'schema.minor': missing", "schema.minor", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'schema.major': expected an integer, found a string",
         "schema.major", "\"1\"");
  EXPECT(INVALID_ARGUMENT, "field 'schema.major': expected an integer, found 1.5",
         "schema.major", "1.5");
  EXPECT(OUT_OF_RANGE, "field 'schema.major'", "schema.major", "-1");
  EXPECT(INVALID_ARGUMENT, "field 'schema': unknown member \"patch\"", "schema.patch", "0");
  EXPECT(INVALID_ARGUMENT, "field 'schema': expected an object, found an array", "schema", "[1,0]");
  EXPECT(INVALID_ARGUMENT, "field 'format': expected \"ditc-bundle\", found \"ggml\"", "format",
         "\"ggml\"");
}

/* topology.reuse (schema 1.3): written back as read (merge and cache_bytes, absent in the first 1.3
 * bundles, read as 1 and 0), and refused where it cannot apply. */
static void test_reuse(void) {
  const char *ok = "{\"mode\": \"ditango\", \"group\": 1, \"layers\": 3, \"copies\": 2, \"merge\": 1, \"cache_bytes\": 27648}";
  char *t = edited("topology.reuse", ok, NULL);
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_manifest_parse(t, strlen(t), "manifest.json", &m));
  cJSON_free(t);
  if (m) {
    CHECK_EQ_INT(m->topology.reuse_group, 1);
    CHECK_EQ_INT(m->topology.reuse_layers, 3);
    CHECK_EQ_INT(m->topology.reuse_copies, 2);
    CHECK_EQ_INT(m->topology.reuse_merge, 1);
    CHECK(m->topology.reuse_cache_bytes == 27648);
    char *back = NULL;
    CHECK_OK(dit_manifest_to_json(m, &back));
    CHECK(back && strstr(back, "\"reuse\": {\n      \"mode\": \"ditango\",\n      \"group\": 1,\n      \"layers\": 3,\n      \"copies\": 2,\n"
                               "      \"merge\": 1,\n      \"cache_bytes\": 27648\n    }"));
    free(back);
    dit_manifest_free(m);
  }
  t = edited("topology.reuse", "{\"mode\": \"ditango\", \"group\": 1, \"layers\": 3, \"copies\": 2}", NULL);
  m = NULL;
  CHECK_OK(dit_manifest_parse(t, strlen(t), "manifest.json", &m));
  cJSON_free(t);
  if (m) {
    CHECK_EQ_INT(m->topology.reuse_merge, 1);
    CHECK(m->topology.reuse_cache_bytes == 0);
    dit_manifest_free(m);
  }
  /* cp 2, groups of 1: one remote group, nothing to merge. */
  EXPECT(OUT_OF_RANGE, "topology.reuse.merge", "topology.reuse",
         "{\"mode\": \"ditango\", \"group\": 1, \"layers\": 3, \"copies\": 1, \"merge\": 2}");
  EXPECT(INVALID_ARGUMENT, "field 'topology.reuse': needs schema minor >= 3, found 1.2", "schema.minor", "2", "topology.reuse", ok);
  EXPECT(INVALID_ARGUMENT, "reuse needs cp_mode \"ring\" or \"usp\", found \"gather\"", "topology.cp_mode", "\"gather\"", "topology.reuse",
         ok);
  EXPECT(INVALID_ARGUMENT, "field 'topology.reuse.ulysses': a Ulysses degree needs cp_mode \"usp\", found \"ring\"", "topology.reuse",
         "{\"mode\": \"ditango\", \"group\": 1, \"ulysses\": 2, \"layers\": 3, \"copies\": 1}");
  EXPECT(INVALID_ARGUMENT, "field 'topology.reuse.group': expected a divisor of cp 2 leaving >= 2 groups, found 2", "topology.reuse",
         "{\"mode\": \"ditango\", \"group\": 2, \"layers\": 3, \"copies\": 1}");
  /* usp (cp 4, U 2): groups of the 2 ring members sharing a Ulysses index; U recorded and required. */
  const char *usp = "{\"mode\": \"ditango\", \"group\": 1, \"ulysses\": 2, \"layers\": 3, \"copies\": 2, \"merge\": 1, \"cache_bytes\": 9216}";
  t = edited("topology.tp", "1", "topology.cp", "4", "topology.cp_mode", "\"usp\"", "topology.reuse", usp, NULL);
  m = NULL;
  CHECK_OK(dit_manifest_parse(t, strlen(t), "manifest.json", &m));
  cJSON_free(t);
  if (m) {
    CHECK_EQ_INT(m->topology.reuse_group, 1);
    CHECK_EQ_INT(m->topology.reuse_ulysses, 2);
    char *back = NULL;
    CHECK_OK(dit_manifest_to_json(m, &back));
    CHECK(back && strstr(back, "\"group\": 1,\n      \"ulysses\": 2,\n      \"layers\": 3,"));
    free(back);
    dit_manifest_free(m);
  }
  EXPECT(NOT_FOUND, "field 'topology.reuse.ulysses': missing", "topology.tp", "1", "topology.cp", "4", "topology.cp_mode", "\"usp\"",
         "topology.reuse", ok);
  EXPECT(INVALID_ARGUMENT, "field 'topology.reuse.group': expected a divisor of the 2 ring members (cp 4 / ulysses 2) leaving >= 2 groups, found 2",
         "topology.tp", "1", "topology.cp", "4", "topology.cp_mode", "\"usp\"", "topology.reuse",
         "{\"mode\": \"ditango\", \"group\": 2, \"ulysses\": 2, \"layers\": 3, \"copies\": 1}");
  EXPECT(INVALID_ARGUMENT, "field 'topology.reuse.ulysses': expected a divisor of cp 4 leaving a ring of >= 2, found 4", "topology.tp", "1",
         "topology.cp", "4", "topology.cp_mode", "\"usp\"", "topology.reuse",
         "{\"mode\": \"ditango\", \"group\": 1, \"ulysses\": 4, \"layers\": 3, \"copies\": 1}");
  EXPECT(OUT_OF_RANGE, "topology.reuse.copies", "topology.reuse", "{\"mode\": \"ditango\", \"group\": 1, \"layers\": 3, \"copies\": 3}");
  EXPECT(INVALID_ARGUMENT, "topology.reuse.mode", "topology.reuse", "{\"mode\": \"other\", \"group\": 1, \"layers\": 3, \"copies\": 1}");
}

static void test_fields(void) {
  EXPECT(INVALID_ARGUMENT, "field '(top level)': unknown member \"extra\"", "extra", "1");
  EXPECT(NOT_FOUND, "field 'identity': missing", "identity", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'identity': expected 32 lowercase hex digits, found \"ABC",
         "identity", "\"ABCDEF0123456789ABCDEF0123456789\"");
  EXPECT(INVALID_ARGUMENT, "field 'identity': expected a string, found a number", "identity", "5");
  EXPECT(INVALID_ARGUMENT, "field 'inputs': expected an object, found an array", "inputs", "[]");
  EXPECT(NOT_FOUND, "field 'inputs': missing", "inputs", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'model.family': must not be empty", "model.family", "\"\"");
  EXPECT(OUT_OF_RANGE, "field 'model.class': expected at most 63 bytes, found 70", "model.class",
         "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"");
  EXPECT(INVALID_ARGUMENT, "field 'model': unknown member \"Class\"", "model.Class", "\"x\"");
  EXPECT(NOT_FOUND, "field 'target.arch': missing", "target.arch", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'target.arch': must not be empty", "target.arch", "\"\"");
  EXPECT(OUT_OF_RANGE, "field 'target.min_driver': expected an integer in [0, 9007199254740991], found -1",
         "target.min_driver", "-1");
  EXPECT(INVALID_ARGUMENT, "field 'topology.world': expected tp*cp*cfg = 4 (tp 2, cp 2, cfg 1), found 8",
         "topology.world", "8");
  EXPECT(OUT_OF_RANGE, "field 'topology.tp': expected an integer in [1, 65536], found 0",
         "topology.tp", "0");
  EXPECT(OUT_OF_RANGE, "field 'topology.cfg'", "topology.cfg", "100000");
  EXPECT(INVALID_ARGUMENT, "field 'topology.cp_mode': expected one of none, gather, ring, ulysses, usp, found \"spiral\"",
         "topology.cp_mode", "\"spiral\"");
  EXPECT(INVALID_ARGUMENT, "field 'topology.cp_mode': cp 2 needs a context-parallel mode",
         "topology.cp_mode", "\"none\"");
  EXPECT(INVALID_ARGUMENT, "field 'shape.latent': expected 4 entries [C, f, h, w], found 3",
         "shape.latent", "[1,2,3]");
  EXPECT(OUT_OF_RANGE, "field 'shape.latent[2]'", "shape.latent[2]", "-8");
  EXPECT(INVALID_ARGUMENT, "field 'shape.height': expected an integer, found 1.5", "shape.height", "1.5");
  EXPECT(INVALID_ARGUMENT, "field 'shape.width': expected an integer, found a string",
         "shape.width", "\"96\"");
  EXPECT(INVALID_ARGUMENT, "field 'shape.batch': expected an integer, found a boolean", "shape.batch", "true");
  EXPECT(INVALID_ARGUMENT, "field 'dtype': expected one of f32, bf16, f16, i64, i32, found \"fp32\"",
         "dtype", "\"fp32\"");
  EXPECT(NOT_FOUND, "field 'io.outputs': missing", "io.outputs", NULL);
  EXPECT(OUT_OF_RANGE, "field 'io.inputs[0].shape': rank 9 exceeds the maximum 8",
         "io.inputs[0].shape", "[1,1,1,1,1,1,1,1,1]");
  EXPECT(OUT_OF_RANGE, "field 'io.inputs[1].shape[0]'", "io.inputs[1].shape[0]", "-1");
  EXPECT(OUT_OF_RANGE, "field 'io.inputs[1].shape[0]'", "io.inputs[1].shape[0]", "9007199254740992");
  EXPECT(INVALID_ARGUMENT, "field 'io.inputs[1].name': duplicate name \"latent\" (also io.inputs[0])",
         "io.inputs[1].name", "\"latent\"");
  EXPECT(INVALID_ARGUMENT, "field 'io.outputs[0]': expected an object, found null", "io.outputs[0]", "null");
  EXPECT(NOT_FOUND, "field 'memory.peak_bytes': missing", "memory.peak_bytes", NULL);
  EXPECT(OUT_OF_RANGE, "field 'memory.arena_bytes'", "memory.arena_bytes", "1e300");
  EXPECT(INVALID_ARGUMENT, "field 'summary': expected an object, found an array", "summary", "[]");

  /* The io cap keeps a hostile list from growing without bound. */
  char big[1100 * 48 + 16], *p = big;
  p += sprintf(p, "[");
  for (int i = 0; i < 1025; i++)
    p += sprintf(p, "%s{\"name\":\"x%d\",\"dtype\":\"f32\",\"shape\":[]}", i ? "," : "", i);
  sprintf(p, "]");
  EXPECT(OUT_OF_RANGE, "field 'io.inputs': more than 1024 entries", "io.inputs", big);
}

static void test_blobs_and_layout(void) {
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_manifest_parse(g_base, strlen(g_base), "manifest.json", &m));
  char h0[40], h1[40], h2[40], h3[40];
  snprintf(h0, sizeof h0, "\"%s\"", m->blobs[0].hash); /* plan */
  snprintf(h1, sizeof h1, "\"%s\"", m->blobs[1].hash); /* weights, tp rank 0 */
  snprintf(h2, sizeof h2, "\"%s\"", m->blobs[2].hash); /* weights, tp rank 1 */
  snprintf(h3, sizeof h3, "\"%s\"", m->blobs[3].hash); /* kernels */
  dit_manifest_free(m);
  const char *unlisted = "\"ffffffffffffffffffffffffffffffff\"";

  EXPECT(INVALID_ARGUMENT, "field 'blobs[1].sha256': expected 64 lowercase hex digits, found \"0123",
         "blobs[1].sha256", "\"0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef\"");
  EXPECT(INVALID_ARGUMENT, "field 'blobs[1].sha256': expected 64 lowercase hex digits",
         "blobs[1].sha256", "\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\"");
  EXPECT(INVALID_ARGUMENT, "field 'blobs[1].sha256': expected 64 lowercase hex digits",
         "blobs[1].sha256", "\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0\"");
  EXPECT(INVALID_ARGUMENT, "field 'blobs[0].sha256': expected a string, found a number",
         "blobs[0].sha256", "5");
  EXPECT(INVALID_ARGUMENT, "field 'blobs[0].role': expected one of plan, weights, kernels, tokenizer, image_processor, found \"data\"",
         "blobs[0].role", "\"data\"");
  EXPECT(INVALID_ARGUMENT, "field 'blobs[1].hash': expected 32 lowercase hex digits", "blobs[1].hash",
         "\"0123\"");
  EXPECT(OUT_OF_RANGE, "field 'blobs[3].size'", "blobs[3].size", "9007199254740992");
  EXPECT(OUT_OF_RANGE, "field 'blobs[3].size'", "blobs[3].size", "-1");
  EXPECT(INVALID_ARGUMENT, "field 'blobs[3].hash': duplicate of blobs[0]", "blobs[3].hash", h0);
  EXPECT(INVALID_ARGUMENT, "field 'blobs': expected an array, found an object", "blobs", "{}");
  EXPECT(NOT_FOUND, "field 'blobs[2].size': missing", "blobs[2].size", NULL);

  EXPECT(NOT_FOUND, "field 'weights[0].blob': blob ffffffffffffffffffffffffffffffff is not listed in blobs[]",
         "weights[0].blob", unlisted);
  EXPECT(INVALID_ARGUMENT, "field 'weights[0].blob': blob", "weights[0].blob", h0);
  EXPECT(INVALID_ARGUMENT, "with role 'plan', expected role 'weights'", "weights[0].blob", h0);
  EXPECT(INVALID_ARGUMENT, "field 'weights[1].blob': blob", "weights[1].blob", h1);
  EXPECT(INVALID_ARGUMENT, "already has a layout in weights[0]", "weights[1].blob", h1,
         "weights[1].tensors", "[]");
  EXPECT(OUT_OF_RANGE, "field 'weights[0].tp_rank': expected an integer in [0, 1], found 2",
         "weights[0].tp_rank", "2");
  EXPECT(OUT_OF_RANGE, "field 'weights[0].tp_size'", "weights[0].tp_size", "0");

  EXPECT(INVALID_ARGUMENT, "field 'weights[0].tensors[1].offset': expected a multiple of 4096, found 12345",
         "weights[0].tensors[1].offset", "12345");
  EXPECT(INVALID_ARGUMENT, "field 'weights[0].tensors[1].nbytes': expected 128 (shape elements x 2-byte bf16), found 129",
         "weights[0].tensors[1].nbytes", "129");
  EXPECT(INVALID_ARGUMENT, "field 'weights[0].tensors[2].nbytes': expected 4 ", "weights[0].tensors[2].nbytes", "8");
  EXPECT(INVALID_ARGUMENT, "field 'weights[0].tensors[1]': bytes [0, 128) overlap tensors[0] at [0, 4096)",
         "weights[0].tensors[1].offset", "0");
  /* A long tensor covering two later ones is caught even though its neighbour is not. */
  EXPECT(INVALID_ARGUMENT, "overlap tensors[0]", "weights[0].tensors[0].shape", "[128, 32]",
         "weights[0].tensors[0].nbytes", "8192");
  EXPECT(OUT_OF_RANGE, "field 'weights[0].tensors[2]': bytes [12288, 12292) extend past the end of blob",
         "weights[0].tensors[2].offset", "12288");
  EXPECT(OUT_OF_RANGE, "extend past the end", "weights[0].tensors[2].offset", "8192",
         "weights[0].tensors[2].shape", "[2000]", "weights[0].tensors[2].nbytes", "8000");
  EXPECT(OUT_OF_RANGE, "field 'weights[0].tensors[2].offset'", "weights[0].tensors[2].offset",
         "9007199254740992");
  EXPECT(OUT_OF_RANGE, "field 'weights[0].tensors[2].shape': the tensor would exceed 2^53 bytes",
         "weights[0].tensors[2].shape", "[4503599627370496, 4503599627370496]");
  EXPECT(OUT_OF_RANGE, "field 'weights[0].tensors[2].shape': the tensor would exceed 2^53 bytes",
         "weights[0].tensors[2].shape", "[4503599627370496, 2]");
  EXPECT(INVALID_ARGUMENT, "field 'weights[0].tensors[1].name': duplicate name \"blocks.0.attn1.to_q.weight\" (also tensors[0])",
         "weights[0].tensors[1].name", "\"blocks.0.attn1.to_q.weight\"");
  EXPECT(INVALID_ARGUMENT, "field 'weights[0].tensors[0].dtype': expected one of", "weights[0].tensors[0].dtype",
         "\"bfloat16\"");
  EXPECT(NOT_FOUND, "field 'weights[0].tensors[0].name': missing", "weights[0].tensors[0].name", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'weights[0].tensors[0].name': must not be empty",
         "weights[0].tensors[0].name", "\"\"");
  EXPECT(INVALID_ARGUMENT, "field 'weights[1].tensors[0]': unknown member \"stride\"",
         "weights[1].tensors[0].stride", "[5, 1]");
  /* Empty tensors take no bytes, so they overlap nothing, and the same name may appear in
   * two shards. */
  EXPECT(INVALID_ARGUMENT, "overlap", "weights[1].tensors[1].offset", "0",
         "weights[1].tensors[0].shape", "[4, 5]", "weights[1].tensors[0].nbytes", "40");
}

static void test_ranks(void) {
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_manifest_parse(g_base, strlen(g_base), "manifest.json", &m));
  char h0[40], h1[40], h3[40];
  snprintf(h0, sizeof h0, "\"%s\"", m->blobs[0].hash);
  snprintf(h1, sizeof h1, "\"%s\"", m->blobs[1].hash);
  snprintf(h3, sizeof h3, "\"%s\"", m->blobs[3].hash);
  dit_manifest_free(m);

  EXPECT(OUT_OF_RANGE, "field 'ranks[2].rank': expected an integer in [0, 3], found 4", "ranks[2].rank", "4");
  EXPECT(INVALID_ARGUMENT, "field 'ranks[2].rank': rank 1 is listed twice (also ranks[1])", "ranks[2].rank", "1");
  EXPECT(NOT_FOUND, "field 'ranks': rank 3 of world size 4 is missing", "ranks[3]", NULL);
  EXPECT(OUT_OF_RANGE, "field 'ranks': 5 entries for world size 4", "ranks[4]",
         "{\"rank\":0,\"plan\":\"x\",\"weights\":\"y\"}");
  EXPECT(NOT_FOUND, "field 'ranks[0].plan': blob ffffffffffffffffffffffffffffffff is not listed in blobs[]",
         "ranks[0].plan", "\"ffffffffffffffffffffffffffffffff\"");
  EXPECT(INVALID_ARGUMENT, "field 'ranks[0].plan': blob", "ranks[0].plan", h1);
  EXPECT(INVALID_ARGUMENT, "with role 'weights', expected role 'plan'", "ranks[0].plan", h1);
  EXPECT(INVALID_ARGUMENT, "field 'ranks[1].weights': blob", "ranks[1].weights", h0);
  EXPECT(INVALID_ARGUMENT, "with role 'kernels', expected role 'weights'", "ranks[1].weights", h3);
  /* A weights blob that no weights[] entry lays out cannot be loaded. */
  EXPECT(NOT_FOUND, "field 'ranks[1].weights': blob", "weights[1]", NULL);
  EXPECT(NOT_FOUND, "has no tensor layout in weights[]", "weights[1]", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'ranks[0].weights': expected 32 lowercase hex digits",
         "ranks[0].weights", "\"\"");
  /* The order of ranks[] is free; each rank once is what matters. */
  char *t = edited("ranks[0].rank", "3", "ranks[3].rank", "0", "ranks[0].weights", h1,
                   "ranks[3].weights", h1, "ranks[1].weights", h1, "ranks[2].weights", h1,
                   "weights[1]", NULL, "blobs[2].role", "\"kernels\"", NULL);
  CHECK_OK(parse_text(t));
  cJSON_free(t);
}

/* The experts section of a two-expert pipeline over the base manifest's ranks: list[0]
 * repeats ranks[], list[1] has transformer_2's entries (here the other weights shard). */
static char *experts_text(double boundary) {
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_manifest_parse(g_base, strlen(g_base), "manifest.json", &m));
  char *t = calloc(1, 4096);
  int n = snprintf(t, 4096, "{\"boundary_timestep\":%.17g,\"list\":[", boundary);
  for (int e = 0; e < 2; e++) {
    n += snprintf(t + n, 4096 - (size_t)n, "%s{\"name\":\"%s\",\"ranks\":[", e ? "," : "", e ? "transformer_2" : "transformer");
    for (int r = 0; r < 4; r++)
      n += snprintf(t + n, 4096 - (size_t)n, "%s{\"rank\":%d,\"plan\":\"%s\",\"weights\":\"%s\"}", r ? "," : "", r,
                    m->ranks[r].plan, e ? m->weights[1 - r % 2].blob : m->ranks[r].weights);
    n += snprintf(t + n, 4096 - (size_t)n, "]}");
  }
  snprintf(t + n, 4096 - (size_t)n, "]}");
  dit_manifest_free(m);
  return t;
}

static void test_experts(void) {
  /* The base (no experts section) writes none, and parses as one transformer. */
  CHECK(strstr(g_base, "\"experts\"") == NULL);
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_manifest_parse(g_base, strlen(g_base), "manifest.json", &m));
  CHECK_EQ_INT(m->n_experts, 0);
  CHECK(dit_manifest_find_expert(m, "transformer_2") == NULL);
  CHECK(dit_manifest_expert_rank(m, NULL, 2) == &m->ranks[2]);
  CHECK(dit_manifest_expert_rank(m, "transformer_2", 2) == NULL);
  char h0[40], bad[40];
  snprintf(h0, sizeof h0, "\"%s\"", m->blobs[0].hash);
  snprintf(bad, sizeof bad, "\"%s\"", "ffffffffffffffffffffffffffffffff");
  dit_manifest_free(m);

  char *ex = experts_text(875);
  char *t = edited("experts", ex, NULL);
  CHECK_OK(dit_manifest_parse(t, strlen(t), "manifest.json", &m));
  cJSON_free(t);
  if (m) {
    CHECK_EQ_INT(m->n_experts, 2);
    CHECK(m->boundary_timestep == 875.0);
    CHECK(strcmp(m->experts[0].name, "transformer") == 0 && strcmp(m->experts[1].name, "transformer_2") == 0);
    const dit_manifest_rank_t *r1 = dit_manifest_expert_rank(m, "transformer_2", 1);
    CHECK(r1 && strcmp(r1->weights, m->weights[0].blob) == 0);
    CHECK(dit_manifest_expert_rank(m, "transformer", 1) == &m->ranks[1]);
    /* Round trip: the section is written back and reads the same, byte for byte. */
    char *a = NULL;
    dit_manifest_t *m2 = round_trip(m, &a);
    CHECK(a && strstr(a, "\"boundary_timestep\": 875"));
    CHECK(m2 && m2->n_experts == 2 && strcmp(m2->experts[1].ranks[3].weights, m->experts[1].ranks[3].weights) == 0);
    /* The writer refuses an experts section under schema 1.0. */
    m->schema_minor = 0;
    char *c = NULL;
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "experts need schema minor >= 1");
    free(a);
    dit_manifest_free(m2);
  }
  dit_manifest_free(m);

  /* Refusals, each an edit of a base that has the section. */
  char *base = g_base;
  g_base = edited("experts", ex, NULL);
  EXPECT(INVALID_ARGUMENT, "field 'experts': needs schema minor >= 1, found 1.0", "schema.minor", "0");
  EXPECT(INVALID_ARGUMENT, "field 'experts': unknown member \"offload\"", "experts.offload", "1");
  EXPECT(INVALID_ARGUMENT, "field 'experts.list[1]': unknown member \"plans\"", "experts.list[1].plans", "[]");
  EXPECT(NOT_FOUND, "field 'experts.list[1].ranks[0].plan': blob ffffffffffffffffffffffffffffffff is not listed in blobs[]", "experts.list[1].ranks[0].plan", bad);
  EXPECT(INVALID_ARGUMENT, "field 'experts.list[1].ranks[1].weights': blob", "experts.list[1].ranks[1].weights", h0);
  EXPECT(INVALID_ARGUMENT, "with role 'plan', expected role 'weights'", "experts.list[1].ranks[1].weights", h0);
  EXPECT(NOT_FOUND, "field 'experts.list[1].ranks': rank 3 of world size 4 is missing", "experts.list[1].ranks[3]", NULL);
  EXPECT(NOT_FOUND, "field 'experts.boundary_timestep': missing", "experts.boundary_timestep", NULL);
  EXPECT(OUT_OF_RANGE, "field 'experts.boundary_timestep'", "experts.boundary_timestep", "0");
  EXPECT(OUT_OF_RANGE, "field 'experts.boundary_timestep'", "experts.boundary_timestep", "1000.5");
  EXPECT(OUT_OF_RANGE, "field 'experts.boundary_timestep'", "experts.boundary_timestep", "-875");
  EXPECT(INVALID_ARGUMENT, "field 'experts.boundary_timestep': expected a number, found a string", 
         "experts.boundary_timestep", "\"875\"");
  EXPECT(INVALID_ARGUMENT, "field 'experts.list': expected 2 experts (transformer, transformer_2), found 1", 
         "experts.list[1]", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'experts.list[0].name'", "experts.list[0].name", "\"transformer_3\"");
  EXPECT(INVALID_ARGUMENT, "field 'experts.list[0].name': expected \"transformer\" (experts in pipeline order), found \"transformer_2\"",
         "experts.list[0].name", "\"transformer_2\"");
  EXPECT(INVALID_ARGUMENT, "field 'experts.list[0].ranks[2]': rank 2 differs from the top-level ranks[] entry", 
         "experts.list[0].ranks[2].weights", "\"" "0000000000000000000000000000000" "0\"", "blobs[4]",
         "{\"role\":\"weights\",\"hash\":\"00000000000000000000000000000000\",\"size\":12288}", "weights[2]",
         "{\"blob\":\"00000000000000000000000000000000\",\"tp_rank\":0,\"tp_size\":2,\"tensors\":[]}");
  EXPECT(INVALID_ARGUMENT, "field 'experts': expected an object, found an array", "experts", "[]");
  cJSON_free(g_base);
  g_base = base;
  free(ex);
}

/* A generate section over the base's inputs (latent, timestep). */
static const char kGenerate[] =
    "{\"latents\":\"latent\",\"steps\":28,\"timestep\":{\"input\":\"timestep\",\"divisor\":1000},"
    "\"guidance\":{\"input\":\"timestep\",\"scale\":1,\"default\":3.5},"
    "\"conditions\":[{\"argument\":\"prompt_embeds\",\"input\":\"latent\"}],\"true_cfg\":\"norm\","
    "\"schedule\":{\"sampler\":\"flow_match_euler\",\"num_train_timesteps\":1000,\"shift\":3,\"sigmas\":\"one_to_1/n\","
    "\"dynamic\":{\"base_shift\":0.5,\"max_shift\":1.15,\"base_image_seq_len\":256,\"max_image_seq_len\":4096,"
    "\"image_seq_len\":4096,\"time_shift_type\":\"exponential\"},\"shift_terminal\":0.02}}";

static void test_generate(void) {
  CHECK(strstr(g_base, "\"generate\"") == NULL); /* none unless a family writes one */
  char *t = edited("generate", kGenerate, NULL);
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_manifest_parse(t, strlen(t), "manifest.json", &m));
  cJSON_free(t);
  if (m) {
    const dit_manifest_generate_t *g = &m->generate;
    CHECK(g->present && !strcmp(g->latents, "latent") && g->default_steps == 28 && g->timestep_divisor == 1000 &&
          !g->timestep_f32);
    CHECK(!strcmp(g->guidance_input, "timestep") && g->guidance_default == 3.5 && g->true_cfg_norm);
    CHECK(g->n_conditions == 1 && !strcmp(g->conditions[0].argument, "prompt_embeds"));
    CHECK(g->schedule.dynamic && g->schedule.max_image_seq_len == 4096 && g->schedule.has_shift_terminal &&
          g->schedule.shift_terminal == 0.02 && !g->schedule.sigmas_to_zero && !g->schedule.time_shift_linear);
    dit_manifest_t *m2 = round_trip(m, NULL);
    /* The section alone, as the compile identity hashes it. */
    cJSON *j = NULL;
    CHECK_OK(dit_manifest_generate_json(g, &j));
    CHECK(j && cJSON_GetObjectItemCaseSensitive(j, "schedule") && !cJSON_GetObjectItemCaseSensitive(j, "generate"));
    cJSON_Delete(j);
    m->schema_minor = 1;
    char *c = NULL;
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "generate needs schema minor >= 2");
    dit_manifest_free(m2);
  }
  dit_manifest_free(m);

  /* A timestep the pipeline keeps in fp32 survives the round trip; "model" is the default. */
  char *plain = g_base;
  g_base = edited("generate", kGenerate, NULL);
  for (int k = 0; k < 2; k++) {
    char *u = edited("generate.timestep.dtype", k ? "\"model\"" : "\"f32\"", NULL), *a = NULL;
    m = NULL;
    CHECK_OK(dit_manifest_parse(u, strlen(u), "manifest.json", &m));
    if (m) {
      CHECK(m->generate.timestep_f32 == !k);
      CHECK_OK(dit_manifest_to_json(m, &a));
      /* Written only when fp32: the timestep object ends right after the divisor otherwise. */
      const char *dv = a ? strstr(a, "\"divisor\"") : NULL, *end = dv ? strchr(dv, '}') : NULL, *f = dv ? strstr(dv, "\"f32\"") : NULL;
      CHECK(end && (f != NULL && f < end) == !k);
    }
    free(a);
    cJSON_free(u);
    dit_manifest_free(m);
  }
  cJSON_free(g_base);
  g_base = plain;

  char *base = g_base;
  g_base = edited("generate", kGenerate, NULL);
  EXPECT(INVALID_ARGUMENT, "field 'generate': needs schema minor >= 2, found 1.1", "schema.minor", "1");
  EXPECT(INVALID_ARGUMENT, "field 'generate.latents': \"hidden_states\" is not one of the bundle's inputs", "generate.latents",
         "\"hidden_states\"");
  EXPECT(INVALID_ARGUMENT, "field 'generate.conditions[0].input': \"pooled\" is not one of the bundle's inputs",
         "generate.conditions[0].input", "\"pooled\"");
  EXPECT(INVALID_ARGUMENT, "field 'generate': unknown member \"sampler\"", "generate.sampler", "\"unipc\"");
  EXPECT(INVALID_ARGUMENT, "field 'generate.schedule.sigmas'", "generate.schedule.sigmas", "\"karras\"");
  EXPECT(INVALID_ARGUMENT, "field 'generate.schedule.sampler'", "generate.schedule.sampler", "\"unipc\"");
  EXPECT(NOT_FOUND, "field 'generate.schedule.dynamic': missing", "generate.schedule.dynamic", NULL);
  EXPECT(NOT_FOUND, "field 'generate.schedule.shift_terminal': missing", "generate.schedule.shift_terminal", NULL);
  EXPECT(OUT_OF_RANGE, "field 'generate.schedule.shift_terminal'", "generate.schedule.shift_terminal", "1.5");
  EXPECT(INVALID_ARGUMENT, "field 'generate.schedule.dynamic.max_image_seq_len': equals base_image_seq_len",
         "generate.schedule.dynamic.max_image_seq_len", "256");
  EXPECT(OUT_OF_RANGE, "field 'generate.timestep.divisor'", "generate.timestep.divisor", "0");
  EXPECT(INVALID_ARGUMENT, "field 'generate.timestep.dtype'", "generate.timestep.dtype", "\"bf16\"");
  EXPECT(OUT_OF_RANGE, "field 'generate.steps'", "generate.steps", "0");
  EXPECT(INVALID_ARGUMENT, "field 'generate.true_cfg'", "generate.true_cfg", "\"rescaled\"");
  EXPECT(OUT_OF_RANGE, "field 'generate.conditions': more than 8 entries", "generate.conditions",
         "[{},{},{},{},{},{},{},{},{}]");
  cJSON_free(g_base);
  g_base = base;
}

/* The stages section and tokenizer blobs (schema 1.4). */
static const char kStages[] =
    "[{\"role\":\"text_encoder\",\"identity\":\"0123456789abcdef0123456789abcdef\",\"family\":\"umt5\",\"class\":\"UMT5EncoderModel\"},"
    "{\"role\":\"vae_decoder\",\"identity\":\"fedcba9876543210fedcba9876543210\",\"family\":\"wan_vae\",\"class\":\"AutoencoderKLWan\"}]";
static const char kTokBlob[] = "{\"role\":\"tokenizer\",\"hash\":\"33333333333333333333333333333333\",\"size\":7,\"name\":\"spiece.model\"}";

static void test_stages(void) {
  CHECK(strstr(g_base, "\"stages\"") == NULL && strstr(g_base, "\"name\": \"spiece") == NULL);
  char *t = edited("schema.minor", "4", "stages", kStages, "blobs[9]", kTokBlob, NULL);
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_manifest_parse(t, strlen(t), "manifest.json", &m));
  cJSON_free(t);
  if (m) {
    CHECK_EQ_INT(m->n_stages, 2);
    const dit_manifest_stage_t *te = dit_manifest_find_stage(m, "text_encoder"), *vae = dit_manifest_find_stage(m, "vae_decoder");
    CHECK(te && !strcmp(te->identity, "0123456789abcdef0123456789abcdef") && !strcmp(te->family, "umt5") &&
          !strcmp(te->model_class, "UMT5EncoderModel"));
    CHECK(vae && !strcmp(vae->family, "wan_vae"));
    CHECK(dit_manifest_find_stage(m, "image_encoder") == NULL);
    const dit_manifest_blob_t *tb = dit_manifest_find_blob(m, "33333333333333333333333333333333");
    CHECK(tb && !strcmp(tb->role, "tokenizer") && !strcmp(tb->name, "spiece.model"));
    dit_manifest_t *m2 = round_trip(m, NULL);
    CHECK(m2 && m2->n_stages == 2 && !strcmp(m2->stages[1].identity, "fedcba9876543210fedcba9876543210"));
    /* The writer refuses the section under an older schema, and a name on another role. */
    m->schema_minor = 3;
    char *c = NULL;
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "tokenizer blobs need schema minor >= 4, found 3");
    m->n_blobs = 4; /* without the tokenizer blob */
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "stages need schema minor >= 4, found 3");
    m->schema_minor = 4;
    snprintf(m->blobs[0].name, sizeof m->blobs[0].name, "x.json");
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "blobs[0]: a name goes with roles tokenizer and image_processor and only there");
    dit_manifest_free(m2);
  }
  dit_manifest_free(m);

  char *base = g_base;
  g_base = edited("schema.minor", "4", "stages", kStages, "blobs[9]", kTokBlob, NULL);
  EXPECT(INVALID_ARGUMENT, "field 'stages': needs schema minor >= 4, found 1.3", "schema.minor", "3", "blobs[4]", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'blobs[4].role': role \"tokenizer\" needs schema minor >= 4, found 1.3", "schema.minor", "3");
  EXPECT(INVALID_ARGUMENT, "field 'stages': expected at least one stage", "stages", "[]");
  EXPECT(OUT_OF_RANGE, "field 'stages': more than 8 entries", "stages", "[{},{},{},{},{},{},{},{},{}]");
  EXPECT(INVALID_ARGUMENT, "field 'stages[1].role': duplicate of stages[0].role \"text_encoder\"", "stages[1].role", "\"text_encoder\"");
  EXPECT(INVALID_ARGUMENT, "field 'stages[0].role'", "stages[0].role", "\"transformer\"");
  EXPECT(INVALID_ARGUMENT, "field 'stages[0]': unknown member \"path\"", "stages[0].path", "\"/tmp\"");
  EXPECT(NOT_FOUND, "field 'stages[1].identity': missing", "stages[1].identity", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'stages[1].identity'", "stages[1].identity", "\"xyz\"");
  EXPECT(NOT_FOUND, "field 'stages[0].family': missing", "stages[0].family", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'blobs[4]': a blob of role \"tokenizer\" needs a \"name\"", "blobs[4].name", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'blobs[0].name': only blobs of roles \"tokenizer\" and \"image_processor\" have a name, this one is \"plan\"", "blobs[0].name",
         "\"spiece.model\"");
  EXPECT(INVALID_ARGUMENT, "field 'blobs[4].name': expected a plain file name (no '/', not starting with '.'), found \"../x\"",
         "blobs[4].name", "\"../x\"");
  EXPECT(INVALID_ARGUMENT, "field 'blobs[5].name': duplicate of blobs[4].name \"spiece.model\"", "blobs[5]",
         "{\"role\":\"tokenizer\",\"hash\":\"44444444444444444444444444444444\",\"size\":2,\"name\":\"spiece.model\"}");
  cJSON_free(g_base);
  g_base = base;
}

/* Windows over a width: they partition it, each giving only columns its inner halos leave exact. */
static void test_tile_span(void) {
  uint64_t r = 12345;
  for (int k = 0; k < 20000; k++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t full = 1 + (int64_t)(r >> 33) % 300, halo = (int64_t)(r >> 20) % 12, count = 1 + (int64_t)(r >> 45) % 40;
    const int64_t window = dit_vae_tile_window(count, full, halo);
    int64_t o, lo, hi;
    if (!window) {
      CHECK(count > 1 && count > full - 2 * halo);
      continue;
    }
    CHECK(window <= full && (count == 1 || window > 2 * halo));
    CHECK(!dit_vae_tile_span(count, full, window - 1, halo, 0, &o, &lo, &hi) || window - 1 < 1 || count == 1); /* the narrowest */
    int64_t next = 0;
    for (int64_t i = 0; i < count; i++) {
      CHECK(dit_vae_tile_span(count, full, window, halo, i, &o, &lo, &hi));
      CHECK_EQ_INT(lo, next);
      CHECK(o >= 0 && o + window <= full && lo < hi);
      CHECK(lo >= (o ? o + halo : 0) && hi <= (o + window < full ? o + window - halo : full));
      next = hi;
    }
    CHECK_EQ_INT(next, full);
    CHECK(!dit_vae_tile_span(count, full, window, halo, count, &o, &lo, &hi));
  }
}

/* shape.tile and the vae_decoder_head stage (schema 1.5). */
static const char kHeadStage[] =
    "[{\"role\":\"vae_decoder_head\",\"identity\":\"0123456789abcdef0123456789abcdef\",\"family\":\"wan_vae\",\"class\":\"AutoencoderKLWan\"}]";

static void test_tiles(void) {
  char *t = edited("schema.minor", "5", "shape.latent", "[384, 1, 90, 63]", "shape.tile", "{\"count\": 3, \"full\": 160, \"halo\": 7}",
                   "stages", kHeadStage, NULL);
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_manifest_parse(t, strlen(t), "manifest.json", &m));
  cJSON_free(t);
  if (m) {
    CHECK(m->shape.tile_count == 3 && m->shape.tile_full == 160 && m->shape.tile_halo == 7 && m->shape.latent[3] == 63);
    CHECK(dit_manifest_find_stage(m, "vae_decoder_head") != NULL);
    dit_manifest_t *m2 = round_trip(m, NULL);
    CHECK(m2 && m2->shape.tile_count == 3 && m2->shape.tile_halo == 7);
    m->schema_minor = 4;
    char *c = NULL;
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "shape.tile needs schema minor >= 5, found 4");
    m->shape.tile_count = 0;
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "role vae_decoder_head needs schema minor >= 5, found 4");
    dit_manifest_free(m2);
  }
  dit_manifest_free(m);
  char *base = g_base;
  g_base = edited("schema.minor", "5", "shape.latent", "[384, 1, 90, 63]", "shape.tile", "{\"count\": 3, \"full\": 160, \"halo\": 7}", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'shape.tile': needs schema minor >= 5, found 1.4", "schema.minor", "4");
  EXPECT(INVALID_ARGUMENT, "field 'stages[0].role': role \"vae_decoder_head\" needs schema minor >= 5, found 1.4", "schema.minor", "4",
         "shape.tile", NULL, "stages", kHeadStage);
  EXPECT(OUT_OF_RANGE, "field 'shape.tile.count'", "shape.tile.count", "0");
  EXPECT(NOT_FOUND, "field 'shape.tile.halo': missing", "shape.tile.halo", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'shape.tile': unknown member \"offsets\"", "shape.tile.offsets", "[0]");
  EXPECT(INVALID_ARGUMENT, "field 'shape.tile': 3 windows of shape.latent's width 62 with halo 7 do not cover 160 columns exactly "
         "(expected a window of at least 63)", "shape.latent", "[384, 1, 90, 62]");
  EXPECT(INVALID_ARGUMENT, "do not cover 160 columns exactly", "shape.tile.halo", "40");
  cJSON_free(g_base);
  g_base = base;
}

/* A text encoder's argument, output and padding and the text_encoder_2 role (schema 1.6). */
static const char kFeedStages[] =
    "[{\"role\":\"text_encoder\",\"identity\":\"0123456789abcdef0123456789abcdef\",\"family\":\"clip_text\",\"class\":\"CLIPTextModel\","
    "\"argument\":\"pooled_prompt_embeds\",\"output\":\"pooler_output\",\"padding\":\"attended\"},"
    "{\"role\":\"text_encoder_2\",\"identity\":\"fedcba9876543210fedcba9876543210\",\"family\":\"t5\",\"class\":\"T5EncoderModel\","
    "\"argument\":\"prompt_embeds\",\"output\":\"last_hidden_state\",\"padding\":\"zeroed\"},"
    "{\"role\":\"vae_decoder\",\"identity\":\"00112233445566778899aabbccddeeff\",\"family\":\"kl_vae\",\"class\":\"AutoencoderKL\"}]";

static void test_feeds(void) {
  char *t = edited("schema.minor", "6", "stages", kFeedStages, NULL);
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_manifest_parse(t, strlen(t), "manifest.json", &m));
  cJSON_free(t);
  if (m) {
    CHECK_EQ_INT(m->n_stages, 3);
    const dit_manifest_stage_t *p = dit_manifest_stage_for(m, "pooled_prompt_embeds"), *e = dit_manifest_stage_for(m, "prompt_embeds");
    CHECK(p && !strcmp(p->role, "text_encoder") && !strcmp(p->output, "pooler_output") && p->padding == DIT_PADDING_ATTENDED);
    CHECK(e && !strcmp(e->role, "text_encoder_2") && !strcmp(e->output, "last_hidden_state") && e->padding == DIT_PADDING_ZEROED);
    CHECK(dit_manifest_stage_for(m, "negative_prompt_embeds") == NULL && dit_manifest_stage_for(m, "") == NULL);
    const dit_manifest_stage_t *v = dit_manifest_find_stage(m, "vae_decoder");
    CHECK(v && !v->argument[0] && !v->output[0]);
    char *a = NULL;
    dit_manifest_t *m2 = round_trip(m, &a);
    CHECK(a && strstr(a, "\"padding\": \"attended\"") && strstr(a, "\"padding\": \"zeroed\""));
    CHECK(m2 && m2->stages[0].padding == DIT_PADDING_ATTENDED && m2->stages[1].padding == DIT_PADDING_ZEROED && !strcmp(m2->stages[0].argument, "pooled_prompt_embeds"));
    /* The writer refuses the fields under an older schema, and on a stage that is no text encoder. */
    char *c = NULL;
    m->schema_minor = 5;
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "stages[0]: argument needs schema minor >= 6, found 5");
    m->stages[0].argument[0] = 0;
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "stages[1]: role text_encoder_2 needs schema minor >= 6, found 5");
    m->stages[1].argument[0] = 0;
    snprintf(m->stages[1].role, sizeof m->stages[1].role, "image_encoder");
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "stages[1]: role image_encoder needs schema minor >= 7, found 5");
    snprintf(m->stages[1].role, sizeof m->stages[1].role, "text_encoder_2");
    m->schema_minor = 6;
    snprintf(m->stages[2].argument, sizeof m->stages[2].argument, "prompt_embeds");
    snprintf(m->stages[2].output, sizeof m->stages[2].output, "sample");
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "stages[2]: argument prompt_embeds: only a text encoder stage makes a generate argument");
    free(a);
    dit_manifest_free(m2);
  }
  dit_manifest_free(m);
  char *base = g_base;
  g_base = edited("schema.minor", "6", "stages", kFeedStages, NULL);
  EXPECT(INVALID_ARGUMENT, "field 'stages[0].argument': needs schema minor >= 6, found 1.5", "schema.minor", "5");
  EXPECT(INVALID_ARGUMENT, "field 'stages[1].role': role \"text_encoder_2\" needs schema minor >= 6, found 1.5", "schema.minor", "5",
         "stages[0].argument", NULL, "stages[0].output", NULL, "stages[0].padding", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'stages[0].argument': expected argument, output and padding together", "stages[0].padding", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'stages[1].output': expected argument, output and padding together", "stages[1].argument", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'stages[0].padding'", "stages[0].padding", "\"masked\"");
  EXPECT(INVALID_ARGUMENT, "field 'stages[1].argument': \"pooled_prompt_embeds\" is made by stages[0] too", "stages[1].argument",
         "\"pooled_prompt_embeds\"");
  EXPECT(INVALID_ARGUMENT, "field 'stages[0].output': must not be empty", "stages[0].output", "\"\"");
  EXPECT(INVALID_ARGUMENT, "field 'stages[2].argument': role \"vae_decoder\" makes no generate argument", "stages[2].argument",
         "\"x\"", "stages[2].output", "\"sample\"", "stages[2].padding", "\"zeroed\"");
  EXPECT(INVALID_ARGUMENT, "field 'stages[1].role': duplicate of stages[0].role \"text_encoder\"", "stages[1].role", "\"text_encoder\"");
  cJSON_free(g_base);
  g_base = base;
}

/* The image-to-video stages and the image_processor blob (schema 1.7). */
static const char kImageStages[] =
    "[{\"role\":\"vae_encoder\",\"identity\":\"0123456789abcdef0123456789abcdef\",\"family\":\"wan_vae\",\"class\":\"AutoencoderKLWan\"},"
    "{\"role\":\"vae_encoder_first\",\"identity\":\"fedcba9876543210fedcba9876543210\",\"family\":\"wan_vae\",\"class\":\"AutoencoderKLWan\"},"
    "{\"role\":\"image_encoder\",\"identity\":\"00112233445566778899aabbccddeeff\",\"family\":\"clip_vision\",\"class\":\"CLIPVisionModel\"}]";
static const char kProcBlob[] =
    "{\"role\":\"image_processor\",\"hash\":\"33333333333333333333333333333333\",\"size\":7,\"name\":\"preprocessor_config.json\"}";

static void test_image_stages(void) {
  CHECK_EQ_INT(dit_manifest_stage_minor("vae_encoder"), 7);
  CHECK_EQ_INT(dit_manifest_stage_minor("vae_decoder_head"), 5);
  CHECK_EQ_INT(dit_manifest_stage_minor("transformer"), -1);
  CHECK_EQ_INT(dit_manifest_blob_named("image_processor"), 7);
  CHECK_EQ_INT(dit_manifest_blob_named("weights"), -1);
  char *t = edited("schema.minor", "7", "stages", kImageStages, "blobs[9]", kProcBlob, NULL);
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_manifest_parse(t, strlen(t), "manifest.json", &m));
  cJSON_free(t);
  if (m) {
    const dit_manifest_stage_t *ie = dit_manifest_find_stage(m, "image_encoder");
    CHECK(ie && !strcmp(ie->family, "clip_vision") && dit_manifest_find_stage(m, "vae_encoder_first") != NULL);
    const dit_manifest_blob_t *pb = dit_manifest_find_blob(m, "33333333333333333333333333333333");
    CHECK(pb && !strcmp(pb->role, "image_processor") && !strcmp(pb->name, "preprocessor_config.json"));
    dit_manifest_t *m2 = round_trip(m, NULL);
    CHECK(m2 && m2->n_stages == 3 && !strcmp(m2->stages[2].role, "image_encoder"));
    char *c = NULL;
    m->schema_minor = 6;
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "image_processor blobs need schema minor >= 7, found 6");
    m->n_blobs = 4; /* without it */
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "stages[0]: role vae_encoder needs schema minor >= 7, found 6");
    dit_manifest_free(m2);
  }
  dit_manifest_free(m);
  char *base = g_base;
  g_base = edited("schema.minor", "7", "stages", kImageStages, "blobs[9]", kProcBlob, NULL);
  EXPECT(INVALID_ARGUMENT, "field 'blobs[4].role': role \"image_processor\" needs schema minor >= 7, found 1.6", "schema.minor", "6");
  EXPECT(INVALID_ARGUMENT, "field 'stages[0].role': role \"vae_encoder\" needs schema minor >= 7, found 1.6", "schema.minor", "6",
         "blobs[4]", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'blobs[4]': a blob of role \"image_processor\" needs a \"name\"", "blobs[4].name", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'stages[2].role': duplicate of stages[0].role \"vae_encoder\"", "stages[2].role", "\"vae_encoder\"");
  cJSON_free(g_base);
  g_base = base;
}

/* A VAE decoder framewise in windows: vae_decoder's window_stride and vae_decoder_last (schema 1.8). */
static const char kWindowStages[] =
    "[{\"role\":\"vae_decoder\",\"identity\":\"0123456789abcdef0123456789abcdef\",\"family\":\"hunyuan_vae\","
    "\"class\":\"AutoencoderKLHunyuanVideo\",\"window_stride\":3},"
    "{\"role\":\"vae_decoder_last\",\"identity\":\"fedcba9876543210fedcba9876543210\",\"family\":\"hunyuan_vae\","
    "\"class\":\"AutoencoderKLHunyuanVideo\"}]";

static void test_window_stages(void) {
  CHECK_EQ_INT(dit_manifest_stage_minor("vae_decoder_last"), 8);
  char *t = edited("schema.minor", "8", "stages", kWindowStages, NULL);
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_manifest_parse(t, strlen(t), "manifest.json", &m));
  cJSON_free(t);
  if (m) {
    const dit_manifest_stage_t *v = dit_manifest_find_stage(m, "vae_decoder"), *l = dit_manifest_find_stage(m, "vae_decoder_last");
    CHECK(v && v->window_stride == 3 && l && l->window_stride == 0);
    dit_manifest_t *m2 = round_trip(m, NULL);
    CHECK(m2 && m2->n_stages == 2 && m2->stages[0].window_stride == 3);
    char *c = NULL;
    m->schema_minor = 7;
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "stages[0]: window_stride 3: expected > 0, on a vae_decoder stage, with "
              "schema minor >= 8, found role vae_decoder and minor 7");
    m->schema_minor = 8;
    m->stages[1].window_stride = 2;
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "found role vae_decoder_last and minor 8");
    dit_manifest_free(m2);
  }
  dit_manifest_free(m);
  char *base = g_base;
  g_base = edited("schema.minor", "8", "stages", kWindowStages, NULL);
  EXPECT(INVALID_ARGUMENT, "field 'stages[0].window_stride': needs schema minor >= 8, found 1.7", "schema.minor", "7", "stages[1]", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'stages[1].role': role \"vae_decoder_last\" needs schema minor >= 8, found 1.7", "schema.minor", "7",
         "stages[0].window_stride", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'stages[1].window_stride': role \"vae_decoder_last\" decodes no windows", "stages[1].window_stride", "3");
  EXPECT(OUT_OF_RANGE, "field 'stages[0].window_stride': expected an integer in [1, 1048576], found 0", "stages[0].window_stride", "0");
  cJSON_free(g_base);
  g_base = base;
}

/* A text encoder's prompt template, dropped rows, mask argument and masked padding (schema 1.7). */
static const char kTemplateStages[] =
    "[{\"role\":\"text_encoder\",\"identity\":\"0123456789abcdef0123456789abcdef\",\"family\":\"qwen2_5_vl_text\","
    "\"class\":\"Qwen2_5_VLForConditionalGeneration\",\"argument\":\"prompt_embeds\",\"output\":\"hidden_states_selected\","
    "\"padding\":\"zeroed\",\"template\":\"<|im_start|>user\\n{}<|im_end|>\",\"drop\":3,\"mask_argument\":\"prompt_embeds_mask\"},"
    "{\"role\":\"text_encoder_2\",\"identity\":\"fedcba9876543210fedcba9876543210\",\"family\":\"llama_text\","
    "\"class\":\"LlamaModel\",\"argument\":\"other_embeds\",\"output\":\"hidden_states_selected\",\"padding\":\"masked\"}]";

static void test_templates(void) {
  char *t = edited("schema.minor", "7", "stages", kTemplateStages, NULL);
  dit_manifest_t *m = NULL;
  CHECK_OK(dit_manifest_parse(t, strlen(t), "manifest.json", &m));
  cJSON_free(t);
  if (m) {
    const dit_manifest_stage_t *q = dit_manifest_stage_for(m, "prompt_embeds_mask");
    CHECK(q && q == dit_manifest_stage_for(m, "prompt_embeds") && q->drop == 3 && !strcmp(q->prompt_template, "<|im_start|>user\n{}<|im_end|>"));
    CHECK(m->stages[1].padding == DIT_PADDING_MASKED && !m->stages[1].mask_argument[0] && !m->stages[1].drop);
    dit_manifest_t *m2 = round_trip(m, NULL);
    CHECK(m2 && m2->stages[0].drop == 3 && !strcmp(m2->stages[0].mask_argument, "prompt_embeds_mask") &&
          m2->stages[1].padding == DIT_PADDING_MASKED);
    char *c = NULL;
    m->schema_minor = 6;
    CHECK_ERR(dit_manifest_to_json(m, &c), INVALID_ARGUMENT, "stages[0]: a template, drop, mask argument or masked padding needs an argument and schema minor >= 7, found 6");
    dit_manifest_free(m2);
  }
  dit_manifest_free(m);
  char *base = g_base;
  g_base = edited("schema.minor", "7", "stages", kTemplateStages, NULL);
  EXPECT(INVALID_ARGUMENT, "field 'stages[0].template': needs schema minor >= 7, found 1.6", "schema.minor", "6", "stages[1].padding",
         "\"zeroed\"");
  EXPECT(INVALID_ARGUMENT, "field 'stages[1].padding': needs schema minor >= 7, found 1.6", "schema.minor", "6", "stages[0].template", NULL,
         "stages[0].drop", NULL, "stages[0].mask_argument", NULL);
  EXPECT(INVALID_ARGUMENT, "field 'stages[0].template': expected one \"{}\" where the prompt goes, found none", "stages[0].template",
         "\"<|im_start|>\"");
  EXPECT(INVALID_ARGUMENT, "found two", "stages[0].template", "\"{}{}\"");
  EXPECT(OUT_OF_RANGE, "field 'stages[0].drop'", "stages[0].drop", "-1");
  EXPECT(INVALID_ARGUMENT, "field 'stages[1].argument': \"prompt_embeds_mask\" is made by stages[0] too", "stages[1].argument",
         "\"prompt_embeds_mask\"");
  EXPECT(INVALID_ARGUMENT, "field 'stages[0].argument': \"prompt_embeds\" is the stage's mask_argument too", "stages[0].mask_argument",
         "\"prompt_embeds\"");
  cJSON_free(g_base);
  g_base = base;
}

/* preprocessor_config.json as CLIPImageProcessor saves it, and its refusals. */
static void test_image_processor(void) {
  static const char ok[] = "{\"crop_size\":{\"height\":224,\"width\":224},\"do_center_crop\":true,\"do_convert_rgb\":true,"
                           "\"image_mean\":[0.48145466,0.4578275,0.40821073],\"image_processor_type\":\"CLIPImageProcessor\","
                           "\"image_std\":[0.26862954,0.26130258,0.27577711],\"resample\":3,\"rescale_factor\":0.00392156862745098,"
                           "\"size\":{\"shortest_edge\":224}}";
  dit_image_processor_t p;
  CHECK_OK(dit_image_processor_parse(ok, strlen(ok), "pc.json", &p));
  CHECK(p.do_resize && p.do_center_crop && p.do_rescale && p.do_normalize && p.shortest_edge == 224 && p.resample == 3);
  CHECK(p.crop_h == 224 && p.crop_w == 224 && p.mean[2] == 0.40821073 && p.std[0] == 0.26862954);
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"{\"size\":{\"shortest_edge\":224},\"resample\":2,\"crop_size\":{\"height\":1,\"width\":1}}",
       "pc.json: field 'resample': expected 1 (LANCZOS) or 3 (BICUBIC)"},
      {"{\"size\":{\"height\":0,\"width\":3},\"resample\":3}", "field 'size.height'"},
      {"{\"do_resize\":false,\"do_center_crop\":false,\"do_rescale\":false,\"image_mean\":[0.5,0.5],\"image_std\":[1,1,1]}",
       "field 'image_mean': expected 3 numbers (one per RGB channel), found 2"},
      {"{\"do_resize\":false,\"do_center_crop\":false,\"do_rescale\":false,\"image_mean\":[0,0,0],\"image_std\":[1,0,1]}",
       "field 'image_std[1]'"},
      {"{\"do_resize\":\"yes\"}", "field 'do_resize': expected a boolean"},
      {"[1]", "pc.json"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dit_status_t s = dit_image_processor_parse(bad[i].text, strlen(bad[i].text), "pc.json", &p);
    CHECK(s != DIT_OK);
    const int named = s && strstr(dit_status_message(s), bad[i].want) != NULL;
    if (s && !named) fprintf(stderr, "  got: %s\n  want: %s\n", dit_status_message(s), bad[i].want);
    CHECK(named);
    dit_status_free(s);
  }
}

int main(void) {
  test_tile_span();
  test_round_trip();
  test_serializer_errors();
  test_syntax();
  test_schema();
  test_reuse();
  test_fields();
  test_blobs_and_layout();
  test_ranks();
  test_experts();
  test_generate();
  test_stages();
  test_tiles();
  test_feeds();
  test_image_stages();
  test_window_stages();
  test_image_processor();
  test_templates();
  free(g_base);
  return check_summary("test_manifest");
}
