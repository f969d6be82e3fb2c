/* The tokenizer folder, the special and added tokens and the pipelines' encode conventions
 * (truncation, padding, mask); the models themselves are bpe.c and spm.cc. */
#include "text/tokenizer.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/json.h"
#include "text/bpe.h"
#include "text/spm.h"

#define TOK_MAX_FILE (256u << 20)
#define TOK_MAX_CONFIG (16u << 20)
#define TOK_MAX_ADDED 65536
#define TOK_MAX_SPECIALS 8    /* ids a post-processor puts before or after the text's */
#define TOK_MAX_TOKEN 1024    /* bytes of a special or added token */
#define TOK_BYTE_BPE_LENGTH 512

/* A token matched in the text before pre-tokenization (Hugging Face's added tokens). */
typedef struct {
  char *content;
  size_t len;
  int32_t id;
  bool normalized; /* matched in the normalized text, else in the raw text first */
} added_token_t;

struct dit_tokenizer {
  dit_tokenizer_kind_t kind;
  dit_spm_t *spm;
  dit_bpe_t *bpe;
  bool byte_fallback;  /* SentencePiece: keep byte pieces (else a run of them is one unk) */
  bool nfc;            /* byte-level BPE: the normalizer */
  int max_length;
  int32_t bos, eos, pad, unk; /* -1: none */
  int32_t head[TOK_MAX_SPECIALS], tail[TOK_MAX_SPECIALS]; /* the ids around the text's */
  int n_head, n_tail;
  bool pad_left, truncate_left;
  added_token_t *added;
  size_t n_added, added_cap;
  bool any_normalized;
  bool has_json;       /* the folder's tokenizer.json was read */
  bool qwen2_defaults; /* Qwen2Tokenizer's: named special tokens default to <|endoftext|> */
};

dit_tokenizer_kind_t dit_tokenizer_kind(const dit_tokenizer_t *t) { return t->kind; }
int dit_tokenizer_max_length(const dit_tokenizer_t *t) { return t->max_length; }

void dit_tokenizer_free(dit_tokenizer_t *t) {
  if (!t) return;
  dit_spm_free(t->spm);
  dit_bpe_free(t->bpe);
  for (size_t i = 0; i < t->n_added; i++) free(t->added[i].content);
  free(t->added);
  free(t);
}

static const added_token_t *added_find(const dit_tokenizer_t *t, const char *tok) {
  for (size_t i = 0; i < t->n_added; i++)
    if (!strcmp(t->added[i].content, tok)) return &t->added[i];
  return NULL;
}

static int32_t token_id(const dit_tokenizer_t *t, const char *tok) {
  if (t->spm) return dit_spm_piece_id(t->spm, tok);
  const added_token_t *a = added_find(t, tok);
  return a ? a->id : dit_bpe_token_id(t->bpe, tok);
}

/* Adds an added token with the id the tokenizers library gives it, whatever id the file wrote: the
 * vocabulary's for a vocabulary entry, else the next one past the vocabulary and the added tokens. */
static dit_status_t add_token(dit_tokenizer_t *t, const dit_json_t *where, const char *content, bool normalized) {
  if (added_find(t, content)) return DIT_OK; /* the first definition stands, as in Hugging Face's */
  const int64_t vocab_n = (int64_t)dit_bpe_vocab_size(t->bpe);
  int64_t id = dit_bpe_token_id(t->bpe, content), max = -1;
  for (size_t i = 0; i < t->n_added; i++) max = t->added[i].id > max ? t->added[i].id : max;
  if (id < 0) id = max >= vocab_n ? max + 1 : vocab_n;
  if (id > INT32_MAX) return dit_json_error(where, DIT_CODE_OUT_OF_RANGE, "added token ids past 2^31");
  if (t->n_added == TOK_MAX_ADDED)
    return dit_json_error(where, DIT_CODE_OUT_OF_RANGE, "more than %d added tokens", TOK_MAX_ADDED);
  if (t->n_added == t->added_cap) {
    const size_t cap = t->added_cap ? 2 * t->added_cap : 32;
    added_token_t *p = realloc(t->added, cap * sizeof *p);
    if (!p) return dit_json_error(where, DIT_CODE_RESOURCE_EXHAUSTED, "out of memory for added tokens");
    t->added = p;
    t->added_cap = cap;
  }
  char *c = strdup(content);
  if (!c) return dit_json_error(where, DIT_CODE_RESOURCE_EXHAUSTED, "out of memory for added tokens");
  t->added[t->n_added++] = (added_token_t){c, strlen(c), (int32_t)id, normalized};
  t->any_normalized |= normalized;
  return DIT_OK;
}

/* An AddedToken object: {"content", "special", "normalized", "lstrip", "rstrip", "single_word"} (and
 * "id" in tokenizer.json); stripping and whole-word matching are not implemented, so refused. */
static dit_status_t added_entry(dit_tokenizer_t *t, const dit_json_t *e) {
  static const char *const kUnsupported[] = {"lstrip", "rstrip", "single_word"};
  DIT_RETURN_IF(dit_json_expect_object(e));
  const char *content;
  DIT_RETURN_IF(dit_json_str(e, "content", TOK_MAX_TOKEN, false, &content));
  bool special = false, normalized, flag;
  if (dit_json_has(e, "special")) DIT_RETURN_IF(dit_json_bool(e, "special", &special));
  normalized = !special; /* AddedToken's default */
  if (dit_json_has(e, "normalized")) DIT_RETURN_IF(dit_json_bool(e, "normalized", &normalized));
  for (size_t k = 0; k < sizeof kUnsupported / sizeof *kUnsupported; k++) {
    if (!dit_json_has(e, kUnsupported[k])) continue;
    DIT_RETURN_IF(dit_json_bool(e, kUnsupported[k], &flag));
    if (flag) {
      dit_json_t f;
      DIT_RETURN_IF(dit_json_get(e, kUnsupported[k], &f));
      return dit_json_error(&f, DIT_CODE_UNIMPLEMENTED, "added tokens with %s are not supported (expected false)",
                            kUnsupported[k]);
    }
  }
  return add_token(t, e, content, normalized);
}

