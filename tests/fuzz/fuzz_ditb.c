/* libFuzzer target for the .ditb archive reader: any input is walked without a crash, a
 * read past its end or unbounded work (blobs capped at 64 MiB decoded in all). */
#include <stdint.h>
#include <stdlib.h>

#include "store/archive.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dit_status_free(dit_ditb_check(data, size, "fuzz", (uint64_t)64 << 20));
  return 0;
}
