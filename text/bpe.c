/* Byte-level BPE as Hugging Face's tokenizers run it for CLIP, Qwen2 and Llama 3 (bpe.h has the
 * patterns). Each piece's UTF-8 bytes become GPT-2's printable byte symbols, then the merges apply
 * by rank. CLIP's normalization (NFC, whitespace runs to one space, lowercase) and its "</w>" on a
 * piece's last symbol are fixed; Qwen2 has NFC alone, Llama 3 none. Unicode data (NFC, categories,
 * case) comes from utf8proc; the patterns are matched by hand over code points. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "base/json.h"
#include "text/bpe.h"

#define BPE_MAX_VOCAB (1u << 22)
#define BPE_MAX_TOKEN 1024 /* bytes of one vocabulary entry */

typedef struct {
  char *key; /* NULL: free slot */
  int32_t id;
} vocab_slot_t;

typedef struct {
  uint64_t pair; /* (left id << 32 | right id) + 1; 0: free slot */
  int32_t rank, id;
} merge_slot_t;

struct dit_bpe {
  vocab_slot_t *vocab;
  size_t vocab_cap, vocab_n;
  merge_slot_t *merges;
  size_t merges_cap;
  char byte_sym[256][3]; /* each byte's printable symbol, UTF-8 (at most 2 bytes) */
  dit_bpe_options_t opt;
};

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

static uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  return x ^ (x >> 33);
}

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c <<= 1;
  return c;
}

static int32_t vocab_find(const dit_bpe_t *b, const char *s, size_t n) {
  for (size_t i = hash_bytes(s, n) & (b->vocab_cap - 1);; i = (i + 1) & (b->vocab_cap - 1)) {
    const vocab_slot_t *e = &b->vocab[i];
    if (!e->key) return -1;
    if (strlen(e->key) == n && !memcmp(e->key, s, n)) return e->id;
  }
}

size_t dit_bpe_vocab_size(const dit_bpe_t *b) { return b->vocab_n; }

int32_t dit_bpe_token_id(const dit_bpe_t *b, const char *token) { return vocab_find(b, token, strlen(token)); }

static const merge_slot_t *merge_find(const dit_bpe_t *b, int32_t l, int32_t r) {
  const uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
  for (size_t i = hash_u64(key) & (b->merges_cap - 1);; i = (i + 1) & (b->merges_cap - 1)) {
    const merge_slot_t *e = &b->merges[i];
    if (!e->pair) return NULL;
    if (e->pair == key) return e;
  }
}

void dit_bpe_free(dit_bpe_t *b) {
  if (!b) return;
  for (size_t i = 0; b->vocab && i < b->vocab_cap; i++) free(b->vocab[i].key);
  free(b->vocab);
  free(b->merges);
  free(b);
}

/* GPT-2's reversible map: printable Latin-1 bytes stand for themselves, the others take the code
 * points from 256 up in byte order. */
static void init_byte_symbols(dit_bpe_t *b) {
  int next = 256;
  for (int c = 0; c < 256; c++) {
    const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    utf8proc_ssize_t n = utf8proc_encode_char(printable ? c : next++, (utf8proc_uint8_t *)b->byte_sym[c]);
    b->byte_sym[c][n] = 0;
  }
}

