/* Ed25519 manifest signatures through OpenSSL's EVP interface (format in sign.h). */
#include "store/sign.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "base/fileio.h"

#define SIG_MAGIC "ditc-signature 1\n"

/* The last OpenSSL error as text, for messages that name the API. */
static const char *ossl_reason(char buf[256]) {
  unsigned long e = ERR_get_error();
  if (!e) return "no detail";
  ERR_error_string_n(e, buf, 256);
  ERR_clear_error();
  return buf;
}

static void to_hex(const unsigned char *p, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  out[2 * n] = 0;
}

static int from_hex(const char *s, size_t n_hex, unsigned char *out) {
  for (size_t i = 0; i < n_hex; i++) {
    char c = s[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return 0;
    if (i % 2 == 0) out[i / 2] = (unsigned char)(v << 4);
    else out[i / 2] |= (unsigned char)v;
  }
  return 1;
}

static dit_status_t load_key(const char *path, int private_key, EVP_PKEY **out) {
  *out = NULL;
  FILE *f = fopen(path, "r");
  if (!f) return dit_status_make(errno == ENOENT ? DIT_CODE_NOT_FOUND : DIT_CODE_IO, "%s: cannot open key: %s", path, strerror(errno));
  EVP_PKEY *k = private_key ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : PEM_read_PUBKEY(f, NULL, NULL, NULL);
  fclose(f);
  char buf[256];
  if (!k)
    return DIT_ERR(INVALID_ARGUMENT, "%s: not a PEM %s key (%s: %s)", path, private_key ? "private" : "public",
                   private_key ? "PEM_read_PrivateKey" : "PEM_read_PUBKEY", ossl_reason(buf));
  if (EVP_PKEY_get_base_id(k) != EVP_PKEY_ED25519) {
    EVP_PKEY_free(k);
    return DIT_ERR(INVALID_ARGUMENT, "%s: expected an ed25519 key, found another algorithm", path);
  }
  *out = k;
  return DIT_OK;
}

static dit_status_t raw_public(EVP_PKEY *k, const char *path, unsigned char pub[32]) {
  size_t n = 32;
  char buf[256];
  if (EVP_PKEY_get_raw_public_key(k, pub, &n) != 1 || n != 32)
    return DIT_ERR(INTERNAL, "%s: EVP_PKEY_get_raw_public_key failed: %s", path, ossl_reason(buf));
  return DIT_OK;
}

dit_status_t dit_sign_keygen(const char *private_path, const char *public_path) {
  char buf[256];
  EVP_PKEY *k = NULL;
  EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, NULL);
  if (!ctx || EVP_PKEY_keygen_init(ctx) != 1 || EVP_PKEY_keygen(ctx, &k) != 1) {
    EVP_PKEY_CTX_free(ctx);
    return DIT_ERR(UNAVAILABLE, "EVP_PKEY_keygen(ed25519) failed: %s", ossl_reason(buf));
  }
  EVP_PKEY_CTX_free(ctx);
  dit_status_t s = DIT_OK;
  /* The private key is created exclusively and never readable by others. */
  int fd = open(private_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    s = dit_status_make(errno == EEXIST ? DIT_CODE_ALREADY_EXISTS : DIT_CODE_IO, "%s: cannot create: %s", private_path,
                        strerror(errno));
    if (fd >= 0) close(fd);
  } else {
    if (PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL) != 1)
      s = DIT_ERR(IO, "%s: PEM_write_PrivateKey failed: %s", private_path, ossl_reason(buf));
    if (fclose(f) != 0 && !s) s = DIT_ERR(IO, "%s: write failed: %s", private_path, strerror(errno));
    if (s) unlink(private_path);
  }
  if (!s) {
    FILE *p = fopen(public_path, "w");
    if (!p) s = DIT_ERR(IO, "%s: cannot create: %s", public_path, strerror(errno));
    else {
      if (PEM_write_PUBKEY(p, k) != 1) s = DIT_ERR(IO, "%s: PEM_write_PUBKEY failed: %s", public_path, ossl_reason(buf));
      if (fclose(p) != 0 && !s) s = DIT_ERR(IO, "%s: write failed: %s", public_path, strerror(errno));
    }
    if (s) unlink(private_path);
  }
  EVP_PKEY_free(k);
  return s;
}