/* tokenizer.json's "added_tokens": [{"id": N, "content": ...}, ...] (N checked, not used). */
static dit_status_t json_added_tokens(dit_tokenizer_t *t, const dit_json_t *root) {
  if (!dit_json_has(root, "added_tokens")) return DIT_OK;
  dit_json_t arr, e;
  size_t n;
  DIT_RETURN_IF(dit_json_array(root, "added_tokens", TOK_MAX_ADDED, &arr, &n));
  dit_json_iter_t it;
  dit_json_iter_init(&arr, &it);
  while (dit_json_iter_next(&it, &e)) {
    int64_t id;
    DIT_RETURN_IF(dit_json_expect_object(&e));
    DIT_RETURN_IF(dit_json_int(&e, "id", 0, INT32_MAX, &id));
    DIT_RETURN_IF(added_entry(t, &e));
  }
  return DIT_OK;
}

/* tokenizer_config.json's "added_tokens_decoder": {"<id>": {AddedToken}, ...}, in id order as
 * transformers adds them (the ids checked, not used). */
typedef struct {
  long id;
  const cJSON *v;
} keyed_t;

static int by_id(const void *a, const void *b) {
  const long x = ((const keyed_t *)a)->id, y = ((const keyed_t *)b)->id;
  return (x > y) - (x < y);
}

static dit_status_t config_added_tokens(dit_tokenizer_t *t, const dit_json_t *cfg) {
  dit_json_t obj, e;
  DIT_RETURN_IF(dit_json_object(cfg, "added_tokens_decoder", &obj));
  size_t n = 0;
  for (const cJSON *c = obj.v->child; c; c = c->next) n++;
  if (n > TOK_MAX_ADDED)
    return dit_json_error(&obj, DIT_CODE_OUT_OF_RANGE, "%zu added tokens, at most %d", n, TOK_MAX_ADDED);
  keyed_t *order = malloc((n ? n : 1) * sizeof *order);
  if (!order) return dit_json_error(&obj, DIT_CODE_RESOURCE_EXHAUSTED, "out of memory for %zu added tokens", n);
  dit_json_iter_t it;
  dit_json_iter_init(&obj, &it);
  for (size_t i = 0; dit_json_iter_next(&it, &e); i++) {
    char *end;
    const long id = strtol(e.v->string, &end, 10);
    if (!e.v->string[0] || *end || id < 0 || id > INT32_MAX) {
      free(order);
      return dit_json_error(&e, DIT_CODE_INVALID_ARGUMENT, "expected a token id as the key, found '%.40s'",
                            e.v->string);
    }
    order[i] = (keyed_t){id, e.v};
  }
  qsort(order, n, sizeof *order, by_id);
  dit_status_t s = DIT_OK;
  for (size_t i = 0; i < n && !s; i++) {
    e = obj;
    e.v = order[i].v;
    dit_json_path_key(e.path, obj.path, order[i].v->string);
    s = added_entry(t, &e);
  }
  free(order);
  return s;
}

/* A special token's text: a string or an AddedToken object {"content": ...}; *tok NULL for null. */
static dit_status_t special_text(const dit_json_t *v, const char **tok) {
  *tok = NULL;
  if (cJSON_IsNull(v->v)) return DIT_OK;
  if (cJSON_IsObject(v->v)) return dit_json_str(v, "content", TOK_MAX_TOKEN, false, tok);
  return dit_json_as_str(v, TOK_MAX_TOKEN, false, tok);
}

/* The id of a special token's text. SentencePiece and CLIP: a vocabulary entry's. Byte-level BPE:
 * Hugging Face makes every special token an added token (so it is matched in the text), a new one
 * when the vocabulary lacks it. */
static dit_status_t special_id(dit_tokenizer_t *t, const dit_json_t *v, const char *tok, int32_t *id) {
  if (t->kind == DIT_TOKENIZER_BYTE_BPE) {
    DIT_RETURN_IF(add_token(t, v, tok, false));
    *id = added_find(t, tok)->id;
    return DIT_OK;
  }
  const int32_t found = token_id(t, tok);
  if (found < 0) {
    char q[96];
    dit_json_quote(tok, q);
    return dit_json_error(v, DIT_CODE_NOT_FOUND, "the token %s is not in the tokenizer's vocabulary", q);
  }
  *id = found;
  return DIT_OK;
}

/* A named special token of tokenizer_config.json; null keeps *id, absent takes `fallback` (the
 * class's default text, or NULL: *id kept). */
static dit_status_t special_token(dit_tokenizer_t *t, const dit_json_t *cfg, const char *key, const char *fallback,
                                  int32_t *id) {
  if (!cfg->v || !dit_json_has(cfg, key)) return fallback ? special_id(t, cfg, fallback, id) : DIT_OK;
  dit_json_t v;
  const char *tok;
  DIT_RETURN_IF(dit_json_get(cfg, key, &v));
  DIT_RETURN_IF(special_text(&v, &tok));
  return tok ? special_id(t, &v, tok, id) : DIT_OK;
}

