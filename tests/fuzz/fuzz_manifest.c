/* libFuzzer target for the manifest parser: any input must parse or fail cleanly, and a
 * manifest that parses must serialize, re-parse, and serialize to the same bytes again. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/identity.h"
#include "artifacts/manifest.h"

static void fail(const char *stage, dit_status_t s) {
  fprintf(stderr, "fuzz_manifest: %s: %s: %s\n", stage, dit_code_name(dit_status_code(s)),
          dit_status_message(s));
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dit_manifest_t *m = NULL;
  dit_status_t s = dit_manifest_parse((const char *)data, size, "fuzz", &m);
  if (s) {
    /* A rejection must carry a real code and a message. */
    if (dit_status_code(s) == DIT_CODE_OK || !dit_status_message(s)[0]) abort();
    dit_status_free(s);
    if (m) abort();
    return 0;
  }
  char hex[33];
  if ((s = dit_identity_compute(m->inputs, hex))) fail("identity of accepted inputs", s);
  char *t1 = NULL, *t2 = NULL;
  if ((s = dit_manifest_to_json(m, &t1))) fail("serialize accepted manifest", s);
  dit_manifest_t *m2 = NULL;
  if ((s = dit_manifest_parse(t1, strlen(t1), "fuzz re-parse", &m2))) {
    fprintf(stderr, "%s\n", t1);
    fail("re-parse own output", s);
  }
  if ((s = dit_manifest_to_json(m2, &t2))) fail("serialize re-parsed manifest", s);
  if (strcmp(t1, t2) != 0) {
    fprintf(stderr, "first:\n%s\nsecond:\n%s\n", t1, t2);
    abort();
  }
  free(t1);
  free(t2);
  dit_manifest_free(m2);
  dit_manifest_free(m);
  return 0;
}