/* The vocabulary from an object of token -> id (vocab.json, or tokenizer.json's model.vocab). */
static dit_status_t vocab_from_json(dit_bpe_t *b, const dit_json_t *obj) {
  dit_status_t s = dit_json_expect_object(obj);
  size_t n = 0;
  for (const cJSON *c = s ? NULL : obj->v->child; c; c = c->next) n++;
  if (!s && n == 0)
    s = dit_json_error(obj, DIT_CODE_INVALID_ARGUMENT, "expected an object of token -> id, found an empty one");
  if (!s && n > BPE_MAX_VOCAB)
    s = dit_json_error(obj, DIT_CODE_OUT_OF_RANGE, "%zu entries, at most %u supported", n, BPE_MAX_VOCAB);
  if (!s) {
    b->vocab_cap = pow2_at_least(2 * n);
    if (!(b->vocab = calloc(b->vocab_cap, sizeof *b->vocab)))
      s = dit_json_error(obj, DIT_CODE_RESOURCE_EXHAUSTED, "out of memory for %zu entries", n);
  }
  dit_json_iter_t it;
  dit_json_t e;
  if (!s) dit_json_iter_init(obj, &it);
  while (!s && dit_json_iter_next(&it, &e)) {
    int64_t id;
    const char *key = e.v->string;
    const size_t klen = strlen(key);
    if ((s = dit_json_as_int(&e, 0, INT32_MAX, &id))) break;
    if (klen == 0 || klen > BPE_MAX_TOKEN) {
      s = dit_json_error(&e, DIT_CODE_INVALID_ARGUMENT, "expected a token of 1..%d bytes, found %zu", BPE_MAX_TOKEN,
                         klen);
      break;
    }
    size_t i = hash_bytes(key, klen) & (b->vocab_cap - 1);
    while (b->vocab[i].key) i = (i + 1) & (b->vocab_cap - 1); /* keys are unique: the JSON reader refuses repeats */
    if (!(b->vocab[i].key = strdup(key))) s = dit_json_error(&e, DIT_CODE_RESOURCE_EXHAUSTED, "out of memory");
    b->vocab[i].id = (int32_t)id;
    b->vocab_n++;
  }
  return s;
}

static dit_status_t parse_vocab(dit_bpe_t *b, const char *text, size_t len, const char *name) {
  dit_json_doc_t *doc = NULL;
  DIT_RETURN_IF(dit_json_parse(text, len, name, &doc));
  dit_json_t root;
  dit_status_t s = dit_json_root(doc, &root);
  if (!s) s = vocab_from_json(b, &root);
  dit_json_doc_free(doc);
  return s;
}

static dit_status_t alloc_merges(dit_bpe_t *b, size_t n, const char *name) {
  b->merges_cap = pow2_at_least(2 * n);
  b->merges = calloc(b->merges_cap, sizeof *b->merges);
  return b->merges ? DIT_OK : DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", name);
}

/* "a b": the offset of the one space between two non-empty tokens, or 0 when malformed. */
static size_t pair_split(const char *s, size_t n) {
  const char *sp = memchr(s, ' ', n);
  if (!sp || sp == s || sp + 1 == s + n || memchr(sp + 1, ' ', s + n - sp - 1) || memchr(s, 0, n)) return 0;
  return (size_t)(sp - s);
}

/* Adds the merge of l and r at the next rank (a repeated merge keeps its first, lower rank). On a
 * token missing from the vocabulary returns false with it in *miss / *miss_n (tok holds the
 * concatenation, 2 * BPE_MAX_TOKEN bytes). The caller has checked nl + nr <= 2 * BPE_MAX_TOKEN. */
static bool add_merge(dit_bpe_t *b, const char *l, size_t nl, const char *r, size_t nr, int32_t *rank, char *tok,
                      const char **miss, size_t *miss_n) {
  const int32_t li = vocab_find(b, l, nl), ri = vocab_find(b, r, nr);
  memcpy(tok, l, nl);
  memcpy(tok + nl, r, nr);
  const int32_t m = vocab_find(b, tok, nl + nr);
  if (li < 0 || ri < 0 || m < 0) {
    *miss = li < 0 ? l : ri < 0 ? r : tok;
    *miss_n = li < 0 ? nl : ri < 0 ? nr : nl + nr;
    return false;
  }
  const uint64_t key = ((uint64_t)(uint32_t)li << 32 | (uint32_t)ri) + 1;
  size_t i = hash_u64(key) & (b->merges_cap - 1);
  while (b->merges[i].pair && b->merges[i].pair != key) i = (i + 1) & (b->merges_cap - 1);
  if (!b->merges[i].pair) b->merges[i] = (merge_slot_t){key, (*rank)++, m};
  return true;
}

