/* Manifest signatures: ed25519 (OpenSSL libcrypto) over the exact bytes of a manifest. A
 * signature is a small text file (ac/<identity>.sig in a store, manifest.sig in a bundle):
 *   ditc-signature 1
 *   ed25519 <public key: 64 hex>
 *   <signature: 128 hex>
 * Keys are PEM files (PKCS#8 private key, SubjectPublicKeyInfo public key), the formats
 * `openssl genpkey -algorithm ed25519` writes, so keys can be made either way. */
#ifndef DIT_STORE_SIGN_H
#define DIT_STORE_SIGN_H

#include <stddef.h>

#include "base/status.h"

/* Writes a new key pair: private_path (mode 0600, must not exist) and public_path. */
dit_status_t dit_sign_keygen(const char *private_path, const char *public_path);

/* Signs text with the private key in key_path; *out_sig is the signature file's text
 * (caller frees). */
dit_status_t dit_sign_text(const char *key_path, const void *text, size_t len, char **out_sig);

/* Reads a signature file's text (exactly the format above) into its public key and signature
 * bytes; DATA_LOSS naming `what` when it is anything else. Needs no key. */
dit_status_t dit_sign_parse(const char *sig, size_t sig_len, const char *what, unsigned char out_pub[32],
                            unsigned char out_sig[64]);

/* Checks that sig (a signature file's text, NULL when there is none) is a valid signature
 * of text by the public key in trusted_key_path. `what` names the manifest in errors, which
 * say whether it was unsigned, signed by another key, or the signature does not match. */
dit_status_t dit_sign_verify(const char *trusted_key_path, const void *text, size_t len,
                             const char *sig, size_t sig_len, const char *what);

#endif
