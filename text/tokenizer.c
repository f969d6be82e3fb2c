/* The tokenizer folder, the special tokens and the pipelines' encode conventions (truncation,
 * padding, mask); the models themselves are bpe.c and spm.cc. */
#include "text/tokenizer.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/json.h"
#include "text/spm.h"

#define TOK_MAX_FILE (256u << 20)

struct dit_tokenizer {
  dit_tokenizer_kind_t kind;
  dit_spm_t *spm;
  dit_bpe_t *bpe;
  bool byte_fallback;  /* SentencePiece: keep byte pieces (else a run of them is one unk) */
  int max_length;
  int32_t bos, eos, pad, unk; /* -1: none */
};

dit_tokenizer_kind_t dit_tokenizer_kind(const dit_tokenizer_t *t) { return t->kind; }
int dit_tokenizer_max_length(const dit_tokenizer_t *t) { return t->max_length; }

void dit_tokenizer_free(dit_tokenizer_t *t) {
  if (!t) return;
  dit_spm_free(t->spm);
  dit_bpe_free(t->bpe);
  free(t);
}

static int32_t token_id(const dit_tokenizer_t *t, const char *tok) {
  return t->spm ? dit_spm_piece_id(t->spm, tok) : dit_bpe_token_id(t->bpe, tok);
}

/* A special token of tokenizer_config.json: a string or an AddedToken object {"content": ...};
 * absent keeps *id (the family's default), present must name a vocabulary entry. */
static dit_status_t special_token(const dit_tokenizer_t *t, const dit_json_t *cfg, const char *key, int32_t *id) {
  if (!cfg->v || !dit_json_has(cfg, key)) return DIT_OK;
  dit_json_t v;
  DIT_RETURN_IF(dit_json_get(cfg, key, &v));
  if (cJSON_IsNull(v.v)) return DIT_OK;
  const char *tok;
  if (cJSON_IsObject(v.v)) DIT_RETURN_IF(dit_json_str(&v, "content", 1024, false, &tok));
  else DIT_RETURN_IF(dit_json_as_str(&v, 1024, false, &tok));
  const int32_t found = token_id(t, tok);
  if (found < 0) {
    char q[96];
    dit_json_quote(tok, q);
    return dit_json_error(&v, DIT_CODE_NOT_FOUND, "the token %s is not in the tokenizer's vocabulary", q);
  }
  *id = found;
  return DIT_OK;
}

static dit_status_t read_config(dit_tokenizer_t *t, const char *dir) {
  char path[4096];
  DIT_RETURN_IF(dit_path_join(path, sizeof path, dir, "tokenizer_config.json"));
  dit_json_doc_t *doc = NULL;
  dit_json_t cfg = {0};
  if (dit_path_exists(path)) {
    DIT_RETURN_IF(dit_json_parse_file(path, 16u << 20, &doc));
    dit_status_t s = dit_json_root(doc, &cfg);
    if (s) {
      dit_json_doc_free(doc);
      return s;
    }
  }
  dit_status_t s = DIT_OK;
  if (cfg.v && dit_json_has(&cfg, "model_max_length")) {
    /* Transformers writes 1e30 for "no limit": the family's default stands then. */
    double v;
    s = dit_json_num(&cfg, "model_max_length", 1, 1e308, &v);
    if (!s && v <= DIT_TOKENIZER_MAX_LENGTH) t->max_length = (int)v;
  }
  if (!s) s = special_token(t, &cfg, "bos_token", &t->bos);
  if (!s) s = special_token(t, &cfg, "eos_token", &t->eos);
  if (!s) s = special_token(t, &cfg, "pad_token", &t->pad);
  if (!s) s = special_token(t, &cfg, "unk_token", &t->unk);
  dit_json_doc_free(doc);
  return s;
}

/* tokenizer.json, when the folder has one, says whether the Unigram model falls back to bytes;
 * without it transformers builds the model from spiece.model without byte fallback. */
static dit_status_t read_byte_fallback(dit_tokenizer_t *t, const char *dir) {
  char path[4096];
  DIT_RETURN_IF(dit_path_join(path, sizeof path, dir, "tokenizer.json"));
  if (!dit_path_exists(path)) return DIT_OK;
  dit_json_doc_t *doc = NULL;
  DIT_RETURN_IF(dit_json_parse_file(path, TOK_MAX_FILE, &doc));
  dit_json_t root, model;
  dit_status_t s = dit_json_root(doc, &root);
  if (!s) s = dit_json_object(&root, "model", &model);
  if (!s && dit_json_has(&model, "byte_fallback")) s = dit_json_bool(&model, "byte_fallback", &t->byte_fallback);
  dit_json_doc_free(doc);
  return s;
}

static dit_status_t open_bpe(dit_tokenizer_t *t, const char *vocab_path, const char *merges_path) {
  char *vocab = NULL, *merges = NULL;
  size_t vn = 0, mn = 0;
  dit_status_t s = dit_file_read(vocab_path, TOK_MAX_FILE, &vocab, &vn);
  if (!s) s = dit_file_read(merges_path, TOK_MAX_FILE, &merges, &mn);
  if (!s) s = dit_bpe_parse(vocab, vn, vocab_path, merges, mn, merges_path, &t->bpe);
  free(vocab);
  free(merges);
  return s;
}