static dit_status_t parse_merges(dit_bpe_t *b, const char *text, size_t len, const char *name) {
  size_t lines = 1;
  for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
  DIT_RETURN_IF(alloc_merges(b, lines, name));
  char tok[2 * BPE_MAX_TOKEN + 1];
  int32_t rank = 0;
  size_t line_no = 0;
  for (size_t pos = 0; pos < len;) {
    const char *line = text + pos;
    const char *nl = memchr(line, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - line) : len - pos;
    pos += n + (nl != NULL);
    line_no++;
    if (n && line[n - 1] == '\r') n--;
    if (line_no == 1 && n >= 8 && !memcmp(line, "#version", 8)) continue;
    if (n == 0 && pos >= len) break; /* the last line's newline */
    const size_t nl_ = pair_split(line, n);
    if (!nl_)
      return DIT_ERR(INVALID_ARGUMENT, "%s: line %zu: expected two tokens separated by one space, found '%.*s'",
                     name, line_no, (int)(n > 80 ? 80 : n), line);
    if (n - 1 > 2 * BPE_MAX_TOKEN)
      return DIT_ERR(OUT_OF_RANGE, "%s: line %zu: a merge of %zu bytes, at most %d", name, line_no, n - 1,
                     2 * BPE_MAX_TOKEN);
    const char *miss;
    size_t miss_n;
    if (!add_merge(b, line, nl_, line + nl_ + 1, n - nl_ - 1, &rank, tok, &miss, &miss_n))
      return DIT_ERR(NOT_FOUND, "%s: line %zu: '%.*s' is not in the vocabulary", name, line_no, (int)miss_n, miss);
  }
  return DIT_OK;
}

/* tokenizer.json's merges: "a b" strings (the older form) or ["a", "b"] pairs, one form throughout
 * (the tokenizers library refuses a mix). */
static dit_status_t merges_from_json(dit_bpe_t *b, const dit_json_t *model) {
  dit_json_t arr, e;
  size_t n;
  DIT_RETURN_IF(dit_json_array(model, "merges", BPE_MAX_VOCAB, &arr, &n));
  DIT_RETURN_IF(alloc_merges(b, n, arr.what));
  char tok[2 * BPE_MAX_TOKEN + 1];
  int32_t rank = 0;
  dit_json_iter_t it;
  dit_json_iter_init(&arr, &it);
  bool pairs = false;
  while (dit_json_iter_next(&it, &e)) {
    const char *l, *r;
    size_t nl, nr;
    if (it.i > 1 && pairs != cJSON_IsArray(e.v) && (cJSON_IsString(e.v) || cJSON_IsArray(e.v)))
      return dit_json_error(&e, DIT_CODE_INVALID_ARGUMENT, "expected %s like the first merge (the forms do not mix)",
                            pairs ? "a pair [\"a\", \"b\"]" : "\"a b\"");
    pairs = cJSON_IsArray(e.v);
    if (cJSON_IsString(e.v)) {
      const char *str;
      DIT_RETURN_IF(dit_json_as_str(&e, 2 * BPE_MAX_TOKEN + 1, false, &str));
      const size_t n_str = strlen(str);
      if (!(nl = pair_split(str, n_str)))
        return dit_json_error(&e, DIT_CODE_INVALID_ARGUMENT, "expected two tokens separated by one space, found '%.*s'",
                              (int)(n_str > 80 ? 80 : n_str), str);
      l = str, r = str + nl + 1, nr = n_str - nl - 1;
    } else if (cJSON_IsArray(e.v)) {
      size_t k;
      DIT_RETURN_IF(dit_json_expect_array(&e, 2, &k));
      dit_json_t le = e, re = e;
      le.v = e.v->child;
      re.v = k == 2 ? le.v->next : NULL;
      if (k != 2 || !cJSON_IsString(le.v) || !cJSON_IsString(re.v) || !le.v->valuestring[0] || !re.v->valuestring[0])
        return dit_json_error(&e, DIT_CODE_INVALID_ARGUMENT, "expected a pair of non-empty tokens [\"a\", \"b\"]");
      l = le.v->valuestring, r = re.v->valuestring, nl = strlen(l), nr = strlen(r);
      if (nl + nr > 2 * BPE_MAX_TOKEN)
        return dit_json_error(&e, DIT_CODE_OUT_OF_RANGE, "a merge of %zu bytes, at most %d", nl + nr,
                              2 * BPE_MAX_TOKEN);
    } else {
      return dit_json_error(&e, DIT_CODE_INVALID_ARGUMENT, "expected \"a b\" or [\"a\", \"b\"], found %s",
                            dit_json_type_name(e.v));
    }
    const char *miss;
    size_t miss_n;
    if (!add_merge(b, l, nl, r, nr, &rank, tok, &miss, &miss_n))
      return dit_json_error(&e, DIT_CODE_NOT_FOUND, "'%.*s' is not in the vocabulary", (int)miss_n, miss);
  }
  return DIT_OK;
}

