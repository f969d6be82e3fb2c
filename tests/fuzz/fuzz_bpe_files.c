/* vocab.json and merges.txt of a BPE tokenizer, from memory: the input is the vocabulary's text,
 * a NUL byte, then the merges' text. A refusal must carry a code and name its file; an accepted
 * pair must encode a fixed text into ids that are all vocabulary ids or the unk id. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  const char *nul = memchr(text, 0, size);
  const size_t vn = nul ? (size_t)(nul - text) : size;
  const char *merges = nul ? nul + 1 : "";
  const size_t mn = nul ? size - vn - 1 : 0;
  dit_bpe_t *b = NULL;
  dit_status_t s = dit_bpe_parse(text, vn, "vocab.json", merges, mn, "merges.txt", &b);
  if (s) {
    const char *msg = dit_status_message(s);
    if (dit_status_code(s) == DIT_CODE_OK || (!strstr(msg, "vocab.json") && !strstr(msg, "merges.txt"))) abort();
    if (b) abort();
    dit_status_free(s);
    return 0;
  }
  static const char kText[] = "A cat's 42 caf\xc3\xa9s,  \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80!! <|endoftext|>";
  int32_t ids[256];
  size_t n = 0;
  s = dit_bpe_encode(b, kText, sizeof kText - 1, -7, ids, 256, &n);
  if (s || n > 256) abort();
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 && ids[i] != -7) abort();
  dit_bpe_free(b);
  return 0;
}