dit_status_t dit_tokenizer_open(const char *dir, dit_tokenizer_t **out) {
  *out = NULL;
  if (!dit_is_dir(dir)) return DIT_ERR(NOT_FOUND, "%s: not a directory (expected a tokenizer folder)", dir);
  char spiece[4096], vocab[4096], merges[4096];
  DIT_RETURN_IF(dit_path_join(spiece, sizeof spiece, dir, "spiece.model"));
  DIT_RETURN_IF(dit_path_join(vocab, sizeof vocab, dir, "vocab.json"));
  DIT_RETURN_IF(dit_path_join(merges, sizeof merges, dir, "merges.txt"));
  const bool has_spm = dit_path_exists(spiece), has_vocab = dit_path_exists(vocab), has_merges = dit_path_exists(merges);
  if (!has_spm && has_vocab != has_merges)
    return DIT_ERR(NOT_FOUND, "%s: missing %s (a BPE tokenizer needs vocab.json and merges.txt)", dir,
                   has_vocab ? "merges.txt" : "vocab.json");
  if (!has_spm && !has_vocab)
    return DIT_ERR(NOT_FOUND, "%s: no tokenizer files: expected spiece.model (SentencePiece) or vocab.json + "
                   "merges.txt (BPE)", dir);
  dit_tokenizer_t *t = calloc(1, sizeof *t);
  if (!t) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", dir);
  dit_status_t s;
  if (has_spm) {
    /* T5's defaults: </s> ends the ids, <pad> pads; no bos. */
    *t = (dit_tokenizer_t){.kind = DIT_TOKENIZER_SENTENCEPIECE, .max_length = 512, .bos = -1};
    s = dit_spm_open(spiece, &t->spm);
    if (!s) {
      t->eos = dit_spm_piece_id(t->spm, "</s>");
      t->pad = dit_spm_piece_id(t->spm, "<pad>");
      t->unk = dit_spm_unk_id(t->spm);
      s = read_byte_fallback(t, dir);
    }
  } else {
    /* CLIP's defaults: <|endoftext|> ends, pads and stands for unknown symbols. */
    *t = (dit_tokenizer_t){.kind = DIT_TOKENIZER_CLIP_BPE, .max_length = 77};
    s = open_bpe(t, vocab, merges);
    if (!s) {
      t->bos = dit_bpe_token_id(t->bpe, "<|startoftext|>");
      t->eos = t->pad = t->unk = dit_bpe_token_id(t->bpe, "<|endoftext|>");
    }
  }
  if (!s) s = read_config(t, dir);
  if (!s && (t->eos < 0 || t->pad < 0 || (t->kind == DIT_TOKENIZER_CLIP_BPE && t->bos < 0)))
    s = DIT_ERR(NOT_FOUND, "%s: the %s token is not in the vocabulary and tokenizer_config.json names none", dir,
                t->eos < 0 ? "end-of-text" : t->pad < 0 ? "padding" : "start-of-text");
  if (s) {
    dit_tokenizer_free(t);
    return s;
  }
  *out = t;
  return DIT_OK;
}

dit_status_t dit_tokenizer_encode(const dit_tokenizer_t *t, const char *text, size_t len, int max_length,
                                  int32_t *ids, int32_t *mask) {
  const int n_special = t->bos >= 0 ? 2 : 1;
  if (max_length < n_special || max_length > DIT_TOKENIZER_MAX_LENGTH)
    return DIT_ERR(OUT_OF_RANGE, "tokenizer: max length %d: expected %d..%d (room for the special tokens)", max_length,
                   n_special, DIT_TOKENIZER_MAX_LENGTH);
  /* The body goes after the bos slot; byte pieces may collapse, so the model writes up to all
   * of the room and the truncation comes after. */
  const size_t room = (size_t)max_length;
  int32_t *body = ids + (t->bos >= 0);
  size_t n = 0;
  const size_t cap = room - (t->bos >= 0);
  if (t->spm) {
    DIT_RETURN_IF(dit_spm_encode(t->spm, text, len, body, cap, &n));
    int32_t *all = body;
    if (n > cap) {
      /* Past the room: all of the ids, since collapsing byte runs can bring the count back under. */
      if (!(all = malloc(n * sizeof *all))) return DIT_ERR(RESOURCE_EXHAUSTED, "tokenizer: out of memory for %zu ids", n);
      dit_status_t s = dit_spm_encode(t->spm, text, len, all, n, &n);
      if (s) {
        free(all);
        return s;
      }
    }
    /* Without byte fallback the Hugging Face model has one unk for a run of unknown characters
     * where libsentencepiece has their bytes. Writing never overtakes reading (w <= i). */
    size_t w = 0;
    bool prev_byte = false;
    for (size_t i = 0; i < n; i++) {
      const bool byte = !t->byte_fallback && dit_spm_is_byte(t->spm, all[i]);
      if (!(byte && prev_byte)) {
        if (w < cap) body[w] = byte ? t->unk : all[i];
        w++;
      }
      prev_byte = byte;
    }
    if (all != body) free(all);
    n = w;
  } else {
    DIT_RETURN_IF(dit_bpe_encode(t->bpe, text, len, t->unk, body, cap, &n));
  }
  const size_t keep = n < room - (size_t)n_special ? n : room - (size_t)n_special;
  size_t k = 0;
  if (t->bos >= 0) ids[k++] = t->bos;
  k += keep;
  ids[k++] = t->eos;
  for (size_t i = 0; i < room; i++) mask[i] = i < k;
  for (; k < room; k++) ids[k] = t->pad;
  return DIT_OK;
}