static dit_bpe_t *bpe_new(void) {
  dit_bpe_t *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  init_byte_symbols(b);
  b->opt = (dit_bpe_options_t){.pattern = DIT_BPE_CLIP, .unk_id = -1};
  return b;
}

dit_status_t dit_bpe_parse(const char *vocab, size_t vocab_len, const char *vocab_name, const char *merges,
                           size_t merges_len, const char *merges_name, dit_bpe_t **out) {
  *out = NULL;
  dit_bpe_t *b = bpe_new();
  if (!b) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", vocab_name);
  dit_status_t s = parse_vocab(b, vocab, vocab_len, vocab_name);
  if (!s) s = parse_merges(b, merges, merges_len, merges_name);
  if (s) {
    dit_bpe_free(b);
    return s;
  }
  *out = b;
  return DIT_OK;
}

dit_status_t dit_bpe_parse_json(const dit_json_t *model, dit_bpe_t **out) {
  *out = NULL;
  dit_bpe_t *b = bpe_new();
  if (!b) return dit_json_error(model, DIT_CODE_RESOURCE_EXHAUSTED, "out of memory");
  dit_json_t vocab;
  dit_status_t s = dit_json_object(model, "vocab", &vocab);
  if (!s) s = vocab_from_json(b, &vocab);
  if (!s) s = merges_from_json(b, model);
  if (s) {
    dit_bpe_free(b);
    return s;
  }
  *out = b;
  return DIT_OK;
}

void dit_bpe_set_options(dit_bpe_t *b, const dit_bpe_options_t *o) { b->opt = *o; }

/* ---- encoding ---- */

