/* SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104) and a constant-time compare: what the launch's
 * peer authentication needs, without linking a crypto library into the runtime. */
#ifndef DIT_BASE_SHA256_H
#define DIT_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DIT_SHA256_BYTES 32
#define DIT_SHA256_BLOCK_BYTES 64

/* A plain value; copy it to hash several messages that share a prefix. */
typedef struct dit_sha256 {
  uint32_t h[8];
  uint64_t total; /* bytes hashed so far */
  unsigned char buf[DIT_SHA256_BLOCK_BYTES];
  size_t n_buf;
} dit_sha256_t;

void dit_sha256_init(dit_sha256_t *c);
void dit_sha256_update(dit_sha256_t *c, const void *data, size_t n);
/* Writes the digest; c must be initialized again before reuse. */
void dit_sha256_final(dit_sha256_t *c, unsigned char out[DIT_SHA256_BYTES]);
void dit_sha256_digest(const void *data, size_t n, unsigned char out[DIT_SHA256_BYTES]);

typedef struct dit_hmac_sha256 {
  dit_sha256_t inner, outer;
} dit_hmac_sha256_t;

/* Any key length (a key longer than a block is hashed first, as RFC 2104 says). */
void dit_hmac_sha256_init(dit_hmac_sha256_t *c, const void *key, size_t key_len);
void dit_hmac_sha256_update(dit_hmac_sha256_t *c, const void *data, size_t n);
void dit_hmac_sha256_final(dit_hmac_sha256_t *c, unsigned char out[DIT_SHA256_BYTES]);
void dit_hmac_sha256_digest(const void *key, size_t key_len, const void *data, size_t n,
                            unsigned char out[DIT_SHA256_BYTES]);

/* 1 when the n bytes at a and b are equal. Its time depends on n only, never on where the
 * bytes differ, so a peer cannot learn a MAC byte by byte from how fast it is refused. */
int dit_crypto_equal(const void *a, const void *b, size_t n);

/* Zeroes n bytes in a way the compiler may not drop (for keys that go out of scope). */
void dit_crypto_wipe(void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif
