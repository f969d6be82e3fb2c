/* Text tokenizers read from a pipeline's tokenizer folder, encoding as the Hugging Face tokenizers
 * do (ids identical on tests/data/tok_prompts.json): T5/UMT5's SentencePiece model (spiece.model,
 * through libsentencepiece: the model's own normalizer travels in the file), CLIP's byte-level BPE
 * (vocab.json + merges.txt) and the GPT-2-style byte-level BPE of Qwen2 (Qwen-Image) and Llama 3
 * (HunyuanVideo), our own code (bpe.c). A module of its own on base/ so the runtime and the
 * compiler can both use it; it is the one C++ user (the libsentencepiece shim). */
#ifndef DIT_TEXT_TOKENIZER_H
#define DIT_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dit_tokenizer_kind {
  DIT_TOKENIZER_SENTENCEPIECE = 1, /* spiece.model: ids + </s>, padded with <pad> */
  DIT_TOKENIZER_CLIP_BPE = 2,      /* vocab.json + merges.txt: bos + ids + eos, padded */
  DIT_TOKENIZER_BYTE_BPE = 3,      /* Qwen2 / Llama 3: added tokens split out, the post-processor's specials */
} dit_tokenizer_kind_t;

#define DIT_TOKENIZER_MAX_LENGTH 65536

typedef struct dit_tokenizer dit_tokenizer_t;

/* Opens the tokenizer in `dir`, by its files:
 *   spiece.model                                   SentencePiece (T5, UMT5)
 *   vocab.json + merges.txt, tokenizer_class CLIPTokenizer or none, and no tokenizer.json: CLIP
 *   tokenizer_class Qwen2Tokenizer: Qwen2's byte-level BPE (NFC, Qwen2's pattern), its vocabulary and
 *       merges from tokenizer.json when there is one, else from vocab.json + merges.txt
 *   tokenizer.json, tokenizer_class PreTrainedTokenizerFast, TokenizersBackend or none: a "BPE" model
 *       with the Qwen2 or Llama 3 pre-tokenizer (Split on the pattern, then ByteLevel), normalizer
 *       none or NFC, post-processor none, ByteLevel or TemplateProcessing; anything else is refused
 *       by name.
 * tokenizer_config.json (optional) gives model_max_length, the special tokens (which must be in the
 * vocabulary or the added tokens), added_tokens_decoder, padding_side, truncation_side and
 * add_bos_token / add_eos_token (only without a tokenizer.json, as transformers). Added tokens take
 * the ids the tokenizers library gives them: a vocabulary entry's id, else the next past the
 * vocabulary and the added tokens before it (the ids the files write are checked, not used). */
dit_status_t dit_tokenizer_open(const char *dir, dit_tokenizer_t **out);

/* The texts of a folder's BPE files (text NULL: the folder lacks that file; lengths in bytes),
 * opened as dit_tokenizer_open opens the folder (no spiece.model). `dir` names them in messages. */
typedef struct dit_tokenizer_files {
  const char *dir;
  const char *vocab, *merges, *json, *config; /* vocab.json, merges.txt, tokenizer.json, tokenizer_config.json */
  size_t vocab_len, merges_len, json_len, config_len;
} dit_tokenizer_files_t;
dit_status_t dit_tokenizer_open_files(const dit_tokenizer_files_t *files, dit_tokenizer_t **out);
void dit_tokenizer_free(dit_tokenizer_t *t);
dit_tokenizer_kind_t dit_tokenizer_kind(const dit_tokenizer_t *t);
/* model_max_length from the config, or the family's default (T5 512, CLIP 77, byte-level BPE 512). */
int dit_tokenizer_max_length(const dit_tokenizer_t *t);

/* Encodes `len` bytes of UTF-8 `text` as the pipelines call the tokenizer: special tokens added,
 * truncated to max_length (the specials kept; the text's end cut, or its start with truncation_side
 * "left"), padded to max_length with the pad id (after the ids, or before them with padding_side
 * "left"). ids[] and mask[] hold max_length entries; mask is 1 for real tokens, 0 for padding. */
dit_status_t dit_tokenizer_encode(const dit_tokenizer_t *t, const char *text, size_t len, int max_length,
                                  int32_t *ids, int32_t *mask);

#ifdef __cplusplus
}
#endif
#endif
