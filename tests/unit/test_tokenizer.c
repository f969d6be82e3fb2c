/* The tokenizers against the ids and masks Hugging Face's tokenizers give
 * (tests/data/tok_goldens.json and tok_goldens_bpe.json, made by tests/data/make_tokenizer_goldens.py
 * and make_tokenizer_goldens_bpe.py), and the refusals of bad tokenizer folders. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fileio.h"
#include "base/json.h"
#include "check.h"
#include "text/tokenizer.h"

static const char *data_dir(void) {
  const char *d = getenv("DIT_TEST_DATA");
  return d ? d : "data";
}

static void write_file(const char *dir, const char *name, const char *text) {
  char path[CHECK_PATH_MAX];
  check_pathf(path, "%s/%s", dir, name);
  CHECK_OK(dit_file_write_atomic(path, text, strlen(text)));
}

/* A copy of data/<dir> in a scratch folder, tokenizer_config.json's members replaced by `config`'s. */
static void copy_with_config(const char *dir, const cJSON *config, char *out) {
  check_pathf(out, "%s/%s", check_tmpdir("tokenizer_cfg"), dir);
  CHECK_OK(dit_mkdirs(out, 0755));
  static const char *const kFiles[] = {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"};
  for (size_t k = 0; k < sizeof kFiles / sizeof *kFiles; k++) {
    char src[CHECK_PATH_MAX], *text = NULL;
    size_t n = 0;
    check_pathf(src, "%s/%s/%s", data_dir(), dir, kFiles[k]);
    if (!dit_path_exists(src)) continue;
    CHECK_OK(dit_file_read(src, 1u << 24, &text, &n));
    if (!text) continue;
    if (!strcmp(kFiles[k], "tokenizer_config.json")) {
      cJSON *cfg = cJSON_ParseWithLength(text, n);
      const cJSON *c;
      cJSON_ArrayForEach(c, config) {
        cJSON_DeleteItemFromObjectCaseSensitive(cfg, c->string);
        cJSON_AddItemToObject(cfg, c->string, cJSON_Duplicate(c, true));
      }
      free(text);
      text = cJSON_PrintUnformatted(cfg);
      n = strlen(text);
      cJSON_Delete(cfg);
    }
    char dst[CHECK_PATH_MAX];
    check_pathf(dst, "%s/%s", out, kFiles[k]);
    CHECK_OK(dit_file_write_atomic(dst, text, n));
    free(text);
  }
}

/* Every case of a goldens file: the folder's ids and mask for every prompt of its prompt files. */
static void test_goldens(const char *goldens, int want_cases) {
  char path[CHECK_PATH_MAX];
  check_pathf(path, "%s/%s", data_dir(), goldens);
  dit_json_doc_t *gdoc = NULL;
  CHECK_OK(dit_json_parse_file(path, 16u << 20, &gdoc));
  if (!gdoc) return;
  cJSON *gold = dit_json_doc_release(gdoc);
  dit_json_doc_free(gdoc);
  /* The prompts: the files the goldens name, in order, or tok_prompts.json. */
  cJSON *prompts = cJSON_CreateArray();
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(gold, "prompts"), *file;
  cJSON *one = cJSON_CreateArray();
  if (!files) cJSON_AddItemToArray(one, cJSON_CreateString("tok_prompts.json"));
  const cJSON *list_of_files = files ? files : one;
  cJSON_ArrayForEach(file, list_of_files) {
    dit_json_doc_t *pdoc = NULL;
    check_pathf(path, "%s/%s", data_dir(), file->valuestring);
    CHECK_OK(dit_json_parse_file(path, 1u << 20, &pdoc));
    if (!pdoc) continue;
    cJSON *list = dit_json_doc_release(pdoc);
    dit_json_doc_free(pdoc);
    const cJSON *p;
    cJSON_ArrayForEach(p, list) cJSON_AddItemToArray(prompts, cJSON_CreateString(p->valuestring));
    cJSON_Delete(list);
  }
  cJSON_Delete(one);
  const cJSON *cases = cJSON_GetObjectItemCaseSensitive(gold, "cases");
  int n_cases = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, cases) {
    n_cases++;
    const char *dir = cJSON_GetObjectItemCaseSensitive(c, "dir")->valuestring;
    const int max_length = cJSON_GetObjectItemCaseSensitive(c, "max_length")->valueint;
    const cJSON *config = cJSON_GetObjectItemCaseSensitive(c, "config");
    if (config) copy_with_config(dir, config, path);
    else check_pathf(path, "%s/%s", data_dir(), dir);
    dit_tokenizer_t *t = NULL;
    CHECK_OK(dit_tokenizer_open(path, &t));
    if (!t) continue;
    int32_t *ids = malloc(2 * (size_t)max_length * sizeof *ids), *mask = ids + max_length;
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(c, "results");
    CHECK_EQ_INT(cJSON_GetArraySize(res), cJSON_GetArraySize(prompts));
    int i = 0, bad = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, res) {
      const char *text = cJSON_GetArrayItem(prompts, i)->valuestring;
      CHECK_OK(dit_tokenizer_encode(t, text, strlen(text), max_length, ids, mask));
      const cJSON *gi = cJSON_GetObjectItemCaseSensitive(r, "input_ids");
      const cJSON *gm = cJSON_GetObjectItemCaseSensitive(r, "attention_mask");
      CHECK_EQ_INT(cJSON_GetArraySize(gi), max_length);
      int first = -1;
      for (int k = 0; k < max_length; k++)
        if (ids[k] != cJSON_GetArrayItem(gi, k)->valueint || mask[k] != cJSON_GetArrayItem(gm, k)->valueint) {
          first = k;
          break;
        }
      if (first >= 0) {
        bad++;
        fprintf(stderr, "%s%s max_length %d prompt %d: position %d: id %d mask %d, expected id %d mask %d\n", dir,
                config ? " (config changed)" : "", max_length, i, first, ids[first], mask[first],
                cJSON_GetArrayItem(gi, first)->valueint, cJSON_GetArrayItem(gm, first)->valueint);
      }
      i++;
    }
    CHECK_EQ_INT(bad, 0);
    free(ids);
    dit_tokenizer_free(t);
  }
  CHECK_EQ_INT(n_cases, want_cases);
  cJSON_Delete(prompts);
  cJSON_Delete(gold);
}

