/* SHA-256 and HMAC-SHA256, written from FIPS 180-4 and RFC 2104; tested against their
 * published vectors and against OpenSSL on random inputs (tests/unit/test_sha256.c). */
#include "base/sha256.h"

#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, int n) { return x >> n | x << (32 - n); }

static void compress(uint32_t h[8], const unsigned char *p) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 | p[4 * t + 3];
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ w[t - 15] >> 3;
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ w[t - 2] >> 10;
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int t = 0; t < 64; t++) {
    uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void dit_sha256_init(dit_sha256_t *c) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(c->h, h0, sizeof h0);
  c->total = 0;
  c->n_buf = 0;
}

void dit_sha256_update(dit_sha256_t *c, const void *data, size_t n) {
  const unsigned char *p = data;
  c->total += n;
  if (c->n_buf) {
    size_t take = DIT_SHA256_BLOCK_BYTES - c->n_buf < n ? DIT_SHA256_BLOCK_BYTES - c->n_buf : n;
    memcpy(c->buf + c->n_buf, p, take);
    c->n_buf += take, p += take, n -= take;
    if (c->n_buf < DIT_SHA256_BLOCK_BYTES) return;
    compress(c->h, c->buf);
    c->n_buf = 0;
  }
  for (; n >= DIT_SHA256_BLOCK_BYTES; p += DIT_SHA256_BLOCK_BYTES, n -= DIT_SHA256_BLOCK_BYTES) compress(c->h, p);
  if (n) memcpy(c->buf, p, n);
  c->n_buf = n;
}

void dit_sha256_final(dit_sha256_t *c, unsigned char out[DIT_SHA256_BYTES]) {
  const uint64_t bits = c->total * 8;
  unsigned char pad[DIT_SHA256_BLOCK_BYTES + 8] = {0x80};
  /* The message, 0x80, zeros, then the 64-bit bit length: a whole number of blocks. */
  size_t n_pad = (c->n_buf < 56 ? 56 : 120) - c->n_buf;
  for (int i = 0; i < 8; i++) pad[n_pad + i] = (unsigned char)(bits >> (56 - 8 * i));
  dit_sha256_update(c, pad, n_pad + 8);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (unsigned char)(c->h[i] >> 24), out[4 * i + 1] = (unsigned char)(c->h[i] >> 16);
    out[4 * i + 2] = (unsigned char)(c->h[i] >> 8), out[4 * i + 3] = (unsigned char)c->h[i];
  }
  dit_crypto_wipe(c, sizeof *c);
}

void dit_sha256_digest(const void *data, size_t n, unsigned char out[DIT_SHA256_BYTES]) {
  dit_sha256_t c;
  dit_sha256_init(&c);
  dit_sha256_update(&c, data, n);
  dit_sha256_final(&c, out);
}

void dit_hmac_sha256_init(dit_hmac_sha256_t *c, const void *key, size_t key_len) {
  unsigned char k[DIT_SHA256_BLOCK_BYTES] = {0}, pad[DIT_SHA256_BLOCK_BYTES];
  if (key_len > DIT_SHA256_BLOCK_BYTES) dit_sha256_digest(key, key_len, k);
  else if (key_len) memcpy(k, key, key_len);
  for (int i = 0; i < DIT_SHA256_BLOCK_BYTES; i++) pad[i] = k[i] ^ 0x36;
  dit_sha256_init(&c->inner);
  dit_sha256_update(&c->inner, pad, sizeof pad);
  for (int i = 0; i < DIT_SHA256_BLOCK_BYTES; i++) pad[i] = k[i] ^ 0x5c;
  dit_sha256_init(&c->outer);
  dit_sha256_update(&c->outer, pad, sizeof pad);
  dit_crypto_wipe(k, sizeof k);
  dit_crypto_wipe(pad, sizeof pad);
}

void dit_hmac_sha256_update(dit_hmac_sha256_t *c, const void *data, size_t n) { dit_sha256_update(&c->inner, data, n); }

void dit_hmac_sha256_final(dit_hmac_sha256_t *c, unsigned char out[DIT_SHA256_BYTES]) {
  unsigned char ih[DIT_SHA256_BYTES];
  dit_sha256_final(&c->inner, ih);
  dit_sha256_update(&c->outer, ih, sizeof ih);
  dit_sha256_final(&c->outer, out);
  dit_crypto_wipe(ih, sizeof ih);
}

void dit_hmac_sha256_digest(const void *key, size_t key_len, const void *data, size_t n,
                            unsigned char out[DIT_SHA256_BYTES]) {
  dit_hmac_sha256_t c;
  dit_hmac_sha256_init(&c, key, key_len);
  dit_hmac_sha256_update(&c, data, n);
  dit_hmac_sha256_final(&c, out);
}

int dit_crypto_equal(const void *a, const void *b, size_t n) {
  const volatile unsigned char *x = a, *y = b;
  unsigned char d = 0;
  for (size_t i = 0; i < n; i++) d |= x[i] ^ y[i];
  /* 1 iff d == 0, without a branch on d. */
  return (int)(1 & ((unsigned)d - 1) >> 8);
}

void dit_crypto_wipe(void *p, size_t n) {
  volatile unsigned char *v = p;
  while (n--) *v++ = 0;
}
