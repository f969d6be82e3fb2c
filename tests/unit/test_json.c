/* The hostile-JSON reader: document-level refusals, typed getters, paths in messages. */
#include "base/json.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

static dit_status_t parse(const char *text, dit_json_doc_t **doc) {
  return dit_json_parse(text, strlen(text), "t.json", doc);
}

static void test_document(void) {
  dit_json_doc_t *d = NULL;
  CHECK_ERR(parse("{\"a\": 1,}", &d), INVALID_ARGUMENT, "t.json: not valid JSON: syntax error at line 1");
  CHECK_ERR(parse("{\"a\": 1}\n{", &d), INVALID_ARGUMENT, "syntax error at line 2, column 1");
  CHECK_ERR(parse("{\"a\": 1}\n{", &d), INVALID_ARGUMENT, "column 1 (trailing data after the JSON value)");
  dit_status_t broken = parse("{\"a\": 1,}", &d); /* broken, not followed by more */
  CHECK(broken && !strstr(dit_status_message(broken), "trailing"));
  dit_status_free(broken);
  CHECK_ERR(dit_json_parse("{\"a\":\0 1}", 9, "t.json", &d), INVALID_ARGUMENT, "NUL byte at offset 5");
  CHECK_ERR(parse("{\"a\": {\"b\": 1, \"b\": 2}}", &d), INVALID_ARGUMENT, "field 'a': duplicate key \"b\"");
  CHECK_ERR(parse("{\"a\": [1, 1e999]}", &d), OUT_OF_RANGE, "field 'a[1]': number outside the range");
  char deep[400];
  size_t o = 0;
  o += (size_t)snprintf(deep, sizeof deep, "{\"x\": ");
  for (int i = 0; i < 70; i++) deep[o++] = '[';
  for (int i = 0; i < 70; i++) deep[o++] = ']';
  deep[o++] = '}';
  deep[o] = 0;
  CHECK_ERR(parse(deep, &d), OUT_OF_RANGE, "nested deeper than 64 levels");
  CHECK(d == NULL);
  /* Not a terminated buffer: only len bytes are read. */
  CHECK_OK(dit_json_parse("{\"a\": 1}garbage", 8, "t.json", &d));
  dit_json_t r;
  CHECK_OK(dit_json_root(d, &r));
  dit_json_doc_free(d);
  CHECK_OK(parse("[1]", &d));
  CHECK_ERR(dit_json_root(d, &r), INVALID_ARGUMENT, "expected a JSON object at the top level, found an array");
  dit_json_doc_free(d);
}

