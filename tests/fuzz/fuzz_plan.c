/* libFuzzer target for the plan parser: any input is parsed without a crash; a refusal names
 * the source and the field it is about (or says the text is not JSON at all); an accepted plan
 * keeps every index, range and launch limit the runtime relies on, serializes and parses back
 * to identical text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/plan.h"

static void check_refusal(dit_status_t s) {
  const char *m = dit_status_message(s);
  if (!m || strncmp(m, "fuzz.json: ", 11)) abort();
  if (!strstr(m, ": field '") && !strstr(m, "not valid JSON") && !strstr(m, "at the top level") && !strstr(m, "out of memory")) abort();
}

static void check_plan(const dit_plan_t *p) {
  for (size_t i = 0; i < p->n_values; i++) {
    const dit_plan_value_t *v = &p->values[i];
    if (v->storage == DIT_STORAGE_ARENA && (v->ref || v->offset + v->nbytes > p->arena_bytes)) abort();
    if (v->storage != DIT_STORAGE_ARENA && (!v->ref || !v->ref[0])) abort();
    if (v->rank < 0 || v->rank > DIT_MAX_RANK) abort();
  }
  for (size_t i = 0; i < p->n_steps; i++) {
    const dit_plan_step_t *s = &p->steps[i];
    if (s->n_in < 0 || s->n_in > DIT_PLAN_MAX_IN || s->n_out < 0 || s->n_out > DIT_PLAN_MAX_OUT) abort();
    for (int k = 0; k < s->n_in; k++)
      if (s->in[k] < 0 || (size_t)s->in[k] >= p->n_values) abort();
    for (int k = 0; k < s->n_out; k++)
      if (s->out[k] < 0 || (size_t)s->out[k] >= p->n_values) abort();
    if (!s->has_kernel) continue;
    const dit_plan_kernel_t *kn = &s->kernel;
    if ((uint64_t)kn->block[0] * kn->block[1] * kn->block[2] > 1024 || !kn->grid[0] || !kn->grid[1] || !kn->grid[2]) abort();
    if (kn->n_tmaps < 0 || kn->n_tmaps > DIT_PLAN_MAX_TMAPS || !kn->entry[0]) abort();
    for (int t = 0; t < kn->n_tmaps; t++)
      if (kn->tmaps[t].arg >= (uint32_t)(s->n_in + s->n_out) || !kn->tmaps[t].box[0] || kn->tmaps[t].box[0] > 256 || !kn->tmaps[t].box[1] ||
          kn->tmaps[t].box[1] > 256)
        abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dit_plan_t *p = NULL;
  dit_status_t s = dit_plan_parse((const char *)data, size, "fuzz.json", &p);
  if (s) {
    check_refusal(s);
    dit_status_free(s);
    if (p) abort();
    return 0;
  }
  check_plan(p);
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
