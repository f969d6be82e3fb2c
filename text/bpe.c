/* CLIP's byte-level BPE as Hugging Face's CLIPTokenizer runs it: NFC, every whitespace run to one
 * space, lowercase; CLIP's pre-tokenization pattern
 *   <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
 * (whitespace dropped between matches); each piece's UTF-8 bytes as the printable byte symbols,
 * the last one with "</w>"; then the merges by rank. Unicode data (NFC, categories, case) comes
 * from utf8proc. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "base/json.h"
#include "text/tokenizer.h"

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
  size_t vocab_cap;
  merge_slot_t *merges;
  size_t merges_cap;
  char byte_sym[256][3]; /* each byte's printable symbol, UTF-8 (at most 2 bytes) */
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

static dit_status_t parse_vocab(dit_bpe_t *b, const char *text, size_t len, const char *name) {
  dit_json_doc_t *doc = NULL;
  DIT_RETURN_IF(dit_json_parse(text, len, name, &doc));
  dit_json_t root, e;
  dit_status_t s = dit_json_root(doc, &root);
  size_t n = 0;
  for (const cJSON *c = s ? NULL : root.v->child; c; c = c->next) n++;
  if (!s && n == 0) s = DIT_ERR(INVALID_ARGUMENT, "%s: expected an object of token -> id, found an empty one", name);
  if (!s && n > BPE_MAX_VOCAB) s = DIT_ERR(OUT_OF_RANGE, "%s: %zu entries, at most %u supported", name, n, BPE_MAX_VOCAB);
  if (!s) {
    b->vocab_cap = pow2_at_least(2 * n);
    if (!(b->vocab = calloc(b->vocab_cap, sizeof *b->vocab))) s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", name);
  }
  dit_json_iter_t it;
  if (!s) dit_json_iter_init(&root, &it);
  while (!s && dit_json_iter_next(&it, &e)) {
    int64_t id;
    const char *key = e.v->string;
    const size_t klen = strlen(key);
    if ((s = dit_json_as_int(&e, 0, INT32_MAX, &id))) break;
    if (klen == 0 || klen > BPE_MAX_TOKEN) {
      s = dit_json_error(&e, DIT_CODE_INVALID_ARGUMENT, "expected a token of 1..%d bytes, found %zu", BPE_MAX_TOKEN, klen);
      break;
    }
    size_t i = hash_bytes(key, klen) & (b->vocab_cap - 1);
    while (b->vocab[i].key) i = (i + 1) & (b->vocab_cap - 1); /* keys are unique: the JSON reader refuses repeats */
    if (!(b->vocab[i].key = strdup(key))) s = DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", name);
    b->vocab[i].id = (int32_t)id;
  }
  dit_json_doc_free(doc);
  return s;
}

static dit_status_t parse_merges(dit_bpe_t *b, const char *text, size_t len, const char *name) {
  size_t lines = 1;
  for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
  b->merges_cap = pow2_at_least(2 * lines);
  if (!(b->merges = calloc(b->merges_cap, sizeof *b->merges))) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", name);
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
    const char *sp = memchr(line, ' ', n);
    if (!sp || sp == line || sp + 1 == line + n || memchr(sp + 1, ' ', line + n - sp - 1) || memchr(line, 0, n))
      return DIT_ERR(INVALID_ARGUMENT, "%s: line %zu: expected two tokens separated by one space, found '%.*s'",
                     name, line_no, (int)(n > 80 ? 80 : n), line);
    const size_t nl_ = (size_t)(sp - line), nr = n - nl_ - 1;
    if (nl_ + nr > 2 * BPE_MAX_TOKEN)
      return DIT_ERR(OUT_OF_RANGE, "%s: line %zu: a merge of %zu bytes, at most %d", name, line_no, nl_ + nr,
                     2 * BPE_MAX_TOKEN);
    const int32_t l = vocab_find(b, line, nl_), r = vocab_find(b, sp + 1, nr);
    memcpy(tok, line, nl_);
    memcpy(tok + nl_, sp + 1, nr);
    const int32_t m = vocab_find(b, tok, nl_ + nr);
    if (l < 0 || r < 0 || m < 0)
      return DIT_ERR(NOT_FOUND, "%s: line %zu: '%.*s' is not in the vocabulary", name, line_no,
                     l < 0 ? (int)nl_ : r < 0 ? (int)nr : (int)(nl_ + nr), l < 0 ? line : r < 0 ? sp + 1 : tok);
    const uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    size_t i = hash_u64(key) & (b->merges_cap - 1);
    while (b->merges[i].pair && b->merges[i].pair != key) i = (i + 1) & (b->merges_cap - 1);
    if (b->merges[i].pair) continue; /* a repeated merge keeps its first (lowest) rank */
    b->merges[i] = (merge_slot_t){key, rank++, m};
  }
  return DIT_OK;
}