#define expect_refused(dir, code, needle)                \
  do {                                                   \
    dit_tokenizer_t *t_ = NULL;                          \
    CHECK_ERR(dit_tokenizer_open(dir, &t_), code, needle); \
    CHECK(t_ == NULL);                                   \
  } while (0)

static void test_refusals(void) {
  const char *tmp = check_tmpdir("tokenizer");
  char dir[CHECK_PATH_MAX];
  check_pathf(dir, "%s/none", tmp);
  expect_refused(dir, NOT_FOUND, "not a directory");
  CHECK_OK(dit_mkdirs(dir, 0755));
  expect_refused(dir, NOT_FOUND, "expected spiece.model (SentencePiece), vocab.json + merges.txt or tokenizer.json");
  write_file(dir, "vocab.json", "{\"a\": 0, \"b</w>\": 1, \"ab</w>\": 2, \"<|startoftext|>\": 3, \"<|endoftext|>\": 4}");
  expect_refused(dir, NOT_FOUND, "missing merges.txt");
  write_file(dir, "merges.txt", "#version: 0.2\na b</w>\n");
  dit_tokenizer_t *t = NULL;
  CHECK_OK(dit_tokenizer_open(dir, &t));
  dit_tokenizer_free(t);
  write_file(dir, "merges.txt", "#version: 0.2\na c\n");
  expect_refused(dir, NOT_FOUND, "merges.txt: line 2: 'c' is not in the vocabulary");
  write_file(dir, "merges.txt", "a  b\n");
  expect_refused(dir, INVALID_ARGUMENT, "merges.txt: line 1: expected two tokens separated by one space");
  write_file(dir, "merges.txt", "b</w> a\n");
  expect_refused(dir, NOT_FOUND, "line 1: 'b</w>a' is not in the vocabulary");
  write_file(dir, "merges.txt", "a b</w>\n");
  write_file(dir, "vocab.json", "{\"a\": 0, \"b\": \"1\"}");
  expect_refused(dir, INVALID_ARGUMENT, "field 'b'");
  write_file(dir, "vocab.json", "{\"a\": 0, \"a\": 1}");
  expect_refused(dir, INVALID_ARGUMENT, "vocab.json");
  write_file(dir, "vocab.json", "[1, 2]");
  expect_refused(dir, INVALID_ARGUMENT, "vocab.json");
  write_file(dir, "vocab.json", "{\"a\": 0, \"b</w>\": 1, \"ab</w>\": 2, \"<|endoftext|>\": 4}");
  expect_refused(dir, NOT_FOUND, "the start-of-text token is not in the vocabulary");
  write_file(dir, "vocab.json", "{\"a\": 0, \"b</w>\": 1, \"ab</w>\": 2, \"<|startoftext|>\": 3, \"<|endoftext|>\": 4}");
  write_file(dir, "tokenizer_config.json", "{\"pad_token\": {\"content\": \"<pad>\"}}");
  expect_refused(dir, NOT_FOUND, "field 'pad_token': the token \"<pad>\" is not in the tokenizer's vocabulary");
  char sdir[CHECK_PATH_MAX];
  check_pathf(sdir, "%s/spm", tmp);
  CHECK_OK(dit_mkdirs(sdir, 0755));
  write_file(sdir, "spiece.model", "not a model");
  expect_refused(sdir, DATA_LOSS, "spiece.model: not a SentencePiece model");
  /* CLIP's ids need room for bos and eos; the text must be UTF-8. */
  write_file(dir, "tokenizer_config.json", "{\"model_max_length\": 1e30}");
  CHECK_OK(dit_tokenizer_open(dir, &t));
  if (!t) return;
  CHECK_EQ_INT(dit_tokenizer_max_length(t), 77);
  int32_t ids[4], mask[4];
  CHECK_ERR(dit_tokenizer_encode(t, "ab", 2, 1, ids, mask), OUT_OF_RANGE, "max length 1: expected 2..");
  CHECK_ERR(dit_tokenizer_encode(t, "a\xff", 2, 4, ids, mask), INVALID_ARGUMENT, "not valid UTF-8");
  /* "AB" lowercased is one merge: bos, ab</w>, eos, one pad (<|endoftext|>). "ba": neither "b" nor
   * "a</w>" is in this vocabulary, so two unks (<|endoftext|>), cut to fit bos and eos. */
  CHECK_OK(dit_tokenizer_encode(t, "AB", 2, 4, ids, mask));
  const int32_t want_ab[4] = {3, 2, 4, 4}, want_ab_mask[4] = {1, 1, 1, 0};
  CHECK(!memcmp(ids, want_ab, sizeof ids) && !memcmp(mask, want_ab_mask, sizeof mask));
  CHECK_OK(dit_tokenizer_encode(t, "ba ab", 5, 4, ids, mask));
  const int32_t want_ba[4] = {3, 4, 4, 4}, want_ba_mask[4] = {1, 1, 1, 1};
  CHECK(!memcmp(ids, want_ba, sizeof ids) && !memcmp(mask, want_ba_mask, sizeof mask));
  dit_tokenizer_free(t);
}

