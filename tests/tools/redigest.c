/* redigest BUNDLE_DIR [--blob HASH]: rewrites BUNDLE_DIR/manifest.xxh128 from manifest.json, as
 * a writer would, so tests can hand the reader a consistently edited manifest whose content is
 * wrong. With --blob, blobs/HASH was edited in place first: it is renamed to the hash of its new
 * bytes and the manifest follows (its blob entry's hash and size, with no SHA-256, and every
 * rank, layout and plan reference to it), so an edited plan blob reaches the reader too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts/identity.h"
#include "artifacts/manifest.h"
#include "base/fileio.h"

static int fail(dit_status_t s) {
  fprintf(stderr, "redigest: %s\n", dit_status_message(s));
  dit_status_free(s);
  return 1;
}

/* Renames blobs/old to the hash of its bytes and rewrites manifest.json to match. */
static dit_status_t rename_blob(const char *dir, const char *old) {
  char path[4096], to[4096], hex[33];
  snprintf(path, sizeof path, "%s/blobs/%s", dir, old);
  char *data = NULL;
  size_t n = 0;
  DIT_RETURN_IF(dit_file_read(path, 1u << 30, &data, &n));
  dit_hash128_hex(data, n, hex);
  free(data);
  const size_t size = n;
  snprintf(to, sizeof to, "%s/blobs/%s", dir, hex);
  if (rename(path, to)) return DIT_ERR(INTERNAL, "cannot rename %s to %s", path, to);
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  char *text = NULL;
  DIT_RETURN_IF(dit_file_read(path, 64u << 20, &text, &n));
  dit_manifest_t *m = NULL;
  dit_status_t s = dit_manifest_parse(text, n, path, &m);
  free(text);
  if (s) return s;
  int found = 0;
  for (size_t i = 0; i < m->n_blobs; i++)
    if (!strcmp(m->blobs[i].hash, old)) memcpy(m->blobs[i].hash, hex, sizeof hex), m->blobs[i].size = size, m->blobs[i].sha256[0] = 0, found = 1;
  for (size_t i = 0; i < m->n_ranks; i++) {
    if (!strcmp(m->ranks[i].plan, old)) memcpy(m->ranks[i].plan, hex, sizeof hex);
    if (!strcmp(m->ranks[i].weights, old)) memcpy(m->ranks[i].weights, hex, sizeof hex);
  }
  for (size_t i = 0; i < m->n_weights; i++)
    if (!strcmp(m->weights[i].blob, old)) memcpy(m->weights[i].blob, hex, sizeof hex);
  if (!found) s = DIT_ERR(NOT_FOUND, "%s: no blob %s", path, old);
  if (!s) s = dit_manifest_to_json(m, &text);
  if (!s) s = dit_file_write_atomic(path, text, strlen(text));
  if (!s) free(text);
  dit_manifest_free(m);
  return s;
}

int main(int argc, char **argv) {
  if (argc != 2 && !(argc == 4 && !strcmp(argv[2], "--blob"))) {
    fprintf(stderr, "usage: redigest BUNDLE_DIR [--blob HASH]\n");
    return 2;
  }
  dit_status_t s = argc == 4 ? rename_blob(argv[1], argv[3]) : DIT_OK;
  if (s) return fail(s);
  char path[4096];
  snprintf(path, sizeof path, "%s/manifest.json", argv[1]);
  char *text = NULL;
  size_t n = 0;
  s = dit_file_read(path, 64u << 20, &text, &n);
  if (s) return fail(s);
  char d[34];
  dit_hash128_hex(text, n, d);
  d[32] = '\n';
  free(text);
  snprintf(path, sizeof path, "%s/manifest.xxh128", argv[1]);
  s = dit_file_write_atomic(path, d, 33);
  return s ? fail(s) : 0;
}
