/* libFuzzer target for the step-cache profile reader (runtime/cache_profile): any input is parsed
 * without a crash; a refusal names the file; an accepted profile is written again and reads back
 * to the same values, bit for bit (NaN where null). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cache_profile.h"

/* Equal doubles, NaN equal to NaN. */
static int same(const double *a, const double *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(a[i] == b[i] || (isnan(a[i]) && isnan(b[i])))) return 0;
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dit_cache_profile_t p, q;
  dit_status_t s = dit_cache_profile_parse((const char *)data, size, "fuzz.json", &p);
  if (s) {
    if (!strstr(dit_status_message(s), "fuzz.json")) abort();
    dit_status_free(s);
    return 0;
  }
  if (p.runs < 1 || p.steps < 1 || !(p.target_speedup > 1) || dit_step_cache_check(&p.policy)) abort();
  char *text = NULL;
  if (dit_cache_profile_to_json(&p, &text)) abort();
  if (dit_cache_profile_parse(text, strlen(text), "again", &q)) abort();
  const size_t n = (size_t)p.runs * (size_t)p.steps;
  if (strcmp(p.bundle, q.bundle) || strcmp(p.family, q.family) || strcmp(p.sampler, q.sampler) || p.steps != q.steps ||
      p.runs != q.runs || p.warmup != q.warmup || p.cooldown != q.cooldown || p.points != q.points ||
      memcmp(p.seeds, q.seeds, (size_t)p.runs * sizeof *p.seeds) || !same(p.d, q.d, n) || !same(p.o, q.o, n) ||
      !same(p.rescale, q.rescale, DIT_CACHE_PROFILE_DEGREE + 1) || !same(&p.pearson, &q.pearson, 1) || !same(&p.lag1, &q.lag1, 1) ||
      p.shift != q.shift || p.guidance != q.guidance || p.true_cfg != q.true_cfg || p.target_speedup != q.target_speedup ||
      p.policy.mode != q.policy.mode || p.policy.cadence != q.policy.cadence || p.policy.threshold != q.policy.threshold ||
      p.forwards != q.forwards)
    abort(); /* field by field: the struct has padding */
  free(text);
  dit_cache_profile_free(&p);
  dit_cache_profile_free(&q);
  return 0;
}