dit_status_t dit_bpe_parse(const char *vocab, size_t vocab_len, const char *vocab_name, const char *merges,
                           size_t merges_len, const char *merges_name, dit_bpe_t **out) {
  *out = NULL;
  dit_bpe_t *b = calloc(1, sizeof *b);
  if (!b) return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", vocab_name);
  init_byte_symbols(b);
  dit_status_t s = parse_vocab(b, vocab, vocab_len, vocab_name);
  if (!s) s = parse_merges(b, merges, merges_len, merges_name);
  if (s) {
    dit_bpe_free(b);
    return s;
  }
  *out = b;
  return DIT_OK;
}

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

typedef struct {
  const dit_bpe_t *b;
  int32_t unk_id;
  int32_t *ids;
  size_t cap, n;
  int32_t *sym; /* the word's symbols, reused across words */
  size_t sym_cap;
} enc_t;

static void emit(enc_t *e, int32_t id) {
  if (e->n < e->cap) e->ids[e->n] = id;
  e->n++;
}

/* One pre-tokenized piece (code points cp[0..n)): byte symbols, then the lowest-ranked merge
 * applied everywhere, left to right, until none applies. */
static dit_status_t encode_piece(enc_t *e, const int32_t *cp, size_t n) {
  uint8_t bytes[4 * 64];
  size_t nb = 0, total = 0;
  for (size_t i = 0; i < n; i++) total += (size_t)utf8proc_encode_char(cp[i], bytes);
  if (total > e->sym_cap) {
    int32_t *p = realloc(e->sym, total * sizeof *p);
    if (!p) return DIT_ERR(RESOURCE_EXHAUSTED, "tokenizer: out of memory for a word of %zu bytes", total);
    e->sym = p;
    e->sym_cap = total;
  }
  size_t ns = 0;
  for (size_t i = 0; i < n; i++) {
    nb = (size_t)utf8proc_encode_char(cp[i], bytes);
    for (size_t k = 0; k < nb; k++) {
      char s[8];
      const char *sym = e->b->byte_sym[bytes[k]];
      const bool last = ns + 1 == total;
      const size_t sl = strlen(sym);
      memcpy(s, sym, sl);
      if (last) memcpy(s + sl, "</w>", 4);
      const int32_t id = vocab_find(e->b, s, sl + (last ? 4 : 0));
      e->sym[ns++] = id < 0 ? e->unk_id : id;
    }
  }
  for (;;) {
    const merge_slot_t *best = NULL;
    for (size_t i = 0; i + 1 < ns; i++) {
      const merge_slot_t *m = merge_find(e->b, e->sym[i], e->sym[i + 1]);
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

/* The length of the pattern's match at cp[0] (0: whitespace, which no alternative matches). */
static size_t match_len(const int32_t *cp, size_t n) {
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

dit_status_t dit_bpe_encode(const dit_bpe_t *b, const char *text, size_t len, int32_t unk_id, int32_t *ids,
                            size_t cap, size_t *n_out) {
  *n_out = 0;
  utf8proc_uint8_t *nfc = NULL;
  const utf8proc_ssize_t nn =
      utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (nn < 0) return DIT_ERR(INVALID_ARGUMENT, "tokenizer: the text is not valid UTF-8 (%s)", utf8proc_errmsg(nn));
  /* Code points after the whitespace collapse and the lowercasing (at most one more per İ). */
  int32_t *cp = malloc((2 * (size_t)nn + 1) * sizeof *cp);
  if (!cp) {
    free(nfc);
    return DIT_ERR(RESOURCE_EXHAUSTED, "tokenizer: out of memory for %zu bytes of text", len);
  }
  size_t n = 0;
  for (utf8proc_ssize_t i = 0; i < nn;) {
    utf8proc_int32_t c;
    i += utf8proc_iterate(nfc + i, nn - i, &c);
    if (is_white_space(c)) {
      if (n == 0 || cp[n - 1] != ' ') cp[n++] = ' ';
    } else if (c == 0x130) { /* the one unconditional multi-character lowercase mapping */
      cp[n++] = 'i';
      cp[n++] = 0x307;
    } else {
      cp[n++] = utf8proc_tolower(c);
    }
  }
  free(nfc);
  enc_t e = {.b = b, .unk_id = unk_id, .ids = ids, .cap = cap};
  dit_status_t s = DIT_OK;
  for (size_t i = 0; i < n && !s;) {
    const size_t m = match_len(cp + i, n - i);
    if (m) s = encode_piece(&e, cp + i, m);
    i += m ? m : 1;
  }
  free(cp);
  free(e.sym);
  *n_out = e.n;
  return s;
}
