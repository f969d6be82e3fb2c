/* A BPE tokenizer folder from memory (dit_tokenizer_open_files): the input is vocab.json's text, NUL,
 * merges.txt's, NUL, tokenizer.json's, NUL, tokenizer_config.json's; an empty or missing part is a
 * file the folder lacks. A refusal must carry a code, name the folder and leave no tokenizer; an
 * accepted folder must encode a fixed text (accents, CJK, emoji, contractions, digits, newlines,
 * whitespace runs, special tokens' texts) at two lengths into ids >= 0 and a mask that marks the
 * pad ids alone. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

#define DIR_NAME "fuzzdir"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *part[4] = {NULL};
  size_t len[4] = {0}, at = 0;
  for (int k = 0; k < 4 && at <= size; k++) {
    const char *nul = k < 3 ? memchr(data + at, 0, size - at) : NULL;
    const size_t stop = nul ? (size_t)(nul - (const char *)data) : size;
    if (stop > at) part[k] = (const char *)data + at, len[k] = stop - at;
    at = stop + 1;
  }
  const dit_tokenizer_files_t f = {.dir = DIR_NAME, .vocab = part[0], .vocab_len = len[0], .merges = part[1],
                                   .merges_len = len[1], .json = part[2], .json_len = len[2], .config = part[3],
                                   .config_len = len[3]};
  dit_tokenizer_t *t = NULL;
  dit_status_t s = dit_tokenizer_open_files(&f, &t);
  if (s) {
    if (dit_status_code(s) == DIT_CODE_OK || !strstr(dit_status_message(s), DIR_NAME) || t) abort();
    dit_status_free(s);
    return 0;
  }
  const dit_tokenizer_kind_t kind = dit_tokenizer_kind(t);
  if (kind != DIT_TOKENIZER_CLIP_BPE && kind != DIT_TOKENIZER_BYTE_BPE) abort();
  static const char kText[] =
      "A cat's 42 caf\xc3\xa9s,  \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80!! <|endoftext|><|im_start|>user\r\n\t "
      "x'\xc5\xbf "
      "12345 THEY'RE   \n\n <|begin_of_text|>cafe\xcc\x81";
  static const int kLengths[] = {3, 96};
  int32_t ids[96], mask[96];
  for (size_t k = 0; k < sizeof kLengths / sizeof *kLengths; k++) {
    const int n = kLengths[k];
    s = dit_tokenizer_encode(t, kText, sizeof kText - 1, n, ids, mask);
    if (s) { /* only a length too short for the specials or a missing pad token may be refused */
      const dit_code_t c = dit_status_code(s);
      if (c != DIT_CODE_OUT_OF_RANGE && c != DIT_CODE_FAILED_PRECONDITION) abort();
      dit_status_free(s);
      continue;
    }
    int32_t pad = -1;
    for (int i = 0; i < n; i++) {
      if (ids[i] < 0 || (mask[i] != 0 && mask[i] != 1)) abort();
      if (!mask[i] && pad >= 0 && ids[i] != pad) abort();
      if (!mask[i]) pad = ids[i];
    }
  }
  dit_tokenizer_free(t);
  return 0;
}