/* A tokenizer.json of five tokens ("a", "b", "ab", "Ġ", "Ġab"; merges a+b, Ġ+ab) and <s> (5) added and
 * put before the ids, with Qwen2's pattern; each argument not NULL replaces one part. */
static void write_tokenizer_json(const char *dir, const char *model_type, const char *vocab, const char *merges,
                                 const char *pre_split,
                                 const char *normalizer, const char *post) {
  static const char kQwenPattern[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|"
                                     "\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|"
                                     "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+";
  char split[1024], text[8192];
  snprintf(split, sizeof split, "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"%s\"}, \"behavior\": \"Isolated\", "
           "\"invert\": false}", pre_split ? pre_split : kQwenPattern);
  snprintf(text, sizeof text,
           "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [{\"id\": 5, "
           "\"content\": \"<s>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
           "\"special\": true}], \"normalizer\": %s, \"pre_tokenizer\": {\"type\": \"Sequence\", "
           "\"pretokenizers\": [%s, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
           "\"use_regex\": false}]}, "
           "\"post_processor\": %s, \"decoder\": null, \"model\": {\"type\": \"%s\", \"dropout\": null, \"unk_token\": "
           "null, \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": false, "
           "\"byte_fallback\": false, \"ignore_merges\": false, \"vocab\": %s, \"merges\": %s}}",
           normalizer ? normalizer : "null", split,
           post ? post : "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
                         "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [], "
                         "\"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [5], \"tokens\": [\"<s>\"]}}}",
           model_type ? model_type : "BPE",
           vocab ? vocab : "{\"a\": 0, \"b\": 1, \"ab\": 2, \"\\u0120\": 3, \"\\u0120ab\": 4}",
           merges ? merges : "[[\"a\", \"b\"], [\"\\u0120\", \"ab\"]]");
  write_file(dir, "tokenizer.json", text);
}

static void expect_ids(const dit_tokenizer_t *t, const char *text, int max_length, const int32_t *want,
                       const int32_t *want_mask) {
  int32_t ids[16], mask[16];
  CHECK(max_length <= 16);
  CHECK_OK(dit_tokenizer_encode(t, text, strlen(text), max_length, ids, mask));
  for (int k = 0; k < max_length; k++)
    if (ids[k] != want[k] || mask[k] != want_mask[k]) {
      fprintf(stderr, "'%s' position %d: id %d mask %d, expected id %d mask %d\n", text, k, ids[k], mask[k], want[k],
              want_mask[k]);
      CHECK(0);
      break;
    }
}

/* tokenizer.json and Qwen2's folders: the refusals by name, the ids of a hand-made model (the ones
 * the tokenizers library gives for it: an unknown byte is dropped when the model has no unk), the
 * post-processor and the padding token named by tokenizer_config.json. */
static void test_byte_bpe(void) {
  char dir[CHECK_PATH_MAX];
  check_pathf(dir, "%s/json", check_tmpdir("tokenizer_bpe"));
  CHECK_OK(dit_mkdirs(dir, 0755));
  write_tokenizer_json(dir, NULL, NULL, NULL, NULL, NULL, NULL);
  dit_tokenizer_t *t = NULL;
  CHECK_OK(dit_tokenizer_open(dir, &t));
  if (t) {
    CHECK_EQ_INT(dit_tokenizer_kind(t), DIT_TOKENIZER_BYTE_BPE);
    CHECK_EQ_INT(dit_tokenizer_max_length(t), 512);
    /* No pad token named: refused even where nothing would be padded (transformers refuses it too). */
    int32_t ids[4], mask[4];
    CHECK_ERR(dit_tokenizer_encode(t, "ab", 2, 2, ids, mask), FAILED_PRECONDITION, "no padding token");
    dit_tokenizer_free(t);
  }
  write_file(dir, "tokenizer_config.json", "{\"tokenizer_class\": \"PreTrainedTokenizerFast\", \"pad_token\": \"ab\"}");
  CHECK_OK(dit_tokenizer_open(dir, &t));
  if (t) {
    /* <s> is split out wherever it stands, and so is "ab", named as the pad token; "c" is not in the
     * vocabulary and the model has no unk: dropped. */
    const int32_t want[6] = {5, 0, 5, 1, 2, 2}, mask[6] = {1, 1, 1, 1, 1, 0};
    expect_ids(t, "a<s>bab", 6, want, mask);
    const int32_t want_c[5] = {5, 2, 3, 2, 2}, mask_c[5] = {1, 1, 1, 1, 0};
    expect_ids(t, "abc ab", 5, want_c, mask_c);
    dit_tokenizer_free(t);
  }
  /* With a tokenizer.json, add_bos_token / add_eos_token change nothing (transformers drops them). */
  write_file(dir, "tokenizer_config.json",
             "{\"pad_token\": \"\\u0120ab\", \"eos_token\": \"<s>\", \"add_eos_token\": true}");
  CHECK_OK(dit_tokenizer_open(dir, &t));
  if (t) {
    const int32_t want[4] = {5, 2, 4, 4}, mask[4] = {1, 1, 0, 0};
    expect_ids(t, "ab", 4, want, mask);
    dit_tokenizer_free(t);
  }
  write_file(dir, "tokenizer_config.json", "{\"tokenizer_class\": \"LlamaTokenizerFast\"}");
  expect_refused(dir, UNIMPLEMENTED, "tokenizer_config.json: field 'tokenizer_class': \"LlamaTokenizerFast\" is not "
                 "supported");
  write_file(dir, "tokenizer_config.json", "{\"split_special_tokens\": true}");
  expect_refused(dir, UNIMPLEMENTED, "field 'split_special_tokens': splitting special tokens is not supported");
  write_file(dir, "tokenizer_config.json",
             "{\"added_tokens_decoder\": {\"6\": {\"content\": \"ba\", \"lstrip\": true}}}");
  expect_refused(dir, UNIMPLEMENTED,
                 "field 'added_tokens_decoder.6.lstrip': added tokens with lstrip are not supported");
  /* A special token the vocabulary lacks becomes a new added token, the next id (6, after <s>). */
  write_file(dir, "tokenizer_config.json", "{\"pad_token\": \"<pad>\"}");
  CHECK_OK(dit_tokenizer_open(dir, &t));
  if (t) {
    const int32_t want[5] = {5, 2, 6, 6, 6}, mask[5] = {1, 1, 1, 0, 0};
    expect_ids(t, "ab<pad>", 5, want, mask);
    dit_tokenizer_free(t);
  }
  write_file(dir, "tokenizer_config.json", "{}");
  write_tokenizer_json(dir, "WordPiece", NULL, NULL, NULL, NULL, NULL);
  expect_refused(dir, UNIMPLEMENTED,
                 "tokenizer.json: field 'model.type': \"WordPiece\" is not supported (expected BPE)");
  write_tokenizer_json(dir, NULL, NULL, "[\"a b c\"]", NULL, NULL, NULL);
  expect_refused(dir, INVALID_ARGUMENT, "field 'model.merges[0]': expected two tokens separated by one space");
  write_tokenizer_json(dir, NULL, NULL, "[[\"a\"]]", NULL, NULL, NULL);
  expect_refused(dir, INVALID_ARGUMENT, "field 'model.merges[0]': expected a pair of non-empty tokens");
  write_tokenizer_json(dir, NULL, NULL, "[7]", NULL, NULL, NULL);
  expect_refused(dir, INVALID_ARGUMENT, "field 'model.merges[0]': expected \"a b\" or [\"a\", \"b\"], found a number");
  write_tokenizer_json(dir, NULL, NULL, "[\"a b\", [\"\\u0120\", \"ab\"]]", NULL, NULL, NULL);
  expect_refused(dir, INVALID_ARGUMENT, "field 'model.merges[1]': expected \"a b\" like the first merge");
  write_tokenizer_json(dir, NULL, NULL, "[\"b a\"]", NULL, NULL, NULL);
  expect_refused(dir, NOT_FOUND, "field 'model.merges[0]': 'ba' is not in the vocabulary");
  write_tokenizer_json(dir, NULL, NULL, NULL, "\\\\w+", NULL, NULL);
  expect_refused(dir, UNIMPLEMENTED, "the pattern \"\\x5cw+\" is not supported (expected Qwen2's or Llama 3's)");
  write_tokenizer_json(dir, NULL, NULL, NULL, NULL, "{\"type\": \"NFKC\"}", NULL);
  expect_refused(dir, UNIMPLEMENTED, "field 'normalizer.type': \"NFKC\" is not supported (expected NFC, Sequence)");
  write_tokenizer_json(dir, NULL, NULL, NULL, NULL, NULL, "{\"type\": \"BertProcessing\"}");
  expect_refused(dir, UNIMPLEMENTED, "field 'post_processor.type': \"BertProcessing\" is not supported");
  /* (?i:'s) also matches U+017F (long s, whose case folding is s): "'ſ" and "x" are two pieces, and
   * "¿x" (ſ's second byte and x) is not merged across them; "'S" likewise. */
  write_tokenizer_json(dir, NULL, "{\"'\": 0, \"\\u00c5\": 1, \"\\u00bf\": 2, \"x\": 3, \"\\u00bfx\": 4, \"S\": 8, "
                       "\"Sx\": 9, \"<pad>\": 7}", "[\"\\u00bf x\", \"S x\"]", NULL, NULL, "null");
  write_file(dir, "tokenizer_config.json", "{\"pad_token\": \"<pad>\"}");
  CHECK_OK(dit_tokenizer_open(dir, &t));
  if (t) {
    const int32_t want[5] = {0, 1, 2, 3, 7}, want_s[5] = {0, 8, 3, 7, 7}, mask[5] = {1, 1, 1, 1, 0},
                  mask_s[5] = {1, 1, 1, 0, 0};
    expect_ids(t, "'\u017fx", 5, want, mask);
    expect_ids(t, "'Sx", 5, want_s, mask_s);
    dit_tokenizer_free(t);
  }
  /* Qwen2Tokenizer needs vocab.json + merges.txt without a tokenizer.json. */
  check_pathf(dir, "%s/qwen2", check_tmpdir("tokenizer_bpe"));
  CHECK_OK(dit_mkdirs(dir, 0755));
  write_file(dir, "tokenizer_config.json", "{\"tokenizer_class\": \"Qwen2Tokenizer\"}");
  write_file(dir, "merges.txt", "a b\n");
  expect_refused(dir, NOT_FOUND, "missing vocab.json");
  /* Without tokenizer.json the flags build the post-processor; added tokens in id order, whatever
   * the config's order. */
  write_file(dir, "vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 2, \"\\u0120\": 3}");
  write_file(dir, "tokenizer_config.json",
             "{\"tokenizer_class\": \"Qwen2Tokenizer\", \"bos_token\": \"<|endoftext|>\", "
             "\"eos_token\": \"<|im_end|>\", \"pad_token\": \"<|endoftext|>\", \"add_bos_token\": true, "
             "\"add_eos_token\": true, \"added_tokens_decoder\": "
             "{\"5\": {\"content\": \"<|im_end|>\", \"special\": true, \"normalized\": false}, \"4\": {\"content\": "
             "\"<|endoftext|>\", \"special\": true, \"normalized\": false}}}");
  CHECK_OK(dit_tokenizer_open(dir, &t));
  if (t) {
    const int32_t want[8] = {4, 2, 3, 0, 5, 5, 4, 4}, mask[8] = {1, 1, 1, 1, 1, 1, 0, 0};
    expect_ids(t, "ab a<|im_end|>", 8, want, mask);
    dit_tokenizer_free(t);
  }
}

int main(void) {
  test_goldens("tok_goldens.json", 3);
  test_goldens("tok_goldens_bpe.json", 7);
  test_byte_bpe();
  test_refusals();
  return check_summary("test_tokenizer");
}
