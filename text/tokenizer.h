/* Text tokenizers read from a pipeline's tokenizer folder, encoding as the Hugging Face tokenizers
 * do (ids identical on tests/data/tok_prompts.json): T5/UMT5's SentencePiece model (spiece.model,
 * through libsentencepiece: the model's own normalizer travels in the file) and CLIP's byte-level
 * BPE (vocab.json + merges.txt, our own code). A module of its own on base/ so the runtime and the
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
} dit_tokenizer_kind_t;

#define DIT_TOKENIZER_MAX_LENGTH 65536

typedef struct dit_tokenizer dit_tokenizer_t;
typedef struct dit_bpe dit_bpe_t;

/* Opens the tokenizer in `dir`: spiece.model, or vocab.json + merges.txt; tokenizer_config.json
 * (optional) gives model_max_length and the special tokens, which must be in the vocabulary. */
dit_status_t dit_tokenizer_open(const char *dir, dit_tokenizer_t **out);
void dit_tokenizer_free(dit_tokenizer_t *t);
dit_tokenizer_kind_t dit_tokenizer_kind(const dit_tokenizer_t *t);
/* model_max_length from the config, or the family's default (T5 512, CLIP 77). */
int dit_tokenizer_max_length(const dit_tokenizer_t *t);

/* Encodes `len` bytes of UTF-8 `text` as the pipelines call the tokenizer: special tokens added,
 * truncated to max_length (the specials kept), padded to max_length with the pad id. ids[] and
 * mask[] hold max_length entries; mask is 1 for real tokens, 0 for padding. */
dit_status_t dit_tokenizer_encode(const dit_tokenizer_t *t, const char *text, size_t len, int max_length,
                                  int32_t *ids, int32_t *mask);

/* ---- CLIP BPE, exposed for the fuzz target ---- */

/* Parses vocab.json's text (an object of token -> id) and merges.txt's ("a b" per line, an
 * optional "#version" first line). `vocab_name` / `merges_name` label messages. */
dit_status_t dit_bpe_parse(const char *vocab, size_t vocab_len, const char *vocab_name, const char *merges,
                           size_t merges_len, const char *merges_name, dit_bpe_t **out);
void dit_bpe_free(dit_bpe_t *b);
/* The id of a vocabulary entry, or -1. */
int32_t dit_bpe_token_id(const dit_bpe_t *b, const char *token);
/* The ids of `text` (no special tokens) into ids[cap]; *n_out the full count (may exceed cap). */
dit_status_t dit_bpe_encode(const dit_bpe_t *b, const char *text, size_t len, int32_t unk_id, int32_t *ids,
                            size_t cap, size_t *n_out);

#ifdef __cplusplus
}
#endif
#endif
