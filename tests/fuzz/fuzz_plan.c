/* libFuzzer target for the plan parser: any input is parsed without a crash; an accepted plan
 * serializes and parses back to identical text, and every value it binds lies inside the
 * arena it declares. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dit_plan_t *p = NULL;
  dit_status_t s = dit_plan_parse((const char *)data, size, "fuzz", &p);
  if (s) {
    dit_status_free(s);
    return 0;
  }
  for (size_t i = 0; i < p->n_values; i++)
    if (p->values[i].storage == DIT_STORAGE_ARENA && p->values[i].offset + p->values[i].nbytes > p->arena_bytes) abort();
  char *a = NULL, *b = NULL;
  if (dit_plan_to_json(p, &a)) abort();
  dit_plan_t *q = NULL;
  if (dit_plan_parse(a, strlen(a), "again", &q)) abort();
  if (dit_plan_to_json(q, &b)) abort();
  if (strcmp(a, b)) abort();
  free(a);
  free(b);
  dit_plan_free(p);
  dit_plan_free(q);
  return 0;
}
