/* redigest BUNDLE_DIR: rewrites BUNDLE_DIR/manifest.xxh128 from manifest.json, as a writer
 * would, so tests can hand the reader a consistently edited manifest whose content is wrong. */
#include <stdio.h>
#include <stdlib.h>

#include "artifacts/identity.h"
#include "base/fileio.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: redigest BUNDLE_DIR\n");
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/manifest.json", argv[1]);
  char *text = NULL;
  size_t n = 0;
  dit_status_t s = dit_file_read(path, 64u << 20, &text, &n);
  if (s) {
    fprintf(stderr, "redigest: %s\n", dit_status_message(s));
    dit_status_free(s);
    return 1;
  }
  char d[34];
  dit_hash128_hex(text, n, d);
  d[32] = '\n';
  free(text);
  snprintf(path, sizeof path, "%s/manifest.xxh128", argv[1]);
  s = dit_file_write_atomic(path, d, 33);
  if (s) {
    fprintf(stderr, "redigest: %s\n", dit_status_message(s));
    dit_status_free(s);
    return 1;
  }
  return 0;
}