static dit_status_t side(const dit_json_t *cfg, const char *key, bool *left) {
  static const char *const kSides[] = {"right", "left", NULL};
  if (!cfg->v || !dit_json_has(cfg, key)) return DIT_OK;
  int k;
  DIT_RETURN_IF(dit_json_enum(cfg, key, kSides, &k));
  *left = k == 1;
  return DIT_OK;
}

static dit_status_t read_config(dit_tokenizer_t *t, const dit_json_t *cfg) {
  if (cfg->v && dit_json_has(cfg, "model_max_length")) {
    /* Transformers writes 1e30 for "no limit": the family's default stands then. */
    double v;
    DIT_RETURN_IF(dit_json_num(cfg, "model_max_length", 1, 1e308, &v));
    if (v <= DIT_TOKENIZER_MAX_LENGTH) t->max_length = (int)v;
  }
  /* In transformers' order, which sets the ids of new added tokens. Byte-level BPE: the model's own
   * unk stands (the config's is an added token); sep, cls and mask are added tokens alone. */
  static const char *const kNamed[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                                       "mask_token"};
  const bool byte = t->kind == DIT_TOKENIZER_BYTE_BPE;
  int32_t other = -1;
  int32_t *slot[] = {&t->bos, &t->eos, byte ? &other : &t->unk, byte ? &other : NULL, &t->pad, byte ? &other : NULL,
                     byte ? &other : NULL};
  for (size_t k = 0; k < sizeof kNamed / sizeof *kNamed; k++) {
    /* Qwen2Tokenizer's defaults: <|endoftext|> ends, pads and is the unk. */
    const char *fallback = t->qwen2_defaults && (k == 1 || k == 2 || k == 4) ? "<|endoftext|>" : NULL;
    if (slot[k]) DIT_RETURN_IF(special_token(t, cfg, kNamed[k], fallback, slot[k]));
  }
  DIT_RETURN_IF(side(cfg, "padding_side", &t->pad_left));
  DIT_RETURN_IF(side(cfg, "truncation_side", &t->truncate_left));
  if (!byte || !cfg->v) return DIT_OK;
  static const char *const kLists[] = {"additional_special_tokens", "extra_special_tokens"};
  for (size_t k = 0; k < 2; k++) {
    if (!dit_json_has(cfg, kLists[k])) continue;
    dit_json_t arr, e;
    size_t n;
    DIT_RETURN_IF(dit_json_array(cfg, kLists[k], TOK_MAX_ADDED, &arr, &n));
    dit_json_iter_t it;
    dit_json_iter_init(&arr, &it);
    while (dit_json_iter_next(&it, &e)) {
      const char *tok;
      int32_t id;
      DIT_RETURN_IF(special_text(&e, &tok));
      if (tok) DIT_RETURN_IF(special_id(t, &e, tok, &id));
    }
  }
  if (dit_json_has(cfg, "split_special_tokens")) {
    bool split;
    DIT_RETURN_IF(dit_json_bool(cfg, "split_special_tokens", &split));
    if (split) {
      dit_json_t f;
      DIT_RETURN_IF(dit_json_get(cfg, "split_special_tokens", &f));
      return dit_json_error(&f, DIT_CODE_UNIMPLEMENTED, "splitting special tokens is not supported (expected false)");
    }
  }
  /* Either flag named rebuilds the post-processor as [bos] $A [eos], unless the folder has a
   * tokenizer.json, whose post-processor then stands (transformers drops both flags). */
  if (!t->has_json && (dit_json_has(cfg, "add_bos_token") || dit_json_has(cfg, "add_eos_token"))) {
    bool add_bos = false, add_eos = false;
    if (dit_json_has(cfg, "add_bos_token")) DIT_RETURN_IF(dit_json_bool(cfg, "add_bos_token", &add_bos));
    if (dit_json_has(cfg, "add_eos_token")) DIT_RETURN_IF(dit_json_bool(cfg, "add_eos_token", &add_eos));
    t->n_head = t->n_tail = 0;
    if (add_bos && t->bos >= 0) t->head[t->n_head++] = t->bos;
    if (add_eos && t->eos >= 0) t->tail[t->n_tail++] = t->eos;
  }
  return DIT_OK;
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

/* ---- tokenizer.json ---- */

/* A member that must be absent, null or one of the given values (JSON texts, e.g. "false"). */
static dit_status_t expect_value(const dit_json_t *obj, const char *key, const char *const *ok, const char *why) {
  if (!dit_json_has(obj, key)) return DIT_OK;
  dit_json_t v;
  DIT_RETURN_IF(dit_json_get(obj, key, &v));
  if (cJSON_IsNull(v.v)) return DIT_OK;
  char *text = cJSON_PrintUnformatted(v.v);
  bool found = false;
  for (size_t k = 0; text && ok[k]; k++) found |= !strcmp(text, ok[k]);
  char q[96];
  dit_json_quote(text ? text : "?", q);
  free(text);
  return found ? DIT_OK : dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "%s is not supported, found %s", why, q);
}

static dit_status_t expect_type(const dit_json_t *obj, const char *const *types, int *out) {
  dit_json_t v;
  DIT_RETURN_IF(dit_json_get(obj, "type", &v));
  const char *type;
  DIT_RETURN_IF(dit_json_as_str(&v, 64, false, &type));
  for (int k = 0; types[k]; k++)
    if (!strcmp(type, types[k])) {
      *out = k;
      return DIT_OK;
    }
  char q[96], list[160] = "";
  dit_json_quote(type, q);
  for (int k = 0; types[k]; k++) {
    strncat(list, k ? ", " : "", sizeof list - strlen(list) - 1);
    strncat(list, types[k], sizeof list - strlen(list) - 1);
  }
  return dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "%s is not supported (expected %s)", q, list);
}