static bool is_white_space(int32_t c) { /* Unicode's White_Space property (the patterns' \s) */
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool is_letter(int32_t c) {
  const utf8proc_category_t k = utf8proc_category(c);
  return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}

static bool is_number(int32_t c) {
  const utf8proc_category_t k = utf8proc_category(c);
  return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}

static bool is_newline(int32_t c) { return c == '\r' || c == '\n'; }

/* Neither whitespace, letter nor number: the patterns' [^\s\p{L}\p{N}]. */
static bool is_other(int32_t c) { return !is_white_space(c) && !is_letter(c) && !is_number(c); }

typedef struct {
  const dit_bpe_t *b;
  int32_t *ids;
  size_t cap, n;
  int32_t *sym; /* the piece's symbols, reused across pieces */
  size_t sym_cap;
  char *word; /* the piece's symbol text (ignore_merges) */
  size_t word_cap;
} enc_t;

static void emit(enc_t *e, int32_t id) {
  if (e->n < e->cap) e->ids[e->n] = id;
  e->n++;
}

static bool grow(void **p, size_t *cap, size_t n, size_t elem) {
  if (n <= *cap) return true;
  void *q = realloc(*p, n * elem);
  if (!q) return false;
  *p = q;
  *cap = n;
  return true;
}

/* One pre-tokenized piece (code points cp[0..n)): its bytes' symbols (CLIP: "</w>" on the last),
 * the whole piece as one token when ignore_merges finds it in the vocabulary, else the lowest-ranked
 * merge applied everywhere, left to right, until none applies. */
static dit_status_t encode_piece(enc_t *e, const int32_t *cp, size_t n) {
  const dit_bpe_t *b = e->b;
  const bool clip = b->opt.pattern == DIT_BPE_CLIP;
  uint8_t bytes[4];
  size_t total = 0;
  for (size_t i = 0; i < n; i++) total += (size_t)utf8proc_encode_char(cp[i], bytes);
  if (!grow((void **)&e->sym, &e->sym_cap, total, sizeof *e->sym) ||
      (b->opt.ignore_merges && !grow((void **)&e->word, &e->word_cap, 2 * total, 1)))
    return DIT_ERR(RESOURCE_EXHAUSTED, "tokenizer: out of memory for a piece of %zu bytes", total);
  size_t ns = 0, nw = 0, k_byte = 0;
  for (size_t i = 0; i < n; i++) {
    const size_t nb = (size_t)utf8proc_encode_char(cp[i], bytes);
    for (size_t k = 0; k < nb; k++, k_byte++) {
      char s[8];
      const char *sym = b->byte_sym[bytes[k]];
      const bool last = clip && k_byte + 1 == total;
      const size_t sl = strlen(sym);
      memcpy(s, sym, sl);
      if (last) memcpy(s + sl, "</w>", 4);
      if (b->opt.ignore_merges) {
        memcpy(e->word + nw, sym, sl);
        nw += sl;
      }
      const int32_t id = vocab_find(b, s, sl + (last ? 4 : 0));
      if (id >= 0 || b->opt.unk_id >= 0) e->sym[ns++] = id >= 0 ? id : b->opt.unk_id; /* no unk: dropped */
    }
  }
  if (b->opt.ignore_merges && nw <= BPE_MAX_TOKEN) {
    const int32_t id = vocab_find(b, e->word, nw);
    if (id >= 0) {
      emit(e, id);
      return DIT_OK;
    }
  }
  for (;;) {
    const merge_slot_t *best = NULL;
    for (size_t i = 0; i + 1 < ns; i++) {
      const merge_slot_t *m = merge_find(b, e->sym[i], e->sym[i + 1]);
      if (m && (!best || m->rank < best->rank)) best = m;
    }
    if (!best) break;
    const int32_t l = (int32_t)((best->pair - 1) >> 32), r = (int32_t)((best->pair - 1) & 0xffffffffu);
    size_t w = 0;
    for (size_t i = 0; i < ns; i++) {
      if (i + 1 < ns && e->sym[i] == l && e->sym[i + 1] == r) {
        e->sym[w++] = best->id;
        i++;
      } else {
        e->sym[w++] = e->sym[i];
      }
    }
    ns = w;
  }
  for (size_t i = 0; i < ns; i++) emit(e, e->sym[i]);
  return DIT_OK;
}

static bool has_prefix(const int32_t *cp, size_t n, const char *ascii) {
  size_t k = 0;
  for (; ascii[k]; k++)
    if (k >= n || cp[k] != (uint8_t)ascii[k]) return false;
  return true;
}

/* CLIP's pattern: the length of its match at cp[0] (0: whitespace, which no alternative matches). */
static size_t clip_match_len(const int32_t *cp, size_t n) {
  static const char *const kFixed[] = {"<|startoftext|>", "<|endoftext|>", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
  for (size_t k = 0; k < sizeof kFixed / sizeof *kFixed; k++)
    if (has_prefix(cp, n, kFixed[k])) return strlen(kFixed[k]);
  size_t i = 1;
  if (is_letter(cp[0])) {
    while (i < n && is_letter(cp[i])) i++;
    return i;
  }
  if (is_number(cp[0])) return 1;
  if (is_white_space(cp[0])) return 0;
  while (i < n && !is_white_space(cp[i]) && !is_letter(cp[i]) && !is_number(cp[i])) i++;
  return i;
}

/* (?i:...): ASCII letters either case; 's also matches U+017F (long s), whose case folding is s. */
static bool contraction_char(int32_t c, char lower) {
  return c == lower || c == lower - 32 || (lower == 's' && c == 0x17F);
}

/* The Qwen2 / Llama 3 pattern (bpe.h): the length of the match at cp[0], as a backtracking engine
 * finds it (alternatives in order, quantifiers greedy); every code point starts some match. */
static size_t gpt_match_len(const int32_t *cp, size_t n, size_t max_digits) {
  static const char *const kSuffix[] = {"s", "t", "re", "ve", "m", "ll", "d"};
  if (cp[0] == '\'') {
    for (size_t k = 0; k < sizeof kSuffix / sizeof *kSuffix; k++) {
      const size_t m = strlen(kSuffix[k]);
      size_t j = 0;
      while (j < m && 1 + j < n && contraction_char(cp[1 + j], kSuffix[k][j])) j++;
      if (j == m) return 1 + m;
    }
  }
  /* [^\r\n\p{L}\p{N}]?\p{L}+ */
  size_t i = !is_newline(cp[0]) && !is_letter(cp[0]) && !is_number(cp[0]) && n > 1 && is_letter(cp[1]);
  if (is_letter(cp[i])) {
    while (i < n && is_letter(cp[i])) i++;
    return i;
  }
  /* \p{N} or \p{N}{1,3} */
  if (is_number(cp[0])) {
    for (i = 1; i < n && i < max_digits && is_number(cp[i]);) i++;
    return i;
  }
  /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
  i = cp[0] == ' ' && n > 1 && is_other(cp[1]);
  if (is_other(cp[i])) {
    while (i < n && is_other(cp[i])) i++;
    while (i < n && is_newline(cp[i])) i++;
    return i;
  }
  /* cp[0] is whitespace. \s*[\r\n]+ ends at the run's last newline; \s+(?!\S) gives back the run's
   * last character unless the text ends there; \s+ takes a lone one. */
  size_t j = 1;
  while (j < n && is_white_space(cp[j])) j++;
  for (size_t k = j; k > 0; k--)
    if (is_newline(cp[k - 1])) return k;
  return j < n && j > 1 ? j - 1 : j;
}

dit_status_t dit_bpe_nfc(const char *text, size_t len, char **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  utf8proc_uint8_t *nfc = NULL;
  const utf8proc_ssize_t nn =
      utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (nn < 0) return DIT_ERR(INVALID_ARGUMENT, "tokenizer: the text is not valid UTF-8 (%s)", utf8proc_errmsg(nn));
  *out = (char *)nfc;
  *out_len = (size_t)nn;
  return DIT_OK;
}

dit_status_t dit_bpe_encode(const dit_bpe_t *b, const char *text, size_t len, int32_t *ids, size_t cap,
                            size_t *n_out) {
  *n_out = 0;
  const bool clip = b->opt.pattern == DIT_BPE_CLIP;
  utf8proc_uint8_t *norm = NULL;
  const utf8proc_ssize_t nn = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &norm,
                                           clip || b->opt.nfc ? UTF8PROC_STABLE | UTF8PROC_COMPOSE : 0);
  if (nn < 0) return DIT_ERR(INVALID_ARGUMENT, "tokenizer: the text is not valid UTF-8 (%s)", utf8proc_errmsg(nn));
  /* Code points; CLIP's after the whitespace collapse and the lowercasing (at most one more per İ). */
  int32_t *cp = malloc((2 * (size_t)nn + 1) * sizeof *cp);
  if (!cp) {
    free(norm);
    return DIT_ERR(RESOURCE_EXHAUSTED, "tokenizer: out of memory for %zu bytes of text", len);
  }
  size_t n = 0;
  for (utf8proc_ssize_t i = 0; i < nn;) {
    utf8proc_int32_t c;
    i += utf8proc_iterate(norm + i, nn - i, &c);
    if (!clip) {
      cp[n++] = c;
    } else if (is_white_space(c)) {
      if (n == 0 || cp[n - 1] != ' ') cp[n++] = ' ';
    } else if (c == 0x130) { /* the one unconditional multi-character lowercase mapping */
      cp[n++] = 'i';
      cp[n++] = 0x307;
    } else {
      cp[n++] = utf8proc_tolower(c);
    }
  }
  free(norm);
  enc_t e = {.b = b, .ids = ids, .cap = cap};
  const size_t max_digits = b->opt.pattern == DIT_BPE_LLAMA3 ? 3 : 1;
  dit_status_t s = DIT_OK;
  for (size_t i = 0; i < n && !s;) {
    const size_t m = clip ? clip_match_len(cp + i, n - i) : gpt_match_len(cp + i, n - i, max_digits);
    if (m) s = encode_piece(&e, cp + i, m);
    i += m ? m : 1;
  }
  free(cp);
  free(e.sym);
  free(e.word);
  *n_out = e.n;
  return s;
}
