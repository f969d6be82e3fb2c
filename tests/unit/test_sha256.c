/* SHA-256 and HMAC-SHA256 of base/sha256.c: the FIPS 180-4 and RFC 4231 vectors, every split
 * of a message into updates, keys around the block size, OpenSSL's HMAC on random inputs
 * (libcrypto loaded at run time, so the runtime's code is checked against an independent
 * implementation without the tests depending on how libraries are linked), and the
 * constant-time compare. */
#include <dlfcn.h>
#include <stdint.h>

#include "base/sha256.h"
#include "check.h"

static void hex(const unsigned char *p, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", p[i]);
}

static int digest_is(const unsigned char *d, size_t n, const char *want) {
  char h[2 * DIT_SHA256_BYTES + 1];
  hex(d, n, h);
  if (strcmp(h, want)) fprintf(stderr, "  got  %s\n  want %s\n", h, want);
  return !strcmp(h, want);
}

static void test_fips_vectors(void) {
  static const struct {
    const char *msg, *digest;
  } v[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    unsigned char d[DIT_SHA256_BYTES];
    dit_sha256_digest(v[i].msg, strlen(v[i].msg), d);
    CHECK(digest_is(d, sizeof d, v[i].digest));
    /* Every split into two updates gives the same digest (buffering across blocks). */
    size_t n = strlen(v[i].msg);
    for (size_t cut = 0; cut <= n; cut++) {
      dit_sha256_t c;
      unsigned char e[DIT_SHA256_BYTES];
      dit_sha256_init(&c);
      dit_sha256_update(&c, v[i].msg, cut);
      dit_sha256_update(&c, v[i].msg + cut, n - cut);
      dit_sha256_final(&c, e);
      if (memcmp(d, e, sizeof d)) {
        CHECK(!"split digest differs");
        fprintf(stderr, "  vector %zu, cut at %zu\n", i, cut);
        break;
      }
    }
  }
  /* One million 'a', fed in uneven pieces. */
  static char a[1000];
  memset(a, 'a', sizeof a);
  dit_sha256_t c;
  dit_sha256_init(&c);
  size_t left = 1000000, step = 1;
  while (left) {
    size_t k = step < left ? step : left;
    if (k > sizeof a) k = sizeof a;
    dit_sha256_update(&c, a, k);
    left -= k;
    step = step * 3 % 997 + 1;
  }
  unsigned char d[DIT_SHA256_BYTES];
  dit_sha256_final(&c, d);
  CHECK(digest_is(d, sizeof d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

static void test_rfc4231_vectors(void) {
  unsigned char k0b[20], kaa[20], k01[25], k0c[20], kaa131[131], ddd[50], dcd[50];
  memset(k0b, 0x0b, sizeof k0b);
  memset(kaa, 0xaa, sizeof kaa);
  for (int i = 0; i < 25; i++) k01[i] = (unsigned char)(i + 1);
  memset(k0c, 0x0c, sizeof k0c);
  memset(kaa131, 0xaa, sizeof kaa131);
  memset(ddd, 0xdd, sizeof ddd);
  memset(dcd, 0xcd, sizeof dcd);
  static const char *big =
      "This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed "
      "before being used by the HMAC algorithm.";
  const struct {
    const void *key;
    size_t klen;
    const void *data;
    size_t dlen;
    size_t out_len; /* test case 5 is truncated to 128 bits */
    const char *mac;
  } v[] = {
      {k0b, 20, "Hi There", 8, 32, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", 4, "what do ya want for nothing?", 28, 32, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {kaa, 20, ddd, 50, 32, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {k01, 25, dcd, 50, 32, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {k0c, 20, "Test With Truncation", 20, 16, "a3b6167473100ee06e0c796c2955552b"},
      {kaa131, 131, "Test Using Larger Than Block-Size Key - Hash Key First", 54, 32,
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {kaa131, 131, big, strlen(big), 32, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    unsigned char m[DIT_SHA256_BYTES];
    dit_hmac_sha256_digest(v[i].key, v[i].klen, v[i].data, v[i].dlen, m);
    CHECK(digest_is(m, v[i].out_len, v[i].mac));
    if (strlen(v[i].mac) != 2 * v[i].out_len) CHECK(!"bad vector");
    /* The streaming interface, one byte at a time. */
    dit_hmac_sha256_t c;
    dit_hmac_sha256_init(&c, v[i].key, v[i].klen);
    for (size_t b = 0; b < v[i].dlen; b++) dit_hmac_sha256_update(&c, (const char *)v[i].data + b, 1);
    unsigned char m2[DIT_SHA256_BYTES];
    dit_hmac_sha256_final(&c, m2);
    CHECK(!memcmp(m, m2, sizeof m));
  }
}

typedef const void *(*evp_md_fn)(void);
typedef unsigned char *(*hmac_fn)(const void *md, const void *key, int key_len, const unsigned char *d, size_t n,
                                  unsigned char *out, unsigned int *out_len);

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 11);
}

static void test_against_openssl(void) {
  void *lib = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libcrypto.so", RTLD_NOW | RTLD_LOCAL);
  /* scripts/setup.sh installs libssl-dev: its absence is a broken setup, not a skip. */
  CHECK(lib != NULL);
  if (!lib) {
    fprintf(stderr, "cannot load libcrypto: %s\n", dlerror());
    return;
  }
  evp_md_fn sha256 = (evp_md_fn)dlsym(lib, "EVP_sha256");
  hmac_fn hmac = (hmac_fn)dlsym(lib, "HMAC");
  CHECK(sha256 && hmac);
  if (!sha256 || !hmac) return;
  static unsigned char key[300], data[5000];
  int mismatches = 0;
  for (int t = 0; t < 2000; t++) {
    /* Key lengths cluster around the block size, where HMAC's key handling changes. */
    size_t klen = t % 3 == 0 ? 60 + next_u32() % 9 : next_u32() % sizeof key;
    size_t dlen = t % 5 == 0 ? next_u32() % sizeof data : next_u32() % 200;
    for (size_t i = 0; i < klen; i++) key[i] = (unsigned char)next_u32();
    for (size_t i = 0; i < dlen; i++) data[i] = (unsigned char)next_u32();
    unsigned char ours[DIT_SHA256_BYTES], theirs[64];
    unsigned int tl = 0;
    dit_hmac_sha256_digest(key, klen, data, dlen, ours);
    if (!hmac(sha256(), key, (int)klen, data, dlen, theirs, &tl) || tl != DIT_SHA256_BYTES ||
        memcmp(ours, theirs, DIT_SHA256_BYTES)) {
      if (mismatches++ < 3) fprintf(stderr, "HMAC differs from OpenSSL: key %zu bytes, data %zu bytes\n", klen, dlen);
    }
  }
  CHECK_EQ_INT(mismatches, 0);
  dlclose(lib);
}

static void test_equal(void) {
  unsigned char a[32], b[32];
  for (int i = 0; i < 32; i++) a[i] = b[i] = (unsigned char)(i * 37);
  CHECK_EQ_INT(dit_crypto_equal(a, b, 32), 1);
  CHECK_EQ_INT(dit_crypto_equal(a, b, 0), 1);
  for (int i = 0; i < 32; i++)
    for (int bit = 0; bit < 8; bit++) {
      b[i] ^= (unsigned char)(1 << bit);
      if (dit_crypto_equal(a, b, 32) != 0) CHECK(!"a one-bit difference compared equal");
      b[i] ^= (unsigned char)(1 << bit);
    }
  unsigned char w[16];
  memset(w, 0x5a, sizeof w);
  dit_crypto_wipe(w, sizeof w);
  unsigned char z[16] = {0};
  CHECK(!memcmp(w, z, sizeof z));
}

int main(void) {
  test_fips_vectors();
  test_rfc4231_vectors();
  test_against_openssl();
  test_equal();
  return check_summary("test_sha256");
}
