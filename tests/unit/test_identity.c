/* Content hashes and the compile identity: hex byte order, streaming, canonical JSON (key
 * order, nesting, numbers, escapes, duplicate keys) and a pinned digest that must never drift. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "artifacts/identity.h"
#include "check.h"

static char *canon_of_text(const char *json) {
  cJSON *v = cJSON_Parse(json);
  if (!v) return NULL;
  char *out = NULL;
  dit_status_t s = dit_json_canonical(v, &out);
  cJSON_Delete(v);
  if (s) {
    fprintf(stderr, "canonical failed: %s\n", dit_status_message(s));
    dit_status_free(s);
    return NULL;
  }
  return out;
}

static void check_canon(const char *json, const char *want) {
  char *got = canon_of_text(json);
  CHECK(got != NULL);
  if (got && strcmp(got, want) != 0) {
    fprintf(stderr, "canonical of %s:\n  got  %s\n  want %s\n", json, got, want);
    CHECK(0);
  }
  free(got);
}

static void check_number(double v, const char *want) {
  cJSON *n = cJSON_CreateNumber(v);
  char *got = NULL;
  CHECK_OK(dit_json_canonical(n, &got));
  if (!got || strcmp(got, want) != 0) {
    fprintf(stderr, "number %.17g: got %s, want %s\n", v, got ? got : "(null)", want);
    CHECK(0);
  }
  free(got);
  cJSON_Delete(n);
}

static void test_hex(void) {
  char hex[33];
  /* The XXH3-128 of no bytes, as xxhsum -H2 prints it. */
  dit_hash128_hex("", 0, hex);
  CHECK(strcmp(hex, "99aa06d3014798d86001c324468d497f") == 0);
  dit_hash128_hex(NULL, 0, hex);
  CHECK(strcmp(hex, "99aa06d3014798d86001c324468d497f") == 0);

  /* Canonical order = high 64 bits first, each big-endian. */
  const char *msg = "the quick brown fox";
  XXH128_hash_t h = XXH3_128bits(msg, strlen(msg));
  char want[33];
  snprintf(want, sizeof want, "%016llx%016llx", (unsigned long long)h.high64,
           (unsigned long long)h.low64);
  dit_hash128_hex(msg, strlen(msg), hex);
  CHECK(strcmp(hex, want) == 0);
  CHECK(dit_is_hash_hex(hex));
}

