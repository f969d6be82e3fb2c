/* The serving worker's request reader on its own: strict base64 (the RFC 4648 vectors; a length
 * not a multiple of 4, a character outside the alphabet, a misplaced '=' and bits set past the
 * data are refused, naming what is wrong), then request bodies: a prompt with its options, and
 * refusals that name the field (a truncated safetensors image as the reader says: DATA_LOSS). */
#include <string.h>

#include "check.h"
#include "runtime/serve/request.h"

static void decodes(const char *text, const char *want) {
  uint8_t *out = NULL;
  size_t n = 99;
  CHECK_OK(dit_base64_decode(text, strlen(text), &out, &n));
  CHECK_EQ_INT((int)n, (int)strlen(want));
  CHECK(out != NULL && (n == 0 || !memcmp(out, want, n)));
  free(out);
}

static void refuses(const char *text, const char *needle) {
  uint8_t *out = (uint8_t *)1;
  size_t n = 99;
  CHECK_ERR(dit_base64_decode(text, strlen(text), &out, &n), INVALID_ARGUMENT, needle);
  CHECK(out == NULL && n == 0);
}

static void test_base64(void) {
  decodes("", "");
  decodes("Zg==", "f");
  decodes("Zm8=", "fo");
  decodes("Zm9v", "foo");
  decodes("Zm9vYg==", "foob");
  decodes("Zm9vYmE=", "fooba");
  decodes("Zm9vYmFy", "foobar");
  decodes("+/+/", "\xfb\xff\xbf");
  refuses("Zm9", "length 3 is not a multiple of 4");
  refuses("Zm9vY", "length 5 is not a multiple of 4");
  refuses("Zm9v!A==", "character 4 is not of the base64 alphabet");
  refuses("Zm9v YQ=", "character 4 is not of the base64 alphabet");
  refuses("Z===", "character 1 is not of the base64 alphabet");
  refuses("Zg=a", "character 2 is not of the base64 alphabet");
  refuses("Zg==Zg==", "character 2 is not of the base64 alphabet");
  refuses("Zh==", "bits set past the data");
  refuses("Zm9=", "bits set past the data");
}

static void test_request(void) {
  dit_serve_request_t r;
  const char *ok = "{\"prompt\": \"a fox\", \"steps\": 12, \"guidance\": 4.5, \"seed\": 7, \"output\": \"png\"}";
  CHECK_OK(dit_serve_request_parse(ok, strlen(ok), &r));
  CHECK(!strcmp(r.spec.prompt, "a fox") && r.spec.steps == 12 && r.spec.have_guidance && r.spec.guidance == 4.5 && r.spec.seed == 7 &&
        r.spec.output == DIT_SERVE_OUT_PNG && !r.inputs && !r.st);
  dit_serve_request_free(&r);
  static const struct {
    const char *body, *needle;
  } bad[] = {
      {"{\"prompt\": \"a fox\", \"steps\": 0}", "steps"},
      {"{\"prompt\": \"a fox\", \"steps\": 10001}", "steps"},
      {"{\"prompt\": \"a fox\", \"output\": \"gif\"}", "output"},
      {"{\"prompt\": \"a fox\", \"guidance\": -1}", "guidance"},
      {"{\"inputs\": \"Zm9vY\"}", "request: field 'inputs': base64: length 5 is not a multiple of 4"},
      {"{\"inputs\": \"Zm9v\"}", "request: field 'inputs' (safetensors)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&r, 0, sizeof r);
    dit_status_t s = dit_serve_request_parse(bad[i].body, strlen(bad[i].body), &r);
    CHECK(s != DIT_OK);
    const dit_code_t c = dit_status_code(s);
    CHECK(c == DIT_CODE_INVALID_ARGUMENT || c == DIT_CODE_OUT_OF_RANGE || (i == 5 && c == DIT_CODE_DATA_LOSS));
    if (s && !strstr(dit_status_message(s), bad[i].needle))
      fprintf(stderr, "body %s: expected '%s' in: %s\n", bad[i].body, bad[i].needle, dit_status_message(s));
    CHECK(s && strstr(dit_status_message(s), bad[i].needle) != NULL);
    dit_status_free(s);
  }
}

int main(void) {
  test_base64();
  test_request();
  return check_summary("test_serve_request");
}
