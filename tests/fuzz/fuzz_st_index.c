/* libFuzzer target for sharded checkpoints: each input becomes a directory holding an index
 * and up to four shard files, opened through dit_safetensors_open (directory resolution,
 * index reading, shard loading, index/shard agreement). Input layout:
 *   byte 0       mode: bit 0 opens the index file itself instead of the directory; bit 1 names
 *                the index "model.safetensors.index.json" (found by scanning) instead of
 *                diffusers' name; bit 2 adds a stray "other.safetensors" beside it
 *   then         the index text, up to the first NUL
 *   then         shards s0..s3.safetensors separated by "\xff\xfe"; a shard holding a NUL is
 *                "header JSON NUL data" and gets a matching length prefix (so mutations
 *                explore the header rather than its framing), one without is written as is.
 * The files are removed after every input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifacts/safetensors.h"

#define MAX_SHARDS 4

static char g_dir[256];
static volatile uint64_t g_sink;

static void put(const char *name, const void *a, size_t na, const void *b, size_t nb, char *out_path) {
  snprintf(out_path, 512, "%s/%s", g_dir, name);
  FILE *f = fopen(out_path, "wb");
  if (!f) abort(); /* the scratch folder is ours: anything else is a broken harness */
  if ((na && fwrite(a, 1, na, f) != na) || (nb && fwrite(b, 1, nb, f) != nb)) abort();
  fclose(f);
}

static void remove_dir(void) { rmdir(g_dir); }

static const uint8_t *find2(const uint8_t *p, const uint8_t *end) {
  for (; p + 1 < end; p++)
    if (p[0] == 0xff && p[1] == 0xfe) return p;
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dir[0]) {
    snprintf(g_dir, sizeof g_dir, "%s/fuzz_st_index.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) abort();
    atexit(remove_dir);
  }
  if (size < 1) return 0;
  const int mode = data[0];
  const uint8_t *p = data + 1, *end = data + size;
  const uint8_t *nul = memchr(p, 0, (size_t)(end - p));
  const uint8_t *index_end = nul ? nul : end;

  char written[2 + MAX_SHARDS][512];
  size_t nwritten = 0;
  size_t nshards = 0;
  const char *index_name = (mode & 2) ? "model.safetensors.index.json" : "diffusion_pytorch_model.safetensors.index.json";
  put(index_name, p, (size_t)(index_end - p), NULL, 0, written[nwritten]);
  char index_path[512];
  memcpy(index_path, written[nwritten++], sizeof index_path);
  if (mode & 4) put("other.safetensors", "", 0, NULL, 0, written[nwritten++]);

  p = nul ? nul + 1 : end;
  while (p < end && nshards < MAX_SHARDS) {
    const uint8_t *sep = find2(p, end), *stop = sep ? sep : end;
    char name[32];
    snprintf(name, sizeof name, "s%zu.safetensors", nshards);
    const uint8_t *hnul = memchr(p, 0, (size_t)(stop - p));
    if (hnul && hnul > p) {
      size_t hlen = (size_t)(hnul - p);
      uint8_t prefix[8];
      for (int i = 0; i < 8; i++) prefix[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
      /* Header then data, without the NUL between them. */
      size_t total = 8 + hlen + (size_t)(stop - hnul - 1);
      uint8_t *img = malloc(total ? total : 1);
      if (!img) break;
      memcpy(img, prefix, 8);
      memcpy(img + 8, p, hlen);
      memcpy(img + 8 + hlen, hnul + 1, (size_t)(stop - hnul - 1));
      put(name, img, total, NULL, 0, written[nwritten]);
      free(img);
    } else {
      put(name, p, (size_t)(stop - p), NULL, 0, written[nwritten]);
    }
    nshards++;
    nwritten++;
    p = sep ? sep + 2 : end;
  }

  dit_safetensors_t *st = NULL;
  dit_status_t s = dit_safetensors_open((mode & 1) ? index_path : g_dir, &st);
  if (s) {
    if (dit_status_code(s) == DIT_CODE_OK || !dit_status_message(s)[0] || st) abort();
    dit_status_free(s);
  } else {
    /* Accepted: name-sorted, findable, every tensor in one of our shards and within it. */
    uint64_t sum = 0;
    size_t n = dit_safetensors_count(st);
    for (size_t i = 0; i < n; i++) {
      const dit_st_tensor_t *t = dit_safetensors_at(st, i);
      if (i && strcmp(dit_safetensors_at(st, i - 1)->name, t->name) >= 0) abort();
      if (dit_safetensors_find(st, t->name) != t) abort();
      int ours = 0;
      for (size_t k = 0; k < nwritten && !ours; k++) ours = !strcmp(t->file, written[k]);
      if (!ours) abort();
      uint64_t elems = 1;
      for (int d = 0; d < t->rank; d++) elems *= (uint64_t)t->dims[d];
      if (elems * dit_dtype_size(t->dtype) != t->nbytes) abort();
      if (t->nbytes > size + 8) abort(); /* no shard file is larger than the input plus a prefix */
      const uint8_t *b = t->data;
      for (uint64_t j = 0; j < t->nbytes; j++) sum += b[j];
    }
    g_sink += sum;
    dit_safetensors_close(st);
  }
  for (size_t k = 0; k < nwritten; k++) unlink(written[k]);
  return 0;
}