static const char *const kFalse[] = {"false", NULL}, *const kNull[] = {NULL};

/* model: {"type": "BPE", ...} with the byte-level model's settings; the vocabulary and merges are
 * bpe.c's. Only the vocabulary and merges when `settings` is false (Qwen2Tokenizer's own model). */
static dit_status_t json_model(dit_tokenizer_t *t, const dit_json_t *root, bool settings, dit_bpe_options_t *o) {
  static const char *const kTypes[] = {"BPE", NULL}, *const kEmpty[] = {"\"\"", NULL};
  dit_json_t model;
  int k;
  DIT_RETURN_IF(dit_json_object(root, "model", &model));
  DIT_RETURN_IF(expect_type(&model, kTypes, &k));
  DIT_RETURN_IF(dit_bpe_parse_json(&model, &t->bpe));
  if (!settings) return DIT_OK;
  DIT_RETURN_IF(expect_value(&model, "dropout", kNull, "BPE dropout"));
  DIT_RETURN_IF(expect_value(&model, "continuing_subword_prefix", kEmpty, "a continuing-subword prefix"));
  DIT_RETURN_IF(expect_value(&model, "end_of_word_suffix", kEmpty, "an end-of-word suffix"));
  DIT_RETURN_IF(expect_value(&model, "byte_fallback", kFalse, "byte fallback"));
  if (dit_json_has(&model, "ignore_merges")) DIT_RETURN_IF(dit_json_bool(&model, "ignore_merges", &o->ignore_merges));
  dit_json_t v = {0};
  if (dit_json_has(&model, "unk_token")) DIT_RETURN_IF(dit_json_get(&model, "unk_token", &v));
  if (v.v && !cJSON_IsNull(v.v)) {
    const char *unk;
    DIT_RETURN_IF(dit_json_as_str(&v, TOK_MAX_TOKEN, false, &unk));
    if ((o->unk_id = dit_bpe_token_id(t->bpe, unk)) < 0)
      return dit_json_error(&v, DIT_CODE_NOT_FOUND, "the unknown token is not in the vocabulary");
    /* Hugging Face fuses runs of unknown symbols into one only with fuse_unk. */
    DIT_RETURN_IF(expect_value(&model, "fuse_unk", kFalse, "fusing unknown symbols"));
  }
  return DIT_OK;
}

/* normalizer: null, NFC, or a Sequence of those. */
static dit_status_t json_normalizer(dit_tokenizer_t *t, const dit_json_t *n) {
  static const char *const kTypes[] = {"NFC", "Sequence", NULL};
  if (cJSON_IsNull(n->v)) return DIT_OK;
  int k;
  DIT_RETURN_IF(dit_json_expect_object(n));
  DIT_RETURN_IF(expect_type(n, kTypes, &k));
  if (k == 0) {
    t->nfc = true;
    return DIT_OK;
  }
  dit_json_t arr, e;
  size_t cnt;
  DIT_RETURN_IF(dit_json_array(n, "normalizers", 16, &arr, &cnt));
  dit_json_iter_t it;
  dit_json_iter_init(&arr, &it);
  while (dit_json_iter_next(&it, &e)) DIT_RETURN_IF(json_normalizer(t, &e));
  return DIT_OK;
}

/* pre_tokenizer: Sequence [Split on the Qwen2 or Llama 3 pattern (Isolated), ByteLevel without its
 * own regex and prefix space] (what both models ship). */
