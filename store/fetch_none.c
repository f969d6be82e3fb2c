/* fetch.h for a runtime built without the store (-DDIT_STORE=OFF): a bundle directory is
 * handed through as is; a store identity, a .ditb archive, a remote or a trusted key is
 * refused with a message saying this build lacks the store, so such a ditrun links neither
 * libcurl nor libcrypto. */
#include "store/fetch.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "artifacts/identity.h"
#include "base/fileio.h"

#define NO_STORE "this ditrun was built without store support (-DDIT_STORE=OFF)"

struct dit_fetched {
  char *dir;
};

const char *dit_fetched_dir(const dit_fetched_t *f) { return f->dir; }

void dit_fetched_destroy(dit_fetched_t *f) {
  if (!f) return;
  free(f->dir);
  free(f);
}

dit_status_t dit_fetch_check_signature(const char *dir, const char *trusted_key) {
  return DIT_ERR(UNIMPLEMENTED, "%s: --trusted-key %s: %s and cannot check signatures; run a ditrun built with -DDIT_STORE=ON",
                 dir, trusted_key, NO_STORE);
}

/* The archive magic, read here rather than from archive.c, which this build leaves out. */
static int looks_like_archive(const char *path) {
  static const uint8_t magic[8] = {'D', 'I', 'T', 'B', '\r', '\n', 0x1a, '\n'};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  uint8_t m[8];
  ssize_t n = read(fd, m, sizeof m);
  close(fd);
  return n == (ssize_t)sizeof m && !memcmp(m, magic, sizeof m);
}

dit_status_t dit_fetch_bundle(const char *what, const dit_fetch_options_t *o, dit_fetched_t **out) {
  *out = NULL;
  if (o->store)
    return DIT_ERR(UNIMPLEMENTED, "%s: --store %s: %s; pass a bundle directory, or run a ditrun built with -DDIT_STORE=ON", what,
                   o->store, NO_STORE);
  if (!dit_is_dir(what) && looks_like_archive(what))
    return DIT_ERR(UNIMPLEMENTED, "%s: a .ditb archive: %s and cannot import archives; pass a bundle directory, or run a ditrun "
                   "built with -DDIT_STORE=ON", what, NO_STORE);
  if (dit_is_hash_hex(what) && !dit_path_exists(what))
    return DIT_ERR(UNIMPLEMENTED, "%s: no such bundle directory, and running a store identity needs the store: %s", what, NO_STORE);
  if (o->trusted_key) return dit_fetch_check_signature(what, o->trusted_key);
  dit_fetched_t *f = calloc(1, sizeof *f);
  if (f) f->dir = strdup(what);
  if (!f || !f->dir) {
    dit_fetched_destroy(f);
    return DIT_ERR(RESOURCE_EXHAUSTED, "%s: out of memory", what);
  }
  *out = f;
  return DIT_OK;
}
