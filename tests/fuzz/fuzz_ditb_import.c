/* libFuzzer target for importing a .ditb archive into a store (fuzz_ditb only checks one):
 * every input goes into a fresh scratch store, as it is and again with its manifest and
 * signature records renamed by the hash of their bytes (most mutations of a manifest would
 * otherwise stop at that name check and never reach the parser, the identity, the limits or
 * the blobs). An accepted archive must leave a complete entry; a refused one must leave no
 * entry, no blob and no temporary behind. Blobs are capped at 64 MiB decoded, so no input can
 * ask for unbounded work. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifacts/identity.h"
#include "base/fileio.h"
#include "fuzz_scratch.h"
#include "store/archive.h"

static char g_root[256];

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* Renames manifest and signature records in place by the XXH3-128 of their bytes, as far as
 * the records are well framed; 1 if anything changed. */
static int fix_names(uint8_t *p, size_t size) {
  size_t off = 16;
  int changed = 0;
  while (size - off >= 24 && off <= size) {
    uint32_t kind = (uint32_t)get_le(p + off, 4), name_len = (uint32_t)get_le(p + off + 4, 4);
    uint64_t stored = get_le(p + off + 16, 8);
    off += 24;
    if (name_len > size - off || stored > size - off - name_len) break;
    if ((kind == 1 || kind == 2) && name_len == 32) {
      char hex[33];
      dit_hash128_hex(p + off + name_len, (size_t)stored, hex);
      changed |= memcmp(p + off, hex, 32) != 0;
      memcpy(p + off, hex, 32);
    }
    off += name_len + (size_t)stored;
  }
  return changed;
}

static void import_one(const uint8_t *data, size_t size) {
  if (!g_root[0]) fuzz_scratch_root(g_root, sizeof g_root, "fuzz_ditb_import");
  dit_status_free(dit_remove_tree(g_root));
  dit_store_t *st = NULL;
  dit_status_t s = dit_store_open(g_root, &st);
  if (s) {
    fprintf(stderr, "scratch store: %s\n", dit_status_message(s));
    abort();
  }
  dit_store_limits_t limits = {(uint64_t)64 << 20, 0};
  char id[33];
  s = dit_ditb_import(st, data, size, "fuzz.ditb", NULL, &limits, id);
  if (!s) {
    if (!dit_store_has_entry(st, id)) abort();
  } else {
    if (!dit_status_message(s)[0]) abort();
    if (fuzz_scratch_count(g_root, "ac", 0) || fuzz_scratch_count(g_root, "cas", 1)) abort();
  }
  if (fuzz_scratch_count(g_root, "tmp", 0)) abort();
  dit_status_free(s);
  dit_store_close(st);
  dit_status_free(dit_remove_tree(g_root));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  import_one(data, size);
  if (size < 16) return 0;
  uint8_t *copy = malloc(size);
  if (!copy) return 0;
  memcpy(copy, data, size);
  if (fix_names(copy, size)) import_one(copy, size);
  free(copy);
  return 0;
}
