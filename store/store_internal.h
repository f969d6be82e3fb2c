/* Private to store/: the store object's fields and the helpers its files share (paths, the
 * SHA-256 context, whole-buffer writes, the action-cache reader). Nothing outside store/
 * includes this. */
#ifndef DIT_STORE_STORE_INTERNAL_H
#define DIT_STORE_STORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "store/store.h"

#define STORE_MANIFEST_MAX ((size_t)64 << 20)
#define STORE_SIG_MAX ((size_t)64 << 10)
#define STORE_MEMO_MAX ((size_t)16 << 20)
#define STORE_IO_CHUNK ((size_t)1 << 20)

struct dit_store {
  char *root, *cas, *ac, *bundles, *memo, *tmp, *lock_path;
  char *bundles_real; /* realpath of bundles/, to tell our own bundle directories */
  int lock_fd, lock_depth, lock_excl;
};

/* "a/b" (caller frees); NULL when out of memory. */
char *dit_store_join(const char *a, const char *b);
dit_status_t dit_store_oom(const char *what);
dit_status_t dit_store_write_fd(int fd, const char *path, const void *data, size_t n);
/* A new file dst (mode 0444, must not exist) with src's bytes, synced. */
dit_status_t dit_store_copy_file(const char *src, const char *dst);

/* SHA-256 through OpenSSL's EVP interface. */
typedef struct {
  EVP_MD_CTX *ctx;
} dit_store_sha_t;
dit_status_t dit_store_sha_init(dit_store_sha_t *s);
void dit_store_sha_update(dit_store_sha_t *s, const void *p, size_t n);
void dit_store_sha_hex(dit_store_sha_t *s, char out[DIT_SHA256_HEX]);
void dit_store_sha_free(dit_store_sha_t *s);

/* cas/<xx> for a hash, created if missing. */
dit_status_t dit_store_blob_dir(const dit_store_t *st, const char *hash, char out[4200]);
/* The hash of a blob writer's bytes once committed (import fills a manifest's sha256). */
const char *dit_store_blob_writer_sha256(const dit_store_blob_writer_t *w);

/* Remembers a blob a writer with this quota entered into cas (for rollback). */
dit_status_t dit_store_quota_record(dit_store_quota_t *q, const char *hash);

/* ac/<identity><suffix> (caller frees); INVALID_ARGUMENT unless identity is 32 hex. */
dit_status_t dit_store_ac_path(const dit_store_t *st, const char *identity, const char *suffix, char **out);
/* Reads and validates an entry (digest, parse, identity); touch marks it used. */
dit_status_t dit_store_read_entry(dit_store_t *st, const char *identity, int touch, dit_manifest_t **out_m,
                                  char **out_text, size_t *out_len);
/* 1 if every blob the manifest lists is in cas with its size. */
int dit_store_blobs_complete(const dit_store_t *st, const dit_manifest_t *m);

#endif