static void test_streaming(void) {
  enum { N = 300000 };
  unsigned char *buf = malloc(N);
  for (int i = 0; i < N; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
  char one[33], many[33], empty[33];
  dit_hash128_hex(buf, N, one);
  dit_hasher_t *h = NULL;
  CHECK_OK(dit_hasher_create(&h));
  size_t off = 0, step = 1;
  while (off < N) {
    size_t n = step < N - off ? step : N - off;
    dit_hasher_update(h, buf + off, n);
    off += n;
    step = step * 3 + 1; /* uneven pieces cross XXH3's internal block boundaries */
  }
  dit_hasher_update(h, NULL, 0);
  dit_hasher_hex(h, many);
  CHECK(strcmp(one, many) == 0);
  dit_hasher_destroy(h);

  CHECK_OK(dit_hasher_create(&h));
  dit_hasher_hex(h, empty);
  CHECK(strcmp(empty, "99aa06d3014798d86001c324468d497f") == 0);
  dit_hasher_destroy(h);
  dit_hasher_destroy(NULL);
  free(buf);
}

static void test_is_hash_hex(void) {
  CHECK(dit_is_hash_hex("0123456789abcdef0123456789abcdef"));
  CHECK(!dit_is_hash_hex("0123456789ABCDEF0123456789abcdef"));
  CHECK(!dit_is_hash_hex("0123456789abcdef0123456789abcde"));
  CHECK(!dit_is_hash_hex("0123456789abcdef0123456789abcdef0"));
  CHECK(!dit_is_hash_hex("0123456789abcdeg0123456789abcdef"));
  CHECK(!dit_is_hash_hex(""));
  CHECK(!dit_is_hash_hex(NULL));
}

static void test_canonical(void) {
  check_canon("{}", "{}");
  check_canon("[]", "[]");
  check_canon(" { \"b\" : 1 , \"a\" : [ true , false , null , \"x\" ] } ",
              "{\"a\":[true,false,null,\"x\"],\"b\":1}");
  /* Nested objects are sorted too; arrays keep their order. */
  check_canon("{\"z\":{\"y\":[{\"d\":1,\"c\":2},3],\"x\":{}},\"a\":0}",
              "{\"a\":0,\"z\":{\"x\":{},\"y\":[{\"c\":2,\"d\":1},3]}}");
  /* Byte order, not locale or case folding: 'B' < '_' < 'a' < 'b' < 0xc3 (UTF-8 e-acute). */
  check_canon("{\"\xc3\xa9\":1,\"b\":2,\"a\":3,\"_\":4,\"B\":5,\"ab\":6}",
              "{\"B\":5,\"_\":4,\"a\":3,\"ab\":6,\"b\":2,\"\xc3\xa9\":1}");

  /* Key order of construction does not matter. */
  cJSON *a = cJSON_CreateObject(), *b = cJSON_CreateObject();
  cJSON_AddNumberToObject(a, "heads", 12);
  cJSON_AddStringToObject(a, "arch", "sm_90");
  cJSON *ia = cJSON_AddObjectToObject(a, "inner");
  cJSON_AddTrueToObject(ia, "t");
  cJSON_AddNullToObject(ia, "n");
  cJSON *ib = cJSON_AddObjectToObject(b, "inner");
  cJSON_AddNullToObject(ib, "n");
  cJSON_AddTrueToObject(ib, "t");
  cJSON_AddStringToObject(b, "arch", "sm_90");
  cJSON_AddNumberToObject(b, "heads", 12);
  char ha[33], hb[33], *ta = NULL, *tb = NULL;
  CHECK_OK(dit_json_canonical(a, &ta));
  CHECK_OK(dit_json_canonical(b, &tb));
  CHECK(ta && tb && strcmp(ta, tb) == 0);
  CHECK(ta && strcmp(ta, "{\"arch\":\"sm_90\",\"heads\":12,\"inner\":{\"n\":null,\"t\":true}}") == 0);
  CHECK_OK(dit_identity_compute(a, ha));
  CHECK_OK(dit_identity_compute(b, hb));
  CHECK(strcmp(ha, hb) == 0);
  /* The identity is the hash of exactly that text. */
  char hx[33];
  dit_hash128_hex(ta, strlen(ta), hx);
  CHECK(strcmp(ha, hx) == 0);
  /* Any change of value changes it. */
  cJSON_ReplaceItemInObjectCaseSensitive(b, "heads", cJSON_CreateNumber(13));
  CHECK_OK(dit_identity_compute(b, hb));
  CHECK(strcmp(ha, hb) != 0);
  free(ta);
  free(tb);
  cJSON_Delete(a);
  cJSON_Delete(b);
}

static void test_numbers(void) {
  check_number(0, "0");
  check_number(-0.0, "0");
  check_number(1, "1");
  check_number(-3, "-3");
  check_number(1e15, "1000000000000000");
  check_number(9007199254740991.0, "9007199254740991");
  check_number(-9007199254740991.0, "-9007199254740991");
  /* From 2^53 on, integers are no longer all exact: printed as doubles. */
  check_number(9007199254740992.0, "9007199254740992");
  check_number(1e20, "1e+20");
  check_number(0.5, "0.5");
  check_number(3.25, "3.25");
  check_number(0.1, "0.10000000000000001");
  check_number(1e-6, "9.9999999999999995e-07");
  check_number(-2.5e-300, "-2.5e-300");
  /* Text that differs only in number spelling canonicalizes alike. */
  check_canon("[1.0, 1e0, 10e-1, 100E-2, -0]", "[1,1,1,1,0]");
  check_canon("[0.1, 1e-1]", "[0.10000000000000001,0.10000000000000001]");

  cJSON *n = cJSON_CreateNumber(INFINITY);
  char *t = NULL;
  CHECK_ERR(dit_json_canonical(n, &t), INVALID_ARGUMENT, "non-finite");
  CHECK(t == NULL);
  cJSON_Delete(n);
  n = cJSON_CreateNumber(NAN);
  CHECK_ERR(dit_json_canonical(n, &t), INVALID_ARGUMENT, "non-finite");
  cJSON_Delete(n);
}

static void test_strings(void) {
  /* Escapes match cJSON's own printer byte for byte. */
  const char *s = "q\"b\\s/ \b\f\n\r\t \x01\x1f\x7f \xc3\xa9 \xe2\x82\xac end";
  cJSON *v = cJSON_CreateString(s);
  char *ours = NULL, *theirs = cJSON_PrintUnformatted(v);
  CHECK_OK(dit_json_canonical(v, &ours));
  CHECK(ours && theirs && strcmp(ours, theirs) == 0);
  CHECK(ours && strcmp(ours, "\"q\\\"b\\\\s/ \\b\\f\\n\\r\\t \\u0001\\u001f\x7f \xc3\xa9 "
                             "\xe2\x82\xac end\"") == 0);
  free(ours);
  cJSON_free(theirs);
  cJSON_Delete(v);
  check_canon("{\"k\\\"ey\":\"\\u00e9\"}", "{\"k\\\"ey\":\"\xc3\xa9\"}");
}

static void test_errors(void) {
  char *t = NULL;
  char hex[33];
  CHECK_ERR(dit_json_canonical(NULL, &t), INVALID_ARGUMENT, "no value");
  CHECK_ERR(dit_identity_compute(NULL, hex), INVALID_ARGUMENT, "compile identity");
  cJSON *v = cJSON_Parse("{\"a\":1,\"b\":{\"x\":1,\"x\":2}}");
  CHECK(v != NULL);
  CHECK_ERR(dit_json_canonical(v, &t), INVALID_ARGUMENT, "duplicate key \"x\"");
  CHECK(t == NULL);
  CHECK_ERR(dit_identity_compute(v, hex), INVALID_ARGUMENT, "duplicate key");
  cJSON_Delete(v);
  v = cJSON_CreateRaw("{}");
  CHECK_ERR(dit_json_canonical(v, &t), INVALID_ARGUMENT, "unsupported");
  cJSON_Delete(v);

  /* Deep nesting is bounded rather than recursing without limit. */
  cJSON *root = cJSON_CreateArray(), *cur = root;
  for (int i = 0; i < 1100; i++) {
    cJSON *next = cJSON_CreateArray();
    cJSON_AddItemToArray(cur, next);
    cur = next;
  }
  CHECK_ERR(dit_json_canonical(root, &t), OUT_OF_RANGE, "nesting");
  cJSON_Delete(root);
}

/* A fixed input whose identity is pinned: if this changes, every published bundle's name
 * changes with it, so it must only change with a schema bump. */
static void test_pinned(void) {
  const char *inputs =
      "{\"model\":{\"_class_name\":\"WanTransformer3DModel\",\"num_layers\":30,"
      "\"eps\":1e-06,\"patch_size\":[1,2,2],\"qk_norm\":\"rms_norm_across_heads\"},"
      "\"weights\":\"0123456789abcdef0123456789abcdef\",\"dtype\":\"bf16\","
      "\"shape\":{\"batch\":1,\"frames\":21,\"height\":60,\"width\":104,\"text_len\":512},"
      "\"topology\":{\"tp\":2,\"cp\":2,\"cfg\":2,\"cp_mode\":\"ring\"},"
      "\"target\":\"sm_90\",\"schema\":[1,0],\"flag\":false,\"none\":null,\"ratio\":0.25}";
  char *canon = canon_of_text(inputs);
  CHECK(canon && strcmp(canon,
                        "{\"dtype\":\"bf16\",\"flag\":false,\"model\":{\"_class_name\":"
                        "\"WanTransformer3DModel\",\"eps\":9.9999999999999995e-07,"
                        "\"num_layers\":30,\"patch_size\":[1,2,2],\"qk_norm\":"
                        "\"rms_norm_across_heads\"},\"none\":null,\"ratio\":0.25,"
                        "\"schema\":[1,0],\"shape\":{\"batch\":1,\"frames\":21,\"height\":60,"
                        "\"text_len\":512,\"width\":104},\"target\":\"sm_90\",\"topology\":"
                        "{\"cfg\":2,\"cp\":2,\"cp_mode\":\"ring\",\"tp\":2},\"weights\":"
                        "\"0123456789abcdef0123456789abcdef\"}") == 0);
  free(canon);
  cJSON *v = cJSON_Parse(inputs);
  char hex[33];
  CHECK_OK(dit_identity_compute(v, hex));
  printf("pinned identity: %s\n", hex);
  CHECK(strcmp(hex, "9cb49853c5f87dc2f83be5a81c59ec91") == 0);
  cJSON_Delete(v);
}

int main(void) {
  test_hex();
  test_streaming();
  test_is_hash_hex();
  test_canonical();
  test_numbers();
  test_strings();
  test_errors();
  test_pinned();
  return check_summary("test_identity");
}
