/* The tokenizers against the ids and masks Hugging Face's tokenizers give
 * (tests/data/tok_goldens.json, made by tests/data/make_tokenizer_goldens.py), and the refusals
 * of bad tokenizer folders. */
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

static void test_goldens(void) {
  char path[CHECK_PATH_MAX];
  check_pathf(path, "%s/tok_prompts.json", data_dir());
  dit_json_doc_t *pdoc = NULL, *gdoc = NULL;
  CHECK_OK(dit_json_parse_file(path, 1u << 20, &pdoc));
  check_pathf(path, "%s/tok_goldens.json", data_dir());
  CHECK_OK(dit_json_parse_file(path, 16u << 20, &gdoc));
  if (!pdoc || !gdoc) return;
  cJSON *prompts = dit_json_doc_release(pdoc), *gold = dit_json_doc_release(gdoc);
  dit_json_doc_free(pdoc);
  dit_json_doc_free(gdoc);
  const cJSON *cases = cJSON_GetObjectItemCaseSensitive(gold, "cases");
  int n_cases = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, cases) {
    n_cases++;
    const char *dir = cJSON_GetObjectItemCaseSensitive(c, "dir")->valuestring;
    const int max_length = cJSON_GetObjectItemCaseSensitive(c, "max_length")->valueint;
    check_pathf(path, "%s/%s", data_dir(), dir);
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
        fprintf(stderr, "%s max_length %d prompt %d: position %d: id %d mask %d, expected id %d mask %d\n", dir,
                max_length, i, first, ids[first], mask[first], cJSON_GetArrayItem(gi, first)->valueint,
                cJSON_GetArrayItem(gm, first)->valueint);
      }
      i++;
    }
    CHECK_EQ_INT(bad, 0);
    free(ids);
    dit_tokenizer_free(t);
  }
  CHECK_EQ_INT(n_cases, 3);
  cJSON_Delete(prompts);
  cJSON_Delete(gold);
}

static void write_file(const char *dir, const char *name, const char *text) {
  char path[CHECK_PATH_MAX];
  check_pathf(path, "%s/%s", dir, name);
  CHECK_OK(dit_file_write_atomic(path, text, strlen(text)));
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
  expect_refused(dir, NOT_FOUND, "expected spiece.model (SentencePiece) or vocab.json + merges.txt");
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

int main(void) {
  test_goldens();
  test_refusals();
  return check_summary("test_tokenizer");
}
