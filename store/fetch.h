/* What the runtime is handed, turned into a bundle directory it can open and validate: a
 * bundle directory as is; a .ditb archive imported into a store and materialized; an
 * identity materialized from a local store, or pulled from a remote store first (only the
 * blobs the local store lacks). With a trusted key, whatever comes out must carry a
 * signature by it (manifest.sig over manifest.json). */
#ifndef DIT_STORE_FETCH_H
#define DIT_STORE_FETCH_H

#include "base/status.h"
#include "store/store.h"

typedef struct dit_fetch_options {
  const char *store;       /* a remote URL or a local store directory; NULL: none */
  const char *cache_dir;   /* local store receiving pulls and archives; NULL: $DITC_STORE, else
                              ~/.cache/ditc/store for pulls and a temporary store for archives */
  const char *trusted_key; /* PEM ed25519 public key; NULL: signatures not required */
  const char *token;       /* bearer token for the remote; NULL: none */
  int insecure_token;      /* send it over plain http:// to a host that is not loopback too */
  int timeout_s, retries;  /* remote: as dit_remote_options_t */
  int verbose;             /* transfer lines on stderr */
  dit_store_limits_t limits; /* what one pull or archive import may bring in; zeros: defaults */
} dit_fetch_options_t;

typedef struct dit_fetched dit_fetched_t;

/* Resolves `what` (a directory, an archive path, or with opts->store an identity). The
 * caller owns *out; dit_fetched_destroy removes a temporary store, so it comes after the
 * bundle is closed. */
dit_status_t dit_fetch_bundle(const char *what, const dit_fetch_options_t *opts, dit_fetched_t **out);
const char *dit_fetched_dir(const dit_fetched_t *f);
void dit_fetched_destroy(dit_fetched_t *f);

/* Checks dir/manifest.sig over dir/manifest.json against the PEM public key. */
dit_status_t dit_fetch_check_signature(const char *dir, const char *trusted_key);

#endif