static dit_status_t json_pre_tokenizer(const dit_json_t *root, dit_bpe_options_t *o) {
  static const char *const kSeq[] = {"Sequence", NULL}, *const kSplit[] = {"Split", NULL},
                           *const kByte[] = {"ByteLevel", NULL}, *const kIsolated[] = {"\"Isolated\"", NULL};
  static const char *const kPatterns[] = {
      [DIT_BPE_QWEN2] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
                        "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      [DIT_BPE_LLAMA3] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
                         "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  };
  dit_json_t pre, arr, split, byte, pat, rx;
  size_t n;
  int k;
  DIT_RETURN_IF(dit_json_object(root, "pre_tokenizer", &pre));
  DIT_RETURN_IF(expect_type(&pre, kSeq, &k));
  DIT_RETURN_IF(dit_json_array(&pre, "pretokenizers", 16, &arr, &n));
  if (n != 2)
    return dit_json_error(&arr, DIT_CODE_UNIMPLEMENTED,
                          "expected [Split, ByteLevel] (Qwen2's and Llama 3's), found %zu pre-tokenizers", n);
  split = arr, byte = arr;
  split.v = arr.v->child;
  byte.v = arr.v->child->next;
  dit_json_path_idx(split.path, arr.path, 0);
  dit_json_path_idx(byte.path, arr.path, 1);
  DIT_RETURN_IF(dit_json_expect_object(&split));
  DIT_RETURN_IF(expect_type(&split, kSplit, &k));
  DIT_RETURN_IF(dit_json_expect_object(&byte));
  DIT_RETURN_IF(expect_type(&byte, kByte, &k));
  DIT_RETURN_IF(expect_value(&split, "behavior", kIsolated, "a split behavior other than Isolated"));
  DIT_RETURN_IF(expect_value(&split, "invert", kFalse, "an inverted split"));
  DIT_RETURN_IF(expect_value(&byte, "add_prefix_space", kFalse, "a prefix space"));
  DIT_RETURN_IF(expect_value(&byte, "use_regex", kFalse, "ByteLevel's own GPT-2 pattern"));
  DIT_RETURN_IF(dit_json_object(&split, "pattern", &pat));
  if (!dit_json_has(&pat, "Regex")) return dit_json_error(&pat, DIT_CODE_UNIMPLEMENTED, "expected a Regex pattern");
  DIT_RETURN_IF(dit_json_get(&pat, "Regex", &rx));
  const char *re;
  DIT_RETURN_IF(dit_json_as_str(&rx, 4096, false, &re));
  for (int p = DIT_BPE_QWEN2; p <= DIT_BPE_LLAMA3; p++)
    if (!strcmp(re, kPatterns[p])) {
      o->pattern = (dit_bpe_pattern_t)p;
      return DIT_OK;
    }
  char q[96];
  dit_json_quote(re, q);
  return dit_json_error(&rx, DIT_CODE_UNIMPLEMENTED, "the pattern %s is not supported (expected Qwen2's or Llama 3's)",
                        q);
}

/* TemplateProcessing's "single": SpecialToken items around one Sequence "A"; each special's ids from
 * "special_tokens". */
static dit_status_t json_template(dit_tokenizer_t *t, const dit_json_t *p) {
  dit_json_t single, specials, e;
  size_t n;
  DIT_RETURN_IF(dit_json_array(p, "single", 2 * TOK_MAX_SPECIALS + 1, &single, &n));
  DIT_RETURN_IF(dit_json_object(p, "special_tokens", &specials));
  bool seen_a = false;
  t->n_head = t->n_tail = 0;
  dit_json_iter_t it;
  dit_json_iter_init(&single, &it);
  while (dit_json_iter_next(&it, &e)) {
    dit_json_t item;
    const char *id;
    DIT_RETURN_IF(dit_json_expect_object(&e));
    if (dit_json_has(&e, "Sequence")) {
      DIT_RETURN_IF(dit_json_object(&e, "Sequence", &item));
      DIT_RETURN_IF(dit_json_str(&item, "id", 8, false, &id));
      if (strcmp(id, "A") || seen_a)
        return dit_json_error(&item, DIT_CODE_INVALID_ARGUMENT, "expected one sequence \"A\"");
      seen_a = true;
      continue;
    }
    DIT_RETURN_IF(dit_json_object(&e, "SpecialToken", &item));
    DIT_RETURN_IF(dit_json_str(&item, "id", TOK_MAX_TOKEN, false, &id));
    dit_json_t sp, sp_ids;
    int64_t ids[TOK_MAX_SPECIALS];
    size_t n_ids;
    if (!dit_json_has(&specials, id))
      return dit_json_error(&item, DIT_CODE_NOT_FOUND, "'%.80s' is not in the template's special_tokens", id);
    DIT_RETURN_IF(dit_json_object(&specials, id, &sp));
    DIT_RETURN_IF(dit_json_get(&sp, "ids", &sp_ids));
    DIT_RETURN_IF(dit_json_as_int_array(&sp_ids, TOK_MAX_SPECIALS, 0, INT32_MAX, ids, &n_ids));
    int32_t *dst = seen_a ? t->tail : t->head;
    int *cnt = seen_a ? &t->n_tail : &t->n_head;
    if (*cnt + (int)n_ids > TOK_MAX_SPECIALS)
      return dit_json_error(&e, DIT_CODE_OUT_OF_RANGE, "more than %d special ids on one side", TOK_MAX_SPECIALS);
    for (size_t i = 0; i < n_ids; i++) dst[(*cnt)++] = (int32_t)ids[i];
  }
  if (!seen_a) return dit_json_error(&single, DIT_CODE_INVALID_ARGUMENT, "expected the sequence \"A\"");
  return DIT_OK;
}

/* post_processor: null, ByteLevel (offsets only), TemplateProcessing, or a Sequence of those. */
static dit_status_t json_post_processor(dit_tokenizer_t *t, const dit_json_t *p) {
  static const char *const kTypes[] = {"ByteLevel", "TemplateProcessing", "Sequence", NULL};
  if (cJSON_IsNull(p->v)) return DIT_OK;
  int k;
  DIT_RETURN_IF(dit_json_expect_object(p));
  DIT_RETURN_IF(expect_type(p, kTypes, &k));
  if (k == 1) return json_template(t, p);
  if (k == 0) return DIT_OK;
  dit_json_t arr, e;
  size_t n;
  DIT_RETURN_IF(dit_json_array(p, "processors", 16, &arr, &n));
  dit_json_iter_t it;
  dit_json_iter_init(&arr, &it);
  while (dit_json_iter_next(&it, &e)) DIT_RETURN_IF(json_post_processor(t, &e));
  return DIT_OK;
}

/* tokenizer.json of a byte-level BPE; `qwen2`: Qwen2Tokenizer, which takes only the vocabulary,
 * merges and post-processor from it (its normalizer, pattern and added tokens are its own). */
static dit_status_t read_tokenizer_json(dit_tokenizer_t *t, const dit_json_t *root, bool qwen2, dit_bpe_options_t *o) {
  DIT_RETURN_IF(json_model(t, root, !qwen2, o));
  dit_json_t v;
  if (dit_json_has(root, "post_processor")) {
    DIT_RETURN_IF(dit_json_get(root, "post_processor", &v));
    DIT_RETURN_IF(json_post_processor(t, &v));
  }
  if (qwen2) return DIT_OK;
  if (dit_json_has(root, "normalizer")) {
    DIT_RETURN_IF(dit_json_get(root, "normalizer", &v));
    DIT_RETURN_IF(json_normalizer(t, &v));
  }
  DIT_RETURN_IF(json_pre_tokenizer(root, o));
  DIT_RETURN_IF(expect_value(root, "truncation", kNull, "truncation fixed in tokenizer.json"));
  DIT_RETURN_IF(expect_value(root, "padding", kNull, "padding fixed in tokenizer.json"));
  return json_added_tokens(t, root);
}

/* ---- opening ---- */

typedef enum { FAMILY_CLIP, FAMILY_QWEN2, FAMILY_JSON } family_t;

static dit_status_t pick_family(const dit_tokenizer_files_t *f, const dit_json_t *cfg, family_t *out) {
  static const char *const kClasses[] = {"CLIPTokenizer", "CLIPTokenizerFast", "Qwen2Tokenizer", "Qwen2TokenizerFast",
                                         "PreTrainedTokenizerFast", "TokenizersBackend", NULL};
  static const family_t kFamilies[] = {FAMILY_CLIP, FAMILY_CLIP, FAMILY_QWEN2, FAMILY_QWEN2, FAMILY_JSON, FAMILY_JSON};
  *out = f->json ? FAMILY_JSON : FAMILY_CLIP;
  if (!cfg->v || !dit_json_has(cfg, "tokenizer_class")) return DIT_OK;
  dit_json_t v;
  DIT_RETURN_IF(dit_json_get(cfg, "tokenizer_class", &v));
  if (cJSON_IsNull(v.v)) return DIT_OK;
  const char *cls;
  DIT_RETURN_IF(dit_json_as_str(&v, 128, false, &cls));
  for (int k = 0; kClasses[k]; k++)
    if (!strcmp(cls, kClasses[k])) {
      *out = kFamilies[k];
      return DIT_OK;
    }
  char q[96];
  dit_json_quote(cls, q);
  return dit_json_error(&v, DIT_CODE_UNIMPLEMENTED, "%s is not supported (expected CLIPTokenizer, Qwen2Tokenizer or "
                        "PreTrainedTokenizerFast, or a spiece.model)", q);
}

static dit_status_t open_files(dit_tokenizer_t *t, const dit_tokenizer_files_t *f, const dit_json_t *cfg) {
  char vname[4096], mname[4096], jname[4096];
  snprintf(vname, sizeof vname, "%s/vocab.json", f->dir);
  snprintf(mname, sizeof mname, "%s/merges.txt", f->dir);
  snprintf(jname, sizeof jname, "%s/tokenizer.json", f->dir);
  family_t fam;
  DIT_RETURN_IF(pick_family(f, cfg, &fam));
  const bool vocab_merges = fam == FAMILY_CLIP || (fam == FAMILY_QWEN2 && !f->json);
  if (vocab_merges && !f->vocab && !f->merges)
    return DIT_ERR(NOT_FOUND, "%s: no tokenizer files: expected spiece.model (SentencePiece), vocab.json + merges.txt "
                   "or tokenizer.json (BPE)", f->dir);
  if (vocab_merges && (!f->vocab || !f->merges))
    return DIT_ERR(NOT_FOUND, "%s: missing %s (a BPE tokenizer needs vocab.json and merges.txt)", f->dir,
                   f->vocab ? "merges.txt" : "vocab.json");
  if (fam == FAMILY_CLIP) {
    /* CLIP's defaults: <|endoftext|> ends, pads and stands for unknown symbols. */
    *t = (dit_tokenizer_t){.kind = DIT_TOKENIZER_CLIP_BPE, .max_length = 77};
    DIT_RETURN_IF(dit_bpe_parse(f->vocab, f->vocab_len, vname, f->merges, f->merges_len, mname, &t->bpe));
    t->bos = dit_bpe_token_id(t->bpe, "<|startoftext|>");
    t->eos = t->pad = t->unk = dit_bpe_token_id(t->bpe, "<|endoftext|>");
    DIT_RETURN_IF(read_config(t, cfg));
    if (t->eos < 0 || t->pad < 0 || t->bos < 0)
      return DIT_ERR(NOT_FOUND, "%s: the %s token is not in the vocabulary and tokenizer_config.json names none",
                     f->dir, t->eos < 0 ? "end-of-text" : t->pad < 0 ? "padding" : "start-of-text");
    t->head[t->n_head++] = t->bos;
    t->tail[t->n_tail++] = t->eos;
    dit_bpe_set_options(t->bpe, &(dit_bpe_options_t){.pattern = DIT_BPE_CLIP, .unk_id = t->unk});
    return DIT_OK;
  }
  *t = (dit_tokenizer_t){.kind = DIT_TOKENIZER_BYTE_BPE, .max_length = TOK_BYTE_BPE_LENGTH,
                         .bos = -1, .eos = -1, .pad = -1, .unk = -1};
  dit_bpe_options_t o = {.pattern = DIT_BPE_QWEN2, .nfc = true, .unk_id = -1};
  if (fam == FAMILY_QWEN2) t->nfc = t->qwen2_defaults = true;
  else o.nfc = false;
  dit_json_doc_t *doc = NULL;
  dit_status_t s = DIT_OK;
  if (f->json) {
    dit_json_t root;
    t->has_json = true;
    s = dit_json_parse(f->json, f->json_len, jname, &doc);
    if (!s) s = dit_json_root(doc, &root);
    if (!s) s = read_tokenizer_json(t, &root, fam == FAMILY_QWEN2, &o);
    if (!s && fam == FAMILY_JSON) o.nfc = t->nfc;
    /* Qwen2Tokenizer takes tokenizer.json's added tokens only when the config lists none. */
    if (!s && fam == FAMILY_QWEN2 && !(cfg->v && dit_json_has(cfg, "added_tokens_decoder")))
      s = json_added_tokens(t, &root);
  } else {
    s = dit_bpe_parse(f->vocab, f->vocab_len, vname, f->merges, f->merges_len, mname, &t->bpe);
  }
  dit_json_doc_free(doc);
  DIT_RETURN_IF(s);
  dit_bpe_set_options(t->bpe, &o);
  t->unk = o.unk_id;
  if (cfg->v && dit_json_has(cfg, "added_tokens_decoder")) DIT_RETURN_IF(config_added_tokens(t, cfg));
  return read_config(t, cfg);
}

dit_status_t dit_tokenizer_open_files(const dit_tokenizer_files_t *f, dit_tokenizer_t **out) {
  *out = NULL;
  char cname[4096];
  snprintf(cname, sizeof cname, "%s/tokenizer_config.json", f->dir);
  dit_json_doc_t *doc = NULL;
  dit_json_t cfg = {0};
  if (f->config) {
    DIT_RETURN_IF(dit_json_parse(f->config, f->config_len, cname, &doc));
    dit_status_t s = dit_json_root(doc, &cfg);
    if (s) {
      dit_json_doc_free(doc);
      return s;
    }
  }
  dit_tokenizer_t *t = calloc(1, sizeof *t);
  dit_status_t s = t ? open_files(t, f, &cfg) : DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", f->dir);
  dit_json_doc_free(doc);
  if (s) {
    dit_tokenizer_free(t);
    return s;
  }
  *out = t;
  return DIT_OK;
}

static dit_status_t read_optional(const char *dir, const char *name, size_t max, char **text, size_t *len) {
  char path[4096];
  DIT_RETURN_IF(dit_path_join(path, sizeof path, dir, name));
  return dit_path_exists(path) ? dit_file_read(path, max, text, len) : DIT_OK;
}

static dit_status_t open_spm(dit_tokenizer_t *t, const char *dir, const char *spiece) {
  /* T5's defaults: </s> ends the ids, <pad> pads; no bos. */
  *t = (dit_tokenizer_t){.kind = DIT_TOKENIZER_SENTENCEPIECE, .max_length = 512, .bos = -1};
  DIT_RETURN_IF(dit_spm_open(spiece, &t->spm));
  t->eos = dit_spm_piece_id(t->spm, "</s>");
  t->pad = dit_spm_piece_id(t->spm, "<pad>");
  t->unk = dit_spm_unk_id(t->spm);
  DIT_RETURN_IF(read_byte_fallback(t, dir));
  char path[4096];
  DIT_RETURN_IF(dit_path_join(path, sizeof path, dir, "tokenizer_config.json"));
  dit_json_doc_t *doc = NULL;
  dit_json_t cfg = {0};
  dit_status_t s = DIT_OK;
  if (dit_path_exists(path)) {
    s = dit_json_parse_file(path, TOK_MAX_CONFIG, &doc);
    if (!s) s = dit_json_root(doc, &cfg);
  }
  if (!s) s = read_config(t, &cfg);
  dit_json_doc_free(doc);
  DIT_RETURN_IF(s);
  if (t->eos < 0 || t->pad < 0)
    return DIT_ERR(NOT_FOUND, "%s: the %s token is not in the vocabulary and tokenizer_config.json names none", dir,
                   t->eos < 0 ? "end-of-text" : "padding");
  t->tail[t->n_tail++] = t->eos;
  return DIT_OK;
}

dit_status_t dit_tokenizer_open(const char *dir, dit_tokenizer_t **out) {
  *out = NULL;
  if (!dit_is_dir(dir)) return DIT_ERR(NOT_FOUND, "%s: not a directory (expected a tokenizer folder)", dir);
  char spiece[4096];
  DIT_RETURN_IF(dit_path_join(spiece, sizeof spiece, dir, "spiece.model"));
  if (dit_path_exists(spiece)) {
    dit_tokenizer_t *t = calloc(1, sizeof *t);
    if (!t) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", dir);
    dit_status_t s = open_spm(t, dir, spiece);
    if (s) {
      dit_tokenizer_free(t);
      return s;
    }
    *out = t;
    return DIT_OK;
  }
  dit_tokenizer_files_t f = {.dir = dir};
  char *vocab = NULL, *merges = NULL, *json = NULL, *config = NULL;
  dit_status_t s = read_optional(dir, "vocab.json", TOK_MAX_FILE, &vocab, &f.vocab_len);
  if (!s) s = read_optional(dir, "merges.txt", TOK_MAX_FILE, &merges, &f.merges_len);
  if (!s) s = read_optional(dir, "tokenizer.json", TOK_MAX_FILE, &json, &f.json_len);
  if (!s) s = read_optional(dir, "tokenizer_config.json", TOK_MAX_CONFIG, &config, &f.config_len);
  f.vocab = vocab, f.merges = merges, f.json = json, f.config = config;
  if (!s) s = dit_tokenizer_open_files(&f, out);
  free(vocab);
  free(merges);
  free(json);
  free(config);
  return s;
}

/* ---- encoding ---- */

typedef struct {
  int32_t *ids;
  size_t cap, n;
} ids_t;

static dit_status_t bpe_piece(const dit_tokenizer_t *t, const char *text, size_t len, ids_t *out) {
  const size_t at = out->n < out->cap ? out->n : out->cap;
  size_t n;
  DIT_RETURN_IF(dit_bpe_encode(t->bpe, text, len, out->ids + at, out->cap - at, &n));
  out->n += n;
  return DIT_OK;
}

static dit_status_t split_added(const dit_tokenizer_t *t, const char *text, size_t len, bool normalized, ids_t *out);

/* Text between raw-matched added tokens: normalized, then split on the normalized ones. bpe.c
 * normalizes again, which changes nothing (NFC is idempotent). */
static dit_status_t between_raw(const dit_tokenizer_t *t, const char *text, size_t len, ids_t *out) {
  if (!t->any_normalized) return bpe_piece(t, text, len, out);
  if (!t->nfc) return split_added(t, text, len, true, out);
  char *nfc;
  size_t n;
  DIT_RETURN_IF(dit_bpe_nfc(text, len, &nfc, &n));
  dit_status_t s = split_added(t, nfc, n, true, out);
  free(nfc);
  return s;
}

/* Hugging Face's added-token split: at the leftmost place where an added token (of the pass's kind)
 * starts, the longest one there becomes its id; the text between goes on. */
static dit_status_t split_added(const dit_tokenizer_t *t, const char *text, size_t len, bool normalized, ids_t *out) {
  size_t start = 0;
  for (size_t p = 0;; p++) {
    const added_token_t *best = NULL;
    for (size_t k = 0; p < len && k < t->n_added; k++) {
      const added_token_t *a = &t->added[k];
      if (a->normalized == normalized && a->len <= len - p && a->content[0] == text[p] &&
          !memcmp(a->content, text + p, a->len) && (!best || a->len > best->len))
        best = a;
    }
    if (!best && p < len) continue;
    if (p > start) DIT_RETURN_IF(normalized ? bpe_piece(t, text + start, p - start, out)
                                            : between_raw(t, text + start, p - start, out));
    if (!best) return DIT_OK;
    if (out->n < out->cap) out->ids[out->n] = best->id;
    out->n++;
    start = p + best->len;
    p = start - 1;
  }
}

/* The text's ids, no specials: all of them, in a malloc'd *out. */
static dit_status_t encode_text(const dit_tokenizer_t *t, const char *text, size_t len, size_t guess, int32_t **out,
                                size_t *n_out) {
  *out = NULL;
  *n_out = 0;
  for (size_t cap = guess ? guess : 1;;) {
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return DIT_ERR(RESOURCE_EXHAUSTED, "tokenizer: out of memory for %zu ids", cap);
    size_t n = 0;
    dit_status_t s = DIT_OK;
    if (t->spm) {
      s = dit_spm_encode(t->spm, text, len, ids, cap, &n);
    } else if (t->kind == DIT_TOKENIZER_BYTE_BPE) {
      ids_t o = {ids, cap, 0};
      s = split_added(t, text, len, false, &o);
      n = o.n;
    } else {
      s = dit_bpe_encode(t->bpe, text, len, ids, cap, &n);
    }
    if (s || n <= cap) {
      if (s) free(ids);
      else *out = ids, *n_out = n;
      return s;
    }
    free(ids);
    cap = n;
  }
}

dit_status_t dit_tokenizer_encode(const dit_tokenizer_t *t, const char *text, size_t len, int max_length,
                                  int32_t *ids, int32_t *mask) {
  const int n_special = t->n_head + t->n_tail, lo = n_special ? n_special : 1;
  if (max_length < lo || max_length > DIT_TOKENIZER_MAX_LENGTH)
    return DIT_ERR(OUT_OF_RANGE, "tokenizer: max length %d: expected %d..%d (room for the special tokens)", max_length,
                   lo, DIT_TOKENIZER_MAX_LENGTH);
  /* As transformers: padding to max_length needs a pad token, whether or not the ids fill it. */
  if (t->pad < 0)
    return DIT_ERR(FAILED_PRECONDITION, "tokenizer: no padding token to pad to max length %d (tokenizer_config.json "
                   "names no pad_token)", max_length);
  const size_t room = (size_t)max_length;
  int32_t *body;
  size_t n;
  DIT_RETURN_IF(encode_text(t, text, len, room + 1, &body, &n));
  if (t->spm && !t->byte_fallback) {
    /* Without byte fallback the Hugging Face model has one unk for a run of unknown characters
     * where libsentencepiece has their bytes. Writing never overtakes reading (w <= i). */
    size_t w = 0;
    bool prev_byte = false;
    for (size_t i = 0; i < n; i++) {
      const bool byte = dit_spm_is_byte(t->spm, body[i]);
      if (!(byte && prev_byte)) body[w++] = byte ? t->unk : body[i];
      prev_byte = byte;
    }
    n = w;
  }
  const size_t keep = n < room - (size_t)n_special ? n : room - (size_t)n_special;
  const size_t k = keep + (size_t)n_special, at = t->pad_left ? room - k : 0;
  size_t w = at;
  for (int i = 0; i < t->n_head; i++) ids[w++] = t->head[i];
  memcpy(ids + w, body + (t->truncate_left ? n - keep : 0), keep * sizeof *ids);
  w += keep;
  for (int i = 0; i < t->n_tail; i++) ids[w++] = t->tail[i];
  free(body);
  for (size_t i = 0; i < room; i++) {
    const bool real = i >= at && i < at + k;
    mask[i] = real;
    if (!real) ids[i] = t->pad;
  }
  return DIT_OK;
}
