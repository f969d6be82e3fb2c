/* libFuzzer target for the hardware-profile parser (base/hw_profile): any input is parsed
 * without a crash; a refusal carries a message naming the file; an accepted profile is written
 * again and reads back to the same values and measurements. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/hw_profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dit_hw_profile_t p, q;
  dit_hw_measured_t m, mq;
  dit_status_t s = dit_hw_profile_parse((const char *)data, size, "fuzz.json", &p, &m);
  if (s) {
    if (!strstr(dit_status_message(s), "fuzz.json")) abort();
    dit_status_free(s);
    return 0;
  }
  if (!(p.p_peak_tflops > 0 && p.bw_h2d_gbs > 0 && p.eta_comp > 0 && p.eta_comp <= 1 && p.eta_pref > 0 && p.eta_pref <= 1)) abort();
  const unsigned with = (p.overhead_mib > 0 ? DIT_HW_WITH_OVERHEAD : 0) | (p.step_overhead_us > 0 ? DIT_HW_WITH_STEP_OVERHEAD : 0) |
                        (p.coll_gbs > 0 ? DIT_HW_WITH_COLLECTIVES : 0);
  char *text = NULL;
  if (dit_hw_profile_to_json(&p, with, m.forwards ? &m : NULL, &text)) abort();
  if (dit_hw_profile_parse(text, strlen(text), "again", &q, &mq)) abort();
  if (memcmp(&p, &q, sizeof p)) abort();
  if (m.forwards && (strcmp(m.bundle, mq.bundle) || strcmp(m.second, mq.second) || m.forwards != mq.forwards ||
                     m.forward_ms_median != mq.forward_ms_median || m.collectives_ms != mq.collectives_ms || m.chunk_mb != mq.chunk_mb ||
                     m.h2d_bytes != mq.h2d_bytes || m.second_forward_ms_median != mq.second_forward_ms_median ||
                     m.second_collectives_ms != mq.second_collectives_ms))
    abort(); /* field by field: the struct has padding */
  free(text);
  dit_hw_profile_normalize(&q);
  return 0;
}
