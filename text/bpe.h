/* Byte-level BPE (bpe.c): the vocabulary, the merges and the byte symbols of one model, with the
 * pre-tokenizations the supported tokenizers use. The tokenizer folder, its added tokens and the
 * special tokens around the ids are tokenizer.c's. */
#ifndef DIT_TEXT_BPE_H
#define DIT_TEXT_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/json.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dit_bpe dit_bpe_t;

/* How a model's text is cut into pieces before the merges. */
typedef enum dit_bpe_pattern {
  /* CLIP: NFC, every whitespace run to one space, lowercase; the pattern
   *   <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
   * (whitespace dropped between matches); "</w>" on each piece's last symbol. */
  DIT_BPE_CLIP = 0,
  /* Qwen2 (GPT-2's byte level, every piece kept, whitespace included):
   *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
   *   \s*[\r\n]+|\s+(?!\S)|\s+ */
  DIT_BPE_QWEN2 = 1,
  /* Llama 3: the same with \p{N}{1,3}. */
  DIT_BPE_LLAMA3 = 2,
} dit_bpe_pattern_t;

typedef struct dit_bpe_options {
  dit_bpe_pattern_t pattern;
  bool nfc;           /* byte-level patterns: NFC first (CLIP's normalization is fixed) */
  bool ignore_merges; /* a piece that is a vocabulary entry is that token, merges or not */
  int32_t unk_id;     /* a symbol missing from the vocabulary: this id, or dropped when -1 */
} dit_bpe_options_t;

/* Parses vocab.json's text (an object of token -> id) and merges.txt's ("a b" per line, an
 * optional "#version" first line). `vocab_name` / `merges_name` label messages. CLIP's options. */
dit_status_t dit_bpe_parse(const char *vocab, size_t vocab_len, const char *vocab_name, const char *merges,
                           size_t merges_len, const char *merges_name, dit_bpe_t **out);
/* The model object of a tokenizer.json: "vocab" an object of token -> id, "merges" an array of
 * "a b" strings or of ["a", "b"] pairs. Only the vocabulary and merges are read here. */
dit_status_t dit_bpe_parse_json(const dit_json_t *model, dit_bpe_t **out);
void dit_bpe_set_options(dit_bpe_t *b, const dit_bpe_options_t *o);
void dit_bpe_free(dit_bpe_t *b);
/* The number of vocabulary entries. */
size_t dit_bpe_vocab_size(const dit_bpe_t *b);
/* The id of a vocabulary entry, or -1. */
int32_t dit_bpe_token_id(const dit_bpe_t *b, const char *token);
/* The ids of `text` (no special tokens) into ids[cap]; *n_out the full count (may exceed cap). */
dit_status_t dit_bpe_encode(const dit_bpe_t *b, const char *text, size_t len, int32_t *ids, size_t cap,
                            size_t *n_out);
/* NFC of UTF-8 text into a malloc'd string (*out_len bytes, NUL-terminated); refuses invalid UTF-8. */
dit_status_t dit_bpe_nfc(const char *text, size_t len, char **out, size_t *out_len);

#ifdef __cplusplus
}
#endif
#endif