dit_status_t dit_sign_text(const char *key_path, const void *text, size_t len, char **out_sig) {
  *out_sig = NULL;
  EVP_PKEY *k;
  DIT_RETURN_IF(load_key(key_path, 1, &k));
  unsigned char pub[32], sig[64];
  size_t slen = sizeof sig;
  char buf[256];
  dit_status_t s = raw_public(k, key_path, pub);
  EVP_MD_CTX *ctx = s ? NULL : EVP_MD_CTX_new();
  if (!s && (!ctx || EVP_DigestSignInit(ctx, NULL, NULL, NULL, k) != 1 ||
             EVP_DigestSign(ctx, sig, &slen, text, len) != 1 || slen != 64))
    s = DIT_ERR(INTERNAL, "%s: EVP_DigestSign(ed25519) failed: %s", key_path, ossl_reason(buf));
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(k);
  if (s) return s;
  char *out = malloc(sizeof SIG_MAGIC + 8 + 64 + 1 + 128 + 2);
  if (!out) return DIT_ERR(RESOURCE_EXHAUSTED, "signature: out of memory");
  char ph[65], sh[129];
  to_hex(pub, 32, ph);
  to_hex(sig, 64, sh);
  sprintf(out, "%sed25519 %s\n%s\n", SIG_MAGIC, ph, sh);
  *out_sig = out;
  return DIT_OK;
}

dit_status_t dit_sign_parse(const char *sig, size_t sig_len, const char *what, unsigned char out_pub[32],
                            unsigned char out_sig[64]) {
  /* Exactly: magic, "ed25519 " + 64 hex + "\n", 128 hex + "\n". */
  size_t ml = sizeof SIG_MAGIC - 1;
  size_t want = ml + 8 + 64 + 1 + 128 + 1;
  if (sig_len != want || memcmp(sig, SIG_MAGIC, ml) || memcmp(sig + ml, "ed25519 ", 8) || sig[ml + 72] != '\n' ||
      sig[want - 1] != '\n' || !from_hex(sig + ml + 8, 64, out_pub) || !from_hex(sig + ml + 73, 128, out_sig))
    return DIT_ERR(DATA_LOSS, "%s: signature is malformed: expected '%.16s', an ed25519 key line and 128 hex digits (%zu bytes), found %zu bytes",
                   what, SIG_MAGIC, want, sig_len);
  return DIT_OK;
}

dit_status_t dit_sign_verify(const char *trusted_key_path, const void *text, size_t len, const char *sig, size_t sig_len,
                             const char *what) {
  if (!sig)
    return DIT_ERR(FAILED_PRECONDITION, "%s: unsigned, but a trusted key (%s) is required: sign it with ditc cache push --sign-key",
                   what, trusted_key_path);
  EVP_PKEY *k;
  DIT_RETURN_IF(load_key(trusted_key_path, 0, &k));
  unsigned char pub[32], found_pub[32], sigb[64];
  dit_status_t s = raw_public(k, trusted_key_path, pub);
  if (!s) s = dit_sign_parse(sig, sig_len, what, found_pub, sigb);
  if (!s && memcmp(pub, found_pub, 32)) {
    char a[65], b[65];
    to_hex(pub, 32, a);
    to_hex(found_pub, 32, b);
    s = DIT_ERR(FAILED_PRECONDITION, "%s: signed by key %s, not by the trusted key %s (%s)", what, b, a, trusted_key_path);
  }
  if (!s) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, k) == 1 && EVP_DigestVerify(ctx, sigb, 64, text, len) == 1;
    EVP_MD_CTX_free(ctx);
    ERR_clear_error();
    if (!ok) s = DIT_ERR(DATA_LOSS, "%s: signature does not match its bytes (trusted key %s): the manifest was altered or forged", what, trusted_key_path);
  }
  EVP_PKEY_free(k);
  return s;
}
