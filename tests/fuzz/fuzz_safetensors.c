/* libFuzzer target for the safetensors parser: every input must be either refused with a
 * status or yield name-sorted tensors whose byte ranges lie inside the image. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/safetensors.h"

static volatile uint64_t dit_fuzz_sink;

static void check_image(const uint8_t *data, size_t size) {
  dit_safetensors_t *st;
  dit_status_t s = dit_safetensors_parse(data, size, "fuzz.safetensors", &st);
  if (s) {
    /* Every refusal of the input itself must carry a message naming the image. */
    if (dit_status_code(s) != DIT_CODE_RESOURCE_EXHAUSTED &&
        !strstr(dit_status_message(s), "fuzz.safetensors"))
      __builtin_trap();
    dit_status_free(s);
    return;
  }
  uint64_t sum = 0;
  size_t n = dit_safetensors_count(st);
  for (size_t i = 0; i < n; i++) {
    const dit_st_tensor_t *t = dit_safetensors_at(st, i);
    const uint8_t *p = t->data;
    if (p < data || t->nbytes > (uint64_t)(data + size - p)) __builtin_trap();
    if (i && strcmp(dit_safetensors_at(st, i - 1)->name, t->name) >= 0) __builtin_trap();
    if (dit_safetensors_find(st, t->name) != t) __builtin_trap();
    uint64_t elems = 1;
    for (int d = 0; d < t->rank; d++) elems *= (uint64_t)t->dims[d];
    if (elems * dit_dtype_size(t->dtype) != t->nbytes) __builtin_trap();
    /* Reading every byte lets ASan prove the range is inside the input. */
    for (uint64_t j = 0; j < t->nbytes; j++) sum += p[j];
  }
  dit_fuzz_sink += sum;
  dit_safetensors_close(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_image(data, size);
  /* The length prefix rarely survives mutation of the JSON after it, so also read the input
   * as "header JSON, NUL, data buffer" and supply a matching length: this lets the fuzzer
   * explore the header's meaning rather than its framing. */
  const uint8_t *nul = memchr(data, 0, size);
  if (!nul || nul == data) return 0;
  size_t hlen = (size_t)(nul - data), rest = size - hlen - 1;
  uint8_t *img = malloc(8 + hlen + rest);
  if (!img) return 0;
  for (int i = 0; i < 8; i++) img[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  memcpy(img + 8, data, hlen);
  memcpy(img + 8 + hlen, nul + 1, rest);
  check_image(img, 8 + hlen + rest);
  free(img);
  return 0;
}