static void test_getters(void) {
  dit_json_doc_t *d = NULL;
  CHECK_OK(parse("{\"n\": 3, \"f\": 2.5, \"s\": \"hi\", \"e\": \"\", \"b\": true, \"big\": 9007199254740993,"
                 " \"neg\": -4, \"o\": {\"list\": [1, 2, 3], \"mode\": \"ring\", \"bad\": [1, \"x\"]}}",
                 &d));
  dit_json_t r, o, a, e;
  CHECK_OK(dit_json_root(d, &r));
  int64_t i64;
  int i32;
  uint64_t u;
  double f;
  bool b;
  const char *s;
  CHECK_OK(dit_json_int(&r, "n", 0, 10, &i64));
  CHECK_EQ_INT(i64, 3);
  CHECK_ERR(dit_json_int(&r, "n", 4, 10, &i64), OUT_OF_RANGE, "t.json: field 'n': expected an integer in [4, 10], found 3");
  CHECK_ERR(dit_json_int(&r, "f", 0, 10, &i64), INVALID_ARGUMENT, "field 'f': expected an integer, found 2.5");
  CHECK_ERR(dit_json_int(&r, "s", 0, 10, &i64), INVALID_ARGUMENT, "field 's': expected an integer, found a string");
  CHECK_ERR(dit_json_int(&r, "zz", 0, 10, &i64), NOT_FOUND, "field 'zz': missing");
  CHECK_ERR(dit_json_u64(&r, "big", &u), OUT_OF_RANGE, "field 'big'");
  CHECK_ERR(dit_json_u64(&r, "neg", &u), OUT_OF_RANGE, "found -4");
  CHECK_OK(dit_json_i32(&r, "neg", -5, 0, &i32));
  CHECK_EQ_INT(i32, -4);
  CHECK_OK(dit_json_num(&r, "f", 0, 3, &f));
  CHECK_NEAR(f, 2.5, 0);
  CHECK_ERR(dit_json_num(&r, "f", 3, 4, &f), OUT_OF_RANGE, "expected a number in [3, 4], found 2.5");
  CHECK_OK(dit_json_bool(&r, "b", &b));
  CHECK(b);
  CHECK_ERR(dit_json_bool(&r, "n", &b), INVALID_ARGUMENT, "expected a boolean, found a number");
  CHECK_OK(dit_json_str(&r, "s", 8, false, &s));
  CHECK(strcmp(s, "hi") == 0);
  CHECK_ERR(dit_json_str(&r, "s", 1, false, &s), OUT_OF_RANGE, "expected at most 1 bytes, found 2");
  CHECK_ERR(dit_json_str(&r, "e", 8, false, &s), INVALID_ARGUMENT, "field 'e': must not be empty");
  char buf[3];
  CHECK_OK(dit_json_str_copy(&r, "s", buf, sizeof buf, false));
  CHECK(strcmp(buf, "hi") == 0);
  CHECK(dit_json_has(&r, "o") && !dit_json_has(&r, "p"));
  CHECK_OK(dit_json_object(&r, "o", &o));
  CHECK_ERR(dit_json_object(&r, "n", &o), INVALID_ARGUMENT, "field 'n': expected an object, found a number");
  CHECK_OK(dit_json_object(&r, "o", &o));
  static const char *const modes[] = {"gather", "ring", NULL};
  int m = -1;
  CHECK_OK(dit_json_enum(&o, "mode", modes, &m));
  CHECK_EQ_INT(m, 1);
  static const char *const modes2[] = {"gather", "ulysses", NULL};
  CHECK_ERR(dit_json_enum(&o, "mode", modes2, &m), INVALID_ARGUMENT, "field 'o.mode': expected one of gather, ulysses, found \"ring\"");
  size_t n = 0;
  CHECK_ERR(dit_json_array(&o, "list", 2, &a, &n), OUT_OF_RANGE, "field 'o.list': more than 2 entries");
  CHECK_OK(dit_json_array(&o, "list", 3, &a, &n));
  CHECK_EQ_INT(n, 3);
  int64_t vals[3];
  CHECK_OK(dit_json_as_int_array(&a, 3, 0, 9, vals, &n));
  CHECK(vals[0] == 1 && vals[2] == 3);
  CHECK_ERR(dit_json_as_int_array(&a, 3, 2, 9, vals, &n), OUT_OF_RANGE, "field 'o.list[0]'");
  CHECK_OK(dit_json_array(&o, "bad", 8, &a, &n));
  CHECK_ERR(dit_json_as_int_array(&a, 8, 0, 9, vals, &n), INVALID_ARGUMENT, "field 'o.bad[1]': expected an integer, found a string");
  dit_json_iter_t it;
  dit_json_iter_init(&o, &it);
  size_t k = 0;
  while (dit_json_iter_next(&it, &e)) k++;
  CHECK_EQ_INT(k, 3);
  CHECK(strcmp(e.path, "o.bad") == 0);
  static const char *const allowed[] = {"list", "mode", NULL};
  CHECK_ERR(dit_json_check_keys(&o, allowed), INVALID_ARGUMENT, "field 'o': unknown member \"bad\"");
  CHECK_ERR(dit_json_error(&o, DIT_CODE_DATA_LOSS, "x %d", 7), DATA_LOSS, "t.json: field 'o': x 7");
  dit_json_doc_free(d);
}

/* A hostile key cannot put control characters or quotes into a message through its path. */
static void test_hostile_key(void) {
  dit_json_doc_t *d = NULL;
  CHECK_ERR(parse("{\"a\\n\\u001b[31m'x\": {\"b\": 1, \"b\": 2}}", &d), INVALID_ARGUMENT, "field 'a??[31m?x': duplicate key");
  CHECK_OK(parse("{\"k\\u0007\": {\"n\": \"s\"}}", &d));
  dit_json_t r, o;
  int64_t v;
  CHECK_OK(dit_json_root(d, &r));
  CHECK_OK(dit_json_object(&r, "k\a", &o));
  CHECK_ERR(dit_json_int(&o, "n", 0, 1, &v), INVALID_ARGUMENT, "field 'k?.n': expected an integer");
  dit_json_doc_free(d);
}

static void test_quote(void) {
  char q[96];
  dit_json_quote("a\"b\n", q);
  CHECK(strcmp(q, "\"a\\x22b\\x0a\"") == 0);
  char big[300];
  memset(big, 'z', sizeof big - 1);
  big[sizeof big - 1] = 0;
  dit_json_quote(big, q);
  CHECK(strlen(q) < 96 && strstr(q, "...") != NULL);
}

int main(void) {
  test_document();
  test_getters();
  test_hostile_key();
  test_quote();
  return check_summary("test_json");
}
